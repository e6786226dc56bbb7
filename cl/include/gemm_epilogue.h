/* The GEMM kernels' epilogue (cl/ops/gemm.cl): alpha, beta C, the bias, the activation, dropout
 * after it and the stores of pre and y, element by element and as a work-item's tile. The includer
 * defines HAS_BIAS, HAS_PRE and HAS_DROPOUT and the activation (activation.h) first. */
#ifndef OCLML_GEMM_EPILOGUE_H
#define OCLML_GEMM_EPILOGUE_H

#include "philox.h"

/* Dropout in the epilogue: element (r, c) of C is element drop_base + r drop_ld + c of the
 * output that oclml_dropout would mask with the same (seed, offset), so the fused product equals
 * the product then oclml_dropout, bit for bit. y * 0 keeps NaN, as oclml_dropout does. */
#if HAS_DROPOUT
#define DROP_ARGS                                                                              \
    , float drop_p, float drop_scale, uint drop_seed_lo, uint drop_seed_hi, ulong drop_offset, \
        ulong drop_base, uint drop_ld
#define DROP_PASS , drop_p, drop_scale, drop_seed_lo, drop_seed_hi, drop_offset, drop_base, drop_ld
OCLML_INLINE float drop_apply(float y, uint r, uint c DROP_ARGS) {
    return y * drop_mult(drop_base + (ulong)r * drop_ld + c, drop_p, drop_scale,
                         (uint2)(drop_seed_lo, drop_seed_hi), drop_offset);
}
#define DROP_APPLY(y, r, c) drop_apply((y), (r), (c)DROP_PASS)
/* Elements (r, c) and (r, c + 1), c even, of a HAS_DROPOUT 2 tile: both words of one draw. */
#define DROP_PAIR(y0, y1, r, c)                                                          \
    do {                                                                                 \
        const ulong i_d = drop_base + (ulong)(r)*drop_ld + (c);                          \
        const float4 m_d = drop_mult4(i_d / 4, drop_p, drop_scale,                       \
                                      (uint2)(drop_seed_lo, drop_seed_hi), drop_offset); \
        const bool upper_d = (i_d & 2u) != 0;                                            \
        (y0) *= upper_d ? m_d.z : m_d.x;                                                 \
        (y1) *= upper_d ? m_d.w : m_d.y;                                                 \
    } while (0)
/* Dropout on a block's COLS values y: in pairs where the layout puts element j + 1 right of
 * element j (PAIRS, the tensor-core tiles) and HAS_DROPOUT is 2, else one draw an element. */
#define DROP_BLOCK(y, COLS, ROW, COL, PAIRS)                           \
    if ((PAIRS) && HAS_DROPOUT == 2) {                                 \
        _Pragma("unroll") for (uint j_ = 0; j_ < (COLS); j_ += 2)      \
            DROP_PAIR(y[j_], y[j_ + 1], ROW(i_, j_), COL(i_, j_));     \
    } else {                                                           \
        _Pragma("unroll") for (uint j_ = 0; j_ < (COLS); j_++) y[j_] = \
            DROP_APPLY(y[j_], ROW(i_, j_), COL(i_, j_));               \
    }
#else
#define DROP_ARGS
#define DROP_PASS
#define DROP_APPLY(y, r, c) (y)
#define DROP_BLOCK(y, COLS, ROW, COL, PAIRS)
#endif

/* The epilogue of an element, in two steps. epilogue_value scales it, adds beta C and the bias
 * and returns the pre-activation; it tests no bounds (an element past the edge reads C and the
 * bias at (0, 0) and is never stored), so that a tile's unrolled epilogue is one straight-line
 * block whose activations the compiler interleaves. Under a bounds test each element was its
 * own branch, run one after another: the GELU epilogue cost a linear layer 10% of its product on
 * the H100 (bench/DECISIONS.md, "Epilogue as straight-line code"). with_beta: the caller's one
 * test of beta != 0 (beta == 0 does not read C, which may hold NaN). epilogue_store writes the
 * pre-activation and act(z) where (r, c) lies inside. */
OCLML_INLINE float epilogue_value(__global const float *C, uint ldc, __global const float *bias,
                                  uint M, uint N, uint r, uint c, float acc, float alpha,
                                  float beta, bool with_beta) {
    const bool in = r < M && c < N;
    const uint rr = in ? r : 0u, cc = in ? c : 0u;
    float v = alpha * acc;
    if (with_beta) v += beta * C[(size_t)rr * ldc + cc];
#if HAS_BIAS == 2
    v += bias[rr]; /* one value per row (convolution: per output channel) */
#elif HAS_BIAS
    v += bias[cc];
#endif
    return v;
}

OCLML_INLINE void epilogue_store(__global float *C, uint ldc, __global float *pre, uint ldp, uint M,
                                 uint N, uint r, uint c, float z, float y) {
    if (r < M && c < N) {
#if HAS_PRE
        pre[(size_t)r * ldp + c] = z;
#endif
        C[(size_t)r * ldc + c] = y;
    }
}

/* A work-item's tile epilogue, ROWS row blocks of COLS elements: each block's values and
 * activations as straight-line code, then its dropout, then its stores; beta tested once.
 * ROW(i, j), COL(i, j) and ACC(i, j) give element j of block i (C, bias, pre and the sizes in
 * scope); PAIRS: element 2 j + 1 is right of element 2 j. */
#define TILE_EPILOGUE_BLOCKS(ROWS, COLS, ROW, COL, ACC, with_beta, PAIRS)                      \
    _Pragma("unroll") for (uint i_ = 0; i_ < (ROWS); i_++) {                                   \
        float z_[COLS], y_[COLS];                                                              \
        _Pragma("unroll") for (uint j_ = 0; j_ < (COLS); j_++) {                               \
            z_[j_] = epilogue_value(C, ldc, bias, M, N, ROW(i_, j_), COL(i_, j_), ACC(i_, j_), \
                                    alpha, beta, with_beta);                                   \
            y_[j_] = act_apply(z_[j_]);                                                        \
        }                                                                                      \
        DROP_BLOCK(y_, COLS, ROW, COL, PAIRS)                                                  \
        _Pragma("unroll") for (uint j_ = 0; j_ < (COLS); j_++)                                 \
            epilogue_store(C, ldc, pre, ldp, M, N, ROW(i_, j_), COL(i_, j_), z_[j_], y_[j_]);  \
    }
#define TILE_EPILOGUE(ROWS, COLS, ROW, COL, ACC, PAIRS)               \
    if (beta != 0.0f) {                                               \
        TILE_EPILOGUE_BLOCKS(ROWS, COLS, ROW, COL, ACC, true, PAIRS)  \
    } else {                                                          \
        TILE_EPILOGUE_BLOCKS(ROWS, COLS, ROW, COL, ACC, false, PAIRS) \
    }

#endif
