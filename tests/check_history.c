/* History encoder against the double reference: empty, length 1, shorter than each window, long
 * histories, a batch mixing them, bad input. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

START_TEST(mixed_lengths_batch) {
    static const size_t lens[] = {0, 1, 2, 5, 8, 9, 31, 33, 127, 129, 1000, 100003};
    size_t B = sizeof lens / sizeof lens[0], N = 100003;
    float *series = test_floats(B * 2 * N), *len = test_floats(B), *out = test_floats(B * 64);
    /* A decaying loss with noise and a noisy gradient norm, like a training run. */
    test_random(series, B * 2 * N, -0.1f, 0.1f);
    for (size_t b = 0; b < B; b++) {
        len[b] = (float)lens[b];
        for (size_t i = 0; i < N; i++)
            series[(b * 2) * N + i] += 3.0f * expf(-(float)i / 500.0f) + 0.5f;
    }
    size_t shape[3] = {B, 2, N}, fs[2] = {B, 64};
    oclml_tensor *S = test_tensor_from(3, shape, series), *Lt = test_tensor_from(1, &B, len),
                 *Fo = test_tensor(2, fs);
    ASSERT_OK(oclml_history_encode(T, S, Lt, Fo));
    test_read(Fo, out, B * 64);
    double *ref = test_doubles(B * 64), *scale = test_doubles(B * 64);
    for (size_t b = 0; b < B; b++) {
        ref_history_encode(series + b * 2 * N, series + (b * 2 + 1) * N, lens[b], ref + b * 64);
        for (int k = 0; k < 64; k++)
            scale[b * 64 + k] = fabs(ref[b * 64 + k]) + 1e-3; /* stats near 0 */
        if (lens[b] == 0)
            for (int k = 0; k < 64; k++)
                ck_assert_msg(out[b * 64 + k] == 0.0f, "empty history: feature %d = %g", k,
                              out[b * 64 + k]);
        if (lens[b] == 1)
            for (int s = 0; s < 8; s++) {
                ck_assert_msg(out[b * 64 + s * 8 + 1] == 0.0f, "length 1: std %g",
                              out[b * 64 + s * 8 + 1]);
                ck_assert_msg(out[b * 64 + s * 8 + 5] == 0.0f, "length 1: slope %g",
                              out[b * 64 + s * 8 + 5]);
            }
    }
    test_assert_close_scaled("history features", out, ref, scale, B * 64, TOL_REDUCTION * 10);
    oclml_tensor_destroy(S);
    oclml_tensor_destroy(Lt);
    oclml_tensor_destroy(Fo);
    free(series);
    free(len);
    free(out);
    free(ref);
    free(scale);
}
END_TEST

START_TEST(full_length_without_lengths) {
    size_t B = 3, N = 50, shape[3] = {B, 2, N}, fs[2] = {B, 64};
    float *series = test_floats(B * 2 * N), out[3 * 64];
    test_random(series, B * 2 * N, -2, 2);
    oclml_tensor *S = test_tensor_from(3, shape, series), *Fo = test_tensor(2, fs);
    ASSERT_OK(oclml_history_encode(T, S, NULL, Fo));
    test_read(Fo, out, B * 64);
    double ref[3 * 64], scale[3 * 64];
    for (size_t b = 0; b < B; b++)
        ref_history_encode(series + b * 2 * N, series + (b * 2 + 1) * N, N, ref + b * 64);
    for (int k = 0; k < 3 * 64; k++) scale[k] = fabs(ref[k]) + 1e-3;
    test_assert_close_scaled("history features, no lengths", out, ref, scale, B * 64,
                             TOL_REDUCTION * 10);
    oclml_tensor_destroy(S);
    oclml_tensor_destroy(Fo);
    free(series);
}
END_TEST

/* A loss series with a large offset (1000 plus a slow trend and noise): the slope must keep
 * its accuracy (a sum of position times value loses it to cancellation; NUMERICS.md's offset
 * series). */
START_TEST(offset_series_keep_slope_accuracy) {
    size_t B = 2, N = 4000, shape[3] = {B, 2, N}, fs[2] = {B, 64};
    float *series = test_floats(B * 2 * N), *out = test_floats(B * 64);
    test_random(series, B * 2 * N, -0.05f, 0.05f);
    for (size_t k = 0; k < B * 2; k++)
        for (size_t i = 0; i < N; i++)
            series[k * N + i] += (k % 2 ? 1.0e4f : 1000.0f) - 1e-4f * (float)i;
    oclml_tensor *S = test_tensor_from(3, shape, series), *Fo = test_tensor(2, fs);
    ASSERT_OK(oclml_history_encode(T, S, NULL, Fo));
    test_read(Fo, out, B * 64);
    double ref[2 * 64];
    for (size_t b = 0; b < B; b++)
        ref_history_encode(series + b * 2 * N, series + (b * 2 + 1) * N, N, ref + b * 64);
    for (size_t b = 0; b < B; b++)
        for (int sw = 0; sw < 8; sw++) { /* every series and window: the slope, relative */
            size_t k = b * 64 + (size_t)sw * 8 + 5;
            double rel = fabs(out[k] - ref[k]) / fabs(ref[k]);
            ck_assert_msg(rel < 2e-4 || fabs(out[k] - ref[k]) < 1e-7,
                          "slope (entry %zu, series/window %d): %.9g vs %.9g (rel %.2e)", b, sw,
                          out[k], ref[k], rel);
        }
    oclml_tensor_destroy(S);
    oclml_tensor_destroy(Fo);
    free(series);
    free(out);
}
END_TEST

/* NaN in a window makes the window's statistics NaN, min and max included; windows that do not
 * reach it stay finite. */
START_TEST(nan_in_a_window) {
    size_t B = 1, N = 300, shape[3] = {B, 2, N}, fs[2] = {B, 64};
    float *series = test_floats(2 * N), out[64];
    test_random(series, 2 * N, -1, 1);
    series[N - 3] = NAN;   /* loss: in every window */
    series[N + 100] = NAN; /* gradient norm: only in the whole-history window */
    oclml_tensor *S = test_tensor_from(3, shape, series), *Fo = test_tensor(2, fs);
    ASSERT_OK(oclml_history_encode(T, S, NULL, Fo));
    test_read(Fo, out, 64);
    for (int w = 0; w < 4; w++)
        for (int stat = 0; stat < 4; stat++) /* mean, std, min, max */
            ck_assert_msg(isnan(out[w * 8 + stat]), "loss window %d stat %d: %g", w, stat,
                          out[w * 8 + stat]);
    for (int w = 0; w < 3; w++)
        for (int stat = 0; stat < 8; stat++)
            ck_assert_msg(isfinite(out[32 + w * 8 + stat]), "gnorm window %d stat %d: %g", w, stat,
                          out[32 + w * 8 + stat]);
    ck_assert(isnan(out[32 + 3 * 8 + 2]) && isnan(out[32 + 3 * 8 + 3]));
    oclml_tensor_destroy(S);
    oclml_tensor_destroy(Fo);
    free(series);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s3[3] = {2, 3, 10}, s2[3] = {2, 2, 10}, f1[2] = {2, 63}, f2[2] = {2, 64}, three = 3;
    oclml_tensor *A = test_tensor(3, s3), *S = test_tensor(3, s2), *F1 = test_tensor(2, f1),
                 *F2 = test_tensor(2, f2);
    oclml_tensor *L3 = test_tensor(1, &three);
    ASSERT_STATUS(oclml_history_encode(T, A, NULL, F2), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_history_encode(T, S, NULL, F1), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_history_encode(T, S, L3, F2), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_history_encode(T, NULL, NULL, F2), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_history_encode(NULL, S, NULL, F2), OCLML_ERR_NULL_POINTER);
    float out[128];
    test_read(F2, out, 128);
    for (int i = 0; i < 128; i++) ck_assert(isnan(out[i]));
    oclml_tensor *all[] = {A, S, F1, F2, L3};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("history");
    TCase *tc = tcase_create("history");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_test(tc, mixed_lengths_batch);
    tcase_add_test(tc, full_length_without_lengths);
    tcase_add_test(tc, offset_series_keep_slope_accuracy);
    tcase_add_test(tc, nan_in_a_window);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
