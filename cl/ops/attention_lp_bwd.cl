/* Attention backward on 16-bit tensor cores (FlashAttention-2's backward without atomics): with
 * q, k, v and dout bf16 or fp16 (AB_DT, dtype.h's 1 or 2), o of O_DT, lse and delta fp32
 * [B, H, LQ], the gradients dq, dk and dv each in its own dtype (DQ_DT, DK_DT, DV_DT: fp32, bf16
 * or fp16). Three kernels, each output element summed by one work-item in a fixed order (two
 * runs give the same bits):
 *   oclml_attention_lp_delta  delta = rowsum(dO * O) in fp32, the softmax backward's correction
 *   oclml_attention_lp_dkdv   a block of 16 WARPS keys of one (batch, key head) against every
 *                             query row that sees it, the query heads of its group in turn:
 *                             dV = P^T dO, dK = scale dS^T Q
 *   oclml_attention_lp_dq     16 WARPS stacked query rows of one (batch, key head) against the
 *                             key blocks they see: dQ = scale dS K
 * with P = exp(scale S - lse) recomputed in fp32 and dS = P (dP - delta), dP = dO V^T.
 *
 * Contract: tensors contiguous in BHLD or BLHD (LAYOUT_BLHD), offsets in elements, dout laid
 * out as q; HEAD_DIM a multiple of 16 up to 128; H a multiple of HKV; LQ and LK any (tails
 * zero-filled when staged, never read past a tensor). Positions masked by attention.h's rule
 * (diagonal i + shift; causal masks have wr 0; no additive mask, key lengths or dropout: the
 * host sends those calls to the fp32 stand-ins). A row whose lse is -inf (it saw no key) has
 * P = 0 and dq = 0; a masked P is -0, so its dS is 0 whatever dP holds (attention.h's
 * probability and score_grad). NaN in q, k, v, o, dout or lse reaches the gradients whose sums
 * take it; the products also carry a NaN or infinity of q, k or dout to masked pairs of the same
 * blocks (0 x inf: dS K into dq of rows that do not see the key, dS^T Q and P^T dO into dk and dv
 * of keys that the row does not see), as the fp32 tensor-core backward does.
 *
 * Products on m16n8k16 with fp32 accumulation (attention_lp.h). In dK/dV each warp keeps its
 * 16 keys of K and V as A fragments; a block of BN query rows of Q and dO is staged in local
 * memory; S^T = K Q^T and dP^T = V dO^T come from the tensor cores; P^T and dS^T, rounded to the
 * AB dtype, are the A operands of dV += P^T dO and dK += dS^T Q as the accumulators hold them
 * (two adjacent n8 tiles are one m16k16 A fragment). In dQ each warp keeps its 16 rows of Q and
 * dO as A fragments; K and V blocks of BN keys are staged; S = Q K^T, dP = dO V^T, and dS,
 * rounded to the AB dtype, is the A operand of dQ += dS K. The scale is applied once to dK and
 * dQ at the end, and each output rounded once to its dtype.
 *
 * The tile (the host's plan): BN rows a staged block; with AHEAD the next block (and in dK/dV its
 * rows' lse and delta) is copied while this one is used, two buffers (cp.async, 16-byte copies:
 * the host asks for 16-bit offsets that are multiples of 8); with KV_LOCAL dK/dV reads its keys'
 * K and V as A fragments by ldmatrix from local memory, staged once (the work-group's keys are
 * fixed), instead of keeping them in registers (at head dim 128, 64 registers a work-item that
 * the two accumulators and the score tiles already crowd).
 *
 * With MMA_EMULATE (forced where the build has no inline PTX) the instruction and ldmatrix run
 * in portable code with the same fragment layouts, so that the suite runs these kernels on any
 * device. */
#include "dtype.h"

#ifndef AB_DT
#define AB_DT 1
#endif
#ifndef O_DT
#define O_DT 0
#endif
#ifndef DQ_DT
#define DQ_DT 0
#endif
#ifndef DK_DT
#define DK_DT 0
#endif
#ifndef DV_DT
#define DV_DT 0
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BN
#define BN 64 /* rows a staged block: query rows in dK/dV, keys in dQ; a multiple of 16 */
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef AHEAD
#define AHEAD 0 /* 1: the next staged block copied (cp.async) while this one is used */
#endif
#ifndef KV_LOCAL
#define KV_LOCAL 0 /* 1: dK/dV's K and V staged in local memory, not held in registers */
#endif
#include "attention_lp.h"

#if BN > NT
#error "a staged block's rows at most the work-group's work-items (its lse and delta rows)"
#endif
#define BUFS (AHEAD ? 2 : 1)
#if AHEAD
#define STAGE_BLOCK(xs, ys, x, y, stride, first, len) \
    stage_pair_async(xs, ys, x, y, stride, first, len)
#else
#define STAGE_BLOCK(xs, ys, x, y, stride, first, len) \
    stage_pair(xs, ys, x, y, stride, first, len, BN)
#endif

/* The backward's arguments: the 16-bit inputs, lse and delta (fp32). */
#define LP_BWD_ARGS                                                                         \
    __global const ushort *q, ulong q_off, __global const ushort *k, ulong k_off,           \
        __global const ushort *v, ulong v_off, __global const ushort *dout, ulong dout_off, \
        __global const float *lse, ulong lse_off, __global const float *delta

#if OCLML_WANT(oclml_attention_lp_delta)
/* delta[row] = sum_d dO[row][d] O[row][d] in fp32, rows in [B, H, LQ] order. */
__kernel void oclml_attention_lp_delta(__global const DT_ELEM(O_DT) * o, ulong o_off,
                                       __global const ushort *dout, ulong dout_off,
                                       __global float *delta, ulong rows_all, uint H, uint LQ) {
    const ulong stat = get_global_id(0);
    if (stat >= rows_all) return;
    const uint i = (uint)(stat % LQ), bh = (uint)(stat / LQ);
    const ulong at = row_offset(bh / H, bh % H, i, H, LQ);
    float sum = 0.0f;
    for (uint c = 0; c < HEAD_DIM; c++)
        sum = fma(DT_LOAD(O_DT, o, o_off + at + c), DT_LOAD(AB_DT, dout, dout_off + at + c), sum);
    delta[stat] = sum;
}
#endif

/* P and dS of a score tile in place (s: scores in, P out; dp: dP in, dS out) for its elements'
 * query indices i and keys j: element (nt, e) has row e / 2 and column nt 8 + 2 tig + e % 2; a
 * transposed tile (dK/dV: rows are keys) takes its query index, lse and delta from the column. */
#define SOFTMAX_GRADS(I, J, LSE, DELTA)                                                            \
    _Pragma("unroll") for (uint x_ = 0; x_ < BN / 2; x_++) {                                       \
        const uint nt = x_ / 4, e = x_ % 4, row = e / 2, col = nt * 8 + 2 * tig + e % 2;           \
        (void)row;                                                                                 \
        (void)col;                                                                                 \
        const float p_ = probability(s[nt][e], I, J, LSE, (int)LK, shift, wl, wr, scale, 0, 0, 0); \
        dp[nt][e] = score_grad(p_, dp[nt][e], DELTA);                                              \
        s[nt][e] = p_;                                                                             \
    }

/* An accumulator tile's two rows into out (rows at[0], at[1]; NO_ROW: not written), each element
 * times f and rounded to dt, a row that `empty` marks written 0. */
#define STORE_ROWS(dt, out, out_off, acc, at, f, empty)                            \
    _Pragma("unroll") for (uint h_ = 0; h_ < 2; h_++) if (at[h_] != NO_ROW)        \
        _Pragma("unroll") for (uint x_ = 0; x_ < HEAD_DIM / 4; x_++) {             \
        const float val_ = empty[h_] ? 0.0f : (f)*acc[x_ / 2][2 * h_ + x_ % 2];    \
        DT_STORE(dt, out, out_off + at[h_] + x_ / 2 * 8 + 2 * tig + x_ % 2, val_); \
    }

#if OCLML_WANT(oclml_attention_lp_dkdv)
/* Block t of a dK/dV work-group's walk (nqb blocks of BN query rows from qb0 a query head, the
 * heads of its group in turn): its rows of Q and dO into xs and ys. */
OCLML_INLINE void stage_query_block(__local ushort *xs, __local ushort *ys,
                                    __global const ushort *q, __global const ushort *dout, int t,
                                    int nqb, int qb0, uint b, uint h0, uint H, uint LQ) {
    const ulong base = row_offset(b, h0 + (uint)(t / nqb), 0, H, LQ);
    STAGE_BLOCK(xs, ys, q + base, dout + base, KEY_STRIDE(H), qb0 + t % nqb * BN, (int)LQ);
}

/* Block t's lse and delta of row r (r < BN; -inf and 0 past LQ). */
OCLML_INLINE float2 query_block_stats(__global const float *lse, __global const float *delta, int t,
                                      int nqb, int qb0, uint r, uint b, uint h0, uint H, uint LQ) {
    const int i = qb0 + t % nqb * BN + (int)r;
    const ulong stat = ((ulong)b * H + h0 + (uint)(t / nqb)) * LQ + (ulong)i;
    return i < (int)LQ ? (float2)(lse[stat], delta[stat]) : (float2)(-INFINITY, 0.0f);
}

/* Grid: (key blocks of BQ keys x NT, B HKV). Work-group (key block, (b, hkv)); warp w its keys
 * j0 + 16 w ..; for each query head of the group and each block of BN query rows that can see
 * one of its keys (the whole range of every warp: the emulation's barriers want every work-item
 * in every product), S^T, P^T, dP^T, dS^T and the two sums. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_lp_dkdv(LP_BWD_ARGS, __global DT_ELEM(DK_DT) * dk, ulong dk_off,
                        __global DT_ELEM(DV_DT) * dv, ulong dv_off, ATT_GEOM) {
    /* 16-byte aligned: ldmatrix and cp.async move 16-byte rows, and PTX aligns an array only to
     * its element's size. */
    __local ushort qds[BUFS][2][BN * KV_LD] __attribute__((aligned(16)));
    __local float stats[BUFS][BN][2];
    const uint lid = get_local_id(0), lane = lid % 32, warp = lid / 32, gid = lane / 4,
               tig = lane % 4;
    EMU_BUFFERS(void) lane;
    (void)mask_bstride;
    (void)mask_hstride;
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV, G = H / HKV;
    const int j0 = (int)(get_group_id(0) * BQ);
    const int key[2] = {j0 + (int)(warp * 16 + gid), j0 + (int)(warp * 16 + gid + 8)};
    ulong krow[2];
    for (uint h = 0; h < 2; h++)
        krow[h] = key[h] < (int)LK ? row_offset(b, hkv, (uint)key[h], HKV, LK) : NO_ROW;
#if KV_LOCAL
    /* the work-group's BQ keys of K and V, read as A fragments by every block's products (the
     * loop's barriers order these writes before the first read) */
    __local ushort kvs[2][BQ * KV_LD] __attribute__((aligned(16)));
    {
        const ulong kbase = row_offset(b, hkv, 0, HKV, LK);
        stage_pair(kvs[0], kvs[1], k + k_off + kbase, v + v_off + kbase, KEY_STRIDE(HKV), j0,
                   (int)LK, BQ);
    }
#else
    uint ka[DSTEPS][4], va[DSTEPS][4];
    load_a_rows(ka, k + k_off, krow, tig);
    load_a_rows(va, v + v_off, krow, tig);
#endif
    float dka[HEAD_DIM / 8][4], dva[HEAD_DIM / 8][4];
#pragma unroll
    for (uint x = 0; x < HEAD_DIM / 2; x++) dka[x / 4][x % 4] = dva[x / 4][x % 4] = 0.0f;

    /* The queries that see a key of j0 .. jlast: i + shift + wr >= j and i + shift - wl <= j;
     * blocks of BN rows from qb0, nqb a query head, G heads: `blocks` in all. */
    const int jlast = min(j0 + BQ, (int)LK) - 1;
    const int ilo = wr < 0 ? 0 : max(0, j0 - shift - wr);
    const int ihi = wl < 0 ? (int)LQ : min((int)LQ, jlast - shift + wl + 1);
    const int qb0 = ilo / BN * BN, nqb = ihi > qb0 ? (ihi - qb0 + BN - 1) / BN : 0,
              blocks = (int)G * nqb;
    q += q_off, dout += dout_off, lse += lse_off;
    /* With AHEAD block t + 1 is copied while block t is used; its lse and delta are read into
     * registers before block t's products and stored after them. Every step commits one group
     * (empty past the last block), so waiting for all but the latest is waiting for this one;
     * the first block is copied in the first step, after its barrier (the forward says why). */
    for (int t = 0; t < blocks; t++) {
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is past the last block's reads */
        const int qb = qb0 + t % nqb * BN;
#if AHEAD
        if (t == 0) {
            stage_query_block(qds[0][0], qds[0][1], q, dout, 0, nqb, qb0, b, hkv * G, H, LQ);
            if (lid < BN) {
                const float2 st =
                    query_block_stats(lse, delta, 0, nqb, qb0, lid, b, hkv * G, H, LQ);
                stats[0][lid][0] = st.x, stats[0][lid][1] = st.y;
            }
            cp_async_commit();
        }
        const bool next = t + 1 < blocks;
        if (next)
            stage_query_block(qds[(t + 1) % 2][0], qds[(t + 1) % 2][1], q, dout, t + 1, nqb, qb0, b,
                              hkv * G, H, LQ);
        cp_async_commit();
        float2 next_stats = (float2)(0.0f);
        if (next && lid < BN)
            next_stats = query_block_stats(lse, delta, t + 1, nqb, qb0, lid, b, hkv * G, H, LQ);
        cp_async_wait(1);
        __local const ushort *qs = qds[t % 2][0], *ds = qds[t % 2][1];
        __local const float(*st)[2] = stats[t % 2];
#else
        stage_query_block(qds[0][0], qds[0][1], q, dout, t, nqb, qb0, b, hkv * G, H, LQ);
        if (lid < BN) {
            const float2 sv = query_block_stats(lse, delta, t, nqb, qb0, lid, b, hkv * G, H, LQ);
            stats[0][lid][0] = sv.x, stats[0][lid][1] = sv.y;
        }
        __local const ushort *qs = qds[0][0], *ds = qds[0][1];
        __local const float(*st)[2] = stats[0];
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[BN / 8][4], dp[BN / 8][4];
#if KV_LOCAL
        score_product_staged(s, kvs[0], warp * 16, qs, gid, tig EMU_ARGS);  /* S^T = K Q^T */
        score_product_staged(dp, kvs[1], warp * 16, ds, gid, tig EMU_ARGS); /* dP^T = V dO^T */
#else
        score_product(s, ka, qs, gid, tig EMU_ARGS);  /* S^T = K Q^T */
        score_product(dp, va, ds, gid, tig EMU_ARGS); /* dP^T = V dO^T */
#endif
        SOFTMAX_GRADS(qb + (int)col, key[row], st[col][0], st[col][1])
        accumulate_product(dva, s, ds, gid, tig EMU_ARGS);  /* dV += P^T dO */
        accumulate_product(dka, dp, qs, gid, tig EMU_ARGS); /* dK += dS^T Q */
#if AHEAD
        if (next && lid < BN)
            stats[(t + 1) % 2][lid][0] = next_stats.x, stats[(t + 1) % 2][lid][1] = next_stats.y;
#endif
    }
    const bool none[2] = {false, false};
    STORE_ROWS(DK_DT, dk, dk_off, dka, krow, scale, none)
    STORE_ROWS(DV_DT, dv, dv_off, dva, krow, 1.0f, none)
}
#endif

#if OCLML_WANT(oclml_attention_lp_dq)
/* Grid: (row blocks of BQ stacked query rows x NT, B HKV), as the forward's: rows R = g LQ + i
 * of query head hkv G + g (attention.h's row table), last block first; each warp 16 rows, the
 * key blocks that any row of the work-group sees. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_lp_dq(LP_BWD_ARGS, __global DT_ELEM(DQ_DT) * dq, ulong dq_off, ATT_GEOM) {
    __local ushort kvs[BUFS][2][BN * KV_LD] __attribute__((aligned(16)));
    __local ulong rows_qkv[BQ], rows_stat[BQ], rows_mask[BQ];
    __local int rows_i[BQ];
    const row_table rows = {rows_qkv, rows_stat, rows_mask, rows_i};
    const uint lid = get_local_id(0), lane = lid % 32, warp = lid / 32, gid = lane / 4,
               tig = lane % 4;
    EMU_BUFFERS(void) lane;
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV;
    const uint R0 = ((uint)get_num_groups(0) - 1 - (uint)get_group_id(0)) * BQ;
    k += k_off + row_offset(b, hkv, 0, HKV, LK);
    v += v_off + row_offset(b, hkv, 0, HKV, LK);
    int jlo, jhi;
    const int klen = row_block(rows, R0, b, hkv, 0, 0, &jlo, &jhi, B, H, HKV, LQ, LK, scale, shift,
                               wl, wr, mask_bstride, mask_hstride);

    const uint r[2] = {warp * 16 + gid, warp * 16 + gid + 8};
    const ulong qrow[2] = {rows_qkv[r[0]], rows_qkv[r[1]]};
    const int qi[2] = {rows_i[r[0]], rows_i[r[1]]};
    float row_lse[2], row_delta[2];
    bool empty[2];
    for (uint h = 0; h < 2; h++) {
        const ulong stat = rows_stat[r[h]];
        row_lse[h] = stat == NO_ROW ? -INFINITY : lse[lse_off + stat];
        row_delta[h] = stat == NO_ROW ? 0.0f : delta[stat];
        empty[h] = row_lse[h] == -INFINITY; /* dq 0, as the forward's o: 0 x an infinite K */
    }
    uint qa[DSTEPS][4], da[DSTEPS][4];
    load_a_rows(qa, q + q_off, qrow, tig);
    load_a_rows(da, dout + dout_off, qrow, tig);
    float acc[HEAD_DIM / 8][4];
#pragma unroll
    for (uint x = 0; x < HEAD_DIM / 2; x++) acc[x / 4][x % 4] = 0.0f;

    const ulong kv_stride = KEY_STRIDE(HKV);
    const int kb0 = jlo / BN * BN;
    for (int kb = kb0, n = 0; kb < jhi; kb += BN, n++) {
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is past the last block's reads */
        const uint buf = key_block_step(kvs, k, v, kv_stride, kb, n, jhi, klen);
        __local const ushort *ks = kvs[buf][0], *vs = kvs[buf][1];
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[BN / 8][4], dp[BN / 8][4];
        score_product(s, qa, ks, gid, tig EMU_ARGS);  /* S = Q K^T */
        score_product(dp, da, vs, gid, tig EMU_ARGS); /* dP = dO V^T */
        SOFTMAX_GRADS(qi[row], kb + (int)col, row_lse[row], row_delta[row])
        accumulate_product(acc, dp, ks, gid, tig EMU_ARGS); /* dQ += dS K */
    }
    STORE_ROWS(DQ_DT, dq, dq_off, acc, qrow, scale, empty)
}
#endif
