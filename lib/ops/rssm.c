/* RSSM ensemble rollout (cl/ops/rssm.cl): one launch runs all T steps with P work-groups per
 * member, then one summary launch. */
#include "ops/ops.h"

#include <stdio.h>

#include "../../cl/include/rssm_abi.h"

#include <stdlib.h>
#include <string.h>

#define FILE_CL "rssm.cl"
/* Per-member weight size from which GPUs use 1024-wide work-groups: the rows then come from
 * device memory, and more work-items keep more loads in flight (H100: D1024 4.1 ms at 1024,
 * 4.6 ms at 512; D256 0.80 ms at 256 and 0.91 ms at 1024). */
#define WIDE_GROUP_WEIGHT_BYTES (4.0 * 1024 * 1024)

/* The former name (include/oclml.h's aliases). */
oclml_status oclml_rssm_config_init(oclml_rssm_params *c) { return oclml_rssm_params_init(c); }

oclml_status oclml_rssm_params_init(oclml_rssm_params *c) {
    if (!c) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "params is NULL");
    memset(c, 0, sizeof *c);
    c->variant = OCLML_GRU_TORCH;
    c->steps = 50;
    c->groups = 16;
    c->classes = 16;
    c->feedback = 8;
    c->unimix = 0.01f;
    c->mode = OCLML_RSSM_MEAN;
    c->struct_size = sizeof *c;
    return OCLML_SUCCESS;
}

typedef struct dims {
    size_t E, D, S, F, T, G, C, K;
} dims;

static oclml_status opt_shape(oclml_ctx *ctx, const oclml_tensor *t, const char *name, int nd,
                              size_t a, size_t b) {
    return t ? oclml__check_shape(ctx, t, name, nd, a, b, 0) : OCLML_SUCCESS;
}

static oclml_status validate(oclml_ctx *ctx, const oclml_rssm_params *c,
                             const oclml_rssm_weights *w, const oclml_rssm_state *s,
                             const oclml_rssm_outputs *o, dims *d) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!w || !s || !o)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "weights, start and outputs are required");
    if (c->struct_size != sizeof *c)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG,
                           "config.struct_size is %zu, not %zu: fill the config with "
                           "oclml_rssm_params_init first",
                           c->struct_size, sizeof *c);
    if (c->variant != OCLML_GRU_TORCH && c->variant != OCLML_GRU_CHO)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "unknown GRU variant %d",
                           (int)c->variant);
    if (c->mode != OCLML_RSSM_MEAN && c->mode != OCLML_RSSM_SAMPLE)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "unknown mode %d", (int)c->mode);
    if (!(c->unimix >= 0.0f && c->unimix < 1.0f))
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "unimix u = %g is outside [0, 1)",
                           (double)c->unimix);
    if (c->steps == 0 || c->steps > 0xFFFFFFFFu || c->groups == 0 || c->classes == 0)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "steps, groups and classes must be >= 1");
    st = oclml__check_tensor(ctx, s->h, "start.h");
    if (!st) st = oclml__check_tensor(ctx, s->z, "start.z");
    if (!st) st = oclml__check_tensor(ctx, s->f, "start.f");
    if (st) return st;
    if (s->h->ndim != 2 || s->z->ndim != 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "start.h must be [E x D] and start.z [E x S]");
    d->E = s->h->shape[0];
    d->D = s->h->shape[1];
    d->S = s->z->shape[1];
    d->F = s->f->shape[s->f->ndim - 1];
    d->T = c->steps;
    d->G = c->groups;
    d->C = c->classes;
    d->K = c->feedback;
    size_t gc;
    if (!oclml__mul_ok(d->G, d->C, &gc) || gc != d->S) /* a product that wraps is no match */
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG,
                           "G * C = %zu x %zu does not match z's %zu", d->G, d->C, d->S);
    if (d->K > d->F)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "feedback k = %zu exceeds F = %zu", d->K,
                           d->F);
    if (s->z->shape[0] != d->E)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "start.z must have E = %zu rows", d->E);
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

/* The rollout's program: its three kernels (rollout, sync reset, summary) in one build, the
 * variant chosen by rollout_split. */
typedef struct rssm_variant {
    char defines[96];
    oclml__program_spec spec;
} rssm_variant;

/* The rollout kernel's shapes: the one-work-item kernel (RSSM_CPU: no barrier, nothing
 * unrolled; what CPUs run, as PoCL compiled the general kernel for minutes), the general kernel,
 * and the general kernel with each work-item's weight rows in registers (RSSM_REGS). */
typedef enum { ROLLOUT_SERIAL, ROLLOUT_GENERAL, ROLLOUT_REGS } rollout_shape;

static void variant_init(rssm_variant *v, const oclml_ctx *ctx, rollout_shape shape) {
    /* CPUs (the general kernel only under rssm.wg) keep 24 + 8 floats in registers. */
    const char *extra = shape == ROLLOUT_SERIAL    ? " -DRSSM_CPU"
                        : shape == ROLLOUT_GENERAL ? ""
                        : ctx->caps.is_gpu         ? " -DRSSM_REGS"
                                                   : " -DRSSM_REGS -DREG_A=6 -DREG_B=2";
    snprintf(v->defines, sizeof v->defines, "-DOCLML_IS_GPU=%d%s", ctx->caps.is_gpu, extra);
    v->spec = (oclml__program_spec){FILE_CL, v->defines,
                                    "oclml_rssm_rollout oclml_rssm_sync_reset oclml_rssm_summary",
                                    shape == ROLLOUT_REGS && ctx->caps.is_gpu ? 255 : 0};
}

static oclml_status launch_named(oclml_ctx *ctx, const rssm_variant *v, const char *name,
                                 const oclml__arg *args, unsigned n, cl_uint ndims,
                                 const size_t *global, const size_t *local) {
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &v->spec, name, &k);
    return st ? st : oclml__launch(ctx, k, args, n, ndims, global, local, NULL);
}

/* Work-groups per member (P). All E P of them must be resident at once, so a GPU with GPU-scope
 * acquire/release (inline PTX) gets floor(compute units / E) (each work-group then has a compute
 * unit's load pipes to itself). Other devices run whole members (P = 1): on CPUs work-groups run
 * one after another, so a sync would only wait for the abort, and other GPUs' fences are not
 * verified for syncs across work-groups (cl/include/ptx.h). The tuning key rssm.split sets P on
 * any device (tests, tuning). */
static size_t split_parts(oclml_ctx *ctx, const dims *d, size_t L, bool serial) {
    size_t P = (size_t)oclml__tune(ctx, OCLML__TUNE_RSSM_SPLIT, 0);
    if (P == 0) P = ctx->caps.is_gpu && oclml__caps_ptx(ctx) ? ctx->caps.compute_units / d->E : 1;
    if (P > d->D) P = d->D;
    /* The general kernel's 4 P partial sums fit the work-group's 2 L reduction slots. */
    if (!serial && P > L / 2) P = L / 2;
    if (P < 1) P = 1;
    size_t U = (d->D + P - 1) / P;
    return (d->D + U - 1) / U; /* no work-group without units */
}

/* Local memory of the rollout kernel (the layout at the top of oclml_rssm_rollout). */
static size_t rollout_local_bytes(const dims *d, size_t L, size_t P) {
    size_t IN = d->F + d->S, r4 = ~(size_t)3, NG = (d->G + P - 1) / P;
    return (((IN + 3) & r4) + 2 * ((d->D + 3) & r4) + 4 * L + NG * d->C + 2 * NG + d->K + 1) *
           sizeof(float);
}

/* The general kernel's work-group size: on GPUs 256, 1024 for members whose weights stream from
 * device memory or when each member has one work-group (whole_members: more loads in flight); 64
 * on CPUs; the tuning key rssm.wg (8 and up) overrides it. Halved while the P = 1 layout (the
 * guard's) does not fit the local memory; 0 when even 8 does not. */
static size_t rollout_wg(const oclml_ctx *ctx, const dims *d, bool whole_members) {
    double bytes = 4.0 * (3.0 * d->D * (d->F + d->S + d->D) + (double)d->S * d->D);
    size_t L = !ctx->caps.is_gpu                                    ? 64
               : (whole_members || bytes > WIDE_GROUP_WEIGHT_BYTES) ? 1024
                                                                    : 256;
    if (oclml__tune(ctx, OCLML__TUNE_RSSM_WG, 0) >= 8)
        L = (size_t)oclml__tune(ctx, OCLML__TUNE_RSSM_WG, 0);
    while (L >= 8 && (L > ctx->caps.max_work_group_size ||
                      rollout_local_bytes(d, L, 1) > ctx->caps.local_mem_bytes))
        L /= 2;
    return L >= 8 ? L : 0;
}

static oclml_status rollout_split(oclml_ctx *ctx, const oclml_rssm_params *c,
                                  const oclml_rssm_weights *w, const oclml_rssm_state *s,
                                  const oclml_rssm_outputs *o, const dims *d, cl_mem Yb,
                                  cl_ulong yo, cl_mem Hb, cl_ulong heo, rssm_variant *v) {
    /* The one-work-item kernel where rssm.wg says 1, or by default on devices that are not GPUs
     * (PoCL compiles it in seconds, the general kernel in minutes; it also runs faster there). */
    long wg = oclml__tune(ctx, OCLML__TUNE_RSSM_WG, 0);
    const bool serial = wg == 1 || (wg == 0 && !ctx->caps.is_gpu);
    size_t E = d->E, D = d->D, S = d->S, F = d->F, IN = F + S,
           L = serial ? 1 : rollout_wg(ctx, d, false);
    if (!L || (serial && rollout_local_bytes(d, 1, 1) > ctx->caps.local_mem_bytes))
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED,
                           "the rollout's state (D %zu, S %zu, F %zu) does not fit the device's "
                           "%zu bytes of local memory",
                           D, S, F, ctx->caps.local_mem_bytes);
    size_t P = split_parts(ctx, d, L, serial);
    if (P == 1 && !serial) L = rollout_wg(ctx, d, true);
    /* Split members sync by one work-item spinning while its group waits at a barrier: on an
     * H100 that hung for groups of one warp (8 to 32 work-items, any P > 1) and ran from two
     * warps up, so GPUs keep split groups at least two SIMD widths wide. */
    size_t min_split_wg = 2 * (size_t)ctx->caps.simd_width;
    if (P > 1 && !serial && ctx->caps.is_gpu && L < min_split_wg &&
        min_split_wg <= ctx->caps.max_work_group_size &&
        rollout_local_bytes(d, min_split_wg, 1) <= ctx->caps.local_mem_bytes)
        L = min_split_wg;
    size_t U = (D + P - 1) / P, lbytes = rollout_local_bytes(d, L, P);
    cl_ulong wio = oclml__opt_offset(w->w_ih), who = oclml__opt_offset(w->w_hh),
             wpo = oclml__opt_offset(w->w_p);
    cl_uint vec4 = IN % 4 == 0 && D % 4 == 0 && wio % 4 == 0 && who % 4 == 0 && wpo % 4 == 0;
    /* Split members with float4 rows keep their weights in registers (cl/ops/rssm.cl,
     * RSSM_REGS): up to 96 floats a work-item, so the default register cap is lifted, which the
     * 256-wide groups allow (65536 / 256). */
    variant_init(v, ctx,
                 serial                      ? ROLLOUT_SERIAL
                 : P > 1 && vec4 && L <= 256 ? ROLLOUT_REGS
                                             : ROLLOUT_GENERAL);
    cl_mem xch = NULL, sync = NULL;
    oclml_status st = oclml__scratch_get(ctx, E * (3 * D + S + 8 * P) * sizeof(float), &xch);
    if (!st) st = oclml__scratch_get(ctx, (E + 1) * sizeof(cl_uint), &sync);
    cl_kernel k;
    if (!st) st = oclml__kernel(ctx, &v->spec, "oclml_rssm_rollout", &k);
    if (!st && P > 1) {
        cl_uint n = (cl_uint)(E + 1);
        oclml__arg ar[] = {OCLML_ARG(sync), OCLML_ARG(n)};
        size_t one = 1, g = E + 1;
        st = launch_named(ctx, v, "oclml_rssm_sync_reset", ar, 2, 1, &g, &one);
    }
    cl_uint flags = (w->b_ih ? R_BIH : 0) | (w->b_hh ? R_BHH : 0) | (o->hnorm ? R_HNORM : 0) |
                    (o->h_final ? R_HFIN : 0) | (o->z_final ? R_ZFIN : 0) |
                    (o->f_final ? R_FFIN : 0) | (s->f->ndim == 1 ? R_F0_SHARED : 0);
    cl_uint cho = c->variant == OCLML_GRU_CHO, uT = (cl_uint)d->T, uD = (cl_uint)D,
            uG = (cl_uint)d->G, uC = (cl_uint)d->C, uF = (cl_uint)F, uK = (cl_uint)d->K,
            sample = c->mode == OCLML_RSSM_SAMPLE, seed_lo = (cl_uint)c->seed,
            seed_hi = (cl_uint)(c->seed >> 32), t0 = (cl_uint)c->step_offset, uP = (cl_uint)P,
            uU = (cl_uint)U, spin = ctx->caps.is_gpu ? 1u << 22 : 1u << 26, guard = 0;
    float u = c->unimix;
    cl_mem bi = oclml__opt_mem(w->b_ih), bh = oclml__opt_mem(w->b_hh),
           hn = oclml__opt_mem(o->hnorm), hf = oclml__opt_mem(o->h_final),
           zf = oclml__opt_mem(o->z_final), ff = oclml__opt_mem(o->f_final);
    cl_ulong bio = oclml__opt_offset(w->b_ih), bho = oclml__opt_offset(w->b_hh),
             bpo = oclml__opt_offset(w->b_p), wyo = oclml__opt_offset(w->w_y),
             byo = oclml__opt_offset(w->b_y), h0o = oclml__opt_offset(s->h),
             z0o = oclml__opt_offset(s->z), f0o = oclml__opt_offset(s->f),
             hno = oclml__opt_offset(o->hnorm), hfo = oclml__opt_offset(o->h_final),
             zfo = oclml__opt_offset(o->z_final), ffo = oclml__opt_offset(o->f_final);
    oclml__arg args[] = {OCLML_ARG(w->w_ih->mem), OCLML_ARG(wio),         OCLML_ARG(w->w_hh->mem),
                         OCLML_ARG(who),          OCLML_ARG(bi),          OCLML_ARG(bio),
                         OCLML_ARG(bh),           OCLML_ARG(bho),         OCLML_ARG(w->w_p->mem),
                         OCLML_ARG(wpo),          OCLML_ARG(w->b_p->mem), OCLML_ARG(bpo),
                         OCLML_ARG(w->w_y->mem),  OCLML_ARG(wyo),         OCLML_ARG(w->b_y->mem),
                         OCLML_ARG(byo),          OCLML_ARG(s->h->mem),   OCLML_ARG(h0o),
                         OCLML_ARG(s->z->mem),    OCLML_ARG(z0o),         OCLML_ARG(s->f->mem),
                         OCLML_ARG(f0o),          OCLML_ARG(Yb),          OCLML_ARG(yo),
                         OCLML_ARG(Hb),           OCLML_ARG(heo),         OCLML_ARG(hn),
                         OCLML_ARG(hno),          OCLML_ARG(hf),          OCLML_ARG(hfo),
                         OCLML_ARG(zf),           OCLML_ARG(zfo),         OCLML_ARG(ff),
                         OCLML_ARG(ffo),          OCLML_ARG(xch),         OCLML_ARG(sync),
                         OCLML_ARG(flags),        OCLML_ARG(cho),         OCLML_ARG(uT),
                         OCLML_ARG(uD),           OCLML_ARG(uG),          OCLML_ARG(uC),
                         OCLML_ARG(uF),           OCLML_ARG(uK),          OCLML_ARG(u),
                         OCLML_ARG(sample),       OCLML_ARG(seed_lo),     OCLML_ARG(seed_hi),
                         OCLML_ARG(t0),           OCLML_ARG(uP),          OCLML_ARG(uU),
                         OCLML_ARG(vec4),         OCLML_ARG(spin),        OCLML_ARG(guard),
                         OCLML_LOCAL(lbytes)};
    const unsigned nargs = sizeof args / sizeof args[0];
    size_t global = E * P * L;
    if (!st) st = oclml__launch(ctx, k, args, nargs, 1, &global, &L, NULL);
    /* The guard: whole members, computing only if the split launch gave up. The tuning key
     * rssm.guard = 0 leaves it out, so that tests see the split launch's own results. */
    if (!st && P > 1 && oclml__tune(ctx, OCLML__TUNE_RSSM_GUARD, 0)) {
        uP = 1, uU = (cl_uint)D, guard = 1; /* args[] point at these */
        args[nargs - 1].size = rollout_local_bytes(d, L, 1);
        global = E * L;
        st = oclml__launch(ctx, k, args, nargs, 1, &global, &L, NULL);
    }
    if (xch) oclml__scratch_put(ctx, xch);
    if (sync) oclml__scratch_put(ctx, sync);
    return st;
}

oclml_status oclml_rssm_rollout(oclml_ctx *ctx, const oclml_rssm_params *c,
                                const oclml_rssm_weights *w, const oclml_rssm_state *s,
                                const oclml_rssm_outputs *o) {
    dims d = {0};
    oclml_rssm_params defaults;
    c = OCLML__OR_DEFAULTS(c, &defaults, oclml_rssm_params_init);
    oclml_status st = validate(ctx, c, w, s, o, &d);
    if (st) return st;
    size_t E = d.E, T = d.T;
    cl_mem Yb = o->y->mem, Hb = o->entropy ? o->entropy->mem : NULL;
    cl_ulong yo = oclml__opt_offset(o->y), heo = oclml__opt_offset(o->entropy);
    /* Entropy always lands somewhere: the summary's total entropy reads it. */
    if (!Hb) st = oclml__scratch_get(ctx, E * T * sizeof(float), &Hb);
    rssm_variant v; /* the rollout's program, which holds the summary kernel too */
    if (!st) st = rollout_split(ctx, c, w, s, o, &d, Yb, yo, Hb, heo, &v);
    cl_kernel ks;
    cl_uint outs = (o->y_mean ? 1 : 0) | (o->y_std ? 2 : 0) | (o->deltas ? 4 : 0) |
                   (o->variance ? 8 : 0) | (o->smoothness ? 16 : 0) | (o->total_entropy ? 32 : 0);
    if (!st && outs) st = oclml__kernel(ctx, &v.spec, "oclml_rssm_summary", &ks);
    if (!st && outs) {
        cl_uint has_y0 = s->y0 != NULL, uE = (cl_uint)E, uT = (cl_uint)T;
        cl_mem y0 = oclml__opt_mem(s->y0), ym = oclml__opt_mem(o->y_mean),
               ys = oclml__opt_mem(o->y_std), dl = oclml__opt_mem(o->deltas),
               va = oclml__opt_mem(o->variance), sm = oclml__opt_mem(o->smoothness),
               te = oclml__opt_mem(o->total_entropy);
        cl_ulong y0o = oclml__opt_offset(s->y0), ymo = oclml__opt_offset(o->y_mean),
                 yso = oclml__opt_offset(o->y_std), dlo = oclml__opt_offset(o->deltas),
                 vo = oclml__opt_offset(o->variance), smo = oclml__opt_offset(o->smoothness),
                 teo = oclml__opt_offset(o->total_entropy);
        oclml__arg args[] = {OCLML_ARG(Yb),  OCLML_ARG(yo),  OCLML_ARG(Hb),     OCLML_ARG(heo),
                             OCLML_ARG(y0),  OCLML_ARG(y0o), OCLML_ARG(has_y0), OCLML_ARG(uE),
                             OCLML_ARG(uT),  OCLML_ARG(ym),  OCLML_ARG(ymo),    OCLML_ARG(ys),
                             OCLML_ARG(yso), OCLML_ARG(dl),  OCLML_ARG(dlo),    OCLML_ARG(va),
                             OCLML_ARG(vo),  OCLML_ARG(sm),  OCLML_ARG(smo),    OCLML_ARG(te),
                             OCLML_ARG(teo), OCLML_ARG(outs)};
        size_t local = 64, global = ((E > T ? E : T) + 63) / 64 * 64;
        if (ctx->caps.max_work_group_size < 64) local = 1, global = E > T ? E : T;
        st = oclml__launch(ctx, ks, args, 22, 1, &global, &local, NULL);
    }
    if (!o->entropy && Hb) oclml__scratch_put(ctx, Hb);
    return st;
}

/* ---- the op list's planner: whole members everywhere; split members with register-resident
 * weights where the device has GPU-scope sync ---- */
void oclml__rssm_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    rssm_variant v;
    if (!ctx->caps.is_gpu) {
        variant_init(&v, ctx, ROLLOUT_SERIAL);
        oclml__warm_add(list, op, "one work-item per member part", v.spec);
        return;
    }
    variant_init(&v, ctx, ROLLOUT_GENERAL);
    oclml__warm_add(list, op, "whole members", v.spec);
    if (oclml__caps_ptx(ctx)) {
        variant_init(&v, ctx, ROLLOUT_REGS);
        oclml__warm_add(list, op, "split members, weights in registers", v.spec);
    }
}
