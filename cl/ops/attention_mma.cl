/* Attention forward on TF32 tensor cores with fp32-level accuracy (3xTF32: each product as
 * hi*hi + hi*lo + lo*hi, mma.h), for head dims that are multiples of 8 up to 128, and with
 * FWD_PAIRS multiples of 16 up to 256 (lib/ops/attention.c picks it where the device reports
 * TF32 mma.sync; attention.cl is the FMA kernel with the same arguments and semantics, including
 * the key splits), and the backward's dQ and dK/dV kernels (their fragments of two operands and
 * two accumulators in registers, or, with DQ_PAIRS and DKDV_PAIRS, shared by two warps: head dim
 * 128; above 128 by four, the head dim split too (HEAD_SPLIT): dK/dV at multiples of 16, dQ at
 * multiples of 32).
 *
 * A work-group of WARPS warps takes BQ = 16 WARPS query rows (16 a warp: the m16n8k8 rows; with
 * FWD_PAIRS 8 WARPS, two warps sharing 16 rows, each with half of the head dim of Q and O, the
 * pair summing S from its two parts as the paired dQ kernel does) against key blocks of BN keys
 * staged in local memory. Each warp keeps its rows of Q in registers as
 * m16n8k8 A fragments, computes S = Q K^T for the block (BN / 8 tiles of 8 keys), applies the
 * masks and the online softmax on the accumulator fragments (a row's statistics reduced over the
 * 4 work-items that hold it), and adds P V into O's fragments (HEAD_DIM / 8 tiles), P taken
 * as A fragments where the accumulators hold it (to_a_fragments: no value changes work-item).
 *
 * With ASYNC_KV the staged blocks come by asynchronous float4 copies (ptx.h's cp_async16): the
 * forward and dQ kernels copy the next K and V block into a second pair of buffers while the
 * tensor cores work on this one; the dK/dV kernel copies its Q and dO rows all at once.
 *
 * Fragments (gid = lane / 4, tig = lane % 4): A holds rows gid, gid + 8 and k = tig, tig + 4; B
 * holds k = tig, tig + 4 of column gid; an accumulator holds rows gid, gid + 8 and columns
 * 2 tig, 2 tig + 1. */
#include "common.h"
#ifndef MMA_EMULATE
#define MMA_EMULATE 0 /* 1: the instruction and the shuffles in portable code (tests) */
#endif
#if !MMA_EMULATE && defined(OCLML_PTX) && OCLML_PTX
#define OCLML_WANT_MMA_TF32 1
#elif !MMA_EMULATE /* no inline PTX in this build: the portable code */
#undef MMA_EMULATE
#define MMA_EMULATE 1
#endif
#ifndef ASYNC_KV
#define ASYNC_KV 0 /* 1: K and V blocks double-buffered by asynchronous copies (float4 rows) */
#endif
/* SPLIT_KV 1 (with ASYNC_KV, FWD_PAIRS): one K and one V buffer, each refilled once read. */
#ifndef SPLIT_KV
#define SPLIT_KV 0
#endif
#if ASYNC_KV
#define OCLML_WANT_CP_ASYNC 1
#define OCLML_CP_ASYNC_PORTABLE MMA_EMULATE /* tests: the copies done at once */
#endif
#include "ptx.h"
#include "mma.h"

#ifndef HEAD_DIM
#define HEAD_DIM 64 /* a multiple of 8, at most 128 (256 where warps share it: HEAD_SPLIT) */
#endif
/* Columns of a score tile: keys (forward, dQ) or query rows (dK/dV: a part of the staged rows). */
#ifndef BN
#define BN 32
#endif
#ifndef WARPS
#define WARPS 4
#endif
#define NT (32 * WARPS)
#ifndef DKDV_PAIRS
#define DKDV_PAIRS 0 /* 1: the dK/dV kernel's warps in pairs on 16 keys, one product each */
#endif
#ifndef HEAD_SPLIT
#define HEAD_SPLIT 1 /* warps that share the head dim of a group's operands, a part each */
#endif
/* The dK/dV kernel's groups of 16 keys a work-group (with DKDV_PAIRS two warps a group, one
 * a product, or 2 HEAD_SPLIT, one a product and a part of the head dim), and its keys. */
#define KGROUPS (DKDV_PAIRS ? WARPS / (2 * HEAD_SPLIT) : WARPS)
#define KEYS (16 * KGROUPS)
#ifndef BQ
#define BQ (16 * WARPS) /* query rows a block (the dK/dV kernel: rows staged at a time) */
#endif
#define DSTEPS (HEAD_DIM / 8) /* 8-wide steps over the head dim: Q's k steps, O's column tiles */
#ifndef DQ_PAIRS
#define DQ_PAIRS 0 /* 1: the dQ kernel's warps share 16 rows, each with a part of the head dim */
#endif
#ifndef FWD_PAIRS
#define FWD_PAIRS 0 /* 1: the forward's warps in pairs on 16 rows, each with half the head dim */
#endif
/* The 8-wide steps of the head dim a warp's operands and accumulators hold: all of them, or
 * their part where HEAD_SPLIT warps share them (2 in the paired forward, 2 or 4 in the paired
 * dQ kernel, 2 in the dK/dV kernel's groups of four). */
#define DPART (DSTEPS / HEAD_SPLIT)
#define KTILES (BN / 8) /* 8-wide column tiles of a score tile, the k steps of its products */
#define CHUNK_STEPS 4   /* 8-deep steps S sums on the tensor cores before an fp32 add */
/* Column tiles of accumulate_product whose B values are read together (lib/ops/attention.c picks
 * it per kernel), cut to a divisor of DPART. */
#ifndef ACC_BATCH
#define ACC_BATCH 4
#endif
#define COL_BATCH                            \
    (ACC_BATCH >= 16 && DPART % 16 == 0 ? 16 \
     : ACC_BATCH >= 8 && DPART % 8 == 0 ? 8  \
     : ACC_BATCH >= 4 && DPART % 4 == 0 ? 4  \
     : ACC_BATCH >= 2 && DPART % 2 == 0 ? 2  \
                                        : 1)
/* Row stride of the staged blocks: with HEAD_DIM a multiple of 8 (8 m), the B fragment reads
 * along a row (score_product: row gid, column tig; banks 4 gid (2m + 1) + tig) and down a column
 * (accumulate_product: rows 2 tig and 2 tig + 1, column gid; banks 8 tig (2m + 1) + gid) each
 * fall on 32 distinct banks. */
#define K_LD (HEAD_DIM + 4)
#include "attention.h"

#if MMA_EMULATE
/* Lane src's v through this warp's 32 floats of local memory; every work-item of the work-group
 * calls it together (barriers). */
OCLML_INLINE float shuffle_emulated(float v, uint src, __local float *shfl, uint lane) {
    barrier(CLK_LOCAL_MEM_FENCE);
    shfl[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    return shfl[src];
}
#define SHUFFLE(v, src) shuffle_emulated(v, src, shfl, lane)
#else
#define SHUFFLE(v, src) warp_shuffle(v, src)
#endif

#if MMA_EMULATE
#define EMU_PARAMS , __local float *xchg, __local float *shfl
#define EMU_ARGS , xchg, shfl
#else
#define EMU_PARAMS
#define EMU_ARGS
#endif

/* Loops around tensor-core instructions: unrolled on the device, rolled where the instruction is
 * emulated (its barriers would multiply the portable kernels' size). */
#if MMA_EMULATE
#define MMA_UNROLL
#else
#define MMA_UNROLL _Pragma("unroll")
#endif

/* A fragments of rows row[0] (gid) and row[1] (gid + 8) of src over the head dim (NO_ROW: 0). */
OCLML_INLINE void load_a(float a[DPART][4], __global const float *src, const ulong row[2],
                         uint tig) {
#pragma unroll
    for (uint kk = 0; kk < DPART; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++)
            a[kk][x] = row[x % 2] != NO_ROW ? src[row[x % 2] + kk * 8 + tig + 4 * (x / 2)] : 0.0f;
}

/* s = a blk^T: a's two rows (A fragments over the head dim) against rows nt 8 + gid of blk
 * (a staged block, K_LD floats a row) for the KTILES column tiles. The tensor cores round their
 * sums toward zero, a bias that grows with every accumulation into the same register (the GEMM
 * measured it): each tile sums CHUNK_STEPS 8-deep steps at a time from zero, and fp32 adds carry
 * the total. A chunk's B values are all read before its products, and the chunk's steps run
 * over every column tile in turn, each of a's values split once: read one at a time before the
 * product that takes it, each read's latency stood in the way (H100, 2026-11-27, B4 H16 L4096,
 * with accumulate_product's reads batched too: forward 6.52-6.62 -> 5.9-6.0 ms at head dim 64,
 * 14.6-14.7 -> 13.4-13.7 at 128). */
OCLML_INLINE void score_product(float s[KTILES][4], float a[DPART][4], __local const float *blk,
                                uint gid, uint tig EMU_PARAMS) {
#pragma unroll
    for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
        for (uint x = 0; x < 4; x++) s[nt][x] = 0.0f;
    MMA_UNROLL for (uint k0 = 0; k0 < DPART; k0 += CHUNK_STEPS) {
        const uint steps = min((uint)CHUNK_STEPS, (uint)DPART - k0);
        float b[CHUNK_STEPS][KTILES][2], t[KTILES][4];
        MMA_UNROLL for (uint kk = 0; kk < steps; kk++) {
            MMA_UNROLL for (uint nt = 0; nt < KTILES; nt++) {
                const uint at = (nt * 8 + gid) * K_LD + (k0 + kk) * 8 + tig;
                b[kk][nt][0] = blk[at];
                b[kk][nt][1] = blk[at + 4];
            }
        }
#pragma unroll
        for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
            for (uint x = 0; x < 4; x++) t[nt][x] = 0.0f;
        MMA_UNROLL for (uint kk = 0; kk < steps; kk++) {
            uint ah[4], al[4];
#pragma unroll
            for (uint x = 0; x < 4; x++) tf32_split(a[k0 + kk][x], &ah[x], &al[x]);
            MMA_UNROLL for (uint nt = 0; nt < KTILES; nt++) {
                uint bh[2], bl[2];
                tf32_split(b[kk][nt][0], &bh[0], &bl[0]);
                tf32_split(b[kk][nt][1], &bh[1], &bl[1]);
                MMA(t[nt], al[0], al[1], al[2], al[3], bh[0], bh[1]);
                MMA(t[nt], ah[0], ah[1], ah[2], ah[3], bl[0], bl[1]);
                MMA(t[nt], ah[0], ah[1], ah[2], ah[3], bh[0], bh[1]);
            }
        }
#pragma unroll
        for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
            for (uint x = 0; x < 4; x++) s[nt][x] += t[nt][x];
    }
}

/* A score tile (accumulator layout) as split A fragments over its columns, without moving a
 * value between work-items: the products that take it (accumulate_product) read their k slots
 * tig and tig + 4 of each 8-deep step as columns 2 tig and 2 tig + 1, where the accumulator
 * holds them (the slots of a product's sum may be taken in any order, the same for A and B). */
OCLML_INLINE void to_a_fragments(float s[KTILES][4], uint hi[KTILES][4], uint lo[KTILES][4]) {
#pragma unroll
    for (uint kt = 0; kt < KTILES; kt++) {
        tf32_split(s[kt][0], &hi[kt][0], &lo[kt][0]); /* row gid, column 2 tig: slot tig */
        tf32_split(s[kt][2], &hi[kt][1], &lo[kt][1]); /* row gid + 8, the same slot */
        tf32_split(s[kt][1], &hi[kt][2], &lo[kt][2]); /* row gid, column 2 tig + 1: slot tig + 4 */
        tf32_split(s[kt][3], &hi[kt][3], &lo[kt][3]);
    }
}

/* acc += A blk: A (split fragments over KTILES 8-deep steps, to_a_fragments' slots) against
 * rows kt 8 + 2 tig and kt 8 + 2 tig + 1 of blk and its head-dim columns. Each of acc's column
 * tiles sums the steps from zero on the tensor cores and adds them in fp32 (the rounding toward
 * zero, as above). The B values of COL_BATCH column tiles are read before their products (as in
 * score_product). */
OCLML_INLINE void accumulate_product(float acc[DPART][4], uint ah[KTILES][4], uint al[KTILES][4],
                                     __local const float *blk, uint gid, uint tig EMU_PARAMS) {
    MMA_UNROLL for (uint n0 = 0; n0 < DPART; n0 += COL_BATCH) {
        float b[KTILES][COL_BATCH][2], t[COL_BATCH][4];
        MMA_UNROLL for (uint kt = 0; kt < KTILES; kt++) {
            MMA_UNROLL for (uint j = 0; j < COL_BATCH; j++) {
                b[kt][j][0] = blk[(kt * 8 + 2 * tig) * K_LD + (n0 + j) * 8 + gid];
                b[kt][j][1] = blk[(kt * 8 + 2 * tig + 1) * K_LD + (n0 + j) * 8 + gid];
            }
        }
#pragma unroll
        for (uint j = 0; j < COL_BATCH; j++)
#pragma unroll
            for (uint x = 0; x < 4; x++) t[j][x] = 0.0f;
        MMA_UNROLL for (uint kt = 0; kt < KTILES; kt++) {
            MMA_UNROLL for (uint j = 0; j < COL_BATCH; j++) {
                uint bh[2], bl[2];
                tf32_split(b[kt][j][0], &bh[0], &bl[0]);
                tf32_split(b[kt][j][1], &bh[1], &bl[1]);
                MMA(t[j], al[kt][0], al[kt][1], al[kt][2], al[kt][3], bh[0], bh[1]);
                MMA(t[j], ah[kt][0], ah[kt][1], ah[kt][2], ah[kt][3], bl[0], bl[1]);
                MMA(t[j], ah[kt][0], ah[kt][1], ah[kt][2], ah[kt][3], bh[0], bh[1]);
            }
        }
#pragma unroll
        for (uint j = 0; j < COL_BATCH; j++)
#pragma unroll
            for (uint x = 0; x < 4; x++) acc[n0 + j][x] += t[j][x];
    }
}

/* HEAD_SPLIT warps sharing a group's head dim, a part each (DQ_PAIRS, FWD_PAIRS, the dK/dV
 * kernel's groups of four): put_part shows a warp's part of a score tile to the others; after a
 * barrier, sum_parts adds the parts (part p at first + p stride) in the same order on every warp
 * of the group, part 0 first, so that all hold the same sums. The caller keeps the next write
 * of a part after these reads (a barrier). */
OCLML_INLINE void put_part(float t[KTILES][4], __local float *mine, uint lane) {
#pragma unroll
    for (uint i = 0; i < KTILES * 4; i++) mine[i * 32 + lane] = t[i / 4][i % 4];
}

OCLML_INLINE void sum_parts(float t[KTILES][4], __local const float *first, uint stride,
                            uint lane) {
#pragma unroll
    for (uint i = 0; i < KTILES * 4; i++) {
        float sum = first[i * 32 + lane];
#pragma unroll
        for (uint p = 1; p < HEAD_SPLIT; p++) sum += first[p * stride + i * 32 + lane];
        t[i / 4][i % 4] = sum;
    }
}

/* Keys first .. first + BN - 1 of K and V (rows of stride floats; zeros at and past the key
 * length `limit`: padding is never read) into ks and vs, K_LD floats a row: one loop, so each
 * element's index math serves both. */
OCLML_INLINE void stage_kv(__local float *ks, __local float *vs, __global const float *k,
                           __global const float *v, ulong stride, int first, uint limit) {
    const uint nk = (uint)max(0, min(BN, (int)limit - first));
    for (uint e = get_local_id(0); e < BN * HEAD_DIM; e += NT) {
        const uint j = e / HEAD_DIM, c = e % HEAD_DIM;
        const bool in = j < nk;
        ks[j * K_LD + c] = in ? k[(first + j) * stride + c] : 0.0f;
        vs[j * K_LD + c] = in ? v[(first + j) * stride + c] : 0.0f;
    }
}

#if ASYNC_KV
/* e over [0, n) spread over the work-group in the same rounds for every work-item, those past n
 * idle in the last: with a bound of n <= NT / 2 (work-items that never enter the loop) PoCL 3.1
 * ran the emulated kernels wrong, head dim 8 with 32 keys say (0.94 error against 2e-7), and
 * with the body under `if (e < n)` rather than after this `continue` too (head dim 16). */
#define FOR_UNIFORM_ROUNDS(e, n)                                          \
    for (uint e = get_local_id(0); e < ((n) + NT - 1) / NT * NT; e += NT) \
        if (e >= (n))                                                     \
            continue;                                                     \
        else

/* Float4 e of a block of keys first .. first + BN - 1 (the first nk of them read, the rest
 * zero-filled) copied asynchronously into blk, K_LD floats a row. */
OCLML_INLINE void copy_chunk(__local float *blk, __global const float *src, ulong stride, int first,
                             uint nk, uint e) {
    const uint j = e / (HEAD_DIM / 4), c = e % (HEAD_DIM / 4) * 4;
    const bool in = j < nk;
    cp_async16(blk + j * K_LD + c, src + (in ? (ulong)(first + (int)j) * stride + c : 0),
               in ? 16u : 0u);
}

/* stage_kv by asynchronous float4 copies, zero-filled at and past the key length (nothing read
 * there); the caller commits, waits and passes a barrier before reading. One loop for both
 * (their index math shared). */
OCLML_INLINE void copy_kv(__local float *ks, __local float *vs, __global const float *k,
                          __global const float *v, ulong stride, int first, uint limit) {
    const uint nk = (uint)max(0, min(BN, (int)limit - first));
    FOR_UNIFORM_ROUNDS(e, BN * HEAD_DIM / 4) {
        copy_chunk(ks, k, stride, first, nk, e);
        copy_chunk(vs, v, stride, first, nk, e);
    }
}

/* copy_kv for one of them (SPLIT_KV). */
OCLML_INLINE void copy_block(__local float *blk, __global const float *src, ulong stride, int first,
                             uint limit) {
    const uint nk = (uint)max(0, min(BN, (int)limit - first));
    FOR_UNIFORM_ROUNDS(e, BN * HEAD_DIM / 4) copy_chunk(blk, src, stride, first, nk, e);
}

#if SPLIT_KV
/* One K and one V buffer (where two of each pass the local memory: the paired forward above head
 * dim 128). KV_FIRST copies the first K; KV_NEXT waits for this block's K, shows it, and starts
 * this block's V into its buffer (every warp is past the last block's P V); KV_K_READ, after
 * the pair's exchange barrier (every warp is past this block's S), starts the next K; KV_V_READY
 * waits for this V and shows it. Three barriers a block, as the staged copies would take, and
 * each copy in flight during the other's products. */
#if !FWD_PAIRS
#error "SPLIT_KV rides on the paired forward's exchange barrier"
#endif
#define KV_BUFFERS                                            \
    __local float ks[BN * K_LD] __attribute__((aligned(16))), \
        vs[BN * K_LD] __attribute__((aligned(16)));
#define KV_FIRST(first, end)                                            \
    if ((first) < (end)) copy_block(ks, k, kstride, first, (uint)klen); \
    cp_async_commit();
#define KV_NEXT(kb, end)                          \
    cp_async_wait(0);                             \
    barrier(CLK_LOCAL_MEM_FENCE);                 \
    copy_block(vs, v, kstride, (kb), (uint)klen); \
    cp_async_commit();
#define KV_K_READ(kb, end)                                                    \
    if ((kb) + BN < (end)) copy_block(ks, k, kstride, (kb) + BN, (uint)klen); \
    cp_async_commit();
#define KV_V_READY    \
    cp_async_wait(1); \
    barrier(CLK_LOCAL_MEM_FENCE);
#else
/* The key-block loop's buffers and steps (k, v, kstride and klen in scope): KV_FIRST copies the
 * first block; KV_NEXT, at the top of each iteration, waits for this block, shows it to the
 * work-group, starts the next one's copies into the other buffers (everyone is past the last
 * iteration's reads of them) and points ks and vs at this one. */
#define KV_BUFFERS                                                   \
    __local float ks_all[2][BN * K_LD] __attribute__((aligned(16))), \
        vs_all[2][BN * K_LD] __attribute__((aligned(16)));           \
    uint kv_buf = 0;
#define KV_FIRST(first, end)                                                              \
    if ((first) < (end)) copy_kv(ks_all[0], vs_all[0], k, v, kstride, first, (uint)klen); \
    cp_async_commit();
#define KV_NEXT(kb, end)                                                                         \
    cp_async_wait(0);                                                                            \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                \
    if ((kb) + BN < (end))                                                                       \
        copy_kv(ks_all[kv_buf ^ 1u], vs_all[kv_buf ^ 1u], k, v, kstride, (kb) + BN, (uint)klen); \
    cp_async_commit();                                                                           \
    __local const float *ks = ks_all[kv_buf], *vs = vs_all[kv_buf];                              \
    kv_buf ^= 1u;
#endif
#else
#define KV_BUFFERS __local float ks[BN * K_LD], vs[BN * K_LD];
#define KV_FIRST(first, end)
#define KV_NEXT(kb, end)                             \
    barrier(CLK_LOCAL_MEM_FENCE);                    \
    stage_kv(ks, vs, k, v, kstride, kb, (uint)klen); \
    barrier(CLK_LOCAL_MEM_FENCE);
#endif

#if ASYNC_KV
/* stage_rows' BQ rows by asynchronous float4 copies (NO_ROW: zero-filled, nothing read); the
 * caller commits, waits and passes a barrier before reading. */
OCLML_INLINE void copy_rows(__local float *blk, __global const float *src,
                            __local const ulong *table) {
    FOR_UNIFORM_ROUNDS(e, BQ * HEAD_DIM / 4) {
        const uint j = e / (HEAD_DIM / 4), c = e % (HEAD_DIM / 4) * 4;
        const ulong row = table[j];
        cp_async16(blk + j * K_LD + c, src + (row != NO_ROW ? row + c : 0),
                   row != NO_ROW ? 16u : 0u);
    }
}
#endif

/* The n query rows of a table into blk, K_LD floats a row (NO_ROW: zeros). */
OCLML_INLINE void stage_rows(__local float *blk, __global const float *src,
                             __local const ulong *table, uint n) {
    for (uint e = get_local_id(0); e < n * HEAD_DIM; e += NT) {
        const uint j = e / HEAD_DIM, c = e % HEAD_DIM;
        blk[j * K_LD + c] = table[j] != NO_ROW ? src[table[j] + c] : 0.0f;
    }
}

/* The row blocks of the forward and dQ kernels launched last first: under a causal mask the last
 * rows see the most keys, and the lightest blocks then end the launch. */
#define LAST_FIRST_ROW_BLOCK ((get_num_groups(0) - 1 - get_group_id(0)) * BQ)

#define MMA_LOCALS                                                                      \
    __local ulong rows_qkv[BQ], rows_stat[BQ], rows_mask[BQ];                           \
    __local int rows_i[BQ];                                                             \
    const row_table rows = {rows_qkv, rows_stat, rows_mask, rows_i};                    \
    const uint lid = get_local_id(0), lane = lid % 32, warp = lid / 32, gid = lane / 4, \
               tig = lane % 4;                                                          \
    MMA_EMU_LOCALS
#if MMA_EMULATE
#define MMA_EMU_LOCALS                                                     \
    __local float xchg_all[WARPS * MMA_XCHG_FLOATS], shfl_all[WARPS * 32]; \
    __local float *xchg = xchg_all + warp * MMA_XCHG_FLOATS, *shfl = shfl_all + warp * 32;
#else
#define MMA_EMU_LOCALS
#endif

#if OCLML_WANT(oclml_attention_fwd_mma)
/* The online softmax of a block for this work-item's rows r[0], r[1] (s over keys kb + nt 8 +
 * 2 tig + x % 2): the masks, each row's maximum over the 4 work-items that hold it, the factor
 * alpha by which its earlier sum l (done here) and output (the caller's) shrink, and s turned
 * into exp(s - maximum) and added to l. */
OCLML_INLINE void softmax_block(float s[KTILES][4], float m[2], float l[2], float alpha[2],
                                const uint r[2], __local const int *rows_i,
                                __local const ulong *rows_mask, int kb, int klen, int shift, int wl,
                                int wr, float scale, __global const float *mask, ulong mask_off,
                                uint lane, uint tig EMU_PARAMS) {
    float mx[2] = {-INFINITY, -INFINITY}, base[2];
#pragma unroll
    for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
        for (uint x = 0; x < 4; x++) {
            const uint row = r[x / 2];
            s[nt][x] = masked_score(s[nt][x], rows_i[row], kb + (int)(nt * 8 + 2 * tig + x % 2),
                                    klen, shift, wl, wr, scale, mask, mask_off, rows_mask[row]);
            mx[x / 2] = fmax(mx[x / 2], s[nt][x]);
        }
#pragma unroll
    for (uint h = 0; h < 2; h++) {
        mx[h] = fmax(mx[h], SHUFFLE(mx[h], lane ^ 1u));
        mx[h] = fmax(mx[h], SHUFFLE(mx[h], lane ^ 2u));
        const float mn = fmax(m[h], mx[h]);
        /* exp(x - -inf) would be NaN where the row has seen nothing yet: shift by 0 there. */
        base[h] = mn == -INFINITY ? 0.0f : mn;
        alpha[h] = exp(m[h] - base[h]);
        m[h] = mn;
        l[h] *= alpha[h];
    }
#pragma unroll
    for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
        for (uint x = 0; x < 4; x++) {
            s[nt][x] = exp(s[nt][x] - base[x / 2]);
            l[x / 2] += s[nt][x];
        }
}

/* The row's log-sum-exp from its sum of exp(s - m) (l > 0; -inf where it saw nothing; NaN
 * kept), into lse or, with key splits, the split's part. */
OCLML_INLINE void put_lse(float m, float l, ulong stat, uint split, uint splits, ulong rows_all,
                          uint has_lse, __global float *lse, ulong lse_off, __global float *part) {
    const float row_lse = l > 0.0f ? m + log(l) : (l == 0.0f ? -INFINITY : l);
    if (stat == NO_ROW) return;
    if (splits > 1)
        part[splits * rows_all * HEAD_DIM + split * rows_all + stat] = row_lse;
    else if (has_lse)
        lse[lse_off + stat] = row_lse;
}

#define FWD_MMA_ARGS                                                                               \
    __global const float *q, ulong q_off, __global const float *k, ulong k_off,                    \
        __global const float *v, ulong v_off, __global float *o, ulong o_off, __global float *lse, \
        ulong lse_off, uint has_lse, __global const float *mask, ulong mask_off,                   \
        __global const float *keylen, ulong keylen_off, __global float *part, ulong rows_all,      \
        uint splits, uint blocks_per_split, ATT_GEOM

/* A forward work-group's batch and key head, key split and row block (R0, its row tables filled),
 * K and V moved to its key head, and the key blocks [first, end) it takes. */
#define FWD_BLOCK_SETUP                                                                         \
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV, split = get_global_id(2);   \
    const uint R0 = LAST_FIRST_ROW_BLOCK;                                                       \
    k += k_off + row_offset(b, hkv, 0, HKV, LK);                                                \
    v += v_off + row_offset(b, hkv, 0, HKV, LK);                                                \
    const ulong kstride = KEY_STRIDE(HKV);                                                      \
    int jlo, jhi;                                                                               \
    const int klen = row_block(rows, R0, b, hkv, keylen, keylen_off, &jlo, &jhi, B, H, HKV, LQ, \
                               LK, scale, shift, wl, wr, mask_bstride, mask_hstride);           \
    const int first = jlo / BN * BN + (int)(split * blocks_per_split) * BN;                     \
    const int end = min(jhi, first + (int)blocks_per_split * BN);
#endif

#ifndef VEC_FRAGMENTS
#define VEC_FRAGMENTS 0 /* 1: the forward below the next, float4 fragment reads */
#endif
#if OCLML_WANT(oclml_attention_fwd_mma) && !VEC_FRAGMENTS
#if FWD_PAIRS && HEAD_SPLIT != 2
#error "the paired forward's warps hold half the head dim each: HEAD_SPLIT 2"
#endif
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_fwd_mma(FWD_MMA_ARGS) {
    KV_BUFFERS
#if FWD_PAIRS
    __local float parts[WARPS][KTILES * 4 * 32]; /* each warp's part of S */
#endif
    MMA_LOCALS
    FWD_BLOCK_SETUP

#if FWD_PAIRS /* HEAD_SPLIT warps on 16 rows, as in the paired dQ kernel */
    const uint pair = warp % (WARPS / HEAD_SPLIT), side = warp / (WARPS / HEAD_SPLIT);
#else
    const uint pair = warp, side = 0;
#endif
    const uint col0 = side * DPART * 8; /* this warp's first head-dim column */
    /* This work-item's rows: r[0] = pair 16 + gid and r[1] = r[0] + 8 of the block. */
    const uint r[2] = {pair * 16 + gid, pair * 16 + gid + 8};
    const ulong qrow[2] = {rows_qkv[r[0]], rows_qkv[r[1]]};
    float qa[DPART][4], acc[DPART][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    load_a(qa, q + q_off + col0, qrow, tig);
#pragma unroll
    for (uint kk = 0; kk < DPART; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++) acc[kk][x] = 0.0f;
    KV_FIRST(first, end)
    for (int kb = first; kb < end; kb += BN) {
        KV_NEXT(kb, end)
        float s[KTILES][4];
        score_product(s, qa, ks + col0, gid, tig EMU_ARGS);
#if FWD_PAIRS /* KV_NEXT's barrier keeps the next block's parts after these reads */
        put_part(s, parts[warp], lane);
        barrier(CLK_LOCAL_MEM_FENCE);
#if SPLIT_KV
        KV_K_READ(kb, end)
#endif
        sum_parts(s, parts[pair], WARPS / HEAD_SPLIT * KTILES * 4 * 32, lane);
#endif
        /* Masks, and the online softmax of each of the two rows (both warps of a pair alike). */
        float alpha[2];
        softmax_block(s, m, l, alpha, r, rows_i, rows_mask, kb, klen, shift, wl, wr, scale, mask,
                      mask_off, lane, tig EMU_ARGS);
#pragma unroll
        for (uint nt = 0; nt < DPART; nt++)
#pragma unroll
            for (uint x = 0; x < 4; x++) acc[nt][x] *= alpha[x / 2];
        uint pah[KTILES][4], pal[KTILES][4]; /* O += P V */
        to_a_fragments(s, pah, pal);
#if SPLIT_KV
        KV_V_READY
#endif
        accumulate_product(acc, pah, pal, vs + col0, gid, tig EMU_ARGS);
    }
    /* Each row's sum over the 4 work-items that hold it, then O / l and the log-sum-exp. */
#pragma unroll
    for (uint h = 0; h < 2; h++) {
        l[h] += SHUFFLE(l[h], lane ^ 1u);
        l[h] += SHUFFLE(l[h], lane ^ 2u);
        const ulong stat = rows_stat[r[h]];
        const float sum = l[h];
        const float inv = sum > 0.0f ? 1.0f / sum : (sum == 0.0f ? 0.0f : sum);
        /* One split: O and lse in place; several: this split's part (rows in [B, H, LQ]). */
        const ulong at = splits == 1 ? qrow[h] : stat == NO_ROW ? NO_ROW : stat * HEAD_DIM;
        __global float *dst = splits == 1 ? o + o_off : part + (ulong)split * rows_all * HEAD_DIM;
        if (at != NO_ROW)
#pragma unroll
            for (uint nt = 0; nt < DPART; nt++) {
                /* A row that saw no key: 0, even where 0 x inf (an infinite V another row of
                 * the block sees) made its accumulator NaN. */
                const ulong c = at + col0 + nt * 8 + 2 * tig;
                dst[c] = sum == 0.0f ? 0.0f : inv * acc[nt][2 * h];
                dst[c + 1] = sum == 0.0f ? 0.0f : inv * acc[nt][2 * h + 1];
            }
#if FWD_PAIRS
        if (tig == 0 && side == 0) /* one warp of a pair */
#else
        if (tig == 0)
#endif
            put_lse(m[h], sum, stat, split, splits, rows_all, has_lse, lse, lse_off, part);
    }
}
#endif

#if OCLML_WANT(oclml_attention_fwd_mma) && VEC_FRAGMENTS
/* The forward with every fragment value of K and V read as part of a float4 (VEC_FRAGMENTS:
 * head dims that are multiples of 32, warps unpaired, K and V staged by asynchronous copies).
 * Reads of the staged operand, one float at a time, bounded the kernel above (score_product); a
 * float4 read brings a work-item four of its values at once:
 * - S = Q K^T takes the head dim in an order of its own: the k slots tig and tig + 4 of the
 *   8-deep steps 2 c and 2 c + 1 are head-dim columns 16 c + 4 tig + 0, 1 (step 2 c) and 2, 3
 *   (step 2 c + 1), for Q's fragments (held as floats, loaded in that order) and K's alike.
 * - O^T = V^T P^T takes V as the A operand (16 head-dim rows of O^T, 8 keys deep) and P^T as B,
 *   from the accumulators where S left them (k slot tig: key 2 tig, tig + 4: key 2 tig + 1; its
 *   two 8-column tiles: rows gid and gid + 8). The A rows gid and gid + 8 of row tiles 2 u and
 *   2 u + 1 are head-dim columns 32 u + 4 gid + 0, 1 and 2, 3: one float4 of a V row gives both
 *   tiles their values of one key.
 * O^T's accumulators hold query rows 2 tig, 2 tig + 1 (+ 8), whose softmax statistics the
 * work-items of rows gid hold: four shuffles a block bring the rescale factors. K's rows are
 * HEAD_DIM + 16 floats apart (a float4 read of rows gid, gid + 1 falls on 32 banks), V's
 * HEAD_DIM + 4 (rows 2 tig, 2 tig + 2, ... of a read: 8 banks apart). */
#if HEAD_DIM % 32 || FWD_PAIRS || !ASYNC_KV
#error "float4 fragments: head dims that are multiples of 32, warps unpaired, ASYNC_KV"
#endif
#define KV_LD (HEAD_DIM + 16)
#define VV_LD (HEAD_DIM + 4)
#define OT_TILES (HEAD_DIM / 16) /* O^T's 16-row tiles */

/* Keys first .. first + BN - 1 of src (zero-filled at and past the key length `limit`, nothing
 * read there) copied asynchronously into blk, ld floats a row. */
OCLML_INLINE void copy_block_ld(__local float *blk, uint ld, __global const float *src,
                                ulong stride, int first, uint limit) {
    const uint nk = (uint)max(0, min(BN, (int)limit - first));
    FOR_UNIFORM_ROUNDS(e, BN * HEAD_DIM / 4) {
        const uint j = e / (HEAD_DIM / 4), c = e % (HEAD_DIM / 4) * 4;
        const bool in = j < nk;
        cp_async16(blk + j * ld + c, src + (in ? (ulong)(first + (int)j) * stride + c : 0),
                   in ? 16u : 0u);
    }
}

/* The tf32 parts of four values. */
OCLML_INLINE void split4(float4 v, uint4 *hi, uint4 *lo) {
    uint h[4], l[4];
    tf32_split(v.x, &h[0], &l[0]);
    tf32_split(v.y, &h[1], &l[1]);
    tf32_split(v.z, &h[2], &l[2]);
    tf32_split(v.w, &h[3], &l[3]);
    *hi = (uint4)(h[0], h[1], h[2], h[3]);
    *lo = (uint4)(l[0], l[1], l[2], l[3]);
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_fwd_mma(FWD_MMA_ARGS) {
    __local float ks_all[2][BN * KV_LD] __attribute__((aligned(16))),
        vs_all[2][BN * VV_LD] __attribute__((aligned(16)));
    uint kv_buf = 0;
    MMA_LOCALS
    FWD_BLOCK_SETUP

    /* The rows of S: r[0] = warp 16 + gid and r[1] = r[0] + 8; Q in the score product's order:
     * qf[c][h][x] is head-dim column 16 c + 4 tig + x of row r[h]. */
    const uint r[2] = {warp * 16 + gid, warp * 16 + gid + 8};
    float qf[HEAD_DIM / 16][2][4], acc[OT_TILES][2][4], m[2] = {-INFINITY, -INFINITY},
                                                        l[2] = {0.0f, 0.0f};
#pragma unroll
    for (uint h = 0; h < 2; h++) {
        const ulong row = rows_qkv[r[h]];
#pragma unroll
        for (uint c = 0; c < HEAD_DIM / 16; c++)
#pragma unroll
            for (uint x = 0; x < 4; x++)
                qf[c][h][x] = row != NO_ROW ? q[q_off + row + c * 16 + 4 * tig + x] : 0.0f;
    }
#pragma unroll
    for (uint x = 0; x < OT_TILES * 8; x++) acc[x / 8][x / 4 % 2][x % 4] = 0.0f;
    if (first < end) {
        copy_block_ld(ks_all[0], KV_LD, k, kstride, first, (uint)klen);
        copy_block_ld(vs_all[0], VV_LD, v, kstride, first, (uint)klen);
    }
    cp_async_commit();
    for (int kb = first; kb < end; kb += BN) {
        /* This block landed and shown; the next one's copies into the other buffers (every warp
         * is past the last block's reads of them). */
        cp_async_wait(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kb + BN < end) {
            copy_block_ld(ks_all[kv_buf ^ 1u], KV_LD, k, kstride, kb + BN, (uint)klen);
            copy_block_ld(vs_all[kv_buf ^ 1u], VV_LD, v, kstride, kb + BN, (uint)klen);
        }
        cp_async_commit();
        __local const float *ks = ks_all[kv_buf], *vs = vs_all[kv_buf];
        kv_buf ^= 1u;
        /* S = Q K^T, CHUNK_STEPS 8-deep steps summed from zero at a time (the tensor cores'
         * rounding toward zero: score_product); a chunk's K values read before its products. */
        float s[KTILES][4];
#pragma unroll
        for (uint x = 0; x < KTILES * 4; x++) s[x / 4][x % 4] = 0.0f;
        MMA_UNROLL for (uint c0 = 0; c0 < HEAD_DIM / 16; c0 += CHUNK_STEPS / 2) {
            float4 kf[CHUNK_STEPS / 2][KTILES];
            float t[KTILES][4];
            MMA_UNROLL for (uint c = 0; c < CHUNK_STEPS / 2; c++) {
                MMA_UNROLL for (uint nt = 0; nt < KTILES; nt++) {
                    kf[c][nt] = *(__local const float4 *)(ks + (nt * 8 + gid) * KV_LD +
                                                          (c0 + c) * 16 + 4 * tig);
                }
            }
#pragma unroll
            for (uint x = 0; x < KTILES * 4; x++) t[x / 4][x % 4] = 0.0f;
            MMA_UNROLL for (uint c = 0; c < CHUNK_STEPS / 2; c++) {
                uint qh[2][4], ql[2][4];
#pragma unroll
                for (uint x = 0; x < 8; x++)
                    tf32_split(qf[c0 + c][x / 4][x % 4], &qh[x / 4][x % 4], &ql[x / 4][x % 4]);
                MMA_UNROLL for (uint nt = 0; nt < KTILES; nt++) {
                    uint4 kh, kl;
                    split4(kf[c][nt], &kh, &kl);
                    MMA(t[nt], ql[0][0], ql[1][0], ql[0][1], ql[1][1], kh.x, kh.y);
                    MMA(t[nt], qh[0][0], qh[1][0], qh[0][1], qh[1][1], kl.x, kl.y);
                    MMA(t[nt], qh[0][0], qh[1][0], qh[0][1], qh[1][1], kh.x, kh.y);
                    MMA(t[nt], ql[0][2], ql[1][2], ql[0][3], ql[1][3], kh.z, kh.w);
                    MMA(t[nt], qh[0][2], qh[1][2], qh[0][3], qh[1][3], kl.z, kl.w);
                    MMA(t[nt], qh[0][2], qh[1][2], qh[0][3], qh[1][3], kh.z, kh.w);
                }
            }
#pragma unroll
            for (uint x = 0; x < KTILES * 4; x++) s[x / 4][x % 4] += t[x / 4][x % 4];
        }
        float alpha[2];
        softmax_block(s, m, l, alpha, r, rows_i, rows_mask, kb, klen, shift, wl, wr, scale, mask,
                      mask_off, lane, tig EMU_ARGS);
        /* O^T's query rows nq 8 + 2 tig + e take the factor of the work-items of row
         * gid = 2 tig + e. */
#pragma unroll
        for (uint nq = 0; nq < 2; nq++)
#pragma unroll
            for (uint e = 0; e < 2; e++) {
                const float f = SHUFFLE(alpha[nq], 8 * tig + 4 * e);
#pragma unroll
                for (uint mt = 0; mt < OT_TILES; mt++) {
                    acc[mt][nq][e] *= f;
                    acc[mt][nq][2 + e] *= f;
                }
            }
        /* P^T as split B fragments: pb[kt][nq] holds keys kt 8 + 2 tig, + 1 of row nq 8 + gid. */
        uint pbh[KTILES][2][2], pbl[KTILES][2][2];
#pragma unroll
        for (uint x = 0; x < KTILES * 4; x++)
            tf32_split(s[x / 4][x % 4], &pbh[x / 4][x % 4 / 2][x % 2],
                       &pbl[x / 4][x % 4 / 2][x % 2]);
        /* O^T += V^T P^T, each 16 x 8 tile summed over the block from zero (the rounding). */
        MMA_UNROLL for (uint u = 0; u < HEAD_DIM / 32; u++) {
            float4 vf[KTILES][2];
            float t[2][2][4];
            MMA_UNROLL for (uint kt = 0; kt < KTILES; kt++) {
                const uint at = (kt * 8 + 2 * tig) * VV_LD + u * 32 + 4 * gid;
                vf[kt][0] = *(__local const float4 *)(vs + at);
                vf[kt][1] = *(__local const float4 *)(vs + at + VV_LD);
            }
#pragma unroll
            for (uint x = 0; x < 16; x++) t[x / 8][x / 4 % 2][x % 4] = 0.0f;
            MMA_UNROLL for (uint kt = 0; kt < KTILES; kt++) {
                uint4 h0, h1, l0, l1;
                split4(vf[kt][0], &h0, &l0);
                split4(vf[kt][1], &h1, &l1);
                MMA_UNROLL for (uint nq = 0; nq < 2; nq++) {
                    const uint b0 = pbh[kt][nq][0], b1 = pbh[kt][nq][1];
                    MMA(t[0][nq], l0.x, l0.y, l1.x, l1.y, b0, b1);
                    MMA(t[0][nq], h0.x, h0.y, h1.x, h1.y, pbl[kt][nq][0], pbl[kt][nq][1]);
                    MMA(t[0][nq], h0.x, h0.y, h1.x, h1.y, b0, b1);
                    MMA(t[1][nq], l0.z, l0.w, l1.z, l1.w, b0, b1);
                    MMA(t[1][nq], h0.z, h0.w, h1.z, h1.w, pbl[kt][nq][0], pbl[kt][nq][1]);
                    MMA(t[1][nq], h0.z, h0.w, h1.z, h1.w, b0, b1);
                }
            }
#pragma unroll
            for (uint x = 0; x < 16; x++)
                acc[2 * u + x / 8][x / 4 % 2][x % 4] += t[x / 8][x / 4 % 2][x % 4];
        }
    }
    /* Each row's sum over the 4 work-items that hold it; the log-sum-exp from rows gid. */
#pragma unroll
    for (uint h = 0; h < 2; h++) {
        l[h] += SHUFFLE(l[h], lane ^ 1u);
        l[h] += SHUFFLE(l[h], lane ^ 2u);
        if (tig == 0)
            put_lse(m[h], l[h], rows_stat[r[h]], split, splits, rows_all, has_lse, lse, lse_off,
                    part);
    }
    /* O / l of query rows nq 8 + 2 tig + e: head-dim columns 32 u + 4 gid + 0 .. 3 of each. */
#pragma unroll
    for (uint nq = 0; nq < 2; nq++)
#pragma unroll
        for (uint e = 0; e < 2; e++) {
            const float sum = SHUFFLE(l[nq], 8 * tig + 4 * e);
            const uint row = warp * 16 + nq * 8 + 2 * tig + e;
            const ulong stat = rows_stat[row];
            const float inv = sum > 0.0f ? 1.0f / sum : (sum == 0.0f ? 0.0f : sum);
            /* One split: O in place; several: this split's part (rows in [B, H, LQ]). */
            const ulong at = splits == 1      ? rows_qkv[row]
                             : stat == NO_ROW ? NO_ROW
                                              : stat * HEAD_DIM;
            __global float *dst =
                splits == 1 ? o + o_off : part + (ulong)split * rows_all * HEAD_DIM;
            if (at != NO_ROW)
#pragma unroll
                for (uint u = 0; u < HEAD_DIM / 32; u++) {
                    /* A row that saw no key: 0, even where 0 x inf (an infinite V another row of
                     * the block sees) made its accumulator NaN. */
                    const ulong c = at + u * 32 + 4 * gid;
                    const float out[4] = {acc[2 * u][nq][e], acc[2 * u][nq][2 + e],
                                          acc[2 * u + 1][nq][e], acc[2 * u + 1][nq][2 + e]};
#pragma unroll
                    for (uint x = 0; x < 4; x++) dst[c + x] = sum == 0.0f ? 0.0f : inv * out[x];
                }
        }
}
#endif

/* P of a score (its row's log-sum-exp row_lse): exp(masked score - lse), and -0 where masked or
 * the row sees nothing (+0 only where a seen probability underflows: score_grad tells them
 * apart by the sign; -0 adds into dV as 0). Build options that drop signed zeros
 * (-cl-no-signed-zeros, -cl-fast-relaxed-math) would let a NaN of dP reach masked keys' dK. */
OCLML_INLINE float probability(float score, int i, int j, float row_lse, int klen, int shift,
                               int wl, int wr, float scale, __global const float *mask,
                               ulong mask_off, ulong mrow) {
    const float x = masked_score(score, i, j, klen, shift, wl, wr, scale, mask, mask_off, mrow);
    return (x == -INFINITY || row_lse == -INFINITY) ? -0.0f : exp(x - row_lse);
}

/* dS = P (dP - delta); 0 where masked (whatever dO V^T holds there), but a seen P that
 * underflowed to 0 still carries a NaN of dP or delta (a NaN in dO reaches dK). */
OCLML_INLINE float score_grad(float p, float dp, float row_delta) {
    return as_uint(p) == 0x80000000u ? 0.0f : p * (dp - row_delta); /* -0 exactly, not a NaN */
}

/* P and dS of a score tile whose rows are `prow` (tile rows: query rows) or whose columns are
 * (dK/dV: the tile's rows are keys), in place of the score and dP. */
OCLML_INLINE void softmax_grad(float *p, float *dp, int i, int j, float row_lse, float row_delta,
                               int klen, int shift, int wl, int wr, float scale,
                               __global const float *mask, ulong mask_off, ulong mrow) {
    *p = probability(*p, i, j, row_lse, klen, shift, wl, wr, scale, mask, mask_off, mrow);
    *dp = score_grad(*p, *dp, row_delta);
}

#define MMA_BWD_ARGS                                                                      \
    __global const float *q, ulong q_off, __global const float *k, ulong k_off,           \
        __global const float *v, ulong v_off, __global const float *dout, ulong dout_off, \
        __global const float *lse, ulong lse_off, __global const float *delta,            \
        __global const float *mask, ulong mask_off, __global const float *keylen, ulong keylen_off

#if OCLML_WANT(oclml_attention_dq_mma)
/* Grid: (row blocks x NT, B HKV). dQ = scale sum dS K over the block's key blocks of BN keys;
 * Q and dO of the work-item's two rows stay in registers as A fragments. With DQ_PAIRS two warps
 * share 16 rows, each holding half of the head dim of Q, dO and dQ (all of it spills registers at
 * head dim 128): each computes its half's part of S and dP, the pair swaps parts through local
 * memory and both add them in the same order (low half first), so both hold the same P and dS,
 * and each adds dS K into its half of dQ. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_dq_mma(MMA_BWD_ARGS, __global float *dq, ulong dq_off, ATT_GEOM) {
    KV_BUFFERS
#if DQ_PAIRS
    __local float parts[WARPS][2][KTILES * 4 * 32]; /* each warp's part of S and of dP */
#endif
    MMA_LOCALS
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV;
    const uint R0 = LAST_FIRST_ROW_BLOCK;
    k += k_off + row_offset(b, hkv, 0, HKV, LK);
    v += v_off + row_offset(b, hkv, 0, HKV, LK);
    const ulong kstride = KEY_STRIDE(HKV);
    int jlo, jhi;
    const int klen = row_block(rows, R0, b, hkv, keylen, keylen_off, &jlo, &jhi, B, H, HKV, LQ, LK,
                               scale, shift, wl, wr, mask_bstride, mask_hstride);
#if DQ_PAIRS /* HEAD_SPLIT warps on 16 rows: groups of rows, and the part of each warp */
    const uint pair = warp % (WARPS / HEAD_SPLIT), side = warp / (WARPS / HEAD_SPLIT);
#else
    const uint pair = warp, side = 0;
#endif
    const uint col0 = side * DPART * 8; /* this warp's first head-dim column */
    const uint r[2] = {pair * 16 + gid, pair * 16 + gid + 8};
    const ulong qrow[2] = {rows_qkv[r[0]], rows_qkv[r[1]]};
    float row_lse[2], row_delta[2];
#pragma unroll
    for (uint h = 0; h < 2; h++) {
        const ulong stat = rows_stat[r[h]];
        row_lse[h] = stat == NO_ROW ? -INFINITY : lse[lse_off + stat];
        row_delta[h] = stat == NO_ROW ? 0.0f : delta[stat];
    }
    float qa[DPART][4], da[DPART][4], acc[DPART][4];
    load_a(qa, q + q_off + col0, qrow, tig);
    load_a(da, dout + dout_off + col0, qrow, tig);
#pragma unroll
    for (uint kk = 0; kk < DPART; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++) acc[kk][x] = 0.0f;
    KV_FIRST(jlo / BN * BN, jhi)
    for (int kb = jlo / BN * BN; kb < jhi; kb += BN) {
        KV_NEXT(kb, jhi)
        float s[KTILES][4], dp[KTILES][4];
        score_product(s, qa, ks + col0, gid, tig EMU_ARGS);
        score_product(dp, da, vs + col0, gid, tig EMU_ARGS);
#if DQ_PAIRS /* KV_NEXT's barrier keeps the next block's parts after these reads */
        put_part(s, parts[warp][0], lane);
        put_part(dp, parts[warp][1], lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        sum_parts(s, parts[pair][0], WARPS / HEAD_SPLIT * 2 * KTILES * 4 * 32, lane);
        sum_parts(dp, parts[pair][1], WARPS / HEAD_SPLIT * 2 * KTILES * 4 * 32, lane);
#endif
#pragma unroll
        for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
            for (uint x = 0; x < 4; x++) {
                const uint row = r[x / 2];
                softmax_grad(&s[nt][x], &dp[nt][x], rows_i[row],
                             kb + (int)(nt * 8 + 2 * tig + x % 2), row_lse[x / 2], row_delta[x / 2],
                             klen, shift, wl, wr, scale, mask, mask_off, rows_mask[row]);
            }
        uint dsh[KTILES][4], dsl[KTILES][4];
        to_a_fragments(dp, dsh, dsl);
        accumulate_product(acc, dsh, dsl, ks + col0, gid, tig EMU_ARGS);
    }
#pragma unroll
    for (uint h = 0; h < 2; h++)
        if (qrow[h] != NO_ROW)
#pragma unroll
            for (uint nt = 0; nt < DPART; nt++) {
                const ulong at = dq_off + qrow[h] + col0 + nt * 8 + 2 * tig;
                const bool empty = row_lse[h] == -INFINITY; /* 0, as in the forward */
                dq[at] = empty ? 0.0f : scale * acc[nt][2 * h];
                dq[at + 1] = empty ? 0.0f : scale * acc[nt][2 * h + 1];
            }
}
#endif

#if OCLML_WANT(oclml_attention_dkdv_mma)
#if DKDV_PAIRS && HEAD_SPLIT > 2
#error "the dK/dV kernel's pairs split the head dim in two at most"
#endif
/* Grid: (key blocks of KEYS keys x NT, B HKV). The block's keys against every query row of the
 * key head's group that can see them, BQ rows staged at a time and taken BN at a time.
 *
 * Without DKDV_PAIRS each warp takes 16 keys and all four products: S^T = K Q^T and dP^T =
 * V dO^T with K and V as A fragments in registers, then dV += P^T dO and dK += dS^T Q. With
 * DKDV_PAIRS two warps share 16 keys, each with one operand and one accumulator in registers (at
 * head dim 128 the four of them spill): the P warp computes S^T = K Q^T, P = exp(S - lse), hands
 * P over through local memory and adds P^T dO into dV; the dS warp computes dP^T = V dO^T, takes
 * P, and adds dS^T Q into dK, dS = P (dP - delta). Both run the same instructions on their own
 * operands (no divergent barrier, emulated instructions included). With HEAD_SPLIT 2 (above head
 * dim 128, where one operand and one accumulator spill) four warps share 16 keys: two P warps
 * and two dS warps, each holding half of the head dim of its operand and accumulator; the two
 * of a product sum S^T or dP^T from their parts (sum_parts), and the first P warp hands P
 * over. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_dkdv_mma(MMA_BWD_ARGS, __global float *dk, ulong dk_off, __global float *dv,
                         ulong dv_off, ATT_GEOM) {
    /* 16-byte aligned: the asynchronous copies' destinations (a misaligned one faults). */
    __local float qs[BQ * K_LD] __attribute__((aligned(16))),
        ds_rows[BQ * K_LD] __attribute__((aligned(16))), lse_s[BQ], delta_s[BQ];
#if DKDV_PAIRS
    __local float p_tiles[2][KGROUPS][KTILES * 4 * 32]; /* P by group, two parts in flight */
#if HEAD_SPLIT > 1
    __local float parts[WARPS][KTILES * 4 * 32]; /* each warp's part of S^T or dP^T */
#endif
#endif
    MMA_LOCALS
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV;
    const uint n_rows = H / HKV * LQ;
    const int kb = (int)(get_group_id(0) * KEYS);
    const ulong kstride = KEY_STRIDE(HKV), kbase = row_offset(b, hkv, 0, HKV, LK);
    const int klen = key_length(keylen, keylen_off, b, LK);
#if DKDV_PAIRS /* role: the P warps' parts, then the dS warps' */
    const uint pair = warp % KGROUPS, role = warp / KGROUPS, side = role % HEAD_SPLIT;
    const bool p_warp = role < HEAD_SPLIT;
#else
    const uint pair = warp, side = 0;
#endif
    const uint col0 = side * DPART * 8; /* this warp's first head-dim column */
    /* This work-item's keys: kb + pair 16 + gid and 8 more (accumulator rows). */
    const int key[2] = {kb + (int)(pair * 16 + gid), kb + (int)(pair * 16 + gid + 8)};
    const ulong krow[2] = {key[0] < (int)LK ? kbase + key[0] * kstride : NO_ROW,
                           key[1] < (int)LK ? kbase + key[1] * kstride : NO_ROW};
    /* Keys past the key length are never read (their gradients are written as 0). */
    const ulong kread[2] = {key[0] < klen ? krow[0] : NO_ROW, key[1] < klen ? krow[1] : NO_ROW};
#if DKDV_PAIRS
    float xa[DPART][4], acc[DPART][4]; /* K and dV (P warps) or V and dK (dS warps), a part */
    load_a(xa, (p_warp ? k + k_off : v + v_off) + col0, kread, tig);
#else
    float ka[DSTEPS][4], va[DSTEPS][4], acc_k[DSTEPS][4], acc_v[DSTEPS][4];
    load_a(ka, k + k_off, kread, tig);
    load_a(va, v + v_off, kread, tig);
#endif
#pragma unroll
    for (uint kk = 0; kk < DPART; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++) {
#if DKDV_PAIRS
            acc[kk][x] = 0.0f;
#else
            acc_k[kk][x] = acc_v[kk][x] = 0.0f;
#endif
        }
    for (uint R0 = 0; R0 < n_rows; R0 += BQ) {
        int imin, imax, jlo, jhi;
        query_span(R0, n_rows, LQ, &imin, &imax);
        key_span(imin, imax, klen, shift, wl, wr, &jlo, &jhi);
        if (jhi <= kb || jlo >= kb + (int)KEYS) continue; /* no row of the block sees these keys */
        fill_rows(rows, R0, b, hkv, n_rows, B, H, HKV, LQ, LK, scale, shift, wl, wr, mask_bstride,
                  mask_hstride);
#if ASYNC_KV /* every copy in flight at once, rather than a round trip a staged element */
        copy_rows(qs, q + q_off, rows_qkv);
        copy_rows(ds_rows, dout + dout_off, rows_qkv);
        cp_async_commit();
#else
        stage_rows(qs, q + q_off, rows_qkv, BQ);
        stage_rows(ds_rows, dout + dout_off, rows_qkv, BQ);
#endif
        for (uint e = lid; e < BQ; e += NT) {
            const ulong stat = rows_stat[e];
            lse_s[e] = stat == NO_ROW ? -INFINITY : lse[lse_off + stat];
            delta_s[e] = stat == NO_ROW ? 0.0f : delta[stat];
        }
#if ASYNC_KV
        cp_async_wait(0);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint part = 0; part < BQ; part += BN) {
#if DKDV_PAIRS
            __local float *pt = p_tiles[part / BN % 2][pair];
            float t[KTILES][4]; /* S^T, then P (P warps); dP^T, then dS (dS warps) */
            score_product(t, xa, (p_warp ? qs : ds_rows) + part * K_LD + col0, gid, tig EMU_ARGS);
#if HEAD_SPLIT > 1 /* the next part's writes come after the P tiles' barrier */
            put_part(t, parts[warp], lane);
            barrier(CLK_LOCAL_MEM_FENCE);
            sum_parts(t, parts[pair + (role - side) * KGROUPS], KGROUPS * KTILES * 4 * 32, lane);
#endif
            if (p_warp)
#pragma unroll
                for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
                    for (uint x = 0; x < 4; x++) {
                        const uint row = part + nt * 8 + 2 * tig + x % 2;
                        t[nt][x] =
                            probability(t[nt][x], rows_i[row], key[x / 2], lse_s[row], klen, shift,
                                        wl, wr, scale, mask, mask_off, rows_mask[row]);
#if HEAD_SPLIT > 1
                        if (side == 0) /* the P warps hold the same P: the first hands it over */
#endif
                            pt[(nt * 4 + x) * 32 + lane] = t[nt][x];
                    }
            /* The P tiles written; the buffer written next was last read two parts ago, before
             * the previous part's barrier. */
            barrier(CLK_LOCAL_MEM_FENCE);
            /* dS (dS warps), as a select: PoCL 3.1 skipped this loop under `if (!p_warp)` once
             * no barrier followed it before the products' (the emulated kernels). */
#pragma unroll
            for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
                for (uint x = 0; x < 4; x++) {
                    const uint row = part + nt * 8 + 2 * tig + x % 2;
                    const float ds =
                        score_grad(pt[(nt * 4 + x) * 32 + lane], t[nt][x], delta_s[row]);
                    t[nt][x] = p_warp ? t[nt][x] : ds;
                }
            uint fh[KTILES][4], fl[KTILES][4];
            to_a_fragments(t, fh, fl);
            accumulate_product(acc, fh, fl, (p_warp ? ds_rows : qs) + part * K_LD + col0, gid,
                               tig EMU_ARGS);
#else
            float s[KTILES][4], dp[KTILES][4];
            score_product(s, ka, qs + part * K_LD, gid, tig EMU_ARGS);
            score_product(dp, va, ds_rows + part * K_LD, gid, tig EMU_ARGS);
#pragma unroll
            for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
                for (uint x = 0; x < 4; x++) {
                    const uint row = part + nt * 8 + 2 * tig + x % 2;
                    softmax_grad(&s[nt][x], &dp[nt][x], rows_i[row], key[x / 2], lse_s[row],
                                 delta_s[row], klen, shift, wl, wr, scale, mask, mask_off,
                                 rows_mask[row]);
                }
            uint fh[KTILES][4], fl[KTILES][4];
            to_a_fragments(s, fh, fl);
            accumulate_product(acc_v, fh, fl, ds_rows + part * K_LD, gid, tig EMU_ARGS);
            to_a_fragments(dp, fh, fl);
            accumulate_product(acc_k, fh, fl, qs + part * K_LD, gid, tig EMU_ARGS);
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the staged rows are read until here */
    }
#pragma unroll
    for (uint h = 0; h < 2; h++)
        if (krow[h] != NO_ROW)
#pragma unroll
            for (uint nt = 0; nt < DPART; nt++) {
                const ulong at = krow[h] + col0 + nt * 8 + 2 * tig;
#if DKDV_PAIRS
                __global float *dst = p_warp ? dv + dv_off : dk + dk_off;
                const float f = p_warp ? 1.0f : scale;
                dst[at] = f * acc[nt][2 * h];
                dst[at + 1] = f * acc[nt][2 * h + 1];
#else
                dk[dk_off + at] = scale * acc_k[nt][2 * h];
                dk[dk_off + at + 1] = scale * acc_k[nt][2 * h + 1];
                dv[dv_off + at] = acc_v[nt][2 * h];
                dv[dv_off + at + 1] = acc_v[nt][2 * h + 1];
#endif
            }
}
#endif
