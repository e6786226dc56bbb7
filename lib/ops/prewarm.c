/* Prewarm: build, up front and in parallel, the variants that ops would build on first use. */
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const size_t oclml__warm_row_lengths[OCLML__WARM_ROW_LENGTHS] = {32,   128,  512,   1024,  2048,
                                                                 4096, 8192, 32768, 131072};

void oclml__warm_add(oclml__warm_list *list, const char *op, const char *variant,
                     oclml__program_spec spec) {
    const char *defines = spec.defines ? spec.defines : "",
               *kernels = spec.kernels ? spec.kernels : "";
    for (size_t i = 0; i < list->n; i++) {
        const oclml__warm_item *it = &list->items[i];
        if (!strcmp(it->file, spec.file) && !strcmp(it->defines, defines) &&
            !strcmp(it->kernels, kernels) && it->max_registers == spec.max_registers)
            return;
    }
    if (strlen(spec.file) >= sizeof list->items->file ||
        strlen(defines) >= sizeof list->items->defines ||
        strlen(kernels) >= sizeof list->items->kernels) {
        if (!list->too_long_op) list->too_long_op = op;
        return;
    }
    if (list->n == list->cap) {
        size_t cap = list->cap ? 2 * list->cap : 32;
        oclml__warm_item *p = realloc(list->items, cap * sizeof *p);
        if (!p) {
            list->out_of_memory = true;
            return;
        }
        list->items = p;
        list->cap = cap;
    }
    oclml__warm_item *it = &list->items[list->n++];
    it->op = op;
    snprintf(it->variant, sizeof it->variant, "%s", variant);
    snprintf(it->file, sizeof it->file, "%s", spec.file);
    snprintf(it->defines, sizeof it->defines, "%s", defines);
    snprintf(it->kernels, sizeof it->kernels, "%s", kernels);
    it->max_registers = spec.max_registers;
}

typedef struct warm_run {
    oclml_ctx *ctx;
    const oclml__warm_list *list;
    size_t next, done;
    double *ms;
    oclml_status *status;
    bool *finished;
    pthread_mutex_t lock;
    pthread_cond_t changed;
} warm_run;

static void *worker(void *arg) {
    warm_run *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        size_t i = r->next++;
        pthread_mutex_unlock(&r->lock);
        if (i >= r->list->n) return NULL;
        const oclml__warm_item *it = &r->list->items[i];
        oclml__program_spec spec = {it->file, it->defines[0] ? it->defines : NULL,
                                    it->kernels[0] ? it->kernels : NULL, it->max_registers};
        double ms = 0;
        oclml_status st = oclml__program_build(r->ctx, &spec, &ms);
        pthread_mutex_lock(&r->lock);
        r->ms[i] = ms;
        r->status[i] = st;
        r->finished[i] = true;
        r->done++;
        pthread_cond_signal(&r->changed);
        pthread_mutex_unlock(&r->lock);
    }
}

oclml_status oclml__warm_collect(oclml_ctx *ctx, const char *ops, oclml__warm_list *list) {
    if (!ops || !*ops) {
        for (size_t i = 0; oclml__op_name(i); i++) {
            bool found;
            const char *name = oclml__op_name(i);
            oclml__warm_fn *warm = oclml__op_warm(name, strlen(name), &found);
            if (warm) warm(ctx, name, list);
        }
        return OCLML_SUCCESS;
    }
    for (const char *s = ops; *s;) {
        s += strspn(s, ", ");
        size_t n = strcspn(s, ", ");
        if (!n) break;
        bool found;
        oclml__warm_fn *warm = oclml__op_warm(s, n, &found);
        if (!found)
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "prewarm: no op named '%.*s'",
                               (int)n, s);
        for (size_t i = 0; oclml__op_name(i); i++) /* the list's own name string outlives us */
            if (strlen(oclml__op_name(i)) == n && !strncmp(oclml__op_name(i), s, n) && warm)
                warm(ctx, oclml__op_name(i), list);
        s += n;
    }
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_prewarm(oclml_ctx *ctx, const char *ops, unsigned threads,
                               oclml_prewarm_fn progress, void *user) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    oclml__warm_list list = {0};
    st = oclml__warm_collect(ctx, ops, &list);
    if (!st && list.out_of_memory) st = oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
    if (!st && list.too_long_op)
        st = oclml__fail(ctx, OCLML_ERR_BUFFER_TOO_SMALL,
                         "prewarm: a program of %s has longer defines than the warm list holds",
                         list.too_long_op);
    if (st || list.n == 0) {
        free(list.items);
        return st;
    }
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores < 1 ? 1 : cores > 8 ? 8 : (unsigned)cores;
    }
    if (threads > list.n) threads = (unsigned)list.n;
    warm_run r = {.ctx = ctx, .list = &list};
    r.ms = calloc(list.n, sizeof *r.ms);
    r.status = calloc(list.n, sizeof *r.status);
    r.finished = calloc(list.n, sizeof *r.finished);
    pthread_t *tids = calloc(threads, sizeof *tids);
    bool *told = calloc(list.n, sizeof *told);
    if (!r.ms || !r.status || !r.finished || !tids || !told) {
        st = oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.changed, NULL);
    unsigned started = 0;
    size_t reported = 0, failed = 0, first_failed = 0;
    while (started < threads && !pthread_create(&tids[started], NULL, worker, &r)) started++;
    if (started == 0) worker(&r); /* no thread could start: build here */
    /* Report each finished program from this thread, as they complete. */
    pthread_mutex_lock(&r.lock);
    while (reported < list.n) {
        while (r.done == reported) pthread_cond_wait(&r.changed, &r.lock);
        for (size_t i = 0; i < list.n; i++) {
            if (!r.finished[i] || told[i]) continue;
            told[i] = true;
            reported++;
            if (r.status[i] && failed++ == 0) first_failed = i;
            pthread_mutex_unlock(&r.lock);
            if (progress)
                progress(user, list.items[i].op, list.items[i].variant, r.ms[i], reported, list.n);
            pthread_mutex_lock(&r.lock);
        }
    }
    pthread_mutex_unlock(&r.lock);
    for (unsigned t = 0; t < started; t++) pthread_join(tids[t], NULL);
    pthread_mutex_destroy(&r.lock);
    pthread_cond_destroy(&r.changed);
    if (failed)
        st = oclml__fail(ctx, r.status[first_failed],
                         "prewarm: %zu of %zu programs failed to build; the first: %s (%s, %s %s)",
                         failed, list.n, list.items[first_failed].op,
                         list.items[first_failed].variant, list.items[first_failed].file,
                         oclml_status_name(r.status[first_failed]));
out:
    free(told);
    free(tids);
    free(r.ms);
    free(r.status);
    free(r.finished);
    free(list.items);
    return st;
}
