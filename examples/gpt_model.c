/* The GPT-2 model of gpt_model.h as a sequence of liboclml calls. */
#include "gpt_model.h"

#include "train_common.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr)                             \
    do {                                      \
        if (st == OCLML_SUCCESS) st = (expr); \
    } while (0)

gpt_config gpt_config_small(void) {
    return (gpt_config){.vocab = 50257,
                        .context = 1024,
                        .layers = 12,
                        .heads = 12,
                        .width = 768,
                        .batch = 8,
                        .seq = 1024,
                        .lr = 6e-4f,
                        .min_lr = 6e-5f,
                        .warmup = 2000,
                        .steps = 600000,
                        .weight_decay = 0.1f,
                        .grad_clip = 1.0f,
                        .seed = 2024};
}

gpt_config gpt_config_tiny(void) {
    return (gpt_config){.vocab = 256,
                        .context = 32,
                        .layers = 2,
                        .heads = 4,
                        .width = 64,
                        .batch = 4,
                        .seq = 32,
                        .lr = 1e-3f,
                        .min_lr = 1e-4f,
                        .warmup = 10,
                        .steps = 2000,
                        .weight_decay = 0.1f,
                        .grad_clip = 1.0f,
                        .seed = 2024};
}

/* The arena's tensors: the matrices first (weight decay applies to them alone), then the
 * vectors. */
enum { P_WTE, P_WPE, P_MATRICES };
enum { M_Q, M_K, M_V, M_O, M_FC, M_PROJ, M_PER_LAYER };
enum { V_LN1G, V_LN1B, V_BQ, V_BK, V_BV, V_BO, V_LN2G, V_LN2B, V_BFC, V_BPROJ, V_PER_LAYER };

/* What a layer keeps from its forward for its backward. */
enum {
    A_RES,   /* the residual stream entering the block (the first norm's r) */
    A_MEAN1, /* the first norm's statistics */
    A_RSTD1,
    A_H1, /* the first norm's output (16-bit in mixed precision: the products read it) */
    A_Q,  /* [B, T, H, Dh] */
    A_K,
    A_V,
    A_O,   /* attention's output */
    A_LSE, /* [B, H, T] */
    A_MID, /* the residual stream after attention (the second norm's r) */
    A_MEAN2,
    A_RSTD2,
    A_H2,
    A_PRE, /* the MLP's pre-activation [N, 4C] */
    A_ACT, /* GELU of it */
    A_PER_LAYER
};

/* The step's other buffers. */
enum {
    G_IDS,     /* [N] token ids (floats) */
    G_POS,     /* [N] positions */
    G_TARGETS, /* [N] */
    G_TOK,     /* [N, C] token embeddings */
    G_POSE,    /* [N, C] position embeddings */
    G_ATT_OUT, /* [N, C] attention's projection (the first residual branch) */
    G_MLP_OUT, /* [N, C] the MLP's output (the second branch) */
    G_RESF,    /* the final norm's r, statistics and output */
    G_MEANF,
    G_RSTDF,
    G_HF,
    G_LOGITS, /* [N, V]; the loss's gradient overwrites it */
    G_LOSS,
    G_DH,   /* [N, C] a norm output's gradient */
    G_DRES, /* [N, C] the residual stream's gradient */
    G_DO,   /* [N, C] attention output's gradient */
    G_DQ,   /* [B, T, H, Dh] */
    G_DK,
    G_DV,
    G_DACT,    /* [N, 4C] */
    G_DBRANCH, /* [N, C] a residual branch's gradient, where dropout sets it apart from the
                  stream's */
    G_QKV,     /* [N, 3C] [dq dk dv], the Q, K, V projection's gradient as one matrix */
    G_TENSORS
};

struct gpt_model {
    oclml_ctx *ctx;
    gpt_config c;
    size_t n_tokens, head_dim, n_params;
    oclml_arena *arena;
    oclml_optim *opt;
    oclml_tensor *dloss;   /* the loss scale (fp16: train_scale_start), or NULL */
    oclml_tensor **p, **g; /* arena views, P_/per-layer order */
    oclml_tensor **w;      /* the weights the products read: p, or (mixed precision) the copies */
    oclml_tensor *(*act)[A_PER_LAYER]; /* per layer */
    oclml_tensor *(*flat)[4];          /* per layer: [N, C] views of q, k, v, o */
    /* Per layer, where the arena holds Wq, Wk, Wv (and their biases) back to back: [3C, C] and
     * [3C] views of the weights and of their gradients, for Q, K and V's backward as one
     * product; NULL otherwise (three). */
    oclml_tensor *(*qkv)[4];
    oclml_tensor *t[G_TENSORS],
        *flat_d[4]; /* [N, C] views of dq, dk, dv; a [B, T, H, Dh] view of do */
    oclml_attention_params att;
    oclml_dropout_params drops[3]; /* this step's, by site (drop_at) */
    bool training;                 /* in gpt_step: dropout applies */
    oclml_tensor *empty;
    size_t step;
    float *host_tokens; /* inputs, positions, targets of a batch */
    train_parallel par;
    /* Every process's ids and stream gradient, for the token embedding's lookup after the
     * exchange (lookup_after_exchange), and how many processes they hold. */
    oclml_tensor *gathered[2];
    size_t gathered_parts;
};

const char *const gpt_phase_names[GPT_PHASES] = {"embedding",     "attention",     "mlp",
                                                 "head+loss",     "head_bwd",      "mlp_bwd",
                                                 "attention_bwd", "embedding_bwd", "optimizer"};

static size_t matrix(size_t l, int j) { return P_MATRICES + l * M_PER_LAYER + (size_t)j; }
static size_t vector(const gpt_model *m, size_t l, int j) {
    return P_MATRICES + m->c.layers * M_PER_LAYER + l * V_PER_LAYER + (size_t)j;
}
/* The final norm's gamma and beta come after every layer's vectors. */
static size_t final_norm(const gpt_model *m, int beta) { return vector(m, m->c.layers, beta); }

static oclml_tensor *make_of(oclml_ctx *ctx, oclml_status *st, oclml_dtype dt, int nd,
                             const size_t *shape) {
    oclml_tensor *t = NULL;
    if (!*st) *st = oclml_tensor_create_dtype(ctx, dt, nd, shape, &t);
    return t;
}

static oclml_tensor *make(oclml_ctx *ctx, oclml_status *st, int nd, const size_t *shape) {
    return make_of(ctx, st, OCLML_FLOAT32, nd, shape);
}

static bool mixed(const gpt_model *m) { return m->c.dtype != OCLML_FLOAT32; }

static oclml_status init_params(gpt_model *m) {
    const gpt_config *c = &m->c;
    size_t n;
    oclml_tensor *flat;
    oclml_status st = oclml_arena_info(m->arena, NULL, NULL, &n);
    TRY(oclml_arena_flat(m->arena, 0, &flat));
    float *v = calloc(n, sizeof *v);
    if (!v) return OCLML_ERR_OUT_OF_MEMORY;
    /* nanoGPT's scales, from uniforms of the same standard deviation (std 0.02; the residual
     * projections 0.02 / sqrt(2 L)); biases 0, norms' gamma 1. */
    train_rng rng = {c->seed};
    const float u = 0.02f * sqrtf(3.0f), u_proj = u / sqrtf(2.0f * (float)c->layers);
    size_t total = P_MATRICES + c->layers * (M_PER_LAYER + V_PER_LAYER) + 2;
    for (size_t i = 0; i < total && !st; i++) {
        size_t off, len;
        oclml_tensor *p = m->p[i];
        st = oclml_arena_offset(m->arena, i, &off);
        TRY(oclml_tensor_numel(p, &len));
        if (st) break;
        bool is_matrix = i < P_MATRICES + c->layers * M_PER_LAYER;
        size_t j = is_matrix ? (i - P_MATRICES) % M_PER_LAYER
                             : (i - P_MATRICES - c->layers * M_PER_LAYER) % V_PER_LAYER;
        if (i < P_MATRICES)
            train_fill(&rng, v + off, len, u);
        else if (is_matrix)
            train_fill(&rng, v + off, len, j == M_O || j == M_PROJ ? u_proj : u);
        else if (i >= final_norm(m, 0))
            for (size_t k = 0; k < len; k++) v[off + k] = i == final_norm(m, 0) ? 1.0f : 0.0f;
        else
            for (size_t k = 0; k < len; k++) v[off + k] = j == V_LN1G || j == V_LN2G ? 1.0f : 0.0f;
    }
    TRY(oclml_tensor_write(flat, v, n));
    free(v);
    return st;
}

static void destroy_all(oclml_tensor **t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i]) oclml_tensor_destroy(t[i]);
}

/* A view of arena tensors first .. first + count - 1 as one tensor of shape (nd, shape), where
 * they lie back to back (each's offset the last's plus its elements); NULL where they do not.
 * grads: of their gradients. */
static oclml_tensor *arena_span(gpt_model *m, oclml_status *st, size_t first, size_t count,
                                bool grads, int nd, const size_t *shape) {
    size_t base, n;
    if (*st || oclml_arena_offset(m->arena, first, &base) || oclml_tensor_numel(m->p[first], &n))
        return NULL;
    for (size_t k = 1; k < count; k++) {
        size_t at;
        if (oclml_arena_offset(m->arena, first + k, &at) || at != base + k * n) return NULL;
    }
    return train_view(m->ctx, st, grads ? m->g[first] : m->w[first], nd, shape);
}

/* Q, K and V's weights and biases as one [3C, C] matrix and [3C] vector (and their gradients),
 * layer by layer, where the arena lays them out so: their backward as one product of 3C columns
 * on [dq dk dv] instead of three products and two accumulating GEMMs. */
static oclml_status make_qkv_views(gpt_model *m) {
    const size_t C = m->c.width, L = m->c.layers, w[2] = {3 * C, C}, b[1] = {3 * C};
    oclml_status st = OCLML_SUCCESS;
    m->qkv = calloc(L, sizeof *m->qkv);
    if (!m->qkv) return OCLML_ERR_OUT_OF_MEMORY;
    for (size_t l = 0; l < L && !st; l++) {
        oclml_tensor **v = m->qkv[l];
        v[0] = arena_span(m, &st, matrix(l, M_Q), 3, false, 2, w);
        v[1] = arena_span(m, &st, vector(m, l, V_BQ), 3, false, 1, b);
        v[2] = arena_span(m, &st, matrix(l, M_Q), 3, true, 2, w);
        v[3] = arena_span(m, &st, vector(m, l, V_BQ), 3, true, 1, b);
        if (!v[0] || !v[1] || !v[2] || !v[3]) { /* three products for this layer */
            destroy_all(v, 4);
            memset(v, 0, sizeof m->qkv[l]);
        }
    }
    return st;
}

static oclml_status make_arena(gpt_model *m) {
    const gpt_config *c = &m->c;
    size_t C = c->width, L = c->layers, total = P_MATRICES + L * (M_PER_LAYER + V_PER_LAYER) + 2;
    oclml_arena_shape *s = calloc(total, sizeof *s);
    m->p = calloc(total, sizeof *m->p);
    m->g = calloc(total, sizeof *m->g);
    m->w = calloc(total, sizeof *m->w);
    if (!s || !m->p || !m->g || !m->w) {
        free(s);
        return OCLML_ERR_OUT_OF_MEMORY;
    }
    s[P_WTE] = (oclml_arena_shape){2, {c->vocab, C}};
    s[P_WPE] = (oclml_arena_shape){2, {c->context, C}};
    for (size_t l = 0; l < L; l++) {
        for (int j = M_Q; j <= M_O; j++) s[matrix(l, j)] = (oclml_arena_shape){2, {C, C}};
        s[matrix(l, M_FC)] = (oclml_arena_shape){2, {4 * C, C}};
        s[matrix(l, M_PROJ)] = (oclml_arena_shape){2, {C, 4 * C}};
        for (int j = 0; j < V_PER_LAYER; j++)
            s[vector(m, l, j)] = (oclml_arena_shape){1, {j == V_BFC ? 4 * C : C}};
    }
    s[final_norm(m, 0)] = s[final_norm(m, 1)] = (oclml_arena_shape){1, {C}};
    oclml_status st = oclml_arena_create(m->ctx, total, s, &m->arena);
    free(s);
    for (size_t i = 0; i < total && !st; i++) {
        st = oclml_arena_param(m->arena, i, &m->p[i]);
        TRY(oclml_arena_grad(m->arena, i, &m->g[i]));
    }
    TRY(oclml_arena_info(m->arena, NULL, &m->n_params, NULL));
    TRY(init_params(m));
    if (!st && mixed(m)) TRY(oclml_arena_copy_create(m->arena, c->dtype));
    for (size_t i = 0; i < total && !st; i++) {
        if (mixed(m))
            st = oclml_arena_copy(m->arena, i, &m->w[i]);
        else
            m->w[i] = m->p[i];
    }
    TRY(make_qkv_views(m));
    oclml_optim_config oc;
    TRY(oclml_optim_config_init(&oc, OCLML_OPTIM_ADAMW));
    oc.lr = c->lr;
    oc.beta2 = 0.95f;
    oc.weight_decay = c->weight_decay;
    oc.max_grad_norm = c->grad_clip;
    oc.decay_tensors = P_MATRICES + L * M_PER_LAYER;
    train_scale_config(&oc, c->dtype);
    TRY(oclml_optim_create(m->ctx, m->arena, &oc, &m->opt));
    TRY(train_scale_start(m->opt, c->dtype, &m->dloss));
    return st;
}

static oclml_status make_activations(gpt_model *m) {
    const gpt_config *c = &m->c;
    oclml_ctx *ctx = m->ctx;
    size_t B = c->batch, T = c->seq, C = c->width, H = c->heads, D = m->head_dim, N = m->n_tokens,
           L = c->layers;
    const size_t nc[2] = {N, C}, n4c[2] = {N, 4 * C}, bthd[4] = {B, T, H, D}, bht[3] = {B, H, T},
                 rows[1] = {N}, nv[2] = {N, c->vocab}, one[1] = {1};
    oclml_status st = OCLML_SUCCESS;
    m->act = calloc(L, sizeof *m->act);
    m->flat = calloc(L, sizeof *m->flat);
    if (!m->act || !m->flat) return OCLML_ERR_OUT_OF_MEMORY;
    /* Mixed precision: what the products and attention read and write in 16 bits. */
    const oclml_dtype lp = c->dtype;
    for (size_t l = 0; l < L; l++) {
        oclml_tensor **a = m->act[l];
        for (int i = 0; i < A_PER_LAYER; i++) {
            bool stat = i == A_MEAN1 || i == A_RSTD1 || i == A_MEAN2 || i == A_RSTD2;
            bool head = i == A_Q || i == A_K || i == A_V || i == A_O;
            a[i] = i == A_LSE                 ? make(ctx, &st, 3, bht)
                   : stat                     ? make(ctx, &st, 1, rows)
                   : head                     ? make_of(ctx, &st, lp, 4, bthd)
                   : i == A_PRE || i == A_ACT ? make_of(ctx, &st, lp, 2, n4c)
                   : i == A_H1 || i == A_H2   ? make_of(ctx, &st, lp, 2, nc)
                                              : make(ctx, &st, 2, nc);
        }
        for (int j = 0; j < 4; j++) m->flat[l][j] = train_view(ctx, &st, a[A_Q + j], 2, nc);
    }
    oclml_tensor **t = m->t;
    t[G_IDS] = make(ctx, &st, 1, rows);
    t[G_POS] = make(ctx, &st, 1, rows);
    t[G_TARGETS] = make(ctx, &st, 1, rows);
    for (int i = G_TOK; i <= G_MLP_OUT; i++) t[i] = make(ctx, &st, 2, nc);
    t[G_RESF] = make(ctx, &st, 2, nc);
    t[G_MEANF] = make(ctx, &st, 1, rows);
    t[G_RSTDF] = make(ctx, &st, 1, rows);
    t[G_HF] = make_of(ctx, &st, lp, 2, nc);
    t[G_LOGITS] = make(ctx, &st, 2, nv);
    t[G_LOSS] = make(ctx, &st, 1, one);
    for (int i = G_DH; i <= G_DRES; i++) t[i] = make(ctx, &st, 2, nc);
    t[G_DO] = make_of(ctx, &st, lp, 2, nc);
    for (int i = G_DQ; i <= G_DV; i++) t[i] = make_of(ctx, &st, lp, 4, bthd);
    t[G_DACT] = make_of(ctx, &st, lp, 2, n4c);
    if (m->c.dropout > 0) t[G_DBRANCH] = make(ctx, &st, 2, nc);
    const size_t n3c[2] = {N, 3 * C};
    t[G_QKV] = make_of(ctx, &st, lp, 2, n3c);
    for (int j = 0; j < 3; j++) m->flat_d[j] = train_view(ctx, &st, t[G_DQ + j], 2, nc);
    m->flat_d[3] = train_view(ctx, &st, t[G_DO], 4, bthd);
    return st;
}

oclml_status gpt_create(oclml_ctx *ctx, const gpt_config *cfg, gpt_model **out) {
    if (!ctx || !cfg || !out || !cfg->vocab || !cfg->layers || !cfg->heads || !cfg->batch ||
        !cfg->seq || cfg->width % cfg->heads || cfg->seq > cfg->context ||
        !(cfg->dropout >= 0 && cfg->dropout < 1) ||
        cfg->vocab > (1u << 24) || /* ids travel as floats */
        !oclml_dtype_size(cfg->dtype))
        return OCLML_ERR_INVALID_ARGUMENT;
    gpt_model *m = calloc(1, sizeof *m);
    if (!m) return OCLML_ERR_OUT_OF_MEMORY;
    m->ctx = ctx;
    m->c = *cfg;
    m->n_tokens = cfg->batch * cfg->seq;
    m->head_dim = cfg->width / cfg->heads;
    m->host_tokens = malloc(3 * m->n_tokens * sizeof *m->host_tokens);
    oclml_status st = m->host_tokens ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
    TRY(make_arena(m));
    TRY(make_activations(m));
    oclml_attention_params_init(&m->att);
    m->att.causal = OCLML_CAUSAL_TOP_LEFT;
    m->att.layout = OCLML_ATTENTION_BLHD;
    for (int k = 0; k < 3; k++) oclml_dropout_params_init(&m->drops[k]);
    if (!st) { /* positions 0 .. T - 1 in every sequence */
        float *pos = m->host_tokens + m->n_tokens;
        for (size_t n = 0; n < m->n_tokens; n++) pos[n] = (float)(n % cfg->seq);
        st = oclml_tensor_write(m->t[G_POS], pos, m->n_tokens);
    }
    if (st) {
        gpt_destroy(m);
        return st;
    }
    *out = m;
    return OCLML_SUCCESS;
}

void gpt_destroy(gpt_model *m) {
    if (!m) return;
    for (size_t l = 0; m->act && l < m->c.layers; l++) {
        destroy_all(m->flat[l], 4);
        destroy_all(m->act[l], A_PER_LAYER);
    }
    for (size_t l = 0; m->qkv && l < m->c.layers; l++) destroy_all(m->qkv[l], 4);
    destroy_all(m->flat_d, 4);
    destroy_all(m->t, G_TENSORS);
    destroy_all(m->gathered, 2);
    if (m->opt) oclml_optim_destroy(m->opt);
    if (m->arena) oclml_arena_destroy(m->arena);
    free(m->act);
    free(m->flat);
    free(m->qkv);
    free(m->p);
    free(m->g);
    free(m->w);
    free(m->host_tokens);
    free(m);
}

size_t gpt_parameters(const gpt_model *m) { return m->n_params; }

oclml_status gpt_set_batch(gpt_model *m, const uint32_t *tokens) {
    size_t T = m->c.seq, N = m->n_tokens;
    float *ids = m->host_tokens, *targets = m->host_tokens + 2 * N;
    for (size_t b = 0; b < m->c.batch; b++)
        for (size_t t = 0; t < T; t++) {
            ids[b * T + t] = (float)tokens[b * (T + 1) + t];
            targets[b * T + t] = (float)tokens[b * (T + 1) + t + 1];
        }
    oclml_status st = oclml_tensor_write(m->t[G_IDS], ids, N);
    TRY(oclml_tensor_write(m->t[G_TARGETS], targets, N));
    return st;
}

/* ---- dropout ---- */

/* Dropout sites of a layer: attention's probabilities, its residual branch, the MLP's. */
enum { D_ATT_P, D_ATT_RES, D_MLP_RES };

/* The params of site k of layer l in this step, NULL where dropout is off (p = 0, or not
 * training). The key mixes the seed and the step; each site's counters start 2^40 apart (more
 * than any tensor here draws), so every mask of a run is distinct and the backward regenerates
 * its forward's. A process that holds part of the global batch (train_parallel) starts where
 * its first sequence starts in the global batch's tensor, so that its masks are the ones one
 * process would draw for those sequences. */
static const oclml_dropout_params *drop_at(gpt_model *m, size_t l, int k) {
    if (!m->training || !(m->c.dropout > 0)) return NULL;
    oclml_dropout_params *d = &m->drops[k];
    d->p = m->c.dropout;
    d->seed = m->c.seed * 0x9E3779B97F4A7C15ull + m->step;
    size_t T = m->c.seq, site = k == D_ATT_P ? m->c.heads * T * T : T * m->c.width;
    d->offset = ((uint64_t)(3 * l + (size_t)k) << 40) +
                oclml_dropout_counters(m->par.part * m->c.batch * site);
    return d;
}

/* Attention's params with layer l's dropout on the probabilities (or none). */
static const oclml_attention_params *attention_of(gpt_model *m, size_t l) {
    m->att.dropout = drop_at(m, l, D_ATT_P);
    return &m->att;
}

/* A residual branch's gradient in a buffer of its own, where dropout makes it differ from the
 * stream's; NULL where it is the stream's (a norm's backward then writes no dy). */
static oclml_tensor *branch_own(gpt_model *m) {
    return m->training && m->c.dropout > 0 ? m->t[G_DBRANCH] : NULL;
}

/* Where a residual branch's gradient is read: its own buffer, or the stream's (G_DRES). */
static oclml_tensor *branch_grad(gpt_model *m) {
    oclml_tensor *own = branch_own(m);
    return own ? own : m->t[G_DRES];
}

/* ---- forward ---- */

/* Embeddings and the first block's first norm: r = tok + pos. */
static oclml_status forward_embedding(gpt_model *m) {
    oclml_ctx *ctx = m->ctx;
    oclml_tensor **t = m->t, **a = m->act[0];
    oclml_status st = oclml_embedding(ctx, t[G_IDS], m->p[P_WTE], t[G_TOK]);
    TRY(oclml_embedding(ctx, t[G_POS], m->p[P_WPE], t[G_POSE]));
    TRY(oclml_residual_layernorm(ctx, NULL, t[G_TOK], t[G_POSE], m->p[vector(m, 0, V_LN1G)],
                                 m->p[vector(m, 0, V_LN1B)], 1e-5f, a[A_RES], a[A_H1], a[A_MEAN1],
                                 a[A_RSTD1]));
    return st;
}

static oclml_status forward_attention(gpt_model *m, size_t l) {
    oclml_ctx *ctx = m->ctx;
    oclml_tensor **a = m->act[l], **f = m->flat[l];
    oclml_status st = OCLML_SUCCESS;
    /* Three products of C columns: one of 3C and a split into q, k and v ran the step's
     * attention halves 2.5 ms slower on the H200 (bench/DECISIONS.md). */
    for (int j = 0; j < 3; j++)
        TRY(oclml_linear(ctx, OCLML_ACT_NONE, a[A_H1], m->w[matrix(l, M_Q + j)],
                         m->w[vector(m, l, V_BQ + j)], f[j], NULL));
    TRY(oclml_attention(ctx, attention_of(m, l), a[A_Q], a[A_K], a[A_V], a[A_O], a[A_LSE]));
    TRY(oclml_linear(ctx, OCLML_ACT_NONE, f[3], m->w[matrix(l, M_O)], m->w[vector(m, l, V_BO)],
                     m->t[G_ATT_OUT], NULL));
    TRY(oclml_residual_layernorm(ctx, drop_at(m, l, D_ATT_RES), a[A_RES], m->t[G_ATT_OUT],
                                 m->p[vector(m, l, V_LN2G)], m->p[vector(m, l, V_LN2B)], 1e-5f,
                                 a[A_MID], a[A_H2], a[A_MEAN2], a[A_RSTD2]));
    return st;
}

/* The MLP, then the residual add fused with the next block's first norm (or the final norm). */
static oclml_status forward_mlp(gpt_model *m, size_t l) {
    oclml_ctx *ctx = m->ctx;
    oclml_tensor **a = m->act[l], **t = m->t;
    oclml_status st = oclml_linear(ctx, OCLML_ACT_GELU_TANH, a[A_H2], m->w[matrix(l, M_FC)],
                                   m->w[vector(m, l, V_BFC)], a[A_ACT], a[A_PRE]);
    TRY(oclml_linear(ctx, OCLML_ACT_NONE, a[A_ACT], m->w[matrix(l, M_PROJ)],
                     m->w[vector(m, l, V_BPROJ)], t[G_MLP_OUT], NULL));
    if (l + 1 < m->c.layers) {
        oclml_tensor **n = m->act[l + 1];
        TRY(oclml_residual_layernorm(ctx, drop_at(m, l, D_MLP_RES), a[A_MID], t[G_MLP_OUT],
                                     m->p[vector(m, l + 1, V_LN1G)], m->p[vector(m, l + 1, V_LN1B)],
                                     1e-5f, n[A_RES], n[A_H1], n[A_MEAN1], n[A_RSTD1]));
    } else {
        TRY(oclml_residual_layernorm(ctx, drop_at(m, l, D_MLP_RES), a[A_MID], t[G_MLP_OUT],
                                     m->p[final_norm(m, 0)], m->p[final_norm(m, 1)], 1e-5f,
                                     t[G_RESF], t[G_HF], t[G_MEANF], t[G_RSTDF]));
    }
    return st;
}

/* Logits through the tied head (x wte^T). */
static oclml_status forward_head(gpt_model *m) {
    return oclml_linear(m->ctx, OCLML_ACT_NONE, m->t[G_HF], m->w[P_WTE], NULL, m->t[G_LOGITS],
                        NULL);
}

static oclml_status loss_and_gradient(gpt_model *m) {
    oclml_tensor **t = m->t;
    return oclml_cross_entropy(m->ctx, NULL, t[G_LOGITS], t[G_TARGETS], m->dloss, t[G_LOSS],
                               t[G_LOGITS]);
}

static oclml_status forward(gpt_model *m) {
    oclml_status st = forward_embedding(m);
    for (size_t l = 0; l < m->c.layers; l++) {
        TRY(forward_attention(m, l));
        TRY(forward_mlp(m, l));
    }
    TRY(forward_head(m));
    return st;
}

oclml_status gpt_forward(gpt_model *m) {
    m->training = false;
    return forward(m);
}

/* ---- backward ---- */

/* The head: dhf from the logits' gradient, and wte's gradient (overwritten: the token
 * embedding's backward adds to it last). Then the final norm: the residual stream's gradient. */
static oclml_status backward_head(gpt_model *m) {
    oclml_ctx *ctx = m->ctx;
    oclml_tensor **t = m->t;
    oclml_status st = oclml_linear_backward(ctx, OCLML_ACT_NONE, t[G_HF], m->w[P_WTE], NULL,
                                            t[G_LOGITS], t[G_DH], m->g[P_WTE], NULL, 0);
    TRY(oclml_residual_layernorm_backward(ctx, drop_at(m, m->c.layers - 1, D_MLP_RES), t[G_RESF],
                                          m->p[final_norm(m, 0)], t[G_MEANF], t[G_RSTDF], t[G_DH],
                                          NULL, t[G_DRES], branch_own(m), m->g[final_norm(m, 0)],
                                          m->g[final_norm(m, 1)]));
    return st;
}

/* G_DRES holds the gradient of the block's output stream and branch_grad that of its MLP branch;
 * on return, those of the stream between attention and the MLP and of attention's branch. */
static oclml_status backward_mlp(gpt_model *m, size_t l) {
    oclml_ctx *ctx = m->ctx;
    oclml_tensor **a = m->act[l], **t = m->t, *branch = branch_grad(m);
    oclml_status st =
        oclml_linear_backward(ctx, OCLML_ACT_NONE, a[A_ACT], m->w[matrix(l, M_PROJ)], NULL, branch,
                              t[G_DACT], m->g[matrix(l, M_PROJ)], m->g[vector(m, l, V_BPROJ)], 0);
    TRY(oclml_linear_backward(ctx, OCLML_ACT_GELU_TANH, a[A_H2], m->w[matrix(l, M_FC)], a[A_PRE],
                              t[G_DACT], t[G_DH], m->g[matrix(l, M_FC)], m->g[vector(m, l, V_BFC)],
                              0));
    TRY(oclml_residual_layernorm_backward(ctx, drop_at(m, l, D_ATT_RES), a[A_MID],
                                          m->p[vector(m, l, V_LN2G)], a[A_MEAN2], a[A_RSTD2],
                                          t[G_DH], t[G_DRES], t[G_DRES], branch_own(m),
                                          m->g[vector(m, l, V_LN2G)], m->g[vector(m, l, V_LN2B)]));
    return st;
}

/* Then attention's half: on return G_DRES holds the gradient of the block's input stream and
 * branch_grad that of the previous block's MLP branch. */
static oclml_status backward_attention(gpt_model *m, size_t l) {
    oclml_ctx *ctx = m->ctx;
    oclml_tensor **a = m->act[l], **t = m->t, **f = m->flat[l], **fd = m->flat_d,
                 *branch = branch_grad(m);
    oclml_status st = OCLML_SUCCESS;
    TRY(oclml_linear_backward(ctx, OCLML_ACT_NONE, f[3], m->w[matrix(l, M_O)], NULL, branch,
                              t[G_DO], m->g[matrix(l, M_O)], m->g[vector(m, l, V_BO)], 0));
    TRY(oclml_attention_backward(ctx, attention_of(m, l), a[A_Q], a[A_K], a[A_V], a[A_O], a[A_LSE],
                                 fd[3], t[G_DQ], t[G_DK], t[G_DV], NULL));
    oclml_tensor *h1 = a[A_H1];
    /* [dq dk dv] as one [N, 3C] gradient of the fused product (in mixed precision a 16-bit
     * concat, the weights' 16-bit copy viewed as one [3C, C] matrix). */
    if (m->qkv[l][0]) {
        TRY(oclml_concat(ctx, (const oclml_tensor *const *)fd, 3, 1, t[G_QKV]));
        TRY(oclml_linear_backward(ctx, OCLML_ACT_NONE, h1, m->qkv[l][0], NULL, t[G_QKV], t[G_DH],
                                  m->qkv[l][2], m->qkv[l][3], 0));
    } else {
        /* dh1 = dq Wq + dk Wk + dv Wv: the first product writes it, the others add to it. */
        for (int j = 0; j < 3; j++) {
            TRY(oclml_linear_backward(ctx, OCLML_ACT_NONE, h1, m->w[matrix(l, M_Q + j)], NULL,
                                      fd[j], j ? NULL : t[G_DH], m->g[matrix(l, M_Q + j)],
                                      m->g[vector(m, l, V_BQ + j)], 0));
            if (j)
                TRY(oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, fd[j],
                               m->w[matrix(l, M_Q + j)], 1.0f, t[G_DH]));
        }
    }
    /* The previous block's MLP branch entered this norm (the embeddings' sum, undropped, the
     * first block's). */
    const oclml_dropout_params *drop = l ? drop_at(m, l - 1, D_MLP_RES) : NULL;
    TRY(oclml_residual_layernorm_backward(
        ctx, drop, a[A_RES], m->p[vector(m, l, V_LN1G)], a[A_MEAN1], a[A_RSTD1], t[G_DH], t[G_DRES],
        t[G_DRES], drop ? branch : NULL, m->g[vector(m, l, V_LN1G)], m->g[vector(m, l, V_LN1B)]));
    return st;
}

/* With several processes (a gather in train_parallel), the token embedding's gradient is
 * exchanged as soon as the head has written it, and its lookup's part is made after the
 * exchange, on every process, from every process's ids and stream gradient: 25 MB a process
 * (GPT-2 small, B8 T1024) instead of the whole table's gradient (154 MB), which the lookup
 * finishes only at the end of the backward, where nothing hides its exchange. */
static bool lookup_after_exchange(const gpt_model *m) { return m->par.gather != NULL; }

/* The embeddings: the stream's gradient reaches both tables (wte's adds to the head's, here or
 * after the exchange). */
static oclml_status backward_embedding(gpt_model *m) {
    oclml_tensor **t = m->t;
    oclml_status st = OCLML_SUCCESS;
    if (!lookup_after_exchange(m))
        st = oclml_embedding_backward(m->ctx, t[G_IDS], t[G_DRES], m->g[P_WTE], 1);
    TRY(oclml_embedding_backward(m->ctx, t[G_POS], t[G_DRES], m->g[P_WPE], 0));
    return st;
}

/* Makes room for `parts` processes' ids and stream gradients. */
static oclml_status size_gathered(gpt_model *m, size_t parts) {
    if (parts == m->gathered_parts) return OCLML_SUCCESS;
    destroy_all(m->gathered, 2);
    m->gathered[0] = m->gathered[1] = NULL;
    m->gathered_parts = 0;
    oclml_dtype dtype;
    size_t ids = parts * m->n_tokens, rows[2] = {parts * m->n_tokens, m->c.width};
    oclml_status st = oclml_tensor_dtype(m->t[G_DRES], &dtype);
    m->gathered[0] = make(m->ctx, &st, 1, &ids);
    m->gathered[1] = make_of(m->ctx, &st, dtype, 2, rows);
    if (!st) m->gathered_parts = parts;
    return st;
}

/* After the exchange (wte holds the average of the processes' head parts): the lookup's part of
 * the average, (1 / P) times the sum over every process's tokens, in process order. */
static oclml_status lookup_gathered(gpt_model *m) {
    oclml_tensor **t = m->t;
    size_t parts = 0;
    oclml_status st = m->par.gather(m->par.user, NULL, NULL, &parts);
    if (st) return st;
    if (!parts) return oclml_embedding_backward(m->ctx, t[G_IDS], t[G_DRES], m->g[P_WTE], 1);
    if ((st = size_gathered(m, parts))) {
        /* No room: this process's gather fails, and the others' with it, rather than wait. */
        m->par.gather(m->par.user, t[G_IDS], NULL, &parts);
        return st;
    }
    TRY(m->par.gather(m->par.user, t[G_IDS], m->gathered[0], &parts));
    TRY(m->par.gather(m->par.user, t[G_DRES], m->gathered[1], &parts));
    TRY(oclml_binary_scalar(m->ctx, OCLML_MUL, m->gathered[1], 1.0f / (float)parts,
                            m->gathered[1]));
    TRY(oclml_embedding_backward(m->ctx, m->gathered[0], m->gathered[1], m->g[P_WTE], 1));
    return st;
}

/* The gradients final after each part of the backward, in its order (gpt_grad_order): the
 * final norm's after the head's (and wte's where its lookup comes after the exchange; else
 * only after the embeddings'), a block's MLP and second norm, then its attention and first
 * norm. */
static size_t grads_of_head(const gpt_model *m, size_t *t) {
    t[0] = final_norm(m, 0), t[1] = final_norm(m, 1);
    if (!lookup_after_exchange(m)) return 2;
    t[2] = P_WTE;
    return 3;
}
static size_t grads_of_mlp(const gpt_model *m, size_t l, size_t *t) {
    t[0] = matrix(l, M_PROJ), t[1] = vector(m, l, V_BPROJ), t[2] = matrix(l, M_FC);
    t[3] = vector(m, l, V_BFC), t[4] = vector(m, l, V_LN2G), t[5] = vector(m, l, V_LN2B);
    return 6;
}
static size_t grads_of_attention(const gpt_model *m, size_t l, size_t *t) {
    size_t n = 0;
    t[n++] = matrix(l, M_O), t[n++] = vector(m, l, V_BO);
    for (int j = 0; j < 3; j++) t[n++] = matrix(l, M_Q + j), t[n++] = vector(m, l, V_BQ + j);
    t[n++] = vector(m, l, V_LN1G), t[n++] = vector(m, l, V_LN1B);
    return n;
}
static size_t grads_of_embedding(const gpt_model *m, size_t *t) {
    if (lookup_after_exchange(m)) {
        t[0] = P_WPE;
        return 1;
    }
    t[0] = P_WTE, t[1] = P_WPE;
    return 2;
}

static oclml_status mark_ready(gpt_model *m, const size_t *t, size_t n) {
    oclml_status st = OCLML_SUCCESS;
    for (size_t i = 0; i < n; i++) TRY(train_grads_ready(&m->par, t[i], 1));
    return st;
}

static oclml_status backward(gpt_model *m) {
    size_t t[16];
    oclml_status st = backward_head(m);
    TRY(mark_ready(m, t, grads_of_head(m, t)));
    for (size_t l = m->c.layers; l-- > 0;) {
        TRY(backward_mlp(m, l));
        TRY(mark_ready(m, t, grads_of_mlp(m, l, t)));
        TRY(backward_attention(m, l));
        TRY(mark_ready(m, t, grads_of_attention(m, l, t)));
    }
    TRY(backward_embedding(m));
    TRY(mark_ready(m, t, grads_of_embedding(m, t)));
    return st;
}

size_t gpt_tensors(const gpt_model *m) { return final_norm(m, 1) + 1; }

oclml_arena *gpt_arena(const gpt_model *m) { return m->arena; }

void gpt_grad_order(const gpt_model *m, size_t *order) {
    size_t n = grads_of_head(m, order);
    for (size_t l = m->c.layers; l-- > 0;) {
        n += grads_of_mlp(m, l, order + n);
        n += grads_of_attention(m, l, order + n);
    }
    grads_of_embedding(m, order + n);
}

train_parallel *gpt_parallel(gpt_model *m) { return &m->par; }

void gpt_set_parallel(gpt_model *m, const train_parallel *par) {
    memset(&m->par, 0, sizeof m->par);
    if (par) m->par = *par;
}

/* nanoGPT's schedule: linear warm-up, then a cosine down to min_lr at `steps`. */
static float schedule(const gpt_config *c, size_t step) {
    if (step < c->warmup) return c->lr * (float)(step + 1) / (float)(c->warmup + 1);
    if (step >= c->steps) return c->min_lr;
    double ratio = (double)(step - c->warmup) / (double)(c->steps - c->warmup);
    return c->min_lr + (float)(0.5 * (1.0 + cos(M_PI * ratio))) * (c->lr - c->min_lr);
}

static oclml_status optimizer_step(gpt_model *m) {
    oclml_status st = oclml_optim_set_lr(m->opt, schedule(&m->c, m->step));
    TRY(oclml_optim_step(m->opt));
    if (!st) m->step++;
    return st;
}

oclml_status gpt_step(gpt_model *m) {
    m->training = true;
    oclml_status st = forward(m);
    TRY(loss_and_gradient(m));
    TRY(backward(m));
    TRY(train_before_step(&m->par));
    if (lookup_after_exchange(m)) TRY(lookup_gathered(m));
    TRY(optimizer_step(m));
    return st;
}

oclml_status gpt_step_phases(gpt_model *m, double ms[GPT_PHASES]) {
    oclml_ctx *ctx = m->ctx;
    oclml_status st = OCLML_SUCCESS;
    for (int i = 0; i < GPT_PHASES; i++) ms[i] = 0;
    m->training = true;
#define PHASE(i, call)                              \
    do {                                            \
        double phase_ms = 0;                        \
        TRY(oclml_ctx_profile_begin(ctx));          \
        TRY(call);                                  \
        TRY(oclml_ctx_profile_end(ctx, &phase_ms)); \
        ms[i] += phase_ms;                          \
    } while (0)
    PHASE(0, forward_embedding(m));
    for (size_t l = 0; l < m->c.layers; l++) {
        PHASE(1, forward_attention(m, l));
        PHASE(2, forward_mlp(m, l));
    }
    PHASE(3, forward_head(m));
    PHASE(3, loss_and_gradient(m));
    PHASE(4, backward_head(m));
    for (size_t l = m->c.layers; l-- > 0;) {
        PHASE(5, backward_mlp(m, l));
        PHASE(6, backward_attention(m, l));
    }
    PHASE(7, backward_embedding(m));
    PHASE(8, optimizer_step(m));
#undef PHASE
    return st;
}

oclml_status gpt_loss(gpt_model *m, float *loss) {
    return oclml_tensor_read(m->t[G_LOSS], loss, 1);
}

oclml_status gpt_logits_at(gpt_model *m, size_t t, float *logits) {
    if (t >= m->c.seq) return OCLML_ERR_INVALID_ARGUMENT;
    oclml_status st = OCLML_SUCCESS;
    const size_t row[2] = {1, m->c.vocab};
    cl_mem buf;
    size_t off;
    oclml_tensor *v = NULL;
    TRY(oclml_tensor_buffer(m->t[G_LOGITS], &buf, &off));
    TRY(oclml_tensor_wrap(m->ctx, buf, off + t * m->c.vocab * sizeof(float), 2, row, &v));
    TRY(oclml_tensor_read(v, logits, m->c.vocab));
    if (v) oclml_tensor_destroy(v);
    return st;
}

/* ---- checkpoints ---- */

#define CKPT_MAGIC "oclml-gpt-1"

typedef struct ckpt_header {
    char magic[16];
    uint64_t vocab, context, layers, heads, width, step, floats;
} ckpt_header;

/* The parameters, then AdamW's two moments, each the arena's padded flat size. */
static oclml_status ckpt_buffers(gpt_model *m, oclml_tensor *b[3], size_t *n) {
    oclml_status st = oclml_arena_info(m->arena, NULL, NULL, n);
    TRY(oclml_arena_flat(m->arena, 0, &b[0]));
    TRY(oclml_optim_state(m->opt, 0, &b[1]));
    TRY(oclml_optim_state(m->opt, 1, &b[2]));
    return st;
}

static ckpt_header header_of(const gpt_model *m, size_t n) {
    ckpt_header h = {.vocab = m->c.vocab,
                     .context = m->c.context,
                     .layers = m->c.layers,
                     .heads = m->c.heads,
                     .width = m->c.width,
                     .step = m->step,
                     .floats = n};
    memcpy(h.magic, CKPT_MAGIC, sizeof CKPT_MAGIC);
    return h;
}

oclml_status gpt_save(gpt_model *m, const char *path) {
    oclml_tensor *b[3];
    size_t n;
    oclml_status st = ckpt_buffers(m, b, &n);
    float *v = st ? NULL : malloc(n * sizeof *v);
    FILE *f = st || !v ? NULL : fopen(path, "wb");
    if (!st && !f) st = v ? OCLML_ERR_IO : OCLML_ERR_OUT_OF_MEMORY;
    ckpt_header h = header_of(m, n);
    if (!st && fwrite(&h, sizeof h, 1, f) != 1) st = OCLML_ERR_IO;
    for (int i = 0; i < 3 && !st; i++) {
        st = oclml_tensor_read(b[i], v, n);
        if (!st && fwrite(v, sizeof *v, n, f) != n) st = OCLML_ERR_IO;
    }
    if (f && fclose(f) && !st) st = OCLML_ERR_IO;
    free(v);
    return st;
}

oclml_status gpt_load(gpt_model *m, const char *path) {
    oclml_tensor *b[3];
    size_t n;
    oclml_status st = ckpt_buffers(m, b, &n);
    float *v = st ? NULL : malloc(n * sizeof *v);
    FILE *f = st || !v ? NULL : fopen(path, "rb");
    if (!st && !f) st = v ? OCLML_ERR_IO : OCLML_ERR_OUT_OF_MEMORY;
    ckpt_header h, want = header_of(m, n);
    if (!st && fread(&h, sizeof h, 1, f) != 1) st = OCLML_ERR_IO;
    want.step = h.step;
    if (!st && memcmp(&h, &want, sizeof h)) st = OCLML_ERR_INVALID_ARGUMENT; /* another shape */
    for (int i = 0; i < 3 && !st; i++) {
        if (fread(v, sizeof *v, n, f) != n) st = OCLML_ERR_IO;
        TRY(oclml_tensor_write(b[i], v, n));
    }
    if (!st) {
        m->step = h.step;
        st = oclml_optim_set_step(m->opt, (uint32_t)h.step);
    }
    if (!st && mixed(m)) st = oclml_arena_copy_sync(m->arena); /* the copy of the loaded weights */
    if (f) fclose(f);
    free(v);
    return st;
}
