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

/* The product as CLBlast is asked for it: the row-major C = op(A) op(B) itself, or the
 * column-major C^T = op(B)^T op(A)^T on the same memory (operands swapped, each keeping its
 * transpose flag). CLBlast's indirect kernel (Xgemm, the large products) with GEMMK 0 wants C
 * column-major: asked row-major, it copies C transposed into a temporary buffer and back around
 * every call, besides the operand copies either form needs; with GEMMK 1 it wants C row-major. */
typedef struct clblast_call {
    CLBlastLayout layout;
    CLBlastTranspose ta, tb;
    size_t m, n;
    const oclml__matrix *a, *b;
} clblast_call;

static clblast_call call_of(const oclml_ctx *ctx, const oclml__gemm_desc *d) {
    if (oclml__clblast_gemmk1(ctx->device))
        return (clblast_call){CLBlastLayoutRowMajor,
                              cb_trans(d->trans_a),
                              cb_trans(d->trans_b),
                              d->m,
                              d->n,
                              &d->a,
                              &d->b};
    return (clblast_call){CLBlastLayoutColMajor,
                          cb_trans(d->trans_b),
                          cb_trans(d->trans_a),
                          d->n,
                          d->m,
                          &d->b,
                          &d->a};
}

/* A single product's temporary buffer (the indirect kernel's padded or transposed operand
 * copies) comes from the context's scratch pool rather than from CLBlast, which creates and
 * releases one in every call; the pool keeps it for the next product. *st receives the pool's
 * failure, if any. */
static CLBlastStatusCode single_product(oclml_ctx *ctx, const oclml__gemm_desc *d,
                                        const clblast_call *c, cl_event *ev, oclml_status *st) {
    size_t bytes = 0;
    CLBlastStatusCode s = CLBlastSGemmTempBufferSize(c->layout, c->ta, c->tb, c->m, c->n, d->k,
                                                     c->a->offset, c->a->ld, c->b->offset, c->b->ld,
                                                     d->c.offset, d->c.ld, &ctx->queue, &bytes);
    cl_mem temp = NULL;
    if (s == CLBlastSuccess && bytes > 0 && (*st = oclml__scratch_get(ctx, bytes, &temp)))
        return CLBlastSuccess;
    if (s == CLBlastSuccess)
        s = CLBlastSgemmWithTempBuffer(c->layout, c->ta, c->tb, c->m, c->n, d->k, d->alpha,
                                       c->a->mem, c->a->offset, c->a->ld, c->b->mem, c->b->offset,
                                       c->b->ld, d->beta, d->c.mem, d->c.offset, d->c.ld,
                                       &ctx->queue, ev, temp);
    if (temp) oclml__scratch_put(ctx, temp); /* later users run after this call's kernels */
    return s;
}

oclml_status oclml__gemm_clblast(oclml_ctx *ctx, const oclml__gemm_desc *d, cl_int *cb_status) {
    cl_event ev = NULL;
    CLBlastStatusCode s;
    oclml_status st = OCLML_SUCCESS;
    if (ctx->fail_launch_in && (st = oclml__injected_fault(ctx, "CLBlast product"))) return st;
    oclml__clblast_lock();
    oclml__profile_mark(ctx);
    const clblast_call c = call_of(ctx, d);
    if (d->batch == 1)
        s = single_product(ctx, d, &c, &ev, &st);
    else
        s = CLBlastSgemmStridedBatched(c.layout, c.ta, c.tb, c.m, c.n, d->k, d->alpha, c.a->mem,
                                       c.a->offset, c.a->ld, c.a->stride, c.b->mem, c.b->offset,
                                       c.b->ld, c.b->stride, d->beta, d->c.mem, d->c.offset,
                                       d->c.ld, d->c.stride, d->batch, &ctx->queue, &ev);
    oclml__clblast_unlock();
    oclml__event_done(ctx, ev);
    if (st) return st;
    if (cb_status) *cb_status = (cl_int)s;
    return s == CLBlastSuccess ? OCLML_SUCCESS : OCLML_ERR_CLBLAST;
}

oclml_status oclml__gemm_clblast_fail(oclml_ctx *ctx, const oclml__gemm_desc *d, cl_int cb_status) {
    char *text =
        oclml__asprintf("%s failed: CLBlast status %d",
                        d->batch == 1 ? "CLBlastSgemmWithTempBuffer" : "CLBlastSgemmStridedBatched",
                        (int)cb_status);
    return oclml__fail_text(ctx, OCLML_ERR_CLBLAST, (int)cb_status, text);
}
