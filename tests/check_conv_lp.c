/* Convolution and pooling on bf16 and fp16 tensors: they run the fp32 op on the values the
 * 16-bit tensors hold (stand_in.h), so each 16-bit output is, bit for bit, the fp32 op's output
 * on those values rounded once to its dtype (the fp32 ops themselves are checked against double
 * references in check_conv and check_pool); fp32 outputs beside 16-bit inputs are the fp32
 * results exactly. Also: accumulated 16-bit gradients, transposed convolutions, the plan. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t numel_of(int nd, const size_t *s) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}

/* A tensor of dtype dt with random values, and its fp32 twin holding the same values. */
static void pair_of(oclml_dtype dt, int nd, const size_t *shape, float lo, float hi,
                    oclml_tensor **t16, oclml_tensor **t32) {
    const size_t n = numel_of(nd, shape);
    float *v = test_floats(n);
    test_random(v, n, lo, hi);
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, nd, shape, t16));
    ASSERT_OK(oclml_tensor_write(*t16, v, n));
    test_read(*t16, v, n);
    *t32 = test_tensor_from(nd, shape, v);
    free(v);
}

/* i: conv2d bf16 (y bf16), fp16 (y fp32), conv_transpose2d bf16; forward and backward with dw
 * accumulated in 16 bits on odd i. */
START_TEST(conv_is_fp32_rounded) {
    const oclml_dtype dt = _i == 1 ? OCLML_FLOAT16 : OCLML_BFLOAT16,
                      ydt = _i == 1 ? OCLML_FLOAT32 : dt;
    const bool transpose = _i == 2;
    const size_t xs[4] = {2, 3, 9, 7}, ws[4] = {transpose ? 3 : 5, transpose ? 5 : 3, 3, 3},
                 bs[1] = {5};
    const size_t ys[4] = {2, 5, transpose ? 11 : 9, transpose ? 9 : 7};
    oclml_conv2d_params p;
    oclml_conv2d_params_init(&p);
    if (!transpose) p.pad_before[0] = p.pad_before[1] = p.pad_after[0] = p.pad_after[1] = 1;
    oclml_tensor *x, *x32, *w, *w32, *b, *b32, *dy, *dy32, *dw, *dw32;
    pair_of(dt, 4, xs, -1, 1, &x, &x32);
    pair_of(dt, 4, ws, -0.5f, 0.5f, &w, &w32);
    pair_of(dt, 1, bs, -1, 1, &b, &b32);
    pair_of(dt, 4, ys, -1, 1, &dy, &dy32);
    pair_of(dt, 4, ws, -1, 1, &dw, &dw32);
    oclml_tensor *y, *y32 = test_tensor(4, ys), *dx, *dx32 = test_tensor(4, xs), *db,
                     *db32 = test_tensor(1, bs);
    ASSERT_OK(oclml_tensor_create_dtype(T, ydt, 4, ys, &y));
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, 4, xs, &dx));
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_FLOAT32, 1, bs, &db));
    char plan[512];
    if (!transpose) ASSERT_OK(oclml_conv2d_plan(T, &p, x, w, plan, sizeof plan));
    if (transpose) {
        ASSERT_OK(oclml_conv_transpose2d(T, &p, x, w, b, y));
        ASSERT_OK(oclml_conv_transpose2d(T, &p, x32, w32, b32, y32));
    } else {
        ASSERT_OK(oclml_conv2d(T, &p, x, w, b, y));
        ASSERT_OK(oclml_conv2d(T, &p, x32, w32, b32, y32));
    }
    test_assert_rounded("y", y, y32);
    const int acc = _i % 2;
    if (transpose) {
        ASSERT_OK(oclml_conv_transpose2d_backward(T, &p, x, w, dy, dx, dw, db, acc));
        ASSERT_OK(oclml_conv_transpose2d_backward(T, &p, x32, w32, dy32, dx32, dw32, db32, acc));
    } else {
        ASSERT_OK(oclml_conv2d_backward(T, &p, x, w, dy, dx, dw, db, acc));
        ASSERT_OK(oclml_conv2d_backward(T, &p, x32, w32, dy32, dx32, dw32, db32, acc));
    }
    test_assert_rounded("dx", dx, dx32);
    test_assert_rounded("dw", dw, dw32);
    if (!acc) test_assert_rounded("db", db, db32); /* accumulated: db starts NaN-poisoned in both */
    oclml_tensor *all[] = {x, x32, w, w32, b, b32, dy, dy32, dw, dw32, y, y32, dx, dx32, db, db32};
    for (int i = 0; i < 16; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

/* Max-pool with SiLU fused, its backward, and average pooling with its backward, in bf16 and
 * fp16. */
START_TEST(pool_is_fp32_rounded) {
    const oclml_dtype dt = _i ? OCLML_FLOAT16 : OCLML_BFLOAT16;
    const size_t xs[4] = {2, 3, 8, 10}, ys[4] = {2, 3, 4, 5};
    oclml_pool2d_params p;
    oclml_pool2d_params_init(&p);
    oclml_tensor *x, *x32, *dy, *dy32, *y, *y32 = test_tensor(4, ys), *dx,
                                           *dx32 = test_tensor(4, xs);
    pair_of(dt, 4, xs, -3, 3, &x, &x32);
    pair_of(dt, 4, ys, -1, 1, &dy, &dy32);
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, 4, ys, &y));
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, 4, xs, &dx));
    ASSERT_OK(oclml_act_max_pool2d(T, &p, OCLML_ACT_SILU, x, y));
    ASSERT_OK(oclml_act_max_pool2d(T, &p, OCLML_ACT_SILU, x32, y32));
    test_assert_rounded("act_max_pool2d", y, y32);
    ASSERT_OK(oclml_act_max_pool2d_backward(T, &p, OCLML_ACT_SILU, x, dy, dx));
    ASSERT_OK(oclml_act_max_pool2d_backward(T, &p, OCLML_ACT_SILU, x32, dy32, dx32));
    test_assert_rounded("act_max_pool2d_backward", dx, dx32);
    ASSERT_OK(oclml_avg_pool2d(T, &p, x, y));
    ASSERT_OK(oclml_avg_pool2d(T, &p, x32, y32));
    test_assert_rounded("avg_pool2d", y, y32);
    ASSERT_OK(oclml_avg_pool2d_backward(T, &p, dy, dx));
    ASSERT_OK(oclml_avg_pool2d_backward(T, &p, dy32, dx32));
    test_assert_rounded("avg_pool2d_backward", dx, dx32);
    oclml_tensor *all[] = {x, x32, dy, dy32, y, y32, dx, dx32};
    for (int i = 0; i < 8; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

/* A shape the fp32 op refuses is refused on the 16-bit path too, the output untouched. */
START_TEST(refusals_touch_nothing) {
    const size_t xs[4] = {1, 3, 8, 8}, ws[4] = {4, 2, 3, 3}, ys[4] = {1, 4, 6, 6};
    oclml_tensor *x, *x32, *w, *w32, *y = test_tensor(4, ys);
    pair_of(OCLML_BFLOAT16, 4, xs, -1, 1, &x, &x32);
    pair_of(OCLML_BFLOAT16, 4, ws, -1, 1, &w, &w32); /* 2 input channels: x has 3 */
    oclml_conv2d_params p;
    oclml_conv2d_params_init(&p);
    ASSERT_STATUS(oclml_conv2d(T, &p, x, w, NULL, y), OCLML_ERR_INVALID_SHAPE);
    test_assert_untouched(y, numel_of(4, ys));
    oclml_tensor *all[] = {x, x32, w, w32, y};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("conv_lp");
    TCase *tc = tcase_create("conv_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, conv_is_fp32_rounded, 0, 3);
    tcase_add_loop_test(tc, pool_is_fp32_rounded, 0, 2);
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
