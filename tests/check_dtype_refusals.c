/* The fp32-only ops refuse 16-bit tensors: for every op below, each fp32 tensor argument in turn
 * (optional ones, those inside parameter structs and arrays of parts included) is replaced by a
 * bf16 and then by an fp16 tensor of its shape; the call must return OCLML_ERR_DTYPE, name the
 * dtype, enqueue nothing (a profiling context records no kernel) and write none of the
 * NaN-poisoned tensors. One 16-bit tensor and OCLML_ERR_DTYPE means that tensor's dtype was
 * checked; in the sweep tier the call with none replaced then succeeds, so the shapes are valid.
 * Arguments an op takes in 16 bits (attention's q, k, v, o and their gradients, cross-entropy's
 * logits and dlogits, the embedding's table, y, dy and dtable; the norms' every tensor but the
 * saved mean and rstd) are never replaced, and attention, cross-entropy and the norms run a
 * second time with them 16-bit; softmax, fill, copy, cast, gemm, the elementwise ops, dropout
 * (its backward, dropout_add), concat, split, convolution and pooling take every dtype and are
 * not here, nor are the optimizers, whose tensors are the arena's own. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 24

/* One op: its call on the tensors t, their shapes in the call's order ("2x4 4": a [2 x 4] and a
 * [4] tensor), the arguments it takes in 16 bits (bit i: the i-th, never replaced) and those of
 * them made bf16 (the others fp32). */
typedef struct op_case {
    const char *name;
    oclml_status (*call)(oclml_tensor *const *t);
    const char *shapes;
    unsigned lp_ok, lp_made;
} op_case;

static oclml_dropout_params drop(void) { return test_dropout_params(0.25f, 7, 0); }

static oclml_loss_params loss(const oclml_tensor *weight, const oclml_tensor *pos_weight) {
    oclml_loss_params p;
    oclml_loss_params_init(&p);
    p.weight = weight;
    p.pos_weight = pos_weight;
    return p;
}

/* Attention with both of its optional tables: a mask and key lengths. */
static oclml_attention_params attn(const oclml_tensor *mask, const oclml_tensor *key_lengths) {
    oclml_attention_params p;
    oclml_attention_params_init(&p);
    p.mask = mask;
    p.key_lengths = key_lengths;
    return p;
}

/* ---- the calls ---- */

static oclml_status layernorm(oclml_tensor *const *t) {
    return oclml_layernorm(T, t[0], t[1], t[2], 1e-5f, t[3], t[4], t[5]);
}
static oclml_status layernorm_bwd(oclml_tensor *const *t) {
    return oclml_layernorm_backward(T, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
}
static oclml_status rmsnorm(oclml_tensor *const *t) {
    return oclml_rmsnorm(T, t[0], t[1], 1e-5f, t[2], t[3]);
}
static oclml_status rmsnorm_bwd(oclml_tensor *const *t) {
    return oclml_rmsnorm_backward(T, t[0], t[1], t[2], t[3], t[4], t[5]);
}
static oclml_status res_layernorm(oclml_tensor *const *t) {
    const oclml_dropout_params d = drop();
    return oclml_residual_layernorm(T, &d, t[0], t[1], t[2], t[3], 1e-5f, t[4], t[5], t[6], t[7]);
}
static oclml_status res_layernorm_bwd(oclml_tensor *const *t) {
    const oclml_dropout_params d = drop();
    return oclml_residual_layernorm_backward(T, &d, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
                                             t[8], t[9]);
}
static oclml_status res_rmsnorm(oclml_tensor *const *t) {
    const oclml_dropout_params d = drop();
    return oclml_residual_rmsnorm(T, &d, t[0], t[1], t[2], 1e-5f, t[3], t[4], t[5]);
}
static oclml_status res_rmsnorm_bwd(oclml_tensor *const *t) {
    const oclml_dropout_params d = drop();
    return oclml_residual_rmsnorm_backward(T, &d, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
}

static oclml_status reduce_rows(oclml_tensor *const *t) {
    return oclml_reduce_rows(T, OCLML_REDUCE_SUM, t[0], t[1]);
}
static oclml_status reduce_all(oclml_tensor *const *t) {
    return oclml_reduce_all(T, OCLML_REDUCE_MAX, t[0], t[1]);
}
static oclml_status reduce_axes(oclml_tensor *const *t) {
    const int axes[1] = {1};
    return oclml_reduce_axes(T, OCLML_REDUCE_MEAN, t[0], axes, 1, t[1]);
}

static oclml_status add_bias(oclml_tensor *const *t) {
    return oclml_add_bias(T, t[0], t[1], 1, t[2]);
}
static oclml_status permute(oclml_tensor *const *t) {
    const int perm[2] = {1, 0};
    return oclml_permute(T, t[0], perm, t[1]);
}
static oclml_status transpose_axes(oclml_tensor *const *t) {
    return oclml_transpose_axes(T, t[0], 0, 1, t[1]);
}

static oclml_status embedding(oclml_tensor *const *t) {
    return oclml_embedding(T, t[0], t[1], t[2]);
}
static oclml_status embedding_bwd(oclml_tensor *const *t) {
    return oclml_embedding_backward(T, t[0], t[1], t[2], 0);
}

static oclml_status cross_entropy(oclml_tensor *const *t) {
    const oclml_loss_params p = loss(t[5], NULL);
    return oclml_cross_entropy(T, &p, t[0], t[1], t[2], t[3], t[4]);
}
static oclml_status mse(oclml_tensor *const *t) {
    return oclml_mse_loss(T, NULL, t[0], t[1], t[2], t[3], t[4]);
}
static oclml_status huber(oclml_tensor *const *t) {
    return oclml_huber_loss(T, NULL, t[0], t[1], t[2], t[3], t[4]);
}
static oclml_status bce(oclml_tensor *const *t) {
    const oclml_loss_params p = loss(NULL, t[5]);
    return oclml_bce_with_logits(T, &p, t[0], t[1], t[2], t[3], t[4]);
}
static oclml_status kl(oclml_tensor *const *t) {
    return oclml_kl_div_logits(T, NULL, t[0], t[1], t[2], t[3], t[4], t[5]);
}

static oclml_status gru_step(oclml_tensor *const *t) {
    return oclml_gru_step(T, OCLML_GRU_CHO, t[0], t[1], t[2], t[3], t[4], t[5], t[6]);
}
static oclml_status gru_step_bwd(oclml_tensor *const *t) {
    return oclml_gru_step_backward(T, OCLML_GRU_TORCH, t[0], t[1], t[2], t[3], t[4], t[5], t[6],
                                   t[7], t[8], t[9], t[10], t[11], t[12]);
}
static oclml_status gru_sequence(oclml_tensor *const *t) {
    return oclml_gru_sequence(T, OCLML_GRU_TORCH, t[0], t[1], t[2], t[3], t[4], t[5], t[6]);
}

/* E 1, D 2, G 1, C 2 (S 2), F 2, feedback 1, T 2. */
static oclml_status rssm(oclml_tensor *const *t) {
    oclml_rssm_params c;
    oclml_rssm_params_init(&c);
    c.steps = 2;
    c.groups = 1;
    c.classes = 2;
    c.feedback = 1;
    const oclml_rssm_weights w = {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]};
    const oclml_rssm_state s = {t[8], t[9], t[10], t[11]};
    const oclml_rssm_outputs o = {t[12], t[13], t[14], t[15], t[16], t[17],
                                  t[18], t[19], t[20], t[21], t[22], t[23]};
    return oclml_rssm_rollout(T, &c, &w, &s, &o);
}

static oclml_status history(oclml_tensor *const *t) {
    return oclml_history_encode(T, t[0], t[1], t[2]);
}

static oclml_status attention(oclml_tensor *const *t) {
    const oclml_attention_params p = attn(t[5], t[6]);
    return oclml_attention(T, &p, t[0], t[1], t[2], t[3], t[4]);
}
static oclml_status attention_plan(oclml_tensor *const *t) {
    const oclml_attention_params p = attn(t[3], t[4]);
    char text[512];
    return oclml_attention_plan(T, &p, t[0], t[1], t[2], text, sizeof text);
}
static oclml_status attention_bwd(oclml_tensor *const *t) {
    const oclml_attention_params p = attn(t[10], t[11]);
    return oclml_attention_backward(T, &p, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8],
                                    t[9]);
}

static oclml_status linear(oclml_tensor *const *t) {
    return oclml_linear(T, OCLML_ACT_GELU_ERF, t[0], t[1], t[2], t[3], t[4]);
}
static oclml_status linear_bwd(oclml_tensor *const *t) {
    return oclml_linear_backward(T, OCLML_ACT_GELU_ERF, t[0], t[1], t[2], t[3], t[4], t[5], t[6],
                                 0);
}
static oclml_status linear_dropout(oclml_tensor *const *t) {
    const oclml_dropout_params d = drop();
    return oclml_linear_dropout(T, OCLML_ACT_RELU, &d, t[0], t[1], t[2], t[3], t[4]);
}
static oclml_status linear_dropout_bwd(oclml_tensor *const *t) {
    const oclml_dropout_params d = drop();
    return oclml_linear_dropout_backward(T, OCLML_ACT_RELU, &d, t[0], t[1], t[2], t[3], t[4], t[5],
                                         t[6], 0);
}

/* ---- the table ---- */

#define ATT_FWD "1x1x2x4 1x1x3x4 1x1x3x4 1x1x2x4 1x1x2 2x3 1"
#define ATT_BWD "1x1x2x4 1x1x3x4 1x1x3x4 1x1x2x4 1x1x2 1x1x2x4 1x1x2x4 1x1x3x4 1x1x3x4 2x3 2x3 1"

static const op_case CASES[] = {
    /* The norms take any dtype but for the saved statistics (mean, rstd: fp32). x, gamma, beta,
     * y, mean, rstd */
    {"layernorm", layernorm, "2x4 4 4 2x4 2 2", 0xfu, 0},
    {"layernorm (bf16 x, gamma, beta, y)", layernorm, "2x4 4 4 2x4 2 2", 0xfu, 0xfu},
    /* x, gamma, mean, rstd, dy, dx, dgamma, dbeta */
    {"layernorm_backward", layernorm_bwd, "2x4 4 2 2 2x4 2x4 4 4", 0xf3u, 0},
    {"layernorm_backward (bf16 but mean, rstd)", layernorm_bwd, "2x4 4 2 2 2x4 2x4 4 4", 0xf3u,
     0xf3u},
    {"rmsnorm", rmsnorm, "2x4 4 2x4 2", 0x7u, 0},
    {"rmsnorm (bf16 x, gamma, y)", rmsnorm, "2x4 4 2x4 2", 0x7u, 0x7u},
    {"rmsnorm_backward", rmsnorm_bwd, "2x4 4 2 2x4 2x4 4", 0x3bu, 0},
    {"rmsnorm_backward (bf16 but rstd)", rmsnorm_bwd, "2x4 4 2 2x4 2x4 4", 0x3bu, 0x3bu},
    /* x, y, gamma, beta, r, out, mean, rstd */
    {"residual_layernorm", res_layernorm, "2x4 2x4 4 4 2x4 2x4 2 2", 0x3fu, 0},
    {"residual_layernorm (bf16 but mean, rstd)", res_layernorm, "2x4 2x4 4 4 2x4 2x4 2 2", 0x3fu,
     0x3fu},
    /* r, gamma, mean, rstd, dout, dr, dx, dy, dgamma, dbeta */
    {"residual_layernorm_backward", res_layernorm_bwd, "2x4 4 2 2 2x4 2x4 2x4 2x4 4 4", 0x3f3u, 0},
    {"residual_layernorm_backward (bf16 but mean, rstd)", res_layernorm_bwd,
     "2x4 4 2 2 2x4 2x4 2x4 2x4 4 4", 0x3f3u, 0x3f3u},
    /* x, y, gamma, r, out, rstd */
    {"residual_rmsnorm", res_rmsnorm, "2x4 2x4 4 2x4 2x4 2", 0x1fu, 0},
    {"residual_rmsnorm (bf16 but rstd)", res_rmsnorm, "2x4 2x4 4 2x4 2x4 2", 0x1fu, 0x1fu},
    /* r, gamma, rstd, dout, dr, dx, dy, dgamma */
    {"residual_rmsnorm_backward", res_rmsnorm_bwd, "2x4 4 2 2x4 2x4 2x4 2x4 4", 0xfbu, 0},
    {"residual_rmsnorm_backward (bf16 but rstd)", res_rmsnorm_bwd, "2x4 4 2 2x4 2x4 2x4 2x4 4",
     0xfbu, 0xfbu},
    {"reduce_rows", reduce_rows, "2x4 2", 0, 0},
    {"reduce_all", reduce_all, "2x4 1", 0, 0},
    {"reduce_axes", reduce_axes, "2x3x4 2x4", 0, 0},
    {"add_bias", add_bias, "2x3 3 2x3", 0, 0},
    {"permute", permute, "2x3 3x2", 0, 0},
    {"transpose_axes", transpose_axes, "2x3 3x2", 0, 0},
    /* ids fp32; table and y, dy and dtable any dtype */
    {"embedding", embedding, "3 5x4 3x4", 0x6u, 0},
    {"embedding_backward", embedding_bwd, "3 3x4 5x4", 0x6u, 0},
    /* logits, target, dloss, loss, dlogits, params.weight: logits and dlogits any dtype; then
     * with them bf16 */
    {"cross_entropy (class weights)", cross_entropy, "2x4 2 1 1 2x4 4", 0x11u, 0},
    {"cross_entropy (bf16 logits, dlogits)", cross_entropy, "2x4 2 1 1 2x4 4", 0x11u, 0x11u},
    {"mse_loss", mse, "2x4 2x4 1 1 2x4", 0, 0},
    {"huber_loss", huber, "2x4 2x4 1 1 2x4", 0, 0},
    /* logits, target, dloss, loss, dlogits, params.pos_weight */
    {"bce_with_logits (pos_weight)", bce, "2x4 2x4 1 1 2x4 4", 0, 0},
    {"kl_div_logits", kl, "2x4 2x4 1 1 2x4 2x4", 0, 0},
    /* x, h, w_ih, w_hh, b_ih, b_hh, h_new */
    {"gru_step (CHO)", gru_step, "2x3 2x2 6x3 6x2 6 6 2x2", 0, 0},
    /* ... dh_new, dx, dh, dw_ih, dw_hh, db_ih, db_hh */
    {"gru_step_backward", gru_step_bwd, "2x3 2x2 6x3 6x2 6 6 2x2 2x3 2x2 6x3 6x2 6 6", 0, 0},
    {"gru_sequence", gru_sequence, "2x2x3 2x2 6x3 6x2 6 6 2x2x2", 0, 0},
    /* The weights (w_ih, w_hh, b_ih, b_hh, w_p, b_p, w_y, b_y), the start (h, z, f, y0), the
     * outputs (y, entropy, hnorm, h_final, z_final, f_final, y_mean, y_std, deltas, variance,
     * smoothness, total_entropy). */
    {"rssm_rollout", rssm,
     "1x6x4 1x6x2 1x6 1x6 1x2x2 1x2 1x4 1 "
     "1x2 1x2 1x2 1 "
     "1x2 1x2 1x2 1x2 1x2 1x2 2 2 1x2 1 1 1",
     0, 0},
    {"history_encode", history, "2x2x5 2 2x64", 0, 0},
    /* q, k, v, o (any dtype), lse, params.mask, params.key_lengths (fp32); then with q, k, v
     * and o bf16. */
    {"attention", attention, ATT_FWD, 0xfu, 0},
    {"attention (bf16 q, k, v, o)", attention, ATT_FWD, 0xfu, 0xfu},
    {"attention_plan", attention_plan, "1x1x2x4 1x1x3x4 1x1x3x4 2x3 1", 0x7u, 0},
    {"attention_plan (bf16 q, k, v)", attention_plan, "1x1x2x4 1x1x3x4 1x1x3x4 2x3 1", 0x7u, 0x7u},
    /* q, k, v, o, lse, dout, dq, dk, dv, dmask, params.mask, params.key_lengths: lse and the
     * last three fp32 */
    {"attention_backward", attention_bwd, ATT_BWD, 0x1efu, 0},
    {"attention_backward (bf16 q, k, v, o, dout, dq, dk, dv)", attention_bwd, ATT_BWD, 0x1efu,
     0x1efu},
    /* With fp32 x and w every tensor of a linear layer is fp32: x, w, b, y, pre; x, w, saved,
     * dy, dx, dw, db. */
    {"linear", linear, "2x3 4x3 4 2x4 2x4", 0, 0},
    {"linear_backward", linear_bwd, "2x3 4x3 2x4 2x4 2x3 4x3 4", 0, 0},
    {"linear_dropout", linear_dropout, "2x3 4x3 4 2x4 2x4", 0, 0},
    {"linear_dropout_backward", linear_dropout_bwd, "2x3 4x3 2x4 2x4 2x3 4x3 4", 0, 0},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

typedef struct shape {
    int ndim;
    size_t dims[4];
    size_t numel;
} shape;

/* The shapes of a case's string; returns how many. */
static int parse_shapes(const char *text, shape *out) {
    int n = 0;
    for (const char *p = text; *p;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        ck_assert_int_lt(n, MAX_ARGS);
        shape *s = &out[n++];
        *s = (shape){0, {0}, 1};
        for (;;) {
            char *end;
            const size_t d = strtoul(p, &end, 10);
            ck_assert_msg(end != p && s->ndim < 4, "bad shape in \"%s\"", text);
            s->dims[s->ndim++] = d;
            s->numel *= d;
            p = end;
            if (*p != 'x') break;
            p++;
        }
    }
    return n;
}

/* A NaN-poisoned tensor of shape s and dtype dt. */
static oclml_tensor *poisoned(oclml_dtype dt, const shape *s) {
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, s->ndim, s->dims, &t));
    float *nan = test_floats(s->numel);
    ASSERT_OK(oclml_tensor_write(t, nan, s->numel)); /* converted on the host: no kernel */
    free(nan);
    return t;
}

START_TEST(refused_untouched_nothing_enqueued) {
    const op_case *c = &CASES[_i];
    shape sh[MAX_ARGS];
    const int n = parse_shapes(c->shapes, sh);
    oclml_tensor *t[MAX_ARGS];
    for (int i = 0; i < n; i++)
        t[i] = poisoned(c->lp_made >> i & 1u ? OCLML_BFLOAT16 : OCLML_FLOAT32, &sh[i]);
    static const oclml_dtype LP[2] = {OCLML_BFLOAT16, OCLML_FLOAT16};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < n; i++) {
            if (c->lp_ok >> i & 1u) continue;
            oclml_tensor *lp = poisoned(LP[d], &sh[i]), *fp32 = t[i];
            t[i] = lp;
            ASSERT_OK(oclml_ctx_profile_begin(T));
            const oclml_status st = c->call(t);
            char err[512];
            ASSERT_OK(oclml_ctx_last_error_copy(T, err, sizeof err));
            double ms;
            const oclml_status enqueued = oclml_ctx_profile_end(T, &ms);
            t[i] = fp32;
            ck_assert_msg(st == OCLML_ERR_DTYPE && strstr(err, oclml_dtype_name(LP[d])),
                          "%s with argument %d %s: %s, expected OCLML_ERR_DTYPE; last error: %s",
                          c->name, i, oclml_dtype_name(LP[d]), oclml_status_name(st), err);
            /* profile_end fails where no kernel was enqueued. */
            ck_assert_msg(enqueued == OCLML_ERR_INVALID_ARGUMENT,
                          "%s with argument %d %s: refused after enqueueing kernels", c->name, i,
                          oclml_dtype_name(LP[d]));
            for (int j = 0; j < n; j++) test_assert_untouched(t[j], sh[j].numel);
            test_assert_untouched(lp, sh[i].numel);
            oclml_tensor_destroy(lp);
        }
    /* The call without a replaced tensor is a valid one (the sweep tier: it builds the op's
     * programs; a refusal builds nothing). */
    if (test_sweep()) ASSERT_OK(c->call(t));
    for (int i = 0; i < n; i++) oclml_tensor_destroy(t[i]);
}
END_TEST

/* The fixture's context with profiling on: its events tell whether a call enqueued anything. */
static void profiling_setup(void) {
    oclml_ctx_config o;
    ASSERT_OK(oclml_ctx_config_init(&o));
    o.profiling = 1;
    T = test_ctx_new(&o);
}

int main(void) {
    Suite *s = suite_create("dtype_refusals");
    TCase *tc = tcase_create("dtype_refusals");
    tcase_add_checked_fixture(tc, profiling_setup, test_teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, refused_untouched_nothing_enqueued, 0, N_CASES);
    suite_add_tcase(s, tc);
    return test_main(s);
}
