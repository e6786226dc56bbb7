/* Embedding lookup and its backward at GPT-2's shape (part of the layout suite): 8192 tokens (B8
 * T1024) of a 50257 x 768 table, ids uniform over the vocabulary. The forward is a gather (the
 * copy rate is its limit); the backward writes every row of the table's gradient (read too when
 * accumulating, as a tied head's gradient is), so its bytes are dominated by the table, not the
 * tokens. Bytes count each input read once and each output written once; the sort's scratch
 * traffic (a few words a token and a vocabulary entry) is left out. Checked against a double
 * reference (tests/ref/embedding.c): the forward exactly, the backward relative to the sum of
 * the terms' magnitudes. --quick: 2048 tokens of 5000 x 128. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

enum { FWD, BWD, BWD_ACC, N_EMB_CASES };

typedef struct emb_case {
    oclml_ctx *ctx;
    oclml_tensor *ids, *table, *rows, *dtable; /* rows: y forward, dy backward */
    int which;
} emb_case;

static oclml_status run_emb(void *user) {
    emb_case *c = user;
    switch (c->which) {
    case FWD:
        return oclml_embedding(c->ctx, c->ids, c->table, c->rows);
    case BWD:
        return oclml_embedding_backward(c->ctx, c->ids, c->rows, c->dtable, 0);
    default:
        return oclml_embedding_backward(c->ctx, c->ids, c->rows, c->dtable, 1);
    }
}

/* The backward's largest error relative to the sum of |terms| of each element (floored at
 * 1e-3); start: dtable before the run (NULL: overwritten). */
static double backward_error(const float *ids, const float *dy, const float *start,
                             const float *got, size_t N, size_t V, size_t D) {
    double *want = calloc(V * D, sizeof *want), *size = calloc(V * D, sizeof *size), worst = 0;
    float *absdy = malloc(N * D * sizeof *absdy);
    if (!want || !size || !absdy) {
        worst = INFINITY;
    } else {
        for (size_t i = 0; i < N * D; i++) absdy[i] = fabsf(dy[i]);
        ref_embedding_backward(ids, N, dy, V, D, want);
        ref_embedding_backward(ids, N, absdy, V, D, size);
        for (size_t i = 0; i < V * D; i++) {
            double w = want[i] + (start ? start[i] : 0.0),
                   s = size[i] + (start ? fabs(start[i]) : 0.0);
            worst = fmax(worst, fabs(got[i] - w) / fmax(s, 1e-3));
        }
    }
    free(want);
    free(size);
    free(absdy);
    return worst;
}

int bench_embedding(bench_env *env) {
    const size_t N = env->quick ? 2048 : 8192, V = env->quick ? 5000 : 50257,
                 D = env->quick ? 128 : 768, is[1] = {N}, ts[2] = {V, D}, ys[2] = {N, D};
    float *ids = malloc(N * sizeof *ids), *table = malloc(V * D * sizeof *table),
          *rows = malloc(N * D * sizeof *rows), *start = malloc(V * D * sizeof *start),
          *got = malloc((N > V ? N : V) * D * sizeof *got);
    emb_case c = {.ctx = env->ctx};
    oclml_status st =
        ids && table && rows && start && got ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
    if (!st) {
        bench_random(ids, N, 31);
        for (size_t n = 0; n < N; n++) {
            const size_t id = (size_t)((ids[n] + 1.0f) * 0.5f * (float)V);
            ids[n] = (float)(id < V ? id : V - 1);
        }
        bench_random(table, V * D, 32);
        bench_random(rows, N * D, 33);
        bench_random(start, V * D, 34);
        st = oclml_tensor_create(env->ctx, 1, is, &c.ids);
    }
    if (!st) st = oclml_tensor_create(env->ctx, 2, ts, &c.table);
    if (!st) st = oclml_tensor_create(env->ctx, 2, ys, &c.rows);
    if (!st) st = oclml_tensor_create(env->ctx, 2, ts, &c.dtable);
    if (!st) st = oclml_tensor_write(c.ids, ids, N);
    if (!st) st = oclml_tensor_write(c.table, table, V * D);
    int rc = st ? bench_fail(env, st, "embedding setup") : 0;
    char shape[64];
    snprintf(shape, sizeof shape, "%sN%zu V%zu D%zu", env->quick ? "" : "gpt2 ", N, V, D);
    static const char *const names[N_EMB_CASES] = {"embedding", "embedding_bwd",
                                                   "embedding_bwd_acc"};
    static const char *const variants[N_EMB_CASES] = {
        "gather, float4", "counting sort by id, rows summed in token order",
        "counting sort by id, rows summed in token order, += dtable"};
    const double ids_b = 4.0 * N, rows_b = 4.0 * N * D, table_b = 4.0 * V * D;
    const double bytes[N_EMB_CASES] = {ids_b + 2 * rows_b, ids_b + rows_b + table_b,
                                       ids_b + rows_b + 2 * table_b};
    for (int w = 0; w < N_EMB_CASES && !rc; w++) {
        c.which = w;
        /* the forward writes rows (y); the backwards read them as dy: set them afresh */
        if (w == BWD && (st = oclml_tensor_write(c.rows, rows, N * D))) {
            rc = bench_fail(env, st, "upload");
            break;
        }
        bench_result r = {.op = names[w],
                          .shape = shape,
                          .variant = variants[w],
                          .bytes = bytes[w],
                          .max_rel_err = -1};
        rc = bench_time(env, run_emb, &c, &r.t);
        if (rc) break;
        if (w == BWD_ACC) {
            /* the timed runs added many times: check one addition onto a known start */
            if (!(st = oclml_tensor_write(c.dtable, start, V * D))) st = run_emb(&c);
        }
        if (!st)
            st = w == FWD ? oclml_tensor_read(c.rows, got, N * D)
                          : oclml_tensor_read(c.dtable, got, V * D);
        if (st) {
            rc = bench_fail(env, st, "download");
            break;
        }
        if (w == FWD) {
            double worst = 0;
            for (size_t n = 0; n < N; n++)
                if (memcmp(got + n * D, table + (size_t)ids[n] * D, D * sizeof *got)) worst = 1;
            r.max_rel_err = worst;
        } else {
            r.max_rel_err = backward_error(ids, rows, w == BWD_ACC ? start : NULL, got, N, V, D);
        }
        bench_report(env, &r);
    }
    oclml_tensor *all[] = {c.ids, c.table, c.rows, c.dtable};
    for (int k = 0; k < 4; k++)
        if (all[k]) oclml_tensor_destroy(all[k]);
    free(ids);
    free(table);
    free(rows);
    free(start);
    free(got);
    return rc;
}
