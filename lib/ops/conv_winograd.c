/* 3x3 and 5x5 convolutions of unit stride and dilation (one group) by Winograd F(2x2, RxR)
 * (cl/ops/conv_winograd.cl): the weights and a chunk of images' (R+1)x(R+1) input patches are
 * transformed, (R+1)^2 batched products (the GEMM family's) sum over the input channels, and the
 * results transform back into 2x2 output tiles: 16 multiplications a tile and input channel
 * instead of 36 at 3x3, 36 instead of 100 at 5x5; the transformed data passes through
 * workspaces (V: (R+1)^2 C T floats, M: (R+1)^2 K T for T tiles a chunk).
 *   forward        y = conv(x, w)
 *   data gradient  dx = conv(dy, w turned by 180 degrees with its channels swapped), padding
 *                  R - 1 - ph before (so padding up to R - 1)
 *   weight grad.   the adjoints: dy's 2x2 blocks transformed (D = A dy A^T), (R+1)^2 products
 *                  dU[e] = D[e] V[e]^T summed over the tiles, dw = G^T dU G
 * Where: the tuning key conv.winograd (1 wherever it applies, 0 never); by default (-1) where the
 * products run on tensor cores and the channels reach a floor, set where Winograd beat the
 * implicit GEMM and im2col paths on the H100 (bench/DECISIONS.md, "Convolution"):
 *   - 3x3 forward and data gradient: both channel counts at least MIN_CHANNELS. From 96
 *     channels they run 1.3x-2.5x faster; with 64 and 32 channels 1.2x and 1.6x slower, the
 *     shallow products not paying for the transforms' traffic;
 *   - 5x5 forward and data gradient: a product depth of MIN_DEPTH_5X5 and MIN_ROWS_5X5 rows
 *     (the forward of 32 -> 64 channels, depth 32, ran 1.5x slower; 3 -> 32 1.6-6.5x slower);
 *   - weight gradient: both at least MIN_CHANNELS_DW. Its products run over the tiles (a long
 *     K, split for the compute units) and won at every size measured, 3x3 and 5x5, from 32
 *     channels (1.4x-2.4x faster).
 * 5x5 results are within 2.3e-7 of sum |x w| against the double definition (3x3 and the GEMM
 * paths: 2-9e-8). */
#include "ops/conv.h"
#include "ops/ops.h"

#include <stdio.h>

#define KERNELS                                                                            \
    "oclml_winograd_weights oclml_winograd_input oclml_winograd_output oclml_winograd_dy " \
    "oclml_winograd_weight_gradient"
static const oclml__program_spec PROGRAM_3X3 = {"conv_winograd.cl", "-DWINO_R=3", KERNELS, 0};
static const oclml__program_spec PROGRAM_5X5 = {"conv_winograd.cl", "-DWINO_R=5", KERNELS, 0};

/* An RxR convolution of unit stride and dilation on one group, mapping C channels of H x W
 * images to K channels of P x Q with padding (ph, pw) before: the forward, or the data gradient
 * as a convolution. */
typedef struct winograd_conv {
    size_t N, C, H, W, K, P, Q;
    unsigned ph, pw;
    bool flip;  /* the weights are the forward's, turned and swapped (a data gradient) */
    unsigned r; /* taps a side: 3 or 5 */
} winograd_conv;

static bool shape_applies(const conv_shape *s) {
    return (s->R == 3 || s->R == 5) && s->S == s->R && s->sh == 1 && s->sw == 1 && s->dh == 1 &&
           s->dw == 1 && s->groups == 1 && s->P >= 1 && s->Q >= 1;
}

#define MIN_CHANNELS 96
#define MIN_CHANNELS_DW 32
/* 5x5 forward and data gradient: the product's depth (input channels of the forward, output
 * channels of the data gradient) and rows. */
#define MIN_DEPTH_5X5 64
#define MIN_ROWS_5X5 32

typedef enum winograd_pass { PASS_FORWARD, PASS_DATA, PASS_WEIGHT } winograd_pass;

static bool channels_suit(const conv_shape *s, winograd_pass pass) {
    if (pass == PASS_WEIGHT) return s->C >= MIN_CHANNELS_DW && s->K >= MIN_CHANNELS_DW;
    if (s->R == 3) return s->C >= MIN_CHANNELS && s->K >= MIN_CHANNELS;
    const size_t depth = pass == PASS_FORWARD ? s->C : s->K,
                 rows = pass == PASS_FORWARD ? s->K : s->C;
    return depth >= MIN_DEPTH_5X5 && rows >= MIN_ROWS_5X5;
}

static bool allowed(oclml_ctx *ctx, const conv_shape *s, winograd_pass pass) {
    long forced = oclml__tune(ctx, OCLML__TUNE_CONV_WINOGRAD, 0);
    if (forced >= 0) return forced > 0;
    return channels_suit(s, pass) && oclml__tune(ctx, OCLML__TUNE_GEMM_OWN, 0) != 0 &&
           oclml__gemm_gather_fast(ctx);
}

bool oclml__conv_forward_winograd_applies(oclml_ctx *ctx, const conv_shape *s) {
    return shape_applies(s) && allowed(ctx, s, PASS_FORWARD);
}

bool oclml__conv_weight_gradient_winograd_applies(oclml_ctx *ctx, const conv_shape *s) {
    return shape_applies(s) && allowed(ctx, s, PASS_WEIGHT);
}

/* The data gradient's convolution needs padding R - 1 - ph >= 0 before; its output is H x W. */
bool oclml__conv_data_gradient_winograd_applies(oclml_ctx *ctx, const conv_shape *s) {
    return shape_applies(s) && s->ph < s->R && s->pw < s->R && allowed(ctx, s, PASS_DATA);
}

/* The products a tile: (R + 1)^2 transformed positions. */
static size_t products_of(const winograd_conv *v) { return (size_t)(v->r + 1) * (v->r + 1); }

static oclml_status launch_1d(oclml_ctx *ctx, const winograd_conv *v, const char *name,
                              const oclml__arg *args, unsigned nargs, size_t n) {
    return oclml__conv_launch_1d(ctx, v->r == 5 ? &PROGRAM_5X5 : &PROGRAM_3X3, name, args, nargs,
                                 n);
}

static oclml_status transform_weights(oclml_ctx *ctx, const winograd_conv *v, const oclml_tensor *w,
                                      cl_mem U) {
    cl_mem wm = w->mem;
    cl_ulong w_off = oclml__elem_offset(w);
    cl_uint K = (cl_uint)v->K, C = (cl_uint)v->C, flip = v->flip;
    oclml__arg args[] = {OCLML_ARG(wm), OCLML_ARG(w_off), OCLML_ARG(K),
                         OCLML_ARG(C),  OCLML_ARG(flip),  OCLML_ARG(U)};
    return launch_1d(ctx, v, "oclml_winograd_weights", args, 6, v->K * v->C);
}

static oclml_status transform_input(oclml_ctx *ctx, const winograd_conv *v, const oclml_tensor *x,
                                    size_t n0, size_t nb, size_t TH, size_t TW, cl_mem V) {
    cl_mem xm = x->mem;
    cl_ulong x_off = oclml__elem_offset(x);
    cl_uint un0 = (cl_uint)n0, unb = (cl_uint)nb, C = (cl_uint)v->C, H = (cl_uint)v->H,
            W = (cl_uint)v->W, ph = v->ph, pw = v->pw, th = (cl_uint)TH, tw = (cl_uint)TW;
    oclml__arg args[] = {OCLML_ARG(xm), OCLML_ARG(x_off), OCLML_ARG(un0), OCLML_ARG(unb),
                         OCLML_ARG(C),  OCLML_ARG(H),     OCLML_ARG(W),   OCLML_ARG(ph),
                         OCLML_ARG(pw), OCLML_ARG(th),    OCLML_ARG(tw),  OCLML_ARG(V)};
    return launch_1d(ctx, v, "oclml_winograd_input", args, 12, v->C * nb * TH * TW);
}

static oclml_status transform_output(oclml_ctx *ctx, const winograd_conv *v, cl_mem M, size_t n0,
                                     size_t nb, size_t TH, size_t TW, oclml_tensor *y,
                                     const oclml_tensor *bias, const oclml_tensor *x,
                                     const oclml_tensor *w) {
    cl_mem ym = y->mem, bm = oclml__opt_mem(bias), xm = x->mem, wm = w->mem;
    cl_ulong y_off = oclml__elem_offset(y), b_off = oclml__opt_offset(bias),
             x_off = oclml__elem_offset(x), w_off = oclml__elem_offset(w);
    cl_uint un0 = (cl_uint)n0, unb = (cl_uint)nb, K = (cl_uint)v->K, P = (cl_uint)v->P,
            Q = (cl_uint)v->Q, th = (cl_uint)TH, tw = (cl_uint)TW, has_bias = bias != NULL,
            C = (cl_uint)v->C, H = (cl_uint)v->H, W = (cl_uint)v->W, ph = v->ph, pw = v->pw,
            flip = v->flip;
    oclml__arg args[] = {OCLML_ARG(M),        OCLML_ARG(un0),   OCLML_ARG(unb),   OCLML_ARG(K),
                         OCLML_ARG(P),        OCLML_ARG(Q),     OCLML_ARG(th),    OCLML_ARG(tw),
                         OCLML_ARG(ym),       OCLML_ARG(y_off), OCLML_ARG(bm),    OCLML_ARG(b_off),
                         OCLML_ARG(has_bias), OCLML_ARG(xm),    OCLML_ARG(x_off), OCLML_ARG(C),
                         OCLML_ARG(H),        OCLML_ARG(W),     OCLML_ARG(ph),    OCLML_ARG(pw),
                         OCLML_ARG(wm),       OCLML_ARG(w_off), OCLML_ARG(flip)};
    return launch_1d(ctx, v, "oclml_winograd_output", args, 23, v->K * nb * TH * TW);
}

/* The (R + 1)^2 products of a chunk of T tiles: M[e] (K x T) = U[e] (K x C) V[e] (C x T). */
static oclml__gemm_desc products(const winograd_conv *v, cl_mem U, cl_mem V, cl_mem M, size_t T) {
    return (oclml__gemm_desc){.m = v->K,
                              .n = T,
                              .k = v->C,
                              .batch = products_of(v),
                              .alpha = 1.0f,
                              .a = {U, 0, v->C, v->K * v->C},
                              .b = {V, 0, T, v->C * T},
                              .c = {M, 0, T, v->K * T},
                              .act = OCLML_ACT_NONE};
}

/* Images a chunk: as many as keep its two transformed workspaces ((R + 1)^2 (C + K) floats a tile)
 * within the device's workspace (caps.workspace_bytes), or conv.chunk. Fewer, larger chunks
 * win: the encoder's 5x5 layers at batch 256 in one chunk run 1.1x-1.15x faster on the H100
 * than in 128 MiB ones, where chunks small enough for L2 (4 to 32 images) lose 1.1-8x to
 * launches (bench/DECISIONS.md, "Winograd's workspace"). */
static size_t chunk_of(oclml_ctx *ctx, const winograd_conv *v, size_t TH, size_t TW) {
    const size_t per_image = products_of(v) * (v->C + v->K) * TH * TW;
    size_t nb = ctx->caps.workspace_bytes / (per_image * sizeof(float) + 1);
    long forced = oclml__tune(ctx, OCLML__TUNE_CONV_CHUNK, 0);
    if (forced > 0) nb = (size_t)forced;
    return nb < 1 ? 1 : nb > v->N ? v->N : nb;
}

static oclml_status run(oclml_ctx *ctx, const winograd_conv *v, const oclml_tensor *x,
                        const oclml_tensor *w, const oclml_tensor *bias, oclml_tensor *y) {
    const size_t TH = (v->P + 1) / 2, TW = (v->Q + 1) / 2, nb = chunk_of(ctx, v, TH, TW);
    const size_t T = nb * TH * TW;
    cl_mem U = NULL, V = NULL, M = NULL;
    const size_t E = products_of(v);
    oclml_status st = oclml__scratch_get(ctx, E * v->K * v->C * sizeof(float), &U);
    if (!st) st = oclml__scratch_get(ctx, E * v->C * T * sizeof(float), &V);
    if (!st) st = oclml__scratch_get(ctx, E * v->K * T * sizeof(float), &M);
    if (!st) st = transform_weights(ctx, v, w, U);
    for (size_t n0 = 0; n0 < v->N && !st; n0 += nb) {
        const size_t cnt = v->N - n0 < nb ? v->N - n0 : nb, tiles = cnt * TH * TW;
        st = transform_input(ctx, v, x, n0, cnt, TH, TW, V);
        oclml__gemm_desc d = products(v, U, V, M, tiles);
        if (!st) st = oclml__gemm(ctx, &d);
        if (!st) st = transform_output(ctx, v, M, n0, cnt, TH, TW, y, bias, x, w);
    }
    if (M) oclml__scratch_put(ctx, M);
    if (V) oclml__scratch_put(ctx, V);
    if (U) oclml__scratch_put(ctx, U);
    return st;
}

/* The convolution s itself (the forward's and the weight gradient's geometry). */
static winograd_conv forward_conv(const conv_shape *s) {
    return (winograd_conv){s->N, s->C,  s->H,  s->W,  s->K,          s->P,
                           s->Q, s->ph, s->pw, false, (unsigned)s->R};
}

oclml_status oclml__conv_forward_winograd(oclml_ctx *ctx, const conv_shape *s,
                                          const oclml_tensor *x, const oclml_tensor *w,
                                          const oclml_tensor *b, oclml_tensor *y) {
    const winograd_conv v = forward_conv(s);
    return run(ctx, &v, x, w, b, y);
}

oclml_status oclml__conv_data_gradient_winograd(oclml_ctx *ctx, const conv_shape *s,
                                                const oclml_tensor *w, const oclml_tensor *dy,
                                                oclml_tensor *dx, const oclml_tensor *b) {
    const unsigned r = (unsigned)s->R;
    const winograd_conv v = {s->N, s->K,          s->P,          s->Q, s->C, s->H,
                             s->W, r - 1 - s->ph, r - 1 - s->pw, true, r};
    return run(ctx, &v, dy, w, b, dx);
}

/* dw (+)= the weight gradient: per chunk of images, the input patches into V and dy's blocks
 * into D, then the (R + 1)^2 products dU[e] (+)= D[e] V[e]^T, batched, whose K runs over the
 * chunk's tiles (the planner splits it where the blocks leave compute units idle); last
 * dw = G^T dU G, recomputed by its definition where that came out NaN (non-finite inputs). */
oclml_status oclml__conv_weight_gradient_winograd(oclml_ctx *ctx, const conv_shape *s,
                                                  const oclml_tensor *x, const oclml_tensor *dy,
                                                  oclml_tensor *dw, int accumulate) {
    const winograd_conv v = forward_conv(s);
    const size_t TH = (v.P + 1) / 2, TW = (v.Q + 1) / 2, nb = chunk_of(ctx, &v, TH, TW),
                 T = nb * TH * TW, KC = v.K * v.C;
    cl_mem V = NULL, D = NULL, dU = NULL;
    const size_t E = products_of(&v);
    oclml_status st = oclml__scratch_get(ctx, E * v.C * T * sizeof(float), &V);
    if (!st) st = oclml__scratch_get(ctx, E * v.K * T * sizeof(float), &D);
    if (!st) st = oclml__scratch_get(ctx, E * KC * sizeof(float), &dU);
    for (size_t n0 = 0; n0 < v.N && !st; n0 += nb) {
        const size_t cnt = v.N - n0 < nb ? v.N - n0 : nb, tiles = cnt * TH * TW;
        st = transform_input(ctx, &v, x, n0, cnt, TH, TW, V);
        cl_mem ym = dy->mem;
        cl_ulong y_off = oclml__elem_offset(dy);
        cl_uint un0 = (cl_uint)n0, unb = (cl_uint)cnt, K = (cl_uint)v.K, P = (cl_uint)v.P,
                Q = (cl_uint)v.Q, th = (cl_uint)TH, tw = (cl_uint)TW;
        oclml__arg args[] = {OCLML_ARG(ym), OCLML_ARG(y_off), OCLML_ARG(un0), OCLML_ARG(unb),
                             OCLML_ARG(K),  OCLML_ARG(P),     OCLML_ARG(Q),   OCLML_ARG(th),
                             OCLML_ARG(tw), OCLML_ARG(D)};
        if (!st) st = launch_1d(ctx, &v, "oclml_winograd_dy", args, 10, v.K * tiles);
        oclml__gemm_desc d = {.trans_b = true,
                              .m = v.K,
                              .n = v.C,
                              .k = tiles,
                              .batch = E,
                              .alpha = 1.0f,
                              .beta = n0 == 0 ? 0.0f : 1.0f,
                              .a = {D, 0, tiles, v.K * tiles},
                              .b = {V, 0, tiles, v.C * tiles},
                              .c = {dU, 0, v.C, KC},
                              .act = OCLML_ACT_NONE};
        if (!st) st = oclml__gemm(ctx, &d);
    }
    /* dw = G^T dU G; x, dy and the geometry for the outputs to recompute where that is NaN. */
    cl_mem wm = dw->mem, xm = x->mem, ym = dy->mem;
    cl_ulong w_off = oclml__elem_offset(dw), x_off = oclml__elem_offset(x),
             y_off = oclml__elem_offset(dy);
    cl_uint K = (cl_uint)v.K, C = (cl_uint)v.C, acc = accumulate != 0, N = (cl_uint)v.N,
            H = (cl_uint)v.H, W = (cl_uint)v.W, P = (cl_uint)v.P, Q = (cl_uint)v.Q, ph = v.ph,
            pw = v.pw;
    oclml__arg args[] = {OCLML_ARG(dU),    OCLML_ARG(K),     OCLML_ARG(C),  OCLML_ARG(wm),
                         OCLML_ARG(w_off), OCLML_ARG(acc),   OCLML_ARG(xm), OCLML_ARG(x_off),
                         OCLML_ARG(ym),    OCLML_ARG(y_off), OCLML_ARG(N),  OCLML_ARG(H),
                         OCLML_ARG(W),     OCLML_ARG(P),     OCLML_ARG(Q),  OCLML_ARG(ph),
                         OCLML_ARG(pw)};
    if (!st) st = launch_1d(ctx, &v, "oclml_winograd_weight_gradient", args, 17, KC);
    if (dU) oclml__scratch_put(ctx, dU);
    if (D) oclml__scratch_put(ctx, D);
    if (V) oclml__scratch_put(ctx, V);
    return st;
}

void oclml__conv_describe_winograd(const conv_shape *s, char *text, size_t len) {
    snprintf(text, len, "Winograd F(2x2,%zux%zu): %zu products of %zux%zu by %zux(tiles)", s->R,
             s->R, (s->R + 1) * (s->R + 1), s->K, s->C, s->C);
}

void oclml__conv_winograd_warm(const char *op, oclml__warm_list *list) {
    oclml__warm_add(list, op, "Winograd transforms, 3x3", PROGRAM_3X3);
    oclml__warm_add(list, op, "Winograd transforms, 5x5", PROGRAM_5X5);
}
