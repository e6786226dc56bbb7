/* 2-D convolution and transposed convolution over NCHW tensors, as matrix products on the GEMM
 * family: a chunk of images is unfolded into columns (cl/ops/conv.cl), then
 *   forward        y[i] = W_g col[i]                   (batched, W shared, bias in the epilogue)
 *   data gradient  dcol[i] = W_g^T dy[i], then folded back into dx by gathering
 *   weight grad.   dW_g (+)= [dy rows of the chunk side by side] [columns side by side]^T
 * per group g. A transposed convolution is the data gradient of the convolution that maps its
 * output back to its input, so the same three pieces serve it with the roles swapped. Chunks
 * keep the column workspace within CHUNK_BYTES. Where the GEMM runs on tensor cores the forward
 * unfolds nothing: the product gathers its columns from the input as it loads them
 * (oclml__gather, implicit im2col). */
#include "ops/stand_in.h"
#include "ops/conv.h"
#include "ops/ops.h"

#include <stdio.h>

#define KERNEL_FILE "conv.cl"
static const oclml__program_spec PROGRAM = {
    KERNEL_FILE, NULL, "oclml_conv_im2col oclml_conv_col2im oclml_conv_rows_side_by_side", 0};

/* The column workspace a chunk of images may take. */
#define CHUNK_BYTES ((size_t)128 << 20)

oclml_status oclml_conv2d_params_init(oclml_conv2d_params *p) {
    if (!p) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "params is NULL");
    *p = (oclml_conv2d_params){
        .struct_size = sizeof *p, .stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
    return OCLML_SUCCESS;
}

static oclml_status check_params(oclml_ctx *ctx, const oclml_conv2d_params *p, bool transposed) {
    if (!p) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "conv2d params are NULL");
    if (p->struct_size != sizeof *p)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "conv2d params struct_size is %zu, this library's is %zu (call "
                           "oclml_conv2d_params_init)",
                           p->struct_size, sizeof *p);
    for (int i = 0; i < 2; i++) {
        if (!p->stride[i] || !p->dilation[i])
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "conv2d stride and dilation must be >= 1");
        if (p->pad_before[i] > 65535 || p->pad_after[i] > 65535 || p->stride[i] > 65535 ||
            p->dilation[i] > 65535)
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "conv2d stride, padding or dilation out of range");
        if (!transposed && p->output_padding[i])
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "output_padding is for transposed convolutions only");
        if (transposed && p->output_padding[i] >= p->stride[i] &&
            p->output_padding[i] >= p->dilation[i])
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "output_padding must be smaller than the stride or the dilation");
    }
    if (!p->groups) return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "groups must be >= 1");
    return OCLML_SUCCESS;
}

/* The output extent of a convolution along one axis (0 when the kernel does not fit). */
static size_t conv_out(size_t in, unsigned before, unsigned after, size_t k, unsigned dil,
                       unsigned stride) {
    size_t padded = in + before + after, span = (size_t)dil * (k - 1) + 1;
    return padded < span ? 0 : (padded - span) / stride + 1;
}

/* The shape of the convolution computing `out` from `in` with weights w [out_ch, in_ch/g, R, S];
 * for a transposed convolution, `in` is its output and `out` its input. */
static oclml_status conv_shape_of(oclml_ctx *ctx, const oclml_conv2d_params *p,
                                  const oclml_tensor *in, const oclml_tensor *w,
                                  const char *in_name, conv_shape *s) {
    oclml_status st = oclml__check_tensor(ctx, in, in_name);
    if (!st) st = oclml__check_tensor(ctx, w, "w");
    if (st) return st;
    if (in->ndim != 4 || w->ndim != 4)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "convolution tensors are 4-D: %s [N x C x H x W], w [K x C/groups x R x "
                           "S]",
                           in_name);
    *s = (conv_shape){.N = in->shape[0],
                      .C = in->shape[1],
                      .H = in->shape[2],
                      .W = in->shape[3],
                      .K = w->shape[0],
                      .R = w->shape[2],
                      .S = w->shape[3],
                      .sh = p->stride[0],
                      .sw = p->stride[1],
                      .ph = p->pad_before[0],
                      .pw = p->pad_before[1],
                      .dh = p->dilation[0],
                      .dw = p->dilation[1],
                      .groups = p->groups};
    if (s->C % s->groups || s->K % s->groups || w->shape[1] * s->groups != s->C)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "channels do not match the groups: %zu input channels, weights [%zu x "
                           "%zu x ...], %u groups",
                           s->C, s->K, w->shape[1], s->groups);
    s->P = conv_out(s->H, p->pad_before[0], p->pad_after[0], s->R, s->dh, s->sh);
    s->Q = conv_out(s->W, p->pad_before[1], p->pad_after[1], s->S, s->dw, s->sw);
    if (!s->P || !s->Q)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "the %zux%zu kernel (dilated) does not fit the padded %zux%zu input",
                           s->R, s->S, s->H, s->W);
    /* The kernels index within a chunk in 32 bits and images in 64. */
    /* Kernels compute rows and columns with padding in signed 32-bit arithmetic. */
    if (s->H > INT32_MAX / 2 || s->W > INT32_MAX / 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "convolution input too large");
    if (s->C * s->H * s->W > UINT32_MAX || s->K * s->P * s->Q > UINT32_MAX ||
        cg_rs(s) * s->P * s->Q > UINT32_MAX || s->N > UINT32_MAX)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "convolution too large for one image");
    return OCLML_SUCCESS;
}

static oclml_status check_out(oclml_ctx *ctx, const oclml_tensor *t, const char *name, size_t n,
                              size_t c, size_t h, size_t w) {
    const size_t want[4] = {n, c, h, w};
    return oclml__check_dims(ctx, t, name, 4, want);
}

static oclml_status check_no_alias(oclml_ctx *ctx, const oclml_tensor *out, const char *name,
                                   const oclml_tensor *const *others, int n) {
    for (int i = 0; i < n; i++)
        if (out && oclml__overlap(out, others[i]))
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "output '%s' overlaps another tensor of the call", name);
    return OCLML_SUCCESS;
}

/* The gradients of a backward overlap neither the inputs nor each other. */
static oclml_status check_gradients_alone(oclml_ctx *ctx, const oclml_tensor *x,
                                          const oclml_tensor *w, const oclml_tensor *dy,
                                          const oclml_tensor *dx, const oclml_tensor *dw,
                                          const oclml_tensor *db) {
    const oclml_tensor *all[6] = {x, w, dy, dx, dw, db};
    static const char *const names[3] = {"dx", "dw", "db"};
    oclml_status st = OCLML_SUCCESS;
    for (int i = 3; i < 6 && !st; i++) {
        const oclml_tensor *others[5];
        int n = 0;
        for (int j = 0; j < 6; j++)
            if (j != i && all[j]) others[n++] = all[j];
        st = check_no_alias(ctx, all[i], names[i - 3], others, n);
    }
    return st;
}

/* ---- launches of the data-movement kernels ---- */

oclml_status oclml__conv_launch_1d(oclml_ctx *ctx, const oclml__program_spec *program,
                                   const char *name, const oclml__arg *args, unsigned nargs,
                                   size_t n) {
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, program, name, &k);
    if (st) return st;
    size_t global, local;
    oclml__grid_1d(ctx, n, &global, &local);
    return oclml__launch(ctx, k, args, nargs, 1, &global, &local, NULL);
}

static oclml_status launch_1d(oclml_ctx *ctx, const char *name, const oclml__arg *args,
                              unsigned nargs, size_t n) {
    return oclml__conv_launch_1d(ctx, &PROGRAM, name, args, nargs, n);
}

/* Images n0.. n0+nb-1, group g's channels of x, into col: per image [CgRS x PQ] (side_by_side
 * false) or all images side by side in one [CgRS x nb PQ]. */
static oclml_status im2col(oclml_ctx *ctx, const conv_shape *s, const oclml_tensor *x, size_t n0,
                           size_t nb, unsigned g, cl_mem col, bool side_by_side) {
    GEOM(s);
    size_t crs = cg_rs(s), pq = s->P * s->Q;
    cl_mem xm = x->mem;
    cl_ulong x_off = oclml__elem_offset(x), s_crs = side_by_side ? nb * pq : pq,
             s_img = side_by_side ? pq : crs * pq;
    cl_uint un0 = (cl_uint)n0, unb = (cl_uint)nb, c0 = (cl_uint)(g * (s->C / s->groups)),
            Cg = (cl_uint)(s->C / s->groups);
    oclml__arg args[] = {OCLML_ARG(xm),    OCLML_ARG(x_off), OCLML_ARG(un0), OCLML_ARG(unb),
                         OCLML_ARG(c0),    OCLML_ARG(Cg),    GEOM_ARGS,      OCLML_ARG(col),
                         OCLML_ARG(s_crs), OCLML_ARG(s_img)};
    return launch_1d(ctx, "oclml_conv_im2col", args, 22, nb * crs * pq);
}

/* Folds per-image columns [CgRS x PQ] of images n0.. back into group g's channels of dx (+ the
 * bias of each channel where bias is given: a transposed convolution's output). */
static oclml_status col2im(oclml_ctx *ctx, const conv_shape *s, cl_mem col, size_t n0, size_t nb,
                           unsigned g, oclml_tensor *dx, const oclml_tensor *bias) {
    GEOM(s);
    cl_mem dm = dx->mem, bm = oclml__opt_mem(bias);
    cl_ulong d_off = oclml__elem_offset(dx), b_off = oclml__opt_offset(bias);
    cl_uint un0 = (cl_uint)n0, unb = (cl_uint)nb, c0 = (cl_uint)(g * (s->C / s->groups)),
            Cg = (cl_uint)(s->C / s->groups), has_bias = bias != NULL;
    oclml__arg args[] = {OCLML_ARG(col), OCLML_ARG(un0),   OCLML_ARG(unb),     OCLML_ARG(c0),
                         OCLML_ARG(Cg),  GEOM_ARGS,        OCLML_ARG(dm),      OCLML_ARG(d_off),
                         OCLML_ARG(bm),  OCLML_ARG(b_off), OCLML_ARG(has_bias)};
    return launch_1d(ctx, "oclml_conv_col2im", args, 23, nb * Cg * s->H * s->W);
}

/* db (+)= the sum of y [N, K, P, Q] over images and positions: the axis reduction's column
 * kernel (every element read once by many work-groups, a fixed order: deterministic). */
static oclml_status bias_grad(oclml_ctx *ctx, const oclml_tensor *y, oclml_tensor *db,
                              int accumulate) {
    static const int axes[3] = {0, 2, 3};
    size_t K = y->shape[1];
    oclml_tensor *flat = NULL, *sum = NULL;
    cl_mem tmp = NULL;
    /* db may have any shape of K elements: reduce into a 1-D view of it, or of a scratch buffer
     * added to it. */
    oclml_status st = oclml_tensor_wrap(ctx, db->mem, db->offset_bytes, 1, &K, &flat);
    if (!st && accumulate) st = oclml__scratch_get(ctx, K * sizeof(float), &tmp);
    if (!st && accumulate) st = oclml_tensor_wrap(ctx, tmp, 0, 1, &K, &sum);
    if (!st) st = oclml_reduce_axes(ctx, OCLML_REDUCE_SUM, y, axes, 3, accumulate ? sum : flat);
    if (!st && accumulate) st = oclml_binary(ctx, OCLML_ADD, flat, sum, flat);
    if (sum) oclml_tensor_destroy(sum);
    if (tmp) oclml__scratch_put(ctx, tmp);
    if (flat) oclml_tensor_destroy(flat);
    return st;
}

/* Images a chunk holds: the tuning key conv.chunk, else as many as keep `per_image` floats a
 * image within CHUNK_BYTES; at least one, at most all. */
static size_t chunk_images(oclml_ctx *ctx, const conv_shape *s, size_t per_image) {
    long forced = oclml__tune(ctx, OCLML__TUNE_CONV_CHUNK, 0);
    size_t nb = forced > 0 ? (size_t)forced : CHUNK_BYTES / (per_image * sizeof(float) + 1);
    return nb < 1 ? 1 : nb > s->N ? s->N : nb;
}

/* ---- the three pieces ---- */

/* A 1x1 convolution with unit stride and no padding is a product with the images themselves:
 * their [C x HW] planes are the columns, so no unfolding (and no workspace) is needed. */
static bool is_pointwise(const conv_shape *s) {
    return s->R == 1 && s->S == 1 && s->sh == 1 && s->sw == 1 && s->ph == 0 && s->pw == 0 &&
           s->P == s->H && s->Q == s->W;
}

/* Pointwise forward (y = W x + b) or data gradient (dx = W^T dy + b) of group g, over every
 * image in one batched product (out NULL: for describing the plan). */
static oclml__gemm_desc pointwise_desc(const conv_shape *s, unsigned g, const oclml_tensor *w,
                                       const oclml_tensor *in, oclml_tensor *out,
                                       const oclml_tensor *b, bool data_gradient) {
    size_t cg = s->C / s->groups, kg = s->K / s->groups, hw = s->H * s->W;
    size_t in_ch = data_gradient ? s->K : s->C, out_ch = data_gradient ? s->C : s->K;
    size_t in_g = data_gradient ? kg : cg, out_g = data_gradient ? cg : kg;
    return (oclml__gemm_desc){.trans_a = data_gradient,
                              .m = out_g,
                              .n = hw,
                              .k = in_g,
                              .batch = s->N,
                              .alpha = 1.0f,
                              .a = conv_mat(w, g * kg * cg, cg, 0),
                              .b = conv_mat(in, g * in_g * hw, hw, in_ch * hw),
                              .c = conv_mat(out, g * out_g * hw, hw, out_ch * hw),
                              .bias = b ? b->mem : NULL,
                              .bias_offset = b ? oclml__elem_offset(b) + g * out_g : 0,
                              .bias_per_row = true,
                              .act = OCLML_ACT_NONE};
}

static oclml_status pointwise(oclml_ctx *ctx, const conv_shape *s, const oclml_tensor *w,
                              const oclml_tensor *in, oclml_tensor *out, const oclml_tensor *b,
                              bool data_gradient) {
    oclml_status st = OCLML_SUCCESS;
    for (unsigned g = 0; g < s->groups && !st; g++) {
        oclml__gemm_desc d = pointwise_desc(s, g, w, in, out, b, data_gradient);
        st = oclml__gemm(ctx, &d);
    }
    return st;
}

/* The unfolded forward's product for group g over cnt images from n0, whose columns are in col
 * (col and y NULL: for describing the plan). */
static oclml__gemm_desc unfolded_desc(const conv_shape *s, unsigned g, size_t n0, size_t cnt,
                                      const oclml_tensor *w, cl_mem col, oclml_tensor *y,
                                      const oclml_tensor *b) {
    size_t crs = cg_rs(s), pq = s->P * s->Q, kg = s->K / s->groups;
    return (oclml__gemm_desc){.m = kg,
                              .n = pq,
                              .k = crs,
                              .batch = cnt,
                              .alpha = 1.0f,
                              .a = conv_mat(w, g * kg * crs, crs, 0),
                              .b = {col, 0, pq, crs * pq},
                              .c = conv_mat(y, (n0 * s->K + g * kg) * pq, pq, s->K * pq),
                              .bias = b ? b->mem : NULL,
                              .bias_offset = b ? oclml__elem_offset(b) + g * kg : 0,
                              .bias_per_row = true,
                              .act = OCLML_ACT_NONE};
}

/* ---- the plan: how each pass runs (shared by the runs and their description) ---- */

conv_path oclml__conv_forward_path(oclml_ctx *ctx, const conv_shape *s) {
    return is_pointwise(s)                                ? CONV_POINTWISE
           : oclml__conv_forward_winograd_applies(ctx, s) ? CONV_WINOGRAD
           : oclml__conv_forward_gathers(ctx, s)          ? CONV_GATHERED
                                                          : CONV_UNFOLDED;
}

conv_path oclml__conv_data_path(oclml_ctx *ctx, const conv_shape *s) {
    return is_pointwise(s)                                      ? CONV_POINTWISE
           : oclml__conv_data_gradient_direct_applies(ctx, s)   ? CONV_DIRECT
           : oclml__conv_data_gradient_winograd_applies(ctx, s) ? CONV_WINOGRAD
           : oclml__conv_data_gradient_gathers(ctx, s)          ? CONV_GATHERED
                                                                : CONV_UNFOLDED;
}

conv_path oclml__conv_weight_path(oclml_ctx *ctx, const conv_shape *s) {
    return oclml__conv_weight_gradient_direct_applies(ctx, s)     ? CONV_DIRECT
           : oclml__conv_weight_gradient_winograd_applies(ctx, s) ? CONV_WINOGRAD
           : oclml__conv_weight_gradient_gathers(ctx, s)          ? CONV_GATHERED
                                                                  : CONV_UNFOLDED;
}

/* y = conv(x, w) (+ b per output channel). */
static oclml_status conv_forward(oclml_ctx *ctx, const conv_shape *s, const oclml_tensor *x,
                                 const oclml_tensor *w, const oclml_tensor *b, oclml_tensor *y) {
    const conv_path path = oclml__conv_forward_path(ctx, s);
    if (path == CONV_POINTWISE) return pointwise(ctx, s, w, x, y, b, false);
    if (path == CONV_WINOGRAD) return oclml__conv_forward_winograd(ctx, s, x, w, b, y);
    if (path == CONV_GATHERED) return oclml__conv_forward_gathered(ctx, s, x, w, b, y);
    size_t crs = cg_rs(s), pq = s->P * s->Q;
    size_t nb = chunk_images(ctx, s, crs * pq);
    cl_mem col;
    oclml_status st = oclml__scratch_get(ctx, nb * crs * pq * sizeof(float), &col);
    if (st) return st;
    for (size_t n0 = 0; n0 < s->N && !st; n0 += nb) {
        size_t cnt = s->N - n0 < nb ? s->N - n0 : nb;
        for (unsigned g = 0; g < s->groups && !st; g++) {
            st = im2col(ctx, s, x, n0, cnt, g, col, false);
            oclml__gemm_desc d = unfolded_desc(s, g, n0, cnt, w, col, y, b);
            if (!st) st = oclml__gemm(ctx, &d);
        }
    }
    oclml__scratch_put(ctx, col);
    return st;
}

/* dx = the data gradient of conv given dy (+ b per input channel: a transposed convolution). */
static oclml_status conv_backward_data(oclml_ctx *ctx, const conv_shape *s, const oclml_tensor *w,
                                       const oclml_tensor *dy, oclml_tensor *dx,
                                       const oclml_tensor *b) {
    const conv_path path = oclml__conv_data_path(ctx, s);
    if (path == CONV_POINTWISE) return pointwise(ctx, s, w, dy, dx, b, true);
    if (path == CONV_DIRECT) return oclml__conv_data_gradient_direct(ctx, s, w, dy, dx, b);
    if (path == CONV_WINOGRAD) return oclml__conv_data_gradient_winograd(ctx, s, w, dy, dx, b);
    if (path == CONV_GATHERED) return oclml__conv_data_gradient_gathered(ctx, s, w, dy, dx, b);
    size_t crs = cg_rs(s), pq = s->P * s->Q, kg = s->K / s->groups;
    size_t nb = chunk_images(ctx, s, crs * pq);
    cl_mem col;
    oclml_status st = oclml__scratch_get(ctx, nb * crs * pq * sizeof(float), &col);
    if (st) return st;
    for (size_t n0 = 0; n0 < s->N && !st; n0 += nb) {
        size_t cnt = s->N - n0 < nb ? s->N - n0 : nb;
        for (unsigned g = 0; g < s->groups && !st; g++) {
            oclml__gemm_desc d = {.trans_a = true,
                                  .m = crs,
                                  .n = pq,
                                  .k = kg,
                                  .batch = cnt,
                                  .alpha = 1.0f,
                                  .a = conv_mat(w, g * kg * crs, crs, 0),
                                  .b = conv_mat(dy, (n0 * s->K + g * kg) * pq, pq, s->K * pq),
                                  .c = {col, 0, pq, crs * pq},
                                  .act = OCLML_ACT_NONE};
            st = oclml__gemm(ctx, &d);
            if (!st) st = col2im(ctx, s, col, n0, cnt, g, dx, b);
        }
    }
    oclml__scratch_put(ctx, col);
    return st;
}

/* dw (+)= the weight gradient of conv given its input x and dy. */
static oclml_status conv_backward_weight(oclml_ctx *ctx, const conv_shape *s, const oclml_tensor *x,
                                         const oclml_tensor *dy, oclml_tensor *dw, int accumulate) {
    const conv_path path = oclml__conv_weight_path(ctx, s);
    if (path == CONV_DIRECT)
        return oclml__conv_weight_gradient_direct(ctx, s, x, dy, dw, accumulate);
    if (path == CONV_WINOGRAD)
        return oclml__conv_weight_gradient_winograd(ctx, s, x, dy, dw, accumulate);
    if (path == CONV_GATHERED)
        return oclml__conv_weight_gradient_gathered(ctx, s, x, dy, dw, accumulate);
    size_t crs = cg_rs(s), pq = s->P * s->Q, kg = s->K / s->groups;
    size_t nb = chunk_images(ctx, s, (crs + kg) * pq);
    cl_mem col = NULL, rows = NULL;
    oclml_status st = oclml__scratch_get(ctx, nb * crs * pq * sizeof(float), &col);
    if (!st) st = oclml__scratch_get(ctx, nb * kg * pq * sizeof(float), &rows);
    for (size_t n0 = 0; n0 < s->N && !st; n0 += nb) {
        size_t cnt = s->N - n0 < nb ? s->N - n0 : nb;
        for (unsigned g = 0; g < s->groups && !st; g++) {
            st = im2col(ctx, s, x, n0, cnt, g, col, true);
            cl_mem ym = dy->mem;
            cl_ulong y_off = oclml__elem_offset(dy);
            cl_uint un0 = (cl_uint)n0, unb = (cl_uint)cnt, uK = (cl_uint)s->K,
                    k0 = (cl_uint)(g * kg), ukg = (cl_uint)kg, upq = (cl_uint)pq;
            oclml__arg args[] = {OCLML_ARG(ym),  OCLML_ARG(y_off), OCLML_ARG(un0),
                                 OCLML_ARG(unb), OCLML_ARG(uK),    OCLML_ARG(k0),
                                 OCLML_ARG(ukg), OCLML_ARG(upq),   OCLML_ARG(rows)};
            if (!st) st = launch_1d(ctx, "oclml_conv_rows_side_by_side", args, 9, cnt * kg * pq);
            /* The first chunk overwrites dw unless the caller accumulates. */
            oclml__gemm_desc d = {.trans_b = true,
                                  .m = kg,
                                  .n = crs,
                                  .k = cnt * pq,
                                  .batch = 1,
                                  .alpha = 1.0f,
                                  .beta = (n0 == 0 && !accumulate) ? 0.0f : 1.0f,
                                  .a = {rows, 0, cnt * pq, 0},
                                  .b = {col, 0, cnt * pq, 0},
                                  .c = conv_mat(dw, g * kg * crs, crs, 0),
                                  .act = OCLML_ACT_NONE};
            if (!st) st = oclml__gemm(ctx, &d);
        }
    }
    if (col) oclml__scratch_put(ctx, col);
    if (rows) oclml__scratch_put(ctx, rows);
    return st;
}

/* ---- public entry points ---- */

/* The rehearsal key of a convolution's call (rehearsal.c): the op and its geometry. */
static uint64_t conv_key(const char *op, const oclml_conv2d_params *p) {
    uint64_t key = oclml__rehearsal_key(0, op, strlen(op));
    if (!p) return key;
    key = oclml__rehearsal_key(key, p->stride, sizeof p->stride);
    key = oclml__rehearsal_key(key, p->pad_before, sizeof p->pad_before);
    key = oclml__rehearsal_key(key, p->pad_after, sizeof p->pad_after);
    key = oclml__rehearsal_key(key, p->dilation, sizeof p->dilation);
    key = oclml__rehearsal_key(key, &p->groups, sizeof p->groups);
    return oclml__rehearsal_key(key, p->output_padding, sizeof p->output_padding);
}

static oclml_status conv2d_run(oclml_ctx *ctx, const oclml_conv2d_params *p, const oclml_tensor *x,
                               const oclml_tensor *w, const oclml_tensor *b, oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_params(ctx, p, false);
    conv_shape s;
    if (!st) st = conv_shape_of(ctx, p, x, w, "x", &s);
    if (!st) st = check_out(ctx, y, "y", s.N, s.K, s.P, s.Q);
    if (!st && b) st = oclml__check_numel(ctx, b, "b", s.K);
    const oclml_tensor *ins[3] = {x, w, b};
    if (!st) st = check_no_alias(ctx, y, "y", ins, 3);
    return st ? st : conv_forward(ctx, &s, x, w, b, y);
}

/* ---- 16-bit tensors: through fp32 stand-ins (stand_in.h; a convolution's work outgrows its
 * tensors' traffic, so the conversions cost little beside it) ---- */

typedef struct conv_lp_call {
    const oclml_conv2d_params *p;
    bool transpose;
    int accumulate;
    char *text;
    size_t len;
} conv_lp_call;

static oclml_status conv_forward_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const conv_lp_call *c = call;
    return (c->transpose ? oclml_conv_transpose2d : oclml_conv2d)(ctx, c->p, v[0], v[1], v[2],
                                                                  v[3]);
}

static oclml_status conv_backward_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const conv_lp_call *c = call;
    return (c->transpose ? oclml_conv_transpose2d_backward : oclml_conv2d_backward)(
        ctx, c->p, v[0], v[1], v[2], v[3], v[4], v[5], c->accumulate);
}

static oclml_status conv_plan_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const conv_lp_call *c = call;
    return oclml_conv2d_plan(ctx, c->p, v[0], v[1], c->text, c->len);
}

static const char *const CONV_FWD_NAMES[] = {"x", "w", "b", "y"}, *const CONV_BWD_NAMES[] = {
                                                                      "x",  "w",  "dy",
                                                                      "dx", "dw", "db"};

oclml_status oclml_conv2d(oclml_ctx *ctx, const oclml_conv2d_params *p, const oclml_tensor *x,
                          const oclml_tensor *w, const oclml_tensor *b, oclml_tensor *y) {
    oclml_conv2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_conv2d_params_init);
    const oclml_tensor *const ts[] = {x, w, b, y};
    const conv_lp_call lp = {p, false, 0, NULL, 0};
    if (oclml__any_16bit(4, ts))
        return oclml__via_fp32(ctx, 4, 0x7u, 0x8u, ts, CONV_FWD_NAMES, conv_forward_fp32, &lp);
    uint64_t key = conv_key("conv2d", p);
    key = oclml__rehearsal_key_tensor(key, x);
    key = oclml__rehearsal_key_tensor(key, w);
    key = oclml__rehearsal_key_tensor(key, b);
    key = oclml__rehearsal_key_tensor(key, y);
    OCLML__REHEARSED(ctx, key, conv2d_run(ctx, p, x, w, b, y));
}

oclml_status oclml_conv2d_plan(oclml_ctx *ctx, const oclml_conv2d_params *p, const oclml_tensor *x,
                               const oclml_tensor *w, char *text, size_t len) {
    oclml_conv2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_conv2d_params_init);
    const oclml_tensor *const ts[] = {x, w};
    const conv_lp_call lp = {p, false, 0, text, len};
    if (oclml__any_16bit(2, ts))
        return oclml__via_fp32(ctx, 2, 0, 0, ts, CONV_FWD_NAMES, conv_plan_fp32, &lp);
    oclml_status st = oclml__check_ctx(ctx);
    if (!st && (!text || len == 0))
        st = oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "text buffer is NULL or empty");
    if (!st) st = check_params(ctx, p, false);
    conv_shape s;
    if (!st) st = conv_shape_of(ctx, p, x, w, "x", &s);
    if (st) return st;
    char gemm[160];
    const conv_path kind = oclml__conv_forward_path(ctx, &s), data = oclml__conv_data_path(ctx, &s),
                    weight = oclml__conv_weight_path(ctx, &s);
    char direct_dx[96];
    oclml__conv_describe_direct_dx(&s, direct_dx, sizeof direct_dx);
    const char *dgrad = data == CONV_POINTWISE  ? "a product with dy"
                        : data == CONV_DIRECT   ? direct_dx
                        : data == CONV_WINOGRAD ? "Winograd (flipped taps)"
                        : data == CONV_GATHERED ? "gathered (flipped taps)"
                                                : "unfolded (col2im)";
    char wgrad[96] = "unfolded";
    if (weight == CONV_DIRECT)
        oclml__conv_describe_direct_dw(ctx, &s, wgrad, sizeof wgrad);
    else if (weight == CONV_WINOGRAD)
        snprintf(wgrad, sizeof wgrad, "Winograd F(2x2,%zux%zu) (%zu products over the tiles)", s.R,
                 s.S, (s.R + 1) * (s.S + 1));
    else if (weight == CONV_GATHERED)
        snprintf(wgrad, sizeof wgrad, "gathered (images along K)");
    char fwd[200];
    if (kind == CONV_POINTWISE) {
        oclml__gemm_desc d = pointwise_desc(&s, 0, w, x, NULL, NULL, false);
        oclml__gemm_describe(ctx, &d, gemm, sizeof gemm);
        snprintf(fwd, sizeof fwd, "1x1 as a product with the images: %s", gemm);
    } else if (kind == CONV_WINOGRAD) {
        oclml__conv_describe_winograd(&s, fwd, sizeof fwd);
    } else if (kind == CONV_GATHERED) {
        oclml__conv_describe_gathered(ctx, &s, x, w, gemm, sizeof gemm);
        snprintf(fwd, sizeof fwd, "implicit GEMM (columns gathered from x): %s", gemm);
    } else {
        size_t nb = chunk_images(ctx, &s, cg_rs(&s) * s.P * s.Q);
        oclml__gemm_desc d = unfolded_desc(&s, 0, 0, nb, w, NULL, NULL, NULL);
        oclml__gemm_describe(ctx, &d, gemm, sizeof gemm);
        snprintf(fwd, sizeof fwd, "im2col (%zu images a chunk) + GEMM: %s", nb, gemm);
    }
    snprintf(text, len, "%s; data gradient %s; weight gradient %s", fwd, dgrad, wgrad);
    return OCLML_SUCCESS;
}

static oclml_status conv2d_backward_run(oclml_ctx *ctx, const oclml_conv2d_params *p,
                                        const oclml_tensor *x, const oclml_tensor *w,
                                        const oclml_tensor *dy, oclml_tensor *dx, oclml_tensor *dw,
                                        oclml_tensor *db, int accumulate) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_params(ctx, p, false);
    conv_shape s;
    if (!st) st = conv_shape_of(ctx, p, x, w, "x", &s);
    if (!st) st = check_out(ctx, dy, "dy", s.N, s.K, s.P, s.Q);
    if (!st && dx) st = check_out(ctx, dx, "dx", s.N, s.C, s.H, s.W);
    if (!st && dw) st = check_out(ctx, dw, "dw", s.K, s.C / s.groups, s.R, s.S);
    if (!st && db) st = oclml__check_numel(ctx, db, "db", s.K);
    if (!st) st = check_gradients_alone(ctx, x, w, dy, dx, dw, db);
    if (!st && dx) st = conv_backward_data(ctx, &s, w, dy, dx, NULL);
    if (!st && dw) st = conv_backward_weight(ctx, &s, x, dy, dw, accumulate);
    if (!st && db) st = bias_grad(ctx, dy, db, accumulate);
    return st;
}

oclml_status oclml_conv2d_backward(oclml_ctx *ctx, const oclml_conv2d_params *p,
                                   const oclml_tensor *x, const oclml_tensor *w,
                                   const oclml_tensor *dy, oclml_tensor *dx, oclml_tensor *dw,
                                   oclml_tensor *db, int accumulate) {
    oclml_conv2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_conv2d_params_init);
    const oclml_tensor *const ts[] = {x, w, dy, dx, dw, db};
    const conv_lp_call lp = {p, false, accumulate, NULL, 0};
    if (oclml__any_16bit(6, ts))
        return oclml__via_fp32(ctx, 6, accumulate ? 0x37u : 0x7u, 0x38u, ts, CONV_BWD_NAMES,
                               conv_backward_fp32, &lp);
    uint64_t key = conv_key("conv2d_backward", p);
    key = oclml__rehearsal_key(key, &accumulate, sizeof accumulate);
    key = oclml__rehearsal_key_tensor(key, x);
    key = oclml__rehearsal_key_tensor(key, w);
    key = oclml__rehearsal_key_tensor(key, dy);
    key = oclml__rehearsal_key_tensor(key, dx);
    key = oclml__rehearsal_key_tensor(key, dw);
    key = oclml__rehearsal_key_tensor(key, db);
    OCLML__REHEARSED(ctx, key, conv2d_backward_run(ctx, p, x, w, dy, dx, dw, db, accumulate));
}

/* A transposed convolution from x [N, Cin, H, W] with w [Cin, K/groups, R, S] is the data
 * gradient of the convolution from y [N, K, P, Q] to x-shaped outputs with the same w: its shape
 * is found from y's extents, which follow from x's. */
static oclml_status transposed_shape(oclml_ctx *ctx, const oclml_conv2d_params *p,
                                     const oclml_tensor *x, const oclml_tensor *w,
                                     const oclml_tensor *y, const char *y_name, conv_shape *s) {
    oclml_status st = oclml__check_tensor(ctx, x, "x");
    if (!st) st = oclml__check_tensor(ctx, w, "w");
    if (!st) st = oclml__check_tensor(ctx, y, y_name);
    if (st) return st;
    if (x->ndim != 4 || w->ndim != 4)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "transposed convolution tensors are 4-D: x [N x C x H x W], w [C x "
                           "K/groups x R x S]");
    size_t span_h = (size_t)p->dilation[0] * (w->shape[2] - 1) + 1 + p->output_padding[0],
           span_w = (size_t)p->dilation[1] * (w->shape[3] - 1) + 1 + p->output_padding[1];
    size_t full_h = (x->shape[2] - 1) * p->stride[0] + span_h,
           full_w = (x->shape[3] - 1) * p->stride[1] + span_w;
    size_t pad_h = (size_t)p->pad_before[0] + p->pad_after[0],
           pad_w = (size_t)p->pad_before[1] + p->pad_after[1];
    if (w->shape[2] == 0 || w->shape[3] == 0 || full_h <= pad_h || full_w <= pad_w)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "the padding leaves no transposed-convolution output");
    size_t want[4] = {x->shape[0], w->shape[1] * p->groups, full_h - pad_h, full_w - pad_w};
    st = oclml__check_dims(ctx, y, y_name, 4, want);
    if (!st) st = conv_shape_of(ctx, p, y, w, y_name, s);
    /* An output_padding of a stride or more (allowed below the dilation) gives the convolution
     * back from y more rows than x has: they are the rows no input reaches, so the convolution
     * keeps x's extent. */
    if (!st && (s->P < x->shape[2] || s->Q < x->shape[3] || s->K != x->shape[1]))
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "x [%zu x %zu x %zu x %zu] does not match the weights' %zu input "
                           "channels",
                           x->shape[0], x->shape[1], x->shape[2], x->shape[3], s->K);
    if (!st) {
        s->P = x->shape[2];
        s->Q = x->shape[3];
    }
    return st;
}

static oclml_status conv_transpose2d_run(oclml_ctx *ctx, const oclml_conv2d_params *p,
                                         const oclml_tensor *x, const oclml_tensor *w,
                                         const oclml_tensor *b, oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_params(ctx, p, true);
    conv_shape s;
    if (!st) st = transposed_shape(ctx, p, x, w, y, "y", &s);
    if (!st && b) st = oclml__check_numel(ctx, b, "b", s.C);
    const oclml_tensor *ins[3] = {x, w, b};
    if (!st) st = check_no_alias(ctx, y, "y", ins, 3);
    return st ? st : conv_backward_data(ctx, &s, w, x, y, b);
}

oclml_status oclml_conv_transpose2d(oclml_ctx *ctx, const oclml_conv2d_params *p,
                                    const oclml_tensor *x, const oclml_tensor *w,
                                    const oclml_tensor *b, oclml_tensor *y) {
    oclml_conv2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_conv2d_params_init);
    const oclml_tensor *const ts[] = {x, w, b, y};
    const conv_lp_call lp = {p, true, 0, NULL, 0};
    if (oclml__any_16bit(4, ts))
        return oclml__via_fp32(ctx, 4, 0x7u, 0x8u, ts, CONV_FWD_NAMES, conv_forward_fp32, &lp);
    uint64_t key = conv_key("conv_transpose2d", p);
    key = oclml__rehearsal_key_tensor(key, x);
    key = oclml__rehearsal_key_tensor(key, w);
    key = oclml__rehearsal_key_tensor(key, b);
    key = oclml__rehearsal_key_tensor(key, y);
    OCLML__REHEARSED(ctx, key, conv_transpose2d_run(ctx, p, x, w, b, y));
}

static oclml_status conv_transpose2d_backward_run(oclml_ctx *ctx, const oclml_conv2d_params *p,
                                                  const oclml_tensor *x, const oclml_tensor *w,
                                                  const oclml_tensor *dy, oclml_tensor *dx,
                                                  oclml_tensor *dw, oclml_tensor *db,
                                                  int accumulate) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_params(ctx, p, true);
    conv_shape s;
    if (!st) st = transposed_shape(ctx, p, x, w, dy, "dy", &s);
    if (!st && dx) st = check_out(ctx, dx, "dx", s.N, s.K, s.P, s.Q);
    if (!st && dw) st = check_out(ctx, dw, "dw", s.K, s.C / s.groups, s.R, s.S);
    if (!st && db) st = oclml__check_numel(ctx, db, "db", s.C);
    if (!st) st = check_gradients_alone(ctx, x, w, dy, dx, dw, db);
    /* The convolution's input is this op's output gradient, its output this op's input. */
    if (!st && dx) st = conv_forward(ctx, &s, dy, w, NULL, dx);
    if (!st && dw) st = conv_backward_weight(ctx, &s, dy, x, dw, accumulate);
    if (!st && db) st = bias_grad(ctx, dy, db, accumulate);
    return st;
}

oclml_status oclml_conv_transpose2d_backward(oclml_ctx *ctx, const oclml_conv2d_params *p,
                                             const oclml_tensor *x, const oclml_tensor *w,
                                             const oclml_tensor *dy, oclml_tensor *dx,
                                             oclml_tensor *dw, oclml_tensor *db, int accumulate) {
    oclml_conv2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_conv2d_params_init);
    const oclml_tensor *const ts[] = {x, w, dy, dx, dw, db};
    const conv_lp_call lp = {p, true, accumulate, NULL, 0};
    if (oclml__any_16bit(6, ts))
        return oclml__via_fp32(ctx, 6, accumulate ? 0x37u : 0x7u, 0x38u, ts, CONV_BWD_NAMES,
                               conv_backward_fp32, &lp);
    uint64_t key = conv_key("conv_transpose2d_backward", p);
    key = oclml__rehearsal_key(key, &accumulate, sizeof accumulate);
    key = oclml__rehearsal_key_tensor(key, x);
    key = oclml__rehearsal_key_tensor(key, w);
    key = oclml__rehearsal_key_tensor(key, dy);
    key = oclml__rehearsal_key_tensor(key, dx);
    key = oclml__rehearsal_key_tensor(key, dw);
    key = oclml__rehearsal_key_tensor(key, db);
    OCLML__REHEARSED(ctx, key,
                     conv_transpose2d_backward_run(ctx, p, x, w, dy, dx, dw, db, accumulate));
}

/* Prewarm: the data-movement kernels (the products plan onto the GEMM family's). */
void oclml__conv_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    oclml__warm_add(list, op, "im2col, col2im, rows side by side", PROGRAM);
    long winograd = oclml__tune(ctx, OCLML__TUNE_CONV_WINOGRAD, 0);
    if (winograd > 0 || (winograd < 0 && oclml__gemm_gather_fast(ctx)))
        oclml__conv_winograd_warm(op, list);
    /* The direct data and weight gradients of an image model's first layer: 3 colour channels,
     * 5x5 taps. */
    conv_shape rgb = {.N = 1, .C = 3, .H = 64, .W = 64, .K = 32, .R = 5, .S = 5, .P = 64, .Q = 64};
    rgb.sh = rgb.sw = rgb.dh = rgb.dw = rgb.groups = 1;
    rgb.ph = rgb.pw = 2;
    if ((!strcmp(op, "conv2d_backward") || !strcmp(op, "conv_transpose2d")) &&
        oclml__conv_data_gradient_direct_applies(ctx, &rgb))
        oclml__conv_direct_dx_warm(&rgb, op, list);
    if (strstr(op, "backward") && oclml__conv_weight_gradient_direct_applies(ctx, &rgb))
        oclml__conv_direct_dw_warm(ctx, &rgb, op, list);
}
