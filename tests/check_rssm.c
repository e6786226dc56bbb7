/* RSSM ensemble rollout against the double reference: MEAN over 50 steps, SAMPLE draws and their
 * reproducibility, every output and metric, continuation from the returned state, hidden sizes
 * above the work-group limit, invalid configurations. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ens {
    size_t E, D, G, C, F, K, S;
    int shared_f;
    float *w[8]; /* w_ih, w_hh, b_ih, b_hh, w_p, b_p, w_y, b_y */
    float *h0, *z0, *f0, *y0;
    oclml_tensor *tw[8], *th, *tz, *tf, *ty0;
    oclml_rssm_weights weights;
    oclml_rssm_state start;
} ens;

static oclml_tensor *make(int nd, size_t a, size_t b, size_t c, float *data) {
    size_t sh[3] = {a, b, c};
    return test_tensor_from(nd, sh, data);
}

static float *rnd(size_t n, float scale) {
    float *v = test_floats(n);
    test_random(v, n, -scale, scale);
    return v;
}

static void ens_make(ens *m, size_t E, size_t D, size_t G, size_t C, size_t F, size_t K,
                     int shared_f) {
    memset(m, 0, sizeof *m);
    m->E = E, m->D = D, m->G = G, m->C = C, m->F = F, m->K = K, m->S = G * C,
    m->shared_f = shared_f;
    size_t S = m->S, IN = F + S;
    float si = 1.0f / sqrtf((float)IN), sd = 1.0f / sqrtf((float)D);
    m->w[0] = rnd(E * 3 * D * IN, si);
    m->w[1] = rnd(E * 3 * D * D, sd);
    m->w[2] = rnd(E * 3 * D, sd);
    m->w[3] = rnd(E * 3 * D, sd);
    m->w[4] = rnd(E * S * D, 2 * sd);
    m->w[5] = rnd(E * S, 0.5f);
    m->w[6] = rnd(E * (D + S), 1.0f / sqrtf((float)(D + S)));
    m->w[7] = rnd(E, 0.5f);
    m->tw[0] = make(3, E, 3 * D, IN, m->w[0]);
    m->tw[1] = make(3, E, 3 * D, D, m->w[1]);
    m->tw[2] = make(2, E, 3 * D, 0, m->w[2]);
    m->tw[3] = make(2, E, 3 * D, 0, m->w[3]);
    m->tw[4] = make(3, E, S, D, m->w[4]);
    m->tw[5] = make(2, E, S, 0, m->w[5]);
    m->tw[6] = make(2, E, D + S, 0, m->w[6]);
    m->tw[7] = make(1, E, 0, 0, m->w[7]);
    m->h0 = rnd(E * D, 1);
    m->z0 = test_floats(E * S);
    for (size_t i = 0; i < E * S; i++) m->z0[i] = 1.0f / (float)C;
    m->f0 = rnd((shared_f ? 1 : E) * F, 1);
    m->y0 = rnd(E, 1);
    m->th = make(2, E, D, 0, m->h0);
    m->tz = make(2, E, S, 0, m->z0);
    m->tf = shared_f ? make(1, F, 0, 0, m->f0) : make(2, E, F, 0, m->f0);
    m->ty0 = make(1, E, 0, 0, m->y0);
    m->weights = (oclml_rssm_weights){m->tw[0], m->tw[1], m->tw[2], m->tw[3],
                                      m->tw[4], m->tw[5], m->tw[6], m->tw[7]};
    m->start = (oclml_rssm_state){m->th, m->tz, m->tf, m->ty0};
}

static void ens_free(ens *m) {
    for (int i = 0; i < 8; i++) {
        oclml_tensor_destroy(m->tw[i]);
        free(m->w[i]);
    }
    oclml_tensor *t[] = {m->th, m->tz, m->tf, m->ty0};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(t[i]);
    free(m->h0);
    free(m->z0);
    free(m->f0);
    free(m->y0);
}

static ref_rssm_args ref_args(const ens *m, const oclml_rssm_params *c) {
    ref_rssm_args a = {c->variant == OCLML_GRU_CHO,
                       c->mode == OCLML_RSSM_SAMPLE,
                       m->E,
                       c->steps,
                       m->D,
                       m->G,
                       m->C,
                       m->F,
                       c->feedback,
                       c->unimix,
                       c->seed,
                       c->step_offset,
                       m->w[0],
                       m->w[1],
                       m->w[2],
                       m->w[3],
                       m->w[4],
                       m->w[5],
                       m->w[6],
                       m->w[7],
                       m->h0,
                       m->z0,
                       m->f0,
                       m->shared_f};
    return a;
}

/* Runs a rollout with every output and checks each against the reference. */
static void full_check(ens *m, const oclml_rssm_params *c, double tol) {
    size_t E = m->E, n = c->steps, D = m->D, S = m->S, F = m->F, En = E * n;
    size_t en[2] = {E, n}, ed[2] = {E, D}, es[2] = {E, S}, ef[2] = {E, F};
    oclml_tensor *Y = test_tensor(2, en), *H = test_tensor(2, en), *N = test_tensor(2, en);
    oclml_tensor *HF = test_tensor(2, ed), *ZF = test_tensor(2, es), *FF = test_tensor(2, ef);
    oclml_tensor *YM = test_tensor(1, &n), *YS = test_tensor(1, &n), *DL = test_tensor(2, en);
    oclml_tensor *VA = test_tensor(1, &E), *SM = test_tensor(1, &E), *TE = test_tensor(1, &E);
    oclml_rssm_outputs o = {Y, H, N, HF, ZF, FF, YM, YS, DL, VA, SM, TE};
    ASSERT_OK(oclml_rssm_rollout(T, c, &m->weights, &m->start, &o));

    ref_rssm_args a = ref_args(m, c);
    double *ry = test_doubles(En), *rh = test_doubles(En), *rn = test_doubles(En),
           *rhf = test_doubles(E * D);
    double *rzf = test_doubles(E * S), *rff = test_doubles(E * F);
    ref_rssm_rollout(&a, ry, rh, rn, rhf, rzf, rff);
    float *out = test_floats(En > E * (D + S + F) ? En : E * (D + S + F));
    char what[96];
#define CHECK(t, count, ref, name)                                                              \
    do {                                                                                        \
        test_read(t, out, count);                                                               \
        snprintf(what, sizeof what, "rssm %s E%zu T%zu D%zu G%zu C%zu %s", name, E, n, D, m->G, \
                 m->C, c->mode ? "sample" : "mean");                                            \
        test_assert_close(what, out, ref, count, tol);                                          \
    } while (0)
    CHECK(Y, En, ry, "y");
    CHECK(H, En, rh, "entropy");
    CHECK(N, En, rn, "hnorm");
    CHECK(HF, E * D, rhf, "h_final");
    CHECK(ZF, E * S, rzf, "z_final");
    CHECK(FF, E * F, rff, "f_final");
    /* Summary metrics from the reference trajectory. */
    double *mean = test_doubles(n), *sd = test_doubles(n), *dl = test_doubles(En);
    double *var = test_doubles(E), *sm = test_doubles(E), *te = test_doubles(E);
    for (size_t t = 0; t < n; t++) {
        double s1 = 0, s2 = 0;
        for (size_t e = 0; e < E; e++) s1 += ry[e * n + t];
        s1 /= E;
        for (size_t e = 0; e < E; e++) s2 += (ry[e * n + t] - s1) * (ry[e * n + t] - s1);
        mean[t] = s1;
        sd[t] = sqrt(s2 / E);
    }
    for (size_t e = 0; e < E; e++) {
        const double *y = ry + e * n;
        double mu = 0, q = 0, s = 0, h = 0;
        for (size_t t = 0; t < n; t++) {
            double prev = t ? y[t - 1] : m->y0[e];
            dl[e * n + t] = fabs(y[t] - prev);
            if (t >= 1) s += fabs(y[t] - 2 * y[t - 1] + (t >= 2 ? y[t - 2] : m->y0[e]));
            mu += y[t];
            h += rh[e * n + t];
        }
        mu /= n;
        for (size_t t = 0; t < n; t++) q += (y[t] - mu) * (y[t] - mu);
        var[e] = q / n;
        sm[e] = n > 1 ? s / (n - 1) : 0;
        te[e] = h;
    }
    CHECK(YM, n, mean, "y_mean");
    CHECK(YS, n, sd, "y_std");
    CHECK(DL, En, dl, "deltas");
    CHECK(VA, E, var, "variance");
    CHECK(SM, E, sm, "smoothness");
    CHECK(TE, E, te, "total_entropy");
#undef CHECK
    oclml_tensor *all[] = {Y, H, N, HF, ZF, FF, YM, YS, DL, VA, SM, TE};
    for (int i = 0; i < 12; i++) oclml_tensor_destroy(all[i]);
    void *mem[] = {ry, rh, rn, rhf, rzf, rff, out, mean, sd, dl, var, sm, te};
    for (int i = 0; i < 13; i++) free(mem[i]);
}

static oclml_rssm_params config(size_t steps, size_t G, size_t C, size_t K, int variant, int mode) {
    oclml_rssm_params c;
    oclml_rssm_params_init(&c);
    c.steps = steps;
    c.groups = G;
    c.classes = C;
    c.feedback = K;
    c.variant = variant;
    c.mode = mode;
    c.seed = 0x1234567890abcdefull;
    return c;
}

START_TEST(mean_mode_50_steps) {
    ens m;
    ens_make(&m, 3, 32, 4, 4, 12, 8, 0);
    oclml_rssm_params c = config(50, 4, 4, 8, _i, OCLML_RSSM_MEAN);
    full_check(&m, &c, TOL_GEMM);
    ens_free(&m);
}
END_TEST

START_TEST(odd_sizes_shared_f) {
    ens m;
    ens_make(&m, 2, 37, 3, 5, 9, 4, 1);
    oclml_rssm_params c = config(7, 3, 5, 4, _i, OCLML_RSSM_MEAN);
    full_check(&m, &c, TOL_GEMM);
    c.feedback = 0;
    c.steps = 1;
    full_check(&m, &c, TOL_GEMM);
    ens_free(&m);
}
END_TEST

START_TEST(sample_mode_matches_reference_draws) {
    ens m;
    ens_make(&m, 2, 24, 4, 6, 8, 3, 0);
    oclml_rssm_params c = config(5, 4, 6, 3, OCLML_GRU_TORCH, OCLML_RSSM_SAMPLE);
    full_check(&m, &c, TOL_GEMM); /* z_final one-hot equal to the reference's draws */
    /* Run to run: bit-identical. */
    size_t E = m.E, n = c.steps, en[2] = {E, n};
    float a[64], b[64];
    for (int rep = 0; rep < 2; rep++) {
        oclml_tensor *Y = test_tensor(2, en);
        oclml_rssm_outputs o = {.y = Y};
        ASSERT_OK(oclml_rssm_rollout(T, &c, &m.weights, &m.start, &o));
        test_read(Y, rep ? b : a, E * n);
        oclml_tensor_destroy(Y);
    }
    ck_assert(memcmp(a, b, E * n * sizeof(float)) == 0);
    /* Another seed draws differently. */
    c.seed ^= 1;
    oclml_tensor *Y = test_tensor(2, en);
    oclml_rssm_outputs o = {.y = Y};
    ASSERT_OK(oclml_rssm_rollout(T, &c, &m.weights, &m.start, &o));
    test_read(Y, b, E * n);
    ck_assert(memcmp(a, b, E * n * sizeof(float)) != 0);
    oclml_tensor_destroy(Y);
    ens_free(&m);
}
END_TEST

/* 10 steps at once equal 6 steps, then 4 more from the returned state (step_offset 6). */
START_TEST(continues_from_returned_state) {
    ens m;
    ens_make(&m, 2, 16, 2, 4, 6, 3, 0);
    int mode = _i;
    size_t E = 2, D = 16, S = 8, F = 6, e10[2] = {E, 10}, e6[2] = {E, 6}, e4[2] = {E, 4};
    size_t ed[2] = {E, D}, es[2] = {E, S}, ef[2] = {E, F};
    oclml_rssm_params c = config(10, 2, 4, 3, OCLML_GRU_TORCH, mode);
    oclml_tensor *Yall = test_tensor(2, e10), *Y6 = test_tensor(2, e6), *Y4 = test_tensor(2, e4);
    oclml_tensor *HF = test_tensor(2, ed), *ZF = test_tensor(2, es), *FF = test_tensor(2, ef);
    oclml_rssm_outputs all = {.y = Yall};
    ASSERT_OK(oclml_rssm_rollout(T, &c, &m.weights, &m.start, &all));
    c.steps = 6;
    oclml_rssm_outputs first = {.y = Y6, .h_final = HF, .z_final = ZF, .f_final = FF};
    ASSERT_OK(oclml_rssm_rollout(T, &c, &m.weights, &m.start, &first));
    c.steps = 4;
    c.step_offset = 6;
    oclml_rssm_state next = {HF, ZF, FF, NULL};
    oclml_rssm_outputs second = {.y = Y4};
    ASSERT_OK(oclml_rssm_rollout(T, &c, &m.weights, &next, &second));
    float ya[20], y6[12], y4[8];
    test_read(Yall, ya, 20);
    test_read(Y6, y6, 12);
    test_read(Y4, y4, 8);
    for (size_t e = 0; e < E; e++)
        for (size_t t = 0; t < 10; t++) {
            float part = t < 6 ? y6[e * 6 + t] : y4[e * 4 + t - 6];
            ck_assert_msg(fabsf(part - ya[e * 10 + t]) <= 1e-5f * (1 + fabsf(ya[e * 10 + t])),
                          "member %zu step %zu: continued %g vs whole %g", e, t, part,
                          ya[e * 10 + t]);
        }
    oclml_tensor *t6[] = {Yall, Y6, Y4, HF, ZF, FF};
    for (int i = 0; i < 6; i++) oclml_tensor_destroy(t6[i]);
    ens_free(&m);
}
END_TEST

START_TEST(hidden_above_work_group_limit) {
    ens m;
    ens_make(&m, 2, 1536, 4, 8, 16, 4, 0);
    oclml_rssm_params c = config(3, 4, 8, 4, OCLML_GRU_TORCH, OCLML_RSSM_MEAN);
    full_check(&m, &c, TOL_GEMM);
    ens_free(&m);
}
END_TEST

/* The split rollout (P work-groups per member, synced through global memory) against the
 * reference on any device: P = 2, 3, 5 where the device has that many compute units (a member's
 * work-groups must run at once; the guard is off, so a sync that gave up would show as wrong
 * results), with units and groups split unevenly and parts that own no group; D 37 reads rows
 * from memory, D 20 (float4 rows, one chunk per part) keeps them in registers. Then more parts
 * than compute units with the guard on: right results whether the syncs held or gave up. */
START_TEST(split_rollout) {
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    const size_t dims[2][5] = {{37, 3, 5, 9, 4}, {20, 3, 4, 12, 4}}; /* D, G, C, F, k */
    for (int v = 0; v < 2; v++) {
        const size_t *dm = dims[v];
        oclml_rssm_params c = config(12, dm[1], dm[2], dm[4], _i, OCLML_RSSM_MEAN);
        char tuning[64];
        /* Each tuning is a context of its own, so the inputs are made anew in each. */
        const int tries[] = {2, 3, 5, -1};
        for (int i = 0; i < 4; i++) {
            if (tries[i] > 0 && (unsigned)tries[i] > info.compute_units) continue;
            if (tries[i] > 0)
                snprintf(tuning, sizeof tuning, "rssm.guard=0, rssm.split=%d", tries[i]);
            else
                snprintf(tuning, sizeof tuning, "rssm.split=%u", info.compute_units + 2);
            test_retune(tuning);
            ens m;
            ens_make(&m, 1, dm[0], dm[1], dm[2], dm[3], dm[4], 0);
            c.mode = OCLML_RSSM_MEAN;
            full_check(&m, &c, TOL_GEMM);
            if (tries[i] < 0) {
                c.mode = OCLML_RSSM_SAMPLE;
                full_check(&m, &c, TOL_GEMM);
            }
            ens_free(&m);
        }
    }
}
END_TEST

/* The general (work-group) kernel on any device: what GPUs run, here with 8-wide groups and
 * members split in two (rssm.wg = 8 picks it; CPUs default to the one-work-item kernel). The
 * disk cache is off: storing a program binary makes PoCL compile every kernel for every group
 * size first, which takes minutes for this kernel (PoCL still takes about a minute and a half to
 * specialise it for 8-wide groups). */
START_TEST(general_kernel_any_device) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.cache_dir = "";
    o.tuning = "rssm.wg=8, rssm.split=2"; /* GPUs raise 8 to two warps (lib/ops/rssm.c) */
    oclml_ctx_destroy(T);
    T = test_ctx_new(&o);
    ens m;
    ens_make(&m, 2, 12, 2, 3, 5, 2, 0);
    oclml_rssm_params c = config(6, 2, 3, 2, 0, OCLML_RSSM_MEAN);
    full_check(&m, &c, TOL_GEMM);
    c.variant = OCLML_GRU_CHO;
    c.mode = OCLML_RSSM_SAMPLE;
    full_check(&m, &c, TOL_GEMM);
    ens_free(&m);
}
END_TEST

/* A member whose state holds a NaN gives NaN in everything of its own that depends on it, the
 * entropies included (an entropy sum that skipped NaN probabilities stayed finite); the other
 * member is untouched. */
START_TEST(nan_member_stays_nan) {
    ens m;
    ens_make(&m, 2, 8, 2, 3, 4, 2, 0);
    m.h0[3] = NAN; /* member 0 */
    ASSERT_OK(oclml_tensor_write(m.th, m.h0, 2 * 8));
    size_t T6 = 6, en[2] = {2, T6}, two = 2;
    oclml_tensor *Y = test_tensor(2, en), *H = test_tensor(2, en), *TE = test_tensor(1, &two);
    oclml_rssm_outputs o = {.y = Y, .entropy = H, .total_entropy = TE};
    oclml_rssm_params c = config(T6, 2, 3, 2, OCLML_GRU_TORCH, OCLML_RSSM_MEAN);
    ASSERT_OK(oclml_rssm_rollout(T, &c, &m.weights, &m.start, &o));
    float y[12], h[12], te[2];
    test_read(Y, y, 12);
    test_read(H, h, 12);
    test_read(TE, te, 2);
    for (size_t t = 0; t < T6; t++) {
        ck_assert_msg(isnan(y[t]) && isnan(h[t]), "member 0 step %zu: y %g, entropy %g", t, y[t],
                      h[t]);
        ck_assert_msg(isfinite(y[T6 + t]) && isfinite(h[T6 + t]), "member 1 step %zu", t);
    }
    ck_assert_msg(isnan(te[0]) && isfinite(te[1]), "total entropy %g %g", te[0], te[1]);
    oclml_tensor_destroy(Y);
    oclml_tensor_destroy(H);
    oclml_tensor_destroy(TE);
    ens_free(&m);
}
END_TEST

START_TEST(invalid_configurations) {
    ens m;
    ens_make(&m, 2, 8, 2, 3, 4, 2, 0);
    size_t en[2] = {2, 5};
    oclml_tensor *Y = test_tensor(2, en), *Ybad = test_tensor(2, (size_t[]){2, 4});
    oclml_rssm_outputs o = {.y = Y};
    oclml_rssm_params c = config(5, 2, 3, 2, OCLML_GRU_TORCH, OCLML_RSSM_MEAN);
    oclml_rssm_params bad = c;
    bad.groups = 3; /* G * C = 9, S = 6 */
    ASSERT_STATUS(oclml_rssm_rollout(T, &bad, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(T), "G * C"));
    /* A product that wraps around to S (2^63 * 2 + 6 = 6 mod 2^64) is no match either. */
    bad.groups = ((size_t)1 << (sizeof(size_t) * 8 - 1)) + 3;
    bad.classes = 2;
    ASSERT_STATUS(oclml_rssm_rollout(T, &bad, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    /* A config not filled by oclml_rssm_params_init is refused. */
    bad = c;
    bad.struct_size = 0;
    ASSERT_STATUS(oclml_rssm_rollout(T, &bad, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    bad = c;
    bad.feedback = 5; /* k > F = 4 */
    ASSERT_STATUS(oclml_rssm_rollout(T, &bad, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    bad = c;
    bad.unimix = 1.0f;
    ASSERT_STATUS(oclml_rssm_rollout(T, &bad, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    bad.unimix = -0.1f;
    ASSERT_STATUS(oclml_rssm_rollout(T, &bad, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    bad = c;
    bad.steps = 0;
    ASSERT_STATUS(oclml_rssm_rollout(T, &bad, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    bad = c;
    bad.mode = (oclml_rssm_mode)7;
    ASSERT_STATUS(oclml_rssm_rollout(T, &bad, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    oclml_rssm_outputs ob = {.y = Ybad};
    ASSERT_STATUS(oclml_rssm_rollout(T, &c, &m.weights, &m.start, &ob), OCLML_ERR_INVALID_SHAPE);
    oclml_rssm_weights wb = m.weights;
    wb.w_p = m.weights.w_hh;
    ASSERT_STATUS(oclml_rssm_rollout(T, &c, &wb, &m.start, &o), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_rssm_rollout(T, &c, NULL, &m.start, &o), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_rssm_rollout(NULL, &c, &m.weights, &m.start, &o), OCLML_ERR_NULL_POINTER);
    /* NULL params are the defaults, whose 16 x 16 latent is not this model's */
    ASSERT_STATUS(oclml_rssm_rollout(T, NULL, &m.weights, &m.start, &o), OCLML_ERR_INVALID_CONFIG);
    ASSERT_STATUS(oclml_rssm_params_init(NULL), OCLML_ERR_NULL_POINTER);
    float out[10];
    test_read(Y, out, 10);
    for (int i = 0; i < 10; i++) ck_assert(isnan(out[i]));
    oclml_tensor_destroy(Y);
    oclml_tensor_destroy(Ybad);
    ens_free(&m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rssm");
    TCase *tc = tcase_create("rssm");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, mean_mode_50_steps, 0, 2);
    tcase_add_loop_test(tc, odd_sizes_shared_f, 0, 2);
    tcase_add_test(tc, sample_mode_matches_reference_draws);
    tcase_add_loop_test(tc, continues_from_returned_state, 0, 2);
    tcase_add_test(tc, hidden_above_work_group_limit);
    tcase_add_loop_test(tc, split_rollout, 0, 2);
    /* The GPUs' general kernel takes PoCL about four minutes to compile: in the sweep. */
    if (test_sweep()) tcase_add_test(tc, general_kernel_any_device);
    tcase_add_test(tc, nan_member_stays_nan);
    tcase_add_test(tc, invalid_configurations);
    suite_add_tcase(s, tc);
    return test_main(s);
}
