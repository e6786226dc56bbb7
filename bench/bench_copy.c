/* Copy bandwidth: oclml_copy over buffers far larger than any cache. This is the device's
 * practical memory limit that every memory-bound op is set against. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

typedef struct copy_args {
    oclml_ctx *ctx;
    oclml_tensor *src, *dst;
} copy_args;

static oclml_status copy_run(void *user) {
    copy_args *c = user;
    return oclml_copy(c->ctx, c->src, c->dst);
}

int bench_copy_probe(bench_env *env, size_t n, bench_timing *t, double *max_err) {
    while ((double)n * sizeof(float) > (double)env->dev.max_alloc_bytes) n /= 2;
    float *host = malloc(n * sizeof *host), *back = malloc(n * sizeof *back);
    copy_args c = {env->ctx, NULL, NULL};
    oclml_status st = (host && back) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
    if (!st) st = oclml_tensor_create(env->ctx, 1, &n, &c.src);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &n, &c.dst);
    int rc = st ? bench_fail(env, st, "copy buffers") : 0;
    if (!rc) {
        bench_random(host, n, 1);
        st = oclml_tensor_write(c.src, host, n);
        rc = st ? bench_fail(env, st, "upload") : bench_time(env, copy_run, &c, t);
    }
    if (!rc && max_err) {
        st = oclml_tensor_read(c.dst, back, n);
        if (st) rc = bench_fail(env, st, "download");
        double worst = 0;
        for (size_t i = 0; !rc && i < n; i++) worst = fmax(worst, fabs((double)back[i] - host[i]));
        *max_err = worst;
    }
    if (c.src) oclml_tensor_destroy(c.src);
    if (c.dst) oclml_tensor_destroy(c.dst);
    free(host);
    free(back);
    return rc;
}

int bench_copy(bench_env *env) {
    long sizes[8];
    int ns = bench_sizes(env, env->quick ? "16777216" : "268435456", sizes, 8);
    for (int i = 0; i < ns; i++) {
        bench_result r = {.op = "copy",
                          .variant = bench_cpu_layout(env) ? "a contiguous chunk a work-item"
                                                           : "float4 grid-stride"};
        char shape[32];
        snprintf(shape, sizeof shape, "%ld", sizes[i]);
        r.shape = shape;
        if (bench_copy_probe(env, (size_t)sizes[i], &r.t, &r.max_rel_err)) return 1;
        r.bytes = 8.0 * (double)sizes[i];
        bench_report(env, &r);
    }
    return 0;
}
