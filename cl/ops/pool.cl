/* 2-D max and average pooling over NCHW planes and their gradients. Each work-item owns one
 * output (forward) or one input element (backward: it gathers from the windows that cover it,
 * no atomics); the 2x2 stride-2 max-pool's kernels own two windows side by side. Geometry:
 * planes H x W in, P x Q out, window KH x KW, stride (SH, SW), padding (PH, PW) on both sides;
 * work-items stride over a 1-D range by planes (OCLML_FOR_UNITS_BEGIN: 32-bit index math where
 * the range allows).
 * The max-pool's programs may fuse an activation before the pooling (-DACT_<NAME>=1,
 * activation.h): y = max(act(x)) over each window and dx = act'(x) (dy routed to each window's
 * first maximum of act(x)), x the pre-activation, so that neither pass stores act(x). */
#include "activation.h"

#define POOL_PLANE_ARGS \
    uint H, uint W, uint P, uint Q, uint KH, uint KW, uint SH, uint SW, uint PH, uint PW
#define POOL_ARGS ulong planes, POOL_PLANE_ARGS

/* The first maximum of act(x) in window (p, q) of a plane as a flat index h * W + w; NaN counts
 * as the largest and, as in PyTorch's kernels (val > max || isnan(val)), its last occurrence wins. -1
 * where the window holds only padding. */
OCLML_INLINE int window_argmax(__global const float *x, uint W, uint H, uint p, uint q, uint KH,
                               uint KW, uint SH, uint SW, uint PH, uint PW) {
    const int h0 = (int)(p * SH) - (int)PH, w0 = (int)(q * SW) - (int)PW;
    int best = -1;
    float m = 0.0f;
    for (uint r = 0; r < KH; r++) {
        const int h = h0 + (int)r;
        if (h < 0 || h >= (int)H) continue;
        for (uint s = 0; s < KW; s++) {
            const int w = w0 + (int)s;
            if (w < 0 || w >= (int)W) continue;
            const float v = act_apply(x[h * W + w]);
            if (best < 0 || v > m || isnan(v)) {
                best = h * (int)W + w;
                m = v;
            }
        }
    }
    return best;
}

#if OCLML_WANT(oclml_max_pool2d)
__kernel void oclml_max_pool2d(__global const float *x, ulong x_off, __global float *y, ulong y_off,
                               POOL_ARGS) {
    x += x_off;
    y += y_off;
    OCLML_FOR_UNITS_BEGIN((ulong)planes * P * Q, P * Q)
    __global const float *xp = x + unit * H * W;
    const int at = window_argmax(xp, W, H, within / Q, within % Q, KH, KW, SH, SW, PH, PW);
    y[unit * P * Q + within] = at < 0 ? -INFINITY : act_apply(xp[at]);
    OCLML_FOR_UNITS_END
}
#endif

/* The 2x2 stride-2 max-pool without padding over planes of even height and rows of a multiple
 * of POOL_SPAN floats (4 or 8, a program define): the planes' row pairs are then one sequence
 * of row pairs, and a work-item owns POOL_SPAN / 2 windows side by side in one of them, read
 * with one vload from each of its two rows, in window_argmax's order (first maximum, else the
 * last NaN, row by row). Small planes were launch- and index-bound on the general kernel (1.54
 * TB/s at 8x8 on the H100). */
#ifndef POOL_SPAN
#define POOL_SPAN 4
#endif
#define WINDOWS (POOL_SPAN / 2)
#if POOL_SPAN == 8
#define LOAD_SPAN(arr, p)                                               \
    {                                                                   \
        const float8 v_ = vload8(0, p);                                 \
        arr[0] = v_.s0, arr[1] = v_.s1, arr[2] = v_.s2, arr[3] = v_.s3; \
        arr[4] = v_.s4, arr[5] = v_.s5, arr[6] = v_.s6, arr[7] = v_.s7; \
    }
#define STORE_SPAN(arr, p) \
    vstore8((float8)(arr[0], arr[1], arr[2], arr[3], arr[4], arr[5], arr[6], arr[7]), 0, p)
#else
#define LOAD_SPAN(arr, p)                                               \
    {                                                                   \
        const float4 v_ = vload4(0, p);                                 \
        arr[0] = v_.s0, arr[1] = v_.s1, arr[2] = v_.s2, arr[3] = v_.s3; \
    }
#define STORE_SPAN(arr, p) vstore4((float4)(arr[0], arr[1], arr[2], arr[3]), 0, p)
#endif

/* The first maximum (or last NaN) of window i of rows a and b: 0, 1 in a, 2, 3 in b. */
OCLML_INLINE uint window_pick(const float *a, const float *b, uint i) {
    const float v[4] = {a[2 * i], a[2 * i + 1], b[2 * i], b[2 * i + 1]};
    uint at = 0;
    float m = v[0];
#pragma unroll
    for (uint j = 1; j < 4; j++)
        if (v[j] > m || isnan(v[j])) m = v[j], at = j;
    return at;
}

/* The work-items' loop over row pairs: pair (of the whole tensor), t (the work-item's place in
 * it), row0 (its first input's offset); fa, fb: the activated inputs of its two rows. */
#define SPAN_LOOP_BEGIN                                                    \
    const uint per_pair = Q / WINDOWS;                                     \
    const ulong items = planes * P * per_pair;                             \
    const bool narrow_ = items + get_global_size(0) <= 0xffffffffUL;       \
    for (ulong e = get_global_id(0); e < items; e += get_global_size(0)) { \
        const ulong pair = narrow_ ? (uint)e / per_pair : e / per_pair;    \
        const uint t = (uint)(e - pair * per_pair);                        \
        const ulong row0 = pair * 2 * W + (ulong)t * POOL_SPAN;            \
        float xa[POOL_SPAN], xb[POOL_SPAN], fa[POOL_SPAN], fb[POOL_SPAN];  \
        LOAD_SPAN(xa, x + row0);                                           \
        LOAD_SPAN(xb, x + row0 + W);                                       \
        for (uint j = 0; j < POOL_SPAN; j++) fa[j] = act_apply(xa[j]), fb[j] = act_apply(xb[j]);
#define SPAN_LOOP_END }

#if OCLML_WANT(oclml_max_pool2d_2x2)
__kernel void oclml_max_pool2d_2x2(__global const float *x, ulong x_off, __global float *y,
                                   ulong y_off, POOL_ARGS) {
    x += x_off;
    y += y_off;
    SPAN_LOOP_BEGIN
    __global float *out = y + pair * Q + (ulong)t * WINDOWS;
#pragma unroll
    for (uint i = 0; i < WINDOWS; i++) {
        const uint at = window_pick(fa, fb, i);
        out[i] = at < 2 ? fa[2 * i + at] : fb[2 * i + at - 2];
    }
    SPAN_LOOP_END
}
#endif

#if OCLML_WANT(oclml_max_pool2d_2x2_backward)
/* The 2x2 stride-2 max-pool's gradient over the forward's layout: dy at each window's first
 * maximum and 0 elsewhere, each times act'(x) as the unfused unary backward would (0 act'(x)
 * keeps a NaN or infinite derivative's NaN). The general kernel, which re-derives every
 * window's maximum for each of its inputs, ran the encoder's planes at 0.25 ms a layer on the
 * H100 (2026-11-26). */
__kernel void oclml_max_pool2d_2x2_backward(__global const float *x, ulong x_off,
                                            __global const float *dy, ulong dy_off,
                                            __global float *dx, ulong dx_off, POOL_ARGS) {
    x += x_off;
    dy += dy_off;
    dx += dx_off;
    SPAN_LOOP_BEGIN
    __global const float *g = dy + pair * Q + (ulong)t * WINDOWS;
    float ga[POOL_SPAN], gb[POOL_SPAN];
#pragma unroll
    for (uint i = 0; i < WINDOWS; i++) {
        const uint at = window_pick(fa, fb, i);
        const float gi = g[i];
        ga[2 * i] = act_backward(at == 0 ? gi : 0.0f, xa[2 * i]);
        ga[2 * i + 1] = act_backward(at == 1 ? gi : 0.0f, xa[2 * i + 1]);
        gb[2 * i] = act_backward(at == 2 ? gi : 0.0f, xb[2 * i]);
        gb[2 * i + 1] = act_backward(at == 3 ? gi : 0.0f, xb[2 * i + 1]);
    }
    STORE_SPAN(ga, dx + row0);
    STORE_SPAN(gb, dx + row0 + W);
    SPAN_LOOP_END
}
#endif

/* The outputs whose windows cover input row h (or column): p from first to last inclusive. */
OCLML_INLINE void covering(uint h, uint PH, uint K, uint S, uint P, uint *first, uint *last) {
    const int hp = (int)(h + PH);
    const int lo = hp - (int)K + 1;
    *first = lo <= 0 ? 0 : (uint)((lo + (int)S - 1) / (int)S);
    const uint hi = (uint)hp / S;
    *last = hi < P - 1 ? hi : P - 1;
}

#if OCLML_WANT(oclml_max_pool2d_backward)
/* dx[h][w] = the sum of dy over the windows whose first maximum is (h, w). */
OCLML_INLINE float max_pool_grad(__global const float *xp, __global const float *dyp, uint hw,
                                 POOL_PLANE_ARGS) {
    const uint h = hw / W, w = hw % W;
    uint p0, p1, q0, q1;
    covering(h, PH, KH, SH, P, &p0, &p1);
    covering(w, PW, KW, SW, Q, &q0, &q1);
    float sum = 0.0f;
    for (uint p = p0; p <= p1 && p < P; p++)
        for (uint q = q0; q <= q1 && q < Q; q++)
            if (window_argmax(xp, W, H, p, q, KH, KW, SH, SW, PH, PW) == (int)hw)
                sum += dyp[p * Q + q];
    return sum;
}

__kernel void oclml_max_pool2d_backward(__global const float *x, ulong x_off,
                                        __global const float *dy, ulong dy_off, __global float *dx,
                                        ulong dx_off, POOL_ARGS) {
    x += x_off;
    dy += dy_off;
    dx += dx_off;
    OCLML_FOR_UNITS_BEGIN((ulong)planes * H * W, H * W)
    __global const float *xp = x + unit * H * W;
    const float g =
        max_pool_grad(xp, dy + unit * P * Q, within, H, W, P, Q, KH, KW, SH, SW, PH, PW);
    dx[unit * H * W + within] = act_backward(g, xp[within]);
    OCLML_FOR_UNITS_END
}
#endif

/* The divisor of window (p, q): the whole window, or only its part inside the input. */
OCLML_INLINE float window_count(uint p, uint q, uint H, uint W, uint KH, uint KW, uint SH, uint SW,
                                uint PH, uint PW, uint include_pad) {
    const int h0 = (int)(p * SH) - (int)PH, w0 = (int)(q * SW) - (int)PW;
    /* With padding counted, a window still ends at the padded edge (PyTorch's ceil_mode rule). */
    const int hend = min(h0 + (int)KH, (int)(H + PH)), wend = min(w0 + (int)KW, (int)(W + PW));
    if (include_pad) return (float)((hend - h0) * (wend - w0));
    const int hs = max(h0, 0), ws = max(w0, 0), he = min(hend, (int)H), we = min(wend, (int)W);
    return (float)((he - hs) * (we - ws));
}

#if OCLML_WANT(oclml_avg_pool2d)
OCLML_INLINE float avg_window(__global const float *xp, uint p, uint q, POOL_PLANE_ARGS,
                              uint include_pad) {
    const int h0 = (int)(p * SH) - (int)PH, w0 = (int)(q * SW) - (int)PW;
    float sum = 0.0f;
    for (uint r = 0; r < KH; r++) {
        const int h = h0 + (int)r;
        if (h < 0 || h >= (int)H) continue;
        for (uint s = 0; s < KW; s++) {
            const int w = w0 + (int)s;
            if (w >= 0 && w < (int)W) sum += xp[h * W + w];
        }
    }
    return sum / window_count(p, q, H, W, KH, KW, SH, SW, PH, PW, include_pad);
}

__kernel void oclml_avg_pool2d(__global const float *x, ulong x_off, __global float *y, ulong y_off,
                               POOL_ARGS, uint include_pad) {
    x += x_off;
    y += y_off;
    OCLML_FOR_UNITS_BEGIN((ulong)planes * P * Q, P * Q)
    y[unit * P * Q + within] = avg_window(x + unit * H * W, within / Q, within % Q, H, W, P, Q, KH,
                                          KW, SH, SW, PH, PW, include_pad);
    OCLML_FOR_UNITS_END
}
#endif

#if OCLML_WANT(oclml_avg_pool2d_backward)
OCLML_INLINE float avg_pool_grad(__global const float *dyp, uint hw, POOL_PLANE_ARGS,
                                 uint include_pad) {
    const uint h = hw / W, w = hw % W;
    uint p0, p1, q0, q1;
    covering(h, PH, KH, SH, P, &p0, &p1);
    covering(w, PW, KW, SW, Q, &q0, &q1);
    float sum = 0.0f;
    for (uint p = p0; p <= p1 && p < P; p++)
        for (uint q = q0; q <= q1 && q < Q; q++)
            sum += dyp[p * Q + q] / window_count(p, q, H, W, KH, KW, SH, SW, PH, PW, include_pad);
    return sum;
}

__kernel void oclml_avg_pool2d_backward(__global const float *dy, ulong dy_off, __global float *dx,
                                        ulong dx_off, POOL_ARGS, uint include_pad) {
    dy += dy_off;
    dx += dx_off;
    OCLML_FOR_UNITS_BEGIN((ulong)planes * H * W, H * W)
    dx[unit * H * W + within] =
        avg_pool_grad(dy + unit * P * Q, within, H, W, P, Q, KH, KW, SH, SW, PH, PW, include_pad);
    OCLML_FOR_UNITS_END
}
#endif
