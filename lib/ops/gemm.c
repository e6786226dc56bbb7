/* The public GEMM entry points: argument checks, then the planner (gemm_plan.c). */
#include "ops/gemm.h"
#include "ops/ops.h"

/* Rows and columns of op(X) for a 2-D view of the last two dimensions of t. */
static void op_dims(const oclml_tensor *t, oclml_transpose tr, size_t *rows, size_t *cols) {
    size_t r = t->shape[t->ndim - 2], c = t->shape[t->ndim - 1];
    *rows = tr ? c : r;
    *cols = tr ? r : c;
}

static bool trans_ok(oclml_transpose t) { return t == OCLML_NO_TRANS || t == OCLML_TRANS; }

/* Shared validation of plain and batched GEMM. max_dims bounds each operand's rank. */
static oclml_status check_gemm(oclml_ctx *ctx, oclml_transpose ta, oclml_transpose tb,
                               const oclml_tensor *a, const oclml_tensor *b, const oclml_tensor *c,
                               int max_dims, size_t *m, size_t *n, size_t *k) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor_of(ctx, a, "a", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_tensor_of(ctx, b, "b", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_tensor_of(ctx, c, "c", OCLML__DTYPES_ALL);
    if (st) return st;
    if (a->dtype != b->dtype)
        return oclml__fail(ctx, OCLML_ERR_DTYPE, "gemm operands a (%s) and b (%s) differ in dtype",
                           oclml_dtype_name(a->dtype), oclml_dtype_name(b->dtype));
    if (!trans_ok(ta) || !trans_ok(tb))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "transpose flags must be OCLML_NO_TRANS or OCLML_TRANS");
    const oclml_tensor *ops[3] = {a, b, c};
    const char *names = "abc";
    for (int i = 0; i < 3; i++)
        if (ops[i]->ndim < 2 || ops[i]->ndim > max_dims)
            return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                               "gemm operand %c has %d dimensions, 2%s expected", names[i],
                               ops[i]->ndim, max_dims > 2 ? " or 3" : "");
    size_t ka, kb, nc, mc;
    op_dims(a, ta, m, &ka);
    op_dims(b, tb, &kb, n);
    op_dims(c, OCLML_NO_TRANS, &mc, &nc);
    if (ka != kb || mc != *m || nc != *n)
        return oclml__fail(
            ctx, OCLML_ERR_INVALID_SHAPE,
            "gemm shapes do not chain: op(a) is %zux%zu, op(b) is %zux%zu, c is %zux%zu", *m, ka,
            kb, *n, mc, nc);
    if (oclml__overlap(c, a) || oclml__overlap(c, b))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "gemm output c overlaps an input");
    *k = ka;
    return OCLML_SUCCESS;
}

/* The operands' dtypes and matrices. */
static void set_operands(oclml__gemm_desc *d, const oclml_tensor *a, const oclml_tensor *b,
                         const oclml_tensor *c) {
    d->a = oclml__matrix_of(a);
    d->b = oclml__matrix_of(b);
    d->c = oclml__matrix_of(c);
    d->ab_dtype = a->dtype;
    d->c_dtype = c->dtype;
}

static oclml__gemm_desc desc_of(oclml_transpose ta, oclml_transpose tb, size_t m, size_t n,
                                size_t k, size_t batch, float alpha, float beta) {
    return (oclml__gemm_desc){.trans_a = ta == OCLML_TRANS,
                              .trans_b = tb == OCLML_TRANS,
                              .m = m,
                              .n = n,
                              .k = k,
                              .batch = batch,
                              .alpha = alpha,
                              .beta = beta,
                              .act = OCLML_ACT_NONE};
}

oclml_status oclml_gemm(oclml_ctx *ctx, oclml_transpose ta, oclml_transpose tb, float alpha,
                        const oclml_tensor *a, const oclml_tensor *b, float beta, oclml_tensor *c) {
    size_t m, n, k;
    oclml_status st = check_gemm(ctx, ta, tb, a, b, c, 2, &m, &n, &k);
    if (st) return st;
    oclml__gemm_desc d = desc_of(ta, tb, m, n, k, 1, alpha, beta);
    set_operands(&d, a, b, c);
    return oclml__gemm(ctx, &d);
}

oclml_status oclml_gemm_batched(oclml_ctx *ctx, oclml_transpose ta, oclml_transpose tb, float alpha,
                                const oclml_tensor *a, const oclml_tensor *b, float beta,
                                oclml_tensor *c) {
    size_t m, n, k;
    oclml_status st = check_gemm(ctx, ta, tb, a, b, c, 3, &m, &n, &k);
    if (st) return st;
    if (c->ndim != 3)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "batched gemm needs c of 3 dimensions [batch x m x n]");
    size_t batch = c->shape[0];
    if ((a->ndim == 3 && a->shape[0] != batch) || (b->ndim == 3 && b->shape[0] != batch))
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "batch sizes differ: a %zu, b %zu, c %zu",
                           a->ndim == 3 ? a->shape[0] : batch, b->ndim == 3 ? b->shape[0] : batch,
                           batch);
    /* A 2-D operand is shared by every batch entry: stride 0 (oclml__matrix_of). */
    oclml__gemm_desc d = desc_of(ta, tb, m, n, k, batch, alpha, beta);
    set_operands(&d, a, b, c);
    return oclml__gemm(ctx, &d);
}

oclml_status oclml_gemm_plan(oclml_ctx *ctx, oclml_transpose ta, oclml_transpose tb, size_t m,
                             size_t n, size_t k, size_t batch, char *text, size_t len) {
    return oclml_gemm_plan_dtype(ctx, ta, tb, m, n, k, batch, OCLML_FLOAT32, OCLML_FLOAT32, text,
                                 len);
}

oclml_status oclml_gemm_plan_dtype(oclml_ctx *ctx, oclml_transpose ta, oclml_transpose tb, size_t m,
                                   size_t n, size_t k, size_t batch, oclml_dtype ab, oclml_dtype c,
                                   char *text, size_t len) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!text || len == 0)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "text buffer is NULL or empty");
    if (!trans_ok(ta) || !trans_ok(tb))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "transpose flags must be OCLML_NO_TRANS or OCLML_TRANS");
    if (!m || !n || !k || !batch)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "m, n, k and batch must be >= 1");
    if (!oclml_dtype_size(ab) || !oclml_dtype_size(c))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "dtype %d or %d is no dtype", (int)ab,
                           (int)c);
    oclml__gemm_desc d = desc_of(ta, tb, m, n, k, batch, 1.0f, 0.0f);
    d.ab_dtype = ab;
    d.c_dtype = c;
    /* Dense operands at offset 0, as a tensor of that shape would be. */
    d.a = (oclml__matrix){NULL, 0, ta ? m : k, batch > 1 ? m * k : 0};
    d.b = (oclml__matrix){NULL, 0, tb ? k : n, batch > 1 ? k * n : 0};
    d.c = (oclml__matrix){NULL, 0, n, batch > 1 ? m * n : 0};
    oclml__gemm_describe(ctx, &d, text, len);
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_set_math_mode(oclml_ctx *ctx, oclml_math_mode mode) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (mode != OCLML_MATH_FP32 && mode != OCLML_MATH_TF32)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "math mode must be OCLML_MATH_FP32 or OCLML_MATH_TF32");
    ctx->math_mode = mode;
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_math_mode(oclml_ctx *ctx, oclml_math_mode *mode) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!mode) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "mode is NULL");
    *mode = (oclml_math_mode)ctx->math_mode;
    return OCLML_SUCCESS;
}
