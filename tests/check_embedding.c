/* Embedding lookup and its deterministic backward against double references (tests/ref/), on odd
 * sizes with repeated and invalid ids; bit-for-bit repeatability; the backward as the forward's
 * adjoint by finite differences; accumulation; bad input. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* N ids in [0, V), every third a repeat of the first, a few invalid when `invalid`. */
static float *make_ids(size_t N, size_t V, bool invalid) {
    float *ids = test_floats(N);
    test_random(ids, N, 0, (float)V);
    for (size_t n = 0; n < N; n++) ids[n] = floorf(ids[n]) < (float)V ? floorf(ids[n]) : 0.0f;
    for (size_t n = 3; n < N; n += 3) ids[n] = ids[0];
    if (invalid && N >= 8) {
        ids[1] = -1.0f;
        ids[2] = (float)V;
        ids[4] = 2.5f;
        ids[7] = NAN;
    }
    return ids;
}

typedef struct emb_case {
    size_t N, V, D;
} emb_case;

static const emb_case CASES[] = {{1, 1, 1}, {5, 7, 3}, {64, 37, 8}, {64, 37, 33}, {200, 3, 4}};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

START_TEST(forward_and_backward_match_the_reference) {
    const emb_case *c = &CASES[_i];
    size_t N = c->N, V = c->V, D = c->D;
    float *ids = make_ids(N, V, true), *table = test_floats(V * D), *dy = test_floats(N * D),
          *start = test_floats(V * D), *got = test_floats(N * D > V * D ? N * D : V * D);
    double *want = test_doubles(N * D > V * D ? N * D : V * D);
    test_random(table, V * D, -1, 1);
    test_random(dy, N * D, -1, 1);
    test_random(start, V * D, -1, 1);
    /* ids as a [N / 2 x 2] matrix where N is even: y takes ids' shape + D */
    const size_t ids_2d[2] = {N / 2, 2}, ids_1d[1] = {N}, ts[2] = {V, D}, ys3[3] = {N / 2, 2, D},
                 ys[2] = {N, D};
    bool two_d = N % 2 == 0;
    oclml_tensor *tid = test_tensor_from(two_d ? 2 : 1, two_d ? ids_2d : ids_1d, ids),
                 *tt = test_tensor_from(2, ts, table),
                 *ty = test_tensor(two_d ? 3 : 2, two_d ? ys3 : ys),
                 *tdy = test_tensor_from(2, ys, dy), *tdt = test_tensor(2, ts);
    ASSERT_OK(oclml_embedding(T, tid, tt, ty));
    test_read(ty, got, N * D);
    ref_embedding(ids, N, table, V, D, want);
    for (size_t i = 0; i < N * D; i++)
        ck_assert_msg(isnan(want[i]) ? isnan(got[i]) : got[i] == (float)want[i],
                      "y[%zu] = %g, want %g", i, (double)got[i], want[i]);
    /* overwrite: rows no id names become 0 */
    ASSERT_OK(oclml_embedding_backward(T, tid, tdy, tdt, 0));
    test_read(tdt, got, V * D);
    memset(want, 0, V * D * sizeof *want);
    ref_embedding_backward(ids, N, dy, V, D, want);
    test_assert_close("dtable", got, want, V * D, TOL_REDUCTION);
    /* accumulate onto a random start */
    ASSERT_OK(oclml_tensor_write(tdt, start, V * D));
    ASSERT_OK(oclml_embedding_backward(T, tid, tdy, tdt, 1));
    test_read(tdt, got, V * D);
    for (size_t i = 0; i < V * D; i++) want[i] = start[i];
    ref_embedding_backward(ids, N, dy, V, D, want);
    test_assert_close("dtable accumulated", got, want, V * D, TOL_REDUCTION);
    oclml_tensor *all[] = {tid, tt, ty, tdy, tdt};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
    float *fs[] = {ids, table, dy, start, got};
    for (int i = 0; i < 5; i++) free(fs[i]);
    free(want);
}
END_TEST

/* Many repeats of one id, summed in token order: two runs give the same bits, and the sum is
 * exactly the left-to-right float sum. */
START_TEST(backward_is_repeatable) {
    const size_t N = 3000, V = 5, D = 12, ts[2] = {V, D}, ys[2] = {N, D}, is[1] = {N};
    float *ids = test_floats(N), *dy = test_floats(N * D), *a = test_floats(V * D),
          *b = test_floats(V * D);
    for (size_t n = 0; n < N; n++) ids[n] = n % 7 == 0 ? 4.0f : 1.0f;
    test_random(dy, N * D, -1, 1);
    oclml_tensor *tid = test_tensor_from(1, is, ids), *tdy = test_tensor_from(2, ys, dy),
                 *tdt = test_tensor(2, ts);
    ASSERT_OK(oclml_embedding_backward(T, tid, tdy, tdt, 0));
    test_read(tdt, a, V * D);
    ASSERT_OK(oclml_embedding_backward(T, tid, tdy, tdt, 0));
    test_read(tdt, b, V * D);
    ck_assert(!memcmp(a, b, V * D * sizeof *a));
    for (size_t c = 0; c < D; c++) {
        float s = 0.0f;
        for (size_t n = 0; n < N; n++)
            if (ids[n] == 1.0f) s += dy[n * D + c];
        ck_assert_msg(a[1 * D + c] == s, "column %zu: %g, token-order sum %g", c, (double)a[D + c],
                      (double)s);
        ck_assert(a[0 * D + c] == 0.0f && a[2 * D + c] == 0.0f);
    }
    oclml_tensor_destroy(tid);
    oclml_tensor_destroy(tdy);
    oclml_tensor_destroy(tdt);
    free(ids);
    free(dy);
    free(a);
    free(b);
}
END_TEST

/* The backward is the forward's adjoint: for L = sum(w * embedding(ids, table)),
 * dL/dtable = embedding_backward(ids, w), checked by central differences of L. */
START_TEST(backward_by_finite_differences) {
    const size_t N = 9, V = 4, D = 5, ts[2] = {V, D}, ys[2] = {N, D}, is[1] = {N};
    float *ids = make_ids(N, V, false), *table = test_floats(V * D), *w = test_floats(N * D),
          *g = test_floats(V * D), *y = test_floats(N * D);
    test_random(table, V * D, -1, 1);
    test_random(w, N * D, -1, 1);
    oclml_tensor *tid = test_tensor_from(1, is, ids), *tt = test_tensor_from(2, ts, table),
                 *tw = test_tensor_from(2, ys, w), *ty = test_tensor(2, ys),
                 *tg = test_tensor(2, ts);
    ASSERT_OK(oclml_embedding_backward(T, tid, tw, tg, 0));
    test_read(tg, g, V * D);
    const float h = 1e-2f;
    for (size_t i = 0; i < V * D; i++) {
        double L[2];
        for (int s = 0; s < 2; s++) {
            float *t2 = test_floats(V * D);
            memcpy(t2, table, V * D * sizeof *t2);
            t2[i] += s ? -h : h;
            ASSERT_OK(oclml_tensor_write(tt, t2, V * D));
            ASSERT_OK(oclml_embedding(T, tid, tt, ty));
            test_read(ty, y, N * D);
            L[s] = 0;
            for (size_t k = 0; k < N * D; k++) L[s] += (double)w[k] * y[k];
            free(t2);
        }
        double fd = (L[0] - L[1]) / (2 * h);
        ck_assert_msg(fabs(fd - g[i]) <= 1e-4 * (1 + fabs(fd)), "dtable[%zu] = %g, fd %g", i,
                      (double)g[i], fd);
    }
    oclml_tensor *all[] = {tid, tt, tw, ty, tg};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
    float *fs[] = {ids, table, w, g, y};
    for (int i = 0; i < 5; i++) free(fs[i]);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    const size_t is[1] = {6}, ts[2] = {5, 4}, ys[2] = {6, 4}, bad_y[2] = {6, 3}, t1[1] = {20};
    oclml_tensor *ids = test_tensor(1, is), *table = test_tensor(2, ts), *y = test_tensor(2, ys),
                 *yb = test_tensor(2, bad_y), *t1d = test_tensor(1, t1), *dt = test_tensor(2, ts);
    ASSERT_OK(oclml_fill(T, ids, 1.0f));
    ASSERT_STATUS(oclml_embedding(NULL, ids, table, y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_embedding(T, NULL, table, y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_embedding(T, ids, table, yb), OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "rows of"), "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_embedding(T, ids, t1d, y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_embedding(T, ids, table, table), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_embedding_backward(T, ids, yb, dt, 0), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_embedding_backward(T, ids, y, NULL, 0), OCLML_ERR_NULL_POINTER);
    /* dtable over dy's buffer */
    cl_mem buf;
    size_t off;
    oclml_tensor *alias = NULL;
    ASSERT_OK(oclml_tensor_buffer(y, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 0, 2, ts, &alias));
    ASSERT_STATUS(oclml_embedding_backward(T, ids, y, alias, 0), OCLML_ERR_INVALID_ARGUMENT);
    oclml_ctx *other = test_ctx_new(NULL);
    oclml_tensor *foreign;
    ASSERT_OK(oclml_tensor_create(other, 2, ts, &foreign));
    ASSERT_STATUS(oclml_embedding(T, ids, foreign, y), OCLML_ERR_CONTEXT_MISMATCH);
    test_assert_untouched(y, 24);
    test_assert_untouched(yb, 18);
    test_assert_untouched(dt, 20);
    oclml_tensor_destroy(foreign);
    oclml_ctx_destroy(other);
    oclml_tensor *all[] = {alias, ids, table, y, yb, t1d, dt};
    for (int i = 0; i < 7; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("embedding");
    TCase *tc = tcase_create("embedding");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_and_backward_match_the_reference, 0, N_CASES);
    tcase_add_test(tc, backward_is_repeatable);
    tcase_add_test(tc, backward_by_finite_differences);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
