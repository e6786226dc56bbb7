/* oclml-bench attention: the peer's shapes and names (torch_peers.py `attention`,
 * `attention_bwd`): "attention" forward at 4 B H Lq Lk D flops (half where causal, as PyTorch
 * counts), "attention_fwd_bwd" forward then backward at 3.5 times that, and "attention_decode"
 * (one query row against a long cache) at the bytes of K and V; "attention_dropout" and
 * "attention_dropout_fwd_bwd" the same at GPT-2 small's shape, causal, with dropout 0.1 on the
 * probabilities (scripts/torch_peers_extra.py `attention_dropout` times SDPA's dropout_p). The
 * error beside each forward without dropout is the relative L2 error of sampled output rows
 * against a double-precision reference. */
#include "bench.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct att_bench {
    size_t B, H, HKV, L, D;
} att_bench;

/* The last, head dim 256, is not among the shared peer's shapes: scripts/torch_peers_extra.py
 * times PyTorch on it. */
static const att_bench SHAPES[] = {{8, 16, 16, 1024, 64},
                                   {4, 16, 16, 4096, 64},
                                   {4, 16, 16, 4096, 128},
                                   {2, 32, 8, 4096, 128},
                                   {4, 16, 16, 2048, 256}};
static const att_bench QUICK[] = {{1, 2, 2, 128, 64}, {1, 4, 2, 96, 32}};
/* Dropout on the probabilities: GPT-2 small's attention (B8, 12 heads, 1024 positions, 64). */
static const att_bench DROPOUT = {8, 12, 12, 1024, 64}, QUICK_DROPOUT = {1, 2, 2, 128, 64};
static const size_t DECODE_KEYS[] = {4096, 32768}, QUICK_DECODE_KEYS[] = {512};

typedef struct att_case {
    oclml_ctx *ctx;
    oclml_attention_params p;
    oclml_tensor *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} att_case;

static oclml_status fwd(void *u) {
    att_case *c = u;
    return oclml_attention(c->ctx, &c->p, c->q, c->k, c->v, c->o, c->lse);
}

static oclml_status fwd_bwd(void *u) {
    att_case *c = u;
    oclml_status st = oclml_attention(c->ctx, &c->p, c->q, c->k, c->v, c->o, c->lse);
    if (!st)
        st = oclml_attention_backward(c->ctx, &c->p, c->q, c->k, c->v, c->o, c->lse, c->dout, c->dq,
                                      c->dk, c->dv, NULL);
    return st;
}

/* Random values in tensors of any size: one host block written over and over (element e of
 * tensor `which` holds VAL(which, e)), through views of the tensor's buffer. */
#define BLOCK ((size_t)1 << 22)
#define VAL(block, which, e) (block)[((e) + (which) * (size_t)1234567) % BLOCK]
static oclml_status fill(oclml_ctx *ctx, oclml_tensor *t, const float *block, unsigned which) {
    size_t n, off;
    cl_mem buf;
    float *tmp = NULL;
    oclml_status st = oclml_tensor_numel(t, &n);
    if (!st) st = oclml_tensor_buffer(t, &buf, &off);
    for (size_t at = 0; at < n && !st; at += BLOCK / 4) {
        size_t len = n - at < BLOCK / 4 ? n - at : BLOCK / 4,
               start = (size_t)(&VAL(block, which, at) - block);
        oclml_tensor *view = NULL;
        st = oclml_tensor_wrap(ctx, buf, off + at * sizeof(float), 1, &len, &view);
        if (!st && start + len <= BLOCK) {
            st = oclml_tensor_write(view, block + start, len);
        } else if (!st) { /* the rotated block wraps around inside this chunk */
            if (!tmp && !(tmp = malloc(BLOCK / 4 * sizeof *tmp))) st = OCLML_ERR_OUT_OF_MEMORY;
            for (size_t e = 0; !st && e < len; e++) tmp[e] = VAL(block, which, at + e);
            if (!st) st = oclml_tensor_write(view, tmp, len);
        }
        if (view) oclml_tensor_destroy(view);
    }
    free(tmp);
    return st;
}

/* Relative L2 error of rows (b, h, i) of o (read back, BHLD) against double precision. */
static double sampled_error(const att_case *c, const att_bench *s, size_t LQ, size_t LK,
                            bool causal, const float *block, int *failed) {
    static const double picks[3][3] = {{0, 0, 0}, {0.5, 0.7, 0.3}, {0.99, 0.99, 0.99}};
    double num = 0, den = 0, scale = 1 / sqrt((double)s->D);
    double *sc = malloc(LK * sizeof *sc);
    float *row = malloc(s->D * sizeof *row);
    if (!sc || !row) *failed = 1;
    for (int t = 0; t < 3 && !*failed; t++) {
        size_t b = (size_t)(picks[t][0] * s->B), h = (size_t)(picks[t][1] * s->H),
               i = (size_t)(picks[t][2] * LQ), hk = h / (s->H / s->HKV);
        size_t qrow = ((b * s->H + h) * LQ + i) * s->D, krow0 = (b * s->HKV + hk) * LK * s->D;
        size_t last = causal ? i + LK - LQ : LK - 1; /* the peer's causal: top-left, Lq = Lk */
        double m = -INFINITY, l = 0;
        for (size_t j = 0; j <= last; j++) {
            double x = 0;
            for (size_t d = 0; d < s->D; d++)
                x += (double)VAL(block, 0, qrow + d) * VAL(block, 1, krow0 + j * s->D + d);
            sc[j] = x * scale;
            m = sc[j] > m ? sc[j] : m;
        }
        for (size_t j = 0; j <= last; j++) l += exp(sc[j] - m);
        cl_mem buf;
        size_t off, d1 = s->D;
        oclml_tensor *view = NULL;
        oclml_status st = oclml_tensor_buffer(c->o, &buf, &off);
        if (!st) st = oclml_tensor_wrap(c->ctx, buf, off + qrow * sizeof(float), 1, &d1, &view);
        if (!st) st = oclml_tensor_read(view, row, s->D);
        if (view) oclml_tensor_destroy(view);
        if (st) *failed = 1;
        for (size_t d = 0; d < s->D && !st; d++) {
            double ref = 0;
            for (size_t j = 0; j <= last; j++)
                ref += exp(sc[j] - m) / l * VAL(block, 2, krow0 + j * s->D + d);
            num += (row[d] - ref) * (row[d] - ref);
            den += ref * ref;
        }
    }
    free(sc);
    free(row);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One shape: forward and forward+backward, causal and not (decode: the forward alone; with
 * dropout drop_p on the probabilities, causal alone). */
static int bench_shape(bench_env *env, const att_bench *s, size_t LQ, size_t LK, float drop_p,
                       const float *block) {
    const bool decode = LQ == 1;
    size_t qs[4] = {s->B, s->H, LQ, s->D}, ks[4] = {s->B, s->HKV, LK, s->D},
           ls[3] = {s->B, s->H, LQ};
    att_case c = {.ctx = env->ctx};
    oclml_attention_params_init(&c.p);
    oclml_dropout_params drop;
    oclml_dropout_params_init(&drop);
    drop.p = drop_p;
    if (drop_p > 0) c.p.dropout = &drop;
    oclml_tensor **qlike[] = {&c.q, &c.o, &c.dout, &c.dq}, **klike[] = {&c.k, &c.v, &c.dk, &c.dv};
    oclml_status st = OCLML_SUCCESS;
    for (int i = 0; i < (decode ? 2 : 4) && !st; i++) {
        st = oclml_tensor_create(env->ctx, 4, qs, qlike[i]);
        if (!st) st = oclml_tensor_create(env->ctx, 4, ks, klike[i]);
    }
    if (!st) st = oclml_tensor_create(env->ctx, 3, ls, &c.lse);
    if (!st) st = fill(env->ctx, c.q, block, 0);
    if (!st) st = fill(env->ctx, c.k, block, 1);
    if (!st) st = fill(env->ctx, c.v, block, 2);
    if (!st && !decode) st = fill(env->ctx, c.dout, block, 3);
    int rc = st ? bench_fail(env, st, "attention setup") : 0;
    char shape[96], plan[256] = "", fwd_plan[160] = "", bwd_plan[160] = "";
    const double pairs = (double)s->B * s->H * LQ * LK * s->D;
    for (int causal = 1; causal >= (decode || drop_p > 0 ? 1 : 0) && !rc; causal--) {
        c.p.causal = decode   ? OCLML_CAUSAL_NONE
                     : causal ? OCLML_CAUSAL_TOP_LEFT
                              : OCLML_CAUSAL_NONE;
        /* The plan of these params (the mask decides some of it): "forward: ...; backward:
         * ...", one half beside each figure. */
        if ((st = oclml_attention_plan(env->ctx, &c.p, c.q, c.k, c.v, plan, sizeof plan))) {
            rc = bench_fail(env, st, "attention plan");
            break;
        }
        const char *cut = strstr(plan, "; backward: ");
        if (cut) {
            snprintf(fwd_plan, sizeof fwd_plan, "%.*s", (int)(cut - plan), plan);
            snprintf(bwd_plan, sizeof bwd_plan, "%s", cut + 2);
        }
        if (decode)
            snprintf(shape, sizeof shape, "B%zu,H%zu,Lq1,Lk%zu,D%zu", s->B, s->H, LK, s->D);
        else
            snprintf(shape, sizeof shape, "B%zu,H%zu,Hkv%zu,L%zu,D%zu,causal=%d", s->B, s->H,
                     s->HKV, LQ, s->D, causal);
        const double flops = 4 * pairs / (c.p.causal ? 2 : 1);
        bench_result r = {.op = decode       ? "attention_decode"
                                : drop_p > 0 ? "attention_dropout"
                                             : "attention",
                          .shape = shape,
                          .variant = fwd_plan,
                          .flops = decode ? 0 : flops,
                          .bytes = decode ? 2.0 * s->B * s->HKV * LK * s->D * sizeof(float) : 0};
        if ((rc = bench_time(env, fwd, &c, &r.t))) break;
        int failed = 0;
        r.max_rel_err = drop_p > 0 ? -1
                                   : sampled_error(&c, s, LQ, LK, c.p.causal != OCLML_CAUSAL_NONE,
                                                   block, &failed);
        if (failed) rc = bench_fail(env, OCLML_ERR_OUT_OF_MEMORY, "attention check");
        if (!rc) bench_report(env, &r);
        if (decode || rc) continue;
        bench_result rb = {.op = drop_p > 0 ? "attention_dropout_fwd_bwd" : "attention_fwd_bwd",
                           .shape = shape,
                           .variant = bwd_plan,
                           .flops = 3.5 * flops,
                           .max_rel_err = -1};
        if (!(rc = bench_time(env, fwd_bwd, &c, &rb.t))) bench_report(env, &rb);
    }
    oclml_tensor *all[] = {c.q, c.k, c.v, c.o, c.lse, c.dout, c.dq, c.dk, c.dv};
    for (int i = 0; i < 9; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
    return rc;
}

/* --sizes B x H x HKV x L x D, comma-separated: those shapes alone (causal and not), without
 * the dropout and decode rows. */
static int bench_listed(bench_env *env, const float *block) {
    long v[5 * 16];
    const int n = bench_shapes(env->sizes, 5, v, 16);
    if (n == 0)
        return bench_fail(env, OCLML_ERR_INVALID_ARGUMENT, "attention --sizes: BxHxHKVxLxD");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const long *d = v + 5 * i;
        if (d[1] % d[2])
            return bench_fail(env, OCLML_ERR_INVALID_ARGUMENT,
                              "attention --sizes: H a multiple of HKV");
        const att_bench b = {(size_t)d[0], (size_t)d[1], (size_t)d[2], (size_t)d[3], (size_t)d[4]};
        rc = bench_shape(env, &b, b.L, b.L, 0.0f, block);
    }
    return rc;
}

int bench_attention(bench_env *env) {
    float *block = malloc(BLOCK * sizeof *block);
    if (!block) return bench_fail(env, OCLML_ERR_OUT_OF_MEMORY, "attention setup");
    bench_random(block, BLOCK, 21);
    if (env->sizes) {
        int rc = bench_listed(env, block);
        free(block);
        return rc;
    }
    const att_bench *list = env->quick ? QUICK : SHAPES;
    size_t n = env->quick ? sizeof QUICK / sizeof QUICK[0] : sizeof SHAPES / sizeof SHAPES[0];
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = bench_shape(env, &list[i], list[i].L, list[i].L, 0.0f, block);
    const att_bench *drop = env->quick ? &QUICK_DROPOUT : &DROPOUT;
    if (!rc) rc = bench_shape(env, drop, drop->L, drop->L, 0.1f, block);
    const att_bench dec =
        env->quick ? (att_bench){2, 4, 4, 0, 64} : (att_bench){16, 32, 32, 0, 128};
    const size_t *keys = env->quick ? QUICK_DECODE_KEYS : DECODE_KEYS;
    size_t nkeys = env->quick ? 1 : 2;
    for (size_t i = 0; i < nkeys && !rc; i++) rc = bench_shape(env, &dec, 1, keys[i], 0.0f, block);
    free(block);
    return rc;
}
