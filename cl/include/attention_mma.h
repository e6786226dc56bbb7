/* Attention on TF32 tensor cores with fp32-level accuracy (3xTF32: each product as
 * hi*hi + hi*lo + lo*hi, mma.h): what the forward (attention_fwd_mma.cl) and the backward's dQ
 * and dK/dV kernels (attention_bwd_mma.cl) share. lib/ops/attention_plan.c picks them where the
 * device reports TF32 mma.sync; attention.cl holds the FMA kernels with the same arguments and
 * semantics.
 *
 * Here: the tile's defines (HEAD_DIM, BN keys or rows a score tile, WARPS, the pairings and
 * HEAD_SPLIT, the batches of operand reads), the warp shuffle and its emulation (MMA_EMULATE: the
 * instruction and the shuffles in portable code, for the tests), the products on fragments
 * (score_product, to_a_fragments, accumulate_product), the part exchange of warps that share a
 * head dim (put_part, sum_parts), and the staging of K and V blocks and of query rows in local
 * memory. With ASYNC_KV the staged blocks come by asynchronous float4 copies (ptx.h's
 * cp_async16): the forward and dQ kernels copy the next K and V block into a second pair of
 * buffers while the tensor cores work on this one; the dK/dV kernel copies its Q and dO rows all
 * at once.
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
/* ONE_TF32 1: every operand the kernels read is exact in TF32 (bf16 and fp16 inputs: the
 * 16-bit ops' stand-ins), so one TF32 product serves where 3xTF32 takes three; the products of
 * fp32 values the kernel forms itself (P, dS) are rounded to TF32 (11 significant bits, finer
 * than the 16-bit dtypes that attention's inputs came in). MMA_SMALL issues the 3xTF32 small
 * terms, or nothing (OpenCL C has no variadic macros). */
#ifndef ONE_TF32
#define ONE_TF32 0
#endif
#if ONE_TF32
#define MMA_TF32_ONLY 1
#define MMA_SMALL(d, a0, a1, a2, a3, b0, b1) ((void)0)
#else
#define MMA_SMALL(d, a0, a1, a2, a3, b0, b1) MMA(d, a0, a1, a2, a3, b0, b1)
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
/* Column tiles of accumulate_product whose B values are read together (lib/ops/attention_plan.c
 * picks it per kernel), cut to a divisor of DPART. */
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
 * product that takes it, each read's latency stands in the way (with accumulate_product's reads
 * batched too, the forward runs 8-10% faster on the H100: bench/DECISIONS.md, "Reads batched
 * before the products"). swap: a holds the forward's staged operand and blk its fragments' (dK/dV's
 * S^T = K Q^T), so the two small 3xTF32 terms go in the forward's order (the same bits). */
OCLML_INLINE void score_product(float s[KTILES][4], float a[DPART][4], __local const float *blk,
                                bool swap, uint gid, uint tig EMU_PARAMS) {
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
                if (swap) {
                    MMA_SMALL(t[nt], ah[0], ah[1], ah[2], ah[3], bl[0], bl[1]);
                    MMA_SMALL(t[nt], al[0], al[1], al[2], al[3], bh[0], bh[1]);
                } else {
                    MMA_SMALL(t[nt], al[0], al[1], al[2], al[3], bh[0], bh[1]);
                    MMA_SMALL(t[nt], ah[0], ah[1], ah[2], ah[3], bl[0], bl[1]);
                }
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
                MMA_SMALL(t[j], al[kt][0], al[kt][1], al[kt][2], al[kt][3], bh[0], bh[1]);
                MMA_SMALL(t[j], ah[kt][0], ah[kt][1], ah[kt][2], ah[kt][3], bl[0], bl[1]);
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
 * zero-filled) copied asynchronously into blk, ld floats a row. */
OCLML_INLINE void copy_chunk(__local float *blk, uint ld, __global const float *src, ulong stride,
                             int first, uint nk, uint e) {
    const uint j = e / (HEAD_DIM / 4), c = e % (HEAD_DIM / 4) * 4;
    const bool in = j < nk;
    cp_async16(blk + j * ld + c, src + (in ? (ulong)(first + (int)j) * stride + c : 0),
               in ? 16u : 0u);
}

/* stage_kv by asynchronous float4 copies, zero-filled at and past the key length (nothing read
 * there); the caller commits, waits and passes a barrier before reading. One loop for both
 * (their index math shared). */
OCLML_INLINE void copy_kv(__local float *ks, __local float *vs, __global const float *k,
                          __global const float *v, ulong stride, int first, uint limit) {
    const uint nk = (uint)max(0, min(BN, (int)limit - first));
    FOR_UNIFORM_ROUNDS(e, BN * HEAD_DIM / 4) {
        copy_chunk(ks, K_LD, k, stride, first, nk, e);
        copy_chunk(vs, K_LD, v, stride, first, nk, e);
    }
}

/* copy_kv for one of them, ld floats a row (SPLIT_KV: K_LD; the float4 forward's own strides). */
OCLML_INLINE void copy_block(__local float *blk, uint ld, __global const float *src, ulong stride,
                             int first, uint limit) {
    const uint nk = (uint)max(0, min(BN, (int)limit - first));
    FOR_UNIFORM_ROUNDS(e, BN * HEAD_DIM / 4) copy_chunk(blk, ld, src, stride, first, nk, e);
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
#define KV_FIRST(first, end)                                                  \
    if ((first) < (end)) copy_block(ks, K_LD, k, kstride, first, (uint)klen); \
    cp_async_commit();
#define KV_NEXT(kb, end)                                \
    cp_async_wait(0);                                   \
    barrier(CLK_LOCAL_MEM_FENCE);                       \
    copy_block(vs, K_LD, v, kstride, (kb), (uint)klen); \
    cp_async_commit();
#define KV_K_READ(kb, end)                                                          \
    if ((kb) + BN < (end)) copy_block(ks, K_LD, k, kstride, (kb) + BN, (uint)klen); \
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

/* A tiled kernel's work-group as (block, head): blocks along dimension 0, key heads (batch
 * entries too) along dimension 1, in groups of one work-item. Block-major, the groups run block
 * by block over every head rather than head by head: under positional masks (a causal mask or a
 * window: wl or wr >= 0) a block's work depends on its position, and head by head the last
 * head's heaviest blocks start when the launch is nearly done. Block-major, the causal forward
 * runs 4-5% faster on the H100 and the causal backward 13% (with the dQ GEMM's rows block-major
 * too, gemm.cl's BAND_BLOCK_MAJOR); full attention's dQ kernel loses 3% so (its heads' K and V
 * leave the L2 cache) and its forward ties (bench/DECISIONS.md, "Work-groups block-major"). */
OCLML_INLINE uint2 group_of(bool block_major) {
    const uint block = (uint)get_group_id(0), head = (uint)get_group_id(1);
    return block_major
               ? oclml_block_major(block, (uint)get_num_groups(0), head, (uint)get_num_groups(1))
               : (uint2)(block, head);
}
#define BY_POSITION (wl >= 0 || wr >= 0)

/* A forward or dQ work-group's batch and key head and row block (R0, its row tables filled), K
 * and V moved to its key head, and the keys [jlo, jhi) its rows see. The row blocks run last
 * first: under a causal mask the last rows see the most keys, and the lightest blocks then end
 * the launch. */
#define ROW_BLOCK_SETUP                                                                         \
    const uint2 group = group_of(BY_POSITION);                                                  \
    const uint bh = group.y, b = bh / HKV, hkv = bh % HKV;                                      \
    const uint R0 = ((uint)get_num_groups(0) - 1 - group.x) * BQ;                               \
    k += k_off + row_offset(b, hkv, 0, HKV, LK);                                                \
    v += v_off + row_offset(b, hkv, 0, HKV, LK);                                                \
    const ulong kstride = KEY_STRIDE(HKV);                                                      \
    int jlo, jhi;                                                                               \
    const int klen = row_block(rows, R0, b, hkv, keylen, keylen_off, &jlo, &jhi, B, H, HKV, LQ, \
                               LK, scale, shift, wl, wr, mask_bstride, mask_hstride);

/* This warp's group of 16 rows (pair) and, where HEAD_SPLIT warps share the group (the paired
 * forward and dQ kernels), its part of the head dim (side, from column col0); the work-item's rows
 * r[0] = pair 16 + gid and r[1] = r[0] + 8 of the block, and their offsets qrow (WARP_ROWS;). */
#if HEAD_SPLIT > 1
#define WARP_GROUP \
    const uint pair = warp % (WARPS / HEAD_SPLIT), side = warp / (WARPS / HEAD_SPLIT);
#else
#define WARP_GROUP const uint pair = warp, side = 0;
#endif
#define WARP_ROWS                                             \
    WARP_GROUP                                                \
    const uint col0 = side * DPART * 8;                       \
    const uint r[2] = {pair * 16 + gid, pair * 16 + gid + 8}; \
    const ulong qrow[2] = {rows_qkv[r[0]], rows_qkv[r[1]]}

/* Whether a forward warp skips key block kb, outside the keys [lo, hi) its rows can see
 * (warp_key_span: the causal diagonal, the window, the key length; an additive mask is applied as
 * given): its scores there would all be -inf, leaving its running maximum, sum and accumulators
 * exactly as they are. Under a causal mask, warps above the diagonal of a row block's last key
 * blocks skip them (at head dim 128, 16-key blocks: 28 of the 64 warp-blocks of the diagonal).
 * That runs the causal forward about 2% faster on the H100 at head dim 128 and ties at 64
 * (32-key blocks: 2 of 8); the same skip in the dQ kernel ties at 128 and loses 1.5-2% at 64,
 * full or causal, and is not there (bench/DECISIONS.md, "Forward warps skip"). Not with the
 * emulated instruction, whose barriers every work-item must reach, nor where warps share rows
 * (their parts meet at barriers). */
#if MMA_EMULATE
#define WARP_SKIPS(kb, lo, hi) false
#else
#define WARP_SKIPS(kb, lo, hi) ((kb) >= (hi) || (kb) + (int)BN <= (lo))
#endif

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

#ifndef VEC_FRAGMENTS
#define VEC_FRAGMENTS 0
#endif
#if VEC_FRAGMENTS
/* Float4 fragment reads (VEC_FRAGMENTS: head dims that are multiples of 32, warps that each hold
 * the whole head dim (unpaired, or the dK/dV kernel's pairs) or, in the paired forward and the
 * dK/dV kernel's fours, a half of it that is, the staged operands copied asynchronously), for
 * the forward, dQ and dK/dV kernels. Reads of a
 * staged operand one float at a time bounded those kernels (score_product, accumulate_product);
 * a float4 read brings a work-item four of its values at once:
 * - The score products (S = Q K^T, dP = dO V^T; dK/dV's S^T = K Q^T, dP^T = V dO^T) take the
 *   head dim in an order of their own: the k slots tig and tig + 4 of the 8-deep steps 2 c and
 *   2 c + 1 are head-dim columns vec_col(c, tig) + 0, 1 (step 2 c) and 2, 3 (step 2 c + 1), for
 *   the rows' fragments (held as floats, loaded in that order: load_vec_rows) and the staged rows
 *   alike.
 * - The accumulating products take their transposed form, O^T = V^T P^T (the forward),
 *   dQ^T = K^T dS^T, dV^T = dO^T P and dK^T = Q^T dS: the staged rows as the A operand (16
 *   head-dim rows, 8 keys deep) and P^T (dS^T) as B, from the accumulators where the score product
 *   left them (k slot tig: key 2 tig, tig + 4: key 2 tig + 1; its two 8-column tiles: rows gid
 *   and gid + 8). The A rows gid and gid + 8 of row tiles 2 u and 2 u + 1 are head-dim columns
 *   32 u + 4 gid + 0, 1 and 2, 3: one float4 of a staged row gives both tiles their values of one
 *   key. Rows K_LD = HEAD_DIM + 4 floats apart put a quarter-warp's float4s there (rows 2 tig,
 *   columns 4 gid) on 32 banks.
 * The accumulators then hold rows 2 tig, 2 tig + 1 (+ 8) of the warp's 16 (query rows; dK/dV's
 * keys), whose row statistics the work-items of rows gid hold (shuffles bring them).
 * A score product's quarter-warp reads rows gid and gid + 1, K_LD floats apart: the score
 * products spread a work-item's columns 8 tig apart (vec_col's `spread`), so that the two rows'
 * float4s fall on 32 banks. Every kernel's scores take the same order, the forward's, dQ's and
 * dK/dV's (whose S^T = K Q^T swaps the operands: `swap` issues its two small 3xTF32 terms in the
 * forward's order), so the backward recomputes the forward's scores bit for bit: P = exp(S -
 * lse) is then exactly the forward's, which scores of order 1e3 need (a last-bit difference
 * there is 1e-3 in P). */
/* The head-dim columns a warp holds: all of them, or its part where warps share the head dim
 * (the paired forward and the dK/dV kernel's fours above head dim 128); the helpers take
 * pointers to its first. */
#define VEC_COLS (HEAD_DIM / HEAD_SPLIT)
#if VEC_COLS % 32 || !ASYNC_KV
#error "float4 fragments: head-dim parts that are multiples of 32, ASYNC_KV"
#endif

/* The first head-dim column of a work-item's float4 in 16-column step pair c (see above). */
OCLML_INLINE uint vec_col(uint c, uint tig, bool spread) {
    return spread ? 32 * (c / 2) + 8 * tig + 4 * (c % 2) : 16 * c + 4 * tig;
}
#define OT_TILES (VEC_COLS / 16) /* the transposed accumulators' 16-row tiles */

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

/* Rows row[0], row[1] of x (offsets; NO_ROW: zeros) as the score products' fragment floats:
 * f[c][h][x] is head-dim column vec_col(c, tig, spread) + x of row h. */
OCLML_INLINE void load_vec_rows(float f[VEC_COLS / 16][2][4], __global const float *x,
                                const ulong row[2], uint tig, bool spread) {
#pragma unroll
    for (uint h = 0; h < 2; h++)
#pragma unroll
        for (uint c = 0; c < VEC_COLS / 16; c++)
#pragma unroll
            for (uint e = 0; e < 4; e++)
                f[c][h][e] = row[h] != NO_ROW ? x[row[h] + vec_col(c, tig, spread) + e] : 0.0f;
}

/* The 3xTF32 products of the float4 fragment reads, one text for every kernel that runs them:
 * macros, so that each expands where it is used and compiles as if written there (the forward
 * takes them so; the backward through the functions below). Their operands' float4s are read at
 * offsets the user gives as a macro of the loop indices: no parentheses are added around it, so
 * an offset written as `xs + row * ld + col0 + ...` keeps its own order of additions. */

/* t += F X^T of one 8-deep step by 3xTF32 (fh, fl: F's split fragments in scope; j: the step's
 * first fragment column, 0 or 2; x: X's split k slots), the small terms first, in the forward's
 * order where SWAP says F is the staged operand of the forward's product. */
#define VEC_SPLIT_PRODUCTS(t, j, xh0, xh1, xl0, xl1, SWAP)                          \
    do {                                                                            \
        if (SWAP) {                                                                 \
            MMA_SMALL(t, fh[0][j], fh[1][j], fh[0][j + 1], fh[1][j + 1], xl0, xl1); \
            MMA_SMALL(t, fl[0][j], fl[1][j], fl[0][j + 1], fl[1][j + 1], xh0, xh1); \
        } else {                                                                    \
            MMA_SMALL(t, fl[0][j], fl[1][j], fl[0][j + 1], fl[1][j + 1], xh0, xh1); \
            MMA_SMALL(t, fh[0][j], fh[1][j], fh[0][j + 1], fh[1][j + 1], xl0, xl1); \
        }                                                                           \
        MMA(t, fh[0][j], fh[1][j], fh[0][j + 1], fh[1][j + 1], xh0, xh1);           \
    } while (0)

/* s = F X^T for a warp's 16 rows (fragment floats f, as load_vec_rows gives them) against the
 * BN staged rows of xs, the float4 of column tile nt at 16-column step pair c at xs + AT(nt, c);
 * CHUNK_STEPS 8-deep steps summed from zero at a time (the tensor cores' rounding toward zero:
 * score_product), a chunk's staged values read before its products; SWAP: F is the staged
 * operand of the forward's product and X its fragments' (dK/dV's S^T), whose small terms are then
 * issued in the forward's order (see above). Declares nothing outside its own block. */
#define VEC_SCORE_PRODUCT(s, f, xs, AT, SWAP)                                                  \
    do {                                                                                       \
        _Pragma("unroll") for (uint x = 0; x < KTILES * 4; x++) s[x / 4][x % 4] = 0.0f;        \
        MMA_UNROLL for (uint c0 = 0; c0 < VEC_COLS / 16; c0 += CHUNK_STEPS / 2) {              \
            float4 xf[CHUNK_STEPS / 2][KTILES];                                                \
            float t[KTILES][4];                                                                \
            MMA_UNROLL for (uint c = 0; c < CHUNK_STEPS / 2; c++) {                            \
                MMA_UNROLL for (uint nt = 0; nt < KTILES; nt++) {                              \
                    xf[c][nt] = *(__local const float4 *)(xs + AT(nt, c0 + c));                \
                }                                                                              \
            }                                                                                  \
            _Pragma("unroll") for (uint x = 0; x < KTILES * 4; x++) t[x / 4][x % 4] = 0.0f;    \
            MMA_UNROLL for (uint c = 0; c < CHUNK_STEPS / 2; c++) {                            \
                uint fh[2][4], fl[2][4];                                                       \
                _Pragma("unroll") for (uint x = 0; x < 8; x++)                                 \
                    tf32_split(f[c0 + c][x / 4][x % 4], &fh[x / 4][x % 4], &fl[x / 4][x % 4]); \
                MMA_UNROLL for (uint nt = 0; nt < KTILES; nt++) {                              \
                    uint4 xh, xl;                                                              \
                    split4(xf[c][nt], &xh, &xl);                                               \
                    VEC_SPLIT_PRODUCTS(t[nt], 0, xh.x, xh.y, xl.x, xl.y, SWAP);                \
                    VEC_SPLIT_PRODUCTS(t[nt], 2, xh.z, xh.w, xl.z, xl.w, SWAP);                \
                }                                                                              \
            }                                                                                  \
            _Pragma("unroll") for (uint x = 0; x < KTILES * 4; x++) s[x / 4][x % 4] +=         \
                t[x / 4][x % 4];                                                               \
        }                                                                                      \
    } while (0)

/* acc += X^T P^T, X the BN staged rows of xs (the forward's V, dQ's K, dK/dV's dO and Q: K_LD
 * floats apart, the float4 of key kt 8 + 2 tig and head-dim columns u 32 + 4 gid at
 * xs + AT(kt, u), the next key's K_LD further) and P^T the split fragments bh, bl of
 * to_b_fragments: each 16 x 8 tile summed over the block from zero (the rounding). */
#define VEC_ACCUMULATE(acc, bh, bl, xs, AT)                                                    \
    do {                                                                                       \
        MMA_UNROLL for (uint u = 0; u < VEC_COLS / 32; u++) {                                  \
            float4 xf[KTILES][2];                                                              \
            float t[2][2][4];                                                                  \
            MMA_UNROLL for (uint kt = 0; kt < KTILES; kt++) {                                  \
                const uint at = AT(kt, u);                                                     \
                xf[kt][0] = *(__local const float4 *)(xs + at);                                \
                xf[kt][1] = *(__local const float4 *)(xs + at + K_LD);                         \
            }                                                                                  \
            _Pragma("unroll") for (uint x = 0; x < 16; x++) t[x / 8][x / 4 % 2][x % 4] = 0.0f; \
            MMA_UNROLL for (uint kt = 0; kt < KTILES; kt++) {                                  \
                uint4 h0, h1, l0, l1;                                                          \
                split4(xf[kt][0], &h0, &l0);                                                   \
                split4(xf[kt][1], &h1, &l1);                                                   \
                MMA_UNROLL for (uint nq = 0; nq < 2; nq++) {                                   \
                    const uint b0 = bh[kt][nq][0], b1 = bh[kt][nq][1];                         \
                    MMA_SMALL(t[0][nq], l0.x, l0.y, l1.x, l1.y, b0, b1);                       \
                    MMA_SMALL(t[0][nq], h0.x, h0.y, h1.x, h1.y, bl[kt][nq][0], bl[kt][nq][1]); \
                    MMA(t[0][nq], h0.x, h0.y, h1.x, h1.y, b0, b1);                             \
                    MMA_SMALL(t[1][nq], l0.z, l0.w, l1.z, l1.w, b0, b1);                       \
                    MMA_SMALL(t[1][nq], h0.z, h0.w, h1.z, h1.w, bl[kt][nq][0], bl[kt][nq][1]); \
                    MMA(t[1][nq], h0.z, h0.w, h1.z, h1.w, b0, b1);                             \
                }                                                                              \
            }                                                                                  \
            _Pragma("unroll") for (uint x = 0; x < 16; x++)                                    \
                acc[2 * u + x / 8][x / 4 % 2][x % 4] += t[x / 8][x / 4 % 2][x % 4];            \
        }                                                                                      \
    } while (0)

/* s = F X^T for this warp's 16 rows (fragments f) against the BN staged rows of xs (ld floats
 * apart; spread: vec_col's layout), VEC_SCORE_PRODUCT's product. */
#define VEC_ROW_AT(nt, c) (nt * 8 + gid) * ld + vec_col(c, tig, spread)
OCLML_INLINE void vec_score_product(float s[KTILES][4], const float f[VEC_COLS / 16][2][4],
                                    __local const float *xs, uint ld, bool spread, bool swap,
                                    uint gid, uint tig EMU_PARAMS) {
    VEC_SCORE_PRODUCT(s, f, xs, VEC_ROW_AT, swap);
}
#undef VEC_ROW_AT

/* A score tile's accumulators (P or dS) as the split B fragments of its transpose:
 * bh[kt][nq] holds keys kt 8 + 2 tig, + 1 of row nq 8 + gid. */
#define TO_B_FRAGMENTS(s, bh, bl)                           \
    _Pragma("unroll") for (uint x = 0; x < KTILES * 4; x++) \
        tf32_split(s[x / 4][x % 4], &bh[x / 4][x % 4 / 2][x % 2], &bl[x / 4][x % 4 / 2][x % 2])
OCLML_INLINE void to_b_fragments(const float s[KTILES][4], uint bh[KTILES][2][2],
                                 uint bl[KTILES][2][2]) {
    TO_B_FRAGMENTS(s, bh, bl);
}

/* acc += X^T P^T, VEC_ACCUMULATE's product with X at xs. */
#define VEC_KEY_AT(kt, u) (kt * 8 + 2 * tig) * K_LD + u * 32 + 4 * gid
OCLML_INLINE void vec_accumulate(float acc[OT_TILES][2][4], const uint bh[KTILES][2][2],
                                 const uint bl[KTILES][2][2], __local const float *xs, uint gid,
                                 uint tig EMU_PARAMS) {
    VEC_ACCUMULATE(acc, bh, bl, xs, VEC_KEY_AT);
}
#undef VEC_KEY_AT

/* The transposed accumulators' values of row nq 8 + 2 tig + e of the warp's 16 (query rows; keys
 * in dK/dV), head-dim columns 32 u + 4 gid + 0 .. 3. */
OCLML_INLINE float4 vec_out(const float acc[OT_TILES][2][4], uint u, uint nq, uint e) {
    return (float4)(acc[2 * u][nq][e], acc[2 * u][nq][2 + e], acc[2 * u + 1][nq][e],
                    acc[2 * u + 1][nq][2 + e]);
}
#endif
