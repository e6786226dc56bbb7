/* Tolerances of the test suite, in one place (NUMERICS.md). Relative errors are
 * ||out - ref||_2 / ||ref||_2 per output tensor. */
#ifndef OCLML_TOLERANCE_H
#define OCLML_TOLERANCE_H

#define TOL_EXACT 0.0        /* copies and fills: bit-exact */
#define TOL_ELEMENTWISE 1e-6 /* elementwise, softmax, layernorm */
/* Unary functions that compose OpenCL built-ins (exp, erfc, tanh, pow: up to 3-4 ulp each, and
 * their products), where one value's error can reach several 1e-7. */
#define TOL_TRANSCENDENTAL 4e-6
#define TOL_REDUCTION 1e-5 /* long reductions */
#define TOL_GEMM 1e-4      /* GEMM and long recurrences */

/* Low precision (NUMERICS.md): against a double reference from the inputs as their dtype holds
 * them, bounds in the output dtype's unit roundoff u. A product's element (fp32 accumulation
 * over K terms) within u |ref| + TOL_LP_PRODUCT_C sqrt(K) 2^-24 sum_k |a_k b_k|: one rounding to
 * the output, and the accumulation's sqrt(K) growth with room for the tensor cores' summation
 * order. Elementwise and row ops with fp32 math inside: u |ref| per element. */
#define TOL_U_BF16 0x1p-8
#define TOL_U_FP16 0x1p-11
#define TOL_U_FP32 0x1p-24
#define TOL_LP_PRODUCT_C 8.0
/* fp16 rounds values below 2^-14 to multiples of 2^-24 (subnormals): an absolute half step more
 * wherever an fp16 output can be that small. */
#define TOL_ABS_FP16 0x1p-25

#endif
