/* Attention forward on TF32 tensor cores (3xTF32, attention_mma.h), for head dims that are
 * multiples of 8 up to 128, and with FWD_PAIRS multiples of 16 up to 256, including the key
 * splits of the decode path (merged by attention.cl's merge kernel).
 *
 * A work-group of WARPS warps takes BQ = 16 WARPS query rows (16 a warp: the m16n8k8 rows; with
 * FWD_PAIRS 8 WARPS, two warps sharing 16 rows, each with half of the head dim of Q and O, the
 * pair summing S from its two parts as the paired dQ kernel does) against key blocks of BN keys
 * staged in local memory. Each warp keeps its rows of Q in registers as m16n8k8 A fragments,
 * computes S = Q K^T for the block (BN / 8 tiles of 8 keys), applies the masks and the online
 * softmax on the accumulator fragments (a row's statistics reduced over the 4 work-items that
 * hold it), and adds P V into O's fragments (HEAD_DIM / 8 tiles), P taken as A fragments where
 * the accumulators hold it (to_a_fragments: no value changes work-item). With VEC_FRAGMENTS
 * (head dims that are multiples of 32; paired, of 64) the second kernel below reads K and V as
 * float4s. */
#include "attention_mma.h"

#if OCLML_WANT(oclml_attention_fwd_mma)
/* The online softmax of a block for this work-item's rows r[0], r[1] (s over keys kb + nt 8 +
 * 2 tig + x % 2): the masks (none but the additive mask where every row sees every key of the
 * block: `whole`, uniform over the warp), each row's maximum over the 4 work-items that hold it,
 * the factor alpha by which its earlier sum l (done here) and output (the caller's) shrink, and
 * s turned into exp(s - maximum) and added to l. */
OCLML_INLINE void softmax_block(float s[KTILES][4], float m[2], float l[2], float alpha[2],
                                const uint r[2], __local const int *rows_i,
                                __local const ulong *rows_mask, int kb, bool whole, int klen,
                                int shift, int wl, int wr, float scale, __global const float *mask,
                                ulong mask_off, uint lane, uint tig EMU_PARAMS) {
    float mx[2] = {-INFINITY, -INFINITY}, base[2];
    if (whole) {
#pragma unroll
        for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
            for (uint x = 0; x < 4; x++)
                s[nt][x] = scaled_score(s[nt][x], kb + (int)(nt * 8 + 2 * tig + x % 2), scale, mask,
                                        mask_off, rows_mask[r[x / 2]]);
    } else {
#pragma unroll
        for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
            for (uint x = 0; x < 4; x++) {
                const uint row = r[x / 2];
                s[nt][x] = masked_score(s[nt][x], rows_i[row], kb + (int)(nt * 8 + 2 * tig + x % 2),
                                        klen, shift, wl, wr, scale, mask, mask_off, rows_mask[row]);
            }
    }
#pragma unroll
    for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
        for (uint x = 0; x < 4; x++) mx[x / 2] = fmax(mx[x / 2], s[nt][x]);
    ONLINE_ROW_UPDATE(mx, m, l, alpha, base);
#pragma unroll
    for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
        for (uint x = 0; x < 4; x++) {
            s[nt][x] = exp(s[nt][x] - base[x / 2]);
            l[x / 2] += s[nt][x];
        }
}

/* Dropout on P (attention.h), after the softmax's sums took it undropped: key kb + nt 8 + 2 tig
 * + x % 2 of row r[x / 2]. */
#if HAS_DROPOUT
#define DROP_SCORES(s, r, kb)                                      \
    _Pragma("unroll") for (uint nt = 0; nt < KTILES; nt++)         \
        _Pragma("unroll") for (uint x = 0; x < 4; x++) s[nt][x] *= \
        DROP_FACTOR(rows_stat[r[x / 2]], kb + (int)(nt * 8 + 2 * tig + x % 2))
#else
#define DROP_SCORES(s, r, kb)
#endif

#define FWD_MMA_ARGS                                                                               \
    __global const float *q, ulong q_off, __global const float *k, ulong k_off,                    \
        __global const float *v, ulong v_off, __global float *o, ulong o_off, __global float *lse, \
        ulong lse_off, uint has_lse, __global const float *mask, ulong mask_off,                   \
        __global const float *keylen, ulong keylen_off, __global float *part, ulong rows_all,      \
        uint splits, uint blocks_per_split, ATT_GEOM DROP_ARGS

/* A forward work-group's batch and key head, key split and row block (R0, its row tables filled),
 * K and V moved to its key head, and the key blocks [first, end) it takes. */
#define FWD_BLOCK_SETUP                                                                        \
    ROW_BLOCK_SETUP                                                                            \
    const uint split = get_global_id(2);                                                       \
    const int first = jlo / BN * BN + (int)(split * blocks_per_split) * BN;                    \
    const int end = min(jhi, first + (int)blocks_per_split * BN);                              \
    /* the keys this warp's rows see (WARP_SKIPS), those all of them see (unpaired warps) */   \
    int warp_jlo, warp_jhi, warp_all_lo, warp_all_hi;                                          \
    warp_key_span(R0 + warp * 16, H / HKV * LQ, LQ, klen, shift, wl, wr, &warp_jlo, &warp_jhi, \
                  &warp_all_lo, &warp_all_hi);
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

    WARP_ROWS; /* with FWD_PAIRS HEAD_SPLIT warps on 16 rows, as in the paired dQ kernel */
    float qa[DPART][4], acc[DPART][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    load_a(qa, q + q_off + col0, qrow, tig);
#pragma unroll
    for (uint kk = 0; kk < DPART; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++) acc[kk][x] = 0.0f;
    KV_FIRST(first, end)
    for (int kb = first; kb < end; kb += BN) {
        KV_NEXT(kb, end)
#if !FWD_PAIRS && !SPLIT_KV
        if (WARP_SKIPS(kb, warp_jlo, warp_jhi)) continue;
#endif
        float s[KTILES][4];
        score_product(s, qa, ks + col0, false, gid, tig EMU_ARGS);
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
        softmax_block(s, m, l, alpha, r, rows_i, rows_mask, kb, false, klen, shift, wl, wr, scale,
                      mask, mask_off, lane, tig EMU_ARGS);
        DROP_SCORES(s, r, kb);
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
        const float inv = row_inv(sum);
        const ulong at = out_row(splits, qrow[h], stat);
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
#if FWD_PAIRS && (HEAD_SPLIT != 2 || !SPLIT_KV)
#error "the paired float4 forward: warps on half the head dim each, one K and one V buffer"
#endif
#if !FWD_PAIRS && HEAD_SPLIT > 1
#error "the unpaired float4 forward: warps on the whole head dim"
#endif
/* The forward with every fragment value of K and V read as part of a float4 (VEC_FRAGMENTS in
 * attention_mma.h, whose layout it follows: vec_col(c, tig, true) and K_LD for K and V). Its
 * two products are VEC_SCORE_PRODUCT and VEC_ACCUMULATE expanded here, not the inline
 * functions the dQ kernel calls: compiled as functions, the same instructions are scheduled
 * otherwise, and the forward runs 2-2.5% slower on the H100 (bench/DECISIONS.md, "dQ and dK/dV
 * read"). O^T's query rows take their softmax factors from the work-items of rows gid: four
 * shuffles a block.
 * With FWD_PAIRS (head dims 192 and 256) two warps share 16 rows, each with half of the head dim
 * of Q and O (col0 on), summing S from their parts (put_part, sum_parts) as the float-read
 * paired forward does, with its one K and one V buffer refilled by turns (SPLIT_KV: three
 * barriers a block). */
/* K's float4 of column tile nt at step pair c, V's of key kt 8 + 2 tig at columns u 32 + 4 gid,
 * in this warp's part of the head dim (from col0). */
#define FWD_K_AT(nt, c) (nt * 8 + gid) * K_LD + col0 + vec_col(c, tig, true)
#define FWD_V_AT(kt, u) (kt * 8 + 2 * tig) * K_LD + col0 + u * 32 + 4 * gid
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_fwd_mma(FWD_MMA_ARGS) {
#if FWD_PAIRS
    __local float ks[BN * K_LD] __attribute__((aligned(16))),
        vs[BN * K_LD] __attribute__((aligned(16)));
    __local float parts[WARPS][KTILES * 4 * 32]; /* each warp's part of S */
#else
    __local float ks_all[2][BN * K_LD] __attribute__((aligned(16))),
        vs_all[2][BN * K_LD] __attribute__((aligned(16)));
    uint kv_buf = 0;
#endif
    MMA_LOCALS
    FWD_BLOCK_SETUP

    /* The rows of S: r[0] = pair 16 + gid and r[1] = r[0] + 8 (pair: the warp, unpaired); Q in
     * the score product's order: qf[c][h][x] is head-dim column col0 + 16 c + 4 tig + x of row
     * r[h]. */
    WARP_GROUP
    const uint col0 = side * VEC_COLS;
    const uint r[2] = {pair * 16 + gid, pair * 16 + gid + 8};
    float qf[VEC_COLS / 16][2][4], acc[OT_TILES][2][4], m[2] = {-INFINITY, -INFINITY},
                                                        l[2] = {0.0f, 0.0f};
#pragma unroll
    for (uint h = 0; h < 2; h++) {
        const ulong row = rows_qkv[r[h]];
#pragma unroll
        for (uint c = 0; c < VEC_COLS / 16; c++)
#pragma unroll
            for (uint x = 0; x < 4; x++)
                qf[c][h][x] =
                    row != NO_ROW ? q[q_off + row + col0 + vec_col(c, tig, true) + x] : 0.0f;
    }
#pragma unroll
    for (uint x = 0; x < OT_TILES * 8; x++) acc[x / 8][x / 4 % 2][x % 4] = 0.0f;
#if FWD_PAIRS
    if (first < end) copy_block(ks, K_LD, k, kstride, first, (uint)klen);
    cp_async_commit();
    for (int kb = first; kb < end; kb += BN) {
        /* This block's K landed and shown; its V into the one V buffer (every warp is past the
         * last block's P V). */
        cp_async_wait(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        copy_block(vs, K_LD, v, kstride, kb, (uint)klen);
        cp_async_commit();
#else
    if (first < end) {
        copy_block(ks_all[0], K_LD, k, kstride, first, (uint)klen);
        copy_block(vs_all[0], K_LD, v, kstride, first, (uint)klen);
    }
    cp_async_commit();
    for (int kb = first; kb < end; kb += BN) {
        /* This block landed and shown; the next one's copies into the other buffers (every warp
         * is past the last block's reads of them). */
        cp_async_wait(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kb + BN < end) {
            copy_block(ks_all[kv_buf ^ 1u], K_LD, k, kstride, kb + BN, (uint)klen);
            copy_block(vs_all[kv_buf ^ 1u], K_LD, v, kstride, kb + BN, (uint)klen);
        }
        cp_async_commit();
        __local const float *ks = ks_all[kv_buf], *vs = vs_all[kv_buf];
        kv_buf ^= 1u;
        if (WARP_SKIPS(kb, warp_jlo, warp_jhi)) continue;
#endif
        /* S = Q K^T (K's rows K_LD floats apart, this warp's part of the head dim) */
        float s[KTILES][4];
        VEC_SCORE_PRODUCT(s, qf, ks, FWD_K_AT, false);
#if FWD_PAIRS
        /* The pair's S; then the next K into the one K buffer (every warp is past its reads). */
        put_part(s, parts[warp], lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kb + BN < end) copy_block(ks, K_LD, k, kstride, kb + BN, (uint)klen);
        cp_async_commit();
        sum_parts(s, parts[pair], WARPS / HEAD_SPLIT * KTILES * 4 * 32, lane);
        const bool whole = false; /* warp_all_lo/hi are the unpaired warps' rows */
#else
        const bool whole = whole_block(kb, BN, warp_all_lo, warp_all_hi);
#endif
        float alpha[2];
        softmax_block(s, m, l, alpha, r, rows_i, rows_mask, kb, whole, klen, shift, wl, wr, scale,
                      mask, mask_off, lane, tig EMU_ARGS);
        DROP_SCORES(s, r, kb);
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
        /* P^T as split B fragments */
        uint pbh[KTILES][2][2], pbl[KTILES][2][2];
        TO_B_FRAGMENTS(s, pbh, pbl);
#if FWD_PAIRS /* this block's V landed (the next K's copies may still be in flight) */
        cp_async_wait(1);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        /* O^T += V^T P^T (this warp's part of the head dim) */
        VEC_ACCUMULATE(acc, pbh, pbl, vs, FWD_V_AT);
    }
    /* Each row's sum over the 4 work-items that hold it; the log-sum-exp from rows gid. */
#pragma unroll
    for (uint h = 0; h < 2; h++) {
        l[h] += SHUFFLE(l[h], lane ^ 1u);
        l[h] += SHUFFLE(l[h], lane ^ 2u);
#if FWD_PAIRS
        if (tig == 0 && side == 0) /* one warp of a pair */
#else
        if (tig == 0)
#endif
            put_lse(m[h], l[h], rows_stat[r[h]], split, splits, rows_all, has_lse, lse, lse_off,
                    part);
    }
    /* O / l of query rows nq 8 + 2 tig + e: head-dim columns 32 u + 4 gid + 0 .. 3 of each. */
#pragma unroll
    for (uint nq = 0; nq < 2; nq++)
#pragma unroll
        for (uint e = 0; e < 2; e++) {
            const float sum = SHUFFLE(l[nq], 8 * tig + 4 * e);
            const uint row = pair * 16 + nq * 8 + 2 * tig + e;
            const ulong stat = rows_stat[row];
            const float inv = row_inv(sum);
            const ulong at = out_row(splits, rows_qkv[row], stat);
            __global float *dst =
                splits == 1 ? o + o_off : part + (ulong)split * rows_all * HEAD_DIM;
            if (at != NO_ROW)
#pragma unroll
                for (uint u = 0; u < VEC_COLS / 32; u++) {
                    /* A row that saw no key: 0, even where 0 x inf (an infinite V another row of
                     * the block sees) made its accumulator NaN. */
                    const ulong c = at + col0 + u * 32 + 4 * gid;
                    const float out[4] = {acc[2 * u][nq][e], acc[2 * u][nq][2 + e],
                                          acc[2 * u + 1][nq][e], acc[2 * u + 1][nq][2 + e]};
#pragma unroll
                    for (uint x = 0; x < 4; x++) dst[c + x] = sum == 0.0f ? 0.0f : inv * out[x];
                }
        }
}
#endif
