/* LayerNorm and RMSNorm forward and backward against the double reference, sizes around the
 * work-group, long rows, optional arguments, equal-valued rows, extremes, and the backward by
 * finite differences. */
#include "testutil.h"

#include <stdio.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Forward and backward of one case; gamma/beta present when with_affine. */
static void check_case(int rms, size_t rows, size_t cols, const float *x, int with_affine) {
    size_t n = rows * cols, shape[2] = {rows, cols};
    float *g = test_floats(cols), *b = test_floats(cols), *y = test_floats(n),
          *m = test_floats(rows), *rs = test_floats(rows);
    test_random(g, cols, 0.5f, 1.5f);
    test_random(b, cols, -1, 1);
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor(2, shape);
    oclml_tensor *G = test_tensor_from(1, &cols, g), *B = test_tensor_from(1, &cols, b);
    oclml_tensor *M = test_tensor(1, &rows), *R = test_tensor(1, &rows);
    const float eps = 1e-5f;
    if (rms)
        ASSERT_OK(oclml_rmsnorm(T, X, with_affine ? G : NULL, eps, Y, R));
    else
        ASSERT_OK(
            oclml_layernorm(T, X, with_affine ? G : NULL, with_affine ? B : NULL, eps, Y, M, R));
    test_read(Y, y, n);
    test_read(R, rs, rows);
    if (!rms) test_read(M, m, rows);
    double *ref = test_doubles(n), *rm = test_doubles(rows), *rr = test_doubles(rows);
    ref_norm(rms, rows, cols, x, with_affine ? g : NULL, with_affine && !rms ? b : NULL, eps, ref,
             rm, rr);
    char what[96];
    snprintf(what, sizeof what, "%s %zux%zu%s", rms ? "rmsnorm" : "layernorm", rows, cols,
             with_affine ? " affine" : "");
    test_assert_close(what, y, ref, n, TOL_ELEMENTWISE * 4);
    test_assert_close("rstd", rs, rr, rows, TOL_ELEMENTWISE * 4);
    if (!rms) {
        /* Mean is judged against the row's scale: rows of mean ~0 have no relative accuracy. */
        double *scale = test_doubles(rows);
        for (size_t r = 0; r < rows; r++) scale[r] = 1.0 / rr[r] + fabs(rm[r]);
        test_assert_close_scaled("mean", m, rm, scale, rows, TOL_ELEMENTWISE * 4);
        free(scale);
    }

    /* Backward from the device's saved statistics. */
    float *dy = test_floats(n), *dx = test_floats(n), *dg = test_floats(cols),
          *db = test_floats(cols);
    test_random(dy, n, -1, 1);
    oclml_tensor *DY = test_tensor_from(2, shape, dy), *DX = test_tensor(2, shape);
    oclml_tensor *DG = test_tensor(1, &cols), *DB = test_tensor(1, &cols);
    if (rms)
        ASSERT_OK(oclml_rmsnorm_backward(T, X, with_affine ? G : NULL, R, DY, DX, DG));
    else
        ASSERT_OK(oclml_layernorm_backward(T, X, with_affine ? G : NULL, M, R, DY, DX, DG, DB));
    test_read(DX, dx, n);
    test_read(DG, dg, cols);
    double *rdx = test_doubles(n), *rdg = test_doubles(cols), *rdb = test_doubles(cols),
           *scale = test_doubles(n);
    ref_norm_backward(rms, rows, cols, x, with_affine ? g : NULL, m, rs, dy, rdx, rdg, rdb, scale);
    snprintf(what, sizeof what, "%s backward dx %zux%zu", rms ? "rmsnorm" : "layernorm", rows,
             cols);
    test_assert_close_scaled(what, dx, rdx, scale, n, TOL_REDUCTION);
    double *sg = test_doubles(cols), *sb = test_doubles(cols);
    ref_norm_param_scale(rms, rows, cols, x, m, rs, dy, sg, sb);
    test_assert_close_scaled("dgamma", dg, rdg, sg, cols, TOL_REDUCTION);
    if (!rms) {
        test_read(DB, db, cols);
        test_assert_close_scaled("dbeta", db, rdb, sb, cols, TOL_REDUCTION);
    }
    free(sg);
    free(sb);
    /* Without parameter gradients dx comes from the unfused kernel: the same dx. */
    ASSERT_OK(oclml_fill(T, DX, NAN));
    if (rms)
        ASSERT_OK(oclml_rmsnorm_backward(T, X, with_affine ? G : NULL, R, DY, DX, NULL));
    else
        ASSERT_OK(oclml_layernorm_backward(T, X, with_affine ? G : NULL, M, R, DY, DX, NULL, NULL));
    test_read(DX, dx, n);
    test_assert_close_scaled("dx without parameter gradients", dx, rdx, scale, n, TOL_REDUCTION);
    oclml_tensor *all[] = {X, Y, G, B, M, R, DY, DX, DG, DB};
    for (int i = 0; i < 10; i++) oclml_tensor_destroy(all[i]);
    void *mem[] = {g, b, y, m, rs, ref, rm, rr, dy, dx, dg, db, rdx, rdg, rdb, scale};
    for (int i = 0; i < 16; i++) free(mem[i]);
}

static void random_case(int rms, size_t rows, size_t cols, int affine) {
    float *x = test_floats(rows * cols);
    test_random(x, rows * cols, -3, 5);
    check_case(rms, rows, cols, x, affine);
    free(x);
}

static const size_t COLS[] = {1,   2,   3,   4,   7,    31,   32,   33,  128,
                              129, 255, 256, 257, 1000, 1024, 4099, 8192};

START_TEST(sizes_around_the_work_group) {
    for (size_t i = 0; i < sizeof COLS / sizeof COLS[0]; i++)
        random_case(_i, 3, COLS[i], i % 2 == 0);
    random_case(_i, 1000, 16, 1);
    random_case(_i, 2000, 129, 1);
}
END_TEST

/* The GPU's layout (several work-items a row, reducing through local memory) on this device
 * too, where CPUs take a work-item a row by default (cpu.layout). */
START_TEST(gpu_layout) {
    test_retune("cpu.layout=0");
    static const size_t cols[] = {1, 33, 257, 1000, 4099};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) random_case(_i, 5, cols[i], i % 2);
}
END_TEST

START_TEST(long_rows_chunked) {
    random_case(_i, 3, 40000, 1);
    random_case(_i, 2, 100003, 0);
    /* Row slices in the first pass with the parameter gradients, the last short (8 rows each,
     * batches of NORM_PP_ROWS) and the last column group partly past the row's end. */
    test_retune("rows.norm_splits=5");
    random_case(_i, 37, 16411, 1);
}
END_TEST

/* More rows than a launch may have work-groups along dimension 1 (here 2, by tuning): the
 * chunked kernels, forward and backward, run in slices of the grid. */
START_TEST(long_rows_in_grid_slices) {
    test_retune("launch.grid_yz=2");
    random_case(_i, 5, 100003, 1);
}
END_TEST

START_TEST(equal_rows_and_extremes) {
    size_t rows = 4, cols = 300, n = rows * cols;
    float *x = test_floats(n);
    test_random(x, n, -1e4f, 1e4f);
    for (size_t c = 0; c < cols; c++) {
        x[cols + c] = 7.5f;                           /* equal values: var 0, finite output */
        x[2 * cols + c] = 1e4f;                       /* large equal values */
        x[3 * cols + c] = (c % 2) ? 1e-30f : -1e-30f; /* tiny values, variance near denormal */
    }
    check_case(_i, rows, cols, x, 1);
    /* With equal rows, layernorm's output is beta exactly. */
    if (!_i) {
        size_t shape[2] = {1, cols};
        float beta[300], out[300];
        test_random(beta, cols, -1, 1);
        oclml_tensor *X = test_tensor_from(2, shape, x + cols),
                     *B = test_tensor_from(1, &cols, beta);
        oclml_tensor *Y = test_tensor(2, shape);
        ASSERT_OK(oclml_layernorm(T, X, NULL, B, 1e-5f, Y, NULL, NULL));
        test_read(Y, out, cols);
        for (size_t c = 0; c < cols; c++)
            ck_assert_msg(out[c] == beta[c], "equal row: %g vs beta %g", out[c], beta[c]);
        oclml_tensor_destroy(X);
        oclml_tensor_destroy(B);
        oclml_tensor_destroy(Y);
    }
    free(x);
}
END_TEST

START_TEST(backward_by_finite_differences) {
    int rms = _i;
    size_t rows = 3, cols = 19, n = rows * cols, shape[2] = {rows, cols};
    float *x = test_floats(n), *w = test_floats(n), *g = test_floats(cols), *b = test_floats(cols);
    float *dx = test_floats(n), *dg = test_floats(cols), *m = test_floats(rows),
          *rs = test_floats(rows);
    test_random(x, n, -2, 2);
    test_random(w, n, -1, 1);
    test_random(g, cols, 0.5f, 1.5f);
    test_random(b, cols, -1, 1);
    oclml_tensor *X = test_tensor_from(2, shape, x), *W = test_tensor_from(2, shape, w);
    oclml_tensor *G = test_tensor_from(1, &cols, g), *B = test_tensor_from(1, &cols, b);
    oclml_tensor *Y = test_tensor(2, shape), *M = test_tensor(1, &rows), *R = test_tensor(1, &rows);
    oclml_tensor *DX = test_tensor(2, shape), *DG = test_tensor(1, &cols);
    const double eps = 1e-5;
    if (rms) {
        ASSERT_OK(oclml_rmsnorm(T, X, G, (float)eps, Y, R));
        ASSERT_OK(oclml_rmsnorm_backward(T, X, G, R, W, DX, DG));
    } else {
        ASSERT_OK(oclml_layernorm(T, X, G, B, (float)eps, Y, M, R));
        ASSERT_OK(oclml_layernorm_backward(T, X, G, M, R, W, DX, DG, NULL));
    }
    test_read(DX, dx, n);
    test_read(DG, dg, cols);
    /* L = sum(w * y); central differences of the double reference in x and in gamma. */
    double *yp = test_doubles(n), *ym = test_doubles(n), *fd = test_doubles(n),
           *fdg = test_doubles(cols);
    const float h = 1e-2f;
    for (size_t i = 0; i < n + cols; i++) {
        float *p = i < n ? &x[i] : &g[i - n];
        float keep = *p;
        *p = keep + h;
        ref_norm(rms, rows, cols, x, g, rms ? NULL : b, eps, yp, NULL, NULL);
        *p = keep - h;
        ref_norm(rms, rows, cols, x, g, rms ? NULL : b, eps, ym, NULL, NULL);
        *p = keep;
        double l = 0;
        for (size_t j = 0; j < n; j++) l += w[j] * (yp[j] - ym[j]);
        double d = l / (2.0 * ((double)(keep + h) - keep));
        if (i < n)
            fd[i] = d;
        else
            fdg[i - n] = d;
    }
    test_assert_close("norm backward dx vs finite differences", dx, fd, n, 2e-3);
    test_assert_close("norm backward dgamma vs finite differences", dg, fdg, cols, 2e-3);
    oclml_tensor *all[] = {X, W, G, B, Y, M, R, DX, DG};
    for (int i = 0; i < 9; i++) oclml_tensor_destroy(all[i]);
    void *mem[] = {x, w, g, b, dx, dg, m, rs, yp, ym, fd, fdg};
    for (int i = 0; i < 12; i++) free(mem[i]);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s[2] = {3, 4}, wrong = 5, three = 3, four = 4;
    oclml_tensor *X = test_tensor(2, s), *Y = test_tensor(2, s), *V5 = test_tensor(1, &wrong);
    oclml_tensor *V3 = test_tensor(1, &three), *V4 = test_tensor(1, &four);
    ASSERT_STATUS(oclml_layernorm(T, X, V5, NULL, 1e-5f, Y, NULL, NULL), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_layernorm(T, X, NULL, V5, 1e-5f, Y, NULL, NULL), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_layernorm(T, X, NULL, NULL, 1e-5f, Y, V4, NULL), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_layernorm(T, X, NULL, NULL, -1.0f, Y, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_layernorm(T, X, NULL, NULL, NAN, Y, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_layernorm(T, X, NULL, NULL, 1e-5f, NULL, NULL, NULL),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_rmsnorm(T, X, V3, 1e-5f, Y, NULL), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_rmsnorm(NULL, X, NULL, 1e-5f, Y, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_layernorm_backward(T, X, NULL, NULL, V3, X, Y, NULL, NULL),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_layernorm_backward(T, X, NULL, V3, V3, X, Y, V3, NULL),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_rmsnorm_backward(T, X, NULL, V4, X, Y, NULL), OCLML_ERR_INVALID_SHAPE);
    float out[12];
    test_read(Y, out, 12);
    for (int i = 0; i < 12; i++) ck_assert(isnan(out[i]));
    oclml_tensor *all[] = {X, Y, V5, V3, V4};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("norm");
    TCase *tc = tcase_create("norm");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, sizes_around_the_work_group, 0, 2);
    tcase_add_loop_test(tc, long_rows_in_grid_slices, 0, 2);
    tcase_add_loop_test(tc, gpu_layout, 0, 2);
    tcase_add_loop_test(tc, long_rows_chunked, 0, 2);
    tcase_add_loop_test(tc, equal_rows_and_extremes, 0, 2);
    tcase_add_loop_test(tc, backward_by_finite_differences, 0, 2);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
