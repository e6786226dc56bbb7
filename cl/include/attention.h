/* What the attention kernels share (cl/ops/attention.cl on FMAs, cl/ops/attention_fwd_mma.cl
 * and attention_bwd_mma.cl on tensor cores): tensor addressing in either layout, the table of a
 * query block's rows, the key range a block can see, and the masked score. Includers define
 * HEAD_DIM, BQ (rows a block) and NT (work-items a work-group) first. */
#ifndef OCLML_ATTENTION_H
#define OCLML_ATTENTION_H

#include "common.h"

#ifndef LAYOUT_BLHD
#define LAYOUT_BLHD 0
#endif
#ifndef HAS_MASK
#define HAS_MASK 0
#endif
#ifndef HAS_KEYLEN
#define HAS_KEYLEN 0
#endif

#define NO_ROW ((ulong)-1)

/* Dropout on the probabilities (HAS_DROPOUT): O = (P m) V with m = keep / (1 - p) by philox.h's
 * rule at P's element (stat, j), stat = (b H + h) LQ + i its row of the log-sum-exp: P as a
 * [B, H, LQ, LK] tensor whatever the layout, so oclml_dropout over an explicit P draws the same
 * mask. The softmax's sum is over the undropped P. The backward: dV = (P m)^T dO, dP = m (dO
 * V^T), dS = P (dP - delta), delta = rowsum(dO O) as without dropout (sum_j P m dO.V = dO.O).
 * Kernels that take ATT_GEOM take DROP_ARGS after it; DROP_FACTOR(stat, j) is m, 1 without. */
#ifndef HAS_DROPOUT
#define HAS_DROPOUT 0
#endif
#if HAS_DROPOUT
#include "philox.h"
#define DROP_ARGS \
    , float drop_p, float drop_scale, uint drop_seed_lo, uint drop_seed_hi, ulong drop_offset
#define DROP_PASS , drop_p, drop_scale, drop_seed_lo, drop_seed_hi, drop_offset
#define DROP_FACTOR(stat, j)                                                                   \
    drop_mult((stat)*LK + (ulong)(j), drop_p, drop_scale, (uint2)(drop_seed_lo, drop_seed_hi), \
              drop_offset)
#else
#define DROP_ARGS
#define DROP_PASS
#define DROP_FACTOR(stat, j) 1.0f
#endif

#define ATT_GEOM                                                                        \
    uint B, uint H, uint HKV, uint LQ, uint LK, float scale, int shift, int wl, int wr, \
        ulong mask_bstride, ulong mask_hstride

/* Element offset of row (b, h, i) of a tensor with `heads` heads of length L. */
OCLML_INLINE ulong row_offset(uint b, uint h, uint i, uint heads, uint L) {
#if LAYOUT_BLHD
    return ((ulong)(b * L + i) * heads + h) * HEAD_DIM;
#else
    return ((ulong)(b * heads + h) * L + i) * HEAD_DIM;
#endif
}
/* Floats between consecutive keys of one head. */
#if LAYOUT_BLHD
#define KEY_STRIDE(HKV) ((ulong)(HKV)*HEAD_DIM)
#else
#define KEY_STRIDE(HKV) ((ulong)HEAD_DIM)
#endif

/* The rows of a query block: offsets into Q, O and dO (NO_ROW past the last row), into the
 * log-sum-exp and delta ([B, H, LQ]), into the additive mask, and the query index. */
typedef struct row_table {
    __local ulong *qkv, *stat, *mask;
    __local int *i;
} row_table;

/* Fills t for rows R0 .. R0 + BQ - 1 of the block of (b, hkv) (rows: H / HKV heads x LQ). */
OCLML_INLINE void fill_rows(row_table t, uint R0, uint b, uint hkv, uint n_rows, ATT_GEOM) {
    const uint lid = get_local_id(0), G = H / HKV;
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous block's rows may still be read */
    for (uint r = lid; r < BQ; r += NT) {
        const uint R = R0 + r;
        if (R < n_rows) {
            const uint h = hkv * G + R / LQ, i = R % LQ;
            t.qkv[r] = row_offset(b, h, i, H, LQ);
            t.stat[r] = ((ulong)b * H + h) * LQ + i;
            t.mask[r] = b * mask_bstride + h * mask_hstride + (ulong)i * LK;
            t.i[r] = (int)i;
        } else {
            /* Such rows are computed and thrown away: mask row 0 keeps their reads of the
             * mask inside it. */
            t.qkv[r] = t.stat[r] = NO_ROW;
            t.mask[r] = 0;
            t.i[r] = 0;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The query indices rows R0 .. R0 + count - 1 can hold (all of them where the rows span heads;
 * R0 < n_rows). */
OCLML_INLINE void query_span(uint R0, uint count, uint n_rows, uint LQ, int *imin, int *imax) {
    const uint last = min(R0 + count, n_rows) - 1;
    const bool one_head = R0 / LQ == last / LQ;
    *imin = one_head ? (int)(R0 % LQ) : 0;
    *imax = one_head ? (int)(last % LQ) : (int)LQ - 1;
}

/* The keys [*jlo, *jhi) that queries imin .. imax can see. */
OCLML_INLINE void key_span(int imin, int imax, int klen, int shift, int wl, int wr, int *jlo,
                           int *jhi) {
    *jlo = wl < 0 ? 0 : max(0, imin + shift - wl);
    *jhi = wr < 0 ? klen : min(klen, imax + shift + wr + 1);
}

/* The keys [*jlo, *jhi) that every one of queries imin .. imax sees (empty: *jlo >= *jhi). A
 * block of them needs no positional test (whole_block). */
OCLML_INLINE void key_span_all(int imin, int imax, int klen, int shift, int wl, int wr, int *jlo,
                               int *jhi) {
    *jlo = wl < 0 ? 0 : max(0, imax + shift - wl);
    *jhi = wr < 0 ? klen : min(klen, imin + shift + wr + 1);
}

/* Batch entry b's key length: keylen[b] clamped to [0, LK] (NaN: 0), LK without a table. */
OCLML_INLINE int key_length(__global const float *keylen, ulong keylen_off, uint b, uint LK) {
#if HAS_KEYLEN
    const float kl = keylen[keylen_off + b];
    return !(kl > 0.0f) ? 0 : kl >= (float)LK ? (int)LK : (int)kl;
#else
    (void)keylen;
    (void)keylen_off;
    (void)b;
    return (int)LK;
#endif
}

/* The setup of a kernel that walks key blocks for query rows R0 .. R0 + BQ - 1 of the block of
 * (b, hkv): fills the row table and returns the batch entry's key length, with the keys
 * [*jlo, *jhi) that those rows can see. */
OCLML_INLINE int row_block(row_table rows, uint R0, uint b, uint hkv, __global const float *keylen,
                           ulong keylen_off, int *jlo, int *jhi, ATT_GEOM) {
    const uint n_rows = H / HKV * LQ;
    const int klen = key_length(keylen, keylen_off, b, LK);
    fill_rows(rows, R0, b, hkv, n_rows, B, H, HKV, LQ, LK, scale, shift, wl, wr, mask_bstride,
              mask_hstride);
    int imin, imax;
    query_span(R0, BQ, n_rows, LQ, &imin, &imax);
    key_span(imin, imax, klen, shift, wl, wr, jlo, jhi);
    return klen;
}

/* The keys [*jlo, *jhi) that a warp's 16 rows from R0 (of a key head's n_rows stacked query rows)
 * can see; none where they all lie past the last. */
OCLML_INLINE void warp_key_span(uint R0, uint n_rows, uint LQ, int klen, int shift, int wl, int wr,
                                int *jlo, int *jhi, int *all_lo, int *all_hi) {
    int imin, imax;
    *jlo = *jhi = *all_lo = *all_hi = 0;
    if (R0 >= n_rows) return;
    query_span(R0, 16, n_rows, LQ, &imin, &imax);
    key_span(imin, imax, klen, shift, wl, wr, jlo, jhi);
    key_span_all(imin, imax, klen, shift, wl, wr, all_lo, all_hi);
}

#ifndef WHOLE_BLOCKS
#define WHOLE_BLOCKS 1 /* 0: every score through masked_score's positional tests */
#endif
/* Whether keys [j0, j0 + n) lie in [lo, hi), which every row of a tile sees: its scores need no
 * positional test (scaled_score), a warp-uniform branch. The float4 forward takes it (1-7%
 * faster on the H100); the dK/dV kernel does not, whose P it would split into two loops
 * (0.8-1.8% slower) (bench/DECISIONS.md, "No positional tests"). */
OCLML_INLINE bool whole_block(int j0, int n, int lo, int hi) {
    return WHOLE_BLOCKS && j0 >= lo && j0 + n <= hi;
}

/* Score of key j for a query that sees it: scale s + mask. */
OCLML_INLINE float scaled_score(float s, int j, float scale, __global const float *mask,
                                ulong mask_off, ulong mrow) {
#if HAS_MASK
    return scale * s + mask[mask_off + mrow + j];
#else
    (void)j;
    (void)mask;
    (void)mask_off;
    (void)mrow;
    return scale * s;
#endif
}

/* Score of query i against key j as the softmax sees it: scale s + mask, -inf where masked. */
OCLML_INLINE float masked_score(float s, int i, int j, int klen, int shift, int wl, int wr,
                                float scale, __global const float *mask, ulong mask_off,
                                ulong mrow) {
    const int d = i + shift;
    const bool seen = j < klen && (wl < 0 || j >= d - wl) && (wr < 0 || j <= d + wr);
    return seen ? scaled_score(s, j, scale, mask, mask_off, mrow) : -INFINITY;
}

/* A forward row's output factor 1 / l from its sum l of exp(s - m): 0 where it saw no key, NaN
 * kept. */
OCLML_INLINE float row_inv(float l) { return l > 0.0f ? 1.0f / l : (l == 0.0f ? 0.0f : l); }

/* Where a forward row's output goes: at its offset `row` with one key split (O in place); with
 * several, in this split's part (rows in [B, H, LQ], from `stat`); NO_ROW past the last row. */
OCLML_INLINE ulong out_row(uint splits, ulong row, ulong stat) {
    return splits == 1 ? row : stat == NO_ROW ? NO_ROW : stat * HEAD_DIM;
}

/* A forward row's log-sum-exp from its maximum m and sum l of exp(s - m) (-inf where it saw no
 * key, NaN kept), into lse or, with key splits, the split's part. */
OCLML_INLINE void put_lse(float m, float l, ulong stat, uint split, uint splits, ulong rows_all,
                          uint has_lse, __global float *lse, ulong lse_off, __global float *part) {
    const float row_lse = l > 0.0f ? m + log(l) : (l == 0.0f ? -INFINITY : l);
    if (stat == NO_ROW) return;
    if (splits > 1)
        part[splits * rows_all * HEAD_DIM + split * rows_all + stat] = row_lse;
    else if (has_lse)
        lse[lse_off + stat] = row_lse;
}

/* The tensor-core backwards' P of a score (its row's log-sum-exp row_lse): exp(masked score -
 * lse), and -0 where masked or the row sees nothing (+0 only where a seen probability
 * underflows: score_grad tells them apart by the sign; -0 adds into dV as 0). Build options
 * that drop signed zeros (-cl-no-signed-zeros, -cl-fast-relaxed-math) would let a NaN of dP
 * reach masked keys' dK. */
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

/* The backward kernels' leading arguments (attention.cl's and attention_bwd_mma.cl's). */
#define BWD_ARGS                                                                          \
    __global const float *q, ulong q_off, __global const float *k, ulong k_off,           \
        __global const float *v, ulong v_off, __global const float *dout, ulong dout_off, \
        __global const float *lse, ulong lse_off, __global const float *delta,            \
        __global const float *mask, ulong mask_off, __global const float *keylen, ulong keylen_off

/* The online softmax's update of a warp's two rows (the tensor-core kernels' accumulator
 * layout, a row held by the 4 work-items of a quad): mx, this work-item's maxima of the block's
 * scores, reduced over the quad (SHUFFLE: the including kernel's warp shuffle); the running
 * maximum m, the factor alpha by which the earlier sum l (done here) and output (the caller's)
 * shrink, and base, the shift the block's exps take: 0 where the row has seen nothing yet
 * (exp(x - -inf) would be NaN). */
#define ONLINE_ROW_UPDATE(mx, m, l, alpha, base)           \
    _Pragma("unroll") for (uint h_ = 0; h_ < 2; h_++) {    \
        mx[h_] = fmax(mx[h_], SHUFFLE(mx[h_], lane ^ 1u)); \
        mx[h_] = fmax(mx[h_], SHUFFLE(mx[h_], lane ^ 2u)); \
        const float mn_ = fmax(m[h_], mx[h_]);             \
        base[h_] = mn_ == -INFINITY ? 0.0f : mn_;          \
        alpha[h_] = exp(m[h_] - base[h_]);                 \
        m[h_] = mn_;                                       \
        l[h_] *= alpha[h_];                                \
    }

#endif
