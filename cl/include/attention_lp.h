/* The 16-bit tensor-core attention kernels' building blocks (attention_lp_fwd.cl,
 * attention_lp_bwd.cl): the instruction and its operand reads from staged blocks, a block's
 * staging (in place, or by cp.async copies ahead), A fragments read from global or local memory,
 * and the two products the backward forms on m16n8k16 (fragment layouts in mma16.h; the
 * forward's products, shaped by its MT row tiles a warp, are its own).
 * Includers define AB_DT, HEAD_DIM, BN (rows of a staged block: keys in the forward and dQ, query
 * rows in dK/dV; a multiple of 16), WARPS, and optionally MT (m16 row tiles a warp, 1 if not)
 * and AHEAD (1: stage_pair_async, the copies ahead), then include this header (it includes
 * attention.h with BQ = 16 MT WARPS rows a row table). A staged block holds rows of two tensors
 * (16-bit, rows KV_LD apart). */
#ifndef OCLML_ATTENTION_LP_H
#define OCLML_ATTENTION_LP_H

#include "dtype.h"

#ifndef MT
#define MT 1
#endif
#ifndef AHEAD
#define AHEAD 0
#endif
#if AHEAD
#define OCLML_WANT_CP_ASYNC 1
#define OCLML_CP_ASYNC_PORTABLE MMA_EMULATE /* mma16.h settles MMA_EMULATE before ptx.h reads it */
#endif
#include "mma16.h"

#if HEAD_DIM % 16 || HEAD_DIM > 128 || BN % 16
#error "head dims that are multiples of 16 up to 128, blocks of a multiple of 16 rows"
#endif

#define NT (32 * WARPS)
#define BQ (16 * MT * WARPS) /* rows a block of attention.h's row table: 16 MT a warp */
#include "attention.h"

#define DSTEPS (HEAD_DIM / 16) /* k16 steps over the head dim; n16 column pairs of an output */
#define KSTEPS (BN / 16)       /* k16 steps over a block's rows; n16 row pairs of a score tile */
/* Staged rows 16 bytes longer than the head dim: ldmatrix's eight row addresses of a tile then
 * fall in eight distinct 16-byte bank groups, and every row starts 16-byte aligned. */
#define KV_LD (HEAD_DIM + 8)

/* Two values of the AB dtype packed in a fragment word (lo in the low half), and back. */
OCLML_INLINE uint ab_pack(float lo, float hi) {
#if AB_DT == 1
    return bf16x2_from_float(lo, hi);
#else
    return (uint)fp16_from_float(lo) | (uint)fp16_from_float(hi) << 16;
#endif
}

#if MMA_EMULATE
/* The instruction (mma16.h's emulation), the shuffles and ldmatrix in portable code, at the
 * instruction's fragment layouts. */
#define MMA16(d, a, b) mma_emulated(d, a, b, xchg, gid, tig)

/* Lane src's v through this warp's 32 floats of local memory (every work-item of the
 * work-group calls it together). */
OCLML_INLINE float shuffle_emulated(float v, uint src, __local float *shfl, uint lane) {
    barrier(CLK_LOCAL_MEM_FENCE);
    shfl[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    return shfl[src];
}
#define SHUFFLE(v, src) shuffle_emulated(v, src, shfl, lane)

/* The word of a staged block at (row, column): columns c, c + 1 of one row (along), or rows
 * row, row + 1 of one column (across: the transposed read). */
OCLML_INLINE uint word_along(__local const ushort *s, uint row, uint c) {
    return (uint)s[row * KV_LD + c] | (uint)s[row * KV_LD + c + 1] << 16;
}
OCLML_INLINE uint word_across(__local const ushort *s, uint row, uint c) {
    return (uint)s[row * KV_LD + c] | (uint)s[(row + 1) * KV_LD + c] << 16;
}
/* B fragments of a staged block's rows j0 .. j0 + 15 as B's columns at head-dim step d0 (B[k][n]
 * = X[j0 + n][d0 + k]: K in S = Q K^T): b[0..1] rows j0 .., b[2..3] rows j0 + 8 ... */
OCLML_INLINE void load_b_rows(uint *b, __local const ushort *xs, uint j0, uint d0, uint gid,
                              uint tig) {
    for (uint q = 0; q < 4; q++)
        b[q] = word_along(xs, j0 + gid + 8 * (q >> 1), d0 + 2 * tig + 8 * (q & 1));
}
/* B fragments of head-dim columns c0 .. c0 + 15 of a staged block at row step j0 (B[k][n] =
 * X[j0 + k][c0 + n]: V in O = P V): b[0..1] columns c0 .., b[2..3] columns c0 + 8 ... */
OCLML_INLINE void load_b_cols(uint *b, __local const ushort *xs, uint j0, uint c0, uint gid,
                              uint tig) {
    for (uint q = 0; q < 4; q++)
        b[q] = word_across(xs, j0 + 2 * tig + 8 * (q & 1), c0 + gid + 8 * (q >> 1));
}
/* A fragments of a staged block's rows r0 .. r0 + 15 at head-dim step d0 (A[m][k] =
 * X[r0 + m][d0 + k]): a[0] row gid, a[1] row gid + 8, a[2], a[3] the same 8 columns on. */
OCLML_INLINE void load_a_staged(uint *a, __local const ushort *xs, uint r0, uint d0, uint gid,
                                uint tig) {
    for (uint q = 0; q < 4; q++)
        a[q] = word_along(xs, r0 + gid + 8 * (q & 1), d0 + 2 * tig + 8 * (q >> 1));
}
#define EMU_PARAMS , __local float *xchg, __local float *shfl
#define EMU_ARGS , xchg, shfl
#define MMA_UNROLL /* rolled: the emulation's barriers would multiply the kernel's size */
/* Each warp's exchange and shuffle buffers, xchg and shfl (in a kernel, after `warp`). */
#define EMU_BUFFERS                                                    \
    __local float xchg_all[WARPS * XCHG_FLOATS], shfl_all[WARPS * 32]; \
    __local float *xchg = xchg_all + warp * XCHG_FLOATS, *shfl = shfl_all + warp * 32;
#else
#define MMA16(d, a, b) mma_16bit(d, a[0], a[1], a[2], a[3], b[0], b[1])
#define SHUFFLE(v, src) warp_shuffle(v, src)
/* ldmatrix: work-item l gives the row address of 8 x 8 tile l / 8, so that the four tiles come
 * out in the emulation's fragment order (gemm_lp.cl's K-contiguous and row-contiguous reads). */
OCLML_INLINE void load_b_rows(uint *b, __local const ushort *xs, uint j0, uint d0, uint gid,
                              uint tig) {
    const uint l = gid * 4 + tig;
    ldmatrix_x4(b, xs + (j0 + (l >> 4) * 8 + (l & 7u)) * KV_LD + d0 + (l >> 3 & 1u) * 8);
}
OCLML_INLINE void load_b_cols(uint *b, __local const ushort *xs, uint j0, uint c0, uint gid,
                              uint tig) {
    const uint l = gid * 4 + tig;
    ldmatrix_x4_trans(b, xs + (j0 + (l >> 3 & 1u) * 8 + (l & 7u)) * KV_LD + c0 + (l >> 4) * 8);
}
OCLML_INLINE void load_a_staged(uint *a, __local const ushort *xs, uint r0, uint d0, uint gid,
                                uint tig) {
    const uint l = gid * 4 + tig;
    ldmatrix_x4(a, xs + (r0 + (l >> 3 & 1u) * 8 + (l & 7u)) * KV_LD + d0 + (l >> 4) * 8);
}
#define EMU_PARAMS
#define EMU_ARGS
#define MMA_UNROLL _Pragma("unroll")
#define EMU_BUFFERS
#endif

/* Rows first .. first + n - 1 of two tensors x and y (rows `stride` elements apart) into xs and
 * ys, zeros at and past row `len`: eight elements a copy, in the same rounds for every
 * work-item (n a constant: BN a block, or BQ). */
OCLML_INLINE void stage_pair(__local ushort *xs, __local ushort *ys, __global const ushort *x,
                             __global const ushort *y, ulong stride, int first, int len, uint n) {
    const int rows = max(0, min((int)n, len - first));
    for (uint e = get_local_id(0); e < n * HEAD_DIM / 8; e += NT) {
        const uint j = e / (HEAD_DIM / 8), c = e % (HEAD_DIM / 8) * 8;
        const bool in = (int)j < rows;
        const ulong at = (ulong)(first + (int)j) * stride + c;
        vstore8(in ? vload8(0, x + at) : (ushort8)(0), 0, xs + j * KV_LD + c);
        vstore8(in ? vload8(0, y + at) : (ushort8)(0), 0, ys + j * KV_LD + c);
    }
}

#if AHEAD
/* As stage_pair for a block of BN rows, by 16-byte asynchronous copies (zero-filled past row
 * `len`) that the caller commits and waits for: x and y 16-byte aligned, stride a multiple of
 * 8. */
OCLML_INLINE void stage_pair_async(__local ushort *xs, __local ushort *ys, __global const ushort *x,
                                   __global const ushort *y, ulong stride, int first, int len) {
    const int rows = max(0, min(BN, len - first));
    for (uint e = get_local_id(0); e < BN * HEAD_DIM / 8; e += NT) {
        const uint j = e / (HEAD_DIM / 8), c = e % (HEAD_DIM / 8) * 8;
        const bool in = (int)j < rows;
        const ulong at = in ? (ulong)(first + (int)j) * stride + c : 0;
        cp_async16((__local float *)(xs + j * KV_LD + c), (__global const float *)(x + at),
                   in ? 16u : 0u);
        cp_async16((__local float *)(ys + j * KV_LD + c), (__global const float *)(y + at),
                   in ? 16u : 0u);
    }
}
#endif

/* Step n of a walk over key blocks of BN keys from kb0 (this one at kb, the walk ending before
 * jhi): K and V of this block staged in kvs, in place, or with AHEAD copied ahead by the step
 * before (the first block in the first step, after its barrier: copied before the loop, where
 * nothing waits on local memory, the emulated kernels gave wrong results on PoCL at head dim 16
 * with 32-row blocks, though every read of it follows a barrier) while the next block is copied
 * into the other buffer. Every step commits one group (empty past the last block), so waiting
 * for all but the latest is waiting for this one. Called after the step's first barrier, every
 * work-item together; a barrier must follow before the block is read. Returns the buffer that
 * holds it. */
OCLML_INLINE uint key_block_step(__local ushort (*kvs)[2][BN * KV_LD], __global const ushort *k,
                                 __global const ushort *v, ulong stride, int kb, int n, int jhi,
                                 int klen) {
#if AHEAD
    if (n == 0) {
        stage_pair_async(kvs[0][0], kvs[0][1], k, v, stride, kb, klen);
        cp_async_commit();
    }
    const uint next = (uint)(n + 1) % 2u;
    if (kb + BN < jhi) stage_pair_async(kvs[next][0], kvs[next][1], k, v, stride, kb + BN, klen);
    cp_async_commit();
    cp_async_wait(1);
    return (uint)n % 2u;
#else
    (void)n, (void)jhi;
    stage_pair(kvs[0][0], kvs[0][1], k, v, stride, kb, klen, BN);
    return 0;
#endif
}

/* A fragments of x's rows row[0] (gid) and row[1] (gid + 8) over the head dim (NO_ROW: 0). */
OCLML_INLINE void load_a_rows(uint xa[DSTEPS][4], __global const ushort *x, const ulong row[2],
                              uint tig) {
#pragma unroll
    for (uint kk = 0; kk < DSTEPS; kk++)
#pragma unroll
        for (uint e = 0; e < 4; e++) {
            const ulong r = row[e & 1u];
            const ulong at = r + kk * 16 + 2 * tig + 8 * (e >> 1);
            xa[kk][e] = r == NO_ROW ? 0u : (uint)x[at] | (uint)x[at + 1] << 16;
        }
}

/* s = X Y^T for the warp's 16 rows of X (A fragments xa) against a staged block's BN rows of Y
 * (n8 tile nt: rows nt 8 ..). */
OCLML_INLINE void score_product(float s[BN / 8][4], uint xa[DSTEPS][4], __local const ushort *ys,
                                uint gid, uint tig EMU_PARAMS) {
#pragma unroll
    for (uint x = 0; x < BN / 2; x++) s[x / 4][x % 4] = 0.0f;
    MMA_UNROLL for (uint kk = 0; kk < DSTEPS; kk++) {
        MMA_UNROLL for (uint jp = 0; jp < KSTEPS; jp++) {
            uint b[4];
            load_b_rows(b, ys, jp * 16, kk * 16, gid, tig);
            MMA16(s[2 * jp], xa[kk], b);
            MMA16(s[2 * jp + 1], xa[kk], (b + 2));
        }
    }
}

/* As score_product, X's 16 rows read as A fragments from a staged block (rows r0 ..). */
OCLML_INLINE void score_product_staged(float s[BN / 8][4], __local const ushort *xs, uint r0,
                                       __local const ushort *ys, uint gid, uint tig EMU_PARAMS) {
#pragma unroll
    for (uint x = 0; x < BN / 2; x++) s[x / 4][x % 4] = 0.0f;
    MMA_UNROLL for (uint kk = 0; kk < DSTEPS; kk++) {
        uint a[4];
        load_a_staged(a, xs, r0, kk * 16, gid, tig);
        MMA_UNROLL for (uint jp = 0; jp < KSTEPS; jp++) {
            uint b[4];
            load_b_rows(b, ys, jp * 16, kk * 16, gid, tig);
            MMA16(s[2 * jp], a, b);
            MMA16(s[2 * jp + 1], a, (b + 2));
        }
    }
}

/* acc += P Y: P (a score tile's accumulators, 16 rows x BN) rounded to the AB dtype as A
 * fragments, two adjacent n8 tiles (columns 16 kt ..) making one k16 step: row gid's words come
 * from elements 0, 1 of tiles 2 kt and 2 kt + 1, row gid + 8's from elements 2, 3; Y a staged
 * block (BN rows x the head dim). Each of acc's n8 tiles sums the block from zero and adds it in
 * fp32 (the tensor cores round their sums toward zero: the bias grows with every accumulation
 * into one register). */
OCLML_INLINE void accumulate_product(float acc[HEAD_DIM / 8][4], float p[BN / 8][4],
                                     __local const ushort *ys, uint gid, uint tig EMU_PARAMS) {
    uint pa[KSTEPS][4];
#pragma unroll
    for (uint kt = 0; kt < KSTEPS; kt++) {
        pa[kt][0] = ab_pack(p[2 * kt][0], p[2 * kt][1]);
        pa[kt][1] = ab_pack(p[2 * kt][2], p[2 * kt][3]);
        pa[kt][2] = ab_pack(p[2 * kt + 1][0], p[2 * kt + 1][1]);
        pa[kt][3] = ab_pack(p[2 * kt + 1][2], p[2 * kt + 1][3]);
    }
    MMA_UNROLL for (uint dp = 0; dp < DSTEPS; dp++) {
        float t[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        MMA_UNROLL for (uint kt = 0; kt < KSTEPS; kt++) {
            uint b[4];
            load_b_cols(b, ys, kt * 16, dp * 16, gid, tig);
            MMA16(t[0], pa[kt], b);
            MMA16(t[1], pa[kt], (b + 2));
        }
#pragma unroll
        for (uint x = 0; x < 8; x++) acc[2 * dp + x / 4][x % 4] += t[x / 4][x % 4];
    }
}

#endif
