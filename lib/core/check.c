/* Argument validation shared by every op. Each check records a readable error naming the
 * argument, so that callers learn which input was wrong. */
#include "core/core.h"

#include <stdio.h>

oclml_status oclml__check_ctx(const oclml_ctx *ctx) {
    if (!ctx) return OCLML_ERR_NULL_POINTER;
    oclml__clear_error(ctx);
    return OCLML_SUCCESS;
}

oclml_status oclml__check_tensor_of(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                    unsigned dtypes) {
    if (!t) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "tensor argument '%s' is NULL", name);
    if (t->ctx != ctx)
        return oclml__fail(ctx, OCLML_ERR_CONTEXT_MISMATCH,
                           "tensor '%s' belongs to another context", name);
    if (!(dtypes >> t->dtype & 1u)) {
        char took[32] = "";
        for (int d = OCLML_FLOAT32, n = 0; d <= OCLML_FLOAT16; d++)
            if (dtypes >> d & 1u)
                n += snprintf(took + n, sizeof took - (size_t)n, "%s%s", n ? ", " : "",
                              oclml_dtype_name((oclml_dtype)d));
        return oclml__fail(ctx, OCLML_ERR_DTYPE, "tensor '%s' is %s; this op takes %s", name,
                           oclml_dtype_name(t->dtype), took);
    }
    return OCLML_SUCCESS;
}

oclml_status oclml__check_tensor(const oclml_ctx *ctx, const oclml_tensor *t, const char *name) {
    return oclml__check_tensor_of(ctx, t, name, 1u << OCLML_FLOAT32);
}

oclml_status oclml__check_matrix_view(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                      size_t *rows, size_t *cols) {
    oclml_status st = oclml__check_tensor(ctx, t, name);
    if (st) return st;
    *cols = t->shape[t->ndim - 1];
    *rows = t->numel / *cols;
    return OCLML_SUCCESS;
}

oclml_status oclml__check_same_shape(const oclml_ctx *ctx, const oclml_tensor *a, const char *an,
                                     const oclml_tensor *b, const char *bn) {
    return oclml__check_same_shape_of(ctx, a, an, b, bn, 1u << OCLML_FLOAT32);
}

oclml_status oclml__check_same_shape_of(const oclml_ctx *ctx, const oclml_tensor *a, const char *an,
                                        const oclml_tensor *b, const char *bn, unsigned dtypes) {
    oclml_status st = oclml__check_tensor_of(ctx, a, an, dtypes);
    if (!st) st = oclml__check_tensor_of(ctx, b, bn, dtypes);
    if (st) return st;
    bool same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    if (!same)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "tensors '%s' and '%s' must have the same shape", an, bn);
    return OCLML_SUCCESS;
}

oclml_status oclml__check_numel(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                size_t n) {
    oclml_status st = oclml__check_tensor(ctx, t, name);
    if (st) return st;
    if (t->numel != n)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "tensor '%s' has %zu elements, %zu expected", name, t->numel, n);
    return OCLML_SUCCESS;
}

oclml_status oclml__check_dims(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                               int nd, const size_t *want) {
    oclml_status st = oclml__check_tensor(ctx, t, name);
    if (st) return st;
    bool ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
    if (ok) return OCLML_SUCCESS;
    char dims[128] = "";
    for (int i = 0, n = 0; i < nd && n >= 0 && (size_t)n < sizeof dims; i++)
        n += snprintf(dims + n, sizeof dims - (size_t)n, i ? " x %zu" : "%zu", want[i]);
    return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "%s must be [%s]", name, dims);
}

oclml_status oclml__check_shape(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                int nd, size_t a, size_t b, size_t c) {
    const size_t want[3] = {a, b, c};
    return oclml__check_dims(ctx, t, name, nd, want);
}

oclml_status oclml__check_apart(const oclml_ctx *ctx, const oclml_tensor *out, const char *out_name,
                                const oclml_tensor *in, const char *in_name, bool in_place_ok) {
    if (!oclml__overlap(out, in)) return OCLML_SUCCESS;
    if (in_place_ok && out->mem == in->mem && out->offset_bytes == in->offset_bytes &&
        out->elem_bytes == in->elem_bytes)
        return OCLML_SUCCESS;
    return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "%s overlaps %s%s", out_name, in_name,
                       in_place_ok ? " other than in place" : "");
}

bool oclml__overlap(const oclml_tensor *a, const oclml_tensor *b) {
    if (!a || !b || a->mem != b->mem) return false;
    size_t a0 = a->offset_bytes, a1 = a0 + a->numel * a->elem_bytes;
    size_t b0 = b->offset_bytes, b1 = b0 + b->numel * b->elem_bytes;
    return a0 < b1 && b0 < a1;
}
