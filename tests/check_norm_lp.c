/* LayerNorm, RMSNorm, their backwards and the fused residual + norm on bf16 and fp16 tensors
 * (fp32 math, each output rounded once, mean and rstd fp32), each tensor of its own dtype: the
 * register path with float4 and scalar access, the chunked long-row path, and the parameter
 * gradients fused into the backward and in their own pass, against the double reference
 * (tests/ref/norm.c) from the inputs as their dtype holds them, within the output dtype's unit
 * roundoff (tolerance.h); r bit for bit x + dropout(y) rounded to r's dtype; NaN rows; shape,
 * dtype and overlap refusals with the outputs untouched. */
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BF OCLML_BFLOAT16
#define HF OCLML_FLOAT16
#define F32 OCLML_FLOAT32

/* The fp32 math's own error (statistics, row sums over up to 40000 columns), relative to the
 * magnitude of the terms that make a value: far below bf16's and fp16's u, and what check_norm
 * holds the fp32 op to. */
#define FP32_MATH 1e-5

static const float EPS = 1e-5f;

static double u_of(oclml_dtype dt) {
    return dt == BF ? TOL_U_BF16 : dt == HF ? TOL_U_FP16 : TOL_U_FP32;
}

static double abs_of(oclml_dtype dt) { return dt == HF ? TOL_ABS_FP16 : 0; }

/* A [rows x cols] tensor ([cols] where rows is 0) of dtype dt holding random values in [lo, hi)
 * (lo == hi: NaN-poisoned); *held: its values as the dtype holds them. */
static oclml_tensor *lp_tensor(oclml_dtype dt, size_t rows, size_t cols, float lo, float hi,
                               float **held) {
    const size_t shape[2] = {rows, cols}, n = (rows ? rows : 1) * cols;
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, rows ? 2 : 1, rows ? shape : shape + 1, &t));
    *held = test_floats(n);
    if (lo < hi) test_random(*held, n, lo, hi);
    ASSERT_OK(oclml_tensor_write(t, *held, n));
    test_read(t, *held, n);
    return t;
}

/* v[] rounded to dtype dt as the library rounds (through a tensor of that dtype). */
static void round_to(oclml_dtype dt, float *v, size_t n) {
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, 1, &n, &t));
    ASSERT_OK(oclml_tensor_write(t, v, n));
    test_read(t, v, n);
    oclml_tensor_destroy(t);
}

/* |got - want| <= u |want| + (fp16's subnormal step) + FP32_MATH scale, element by element (a NaN
 * fails). */
static void assert_near(const char *what, oclml_dtype dt, const float *got, const double *want,
                        const double *scale, size_t n) {
    const double u = u_of(dt);
    for (size_t i = 0; i < n; i++) {
        const double tol = u * fabs(want[i]) + abs_of(dt) + FP32_MATH * scale[i];
        ck_assert_msg(fabs(got[i] - want[i]) <= tol, "%s (%s) [%zu] = %.8g, want %.8g (tol %.2g)",
                      what, oclml_dtype_name(dt), i, (double)got[i], want[i], tol);
    }
}

/* Row `row` of a (cols wide) all NaN, and every other row bit for bit b's. */
static void assert_nan_row(const char *what, const float *a, const float *b, size_t rows,
                           size_t cols, size_t row) {
    for (size_t i = 0; i < rows * cols; i++)
        if (i / cols == row)
            ck_assert_msg(isnan(a[i]), "%s [%zu]: %g in the NaN row", what, i, (double)a[i]);
        else
            ck_assert_msg(a[i] == b[i], "%s [%zu]: %g, before the NaN %g", what, i, (double)a[i],
                          (double)b[i]);
}

/* The parameter gradients' references' magnitudes: sum over rows of |dy xhat| and |dy|. */
static void param_scales(int rms, size_t rows, size_t cols, const float *x, const float *mean,
                         const float *rstd, const float *dy, double *sg, double *sb) {
    for (size_t c = 0; c < cols; c++) sg[c] = sb[c] = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            const double h = ((double)x[r * cols + c] - (rms ? 0.0 : mean[r])) * rstd[r];
            sg[c] += fabs(dy[r * cols + c] * h);
            sb[c] += fabs(dy[r * cols + c]);
        }
}

/* ---- layernorm and RMSNorm ---- */

typedef struct norm_case {
    int rms;
    size_t rows, cols;
    oclml_dtype x, y, g, b;     /* x, y, gamma, beta */
    oclml_dtype dy, dx, dg, db; /* dy, dx, dgamma, dbeta */
} norm_case;

/* Register path: float4 (64), scalar (37); the chunked path (40003, 40000: past every device's
 * register rows), whose backward takes the separate parameter pass. */
static const norm_case NORMS[] = {{0, 7, 64, BF, BF, BF, BF, BF, BF, F32, F32},
                                  {1, 5, 37, HF, F32, F32, F32, HF, F32, HF, F32},
                                  {0, 2, 40003, BF, HF, HF, F32, F32, BF, F32, BF},
                                  /* the sweep's */
                                  {1, 2, 40000, HF, BF, BF, F32, BF, HF, F32, F32},
                                  {0, 3, 1001, HF, HF, F32, BF, HF, HF, BF, HF},
                                  {1, 9, 256, BF, F32, HF, F32, F32, BF, BF, F32}};
#define N_NORMS (int)(sizeof NORMS / sizeof NORMS[0])

static oclml_status norm_fwd(const norm_case *c, oclml_tensor *X, oclml_tensor *G, oclml_tensor *B,
                             oclml_tensor *Y, oclml_tensor *M, oclml_tensor *S) {
    return c->rms ? oclml_rmsnorm(T, X, G, EPS, Y, S) : oclml_layernorm(T, X, G, B, EPS, Y, M, S);
}

static oclml_status norm_bwd(const norm_case *c, oclml_tensor *X, oclml_tensor *G, oclml_tensor *M,
                             oclml_tensor *S, oclml_tensor *DY, oclml_tensor *DX, oclml_tensor *DG,
                             oclml_tensor *DB) {
    return c->rms ? oclml_rmsnorm_backward(T, X, G, S, DY, DX, DG)
                  : oclml_layernorm_backward(T, X, G, M, S, DY, DX, DG, DB);
}

/* Forward, backward with and without the parameter gradients, then a NaN in dy and in x. */
START_TEST(norm_matches_reference) {
    const norm_case *c = &NORMS[_i];
    const size_t R = c->rows, C = c->cols, n = R * C;
    float *x, *g, *b, *y, *dy, *dx, *dg, *db, *mean = test_floats(R), *rstd = test_floats(R);
    oclml_tensor *X = lp_tensor(c->x, R, C, -3, 5, &x), *G = lp_tensor(c->g, 0, C, 0.5f, 1.5f, &g),
                 *B = lp_tensor(c->b, 0, C, -1, 1, &b), *Y = lp_tensor(c->y, R, C, 0, 0, &y),
                 *M = test_tensor(1, &R), *S = test_tensor(1, &R);
    ASSERT_OK(norm_fwd(c, X, G, B, Y, M, S));
    test_read(Y, y, n);
    test_read(S, rstd, R);
    if (!c->rms) test_read(M, mean, R);
    double *ref = test_doubles(n), *rm = test_doubles(R), *rr = test_doubles(R),
           *scale = test_doubles(n);
    ref_norm(c->rms, R, C, x, g, c->rms ? NULL : b, EPS, ref, rm, rr);
    for (size_t i = 0; i < n; i++) { /* |xhat gamma| + |beta| */
        const double bc = c->rms ? 0.0 : b[i % C];
        scale[i] = fabs(ref[i] - bc) + fabs(bc);
    }
    const char *op = c->rms ? "rmsnorm" : "layernorm";
    assert_near(op, c->y, y, ref, scale, n);
    assert_near("rstd", F32, rstd, rr, rr, R);
    if (!c->rms) {
        for (size_t r = 0; r < R; r++) scale[r] = 1 / rr[r] + fabs(rm[r]);
        assert_near("mean", F32, mean, rm, scale, R);
    }

    /* Backward from the saved statistics: with dgamma (dbeta) the fused kernel or, for long rows,
     * the parameter pass; without them the plain kernel. */
    oclml_tensor *DY = lp_tensor(c->dy, R, C, -1, 1, &dy), *DX = lp_tensor(c->dx, R, C, 0, 0, &dx),
                 *DG = lp_tensor(c->dg, 0, C, 0, 0, &dg), *DB = lp_tensor(c->db, 0, C, 0, 0, &db);
    ASSERT_OK(norm_bwd(c, X, G, M, S, DY, DX, DG, DB));
    test_read(DX, dx, n);
    test_read(DG, dg, C);
    test_read(DB, db, C);
    double *rdx = test_doubles(n), *rdg = test_doubles(C), *rdb = test_doubles(C),
           *sg = test_doubles(C), *sb = test_doubles(C);
    ref_norm_backward(c->rms, R, C, x, g, mean, rstd, dy, rdx, rdg, rdb, scale);
    param_scales(c->rms, R, C, x, mean, rstd, dy, sg, sb);
    assert_near("dx", c->dx, dx, rdx, scale, n);
    assert_near("dgamma", c->dg, dg, rdg, sg, C);
    if (!c->rms) assert_near("dbeta", c->db, db, rdb, sb, C);
    float *dx0 = test_floats(n), *dg0 = test_floats(C);
    memcpy(dx0, dx, n * sizeof *dx);
    memcpy(dg0, dg, C * sizeof *dg);
    ASSERT_OK(oclml_fill(T, DX, NAN));
    ASSERT_OK(norm_bwd(c, X, G, M, S, DY, DX, NULL, NULL));
    test_read(DX, dx, n);
    assert_near("dx without parameter gradients", c->dx, dx, rdx, scale, n);

    /* NaN in dy: its row of dx, its column of dgamma; the rest as before. */
    dy[C + 3] = NAN;
    ASSERT_OK(oclml_tensor_write(DY, dy, n));
    ASSERT_OK(norm_bwd(c, X, G, M, S, DY, DX, DG, DB));
    test_read(DX, dx, n);
    test_read(DG, dg, C);
    assert_nan_row("dx, NaN in dy", dx, dx0, R, C, 1);
    for (size_t j = 0; j < C; j++)
        ck_assert_msg(j == 3 ? isnan(dg[j]) : dg[j] == dg0[j], "dgamma [%zu] = %g, NaN in dy", j,
                      (double)dg[j]);
    /* NaN in x: its row of y (and its statistics); the rest as before. */
    float *y0 = test_floats(n);
    memcpy(y0, y, n * sizeof *y);
    x[C + 5] = NAN;
    ASSERT_OK(oclml_tensor_write(X, x, n));
    ASSERT_OK(norm_fwd(c, X, G, B, Y, M, S));
    test_read(Y, y, n);
    test_read(S, rstd, R);
    assert_nan_row(op, y, y0, R, C, 1);
    ck_assert(isnan(rstd[1]) && !isnan(rstd[0]));

    oclml_tensor *ts[] = {X, G, B, Y, M, S, DY, DX, DG, DB};
    for (int i = 0; i < 10; i++) oclml_tensor_destroy(ts[i]);
    float *fs[] = {x, g, b, y, dy, dx, dg, db, mean, rstd, dx0, dg0, y0};
    for (int i = 0; i < 13; i++) free(fs[i]);
    double *ds[] = {ref, rm, rr, scale, rdx, rdg, rdb, sg, sb};
    for (int i = 0; i < 9; i++) free(ds[i]);
}
END_TEST

/* ---- the fused residual + norm ---- */

typedef struct res_case {
    int rms;
    size_t rows, cols;
    float p;       /* dropout: 0 none (NULL params) */
    bool in_place; /* r over x, dx over dr (one dtype each) */
    bool with_dr;
    oclml_dtype x, yb, r, out, g, b;      /* x, the branch y, r, out, gamma, beta */
    oclml_dtype dout, dr, dx, dy, dg, db; /* dout, dr, dx, the branch's dy, dgamma, dbeta */
} res_case;

static const res_case RESIDUALS[] = {
    {0, 7, 64, 0.1f, true, true, BF, BF, BF, BF, BF, BF, BF, BF, BF, BF, F32, F32},
    {1, 5, 37, 0.0f, false, false, F32, HF, HF, F32, HF, F32, F32, F32, HF, F32, HF, F32},
    {0, 2, 40003, 0.2f, false, true, HF, BF, F32, BF, F32, HF, BF, F32, BF, HF, BF, F32},
    /* the sweep's */
    {1, 2, 40000, 0.1f, true, true, BF, BF, BF, HF, BF, F32, HF, HF, HF, BF, F32, F32},
    {0, 3, 1001, 0.0f, true, true, HF, F32, HF, HF, BF, BF, F32, BF, BF, F32, HF, BF},
    {1, 9, 256, 0.5f, false, true, BF, HF, F32, BF, F32, F32, BF, F32, F32, BF, F32, F32}};
#define N_RESIDUALS (int)(sizeof RESIDUALS / sizeof RESIDUALS[0])

static float mask_of(const oclml_dropout_params *d, size_t i) {
    if (d->p == 0.0f) return 1.0f;
    return ref_dropout_keep(d->seed, d->offset, i, d->p) ? 1.0f / (1.0f - d->p) : 0.0f;
}

typedef struct res_tensors {
    oclml_tensor *x, *yb, *g, *b, *r, *out, *mean, *rstd;
} res_tensors;

static oclml_status res_fwd(const res_case *c, const oclml_dropout_params *dp,
                            const res_tensors *t) {
    return c->rms ? oclml_residual_rmsnorm(T, dp, t->x, t->yb, t->g, EPS, t->r, t->out, t->rstd)
                  : oclml_residual_layernorm(T, dp, t->x, t->yb, t->g, t->b, EPS, t->r, t->out,
                                             t->mean, t->rstd);
}

static oclml_status res_bwd(const res_case *c, const oclml_dropout_params *dp, const res_tensors *t,
                            oclml_tensor *DO, oclml_tensor *DR, oclml_tensor *DX, oclml_tensor *DY,
                            oclml_tensor *DG, oclml_tensor *DB) {
    return c->rms ? oclml_residual_rmsnorm_backward(T, dp, t->r, t->g, t->rstd, DO, DR, DX, DY, DG)
                  : oclml_residual_layernorm_backward(T, dp, t->r, t->g, t->mean, t->rstd, DO, DR,
                                                      DX, DY, DG, DB);
}

/* r = x + dropout(y) (the product rounded first, as oclml_dropout_add) rounded once to r's dtype,
 * bit for bit; out and the statistics from r as stored; the backward with and without the
 * parameter gradients; a NaN in y. */
START_TEST(residual_matches_reference) {
    const res_case *c = &RESIDUALS[_i];
    const size_t R = c->rows, C = c->cols, n = R * C;
    const oclml_dropout_params d = test_dropout_params(c->p, 0xfeedfacecafebeefull, 3);
    const oclml_dropout_params *dp = c->p > 0 ? &d : NULL;
    float *x, *yb, *g, *b = NULL, *r, *out, *mean = test_floats(R), *rstd = test_floats(R);
    res_tensors t = {.x = lp_tensor(c->x, R, C, -2, 3, &x),
                     .yb = lp_tensor(c->yb, R, C, -1, 1, &yb),
                     .g = lp_tensor(c->g, 0, C, 0.5f, 1.5f, &g),
                     .b = c->rms ? NULL : lp_tensor(c->b, 0, C, -1, 1, &b),
                     .out = lp_tensor(c->out, R, C, 0, 0, &out),
                     .mean = test_tensor(1, &R),
                     .rstd = test_tensor(1, &R)};
    t.r = c->in_place ? t.x : lp_tensor(c->r, R, C, 0, 0, &r);
    if (c->in_place) r = test_floats(n);
    ASSERT_OK(res_fwd(c, dp, &t));
    test_read(t.r, r, n);
    test_read(t.out, out, n);
    test_read(t.rstd, rstd, R);
    if (!c->rms) test_read(t.mean, mean, R);
    float *want_r = test_floats(n);
    for (size_t i = 0; i < n; i++) {
        const float prod = yb[i] * mask_of(&d, i);
        want_r[i] = x[i] + prod;
    }
    round_to(c->r, want_r, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(r[i] == want_r[i], "r (%s) [%zu] = %.8g, want %.8g", oclml_dtype_name(c->r),
                      i, (double)r[i], (double)want_r[i]);
    double *ref = test_doubles(n), *rm = test_doubles(R), *rr = test_doubles(R),
           *scale = test_doubles(n);
    ref_norm(c->rms, R, C, r, g, c->rms ? NULL : b, EPS, ref, rm, rr);
    for (size_t i = 0; i < n; i++) {
        const double bc = c->rms ? 0.0 : b[i % C];
        scale[i] = fabs(ref[i] - bc) + fabs(bc);
    }
    assert_near("out", c->out, out, ref, scale, n);
    assert_near("rstd", F32, rstd, rr, rr, R);

    /* Backward: dx = dr + the norm's dx, dy = dx m (from dx before its rounding), dgamma, dbeta. */
    float *dout, *dr = NULL, *dx, *dy, *dg, *db;
    oclml_tensor *DO = lp_tensor(c->dout, R, C, -1, 1, &dout),
                 *DR = c->with_dr ? lp_tensor(c->dr, R, C, -1, 1, &dr) : NULL,
                 *DX = c->in_place ? DR : lp_tensor(c->dx, R, C, 0, 0, &dx),
                 *DY = lp_tensor(c->dy, R, C, 0, 0, &dy), *DG = lp_tensor(c->dg, 0, C, 0, 0, &dg),
                 *DB = c->rms ? NULL : lp_tensor(c->db, 0, C, 0, 0, &db);
    if (c->in_place) dx = test_floats(n);
    if (c->rms) db = test_floats(C);
    double *rdx = test_doubles(n), *rdy = test_doubles(n), *sdy = test_doubles(n),
           *rdg = test_doubles(C), *rdb = test_doubles(C), *sg = test_doubles(C),
           *sb = test_doubles(C);
    ref_norm_backward(c->rms, R, C, r, g, mean, rstd, dout, rdx, rdg, rdb, scale);
    param_scales(c->rms, R, C, r, mean, rstd, dout, sg, sb);
    for (size_t i = 0; i < n; i++) {
        if (c->with_dr) rdx[i] += dr[i], scale[i] += fabs(dr[i]);
        const double m = mask_of(&d, i);
        rdy[i] = rdx[i] * m;
        sdy[i] = scale[i] * m;
    }
    for (int pass = 0; pass < 2; pass++) { /* with the parameter gradients, then without */
        if (pass) {
            ASSERT_OK(oclml_fill(T, DX, NAN));
            ASSERT_OK(oclml_fill(T, DY, NAN));
            if (c->in_place) ASSERT_OK(oclml_tensor_write(DR, dr, n)); /* dx is over dr */
        }
        ASSERT_OK(res_bwd(c, dp, &t, DO, DR, DX, DY, pass ? NULL : DG, pass ? NULL : DB));
        test_read(DX, dx, n);
        test_read(DY, dy, n);
        assert_near(pass ? "dx without parameter gradients" : "dx", c->dx, dx, rdx, scale, n);
        assert_near(pass ? "dy without parameter gradients" : "dy", c->dy, dy, rdy, sdy, n);
    }
    test_read(DG, dg, C);
    assert_near("dgamma", c->dg, dg, rdg, sg, C);
    if (!c->rms) {
        test_read(DB, db, C);
        assert_near("dbeta", c->db, db, rdb, sb, C);
    }

    /* NaN in y (dropped or kept, it stays NaN): that element of r and its row of out. */
    float *out0 = test_floats(n);
    memcpy(out0, out, n * sizeof *out);
    yb[C + 5] = NAN;
    ASSERT_OK(oclml_tensor_write(t.yb, yb, n));
    if (c->in_place) ASSERT_OK(oclml_tensor_write(t.x, x, n));
    ASSERT_OK(res_fwd(c, dp, &t));
    test_read(t.r, r, n);
    test_read(t.out, out, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(i == C + 5 ? isnan(r[i]) : r[i] == want_r[i], "r [%zu] = %g, NaN in y", i,
                      (double)r[i]);
    assert_nan_row("out", out, out0, R, C, 1);

    oclml_tensor *ts[] = {t.x, t.yb, t.g, t.b, t.out, t.mean, t.rstd, DO, DR, DY, DG, DB};
    for (int i = 0; i < 12; i++)
        if (ts[i]) oclml_tensor_destroy(ts[i]);
    if (!c->in_place) oclml_tensor_destroy(t.r), oclml_tensor_destroy(DX);
    float *fs[] = {x, yb, g, b, r, out, mean, rstd, want_r, dout, dr, dx, dy, dg, db, out0};
    for (int i = 0; i < 16; i++) free(fs[i]);
    double *ds[] = {ref, rm, rr, scale, rdx, rdy, sdy, rdg, rdb, sg, sb};
    for (int i = 0; i < 11; i++) free(ds[i]);
}
END_TEST

/* Mismatched shapes, a 16-bit statistic, and an output over an input of another dtype are
 * refused whatever the dtypes; nothing is written. */
START_TEST(refusals_touch_nothing) {
    const size_t R = 4, C = 8, n = R * C, shape[2] = {R, C};
    float *x, *y, *o, *g, *g7, *m16, *dr;
    oclml_tensor *X = lp_tensor(BF, R, C, -1, 1, &x), *Y = lp_tensor(F32, R, C + 1, 0, 0, &y),
                 *O = lp_tensor(BF, R, C, 0, 0, &o), *G = lp_tensor(HF, 0, C, 1, 2, &g),
                 *G7 = lp_tensor(HF, 0, C - 1, 1, 2, &g7), *M16 = lp_tensor(BF, 0, R, 0, 0, &m16),
                 *DR = lp_tensor(BF, R, C, -1, 1, &dr), *M = test_tensor(1, &R),
                 *S = test_tensor(1, &R);
    ASSERT_STATUS(oclml_layernorm(T, X, G, NULL, EPS, Y, M, S), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_rmsnorm(T, X, G7, EPS, O, S), OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "gamma"), "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_layernorm(T, X, G, NULL, EPS, O, M16, S), OCLML_ERR_DTYPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "mean"), "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_residual_layernorm(T, NULL, X, DR, G, NULL, EPS, O, Y, M, S),
                  OCLML_ERR_INVALID_SHAPE);
    /* The same memory seen as fp16 over x's (and dr's) bf16 elements: in place, but another
     * dtype. */
    cl_mem buf;
    size_t off;
    oclml_tensor *XH, *DRH;
    ASSERT_OK(oclml_tensor_buffer(X, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap_dtype(T, HF, buf, off, 2, shape, &XH));
    ASSERT_OK(oclml_tensor_buffer(DR, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap_dtype(T, HF, buf, off, 2, shape, &DRH));
    ASSERT_STATUS(oclml_residual_rmsnorm(T, NULL, X, DR, G, EPS, XH, O, S),
                  OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "another dtype"), "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_layernorm(T, X, NULL, NULL, EPS, XH, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_residual_rmsnorm_backward(T, NULL, O, G, S, X, DR, DRH, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    test_assert_untouched(Y, R * (C + 1));
    test_assert_untouched(O, n);
    test_assert_untouched(M, R);
    test_assert_untouched(S, R);
    test_assert_untouched(M16, R);
    float *now = test_floats(n);
    test_read(X, now, n);
    ck_assert(!memcmp(now, x, n * sizeof *x));
    test_read(DR, now, n);
    ck_assert(!memcmp(now, dr, n * sizeof *dr));
    oclml_tensor *ts[] = {X, Y, O, G, G7, M16, DR, M, S, XH, DRH};
    for (int i = 0; i < 11; i++) oclml_tensor_destroy(ts[i]);
    float *fs[] = {x, y, o, g, g7, m16, dr, now};
    for (int i = 0; i < 8; i++) free(fs[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("norm_lp");
    TCase *tc = tcase_create("norm_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, norm_matches_reference, 0, test_tier(3, N_NORMS));
    tcase_add_loop_test(tc, residual_matches_reference, 0, test_tier(3, N_RESIDUALS));
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
