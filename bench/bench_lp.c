/* Mixed precision on the peer's shapes (torch_peers.py bf16): bf16 and fp16 GEMM, A [M x K]
 * times B [K x N] into C of the operands' dtype, as `A @ B` runs in PyTorch: squares 2048 to
 * 8192 and GPT-2's products (MLP up, MLP down, the LM head); then in bf16 the linear layer with
 * GELU (tanh), attention forward and forward+backward, softmax, layernorm and cross-entropy
 * forward+backward over GPT-2's vocabulary. Shapes carry the dtype as the peer prints them
 * ("4096x4096x4096 bf16"). The error is the max over sampled entries of |c - ref| /
 * sum |a_ip b_pj|, ref the double product of the operands as their dtype holds them. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lp_args {
    oclml_ctx *ctx;
    oclml_tensor *a, *b, *c;
    oclml_transpose ta;
} lp_args;

static oclml_status lp_run(void *user) {
    lp_args *g = user;
    return oclml_gemm(g->ctx, g->ta, OCLML_NO_TRANS, 1.0f, g->a, g->b, 0.0f, g->c);
}

/* C [m x n] = op(A) B with A and B of dtype dt, C of c_dt; with ta A is stored [k x m] (a
 * linear layer's weight gradient: dY^T X over the tokens, C fp32 for master gradients). */
static int bench_gemm_shape(bench_env *env, oclml_dtype dt, oclml_dtype c_dt, int ta, size_t m,
                            size_t n, size_t k) {
    const size_t na = m * k, nb = k * n, nc = m * n;
    const size_t ash[2] = {ta ? k : m, ta ? m : k}, bsh[2] = {k, n}, csh[2] = {m, n};
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return bench_fail(env, OCLML_ERR_OUT_OF_MEMORY, "gemm setup");
    }
    bench_random(a, na, 2);
    bench_random(b, nb, 3);
    oclml_tensor *pa = NULL, *pb = NULL, *pc = NULL;
    oclml_status st = oclml_tensor_create_dtype(env->ctx, dt, 2, ash, &pa);
    if (!st) st = oclml_tensor_create_dtype(env->ctx, dt, 2, bsh, &pb);
    if (!st) st = oclml_tensor_create_dtype(env->ctx, c_dt, 2, csh, &pc);
    /* A as stored (transposed with ta: the reference reads a [m x k]) */
    float *stored = ta ? malloc(na * sizeof *stored) : a;
    if (!stored) st = OCLML_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; ta && stored && i < m; i++)
        for (size_t j = 0; j < k; j++) stored[j * m + i] = a[i * k + j];
    if (!st) st = oclml_tensor_write(pa, stored, na);
    if (!st) st = oclml_tensor_write(pb, b, nb);
    /* The operands as the dtype holds them, for the reference. */
    if (!st) st = oclml_tensor_read(pa, stored, na);
    for (size_t i = 0; ta && stored && i < m; i++)
        for (size_t j = 0; j < k; j++) a[i * k + j] = stored[j * m + i];
    if (ta) free(stored);
    if (!st) st = oclml_tensor_read(pb, b, nb);
    int rc = st ? bench_fail(env, st, "gemm setup") : 0;
    char shape[64], plan[200] = "";
    if (c_dt == dt && !ta)
        snprintf(shape, sizeof shape, "%zux%zux%zu %s", m, n, k, oclml_dtype_name(dt));
    else /* not a peer's shape */
        snprintf(shape, sizeof shape, "%zux%zux%zu %s%s, C %s", m, n, k, oclml_dtype_name(dt),
                 ta ? " A^T" : "", oclml_dtype_name(c_dt));
    const oclml_transpose t = ta ? OCLML_TRANS : OCLML_NO_TRANS;
    oclml_gemm_plan_dtype(env->ctx, t, OCLML_NO_TRANS, m, n, k, 1, dt, c_dt, plan, sizeof plan);
    bench_result r = {.op = "gemm", .shape = shape, .variant = plan};
    lp_args g = {env->ctx, pa, pb, pc, t};
    if (!rc) rc = bench_time(env, lp_run, &g, &r.t);
    if (!rc && (st = oclml_tensor_read(pc, c, nc))) rc = bench_fail(env, st, "download");
    if (!rc) {
        r.flops = 2.0 * (double)m * n * k;
        r.max_rel_err = bench_gemm_error(a, b, c, m, n, k);
        bench_report(env, &r);
    }
    if (pa) oclml_tensor_destroy(pa);
    if (pb) oclml_tensor_destroy(pb);
    if (pc) oclml_tensor_destroy(pc);
    free(a);
    free(b);
    free(c);
    return rc;
}

/* A bf16 tensor of the shape, uniform in [-scale, scale) (NULL after a failure: *st says). */
static oclml_tensor *bf16_input(bench_env *env, oclml_status *st, int nd, const size_t *shape,
                                float scale, unsigned seed) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    oclml_tensor *t = NULL;
    if (*st) return NULL;
    float *v = malloc(n * sizeof *v);
    if (!v) {
        *st = OCLML_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    bench_random(v, n, seed);
    for (size_t i = 0; i < n; i++) v[i] *= scale;
    *st = oclml_tensor_create_dtype(env->ctx, OCLML_BFLOAT16, nd, shape, &t);
    if (!*st) *st = oclml_tensor_write(t, v, n);
    free(v);
    return t;
}

static void destroy_all(oclml_tensor **t, int n) {
    for (int i = 0; i < n; i++)
        if (t[i]) oclml_tensor_destroy(t[i]);
}

typedef struct lin_args {
    oclml_ctx *ctx;
    oclml_tensor *x, *w, *b, *y;
} lin_args;

static oclml_status lin_run(void *user) {
    lin_args *a = user;
    return oclml_linear(a->ctx, OCLML_ACT_GELU_TANH, a->x, a->w, a->b, a->y, NULL);
}

/* y = gelu_tanh(x W^T + b), every tensor bf16: the peer's F.gelu(lin(x), approximate="tanh"). */
static int bench_linear_bf16(bench_env *env, size_t M, size_t I, size_t O) {
    oclml_status st = OCLML_SUCCESS;
    const size_t xs[2] = {M, I}, ws[2] = {O, I}, ys[2] = {M, O};
    oclml_tensor *t[4] = {bf16_input(env, &st, 2, xs, 1.0f, 2),
                          bf16_input(env, &st, 2, ws, 1.0f / sqrtf((float)I), 3),
                          bf16_input(env, &st, 1, &O, 1.0f / sqrtf((float)I), 4),
                          bf16_input(env, &st, 2, ys, 1.0f, 5)};
    int rc = st ? bench_fail(env, st, "linear setup") : 0;
    char shape[96], plan[200] = "";
    snprintf(shape, sizeof shape, "M%zu,in%zu,out%zu,gelu bf16", M, I, O);
    oclml_gemm_plan_dtype(env->ctx, OCLML_NO_TRANS, OCLML_TRANS, M, O, I, 1, OCLML_BFLOAT16,
                          OCLML_BFLOAT16, plan, sizeof plan);
    bench_result r = {.op = "linear", .shape = shape, .variant = plan, .max_rel_err = -1};
    lin_args a = {env->ctx, t[0], t[1], t[2], t[3]};
    if (!rc) rc = bench_time(env, lin_run, &a, &r.t);
    if (!rc) {
        r.flops = 2.0 * (double)M * I * O;
        bench_report(env, &r);
    }
    destroy_all(t, 4);
    return rc;
}

typedef struct att_args {
    oclml_ctx *ctx;
    oclml_attention_params p;
    oclml_tensor *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} att_args;

static oclml_status att_fwd(void *user) {
    att_args *a = user;
    return oclml_attention(a->ctx, &a->p, a->q, a->k, a->v, a->o, a->lse);
}

static oclml_status att_fwd_bwd(void *user) {
    att_args *a = user;
    oclml_status st = att_fwd(a);
    if (!st)
        st = oclml_attention_backward(a->ctx, &a->p, a->q, a->k, a->v, a->o, a->lse, a->dout, a->dq,
                                      a->dk, a->dv, NULL);
    return st;
}

/* SDPA's shapes in bf16 (q, k, v, o and the gradients bf16, lse fp32), forward and
 * forward+backward, flops as the peer counts them (4 B H L^2 D, halved when causal; the
 * backward 2.5 times the forward's). */
static int bench_attention_bf16(bench_env *env, size_t B, size_t H, size_t L, size_t D,
                                int causal) {
    oclml_status st = OCLML_SUCCESS;
    const size_t qs[4] = {B, H, L, D}, ls[3] = {B, H, L};
    oclml_tensor *t[9] = {bf16_input(env, &st, 4, qs, 1.0f, 6),
                          bf16_input(env, &st, 4, qs, 1.0f, 7),
                          bf16_input(env, &st, 4, qs, 1.0f, 8),
                          bf16_input(env, &st, 4, qs, 1.0f, 9),
                          NULL,
                          bf16_input(env, &st, 4, qs, 1.0f, 10),
                          bf16_input(env, &st, 4, qs, 1.0f, 11),
                          bf16_input(env, &st, 4, qs, 1.0f, 12),
                          bf16_input(env, &st, 4, qs, 1.0f, 13)};
    if (!st) st = oclml_tensor_create(env->ctx, 3, ls, &t[4]);
    int rc = st ? bench_fail(env, st, "attention setup") : 0;
    att_args a = {env->ctx, {0}, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]};
    oclml_attention_params_init(&a.p);
    a.p.causal = causal ? OCLML_CAUSAL_TOP_LEFT : OCLML_CAUSAL_NONE;
    char shape[96], plan[512] = "";
    snprintf(shape, sizeof shape, "B%zu,H%zu,Hkv%zu,L%zu,D%zu,causal=%d bf16", B, H, H, L, D,
             causal);
    if (!rc) oclml_attention_plan(env->ctx, &a.p, a.q, a.k, a.v, plan, sizeof plan);
    const double flops = 4.0 * B * H * L * L * D / (causal ? 2 : 1);
    for (int bwd = 0; bwd < 2 && !rc; bwd++) {
        bench_result r = {.op = bwd ? "attention_fwd_bwd" : "attention",
                          .shape = shape,
                          .variant = plan,
                          .max_rel_err = -1,
                          .flops = bwd ? 3.5 * flops : flops};
        rc = bench_time(env, bwd ? att_fwd_bwd : att_fwd, &a, &r.t);
        if (!rc) bench_report(env, &r);
    }
    destroy_all(t, 9);
    return rc;
}

typedef struct sm_args {
    oclml_ctx *ctx;
    oclml_tensor *x, *y;
} sm_args;

static oclml_status sm_run(void *user) {
    sm_args *a = user;
    return oclml_softmax(a->ctx, a->x, a->y);
}

/* Softmax over rows, x and y bf16 (bytes as the peer counts them: 4 a element). */
static int bench_softmax_bf16(bench_env *env, size_t R, size_t C) {
    oclml_status st = OCLML_SUCCESS;
    const size_t s[2] = {R, C};
    oclml_tensor *t[2] = {bf16_input(env, &st, 2, s, 4.0f, 14), bf16_input(env, &st, 2, s, 1, 15)};
    int rc = st ? bench_fail(env, st, "softmax setup") : 0;
    char shape[64];
    snprintf(shape, sizeof shape, "%zux%zu bf16", R, C);
    bench_result r = {.op = "softmax", .shape = shape, .variant = "", .max_rel_err = -1};
    sm_args a = {env->ctx, t[0], t[1]};
    if (!rc) rc = bench_time(env, sm_run, &a, &r.t);
    if (!rc) {
        r.bytes = 4.0 * R * C;
        bench_report(env, &r);
    }
    destroy_all(t, 2);
    return rc;
}

typedef struct ln_args {
    oclml_ctx *ctx;
    oclml_tensor *x, *g, *b, *y, *mean, *rstd;
} ln_args;

static oclml_status ln_run(void *user) {
    ln_args *a = user;
    return oclml_layernorm(a->ctx, a->x, a->g, a->b, 1e-5f, a->y, a->mean, a->rstd);
}

/* Layernorm over rows, x, gamma, beta and y bf16, the saved statistics fp32 (bytes as the peer
 * counts them: 4 a element). */
static int bench_layernorm_bf16(bench_env *env, size_t R, size_t C) {
    oclml_status st = OCLML_SUCCESS;
    const size_t s[2] = {R, C};
    oclml_tensor *t[6] = {bf16_input(env, &st, 2, s, 4.0f, 16),
                          bf16_input(env, &st, 1, &C, 1, 17),
                          bf16_input(env, &st, 1, &C, 1, 18),
                          bf16_input(env, &st, 2, s, 1, 19),
                          NULL,
                          NULL};
    if (!st) st = oclml_tensor_create(env->ctx, 1, &R, &t[4]);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &R, &t[5]);
    int rc = st ? bench_fail(env, st, "layernorm setup") : 0;
    char shape[64];
    snprintf(shape, sizeof shape, "%zux%zu bf16", R, C);
    bench_result r = {.op = "layernorm", .shape = shape, .variant = "", .max_rel_err = -1};
    ln_args a = {env->ctx, t[0], t[1], t[2], t[3], t[4], t[5]};
    if (!rc) rc = bench_time(env, ln_run, &a, &r.t);
    if (!rc) {
        r.bytes = 4.0 * R * C;
        bench_report(env, &r);
    }
    destroy_all(t, 6);
    return rc;
}

typedef struct xent_args {
    oclml_ctx *ctx;
    oclml_tensor *logits, *target, *loss, *dlogits;
} xent_args;

static oclml_status xent_run(void *user) {
    xent_args *a = user;
    return oclml_cross_entropy(a->ctx, NULL, a->logits, a->target, NULL, a->loss, a->dlogits);
}

/* Cross-entropy's loss and dlogits over bf16 logits (dlogits bf16, the targets and the loss
 * fp32): the peer's autograd.grad(F.cross_entropy(lg, tg), lg). */
static int bench_xent_bf16(bench_env *env, size_t R, size_t C) {
    oclml_status st = OCLML_SUCCESS;
    const size_t s[2] = {R, C}, one = 1;
    oclml_tensor *t[4] = {bf16_input(env, &st, 2, s, 4.0f, 20), NULL, NULL,
                          bf16_input(env, &st, 2, s, 1, 21)};
    float *ids = st ? NULL : malloc(R * sizeof *ids);
    if (!st && !ids) st = OCLML_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; ids && i < R; i++) ids[i] = (float)((i * 7919u) % C);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &R, &t[1]);
    if (!st) st = oclml_tensor_write(t[1], ids, R);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &one, &t[2]);
    free(ids);
    int rc = st ? bench_fail(env, st, "cross-entropy setup") : 0;
    char shape[64];
    snprintf(shape, sizeof shape, "%zux%zu bf16", R, C);
    bench_result r = {
        .op = "cross_entropy_fwd_bwd", .shape = shape, .variant = "", .max_rel_err = -1};
    xent_args a = {env->ctx, t[0], t[1], t[2], t[3]};
    if (!rc) rc = bench_time(env, xent_run, &a, &r.t);
    if (!rc) bench_report(env, &r); /* a time, as the peer reports it */
    destroy_all(t, 4);
    return rc;
}

int bench_lp(bench_env *env) {
    const char *defaults = env->quick ? "256x256x256,512x384x128"
                                      : "2048x2048x2048,4096x4096x4096,8192x8192x8192,"
                                        "8192x3072x768,8192x768x3072,8192x50304x768";
    long v[3 * 16];
    const int n = bench_shapes(env->sizes ? env->sizes : defaults, 3, v, 16);
    int rc = 0;
    for (int d = 0; d < 2 && !rc; d++)
        for (int i = 0; i < n && !rc; i++)
            rc = bench_gemm_shape(env, d ? OCLML_FLOAT16 : OCLML_BFLOAT16,
                                  d ? OCLML_FLOAT16 : OCLML_BFLOAT16, 0, (size_t)v[3 * i],
                                  (size_t)v[3 * i + 1], (size_t)v[3 * i + 2]);
    /* GPT-2's weight gradients (dY^T X over 8192 tokens into fp32 master gradients): few
     * output blocks, long K */
    static const size_t dw[3][2] = {{768, 768}, {2304, 768}, {3072, 768}};
    for (int i = 0; i < (env->quick ? 0 : 3) && !rc; i++)
        rc = bench_gemm_shape(env, OCLML_BFLOAT16, OCLML_FLOAT32, 1, dw[i][0], dw[i][1], 8192);
    if (env->sizes) return rc; /* --sizes: the GEMMs alone */
    static const size_t lin[3][3] = {{8192, 768, 3072}, {8192, 3072, 768}, {8192, 768, 2304}},
                        lin_quick[1][3] = {{256, 64, 128}};
    for (int i = 0; i < (env->quick ? 1 : 3) && !rc; i++) {
        const size_t *l = env->quick ? lin_quick[i] : lin[i];
        rc = bench_linear_bf16(env, l[0], l[1], l[2]);
    }
    if (!rc) rc = bench_lp_attention(env);
    return rc ? rc : bench_lp_rows(env);
}

int bench_lp_attention(bench_env *env) {
    static const size_t att[4][5] = {
        {4, 16, 4096, 128, 0}, {4, 16, 4096, 128, 1}, {8, 12, 1024, 64, 1}, {4, 16, 4096, 64, 1}};
    int rc = 0;
    for (int i = 0; i < (env->quick ? 1 : 4) && !rc; i++)
        rc = env->quick ? bench_attention_bf16(env, 1, 2, 64, 16, 1)
                        : bench_attention_bf16(env, att[i][0], att[i][1], att[i][2], att[i][3],
                                               (int)att[i][4]);
    return rc;
}

int bench_lp_rows(bench_env *env) {
    static const size_t rows[3][2] = {{16384, 8192}, {65536, 1024}, {8192, 768}};
    int rc = 0;
    for (int i = 0; i < (env->quick ? 1 : 3) && !rc; i++)
        rc = env->quick ? bench_softmax_bf16(env, 64, 1000)
                        : bench_softmax_bf16(env, rows[i][0], rows[i][1]);
    for (int i = 0; i < (env->quick ? 1 : 3) && !rc; i++)
        rc = env->quick ? bench_layernorm_bf16(env, 64, 1000)
                        : bench_layernorm_bf16(env, rows[i][0], rows[i][1]);
    if (!rc) rc = env->quick ? bench_xent_bf16(env, 64, 1000) : bench_xent_bf16(env, 8192, 50257);
    return rc;
}
