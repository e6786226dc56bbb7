/* Convolution, transposed convolution and pooling against direct double-precision definitions
 * (independent of the im2col formulation), the gradients also against central finite
 * differences of the double forward, on both GEMM paths (CLBlast and the own kernels) and with
 * images split into chunks; NaN policy and bad input. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A convolution case (tests/ref/ref.h). */
typedef ref_conv_case conv_case;

static const conv_case CASES[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, /* 3x3 "same" */
    {2, 2, 9, 8, 3, 2, 3, 2, 2, 0, 1, 1, 0, 2, 1, 1, 1, 1}, /* stride 2, asymmetric pad, dilation */
    {3, 4, 5, 5, 6, 3, 3, 1, 2, 1, 0, 1, 2, 1, 1, 2, 0, 1}, /* groups 2 */
    {2, 5, 4, 3, 7, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0}, /* 1x1 */
    {1, 3, 8, 8, 2, 4, 4, 1, 1, 1, 1, 2, 2, 1, 1, 1, 0, 0}, /* even kernel, TF "SAME" */
    {5, 2, 3, 4, 3, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0}, /* 1x2 outputs: images mid-chunk */
    {2, 3, 6, 7, 5, 3, 3, 1, 1, 2, 0, 1, 2, 1, 1, 1, 0, 0}, /* 3x3, asymmetric pad: 7x7 outputs */
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

static oclml_conv2d_params params_of(const conv_case *c) {
    oclml_conv2d_params p;
    oclml_conv2d_params_init(&p);
    p.stride[0] = c->sh, p.stride[1] = c->sw;
    p.pad_before[0] = c->pt, p.pad_before[1] = c->pl;
    p.pad_after[0] = c->pb, p.pad_after[1] = c->pr;
    p.dilation[0] = c->dh, p.dilation[1] = c->dw;
    p.groups = c->groups;
    return p;
}

static size_t conv_out(size_t in, unsigned a, unsigned b, size_t k, unsigned d, unsigned s) {
    return (in + a + b - d * (k - 1) - 1) / s + 1;
}

static double *to_double(const float *f, size_t n) {
    double *d = test_doubles(n);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}

typedef void ref_fn(const conv_case *c, const double *x, const double *w, const double *b,
                    double *y, size_t P, size_t Q);

/* sum(y * dy) of the double forward: its gradient is what the backward computes. */
static double objective(ref_fn *f, const conv_case *c, const double *x, const double *w,
                        const double *b, const double *dy, size_t P, size_t Q, size_t ny) {
    double *y = test_doubles(ny), sum = 0;
    f(c, x, w, b, y, P, Q);
    for (size_t i = 0; i < ny; i++) sum += y[i] * dy[i];
    free(y);
    return sum;
}

/* Central differences of the objective at every entry of v (which f reads), against got: the
 * objective is linear in each entry, so the differences are exact up to rounding, and the cases
 * are small enough to take them all. */
static void check_fd(const char *what, ref_fn *f, const conv_case *c, double *x, double *w,
                     double *b, const double *dy, size_t P, size_t Q, size_t ny, double *v,
                     size_t nv, const float *got) {
    for (size_t i = 0; i < nv; i++) {
        double keep = v[i], step = 1e-4;
        v[i] = keep + step;
        double up = objective(f, c, x, w, b, dy, P, Q, ny);
        v[i] = keep - step;
        double down = objective(f, c, x, w, b, dy, P, Q, ny);
        v[i] = keep;
        double fd = (up - down) / (2 * step);
        ck_assert_msg(fabs(got[i] - fd) <= 1e-4 * (fabs(fd) + 1),
                      "%s[%zu] = %.7g, finite diff %.7g", what, i, got[i], fd);
    }
}

/* Runs one case forward and backward (conv or transposed) and checks every output. */
static void run_case(const conv_case *c, bool transposed, bool with_bias, int accumulate) {
    oclml_conv2d_params prm = params_of(c);
    prm.output_padding[0] = transposed ? c->oph : 0;
    prm.output_padding[1] = transposed ? c->opw : 0;
    size_t P, Q;
    if (transposed) {
        P = (c->H - 1) * c->sh - c->pt - c->pb + c->dh * (c->R - 1) + c->oph + 1;
        Q = (c->W - 1) * c->sw - c->pl - c->pr + c->dw * (c->S - 1) + c->opw + 1;
    } else {
        P = conv_out(c->H, c->pt, c->pb, c->R, c->dh, c->sh);
        Q = conv_out(c->W, c->pl, c->pr, c->S, c->dw, c->sw);
    }
    size_t nx = c->N * c->C * c->H * c->W, ny = c->N * c->K * P * Q;
    size_t wsh[4] = {transposed ? c->C : c->K, (transposed ? c->K : c->C) / c->groups, c->R, c->S};
    size_t nw = wsh[0] * wsh[1] * c->R * c->S;
    size_t xsh[4] = {c->N, c->C, c->H, c->W}, ysh[4] = {c->N, c->K, P, Q}, bsh[1] = {c->K};
    float *x = test_floats(nx), *w = test_floats(nw), *b = test_floats(c->K), *dy = test_floats(ny);
    test_random(x, nx, -1, 1);
    test_random(w, nw, -1, 1);
    test_random(b, c->K, -1, 1);
    test_random(dy, ny, -1, 1);
    oclml_tensor *X = test_tensor_from(4, xsh, x), *Wt = test_tensor_from(4, wsh, w),
                 *B = test_tensor_from(1, bsh, b), *Y = test_tensor(4, ysh),
                 *DY = test_tensor_from(4, ysh, dy);
    float *start = test_floats(nx > nw ? nx : nw);
    test_random(start, nx > nw ? nx : nw, -1, 1);
    oclml_tensor *DX = test_tensor_from(4, xsh, start), *DW = test_tensor_from(4, wsh, start),
                 *DB = test_tensor_from(1, bsh, start);
    if (transposed) {
        ASSERT_OK(oclml_conv_transpose2d(T, &prm, X, Wt, with_bias ? B : NULL, Y));
        ASSERT_OK(oclml_conv_transpose2d_backward(T, &prm, X, Wt, DY, DX, DW, DB, accumulate));
    } else {
        ASSERT_OK(oclml_conv2d(T, &prm, X, Wt, with_bias ? B : NULL, Y));
        ASSERT_OK(oclml_conv2d_backward(T, &prm, X, Wt, DY, DX, DW, DB, accumulate));
    }
    double *xd = to_double(x, nx), *wd = to_double(w, nw), *bd = to_double(b, c->K),
           *dyd = to_double(dy, ny), *ref = test_doubles(ny);
    ref_fn *f = transposed ? ref_conv_transpose : ref_conv;
    f(c, xd, wd, with_bias ? bd : NULL, ref, P, Q);
    float *out = test_floats(ny);
    test_read(Y, out, ny);
    char what[160];
    snprintf(what, sizeof what, "%s case N%zu C%zu %zux%zu K%zu k%zux%zu g%u",
             transposed ? "conv_transpose2d" : "conv2d", c->N, c->C, c->H, c->W, c->K, c->R, c->S,
             c->groups);
    test_assert_close(what, out, ref, ny, 1e-5);
    /* Gradients: exact references by differentiating the definitions numerically, with the
     * accumulated start values added back where accumulating. */
    float *gx = test_floats(nx), *gw = test_floats(nw), *gb = test_floats(c->K);
    test_read(DX, gx, nx);
    test_read(DW, gw, nw);
    test_read(DB, gb, c->K);
    if (accumulate) {
        for (size_t i = 0; i < nw; i++) gw[i] -= start[i];
        for (size_t i = 0; i < c->K; i++) gb[i] -= start[i];
    }
    check_fd("dx", f, c, xd, wd, bd, dyd, P, Q, ny, xd, nx, gx);
    check_fd("dw", f, c, xd, wd, bd, dyd, P, Q, ny, wd, nw, gw);
    for (size_t k = 0; k < c->K; k++) { /* db: the sum of dy over images and positions */
        double sum = 0;
        for (size_t n = 0; n < c->N; n++)
            for (size_t i = 0; i < P * Q; i++) sum += dy[(n * c->K + k) * P * Q + i];
        ck_assert_msg(fabs(gb[k] - sum) <= 1e-4 * (fabs(sum) + 1), "db[%zu] %g vs %g", k, gb[k],
                      sum);
    }
    oclml_tensor *all[] = {X, Wt, B, Y, DY, DX, DW, DB};
    for (int i = 0; i < 8; i++) oclml_tensor_destroy(all[i]);
    void *mem[] = {x, w, b, dy, start, xd, wd, bd, dyd, ref, out, gx, gw, gb};
    for (int i = 0; i < 14; i++) free(mem[i]);
}

/* Each case on the CLBlast path, the own kernels, with one image a chunk, and with two (the
 * three-image case then ends on a partial chunk); and as implicit GEMMs (the product gathers its
 * columns: the forward, and the data gradient of stride-1 cases, which is also the transposed
 * convolution's forward) on the FMA tiles and on the tensor-core kernel (emulated here, as on
 * the GPU where that is the default); then a path that mixes them as the GPU's default does
 * (the per-pass keys: forward and weight gradient gathered, data gradient unfolded); last,
 * Winograd F(2x2,3x3) for the 3x3 stride-1 cases' three passes, in one chunk and
 * in chunks of two images on the (emulated) tensor cores; the direct weight and data gradients
 * (the data gradient, with its bias, is also the transposed convolution's forward; the emulated
 * tensor cores would take both by default on these few-channel cases, so the paths that test
 * the gathered gradients there switch them off). The quick tier takes the first QUICK_PATHS,
 * the paths devices pick by default. */
static const char *PATH_TUNING[] = {
    "gemm.own=0 conv.implicit=0",
    "gemm.own=1 conv.implicit=0",
    "gemm.own=1 conv.implicit=0 conv.chunk=1",
    "gemm.own=1 conv.implicit=0 conv.chunk=2",
    "gemm.own=1 conv.implicit=1 gemm.mma=2 conv.direct_dw=0 conv.direct_dx=0",
    "gemm.own=1 conv.winograd=1 conv.implicit=1 gemm.mma=2 conv.chunk=2 conv.direct_dw=0 "
    "conv.direct_dx=0",
    "gemm.own=0 conv.implicit=0 conv.direct_dw=1 conv.direct_dx=1",
    /* The sweep's: paths no device takes by default (the gathered product and Winograd on FMA
     * tiles, the mixed path's gathered products there too), forced K splits. */
    "gemm.own=1 conv.implicit=1 conv.implicit_dx=0 conv.implicit_dw=1 gemm.mma=0 gemm.splitk=3",
    "gemm.own=1 conv.implicit=1 gemm.mma=0",
    "gemm.own=1 conv.implicit=1 gemm.mma=2 conv.direct_dw=0 conv.direct_dx=0 gemm.splitk=2",
    "gemm.own=1 conv.winograd=1 conv.implicit=0 conv.direct_dx=0",
};
#define N_PATHS (int)(sizeof PATH_TUNING / sizeof PATH_TUNING[0])
#define QUICK_PATHS 7

/* Loop: every path overwriting dW, then accumulating into it (the quick tier accumulates on
 * the CPU's default path and the tensor cores' implicit one; the sweep on every path). */
static const int QUICK_ACCUMULATE[] = {1, 4};
static int case_path(int i, int paths, int *accumulate) {
    *accumulate = i >= paths;
    if (!*accumulate) return i;
    return test_sweep() ? i - paths : QUICK_ACCUMULATE[i - paths];
}
static int case_loops(void) {
    const int paths = test_tier(QUICK_PATHS, N_PATHS);
    return paths + (test_sweep() ? paths : (int)(sizeof QUICK_ACCUMULATE / sizeof(int)));
}

START_TEST(conv2d_cases) {
    int accumulate;
    test_retune(PATH_TUNING[case_path(_i, test_tier(QUICK_PATHS, N_PATHS), &accumulate)]);
    for (int i = 0; i < N_CASES; i++) run_case(&CASES[i], false, i % 2 == 0, accumulate);
}
END_TEST

START_TEST(conv_transpose2d_cases) {
    int accumulate;
    test_retune(PATH_TUNING[case_path(_i, test_tier(QUICK_PATHS, N_PATHS), &accumulate)]);
    for (int i = 0; i < N_CASES; i++) run_case(&CASES[i], true, i % 2 == 1, accumulate);
}
END_TEST

/* The direct weight gradient over several tiles of dW: 40 output channels (two tiles of rows),
 * 3 channels of 7x7 taps (147 columns: two tiles of columns), stride 2 with padding 3 (a
 * ResNet stem), and two groups of 18 channels with 3x3 taps dilated by 2; overwriting and
 * accumulating. */
START_TEST(conv2d_direct_weight_gradient_tiles) {
    static const conv_case DIRECT_CASES[] = {
        {2, 3, 11, 9, 40, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 0, 0},
        {1, 36, 7, 8, 6, 3, 3, 1, 1, 2, 2, 2, 1, 2, 2, 2, 0, 0},
    };
    test_retune("conv.direct_dw=1");
    for (int i = 0; i < 2; i++) run_case(&DIRECT_CASES[i], false, i == 0, _i);
}
END_TEST

/* The direct data gradient over several of its 32x32 tiles (a 37x35 image: partial tiles on
 * both edges), 6 output channels (a partial chunk of 4), 5x5 taps "same"; 4 channels of 3x3 taps
 * from 3 with asymmetric padding, 33 rows, as a convolution's data gradient; and transposed,
 * 6 channels into 3 (a partial chunk), as the transposed convolution's forward with its bias.
 * The plan must name the direct path wherever the device takes its 256-item work-groups. */
START_TEST(conv2d_direct_data_gradient_tiles) {
    static const conv_case DX_CASES[] = {
        {1, 3, 37, 35, 6, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, 0, 0},
        {2, 4, 33, 9, 3, 3, 3, 1, 1, 0, 2, 1, 0, 1, 1, 1, 0, 0},
        {1, 6, 33, 9, 3, 3, 3, 1, 1, 0, 2, 1, 0, 1, 1, 1, 0, 0},
    };
    test_retune("conv.direct_dx=1");
    oclml_device_caps caps;
    ASSERT_OK(oclml_ctx_device_caps(T, &caps));
    /* Loop 0: the transposed cases (33 rows: two tiles; 6 channels: a partial chunk); 1, the
     * sweep's: the 37x35 image (partial tiles on both edges), whose exhaustive differences of
     * the reference are the larger cost, and the plan. */
    if (_i == 1) {
        for (int i = 0; i < 2; i++) {
            const conv_case *c = &DX_CASES[i];
            oclml_conv2d_params prm = params_of(c);
            size_t xsh[4] = {c->N, c->C, c->H, c->W}, wsh[4] = {c->K, c->C, c->R, c->S};
            oclml_tensor *X = test_tensor(4, xsh), *Wt = test_tensor(4, wsh);
            char text[256];
            ASSERT_OK(oclml_conv2d_plan(T, &prm, X, Wt, text, sizeof text));
            ck_assert_msg((strstr(text, "data gradient direct (") != NULL) ==
                              (caps.max_work_group_size >= 256),
                          "case %d: %s", i, text);
            oclml_tensor_destroy(X);
            oclml_tensor_destroy(Wt);
            run_case(c, false, true, 0);
        }
    } else {
        run_case(&DX_CASES[1], true, true, 0); /* 4 channels into 3 */
        run_case(&DX_CASES[2], true, true, 0); /* 6 channels into 3 */
    }
}
END_TEST

/* Winograd F(2x2,5x5): "same" padding on odd sizes (a partial last tile), no padding,
 * asymmetric padding, and 24 input channels (the transforms' rounding over 600-term sums), each
 * as a convolution and a transposed one, forward and both gradients;
 * in one chunk and in chunks of one image on the (emulated) tensor cores. */
START_TEST(conv2d_winograd_5x5) {
    static const conv_case WINO5[] = {
        {2, 3, 7, 9, 4, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, 0, 0},
        {1, 4, 8, 6, 3, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0},
        {2, 2, 6, 7, 5, 5, 5, 1, 1, 4, 1, 0, 3, 1, 1, 1, 0, 0},
        {1, 24, 5, 6, 6, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, 0, 0}, /* 600-term sums */
    };
    static const char *const TUNING[] = {
        "gemm.own=1 conv.winograd=1 conv.implicit=0 conv.direct_dx=0",
        "gemm.own=1 conv.winograd=1 gemm.mma=2 conv.chunk=1 conv.direct_dw=0 conv.direct_dx=0"};
    /* The tensor cores' (a GPU's default) first, as a convolution and a transposed one. */
    test_retune(TUNING[_i < 2]);
    for (int i = 0; i < 4; i++) run_case(&WINO5[i], _i % 2 == 1, i != 1, i == 2);
}
END_TEST

/* The NaN policy tests' paths: unfolded, gathered on the (emulated) tensor cores, which
 * recompute a NaN output in fp32 from the gathered operands, and Winograd, which recomputes a
 * tile that came out NaN directly; the weight and data gradients also computed directly (the
 * backward tests only, the last of the quick tier's: the data gradient runs the direct kernel
 * on the CASES[0] shape wherever the device takes 256-item work-groups). The quick tier's run
 * the GEMMs where devices do by default (the FMA tiles, the tensor cores emulated); the sweep
 * adds the gathered product and Winograd on FMA tiles. */
static const char *const NAN_PATHS[] = {
    "gemm.own=1 conv.implicit=0",
    "gemm.own=1 conv.implicit=1 gemm.mma=2 conv.direct_dw=0 conv.direct_dx=0",
    "gemm.own=1 conv.winograd=1 gemm.mma=2 conv.direct_dw=0 conv.direct_dx=0",
    "conv.direct_dw=1 conv.direct_dx=1",
    /* The sweep's. */
    "gemm.own=1 conv.implicit=1 gemm.mma=0",
    "gemm.own=1 conv.winograd=1 conv.direct_dx=0",
};
#define N_NAN_PATHS (int)(sizeof NAN_PATHS / sizeof NAN_PATHS[0])
#define QUICK_NAN_PATHS 4 /* the last of them computes the gradients directly */

/* The NaN tests' convolution (CASES[0], 3x3 "same") with random x, w and dy on the device, x
 * NaN at image 0, input channel 1, (3, 2). */
typedef struct nan_case {
    conv_case c;
    oclml_conv2d_params prm;
    size_t nw, ny;
    oclml_tensor *x, *w, *dy;
} nan_case;

static nan_case nan_case_make(void) {
    nan_case t = {.c = CASES[0]};
    const conv_case *c = &t.c;
    t.prm = params_of(c);
    size_t xsh[4] = {c->N, c->C, c->H, c->W}, wsh[4] = {c->K, c->C, c->R, c->S},
           ysh[4] = {c->N, c->K, c->H, c->W}, nx = c->N * c->C * c->H * c->W;
    t.nw = c->K * c->C * c->R * c->S;
    t.ny = c->N * c->K * c->H * c->W;
    float *x = test_floats(nx), *w = test_floats(t.nw), *dy = test_floats(t.ny);
    test_random(x, nx, -1, 1);
    test_random(w, t.nw, -1, 1);
    test_random(dy, t.ny, -1, 1);
    x[(0 * c->C + 1) * c->H * c->W + 3 * c->W + 2] = NAN;
    t.x = test_tensor_from(4, xsh, x);
    t.w = test_tensor_from(4, wsh, w);
    t.dy = test_tensor_from(4, ysh, dy);
    free(x);
    free(w);
    free(dy);
    return t;
}

static void nan_case_free(nan_case *t) {
    oclml_tensor_destroy(t->x);
    oclml_tensor_destroy(t->w);
    oclml_tensor_destroy(t->dy);
}

/* A NaN input reaches exactly the outputs whose windows hold it. */
START_TEST(conv2d_nan_policy) {
    test_retune(NAN_PATHS[_i]);
    nan_case t = nan_case_make();
    const conv_case c = t.c;
    oclml_tensor *Y = test_tensor(4, (size_t[4]){c.N, c.K, c.H, c.W});
    ASSERT_OK(oclml_conv2d(T, &t.prm, t.x, t.w, NULL, Y));
    float *y = test_floats(t.ny);
    test_read(Y, y, t.ny);
    for (size_t n = 0; n < c.N; n++)
        for (size_t k = 0; k < c.K; k++)
            for (size_t p = 0; p < c.H; p++)
                for (size_t q = 0; q < c.W; q++) {
                    bool hit = n == 0 && labs((long)p - 3) <= 1 && labs((long)q - 2) <= 1;
                    float v = y[((n * c.K + k) * c.H + p) * c.W + q];
                    ck_assert_msg(hit ? isnan(v) : isfinite(v), "%s: y[%zu,%zu,%zu,%zu] = %g",
                                  NAN_PATHS[_i], n, k, p, q, v);
                }
    oclml_tensor_destroy(Y);
    nan_case_free(&t);
    free(y);
}
END_TEST

/* The gradients' NaN policy: a NaN in x reaches every dw of its input channel, a NaN in dy
 * every dw of its output channel and exactly the dx positions its taps reach (every channel of
 * its image; dx does not read x), nothing else. */
START_TEST(conv2d_backward_nan_policy) {
    test_retune(NAN_PATHS[_i]);
    nan_case t = nan_case_make();
    const conv_case c = t.c;
    const size_t nx = c.N * c.C * c.H * c.W;
    float *dy = test_floats(t.ny), *dw = test_floats(t.nw), *dx = test_floats(nx);
    test_read(t.dy, dy, t.ny);
    dy[(1 * c.K + 2) * c.H * c.W + 3 * c.W + 2] = NAN; /* image 1, output channel 2 */
    ASSERT_OK(oclml_tensor_write(t.dy, dy, t.ny));
    oclml_tensor *DW = test_tensor(4, (size_t[4]){c.K, c.C, c.R, c.S}),
                 *DX = test_tensor(4, (size_t[4]){c.N, c.C, c.H, c.W});
    ASSERT_OK(oclml_conv2d_backward(T, &t.prm, t.x, t.w, t.dy, DX, DW, NULL, 0));
    test_read(DW, dw, t.nw);
    test_read(DX, dx, nx);
    for (size_t n = 0; n < c.N; n++)
        for (size_t ch = 0; ch < c.C; ch++)
            for (size_t h = 0; h < c.H; h++)
                for (size_t v = 0; v < c.W; v++) {
                    float got = dx[((n * c.C + ch) * c.H + h) * c.W + v];
                    bool hit = n == 1 && labs((long)h - 3) <= 1 && labs((long)v - 2) <= 1;
                    ck_assert_msg(hit ? isnan(got) : isfinite(got), "%s: dx[%zu,%zu,%zu,%zu] = %g",
                                  NAN_PATHS[_i], n, ch, h, v, got);
                }
    for (size_t k = 0; k < c.K; k++)
        for (size_t ch = 0; ch < c.C; ch++)
            for (size_t r = 0; r < c.R * c.S; r++) {
                float v = dw[(k * c.C + ch) * c.R * c.S + r];
                bool hit = k == 2 || ch == 1;
                ck_assert_msg(hit ? isnan(v) : isfinite(v), "%s: dw[%zu,%zu,%zu] = %g",
                              NAN_PATHS[_i], k, ch, r, v);
            }
    oclml_tensor_destroy(DW);
    oclml_tensor_destroy(DX);
    nan_case_free(&t);
    free(dy);
    free(dw);
    free(dx);
}
END_TEST

/* oclml_conv2d_plan names the formulation the forward takes and refuses bad input. */
START_TEST(conv2d_plan_says_how) {
    conv_case c = CASES[0];
    oclml_conv2d_params prm = params_of(&c);
    size_t xsh[4] = {c.N, c.C, c.H, c.W}, wsh[4] = {c.K, c.C, c.R, c.S}, w1[4] = {c.K, c.C, 1, 1};
    char text[256];
    /* Tensors belong to one context: made after each retune, destroyed before the next. */
    test_retune("conv.implicit=1 conv.direct_dw=0 conv.direct_dx=0");
    oclml_tensor *X = test_tensor(4, xsh), *Wt = test_tensor(4, wsh);
    ASSERT_OK(oclml_conv2d_plan(T, &prm, X, Wt, text, sizeof text));
    ck_assert_msg(strstr(text, "implicit GEMM") && strstr(text, "data gradient gathered") &&
                      strstr(text, "weight gradient gathered"),
                  "%s", text);
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Wt);
    test_retune("conv.implicit=0 conv.direct_dw=0 conv.direct_dx=0");
    X = test_tensor(4, xsh), Wt = test_tensor(4, wsh);
    oclml_tensor *W1 = test_tensor(4, w1);
    ASSERT_OK(oclml_conv2d_plan(T, &prm, X, Wt, text, sizeof text));
    ck_assert_msg(strstr(text, "im2col") && strstr(text, "data gradient unfolded") &&
                      strstr(text, "weight gradient unfolded"),
                  "%s", text);
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Wt);
    oclml_tensor_destroy(W1);
    test_retune("conv.winograd=1 conv.direct_dx=0");
    X = test_tensor(4, xsh), Wt = test_tensor(4, wsh), W1 = test_tensor(4, w1);
    ASSERT_OK(oclml_conv2d_plan(T, &prm, X, Wt, text, sizeof text));
    ck_assert_msg(strstr(text, "Winograd F(2x2,3x3): 16 products") &&
                      strstr(text, "data gradient Winograd"),
                  "%s", text);
    oclml_conv2d_params one;
    oclml_conv2d_params_init(&one);
    ASSERT_OK(oclml_conv2d_plan(T, &one, X, W1, text, sizeof text));
    ck_assert_msg(strstr(text, "1x1") != NULL, "%s", text);
    /* The direct weight gradient: forced, and by default on (emulated) tensor cores for 27
     * columns and 32 output channels; not for 4 output channels. */
    static const struct {
        const char *tuning;
        size_t out_channels;
        bool direct;
    } DIRECT[] = {{"conv.direct_dw=1 conv.direct_dx=1", 4, true},
                  {"gemm.own=1 gemm.mma=2", 32, true},
                  {"gemm.own=1 gemm.mma=2 conv.direct_dx=0", 4, false}};
    for (int i = 0; i < 3; i++) {
        oclml_tensor_destroy(X);
        oclml_tensor_destroy(Wt);
        oclml_tensor_destroy(W1);
        test_retune(DIRECT[i].tuning);
        size_t wd[4] = {DIRECT[i].out_channels, c.C, c.R, c.S};
        X = test_tensor(4, xsh), Wt = test_tensor(4, wd), W1 = test_tensor(4, w1);
        ASSERT_OK(oclml_conv2d_plan(T, &prm, X, Wt, text, sizeof text));
        ck_assert_msg((strstr(text, "weight gradient direct (") != NULL) == DIRECT[i].direct,
                      "%s, %zu output channels: %s", DIRECT[i].tuning, DIRECT[i].out_channels,
                      text);
        /* The direct data gradient: forced, where the device takes its 256-item work-groups
         * (by default only from 28x28 planes: below). */
        oclml_device_caps caps;
        ASSERT_OK(oclml_ctx_device_caps(T, &caps));
        ck_assert_msg((strstr(text, "data gradient direct (") != NULL) ==
                          (i == 0 && caps.max_work_group_size >= 256),
                      "%s: %s", DIRECT[i].tuning, text);
        if (i == 1) { /* by default on the (emulated) tensor cores: 3 channels of 28x28 */
            size_t x28[4] = {1, 3, 28, 28};
            oclml_tensor *X28 = test_tensor(4, x28);
            ASSERT_OK(oclml_conv2d_plan(T, &prm, X28, Wt, text, sizeof text));
            ck_assert_msg((strstr(text, "data gradient direct (") != NULL) ==
                              (caps.max_work_group_size >= 256),
                          "28x28 by default: %s", text);
            oclml_tensor_destroy(X28);
        }
    }
    /* By default Winograd where the products run on tensor cores (emulated here): at 3x3 the
     * forward (and data gradient) from 96 channels, at 5x5 from 64 input channels (the
     * forward's depth); the weight gradient from 32; FMA products keep the GEMM paths. */
    static const struct {
        size_t channels, out_channels, taps;
        const char *tuning;
        bool forward, weight;
    } AUTO[] = {{96, 96, 3, "gemm.own=1 gemm.mma=2", true, true},
                {64, 64, 3, "gemm.own=1 gemm.mma=2", false, true},
                {16, 16, 3, "gemm.own=1 gemm.mma=2", false, false},
                {128, 128, 3, "gemm.own=1 gemm.mma=0", false, false},
                {64, 128, 5, "gemm.own=1 gemm.mma=2", true, true},
                {32, 64, 5, "gemm.own=1 gemm.mma=2", false, true}};
    for (size_t i = 0; i < sizeof AUTO / sizeof AUTO[0]; i++) {
        oclml_tensor_destroy(X);
        oclml_tensor_destroy(Wt);
        oclml_tensor_destroy(W1);
        test_retune(AUTO[i].tuning);
        size_t ch = AUTO[i].channels, t = AUTO[i].taps, xw[4] = {1, ch, 6, 6},
               ww[4] = {AUTO[i].out_channels, ch, t, t};
        oclml_conv2d_params same = prm;
        same.pad_before[0] = same.pad_before[1] = same.pad_after[0] = same.pad_after[1] =
            (unsigned)(t / 2);
        X = test_tensor(4, xw), Wt = test_tensor(4, ww), W1 = test_tensor(4, w1);
        ASSERT_OK(oclml_conv2d_plan(T, &same, X, Wt, text, sizeof text));
        ck_assert_msg((strncmp(text, "Winograd", 8) == 0) == AUTO[i].forward &&
                          (strstr(text, "weight gradient Winograd") != NULL) == AUTO[i].weight,
                      "%s, %zu channels, %zux%zu: %s", AUTO[i].tuning, ch, t, t, text);
    }
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Wt);
    X = test_tensor(4, xsh), Wt = test_tensor(4, wsh);
    /* Bad input: an error, and the text untouched. */
    strcpy(text, "untouched");
    ck_assert_int_eq(oclml_conv2d_plan(T, &prm, X, Wt, NULL, 8), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_conv2d_plan(T, &prm, X, Wt, text, 0), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_conv2d_plan(T, &prm, Wt, X, text, sizeof text), OCLML_ERR_INVALID_SHAPE);
    ck_assert_int_eq(oclml_conv2d_plan(NULL, &prm, X, Wt, text, sizeof text),
                     OCLML_ERR_NULL_POINTER);
    ck_assert_str_eq(text, "untouched");
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Wt);
    oclml_tensor_destroy(W1);
}
END_TEST

/* A NaN in a corner pixel (image 0, channel 1, (0, 0)) of the "same" 3x3 case reaches only the
 * taps that read it, (r, s) with r, s <= 1, of every output channel's dw for that input channel:
 * the transformed paths (Winograd) repair what their transforms spread. */
START_TEST(conv2d_backward_nan_corner) {
    test_retune(NAN_PATHS[_i]);
    nan_case t = nan_case_make();
    const conv_case c = t.c;
    size_t nx = c.N * c.C * c.H * c.W;
    float *x = test_floats(nx), *dw = test_floats(t.nw);
    test_read(t.x, x, nx);
    for (size_t i = 0; i < nx; i++) /* the shared case's interior NaN made finite */
        if (isnan(x[i])) x[i] = 0.25f;
    x[(0 * c.C + 1) * c.H * c.W] = NAN;
    ASSERT_OK(oclml_tensor_write(t.x, x, nx));
    oclml_tensor *DW = test_tensor(4, (size_t[4]){c.K, c.C, c.R, c.S});
    ASSERT_OK(oclml_conv2d_backward(T, &t.prm, t.x, t.w, t.dy, NULL, DW, NULL, 0));
    test_read(DW, dw, t.nw);
    for (size_t k = 0; k < c.K; k++)
        for (size_t ch = 0; ch < c.C; ch++)
            for (size_t r = 0; r < c.R; r++)
                for (size_t s = 0; s < c.S; s++) {
                    float v = dw[((k * c.C + ch) * c.R + r) * c.S + s];
                    bool hit = ch == 1 && r <= 1 && s <= 1;
                    ck_assert_msg(hit ? isnan(v) : isfinite(v), "%s: dw[%zu,%zu,%zu,%zu] = %g",
                                  NAN_PATHS[_i], k, ch, r, s, v);
                }
    oclml_tensor_destroy(DW);
    nan_case_free(&t);
    free(x);
    free(dw);
}
END_TEST

/* ---- pooling ---- */

/* A pooling case (tests/ref/ref.h). */
typedef ref_pool_case pool_case;

static const pool_case POOLS[] = {
    {2, 3, 8, 6, 2, 2, 0, 0, 0, 0, 0, 1}, {1, 2, 7, 9, 3, 3, 2, 2, 1, 1, 0, 1},
    {1, 2, 7, 9, 3, 3, 2, 2, 1, 1, 1, 0}, {2, 1, 5, 5, 2, 3, 1, 2, 1, 1, 1, 1},
    {1, 1, 6, 6, 4, 4, 3, 3, 2, 0, 0, 0}, {2, 3, 6, 12, 2, 2, 0, 0, 0, 0, 0, 1}, /* 2x2 kernel */
    {3, 2, 8, 8, 2, 2, 0, 0, 0, 0, 0, 1}, /* 2x2 kernel, small planes: one window a work-item */
};

static size_t pool_out(size_t in, unsigned k, unsigned s, unsigned pad, int ceil_mode) {
    size_t out = (in + 2 * pad - k + (ceil_mode ? s - 1 : 0)) / s + 1;
    if (ceil_mode && (out - 1) * s >= in + pad) out--;
    return out;
}

START_TEST(pooling_cases) {
    bool max = _i == 0;
    for (size_t t = 0; t < sizeof POOLS / sizeof POOLS[0]; t++) {
        const pool_case *c = &POOLS[t];
        oclml_pool2d_params prm;
        oclml_pool2d_params_init(&prm);
        prm.kernel[0] = c->kh, prm.kernel[1] = c->kw, prm.stride[0] = c->sh, prm.stride[1] = c->sw;
        prm.pad[0] = c->ph, prm.pad[1] = c->pw, prm.ceil_mode = c->ceil_mode;
        prm.count_include_pad = c->include_pad;
        unsigned sh = c->sh ? c->sh : c->kh, sw = c->sw ? c->sw : c->kw;
        size_t P = pool_out(c->H, c->kh, sh, c->ph, c->ceil_mode),
               Q = pool_out(c->W, c->kw, sw, c->pw, c->ceil_mode);
        size_t planes = c->N * c->C, nx = planes * c->H * c->W, ny = planes * P * Q;
        size_t xsh[4] = {c->N, c->C, c->H, c->W}, ysh[4] = {c->N, c->C, P, Q};
        float *x = test_floats(nx), *dy = test_floats(ny), *y = test_floats(ny),
              *dx = test_floats(nx);
        test_random(x, nx, -1, 1);
        test_random(dy, ny, -1, 1);
        if (max) {
            x[5] = x[4];     /* a tie: the first maximum takes the gradient */
            x[nx - 1] = NAN; /* NaN counts as the largest */
            x[nx - 2] = NAN; /* and with two in a window, the last takes the gradient */
        }
        oclml_tensor *X = test_tensor_from(4, xsh, x), *Y = test_tensor(4, ysh),
                     *DY = test_tensor_from(4, ysh, dy), *DX = test_tensor(4, xsh);
        if (max) {
            ASSERT_OK(oclml_max_pool2d(T, &prm, X, Y));
            ASSERT_OK(oclml_max_pool2d_backward(T, &prm, X, DY, DX));
        } else {
            ASSERT_OK(oclml_avg_pool2d(T, &prm, X, Y));
            ASSERT_OK(oclml_avg_pool2d_backward(T, &prm, DY, DX));
        }
        test_read(Y, y, ny);
        test_read(DX, dx, nx);
        double *gref = test_doubles(nx);
        for (size_t i = 0; i < nx; i++) gref[i] = 0;
        for (size_t pl = 0; pl < planes; pl++)
            for (size_t p = 0; p < P; p++)
                for (size_t q = 0; q < Q; q++) {
                    long at;
                    double want = ref_pool_window(c, x + pl * c->H * c->W, p, q, max, &at);
                    float got = y[(pl * P + p) * Q + q];
                    ck_assert_msg(isnan(want) ? isnan(got) : fabs(got - want) <= 1e-6,
                                  "%s pool case %zu y[%zu,%zu,%zu] %g vs %g", max ? "max" : "avg",
                                  t, pl, p, q, got, want);
                    double g = dy[(pl * P + p) * Q + q];
                    if (max)
                        gref[pl * c->H * c->W + (size_t)at] += g;
                    else { /* the mean's gradient: an equal share to each input of the window */
                        long h0 = (long)(p * sh) - c->ph, w0 = (long)(q * sw) - c->pw;
                        double cnt = 1.0 / ref_pool_count(c, p, q);
                        for (long r = 0; r < c->kh; r++)
                            for (long s = 0; s < c->kw; s++) {
                                long h = h0 + r, v = w0 + s;
                                if (h >= 0 && h < (long)c->H && v >= 0 && v < (long)c->W)
                                    gref[pl * c->H * c->W + (size_t)(h * (long)c->W + v)] +=
                                        g * cnt;
                            }
                    }
                }
        for (size_t i = 0; i < nx; i++)
            ck_assert_msg(fabs(dx[i] - gref[i]) <= 1e-5, "%s pool case %zu dx[%zu] %g vs %g",
                          max ? "max" : "avg", t, i, dx[i], gref[i]);
        oclml_tensor_destroy(X);
        oclml_tensor_destroy(Y);
        oclml_tensor_destroy(DY);
        oclml_tensor_destroy(DX);
        free(x);
        free(dy);
        free(y);
        free(dx);
        free(gref);
    }
}
END_TEST

/* The max-pool with an activation fused before it, every activation, on the general kernel
 * (overlapping 3x3 windows with padding; 2x2 windows of rows not a multiple of 4) and the 2x2
 * stride-2 kernel: y = max(act(x)) and dx = act'(x) (dy routed to each window's first maximum
 * of act(x)) against the double definition. A NaN input makes its windows' outputs NaN and
 * its own gradient NaN, and leaves its window-mates' gradients finite. */
START_TEST(act_max_pooling) {
    const int act = _i;
    const size_t cases[] = {1, 0, 5, 6}; /* POOLS: 3x3 s2 p1, 2x2 of 8x6, 6x12, 8x8 */
    for (size_t ci = 0; ci < 4; ci++) {
        const pool_case *c = &POOLS[cases[ci]];
        oclml_pool2d_params prm;
        oclml_pool2d_params_init(&prm);
        prm.kernel[0] = c->kh, prm.kernel[1] = c->kw, prm.stride[0] = c->sh, prm.stride[1] = c->sw;
        prm.pad[0] = c->ph, prm.pad[1] = c->pw, prm.ceil_mode = c->ceil_mode;
        unsigned sh = c->sh ? c->sh : c->kh, sw = c->sw ? c->sw : c->kw;
        size_t P = pool_out(c->H, c->kh, sh, c->ph, c->ceil_mode),
               Q = pool_out(c->W, c->kw, sw, c->pw, c->ceil_mode);
        size_t planes = c->N * c->C, hw = c->H * c->W, nx = planes * hw, ny = planes * P * Q;
        size_t xsh[4] = {c->N, c->C, c->H, c->W}, ysh[4] = {c->N, c->C, P, Q};
        float *x = test_floats(nx), *dy = test_floats(ny), *y = test_floats(ny),
              *dx = test_floats(nx);
        test_random(x, nx, -3, 3); /* the activations' curved parts */
        test_random(dy, ny, -1, 1);
        x[1] = NAN; /* two NaNs in one 2x2 window, one a row: the last takes the gradient */
        x[c->W] = NAN;
        double *ax = test_doubles(nx), *route = test_doubles(nx);
        for (size_t i = 0; i < nx; i++) ax[i] = test_act(act, x[i]), route[i] = 0;
        oclml_tensor *X = test_tensor_from(4, xsh, x), *Y = test_tensor(4, ysh),
                     *DY = test_tensor_from(4, ysh, dy), *DX = test_tensor(4, xsh);
        ASSERT_OK(oclml_act_max_pool2d(T, &prm, (oclml_activation)act, X, Y));
        ASSERT_OK(oclml_act_max_pool2d_backward(T, &prm, (oclml_activation)act, X, DY, DX));
        test_read(Y, y, ny);
        test_read(DX, dx, nx);
        float *plane_act = test_floats(hw);
        for (size_t pl = 0; pl < planes; pl++) {
            for (size_t i = 0; i < hw; i++) plane_act[i] = (float)ax[pl * hw + i];
            for (size_t p = 0; p < P; p++)
                for (size_t q = 0; q < Q; q++) {
                    long at;
                    double want = ref_pool_window(c, plane_act, p, q, true, &at);
                    want = ax[pl * hw + (size_t)at]; /* in double, not the float copy */
                    float got = y[(pl * P + p) * Q + q];
                    ck_assert_msg(isnan(want) ? isnan(got)
                                              : fabs(got - want) <= 2e-6 * (1 + fabs(want)),
                                  "act %d case %zu y[%zu,%zu,%zu] %g vs %g", act, cases[ci], pl, p,
                                  q, got, want);
                    route[pl * hw + (size_t)at] += dy[(pl * P + p) * Q + q];
                }
        }
        for (size_t i = 0; i < nx; i++) {
            double want = route[i] * test_act_grad(act, x[i]);
            ck_assert_msg(isnan(want) ? isnan(dx[i]) : fabs(dx[i] - want) <= 4e-6,
                          "act %d case %zu dx[%zu] %g vs %g (x %g)", act, cases[ci], i, dx[i], want,
                          x[i]);
        }
        oclml_tensor *all[] = {X, Y, DY, DX};
        for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
        free(x);
        free(dy);
        free(y);
        free(dx);
        free(ax);
        free(route);
        free(plane_act);
    }
}
END_TEST

/* NULL params are the defaults (oclml_conv2d_params_init's: stride 1, no padding; pooling's 2 x
 * 2 windows): each op gives the bits it gives with the initialised struct; the inits refuse
 * NULL. */
START_TEST(null_params_mean_defaults) {
    oclml_conv2d_params prm;
    oclml_pool2d_params pp;
    ASSERT_OK(oclml_conv2d_params_init(&prm));
    ASSERT_OK(oclml_pool2d_params_init(&pp));
    ASSERT_STATUS(oclml_conv2d_params_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_pool2d_params_init(NULL), OCLML_ERR_NULL_POINTER);
    const size_t xsh[4] = {2, 3, 6, 7}, wsh[4] = {4, 3, 3, 3}, ysh[4] = {2, 4, 4, 5},
                 psh[4] = {2, 3, 3, 3}, bsh[1] = {4};
    float *x, *w, *b, *dy;
    oclml_tensor *X = test_tensor_held(OCLML_FLOAT32, 4, xsh, -1, 1, &x),
                 *W = test_tensor_held(OCLML_FLOAT32, 4, wsh, -1, 1, &w),
                 *B = test_tensor_held(OCLML_FLOAT32, 1, bsh, -1, 1, &b),
                 *DY = test_tensor_held(OCLML_FLOAT32, 4, ysh, -1, 1, &dy);
    oclml_tensor *out[2][4];
    for (int k = 0; k < 2; k++) {
        const oclml_conv2d_params *cp = k ? &prm : NULL;
        const oclml_pool2d_params *q = k ? &pp : NULL;
        out[k][0] = test_tensor(4, ysh);
        out[k][1] = test_tensor(4, xsh);
        out[k][2] = test_tensor(4, psh);
        out[k][3] = test_tensor(4, xsh);
        ASSERT_OK(oclml_conv2d(T, cp, X, W, B, out[k][0]));
        ASSERT_OK(oclml_conv2d_backward(T, cp, X, W, DY, out[k][1], NULL, NULL, 0));
        ASSERT_OK(oclml_avg_pool2d(T, q, X, out[k][2]));
        ASSERT_OK(oclml_max_pool2d_backward(T, q, X, out[k][2], out[k][3]));
    }
    const size_t counts[4] = {2 * 4 * 4 * 5, 2 * 3 * 6 * 7, 2 * 3 * 3 * 3, 2 * 3 * 6 * 7};
    for (int i = 0; i < 4; i++) {
        float *a = test_floats(counts[i]), *e = test_floats(counts[i]);
        test_read(out[0][i], a, counts[i]);
        test_read(out[1][i], e, counts[i]);
        ck_assert_msg(memcmp(a, e, counts[i] * sizeof *a) == 0, "output %d differs with NULL", i);
        free(a), free(e);
        oclml_tensor_destroy(out[0][i]), oclml_tensor_destroy(out[1][i]);
    }
    char text[256];
    ASSERT_OK(oclml_conv2d_plan(T, NULL, X, W, text, sizeof text));
    free(x), free(w), free(b), free(dy);
    oclml_tensor_destroy(X), oclml_tensor_destroy(W), oclml_tensor_destroy(B),
        oclml_tensor_destroy(DY);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    oclml_conv2d_params prm;
    oclml_conv2d_params_init(&prm);
    size_t xsh[4] = {1, 2, 5, 5}, wsh[4] = {3, 2, 3, 3}, ysh[4] = {1, 3, 3, 3},
           wrong[4] = {1, 3, 4, 3}, w3[4] = {3, 1, 3, 3}, bsh[1] = {3}, b4[1] = {4};
    oclml_tensor *X = test_tensor(4, xsh), *Wt = test_tensor(4, wsh), *Y = test_tensor(4, ysh),
                 *Yw = test_tensor(4, wrong), *Wg = test_tensor(4, w3), *B = test_tensor(1, bsh),
                 *B4 = test_tensor(1, b4);
    float xs[50], ws[54];
    test_random(xs, 50, -1, 1);
    test_random(ws, 54, -1, 1);
    ASSERT_OK(oclml_tensor_write(X, xs, 50));
    ASSERT_OK(oclml_tensor_write(Wt, ws, 54));
    ASSERT_STATUS(oclml_conv2d(NULL, &prm, X, Wt, NULL, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_conv2d(T, &prm, X, Wt, NULL, Yw), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_conv2d(T, &prm, X, Wg, NULL, Y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_conv2d(T, &prm, X, Wt, B4, Y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_conv2d(T, &prm, X, Wt, NULL, X), OCLML_ERR_INVALID_SHAPE);
    oclml_conv2d_params bad = prm;
    bad.stride[0] = 0;
    ASSERT_STATUS(oclml_conv2d(T, &bad, X, Wt, NULL, Y), OCLML_ERR_INVALID_ARGUMENT);
    bad = prm;
    bad.groups = 2; /* 3 output channels are not divisible by 2 */
    ASSERT_STATUS(oclml_conv2d(T, &bad, X, Wg, NULL, Y), OCLML_ERR_INVALID_SHAPE);
    bad = prm;
    bad.output_padding[0] = 1;
    ASSERT_STATUS(oclml_conv2d(T, &bad, X, Wt, NULL, Y), OCLML_ERR_INVALID_ARGUMENT);
    bad = prm;
    bad.struct_size = 8;
    ASSERT_STATUS(oclml_conv2d(T, &bad, X, Wt, NULL, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_conv2d_backward(T, &prm, X, Wt, Y, X, NULL, NULL, 0),
                  OCLML_ERR_INVALID_ARGUMENT); /* dx aliases x */
    ASSERT_STATUS(oclml_conv2d_backward(T, &prm, X, Wt, Y, NULL, Wt, NULL, 0),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_conv_transpose2d(T, &prm, Y, Wt, NULL, Yw), OCLML_ERR_INVALID_SHAPE);
    oclml_pool2d_params pp;
    oclml_pool2d_params_init(&pp);
    pp.pad[0] = 2; /* more than half the 2x2 window */
    ASSERT_STATUS(oclml_max_pool2d(T, &pp, X, Y), OCLML_ERR_INVALID_ARGUMENT);
    oclml_pool2d_params_init(&pp);
    ASSERT_STATUS(oclml_max_pool2d(T, &pp, X, Y), OCLML_ERR_INVALID_SHAPE);  /* 2x2 of 5x5 is 2x2 */
    ASSERT_STATUS(oclml_avg_pool2d(T, NULL, X, Y), OCLML_ERR_INVALID_SHAPE); /* NULL: 2x2 */
    ASSERT_STATUS(oclml_act_max_pool2d(T, &pp, (oclml_activation)7, X, Y),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_act_max_pool2d(T, &pp, OCLML_ACT_SILU, X, Y), OCLML_ERR_INVALID_SHAPE);
    /* The backwards of the transposed convolution (x = Y [1, 3, 3, 3], w = Wt [3, 2, 3, 3]: its
     * output is X's shape) and of pooling: Yw, the output they are given, stays NaN (below). */
    ASSERT_STATUS(oclml_conv_transpose2d_backward(T, &prm, Y, Wt, X, Yw, NULL, NULL, 0),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_conv_transpose2d_backward(T, &prm, Y, Wt, X, NULL, Wt, NULL, 0),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_max_pool2d_backward(T, &pp, X, Y, Yw), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_max_pool2d_backward(T, NULL, X, Y, Yw), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_act_max_pool2d_backward(T, &pp, (oclml_activation)-1, X, Y, Yw),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_act_max_pool2d_backward(T, &pp, OCLML_ACT_RELU, X, Y, Yw),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_avg_pool2d_backward(T, &pp, Y, Yw), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_avg_pool2d_backward(T, NULL, Y, Yw), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_avg_pool2d_backward(NULL, &pp, Y, Yw), OCLML_ERR_NULL_POINTER);
    test_assert_untouched(Y, 27);
    test_assert_untouched(Yw, 36);
    ASSERT_OK(oclml_conv2d(T, &prm, X, Wt, B, Y)); /* the same tensors, correct call */
    oclml_tensor *all[] = {X, Wt, Y, Yw, Wg, B, B4};
    for (int i = 0; i < 7; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("conv");
    TCase *tc = tcase_create("conv");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, conv2d_cases, 0, case_loops());
    tcase_add_loop_test(tc, conv_transpose2d_cases, 0, case_loops());
    /* Accumulating into dW (every path's, in conv2d_cases) on the direct tiles: swept. */
    tcase_add_loop_test(tc, conv2d_direct_weight_gradient_tiles, 0, test_tier(1, 2));
    tcase_add_loop_test(tc, conv2d_direct_data_gradient_tiles, 0, test_tier(1, 2));
    /* The tensor cores' (a GPU's default) as a convolution; as a transposed one (the same
     * three passes) and on FMA tiles: swept. */
    tcase_add_loop_test(tc, conv2d_winograd_5x5, 0, test_tier(1, 4));
    /* The quick tier leaves the direct path (it computes no forward) out of the forward's. */
    tcase_add_loop_test(tc, conv2d_nan_policy, 0, test_tier(QUICK_NAN_PATHS - 1, N_NAN_PATHS));
    tcase_add_loop_test(tc, conv2d_backward_nan_policy, 0, test_tier(QUICK_NAN_PATHS, N_NAN_PATHS));
    tcase_add_loop_test(tc, conv2d_backward_nan_corner, 0, test_tier(QUICK_NAN_PATHS, N_NAN_PATHS));
    tcase_add_test(tc, conv2d_plan_says_how);
    tcase_add_loop_test(tc, pooling_cases, 0, 2);
    tcase_add_loop_test(tc, act_max_pooling, 0, 7); /* every oclml_activation */
    tcase_add_test(tc, bad_input_touches_nothing);
    tcase_add_test(tc, null_params_mean_defaults);
    suite_add_tcase(s, tc);
    return test_main(s);
}
