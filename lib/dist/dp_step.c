/* A step's gradient exchange (oclml_mpi.h): buckets started by the caller's thread as the
 * backward marks them ready (a marker on the context's queue, copies to pinned memory on the
 * copy queue), exchanged in bucket order by the progress thread (all-to-all of shards, their sum
 * in rank order, all-gather), copied back, and the step's outcome agreed by every rank.
 *
 * Every rank runs every collective of a step in the same order whatever happens (a failing
 * rank sends what its staging holds and flags the step failed), so that no rank is left waiting
 * in a collective the others skipped; the outcome is an all-reduce of the ranks' flags at the
 * end. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp.h"

enum wait_result { WAIT_DONE, WAIT_QUIT, WAIT_ERROR };

typedef struct stamp_call {
    oclml_dp *dp;
    dp_stamp *stamp;
    unsigned generation;
} stamp_call;

/* Keeps the earliest time a completion was seen (by a callback or by polling). */
static void stamp_earliest(dp_stamp *s, double t) {
    double seen = atomic_load(&s->at);
    while ((seen <= 0 || t < seen) && !atomic_compare_exchange_weak(&s->at, &seen, t)) {}
}

static void CL_CALLBACK on_complete(cl_event event, cl_int status, void *user) {
    stamp_call *c = user;
    if (atomic_load(&c->dp->generation) == c->generation) stamp_earliest(c->stamp, dp_now());
    atomic_fetch_sub(&c->dp->callbacks, 1); /* the last touch of dp */
    free(c);
}

static void stamp_on_completion(oclml_dp *dp, cl_event event, dp_stamp *s) {
    atomic_store(&s->at, 0.0);
    stamp_call *c = malloc(sizeof *c);
    if (!c) return;
    *c = (stamp_call){dp, s, atomic_load(&dp->generation)};
    atomic_fetch_add(&dp->callbacks, 1);
    if (clSetEventCallback(event, CL_COMPLETE, on_complete, c) != CL_SUCCESS) {
        atomic_fetch_sub(&dp->callbacks, 1);
        free(c);
    }
}

/* The event's execution status; negative where its command or the query failed. */
static cl_int event_status(cl_event e) {
    cl_int status;
    return clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) ==
                   CL_SUCCESS
               ? status
               : -1;
}

/* Whether e has ended (complete, or failed); stamps s if it completed. For polling loops that
 * look at a marker beside what they wait for. */
static bool stamp_if_ended(cl_event e, dp_stamp *s) {
    cl_int status = event_status(e);
    if (status == CL_COMPLETE) stamp_earliest(s, dp_now());
    return status <= CL_COMPLETE;
}

int dp_wait_event(const oclml_dp *dp, cl_event e) {
    if (!dp->poll) return clWaitForEvents(1, &e) == CL_SUCCESS ? 0 : -1;
    for (cl_int status; (status = event_status(e)) != CL_COMPLETE; sched_yield())
        if (status < 0) return -1;
    return 0;
}

static void release(cl_event *e) {
    if (*e) clReleaseEvent(*e);
    *e = NULL;
}

/* Enqueues bucket b's copy to the staging after the kernels enqueued so far (mu held).
 * Without data (a failing rank), the bucket joins the exchange with whatever its staging holds. */
static void start_bucket(oclml_dp *dp, size_t b, bool with_data) {
    dp_bucket *q = &dp->buckets[b];
    q->started = true;
    q->has_data = false;
    dp->in_step = true;
    if (with_data) {
        /* bf16 words on the device: cast first, on the context's queue, before the marker. */
        cl_int err =
            dp->device_words && dp_device_words_out(dp, q) ? CL_INVALID_OPERATION : CL_SUCCESS;
        if (err == CL_SUCCESS) err = clEnqueueMarkerWithWaitList(dp->ctx_queue, 0, NULL, &q->ready);
        if (err == CL_SUCCESS) stamp_on_completion(dp, q->ready, &q->ready_at);
        if (err == CL_SUCCESS && dp->device_words)
            err = clEnqueueReadBuffer(
                dp->copy_queue, dp->words, CL_FALSE, q->stage_offset * 2, q->elements * 2,
                (uint16_t *)dp->segment[dp->rank] + q->stage_offset, 1, &q->ready, &q->read_done);
        for (size_t r = 0; r < q->n_runs && err == CL_SUCCESS && !dp->device_words; r++) {
            const dp_run *run = &q->runs[r];
            /* The copy queue is in order: the last copy's event stands for the bucket's. */
            err = clEnqueueReadBuffer(dp->copy_queue, dp->grads, CL_FALSE,
                                      dp->grads_offset + run->device_offset * sizeof(float),
                                      run->elements * sizeof(float), dp->stage + run->stage_offset,
                                      1, &q->ready, r + 1 == q->n_runs ? &q->read_done : NULL);
        }
        if (err == CL_SUCCESS) err = clFlush(dp->ctx_queue);
        if (err == CL_SUCCESS) err = clFlush(dp->copy_queue);
        q->has_data = err == CL_SUCCESS;
        if (err != CL_SUCCESS) dp->local_failed = 1;
    }
    pthread_cond_broadcast(&dp->cv);
}

/* Tests the request until it completes, without sleeping: a nonblocking collective moves only
 * when a rank enters MPI (a large message goes through shared memory a fragment per test), so a
 * pause between tests would cap the rate at a fragment per pause. The thread yields instead.
 * Past timeout_s the caller is told (stalled) and this rank's step counts as failed; the wait
 * goes on (the late ranks still need this rank), unless there is no progress thread to go on
 * with it or destroy asks to quit. */
static enum wait_result wait_request(oclml_dp *dp, MPI_Request *req) {
    const double start = dp_now();
    for (unsigned spin = 1;; spin++) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return WAIT_ERROR;
        if (done) return WAIT_DONE;
        sched_yield();
        if (spin % 256) continue; /* the clock and the lock now and then */
        pthread_mutex_lock(&dp->mu);
        if (!dp->stalled && dp_now() - start > dp->cfg.timeout_s) {
            dp->stalled = dp->skip_writes = true;
            dp->local_failed = 1;
            pthread_cond_broadcast(&dp->cv);
        }
        bool give_up = dp->quit || (dp->stalled && !dp->threaded);
        if (give_up) dp->abandoned = true;
        pthread_mutex_unlock(&dp->mu);
        if (give_up) return WAIT_QUIT;
    }
}

/* Waits for bucket q's copy to the host, stamping when its ready marker is seen complete (its
 * callback may come later). */
static int wait_copied(const oclml_dp *dp, dp_bucket *q) {
    if (!dp->poll) return dp_wait_event(dp, q->read_done);
    bool ready_seen = false;
    for (cl_int status; (status = event_status(q->read_done)) != CL_COMPLETE; sched_yield()) {
        if (status < 0) return -1;
        if (!ready_seen) ready_seen = stamp_if_ended(q->ready, &q->ready_at);
    }
    if (!ready_seen) stamp_if_ended(q->ready, &q->ready_at);
    return 0;
}

/* The bucket's shards: rank j owns elements [displ[j], displ[j] + count[j]) of it. */
static void split_shards(const oclml_dp *dp, size_t n, int *count, int *displ) {
    const int R = dp->ranks;
    for (int j = 0, at = 0; j < R; j++) {
        count[j] = (int)(n / (size_t)R + ((size_t)j < n % (size_t)R));
        displ[j] = at;
        at += count[j];
    }
}

/* Bucket b's exchange by messages: its shards to their owners, the owner's sum, the sums to
 * everyone. The stage (fp32) holds the average afterwards. */
static enum wait_result exchange_messages(oclml_dp *dp, dp_bucket *q) {
    const int R = dp->ranks, me = dp->rank;
    const bool bf16 = dp->cfg.wire_dtype == OCLML_BFLOAT16;
    const size_t n = q->elements, word = bf16 ? 2 : 4;
    MPI_Datatype type = bf16 ? MPI_UINT16_T : MPI_FLOAT;
    int *count = dp->counts, *displ = count + R, *rcount = displ + R, *rdispl = rcount + R;
    split_shards(dp, n, count, displ);
    for (int j = 0; j < R; j++) rcount[j] = count[me], rdispl[j] = j * count[me];
    float *stage = dp->stage + q->stage_offset;
    uint16_t *wire16 = bf16 ? dp->wire16 + q->stage_offset : NULL;
    void *words = bf16 ? (void *)wire16 : (void *)stage;
    if (bf16) dp_to_bf16(stage, n, wire16);
    MPI_Request req;
    if (MPI_Ialltoallv(words, count, displ, type, dp->shards, rcount, rdispl, type, dp->comm,
                       &req) != MPI_SUCCESS)
        return WAIT_ERROR;
    enum wait_result w = wait_request(dp, &req);
    if (w != WAIT_DONE) return w;
    for (int r = 0; r < R; r++) dp->shard_of[r] = (const char *)dp->shards + r * count[me] * word;
    dp_reduce(bf16, dp->shard_of, R, (size_t)count[me],
              bf16 ? (void *)(wire16 + displ[me]) : (void *)(stage + displ[me]));
    if (MPI_Iallgatherv(MPI_IN_PLACE, 0, type, words, count, displ, type, dp->comm, &req) !=
        MPI_SUCCESS)
        return WAIT_ERROR;
    w = wait_request(dp, &req);
    if (w != WAIT_DONE) return w;
    if (bf16) dp_from_bf16(wire16, n, stage);
    q->info.wire_bytes = (n - (size_t)count[me] + (size_t)count[me] * (size_t)(R - 1)) * word;
    return WAIT_DONE;
}

/* Every rank's stores to the shared segments before it, seen by every rank after it. */
static enum wait_result shared_barrier(oclml_dp *dp) {
    MPI_Request req;
    MPI_Win_sync(dp->win);
    if (MPI_Ibarrier(dp->comm, &req) != MPI_SUCCESS) return WAIT_ERROR;
    enum wait_result w = wait_request(dp, &req);
    MPI_Win_sync(dp->win);
    return w;
}

/* Bucket b's exchange through the node's shared segments: this rank's values into its segment;
 * then each owner sums its shard over every rank's segment in rank order, in place in its own;
 * then every rank copies every owner's sums. Two barriers, no message; the same words reach
 * every rank, as by messages. */
static enum wait_result exchange_shared(oclml_dp *dp, dp_bucket *q) {
    const int R = dp->ranks, me = dp->rank;
    const bool bf16 = dp->cfg.wire_dtype == OCLML_BFLOAT16;
    const size_t n = q->elements, word = bf16 ? 2 : 4, at = q->stage_offset;
    int *count = dp->counts, *displ = count + R;
    split_shards(dp, n, count, displ);
    float *stage = dp->stage + at;
    char *mine = (char *)dp->segment[me] + at * word;
    if (bf16 && !dp->device_words) /* device_words: the device's words landed there */
        dp_to_bf16(stage, n, (uint16_t *)mine);
    else if (!bf16 && !dp->zero_copy) /* zero_copy: the copy from the device landed there */
        dp_copy_f32(stage, n, (float *)mine);
    enum wait_result w = shared_barrier(dp);
    if (w != WAIT_DONE) return w;
    for (int r = 0; r < R; r++)
        dp->shard_of[r] = (const char *)dp->segment[r] + (at + (size_t)displ[me]) * word;
    if (dp->sum_ctx) {
        size_t from = at + (size_t)displ[me], mine_n = (size_t)count[me];
        if (bf16 ? dp_device_sum_words(dp, from, mine_n) : dp_device_sum(dp, q, from, mine_n)) {
            /* The segment's shard holds this rank's own values: the step must not count. */
            pthread_mutex_lock(&dp->mu);
            dp->local_failed = 1;
            pthread_mutex_unlock(&dp->mu);
        }
    } else {
        dp_reduce(bf16, dp->shard_of, R, (size_t)count[me], mine + (size_t)displ[me] * word);
    }
    if ((w = shared_barrier(dp)) != WAIT_DONE) return w;
    /* zero_copy and device_words: the device reads them there. */
    for (int k = 0; k < R && !dp->zero_copy && !dp->device_words; k++) {
        const char *sums = (const char *)dp->segment[k] + (at + (size_t)displ[k]) * word;
        if (bf16)
            dp_from_bf16((const uint16_t *)sums, (size_t)count[k], stage + displ[k]);
        else
            dp_copy_f32((const float *)sums, (size_t)count[k], stage + displ[k]);
    }
    /* No barrier after: a segment's bucket is written again only in the next step, after the
     * step's outcome, which every rank reaches only when its copies back (which read the
     * segments) are done. */
    q->info.wire_bytes = (n - (size_t)count[me] + (size_t)count[me] * (size_t)(R - 1)) * word;
    return WAIT_DONE;
}

/* Where the average of stage elements [from, from + n) is: the staging, or (zero_copy) the
 * owner's segment; *n is cut to the part one owner holds, *owner is that owner and *begin the
 * stage element where its shard starts (zero_copy only). */
static const float *averaged(const oclml_dp *dp, const dp_bucket *q, size_t from, size_t *n,
                             int *owner, size_t *begin) {
    *owner = -1;
    if (!dp->zero_copy) return dp->stage + from;
    const size_t R = (size_t)dp->ranks, elements = q->elements, in = from - q->stage_offset;
    /* split_shards' rule: the first elements % R owners hold one more. */
    const size_t small = elements / R, extra = elements % R, big_part = extra * (small + 1);
    size_t k = in < big_part ? in / (small + 1) : extra + (in - big_part) / small;
    size_t start = k < extra ? k * (small + 1) : big_part + (k - extra) * small;
    size_t end = k < extra ? (k + 1) * (small + 1) : big_part + (k + 1 - extra) * small;
    if (in + *n > end) *n = end - in;
    *owner = (int)k;
    *begin = q->stage_offset + start;
    return (const float *)dp->segment[k] + from;
}

/* Enqueues bucket b's copy back to the device, unless the step stopped writing (mu held). With
 * the sums on the device, this rank's own shard comes from the device's sums, not the host. */
static void return_bucket(oclml_dp *dp, dp_bucket *q) {
    if (dp->skip_writes || dp->local_failed || !q->has_data) return;
    cl_command_queue queue = dp->sum_ctx ? dp->sum_queue : dp->copy_queue;
    cl_int err = CL_SUCCESS;
    if (dp->device_words) {
        int *count = dp->counts, *displ = count + dp->ranks;
        split_shards(dp, q->elements, count, displ);
        err = dp_device_words_back(dp, q, count, displ);
    }
    for (size_t r = 0; r < q->n_runs && err == CL_SUCCESS && !dp->device_words; r++) {
        const dp_run *run = &q->runs[r];
        for (size_t done = 0; done < run->elements && err == CL_SUCCESS;) {
            size_t n = run->elements - done, begin = 0;
            int owner;
            const size_t from = run->stage_offset + done,
                         to = dp->grads_offset + (run->device_offset + done) * sizeof(float);
            const float *src = averaged(dp, q, from, &n, &owner, &begin);
            if (dp->sum_ctx && owner == dp->rank)
                err = dp_device_return(dp, from - begin, to, n);
            else
                err = clEnqueueWriteBuffer(queue, dp->grads, CL_FALSE, to, n * sizeof(float), src,
                                           0, NULL, NULL);
            done += n;
        }
    }
    /* The queue is in order: a marker after the copies stands for them. */
    if (err == CL_SUCCESS) err = clEnqueueMarkerWithWaitList(queue, 0, NULL, &q->written);
    if (err == CL_SUCCESS) err = clFlush(queue);
    if (err != CL_SUCCESS) dp->local_failed = 1;
}

/* The step's exchange from the first bucket to the agreed outcome. */
static void run_step(oclml_dp *dp) {
    enum wait_result w = WAIT_DONE;
    double exchange_s = 0;
    for (size_t b = 0; b < dp->n_buckets && w == WAIT_DONE; b++) {
        dp_bucket *q = &dp->buckets[b];
        pthread_mutex_lock(&dp->mu);
        while (!q->started && !dp->quit) pthread_cond_wait(&dp->cv, &dp->mu);
        bool quit = dp->quit, has_data = q->has_data;
        pthread_mutex_unlock(&dp->mu);
        if (quit) return;
        if (has_data && wait_copied(dp, q)) {
            pthread_mutex_lock(&dp->mu);
            dp->local_failed = 1;
            pthread_mutex_unlock(&dp->mu);
        }
        q->copied_at = dp_now();
        w = dp->segment ? exchange_shared(dp, q) : exchange_messages(dp, q);
        q->reduced_at = dp_now();
        exchange_s += q->reduced_at - q->copied_at;
        pthread_mutex_lock(&dp->mu);
        if (w == WAIT_DONE) return_bucket(dp, q);
        pthread_mutex_unlock(&dp->mu);
    }
    /* The copies back end before the outcome's all-reduce: past it another rank may overwrite
     * its segment (the next step's copy), which these copies may read. */
    bool write_failed = false;
    for (size_t b = 0; b < dp->n_buckets; b++) {
        dp_bucket *q = &dp->buckets[b];
        if (q->written && dp_wait_event(dp, q->written)) write_failed = true;
        q->returned_at = dp_now();
    }
    int mine, any = 1;
    pthread_mutex_lock(&dp->mu);
    if (write_failed) dp->local_failed = 1;
    mine = dp->local_failed;
    pthread_mutex_unlock(&dp->mu);
    /* A failure part way may have left copies enqueued with no event to wait for: they end
     * here, before the outcome lets anyone write the gradients or the segments again. */
    if (mine) {
        clFinish(dp->copy_queue);
        if (dp->sum_queue) clFinish(dp->sum_queue);
    }
    MPI_Request req;
    if (w == WAIT_DONE) {
        if (MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, dp->comm, &req) != MPI_SUCCESS)
            w = WAIT_ERROR;
        else
            w = wait_request(dp, &req);
    }
    pthread_mutex_lock(&dp->mu);
    bool quit = dp->quit;
    pthread_mutex_unlock(&dp->mu);
    if (quit) return; /* destroy: nothing waits for the outcome */
    pthread_mutex_lock(&dp->mu);
    if (w != WAIT_DONE) dp->broken = true, any = 1;
    dp->any_failed = any;
    dp->exchange_s = exchange_s;
    dp->step_done = true;
    pthread_cond_broadcast(&dp->cv);
    pthread_mutex_unlock(&dp->mu);
}

void *dp_progress_main(void *arg) {
    oclml_dp *dp = arg;
    pthread_mutex_lock(&dp->mu);
    while (!dp->quit) {
        if (!dp->in_step || dp->step_done) {
            pthread_cond_wait(&dp->cv, &dp->mu);
            continue;
        }
        pthread_mutex_unlock(&dp->mu);
        run_step(dp);
        pthread_mutex_lock(&dp->mu);
    }
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

/* The context's queue waits for every copy of the step enqueued so far (mu held): what the
 * caller enqueues next may overwrite the gradients. */
static void fence(oclml_dp *dp) {
    cl_event *events = malloc(2 * dp->n_buckets * sizeof *events);
    cl_uint n = 0;
    for (size_t b = 0; events && b < dp->n_buckets; b++) {
        if (dp->buckets[b].read_done) events[n++] = dp->buckets[b].read_done;
        if (dp->buckets[b].written) events[n++] = dp->buckets[b].written;
    }
    if (!events || (n && clEnqueueBarrierWithWaitList(dp->ctx_queue, n, events, NULL))) {
        clFinish(dp->copy_queue); /* no barrier: wait here instead */
        if (dp->sum_queue) clFinish(dp->sum_queue);
    }
    free(events);
    dp->fenced = true;
}

static double ms_after(double at, double origin) { return at > 0 ? 1e3 * (at - origin) : 0; }

/* Ends a step whose exchange is over (mu held): its figures, its events, fresh flags. */
static oclml_status collect(oclml_dp *dp) {
    double end = atomic_load(&dp->backward_end_at.at);
    double origin = end > 0 ? end : dp_now(), last = origin;
    for (size_t b = 0; b < dp->n_buckets; b++) {
        dp_bucket *q = &dp->buckets[b];
        q->info.ready_ms = ms_after(atomic_load(&q->ready_at.at), origin);
        q->info.copied_ms = ms_after(q->copied_at, origin);
        q->info.reduced_ms = ms_after(q->reduced_at, origin);
        q->info.returned_ms = ms_after(q->returned_at, origin);
        if (q->returned_at > last) last = q->returned_at;
        release(&q->ready);
        release(&q->read_done);
        release(&q->written);
        q->started = q->has_data = false;
        q->waiting = q->info.tensors;
    }
    release(&dp->backward_end);
    atomic_fetch_add(&dp->generation, 1);
    memset(dp->ready, 0, dp->n_tensors * sizeof *dp->ready);
    dp->marked = false;
    dp->info.exposed_ms = 1e3 * (last - origin);
    dp->info.exchange_ms = 1e3 * dp->exchange_s;
    dp->info.wire_bytes = 0;
    for (size_t b = 0; b < dp->n_buckets; b++)
        dp->info.wire_bytes += dp->buckets[b].info.wire_bytes;
    dp->info.steps++;
    oclml_status st = OCLML_SUCCESS;
    if (dp->any_failed) {
        dp->info.failed_steps++;
        st = dp->stalled ? OCLML_ERR_TIMEOUT : OCLML_ERR_PEER;
    }
    dp->in_step = dp->step_done = dp->stalled = dp->skip_writes = dp->fenced = false;
    dp->local_failed = dp->any_failed = 0;
    return st;
}

/* Before a new step: a step that stalled may still be running in the background; wait for it
 * (up to timeout_s again: OCLML_ERR_TIMEOUT while the others have not come) and drop it (its
 * caller was told). mu held. */
oclml_status dp_settle(oclml_dp *dp) {
    if (!dp->stalled) return OCLML_SUCCESS;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double end = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + dp->cfg.timeout_s;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    while (!dp->step_done && !dp->broken)
        if (pthread_cond_timedwait(&dp->cv, &dp->mu, &until)) break;
    if (!dp->step_done) return dp->broken ? OCLML_ERR_PEER : OCLML_ERR_TIMEOUT;
    collect(dp);
    return OCLML_SUCCESS;
}

oclml_status oclml_dp_grads_ready(oclml_dp *dp, size_t first, size_t count) {
    if (!dp) return OCLML_ERR_NULL_POINTER;
    if (first > dp->n_tensors || count > dp->n_tensors - first) return OCLML_ERR_INVALID_ARGUMENT;
    if (dp->ranks == 1) return OCLML_SUCCESS; /* one rank: its gradient is the average */
    pthread_mutex_lock(&dp->mu);
    oclml_status st = dp->broken ? OCLML_ERR_PEER : dp_settle(dp);
    for (size_t t = first; t < first + count && !st; t++) {
        if (dp->ready[t]) continue;
        dp->ready[t] = dp->marked = true;
        for (size_t b = dp->bucket_of[t]; b < dp->bucket_end[t]; b++) {
            dp_bucket *q = &dp->buckets[b];
            if (--q->waiting == 0 && !q->started) start_bucket(dp, b, !dp->local_failed);
        }
    }
    pthread_mutex_unlock(&dp->mu);
    return st;
}

/* Waits for the progress thread's end of the step (mu held), meanwhile polling the backward's
 * end marker: a driver may deliver its callback many milliseconds late (NVIDIA's did, by about
 * 10 ms in GPT-2's step), which would hide the exchange's exposed part. */
static void wait_polling_backward_end(oclml_dp *dp) {
    bool seen = !dp->backward_end || !dp->poll;
    while (!dp->step_done && !dp->stalled) {
        if (seen) {
            pthread_cond_wait(&dp->cv, &dp->mu);
            continue;
        }
        if ((seen = stamp_if_ended(dp->backward_end, &dp->backward_end_at))) continue;
        pthread_mutex_unlock(&dp->mu);
        sched_yield();
        pthread_mutex_lock(&dp->mu);
    }
}

static oclml_status end_step(oclml_dp *dp, bool failing) {
    if (!dp) return OCLML_ERR_NULL_POINTER;
    if (dp->ranks == 1) {
        dp->info.steps++;
        dp->info.failed_steps += failing;
        return OCLML_SUCCESS;
    }
    pthread_mutex_lock(&dp->mu);
    oclml_status st = dp->broken ? OCLML_ERR_PEER : dp_settle(dp);
    if (st) {
        pthread_mutex_unlock(&dp->mu);
        return st;
    }
    const double entered = dp_now();
    if (failing) dp->local_failed = 1;
    if (!failing &&
        clEnqueueMarkerWithWaitList(dp->ctx_queue, 0, NULL, &dp->backward_end) == CL_SUCCESS) {
        stamp_on_completion(dp, dp->backward_end, &dp->backward_end_at);
        clFlush(dp->ctx_queue);
    }
    for (size_t b = 0; b < dp->n_buckets; b++)
        if (!dp->buckets[b].started) start_bucket(dp, b, !dp->local_failed);
    if (dp->threaded) {
        wait_polling_backward_end(dp);
    } else {
        pthread_mutex_unlock(&dp->mu);
        run_step(dp);
        pthread_mutex_lock(&dp->mu);
    }
    dp->info.sync_ms = 1e3 * (dp_now() - entered);
    if (dp->step_done) {
        st = collect(dp);
        if (failing && st == OCLML_ERR_PEER) st = OCLML_SUCCESS; /* the others were told */
    } else {
        fence(dp);
        st = OCLML_ERR_TIMEOUT;
    }
    pthread_mutex_unlock(&dp->mu);
    return st;
}

oclml_status oclml_dp_sync(oclml_dp *dp) { return end_step(dp, false); }

oclml_status oclml_dp_fail(oclml_dp *dp) { return end_step(dp, true); }
