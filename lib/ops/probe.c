/* Device limit probe: the fp32 FMA rate (cl/ops/probe.cl). */
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PROBE_ITERS 2048
#define PROBE_CHAINS 16

/* Floats a chain holds: the CPU's SIMD width (probe.cl), one on GPUs (and with cpu.layout=0). */
static unsigned lanes_of(const oclml_ctx *ctx) {
    unsigned v = ctx->caps.vector_floats;
    return oclml__cpu_layout(ctx) && (v == 4 || v == 8 || v == 16) ? v : 1;
}

/* Sum of n (a power of two) values in pairs, as probe.cl's LANE_SUM adds the lanes. */
static float pair_sum(const float *v, unsigned n) {
    return n == 1 ? v[0] : pair_sum(v, n / 2) + pair_sum(v + n / 2, n / 2);
}

/* The host's value of one work-item's result, with the kernel's exact operation order. fmaf is
 * correctly rounded like OpenCL's fma, so device and host agree bit for bit. */
static float expected(size_t gid, unsigned lanes, float m, float c) {
    float lane_sums[16];
    const float base = (float)gid * 1e-6f;
    for (unsigned l = 0; l < lanes; l++) {
        float a[PROBE_CHAINS];
        for (int j = 0; j < PROBE_CHAINS; j++) a[j] = (base + (float)j) + (float)l / 1024.0f;
        for (int i = 0; i < PROBE_ITERS; i++)
            for (int j = 0; j < PROBE_CHAINS; j++) a[j] = fmaf(a[j], m, c);
        lane_sums[l] = pair_sum(a, PROBE_CHAINS);
    }
    return pair_sum(lane_sums, lanes);
}

/* Checks a few work-items' results, so a miscompiled or skipped probe cannot report a rate. */
static oclml_status verify(oclml_ctx *ctx, cl_mem out, size_t global, unsigned lanes, float m,
                           float c) {
    size_t idx[4] = {0, 1, global / 2 + 7, global - 1};
    for (int i = 0; i < 4; i++) {
        float got;
        cl_int err = clEnqueueReadBuffer(ctx->queue, out, CL_TRUE, idx[i] * sizeof got, sizeof got,
                                         &got, 0, NULL, NULL);
        if (err) return oclml__cl_fail(ctx, err, "clEnqueueReadBuffer (probe)");
        float want = expected(idx[i], lanes, m, c);
        if (!(fabsf(got - want) <= 1e-5f * fabsf(want)))
            return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED,
                               "FMA probe result wrong at work-item %zu: %.9g, expected %.9g",
                               idx[i], (double)got, (double)want);
    }
    return OCLML_SUCCESS;
}

/* The probe's program: chains of lanes_of floats (PROBE_LANES) where more than one. */
static oclml__program_spec probe_spec(const oclml_ctx *ctx, char *defines, size_t len) {
    const unsigned lanes = lanes_of(ctx);
    snprintf(defines, len, "-DPROBE_LANES=%u", lanes);
    return (oclml__program_spec){"probe.cl", lanes > 1 ? defines : NULL, "oclml_probe_fma", 0};
}

oclml_status oclml_probe_fma_gflops(oclml_ctx *ctx, double *gflops) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!gflops) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "gflops is NULL");
    cl_kernel k;
    const unsigned lanes = lanes_of(ctx);
    char defines[32];
    oclml__program_spec spec = probe_spec(ctx, defines, sizeof defines);
    st = oclml__kernel(ctx, &spec, "oclml_probe_fma", &k);
    if (st) return st;
    /* GPUs: 32 work-groups of 256 a compute unit. CPUs run a work-group's work-items in turn:
     * 128 groups of 16 a core, each work-item lanes times the work. */
    size_t local = lanes > 1 ? 16 : 256;
    if (local > ctx->caps.max_work_group_size) local = ctx->caps.max_work_group_size;
    size_t global = (size_t)ctx->caps.compute_units * (lanes > 1 ? 128 : 32) * local;
    cl_int err;
    cl_mem out =
        clCreateBuffer(ctx->context, CL_MEM_WRITE_ONLY, global * sizeof(float), NULL, &err);
    if (!out) return oclml__cl_fail(ctx, err, "clCreateBuffer (probe)");
    float m = 0.999f, c = 0.001f;
    cl_int iters = PROBE_ITERS;
    oclml__arg args[] = {OCLML_ARG(out), OCLML_ARG(m), OCLML_ARG(c), OCLML_ARG(iters)};
    /* The best of a few runs: the first may pay clock ramp-up. Host timing around clFinish keeps
     * this independent of the queue's profiling flag; the run is long enough (>1 ms on a large
     * GPU) for the launch latency to be small beside it. */
    double best = 0;
    for (int rep = 0; rep < 5 && !st; rep++) {
        double t0 = oclml__now_ms();
        st = oclml__launch(ctx, k, args, 4, 1, &global, &local, NULL);
        err = st ? CL_SUCCESS : clFinish(ctx->queue);
        if (err) st = oclml__cl_fail(ctx, err, "clFinish");
        double ms = oclml__now_ms() - t0;
        double rate = (double)global * PROBE_ITERS * PROBE_CHAINS * lanes * 2 / (ms * 1e-3) / 1e9;
        if (rate > best) best = rate;
    }
    if (!st) st = verify(ctx, out, global, lanes, m, c);
    clReleaseMemObject(out);
    if (!st) *gflops = best;
    return st;
}

void oclml__probe_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    char defines[32];
    oclml__warm_add(list, op, "FMA chains", probe_spec(ctx, defines, sizeof defines));
}
