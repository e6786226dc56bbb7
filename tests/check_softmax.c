/* softmax / log-softmax forward and backward against the double reference: sizes around the
 * work-group size, long rows (chunked path), offsets (scalar path), extremes, masking, NaN, and
 * the backward by finite differences. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef oclml_status (*fwd_fn)(oclml_ctx *, const oclml_tensor *, oclml_tensor *);
typedef oclml_status (*bwd_fn)(oclml_ctx *, const oclml_tensor *, const oclml_tensor *,
                               oclml_tensor *);

/* Runs forward then backward on rows x cols with input x, checking both. */
static void check_case(size_t rows, size_t cols, const float *x, int log, double fwd_tol) {
    size_t n = rows * cols, shape[2] = {rows, cols};
    fwd_fn fwd = log ? oclml_log_softmax : oclml_softmax;
    bwd_fn bwd = log ? oclml_log_softmax_backward : oclml_softmax_backward;
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor(2, shape);
    ASSERT_OK(fwd(T, X, Y));
    float *y = test_floats(n);
    test_read(Y, y, n);
    double *ref = test_doubles(n);
    ref_softmax(rows, cols, x, log, ref);
    char what[80];
    snprintf(what, sizeof what, "%s %zux%zu", log ? "log_softmax" : "softmax", rows, cols);
    test_assert_close(what, y, ref, n, fwd_tol);

    float *dy = test_floats(n), *dx = test_floats(n);
    test_random(dy, n, -1, 1);
    oclml_tensor *DY = test_tensor_from(2, shape, dy), *DX = test_tensor(2, shape);
    ASSERT_OK(bwd(T, Y, DY, DX));
    test_read(DX, dx, n);
    int finite = 1;
    for (size_t i = 0; i < n && finite; i++) finite = isfinite(y[i]);
    if (finite) { /* backward of rows with masked (-inf) outputs is checked elsewhere */
        double *scale = test_doubles(n);
        ref_softmax_backward(rows, cols, y, dy, log, ref);
        ref_softmax_backward_scale(rows, cols, y, dy, log, scale);
        snprintf(what, sizeof what, "%s backward %zux%zu", log ? "log_softmax" : "softmax", rows,
                 cols);
        test_assert_close_scaled(what, dx, ref, scale, n, TOL_ELEMENTWISE);
        free(scale);
    }
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Y);
    oclml_tensor_destroy(DY);
    oclml_tensor_destroy(DX);
    free(y);
    free(dy);
    free(dx);
    free(ref);
}

static void random_case(size_t rows, size_t cols, int log) {
    float *x = test_floats(rows * cols);
    test_random(x, rows * cols, -8, 8);
    check_case(rows, cols, x, log, TOL_ELEMENTWISE);
    free(x);
}

static const size_t COLS[] = {1,   2,   3,   4,   7,    31,   32,   33,   127, 128,
                              129, 255, 256, 257, 1000, 1024, 1031, 4096, 8191};

START_TEST(sizes_around_the_work_group) {
    for (size_t i = 0; i < sizeof COLS / sizeof COLS[0]; i++) random_case(_i ? 3 : 1, COLS[i], _i);
    random_case(1000, 17, 0);
    random_case(257, 128, 1);
}
END_TEST

/* The GPU's layout (several work-items a row, reducing through local memory) on this device
 * too, where CPUs take a work-item a row by default (cpu.layout). */
START_TEST(gpu_layout) {
    test_retune("cpu.layout=0");
    static const size_t cols[] = {1, 33, 257, 1000, 4099};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) random_case(5, cols[i], _i);
}
END_TEST

START_TEST(long_rows_chunked) {
    oclml_device_info d;
    oclml_ctx_device_info(T, &d);
    /* Past what one work-group keeps in registers (32 floats x up to 1024 work-items), and the
     * 100,000-column case of NUMERICS.md. */
    random_case(3, 32768 + 1, _i);
    random_case(2, 100003, _i);
    random_case(1, 100000, _i);
    char v[128];
    ASSERT_OK(oclml_op_variant(T, "softmax", 2, 100003, v, sizeof v));
    ck_assert_msg(strstr(v, "chunked") != NULL, "100003 columns should be chunked: %s", v);
    ASSERT_OK(oclml_op_variant(T, "softmax", 2, 1000, v, sizeof v));
    /* 32 floats a work-item: 1000 columns fit where work-groups of 32 or more run. */
    if (d.max_work_group_size >= 32)
        ck_assert_msg(strstr(v, "registers") != NULL, "1000 columns should stay in registers: %s",
                      v);
}
END_TEST

/* More rows than a launch may have work-groups along dimension 1 (65535 on NVIDIA: here 2, by
 * tuning): the chunked kernels run in slices of the grid and must still see every row. */
START_TEST(long_rows_in_grid_slices) {
    test_retune("launch.grid_yz=2");
    random_case(7, 100003, _i);
}
END_TEST

START_TEST(very_long_row) { random_case(1, 1100000, 0); }
END_TEST

/* Tensors at an odd element offset force the scalar path even for multiple-of-4 rows. */
START_TEST(unaligned_offsets) {
    cl_context c;
    oclml_ctx_cl_objects(T, &c, NULL, NULL);
    size_t rows = 5, cols = 64, n = rows * cols, shape[2] = {rows, cols};
    cl_int err;
    cl_mem buf = clCreateBuffer(c, CL_MEM_READ_WRITE, (2 * n + 2) * sizeof(float), NULL, &err);
    oclml_tensor *X, *Y;
    ASSERT_OK(oclml_tensor_wrap(T, buf, 1 * sizeof(float), 2, shape, &X));
    ASSERT_OK(oclml_tensor_wrap(T, buf, (n + 2) * sizeof(float), 2, shape, &Y));
    float *x = test_floats(n), *y = test_floats(n);
    double *ref = test_doubles(n);
    test_random(x, n, -5, 5);
    ASSERT_OK(oclml_tensor_write(X, x, n));
    ASSERT_OK(oclml_softmax(T, X, Y));
    test_read(Y, y, n);
    ref_softmax(rows, cols, x, 0, ref);
    test_assert_close("softmax at offset 1", y, ref, n, TOL_ELEMENTWISE);
    /* In place. */
    ASSERT_OK(oclml_log_softmax(T, X, X));
    test_read(X, y, n);
    ref_softmax(rows, cols, x, 1, ref);
    test_assert_close("log_softmax in place", y, ref, n, TOL_ELEMENTWISE);
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Y);
    clReleaseMemObject(buf);
    free(x);
    free(y);
    free(ref);
}
END_TEST

START_TEST(extremes_masks_and_nan) {
    for (int log = 0; log < 2; log++) {
        size_t sizes[] = {5, 300, 40000};
        for (int s = 0; s < 3; s++) {
            size_t cols = sizes[s], rows = 5, n = rows * cols;
            float *x = test_floats(n);
            test_random(x, n, -1e4f, 1e4f); /* row 0: +-1e4, must not overflow */
            for (size_t c = 0; c < cols; c++) {
                x[cols + c] = 3.25f;                         /* row 1: equal values */
                x[2 * cols + c] = -INFINITY;                 /* row 2: fully masked */
                if (c % 3 == 0) x[3 * cols + c] = -INFINITY; /* row 3: partly masked */
            }
            x[4 * cols + cols / 2] = NAN; /* row 4: NaN makes the row NaN */
            check_case(rows, cols, x, log, TOL_ELEMENTWISE);
            free(x);
        }
    }
}
END_TEST

/* L(x) = sum(w * f(x)); the device's backward at dy = w must match central differences of the
 * double reference. */
START_TEST(backward_by_finite_differences) {
    size_t rows = 2, cols = 37, n = rows * cols, shape[2] = {rows, cols};
    int log = _i;
    float *x = test_floats(n), *w = test_floats(n), *y = test_floats(n), *dx = test_floats(n);
    test_random(x, n, -3, 3);
    test_random(w, n, -1, 1);
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor(2, shape);
    oclml_tensor *W = test_tensor_from(2, shape, w), *DX = test_tensor(2, shape);
    ASSERT_OK((log ? oclml_log_softmax : oclml_softmax)(T, X, Y));
    ASSERT_OK((log ? oclml_log_softmax_backward : oclml_softmax_backward)(T, Y, W, DX));
    test_read(DX, dx, n);
    double *fd = test_doubles(n), *yp = test_doubles(n), *ym = test_doubles(n);
    const float h = 1e-2f;
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + h;
        ref_softmax(rows, cols, x, log, yp);
        x[i] = keep - h;
        ref_softmax(rows, cols, x, log, ym);
        x[i] = keep;
        double lp = 0, lm = 0;
        for (size_t j = 0; j < n; j++) {
            lp += w[j] * yp[j];
            lm += w[j] * ym[j];
        }
        fd[i] = (lp - lm) / (2.0 * ((double)(keep + h) - keep));
    }
    test_assert_close(log ? "log_softmax backward vs finite differences"
                          : "softmax backward vs finite differences",
                      dx, fd, n, 1e-3);
    oclml_tensor *all[] = {X, Y, W, DX};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
    free(x);
    free(w);
    free(y);
    free(dx);
    free(fd);
    free(yp);
    free(ym);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s1[2] = {3, 4}, s2[2] = {4, 3};
    oclml_tensor *A = test_tensor(2, s1), *B = test_tensor(2, s2), *C = test_tensor(2, s1);
    ASSERT_STATUS(oclml_softmax(T, A, B), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_log_softmax(T, A, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_softmax(NULL, A, C), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_softmax_backward(T, A, B, C), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_softmax_backward(T, A, C, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_log_softmax_backward(T, A, C, B), OCLML_ERR_INVALID_SHAPE);
    char v[8];
    ASSERT_STATUS(oclml_op_variant(T, "softmax", 0, 5, v, sizeof v), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_op_variant(T, "softmax", 1, 5, NULL, 0), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_op_variant(T, "no_such_op", 1, 5, v, sizeof v), OCLML_ERR_INVALID_ARGUMENT);
    float out[12];
    test_read(B, out, 12);
    for (int i = 0; i < 12; i++) ck_assert(isnan(out[i]));
    test_read(C, out, 12);
    for (int i = 0; i < 12; i++) ck_assert(isnan(out[i]));
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
}
END_TEST

int main(void) {
    Suite *s = suite_create("softmax");
    TCase *tc = tcase_create("softmax");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, sizes_around_the_work_group, 0, 2);
    tcase_add_loop_test(tc, gpu_layout, 0, 2);
    tcase_add_loop_test(tc, long_rows_chunked, 0, 2);
    tcase_add_loop_test(tc, long_rows_in_grid_slices, 0, 2);
    tcase_add_test(tc, very_long_row);
    tcase_add_test(tc, unaligned_offsets);
    tcase_add_test(tc, extremes_masks_and_nan);
    tcase_add_loop_test(tc, backward_by_finite_differences, 0, 2);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
