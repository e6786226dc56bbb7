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

/* Passes each finished program to the caller's progress callback; keeps the first failure. */
typedef struct warm_report {
    const oclml__warm_list *list;
    oclml_prewarm_fn progress;
    void *user;
    size_t failed, first_failed;
    oclml_status first_status;
} warm_report;

static void reported(void *user, size_t i, double ms, oclml_status st, size_t finished) {
    warm_report *r = user;
    if (st && r->failed++ == 0) {
        r->first_failed = i;
        r->first_status = st;
    }
    const oclml__warm_item *it = &r->list->items[i];
    if (r->progress) r->progress(r->user, it->op, it->variant, ms, finished, r->list->n);
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
    oclml__program_spec *specs = calloc(list.n, sizeof *specs);
    if (!specs) {
        free(list.items);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < list.n; i++) {
        const oclml__warm_item *it = &list.items[i];
        specs[i] = (oclml__program_spec){it->file, it->defines[0] ? it->defines : NULL,
                                         it->kernels[0] ? it->kernels : NULL, it->max_registers};
    }
    warm_report report = {&list, progress, user, 0, 0, OCLML_SUCCESS};
    oclml_status built = oclml__build_parallel(
        ctx, specs, list.n, threads ? threads : oclml__build_threads(list.n), reported, &report);
    if (report.failed)
        st = oclml__fail(ctx, report.first_status,
                         "prewarm: %zu of %zu programs failed to build; the first: %s (%s, %s %s)",
                         report.failed, list.n, list.items[report.first_failed].op,
                         list.items[report.first_failed].variant,
                         list.items[report.first_failed].file,
                         oclml_status_name(report.first_status));
    else
        st = built; /* out of memory before any build */
    free(specs);
    free(list.items);
    return st;
}
