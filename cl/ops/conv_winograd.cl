/* Winograd F(2x2, RxR) for RxR convolutions (R = WINO_R: 3 or 5) of unit stride and dilation
 * (lib/ops/conv_winograd.c): each 2x2 block of outputs ("tile") comes from the AxA input patch
 * under it (A = R + 1) as
 *   Y = A^T [ (G g G^T) .* (B^T d B) ] A,
 * A^2 products per tile and input channel where direct convolution takes 4 R^2 (16 for 36 at
 * 3x3, 36 for 100 at 5x5). Summed over input channels, the A^2 elementwise products are A^2
 * matrix products (the GEMM family's, batched):
 *   M[e] (K x T) = U[e] (K x C) V[e] (C x T),  e = A i + j the transformed position.
 * These kernels move the data around them: weights into U, input patches into V, M back into
 * outputs. The weight gradient runs the adjoints: dy's 2x2 blocks into D = A dy A^T, the products
 * dU[e] (K x C) = D[e] (K x T) V[e]^T summed over tiles, and dw = G^T dU G. Transforms (Lavin and
 * Gray, 2016; the 5x5 ones from the points 0, 1, -1, 2, -2 and infinity, checked exactly against
 * direct convolution in rational arithmetic):
 *   3x3: G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], A^T = [1 1 1 0; 0 1 -1 -1],
 *        B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   5x5: below.
 * Tiles t = (i TH + th) TW + tw of a chunk's images i, TH x TW tiles an image. */
#include "common.h"

#ifndef WINO_R
#define WINO_R 3
#endif
#if WINO_R == 3
#define WA 4
__constant float WG[4][3] = {
    {1.0f, 0.0f, 0.0f}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0.0f, 0.0f, 1.0f}};
__constant float WBT[4][4] = {{1.0f, 0.0f, -1.0f, 0.0f},
                              {0.0f, 1.0f, 1.0f, 0.0f},
                              {0.0f, -1.0f, 1.0f, 0.0f},
                              {0.0f, 1.0f, 0.0f, -1.0f}};
__constant float WAT[2][4] = {{1.0f, 1.0f, 1.0f, 0.0f}, {0.0f, 1.0f, -1.0f, -1.0f}};
#elif WINO_R == 5
#define WA 6
__constant float WG[6][5] = {{0.25f, 0.0f, 0.0f, 0.0f, 0.0f},
                             {-1.0f / 6, -1.0f / 6, -1.0f / 6, -1.0f / 6, -1.0f / 6},
                             {-1.0f / 6, 1.0f / 6, -1.0f / 6, 1.0f / 6, -1.0f / 6},
                             {1.0f / 24, 1.0f / 12, 1.0f / 6, 1.0f / 3, 2.0f / 3},
                             {1.0f / 24, -1.0f / 12, 1.0f / 6, -1.0f / 3, 2.0f / 3},
                             {0.0f, 0.0f, 0.0f, 0.0f, 1.0f}};
__constant float WBT[6][6] = {
    {4.0f, 0.0f, -5.0f, 0.0f, 1.0f, 0.0f},  {0.0f, -4.0f, -4.0f, 1.0f, 1.0f, 0.0f},
    {0.0f, 4.0f, -4.0f, -1.0f, 1.0f, 0.0f}, {0.0f, -2.0f, -1.0f, 2.0f, 1.0f, 0.0f},
    {0.0f, 2.0f, -1.0f, -2.0f, 1.0f, 0.0f}, {0.0f, 4.0f, 0.0f, -5.0f, 0.0f, 1.0f}};
__constant float WAT[2][6] = {{1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f},
                              {0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 1.0f}};
#else
#error "WINO_R: 3 or 5"
#endif
#define WR WINO_R
#define WE (WA * WA)

#if OCLML_WANT(oclml_winograd_weights)
/* U[e][k][c] = (G g G^T)[e] for g = w[k][c] (R x R), or with flip the data gradient's weights:
 * g = w[c][k] turned by 180 degrees (w then [C_out, C_in, R, R] with K = C_in, C = C_out). */
__kernel void oclml_winograd_weights(__global const float *w, ulong w_off, uint K, uint C,
                                     uint flip, __global float *U) {
    const ulong KC = (ulong)K * C;
    for (ulong kc = get_global_id(0); kc < KC; kc += get_global_size(0)) {
        const uint k = (uint)(kc / C), c = (uint)(kc % C);
        __global const float *g = w + w_off + (flip ? ((ulong)c * K + k) : kc) * (WR * WR);
        float a[WR][WR];
        for (uint r = 0; r < WR; r++)
            for (uint s = 0; s < WR; s++)
                a[r][s] = flip ? g[(WR - 1 - r) * WR + (WR - 1 - s)] : g[r * WR + s];
        float t[WA][WR]; /* G g */
        for (uint i = 0; i < WA; i++)
            for (uint s = 0; s < WR; s++) {
                float v = 0.0f;
                for (uint r = 0; r < WR; r++) v += WG[i][r] * a[r][s];
                t[i][s] = v;
            }
        for (uint i = 0; i < WA; i++) /* (G g) G^T */
            for (uint j = 0; j < WA; j++) {
                float v = 0.0f;
                for (uint s = 0; s < WR; s++) v += t[i][s] * WG[j][s];
                U[(ulong)(i * WA + j) * KC + kc] = v;
            }
    }
}
#endif

#if OCLML_WANT(oclml_winograd_input)
/* V[e][c][t] = (B^T d B)[e] for the AxA patch d of image n0 + i, channel c, whose corner is
 * (2 th - ph, 2 tw - pw) (zeros outside the image): one work-item a (channel, tile). */
__kernel void oclml_winograd_input(__global const float *x, ulong x_off, uint n0, uint nb, uint C,
                                   uint H, uint W, uint ph, uint pw, uint TH, uint TW,
                                   __global float *V) {
    const uint T = nb * TH * TW;
    const ulong CT = (ulong)C * T;
    x += x_off;
    for (ulong ct = get_global_id(0); ct < CT; ct += get_global_size(0)) {
        const uint c = (uint)(ct / T), t = (uint)(ct % T);
        const uint i = t / (TH * TW), th = t / TW % TH, tw = t % TW;
        const int h0 = (int)(2 * th) - (int)ph, w0 = (int)(2 * tw) - (int)pw;
        __global const float *plane = x + ((ulong)(n0 + i) * C + c) * H * W;
        float d[WA][WA];
        for (uint r = 0; r < WA; r++)
            for (uint s = 0; s < WA; s++) {
                const int h = h0 + (int)r, w = w0 + (int)s;
                const bool in = h >= 0 && h < (int)H && w >= 0 && w < (int)W;
                const float v = plane[in ? (uint)h * W + (uint)w : 0u]; /* loads not branched */
                d[r][s] = in ? v : 0.0f;
            }
        float b[WA][WA]; /* B^T d */
        for (uint r = 0; r < WA; r++)
            for (uint s = 0; s < WA; s++) {
                float v = 0.0f;
                for (uint u = 0; u < WA; u++) v += WBT[r][u] * d[u][s];
                b[r][s] = v;
            }
        for (uint r = 0; r < WA; r++) /* (B^T d) B */
            for (uint s = 0; s < WA; s++) {
                float v = 0.0f;
                for (uint u = 0; u < WA; u++) v += b[r][u] * WBT[s][u];
                V[(ulong)(r * WA + s) * CT + ct] = v;
            }
    }
}
#endif

#if OCLML_WANT(oclml_winograd_output)
/* The convolution's output (k, p, q) of image n computed directly in fp32: the repair of an
 * output the transforms made NaN. A NaN or infinity in a patch spreads over the whole
 * transformed tile (inf - inf), where direct convolution keeps it to the outputs whose window
 * holds it; so NaN outputs are recomputed, which only non-finite inputs cause. */
OCLML_INLINE float direct_output(__global const float *x, uint C, uint H, uint W, uint ph, uint pw,
                                 __global const float *w, uint K, uint flip, uint n, uint k, uint p,
                                 uint q) {
    float sum = 0.0f;
    for (uint c = 0; c < C; c++) {
        __global const float *plane = x + ((ulong)n * C + c) * H * W;
        __global const float *g = w + (flip ? ((ulong)c * K + k) : ((ulong)k * C + c)) * (WR * WR);
        for (uint r = 0; r < WR; r++)
            for (uint s = 0; s < WR; s++) {
                const int h = (int)(p + r) - (int)ph, v = (int)(q + s) - (int)pw;
                if (h < 0 || h >= (int)H || v < 0 || v >= (int)W) continue;
                sum = fma(plane[(uint)h * W + (uint)v],
                          flip ? g[(WR - 1 - r) * WR + (WR - 1 - s)] : g[r * WR + s], sum);
            }
    }
    return sum;
}

/* y[n0 + i][k][2 th + a][2 tw + b] = (A^T m A)[a][b] (+ bias[k]) for the outputs inside P x Q,
 * m[e] = M[e][k][t]: one work-item a (output channel, tile). x, w and the geometry (C, H, W,
 * ph, pw, flip as in the other kernels) serve direct_output. */
__kernel void oclml_winograd_output(__global const float *M, uint n0, uint nb, uint K, uint P,
                                    uint Q, uint TH, uint TW, __global float *y, ulong y_off,
                                    __global const float *bias, ulong b_off, uint has_bias,
                                    __global const float *x, ulong x_off, uint C, uint H, uint W,
                                    uint ph, uint pw, __global const float *w, ulong w_off,
                                    uint flip) {
    const uint T = nb * TH * TW;
    const ulong KT = (ulong)K * T;
    y += y_off;
    for (ulong kt = get_global_id(0); kt < KT; kt += get_global_size(0)) {
        const uint k = (uint)(kt / T), t = (uint)(kt % T);
        const uint i = t / (TH * TW), th = t / TW % TH, tw = t % TW;
        float m[WA][WA];
        for (uint e = 0; e < WE; e++) m[e / WA][e % WA] = M[(ulong)e * KT + kt];
        float a[2][WA]; /* A^T m */
        for (uint r = 0; r < 2; r++)
            for (uint s = 0; s < WA; s++) {
                float v = 0.0f;
                for (uint u = 0; u < WA; u++) v += WAT[r][u] * m[u][s];
                a[r][s] = v;
            }
        float o[2][2]; /* (A^T m) A */
        for (uint r = 0; r < 2; r++)
            for (uint s = 0; s < 2; s++) {
                float v = 0.0f;
                for (uint u = 0; u < WA; u++) v += a[r][u] * WAT[s][u];
                o[r][s] = v;
            }
        if (isnan(o[0][0]) || isnan(o[0][1]) || isnan(o[1][0]) || isnan(o[1][1]))
            for (uint r = 0; r < 2; r++)
                for (uint s = 0; s < 2; s++)
                    o[r][s] = direct_output(x + x_off, C, H, W, ph, pw, w + w_off, K, flip, n0 + i,
                                            k, 2 * th + r, 2 * tw + s);
        const float b = has_bias ? bias[b_off + k] : 0.0f;
        __global float *out = y + ((ulong)(n0 + i) * K + k) * P * Q;
        for (uint r = 0; r < 2; r++) {
            const uint p = 2 * th + r;
            if (p < P) {
                out[(ulong)p * Q + 2 * tw] = o[r][0] + b;
                if (2 * tw + 1 < Q) out[(ulong)p * Q + 2 * tw + 1] = o[r][1] + b;
            }
        }
    }
}
#endif

#if OCLML_WANT(oclml_winograd_dy)
/* The weight gradient's output-gradient transform, the adjoint of oclml_winograd_output's:
 * D[e][k][t] = (A m A^T)[e] for the 2x2 block m of dy (image n0 + i, channel k) at (2 th, 2 tw),
 * zeros past P x Q: one work-item a (channel, tile). */
__kernel void oclml_winograd_dy(__global const float *dy, ulong dy_off, uint n0, uint nb, uint K,
                                uint P, uint Q, uint TH, uint TW, __global float *D) {
    const uint T = nb * TH * TW;
    const ulong KT = (ulong)K * T;
    dy += dy_off;
    for (ulong kt = get_global_id(0); kt < KT; kt += get_global_size(0)) {
        const uint k = (uint)(kt / T), t = (uint)(kt % T);
        const uint i = t / (TH * TW), th = t / TW % TH, tw = t % TW;
        __global const float *plane = dy + ((ulong)(n0 + i) * K + k) * P * Q;
        float m[2][2];
        for (uint r = 0; r < 2; r++)
            for (uint s = 0; s < 2; s++) {
                const uint p = 2 * th + r, q = 2 * tw + s;
                const bool in = p < P && q < Q;
                const float v = plane[in ? p * Q + q : 0u];
                m[r][s] = in ? v : 0.0f;
            }
        for (uint r = 0; r < WA; r++) /* (A m) A^T, A = (A^T)^T */
            for (uint s = 0; s < WA; s++) {
                const float a0 = WAT[0][r] * m[0][0] + WAT[1][r] * m[1][0],
                            a1 = WAT[0][r] * m[0][1] + WAT[1][r] * m[1][1];
                D[(ulong)(r * WA + s) * KT + kt] = a0 * WAT[0][s] + a1 * WAT[1][s];
            }
    }
}
#endif

#if OCLML_WANT(oclml_winograd_weight_gradient)
/* Tap (r, s) of dw[k][c] by its definition, over every image and output: the repair of a
 * gradient the transforms made NaN (a non-finite input spreads over a whole transformed patch,
 * and so over taps that never read it, or inf - inf). */
OCLML_INLINE float direct_weight_gradient(__global const float *x, __global const float *dy, uint N,
                                          uint C, uint H, uint W, uint K, uint P, uint Q, uint ph,
                                          uint pw, uint k, uint c, uint r, uint s) {
    float sum = 0.0f;
    for (uint n = 0; n < N; n++) {
        __global const float *plane = x + ((ulong)n * C + c) * H * W;
        __global const float *grad = dy + ((ulong)n * K + k) * P * Q;
        for (uint p = 0; p < P; p++) {
            const int h = (int)(p + r) - (int)ph;
            if (h < 0 || h >= (int)H) continue;
            for (uint q = 0; q < Q; q++) {
                const int w = (int)(q + s) - (int)pw;
                if (w >= 0 && w < (int)W)
                    sum = fma(grad[p * Q + q], plane[(uint)h * W + (uint)w], sum);
            }
        }
    }
    return sum;
}

/* dw[k][c] (+)= G^T u G for u[e] = dU[e][k][c], the adjoint of oclml_winograd_weights' G g G^T:
 * one work-item a (output, input channel). x, dy and the geometry serve direct_weight_gradient
 * where the result came out NaN. */
__kernel void oclml_winograd_weight_gradient(__global const float *dU, uint K, uint C,
                                             __global float *dw, ulong dw_off, uint accumulate,
                                             __global const float *x, ulong x_off,
                                             __global const float *dy, ulong dy_off, uint N, uint H,
                                             uint W, uint P, uint Q, uint ph, uint pw) {
    const ulong KC = (ulong)K * C;
    for (ulong kc = get_global_id(0); kc < KC; kc += get_global_size(0)) {
        float u[WA][WA];
        for (uint e = 0; e < WE; e++) u[e / WA][e % WA] = dU[(ulong)e * KC + kc];
        float t[WR][WA]; /* G^T u */
        for (uint r = 0; r < WR; r++)
            for (uint j = 0; j < WA; j++) {
                float v = 0.0f;
                for (uint i = 0; i < WA; i++) v += WG[i][r] * u[i][j];
                t[r][j] = v;
            }
        float v[WR][WR]; /* (G^T u) G */
        bool nan = false;
        for (uint r = 0; r < WR; r++)
            for (uint s = 0; s < WR; s++) {
                float sum = 0.0f;
                for (uint j = 0; j < WA; j++) sum += t[r][j] * WG[j][s];
                v[r][s] = sum;
                nan = nan || isnan(sum);
            }
        if (nan)
            for (uint r = 0; r < WR; r++)
                for (uint s = 0; s < WR; s++)
                    v[r][s] = direct_weight_gradient(x + x_off, dy + dy_off, N, C, H, W, K, P, Q,
                                                     ph, pw, (uint)(kc / C), (uint)(kc % C), r, s);
        __global float *g = dw + dw_off + kc * (WR * WR);
        for (uint r = 0; r < WR; r++)
            for (uint s = 0; s < WR; s++)
                g[r * WR + s] = accumulate ? g[r * WR + s] + v[r][s] : v[r][s];
    }
}
#endif
