/* GEMM on 16-bit operands: C = act(alpha op(A) op(B) + beta C + bias), then dropout, for strided
 * batches, A and B bf16 or fp16 (AB_DT, dtype.h's numbers), C, the bias (HAS_BIAS, BIAS_DT) and
 * the pre-activation (HAS_PRE, PRE_DT) fp32, bf16 or fp16, products on the tensor cores'
 * m16n8k16 instruction (ptx.h's mma_16bit) with fp32 accumulation. With MMA_EMULATE the
 * instruction and the fragment loads are done in portable code with the same layouts, so that
 * the suite checks this kernel on any device.
 *
 * A work-group owns a BM x BN block of C, WARPS_M x WARPS_N warps each a (BM / WARPS_M) x
 * (BN / WARPS_N) part of it, and walks K in tiles of BK (32 or 64) through STAGES local buffers filled
 * by asynchronous 16-byte copies (ptx.h's cp_async16), STAGES - 1 tiles ahead. Each operand is
 * staged as it lies in global memory: K-contiguous ([rows][BK], A not transposed, B transposed:
 * PyTorch's weights) or row-contiguous ([BK][rows]); the fragments come out of either by
 * ldmatrix, transposing for the second. The buffers are unpadded and swizzled by 16-byte chunk
 * (kc_at, rc_at below) so that the eight rows an ldmatrix reads fall in eight bank groups.
 *
 * An operand whose contiguous extent, leading dimension, offset and batch stride are multiples of
 * 8 elements (A_ALIGNED, B_ALIGNED) is copied 16 bytes at a time, each copy inside the operand or
 * wholly past its edge. So is an operand the host copied with rows padded to a multiple of 8
 * with zeros (gemm_lp.c's pad_operand): a copy straddling its edge reads padding, zeros that
 * meet the other operand's zeros past K or fill rows past M or N that are never stored. Any
 * other (a vocabulary of 50257 as the leading dimension) is staged element by element through
 * registers into the same layout: slower to load, the same products.
 * M, N, K < 2^31. Copies past M, N or K read zeros; stores past M or N are skipped.
 *
 * K splits: with splits > 1, split s of a batch entry takes K from s kchunk (a multiple of BK)
 * and writes its partial sums, alpha and beta aside, to C + s c_split (the host's fp32
 * workspace, summed with the epilogue by gemm.cl's finish).
 *
 * Grid: dimension 0 blocks (in groups of GROUP_M block rows, so that blocks running together
 * share A and B in the L2 cache) x work-group size, dimension 1 batch entries x splits. */
#include "activation.h"
#include "dtype.h"
#include "philox.h"
#ifndef AB_DT
#define AB_DT 1
#endif
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 4
#endif
#ifndef STAGES
#define STAGES 3
#endif
#define OCLML_WANT_CP_ASYNC 1
#define OCLML_CP_ASYNC_PORTABLE MMA_EMULATE /* mma16.h settles MMA_EMULATE before ptx.h reads it */
#include "mma16.h"

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef C_DT
#define C_DT 0
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef BIAS_DT
#define BIAS_DT 0
#endif
#ifndef HAS_PRE
#define HAS_PRE 0
#endif
#ifndef PRE_DT
#define PRE_DT 0
#endif
#ifndef A_ALIGNED
#define A_ALIGNED 1
#endif
#ifndef B_ALIGNED
#define B_ALIGNED 1
#endif
#ifndef HAS_DROPOUT
#define HAS_DROPOUT 0 /* 1: dropout after the activation, gemm_epilogue.h's rule */
#endif
#ifndef BK
#define BK 32 /* a stage's K depth: 32 or 64 */
#endif
#ifndef PREFETCH
#define PREFETCH 0 /* 1: the next K step's fragments loaded before this step's products */
#endif
#define KC (BK / 8)       /* 16-byte chunks along K of a K-contiguous row */
#define WM (BM / WARPS_M) /* a warp's rows */
#define WN (BN / WARPS_N) /* a warp's columns */
#define MT (WM / 16)      /* its m16 tiles */
#define NT (WN / 8)       /* its n8 tiles (even: ldmatrix loads them in pairs) */
#define THREADS (32 * WARPS_M * WARPS_N)
#define A_KC (!TRANS_A) /* A staged K-contiguous */
#define B_KC (TRANS_B)

/* Element (row, k) of a K-contiguous tile [rows][BK]: chunk k / 8 of the row's KC, swizzled by
 * the row's place among the 128-byte lines (8 / KC rows a line), so rows 0..7 of a chunk column
 * hit distinct 16-byte bank groups. */
inline uint kc_at(uint row, uint k) {
    return row * BK + ((((k >> 3) ^ (row / (8 / KC))) & (KC - 1)) << 3) + (k & 7u);
}
/* Element (k, col) of a row-contiguous tile [BK][cols] (cols a multiple of 64: the swizzle
 * permutes chunks within whole groups of eight): chunk col / 8 swizzled by k % 8, so eight
 * consecutive k of a chunk column hit distinct bank groups. */
inline uint rc_at(uint k, uint col, uint cols) {
    return k * cols + ((((col >> 3) ^ k) & 7u) | ((col >> 3) & ~7u)) * 8u + (col & 7u);
}

/* A work-item's share of an operand's stages: chunks c = lid + i THREADS (16 bytes, 8 elements
 * along the operand's contiguous direction) at the same places of every stage and the same rows
 * of every K tile, so that their stage offsets, global offsets and row bounds are worked out once
 * (place_of) and each tile's copies only step along K (stage_tile). */
#define CHUNKS(rows) ((rows)*BK / 8)
#define PLACES(rows) ((CHUNKS(rows) + THREADS - 1) / THREADS)
#define A_PLACES PLACES(BM)
#define B_PLACES PLACES(BN)
#define NO_PLACE 0xffffffffu

typedef struct stage_place {
    ulong from; /* the chunk's first element in tile 0 (kc: row r, column k; else row k) */
    uint at;    /* its place in a stage (NO_PLACE: the work-item has no chunk i) */
    uint k;     /* its K offset in a tile */
    uint left;  /* elements of the operand along the chunk from its start (kc: K - k left to
                  * stage_tile; else rows past the chunk's first, 0 past the operand's edge) */
} stage_place;

OCLML_INLINE stage_place place_of(uint c, uint ld, uint r0, uint rows_total, uint rows, bool kc) {
    stage_place p;
    uint row;
    if (kc) {
        row = c / KC, p.k = c % KC * 8;
        p.at = kc_at(row, p.k);
        p.from = (ulong)(r0 + row) * ld + p.k;
    } else {
        p.k = c / (rows / 8), row = c % (rows / 8) * 8;
        p.at = rc_at(p.k, row, rows);
        p.from = (ulong)p.k * ld + r0 + row;
    }
    /* kc: the row's presence (any nonzero); the K bound is the tile's. */
    p.left = r0 + row >= rows_total ? 0u : kc ? 1u : rows_total - (r0 + row);
    if (c >= CHUNKS(rows)) p.at = NO_PLACE;
    return p;
}

/* Copies K tile t of an operand into its stage from the work-item's places; zeros past the
 * edges. Aligned operands by cp.async, 16 bytes a copy; others eight elements each
 * bounds-checked and loaded alone, stored as one 16-byte word. */
OCLML_INLINE void stage_tile(__local ushort *dst, __global const ushort *src, uint ld, uint K,
                             uint t, const stage_place *places, uint n, bool kc, bool aligned) {
    const ulong step = kc ? (ulong)t * BK : (ulong)t * BK * ld;
#pragma unroll
    for (uint i = 0; i < n; i++) {
        const stage_place p = places[i];
        if (p.at == NO_PLACE) continue;
        const uint k = t * BK + p.k;
        const bool in = p.left && k < K;
        if (aligned) {
            cp_async16((__local float *)(dst + p.at),
                       (__global const float *)(src + (in ? p.from + step : 0)), in ? 16u : 0u);
        } else {
            /* Along the chunk: k for a K-contiguous operand, rows otherwise. */
            const uint left = !in ? 0u : kc ? K - k : p.left;
            const ulong from = p.from + step;
            uint w[4];
            for (uint e = 0; e < 8; e += 2) {
                const uint lo = e < left ? src[from + e] : 0u;
                const uint hi = e + 1 < left ? src[from + e + 1] : 0u;
                w[e / 2] = lo | hi << 16;
            }
            *(__local uint4 *)(dst + p.at) = (uint4)(w[0], w[1], w[2], w[3]);
        }
    }
}

#if MMA_EMULATE
/* The instruction (mma16.h's emulation) and ldmatrix in portable code, at mma16.h's fragment
 * layouts. */
#define MMA16(d, a, b) mma_emulated(d, a, b, xchg, gid, tig)

/* Element (row, k) of an operand's stage, as the fragments index it. */
inline uint stage_word(__local const ushort *s, uint row, uint k, uint rows, bool kc) {
    const uint i0 = kc ? kc_at(row, k) : rc_at(k, row, rows),
               i1 = kc ? kc_at(row, k + 1) : rc_at(k + 1, row, rows);
    return (uint)s[i0] | (uint)s[i1] << 16;
}
/* A's fragment of the m16 tile at row r0, k0 (a0..a3 above). */
inline void load_a(uint *a, __local const ushort *s, uint r0, uint k0, uint gid, uint tig) {
    for (uint q = 0; q < 4; q++)
        a[q] = stage_word(s, r0 + gid + 8 * (q & 1), k0 + 2 * tig + 8 * (q >> 1), BM, A_KC);
}
/* B's fragments of the two n8 tiles at column c0, k0: b[0..1] the first, b[2..3] the second. */
inline void load_b2(uint *b, __local const ushort *s, uint c0, uint k0, uint gid, uint tig) {
    for (uint q = 0; q < 4; q++)
        b[q] = stage_word(s, c0 + gid + 8 * (q >> 1), k0 + 2 * tig + 8 * (q & 1), BN, B_KC);
}
#else
#define MMA16(d, a, b) mma_16bit(d, a[0], a[1], a[2], a[3], b[0], b[1])
/* ldmatrix: work-item l gives the row of 8x8 tile l / 8 it names, so that the four tiles come
 * out in fragment order (see the emulation's layout above). */
inline void load_a(uint *a, __local const ushort *s, uint r0, uint k0, uint gid, uint tig) {
    const uint l = gid * 4 + tig;
#if A_KC
    ldmatrix_x4(a, s + kc_at(r0 + (l & 15u), k0 + (l >> 4) * 8));
#else
    ldmatrix_x4_trans(a, s + rc_at(k0 + (l >> 4) * 8 + (l & 7u), r0 + (l >> 3 & 1u) * 8, BM));
#endif
}
inline void load_b2(uint *b, __local const ushort *s, uint c0, uint k0, uint gid, uint tig) {
    const uint l = gid * 4 + tig;
#if B_KC
    ldmatrix_x4(b, s + kc_at(c0 + (l >> 4) * 8 + (l & 7u), k0 + (l >> 3 & 1u) * 8));
#else
    ldmatrix_x4_trans(b, s + rc_at(k0 + (l >> 3 & 1u) * 8 + (l & 7u), c0 + (l >> 4) * 8, BN));
#endif
}
#endif

#if MMA_EMULATE
#define XCHG_DECL , __local float *xchg
#define XCHG_PASS , xchg
#else
#define XCHG_DECL
#define XCHG_PASS
#endif

/* The fragments of one K step of 16 at k0 of a tile's stages: the warp's MT m16 tiles of A and
 * NT n8 tiles of B (in pairs). */
OCLML_INLINE void load_step(uint (*af)[4], uint (*bf)[4], __local const ushort *ta,
                            __local const ushort *tb, uint wm0, uint wn0, uint k0, uint gid,
                            uint tig) {
#pragma unroll
    for (uint i = 0; i < MT; i++) load_a(af[i], ta, wm0 + 16 * i, k0, gid, tig);
#pragma unroll
    for (uint j = 0; j < NT / 2; j++) load_b2(bf[j], tb, wn0 + 16 * j, k0, gid, tig);
}

/* The step's products into the warp's accumulators. */
OCLML_INLINE void mma_step(float (*acc)[NT][4], uint (*af)[4], uint (*bf)[4], uint gid,
                           uint tig XCHG_DECL) {
#pragma unroll
    for (uint i = 0; i < MT; i++)
#pragma unroll
        for (uint j = 0; j < NT; j++) MMA16(acc[i][j], af[i], (bf[j / 2] + 2 * (j % 2)));
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
oclml_gemm_lp(uint M, uint N, uint K, float alpha, float beta, __global const ushort *A,
              ulong a_off, uint lda, ulong a_stride, __global const ushort *B, ulong b_off,
              uint ldb, ulong b_stride, __global DT_ELEM(C_DT) * C, ulong c_off, uint ldc,
              ulong c_stride, __global const DT_ELEM(BIAS_DT) * bias, ulong bias_off,
              __global DT_ELEM(PRE_DT) * pre, ulong pre_off, uint ldp, ulong pre_stride,
              float drop_p, float drop_scale, uint drop_seed_lo, uint drop_seed_hi,
              ulong drop_offset, ulong drop_base, uint drop_ld, uint splits, uint kchunk,
              ulong c_split) {
    /* 16-byte aligned: cp.async and ldmatrix move 16 bytes, and PTX aligns an array only to its
     * element's size. */
    __local ushort sa[STAGES][BM * BK] __attribute__((aligned(16))),
        sb[STAGES][BN * BK] __attribute__((aligned(16)));
#if MMA_EMULATE
    __local float xchg_all[WARPS_M * WARPS_N][XCHG_FLOATS];
#endif
    const uint lid = get_local_id(0), warp = lid / 32, lane = lid % 32, gid = lane / 4,
               tig = lane % 4;
#if MMA_EMULATE
    __local float *xchg = xchg_all[warp];
#endif
    /* Block order: GROUP_M block rows at a time, down each column of blocks. */
    const uint bm_n = (M + BM - 1) / BM, bn_n = (N + BN - 1) / BN, block = get_group_id(0);
    const uint group = block / (GROUP_M * bn_n), first = group * GROUP_M,
               rows_in = min(bm_n - first, (uint)GROUP_M), in_group = block % (GROUP_M * bn_n);
    const uint m0 = (first + in_group % rows_in) * BM, n0 = in_group / rows_in * BN;
    const ulong batch = get_group_id(1) / splits;
    const uint split = get_group_id(1) % splits, k_begin = split * kchunk;
    __global const ushort *a = A + a_off + batch * a_stride, *b = B + b_off + batch * b_stride;
    __global DT_ELEM(C_DT) *c = C + c_off + batch * c_stride + split * c_split;
    /* This split's K: the operands from k_begin on (kchunk a multiple of BK keeps 16-byte
     * copies aligned). */
    a += A_KC ? k_begin : (ulong)k_begin * lda;
    b += B_KC ? k_begin : (ulong)k_begin * ldb;
    K = min(K - k_begin, kchunk);

    const uint wm0 = warp / WARPS_N * WM, wn0 = warp % WARPS_N * WN;
    float acc[MT][NT][4];
    for (uint i = 0; i < MT; i++)
        for (uint j = 0; j < NT; j++)
            for (uint q = 0; q < 4; q++) acc[i][j][q] = 0.0f;

    stage_place pa[A_PLACES], pb[B_PLACES];
#pragma unroll
    for (uint i = 0; i < A_PLACES; i++) pa[i] = place_of(lid + i * THREADS, lda, m0, M, BM, A_KC);
#pragma unroll
    for (uint i = 0; i < B_PLACES; i++) pb[i] = place_of(lid + i * THREADS, ldb, n0, N, BN, B_KC);
    const uint tiles = (K + BK - 1) / BK;
    /* K tile t of A and B into stage t % STAGES where the tile exists, then its group committed:
     * one group a step (empty past the last tile), so that the waits count steps. */
#define STAGE_K_TILE(t)                                                                  \
    do {                                                                                 \
        if ((t) < tiles) {                                                               \
            stage_tile(sa[(t) % STAGES], a, lda, K, (t), pa, A_PLACES, A_KC, A_ALIGNED); \
            stage_tile(sb[(t) % STAGES], b, ldb, K, (t), pb, B_PLACES, B_KC, B_ALIGNED); \
        }                                                                                \
        cp_async_commit();                                                               \
    } while (0)
    for (uint s = 0; s < STAGES - 1; s++) STAGE_K_TILE(s);
#if PREFETCH
    /* Software pipelining in registers: each step's products run while the next step's fragments
     * load, and the last step of a tile waits for the next tile (and the barrier) before its
     * products, so that the wait overlaps them. The stage refilled at the top of a tile was read
     * up to the previous tile's last step, before that step's barrier. */
    uint af[2][MT][4], bf[2][NT / 2][4];
    cp_async_wait(STAGES - 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    load_step(af[0], bf[0], sa[0], sb[0], wm0, wn0, 0u, gid, tig);
    for (uint t = 0; t < tiles; t++) {
        STAGE_K_TILE(t + STAGES - 1);
#pragma unroll
        for (uint s = 0; s < BK / 16; s++) {
            if (s + 1 < BK / 16) {
                load_step(af[(s + 1) % 2], bf[(s + 1) % 2], sa[t % STAGES], sb[t % STAGES], wm0,
                          wn0, 16 * (s + 1), gid, tig);
            } else {
                cp_async_wait(STAGES - 2);
                barrier(CLK_LOCAL_MEM_FENCE);
                if (t + 1 < tiles)
                    load_step(af[(s + 1) % 2], bf[(s + 1) % 2], sa[(t + 1) % STAGES],
                              sb[(t + 1) % STAGES], wm0, wn0, 0u, gid, tig);
            }
            mma_step(acc, af[s % 2], bf[s % 2], gid, tig XCHG_PASS);
        }
    }
#else
    for (uint t = 0; t < tiles; t++) {
        cp_async_wait(STAGES - 2);
        barrier(CLK_LOCAL_MEM_FENCE);
        /* The stage refilled now was read in the previous step, which every warp has left. */
        STAGE_K_TILE(t + STAGES - 1);
#pragma unroll
        for (uint k0 = 0; k0 < BK; k0 += 16) {
            uint af[MT][4], bf[NT / 2][4];
            load_step(af, bf, sa[t % STAGES], sb[t % STAGES], wm0, wn0, k0, gid, tig);
            mma_step(acc, af, bf, gid, tig XCHG_PASS);
        }
    }
#endif

    /* Epilogue: z = alpha acc + beta C + bias (C not read where beta is 0: it may hold NaN), pre
     * = z, C = dropout(act(z)), each rounded once to its dtype. */
#pragma unroll
    for (uint i = 0; i < MT; i++)
#pragma unroll
        for (uint j = 0; j < NT; j++)
#pragma unroll
            for (uint q = 0; q < 4; q++) {
                const uint r = m0 + wm0 + 16 * i + gid + 8 * (q / 2),
                           col = n0 + wn0 + 8 * j + 2 * tig + q % 2;
                if (r < M && col < N) {
                    const ulong at = (ulong)r * ldc + col;
                    float v = alpha * acc[i][j][q];
                    if (beta != 0.0f) v = fma(beta, DT_LOAD(C_DT, c, at), v);
#if HAS_BIAS
                    v += DT_LOAD(BIAS_DT, bias + bias_off, col);
#endif
#if HAS_PRE
                    DT_STORE(PRE_DT, pre + pre_off + batch * pre_stride, (ulong)r * ldp + col, v);
#endif
                    v = act_apply(v);
#if HAS_DROPOUT
                    v *= drop_mult(drop_base + (ulong)r * drop_ld + col, drop_p, drop_scale,
                                   (uint2)(drop_seed_lo, drop_seed_hi), drop_offset);
#endif
                    DT_STORE(C_DT, c, at, v);
                }
            }
}
