/* GRU step against the double reference (both variants, fused and tiled kernels, hidden sizes
 * above the work-group limit, batch 1 to 700, unaligned rows) and against PyTorch's GRUCell
 * golden vectors. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor holding data, wrapped at an element offset into a larger buffer (offset 0: plain). */
static oclml_tensor *tensor_at(size_t offset, int nd, const size_t *shape, const float *data,
                               size_t n) {
    if (!offset) return test_tensor_from(nd, shape, data);
    cl_context c;
    oclml_ctx_cl_objects(T, &c, NULL, NULL);
    cl_int err;
    cl_mem buf = clCreateBuffer(c, CL_MEM_READ_WRITE, (n + offset) * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_wrap(T, buf, offset * sizeof(float), nd, shape, &t));
    clReleaseMemObject(buf); /* the tensor holds it */
    ASSERT_OK(oclml_tensor_write(t, data, n));
    return t;
}

/* Hidden states out against ref (n floats: steps of bd, h0 the state before the first), errors
 * scaled to the terms of h' = (1 - z) n + z h, which |h'| + |h| bounds: h' can cancel to near 0
 * (one element at B1 D1 did, relative error 2e-4 of a tiny output). */
static void assert_close_to_terms(const char *what, const float *out, const double *ref,
                                  const float *h0, size_t bd, size_t n) {
    double *terms = test_doubles(n);
    for (size_t i = 0; i < n; i++)
        terms[i] = fabs(ref[i]) + (i < bd ? fabs((double)h0[i]) : fabs(ref[i - bd]));
    test_assert_close_scaled(what, out, ref, terms, n, TOL_GEMM);
    free(terms);
}

/* offset: x and h start that many floats into their buffers (unaligned rows for vector loads). */
static void gru_case_at(int cho, size_t B, size_t I, size_t D, int bias, size_t offset) {
    size_t xs[2] = {B, I}, hs[2] = {B, D}, wis[2] = {3 * D, I}, whs[2] = {3 * D, D}, bs = 3 * D;
    float *x = test_floats(B * I), *h = test_floats(B * D), *wi = test_floats(3 * D * I);
    float *wh = test_floats(3 * D * D), *bi = test_floats(3 * D), *bh = test_floats(3 * D),
          *out = test_floats(B * D);
    float scale = 1.0f / sqrtf((float)D); /* PyTorch's init range keeps the gates unsaturated */
    test_random(x, B * I, -1, 1);
    test_random(h, B * D, -1, 1);
    test_random(wi, 3 * D * I, -scale, scale);
    test_random(wh, 3 * D * D, -scale, scale);
    test_random(bi, 3 * D, -scale, scale);
    test_random(bh, 3 * D, -scale, scale);
    oclml_tensor *X = tensor_at(offset, 2, xs, x, B * I), *H = tensor_at(offset, 2, hs, h, B * D);
    oclml_tensor *WI = test_tensor_from(2, wis, wi), *WH = test_tensor_from(2, whs, wh);
    oclml_tensor *BI = test_tensor_from(1, &bs, bi), *BH = test_tensor_from(1, &bs, bh),
                 *HN = test_tensor(2, hs);
    ASSERT_OK(oclml_gru_step(T, cho, X, H, WI, WH, bias ? BI : NULL, bias ? BH : NULL, HN));
    test_read(HN, out, B * D);
    double *ref = test_doubles(B * D);
    ref_gru_step(cho, B, I, D, x, h, wi, wh, bias ? bi : NULL, bias ? bh : NULL, ref);
    char what[96];
    snprintf(what, sizeof what, "gru %s B%zu I%zu D%zu%s offset %zu", cho ? "cho" : "torch", B, I,
             D, bias ? "" : " nobias", offset);
    assert_close_to_terms(what, out, ref, h, B * D, B * D);
    oclml_tensor *all[] = {X, H, WI, WH, BI, BH, HN};
    for (int i = 0; i < 7; i++) oclml_tensor_destroy(all[i]);
    void *mem[] = {x, h, wi, wh, bi, bh, out, ref};
    for (int i = 0; i < 8; i++) free(mem[i]);
}

static void gru_case(int cho, size_t B, size_t I, size_t D, int bias) {
    gru_case_at(cho, B, I, D, bias, 0);
}

START_TEST(small_and_odd_sizes) {
    int cho = _i;
    gru_case(cho, 1, 1, 1, 1);
    gru_case(cho, 1, 64, 256, 1);
    gru_case(cho, 3, 5, 7, 0);
    gru_case(cho, 17, 33, 129, 1);
    gru_case(cho, 40, 64, 100, 1);
    gru_case(cho, 257, 3, 9, 1); /* tiled kernel for TORCH from batch 128 on */
}
END_TEST

/* The tiled kernel (TORCH, batch >= 128): partial tiles in every direction, K not a multiple of
 * its chunk, vector and scalar loads (sizes or offsets not multiples of 4), many chunks (x side
 * shorter and longer than h side), and a large problem. CHO at the same sizes takes the fused
 * kernels. */
START_TEST(large_batch_tiled_kernel) {
    int cho = _i;
    gru_case(cho, 128, 64, 256, 1);      /* whole tiles, vector loads */
    gru_case(cho, 129, 33, 65, 1);       /* one row and one unit past a tile, scalar loads */
    gru_case(cho, 200, 68, 36, 0);       /* no biases, x side longer than h side */
    gru_case_at(cho, 131, 64, 96, 1, 1); /* sizes fit float4, the rows do not start aligned */
    gru_case(cho, 130, 1, 1, 1);
    gru_case(cho, 700, 100, 300, 1);
}
END_TEST

/* The tile shapes a GPU picks that CPUs do not: a second K-group (GPUs with few tiles per compute
 * unit) and its hand-over, 64 x 32 tiles of 16 warps, and 16-unit warps. */
START_TEST(tiled_kernel_shapes) {
    static const char *shapes[] = {"gru.tile=2:2:2:1:2", "gru.tile=2:4:2:1:2",
                                   "gru.tile=1:2:1:2:2"};
    test_retune(shapes[_i]);
    gru_case(0, 129, 33, 65, 1);
    gru_case(0, 200, 68, 36, 0);
    gru_case_at(0, 131, 64, 96, 1, 1);
}
END_TEST

START_TEST(hidden_above_work_group_limit) {
    gru_case(_i, 2, 64, 1536, 1);
    gru_case(_i, 1, 16, 2048, 1);
}
END_TEST

/* Reads "name count values..." lines of tests/data/gru_golden.txt. */
static float *read_vec(FILE *f, const char *name, size_t *n) {
    char got[32];
    ck_assert_msg(fscanf(f, "%31s %zu", got, n) == 2 && !strcmp(got, name),
                  "golden file: expected %s, got %s", name, got);
    float *v = test_floats(*n);
    for (size_t i = 0; i < *n; i++) ck_assert(fscanf(f, "%f", &v[i]) == 1);
    return v;
}

START_TEST(matches_pytorch_grucell) {
    char path[2048];
    snprintf(path, sizeof path, "%s/tests/data/gru_golden.txt", getenv("OCLML_TEST_SRCDIR"));
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char line[256];
    ck_assert(fgets(line, sizeof line, f) != NULL); /* header comment */
    int cases = 0;
    size_t B, I, D;
    int bias;
    while (fscanf(f, " case %zu %zu %zu %d", &B, &I, &D, &bias) == 4) {
        size_t n;
        float *x = read_vec(f, "x", &n), *h = read_vec(f, "h", &n), *wi = read_vec(f, "w_ih", &n);
        float *wh = read_vec(f, "w_hh", &n), *bi = NULL, *bh = NULL;
        if (bias) {
            bi = read_vec(f, "b_ih", &n);
            bh = read_vec(f, "b_hh", &n);
        }
        float *want = read_vec(f, "h_new", &n), *out = test_floats(B * D);
        size_t xs[2] = {B, I}, hs[2] = {B, D}, wis[2] = {3 * D, I}, whs[2] = {3 * D, D}, bs = 3 * D;
        oclml_tensor *X = test_tensor_from(2, xs, x), *H = test_tensor_from(2, hs, h);
        oclml_tensor *WI = test_tensor_from(2, wis, wi), *WH = test_tensor_from(2, whs, wh),
                     *HN = test_tensor(2, hs);
        oclml_tensor *BI = bias ? test_tensor_from(1, &bs, bi) : NULL,
                     *BH = bias ? test_tensor_from(1, &bs, bh) : NULL;
        ASSERT_OK(oclml_gru_step(T, OCLML_GRU_TORCH, X, H, WI, WH, BI, BH, HN));
        test_read(HN, out, B * D);
        double *ref = test_doubles(B * D);
        for (size_t i = 0; i < B * D; i++) ref[i] = want[i];
        char what[64];
        snprintf(what, sizeof what, "GRUCell golden B%zu I%zu D%zu", B, I, D);
        test_assert_close(what, out, ref, B * D, TOL_GEMM);
        oclml_tensor *all[] = {X, H, WI, WH, HN, BI, BH};
        for (int i = 0; i < 7; i++)
            if (all[i]) oclml_tensor_destroy(all[i]);
        void *mem[] = {x, h, wi, wh, bi, bh, want, out, ref};
        for (int i = 0; i < 9; i++) free(mem[i]);
        cases++;
    }
    fclose(f);
    ck_assert_int_ge(cases, 5);
}
END_TEST

/* The sequence op against the reference stepped T times (each step from the reference's own
 * previous state, rounded to float as the device stores it). */
static void sequence_case(int cho, size_t T_, size_t B, size_t I, size_t D) {
    size_t xs[3] = {T_, B, I}, hs0[2] = {B, D}, hss[3] = {T_, B, D}, wis[2] = {3 * D, I},
           whs[2] = {3 * D, D}, bs = 3 * D;
    float sc = 1.0f / sqrtf((float)D);
    float *x = test_floats(T_ * B * I), *h0 = test_floats(B * D), *wi = test_floats(3 * D * I),
          *wh = test_floats(3 * D * D);
    float *bi = test_floats(3 * D), *bh = test_floats(3 * D), *out = test_floats(T_ * B * D),
          *hprev = test_floats(B * D);
    test_random(x, T_ * B * I, -1, 1);
    test_random(h0, B * D, -1, 1);
    test_random(wi, 3 * D * I, -sc, sc);
    test_random(wh, 3 * D * D, -sc, sc);
    test_random(bi, 3 * D, -sc, sc);
    test_random(bh, 3 * D, -sc, sc);
    oclml_tensor *X = test_tensor_from(3, xs, x), *H0 = test_tensor_from(2, hs0, h0),
                 *WI = test_tensor_from(2, wis, wi);
    oclml_tensor *WH = test_tensor_from(2, whs, wh), *BI = test_tensor_from(1, &bs, bi),
                 *BH = test_tensor_from(1, &bs, bh);
    oclml_tensor *HS = test_tensor(3, hss);
    ASSERT_OK(oclml_gru_sequence(T, cho, X, H0, WI, WH, BI, BH, HS));
    test_read(HS, out, T_ * B * D);
    double *ref = test_doubles(T_ * B * D);
    for (size_t t = 0; t < T_; t++) {
        const float *hp = h0;
        if (t) {
            for (size_t i = 0; i < B * D; i++) hprev[i] = (float)ref[(t - 1) * B * D + i];
            hp = hprev;
        }
        ref_gru_step(cho, B, I, D, x + t * B * I, hp, wi, wh, bi, bh, ref + t * B * D);
    }
    char what[80];
    snprintf(what, sizeof what, "gru sequence %s T%zu B%zu I%zu D%zu", cho ? "cho" : "torch", T_, B,
             I, D);
    assert_close_to_terms(what, out, ref, h0, B * D, T_ * B * D);
    oclml_tensor *all[] = {X, H0, WI, WH, BI, BH, HS};
    for (int i = 0; i < 7; i++) oclml_tensor_destroy(all[i]);
    void *mem[] = {x, h0, wi, wh, bi, bh, out, hprev, ref};
    for (int i = 0; i < 9; i++) free(mem[i]);
}

START_TEST(sequence_matches_stepping) {
    sequence_case(_i, 6, 3, 5, 33);
    sequence_case(_i, 4, 40, 7, 20);
    sequence_case(_i, 3, 130, 8, 21); /* tiled kernel (TORCH); step t's h at unaligned offsets */
    sequence_case(_i, 2, 128, 8, 12); /* tiled kernel with vector loads at every step */
    sequence_case(_i, 1, 1, 1, 1);
}
END_TEST

/* The step's backward against central differences of the double reference: L = sum(g * h'),
 * dL/d(every input and parameter). */
static double loss(int cho, size_t B, size_t I, size_t D, const float *x, const float *h,
                   const float *wi, const float *wh, const float *bi, const float *bh,
                   const float *g, double *scratch) {
    ref_gru_step(cho, B, I, D, x, h, wi, wh, bi, bh, scratch);
    double l = 0;
    for (size_t i = 0; i < B * D; i++) l += g[i] * scratch[i];
    return l;
}

START_TEST(backward_by_finite_differences) {
    int cho = _i;
    size_t B = 3, I = 4, D = 5;
    size_t n[7] = {B * I, B * D, 3 * D * I, 3 * D * D, 3 * D, 3 * D, B * D}; /* x h wi wh bi bh g */
    float *v[7];
    for (int k = 0; k < 7; k++) {
        v[k] = test_floats(n[k]);
        test_random(v[k], n[k], -0.8f, 0.8f);
    }
    size_t xs[2] = {B, I}, hs[2] = {B, D}, wis[2] = {3 * D, I}, whs[2] = {3 * D, D}, bs = 3 * D;
    oclml_tensor *X = test_tensor_from(2, xs, v[0]), *H = test_tensor_from(2, hs, v[1]);
    oclml_tensor *WI = test_tensor_from(2, wis, v[2]), *WH = test_tensor_from(2, whs, v[3]);
    oclml_tensor *BI = test_tensor_from(1, &bs, v[4]), *BH = test_tensor_from(1, &bs, v[5]),
                 *G = test_tensor_from(2, hs, v[6]);
    oclml_tensor *out[6] = {test_tensor(2, xs),  test_tensor(2, hs),  test_tensor(2, wis),
                            test_tensor(2, whs), test_tensor(1, &bs), test_tensor(1, &bs)};
    ASSERT_OK(oclml_gru_step_backward(T, cho, X, H, WI, WH, BI, BH, G, out[0], out[1], out[2],
                                      out[3], out[4], out[5]));
    double *tmp = test_doubles(B * D);
    static const char *names[6] = {"dx", "dh", "dw_ih", "dw_hh", "db_ih", "db_hh"};
    for (int k = 0; k < 6; k++) {
        float *got = test_floats(n[k]);
        double *fd = test_doubles(n[k]);
        test_read(out[k], got, n[k]);
        for (size_t i = 0; i < n[k]; i++) {
            float keep = v[k][i];
            const float step = 1e-2f;
            v[k][i] = keep + step;
            double lp = loss(cho, B, I, D, v[0], v[1], v[2], v[3], v[4], v[5], v[6], tmp);
            v[k][i] = keep - step;
            double lm = loss(cho, B, I, D, v[0], v[1], v[2], v[3], v[4], v[5], v[6], tmp);
            v[k][i] = keep;
            fd[i] = (lp - lm) / ((double)(keep + step) - (double)(keep - step));
        }
        char what[64];
        snprintf(what, sizeof what, "gru %s backward %s", cho ? "cho" : "torch", names[k]);
        test_assert_close(what, got, fd, n[k], 1e-3);
        free(got);
        free(fd);
    }
    oclml_tensor *all[] = {X, H, WI, WH, BI, BH, G, out[0], out[1], out[2], out[3], out[4], out[5]};
    for (int i = 0; i < 13; i++) oclml_tensor_destroy(all[i]);
    for (int k = 0; k < 7; k++) free(v[k]);
    free(tmp);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t xs[2] = {2, 3}, hs[2] = {2, 4}, wis[2] = {12, 3}, whs[2] = {12, 4}, bad[2] = {11, 4},
           b12 = 12, b5 = 5;
    oclml_tensor *X = test_tensor(2, xs), *H = test_tensor(2, hs), *WI = test_tensor(2, wis),
                 *WH = test_tensor(2, whs);
    oclml_tensor *BAD = test_tensor(2, bad), *B12 = test_tensor(1, &b12), *B5 = test_tensor(1, &b5),
                 *HN = test_tensor(2, hs);
    ASSERT_STATUS(oclml_gru_step(T, OCLML_GRU_TORCH, X, H, WI, BAD, NULL, NULL, HN),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gru_step(T, OCLML_GRU_TORCH, X, H, WI, WH, B5, NULL, HN),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gru_step(T, (oclml_gru_variant)5, X, H, WI, WH, B12, B12, HN),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_gru_step(T, OCLML_GRU_TORCH, X, H, WI, WH, NULL, NULL, H),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_gru_step(T, OCLML_GRU_TORCH, NULL, H, WI, WH, NULL, NULL, HN),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gru_step(T, OCLML_GRU_TORCH, H, X, WI, WH, NULL, NULL, HN),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gru_sequence(T, OCLML_GRU_TORCH, X, H, WI, WH, NULL, NULL, HN),
                  OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gru_sequence(T, OCLML_GRU_TORCH, NULL, H, WI, WH, NULL, NULL, HN),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gru_step_backward(T, OCLML_GRU_TORCH, X, H, WI, WH, NULL, NULL, HN, H, NULL,
                                          NULL, NULL, NULL, NULL),
                  OCLML_ERR_INVALID_SHAPE); /* dx must be [B x I] */
    ASSERT_STATUS(oclml_gru_step_backward(T, OCLML_GRU_TORCH, X, H, WI, WH, B5, NULL, HN, NULL,
                                          NULL, NULL, NULL, NULL, NULL),
                  OCLML_ERR_INVALID_SHAPE);
    float out[8];
    test_read(HN, out, 8);
    for (int i = 0; i < 8; i++) ck_assert(isnan(out[i]));
    oclml_tensor *all[] = {X, H, WI, WH, BAD, B12, B5, HN};
    for (int i = 0; i < 8; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gru");
    TCase *tc = tcase_create("gru");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, small_and_odd_sizes, 0, 2);
    tcase_add_loop_test(tc, hidden_above_work_group_limit, 0, 2);
    tcase_add_loop_test(tc, large_batch_tiled_kernel, 0, 2);
    tcase_add_loop_test(tc, tiled_kernel_shapes, 0, 3);
    tcase_add_test(tc, matches_pytorch_grucell);
    tcase_add_loop_test(tc, sequence_matches_stepping, 0, 2);
    tcase_add_loop_test(tc, backward_by_finite_differences, 0, 2);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
