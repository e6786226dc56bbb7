/* Tensor dtypes: the host's conversions against known bit patterns, the device's casts against
 * the host's, every 16-bit pattern through each conversion against its fields' value (ldexp),
 * fill, copy and cast on 16-bit tensors, wrapped views, and the refusals: bad dtypes, misaligned
 * offsets, dtype mismatches, fp32-only ops. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t u_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static oclml_tensor *lp_tensor(oclml_dtype dt, size_t n) {
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, 1, &n, &t));
    return t;
}

/* Writes floats through the host's conversion, reads the raw words back. */
static void host_bits(oclml_dtype dt, const float *v, uint16_t *bits, size_t n) {
    oclml_tensor *t = lp_tensor(dt, n);
    ASSERT_OK(oclml_tensor_write(t, v, n));
    ASSERT_OK(oclml_tensor_read_raw(t, bits, n));
    oclml_tensor_destroy(t);
}

START_TEST(sizes_and_names) {
    ck_assert_uint_eq(oclml_dtype_size(OCLML_FLOAT32), 4);
    ck_assert_uint_eq(oclml_dtype_size(OCLML_BFLOAT16), 2);
    ck_assert_uint_eq(oclml_dtype_size(OCLML_FLOAT16), 2);
    ck_assert_uint_eq(oclml_dtype_size((oclml_dtype)7), 0);
    ck_assert_str_eq(oclml_dtype_name(OCLML_BFLOAT16), "bf16");
    ck_assert_str_eq(oclml_dtype_name(OCLML_FLOAT16), "fp16");
    ck_assert_str_eq(oclml_dtype_name((oclml_dtype)-1), "?");
    oclml_tensor *t = lp_tensor(OCLML_FLOAT16, 3);
    oclml_dtype dt;
    ASSERT_OK(oclml_tensor_dtype(t, &dt));
    ck_assert_int_eq(dt, OCLML_FLOAT16);
    oclml_tensor_destroy(t);
}
END_TEST

/* Round to nearest even at the last kept bit, overflow, subnormals, signed zeros, NaN. */
START_TEST(host_rounding_known_bits) {
    static const struct {
        uint32_t in;
        uint16_t bf16, fp16;
    } cases[] = {
        {0x3f800000u, 0x3f80, 0x3c00}, /* 1 */
        {0x3eaaaaabu, 0x3eab, 0x3555}, /* 1/3 */
        {0x3f808000u, 0x3f80, 0x3c04}, /* 1 + 2^-8: bf16 tie, even stays */
        {0x3f818000u, 0x3f82, 0x3c0c}, /* 1 + 3 2^-8: bf16 tie, odd rounds up */
        {0x3f801000u, 0x3f80, 0x3c00}, /* 1 + 2^-11: fp16 tie, even stays */
        {0x3f803000u, 0x3f80, 0x3c02}, /* 1 + 3 2^-11: fp16 tie, odd rounds up */
        {0x477fe000u, 0x4780, 0x7bff}, /* 65504, fp16's largest */
        {0x477ff000u, 0x4780, 0x7c00}, /* 65520: the tie past 65504 overflows */
        {0x477fefffu, 0x4780, 0x7bff}, /* just below it */
        {0x33800000u, 0x3380, 0x0001}, /* 2^-24, fp16's smallest subnormal */
        {0x33000000u, 0x3300, 0x0000}, /* 2^-25: a tie, to zero (even) */
        {0x33c00000u, 0x33c0, 0x0002}, /* 3 2^-25: a tie, to 2 2^-24 */
        {0x387ff000u, 0x3880, 0x0400}, /* 2^-14 - 2^-26 rounds up to the smallest normal */
        {0x387fc000u, 0x3880, 0x03ff}, /* 2^-14 - 2^-24, the largest subnormal */
        {0x80000000u, 0x8000, 0x8000}, /* -0 */
        {0x7f800000u, 0x7f80, 0x7c00}, /* inf */
        {0xff7fffffu, 0xff80, 0xfc00}, /* -FLT_MAX: bf16 rounds to -inf */
        {0x00000001u, 0x0000, 0x0000}, /* a float subnormal */
    };
    const size_t n = sizeof cases / sizeof cases[0];
    float v[32];
    uint16_t b[32], h[32];
    for (size_t i = 0; i < n; i++) v[i] = f_of(cases[i].in);
    host_bits(OCLML_BFLOAT16, v, b, n);
    host_bits(OCLML_FLOAT16, v, h, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(b[i] == cases[i].bf16, "bf16 of %08x: %04x, want %04x", cases[i].in, b[i],
                      cases[i].bf16);
        ck_assert_msg(h[i] == cases[i].fp16, "fp16 of %08x: %04x, want %04x", cases[i].in, h[i],
                      cases[i].fp16);
    }
    const float nan[2] = {NAN, -NAN};
    host_bits(OCLML_BFLOAT16, nan, b, 2);
    host_bits(OCLML_FLOAT16, nan, h, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg((b[i] & 0x7f80) == 0x7f80 && (b[i] & 0x7f), "bf16 of NaN: %04x", b[i]);
        ck_assert_msg((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff), "fp16 of NaN: %04x", h[i]);
        ck_assert_msg((b[i] >> 15) == (unsigned)i && (h[i] >> 15) == (unsigned)i, "NaN's sign");
    }
}
END_TEST

/* Every 16-bit pattern read back as a float: bf16 is the float's top half; fp16 against
 * ldexp of its fields. Then the device's cast of the same words to fp32. */
START_TEST(every_pattern_to_float) {
    const size_t n = 65536;
    uint16_t *bits = malloc(n * sizeof *bits);
    float *host = test_floats(n), *dev = test_floats(n);
    for (size_t i = 0; i < n; i++) bits[i] = (uint16_t)i;
    oclml_tensor *f32 = test_tensor(1, &n);
    for (int d = 0; d < 2; d++) {
        const oclml_dtype dt = d ? OCLML_FLOAT16 : OCLML_BFLOAT16;
        oclml_tensor *t = lp_tensor(dt, n);
        ASSERT_OK(oclml_tensor_write_raw(t, bits, n));
        ASSERT_OK(oclml_tensor_read(t, host, n));
        ASSERT_OK(oclml_cast(T, t, f32));
        test_read(f32, dev, n);
        for (size_t i = 0; i < n; i++) {
            double want;
            if (!d) {
                want = f_of((uint32_t)i << 16);
            } else {
                const int e = (int)(i >> 10 & 31), m = (int)(i & 1023);
                want = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
                if (i & 0x8000) want = -want;
            }
            const bool nan = isnan(want);
            ck_assert_msg(nan ? isnan(host[i])
                              : (double)host[i] == want && !signbit(host[i]) == !signbit(want),
                          "%s %04zx read as %a, want %a", oclml_dtype_name(dt), i, host[i], want);
            ck_assert_msg(nan ? isnan(dev[i]) : u_of(dev[i]) == u_of(host[i]),
                          "%s %04zx cast on the device to %a, the host reads %a",
                          oclml_dtype_name(dt), i, dev[i], host[i]);
        }
        oclml_tensor_destroy(t);
    }
    oclml_tensor_destroy(f32);
    free(bits);
    free(host);
    free(dev);
}
END_TEST

/* Random floats over the whole exponent range (subnormals, overflow, ties by construction):
 * the device's fp32 -> bf16 and fp32 -> fp16 casts give the host's bits. */
START_TEST(cast_from_float_matches_host) {
    const size_t n = 200003;
    float *v = malloc(n * sizeof *v);
    unsigned s = test_seed();
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t u = s ^ (s >> 7) * 2654435761u;
        if (i % 5 == 0) u &= 0xffff8000u; /* bf16 ties and near-ties */
        if (i % 7 == 0) u = (u & 0x80001fffu) | ((0x66u + (u >> 13) % 40) << 23); /* fp16 range */
        v[i] = f_of(u);
    }
    v[0] = NAN, v[1] = -INFINITY, v[2] = 0x1p-149f, v[3] = -0.0f;
    oclml_tensor *src = test_tensor_from(1, &n, v);
    uint16_t *want = malloc(n * 2), *got = malloc(n * 2);
    for (int d = 0; d < 2; d++) {
        const oclml_dtype dt = d ? OCLML_FLOAT16 : OCLML_BFLOAT16;
        host_bits(dt, v, want, n);
        oclml_tensor *dst = lp_tensor(dt, n);
        ASSERT_OK(oclml_cast(T, src, dst));
        ASSERT_OK(oclml_tensor_read_raw(dst, got, n));
        const uint16_t exp_mask = d ? 0x7c00 : 0x7f80, frac = d ? 0x3ff : 0x7f;
        for (size_t i = 0; i < n; i++) {
            const bool nan = (want[i] & exp_mask) == exp_mask && (want[i] & frac);
            ck_assert_msg(nan ? (got[i] & exp_mask) == exp_mask && (got[i] & frac)
                              : got[i] == want[i],
                          "%s of %08x: device %04x, host %04x", oclml_dtype_name(dt), u_of(v[i]),
                          got[i], want[i]);
        }
        oclml_tensor_destroy(dst);
    }
    oclml_tensor_destroy(src);
    free(v);
    free(want);
    free(got);
}
END_TEST

/* bf16 <-> fp16 and same-dtype casts at odd sizes and offsets: each element as the host's
 * conversion through a float (exact in between) gives it. */
START_TEST(cast_between_low_precisions) {
    const size_t n = 1029, at = 3;
    float *v = test_floats(n), *mid = test_floats(n), *got = test_floats(n - at);
    test_random(v, n, -70000.0f, 70000.0f);
    for (size_t i = 0; i < n; i += 3) v[i] *= 1e-6f;
    cl_mem buf;
    size_t off;
    for (int d = 0; d < 4; d++) {
        const oclml_dtype from = d % 2 ? OCLML_FLOAT16 : OCLML_BFLOAT16,
                          to = d < 2 ? (d % 2 ? OCLML_BFLOAT16 : OCLML_FLOAT16) : from;
        oclml_tensor *src = lp_tensor(from, n), *dst = lp_tensor(to, n), *s2, *d2;
        ASSERT_OK(oclml_tensor_write(src, v, n));
        ASSERT_OK(oclml_tensor_read(src, mid, n)); /* v rounded to the source dtype */
        const size_t m = n - at;
        ASSERT_OK(oclml_tensor_buffer(src, &buf, &off));
        ASSERT_OK(oclml_tensor_wrap_dtype(T, from, buf, at * 2, 1, &m, &s2));
        ASSERT_OK(oclml_tensor_buffer(dst, &buf, &off));
        ASSERT_OK(oclml_tensor_wrap_dtype(T, to, buf, 0, 1, &m, &d2));
        ASSERT_OK(oclml_fill(T, dst, NAN));
        ASSERT_OK(oclml_cast(T, s2, d2));
        ASSERT_OK(oclml_tensor_read(d2, got, m));
        oclml_tensor *ref = lp_tensor(to, m);
        ASSERT_OK(oclml_tensor_write(ref, mid + at, m));
        float *want = test_floats(m);
        ASSERT_OK(oclml_tensor_read(ref, want, m));
        for (size_t i = 0; i < m; i++)
            ck_assert_msg(u_of(got[i]) == u_of(want[i]), "%s -> %s [%zu]: %a, want %a",
                          oclml_dtype_name(from), oclml_dtype_name(to), i, got[i], want[i]);
        free(want);
        oclml_tensor_destroy(ref);
        oclml_tensor_destroy(s2);
        oclml_tensor_destroy(d2);
        oclml_tensor_destroy(src);
        oclml_tensor_destroy(dst);
    }
    free(v);
    free(mid);
    free(got);
}
END_TEST

/* fill rounds its value as a write does; copy moves words unchanged, a signalling NaN's too. */
START_TEST(fill_and_copy_16bit) {
    const size_t n = 257;
    for (int d = 0; d < 2; d++) {
        const oclml_dtype dt = d ? OCLML_FLOAT16 : OCLML_BFLOAT16;
        oclml_tensor *a = lp_tensor(dt, n), *b = lp_tensor(dt, n);
        const float value = 0.1f;
        uint16_t want, *got = malloc(n * 2);
        host_bits(dt, &value, &want, 1);
        ASSERT_OK(oclml_fill(T, a, value));
        ASSERT_OK(oclml_tensor_read_raw(a, got, n));
        for (size_t i = 0; i < n; i++) ck_assert_uint_eq(got[i], want);
        uint16_t *bits = malloc(n * 2);
        for (size_t i = 0; i < n; i++) bits[i] = (uint16_t)(i * 40503u);
        bits[5] = d ? 0x7c01 : 0x7f81; /* signalling NaNs */
        ASSERT_OK(oclml_tensor_write_raw(a, bits, n));
        ASSERT_OK(oclml_copy(T, a, b));
        ASSERT_OK(oclml_tensor_read_raw(b, got, n));
        ck_assert_msg(!memcmp(bits, got, n * 2), "%s copy changed words", oclml_dtype_name(dt));
        free(bits);
        free(got);
        oclml_tensor_destroy(a);
        oclml_tensor_destroy(b);
    }
}
END_TEST

START_TEST(refusals_touch_nothing) {
    const size_t n = 16, shape[2] = {4, 4};
    oclml_tensor *t = NULL;
    ASSERT_STATUS(oclml_tensor_create_dtype(T, (oclml_dtype)3, 1, &n, &t),
                  OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(t);
    oclml_tensor *h = lp_tensor(OCLML_FLOAT16, n), *b = lp_tensor(OCLML_BFLOAT16, n),
                 *f = test_tensor(1, &n), *w;
    cl_mem buf;
    size_t off;
    ASSERT_OK(oclml_tensor_buffer(h, &buf, &off));
    ASSERT_STATUS(oclml_tensor_wrap_dtype(T, OCLML_FLOAT16, buf, 3, 1, &n, &w),
                  OCLML_ERR_INVALID_ARGUMENT); /* odd byte offset */
    ASSERT_STATUS(oclml_tensor_wrap_dtype(T, OCLML_FLOAT16, buf, 2, 1, &n, &w),
                  OCLML_ERR_BUFFER_TOO_SMALL);
    uint16_t bits[16];
    for (size_t i = 0; i < n; i++) bits[i] = (uint16_t)(0x3c00 + i);
    ASSERT_OK(oclml_tensor_write_raw(h, bits, n));
    ASSERT_STATUS(oclml_tensor_write_raw(h, bits, n - 1), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_tensor_read_raw(h, NULL, n), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_tensor_dtype(h, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_copy(T, h, b), OCLML_ERR_DTYPE); /* copy does not convert */
    ASSERT_STATUS(oclml_fill(T, (oclml_tensor *)NULL, 1.0f), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_cast(T, h, h), OCLML_ERR_INVALID_ARGUMENT); /* overlap */
    const size_t n2 = 15;
    oclml_tensor *short_f;
    ASSERT_OK(oclml_tensor_create(T, 1, &n2, &short_f));
    ASSERT_STATUS(oclml_cast(T, h, short_f), OCLML_ERR_INVALID_SHAPE);
    /* An fp32-only op given 16-bit tensors, as input and as output. */
    const size_t one = 1;
    oclml_tensor *total = test_tensor(1, &one), *total16;
    ASSERT_STATUS(oclml_reduce_all(T, OCLML_REDUCE_SUM, h, total), OCLML_ERR_DTYPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "fp16") != NULL, "%s", oclml_ctx_last_error(T));
    test_assert_untouched(total, 1);
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_BFLOAT16, 1, &one, &total16));
    ASSERT_STATUS(oclml_reduce_all(T, OCLML_REDUCE_SUM, f, total16), OCLML_ERR_DTYPE);
    oclml_tensor_destroy(total);
    oclml_tensor_destroy(total16);
    oclml_tensor *m2;
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_BFLOAT16, 2, shape, &m2));
    const size_t four = 4;
    oclml_tensor *sums = test_tensor(1, &four);
    ASSERT_STATUS(oclml_reduce_rows(T, OCLML_REDUCE_SUM, m2, sums), OCLML_ERR_DTYPE);
    test_assert_untouched(sums, 4);
    oclml_tensor_destroy(sums);
    uint16_t after[16];
    ASSERT_OK(oclml_tensor_read_raw(h, after, n));
    ck_assert_msg(!memcmp(bits, after, sizeof bits), "a refused call wrote its input");
    oclml_tensor_destroy(m2);
    oclml_tensor_destroy(short_f);
    oclml_tensor_destroy(h);
    oclml_tensor_destroy(b);
    oclml_tensor_destroy(f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("dtype");
    TCase *tc = tcase_create("dtype");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_test(tc, sizes_and_names);
    tcase_add_test(tc, host_rounding_known_bits);
    tcase_add_test(tc, every_pattern_to_float);
    tcase_add_test(tc, cast_from_float_matches_host);
    tcase_add_test(tc, cast_between_low_precisions);
    tcase_add_test(tc, fill_and_copy_16bit);
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
