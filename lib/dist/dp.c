/* liboclml-mpi's setup (oclml_mpi.h): a rank's device, the buckets, the pinned staging, the copy
 * queue and the progress thread; the parameters' broadcast; the last step's figures. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp.h"

#define DEFAULT_BUCKET_BYTES ((size_t)25 << 20)
#define DEFAULT_FIRST_BUCKET_BYTES ((size_t)1 << 20)
#define DEFAULT_TIMEOUT_S 300.0
/* MPI counts are ints: large transfers go in pieces of this many elements. */
#define MPI_PIECE ((size_t)1 << 30)

double dp_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

oclml_status oclml_dp_config_init(oclml_dp_config *c) {
    if (!c) return OCLML_ERR_NULL_POINTER;
    memset(c, 0, sizeof *c);
    c->struct_size = sizeof *c;
    c->comm = MPI_COMM_WORLD;
    c->bucket_bytes = DEFAULT_BUCKET_BYTES;
    c->first_bucket_bytes = DEFAULT_FIRST_BUCKET_BYTES;
    c->wire_dtype = OCLML_FLOAT32;
    c->timeout_s = DEFAULT_TIMEOUT_S;
    c->progress_thread = 1;
    c->shared_memory = 1;
    c->sum_on_device = 1;
    return OCLML_SUCCESS;
}

static bool mpi_ready(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    return up && !down;
}

oclml_status oclml_dp_ctx_create(MPI_Comm comm, const oclml_ctx_config *options, oclml_ctx **ctx,
                                 char *err_text, size_t err_len) {
    if (!ctx) return OCLML_ERR_NULL_POINTER;
    *ctx = NULL;
    if (!mpi_ready()) return OCLML_ERR_INVALID_ARGUMENT;
    MPI_Comm node;
    int local = 0;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return OCLML_ERR_INVALID_ARGUMENT;
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    oclml_ctx_config o;
    if (options)
        o = *options;
    else
        oclml_ctx_config_init(&o);
    const char *sel = o.device; /* NULL: the core's default ($OCLML_DEVICE, else the GPUs) */
    unsigned count = 0;
    char pd[32];
    oclml_status st = oclml_device_match(sel, (unsigned)local, &count, pd, sizeof pd);
    if (st) {
        if (err_text && err_len)
            snprintf(err_text, err_len, "rank %d: no OpenCL device matches '%s'", local,
                     sel ? sel : "(default)");
        return st;
    }
    o.device = pd;
    return oclml_ctx_create(ctx, &o, err_text, err_len);
}

/* FNV-1a over what every rank must agree on. */
static uint64_t hash_words(uint64_t h, const size_t *w, size_t n) {
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) h = (h ^ ((uint64_t)w[i] >> (8 * b) & 0xff)) * 1099511628211ull;
    return h;
}

/* Checks the configuration and the arena on this rank; fills offsets (n + 1 of them). */
static oclml_status check_local(const oclml_dp_config *c, oclml_arena *arena, size_t *n_out,
                                size_t *padded_out, size_t **offsets_out, size_t **order_out) {
    size_t n, padded;
    oclml_status st = oclml_arena_info(arena, &n, NULL, &padded);
    if (st) return st;
    if (!n || c->struct_size != sizeof *c || !c->bucket_bytes || !c->first_bucket_bytes ||
        c->timeout_s <= 0 || (c->wire_dtype != OCLML_FLOAT32 && c->wire_dtype != OCLML_BFLOAT16))
        return OCLML_ERR_INVALID_CONFIG;
    size_t *off = malloc((n + 1) * sizeof *off), *order = malloc(n * sizeof *order);
    bool *seen = calloc(n, 1);
    if (!off || !order || !seen) st = OCLML_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n && !st; i++) {
        st = oclml_arena_offset(arena, i, &off[i]);
        order[i] = c->order ? c->order[i] : n - 1 - i;
        if (!st && (order[i] >= n || seen[order[i]])) st = OCLML_ERR_INVALID_CONFIG;
        if (!st) seen[order[i]] = true;
    }
    free(seen);
    if (st) {
        free(off);
        free(order);
        return st;
    }
    off[n] = padded;
    *n_out = n, *padded_out = padded, *offsets_out = off, *order_out = order;
    return OCLML_SUCCESS;
}

/* Groups the gradients, in the backward's order, into buckets of at least first_bucket_bytes
 * (the first) and bucket_bytes (the others), at most the larger of the two: a tensor that would
 * pass it goes on in the next buckets, so that a large tensor's buckets overlap (one's copies
 * with the next one's exchange) instead of ending the step with one long exchange. A bucket's
 * pieces that sit next to each other in the arena make one run (one copy each way). */
static oclml_status plan_buckets(oclml_dp *dp, const size_t *off, const size_t *order) {
    size_t n = dp->n_tensors, per = dp->cfg.bucket_bytes / sizeof(float),
           first = dp->cfg.first_bucket_bytes / sizeof(float);
    if (!per) per = 1;
    if (!first) first = 1;
    /* Where a tensor is cut: bucket_bytes, or the first bucket's size where that is larger (a
     * piece smaller than both would cost its bucket's fixed cost for little overlap). */
    const size_t cut = per > first ? per : first;
    size_t most = n + dp->padded / (first < per ? first : per) + 1;
    dp->buckets = calloc(most, sizeof *dp->buckets);
    dp->bucket_of = malloc(n * sizeof *dp->bucket_of);
    dp->bucket_end = malloc(n * sizeof *dp->bucket_end);
    dp->ready = calloc(n, sizeof *dp->ready);
    dp->counts = malloc(4 * (size_t)dp->ranks * sizeof *dp->counts);
    dp->shard_of = malloc((size_t)dp->ranks * sizeof *dp->shard_of);
    if (!dp->buckets || !dp->bucket_of || !dp->bucket_end || !dp->ready || !dp->counts ||
        !dp->shard_of)
        return OCLML_ERR_OUT_OF_MEMORY;
    size_t staged = 0;
    dp_bucket *b = NULL;
    for (size_t k = 0; k < n; k++) {
        size_t t = order[k], at = off[t], left = off[t + 1] - off[t];
        dp->bucket_of[t] = SIZE_MAX;
        do {
            /* A bucket closes once it holds its size (the first one's, then bucket_bytes); a
             * tensor is cut only where a bucket would pass `cut`. */
            size_t cap = b == dp->buckets && first < per ? first : per;
            if (!b || b->elements >= cap) {
                b = &dp->buckets[dp->n_buckets++];
                b->stage_offset = staged;
                b->runs = calloc(n - k + 1, sizeof *b->runs);
                if (!b->runs) return OCLML_ERR_OUT_OF_MEMORY;
            }
            size_t take = left < cut - b->elements ? left : cut - b->elements;
            dp_run *last = b->n_runs ? &b->runs[b->n_runs - 1] : NULL;
            if (last && last->device_offset + last->elements == at)
                last->elements += take;
            else
                b->runs[b->n_runs++] = (dp_run){at, staged, take};
            b->elements += take;
            b->info.tensors++;
            staged += take, at += take, left -= take;
            size_t index = (size_t)(b - dp->buckets);
            if (dp->bucket_of[t] == SIZE_MAX) dp->bucket_of[t] = index;
            dp->bucket_end[t] = index + 1;
        } while (left);
    }
    for (size_t i = 0; i < dp->n_buckets; i++) {
        dp_bucket *q = &dp->buckets[i];
        size_t shard = (q->elements + (size_t)dp->ranks - 1) / (size_t)dp->ranks;
        if (shard > dp->shard_capacity) dp->shard_capacity = shard;
        if (q->elements > INT_MAX) return OCLML_ERR_INVALID_CONFIG; /* MPI counts are ints */
        q->waiting = q->info.tensors;
        q->info.elements = q->elements;
        dp->info.elements += q->elements;
    }
    dp->info.buckets = dp->n_buckets;
    return OCLML_SUCCESS;
}

/* The context's objects, the arena's buffers and a copy queue of our own. */
static oclml_status setup_queues(oclml_dp *dp) {
    cl_device_id device;
    oclml_tensor *flat;
    oclml_status st = oclml_ctx_cl_objects(dp->ctx, &dp->cl_ctx, &device, &dp->ctx_queue);
    if (!st) st = oclml_arena_flat(dp->arena, 1, &flat);
    if (!st) st = oclml_tensor_buffer(flat, &dp->grads, &dp->grads_offset);
    if (!st) st = oclml_arena_flat(dp->arena, 0, &flat);
    if (!st) st = oclml_tensor_buffer(flat, &dp->params, &dp->params_offset);
    if (st) return st;
    oclml_device_info info;
    dp->poll = !oclml_ctx_device_info(dp->ctx, &info) && info.is_gpu;
    cl_int err;
    dp->device = device;
    dp->copy_queue = clCreateCommandQueue(dp->cl_ctx, device, 0, &err);
    return err == CL_SUCCESS ? OCLML_SUCCESS : OCLML_ERR_OPENCL;
}

/* Host memory for the gradients: this rank's shared segment where it can serve (zero_copy),
 * else pinned memory of our own; bf16 words and the shards of the message path beside it. */
static oclml_status setup_staging(oclml_dp *dp) {
    size_t bytes = dp->padded * sizeof(float);
    cl_int err;
    if (dp->zero_copy) {
        dp->stage = dp->segment[dp->rank];
    } else {
        dp->stage_mem = clCreateBuffer(dp->cl_ctx, CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
        if (err != CL_SUCCESS) return OCLML_ERR_OPENCL;
        dp->stage = clEnqueueMapBuffer(dp->copy_queue, dp->stage_mem, CL_TRUE,
                                       CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &err);
        if (err != CL_SUCCESS) return OCLML_ERR_OPENCL;
        /* Zero, as the arena's padding: a failing rank's buckets send what the staging holds,
         * and the padding must never receive anything else. */
        memset(dp->stage, 0, bytes);
    }
    size_t word = dp->cfg.wire_dtype == OCLML_BFLOAT16 ? 2 : 4;
    if (word == 2 && !(dp->wire16 = malloc(dp->padded * 2))) return OCLML_ERR_OUT_OF_MEMORY;
    dp->shards = malloc(dp->shard_capacity * (size_t)dp->ranks * word);
    return dp->shards ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
}

/* When every rank is on this node: a shared segment per rank for the wire words of every
 * gradient, mapped by all. Any failure leaves the exchange to messages, on every rank alike. */
static void setup_shared(oclml_dp *dp) {
    MPI_Comm node;
    int node_ranks = 0, ok = 0, all = 0;
    dp->win = MPI_WIN_NULL;
    if (MPI_Comm_split_type(dp->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return;
    MPI_Comm_size(node, &node_ranks);
    size_t word = dp->cfg.wire_dtype == OCLML_BFLOAT16 ? 2 : 4;
    if (node_ranks == dp->ranks && dp->ranks > 1 && dp->padded * word <= (size_t)PTRDIFF_MAX) {
        MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "alloc_shared_noncontig", "true"); /* each segment near its rank */
        void *base;
        ok = MPI_Win_allocate_shared((MPI_Aint)(dp->padded * word), (int)word, info, node, &base,
                                     &dp->win) == MPI_SUCCESS;
        MPI_Info_free(&info);
    }
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, dp->comm);
    dp->segment = all ? calloc((size_t)dp->ranks, sizeof *dp->segment) : NULL;
    for (int r = 0; dp->segment && r < dp->ranks; r++) {
        MPI_Aint size;
        int unit;
        MPI_Win_shared_query(dp->win, r, &size, &unit, &dp->segment[r]);
    }
    if (dp->segment && MPI_Win_lock_all(MPI_MODE_NOCHECK, dp->win) == MPI_SUCCESS) {
        memset(dp->segment[dp->rank], 0, dp->padded * word); /* the padding's zeros */
    } else {
        free(dp->segment);
        dp->segment = NULL;
    }
    if (!dp->segment && dp->win != MPI_WIN_NULL) MPI_Win_free(&dp->win);
    MPI_Comm_free(&node);
    /* Every segment registered with OpenCL here (pinned for the copy engines) for fp32 words,
     * and for bf16 words that the device converts; a refusal anywhere keeps the pinned staging
     * (the host's conversions), on this rank only (it changes no collective). */
    bool register_them = dp->segment && (word == 4 || dp->cfg.sum_on_device);
    dp->segment_mem = register_them ? calloc((size_t)dp->ranks, sizeof(cl_mem)) : NULL;
    bool ok_all = dp->segment_mem != NULL;
    for (int r = 0; ok_all && r < dp->ranks; r++) {
        cl_int err;
        dp->segment_mem[r] = clCreateBuffer(dp->cl_ctx, CL_MEM_USE_HOST_PTR, dp->padded * word,
                                            dp->segment[r], &err);
        ok_all = err == CL_SUCCESS;
    }
    dp->zero_copy = ok_all && word == 4;
    dp->device_words = ok_all && word == 2; /* confirmed by dp_device_setup */
}

oclml_status oclml_dp_create(oclml_ctx *ctx, oclml_arena *arena, const oclml_dp_config *config,
                             oclml_dp **out) {
    if (!ctx || !arena || !out) return OCLML_ERR_NULL_POINTER;
    *out = NULL;
    if (!mpi_ready()) return OCLML_ERR_INVALID_ARGUMENT;
    oclml_dp_config c;
    if (config)
        c = *config;
    else
        oclml_dp_config_init(&c);
    size_t n = 0, padded = 0, *off = NULL, *order = NULL;
    oclml_status st = check_local(&c, arena, &n, &padded, &off, &order);
    /* Every rank learns whether all agree (a rank that failed contributes a value no other
     * can), so that none is left waiting in a collective. */
    uint64_t mine[2] = {0, 0}, most[2];
    if (!st) {
        size_t head[5] = {n, padded, c.bucket_bytes, (size_t)c.wire_dtype, c.first_bucket_bytes};
        mine[0] =
            hash_words(hash_words(hash_words(14695981039346656037ull, head, 5), off, n), order, n);
        mine[1] = ~mine[0];
    } else {
        mine[0] = mine[1] = UINT64_MAX;
    }
    if (MPI_Allreduce(mine, most, 2, MPI_UINT64_T, MPI_MAX, c.comm) != MPI_SUCCESS)
        st = st ? st : OCLML_ERR_INVALID_ARGUMENT;
    else if (!st && (most[0] != mine[0] || most[1] != mine[1]))
        st = OCLML_ERR_INVALID_CONFIG;
    oclml_dp *dp = st ? NULL : calloc(1, sizeof *dp);
    if (!st && !dp) st = OCLML_ERR_OUT_OF_MEMORY;
    if (st) {
        free(off);
        free(order);
        return st;
    }
    dp->ctx = ctx, dp->arena = arena, dp->cfg = c, dp->n_tensors = n, dp->padded = padded;
    dp->cfg.order = NULL; /* the caller's array is not kept */
    pthread_mutex_init(&dp->mu, NULL);
    pthread_cond_init(&dp->cv, NULL);
    dp->comm = MPI_COMM_NULL;
    if (MPI_Comm_dup(c.comm, &dp->comm) != MPI_SUCCESS) st = OCLML_ERR_INVALID_ARGUMENT;
    if (!st) {
        MPI_Comm_rank(dp->comm, &dp->rank);
        MPI_Comm_size(dp->comm, &dp->ranks);
        st = plan_buckets(dp, off, order);
    }
    free(off);
    free(order);
    if (!st) st = setup_queues(dp);
    if (!st && c.shared_memory) setup_shared(dp);
    if (!st) st = setup_staging(dp);
    if (!st) dp_device_setup(dp, dp->device);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    dp->threaded = c.progress_thread && level >= MPI_THREAD_SERIALIZED;
    if (!st && dp->threaded && pthread_create(&dp->thread, NULL, dp_progress_main, dp))
        dp->threaded = false; /* no thread: the exchange runs in sync */
    if (st) {
        oclml_dp_destroy(dp);
        return st;
    }
    *out = dp;
    return OCLML_SUCCESS;
}

oclml_status oclml_dp_destroy(oclml_dp *dp) {
    if (!dp) return OCLML_SUCCESS;
    pthread_mutex_lock(&dp->mu);
    dp->quit = true;
    pthread_cond_broadcast(&dp->cv);
    pthread_mutex_unlock(&dp->mu);
    if (dp->threaded) pthread_join(dp->thread, NULL);
    if (dp->copy_queue) clFinish(dp->copy_queue);
    if (dp->ctx_queue) clFinish(dp->ctx_queue);
    /* The stamps' callbacks point at dp: wait for them (a driver delivers them soon after the
     * events complete); if one never comes, dp is left allocated rather than freed under it. */
    for (int i = 0; i < 20000 && atomic_load(&dp->callbacks) > 0; i++) {
        const struct timespec pause = {0, 500000};
        nanosleep(&pause, NULL);
    }
    bool keep = atomic_load(&dp->callbacks) > 0;
    for (size_t i = 0; i < dp->n_buckets; i++) {
        dp_bucket *b = &dp->buckets[i];
        if (b->read_done) clReleaseEvent(b->read_done);
        if (b->written) clReleaseEvent(b->written);
        free(b->runs);
    }
    if (dp->backward_end) clReleaseEvent(dp->backward_end);
    if (dp->stage_mem)
        clEnqueueUnmapMemObject(dp->copy_queue, dp->stage_mem, dp->stage, 0, NULL, NULL);
    if (dp->copy_queue) clFinish(dp->copy_queue);
    if (dp->stage_mem) clReleaseMemObject(dp->stage_mem);
    if (dp->copy_queue) clReleaseCommandQueue(dp->copy_queue);
    dp_device_release(dp);
    /* The segments' registrations go before the segments. */
    for (int r = 0; dp->segment_mem && r < dp->ranks; r++)
        if (dp->segment_mem[r]) clReleaseMemObject(dp->segment_mem[r]);
    free(dp->segment_mem);
    /* Requests left in flight by a stalled exchange still name the communicator. */
    if (dp->segment && !dp->abandoned && mpi_ready()) {
        MPI_Win_unlock_all(dp->win);
        MPI_Win_free(&dp->win);
    }
    free(dp->segment);
    free(dp->shard_of);
    if (dp->comm != MPI_COMM_NULL && !dp->abandoned && mpi_ready()) MPI_Comm_free(&dp->comm);
    pthread_cond_destroy(&dp->cv);
    pthread_mutex_destroy(&dp->mu);
    if (!keep) free(dp->buckets);
    free(dp->bucket_of);
    free(dp->bucket_end);
    free(dp->ready);
    free(dp->counts);
    free(dp->wire16);
    free(dp->shards);
    if (!keep) free(dp);
    return OCLML_SUCCESS;
}

oclml_status oclml_dp_rank(const oclml_dp *dp, int *rank, int *ranks) {
    if (!dp) return OCLML_ERR_NULL_POINTER;
    if (rank) *rank = dp->rank;
    if (ranks) *ranks = dp->ranks;
    return OCLML_SUCCESS;
}

oclml_status oclml_dp_broadcast(oclml_dp *dp) {
    if (!dp) return OCLML_ERR_NULL_POINTER;
    if (dp->in_step || dp->broken) return OCLML_ERR_INVALID_ARGUMENT;
    oclml_status st = oclml_ctx_finish(dp->ctx);
    if (st) return st;
    size_t bytes = dp->padded * sizeof(float);
    if (clEnqueueReadBuffer(dp->copy_queue, dp->params, CL_TRUE, dp->params_offset, bytes,
                            dp->stage, 0, NULL, NULL) != CL_SUCCESS)
        return OCLML_ERR_OPENCL;
    for (size_t at = 0; at < dp->padded; at += MPI_PIECE) {
        size_t piece = dp->padded - at < MPI_PIECE ? dp->padded - at : MPI_PIECE;
        if (MPI_Bcast(dp->stage + at, (int)piece, MPI_FLOAT, 0, dp->comm) != MPI_SUCCESS) {
            dp->broken = true;
            return OCLML_ERR_PEER;
        }
    }
    if (clEnqueueWriteBuffer(dp->copy_queue, dp->params, CL_TRUE, dp->params_offset, bytes,
                             dp->stage, 0, NULL, NULL) != CL_SUCCESS)
        return OCLML_ERR_OPENCL;
    oclml_tensor *copy;
    if (oclml_arena_copy(dp->arena, 0, &copy) == OCLML_SUCCESS)
        st = oclml_arena_copy_sync(dp->arena);
    return st ? st : oclml_ctx_finish(dp->ctx);
}

oclml_status oclml_dp_step_info_get(const oclml_dp *dp, oclml_dp_step_info *info) {
    if (!dp || !info) return OCLML_ERR_NULL_POINTER;
    *info = dp->info;
    info->shared_memory = dp->zero_copy || dp->device_words ? 2 : dp->segment != NULL;
    info->sum_on_device = dp->sum_ctx != NULL;
    return OCLML_SUCCESS;
}

oclml_status oclml_dp_bucket_info_get(const oclml_dp *dp, size_t bucket,
                                      oclml_dp_bucket_info *info) {
    if (!dp || !info) return OCLML_ERR_NULL_POINTER;
    if (bucket >= dp->n_buckets) return OCLML_ERR_INVALID_ARGUMENT;
    *info = dp->buckets[bucket].info;
    return OCLML_SUCCESS;
}
