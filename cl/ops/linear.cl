/* The linear layer's backward, around its matrix products (lib/ops/linear.c):
 *
 *   oclml_linear_dz         dZ = dy * act'(saved) for a [rows x cols] block, with the column sums
 *                           of dZ over each work-group's slice of rows (db's partials)
 *   oclml_linear_db_finish  db = (accumulate ? db : 0) + the sum of the slices' partials
 *
 * Layout: dy, saved and dZ are row-major [rows x cols] (cols = the layer's out), each at an
 * element offset in its buffer; part is [slices x cols]. Grid of oclml_linear_dz: dimension 0
 * the columns (one work-item each, work-groups along a row for coalesced loads), dimension 1 the
 * row slices (slice s covers rows [s * rps, min(rows, (s + 1) * rps))). Each work-item walks its
 * column down its slice in row order, and the finish kernel adds the slices in order: the result
 * does not depend on timing (no atomics), so two runs agree bit for bit.
 *
 * Variants: the activation by -DACT_<NAME>=1 (as the GEMM epilogue, activation.h; none: dZ = dy,
 * used for db alone). Runtime flags: LIN_WRITE_DZ (store dZ), LIN_WANT_DB (store the partials).
 * The derivative reads `saved`: the pre-activation z for GELU and SiLU, the output y for ReLU,
 * tanh and sigmoid, PyTorch's output-based forms:
 *   relu: dy (y > 0)   tanh: dy (1 - y^2) = dy (1 - y)(1 + y)   sigmoid: dy y (1 - y)
 * NaN in dy or saved gives NaN in dZ (ReLU: NaN in y gives NaN; dy where y <= 0 is dropped, as
 * PyTorch drops it). */
#include "activation.h"

#define LIN_WRITE_DZ 1u
#define LIN_WANT_DB 2u

#if defined(ACT_RELU)
#define act_grad(g, s) (isnan(s) ? (s) : (s) > 0.0f ? (g) : 0.0f)
#elif defined(ACT_GELU_ERF)
#define act_grad(g, s) ((g)*d_gelu_erf(s))
#elif defined(ACT_GELU_TANH)
#define act_grad(g, s) ((g)*d_gelu_tanh(s))
#elif defined(ACT_SILU)
#define act_grad(g, s) ((g)*d_silu(s))
#elif defined(ACT_TANH)
#define act_grad(g, s) ((g) * ((1.0f - (s)) * (1.0f + (s))))
#elif defined(ACT_SIGMOID)
#define act_grad(g, s) ((g) * ((s) * (1.0f - (s))))
#else
#define act_grad(g, s) (g)
#endif

#if OCLML_WANT(oclml_linear_dz)
__kernel void oclml_linear_dz(__global const float *dy, ulong dy_off, __global const float *saved,
                              ulong s_off, __global float *dz, ulong dz_off, __global float *part,
                              ulong rows, uint cols, ulong rps, uint flags) {
    const uint c = get_global_id(0);
    if (c >= cols) return;
    const ulong r0 = get_global_id(1) * rps;
    const ulong r1 = min(rows, r0 + rps);
    float sum = 0.0f;
    for (ulong r = r0; r < r1; r++) {
        const ulong i = r * cols + c;
        const float g = dy[dy_off + i];
#if defined(ACT_NONE)
        const float v = g;
#else
        const float s = saved[s_off + i];
        const float v = act_grad(g, s);
#endif
        if (flags & LIN_WRITE_DZ) dz[dz_off + i] = v;
        sum += v;
    }
    if (flags & LIN_WANT_DB) part[get_global_id(1) * cols + c] = sum;
}
#endif

#if OCLML_WANT(oclml_linear_db_finish)
__kernel void oclml_linear_db_finish(__global const float *part, uint slices, uint cols,
                                     __global float *db, ulong db_off, uint accumulate) {
    const uint c = get_global_id(0);
    if (c >= cols) return;
    float sum = 0.0f;
    for (uint s = 0; s < slices; s++) sum += part[(ulong)s * cols + c];
    db[db_off + c] = accumulate ? db[db_off + c] + sum : sum;
}
#endif
