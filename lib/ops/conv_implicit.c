/* Convolution passes as implicit GEMMs: the product's loads gather the unfolded columns from
 * the images (oclml__gather), so nothing is unfolded into a workspace.
 *   forward          y_g = W_g col(x_g), B gathered, over all images in one batched product
 *   data gradient    (stride 1) dx_g = a convolution of dy_g by W_g with input and output
 *                    channels swapped and the taps flipped
 *   weight gradient  dW_g = dy_g col(x_g)^T with K over every image's positions (A segmented
 *                    per image, B the transposed gather), split K summing the images
 * Where: the tuning keys conv.implicit (every pass), conv.implicit_dx and conv.implicit_dw; by
 * default where the GEMM runs on tensor cores (FMA devices keep CLBlast on the unfolded copy) and
 * the shape suits the gathered product, as timed on the H100 (bench/DECISIONS.md, "Implicit
 * GEMM per pass" and "Gathered weight gradient"):
 *   - the forward and the data gradient where each image gives the product at least
 *     MIN_GATHERED_COLUMNS columns: the gathered products are batched per image, and 8x8 or
 *     14x14 planes leave most of a 128-column tile empty where the unfolded copy of many images
 *     fills it (1.2x to 2x slower); on 16x16 and larger planes gathering is 1.3x to 2.3x faster;
 *   - the data gradient also needs MIN_GATHERED_ROWS input channels (a group's rows: with 3
 *     it ran 2.5x slower);
 *   - the weight gradient only where a group has at most MAX_GATHERED_DW_ROWS output channels
 *     (the product's rows) and at least MIN_GATHERED_ROWS input channels: with the GEMM
 *     planner's long-K rule the segmented product runs 1.07x and 1.14x faster at 64 output
 *     channels (C32 32x32 and C64 56x56), 1.4x to 2x slower at 128 and 256 and 2x slower with
 *     3 input channels. */
#include "ops/conv.h"
#include "ops/ops.h"

#define MIN_GATHERED_COLUMNS 256
#define MIN_GATHERED_ROWS 32
#define MAX_GATHERED_DW_ROWS 64

/* The pass's own tuning key where set (conv.implicit_dx, conv.implicit_dw; the forward's is
 * conv.implicit), else conv.implicit, else `shape_suits` where the GEMM runs on tensor cores and
 * the own kernels are not off. */
static bool gather_allowed(oclml_ctx *ctx, oclml__tune_key pass_key, bool shape_suits) {
    long forced = oclml__tune(ctx, pass_key, 0);
    if (forced < 0) forced = oclml__tune(ctx, OCLML__TUNE_CONV_IMPLICIT, 0);
    if (forced >= 0) return forced > 0;
    return shape_suits && oclml__tune(ctx, OCLML__TUNE_GEMM_OWN, 0) != 0 &&
           oclml__gemm_gather_fast(ctx);
}

/* Whether the own kernels take an [m x k] by gathered [k x n] product over batch images whose
 * gathered planes hold `plane` floats. */
static bool gather_fits(size_t m, size_t n, size_t k, size_t lda, size_t batch, size_t plane,
                        bool segmented) {
    const oclml__gather geom = {.segment = segmented};
    oclml__gemm_desc d = {.m = m, .n = n, .k = k, .batch = batch, .trans_b = segmented};
    d.a.ld = lda;
    d.c.ld = n;
    d.gather_b = &geom;
    return plane <= UINT32_MAX && oclml__gemm_can_gather(&d);
}

bool oclml__conv_forward_gathers(oclml_ctx *ctx, const conv_shape *s) {
    return gather_fits(s->K / s->groups, s->P * s->Q, cg_rs(s), cg_rs(s), s->N,
                       s->C / s->groups * s->H * s->W, false) &&
           gather_allowed(ctx, OCLML__TUNE_CONV_IMPLICIT, s->P * s->Q >= MIN_GATHERED_COLUMNS);
}

/* The forward's product for group g, y = W_g x_g over all images in one batched product whose
 * B operand gathers the columns from x as it loads them (y NULL: its buffer left out, for
 * describing the plan). */
static oclml__gemm_desc gathered_desc(const conv_shape *s, const oclml__gather *geom, unsigned g,
                                      const oclml_tensor *x, const oclml_tensor *w,
                                      const oclml_tensor *b, oclml_tensor *y) {
    size_t crs = cg_rs(s), pq = s->P * s->Q, kg = s->K / s->groups, cg = s->C / s->groups;
    return (oclml__gemm_desc){.m = kg,
                              .n = pq,
                              .k = crs,
                              .batch = s->N,
                              .alpha = 1.0f,
                              .a = conv_mat(w, g * kg * crs, crs, 0),
                              .b = conv_mat(x, g * cg * s->H * s->W, 0, s->C * s->H * s->W),
                              .c = conv_mat(y, g * kg * pq, pq, s->K * pq),
                              .bias = b ? b->mem : NULL,
                              .bias_offset = b ? oclml__elem_offset(b) + g * kg : 0,
                              .bias_per_row = true,
                              .act = OCLML_ACT_NONE,
                              .gather_b = geom};
}

static oclml__gather gather_of(const conv_shape *s) {
    return (oclml__gather){.H = (unsigned)s->H,
                           .W = (unsigned)s->W,
                           .R = (unsigned)s->R,
                           .S = (unsigned)s->S,
                           .Q = (unsigned)s->Q,
                           .sh = s->sh,
                           .sw = s->sw,
                           .ph = s->ph,
                           .pw = s->pw,
                           .dh = s->dh,
                           .dw = s->dw};
}

oclml_status oclml__conv_forward_gathered(oclml_ctx *ctx, const conv_shape *s,
                                          const oclml_tensor *x, const oclml_tensor *w,
                                          const oclml_tensor *b, oclml_tensor *y) {
    const oclml__gather geom = gather_of(s);
    oclml_status st = OCLML_SUCCESS;
    for (unsigned g = 0; g < s->groups && !st; g++) {
        oclml__gemm_desc d = gathered_desc(s, &geom, g, x, w, b, y);
        st = oclml__gemm(ctx, &d);
    }
    return st;
}

void oclml__conv_describe_gathered(oclml_ctx *ctx, const conv_shape *s, const oclml_tensor *x,
                                   const oclml_tensor *w, char *text, size_t len) {
    const oclml__gather geom = gather_of(s);
    oclml__gemm_desc d = gathered_desc(s, &geom, 0, x, w, NULL, NULL);
    oclml__gemm_describe(ctx, &d, text, len);
}

/* The data gradient of a stride-1 convolution is a convolution too: of dy, by the weights with
 * input and output channels swapped and the taps flipped, padded by the rest of the dilated
 * kernel's extent (dh (R-1) - ph before). So where the forward gathers, it does as well. */
bool oclml__conv_data_gradient_gathers(oclml_ctx *ctx, const conv_shape *s) {
    size_t kg = s->K / s->groups;
    return s->sh == 1 && s->sw == 1 && s->ph <= s->dh * (s->R - 1) && s->pw <= s->dw * (s->S - 1) &&
           gather_fits(s->C / s->groups, s->H * s->W, kg * s->R * s->S, kg * s->R * s->S, s->N,
                       kg * s->P * s->Q, false) &&
           gather_allowed(ctx, OCLML__TUNE_CONV_IMPLICIT_DX,
                          s->H * s->W >= MIN_GATHERED_COLUMNS &&
                              s->C / s->groups >= MIN_GATHERED_ROWS);
}

/* dx_g = W_g'^T-flipped * dy_g as one batched product per group: the weights transposed per
 * group once into w_t [groups][Cg][Kg][RS], the taps flipped in the gather. */
oclml_status oclml__conv_data_gradient_gathered(oclml_ctx *ctx, const conv_shape *s,
                                                const oclml_tensor *w, const oclml_tensor *dy,
                                                oclml_tensor *dx, const oclml_tensor *b) {
    size_t cg = s->C / s->groups, kg = s->K / s->groups, rs = s->R * s->S, hw = s->H * s->W,
           pq = s->P * s->Q;
    size_t from[4] = {s->groups, kg, cg, rs}, to[4] = {s->groups, cg, kg, rs};
    static const int swap_channels[4] = {0, 2, 1, 3};
    cl_mem wt;
    oclml_tensor *w4 = NULL, *t4 = NULL;
    oclml_status st = oclml__scratch_get(ctx, s->K * cg * rs * sizeof(float), &wt);
    if (st) return st;
    st = oclml_tensor_wrap(ctx, w->mem, w->offset_bytes, 4, from, &w4);
    if (!st) st = oclml_tensor_wrap(ctx, wt, 0, 4, to, &t4);
    if (!st) st = oclml_permute(ctx, w4, swap_channels, t4);
    const oclml__gather geom = {.H = (unsigned)s->P,
                                .W = (unsigned)s->Q,
                                .R = (unsigned)s->R,
                                .S = (unsigned)s->S,
                                .Q = (unsigned)s->W,
                                .sh = 1,
                                .sw = 1,
                                .ph = s->dh * (unsigned)(s->R - 1) - s->ph,
                                .pw = s->dw * (unsigned)(s->S - 1) - s->pw,
                                .dh = s->dh,
                                .dw = s->dw,
                                .flip = 1};
    for (unsigned g = 0; g < s->groups && !st; g++) {
        oclml__gemm_desc d = {.m = cg,
                              .n = hw,
                              .k = kg * rs,
                              .batch = s->N,
                              .alpha = 1.0f,
                              .a = {wt, g * cg * kg * rs, kg * rs, 0},
                              .b = conv_mat(dy, g * kg * pq, 0, s->K * pq),
                              .c = conv_mat(dx, g * cg * hw, hw, s->C * hw),
                              .bias = b ? b->mem : NULL,
                              .bias_offset = b ? oclml__elem_offset(b) + g * cg : 0,
                              .bias_per_row = true,
                              .act = OCLML_ACT_NONE,
                              .gather_b = &geom};
        st = oclml__gemm(ctx, &d);
    }
    if (t4) oclml_tensor_destroy(t4);
    if (w4) oclml_tensor_destroy(w4);
    oclml__scratch_put(ctx, wt);
    return st;
}

/* The weight gradient as one product per group whose K runs over every image's positions:
 * dy's rows of each image side by side (A, segmented), the unfolded columns gathered from x
 * (B, transposed); split K sums the images deterministically. */
bool oclml__conv_weight_gradient_gathers(oclml_ctx *ctx, const conv_shape *s) {
    return gather_fits(s->K / s->groups, cg_rs(s), s->N * s->P * s->Q, s->P * s->Q, 1,
                       s->C / s->groups * s->H * s->W, true) &&
           gather_allowed(ctx, OCLML__TUNE_CONV_IMPLICIT_DW,
                          s->K / s->groups <= MAX_GATHERED_DW_ROWS &&
                              s->C / s->groups >= MIN_GATHERED_ROWS);
}

oclml_status oclml__conv_weight_gradient_gathered(oclml_ctx *ctx, const conv_shape *s,
                                                  const oclml_tensor *x, const oclml_tensor *dy,
                                                  oclml_tensor *dw, int accumulate) {
    size_t crs = cg_rs(s), pq = s->P * s->Q, kg = s->K / s->groups, cg = s->C / s->groups;
    oclml__gather geom = gather_of(s);
    geom.segment = (unsigned)pq;
    geom.a_seg = s->K * pq;
    geom.b_seg = s->C * s->H * s->W;
    oclml_status st = OCLML_SUCCESS;
    for (unsigned g = 0; g < s->groups && !st; g++) {
        oclml__gemm_desc d = {.trans_b = true,
                              .m = kg,
                              .n = crs,
                              .k = s->N * pq,
                              .batch = 1,
                              .alpha = 1.0f,
                              .beta = accumulate ? 1.0f : 0.0f,
                              .a = conv_mat(dy, g * kg * pq, pq, 0),
                              .b = conv_mat(x, g * cg * s->H * s->W, 0, 0),
                              .c = conv_mat(dw, g * kg * crs, crs, 0),
                              .act = OCLML_ACT_NONE,
                              .gather_b = &geom};
        st = oclml__gemm(ctx, &d);
    }
    return st;
}
