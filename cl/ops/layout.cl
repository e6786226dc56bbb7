/* Layout ops (lib/ops/layout.c): bias add along an axis, permutes, concat and split. Every
 * kernel moves each element once with coalesced reads and writes; offsets are 64-bit; 2-D
 * launches loop over their second dimension (devices cap it at 65535 groups).
 *
 * oclml_layout_bias: x, y as [rows x cols]; per_col: y = x + b[col] (bias along the last kept
 *   axis), else y = x + b[row % C] (bias along an axis with `cols` inner elements: NCHW's C).
 *   y may be x. LY_VEC 4: float4 along the rows (the host picks it only where cols and the x, y
 *   offsets are multiples of 4).
 * oclml_layout_rows: a permute that keeps x's innermost axis innermost: y's rows of `cols`
 *   elements, numbered over y's outer axes [d0 x d1 x d2], each copied from x at
 *   i0 xs0 + i1 xs1 + i2 xs2 (x's strides of those axes). LY_VEC as above.
 * oclml_layout_tile: a permute that moves x's innermost axis (j, nj long) away from the inside;
 *   i (ni long) is the x axis that becomes y's innermost, at x stride xs_i; j lands at y stride
 *   ys_j. A work-group moves one TI x TJ tile (powers of two, 2^li x 2^lj) through local memory:
 *   read along j (coalesced in x), written along i (coalesced in y). Up to two more axes are
 *   batches (group dimension 1: b = b0 nb1 + b1). Tiles are shaped to the extents, so that a
 *   short axis (NCHW <-> NHWC with 3 channels) still fills a tile.
 * oclml_layout_concat / oclml_layout_split: y (x for split) as [rows x C]; up to 8 parts k, each
 *   [rows x (s_{k+1} - s_k)], fill y's columns [s_k, s_{k+1}) (split: are filled from them).
 *   One launch per 8 parts. Elements of LY_ELEM (float; ushort: bf16 and fp16 moved as they
 *   are). */
#include "common.h"

#ifndef LY_VEC
#define LY_VEC 1
#endif
#ifndef LY_ELEM
#define LY_ELEM float
#endif

#if OCLML_WANT(oclml_layout_bias)
__kernel void oclml_layout_bias(__global const float *x, ulong xo, __global const float *b,
                                ulong bo, __global float *y, ulong yo, ulong rows, ulong cols,
                                ulong C, uint per_col) {
    const ulong n = cols / LY_VEC;
    for (ulong r = get_global_id(1); r < rows; r += get_global_size(1)) {
        const float rb = per_col ? 0.0f : b[bo + r % C];
        const ulong base = r * cols;
        for (ulong c = get_global_id(0); c < n; c += get_global_size(0)) {
#if LY_VEC == 4
            float4 v = *(__global const float4 *)(x + xo + base + 4 * c);
            v += per_col ? vload4(c, b + bo) : (float4)(rb);
            *(__global float4 *)(y + yo + base + 4 * c) = v;
#else
            y[yo + base + c] = x[xo + base + c] + (per_col ? b[bo + c] : rb);
#endif
        }
    }
}
#endif

#if OCLML_WANT(oclml_layout_rows)
__kernel void oclml_layout_rows(__global const float *x, ulong xo, __global float *y, ulong yo,
                                ulong rows, ulong cols, ulong d1, ulong d2, ulong xs0, ulong xs1,
                                ulong xs2) {
    const ulong n = cols / LY_VEC;
    for (ulong r = get_global_id(1); r < rows; r += get_global_size(1)) {
        const ulong i2 = r % d2, i01 = r / d2, i1 = i01 % d1, i0 = i01 / d1;
        const ulong src = xo + i0 * xs0 + i1 * xs1 + i2 * xs2, dst = yo + r * cols;
        for (ulong c = get_global_id(0); c < n; c += get_global_size(0)) {
#if LY_VEC == 4
            *(__global float4 *)(y + dst + 4 * c) = *(__global const float4 *)(x + src + 4 * c);
#else
            y[dst + c] = x[src + c];
#endif
        }
    }
}
#endif

#if OCLML_WANT(oclml_layout_tile)
__kernel void oclml_layout_tile(__global const float *x, ulong xo, __global float *y, ulong yo,
                                ulong ni, ulong nj, ulong xs_i, ulong ys_j, ulong nb, ulong nb1,
                                ulong xs_b0, ulong xs_b1, ulong ys_b0, ulong ys_b1, uint li,
                                uint lj, __local float *tile) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    const uint TI = 1u << li, TJ = 1u << lj, E = TI << lj;
    const ulong nti = (ni + TI - 1) >> li, ntj = (nj + TJ - 1) >> lj, ntiles = nti * ntj;
    for (ulong bb = get_group_id(1); bb < nb; bb += get_num_groups(1)) {
        const ulong b0 = bb / nb1, b1 = bb % nb1;
        const ulong xb = xo + b0 * xs_b0 + b1 * xs_b1, yb = yo + b0 * ys_b0 + b1 * ys_b1;
        for (ulong t = get_group_id(0); t < ntiles; t += get_num_groups(0)) {
            const ulong i0 = (t / ntj) << li, j0 = (t % ntj) << lj;
            for (uint e = lid; e < E; e += L) {
                const uint ii = e >> lj, jj = e & (TJ - 1);
                if (i0 + ii < ni && j0 + jj < nj)
                    tile[ii * (TJ + 1) + jj] = x[xb + (i0 + ii) * xs_i + j0 + jj];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (uint e = lid; e < E; e += L) {
                const uint jj = e >> li, ii = e & (TI - 1);
                if (i0 + ii < ni && j0 + jj < nj)
                    y[yb + (j0 + jj) * ys_j + i0 + ii] = tile[ii * (TJ + 1) + jj];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}
#endif

#if OCLML_WANT(oclml_layout_concat) || OCLML_WANT(oclml_layout_split)
/* The part that owns column c (s0 <= c < s8) and its pointer, offset and start. */
#define LY_PARTS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define LY_PICK(k)                                 \
    if (k < n && c >= s##k) {                      \
        p = p##k;                                  \
        po = o##k;                                 \
        ps = s##k;                                 \
        pw = (k + 1 < n ? s_next[k] : end) - s##k; \
    }
#define LY_MOVE(body)                                                          \
    const ulong s_next[8] = {s1, s2, s3, s4, s5, s6, s7, end};                 \
    const ulong width = end - s0;                                              \
    for (ulong r = get_global_id(1); r < rows; r += get_global_size(1))        \
        for (ulong q = get_global_id(0); q < width; q += get_global_size(0)) { \
            const ulong c = s0 + q;                                            \
            __global LY_ELEM *p = p0;                                          \
            ulong po = 0, ps = 0, pw = 1;                                      \
            LY_PARTS(LY_PICK)                                                  \
            const ulong pe = po + r * pw + (c - ps), ye = yo + r * C + c;      \
            body;                                                              \
        }
#define LY_ARGS                                                                             \
    ulong rows, ulong C, uint n, ulong end, __global LY_ELEM *p0, ulong o0, ulong s0,       \
        __global LY_ELEM *p1, ulong o1, ulong s1, __global LY_ELEM *p2, ulong o2, ulong s2, \
        __global LY_ELEM *p3, ulong o3, ulong s3, __global LY_ELEM *p4, ulong o4, ulong s4, \
        __global LY_ELEM *p5, ulong o5, ulong s5, __global LY_ELEM *p6, ulong o6, ulong s6, \
        __global LY_ELEM *p7, ulong o7, ulong s7
#endif

#if OCLML_WANT(oclml_layout_concat)
__kernel void oclml_layout_concat(__global LY_ELEM *y, ulong yo, LY_ARGS){LY_MOVE(y[ye] = p[pe])}
#endif

#if OCLML_WANT(oclml_layout_split)
__kernel void oclml_layout_split(__global const LY_ELEM *y, ulong yo, LY_ARGS) {
    LY_MOVE(p[pe] = y[ye])
}
#endif
