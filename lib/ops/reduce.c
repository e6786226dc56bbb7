/* Reductions: sum, max, mean, argmax along the last axis and over a whole tensor
 * (cl/ops/reduce.cl). */
#include "ops/ops.h"

#define FILE_CL "reduce.cl"
/* Argmax indices travel as floats: exact up to 2^24. */
#define MAX_EXACT_INDEX (1u << 24)

/* Work-items per row: enough that each folds about 16 elements, within the device's limit. */
static void row_launch_size(const oclml_ctx *ctx, size_t rows, size_t cols, cl_uint *g,
                            size_t *local, size_t *global) {
    size_t max_wg = ctx->caps.max_work_group_size, max_g = 1;
    while (max_g * 2 <= (max_wg < 1024 ? max_wg : 1024)) max_g *= 2;
    size_t gg = ctx->caps.is_gpu ? 32 : 1;
    if (gg > max_g) gg = max_g;
    while (gg < max_g && gg * 16 < cols) gg *= 2;
    size_t l = gg < 256 ? 256 : gg;
    if (l > max_wg) l = gg;
    size_t per_group = l / gg;
    *g = (cl_uint)gg;
    *local = l;
    *global = (rows + per_group - 1) / per_group * l;
}

static oclml_status reduce_rows(oclml_ctx *ctx, cl_uint op, cl_mem x, cl_ulong xo, cl_uint pairs,
                                float scale, size_t rows, size_t cols, cl_mem y, cl_ulong yo) {
    cl_kernel k;
    bool by_sum = op == OCLML_REDUCE_SUM || op == OCLML_REDUCE_MEAN;
    oclml_status st = oclml__simple_kernel(
        ctx, FILE_CL, by_sum ? "oclml_reduce_rows_sum" : "oclml_reduce_rows_select", &k);
    if (st) return st;
    cl_uint g, urows = (cl_uint)rows, ucols = (cl_uint)cols;
    size_t local, global;
    row_launch_size(ctx, rows, cols, &g, &local, &global);
    oclml__arg args[] = {OCLML_ARG(x),
                         OCLML_ARG(xo),
                         OCLML_ARG(y),
                         OCLML_ARG(yo),
                         OCLML_ARG(op),
                         OCLML_ARG(pairs),
                         OCLML_ARG(scale),
                         OCLML_ARG(urows),
                         OCLML_ARG(ucols),
                         OCLML_ARG(g),
                         OCLML_LOCAL(2 * local * sizeof(float))};
    return oclml__launch(ctx, k, args, 11, 1, &global, &local, NULL);
}

static oclml_status check_op(oclml_ctx *ctx, oclml_reduce_op op) {
    if ((unsigned)op > OCLML_REDUCE_ARGMAX)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "unknown reduction %d", (int)op);
    return OCLML_SUCCESS;
}

oclml_status oclml_reduce_rows(oclml_ctx *ctx, oclml_reduce_op op, const oclml_tensor *x,
                               oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_op(ctx, op);
    size_t rows = 0, cols = 0;
    if (!st) st = oclml__check_matrix_view(ctx, x, "x", &rows, &cols);
    if (!st) st = oclml__check_numel(ctx, y, "y", rows);
    if (st) return st;
    if (rows > 0xFFFFFFFFu || cols >= 0xFFFFFFFFu)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "rows and columns must be below 2^32");
    if (op == OCLML_REDUCE_ARGMAX && cols > MAX_EXACT_INDEX)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED,
                           "argmax indices above 2^24 are not exact in fp32");
    float scale = op == OCLML_REDUCE_MEAN ? (float)(1.0 / (double)cols) : 1.0f;
    return reduce_rows(ctx, (cl_uint)op, x->mem, oclml__elem_offset(x), 0, scale, rows, cols,
                       y->mem, oclml__elem_offset(y));
}

/* The whole-tensor first stage's program: sums or selections, in chunks on CPUs. */
static oclml__program_spec all_spec(const oclml_ctx *ctx, bool by_value) {
    return (oclml__program_spec){FILE_CL, oclml__cpu_layout(ctx) ? "-DOCLML_CHUNKS=1" : NULL,
                                 by_value ? "oclml_reduce_all_select" : "oclml_reduce_all_sum", 0};
}

oclml_status oclml_reduce_all(oclml_ctx *ctx, oclml_reduce_op op, const oclml_tensor *x,
                              oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_op(ctx, op);
    if (!st) st = oclml__check_tensor(ctx, x, "x");
    if (!st) st = oclml__check_numel(ctx, y, "y", 1);
    if (st) return st;
    if (op == OCLML_REDUCE_ARGMAX && x->numel > MAX_EXACT_INDEX)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED,
                           "argmax indices above 2^24 are not exact in fp32");
    cl_kernel k;
    bool by_value = op == OCLML_REDUCE_MAX || op == OCLML_REDUCE_ARGMAX;
    oclml__program_spec spec = all_spec(ctx, by_value);
    st = oclml__kernel(ctx, &spec, spec.kernels, &k);
    if (st) return st;
    /* A partial a work-group: float4 groups strided over the grid, or on CPUs a contiguous chunk
     * a work-item (one a work-group). */
    size_t global, local;
    if (oclml__cpu_layout(ctx))
        oclml__chunk_grid(ctx, x->numel, &global, &local);
    else
        oclml__grid_1d(ctx, (x->numel + 3) / 4, &global, &local);
    size_t groups = global / local;
    cl_mem part;
    st = oclml__scratch_get(ctx, groups * 2 * sizeof(float), &part);
    if (st) return st;
    cl_ulong xo = oclml__elem_offset(x), n = x->numel;
    cl_uint uop = (cl_uint)op;
    oclml__arg a1[] = {OCLML_ARG(x->mem), OCLML_ARG(xo),   OCLML_ARG(n),
                       OCLML_ARG(uop),    OCLML_ARG(part), OCLML_LOCAL(2 * local * sizeof(float))};
    st = oclml__launch(ctx, k, a1, 6, 1, &global, &local, NULL);
    if (!st) {
        /* Stage 2: the partials as one row (pairs for max/argmax); a mean is their sum over n. */
        float scale = op == OCLML_REDUCE_MEAN ? (float)(1.0 / (double)x->numel) : 1.0f;
        st = reduce_rows(ctx, (cl_uint)op, part, 0, by_value, scale, 1, groups, y->mem,
                         oclml__elem_offset(y));
    }
    oclml__scratch_put(ctx, part);
    return st;
}

void oclml__reduce_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    if (!strcmp(op, "reduce_rows")) {
        oclml__warm_add(list, op, "sum, mean",
                        (oclml__program_spec){FILE_CL, NULL, "oclml_reduce_rows_sum", 0});
        oclml__warm_add(list, op, "max, argmax",
                        (oclml__program_spec){FILE_CL, NULL, "oclml_reduce_rows_select", 0});
        return;
    }
    oclml__warm_add(list, op, "sum, mean", all_spec(ctx, false));
    oclml__warm_add(list, op, "max, argmax", all_spec(ctx, true));
}
