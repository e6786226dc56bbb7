/* The weight gradient of a convolution with few columns (lib/ops/conv_direct_dw.c): input
 * channels times taps Cg R S small, as in an image model's first layer, where the product
 * dW_g [Kg x CgRS] = dy_g [Kg x NPQ] col(x_g)^T [NPQ x CgRS] has a tiny output and a K of a
 * million positions, which the GEMM tiles cover mostly with padding.
 *
 * oclml_conv_dw_partial: a work-group owns a TK x TC tile of one group's dW and a range of the
 * N P Q output positions. Chunk by chunk of TP positions it stages dy's rows and the unfolded
 * columns (gathered from x, zeros in the padding) into local memory as [row][position], then
 * each work-item accumulates a 4 x 4 block of the tile over the chunk, four positions a float4
 * read. Its
 * partial sums go to part[range][K][CgRS] (every range writes every entry of its tiles).
 * oclml_conv_dw_sum: dw = (accumulate ? dw : 0) + the ranges' partials in order: deterministic,
 * no atomics.
 *
 * Compile-time: TK, TC (multiples of 4), TP (a multiple of 32); the work-group is
 * (TK / 4) (TC / 4) work-items.
 * Column j = (c R + r) S + s within the group; position = (n P + p) Q + q. */
#include "common.h"

#define GEOM_ARGS                                                                               \
    uint C, uint H, uint W, uint R, uint S, uint P, uint Q, uint sh, uint sw, uint ph, uint pw, \
        uint dh, uint dw

#if OCLML_WANT(oclml_conv_dw_partial)
#ifndef TK /* the host passes all three */
#define TK 32
#endif
#ifndef TC
#define TC 64
#endif
#ifndef TP
#define TP 64
#endif
#define ITEMS ((TK / 4) * (TC / 4))
/* Local rows [row][TP positions], each row's float4s XOR-swizzled by (row / 4) % 8: the staging
 * stores (a warp's consecutive positions of a row) stay in distinct banks, and so do the float4
 * reads of the product (a warp's rows 4 jb + j of one position quad). TP / 4 >= 8. */
#define SWZ4(row, t4) ((row) * (TP / 4) + ((t4) ^ ((row) / 4u % 8u)))

/* Elements of a chunk's dy rows and columns each work-item stages. */
#define DY_EACH ((TK * TP + ITEMS - 1) / ITEMS)
#define COL_EACH ((TC * TP + ITEMS - 1) / ITEMS)

/* Position t of the chunk from `base`: image, position within it, the window's first row and
 * column (image ~0 past the range). 32-bit divisions where the positions allow. */
OCLML_INLINE uint4 position_at(ulong base, uint t, ulong end, uint P, uint Q, uint sh, uint sw,
                               uint ph, uint pw, bool narrow) {
    const ulong pos = base + t;
    const uint PQ = P * Q;
    const uint n = narrow ? (uint)pos / PQ : (uint)(pos / PQ),
               pq = narrow ? (uint)pos % PQ : (uint)(pos % PQ), p = pq / Q, q = pq % Q;
    return (uint4)(pos < end ? n : ~0u, pq, (uint)((int)(p * sh) - (int)ph),
                   (uint)((int)(q * sw) - (int)pw));
}

__kernel __attribute__((reqd_work_group_size(ITEMS, 1, 1))) void
oclml_conv_dw_partial(__global const float *x, ulong x_off, __global const float *dy, ulong dy_off,
                      GEOM_ARGS, uint K, uint Kg, uint Cg, uint k_tiles, uint c_tiles,
                      ulong positions, ulong span, __global float *part) {
    __local float4 dy4[TK * TP / 4], col4[TC * TP / 4];
    __local float *dyL = (__local float *)dy4, *colL = (__local float *)col4;
    /* Per column of the tile: its channel's plane offset, tap row and column offsets, and
     * whether it is one of the CgRS columns. */
    __local uint4 col_at[TC];
    /* Per position of the next chunk (position_at). */
    __local uint4 pos_at[TP];

    const uint lid = get_local_id(0), tile = (uint)get_global_id(1);
    const uint g = tile / (k_tiles * c_tiles), k0 = tile / c_tiles % k_tiles * TK,
               j0 = tile % c_tiles * TC;
    const uint RS = R * S, CgRS = Cg * RS, PQ = P * Q;
    const ulong first = get_group_id(0) * span, CHW = (ulong)C * H * W;
    const ulong end = first + span < positions ? first + span : positions;
    const bool narrow = positions + TP <= 0xffffffffUL;

    for (uint j = lid; j < TC; j += ITEMS) {
        const uint col = j0 + j, c = col / RS, r = col / S % R, s = col % S;
        col_at[j] = col < CgRS ? (uint4)((g * Cg + c) * H * W, r * dh, s * dw, 1) : (uint4)(0);
    }
    for (uint t = lid; t < TP; t += ITEMS)
        pos_at[t] = position_at(first, t, end, P, Q, sh, sw, ph, pw, narrow);
    barrier(CLK_LOCAL_MEM_FENCE);

    /* The next chunk's elements, loaded into registers while this chunk's products run. */
    float dy_next[DY_EACH], col_next[COL_EACH];
#define LOAD_NEXT()                                                                             \
    for (uint i = 0; i < DY_EACH; i++) {                                                        \
        const uint e = lid + i * ITEMS, kk = e / TP;                                            \
        const uint4 at = pos_at[e % TP];                                                        \
        dy_next[i] = e < TK * TP && at.x != ~0u && k0 + kk < Kg                                 \
                         ? dy[dy_off + ((ulong)at.x * K + g * Kg + k0 + kk) * PQ + at.y]        \
                         : 0.0f;                                                                \
    }                                                                                           \
    for (uint i = 0; i < COL_EACH; i++) {                                                       \
        const uint e = lid + i * ITEMS, jj = e / TP;                                            \
        const uint4 at = pos_at[e % TP], col = col_at[jj < TC ? jj : 0];                        \
        const int h = (int)at.z + (int)col.y, w = (int)at.w + (int)col.z;                       \
        col_next[i] =                                                                           \
            e < TC * TP && col.w && at.x != ~0u && h >= 0 && h < (int)H && w >= 0 && w < (int)W \
                ? x[x_off + at.x * CHW + col.x + (uint)h * W + (uint)w]                         \
                : 0.0f;                                                                         \
    }
    LOAD_NEXT()

    const uint ib = lid / (TC / 4), jb = lid % (TC / 4); /* the 4 x 4 block's float4 rows */
    float4 acc[4] = {(float4)(0.0f), (float4)(0.0f), (float4)(0.0f), (float4)(0.0f)};
    for (ulong base = first; base < end; base += TP) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk's products and loads are done */
        for (uint i = 0; i < DY_EACH; i++) {
            const uint e = lid + i * ITEMS, t = e % TP;
            if (e < TK * TP) dyL[SWZ4(e / TP, t / 4) * 4 + t % 4] = dy_next[i];
        }
        for (uint i = 0; i < COL_EACH; i++) {
            const uint e = lid + i * ITEMS, t = e % TP;
            if (e < TC * TP) colL[SWZ4(e / TP, t / 4) * 4 + t % 4] = col_next[i];
        }
        for (uint t = lid; t < TP; t += ITEMS)
            pos_at[t] = position_at(base + TP, t, end, P, Q, sh, sw, ph, pw, narrow);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (base + TP < end) {
            LOAD_NEXT()
        }
        for (uint t4 = 0; t4 < TP / 4; t4++) {
            float4 a[4], b[4];
            for (uint i = 0; i < 4; i++) {
                a[i] = dy4[SWZ4(ib * 4 + i, t4)];
                b[i] = col4[SWZ4(jb * 4 + i, t4)];
            }
            const float4 bx = (float4)(b[0].x, b[1].x, b[2].x, b[3].x),
                         by = (float4)(b[0].y, b[1].y, b[2].y, b[3].y),
                         bz = (float4)(b[0].z, b[1].z, b[2].z, b[3].z),
                         bw = (float4)(b[0].w, b[1].w, b[2].w, b[3].w);
            for (uint i = 0; i < 4; i++) {
                acc[i] = fma((float4)(a[i].x), bx, acc[i]);
                acc[i] = fma((float4)(a[i].y), by, acc[i]);
                acc[i] = fma((float4)(a[i].z), bz, acc[i]);
                acc[i] = fma((float4)(a[i].w), bw, acc[i]);
            }
        }
    }
#undef LOAD_NEXT
    __global float *out = part + get_group_id(0) * (ulong)K * CgRS;
    for (uint i = 0; i < 4; i++) {
        const uint k = k0 + ib * 4 + i;
        const float v[4] = {acc[i].x, acc[i].y, acc[i].z, acc[i].w};
        for (uint jj = 0; jj < 4; jj++) {
            const uint col = j0 + jb * 4 + jj;
            if (k < Kg && col < CgRS) out[(ulong)(g * Kg + k) * CgRS + col] = v[jj];
        }
    }
}
#endif

#if OCLML_WANT(oclml_conv_dw_sum)
/* dw[i] = (accumulate ? dw[i] : 0) + the sum over ranges r of part[r][i], i < n = K CgRS: a
 * work-group of (outputs, lanes) sums lane l's ranges l, l + lanes, ... per output, then the
 * lanes' sums in order (deterministic for a given work-group shape). */
__kernel void oclml_conv_dw_sum(__global const float *part, uint ranges, uint n, __global float *dw,
                                ulong dw_off, uint accumulate, __local float *sums) {
    const uint outs = get_local_size(0), lanes = get_local_size(1), lo = get_local_id(0),
               ll = get_local_id(1), i = get_global_id(0);
    float sum = 0.0f;
    if (i < n)
        for (uint r = ll; r < ranges; r += lanes) sum += part[(ulong)r * n + i];
    sums[ll * outs + lo] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ll == 0 && i < n) {
        float total = 0.0f;
        for (uint l = 0; l < lanes; l++) total += sums[l * outs + lo];
        dw[dw_off + i] = accumulate ? dw[dw_off + i] + total : total;
    }
}
#endif
