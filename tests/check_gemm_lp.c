/* GEMM on bf16 and fp16 operands, C in either or fp32: on the tensor-core kernel (its instruction
 * emulated here: gemm.lp_mma=2, the layouts the GPU runs) and through the fp32 conversion, every
 * transpose, edges of the tiles, K tails, batches with a shared operand, beta, NaN, operands
 * staged element by element (odd extents), the conversion fallback for tiles the kernel cannot
 * swizzle, and the refusals.
 *
 * Reference (NUMERICS.md, low precision): a double product of the inputs as their dtype holds
 * them (read back as floats); each element within tolerance.h's product bound, u that of C's
 * dtype. */
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lp_case {
    oclml_dtype ab, c;
    int ta, tb;
    size_t m, n, k, batch;
    int shared_b; /* B one matrix for every batch entry */
    float alpha, beta;
} lp_case;

static oclml_tensor *make(oclml_dtype dt, size_t batch, size_t r, size_t c, const float *v) {
    const size_t shape[3] = {batch, r, c};
    oclml_tensor *t;
    const int nd = batch ? 3 : 2;
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, nd, batch ? shape : shape + 1, &t));
    if (v) ASSERT_OK(oclml_tensor_write(t, v, (batch ? batch : 1) * r * c));
    return t;
}

/* Random values of the operands' scale, written, then read back as the dtype rounded them. */
static float *rounded(oclml_tensor *t, size_t n, float lo, float hi) {
    float *v = test_floats(n);
    test_random(v, n, lo, hi);
    ASSERT_OK(oclml_tensor_write(t, v, n));
    test_read(t, v, n);
    return v;
}

/* Runs c on T and checks it; nan_at >= 0 puts a NaN at that element of A first. */
static void run_case(const lp_case *c, long nan_at) {
    const size_t B = c->batch ? c->batch : 1, na = B * c->m * c->k,
                 nb = (c->shared_b ? 1 : B) * c->k * c->n, nc = B * c->m * c->n;
    oclml_tensor *A = make(c->ab, c->batch, c->ta ? c->k : c->m, c->ta ? c->m : c->k, NULL),
                 *Bt = make(c->ab, c->shared_b ? 0 : c->batch, c->tb ? c->n : c->k,
                            c->tb ? c->k : c->n, NULL),
                 *C = make(c->c, c->batch, c->m, c->n, NULL);
    float *a = rounded(A, na, -2, 2), *b = rounded(Bt, nb, -2, 2), *c0 = test_floats(nc);
    if (nan_at >= 0) {
        a[nan_at] = NAN;
        ASSERT_OK(oclml_tensor_write(A, a, na));
    }
    if (c->beta != 0.0f) {
        free(c0);
        c0 = rounded(C, nc, -1, 1);
    } else {
        ASSERT_OK(oclml_tensor_write(C, c0, nc)); /* NaN: beta 0 must not read it */
    }
    const oclml_transpose ta = c->ta ? OCLML_TRANS : OCLML_NO_TRANS,
                          tb = c->tb ? OCLML_TRANS : OCLML_NO_TRANS;
    if (c->batch)
        ASSERT_OK(oclml_gemm_batched(T, ta, tb, c->alpha, A, Bt, c->beta, C));
    else
        ASSERT_OK(oclml_gemm(T, ta, tb, c->alpha, A, Bt, c->beta, C));
    float *got = test_floats(nc);
    test_read(C, got, nc);
    const double uc = test_unit_roundoff(c->c),
                 acc = TOL_LP_PRODUCT_C * sqrt((double)c->k) * TOL_U_FP32;
    for (size_t e = 0; e < B; e++)
        for (size_t i = 0; i < c->m; i++)
            for (size_t j = 0; j < c->n; j++) {
                double sum = 0, mag = 0;
                for (size_t l = 0; l < c->k; l++) {
                    const double x = a[e * c->m * c->k + (c->ta ? l * c->m + i : i * c->k + l)],
                                 y = b[(c->shared_b ? 0 : e) * c->k * c->n +
                                       (c->tb ? j * c->k + l : l * c->n + j)];
                    sum += x * y;
                    mag += fabs(x * y);
                }
                const size_t at = (e * c->m + i) * c->n + j;
                double ref = c->alpha * sum;
                mag = fabs(c->alpha) * mag;
                if (c->beta != 0.0f) {
                    ref += c->beta * (double)c0[at];
                    mag += fabs(c->beta * (double)c0[at]);
                }
                const double tol = uc * fabs(ref) + acc * mag + 1e-30;
                if (isnan(ref)) {
                    ck_assert_msg(isnan(got[at]), "[%zu,%zu,%zu]: %g, want NaN", e, i, j, got[at]);
                    continue;
                }
                ck_assert_msg(fabs(got[at] - ref) <= tol,
                              "%s x %s -> %s, %c%c %zux%zux%zu batch %zu: [%zu,%zu,%zu] = %.9g, "
                              "want %.9g (tol %.3g)",
                              oclml_dtype_name(c->ab), oclml_dtype_name(c->ab),
                              oclml_dtype_name(c->c), c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->m,
                              c->n, c->k, c->batch, e, i, j, got[at], ref, tol);
            }
    free(a);
    free(b);
    free(c0);
    free(got);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(Bt);
    oclml_tensor_destroy(C);
}

/* The kernel's cases: sizes multiples of 8 that cross the 128 x 128 tiles' edges and leave a
 * K tail, every dtype pair and transpose; the quick tier's four cover each dtype pair and each
 * transpose once. */
static lp_case kernel_case(int i) {
    const oclml_dtype ab = i / 2 % 2 ? OCLML_FLOAT16 : OCLML_BFLOAT16;
    const int t = (i + i / 4) % 4; /* the 16 (transposes, dtype, C's dtype) once each */
    lp_case c = {ab, i % 2 ? OCLML_FLOAT32 : ab, t & 1, t >> 1, 136, 72, 48, 0, 0, 1.0f, 0.0f};
    if (i % 3 == 2) c.alpha = -0.5f, c.beta = 0.75f;
    return c;
}

/* The plan of c's product on T, into plan (256 bytes). */
static void plan_of(const lp_case *c, char *plan) {
    ASSERT_OK(oclml_gemm_plan_dtype(T, c->ta ? OCLML_TRANS : OCLML_NO_TRANS,
                                    c->tb ? OCLML_TRANS : OCLML_NO_TRANS, c->m, c->n, c->k, 1,
                                    c->ab, c->c, plan, 256));
}

/* Whether T's work-groups hold the kernel's 8 warps (CI also runs the suite with work-groups of
 * 16: there the conversion). */
static bool holds_the_kernel(void) {
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    return info.max_work_group_size >= 256;
}

START_TEST(kernel_matches_reference) {
    test_retune("gemm.lp_mma=2");
    const lp_case c = kernel_case(_i);
    char plan[256];
    plan_of(&c, plan);
    if (holds_the_kernel())
        ck_assert_msg(strstr(plan, "tensor cores") && !strstr(plan, "converted"), "%s", plan);
    else
        ck_assert_msg(strstr(plan, "converted") != NULL, "%s", plan);
    run_case(&c, -1);
}
END_TEST

/* Batches on the kernel: B shared (2-D) or one per entry, a tile smaller than the default (the
 * first the program of kernel_case(2): PoCL compiles each emulated program for seconds). */
START_TEST(kernel_batched) {
    test_retune(_i ? "gemm.lp_mma=2,gemm.lp_tile=64:64:2:2:2" : "gemm.lp_mma=2");
    const lp_case c = {OCLML_FLOAT16, OCLML_FLOAT16, 0, 1, 40, 64, 72, 3, !_i, 1.0f, 0.0f};
    run_case(&c, -1);
}
END_TEST

/* The conversion path (the default on devices without the instruction): odd sizes no kernel
 * stages, every dtype pair, C's old values, batches. */
START_TEST(converted_matches_reference) {
    test_retune("gemm.lp_mma=0");
    lp_case c = kernel_case(_i);
    c.m = 37, c.n = 45, c.k = 29;
    if (_i % 4 == 3) c.batch = 2, c.shared_b = _i % 8 == 3;
    run_case(&c, -1);
}
END_TEST

/* Odd sizes (no extent or leading dimension a multiple of 8) on the kernel: operands staged
 * element by element, K-contiguous and row-contiguous (the transposes), both dtypes, tails of M,
 * N and K inside one tile; the plan names them. */
START_TEST(kernel_stages_unaligned) {
    test_retune("gemm.lp_mma=2");
    lp_case c = kernel_case(_i);
    c.ta = _i % 2, c.tb = _i % 2; /* A and B each K-contiguous once, row-contiguous once */
    c.m = 37, c.n = 45, c.k = 29;
    char plan[256];
    plan_of(&c, plan);
    if (holds_the_kernel())
        ck_assert_msg(strstr(plan, "A staged by element, B staged by element") != NULL, "%s", plan);
    run_case(&c, -1);
}
END_TEST

/* Odd sizes with the operands copied padded first (gemm.lp_pad=1; by default only where each
 * element feeds 512 products): both transposes, a batch with B one per entry, beta reading C. */
START_TEST(kernel_pads_unaligned) {
    test_retune("gemm.lp_mma=2,gemm.lp_pad=1");
    lp_case c = {OCLML_BFLOAT16, OCLML_FLOAT32, _i % 2, _i % 2, 37, 45, 29, 0, 0, 1.0f, 0.0f};
    if (_i == 2) c = (lp_case){OCLML_FLOAT16, OCLML_BFLOAT16, 1, 0, 43, 21, 75, 3, 0, 0.5f, 1.0f};
    char plan[256];
    plan_of(&c, plan);
    if (holds_the_kernel())
        ck_assert_msg(strstr(plan, "A copied padded, B copied padded") != NULL, "%s", plan);
    run_case(&c, -1);
}
END_TEST

/* The K loop's other forms on the kernel: stages 64 deep (their own swizzle) and the next step's
 * fragments loaded ahead (the last step of a stage waiting for the next stage first), over
 * several stages with a K tail; 0 aligned operands, 1 odd sizes staged by element and
 * transposed. */
START_TEST(kernel_pipelines) {
    test_retune(_i ? "gemm.lp_mma=2,gemm.lp_tile=64:64:2:2:3,gemm.lp_depth=64,gemm.lp_prefetch=1"
                   : "gemm.lp_mma=2,gemm.lp_tile=64:64:2:2:3,gemm.lp_prefetch=1");
    lp_case c = {OCLML_BFLOAT16, OCLML_FLOAT32, 0, 1, 72, 80, 216, 0, 0, 1.0f, 0.0f};
    if (_i) c.m = 67, c.n = 45, c.k = 163, c.ta = 1, c.tb = 0;
    char plan[256];
    plan_of(&c, plan);
    if (holds_the_kernel())
        ck_assert_msg(strstr(plan, "fragments ahead") && strstr(plan, _i ? "x64," : "x32,"), "%s",
                      plan);
    run_case(&c, -1);
}
END_TEST

/* K splits on the kernel (fp32 C: partials summed with alpha and beta by the finish), forced
 * where the test's few blocks would not ask for them: 0 aligned, a batch, C's old values; 1 odd
 * sizes staged by element and transposed, the last split shorter; 2 a bf16 C, which takes none;
 * 3 odd sizes copied padded (A K-contiguous, its K tail reading the padding) with stages 64 deep
 * and fragments ahead. */
START_TEST(kernel_splits_k) {
    test_retune(_i == 3 ? "gemm.lp_mma=2,gemm.lp_tile=64:64:2:2:2,gemm.lp_splits=3,gemm.lp_pad=1,"
                          "gemm.lp_depth=64,gemm.lp_prefetch=1"
                        : "gemm.lp_mma=2,gemm.lp_tile=64:64:2:2:2,gemm.lp_splits=3");
    lp_case c = {OCLML_BFLOAT16, OCLML_FLOAT32, 0, 1, 72, 80, 224, 2, 0, 0.75f, 0.5f};
    if (_i == 1) c = (lp_case){OCLML_FLOAT16, OCLML_FLOAT32, 1, 0, 37, 45, 163, 0, 0, 1.0f, 0.0f};
    if (_i == 2) c.c = OCLML_BFLOAT16;
    if (_i == 3) c = (lp_case){OCLML_BFLOAT16, OCLML_FLOAT32, 0, 1, 37, 45, 331, 0, 0, 1.0f, 0.5f};
    char plan[256];
    plan_of(&c, plan);
    if (holds_the_kernel())
        ck_assert_msg((strstr(plan, "3 K splits") != NULL) == (_i != 2), "%s", plan);
    run_case(&c, -1);
}
END_TEST

/* A forced tile the stages cannot swizzle (96 rows: not a multiple of 64) falls back to the
 * conversion even under gemm.lp_mma=2, the plan says so, and the result is right. */
START_TEST(falls_back_to_conversion) {
    test_retune("gemm.lp_mma=2,gemm.lp_tile=96:96:2:2:2");
    const lp_case c = {OCLML_BFLOAT16, OCLML_FLOAT32, 1, 0, 136, 136, 72, 0, 0, 1.0f, 0.0f};
    char plan[256];
    plan_of(&c, plan);
    ck_assert_msg(strstr(plan, "converted to fp32") != NULL, "%s", plan);
    run_case(&c, -1);
}
END_TEST

/* A NaN in A gives NaN across its row of C and nowhere else, on both paths. */
START_TEST(nan_propagates) {
    test_retune(_i ? "gemm.lp_mma=2" : "gemm.lp_mma=0");
    const lp_case c = {OCLML_BFLOAT16, OCLML_BFLOAT16, 0, 0, 64, 72, 40, 0, 0, 1.0f, 0.0f};
    run_case(&c, 5 * 40 + 17);
}
END_TEST

START_TEST(refusals_touch_nothing) {
    const size_t s[2] = {16, 16};
    oclml_tensor *a, *b, *h, *c;
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_BFLOAT16, 2, s, &a));
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_BFLOAT16, 2, s, &b));
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_FLOAT16, 2, s, &h));
    c = test_tensor(2, s);
    ASSERT_STATUS(oclml_gemm(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 1, a, h, 0, c), OCLML_ERR_DTYPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "bf16") &&
                      strstr(oclml_ctx_last_error(T), "fp16"),
                  "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_gemm(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 1, a, b, 0, a),
                  OCLML_ERR_INVALID_ARGUMENT); /* C overlaps A */
    test_assert_untouched(c, 256);
    char plan[64];
    ASSERT_STATUS(oclml_gemm_plan_dtype(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 8, 8, 8, 1,
                                        (oclml_dtype)9, OCLML_FLOAT32, plan, sizeof plan),
                  OCLML_ERR_INVALID_ARGUMENT);
    oclml_tensor_destroy(a);
    oclml_tensor_destroy(b);
    oclml_tensor_destroy(h);
    oclml_tensor_destroy(c);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gemm_lp");
    TCase *tc = tcase_create("gemm_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, kernel_matches_reference, 0, test_tier(4, 16));
    tcase_add_loop_test(tc, kernel_batched, 0, test_tier(1, 2));
    tcase_add_loop_test(tc, converted_matches_reference, 0, test_tier(8, 8));
    tcase_add_loop_test(tc, kernel_stages_unaligned, 0, test_tier(2, 4));
    tcase_add_loop_test(tc, kernel_pads_unaligned, 0, 3);
    tcase_add_loop_test(tc, kernel_pipelines, 0, 2);
    tcase_add_loop_test(tc, kernel_splits_k, 0, 4);
    tcase_add_test(tc, falls_back_to_conversion);
    tcase_add_loop_test(tc, nan_propagates, 0, 2);
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
