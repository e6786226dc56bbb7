/* Memory ops: fill, copy and cast (cl/ops/memory.cl). */
#include "ops/ops.h"

#include <stdio.h>

oclml__program_spec oclml__memory_spec(const oclml_ctx *ctx, const char *kernel,
                                       const char *defines, char *text, size_t len) {
    return oclml__chunked_spec(ctx, (oclml__program_spec){"memory.cl", defines, kernel, 0}, text,
                               len);
}

/* Launches one of memory.cl's kernels over n elements: float4 groups (vec4) or elements strided
 * over the grid, or on CPUs a contiguous chunk a work-item. */
static oclml_status run(oclml_ctx *ctx, const char *kernel, const char *defines, size_t n,
                        bool vec4, oclml__arg *args, unsigned nargs) {
    cl_kernel k;
    char text[96];
    oclml__program_spec spec = oclml__memory_spec(ctx, kernel, defines, text, sizeof text);
    oclml_status st = oclml__kernel(ctx, &spec, kernel, &k);
    if (st) return st;
    size_t global, local;
    if (oclml__cpu_layout(ctx))
        oclml__chunk_grid(ctx, n, &global, &local);
    else
        oclml__grid_1d(ctx, vec4 ? (n + 3) / 4 : n, &global, &local);
    return oclml__launch(ctx, k, args, nargs, 1, &global, &local, NULL);
}

oclml_status oclml_fill(oclml_ctx *ctx, oclml_tensor *dst, float value) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor_of(ctx, dst, "dst", OCLML__DTYPES_ALL);
    if (st) return st;
    cl_ulong off = oclml__elem_offset(dst), n = dst->numel;
    if (dst->dtype == OCLML_FLOAT32) {
        oclml__arg args[] = {OCLML_ARG(dst->mem), OCLML_ARG(off), OCLML_ARG(n), OCLML_ARG(value)};
        return run(ctx, "oclml_fill", NULL, dst->numel, true, args, 4);
    }
    cl_ushort bits;
    oclml__to_dtype(dst->dtype, &value, &bits, 1);
    oclml__arg args[] = {OCLML_ARG(dst->mem), OCLML_ARG(off), OCLML_ARG(n), OCLML_ARG(bits)};
    return run(ctx, "oclml_fill16", NULL, dst->numel, false, args, 4);
}

/* Checks src and dst of a copy or a cast: any dtypes, the same element count; *same_dtype
 * demanded for a copy. */
static oclml_status check_pair(oclml_ctx *ctx, const oclml_tensor *src, const oclml_tensor *dst,
                               bool same_dtype) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor_of(ctx, src, "src", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_tensor_of(ctx, dst, "dst", OCLML__DTYPES_ALL);
    if (st) return st;
    if (dst->numel != src->numel)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "tensor 'dst' has %zu elements, %zu expected", dst->numel, src->numel);
    if (same_dtype && dst->dtype != src->dtype)
        return oclml__fail(ctx, OCLML_ERR_DTYPE, "copy of %s into %s: oclml_cast converts",
                           oclml_dtype_name(src->dtype), oclml_dtype_name(dst->dtype));
    return OCLML_SUCCESS;
}

oclml_status oclml_copy(oclml_ctx *ctx, const oclml_tensor *src, oclml_tensor *dst) {
    oclml_status st = check_pair(ctx, src, dst, true);
    if (st) return st;
    cl_ulong soff = oclml__elem_offset(src), doff = oclml__elem_offset(dst), n = src->numel;
    oclml__arg args[] = {OCLML_ARG(src->mem), OCLML_ARG(soff), OCLML_ARG(dst->mem), OCLML_ARG(doff),
                         OCLML_ARG(n)};
    return run(ctx, src->dtype == OCLML_FLOAT32 ? "oclml_copy" : "oclml_copy16", NULL, n,
               src->dtype == OCLML_FLOAT32, args, 5);
}

oclml_status oclml__pad_rows16(oclml_ctx *ctx, cl_mem src, size_t src_off, size_t ld, size_t stride,
                               size_t batch, size_t rows, size_t cols, cl_mem dst, size_t dst_ld) {
    if (!batch || !rows || !dst_ld) return OCLML_SUCCESS; /* nothing to copy (an empty grid) */
    cl_kernel k;
    oclml__program_spec spec = {"memory.cl", NULL, "oclml_pad_rows16", 0};
    oclml_status st = oclml__kernel(ctx, &spec, "oclml_pad_rows16", &k);
    if (st) return st;
    cl_ulong soff = src_off, l = ld, sst = stride, r = rows, all = batch * rows, c = cols,
             pairs = dst_ld / 2;
    oclml__arg args[] = {OCLML_ARG(src), OCLML_ARG(soff), OCLML_ARG(l),
                         OCLML_ARG(sst), OCLML_ARG(r),    OCLML_ARG(dst),
                         OCLML_ARG(all), OCLML_ARG(c),    OCLML_ARG(pairs)};
    const size_t lx = ctx->caps.max_work_group_size >= 256 ? 256 : ctx->caps.max_work_group_size;
    const size_t gx = (pairs < 4096 ? (pairs + lx - 1) / lx : 4096 / lx) * lx,
                 gy = all < 65535 ? all : 65535;
    size_t global[2] = {gx, gy}, local[2] = {lx, 1};
    return oclml__launch(ctx, k, args, 9, 2, global, local, NULL);
}

static void cast_defines(oclml_dtype from, oclml_dtype to, char *text, size_t len) {
    snprintf(text, len, "-DSRC_DT=%d -DDST_DT=%d", (int)from, (int)to);
}

oclml_status oclml__cast_raw(oclml_ctx *ctx, oclml_dtype from, cl_mem src, size_t src_off,
                             oclml_dtype to, cl_mem dst, size_t dst_off, size_t n) {
    char defines[64];
    cast_defines(from, to, defines, sizeof defines);
    cl_ulong soff = src_off, doff = dst_off, count = n;
    oclml__arg args[] = {OCLML_ARG(src), OCLML_ARG(soff), OCLML_ARG(dst), OCLML_ARG(doff),
                         OCLML_ARG(count)};
    return run(ctx, "oclml_cast", defines, n, false, args, 5);
}

oclml_status oclml_cast(oclml_ctx *ctx, const oclml_tensor *src, oclml_tensor *dst) {
    oclml_status st = check_pair(ctx, src, dst, false);
    if (!st) st = oclml__check_apart(ctx, dst, "dst", src, "src", false);
    if (st) return st;
    return oclml__cast_raw(ctx, src->dtype, src->mem, oclml__elem_offset(src), dst->dtype, dst->mem,
                           oclml__elem_offset(dst), src->numel);
}

/* fill and copy: the fp32 kernel (the 16-bit one builds on first use, listed for checks of
 * every program); cast: the conversions a mixed-precision step runs (fp32 to and from bf16 and
 * fp16). */
void oclml__memory_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    static const char *const fill[] = {"oclml_fill", "oclml_fill16"}, *const copy[] = {
                                                                          "oclml_copy",
                                                                          "oclml_copy16"};
    if (strcmp(op, "cast")) {
        for (int i = 0; i < (list->every_shape ? 2 : 1); i++) {
            const char *kernel = !strcmp(op, "fill") ? fill[i] : copy[i];
            char text[96];
            oclml__warm_add(list, op, kernel,
                            oclml__memory_spec(ctx, kernel, NULL, text, sizeof text));
        }
        return;
    }
    char defines[4][64];
    for (int i = 0; i < 4; i++) {
        const oclml_dtype low = i % 2 ? OCLML_FLOAT16 : OCLML_BFLOAT16;
        cast_defines(i < 2 ? OCLML_FLOAT32 : low, i < 2 ? low : OCLML_FLOAT32, defines[i],
                     sizeof defines[i]);
        char text[96];
        oclml__warm_add(list, op, defines[i],
                        oclml__memory_spec(ctx, "oclml_cast", defines[i], text, sizeof text));
    }
}
