/* Attention on bf16 and fp16 tensors (q, k, v, o, dout, dq, dk, dv of any dtype; lse fp32):
 * forward and backward against the double reference from the inputs as their dtype holds them,
 * each output within its dtype's unit roundoff of the reference (tolerance.h) plus the fp32
 * op's own error on the terms' magnitude (the backward's also o's rounding: it reads the o the
 * forward wrote, as PyTorch's does); GQA and causal masking; the plan; lse in 16 bits
 * refused. */
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
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
    if (cores) test_retune("attention.mma=2");
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
    suite_add_tcase(s, tc);
    return test_main(s);
}
