/* Training-history encoder (cl/ops/history.cl). */
#include "ops/ops.h"

#define FILE_CL "history.cl"

oclml_status oclml_history_encode(oclml_ctx *ctx, const oclml_tensor *series,
                                  const oclml_tensor *lengths, oclml_tensor *features) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor(ctx, series, "series");
    if (st) return st;
    if (series->ndim != 3 || series->shape[1] != 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "series must be [B x 2 x N] (loss, gradient norm)");
    size_t B = series->shape[0], N = series->shape[2];
    if (N > 0xFFFFFFFFu || B > 0x7FFFFFFFu)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "history too long");
    if (lengths) st = oclml__check_numel(ctx, lengths, "lengths", B);
    if (!st) st = oclml__check_tensor(ctx, features, "features");
    if (st) return st;
    if (features->ndim != 2 || features->shape[0] != B || features->shape[1] != 64)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "features must be [B x 64] with B = %zu",
                           B);
    cl_kernel k;
    st = oclml__simple_kernel(ctx, FILE_CL, "oclml_history_encode", &k);
    if (st) return st;
    size_t local = 1;
    while (local * 2 <= (ctx->caps.max_work_group_size < 256 ? ctx->caps.max_work_group_size : 256))
        local *= 2;
    if (!ctx->caps.is_gpu && local > 16) local = 16;
    size_t global = 2 * B * local;
    cl_ulong so = oclml__elem_offset(series), lo = oclml__opt_offset(lengths),
             oo = oclml__elem_offset(features);
    cl_mem lm = oclml__opt_mem(lengths);
    cl_uint has = lengths != NULL, uN = (cl_uint)N;
    oclml__arg args[] = {OCLML_ARG(series->mem),
                         OCLML_ARG(so),
                         OCLML_ARG(lm),
                         OCLML_ARG(lo),
                         OCLML_ARG(has),
                         OCLML_ARG(uN),
                         OCLML_ARG(features->mem),
                         OCLML_ARG(oo),
                         OCLML_LOCAL(local * sizeof(float))};
    return oclml__launch(ctx, k, args, 9, 1, &global, &local, NULL);
}

void oclml__history_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    oclml__warm_add(list, op, "encoder",
                    (oclml__program_spec){FILE_CL, NULL, "oclml_history_encode", 0});
    (void)ctx;
}
