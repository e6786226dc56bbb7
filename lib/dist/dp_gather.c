/* oclml_dp_allgather: every rank's tensor, in rank order, on every rank, between steps. A
 * model sends what is cheaper to exchange than the gradient it makes: GPT-2's token
 * embedding gets from the lookup a gradient as large as the table (154 MB) at the very end of
 * the backward, from 25 MB of the stream's gradient and the ids, so it gathers those and makes
 * the lookup's part on every rank (examples/gpt_model.c).
 *
 * Between steps the node's shared segments are free (every copy back of the step ended before
 * its outcome), so there each rank copies its tensor into its segment and every rank copies the
 * others' out; by messages otherwise. */
#include <stdlib.h>
#include <string.h>

#include "dp.h"

#define MPI_PIECE ((size_t)1 << 30)

static oclml_status tensor_bytes(const oclml_tensor *t, cl_mem *buf, size_t *off, size_t *bytes) {
    oclml_dtype dtype;
    size_t n;
    oclml_status st = oclml_tensor_dtype(t, &dtype);
    if (!st) st = oclml_tensor_numel(t, &n);
    if (!st) st = oclml_tensor_buffer(t, buf, off);
    if (!st) *bytes = n * oclml_dtype_size(dtype);
    return st;
}

/* Every rank's stores before it seen by every rank after it. */
static bool segments_barrier(oclml_dp *dp) {
    MPI_Win_sync(dp->win);
    bool ok = MPI_Barrier(dp->comm) == MPI_SUCCESS;
    MPI_Win_sync(dp->win);
    return ok;
}

static oclml_status gather_shared(oclml_dp *dp, cl_mem xb, size_t xo, cl_mem ab, size_t ao,
                                  size_t bytes, cl_event after, oclml_status st) {
    cl_int err = st ? CL_INVALID_EVENT
                    : clEnqueueReadBuffer(dp->copy_queue, xb, CL_TRUE, xo, bytes,
                                          dp->segment[dp->rank], 1, &after, NULL);
    /* Every rank takes part in both barriers whatever happened here, so none is left waiting;
     * the outcome is agreed after. */
    if (!segments_barrier(dp)) return OCLML_ERR_PEER;
    for (int r = 0; r < dp->ranks && err == CL_SUCCESS; r++)
        err = r == dp->rank
                  ? clEnqueueCopyBuffer(dp->copy_queue, xb, ab, xo, ao + (size_t)r * bytes, bytes,
                                        0, NULL, NULL)
                  : clEnqueueWriteBuffer(dp->copy_queue, ab, CL_FALSE, ao + (size_t)r * bytes,
                                         bytes, dp->segment[r], 0, NULL, NULL);
    if (err == CL_SUCCESS) err = clFinish(dp->copy_queue);
    /* No rank writes its segment again (the next step) before all have read it. */
    if (!segments_barrier(dp)) return OCLML_ERR_PEER;
    return err == CL_SUCCESS ? OCLML_SUCCESS : OCLML_ERR_OPENCL;
}

static oclml_status gather_messages(oclml_dp *dp, cl_mem xb, size_t xo, cl_mem ab, size_t ao,
                                    size_t bytes, cl_event after, oclml_status st) {
    char *host = malloc(bytes * (size_t)dp->ranks + 1);
    char *mine = host ? host + (size_t)dp->rank * bytes : NULL;
    cl_int err =
        !host ? CL_OUT_OF_HOST_MEMORY
        : st  ? CL_INVALID_EVENT
              : clEnqueueReadBuffer(dp->copy_queue, xb, CL_TRUE, xo, bytes, mine, 1, &after, NULL);
    if (err != CL_SUCCESS && host) memset(mine, 0, bytes);
    /* Every rank runs the same collectives (a failure is agreed after). */
    bool ok = true;
    for (int r = 0; r < dp->ranks; r++)
        for (size_t at = 0; at < bytes; at += MPI_PIECE) {
            size_t piece = bytes - at < MPI_PIECE ? bytes - at : MPI_PIECE;
            char scratch;
            void *from = host ? host + (size_t)r * bytes + at : &scratch;
            ok &= MPI_Bcast(from, host ? (int)piece : 0, MPI_BYTE, r, dp->comm) == MPI_SUCCESS;
        }
    if (!ok) {
        free(host);
        return OCLML_ERR_PEER;
    }
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(dp->copy_queue, ab, CL_TRUE, ao, bytes * (size_t)dp->ranks, host,
                                   0, NULL, NULL);
    free(host);
    return err == CL_SUCCESS ? OCLML_SUCCESS : OCLML_ERR_OPENCL;
}

/* Whether any rank failed (every rank calls it). */
static bool any_failed(oclml_dp *dp, bool mine) {
    int flag = mine, any = 1;
    if (MPI_Allreduce(&flag, &any, 1, MPI_INT, MPI_MAX, dp->comm) != MPI_SUCCESS) return true;
    return any != 0;
}

static oclml_status check(oclml_dp *dp, const oclml_tensor *x, const oclml_tensor *all, cl_mem *xb,
                          size_t *xo, cl_mem *ab, size_t *ao, size_t *bytes) {
    size_t all_bytes;
    oclml_dtype xt, at;
    oclml_status st = tensor_bytes(x, xb, xo, bytes);
    if (!st) st = tensor_bytes(all, ab, ao, &all_bytes);
    if (!st) st = oclml_tensor_dtype(x, &xt);
    if (!st) st = oclml_tensor_dtype(all, &at);
    if (st) return st;
    if (xt != at) return OCLML_ERR_DTYPE;
    if (all_bytes != *bytes * (size_t)dp->ranks) return OCLML_ERR_INVALID_SHAPE;
    if (*xb == *ab && *xo < *ao + all_bytes && *ao < *xo + *bytes)
        return OCLML_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&dp->mu);
    bool busy = dp->in_step || dp->marked || dp->broken;
    pthread_mutex_unlock(&dp->mu);
    return busy ? OCLML_ERR_INVALID_ARGUMENT : OCLML_SUCCESS;
}

oclml_status oclml_dp_allgather(oclml_dp *dp, const oclml_tensor *x, oclml_tensor *all) {
    if (!dp) return OCLML_ERR_NULL_POINTER;
    cl_mem xb = NULL, ab = NULL;
    size_t xo = 0, ao = 0, bytes = 0;
    oclml_status st =
        x && all ? check(dp, x, all, &xb, &xo, &ab, &ao, &bytes) : OCLML_ERR_NULL_POINTER;
    /* Bad arguments on any rank: every rank returns before moving anything (this one its error,
     * the others OCLML_ERR_PEER), none is left waiting. */
    if (dp->ranks > 1 && any_failed(dp, st != OCLML_SUCCESS)) return st ? st : OCLML_ERR_PEER;
    if (st) return st;
    /* x is written by the context's queue: the copies wait for what is enqueued there. */
    cl_event after = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(dp->ctx_queue, 0, NULL, &after);
    size_t capacity = dp->padded * (dp->cfg.wire_dtype == OCLML_BFLOAT16 ? 2 : 4);
    if (err != CL_SUCCESS)
        st = OCLML_ERR_OPENCL;
    else if (dp->ranks == 1)
        st = clEnqueueCopyBuffer(dp->copy_queue, xb, ab, xo, ao, bytes, 1, &after, NULL) ||
                     clFinish(dp->copy_queue)
                 ? OCLML_ERR_OPENCL
                 : OCLML_SUCCESS;
    if (dp->ranks > 1) {
        /* A rank without its marker still joins the collectives (with nothing to wait for). */
        if (dp->segment && bytes <= capacity)
            st = gather_shared(dp, xb, xo, ab, ao, bytes, after, st);
        else
            st = gather_messages(dp, xb, xo, ab, ao, bytes, after, st);
    }
    if (after) clReleaseEvent(after);
    if (st == OCLML_ERR_PEER || dp->ranks == 1) return st;
    /* One outcome for all: a rank whose copies failed fails the call everywhere. */
    bool others = any_failed(dp, st != OCLML_SUCCESS);
    return st ? st : others ? OCLML_ERR_PEER : OCLML_SUCCESS;
}
