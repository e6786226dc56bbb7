/* Embedding lookup and its backward on bf16 and fp16 tensors (ids fp32): y is the table's row as
 * the table's dtype holds it, rounded once to y's dtype; dtable is the fp32 sum in token order of
 * dy as its dtype holds it (from dtable's held value where accumulating), rounded once to
 * dtable's dtype: both compared bit for bit with those roundings done on the host. float4 rows (D
 * a multiple of 4), scalar rows (odd D, and tensors two elements into their buffers), repeated
 * and invalid ids (NaN rows, no gradient), the dtypes mixed; refusals touch nothing. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BF OCLML_BFLOAT16
#define FP OCLML_FLOAT16
#define F32 OCLML_FLOAT32

/* N ids in [0, V), every third a repeat of the first, four invalid ones (N >= 8). */
static float *make_ids(size_t N, size_t V) {
    float *ids = test_floats(N);
    test_random(ids, N, 0, (float)V);
    for (size_t n = 0; n < N; n++) ids[n] = floorf(ids[n]) < (float)V ? floorf(ids[n]) : 0.0f;
    for (size_t n = 3; n < N; n += 3) ids[n] = ids[0];
    ids[1] = -1.0f;
    ids[2] = (float)V;
    ids[4] = 2.5f;
    ids[7] = NAN;
    return ids;
}

static bool valid_id(float f, size_t V) { return f >= 0 && f < (float)V && f == floorf(f); }

/* Writes random values in [-1, 1) to t, returning them as its dtype holds them. */
static float *fill_random(oclml_tensor *t, oclml_dtype dt, size_t n) {
    float *v = test_floats(n);
    test_random(v, n, -1, 1);
    test_round_to(dt, v, n);
    ASSERT_OK(oclml_tensor_write(t, v, n));
    return v;
}

static void assert_bits(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(isnan(want[i]) ? isnan(got[i]) : got[i] == want[i],
                      "%s[%zu] = %.9g, want %.9g", what, i, got[i], want[i]);
}

typedef struct emb_case {
    size_t N, V, D, skip;
    oclml_dtype table, y, dy, dtable;
} emb_case;

/* D 64: float4 rows; D 37 and skip 2 (two elements in: not a multiple of 4): scalar rows. */
static const emb_case CASES[] = {
    {24, 7, 64, 0, BF, BF, BF, F32},  {24, 7, 37, 0, FP, F32, FP, FP},
    {24, 5, 64, 2, F32, BF, F32, BF}, {30, 9, 64, 0, BF, FP, FP, BF},
    {17, 3, 33, 0, FP, FP, BF, FP},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

START_TEST(forward_and_backward_bit_for_bit) {
    const emb_case *c = &CASES[_i];
    const size_t N = c->N, V = c->V, D = c->D, ids_shape[1] = {N};
    char what[96];
    snprintf(what, sizeof what, "%zux%zu (%zu ids) %s table -> %s y", V, D, N,
             oclml_dtype_name(c->table), oclml_dtype_name(c->y));
    float *ids = make_ids(N, V);
    oclml_tensor *own[4], *ID = test_tensor_from(1, ids_shape, ids),
                          *TB = test_tensor_at(c->table, 2, (size_t[]){V, D}, c->skip, &own[0]),
                          *Y = test_tensor_at(c->y, 2, (size_t[]){N, D}, c->skip, &own[1]),
                          *DY = test_tensor_at(c->dy, 2, (size_t[]){N, D}, c->skip, &own[2]),
                          *DT = test_tensor_at(c->dtable, 2, (size_t[]){V, D}, c->skip, &own[3]);
    float *table = fill_random(TB, c->table, V * D), *want = test_floats(N * D),
          *got = test_floats(N * D > V * D ? N * D : V * D);
    ASSERT_OK(oclml_embedding(T, ID, TB, Y));
    for (size_t n = 0; n < N; n++)
        for (size_t j = 0; j < D; j++)
            want[n * D + j] = valid_id(ids[n], V) ? table[(size_t)ids[n] * D + j] : NAN;
    test_round_to(c->y, want, N * D);
    test_read(Y, got, N * D);
    assert_bits(what, got, want, N * D);

    /* Backward, overwriting and then accumulating onto held values. */
    snprintf(what, sizeof what, "%zux%zu (%zu ids) %s dy -> %s dtable", V, D, N,
             oclml_dtype_name(c->dy), oclml_dtype_name(c->dtable));
    float *dy = fill_random(DY, c->dy, N * D), *acc = test_floats(V * D);
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        float *start = accumulate ? fill_random(DT, c->dtable, V * D) : NULL;
        ASSERT_OK(oclml_embedding_backward(T, ID, DY, DT, accumulate));
        for (size_t v = 0; v < V; v++)
            for (size_t j = 0; j < D; j++) {
                float s = start ? start[v * D + j] : 0.0f;
                for (size_t n = 0; n < N; n++)
                    if (valid_id(ids[n], V) && (size_t)ids[n] == v) s += dy[n * D + j];
                acc[v * D + j] = s;
            }
        test_round_to(c->dtable, acc, V * D);
        test_read(DT, got, V * D);
        assert_bits(what, got, acc, V * D);
        free(start);
    }
    free(ids), free(table), free(want), free(got), free(dy), free(acc);
    oclml_tensor *all[] = {ID, TB, Y, DY, DT, own[0], own[1], own[2], own[3]};
    for (int i = 0; i < 9; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
}
END_TEST

/* y (or dy) of the wrong width beside a bf16 table (dtable), and 16-bit ids, are refused;
 * nothing is written. */
START_TEST(refusals_touch_nothing) {
    const size_t N = 4, V = 5, D = 8, ids_shape[1] = {N};
    float ids[4] = {0, 1, 2, 3};
    oclml_tensor *own, *ID = test_tensor_from(1, ids_shape, ids);
    oclml_tensor *TB = test_tensor_at(BF, 2, (size_t[]){V, D}, 0, &own),
                 *Y = test_tensor_at(BF, 2, (size_t[]){N, D + 1}, 0, &own),
                 *Y2 = test_tensor_at(FP, 2, (size_t[]){N, D}, 0, &own),
                 *IDB = test_tensor_at(BF, 2, (size_t[]){1, N}, 0, &own),
                 *DT = test_tensor_at(FP, 2, (size_t[]){V, D}, 0, &own);
    free(fill_random(TB, BF, V * D));
    ASSERT_STATUS(oclml_embedding(T, ID, TB, Y), OCLML_ERR_INVALID_SHAPE);
    test_assert_untouched(Y, N * (D + 1));
    ASSERT_OK(oclml_tensor_write(IDB, ids, N));
    ASSERT_STATUS(oclml_embedding(T, IDB, TB, Y2), OCLML_ERR_DTYPE);
    test_assert_untouched(Y2, N * D);
    ASSERT_STATUS(oclml_embedding_backward(T, ID, Y, DT, 0), OCLML_ERR_INVALID_SHAPE);
    test_assert_untouched(DT, V * D);
    oclml_tensor *all[] = {ID, TB, Y, Y2, IDB, DT};
    for (int i = 0; i < 6; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("embedding_lp");
    TCase *tc = tcase_create("embedding_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_and_backward_bit_for_bit, 0, N_CASES);
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
