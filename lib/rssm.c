/* RSSM ensemble rollout (cl/rssm.cl): weights transposed once per call into scratch, then one
 * persistent work-group per member for all T steps, then one summary launch. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define FILE_CL "rssm.cl"
/* Per-member weight size from which GPUs take the wide path (set from H100 measurements). */
#define WIDE_MIN_WEIGHT_BYTES (4.0 * 1024 * 1024)

oclml_status oclml_rssm_config_init(oclml_rssm_config *c) {
    if (!c) return OCLML_ERR_NULL_POINTER;
    memset(c, 0, sizeof *c);
    c->variant = OCLML_GRU_TORCH;
    c->steps = 50;
    c->groups = 16;
    c->classes = 16;
    c->feedback = 8;
    c->unimix = 0.01f;
    c->mode = OCLML_RSSM_MEAN;
    return OCLML_SUCCESS;
}

typedef struct dims {
    size_t E, D, S, F, T, G, C, K;
} dims;

static oclml_status opt_shape(oclml_ctx *ctx, const oclml_tensor *t, const char *name, int nd, size_t a,
                              size_t b) {
    return t ? oclml__check_shape(ctx, t, name, nd, a, b, 0) : OCLML_SUCCESS;
}

static oclml_status validate(oclml_ctx *ctx, const oclml_rssm_config *c, const oclml_rssm_weights *w,
                             const oclml_rssm_state *s, const oclml_rssm_outputs *o, dims *d) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!c || !w || !s || !o) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "config, weights, start and outputs are required");
    if (c->variant != OCLML_GRU_TORCH && c->variant != OCLML_GRU_CHO)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "unknown GRU variant %d", (int)c->variant);
    if (c->mode != OCLML_RSSM_MEAN && c->mode != OCLML_RSSM_SAMPLE)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "unknown mode %d", (int)c->mode);
    if (!(c->unimix >= 0.0f && c->unimix < 1.0f))
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "unimix u = %g is outside [0, 1)", (double)c->unimix);
    if (c->steps == 0 || c->steps > 0xFFFFFFFFu || c->groups == 0 || c->classes == 0)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "steps, groups and classes must be >= 1");
    st = oclml__check_tensor(ctx, s->h, "start.h");
    if (!st) st = oclml__check_tensor(ctx, s->z, "start.z");
    if (!st) st = oclml__check_tensor(ctx, s->f, "start.f");
    if (st) return st;
    if (s->h->ndim != 2 || s->z->ndim != 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "start.h must be [E x D] and start.z [E x S]");
    d->E = s->h->shape[0];
    d->D = s->h->shape[1];
    d->S = s->z->shape[1];
    d->F = s->f->shape[s->f->ndim - 1];
    d->T = c->steps;
    d->G = c->groups;
    d->C = c->classes;
    d->K = c->feedback;
    if (d->G * d->C != d->S)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "G * C = %zu x %zu does not match z's %zu", d->G, d->C, d->S);
    if (d->K > d->F)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "feedback k = %zu exceeds F = %zu", d->K, d->F);
    if (s->z->shape[0] != d->E) return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "start.z must have E = %zu rows", d->E);
    if (!(s->f->ndim == 1 || (s->f->ndim == 2 && s->f->shape[0] == d->E)))
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "start.f must be [E x F] or [F]");
    size_t E = d->E, D = d->D, S = d->S, F = d->F, T = d->T;
    st = oclml__check_shape(ctx, w->w_ih, "w_ih", 3, E, 3 * D, F + S);
    if (!st) st = oclml__check_shape(ctx, w->w_hh, "w_hh", 3, E, 3 * D, D);
    if (!st) st = opt_shape(ctx, w->b_ih, "b_ih", 2, E, 3 * D);
    if (!st) st = opt_shape(ctx, w->b_hh, "b_hh", 2, E, 3 * D);
    if (!st) st = oclml__check_shape(ctx, w->w_p, "w_p", 3, E, S, D);
    if (!st) st = oclml__check_shape(ctx, w->b_p, "b_p", 2, E, S, 0);
    if (!st) st = oclml__check_shape(ctx, w->w_y, "w_y", 2, E, D + S, 0);
    if (!st) st = oclml__check_shape(ctx, w->b_y, "b_y", 1, E, 0, 0);
    if (!st) st = opt_shape(ctx, s->y0, "start.y0", 1, E, 0);
    if (!st) st = oclml__check_shape(ctx, o->y, "out.y", 2, E, T, 0);
    if (!st) st = opt_shape(ctx, o->entropy, "out.entropy", 2, E, T);
    if (!st) st = opt_shape(ctx, o->hnorm, "out.hnorm", 2, E, T);
    if (!st) st = opt_shape(ctx, o->h_final, "out.h_final", 2, E, D);
    if (!st) st = opt_shape(ctx, o->z_final, "out.z_final", 2, E, S);
    if (!st) st = opt_shape(ctx, o->f_final, "out.f_final", 2, E, F);
    if (!st) st = opt_shape(ctx, o->y_mean, "out.y_mean", 1, T, 0);
    if (!st) st = opt_shape(ctx, o->y_std, "out.y_std", 1, T, 0);
    if (!st) st = opt_shape(ctx, o->deltas, "out.deltas", 2, E, T);
    if (!st) st = opt_shape(ctx, o->variance, "out.variance", 1, E, 0);
    if (!st) st = opt_shape(ctx, o->smoothness, "out.smoothness", 1, E, 0);
    if (!st) st = opt_shape(ctx, o->total_entropy, "out.total_entropy", 1, E, 0);
    return st;
}


/* Transposes every member's [rows x cols] into dst (scratch). */
static oclml_status transpose(oclml_ctx *ctx, const oclml_tensor *src, size_t E, size_t rows,
                              size_t cols, cl_mem dst) {
    cl_kernel k;
    oclml_status st = oclml__get_kernel(ctx, FILE_CL, NULL, "oclml_rssm_transpose", &k);
    if (st) return st;
    cl_ulong so = oclml__opt_offset(src);
    cl_uint r = (cl_uint)rows, c = (cl_uint)cols;
    oclml__arg args[] = {OCLML_ARG(src->mem), OCLML_ARG(so), OCLML_ARG(dst), OCLML_ARG(r), OCLML_ARG(c)};
    size_t local[3] = {16, 16, 1};
    if (ctx->info.max_work_group_size < 256) local[0] = local[1] = 1;
    size_t global[3] = {(cols + local[0] - 1) / local[0] * local[0], (rows + local[1] - 1) / local[1] * local[1], E};
    return oclml__launch(ctx, k, args, 5, 3, global, local);
}

/* ---- the wide path (cl/rssm.cl, oclml_rssm_wide_*): three launches per step over the whole
 * device, for members whose weights one SM cannot stream fast enough. ---- */
static oclml_status launch_named(oclml_ctx *ctx, const char *name, const oclml__arg *args, unsigned n,
                                 cl_uint ndims, const size_t *global, const size_t *local) {
    cl_kernel k;
    oclml_status st = oclml__get_kernel(ctx, FILE_CL, NULL, name, &k);
    return st ? st : oclml__launch(ctx, k, args, n, ndims, global, local);
}

static oclml_status rollout_wide(oclml_ctx *ctx, const oclml_rssm_config *c, const oclml_rssm_weights *w,
                                 const oclml_rssm_state *s, const oclml_rssm_outputs *o, const dims *d,
                                 cl_mem Yb, cl_ulong yo, cl_mem Hb, cl_ulong heo) {
    size_t E = d->E, D = d->D, S = d->S, F = d->F, IN = F + S;
    cl_mem xb = NULL, hb[2] = {NULL, NULL}, rh = NULL, lg = NULL;
    oclml_status st = oclml__scratch_get(ctx, E * IN * sizeof(float), &xb);
    if (!st) st = oclml__scratch_get(ctx, E * D * sizeof(float), &hb[0]);
    if (!st) st = oclml__scratch_get(ctx, E * D * sizeof(float), &hb[1]);
    if (!st) st = oclml__scratch_get(ctx, E * D * sizeof(float), &rh);
    if (!st) st = oclml__scratch_get(ctx, E * S * sizeof(float), &lg);
    size_t max_wg = ctx->info.max_work_group_size;
    cl_uint SEG = ctx->info.is_gpu && max_wg >= 96 ? 32 : 1;
    size_t tl = 1;
    while (tl * 2 <= (max_wg < 256 ? max_wg : 256)) tl *= 2;
    cl_uint flags = (w->b_ih ? 1 : 0) | (w->b_hh ? 2 : 0) | (o->hnorm ? 4 : 0) | (o->h_final ? 8 : 0) |
                    (o->z_final ? 16 : 0) | (o->f_final ? 32 : 0) | (s->f->ndim == 1 ? 64 : 0);
    cl_uint uD = (cl_uint)D, uS = (cl_uint)S, uF = (cl_uint)F, uIN = (cl_uint)IN, uT = (cl_uint)d->T,
            uG = (cl_uint)d->G, uC = (cl_uint)d->C, uK = (cl_uint)d->K, cho = c->variant == OCLML_GRU_CHO,
            sample = c->mode == OCLML_RSSM_SAMPLE, seed_lo = (cl_uint)c->seed,
            seed_hi = (cl_uint)(c->seed >> 32), t0 = (cl_uint)c->step_offset;
    float u = c->unimix;
    cl_ulong h0o = oclml__opt_offset(s->h), z0o = oclml__opt_offset(s->z), f0o = oclml__opt_offset(s->f), wio = oclml__opt_offset(w->w_ih), who = oclml__opt_offset(w->w_hh),
             bio = oclml__opt_offset(w->b_ih), bho = oclml__opt_offset(w->b_hh), wpo = oclml__opt_offset(w->w_p), bpo = oclml__opt_offset(w->b_p), wyo = oclml__opt_offset(w->w_y),
             byo = oclml__opt_offset(w->b_y), hno = oclml__opt_offset(o->hnorm), hfo = oclml__opt_offset(o->h_final), zfo = oclml__opt_offset(o->z_final),
             ffo = oclml__opt_offset(o->f_final);
    cl_mem bi = oclml__opt_mem(w->b_ih), bh = oclml__opt_mem(w->b_hh), hn = oclml__opt_mem(o->hnorm), hf = oclml__opt_mem(o->h_final), zf = oclml__opt_mem(o->z_final),
           ff = oclml__opt_mem(o->f_final);
    if (!st) {
        oclml__arg a0[] = {OCLML_ARG(s->h->mem), OCLML_ARG(h0o), OCLML_ARG(s->z->mem), OCLML_ARG(z0o),
                           OCLML_ARG(s->f->mem), OCLML_ARG(f0o), OCLML_ARG(flags), OCLML_ARG(xb),
                           OCLML_ARG(hb[0]), OCLML_ARG(uD), OCLML_ARG(uS), OCLML_ARG(uF)};
        size_t g0 = E * tl;
        st = launch_named(ctx, "oclml_rssm_wide_init", a0, 12, 1, &g0, &tl);
    }
    size_t gl_gru[2] = {D * 3 * SEG, E}, lo_gru[2] = {3 * SEG, 1};
    size_t per = SEG > 1 ? (tl >= 256 ? 256 : tl) / SEG : 1;
    size_t gl_pr[2] = {(S + per - 1) / per * per * SEG, E}, lo_pr[2] = {per * SEG, 1};
    size_t gl_tail = E * tl;
    for (size_t t = 0; t < d->T && !st; t++) {
        cl_mem hin = hb[t % 2], hout = hb[(t + 1) % 2];
        cl_uint ut = (cl_uint)t, one = 1, zero = 0;
        if (cho) {
            oclml__arg ar[] = {OCLML_ARG(w->w_ih->mem), OCLML_ARG(wio), OCLML_ARG(w->w_hh->mem), OCLML_ARG(who),
                               OCLML_ARG(bi), OCLML_ARG(bio), OCLML_ARG(bh), OCLML_ARG(bho), OCLML_ARG(xb),
                               OCLML_ARG(hin), OCLML_ARG(hin), OCLML_ARG(rh), OCLML_ARG(flags), OCLML_ARG(cho),
                               OCLML_ARG(one), OCLML_ARG(uD), OCLML_ARG(uIN), OCLML_ARG(SEG),
                               OCLML_LOCAL((3 * SEG + 8) * sizeof(float))};
            st = launch_named(ctx, "oclml_rssm_wide_gru", ar, 19, 2, gl_gru, lo_gru);
        }
        cl_mem hvec = cho ? rh : hin;
        oclml__arg ag[] = {OCLML_ARG(w->w_ih->mem), OCLML_ARG(wio), OCLML_ARG(w->w_hh->mem), OCLML_ARG(who),
                           OCLML_ARG(bi), OCLML_ARG(bio), OCLML_ARG(bh), OCLML_ARG(bho), OCLML_ARG(xb),
                           OCLML_ARG(hin), OCLML_ARG(hvec), OCLML_ARG(hout), OCLML_ARG(flags), OCLML_ARG(cho),
                           OCLML_ARG(zero), OCLML_ARG(uD), OCLML_ARG(uIN), OCLML_ARG(SEG),
                           OCLML_LOCAL((3 * SEG + 8) * sizeof(float))};
        if (!st) st = launch_named(ctx, "oclml_rssm_wide_gru", ag, 19, 2, gl_gru, lo_gru);
        oclml__arg ap[] = {OCLML_ARG(w->w_p->mem), OCLML_ARG(wpo), OCLML_ARG(w->b_p->mem), OCLML_ARG(bpo),
                           OCLML_ARG(hout), OCLML_ARG(lg), OCLML_ARG(uD), OCLML_ARG(uS), OCLML_ARG(SEG),
                           OCLML_LOCAL(per * SEG * sizeof(float))};
        if (!st) st = launch_named(ctx, "oclml_rssm_wide_prior", ap, 10, 2, gl_pr, lo_pr);
        oclml__arg at[] = {OCLML_ARG(lg), OCLML_ARG(xb), OCLML_ARG(hout), OCLML_ARG(w->w_y->mem), OCLML_ARG(wyo),
                           OCLML_ARG(w->b_y->mem), OCLML_ARG(byo), OCLML_ARG(Yb), OCLML_ARG(yo), OCLML_ARG(Hb),
                           OCLML_ARG(heo), OCLML_ARG(hn), OCLML_ARG(hno), OCLML_ARG(hf), OCLML_ARG(hfo),
                           OCLML_ARG(zf), OCLML_ARG(zfo), OCLML_ARG(ff), OCLML_ARG(ffo), OCLML_ARG(flags),
                           OCLML_ARG(ut), OCLML_ARG(uT), OCLML_ARG(uD), OCLML_ARG(uG), OCLML_ARG(uC),
                           OCLML_ARG(uF), OCLML_ARG(uK), OCLML_ARG(u), OCLML_ARG(sample), OCLML_ARG(seed_lo),
                           OCLML_ARG(seed_hi), OCLML_ARG(t0), OCLML_LOCAL(3 * tl * sizeof(float))};
        if (!st) st = launch_named(ctx, "oclml_rssm_wide_tail", at, 33, 1, &gl_tail, &tl);
    }
    cl_mem scratch[] = {xb, hb[0], hb[1], rh, lg};
    for (int i = 0; i < 5; i++)
        if (scratch[i]) oclml__scratch_put(ctx, scratch[i]);
    return st;
}

/* Which path: $OCLML_RSSM_PATH = "wide" or "persistent" decides; else the wide path on GPUs when
 * a member's weights are large (one SM per member streams them too slowly), the persistent one
 * otherwise (no launch per step). */
static bool use_wide(const oclml_ctx *ctx, const dims *d) {
    const char *env = getenv("OCLML_RSSM_PATH");
    if (env && !strcmp(env, "wide")) return true;
    if (env && !strcmp(env, "persistent")) return false;
    double bytes = 4.0 * (3.0 * d->D * (d->F + d->S + d->D) + (double)d->S * d->D);
    return ctx->info.is_gpu && bytes > WIDE_MIN_WEIGHT_BYTES;
}

/* The persistent path: one work-group per member runs all T steps, state in local memory. */
static oclml_status rollout_persistent(oclml_ctx *ctx, const oclml_rssm_config *c, const oclml_rssm_weights *w,
                                       const oclml_rssm_state *s, const oclml_rssm_outputs *o, dims d,
                                       cl_mem Yb, cl_ulong yo, cl_mem Hb, cl_ulong heo) {
    /* Work-group: on a GPU as wide as the device allows (up to 1024), so that small D splits
     * each unit's dot products over several work-items; on a CPU just wide enough for one unit
     * per work-item. A power of two for the reductions; up to 4 units per work-item beyond. */
    size_t max_wg = ctx->info.max_work_group_size, cap = 1, L = 64;
    while (cap * 2 <= (max_wg < 1024 ? max_wg : 1024)) cap *= 2;
    while (L < d.D && L < cap) L *= 2;
    if (L > cap || ctx->info.is_gpu) L = cap;
    if (d.D > 4 * L)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED, "D = %zu exceeds 4x the work-group size %zu", d.D, L);
    /* Parts per unit (P) and per logit (PS) when the work-group outnumbers units or logits;
     * halved until the partial sums fit the local memory. */
    size_t P = d.D < L ? L / d.D : 1, PS = d.S < L ? L / d.S : 1;
    if (P > 8) P = 8;
    if (PS > 8) PS = 8;
    size_t lbytes;
    for (;;) {
        size_t pp = 0;
        if (P > 1 && 6 * d.D * P > pp) pp = 6 * d.D * P;
        if (PS > 1 && d.S * PS > pp) pp = d.S * PS;
        lbytes = (d.F + d.S + 2 * d.D + d.S + 3 * L + pp) * sizeof(float);
        if (lbytes <= ctx->info.local_mem_bytes || (P == 1 && PS == 1)) break;
        if (P > 1) P /= 2;
        else PS /= 2;
    }
    if (lbytes > ctx->info.local_mem_bytes)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED, "the rollout's state needs %zu bytes of local memory, the device has %zu",
                           lbytes, ctx->info.local_mem_bytes);
    size_t E = d.E, D = d.D, S = d.S, F = d.F, T = d.T, IN = F + S;
    cl_mem wiT = NULL, whT = NULL, wpT = NULL;
    oclml_status st = oclml__scratch_get(ctx, E * 3 * D * IN * sizeof(float), &wiT);
    if (!st) st = oclml__scratch_get(ctx, E * 3 * D * D * sizeof(float), &whT);
    if (!st) st = oclml__scratch_get(ctx, E * S * D * sizeof(float), &wpT);
    if (!st) st = transpose(ctx, w->w_ih, E, 3 * D, IN, wiT);
    if (!st) st = transpose(ctx, w->w_hh, E, 3 * D, D, whT);
    if (!st) st = transpose(ctx, w->w_p, E, S, D, wpT);
    cl_kernel k;
    if (!st) st = oclml__get_kernel(ctx, FILE_CL, NULL, "oclml_rssm_rollout", &k);
    if (!st) {
        cl_uint flags = (w->b_ih ? 1 : 0) | (w->b_hh ? 2 : 0) | (o->hnorm ? 4 : 0) | (o->h_final ? 8 : 0) |
                        (o->z_final ? 16 : 0) | (o->f_final ? 32 : 0) | (s->f->ndim == 1 ? 64 : 0);
        cl_uint cho = c->variant == OCLML_GRU_CHO, uT = (cl_uint)T, uD = (cl_uint)D, uG = (cl_uint)d.G,
                uC = (cl_uint)d.C, uF = (cl_uint)F, uK = (cl_uint)d.K, sample = c->mode == OCLML_RSSM_SAMPLE,
                seed_lo = (cl_uint)c->seed, seed_hi = (cl_uint)(c->seed >> 32), t0 = (cl_uint)c->step_offset,
                uP = (cl_uint)P, uPS = (cl_uint)PS;
        float u = c->unimix;
        cl_mem bi = oclml__opt_mem(w->b_ih), bh = oclml__opt_mem(w->b_hh), hn = oclml__opt_mem(o->hnorm), hf = oclml__opt_mem(o->h_final),
               zf = oclml__opt_mem(o->z_final), ff = oclml__opt_mem(o->f_final);
        cl_ulong bio = oclml__opt_offset(w->b_ih), bho = oclml__opt_offset(w->b_hh), bpo = oclml__opt_offset(w->b_p), wyo = oclml__opt_offset(w->w_y), byo = oclml__opt_offset(w->b_y),
                 h0o = oclml__opt_offset(s->h), z0o = oclml__opt_offset(s->z), f0o = oclml__opt_offset(s->f), hno = oclml__opt_offset(o->hnorm), hfo = oclml__opt_offset(o->h_final),
                 zfo = oclml__opt_offset(o->z_final), ffo = oclml__opt_offset(o->f_final);
        oclml__arg args[] = {
            OCLML_ARG(wiT), OCLML_ARG(whT), OCLML_ARG(bi), OCLML_ARG(bio), OCLML_ARG(bh), OCLML_ARG(bho),
            OCLML_ARG(wpT), OCLML_ARG(w->b_p->mem), OCLML_ARG(bpo), OCLML_ARG(w->w_y->mem), OCLML_ARG(wyo),
            OCLML_ARG(w->b_y->mem), OCLML_ARG(byo), OCLML_ARG(s->h->mem), OCLML_ARG(h0o), OCLML_ARG(s->z->mem),
            OCLML_ARG(z0o), OCLML_ARG(s->f->mem), OCLML_ARG(f0o), OCLML_ARG(Yb), OCLML_ARG(yo), OCLML_ARG(Hb),
            OCLML_ARG(heo), OCLML_ARG(hn),
            OCLML_ARG(hno), OCLML_ARG(hf), OCLML_ARG(hfo), OCLML_ARG(zf), OCLML_ARG(zfo), OCLML_ARG(ff),
            OCLML_ARG(ffo), OCLML_ARG(flags), OCLML_ARG(cho), OCLML_ARG(uT), OCLML_ARG(uD), OCLML_ARG(uG),
            OCLML_ARG(uC), OCLML_ARG(uF), OCLML_ARG(uK), OCLML_ARG(u), OCLML_ARG(sample), OCLML_ARG(seed_lo),
            OCLML_ARG(seed_hi), OCLML_ARG(t0), OCLML_ARG(uP), OCLML_ARG(uPS), OCLML_LOCAL(lbytes)};
        size_t global = E * L;
        st = oclml__launch(ctx, k, args, sizeof args / sizeof args[0], 1, &global, &L);
    }
    cl_mem scratch[] = {wiT, whT, wpT};
    for (int i = 0; i < 3; i++)
        if (scratch[i]) oclml__scratch_put(ctx, scratch[i]);
    return st;
}

oclml_status oclml_rssm_rollout(oclml_ctx *ctx, const oclml_rssm_config *c, const oclml_rssm_weights *w,
                                const oclml_rssm_state *s, const oclml_rssm_outputs *o) {
    dims d = {0};
    oclml_status st = validate(ctx, c, w, s, o, &d);
    if (st) return st;
    size_t E = d.E, T = d.T;
    cl_mem Yb = o->y->mem, Hb = o->entropy ? o->entropy->mem : NULL;
    cl_ulong yo = oclml__opt_offset(o->y), heo = oclml__opt_offset(o->entropy);
    /* Entropy always lands somewhere: the summary's total entropy reads it. */
    if (!Hb) st = oclml__scratch_get(ctx, E * T * sizeof(float), &Hb);
    if (!st) st = use_wide(ctx, &d) ? rollout_wide(ctx, c, w, s, o, &d, Yb, yo, Hb, heo)
                                    : rollout_persistent(ctx, c, w, s, o, d, Yb, yo, Hb, heo);
    cl_kernel ks;
    cl_uint outs = (o->y_mean ? 1 : 0) | (o->y_std ? 2 : 0) | (o->deltas ? 4 : 0) | (o->variance ? 8 : 0) |
                   (o->smoothness ? 16 : 0) | (o->total_entropy ? 32 : 0);
    if (!st && outs) st = oclml__get_kernel(ctx, FILE_CL, NULL, "oclml_rssm_summary", &ks);
    if (!st && outs) {
        cl_uint has_y0 = s->y0 != NULL, uE = (cl_uint)E, uT = (cl_uint)T;
        cl_mem y0 = oclml__opt_mem(s->y0), ym = oclml__opt_mem(o->y_mean), ys = oclml__opt_mem(o->y_std), dl = oclml__opt_mem(o->deltas), va = oclml__opt_mem(o->variance),
               sm = oclml__opt_mem(o->smoothness), te = oclml__opt_mem(o->total_entropy);
        cl_ulong y0o = oclml__opt_offset(s->y0), ymo = oclml__opt_offset(o->y_mean), yso = oclml__opt_offset(o->y_std), dlo = oclml__opt_offset(o->deltas), vo = oclml__opt_offset(o->variance),
                 smo = oclml__opt_offset(o->smoothness), teo = oclml__opt_offset(o->total_entropy);
        oclml__arg args[] = {OCLML_ARG(Yb), OCLML_ARG(yo), OCLML_ARG(Hb), OCLML_ARG(heo), OCLML_ARG(y0),
                             OCLML_ARG(y0o), OCLML_ARG(has_y0),
                             OCLML_ARG(uE), OCLML_ARG(uT), OCLML_ARG(ym), OCLML_ARG(ymo), OCLML_ARG(ys),
                             OCLML_ARG(yso), OCLML_ARG(dl), OCLML_ARG(dlo), OCLML_ARG(va), OCLML_ARG(vo),
                             OCLML_ARG(sm), OCLML_ARG(smo), OCLML_ARG(te), OCLML_ARG(teo), OCLML_ARG(outs)};
        size_t local = 64, global = ((E > T ? E : T) + 63) / 64 * 64;
        if (ctx->info.max_work_group_size < 64) local = 1, global = E > T ? E : T;
        st = oclml__launch(ctx, ks, args, 22, 1, &global, &local);
    }
    if (!o->entropy && Hb) oclml__scratch_put(ctx, Hb);
    return st;
}
