/* Embedding lookup and its deterministic backward.
 * Forward: y[n, :] = table[id(n), :], id(n) = ids[n] when it is an integer in [0, V), else a row
 * of NaN. Work-items stride over y's elements (or float4 groups: EMB_VEC 4, D and every offset a
 * multiple of 4).
 * Backward, as a counting sort of the tokens by id, so that each id's rows are summed in token
 * order by one work-item a column (no float atomics, the same bits every run):
 *   zero:    counts = 0;
 *   count:   counts[id] += 1 by integer atomics, slot[n] = the count before (any order);
 *   scan:    offsets = exclusive prefix sums of counts (one work-group, runs of 8 counts a
 *            work-item), offsets[V] = total;
 *   scatter: tmp[offsets[id] + slot[n]] = n (each id's tokens, in any order);
 *   rank:    sorted[offsets[id] + (tokens of its segment before n)] = n (token order);
 *   sum:     dtable[v, c] = (accumulate ? dtable[v, c] : 0) + dy[sorted[i], c] over v's segment.
 * An invalid id (slot UINT_MAX) takes part in nothing. Cost: linear in N * D + V * D except rank,
 * which reads a token's whole segment: the sum of the squared segment lengths, N^2 at worst (every
 * token one id), in parallel over the tokens; text's most frequent ids keep it far below N * D.
 * dtypes (dtype.h's numbers, fp32 by default): TABLE_DT and Y_DT forward, DY_DT and DTABLE_DT
 * backward; every element is read as a float, the sums are fp32 (dtable's old value included),
 * each output element rounded once. ids are fp32 always. */
#include "dtype.h"

#ifndef EMB_VEC
#define EMB_VEC 1
#endif
#ifndef TABLE_DT
#define TABLE_DT 0
#endif
#ifndef Y_DT
#define Y_DT 0
#endif
#ifndef DY_DT
#define DY_DT 0
#endif
#ifndef DTABLE_DT
#define DTABLE_DT 0
#endif

#define NO_SLOT 0xFFFFFFFFu

/* id(n), or V when ids[n] is not an integer in [0, V). */
inline uint id_of(__global const float *ids, ulong io, uint n, uint V) {
    const float f = ids[io + n];
    return (f >= 0.0f && f < (float)V && f == floor(f)) ? (uint)f : V;
}

#if OCLML_WANT(oclml_embedding_fwd)
__kernel void oclml_embedding_fwd(__global const float *ids, ulong io,
                                  __global const DT_ELEM(TABLE_DT) * table, ulong to,
                                  __global DT_ELEM(Y_DT) * y, ulong yo, uint N, uint V, uint D) {
    const uint W = D / EMB_VEC; /* vectors a row */
    const ulong total = (ulong)N * W;
    for (ulong e = get_global_id(0); e < total; e += get_global_size(0)) {
        const uint n = (uint)(e / W), c = (uint)(e % W), id = id_of(ids, io, n, V);
#if EMB_VEC == 4
        const float4 v = id < V ? DT_VLOAD4(TABLE_DT, table + to + (ulong)id * D, c)
                                : (float4)(NAN, NAN, NAN, NAN);
        DT_VSTORE4(Y_DT, y + yo + (ulong)n * D, c, v);
#else
        DT_STORE(Y_DT, y + yo, (ulong)n * D + c,
                 id < V ? DT_LOAD(TABLE_DT, table + to, (ulong)id * D + c) : NAN);
#endif
    }
}
#endif

#if OCLML_WANT(oclml_embedding_zero)
__kernel void oclml_embedding_zero(__global uint *counts, uint n) {
    for (uint i = get_global_id(0); i < n; i += get_global_size(0)) counts[i] = 0u;
}
#endif

#if OCLML_WANT(oclml_embedding_count)
__kernel void oclml_embedding_count(__global const float *ids, ulong io, uint N, uint V,
                                    __global uint *counts, __global uint *slot) {
    for (uint n = get_global_id(0); n < N; n += get_global_size(0)) {
        const uint id = id_of(ids, io, n, V);
        slot[n] = id < V ? atomic_inc(&counts[id]) : NO_SLOT;
    }
}
#endif

/* One work-group: exclusive prefix sums of counts[0 .. V) into offsets[0 .. V]. Each pass takes
 * SCAN_RUN consecutive counts a work-item (summed serially), scans the work-items' totals in
 * local memory, then writes its run's offsets: a vocabulary of 50257 is a few dozen passes. */
#define SCAN_RUN 8
#if OCLML_WANT(oclml_embedding_scan)
__kernel void oclml_embedding_scan(__global const uint *counts, __global uint *offsets, uint V,
                                   __local uint *part) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    uint carry = 0;
    for (uint base = 0; base < V; base += L * SCAN_RUN) {
        const uint first = base + lid * SCAN_RUN;
        uint run = 0;
        for (uint j = 0; j < SCAN_RUN; j++) run += first + j < V ? counts[first + j] : 0u;
        part[lid] = run;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint s = 1; s < L; s <<= 1) { /* inclusive Hillis-Steele scan of the runs */
            const uint add = lid >= s ? part[lid - s] : 0u;
            barrier(CLK_LOCAL_MEM_FENCE);
            part[lid] += add;
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        uint at = carry + part[lid] - run;
        for (uint j = 0; j < SCAN_RUN && first + j < V; j++) {
            offsets[first + j] = at;
            at += counts[first + j];
        }
        carry += part[L - 1];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) offsets[V] = carry;
}
#endif

#if OCLML_WANT(oclml_embedding_scatter)
__kernel void oclml_embedding_scatter(__global const float *ids, ulong io, uint N, uint V,
                                      __global const uint *slot, __global const uint *offsets,
                                      __global uint *tmp) {
    for (uint n = get_global_id(0); n < N; n += get_global_size(0)) {
        const uint id = id_of(ids, io, n, V);
        if (id < V) tmp[offsets[id] + slot[n]] = n;
    }
}
#endif

#if OCLML_WANT(oclml_embedding_rank)
__kernel void oclml_embedding_rank(__global const float *ids, ulong io, uint N, uint V,
                                   __global const uint *offsets, __global const uint *tmp,
                                   __global uint *sorted) {
    for (uint n = get_global_id(0); n < N; n += get_global_size(0)) {
        const uint id = id_of(ids, io, n, V);
        if (id >= V) continue;
        const uint lo = offsets[id], hi = offsets[id + 1];
        uint rank = 0;
        for (uint i = lo; i < hi; i++) rank += tmp[i] < n;
        sorted[lo + rank] = n;
    }
}
#endif

/* Grid: (column vectors, rows v); the slices of a grid past 65535 groups along v arrive with a
 * global offset, so v is the global id. */
#if OCLML_WANT(oclml_embedding_sum)
__kernel void oclml_embedding_sum(__global const DT_ELEM(DY_DT) * dy, ulong dyo,
                                  __global DT_ELEM(DTABLE_DT) * dtable, ulong dto,
                                  __global const uint *sorted, __global const uint *offsets, uint V,
                                  uint D, uint accumulate) {
    const uint c = get_global_id(0), v = get_global_id(1);
    if (c >= D / EMB_VEC || v >= V) return;
    const uint lo = offsets[v], hi = offsets[v + 1];
#if EMB_VEC == 4
    float4 acc = accumulate ? DT_VLOAD4(DTABLE_DT, dtable + dto + (ulong)v * D, c) : (float4)(0.0f);
    for (uint i = lo; i < hi; i++) acc += DT_VLOAD4(DY_DT, dy + dyo + (ulong)sorted[i] * D, c);
    DT_VSTORE4(DTABLE_DT, dtable + dto + (ulong)v * D, c, acc);
#else
    float acc = accumulate ? DT_LOAD(DTABLE_DT, dtable + dto, (ulong)v * D + c) : 0.0f;
    for (uint i = lo; i < hi; i++) acc += DT_LOAD(DY_DT, dy + dyo, (ulong)sorted[i] * D + c);
    DT_STORE(DTABLE_DT, dtable + dto, (ulong)v * D + c, acc);
#endif
}
#endif
