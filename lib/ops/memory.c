/* Memory ops: fill and copy (cl/ops/memory.cl). */
#include "ops/ops.h"

oclml_status oclml_fill(oclml_ctx *ctx, oclml_tensor *dst, float value) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor(ctx, dst, "dst");
    if (st) return st;
    cl_kernel k;
    st = oclml__simple_kernel(ctx, "memory.cl", "oclml_fill", &k);
    if (st) return st;
    cl_ulong off = oclml__elem_offset(dst), n = dst->numel;
    size_t global, local;
    oclml__grid_1d(ctx, (dst->numel + 3) / 4, &global, &local);
    oclml__arg args[] = {OCLML_ARG(dst->mem), OCLML_ARG(off), OCLML_ARG(n), OCLML_ARG(value)};
    return oclml__launch(ctx, k, args, 4, 1, &global, &local, NULL);
}

oclml_status oclml_copy(oclml_ctx *ctx, const oclml_tensor *src, oclml_tensor *dst) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor(ctx, src, "src");
    if (!st) st = oclml__check_numel(ctx, dst, "dst", src ? src->numel : 0);
    if (st) return st;
    cl_kernel k;
    st = oclml__simple_kernel(ctx, "memory.cl", "oclml_copy", &k);
    if (st) return st;
    cl_ulong soff = oclml__elem_offset(src), doff = oclml__elem_offset(dst), n = src->numel;
    size_t global, local;
    oclml__grid_1d(ctx, (src->numel + 3) / 4, &global, &local);
    oclml__arg args[] = {OCLML_ARG(src->mem), OCLML_ARG(soff), OCLML_ARG(dst->mem), OCLML_ARG(doff),
                         OCLML_ARG(n)};
    return oclml__launch(ctx, k, args, 5, 1, &global, &local, NULL);
}

void oclml__memory_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    const char *kernel = !strcmp(op, "fill") ? "oclml_fill" : "oclml_copy";
    oclml__warm_add(list, op, kernel, (oclml__program_spec){"memory.cl", NULL, kernel, 0});
    (void)ctx;
}
