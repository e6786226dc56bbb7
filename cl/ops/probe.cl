/* Peak fp32 FMA probe: 16 independent FMA chains per work-item keep every FMA pipe busy without
 * touching memory, so the rate it reaches is the device's arithmetic limit. m and c come in at run
 * time so the compiler cannot fold the chains. */
#include "common.h"
#if OCLML_WANT(oclml_probe_fma)
__kernel void oclml_probe_fma(__global float *out, float m, float c, int iters) {
    const float base = (float)get_global_id(0) * 1e-6f;
    float a0 = base, a1 = base + 1.0f, a2 = base + 2.0f, a3 = base + 3.0f;
    float a4 = base + 4.0f, a5 = base + 5.0f, a6 = base + 6.0f, a7 = base + 7.0f;
    float a8 = base + 8.0f, a9 = base + 9.0f, a10 = base + 10.0f, a11 = base + 11.0f;
    float a12 = base + 12.0f, a13 = base + 13.0f, a14 = base + 14.0f, a15 = base + 15.0f;
    for (int i = 0; i < iters; i++) {
        a0 = fma(a0, m, c);
        a1 = fma(a1, m, c);
        a2 = fma(a2, m, c);
        a3 = fma(a3, m, c);
        a4 = fma(a4, m, c);
        a5 = fma(a5, m, c);
        a6 = fma(a6, m, c);
        a7 = fma(a7, m, c);
        a8 = fma(a8, m, c);
        a9 = fma(a9, m, c);
        a10 = fma(a10, m, c);
        a11 = fma(a11, m, c);
        a12 = fma(a12, m, c);
        a13 = fma(a13, m, c);
        a14 = fma(a14, m, c);
        a15 = fma(a15, m, c);
    }
    out[get_global_id(0)] = ((((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) +
                             (((a8 + a9) + (a10 + a11)) + ((a12 + a13) + (a14 + a15))));
}
#endif
