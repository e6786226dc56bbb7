/* Reductions over sets of axes (oclml_reduce_axes) against a double reference: every axis set of
 * odd 1- to 4-D shapes, keepdim and dropped output shapes, negative axes, column sums long
 * enough for the chunked two-pass path, odd offsets (the scalar path), argmax along each axis with
 * ties, NaN, determinism, and bad input that must touch nothing. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *NAMES[] = {"sum", "max", "mean", "argmax"};

/* The reference: out[o] over the elements whose kept coordinates give o (keepdim layout). */
static void ref_axes(int op, int nd, const size_t *shape, unsigned mask, const float *x,
                     double *out, double *scale, size_t nout) {
    size_t count = 1, n = 1;
    for (int d = 0; d < nd; d++) {
        n *= shape[d];
        if (mask >> d & 1) count *= shape[d];
    }
    size_t *seen = calloc(nout, sizeof *seen);
    for (size_t o = 0; o < nout; o++) {
        out[o] = op == OCLML_REDUCE_MAX || op == OCLML_REDUCE_ARGMAX ? -INFINITY : 0;
        scale[o] = 0;
    }
    double *best = calloc(nout, sizeof *best);
    for (size_t i = 0; i < n; i++) {
        size_t rem = i, o = 0, ostride = 1, along = 0, astride = 1;
        for (int d = nd - 1; d >= 0; d--) {
            size_t c = rem % shape[d];
            rem /= shape[d];
            if (mask >> d & 1) {
                along += c * astride;
                astride *= shape[d];
            } else {
                o += c * ostride;
                ostride *= shape[d];
            }
        }
        double v = x[i];
        scale[o] += fabs(v);
        if (op == OCLML_REDUCE_SUM || op == OCLML_REDUCE_MEAN) {
            out[o] += v;
        } else {
            /* NaN is largest (the first NaN wins); ties keep the first index along the axes. */
            bool take =
                seen[o] == 0 || (isnan(v) && !isnan(best[o])) || (!isnan(best[o]) && v > best[o]);
            if (take) {
                best[o] = v;
                out[o] = op == OCLML_REDUCE_MAX ? v : (double)along;
            }
            seen[o]++;
        }
    }
    for (size_t o = 0; o < nout; o++) {
        if (op == OCLML_REDUCE_MEAN) {
            out[o] /= (double)count;
            scale[o] /= (double)count;
        }
        if (op == OCLML_REDUCE_MAX || op == OCLML_REDUCE_ARGMAX) scale[o] = fabs(out[o]);
    }
    free(seen);
    free(best);
}

/* Runs op over the axes of mask on x (given shape, already uploaded in X) and checks y. The axes
 * are listed in a scrambled order, some negative; keepdim picks y's shape. */
static void check_axes(int op, const oclml_tensor *X, int nd, const size_t *shape, unsigned mask,
                       const float *x, bool keepdim) {
    int axes[4], na = 0;
    for (int d = nd - 1; d >= 0; d--)
        if (mask >> d & 1) axes[na++] = (d % 2) ? d - nd : d;
    size_t ysh[4], nout = 1;
    int ynd = 0;
    for (int d = 0; d < nd; d++) {
        bool r = mask >> d & 1;
        if (!r) nout *= shape[d];
        if (keepdim)
            ysh[ynd++] = r ? 1 : shape[d];
        else if (!r)
            ysh[ynd++] = shape[d];
    }
    if (ynd == 0) ysh[ynd++] = 1;
    oclml_tensor *Y = test_tensor(ynd, ysh);
    ASSERT_OK(oclml_reduce_axes(T, op, X, axes, na, Y));
    float *y = test_floats(nout);
    double *ref = test_doubles(nout), *scale = test_doubles(nout);
    test_read(Y, y, nout);
    ref_axes(op, nd, shape, mask, x, ref, scale, nout);
    char what[128];
    snprintf(what, sizeof what, "%s over mask 0x%x of [%zu %zu %zu %zu] (nd %d)%s", NAMES[op], mask,
             shape[0], nd > 1 ? shape[1] : 0, nd > 2 ? shape[2] : 0, nd > 3 ? shape[3] : 0, nd,
             keepdim ? " keepdim" : "");
    bool exact = op == OCLML_REDUCE_MAX || op == OCLML_REDUCE_ARGMAX;
    test_assert_close_scaled(what, y, ref, scale, nout, exact ? 0 : TOL_REDUCTION);
    oclml_tensor_destroy(Y);
    free(y);
    free(ref);
    free(scale);
}

/* Every non-empty axis set of each shape, for sum, max and mean (loop index = op). */
START_TEST(every_axis_set) {
    static const size_t shapes[][4] = {{3, 5, 7, 11}, {2, 1, 9, 4},  {1, 33, 1, 6}, {6, 13, 0, 0},
                                       {37, 0, 0, 0}, {5, 70, 3, 0}, {4, 3, 2, 65}};
    static const int nds[] = {4, 4, 4, 2, 1, 3, 4};
    for (size_t s = 0; s < sizeof nds / sizeof nds[0]; s++) {
        int nd = nds[s];
        size_t n = 1;
        for (int d = 0; d < nd; d++) n *= shapes[s][d];
        float *x = test_floats(n);
        test_random(x, n, -4, 4);
        oclml_tensor *X = test_tensor_from(nd, shapes[s], x);
        for (unsigned mask = 1; mask < (1u << nd); mask++)
            check_axes(_i, X, nd, shapes[s], mask, x, mask % 2 == 1);
        oclml_tensor_destroy(X);
        free(x);
    }
}
END_TEST

/* Column sums (bias gradients) long enough that the columns are split into chunks and reduced
 * again; batched columns; NCHW bias gradients; at an odd offset (scalar loads) and aligned. */
START_TEST(column_sums_and_offsets) {
    static const size_t shapes[][4] = {
        {3001, 300, 0, 0}, {1000, 7, 0, 0}, {3, 517, 64, 0}, {8, 16, 9, 9}, {2000, 3, 1, 2}};
    static const int nds[] = {2, 2, 3, 4, 4};
    static const unsigned masks[] = {0x1, 0x1, 0x2, 0xD, 0x5};
    cl_context c;
    oclml_ctx_cl_objects(T, &c, NULL, NULL);
    for (size_t s = 0; s < sizeof nds / sizeof nds[0]; s++) {
        size_t n = 1;
        for (int d = 0; d < nds[s]; d++) n *= shapes[s][d];
        float *x = test_floats(n);
        test_random(x, n, -1, 1);
        for (size_t off = 0; off < 2; off++) {
            cl_int err;
            cl_mem buf = clCreateBuffer(c, CL_MEM_READ_WRITE, (n + 1) * sizeof(float), NULL, &err);
            ck_assert_int_eq(err, CL_SUCCESS);
            oclml_tensor *X;
            ASSERT_OK(oclml_tensor_wrap(T, buf, off * sizeof(float), nds[s], shapes[s], &X));
            ASSERT_OK(oclml_tensor_write(X, x, n));
            for (int op = 0; op < 3; op++) check_axes(op, X, nds[s], shapes[s], masks[s], x, true);
            oclml_tensor_destroy(X);
            clReleaseMemObject(buf);
        }
        free(x);
    }
}
END_TEST

/* Argmax along each axis of a 4-D tensor with ties and NaN; along the single long axis of
 * column and row layouts. */
START_TEST(argmax_each_axis_ties_nan) {
    size_t shape[4] = {5, 6, 7, 9}, n = 5 * 6 * 7 * 9;
    float *x = test_floats(n);
    test_random(x, n, -3, 3);
    for (size_t i = 0; i < n; i += 7) x[i] = 2.5f; /* ties everywhere */
    x[100] = NAN;
    x[1001] = NAN;
    x[1500] = INFINITY;
    oclml_tensor *X = test_tensor_from(4, shape, x);
    for (int d = 0; d < 4; d++) {
        check_axes(OCLML_REDUCE_ARGMAX, X, 4, shape, 1u << d, x, d % 2 == 0);
        check_axes(OCLML_REDUCE_MAX, X, 4, shape, 1u << d, x, d % 2 == 0);
        check_axes(OCLML_REDUCE_SUM, X, 4, shape, 1u << d, x, true);
    }
    oclml_tensor_destroy(X);
    free(x);
    /* Long columns (chunked partials carry the indices) and all -inf columns. */
    size_t cs[2] = {2500, 13}, cn = 2500 * 13;
    float *y = test_floats(cn);
    test_random(y, cn, -1, 1);
    for (size_t r = 0; r < cs[0]; r++) y[r * 13 + 3] = -INFINITY;
    y[1777 * 13 + 5] = 7;
    y[2222 * 13 + 5] = 7;
    y[999 * 13 + 8] = NAN;
    y[1999 * 13 + 8] = NAN;
    oclml_tensor *Yx = test_tensor_from(2, cs, y);
    for (int op = 0; op < 4; op++) {
        check_axes(op, Yx, 2, cs, 1, y, false);
        check_axes(op, Yx, 2, cs, 2, y, true);
    }
    oclml_tensor_destroy(Yx);
    free(y);
}
END_TEST

/* Sums of values near 1e3 varying by 0.1, and a mean of a 1e4-long column: fp32 accumulation
 * stays within the reduction tolerance. Then the same call twice gives identical bits. */
START_TEST(offset_values_and_determinism) {
    size_t shape[2] = {4099, 129}, n = 4099 * 129;
    float *x = test_floats(n);
    test_random(x, n, 999.9f, 1000.1f);
    oclml_tensor *X = test_tensor_from(2, shape, x);
    check_axes(OCLML_REDUCE_MEAN, X, 2, shape, 1, x, true);
    check_axes(OCLML_REDUCE_SUM, X, 2, shape, 2, x, true);
    size_t m = 129;
    oclml_tensor *A = test_tensor(1, &m), *B = test_tensor(1, &m);
    int ax0 = 0;
    ASSERT_OK(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, &ax0, 1, A));
    ASSERT_OK(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, &ax0, 1, B));
    float a[129], b[129];
    test_read(A, a, m);
    test_read(B, b, m);
    ck_assert_msg(!memcmp(a, b, sizeof a), "column sums differ between two runs");
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(X);
    free(x);
}
END_TEST

/* NaN: sums and means of a column with NaN are NaN, max is NaN, other columns are untouched by
 * it. Size-1 axes reduce to a copy (argmax to 0, even of NaN). */
START_TEST(nan_policy_and_size_one_axes) {
    size_t shape[3] = {7, 1, 10}, n = 70;
    float x[70];
    test_random(x, n, -1, 1);
    x[3 * 10 + 4] = NAN;
    oclml_tensor *X = test_tensor_from(3, shape, x);
    for (int op = 0; op < 4; op++) {
        if (op != OCLML_REDUCE_ARGMAX) check_axes(op, X, 3, shape, 0x1, x, true);
        check_axes(op, X, 3, shape, 0x2, x, false); /* the size-1 axis */
    }
    size_t ysh[2] = {1, 10};
    oclml_tensor *Y = test_tensor(2, ysh);
    int ax = 0;
    ASSERT_OK(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, &ax, 1, Y));
    float y[10];
    test_read(Y, y, 10);
    for (int c = 0; c < 10; c++) ck_assert(isnan(y[c]) == (c == 4));
    oclml_tensor_destroy(Y);
    oclml_tensor_destroy(X);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s4[4] = {2, 3, 4, 5}, ok_sh[4] = {2, 1, 4, 1}, drop[2] = {2, 4}, bad[2] = {4, 2};
    oclml_tensor *X = test_tensor(4, s4), *Y = test_tensor(4, ok_sh), *Yd = test_tensor(2, drop),
                 *Yb = test_tensor(2, bad);
    float xs[120];
    test_random(xs, 120, -1, 1);
    ASSERT_OK(oclml_tensor_write(X, xs, 120));
    int ax[2] = {1, 3}, rep[2] = {3, -1}, far[1] = {4}, neg[1] = {-5};
    ASSERT_STATUS(oclml_reduce_axes(NULL, OCLML_REDUCE_SUM, X, ax, 2, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, NULL, ax, 2, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, NULL, 2, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, ax, 2, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_reduce_axes(T, (oclml_reduce_op)7, X, ax, 2, Y),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, ax, 0, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, ax, 5, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, rep, 2, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, far, 1, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, neg, 1, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, ax, 2, Yb), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_MEAN, X, ax, 1, Yd), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_ARGMAX, X, ax, 2, Y), OCLML_ERR_UNSUPPORTED);
    /* y overlapping x: a view into x's buffer. */
    cl_mem buf;
    size_t off;
    ASSERT_OK(oclml_tensor_buffer(X, &buf, &off));
    oclml_tensor *Yo;
    ASSERT_OK(oclml_tensor_wrap(T, buf, off + 16, 2, drop, &Yo));
    ASSERT_STATUS(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, ax, 2, Yo), OCLML_ERR_INVALID_ARGUMENT);
    float back[120];
    oclml_tensor *outs[3] = {Y, Yd, Yb};
    for (int t = 0; t < 3; t++) test_assert_untouched(outs[t], 8);
    test_read(X, back, 120);
    ck_assert(!memcmp(back, xs, sizeof xs));
    /* The keepdim and dropped shapes both work. */
    ASSERT_OK(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, ax, 2, Y));
    ASSERT_OK(oclml_reduce_axes(T, OCLML_REDUCE_SUM, X, ax, 2, Yd));
    oclml_tensor *all[] = {X, Y, Yd, Yb, Yo};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("axis");
    TCase *tc = tcase_create("axis");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, every_axis_set, 0, 3);
    tcase_add_test(tc, column_sums_and_offsets);
    tcase_add_test(tc, argmax_each_axis_ties_nan);
    tcase_add_test(tc, offset_values_and_determinism);
    tcase_add_test(tc, nan_policy_and_size_one_axes);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
