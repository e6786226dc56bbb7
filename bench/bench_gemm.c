/* GEMM through CLBlast: GFLOP/s against the device's measured FMA rate, result spot-checked
 * against the double-precision reference on sampled entries (a full reference at 8192 would
 * take minutes). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

#include "ref/ref.h"

typedef struct gemm_args {
    oclml_ctx *ctx;
    oclml_tensor *a, *b, *c;
} gemm_args;

static oclml_status gemm_run(void *user) {
    gemm_args *g = user;
    return oclml_gemm(g->ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, g->a, g->b, 0.0f, g->c);
}

static double sampled_error(const float *a, const float *b, const float *c, size_t n) {
    double worst = 0;
    unsigned long long s = 12345;
    for (int t = 0; t < 64; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t i = (size_t)(s >> 33) % n, j = (size_t)(s >> 13) % n;
        double want = ref_gemm_at(0, 0, n, n, n, 1.0, a, b, 0.0, NULL, i, j);
        /* Relative to the row's scale: |A row| |B col| bounds the dot product's rounding. */
        double scale = 0;
        for (size_t p = 0; p < n; p++) scale += fabs((double)a[i * n + p] * b[p * n + j]);
        worst = fmax(worst, fabs(c[i * n + j] - want) / (scale > 0 ? scale : 1));
    }
    return worst;
}

int bench_gemm(bench_env *env) {
    long sizes[8];
    int ns = bench_sizes(env, env->quick ? "256,512" : "1024,2048,4096,8192", sizes, 8);
    for (int i = 0; i < ns; i++) {
        size_t n = (size_t)sizes[i], shape[2] = {n, n};
        float *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b),
              *c = malloc(n * n * sizeof *c);
        gemm_args g = {env->ctx, NULL, NULL, NULL};
        oclml_status st = (a && b && c) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
        if (!st) st = oclml_tensor_create(env->ctx, 2, shape, &g.a);
        if (!st) st = oclml_tensor_create(env->ctx, 2, shape, &g.b);
        if (!st) st = oclml_tensor_create(env->ctx, 2, shape, &g.c);
        if (!st) {
            bench_random(a, n * n, 2);
            bench_random(b, n * n, 3);
            st = oclml_tensor_write(g.a, a, n * n);
        }
        if (!st) st = oclml_tensor_write(g.b, b, n * n);
        bench_result r = {.op = "gemm",
                          .variant = "CLBlast sgemm, timed from a marker before its first kernel"};
        int rc = st ? bench_fail(env, st, "gemm setup") : bench_time(env, gemm_run, &g, &r.t);
        if (!rc && (st = oclml_tensor_read(g.c, c, n * n))) rc = bench_fail(env, st, "download");
        if (!rc) {
            char sh[48];
            snprintf(sh, sizeof sh, "%zux%zux%zu", n, n, n);
            r.shape = sh;
            r.flops = 2.0 * (double)n * n * n;
            r.max_rel_err = sampled_error(a, b, c, n);
            bench_report(env, &r);
        }
        if (g.a) oclml_tensor_destroy(g.a);
        if (g.b) oclml_tensor_destroy(g.b);
        if (g.c) oclml_tensor_destroy(g.c);
        free(a);
        free(b);
        free(c);
        if (rc) return rc;
    }
    return 0;
}
