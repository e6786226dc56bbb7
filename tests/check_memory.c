/* fill and copy: every size class, offsets, errors. Loop 1 of the sized tests runs the GPU's
 * layout (float4 groups strided over the grid) where a CPU takes contiguous chunks by default
 * (cpu.layout=0). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const size_t SIZES[] = {1, 2, 3, 4, 5, 255, 256, 257, 1023, 1025, 4099, 1000003};
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

START_TEST(fill_every_size) {
    if (_i) test_retune("cpu.layout=0");
    for (size_t s = 0; s < N_SIZES; s++) {
        size_t n = SIZES[s];
        oclml_tensor *t = test_tensor(1, &n);
        float v;
        test_random(&v, 1, -10, 10);
        ASSERT_OK(oclml_fill(T, t, v));
        float *out = test_floats(n);
        test_read(t, out, n);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(out[i] == v, "fill n=%zu: out[%zu] = %g, want %g", n, i, out[i], v);
        free(out);
        oclml_tensor_destroy(t);
    }
}
END_TEST

START_TEST(copy_every_size) {
    if (_i) test_retune("cpu.layout=0");
    for (size_t s = 0; s < N_SIZES; s++) {
        size_t n = SIZES[s];
        float *in = test_floats(n), *out = test_floats(n);
        test_random(in, n, -1e4f, 1e4f);
        oclml_tensor *src = test_tensor_from(1, &n, in), *dst = test_tensor(1, &n);
        ASSERT_OK(oclml_copy(T, src, dst));
        test_read(dst, out, n);
        ck_assert_msg(memcmp(in, out, n * sizeof *in) == 0, "copy n=%zu differs", n);
        free(in);
        free(out);
        oclml_tensor_destroy(src);
        oclml_tensor_destroy(dst);
    }
}
END_TEST

/* Tensors that start at odd element offsets inside one buffer, overlapping nothing. */
START_TEST(copy_between_offsets) {
    if (_i) test_retune("cpu.layout=0");
    cl_context clctx;
    oclml_ctx_cl_objects(T, &clctx, NULL, NULL);
    cl_int err;
    cl_mem buf = clCreateBuffer(clctx, CL_MEM_READ_WRITE, 2000 * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    size_t n = 997;
    oclml_tensor *a, *b;
    ASSERT_OK(oclml_tensor_wrap(T, buf, 1 * sizeof(float), 1, &n, &a));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 1001 * sizeof(float), 1, &n, &b));
    float *in = test_floats(n), *out = test_floats(n);
    test_random(in, n, -1, 1);
    ASSERT_OK(oclml_tensor_write(a, in, n));
    ASSERT_OK(oclml_fill(T, b, NAN));
    ASSERT_OK(oclml_copy(T, a, b));
    test_read(b, out, n);
    ck_assert(memcmp(in, out, n * sizeof *in) == 0);
    oclml_tensor_destroy(a);
    oclml_tensor_destroy(b);
    clReleaseMemObject(buf);
    free(in);
    free(out);
}
END_TEST

START_TEST(errors_touch_nothing) {
    size_t n = 16, m = 17;
    oclml_tensor *a = test_tensor(1, &n), *b = test_tensor(1, &m);
    ASSERT_STATUS(oclml_copy(T, a, b), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_copy(T, NULL, b), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_copy(T, a, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_fill(T, NULL, 1), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_fill(NULL, a, 1), OCLML_ERR_NULL_POINTER);
    float out[17];
    test_read(b, out, 17);
    for (int i = 0; i < 17; i++) ck_assert(isnan(out[i]));
    oclml_tensor_destroy(a);
    oclml_tensor_destroy(b);
}
END_TEST

int main(void) {
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("memory");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, fill_every_size, 0, 2);
    tcase_add_loop_test(tc, copy_every_size, 0, 2);
    tcase_add_loop_test(tc, copy_between_offsets, 0, 2);
    tcase_add_test(tc, errors_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
