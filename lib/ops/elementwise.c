/* Elementwise ops: unary functions and their backward, binary ops with a tensor, a scalar or a
 * broadcast row (cl/ops/elementwise.cl), each tensor of any dtype (fp32 math, one rounding). */
#include "ops/ops.h"

#include <stdio.h>

#define FILE_CL "elementwise.cl"

/* The kernel file's names of the functions (U_NAME, D_NAME, B_NAME there). */
static const char *const UNARY_NAMES[] = {
    [OCLML_NEG] = "NEG",           [OCLML_ABS] = "ABS",
    [OCLML_EXP] = "EXP",           [OCLML_LOG] = "LOG",
    [OCLML_SQRT] = "SQRT",         [OCLML_RSQRT] = "RSQRT",
    [OCLML_RECIP] = "RECIP",       [OCLML_RELU] = "RELU",
    [OCLML_SIGMOID] = "SIGMOID",   [OCLML_TANH] = "TANH",
    [OCLML_GELU_ERF] = "GELU_ERF", [OCLML_GELU_TANH] = "GELU_TANH",
    [OCLML_SILU] = "SILU",         [OCLML_POW] = "POW"};
static const char *const BINARY_NAMES[] = {
    [OCLML_ADD] = "ADD", [OCLML_SUB] = "SUB", [OCLML_MUL] = "MUL",
    [OCLML_DIV] = "DIV", [OCLML_MAX] = "MAX", [OCLML_MIN] = "MIN"};
#define N_UNARY (sizeof UNARY_NAMES / sizeof UNARY_NAMES[0])
#define N_BINARY (sizeof BINARY_NAMES / sizeof BINARY_NAMES[0])

/* The program of one kernel shape (kernel) for one function: -DUNARY=RELU or -DBINARY=ADD, the
 * tensors' dtypes where any is not fp32 (X_DT: x or a, B_DT: b, G_DT: dy, Y_DT: y or dx; NULL
 * tensors: fp32) and OCLML_CHUNKS on CPUs. */
typedef struct ew_variant {
    char defines[144];
    oclml__program_spec spec;
} ew_variant;

static void variant(ew_variant *v, const oclml_ctx *ctx, const char *kernel, bool unary,
                    const char *fn, const oclml_tensor *x, const oclml_tensor *b,
                    const oclml_tensor *g, const oclml_tensor *y) {
    static const char *const names[4] = {"X", "B", "G", "Y"};
    const oclml_tensor *const ts[4] = {x, b, g, y};
    char dtypes[96];
    oclml__dtype_defines(dtypes, sizeof dtypes, 4, names, ts);
    snprintf(v->defines, sizeof v->defines, "-D%s=%s%s%s%s", unary ? "UNARY" : "BINARY", fn,
             oclml__cpu_layout(ctx) ? " -DOCLML_CHUNKS=1" : "", dtypes[0] ? " " : "", dtypes);
    v->spec = (oclml__program_spec){FILE_CL, v->defines, kernel, 0};
}

static oclml_status kernel_for(oclml_ctx *ctx, const char *kernel, bool unary, const char *fn,
                               const oclml_tensor *x, const oclml_tensor *b, const oclml_tensor *g,
                               const oclml_tensor *y, cl_kernel *k) {
    ew_variant v;
    variant(&v, ctx, kernel, unary, fn, x, b, g, y);
    return oclml__kernel(ctx, &v.spec, kernel, k);
}

/* Launches an elementwise kernel over n elements: float4 groups strided over the grid, or on
 * CPUs a contiguous chunk of at least 16 elements a work-item. */
static oclml_status launch_n(oclml_ctx *ctx, cl_kernel k, const oclml__arg *args, unsigned nargs,
                             size_t n) {
    size_t global, local;
    if (oclml__cpu_layout(ctx))
        oclml__chunk_grid(ctx, n, &global, &local);
    else
        oclml__grid_1d(ctx, (n + 3) / 4, &global, &local);
    return oclml__launch(ctx, k, args, nargs, 1, &global, &local, NULL);
}

static oclml_status unary(oclml_ctx *ctx, oclml_unary_op op, float p, const oclml_tensor *x,
                          const oclml_tensor *dy, oclml_tensor *out, bool backward) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if ((unsigned)op >= N_UNARY || !UNARY_NAMES[op])
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "unknown unary op %d", (int)op);
    st = oclml__check_same_shape_of(ctx, x, "x", out, backward ? "dx" : "y", OCLML__DTYPES_ALL);
    if (!st && backward) st = oclml__check_same_shape_of(ctx, x, "x", dy, "dy", OCLML__DTYPES_ALL);
    if (st) return st;
    cl_kernel k;
    st = kernel_for(ctx, backward ? "oclml_unary_bwd" : "oclml_unary", true, UNARY_NAMES[op], x,
                    NULL, backward ? dy : NULL, out, &k);
    if (st) return st;
    cl_ulong xo = oclml__elem_offset(x), oo = oclml__elem_offset(out), n = x->numel;
    if (!backward) {
        oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(out->mem),
                             OCLML_ARG(oo),     OCLML_ARG(n),  OCLML_ARG(p)};
        return launch_n(ctx, k, args, 6, x->numel);
    }
    cl_ulong go = oclml__elem_offset(dy);
    oclml__arg args[] = {OCLML_ARG(x->mem),   OCLML_ARG(xo), OCLML_ARG(dy->mem), OCLML_ARG(go),
                         OCLML_ARG(out->mem), OCLML_ARG(oo), OCLML_ARG(n),       OCLML_ARG(p)};
    return launch_n(ctx, k, args, 8, x->numel);
}

oclml_status oclml_unary(oclml_ctx *ctx, oclml_unary_op op, const oclml_tensor *x,
                         oclml_tensor *y) {
    if (op == OCLML_POW)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "OCLML_POW takes an exponent: use oclml_pow");
    return unary(ctx, op, 0.0f, x, NULL, y, false);
}

oclml_status oclml_unary_backward(oclml_ctx *ctx, oclml_unary_op op, const oclml_tensor *x,
                                  const oclml_tensor *dy, oclml_tensor *dx) {
    if (op == OCLML_POW)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "OCLML_POW takes an exponent: use oclml_pow_backward");
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
    if (!st) st = oclml__check_same_shape_of(ctx, a, "a", y, "y", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_tensor_of(ctx, b, "b", OCLML__DTYPES_ALL);
    if (st) return st;
    size_t cols = a->shape[a->ndim - 1];
    bool same = b->numel == a->numel;
    for (int i = 0; same && i < a->ndim; i++)
        same = b->ndim == a->ndim && b->shape[i] == a->shape[i];
    bool row = !same && b->ndim == 1 && b->numel == cols;
    if (!same && !row)
        return oclml__fail(
            ctx, OCLML_ERR_INVALID_SHAPE,
            "b must have a's shape or be a row vector of %zu elements (a's last dimension)", cols);
    if (row && cols > 0xFFFFFFFFu)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "broadcast rows longer than 2^32 - 1");
    /* A row of a multiple of 4 columns goes by float4 groups (on GPUs: CPUs take chunks). */
    const bool by_element = row && (cols % 4 || oclml__cpu_layout(ctx));
    const char *kernel = same         ? "oclml_binary"
                         : by_element ? "oclml_binary_row"
                                      : "oclml_binary_row4";
    cl_kernel k;
    st = kernel_for(ctx, kernel, false, BINARY_NAMES[op], a, b, NULL, y, &k);
    if (st) return st;
    cl_ulong ao = oclml__elem_offset(a), bo = oclml__elem_offset(b), yo = oclml__elem_offset(y),
             n = a->numel;
    cl_uint ucols = (cl_uint)cols;
    oclml__arg args[] = {OCLML_ARG(a->mem), OCLML_ARG(ao), OCLML_ARG(b->mem), OCLML_ARG(bo),
                         OCLML_ARG(y->mem), OCLML_ARG(yo), OCLML_ARG(n),      OCLML_ARG(ucols)};
    if (by_element && !oclml__cpu_layout(ctx)) { /* one element a work-item step */
        size_t global, local;
        oclml__grid_1d(ctx, a->numel, &global, &local);
        return oclml__launch(ctx, k, args, 8, 1, &global, &local, NULL);
    }
    return launch_n(ctx, k, args, row ? 8 : 7, a->numel);
}

oclml_status oclml_binary_scalar(oclml_ctx *ctx, oclml_binary_op op, const oclml_tensor *a, float s,
                                 oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_binary_op(ctx, op);
    if (!st) st = oclml__check_same_shape_of(ctx, a, "a", y, "y", OCLML__DTYPES_ALL);
    if (st) return st;
    cl_kernel k;
    st = kernel_for(ctx, "oclml_binary_scalar", false, BINARY_NAMES[op], a, NULL, NULL, y, &k);
    if (st) return st;
    cl_ulong ao = oclml__elem_offset(a), yo = oclml__elem_offset(y), n = a->numel;
    oclml__arg args[] = {OCLML_ARG(a->mem), OCLML_ARG(ao), OCLML_ARG(s),
                         OCLML_ARG(y->mem), OCLML_ARG(yo), OCLML_ARG(n)};
    return launch_n(ctx, k, args, 6, a->numel);
}

/* ---- the op list's planner: every function of the op, in its kernel shapes ---- */
void oclml__elementwise_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    bool backward = strstr(op, "backward") != NULL;
    ew_variant v;
    if (!strncmp(op, "unary", 5) || !strncmp(op, "pow", 3)) {
        bool pow = !strncmp(op, "pow", 3);
        for (size_t i = 0; i < N_UNARY; i++) {
            if ((i == OCLML_POW) != pow) continue;
            variant(&v, ctx, backward ? "oclml_unary_bwd" : "oclml_unary", true, UNARY_NAMES[i],
                    NULL, NULL, NULL, NULL);
            oclml__warm_add(list, op, UNARY_NAMES[i], v.spec);
        }
        return;
    }
    /* CPUs broadcast rows by element alone. */
    static const char *const shapes[] = {"oclml_binary", "oclml_binary_row", "oclml_binary_row4"};
    bool scalar = strstr(op, "scalar") != NULL;
    size_t n_shapes = scalar ? 1 : oclml__cpu_layout(ctx) ? 2 : 3;
    for (size_t i = 0; i < N_BINARY; i++)
        for (size_t s = 0; s < n_shapes; s++) {
            variant(&v, ctx, scalar ? "oclml_binary_scalar" : shapes[s], false, BINARY_NAMES[i],
                    NULL, NULL, NULL, NULL);
            oclml__warm_add(list, op, BINARY_NAMES[i], v.spec);
        }
}
