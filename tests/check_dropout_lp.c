/* Dropout, its backward and the residual add with dropout on bf16 and fp16 tensors: against the
 * fp32 op run on the same values as their dtypes hold them, the output is that op's result
 * rounded once to the output's dtype, bit for bit (so the same elements are dropped and the rest
 * lie within the dtype's unit roundoff), and the mask is the host's copy of the rule. Tails (n
 * not a multiple of 4), tensors starting at any element, in place, p 0 and 1, NaN, the dtypes
 * mixed; refusals touch nothing. */
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BF OCLML_BFLOAT16
#define FP OCLML_FLOAT16
#define F32 OCLML_FLOAT32

enum { DROPOUT, BACKWARD, ADD };
static const char *const OPS[] = {"dropout", "dropout_backward", "dropout_add"};

static oclml_status call(int op, const oclml_dropout_params *d, oclml_tensor *in,
                         oclml_tensor *base, oclml_tensor *out) {
    return op == DROPOUT    ? oclml_dropout(T, d, in, out)
           : op == BACKWARD ? oclml_dropout_backward(T, d, in, out)
                            : oclml_dropout_add(T, d, base, in, out);
}

typedef struct drop_case {
    int op;
    size_t n;
    float p;
    uint64_t offset;
    oclml_dtype in, base, out; /* in: x (dropout), dy (backward), y (dropout_add); base: x */
    size_t skip_in, skip_out;  /* elements into their buffers */
    int in_place;              /* out = in (dropout_add: out = base) */
} drop_case;

static const drop_case CASES[] = {
    {DROPOUT, 4099, 0.5f, 0, BF, F32, BF, 0, 0, 0},
    {DROPOUT, 1001, 0.1f, 0xFFFFFFFFull, FP, F32, F32, 0, 0, 0},
    {DROPOUT, 4099, 0.3f, 5, BF, F32, FP, 1, 3, 0},
    {DROPOUT, 1003, 0.5f, 7, FP, F32, FP, 0, 0, 1},
    {DROPOUT, 999, 0.0f, 0, BF, F32, FP, 0, 0, 0},
    {DROPOUT, 999, 1.0f, 0, FP, F32, BF, 0, 0, 0},
    {BACKWARD, 4097, 0.25f, 1ull << 40, FP, F32, BF, 2, 0, 0},
    {BACKWARD, 2050, 0.5f, 3, BF, F32, BF, 0, 0, 1},
    {ADD, 4099, 0.3f, 9, FP, BF, BF, 0, 1, 0},
    {ADD, 2051, 0.1f, 11, BF, F32, F32, 3, 0, 0},
    {ADD, 1001, 0.5f, 13, BF, BF, BF, 0, 0, 1},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

START_TEST(matches_fp32_op_rounded) {
    const drop_case *c = &CASES[_i];
    const size_t n = c->n, shape[1] = {n};
    const oclml_dropout_params d =
        test_dropout_params(c->p, 0x5eed0000ull + (uint64_t)_i, c->offset);
    const oclml_dtype out_dt = c->in_place ? (c->op == ADD ? c->base : c->in) : c->out;
    char what[160];
    snprintf(what, sizeof what, "%s n %zu p %g: in %s base %s -> %s%s", OPS[c->op], n, (double)c->p,
             oclml_dtype_name(c->in), c->op == ADD ? oclml_dtype_name(c->base) : "-",
             oclml_dtype_name(out_dt), c->in_place ? " in place" : "");
    /* Held inputs: random in [-2, 2), NaN at elements 5 and 6 (whichever of them is dropped). */
    float *in = test_floats(n), *base = test_floats(n), *got = test_floats(n),
          *want = test_floats(n);
    test_random(in, n, -2, 2);
    test_random(base, n, -2, 2);
    in[5] = in[6] = NAN;
    test_round_to(c->in, in, n);
    test_round_to(c->base, base, n);
    oclml_tensor *own[3],
        *IN = test_tensor_at(c->in, 1, (size_t[]){n}, c->skip_in, &own[0]),
        *BASE = c->op == ADD ? test_tensor_at(c->base, 1, (size_t[]){n}, 0, &own[1]) : NULL;
    own[1] = c->op == ADD ? own[1] : NULL;
    ASSERT_OK(oclml_tensor_write(IN, in, n));
    if (BASE) ASSERT_OK(oclml_tensor_write(BASE, base, n));
    oclml_tensor *OUT = c->in_place
                            ? (c->op == ADD ? BASE : IN)
                            : test_tensor_at(c->out, 1, (size_t[]){n}, c->skip_out, &own[2]);
    if (c->in_place) own[2] = NULL;
    /* The fp32 op on the held values. */
    oclml_tensor *IN32 = test_tensor_from(1, shape, in), *BASE32 = test_tensor_from(1, shape, base),
                 *OUT32 = test_tensor(1, shape);
    ASSERT_OK(call(c->op, &d, IN32, BASE32, OUT32));
    test_read(OUT32, want, n);
    ASSERT_OK(call(c->op, &d, IN, BASE, OUT));
    test_read(OUT, got, n);
    float *rounded = malloc(n * sizeof *rounded);
    memcpy(rounded, want, n * sizeof *want);
    test_round_to(out_dt, rounded, n);
    const double u = test_unit_roundoff(out_dt);
    size_t dropped = 0;
    for (size_t i = 0; i < n; i++) {
        const bool keep =
            c->p < 1.0f && (c->p == 0.0f || ref_dropout_keep(d.seed, d.offset, i, d.p));
        dropped += !keep;
        if (isnan(in[i]) || (c->op == ADD && isnan(base[i]))) {
            ck_assert_msg(isnan(got[i]), "%s: [%zu] (a NaN) = %g", what, i, got[i]);
            continue;
        }
        /* Dropped: base + in 0 exactly as the dtype holds it (0 without base). */
        if (!keep)
            ck_assert_msg(got[i] == (c->op == ADD ? rounded[i] : 0.0f) &&
                              want[i] == (c->op == ADD ? base[i] : 0.0f),
                          "%s: dropped [%zu] = %g (fp32 op %g)", what, i, got[i], want[i]);
        /* one rounding: half a unit of the dtype relative, or fp16's subnormal step below
         * its normal range */
        ck_assert_msg(got[i] == rounded[i] &&
                          fabs(got[i] - want[i]) <= u * fabs(want[i]) + test_abs_floor(out_dt),
                      "%s: [%zu] = %.9g, the fp32 op %.9g (rounded %.9g)", what, i, got[i], want[i],
                      rounded[i]);
    }
    /* The rule drops about p of the elements. */
    ck_assert_msg(fabs((double)dropped / n - c->p) < 0.05, "%s: %zu of %zu dropped", what, dropped,
                  n);
    free(in), free(base), free(got), free(want), free(rounded);
    oclml_tensor *all[] = {IN,     BASE, c->in_place ? NULL : OUT, own[0], own[1], own[2], IN32,
                           BASE32, OUT32};
    for (int i = 0; i < 9; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
}
END_TEST

/* Shapes that differ, and an output over its input in another element size (not in place: its
 * elements lie across the input's), are refused; nothing is written. */
START_TEST(refusals_touch_nothing) {
    const oclml_dropout_params d = test_dropout_params(0.5f, 3, 0);
    const size_t n = 16, shape[1] = {n};
    oclml_tensor *own, *X = test_tensor_at(BF, 1, (size_t[]){n}, 0, &own),
                       *Y = test_tensor_at(F32, 1, (size_t[]){n + 1}, 0, &own),
                       *R = test_tensor_at(FP, 1, (size_t[]){n}, 0, &own);
    float *x = test_floats(n), *back = test_floats(n);
    test_random(x, n, -1, 1);
    test_round_to(BF, x, n);
    ASSERT_OK(oclml_tensor_write(X, x, n));
    ASSERT_STATUS(oclml_dropout(T, &d, X, Y), OCLML_ERR_INVALID_SHAPE);
    test_assert_untouched(Y, n + 1);
    ASSERT_STATUS(oclml_dropout_add(T, &d, X, Y, R), OCLML_ERR_INVALID_SHAPE);
    test_assert_untouched(R, n);
    /* fp32 x and a bf16 y at the same address, of the same element count. */
    oclml_tensor *XF = test_tensor_from(1, shape, x), *YB;
    cl_mem mem;
    size_t off;
    ASSERT_OK(oclml_tensor_buffer(XF, &mem, &off));
    ASSERT_OK(oclml_tensor_wrap_dtype(T, BF, mem, off, 1, shape, &YB));
    ASSERT_STATUS(oclml_dropout(T, &d, XF, YB), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_dropout_backward(T, &d, XF, YB), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_dropout_add(T, &d, X, XF, YB), OCLML_ERR_INVALID_ARGUMENT);
    test_read(XF, back, n);
    ck_assert_msg(!memcmp(back, x, n * sizeof *x), "x was written");
    free(x), free(back);
    oclml_tensor *all[] = {X, Y, R, XF, YB};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("dropout_lp");
    TCase *tc = tcase_create("dropout_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, matches_fp32_op_rounded, 0, N_CASES);
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
