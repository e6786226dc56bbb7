/* GEMM through CLBlast: plain and strided-batched, row-major. */
#include "ops/ops.h"

/* CLBlast's header declares CLBlastClearCache() without a prototype: not our warning to fix. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <clblast_c.h>
#pragma GCC diagnostic pop

/* CLBlast keeps process-wide caches of programs and tuning data, and concurrent calls into it
 * crash on NVIDIA's OpenCL (seen with four threads sharing a context; see also CLBlast issue
 * #486). Its calls only enqueue work once its kernels are compiled, so one process-wide lock
 * costs little and makes GEMM safe from any number of threads and contexts. */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;

/* Rows and columns of op(X) for a 2-D view of the last two dimensions of t. */
static void op_dims(const oclml_tensor *t, oclml_transpose tr, size_t *rows, size_t *cols) {
    size_t r = t->shape[t->ndim - 2], c = t->shape[t->ndim - 1];
    *rows = tr ? c : r;
    *cols = tr ? r : c;
}

static oclml_status clblast_fail(oclml_ctx *ctx, CLBlastStatusCode code, const char *what) {
    char *text = oclml__asprintf("%s failed: CLBlast status %d", what, (int)code);
    return oclml__fail_text(ctx, OCLML_ERR_CLBLAST, (int)code, text);
}

/* Shared validation of plain and batched GEMM. min_dims/max_dims bound each operand's rank. */
static oclml_status check_gemm(oclml_ctx *ctx, oclml_transpose ta, oclml_transpose tb,
                               const oclml_tensor *a, const oclml_tensor *b, const oclml_tensor *c,
                               int max_dims, size_t *m, size_t *n, size_t *k) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor(ctx, a, "a");
    if (!st) st = oclml__check_tensor(ctx, b, "b");
    if (!st) st = oclml__check_tensor(ctx, c, "c");
    if (st) return st;
    if ((ta != OCLML_NO_TRANS && ta != OCLML_TRANS) || (tb != OCLML_NO_TRANS && tb != OCLML_TRANS))
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
    *k = ka;
    return OCLML_SUCCESS;
}

static CLBlastTranspose cb_trans(oclml_transpose t) {
    return t ? CLBlastTransposeYes : CLBlastTransposeNo;
}

oclml_status oclml_gemm(oclml_ctx *ctx, oclml_transpose ta, oclml_transpose tb, float alpha,
                        const oclml_tensor *a, const oclml_tensor *b, float beta, oclml_tensor *c) {
    size_t m, n, k;
    oclml_status st = check_gemm(ctx, ta, tb, a, b, c, 2, &m, &n, &k);
    if (st) return st;
    cl_event ev = NULL;
    pthread_mutex_lock(&clblast_lock);
    oclml__profile_mark(ctx);
    CLBlastStatusCode s =
        CLBlastSgemm(CLBlastLayoutRowMajor, cb_trans(ta), cb_trans(tb), m, n, k, alpha, a->mem,
                     oclml__elem_offset(a), a->shape[1], b->mem, oclml__elem_offset(b), b->shape[1],
                     beta, c->mem, oclml__elem_offset(c), c->shape[1], &ctx->queue, &ev);
    pthread_mutex_unlock(&clblast_lock);
    oclml__event_done(ctx, ev);
    return s == CLBlastSuccess ? OCLML_SUCCESS : clblast_fail(ctx, s, "CLBlastSgemm");
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
    /* A 2-D operand is shared by every batch entry: stride 0. */
    size_t sa = a->ndim == 3 ? a->shape[1] * a->shape[2] : 0;
    size_t sb = b->ndim == 3 ? b->shape[1] * b->shape[2] : 0;
    cl_event ev = NULL;
    pthread_mutex_lock(&clblast_lock);
    oclml__profile_mark(ctx);
    CLBlastStatusCode s = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, cb_trans(ta), cb_trans(tb), m, n, k, alpha, a->mem,
        oclml__elem_offset(a), a->shape[a->ndim - 1], sa, b->mem, oclml__elem_offset(b),
        b->shape[b->ndim - 1], sb, beta, c->mem, oclml__elem_offset(c), n, m * n, batch,
        &ctx->queue, &ev);
    pthread_mutex_unlock(&clblast_lock);
    oclml__event_done(ctx, ev);
    return s == CLBlastSuccess ? OCLML_SUCCESS : clblast_fail(ctx, s, "CLBlastSgemmStridedBatched");
}
