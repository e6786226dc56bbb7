/* Convolution's data movement around the GEMM kernels (lib/ops/conv.c): unfolding input windows
 * into columns (im2col), folding column gradients back into an input gradient by gathering
 * (col2im: each input element sums the column entries it fed, no atomics), the output-gradient
 * rows of a chunk of images side by side for the weight gradient. (The bias gradient is an axis
 * reduction: lib/ops/axis.c.)
 *
 * Geometry (all kernels): images [*, C, H, W] of which a group's Cg channels from c0 are used,
 * kernel R x S, output P x Q, stride (sh, sw), padding before (ph, pw), dilation (dh, dw). Column
 * row crs = (c * R + r) * S + s (c within the group), column pq = p * Q + q. Work-items stride over
 * a 1-D range by images (OCLML_FOR_UNITS_BEGIN: 32-bit index math where the range allows). */
#include "common.h"

#define GEOM_ARGS                                                                               \
    uint C, uint H, uint W, uint R, uint S, uint P, uint Q, uint sh, uint sw, uint ph, uint pw, \
        uint dh, uint dw

#if OCLML_WANT(oclml_conv_im2col)
/* col[crs * s_crs + i * s_img + pq] = x[n0 + i][c0 + c][h][w] (0 in the padding), for images i <
 * nb and crs < Cg R S: s_img = Cg R S P Q, s_crs = P Q gives each image its own [CgRS x PQ]
 * matrix (the forward's batched product); s_img = P Q, s_crs = nb P Q puts the images side by
 * side in one [CgRS x nb PQ] matrix (the weight gradient's single product). */
OCLML_INLINE void im2col_one(__global const float *x, uint n0, uint c0, uint i, uint within,
                             GEOM_ARGS, __global float *col, ulong s_crs, ulong s_img) {
    const uint RS = R * S, PQ = P * Q;
    const uint pq = within % PQ, crs = within / PQ;
    const uint c = crs / RS, r = crs / S % R, s = crs % S, p = pq / Q, q = pq % Q;
    const int h = (int)(p * sh + r * dh) - (int)ph, w = (int)(q * sw + s * dw) - (int)pw;
    float v = 0.0f;
    if (h >= 0 && h < (int)H && w >= 0 && w < (int)W)
        v = x[(((ulong)(n0 + i) * C + c0 + c) * H + (uint)h) * W + (uint)w];
    col[crs * s_crs + i * s_img + pq] = v;
}

__kernel void oclml_conv_im2col(__global const float *x, ulong x_off, uint n0, uint nb, uint c0,
                                uint Cg, GEOM_ARGS, __global float *col, ulong s_crs, ulong s_img) {
    const uint per = Cg * R * S * P * Q; /* one image's columns (the host keeps it 32-bit) */
    x += x_off;
    OCLML_FOR_UNITS_BEGIN((ulong)nb * per, per)
    im2col_one(x, n0, c0, (uint)unit, within, C, H, W, R, S, P, Q, sh, sw, ph, pw, dh, dw, col,
               s_crs, s_img);
    OCLML_FOR_UNITS_END
}
#endif

#if OCLML_WANT(oclml_conv_col2im)
/* dx[n0 + i][c0 + c][h][w] = the sum of the column entries (image i, layout [CgRS x PQ] per
 * image) that element fed: for each (r, s), the output (p, q) whose window put it there, if any;
 * plus bias[c0 + c] with has_bias (a transposed convolution's output). */
OCLML_INLINE void col2im_one(__global const float *col, uint n0, uint c0, uint Cg, uint i,
                             uint within, GEOM_ARGS, __global float *dx, __global const float *bias,
                             uint has_bias) {
    const uint RS = R * S, PQ = P * Q, HW = H * W;
    const uint hw = within % HW, c = within / HW, h = hw / W, w = hw % W;
    __global const float *ci = col + ((ulong)i * Cg + c) * RS * PQ;
    float sum = 0.0f;
    for (uint r = 0; r < R; r++) {
        const int hp = (int)(h + ph) - (int)(r * dh);
        if (hp < 0 || hp % (int)sh) continue;
        const uint p = (uint)hp / sh;
        if (p >= P) continue;
        for (uint s = 0; s < S; s++) {
            const int wq = (int)(w + pw) - (int)(s * dw);
            if (wq < 0 || wq % (int)sw) continue;
            const uint q = (uint)wq / sw;
            if (q >= Q) continue;
            sum += ci[(r * S + s) * PQ + p * Q + q];
        }
    }
    if (has_bias) sum += bias[c0 + c];
    dx[(((ulong)(n0 + i) * C + c0 + c) * H + h) * W + w] = sum;
}

__kernel void oclml_conv_col2im(__global const float *col, uint n0, uint nb, uint c0, uint Cg,
                                GEOM_ARGS, __global float *dx, ulong dx_off,
                                __global const float *bias, ulong bias_off, uint has_bias) {
    const uint per = Cg * H * W; /* one image's channels of the group */
    dx += dx_off;
    if (has_bias) bias += bias_off;
    OCLML_FOR_UNITS_BEGIN((ulong)nb * per, per)
    col2im_one(col, n0, c0, Cg, (uint)unit, within, C, H, W, R, S, P, Q, sh, sw, ph, pw, dh, dw, dx,
               bias, has_bias);
    OCLML_FOR_UNITS_END
}
#endif

#if OCLML_WANT(oclml_conv_rows_side_by_side)
/* out[k][i * PQ + pq] = y[n0 + i][k0 + k][pq] for k < Kg: a group's output-gradient rows of nb
 * images side by side, as one [Kg x nb PQ] matrix (K channels a image). */
__kernel void oclml_conv_rows_side_by_side(__global const float *y, ulong y_off, uint n0, uint nb,
                                           uint K, uint k0, uint Kg, uint PQ, __global float *out) {
    const uint per = Kg * PQ; /* one image's rows of the group */
    y += y_off;
    OCLML_FOR_UNITS_BEGIN((ulong)nb * per, per)
    const uint k = within / PQ, pq = within % PQ;
    out[((ulong)k * nb + unit) * PQ + pq] = y[((ulong)(n0 + unit) * K + k0 + k) * PQ + pq];
    OCLML_FOR_UNITS_END
}
#endif
