/* Elementwise ops against double references: every unary op and its backward (also by finite
 * differences), every binary op with a tensor, a scalar and a broadcast row, odd sizes and
 * offsets, extremes and NaN. */
#include "testutil.h"

#include <stdio.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *UNARY[] = {"neg",  "abs",     "exp",  "log",      "sqrt",      "rsqrt", "recip",
                              "relu", "sigmoid", "tanh", "gelu_erf", "gelu_tanh", "silu",  "pow"};
#define N_UNARY 14
static const size_t SIZES[] = {1, 3, 4, 5, 255, 256, 257, 4099, 100003};

/* The input domain where each op is defined and well conditioned. */
static void domain(int op, float *lo, float *hi) {
    *lo = -6;
    *hi = 6;
    if (op == OCLML_LOG || op == OCLML_SQRT || op == OCLML_RSQRT || op == OCLML_POW) {
        *lo = 0.1f;
        *hi = 10;
    }
    if (op == OCLML_RECIP) *lo = 0.2f;
}

static oclml_status run_unary(int op, float p, oclml_tensor *x, oclml_tensor *y) {
    return op == OCLML_POW ? oclml_pow(T, x, p, y) : oclml_unary(T, op, x, y);
}
static oclml_status run_unary_bwd(int op, float p, oclml_tensor *x, oclml_tensor *dy,
                                  oclml_tensor *dx) {
    return op == OCLML_POW ? oclml_pow_backward(T, x, p, dy, dx)
                           : oclml_unary_backward(T, op, x, dy, dx);
}

/* Unary op `op` and its backward at every size of SIZES against the double reference. */
static void check_unary(int op) {
    const float p = 2.5f;
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
        size_t n = SIZES[s];
        float lo, hi, *x = test_floats(n), *g = test_floats(n), *y = test_floats(n);
        domain(op, &lo, &hi);
        test_random(x, n, lo, hi);
        test_random(g, n, -1, 1);
        oclml_tensor *X = test_tensor_from(1, &n, x), *G = test_tensor_from(1, &n, g),
                     *Y = test_tensor(1, &n);
        double *ref = test_doubles(n), *scale = test_doubles(n);
        ASSERT_OK(run_unary(op, p, X, Y));
        test_read(Y, y, n);
        for (size_t i = 0; i < n; i++) ref[i] = ref_unary(op, p, x[i]);
        char what[64];
        snprintf(what, sizeof what, "%s n=%zu", UNARY[op], n);
        test_assert_close(what, y, ref, n, TOL_TRANSCENDENTAL);
        ASSERT_OK(run_unary_bwd(op, p, X, G, Y));
        test_read(Y, y, n);
        for (size_t i = 0; i < n; i++) {
            ref[i] = g[i] * ref_unary_grad(op, p, x[i]);
            scale[i] = fabs(g[i]) * (ref_unary_grad_scale(op, p, x[i]) + 1e-6);
        }
        snprintf(what, sizeof what, "%s backward n=%zu", UNARY[op], n);
        test_assert_close_scaled(what, y, ref, scale, n, TOL_TRANSCENDENTAL);
        oclml_tensor_destroy(X);
        oclml_tensor_destroy(G);
        oclml_tensor_destroy(Y);
        free(x);
        free(g);
        free(y);
        free(ref);
        free(scale);
    }
}

START_TEST(unary_forward_and_backward) { check_unary(_i); }
END_TEST

/* The backward formulas against central differences of the reference forward. */
START_TEST(unary_backward_by_finite_differences) {
    int op = _i;
    const float p = 2.5f;
    size_t n = 64;
    float lo, hi, x[64], g[64], dx[64];
    domain(op, &lo, &hi);
    test_random(x, n, lo, hi);
    for (size_t i = 0; i < n; i++) {
        g[i] = 1.0f;
        if (op == OCLML_ABS || op == OCLML_RELU)
            x[i] += x[i] > 0 ? 0.05f : -0.05f; /* off the kink */
    }
    oclml_tensor *X = test_tensor_from(1, &n, x), *G = test_tensor_from(1, &n, g),
                 *DX = test_tensor(1, &n);
    ASSERT_OK(run_unary_bwd(op, p, X, G, DX));
    test_read(DX, dx, n);
    double fd[64];
    for (size_t i = 0; i < n; i++) {
        double h = 1e-4 * fmax(1.0, fabs(x[i]));
        fd[i] = (ref_unary(op, p, x[i] + h) - ref_unary(op, p, x[i] - h)) / (2 * h);
    }
    test_assert_close(UNARY[op], dx, fd, n, 1e-4);
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(G);
    oclml_tensor_destroy(DX);
}
END_TEST

START_TEST(extremes_and_nan) {
    float x[] = {1e4f, -1e4f, 0.0f, -0.0f, NAN, 30.0f, -30.0f, 1e-40f};
    size_t n = 8;
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    oclml_tensor *X = test_tensor_from(1, &n, x), *Y = test_tensor(1, &n),
                 *G = test_tensor_from(1, &n, x);
    oclml_tensor *ONES = test_tensor_from(1, &n, ones);
    int ops[] = {OCLML_SIGMOID, OCLML_TANH, OCLML_GELU_ERF, OCLML_GELU_TANH,
                 OCLML_SILU,    OCLML_RELU, OCLML_NEG,      OCLML_ABS};
    for (int k = 0; k < 8; k++) {
        float y[8];
        double ref[8];
        ASSERT_OK(oclml_unary(T, ops[k], X, Y));
        test_read(Y, y, n);
        for (size_t i = 0; i < n; i++) {
            ref[i] = ref_unary(ops[k], 0, x[i]);
            if (i != 4)
                ck_assert_msg(isfinite(y[i]), "%s(%g) = %g overflowed", UNARY[ops[k]], x[i], y[i]);
        }
        ck_assert_msg(isnan(y[4]), "%s(NaN) = %g, expected NaN", UNARY[ops[k]], y[4]);
        test_assert_close(UNARY[ops[k]], y, ref, n, TOL_ELEMENTWISE);
        ASSERT_OK(oclml_unary_backward(T, ops[k], X, G, Y));
        test_read(Y, y, n);
        ck_assert_msg(isnan(y[4]), "%s backward at NaN gives %g", UNARY[ops[k]], y[4]);
        for (size_t i = 0; i < n; i++)
            if (i != 4) ck_assert_msg(!isnan(y[i]), "%s backward(%g) is NaN", UNARY[ops[k]], x[i]);
        /* With a finite dy, NaN in x alone must reach dx wherever f' depends on x (every op here
         * but neg): abs' through sign(NaN) = 0 once gave 0. */
        ASSERT_OK(oclml_unary_backward(T, ops[k], X, ONES, Y));
        test_read(Y, y, n);
        if (ops[k] != OCLML_NEG)
            ck_assert_msg(isnan(y[4]), "%s backward at x = NaN, dy = 1 gives %g", UNARY[ops[k]],
                          y[4]);
    }
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Y);
    oclml_tensor_destroy(G);
    oclml_tensor_destroy(ONES);
}
END_TEST

/* Binary op `op` with a tensor, a broadcast row and a scalar, at odd shapes. */
static void check_binary(int op) {
    static const size_t shapes[][2] = {{1, 1}, {3, 5}, {7, 4}, {33, 129}, {257, 256}, {5, 100003}};
    for (size_t s = 0; s < 6; s++) {
        size_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols, shape[2] = {rows, cols};
        float *a = test_floats(n), *b = test_floats(n), *y = test_floats(n), sc;
        test_random(a, n, -4, 4);
        test_random(b, n, 0.5f, 3);
        test_random(&sc, 1, 0.5f, 3);
        oclml_tensor *A = test_tensor_from(2, shape, a), *B = test_tensor_from(2, shape, b);
        oclml_tensor *R = test_tensor_from(1, &cols, b), *Y = test_tensor(2, shape);
        double *ref = test_doubles(n);
        char what[64];
        ASSERT_OK(oclml_binary(T, op, A, B, Y));
        test_read(Y, y, n);
        for (size_t i = 0; i < n; i++) ref[i] = ref_binary(op, a[i], b[i]);
        snprintf(what, sizeof what, "binary %d tensor %zux%zu", op, rows, cols);
        test_assert_close(what, y, ref, n, TOL_ELEMENTWISE);
        ASSERT_OK(oclml_binary(T, op, A, R, Y));
        test_read(Y, y, n);
        for (size_t i = 0; i < n; i++) ref[i] = ref_binary(op, a[i], b[i % cols]);
        snprintf(what, sizeof what, "binary %d row %zux%zu", op, rows, cols);
        test_assert_close(what, y, ref, n, TOL_ELEMENTWISE);
        ASSERT_OK(oclml_binary_scalar(T, op, A, sc, Y));
        test_read(Y, y, n);
        for (size_t i = 0; i < n; i++) ref[i] = ref_binary(op, a[i], sc);
        snprintf(what, sizeof what, "binary %d scalar %zux%zu", op, rows, cols);
        test_assert_close(what, y, ref, n, TOL_ELEMENTWISE);
        oclml_tensor *all[] = {A, B, R, Y};
        for (int k = 0; k < 4; k++) oclml_tensor_destroy(all[k]);
        free(a);
        free(b);
        free(y);
        free(ref);
    }
}

START_TEST(binary_all_forms) { check_binary(_i); }
END_TEST

/* The GPU's layout (work-items striding over float4 groups, rows of a multiple of 4 columns
 * broadcast by float4) on a CPU device too, where CPUs take a contiguous chunk a work-item by
 * default (cpu.layout=0 turns that off; GPUs run their layout in the other tests). Loop: two
 * activations with their backward, then two binary ops in every form. */
START_TEST(gpu_layout_on_cpus) {
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    if (info.is_gpu) return; /* the other tests run it there */
    test_retune("cpu.layout=0");
    static const int unary[] = {OCLML_GELU_TANH, OCLML_RELU}, binary[] = {OCLML_ADD, OCLML_MAX};
    if (_i < 2)
        check_unary(unary[_i]);
    else
        check_binary(binary[_i - 2]);
}
END_TEST

START_TEST(offsets_in_place_and_nan) {
    cl_context c;
    oclml_ctx_cl_objects(T, &c, NULL, NULL);
    size_t n = 1001;
    cl_int err;
    cl_mem buf = clCreateBuffer(c, CL_MEM_READ_WRITE, 3000 * sizeof(float), NULL, &err);
    oclml_tensor *A, *B;
    ASSERT_OK(oclml_tensor_wrap(T, buf, 3 * sizeof(float), 1, &n, &A));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 1500 * sizeof(float), 1, &n, &B));
    float a[1001], b[1001], y[1001];
    double ref[1001];
    test_random(a, n, -2, 2);
    test_random(b, n, -2, 2);
    a[10] = NAN;
    b[20] = NAN;
    ASSERT_OK(oclml_tensor_write(A, a, n));
    ASSERT_OK(oclml_tensor_write(B, b, n));
    ASSERT_OK(oclml_binary(T, OCLML_MAX, A, B, A)); /* in place, both at odd offsets */
    test_read(A, y, n);
    for (size_t i = 0; i < n; i++) ref[i] = ref_binary(OCLML_MAX, a[i], b[i]);
    test_assert_close("max in place with NaN", y, ref, n, 0);
    ASSERT_OK(oclml_unary(T, OCLML_EXP, B, B));
    test_read(B, y, n);
    for (size_t i = 0; i < n; i++) ref[i] = exp((double)b[i]);
    test_assert_close("exp in place", y, ref, n, TOL_ELEMENTWISE);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    clReleaseMemObject(buf);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s[2] = {3, 4}, s2[2] = {4, 3}, three = 3;
    oclml_tensor *A = test_tensor(2, s), *B = test_tensor(2, s2), *Y = test_tensor(2, s),
                 *V = test_tensor(1, &three);
    ASSERT_STATUS(oclml_unary(T, (oclml_unary_op)99, A, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_unary(T, OCLML_POW, A, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_unary(T, OCLML_EXP, A, B), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_unary(T, OCLML_EXP, NULL, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_unary_backward(T, OCLML_EXP, A, B, Y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_binary(T, OCLML_ADD, A, B, Y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_binary(T, OCLML_ADD, A, V, Y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_binary(T, (oclml_binary_op)7, A, A, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_binary_scalar(T, OCLML_ADD, A, 1.0f, B), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_binary_scalar(NULL, OCLML_ADD, A, 1.0f, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_pow(T, A, 2.0f, NULL), OCLML_ERR_NULL_POINTER);
    float out[12];
    test_read(Y, out, 12);
    for (int i = 0; i < 12; i++) ck_assert(isnan(out[i]));
    oclml_tensor *all[] = {A, B, Y, V};
    for (int k = 0; k < 4; k++) oclml_tensor_destroy(all[k]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("elementwise");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, unary_forward_and_backward, 0, N_UNARY);
    tcase_add_loop_test(tc, unary_backward_by_finite_differences, 0, N_UNARY);
    tcase_add_test(tc, extremes_and_nan);
    tcase_add_loop_test(tc, binary_all_forms, 0, 6);
    tcase_add_loop_test(tc, gpu_layout_on_cpus, 0, 4);
    tcase_add_test(tc, offsets_in_place_and_nan);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
