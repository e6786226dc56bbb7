/* Attention on bf16 and fp16 tensors (q, k, v, o, dout, dq, dk, dv of any dtype; lse fp32):
 * forward and backward against the double reference from the inputs as their dtype holds them,
 * each output within its dtype's unit roundoff of the reference (tolerance.h) plus the fp32
 * op's own error on the terms' magnitude (the backward's also o's rounding: it reads the o the
 * forward wrote, as PyTorch's does); GQA and causal masking; the plan; lse in 16 bits
 * refused. The native 16-bit forward (attention.lp_mma=2: its kernel emulated here, the tensor
 * cores on a GPU that has them) in both layouts and dtypes, every causal alignment, GQA, tails,
 * rows that see no key and NaN keys; the stand-ins' backward from its o and lse. The native
 * 16-bit backward (attention.lp_bwd_mma=2, likewise) in both layouts and dtypes, every causal
 * alignment, GQA, tails, rows that see no key, a NaN value row, repeatability and bad
 * arguments. */
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

/* The products' own rounding beyond fp32's: with the tensor cores, P and dS go in as TF32
 * (ONE_TF32: the 16-bit inputs are exact there, the values the kernel forms are not). */
static double op_u;

/* Within u of dt on the value, and the fp32 op's error plus extra_u (the rounding of an input
 * that the reference holds exactly: the backward's o) on the terms' magnitude. */
static void check_out(const char *what, oclml_dtype dt, const float *got, const double *ref,
                      const double *scale, double extra_u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const double tol = test_unit_roundoff(dt) * fabs(ref[i]) +
                           (2e-5 + extra_u + op_u) * (scale ? scale[i] : 1.0) +
                           (dt == OCLML_FLOAT16 ? TOL_ABS_FP16 : 0);
        ck_assert_msg(fabs(got[i] - ref[i]) <= tol, "%s (%s) [%zu] = %.8g, want %.8g (tol %.2g)",
                      what, oclml_dtype_name(dt), i, got[i], ref[i], tol);
    }
}

/* i: bf16 in and out (causal), fp16 in with fp32 out (GQA); 2 and 3 the same on the tensor-core
 * kernels (emulated here: attention.mma=2), one TF32 product a step. */
START_TEST(forward_and_backward_match_reference) {
    const bool cores = _i >= 2;
    /* the stand-ins, forward and backward (the native kernels' tests are below) */
    test_retune(cores ? "attention.mma=2 attention.lp_mma=0 attention.lp_bwd_mma=0"
                      : "attention.lp_mma=0 attention.lp_bwd_mma=0");
    const int form = _i % 2;
    const oclml_dtype in = form ? OCLML_FLOAT16 : OCLML_BFLOAT16, out = form ? OCLML_FLOAT32 : in;
    const size_t B = 1, H = 4, Hkv = form ? 2 : 4, Lq = 33, Lk = 40, D = 16;
    const size_t qs[4] = {B, H, Lq, D}, ks[4] = {B, Hkv, Lk, D}, ls[3] = {B, H, Lq};
    float *q, *k, *v, *o, *dout;
    oclml_tensor *Q = test_tensor_held(in, 4, qs, -1, 1, &q),
                 *K = test_tensor_held(in, 4, ks, -1, 1, &k),
                 *V = test_tensor_held(in, 4, ks, -1, 1, &v),
                 *O = test_tensor_held(out, 4, qs, 0, 0, &o),
                 *DO = test_tensor_held(in, 4, qs, -1, 1, &dout), *L = test_tensor(3, ls);
    oclml_attention_params p;
    oclml_attention_params_init(&p);
    p.causal = form ? OCLML_CAUSAL_NONE : OCLML_CAUSAL_BOTTOM_RIGHT;
    char plan[512];
    ASSERT_OK(oclml_attention_plan(T, &p, Q, K, V, plan, sizeof plan));
    ck_assert_msg(strstr(plan, "converted to fp32") != NULL, "%s", plan);
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    if (cores && info.max_work_group_size >= 128) /* the kernels meant (CI's 16-wide run: FMA) */
        ck_assert_msg(strstr(plan, "forward: TF32 tensor cores (16-bit inputs") &&
                          !strstr(plan, "3xTF32"),
                      "%s", plan);
    /* GPUs take the tensor cores in every case */
    op_u = strstr(plan, "(16-bit inputs") ? 0x1p-11 : 0;
    ASSERT_OK(oclml_attention(T, &p, Q, K, V, O, L));
    const size_t nq = B * H * Lq * D, nk = B * Hkv * Lk * D;
    test_read(O, o, nq);
    ref_attention_args ra = {.B = B,
                             .H = H,
                             .Hkv = Hkv,
                             .Lq = Lq,
                             .Lk = Lk,
                             .D = D,
                             .causal = p.causal,
                             .wl = -1,
                             .wr = -1};
    double *ro = test_doubles(nq), *rl = test_doubles(B * H * Lq);
    ref_attention(&ra, q, k, v, ro, rl);
    check_out("o", out, o, ro, NULL, 0, nq);
    /* The backward, from the o the forward wrote; dq and dv in the output dtype, dk in the
     * input one. */
    oclml_tensor *DQ = test_tensor_held(out, 4, qs, 0, 0, NULL),
                 *DK = test_tensor_held(in, 4, ks, 0, 0, NULL),
                 *DV = test_tensor_held(out, 4, ks, 0, 0, NULL);
    ASSERT_OK(oclml_attention_backward(T, &p, Q, K, V, O, L, DO, DQ, DK, DV, NULL));
    double *rq = test_doubles(nq), *rk = test_doubles(nk), *rv = test_doubles(nk),
           *sq = test_doubles(nq), *sk = test_doubles(nk), *sv = test_doubles(nk);
    ref_attention_backward(&ra, q, k, v, dout, rq, rk, rv, NULL, sq, sk, sv, NULL);
    float *g = test_floats(nq > nk ? nq : nk);
    test_read(DQ, g, nq);
    check_out("dq", out, g, rq, sq, test_unit_roundoff(out), nq);
    test_read(DK, g, nk);
    check_out("dk", in, g, rk, sk, test_unit_roundoff(out), nk);
    test_read(DV, g, nk);
    check_out("dv", out, g, rv, sv, test_unit_roundoff(out), nk);
    free(q), free(k), free(v), free(o), free(dout), free(g);
    free(ro), free(rl), free(rq), free(rk), free(rv), free(sq), free(sk), free(sv);
    oclml_tensor *all[] = {Q, K, V, O, DO, L, DQ, DK, DV};
    for (int i = 0; i < 9; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

/* ---- the native 16-bit forward (attention.lp_mma=2) ---- */

/* Its cases: q, k, v in ab, o in out; four programs (ab, out, head dim, layout) between them.
 * Lq and Lk off the 64-row and 64-key blocks; case 3's first 8 rows see no key (bottom-right,
 * Lq > Lk); case 4 spans two row blocks and three key blocks. */
typedef struct native_case {
    oclml_dtype ab, out;
    int blhd, causal;
    size_t B, H, Hkv, Lq, Lk, D;
} native_case;
static const native_case NATIVE_CASES[] = {
    {OCLML_BFLOAT16, OCLML_BFLOAT16, 0, OCLML_CAUSAL_NONE, 1, 2, 2, 37, 45, 16},
    {OCLML_BFLOAT16, OCLML_BFLOAT16, 0, OCLML_CAUSAL_TOP_LEFT, 2, 4, 2, 37, 45, 16},
    {OCLML_FLOAT16, OCLML_FLOAT32, 1, OCLML_CAUSAL_BOTTOM_RIGHT, 1, 4, 1, 37, 45, 64},
    {OCLML_FLOAT16, OCLML_FLOAT32, 1, OCLML_CAUSAL_BOTTOM_RIGHT, 1, 2, 2, 45, 37, 64},
    {OCLML_BFLOAT16, OCLML_FLOAT32, 0, OCLML_CAUSAL_TOP_LEFT, 1, 2, 1, 70, 130, 64},
    {OCLML_FLOAT16, OCLML_BFLOAT16, 0, OCLML_CAUSAL_NONE, 1, 3, 1, 20, 9, 16},
};
#define N_NATIVE_CASES ((int)(sizeof NATIVE_CASES / sizeof NATIVE_CASES[0]))

/* One case's tensors (fresh random q, k, v as their dtype holds them; o and lse NaN-poisoned)
 * and the reference's arguments. */
typedef struct native_run {
    native_case c;
    oclml_tensor *Q, *K, *V, *O, *L;
    float *q, *k, *v;
    size_t nq, nk, nl;
    ref_attention_args ra;
    oclml_attention_params p;
} native_run;

static void native_setup(native_run *r, const native_case *c) {
    r->c = *c;
    const size_t qs[4] = {c->B, c->blhd ? c->Lq : c->H, c->blhd ? c->H : c->Lq, c->D},
                 ks[4] = {c->B, c->blhd ? c->Lk : c->Hkv, c->blhd ? c->Hkv : c->Lk, c->D},
                 ls[3] = {c->B, c->H, c->Lq};
    r->Q = test_tensor_held(c->ab, 4, qs, -1, 1, &r->q);
    r->K = test_tensor_held(c->ab, 4, ks, -1, 1, &r->k);
    r->V = test_tensor_held(c->ab, 4, ks, -1, 1, &r->v);
    r->O = test_tensor_held(c->out, 4, qs, 0, 0, NULL);
    r->L = test_tensor(3, ls);
    r->nq = c->B * c->H * c->Lq * c->D;
    r->nk = c->B * c->Hkv * c->Lk * c->D;
    r->nl = c->B * c->H * c->Lq;
    r->ra = (ref_attention_args){.B = c->B,
                                 .H = c->H,
                                 .Hkv = c->Hkv,
                                 .Lq = c->Lq,
                                 .Lk = c->Lk,
                                 .D = c->D,
                                 .blhd = c->blhd,
                                 .causal = c->causal,
                                 .wl = -1,
                                 .wr = -1};
    oclml_attention_params_init(&r->p);
    r->p.causal = (oclml_attention_causal)c->causal;
    r->p.layout = c->blhd ? OCLML_ATTENTION_BLHD : OCLML_ATTENTION_BHLD;
}

static void native_free(native_run *r) {
    free(r->q), free(r->k), free(r->v);
    oclml_tensor *all[] = {r->Q, r->K, r->V, r->O, r->L};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
}

/* The plan names the native kernel for the forward (and a backward: the native one on a GPU, the
 * stand-ins on PoCL by default), where the device's work-groups hold its 4 warps (CI's 16-wide
 * PoCL run: the stand-ins, checked the same way). */
static void native_assert_plan(const native_run *r) {
    char plan[512], want[96];
    ASSERT_OK(oclml_attention_plan(T, &r->p, r->Q, r->K, r->V, plan, sizeof plan));
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    if (info.max_work_group_size < 128) return;
    snprintf(want, sizeof want, "forward: %s tensor cores", oclml_dtype_name(r->c.ab));
    ck_assert_msg(strstr(plan, want) && strstr(plan, "(m16n8k16), ") &&
                      strstr(plan, " keys a block") && strstr(plan, "; backward: "),
                  "%s", plan);
}

/* o and lse against the double reference. o: within u_out |ref| + (u_ab + 2e-5) sum_j p_j |v_j|
 * (+ fp16's subnormal floor): o = sum_j P_j v_j / l, where each P_j = exp(s_j - m) goes into
 * P V rounded to the AB dtype (relative error <= u_ab, 2^-8 bf16, 2^-11 fp16: a term's error
 * <= u_ab p_j |v_j| with p_j = P_j / l) while l sums the unrounded P_j, then o is rounded once
 * to its dtype; 2e-5 of the same terms covers fp32's own rounding (scores, exp, sums), as the
 * fp32 op's checks allow. sum_j p_j |v_j| is the reference attention with |v|. lse (fp32
 * throughout): within 5e-5 (1 + |ref|). A row that sees no key: o = 0 and lse = -inf exactly;
 * a NaN reference (a NaN input the row sees): NaN. */
static void native_check(const native_run *r) {
    const native_case *c = &r->c;
    float *o = test_floats(r->nq), *l = test_floats(r->nl), *av = test_floats(r->nk);
    double *ro = test_doubles(r->nq), *rl = test_doubles(r->nl), *pv = test_doubles(r->nq);
    test_read(r->O, o, r->nq);
    test_read(r->L, l, r->nl);
    ref_attention(&r->ra, r->q, r->k, r->v, ro, rl);
    for (size_t i = 0; i < r->nk; i++) av[i] = fabsf(r->v[i]);
    ref_attention(&r->ra, r->q, r->k, av, pv, NULL);
    const double u_out = test_unit_roundoff(c->out), u_ab = test_unit_roundoff(c->ab);
    for (size_t i = 0; i < r->nq; i++) {
        if (isnan(ro[i])) {
            ck_assert_msg(isnan(o[i]), "o [%zu] = %g, want NaN", i, o[i]);
            continue;
        }
        const double tol = u_out * fabs(ro[i]) + (u_ab + 2e-5) * pv[i] + test_abs_floor(c->out);
        ck_assert_msg(fabs(o[i] - ro[i]) <= tol,
                      "o (%s in, %s out) [%zu] = %.8g, want %.8g (tol %.2g)",
                      oclml_dtype_name(c->ab), oclml_dtype_name(c->out), i, o[i], ro[i], tol);
    }
    for (size_t i = 0; i < r->nl; i++) {
        if (isnan(rl[i]) || isinf(rl[i])) {
            ck_assert_msg(isnan(rl[i]) ? isnan(l[i]) : l[i] == (float)rl[i],
                          "lse [%zu] = %g, want %g", i, l[i], rl[i]);
            continue;
        }
        ck_assert_msg(fabs(l[i] - rl[i]) <= 5e-5 * (1 + fabs(rl[i])), "lse [%zu] = %.8g, want %.8g",
                      i, l[i], rl[i]);
    }
    /* a row that sees no key: o exactly 0 (the tolerance above is 0 there too) */
    free(o), free(l), free(av), free(ro), free(rl), free(pv);
}

START_TEST(native_forward_matches_reference) {
    test_retune("attention.lp_mma=2");
    native_run r;
    native_setup(&r, &NATIVE_CASES[_i]);
    native_assert_plan(&r);
    ASSERT_OK(oclml_attention(T, &r.p, r.Q, r.K, r.V, r.O, r.L));
    native_check(&r);
    native_free(&r);
}
END_TEST

/* The kernel's other tiles on the cases that span several row and key blocks: one m16 tile a
 * warp with 32-key blocks staged in place; two with 32-key blocks copied ahead; one with 64-key
 * blocks copied ahead; one with 32-key blocks copied ahead at head dim 16 (fewer 16-byte copies
 * a block than work-items); eight warps a work-group with 128-key blocks copied ahead. */
START_TEST(native_forward_tiles) {
    static const char *const tiles[5] = {"attention.lp_mma=2 attention.lp_fwd_tile=1:32:1:0",
                                         "attention.lp_mma=2 attention.lp_fwd_tile=2:32:2:0",
                                         "attention.lp_mma=2 attention.lp_fwd_tile=1:64:2:0",
                                         "attention.lp_mma=2 attention.lp_fwd_tile=1:32:2:0",
                                         "attention.lp_mma=2 attention.lp_fwd_tile=1:128:2:8"};
    test_retune(tiles[_i]);
    native_run r;
    native_setup(&r, &NATIVE_CASES[_i == 3 ? 0 : _i == 2 ? 3 : 4]);
    native_assert_plan(&r);
    ASSERT_OK(oclml_attention(T, &r.p, r.Q, r.K, r.V, r.O, r.L));
    native_check(&r);
    native_free(&r);
}
END_TEST

/* A NaN in one key of K (batch 0, key head 1, key 20) under a top-left causal mask: exactly the
 * rows of the query heads that read that key head (2 and 3) at positions 20 on see it, and only
 * their o and lse are NaN. */
START_TEST(native_forward_nan_key_reaches_rows_that_see_it) {
    test_retune("attention.lp_mma=2");
    native_run r;
    native_setup(&r, &NATIVE_CASES[1]);
    const native_case *c = &r.c;
    r.k[((0 * c->Hkv + 1) * c->Lk + 20) * c->D + 3] = NAN;
    ASSERT_OK(oclml_tensor_write(r.K, r.k, r.nk));
    ASSERT_OK(oclml_attention(T, &r.p, r.Q, r.K, r.V, r.O, r.L));
    float *l = test_floats(r.nl);
    test_read(r.L, l, r.nl);
    for (size_t b = 0; b < c->B; b++)
        for (size_t h = 0; h < c->H; h++)
            for (size_t i = 0; i < c->Lq; i++) {
                const size_t row = (b * c->H + h) * c->Lq + i;
                const bool sees = b == 0 && h / (c->H / c->Hkv) == 1 && i >= 20;
                ck_assert_msg(sees == (bool)isnan(l[row]), "lse (b %zu, h %zu, i %zu) = %g", b, h,
                              i, l[row]);
            }
    native_check(&r); /* o NaN exactly where the reference's is */
    free(l);
    native_free(&r);
}
END_TEST

/* The backward (the stand-ins') from the native forward's o and lse matches the reference
 * within the forward's checks plus o's error: it reads o (rounded to its dtype and off by P's
 * rounding, u_out + u_ab of the terms) in delta = rowsum(dO o). */
START_TEST(native_forward_backward_matches_reference) {
    test_retune("attention.lp_mma=2");
    native_run r;
    native_setup(&r, &NATIVE_CASES[1]);
    const native_case *c = &r.c;
    ASSERT_OK(oclml_attention(T, &r.p, r.Q, r.K, r.V, r.O, r.L));
    const size_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D};
    float *dout;
    oclml_tensor *DO = test_tensor_held(c->ab, 4, qs, -1, 1, &dout),
                 *DQ = test_tensor_held(c->out, 4, qs, 0, 0, NULL),
                 *DK = test_tensor_held(c->ab, 4, ks, 0, 0, NULL),
                 *DV = test_tensor_held(c->out, 4, ks, 0, 0, NULL);
    char plan[512];
    ASSERT_OK(oclml_attention_plan(T, &r.p, r.Q, r.K, r.V, plan, sizeof plan));
    op_u = strstr(plan, "TF32") ? 0x1p-11 : 0;
    ASSERT_OK(oclml_attention_backward(T, &r.p, r.Q, r.K, r.V, r.O, r.L, DO, DQ, DK, DV, NULL));
    double *rq = test_doubles(r.nq), *rk = test_doubles(r.nk), *rv = test_doubles(r.nk),
           *sq = test_doubles(r.nq), *sk = test_doubles(r.nk), *sv = test_doubles(r.nk);
    ref_attention_backward(&r.ra, r.q, r.k, r.v, dout, rq, rk, rv, NULL, sq, sk, sv, NULL);
    const double extra = test_unit_roundoff(c->out) + test_unit_roundoff(c->ab);
    float *g = test_floats(r.nq > r.nk ? r.nq : r.nk);
    test_read(DQ, g, r.nq);
    check_out("dq", c->out, g, rq, sq, extra, r.nq);
    test_read(DK, g, r.nk);
    check_out("dk", c->ab, g, rk, sk, extra, r.nk);
    test_read(DV, g, r.nk);
    check_out("dv", c->out, g, rv, sv, extra, r.nk);
    free(dout), free(g), free(rq), free(rk), free(rv), free(sq), free(sk), free(sv);
    oclml_tensor *all[] = {DO, DQ, DK, DV};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
    native_free(&r);
}
END_TEST

/* Bad outputs are refused before anything is written, saying which: o of another shape than q,
 * lse of another than [B, H, Lq]. */
START_TEST(native_forward_refuses_bad_outputs) {
    test_retune("attention.lp_mma=2");
    native_run r;
    native_setup(&r, &NATIVE_CASES[0]);
    const native_case *c = &r.c;
    const size_t wide[4] = {c->B, c->H, c->Lq, 2 * c->D}, short_lse[3] = {c->B, c->H, c->Lq - 1};
    oclml_tensor *O2 = test_tensor_held(c->out, 4, wide, 0, 0, NULL),
                 *L2 = test_tensor(3, short_lse);
    ASSERT_STATUS(oclml_attention(T, &r.p, r.Q, r.K, r.V, O2, r.L), OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "'o'") != NULL, "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_attention(T, &r.p, r.Q, r.K, r.V, r.O, L2), OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "lse") != NULL, "%s", oclml_ctx_last_error(T));
    test_assert_untouched(O2, r.nq * 2);
    test_assert_untouched(r.O, r.nq);
    test_assert_untouched(r.L, r.nl);
    oclml_tensor_destroy(O2), oclml_tensor_destroy(L2);
    native_free(&r);
}
END_TEST

/* ---- the native 16-bit backward (attention.lp_bwd_mma=2) ---- */

/* Its cases: q, k, v, dout in ab; o, dq and dv in out, dk in ab; one program each (ab, out, head
 * dim, layout) but case 4 (case 1's program). Lq and Lk off the blocks; case 2's first 8 rows
 * see no key (bottom-right, Lq > Lk); case 4 spans three query blocks and two key blocks. */
static const native_case BWD_CASES[] = {
    {OCLML_BFLOAT16, OCLML_BFLOAT16, 0, OCLML_CAUSAL_NONE, 1, 2, 2, 37, 45, 16},
    {OCLML_BFLOAT16, OCLML_FLOAT32, 1, OCLML_CAUSAL_TOP_LEFT, 2, 4, 2, 37, 45, 16},
    {OCLML_FLOAT16, OCLML_FLOAT32, 0, OCLML_CAUSAL_BOTTOM_RIGHT, 1, 2, 1, 45, 37, 64},
    {OCLML_FLOAT16, OCLML_FLOAT16, 1, OCLML_CAUSAL_BOTTOM_RIGHT, 1, 4, 2, 37, 45, 64},
    {OCLML_BFLOAT16, OCLML_FLOAT32, 1, OCLML_CAUSAL_TOP_LEFT, 1, 2, 1, 130, 70, 16},
};
#define N_BWD_CASES ((int)(sizeof BWD_CASES / sizeof BWD_CASES[0]))

/* A backward case: native_run's q, k, v, with dout (ab) fresh, o and lse from the double
 * reference (o rounded to its dtype as a forward would write it: the kernels' delta reads it),
 * the gradients NaN-poisoned, and the reference's gradients and their terms' magnitudes. */
typedef struct bwd_run {
    native_run r;
    oclml_tensor *DO, *DQ, *DK, *DV;
    float *dout;
    double *rq, *rk, *rv, *sq, *sk, *sv;
} bwd_run;

static void bwd_setup(bwd_run *b, const native_case *c) {
    native_run *r = &b->r;
    native_setup(r, c);
    const size_t qs[4] = {c->B, c->blhd ? c->Lq : c->H, c->blhd ? c->H : c->Lq, c->D},
                 ks[4] = {c->B, c->blhd ? c->Lk : c->Hkv, c->blhd ? c->Hkv : c->Lk, c->D};
    b->DO = test_tensor_held(c->ab, 4, qs, -1, 1, &b->dout);
    b->DQ = test_tensor_held(c->out, 4, qs, 0, 0, NULL);
    b->DK = test_tensor_held(c->ab, 4, ks, 0, 0, NULL);
    b->DV = test_tensor_held(c->out, 4, ks, 0, 0, NULL);
    b->rq = test_doubles(r->nq), b->sq = test_doubles(r->nq);
    b->rk = test_doubles(r->nk), b->sk = test_doubles(r->nk);
    b->rv = test_doubles(r->nk), b->sv = test_doubles(r->nk);
}

/* o and lse from the reference on the current q, k, v (and the reference's gradients). */
static void bwd_inputs(bwd_run *b) {
    native_run *r = &b->r;
    double *ro = test_doubles(r->nq), *rl = test_doubles(r->nl);
    ref_attention(&r->ra, r->q, r->k, r->v, ro, rl);
    float *o = test_floats(r->nq), *l = test_floats(r->nl);
    for (size_t i = 0; i < r->nq; i++) o[i] = (float)ro[i];
    for (size_t i = 0; i < r->nl; i++) l[i] = (float)rl[i];
    ASSERT_OK(oclml_tensor_write(r->O, o, r->nq));
    ASSERT_OK(oclml_tensor_write(r->L, l, r->nl));
    ref_attention_backward(&r->ra, r->q, r->k, r->v, b->dout, b->rq, b->rk, b->rv, NULL, b->sq,
                           b->sk, b->sv, NULL);
    free(ro), free(rl), free(o), free(l);
}

static void bwd_free(bwd_run *b) {
    free(b->dout), free(b->rq), free(b->rk), free(b->rv), free(b->sq), free(b->sk), free(b->sv);
    oclml_tensor *all[] = {b->DO, b->DQ, b->DK, b->DV};
    for (int i = 0; i < 4; i++) oclml_tensor_destroy(all[i]);
    native_free(&b->r);
}

static oclml_status bwd_call(bwd_run *b) {
    native_run *r = &b->r;
    return oclml_attention_backward(T, &r->p, r->Q, r->K, r->V, r->O, r->L, b->DO, b->DQ, b->DK,
                                    b->DV, NULL);
}

/* Whether the plan names the native backward: where the device's work-groups hold its 4 warps
 * it must (CI's 16-wide PoCL run: the stand-ins, whose TF32 products the checks then allow). */
static bool bwd_native_planned(const bwd_run *b) {
    char plan[512], want[96];
    ASSERT_OK(oclml_attention_plan(T, &b->r.p, b->r.Q, b->r.K, b->r.V, plan, sizeof plan));
    snprintf(want, sizeof want, "backward: %s tensor cores", oclml_dtype_name(b->r.c.ab));
    const bool native = strstr(plan, want) && strstr(plan, "dK/dV 64 keys x");
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    if (info.max_work_group_size >= 128) ck_assert_msg(native, "%s", plan);
    return native;
}

/* One gradient against the reference: within u_out |ref| + (u_ab + extra + 2e-5) s + the out
 * dtype's subnormal floor, s the reference's magnitude of the gradient's terms. The error
 * beyond the output's rounding: dV = P^T dO takes P rounded to the AB dtype (u_ab on each term
 * P |dO|); dK = scale dS^T Q and dQ = scale dS K take dS rounded to it (u_ab on each term
 * |dS| |q| or |dS| |k|), and dS = P (dP - delta) carries delta's error from o's rounding to its
 * dtype (u_o |dO| . |O| a row, within the reference's term magnitude P (|dP| + |dO| . |O|):
 * extra = u_o); 2e-5 of the terms covers fp32's own rounding (scores, exp, the tensor cores'
 * truncating sums), as the fp32 op's checks allow. fp16's subnormal step (test_abs_floor) bounds
 * the rounding of a P or dS below its normal range absolutely: once per term, the other factor
 * and the scale at most 1 here (inputs in [-1, 1)), `terms` terms a sum (G Lq for dk and dv,
 * Lk for dq). A NaN reference wants NaN. */
static void bwd_check(const char *what, oclml_dtype dt, const oclml_tensor *t, const double *ref,
                      const double *mag, oclml_dtype ab, double extra, size_t terms, size_t n) {
    const double u_ab = test_unit_roundoff(ab), floor_ab = test_abs_floor(ab) * (double)terms;
    float *g = test_floats(n);
    test_read(t, g, n);
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i])) {
            ck_assert_msg(isnan(g[i]), "%s [%zu] = %g, want NaN", what, i, g[i]);
            continue;
        }
        const double tol = test_unit_roundoff(dt) * fabs(ref[i]) +
                           (u_ab + extra + 2e-5 + op_u) * mag[i] + test_abs_floor(dt) + floor_ab;
        ck_assert_msg(fabs(g[i] - ref[i]) <= tol, "%s (%s) [%zu] = %.8g, want %.8g (tol %.2g)",
                      what, oclml_dtype_name(dt), i, g[i], ref[i], tol);
    }
    free(g);
}

/* Runs a backward case and checks its gradients against the reference; plan_end, where not
 * NULL, the text the plan must end with where it names the native backward (the tile). */
static void bwd_run_case(const native_case *case_, const char *plan_end) {
    bwd_run b;
    bwd_setup(&b, case_);
    const native_case *c = &b.r.c;
    const bool native = bwd_native_planned(&b);
    op_u = native ? 0 : 0x1p-11;
    if (native && plan_end) {
        char plan[512];
        ASSERT_OK(oclml_attention_plan(T, &b.r.p, b.r.Q, b.r.K, b.r.V, plan, sizeof plan));
        const size_t n = strlen(plan), m = strlen(plan_end);
        ck_assert_msg(n >= m && !strcmp(plan + n - m, plan_end), "plan '%s' does not end '%s'",
                      plan, plan_end);
    }
    bwd_inputs(&b);
    ASSERT_OK(bwd_call(&b));
    const double u_o = test_unit_roundoff(c->out);
    const size_t kv_terms = c->H / c->Hkv * c->Lq;
    bwd_check("dq", c->out, b.DQ, b.rq, b.sq, c->ab, u_o, c->Lk, b.r.nq);
    bwd_check("dk", c->ab, b.DK, b.rk, b.sk, c->ab, u_o, kv_terms, b.r.nk);
    bwd_check("dv", c->out, b.DV, b.rv, b.sv, c->ab, 0, kv_terms, b.r.nk);
    if (c->causal == OCLML_CAUSAL_BOTTOM_RIGHT && c->Lq > c->Lk) {
        /* rows i < Lq - Lk see no key: dq exactly 0 */
        float *g = test_floats(b.r.nq);
        test_read(b.DQ, g, b.r.nq);
        for (size_t h = 0; h < c->H; h++)
            for (size_t i = 0; i < c->Lq - c->Lk; i++)
                for (size_t d = 0; d < c->D; d++) {
                    const size_t at =
                        c->blhd ? (i * c->H + h) * c->D + d : (h * c->Lq + i) * c->D + d;
                    ck_assert_msg(g[at] == 0.0f, "dq (h %zu, i %zu) = %g, want 0", h, i, g[at]);
                }
        free(g);
    }
    bwd_free(&b);
}

START_TEST(native_backward_matches_reference) {
    test_retune("attention.lp_bwd_mma=2");
    bwd_run_case(&BWD_CASES[_i], NULL);
}
END_TEST

/* The kernels' other tiles (attention.lp_bwd_tile: rows a block, copies ahead 1 no 2 yes, K and
 * V 1 in registers 2 from local memory) on cases whose walks span several blocks: 32-row blocks
 * staged in place with K and V in registers (case 4: two query heads a key head, 130 rows, 70
 * keys); 64-row blocks copied ahead with K and V from local memory (case 4: six query blocks a
 * work-group, both buffers reused); 32-row blocks copied ahead with K and V from local memory at
 * head dim 64 (case 3); 32-row blocks copied ahead with K and V in registers at head dim 16
 * (case 0: fewer 16-byte copies a block than work-items). */
START_TEST(native_backward_tiles) {
    static const char *const tiles[4] = {"attention.lp_bwd_mma=2 attention.lp_bwd_tile=32:1:1",
                                         "attention.lp_bwd_mma=2 attention.lp_bwd_tile=64:2:2",
                                         "attention.lp_bwd_mma=2 attention.lp_bwd_tile=32:2:2",
                                         "attention.lp_bwd_mma=2 attention.lp_bwd_tile=32:2:1"};
    static const char *const names[4] = {
        "dK/dV 64 keys x 32 query rows a block, dQ 64 rows x 32 keys a block",
        "dK/dV 64 keys x 64 query rows a block (K and V from local memory), dQ 64 rows x 64 keys "
        "a block, the next copied ahead",
        "dK/dV 64 keys x 32 query rows a block (K and V from local memory), dQ 64 rows x 32 keys "
        "a block, the next copied ahead",
        "dK/dV 64 keys x 32 query rows a block, dQ 64 rows x 32 keys a block, the next copied "
        "ahead"};
    test_retune(tiles[_i]);
    bwd_run_case(&BWD_CASES[_i == 3 ? 0 : _i == 2 ? 3 : 4], names[_i]);
}
END_TEST

/* A NaN in one value row (batch 0, key head 1, key 20) under a top-left causal mask (GQA,
 * BLHD): the gradients are NaN exactly where the reference's are: dq and the dk of every key
 * of that head that a row seeing key 20 sees (their delta = dO . O is NaN), never dv (P^T dO
 * does not read V) nor another head's. */
START_TEST(native_backward_nan_value_reaches_what_depends_on_it) {
    test_retune("attention.lp_bwd_mma=2");
    bwd_run b;
    bwd_setup(&b, &BWD_CASES[1]);
    const native_case *c = &b.r.c;
    op_u = bwd_native_planned(&b) ? 0 : 0x1p-11;
    b.r.v[((0 * c->Lk + 20) * c->Hkv + 1) * c->D + 3] = NAN; /* BLHD */
    ASSERT_OK(oclml_tensor_write(b.r.V, b.r.v, b.r.nk));
    bwd_inputs(&b);
    ASSERT_OK(bwd_call(&b));
    size_t nan_q = 0, nan_k = 0;
    for (size_t i = 0; i < b.r.nq; i++) nan_q += isnan(b.rq[i]) != 0;
    for (size_t i = 0; i < b.r.nk; i++) nan_k += isnan(b.rk[i]) != 0;
    for (size_t i = 0; i < b.r.nk; i++) ck_assert(!isnan(b.rv[i]));
    /* rows 20 .. 36 of query heads 2, 3; keys 0 .. 36 of key head 1 (batch 0) */
    ck_assert_uint_eq(nan_q, 2 * 17 * c->D);
    ck_assert_uint_eq(nan_k, 37 * c->D);
    const double u_o = test_unit_roundoff(c->out);
    const size_t kv_terms = c->H / c->Hkv * c->Lq;
    bwd_check("dq", c->out, b.DQ, b.rq, b.sq, c->ab, u_o, c->Lk, b.r.nq);
    bwd_check("dk", c->ab, b.DK, b.rk, b.sk, c->ab, u_o, kv_terms, b.r.nk);
    bwd_check("dv", c->out, b.DV, b.rv, b.sv, c->ab, 0, kv_terms, b.r.nk);
    bwd_free(&b);
}
END_TEST

/* Two calls give the same bits (each output element summed by one work-item in a fixed order,
 * GQA's heads in turn). */
START_TEST(native_backward_is_repeatable) {
    test_retune("attention.lp_bwd_mma=2");
    bwd_run b;
    bwd_setup(&b, &BWD_CASES[1]);
    bwd_inputs(&b);
    oclml_tensor *outs[3] = {b.DQ, b.DK, b.DV};
    const size_t n[3] = {b.r.nq, b.r.nk, b.r.nk};
    float *first[3], *second[3];
    ASSERT_OK(bwd_call(&b));
    for (int t = 0; t < 3; t++) first[t] = test_floats(n[t]), test_read(outs[t], first[t], n[t]);
    ASSERT_OK(bwd_call(&b));
    for (int t = 0; t < 3; t++) {
        second[t] = test_floats(n[t]);
        test_read(outs[t], second[t], n[t]);
        ck_assert_msg(!memcmp(first[t], second[t], n[t] * sizeof(float)), "output %d differs", t);
        free(first[t]), free(second[t]);
    }
    bwd_free(&b);
}
END_TEST

/* Bad arguments are refused before anything is written, saying which: dk of another shape than
 * k, lse of another than [B, H, Lq], dq overlapping dout. */
START_TEST(native_backward_refuses_bad_arguments) {
    test_retune("attention.lp_bwd_mma=2");
    bwd_run b;
    bwd_setup(&b, &BWD_CASES[0]);
    native_run *r = &b.r;
    const native_case *c = &r->c;
    const size_t wide[4] = {c->B, c->Hkv, c->Lk, 2 * c->D}, short_lse[3] = {c->B, c->H, c->Lq - 1};
    oclml_tensor *DK2 = test_tensor_held(c->ab, 4, wide, 0, 0, NULL),
                 *L2 = test_tensor(3, short_lse);
    ASSERT_STATUS(oclml_attention_backward(T, &r->p, r->Q, r->K, r->V, r->O, r->L, b.DO, b.DQ, DK2,
                                           b.DV, NULL),
                  OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "'dk'") != NULL, "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_attention_backward(T, &r->p, r->Q, r->K, r->V, r->O, L2, b.DO, b.DQ, b.DK,
                                           b.DV, NULL),
                  OCLML_ERR_INVALID_SHAPE);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "lse") != NULL, "%s", oclml_ctx_last_error(T));
    ASSERT_STATUS(oclml_attention_backward(T, &r->p, r->Q, r->K, r->V, r->O, r->L, b.DO, b.DO, b.DK,
                                           b.DV, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(oclml_ctx_last_error(T), "'dq'") != NULL, "%s", oclml_ctx_last_error(T));
    test_assert_untouched(b.DQ, r->nq);
    test_assert_untouched(b.DK, r->nk);
    test_assert_untouched(b.DV, r->nk);
    test_assert_untouched(DK2, r->nk * 2);
    oclml_tensor_destroy(DK2), oclml_tensor_destroy(L2);
    bwd_free(&b);
}
END_TEST

/* lse stays fp32: a 16-bit one is refused before o is written. */
START_TEST(lse_in_16_bits_refused) {
    const size_t qs[4] = {1, 2, 8, 8}, ls[3] = {1, 2, 8};
    float *q, *o;
    oclml_tensor *Q = test_tensor_held(OCLML_BFLOAT16, 4, qs, -1, 1, &q), *O = test_tensor(4, qs),
                 *L;
    ASSERT_OK(oclml_tensor_create_dtype(T, OCLML_BFLOAT16, 3, ls, &L));
    oclml_attention_params p;
    oclml_attention_params_init(&p);
    ASSERT_STATUS(oclml_attention(T, &p, Q, Q, Q, O, L), OCLML_ERR_DTYPE);
    test_assert_untouched(O, 128);
    (void)o;
    free(q);
    oclml_tensor_destroy(Q), oclml_tensor_destroy(O), oclml_tensor_destroy(L);
}
END_TEST

int main(void) {
    Suite *s = suite_create("attention_lp");
    TCase *tc = tcase_create("attention_lp");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, forward_and_backward_match_reference, 0, 4);
    tcase_add_test(tc, lse_in_16_bits_refused);
    tcase_add_loop_test(tc, native_forward_matches_reference, 0, N_NATIVE_CASES);
    tcase_add_loop_test(tc, native_forward_tiles, 0, 5);
    tcase_add_test(tc, native_forward_nan_key_reaches_rows_that_see_it);
    tcase_add_test(tc, native_forward_backward_matches_reference);
    tcase_add_test(tc, native_forward_refuses_bad_outputs);
    tcase_add_loop_test(tc, native_backward_matches_reference, 0, N_BWD_CASES);
    tcase_add_loop_test(tc, native_backward_tiles, 0, 4);
    tcase_add_test(tc, native_backward_nan_value_reaches_what_depends_on_it);
    tcase_add_test(tc, native_backward_is_repeatable);
    tcase_add_test(tc, native_backward_refuses_bad_arguments);
    suite_add_tcase(s, tc);
    return test_main(s);
}
