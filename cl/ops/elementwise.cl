/* Elementwise ops: unary functions and their backward, binary ops with a tensor, a scalar or a
 * row vector broadcast over rows. On GPUs work-items stride over float4 groups (vload4/vstore4
 * need only float alignment, so any tensor offset works; neighbours take neighbours, so loads
 * coalesce); the last n % 4 elements go one per work-item. On CPUs (OCLML_CHUNKS) a work-item takes
 * one contiguous chunk, a multiple of 16 elements long, in a plain loop over elements that the
 * CPU compiler vectorises: on PoCL 2.3-7x faster than the float4 stride (bench/DECISIONS.md,
 * "Elementwise ops on CPUs").
 * NaN in gives NaN out (relu, max and min included); +-1e4 never overflows sigmoid, tanh, gelu
 * or silu.
 * Variants: the host picks the function with -DUNARY=NAME (U_NAME and its derivative D_NAME below)
 * or -DBINARY=NAME (B_NAME), and the kernel shape by the kernels it wants; the tensors' dtypes by
 * X_DT (x, or a), B_DT (b), G_DT (dy) and Y_DT (y, or dx), dtype.h's numbers, fp32 by default:
 * the math in fp32, each output rounded once. */
#include "activation.h"
#include "dtype.h"

#ifndef X_DT
#define X_DT 0
#endif
#ifndef B_DT
#define B_DT 0
#endif
#ifndef G_DT
#define G_DT 0
#endif
#ifndef Y_DT
#define Y_DT 0
#endif
#define XT DT_ELEM(X_DT)
#define BT DT_ELEM(B_DT)
#define GT DT_ELEM(G_DT)
#define YT DT_ELEM(Y_DT)

/* y = f(x); p is the op's scalar parameter (pow's exponent). */
#define U_NEG(x, p) (-(x))
#define U_ABS(x, p) fabs(x)
#define U_EXP(x, p) exp(x)
#define U_LOG(x, p) log(x)
#define U_SQRT(x, p) sqrt(x)
#define U_RSQRT(x, p) (1.0f / sqrt(x))
#define U_RECIP(x, p) (1.0f / (x))
#define U_RELU(x, p) relu_f(x)
#define U_SIGMOID(x, p) oclml_sigmoid(x)
#define U_TANH(x, p) tanh(x)
#define U_GELU_ERF(x, p) gelu_erf_f(x)
#define U_GELU_TANH(x, p) gelu_tanh_f(x)
#define U_SILU(x, p) silu_f(x)
#define U_POW(x, p) pow((x), (p))

/* dx = dy * f'(x). */
#define D_NEG(x, g, p) (-(g))
#define D_ABS(x, g, p) (isnan(x) ? (x) : (g)*sign(x)) /* sign(NaN) is 0: keep the NaN */
#define D_EXP(x, g, p) ((g)*exp(x))
#define D_LOG(x, g, p) ((g) / (x))
#define D_SQRT(x, g, p) ((g)*0.5f / sqrt(x))
#define D_RSQRT(x, g, p) ((g) * -0.5f / ((x)*sqrt(x)))
#define D_RECIP(x, g, p) (-(g) / ((x) * (x)))
#define D_RELU(x, g, p) (isnan(x) ? (x) : (x) > 0.0f ? (g) : 0.0f)
#define D_SIGMOID(x, g, p) ((g)*oclml_sigmoid(x) * oclml_sigmoid(-(x)))
#define D_TANH(x, g, p) ((g)*sech2(x))
#define D_GELU_ERF(x, g, p) ((g)*d_gelu_erf(x))
#define D_GELU_TANH(x, g, p) ((g)*d_gelu_tanh(x))
#define D_SILU(x, g, p) ((g)*d_silu(x))
#define D_POW(x, g, p) ((g) * (p)*pow((x), (p)-1.0f))

/* Binary ops, NaN-propagating max and min. */
#define B_ADD(a, b) ((a) + (b))
#define B_SUB(a, b) ((a) - (b))
#define B_MUL(a, b) ((a) * (b))
#define B_DIV(a, b) ((a) / (b))
#define B_MAX(a, b) ((isnan(a) || isnan(b)) ? (a) + (b) : fmax((a), (b)))
#define B_MIN(a, b) ((isnan(a) || isnan(b)) ? (a) + (b) : fmin((a), (b)))

/* Applies F to each component of a float4 (F takes scalars). */
#define MAP4(F, v_, p_) (float4)(F((v_).x, p_), F((v_).y, p_), F((v_).z, p_), F((v_).w, p_))
#define MAP4_2(F, a_, b_) \
    (float4)(F((a_).x, (b_).x), F((a_).y, (b_).y), F((a_).z, (b_).z), F((a_).w, (b_).w))
#define MAP4_3(F, s_, t_, p_)                                                     \
    (float4)(F((s_).x, (t_).x, p_), F((s_).y, (t_).y, p_), F((s_).z, (t_).z, p_), \
             F((s_).w, (t_).w, p_))

#if OCLML_CHUNKS
#define EACH_ELEMENT(body4, body1) \
    OCLML_FOR_EACH(i, n) { body1 }
#else
#define EACH_ELEMENT(body4, body1)                                      \
    const ulong n4 = n / 4;                                             \
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) { \
        body4                                                           \
    }                                                                   \
    {                                                                   \
        const ulong i = 4 * n4 + get_global_id(0);                      \
        if (i < n) {                                                    \
            body1                                                       \
        }                                                               \
    }
#endif

/* The variant's function: UNARY=RELU selects U_RELU and D_RELU, BINARY=ADD selects B_ADD. */
#define EW_CAT(a, b) EW_CAT_(a, b)
#define EW_CAT_(a, b) a##b
#ifndef UNARY
#define UNARY NEG
#endif
#ifndef BINARY
#define BINARY ADD
#endif

#define OCLML_UNARY(F, D)                                                                        \
    __kernel void oclml_unary(__global const XT *x, ulong xo, __global YT *y, ulong yo, ulong n, \
                              float p) {                                                         \
        __global const XT *xs = x + xo;                                                          \
        __global YT *ys = y + yo;                                                                \
        EACH_ELEMENT(DT_VSTORE4(Y_DT, ys, i, MAP4(F, DT_VLOAD4(X_DT, xs, i), p));                \
                     , DT_STORE(Y_DT, ys, i, F(DT_LOAD(X_DT, xs, i), p));)                       \
    }
#if OCLML_WANT(oclml_unary)
OCLML_UNARY(EW_CAT(U_, UNARY), EW_CAT(D_, UNARY))
#endif

#define OCLML_UNARY_BWD(F, D)                                                                      \
    __kernel void oclml_unary_bwd(__global const XT *x, ulong xo, __global const GT *dy, ulong go, \
                                  __global YT *dx, ulong dxo, ulong n, float p) {                  \
        __global const XT *xs = x + xo;                                                            \
        __global const GT *gs = dy + go;                                                           \
        __global YT *ds = dx + dxo;                                                                \
        EACH_ELEMENT(                                                                              \
            DT_VSTORE4(Y_DT, ds, i, MAP4_3(D, DT_VLOAD4(X_DT, xs, i), DT_VLOAD4(G_DT, gs, i), p)); \
            , DT_STORE(Y_DT, ds, i, D(DT_LOAD(X_DT, xs, i), DT_LOAD(G_DT, gs, i), p));)            \
    }
#if OCLML_WANT(oclml_unary_bwd)
OCLML_UNARY_BWD(EW_CAT(U_, UNARY), EW_CAT(D_, UNARY))
#endif

/* y = a op b for same-shape b; a op s for a scalar; a op b[col] for a row vector b of `cols`
 * elements broadcast over rows (the column advances by a fixed step per stride, so no 64-bit
 * division runs per element). */
#define OCLML_BINARY(F)                                                                         \
    __kernel void oclml_binary(__global const XT *a, ulong ao, __global const BT *b, ulong bo,  \
                               __global YT *y, ulong yo, ulong n) {                             \
        __global const XT *as = a + ao;                                                         \
        __global const BT *bs = b + bo;                                                         \
        __global YT *ys = y + yo;                                                               \
        EACH_ELEMENT(                                                                           \
            DT_VSTORE4(Y_DT, ys, i, MAP4_2(F, DT_VLOAD4(X_DT, as, i), DT_VLOAD4(B_DT, bs, i))); \
            , DT_STORE(Y_DT, ys, i, F(DT_LOAD(X_DT, as, i), DT_LOAD(B_DT, bs, i)));)            \
    }
#if OCLML_WANT(oclml_binary)
OCLML_BINARY(EW_CAT(B_, BINARY))
#endif

#define OCLML_BINARY_SCALAR(F)                                                                 \
    __kernel void oclml_binary_scalar(__global const XT *a, ulong ao, float s, __global YT *y, \
                                      ulong yo, ulong n) {                                     \
        __global const XT *as = a + ao;                                                        \
        __global YT *ys = y + yo;                                                              \
        const float4 s4 = (float4)(s);                                                         \
        EACH_ELEMENT(DT_VSTORE4(Y_DT, ys, i, MAP4_2(F, DT_VLOAD4(X_DT, as, i), s4));           \
                     , DT_STORE(Y_DT, ys, i, F(DT_LOAD(X_DT, as, i), s));)                     \
    }
#if OCLML_WANT(oclml_binary_scalar)
OCLML_BINARY_SCALAR(EW_CAT(B_, BINARY))
#endif

/* The loop of oclml_binary_row: on CPUs the chunk in row segments, the column stepping with the
 * element; on GPUs the grid stride, the column advanced by the stride modulo cols. */
#if OCLML_CHUNKS
#define BINARY_ROW_LOOP(F)                                                        \
    OCLML_CHUNK(n, begin_, end_)                                                  \
    uint c = (uint)(begin_ % cols);                                               \
    for (ulong i = begin_; i < end_; c = 0) {                                     \
        const ulong stop = min(end_, i + (cols - c));                             \
        for (; i < stop; i++, c++)                                                \
            DT_STORE(Y_DT, ys, i, F(DT_LOAD(X_DT, as, i), DT_LOAD(B_DT, bs, c))); \
    }
#else
#define BINARY_ROW_LOOP(F)                                                    \
    const uint step = (uint)(get_global_size(0) % cols);                      \
    uint c = (uint)(get_global_id(0) % cols);                                 \
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {        \
        DT_STORE(Y_DT, ys, i, F(DT_LOAD(X_DT, as, i), DT_LOAD(B_DT, bs, c))); \
        c += step;                                                            \
        if (c >= cols) c -= cols;                                             \
    }
#endif
#define OCLML_BINARY_ROW(F)                                                                        \
    __kernel void oclml_binary_row(__global const XT *a, ulong ao, __global const BT *b, ulong bo, \
                                   __global YT *y, ulong yo, ulong n, uint cols) {                 \
        __global const XT *as = a + ao;                                                            \
        __global const BT *bs = b + bo;                                                            \
        __global YT *ys = y + yo;                                                                  \
        BINARY_ROW_LOOP(F)                                                                         \
    }
#if OCLML_WANT(oclml_binary_row)
OCLML_BINARY_ROW(EW_CAT(B_, BINARY))
#endif

#define OCLML_BINARY_ROW4(F)                                                                    \
    __kernel void oclml_binary_row4(__global const XT *a, ulong ao, __global const BT *b,       \
                                    ulong bo, __global YT *y, ulong yo, ulong n, uint cols) {   \
        __global const XT *as = a + ao;                                                         \
        __global const BT *bs = b + bo;                                                         \
        __global YT *ys = y + yo;                                                               \
        const uint c4 = cols / 4, step = (uint)(get_global_size(0) % c4);                       \
        uint c = (uint)(get_global_id(0) % c4);                                                 \
        for (ulong i = get_global_id(0); i < n / 4; i += get_global_size(0)) {                  \
            DT_VSTORE4(Y_DT, ys, i, MAP4_2(F, DT_VLOAD4(X_DT, as, i), DT_VLOAD4(B_DT, bs, c))); \
            c += step;                                                                          \
            if (c >= c4) c -= c4;                                                               \
        }                                                                                       \
    }
/* Rows of a multiple of 4 columns: float4 groups never straddle rows. */
#if OCLML_WANT(oclml_binary_row4)
OCLML_BINARY_ROW4(EW_CAT(B_, BINARY))
#endif
