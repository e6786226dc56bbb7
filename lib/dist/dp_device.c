/* The owners' sums on their devices (oclml_dp_config.sum_on_device), where the node's shared
 * segments are registered with OpenCL (fp32 words). A host core sums a few GB/s; the copy
 * engines move tens of GB/s each way and the device adds at its memory's rate, so each owner
 * copies every rank's part of its shard in, adds them with liboclml's elementwise ops, and
 * copies the sums out to its segment, where the others read them as before.
 *
 * The ops run on a second liboclml context over the same OpenCL context, with a queue of its
 * own: the sums neither wait behind the backward's kernels nor hold them up. The order of the
 * sum is the host's (rank 0 first, then the 1 / ranks scale as one rounding), so the device and
 * the host give the same bits.
 *
 * With bf16 words (device_words) the device does the conversions too: each bucket is cast to
 * bf16 on the context's queue as the backward marks it ready and its words copied to the
 * segment; the owner casts every rank's words to fp32, sums, casts the average back to bf16 for
 * the others; the average's words come back and are cast into the gradients on the device.
 * The host path's rounding (round to nearest even, once each way) gives the same bits. */
#include <stdlib.h>

#include "dp.h"

/* Wraps n elements of buffer b from byte_offset as a 1-D tensor of dtype t on ctx. */
static oclml_status view(oclml_ctx *ctx, cl_mem b, size_t byte_offset, oclml_dtype t, size_t n,
                         oclml_tensor **out) {
    return oclml_tensor_wrap_dtype(ctx, t, b, byte_offset, 1, &n, out);
}

/* Wraps slot k (of the scratch's ranks + 1 slots of shard_capacity elements) as n elements. */
static oclml_status slot(const oclml_dp *dp, size_t k, size_t n, oclml_tensor **t) {
    return view(dp->sum_ctx, dp->sum_scratch, k * dp->shard_capacity * sizeof(float), OCLML_FLOAT32,
                n, t);
}

/* Copies the sums (the first bytes of buffer b) into this rank's segment at byte offset at and
 * waits for them: the others read them there after the next barrier. 0, or -1. */
static int sums_out(oclml_dp *dp, cl_mem b, size_t bytes, size_t at) {
    cl_event out;
    if (clEnqueueReadBuffer(dp->sum_queue, b, CL_FALSE, 0, bytes,
                            (char *)dp->segment[dp->rank] + at, 0, NULL, &out) != CL_SUCCESS)
        return -1;
    int rc = clFlush(dp->sum_queue) == CL_SUCCESS ? dp_wait_event(dp, out) : -1;
    clReleaseEvent(out);
    return rc;
}

/* y (slot 0) = (slot 1 + ... + slot ranks) * (1 / ranks), over n elements. */
static oclml_status add_slots(oclml_dp *dp, size_t n) {
    oclml_tensor *y = NULL, *x = NULL;
    oclml_status st = slot(dp, 0, n, &y);
    for (int r = 0; r < dp->ranks && !st; r++) {
        if (!(st = slot(dp, (size_t)r + 1, n, &x))) {
            st = r == 0 ? oclml_copy(dp->sum_ctx, x, y)
                        : oclml_binary(dp->sum_ctx, OCLML_ADD, y, x, y);
            oclml_tensor_destroy(x);
        }
    }
    if (!st) st = oclml_binary_scalar(dp->sum_ctx, OCLML_MUL, y, 1.0f / (float)dp->ranks, y);
    oclml_tensor_destroy(y);
    return st;
}

/* Copies stage elements [from, from + n) of bucket q from the arena's gradients (its runs) to
 * scratch element to, on the device. */
static cl_int copy_from_grads(oclml_dp *dp, const dp_bucket *q, size_t from, size_t n, size_t to) {
    cl_int err = CL_SUCCESS;
    for (size_t r = 0; r < q->n_runs && err == CL_SUCCESS; r++) {
        const dp_run *run = &q->runs[r];
        size_t lo = from > run->stage_offset ? from : run->stage_offset,
               hi = from + n < run->stage_offset + run->elements
                        ? from + n
                        : run->stage_offset + run->elements;
        if (lo >= hi) continue;
        err = clEnqueueCopyBuffer(
            dp->sum_queue, dp->grads, dp->sum_scratch,
            dp->grads_offset + (run->device_offset + lo - run->stage_offset) * sizeof(float),
            (to + lo - from) * sizeof(float), (hi - lo) * sizeof(float), 0, NULL, NULL);
    }
    return err;
}

int dp_device_sum(oclml_dp *dp, const dp_bucket *q, size_t from, size_t n) {
    if (!n) return 0; /* a bucket with fewer elements than ranks */
    cl_int err = CL_SUCCESS;
    /* Slot r + 1: rank r's values. This rank's own are on the device already (the bucket's
     * copy to the host, now complete, read them after the backward wrote them). */
    for (int r = 0; r < dp->ranks && err == CL_SUCCESS; r++) {
        size_t slot_at = ((size_t)r + 1) * dp->shard_capacity;
        err = r == dp->rank
                  ? copy_from_grads(dp, q, from, n, slot_at)
                  : clEnqueueWriteBuffer(dp->sum_queue, dp->sum_scratch, CL_FALSE,
                                         slot_at * sizeof(float), n * sizeof(float),
                                         (const float *)dp->segment[r] + from, 0, NULL, NULL);
    }
    if (err != CL_SUCCESS || add_slots(dp, n)) return -1;
    return sums_out(dp, dp->sum_scratch, n * sizeof(float), from * sizeof(float));
}

/* The sums stay in slot 0 until the next bucket's, which the in-order queue runs after this. */
cl_int dp_device_return(oclml_dp *dp, size_t at, size_t to, size_t n) {
    return clEnqueueCopyBuffer(dp->sum_queue, dp->sum_scratch, dp->grads, at * sizeof(float), to,
                               n * sizeof(float), 0, NULL, NULL);
}

/* y = x converted to y's dtype, on ctx (both views made and dropped here). */
static oclml_status cast_range(oclml_ctx *ctx, cl_mem xb, size_t xo, oclml_dtype xt, cl_mem yb,
                               size_t yo, oclml_dtype yt, size_t n) {
    oclml_tensor *x = NULL, *y = NULL;
    oclml_status st = view(ctx, xb, xo, xt, n, &x);
    if (!st) st = view(ctx, yb, yo, yt, n, &y);
    if (!st) st = oclml_cast(ctx, x, y);
    if (x) oclml_tensor_destroy(x);
    if (y) oclml_tensor_destroy(y);
    return st;
}

oclml_status dp_device_words_out(oclml_dp *dp, const dp_bucket *q) {
    oclml_status st = OCLML_SUCCESS;
    for (size_t r = 0; r < q->n_runs && !st; r++) {
        const dp_run *run = &q->runs[r];
        st = cast_range(dp->ctx, dp->grads, dp->grads_offset + run->device_offset * sizeof(float),
                        OCLML_FLOAT32, dp->words, run->stage_offset * 2, OCLML_BFLOAT16,
                        run->elements);
    }
    return st;
}

int dp_device_sum_words(oclml_dp *dp, size_t from, size_t n) {
    if (!n) return 0; /* a bucket with fewer elements than ranks */
    const size_t cap = dp->shard_capacity;
    cl_int err = CL_SUCCESS;
    /* Word slot r + 1: rank r's words (this rank's from the device staging), then as fp32. */
    for (int r = 0; r < dp->ranks && err == CL_SUCCESS; r++) {
        size_t slot_at = ((size_t)r + 1) * cap * 2;
        err = r == dp->rank
                  ? clEnqueueCopyBuffer(dp->sum_queue, dp->words, dp->sum_words, from * 2, slot_at,
                                        n * 2, 0, NULL, NULL)
                  : clEnqueueWriteBuffer(dp->sum_queue, dp->sum_words, CL_FALSE, slot_at, n * 2,
                                         (const uint16_t *)dp->segment[r] + from, 0, NULL, NULL);
    }
    oclml_status st = err == CL_SUCCESS ? OCLML_SUCCESS : OCLML_ERR_OPENCL;
    for (int r = 0; r < dp->ranks && !st; r++)
        st = cast_range(dp->sum_ctx, dp->sum_words, ((size_t)r + 1) * cap * 2, OCLML_BFLOAT16,
                        dp->sum_scratch, ((size_t)r + 1) * cap * sizeof(float), OCLML_FLOAT32, n);
    if (!st) st = add_slots(dp, n);
    if (!st)
        st = cast_range(dp->sum_ctx, dp->sum_scratch, 0, OCLML_FLOAT32, dp->sum_words, 0,
                        OCLML_BFLOAT16, n);
    return st ? -1 : sums_out(dp, dp->sum_words, n * 2, from * 2);
}

cl_int dp_device_words_back(oclml_dp *dp, const dp_bucket *q, const int *count, const int *displ) {
    cl_int err = CL_SUCCESS;
    /* Every owner's average words into the device staging (this rank's from the sums' slot). */
    for (int k = 0; k < dp->ranks && err == CL_SUCCESS; k++) {
        size_t from = q->stage_offset + (size_t)displ[k], n = (size_t)count[k];
        if (!n) continue;
        err = k == dp->rank
                  ? clEnqueueCopyBuffer(dp->sum_queue, dp->sum_words, dp->words, 0, from * 2, n * 2,
                                        0, NULL, NULL)
                  : clEnqueueWriteBuffer(dp->sum_queue, dp->words, CL_FALSE, from * 2, n * 2,
                                         (const uint16_t *)dp->segment[k] + from, 0, NULL, NULL);
    }
    /* Then into the gradients, run by run. */
    for (size_t r = 0; r < q->n_runs && err == CL_SUCCESS; r++) {
        const dp_run *run = &q->runs[r];
        if (cast_range(dp->sum_ctx, dp->words, run->stage_offset * 2, OCLML_BFLOAT16, dp->grads,
                       dp->grads_offset + run->device_offset * sizeof(float), OCLML_FLOAT32,
                       run->elements))
            err = CL_INVALID_OPERATION;
    }
    return err;
}

void dp_device_release(oclml_dp *dp) {
    if (dp->sum_queue) clFinish(dp->sum_queue);
    if (dp->sum_ctx) oclml_ctx_destroy(dp->sum_ctx);
    if (dp->sum_scratch) clReleaseMemObject(dp->sum_scratch);
    if (dp->sum_words) clReleaseMemObject(dp->sum_words);
    if (dp->words) clReleaseMemObject(dp->words);
    if (dp->sum_queue) clReleaseCommandQueue(dp->sum_queue);
    dp->sum_ctx = NULL, dp->sum_scratch = NULL, dp->sum_queue = NULL;
    dp->sum_words = dp->words = NULL;
    dp->device_words = false; /* bf16 words: the host converts (the segments stay) */
}

void dp_device_setup(oclml_dp *dp, cl_device_id device) {
    if (!(dp->zero_copy || dp->device_words) || !dp->cfg.sum_on_device) {
        dp->device_words = false;
        return;
    }
    cl_int err;
    dp->sum_queue = clCreateCommandQueue(dp->cl_ctx, device, 0, &err);
    if (err == CL_SUCCESS)
        dp->sum_scratch = clCreateBuffer(
            dp->cl_ctx, CL_MEM_READ_WRITE,
            ((size_t)dp->ranks + 1) * dp->shard_capacity * sizeof(float), NULL, &err);
    if (err == CL_SUCCESS && dp->device_words) {
        dp->words = clCreateBuffer(dp->cl_ctx, CL_MEM_READ_WRITE, dp->padded * 2, NULL, &err);
        if (err == CL_SUCCESS)
            dp->sum_words =
                clCreateBuffer(dp->cl_ctx, CL_MEM_READ_WRITE,
                               ((size_t)dp->ranks + 1) * dp->shard_capacity * 2, NULL, &err);
    }
    if (err == CL_SUCCESS &&
        oclml_ctx_wrap(&dp->sum_ctx, dp->cl_ctx, device, dp->sum_queue, NULL, NULL, 0))
        err = CL_INVALID_CONTEXT;
    /* The casts built now as well (the context's, which the backward's thread runs). */
    if (err == CL_SUCCESS && dp->device_words &&
        (cast_range(dp->ctx, dp->grads, dp->grads_offset, OCLML_FLOAT32, dp->words, 0,
                    OCLML_BFLOAT16, 1) ||
         cast_range(dp->sum_ctx, dp->words, 0, OCLML_BFLOAT16, dp->sum_scratch, 0, OCLML_FLOAT32,
                    1) ||
         oclml_ctx_finish(dp->ctx)))
        err = CL_INVALID_OPERATION;
    /* The kernels built now, not in the first step (and a device that cannot run them keeps
     * the host's sums, on this rank only: the bits are the same). */
    if (err == CL_SUCCESS && (add_slots(dp, 1) || oclml_ctx_finish(dp->sum_ctx)))
        err = CL_INVALID_OPERATION;
    if (err != CL_SUCCESS) dp_device_release(dp);
}
