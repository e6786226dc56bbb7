/* Attention backward on TF32 tensor cores (3xTF32, attention_mma.h): the dQ kernel and the
 * dK/dV kernel, each summing its outputs in a fixed order (no atomics: two runs give the same
 * bits). Their fragments of two operands and two accumulators stay in registers up to head dim
 * 64; with DQ_PAIRS and DKDV_PAIRS two warps share them (head dim 128), and above 128 four,
 * the head dim split too (HEAD_SPLIT): dK/dV at multiples of 16, dQ at multiples of 32. With
 * DS_OUT the dK/dV kernel also writes dS to a workspace, and the host forms dQ = scale dS K as
 * a GEMM in place of the dQ kernel (lib/ops/attention_plan.c, dq_gemm_heads). */
#include "attention_mma.h"

/* P and dS of a score tile whose rows are `prow` (tile rows: query rows) or whose columns are
 * (dK/dV: the tile's rows are keys), in place of the score and dP; f: the dropout factor m (1
 * without), dS = P (m dP - delta), P left undropped. */
OCLML_INLINE void softmax_grad(float *p, float *dp, int i, int j, float row_lse, float row_delta,
                               float f, int klen, int shift, int wl, int wr, float scale,
                               __global const float *mask, ulong mask_off, ulong mrow) {
    *p = probability(*p, i, j, row_lse, klen, shift, wl, wr, scale, mask, mask_off, mrow);
    *dp = score_grad(*p, *dp * f, row_delta);
}

#if OCLML_WANT(oclml_attention_dq_mma)
/* The log-sum-exp and delta of this work-item's rows r[0], r[1] (-inf and 0 past the last). */
#define DQ_ROW_STATS                                                   \
    float row_lse[2], row_delta[2];                                    \
    _Pragma("unroll") for (uint h = 0; h < 2; h++) {                   \
        const ulong stat = rows_stat[r[h]];                            \
        row_lse[h] = stat == NO_ROW ? -INFINITY : lse[lse_off + stat]; \
        row_delta[h] = stat == NO_ROW ? 0.0f : delta[stat];            \
    }
/* P and dS of this block's score tile s and dP tile dp (rows r[0], r[1], keys from kb), in
 * place. */
#define DQ_SCORE_GRADS                                                                             \
    _Pragma("unroll") for (uint nt = 0; nt < KTILES; nt++)                                         \
        _Pragma("unroll") for (uint x = 0; x < 4; x++) {                                           \
        const uint row = r[x / 2];                                                                 \
        const int key = kb + (int)(nt * 8 + 2 * tig + x % 2);                                      \
        softmax_grad(&s[nt][x], &dp[nt][x], rows_i[row], key, row_lse[x / 2], row_delta[x / 2],    \
                     DROP_FACTOR(rows_stat[row], key), klen, shift, wl, wr, scale, mask, mask_off, \
                     rows_mask[row]);                                                              \
    }
#endif

#if OCLML_WANT(oclml_attention_dq_mma) && !VEC_FRAGMENTS
/* Grid: (row blocks x NT, B HKV). dQ = scale sum dS K over the block's key blocks of BN keys;
 * Q and dO of the work-item's two rows stay in registers as A fragments. With DQ_PAIRS two warps
 * share 16 rows, each holding half of the head dim of Q, dO and dQ (all of it spills registers at
 * head dim 128): each computes its half's part of S and dP, the pair swaps parts through local
 * memory and both add them in the same order (low half first), so both hold the same P and dS,
 * and each adds dS K into its half of dQ. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_dq_mma(BWD_ARGS, __global float *dq, ulong dq_off, ATT_GEOM DROP_ARGS) {
    KV_BUFFERS
#if DQ_PAIRS
    __local float parts[WARPS][2][KTILES * 4 * 32]; /* each warp's part of S and of dP */
#endif
    MMA_LOCALS
    ROW_BLOCK_SETUP
    WARP_ROWS; /* with DQ_PAIRS HEAD_SPLIT warps on 16 rows, a part of the head dim each */
    DQ_ROW_STATS
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
        score_product(s, qa, ks + col0, false, gid, tig EMU_ARGS);
        score_product(dp, da, vs + col0, false, gid, tig EMU_ARGS);
#if DQ_PAIRS /* KV_NEXT's barrier keeps the next block's parts after these reads */
        put_part(s, parts[warp][0], lane);
        put_part(dp, parts[warp][1], lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        sum_parts(s, parts[pair][0], WARPS / HEAD_SPLIT * 2 * KTILES * 4 * 32, lane);
        sum_parts(dp, parts[pair][1], WARPS / HEAD_SPLIT * 2 * KTILES * 4 * 32, lane);
#endif
        DQ_SCORE_GRADS
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

/* (Float4 reads with a split head dim are the dK/dV kernel's alone: no dQ kernel there.) */
#if OCLML_WANT(oclml_attention_dq_mma) && VEC_FRAGMENTS && HEAD_SPLIT == 1
/* The dQ kernel with every fragment value of K and V read as part of a float4 (VEC_FRAGMENTS in
 * attention_mma.h): S = Q K^T and dP = dO V^T by vec_score_product, dQ^T += K^T dS^T by
 * vec_accumulate; the output rows of dQ^T take their emptiness from the work-items of rows gid.
 * Grid and order as in the kernel above. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_dq_mma(BWD_ARGS, __global float *dq, ulong dq_off, ATT_GEOM DROP_ARGS) {
    KV_BUFFERS
    MMA_LOCALS
    ROW_BLOCK_SETUP
    const uint r[2] = {warp * 16 + gid, warp * 16 + gid + 8};
    const ulong qrow[2] = {rows_qkv[r[0]], rows_qkv[r[1]]};
    DQ_ROW_STATS
    float qf[HEAD_DIM / 16][2][4], df[HEAD_DIM / 16][2][4], acc[OT_TILES][2][4];
    load_vec_rows(qf, q + q_off, qrow, tig, true);
    load_vec_rows(df, dout + dout_off, qrow, tig, true);
#pragma unroll
    for (uint x = 0; x < OT_TILES * 8; x++) acc[x / 8][x / 4 % 2][x % 4] = 0.0f;
    KV_FIRST(jlo / BN * BN, jhi)
    for (int kb = jlo / BN * BN; kb < jhi; kb += BN) {
        KV_NEXT(kb, jhi)
        float s[KTILES][4], dp[KTILES][4];
        vec_score_product(s, qf, ks, K_LD, true, false, gid, tig EMU_ARGS);
        vec_score_product(dp, df, vs, K_LD, true, false, gid, tig EMU_ARGS);
        DQ_SCORE_GRADS
        uint dsh[KTILES][2][2], dsl[KTILES][2][2];
        to_b_fragments(dp, dsh, dsl);
        vec_accumulate(acc, dsh, dsl, ks, gid, tig EMU_ARGS);
    }
    /* dQ = scale dS K of query rows nq 8 + 2 tig + e; 0 for a row that sees nothing, as in the
     * forward. */
#pragma unroll
    for (uint nq = 0; nq < 2; nq++)
#pragma unroll
        for (uint e = 0; e < 2; e++) {
            const bool empty = SHUFFLE(row_lse[nq], 8 * tig + 4 * e) == -INFINITY;
            const ulong at = rows_qkv[warp * 16 + nq * 8 + 2 * tig + e];
            if (at != NO_ROW)
#pragma unroll
                for (uint u = 0; u < HEAD_DIM / 32; u++) {
                    const ulong c = dq_off + at + u * 32 + 4 * gid;
                    const float4 g = vec_out(acc, u, nq, e);
                    const float g4[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
                    for (uint x = 0; x < 4; x++) dq[c + x] = empty ? 0.0f : scale * g4[x];
                }
        }
}
#endif

#if OCLML_WANT(oclml_attention_dkdv_mma)
#ifndef DS_OUT
#define DS_OUT 0 /* 1: dS also written to a workspace, for dQ = scale dS K as a GEMM */
#endif
#if DS_OUT
/* Writes a dS tile t (tile rows: the keys key[0], key[1]; columns: the staged query rows
 * R0 + part + nt 8 + 2 tig + x % 2) to the workspace ds, whose row R (of the key head's n_rows
 * stacked query rows) holds that row's dS against every key, ds_ld floats apart. Lanes with
 * neighbouring gid write neighbouring keys: 32-byte pieces. */
OCLML_INLINE void put_ds(__global float *ds, ulong ds_ld, uint R0, uint part, const int *key,
                         float (*t)[4], uint n_rows, uint LK, uint tig) {
#pragma unroll
    for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
        for (uint x = 0; x < 4; x++) {
            const uint R = R0 + part + nt * 8 + 2 * tig + x % 2;
            if (R < n_rows && key[x / 2] < (int)LK) ds[R * ds_ld + key[x / 2]] = t[nt][x];
        }
}

#ifndef DS_BAND_SKIP
#define DS_BAND_SKIP 1 /* 0: every zero written, whatever the GEMM reads */
#endif
/* Whether the dQ GEMM reads the workspace at keys kb .. for rows whose last query is imax: where
 * it reads dS only up to its band (band_rows > 0: blocks of band_rows rows, each summing no key
 * at or past its first row + band_rows + shift + wr, its float4 loads aligned to 4 keys), not
 * from imax + band_rows + shift + wr + 1 on (kb, a multiple of 4, then lies past any float4
 * those loads take). */
OCLML_INLINE bool ds_zeros_read(uint band_rows, int kb, int imax, int shift, int wr) {
    return !DS_BAND_SKIP || band_rows == 0 || kb < imax + (int)band_rows + shift + wr + 1;
}

/* Zeros of the workspace where this work-group's keys (from kb) meet the staged rows R0 ..
 * R0 + BQ - 1 that see none of them, where the GEMM reads them. */
OCLML_INLINE void zero_ds(__global float *ds, ulong ds_ld, uint R0, int kb, uint n_rows, uint LK) {
    for (uint e = get_local_id(0); e < BQ * KEYS; e += NT) {
        const uint R = R0 + e / KEYS;
        const int j = kb + (int)(e % KEYS);
        if (R < n_rows && j < (int)LK) ds[R * ds_ld + j] = 0.0f;
    }
}
#endif
#if DKDV_PAIRS && HEAD_SPLIT > 2
#error "the dK/dV kernel's pairs split the head dim in two at most"
#endif
#if VEC_FRAGMENTS
/* dst = f acc for this warp's 16 keys from k0 (dK^T or dV^T of vec_accumulate): keys
 * nq 8 + 2 tig + e, head-dim columns 32 u + 4 gid + 0 .. 3. */
OCLML_INLINE void put_key_grads(__global float *dst, float f, const float acc[OT_TILES][2][4],
                                ulong kbase, ulong kstride, int k0, uint LK, uint gid, uint tig) {
#pragma unroll
    for (uint nq = 0; nq < 2; nq++)
#pragma unroll
        for (uint e = 0; e < 2; e++) {
            const int kx = k0 + (int)(nq * 8 + 2 * tig + e);
            if (kx < (int)LK)
#pragma unroll
                for (uint u = 0; u < VEC_COLS / 32; u++) {
                    const float4 g = vec_out(acc, u, nq, e);
                    const float g4[4] = {g.x, g.y, g.z, g.w};
                    const ulong at = kbase + kx * kstride + u * 32 + 4 * gid;
#pragma unroll
                    for (uint x = 0; x < 4; x++) dst[at + x] = f * g4[x];
                }
        }
}
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
 * operands (no divergent barrier, emulated instructions included). With VEC_FRAGMENTS the pairs
 * read Q and dO as float4s as the unpaired warps do (dV^T and dK^T accumulated). With HEAD_SPLIT
 * 2 (above head dim 128, where one operand and one accumulator spill) four warps share 16 keys:
 * two P warps and two dS warps, each holding half of the head dim of its operand and
 * accumulator (read as float4s too where the half is a multiple of 32 columns); the two
 * of a product sum S^T or dP^T from their parts (sum_parts), and the first P warp hands P
 * over.
 *
 * With DS_OUT the kernel also writes dS to the workspace ds (put_ds; zeros where its keys meet
 * rows that see none of them, up to the band the dQ GEMM reads: band_rows) for key heads
 * bh0 + its group's head (group_of): the host then forms
 * dQ = scale dS K as one GEMM rather than running the dQ kernel, which would compute S and dP
 * again. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_dkdv_mma(BWD_ARGS, __global float *dk, ulong dk_off, __global float *dv,
                         ulong dv_off, __global float *ds, ulong ds_ld, uint bh0, uint band_rows,
                         ATT_GEOM DROP_ARGS) {
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
    /* Block-major also with full attention where dS goes out: 2-3% faster on the H100 than
     * head by head (bench/DECISIONS.md, "Work-groups block-major"). */
    const uint2 group = group_of(DS_OUT || BY_POSITION);
    const uint bh = bh0 + group.y, b = bh / HKV, hkv = bh % HKV;
    const uint n_rows = H / HKV * LQ;
    const int kb = (int)(group.x * KEYS);
#if DS_OUT /* this key head's rows of the workspace */
    ds += (ulong)group.y * n_rows * ds_ld;
#else
    (void)ds;
    (void)ds_ld;
    (void)band_rows;
#endif
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
#if DKDV_PAIRS && VEC_FRAGMENTS /* K and dV^T (P warps) or V and dK^T (dS warps) */
    float xa[VEC_COLS / 16][2][4], acc[OT_TILES][2][4]; /* a part with HEAD_SPLIT 2 */
    load_vec_rows(xa, (p_warp ? k + k_off : v + v_off) + col0, kread, tig, true);
#elif DKDV_PAIRS
    float xa[DPART][4], acc[DPART][4]; /* K and dV (P warps) or V and dK (dS warps), a part */
    load_a(xa, (p_warp ? k + k_off : v + v_off) + col0, kread, tig);
#elif VEC_FRAGMENTS
    /* K and V as the score products' fragment floats; dK^T and dV^T (vec_accumulate). */
    float ka[HEAD_DIM / 16][2][4], va[HEAD_DIM / 16][2][4], acc_k[OT_TILES][2][4],
        acc_v[OT_TILES][2][4];
    load_vec_rows(ka, k + k_off, kread, tig, true);
    load_vec_rows(va, v + v_off, kread, tig, true);
#else
    float ka[DSTEPS][4], va[DSTEPS][4], acc_k[DSTEPS][4], acc_v[DSTEPS][4];
    load_a(ka, k + k_off, kread, tig);
    load_a(va, v + v_off, kread, tig);
#endif
#if DKDV_PAIRS && VEC_FRAGMENTS
#pragma unroll
    for (uint x = 0; x < OT_TILES * 8; x++) acc[x / 8][x / 4 % 2][x % 4] = 0.0f;
#elif DKDV_PAIRS
#pragma unroll
    for (uint kk = 0; kk < DPART; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++) acc[kk][x] = 0.0f;
#elif VEC_FRAGMENTS
#pragma unroll
    for (uint x = 0; x < OT_TILES * 8; x++)
        acc_k[x / 8][x / 4 % 2][x % 4] = acc_v[x / 8][x / 4 % 2][x % 4] = 0.0f;
#else
#pragma unroll
    for (uint kk = 0; kk < DPART; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++) acc_k[kk][x] = acc_v[kk][x] = 0.0f;
#endif
    for (uint R0 = 0; R0 < n_rows; R0 += BQ) {
        int imin, imax, jlo, jhi;
        query_span(R0, BQ, n_rows, LQ, &imin, &imax);
        key_span(imin, imax, klen, shift, wl, wr, &jlo, &jhi);
        if (jhi <= kb || jlo >= kb + (int)KEYS) { /* no row of the block sees these keys */
#if DS_OUT
            if (ds_zeros_read(band_rows, kb, imax, shift, wr))
                zero_ds(ds, ds_ld, R0, kb, n_rows, LK);
#endif
            continue;
        }
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
#if VEC_FRAGMENTS
            vec_score_product(t, xa, (p_warp ? qs : ds_rows) + part * K_LD + col0, K_LD, true, true,
                              gid, tig EMU_ARGS);
#else
            score_product(t, xa, (p_warp ? qs : ds_rows) + part * K_LD + col0, true, gid,
                          tig EMU_ARGS);
#endif
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
                    const float f = DROP_FACTOR(rows_stat[row], key[x / 2]);
                    const float g =
                        score_grad(pt[(nt * 4 + x) * 32 + lane], t[nt][x] * f, delta_s[row]);
                    t[nt][x] = p_warp ? t[nt][x] * f : g; /* dV takes the dropped P */
                }
#if DS_OUT
            if (role == HEAD_SPLIT) put_ds(ds, ds_ld, R0, part, key, t, n_rows, LK, tig);
#endif
#if VEC_FRAGMENTS /* dV^T += dO^T P (P warps), dK^T += Q^T dS (dS warps) */
            uint fh[KTILES][2][2], fl[KTILES][2][2];
            to_b_fragments(t, fh, fl);
            vec_accumulate(acc, fh, fl, (p_warp ? ds_rows : qs) + part * K_LD + col0, gid,
                           tig EMU_ARGS);
#else
            uint fh[KTILES][4], fl[KTILES][4];
            to_a_fragments(t, fh, fl);
            accumulate_product(acc, fh, fl, (p_warp ? ds_rows : qs) + part * K_LD + col0, gid,
                               tig EMU_ARGS);
#endif
#else
            float s[KTILES][4], dp[KTILES][4];
#if VEC_FRAGMENTS
            vec_score_product(s, ka, qs + part * K_LD, K_LD, true, true, gid, tig EMU_ARGS);
            vec_score_product(dp, va, ds_rows + part * K_LD, K_LD, true, true, gid, tig EMU_ARGS);
#else
            score_product(s, ka, qs + part * K_LD, true, gid, tig EMU_ARGS);
            score_product(dp, va, ds_rows + part * K_LD, true, gid, tig EMU_ARGS);
#endif
#pragma unroll
            for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
                for (uint x = 0; x < 4; x++) {
                    const uint row = part + nt * 8 + 2 * tig + x % 2;
                    const float f = DROP_FACTOR(rows_stat[row], key[x / 2]);
                    softmax_grad(&s[nt][x], &dp[nt][x], rows_i[row], key[x / 2], lse_s[row],
                                 delta_s[row], f, klen, shift, wl, wr, scale, mask, mask_off,
                                 rows_mask[row]);
                    s[nt][x] *= f; /* dV takes the dropped P */
                }
#if DS_OUT
            put_ds(ds, ds_ld, R0, part, key, dp, n_rows, LK, tig);
#endif
#if VEC_FRAGMENTS /* dV^T += dO^T P, dK^T += Q^T dS */
            uint bh[KTILES][2][2], bl[KTILES][2][2];
            to_b_fragments(s, bh, bl);
            vec_accumulate(acc_v, bh, bl, ds_rows + part * K_LD, gid, tig EMU_ARGS);
            to_b_fragments(dp, bh, bl);
            vec_accumulate(acc_k, bh, bl, qs + part * K_LD, gid, tig EMU_ARGS);
#else
            uint fh[KTILES][4], fl[KTILES][4];
            to_a_fragments(s, fh, fl);
            accumulate_product(acc_v, fh, fl, ds_rows + part * K_LD, gid, tig EMU_ARGS);
            to_a_fragments(dp, fh, fl);
            accumulate_product(acc_k, fh, fl, qs + part * K_LD, gid, tig EMU_ARGS);
#endif
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the staged rows are read until here */
    }
#if VEC_FRAGMENTS && DKDV_PAIRS
    put_key_grads((p_warp ? dv + dv_off : dk + dk_off) + col0, p_warp ? 1.0f : scale, acc, kbase,
                  kstride, kb + (int)(pair * 16), LK, gid, tig);
#elif VEC_FRAGMENTS
    put_key_grads(dk + dk_off, scale, acc_k, kbase, kstride, kb + (int)(pair * 16), LK, gid, tig);
    put_key_grads(dv + dv_off, 1.0f, acc_v, kbase, kstride, kb + (int)(pair * 16), LK, gid, tig);
#else
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
#endif
}
#endif
