/* Layout ops against host references (bit-exact: they move or add once): bias add along every
 * axis, in place and at odd offsets; every permutation of 2-, 3- and 4-D shapes with odd and
 * size-1 extents, tiles with ragged edges, NCHW <-> NHWC with 3 channels; concat and split along
 * every axis and with more parts than one launch takes; NaN passes through; bad input touches
 * nothing. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t numel(int nd, const size_t *s) {
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

/* A tensor in a fresh buffer at element offset off (odd offsets take the scalar paths). */
static oclml_tensor *tensor_at(int nd, const size_t *shape, size_t off, cl_mem *buf) {
    cl_context c;
    oclml_ctx_cl_objects(T, &c, NULL, NULL);
    size_t n = numel(nd, shape);
    cl_int err;
    *buf = clCreateBuffer(c, CL_MEM_READ_WRITE, (n + off) * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_wrap(T, *buf, off * sizeof(float), nd, shape, &t));
    float *nan = test_floats(n);
    ASSERT_OK(oclml_tensor_write(t, nan, n));
    free(nan);
    return t;
}

static void assert_same(const char *what, const float *out, const float *ref, size_t n) {
    for (size_t i = 0; i < n; i++) {
        bool same = (isnan(out[i]) && isnan(ref[i])) || out[i] == ref[i];
        ck_assert_msg(same, "%s[%zu] = %.9g, expected %.9g (seed %u)", what, i, (double)out[i],
                      (double)ref[i], test_seed());
    }
}

/* ---- bias add ---- */
static void check_bias(int nd, const size_t *shape, int axis, size_t off, bool in_place) {
    size_t n = numel(nd, shape), a = axis < 0 ? (size_t)(axis + nd) : (size_t)axis;
    size_t C = shape[a], inner = 1;
    for (int d = (int)a + 1; d < nd; d++) inner *= shape[d];
    float *x = test_floats(n), *b = test_floats(C), *y = test_floats(n), *ref = test_floats(n);
    test_random(x, n, -2, 2);
    test_random(b, C, -2, 2);
    x[n / 2] = NAN;
    for (size_t i = 0; i < n; i++) ref[i] = x[i] + b[(i / inner) % C];
    cl_mem bx, by;
    oclml_tensor *X = tensor_at(nd, shape, off, &bx), *B = test_tensor_from(1, &C, b);
    oclml_tensor *Y = in_place ? X : tensor_at(nd, shape, off, &by);
    ASSERT_OK(oclml_tensor_write(X, x, n));
    ASSERT_OK(oclml_add_bias(T, X, B, axis, Y));
    test_read(Y, y, n);
    char what[96];
    snprintf(what, sizeof what, "add_bias nd %d axis %d off %zu%s", nd, axis, off,
             in_place ? " in place" : "");
    assert_same(what, y, ref, n);
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(B);
    clReleaseMemObject(bx);
    if (!in_place) {
        oclml_tensor_destroy(Y);
        clReleaseMemObject(by);
    }
    free(x);
    free(b);
    free(y);
    free(ref);
}

START_TEST(bias_every_axis) {
    static const size_t shapes[][4] = {
        {2, 3, 5, 7}, {4, 8, 0, 0}, {37, 0, 0, 0}, {3, 1, 4, 0}, {2, 16, 9, 8}};
    static const int nds[] = {4, 2, 1, 3, 4};
    for (size_t s = 0; s < sizeof nds / sizeof nds[0]; s++)
        for (int a = 0; a < nds[s]; a++) {
            check_bias(nds[s], shapes[s], a, 0, false);
            check_bias(nds[s], shapes[s], a - nds[s], 1, false);
            check_bias(nds[s], shapes[s], a, 0, true);
            check_bias(nds[s], shapes[s], a, 3, true);
        }
}
END_TEST

/* ---- permute ---- */
static void ref_permute(int nd, const size_t *shape, const int *perm, const float *x, float *y) {
    size_t n = numel(nd, shape), xstride[4], ysh[4];
    xstride[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--) xstride[d] = xstride[d + 1] * shape[d + 1];
    for (int i = 0; i < nd; i++) ysh[i] = shape[perm[i]];
    for (size_t o = 0; o < n; o++) {
        size_t rem = o, src = 0;
        for (int i = nd - 1; i >= 0; i--) {
            src += (rem % ysh[i]) * xstride[perm[i]];
            rem /= ysh[i];
        }
        y[o] = x[src];
    }
}

static void check_permute(int nd, const size_t *shape, const int *perm, size_t off) {
    size_t n = numel(nd, shape), ysh[4];
    for (int i = 0; i < nd; i++) ysh[i] = shape[perm[i]];
    float *x = test_floats(n), *y = test_floats(n), *ref = test_floats(n);
    test_random(x, n, -1, 1);
    x[0] = NAN;
    ref_permute(nd, shape, perm, x, ref);
    cl_mem bx, by;
    oclml_tensor *X = tensor_at(nd, shape, off, &bx), *Y = tensor_at(nd, ysh, off, &by);
    ASSERT_OK(oclml_tensor_write(X, x, n));
    ASSERT_OK(oclml_permute(T, X, perm, Y));
    test_read(Y, y, n);
    char what[128];
    snprintf(what, sizeof what, "permute [%zu %zu %zu %zu] nd %d by %d%d%d%d off %zu", shape[0],
             nd > 1 ? shape[1] : 0, nd > 2 ? shape[2] : 0, nd > 3 ? shape[3] : 0, nd, perm[0],
             nd > 1 ? perm[1] : 0, nd > 2 ? perm[2] : 0, nd > 3 ? perm[3] : 0, off);
    assert_same(what, y, ref, n);
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Y);
    clReleaseMemObject(bx);
    clReleaseMemObject(by);
    free(x);
    free(y);
    free(ref);
}

/* Every permutation of nd axes, by index (Lehmer code). */
static void nth_perm(int nd, int k, int *perm) {
    int left[4] = {0, 1, 2, 3};
    for (int i = 0; i < nd; i++) {
        int f = 1;
        for (int j = 2; j < nd - i; j++) f *= j;
        int q = k / f;
        k %= f;
        perm[i] = left[q];
        for (int j = q; j < 3; j++) left[j] = left[j + 1];
    }
}

START_TEST(permute_every_order) {
    static const size_t shapes[][4] = {{3, 5, 7, 2},  {2, 33, 1, 40},  {1, 17, 6, 1},
                                       {9, 70, 3, 0}, {67, 130, 0, 0}, {4, 1, 0, 0}};
    static const int nds[] = {4, 4, 4, 3, 2, 2};
    for (size_t s = 0; s < sizeof nds / sizeof nds[0]; s++) {
        int nperm = 1;
        for (int j = 2; j <= nds[s]; j++) nperm *= j;
        for (int k = 0; k < nperm; k++) {
            int perm[4];
            nth_perm(nds[s], k, perm);
            check_permute(nds[s], shapes[s], perm, (size_t)(k % 2));
        }
    }
}
END_TEST

/* NCHW <-> NHWC with 3 and 32 channels (short axes fill reshaped tiles), a 1-D identity, and
 * transpose_axes with negative axes. */
START_TEST(nchw_nhwc_and_transpose) {
    static const size_t shapes[][4] = {{2, 3, 37, 41}, {3, 32, 9, 11}};
    static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    for (int s = 0; s < 2; s++) {
        check_permute(4, shapes[s], to_nhwc, 0);
        size_t nhwc[4] = {shapes[s][0], shapes[s][2], shapes[s][3], shapes[s][1]};
        check_permute(4, nhwc, to_nchw, 0);
    }
    size_t m = 77;
    int id[1] = {0};
    check_permute(1, &m, id, 1);
    size_t sh[3] = {5, 40, 33}, n = 5 * 40 * 33, tsh[3] = {5, 33, 40};
    float *x = test_floats(n), *y = test_floats(n), *ref = test_floats(n);
    test_random(x, n, -1, 1);
    int perm[3] = {0, 2, 1};
    ref_permute(3, sh, perm, x, ref);
    oclml_tensor *X = test_tensor_from(3, sh, x), *Y = test_tensor(3, tsh);
    ASSERT_OK(oclml_transpose_axes(T, X, -1, 1, Y));
    test_read(Y, y, n);
    assert_same("transpose_axes -1 1", y, ref, n);
    oclml_tensor_destroy(X);
    oclml_tensor_destroy(Y);
    free(x);
    free(y);
    free(ref);
}
END_TEST

/* ---- concat and split ---- */
static void check_concat_split(int nd, const size_t *shape, int axis, int nparts) {
    size_t a = axis < 0 ? (size_t)(axis + nd) : (size_t)axis, n = numel(nd, shape);
    size_t outer = 1, inner = 1;
    for (size_t d = 0; d < a; d++) outer *= shape[d];
    for (int d = (int)a + 1; d < nd; d++) inner *= shape[d];
    /* Part sizes along the axis: 1, 2, 3, ... with the remainder in the last part. */
    size_t sizes[16], left = shape[a];
    for (int k = 0; k < nparts; k++) {
        sizes[k] = k == nparts - 1 ? left : (size_t)(k % 3 + 1);
        left -= sizes[k];
    }
    float *x = test_floats(n), *y = test_floats(n);
    test_random(x, n, -1, 1);
    x[n - 1] = NAN;
    oclml_tensor *parts[16], *Y = test_tensor(nd, shape);
    cl_mem bufs[16];
    float **px = malloc(nparts * sizeof *px);
    size_t start = 0;
    for (int k = 0; k < nparts; k++) {
        size_t ps[4];
        memcpy(ps, shape, nd * sizeof *ps);
        ps[a] = sizes[k];
        size_t pn = numel(nd, ps);
        px[k] = test_floats(pn);
        for (size_t o = 0; o < outer; o++)
            memcpy(px[k] + o * sizes[k] * inner, x + (o * shape[a] + start) * inner,
                   sizes[k] * inner * sizeof(float));
        start += sizes[k];
        parts[k] = tensor_at(nd, ps, (size_t)k % 3, &bufs[k]);
        ASSERT_OK(oclml_tensor_write(parts[k], px[k], pn));
    }
    ASSERT_OK(oclml_concat(T, (const oclml_tensor *const *)parts, nparts, axis, Y));
    test_read(Y, y, n);
    char what[96];
    snprintf(what, sizeof what, "concat nd %d axis %d parts %d", nd, axis, nparts);
    assert_same(what, y, x, n);
    /* Split back into fresh (poisoned) parts. */
    for (int k = 0; k < nparts; k++) {
        size_t pn = n / shape[a] * sizes[k];
        float *nan = test_floats(pn);
        ASSERT_OK(oclml_tensor_write(parts[k], nan, pn));
        free(nan);
    }
    ASSERT_OK(oclml_split(T, Y, axis, parts, nparts));
    snprintf(what, sizeof what, "split nd %d axis %d parts %d", nd, axis, nparts);
    for (int k = 0; k < nparts; k++) {
        size_t pn = n / shape[a] * sizes[k];
        float *back = test_floats(pn);
        test_read(parts[k], back, pn);
        assert_same(what, back, px[k], pn);
        free(back);
        free(px[k]);
        oclml_tensor_destroy(parts[k]);
        clReleaseMemObject(bufs[k]);
    }
    oclml_tensor_destroy(Y);
    free(px);
    free(x);
    free(y);
}

START_TEST(concat_split_every_axis) {
    static const size_t shapes[][4] = {{5, 7, 9, 4}, {30, 0, 0, 0}, {6, 11, 3, 0}};
    static const int nds[] = {4, 1, 3};
    for (size_t s = 0; s < sizeof nds / sizeof nds[0]; s++)
        for (int a = 0; a < nds[s]; a++) {
            check_concat_split(nds[s], shapes[s], a, 1);
            check_concat_split(nds[s], shapes[s], a - nds[s], 2);
            if (shapes[s][a] >= 4) check_concat_split(nds[s], shapes[s], a, 3);
        }
    size_t wide[2] = {5, 40};
    check_concat_split(2, wide, 1, 11); /* two launches */
    check_concat_split(2, wide, -1, 16);
}
END_TEST

/* Concat and split on bf16 and fp16: the 16-bit words moved as they are (every bit pattern,
 * NaN's included), along the last axis and an outer one; parts of another dtype refused with
 * nothing written. */
START_TEST(concat_split_16bit) {
    for (int d = 0; d < 2; d++) {
        const oclml_dtype dt = d ? OCLML_FLOAT16 : OCLML_BFLOAT16;
        for (int axis = 0; axis < 2; axis++) {
            const size_t whole[2] = {7, 13}, n = 7 * 13;
            const size_t cut = axis ? 5 : 3, sa[2] = {axis ? 7 : cut, axis ? cut : 13},
                         sb[2] = {axis ? 7 : 7 - cut, axis ? 13 - cut : 13};
            oclml_tensor *A, *B, *Y, *A2, *B2;
            ASSERT_OK(oclml_tensor_create_dtype(T, dt, 2, sa, &A));
            ASSERT_OK(oclml_tensor_create_dtype(T, dt, 2, sb, &B));
            ASSERT_OK(oclml_tensor_create_dtype(T, dt, 2, whole, &Y));
            ASSERT_OK(oclml_tensor_create_dtype(T, dt, 2, sa, &A2));
            ASSERT_OK(oclml_tensor_create_dtype(T, dt, 2, sb, &B2));
            const size_t na = sa[0] * sa[1], nb = sb[0] * sb[1];
            uint16_t a[91], b[91], y[91], want[91];
            for (size_t i = 0; i < na; i++) a[i] = (uint16_t)(rand() & 0xffff);
            for (size_t i = 0; i < nb; i++) b[i] = (uint16_t)(rand() & 0xffff);
            a[0] = 0x7fc1, b[0] = 0xffff; /* NaN patterns */
            ASSERT_OK(oclml_tensor_write_raw(A, a, na));
            ASSERT_OK(oclml_tensor_write_raw(B, b, nb));
            const oclml_tensor *parts[2] = {A, B};
            ASSERT_OK(oclml_concat(T, parts, 2, axis, Y));
            ASSERT_OK(oclml_tensor_read_raw(Y, y, n));
            for (size_t r = 0; r < whole[0]; r++)
                for (size_t c = 0; c < whole[1]; c++)
                    want[r * 13 + c] =
                        axis ? (c < cut ? a[r * cut + c] : b[r * (13 - cut) + c - cut])
                             : (r < cut ? a[r * 13 + c] : b[(r - cut) * 13 + c]);
            ck_assert_msg(memcmp(y, want, sizeof(uint16_t) * n) == 0, "%s concat axis %d",
                          oclml_dtype_name(dt), axis);
            oclml_tensor *back[2] = {A2, B2};
            ASSERT_OK(oclml_split(T, Y, axis, back, 2));
            uint16_t ga[91], gb[91];
            ASSERT_OK(oclml_tensor_read_raw(A2, ga, na));
            ASSERT_OK(oclml_tensor_read_raw(B2, gb, nb));
            ck_assert(memcmp(ga, a, 2 * na) == 0 && memcmp(gb, b, 2 * nb) == 0);
            /* A part of another dtype: refused, y as it was. */
            oclml_tensor *F = test_tensor(2, sb);
            const oclml_tensor *mixed[2] = {A, F};
            ASSERT_STATUS(oclml_concat(T, mixed, 2, axis, Y), OCLML_ERR_DTYPE);
            ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(T), "one dtype"));
            ASSERT_OK(oclml_tensor_read_raw(Y, y, n));
            ck_assert(memcmp(y, want, sizeof(uint16_t) * n) == 0);
            oclml_tensor *mixed_out[2] = {A2, F};
            ASSERT_STATUS(oclml_split(T, Y, axis, mixed_out, 2), OCLML_ERR_DTYPE);
            oclml_tensor *all[] = {A, B, Y, A2, B2, F};
            for (int i = 0; i < 6; i++) oclml_tensor_destroy(all[i]);
        }
    }
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s[3] = {2, 3, 4}, t[3] = {2, 4, 3}, four = 4, three = 3, p1[3] = {2, 1, 4},
           p2[3] = {2, 2, 4}, p3[3] = {2, 1, 5};
    cl_mem buf;
    oclml_tensor *X = tensor_at(1, (size_t[]){64}, 0, &buf), *Y = test_tensor(3, s),
                 *Yt = test_tensor(3, t), *B4 = test_tensor(1, &four), *B3 = test_tensor(1, &three),
                 *P1 = test_tensor(3, p1), *P2 = test_tensor(3, p2), *P3 = test_tensor(3, p3);
    oclml_tensor_destroy(X);
    ASSERT_OK(oclml_tensor_wrap(T, buf, 0, 3, s, &X));
    float xs[24];
    test_random(xs, 24, -1, 1);
    ASSERT_OK(oclml_tensor_write(X, xs, 24));
    /* bias */
    ASSERT_STATUS(oclml_add_bias(NULL, X, B3, 1, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_add_bias(T, X, NULL, 1, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_add_bias(T, X, B4, 1, Y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_add_bias(T, X, B3, 3, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_add_bias(T, X, B3, -4, Y), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_add_bias(T, X, B3, 1, Yt), OCLML_ERR_INVALID_SHAPE);
    /* permute */
    int rep[3] = {0, 1, 1}, far[3] = {0, 3, 1}, swap[3] = {0, 2, 1};
    ASSERT_STATUS(oclml_permute(T, X, NULL, Yt), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_permute(T, X, rep, Yt), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_permute(T, X, far, Yt), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_permute(T, X, swap, Y), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_permute(T, NULL, swap, Yt), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_transpose_axes(T, X, 1, 3, Yt), OCLML_ERR_INVALID_ARGUMENT);
    /* concat / split */
    oclml_tensor *ok[2] = {P1, P2}, *bad_size[2] = {P1, P1}, *bad_shape[2] = {P2, P3},
                 *with_null[2] = {P1, NULL}, *same[3] = {P1, P1, P1};
    ASSERT_STATUS(oclml_concat(T, NULL, 2, 1, Y), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_concat(T, (const oclml_tensor *const *)ok, 0, 1, Y),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_concat(T, (const oclml_tensor *const *)ok, 2, 3, Y),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_concat(T, (const oclml_tensor *const *)bad_size, 2, 1, Y),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_concat(T, (const oclml_tensor *const *)bad_shape, 2, 1, Y),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_concat(T, (const oclml_tensor *const *)with_null, 2, 1, Y),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_concat(T, (const oclml_tensor *const *)ok, 2, 1, NULL),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_split(T, X, 1, same, 3), OCLML_ERR_INVALID_ARGUMENT); /* overlap */
    ASSERT_STATUS(oclml_split(T, X, 0, ok, 2), OCLML_ERR_INVALID_SHAPE);
    /* Views into X's buffer: outputs overlapping inputs. */
    oclml_tensor *V, *Vb;
    ASSERT_OK(oclml_tensor_wrap(T, buf, 16, 3, t, &V));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 4, 3, s, &Vb));
    ASSERT_STATUS(oclml_permute(T, X, swap, V), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_add_bias(T, X, B3, 1, Vb), OCLML_ERR_INVALID_ARGUMENT);
    oclml_tensor *vb2[1] = {Vb};
    ASSERT_STATUS(oclml_concat(T, (const oclml_tensor *const *)vb2, 1, 0, X),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_split(T, X, 0, vb2, 1), OCLML_ERR_INVALID_ARGUMENT);
    /* Nothing was written. */
    float back[24];
    test_read(X, back, 24);
    ck_assert(!memcmp(back, xs, sizeof xs));
    oclml_tensor *outs[] = {Y, Yt, P1, P2, P3};
    for (int i = 0; i < 5; i++) {
        size_t on;
        ASSERT_OK(oclml_tensor_numel(outs[i], &on));
        test_assert_untouched(outs[i], on);
    }
    oclml_tensor *all[] = {X, Y, Yt, B4, B3, P1, P2, P3, V, Vb};
    for (int i = 0; i < 10; i++) oclml_tensor_destroy(all[i]);
    clReleaseMemObject(buf);
}
END_TEST

int main(void) {
    Suite *s = suite_create("layout");
    TCase *tc = tcase_create("layout");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_test(tc, bias_every_axis);
    tcase_add_test(tc, permute_every_order);
    tcase_add_test(tc, nchw_nhwc_and_transpose);
    tcase_add_test(tc, concat_split_every_axis);
    tcase_add_test(tc, concat_split_16bit);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
