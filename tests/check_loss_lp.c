/* Cross-entropy on bf16 and fp16 logits and dlogits (fp32 math, dlogits rounded once; targets,
 * class weights, dloss and the loss fp32): the register path with float4 and scalar access,
 * registers plus local memory and the chunked path on a GPT-2 row of 50257 classes, probability
 * targets on both paths, in place, the dtypes mixed; against ref_xent in double from the logits
 * as their dtype holds them, the loss within fp32's error and each dlogit within its dtype's unit
 * roundoff (tolerance.h); NaN rows; refusals touch nothing. */
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MEAN OCLML_LOSS_MEAN
#define SUM OCLML_LOSS_SUM
#define NONE OCLML_LOSS_NONE
#define BF OCLML_BFLOAT16
#define FP OCLML_FLOAT16
#define F32 OCLML_FLOAT32

typedef struct xent_case {
    size_t rows, cols;
    int probs;
    oclml_loss_reduction reduction;
    float eps;
    int weighted, with_dloss;
    oclml_dtype x, dx;
    int in_place;       /* dlogits = logits */
    const char *tuning; /* the long-row path: NULL the device's default */
} xent_case;

/* Registers (float4: 64 columns; scalar: 37 and 1000), registers plus local memory and chunks
 * on GPT-2's 50257 classes (odd: scalar), probabilities on the chunked path (their only long
 * path), in place on the register and chunked paths. Reductions other than NONE get no NaN row. */
static const xent_case CASES[] = {
    {7, 64, 0, NONE, 0.0f, 0, 0, BF, BF, 0, NULL},
    {5, 37, 0, MEAN, 0.1f, 1, 1, FP, F32, 0, NULL},
    {4, 1000, 1, SUM, 0.0f, 0, 1, BF, FP, 0, NULL},
    {3, 40003, 1, NONE, 0.1f, 0, 0, FP, FP, 0, NULL},
    {3, 50257, 0, NONE, 0.1f, 0, 0, BF, BF, 0, NULL},
    {3, 50257, 0, MEAN, 0.0f, 1, 1, BF, BF, 0, "loss.xent_long=0"},
    {3, 50257, 0, NONE, 0.0f, 0, 0, FP, BF, 0, "loss.xent_long=1"},
    {6, 64, 0, NONE, 0.0f, 0, 0, BF, BF, 1, NULL},
    {3, 50257, 0, SUM, 0.0f, 0, 0, FP, FP, 1, "loss.xent_long=0"},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

static const char *const RED[] = {"mean", "sum", "none"};

START_TEST(cross_entropy_matches_reference) {
    const xent_case *c = &CASES[_i];
    if (c->tuning) test_retune(c->tuning);
    const size_t rows = c->rows, cols = c->cols, n = rows * cols, shape[2] = {rows, cols};
    const size_t nl = c->reduction == NONE ? rows : 1, nt = c->probs ? n : rows;
    const bool nan_row = c->reduction == NONE;
    if (c->tuning &&
        !c->probs) { /* the path the tuning forces (chunks where local memory is short) */
        char v[128];
        ASSERT_OK(oclml_op_variant(T, "cross_entropy", rows, cols, v, sizeof v));
        ck_assert_msg(strstr(v, "chunked") || (strstr(c->tuning, "=1") && strstr(v, "local")),
                      "%s: %s", c->tuning, v);
    }
    float *x, *dx, *dl, *cw, *t = test_floats(nt);
    oclml_tensor *X = test_tensor_held(c->x, 2, shape, -8, 8, &x);
    if (nan_row) x[cols + 3] = NAN; /* row 1 */
    ASSERT_OK(oclml_tensor_write(X, x, n));
    oclml_tensor *DX = c->in_place ? X : test_tensor_held(c->dx, 2, shape, 0, 0, &dx);
    if (c->in_place) dx = test_floats(n);
    float *loss;
    oclml_tensor *DL = test_tensor_held(F32, 1, &nl, 0.5f, 2, &dl),
                 *L = test_tensor_held(F32, 1, &nl, 0, 0, &loss),
                 *CW = test_tensor_held(F32, 1, &cols, 0.2f, 2, &cw);
    /* Class indices (every fifth row from row 2 ignored) or probability rows. */
    test_random(t, nt, 0, c->probs ? 1 : (float)cols);
    for (size_t r = 0; r < rows; r++) {
        float *tr = t + (c->probs ? r * cols : r);
        if (!c->probs) {
            tr[0] = r % 5 == 2 ? -100.0f : floorf(tr[0]);
            continue;
        }
        double s = 0;
        for (size_t j = 0; j < cols; j++) s += tr[j];
        for (size_t j = 0; j < cols; j++) tr[j] = (float)(tr[j] / s);
    }
    oclml_tensor *TT = c->probs ? test_tensor_from(2, shape, t) : test_tensor_from(1, &nt, t);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = c->reduction;
    p.probabilities = c->probs;
    p.label_smoothing = c->eps;
    p.weight = c->weighted ? CW : NULL;
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, c->with_dloss ? DL : NULL, L, DX));

    double *xd = test_doubles(n), *td = test_doubles(nt), *dld = test_doubles(nl),
           *cwd = test_doubles(cols), *rl = test_doubles(nl), *rdx = test_doubles(n);
    for (size_t i = 0; i < n; i++) xd[i] = x[i];
    for (size_t i = 0; i < nt; i++) td[i] = t[i];
    for (size_t i = 0; i < nl; i++) dld[i] = dl[i];
    for (size_t i = 0; i < cols; i++) cwd[i] = cw[i];
    ref_xent_opts o = {
        c->probs, c->reduction, -100, c->eps, c->with_dloss ? dld : NULL, c->weighted ? cwd : NULL};
    ref_xent(&o, rows, cols, xd, td, rl, rdx);
    test_read(L, loss, nl);
    test_read(DX, dx, n);
    char what[128];
    snprintf(what, sizeof what, "cross_entropy %s %zux%zu %s eps %g %s -> %s%s%s%s",
             c->probs ? "probs" : "idx", rows, cols, RED[c->reduction], (double)c->eps,
             oclml_dtype_name(c->x), oclml_dtype_name(c->in_place ? c->x : c->dx),
             c->in_place ? " in place" : "", c->tuning ? " " : "", c->tuning ? c->tuning : "");
    /* The loss is fp32 math on the held logits: fp32's error, relative to the row's terms. */
    for (size_t i = 0; i < nl; i++) {
        if (nan_row && i == 1) {
            ck_assert_msg(isnan(loss[i]), "%s: row 1 (a NaN) loss %g", what, loss[i]);
            continue;
        }
        ck_assert_msg(fabs(loss[i] - rl[i]) <= 2e-5 * (1 + fabs(rl[i])),
                      "%s: loss[%zu] = %.8g, want %.8g", what, i, loss[i], rl[i]);
    }
    /* Each dlogit: u |ref| for its one rounding, plus the fp32 math's error (relative to the
     * element, and to the row's largest entry where a target's term cancels). */
    const double u = test_unit_roundoff(c->in_place ? c->x : c->dx),
                 a = test_abs_floor(c->in_place ? c->x : c->dx);
    for (size_t r = 0; r < rows; r++) {
        const double *want = rdx + r * cols;
        const float *got = dx + r * cols;
        if (nan_row && r == 1) {
            for (size_t j = 0; j < cols; j++)
                ck_assert_msg(isnan(got[j]), "%s: row 1 (a NaN) dlogits[%zu] = %g", what, j,
                              got[j]);
            continue;
        }
        double rowmax = 0;
        for (size_t j = 0; j < cols; j++) rowmax = fmax(rowmax, fabs(want[j]));
        for (size_t j = 0; j < cols; j++) {
            const double tol = u * fabs(want[j]) + a + 1e-5 * fabs(want[j]) + 2e-6 * rowmax;
            ck_assert_msg(fabs(got[j] - want[j]) <= tol,
                          "%s: dlogits[%zu,%zu] = %.8g, want %.8g (tol %.2g)", what, r, j, got[j],
                          want[j], tol);
        }
    }
    free(x), free(dx), free(dl), free(cw), free(t), free(loss);
    free(xd), free(td), free(dld), free(cwd), free(rl), free(rdx);
    oclml_tensor *all[] = {X, c->in_place ? NULL : DX, DL, L, CW, TT};
    for (int i = 0; i < 6; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
}
END_TEST

/* The loss alone from bf16 logits (no dlogits: the logits' dtype alone is defined) equals the
 * loss of the call with dlogits, bit for bit (the same fp32 math). */
START_TEST(loss_alone_matches) {
    const size_t rows = 5, cols = 37, shape[2] = {rows, cols};
    float *x, *t = test_floats(rows), *l1, *l2, *dx;
    oclml_tensor *X = test_tensor_held(BF, 2, shape, -6, 6, &x),
                 *DX = test_tensor_held(BF, 2, shape, 0, 0, &dx);
    oclml_tensor *L1 = test_tensor_held(F32, 1, &rows, 0, 0, &l1),
                 *L2 = test_tensor_held(F32, 1, &rows, 0, 0, &l2);
    test_random(t, rows, 0, (float)cols);
    for (size_t r = 0; r < rows; r++) t[r] = floorf(t[r]);
    oclml_tensor *TT = test_tensor_from(1, &rows, t);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = NONE;
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L1, DX));
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L2, NULL));
    test_read(L1, l1, rows);
    test_read(L2, l2, rows);
    for (size_t r = 0; r < rows; r++)
        ck_assert_msg(l1[r] == l2[r] && isfinite(l1[r]), "row %zu: %.9g alone, %.9g with dlogits",
                      r, l2[r], l1[r]);
    free(x), free(t), free(l1), free(l2), free(dx);
    oclml_tensor *all[] = {X, DX, L1, L2, TT};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

/* A dlogits of the wrong shape, a 16-bit target, and dlogits over the logits' memory in another
 * dtype (not in place: their elements lie elsewhere) are refused; nothing is written. */
START_TEST(refusals_touch_nothing) {
    const size_t rows = 4, cols = 8, shape[2] = {rows, cols}, bad[2] = {rows, 9};
    float *x, *dx, *l, *t = test_floats(rows), *tb;
    for (size_t r = 0; r < rows; r++) t[r] = (float)r;
    oclml_tensor *X = test_tensor_held(BF, 2, shape, -1, 1, &x),
                 *DX = test_tensor_held(BF, 2, bad, 0, 0, &dx),
                 *L = test_tensor_held(F32, 1, &rows, 0, 0, &l),
                 *TT = test_tensor_from(1, &rows, t),
                 *TB = test_tensor_held(BF, 1, &rows, 0, 0, &tb);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = NONE;
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX), OCLML_ERR_INVALID_SHAPE);
    test_assert_untouched(DX, rows * 9);
    test_assert_untouched(L, rows);
    ASSERT_OK(oclml_tensor_write(TB, t, rows));
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TB, NULL, L, NULL), OCLML_ERR_DTYPE);
    test_assert_untouched(L, rows);
    /* fp32 logits and a bf16 dlogits at the same address, of the same element count. */
    oclml_tensor *XF = test_tensor_from(2, shape, x), *DXB;
    cl_mem mem;
    size_t off;
    ASSERT_OK(oclml_tensor_buffer(XF, &mem, &off));
    ASSERT_OK(oclml_tensor_wrap_dtype(T, BF, mem, off, 2, shape, &DXB));
    ASSERT_STATUS(oclml_cross_entropy(T, &p, XF, TT, NULL, L, DXB), OCLML_ERR_INVALID_ARGUMENT);
    test_assert_untouched(L, rows);
    float *back = test_floats(rows * cols);
    test_read(XF, back, rows * cols);
    ck_assert_msg(!memcmp(back, x, rows * cols * sizeof *x), "the logits were written");
    free(x), free(dx), free(l), free(t), free(tb), free(back);
    oclml_tensor *all[] = {X, DX, L, TT, TB, DXB, XF};
    for (int i = 0; i < 7; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("loss_lp");
    TCase *tc = tcase_create("loss_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, cross_entropy_matches_reference, 0, N_CASES);
    tcase_add_test(tc, loss_alone_matches);
    tcase_add_test(tc, refusals_touch_nothing);
    suite_add_tcase(s, tc);
    return test_main(s);
}
