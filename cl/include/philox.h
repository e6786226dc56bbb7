/* Philox4x32-10 (Salmon et al. 2011), the counter-based generator of RSSM.md, and dropout's
 * keep rule on it. A counter-based generator needs no state: a value is a function of (key,
 * counter), so a backward regenerates the forward's mask and a (seed, offset) pair reproduces a
 * run on any device.
 *
 * Dropout (every op that drops: oclml_dropout, the fused residual + norm, ...): element i of a
 * tensor (its flat index) under seed s and offset o takes word i % 4 of
 * philox4x32_10((c_lo, c_hi, DROPOUT_TAG, 0), (s_lo, s_hi)) with c = o + i / 4 (64-bit), as
 * u = (word >> 8) 2^-24 in [0, 1); it is kept iff u >= p. A call covers counters o .. o +
 * ceil(n / 4) - 1: callers advance o by that much between calls that must differ
 * (oclml_dropout_counters). tests/ref/dropout.c is the same rule on the host. */
#ifndef OCLML_PHILOX_H
#define OCLML_PHILOX_H

/* The rounds on scalar words (c0..c3 in, the four output words out), unrolled: a CPU compiler
 * vectorises a loop of these across its iterations, which it does not do with vector types. */
#define PHILOX_ROUNDS(c0, c1, c2, c3, k0, k1)                                 \
    _Pragma("unroll") for (uint r_ = 0; r_ < 10; r_++) {                      \
        const uint lo0_ = (c0)*0xD2511F53u, hi0_ = mul_hi((c0), 0xD2511F53u); \
        const uint lo1_ = (c2)*0xCD9E8D57u, hi1_ = mul_hi((c2), 0xCD9E8D57u); \
        (c0) = hi1_ ^ (c1) ^ (k0);                                            \
        (c1) = lo1_;                                                          \
        (c2) = hi0_ ^ (c3) ^ (k1);                                            \
        (c3) = lo0_;                                                          \
        (k0) += 0x9E3779B9u;                                                  \
        (k1) += 0xBB67AE85u;                                                  \
    }

inline uint4 philox4x32_10(uint4 ctr, uint2 key) {
    uint c0 = ctr.x, c1 = ctr.y, c2 = ctr.z, c3 = ctr.w, k0 = key.x, k1 = key.y;
    PHILOX_ROUNDS(c0, c1, c2, c3, k0, k1)
    return (uint4)(c0, c1, c2, c3);
}

/* "drop": the third counter word of every dropout draw, apart from other users of a seed. */
#define DROPOUT_TAG 0x64726f70u

/* The four uniforms of elements 4 j .. 4 j + 3 (j = i / 4) under key (seed) and offset, each
 * (word >> 8) 2^-24. */
inline float4 dropout_uniforms(ulong j, uint2 seed, ulong offset) {
    const ulong c = offset + j;
    const uint4 w = philox4x32_10((uint4)((uint)c, (uint)(c >> 32), DROPOUT_TAG, 0u), seed);
    return convert_float4(w >> 8) * (1.0f / 16777216.0f);
}

/* Element i's uniform (one draw per element: kernels that hold four consecutive elements call
 * dropout_uniforms once instead). */
inline float dropout_uniform(ulong i, uint2 seed, ulong offset) {
    const float4 u = dropout_uniforms(i / 4, seed, offset);
    const uint k = (uint)(i % 4);
    return k == 0 ? u.x : k == 1 ? u.y : k == 2 ? u.z : u.w;
}

/* Dropout's multiplier of element i under p with the kept elements' scale 1 / (1 - p): scale
 * where kept, 0 where dropped, 1 without dropout (p 0, no draw: x + y exactly). Every op that
 * drops multiplies by it (or by drop_mult4's), so that their masks and scales agree. */
inline float drop_mult(ulong i, float p, float scale, uint2 seed, ulong offset) {
    return p > 0.0f ? (dropout_uniform(i, seed, offset) >= p ? scale : 0.0f) : 1.0f;
}
/* The multipliers of elements 4 j .. 4 j + 3: one Philox draw for the four. */
inline float4 drop_mult4(ulong j, float p, float scale, uint2 seed, ulong offset) {
    if (!(p > 0.0f)) return (float4)(1.0f);
    const float4 u = dropout_uniforms(j, seed, offset);
    return (float4)(u.x >= p ? scale : 0.0f, u.y >= p ? scale : 0.0f, u.z >= p ? scale : 0.0f,
                    u.w >= p ? scale : 0.0f);
}
#endif
