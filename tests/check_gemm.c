/* GEMM against the double-precision reference on every path the planner can pick (CLBlast,
 * the own tiled kernels on tensor cores where the device has them and on FMAs everywhere, split
 * K, the 16-work-item tile of small devices): sizes 1, 7, 129, 1000 and rectangles, every
 * transpose, alpha and beta, batched, offsets and leading dimensions, skinny rows, accuracy
 * against CLBlast's, the TF32 math mode, and bad input. */
#include "testutil.h"

#include <stdio.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The tensor-core kernel on every device (emulated where the device lacks tensor cores). */
#define TENSOR_CORE_PATH "gemm.own=1 gemm.mma=2 gemm.mma_tile=32:32:8:2:2"

/* The paths, picked through the tuning option, and what the plan must then name. The first
 * QUICK_PATHS are what devices take by default (CLBlast on GPUs without tensor cores, the own
 * kernels on CPUs and small devices, the tensor-core kernel on GPUs with them); the rest are
 * forced variants, swept by make check-sweep. */
static const struct {
    const char *tuning, *plan;
    size_t work_items; /* the work-group size the path needs; smaller devices take the FMA tiles */
} PATHS[] = {
    {"gemm.own=0", "CLBlast", 64},
    {"gemm.own=1", "own", 1},
    /* The tensor-core kernel's layout (both staging layouts, every transpose) on any device:
     * the instruction emulated where the device lacks it; a small tile keeps PoCL quick. */
    {TENSOR_CORE_PATH, "own 3xTF32 tensor cores", 128},
    {"gemm.own=1 gemm.mma=0", "own FMA", 1},
    {"gemm.own=1 gemm.splitk=3", "own", 1},
    {"gemm.own=1 gemm.mma=0 gemm.fma_tile=4:4:4:4:16", "own FMA tiles, tile 16x16x16", 16},
};
#define N_PATHS (int)(sizeof PATHS / sizeof PATHS[0])
#define QUICK_PATHS 3

/* Transposes (a, b) by iteration: the quick tier takes the first two, which between them stage
 * each operand both ways. */
static const int TRANSPOSES[4][2] = {{0, 0}, {1, 1}, {1, 0}, {0, 1}};

/* Switches T to path i and checks that the planner takes it for a 129 x 129 x 129 product.
 * Products of up to 4 rows stay on the path too (not the GEMV kernel, tested on its own). */
static void use_path(int i) {
    char tuning[160];
    snprintf(tuning, sizeof tuning, "%s gemm.gemv=0", PATHS[i].tuning);
    test_retune(tuning);
    char plan[160];
    ASSERT_OK(
        oclml_gemm_plan(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 129, 129, 129, 1, plan, sizeof plan));
    oclml_device_info d;
    ASSERT_OK(oclml_ctx_device_info(T, &d));
    const char *want = d.max_work_group_size >= PATHS[i].work_items ? PATHS[i].plan : "own FMA";
    if (!strstr(plan, want))
        ck_abort_msg("tuning '%s' planned '%s', wanted '%s'", PATHS[i].tuning, plan, want);
}

static const size_t SHAPES[][3] = {
    {1, 1, 1}, {7, 7, 7}, {129, 129, 129}, {7, 129, 33}, {130, 3, 257}};

START_TEST(small_and_odd_all_transposes) {
    use_path(_i / 4);
    int t = _i % 4;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        test_gemm_case(t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], 1.0f, 0.0f);
}
END_TEST

START_TEST(alpha_beta) {
    use_path(_i);
    test_gemm_case(0, 0, 33, 65, 17, 0.7f, 0.0f);
    test_gemm_case(1, 0, 33, 65, 17, -1.5f, -1.3f);
    test_gemm_case(0, 1, 129, 7, 64, 2.0f, 1.0f);
}
END_TEST

START_TEST(size_1000_all_transposes) {
    use_path(_i / 4);
    int t = _i % 4;
    /* Odd sizes of a few hundred (many blocks, edges in every dimension); 1000^3 on CLBlast and
     * the own kernels in the sweep, where CPUs have the time. */
    if (test_sweep() && _i / 4 < 2)
        test_gemm_case(t & 1, t >> 1, 1000, 1000, 1000, 1.0f, t == 3 ? 0.5f : 0.0f);
    else
        test_gemm_case(t & 1, t >> 1, 389, 411, 397, 1.0f, t == 3 ? 0.5f : 0.0f);
}
END_TEST

/* C[i] = alpha A[i] op(B) + beta C[i] over `batch` entries of A and C, one B shared by all
 * (oclml_gemm_batched), against the reference. */
static void batched_case(int tb, size_t batch, size_t m, size_t n, size_t k, float alpha,
                         float beta) {
    size_t ash[3] = {batch, m, k}, bsh[2] = {tb ? n : k, tb ? k : n}, csh[3] = {batch, m, n};
    float *a = test_floats(batch * m * k), *b = test_floats(n * k), *c = test_floats(batch * m * n);
    test_random(a, batch * m * k, -1, 1);
    test_random(b, n * k, -1, 1);
    test_random(c, batch * m * n, -1, 1);
    oclml_tensor *A = test_tensor_from(3, ash, a), *B = test_tensor_from(2, bsh, b);
    oclml_tensor *C = test_tensor_from(3, csh, c);
    ASSERT_OK(oclml_gemm_batched(T, OCLML_NO_TRANS, tb ? OCLML_TRANS : OCLML_NO_TRANS, alpha, A, B,
                                 beta, C));
    double *ref = test_doubles(batch * m * n);
    for (size_t i = 0; i < batch; i++)
        ref_gemm(0, tb, m, n, k, alpha, a + i * m * k, b, beta, c + i * m * n, ref + i * m * n);
    float *out = test_floats(batch * m * n);
    test_read(C, out, batch * m * n);
    test_assert_close("batched gemm", out, ref, batch * m * n, TOL_GEMM);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
    free(a);
    free(b);
    free(c);
    free(out);
    free(ref);
}

/* B shared by every batch entry and transposed: C[i] = 1.25 A[i] B^T - 0.5 C[i]. */
START_TEST(batched) {
    use_path(_i);
    batched_case(1, 3, 17, 9, 31, 1.25f, -0.5f);
}
END_TEST

/* Views: operands at odd offsets inside larger buffers (leading dimensions wider than the view
 * are not expressible through tensors, so the offsets exercise the unaligned loads), and skinny
 * products of 1, 5 and 64 rows against a wide matrix (the small-M plans and split K). */
START_TEST(views_and_skinny) {
    use_path(_i);
    size_t big[1] = {6000}, m = 37, n = 29, k = 61;
    float *host = test_floats(6000);
    test_random(host, 6000, -1, 1);
    oclml_tensor *pool = test_tensor_from(1, big, host);
    size_t ash[2] = {m, k}, bsh[2] = {k, n}, csh[2] = {m, n};
    cl_mem buf;
    size_t base;
    ASSERT_OK(oclml_tensor_buffer(pool, &buf, &base));
    oclml_tensor *A, *B, *C;
    ASSERT_OK(oclml_tensor_wrap(T, buf, base + 4 * 3, 2, ash, &A));
    ASSERT_OK(oclml_tensor_wrap(T, buf, base + 4 * (3 + m * k + 1), 2, bsh, &B));
    ASSERT_OK(oclml_tensor_wrap(T, buf, base + 4 * (3 + m * k + 1 + k * n + 2), 2, csh, &C));
    ASSERT_OK(oclml_gemm(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, A, B, 0.5f, C));
    double *ref = test_doubles(m * n);
    ref_gemm(0, 0, m, n, k, 1.0, host + 3, host + 3 + m * k + 1, 0.5,
             host + 3 + m * k + 1 + k * n + 2, ref);
    float *out = test_floats(m * n);
    test_read(C, out, m * n);
    test_assert_close("gemm on offset views", out, ref, m * n, TOL_GEMM);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
    oclml_tensor_destroy(pool);
    free(host);
    free(out);
    free(ref);
    test_gemm_case(0, 0, 1, 515, 1030, 1.0f, 0.0f);
    test_gemm_case(0, 1, 5, 300, 700, 1.0f, 0.0f);
    test_gemm_case(1, 1, 64, 260, 1100, 1.0f, 1.0f);
}
END_TEST

/* The GEMV kernel (products of 1 to 4 rows): both layouts of B, float4 and scalar reads (aligned
 * and odd leading dimensions), K shorter and longer than a work-group's slices, alpha and beta,
 * a batch with a shared B; the sweep adds the transposed A and every row count. */
static const struct {
    int ta, tb;
    size_t m, n, k;
    float alpha, beta;
} GEMV_CASES[] = {
    {0, 0, 1, 515, 1030, 1.0f, 0.0f}, {0, 1, 1, 256, 512, 1.0f, 0.0f},
    {0, 1, 3, 129, 701, 0.5f, -1.5f}, {0, 0, 4, 260, 3, 1.0f, 1.0f},
    {0, 0, 2, 7, 300, -2.0f, 0.0f},   {1, 1, 1, 1, 1, 1.0f, 0.0f},
    {1, 0, 2, 33, 17, 1.0f, 0.0f},    {1, 1, 4, 65, 129, 1.0f, 0.5f},
    {0, 1, 2, 1000, 4, 1.0f, 0.0f},   {0, 0, 3, 100, 1000, 1.0f, 0.0f},
};
#define N_GEMV_QUICK 6 /* through the one-work-item group (1 x 1 x 1, transposed) */

/* The GEMV cases from first to end, planned as GEMV, against the reference. */
static void gemv_cases(size_t first, size_t end) {
    for (size_t i = first; i < end; i++) {
        const int ta = GEMV_CASES[i].ta, tb = GEMV_CASES[i].tb;
        const size_t m = GEMV_CASES[i].m, n = GEMV_CASES[i].n, k = GEMV_CASES[i].k;
        char plan[160];
        ASSERT_OK(oclml_gemm_plan(T, ta ? OCLML_TRANS : OCLML_NO_TRANS,
                                  tb ? OCLML_TRANS : OCLML_NO_TRANS, m, n, k, 1, plan,
                                  sizeof plan));
        ck_assert_msg(strstr(plan, "own GEMV"), "%zu x %zu x %zu planned '%s'", m, n, k, plan);
        test_gemm_case(ta, tb, m, n, k, GEMV_CASES[i].alpha, GEMV_CASES[i].beta);
    }
}

START_TEST(gemv_few_rows) {
    const size_t all = sizeof GEMV_CASES / sizeof GEMV_CASES[0];
    /* The device's own groups (on CPUs one group shape at every size), then the GPUs' groups,
     * narrowed to short extents: the first two cases (both layouts of B) in the quick tier. */
    test_retune("gemm.gemv=1");
    gemv_cases(0, test_sweep() ? all : N_GEMV_QUICK);
    test_retune("gemm.gemv=1 cpu.layout=0");
    gemv_cases(0, test_sweep() ? all : 2);
    /* K split over work-groups and summed by the finishing kernel (forced: a 2-unit device
     * never needs it), both layouts of B. */
    test_retune("gemm.gemv=1 gemm.gemv_tile=4:16:3");
    for (int tb = 0; tb < 2; tb++) {
        char plan[160];
        ASSERT_OK(oclml_gemm_plan(T, OCLML_NO_TRANS, tb ? OCLML_TRANS : OCLML_NO_TRANS, 2, 45, 333,
                                  1, plan, sizeof plan));
        ck_assert_msg(strstr(plan, "3 K splits"), "planned '%s'", plan);
        test_gemm_case(0, tb, 2, 45, 333, 1.5f, 0.5f);
    }
    /* A batch of single rows against one B, and 5 rows past the kernel. */
    batched_case(0, 3, 1, 70, 45, 1.0f, 0.25f);
    char plan[160];
    ASSERT_OK(oclml_gemm_plan(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 5, 70, 45, 1, plan, sizeof plan));
    ck_assert_msg(!strstr(plan, "GEMV"), "5 rows planned '%s'", plan);
}
END_TEST

/* Max error relative to sum |a_ik b_kj| (each output's rounding scale) of C = A B, 600^3. */
static double path_error(const float *a, const float *b, const double *ref, const double *scale,
                         size_t n) {
    size_t shape[2] = {n, n};
    oclml_tensor *A = test_tensor_from(2, shape, a), *B = test_tensor_from(2, shape, b),
                 *C = test_tensor(2, shape);
    ASSERT_OK(oclml_gemm(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, A, B, 0.0f, C));
    float *out = test_floats(n * n);
    test_read(C, out, n * n);
    double worst = 0;
    for (size_t i = 0; i < n * n; i++) worst = fmax(worst, fabs(out[i] - ref[i]) / scale[i]);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
    free(out);
    return worst;
}

static void reference_and_scale(const float *a, const float *b, size_t n, double *ref,
                                double *scale) {
    ref_gemm(0, 0, n, n, n, 1.0, a, b, 0.0, NULL, ref);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (size_t p = 0; p < n; p++) s += fabs((double)a[i * n + p] * b[p * n + j]);
            scale[i * n + j] = s > 0 ? s : 1;
        }
}

/* The own kernels keep fp32 accuracy (the bar: no worse than twice CLBlast's error on
 * the same inputs; on tensor cores this is the 3xTF32 split at work). */
START_TEST(accuracy_matches_clblast) {
    size_t n = 600;
    float *a = test_floats(n * n), *b = test_floats(n * n);
    test_random(a, n * n, -1, 1);
    test_random(b, n * n, -1, 1);
    double *ref = test_doubles(n * n), *scale = test_doubles(n * n);
    reference_and_scale(a, b, n, ref, scale);
    test_retune("gemm.own=0");
    double clblast = path_error(a, b, ref, scale, n);
    test_retune("gemm.own=1");
    double own = path_error(a, b, ref, scale, n);
    ck_assert_msg(own <= 2 * clblast + 1e-9, "own GEMM error %.3g, CLBlast's %.3g", own, clblast);
    test_retune(TENSOR_CORE_PATH);
    double split = path_error(a, b, ref, scale, n);
    ck_assert_msg(split <= 2 * clblast + 1e-9, "3xTF32 GEMM error %.3g, CLBlast's %.3g", split,
                  clblast);
    ck_assert_msg(clblast < 1e-5, "CLBlast error %.3g", clblast);
    free(a);
    free(b);
    free(ref);
    free(scale);
}
END_TEST

/* The TF32 math mode is opt-in: off by default, settable, and within TF32's ~1e-3 on the
 * tensor-core kernel (where it visibly loses the fp32 digits); FP32 again restores them. */
START_TEST(tf32_math_mode) {
    size_t n = 300;
    float *a = test_floats(n * n), *b = test_floats(n * n);
    test_random(a, n * n, -1, 1);
    test_random(b, n * n, -1, 1);
    double *ref = test_doubles(n * n), *scale = test_doubles(n * n);
    reference_and_scale(a, b, n, ref, scale);
    test_retune(TENSOR_CORE_PATH);
    oclml_math_mode mode = OCLML_MATH_TF32;
    ASSERT_OK(oclml_ctx_math_mode(T, &mode));
    ck_assert_int_eq(mode, OCLML_MATH_FP32);
    ASSERT_OK(oclml_ctx_set_math_mode(T, OCLML_MATH_TF32));
    ASSERT_OK(oclml_ctx_math_mode(T, &mode));
    ck_assert_int_eq(mode, OCLML_MATH_TF32);
    double tf32 = path_error(a, b, ref, scale, n);
    char plan[160];
    ASSERT_OK(oclml_gemm_plan(T, OCLML_NO_TRANS, OCLML_NO_TRANS, n, n, n, 1, plan, sizeof plan));
    /* Devices too small for the tensor-core kernel's work-groups compute in fp32 either way. */
    bool tensor_cores = strstr(plan, "tensor cores") != NULL;
    ck_assert_msg(tf32 < 4e-3 && (tf32 > 1e-5 || !tensor_cores), "TF32 mode error %.3g (%s)", tf32,
                  plan);
    ASSERT_OK(oclml_ctx_set_math_mode(T, OCLML_MATH_FP32));
    double fp32 = path_error(a, b, ref, scale, n);
    ck_assert_msg(fp32 < 1e-5, "FP32 mode error %.3g after TF32", fp32);
    ASSERT_STATUS(oclml_ctx_set_math_mode(T, (oclml_math_mode)7), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_ctx_math_mode(T, NULL), OCLML_ERR_NULL_POINTER);
    free(a);
    free(b);
    free(ref);
    free(scale);
}
END_TEST

/* The tensor-core kernel at its default tile (128 x 128 x 16, 8 warps; emulated where the device
 * lacks tensor cores) on ragged edges and aligned float4 loads in every transpose, and with K
 * split over work-groups. */
START_TEST(tensor_core_default_tile_and_split) {
    const int ta = TRANSPOSES[_i][0], tb = TRANSPOSES[_i][1];
    test_retune("gemm.own=1 gemm.mma=2");
    /* No tile wider than the columns need: 64 columns (a convolution's 8x8 planes, one product
     * an image) never take the 128-column tile, whatever the compute units. */
    char plan[160];
    ASSERT_OK(oclml_gemm_plan(T, ta ? OCLML_TRANS : OCLML_NO_TRANS,
                              tb ? OCLML_TRANS : OCLML_NO_TRANS, 256, 64, 64, 2, plan,
                              sizeof plan));
    ck_assert_msg(!strstr(plan, "tile 128x128"), "256 x 64 x 64, 2 batches: %s", plan);
    /* A long K on fewer blocks than compute units (a weight gradient): the largest tile with K
     * splits, not smaller tiles; K long enough for splits of 8 tiles of 16 to reach every unit. */
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    const size_t long_k = 128 * (info.compute_units > 4 ? info.compute_units : 4);
    ASSERT_OK(oclml_gemm_plan(T, ta ? OCLML_TRANS : OCLML_NO_TRANS,
                              tb ? OCLML_TRANS : OCLML_NO_TRANS, 128, 128, long_k, 1, plan,
                              sizeof plan));
    if (info.compute_units >= 2 && info.max_work_group_size >= 256)
        ck_assert_msg(strstr(plan, "tile 128x128") && strstr(plan, "K splits"),
                      "128 x 128 x %zu on %u compute units: %s", long_k, info.compute_units, plan);
    test_gemm_case(ta, tb, 128, 128, 512, 1.0f, 0.0f); /* split K on a 2-unit CPU */
    test_gemm_case(ta, tb, 200, 150, 70, 1.0f, 0.0f);
    test_gemm_case(ta, tb, 256, 128, 64, 1.0f, 0.5f);
    test_retune("gemm.own=1 gemm.mma=2 gemm.splitk=3 gemm.mma_tile=64:64:16:2:2");
    test_gemm_case(ta, tb, 64, 96, 300, -1.0f, 0.25f);
}
END_TEST

/* The tensor-core kernel's asynchronous copy pipeline (emulated copies and instruction where the
 * device lacks them) on float4-aligned operands in every transpose: each K depth's swizzle (8,
 * 16, 32), 2 to 4 stages, fewer tiles than stages, ragged edges, beta and split K. */
START_TEST(tensor_core_async_stages) {
    /* local: the stages' buffers and the emulation's exchange buffers, in bytes (stages (BM +
     * BN) BK + warps 192 floats): the plan has stages only where the device gives that much.
     * paired: only where both operands are transposed or neither (between them every operand
     * is staged both ways; each combination is a program PoCL compiles for minutes). */
    static const struct {
        const char *tuning;
        size_t m, n, k, local;
        bool paired,
            quick; /* quick: a GPU's default tile and stages, and fewer tiles than stages */
    } CASES[] = {
        {"gemm.own=1 gemm.mma=2 gemm.stages=3 gemm.mma_tile=128:128:16:2:4", 200, 152, 72,
         4 * (3 * 256 * 16 + 8 * 192), false, false},
        {"gemm.own=1 gemm.mma=2 gemm.stages=2 gemm.mma_tile=64:64:32:2:2 gemm.splitk=3", 100, 68,
         420, 4 * (2 * 128 * 32 + 4 * 192), false, false},
        {"gemm.own=1 gemm.mma=2 gemm.stages=4 gemm.mma_tile=64:128:16:2:2", 76, 140, 40,
         4 * (4 * 192 * 16 + 4 * 192), true, true},
        {"gemm.own=1 gemm.mma=2 gemm.stages=2 gemm.mma_tile=64:128:32:2:2", 68, 132, 100,
         4 * (2 * 192 * 32 + 4 * 192), true, false},
        {"gemm.own=1 gemm.mma=2 gemm.stages=4 gemm.mma_tile=32:32:8:2:2", 36, 64, 44,
         4 * (4 * 64 * 8 + 4 * 192), false, true},
        {"gemm.own=1 gemm.mma=2 gemm.stages=4 gemm.mma_tile=32:32:8:2:2", 64, 32, 8,
         4 * (4 * 64 * 8 + 4 * 192), false, true},
    };
    const int ta = TRANSPOSES[_i][0], tb = TRANSPOSES[_i][1];
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        if ((CASES[c].paired && ta != tb) || (!CASES[c].quick && !test_sweep())) continue;
        test_retune(CASES[c].tuning);
        char plan[160];
        ASSERT_OK(oclml_gemm_plan(T, ta ? OCLML_TRANS : OCLML_NO_TRANS,
                                  tb ? OCLML_TRANS : OCLML_NO_TRANS, CASES[c].m, CASES[c].n,
                                  CASES[c].k, 1, plan, sizeof plan));
        oclml_device_info d;
        ASSERT_OK(oclml_ctx_device_info(T, &d));
        if (d.max_work_group_size >= 128 && d.local_mem_bytes >= CASES[c].local &&
            !strstr(plan, "async copy stages"))
            ck_abort_msg("'%s' planned '%s'", CASES[c].tuning, plan);
        test_gemm_case(ta, tb, CASES[c].m, CASES[c].n, CASES[c].k, 1.0f, c == 1 ? 0.5f : 0.0f);
    }
}
END_TEST

/* out against the double reference with IEEE semantics: NaN where it is NaN, the same infinity
 * where it is infinite as a float, else within tol (relative, plus tol absolute). */
static void assert_ieee_close(const float *out, const double *ref, size_t n, double tol) {
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i]))
            ck_assert_msg(isnan(out[i]), "C[%zu] = %g, NaN expected", i, out[i]);
        else if (isinf((float)ref[i]))
            ck_assert_msg(out[i] == (float)ref[i], "C[%zu] = %g, %g expected", i, out[i], ref[i]);
        else
            ck_assert_msg(fabs(out[i] - ref[i]) <= tol * (fabs(ref[i]) + 1),
                          "C[%zu] = %.9g, %.9g expected", i, out[i], ref[i]);
    }
}

/* The last wave's split product: the same bits on a second run, and IEEE results where an input
 * is NaN or infinite (each split recomputes its own NaN partial sums in fp32): a NaN in row 0
 * and an infinity in row 1, both inside the first K split, spread over every column, the last
 * wave's included. */
static void tail_repeatable_and_ieee(int ta, int tb, size_t m, size_t n, size_t k) {
    size_t ashape[2] = {ta ? k : m, ta ? m : k}, bshape[2] = {tb ? n : k, tb ? k : n},
           cshape[2] = {m, n};
    float *a = test_floats(m * k), *b = test_floats(k * n), *out[2];
    test_random(a, m * k, -1, 1);
    test_random(b, k * n, 0.25, 1); /* no zero: inf * B stays inf */
    a[ta ? 3 * m + 0 : 0 * k + 3] = NAN;
    a[ta ? 5 * m + 1 : 1 * k + 5] = INFINITY;
    oclml_tensor *A = test_tensor_from(2, ashape, a), *B = test_tensor_from(2, bshape, b),
                 *C = test_tensor(2, cshape);
    double *ref = test_doubles(m * n);
    ref_gemm(ta, tb, m, n, k, 1.0, a, b, 0.0, NULL, ref);
    for (int run = 0; run < 2; run++) {
        ASSERT_OK(oclml_gemm(T, ta, tb, 1.0f, A, B, 0.0f, C));
        out[run] = test_floats(m * n);
        test_read(C, out[run], m * n);
    }
    assert_ieee_close(out[0], ref, m * n, TOL_GEMM);
    ck_assert_msg(!memcmp(out[0], out[1], m * n * sizeof(float)), "a second run differs");
    ck_assert(isnan(out[0][n - 1]) && isinf(out[0][n + n - 1]));
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
    free(a);
    free(b);
    free(out[0]);
    free(out[1]);
    free(ref);
}

/* The last wave split over K (gemm.wave_warps: a compute unit running one 4-warp block here, so
 * the blocks come in waves of as many as the device has compute units; gemm.tail_splits forces
 * the split of any partly filled last wave): one more column of blocks than a wave, on block rows
 * that do not divide it, so that the trailing blocks of the swizzled order form that rectangle.
 * Every transpose, ragged edges, beta (the split's sum applies it), NaN and infinity, the same
 * bits run after run. */
START_TEST(tensor_core_last_wave_split) {
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    const size_t units = info.compute_units, rows = units == 2 ? 3 : 2;
    const size_t m = 32 * rows - 5, n = 32 * (units + 1) - 3, k = 117;
    const int ta = _i & 1, tb = _i >> 1;
    test_retune(TENSOR_CORE_PATH " gemm.wave_warps=4 gemm.tail_splits=3");
    char plan[200];
    ASSERT_OK(oclml_gemm_plan(T, ta ? OCLML_TRANS : OCLML_NO_TRANS,
                              tb ? OCLML_TRANS : OCLML_NO_TRANS, m, n, k, 1, plan, sizeof plan));
    if (units >= 2 && info.max_work_group_size >= 128) {
        char want[64];
        snprintf(want, sizeof want, "last wave's %zu blocks in 3 K splits", rows);
        ck_assert_msg(strstr(plan, want), "%zu x %zu x %zu on %zu units: %s", m, n, k, units, plan);
    }
    test_gemm_case(ta, tb, m, n, k, 1.0f, 0.0f);
    test_gemm_case(ta, tb, m, n, k, -0.5f, 0.75f);
    tail_repeatable_and_ieee(ta, tb, m, n, k);
    /* One column of blocks with more block rows than slots (up to the swizzle's 8 rows): the
     * last wave rounded to whole columns would be the whole product, leaving the main launch
     * nothing; no split, even forced, and beta applied once. */
    if (units >= 2 && units + 1 <= 8) {
        const size_t tall = 32 * (units + 1) - 5;
        ASSERT_OK(oclml_gemm_plan(T, ta ? OCLML_TRANS : OCLML_NO_TRANS,
                                  tb ? OCLML_TRANS : OCLML_NO_TRANS, tall, 29, k, 1, plan,
                                  sizeof plan));
        ck_assert_msg(!strstr(plan, "last wave"), "%zu x 29 x %zu: %s", tall, k, plan);
        test_gemm_case(ta, tb, tall, 29, k, 0.5f, 0.75f);
    }
    /* Unforced, no split: 15 K tiles are too few for two splits of SPLIT_MIN_TILES (8). */
    test_retune(TENSOR_CORE_PATH " gemm.wave_warps=4");
    ASSERT_OK(oclml_gemm_plan(T, ta ? OCLML_TRANS : OCLML_NO_TRANS,
                              tb ? OCLML_TRANS : OCLML_NO_TRANS, m, n, k, 1, plan, sizeof plan));
    ck_assert_msg(!strstr(plan, "last wave"), "%s", plan);
}
END_TEST

/* IEEE semantics on every path: inf * 1 = inf, inf * 0 = NaN, NaN spreads along its row, FLT_MAX
 * stays finite (the 3xTF32 split alone would turn all of these into NaN: the kernel recomputes
 * such outputs in fp32). */
START_TEST(inf_and_nan_follow_ieee) {
    use_path(_i);
    size_t m = 5, n = 6, k = 7, ash[2] = {m, k}, bsh[2] = {k, n}, csh[2] = {m, n};
    float a[5 * 7], b[7 * 6];
    test_random(a, m * k, -1, 1);
    static const float B_VALUES[4] = {-1.0f, 0.0f, 0.5f, 1.0f}; /* exact in tf32 */
    for (size_t i = 0; i < k * n; i++) b[i] = B_VALUES[(i * 7 + 3) % 4];
    b[0 * n + 1] = 0.0f;
    b[0 * n + 2] = 1.0f;
    a[0 * k + 0] = INFINITY; /* row 0: inf where B[0][j] != 0, NaN where it is 0 */
    a[1 * k + 2] = NAN;      /* row 1: NaN */
    for (size_t j = 0; j < k; j++) a[2 * k + j] = 0.0f;
    a[2 * k + 3] = FLT_MAX; /* row 2: FLT_MAX * B[3][j], exact */
    oclml_tensor *A = test_tensor_from(2, ash, a), *B = test_tensor_from(2, bsh, b),
                 *C = test_tensor(2, csh);
    ASSERT_OK(oclml_gemm(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, A, B, 0.0f, C));
    float out[5 * 6];
    test_read(C, out, m * n);
    double ref[5 * 6];
    ref_gemm(0, 0, m, n, k, 1.0, a, b, 0.0, NULL, ref);
    assert_ieee_close(out, ref, m * n, 1e-5);
    ck_assert(isinf(out[0 * n + 2]) && isnan(out[0 * n + 1]) && isnan(out[1 * n + 4]));
    ck_assert(out[2 * n + 0] == FLT_MAX * b[3 * n + 0] || b[3 * n + 0] == 0.0f);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
}
END_TEST

START_TEST(bad_input_touches_nothing) {
    size_t s23[2] = {2, 3}, s34[2] = {3, 4}, s24[2] = {2, 4}, s25[2] = {2, 5}, v[1] = {4};
    size_t b3[3] = {2, 2, 4}, b4[3] = {3, 3, 4};
    oclml_tensor *A = test_tensor(2, s23), *B = test_tensor(2, s34), *C = test_tensor(2, s25);
    oclml_tensor *V = test_tensor(1, v), *C3 = test_tensor(3, b3), *B3 = test_tensor(3, b4);
    ASSERT_STATUS(oclml_gemm(T, 0, 0, 1, A, B, 0, C), OCLML_ERR_INVALID_SHAPE);
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(T), "do not chain"));
    ASSERT_STATUS(oclml_gemm(T, 1, 0, 1, A, B, 0, C), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm(T, 0, 0, 1, V, B, 0, C), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm(T, 2, 0, 1, A, B, 0, C), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_gemm(T, 0, 0, 1, NULL, B, 0, C), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gemm(NULL, 0, 0, 1, A, B, 0, C), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gemm(T, 0, 0, 1, A, B, 0, C3), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm_batched(T, 0, 0, 1, A, B3, 0, C3), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm_batched(T, 0, 0, 1, A, B, 0, C), OCLML_ERR_INVALID_SHAPE);
    char plan[64];
    ASSERT_STATUS(oclml_gemm_plan(NULL, 0, 0, 2, 2, 2, 1, plan, sizeof plan),
                  OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gemm_plan(T, 0, 0, 2, 2, 2, 1, NULL, sizeof plan), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gemm_plan(T, 0, 0, 2, 2, 2, 1, plan, 0), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_gemm_plan(T, 2, 0, 2, 2, 2, 1, plan, sizeof plan),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_gemm_plan(T, 0, 0, 0, 2, 2, 1, plan, sizeof plan), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_gemm_plan(T, 0, 0, 2, 2, 2, 0, plan, sizeof plan), OCLML_ERR_INVALID_SHAPE);
    float out[10];
    test_read(C, out, 10);
    for (int i = 0; i < 10; i++) ck_assert(isnan(out[i]));
    /* The happy path on the same tensors works: 2x3 * 3x4 into a 2x4. */
    oclml_tensor *C24 = test_tensor(2, s24);
    float a[6], b[12];
    test_random(a, 6, -1, 1);
    test_random(b, 12, -1, 1);
    ASSERT_OK(oclml_tensor_write(A, a, 6));
    ASSERT_OK(oclml_tensor_write(B, b, 12));
    ASSERT_OK(oclml_gemm(T, 0, 0, 1, A, B, 0, C24));
    oclml_tensor *all[] = {A, B, C, V, C3, B3, C24};
    for (int i = 0; i < 7; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    const int paths = test_tier(QUICK_PATHS, N_PATHS);
    tcase_add_loop_test(tc, small_and_odd_all_transposes, 0, 4 * paths);
    tcase_add_loop_test(tc, alpha_beta, 0, paths);
    tcase_add_loop_test(tc, size_1000_all_transposes, 0, 4 * paths);
    tcase_add_loop_test(tc, batched, 0, paths);
    tcase_add_loop_test(tc, views_and_skinny, 0, paths);
    tcase_add_test(tc, accuracy_matches_clblast);
    tcase_add_loop_test(tc, tensor_core_default_tile_and_split, 0, test_tier(2, 4));
    tcase_add_loop_test(tc, tensor_core_async_stages, 0, test_tier(1, 4));
    tcase_add_loop_test(tc, tensor_core_last_wave_split, 0, 4);
    tcase_add_loop_test(tc, inf_and_nan_follow_ieee, 0, paths);
    tcase_add_test(tc, tf32_math_mode);
    tcase_add_test(tc, gemv_few_rows);
    tcase_add_test(tc, bad_input_touches_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
