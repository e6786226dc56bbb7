/* Linear layers, y = act(x W^T + b) and its backward, on both GEMM paths (CLBlast with the
 * epilogue kernel, and the own tiled kernels with the fused epilogue): every activation against
 * the double-precision reference, with and without bias and pre, x of rank 1 to 3, skinny
 * M = 1, 5, 64 against a few hundred; the backward against the reference (from the same saved
 * values) and against central finite differences of the reference forward; accumulate on and
 * off, every NULL combination of dx, dw, db; NaN in gives NaN out; bit-for-bit repeatable;
 * PyTorch's golden vectors (tests/data/linear_golden.txt, made by make_linear_golden.py); bad
 * input touches nothing. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The GEMM paths every test runs on, picked through the tuning option. */
static const char *const PATHS[] = {"gemm.own=0", "gemm.own=1"};
#define N_PATHS 2
#define N_ACTS 7
static const char *const ACT_NAMES[N_ACTS] = {"none", "relu", "gelu_erf", "gelu_tanh",
                                              "silu", "tanh", "sigmoid"};

/* ---- the reference, in double ---- */

/* Whether the backward reads the pre-activation (else the output y). */
static bool saves_pre(int act) {
    return act == OCLML_ACT_GELU_ERF || act == OCLML_ACT_GELU_TANH || act == OCLML_ACT_SILU;
}

/* dZ from dy and the saved value as PyTorch forms it: from z for GELU and SiLU, from y for ReLU
 * (dy where y > 0), tanh (dy (1 - y^2)) and sigmoid (dy y (1 - y)). */
static double dz_of(int act, double g, double s) {
    switch (act) {
    case OCLML_ACT_RELU:
        return isnan(s) ? s : s > 0 ? g : 0;
    case OCLML_ACT_GELU_ERF:
        return g * (0.5 * erfc(-s / sqrt(2.0)) + s * exp(-0.5 * s * s) / sqrt(2 * M_PI));
    case OCLML_ACT_GELU_TANH: {
        double k = sqrt(2 / M_PI), u = k * (s + 0.044715 * s * s * s), t = tanh(u);
        return g * (0.5 * (1 + t) + 0.5 * s * (1 - t * t) * k * (1 + 3 * 0.044715 * s * s));
    }
    case OCLML_ACT_SILU: {
        double sg = 1 / (1 + exp(-s));
        return g * sg * (1 + s * (1 - sg));
    }
    case OCLML_ACT_TANH:
        return g * (1 - s * s);
    case OCLML_ACT_SIGMOID:
        return g * s * (1 - s);
    default:
        return g;
    }
}

/* z = x W^T + b, y = act(z), and each z's rounding scale sum |x w| + |b|. b may be NULL. */
static void ref_forward(int act, const float *x, const float *w, const float *b, size_t rows,
                        size_t in, size_t out, double *z, double *y, double *scale) {
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < out; j++) {
            double s = b ? b[j] : 0, a = b ? fabs((double)b[j]) : 0;
            for (size_t p = 0; p < in; p++) {
                double t = (double)x[i * in + p] * w[j * in + p];
                s += t;
                a += fabs(t);
            }
            z[i * out + j] = s;
            if (y) y[i * out + j] = test_act(act, s);
            if (scale) scale[i * out + j] = a;
        }
}

/* The backward's reference from dZ: dx = dZ W, dw = dw0 + dZ^T x, db = db0 + column sums (dw0,
 * db0 NULL: zero), each with its scale (the sum of the absolute terms). */
typedef struct grads {
    double *dx, *dw, *db, *sdx, *sdw, *sdb;
} grads;

static grads ref_backward(const double *dz, const float *x, const float *w, const float *dw0,
                          const float *db0, size_t rows, size_t in, size_t out) {
    grads g = {test_doubles(rows * in), test_doubles(out * in), test_doubles(out),
               test_doubles(rows * in), test_doubles(out * in), test_doubles(out)};
    for (size_t i = 0; i < rows; i++)
        for (size_t p = 0; p < in; p++) {
            double s = 0, a = 0;
            for (size_t j = 0; j < out; j++) {
                double t = dz[i * out + j] * w[j * in + p];
                s += t;
                a += fabs(t);
            }
            g.dx[i * in + p] = s;
            g.sdx[i * in + p] = a;
        }
    for (size_t j = 0; j < out; j++) {
        for (size_t p = 0; p < in; p++) {
            double s = dw0 ? dw0[j * in + p] : 0, a = fabs(s);
            for (size_t i = 0; i < rows; i++) {
                double t = dz[i * out + j] * x[i * in + p];
                s += t;
                a += fabs(t);
            }
            g.dw[j * in + p] = s;
            g.sdw[j * in + p] = a;
        }
        double s = db0 ? db0[j] : 0, a = fabs(s);
        for (size_t i = 0; i < rows; i++) {
            s += dz[i * out + j];
            a += fabs(dz[i * out + j]);
        }
        g.db[j] = s;
        g.sdb[j] = a;
    }
    return g;
}

static void grads_free(grads *g) {
    double *all[] = {g->dx, g->dw, g->db, g->sdx, g->sdw, g->sdb};
    for (int i = 0; i < 6; i++) free(all[i]);
}

/* ---- a layer on the device ---- */

typedef struct layer {
    int act, xdims;
    size_t xshape[3], yshape[3], wshape[2], rows, in, out;
    float *x, *w, *b, *dy;
    oclml_tensor *X, *W, *B, *DY;
} layer;

/* x [xshape... x in] uniform in [-1, 1), W and b as nn.Linear would draw them but twice as wide
 * (+-2/sqrt(in), b +-1: the activations' curved parts), dy in [-1, 1). */
static layer layer_new(int act, int xdims, const size_t *lead, size_t in, size_t out, bool bias) {
    layer L = {.act = act, .xdims = xdims, .in = in, .out = out, .rows = 1};
    for (int d = 0; d < xdims - 1; d++) {
        L.xshape[d] = L.yshape[d] = lead[d];
        L.rows *= lead[d];
    }
    L.xshape[xdims - 1] = in;
    L.yshape[xdims - 1] = out;
    L.wshape[0] = out;
    L.wshape[1] = in;
    L.x = test_floats(L.rows * in);
    L.w = test_floats(out * in);
    L.dy = test_floats(L.rows * out);
    test_random(L.x, L.rows * in, -1, 1);
    float wb = 2.0f / sqrtf((float)in);
    test_random(L.w, out * in, -wb, wb);
    test_random(L.dy, L.rows * out, -1, 1);
    L.X = test_tensor_from(xdims, L.xshape, L.x);
    L.W = test_tensor_from(2, L.wshape, L.w);
    L.DY = test_tensor_from(xdims, L.yshape, L.dy);
    if (bias) {
        L.b = test_floats(out);
        test_random(L.b, out, -1, 1);
        L.B = test_tensor_from(1, &out, L.b);
    }
    return L;
}

static void layer_free(layer *L) {
    oclml_tensor *t[] = {L->X, L->W, L->B, L->DY};
    for (int i = 0; i < 4; i++)
        if (t[i]) oclml_tensor_destroy(t[i]);
    free(L->x);
    free(L->w);
    free(L->b);
    free(L->dy);
}

/* Runs the forward (y, and pre when with_pre) on NaN-poisoned outputs and checks both against
 * the reference. Returns what the backward reads (pre or y, as the activation needs) through
 * *saved (malloc'd, caller frees) when saved is not NULL, and the device tensor in *saved_t. */
static void forward_check(layer *L, bool with_pre, float **saved, oclml_tensor **saved_t) {
    size_t ny = L->rows * L->out;
    oclml_tensor *Y = test_tensor(L->xdims, L->yshape),
                 *P = with_pre ? test_tensor(L->xdims, L->yshape) : NULL;
    ASSERT_OK(oclml_linear(T, L->act, L->X, L->W, L->B, Y, P));
    double *z = test_doubles(ny), *y = test_doubles(ny), *scale = test_doubles(ny);
    ref_forward(L->act, L->x, L->w, L->b, L->rows, L->in, L->out, z, y, scale);
    float *out = test_floats(ny), *pre = test_floats(ny);
    char what[128];
    snprintf(what, sizeof what, "linear %s y, %zu rows x %zu -> %zu, bias %d, pre %d",
             ACT_NAMES[L->act], L->rows, L->in, L->out, L->B != NULL, with_pre);
    test_read(Y, out, ny);
    test_assert_close_scaled(what, out, y, scale, ny, TOL_GEMM);
    if (P) {
        test_read(P, pre, ny);
        what[strlen("linear ") + strlen(ACT_NAMES[L->act]) + 1] = 'p'; /* "y," -> "p," */
        test_assert_close_scaled(what, pre, z, scale, ny, TOL_GEMM);
    }
    bool from_pre = saves_pre(L->act);
    if (saved) {
        *saved = from_pre ? pre : out;
        *saved_t = from_pre ? P : Y;
        free(from_pre ? out : pre);
        oclml_tensor_destroy(from_pre ? Y : P);
    } else {
        free(out);
        free(pre);
        oclml_tensor_destroy(Y);
        if (P) oclml_tensor_destroy(P);
    }
    free(z);
    free(y);
    free(scale);
}

/* ---- forward ---- */

START_TEST(forward_every_activation) {
    test_retune(PATHS[_i / N_ACTS]);
    int act = _i % N_ACTS;
    size_t lead2[1] = {37}, lead3[2] = {2, 3};
    layer L = layer_new(act, 2, lead2, 61, 29, true);
    forward_check(&L, true, NULL, NULL);
    layer_free(&L);
    L = layer_new(act, 3, lead3, 61, 29, true); /* rank 3: rows = 2 x 3 */
    forward_check(&L, true, NULL, NULL);
    layer_free(&L);
    /* Rank 1: one row (without pre for GELU, the bench's forward; each combination of bias and
     * pre is another program to build, so the others keep to a few activations). */
    L = layer_new(act, 1, NULL, 61, 29, true);
    forward_check(&L, act != OCLML_ACT_GELU_ERF, NULL, NULL);
    layer_free(&L);
    if (act == OCLML_ACT_NONE || act == OCLML_ACT_SIGMOID) {
        L = layer_new(act, 2, lead2, 61, 29, false); /* no bias, no pre */
        forward_check(&L, false, NULL, NULL);
        layer_free(&L);
    }
}
END_TEST

/* Skinny layers: M = 1, 5 and 64 rows against a few hundred (the small-M plans and split K). */
START_TEST(forward_skinny) {
    test_retune(PATHS[_i]);
    static const size_t ms[] = {1, 5, 64};
    for (int i = 0; i < 3; i++) {
        layer L = layer_new(OCLML_ACT_GELU_ERF, 2, &ms[i], 301, 257, true);
        forward_check(&L, true, NULL, NULL);
        layer_free(&L);
    }
    size_t one = 1;
    layer L = layer_new(OCLML_ACT_RELU, 2, &one, 513, 130, false);
    forward_check(&L, false, NULL, NULL);
    layer_free(&L);
}
END_TEST

/* ---- backward ---- */

/* Which gradients a backward case asks for. */
enum { WANT_DX = 1, WANT_DW = 2, WANT_DB = 4 };

/* Forward, then the backward with the gradients in `want`, checked against the reference from
 * the saved values the device wrote. With accumulate, dw and db start from random values. */
static void backward_check(layer *L, int want, int accumulate) {
    float *saved = NULL;
    oclml_tensor *S = NULL;
    forward_check(L, true, &saved, &S);
    size_t rows = L->rows, in = L->in, out = L->out, bs = out;
    float *dw0 = test_floats(out * in), *db0 = test_floats(out);
    if (accumulate) {
        test_random(dw0, out * in, -1, 1);
        test_random(db0, out, -1, 1);
    }
    oclml_tensor *DX = (want & WANT_DX) ? test_tensor(L->xdims, L->xshape) : NULL;
    oclml_tensor *DW = (want & WANT_DW) ? test_tensor_from(2, L->wshape, dw0) : NULL;
    oclml_tensor *DB = (want & WANT_DB) ? test_tensor_from(1, &bs, db0) : NULL;
    ASSERT_OK(oclml_linear_backward(T, L->act, L->X, L->W, L->act ? S : NULL, L->DY, DX, DW, DB,
                                    accumulate));
    double *dz = test_doubles(rows * out);
    for (size_t i = 0; i < rows * out; i++) dz[i] = dz_of(L->act, L->dy[i], saved[i]);
    grads g = ref_backward(dz, L->x, L->w, accumulate ? dw0 : NULL, accumulate ? db0 : NULL, rows,
                           in, out);
    char what[160];
    float *got = test_floats(rows * in > out * in ? rows * in : out * in);
    if (DX) {
        snprintf(what, sizeof what, "linear %s dx, %zu x %zu -> %zu, acc %d", ACT_NAMES[L->act],
                 rows, in, out, accumulate);
        test_read(DX, got, rows * in);
        test_assert_close_scaled(what, got, g.dx, g.sdx, rows * in, TOL_GEMM);
    }
    if (DW) {
        snprintf(what, sizeof what, "linear %s dw, %zu x %zu -> %zu, acc %d", ACT_NAMES[L->act],
                 rows, in, out, accumulate);
        test_read(DW, got, out * in);
        test_assert_close_scaled(what, got, g.dw, g.sdw, out * in, TOL_GEMM);
    }
    if (DB) {
        snprintf(what, sizeof what, "linear %s db, %zu x %zu -> %zu, acc %d", ACT_NAMES[L->act],
                 rows, in, out, accumulate);
        test_read(DB, got, out);
        test_assert_close_scaled(what, got, g.db, g.sdb, out, TOL_GEMM);
    }
    oclml_tensor *t[] = {S, DX, DW, DB};
    for (int i = 0; i < 4; i++)
        if (t[i]) oclml_tensor_destroy(t[i]);
    grads_free(&g);
    free(dz);
    free(got);
    free(saved);
    free(dw0);
    free(db0);
}

START_TEST(backward_every_activation) {
    test_retune(PATHS[_i / N_ACTS]);
    int act = _i % N_ACTS;
    size_t lead2[1] = {37}, lead3[2] = {2, 3};
    layer L = layer_new(act, 2, lead2, 61, 29, true);
    backward_check(&L, WANT_DX | WANT_DW | WANT_DB, 0);
    layer_free(&L);
    L = layer_new(act, 3, lead3, 61, 29, true);
    backward_check(&L, WANT_DX | WANT_DW | WANT_DB, 1);
    layer_free(&L);
}
END_TEST

/* Every combination of dx, dw and db (none: nothing to do), accumulate on and off, and skinny
 * layers (M = 1, 5, 64; dw's product then has K = M). */
START_TEST(backward_combinations_and_skinny) {
    test_retune(PATHS[_i]);
    size_t lead[1] = {19};
    for (int want = 0; want < 8; want++) {
        int act = want % 2 ? OCLML_ACT_SILU : OCLML_ACT_NONE;
        layer L = layer_new(act, 2, lead, 23, 17, true);
        backward_check(&L, want, want >= 4);
        layer_free(&L);
    }
    static const size_t ms[] = {1, 5, 64};
    for (int i = 0; i < 3; i++) {
        layer L = layer_new(OCLML_ACT_GELU_ERF, 2, &ms[i], 301, 257, true);
        backward_check(&L, WANT_DX | WANT_DW | WANT_DB, i == 1);
        layer_free(&L);
    }
}
END_TEST

/* L(x, W, b) = sum dy act(x W^T + b) in double, for finite differences. */
static double loss(const layer *L, const float *x, const float *w, const float *b) {
    size_t n = L->rows * L->out;
    double *y = test_doubles(n), *z = test_doubles(n), s = 0;
    ref_forward(L->act, x, w, b, L->rows, L->in, L->out, z, y, NULL);
    for (size_t i = 0; i < n; i++) s += L->dy[i] * y[i];
    free(y);
    free(z);
    return s;
}

/* Central differences of loss() along each element of v (which aliases x, w or b of L). */
static void finite_diff(const layer *L, float *v, size_t n, double *fd, float *x, float *w,
                        float *b) {
    /* Small enough that ReLU's kink is almost never inside a step; the loss is a double sum of
     * float inputs, so its rounding stays far below the step. */
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        float keep = v[i];
        /* The inputs are floats: the steps taken are the rounded ones, hu and hd. */
        v[i] = (float)(keep + h);
        double up = loss(L, x, w, b), hu = (double)v[i] - keep;
        v[i] = (float)(keep - h);
        double down = loss(L, x, w, b), hd = keep - (double)v[i];
        v[i] = keep;
        fd[i] = (up - down) / (hu + hd);
    }
}

/* The backward against central finite differences of the reference forward, every
 * activation, on a small layer. */
START_TEST(backward_finite_differences) {
    test_retune(PATHS[_i]);
    size_t lead[1] = {4}, in = 6, out = 5;
    for (int act = 0; act < N_ACTS; act++) {
        layer L = layer_new(act, 2, lead, in, out, true);
        size_t rows = L.rows;
        oclml_tensor *Y = test_tensor(2, L.yshape), *P = test_tensor(2, L.yshape);
        ASSERT_OK(oclml_linear(T, act, L.X, L.W, L.B, Y, P));
        oclml_tensor *DX = test_tensor(2, L.xshape), *DW = test_tensor(2, L.wshape),
                     *DB = test_tensor(1, &out);
        ASSERT_OK(
            oclml_linear_backward(T, act, L.X, L.W, saves_pre(act) ? P : Y, L.DY, DX, DW, DB, 0));
        double *fx = test_doubles(rows * in), *fw = test_doubles(out * in), *fb = test_doubles(out);
        finite_diff(&L, L.x, rows * in, fx, L.x, L.w, L.b);
        finite_diff(&L, L.w, out * in, fw, L.x, L.w, L.b);
        finite_diff(&L, L.b, out, fb, L.x, L.w, L.b);
        /* The reference's own gradients (from z in double) must agree with the differences too:
         * the derivative formulas above are then right. */
        double *z = test_doubles(rows * out), *dz = test_doubles(rows * out);
        ref_forward(act, L.x, L.w, L.b, rows, in, out, z, NULL, NULL);
        for (size_t i = 0; i < rows * out; i++)
            dz[i] = dz_of(act, L.dy[i], saves_pre(act) ? z[i] : test_act(act, z[i]));
        grads g = ref_backward(dz, L.x, L.w, NULL, NULL, rows, in, out);
        for (size_t i = 0; i < rows * in; i++)
            ck_assert_msg(fabs(g.dx[i] - fx[i]) <= 1e-5 * (g.sdx[i] + 1e-3),
                          "%s: reference dx[%zu] %.9g, finite differences %.9g", ACT_NAMES[act], i,
                          g.dx[i], fx[i]);
        float *got = test_floats(rows * in > out * in ? rows * in : out * in);
        char what[96];
        snprintf(what, sizeof what, "linear %s dx vs finite differences", ACT_NAMES[act]);
        test_read(DX, got, rows * in);
        test_assert_close_scaled(what, got, fx, g.sdx, rows * in, TOL_GEMM);
        snprintf(what, sizeof what, "linear %s dw vs finite differences", ACT_NAMES[act]);
        test_read(DW, got, out * in);
        test_assert_close_scaled(what, got, fw, g.sdw, out * in, TOL_GEMM);
        snprintf(what, sizeof what, "linear %s db vs finite differences", ACT_NAMES[act]);
        test_read(DB, got, out);
        test_assert_close_scaled(what, got, fb, g.sdb, out, TOL_GEMM);
        oclml_tensor *t[] = {Y, P, DX, DW, DB};
        for (int i = 0; i < 5; i++) oclml_tensor_destroy(t[i]);
        void *mem[] = {fx, fw, fb, z, dz, got};
        for (int i = 0; i < 6; i++) free(mem[i]);
        grads_free(&g);
        layer_free(&L);
    }
}
END_TEST

/* NaN in x or b gives NaN in the rows or columns of y and pre that depend on it, nowhere else;
 * NaN in dy or in the saved values gives NaN in the gradients that depend on it (ReLU drops dy
 * where y <= 0, as PyTorch does). */
START_TEST(nan_in_nan_out) {
    test_retune(PATHS[_i]);
    size_t lead[1] = {6};
    layer L = layer_new(OCLML_ACT_GELU_TANH, 2, lead, 9, 7, true);
    L.x[2 * 9 + 4] = NAN;
    L.b[5] = NAN;
    ASSERT_OK(oclml_tensor_write(L.X, L.x, 6 * 9));
    ASSERT_OK(oclml_tensor_write(L.B, L.b, 7));
    forward_check(&L, true, NULL, NULL); /* the reference is NaN exactly there */
    layer_free(&L);
    static const int acts[] = {OCLML_ACT_GELU_ERF, OCLML_ACT_RELU, OCLML_ACT_SIGMOID,
                               OCLML_ACT_NONE};
    for (int a = 0; a < 4; a++) {
        int act = acts[a];
        L = layer_new(act, 2, lead, 9, 7, true);
        size_t n = 6 * 7, bs = 7;
        oclml_tensor *Y = test_tensor(2, L.yshape), *P = test_tensor(2, L.yshape);
        ASSERT_OK(oclml_linear(T, act, L.X, L.W, L.B, Y, P));
        oclml_tensor *S = saves_pre(act) ? P : Y;
        float *saved = test_floats(n);
        test_read(S, saved, n);
        L.dy[1 * 7 + 2] = NAN;
        saved[4 * 7 + 6] = NAN;
        if (act == OCLML_ACT_RELU) saved[1 * 7 + 2] = 1.0f; /* y > 0 where dy is NaN */
        ASSERT_OK(oclml_tensor_write(L.DY, L.dy, n));
        ASSERT_OK(oclml_tensor_write(S, saved, n));
        oclml_tensor *DX = test_tensor(2, L.xshape), *DW = test_tensor(2, L.wshape),
                     *DB = test_tensor(1, &bs);
        ASSERT_OK(oclml_linear_backward(T, act, L.X, L.W, act ? S : NULL, L.DY, DX, DW, DB, 0));
        double *dz = test_doubles(n);
        for (size_t i = 0; i < n; i++) dz[i] = dz_of(act, L.dy[i], saved[i]);
        grads g = ref_backward(dz, L.x, L.w, NULL, NULL, 6, 9, 7);
        ck_assert(isnan(g.dx[1 * 9]) && isnan(g.db[2]) && !isnan(g.dx[0]));
        float got[63];
        char what[64];
        snprintf(what, sizeof what, "NaN %s dx", ACT_NAMES[act]);
        test_read(DX, got, 54);
        test_assert_close_scaled(what, got, g.dx, g.sdx, 54, TOL_GEMM);
        snprintf(what, sizeof what, "NaN %s dw", ACT_NAMES[act]);
        test_read(DW, got, 63);
        test_assert_close_scaled(what, got, g.dw, g.sdw, 63, TOL_GEMM);
        snprintf(what, sizeof what, "NaN %s db", ACT_NAMES[act]);
        test_read(DB, got, 7);
        test_assert_close_scaled(what, got, g.db, g.sdb, 7, TOL_GEMM);
        oclml_tensor *t[] = {Y, P, DX, DW, DB};
        for (int i = 0; i < 5; i++) oclml_tensor_destroy(t[i]);
        grads_free(&g);
        free(dz);
        free(saved);
        layer_free(&L);
    }
}
END_TEST

/* The backward is deterministic: two runs agree bit for bit (no atomics anywhere). */
START_TEST(backward_repeatable) {
    test_retune(PATHS[_i]);
    size_t lead[1] = {300}, out = 70, in = 50;
    layer L = layer_new(OCLML_ACT_SILU, 2, lead, in, out, true);
    oclml_tensor *Y = test_tensor(2, L.yshape), *P = test_tensor(2, L.yshape);
    ASSERT_OK(oclml_linear(T, L.act, L.X, L.W, L.B, Y, P));
    float *first[3], *second[3];
    size_t n[3] = {300 * in, out * in, out};
    for (int run = 0; run < 2; run++) {
        oclml_tensor *DX = test_tensor(2, L.xshape), *DW = test_tensor(2, L.wshape),
                     *DB = test_tensor(1, &out);
        ASSERT_OK(oclml_linear_backward(T, L.act, L.X, L.W, P, L.DY, DX, DW, DB, 0));
        oclml_tensor *t[3] = {DX, DW, DB};
        for (int i = 0; i < 3; i++) {
            float *v = test_floats(n[i]);
            test_read(t[i], v, n[i]);
            (run ? second : first)[i] = v;
            oclml_tensor_destroy(t[i]);
        }
    }
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(!memcmp(first[i], second[i], n[i] * sizeof(float)),
                      "gradient %d differs between two runs", i);
        free(first[i]);
        free(second[i]);
    }
    oclml_tensor_destroy(Y);
    oclml_tensor_destroy(P);
    layer_free(&L);
}
END_TEST

/* ---- the GEMM's last wave split over K ---- */

/* The last wave's blocks run as a product of their own (check_gemm's tensor_core_last_wave_split
 * sets it up the same way), whose K-split sum then applies the bias, the activation and the
 * pre-activation store at the rectangle's offsets: forward and backward, bias per column. */
START_TEST(last_wave_split) {
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    const size_t units = info.compute_units;
    size_t lead[1] = {32 * (units == 2 ? 3 : 2) - 5};
    test_retune("gemm.own=1 gemm.mma=2 gemm.mma_tile=32:32:8:2:2 gemm.wave_warps=4 "
                "gemm.tail_splits=2");
    layer L = layer_new(OCLML_ACT_GELU_ERF, 2, lead, 117, 32 * (units + 1) - 3, true);
    backward_check(&L, WANT_DX | WANT_DW | WANT_DB, 0);
    layer_free(&L);
}
END_TEST

/* ---- PyTorch's golden vectors ---- */

static char golden_path[2048];

static void golden_check(const char *what, const oclml_tensor *t, const float *want, size_t n) {
    float *got = test_floats(n);
    double *ref = test_doubles(n);
    test_read(t, got, n);
    for (size_t i = 0; i < n; i++) ref[i] = want[i];
    test_assert_close(what, got, ref, n, TOL_GEMM);
    free(got);
    free(ref);
}

START_TEST(matches_pytorch) {
    test_retune(PATHS[_i]);
    FILE *f = fopen(golden_path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", golden_path);
    char line[256];
    ck_assert(fgets(line, sizeof line, f) != NULL); /* header comment */
    int cases = 0, act;
    char name[32];
    size_t rows, in, out;
    while (fscanf(f, " case %d %31s %zu %zu %zu", &act, name, &rows, &in, &out) == 5) {
        ck_assert_msg(act >= 0 && act < N_ACTS && !strcmp(name, ACT_NAMES[act]),
                      "golden case %d named %s", act, name);
        float *x = test_golden_floats(f, "x", rows * in), *w = test_golden_floats(f, "w", out * in),
              *b = test_golden_floats(f, "b", out), *dy = test_golden_floats(f, "dy", rows * out);
        float *y = test_golden_floats(f, "y", rows * out),
              *dx = test_golden_floats(f, "dx", rows * in),
              *dw = test_golden_floats(f, "dw", out * in), *db = test_golden_floats(f, "db", out);
        size_t xs[2] = {rows, in}, ws[2] = {out, in}, ys[2] = {rows, out};
        oclml_tensor *X = test_tensor_from(2, xs, x), *W = test_tensor_from(2, ws, w),
                     *B = test_tensor_from(1, &out, b), *DY = test_tensor_from(2, ys, dy);
        oclml_tensor *Y = test_tensor(2, ys), *P = test_tensor(2, ys), *DX = test_tensor(2, xs),
                     *DW = test_tensor(2, ws), *DB = test_tensor(1, &out);
        ASSERT_OK(oclml_linear(T, act, X, W, B, Y, P));
        ASSERT_OK(oclml_linear_backward(T, act, X, W, saves_pre(act) ? P : Y, DY, DX, DW, DB, 0));
        char what[64];
        snprintf(what, sizeof what, "PyTorch %s y", name);
        golden_check(what, Y, y, rows * out);
        snprintf(what, sizeof what, "PyTorch %s dx", name);
        golden_check(what, DX, dx, rows * in);
        snprintf(what, sizeof what, "PyTorch %s dw", name);
        golden_check(what, DW, dw, out * in);
        snprintf(what, sizeof what, "PyTorch %s db", name);
        golden_check(what, DB, db, out);
        oclml_tensor *t[] = {X, W, B, DY, Y, P, DX, DW, DB};
        for (int i = 0; i < 9; i++) oclml_tensor_destroy(t[i]);
        float *mem[] = {x, w, b, dy, y, dx, dw, db};
        for (int i = 0; i < 8; i++) free(mem[i]);
        cases++;
    }
    fclose(f);
    ck_assert_int_ge(cases, N_ACTS);
}
END_TEST

/* ---- bad input ---- */

static void assert_error(oclml_status got, oclml_status want, const char *text) {
    ASSERT_STATUS(got, want);
    if (text)
        ck_assert_msg(strstr(oclml_ctx_last_error(T), text), "error text '%s' lacks '%s'",
                      oclml_ctx_last_error(T), text);
}

START_TEST(bad_input_touches_nothing) {
    size_t xs[2] = {3, 5}, ws[2] = {4, 5}, ys[2] = {3, 4}, bs = 4, b5 = 5, y3[3] = {3, 1, 4},
           w6[2] = {4, 6}, big = 64;
    float xv[15], wv[20], bv[4], dyv[12];
    test_random(xv, 15, -1, 1);
    test_random(wv, 20, -1, 1);
    test_random(bv, 4, -1, 1);
    test_random(dyv, 12, -1, 1);
    oclml_tensor *X = test_tensor_from(2, xs, xv), *W = test_tensor_from(2, ws, wv),
                 *B = test_tensor_from(1, &bs, bv), *DY = test_tensor_from(2, ys, dyv);
    oclml_tensor *Y = test_tensor(2, ys), *P = test_tensor(2, ys), *S = test_tensor(2, ys),
                 *B5 = test_tensor(1, &b5), *Y3 = test_tensor(3, y3), *W6 = test_tensor(2, w6);
    oclml_tensor *DX = test_tensor(2, xs), *DW = test_tensor(2, ws), *DB = test_tensor(1, &bs);
    oclml_ctx *other = test_ctx_new(NULL);
    oclml_tensor *XO;
    ASSERT_OK(oclml_tensor_create(other, 2, xs, &XO));
    const oclml_activation NONE = OCLML_ACT_NONE, RELU = OCLML_ACT_RELU;

    /* Forward: NULLs, contexts, the activation, shapes that do not chain. */
    assert_error(oclml_linear(NULL, NONE, X, W, B, Y, P), OCLML_ERR_NULL_POINTER, NULL);
    assert_error(oclml_linear(T, NONE, NULL, W, B, Y, P), OCLML_ERR_NULL_POINTER, "'x'");
    assert_error(oclml_linear(T, NONE, X, NULL, B, Y, P), OCLML_ERR_NULL_POINTER, "'w'");
    assert_error(oclml_linear(T, NONE, X, W, B, NULL, P), OCLML_ERR_NULL_POINTER, "'y'");
    assert_error(oclml_linear(T, NONE, XO, W, B, Y, P), OCLML_ERR_CONTEXT_MISMATCH, NULL);
    assert_error(oclml_linear(T, (oclml_activation)7, X, W, B, Y, P), OCLML_ERR_INVALID_ARGUMENT,
                 "activation");
    assert_error(oclml_linear(T, (oclml_activation)-1, X, W, B, Y, P), OCLML_ERR_INVALID_ARGUMENT,
                 "activation");
    assert_error(oclml_linear(T, NONE, X, W6, B, Y, P), OCLML_ERR_INVALID_SHAPE, "do not chain");
    assert_error(oclml_linear(T, NONE, X, B, B, Y, P), OCLML_ERR_INVALID_SHAPE, "w must be");
    assert_error(oclml_linear(T, NONE, X, W, B5, Y, P), OCLML_ERR_INVALID_SHAPE, "b must have");
    assert_error(oclml_linear(T, NONE, X, W, B, Y3, P), OCLML_ERR_INVALID_SHAPE, "y is");
    assert_error(oclml_linear(T, NONE, X, W, B, Y, DX), OCLML_ERR_INVALID_SHAPE, "pre is");
    assert_error(oclml_linear(T, NONE, X, W, B, Y, Y), OCLML_ERR_INVALID_ARGUMENT,
                 "'y' and 'pre' overlap");

    /* Backward. */
    assert_error(oclml_linear_backward(NULL, RELU, X, W, S, DY, DX, DW, DB, 0),
                 OCLML_ERR_NULL_POINTER, NULL);
    assert_error(oclml_linear_backward(T, RELU, X, W, S, NULL, DX, DW, DB, 0),
                 OCLML_ERR_NULL_POINTER, "'dy'");
    assert_error(oclml_linear_backward(T, OCLML_ACT_GELU_ERF, X, W, NULL, DY, DX, DW, DB, 0),
                 OCLML_ERR_NULL_POINTER, "pre-activation");
    assert_error(oclml_linear_backward(T, OCLML_ACT_TANH, X, W, NULL, DY, DX, DW, DB, 0),
                 OCLML_ERR_NULL_POINTER, "output (y)");
    assert_error(oclml_linear_backward(T, (oclml_activation)9, X, W, S, DY, DX, DW, DB, 0),
                 OCLML_ERR_INVALID_ARGUMENT, "activation");
    assert_error(oclml_linear_backward(T, RELU, X, W6, S, DY, DX, DW, DB, 0),
                 OCLML_ERR_INVALID_SHAPE, "do not chain");
    assert_error(oclml_linear_backward(T, RELU, X, W, S, Y3, DX, DW, DB, 0),
                 OCLML_ERR_INVALID_SHAPE, "dy is");
    assert_error(oclml_linear_backward(T, RELU, X, W, B, DY, DX, DW, DB, 0),
                 OCLML_ERR_INVALID_SHAPE, "saved is");
    assert_error(oclml_linear_backward(T, RELU, X, W, S, DY, Y, DW, DB, 0), OCLML_ERR_INVALID_SHAPE,
                 "dx is");
    assert_error(oclml_linear_backward(T, RELU, X, W, S, DY, DX, W6, DB, 0),
                 OCLML_ERR_INVALID_SHAPE, "dw must be");
    assert_error(oclml_linear_backward(T, RELU, X, W, S, DY, DX, DW, B5, 0),
                 OCLML_ERR_INVALID_SHAPE, "db must have");
    assert_error(oclml_linear_backward(T, RELU, X, W, S, DY, DX, DW, XO, 0),
                 OCLML_ERR_CONTEXT_MISMATCH, NULL);

    /* Outputs over inputs or over each other: views into one NaN-filled buffer. */
    oclml_tensor *BIG = test_tensor(1, &big);
    cl_mem buf;
    size_t off;
    ASSERT_OK(oclml_tensor_buffer(BIG, &buf, &off));
    oclml_tensor *v[8];
    const struct {
        size_t at;
        int nd;
        const size_t *shape;
    } views[8] = {{0, 2, xs},  {10, 2, ys}, {20, 2, ys}, {25, 2, xs},
                  {30, 2, xs}, {40, 2, ws}, {0, 2, ws},  {16, 1, &bs}};
    for (int i = 0; i < 8; i++)
        ASSERT_OK(oclml_tensor_wrap(T, buf, off + views[i].at * sizeof(float), views[i].nd,
                                    views[i].shape, &v[i]));
    assert_error(oclml_linear(T, NONE, v[0], W, B, v[1], NULL), OCLML_ERR_INVALID_ARGUMENT,
                 "'y' overlaps 'x'");
    assert_error(oclml_linear(T, NONE, X, v[6], v[7], v[1], NULL), OCLML_ERR_INVALID_ARGUMENT,
                 "'y' overlaps 'w'");
    assert_error(oclml_linear(T, NONE, X, v[6], B, Y, v[1]), OCLML_ERR_INVALID_ARGUMENT,
                 "'pre' overlaps 'w'");
    assert_error(oclml_linear_backward(T, RELU, X, W, S, v[2], v[3], DW, DB, 0),
                 OCLML_ERR_INVALID_ARGUMENT, "'dx' overlaps 'dy'");
    assert_error(oclml_linear_backward(T, RELU, X, W, S, DY, v[4], v[5], DB, 0),
                 OCLML_ERR_INVALID_ARGUMENT, "'dw' overlaps 'dx'");
    assert_error(oclml_linear_backward(T, RELU, X, v[6], S, DY, DX, DW, v[7], 0),
                 OCLML_ERR_INVALID_ARGUMENT, "'db' overlaps 'w'");
    assert_error(oclml_linear_backward(T, RELU, X, W, v[1], DY, DX, v[5], v[7], 1),
                 OCLML_ERR_INVALID_ARGUMENT, "'db' overlaps 'saved'");

    /* Nothing was written anywhere. */
    oclml_tensor *outs[] = {Y, P, S, DX, DW, DB, BIG};
    size_t counts[] = {12, 12, 12, 15, 20, 4, 64};
    for (int i = 0; i < 7; i++) test_assert_untouched(outs[i], counts[i]);

    /* The same tensors in a good call work. */
    ASSERT_OK(oclml_linear(T, RELU, X, W, B, Y, NULL));
    ASSERT_OK(oclml_linear_backward(T, RELU, X, W, Y, DY, DX, DW, DB, 0));
    ASSERT_OK(oclml_linear_backward(T, NONE, X, W, NULL, DY, NULL, NULL, NULL, 1));

    oclml_tensor *all[] = {X, W, B, DY, Y, P, S, B5, Y3, W6, DX, DW, DB, BIG};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) oclml_tensor_destroy(all[i]);
    for (int i = 0; i < 8; i++) oclml_tensor_destroy(v[i]);
    oclml_tensor_destroy(XO);
    oclml_ctx_destroy(other);
}
END_TEST

int main(void) {
    Suite *s = suite_create("linear");
    TCase *tc = tcase_create("linear");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_every_activation, 0, N_PATHS * N_ACTS);
    tcase_add_loop_test(tc, forward_skinny, 0, N_PATHS);
    tcase_add_loop_test(tc, backward_every_activation, 0, N_PATHS * N_ACTS);
    tcase_add_loop_test(tc, backward_combinations_and_skinny, 0, N_PATHS);
    tcase_add_loop_test(tc, backward_finite_differences, 0, N_PATHS);
    tcase_add_loop_test(tc, nan_in_nan_out, 0, N_PATHS);
    tcase_add_loop_test(tc, backward_repeatable, 0, N_PATHS);
    tcase_add_test(tc, last_wave_split);
    tcase_add_test(tc, bad_input_touches_nothing);
    /* PyTorch's vectors: skipped (with a note) until make_linear_golden.py has made them. */
    if (test_golden_path(golden_path, sizeof golden_path, "check_linear", "linear_golden.txt"))
        tcase_add_loop_test(tc, matches_pytorch, 0, N_PATHS);
    suite_add_tcase(s, tc);
    return test_main(s);
}
