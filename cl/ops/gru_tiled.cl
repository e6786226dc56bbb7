/* GRU step for large batches (TORCH variant; the gate math is gru.cl's): one tiled GEMM of
 * [x | h] against the gate weights, with the gates in its epilogue. A work-group owns TILE_M
 * batch rows and TILE_N hidden units, and for each of them four accumulators: r and z (input and
 * hidden sides summed), the n gate's input side and its hidden side (kept apart: TORCH scales the
 * hidden side by r). The K loop runs over x's columns with W_ih, then h's with W_hh, in chunks
 * staged in local memory; h' is written directly, so no [B x 3D] pre-activation ever reaches
 * global memory (the GEMM path it replaces wrote and re-read two of them).
 *
 * Work split: TILE_WM x TILE_WN warps (32 work-items each) per K-group over the tile, each warp
 * TILE_MT blocks of 16 rows by TILE_NT blocks of 8 units. With TILE_KSPLIT 2 a second K-group
 * takes the second half of every chunk and hands its sums over through local memory at the end:
 * twice the warps for shapes with few tiles. The host keeps 4 TILE_MT divisible by TILE_WN and
 * 6 TILE_NT by TILE_WM, so every work-item stages the same number of float4 per chunk.
 *
 * Accumulator element e = (mt*TILE_NT + nt)*4 + i of a work-item is warp row mt*16 + gid +
 * 8*(i>>1), warp unit nt*8 + 2*tig + (i&1) (gid = lane/4, tig = lane%4): the accumulator layout
 * of the m16n8k8 tensor-core instruction, which the TILE_MMA variant uses; the portable variant
 * computes the same elements with FMAs, so both share loads and epilogue. */
#include "common.h"
#include "gru_abi.h"
#include "gru_cell.h"
#if TILE_MMA
#define OCLML_WANT_MMA_TF32 1
#endif
#include "ptx.h"
#ifndef TILE_WM
#define TILE_WM 2
#endif
#ifndef TILE_WN
#define TILE_WN 2
#endif
#ifndef TILE_MT
#define TILE_MT 2
#endif
#ifndef TILE_NT
#define TILE_NT 2
#endif
#ifndef TILE_MMA
#define TILE_MMA 0 /* 0: FMAs; 1: tensor cores (3xTF32) */
#endif
#ifndef TILE_KSPLIT
#define TILE_KSPLIT 1
#endif
#define TILE_M (TILE_WM * TILE_MT * 16)
#define TILE_N (TILE_WN * TILE_NT * 8)
#define KGROUP_ITEMS (32 * TILE_WM * TILE_WN)
#define TILE_ITEMS (KGROUP_ITEMS * TILE_KSPLIT)
#ifndef TILE_VEC4
#define TILE_VEC4 0 /* 1: K and every row offset are multiples of 4 (aligned float4 loads) */
#endif
#define CHUNK_PER_KGROUP 32
#define CHUNK (CHUNK_PER_KGROUP * TILE_KSPLIT)
#define LD (CHUNK + 4) /* local row stride; +4: conflict-free column reads */
#define ACCS (TILE_MT * TILE_NT * 4)
#define FETCH_A (4 * TILE_MT / TILE_WN) /* float4 a work-item stages per chunk */
#define FETCH_W (6 * TILE_NT / TILE_WM)

/* Where a work-item's accumulator element e sits (the layout in the header): its row in the
 * tile, and its unit slot u (of 2 TILE_NT: unit nt * 8 + 2 tig + (e & 1) of the warp), whose
 * unit in the tile slot_unit gives. */
inline uint elem_row(uint e, uint wm, uint gid) {
    return wm * TILE_MT * 16 + e / (TILE_NT * 4) * 16 + gid + 8 * ((e >> 1) & 1);
}
inline uint elem_slot(uint e) { return e / 4 % TILE_NT * 2 + (e & 1); }
inline uint slot_unit(uint u, uint wn, uint tig) {
    return wn * TILE_NT * 8 + u / 2 * 8 + 2 * tig + (u & 1);
}

/* Four consecutive elements k..k+3 of a row (zeros past K or for a missing row). With TILE_VEC4
 * the vector load is aligned and wholly inside the row. */
inline float4 tile_load4(__global const float *row, uint k, uint K, bool ok) {
    if (!ok || k >= K) return (float4)(0.0f);
    if (TILE_VEC4) return *(__global const float4 *)(row + k);
    return (float4)(row[k], k + 1 < K ? row[k + 1] : 0.0f, k + 2 < K ? row[k + 2] : 0.0f,
                    k + 3 < K ? row[k + 3] : 0.0f);
}

#if TILE_MMA
/* fp32 accuracy from tf32 tensor cores ("3xTF32"): v = hi + lo with hi its top 11 significant
 * bits; a*b = hi*hi + hi*lo + lo*hi up to ~2^-20 relative, where one tf32 product alone would be
 * off by ~2^-11. lo is passed whole: the tensor cores read only its tf32 bits (ptxas drops a
 * mask here by itself), and the bits they drop are ~2^-22 of v. */
#define TF32_MASK 0xffffe000u
inline void tf32_split(float v, uint *hi, uint *lo) {
    const uint h = as_uint(v) & TF32_MASK;
    *hi = h;
    *lo = as_uint(v - as_float(h));
}

/* One chunk's share of a K-group (kbase: its first column in the chunk) for this warp. The
 * passes run small terms first, each over all 3 x TILE_MT x TILE_NT independent products, so a
 * product waits on its predecessor only a pass later. */
inline void tile_chunk(__local const float *As, __local const float *Ws, uint kbase, uint wm,
                       uint wn, uint gid, uint tig, float *acc_r, float *acc_z, float *acc_n) {
#pragma unroll
    for (uint kk = 0; kk < CHUNK_PER_KGROUP; kk += 8) {
        uint ah[TILE_MT][4], al[TILE_MT][4];
#pragma unroll
        for (uint mt = 0; mt < TILE_MT; mt++) {
            __local const float *ap =
                As + (wm * TILE_MT * 16 + mt * 16 + gid) * LD + kbase + kk + tig;
            tf32_split(ap[0], &ah[mt][0], &al[mt][0]);
            tf32_split(ap[8 * LD], &ah[mt][1], &al[mt][1]);
            tf32_split(ap[4], &ah[mt][2], &al[mt][2]);
            tf32_split(ap[8 * LD + 4], &ah[mt][3], &al[mt][3]);
        }
        uint bh[3][TILE_NT][2], bl[3][TILE_NT][2];
#pragma unroll
        for (uint g = 0; g < 3; g++)
#pragma unroll
            for (uint nt = 0; nt < TILE_NT; nt++) {
                __local const float *bp =
                    Ws + (g * TILE_N + wn * TILE_NT * 8 + nt * 8 + gid) * LD + kbase + kk + tig;
                tf32_split(bp[0], &bh[g][nt][0], &bl[g][nt][0]);
                tf32_split(bp[4], &bh[g][nt][1], &bl[g][nt][1]);
            }
#pragma unroll
        for (uint pass = 0; pass < 3; pass++)
#pragma unroll
            for (uint g = 0; g < 3; g++) {
                float *acc = g == 0 ? acc_r : g == 1 ? acc_z : acc_n;
#pragma unroll
                for (uint mt = 0; mt < TILE_MT; mt++)
#pragma unroll
                    for (uint nt = 0; nt < TILE_NT; nt++) {
                        uint *av = pass == 0 ? al[mt] : ah[mt],
                             *bv = pass == 1 ? bl[g][nt] : bh[g][nt];
                        mma_tf32(acc + (mt * TILE_NT + nt) * 4, av[0], av[1], av[2], av[3], bv[0],
                                 bv[1]);
                    }
            }
    }
}
#else
/* The same elements with FMAs. */
inline void tile_chunk(__local const float *As, __local const float *Ws, uint kbase, uint wm,
                       uint wn, uint gid, uint tig, float *acc_r, float *acc_z, float *acc_n) {
#pragma unroll 4
    for (uint k = kbase; k < kbase + CHUNK_PER_KGROUP; k++) {
        float a[TILE_MT * 2], w[3][TILE_NT * 2];
        for (uint mt = 0; mt < TILE_MT; mt++)
            for (uint s = 0; s < 2; s++)
                a[mt * 2 + s] = As[(wm * TILE_MT * 16 + mt * 16 + gid + 8 * s) * LD + k];
        for (uint g = 0; g < 3; g++)
            for (uint u = 0; u < TILE_NT * 2; u++)
                w[g][u] = Ws[(g * TILE_N + slot_unit(u, wn, tig)) * LD + k];
#pragma unroll
        for (uint e = 0; e < ACCS; e++) {
            const float av = a[e / (TILE_NT * 4) * 2 + ((e >> 1) & 1)];
            const uint wi = elem_slot(e);
            acc_r[e] = fma(av, w[0][wi], acc_r[e]);
            acc_z[e] = fma(av, w[1][wi], acc_z[e]);
            acc_n[e] = fma(av, w[2][wi], acc_n[e]);
        }
    }
}
#endif

/* Chunk c (of nx over x, then over h) of the A rows and the three gates' weight rows, into
 * registers. */
inline void tile_fetch(uint c, uint nx, __global const float *x, __global const float *h,
                       __global const float *w_ih, __global const float *w_hh, uint B, uint I,
                       uint D, uint b0, uint j0, uint lid, float4 *pa, float4 *pw) {
    const bool xside = c < nx;
    const uint K = xside ? I : D, k0 = (xside ? c : c - nx) * CHUNK;
    __global const float *A = xside ? x : h, *W = xside ? w_ih : w_hh;
    for (uint i = 0; i < FETCH_A; i++) {
        const uint q = lid + i * TILE_ITEMS, row = q / (CHUNK / 4), k = k0 + q % (CHUNK / 4) * 4;
        pa[i] = tile_load4(A + (ulong)(b0 + row) * K, k, K, b0 + row < B);
    }
    for (uint i = 0; i < FETCH_W; i++) {
        const uint q = lid + i * TILE_ITEMS, wrow = q / (CHUNK / 4), k = k0 + q % (CHUNK / 4) * 4;
        const uint g = wrow / TILE_N, j = j0 + wrow % TILE_N;
        pw[i] = tile_load4(W + ((ulong)g * D + j) * K, k, K, j < D);
    }
}

inline void tile_store(__local float4 *lds, uint lid, const float4 *pa, const float4 *pw) {
    for (uint i = 0; i < FETCH_A; i++) {
        const uint q = lid + i * TILE_ITEMS;
        lds[q / (CHUNK / 4) * (LD / 4) + q % (CHUNK / 4)] = pa[i];
    }
    for (uint i = 0; i < FETCH_W; i++) {
        const uint q = lid + i * TILE_ITEMS;
        lds[(TILE_M + q / (CHUNK / 4)) * (LD / 4) + q % (CHUNK / 4)] = pw[i];
    }
}

/* Work-groups of TILE_ITEMS, global size (D/TILE_N rounded up * TILE_ITEMS, B/TILE_M rounded
 * up). lds: the larger of (TILE_M + 3 TILE_N) LD floats (the chunk) and, with TILE_KSPLIT 2,
 * 4 ACCS KGROUP_ITEMS floats (the hand-over). */
__kernel __attribute__((reqd_work_group_size(TILE_ITEMS, 1, 1))) void
oclml_gru_step_tiled(__global const float *x, ulong xo, __global const float *h, ulong ho,
                     __global const float *w_ih, ulong wio, __global const float *w_hh, ulong who,
                     __global const float *b_ih, ulong bio, __global const float *b_hh, ulong bho,
                     __global float *h_new, ulong hwo, uint flags, uint B, uint I, uint D,
                     __local float4 *lds) {
    const uint lid = get_local_id(0), kg = lid / KGROUP_ITEMS, t = lid % KGROUP_ITEMS;
    const uint warp = t / 32, lane = t % 32, gid = lane / 4, tig = lane % 4;
    const uint wm = warp % TILE_WM, wn = warp / TILE_WM;
    const uint j0 = get_group_id(0) * TILE_N, b0 = get_group_id(1) * TILE_M;
    const uint nx = (I + CHUNK - 1) / CHUNK, nc = nx + (D + CHUNK - 1) / CHUNK;
    __local const float *As = (__local const float *)lds, *Ws = As + TILE_M * LD;
    x += xo;
    h += ho;
    w_ih += wio;
    w_hh += who;
    float acc_r[ACCS], acc_z[ACCS], acc_i[ACCS], acc_h[ACCS];
    for (uint e = 0; e < ACCS; e++) acc_r[e] = acc_z[e] = acc_i[e] = acc_h[e] = 0.0f;
    /* registers hold chunk c + 1 while chunk c is multiplied */
    float4 pa[FETCH_A], pw[FETCH_W];
    tile_fetch(0, nx, x, h, w_ih, w_hh, B, I, D, b0, j0, lid, pa, pw);
    for (uint c = 0; c < nc; c++) {
        tile_store(lds, lid, pa, pw);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (c + 1 < nc) tile_fetch(c + 1, nx, x, h, w_ih, w_hh, B, I, D, b0, j0, lid, pa, pw);
        if (c < nx)
            tile_chunk(As, Ws, kg * CHUNK_PER_KGROUP, wm, wn, gid, tig, acc_r, acc_z, acc_i);
        else
            tile_chunk(As, Ws, kg * CHUNK_PER_KGROUP, wm, wn, gid, tig, acc_r, acc_z, acc_h);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#if TILE_KSPLIT == 2 /* the second K-group hands its sums to the first */
    __local float *hand = (__local float *)lds;
    if (kg == 1)
        for (uint e = 0; e < ACCS; e++) {
            hand[(e * 4 + 0) * KGROUP_ITEMS + t] = acc_r[e];
            hand[(e * 4 + 1) * KGROUP_ITEMS + t] = acc_z[e];
            hand[(e * 4 + 2) * KGROUP_ITEMS + t] = acc_i[e];
            hand[(e * 4 + 3) * KGROUP_ITEMS + t] = acc_h[e];
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (kg == 0)
        for (uint e = 0; e < ACCS; e++) {
            acc_r[e] += hand[(e * 4 + 0) * KGROUP_ITEMS + t];
            acc_z[e] += hand[(e * 4 + 1) * KGROUP_ITEMS + t];
            acc_i[e] += hand[(e * 4 + 2) * KGROUP_ITEMS + t];
            acc_h[e] += hand[(e * 4 + 3) * KGROUP_ITEMS + t];
        }
#endif
    if (kg != 0) return; /* after the last barrier */
    /* Every load before the first store: nothing tells the compiler that h_new aliases none of
     * them, so a load placed after a store waits for it, and the epilogue became eight round trips
     * to memory in a row (~2.5 us of a 50 us step on the H100). A work-item's elements share
     * 2 TILE_NT units, so their biases are loaded once. */
    float bias_r[TILE_NT * 2], bias_z[TILE_NT * 2], bias_in[TILE_NT * 2], bias_hn[TILE_NT * 2],
        h_old[ACCS];
    for (uint u = 0; u < TILE_NT * 2; u++) {
        const uint j = j0 + slot_unit(u, wn, tig);
        float bi[3] = {0.0f, 0.0f, 0.0f}, bh[3] = {0.0f, 0.0f, 0.0f};
        for (uint g = 0; g < 3 && j < D; g++) {
            if (flags & GRU_B_IH) bi[g] = b_ih[bio + (ulong)g * D + j];
            if (flags & GRU_B_HH) bh[g] = b_hh[bho + (ulong)g * D + j];
        }
        bias_r[u] = bi[0] + bh[0];
        bias_z[u] = bi[1] + bh[1];
        bias_in[u] = bi[2];
        bias_hn[u] = bh[2];
    }
    for (uint e = 0; e < ACCS; e++) {
        const uint b = b0 + elem_row(e, wm, gid), j = j0 + slot_unit(elem_slot(e), wn, tig);
        h_old[e] = b < B && j < D ? h[(ulong)b * D + j] : 0.0f;
    }
    for (uint e = 0; e < ACCS; e++) {
        const uint u = elem_slot(e), b = b0 + elem_row(e, wm, gid), j = j0 + slot_unit(u, wn, tig);
        const float hj = gru_cell(acc_r[e] + bias_r[u], acc_z[e] + bias_z[u], acc_i[e] + bias_in[u],
                                  acc_h[e] + bias_hn[u], h_old[e], false);
        if (b < B && j < D) h_new[hwo + (ulong)b * D + j] = hj;
    }
}
