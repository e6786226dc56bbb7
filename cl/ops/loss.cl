/* Losses with PyTorch's semantics, forward and backward in one launch (lib/ops/loss.c).
 *
 * Cross-entropy over the last axis (rows x C logits): the register path (rows.h: ROW_ITEMS x
 * ROW_VEC floats per work-item, G work-items per row) reads a row once, reduces its max and sum of
 * exp, and writes the row's loss and dlogits = g (softmax - target) from the registers: one read
 * of the logits, one write. Rows longer than the registers hold take the chunked path: a part
 * pass leaves (max, sum of exp, sum t (max - x), sum t) per chunk, the finish pass merges a row's
 * partials and writes its chunk's dlogits (two reads, one write). Targets: class indices stored as
 * floats (OCLML_LOSSF_PROBS clear) or class probabilities (set), label smoothing eps mixes in the
 * uniform distribution: t' = (1 - eps) t + eps / C; optional class weights.
 *
 * KL divergence between categorical distributions given as logits a (p) and b (q), per row:
 * KL = sum_j P_j (log P_j - log Q_j); da = g P (log P - log Q - KL), db = g (Q - P). Positions
 * where a is -inf have P = 0 and add nothing (0 log 0 = 0). Same two paths.
 *
 * Pointwise losses (MSE, Huber, BCE with logits) over n elements in a grid-stride loop: the
 * element losses (reduction none) or one partial sum per work-group, and the gradient.
 *
 * Per-row (per-element) losses are reduced by oclml_loss_finish, one work-group summing in a
 * fixed order: results are deterministic. The gradient factor g = dloss (or 1), divided by the
 * mean's count. Flags and partial layouts: loss_abi.h.
 *
 * Cross-entropy's logits and dlogits have the dtypes X_DT and DX_DT (dtype.h's numbers, fp32 by
 * default): each logit is read as a float, the math is fp32, each dlogit rounded once to its
 * dtype. Targets, class weights, dloss, the losses and every partial stay fp32; the other losses
 * are fp32 only. */
#include "rows.h"
#include "online_softmax.h"
#include "loss_abi.h"

#ifndef XENT_PROBS
#define XENT_PROBS 0
#endif
#ifndef X_DT
#define X_DT 0
#endif
#ifndef DX_DT
#define DX_DT 0
#endif
#define XT DT_ELEM(X_DT)
#define DXT DT_ELEM(DX_DT)

/* Sums of two values over a segment of G work-items; red holds 2 x the work-group size. */
inline float2 seg_sum2(float2 v, __local float *red, uint lid, uint G) {
    const uint L = get_local_size(0);
    red[lid] = v.x;
    red[L + lid] = v.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = G >> 1; s > 0; s >>= 1) {
        if ((lid & (G - 1)) < s) {
            red[lid] += red[lid + s];
            red[L + lid] += red[L + lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const uint b = lid & ~(G - 1);
    const float2 r = (float2)(red[b], red[L + b]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline float2 seg_max2(float2 v, __local float *red, uint lid, uint G) {
    const uint L = get_local_size(0);
    red[lid] = v.x;
    red[L + lid] = v.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = G >> 1; s > 0; s >>= 1) {
        if ((lid & (G - 1)) < s) {
            red[lid] = fmax(red[lid], red[lid + s]);
            red[L + lid] = fmax(red[L + lid], red[L + lid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const uint b = lid & ~(G - 1);
    const float2 r = (float2)(red[b], red[L + b]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* The gradient factor of row (or element) i. */
inline float grad_factor(uint flags, __global const float *dloss, ulong dloff, ulong i,
                         __global const float *cnt, float n_div) {
    float g = (flags & OCLML_LOSSF_DLOSS)
                  ? dloss[dloff + ((flags & OCLML_LOSSF_DLOSS_EACH) ? i : 0)]
                  : 1.0f;
    if (flags & OCLML_LOSSF_MEAN) g = g / ((flags & OCLML_LOSSF_COUNT) ? cnt[0] : n_div);
    return g;
}

/* A class-index target: ignored (ignore_index), valid (an integer in [0, C)) or neither. */
inline bool target_valid(float tv, uint cols) {
    return tv >= 0.0f && tv < (float)cols && tv == floor(tv);
}

/* The arguments every cross-entropy kernel that writes the loss and dlogits takes first (the
 * register, hybrid and chunked-finish paths; the host passes them in this order). */
#define XENT_ARGS                                                                              \
    __global const XT *x, ulong xoff, __global const float *t, ulong toff, __global float *lr, \
        ulong lroff, __global DXT *dx, ulong dxoff, __global const float *dloss, ulong dloff,  \
        __global const float *cnt, __global const float *cw, ulong cwoff, uint flags,          \
        float ignore, float eps, float n_div

/* ======================== cross-entropy, register path ======================== */
/* Class weights (OCLML_LOSSF_WEIGHT): cw[c] multiplies class c's terms; with class indices the
 * row's loss is (1 - eps) w_t (lse - x_t) + eps / C sum_j w_j (lse - x_j). */
#if OCLML_WANT(oclml_xent_rows)
__kernel void oclml_xent_rows(XENT_ARGS, uint rows, uint cols, uint G, __local float *red) {
    ROW_PROLOGUE(G, rows)
    const ulong base = row * cols;
    const float ueps = eps / (float)cols;
    const bool weighted = (flags & OCLML_LOSSF_WEIGHT) != 0;
    float v[ROW_FLOATS];
    ROW_LOAD_DT(X_DT, v, x + xoff + base, ROW_ITEMS, lane, G, cols, ok, -INFINITY)
#if XENT_PROBS
    float w[ROW_FLOATS];
    ROW_LOAD(w, t + toff + base, ROW_ITEMS, lane, G, cols, ok, 0.0f)
    for (uint k = 0; k < ROW_FLOATS; k++) {
        const bool in_row = ROW_VALID(k, lane, G, cols);
        float tw = (1.0f - eps) * w[k] + ueps;
        if (weighted && in_row) tw *= cw[cwoff + ROW_COL(k, lane, G)];
        w[k] = in_row ? tw : 0.0f;
    }
    /* Uniform across the work-group: whether the sum of the target's weights is reduced. */
    const bool sum_t = true;
#else
    const float tv = ok ? t[toff + row] : 0.0f;
    const bool ignored = tv == ignore, valid = target_valid(tv, cols);
    const uint ti = valid ? (uint)tv : 0u;
    /* Read before the reductions' barriers: dx may be x itself. */
    const float xt = (ok && valid) ? DT_LOAD(X_DT, x + xoff, base + ti) : NAN;
    const float wt = (ok && valid && weighted) ? cw[cwoff + ti] : 1.0f;
    const bool smooth_w = weighted && eps > 0.0f, sum_t = smooth_w;
#endif
    float m = -INFINITY;
    for (uint k = 0; k < ROW_FLOATS; k++) m = fmax(m, v[k]);
    m = seg_max(m, red, lid, G);
    float s = 0.0f, a = 0.0f, tt = 0.0f;
    for (uint k = 0; k < ROW_FLOATS; k++) {
        s += masked_exp(v[k], m);
#if XENT_PROBS
        if (w[k] != 0.0f) {
            a += w[k] * (m - v[k]);
            tt += w[k];
        }
#else
        if (eps > 0.0f && ROW_VALID(k, lane, G, cols)) {
            const float wk = smooth_w ? cw[cwoff + ROW_COL(k, lane, G)] : 1.0f;
            a += wk * (m - v[k]);
            tt += wk;
        }
#endif
    }
    const float2 sa = seg_sum2((float2)(s, a), red, lid, G);
    s = sa.x;
    a = sa.y;
    tt = sum_t ? seg_sum(tt, red, lid, G) : (float)cols;
    const float log_s = log(s);
#if XENT_PROBS
    const float loss = a + tt * log_s;
#else
    float loss = (1.0f - eps) * wt * (m + log_s - xt);
    if (eps > 0.0f) loss += ueps * (a + tt * log_s);
    if (ignored) loss = 0.0f;
#endif
    if (!ok) return;
    if (lane == 0 && (flags & OCLML_LOSSF_WANT_LOSS)) lr[lroff + row] = loss;
    if (!(flags & OCLML_LOSSF_WANT_DX)) return;
    const float g = grad_factor(flags, dloss, dloff, row, cnt, n_div), inv_s = 1.0f / s;
#if !XENT_PROBS
    /* d/dx_k = p_k ((1 - eps) w_t + eps / C sum_j w_j) - (1 - eps) w_t [k = t] - eps / C w_k */
    const float coef = (1.0f - eps) * wt + ueps * tt, hit = (1.0f - eps) * wt;
#endif
    for (uint k = 0; k < ROW_FLOATS; k++) {
        const float p = masked_exp(v[k], m) * inv_s;
#if XENT_PROBS
        v[k] = g * (p * tt - w[k]);
#else
        const uint col = ROW_COL(k, lane, G);
        const float wk = (smooth_w && ROW_VALID(k, lane, G, cols)) ? cw[cwoff + col] : 1.0f;
        const float d = p * coef - (col == ti ? hit : 0.0f) - ueps * wk;
        v[k] = ignored ? 0.0f : (valid ? g * d : NAN);
#endif
    }
    ROW_STORE_DT(DX_DT, v, dx + dxoff + base, ROW_ITEMS, lane, G, cols, true)
}
#endif

/* ======================== cross-entropy, registers + local memory ========================
 * Class indices, rows a little past what the registers hold (GPT-2's 50257 classes): one row per
 * work-group of G = the local size, columns [0, G HYB_ITEMS) in registers (lane-strided), the
 * rest [R, cols) in local memory `spill`, each lane keeping its own entries (no sharing); still
 * one read of the logits and one write of dlogits. */
#ifndef HYB_ITEMS
#define HYB_ITEMS 40
#endif
#ifndef HYB_SPILL
#define HYB_SPILL 16 /* entries a work-item keeps in local memory at most (the host's bound) */
#endif
#if OCLML_WANT(oclml_xent_hybrid)
__kernel void oclml_xent_hybrid(XENT_ARGS, __local float *spill, uint rows, uint cols, uint G,
                                __local float *red) {
    const uint lid = get_local_id(0);
    const ulong row = get_group_id(0);
    const uint R = G * HYB_ITEMS, S = cols > R ? cols - R : 0u;
    const ulong base = row * cols;
    const float ueps = eps / (float)cols;
    const bool weighted = (flags & OCLML_LOSSF_WEIGHT) != 0, smooth_w = weighted && eps > 0.0f;
    __global const XT *xr = x + xoff + base;
    /* The local-memory part first, its loads all in flight together (a loop bounded at run time
     * would issue them one round trip at a time), then the registers' part. */
    float m = -INFINITY;
    {
        float sv[HYB_SPILL];
#pragma unroll
        for (uint i = 0; i < HYB_SPILL; i++) {
            const uint j = lid + i * G;
            sv[i] = j < S ? DT_LOAD(X_DT, xr, R + j) : -INFINITY;
        }
#pragma unroll
        for (uint i = 0; i < HYB_SPILL; i++) {
            const uint j = lid + i * G;
            if (j < S) spill[j] = sv[i];
            m = fmax(m, sv[i]);
        }
    }
    float v[HYB_ITEMS];
#pragma unroll
    for (uint i = 0; i < HYB_ITEMS; i++) {
        const uint c = i * G + lid;
        v[i] = c < cols ? DT_LOAD(X_DT, xr, c) : -INFINITY;
    }
    const float tv = t[toff + row];
    const bool ignored = tv == ignore, valid = target_valid(tv, cols);
    const uint ti = valid ? (uint)tv : 0u;
    const float xt = valid ? DT_LOAD(X_DT, xr, ti) : NAN; /* before the barriers: dx may be x */
    const float wt = (valid && weighted) ? cw[cwoff + ti] : 1.0f;
    for (uint i = 0; i < HYB_ITEMS; i++) m = fmax(m, v[i]);
    m = seg_max(m, red, lid, G);
    float s = 0.0f, a = 0.0f, tt = 0.0f;
    for (uint i = 0; i < HYB_ITEMS; i++) {
        const uint c = i * G + lid;
        s += masked_exp(v[i], m);
        if (eps > 0.0f && c < cols) {
            const float wk = smooth_w ? cw[cwoff + c] : 1.0f;
            a += wk * (m - v[i]);
            tt += wk;
        }
    }
    for (uint j = lid; j < S; j += G) {
        s += masked_exp(spill[j], m);
        if (eps > 0.0f) {
            const float wk = smooth_w ? cw[cwoff + R + j] : 1.0f;
            a += wk * (m - spill[j]);
            tt += wk;
        }
    }
    const float2 sa = seg_sum2((float2)(s, a), red, lid, G);
    s = sa.x;
    a = sa.y;
    tt = smooth_w ? seg_sum(tt, red, lid, G) : (float)cols;
    const float log_s = log(s);
    float loss = (1.0f - eps) * wt * (m + log_s - xt);
    if (eps > 0.0f) loss += ueps * (a + tt * log_s);
    if (ignored) loss = 0.0f;
    if (lid == 0 && (flags & OCLML_LOSSF_WANT_LOSS)) lr[lroff + row] = loss;
    if (!(flags & OCLML_LOSSF_WANT_DX)) return;
    const float g = grad_factor(flags, dloss, dloff, row, cnt, n_div), inv_s = 1.0f / s;
    const float coef = (1.0f - eps) * wt + ueps * tt, hit = (1.0f - eps) * wt;
    __global DXT *dr = dx + dxoff + base;
    for (uint i = 0; i < HYB_ITEMS; i++) {
        const uint c = i * G + lid;
        if (c >= cols) break;
        const float wk = smooth_w ? cw[cwoff + c] : 1.0f;
        const float d = masked_exp(v[i], m) * inv_s * coef - (c == ti ? hit : 0.0f) - ueps * wk;
        DT_STORE(DX_DT, dr, c, ignored ? 0.0f : (valid ? g * d : NAN));
    }
    for (uint j = lid; j < S; j += G) {
        const uint c = R + j;
        const float wk = smooth_w ? cw[cwoff + c] : 1.0f;
        const float d = masked_exp(spill[j], m) * inv_s * coef - (c == ti ? hit : 0.0f) - ueps * wk;
        DT_STORE(DX_DT, dr, c, ignored ? 0.0f : (valid ? g * d : NAN));
    }
}
#endif

/* ======================== cross-entropy, chunked path ======================== */

/* (to - from) w, the move of A = sum t (m - x) when m moves from `from` to `to`: 0 where no weight
 * was added (w = 0) or m stays (both -inf while everything so far is masked). */
inline float shift(float from, float to, float w) {
    return (w == 0.0f || to == from) ? 0.0f : (to - from) * w;
}

/* (m, s, A, T) += (pm, ps, pA, pT). */
inline void xent_merge(float4 *r, float4 p) {
    if (p.x > r->x) {
        r->y = r->y * masked_exp(r->x, p.x) + p.y;
        r->z = r->z + shift(r->x, p.x, r->w) + p.z;
        r->x = p.x;
    } else {
        r->y += (p.x == -INFINITY) ? p.y : p.y * exp(p.x - r->x);
        r->z += p.z + shift(p.x, r->x, p.w);
    }
    r->w += p.w;
}

/* The work-group's merge of its work-items' (m, s, A, T). */
inline float4 xent_group(float4 r, __local float *red, uint lid, uint L) {
    const float M = seg_max(r.x, red, lid, L);
    const float s = (r.x == -INFINITY) ? r.y : r.y * exp(r.x - M);
    const float A = r.z + shift(r.x, M, r.w);
    const float2 sa = seg_sum2((float2)(s, A), red, lid, L);
    return (float4)(M, sa.x, sa.y, seg_sum(r.w, red, lid, L));
}

#if OCLML_WANT(oclml_xent_part)
/* part[(row * nch + chunk) * 4 ..] = the chunk's (max, sum of exp, sum w (max - x), sum w) with
 * w = t' (times the class weight) for probabilities, the class weight (or 1) for indices;
 * part[rows * nch * 4 + row] = x[target] (class indices: the finish pass may overwrite x). */
__kernel void oclml_xent_part(__global const XT *x, ulong xoff, __global const float *t, ulong toff,
                              __global float *part, __global const float *cw, ulong cwoff,
                              uint flags, float ignore, float eps, uint rows, uint cols, uint nch,
                              __local float *red) {
    const bool probs = (flags & OCLML_LOSSF_PROBS) != 0,
               weighted = (flags & OCLML_LOSSF_WEIGHT) != 0;
    const float ueps = eps / (float)cols;
    float xv[OCLML_LONG_ITEMS];
    CHUNK_LOAD_DT(X_DT, xv, x + xoff + get_global_id(1) * cols, -INFINITY);
    /* The work-item's max first, then its sums against it: straight-line passes over the
     * registers. Merged element by element (xent_merge), each new max was a branch, on which
     * the work-items of a warp diverged. fmax skips NaN here; exp(NaN - m) carries it into s. */
    float m = -INFINITY;
#pragma unroll
    for (uint j = 0; j < OCLML_LONG_ITEMS; j++) m = fmax(m, xv[j]);
    float4 r = (float4)(m, 0.0f, 0.0f, 0.0f);
    CHUNK_LOOP(c) {
        const float v = xv[j];
        float w = weighted ? cw[cwoff + c] : 1.0f;
        if (probs) w *= (1.0f - eps) * t[toff + row * cols + c] + ueps;
        r.y += masked_exp(v, m);
        r.z += shift(v, m, w);
        r.w += w;
    }
    r = xent_group(r, red, lid, L);
    if (lid == 0) vstore4(r, row * nch + chunk, part);
    if (!probs && chunk == 0 && lid == 0) {
        const float tv = t[toff + row];
        part[(ulong)rows * nch * 4 + row] =
            target_valid(tv, cols) ? DT_LOAD(X_DT, x + xoff, row * cols + (uint)tv) : NAN;
    }
}
#endif

#if OCLML_WANT(oclml_xent_finish)
/* Each chunk's work-group merges all of the row's partials itself: where no dlogits are wanted
 * the host launches only chunk 0's, which writes the loss (lib/ops/loss.c, launch_long_finish). */
__kernel void oclml_xent_finish(XENT_ARGS, __global const float *part, uint rows, uint cols,
                                uint nch, __local float *red) {
    const bool probs = (flags & OCLML_LOSSF_PROBS) != 0,
               weighted = (flags & OCLML_LOSSF_WEIGHT) != 0;
    const float ueps = eps / (float)cols;
    const ulong r0 = get_global_id(1);
    /* The chunk's logits are loaded first, so that their round trip overlaps the merge of the
     * row's partials and its reductions (they are not used before them). */
    const bool want_dx = (flags & OCLML_LOSSF_WANT_DX) != 0;
    float xv[OCLML_LONG_ITEMS];
    CHUNK_LOAD_IF_DT(want_dx, X_DT, xv, x + xoff + r0 * cols, 0.0f);
    float4 r = (float4)(-INFINITY, 0.0f, 0.0f, 0.0f);
    for (uint c = get_local_id(0); c < nch; c += get_local_size(0))
        xent_merge(&r, vload4(r0 * nch + c, part));
    r = xent_group(r, red, get_local_id(0), get_local_size(0));
    const float m = r.x, s = r.y, log_s = log(s);
    float tv = 0.0f, loss, wt = 1.0f;
    bool ignored = false, valid = true;
    if (probs) {
        loss = r.z + r.w * log_s;
    } else {
        tv = t[toff + r0];
        ignored = tv == ignore;
        valid = target_valid(tv, cols);
        if (valid && weighted) wt = cw[cwoff + (uint)tv];
        const float xt = part[(ulong)rows * nch * 4 + r0];
        loss = (1.0f - eps) * wt * (m + log_s - xt);
        if (eps > 0.0f) loss += ueps * (r.z + r.w * log_s);
        if (ignored) loss = 0.0f;
    }
    if (get_group_id(0) == 0 && get_local_id(0) == 0 && (flags & OCLML_LOSSF_WANT_LOSS))
        lr[lroff + r0] = loss;
    if (!want_dx) return;
    const float g = grad_factor(flags, dloss, dloff, r0, cnt, n_div), inv_s = 1.0f / s;
    const uint ti = valid ? (uint)tv : 0u;
    const float coef = (1.0f - eps) * wt + ueps * r.w, hit = (1.0f - eps) * wt;
    CHUNK_LOOP(c) {
        const ulong i = row * cols + c;
        const float p = masked_exp(xv[j], m) * inv_s, wc = weighted ? cw[cwoff + c] : 1.0f;
        float d;
        if (probs)
            d = g * (p * r.w - wc * ((1.0f - eps) * t[toff + i] + ueps));
        else
            d = ignored ? 0.0f
                        : (valid ? g * (p * coef - (c == ti ? hit : 0.0f) - ueps * wc) : NAN);
        DT_STORE(DX_DT, dx + dxoff, i, d);
    }
}
#endif

/* ======================== KL divergence between logits ======================== */
inline float kl_term(float a, float b, float ma) {
    return (a == -INFINITY) ? 0.0f : exp(a - ma) * (a - b);
}

/* The arguments the KL kernels that write the loss and both gradients take first. */
#define KL_ARGS                                                                               \
    __global const float *pa, ulong aoff, __global const float *pb, ulong boff,               \
        __global float *lr, ulong lroff, __global float *da, ulong daoff, __global float *db, \
        ulong dboff, __global const float *dloss, ulong dloff, uint flags, float n_div
#if OCLML_WANT(oclml_kl_rows)
__kernel void oclml_kl_rows(KL_ARGS, uint rows, uint cols, uint G, __local float *red) {
    ROW_PROLOGUE(G, rows)
    const ulong base = row * cols;
    float va[ROW_FLOATS], vb[ROW_FLOATS];
    ROW_LOAD(va, pa + aoff + base, ROW_ITEMS, lane, G, cols, ok, -INFINITY)
    ROW_LOAD(vb, pb + boff + base, ROW_ITEMS, lane, G, cols, ok, -INFINITY)
    float2 m = (float2)(-INFINITY, -INFINITY);
    for (uint k = 0; k < ROW_FLOATS; k++) m = (float2)(fmax(m.x, va[k]), fmax(m.y, vb[k]));
    m = seg_max2(m, red, lid, G);
    float2 s = (float2)(0.0f, 0.0f);
    float w = 0.0f;
    for (uint k = 0; k < ROW_FLOATS; k++) {
        s += (float2)(masked_exp(va[k], m.x), masked_exp(vb[k], m.y));
        w += kl_term(va[k], vb[k], m.x);
    }
    s = seg_sum2(s, red, lid, G);
    w = seg_sum(w, red, lid, G);
    const float dl = (m.x - m.y) + (log(s.x) - log(s.y)); /* lse(a) - lse(b) */
    const float kl = w / s.x - dl;
    if (!ok) return;
    if (lane == 0 && (flags & OCLML_LOSSF_WANT_LOSS)) lr[lroff + row] = kl;
    if (!(flags & (OCLML_LOSSF_WANT_DX | OCLML_LOSSF_WANT_DQ))) return;
    const float g = grad_factor(flags, dloss, dloff, row, NULL, n_div);
    const float ia = 1.0f / s.x, ib = 1.0f / s.y;
    for (uint k = 0; k < ROW_FLOATS; k++) {
        const float p = masked_exp(va[k], m.x) * ia, q = masked_exp(vb[k], m.y) * ib;
        const float gp = (p == 0.0f) ? 0.0f : g * p * ((va[k] - vb[k]) - dl - kl);
        vb[k] = g * (q - p);
        va[k] = gp;
    }
    if (flags & OCLML_LOSSF_WANT_DX)
        ROW_STORE(va, da + daoff + base, ROW_ITEMS, lane, G, cols, true)
    if (flags & OCLML_LOSSF_WANT_DQ)
        ROW_STORE(vb, db + dboff + base, ROW_ITEMS, lane, G, cols, true)
}
#endif

/* A KL partial: (max a, sum exp(a - max a), max b, sum exp(b - max b),
 * sum exp(a - max a)(a - b)). */
typedef struct kl_acc {
    float ma, sa, mb, sb, w;
} kl_acc;

inline void kl_merge(kl_acc *r, kl_acc p) {
    if (p.ma > r->ma) {
        const float f = masked_exp(r->ma, p.ma);
        r->sa = r->sa * f + p.sa;
        r->w = r->w * f + p.w;
        r->ma = p.ma;
    } else {
        const float f = masked_exp(p.ma, r->ma);
        r->sa += p.sa * f;
        r->w += p.w * f;
    }
    online_merge(&r->mb, &r->sb, p.mb, p.sb);
}

inline kl_acc kl_group(kl_acc r, __local float *red, uint lid, uint L) {
    const float2 M = seg_max2((float2)(r.ma, r.mb), red, lid, L);
    const float fa = masked_exp(r.ma, M.x), fb = masked_exp(r.mb, M.y);
    const float2 sw = seg_sum2((float2)(r.sa * fa, r.w * fa), red, lid, L);
    const float sb = seg_sum(r.sb * fb, red, lid, L);
    kl_acc o = {M.x, sw.x, M.y, sb, sw.y};
    return o;
}

#if OCLML_WANT(oclml_kl_part)
__kernel void oclml_kl_part(__global const float *pa, ulong aoff, __global const float *pb,
                            ulong boff, __global float *part, uint rows, uint cols, uint nch,
                            __local float *red) {
    float av[OCLML_LONG_ITEMS], bv[OCLML_LONG_ITEMS]; /* loads issued together (CHUNK_LOAD) */
    CHUNK_LOAD(av, pa + aoff + get_global_id(1) * cols, -INFINITY);
    CHUNK_LOAD(bv, pb + boff + get_global_id(1) * cols, -INFINITY);
    /* The work-item's maxima first, then its sums against them, as the register path does (and
     * cross-entropy's part pass: merged element by element, each new max was a branch). */
    float ma = -INFINITY, mb = -INFINITY;
#pragma unroll
    for (uint j = 0; j < OCLML_LONG_ITEMS; j++) {
        ma = fmax(ma, av[j]);
        mb = fmax(mb, bv[j]);
    }
    kl_acc r = {ma, 0.0f, mb, 0.0f, 0.0f};
    CHUNK_LOOP(c) {
        const float a = av[j], b = bv[j];
        r.sa += masked_exp(a, ma);
        r.w += kl_term(a, b, ma);
        r.sb += masked_exp(b, mb);
    }
    r = kl_group(r, red, lid, L);
    if (lid == 0) {
        __global float *o = part + (row * nch + chunk) * OCLML_KL_PART;
        o[0] = r.ma;
        o[1] = r.sa;
        o[2] = r.mb;
        o[3] = r.sb;
        o[4] = r.w;
    }
}
#endif

#if OCLML_WANT(oclml_kl_finish)
/* As oclml_xent_finish: where no gradient is wanted only chunk 0's work-group runs. */
__kernel void oclml_kl_finish(KL_ARGS, __global const float *part, uint rows, uint cols, uint nch,
                              __local float *red) {
    const ulong r0 = get_global_id(1);
    /* The chunk's logits are loaded first (as in oclml_xent_finish): their round trip overlaps
     * the merge of the row's partials, and no load waits for the one before. */
    const bool want_grad = (flags & (OCLML_LOSSF_WANT_DX | OCLML_LOSSF_WANT_DQ)) != 0;
    float av[OCLML_LONG_ITEMS], bv[OCLML_LONG_ITEMS];
    CHUNK_LOAD_IF(want_grad, av, pa + aoff + r0 * cols, 0.0f);
    CHUNK_LOAD_IF(want_grad, bv, pb + boff + r0 * cols, 0.0f);
    kl_acc r = {-INFINITY, 0.0f, -INFINITY, 0.0f, 0.0f};
    for (uint c = get_local_id(0); c < nch; c += get_local_size(0)) {
        __global const float *o = part + (r0 * nch + c) * OCLML_KL_PART;
        kl_acc p = {o[0], o[1], o[2], o[3], o[4]};
        kl_merge(&r, p);
    }
    r = kl_group(r, red, get_local_id(0), get_local_size(0));
    const float dl = (r.ma - r.mb) + (log(r.sa) - log(r.sb));
    const float kl = r.w / r.sa - dl;
    if (get_group_id(0) == 0 && get_local_id(0) == 0 && (flags & OCLML_LOSSF_WANT_LOSS))
        lr[lroff + r0] = kl;
    if (!want_grad) return;
    const float g = grad_factor(flags, dloss, dloff, r0, NULL, n_div);
    const float ia = 1.0f / r.sa, ib = 1.0f / r.sb;
    CHUNK_LOOP(c) {
        const ulong i = row * cols + c;
        const float a = av[j], b = bv[j];
        const float p = masked_exp(a, r.ma) * ia, q = masked_exp(b, r.mb) * ib;
        if (flags & OCLML_LOSSF_WANT_DX)
            da[daoff + i] = (p == 0.0f) ? 0.0f : g * p * ((a - b) - dl - kl);
        if (flags & OCLML_LOSSF_WANT_DQ) db[dboff + i] = g * (q - p);
    }
}
#endif

/* ======================== pointwise losses ======================== */
#if OCLML_WANT(oclml_loss_pointwise)
/* Element i's loss and derivative d(loss)/dx. */
inline float2 pointwise(uint kind, float x, float t, float pw, float delta) {
    if (kind == OCLML_LOSSK_MSE) {
        const float d = x - t;
        return (float2)(d * d, 2.0f * d);
    }
    if (kind == OCLML_LOSSK_HUBER) {
        const float d = x - t, ad = fabs(d);
        if (ad <= delta) return (float2)(0.5f * d * d, d);
        /* NaN falls through to d (NaN). */
        return (float2)(delta * (ad - 0.5f * delta), d > 0.0f ? delta : (d < 0.0f ? -delta : d));
    }
    /* BCE with logits: (1 - t) x + lw softplus(-x), lw = 1 + (pw - 1) t (PyTorch's form). */
    const float lw = 1.0f + (pw - 1.0f) * t;
    const float sp = log1p(exp(-fabs(x))) + fmax(-x, 0.0f);
    return (float2)((1.0f - t) * x + lw * sp, (1.0f - t) - lw * oclml_sigmoid(-x));
}

/* Grid-stride over n elements; reduction none writes lr[i]; OCLML_LOSSF_REDUCE: each work-group
 * leaves its partial sum in part[group]. */
__kernel void oclml_loss_pointwise(uint kind, __global const float *x, ulong xoff,
                                   __global const float *t, ulong toff, __global const float *pw,
                                   ulong pwoff, uint pwlen, __global float *lr, ulong lroff,
                                   __global float *dx, ulong dxoff, __global const float *dloss,
                                   ulong dloff, uint flags, float delta, float n_div,
                                   __global float *part, ulong n, __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    float acc = 0.0f;
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float w = (flags & OCLML_LOSSF_POS_WEIGHT) ? pw[pwoff + i % pwlen] : 1.0f;
        const float2 r = pointwise(kind, x[xoff + i], t[toff + i], w, delta);
        if (flags & OCLML_LOSSF_REDUCE)
            acc += r.x;
        else if (flags & OCLML_LOSSF_WANT_LOSS)
            lr[lroff + i] = r.x;
        if (flags & OCLML_LOSSF_WANT_DX)
            dx[dxoff + i] = grad_factor(flags, dloss, dloff, i, NULL, n_div) * r.y;
    }
    if (!(flags & OCLML_LOSSF_REDUCE)) return;
    acc = seg_sum(acc, red, lid, L);
    if (lid == 0) part[get_group_id(0)] = acc;
}
#endif

/* ======================== reductions of the losses ======================== */
#if OCLML_WANT(oclml_loss_finish)
/* One work-group: out[0] = the sum of part[0 .. n) in a fixed order, divided for the mean by
 * count[0] (OCLML_LOSSF_COUNT) or n_div. */
__kernel void oclml_loss_finish(__global const float *part, ulong n, __global float *out,
                                ulong ooff, __global const float *cnt, uint flags, float n_div,
                                __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    float acc = 0.0f;
    for (ulong i = lid; i < n; i += L) acc += part[i];
    acc = seg_sum(acc, red, lid, L);
    if (lid == 0)
        out[ooff] =
            (flags & OCLML_LOSSF_MEAN) ? acc / ((flags & OCLML_LOSSF_COUNT) ? cnt[0] : n_div) : acc;
}
#endif

#if OCLML_WANT(oclml_xent_count)
/* One work-group: cnt[0] = the mean's divisor, the rows whose class-index target is not
 * ignore_index, or with class weights the sum of their targets' weights (an invalid index adds
 * nothing: its row is NaN anyway). Summed in a fixed order. */
__kernel void oclml_xent_count(__global const float *t, ulong toff, ulong rows, float ignore,
                               __global const float *cw, ulong cwoff, uint flags, uint cols,
                               __global float *cnt, __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    const bool weighted = (flags & OCLML_LOSSF_WEIGHT) != 0;
    float c = 0.0f;
    for (ulong i = lid; i < rows; i += L) {
        const float tv = t[toff + i];
        if (tv != ignore)
            c += !weighted ? 1.0f : (target_valid(tv, cols) ? cw[cwoff + (uint)tv] : 0.0f);
    }
    c = seg_sum(c, red, lid, L);
    if (lid == 0) cnt[0] = c;
}
#endif
