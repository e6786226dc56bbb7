/* Losses against double-precision references: cross-entropy on class indices (ignore_index,
 * label smoothing) and on probabilities, every reduction, with and without an upstream gradient,
 * rows in registers and chunked (a 50257-class row), in place; KL between categorical logits;
 * MSE, Huber, BCE with logits (pos_weight); every backward by central finite differences; NaN
 * policy; invalid class indices; repeatability; bad input touching nothing; PyTorch's golden
 * vectors (tests/data/loss_golden.txt from make_loss_golden.py, skipped while missing). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL_LOSS 1e-5

enum { MEAN = OCLML_LOSS_MEAN, SUM = OCLML_LOSS_SUM, NONE = OCLML_LOSS_NONE };
static const char *const RED[] = {"mean", "sum", "none"};

/* The references: tests/ref/loss.c (double inputs, so finite differences can perturb them
 * finely). */
typedef ref_xent_opts xent_ref_opts;
enum { MSE = REF_MSE, HUBER = REF_HUBER, BCE = REF_BCE_WITH_LOGITS };
static const char *const PW_NAMES[] = {"mse", "huber", "bce_with_logits"};

/* ---- helpers ---- */

static double *to_double(const float *v, size_t n) {
    double *d = test_doubles(n);
    for (size_t i = 0; i < n; i++) d[i] = v[i];
    return d;
}

static void check_tensor(const char *what, const oclml_tensor *t, const double *ref, size_t n,
                         double tol) {
    float *got = test_floats(n);
    test_read(t, got, n);
    test_assert_close(what, got, ref, n, tol);
    free(got);
}

/* Class indices in [0, cols) with every fifth row (from row 2) ignored. */
static float *make_targets(size_t rows, size_t cols, int ignore) {
    float *t = test_floats(rows);
    test_random(t, rows, 0, (float)cols);
    for (size_t r = 0; r < rows; r++) t[r] = (r % 5 == 2) ? (float)ignore : floorf(t[r]);
    return t;
}

/* Random probability rows (each sums to 1). */
static float *make_probs(size_t rows, size_t cols) {
    float *t = test_floats(rows * cols);
    test_random(t, rows * cols, 0, 1);
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (size_t c = 0; c < cols; c++) s += t[r * cols + c];
        for (size_t c = 0; c < cols; c++) t[r * cols + c] = (float)(t[r * cols + c] / s);
    }
    return t;
}

/* Runs one cross-entropy case (loss and dlogits together, then each alone) and checks both. */
static void xent_case_w(size_t rows, size_t cols, int probs, int reduction, float eps,
                        int with_dloss, float scale, int weighted) {
    size_t n = rows * cols, shape[2] = {rows, cols}, nl = reduction == NONE ? rows : 1;
    float *x = test_floats(n), *dl = test_floats(nl);
    test_random(x, n, -scale, scale);
    test_random(dl, nl, 0.5f, 2);
    float *t = probs ? make_probs(rows, cols) : make_targets(rows, cols, -100);
    size_t nt = probs ? n : rows;
    oclml_tensor *X = test_tensor_from(2, shape, x),
                 *TT = probs ? test_tensor_from(2, shape, t) : test_tensor_from(1, &nt, t);
    oclml_tensor *DL = test_tensor_from(1, &nl, dl), *L = test_tensor(1, &nl),
                 *DX = test_tensor(2, shape);
    float *cw = test_floats(cols);
    test_random(cw, cols, 0.2f, 2);
    oclml_tensor *CW = test_tensor_from(1, &cols, cw);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = reduction;
    p.probabilities = probs;
    p.label_smoothing = eps;
    p.weight = weighted ? CW : NULL;
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, with_dloss ? DL : NULL, L, DX));
    double *xd = to_double(x, n), *td = to_double(t, nt), *dld = to_double(dl, nl),
           *cwd = to_double(cw, cols);
    double *rl = test_doubles(nl), *rdx = test_doubles(n);
    xent_ref_opts o = {probs, reduction, -100, eps, with_dloss ? dld : NULL, weighted ? cwd : NULL};
    ref_xent(&o, rows, cols, xd, td, rl, rdx);
    char what[128];
    snprintf(what, sizeof what, "cross_entropy %s %zux%zu %s eps %g%s%s loss",
             probs ? "probs" : "idx", rows, cols, RED[reduction], (double)eps,
             with_dloss ? " dloss" : "", weighted ? " weighted" : "");
    check_tensor(what, L, rl, nl, TOL_LOSS);
    strcpy(strstr(what, " loss"), " dlogits");
    check_tensor(what, DX, rdx, n, TOL_LOSS);
    /* The loss alone and dlogits alone give the same. */
    oclml_tensor *L2 = test_tensor(1, &nl), *DX2 = test_tensor(2, shape);
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, with_dloss ? DL : NULL, L2, NULL));
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, with_dloss ? DL : NULL, NULL, DX2));
    check_tensor(what, DX2, rdx, n, TOL_LOSS);
    strcpy(strstr(what, " dlogits"), " loss alone");
    check_tensor(what, L2, rl, nl, TOL_LOSS);
    oclml_tensor *all[] = {X, TT, DL, L, DX, L2, DX2, CW};
    for (int i = 0; i < 8; i++) oclml_tensor_destroy(all[i]);
    free(x);
    free(dl);
    free(t);
    free(cw);
    free(xd);
    free(td);
    free(dld);
    free(cwd);
    free(rl);
    free(rdx);
}

static void xent_case(size_t rows, size_t cols, int probs, int reduction, float eps, int with_dloss,
                      float scale) {
    xent_case_w(rows, cols, probs, reduction, eps, with_dloss, scale, 0);
}

/* ---- cross-entropy ---- */

static const size_t XCOLS[] = {1, 2, 3, 7, 32, 33, 100, 255, 1000, 1031, 4096};

START_TEST(xent_indices) {
    int red = _i % 3, dl = _i / 3;
    for (size_t i = 0; i < sizeof XCOLS / sizeof XCOLS[0]; i++) {
        size_t rows = i % 3 == 0 ? 1 : (i % 3 == 1 ? 7 : 13);
        xent_case(rows, XCOLS[i], 0, red, (i % 2) ? 0.1f : 0.0f, dl, 6);
    }
    xent_case(300, 17, 0, red, 0.25f, dl, 3);
}
END_TEST

START_TEST(xent_probabilities) {
    int red = _i % 3, dl = _i / 3;
    for (size_t i = 0; i < sizeof XCOLS / sizeof XCOLS[0]; i++)
        xent_case(i % 2 ? 3 : 5, XCOLS[i], 1, red, (i % 2) ? 0.0f : 0.2f, dl, 5);
}
END_TEST

/* Class weights (PyTorch's weight): indices with smoothing and ignored rows, probabilities; in
 * registers and chunked. */
START_TEST(xent_class_weights) {
    int red = _i;
    xent_case_w(7, 33, 0, red, 0.1f, 1, 4, 1);
    xent_case_w(13, 1000, 0, red, 0.0f, 0, 4, 1);
    xent_case_w(5, 100, 1, red, 0.2f, 1, 4, 1);
    xent_case_w(3, 50257, 0, red, 0.1f, 1, 4, 1);
    xent_case_w(2, 40001, 0, red, 0.0f, 0, 4, 1);
    xent_case_w(2, 40001, 1, red, 0.0f, 0, 4, 1);
}
END_TEST

/* A GPT-2 vocabulary (50257 classes: past the registers; registers and local memory where
 * 1024-wide work-groups run, else chunked; odd, so scalar), 32000 (in registers on devices with
 * 1024-wide work-groups) and 70001 (chunked), at small batch. */
START_TEST(xent_large_vocabulary) {
    xent_case(3, 50257, 0, _i, 0.1f, 1, 8);
    xent_case(2, 32000, 0, _i, 0.0f, 0, 8);
    /* Past registers and local memory: chunked everywhere. */
    xent_case(2, 70001, 0, _i, 0.1f, _i == NONE, 8);
    if (_i == MEAN) xent_case(2, 50257, 1, _i, 0.05f, 1, 8);
    /* A row of 74 chunks of 4096 (a finish pass merges more partials than it has work-items
     * where the work-groups are small). */
    if (_i == SUM) xent_case(1, 300007, 0, _i, 0.1f, 1, 8);
    /* The same row forced onto each long-row path (loss.xent_long: 0 chunks, 1 registers and
     * local memory), dlogits included. */
    test_retune("loss.xent_long=0");
    xent_case(3, 50257, 0, _i, 0.1f, 1, 8);
    test_retune("loss.xent_long=1");
    xent_case(3, 50257, 0, _i, 0.1f, 1, 8);
}
END_TEST

/* A +inf logit makes its row's loss and dlogits NaN (inf - inf, as PyTorch's log_softmax), on
 * every path: registers, registers + local memory (where it runs) and chunks. */
START_TEST(xent_positive_infinity_gives_nan) {
    const size_t cols_list[] = {40, 50257, 70001};
    const char *tunings[] = {"loss.xent_long=1", "loss.xent_long=0"};
    for (int tu = 0; tu < 2; tu++) {
        test_retune(tunings[tu]);
        for (int k = 0; k < 3; k++) {
            size_t rows = 2, cols = cols_list[k], n = rows * cols, shape[2] = {rows, cols};
            float *x = test_floats(n), *l = test_floats(rows), *dx = test_floats(n);
            test_random(x, n, -2, 2);
            x[cols / 2] = INFINITY; /* row 0 */
            float t[2] = {3, 4};
            oclml_tensor *X = test_tensor_from(2, shape, x), *TT = test_tensor_from(1, &rows, t),
                         *L = test_tensor(1, &rows), *DX = test_tensor(2, shape);
            oclml_loss_params p;
            oclml_loss_params_init(&p);
            p.reduction = OCLML_LOSS_NONE;
            ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX));
            test_read(L, l, rows);
            test_read(DX, dx, n);
            ck_assert_msg(isnan(l[0]) && isfinite(l[1]), "%zu classes, %s: losses %g %g", cols,
                          tunings[tu], l[0], l[1]);
            for (size_t c = 0; c < cols; c++)
                ck_assert_msg(isnan(dx[c]) && isfinite(dx[cols + c]),
                              "%zu classes, %s: gradient column %zu", cols, tunings[tu], c);
            oclml_tensor *all[] = {X, TT, L, DX};
            for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
            free(x);
            free(l);
            free(dx);
        }
    }
}
END_TEST

/* oclml_op_variant names the cross-entropy plan: registers, chunks past registers and local
 * memory, and the long-row path loss.xent_long forces. */
START_TEST(xent_variant_names_the_plan) {
    char v[128];
    ASSERT_OK(oclml_op_variant(T, "cross_entropy", 4, 100, v, sizeof v));
    ck_assert_msg(strstr(v, "registers") && !strstr(v, "local"), "%s", v);
    ASSERT_OK(oclml_op_variant(T, "cross_entropy", 2, 300007, v, sizeof v));
    ck_assert_msg(strstr(v, "chunked") != NULL, "%s", v);
    test_retune("loss.xent_long=0");
    ASSERT_OK(oclml_op_variant(T, "cross_entropy", 2, 50257, v, sizeof v));
    ck_assert_msg(strstr(v, "chunked") != NULL, "%s", v);
    oclml_device_info d;
    ASSERT_OK(oclml_ctx_device_info(T, &d));
    test_retune("loss.xent_long=1");
    ASSERT_OK(oclml_op_variant(T, "cross_entropy", 2, 50257, v, sizeof v));
    if (d.max_work_group_size >= 1024) /* registers + local memory need 1024-wide work-groups */
        ck_assert_msg(strstr(v, "registers + local") != NULL, "%s", v);
    ASSERT_STATUS(oclml_op_variant(T, "cross_entropy", 0, 5, v, sizeof v), OCLML_ERR_INVALID_SHAPE);
}
END_TEST

/* Large logits (+-1e4) must not overflow. */
START_TEST(xent_extremes) {
    for (int probs = 0; probs < 2; probs++) {
        xent_case(4, 300, probs, NONE, 0.1f, 0, 1e4f);
        xent_case(2, 40000, probs, SUM, 0.0f, 0, 1e4f);
    }
}
END_TEST

/* dlogits written over logits (in place), on both paths. */
START_TEST(xent_in_place) {
    size_t cols_list[] = {64, 50257};
    for (int k = 0; k < 2; k++) {
        size_t rows = 3, cols = cols_list[k], n = rows * cols, shape[2] = {rows, cols}, one = 1;
        float *x = test_floats(n);
        test_random(x, n, -4, 4);
        float *t = make_targets(rows, cols, -100);
        t[0] = (float)(cols - 1);
        oclml_tensor *X = test_tensor_from(2, shape, x), *TT = test_tensor_from(1, &rows, t),
                     *L = test_tensor(1, &one);
        oclml_loss_params p;
        oclml_loss_params_init(&p);
        p.label_smoothing = 0.1f;
        ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L, X));
        double *xd = to_double(x, n), *td = to_double(t, rows), rl, *rdx = test_doubles(n);
        xent_ref_opts o = {0, MEAN, -100, 0.1, NULL, NULL};
        ref_xent(&o, rows, cols, xd, td, &rl, rdx);
        check_tensor("cross_entropy in place dlogits", X, rdx, n, TOL_LOSS);
        check_tensor("cross_entropy in place loss", L, &rl, 1, TOL_LOSS);
        oclml_tensor_destroy(X);
        oclml_tensor_destroy(TT);
        oclml_tensor_destroy(L);
        free(x);
        free(t);
        free(xd);
        free(td);
        free(rdx);
    }
}
END_TEST

/* Ignored rows: loss 0 and zero gradients; all rows ignored: the mean is NaN (0 / 0), the
 * gradients zero; a class index out of range or fractional: that row NaN. */
START_TEST(xent_ignore_and_invalid_targets) {
    size_t rows = 4, cols = 9, n = rows * cols, shape[2] = {rows, cols}, one = 1;
    float *x = test_floats(n);
    test_random(x, n, -2, 2);
    float t[4] = {7, 9, 2.5f, 3}; /* 9 and 2.5 invalid */
    oclml_tensor *X = test_tensor_from(2, shape, x), *TT = test_tensor_from(1, &rows, t),
                 *L = test_tensor(1, &rows), *L1 = test_tensor(1, &one),
                 *DX = test_tensor(2, shape);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = OCLML_LOSS_NONE;
    p.ignore_index = 3;
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX));
    float l[4], dx[36];
    test_read(L, l, 4);
    test_read(DX, dx, n);
    ck_assert(isfinite(l[0]) && isnan(l[1]) && isnan(l[2]) && l[3] == 0.0f);
    for (size_t c = 0; c < cols; c++) {
        ck_assert(isfinite(dx[c]));
        ck_assert(isnan(dx[cols + c]) && isnan(dx[2 * cols + c]));
        ck_assert(dx[3 * cols + c] == 0.0f);
    }
    /* All ignored. */
    float ti[4] = {3, 3, 3, 3};
    ASSERT_OK(oclml_tensor_write(TT, ti, 4));
    p.reduction = OCLML_LOSS_MEAN;
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L1, DX));
    test_read(L1, l, 1);
    test_read(DX, dx, n);
    ck_assert(isnan(l[0]));
    for (size_t i = 0; i < n; i++) ck_assert(dx[i] == 0.0f);
    oclml_tensor *all[] = {X, TT, L, L1, DX};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
    free(x);
}
END_TEST

/* ---- KL between categorical logits ---- */

static void kl_case(size_t rows, size_t cols, int reduction, int with_dloss, int want_dp,
                    int want_dq) {
    size_t n = rows * cols, shape[2] = {rows, cols}, nl = reduction == NONE ? rows : 1;
    float *a = test_floats(n), *b = test_floats(n), *dl = test_floats(nl);
    test_random(a, n, -4, 4);
    test_random(b, n, -4, 4);
    test_random(dl, nl, 0.5f, 2);
    oclml_tensor *A = test_tensor_from(2, shape, a), *B = test_tensor_from(2, shape, b),
                 *DL = test_tensor_from(1, &nl, dl), *L = test_tensor(1, &nl),
                 *DA = test_tensor(2, shape), *DB = test_tensor(2, shape);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = reduction;
    ASSERT_OK(oclml_kl_div_logits(T, &p, A, B, with_dloss ? DL : NULL, L, want_dp ? DA : NULL,
                                  want_dq ? DB : NULL));
    double *ad = to_double(a, n), *bd = to_double(b, n), *dld = to_double(dl, nl);
    double *rl = test_doubles(nl), *rda = test_doubles(n), *rdb = test_doubles(n);
    ref_kl(reduction, with_dloss ? dld : NULL, rows, cols, ad, bd, rl, rda, rdb);
    char what[96];
    snprintf(what, sizeof what, "kl %zux%zu %s loss", rows, cols, RED[reduction]);
    check_tensor(what, L, rl, nl, TOL_LOSS);
    snprintf(what, sizeof what, "kl %zux%zu %s dp", rows, cols, RED[reduction]);
    if (want_dp) check_tensor(what, DA, rda, n, TOL_LOSS);
    snprintf(what, sizeof what, "kl %zux%zu %s dq", rows, cols, RED[reduction]);
    if (want_dq) check_tensor(what, DB, rdb, n, TOL_LOSS);
    oclml_tensor *all[] = {A, B, DL, L, DA, DB};
    for (int i = 0; i < 6; i++) oclml_tensor_destroy(all[i]);
    free(a);
    free(b);
    free(dl);
    free(ad);
    free(bd);
    free(dld);
    free(rl);
    free(rda);
    free(rdb);
}

START_TEST(kl_divergence) {
    int red = _i % 3, dl = _i / 3;
    kl_case(1, 1, red, dl, 1, 1);
    kl_case(5, 32, red, dl, 1, 1); /* 32 categoricals of 32: a world model's latent */
    kl_case(64, 32, red, dl, 1, 0);
    kl_case(3, 1000, red, dl, 0, 1);
    kl_case(2, 40001, red, dl, 1, 1); /* chunked */
    kl_case(2, 40001, red, dl, 0, 0); /* chunked, the loss alone: one finish work-group a row */
    if (red == 0 && dl == 0) kl_case(1, 300007, red, dl, 1, 1); /* 74 chunks */
}
END_TEST

/* ---- pointwise losses ---- */

static void pointwise_case(int kind, size_t rows, size_t cols, int reduction, int with_dloss,
                           int with_pw) {
    size_t n = rows * cols, shape[2] = {rows, cols}, nl = reduction == NONE ? n : 1;
    float *x = test_floats(n), *t = test_floats(n), *dl = test_floats(nl), *pw = test_floats(cols);
    test_random(x, n, -3, 3);
    test_random(t, n, kind == BCE ? 0 : -3, kind == BCE ? 1 : 3);
    test_random(dl, nl, 0.5f, 2);
    test_random(pw, cols, 0.2f, 3);
    oclml_tensor *X = test_tensor_from(2, shape, x), *TT = test_tensor_from(2, shape, t),
                 *DL = test_tensor_from(1, &nl, dl), *PW = test_tensor_from(1, &cols, pw),
                 *L = test_tensor(1, &nl), *DX = test_tensor(2, shape);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = reduction;
    p.delta = 0.75f;
    p.pos_weight = with_pw ? PW : NULL;
    oclml_status (*fn[])(oclml_ctx *, const oclml_loss_params *, const oclml_tensor *,
                         const oclml_tensor *, const oclml_tensor *, oclml_tensor *,
                         oclml_tensor *) = {oclml_mse_loss, oclml_huber_loss,
                                            oclml_bce_with_logits};
    ASSERT_OK(fn[kind](T, &p, X, TT, with_dloss ? DL : NULL, L, DX));
    double *xd = to_double(x, n), *td = to_double(t, n), *dld = to_double(dl, nl),
           *pwd = to_double(pw, cols), *rl = test_doubles(nl), *rdx = test_doubles(n),
           *scale = test_doubles(n);
    ref_pointwise(kind, reduction, 0.75, with_pw ? pwd : NULL, cols, with_dloss ? dld : NULL, n, xd,
                  td, rl, rdx, scale);
    char what[96];
    snprintf(what, sizeof what, "%s %zux%zu %s%s loss", PW_NAMES[kind], rows, cols, RED[reduction],
             with_pw ? " pos_weight" : "");
    check_tensor(what, L, rl, nl, TOL_LOSS);
    strcpy(strstr(what, " loss"), " grad");
    float *got = test_floats(n);
    test_read(DX, got, n);
    test_assert_close_scaled(what, got, rdx, scale, n, TOL_LOSS);
    free(got);
    oclml_tensor *all[] = {X, TT, DL, PW, L, DX};
    for (int i = 0; i < 6; i++) oclml_tensor_destroy(all[i]);
    float *mem[] = {x, t, dl, pw};
    for (int i = 0; i < 4; i++) free(mem[i]);
    double *dm[] = {xd, td, dld, pwd, rl, rdx, scale};
    for (int i = 0; i < 7; i++) free(dm[i]);
}

START_TEST(pointwise_losses) {
    int red = _i % 3, dl = _i / 3;
    for (int kind = 0; kind < 3; kind++) {
        pointwise_case(kind, 1, 1, red, dl, 0);
        pointwise_case(kind, 7, 13, red, dl, kind == BCE);
        pointwise_case(kind, 33, 1000, red, dl, 0);
    }
    pointwise_case(BCE, 300, 17, red, dl, 1);
}
END_TEST

/* ---- finite differences: the gradient of sum(w * loss) (none) or dloss * loss (mean, sum)
 * against central differences of the double reference ---- */

typedef void (*loss_of)(const void *ctx, const double *x, double *loss);

/* fd[i] = d(sum_k w_k loss_k)/dx_i over nl loss values. */
static void finite_differences(loss_of f, const void *ctx, double *x, size_t n, size_t nl,
                               const double *w, double *fd) {
    double *lp = test_doubles(nl), *lm = test_doubles(nl);
    for (size_t i = 0; i < n; i++) {
        double keep = x[i], h = 1e-4 * (fabs(keep) > 1 ? fabs(keep) : 1);
        x[i] = keep + h;
        f(ctx, x, lp);
        x[i] = keep - h;
        f(ctx, x, lm);
        x[i] = keep;
        double s = 0;
        for (size_t k = 0; k < nl; k++) s += w[k] * (lp[k] - lm[k]);
        fd[i] = s / (2 * h);
    }
    free(lp);
    free(lm);
}

typedef struct fd_ctx {
    int kind; /* 0 xent, 1 kl (wrt a), 2 kl (wrt b), 3+ pointwise (kind - 3) */
    xent_ref_opts xo;
    size_t rows, cols;
    const double *other; /* target, or the other logits */
    const double *pw;
    double delta;
} fd_ctx;

static void fd_loss(const void *vc, const double *x, double *loss) {
    const fd_ctx *c = vc;
    xent_ref_opts o = c->xo;
    o.dloss = NULL;
    if (c->kind == 0)
        ref_xent(&o, c->rows, c->cols, x, c->other, loss, NULL);
    else if (c->kind == 1)
        ref_kl(o.reduction, NULL, c->rows, c->cols, x, c->other, loss, NULL, NULL);
    else if (c->kind == 2)
        ref_kl(o.reduction, NULL, c->rows, c->cols, c->other, x, loss, NULL, NULL);
    else
        ref_pointwise(c->kind - 3, o.reduction, c->delta, c->pw, c->cols, NULL, c->rows * c->cols,
                      x, c->other, loss, NULL, NULL);
}

START_TEST(backward_by_finite_differences) {
    const int red = _i;
    const size_t rows = 4, cols = 11, n = rows * cols, shape[2] = {rows, cols};
    const size_t nrow = red == NONE ? rows : 1, nel = red == NONE ? n : 1;
    float *x = test_floats(n), *y = test_floats(n), *dl = test_floats(n), *pw = test_floats(cols);
    test_random(x, n, -2, 2);
    test_random(y, n, -2, 2);
    test_random(dl, n, 0.5f, 2);
    test_random(pw, cols, 0.3f, 3);
    float *tidx = make_targets(rows, cols, -100), *tprob = make_probs(rows, cols);
    float *tbin = test_floats(n);
    test_random(tbin, n, 0, 1);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = red;
    p.delta = 0.8f;
    oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor_from(2, shape, y),
                 *DLr = test_tensor_from(1, &nrow, dl), *DLe = test_tensor_from(1, &nel, dl),
                 *PW = test_tensor_from(1, &cols, pw), *DX = test_tensor(2, shape),
                 *DY = test_tensor(2, shape), *TI = test_tensor_from(1, &rows, tidx),
                 *TP = test_tensor_from(2, shape, tprob), *TB = test_tensor_from(2, shape, tbin);
    double *xd = to_double(x, n), *yd = to_double(y, n), *w = to_double(dl, n),
           *pwd = to_double(pw, cols), *fd = test_doubles(n), *tid = to_double(tidx, rows),
           *tpd = to_double(tprob, n), *tbd = to_double(tbin, n);
    float *got = test_floats(n);
    char what[96];
    /* Cross-entropy: indices with smoothing and an ignored row; probabilities. */
    for (int k = 0; k < 4; k++) {
        const int probs = k & 1, weighted = k >> 1;
        p.probabilities = probs;
        p.label_smoothing = 0.15f;
        p.weight = weighted ? PW : NULL;
        fd_ctx c = {0,
                    {probs, red, -100, 0.15f, NULL, weighted ? pwd : NULL},
                    rows,
                    cols,
                    probs ? tpd : tid,
                    NULL,
                    0};
        ASSERT_OK(oclml_cross_entropy(T, &p, X, probs ? TP : TI, DLr, NULL, DX));
        finite_differences(fd_loss, &c, xd, n, nrow, w, fd);
        test_read(DX, got, n);
        snprintf(what, sizeof what, "cross_entropy %s%s %s dlogits vs finite differences",
                 probs ? "probs" : "idx", weighted ? " weighted" : "", RED[red]);
        test_assert_close(what, got, fd, n, 1e-4);
    }
    p.probabilities = 0;
    p.label_smoothing = 0;
    p.weight = NULL;
    /* KL, both gradients. */
    ASSERT_OK(oclml_kl_div_logits(T, &p, X, Y, DLr, NULL, DX, DY));
    for (int which = 1; which <= 2; which++) {
        fd_ctx c = {which, {0, red, 0, 0, NULL, NULL}, rows, cols, which == 1 ? yd : xd, NULL, 0};
        finite_differences(fd_loss, &c, which == 1 ? xd : yd, n, nrow, w, fd);
        test_read(which == 1 ? DX : DY, got, n);
        snprintf(what, sizeof what, "kl %s %s vs finite differences", RED[red],
                 which == 1 ? "dp" : "dq");
        test_assert_close(what, got, fd, n, 1e-4);
    }
    /* Pointwise: MSE, Huber (delta 0.8), BCE with pos_weight. */
    for (int kind = 0; kind < 3; kind++) {
        p.pos_weight = kind == BCE ? PW : NULL;
        const oclml_tensor *tt = kind == BCE ? TB : Y;
        oclml_status st = kind == MSE     ? oclml_mse_loss(T, &p, X, tt, DLe, NULL, DX)
                          : kind == HUBER ? oclml_huber_loss(T, &p, X, tt, DLe, NULL, DX)
                                          : oclml_bce_with_logits(T, &p, X, tt, DLe, NULL, DX);
        ASSERT_OK(st);
        fd_ctx c = {3 + kind, {0, red, 0, 0, NULL, NULL}, rows,
                    cols,     kind == BCE ? tbd : yd,     kind == BCE ? pwd : NULL,
                    0.8};
        finite_differences(fd_loss, &c, xd, n, nel, w, fd);
        test_read(DX, got, n);
        snprintf(what, sizeof what, "%s %s vs finite differences", PW_NAMES[kind], RED[red]);
        test_assert_close(what, got, fd, n, 1e-4);
    }
    oclml_tensor *all[] = {X, Y, DLr, DLe, PW, DX, DY, TI, TP, TB};
    for (int i = 0; i < 10; i++) oclml_tensor_destroy(all[i]);
    float *fm[] = {x, y, dl, pw, tidx, tprob, tbin, got};
    for (int i = 0; i < 8; i++) free(fm[i]);
    double *dm[] = {xd, yd, w, pwd, fd, tid, tpd, tbd};
    for (int i = 0; i < 8; i++) free(dm[i]);
}
END_TEST

/* ---- NaN policy ---- */

/* A NaN in row 1 makes row 1's loss and gradients NaN, the others finite; the mean NaN. */
START_TEST(nan_in_nan_out) {
    size_t cols_list[] = {40, 50257, 70001}; /* registers, registers + local or chunks, chunks */
    for (int k = 0; k < 3; k++) {
        size_t rows = 3, cols = cols_list[k], n = rows * cols, shape[2] = {rows, cols}, one = 1;
        float *x = test_floats(n), *y = test_floats(n);
        test_random(x, n, -2, 2);
        test_random(y, n, -2, 2);
        x[cols + cols / 3] = NAN;
        float t[3] = {1, 2, 3};
        oclml_tensor *X = test_tensor_from(2, shape, x), *Y = test_tensor_from(2, shape, y),
                     *TT = test_tensor_from(1, &rows, t), *L = test_tensor(1, &rows),
                     *L1 = test_tensor(1, &one), *DX = test_tensor(2, shape),
                     *DY = test_tensor(2, shape);
        oclml_loss_params p;
        oclml_loss_params_init(&p);
        p.reduction = OCLML_LOSS_NONE;
        float *l = test_floats(n), *dx = test_floats(n), *dy = test_floats(n);
        for (int op = 0; op < 3; op++) {
            if (op == 0) ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX));
            if (op == 1) ASSERT_OK(oclml_kl_div_logits(T, &p, X, Y, NULL, L, DX, DY));
            if (op == 2) { /* q holds the NaN */
                ASSERT_OK(oclml_kl_div_logits(T, &p, Y, X, NULL, L, DY, DX));
            }
            test_read(L, l, rows);
            test_read(DX, dx, n);
            ck_assert_msg(isfinite(l[0]) && isnan(l[1]) && isfinite(l[2]), "op %d losses", op);
            for (size_t c = 0; c < cols; c++)
                ck_assert_msg(isfinite(dx[c]) && isnan(dx[cols + c]) && isfinite(dx[2 * cols + c]),
                              "op %d gradient column %zu", op, c);
        }
        p.reduction = OCLML_LOSS_MEAN;
        ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L1, NULL));
        test_read(L1, l, 1);
        ck_assert(isnan(l[0]));
        ASSERT_OK(oclml_kl_div_logits(T, &p, X, Y, NULL, L1, NULL, NULL));
        test_read(L1, l, 1);
        ck_assert(isnan(l[0]));
        /* Pointwise: the element's loss and gradient. */
        for (int kind = 0; kind < 3; kind++) {
            p.reduction = OCLML_LOSS_NONE;
            oclml_tensor *LN = test_tensor(2, shape);
            oclml_status st = kind == MSE     ? oclml_mse_loss(T, &p, X, Y, NULL, LN, DX)
                              : kind == HUBER ? oclml_huber_loss(T, &p, X, Y, NULL, LN, DX)
                                              : oclml_bce_with_logits(T, &p, X, Y, NULL, LN, DX);
            ASSERT_OK(st);
            test_read(LN, l, n);
            test_read(DX, dx, n);
            for (size_t i = 0; i < n; i++) {
                int bad = i == cols + cols / 3;
                ck_assert_msg(bad ? isnan(l[i]) && isnan(dx[i]) : isfinite(l[i]) && isfinite(dx[i]),
                              "%s element %zu", PW_NAMES[kind], i);
            }
            p.reduction = OCLML_LOSS_SUM;
            ASSERT_OK(oclml_mse_loss(T, &p, X, Y, NULL, L1, NULL));
            test_read(L1, l, 1);
            ck_assert(isnan(l[0]));
            oclml_tensor_destroy(LN);
        }
        oclml_tensor *all[] = {X, Y, TT, L, L1, DX, DY};
        for (int i = 0; i < 7; i++) oclml_tensor_destroy(all[i]);
        free(x);
        free(y);
        free(l);
        free(dx);
        free(dy);
    }
}
END_TEST

/* ---- determinism ---- */

START_TEST(repeatable_bit_for_bit) {
    size_t rows = 257, cols = 3001, n = rows * cols, shape[2] = {rows, cols}, one = 1;
    float *x = test_floats(n);
    test_random(x, n, -5, 5);
    float *t = make_targets(rows, cols, -100);
    oclml_tensor *X = test_tensor_from(2, shape, x), *TT = test_tensor_from(1, &rows, t),
                 *L = test_tensor(1, &one), *DX = test_tensor(2, shape);
    float l[2], *d1 = test_floats(n), *d2 = test_floats(n);
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(oclml_cross_entropy(T, NULL, X, TT, NULL, L, DX));
        test_read(L, &l[k], 1);
        test_read(DX, k ? d2 : d1, n);
    }
    ck_assert(memcmp(&l[0], &l[1], sizeof l[0]) == 0);
    ck_assert(memcmp(d1, d2, n * sizeof *d1) == 0);
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(oclml_mse_loss(T, NULL, X, X, NULL, L, NULL));
        test_read(L, &l[k], 1);
    }
    ck_assert(memcmp(&l[0], &l[1], sizeof l[0]) == 0);
    oclml_tensor *all[] = {X, TT, L, DX};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
    free(x);
    free(t);
    free(d1);
    free(d2);
}
END_TEST

/* Tensors at odd element offsets (the scalar path), wrapped in one buffer. */
START_TEST(unaligned_offsets) {
    cl_context cx;
    oclml_ctx_cl_objects(T, &cx, NULL, NULL);
    size_t rows = 5, cols = 64, n = rows * cols, shape[2] = {rows, cols};
    cl_int err;
    cl_mem buf =
        clCreateBuffer(cx, CL_MEM_READ_WRITE, (2 * n + rows + 8) * sizeof(float), NULL, &err);
    ck_assert(buf != NULL);
    oclml_tensor *X, *DX, *TT;
    ASSERT_OK(oclml_tensor_wrap(T, buf, 1 * sizeof(float), 2, shape, &X));
    ASSERT_OK(oclml_tensor_wrap(T, buf, (n + 3) * sizeof(float), 2, shape, &DX));
    ASSERT_OK(oclml_tensor_wrap(T, buf, (2 * n + 5) * sizeof(float), 1, &rows, &TT));
    float *x = test_floats(n), *t = make_targets(rows, cols, -100);
    test_random(x, n, -3, 3);
    ASSERT_OK(oclml_tensor_write(X, x, n));
    ASSERT_OK(oclml_tensor_write(TT, t, rows));
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.reduction = OCLML_LOSS_SUM;
    size_t one = 1;
    oclml_tensor *L = test_tensor(1, &one);
    ASSERT_OK(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX));
    double *xd = to_double(x, n), *td = to_double(t, rows), rl, *rdx = test_doubles(n);
    xent_ref_opts o = {0, SUM, -100, 0, NULL, NULL};
    ref_xent(&o, rows, cols, xd, td, &rl, rdx);
    check_tensor("cross_entropy at odd offsets dlogits", DX, rdx, n, TOL_LOSS);
    check_tensor("cross_entropy at odd offsets loss", L, &rl, 1, TOL_LOSS);
    oclml_tensor *all[] = {X, DX, TT, L};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
    clReleaseMemObject(buf);
    free(x);
    free(t);
    free(xd);
    free(td);
    free(rdx);
}
END_TEST

/* ---- bad input ---- */

START_TEST(bad_input_touches_nothing) {
    size_t s34[2] = {3, 4}, s43[2] = {4, 3}, three = 3, four = 4, one = 1, two = 2;
    float xv[12], tv[3] = {0, 1, 2}, pv[4] = {1, 1, 1, 1};
    test_random(xv, 12, -1, 1);
    oclml_tensor *X = test_tensor_from(2, s34, xv), *X43 = test_tensor_from(2, s43, xv),
                 *TT = test_tensor_from(1, &three, tv), *T4 = test_tensor_from(1, &four, tv),
                 *PW = test_tensor_from(1, &four, pv), *PW3 = test_tensor_from(1, &three, pv);
    oclml_tensor *L = test_tensor(1, &one), *L2 = test_tensor(1, &two),
                 *L3 = test_tensor(1, &three), *DX = test_tensor(2, s34),
                 *DX43 = test_tensor(2, s43), *DQ = test_tensor(2, s34);
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    /* Cross-entropy. */
    ASSERT_STATUS(oclml_cross_entropy(NULL, &p, X, TT, NULL, L, DX), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, NULL, TT, NULL, L, DX), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, NULL, NULL, L, DX), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, NULL, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, T4, NULL, L, DX), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L2, DX), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX43), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, L2, L, DX), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, X43), OCLML_ERR_INVALID_SHAPE);
    /* dlogits over the targets (not its own input), the loss over the logits. */
    oclml_tensor *over;
    cl_mem xm;
    size_t xoff_bytes;
    ASSERT_OK(oclml_tensor_buffer(X, &xm, &xoff_bytes));
    ASSERT_OK(oclml_tensor_wrap(T, xm, xoff_bytes + 4 * sizeof(float), 1, &one, &over));
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, over, DX), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, L), OCLML_ERR_INVALID_SHAPE);
    p.probabilities = 1;
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, DQ, NULL, L, DQ), OCLML_ERR_INVALID_ARGUMENT);
    p.probabilities = 0;
    p.weight = PW3; /* 3 weights for 4 classes */
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX), OCLML_ERR_INVALID_SHAPE);
    p.weight = PW;
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, PW), OCLML_ERR_INVALID_SHAPE);
    p.weight = NULL;
    p.label_smoothing = 1.5f;
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX), OCLML_ERR_INVALID_ARGUMENT);
    p.label_smoothing = NAN;
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX), OCLML_ERR_INVALID_ARGUMENT);
    oclml_loss_params_init(&p);
    p.reduction = (oclml_loss_reduction)7;
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX), OCLML_ERR_INVALID_ARGUMENT);
    oclml_loss_params_init(&p);
    p.struct_size = 0;
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX), OCLML_ERR_INVALID_ARGUMENT);
    oclml_loss_params_init(&p);
    p.reduction = OCLML_LOSS_NONE;
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, NULL, L, DX), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_cross_entropy(T, &p, X, TT, L, L3, DX), OCLML_ERR_INVALID_SHAPE);
    /* KL. */
    oclml_loss_params_init(&p);
    ASSERT_STATUS(oclml_kl_div_logits(T, &p, X, X43, NULL, L, DX, DQ), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_kl_div_logits(T, &p, X, X, NULL, NULL, NULL, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_kl_div_logits(T, &p, X, X, NULL, L, DX, DX), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_kl_div_logits(T, &p, X, X, NULL, L3, DX, DQ), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_kl_div_logits(T, &p, X, X, NULL, L, DX43, DQ), OCLML_ERR_INVALID_SHAPE);
    /* Pointwise. */
    ASSERT_STATUS(oclml_mse_loss(T, &p, X, X43, NULL, L, DX), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_mse_loss(T, &p, X, X, NULL, NULL, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_mse_loss(T, &p, X, X, NULL, L2, DX), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_mse_loss(T, &p, X, X, NULL, L, DX43), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_mse_loss(T, &p, X, X, NULL, L, X43), OCLML_ERR_INVALID_SHAPE);
    p.delta = 0;
    ASSERT_STATUS(oclml_huber_loss(T, &p, X, X, NULL, L, DX), OCLML_ERR_INVALID_ARGUMENT);
    p.delta = -1;
    ASSERT_STATUS(oclml_huber_loss(T, &p, X, X, NULL, L, DX), OCLML_ERR_INVALID_ARGUMENT);
    oclml_loss_params_init(&p);
    p.pos_weight = PW3;
    ASSERT_STATUS(oclml_bce_with_logits(T, &p, X, X, NULL, L, DX), OCLML_ERR_INVALID_SHAPE);
    p.pos_weight = PW;
    ASSERT_STATUS(oclml_bce_with_logits(T, &p, X, DQ, NULL, L, DQ), OCLML_ERR_INVALID_ARGUMENT);
    oclml_tensor *untouched[] = {L, L2, L3, DX, DX43, DQ};
    size_t sizes[] = {1, 2, 3, 12, 12, 12};
    for (int i = 0; i < 6; i++) test_assert_untouched(untouched[i], sizes[i]);
    oclml_tensor *all[] = {X, X43, TT, T4, PW, PW3, L, L2, L3, DX, DX43, DQ, over};
    for (int i = 0; i < 13; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

/* ---- PyTorch's golden vectors ---- */

static char golden_path[2048];

static void golden_check(const char *what, const oclml_tensor *t, const float *want, size_t n) {
    double *ref = to_double(want, n);
    check_tensor(what, t, ref, n, TOL_LOSS);
    free(ref);
}

/* Cases: "case NAME REDUCTION ROWS COLS EPS DELTA", then x, t (the target, or q's logits for
 * kl), w (xent_*_w), pw (bce_pw), dloss, loss, dx, dq (kl). */
START_TEST(matches_pytorch) {
    FILE *f = fopen(golden_path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", golden_path);
    char line[512];
    ck_assert(fgets(line, sizeof line, f) != NULL);
    int cases = 0;
    char name[32], red[16];
    size_t rows, cols;
    float eps, delta;
    while (fscanf(f, " case %31s %15s %zu %zu %f %f", name, red, &rows, &cols, &eps, &delta) == 6) {
        oclml_loss_params p;
        oclml_loss_params_init(&p);
        p.reduction = !strcmp(red, "mean")  ? OCLML_LOSS_MEAN
                      : !strcmp(red, "sum") ? OCLML_LOSS_SUM
                                            : OCLML_LOSS_NONE;
        p.label_smoothing = eps;
        p.delta = delta;
        const int weighted = !strcmp(name, "xent_idx_w") || !strcmp(name, "xent_prob_w");
        const int idx = !strcmp(name, "xent_idx") || !strcmp(name, "xent_idx_w"),
                  kl = !strcmp(name, "kl"), pwc = !strcmp(name, "bce_pw"),
                  pointwise = !idx && !kl && strncmp(name, "xent", 4);
        p.probabilities = !strcmp(name, "xent_prob") || !strcmp(name, "xent_prob_w");
        size_t n = rows * cols, shape[2] = {rows, cols}, nt = idx ? rows : n;
        size_t nl = p.reduction != OCLML_LOSS_NONE ? 1 : (pointwise ? n : rows);
        float *x = test_golden_floats(f, "x", n), *t = test_golden_floats(f, "t", nt);
        float *cw = weighted ? test_golden_floats(f, "w", cols) : NULL;
        float *pw = pwc ? test_golden_floats(f, "pw", cols) : NULL;
        float *dl = test_golden_floats(f, "dloss", nl), *l = test_golden_floats(f, "loss", nl),
              *dx = test_golden_floats(f, "dx", n),
              *dq = kl ? test_golden_floats(f, "dq", n) : NULL;
        oclml_tensor *X = test_tensor_from(2, shape, x),
                     *TT = idx ? test_tensor_from(1, &nt, t) : test_tensor_from(2, shape, t),
                     *DL = test_tensor_from(1, &nl, dl), *L = test_tensor(1, &nl),
                     *DX = test_tensor(2, shape), *DQ = test_tensor(2, shape),
                     *PW = pw ? test_tensor_from(1, &cols, pw) : NULL, *Q = NULL;
        p.pos_weight = PW;
        oclml_tensor *CW = cw ? test_tensor_from(1, &cols, cw) : NULL;
        p.weight = CW;
        if (kl) Q = test_tensor_from(2, shape, t);
        oclml_status st;
        if (idx || p.probabilities)
            st = oclml_cross_entropy(T, &p, X, TT, DL, L, DX);
        else if (kl)
            st = oclml_kl_div_logits(T, &p, X, Q, DL, L, DX, DQ);
        else if (!strcmp(name, "mse"))
            st = oclml_mse_loss(T, &p, X, TT, DL, L, DX);
        else if (!strcmp(name, "huber"))
            st = oclml_huber_loss(T, &p, X, TT, DL, L, DX);
        else
            st = oclml_bce_with_logits(T, &p, X, TT, DL, L, DX);
        ASSERT_OK(st);
        char what[96];
        snprintf(what, sizeof what, "PyTorch %s %s loss", name, red);
        golden_check(what, L, l, nl);
        snprintf(what, sizeof what, "PyTorch %s %s dx", name, red);
        golden_check(what, DX, dx, n);
        if (kl) {
            snprintf(what, sizeof what, "PyTorch %s %s dq", name, red);
            golden_check(what, DQ, dq, n);
        }
        oclml_tensor *all[] = {X, TT, DL, L, DX, DQ, PW, Q, CW};
        for (int i = 0; i < 9; i++)
            if (all[i]) oclml_tensor_destroy(all[i]);
        float *mem[] = {x, t, pw, dl, l, dx, dq, cw};
        for (int i = 0; i < 8; i++) free(mem[i]);
        cases++;
    }
    fclose(f);
    ck_assert_int_ge(cases, 27);
}
END_TEST

int main(void) {
    Suite *s = suite_create("loss");
    TCase *tc = tcase_create("loss");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, xent_indices, 0, 6);
    tcase_add_loop_test(tc, xent_probabilities, 0, 6);
    tcase_add_loop_test(tc, xent_class_weights, 0, 3);
    tcase_add_loop_test(tc, xent_large_vocabulary, 0, 3);
    tcase_add_test(tc, xent_extremes);
    tcase_add_test(tc, xent_in_place);
    tcase_add_test(tc, xent_ignore_and_invalid_targets);
    tcase_add_loop_test(tc, kl_divergence, 0, 6);
    tcase_add_loop_test(tc, pointwise_losses, 0, 6);
    tcase_add_loop_test(tc, backward_by_finite_differences, 0, 3);
    tcase_add_test(tc, nan_in_nan_out);
    tcase_add_test(tc, xent_variant_names_the_plan);
    tcase_add_test(tc, xent_positive_infinity_gives_nan);
    tcase_add_test(tc, repeatable_bit_for_bit);
    tcase_add_test(tc, unaligned_offsets);
    tcase_add_test(tc, bad_input_touches_nothing);
    if (test_golden_path(golden_path, sizeof golden_path, "check_loss", "loss_golden.txt"))
        tcase_add_test(tc, matches_pytorch);
    suite_add_tcase(s, tc);
    return test_main(s);
}
