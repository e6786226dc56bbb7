/* Softmax and log-softmax, forward and backward, on bf16 and fp16 tensors (fp32 math, each
 * output rounded once): the register path with float4 and scalar access and the chunked
 * long-row path, against a double reference from the inputs as their dtype holds them, within
 * the output dtype's unit roundoff (tolerance.h); NaN rows; the dtypes mixed. */
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct sm_case {
    size_t rows, cols;
    oclml_dtype in, out;
} sm_case;

/* Register path (float4, scalar), and a row long enough for the chunked path on every device. */
static const sm_case CASES[] = {{7, 64, OCLML_BFLOAT16, OCLML_BFLOAT16},
                                {5, 37, OCLML_FLOAT16, OCLML_FLOAT32},
                                {3, 1000, OCLML_FLOAT16, OCLML_FLOAT16},
                                {2, 40003, OCLML_BFLOAT16, OCLML_FLOAT32}};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* i: case, then log or not. */
START_TEST(forward_matches_reference) {
    const sm_case *c = &CASES[_i / 2];
    const bool log_sm = _i % 2;
    float *x, *y;
    oclml_tensor *X = test_tensor_held(c->in, 2, (size_t[]){c->rows, c->cols}, -8, 8, &x),
                 *Y = test_tensor_held(c->out, 2, (size_t[]){c->rows, c->cols}, 0, 0, &y);
    x[3] = NAN; /* row 0 all NaN */
    ASSERT_OK(oclml_tensor_write(X, x, c->rows * c->cols));
    ASSERT_OK((log_sm ? oclml_log_softmax : oclml_softmax)(T, X, Y));
    test_read(Y, y, c->rows * c->cols);
    const double u = test_unit_roundoff(c->out);
    for (size_t r = 0; r < c->rows; r++) {
        const float *xr = x + r * c->cols, *yr = y + r * c->cols;
        double m = -INFINITY, s = 0;
        for (size_t j = 0; j < c->cols; j++) m = fmax(m, xr[j]);
        for (size_t j = 0; j < c->cols; j++) s += exp(xr[j] - m);
        for (size_t j = 0; j < c->cols; j++) {
            if (r == 0) {
                ck_assert_msg(isnan(yr[j]), "row 0 (a NaN) [%zu] = %g", j, yr[j]);
                continue;
            }
            const double want = log_sm ? xr[j] - m - log(s) : exp(xr[j] - m) / s;
            const double tol = u * fabs(want) + test_abs_floor(c->out) +
                               (log_sm ? 4e-6 * (1 + fabs(xr[j] - m)) : 1e-7);
            ck_assert_msg(fabs(yr[j] - want) <= tol,
                          "%s %zux%zu %s -> %s [%zu,%zu] = %.8g, want %.8g (tol %.2g)",
                          log_sm ? "log_softmax" : "softmax", c->rows, c->cols,
                          oclml_dtype_name(c->in), oclml_dtype_name(c->out), r, j, yr[j], want,
                          tol);
        }
    }
    free(x), free(y);
    oclml_tensor_destroy(X), oclml_tensor_destroy(Y);
}
END_TEST

/* softmax: dx = y (dy - sum y dy); log-softmax: dx = dy - exp(y) sum dy; y and dy in the case's
 * input dtype, dx in its output dtype. */
START_TEST(backward_matches_reference) {
    const sm_case *c = &CASES[_i / 2];
    const bool log_sm = _i % 2;
    float *y, *dy, *dx;
    oclml_tensor *Y = test_tensor_held(c->in, 2, (size_t[]){c->rows, c->cols}, log_sm ? -9 : 0,
                                       log_sm ? -1 : 0.01f, &y),
                 *DY = test_tensor_held(c->in, 2, (size_t[]){c->rows, c->cols}, -1, 1, &dy),
                 *DX = test_tensor_held(c->out, 2, (size_t[]){c->rows, c->cols}, 0, 0, &dx);
    ASSERT_OK((log_sm ? oclml_log_softmax_backward : oclml_softmax_backward)(T, Y, DY, DX));
    test_read(DX, dx, c->rows * c->cols);
    const double u = test_unit_roundoff(c->out);
    for (size_t r = 0; r < c->rows; r++) {
        const float *yr = y + r * c->cols, *gr = dy + r * c->cols, *dr = dx + r * c->cols;
        double s = 0, mag = 0;
        for (size_t j = 0; j < c->cols; j++) {
            s += log_sm ? gr[j] : (double)yr[j] * gr[j];
            mag += log_sm ? fabs(gr[j]) : fabs((double)yr[j] * gr[j]);
        }
        for (size_t j = 0; j < c->cols; j++) {
            const double e = log_sm ? exp(yr[j]) : yr[j];
            const double want = log_sm ? gr[j] - e * s : e * (gr[j] - s);
            const double tol = u * fabs(want) + test_abs_floor(c->out) +
                               1e-6 * fabs(e) * (fabs(gr[j]) + mag) + 1e-30;
            ck_assert_msg(fabs(dr[j] - want) <= tol,
                          "%s backward %zux%zu [%zu,%zu] = %.8g, want %.8g",
                          log_sm ? "log_softmax" : "softmax", c->rows, c->cols, r, j, dr[j], want);
        }
    }
    free(y), free(dy), free(dx);
    oclml_tensor_destroy(Y), oclml_tensor_destroy(DY), oclml_tensor_destroy(DX);
}
END_TEST

/* Mismatched shapes are refused whatever the dtypes; nothing is written. */
START_TEST(refusals_touch_nothing) {
    float *x, *y;
    oclml_tensor *X = test_tensor_held(OCLML_BFLOAT16, 2, (size_t[]){4, 8}, -1, 1, &x),
                 *Y = test_tensor_held(OCLML_FLOAT32, 2, (size_t[]){4, 9}, 0, 0, &y);
    ASSERT_STATUS(oclml_softmax(T, X, Y), OCLML_ERR_INVALID_SHAPE);
    test_assert_untouched(Y, 36);
    free(x), free(y);
    oclml_tensor_destroy(X), oclml_tensor_destroy(Y);
}
END_TEST

int main(void) {
    Suite *s = suite_create("softmax_lp");
    TCase *tc = tcase_create("softmax_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_matches_reference, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, backward_matches_reference, 0, 2 * N_CASES);
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
