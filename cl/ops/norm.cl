/* LayerNorm and RMSNorm along the last axis, forward and backward, and the fused residual +
 * norm (the _res_ kernels): r = x + dropout(y) normalised in the same pass, r written too; its
 * backward adds dr, the residual stream's gradient, to the norm's input gradient and writes the
 * branch's gradient through the same dropout mask (cl/include/philox.h's rule, element
 * row * cols + col).
 * LayerNorm: y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps), population
 * variance computed two-pass from registers (a row of equal values gives var 0, finite y).
 * RMSNorm: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps).
 * flags: 1 gamma given, 2 beta given, 4 write mean, 8 write rstd (absent ones act as 1 and 0).
 * The tensors' dtypes (dtype.h's numbers, fp32 by default), each its own: X_DT x (the backward's
 * x is the forward's normalised input, the fused residual's r), YB_DT the branch y, R_DT r (the
 * normalised tensor of the long path's second pass: x itself for the plain norms), G_DT gamma,
 * B_DT beta, Y_DT the output; DY_DT dy (dout), DX_DT dx, DR_DT dr, DYB_DT the branch's gradient,
 * DG_DT dgamma, DB_DT dbeta. The math is fp32: each input read converted to float, each output
 * rounded once to its dtype; the saved mean and rstd and the partial sums stay fp32. The fused
 * residual normalises r as stored (rounded to R_DT), so that its backward, which reads r, sees
 * the r the statistics were taken of. */
#include "rows.h"
#include "norm_abi.h"
#include "philox.h"

#ifndef X_DT
#define X_DT 0
#endif
#ifndef R_DT
#define R_DT X_DT
#endif
#ifndef YB_DT
#define YB_DT 0
#endif
#ifndef G_DT
#define G_DT 0
#endif
#ifndef B_DT
#define B_DT 0
#endif
#ifndef Y_DT
#define Y_DT 0
#endif
#ifndef DY_DT
#define DY_DT 0
#endif
#ifndef DX_DT
#define DX_DT 0
#endif
#ifndef DR_DT
#define DR_DT 0
#endif
#ifndef DYB_DT
#define DYB_DT 0
#endif
#ifndef DG_DT
#define DG_DT 0
#endif
#ifndef DB_DT
#define DB_DT 0
#endif
#define XT DT_ELEM(X_DT)
#define RT DT_ELEM(R_DT)
#define YBT DT_ELEM(YB_DT)
#define GT DT_ELEM(G_DT)
#define BT DT_ELEM(B_DT)
#define YT DT_ELEM(Y_DT)
#define DYT DT_ELEM(DY_DT)
#define DXT DT_ELEM(DX_DT)
#define DRT DT_ELEM(DR_DT)
#define DYBT DT_ELEM(DYB_DT)
#define DGT DT_ELEM(DG_DT)
#define DBT DT_ELEM(DB_DT)

/* v as r's dtype holds it (the value r is stored as). */
#if R_DT == 1
#define R_ROUND(v) bf16_to_float(bf16_from_float(v))
#elif R_DT == 2
#define R_ROUND(v) fp16_to_float(fp16_from_float(v))
#else
#define R_ROUND(v) (v)
#endif

/* x + y m as oclml_dropout_add computes it: the product rounded before the add (contraction
 * into an fma off: compilers contract across inlined statements), so that r matches the unfused
 * op bit for bit. */
inline float res_add(float x, float y, float m) {
#pragma OPENCL FP_CONTRACT OFF
    const float t = y * m;
    return x + t;
}

/* The fused residual's dropout arguments. */
#define DROP_ARGS float p, float scale, uint seed_lo, uint seed_hi, ulong doff
#define DROP_MULT(k) \
    drop_mult(row *cols + ROW_COL(k, lane, G), p, scale, (uint2)(seed_lo, seed_hi), doff)
/* STMT for each register element k with its dropout multiplier m. With float4 registers the
 * row starts at a multiple of 4 (VEC 4 needs cols % 4 == 0), so a vector's four elements are
 * the four words of one Philox draw: a quarter of the draws of one per element. */
#if ROW_VEC == 4
#define DROP_FOR(STMT)                                                                        \
    for (uint i4_ = 0; i4_ < ROW_ITEMS; i4_++) {                                              \
        const float4 m4_ = drop_mult4((row * cols + ROW_COL(4 * i4_, lane, G)) / 4, p, scale, \
                                      (uint2)(seed_lo, seed_hi), doff);                       \
        const float ms_[4] = {m4_.x, m4_.y, m4_.z, m4_.w};                                    \
        for (uint j4_ = 0; j4_ < 4; j4_++) {                                                  \
            const uint k = 4 * i4_ + j4_;                                                     \
            const float m = ms_[j4_];                                                         \
            STMT;                                                                             \
        }                                                                                     \
    }
#else
#define DROP_FOR(STMT)                      \
    for (uint k = 0; k < ROW_FLOATS; k++) { \
        const float m = DROP_MULT(k);       \
        STMT;                               \
    }
#endif

/* v[k] = v[k] * gamma[col] + beta[col] for the lane's columns (gamma of dtype gdt, beta of bdt),
 * reading gamma and beta as the values are needed so that no second row array occupies
 * registers. */
#define AFFINE1(v, gamma, beta, flags, ITEMS, lane, G, cols, gdt, bdt)               \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                                          \
        const uint c_ = i_ * (G) + (lane);                                           \
        if (c_ < (cols))                                                             \
            v[i_] = v[i_] * (((flags)&HAS_GAMMA) ? DT_LOAD(gdt, gamma, c_) : 1.0f) + \
                    (((flags)&HAS_BETA) ? DT_LOAD(bdt, beta, c_) : 0.0f);            \
    }
#define AFFINE4(v, gamma, beta, flags, ITEMS, lane, G, cols, gdt, bdt)                         \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                                                    \
        const uint c_ = i_ * (G) + (lane);                                                     \
        if (c_ < (cols) / 4) {                                                                 \
            const float4 g_ = ((flags)&HAS_GAMMA) ? DT_LOAD4(gdt, gamma, c_) : (float4)(1.0f); \
            const float4 b_ = ((flags)&HAS_BETA) ? DT_LOAD4(bdt, beta, c_) : (float4)(0.0f);   \
            v[4 * i_] = v[4 * i_] * g_.x + b_.x;                                               \
            v[4 * i_ + 1] = v[4 * i_ + 1] * g_.y + b_.y;                                       \
            v[4 * i_ + 2] = v[4 * i_ + 2] * g_.z + b_.z;                                       \
            v[4 * i_ + 3] = v[4 * i_ + 3] * g_.w + b_.w;                                       \
        }                                                                                      \
    }

#if ROW_VEC == 4
#define AFFINE AFFINE4
#else
#define AFFINE AFFINE1
#endif

#define NORM_FWD_TAIL                                                                         \
    __global const GT *gamma, ulong go, __global const BT *beta, ulong bo, __global YT *y,    \
        ulong yo, __global float *mean, ulong mo, __global float *rstd, ulong ro, uint flags, \
        float eps

/* Normalises the row in v[] (pivot: its first element, read by every lane) and stores it;
 * AFTER_PIVOT runs once every lane of the work-group has read the pivot (the mean's reduction
 * has a barrier), so that a store over x there (the fused residual in place) cannot change it. */
#define NORM_FWD_ROW(RMS, pivot_expr, AFTER_PIVOT)                                      \
    {                                                                                   \
        /* The mean is taken about the row's first element (shifted data): a row of   \
         * equal values gives exactly that value, whatever the rounding of the        \
         * division. */ \
        float mu = 0.0f, acc = 0.0f;                                                    \
        if (!RMS) {                                                                     \
            const float pivot = ok ? (pivot_expr) : 0.0f;                               \
            ROW_ADD(acc, ROW_VALID(k, lane, G, cols) ? v[k] - pivot : 0.0f)             \
            mu = pivot + ROW_SUM(acc) / (float)cols;                                    \
            acc = 0.0f;                                                                 \
        }                                                                               \
        AFTER_PIVOT                                                                     \
        ROW_ADD(acc, ROW_VALID(k, lane, G, cols) ? (v[k] - mu) * (v[k] - mu) : 0.0f)    \
        const float rs = rsqrt(ROW_SUM(acc) / (float)cols + eps);                       \
        for (uint k = 0; k < ROW_FLOATS; k++) v[k] = (v[k] - mu) * rs;                  \
        AFFINE(v, gamma + go, beta + bo, flags, ROW_ITEMS, lane, G, cols, G_DT, B_DT)   \
        ROW_STORE_DT(Y_DT, v, y + yo + row * cols, ROW_ITEMS, lane, G, cols, ok)        \
        if (ok && lane == 0) {                                                          \
            if (flags & SAVE_MEAN) mean[mo + row] = mu;                                 \
            if (flags & SAVE_RSTD) rstd[ro + row] = rs;                                 \
        }                                                                               \
    }

#define NOTHING
#define STORE_R ROW_STORE_DT(R_DT, v, r + rro + row * cols, ROW_ITEMS, lane, G, cols, ok)

#define NORM_FWD(NAME, RMS)                                                                 \
    __kernel void NAME(__global const XT *x, ulong xo, NORM_FWD_TAIL, uint rows, uint cols, \
                       uint G, __local float *red) {                                        \
        ROW_PROLOGUE(G, rows)                                                               \
        float v[ROW_FLOATS];                                                                \
        ROW_LOAD_DT(X_DT, v, x + xo + row * cols, ROW_ITEMS, lane, G, cols, ok, 0.0f)       \
        NORM_FWD_ROW(RMS, DT_LOAD(X_DT, x, xo + row * cols), NOTHING)                       \
    }

/* r = x + dropout(yb) into v[] (as r's dtype holds it), then the norm, r stored once the pivot is
 * read (r may be x). The pivot is r's first element computed as lane 0 computes it. */
#define NORM_RES_FWD(NAME, RMS)                                                                   \
    __kernel void NAME(__global const XT *x, ulong xo, __global const YBT *yb, ulong ybo,         \
                       __global RT *r, ulong rro, DROP_ARGS, NORM_FWD_TAIL, uint rows, uint cols, \
                       uint G, __local float *red) {                                              \
        ROW_PROLOGUE(G, rows)                                                                     \
        float v[ROW_FLOATS], w[ROW_FLOATS];                                                       \
        ROW_LOAD_DT(X_DT, v, x + xo + row * cols, ROW_ITEMS, lane, G, cols, ok, 0.0f)             \
        ROW_LOAD_DT(YB_DT, w, yb + ybo + row * cols, ROW_ITEMS, lane, G, cols, ok, 0.0f)          \
        DROP_FOR(v[k] = R_ROUND(res_add(v[k], w[k], m)))                                          \
        NORM_FWD_ROW(RMS,                                                                         \
                     R_ROUND(res_add(                                                             \
                         DT_LOAD(X_DT, x, xo + row * cols), DT_LOAD(YB_DT, yb, ybo + row * cols), \
                         drop_mult(row *cols, p, scale, (uint2)(seed_lo, seed_hi), doff))),       \
                     STORE_R)                                                                     \
    }

/* Backward of the row: with xhat = (x - mean) * rstd and gd = dy * gamma,
 * LayerNorm dx = rstd * (gd - mean(gd) - xhat * mean(gd * xhat)), RMSNorm drops mean(gd).
 * NORM_BWD_ROW leaves xhat in h[] and dy in d[] when PARAMS (for the parameter gradients). */
#define NORM_BWD_ROW(RMS, PARAMS, RES)                                                          \
    {                                                                                           \
        const float mu = (RMS || !ok) ? 0.0f : mean[mo + row];                                  \
        const float rs = ok ? rstd[ro + row] : 0.0f;                                            \
        ROW_LOAD_DT(X_DT, h, x + xo + row * cols, ROW_ITEMS, lane, G, cols, ok, 0.0f)           \
        ROW_LOAD_DT(DY_DT, gd, dy + dyo + row * cols, ROW_ITEMS, lane, G, cols, ok, 0.0f)       \
        for (uint k = 0; k < ROW_FLOATS; k++) h[k] = (h[k] - mu) * rs;                          \
        if (PARAMS)                                                                             \
            for (uint k = 0; k < ROW_FLOATS; k++) {                                             \
                dg[k] += gd[k] * h[k];                                                          \
                db[k] += gd[k];                                                                 \
            }                                                                                   \
        AFFINE(gd, gamma + go, gamma + go, (flags & HAS_GAMMA), ROW_ITEMS, lane, G, cols, G_DT, \
               G_DT)                                                                            \
        float a = 0.0f, b = 0.0f;                                                               \
        ROW_ADD(a, gd[k])                                                                       \
        ROW_ADD(b, ROW_VALID(k, lane, G, cols) ? gd[k] * h[k] : 0.0f)                           \
        a = RMS ? 0.0f : ROW_SUM(a) / (float)cols;                                              \
        b = ROW_SUM(b) / (float)cols;                                                           \
        for (uint k = 0; k < ROW_FLOATS; k++) gd[k] = rs * (gd[k] - a - h[k] * b);              \
        NORM_BWD_STORE_##RES                                                                    \
    }

/* The row's input gradient gd[] to dx; with the fused residual (1), plus dr (into h[]: xhat is
 * spent by then), and the branch's gradient through the dropout mask. */
#define NORM_BWD_STORE_0 \
    ROW_STORE_DT(DX_DT, gd, dx + dxo + row * cols, ROW_ITEMS, lane, G, cols, ok)
#define NORM_BWD_STORE_1                                                                 \
    if (rflags & HAS_DR) {                                                               \
        ROW_LOAD_DT(DR_DT, h, dr + dro + row * cols, ROW_ITEMS, lane, G, cols, ok, 0.0f) \
        for (uint k = 0; k < ROW_FLOATS; k++) gd[k] += h[k];                             \
    }                                                                                    \
    ROW_STORE_DT(DX_DT, gd, dx + dxo + row * cols, ROW_ITEMS, lane, G, cols, ok)         \
    if (rflags & WANT_DY) {                                                              \
        DROP_FOR(gd[k] *= m)                                                             \
        ROW_STORE_DT(DYB_DT, gd, dyb + dybo + row * cols, ROW_ITEMS, lane, G, cols, ok)  \
    }

#define NORM_BWD_ARGS                                                               \
    __global const XT *x, ulong xo, __global const GT *gamma, ulong go,             \
        __global const float *mean, ulong mo, __global const float *rstd, ulong ro, \
        __global const DYT *dy, ulong dyo, __global DXT *dx, ulong dxo, uint flags

/* The fused residual's: dr (HAS_DR), the branch's gradient dyb (WANT_DY) and the dropout. */
#define RES_BWD_ARGS \
    __global const DRT *dr, ulong dro, __global DYBT *dyb, ulong dybo, uint rflags, DROP_ARGS

#define NORM_BWD(NAME, RMS)                                                               \
    __kernel void NAME(NORM_BWD_ARGS, uint rows, uint cols, uint G, __local float *red) { \
        ROW_PROLOGUE(G, rows)                                                             \
        float h[ROW_FLOATS], gd[ROW_FLOATS], dg[ROW_FLOATS], db[ROW_FLOATS];              \
        NORM_BWD_ROW(RMS, 0, 0)                                                           \
    }
#define NORM_RES_BWD(NAME, RMS)                                                   \
    __kernel void NAME(NORM_BWD_ARGS, RES_BWD_ARGS, uint rows, uint cols, uint G, \
                       __local float *red) {                                      \
        ROW_PROLOGUE(G, rows)                                                     \
        float h[ROW_FLOATS], gd[ROW_FLOATS], dg[ROW_FLOATS], db[ROW_FLOATS];      \
        NORM_BWD_ROW(RMS, 0, 1)                                                   \
    }

/* The same, fused with the parameter gradients: a fixed number of work-groups loops over the
 * rows, each work-item summing dy * xhat and dy for its own columns in registers, so x and dy
 * are read once for dx, dgamma and dbeta together. At the end each work-group folds its row
 * slots and writes one partial per column: part[group][col] = (dgamma, dbeta), summed by
 * oclml_norm_param_finish (under ROW_SOLO a partial per work-item). */
#define NORM_BWD_PARAMS_K(NAME, RMS, RES, EXTRA_ARGS)                                        \
    __kernel void NAME(NORM_BWD_ARGS EXTRA_ARGS, __global float *part, uint rows, uint cols, \
                       uint G, __local float *red) {                                         \
        const uint lid = get_local_id(0), lane = lid & (G - 1), L = get_local_size(0);       \
        const uint slots = L / G, groups = get_num_groups(0);                                \
        const ulong row_groups = ((ulong)rows + slots - 1) / slots;                          \
        float h[ROW_FLOATS], gd[ROW_FLOATS], dg[ROW_FLOATS], db[ROW_FLOATS];                 \
        for (uint k = 0; k < ROW_FLOATS; k++) dg[k] = db[k] = 0.0f;                          \
        for (ulong rg = get_group_id(0); rg < row_groups; rg += groups) {                    \
            const ulong row = rg * slots + lid / G;                                          \
            const bool ok = row < rows;                                                      \
            NORM_BWD_ROW(RMS, 1, RES)                                                        \
        }                                                                                    \
        NORM_BWD_PARAMS_FOLD                                                                 \
    }
/* The work-group's partial row: its slots' sums folded through local memory, or under ROW_SOLO
 * each work-item's own (part has a row per work-item: no barrier). */
#if ROW_SOLO
#define NORM_BWD_PARAMS_FOLD                                                             \
    for (uint k = 0; k < ROW_FLOATS; k++) {                                              \
        const uint col = ROW_COL(k, lane, G);                                            \
        if (col < cols)                                                                  \
            vstore2((float2)(dg[k], db[k]), (ulong)get_global_id(0) * cols + col, part); \
    }
#else
#define NORM_BWD_PARAMS_FOLD                                                      \
    for (uint k = 0; k < ROW_FLOATS; k++) {                                       \
        const uint col = ROW_COL(k, lane, G);                                     \
        red[lid] = dg[k];                                                         \
        red[L + lid] = db[k];                                                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                             \
        if (lid < G && col < cols) {                                              \
            float sg = 0.0f, sb = 0.0f;                                           \
            for (uint s = 0; s < slots; s++) {                                    \
                sg += red[s * G + lid];                                           \
                sb += red[L + s * G + lid];                                       \
            }                                                                     \
            vstore2((float2)(sg, sb), (ulong)get_group_id(0) * cols + col, part); \
        }                                                                         \
        barrier(CLK_LOCAL_MEM_FENCE);                                             \
    }
#endif
#define NO_ARGS
#define NORM_BWD_PARAMS(NAME, RMS) NORM_BWD_PARAMS_K(NAME, RMS, 0, NO_ARGS)
#define NORM_RES_BWD_PARAMS(NAME, RMS) NORM_BWD_PARAMS_K(NAME, RMS, 1, RES_EXTRA_ARGS)
#define RES_EXTRA_ARGS , RES_BWD_ARGS

#if OCLML_WANT(oclml_layernorm_fwd)
NORM_FWD(oclml_layernorm_fwd, 0)
#endif
#if OCLML_WANT(oclml_res_layernorm_fwd)
NORM_RES_FWD(oclml_res_layernorm_fwd, 0)
#endif
#if OCLML_WANT(oclml_res_rmsnorm_fwd)
NORM_RES_FWD(oclml_res_rmsnorm_fwd, 1)
#endif
#if OCLML_WANT(oclml_res_layernorm_bwd)
NORM_RES_BWD(oclml_res_layernorm_bwd, 0)
#endif
#if OCLML_WANT(oclml_res_rmsnorm_bwd)
NORM_RES_BWD(oclml_res_rmsnorm_bwd, 1)
#endif
#if OCLML_WANT(oclml_res_layernorm_bwd_params)
NORM_RES_BWD_PARAMS(oclml_res_layernorm_bwd_params, 0)
#endif
#if OCLML_WANT(oclml_res_rmsnorm_bwd_params)
NORM_RES_BWD_PARAMS(oclml_res_rmsnorm_bwd_params, 1)
#endif
#if OCLML_WANT(oclml_rmsnorm_fwd)
NORM_FWD(oclml_rmsnorm_fwd, 1)
#endif
#if OCLML_WANT(oclml_layernorm_bwd)
NORM_BWD(oclml_layernorm_bwd, 0)
#endif
#if OCLML_WANT(oclml_rmsnorm_bwd)
NORM_BWD(oclml_rmsnorm_bwd, 1)
#endif
#if OCLML_WANT(oclml_layernorm_bwd_params)
NORM_BWD_PARAMS(oclml_layernorm_bwd_params, 0)
#endif
#if OCLML_WANT(oclml_rmsnorm_bwd_params)
NORM_BWD_PARAMS(oclml_rmsnorm_bwd_params, 1)
#endif

/* ---- chunked path for long rows (grid: chunks x L, rows; CHUNK_LOOP in rows.h) ---- */

/* The forward part's end, shared by the plain and the residual norm: the chunk's mean from s
 * (the sum about pivot) over cnt values, the sum of squares of xv about that mean, the three
 * stored as the chunk's part (lid, L, row, chunk, nch, red and part in scope). */
#define CHUNK_PART_STORE(pivot, s, cnt)                            \
    const float cmean = (pivot) + seg_sum(s, red, lid, L) / (cnt); \
    float q = 0.0f;                                                \
    {                                                              \
        CHUNK_LOOP(c) {                                            \
            const float d = xv[j] - cmean;                         \
            q += d * d;                                            \
        }                                                          \
    }                                                              \
    q = seg_sum(q, red, lid, L);                                   \
    if (lid == 0) vstore3((float3)(cmean, q, cnt), row *nch + chunk, part)

/* Pass 1, forward: per chunk (sum, sum of squares about the chunk mean, count); RMS: (0, sum of
 * squares, count). The merge is Chan's, so long rows keep the two-pass accuracy. */
#define NORM_FWD_PART(NAME, RMS)                                                                   \
    __kernel void NAME(__global const XT *x, ulong xo, __global float *part, uint rows, uint cols, \
                       uint nch, __local float *red) {                                             \
        const float pivot = RMS ? 0.0f : DT_LOAD(X_DT, x, xo + get_global_id(1) * cols);           \
        float s = 0.0f, n = 0.0f, xv[OCLML_LONG_ITEMS];                                            \
        CHUNK_LOAD_DT(X_DT, xv, x + xo + get_global_id(1) * cols, 0.0f);                           \
        {                                                                                          \
            CHUNK_LOOP(c) {                                                                        \
                s += RMS ? 0.0f : xv[j] - pivot;                                                   \
                n += 1.0f;                                                                         \
            }                                                                                      \
        }                                                                                          \
        const uint lid = get_local_id(0), L = get_local_size(0), chunk = get_group_id(0);          \
        const ulong row = get_global_id(1);                                                        \
        const float cnt = seg_sum(n, red, lid, L);                                                 \
        CHUNK_PART_STORE(pivot, s, cnt);                                                           \
    }
#if OCLML_WANT(oclml_layernorm_fwd_part)
NORM_FWD_PART(oclml_layernorm_fwd_part, 0)
#endif
#if OCLML_WANT(oclml_rmsnorm_fwd_part)
NORM_FWD_PART(oclml_rmsnorm_fwd_part, 1)
#endif

/* Pass 1 of the fused residual: r = x + dropout(yb) over the chunk, stored, then the chunk's
 * statistics as NORM_FWD_PART's from registers; pass 2 is NORM_FWD_FINISH on r. The pivot is the
 * chunk's own first element of r (r may be x: another chunk's work-group may already have stored
 * over the row's first element), read by every lane before the first reduction's barrier, after
 * which the group stores. */
#define NORM_RES_FWD_PART(NAME, RMS)                                                              \
    __kernel void NAME(__global const XT *x, ulong xo, __global const YBT *yb, ulong ybo,         \
                       __global RT *r, ulong rro, DROP_ARGS, __global float *part, uint rows,     \
                       uint cols, uint nch, __local float *red) {                                 \
        const uint2 key = (uint2)(seed_lo, seed_hi);                                              \
        const ulong line = get_global_id(1) * cols;                                               \
        const uint c0 = get_group_id(0) * get_local_size(0) * OCLML_LONG_ITEMS;                   \
        const float pivot = RMS ? 0.0f                                                            \
                                : R_ROUND(res_add(DT_LOAD(X_DT, x, xo + line + c0),               \
                                                  DT_LOAD(YB_DT, yb, ybo + line + c0),            \
                                                  drop_mult(line + c0, p, scale, key, doff)));    \
        float s = 0.0f, n = 0.0f, xv[OCLML_LONG_ITEMS], wv[OCLML_LONG_ITEMS];                     \
        CHUNK_LOAD_DT(X_DT, xv, x + xo + line, 0.0f);                                             \
        CHUNK_LOAD_DT(YB_DT, wv, yb + ybo + line, 0.0f);                                          \
        {                                                                                         \
            CHUNK_LOOP(c) {                                                                       \
                xv[j] = R_ROUND(res_add(xv[j], wv[j], drop_mult(line + c, p, scale, key, doff))); \
                s += RMS ? 0.0f : xv[j] - pivot;                                                  \
                n += 1.0f;                                                                        \
            }                                                                                     \
        }                                                                                         \
        const uint lid = get_local_id(0), L = get_local_size(0), chunk = get_group_id(0);         \
        const ulong row = get_global_id(1);                                                       \
        const float cnt = seg_sum(n, red, lid, L);                                                \
        {                                                                                         \
            CHUNK_LOOP(c) { DT_STORE(R_DT, r + rro, line + c, xv[j]); }                           \
        }                                                                                         \
        CHUNK_PART_STORE(pivot, s, cnt);                                                          \
    }
#if OCLML_WANT(oclml_res_layernorm_fwd_part)
NORM_RES_FWD_PART(oclml_res_layernorm_fwd_part, 0)
#endif
#if OCLML_WANT(oclml_res_rmsnorm_fwd_part)
NORM_RES_FWD_PART(oclml_res_rmsnorm_fwd_part, 1)
#endif

/* Chan's merge of the row's chunk statistics: (mean, M2) over all columns. */
inline float2 merge_chunks(__global const float *part, ulong row, uint nch) {
    float mean = 0.0f, m2 = 0.0f, n = 0.0f;
    for (uint c = 0; c < nch; c++) {
        const float3 p = vload3(row * nch + c, part);
        const float tot = n + p.z, delta = p.x - mean;
        mean += delta * (p.z / tot);
        m2 += p.y + delta * delta * (n * p.z / tot);
        n = tot;
    }
    return (float2)(mean, m2 / n);
}

#define NORM_FWD_FINISH(NAME, RMS)                                                                \
    __kernel void NAME(__global const RT *x, ulong xo, NORM_FWD_TAIL, __global const float *part, \
                       uint rows, uint cols, uint nch, __local float *red) {                      \
        const float2 mv = merge_chunks(part, get_global_id(1), nch);                              \
        const float mu = RMS ? 0.0f : mv.x, rs = rsqrt(mv.y + eps);                               \
        float xv[OCLML_LONG_ITEMS], gv[OCLML_LONG_ITEMS], bv[OCLML_LONG_ITEMS];                   \
        CHUNK_LOAD_DT(R_DT, xv, x + xo + get_global_id(1) * cols, 0.0f);                          \
        CHUNK_LOAD_IF_DT((flags & HAS_GAMMA) != 0, G_DT, gv, gamma + go, 1.0f);                   \
        CHUNK_LOAD_IF_DT((flags & HAS_BETA) != 0, B_DT, bv, beta + bo, 0.0f);                     \
        CHUNK_LOOP(c) {                                                                           \
            DT_STORE(Y_DT, y + yo, row * cols + c, (xv[j] - mu) * rs * gv[j] + bv[j]);            \
        }                                                                                         \
        if (chunk == 0 && lid == 0) {                                                             \
            if (flags & SAVE_MEAN) mean[mo + row] = mu;                                           \
            if (flags & SAVE_RSTD) rstd[ro + row] = rs;                                           \
        }                                                                                         \
    }
#if OCLML_WANT(oclml_layernorm_fwd_finish)
NORM_FWD_FINISH(oclml_layernorm_fwd_finish, 0)
#endif
#if OCLML_WANT(oclml_rmsnorm_fwd_finish)
NORM_FWD_FINISH(oclml_rmsnorm_fwd_finish, 1)
#endif

/* Pass 1, backward: per chunk (sum gd, sum gd * xhat). */
#define NORM_BWD_PART(NAME, RMS)                                                                   \
    __kernel void NAME(__global const XT *x, ulong xo, __global const GT *gamma, ulong go,         \
                       __global const float *mean, ulong mo, __global const float *rstd, ulong ro, \
                       __global const DYT *dy, ulong dyo, uint flags, __global float *part,        \
                       uint rows, uint cols, uint nch, __local float *red) {                       \
        float a = 0.0f, b = 0.0f;                                                                  \
        const ulong r = get_global_id(1);                                                          \
        const float mu = RMS ? 0.0f : mean[mo + r], rs = rstd[ro + r];                             \
        float xv[OCLML_LONG_ITEMS], dv[OCLML_LONG_ITEMS], gv[OCLML_LONG_ITEMS];                    \
        CHUNK_LOAD_DT(X_DT, xv, x + xo + r * cols, 0.0f);                                          \
        CHUNK_LOAD_DT(DY_DT, dv, dy + dyo + r * cols, 0.0f);                                       \
        CHUNK_LOAD_IF_DT((flags & HAS_GAMMA) != 0, G_DT, gv, gamma + go, 1.0f);                    \
        {                                                                                          \
            CHUNK_LOOP(c) {                                                                        \
                const float gd = dv[j] * gv[j];                                                    \
                a += gd;                                                                           \
                b += gd * (xv[j] - mu) * rs;                                                       \
            }                                                                                      \
        }                                                                                          \
        const uint lid = get_local_id(0), L = get_local_size(0);                                   \
        a = seg_sum(a, red, lid, L);                                                               \
        b = seg_sum(b, red, lid, L);                                                               \
        if (lid == 0) vstore2((float2)(a, b), r *nch + get_group_id(0), part);                     \
    }
#if OCLML_WANT(oclml_layernorm_bwd_part)
NORM_BWD_PART(oclml_layernorm_bwd_part, 0)
#endif
#if OCLML_WANT(oclml_rmsnorm_bwd_part)
NORM_BWD_PART(oclml_rmsnorm_bwd_part, 1)
#endif

/* Pass 1 with the parameter gradients (layernorm's and RMSnorm's backward, fused residual or not,
 * where dgamma or dbeta is wanted): the rows' partial sums and dgamma/dbeta's partials from one
 * read of x and dy. Grid (column groups x L, splits; local size 1 along the splits): a work-item
 * owns NORM_PP_COLS columns of its group, strided by L, and walks its split's rows NORM_PP_ROWS
 * at a time, summing dy * xhat and dy for its columns in registers; each batch's row sums are
 * folded through local memory in two steps (not a halving tree a row, whose barriers left the
 * memory idle). part[row][group] = the group's (sum gd, sum gd * xhat); pp[split][col] =
 * (dgamma, dbeta) partials, summed by oclml_norm_param_finish. */
#define NORM_BWD_PART_PARAMS(NAME, RMS)                                                            \
    __kernel void NAME(__global const XT *x, ulong xo, __global const GT *gamma, ulong go,         \
                       __global const float *mean, ulong mo, __global const float *rstd, ulong ro, \
                       __global const DYT *dy, ulong dyo, uint flags, __global float *part,        \
                       __global float *pp, uint per_split, uint rows, uint cols, uint ngroups,     \
                       __local float2 *acc) {                                                      \
        const uint lid = get_local_id(0), L = get_local_size(0), grp = get_group_id(0);            \
        const uint c0 = grp * L * NORM_PP_COLS + lid;                                              \
        const ulong split = get_global_id(1), r0 = split * per_split;                              \
        const ulong r1 = min((ulong)rows, r0 + per_split);                                         \
        float gv[NORM_PP_COLS], dg[NORM_PP_COLS], db[NORM_PP_COLS];                                \
        _Pragma("unroll") for (uint j = 0; j < NORM_PP_COLS; j++) {                                \
            const uint c = c0 + j * L;                                                             \
            gv[j] = c < cols && (flags & HAS_GAMMA) ? DT_LOAD(G_DT, gamma, go + c) : 1.0f;         \
            dg[j] = db[j] = 0.0f;                                                                  \
        }                                                                                          \
        /* Work-items a batch row's fold takes in its first step (all of them where L < rows). */  \
        const uint T = L >= NORM_PP_ROWS ? L / NORM_PP_ROWS : 1;                                   \
        for (ulong rb = r0; rb < r1; rb += NORM_PP_ROWS) {                                         \
            float xv[NORM_PP_ROWS][NORM_PP_COLS], dv[NORM_PP_ROWS][NORM_PP_COLS];                  \
            _Pragma("unroll") for (uint k = 0; k < NORM_PP_ROWS; k++) {                            \
                const ulong row = rb + k;                                                          \
                _Pragma("unroll") for (uint j = 0; j < NORM_PP_COLS; j++) {                        \
                    const uint c = c0 + j * L;                                                     \
                    const bool ok = row < r1 && c < cols;                                          \
                    xv[k][j] = ok ? DT_LOAD(X_DT, x, xo + row * cols + c) : 0.0f;                  \
                    dv[k][j] = ok ? DT_LOAD(DY_DT, dy, dyo + row * cols + c) : 0.0f;               \
                }                                                                                  \
            }                                                                                      \
            _Pragma("unroll") for (uint k = 0; k < NORM_PP_ROWS; k++) {                            \
                const ulong row = rb + k;                                                          \
                const float mu = RMS || row >= r1 ? 0.0f : mean[mo + row];                         \
                const float rs = row < r1 ? rstd[ro + row] : 0.0f;                                 \
                float a = 0.0f, b = 0.0f;                                                          \
                _Pragma("unroll") for (uint j = 0; j < NORM_PP_COLS; j++) {                        \
                    const float h = (xv[k][j] - mu) * rs, gd = dv[k][j] * gv[j];                   \
                    a += gd;                                                                       \
                    b += gd * h;                                                                   \
                    dg[j] += dv[k][j] * h;                                                         \
                    db[j] += dv[k][j];                                                             \
                }                                                                                  \
                acc[k * L + lid] = (float2)(a, b);                                                 \
            }                                                                                      \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
            for (uint w = lid; w < NORM_PP_ROWS * T; w += L) {                                     \
                const uint k = w / T, q = w % T;                                                   \
                float2 s = (float2)(0.0f);                                                         \
                for (uint i = q; i < L; i += T) s += acc[k * L + i];                               \
                acc[k * L + q] = s;                                                                \
            }                                                                                      \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
            for (uint k = lid; k < NORM_PP_ROWS; k += L) {                                         \
                float2 s = (float2)(0.0f);                                                         \
                for (uint q = 0; q < T; q++) s += acc[k * L + q];                                  \
                if (rb + k < r1) vstore2(s, (rb + k) * ngroups + grp, part);                       \
            }                                                                                      \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
        }                                                                                          \
        _Pragma("unroll") for (uint j = 0; j < NORM_PP_COLS; j++) {                                \
            if (c0 + j * L < cols) vstore2((float2)(dg[j], db[j]), cols *split + c0 + j * L, pp);  \
        }                                                                                          \
    }
#if OCLML_WANT(oclml_layernorm_bwd_part_params)
NORM_BWD_PART_PARAMS(oclml_layernorm_bwd_part_params, 0)
#endif
#if OCLML_WANT(oclml_rmsnorm_bwd_part_params)
NORM_BWD_PART_PARAMS(oclml_rmsnorm_bwd_part_params, 1)
#endif

/* Pass 2, backward: dx from the row's sums; the fused residual's (RES 1) adds dr (read before dx
 * is stored: dx may be dr) and writes the branch's gradient through the dropout mask. */
#define NORM_BWD_FINISH_K(NAME, RMS, RES, EXTRA_ARGS)                                              \
    __kernel void NAME(NORM_BWD_ARGS EXTRA_ARGS, __global const float *part, uint rows, uint cols, \
                       uint nch, __local float *red) {                                             \
        const ulong r = get_global_id(1);                                                          \
        float a = 0.0f, b = 0.0f;                                                                  \
        for (uint c = 0; c < nch; c++) {                                                           \
            const float2 s = vload2(r * nch + c, part);                                            \
            a += s.x;                                                                              \
            b += s.y;                                                                              \
        }                                                                                          \
        a = RMS ? 0.0f : a / (float)cols;                                                          \
        b /= (float)cols;                                                                          \
        const float mu = RMS ? 0.0f : mean[mo + r], rs = rstd[ro + r];                             \
        float xv[OCLML_LONG_ITEMS], dv[OCLML_LONG_ITEMS], gv[OCLML_LONG_ITEMS];                    \
        CHUNK_LOAD_DT(X_DT, xv, x + xo + r * cols, 0.0f);                                          \
        CHUNK_LOAD_DT(DY_DT, dv, dy + dyo + r * cols, 0.0f);                                       \
        CHUNK_LOAD_IF_DT((flags & HAS_GAMMA) != 0, G_DT, gv, gamma + go, 1.0f);                    \
        NORM_BWD_FINISH_LOAD_##RES CHUNK_LOOP(c) {                                                 \
            const float h = (xv[j] - mu) * rs;                                                     \
            float v = rs * (dv[j] * gv[j] - a - h * b);                                            \
            NORM_BWD_FINISH_STORE_##RES                                                            \
        }                                                                                          \
    }
#define NORM_BWD_FINISH_LOAD_0
#define NORM_BWD_FINISH_STORE_0 DT_STORE(DX_DT, dx + dxo, row * cols + c, v);
#define NORM_BWD_FINISH_LOAD_1  \
    float rv[OCLML_LONG_ITEMS]; \
    CHUNK_LOAD_IF_DT((rflags & HAS_DR) != 0, DR_DT, rv, dr + dro + r * cols, 0.0f);
#define NORM_BWD_FINISH_STORE_1                      \
    if (rflags & HAS_DR) v += rv[j];                 \
    DT_STORE(DX_DT, dx + dxo, row * cols + c, v);    \
    if (rflags & WANT_DY)                            \
        DT_STORE(DYB_DT, dyb + dybo, row * cols + c, \
                 v * drop_mult(row * cols + c, p, scale, (uint2)(seed_lo, seed_hi), doff));
#define NORM_BWD_FINISH(NAME, RMS) NORM_BWD_FINISH_K(NAME, RMS, 0, NO_ARGS)
#if OCLML_WANT(oclml_res_layernorm_bwd_finish)
NORM_BWD_FINISH_K(oclml_res_layernorm_bwd_finish, 0, 1, RES_EXTRA_ARGS)
#endif
#if OCLML_WANT(oclml_res_rmsnorm_bwd_finish)
NORM_BWD_FINISH_K(oclml_res_rmsnorm_bwd_finish, 1, 1, RES_EXTRA_ARGS)
#endif
#if OCLML_WANT(oclml_layernorm_bwd_finish)
NORM_BWD_FINISH(oclml_layernorm_bwd_finish, 0)
#endif
#if OCLML_WANT(oclml_rmsnorm_bwd_finish)
NORM_BWD_FINISH(oclml_rmsnorm_bwd_finish, 1)
#endif

/* ---- parameter gradients: dgamma[c] = sum_r dy * xhat, dbeta[c] = sum_r dy ----
 * The partials' sum: part[split][c] holds (dgamma, dbeta) over a slice of the rows (the fused
 * kernel's work-groups, or the long rows' first pass's slices). */
#if OCLML_WANT(oclml_norm_param_finish)
__kernel void oclml_norm_param_finish(__global const float *part, uint splits, uint cols,
                                      __global DGT *dgamma, ulong dgo, __global DBT *dbeta,
                                      ulong dbo, uint flags) {
    const uint c = get_global_id(0);
    if (c >= cols) return;
    float dg = 0.0f, db = 0.0f;
    for (uint s = 0; s < splits; s++) {
        const float2 p = vload2((ulong)s * cols + c, part);
        dg += p.x;
        db += p.y;
    }
    if (flags & 1) DT_STORE(DG_DT, dgamma, dgo + c, dg);
    if (flags & 2) DT_STORE(DB_DT, dbeta, dbo + c, db);
}
#endif
