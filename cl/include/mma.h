/* The tensor-core helpers of the 3xTF32 kernels (GEMM, attention): the split of a float into
 * tf32 parts, and MMA(d, a0..a3, b0, b1), the m16n8k8 TF32 instruction (ptx.h's mma_tf32) or,
 * with MMA_EMULATE, a portable emulation with the same fragment layout, so that the kernels run
 * and are tested on every device. Includers define MMA_EMULATE (0 or 1) and MMA_TF32_ONLY (1:
 * the plain TF32 mode reads hi alone) before including, and with MMA_EMULATE declare the
 * emulation's exchange buffer `xchg` (MMA_XCHG_FLOATS per warp) and gid, tig where they call
 * MMA. */
#ifndef OCLML_MMA_H
#define OCLML_MMA_H

#include "common.h"

#ifndef MMA_TF32_ONLY
#define MMA_TF32_ONLY 0
#endif

/* v = hi + lo, hi rounded to its top 11 significant bits (tf32), lo the rest: hi*hi + hi*lo +
 * lo*hi is a*b to ~2^-21 relative where one tf32 product is off by ~2^-11. The tensor cores read
 * only lo's tf32 bits; what they drop is ~2^-22 of v. Infinities, NaN and values that round to
 * infinity give lo = NaN: such products come out NaN (the GEMM's epilogue recomputes every NaN
 * output in fp32, so its results keep IEEE semantics: inf * 1 = inf). The TF32 mode
 * reads hi alone: a NaN keeps a NaN hi there (rounding would carry its payload away). */
OCLML_INLINE void tf32_split(float v, uint *hi, uint *lo) {
    const uint h = (as_uint(v) + 0x1000u) & 0xffffe000u;
#if MMA_TF32_ONLY
    *hi = isnan(v) ? 0x7fffffffu : h;
#else
    *hi = h;
#endif
    *lo = as_uint(v - as_float(h));
}

#if MMA_EMULATE
/* The m16n8k8 TF32 instruction in portable code, with its fragment layout (gid = lane / 4,
 * tig = lane % 4): a0..a3 hold A[gid][tig], A[gid + 8][tig], A[gid][tig + 4], A[gid + 8][tig + 4];
 * b0, b1 hold B[tig][gid], B[tig + 4][gid]; d[i] is D[gid + 8 (i / 2)][2 tig + i % 2]. The
 * warp's work-items exchange their fragments through xchg (16 x 8 + 8 x 8 floats per warp), so
 * every work-item of the work-group calls it together. Inputs are cut to their tf32 bits, as
 * the tensor cores read them. */
#define MMA_XCHG_FLOATS (16 * 8 + 8 * 8)
OCLML_INLINE void mma_emulated(float *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1,
                               __local float *xchg, uint gid, uint tig) {
    __local float *xa = xchg, *xb = xchg + 16 * 8;
    const uint cut = 0xffffe000u;
    barrier(CLK_LOCAL_MEM_FENCE);
    xa[gid * 8 + tig] = as_float(a0 & cut);
    xa[(gid + 8) * 8 + tig] = as_float(a1 & cut);
    xa[gid * 8 + tig + 4] = as_float(a2 & cut);
    xa[(gid + 8) * 8 + tig + 4] = as_float(a3 & cut);
    xb[tig * 8 + gid] = as_float(b0 & cut);
    xb[(tig + 4) * 8 + gid] = as_float(b1 & cut);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = 0; i < 4; i++) {
        const uint r = gid + 8 * (i / 2), c = 2 * tig + i % 2;
        float sum = d[i];
        for (uint k = 0; k < 8; k++) sum = fma(xa[r * 8 + k], xb[k * 8 + c], sum);
        d[i] = sum;
    }
}
#define MMA(d, a0, a1, a2, a3, b0, b1) mma_emulated(d, a0, a1, a2, a3, b0, b1, xchg, gid, tig)
#define MMA_XCHG_PARAM , __local float *xchg
#define MMA_XCHG_ARG , xchg
#else
#define MMA(d, a0, a1, a2, a3, b0, b1) mma_tf32(d, a0, a1, a2, a3, b0, b1)
#define MMA_XCHG_PARAM
#define MMA_XCHG_ARG
#endif

#endif
