/* Attention, O = softmax(scale Q K^T + mask) V, as tiled FMA products (their tiles planned by
 * lib/ops/attention_plan.c):
 *
 *   oclml_attention_fwd    a block of BQ query rows against the key blocks of its split, with
 *                          an online softmax (no Lq x Lk matrix); writes O and the per-row
 *                          log-sum-exp, or with several splits each split's normalized partial
 *                          and its log-sum-exp
 *   oclml_attention_merge  the splits' partials merged by their log-sum-exps (the decode path)
 *   oclml_attention_delta  delta = rowsum(dO * O), the softmax backward's correction
 *   oclml_attention_dkdv   a block of BK keys against every query row that sees it, summing over
 *                          the query heads that share the key head: dV = P^T dO, dK = dS^T Q
 *   oclml_attention_dq     a block of query rows against its key blocks: dQ = dS K
 *   oclml_attention_dq_empty  dQ = 0 in rows that see no key, after the tensor-core backward's
 *                          dQ = dS K as a GEMM
 *   oclml_attention_dmask  the additive mask's gradient: dS summed over the batch entries and
 *                          heads the mask is broadcast over
 * with P recomputed from the saved log-sum-exp and dS = P (dO V^T - delta). Every output element
 * is summed by one work-item in a fixed order: no atomics, the same bits run to run.
 *
 * Rows of a block: the query heads that share key head hkv are stacked, row R = g Lq + i for
 * head hkv G + g and query i (grouped-query attention reads each key block once for the group;
 * decoding stacks the group's single rows into one block). Each block keeps a table of its rows'
 * offsets in local memory.
 *
 * Visibility of key j to query i: j < the batch entry's key length, and d - wl <= j <= d + wr for
 * the diagonal d = i + shift (shift Lk - Lq bottom-right aligned, else 0; wl, wr < 0 unlimited;
 * causal masks have wr = 0). Invisible scores are -inf before the additive mask is added, so
 * nothing about a masked key reaches a row's softmax; a row that sees no key gets O = 0, lse =
 * -inf and zero gradients.
 *
 * Variant defines: HEAD_DIM, the work-group's TX x TY work-items, each with RQ rows x RK keys
 * of the score tile (BQ = TY RQ, BK = TX RK), DC head-dim columns a staged chunk of the score
 * products, JC rows a staged chunk of the accumulating products, LAYOUT_BLHD (tensors [batch,
 * length, heads, dim] instead of [batch, heads, length, dim]), HAS_MASK, HAS_KEYLEN, HAS_DROPOUT
 * (dropout on the probabilities, below). */
#include "common.h"

/* Defaults for a build without the host's defines (the clang lint of tests/cl_pedantic.sh). */
#ifndef HEAD_DIM
#define HEAD_DIM 64
#define TX 16
#define TY 16
#define RQ 4
#define RK 4
#define DC 16
#define JC 16
#endif
#define BQ (TY * RQ)
#define BK (TX * RK)
#define NT (TX * TY)
#define DPT ((HEAD_DIM + TX - 1) / TX) /* head-dim columns of an accumulator row a work-item owns */
#define STAGE_FLOATS (DC * (BQ + BK + 2))
#define P_LD (BK + 1)
#include "attention.h"

/* s[a][c] = A row (ty + a TY) . B row (tx + c TX) over the head dimension, staged through local
 * memory DC columns at a time. A's rows at a + arows[r] (NO_ROW: zeros); B's rows at b + j
 * bstride for j < nb (zeros past it). */
OCLML_INLINE void score_tile(float s[RQ][RK], __global const float *a, __local const ulong *arows,
                             __global const float *b, ulong bstride, uint nb,
                             __local float *stage) {
    const uint lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    __local float *as = stage, *bs = stage + DC * (BQ + 1);
#pragma unroll
    for (uint x = 0; x < RQ; x++)
#pragma unroll
        for (uint y = 0; y < RK; y++) s[x][y] = 0.0f;
    for (uint d0 = 0; d0 < HEAD_DIM; d0 += DC) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < BQ * DC; e += NT) {
            const uint r = e / DC, c = e % DC;
            const ulong at = arows[r];
            as[c * (BQ + 1) + r] = (at != NO_ROW && d0 + c < HEAD_DIM) ? a[at + d0 + c] : 0.0f;
        }
        for (uint e = lid; e < BK * DC; e += NT) {
            const uint r = e / DC, c = e % DC;
            bs[c * (BK + 1) + r] = (r < nb && d0 + c < HEAD_DIM) ? b[r * bstride + d0 + c] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll 4
        for (uint c = 0; c < DC; c++) {
            float x[RQ], y[RK];
#pragma unroll
            for (uint u = 0; u < RQ; u++) x[u] = as[c * (BQ + 1) + ty + u * TY];
#pragma unroll
            for (uint u = 0; u < RK; u++) y[u] = bs[c * (BK + 1) + tx + u * TX];
#pragma unroll
            for (uint u = 0; u < RQ; u++)
#pragma unroll
                for (uint w = 0; w < RK; w++) s[u][w] = fma(x[u], y[w], s[u][w]);
        }
    }
}

/* acc[a][t] += sum over n < nred of p(row ty + a TY, n) * B row n [tx + t TX], with p(r, n) =
 * p[r * p_row + n * p_red] in local memory and B's rows staged JC at a time: at b + brows[n]
 * (a table; NO_ROW: zeros) or, without a table, at b + n bstride for n < nb (zeros past it).
 * RA accumulator rows per work-item. */
#define ACC_TILE(RA, acc, p, p_row, p_red, nred, b, brows, bstride, nb, stage)           \
    for (uint n0 = 0; n0 < (nred); n0 += JC) {                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                                    \
        for (uint e = get_local_id(0); e < JC * HEAD_DIM; e += NT) {                     \
            const uint n = n0 + e / HEAD_DIM, c = e % HEAD_DIM;                          \
            const ulong at = (brows) ? (brows)[n] : (n < (nb) ? n * (bstride) : NO_ROW); \
            (stage)[e] = at != NO_ROW ? (b)[at + c] : 0.0f;                              \
        }                                                                                \
        barrier(CLK_LOCAL_MEM_FENCE);                                                    \
        for (uint n = 0; n < JC; n++) {                                                  \
            float pv[RA], bv[DPT];                                                       \
            _Pragma("unroll") for (uint u = 0; u < (RA); u++) pv[u] =                    \
                (p)[(get_local_id(0) / TX + u * TY) * (p_row) + (n0 + n) * (p_red)];     \
            _Pragma("unroll") for (uint t = 0; t < DPT; t++) {                           \
                const uint col = get_local_id(0) % TX + t * TX;                          \
                bv[t] = col < HEAD_DIM ? (stage)[n * HEAD_DIM + col] : 0.0f;             \
            }                                                                            \
            _Pragma("unroll") for (uint u = 0; u < (RA); u++)                            \
                _Pragma("unroll") for (uint t = 0; t < DPT; t++) acc[u][t] =             \
                    fma(pv[u], bv[t], acc[u][t]);                                        \
        }                                                                                \
    }

/* Writes accumulator rows a_ = 0 .. RA - 1 (rows ty + a_ TY of the tile; DPT columns each) to
 * dst + row_at, an expression of a_ (NO_ROW: not written), times f. */
#define STORE_ROWS(RA, acc, dst, row_at, f)                                   \
    _Pragma("unroll") for (uint a_ = 0; a_ < (RA); a_++) {                    \
        const ulong at_ = (row_at);                                           \
        if (at_ != NO_ROW) _Pragma("unroll") for (uint t = 0; t < DPT; t++) { \
                const uint col = get_local_id(0) % TX + t * TX;               \
                if (col < HEAD_DIM) (dst)[at_ + col] = (f)*acc[a_][t];        \
            }                                                                 \
    }

#define ATT_LOCALS                                                                    \
    __local float stage[STAGE_FLOATS > JC * HEAD_DIM ? STAGE_FLOATS : JC * HEAD_DIM]; \
    __local ulong rows_qkv[BQ], rows_stat[BQ], rows_mask[BQ];                         \
    __local int rows_i[BQ];                                                           \
    const row_table rows = {rows_qkv, rows_stat, rows_mask, rows_i};

#if OCLML_WANT(oclml_attention_fwd)
/* Grid: (row blocks x NT, B HKV, splits). With one split, O (q's layout) and lse (if has_lse)
 * directly; with several, part holds each split's O / l at ((s rows_all + stat) HEAD_DIM) and its
 * log-sum-exp at (splits rows_all HEAD_DIM + s rows_all + stat). */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_fwd(__global const float *q, ulong q_off, __global const float *k, ulong k_off,
                    __global const float *v, ulong v_off, __global float *o, ulong o_off,
                    __global float *lse, ulong lse_off, uint has_lse, __global const float *mask,
                    ulong mask_off, __global const float *keylen, ulong keylen_off,
                    __global float *part, ulong rows_all, uint splits, uint blocks_per_split,
                    ATT_GEOM DROP_ARGS) {
    ATT_LOCALS
    __local float ps[BQ * P_LD], red[BQ * TX];
    const uint lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV, split = get_global_id(2);
    const uint R0 = get_group_id(0) * BQ;
    q += q_off;
    k += k_off + row_offset(b, hkv, 0, HKV, LK);
    v += v_off + row_offset(b, hkv, 0, HKV, LK);
    o += o_off;
    const ulong kstride = KEY_STRIDE(HKV);
    int jlo, jhi;
    const int klen = row_block(rows, R0, b, hkv, keylen, keylen_off, &jlo, &jhi, B, H, HKV, LQ, LK,
                               scale, shift, wl, wr, mask_bstride, mask_hstride);
    const int first = jlo / BK * BK + (int)(split * blocks_per_split) * BK;
    const int end = min(jhi, first + (int)blocks_per_split * BK);

    float m[RQ], l[RQ], acc[RQ][DPT];
#pragma unroll
    for (uint u = 0; u < RQ; u++) {
        m[u] = -INFINITY;
        l[u] = 0.0f;
#pragma unroll
        for (uint t = 0; t < DPT; t++) acc[u][t] = 0.0f;
    }
    for (int kb = first; kb < end; kb += BK) {
        const uint nk = (uint)min(BK, klen - kb); /* keys past the key length are never read */
        float s[RQ][RK];
        score_tile(s, q, rows_qkv, k + kb * kstride, kstride, nk, stage);
        float bm[RQ];
#pragma unroll
        for (uint u = 0; u < RQ; u++) {
            const uint r = ty + u * TY;
            bm[u] = -INFINITY;
#pragma unroll
            for (uint w = 0; w < RK; w++) {
                s[u][w] = masked_score(s[u][w], rows_i[r], kb + (int)(tx + w * TX), klen, shift, wl,
                                       wr, scale, mask, mask_off, rows_mask[r]);
                bm[u] = fmax(bm[u], s[u][w]);
            }
            red[r * TX + tx] = bm[u];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (uint u = 0; u < RQ; u++) {
            const uint r = ty + u * TY;
            float mn = m[u];
            for (uint t = 0; t < TX; t++) mn = fmax(mn, red[r * TX + t]);
            /* exp(x - -inf) would be NaN where the row has seen nothing yet: shift by 0 there. */
            const float base = mn == -INFINITY ? 0.0f : mn, alpha = exp(m[u] - base);
            m[u] = mn;
            l[u] *= alpha;
#pragma unroll
            for (uint t = 0; t < DPT; t++) acc[u][t] *= alpha;
#pragma unroll
            for (uint w = 0; w < RK; w++) {
                const float p = exp(s[u][w] - base);
                l[u] += p;
                ps[r * P_LD + tx + w * TX] = p * DROP_FACTOR(rows_stat[r], kb + (int)(tx + w * TX));
            }
        }
        ACC_TILE(RQ, acc, ps, P_LD, 1, BK, v + kb * kstride, (__local const ulong *)0, kstride, nk,
                 stage)
    }
    /* The row's sum: each work-item holds the part over its own keys. */
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (uint u = 0; u < RQ; u++) red[(ty + u * TY) * TX + tx] = l[u];
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (uint u = 0; u < RQ; u++) {
        const uint r = ty + u * TY;
        float sum = 0.0f;
        for (uint t = 0; t < TX; t++) sum += red[r * TX + t];
        const ulong stat = rows_stat[r];
        const float inv = row_inv(sum);
        /* A row that saw no key writes 0, even where 0 x inf (an infinite V another row of the
         * block sees) made its accumulator NaN. */
        const ulong at = out_row(splits, rows_qkv[r], stat);
        __global float *dst = splits == 1 ? o : part + (ulong)split * rows_all * HEAD_DIM;
        if (at != NO_ROW)
#pragma unroll
            for (uint t = 0; t < DPT; t++)
                if (tx + t * TX < HEAD_DIM)
                    dst[at + tx + t * TX] = sum == 0.0f ? 0.0f : inv * acc[u][t];
        if (tx == 0) put_lse(m[u], sum, stat, split, splits, rows_all, has_lse, lse, lse_off, part);
    }
}
#endif

#if OCLML_WANT(oclml_attention_merge)
/* One work-item per (row, column) of O: O = sum_s exp(lse_s - lse) O_s, lse = log sum_s
 * exp(lse_s); a row no split saw stays 0 with lse -inf. Rows in [B, H, LQ] order. */
__kernel void oclml_attention_merge(__global const float *part, ulong rows_all, uint splits,
                                    __global float *o, ulong o_off, __global float *lse,
                                    ulong lse_off, uint has_lse, uint H, uint LQ) {
    const ulong e = get_global_id(0);
    if (e >= rows_all * HEAD_DIM) return;
    const ulong stat = e / HEAD_DIM;
    const uint col = (uint)(e % HEAD_DIM);
    __global const float *pl = part + splits * rows_all * HEAD_DIM + stat;
    float mx = -INFINITY;
    bool nan = false;
    for (uint s = 0; s < splits; s++) {
        const float x = pl[s * rows_all];
        nan |= isnan(x);
        mx = fmax(mx, x);
    }
    float sum = 0.0f, val = 0.0f;
    if (mx != -INFINITY)
        for (uint s = 0; s < splits; s++) {
            const float w = exp(pl[s * rows_all] - mx);
            sum += w;
            val += w * part[(s * rows_all + stat) * HEAD_DIM + col];
        }
    const uint i = (uint)(stat % LQ), bh = (uint)(stat / LQ);
    const float out = nan ? NAN : mx == -INFINITY ? 0.0f : val / sum;
    o[o_off + row_offset(bh / H, bh % H, i, H, LQ) + col] = out;
    if (has_lse && col == 0) lse[lse_off + stat] = nan ? NAN : mx == -INFINITY ? mx : mx + log(sum);
}
#endif

#if OCLML_WANT(oclml_attention_delta)
/* delta[row] = sum_d dO[row][d] O[row][d], rows in [B, H, LQ] order. */
__kernel void oclml_attention_delta(__global const float *o, ulong o_off,
                                    __global const float *dout, ulong dout_off,
                                    __global float *delta, ulong rows_all, uint H, uint LQ) {
    const ulong stat = get_global_id(0);
    if (stat >= rows_all) return;
    const uint i = (uint)(stat % LQ), bh = (uint)(stat / LQ);
    const ulong at = row_offset(bh / H, bh % H, i, H, LQ);
    float sum = 0.0f;
    for (uint c = 0; c < HEAD_DIM; c++) sum = fma(o[o_off + at + c], dout[dout_off + at + c], sum);
    delta[stat] = sum;
}
#endif

#if OCLML_WANT(oclml_attention_dq_empty)
/* dQ = 0 in the rows that see no key (lse -inf), after dQ = scale dS K as a GEMM (the tensor-core
 * backward): their dS is 0, but 0 x an infinite key that another row sees would be NaN. */
__kernel void oclml_attention_dq_empty(__global const float *lse, ulong lse_off, __global float *dq,
                                       ulong dq_off, ulong rows_all, uint H, uint LQ) {
    const ulong stat = get_global_id(0);
    if (stat >= rows_all || lse[lse_off + stat] != -INFINITY) return;
    const uint i = (uint)(stat % LQ), bh = (uint)(stat / LQ);
    const ulong at = dq_off + row_offset(bh / H, bh % H, i, H, LQ);
    for (uint c = 0; c < HEAD_DIM; c++) dq[at + c] = 0.0f;
}
#endif

/* P and dS of this work-item's score tile for a query block against keys kb ..: P = exp(masked
 * score - lse) (0 where masked or the row sees nothing), dS = P (dP - delta). */
OCLML_INLINE void probabilities(float s[RQ][RK], float dp[RQ][RK], row_table rows,
                                __global const float *lse, __global const float *delta, int kb,
                                int klen, __global const float *mask, ulong mask_off,
                                ATT_GEOM DROP_ARGS) {
    const uint lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
#pragma unroll
    for (uint u = 0; u < RQ; u++) {
        const uint r = ty + u * TY;
        const ulong stat = rows.stat[r];
        const float row_lse = stat == NO_ROW ? -INFINITY : lse[stat],
                    row_delta = stat == NO_ROW ? 0.0f : delta[stat];
#pragma unroll
        for (uint w = 0; w < RK; w++) {
            const float x = masked_score(s[u][w], rows.i[r], kb + (int)(tx + w * TX), klen, shift,
                                         wl, wr, scale, mask, mask_off, rows.mask[r]);
            const bool seen = x != -INFINITY && row_lse != -INFINITY;
            const float p = seen ? exp(x - row_lse) : 0.0f;
            const float f = DROP_FACTOR(stat, kb + (int)(tx + w * TX));
            s[u][w] = p * f;
            /* A masked position's gradient is 0 whatever dO V^T holds there; a seen one whose P
             * underflowed to 0 still carries a NaN of dP or delta (a NaN in dO reaches dK). */
            dp[u][w] = seen ? p * (dp[u][w] * f - row_delta) : 0.0f;
        }
    }
    (void)B;
    (void)H;
    (void)HKV;
    (void)LQ;
    (void)mask_bstride;
    (void)mask_hstride;
}

#if OCLML_WANT(oclml_attention_dkdv)
/* Grid: (key blocks x NT, B HKV). dK = scale sum dS^T Q and dV = sum P^T dO over every query
 * row of the key head's group that can see the block. Accumulator rows: keys ty + a TY. */
#define KR (BK / TY)
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_dkdv(BWD_ARGS, __global float *dk, ulong dk_off, __global float *dv, ulong dv_off,
                     ATT_GEOM DROP_ARGS) {
    ATT_LOCALS
    __local float ps[BQ * P_LD], ds[BQ * P_LD];
    const uint lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV;
    const uint n_rows = H / HKV * LQ;
    const int kb = (int)(get_group_id(0) * BK);
    const ulong kstride = KEY_STRIDE(HKV), kbase = row_offset(b, hkv, 0, HKV, LK);
    q += q_off;
    dout += dout_off;
    lse += lse_off;
    k += k_off + kbase + kb * kstride;
    v += v_off + kbase + kb * kstride;
    const int klen = key_length(keylen, keylen_off, b, LK);
    /* Keys past the key length are never read (their gradients are 0); up to LK written. */
    const uint nk = (uint)max(0, min(BK, klen - kb)), n_out = (uint)min(BK, (int)LK - kb);
    float acc_k[KR][DPT], acc_v[KR][DPT];
#pragma unroll
    for (uint u = 0; u < KR; u++)
#pragma unroll
        for (uint t = 0; t < DPT; t++) acc_k[u][t] = acc_v[u][t] = 0.0f;
    for (uint R0 = 0; R0 < n_rows; R0 += BQ) {
        int imin, imax, jlo, jhi;
        query_span(R0, BQ, n_rows, LQ, &imin, &imax);
        key_span(imin, imax, klen, shift, wl, wr, &jlo, &jhi);
        if (jhi <= kb || jlo >= kb + BK) continue; /* no row of the block sees these keys */
        fill_rows(rows, R0, b, hkv, n_rows, B, H, HKV, LQ, LK, scale, shift, wl, wr, mask_bstride,
                  mask_hstride);
        float s[RQ][RK], dp[RQ][RK];
        score_tile(s, q, rows_qkv, k, kstride, nk, stage);
        score_tile(dp, dout, rows_qkv, v, kstride, nk, stage);
        probabilities(s, dp, rows, lse, delta, kb, klen, mask, mask_off, B, H, HKV, LQ, LK, scale,
                      shift, wl, wr, mask_bstride, mask_hstride DROP_PASS);
#pragma unroll
        for (uint u = 0; u < RQ; u++)
#pragma unroll
            for (uint w = 0; w < RK; w++) {
                ps[(ty + u * TY) * P_LD + tx + w * TX] = s[u][w];
                ds[(ty + u * TY) * P_LD + tx + w * TX] = dp[u][w];
            }
        ACC_TILE(KR, acc_v, ps, 1, P_LD, BQ, dout, rows_qkv, 0, 0, stage)
        ACC_TILE(KR, acc_k, ds, 1, P_LD, BQ, q, rows_qkv, 0, 0, stage)
    }
    dk += dk_off + kbase + kb * kstride;
    dv += dv_off + kbase + kb * kstride;
    STORE_ROWS(KR, acc_k, dk, ty + a_ * TY < n_out ? (ty + a_ * TY) * kstride : NO_ROW, scale)
    STORE_ROWS(KR, acc_v, dv, ty + a_ * TY < n_out ? (ty + a_ * TY) * kstride : NO_ROW, 1.0f)
}
#endif

#if OCLML_WANT(oclml_attention_dq)
/* Grid: (row blocks x NT, B HKV). dQ = scale sum dS K over the block's key blocks. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_dq(BWD_ARGS, __global float *dq, ulong dq_off, ATT_GEOM DROP_ARGS) {
    ATT_LOCALS
    __local float ds[BQ * P_LD];
    const uint lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV;
    const uint R0 = get_group_id(0) * BQ;
    q += q_off;
    dout += dout_off;
    lse += lse_off;
    const ulong kstride = KEY_STRIDE(HKV), kbase = row_offset(b, hkv, 0, HKV, LK);
    k += k_off + kbase;
    v += v_off + kbase;
    int jlo, jhi;
    const int klen = row_block(rows, R0, b, hkv, keylen, keylen_off, &jlo, &jhi, B, H, HKV, LQ, LK,
                               scale, shift, wl, wr, mask_bstride, mask_hstride);
    float acc[RQ][DPT];
#pragma unroll
    for (uint u = 0; u < RQ; u++)
#pragma unroll
        for (uint t = 0; t < DPT; t++) acc[u][t] = 0.0f;
    for (int kb = jlo / BK * BK; kb < jhi; kb += BK) {
        const uint nk = (uint)min(BK, klen - kb); /* keys past the key length are never read */
        float s[RQ][RK], dp[RQ][RK];
        score_tile(s, q, rows_qkv, k + kb * kstride, kstride, nk, stage);
        score_tile(dp, dout, rows_qkv, v + kb * kstride, kstride, nk, stage);
        probabilities(s, dp, rows, lse, delta, kb, klen, mask, mask_off, B, H, HKV, LQ, LK, scale,
                      shift, wl, wr, mask_bstride, mask_hstride DROP_PASS);
#pragma unroll
        for (uint u = 0; u < RQ; u++)
#pragma unroll
            for (uint w = 0; w < RK; w++) ds[(ty + u * TY) * P_LD + tx + w * TX] = dp[u][w];
        ACC_TILE(RQ, acc, ds, P_LD, 1, BK, k + kb * kstride, (__local const ulong *)0, kstride, nk,
                 stage)
    }
    /* Rows that see no key: dQ = 0, even where an infinite K another row sees gives 0 x inf. */
#pragma unroll
    for (uint u = 0; u < RQ; u++) {
        const ulong stat = rows_stat[ty + u * TY];
        if (stat != NO_ROW && lse[stat] == -INFINITY)
#pragma unroll
            for (uint t = 0; t < DPT; t++) acc[u][t] = 0.0f;
    }
    dq += dq_off;
    STORE_ROWS(RQ, acc, dq, rows_qkv[ty + a_ * TY], scale)
}
#endif

#if OCLML_WANT(oclml_attention_dmask)
/* Grid: (key blocks x NT, query blocks, Bm Hm). dmask[bm, hm, i, j] = sum of dS[b, h, i, j] over
 * the batch entries and heads that entry is broadcast to (bm and hm select one, or all where the
 * mask has size 1 there). Rows of a block: queries i of one head. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_dmask(BWD_ARGS, __global float *dmask, ulong dmask_off, uint mask_b, uint mask_h,
                      ATT_GEOM DROP_ARGS) {
    ATT_LOCALS
    const uint lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    const int kb = (int)(get_group_id(0) * BK);
    const uint i0 = (uint)get_global_id(1) * BQ, bhm = get_global_id(2);
    const uint bm = bhm / mask_h, hm = bhm % mask_h, G = H / HKV;
    q += q_off;
    dout += dout_off;
    lse += lse_off;
    float acc[RQ][RK];
#pragma unroll
    for (uint u = 0; u < RQ; u++)
#pragma unroll
        for (uint w = 0; w < RK; w++) acc[u][w] = 0.0f;
    for (uint b = mask_b == 1 ? 0 : bm; b < (mask_b == 1 ? B : bm + 1); b++) {
        const int klen = key_length(keylen, keylen_off, b, LK);
        const uint nk = (uint)max(0, min(BK, klen - kb)); /* keys past the key length: unread */
        for (uint h = mask_h == 1 ? 0 : hm; h < (mask_h == 1 ? H : hm + 1); h++) {
            const uint hkv = h / G;
            const ulong kstride = KEY_STRIDE(HKV), kbase = row_offset(b, hkv, 0, HKV, LK);
            /* Rows: queries i0 .. of head h alone (row R = (h - hkv G) LQ + i of the group). */
            const uint R0 = (h - hkv * G) * LQ + i0;
            fill_rows(rows, R0, b, hkv, (h - hkv * G) * LQ + LQ, B, H, HKV, LQ, LK, scale, shift,
                      wl, wr, mask_bstride, mask_hstride);
            float s[RQ][RK], dp[RQ][RK];
            score_tile(s, q, rows_qkv, k + k_off + kbase + kb * kstride, kstride, nk, stage);
            score_tile(dp, dout, rows_qkv, v + v_off + kbase + kb * kstride, kstride, nk, stage);
            probabilities(s, dp, rows, lse, delta, kb, klen, mask, mask_off, B, H, HKV, LQ, LK,
                          scale, shift, wl, wr, mask_bstride, mask_hstride DROP_PASS);
#pragma unroll
            for (uint u = 0; u < RQ; u++)
#pragma unroll
                for (uint w = 0; w < RK; w++) acc[u][w] += dp[u][w];
        }
    }
    dmask += dmask_off + (ulong)bhm * LQ * LK;
#pragma unroll
    for (uint u = 0; u < RQ; u++) {
        const uint i = i0 + ty + u * TY;
#pragma unroll
        for (uint w = 0; w < RK; w++) {
            const uint j = (uint)kb + tx + w * TX;
            if (i < LQ && j < LK) dmask[(ulong)i * LK + j] = acc[u][w];
        }
    }
}
#endif
