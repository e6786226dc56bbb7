/* Dropout, its backward and the residual add with dropout at p 0.1 (part of the elementwise
 * suite): 16M elements and GPT-2's residual stream (8192 tokens x 768). Memory-bound: the
 * Philox draws should hide under the loads, so the limit column (the copy rate) is the target.
 * Checked against the host's keep rule (tests/ref/dropout.c) on a sample. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

#include "ref/ref.h"

typedef struct drop_case {
    oclml_ctx *ctx;
    oclml_dropout_params d;
    oclml_tensor *x, *y, *out;
    int which;
} drop_case;

enum { DROPOUT, DROPOUT_BWD, DROPOUT_ADD, N_DROP_CASES };

static const struct {
    const char *name;
    double bytes_per_elem; /* each input read once, the output written once */
} DROP_CASES[] = {{"dropout", 8}, {"dropout_bwd", 8}, {"dropout_add", 12}};

static oclml_status run_drop(void *user) {
    drop_case *c = user;
    switch (c->which) {
    case DROPOUT:
        return oclml_dropout(c->ctx, &c->d, c->x, c->out);
    case DROPOUT_BWD:
        return oclml_dropout_backward(c->ctx, &c->d, c->x, c->out);
    default:
        return oclml_dropout_add(c->ctx, &c->d, c->x, c->y, c->out);
    }
}

/* The largest error over every 997th element relative to the terms' magnitude (dropout_add:
 * r = x + dropout(y), whose sum may cancel). */
static double sample_error(const drop_case *c, const float *x, const float *y, const float *out,
                           size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i += 997) {
        const float *in = c->which == DROPOUT_ADD ? y : x;
        const bool keep = ref_dropout_keep(c->d.seed, c->d.offset, i, c->d.p);
        double want = keep ? in[i] / (1.0 - (double)c->d.p) : 0.0, size = fabs(want);
        if (c->which == DROPOUT_ADD) {
            want += x[i];
            size += fabs(x[i]);
        }
        worst = fmax(worst, fabs(out[i] - want) / fmax(size, 1e-3));
    }
    return worst;
}

static int bench_dropout_size(bench_env *env, size_t n) {
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *out = malloc(n * sizeof *out);
    drop_case c = {.ctx = env->ctx};
    oclml_status st = x && y && out ? oclml_dropout_params_init(&c.d) : OCLML_ERR_OUT_OF_MEMORY;
    c.d.p = 0.1f;
    c.d.seed = 0x5eed;
    c.d.offset = 3; /* not a multiple of anything in particular */
    if (!st) st = oclml_tensor_create(env->ctx, 1, &n, &c.x);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &n, &c.y);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &n, &c.out);
    if (!st) {
        bench_random(x, n, 21);
        bench_random(y, n, 22);
        st = oclml_tensor_write(c.x, x, n);
    }
    if (!st) st = oclml_tensor_write(c.y, y, n);
    int rc = st ? bench_fail(env, st, "dropout setup") : 0;
    char shape[32];
    if (n == 8192 * 768)
        snprintf(shape, sizeof shape, "8192x768");
    else
        snprintf(shape, sizeof shape, "%zu", n);
    for (int w = 0; w < N_DROP_CASES && !rc; w++) {
        c.which = w;
        bench_result r = {.op = DROP_CASES[w].name,
                          .shape = shape,
                          .variant = bench_cpu_layout(env) ? "p 0.1, Philox, a chunk a work-item"
                                                           : "p 0.1, Philox float4 grid-stride",
                          .bytes = DROP_CASES[w].bytes_per_elem * (double)n,
                          .max_rel_err = -1};
        rc = bench_time(env, run_drop, &c, &r.t);
        if (rc) break;
        if ((st = oclml_tensor_read(c.out, out, n))) {
            rc = bench_fail(env, st, "download");
            break;
        }
        r.max_rel_err = sample_error(&c, x, y, out, n);
        bench_report(env, &r);
    }
    oclml_tensor *all[] = {c.x, c.y, c.out};
    for (int k = 0; k < 3; k++)
        if (all[k]) oclml_tensor_destroy(all[k]);
    free(x);
    free(y);
    free(out);
    return rc;
}

int bench_dropout(bench_env *env) {
    long sizes[4];
    int ns = bench_sizes(env, env->quick ? "1048576,196608" : "16777216,6291456", sizes, 4);
    for (int s = 0; s < ns; s++) {
        int rc = bench_dropout_size(env, (size_t)sizes[s]);
        if (rc) return rc;
    }
    return 0;
}
