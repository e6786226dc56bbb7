/* Attention forward on 16-bit tensor cores (FlashAttention-2's forward), O = softmax(scale Q K^T)
 * V with q, k and v bf16 or fp16 (AB_DT, dtype.h's numbers: 1 or 2), o fp32, bf16 or fp16 (O_DT)
 * and the log-sum-exp fp32 [B, H, LQ] (has_lse 0: not written).
 *
 * Contract: tensors contiguous in BHLD or BLHD (LAYOUT_BLHD), offsets in elements; HEAD_DIM a
 * multiple of 16 up to 128; H a multiple of HKV (query head h reads key head h / (H / HKV)); LQ
 * and LK any. Causal masks and windows by position as attention.cl's rule (diagonal i + shift,
 * keys d - wl .. d + wr; no additive mask, key lengths or dropout: the host sends those calls to
 * the fp32 stand-ins). A row that sees no key writes o = 0 and lse = -inf; NaN in q, k or v
 * reaches the rows whose softmax takes it (a NaN score's exp, or its product with P).
 *
 * Work: a work-group of WARPS warps takes BQ = 16 MT WARPS stacked query rows of one (batch, key
 * head) (row R = g LQ + i for query head hkv G + g, attention.h's row table) and walks the key
 * blocks of BN keys its rows can see. Each warp keeps its MT x 16 rows of Q as m16n8k16 A
 * fragments over the whole head dim (each K and V fragment read from local memory feeds MT
 * tiles: MT = 2 halves the local-memory reads a product); the block's K and V are staged in
 * local memory (16-bit, rows KV_LD apart; with KV_AHEAD the next block is copied by cp.async
 * while this one is used, two buffers), S = Q K^T comes from the tensor cores in fp32 (K as B
 * fragments by ldmatrix), the
 * online softmax runs in fp32 on the accumulator fragments (a row's statistics reduced over the
 * 4 work-items that hold it), and P, rounded to the AB dtype, is the A operand of O += P V as the
 * accumulators hold it: two adjacent n8 accumulator tiles are one m16k16 A fragment (V as B
 * fragments by ldmatrix's transposing form). O is summed in fp32 and rounded once at the end.
 *
 * With MMA_EMULATE (forced where the build has no inline PTX) the instruction, ldmatrix and the
 * warp shuffles run in portable code with the same fragment layouts, so that the suite runs this
 * kernel on any device. */
#include "dtype.h"

#ifndef AB_DT
#define AB_DT 1
#endif
#ifndef O_DT
#define O_DT 0
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BN
#define BN 64 /* keys a block: a multiple of 16 */
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef MT
#define MT 1 /* m16 tiles of query rows a warp */
#endif
#ifndef KV_AHEAD
#define KV_AHEAD 0 /* 1: the next key block copied (cp.async) while this one is used */
#endif
#if KV_AHEAD
#define OCLML_WANT_CP_ASYNC 1
#define OCLML_CP_ASYNC_PORTABLE MMA_EMULATE /* mma16.h settles MMA_EMULATE before ptx.h reads it */
#endif
#include "mma16.h"

#if HEAD_DIM % 16 || HEAD_DIM > 128 || BN % 16
#error "head dims that are multiples of 16 up to 128, key blocks of a multiple of 16"
#endif

#define NT (32 * WARPS)
#define BQ (16 * MT * WARPS)
#define KV_BUFS (KV_AHEAD ? 2 : 1)
#include "attention.h"

#define DSTEPS (HEAD_DIM / 16) /* k16 steps of S over the head dim; n16 column pairs of O */
#define KSTEPS (BN / 16)       /* k16 steps of P V over the block's keys; n16 key pairs of S */
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
/* K's B fragments of key tiles j0 and j0 + 8 at head-dim step d0: b[0..1] the first, b[2..3]
 * the second (B[k][n] = K[n][k]: words along a staged row). */
OCLML_INLINE void load_k(uint *b, __local const ushort *ks, uint j0, uint d0, uint gid, uint tig) {
    for (uint q = 0; q < 4; q++)
        b[q] = word_along(ks, j0 + gid + 8 * (q >> 1), d0 + 2 * tig + 8 * (q & 1));
}
/* V's B fragments of head-dim tiles c0 and c0 + 8 at key step j0 (B[k][n] = V[k][n]: words
 * across two staged rows). */
OCLML_INLINE void load_v(uint *b, __local const ushort *vs, uint j0, uint c0, uint gid, uint tig) {
    for (uint q = 0; q < 4; q++)
        b[q] = word_across(vs, j0 + 2 * tig + 8 * (q & 1), c0 + gid + 8 * (q >> 1));
}
#define EMU_PARAMS , __local float *xchg, __local float *shfl
#define EMU_ARGS , xchg, shfl
#define MMA_UNROLL /* rolled: the emulation's barriers would multiply the kernel's size */
#else
#define MMA16(d, a, b) mma_16bit(d, a[0], a[1], a[2], a[3], b[0], b[1])
#define SHUFFLE(v, src) warp_shuffle(v, src)
/* ldmatrix: work-item l gives the row address of 8 x 8 tile l / 8, so that the four tiles come
 * out in the emulation's fragment order (gemm_lp.cl's K-contiguous and row-contiguous reads). */
OCLML_INLINE void load_k(uint *b, __local const ushort *ks, uint j0, uint d0, uint gid, uint tig) {
    const uint l = gid * 4 + tig;
    ldmatrix_x4(b, ks + (j0 + (l >> 4) * 8 + (l & 7u)) * KV_LD + d0 + (l >> 3 & 1u) * 8);
}
OCLML_INLINE void load_v(uint *b, __local const ushort *vs, uint j0, uint c0, uint gid, uint tig) {
    const uint l = gid * 4 + tig;
    ldmatrix_x4_trans(b, vs + (j0 + (l >> 3 & 1u) * 8 + (l & 7u)) * KV_LD + c0 + (l >> 4) * 8);
}
#define EMU_PARAMS
#define EMU_ARGS
#define MMA_UNROLL _Pragma("unroll")
#endif

/* Keys first .. first + BN - 1 of K and V (rows `stride` elements apart) into ks and vs, zeros
 * at and past the key length: eight elements a copy, in the same rounds for every work-item. */
OCLML_INLINE void stage_kv(__local ushort *ks, __local ushort *vs, __global const ushort *k,
                           __global const ushort *v, ulong stride, int first, int klen) {
    const int nk = max(0, min(BN, klen - first));
    for (uint e = get_local_id(0); e < BN * HEAD_DIM / 8; e += NT) {
        const uint j = e / (HEAD_DIM / 8), c = e % (HEAD_DIM / 8) * 8;
        const bool in = (int)j < nk;
        const ulong at = (ulong)(first + (int)j) * stride + c;
        vstore8(in ? vload8(0, k + at) : (ushort8)(0), 0, ks + j * KV_LD + c);
        vstore8(in ? vload8(0, v + at) : (ushort8)(0), 0, vs + j * KV_LD + c);
    }
}

#if KV_AHEAD
/* As stage_kv, by 16-byte asynchronous copies (zero-filled past the key length) that the
 * caller commits and waits for: k and v 16-byte aligned, stride a multiple of 8. */
OCLML_INLINE void stage_kv_async(__local ushort *ks, __local ushort *vs, __global const ushort *k,
                                 __global const ushort *v, ulong stride, int first, int klen) {
    const int nk = max(0, min(BN, klen - first));
    for (uint e = get_local_id(0); e < BN * HEAD_DIM / 8; e += NT) {
        const uint j = e / (HEAD_DIM / 8), c = e % (HEAD_DIM / 8) * 8;
        const bool in = (int)j < nk;
        const ulong at = in ? (ulong)(first + (int)j) * stride + c : 0;
        cp_async16((__local float *)(ks + j * KV_LD + c), (__global const float *)(k + at),
                   in ? 16u : 0u);
        cp_async16((__local float *)(vs + j * KV_LD + c), (__global const float *)(v + at),
                   in ? 16u : 0u);
    }
}
#endif

/* A fragments of Q's rows row[0] (gid) and row[1] (gid + 8) over the head dim (NO_ROW: 0). */
OCLML_INLINE void load_q(uint qa[DSTEPS][4], __global const ushort *q, const ulong row[2],
                         uint tig) {
#pragma unroll
    for (uint kk = 0; kk < DSTEPS; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++) {
            const ulong r = row[x & 1u];
            const ulong at = r + kk * 16 + 2 * tig + 8 * (x >> 1);
            qa[kk][x] = r == NO_ROW ? 0u : (uint)q[at] | (uint)q[at + 1] << 16;
        }
}

/* s = Q K^T for the warp's MT x 16 rows against the block's BN keys (n8 tile nt: keys nt 8 ..),
 * each K fragment feeding every m16 tile. */
OCLML_INLINE void score_product(float s[MT][BN / 8][4], uint qa[MT][DSTEPS][4],
                                __local const ushort *ks, uint gid, uint tig EMU_PARAMS) {
#pragma unroll
    for (uint x = 0; x < MT * BN / 2; x++) s[x / (BN / 2)][x % (BN / 2) / 4][x % 4] = 0.0f;
    MMA_UNROLL for (uint kk = 0; kk < DSTEPS; kk++) {
        MMA_UNROLL for (uint jp = 0; jp < KSTEPS; jp++) {
            uint b[4];
            load_k(b, ks, jp * 16, kk * 16, gid, tig);
            MMA_UNROLL for (uint mt = 0; mt < MT; mt++) {
                MMA16(s[mt][2 * jp], qa[mt][kk], b);
                MMA16(s[mt][2 * jp + 1], qa[mt][kk], (b + 2));
            }
        }
    }
}

/* The online softmax of a block for this work-item's rows with query indices i[0], i[1] (s over
 * keys kb + nt 8 + 2 tig + x % 2 of row x / 2): positions masked, each row's maximum over the 4
 * work-items that hold it, alpha = the factor by which its earlier sum l (done here) and output
 * (the caller's) shrink, and s turned into exp(s - maximum), added to l. */
OCLML_INLINE void softmax_block(float s[BN / 8][4], float m[2], float l[2], float alpha[2],
                                const int i[2], int kb, int klen, int shift, int wl, int wr,
                                float scale, uint lane, uint tig EMU_PARAMS) {
    float mx[2] = {-INFINITY, -INFINITY}, base[2];
#pragma unroll
    for (uint x = 0; x < BN / 2; x++) {
        const int j = kb + (int)(x / 4 * 8 + 2 * tig + x % 2);
        const float v =
            masked_score(s[x / 4][x % 4], i[x % 4 / 2], j, klen, shift, wl, wr, scale, 0, 0, 0);
        s[x / 4][x % 4] = v;
        mx[x % 4 / 2] = fmax(mx[x % 4 / 2], v);
    }
    ONLINE_ROW_UPDATE(mx, m, l, alpha, base);
#pragma unroll
    for (uint x = 0; x < BN / 2; x++) {
        const float p = exp(s[x / 4][x % 4] - base[x % 4 / 2]);
        s[x / 4][x % 4] = p;
        l[x % 4 / 2] += p;
    }
}

/* acc += P V: P (the accumulators of S after the softmax) rounded to the AB dtype as A
 * fragments, two adjacent n8 tiles (keys 16 kt ..) making one k16 step: row gid's words come
 * from elements 0, 1 of tiles 2 kt and 2 kt + 1, row gid + 8's from elements 2, 3. Each of O's
 * n8 tiles sums the block from zero and adds it in fp32 (the tensor cores round their sums
 * toward zero: the bias grows with every accumulation into one register). */
OCLML_INLINE void accumulate_pv(float acc[MT][HEAD_DIM / 8][4], float s[MT][BN / 8][4],
                                __local const ushort *vs, uint gid, uint tig EMU_PARAMS) {
    uint pa[MT][KSTEPS][4];
#pragma unroll
    for (uint mt = 0; mt < MT; mt++)
#pragma unroll
        for (uint kt = 0; kt < KSTEPS; kt++) {
            pa[mt][kt][0] = ab_pack(s[mt][2 * kt][0], s[mt][2 * kt][1]);
            pa[mt][kt][1] = ab_pack(s[mt][2 * kt][2], s[mt][2 * kt][3]);
            pa[mt][kt][2] = ab_pack(s[mt][2 * kt + 1][0], s[mt][2 * kt + 1][1]);
            pa[mt][kt][3] = ab_pack(s[mt][2 * kt + 1][2], s[mt][2 * kt + 1][3]);
        }
    MMA_UNROLL for (uint dp = 0; dp < DSTEPS; dp++) {
        float t[MT][2][4];
#pragma unroll
        for (uint x = 0; x < MT * 8; x++) t[x / 8][x % 8 / 4][x % 4] = 0.0f;
        MMA_UNROLL for (uint kt = 0; kt < KSTEPS; kt++) {
            uint b[4];
            load_v(b, vs, kt * 16, dp * 16, gid, tig);
            MMA_UNROLL for (uint mt = 0; mt < MT; mt++) {
                MMA16(t[mt][0], pa[mt][kt], b);
                MMA16(t[mt][1], pa[mt][kt], (b + 2));
            }
        }
#pragma unroll
        for (uint x = 0; x < MT * 8; x++)
            acc[x / 8][2 * dp + x % 8 / 4][x % 4] += t[x / 8][x % 8 / 4][x % 4];
    }
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_lp_fwd(__global const ushort *q, ulong q_off, __global const ushort *k, ulong k_off,
                       __global const ushort *v, ulong v_off, __global DT_ELEM(O_DT) * o,
                       ulong o_off, __global float *lse, ulong lse_off, uint has_lse, ATT_GEOM) {
    /* 16-byte aligned: ldmatrix and cp.async move 16-byte rows, and PTX aligns an array only to
     * its element's size. */
    __local ushort kvs[KV_BUFS][2][BN * KV_LD] __attribute__((aligned(16)));
    __local ulong rows_qkv[BQ], rows_stat[BQ], rows_mask[BQ];
    __local int rows_i[BQ];
    const row_table rows = {rows_qkv, rows_stat, rows_mask, rows_i};
    const uint lid = get_local_id(0), lane = lid % 32, warp = lid / 32, gid = lane / 4,
               tig = lane % 4;
#if MMA_EMULATE
    __local float xchg_all[WARPS * XCHG_FLOATS], shfl_all[WARPS * 32];
    __local float *xchg = xchg_all + warp * XCHG_FLOATS, *shfl = shfl_all + warp * 32;
#endif

    /* The work-group's (batch, key head) and row block, last block first: under a causal mask
     * the last rows see the most keys, and the lightest blocks then end the launch. */
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV; /* (sliced launches) */
    const uint R0 = ((uint)get_num_groups(0) - 1 - (uint)get_group_id(0)) * BQ;
    k += k_off + row_offset(b, hkv, 0, HKV, LK);
    v += v_off + row_offset(b, hkv, 0, HKV, LK);
    int jlo, jhi;
    const int klen = row_block(rows, R0, b, hkv, 0, 0, &jlo, &jhi, B, H, HKV, LQ, LK, scale, shift,
                               wl, wr, mask_bstride, mask_hstride);

    /* This work-item's rows: gid and gid + 8 of each of the warp's m16 tiles. */
    uint r[MT][2];
    ulong qrow[MT][2];
    int qi[MT][2];
    uint qa[MT][DSTEPS][4];
    float acc[MT][HEAD_DIM / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (uint mt = 0; mt < MT; mt++) {
        for (uint h = 0; h < 2; h++) {
            r[mt][h] = (warp * MT + mt) * 16 + gid + 8 * h;
            qrow[mt][h] = rows_qkv[r[mt][h]];
            qi[mt][h] = rows_i[r[mt][h]];
            m[mt][h] = -INFINITY, l[mt][h] = 0.0f;
        }
        load_q(qa[mt], q + q_off, qrow[mt], tig);
#pragma unroll
        for (uint x = 0; x < HEAD_DIM / 2; x++) acc[mt][x / 4][x % 4] = 0.0f;
    }

    const ulong kv_stride = KEY_STRIDE(HKV);
    const int kb0 = jlo / BN * BN;
#if KV_AHEAD
    /* Two buffers: block n + 1 is copied while block n is used. Every step commits one group
     * (empty past the last block), so waiting for all but the latest is waiting for this one. */
    if (kb0 < jhi) stage_kv_async(kvs[0][0], kvs[0][1], k, v, kv_stride, kb0, klen);
    cp_async_commit();
#endif
    for (int kb = kb0, n = 0; kb < jhi; kb += BN, n++) {
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is past the last block's reads */
#if KV_AHEAD
        if (kb + BN < jhi)
            stage_kv_async(kvs[(n + 1) % 2][0], kvs[(n + 1) % 2][1], k, v, kv_stride, kb + BN,
                           klen);
        cp_async_commit();
        cp_async_wait(1);
        __local const ushort *ks = kvs[n % 2][0], *vs = kvs[n % 2][1];
#else
        stage_kv(kvs[0][0], kvs[0][1], k, v, kv_stride, kb, klen);
        __local const ushort *ks = kvs[0][0], *vs = kvs[0][1];
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[MT][BN / 8][4], alpha[MT][2];
        score_product(s, qa, ks, gid, tig EMU_ARGS);
        MMA_UNROLL for (uint mt = 0; mt < MT; mt++) {
            softmax_block(s[mt], m[mt], l[mt], alpha[mt], qi[mt], kb, klen, shift, wl, wr, scale,
                          lane, tig EMU_ARGS);
#pragma unroll
            for (uint x = 0; x < HEAD_DIM / 2; x++) acc[mt][x / 4][x % 4] *= alpha[mt][x % 4 / 2];
        }
        accumulate_pv(acc, s, vs, gid, tig EMU_ARGS);
    }

    /* Each row's sum over the 4 work-items that hold it, then O / l and the log-sum-exp. */
    MMA_UNROLL for (uint mt = 0; mt < MT; mt++) for (uint h = 0; h < 2; h++) {
        l[mt][h] += SHUFFLE(l[mt][h], lane ^ 1u);
        l[mt][h] += SHUFFLE(l[mt][h], lane ^ 2u);
        const float sum = l[mt][h], inv = row_inv(sum);
        if (qrow[mt][h] != NO_ROW)
#pragma unroll
            for (uint x = 0; x < HEAD_DIM / 4; x++) {
                /* A row that saw no key: 0, even where 0 x inf (an infinite V another row of
                 * the block sees) made its accumulator NaN. */
                const float out = sum == 0.0f ? 0.0f : inv * acc[mt][x / 2][2 * h + x % 2];
                DT_STORE(O_DT, o, o_off + qrow[mt][h] + x / 2 * 8 + 2 * tig + x % 2, out);
            }
        if (tig == 0)
            put_lse(m[mt][h], sum, rows_stat[r[mt][h]], 0, 1, 0, has_lse, lse, lse_off, lse);
    }
}
