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

#endif
