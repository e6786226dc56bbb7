/* Axis reductions (lib/ops/axis.c): sum, max and argmax over a set of axes, built from two
 * kernels that the host chains. A mean is a sum scaled by 1/count in the last pass.
 *
 * oclml_axis_rows: x [rows x cols] -> y [rows]: one row per segment of G work-items (G a power
 *   of two, G <= the 1-D work-group size), for reductions over the innermost axes.
 * oclml_axis_cols: x [B x R x M] -> y [B x S x M]: the reduction over R of each of B batches of
 *   M columns, for reductions over outer axes (column sums: bias gradients). The work-group is
 *   TX x TY work-items (TY a power of two): TX work-items side by side along the columns (AX_VEC
 *   consecutive columns each, so a row of the block is one coalesced read), TY rows at a time.
 *   Group (g0, s, b) folds columns [g0 TX VEC, +TX VEC) of batch b over rows [s chunk, +chunk);
 *   its TY partial folds meet in local memory in a fixed tree order. With S chunks > 1 the host
 *   runs the kernel again over the partials [B x S x M] (pairs = 1 for argmax: the indices ride
 *   in a second plane xi), with S = 1. Every element is read once; no atomics: results depend
 *   only on the shape and the plan (deterministic).
 *
 * Variant defines: AX_OP 0 sum (and mean), 1 max, 3 argmax; AX_VEC 1 or 4 (cols kernel: the host
 * picks 4 only where M and every offset are multiples of 4, so the float4 casts are aligned).
 * NaN: sums propagate it through the arithmetic; max and argmax treat NaN as the largest value
 * (argmax: the first NaN), ties keep the lowest index, as lib/ops/reduce.c and PyTorch.
 * final: write the result (sum * scale, max, or the index as a float) to y; else write raw
 * values to y and index bits to yi (partials). Offsets are 64-bit throughout. */
#include "common.h"

#ifndef AX_OP
#define AX_OP 0
#endif
#ifndef AX_VEC
#define AX_VEC 1
#endif
#define AX_NONE 0xFFFFFFFFu

#if AX_OP == 0
#define AX_INIT 0.0f
/* acc (value, index) <- acc folded with (v, i); b's index is later than a's when in_order. */
#define AX_FOLD(a, ai, v, i) ((a) += (v))
#define AX_COMBINE(a, ai, v, i) ((a) += (v))
#else
#define AX_INIT (-INFINITY)
/* NaN is largest; equal values keep the lower index. */
inline bool ax_beats(float v, uint i, float w, uint j) {
    if (isnan(v) != isnan(w)) return isnan(v);
    if (isnan(v)) return i < j;
    return v > w || (v == w && i < j);
}
#define AX_FOLD(a, ai, v, i)                                    \
    do {                                                        \
        if ((ai) == AX_NONE || ax_beats((v), (i), (a), (ai))) { \
            (a) = (v);                                          \
            (ai) = (i);                                         \
        }                                                       \
    } while (0)
#define AX_COMBINE(a, ai, v, i)                                                     \
    do {                                                                            \
        if ((i) != AX_NONE && ((ai) == AX_NONE || ax_beats((v), (i), (a), (ai)))) { \
            (a) = (v);                                                              \
            (ai) = (i);                                                             \
        }                                                                           \
    } while (0)
#endif

#if AX_OP == 3
#define AX_RESULT(a, ai, scale) ((float)(ai))
#elif AX_OP == 1
#define AX_RESULT(a, ai, scale) (a)
#else
#define AX_RESULT(a, ai, scale) ((a) * (scale))
#endif

#if OCLML_WANT(oclml_axis_rows)
__kernel void oclml_axis_rows(__global const float *x, ulong xo, ulong rows, ulong cols,
                              __global float *y, ulong yo, float scale, uint G,
                              __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0), lane = lid & (G - 1);
    __local uint *redi = (__local uint *)(red + L);
    const ulong row = (ulong)get_group_id(0) * (L / G) + lid / G;
    const bool ok = row < rows;
    __global const float *xr = x + xo + (ok ? row : 0) * cols;
    float a = AX_INIT;
    uint ai = AX_NONE;
    for (ulong c = lane; ok && c < cols; c += G) AX_FOLD(a, ai, xr[c], (uint)c);
    red[lid] = a;
    redi[lid] = ai;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = G >> 1; s > 0; s >>= 1) {
        if (lane < s) {
            float v = red[lid + s];
            uint vi = redi[lid + s];
            AX_COMBINE(a, ai, v, vi);
            red[lid] = a;
            redi[lid] = ai;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (ok && lane == 0) y[yo + row] = AX_RESULT(a, ai, scale);
}
#endif

#if OCLML_WANT(oclml_axis_cols)
__kernel void oclml_axis_cols(__global const float *x, ulong xo, __global const float *xi,
                              ulong xio, uint pairs, ulong B, ulong R, ulong M, ulong chunk,
                              __global float *y, ulong yo, __global float *yi, ulong yio,
                              uint final, float scale, __local float *red) {
    const uint tx = get_local_id(0), ty = get_local_id(1);
    const uint TX = get_local_size(0), TY = get_local_size(1);
    const uint slot = (ty * TX + tx) * AX_VEC, nslots = TX * TY * AX_VEC;
    __local uint *redi = (__local uint *)(red + nslots);
    const ulong m0 = ((ulong)get_group_id(0) * TX + tx) * AX_VEC;
    const ulong s = get_group_id(1), S = get_num_groups(1);
    const ulong r_begin = s * chunk, r_end = min(R, r_begin + chunk);
    const bool live = m0 < M;
    for (ulong b = get_group_id(2); b < B; b += get_num_groups(2)) {
        float a[AX_VEC];
        uint ai[AX_VEC];
        for (uint k = 0; k < AX_VEC; k++) {
            a[k] = AX_INIT;
            ai[k] = AX_NONE;
        }
        for (ulong r = r_begin + ty; live && r < r_end; r += TY) {
            const ulong off = (b * R + r) * M + m0;
#if AX_VEC == 4
            const float4 q = *(__global const float4 *)(x + xo + off);
            const float v[4] = {q.x, q.y, q.z, q.w};
#else
            const float v[1] = {x[xo + off]};
#endif
            for (uint k = 0; k < AX_VEC; k++) {
                const uint idx = pairs ? as_uint(xi[xio + off + k]) : (uint)r;
                AX_FOLD(a[k], ai[k], v[k], idx);
            }
        }
        for (uint k = 0; k < AX_VEC; k++) {
            red[slot + k] = a[k];
            redi[slot + k] = ai[k];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint h = TY >> 1; h > 0; h >>= 1) {
            if (ty < h)
                for (uint k = 0; k < AX_VEC; k++) {
                    float v = red[slot + h * TX * AX_VEC + k];
                    uint vi = redi[slot + h * TX * AX_VEC + k];
                    AX_COMBINE(a[k], ai[k], v, vi);
                    red[slot + k] = a[k];
                    redi[slot + k] = ai[k];
                }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (ty == 0 && live) {
            const ulong out = (b * S + s) * M + m0;
            for (uint k = 0; k < AX_VEC; k++) {
                if (final) {
                    y[yo + out + k] = AX_RESULT(a[k], ai[k], scale);
                } else {
                    y[yo + out + k] = a[k];
                    if (yi) yi[yio + out + k] = as_float(ai[k]);
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
#endif
