/* 2-D max and average pooling over NCHW planes and their gradients. Each work-item owns one
 * output (forward) or one input element (backward: it gathers from the windows that cover it,
 * no atomics); the 2x2 stride-2 max-pool's kernels own two windows side by side. Geometry:
 * planes H x W in, P x Q out, window KH x KW, stride (SH, SW), padding (PH, PW) on both sides;
 * work-items stride over a 1-D range by planes (OCLML_FOR_UNITS_BEGIN: 32-bit index math where
 * the range allows), the 2x2 kernels' by output rows (TWO_ROWS).
 * The max-pool's programs may fuse an activation before the pooling (-DACT_<NAME>=1,
 * activation.h): y = max(act(x)) over each window and dx = act'(x) (dy routed to each window's
 * first maximum of act(x)), x the pre-activation, so that neither pass stores act(x). */
#include "activation.h"

#define POOL_PLANE_ARGS \
    uint H, uint W, uint P, uint Q, uint KH, uint KW, uint SH, uint SW, uint PH, uint PW
#define POOL_ARGS ulong planes, POOL_PLANE_ARGS

#define ACT4(v) (float4)(act_apply((v).x), act_apply((v).y), act_apply((v).z), act_apply((v).w))

/* The first maximum of act(x) in window (p, q) of a plane as a flat index h * W + w; NaN counts
 * as the largest and, as in PyTorch's kernels (val > max || isnan(val)), its last occurrence
 * wins. -1 where the window holds only padding. The 2x2 kernels' window4_max and window4_argmax
 * follow the same order. */
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

/* The 2x2 stride-2 kernels' work units are the tensor's output rows (OCLML_FOR_UNITS_BEGIN over
 * planes x P rows of Q outputs): the planes' H = 2P rows stack into rows of W floats, and output
 * row R reads input rows 2R and 2R + 1, so a work-item finds its window with one division and no
 * plane index (TWO_ROWS: the first input row's offset). Against the planes as units (a division
 * by the plane, another by the row within it) this runs the 8x8 planes' max-pool, which is
 * launch- and latency-bound, about 15% faster on the H100; larger planes and the backward tie
 * (bench/DECISIONS.md, "The 2x2 max-pools index the tensor as rows"). */
#define TWO_ROWS(row) (2 * (row)*W)

#if OCLML_WANT(oclml_max_pool2d_2x2)
/* The encoder's 2x2 max-pool with stride 2 over planes whose rows hold a multiple of 4 floats:
 * a work-item reads 4 floats of two rows (vload4: two windows side by side) and writes the
 * two maxima, the same first-maximum-or-last-NaN order as window_argmax (row by row). Small
 * planes were launch- and index-bound on the general kernel (1.54 TB/s at 8x8 on the H100). */
OCLML_INLINE float window4_max(float a, float b, float c, float d) {
    float m = a;
    if (b > m || isnan(b)) m = b;
    if (c > m || isnan(c)) m = c;
    if (d > m || isnan(d)) m = d;
    return m;
}

__kernel void oclml_max_pool2d_2x2(__global const float *x, ulong x_off, __global float *y,
                                   ulong y_off, POOL_ARGS) {
    x += x_off;
    y += y_off;
#if POOL_ONE /* one window a work-item (small planes: more work-items in flight) */
    OCLML_FOR_UNITS_BEGIN((ulong)planes * P * Q, Q)
    const ulong at = TWO_ROWS(unit) + 2 * within;
    const float2 a = vload2(0, x + at), b = vload2(0, x + at + W);
    y[unit * Q + within] =
        window4_max(act_apply(a.x), act_apply(a.y), act_apply(b.x), act_apply(b.y));
    OCLML_FOR_UNITS_END
#else
    OCLML_FOR_UNITS_BEGIN((ulong)planes * P * (Q / 2), Q / 2) /* output pairs */
    const ulong at = TWO_ROWS(unit);
    const float4 a = ACT4(vload4(within, x + at)), b = ACT4(vload4(within, x + at + W));
    vstore2((float2)(window4_max(a.x, a.y, b.x, b.y), window4_max(a.z, a.w, b.z, b.w)), within,
            y + unit * Q);
    OCLML_FOR_UNITS_END
#endif
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

#if OCLML_WANT(oclml_max_pool2d_2x2_backward)
/* The 2x2 stride-2 max-pool's gradient over the forward's layout: a work-item owns two windows
 * side by side, reads their 8 inputs once (vload4 of two rows) and writes all 8 gradients, dy
 * at each window's first maximum (window4_max's order) and 0 elsewhere, each times act'(x) as
 * the unfused unary backward would (0 act'(x) keeps a NaN or infinite derivative's NaN). The
 * general kernel re-derives every window's maximum for each of its inputs (0.25 ms a layer of
 * the encoder on the H100). */
OCLML_INLINE uint window4_argmax(float a, float b, float c, float d) {
    uint at = 0;
    float m = a;
    if (b > m || isnan(b)) m = b, at = 1;
    if (c > m || isnan(c)) m = c, at = 2;
    if (d > m || isnan(d)) at = 3;
    return at;
}

#define ROUTE(at, i, g) ((at) == (i) ? (g) : 0.0f)

__kernel void oclml_max_pool2d_2x2_backward(__global const float *x, ulong x_off,
                                            __global const float *dy, ulong dy_off,
                                            __global float *dx, ulong dx_off, POOL_ARGS) {
    x += x_off;
    dy += dy_off;
    dx += dx_off;
    OCLML_FOR_UNITS_BEGIN((ulong)planes * P * (Q / 2), Q / 2) /* output pairs */
    const ulong at = TWO_ROWS(unit);
    const float4 a = vload4(within, x + at), b = vload4(within, x + at + W);
    const float4 fa = ACT4(a), fb = ACT4(b);
    const uint left = window4_argmax(fa.x, fa.y, fb.x, fb.y),
               right = window4_argmax(fa.z, fa.w, fb.z, fb.w);
    const float2 g = vload2(within, dy + unit * Q);
    const float4 ga = (float4)(ROUTE(left, 0, g.x), ROUTE(left, 1, g.x), ROUTE(right, 0, g.y),
                               ROUTE(right, 1, g.y)),
                 gb = (float4)(ROUTE(left, 2, g.x), ROUTE(left, 3, g.x), ROUTE(right, 2, g.y),
                               ROUTE(right, 3, g.y));
    vstore4((float4)(act_backward(ga.x, a.x), act_backward(ga.y, a.y), act_backward(ga.z, a.z),
                     act_backward(ga.w, a.w)),
            within, dx + at);
    vstore4((float4)(act_backward(gb.x, b.x), act_backward(gb.y, b.y), act_backward(gb.z, b.z),
                     act_backward(gb.w, b.w)),
            within, dx + at + W);
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
