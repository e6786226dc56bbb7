/* The CLBlast path of the GEMM family: single and strided-batched SGEMM, and the process-wide
 * lock every call into CLBlast takes. */
#include "ops/gemm.h"

/* CLBlast's header declares CLBlastClearCache() without a prototype: not our warning to fix. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <clblast_c.h>
#pragma GCC diagnostic pop

/* CLBlast keeps process-wide caches of programs and tuning data, and concurrent calls into it
 * crash on NVIDIA's OpenCL (seen with four threads sharing a context; see also CLBlast issue
 * #486). Its calls only enqueue work once its kernels are compiled, so one process-wide lock
 * costs little and makes GEMM safe from any number of threads and contexts. Overriding its
 * parameters (tuned values) takes the same lock. */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;

void oclml__clblast_lock(void) { pthread_mutex_lock(&clblast_lock); }
void oclml__clblast_unlock(void) { pthread_mutex_unlock(&clblast_lock); }

static CLBlastTranspose cb_trans(bool t) { return t ? CLBlastTransposeYes : CLBlastTransposeNo; }

/* A single product's temporary buffer (the indirect kernel's padded or transposed operand
 * copies) comes from the context's scratch pool rather than from CLBlast, which creates and
 * releases one in every call. Column-major, operands swapped: see oclml__gemm_clblast. */
static CLBlastStatusCode single_product(oclml_ctx *ctx, const oclml__gemm_desc *d, cl_event *ev,
                                        oclml_status *st) {
    const CLBlastTranspose ta = cb_trans(d->trans_b), tb = cb_trans(d->trans_a);
    size_t bytes = 0;
    CLBlastStatusCode s = CLBlastSGemmTempBufferSize(
        CLBlastLayoutColMajor, ta, tb, d->n, d->m, d->k, d->b.offset, d->b.ld, d->a.offset, d->a.ld,
        d->c.offset, d->c.ld, &ctx->queue, &bytes);
    cl_mem temp = NULL;
    if (s == CLBlastSuccess && bytes > 0 && (*st = oclml__scratch_get(ctx, bytes, &temp)))
        return CLBlastSuccess;
    if (s == CLBlastSuccess)
        s = CLBlastSgemmWithTempBuffer(CLBlastLayoutColMajor, ta, tb, d->n, d->m, d->k, d->alpha,
                                       d->b.mem, d->b.offset, d->b.ld, d->a.mem, d->a.offset,
                                       d->a.ld, d->beta, d->c.mem, d->c.offset, d->c.ld,
                                       &ctx->queue, ev, temp);
    if (temp) oclml__scratch_put(ctx, temp); /* later users run after this call's kernels */
    return s;
}

/* The row-major product C = op(A) op(B) goes to CLBlast as the column-major one
 * C^T = op(B)^T op(A)^T on the same memory (operands swapped, each keeping its transpose flag).
 * CLBlast's indirect kernel (Xgemm, the large products) wants C column-major: asked row-major,
 * it copies C transposed into a temporary buffer and back around every call, besides the
 * operand copies either form needs. */
oclml_status oclml__gemm_clblast(oclml_ctx *ctx, const oclml__gemm_desc *d, cl_int *cb_status) {
    cl_event ev = NULL;
    CLBlastStatusCode s;
    oclml_status st = OCLML_SUCCESS;
    oclml__clblast_lock();
    oclml__profile_mark(ctx);
    if (d->batch == 1)
        s = single_product(ctx, d, &ev, &st);
    else
        s = CLBlastSgemmStridedBatched(CLBlastLayoutColMajor, cb_trans(d->trans_b),
                                       cb_trans(d->trans_a), d->n, d->m, d->k, d->alpha, d->b.mem,
                                       d->b.offset, d->b.ld, d->b.stride, d->a.mem, d->a.offset,
                                       d->a.ld, d->a.stride, d->beta, d->c.mem, d->c.offset,
                                       d->c.ld, d->c.stride, d->batch, &ctx->queue, &ev);
    oclml__clblast_unlock();
    oclml__event_done(ctx, ev);
    if (st) return st;
    if (cb_status) *cb_status = (cl_int)s;
    return s == CLBlastSuccess ? OCLML_SUCCESS : OCLML_ERR_CLBLAST;
}

oclml_status oclml__gemm_clblast_fail(oclml_ctx *ctx, const oclml__gemm_desc *d, cl_int cb_status) {
    char *text = oclml__asprintf("%s failed: CLBlast status %d",
                                 d->batch == 1 ? "CLBlastSgemm" : "CLBlastSgemmStridedBatched",
                                 (int)cb_status);
    return oclml__fail_text(ctx, OCLML_ERR_CLBLAST, (int)cb_status, text);
}
