/* Peak fp32 FMA probe: 16 independent FMA chains per work-item keep every FMA pipe busy without
 * touching memory, so the rate it reaches is the device's arithmetic limit. m and c come in at run
 * time so the compiler cannot fold the chains. On GPUs a chain is a float (the hardware's vectors
 * run across work-items); on CPUs it is a vector of PROBE_LANES floats, the SIMD width, since a
 * CPU runtime runs the work-items of a work-group one after another around the loop. Lane l of
 * chain j starts at base + j + l / 1024 (exact), so that no two lanes are equal and none folds;
 * the result is the sum of the chains, then of the lanes (lib/ops/probe.c repeats it). */
#include "common.h"
#ifndef PROBE_LANES
#define PROBE_LANES 1
#endif
#if PROBE_LANES == 1
#define probe_t float
#define LANE_OFFSETS 0.0f
#define LANE_SUM(v) (v)
#elif PROBE_LANES == 4
#define probe_t float4
#define LANE_OFFSETS (float4)(0.0f, 1.0f, 2.0f, 3.0f) / 1024.0f
#define LANE_SUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
#elif PROBE_LANES == 8
#define probe_t float8
#define LANE_OFFSETS (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f) / 1024.0f
#define LANE_SUM(v) \
    ((((v).s0 + (v).s1) + ((v).s2 + (v).s3)) + (((v).s4 + (v).s5) + ((v).s6 + (v).s7)))
#elif PROBE_LANES == 16
#define probe_t float16
#define LANE_OFFSETS                                                                           \
    (float16)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f, 11.0f, 12.0f, \
              13.0f, 14.0f, 15.0f) /                                                           \
        1024.0f
#define LANE_SUM8(v) \
    ((((v).s0 + (v).s1) + ((v).s2 + (v).s3)) + (((v).s4 + (v).s5) + ((v).s6 + (v).s7)))
#define LANE_SUM(v) (LANE_SUM8((v).lo) + LANE_SUM8((v).hi))
#else
#error "PROBE_LANES: 1, 4, 8 or 16"
#endif

#if OCLML_WANT(oclml_probe_fma)
__kernel void oclml_probe_fma(__global float *out, float m, float c, int iters) {
    const float base = (float)get_global_id(0) * 1e-6f;
    const probe_t off = LANE_OFFSETS, mv = (probe_t)(m), cv = (probe_t)(c);
    probe_t a0 = base + off, a1 = (base + 1.0f) + off, a2 = (base + 2.0f) + off,
            a3 = (base + 3.0f) + off;
    probe_t a4 = (base + 4.0f) + off, a5 = (base + 5.0f) + off, a6 = (base + 6.0f) + off,
            a7 = (base + 7.0f) + off;
    probe_t a8 = (base + 8.0f) + off, a9 = (base + 9.0f) + off, a10 = (base + 10.0f) + off,
            a11 = (base + 11.0f) + off;
    probe_t a12 = (base + 12.0f) + off, a13 = (base + 13.0f) + off, a14 = (base + 14.0f) + off,
            a15 = (base + 15.0f) + off;
    for (int i = 0; i < iters; i++) {
        a0 = fma(a0, mv, cv);
        a1 = fma(a1, mv, cv);
        a2 = fma(a2, mv, cv);
        a3 = fma(a3, mv, cv);
        a4 = fma(a4, mv, cv);
        a5 = fma(a5, mv, cv);
        a6 = fma(a6, mv, cv);
        a7 = fma(a7, mv, cv);
        a8 = fma(a8, mv, cv);
        a9 = fma(a9, mv, cv);
        a10 = fma(a10, mv, cv);
        a11 = fma(a11, mv, cv);
        a12 = fma(a12, mv, cv);
        a13 = fma(a13, mv, cv);
        a14 = fma(a14, mv, cv);
        a15 = fma(a15, mv, cv);
    }
    const probe_t sum = ((((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) +
                         (((a8 + a9) + (a10 + a11)) + ((a12 + a13) + (a14 + a15))));
    out[get_global_id(0)] = LANE_SUM(sum);
}
#endif
