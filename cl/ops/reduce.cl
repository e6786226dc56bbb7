/* Reductions along the last axis (one row per segment of G work-items) and over a whole tensor
 * (work-group partials, then one row of partials). Ops: 0 sum, 1 max, 2 mean, 3 argmax.
 * NaN propagates: sum and mean through the arithmetic; max and argmax treat NaN as the largest
 * value (the first NaN's index for argmax), as PyTorch does. Argmax returns the first index of
 * the maximum, as a float (exact below 2^24). */
#include "rows.h"
#define R_SUM 0
#define R_MAX 1
#define R_MEAN 2
#define R_ARGMAX 3

/* (value, index) order for max/argmax: NaN is largest; equal values keep the lower index. */
inline bool beats(float v, uint i, float w, uint j) {
    if (isnan(v) != isnan(w)) return isnan(v);
    if (isnan(v)) return i < j;
    return v > w || (v == w && i < j);
}

/* Segment reduction of (value, index) pairs; idx lives in the second half of red. */
inline float2 seg_argmax(float v, uint i, __local float *red, uint lid, uint G, uint L) {
    __local uint *ri = (__local uint *)(red + L);
    red[lid] = v;
    ri[lid] = i;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = G >> 1; s > 0; s >>= 1) {
        if ((lid & (G - 1)) < s && beats(red[lid + s], ri[lid + s], red[lid], ri[lid])) {
            red[lid] = red[lid + s];
            ri[lid] = ri[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const uint head = lid & ~(G - 1);
    const float2 r = (float2)(red[head], as_float(ri[head]));
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Kernels come in two kinds, sums (sum, mean) and selections (max, argmax), so that no barrier
 * sits under a branch: PoCL (and the OpenCL spec) need every work-item to reach each barrier.
 *
 * Rows: one row per segment. pairs: the row holds (value, index) pairs from stage 1 of a
 * whole-tensor max/argmax, else indices are column numbers. Sums are multiplied by scale
 * (1/count for a mean). */
#if OCLML_WANT(oclml_reduce_rows_sum)
__kernel void oclml_reduce_rows_sum(__global const float *x, ulong xo, __global float *y, ulong yo,
                                    uint op, uint pairs, float scale, uint rows, uint cols, uint G,
                                    __local float *red) {
    ROW_PROLOGUE(G, rows)
    __global const float *xr = x + xo + row * cols;
    float acc = 0.0f;
    for (uint c = lane; ok && c < cols; c += G) acc += xr[c];
    acc = seg_sum(acc, red, lid, G);
    if (ok && lane == 0) y[yo + row] = acc * scale;
}
#endif

#if OCLML_WANT(oclml_reduce_rows_select)
__kernel void oclml_reduce_rows_select(__global const float *x, ulong xo, __global float *y,
                                       ulong yo, uint op, uint pairs, float scale, uint rows,
                                       uint cols, uint G, __local float *red) {
    ROW_PROLOGUE(G, rows)
    __global const float *xr = x + xo + row * cols * (pairs ? 2 : 1);
    float acc = -INFINITY;
    uint best = 0xFFFFFFFFu;
    for (uint c = lane; ok && c < cols; c += G) {
        const float v = pairs ? xr[2 * c] : xr[c];
        const uint i = pairs ? as_uint(xr[2 * c + 1]) : c;
        if (best == 0xFFFFFFFFu || beats(v, i, acc, best)) {
            acc = v;
            best = i;
        }
    }
    const float2 r = seg_argmax(acc, best, red, lid, G, get_local_size(0));
    if (ok && lane == 0) y[yo + row] = (op == R_MAX) ? r.x : (float)as_uint(r.y);
}
#endif

/* Whole tensor, stage 1: each work-group folds a strided share of the n elements into one
 * partial: part[g] = sum, or (value, index) pairs for max/argmax.
 *
 * CPUs (OCLML_CHUNKS, one work-item a work-group): each work-item folds its contiguous chunk,
 * with no barrier, in blocks of RED_BLOCK elements over RED_LANES interleaved lanes (loops along
 * the lanes, which the compiler vectorises). Sums pair the lanes at the end of each block and add
 * the blocks in order: rounding grows with the block over the lanes and with the blocks, not with
 * the chunk's length. Max and argmax keep a (value, index) pair a lane; a lane's indices rise, so
 * it keeps its first maximum (a NaN beats every number, the first NaN the others), and beats()
 * picks among the lanes. */
#define RED_LANES 64
#define RED_BLOCK 4096
#if OCLML_CHUNKS
#if OCLML_WANT(oclml_reduce_all_sum)
__kernel void oclml_reduce_all_sum(__global const float *x, ulong xo, ulong n, uint op,
                                   __global float *part, __local float *red) {
    __global const float *xs = x + xo;
    OCLML_CHUNK(n, begin, end)
    float total = 0.0f;
    ulong i = begin;
    for (; i + RED_BLOCK <= end; i += RED_BLOCK) {
        float lanes[RED_LANES];
        for (uint l = 0; l < RED_LANES; l++) lanes[l] = 0.0f;
        for (uint b = 0; b < RED_BLOCK; b += RED_LANES)
            for (uint l = 0; l < RED_LANES; l++) lanes[l] += xs[i + b + l];
        for (uint h = RED_LANES / 2; h > 0; h /= 2)
            for (uint l = 0; l < h; l++) lanes[l] += lanes[l + h];
        total += lanes[0];
    }
    float rest = 0.0f;
    for (; i < end; i++) rest += xs[i];
    part[get_global_id(0)] = total + rest;
}
#endif

#if OCLML_WANT(oclml_reduce_all_select)
__kernel void oclml_reduce_all_select(__global const float *x, ulong xo, ulong n, uint op,
                                      __global float *part, __local float *red) {
    __global const float *xs = x + xo;
    OCLML_CHUNK(n, begin, end)
    float acc = -INFINITY;
    uint best = 0xFFFFFFFFu;
    ulong i = begin;
    if (i + RED_LANES <= end) {
        float v[RED_LANES];
        uint at[RED_LANES];
        for (uint l = 0; l < RED_LANES; l++) {
            v[l] = xs[i + l];
            at[l] = (uint)(i + l);
        }
        for (i += RED_LANES; i + RED_LANES <= end; i += RED_LANES)
            for (uint l = 0; l < RED_LANES; l++) {
                const float e = xs[i + l];
                const bool take = isnan(e) ? !isnan(v[l]) : e > v[l];
                v[l] = take ? e : v[l];
                at[l] = take ? (uint)(i + l) : at[l];
            }
        acc = v[0];
        best = at[0];
        for (uint l = 1; l < RED_LANES; l++)
            if (beats(v[l], at[l], acc, best)) {
                acc = v[l];
                best = at[l];
            }
    }
    for (; i < end; i++)
        if (best == 0xFFFFFFFFu || beats(xs[i], (uint)i, acc, best)) {
            acc = xs[i];
            best = (uint)i;
        }
    vstore2((float2)(acc, as_float(best)), get_global_id(0), part);
}
#endif
#else
#if OCLML_WANT(oclml_reduce_all_sum)
__kernel void oclml_reduce_all_sum(__global const float *x, ulong xo, ulong n, uint op,
                                   __global float *part, __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    __global const float *xs = x + xo;
    float4 acc4 = (float4)(0.0f);
    const ulong n4 = n / 4;
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) acc4 += vload4(i, xs);
    float acc = (acc4.x + acc4.y) + (acc4.z + acc4.w);
    const ulong tail = 4 * n4 + get_global_id(0);
    if (tail < n) acc += xs[tail];
    acc = seg_sum(acc, red, lid, L);
    if (lid == 0) part[get_group_id(0)] = acc;
}
#endif

#if OCLML_WANT(oclml_reduce_all_select)
__kernel void oclml_reduce_all_select(__global const float *x, ulong xo, ulong n, uint op,
                                      __global float *part, __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    __global const float *xs = x + xo;
    float acc = -INFINITY;
    uint best = 0xFFFFFFFFu;
    const ulong n4 = n / 4;
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) {
        const float4 v = vload4(i, xs);
        const float e[4] = {v.x, v.y, v.z, v.w};
        for (uint k = 0; k < 4; k++)
            if (best == 0xFFFFFFFFu || beats(e[k], (uint)(4 * i + k), acc, best)) {
                acc = e[k];
                best = (uint)(4 * i + k);
            }
    }
    const ulong tail = 4 * n4 + get_global_id(0);
    if (tail < n && (best == 0xFFFFFFFFu || beats(xs[tail], (uint)tail, acc, best))) {
        acc = xs[tail];
        best = (uint)tail;
    }
    const float2 r = seg_argmax(acc, best, red, lid, L, L);
    if (lid == 0) vstore2(r, get_group_id(0), part);
}
#endif
#endif
