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

/* x into host memory after the marker `after` (NULL: none could be enqueued; this rank then
 * joins the collectives only, to fail the call everywhere). */
static cl_int read_x(oclml_dp *dp, cl_mem xb, size_t xo, size_t bytes, void *into, cl_event after) {
    return after
               ? clEnqueueReadBuffer(dp->copy_queue, xb, CL_TRUE, xo, bytes, into, 1, &after, NULL)
               : CL_INVALID_EVENT;
}

static oclml_status gather_shared(oclml_dp *dp, cl_mem xb, size_t xo, cl_mem ab, size_t ao,
                                  size_t bytes, cl_event after) {
    cl_int err = read_x(dp, xb, xo, bytes, dp->segment[dp->rank], after);
    /* Every rank takes part in both barriers whatever happened here, so none is left waiting;
     * the outcome is agreed after. */
    if (!segments_barrier(dp)) return OCLML_ERR_PEER;
    for (int r = 0; r < dp->ranks && err == CL_SUCCESS; r++)
        err = r == dp->rank
                  ? clEnqueueCopyBuffer(dp->copy_queue, xb, ab, xo, ao + (size_t)r * bytes, bytes,
                                        0, NULL, NULL)
                  : clEnqueueWriteBuffer(dp->copy_queue, ab, CL_FALSE, ao + (size_t)r * bytes,
                                         bytes, dp->segment[r], 0, NULL, NULL);
    cl_int finished = clFinish(dp->copy_queue);
    if (err == CL_SUCCESS) err = finished;
    /* No rank writes its segment again (the next step) before all have read it. */
    if (!segments_barrier(dp)) return OCLML_ERR_PEER;
    /* The segment may be this rank's staging, which a failing step sends as it is: zeros, as
     * the arena's padding, rather than x. */
    memset(dp->segment[dp->rank], 0, bytes);
    return err == CL_SUCCESS ? OCLML_SUCCESS : OCLML_ERR_OPENCL;
}

/* host: ranks x bytes, allocated by the caller (every rank has one: agreed before). */
static oclml_status gather_messages(oclml_dp *dp, cl_mem xb, size_t xo, cl_mem ab, size_t ao,
                                    size_t bytes, cl_event after, char *host) {
    char *mine = host + (size_t)dp->rank * bytes;
    cl_int err = read_x(dp, xb, xo, bytes, mine, after);
    if (err != CL_SUCCESS) memset(mine, 0, bytes);
    /* Every rank runs the same collectives (a failure is agreed after). */
    bool ok = true;
    for (int r = 0; r < dp->ranks; r++)
        for (size_t at = 0; at < bytes; at += MPI_PIECE) {
            size_t piece = bytes - at < MPI_PIECE ? bytes - at : MPI_PIECE;
            ok &= MPI_Bcast(host + (size_t)r * bytes + at, (int)piece, MPI_BYTE, r, dp->comm) ==
                  MPI_SUCCESS;
        }
    if (!ok) return OCLML_ERR_PEER;
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(dp->copy_queue, ab, CL_TRUE, ao, bytes * (size_t)dp->ranks, host,
                                   0, NULL, NULL);
    return err == CL_SUCCESS ? OCLML_SUCCESS : OCLML_ERR_OPENCL;
}

/* Whether any rank failed (every rank calls it). */
static bool any_failed(oclml_dp *dp, bool mine) {
    int flag = mine, any = 1;
    if (MPI_Allreduce(&flag, &any, 1, MPI_INT, MPI_MAX, dp->comm) != MPI_SUCCESS) return true;
    return any != 0;
}

/* Whether every rank is ready with the same bytes of the same dtype (every rank calls it). */
static bool all_agree(oclml_dp *dp, bool ok, size_t bytes, oclml_dtype dtype) {
    long long mine[5] = {!ok, (long long)bytes, (long long)dtype, -(long long)bytes,
                         -(long long)dtype},
              most[5];
    if (MPI_Allreduce(mine, most, 5, MPI_LONG_LONG, MPI_MAX, dp->comm) != MPI_SUCCESS) return false;
    return !most[0] && most[1] == -most[3] && most[2] == -most[4];
}

static oclml_status check(oclml_dp *dp, const oclml_tensor *x, const oclml_tensor *all, cl_mem *xb,
                          size_t *xo, cl_mem *ab, size_t *ao, size_t *bytes, oclml_dtype *xt) {
    size_t all_bytes;
    oclml_dtype at;
    oclml_status st = tensor_bytes(x, xb, xo, bytes);
    if (!st) st = tensor_bytes(all, ab, ao, &all_bytes);
    if (!st) st = oclml_tensor_dtype(x, xt);
    if (!st) st = oclml_tensor_dtype(all, &at);
    if (st) return st;
    if (*xt != at) return OCLML_ERR_DTYPE;
    if (all_bytes != *bytes * (size_t)dp->ranks) return OCLML_ERR_INVALID_SHAPE;
    if (*xb == *ab && *xo < *ao + all_bytes && *ao < *xo + *bytes)
        return OCLML_ERR_INVALID_ARGUMENT;
    return OCLML_SUCCESS;
}

oclml_status oclml_dp_allgather(oclml_dp *dp, const oclml_tensor *x, oclml_tensor *all) {
    if (!dp) return OCLML_ERR_NULL_POINTER;
    /* Between steps only: a step that stalled is waited for (as the next step would), and a
     * call inside a step is refused before any collective (the progress thread may be inside
     * MPI on the same communicator). */
    pthread_mutex_lock(&dp->mu);
    oclml_status st = dp->broken ? OCLML_ERR_PEER : dp_settle(dp);
    if (!st && (dp->in_step || dp->marked)) st = OCLML_ERR_INVALID_ARGUMENT;
    pthread_mutex_unlock(&dp->mu);
    if (st) return st;
    cl_mem xb = NULL, ab = NULL;
    size_t xo = 0, ao = 0, bytes = 0;
    oclml_dtype dtype = OCLML_FLOAT32;
    st = x && all ? check(dp, x, all, &xb, &xo, &ab, &ao, &bytes, &dtype) : OCLML_ERR_NULL_POINTER;
    size_t capacity = dp->padded * (dp->cfg.wire_dtype == OCLML_BFLOAT16 ? 2 : 4);
    bool shared = dp->segment && bytes <= capacity;
    char *host = NULL;
    if (!st && dp->ranks > 1 && !shared && !(host = malloc(bytes * (size_t)dp->ranks + 1)))
        st = OCLML_ERR_OUT_OF_MEMORY;
    /* Bad arguments, or another size or dtype on another rank: every rank returns before
     * moving anything (this one its error, the others OCLML_ERR_PEER), none is left waiting. */
    if (dp->ranks > 1 && !all_agree(dp, st == OCLML_SUCCESS, bytes, dtype)) {
        free(host);
        return st ? st : OCLML_ERR_PEER;
    }
    /* x is written by the context's queue: the copies wait for what is enqueued there. */
    cl_event after = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(dp->ctx_queue, 0, NULL, &after);
    if (err == CL_SUCCESS) err = clFlush(dp->ctx_queue);
    if (err != CL_SUCCESS && after) clReleaseEvent(after), after = NULL;
    if (dp->ranks == 1) {
        st = !after ||
                     clEnqueueCopyBuffer(dp->copy_queue, xb, ab, xo, ao, bytes, 1, &after, NULL) ||
                     clFinish(dp->copy_queue)
                 ? OCLML_ERR_OPENCL
                 : OCLML_SUCCESS;
    } else {
        st = shared ? gather_shared(dp, xb, xo, ab, ao, bytes, after)
                    : gather_messages(dp, xb, xo, ab, ao, bytes, after, host);
    }
    if (after) clReleaseEvent(after);
    free(host);
    if (st == OCLML_ERR_PEER || dp->ranks == 1) return st;
    /* One outcome for all: a rank whose copies failed fails the call everywhere. */
    bool others = any_failed(dp, st != OCLML_SUCCESS);
    return st ? st : others ? OCLML_ERR_PEER : OCLML_SUCCESS;
}
