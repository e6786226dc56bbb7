/* The host time of one op call, the enqueue alone: small softmax calls ([4 x 16]) in a loop,
 * the least over five rounds of the mean per call (the device catches up after each round).
 * The Python package's test times the same loop from Python against this figure (a call from
 * Python costs the C call plus what the binding adds). */
#include "bench.h"

#include <stdio.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e6 * (double)t.tv_sec + 1e-3 * (double)t.tv_nsec;
}

int bench_callcost(bench_env *env) {
    const size_t shape[2] = {4, 16};
    const int calls = 2000;
    /* A context of its own without profiling, as an application (and the Python package)
     * creates one: a profiling queue costs the device time per kernel. */
    oclml_ctx_config opts = env->opts;
    opts.profiling = 0;
    oclml_ctx *ctx;
    char err[1024];
    oclml_status st = oclml_ctx_create(&ctx, &opts, err, sizeof err);
    if (st) return bench_fail(env, st, "context");
    oclml_tensor *x = NULL, *y = NULL;
    st = oclml_tensor_create(ctx, 2, shape, &x);
    if (!st) st = oclml_tensor_create(ctx, 2, shape, &y);
    if (!st) st = oclml_fill(ctx, x, 0.5f);
    for (int i = 0; i < 20 && !st; i++) st = oclml_softmax(ctx, x, y); /* compile, warm */
    if (!st) st = oclml_ctx_finish(ctx);
    double best = 1e30;
    for (int round = 0; round < 5 && !st; round++) {
        double t0 = now_us();
        for (int i = 0; i < calls && !st; i++) st = oclml_softmax(ctx, x, y);
        double per = (now_us() - t0) / calls;
        if (per < best) best = per;
        if (!st) st = oclml_ctx_finish(ctx);
    }
    if (x) oclml_tensor_destroy(x);
    if (y) oclml_tensor_destroy(y);
    oclml_ctx_destroy(ctx);
    if (st) return bench_fail(env, st, "softmax calls");
    printf("call cost: oclml_softmax [4 x 16], the enqueue alone: %.2f us a call (best of 5 "
           "rounds of %d)\n",
           best, calls);
    if (env->json)
        fprintf(env->json,
                "{\"op\":\"call_cost\",\"shape\":\"softmax 4x16\",\"device\":\"%s\","
                "\"median_ms\":%.6f,\"us_per_call\":%.3f}\n",
                env->dev.device_name, best * 1e-3, best);
    return 0;
}
