/* Linear layers on bf16 and fp16: the forward's epilogue (bias, activation, pre, dropout) and the
 * backward (dZ in x's dtype, dx in 16 bits, dw and db in fp32), on the tensor-core kernel (its
 * instruction emulated: gemm.lp_mma=2) and through the fp32 conversion, against a double
 * reference from the inputs as their dtype holds them (tolerance.h's low-precision bounds), and
 * the dtype refusals. */
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const PATHS[2] = {"gemm.lp_mma=0", "gemm.lp_mma=2"};

static void check_elem(const char *what, size_t i, float got, double want, double tol) {
    ck_assert_msg(fabs(got - want) <= tol, "%s[%zu] = %.9g, want %.9g (tol %.3g)", what, i, got,
                  want, tol);
}

#define ROWS 45
#define IN 40
#define OUT 37

/* y = act(x W^T + b) with pre, every tensor of dtype dt; i: path, dtype, activation. */
START_TEST(forward_matches_reference) {
    test_retune(PATHS[_i % 2]);
    const oclml_dtype dt = _i / 2 % 2 ? OCLML_FLOAT16 : OCLML_BFLOAT16;
    const oclml_activation act = _i / 4 ? OCLML_ACT_RELU : OCLML_ACT_GELU_TANH;
    const size_t xs[2] = {ROWS, IN}, ws[2] = {OUT, IN}, ys[2] = {ROWS, OUT}, bs = OUT;
    float *x, *w, *b;
    oclml_tensor *X = test_tensor_held(dt, 2, xs, -1, 1, &x),
                 *W = test_tensor_held(dt, 2, ws, -1, 1, &w),
                 *B = test_tensor_held(dt, 1, &bs, -1, 1, &b),
                 *Y = test_tensor_held(dt, 2, ys, 0, 0, NULL),
                 *P = test_tensor_held(dt, 2, ys, 0, 0, NULL);
    ASSERT_OK(oclml_linear(T, act, X, W, B, Y, P));
    float *y = test_floats(ROWS * OUT), *pre = test_floats(ROWS * OUT);
    test_read(Y, y, ROWS * OUT);
    test_read(P, pre, ROWS * OUT);
    const double u = test_unit_roundoff(dt), acc = TOL_LP_PRODUCT_C * sqrt((double)IN) * TOL_U_FP32;
    for (size_t r = 0; r < ROWS; r++)
        for (size_t o = 0; o < OUT; o++) {
            double z = b[o], mag = fabs(b[o]);
            for (size_t k = 0; k < IN; k++) {
                z += (double)x[r * IN + k] * w[o * IN + k];
                mag += fabs((double)x[r * IN + k] * w[o * IN + k]);
            }
            const size_t i = r * OUT + o;
            check_elem("pre", i, pre[i], z, u * fabs(z) + acc * mag);
            const double yv = test_act(act, z);
            check_elem("y", i, y[i], yv, u * fabs(yv) + 1.2 * acc * mag + 1e-6 * mag);
        }
    free(x), free(w), free(b), free(y), free(pre);
    oclml_tensor_destroy(X), oclml_tensor_destroy(W), oclml_tensor_destroy(B);
    oclml_tensor_destroy(Y), oclml_tensor_destroy(P);
}
END_TEST

/* The mixed-precision backward: dy and saved in dt, dx in dt, dw and db in fp32 (accumulate
 * into dw's old values on odd i). dZ is rounded to dt before its products: dx and dw hold that
 * rounding's u on the terms' magnitude; db sums dZ before it. */
START_TEST(backward_matches_reference) {
    test_retune(PATHS[_i % 2]);
    const oclml_dtype dt = _i == 1 || _i == 2 ? OCLML_FLOAT16 : OCLML_BFLOAT16;
    const int accumulate = _i / 2; /* db is NaN-poisoned: checked where not accumulated */
    const oclml_activation act = OCLML_ACT_GELU_TANH;
    const size_t xs[2] = {ROWS, IN}, ws[2] = {OUT, IN}, ys[2] = {ROWS, OUT}, bs = OUT;
    float *x, *w, *dy, *s, *dw0;
    oclml_tensor *X = test_tensor_held(dt, 2, xs, -1, 1, &x),
                 *W = test_tensor_held(dt, 2, ws, -1, 1, &w),
                 *DY = test_tensor_held(dt, 2, ys, -1, 1, &dy),
                 *S = test_tensor_held(dt, 2, ys, -2, 2, &s),
                 *DX = test_tensor_held(dt, 2, xs, 0, 0, NULL),
                 *DW = test_tensor_held(OCLML_FLOAT32, 2, ws, -1, 1, &dw0),
                 *DB = test_tensor(1, &bs);
    ASSERT_OK(oclml_linear_backward(T, act, X, W, S, DY, DX, DW, DB, accumulate));
    float *dx = test_floats(ROWS * IN), *dw = test_floats(OUT * IN), *db = test_floats(OUT);
    test_read(DX, dx, ROWS * IN);
    test_read(DW, dw, OUT * IN);
    test_read(DB, db, OUT);
    double *dz = test_doubles(ROWS * OUT);
    for (size_t i = 0; i < ROWS * OUT; i++) dz[i] = dy[i] * test_act_grad(act, s[i]);
    const double u = test_unit_roundoff(dt), acc = TOL_LP_PRODUCT_C * TOL_U_FP32;
    for (size_t r = 0; r < ROWS; r++)
        for (size_t k = 0; k < IN; k++) {
            double v = 0, mag = 0;
            for (size_t o = 0; o < OUT; o++) {
                v += dz[r * OUT + o] * w[o * IN + k];
                mag += fabs(dz[r * OUT + o] * w[o * IN + k]);
            }
            check_elem("dx", r * IN + k, dx[r * IN + k], v,
                       u * fabs(v) + (u + acc * sqrt((double)OUT)) * mag);
        }
    for (size_t o = 0; o < OUT; o++) {
        double sum = 0, smag = 0;
        for (size_t r = 0; r < ROWS; r++) sum += dz[r * OUT + o], smag += fabs(dz[r * OUT + o]);
        if (!accumulate) check_elem("db", o, db[o], sum, (acc * sqrt((double)ROWS) + 1e-6) * smag);
        for (size_t k = 0; k < IN; k++) {
            double v = accumulate ? dw0[o * IN + k] : 0, mag = fabs(v);
            for (size_t r = 0; r < ROWS; r++) {
                v += dz[r * OUT + o] * x[r * IN + k];
                mag += fabs(dz[r * OUT + o] * x[r * IN + k]);
            }
            check_elem("dw", o * IN + k, dw[o * IN + k], v,
                       (u + acc * sqrt((double)ROWS)) * mag + 1e-30);
        }
    }
    free(x), free(w), free(dy), free(s), free(dw0), free(dx), free(dw), free(db), free(dz);
    oclml_tensor_destroy(X), oclml_tensor_destroy(W), oclml_tensor_destroy(DY);
    oclml_tensor_destroy(S), oclml_tensor_destroy(DX), oclml_tensor_destroy(DW);
    oclml_tensor_destroy(DB);
}
END_TEST

/* Dropout in a bf16 layer's epilogue drops the elements the fp32 layer drops (the same mask
 * rule), and keeps the others within the bf16 bound of the fp32 layer on the same values. */
START_TEST(dropout_masks_as_fp32) {
    test_retune(PATHS[_i]);
    const size_t xs[2] = {ROWS, IN}, ws[2] = {OUT, IN}, ys[2] = {ROWS, OUT}, bs = OUT;
    float *x, *w, *b;
    oclml_tensor *X = test_tensor_held(OCLML_BFLOAT16, 2, xs, -1, 1, &x),
                 *W = test_tensor_held(OCLML_BFLOAT16, 2, ws, -1, 1, &w),
                 *B = test_tensor_held(OCLML_BFLOAT16, 1, &bs, -1, 1, &b),
                 *Y = test_tensor_held(OCLML_BFLOAT16, 2, ys, 0, 0, NULL);
    oclml_tensor *X32 = test_tensor_from(2, xs, x), *W32 = test_tensor_from(2, ws, w),
                 *B32 = test_tensor_from(1, &bs, b), *Y32 = test_tensor(2, ys);
    oclml_dropout_params drop = test_dropout_params(0.3f, 77, 5);
    ASSERT_OK(oclml_linear_dropout(T, OCLML_ACT_GELU_ERF, &drop, X, W, B, Y, NULL));
    ASSERT_OK(oclml_linear_dropout(T, OCLML_ACT_GELU_ERF, &drop, X32, W32, B32, Y32, NULL));
    float *y = test_floats(ROWS * OUT), *y32 = test_floats(ROWS * OUT);
    test_read(Y, y, ROWS * OUT);
    test_read(Y32, y32, ROWS * OUT);
    size_t dropped = 0;
    for (size_t i = 0; i < ROWS * OUT; i++) {
        ck_assert_msg((y[i] == 0) == (y32[i] == 0), "[%zu]: bf16 %g, fp32 %g", i, y[i], y32[i]);
        dropped += y32[i] == 0;
        check_elem("y", i, y[i], y32[i], TOL_U_BF16 * fabs(y32[i]) + 1e-5);
    }
    ck_assert_msg(dropped > ROWS * OUT / 5 && dropped < ROWS * OUT / 2.5, "dropped %zu", dropped);
    free(x), free(w), free(b), free(y), free(y32);
    oclml_tensor *all[] = {X, W, B, Y, X32, W32, B32, Y32};
    for (int i = 0; i < 8; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

START_TEST(refusals_touch_nothing) {
    const size_t xs[2] = {4, 8}, ws[2] = {3, 8}, ys[2] = {4, 3};
    oclml_tensor *xb, *wh, *y32 = test_tensor(2, ys), *x32 = test_tensor(2, xs),
                           *w32 = test_tensor(2, ws), *yb;
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_BFLOAT16, 2, xs, &xb));
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_FLOAT16, 2, ws, &wh));
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_BFLOAT16, 2, ys, &yb));
    ASSERT_STATUS(oclml_linear(T, OCLML_ACT_NONE, xb, wh, NULL, y32, NULL), OCLML_ERR_DTYPE);
    ASSERT_STATUS(oclml_linear(T, OCLML_ACT_NONE, x32, w32, NULL, yb, NULL), OCLML_ERR_DTYPE);
    test_assert_untouched(y32, 12);
    ASSERT_STATUS(oclml_linear_backward(T, OCLML_ACT_NONE, x32, w32, NULL, yb, NULL, NULL, NULL, 0),
                  OCLML_ERR_DTYPE);
    oclml_tensor *all[] = {xb, wh, y32, x32, w32, yb};
    for (int i = 0; i < 6; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("linear_lp");
    TCase *tc = tcase_create("linear_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_matches_reference, 0, test_tier(2, 8));
    tcase_add_loop_test(tc, backward_matches_reference, 0, test_tier(2, 4));
    tcase_add_loop_test(tc, dropout_masks_as_fp32, 0, 2);
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
