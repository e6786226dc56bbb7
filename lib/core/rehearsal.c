/* Rehearsals: an op's first call at a shape, on a device that compiles programs in parallel,
 * runs once with its launches skipped to learn which programs it needs, builds those at once on
 * several threads, then runs for real. A multi-program op (a backward with several products)
 * otherwise compiles one program after another on its first call.
 *
 * The rehearsal is per thread: other threads using the context meanwhile run for real. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* Programs one rehearsal records at most: more than any op builds. */
#define MOST_PROGRAMS 48

typedef struct recorded {
    char file[32], defines[512], kernels[192];
    unsigned max_registers;
} recorded;

typedef struct rehearsal {
    oclml_ctx *ctx;
    recorded programs[MOST_PROGRAMS];
    unsigned n;
} rehearsal;

static _Thread_local rehearsal *active;

bool oclml__rehearsing(const oclml_ctx *ctx) { return active && active->ctx == ctx; }

void oclml__rehearsal_record(const oclml__program_spec *spec) {
    rehearsal *r = active;
    const char *defines = spec->defines ? spec->defines : "",
               *kernels = spec->kernels ? spec->kernels : "";
    for (unsigned i = 0; i < r->n; i++)
        if (!strcmp(r->programs[i].file, spec->file) && !strcmp(r->programs[i].defines, defines) &&
            !strcmp(r->programs[i].kernels, kernels) &&
            r->programs[i].max_registers == spec->max_registers)
            return;
    /* A program that does not fit is left to the real run, which builds it itself. */
    if (r->n == MOST_PROGRAMS || strlen(spec->file) >= sizeof r->programs->file ||
        strlen(defines) >= sizeof r->programs->defines ||
        strlen(kernels) >= sizeof r->programs->kernels)
        return;
    recorded *p = &r->programs[r->n++];
    strcpy(p->file, spec->file);
    strcpy(p->defines, defines);
    strcpy(p->kernels, kernels);
    p->max_registers = spec->max_registers;
}

uint64_t oclml__rehearsal_key(uint64_t key, const void *bytes, size_t len) {
    const unsigned char *b = bytes;
    if (!key) key = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) key = (key ^ b[i]) * 1099511628211ull;
    return key;
}

uint64_t oclml__rehearsal_key_tensor(uint64_t key, const oclml_tensor *t) {
    if (!t) return oclml__rehearsal_key(key, "-", 1);
    /* The shape, and the offset's alignment that vector loads depend on. */
    size_t align = t->offset_bytes % 64;
    int ndim = t->ndim < 0 ? 0 : t->ndim > OCLML_MAX_DIMS ? OCLML_MAX_DIMS : t->ndim;
    key = oclml__rehearsal_key(key, &ndim, sizeof ndim);
    key = oclml__rehearsal_key(key, t->shape, (size_t)ndim * sizeof t->shape[0]);
    return oclml__rehearsal_key(key, &align, sizeof align);
}

/* Whether key was rehearsed on ctx before; records it if not. A full table rehearses no more. */
static bool seen_before(oclml_ctx *ctx, uint64_t key) {
    if (!key) key = 1;
    pthread_mutex_lock(&ctx->build_lock);
    bool seen = true;
    for (unsigned i = 0, at = (unsigned)(key % OCLML__REHEARSED_MOST); i < OCLML__REHEARSED_MOST;
         i++, at = (at + 1) % OCLML__REHEARSED_MOST) {
        if (ctx->rehearsed[at] == key) break;
        if (!ctx->rehearsed[at]) {
            if (ctx->n_rehearsed + 1 < OCLML__REHEARSED_MOST) {
                ctx->rehearsed[at] = key;
                ctx->n_rehearsed++;
                seen = false;
            }
            break;
        }
    }
    pthread_mutex_unlock(&ctx->build_lock);
    return seen;
}

bool oclml__rehearsal_begin(oclml_ctx *ctx, uint64_t key) {
    if (!ctx || active || !ctx->rehearse || seen_before(ctx, key)) return false;
    rehearsal *r = calloc(1, sizeof *r);
    if (!r) return false; /* the real run goes ahead without one */
    r->ctx = ctx;
    active = r;
    return true;
}

void oclml__rehearsal_end(oclml_ctx *ctx) {
    rehearsal *r = active;
    active = NULL;
    if (!r) return;
    oclml__program_spec specs[MOST_PROGRAMS];
    for (unsigned i = 0; i < r->n; i++)
        specs[i] = (oclml__program_spec){r->programs[i].file,
                                         r->programs[i].defines[0] ? r->programs[i].defines : NULL,
                                         r->programs[i].kernels[0] ? r->programs[i].kernels : NULL,
                                         r->programs[i].max_registers};
    /* A failed build is not reported here: the real run asks for the program again and
     * reports its own failure. One program alone builds on this thread. */
    if (r->n > 1) oclml__build_parallel(ctx, specs, r->n, 0, NULL, NULL);
    oclml__clear_error(ctx);
    free(r);
}
