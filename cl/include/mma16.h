/* The 16-bit tensor-core kernels' instruction (gemm_lp.cl, attention_lp_fwd.cl): m16n8k16 on bf16
 * or fp16 operands (AB_DT, dtype.h's 1 or 2) with fp32 accumulation. Where the build has inline
 * PTX and MMA_EMULATE is 0, ptx.h's mma_16bit; otherwise (MMA_EMULATE forced 1 where there is
 * no inline PTX) mma_emulated, the instruction in portable code with its fragment layouts, so
 * that the suite checks the kernels on any device. Includers define AB_DT, and any other ptx.h
 * helper they want (OCLML_WANT_CP_ASYNC, ...), before including this header.
 *
 * Fragments (gid = lane / 4, tig = lane % 4): A's words a0..a3 hold A[gid][2 tig, +1],
 * A[gid + 8][2 tig, +1], A[gid][2 tig + 8, +9], A[gid + 8][2 tig + 8, +9]; B's b0, b1 hold
 * B[2 tig, +1][gid], B[2 tig + 8, +9][gid] (the lower index in the low half); d[i] is
 * D[gid + 8 (i / 2)][2 tig + i % 2]. */
#ifndef OCLML_MMA16_H
#define OCLML_MMA16_H

#include "dtype.h"

#ifndef OCLML_PTX
#define OCLML_PTX 0
#endif
#ifndef MMA_EMULATE
#define MMA_EMULATE 0
#endif
#if !OCLML_PTX /* the instructions exist only as inline PTX: elsewhere the emulation */
#undef MMA_EMULATE
#define MMA_EMULATE 1
#endif
#if !MMA_EMULATE
#define OCLML_WANT_MMA_16BIT AB_DT
#endif
#include "ptx.h"

#if MMA_EMULATE
/* A warp's exchange buffer: its A and B fragments as floats. */
#define XCHG_FLOATS (16 * 16 + 16 * 8)

/* The value in a fragment word's low half. */
OCLML_INLINE float mma16_lo(uint w) {
#if AB_DT == 1
    return bf16_to_float((ushort)w);
#else
    return fp16_to_float((ushort)w);
#endif
}

/* d += A B on the warp's fragments, exchanged through its xchg buffer: every work-item of the
 * work-group calls it together (barriers). */
OCLML_INLINE void mma_emulated(float *d, const uint *a, const uint *b, __local float *xchg,
                               uint gid, uint tig) {
    __local float *xa = xchg, *xb = xchg + 16 * 16;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint q = 0; q < 4; q++) {
        const uint r = gid + 8 * (q & 1), k = 2 * tig + 8 * (q >> 1);
        xa[r * 16 + k] = mma16_lo(a[q]);
        xa[r * 16 + k + 1] = mma16_lo(a[q] >> 16);
    }
    for (uint q = 0; q < 2; q++) {
        const uint k = 2 * tig + 8 * q;
        xb[k * 8 + gid] = mma16_lo(b[q]);
        xb[(k + 1) * 8 + gid] = mma16_lo(b[q] >> 16);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = 0; i < 4; i++) {
        const uint r = gid + 8 * (i / 2), c = 2 * tig + i % 2;
        float sum = d[i];
        for (uint k = 0; k < 16; k++) sum = fma(xa[r * 16 + k], xb[k * 8 + c], sum);
        d[i] = sum;
    }
}
#endif

#endif
