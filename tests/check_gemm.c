/* GEMM against the double-precision reference: sizes 1, 7, 129, 1000 and rectangles, every
 * transpose, alpha and beta, batched, and bad input. */
#include "testutil.h"

#include <stdio.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Runs one GEMM case and checks it. beta == 0 poisons C with NaN first: it must not leak. */
static void gemm_case(int ta, int tb, size_t m, size_t n, size_t k, float alpha, float beta) {
    size_t ashape[2] = {ta ? k : m, ta ? m : k}, bshape[2] = {tb ? n : k, tb ? k : n},
           cshape[2] = {m, n};
    float *a = test_floats(m * k), *b = test_floats(k * n), *c = test_floats(m * n);
    test_random(a, m * k, -1, 1);
    test_random(b, k * n, -1, 1);
    if (beta != 0) test_random(c, m * n, -1, 1);
    oclml_tensor *A = test_tensor_from(2, ashape, a), *B = test_tensor_from(2, bshape, b);
    oclml_tensor *C = test_tensor_from(2, cshape, c);
    ASSERT_OK(oclml_gemm(T, ta, tb, alpha, A, B, beta, C));
    double *ref = test_doubles(m * n);
    ref_gemm(ta, tb, m, n, k, alpha, a, b, beta, c, ref);
    float *out = test_floats(m * n);
    test_read(C, out, m * n);
    char what[96];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d %zux%zux%zu alpha=%g beta=%g", ta, tb, m, n, k,
             alpha, beta);
    test_assert_close(what, out, ref, m * n, TOL_GEMM);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
    free(a);
    free(b);
    free(c);
    free(out);
    free(ref);
}

static const size_t SHAPES[][3] = {
    {1, 1, 1}, {7, 7, 7}, {129, 129, 129}, {7, 129, 33}, {130, 3, 257}};

START_TEST(small_and_odd_all_transposes) {
    int t = _i;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        gemm_case(t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], 1.0f, 0.0f);
}
END_TEST

START_TEST(alpha_beta) {
    gemm_case(0, 0, 33, 65, 17, 0.7f, 0.0f);
    gemm_case(1, 0, 33, 65, 17, -1.5f, -1.3f);
    gemm_case(0, 1, 129, 7, 64, 2.0f, 1.0f);
}
END_TEST

START_TEST(size_1000_all_transposes) {
    gemm_case(_i & 1, _i >> 1, 1000, 1000, 1000, 1.0f, _i == 3 ? 0.5f : 0.0f);
}
END_TEST

START_TEST(batched) {
    size_t batch = 3, m = 17, n = 9, k = 31;
    size_t ash[3] = {batch, m, k}, bsh[2] = {n, k}, csh[3] = {batch, m, n};
    float *a = test_floats(batch * m * k), *b = test_floats(n * k), *c = test_floats(batch * m * n);
    test_random(a, batch * m * k, -1, 1);
    test_random(b, n * k, -1, 1);
    test_random(c, batch * m * n, -1, 1);
    oclml_tensor *A = test_tensor_from(3, ash, a), *B = test_tensor_from(2, bsh, b);
    oclml_tensor *C = test_tensor_from(3, csh, c);
    /* B is shared by every batch entry and transposed: C[i] = 1.25 A[i] B^T - 0.5 C[i]. */
    ASSERT_OK(oclml_gemm_batched(T, OCLML_NO_TRANS, OCLML_TRANS, 1.25f, A, B, -0.5f, C));
    double *ref = test_doubles(batch * m * n);
    for (size_t i = 0; i < batch; i++)
        ref_gemm(0, 1, m, n, k, 1.25, a + i * m * k, b, -0.5, c + i * m * n, ref + i * m * n);
    float *out = test_floats(batch * m * n);
    test_read(C, out, batch * m * n);
    test_assert_close("batched gemm", out, ref, batch * m * n, TOL_GEMM);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
    free(a);
    free(b);
    free(c);
    free(out);
    free(ref);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s23[2] = {2, 3}, s34[2] = {3, 4}, s24[2] = {2, 4}, s25[2] = {2, 5}, v[1] = {4};
    size_t b3[3] = {2, 2, 4}, b4[3] = {3, 3, 4};
    oclml_tensor *A = test_tensor(2, s23), *B = test_tensor(2, s34), *C = test_tensor(2, s25);
    oclml_tensor *V = test_tensor(1, v), *C3 = test_tensor(3, b3), *B3 = test_tensor(3, b4);
    ASSERT_STATUS(oclml_gemm(T, 0, 0, 1, A, B, 0, C), OCLML_ERR_INVALID_SHAPE);
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(T), "do not chain"));
    ASSERT_STATUS(oclml_gemm(T, 1, 0, 1, A, B, 0, C), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm(T, 0, 0, 1, V, B, 0, C), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm(T, 2, 0, 1, A, B, 0, C), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_gemm(T, 0, 0, 1, NULL, B, 0, C), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gemm(NULL, 0, 0, 1, A, B, 0, C), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gemm(T, 0, 0, 1, A, B, 0, C3), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm_batched(T, 0, 0, 1, A, B3, 0, C3), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm_batched(T, 0, 0, 1, A, B, 0, C), OCLML_ERR_INVALID_SHAPE);
    float out[10];
    test_read(C, out, 10);
    for (int i = 0; i < 10; i++) ck_assert(isnan(out[i]));
    /* The happy path on the same tensors works: 2x3 * 3x4 into a 2x4. */
    oclml_tensor *C24 = test_tensor(2, s24);
    float a[6], b[12];
    test_random(a, 6, -1, 1);
    test_random(b, 12, -1, 1);
    ASSERT_OK(oclml_tensor_write(A, a, 6));
    ASSERT_OK(oclml_tensor_write(B, b, 12));
    ASSERT_OK(oclml_gemm(T, 0, 0, 1, A, B, 0, C24));
    oclml_tensor *all[] = {A, B, C, V, C3, B3, C24};
    for (int i = 0; i < 7; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, small_and_odd_all_transposes, 0, 4);
    tcase_add_test(tc, alpha_beta);
    tcase_add_loop_test(tc, size_1000_all_transposes, 0, 4);
    tcase_add_test(tc, batched);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
