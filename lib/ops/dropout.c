/* Dropout, its backward and the residual add with dropout (cl/ops/dropout.cl): one kernel, the
 * mask regenerated from (seed, offset) wherever it is needed. Each tensor may be of any dtype
 * (fp32 math, the output rounded once, the mask fp32's). */
#include "ops/ops.h"
#include "ops/rows.h"

#include <math.h>
#include <stdio.h>

#define FILE_CL "dropout.cl"

static const oclml__program_spec DROPOUT = {FILE_CL, NULL, "oclml_dropout", 0};

oclml_status oclml_dropout_params_init(oclml_dropout_params *params) {
    if (!params) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "params is NULL");
    *params = (oclml_dropout_params){.struct_size = sizeof *params};
    return OCLML_SUCCESS;
}

/* ceil(n / 4) without n + 3, which wraps for n near SIZE_MAX. */
uint64_t oclml_dropout_counters(size_t n) { return (uint64_t)(n / 4) + (n % 4 != 0); }

oclml_status oclml__check_dropout(oclml_ctx *ctx, const oclml_dropout_params *d) {
    if (!d) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "dropout params are NULL");
    if (d->struct_size != sizeof *d)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "dropout params' struct_size is %zu, expected %zu (call "
                           "oclml_dropout_params_init first)",
                           d->struct_size, sizeof *d);
    if (!(d->p >= 0.0f && d->p <= 1.0f))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "dropout p must be in [0, 1], got %g",
                           (double)d->p);
    return OCLML_SUCCESS;
}

float oclml__dropout_scale(const oclml_dropout_params *d) {
    return d && d->p < 1.0f ? 1.0f / (1.0f - d->p) : 0.0f;
}

const oclml_dropout_params *oclml__dropout_active(const oclml_dropout_params *d) {
    return d && d->p > 0.0f ? d : NULL;
}

oclml__drop_args oclml__drop_args_of(const oclml_dropout_params *d) {
    oclml__drop_args a = {0.0f, 1.0f, 0, 0, 0};
    if (oclml__dropout_active(d))
        a = (oclml__drop_args){d->p, oclml__dropout_scale(d), (cl_uint)d->seed,
                               (cl_uint)(d->seed >> 32), d->offset};
    return a;
}

/* The program: the tensors' dtypes where any is not fp32 (NULL tensors: fp32) and on CPUs
 * OCLML_CHUNKS, written into text. */
static oclml__program_spec spec_of(const oclml_ctx *ctx, const oclml_tensor *in,
                                   const oclml_tensor *base, const oclml_tensor *out, char *text,
                                   size_t len) {
    char dt[64];
    const char *const names[] = {"IN", "BASE", "OUT"};
    const oclml_tensor *const ts[] = {in, base, out};
    oclml__dtype_defines(dt, sizeof dt, 3, names, ts);
    const bool chunks = oclml__cpu_layout(ctx);
    snprintf(text, len, "%s%s%s", dt, dt[0] && chunks ? " " : "", chunks ? "-DOCLML_CHUNKS=1" : "");
    oclml__program_spec spec = DROPOUT;
    if (text[0]) spec.defines = text;
    return spec;
}

/* out = base + dropout(in) (base NULL: none). */
static oclml_status run(oclml_ctx *ctx, const oclml_dropout_params *d, const oclml_tensor *in,
                        const oclml_tensor *base, oclml_tensor *out) {
    char text[96];
    oclml__program_spec spec = spec_of(ctx, in, base, out, text, sizeof text);
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &spec, "oclml_dropout", &k);
    if (st) return st;
    cl_ulong io = oclml__elem_offset(in), bo = oclml__opt_offset(base),
             oo = oclml__elem_offset(out), n = in->numel;
    cl_mem bm = oclml__opt_mem(base);
    const oclml__drop_args a = oclml__drop_args_of(d);
    cl_uint has_base = base != NULL;
    oclml__arg args[] = {OCLML_ARG(in->mem), OCLML_ARG(io),           OCLML_ARG(bm),
                         OCLML_ARG(bo),      OCLML_ARG(out->mem),     OCLML_ARG(oo),
                         OCLML_ARG(n),       OCLML__DROP_ARG_LIST(a), OCLML_ARG(has_base)};
    /* Groups of four strided over the grid, or on CPUs a chunk of whole groups a work-item. */
    size_t global, local;
    if (oclml__cpu_layout(ctx))
        oclml__chunk_grid(ctx, in->numel / 4, &global, &local);
    else
        oclml__grid_1d(ctx, (in->numel + 3) / 4, &global, &local);
    return oclml__launch(ctx, k, args, 13, 1, &global, &local, NULL);
}

oclml_status oclml_dropout(oclml_ctx *ctx, const oclml_dropout_params *params,
                           const oclml_tensor *x, oclml_tensor *y) {
    oclml_dropout_params defaults;
    params = OCLML__OR_DEFAULTS(params, &defaults, oclml_dropout_params_init);
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_dropout(ctx, params);
    if (!st) st = oclml__check_same_shape_of(ctx, x, "x", y, "y", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_apart(ctx, y, "y", x, "x", true);
    return st ? st : run(ctx, params, x, NULL, y);
}

oclml_status oclml_dropout_backward(oclml_ctx *ctx, const oclml_dropout_params *params,
                                    const oclml_tensor *dy, oclml_tensor *dx) {
    oclml_dropout_params defaults;
    params = OCLML__OR_DEFAULTS(params, &defaults, oclml_dropout_params_init);
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_dropout(ctx, params);
    if (!st) st = oclml__check_same_shape_of(ctx, dy, "dy", dx, "dx", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_apart(ctx, dx, "dx", dy, "dy", true);
    return st ? st : run(ctx, params, dy, NULL, dx);
}

oclml_status oclml_dropout_add(oclml_ctx *ctx, const oclml_dropout_params *params,
                               const oclml_tensor *x, const oclml_tensor *y, oclml_tensor *r) {
    oclml_dropout_params defaults;
    params = OCLML__OR_DEFAULTS(params, &defaults, oclml_dropout_params_init);
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_dropout(ctx, params);
    if (!st) st = oclml__check_same_shape_of(ctx, x, "x", y, "y", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_same_shape_of(ctx, x, "x", r, "r", OCLML__DTYPES_ALL);
    /* r may be x or y itself: each work-item reads and writes its own elements only. */
    if (!st) st = oclml__check_apart(ctx, r, "r", x, "x", true);
    if (!st) st = oclml__check_apart(ctx, r, "r", y, "y", true);
    return st ? st : run(ctx, params, y, x, r);
}

/* ---- the op list's planner: one program ---- */
void oclml__dropout_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    char text[96];
    oclml__warm_add(list, op, "dropout", spec_of(ctx, NULL, NULL, NULL, text, sizeof text));
}
