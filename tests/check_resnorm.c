/* The fused residual + norm (oclml_residual_layernorm, oclml_residual_rmsnorm and their
 * backwards): r against x + dropout(y) bit for bit (the host's copy of the dropout rule), out and
 * the statistics against the double reference of the norm of r, the backward's dx = dr + the
 * norm's dx, dy through the mask and the parameter gradients against the reference; the register
 * path and the long-row path; in place; finite differences; NaN; bad input. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct res_case {
    int rms;
    size_t rows, cols;
    float p;         /* dropout: 0 none */
    uint64_t offset; /* Philox offset */
    bool affine;     /* gamma and beta given */
    bool with_dr;    /* dr given */
    bool in_place;   /* r over x, dx over dr */
} res_case;

static const res_case CASES[] = {{0, 1, 1, 0.0f, 0, true, true, false},
                                 {0, 3, 5, 0.1f, 0, true, true, false},
                                 {0, 37, 33, 0.5f, (1ull << 32) + 1, false, false, true},
                                 {1, 7, 1000, 0.1f, 3, true, true, true},
                                 {0, 5, 768, 0.0f, 0, true, true, true},
                                 {1, 3, 4099, 0.0f, 0, false, true, false},
                                 {0, 2, 40000, 0.2f, 9, true, true, true},
                                 {1, 2, 40000, 0.0f, 0, true, false, true},
                                 /* the sweep's: the other rows x cols of odd shapes, p 1 */
                                 {0, 37, 1000, 0.5f, 0, true, true, false},
                                 {1, 37, 4099, 0.1f, (1ull << 32) + 1, true, true, true},
                                 {0, 37, 4099, 0.1f, 0, false, true, true},
                                 {1, 1, 33, 0.5f, 2, true, false, false},
                                 {0, 3, 1, 0.1f, (1ull << 32) + 1, true, true, false},
                                 {1, 37, 5, 0.5f, 0, false, true, true},
                                 {0, 3, 1000, 1.0f, 5, true, true, false},
                                 {1, 3, 1000, 1.0f, 0, true, true, true}};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])
/* The quick tier: the first 8 cases (the long rows, 40000, take the chunked path; the rest the
 * register variants a device picks for their lengths). */
#define N_QUICK 8

static oclml_dropout_params drop_of(const res_case *c) {
    return test_dropout_params(c->p, 0xfeedfacecafebeefull, c->offset);
}

static float mask_of(const oclml_dropout_params *d, size_t i) {
    if (d->p == 0.0f) return 1.0f;
    if (d->p == 1.0f) return 0.0f;
    return ref_dropout_keep(d->seed, d->offset, i, d->p) ? 1.0f / (1.0f - d->p) : 0.0f;
}

/* The host's r: x + y m with the product rounded first (oclml_dropout_add's arithmetic). */
static float host_r(float x, float y, const oclml_dropout_params *d, size_t i) {
    float t = y * mask_of(d, i);
    return x + t;
}

START_TEST(forward_and_backward_match_the_reference) {
    const res_case *c = &CASES[_i];
    const size_t R = c->rows, C = c->cols, n = R * C, shape[2] = {R, C};
    const oclml_dropout_params d = drop_of(c);
    float *x = test_floats(n), *y = test_floats(n), *g = test_floats(C), *b = test_floats(C),
          *r = test_floats(n), *out = test_floats(n), *mean = test_floats(R),
          *rstd = test_floats(R), *dout = test_floats(n), *dr = test_floats(n),
          *dx = test_floats(n), *dy = test_floats(n), *dg = test_floats(C), *db = test_floats(C);
    test_random(x, n, -2, 3);
    test_random(y, n, -1, 1);
    test_random(g, C, 0.5f, 1.5f);
    test_random(b, C, -1, 1);
    test_random(dout, n, -1, 1);
    test_random(dr, n, -1, 1);
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor_from(2, shape, y),
                 *G = test_tensor_from(1, &C, g), *B = test_tensor_from(1, &C, b),
                 *Rt = c->in_place ? X : test_tensor(2, shape), *O = test_tensor(2, shape),
                 *M = test_tensor(1, &R), *S = test_tensor(1, &R);
    const oclml_dropout_params *dp = c->p > 0 || _i % 2 ? &d : NULL;
    if (c->rms)
        ASSERT_OK(oclml_residual_rmsnorm(T, dp, X, Y, c->affine ? G : NULL, 1e-5f, Rt, O, S));
    else
        ASSERT_OK(oclml_residual_layernorm(T, dp, X, Y, c->affine ? G : NULL, c->affine ? B : NULL,
                                           1e-5f, Rt, O, M, S));
    test_read(Rt, r, n);
    test_read(O, out, n);
    test_read(S, rstd, R);
    if (!c->rms) test_read(M, mean, R);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(r[i] == host_r(x[i], y[i], &d, i), "r[%zu] = %g, want %g", i, (double)r[i],
                      (double)host_r(x[i], y[i], &d, i));
    double *ref = test_doubles(n), *rm = test_doubles(R), *rr = test_doubles(R);
    ref_norm(c->rms, R, C, r, c->affine ? g : NULL, c->affine && !c->rms ? b : NULL, 1e-5, ref, rm,
             rr);
    test_assert_close("out", out, ref, n, TOL_ELEMENTWISE * 4);
    test_assert_close("rstd", rstd, rr, R, TOL_ELEMENTWISE * 4);

    /* backward: dx = dr + the norm's dx, dy = dx * mask, dgamma, dbeta */
    oclml_tensor *DO = test_tensor_from(2, shape, dout), *DR = test_tensor_from(2, shape, dr),
                 *DX = c->in_place ? DR : test_tensor(2, shape), *DY = test_tensor(2, shape),
                 *DG = test_tensor(1, &C), *DB = test_tensor(1, &C);
    if (c->rms)
        ASSERT_OK(oclml_residual_rmsnorm_backward(T, dp, Rt, c->affine ? G : NULL, S, DO,
                                                  c->with_dr ? DR : NULL, DX, DY, DG));
    else
        ASSERT_OK(oclml_residual_layernorm_backward(T, dp, Rt, c->affine ? G : NULL, M, S, DO,
                                                    c->with_dr ? DR : NULL, DX, DY, DG, DB));
    test_read(DX, dx, n);
    test_read(DY, dy, n);
    test_read(DG, dg, C);
    double *rdx = test_doubles(n), *rdg = test_doubles(C), *rdb = test_doubles(C),
           *scale = test_doubles(n);
    ref_norm_backward(c->rms, R, C, r, c->affine ? g : NULL, mean, rstd, dout, rdx, rdg, rdb,
                      scale);
    for (size_t i = 0; i < n; i++) {
        if (c->with_dr) rdx[i] += dr[i];
        scale[i] += c->with_dr ? fabs(dr[i]) : 0;
    }
    test_assert_close_scaled("dx", dx, rdx, scale, n, TOL_REDUCTION);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(dy[i] == dx[i] * mask_of(&d, i), "dy[%zu] = %g, dx %g", i, (double)dy[i],
                      (double)dx[i]);
    test_assert_close("dgamma", dg, rdg, C, TOL_REDUCTION);
    if (!c->rms) {
        test_read(DB, db, C);
        test_assert_close("dbeta", db, rdb, C, TOL_REDUCTION);
    }
    oclml_tensor *all[] = {X, Y, G, B, O, M, S, DO, DR, DY, DG, DB};
    for (int i = 0; i < 12; i++) oclml_tensor_destroy(all[i]);
    if (!c->in_place) {
        oclml_tensor_destroy(Rt);
        oclml_tensor_destroy(DX);
    }
    float *fs[] = {x, y, g, b, r, out, mean, rstd, dout, dr, dx, dy, dg, db};
    for (int i = 0; i < 14; i++) free(fs[i]);
    double *ds[] = {ref, rm, rr, rdx, rdg, rdb, scale};
    for (int i = 0; i < 7; i++) free(ds[i]);
}
END_TEST

/* L = sum(w1 out) + sum(w2 r): the backward with dout = w1 and dr = w2 gives dL/dx in dx and
 * dL/dy in dy (dropout on: the mask is fixed by the seed), and dL/dgamma, dL/dbeta; each against
 * central differences of the forward. */
START_TEST(backward_by_finite_differences) {
    const int rms = _i;
    const size_t R = 3, C = 6, n = R * C, shape[2] = {R, C};
    oclml_dropout_params d;
    ASSERT_OK(oclml_dropout_params_init(&d));
    d.p = 0.25f;
    d.seed = 11;
    float *x = test_floats(n), *y = test_floats(n), *g = test_floats(C), *b = test_floats(C),
          *w1 = test_floats(n), *w2 = test_floats(n), *h = test_floats(n), *rv = test_floats(n),
          *dx = test_floats(n), *dy = test_floats(n), *dg = test_floats(C), *db = test_floats(C);
    test_random(x, n, -1, 1);
    test_random(y, n, -1, 1);
    test_random(g, C, 0.5f, 1.5f);
    test_random(b, C, -1, 1);
    test_random(w1, n, -1, 1);
    test_random(w2, n, -1, 1);
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor_from(2, shape, y),
                 *G = test_tensor_from(1, &C, g), *B = test_tensor_from(1, &C, b),
                 *Rt = test_tensor(2, shape), *O = test_tensor(2, shape), *M = test_tensor(1, &R),
                 *S = test_tensor(1, &R), *W1 = test_tensor_from(2, shape, w1),
                 *W2 = test_tensor_from(2, shape, w2), *DX = test_tensor(2, shape),
                 *DY = test_tensor(2, shape), *DG = test_tensor(1, &C), *DB = test_tensor(1, &C);
#define FORWARD()                                                  \
    (rms ? oclml_residual_rmsnorm(T, &d, X, Y, G, 1e-5f, Rt, O, S) \
         : oclml_residual_layernorm(T, &d, X, Y, G, B, 1e-5f, Rt, O, M, S))
    ASSERT_OK(FORWARD());
    if (rms)
        ASSERT_OK(oclml_residual_rmsnorm_backward(T, &d, Rt, G, S, W1, W2, DX, DY, DG));
    else
        ASSERT_OK(oclml_residual_layernorm_backward(T, &d, Rt, G, M, S, W1, W2, DX, DY, DG, DB));
    test_read(DX, dx, n);
    test_read(DY, dy, n);
    test_read(DG, dg, C);
    test_read(DB, db, C);
    /* Perturbs element i of one input (a host copy written to its tensor) and returns L. */
    float *inputs[4] = {x, y, g, b};
    oclml_tensor *tensors[4] = {X, Y, G, B};
    const float *grads[4] = {dx, dy, dg, db};
    const size_t sizes[4] = {n, n, C, C};
    const float step = 1e-2f;
    for (int which = 0; which < (rms ? 3 : 4); which++)
        for (size_t i = 0; i < sizes[which]; i++) {
            double L[2];
            for (int s = 0; s < 2; s++) {
                float keep = inputs[which][i];
                inputs[which][i] = keep + (s ? -step : step);
                ASSERT_OK(oclml_tensor_write(tensors[which], inputs[which], sizes[which]));
                ASSERT_OK(FORWARD());
                test_read(O, h, n);
                test_read(Rt, rv, n);
                L[s] = 0;
                for (size_t k = 0; k < n; k++) L[s] += (double)w1[k] * h[k] + (double)w2[k] * rv[k];
                inputs[which][i] = keep;
                ASSERT_OK(oclml_tensor_write(tensors[which], inputs[which], sizes[which]));
            }
            double fd = (L[0] - L[1]) / (2 * step), got = grads[which][i];
            ck_assert_msg(fabs(fd - got) <= 2e-3 * (1 + fabs(fd)),
                          "%s: d/d%s[%zu] = %g, finite differences %g",
                          rms ? "rmsnorm" : "layernorm",
                          (const char *[]){"x", "y", "gamma", "beta"}[which], i, got, fd);
        }
#undef FORWARD
    oclml_tensor *all[] = {X, Y, G, B, Rt, O, M, S, W1, W2, DX, DY, DG, DB};
    for (int i = 0; i < 14; i++) oclml_tensor_destroy(all[i]);
    float *fs[] = {x, y, g, b, w1, w2, h, rv, dx, dy, dg, db};
    for (int i = 0; i < 12; i++) free(fs[i]);
}
END_TEST

/* NaN in x or y: that row's r and out are NaN, the other rows are not. */
START_TEST(nan_row_stays_in_its_row) {
    const size_t R = 3, C = 8, n = R * C, shape[2] = {R, C};
    float *x = test_floats(n), *y = test_floats(n), *r = test_floats(n), *o = test_floats(n);
    test_random(x, n, -1, 1);
    test_random(y, n, -1, 1);
    x[C + 2] = NAN;
    y[2 * C + 5] = NAN;
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor_from(2, shape, y),
                 *Rt = test_tensor(2, shape), *O = test_tensor(2, shape);
    ASSERT_OK(oclml_residual_layernorm(T, NULL, X, Y, NULL, NULL, 1e-5f, Rt, O, NULL, NULL));
    test_read(Rt, r, n);
    test_read(O, o, n);
    for (size_t i = 0; i < C; i++) ck_assert(!isnan(r[i]) && !isnan(o[i]));
    for (size_t i = C; i < n; i++) ck_assert(isnan(o[i]));
    ck_assert(isnan(r[C + 2]) && isnan(r[2 * C + 5]) && !isnan(r[C]));
    oclml_tensor *all[] = {X, Y, Rt, O};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
    free(x);
    free(y);
    free(r);
    free(o);
}
END_TEST

/* The fused ops against the unfused ones on the same inputs: r bit for bit oclml_dropout_add's,
 * out, mean and rstd within rounding of oclml_layernorm's (oclml_rmsnorm's) on that r; the
 * backward's dx within rounding of the norm's backward plus dr, and dy bit for bit
 * oclml_dropout_backward of that dx. */
static const res_case UNFUSED[] = {{0, 37, 33, 0.5f, (1ull << 32) + 1, true, true, false},
                                   {1, 3, 1000, 0.1f, 0, true, true, false},
                                   {0, 5, 768, 0.0f, 0, false, false, false},
                                   {1, 37, 5, 0.1f, 7, false, true, false},
                                   {0, 2, 40000, 0.1f, 3, true, true, false}};

START_TEST(unfused_ops_agree) {
    const res_case *c = &UNFUSED[_i];
    const size_t R = c->rows, C = c->cols, n = R * C, shape[2] = {R, C};
    oclml_dropout_params d = drop_of(c);
    const oclml_dropout_params *dp = c->p > 0 ? &d : NULL;
    float *h[2][6]; /* fused, unfused: r, out, mean, rstd, dx, dy */
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 6; j++) h[k][j] = test_floats(j == 2 || j == 3 ? R : n);
    float *x = test_floats(n), *y = test_floats(n), *g = test_floats(C), *b = test_floats(C),
          *dout = test_floats(n), *dr = test_floats(n), *t = test_floats(n);
    test_random(x, n, -2, 3);
    test_random(y, n, -1, 1);
    test_random(g, C, 0.5f, 1.5f);
    test_random(b, C, -1, 1);
    test_random(dout, n, -1, 1);
    test_random(dr, n, -1, 1);
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor_from(2, shape, y),
                 *G = c->affine ? test_tensor_from(1, &C, g) : NULL,
                 *B = c->affine && !c->rms ? test_tensor_from(1, &C, b) : NULL,
                 *DO = test_tensor_from(2, shape, dout), *DR = test_tensor_from(2, shape, dr),
                 *T2 = test_tensor(2, shape), *ts[2][6];
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 6; j++)
            ts[k][j] = j == 2 || j == 3 ? test_tensor(1, &R) : test_tensor(2, shape);
    oclml_tensor **f = ts[0], **u = ts[1];
    /* fused */
    if (c->rms) {
        ASSERT_OK(oclml_residual_rmsnorm(T, dp, X, Y, G, 1e-5f, f[0], f[1], f[3]));
        ASSERT_OK(oclml_residual_rmsnorm_backward(T, dp, f[0], G, f[3], DO, c->with_dr ? DR : NULL,
                                                  f[4], f[5], NULL));
    } else {
        ASSERT_OK(oclml_residual_layernorm(T, dp, X, Y, G, B, 1e-5f, f[0], f[1], f[2], f[3]));
        ASSERT_OK(oclml_residual_layernorm_backward(
            T, dp, f[0], G, f[2], f[3], DO, c->with_dr ? DR : NULL, f[4], f[5], NULL, NULL));
    }
    /* unfused, from the unfused r; dy from the fused dx */
    oclml_dropout_params none;
    ASSERT_OK(oclml_dropout_params_init(&none));
    ASSERT_OK(oclml_dropout_add(T, dp ? dp : &none, X, Y, u[0]));
    if (c->rms) {
        ASSERT_OK(oclml_rmsnorm(T, u[0], G, 1e-5f, u[1], u[3]));
        ASSERT_OK(oclml_rmsnorm_backward(T, u[0], G, u[3], DO, T2, NULL));
    } else {
        ASSERT_OK(oclml_layernorm(T, u[0], G, B, 1e-5f, u[1], u[2], u[3]));
        ASSERT_OK(oclml_layernorm_backward(T, u[0], G, u[2], u[3], DO, T2, NULL, NULL));
    }
    ASSERT_OK(oclml_dropout_backward(T, dp ? dp : &none, f[4], u[5]));
    for (int k = 0; k < 2; k++) /* the unfused dx is T2 + dr; RMSnorm saves no mean */
        for (int j = 0; j < 6; j++)
            if (!(k == 1 && j == 4) && !(j == 2 && c->rms))
                test_read(ts[k][j], h[k][j], j == 2 || j == 3 ? R : n);
    test_read(T2, t, n);
    ck_assert_msg(!memcmp(h[0][0], h[1][0], n * sizeof(float)), "r differs from dropout_add's");
    ck_assert_msg(!memcmp(h[0][5], h[1][5], n * sizeof(float)),
                  "dy differs from dropout_backward(dx)");
    const char *names[] = {"r", "out", "mean", "rstd"};
    double *ref = test_doubles(n), *scale = test_doubles(n);
    for (int j = 1; j < 4; j++) {
        if (j == 2 && c->rms) continue;
        const size_t m = j == 1 ? n : R;
        for (size_t i = 0; i < m; i++) ref[i] = h[1][j][i];
        test_assert_close(names[j], h[0][j], ref, m, TOL_ELEMENTWISE * 4);
    }
    for (size_t i = 0; i < n; i++) {
        ref[i] = (double)t[i] + (c->with_dr ? dr[i] : 0.0);
        scale[i] = fabs(t[i]) + (c->with_dr ? fabs(dr[i]) : 0.0) + 1e-3;
    }
    test_assert_close_scaled("dx", h[0][4], ref, scale, n, TOL_REDUCTION);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 6; j++) {
            oclml_tensor_destroy(ts[k][j]);
            free(h[k][j]);
        }
    oclml_tensor *all[] = {X, Y, G, B, DO, DR, T2};
    for (int i = 0; i < 7; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
    float *fs[] = {x, y, g, b, dout, dr, t};
    for (int i = 0; i < 7; i++) free(fs[i]);
    free(ref);
    free(scale);
}
END_TEST

/* With dropout: a NaN of y that is dropped stays NaN in r (y * 0, as PyTorch), and so does its
 * row of out; a NaN in x at a kept element likewise; the rows without NaN are finite. p 1 drops
 * everything: r = x + y * 0 exactly. */
START_TEST(nan_through_dropout) {
    const int rms = _i;
    const size_t R = 4, C = 12, n = R * C, shape[2] = {R, C};
    oclml_dropout_params d;
    ASSERT_OK(oclml_dropout_params_init(&d));
    d.p = 0.5f;
    d.seed = 0x1234;
    d.offset = (1ull << 32) + 1;
    size_t dropped = C, kept = 2 * C; /* a dropped element of row 1, a kept one of row 2 */
    while (ref_dropout_keep(d.seed, d.offset, dropped, d.p)) dropped++;
    while (!ref_dropout_keep(d.seed, d.offset, kept, d.p)) kept++;
    ck_assert(dropped < 2 * C && kept < 3 * C);
    float *x = test_floats(n), *y = test_floats(n), *r = test_floats(n), *o = test_floats(n);
    test_random(x, n, -1, 1);
    test_random(y, n, -1, 1);
    y[dropped] = NAN;
    x[kept] = NAN;
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor_from(2, shape, y),
                 *Rt = test_tensor(2, shape), *O = test_tensor(2, shape);
    for (int pass = 0; pass < 2; pass++) {
        if (pass) d.p = 1.0f;
        ASSERT_OK(
            rms ? oclml_residual_rmsnorm(T, &d, X, Y, NULL, 1e-5f, Rt, O, NULL)
                : oclml_residual_layernorm(T, &d, X, Y, NULL, NULL, 1e-5f, Rt, O, NULL, NULL));
        test_read(Rt, r, n);
        test_read(O, o, n);
        ck_assert_msg(isnan(r[dropped]) && isnan(r[kept]), "dropped NaN y: r %g",
                      (double)r[dropped]);
        for (size_t i = 0; i < n; i++) {
            const bool nan_row = i / C == 1 || i / C == 2;
            ck_assert_msg(nan_row == !!isnan(o[i]), "p %g: out[%zu] = %g", (double)d.p, i,
                          (double)o[i]);
            if (i != dropped && i != kept)
                ck_assert_msg(!isnan(r[i]), "p %g: r[%zu] = NaN", (double)d.p, i);
            if (pass) ck_assert(i == dropped || i == kept || r[i] == x[i] + y[i] * 0.0f);
        }
    }
    oclml_tensor *all[] = {X, Y, Rt, O};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
    free(x);
    free(y);
    free(r);
    free(o);
}
END_TEST

/* Bad dropout parameters, NULL tensors and tensors of another context, for all four ops: the
 * status, the error text, and the outputs untouched. */
START_TEST(bad_drop_null_and_context) {
    const size_t shape[2] = {4, 6}, cs[1] = {6}, rs[1] = {4};
    oclml_tensor *x = test_tensor(2, shape), *y = test_tensor(2, shape), *r = test_tensor(2, shape),
                 *o = test_tensor(2, shape), *g = test_tensor(1, cs), *m = test_tensor(1, rs),
                 *s = test_tensor(1, rs), *dx = test_tensor(2, shape), *dy = test_tensor(2, shape),
                 *dg = test_tensor(1, cs), *db = test_tensor(1, cs);
    oclml_tensor *all[] = {x, y, g, m, s};
    for (int i = 0; i < 5; i++) ASSERT_OK(oclml_fill(T, all[i], 1.0f));
    oclml_dropout_params d;
    ASSERT_OK(oclml_dropout_params_init(&d));
    const float bad_p[] = {-0.1f, 1.5f, NAN, INFINITY};
    for (int i = 0; i < 5; i++) {
        d.p = i < 4 ? bad_p[i] : 0.5f;
        d.struct_size = i < 4 ? sizeof d : 3;
        const char *want = i < 4 ? "p must be in [0, 1]" : "struct_size";
        const oclml_status st[4] = {
            oclml_residual_layernorm(T, &d, x, y, g, g, 1e-5f, r, o, m, s),
            oclml_residual_rmsnorm(T, &d, x, y, g, 1e-5f, r, o, s),
            oclml_residual_layernorm_backward(T, &d, x, g, m, s, y, x, dx, dy, dg, db),
            oclml_residual_rmsnorm_backward(T, &d, x, g, s, y, x, dx, dy, dg)};
        for (int k = 0; k < 4; k++) {
            ck_assert_msg(st[k] == OCLML_ERR_INVALID_ARGUMENT, "op %d, bad drop %d: status %d", k,
                          i, st[k]);
            ck_assert_msg(strstr(oclml_ctx_last_error(T), "dropout"), "%s",
                          oclml_ctx_last_error(T));
        }
        ck_assert_msg(strstr(oclml_ctx_last_error(T), want), "%s", oclml_ctx_last_error(T));
    }
    ASSERT_OK(oclml_dropout_params_init(&d));
    d.p = 0.25f;
    ASSERT_STATUS(oclml_residual_layernorm(T, &d, NULL, y, g, g, 1e-5f, r, o, m, s),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_residual_layernorm(T, &d, x, NULL, g, g, 1e-5f, r, o, m, s),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_residual_rmsnorm(T, &d, x, y, g, 1e-5f, NULL, o, s),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_residual_rmsnorm(T, &d, x, y, g, 1e-5f, r, NULL, s),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_residual_layernorm_backward(T, &d, x, g, m, s, NULL, NULL, dx, dy, dg, db),
                  OCLML_ERR_NULL_POINTER); /* dout */
    ASSERT_STATUS(oclml_residual_rmsnorm_backward(T, &d, x, g, s, y, NULL, NULL, dy, dg),
                  OCLML_ERR_NULL_POINTER); /* dx */
    ASSERT_STATUS(oclml_residual_layernorm_backward(T, &d, x, g, NULL, s, y, NULL, dx, dy, dg, db),
                  OCLML_ERR_NULL_POINTER); /* mean */
    oclml_ctx *other = test_ctx_new(NULL);
    oclml_tensor *fx, *fg;
    ASSERT_OK(oclml_tensor_create(other, 2, shape, &fx));
    ASSERT_OK(oclml_tensor_create(other, 1, cs, &fg));
    ASSERT_STATUS(oclml_residual_layernorm(T, &d, x, fx, g, g, 1e-5f, r, o, m, s),
                  OCLML_ERR_CONTEXT_MISMATCH);
    ASSERT_STATUS(oclml_residual_rmsnorm(T, &d, x, y, fg, 1e-5f, r, o, s),
                  OCLML_ERR_CONTEXT_MISMATCH);
    ASSERT_STATUS(oclml_residual_layernorm_backward(T, &d, x, g, m, s, y, fx, dx, dy, dg, db),
                  OCLML_ERR_CONTEXT_MISMATCH); /* dr */
    ASSERT_STATUS(oclml_residual_rmsnorm_backward(T, &d, x, g, s, y, NULL, dx, fx, dg),
                  OCLML_ERR_CONTEXT_MISMATCH); /* dy */
    oclml_tensor *outs[] = {r, o, dx, dy};
    for (int i = 0; i < 4; i++) test_assert_untouched(outs[i], 24);
    test_assert_untouched(dg, 6);
    test_assert_untouched(db, 6);
    oclml_tensor_destroy(fx);
    oclml_tensor_destroy(fg);
    oclml_ctx_destroy(other);
    oclml_tensor *rest[] = {x, y, r, o, g, m, s, dx, dy, dg, db};
    for (int i = 0; i < 11; i++) oclml_tensor_destroy(rest[i]);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    const size_t shape[2] = {4, 6}, other[2] = {4, 5}, cs[1] = {6}, rs[1] = {4};
    oclml_tensor *x = test_tensor(2, shape), *y = test_tensor(2, shape), *r = test_tensor(2, shape),
                 *o = test_tensor(2, shape), *z = test_tensor(2, other), *g = test_tensor(1, cs),
                 *m = test_tensor(1, rs), *s = test_tensor(1, rs);
    ASSERT_OK(oclml_fill(T, x, 1.0f));
    ASSERT_OK(oclml_fill(T, y, 1.0f));
    ASSERT_OK(oclml_fill(T, g, 1.0f));
    ASSERT_OK(oclml_fill(T, m, 0.0f));
    ASSERT_OK(oclml_fill(T, s, 1.0f));
    oclml_dropout_params d;
    ASSERT_OK(oclml_dropout_params_init(&d));
    d.p = 1.5f;
    ASSERT_STATUS(oclml_residual_layernorm(T, &d, x, y, NULL, NULL, 1e-5f, r, o, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "p must be"), "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_residual_layernorm(NULL, NULL, x, y, NULL, NULL, 1e-5f, r, o, NULL, NULL),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_residual_layernorm(T, NULL, x, z, NULL, NULL, 1e-5f, r, o, NULL, NULL),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_residual_layernorm(T, NULL, x, y, NULL, NULL, 1e-5f, r, z, NULL, NULL),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_residual_layernorm(T, NULL, x, y, NULL, NULL, 1e-5f, y, o, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT); /* r over y */
    ASSERT_STATUS(oclml_residual_layernorm(T, NULL, x, y, NULL, NULL, 1e-5f, r, r, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT); /* out over r */
    ASSERT_STATUS(oclml_residual_layernorm(T, NULL, x, y, NULL, NULL, -1.0f, r, o, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT); /* eps */
    ASSERT_STATUS(oclml_residual_rmsnorm(T, NULL, x, y, z, 1e-5f, r, o, NULL),
                  OCLML_ERR_INVALID_SHAPE); /* gamma's length */
    ASSERT_STATUS(oclml_residual_layernorm_backward(T, NULL, x, g, m, s, y, z, r, o, NULL, NULL),
                  OCLML_ERR_INVALID_SHAPE); /* dr */
    ASSERT_STATUS(oclml_residual_layernorm_backward(T, NULL, x, g, m, s, y, NULL, r, r, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT); /* dy over dx */
    ASSERT_STATUS(oclml_residual_layernorm_backward(T, NULL, x, g, m, s, y, NULL, x, o, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT); /* dx over r */
    ASSERT_STATUS(oclml_residual_rmsnorm_backward(T, &d, x, g, s, y, NULL, r, o, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    test_assert_untouched(r, 24);
    test_assert_untouched(o, 24);
    test_assert_untouched(z, 20);
    oclml_tensor *all[] = {x, y, r, o, z, g, m, s};
    for (int i = 0; i < 8; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("resnorm");
    TCase *tc = tcase_create("resnorm");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_and_backward_match_the_reference, 0,
                        test_tier(N_QUICK, N_CASES));
    tcase_add_loop_test(tc, backward_by_finite_differences, 0, 2);
    tcase_add_test(tc, nan_row_stays_in_its_row);
    tcase_add_loop_test(tc, unfused_ops_agree, 0, test_tier(4, 5));
    tcase_add_loop_test(tc, nan_through_dropout, 0, 2);
    tcase_add_test(tc, bad_input_touches_nothing);
    tcase_add_test(tc, bad_drop_null_and_context);
    suite_add_tcase(s, tc);
    return test_main(s);
}
