/* LayerNorm and RMSNorm along the last axis, forward and backward, and the fused residual +
 * norm (cl/ops/norm.cl), on tensors of any dtype each (fp32 math inside, each output rounded
 * once; the saved mean and rstd fp32). */
#include "ops/ops.h"
#include "ops/rows.h"

#include "../../cl/include/norm_abi.h"

#include <stdio.h>
#include <string.h>

#define FILE_CL "norm.cl"

static const oclml__row_family LN_FWD = {
    FILE_CL, "oclml_layernorm_fwd", "oclml_layernorm_fwd_part oclml_layernorm_fwd_finish", 1, NULL};
static const oclml__row_family RMS_FWD = {
    FILE_CL, "oclml_rmsnorm_fwd", "oclml_rmsnorm_fwd_part oclml_rmsnorm_fwd_finish", 1, NULL};
static const oclml__row_family LN_BWD = {
    FILE_CL, "oclml_layernorm_bwd", "oclml_layernorm_bwd_part oclml_layernorm_bwd_finish", 2, NULL};
static const oclml__row_family RMS_BWD = {
    FILE_CL, "oclml_rmsnorm_bwd", "oclml_rmsnorm_bwd_part oclml_rmsnorm_bwd_finish", 2, NULL};
/* The backward fused with dgamma/dbeta; its long_pair is the parameter pass's finish kernel. It
 * keeps four arrays (xhat, dy, and the two parameter sums) but is planned as if two: half the
 * work-items a row, each with twice the columns, halves the rows' reduction steps, and the
 * registers that costs stay within what a GPU gives a work-item (bench/DECISIONS.md, row ops). */
static const oclml__row_family LN_BWD_PARAMS = {
    FILE_CL, "oclml_layernorm_bwd_params", NULL, 2,
    "oclml_layernorm_bwd_params oclml_norm_param_finish"};
static const oclml__row_family RMS_BWD_PARAMS = {
    FILE_CL, "oclml_rmsnorm_bwd_params", NULL, 2,
    "oclml_rmsnorm_bwd_params oclml_norm_param_finish"};
/* The fused residual + norm: r = x + dropout(y) normalised in the same pass (the forward keeps
 * x's and y's rows at once: two arrays), and its backward with dr and the branch's gradient.
 * Rows too long for registers take the chunked passes: the forward's first writes r with the
 * chunks' statistics and the plain norm's second normalises r; the backward's second adds dr and
 * writes the branch's gradient (the parameter gradients: the plain norm's separate pass). */
static const oclml__row_family RES_LN_FWD = {
    FILE_CL, "oclml_res_layernorm_fwd", "oclml_res_layernorm_fwd_part oclml_layernorm_fwd_finish",
    2, NULL};
static const oclml__row_family RES_RMS_FWD = {FILE_CL, "oclml_res_rmsnorm_fwd",
                                              "oclml_res_rmsnorm_fwd_part oclml_rmsnorm_fwd_finish",
                                              2, NULL};
static const oclml__row_family RES_LN_BWD = {
    FILE_CL, "oclml_res_layernorm_bwd", "oclml_layernorm_bwd_part oclml_res_layernorm_bwd_finish",
    2, NULL};
static const oclml__row_family RES_RMS_BWD = {FILE_CL, "oclml_res_rmsnorm_bwd",
                                              "oclml_rmsnorm_bwd_part oclml_res_rmsnorm_bwd_finish",
                                              2, NULL};
static const oclml__row_family RES_LN_BWD_PARAMS = {
    FILE_CL, "oclml_res_layernorm_bwd_params", NULL, 2,
    "oclml_res_layernorm_bwd_params oclml_norm_param_finish"};
static const oclml__row_family RES_RMS_BWD_PARAMS = {
    FILE_CL, "oclml_res_rmsnorm_bwd_params", NULL, 2,
    "oclml_res_rmsnorm_bwd_params oclml_norm_param_finish"};
const oclml__row_family *oclml__norm_family(const char *op) {
    bool rms = strstr(op, "rms") != NULL, backward = strstr(op, "backward") != NULL;
    if (!strncmp(op, "residual_", 9)) {
        if (backward) return rms ? &RES_RMS_BWD_PARAMS : &RES_LN_BWD_PARAMS;
        return rms ? &RES_RMS_FWD : &RES_LN_FWD;
    }
    if (backward) return rms ? &RMS_BWD_PARAMS : &LN_BWD_PARAMS;
    return rms ? &RMS_FWD : &LN_FWD;
}

/* An optional tensor's buffer and offset as kernel arguments (a NULL tensor passes a NULL
 * buffer, which its flag bit tells the kernel not to touch). */
typedef struct opt_arg {
    cl_mem mem;
    cl_ulong off;
} opt_arg;

static opt_arg opt(const oclml_tensor *t) {
    opt_arg a = {oclml__opt_mem(t), oclml__opt_offset(t)};
    return a;
}

/* Checks an optional per-row statistic ([rows], fp32: mean and rstd stay fp32 whatever the
 * activations' dtype). */
static oclml_status check_opt(oclml_ctx *ctx, const oclml_tensor *t, const char *name, size_t n) {
    return t ? oclml__check_numel(ctx, t, name, n) : OCLML_SUCCESS;
}

/* Checks an optional per-column parameter or its gradient ([cols], any dtype). */
static oclml_status check_param(oclml_ctx *ctx, const oclml_tensor *t, const char *name, size_t n) {
    if (!t) return OCLML_SUCCESS;
    oclml_status st = oclml__check_tensor_of(ctx, t, name, OCLML__DTYPES_ALL);
    if (!st && t->numel != n)
        st = oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "tensor '%s' has %zu elements, %zu expected",
                         name, t->numel, n);
    return st;
}

/* Checks that a and b (any dtypes) have one shape; (rows, cols) of a, cols its last axis. */
static oclml_status check_rows(oclml_ctx *ctx, const oclml_tensor *a, const char *an,
                               const oclml_tensor *b, const char *bn, size_t *rows, size_t *cols) {
    oclml_status st = oclml__check_same_shape_of(ctx, a, an, b, bn, OCLML__DTYPES_ALL);
    if (st) return st;
    *cols = a->shape[a->ndim - 1];
    *rows = a->numel / *cols;
    return OCLML_SUCCESS;
}

/* An output may overlap an input (in place) only in the input's dtype: elements of two widths at
 * one offset lie over other rows' elements, which other work-groups read. */
static oclml_status check_overlap_dtype(oclml_ctx *ctx, const oclml_tensor *out, const char *on,
                                        const oclml_tensor *in, const char *inn) {
    if (oclml__overlap(out, in) && out->dtype != in->dtype)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "%s (%s) overlaps %s (%s) of another dtype", on,
                           oclml_dtype_name(out->dtype), inn, oclml_dtype_name(in->dtype));
    return OCLML_SUCCESS;
}

/* The dtype defines of a call's tensors (oclml__dtype_defines; "" when all are fp32). */
typedef struct dtype_defines {
    char s[112];
} dtype_defines;

static dtype_defines defines_of(unsigned n, const char *const *names,
                                const oclml_tensor *const *ts) {
    dtype_defines d;
    oclml__dtype_defines(d.s, sizeof d.s, n, names, ts);
    return d;
}

static oclml_status check_eps(oclml_ctx *ctx, float eps) {
    if (!(eps >= 0.0f) || eps != eps || eps > 1e30f)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "eps must be finite and >= 0");
    return OCLML_SUCCESS;
}

static bool vec4_all(const oclml_tensor *const *ts, int n) {
    for (int i = 0; i < n; i++)
        if (!oclml__vec4_offset(ts[i])) return false;
    return true;
}

typedef struct norm_call {
    bool rms;
    const oclml_tensor *x, *gamma, *beta, *mean, *rstd, *dy;
    float eps;
    oclml_tensor *y, *out_mean, *out_rstd; /* forward */
    oclml_tensor *dx, *dgamma, *dbeta;     /* backward */
    /* The fused residual: forward r = x + dropout(branch), normalised; backward dx += dr and
     * dbranch = dropout_backward(dx). drop NULL: no dropout. */
    bool residual;
    const oclml_dropout_params *drop;
    const oclml_tensor *branch, *dr;
    oclml_tensor *r, *dbranch;
} norm_call;

static oclml_status residual_forward(oclml_ctx *ctx, const void *call, const oclml__row_family *f,
                                     const oclml__row_plan *p, bool *replan);

static oclml_status forward_attempt(oclml_ctx *ctx, const void *call, bool *replan) {
    const norm_call *c = call;
    const oclml_tensor *x = c->x, *gamma = c->gamma, *beta = c->beta;
    oclml_tensor *y = c->y, *mean = c->out_mean, *rstd = c->out_rstd;
    size_t rows = 0, cols = 0;
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_rows(ctx, x, "x", y, c->residual ? "out" : "y", &rows, &cols);
    if (!st) st = check_param(ctx, gamma, "gamma", cols);
    if (!st) st = check_param(ctx, beta, "beta", cols);
    if (!st) st = check_opt(ctx, mean, "mean", rows);
    if (!st) st = check_opt(ctx, rstd, "rstd", rows);
    if (!st) st = check_eps(ctx, c->eps);
    if (!st && !c->residual) st = check_overlap_dtype(ctx, y, "y", x, "x");
    if (st) return st;
    const oclml_tensor *all[] = {x, y, gamma, beta, c->branch, c->r};
    const oclml__row_family *f =
        c->residual ? (c->rms ? &RES_RMS_FWD : &RES_LN_FWD) : (c->rms ? &RMS_FWD : &LN_FWD);
    oclml__row_plan p;
    st = oclml__row_plan_for_dtype(ctx, f, rows, cols, vec4_all(all, 6), x->dtype, &p);
    if (st) return st;
    static const char *const names[] = {"X", "G", "B", "Y", "YB", "R"};
    const oclml_tensor *const dts[] = {x, gamma, beta, y, c->branch, c->r};
    const dtype_defines dt = defines_of(c->residual ? 6 : 4, names, dts);
    oclml__row_plan_dtypes(&p, dt.s);
    if (c->residual) return residual_forward(ctx, c, f, &p, replan);
    cl_uint flags = (gamma ? HAS_GAMMA : 0) | (beta ? HAS_BETA : 0) | (mean ? SAVE_MEAN : 0) |
                    (rstd ? SAVE_RSTD : 0);
    opt_arg g = opt(gamma), b = opt(beta), m = opt(mean), r = opt(rstd);
    cl_ulong xo = oclml__elem_offset(x), yo = oclml__elem_offset(y);
    float eps = c->eps;
    oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo),    OCLML_ARG(g.mem),  OCLML_ARG(g.off),
                         OCLML_ARG(b.mem),  OCLML_ARG(b.off), OCLML_ARG(y->mem), OCLML_ARG(yo),
                         OCLML_ARG(m.mem),  OCLML_ARG(m.off), OCLML_ARG(r.mem),  OCLML_ARG(r.off),
                         OCLML_ARG(flags),  OCLML_ARG(eps),   {0, NULL}};
    if (!p.long_rows) return oclml__row_launch(ctx, f, &p, args, 14, replan);
    cl_mem part;
    st = oclml__scratch_get(ctx, p.rows * p.nchunks * 3 * sizeof(float), &part);
    if (st) return st;
    oclml__arg a1[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(part)};
    st = oclml__row_launch_long(ctx, f, false, &p, a1, 3);
    args[14] = OCLML_ARG(part);
    if (!st) st = oclml__row_launch_long(ctx, f, true, &p, args, 15);
    oclml__scratch_put(ctx, part);
    return st;
}

/* Rows too long for registers: r and the chunks' statistics, then the plain norm's second pass
 * over r (the finish kernel's arguments, norm_args, end with the statistics). */
static oclml_status residual_long_forward(oclml_ctx *ctx, const norm_call *c,
                                          const oclml__row_family *f, const oclml__row_plan *p,
                                          oclml__arg *norm_args) {
    cl_mem part;
    oclml_status st = oclml__scratch_get(ctx, p->rows * p->nchunks * 3 * sizeof(float), &part);
    if (st) return st;
    cl_ulong xo = oclml__elem_offset(c->x), bro = oclml__elem_offset(c->branch),
             rro = oclml__elem_offset(c->r);
    const oclml__drop_args d = oclml__drop_args_of(c->drop);
    oclml__arg a1[] = {OCLML_ARG(c->x->mem),    OCLML_ARG(xo),        OCLML_ARG(c->branch->mem),
                       OCLML_ARG(bro),          OCLML_ARG(c->r->mem), OCLML_ARG(rro),
                       OCLML__DROP_ARG_LIST(d), OCLML_ARG(part)};
    st = oclml__row_launch_long(ctx, f, false, p, a1, 12);
    norm_args[14] = OCLML_ARG(part);
    if (!st) st = oclml__row_launch_long(ctx, f, true, p, norm_args, 15);
    oclml__scratch_put(ctx, part);
    return st;
}

static oclml_status residual_forward(oclml_ctx *ctx, const void *call, const oclml__row_family *f,
                                     const oclml__row_plan *p, bool *replan) {
    const norm_call *c = call;
    const oclml_tensor *gamma = c->gamma, *beta = c->beta;
    cl_uint flags = (gamma ? HAS_GAMMA : 0) | (beta ? HAS_BETA : 0) |
                    (c->out_mean ? SAVE_MEAN : 0) | (c->out_rstd ? SAVE_RSTD : 0);
    opt_arg g = opt(gamma), b = opt(beta), m = opt(c->out_mean), r = opt(c->out_rstd);
    cl_ulong xo = oclml__elem_offset(c->x), bro = oclml__elem_offset(c->branch),
             rro = oclml__elem_offset(c->r), yo = oclml__elem_offset(c->y);
    const oclml__drop_args d = oclml__drop_args_of(c->drop);
    float eps = c->eps;
    oclml__arg args[] = {OCLML_ARG(c->x->mem),    OCLML_ARG(xo),        OCLML_ARG(c->branch->mem),
                         OCLML_ARG(bro),          OCLML_ARG(c->r->mem), OCLML_ARG(rro),
                         OCLML__DROP_ARG_LIST(d), OCLML_ARG(g.mem),     OCLML_ARG(g.off),
                         OCLML_ARG(b.mem),        OCLML_ARG(b.off),     OCLML_ARG(c->y->mem),
                         OCLML_ARG(yo),           OCLML_ARG(m.mem),     OCLML_ARG(m.off),
                         OCLML_ARG(r.mem),        OCLML_ARG(r.off),     OCLML_ARG(flags),
                         OCLML_ARG(eps)};
    if (p->long_rows) {
        /* The finish kernel's: the norm's over r. */
        oclml__arg fin[] = {OCLML_ARG(c->r->mem), OCLML_ARG(rro),   OCLML_ARG(g.mem),
                            OCLML_ARG(g.off),     OCLML_ARG(b.mem), OCLML_ARG(b.off),
                            OCLML_ARG(c->y->mem), OCLML_ARG(yo),    OCLML_ARG(m.mem),
                            OCLML_ARG(m.off),     OCLML_ARG(r.mem), OCLML_ARG(r.off),
                            OCLML_ARG(flags),     OCLML_ARG(eps),   {0, NULL}};
        return residual_long_forward(ctx, c, f, p, fin);
    }
    return oclml__row_launch(ctx, f, p, args, 23, replan);
}

/* part[split][col] = (dgamma, dbeta) partials -> dgamma, dbeta, with the finish kernel of the
 * program `spec`. */
static oclml_status param_finish(oclml_ctx *ctx, const oclml__program_spec *spec, cl_mem part,
                                 size_t splits, size_t cols, oclml_tensor *dgamma,
                                 oclml_tensor *dbeta) {
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, spec, "oclml_norm_param_finish", &k);
    if (st) return st;
    size_t local = ctx->caps.max_work_group_size < 256 ? ctx->caps.max_work_group_size : 256;
    size_t global = (cols + local - 1) / local * local;
    opt_arg dg = opt(dgamma), db = opt(dbeta);
    cl_uint usplits = (cl_uint)splits, ucols = (cl_uint)cols,
            flags = (dgamma ? 1 : 0) | (dbeta ? 2 : 0);
    oclml__arg args[] = {OCLML_ARG(part),   OCLML_ARG(usplits), OCLML_ARG(ucols),
                         OCLML_ARG(dg.mem), OCLML_ARG(dg.off),  OCLML_ARG(db.mem),
                         OCLML_ARG(db.off), OCLML_ARG(flags)};
    return oclml__launch(ctx, k, args, 8, 1, &global, &local, NULL);
}

/* dx with dgamma/dbeta fused: a fixed number of work-groups loops over the rows. *done is false
 * when the row does not fit the fused kernel's registers. */
static oclml_status fused_backward(oclml_ctx *ctx, const norm_call *c, const oclml__arg *args,
                                   unsigned nargs, size_t rows, size_t cols, bool vec4,
                                   const char *dtypes, bool *done, bool *replan) {
    const oclml__row_family *f = c->residual ? (c->rms ? &RES_RMS_BWD_PARAMS : &RES_LN_BWD_PARAMS)
                                             : (c->rms ? &RMS_BWD_PARAMS : &LN_BWD_PARAMS);
    oclml__row_plan p;
    *done = false;
    oclml_status st = oclml__row_plan_for_dtype(ctx, f, rows, cols, vec4, c->dy->dtype, &p);
    if (st || p.long_rows) return st;
    oclml__row_plan_dtypes(&p, dtypes);
    /* Enough groups to fill the device a few times over, no more: each writes a partial row.
     * Where a work-item owns its rows (CPUs), it writes its own: a work-item a group, two a
     * core. */
    if (p.solo) p.local = 1;
    size_t row_groups = (rows + p.local / p.G - 1) / (p.local / p.G);
    size_t per_cu = p.solo ? 2 : p.local >= 1024 ? 2 : 2048 / p.local;
    size_t groups = (size_t)ctx->caps.compute_units * per_cu;
    if (groups > row_groups) groups = row_groups;
    p.global[0] = groups * p.local;
    cl_mem part;
    st = oclml__scratch_get(ctx, groups * cols * 2 * sizeof(float), &part);
    if (st) return st;
    oclml__arg all[24];
    memcpy(all, args, nargs * sizeof *args);
    all[nargs] = OCLML_ARG(part);
    st = oclml__row_launch(ctx, f, &p, all, nargs + 1, replan);
    oclml__program_spec spec = oclml__row_spec(f, &p);
    if (!st) st = param_finish(ctx, &spec, part, groups, cols, c->dgamma, c->dbeta);
    oclml__scratch_put(ctx, part);
    *done = true;
    return st;
}

/* The long rows' first pass with the parameter gradients: the program and its kernel. */
static oclml__program_spec part_params_spec(const norm_call *c, dtype_defines *dt,
                                            const char **kernel) {
    static const char *const names[] = {"X", "G", "DY", "DG", "DB"};
    const oclml_tensor *const dts[] = {c->x, c->gamma, c->dy, c->dgamma, c->dbeta};
    *dt = defines_of(5, names, dts);
    *kernel = c->rms ? "oclml_rmsnorm_bwd_part_params" : "oclml_layernorm_bwd_part_params";
    oclml__program_spec spec = {
        .file = FILE_CL,
        .defines = dt->s[0] ? dt->s : NULL,
        .kernels = c->rms ? "oclml_rmsnorm_bwd_part_params oclml_norm_param_finish"
                          : "oclml_layernorm_bwd_part_params oclml_norm_param_finish"};
    return spec;
}

/* The first pass's arguments, out[0..10]: everything but dx (backward_attempt's args). */
static void first_pass_args(const oclml__arg *args, oclml__arg *out) {
    memcpy(out, args, 10 * sizeof *args);
    out[10] = args[12];
}

/* Long rows' second pass: dx from the rows' partial sums, `partials` a row, on the chunks' grid
 * (appends part to args). */
static oclml_status long_finish(oclml_ctx *ctx, const oclml__row_family *f,
                                const oclml__row_plan *plan, cl_mem part, size_t partials,
                                oclml__arg *args, unsigned nargs) {
    oclml__row_plan p = *plan;
    p.nchunks = (unsigned)partials;
    args[nargs] = OCLML_ARG(part);
    return oclml__row_launch_long(ctx, f, true, &p, args, nargs + 1);
}

/* Rows too long for registers, without parameter gradients: the chunks' sums, then dx. */
static oclml_status long_backward(oclml_ctx *ctx, const oclml__row_family *f,
                                  const oclml__row_plan *p, oclml__arg *args, unsigned nargs) {
    cl_mem part;
    oclml_status st = oclml__scratch_get(ctx, p->rows * p->nchunks * 2 * sizeof(float), &part);
    if (st) return st;
    oclml__arg a1[12];
    first_pass_args(args, a1);
    a1[11] = OCLML_ARG(part);
    st = oclml__row_launch_long(ctx, f, false, p, a1, 12);
    if (!st) st = long_finish(ctx, f, p, part, p->nchunks, args, nargs);
    oclml__scratch_put(ctx, part);
    return st;
}

/* The same with dgamma or dbeta: the first pass sums their partials too, from the same read of
 * x and dy, so the two are read twice in all, not three times. Column groups x row slices,
 * enough work-groups to fill the device, each slice writing one partial row. */
static oclml_status long_backward_params(oclml_ctx *ctx, const norm_call *c,
                                         const oclml__row_family *f, const oclml__row_plan *p,
                                         oclml__arg *args, unsigned nargs) {
    const size_t L = p->local, groups = (p->cols + L * NORM_PP_COLS - 1) / (L * NORM_PP_COLS);
    const long tuned = oclml__tune(ctx, OCLML__TUNE_ROWS_NORM_SPLITS, 0);
    const size_t want = (size_t)ctx->caps.compute_units * 8;
    size_t splits = tuned > 0 ? (size_t)tuned : (want + groups - 1) / groups;
    if (splits > p->rows) splits = p->rows;
    const cl_uint per_split = (cl_uint)((p->rows + splits - 1) / splits);
    splits = (p->rows + per_split - 1) / per_split;
    cl_mem part, pp;
    oclml_status st = oclml__scratch_get(ctx, p->rows * groups * 2 * sizeof(float), &part);
    if (st) return st;
    st = oclml__scratch_get(ctx, splits * p->cols * 2 * sizeof(float), &pp);
    if (st) {
        oclml__scratch_put(ctx, part);
        return st;
    }
    dtype_defines dt;
    const char *kname;
    const oclml__program_spec spec = part_params_spec(c, &dt, &kname);
    cl_kernel k;
    st = oclml__kernel(ctx, &spec, kname, &k);
    if (!st) {
        cl_uint urows = (cl_uint)p->rows, ucols = (cl_uint)p->cols, ugroups = (cl_uint)groups;
        oclml__arg a1[18];
        first_pass_args(args, a1);
        a1[11] = OCLML_ARG(part);
        a1[12] = OCLML_ARG(pp);
        a1[13] = OCLML_ARG(per_split);
        a1[14] = OCLML_ARG(urows);
        a1[15] = OCLML_ARG(ucols);
        a1[16] = OCLML_ARG(ugroups);
        a1[17] = OCLML_LOCAL(NORM_PP_ROWS * L * 2 * sizeof(float));
        size_t global[2] = {groups * L, splits}, local[2] = {L, 1};
        st = oclml__launch(ctx, k, a1, 18, 2, global, local, NULL);
    }
    if (!st) st = long_finish(ctx, f, p, part, groups, args, nargs);
    if (!st) st = param_finish(ctx, &spec, pp, splits, p->cols, c->dgamma, c->dbeta);
    oclml__scratch_put(ctx, pp);
    oclml__scratch_put(ctx, part);
    return st;
}

static oclml_status backward_attempt(oclml_ctx *ctx, const void *call, bool *replan) {
    const norm_call *c = call;
    const oclml_tensor *x = c->x, *gamma = c->gamma, *dy = c->dy;
    oclml_tensor *dx = c->dx;
    const char *xn = c->residual ? "r" : "x", *dyn = c->residual ? "dout" : "dy";
    size_t rows = 0, cols = 0;
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_rows(ctx, x, xn, dy, dyn, &rows, &cols);
    if (!st) st = oclml__check_same_shape_of(ctx, x, xn, dx, "dx", OCLML__DTYPES_ALL);
    if (!st && !c->rms) st = oclml__check_numel(ctx, c->mean, "mean", rows);
    if (!st) st = oclml__check_numel(ctx, c->rstd, "rstd", rows);
    if (!st) st = check_param(ctx, gamma, "gamma", cols);
    if (!st) st = check_param(ctx, c->dgamma, "dgamma", cols);
    if (!st) st = check_param(ctx, c->dbeta, "dbeta", cols);
    if (!st) st = check_overlap_dtype(ctx, dx, "dx", x, xn);
    if (!st) st = check_overlap_dtype(ctx, dx, "dx", dy, dyn);
    if (!st) st = check_overlap_dtype(ctx, dx, "dx", c->dr, "dr");
    if (st) return st;
    /* The fused kernel's program takes every tensor's dtype; the plain backward's not the
     * parameter gradients' (the parameter pass writes those). */
    static const char *const names[] = {"X", "G", "DY", "DX", "DR", "DYB", "DG", "DB"};
    const oclml_tensor *const dts[] = {x, gamma, dy, dx, c->dr, c->dbranch, c->dgamma, c->dbeta};
    const dtype_defines dt_fused = defines_of(8, names, dts), dt_plain = defines_of(6, names, dts);
    const oclml_tensor *all[] = {x, dy, dx, gamma};
    cl_uint flags = gamma ? HAS_GAMMA : 0;
    opt_arg g = opt(gamma), m = opt(c->rms ? NULL : c->mean), r = opt(c->rstd);
    cl_ulong xo = oclml__elem_offset(x), go = oclml__elem_offset(dy), dxo = oclml__elem_offset(dx);
    /* The fused residual's ten more: dr, the branch's gradient, and the dropout. */
    opt_arg dr = opt(c->dr), dyb = opt(c->dbranch);
    const oclml__drop_args d = oclml__drop_args_of(c->drop);
    cl_uint rflags = (c->dr ? HAS_DR : 0) | (c->dbranch ? WANT_DY : 0);
    /* Room for the long path's partials. */
    oclml__arg args[24] = {
        OCLML_ARG(x->mem),  OCLML_ARG(xo),     OCLML_ARG(g.mem),       OCLML_ARG(g.off),
        OCLML_ARG(m.mem),   OCLML_ARG(m.off),  OCLML_ARG(r.mem),       OCLML_ARG(r.off),
        OCLML_ARG(dy->mem), OCLML_ARG(go),     OCLML_ARG(dx->mem),     OCLML_ARG(dxo),
        OCLML_ARG(flags),   OCLML_ARG(dr.mem), OCLML_ARG(dr.off),      OCLML_ARG(dyb.mem),
        OCLML_ARG(dyb.off), OCLML_ARG(rflags), OCLML__DROP_ARG_LIST(d)};
    const unsigned nargs = c->residual ? 23 : 13;
    const oclml_tensor *res_all[] = {c->dr, c->dbranch};
    const bool vec4 = vec4_all(all, 4) && vec4_all(res_all, 2);
    if (c->dgamma || c->dbeta) {
        bool done;
        st = fused_backward(ctx, c, args, nargs, rows, cols, vec4, dt_fused.s, &done, replan);
        if (st || done) return st;
    }
    /* Where the fused kernel did not take the rows (too long for its registers), the chunked
     * passes, whose first sums the parameter gradients too. */
    const oclml__row_family *f =
        c->residual ? (c->rms ? &RES_RMS_BWD : &RES_LN_BWD) : (c->rms ? &RMS_BWD : &LN_BWD);
    oclml__row_plan p;
    st = c->dgamma || c->dbeta
             ? oclml__row_plan_chunked(ctx, f, rows, cols, c->dy->dtype, &p)
             : oclml__row_plan_for_dtype(ctx, f, rows, cols, vec4, c->dy->dtype, &p);
    if (st) return st;
    oclml__row_plan_dtypes(&p, dt_plain.s);
    if (p.long_rows)
        return c->dgamma || c->dbeta ? long_backward_params(ctx, c, f, &p, args, nargs)
                                     : long_backward(ctx, f, &p, args, nargs);
    return oclml__row_launch(ctx, f, &p, args, nargs, replan);
}

oclml_status oclml_layernorm(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *gamma,
                             const oclml_tensor *beta, float eps, oclml_tensor *y,
                             oclml_tensor *mean, oclml_tensor *rstd) {
    norm_call c = {.rms = false,
                   .x = x,
                   .gamma = gamma,
                   .beta = beta,
                   .eps = eps,
                   .y = y,
                   .out_mean = mean,
                   .out_rstd = rstd};
    return oclml__row_retry(ctx, forward_attempt, &c);
}

oclml_status oclml_rmsnorm(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *gamma,
                           float eps, oclml_tensor *y, oclml_tensor *rstd) {
    norm_call c = {.rms = true, .x = x, .gamma = gamma, .eps = eps, .y = y, .out_rstd = rstd};
    return oclml__row_retry(ctx, forward_attempt, &c);
}

oclml_status oclml_layernorm_backward(oclml_ctx *ctx, const oclml_tensor *x,
                                      const oclml_tensor *gamma, const oclml_tensor *mean,
                                      const oclml_tensor *rstd, const oclml_tensor *dy,
                                      oclml_tensor *dx, oclml_tensor *dgamma, oclml_tensor *dbeta) {
    norm_call c = {.rms = false,
                   .x = x,
                   .gamma = gamma,
                   .mean = mean,
                   .rstd = rstd,
                   .dy = dy,
                   .dx = dx,
                   .dgamma = dgamma,
                   .dbeta = dbeta};
    return oclml__row_retry(ctx, backward_attempt, &c);
}

oclml_status oclml_rmsnorm_backward(oclml_ctx *ctx, const oclml_tensor *x,
                                    const oclml_tensor *gamma, const oclml_tensor *rstd,
                                    const oclml_tensor *dy, oclml_tensor *dx,
                                    oclml_tensor *dgamma) {
    norm_call c = {
        .rms = true, .x = x, .gamma = gamma, .rstd = rstd, .dy = dy, .dx = dx, .dgamma = dgamma};
    return oclml__row_retry(ctx, backward_attempt, &c);
}

/* ---- the fused residual + norm ---- */

/* The forward's own arguments (the norm's are checked by forward_attempt): r may be x. */
static oclml_status check_residual_forward(oclml_ctx *ctx, const norm_call *c) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st && c->drop) st = oclml__check_dropout(ctx, c->drop);
    const unsigned all = OCLML__DTYPES_ALL;
    if (!st) st = oclml__check_same_shape_of(ctx, c->x, "x", c->branch, "y", all);
    if (!st) st = oclml__check_same_shape_of(ctx, c->x, "x", c->r, "r", all);
    if (!st) st = oclml__check_same_shape_of(ctx, c->x, "x", c->y, "out", all);
    if (!st) st = oclml__check_apart(ctx, c->r, "r", c->x, "x", true);
    if (!st) st = check_overlap_dtype(ctx, c->r, "r", c->x, "x");
    if (!st) st = oclml__check_apart(ctx, c->r, "r", c->branch, "y", false);
    const oclml_tensor *outs[] = {c->y, c->out_mean, c->out_rstd};
    const char *names[] = {"out", "mean", "rstd"};
    for (int i = 0; i < 3 && !st; i++) {
        st = oclml__check_apart(ctx, outs[i], names[i], c->x, "x", false);
        if (!st) st = oclml__check_apart(ctx, outs[i], names[i], c->branch, "y", false);
        if (!st) st = oclml__check_apart(ctx, outs[i], names[i], c->r, "r", false);
    }
    return st;
}

/* The backward's: dx may be dr; dy (the branch's gradient) overlaps nothing. */
static oclml_status check_residual_backward(oclml_ctx *ctx, const norm_call *c) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st && c->drop) st = oclml__check_dropout(ctx, c->drop);
    const unsigned all = OCLML__DTYPES_ALL;
    if (!st && c->dr) st = oclml__check_same_shape_of(ctx, c->x, "r", c->dr, "dr", all);
    if (!st && c->dbranch) st = oclml__check_same_shape_of(ctx, c->x, "r", c->dbranch, "dy", all);
    if (!st && c->dx) st = oclml__check_apart(ctx, c->dx, "dx", c->dr, "dr", true);
    const oclml_tensor *ins[] = {c->x, c->dy, c->dr, c->gamma, c->mean, c->rstd};
    const char *names[] = {"r", "dout", "dr", "gamma", "mean", "rstd"};
    for (int i = 0; i < 6 && !st; i++) {
        if (i != 2) st = oclml__check_apart(ctx, c->dx, "dx", ins[i], names[i], false);
        if (!st) st = oclml__check_apart(ctx, c->dbranch, "dy", ins[i], names[i], false);
    }
    if (!st) st = oclml__check_apart(ctx, c->dbranch, "dy", c->dx, "dx", false);
    return st;
}

oclml_status oclml_residual_layernorm(oclml_ctx *ctx, const oclml_dropout_params *drop,
                                      const oclml_tensor *x, const oclml_tensor *y,
                                      const oclml_tensor *gamma, const oclml_tensor *beta,
                                      float eps, oclml_tensor *r, oclml_tensor *out,
                                      oclml_tensor *mean, oclml_tensor *rstd) {
    norm_call c = {.x = x,
                   .gamma = gamma,
                   .beta = beta,
                   .eps = eps,
                   .y = out,
                   .out_mean = mean,
                   .out_rstd = rstd,
                   .residual = true,
                   .drop = drop,
                   .branch = y,
                   .r = r};
    oclml_status st = check_residual_forward(ctx, &c);
    return st ? st : oclml__row_retry(ctx, forward_attempt, &c);
}

oclml_status oclml_residual_rmsnorm(oclml_ctx *ctx, const oclml_dropout_params *drop,
                                    const oclml_tensor *x, const oclml_tensor *y,
                                    const oclml_tensor *gamma, float eps, oclml_tensor *r,
                                    oclml_tensor *out, oclml_tensor *rstd) {
    norm_call c = {.rms = true,
                   .x = x,
                   .gamma = gamma,
                   .eps = eps,
                   .y = out,
                   .out_rstd = rstd,
                   .residual = true,
                   .drop = drop,
                   .branch = y,
                   .r = r};
    oclml_status st = check_residual_forward(ctx, &c);
    return st ? st : oclml__row_retry(ctx, forward_attempt, &c);
}

oclml_status oclml_residual_layernorm_backward(oclml_ctx *ctx, const oclml_dropout_params *drop,
                                               const oclml_tensor *r, const oclml_tensor *gamma,
                                               const oclml_tensor *mean, const oclml_tensor *rstd,
                                               const oclml_tensor *dout, const oclml_tensor *dr,
                                               oclml_tensor *dx, oclml_tensor *dy,
                                               oclml_tensor *dgamma, oclml_tensor *dbeta) {
    norm_call c = {.x = r,
                   .gamma = gamma,
                   .mean = mean,
                   .rstd = rstd,
                   .dy = dout,
                   .dx = dx,
                   .dgamma = dgamma,
                   .dbeta = dbeta,
                   .residual = true,
                   .drop = drop,
                   .dr = dr,
                   .dbranch = dy};
    oclml_status st = check_residual_backward(ctx, &c);
    return st ? st : oclml__row_retry(ctx, backward_attempt, &c);
}

oclml_status oclml_residual_rmsnorm_backward(oclml_ctx *ctx, const oclml_dropout_params *drop,
                                             const oclml_tensor *r, const oclml_tensor *gamma,
                                             const oclml_tensor *rstd, const oclml_tensor *dout,
                                             const oclml_tensor *dr, oclml_tensor *dx,
                                             oclml_tensor *dy, oclml_tensor *dgamma) {
    norm_call c = {.rms = true,
                   .x = r,
                   .gamma = gamma,
                   .rstd = rstd,
                   .dy = dout,
                   .dx = dx,
                   .dgamma = dgamma,
                   .residual = true,
                   .drop = drop,
                   .dr = dr,
                   .dbranch = dy};
    oclml_status st = check_residual_backward(ctx, &c);
    return st ? st : oclml__row_retry(ctx, backward_attempt, &c);
}

/* ---- the op list's planner: the programs these ops build for a row length ---- */
void oclml__norm_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    const oclml__row_family *f = oclml__norm_family(op);
    for (size_t i = 0; i < OCLML__WARM_ROW_LENGTHS; i++) {
        oclml__row_plan p;
        if (oclml__row_plan_for(ctx, f, 1024, oclml__warm_row_lengths[i], true, &p)) continue;
        if (p.long_rows && strstr(op, "backward")) {
            /* Too long for the fused kernel: the backward's long pair (its finish kernel) and the
             * first pass with the parameter gradients. */
            bool rms = strstr(op, "rms") != NULL;
            const oclml__row_family *plain = !strncmp(op, "residual_", 9)
                                                 ? (rms ? &RES_RMS_BWD : &RES_LN_BWD)
                                                 : (rms ? &RMS_BWD : &LN_BWD);
            oclml__warm_add(list, op, p.variant, oclml__row_spec(plain, &p));
            const norm_call c = {.rms = rms};
            dtype_defines dt;
            const char *kernel;
            oclml__warm_add(list, op, "with the parameter gradients",
                            part_params_spec(&c, &dt, &kernel));
            continue;
        }
        oclml__warm_add(list, op, p.variant, oclml__row_spec(f, &p));
    }
}
