/* Row ops (softmax family; layernorm and RMSnorm join here) on the canonical shapes of
 * torch_peers.py: GB/s against the copy rate, sampled rows checked against the reference. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

static const long DEFAULT_SHAPES[][2] = {
    {8192, 4096}, {65536, 1024}, {16384, 8192}, {4096, 32768}, {1048576, 128}};
static const long QUICK_SHAPES[][2] = {{256, 1024}, {64, 40000}};

/* The shapes to run: --sizes takes "ROWSxCOLS,ROWSxCOLS". */
int bench_row_shapes(const bench_env *env, long shapes[][2], int max) {
    int n = 0;
    if (env->sizes) return bench_shapes(env->sizes, 2, &shapes[0][0], max);
    const long(*src)[2] = env->quick ? QUICK_SHAPES : DEFAULT_SHAPES;
    int count = env->quick ? 2 : 5;
    for (; n < count && n < max; n++) memcpy(shapes[n], src[n], sizeof shapes[n]);
    return n;
}

/* Worst relative error over up to 8 sampled rows, by the reference function of the op. */
typedef void (*row_ref_fn)(size_t cols, const float *x, const float *y_dev, double *err_out,
                           void *user);

typedef struct row_case {
    oclml_ctx *ctx;
    oclml_tensor *t[4];
    int op;
} row_case;

enum { SOFTMAX, LOG_SOFTMAX, SOFTMAX_BWD };

static oclml_status run_case(void *user) {
    row_case *c = user;
    switch (c->op) {
    case SOFTMAX:
        return oclml_softmax(c->ctx, c->t[0], c->t[1]);
    case LOG_SOFTMAX:
        return oclml_log_softmax(c->ctx, c->t[0], c->t[1]);
    default:
        return oclml_softmax_backward(c->ctx, c->t[1], c->t[2], c->t[3]);
    }
}

static double max_rel(const float *out, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int bench_softmax(bench_env *env) {
    long shapes[16][2];
    int ns = bench_row_shapes(env, shapes, 16);
    static const char *names[] = {"softmax", "log_softmax", "softmax_bwd"};
    for (int i = 0; i < ns; i++) {
        size_t rows = (size_t)shapes[i][0], cols = (size_t)shapes[i][1], n = rows * cols,
               shape[2] = {rows, cols};
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        double *ref = malloc(cols * 8 * sizeof *ref);
        row_case c = {env->ctx, {NULL}, 0};
        oclml_status st = (x && y && ref) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
        for (int k = 0; k < 4 && !st; k++) st = oclml_tensor_create(env->ctx, 2, shape, &c.t[k]);
        if (!st) {
            bench_random(x, n, 4);
            for (size_t j = 0; j < n; j++) x[j] *= 8;
            st = oclml_tensor_write(c.t[0], x, n);
        }
        if (!st) st = oclml_tensor_write(c.t[2], x, n); /* dy: any data */
        char variant[2][96] = {"", ""};
        if (!st)
            st = oclml_op_variant(env->ctx, "softmax", rows, cols, variant[0], sizeof variant[0]);
        if (!st)
            st = oclml_op_variant(env->ctx, "softmax_backward", rows, cols, variant[1],
                                  sizeof variant[1]);
        int rc = st ? bench_fail(env, st, "softmax setup") : 0;
        for (int op = 0; op < 3 && !rc; op++) {
            c.op = op;
            bench_result r = {.op = names[op], .variant = variant[op == SOFTMAX_BWD]};
            rc = bench_time(env, run_case, &c, &r.t);
            if (rc) break;
            char sh[48];
            snprintf(sh, sizeof sh, "%zux%zu", rows, cols);
            r.shape = sh;
            r.bytes = (op == SOFTMAX_BWD ? 12.0 : 8.0) * (double)n;
            r.max_rel_err = -1;
            if (op != SOFTMAX_BWD) { /* the first rows against the reference */
                size_t check = rows < 8 ? rows : 8;
                if ((st = oclml_tensor_read(c.t[1], y, n)))
                    rc = bench_fail(env, st, "download");
                else {
                    ref_softmax(check, cols, x, op == LOG_SOFTMAX, ref);
                    r.max_rel_err = max_rel(y, ref, check * cols);
                }
            }
            if (!rc) bench_report(env, &r);
        }
        for (int k = 0; k < 4; k++)
            if (c.t[k]) oclml_tensor_destroy(c.t[k]);
        free(x);
        free(y);
        free(ref);
        if (rc) return rc;
    }
    return 0;
}

/* ---- layernorm / rmsnorm ---- */
typedef struct norm_case {
    oclml_ctx *ctx;
    oclml_tensor *x, *y, *g, *b, *mean, *rstd, *dy, *dx, *dg, *db;
    int op;
} norm_case;

enum { LN_FWD, RMS_FWD, LN_BWD, RMS_BWD };

static oclml_status run_norm(void *user) {
    norm_case *c = user;
    switch (c->op) {
    case LN_FWD:
        return oclml_layernorm(c->ctx, c->x, c->g, c->b, 1e-5f, c->y, c->mean, c->rstd);
    case RMS_FWD:
        return oclml_rmsnorm(c->ctx, c->x, c->g, 1e-5f, c->y, c->rstd);
    case LN_BWD:
        return oclml_layernorm_backward(c->ctx, c->x, c->g, c->mean, c->rstd, c->dy, c->dx, c->dg,
                                        c->db);
    default:
        return oclml_rmsnorm_backward(c->ctx, c->x, c->g, c->rstd, c->dy, c->dx, c->dg);
    }
}

int bench_norm(bench_env *env) {
    long shapes[16][2];
    int ns = bench_row_shapes(env, shapes, 16);
    static const char *names[] = {"layernorm", "rmsnorm", "layernorm_bwd", "rmsnorm_bwd"};
    for (int i = 0; i < ns; i++) {
        size_t rows = (size_t)shapes[i][0], cols = (size_t)shapes[i][1], n = rows * cols,
               shape[2] = {rows, cols};
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *g = malloc(cols * sizeof *g);
        double *ref = malloc(cols * 8 * sizeof *ref);
        norm_case c = {.ctx = env->ctx};
        oclml_tensor **mats[] = {&c.x, &c.y, &c.dy, &c.dx}, **vecs[] = {&c.g, &c.b, &c.dg, &c.db};
        oclml_status st = (x && y && g && ref) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
        for (int k = 0; k < 4 && !st; k++) st = oclml_tensor_create(env->ctx, 2, shape, mats[k]);
        for (int k = 0; k < 4 && !st; k++) st = oclml_tensor_create(env->ctx, 1, &cols, vecs[k]);
        if (!st) st = oclml_tensor_create(env->ctx, 1, &rows, &c.mean);
        if (!st) st = oclml_tensor_create(env->ctx, 1, &rows, &c.rstd);
        if (!st) {
            bench_random(x, n, 5);
            bench_random(g, cols, 6);
            st = oclml_tensor_write(c.x, x, n);
        }
        if (!st) st = oclml_tensor_write(c.dy, x, n);
        if (!st) st = oclml_tensor_write(c.g, g, cols);
        if (!st) st = oclml_tensor_write(c.b, g, cols);
        char variant[2][96] = {"", ""};
        if (!st)
            st = oclml_op_variant(env->ctx, "layernorm", rows, cols, variant[0], sizeof variant[0]);
        if (!st)
            st = oclml_op_variant(env->ctx, "layernorm_backward", rows, cols, variant[1],
                                  sizeof variant[1]);
        int rc = st ? bench_fail(env, st, "norm setup") : 0;
        for (int op = 0; op < 4 && !rc; op++) {
            c.op = op;
            bench_result r = {.op = names[op], .variant = variant[op >= LN_BWD], .max_rel_err = -1};
            rc = bench_time(env, run_norm, &c, &r.t);
            if (rc) break;
            char sh[48];
            snprintf(sh, sizeof sh, "%zux%zu", rows, cols);
            r.shape = sh;
            /* Bytes that must move: forward reads x, writes y; backward reads x and dy, writes dx
             * (parameters and per-row statistics are small beside them). */
            r.bytes = (op >= LN_BWD ? 12.0 : 8.0) * (double)n;
            if (op < LN_BWD) {
                size_t check = rows < 8 ? rows : 8;
                if ((st = oclml_tensor_read(c.y, y, n)))
                    rc = bench_fail(env, st, "download");
                else {
                    ref_norm(op == RMS_FWD, check, cols, x, g, op == LN_FWD ? g : NULL, 1e-5, ref,
                             NULL, NULL);
                    r.max_rel_err = max_rel(y, ref, check * cols);
                }
            }
            if (!rc) bench_report(env, &r);
        }
        oclml_tensor *all[] = {c.x, c.y, c.dy, c.dx, c.g, c.b, c.dg, c.db, c.mean, c.rstd};
        for (int k = 0; k < 10; k++)
            if (all[k]) oclml_tensor_destroy(all[k]);
        free(x);
        free(y);
        free(g);
        free(ref);
        if (rc) return rc;
    }
    return bench_resnorm(env); /* bench_resnorm.c: the fused residual + norm */
}
