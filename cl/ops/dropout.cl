/* Dropout (cl/include/philox.h states the keep rule): out = base + in * m, m = scale where element
 * i's uniform under (seed, offset) is >= p and 0 where not, scale = 1 / (1 - p) (0 at p = 1).
 * base is absent (0) for oclml_dropout and its backward, x for the residual add x + dropout(y).
 * A dropped NaN stays NaN (NaN * 0), as PyTorch's multiply by the mask.
 * Work-items stride over groups of four elements, one Philox draw a group (its four words are the
 * four elements'); vload4/vstore4 need only element alignment, so any tensor offset works, and out
 * may alias in or base (each element is read and written by one work-item). At p = 0 every
 * uniform is >= p and at p = 1 none is, so those skip the draws: m is the scale (1, or 0), the
 * same bits the rule gives, and dropout switched off costs a copy (an add).
 * dtypes (dtype.h's numbers, fp32 by default): IN_DT, BASE_DT, OUT_DT. Each element is read as a
 * float, the math is fp32 and out rounded once; the mask depends on the element's index alone,
 * so every dtype drops the elements fp32 drops. out may alias in or base only of its own element
 * size (the host's check). */
#include "dtype.h"
#include "philox.h"

#ifndef IN_DT
#define IN_DT 0
#endif
#ifndef BASE_DT
#define BASE_DT 0
#endif
#ifndef OUT_DT
#define OUT_DT 0
#endif

/* base + in m rounded twice, never fused into one fma: the fused residual + norm computes r so
 * (norm.cl's res_add), and oclml_dropout_add's r must equal it bit for bit (NVIDIA's compiler
 * contracted it here otherwise). */
#pragma OPENCL FP_CONTRACT OFF

#if OCLML_CHUNKS
/* CPUs: the work-item's chunk of whole groups in one loop of scalar code (the generator's words,
 * each element's multiplier), which the compiler vectorises across groups; a partial last group
 * goes to the strided loop below. Element e of group j takes word e % 4 of draw j,
 * dropout_uniforms' rule. A loop each for with and without base: the test inside the loop kept
 * it from vectorising (7x slower on PoCL). */
#define DROP_ELEMENT(w, k, with_base)                              \
    {                                                              \
        const float u_ = (float)((w) >> 8) * (1.0f / 16777216.0f); \
        const float m_ = u_ >= p ? scale : 0.0f;                   \
        const ulong e_ = 4 * j + (k);                              \
        float v_ = DT_LOAD(IN_DT, in + io, e_) * m_;               \
        if (with_base) v_ += DT_LOAD(BASE_DT, base + bo, e_);      \
        DT_STORE(OUT_DT, out + oo, e_, v_);                        \
    }
#define DROP_GROUPS(with_base)                                                            \
    for (ulong j = first; j < last; j++) {                                                \
        const ulong c = offset + j;                                                       \
        uint w0 = (uint)c, w1 = (uint)(c >> 32), w2 = DROPOUT_TAG, w3 = 0u, k0 = seed_lo, \
             k1 = seed_hi;                                                                \
        PHILOX_ROUNDS(w0, w1, w2, w3, k0, k1)                                             \
        DROP_ELEMENT(w0, 0, with_base)                                                    \
        DROP_ELEMENT(w1, 1, with_base)                                                    \
        DROP_ELEMENT(w2, 2, with_base)                                                    \
        DROP_ELEMENT(w3, 3, with_base)                                                    \
    }
#endif

#if OCLML_WANT(oclml_dropout)
__kernel void oclml_dropout(__global const DT_ELEM(IN_DT) * in, ulong io,
                            __global const DT_ELEM(BASE_DT) * base, ulong bo,
                            __global DT_ELEM(OUT_DT) * out, ulong oo, ulong n, float p, float scale,
                            uint seed_lo, uint seed_hi, ulong offset, uint has_base) {
    const uint2 seed = (uint2)(seed_lo, seed_hi);
    const ulong groups = (n + 3) / 4;
#if OCLML_CHUNKS
    OCLML_CHUNK(n / 4, first, last)
    const bool draws = p > 0.0f && p < 1.0f;
    if (draws && has_base) {
        DROP_GROUPS(true)
    } else if (draws) {
        DROP_GROUPS(false)
    } else { /* no draws: every element kept (p 0, m 1) or dropped (p 1, m = scale = 0) */
        const float m = p > 0.0f ? scale : 1.0f;
        if (has_base)
            for (ulong e = 4 * first; e < 4 * last; e++)
                DT_STORE(OUT_DT, out + oo, e,
                         DT_LOAD(IN_DT, in + io, e) * m + DT_LOAD(BASE_DT, base + bo, e));
        else
            for (ulong e = 4 * first; e < 4 * last; e++)
                DT_STORE(OUT_DT, out + oo, e, DT_LOAD(IN_DT, in + io, e) * m);
    }
    for (ulong j = n / 4 + get_global_id(0); j < groups; j += get_global_size(0)) {
#else
    for (ulong j = get_global_id(0); j < groups; j += get_global_size(0)) {
#endif
        const float4 m = p < 1.0f ? drop_mult4(j, p, scale, seed, offset) : (float4)(scale);
        const ulong e = 4 * j;
        if (e + 4 <= n) {
            float4 v = DT_VLOAD4(IN_DT, in + io + e, 0) * m;
            if (has_base) v += DT_VLOAD4(BASE_DT, base + bo + e, 0);
            DT_VSTORE4(OUT_DT, out + oo + e, 0, v);
        } else {
            const float ms[4] = {m.x, m.y, m.z, m.w};
            for (ulong k = e; k < n; k++) {
                float v = DT_LOAD(IN_DT, in + io, k) * ms[k - e];
                if (has_base) v += DT_LOAD(BASE_DT, base + bo, k);
                DT_STORE(OUT_DT, out + oo, k, v);
            }
        }
    }
}
#endif
