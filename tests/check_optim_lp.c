/* Mixed-precision optimizer steps: an arena's 16-bit parameter copy (oclml_arena_copy_create)
 * holds the fp32 parameters rounded, after creation, after every step (AdamW, SGD with
 * momentum; bf16 and fp16) and after oclml_arena_copy_sync; the fp32 update is the same bits as
 * without a copy; a skipped step leaves both; the refusals. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N_TENSORS 3
static const oclml_arena_shape SHAPES[N_TENSORS] = {{2, {7, 13}}, {1, {5}}, {3, {2, 3, 9}}};

static oclml_arena *arena_with(const float *p, size_t n) {
    oclml_arena *a;
    ASSERT_OK(oclml_arena_create(T, N_TENSORS, SHAPES, &a));
    oclml_tensor *flat;
    ASSERT_OK(oclml_arena_flat(a, 0, &flat));
    if (p) ASSERT_OK(oclml_tensor_write(flat, p, n));
    return a;
}

/* Each tensor's copy equals its fp32 parameters rounded to dt (the host's rounding). */
static void check_copy(oclml_arena *a, oclml_dtype dt, const char *when) {
    for (size_t i = 0; i < N_TENSORS; i++) {
        oclml_tensor *p, *c;
        size_t n;
        ASSERT_OK(oclml_arena_param(a, i, &p));
        ASSERT_OK(oclml_arena_copy(a, i, &c));
        ASSERT_OK(oclml_tensor_numel(p, &n));
        float *pv = test_floats(n);
        uint16_t *got = malloc(n * 2), *want = malloc(n * 2);
        test_read(p, pv, n);
        ASSERT_OK(oclml_tensor_read_raw(c, got, n));
        oclml_tensor *r;
        ASSERT_OK(oclml_tensor_create_dtype(T, dt, 1, &n, &r));
        ASSERT_OK(oclml_tensor_write(r, pv, n));
        ASSERT_OK(oclml_tensor_read_raw(r, want, n));
        for (size_t j = 0; j < n; j++)
            ck_assert_msg(got[j] == want[j], "%s: tensor %zu [%zu]: copy %04x, rounded %04x (%a)",
                          when, i, j, got[j], want[j], pv[j]);
        oclml_tensor_destroy(r);
        free(pv), free(got), free(want);
    }
}

/* i: (AdamW, bf16), (SGD momentum, fp16), (AdamW, fp16), (SGD, bf16). */
START_TEST(steps_keep_the_copy) {
    const oclml_dtype dt = _i == 1 || _i == 2 ? OCLML_FLOAT16 : OCLML_BFLOAT16;
    const oclml_optim_kind kind = _i % 2 ? OCLML_OPTIM_SGD : OCLML_OPTIM_ADAMW;
    oclml_arena *probe = arena_with(NULL, 0);
    size_t padded;
    ASSERT_OK(oclml_arena_info(probe, NULL, NULL, &padded));
    oclml_arena_destroy(probe);
    float *p = test_floats(padded), *g = test_floats(padded);
    test_random(p, padded, -2, 2);
    oclml_arena *a = arena_with(p, padded), *plain = arena_with(p, padded);
    ASSERT_OK(oclml_arena_copy_create(a, dt));
    check_copy(a, dt, "created");
    oclml_optim_config c;
    ASSERT_OK(oclml_optim_config_init(&c, kind));
    c.lr = 0.05f;
    if (kind == OCLML_OPTIM_SGD) c.momentum = 0.9f;
    oclml_optim *o, *op;
    ASSERT_OK(oclml_optim_create(T, a, &c, &o));
    ASSERT_OK(oclml_optim_create(T, plain, &c, &op));
    oclml_tensor *ga, *gp, *pa, *pp;
    ASSERT_OK(oclml_arena_flat(a, 1, &ga));
    ASSERT_OK(oclml_arena_flat(plain, 1, &gp));
    ASSERT_OK(oclml_arena_flat(a, 0, &pa));
    ASSERT_OK(oclml_arena_flat(plain, 0, &pp));
    float *va = test_floats(padded), *vp = test_floats(padded);
    for (int step = 0; step < 3; step++) {
        test_random(g, padded, -1, 1);
        ASSERT_OK(oclml_tensor_write(ga, g, padded));
        ASSERT_OK(oclml_tensor_write(gp, g, padded));
        ASSERT_OK(oclml_optim_step(o));
        ASSERT_OK(oclml_optim_step(op));
        check_copy(a, dt, "after a step");
        test_read(pa, va, padded);
        test_read(pp, vp, padded);
        ck_assert_msg(!memcmp(va, vp, padded * sizeof *va),
                      "the fp32 update differs with a copy (step %d)", step);
    }
    /* Parameters written by hand: the copy follows on sync. */
    test_random(p, padded, -3, 3);
    ASSERT_OK(oclml_tensor_write(pa, p, padded));
    ASSERT_OK(oclml_arena_copy_sync(a));
    check_copy(a, dt, "synced");
    ASSERT_OK(oclml_optim_destroy(o));
    ASSERT_OK(oclml_optim_destroy(op));
    ASSERT_OK(oclml_arena_destroy(a));
    ASSERT_OK(oclml_arena_destroy(plain));
    free(p), free(g), free(va), free(vp);
}
END_TEST

/* A step skipped on a non-finite gradient writes neither the parameters nor the copy. */
START_TEST(skipped_step_keeps_both) {
    oclml_arena *probe = arena_with(NULL, 0);
    size_t padded;
    ASSERT_OK(oclml_arena_info(probe, NULL, NULL, &padded));
    oclml_arena_destroy(probe);
    float *p = test_floats(padded), *g = test_floats(padded);
    test_random(p, padded, -2, 2);
    test_random(g, padded, -1, 1);
    g[3] = INFINITY;
    oclml_arena *a = arena_with(p, padded);
    ASSERT_OK(oclml_arena_copy_create(a, OCLML_BFLOAT16));
    oclml_tensor *c0, *gf;
    ASSERT_OK(oclml_arena_copy(a, 0, &c0));
    const size_t n0 = 7 * 13;
    uint16_t *before = malloc(n0 * 2), *after = malloc(n0 * 2);
    ASSERT_OK(oclml_tensor_read_raw(c0, before, n0));
    ASSERT_OK(oclml_arena_flat(a, 1, &gf));
    ASSERT_OK(oclml_tensor_write(gf, g, padded));
    oclml_optim_config c;
    ASSERT_OK(oclml_optim_config_init(&c, OCLML_OPTIM_ADAMW));
    c.skip_nonfinite = 1;
    oclml_optim *o;
    ASSERT_OK(oclml_optim_create(T, a, &c, &o));
    ASSERT_OK(oclml_optim_step(o));
    oclml_optim_scalars_info info;
    ASSERT_OK(oclml_optim_scalars(o, &info));
    ck_assert_int_eq(info.found_inf, 1);
    ASSERT_OK(oclml_tensor_read_raw(c0, after, n0));
    ck_assert_msg(!memcmp(before, after, n0 * 2), "a skipped step wrote the copy");
    check_copy(a, OCLML_BFLOAT16, "skipped");
    ASSERT_OK(oclml_optim_destroy(o));
    ASSERT_OK(oclml_arena_destroy(a));
    free(p), free(g), free(before), free(after);
}
END_TEST

START_TEST(refusals) {
    oclml_arena *a = arena_with(NULL, 0);
    oclml_tensor *t = NULL;
    ASSERT_STATUS(oclml_arena_copy(a, 0, &t), OCLML_ERR_INVALID_ARGUMENT); /* no copy yet */
    ASSERT_STATUS(oclml_arena_copy_sync(a), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_arena_copy_create(a, OCLML_FLOAT32), OCLML_ERR_DTYPE);
    ASSERT_OK(oclml_arena_copy_create(a, OCLML_FLOAT16));
    ASSERT_STATUS(oclml_arena_copy_create(a, OCLML_BFLOAT16), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_arena_copy(a, N_TENSORS, &t), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_OK(oclml_arena_copy(a, 2, &t));
    oclml_dtype dt;
    ASSERT_OK(oclml_tensor_dtype(t, &dt));
    ck_assert_int_eq(dt, OCLML_FLOAT16);
    ASSERT_OK(oclml_arena_destroy(a));
}
END_TEST

int main(void) {
    Suite *s = suite_create("optim_lp");
    TCase *tc = tcase_create("optim_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, steps_keep_the_copy, 0, 4);
    tcase_add_test(tc, skipped_step_keeps_both);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    return test_main(s);
}
