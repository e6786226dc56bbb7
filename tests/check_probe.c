/* The FMA probe (self-verified against the host's fmaf) and device-side profiling. */
#include "testutil.h"

/* Loop 1: chains of single floats, as on GPUs, where a CPU takes vectors of its SIMD width. */
START_TEST(fma_probe_reports_a_rate) {
    if (_i) test_retune("cpu.layout=0");
    double g = -1;
    ASSERT_OK(oclml_probe_fma_gflops(T, &g));
    ck_assert_msg(g > 0.1 && g < 1e6, "implausible FMA rate %g GFLOP/s", g);
    ASSERT_STATUS(oclml_probe_fma_gflops(T, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_probe_fma_gflops(NULL, &g), OCLML_ERR_NULL_POINTER);
}
END_TEST

START_TEST(profiling_needs_profiling_queue) {
    double ms;
    ASSERT_STATUS(oclml_ctx_profile_begin(T), OCLML_ERR_UNSUPPORTED);
    ASSERT_STATUS(oclml_ctx_profile_end(T, &ms), OCLML_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(profiling_times_ops) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.profiling = 1;
    oclml_ctx *ctx = test_ctx_new(&o);
    size_t n = 1 << 20;
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_create(ctx, 1, &n, &t));
    double ms = -1;
    ASSERT_OK(oclml_ctx_profile_begin(ctx));
    ASSERT_STATUS(oclml_ctx_profile_end(ctx, &ms),
                  OCLML_ERR_INVALID_ARGUMENT); /* nothing enqueued */
    ASSERT_OK(oclml_ctx_profile_begin(ctx));
    ASSERT_OK(oclml_fill(ctx, t, 1.0f));
    ASSERT_OK(oclml_fill(ctx, t, 2.0f));
    ASSERT_STATUS(oclml_ctx_profile_end(ctx, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_OK(oclml_ctx_profile_begin(ctx));
    ASSERT_OK(oclml_fill(ctx, t, 3.0f));
    ASSERT_OK(oclml_ctx_profile_end(ctx, &ms));
    ck_assert_msg(ms > 0 && ms < 60000, "implausible time %g ms", ms);
    oclml_tensor_destroy(t);
    oclml_ctx_destroy(ctx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("probe");
    TCase *tc = tcase_create("probe");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, fma_probe_reports_a_rate, 0, 2);
    tcase_add_test(tc, profiling_needs_profiling_queue);
    tcase_add_test(tc, profiling_times_ops);
    suite_add_tcase(s, tc);
    return test_main(s);
}
