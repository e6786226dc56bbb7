/* Attention forward and backward (cl/ops/attention.cl on FMA tiles, attention_fwd_mma.cl and
 * attention_bwd_mma.cl on tensor cores): argument checks, then the plan (attention_plan.c: which
 * kernels, their tiles, the key split of the decode path, the backward's dQ from its own kernel
 * or as a GEMM on dS), then the launches. */
#include "ops/attention_lp.h"
#include "ops/attention_plan.h"
#include "ops/stand_in.h"
#include "ops/gemm.h"
#include "ops/ops.h"

#include <math.h>
#include <stddef.h>

#define MAX_HEAD_DIM 256
#define FP32 (1u << OCLML_FLOAT32)

oclml_status oclml_attention_params_init(oclml_attention_params *p) {
    if (!p) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "params is NULL");
    *p = (oclml_attention_params){.struct_size = sizeof *p, .window_left = -1, .window_right = -1};
    return OCLML_SUCCESS;
}

/* ---- argument checks ---- */

/* The size of the params before the dropout field: callers built against it get no dropout. */
#define PARAMS_SIZE_NO_DROPOUT offsetof(oclml_attention_params, dropout)

static oclml_status check_params(oclml_ctx *ctx, const oclml_attention_params *p) {
    if (p->struct_size != sizeof *p && p->struct_size != PARAMS_SIZE_NO_DROPOUT)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "attention params struct_size is %zu, this library's is %zu (call "
                           "oclml_attention_params_init)",
                           p->struct_size, sizeof *p);
    if ((unsigned)p->causal > OCLML_CAUSAL_BOTTOM_RIGHT)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "causal %d is not an oclml_attention_causal", (int)p->causal);
    if ((unsigned)p->layout > OCLML_ATTENTION_BLHD)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "layout %d is not an oclml_attention_layout", (int)p->layout);
    if (!isfinite(p->scale))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "attention scale must be finite");
    if (p->window_left < -1 || p->window_right < -1 || p->window_left > INT32_MAX ||
        p->window_right > INT32_MAX)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "attention windows must be -1 (open) or 0 to 2^31 - 1");
    if (p->struct_size == sizeof *p && p->dropout) return oclml__check_dropout(ctx, p->dropout);
    return OCLML_SUCCESS;
}

/* The params' dropout where it drops anything, else NULL. */
static const oclml_dropout_params *dropout_of(const oclml_attention_params *p) {
    return p->struct_size == sizeof *p ? oclml__dropout_active(p->dropout) : NULL;
}

/* (batch, heads, length, dim) of a 4-D tensor in the params' layout. */
static oclml_status bhld_of(oclml_ctx *ctx, const oclml_attention_params *p, const oclml_tensor *t,
                            const char *name, unsigned dtypes, size_t out[4]) {
    oclml_status st = oclml__check_tensor_of(ctx, t, name, dtypes);
    if (st) return st;
    if (t->ndim != 4)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "attention takes 4-D '%s' (%s)", name,
                           p->layout == OCLML_ATTENTION_BLHD ? "batch, length, heads, dim"
                                                             : "batch, heads, length, dim");
    const bool blhd = p->layout == OCLML_ATTENTION_BLHD;
    out[0] = t->shape[0];
    out[1] = t->shape[blhd ? 2 : 1];
    out[2] = t->shape[blhd ? 1 : 2];
    out[3] = t->shape[3];
    return OCLML_SUCCESS;
}

static oclml_status check_mask(oclml_ctx *ctx, const oclml_tensor *m, oclml__att_shape *s) {
    oclml_status st = oclml__check_tensor(ctx, m, "mask");
    if (st) return st;
    const int nd = m->ndim;
    bool ok = (nd == 2 || nd == 4) && m->shape[nd - 2] == s->LQ && m->shape[nd - 1] == s->LK;
    s->mask_b = nd == 4 ? m->shape[0] : 1;
    s->mask_h = nd == 4 ? m->shape[1] : 1;
    ok = ok && (s->mask_b == 1 || s->mask_b == s->B) && (s->mask_h == 1 || s->mask_h == s->H);
    if (!ok)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "mask must be [Lq, Lk] = [%zu, %zu] or [1 or %zu, 1 or %zu, %zu, %zu]",
                           s->LQ, s->LK, s->B, s->H, s->LQ, s->LK);
    return OCLML_SUCCESS;
}

/* Checks q, k, v (of the dtypes `dtypes`), the optional tables of params and the sizes the
 * kernels index in 32 bits. */
static oclml_status check_inputs(oclml_ctx *ctx, const oclml_attention_params *p,
                                 const oclml_tensor *q, const oclml_tensor *k,
                                 const oclml_tensor *v, unsigned dtypes, oclml__att_shape *s) {
    size_t qs[4], ks[4], vs[4];
    oclml_status st = check_params(ctx, p);
    if (!st) st = bhld_of(ctx, p, q, "q", dtypes, qs);
    if (!st) st = bhld_of(ctx, p, k, "k", dtypes, ks);
    if (!st) st = bhld_of(ctx, p, v, "v", dtypes, vs);
    if (st) return st;
    if (memcmp(ks, vs, sizeof ks))
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "k and v must have the same shape");
    if (ks[0] != qs[0] || ks[3] != qs[3])
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "q, k and v must have the same batch (%zu, %zu) and head dim (%zu, %zu)",
                           qs[0], ks[0], qs[3], ks[3]);
    if (ks[1] == 0 || qs[1] % ks[1])
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "key/value heads (%zu) must divide the query heads (%zu)", ks[1], qs[1]);
    *s = (oclml__att_shape){
        .B = qs[0], .H = qs[1], .HKV = ks[1], .LQ = qs[2], .LK = ks[2], .D = qs[3]};
    if (s->D > MAX_HEAD_DIM)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED, "head dim %zu: at most %d", s->D,
                           MAX_HEAD_DIM);
    /* Rows are addressed as (b H + h) L + i in 32 bits before widening. */
    const size_t L = s->LQ > s->LK ? s->LQ : s->LK;
    if (s->B * s->H * L >= (size_t)INT32_MAX || L >= (size_t)INT32_MAX / 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "attention of %zu x %zu heads x %zu positions: too many rows", s->B,
                           s->H, L);
    if (p->key_lengths && (st = oclml__check_numel(ctx, p->key_lengths, "key_lengths", s->B)))
        return st;
    s->mask_b = s->mask_h = 1;
    if (p->mask && (st = check_mask(ctx, p->mask, s))) return st;
    return OCLML_SUCCESS;
}

/* A window side as the kernels take it: a window reaching past every key is no window, -1, so
 * that the kernels' 32-bit bounds (row + shift -+ window) cannot overflow with windows up to
 * INT32_MAX. */
static cl_int window_side(long w, const oclml__att_shape *s) {
    return w >= (long)s->LQ + (long)s->LK ? -1 : (cl_int)w;
}

/* The start of every entry point: params (NULL: the defaults, set in *defaults) and the inputs
 * (of the dtypes `dtypes`) checked, *s their shape. */
static oclml_status begin_call(oclml_ctx *ctx, const oclml_attention_params **params,
                               oclml_attention_params *defaults, const oclml_tensor *q,
                               const oclml_tensor *k, const oclml_tensor *v, unsigned dtypes,
                               oclml__att_shape *s) {
    if (!*params) {
        oclml_attention_params_init(defaults);
        *params = defaults;
    }
    oclml_status st = check_inputs(ctx, *params, q, k, v, dtypes, s);
    if (st) return st; /* params unread past a struct_size the check refused */
    s->by_position = (*params)->causal != OCLML_CAUSAL_NONE ||
                     window_side((*params)->window_left, s) >= 0 ||
                     window_side((*params)->window_right, s) >= 0;
    s->blhd = (*params)->layout == OCLML_ATTENTION_BLHD;
    s->mask = (*params)->mask != NULL;
    s->keylen = (*params)->key_lengths != NULL;
    s->dropout = dropout_of(*params) != NULL;
    return OCLML_SUCCESS;
}

/* Fails when output t overlaps any of the n tensors in others (NULLs skipped). */
static oclml_status check_apart(oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                const oclml_tensor *const *others, int n) {
    for (int i = 0; i < n; i++)
        if (t && others[i] && oclml__overlap(t, others[i]))
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "attention output '%s' overlaps an input or another output", name);
    return OCLML_SUCCESS;
}

/* ---- launches ---- */

/* What every launch of one call shares: the shape, the tables, the geometry arguments. */
typedef struct att_call {
    oclml_ctx *ctx;
    const oclml_attention_params *p;
    oclml__att_shape s;
    cl_uint B, H, HKV, LQ, LK;
    float scale;
    cl_int shift, wl, wr;
    cl_ulong mask_bstride, mask_hstride;
    cl_mem mask, keylen;
    cl_ulong mask_off, keylen_off;
    oclml__drop_args drop; /* dropout on the probabilities (DROP_ARGS), where s.dropout */
} att_call;

/* dout: the backward's (NULL in the forward); the rows' alignment goes into the shape. */
static att_call call_of(oclml_ctx *ctx, const oclml_attention_params *p, oclml__att_shape s,
                        const oclml_tensor *q, const oclml_tensor *k, const oclml_tensor *v,
                        const oclml_tensor *dout) {
    att_call c = {.ctx = ctx, .p = p, .s = s};
    c.s.kv_vec = s.D % 4 == 0 && oclml__elem_offset(k) % 4 == 0 && oclml__elem_offset(v) % 4 == 0;
    c.s.qd_vec =
        s.D % 4 == 0 && oclml__elem_offset(q) % 4 == 0 && dout && oclml__elem_offset(dout) % 4 == 0;
    c.B = (cl_uint)s.B, c.H = (cl_uint)s.H, c.HKV = (cl_uint)s.HKV, c.LQ = (cl_uint)s.LQ,
    c.LK = (cl_uint)s.LK;
    c.scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)s.D));
    c.shift = p->causal == OCLML_CAUSAL_BOTTOM_RIGHT ? (cl_int)s.LK - (cl_int)s.LQ : 0;
    c.wl = window_side(p->window_left, &s);
    c.wr = p->causal != OCLML_CAUSAL_NONE ? 0 : window_side(p->window_right, &s);
    c.mask_bstride = s.mask_b > 1 ? (cl_ulong)(s.mask_h * s.LQ * s.LK) : 0;
    c.mask_hstride = s.mask_h > 1 ? (cl_ulong)(s.LQ * s.LK) : 0;
    c.mask = p->mask ? p->mask->mem : NULL;
    c.mask_off = p->mask ? oclml__elem_offset(p->mask) : 0;
    c.keylen = p->key_lengths ? p->key_lengths->mem : NULL;
    c.keylen_off = p->key_lengths ? oclml__elem_offset(p->key_lengths) : 0;
    c.drop = oclml__drop_args_of(dropout_of(p));
    return c;
}

/* Appends the geometry arguments (ATT_GEOM) to args, and with dropout its arguments (DROP_ARGS,
 * which every kernel that takes ATT_GEOM declares after it where HAS_DROPOUT is set). */
static unsigned geom_args(const att_call *c, oclml__arg *args, unsigned n) {
    const oclml__arg g[] = {OCLML_ARG(c->B),           OCLML_ARG(c->H),
                            OCLML_ARG(c->HKV),         OCLML_ARG(c->LQ),
                            OCLML_ARG(c->LK),          OCLML_ARG(c->scale),
                            OCLML_ARG(c->shift),       OCLML_ARG(c->wl),
                            OCLML_ARG(c->wr),          OCLML_ARG(c->mask_bstride),
                            OCLML_ARG(c->mask_hstride)};
    for (unsigned i = 0; i < sizeof g / sizeof g[0]; i++) args[n++] = g[i];
    if (c->s.dropout) {
        const oclml__arg d[] = {OCLML__DROP_ARG_LIST(c->drop)};
        for (unsigned i = 0; i < sizeof d / sizeof d[0]; i++) args[n++] = d[i];
    }
    return n;
}

/* The kernel object of a planned kernel; a tile the device cannot take fails, saying why. */
static oclml_status kernel_of(const att_call *c, const oclml__att_kernel_plan *kp, cl_kernel *k) {
    const oclml__att_tile t = kp->tile;
    if (!kp->fits)
        return oclml__fail(c->ctx, OCLML_ERR_UNSUPPORTED,
                           "attention tile %ux%u work-items, %ux%u scores each, head dim %zu: "
                           "more than the device's work-group or local memory, or (dK/dV) "
                           "keys not a multiple of the work-items along rows",
                           t.tx, t.ty, t.rq, t.rk, c->s.D);
    const oclml__program_spec spec = oclml__att_spec(kp);
    return oclml__kernel(c->ctx, &spec, spec.kernels, k);
}

/* Launches a tiled kernel over (blocks work-groups, dim1, dim2). */
static oclml_status launch_tiled(const att_call *c, cl_kernel k, oclml__att_tile t,
                                 const oclml__arg *a, unsigned n, size_t blocks, size_t dim1,
                                 size_t dim2) {
    const size_t nt = (size_t)t.tx * t.ty, global[3] = {blocks * nt, dim1, dim2},
                 local[3] = {nt, 1, 1};
    return oclml__launch(c->ctx, k, a, n, 3, global, local, NULL);
}

static oclml_status launch_rows(const att_call *c, cl_kernel k, const oclml__arg *a, unsigned n,
                                size_t items) {
    size_t local = c->ctx->caps.max_work_group_size < 64 ? c->ctx->caps.max_work_group_size : 64;
    size_t global = (items + local - 1) / local * local;
    return oclml__launch(c->ctx, k, a, n, 1, &global, &local, NULL);
}

static oclml_status forward(const att_call *c, const oclml_tensor *q, const oclml_tensor *k,
                            const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse) {
    oclml__att_forward_plan plan;
    oclml__att_plan_forward(c->ctx, &c->s, &plan);
    cl_kernel kf, km = NULL;
    oclml_status st = kernel_of(c, &plan.main, &kf);
    if (st) return st;
    const oclml__att_tile t = plan.main.tile;
    const size_t bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk;
    const size_t splits = plan.splits, key_blocks = oclml__ceil_div(c->s.LK, bk);
    if (splits > 1 && (st = kernel_of(c, &plan.merge, &km))) return st;
    cl_ulong rows_all = (cl_ulong)(c->s.B * c->s.H * c->s.LQ), q_off = oclml__elem_offset(q),
             k_off = oclml__elem_offset(k), v_off = oclml__elem_offset(v),
             o_off = oclml__elem_offset(o), lse_off = lse ? oclml__elem_offset(lse) : 0;
    cl_uint has_lse = lse != NULL, n_split = (cl_uint)splits,
            per_split = (cl_uint)oclml__ceil_div(key_blocks, splits);
    cl_mem lse_mem = lse ? lse->mem : NULL, part = NULL;
    if (splits > 1 &&
        (st = oclml__scratch_get(c->ctx, splits * rows_all * (c->s.D + 1) * sizeof(float), &part)))
        return st;
    oclml__arg a[40];
    unsigned n = 0;
    a[n++] = OCLML_ARG(q->mem), a[n++] = OCLML_ARG(q_off), a[n++] = OCLML_ARG(k->mem),
    a[n++] = OCLML_ARG(k_off), a[n++] = OCLML_ARG(v->mem), a[n++] = OCLML_ARG(v_off),
    a[n++] = OCLML_ARG(o->mem), a[n++] = OCLML_ARG(o_off), a[n++] = OCLML_ARG(lse_mem),
    a[n++] = OCLML_ARG(lse_off), a[n++] = OCLML_ARG(has_lse), a[n++] = OCLML_ARG(c->mask),
    a[n++] = OCLML_ARG(c->mask_off), a[n++] = OCLML_ARG(c->keylen),
    a[n++] = OCLML_ARG(c->keylen_off), a[n++] = OCLML_ARG(part), a[n++] = OCLML_ARG(rows_all),
    a[n++] = OCLML_ARG(n_split), a[n++] = OCLML_ARG(per_split);
    n = geom_args(c, a, n);
    st = launch_tiled(c, kf, t, a, n, oclml__ceil_div(c->s.H / c->s.HKV * c->s.LQ, bq),
                      c->s.B * c->s.HKV, splits);
    if (!st && splits > 1) {
        const oclml__arg m[] = {OCLML_ARG(part),    OCLML_ARG(rows_all), OCLML_ARG(n_split),
                                OCLML_ARG(o->mem),  OCLML_ARG(o_off),    OCLML_ARG(lse_mem),
                                OCLML_ARG(lse_off), OCLML_ARG(has_lse),  OCLML_ARG(c->H),
                                OCLML_ARG(c->LQ)};
        st = launch_rows(c, km, m, sizeof m / sizeof m[0], rows_all * c->s.D);
    }
    if (part) oclml__scratch_put(c->ctx, part);
    return st;
}

/* What of params changes a plan (rehearsal.c): everything but the tensors' contents. */
static uint64_t attention_params_key(uint64_t key, const oclml_attention_params *p) {
    if (!p) return oclml__rehearsal_key(key, "-", 1);
    key = oclml__rehearsal_key(key, &p->scale, sizeof p->scale);
    key = oclml__rehearsal_key(key, &p->causal, sizeof p->causal);
    key = oclml__rehearsal_key(key, &p->layout, sizeof p->layout);
    key = oclml__rehearsal_key(key, &p->window_left, sizeof p->window_left);
    key = oclml__rehearsal_key(key, &p->window_right, sizeof p->window_right);
    key = oclml__rehearsal_key_tensor(key, p->key_lengths);
    const int dropping = dropout_of(p) != NULL;
    key = oclml__rehearsal_key(key, &dropping, sizeof dropping);
    return oclml__rehearsal_key_tensor(key, p->mask);
}

/* The forward's checks: params (NULL: the defaults, set in *defaults), q, k, v and o of the
 * dtypes `dtypes`, o of q's shape, lse (fp32, may be NULL) [B, H, Lq], the outputs apart from
 * the inputs and each other; *s the shape. */
static oclml_status check_forward(oclml_ctx *ctx, const oclml_attention_params **params,
                                  oclml_attention_params *defaults, const oclml_tensor *q,
                                  const oclml_tensor *k, const oclml_tensor *v,
                                  const oclml_tensor *o, const oclml_tensor *lse, unsigned dtypes,
                                  oclml__att_shape *s) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = begin_call(ctx, params, defaults, q, k, v, dtypes, s);
    if (st) return st;
    /* o NULL only for the plan's geometry (the forward refuses it here) */
    if (o || dtypes == FP32) st = oclml__check_same_shape_of(ctx, o, "o", q, "q", dtypes);
    if (!st && lse) {
        const size_t want[3] = {s->B, s->H, s->LQ};
        st = oclml__check_dims(ctx, lse, "lse", 3, want);
    }
    const oclml_tensor *in[] = {q, k, v, (*params)->mask, (*params)->key_lengths, lse};
    if (!st) st = check_apart(ctx, o, "o", in, 6);
    if (!st) st = check_apart(ctx, lse, "lse", in, 5);
    return st;
}

static oclml_status attention_run(oclml_ctx *ctx, const oclml_attention_params *params,
                                  const oclml_tensor *q, const oclml_tensor *k,
                                  const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse,
                                  bool one_tf32) {
    oclml_attention_params defaults;
    oclml__att_shape s;
    oclml_status st = check_forward(ctx, &params, &defaults, q, k, v, o, lse, FP32, &s);
    if (st) return st;
    s.one_tf32 = one_tf32;
    const att_call c = call_of(ctx, params, s, q, k, v, NULL);
    return forward(&c, q, k, v, o, lse);
}

/* g's geometry from params (checked) and its shape g->s. */
static void geometry_of(oclml_ctx *ctx, const oclml_attention_params *params, const oclml_tensor *q,
                        const oclml_tensor *k, const oclml_tensor *v, oclml__att_geometry *g) {
    const att_call c = call_of(ctx, params, g->s, q, k, v, NULL);
    g->scale = c.scale;
    g->shift = c.shift;
    g->wl = c.wl;
    g->wr = c.wr;
    g->window = window_side(params->window_left, &g->s) >= 0 ||
                window_side(params->window_right, &g->s) >= 0;
}

oclml_status oclml__attention_geometry(oclml_ctx *ctx, const oclml_attention_params *params,
                                       const oclml_tensor *q, const oclml_tensor *k,
                                       const oclml_tensor *v, const oclml_tensor *o,
                                       const oclml_tensor *lse, oclml__att_geometry *g) {
    oclml_attention_params defaults;
    oclml_status st =
        check_forward(ctx, &params, &defaults, q, k, v, o, lse, OCLML__DTYPES_ALL, &g->s);
    if (st) return st;
    geometry_of(ctx, params, q, k, v, g);
    return OCLML_SUCCESS;
}

oclml_status oclml__attention_fp32(oclml_ctx *ctx, const oclml_attention_params *params,
                                   const oclml_tensor *q, const oclml_tensor *k,
                                   const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse,
                                   bool one_tf32) {
    uint64_t key = oclml__rehearsal_key(0, "attention", 9);
    key = oclml__rehearsal_key(key, &one_tf32, sizeof one_tf32);
    key = attention_params_key(key, params);
    key = oclml__rehearsal_key_tensor(key, q);
    key = oclml__rehearsal_key_tensor(key, k);
    key = oclml__rehearsal_key_tensor(key, v);
    key = oclml__rehearsal_key_tensor(key, o);
    key = oclml__rehearsal_key_tensor(key, lse);
    OCLML__REHEARSED(ctx, key, attention_run(ctx, params, q, k, v, o, lse, one_tf32));
}

oclml_status oclml_attention(oclml_ctx *ctx, const oclml_attention_params *params,
                             const oclml_tensor *q, const oclml_tensor *k, const oclml_tensor *v,
                             oclml_tensor *o, oclml_tensor *lse) {
    const oclml_tensor *const lp[] = {q, k, v, o, lse};
    if (oclml__any_16bit(5, lp)) return oclml__attention_lp(ctx, params, q, k, v, o, lse);
    return oclml__attention_fp32(ctx, params, q, k, v, o, lse, false);
}

oclml_status oclml__attention_plan_fp32(oclml_ctx *ctx, const oclml_attention_params *params,
                                        const oclml_tensor *q, const oclml_tensor *k,
                                        const oclml_tensor *v, char *text, size_t len,
                                        bool one_tf32) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st && (!text || len == 0))
        st = oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "text buffer is NULL or empty");
    oclml_attention_params defaults;
    oclml__att_shape s;
    if (!st) st = begin_call(ctx, &params, &defaults, q, k, v, FP32, &s);
    if (st) return st;
    s.one_tf32 = one_tf32;
    /* dO taken to be laid out as Q, as the forward's output is. */
    const att_call c = call_of(ctx, params, s, q, k, v, q);
    oclml__att_describe(ctx, &c.s, text, len);
    return OCLML_SUCCESS;
}

oclml_status oclml_attention_plan(oclml_ctx *ctx, const oclml_attention_params *params,
                                  const oclml_tensor *q, const oclml_tensor *k,
                                  const oclml_tensor *v, char *text, size_t len) {
    const oclml_tensor *const lp[] = {q, k, v};
    if (oclml__any_16bit(3, lp)) return oclml__attention_plan_lp(ctx, params, q, k, v, text, len);
    return oclml__attention_plan_fp32(ctx, params, q, k, v, text, len, false);
}

/* ---- backward ---- */

/* The backward's arguments before each kernel's own (BWD_ARGS). */
typedef struct bwd_args {
    cl_mem q, k, v, dout, lse, delta;
    cl_ulong q_off, k_off, v_off, dout_off, lse_off;
} bwd_args;

static unsigned put_bwd_args(const att_call *c, const bwd_args *b, oclml__arg *a) {
    unsigned n = 0;
    a[n++] = OCLML_ARG(b->q), a[n++] = OCLML_ARG(b->q_off), a[n++] = OCLML_ARG(b->k),
    a[n++] = OCLML_ARG(b->k_off), a[n++] = OCLML_ARG(b->v), a[n++] = OCLML_ARG(b->v_off),
    a[n++] = OCLML_ARG(b->dout), a[n++] = OCLML_ARG(b->dout_off), a[n++] = OCLML_ARG(b->lse),
    a[n++] = OCLML_ARG(b->lse_off), a[n++] = OCLML_ARG(b->delta), a[n++] = OCLML_ARG(c->mask),
    a[n++] = OCLML_ARG(c->mask_off), a[n++] = OCLML_ARG(c->keylen),
    a[n++] = OCLML_ARG(c->keylen_off);
    return n;
}

/* dQ = scale dS K of key heads c0 .. c1 - 1 (b HKV + hkv, in that order) from their dS in the
 * workspace ds, c0's first: batched GEMMs over key heads, the chunk's in BHLD, each batch
 * entry's in BLHD. In BHLD a key head's H / HKV query heads are contiguous rows of dQ, as of dS:
 * one product of the stacked rows, unless a causal mask or a right window bands dS (query i sees
 * no key past i + shift + wr: the GEMM reads a block of rows only up to its band), then one per
 * query head of the group, as in BLHD. With band_rows, runs nothing and sets *band_rows to the
 * tallest row block of those products that read dS only up to their band (0 if any reads it
 * all): the dK/dV kernel then leaves out the zeros past it. */
static oclml_status dq_from_ds(const att_call *c, const bwd_args *b, cl_mem ds, size_t c0,
                               size_t c1, oclml_tensor *dq, size_t *band_rows) {
    const oclml__att_shape *s = &c->s;
    const size_t ld = oclml__att_ds_ld(s), G = s->H / s->HKV, rows = G * s->LQ, D = s->D,
                 dq_off = oclml__elem_offset(dq);
    const bool blhd = c->p->layout == OCLML_ATTENTION_BLHD, banded = c->wr >= 0,
               stacked = !blhd && (!banded || G == 1);
    oclml__gemm_desc g = {.m = stacked ? rows : s->LQ,
                          .n = D,
                          .k = s->LK,
                          .alpha = c->scale,
                          .a_lower = banded,
                          .a_band = (long)c->shift + c->wr};
    oclml_status st = OCLML_SUCCESS;
    for (size_t u = c0; u < c1 && !st;) {
        const size_t bi = u / s->HKV, h0 = u % s->HKV,
                     u1 = blhd && c1 - u > s->HKV - h0 ? u + (s->HKV - h0) : c1;
        g.batch = u1 - u;
        for (size_t j = 0; j < (stacked ? 1 : G) && !st; j++) {
            g.a = (oclml__matrix){ds, ((u - c0) * rows + j * s->LQ) * ld, ld, rows * ld};
            if (blhd) {
                g.b =
                    (oclml__matrix){b->k, b->k_off + (bi * s->LK * s->HKV + h0) * D, s->HKV * D, D};
                g.c = (oclml__matrix){dq->mem, dq_off + (bi * s->LQ * s->H + h0 * G + j) * D,
                                      s->H * D, G * D};
            } else {
                g.b = (oclml__matrix){b->k, b->k_off + u * s->LK * D, D, s->LK * D};
                g.c = (oclml__matrix){dq->mem, dq_off + (u * rows + j * s->LQ) * D, D, rows * D};
            }
            if (band_rows) { /* the tallest block, 0 if any product reads every column */
                const size_t h = oclml__gemm_band_rows(c->ctx, &g);
                *band_rows = u == c0 && j == 0   ? h
                             : !h || !*band_rows ? 0
                             : h > *band_rows    ? h
                                                 : *band_rows;
            } else {
                st = oclml__gemm(c->ctx, &g);
            }
        }
        u = u1;
    }
    return st;
}

/* dK and dV (the dK/dV kernel over every key head) and, with plan->dq_gemm_heads > 0, dQ from
 * dS: the key heads taken that many at a time, each chunk's dS written to the workspace and
 * multiplied by K. */
static oclml_status dkdv(const att_call *c, const bwd_args *b, const oclml__att_backward_plan *plan,
                         oclml_tensor *dq, cl_mem dk, cl_ulong dk_off, cl_mem dv, cl_ulong dv_off) {
    const size_t heads = plan->dq_gemm_heads;
    const int mode = plan->dkdv.mma;
    const oclml__att_tile t = plan->dkdv.tile;
    cl_kernel kern;
    oclml_status st = kernel_of(c, &plan->dkdv, &kern);
    if (st) return st;
    const size_t total = c->s.B * c->s.HKV, chunk = heads ? heads : total;
    cl_mem ds = NULL;
    cl_ulong ld = heads ? oclml__att_ds_ld(&c->s) : 0;
    cl_uint bh0 = 0, band_rows = 0;
    oclml__arg a[40];
    unsigned n = put_bwd_args(c, b, a);
    a[n++] = OCLML_ARG(dk), a[n++] = OCLML_ARG(dk_off), a[n++] = OCLML_ARG(dv),
    a[n++] = OCLML_ARG(dv_off);
    /* The arguments point at ds, bh0 and band_rows, read at each launch: set below, the last
     * two per chunk (band_rows: the dQ GEMM's, DS_OUT). */
    if (mode)
        a[n++] = OCLML_ARG(ds), a[n++] = OCLML_ARG(ld), a[n++] = OCLML_ARG(bh0),
        a[n++] = OCLML_ARG(band_rows);
    n = geom_args(c, a, n);
    if (heads && (st = oclml__scratch_get(c->ctx, heads * oclml__att_ds_head_bytes(&c->s), &ds)))
        return st;
    /* Key blocks: BK keys on FMAs, KEYS of the tensor-core kernel (mma_block: 16 a warp, 8
     * paired, 4 in fours). */
    const size_t keys = mode ? (size_t)t.ty * t.rq : (size_t)t.tx * t.rk;
    for (size_t c0 = 0; c0 < total && !st; c0 += chunk) {
        const size_t c1 = c0 + chunk < total ? c0 + chunk : total;
        bh0 = (cl_uint)c0;
        /* Where the GEMM reads dS only up to its band, the kernel writes no zero past it (3%
         * of a causal backward on the H100: bench/DECISIONS.md, "No dS zeros written"). */
        size_t rows = 0;
        if (heads && c->wr >= 0) dq_from_ds(c, b, ds, c0, c1, dq, &rows);
        band_rows = (cl_uint)rows;
        st = launch_tiled(c, kern, t, a, n, oclml__ceil_div(c->s.LK, keys), c1 - c0, 1);
        if (!st && heads) st = dq_from_ds(c, b, ds, c0, c1, dq, NULL);
    }
    if (ds) oclml__scratch_put(c->ctx, ds);
    if (st || !heads) return st;
    /* The rows that see no key: dQ 0, as from the dQ kernel. */
    if ((st = kernel_of(c, &plan->dq_empty, &kern))) return st;
    cl_ulong rows_all = (cl_ulong)(c->s.B * c->s.H * c->s.LQ), dq_off = oclml__elem_offset(dq);
    const oclml__arg ae[] = {OCLML_ARG(b->lse), OCLML_ARG(b->lse_off), OCLML_ARG(dq->mem),
                             OCLML_ARG(dq_off), OCLML_ARG(rows_all),   OCLML_ARG(c->H),
                             OCLML_ARG(c->LQ)};
    return launch_rows(c, kern, ae, sizeof ae / sizeof ae[0], rows_all);
}

static oclml_status backward(const att_call *c, const bwd_args *b, const oclml_tensor *o,
                             oclml_tensor *dq, cl_mem dk, cl_ulong dk_off, cl_mem dv,
                             cl_ulong dv_off, oclml_tensor *dmask) {
    /* dk: dK or dV wanted (the other may go to scratch) */
    oclml__att_backward_plan plan;
    oclml__att_plan_backward(c->ctx, &c->s, dk && dq, &plan);
    cl_kernel kern;
    cl_ulong rows_all = (cl_ulong)(c->s.B * c->s.H * c->s.LQ), o_off = oclml__elem_offset(o);
    oclml_status st = kernel_of(c, &plan.delta, &kern);
    if (st) return st;
    const oclml__arg ad[] = {OCLML_ARG(o->mem),      OCLML_ARG(o_off),    OCLML_ARG(b->dout),
                             OCLML_ARG(b->dout_off), OCLML_ARG(b->delta), OCLML_ARG(rows_all),
                             OCLML_ARG(c->H),        OCLML_ARG(c->LQ)};
    if ((st = launch_rows(c, kern, ad, sizeof ad / sizeof ad[0], rows_all))) return st;
    oclml__arg a[40];
    unsigned n;
    if (dk && (st = dkdv(c, b, &plan, dq, dk, dk_off, dv, dv_off))) return st;
    if (dq && !plan.dq_gemm_heads) {
        const oclml__att_tile t = plan.dq.tile;
        if ((st = kernel_of(c, &plan.dq, &kern))) return st;
        cl_ulong dq_off = oclml__elem_offset(dq);
        n = put_bwd_args(c, b, a);
        a[n++] = OCLML_ARG(dq->mem), a[n++] = OCLML_ARG(dq_off);
        n = geom_args(c, a, n);
        if ((st = launch_tiled(c, kern, t, a, n,
                               oclml__ceil_div(c->s.H / c->s.HKV * c->s.LQ, (size_t)t.ty * t.rq),
                               c->s.B * c->s.HKV, 1)))
            return st;
    }
    if (dmask) {
        const oclml__att_tile t = plan.dmask.tile;
        if ((st = kernel_of(c, &plan.dmask, &kern))) return st;
        cl_ulong dm_off = oclml__elem_offset(dmask);
        cl_uint mb = (cl_uint)c->s.mask_b, mh = (cl_uint)c->s.mask_h;
        n = put_bwd_args(c, b, a);
        a[n++] = OCLML_ARG(dmask->mem), a[n++] = OCLML_ARG(dm_off), a[n++] = OCLML_ARG(mb),
        a[n++] = OCLML_ARG(mh);
        n = geom_args(c, a, n);
        st = launch_tiled(c, kern, t, a, n, oclml__ceil_div(c->s.LK, (size_t)t.tx * t.rk),
                          oclml__ceil_div(c->s.LQ, (size_t)t.ty * t.rq), c->s.mask_b * c->s.mask_h);
    }
    return st;
}

/* The backward's checks: params (NULL: the defaults, set in *defaults), q, k, v, o, dout, dq,
 * dk and dv of the dtypes `dtypes` (dq, dk, dv may be NULL), o, dout and dq of q's shape, dk and
 * dv of k's, lse fp32 [B, H, Lq], dmask (fp32, may be NULL) of the mask's shape and only with
 * one, every gradient apart from the inputs and the other gradients; *s the shape. */
static oclml_status
check_backward(oclml_ctx *ctx, const oclml_attention_params **pp, oclml_attention_params *defaults,
               const oclml_tensor *q, const oclml_tensor *k, const oclml_tensor *v,
               const oclml_tensor *o, const oclml_tensor *lse, const oclml_tensor *dout,
               const oclml_tensor *dq, const oclml_tensor *dk, const oclml_tensor *dv,
               const oclml_tensor *dmask, unsigned dtypes, oclml__att_shape *sp) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = begin_call(ctx, pp, defaults, q, k, v, dtypes, sp);
    if (st) return st;
    const oclml_attention_params *params = *pp;
    const oclml__att_shape s = *sp;
    st = oclml__check_same_shape_of(ctx, o, "o", q, "q", dtypes);
    if (!st) st = oclml__check_same_shape_of(ctx, dout, "dout", q, "q", dtypes);
    if (!st) {
        const size_t want[3] = {s.B, s.H, s.LQ};
        st = oclml__check_tensor(ctx, lse, "lse");
        if (!st) st = oclml__check_dims(ctx, lse, "lse", 3, want);
    }
    if (!st && dq) st = oclml__check_same_shape_of(ctx, dq, "dq", q, "q", dtypes);
    if (!st && dk) st = oclml__check_same_shape_of(ctx, dk, "dk", k, "k", dtypes);
    if (!st && dv) st = oclml__check_same_shape_of(ctx, dv, "dv", v, "v", dtypes);
    if (!st && dmask && !params->mask)
        st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "dmask given but params has no mask");
    if (!st && dmask) st = oclml__check_same_shape(ctx, dmask, "dmask", params->mask, "mask");
    const oclml_tensor *all[] = {q,  k,  v,  o,    lse, dout, params->mask, params->key_lengths,
                                 dq, dk, dv, dmask};
    const oclml_tensor *outs[] = {dq, dk, dv, dmask};
    const char *names[] = {"dq", "dk", "dv", "dmask"};
    /* Every gradient against the 8 inputs and the other gradients (slot 8 + i is itself). */
    for (int i = 0; i < 4 && !st; i++) {
        for (int j = 0; j < 12 && !st; j++)
            if (j != 8 + i && outs[i] && all[j] && oclml__overlap(outs[i], all[j]))
                st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                                 "attention gradient '%s' overlaps an input or another output",
                                 names[i]);
    }
    return st;
}

static oclml_status attention_backward_run(oclml_ctx *ctx, const oclml_attention_params *params,
                                           const oclml_tensor *q, const oclml_tensor *k,
                                           const oclml_tensor *v, const oclml_tensor *o,
                                           const oclml_tensor *lse, const oclml_tensor *dout,
                                           oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv,
                                           oclml_tensor *dmask, bool one_tf32) {
    oclml_attention_params defaults;
    oclml__att_shape s;
    oclml_status st =
        check_backward(ctx, &params, &defaults, q, k, v, o, lse, dout, dq, dk, dv, dmask, FP32, &s);
    if (st) return st;
    s.one_tf32 = one_tf32;
    const att_call c = call_of(ctx, params, s, q, k, v, dout);
    bwd_args b = {.q = q->mem,
                  .k = k->mem,
                  .v = v->mem,
                  .dout = dout->mem,
                  .lse = lse->mem,
                  .q_off = oclml__elem_offset(q),
                  .k_off = oclml__elem_offset(k),
                  .v_off = oclml__elem_offset(v),
                  .dout_off = oclml__elem_offset(dout),
                  .lse_off = oclml__elem_offset(lse)};
    /* dK and dV come from one kernel: a missing one goes to scratch. */
    cl_mem spare = NULL;
    const size_t kv_bytes = k->numel * sizeof(float);
    if ((dk != NULL) != (dv != NULL)) st = oclml__scratch_get(ctx, kv_bytes, &spare);
    if (!st) st = oclml__scratch_get(ctx, s.B * s.H * s.LQ * sizeof(float), &b.delta);
    if (!st) {
        cl_mem dk_mem = dk ? dk->mem : spare, dv_mem = dv ? dv->mem : spare;
        cl_ulong dk_off = dk ? oclml__elem_offset(dk) : 0, dv_off = dv ? oclml__elem_offset(dv) : 0;
        st = backward(&c, &b, o, dq, dk || dv ? dk_mem : NULL, dk_off, dv_mem, dv_off, dmask);
    }
    if (b.delta) oclml__scratch_put(ctx, b.delta);
    if (spare) oclml__scratch_put(ctx, spare);
    return st;
}

oclml_status oclml__attention_backward_geometry(
    oclml_ctx *ctx, const oclml_attention_params *params, const oclml_tensor *q,
    const oclml_tensor *k, const oclml_tensor *v, const oclml_tensor *o, const oclml_tensor *lse,
    const oclml_tensor *dout, const oclml_tensor *dq, const oclml_tensor *dk,
    const oclml_tensor *dv, const oclml_tensor *dmask, oclml__att_geometry *g) {
    oclml_attention_params defaults;
    oclml_status st = check_backward(ctx, &params, &defaults, q, k, v, o, lse, dout, dq, dk, dv,
                                     dmask, OCLML__DTYPES_ALL, &g->s);
    if (st) return st;
    geometry_of(ctx, params, q, k, v, g);
    return OCLML_SUCCESS;
}

oclml_status oclml__attention_backward_fp32(oclml_ctx *ctx, const oclml_attention_params *params,
                                            const oclml_tensor *q, const oclml_tensor *k,
                                            const oclml_tensor *v, const oclml_tensor *o,
                                            const oclml_tensor *lse, const oclml_tensor *dout,
                                            oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv,
                                            oclml_tensor *dmask, bool one_tf32) {
    uint64_t key = oclml__rehearsal_key(0, "attention_backward", 18);
    key = oclml__rehearsal_key(key, &one_tf32, sizeof one_tf32);
    key = attention_params_key(key, params);
    key = oclml__rehearsal_key_tensor(key, q);
    key = oclml__rehearsal_key_tensor(key, k);
    key = oclml__rehearsal_key_tensor(key, v);
    key = oclml__rehearsal_key_tensor(key, o);
    key = oclml__rehearsal_key_tensor(key, lse);
    key = oclml__rehearsal_key_tensor(key, dout);
    key = oclml__rehearsal_key_tensor(key, dq);
    key = oclml__rehearsal_key_tensor(key, dk);
    key = oclml__rehearsal_key_tensor(key, dv);
    key = oclml__rehearsal_key_tensor(key, dmask);
    OCLML__REHEARSED(
        ctx, key,
        attention_backward_run(ctx, params, q, k, v, o, lse, dout, dq, dk, dv, dmask, one_tf32));
}

oclml_status oclml_attention_backward(oclml_ctx *ctx, const oclml_attention_params *params,
                                      const oclml_tensor *q, const oclml_tensor *k,
                                      const oclml_tensor *v, const oclml_tensor *o,
                                      const oclml_tensor *lse, const oclml_tensor *dout,
                                      oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv,
                                      oclml_tensor *dmask) {
    const oclml_tensor *const lp[] = {q, k, v, o, lse, dout, dq, dk, dv};
    if (oclml__any_16bit(9, lp))
        return oclml__attention_backward_lp(ctx, params, q, k, v, o, lse, dout, dq, dk, dv, dmask);
    return oclml__attention_backward_fp32(ctx, params, q, k, v, o, lse, dout, dq, dk, dv, dmask,
                                          false);
}
