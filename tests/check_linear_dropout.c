/* A linear layer with dropout after its activation (oclml_linear_dropout and its backward), on
 * both GEMM paths (CLBlast with the epilogue kernel, the own tiled kernels with the fused
 * epilogue) and on the last wave's split product: the fused call equals oclml_linear then
 * oclml_dropout bit for bit; y against the double reference with the host's copy of the mask
 * rule (tests/ref/dropout.c); the backward against the reference and central finite differences;
 * p = 0 is oclml_linear; repeatable; NaN in gives NaN out; bad input touches nothing. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const PATHS[] = {"gemm.own=0", "gemm.own=1"};
#define N_PATHS 2
/* The activations the forward tests take: none, a GELU, then (swept: check_linear tests every
 * activation's epilogue, each a program of its own) one output-based derivative form and the
 * one whose output form differs most from its pre form. */
static const int ACTS[] = {OCLML_ACT_NONE, OCLML_ACT_GELU_TANH, OCLML_ACT_RELU, OCLML_ACT_SIGMOID};
#define N_ACTS test_tier(2, 4)

typedef struct layer {
    int act;
    size_t rows, in, out, xshape[2], yshape[2], wshape[2];
    float *x, *w, *b, *dy;
    oclml_tensor *X, *W, *B, *DY;
} layer;

static layer layer_new(int act, size_t rows, size_t in, size_t out) {
    layer L = {.act = act, .rows = rows, .in = in, .out = out};
    L.xshape[0] = L.yshape[0] = rows;
    L.xshape[1] = in;
    L.yshape[1] = L.wshape[0] = out;
    L.wshape[1] = in;
    L.x = test_floats(rows * in);
    L.w = test_floats(out * in);
    L.b = test_floats(out);
    L.dy = test_floats(rows * out);
    test_random(L.x, rows * in, -1, 1);
    const float wb = 2.0f / sqrtf((float)in);
    test_random(L.w, out * in, -wb, wb);
    test_random(L.b, out, -1, 1);
    test_random(L.dy, rows * out, -1, 1);
    L.X = test_tensor_from(2, L.xshape, L.x);
    L.W = test_tensor_from(2, L.wshape, L.w);
    L.B = test_tensor_from(1, &L.out, L.b);
    L.DY = test_tensor_from(2, L.yshape, L.dy);
    return L;
}

static void layer_free(layer *L) {
    oclml_tensor *t[] = {L->X, L->W, L->B, L->DY};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(t[i]);
    free(L->x);
    free(L->w);
    free(L->b);
    free(L->dy);
}

/* z = x W^T + b in double, with each element's rounding scale sum |x w| + |b|. */
static void ref_pre(const layer *L, const float *x, const float *w, const float *b, double *z,
                    double *scale) {
    for (size_t i = 0; i < L->rows; i++)
        for (size_t j = 0; j < L->out; j++) {
            double s = b[j], a = fabs((double)b[j]);
            for (size_t p = 0; p < L->in; p++) {
                const double t = (double)x[i * L->in + p] * w[j * L->in + p];
                s += t;
                a += fabs(t);
            }
            z[i * L->out + j] = s;
            if (scale) scale[i * L->out + j] = a;
        }
}

/* The mask's factor of element i: 1 / (1 - p) where kept, 0 where dropped. */
static double factor(const oclml_dropout_params *d, size_t i) {
    return ref_dropout_keep(d->seed, d->offset, i, d->p) ? 1.0 / (1.0 - d->p) : 0.0;
}

static bool same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* ---- forward ---- */

/* y and pre against oclml_linear then oclml_dropout (bit for bit) and against the double
 * reference with the host's mask (dropped elements exactly 0). */
static void forward_check(layer *L, const oclml_dropout_params *d) {
    const size_t ny = L->rows * L->out;
    oclml_tensor *Y = test_tensor(2, L->yshape), *P = test_tensor(2, L->yshape),
                 *Y2 = test_tensor(2, L->yshape), *P2 = test_tensor(2, L->yshape);
    ASSERT_OK(oclml_linear_dropout(T, L->act, d, L->X, L->W, L->B, Y, P));
    ASSERT_OK(oclml_linear(T, L->act, L->X, L->W, L->B, Y2, P2));
    ASSERT_OK(oclml_dropout(T, d, Y2, Y2));
    float *y = test_floats(ny), *pre = test_floats(ny), *y2 = test_floats(ny),
          *pre2 = test_floats(ny);
    test_read(Y, y, ny);
    test_read(P, pre, ny);
    test_read(Y2, y2, ny);
    test_read(P2, pre2, ny);
    ck_assert_msg(same_bits(y, y2, ny),
                  "act %d %zux%zu->%zu p %g: fused y differs from linear "
                  "then dropout",
                  L->act, L->rows, L->in, L->out, (double)d->p);
    ck_assert_msg(same_bits(pre, pre2, ny), "act %d: fused pre differs from linear's", L->act);
    double *z = test_doubles(ny), *scale = test_doubles(ny), *want = test_doubles(ny),
           *wscale = test_doubles(ny);
    ref_pre(L, L->x, L->w, L->b, z, scale);
    size_t dropped = 0;
    for (size_t i = 0; i < ny; i++) {
        const double f = factor(d, i);
        want[i] = test_act(L->act, z[i]) * f;
        wscale[i] = scale[i] * (f > 0 ? f : 1);
        if (f == 0) {
            ck_assert_msg(y[i] == 0.0f, "dropped element %zu is %g", i, (double)y[i]);
            dropped++;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "linear_dropout act %d y, p %g", L->act, (double)d->p);
    test_assert_close_scaled(what, y, want, wscale, ny, TOL_GEMM);
    test_assert_close_scaled("linear_dropout pre", pre, z, scale, ny, TOL_GEMM);
    /* A fair coin over a few thousand elements: the fraction dropped near p. */
    const double frac = (double)dropped / (double)ny, sd = sqrt(d->p * (1 - d->p) / (double)ny);
    ck_assert_msg(fabs(frac - d->p) < 6 * sd + 1e-9, "dropped %g of %zu, p %g", frac, ny,
                  (double)d->p);
    oclml_tensor *t[] = {Y, P, Y2, P2};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(t[i]);
    free(y);
    free(pre);
    free(y2);
    free(pre2);
    free(z);
    free(scale);
    free(want);
    free(wscale);
}

START_TEST(forward_matches_linear_then_dropout) {
    test_retune(PATHS[_i / N_ACTS]);
    layer L = layer_new(ACTS[_i % N_ACTS], 37, 61, 29);
    const oclml_dropout_params d = test_dropout_params(0.3f, 0x1234abcd5678ull + (uint64_t)_i, 7);
    forward_check(&L, &d);
    layer_free(&L);
}
END_TEST

/* A layer of 3 rows (the GEMV kernel's epilogue, cl/ops/gemv.cl): even and odd widths, then K
 * split over work-groups (the epilogue in the finishing kernel). */
START_TEST(forward_few_rows) {
    test_retune(_i == 2 ? "gemm.gemv=1 gemm.gemv_tile=8:8:3" : "gemm.gemv=1");
    layer L = layer_new(OCLML_ACT_GELU_TANH, 3, 61, _i == 1 ? 29 : 30);
    const oclml_dropout_params d = test_dropout_params(0.3f, 0x5eedull + (uint64_t)_i, 5);
    forward_check(&L, &d);
    layer_free(&L);
}
END_TEST

/* The (emulated) tensor-core tiles, whose last wave's blocks run as a product of their own whose
 * K-split sum applies the epilogue at the rectangle's offsets: the mask must follow the element's
 * place in y, not in the part. Loop: an odd layer width (a draw an element), an even one (the
 * tiles' column pairs share a draw). */
START_TEST(forward_last_wave_split) {
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    const size_t units = info.compute_units;
    test_retune("gemm.own=1 gemm.mma=2 gemm.mma_tile=32:32:8:2:2 gemm.wave_warps=4 "
                "gemm.tail_splits=2");
    layer L = layer_new(OCLML_ACT_RELU, 32 * (units == 2 ? 3 : 2) - 5, 117,
                        32 * (units + 1) - (_i ? 4 : 3));
    const oclml_dropout_params d = test_dropout_params(0.5f, 99, 3);
    forward_check(&L, &d);
    layer_free(&L);
}
END_TEST

/* p = 0 is oclml_linear bit for bit; p = 1 drops everything; the same params give the same
 * bits twice, another seed or offset another mask. */
START_TEST(edge_probabilities_and_repeats) {
    test_retune(PATHS[_i]);
    layer L = layer_new(OCLML_ACT_GELU_TANH, 19, 33, 45);
    const size_t ny = L.rows * L.out;
    oclml_tensor *Y = test_tensor(2, L.yshape), *Y2 = test_tensor(2, L.yshape);
    float *a = test_floats(ny), *b = test_floats(ny);
    oclml_dropout_params d = test_dropout_params(0.0f, 5, 0);
    ASSERT_OK(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y, NULL));
    ASSERT_OK(oclml_linear(T, L.act, L.X, L.W, L.B, Y2, NULL));
    test_read(Y, a, ny);
    test_read(Y2, b, ny);
    ck_assert_msg(same_bits(a, b, ny), "p = 0 differs from oclml_linear");
    d.p = 1.0f;
    ASSERT_OK(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y, NULL));
    test_read(Y, a, ny);
    for (size_t i = 0; i < ny; i++)
        ck_assert_msg(a[i] == 0.0f, "p = 1: y[%zu] = %g", i, (double)a[i]);
    d.p = 0.25f;
    ASSERT_OK(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y, NULL));
    ASSERT_OK(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y2, NULL));
    test_read(Y, a, ny);
    test_read(Y2, b, ny);
    ck_assert_msg(same_bits(a, b, ny), "two calls with the same params differ");
    d.offset = 1;
    ASSERT_OK(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y2, NULL));
    test_read(Y2, b, ny);
    ck_assert_msg(!same_bits(a, b, ny), "another offset gave the same mask");
    oclml_tensor_destroy(Y);
    oclml_tensor_destroy(Y2);
    free(a);
    free(b);
    layer_free(&L);
}
END_TEST

/* ---- backward ---- */

/* dZ = act'(z) dy m in double (m the mask's factor), and from it dx = dZ W, dw (+)= dZ^T x,
 * db (+)= column sums, each against the device within TOL_GEMM of its scale. */
static void backward_check(layer *L, const oclml_dropout_params *d, int accumulate) {
    const size_t rows = L->rows, in = L->in, out = L->out, ny = rows * out;
    oclml_tensor *Y = test_tensor(2, L->yshape), *P = test_tensor(2, L->yshape);
    ASSERT_OK(oclml_linear_dropout(T, L->act, d, L->X, L->W, L->B, Y, P));
    float *dw0 = test_floats(out * in), *db0 = test_floats(out);
    test_random(dw0, out * in, -1, 1);
    test_random(db0, out, -1, 1);
    oclml_tensor *DX = test_tensor(2, L->xshape), *DW = test_tensor_from(2, L->wshape, dw0),
                 *DB = test_tensor_from(1, &L->out, db0);
    ASSERT_OK(
        oclml_linear_dropout_backward(T, L->act, d, L->X, L->W, P, L->DY, DX, DW, DB, accumulate));
    /* The reference reads the device's pre, as the backward does. */
    float *pre = test_floats(ny);
    test_read(P, pre, ny);
    double *dz = test_doubles(ny);
    for (size_t i = 0; i < ny; i++)
        dz[i] = L->act == OCLML_ACT_NONE ? L->dy[i] * factor(d, i)
                                         : L->dy[i] * factor(d, i) * test_act_grad(L->act, pre[i]);
    float *got = test_floats(rows * in > out * in ? rows * in : out * in);
    char what[96];
    for (int g = 0; g < 3; g++) {
        const size_t n = g == 0 ? rows * in : g == 1 ? out * in : out;
        double *ref = test_doubles(n), *sc = test_doubles(n);
        for (size_t e = 0; e < n; e++) {
            double s = 0, a = 0;
            if (g == 0) { /* dx[i, p] = sum_j dz[i, j] w[j, p] */
                const size_t i = e / in, p = e % in;
                for (size_t j = 0; j < out; j++) {
                    const double t = dz[i * out + j] * L->w[j * in + p];
                    s += t;
                    a += fabs(t);
                }
            } else if (g == 1) { /* dw[j, p] (+)= sum_i dz[i, j] x[i, p] */
                const size_t j = e / in, p = e % in;
                s = accumulate ? dw0[e] : 0, a = fabs(s);
                for (size_t i = 0; i < rows; i++) {
                    const double t = dz[i * out + j] * L->x[i * in + p];
                    s += t;
                    a += fabs(t);
                }
            } else { /* db[j] (+)= sum_i dz[i, j] */
                s = accumulate ? db0[e] : 0, a = fabs(s);
                for (size_t i = 0; i < rows; i++) {
                    s += dz[i * out + e];
                    a += fabs(dz[i * out + e]);
                }
            }
            ref[e] = s;
            sc[e] = a;
        }
        snprintf(what, sizeof what, "linear_dropout_backward act %d %s, acc %d", L->act,
                 g == 0   ? "dx"
                 : g == 1 ? "dw"
                          : "db",
                 accumulate);
        test_read(g == 0 ? DX : g == 1 ? DW : DB, got, n);
        test_assert_close_scaled(what, got, ref, sc, n, TOL_GEMM);
        free(ref);
        free(sc);
    }
    oclml_tensor *t[] = {Y, P, DX, DW, DB};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(t[i]);
    free(dw0);
    free(db0);
    free(pre);
    free(dz);
    free(got);
}

START_TEST(backward_every_activation) {
    test_retune(PATHS[_i / 7]);
    layer L = layer_new(_i % 7, 37, 61, 29);
    const oclml_dropout_params d = test_dropout_params(0.2f, 77 + (uint64_t)_i, 11);
    backward_check(&L, &d, _i % 2);
    layer_free(&L);
}
END_TEST

/* At p = 0 the backward of every activation equals oclml_linear_backward's (which reads the
 * output y for ReLU, tanh and sigmoid) given pre: the derivative reads pre whatever p is. */
START_TEST(backward_at_p0_matches_linear) {
    test_retune(PATHS[_i / 7]);
    const int act = _i % 7;
    layer L = layer_new(act, 19, 23, 17);
    const oclml_dropout_params d = test_dropout_params(0.0f, 5, 0);
    oclml_tensor *Y = test_tensor(2, L.yshape), *P = test_tensor(2, L.yshape),
                 *DX = test_tensor(2, L.xshape), *DX2 = test_tensor(2, L.xshape);
    ASSERT_OK(oclml_linear_dropout(T, act, &d, L.X, L.W, L.B, Y, P));
    ASSERT_OK(oclml_linear_dropout_backward(T, act, &d, L.X, L.W, P, L.DY, DX, NULL, NULL, 0));
    const bool reads_pre =
        act == OCLML_ACT_GELU_ERF || act == OCLML_ACT_GELU_TANH || act == OCLML_ACT_SILU;
    ASSERT_OK(oclml_linear_backward(T, act, L.X, L.W, reads_pre ? P : Y, L.DY, DX2, NULL, NULL, 0));
    const size_t n = L.rows * L.in;
    float *a = test_floats(n), *b = test_floats(n);
    double *ref = test_doubles(n);
    test_read(DX, a, n);
    test_read(DX2, b, n);
    for (size_t i = 0; i < n; i++) ref[i] = b[i];
    char what[64];
    snprintf(what, sizeof what, "act %d: dx at p = 0 against linear_backward's", act);
    test_assert_close(what, a, ref, n, 1e-6);
    oclml_tensor *t[] = {Y, P, DX, DX2};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(t[i]);
    free(a);
    free(b);
    free(ref);
    layer_free(&L);
}
END_TEST

/* L = sum dy dropout(act(x W^T + b)) in double, the mask fixed by the params. */
static double loss(const layer *L, const oclml_dropout_params *d, const float *x, const float *w,
                   const float *b) {
    const size_t n = L->rows * L->out;
    double *z = test_doubles(n), s = 0;
    ref_pre(L, x, w, b, z, NULL);
    for (size_t i = 0; i < n; i++) s += L->dy[i] * test_act(L->act, z[i]) * factor(d, i);
    free(z);
    return s;
}

/* A few entries of x, w and b against central differences of the double loss. */
START_TEST(backward_finite_differences) {
    test_retune(PATHS[_i]);
    const int act = _i ? OCLML_ACT_SIGMOID : OCLML_ACT_GELU_ERF;
    layer L = layer_new(act, 9, 13, 11);
    const oclml_dropout_params d = test_dropout_params(0.4f, 4242, 0);
    oclml_tensor *Y = test_tensor(2, L.yshape), *P = test_tensor(2, L.yshape),
                 *DX = test_tensor(2, L.xshape), *DW = test_tensor(2, L.wshape),
                 *DB = test_tensor(1, &L.out);
    ASSERT_OK(oclml_linear_dropout(T, act, &d, L.X, L.W, L.B, Y, P));
    ASSERT_OK(oclml_linear_dropout_backward(T, act, &d, L.X, L.W, P, L.DY, DX, DW, DB, 0));
    float *dx = test_floats(L.rows * L.in), *dw = test_floats(L.out * L.in),
          *db = test_floats(L.out);
    test_read(DX, dx, L.rows * L.in);
    test_read(DW, dw, L.out * L.in);
    test_read(DB, db, L.out);
    struct {
        float *v, *g;
        size_t n;
    } sets[3] = {{L.x, dx, L.rows * L.in}, {L.w, dw, L.out * L.in}, {L.b, db, L.out}};
    for (int s = 0; s < 3; s++)
        for (size_t e = 0; e < sets[s].n; e += 7) {
            const float keep = sets[s].v[e], h = 1e-3f;
            sets[s].v[e] = keep + h;
            const double up = loss(&L, &d, L.x, L.w, L.b);
            sets[s].v[e] = keep - h;
            const double down = loss(&L, &d, L.x, L.w, L.b);
            sets[s].v[e] = keep;
            const double fd = (up - down) / (2.0 * (double)h);
            ck_assert_msg(fabs(sets[s].g[e] - fd) <= 2e-3 * (1 + fabs(fd)),
                          "act %d: gradient %d[%zu] %g, finite difference %g", act, s, e,
                          (double)sets[s].g[e], fd);
        }
    oclml_tensor *t[] = {Y, P, DX, DW, DB};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(t[i]);
    free(dx);
    free(dw);
    free(db);
    layer_free(&L);
}
END_TEST

/* NaN in a row of x gives NaN in that row of y, dropped elements too (y * 0); NaN in one dy
 * element gives NaN in its row of dx and in db's column, dropped or not (GELU: ReLU drops dy where
 * z <= 0, as PyTorch does). */
START_TEST(nan_in_nan_out) {
    test_retune(PATHS[_i]);
    layer L = layer_new(OCLML_ACT_GELU_TANH, 12, 16, 20);
    L.x[3 * L.in + 5] = NAN;
    L.dy[7 * L.out + 2] = NAN;
    oclml_tensor *X = test_tensor_from(2, L.xshape, L.x), *DY = test_tensor_from(2, L.yshape, L.dy);
    oclml_tensor *Y = test_tensor(2, L.yshape), *P = test_tensor(2, L.yshape),
                 *DX = test_tensor(2, L.xshape), *DB = test_tensor(1, &L.out);
    const oclml_dropout_params d = test_dropout_params(0.5f, 1, 0);
    float *y = test_floats(L.rows * L.out), *dx = test_floats(L.rows * L.in),
          *db = test_floats(L.out);
    ASSERT_OK(oclml_linear_dropout(T, L.act, &d, X, L.W, L.B, Y, P));
    test_read(Y, y, L.rows * L.out);
    ASSERT_OK(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y, P)); /* pre without NaN */
    ASSERT_OK(oclml_linear_dropout_backward(T, L.act, &d, L.X, L.W, P, DY, DX, NULL, DB, 0));
    test_read(DX, dx, L.rows * L.in);
    test_read(DB, db, L.out);
    for (size_t i = 0; i < L.rows; i++)
        for (size_t j = 0; j < L.out; j++)
            ck_assert_msg(isnan(y[i * L.out + j]) == (i == 3), "y[%zu, %zu] = %g", i, j,
                          (double)y[i * L.out + j]);
    for (size_t p = 0; p < L.in; p++)
        ck_assert_msg(isnan(dx[7 * L.in + p]), "dx[7, %zu] = %g", p, (double)dx[7 * L.in + p]);
    ck_assert_msg(isnan(db[2]) && !isnan(db[3]), "db[2] = %g, db[3] = %g", (double)db[2],
                  (double)db[3]);
    oclml_tensor *t[] = {X, DY, Y, P, DX, DB};
    for (int i = 0; i < 6; i++) oclml_tensor_destroy(t[i]);
    free(y);
    free(dx);
    free(db);
    layer_free(&L);
}
END_TEST

/* ---- bad input ---- */

/* Each refusal names its class and leaves the NaN-poisoned outputs as they were. */
START_TEST(bad_input_touches_nothing) {
    layer L = layer_new(OCLML_ACT_RELU, 8, 16, 12);
    const size_t ny = L.rows * L.out, nx = L.rows * L.in;
    oclml_tensor *Y = test_tensor(2, L.yshape), *P = test_tensor(2, L.yshape),
                 *DX = test_tensor(2, L.xshape);
    const oclml_dropout_params good = test_dropout_params(0.5f, 1, 0);
    oclml_dropout_params d = good;
    /* NULL params are p = 0 (check_dropout): a bad shape with them still refused */
    ASSERT_STATUS(oclml_linear_dropout(T, L.act, NULL, L.X, L.W, L.B, DX, P),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_linear_dropout(NULL, L.act, &d, L.X, L.W, L.B, Y, P),
                  OCLML_ERR_NULL_POINTER);
    d.p = 1.5f;
    ASSERT_STATUS(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y, P),
                  OCLML_ERR_INVALID_ARGUMENT);
    d.p = NAN;
    ASSERT_STATUS(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y, P),
                  OCLML_ERR_INVALID_ARGUMENT);
    d = good;
    d.struct_size = 4;
    ASSERT_STATUS(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y, P),
                  OCLML_ERR_INVALID_ARGUMENT);
    d = good;
    ASSERT_STATUS(oclml_linear_dropout(T, (oclml_activation)99, &d, L.X, L.W, L.B, Y, P),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, Y, Y),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_linear_dropout(T, L.act, &d, L.X, L.W, L.B, DX, P),
                  OCLML_ERR_INVALID_SHAPE);
    test_assert_untouched(Y, ny);
    test_assert_untouched(P, ny);
    /* ReLU's derivative reads pre here, which the backward must be given. */
    ASSERT_STATUS(
        oclml_linear_dropout_backward(T, L.act, &d, L.X, L.W, NULL, L.DY, DX, NULL, NULL, 0),
        OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(
        oclml_linear_dropout_backward(T, L.act, NULL, L.X, L.W, P, L.DY, Y, NULL, NULL, 0),
        OCLML_ERR_INVALID_SHAPE); /* NULL params are p = 0; dx of y's shape */
    d.p = -0.5f;
    ASSERT_STATUS(oclml_linear_dropout_backward(T, L.act, &d, L.X, L.W, P, L.DY, DX, NULL, NULL, 0),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(
        oclml_linear_dropout_backward(T, L.act, &good, L.X, L.W, P, L.DY, L.DY, NULL, NULL, 0),
        OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_linear_dropout_backward(T, L.act, &good, L.X, L.W, P, L.DY, DX,
                                                (oclml_tensor *)L.W, NULL, 0),
                  OCLML_ERR_INVALID_ARGUMENT); /* dw over the input w */
    test_assert_untouched(DX, nx);
    oclml_tensor_destroy(Y);
    oclml_tensor_destroy(P);
    oclml_tensor_destroy(DX);
    layer_free(&L);
}
END_TEST

int main(void) {
    Suite *s = suite_create("linear_dropout");
    TCase *tc = tcase_create("linear_dropout");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_matches_linear_then_dropout, 0, N_PATHS * N_ACTS);
    tcase_add_loop_test(tc, forward_few_rows, 0, 3);
    tcase_add_loop_test(tc, forward_last_wave_split, 0, 2);
    tcase_add_loop_test(tc, edge_probabilities_and_repeats, 0, N_PATHS);
    tcase_add_loop_test(tc, backward_every_activation, 0, N_PATHS * 7);
    tcase_add_loop_test(tc, backward_at_p0_matches_linear, 0, N_PATHS * 7);
    tcase_add_loop_test(tc, backward_finite_differences, 0, N_PATHS);
    tcase_add_loop_test(tc, nan_in_nan_out, 0, N_PATHS);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
