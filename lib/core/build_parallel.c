/* Building many programs at once: drivers that compile on the calling thread (NVIDIA's, PoCL's)
 * compile programs of one context in parallel, and the program cache lets them (program.c). */
#include "core/core.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct build_run {
    oclml_ctx *ctx;
    const oclml__program_spec *specs;
    size_t n, next, done;
    double *ms;
    oclml_status *status;
    bool *finished;
    pthread_mutex_t lock;
    pthread_cond_t changed;
} build_run;

static void *worker(void *arg) {
    build_run *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        size_t i = r->next++;
        pthread_mutex_unlock(&r->lock);
        if (i >= r->n) return NULL;
        double ms = 0;
        oclml_status st = oclml__program_build(r->ctx, &r->specs[i], &ms);
        pthread_mutex_lock(&r->lock);
        r->ms[i] = ms;
        r->status[i] = st;
        r->finished[i] = true;
        r->done++;
        pthread_cond_signal(&r->changed);
        pthread_mutex_unlock(&r->lock);
    }
}

unsigned oclml__build_threads(size_t programs) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned t = cores < 1 ? 1 : cores > 8 ? 8 : (unsigned)cores;
    return programs < t ? (unsigned)(programs ? programs : 1) : t;
}

oclml_status oclml__build_parallel(oclml_ctx *ctx, const oclml__program_spec *specs, size_t n,
                                   unsigned threads, oclml__built_fn *done, void *user) {
    if (n == 0) return OCLML_SUCCESS;
    if (threads == 0) threads = oclml__build_threads(n);
    if (threads > n) threads = (unsigned)n;
    build_run r = {.ctx = ctx, .specs = specs, .n = n};
    r.ms = calloc(n, sizeof *r.ms);
    r.status = calloc(n, sizeof *r.status);
    r.finished = calloc(n, sizeof *r.finished);
    bool *told = calloc(n, sizeof *told);
    pthread_t *tids = calloc(threads, sizeof *tids);
    oclml_status st = OCLML_SUCCESS;
    if (!r.ms || !r.status || !r.finished || !told || !tids) {
        st = oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.changed, NULL);
    /* Without a progress callback this thread is one of the builders; with one, it reports while
     * the threads build (and builds alone if none could start). */
    unsigned want = done ? threads : threads - 1, started = 0;
    while (started < want && !pthread_create(&tids[started], NULL, worker, &r)) started++;
    if (!done || started == 0) worker(&r);
    /* Then each program's result, in the order they finish. */
    size_t reported = 0;
    pthread_mutex_lock(&r.lock);
    while (reported < n) {
        while (r.done == reported) pthread_cond_wait(&r.changed, &r.lock);
        for (size_t i = 0; i < n; i++) {
            if (!r.finished[i] || told[i]) continue;
            told[i] = true;
            reported++;
            if (r.status[i] && !st) st = r.status[i];
            if (!done) continue;
            pthread_mutex_unlock(&r.lock);
            done(user, i, r.ms[i], r.status[i], reported);
            pthread_mutex_lock(&r.lock);
        }
    }
    pthread_mutex_unlock(&r.lock);
    for (unsigned t = 0; t < started; t++) pthread_join(tids[t], NULL);
    pthread_mutex_destroy(&r.lock);
    pthread_cond_destroy(&r.changed);
out:
    free(tids);
    free(told);
    free(r.ms);
    free(r.status);
    free(r.finished);
    return st;
}
