/* The data gradient of a stride-1, dilation-1, one-group convolution into few channels (an
 * image's colour channels), computed directly: the GEMM paths' products would have DX_C rows
 * of a 16- or 32-row tile, and col2im's unfolded columns are 25x the image.
 *   dx[n][c][h][v] = sum over k, r, s of dy[n][k][h + ph - r][v + pw - s] w[k][c][r][s]
 * (+ b[c]: the transposed convolution's forward). A work-group owns a TH x TW tile of one
 * image's dx in all DX_C channels: per chunk of KC output channels it stages the dy rows and
 * columns the tile's taps reach (zero outside dy) and the chunk's weights in local memory; a
 * work-item owns ROWS vertically adjacent positions of one column, so each dy value it loads
 * serves ROWS x DX_C products per tap row. Sums run over k, then s, then r, in a fixed order:
 * results are deterministic. Defines: DX_C (channels, 1 to 4), DX_R and DX_S (taps). */
#include "common.h"

#ifndef DX_C /* the host always defines them; these let the file compile alone */
#define DX_C 3
#define DX_R 5
#define DX_S 5
#endif

#define TW 32  /* tile columns: one a work-item, a warp a row of work-items */
#define ROWS 4 /* positions a work-item, down a column */
#define TH (ROWS * (DX_THREADS / TW))
#define KC 4 /* output channels a chunk */
#define LR (TH + DX_R - 1)
#define LC (TW + DX_S - 1)
#define RS (DX_R * DX_S)
#define DX_THREADS 256

#if OCLML_WANT(oclml_conv_dx_direct)
__kernel __attribute__((reqd_work_group_size(DX_THREADS, 1, 1))) void
oclml_conv_dx_direct(__global const float *dy, ulong dy_off, __global const float *w, ulong w_off,
                     __global float *dx, ulong dx_off, __global const float *b, ulong b_off,
                     uint has_bias, uint K, uint H, uint W, uint P, uint Q, uint ph, uint pw,
                     uint tiles_y, uint tiles_x) {
    __local float tile[KC][LR][LC];
    __local float wl[KC][DX_C][RS];
    const uint tid = get_local_id(0), tx = tid % TW, ty = tid / TW;
    const uint g = get_group_id(0), per_image = tiles_y * tiles_x;
    const uint n = g / per_image, t = g % per_image;
    const int h0 = (int)(t / tiles_x * TH), v0 = (int)(t % tiles_x * TW);
    const int oy0 = h0 + (int)ph - (DX_R - 1), ox0 = v0 + (int)pw - (DX_S - 1);
    const ulong plane = (ulong)P * Q;
    dy += dy_off + n * (ulong)K * plane;
    w += w_off;
    float acc[ROWS][DX_C];
#pragma unroll
    for (uint i = 0; i < ROWS; i++)
#pragma unroll
        for (uint c = 0; c < DX_C; c++) acc[i][c] = 0.0f;
    for (uint k0 = 0; k0 < K; k0 += KC) {
        for (uint i = tid; i < KC * LR * LC; i += DX_THREADS) {
            const uint kk = i / (LR * LC), at = i % (LR * LC), r = at / LC, col = at % LC;
            const int y = oy0 + (int)r, x = ox0 + (int)col;
            float v = 0.0f;
            if (k0 + kk < K && y >= 0 && y < (int)P && x >= 0 && x < (int)Q)
                v = dy[(k0 + kk) * plane + (uint)y * Q + (uint)x];
            tile[kk][r][col] = v;
        }
        for (uint i = tid; i < KC * DX_C * RS; i += DX_THREADS) {
            const uint kk = i / (DX_C * RS), at = i % (DX_C * RS);
            wl[kk][at / RS][at % RS] = k0 + kk < K ? w[(ulong)(k0 + kk) * DX_C * RS + at] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint kk = 0; kk < KC; kk++) {
#pragma unroll
            for (uint s = 0; s < DX_S; s++) {
                float v[ROWS + DX_R - 1];
#pragma unroll
                for (uint j = 0; j < ROWS + DX_R - 1; j++)
                    v[j] = tile[kk][ty * ROWS + j][tx + DX_S - 1 - s];
#pragma unroll
                for (uint r = 0; r < DX_R; r++)
#pragma unroll
                    for (uint c = 0; c < DX_C; c++) {
                        const float wv = wl[kk][c][r * DX_S + s];
#pragma unroll
                        for (uint i = 0; i < ROWS; i++)
                            acc[i][c] = fma(v[i + DX_R - 1 - r], wv, acc[i][c]);
                    }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int x = v0 + (int)tx;
    if (x >= (int)W) return;
    dx += dx_off + n * (ulong)DX_C * H * W;
#pragma unroll
    for (uint i = 0; i < ROWS; i++) {
        const int h = h0 + (int)(ty * ROWS + i);
        if (h >= (int)H) break;
#pragma unroll
        for (uint c = 0; c < DX_C; c++)
            dx[(ulong)c * H * W + (uint)h * W + (uint)x] =
                acc[i][c] + (has_bias ? b[b_off + c] : 0.0f);
    }
}
#endif
