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
 * local memory (16-bit, rows KV_LD apart; with AHEAD the next block is copied by cp.async
 * while this one is used, two buffers), S = Q K^T comes from the tensor cores in fp32 (K as B
 * fragments by ldmatrix), the
 * online softmax runs in fp32 on the accumulator fragments (a row's statistics reduced over the
 * 4 work-items that hold it), and P, rounded to the AB dtype, is the A operand of O += P V as the
 * accumulators hold it: two adjacent n8 accumulator tiles are one m16k16 A fragment (V as B
 * fragments by ldmatrix's transposing form). O is summed in fp32 and rounded once at the end.
 *
 * With MMA_EMULATE (forced where the build has no inline PTX) the instruction, ldmatrix and the
 * warp shuffles run in portable code with the same fragment layouts, so that the suite runs this
 * kernel on any device. The instruction, the operand reads, the staging and the emulation are
 * attention_lp.h's, shared with the backward; the products here are shaped by MT. */
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
#ifndef AHEAD
#define AHEAD 0 /* 1: the next key block copied (cp.async) while this one is used */
#endif
#include "attention_lp.h"

#define KV_BUFS (AHEAD ? 2 : 1)

/* s = Q K^T for the warp's MT x 16 rows against the block's BN keys (n8 tile nt: keys nt 8 ..),
 * each K fragment feeding every m16 tile. */
OCLML_INLINE void score_tiles(float s[MT][BN / 8][4], uint qa[MT][DSTEPS][4],
                              __local const ushort *ks, uint gid, uint tig EMU_PARAMS) {
#pragma unroll
    for (uint x = 0; x < MT * BN / 2; x++) s[x / (BN / 2)][x % (BN / 2) / 4][x % 4] = 0.0f;
    MMA_UNROLL for (uint kk = 0; kk < DSTEPS; kk++) {
        MMA_UNROLL for (uint jp = 0; jp < KSTEPS; jp++) {
            uint b[4];
            load_b_rows(b, ks, jp * 16, kk * 16, gid, tig);
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
            load_b_cols(b, vs, kt * 16, dp * 16, gid, tig);
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
    EMU_BUFFERS

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
        load_a_rows(qa[mt], q + q_off, qrow[mt], tig);
#pragma unroll
        for (uint x = 0; x < HEAD_DIM / 2; x++) acc[mt][x / 4][x % 4] = 0.0f;
    }

    const ulong kv_stride = KEY_STRIDE(HKV);
    const int kb0 = jlo / BN * BN;
    for (int kb = kb0, n = 0; kb < jhi; kb += BN, n++) {
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is past the last block's reads */
        const uint buf = key_block_step(kvs, k, v, kv_stride, kb, n, jhi, klen);
        __local const ushort *ks = kvs[buf][0], *vs = kvs[buf][1];
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[MT][BN / 8][4], alpha[MT][2];
        score_tiles(s, qa, ks, gid, tig EMU_ARGS);
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
