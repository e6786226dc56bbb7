/* Benchmark harness: timing, limits, reporting. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_fail(bench_env *env, oclml_status st, const char *what) {
    fprintf(stderr, "oclml-bench: %s: %s\n%s\n", what, oclml_status_name(st),
            oclml_ctx_last_error(env->ctx));
    return 1;
}

static void read_cpu_layout(void *user, const char *key, const char *value, const char *source,
                            const char *help) {
    (void)source;
    (void)help;
    if (!strcmp(key, "cpu.layout")) *(int *)user = atoi(value) != 0;
}

int bench_cpu_layout(const bench_env *env) {
    int on = 1;
    if (env->dev.is_gpu || oclml_ctx_tuning(env->ctx, read_cpu_layout, &on)) return 0;
    return on;
}

int bench_time(bench_env *env, bench_fn fn, void *user, bench_timing *t) {
    oclml_status st;
    for (int i = 0; i < env->warm; i++)
        if ((st = fn(user))) return bench_fail(env, st, "warm-up run");
    if ((st = oclml_ctx_finish(env->ctx))) return bench_fail(env, st, "finish");
    double *ms = calloc((size_t)env->reps, sizeof *ms);
    if (!ms) return 1;
    for (int i = 0; i < env->reps; i++) {
        st = oclml_ctx_profile_begin(env->ctx);
        if (!st) st = fn(user);
        if (!st) st = oclml_ctx_profile_end(env->ctx, &ms[i]);
        if (st) {
            free(ms);
            return bench_fail(env, st, "timed run");
        }
    }
    qsort(ms, (size_t)env->reps, sizeof *ms, cmp_double);
    t->median_ms = ms[env->reps / 2];
    t->min_ms = ms[0];
    t->max_ms = ms[env->reps - 1];
    free(ms);
    return 0;
}

void bench_table_header(void) {
    printf("%-12s %-22s %10s %10s %10s %10s %7s %9s  %s\n", "op", "shape", "median_ms", "min_ms",
           "GB/s", "GFLOP/s", "limit", "rel_err", "variant");
}

void bench_report(bench_env *env, const bench_result *r) {
    double s = r->t.median_ms * 1e-3;
    double gbps = r->bytes > 0 ? r->bytes / s / 1e9 : 0;
    double gflops = r->flops > 0 ? r->flops / s / 1e9 : 0;
    double limit = 0;
    if (gbps > 0)
        limit = gbps / bench_copy_gbps(env);
    else if (gflops > 0)
        limit = gflops / bench_fma_gflops(env);
    char g1[32] = "-", g2[32] = "-", lf[32] = "-", re[32] = "-";
    if (gbps > 0) snprintf(g1, sizeof g1, "%.1f", gbps);
    if (gflops > 0) snprintf(g2, sizeof g2, "%.1f", gflops);
    if (limit > 0) snprintf(lf, sizeof lf, "%.0f%%", 100 * limit);
    if (r->max_rel_err >= 0) snprintf(re, sizeof re, "%.1e", r->max_rel_err);
    printf("%-12s %-22s %10.4f %10.4f %10s %10s %7s %9s  %s\n", r->op, r->shape, r->t.median_ms,
           r->t.min_ms, g1, g2, lf, re, r->variant ? r->variant : "");
    fflush(stdout);
    if (!env->json) return;
    fprintf(env->json,
            "{\"op\":\"%s\",\"shape\":\"%s\",\"impl\":\"oclml\",\"device\":\"%s\","
            "\"median_ms\":%.5f,\"min_ms\":%.5f,\"max_ms\":%.5f",
            r->op, r->shape, env->dev.device_name, r->t.median_ms, r->t.min_ms, r->t.max_ms);
    if (gbps > 0) fprintf(env->json, ",\"gbps\":%.1f", gbps);
    if (gflops > 0) fprintf(env->json, ",\"gflops\":%.1f", gflops);
    if (limit > 0) fprintf(env->json, ",\"limit_fraction\":%.3f", limit);
    if (r->max_rel_err >= 0) fprintf(env->json, ",\"max_rel_err\":%.3g", r->max_rel_err);
    if (r->variant) fprintf(env->json, ",\"variant\":\"%s\"", r->variant);
    if (r->extra_json) fprintf(env->json, ",%s", r->extra_json);
    fprintf(env->json, "}\n");
    fflush(env->json);
}

double bench_fma_gflops(bench_env *env) {
    if (env->fma_gflops == 0) {
        oclml_status st = oclml_probe_fma_gflops(env->ctx, &env->fma_gflops);
        if (st) {
            bench_fail(env, st, "FMA probe");
            env->fma_gflops = -1;
        }
    }
    return env->fma_gflops;
}

/* The copy rate is measured once per run (bench_copy.c), with buffers far larger than any cache. */
double bench_copy_gbps(bench_env *env) {
    if (env->copy_gbps == 0) {
        size_t n = env->quick ? (size_t)16 << 20 : (size_t)256 << 20;
        bench_timing t;
        env->copy_gbps =
            bench_copy_probe(env, n, &t, NULL) ? -1 : 8.0 * (double)n / (t.median_ms * 1e-3) / 1e9;
    }
    return env->copy_gbps;
}

int bench_sizes(const bench_env *env, const char *defaults, long *out, int max) {
    const char *s = env->sizes ? env->sizes : defaults;
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0) break;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int bench_shapes(const char *s, int dims, long *out, int max) {
    int n = 0;
    while (s && *s && n < max) {
        const char *item = s;
        char *end = (char *)s;
        for (int d = 0; d < dims; d++) {
            long v = strtol(item, &end, 10);
            if (end == item || v <= 0 || (d + 1 < dims && *end != 'x')) return n;
            out[n * dims + d] = v;
            item = end + 1;
        }
        n++;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

void bench_random(float *x, size_t n, unsigned seed) {
    unsigned long long state = 0x9E3779B97F4A7C15ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

double bench_gemm_error(const float *a, const float *b, const float *c, size_t m, size_t n,
                        size_t k) {
    double worst = 0;
    unsigned long long s = 12345;
    for (int t = 0; t < 64; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const size_t i = (size_t)(s >> 33) % m, j = (size_t)(s >> 13) % n;
        double want = 0, scale = 0;
        for (size_t p = 0; p < k; p++) {
            const double x = (double)a[i * k + p] * b[p * n + j];
            want += x;
            scale += fabs(x);
        }
        worst = fmax(worst, fabs(c[i * n + j] - want) / (scale > 0 ? scale : 1));
    }
    return worst;
}
