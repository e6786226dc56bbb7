/* Softmax and log-softmax along the last axis, forward and backward.
 * Numerically stable: the row maximum is subtracted before exp. -inf inputs are masked
 * positions (weight 0); a fully masked row gives zeros (log-softmax: -inf). NaN anywhere in a row
 * makes the whole row NaN (it reaches the row sum).
 * Variants: the register path per ROW_ITEMS x ROW_VEC (rows.h), the chunked path's part/finish
 * pairs; each kernel is compiled only when wanted. The tensors' dtypes (X_DT, Y_DT forward; Y_DT,
 * DY_DT, DX_DT backward; dtype.h's numbers, fp32 by default): the math is fp32, each output
 * rounded once. */
#include "rows.h"
#include "online_softmax.h"

#ifndef X_DT
#define X_DT 0
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
#define XT DT_ELEM(X_DT)
#define YT DT_ELEM(Y_DT)
#define DYT DT_ELEM(DY_DT)
#define DXT DT_ELEM(DX_DT)

/* The result of one element from its input v, the row max m, the sum s (and 1/s). */
inline float softmax_out(float v, float m, float inv_s) { return masked_exp(v, m) * inv_s; }
inline float log_softmax_out(float v, float m, float log_s) {
    return (v == -INFINITY) ? -INFINITY : (v - m) - log_s;
}

/* ---- register path: one row per segment, read once, written once ---- */
#define SOFTMAX_FWD(NAME, LOG)                                                                    \
    __kernel void NAME(__global const XT *x, ulong xoff, __global YT *y, ulong yoff, uint rows,   \
                       uint cols, uint G, __local float *red) {                                   \
        ROW_PROLOGUE(G, rows)                                                                     \
        __global const XT *xr = x + xoff + row * cols;                                            \
        __global YT *yr = y + yoff + row * cols;                                                  \
        float v[ROW_FLOATS];                                                                      \
        ROW_LOAD_DT(X_DT, v, xr, ROW_ITEMS, lane, G, cols, ok, -INFINITY)                         \
        float m = -INFINITY;                                                                      \
        ROW_FOLD_MAX(m, v[k])                                                                     \
        m = ROW_MAX(m);                                                                           \
        /* A CPU's work-item (ROW_SOLO) keeps the exponentials, the most of its work, in its    \
         * array; a GPU's lanes compute them twice rather than hold twice the registers. */ \
        const bool keep = ROW_SOLO && !LOG;                                                       \
        if (keep)                                                                                 \
            for (uint k = 0; k < ROW_FLOATS; k++) v[k] = masked_exp(v[k], m);                     \
        float s = 0.0f;                                                                           \
        ROW_ADD(s, keep ? v[k] : masked_exp(v[k], m))                                             \
        s = ROW_SUM(s);                                                                           \
        if (LOG) {                                                                                \
            const float log_s = log(s);                                                           \
            for (uint k = 0; k < ROW_FLOATS; k++) v[k] = log_softmax_out(v[k], m, log_s);         \
        } else {                                                                                  \
            const float inv_s = (s == 0.0f) ? 0.0f : 1.0f / s;                                    \
            for (uint k = 0; k < ROW_FLOATS; k++)                                                 \
                v[k] = keep ? v[k] * inv_s : softmax_out(v[k], m, inv_s);                         \
        }                                                                                         \
        ROW_STORE_DT(Y_DT, v, yr, ROW_ITEMS, lane, G, cols, ok)                                   \
    }

/* Backward. softmax: dx = y * (dy - sum(y * dy)); log-softmax: dx = dy - exp(y) * sum(dy). */
#define SOFTMAX_BWD(NAME, LOG)                                                                \
    __kernel void NAME(__global const YT *y, ulong yoff, __global const DYT *dy, ulong dyoff, \
                       __global DXT *dx, ulong dxoff, uint rows, uint cols, uint G,           \
                       __local float *red) {                                                  \
        ROW_PROLOGUE(G, rows)                                                                 \
        const ulong base = row * cols;                                                        \
        float v[ROW_FLOATS], g[ROW_FLOATS];                                                   \
        ROW_LOAD_DT(Y_DT, v, y + yoff + base, ROW_ITEMS, lane, G, cols, ok, 0.0f)             \
        ROW_LOAD_DT(DY_DT, g, dy + dyoff + base, ROW_ITEMS, lane, G, cols, ok, 0.0f)          \
        float s = 0.0f;                                                                       \
        ROW_ADD(s, LOG ? g[k] : v[k] * g[k])                                                  \
        s = ROW_SUM(s);                                                                       \
        for (uint k = 0; k < ROW_FLOATS; k++)                                                 \
            v[k] = LOG ? g[k] - exp(v[k]) * s : v[k] * (g[k] - s);                            \
        ROW_STORE_DT(DX_DT, v, dx + dxoff + base, ROW_ITEMS, lane, G, cols, ok)               \
    }

#if OCLML_WANT(oclml_softmax_fwd)
SOFTMAX_FWD(oclml_softmax_fwd, 0)
#endif
#if OCLML_WANT(oclml_log_softmax_fwd)
SOFTMAX_FWD(oclml_log_softmax_fwd, 1)
#endif
#if OCLML_WANT(oclml_softmax_bwd)
SOFTMAX_BWD(oclml_softmax_bwd, 0)
#endif
#if OCLML_WANT(oclml_log_softmax_bwd)
SOFTMAX_BWD(oclml_log_softmax_bwd, 1)
#endif

/* ---- chunked path for long rows ----
 * Grid: (chunks x L, rows). Pass 1 writes each chunk's (max, sum of exp) or backward sum to
 * part[row][chunk]; pass 2 merges the row's partials and writes the chunk's outputs. */

/* Merges the (m, s) pairs of a work-group into the group's (M, S). */
inline float2 group_merge(float m, float s, __local float *red, uint lid, uint L) {
    const float M = seg_max(m, red, lid, L);
    const float scaled = (m == -INFINITY) ? s : s * exp(m - M);
    return (float2)(M, seg_sum(scaled, red, lid, L));
}

#if OCLML_WANT(oclml_softmax_fwd_part)
__kernel void oclml_softmax_fwd_part(__global const XT *x, ulong xoff, __global float *part,
                                     uint rows, uint cols, uint nch, __local float *red) {
    float m = -INFINITY, s = 0.0f, xv[OCLML_LONG_ITEMS];
    CHUNK_LOAD_DT(X_DT, xv, x + xoff + get_global_id(1) * cols, 0.0f);
    CHUNK_LOOP(c) online_add(&m, &s, xv[j]);
    const float2 r = group_merge(m, s, red, lid, L);
    if (lid == 0) vstore2(r, row * nch + chunk, part);
}
#endif

/* The row's (M, S) from its chunk partials, merged by the whole work-group. */
inline float2 row_stats(__global const float *part, ulong row, uint nch, __local float *red,
                        uint lid, uint L) {
    float m = -INFINITY, s = 0.0f;
    for (uint c = lid; c < nch; c += L) {
        const float2 p = vload2(row * nch + c, part);
        online_merge(&m, &s, p.x, p.y);
    }
    return group_merge(m, s, red, lid, L);
}

#define SOFTMAX_FWD_FINISH(NAME, LOG)                                                        \
    __kernel void NAME(__global const XT *x, ulong xoff, __global YT *y, ulong yoff,         \
                       __global const float *part, uint rows, uint cols, uint nch,           \
                       __local float *red) {                                                 \
        const float2 st =                                                                    \
            row_stats(part, get_global_id(1), nch, red, get_local_id(0), get_local_size(0)); \
        const float inv_s = (st.y == 0.0f) ? 0.0f : 1.0f / st.y, log_s = log(st.y);          \
        float xv[OCLML_LONG_ITEMS];                                                          \
        CHUNK_LOAD_DT(X_DT, xv, x + xoff + get_global_id(1) * cols, 0.0f);                   \
        CHUNK_LOOP(c) {                                                                      \
            const float v = xv[j];                                                           \
            DT_STORE(Y_DT, y + yoff, row * cols + c,                                         \
                     LOG ? log_softmax_out(v, st.x, log_s) : softmax_out(v, st.x, inv_s));   \
        }                                                                                    \
    }
#if OCLML_WANT(oclml_softmax_fwd_finish)
SOFTMAX_FWD_FINISH(oclml_softmax_fwd_finish, 0)
#endif
#if OCLML_WANT(oclml_log_softmax_fwd_finish)
SOFTMAX_FWD_FINISH(oclml_log_softmax_fwd_finish, 1)
#endif

#define SOFTMAX_BWD_PART(NAME, LOG)                                                                \
    __kernel void NAME(__global const YT *y, ulong yoff, __global const DYT *dy, ulong dyoff,      \
                       __global float *part, uint rows, uint cols, uint nch, __local float *red) { \
        float s = 0.0f, yv[OCLML_LONG_ITEMS], gv[OCLML_LONG_ITEMS];                                \
        CHUNK_LOAD_DT(DY_DT, gv, dy + dyoff + get_global_id(1) * cols, 0.0f);                      \
        if (!LOG) {                                                                                \
            CHUNK_LOAD_DT(Y_DT, yv, y + yoff + get_global_id(1) * cols, 0.0f);                     \
        }                                                                                          \
        CHUNK_LOOP(c) s += LOG ? gv[j] : yv[j] * gv[j];                                            \
        s = seg_sum(s, red, lid, L);                                                               \
        if (lid == 0) part[row * nch + chunk] = s;                                                 \
    }
#if OCLML_WANT(oclml_softmax_bwd_part)
SOFTMAX_BWD_PART(oclml_softmax_bwd_part, 0)
#endif
#if OCLML_WANT(oclml_log_softmax_bwd_part)
SOFTMAX_BWD_PART(oclml_log_softmax_bwd_part, 1)
#endif

#define SOFTMAX_BWD_FINISH(NAME, LOG)                                                           \
    __kernel void NAME(__global const YT *y, ulong yoff, __global const DYT *dy, ulong dyoff,   \
                       __global DXT *dx, ulong dxoff, __global const float *part, uint rows,    \
                       uint cols, uint nch, __local float *red) {                               \
        float s = 0.0f;                                                                         \
        for (uint c = get_local_id(0); c < nch; c += get_local_size(0))                         \
            s += part[get_global_id(1) * nch + c];                                              \
        s = seg_sum(s, red, get_local_id(0), get_local_size(0));                                \
        float yv[OCLML_LONG_ITEMS], gv[OCLML_LONG_ITEMS];                                       \
        CHUNK_LOAD_DT(Y_DT, yv, y + yoff + get_global_id(1) * cols, 0.0f);                      \
        CHUNK_LOAD_DT(DY_DT, gv, dy + dyoff + get_global_id(1) * cols, 0.0f);                   \
        CHUNK_LOOP(c) {                                                                         \
            const ulong i = row * cols + c;                                                     \
            DT_STORE(DX_DT, dx + dxoff, i, LOG ? gv[j] - exp(yv[j]) * s : yv[j] * (gv[j] - s)); \
        }                                                                                       \
    }
#if OCLML_WANT(oclml_softmax_bwd_finish)
SOFTMAX_BWD_FINISH(oclml_softmax_bwd_finish, 0)
#endif
#if OCLML_WANT(oclml_log_softmax_bwd_finish)
SOFTMAX_BWD_FINISH(oclml_log_softmax_bwd_finish, 1)
#endif
