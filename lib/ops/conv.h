/* Convolution internals shared by the unfolding path (conv.c: im2col / col2im around the
 * GEMM, and the public entry points) and the implicit-GEMM path (conv_implicit.c: products that
 * gather their columns from the images as they load them). */
#ifndef OCLML_OPS_CONV_H
#define OCLML_OPS_CONV_H

#include "ops/gemm.h"
#include "ops/ops.h"

/* A convolution proper: input [N, C, H, W], weights [K, C/groups, R, S], output [N, K, P, Q]. */
typedef struct conv_shape {
    size_t N, C, H, W, K, R, S, P, Q;
    unsigned sh, sw, ph, pw, dh, dw, groups;
} conv_shape;

static inline size_t cg_rs(const conv_shape *s) { return s->C / s->groups * s->R * s->S; }

/* The geometry kernels take (GEOM_ARGS in cl/ops/conv.cl): declare its values, then pass them. */
#define GEOM(s)                                                                                    \
    cl_uint g_C = (cl_uint)(s)->C, g_H = (cl_uint)(s)->H, g_W = (cl_uint)(s)->W,                   \
            g_R = (cl_uint)(s)->R, g_S = (cl_uint)(s)->S, g_P = (cl_uint)(s)->P,                   \
            g_Q = (cl_uint)(s)->Q, g_sh = (s)->sh, g_sw = (s)->sw, g_ph = (s)->ph, g_pw = (s)->pw, \
            g_dh = (s)->dh, g_dw = (s)->dw
#define GEOM_ARGS                                                                          \
    OCLML_ARG(g_C), OCLML_ARG(g_H), OCLML_ARG(g_W), OCLML_ARG(g_R), OCLML_ARG(g_S),        \
        OCLML_ARG(g_P), OCLML_ARG(g_Q), OCLML_ARG(g_sh), OCLML_ARG(g_sw), OCLML_ARG(g_ph), \
        OCLML_ARG(g_pw), OCLML_ARG(g_dh), OCLML_ARG(g_dw)

/* Kernel `name` of `program` over n work units, one dimension (oclml__grid_1d): the launch of
 * the convolution files' data-movement kernels. */
oclml_status oclml__conv_launch_1d(oclml_ctx *ctx, const oclml__program_spec *program,
                                   const char *name, const oclml__arg *args, unsigned nargs,
                                   size_t n);

/* How a pass runs (conv.c): the forward pointwise, by Winograd, gathered or unfolded, in that
 * order of preference; the data gradient pointwise, direct, by Winograd, gathered or unfolded;
 * the weight gradient direct, by Winograd, gathered or unfolded. Each path's own rule (the
 * *_applies and *_gathers functions below) decides whether it takes the shape on this context;
 * pure functions of the shape, the device's capabilities and the tuning table. */
typedef enum conv_path {
    CONV_POINTWISE, /* 1x1, unit stride, no padding: a product with the images themselves */
    CONV_DIRECT,    /* conv_direct_dx.c, conv_direct_dw.c */
    CONV_WINOGRAD,  /* conv_winograd.c */
    CONV_GATHERED,  /* conv_implicit.c */
    CONV_UNFOLDED   /* im2col or col2im around the GEMM */
} conv_path;
conv_path oclml__conv_forward_path(oclml_ctx *ctx, const conv_shape *s);
conv_path oclml__conv_data_path(oclml_ctx *ctx, const conv_shape *s);
conv_path oclml__conv_weight_path(oclml_ctx *ctx, const conv_shape *s);

/* Tensor t's buffer as a matrix from `offset` floats past its start (t NULL: no buffer, offset
 * as given, for describing a plan). */
static inline oclml__matrix conv_mat(const oclml_tensor *t, size_t offset, size_t ld,
                                     size_t stride) {
    return (oclml__matrix){t ? t->mem : NULL, (t ? oclml__elem_offset(t) : 0) + offset, ld, stride};
}

/* The implicit-GEMM passes (conv_implicit.c): whether each applies to s on this context (the
 * tuning key conv.implicit; by default where the GEMM runs on tensor cores), and the pass. */
bool oclml__conv_forward_gathers(oclml_ctx *ctx, const conv_shape *s);
oclml_status oclml__conv_forward_gathered(oclml_ctx *ctx, const conv_shape *s,
                                          const oclml_tensor *x, const oclml_tensor *w,
                                          const oclml_tensor *b, oclml_tensor *y);
/* The forward's GEMM plan in words (x and w for their shapes and offsets). */
void oclml__conv_describe_gathered(oclml_ctx *ctx, const conv_shape *s, const oclml_tensor *x,
                                   const oclml_tensor *w, char *text, size_t len);
bool oclml__conv_data_gradient_gathers(oclml_ctx *ctx, const conv_shape *s);
oclml_status oclml__conv_data_gradient_gathered(oclml_ctx *ctx, const conv_shape *s,
                                                const oclml_tensor *w, const oclml_tensor *dy,
                                                oclml_tensor *dx, const oclml_tensor *b);
bool oclml__conv_weight_gradient_gathers(oclml_ctx *ctx, const conv_shape *s);
oclml_status oclml__conv_weight_gradient_gathered(oclml_ctx *ctx, const conv_shape *s,
                                                  const oclml_tensor *x, const oclml_tensor *dy,
                                                  oclml_tensor *dw, int accumulate);

/* The Winograd F(2x2, 3x3) and F(2x2, 5x5) passes (conv_winograd.c): whether each applies to s
 * on this context (the tuning key conv.winograd), the pass, its plan in words and the programs to
 * prewarm. */
bool oclml__conv_forward_winograd_applies(oclml_ctx *ctx, const conv_shape *s);
oclml_status oclml__conv_forward_winograd(oclml_ctx *ctx, const conv_shape *s,
                                          const oclml_tensor *x, const oclml_tensor *w,
                                          const oclml_tensor *b, oclml_tensor *y);
bool oclml__conv_data_gradient_winograd_applies(oclml_ctx *ctx, const conv_shape *s);
bool oclml__conv_weight_gradient_winograd_applies(oclml_ctx *ctx, const conv_shape *s);
oclml_status oclml__conv_weight_gradient_winograd(oclml_ctx *ctx, const conv_shape *s,
                                                  const oclml_tensor *x, const oclml_tensor *dy,
                                                  oclml_tensor *dw, int accumulate);
oclml_status oclml__conv_data_gradient_winograd(oclml_ctx *ctx, const conv_shape *s,
                                                const oclml_tensor *w, const oclml_tensor *dy,
                                                oclml_tensor *dx, const oclml_tensor *b);
void oclml__conv_describe_winograd(const conv_shape *s, char *text, size_t len);
void oclml__conv_winograd_warm(const char *op, oclml__warm_list *list);

/* The direct data gradient into few channels (conv_direct_dx.c): whether it applies to s on this
 * context (the tuning key conv.direct_dx), the pass (with b: a transposed convolution's forward),
 * its plan in words and its program for shape s to prewarm. */
bool oclml__conv_data_gradient_direct_applies(oclml_ctx *ctx, const conv_shape *s);
oclml_status oclml__conv_data_gradient_direct(oclml_ctx *ctx, const conv_shape *s,
                                              const oclml_tensor *w, const oclml_tensor *dy,
                                              oclml_tensor *dx, const oclml_tensor *b);
void oclml__conv_describe_direct_dx(const conv_shape *s, char *text, size_t len);
void oclml__conv_direct_dx_warm(const conv_shape *s, const char *op, oclml__warm_list *list);

/* The direct weight gradient for few columns (conv_direct_dw.c): whether it applies to s on this
 * context (the tuning key conv.direct_dw), the pass, and its plan in words. */
bool oclml__conv_weight_gradient_direct_applies(oclml_ctx *ctx, const conv_shape *s);
oclml_status oclml__conv_weight_gradient_direct(oclml_ctx *ctx, const conv_shape *s,
                                                const oclml_tensor *x, const oclml_tensor *dy,
                                                oclml_tensor *dw, int accumulate);
void oclml__conv_describe_direct_dw(oclml_ctx *ctx, const conv_shape *s, char *text, size_t len);
void oclml__conv_direct_dw_warm(oclml_ctx *ctx, const conv_shape *s, const char *op,
                                oclml__warm_list *list);

#endif
