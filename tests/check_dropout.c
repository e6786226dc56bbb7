/* Dropout, its backward and the residual add with dropout: the mask element for element against
 * the host's copy of the rule (tests/ref/dropout.c), values against a double reference, the
 * fraction kept, regeneration in the backward, offsets, aliasing, NaN, and bad input. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static oclml_dropout_params params(float p, uint64_t seed, uint64_t offset) {
    oclml_dropout_params d;
    ASSERT_OK(oclml_dropout_params_init(&d));
    d.p = p;
    d.seed = seed;
    d.offset = offset;
    return d;
}

static oclml_tensor *random_tensor(size_t n, float *host) {
    test_random(host, n, -2, 2);
    const size_t shape[1] = {n};
    return test_tensor_from(1, shape, host);
}

/* y = x * keep * scale, keep by the host's rule, at sizes with tails and offsets past 32 bits. */
START_TEST(mask_and_values_match_the_rule) {
    const size_t sizes[] = {1, 3, 5, 4099, 1000003};
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f, 1.0f};
    const uint64_t offsets[] = {0, 1, 0xFFFFFFFFull, (1ull << 40) + 3};
    for (int si = 0; si < test_tier(4, 5); si++)
        for (int pi = 0; pi < 5; pi++) {
            size_t n = sizes[si];
            const oclml_dropout_params d =
                params(ps[pi], 0x1234567890abcdefull + (uint64_t)si, offsets[(si + pi) % 4]);
            float *x = test_floats(n), *y = test_floats(n);
            oclml_tensor *tx = random_tensor(n, x);
            const size_t shape[1] = {n};
            oclml_tensor *ty = test_tensor(1, shape);
            ASSERT_OK(oclml_dropout(T, &d, tx, ty));
            test_read(ty, y, n);
            const double scale = d.p < 1 ? 1.0 / (1.0f - d.p) : 0;
            for (size_t i = 0; i < n; i++) {
                bool keep = ref_dropout_keep(d.seed, d.offset, i, d.p);
                float want = keep ? (float)((double)x[i] * (float)scale) : 0.0f;
                ck_assert_msg(y[i] == want, "n %zu p %g: element %zu is %g, want %g (kept %d)", n,
                              (double)d.p, i, (double)y[i], (double)want, keep);
            }
            oclml_tensor_destroy(tx);
            oclml_tensor_destroy(ty);
            free(x);
            free(y);
        }
}
END_TEST

/* About 1 - p of the elements are kept: within 5 sigma at n = 100000. */
START_TEST(fraction_kept) {
    const size_t n = 100000, shape[1] = {n};
    float *ones = malloc(n * sizeof *ones), *y = test_floats(n);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    oclml_tensor *x = test_tensor_from(1, shape, ones), *ty = test_tensor(1, shape);
    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        const oclml_dropout_params d = params(ps[k], 99 + (uint64_t)k, 0);
        ASSERT_OK(oclml_dropout(T, &d, x, ty));
        test_read(ty, y, n);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) kept += y[i] != 0.0f;
        double want = (1 - ps[k]) * (double)n, sigma = sqrt(n * ps[k] * (1 - ps[k]));
        ck_assert_msg(fabs((double)kept - want) < 5 * sigma, "p %g: kept %zu of %zu", (double)ps[k],
                      kept, n);
    }
    oclml_tensor_destroy(x);
    oclml_tensor_destroy(ty);
    free(ones);
    free(y);
}
END_TEST

/* The backward regenerates the forward's mask: dx = dy * mask * scale exactly; the residual add
 * is x + dropout(y) bit for bit; a repeated call gives the same bits and an advanced offset
 * other ones; in place works. */
START_TEST(backward_add_repeat_and_in_place) {
    const size_t n = 4101, shape[2] = {3, 1367};
    float *x = test_floats(n), *y = test_floats(n), *g = test_floats(n);
    float *a = test_floats(n), *b = test_floats(n), *c = test_floats(n);
    test_random(x, n, -1, 1);
    test_random(y, n, -1, 1);
    test_random(g, n, -1, 1);
    oclml_tensor *tx = test_tensor_from(2, shape, x), *ty = test_tensor_from(2, shape, y),
                 *tg = test_tensor_from(2, shape, g), *out = test_tensor(2, shape),
                 *out2 = test_tensor(2, shape);
    oclml_dropout_params d = params(0.3f, 5, 77);
    /* forward's mask: dropout(ones) / scale */
    ASSERT_OK(oclml_dropout(T, &d, ty, out));
    test_read(out, a, n);
    ASSERT_OK(oclml_dropout_backward(T, &d, tg, out2));
    test_read(out2, b, n);
    for (size_t i = 0; i < n; i++) {
        bool keep = ref_dropout_keep(d.seed, d.offset, i, d.p);
        ck_assert(b[i] == (keep ? g[i] * (1.0f / (1.0f - d.p)) : 0.0f));
        ck_assert((a[i] != 0.0f || y[i] == 0.0f) == keep);
    }
    /* r = x + dropout(y), bit for bit, and in place over x */
    ASSERT_OK(oclml_dropout_add(T, &d, tx, ty, out2));
    test_read(out2, b, n);
    for (size_t i = 0; i < n; i++) ck_assert(b[i] == x[i] + a[i]);
    ASSERT_OK(oclml_dropout_add(T, &d, tx, ty, tx));
    test_read(tx, c, n);
    ck_assert(!memcmp(b, c, n * sizeof *b));
    /* the same params: the same bits; the offset advanced: another mask */
    ASSERT_OK(oclml_dropout(T, &d, ty, out));
    test_read(out, c, n);
    ck_assert(!memcmp(a, c, n * sizeof *a));
    d.offset += oclml_dropout_counters(n);
    ASSERT_OK(oclml_dropout(T, &d, ty, out));
    test_read(out, c, n);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += (a[i] != 0) == (c[i] != 0);
    ck_assert_msg(same < n * 9 / 10, "the advanced offset drew the same mask (%zu of %zu)", same,
                  n);
    /* in place: y = dropout(y) */
    ASSERT_OK(oclml_dropout(T, &d, ty, ty));
    test_read(ty, b, n);
    ck_assert(!memcmp(b, c, n * sizeof *b));
    ck_assert_uint_eq(oclml_dropout_counters(0), 0);
    ck_assert_uint_eq(oclml_dropout_counters(5), 2);
    oclml_tensor *all[] = {tx, ty, tg, out, out2};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
    float *fs[] = {x, y, g, a, b, c};
    for (int i = 0; i < 6; i++) free(fs[i]);
}
END_TEST

/* NaN at a kept and at a dropped position stays NaN (NaN * 0, as PyTorch). */
START_TEST(nan_stays_nan) {
    const size_t n = 64, shape[1] = {n};
    const oclml_dropout_params d = params(0.5f, 3, 0);
    size_t kept = n, dropped = n;
    for (size_t i = 0; i < n && (kept == n || dropped == n); i++) {
        if (ref_dropout_keep(d.seed, d.offset, i, d.p))
            kept = i;
        else
            dropped = i;
    }
    ck_assert(kept < n && dropped < n);
    float *x = test_floats(n), *y = test_floats(n);
    test_random(x, n, -1, 1);
    x[kept] = x[dropped] = NAN;
    oclml_tensor *tx = test_tensor_from(1, shape, x), *ty = test_tensor(1, shape);
    ASSERT_OK(oclml_dropout(T, &d, tx, ty));
    test_read(ty, y, n);
    ck_assert(isnan(y[kept]) && isnan(y[dropped]));
    for (size_t i = 0; i < n; i++)
        if (i != kept && i != dropped) ck_assert(!isnan(y[i]));
    oclml_tensor_destroy(tx);
    oclml_tensor_destroy(ty);
    free(x);
    free(y);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    const size_t shape[1] = {10}, other[1] = {11}, part[1] = {6};
    oclml_tensor *x = test_tensor(1, shape), *y = test_tensor(1, shape), *z = test_tensor(1, other);
    oclml_dropout_params d = params(0.5f, 1, 0);
    ASSERT_STATUS(oclml_dropout(T, NULL, x, y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_dropout(NULL, &d, x, y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_dropout(T, &d, NULL, y), OCLML_ERR_NULL_POINTER);
    const float bad_p[] = {-0.1f, 1.5f, NAN};
    for (int i = 0; i < 3; i++) {
        d.p = bad_p[i];
        ASSERT_STATUS(oclml_dropout(T, &d, x, y), OCLML_ERR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(oclml_ctx_last_error(T), "p must be"), "%s", oclml_ctx_last_error(T));
        ASSERT_STATUS(oclml_dropout_backward(T, &d, x, y), OCLML_ERR_INVALID_ARGUMENT);
        ASSERT_STATUS(oclml_dropout_add(T, &d, x, x, y), OCLML_ERR_INVALID_ARGUMENT);
    }
    d.p = 0.5f;
    d.struct_size = 3;
    ASSERT_STATUS(oclml_dropout(T, &d, x, y), OCLML_ERR_INVALID_ARGUMENT);
    d.struct_size = sizeof d;
    ASSERT_STATUS(oclml_dropout(T, &d, x, z), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_dropout_add(T, &d, x, z, y), OCLML_ERR_INVALID_SHAPE);
    /* a shifted overlap of the output with an input */
    cl_mem buf;
    size_t off;
    oclml_tensor *a = NULL, *b = NULL;
    ASSERT_OK(oclml_tensor_buffer(y, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 0, 1, part, &a));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 4 * sizeof(float), 1, part, &b));
    ASSERT_STATUS(oclml_dropout(T, &d, a, b), OCLML_ERR_INVALID_ARGUMENT);
    oclml_ctx *other_ctx = test_ctx_new(NULL);
    oclml_tensor *foreign;
    ASSERT_OK(oclml_tensor_create(other_ctx, 1, shape, &foreign));
    ASSERT_STATUS(oclml_dropout(T, &d, foreign, y), OCLML_ERR_CONTEXT_MISMATCH);
    test_assert_untouched(y, 10);
    test_assert_untouched(z, 11);
    oclml_tensor_destroy(foreign);
    oclml_ctx_destroy(other_ctx);
    ASSERT_STATUS(oclml_dropout_params_init(NULL), OCLML_ERR_NULL_POINTER);
    oclml_tensor *all[] = {a, b, x, y, z};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("dropout");
    TCase *tc = tcase_create("dropout");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_test(tc, mask_and_values_match_the_rule);
    tcase_add_test(tc, fraction_kept);
    tcase_add_test(tc, backward_add_repeat_and_in_place);
    tcase_add_test(tc, nan_stays_nan);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
