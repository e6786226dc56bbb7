/* Row kernels (softmax, norms): the register path's layout and segment reductions.
 * The variant is chosen by the host (lib/ops/rows.c) and passed as defines: ROW_ITEMS vectors of
 * ROW_VEC (1 or 4) floats per work-item. Long rows take the chunked path, OCLML_LONG_ITEMS
 * elements per work-item and chunk (rows_abi.h). */
#ifndef OCLML_ROWS_H
#define OCLML_ROWS_H
#include "common.h"
#include "dtype.h"
#include "rows_abi.h"

#ifndef ROW_ITEMS
#define ROW_ITEMS 1
#endif
#ifndef ROW_VEC
#define ROW_VEC 1
#endif
#define ROW_FLOATS (ROW_ITEMS * ROW_VEC)

/*
 * A work-group of L work-items handles L/G rows at once; a "segment" of G consecutive
 * work-items (G a power of two) owns one row. Work-item `lane` of a segment holds the row's
 * elements (i*G + lane)*VEC .. +VEC-1 for i < ITEMS in registers, so a row is read from memory
 * once, reduced, and written once. Loads are coalesced: consecutive lanes touch consecutive
 * elements (or float4 vectors when VEC == 4; the host picks VEC 4 only when the row length and
 * every tensor offset are multiples of 4, so the casts below are aligned). */

/* Reductions over the G work-items of a segment through local memory (OpenCL 1.2 has no
 * portable sub-group operations). Every work-item of the work-group must call them. */
inline float seg_sum(float v, __local float *red, uint lid, uint G) {
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = G >> 1; s > 0; s >>= 1) {
        if ((lid & (G - 1)) < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[lid & ~(G - 1)];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline float seg_max(float v, __local float *red, uint lid, uint G) {
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = G >> 1; s > 0; s >>= 1) {
        if ((lid & (G - 1)) < s) red[lid] = fmax(red[lid], red[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[lid & ~(G - 1)];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* A register kernel's reductions over its row's segment. ROW_SOLO (CPUs): one work-item owns a
 * whole row (G = 1), so the reduction is the value itself, with no barrier: a CPU runtime runs a
 * work-group as loops over its work-items, split at every barrier, and keeps each work-item's
 * arrays across them. */
#ifndef ROW_SOLO
#define ROW_SOLO 0
#endif
#if ROW_SOLO
#define ROW_SUM(v) (v)
#define ROW_MAX(v) (v)
#else
#define ROW_SUM(v) seg_sum((v), red, lid, G)
#define ROW_MAX(v) seg_max((v), red, lid, G)
#endif

/* s += the sum over k < ROW_FLOATS of expr (which names k). A work-item holding a whole row
 * (ROW_SOLO) keeps ROW_PARTS interleaved partial sums and pairs them at the end: rounding grows
 * with the row's length over ROW_PARTS and its logarithm, as with the GPU layout's lanes and
 * tree, not with the whole length. The inner loop runs along the partial sums, which a CPU
 * compiler turns into vector instructions. */
#if ROW_SOLO
#define ROW_PARTS (ROW_FLOATS < 64 ? ROW_FLOATS : 64)
#define ROW_ADD(s, expr)                                            \
    {                                                               \
        float p_[ROW_PARTS];                                        \
        for (uint j_ = 0; j_ < ROW_PARTS; j_++) p_[j_] = 0.0f;      \
        for (uint b_ = 0; b_ < ROW_FLOATS; b_ += ROW_PARTS)         \
            for (uint j_ = 0; j_ < ROW_PARTS; j_++) {               \
                const uint k = b_ + j_;                             \
                p_[j_] += (expr);                                   \
            }                                                       \
        for (uint w_ = ROW_PARTS / 2; w_ > 0; w_ >>= 1)             \
            for (uint j_ = 0; j_ < w_; j_++) p_[j_] += p_[j_ + w_]; \
        s += p_[0];                                                 \
    }
#else
#define ROW_ADD(s, expr) \
    for (uint k = 0; k < ROW_FLOATS; k++) s += (expr);
#endif

/* m = fmax(m, the max over k < ROW_FLOATS of expr (which names k)). A CPU's work-item (ROW_SOLO)
 * keeps ROW_PARTS interleaved maxima, as ROW_ADD keeps sums: one running fmax is a chain the
 * CPU waits on element by element (a fifth of PoCL's softmax time); fmax ignores NaN either way,
 * so the result is the same. */
#if ROW_SOLO
#define ROW_FOLD_MAX(m, expr)                                                    \
    {                                                                            \
        float q_[ROW_PARTS];                                                     \
        for (uint j_ = 0; j_ < ROW_PARTS; j_++) q_[j_] = -INFINITY;              \
        for (uint b_ = 0; b_ < ROW_FLOATS; b_ += ROW_PARTS)                      \
            for (uint j_ = 0; j_ < ROW_PARTS; j_++) {                            \
                const uint k = b_ + j_;                                          \
                q_[j_] = fmax(q_[j_], (expr));                                   \
            }                                                                    \
        for (uint w_ = ROW_PARTS / 2; w_ > 0; w_ >>= 1)                          \
            for (uint j_ = 0; j_ < w_; j_++) q_[j_] = fmax(q_[j_], q_[j_ + w_]); \
        m = fmax(m, q_[0]);                                                      \
    }
#else
#define ROW_FOLD_MAX(m, expr) \
    for (uint k = 0; k < ROW_FLOATS; k++) m = fmax(m, (expr));
#endif

/* v[ITEMS*VEC] <- the lane's elements of row p (cols long) of dtype dt (dtype.h), as floats;
 * missing elements get `fill`. ROW_LOAD1 and ROW_LOAD4 are the fp32 ones. */
#if ROW_SOLO
/* A CPU's work-item (G = 1) holds its whole row: the row's elements in one loop and the fill in
 * another, with no test an element, so that the compiler vectorises both (a test a float4 in one
 * loop took a quarter of PoCL's softmax time). */
#define ROW_LOAD1_DT(dt, v, p, ITEMS, lane, G, cols, ok, fill)        \
    {                                                                 \
        const uint n_ = (ok) ? min((uint)(cols), (uint)(ITEMS)) : 0u; \
        for (uint i_ = 0; i_ < n_; i_++) v[i_] = DT_LOAD(dt, p, i_);  \
        for (uint i_ = n_; i_ < (ITEMS); i_++) v[i_] = (fill);        \
    }
#define ROW_LOAD4_DT(dt, v, p, ITEMS, lane, G, cols, ok, fill)            \
    {                                                                     \
        const uint n_ = (ok) ? min((uint)(cols) / 4, (uint)(ITEMS)) : 0u; \
        for (uint i_ = 0; i_ < n_; i_++) {                                \
            const float4 q_ = DT_LOAD4(dt, p, i_);                        \
            v[4 * i_] = q_.x;                                             \
            v[4 * i_ + 1] = q_.y;                                         \
            v[4 * i_ + 2] = q_.z;                                         \
            v[4 * i_ + 3] = q_.w;                                         \
        }                                                                 \
        for (uint i_ = 4 * n_; i_ < 4 * (ITEMS); i_++) v[i_] = (fill);    \
    }
#else
#define ROW_LOAD1_DT(dt, v, p, ITEMS, lane, G, cols, ok, fill)       \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                          \
        const uint c_ = i_ * (G) + (lane);                           \
        v[i_] = ((ok) && c_ < (cols)) ? DT_LOAD(dt, p, c_) : (fill); \
    }
#define ROW_LOAD4_DT(dt, v, p, ITEMS, lane, G, cols, ok, fill)                              \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                                                 \
        const uint c_ = i_ * (G) + (lane);                                                  \
        const float4 q_ = ((ok) && c_ < (cols) / 4) ? DT_LOAD4(dt, p, c_) : (float4)(fill); \
        v[4 * i_] = q_.x;                                                                   \
        v[4 * i_ + 1] = q_.y;                                                               \
        v[4 * i_ + 2] = q_.z;                                                               \
        v[4 * i_ + 3] = q_.w;                                                               \
    }
#endif
#define ROW_LOAD1(v, p, ITEMS, lane, G, cols, ok, fill) \
    ROW_LOAD1_DT(0, v, p, ITEMS, lane, G, cols, ok, fill)
#define ROW_LOAD4(v, p, ITEMS, lane, G, cols, ok, fill) \
    ROW_LOAD4_DT(0, v, p, ITEMS, lane, G, cols, ok, fill)
/* The row column of register element k (of ROW_FLOATS) of lane `lane`, as ROW_LOAD lays them. */
#if ROW_VEC == 4
#define ROW_COL(k, lane, G) (((((k) >> 2) * (G) + (lane)) << 2) + ((k)&3))
#else
#define ROW_COL(k, lane, G) ((k) * (G) + (lane))
#endif

/* Row p <- v (only existing elements), rounded to dtype dt. */
#if ROW_SOLO
#define ROW_STORE1_DT(dt, v, p, ITEMS, lane, G, cols, ok)             \
    {                                                                 \
        const uint n_ = (ok) ? min((uint)(cols), (uint)(ITEMS)) : 0u; \
        for (uint i_ = 0; i_ < n_; i_++) DT_STORE(dt, p, i_, v[i_]);  \
    }
#define ROW_STORE4_DT(dt, v, p, ITEMS, lane, G, cols, ok)                                \
    {                                                                                    \
        const uint n_ = (ok) ? min((uint)(cols) / 4, (uint)(ITEMS)) : 0u;                \
        for (uint i_ = 0; i_ < n_; i_++)                                                 \
            DT_STORE4(dt, p, i_,                                                         \
                      (float4)(v[4 * i_], v[4 * i_ + 1], v[4 * i_ + 2], v[4 * i_ + 3])); \
    }
#else
#define ROW_STORE1_DT(dt, v, p, ITEMS, lane, G, cols, ok)    \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                  \
        const uint c_ = i_ * (G) + (lane);                   \
        if ((ok) && c_ < (cols)) DT_STORE(dt, p, c_, v[i_]); \
    }
#define ROW_STORE4_DT(dt, v, p, ITEMS, lane, G, cols, ok)                                \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                                              \
        const uint c_ = i_ * (G) + (lane);                                               \
        if ((ok) && c_ < (cols) / 4)                                                     \
            DT_STORE4(dt, p, c_,                                                         \
                      (float4)(v[4 * i_], v[4 * i_ + 1], v[4 * i_ + 2], v[4 * i_ + 3])); \
    }
#endif
#define ROW_STORE1(v, p, ITEMS, lane, G, cols, ok) ROW_STORE1_DT(0, v, p, ITEMS, lane, G, cols, ok)
#define ROW_STORE4(v, p, ITEMS, lane, G, cols, ok) ROW_STORE4_DT(0, v, p, ITEMS, lane, G, cols, ok)
/* Whether element k of v[] (k < ITEMS*VEC) is a real element of the row. */
#define ROW_VALID1(k, lane, G, cols) (((k) * (G) + (lane)) < (cols))
#define ROW_VALID4(k, lane, G, cols) (((((k) >> 2) * (G) + (lane)) << 2) + ((k)&3) < (cols))

/* The standard prologue of a row kernel: which row this work-item serves and its lane. */
#define ROW_PROLOGUE(G, rows)                                                         \
    const uint lid = get_local_id(0);                                                 \
    const uint lane = lid & ((G)-1);                                                  \
    const ulong row = (ulong)get_group_id(0) * (get_local_size(0) / (G)) + lid / (G); \
    const bool ok = row < (rows);

/* The variant's accessors: ROW_LOAD, ROW_STORE, ROW_VALID for ROW_VEC. */
#if ROW_VEC == 4
#define ROW_LOAD ROW_LOAD4
#define ROW_STORE ROW_STORE4
#define ROW_LOAD_DT ROW_LOAD4_DT
#define ROW_STORE_DT ROW_STORE4_DT
#define ROW_VALID ROW_VALID4
#else
#define ROW_LOAD ROW_LOAD1
#define ROW_STORE ROW_STORE1
#define ROW_LOAD_DT ROW_LOAD1_DT
#define ROW_STORE_DT ROW_STORE1_DT
#define ROW_VALID ROW_VALID1
#endif

/* The chunked path for long rows: grid (chunks x L, rows); work-item lid of chunk `chunk` visits
 * columns c = chunk L ITEMS + lid + j L, j < OCLML_LONG_ITEMS, of row `row` (softmax, norms,
 * cross-entropy). */
#define CHUNK_LOOP(c)                                                                          \
    const uint lid = get_local_id(0), L = get_local_size(0), chunk = get_group_id(0);          \
    const ulong row = get_global_id(1);                                                        \
    for (uint j = 0, c = chunk * L * OCLML_LONG_ITEMS + lid; j < OCLML_LONG_ITEMS && c < cols; \
         j++, c += L)

/* v[j] = line[c] for the columns CHUNK_LOOP visits in order (fill past cols), all loads issued
 * before any is used: in CHUNK_LOOP's early-exit loop each load waited for the last (a round
 * trip a column: the cross-entropy passes ran at a third of the copy rate on the H100). */
#define CHUNK_LOAD(v, line, fill)                                                    \
    do {                                                                             \
        _Pragma("unroll") for (uint j_ = 0; j_ < OCLML_LONG_ITEMS; j_++) {           \
            const uint c_ = get_group_id(0) * get_local_size(0) * OCLML_LONG_ITEMS + \
                            get_local_id(0) + j_ * get_local_size(0);                \
            (v)[j_] = c_ < cols ? (line)[c_] : (fill);                               \
        }                                                                            \
    } while (0)
/* The same from a line of dtype dt. */
#define CHUNK_LOAD_DT(dt, v, line, fill)                                             \
    do {                                                                             \
        _Pragma("unroll") for (uint j_ = 0; j_ < OCLML_LONG_ITEMS; j_++) {           \
            const uint c_ = get_group_id(0) * get_local_size(0) * OCLML_LONG_ITEMS + \
                            get_local_id(0) + j_ * get_local_size(0);                \
            (v)[j_] = c_ < cols ? DT_LOAD(dt, line, c_) : (fill);                    \
        }                                                                            \
    } while (0)
/* The same where `present` (an optional operand's flag), else fill everywhere (line may be
 * NULL then). */
#define CHUNK_LOAD_IF(present, v, line, fill)                                                 \
    do {                                                                                      \
        if (present) {                                                                        \
            CHUNK_LOAD(v, line, fill);                                                        \
        } else {                                                                              \
            _Pragma("unroll") for (uint j_ = 0; j_ < OCLML_LONG_ITEMS; j_++)(v)[j_] = (fill); \
        }                                                                                     \
    } while (0)

/* The same from a line of dtype dt. */
#define CHUNK_LOAD_IF_DT(present, dt, v, line, fill)                                          \
    do {                                                                                      \
        if (present) {                                                                        \
            CHUNK_LOAD_DT(dt, v, line, fill);                                                 \
        } else {                                                                              \
            _Pragma("unroll") for (uint j_ = 0; j_ < OCLML_LONG_ITEMS; j_++)(v)[j_] = (fill); \
        }                                                                                     \
    } while (0)

#endif
