/* Elementwise ops on bf16 and fp16 tensors (each tensor its own dtype): the kernels run the fp32
 * function on the values the inputs hold, so every output is, bit for bit, the fp32 op's output
 * on those values rounded once to its dtype (the fp32 ops are checked against double references
 * in check_elementwise). Sizes not a multiple of 4 and tensors at odd element offsets (the float4
 * groups at any alignment); NaN in gives NaN out. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 1031 /* odd: a tail after the groups of four */

/* A tensor of dtype dt holding random values, viewed at element offset `at` of its buffer, and
 * its fp32 twin with the same values; held: the values. */
typedef struct twin {
    oclml_tensor *base, *t, *t32;
} twin;

static twin twin_of(oclml_dtype dt, size_t n, size_t at, float lo, float hi) {
    twin w;
    const size_t total = n + at;
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, 1, &total, &w.base));
    float *v = test_floats(total);
    test_random(v, total, lo, hi);
    v[at + 7] = NAN;
    ASSERT_OK(oclml_tensor_write(w.base, v, total));
    test_read(w.base, v, total);
    cl_mem buf;
    size_t off;
    ASSERT_OK(oclml_tensor_buffer(w.base, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap_dtype(T, dt, buf, at * oclml_dtype_size(dt), 1, &n, &w.t));
    w.t32 = test_tensor_from(1, &n, v + at);
    free(v);
    return w;
}

static void twin_free(twin *w) {
    oclml_tensor_destroy(w->t);
    oclml_tensor_destroy(w->base);
    oclml_tensor_destroy(w->t32);
}

/* The dtype combinations: (input, second input, output). */
static const oclml_dtype COMBOS[][3] = {{OCLML_BFLOAT16, OCLML_BFLOAT16, OCLML_BFLOAT16},
                                        {OCLML_FLOAT16, OCLML_FLOAT32, OCLML_FLOAT32},
                                        {OCLML_FLOAT32, OCLML_BFLOAT16, OCLML_FLOAT16}};

START_TEST(unary_and_backward) {
    const oclml_dtype *dt = COMBOS[_i];
    twin x = twin_of(dt[0], N, 3, -4, 4), g = twin_of(dt[1], N, 1, -1, 1);
    oclml_tensor *y, *y32 = test_tensor(1, (size_t[]){N});
    ASSERT_OK(oclml_tensor_create_dtype(T, dt[2], 1, (size_t[]){N}, &y));
    static const oclml_unary_op ops[] = {OCLML_GELU_TANH, OCLML_EXP, OCLML_RELU, OCLML_SIGMOID};
    for (int k = 0; k < 4; k++) {
        ASSERT_OK(oclml_unary(T, ops[k], x.t, y));
        ASSERT_OK(oclml_unary(T, ops[k], x.t32, y32));
        test_assert_rounded("unary", y, y32);
        ASSERT_OK(oclml_unary_backward(T, ops[k], x.t, g.t, y));
        ASSERT_OK(oclml_unary_backward(T, ops[k], x.t32, g.t32, y32));
        test_assert_rounded("unary_backward", y, y32);
    }
    ASSERT_OK(oclml_pow(T, x.t, 3.0f, y));
    ASSERT_OK(oclml_pow(T, x.t32, 3.0f, y32));
    test_assert_rounded("pow", y, y32);
    twin_free(&x), twin_free(&g);
    oclml_tensor_destroy(y), oclml_tensor_destroy(y32);
}
END_TEST

/* Same-shape operands, a scalar, and broadcast rows of 12 (float4 groups) and 13 columns. */
START_TEST(binary_every_shape) {
    const oclml_dtype *dt = COMBOS[_i];
    static const oclml_binary_op ops[] = {OCLML_ADD, OCLML_MUL, OCLML_MAX};
    for (int cols = 12; cols <= 13; cols++) {
        const size_t rows = 37, n = rows * (size_t)cols, shape[2] = {rows, (size_t)cols};
        twin a = twin_of(dt[0], n, 2, -3, 3), b = twin_of(dt[1], n, 0, -3, 3),
             r = twin_of(dt[1], (size_t)cols, 1, -3, 3);
        oclml_tensor *a2, *a2_32, *y, *y32 = test_tensor(2, shape);
        cl_mem buf;
        size_t off;
        ASSERT_OK(oclml_tensor_buffer(a.t, &buf, &off));
        ASSERT_OK(oclml_tensor_wrap_dtype(T, dt[0], buf, off, 2, shape, &a2));
        ASSERT_OK(oclml_tensor_buffer(a.t32, &buf, &off));
        ASSERT_OK(oclml_tensor_wrap(T, buf, off, 2, shape, &a2_32));
        ASSERT_OK(oclml_tensor_create_dtype(T, dt[2], 2, shape, &y));
        oclml_tensor *b2, *b2_32;
        ASSERT_OK(oclml_tensor_buffer(b.t, &buf, &off));
        ASSERT_OK(oclml_tensor_wrap_dtype(T, dt[1], buf, off, 2, shape, &b2));
        ASSERT_OK(oclml_tensor_buffer(b.t32, &buf, &off));
        ASSERT_OK(oclml_tensor_wrap(T, buf, off, 2, shape, &b2_32));
        for (int k = 0; k < 3; k++) {
            ASSERT_OK(oclml_binary(T, ops[k], a2, b2, y));
            ASSERT_OK(oclml_binary(T, ops[k], a2_32, b2_32, y32));
            test_assert_rounded("binary", y, y32);
            ASSERT_OK(oclml_binary(T, ops[k], a2, r.t, y));
            ASSERT_OK(oclml_binary(T, ops[k], a2_32, r.t32, y32));
            test_assert_rounded(cols % 4 ? "binary row" : "binary row4", y, y32);
            ASSERT_OK(oclml_binary_scalar(T, ops[k], a2, 0.75f, y));
            ASSERT_OK(oclml_binary_scalar(T, ops[k], a2_32, 0.75f, y32));
            test_assert_rounded("binary_scalar", y, y32);
        }
        oclml_tensor *all[] = {a2, a2_32, b2, b2_32, y, y32};
        for (int i = 0; i < 6; i++) oclml_tensor_destroy(all[i]);
        twin_free(&a), twin_free(&b), twin_free(&r);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("elementwise_lp");
    TCase *tc = tcase_create("elementwise_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, unary_and_backward, 0, 3);
    tcase_add_loop_test(tc, binary_every_shape, 0, 3);
    suite_add_tcase(s, tc);
    return test_main(s);
}
