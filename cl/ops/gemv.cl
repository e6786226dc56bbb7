/* Products with few rows (GEMV and its neighbours): C = act(alpha op(A) op(B) + beta C + bias)
 * for op(A) of ROWS (1 to 4) rows, the GEMM family's epilogue (gemm_epilogue.h). Such a product
 * reads each element of B once and does ROWS FMAs with it, so it is bound by reading B; the
 * tiled kernels waste most of a tile's rows on it and split K over launches to fill the device.
 * Here a work-group takes a slice of C's columns and all of K: its work-items split K between
 * them, each summing its share of every column it holds, and the shares are summed in local
 * memory in a fixed tree (the same bits run to run), then the epilogue is applied once.
 *
 *   TRANS_B 0 (B is K x N, rows contiguous): COL_QUADS work-items side by side read four
 *     neighbouring columns each (a float4 with VEC_B), K_SLICES rows of B at a time.
 *   TRANS_B 1 (B is N x K, PyTorch's weight layout): K_SLICES work-items read one column of
 *     op(B) (a row of B) together, four neighbouring elements each; COL_QUADS columns a group.
 *
 * Grid: dimension 0 groups of NTHREADS = COL_QUADS K_SLICES work-items, dimension 1 batch
 * entries times K splits (striding past the grid's limit). With splits > 1 each split sums its
 * kchunk rows of K into its own slice of C (a workspace, no epilogue) and the GEMM's finishing
 * kernel sums the slices: for products with too few columns to fill the device. Edges read
 * nothing past N or K. */
#include "activation.h"

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef VEC_A
#define VEC_A 0 /* float4 reads of A (TRANS_B 1, A not transposed): as VEC_B */
#endif
#ifndef VEC_B
#define VEC_B \
    0 /* float4 reads of B: its leading dimension, offset and batch stride multiples of 4 */
#endif
#ifndef ROWS
#define ROWS 1
#endif
#ifndef COL_QUADS
#define COL_QUADS 8
#endif
#ifndef K_SLICES
#define K_SLICES 32 /* a power of two (sum_slices halves it) */
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_PRE
#define HAS_PRE 0
#endif
#ifndef HAS_DROPOUT
#define HAS_DROPOUT 0
#endif
#include "gemm_epilogue.h"

#if OCLML_WANT(oclml_gemv)
#define NTHREADS (COL_QUADS * K_SLICES)
/* Element k of op(A)'s row r. */
#if TRANS_A
#define A_AT(r, k) A[(size_t)(k)*lda + (r)]
#else
#define A_AT(r, k) A[(size_t)(r)*lda + (k)]
#endif

/* Elements k .. k + 3 of op(A)'s row r (all inside K). */
OCLML_INLINE float4 row_quad(__global const float *A, uint lda, uint r, uint k) {
#if VEC_A
    return *(__global const float4 *)(A + (size_t)r * lda + k);
#else
    return (float4)(A_AT(r, k), A_AT(r, k + 1), A_AT(r, k + 2), A_AT(r, k + 3));
#endif
}

/* acc + a . b, summed x, y, z, w in turn. */
OCLML_INLINE float dot4_add(float4 a, float4 b, float acc) {
    return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, acc))));
}

/* The work-items' partial sums, summed over the K_SLICES work-items that share each column
 * (slice s holds red[s * STRIDE + x]) by halves: slice s adds slice s + span while s < span.
 * Every work-item calls it. */
OCLML_INLINE void sum_slices(float *part, uint count, __local float *red, uint slice, uint x0,
                             uint stride) {
    for (uint span = K_SLICES / 2; span > 0; span /= 2) {
        if (slice >= span && slice < 2 * span)
            for (uint i = 0; i < count; i++) red[(slice - span) * stride + x0 + i] = part[i];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (slice < span)
            for (uint i = 0; i < count; i++) part[i] += red[slice * stride + x0 + i];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

__kernel __attribute__((reqd_work_group_size(NTHREADS, 1, 1))) void
oclml_gemv(__global const float *A0, ulong a_off, uint lda, ulong a_stride,
           __global const float *B0, ulong b_off, uint ldb, ulong b_stride, __global float *C0,
           ulong c_off, uint ldc, ulong c_stride, uint M, uint N, uint K, float alpha, float beta,
           __global const float *bias, ulong bias_off, __global float *pre0, ulong pre_off,
           uint ldp, ulong pre_stride, uint batch, uint splits, uint kchunk DROP_ARGS) {
    /* Half the work-items' sums at a time (sum_slices); one set where there is one slice. */
    __local float red[(NTHREADS > 1 ? NTHREADS / 2 : 1) * ROWS * 4];
    const uint lid = get_local_id(0);
#if HAS_BIAS
    bias += bias_off;
#endif
    for (uint z = get_group_id(1); z < batch * splits; z += get_num_groups(1)) {
        /* This batch entry's operands, under the names the epilogue (gemm_epilogue.h) reads, and
         * its K range (split z % splits: its partial sums in slice z of C, a workspace). */
        const uint entry = z / splits, kbeg = z % splits * kchunk, kend = min(K, kbeg + kchunk);
        __global const float *A = A0 + a_off + entry * a_stride;
        __global const float *B = B0 + b_off + entry * b_stride;
        __global float *C = C0 + c_off + z * c_stride;
#if HAS_PRE
        __global float *pre = pre0 + pre_off + entry * pre_stride;
#else
        __global float *pre = pre0;
#endif
#if TRANS_B
        /* K_SLICES work-items on column col, four elements of K at a time. */
        const uint slice = lid % K_SLICES, col = get_group_id(0) * COL_QUADS + lid / K_SLICES;
        float acc[ROWS];
        for (uint r = 0; r < ROWS; r++) acc[r] = 0.0f;
        if (col < N) {
            __global const float *bc = B + (size_t)col * ldb;
            uint k = kbeg + 4 * slice;
#if VEC_B
            /* Two float4s of the column in flight a work-item. */
            for (; k + 4 * K_SLICES + 3 < kend; k += 8 * K_SLICES) {
                const float4 b0 = *(__global const float4 *)(bc + k),
                             b1 = *(__global const float4 *)(bc + k + 4 * K_SLICES);
                for (uint r = 0; r < ROWS; r++) {
                    const float4 a0 = row_quad(A, lda, r, k),
                                 a1 = row_quad(A, lda, r, k + 4 * K_SLICES);
                    acc[r] = dot4_add(a1, b1, dot4_add(a0, b0, acc[r]));
                }
            }
            for (; k + 3 < kend; k += 4 * K_SLICES) {
                const float4 b0 = *(__global const float4 *)(bc + k);
                for (uint r = 0; r < ROWS; r++) {
                    const float4 a0 = row_quad(A, lda, r, k);
                    acc[r] = dot4_add(a0, b0, acc[r]);
                }
            }
#endif
            for (; k < kend; k += 4 * K_SLICES)
                for (uint e = 0; e < 4 && k + e < kend; e++) {
                    const float bv = bc[k + e];
                    for (uint r = 0; r < ROWS; r++) acc[r] = fma(A_AT(r, k + e), bv, acc[r]);
                }
        }
        sum_slices(acc, ROWS, red, slice, lid / K_SLICES * ROWS, COL_QUADS * ROWS);
        if (slice == 0) {
#define GEMV_ROW(i, j) (i)
#define GEMV_COL(i, j) (col)
#define GEMV_ACC(i, j) acc[i]
            TILE_EPILOGUE(ROWS, 1, GEMV_ROW, GEMV_COL, GEMV_ACC, 0)
        }
#else
        /* COL_QUADS work-items side by side on four columns each, K_SLICES rows of B apart. */
        const uint quad = lid % COL_QUADS, slice = lid / COL_QUADS;
        const uint col = (get_group_id(0) * COL_QUADS + quad) * 4;
        float acc[ROWS * 4];
        for (uint i = 0; i < ROWS * 4; i++) acc[i] = 0.0f;
        if (col < N) {
            uint k = kbeg + slice;
#if VEC_B
            if (col + 3 < N) /* Two rows of B in flight a work-item. */
                for (; k + K_SLICES < kend; k += 2 * K_SLICES) {
                    const float4 b0 = *(__global const float4 *)(B + (size_t)k * ldb + col),
                                 b1 = *(__global const float4 *)(B + (size_t)(k + K_SLICES) * ldb +
                                                                 col);
                    for (uint r = 0; r < ROWS; r++) {
                        const float a0 = A_AT(r, k), a1 = A_AT(r, k + K_SLICES);
                        acc[4 * r] = fma(a1, b1.x, fma(a0, b0.x, acc[4 * r]));
                        acc[4 * r + 1] = fma(a1, b1.y, fma(a0, b0.y, acc[4 * r + 1]));
                        acc[4 * r + 2] = fma(a1, b1.z, fma(a0, b0.z, acc[4 * r + 2]));
                        acc[4 * r + 3] = fma(a1, b1.w, fma(a0, b0.w, acc[4 * r + 3]));
                    }
                }
#endif
            for (; k < kend; k += K_SLICES)
                for (uint e = 0; e < 4 && col + e < N; e++) {
                    const float bv = B[(size_t)k * ldb + col + e];
                    for (uint r = 0; r < ROWS; r++)
                        acc[4 * r + e] = fma(A_AT(r, k), bv, acc[4 * r + e]);
                }
        }
        sum_slices(acc, ROWS * 4, red, slice, quad * ROWS * 4, COL_QUADS * ROWS * 4);
        if (slice == 0) {
#define GEMV_ROW(i, j) (i)
#define GEMV_COL(i, j) (col + (j))
#define GEMV_ACC(i, j) acc[4 * (i) + (j)]
            TILE_EPILOGUE(ROWS, 4, GEMV_ROW, GEMV_COL, GEMV_ACC, 0)
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE); /* red is reused by the next batch entry */
    }
}
#endif
