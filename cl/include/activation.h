/* Activation functions and their derivatives, shared by the elementwise ops and the epilogues of
 * matrix products (linear layers). NaN in gives NaN out; +-1e4 never overflows.
 * Derivatives avoid 1 - t^2 and 1 - sigmoid, which lose all precision where t or sigmoid
 * approach 1: 1 - tanh^2 = 1 / cosh^2 and 1 - sigmoid(x) = sigmoid(-x). */
#ifndef OCLML_ACTIVATION_H
#define OCLML_ACTIVATION_H

#include "common.h"

#define SQRT1_2 0.70710678118654752f
#define INV_SQRT_2PI 0.39894228040143268f
#define GELU_K 0.79788456080286536f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

inline float relu_f(float x) { return (x > 0.0f || isnan(x)) ? x : 0.0f; }
inline float gelu_tanh_u(float x) { return GELU_K * (x + GELU_C * x * x * x); }
/* erfc without branches (Numerical Recipes' erfcc, fractional error 1.2e-7), so that a product's
 * epilogue interleaves the activations of its accumulators: NVIDIA's erfc branches per element,
 * which serialised a linear layer's GELU epilogue (bench/DECISIONS.md, "Branch-free erfc").
 * TwoSum and the exact split of z^2 keep the exponent's rounding out of the result: within
 * 4.1e-7 of a double erfc over [-9, 9]. Past z = 10.1 erfc is below the smallest float (and
 * z^2's split would be NaN at infinity): 0 there, NaN stays NaN. */
inline float oclml_erfc(float x) {
    const float z = fabs(x), t = 1.0f / fma(0.5f, z, 1.0f);
    float p = 0.17087277f;
    p = fma(p, t, -0.82215223f);
    p = fma(p, t, 1.48851587f);
    p = fma(p, t, -1.13520398f);
    p = fma(p, t, 0.27886807f);
    p = fma(p, t, -0.18628806f);
    p = fma(p, t, 0.09678418f);
    p = fma(p, t, 0.37409196f);
    p = fma(p, t, 1.00002368f);
    p = fma(p, t, -1.26551223f);
    const float z2 = z * z, z2_lost = fma(z, z, -z2); /* z^2 = z2 + z2_lost exactly */
    const float s = p - z2, b = s - p, s_lost = (p - (s - b)) + (-z2 - b); /* p - z2 = s + s_lost */
    const float r = z > 10.1f ? 0.0f : t * exp(s) * (1.0f + (s_lost - z2_lost));
    return x >= 0.0f ? r : 2.0f - r;
}

/* 1 + erf(z) = erfc(-z) and 1 + tanh(u) = 2 sigmoid(2u) keep negative inputs accurate. */
inline float gelu_erf_f(float x) { return 0.5f * x * oclml_erfc(-x * SQRT1_2); }
inline float gelu_tanh_f(float x) { return x * oclml_sigmoid(2.0f * gelu_tanh_u(x)); }
inline float silu_f(float x) { return x * oclml_sigmoid(x); }

/* 1 / cosh(x)^2 = 4 e / (1 + e)^2 with e = exp(-2 |x|): exp alone, which CPU compilers
 * vectorise where cosh stays a call per element (gelu_tanh's backward 4x slower on PoCL). */
inline float sech2(float x) {
    const float e = exp(-2.0f * fabs(x)), d = 1.0f + e;
    return 4.0f * e / (d * d);
}
inline float d_gelu_erf(float x) {
    return 0.5f * oclml_erfc(-x * SQRT1_2) + x * INV_SQRT_2PI * exp(-0.5f * x * x);
}
inline float d_gelu_tanh(float x) {
    const float u = gelu_tanh_u(x);
    return oclml_sigmoid(2.0f * u) + 0.5f * x * sech2(u) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}
inline float d_silu(float x) { return oclml_sigmoid(x) * (1.0f + x * oclml_sigmoid(-x)); }

/* The activation a program fuses, picked by the host with -DACT_<NAME>=1 (ACT_NONE otherwise),
 * matching oclml_activation: act_apply(z) gives the output for pre-activation z. */
#if defined(ACT_RELU)
#define act_apply(z) relu_f(z)
#elif defined(ACT_GELU_ERF)
#define act_apply(z) gelu_erf_f(z)
#elif defined(ACT_GELU_TANH)
#define act_apply(z) gelu_tanh_f(z)
#elif defined(ACT_SILU)
#define act_apply(z) silu_f(z)
#elif defined(ACT_TANH)
#define act_apply(z) tanh(z)
#elif defined(ACT_SIGMOID)
#define act_apply(z) oclml_sigmoid(z)
#else
#define ACT_NONE 1
#define act_apply(z) (z)
#endif

/* g act'(z) from the pre-activation z, the formulas of the elementwise ops' unary backward
 * (cl/ops/elementwise.cl), so that a fused op and its unfused composition agree. */
#if defined(ACT_RELU)
#define act_backward(g, z) (isnan(z) ? (z) : (z) > 0.0f ? (g) : 0.0f)
#elif defined(ACT_GELU_ERF)
#define act_backward(g, z) ((g)*d_gelu_erf(z))
#elif defined(ACT_GELU_TANH)
#define act_backward(g, z) ((g)*d_gelu_tanh(z))
#elif defined(ACT_SILU)
#define act_backward(g, z) ((g)*d_silu(z))
#elif defined(ACT_TANH)
#define act_backward(g, z) ((g)*sech2(z))
#elif defined(ACT_SIGMOID)
#define act_backward(g, z) ((g)*oclml_sigmoid(z) * oclml_sigmoid(-(z)))
#else
#define act_backward(g, z) (g)
#endif

#endif
