/* Dropout, its backward and the residual add with dropout: the mask element for element against
 * the host's copy of the rule (tests/ref/dropout.c), values against a double reference, the
 * fraction kept, regeneration in the backward, offsets (Philox counters and unaligned tensor
 * offsets), aliasing, NaN, and bad input. Loop 1 of the first, the add and the NaN tests runs
 * the GPU's layout (groups of four strided over the grid) where a CPU takes contiguous chunks by
 * default (cpu.layout=0). */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static oclml_tensor *random_tensor(size_t n, float *host) {
    test_random(host, n, -2, 2);
    const size_t shape[1] = {n};
    return test_tensor_from(1, shape, host);
}

/* out[i] = base[i] + in[i] keep_i / (1 - p) (base NULL: none): a dropped element exactly
 * base + in * 0 (NaN stays NaN), a kept one within TOL_ELEMENTWISE of the double value. */
static void assert_dropout(const char *what, const oclml_dropout_params *d, const float *in,
                           const float *base, const float *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const bool keep = ref_dropout_keep(d->seed, d->offset, i, d->p);
        const double b = base ? base[i] : 0.0;
        if (!keep) {
            const float want = base ? base[i] + in[i] * 0.0f : in[i] * 0.0f;
            ck_assert_msg(out[i] == want || (isnan(out[i]) && isnan(want)),
                          "%s: n %zu p %g offset %llu: dropped element %zu is %g, want %g", what, n,
                          (double)d->p, (unsigned long long)d->offset, i, (double)out[i],
                          (double)want);
            continue;
        }
        const double want = b + (double)in[i] / (1.0 - (double)d->p);
        ck_assert_msg(fabs(out[i] - want) <= TOL_ELEMENTWISE * fabs(want) + 1e-30,
                      "%s: n %zu p %g offset %llu: kept element %zu is %.9g, want %.9g", what, n,
                      (double)d->p, (unsigned long long)d->offset, i, (double)out[i], want);
    }
}

/* y = x * keep / (1 - p), keep by the host's rule, at sizes with tails, every p of the list and
 * counter offsets across 32 bits and the 64-bit wrap (the sweep's 1000003: each p at one). */
START_TEST(mask_and_values_match_the_rule) {
    if (_i) test_retune("cpu.layout=0");
    const size_t sizes[] = {1, 3, 5, 4099, 1000003};
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f, 1.0f};
    const uint64_t offsets[] = {0, 1, 0xFFFFFFFFull, (1ull << 40) + 3, UINT64_MAX - 1};
    for (int si = 0; si < test_tier(4, 5); si++) {
        const size_t n = sizes[si], shape[1] = {n};
        float *x = test_floats(n), *y = test_floats(n);
        oclml_tensor *tx = random_tensor(n, x), *ty = test_tensor(1, shape);
        for (int pi = 0; pi < 5; pi++)
            for (int oi = 0; oi < 5; oi++) {
                if (n > 100000 && oi != pi) continue; /* the big size: one offset per p */
                const oclml_dropout_params d =
                    test_dropout_params(ps[pi], 0x1234567890abcdefull + (uint64_t)si, offsets[oi]);
                ASSERT_OK(oclml_dropout(T, &d, tx, ty));
                test_read(ty, y, n);
                assert_dropout("dropout", &d, x, NULL, y, n);
                if (d.p == 0.0f) ck_assert(!memcmp(x, y, n * sizeof *x)); /* the identity */
            }
        oclml_tensor_destroy(tx);
        oclml_tensor_destroy(ty);
        free(x);
        free(y);
    }
}
END_TEST

/* Tensors that start at any element (not a multiple of four): the draws follow the flat index,
 * not the address, and nothing around the output is written. */
START_TEST(unaligned_tensor_offsets) {
    const size_t n = 4099, room = n + 8, whole[1] = {room}, shape[1] = {n};
    float *x = test_floats(n), *y = test_floats(n), *out = test_floats(room);
    oclml_tensor *bx = random_tensor(room, out);
    cl_mem mx, my, mr;
    size_t unused;
    ASSERT_OK(oclml_tensor_buffer(bx, &mx, &unused));
    for (size_t s = 1; s < 4; s++) {
        oclml_tensor *by = test_tensor(1, whole), *br = test_tensor(1, whole); /* NaN */
        ASSERT_OK(oclml_tensor_buffer(by, &my, &unused));
        ASSERT_OK(oclml_tensor_buffer(br, &mr, &unused));
        /* x from element s of bx, y at element 4 - s of by, r at element s + 2 of br */
        memcpy(x, out + s, n * sizeof *x);
        oclml_tensor *tx, *ty, *tr;
        ASSERT_OK(oclml_tensor_wrap(T, mx, s * sizeof(float), 1, shape, &tx));
        ASSERT_OK(oclml_tensor_wrap(T, my, (4 - s) * sizeof(float), 1, shape, &ty));
        ASSERT_OK(oclml_tensor_wrap(T, mr, (s + 2) * sizeof(float), 1, shape, &tr));
        const oclml_dropout_params d = test_dropout_params(0.3f, 11 + s, 3 * s);
        ASSERT_OK(oclml_dropout(T, &d, tx, ty));
        test_read(ty, y, n);
        assert_dropout("unaligned dropout", &d, x, NULL, y, n);
        float *r = test_floats(n);
        ASSERT_OK(oclml_dropout_add(T, &d, ty, tx, tr));
        test_read(tr, r, n);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(r[i] == y[i] + (ref_dropout_keep(d.seed, d.offset, i, d.p) ? y[i] : 0),
                          "unaligned dropout_add: element %zu", i);
        /* the elements around the outputs were not written */
        test_read(by, out, room);
        for (size_t i = 0; i < room; i++)
            if (i < 4 - s || i >= 4 - s + n) ck_assert_msg(isnan(out[i]), "y: %zu written", i);
        test_read(br, out, room);
        for (size_t i = 0; i < room; i++)
            if (i < s + 2 || i >= s + 2 + n) ck_assert_msg(isnan(out[i]), "r: %zu written", i);
        test_read(bx, out, room); /* out holds bx again: x of the next s */
        oclml_tensor_destroy(tx);
        oclml_tensor_destroy(ty);
        oclml_tensor_destroy(tr);
        oclml_tensor_destroy(by);
        oclml_tensor_destroy(br);
        free(r);
    }
    oclml_tensor_destroy(bx);
    free(x);
    free(y);
    free(out);
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
        const oclml_dropout_params d = test_dropout_params(ps[k], 99 + (uint64_t)k, 0);
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
 * other ones; in place works (y = dropout(y), dx over dy, r over x and over y). */
START_TEST(backward_add_repeat_and_in_place) {
    if (_i) test_retune("cpu.layout=0");
    const size_t n = 4101, shape[2] = {3, 1367};
    float *x = test_floats(n), *y = test_floats(n), *g = test_floats(n);
    float *a = test_floats(n), *b = test_floats(n), *c = test_floats(n);
    test_random(x, n, -1, 1);
    test_random(y, n, -1, 1);
    test_random(g, n, -1, 1);
    oclml_tensor *tx = test_tensor_from(2, shape, x), *ty = test_tensor_from(2, shape, y),
                 *tg = test_tensor_from(2, shape, g), *out = test_tensor(2, shape),
                 *out2 = test_tensor(2, shape);
    oclml_dropout_params d = test_dropout_params(0.3f, 5, 77);
    const float scale = 1.0f / (1.0f - d.p);
    ASSERT_OK(oclml_dropout(T, &d, ty, out));
    test_read(out, a, n);
    assert_dropout("dropout", &d, y, NULL, a, n);
    ASSERT_OK(oclml_dropout_backward(T, &d, tg, out2));
    test_read(out2, b, n);
    for (size_t i = 0; i < n; i++) {
        const bool keep = ref_dropout_keep(d.seed, d.offset, i, d.p);
        ck_assert_msg(b[i] == g[i] * (keep ? scale : 0.0f), "backward: element %zu", i);
    }
    /* in place: dx over dy */
    ASSERT_OK(oclml_dropout_backward(T, &d, tg, tg));
    test_read(tg, c, n);
    ck_assert(!memcmp(b, c, n * sizeof *b));
    /* r = x + dropout(y), bit for bit, and in place over x and over y */
    ASSERT_OK(oclml_dropout_add(T, &d, tx, ty, out2));
    test_read(out2, b, n);
    for (size_t i = 0; i < n; i++) ck_assert_msg(b[i] == x[i] + a[i], "dropout_add: %zu", i);
    oclml_tensor *ty2 = test_tensor_from(2, shape, y);
    ASSERT_OK(oclml_dropout_add(T, &d, tx, ty2, ty2));
    test_read(ty2, c, n);
    ck_assert(!memcmp(b, c, n * sizeof *b));
    ASSERT_OK(oclml_dropout_add(T, &d, tx, ty, tx));
    test_read(tx, c, n);
    ck_assert(!memcmp(b, c, n * sizeof *b));
    /* the same params: the same bits; the offset advanced by the counters: another mask */
    ASSERT_OK(oclml_dropout(T, &d, ty, out));
    test_read(out, c, n);
    ck_assert(!memcmp(a, c, n * sizeof *a));
    d.offset += oclml_dropout_counters(n);
    ASSERT_OK(oclml_dropout(T, &d, ty, out));
    test_read(out, c, n);
    assert_dropout("advanced offset", &d, y, NULL, c, n);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += (a[i] != 0) == (c[i] != 0);
    ck_assert_msg(same < n * 9 / 10, "the advanced offset drew the same mask (%zu of %zu)", same,
                  n);
    /* in place: y = dropout(y) */
    ASSERT_OK(oclml_dropout(T, &d, ty, ty));
    test_read(ty, b, n);
    ck_assert(!memcmp(b, c, n * sizeof *b));
    ck_assert_uint_eq(oclml_dropout_counters(0), 0);
    ck_assert_uint_eq(oclml_dropout_counters(4), 1);
    ck_assert_uint_eq(oclml_dropout_counters(5), 2);
    ck_assert_uint_eq(oclml_dropout_counters(SIZE_MAX), (uint64_t)(SIZE_MAX / 4 + 1));
    oclml_tensor *all[] = {tx, ty, ty2, tg, out, out2};
    for (int i = 0; i < 6; i++) oclml_tensor_destroy(all[i]);
    float *fs[] = {x, y, g, a, b, c};
    for (int i = 0; i < 6; i++) free(fs[i]);
}
END_TEST

/* NaN at a kept and at a dropped position stays NaN (NaN * 0, as PyTorch), in the forward, the
 * backward and the residual add's branch. */
START_TEST(nan_stays_nan) {
    if (_i) test_retune("cpu.layout=0");
    const size_t n = 64, shape[1] = {n};
    const oclml_dropout_params d = test_dropout_params(0.5f, 3, 0);
    size_t kept = n, dropped = n;
    for (size_t i = 0; i < n && (kept == n || dropped == n); i++) {
        if (ref_dropout_keep(d.seed, d.offset, i, d.p))
            kept = i;
        else
            dropped = i;
    }
    ck_assert(kept < n && dropped < n);
    float *x = test_floats(n), *y = test_floats(n), *base = test_floats(n);
    test_random(x, n, -1, 1);
    test_random(base, n, -1, 1);
    x[kept] = x[dropped] = NAN;
    oclml_tensor *tx = test_tensor_from(1, shape, x), *tb = test_tensor_from(1, shape, base),
                 *ty = test_tensor(1, shape);
    for (int op = 0; op < 3; op++) {
        ASSERT_OK(op == 0   ? oclml_dropout(T, &d, tx, ty)
                  : op == 1 ? oclml_dropout_backward(T, &d, tx, ty)
                            : oclml_dropout_add(T, &d, tb, tx, ty));
        test_read(ty, y, n);
        ck_assert_msg(isnan(y[kept]) && isnan(y[dropped]), "op %d: NaN lost", op);
        for (size_t i = 0; i < n; i++)
            if (i != kept && i != dropped) ck_assert_msg(!isnan(y[i]), "op %d: NaN at %zu", op, i);
    }
    oclml_tensor_destroy(tx);
    oclml_tensor_destroy(tb);
    oclml_tensor_destroy(ty);
    free(x);
    free(y);
    free(base);
}
END_TEST

static void assert_error(oclml_status got, oclml_status want, const char *text) {
    ASSERT_STATUS(got, want);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), text), "error text \"%s\" lacks \"%s\"",
                  oclml_ctx_last_error(T), text);
}

/* NULL params are the defaults (p = 0): each op is then the identity (dropout_add a plain add),
 * bit for bit, as with the initialised struct; linear_dropout is linear. */
START_TEST(null_params_mean_defaults) {
    const size_t shape[1] = {37};
    float *xv, *bv;
    oclml_tensor *x = test_tensor_held(OCLML_FLOAT32, 1, shape, -3, 3, &xv),
                 *base = test_tensor_held(OCLML_FLOAT32, 1, shape, -3, 3, &bv),
                 *y = test_tensor(1, shape), *r = test_tensor(1, shape);
    float got[37];
    ASSERT_OK(oclml_dropout(T, NULL, x, y));
    test_read(y, got, 37);
    ck_assert(memcmp(got, xv, sizeof got) == 0);
    ASSERT_OK(oclml_dropout_backward(T, NULL, x, y));
    test_read(y, got, 37);
    ck_assert(memcmp(got, xv, sizeof got) == 0);
    ASSERT_OK(oclml_dropout_add(T, NULL, base, x, r));
    test_read(r, got, 37);
    for (int i = 0; i < 37; i++) ck_assert_float_eq(got[i], bv[i] + xv[i]);
    const size_t xs[2] = {5, 8}, ws[2] = {6, 8}, ys[2] = {5, 6};
    float *xm, *wm;
    oclml_tensor *X = test_tensor_held(OCLML_FLOAT32, 2, xs, -1, 1, &xm),
                 *W = test_tensor_held(OCLML_FLOAT32, 2, ws, -1, 1, &wm), *Y1 = test_tensor(2, ys),
                 *Y2 = test_tensor(2, ys), *P = test_tensor(2, ys);
    ASSERT_OK(oclml_linear_dropout(T, OCLML_ACT_RELU, NULL, X, W, NULL, Y1, P));
    ASSERT_OK(oclml_linear(T, OCLML_ACT_RELU, X, W, NULL, Y2, NULL));
    float a[30], e[30];
    test_read(Y1, a, 30);
    test_read(Y2, e, 30);
    ck_assert(memcmp(a, e, sizeof a) == 0);
    free(xv), free(bv), free(xm), free(wm);
    oclml_tensor *all[] = {x, base, y, r, X, W, Y1, Y2, P};
    for (int i = 0; i < 9; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    const size_t shape[1] = {10}, other[1] = {11}, part[1] = {6};
    oclml_tensor *x = test_tensor(1, shape), *y = test_tensor(1, shape), *z = test_tensor(1, other);
    oclml_dropout_params d = test_dropout_params(0.5f, 1, 0);
    ASSERT_STATUS(oclml_dropout(T, NULL, x, z), OCLML_ERR_INVALID_SHAPE); /* NULL: p = 0 */
    ASSERT_STATUS(oclml_dropout(NULL, &d, x, y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_dropout(T, &d, NULL, y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_dropout_add(T, &d, x, x, NULL), OCLML_ERR_NULL_POINTER);
    const float bad_p[] = {-0.1f, 1.5f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        d.p = bad_p[i];
        assert_error(oclml_dropout(T, &d, x, y), OCLML_ERR_INVALID_ARGUMENT, "p must be in [0, 1]");
        assert_error(oclml_dropout_backward(T, &d, x, y), OCLML_ERR_INVALID_ARGUMENT, "p must be");
        assert_error(oclml_dropout_add(T, &d, x, x, y), OCLML_ERR_INVALID_ARGUMENT, "p must be");
    }
    d.p = 0.5f;
    d.struct_size = 3;
    assert_error(oclml_dropout(T, &d, x, y), OCLML_ERR_INVALID_ARGUMENT, "struct_size");
    d.struct_size = sizeof d;
    ASSERT_STATUS(oclml_dropout(T, &d, x, z), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_dropout_backward(T, &d, z, y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_dropout_add(T, &d, x, z, y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_dropout_add(T, &d, x, x, z), OCLML_ERR_INVALID_SHAPE);
    /* a shifted overlap of the output with an input */
    cl_mem buf;
    size_t off;
    oclml_tensor *a = NULL, *b = NULL;
    ASSERT_OK(oclml_tensor_buffer(y, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 0, 1, part, &a));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 4 * sizeof(float), 1, part, &b));
    assert_error(oclml_dropout(T, &d, a, b), OCLML_ERR_INVALID_ARGUMENT, "overlaps");
    assert_error(oclml_dropout_add(T, &d, a, a, b), OCLML_ERR_INVALID_ARGUMENT, "overlaps");
    oclml_ctx *other_ctx = test_ctx_new(NULL);
    oclml_tensor *foreign;
    ASSERT_OK(oclml_tensor_create(other_ctx, 1, shape, &foreign));
    ASSERT_STATUS(oclml_dropout(T, &d, foreign, y), OCLML_ERR_CONTEXT_MISMATCH);
    ASSERT_STATUS(oclml_dropout_backward(T, &d, foreign, y), OCLML_ERR_CONTEXT_MISMATCH);
    ASSERT_STATUS(oclml_dropout_add(T, &d, x, foreign, y), OCLML_ERR_CONTEXT_MISMATCH);
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
    tcase_add_loop_test(tc, mask_and_values_match_the_rule, 0, 2);
    tcase_add_test(tc, unaligned_tensor_offsets);
    tcase_add_test(tc, fraction_kept);
    tcase_add_loop_test(tc, backward_add_repeat_and_in_place, 0, 2);
    tcase_add_loop_test(tc, nan_stays_nan, 0, 2);
    tcase_add_test(tc, bad_input_touches_nothing);
    tcase_add_test(tc, null_params_mean_defaults);
    suite_add_tcase(s, tc);
    return test_main(s);
}
