/* Reductions along rows and over whole tensors against double references: sizes around the
 * work-group, long rows, ties, NaN, offsets, bad input. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

/* Reference of op over x[0..n) (argmax: first index of the max; NaN counts as largest). */
static double ref_reduce(int op, const float *x, size_t n) {
    double s = 0, best = -INFINITY;
    size_t bi = 0;
    int seen_nan = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        if (seen_nan) continue;
        if (isnan(x[i])) {
            seen_nan = 1;
            best = NAN;
            bi = i;
        } else if (x[i] > best || i == 0) {
            best = x[i];
            bi = i;
        }
    }
    switch (op) {
    case OCLML_REDUCE_SUM:
        return s;
    case OCLML_REDUCE_MEAN:
        return s / (double)n;
    case OCLML_REDUCE_MAX:
        return best;
    default:
        return (double)bi;
    }
}

static const char *NAMES[] = {"sum", "max", "mean", "argmax"};

static void check_rows(int op, size_t rows, size_t cols, float *x) {
    size_t n = rows * cols, shape[2] = {rows, cols};
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor(1, &rows);
    ASSERT_OK(oclml_reduce_rows(T, op, X, Y));
    float *y = test_floats(rows);
    double *ref = test_doubles(rows), *scale = test_doubles(rows);
    test_read(Y, y, rows);
    for (size_t r = 0; r < rows; r++) {
        ref[r] = ref_reduce(op, x + r * cols, cols);
        double a = 0;
        for (size_t c = 0; c < cols; c++) a += fabs(x[r * cols + c]);
        scale[r] = (op == OCLML_REDUCE_SUM)    ? a
                   : (op == OCLML_REDUCE_MEAN) ? a / cols
                                               : fabs(ref[r]);
    }
    char what[64];
    snprintf(what, sizeof what, "reduce_rows %s %zux%zu", NAMES[op], rows, cols);
    test_assert_close_scaled(what, y, ref, scale, rows,
                             op >= OCLML_REDUCE_MAX && op != OCLML_REDUCE_MEAN ? 0 : TOL_REDUCTION);
    (void)n;
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Y);
    free(y);
    free(ref);
    free(scale);
}

static void check_all(int op, size_t n, float *x) {
    size_t one = 1;
    oclml_tensor *X = test_tensor_from(1, &n, x), *Y = test_tensor(1, &one);
    ASSERT_OK(oclml_reduce_all(T, op, X, Y));
    float y;
    test_read(Y, &y, 1);
    double ref = ref_reduce(op, x, n), a = 0;
    for (size_t i = 0; i < n; i++) a += fabs(x[i]);
    double scale = (op == OCLML_REDUCE_SUM) ? a : (op == OCLML_REDUCE_MEAN) ? a / n : fabs(ref);
    char what[64];
    snprintf(what, sizeof what, "reduce_all %s n=%zu", NAMES[op], n);
    test_assert_close_scaled(what, &y, &ref, &scale, 1,
                             op == OCLML_REDUCE_MAX || op == OCLML_REDUCE_ARGMAX ? 0
                                                                                 : TOL_REDUCTION);
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Y);
}

START_TEST(rows_every_size) {
    static const size_t cols[] = {1, 2, 3, 31, 32, 33, 255, 256, 257, 1000, 4099, 100003};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        size_t rows = cols[i] > 10000 ? 3 : 37, n = rows * cols[i];
        float *x = test_floats(n);
        test_random(x, n, -10, 10);
        check_rows(_i, rows, cols[i], x);
        free(x);
    }
}
END_TEST

/* Loop: the four ops, then again in the GPU's layout (float4 groups strided over the grid,
 * work-group trees) where a CPU folds a contiguous chunk a work-item by default (cpu.layout=0). */
START_TEST(whole_tensor) {
    static const size_t sizes[] = {1, 5, 256, 257, 65537, 3000001};
    if (_i >= 4) test_retune("cpu.layout=0");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        float *x = test_floats(sizes[i]);
        test_random(x, sizes[i], -10, 10);
        check_all(_i % 4, sizes[i], x);
        free(x);
    }
}
END_TEST

/* Loop 1: the GPU's layout on a CPU too (cpu.layout=0). The long tensor puts ties and NaNs in
 * the same chunk and lane and in different ones, past a CPU's first block of lanes. */
START_TEST(ties_nan_and_extremes) {
    if (_i) test_retune("cpu.layout=0");
    const size_t big = 70001;
    float *y = test_floats(big);
    test_random(y, big, -1, 1);
    y[1000] = y[1001] = y[1064] = y[50000] = 5.0f; /* the first, 1000, wins */
    for (int op = 0; op < 4; op++) check_all(op, big, y);
    y[40000] = NAN; /* the first NaN, 30000, is the max */
    y[30000] = NAN;
    y[30064] = NAN;
    for (int op = 0; op < 4; op++) check_all(op, big, y);
    free(y);
    size_t rows = 4, cols = 300, n = rows * cols;
    float *x = test_floats(n);
    test_random(x, n, -1, 1);
    x[0 * cols + 17] = 5.0f; /* ties: the first index wins */
    x[0 * cols + 200] = 5.0f;
    x[1 * cols + 50] = NAN; /* NaN is the max; sums become NaN */
    x[1 * cols + 60] = NAN;
    for (size_t c = 0; c < cols; c++) x[2 * cols + c] = -INFINITY;
    x[3 * cols + 299] = 1e30f;
    for (int op = 0; op < 4; op++) check_rows(op, rows, cols, x);
    for (int op = 0; op < 4; op++) check_all(op, n, x);
    free(x);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s[2] = {3, 4}, two = 2, one = 1, three = 3;
    oclml_tensor *X = test_tensor(2, s), *Y2 = test_tensor(1, &two), *Y1 = test_tensor(1, &one),
                 *Y3 = test_tensor(1, &three);
    ASSERT_STATUS(oclml_reduce_rows(T, OCLML_REDUCE_SUM, X, Y2), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_reduce_rows(T, (oclml_reduce_op)9, X, Y3), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_reduce_rows(T, OCLML_REDUCE_SUM, NULL, Y3), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_reduce_all(T, OCLML_REDUCE_SUM, X, Y2), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_reduce_all(NULL, OCLML_REDUCE_SUM, X, Y1), OCLML_ERR_NULL_POINTER);
    float out[3];
    test_read(Y3, out, 3);
    for (int i = 0; i < 3; i++) ck_assert(isnan(out[i]));
    oclml_tensor *all[] = {X, Y2, Y1, Y3};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("reduce");
    TCase *tc = tcase_create("reduce");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, rows_every_size, 0, 4);
    tcase_add_loop_test(tc, whole_tensor, 0, 8);
    tcase_add_loop_test(tc, ties_nan_and_extremes, 0, 2);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
