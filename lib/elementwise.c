/* Elementwise ops: unary functions and their backward, binary ops with a tensor, a scalar or a
 * broadcast row (cl/elementwise.cl). */
#include "internal.h"

#include <stdio.h>

#define FILE_CL "elementwise.cl"

static const char *const UNARY_NAMES[] = {
    [OCLML_NEG] = "neg",       [OCLML_ABS] = "abs",         [OCLML_EXP] = "exp",
    [OCLML_LOG] = "log",       [OCLML_SQRT] = "sqrt",       [OCLML_RSQRT] = "rsqrt",
    [OCLML_RECIP] = "recip",   [OCLML_RELU] = "relu",       [OCLML_SIGMOID] = "sigmoid",
    [OCLML_TANH] = "tanh",     [OCLML_GELU_ERF] = "gelu_erf", [OCLML_GELU_TANH] = "gelu_tanh",
    [OCLML_SILU] = "silu",     [OCLML_POW] = "pow"};
static const char *const BINARY_NAMES[] = {[OCLML_ADD] = "add", [OCLML_SUB] = "sub",
                                           [OCLML_MUL] = "mul", [OCLML_DIV] = "div",
                                           [OCLML_MAX] = "max", [OCLML_MIN] = "min"};
#define N_UNARY (sizeof UNARY_NAMES / sizeof UNARY_NAMES[0])
#define N_BINARY (sizeof BINARY_NAMES / sizeof BINARY_NAMES[0])

static oclml_status kernel_for(oclml_ctx *ctx, const char *prefix, const char *name, cl_kernel *k) {
    char kname[64];
    snprintf(kname, sizeof kname, "%s%s", prefix, name);
    return oclml__get_kernel(ctx, FILE_CL, NULL, kname, k);
}

static oclml_status launch_n(oclml_ctx *ctx, cl_kernel k, const oclml__arg *args, unsigned nargs,
                             size_t n) {
    size_t global, local;
    oclml__grid_1d(ctx, (n + 3) / 4, &global, &local);
    return oclml__launch(ctx, k, args, nargs, 1, &global, &local);
}

static oclml_status unary(oclml_ctx *ctx, oclml_unary_op op, float p, const oclml_tensor *x,
                          const oclml_tensor *dy, oclml_tensor *out, bool backward) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if ((unsigned)op >= N_UNARY || !UNARY_NAMES[op])
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "unknown unary op %d", (int)op);
    st = oclml__check_same_shape(ctx, x, "x", out, backward ? "dx" : "y");
    if (!st && backward) st = oclml__check_same_shape(ctx, x, "x", dy, "dy");
    if (st) return st;
    cl_kernel k;
    st = kernel_for(ctx, backward ? "oclml_unary_bwd_" : "oclml_unary_", UNARY_NAMES[op], &k);
    if (st) return st;
    cl_ulong xo = oclml__elem_offset(x), oo = oclml__elem_offset(out), n = x->numel;
    if (!backward) {
        oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(out->mem), OCLML_ARG(oo),
                             OCLML_ARG(n), OCLML_ARG(p)};
        return launch_n(ctx, k, args, 6, x->numel);
    }
    cl_ulong go = oclml__elem_offset(dy);
    oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(dy->mem), OCLML_ARG(go),
                         OCLML_ARG(out->mem), OCLML_ARG(oo), OCLML_ARG(n), OCLML_ARG(p)};
    return launch_n(ctx, k, args, 8, x->numel);
}

oclml_status oclml_unary(oclml_ctx *ctx, oclml_unary_op op, const oclml_tensor *x, oclml_tensor *y) {
    if (op == OCLML_POW)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "OCLML_POW takes an exponent: use oclml_pow");
    return unary(ctx, op, 0.0f, x, NULL, y, false);
}

oclml_status oclml_unary_backward(oclml_ctx *ctx, oclml_unary_op op, const oclml_tensor *x,
                                  const oclml_tensor *dy, oclml_tensor *dx) {
    if (op == OCLML_POW)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "OCLML_POW takes an exponent: use oclml_pow_backward");
    return unary(ctx, op, 0.0f, x, dy, dx, true);
}

oclml_status oclml_pow(oclml_ctx *ctx, const oclml_tensor *x, float exponent, oclml_tensor *y) {
    return unary(ctx, OCLML_POW, exponent, x, NULL, y, false);
}

oclml_status oclml_pow_backward(oclml_ctx *ctx, const oclml_tensor *x, float exponent,
                                const oclml_tensor *dy, oclml_tensor *dx) {
    return unary(ctx, OCLML_POW, exponent, x, dy, dx, true);
}

static oclml_status check_binary_op(oclml_ctx *ctx, oclml_binary_op op) {
    if ((unsigned)op >= N_BINARY)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "unknown binary op %d", (int)op);
    return OCLML_SUCCESS;
}

oclml_status oclml_binary(oclml_ctx *ctx, oclml_binary_op op, const oclml_tensor *a,
                          const oclml_tensor *b, oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_binary_op(ctx, op);
    if (!st) st = oclml__check_same_shape(ctx, a, "a", y, "y");
    if (!st) st = oclml__check_tensor(ctx, b, "b");
    if (st) return st;
    size_t cols = a->shape[a->ndim - 1];
    bool same = b->numel == a->numel;
    for (int i = 0; same && i < a->ndim; i++) same = b->ndim == a->ndim && b->shape[i] == a->shape[i];
    bool row = !same && b->ndim == 1 && b->numel == cols;
    if (!same && !row)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "b must have a's shape or be a row vector of %zu elements (a's last dimension)", cols);
    if (row && cols > 0xFFFFFFFFu)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "broadcast rows longer than 2^32 - 1");
    /* A row of a multiple of 4 columns goes by float4 groups. */
    const char *prefix = same ? "oclml_binary_" : cols % 4 ? "oclml_binary_row_" : "oclml_binary_row4_";
    cl_kernel k;
    st = kernel_for(ctx, prefix, BINARY_NAMES[op], &k);
    if (st) return st;
    cl_ulong ao = oclml__elem_offset(a), bo = oclml__elem_offset(b), yo = oclml__elem_offset(y), n = a->numel;
    cl_uint ucols = (cl_uint)cols;
    oclml__arg args[] = {OCLML_ARG(a->mem), OCLML_ARG(ao), OCLML_ARG(b->mem), OCLML_ARG(bo),
                         OCLML_ARG(y->mem), OCLML_ARG(yo), OCLML_ARG(n), OCLML_ARG(ucols)};
    if (row && cols % 4) { /* scalar broadcast kernel: one element per work-item step */
        size_t global, local;
        oclml__grid_1d(ctx, a->numel, &global, &local);
        return oclml__launch(ctx, k, args, 8, 1, &global, &local);
    }
    return launch_n(ctx, k, args, row ? 8 : 7, a->numel);
}

oclml_status oclml_binary_scalar(oclml_ctx *ctx, oclml_binary_op op, const oclml_tensor *a, float s,
                                 oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_binary_op(ctx, op);
    if (!st) st = oclml__check_same_shape(ctx, a, "a", y, "y");
    if (st) return st;
    cl_kernel k;
    st = kernel_for(ctx, "oclml_binary_scalar_", BINARY_NAMES[op], &k);
    if (st) return st;
    cl_ulong ao = oclml__elem_offset(a), yo = oclml__elem_offset(y), n = a->numel;
    oclml__arg args[] = {OCLML_ARG(a->mem), OCLML_ARG(ao), OCLML_ARG(s), OCLML_ARG(y->mem),
                         OCLML_ARG(yo), OCLML_ARG(n)};
    return launch_n(ctx, k, args, 6, a->numel);
}
