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

/* V 1 makes every valid id the same; D 8 runs the float4 kernels, the others scalar ones; V
 * 5000 takes the scan of the counts several passes. */
static const emb_case CASES[] = {{1, 1, 1},   {5, 7, 3},  {64, 37, 8},  {64, 37, 33},
                                 {64, 1, 8},  {64, 7, 1}, {5, 37, 33},  {1, 37, 8},
                                 {200, 3, 4}, {64, 1, 3}, {64, 5000, 3}};
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
    /* ids as a [B x T] matrix (B 4) where N allows: y takes ids' shape + D */
    const size_t ids_2d[2] = {4, N / 4}, ids_1d[1] = {N}, ts[2] = {V, D}, ys3[3] = {4, N / 4, D},
                 ys[2] = {N, D};
    bool two_d = N % 4 == 0;
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

/* Every id invalid: NaN rows forward; backward, nothing added (zeros, or dtable as it was). */
START_TEST(invalid_ids_give_nan_rows_and_no_gradient) {
    const size_t N = 4, V = 3, D = 5, is[1] = {N}, ts[2] = {V, D}, ys[2] = {N, D};
    const float ids[4] = {-1.0f, 3.0f, 2.5f, NAN};
    float *table = test_floats(V * D), *dy = test_floats(N * D), *got = test_floats(N * D);
    test_random(table, V * D, -1, 1);
    test_random(dy, N * D, -1, 1);
    oclml_tensor *tid = test_tensor_from(1, is, ids), *tt = test_tensor_from(2, ts, table),
                 *ty = test_tensor(2, ys), *tdy = test_tensor_from(2, ys, dy),
                 *tdt = test_tensor(2, ts);
    ASSERT_OK(oclml_fill(T, ty, 0.0f));
    ASSERT_OK(oclml_embedding(T, tid, tt, ty));
    test_read(ty, got, N * D);
    for (size_t i = 0; i < N * D; i++) ck_assert_msg(isnan(got[i]), "y[%zu] = %g", i, got[i]);
    ASSERT_OK(oclml_embedding_backward(T, tid, tdy, tdt, 0));
    test_read(tdt, got, V * D);
    for (size_t i = 0; i < V * D; i++) ck_assert_msg(got[i] == 0.0f, "dtable[%zu] = %g", i, got[i]);
    ASSERT_OK(oclml_tensor_write(tdt, table, V * D));
    ASSERT_OK(oclml_embedding_backward(T, tid, tdy, tdt, 1));
    test_read(tdt, got, V * D);
    ck_assert(!memcmp(got, table, V * D * sizeof *got));
    oclml_tensor *all[] = {tid, tt, ty, tdy, tdt};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
    free(table);
    free(dy);
    free(got);
}
END_TEST

/* D a multiple of 4 but the table, y and dtable one float into their buffers: the scalar
 * kernels run, with the same results as the reference. */
START_TEST(unaligned_offsets_take_the_scalar_path) {
    const size_t N = 12, V = 5, D = 8, is[1] = {N}, ts[2] = {V, D}, ys[2] = {N, D},
                 big[1] = {N * D + 1};
    float *ids = make_ids(N, V, true), *table = test_floats(V * D), *dy = test_floats(N * D),
          *got = test_floats(N * D);
    double *want = test_doubles(N * D);
    test_random(table, V * D, -1, 1);
    test_random(dy, N * D, -1, 1);
    oclml_tensor *tb = test_tensor(1, big), *yb = test_tensor(1, big), *db = test_tensor(1, big);
    oclml_tensor *tt, *ty, *tdt;
    cl_mem buf;
    size_t off;
    ASSERT_OK(oclml_tensor_buffer(tb, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap(T, buf, off + 4, 2, ts, &tt));
    ASSERT_OK(oclml_tensor_buffer(yb, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap(T, buf, off + 4, 2, ys, &ty));
    ASSERT_OK(oclml_tensor_buffer(db, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap(T, buf, off + 4, 2, ts, &tdt));
    ASSERT_OK(oclml_tensor_write(tt, table, V * D));
    oclml_tensor *tid = test_tensor_from(1, is, ids), *tdy = test_tensor_from(2, ys, dy);
    ASSERT_OK(oclml_embedding(T, tid, tt, ty));
    test_read(ty, got, N * D);
    ref_embedding(ids, N, table, V, D, want);
    for (size_t i = 0; i < N * D; i++)
        ck_assert_msg(isnan(want[i]) ? isnan(got[i]) : got[i] == (float)want[i],
                      "y[%zu] = %g, want %g", i, (double)got[i], want[i]);
    ASSERT_OK(oclml_embedding_backward(T, tid, tdy, tdt, 0));
    test_read(tdt, got, V * D);
    memset(want, 0, V * D * sizeof *want);
    ref_embedding_backward(ids, N, dy, V, D, want);
    test_assert_close("dtable", got, want, V * D, TOL_REDUCTION);
    oclml_tensor *all[] = {tt, ty, tdt, tb, yb, db, tid, tdy};
    for (int i = 0; i < 8; i++) oclml_tensor_destroy(all[i]);
    free(ids);
    free(table);
    free(dy);
    free(got);
    free(want);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    const size_t is[1] = {6}, ts[2] = {5, 4}, ys[2] = {6, 4}, bad_y[2] = {6, 3}, t1[1] = {20};
    oclml_tensor *ids = test_tensor(1, is), *table = test_tensor(2, ts), *y = test_tensor(2, ys),
                 *yb = test_tensor(2, bad_y), *t1d = test_tensor(1, t1), *dt = test_tensor(2, ts);
    cl_mem buf0;
    size_t off0;
    ASSERT_OK(oclml_fill(T, ids, 1.0f));
    ASSERT_STATUS(oclml_embedding(NULL, ids, table, y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_embedding(T, NULL, table, y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_embedding(T, ids, table, yb), OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "rows of"), "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_embedding(T, ids, table, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_embedding(T, ids, t1d, y), OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "[V x D]"), "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_embedding(T, ids, table, table), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_embedding_backward(T, ids, yb, dt, 0), OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "dy must hold 6 rows of 4"), "%s",
                  oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_embedding_backward(T, ids, y, t1d, 0), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_embedding_backward(T, ids, y, NULL, 0), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_embedding_backward(T, NULL, y, dt, 0), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_embedding_backward(NULL, ids, y, dt, 0), OCLML_ERR_NULL_POINTER);
    /* y over the table's buffer, with a shape that would otherwise do: 5 ids, y [5 x 4] */
    const size_t is5[1] = {5}, ys5[2] = {5, 4};
    oclml_tensor *ids5 = test_tensor(1, is5), *over_table = NULL;
    ASSERT_OK(oclml_fill(T, ids5, 1.0f));
    ASSERT_OK(oclml_tensor_buffer(table, &buf0, &off0));
    ASSERT_OK(oclml_tensor_wrap(T, buf0, off0, 2, ys5, &over_table));
    ASSERT_STATUS(oclml_embedding(T, ids5, table, over_table), OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "overlaps"), "%s", oclml_ctx_last_error(T));
    test_assert_untouched(table, 20);
    /* dtable over dy's buffer */
    cl_mem buf;
    size_t off;
    oclml_tensor *alias = NULL;
    ASSERT_OK(oclml_tensor_buffer(y, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 0, 2, ts, &alias));
    ASSERT_STATUS(oclml_embedding_backward(T, ids, y, alias, 0), OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "dtable overlaps"), "%s",
                  oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_embedding_backward(T, ids, y, alias, 1), OCLML_ERR_INVALID_ARGUMENT);
    oclml_ctx *other = test_ctx_new(NULL);
    oclml_tensor *foreign;
    ASSERT_OK(oclml_tensor_create(other, 2, ts, &foreign));
    ASSERT_STATUS(oclml_embedding(T, ids, foreign, y), OCLML_ERR_CONTEXT_MISMATCH);
    ASSERT_STATUS(oclml_embedding_backward(T, ids, y, foreign, 0), OCLML_ERR_CONTEXT_MISMATCH);
    test_assert_untouched(y, 24);
    test_assert_untouched(yb, 18);
    test_assert_untouched(dt, 20);
    oclml_tensor_destroy(foreign);
    oclml_ctx_destroy(other);
    oclml_tensor *all[] = {alias, ids, table, y, yb, t1d, dt, ids5, over_table};
    for (int i = 0; i < 9; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("embedding");
    TCase *tc = tcase_create("embedding");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_and_backward_match_the_reference, 0, N_CASES);
    tcase_add_test(tc, backward_is_repeatable);
    tcase_add_test(tc, backward_by_finite_differences);
    tcase_add_test(tc, invalid_ids_give_nan_rows_and_no_gradient);
    tcase_add_test(tc, unaligned_offsets_take_the_scalar_path);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
