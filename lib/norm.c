/* LayerNorm and RMSNorm along the last axis, forward and backward (cl/norm.cl). */
#include "rows.h"

#include <stdio.h>
#include <string.h>

#define FILE_CL "norm.cl"
enum { HAS_GAMMA = 1, HAS_BETA = 2, SAVE_MEAN = 4, SAVE_RSTD = 8 };

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

/* Checks an optional per-column ([cols]) or per-row ([rows]) tensor. */
static oclml_status check_opt(oclml_ctx *ctx, const oclml_tensor *t, const char *name, size_t n) {
    return t ? oclml__check_numel(ctx, t, name, n) : OCLML_SUCCESS;
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

static oclml_status norm_forward(oclml_ctx *ctx, bool rms, const oclml_tensor *x,
                                 const oclml_tensor *gamma, const oclml_tensor *beta, float eps,
                                 oclml_tensor *y, oclml_tensor *mean, oclml_tensor *rstd) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_same_shape(ctx, x, "x", y, "y");
    if (st) return st;
    size_t rows, cols;
    oclml__check_matrix_view(ctx, x, "x", &rows, &cols);
    if (!st) st = check_opt(ctx, gamma, "gamma", cols);
    if (!st) st = check_opt(ctx, beta, "beta", cols);
    if (!st) st = check_opt(ctx, mean, "mean", rows);
    if (!st) st = check_opt(ctx, rstd, "rstd", rows);
    if (!st) st = check_eps(ctx, eps);
    if (st) return st;
    const oclml_tensor *all[] = {x, y, gamma, beta};
    const char *base = rms ? "oclml_rmsnorm_fwd" : "oclml_layernorm_fwd";
    oclml__row_plan p;
    st = oclml__row_plan_for(ctx, FILE_CL, base, rows, cols, vec4_all(all, 4), 1, &p);
    if (st) return st;
    cl_uint flags = (gamma ? HAS_GAMMA : 0) | (beta ? HAS_BETA : 0) | (mean ? SAVE_MEAN : 0) |
                    (rstd ? SAVE_RSTD : 0);
    opt_arg g = opt(gamma), b = opt(beta), m = opt(mean), r = opt(rstd);
    cl_ulong xo = oclml__elem_offset(x), yo = oclml__elem_offset(y);
    oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(g.mem), OCLML_ARG(g.off),
                         OCLML_ARG(b.mem), OCLML_ARG(b.off), OCLML_ARG(y->mem), OCLML_ARG(yo),
                         OCLML_ARG(m.mem), OCLML_ARG(m.off), OCLML_ARG(r.mem), OCLML_ARG(r.off),
                         OCLML_ARG(flags), OCLML_ARG(eps), {0, NULL}};
    if (!p.long_rows)
        return oclml__row_launch(ctx, FILE_CL, base, &p, args, 14);
    cl_mem part;
    st = oclml__scratch_get(ctx, p.rows * p.nchunks * 3 * sizeof(float), &part);
    if (st) return st;
    oclml__arg a1[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(part)};
    st = oclml__row_launch_long(ctx, FILE_CL, rms ? "oclml_rmsnorm_fwd_part" : "oclml_layernorm_fwd_part", &p, a1, 3);
    args[14] = OCLML_ARG(part);
    if (!st)
        st = oclml__row_launch_long(ctx, FILE_CL, rms ? "oclml_rmsnorm_fwd_finish" : "oclml_layernorm_fwd_finish",
                                    &p, args, 15);
    oclml__scratch_put(ctx, part);
    return st;
}

/* part[split][col] = (dgamma, dbeta) partials -> dgamma, dbeta. */
static oclml_status param_finish(oclml_ctx *ctx, cl_mem part, size_t splits, size_t cols,
                                 oclml_tensor *dgamma, oclml_tensor *dbeta) {
    cl_kernel k;
    oclml_status st = oclml__get_kernel(ctx, FILE_CL, NULL, "oclml_norm_param_finish", &k);
    if (st) return st;
    size_t local = ctx->info.max_work_group_size < 256 ? ctx->info.max_work_group_size : 256;
    size_t global = (cols + local - 1) / local * local;
    opt_arg dg = opt(dgamma), db = opt(dbeta);
    cl_uint usplits = (cl_uint)splits, ucols = (cl_uint)cols, flags = (dgamma ? 1 : 0) | (dbeta ? 2 : 0);
    oclml__arg args[] = {OCLML_ARG(part), OCLML_ARG(usplits), OCLML_ARG(ucols), OCLML_ARG(dg.mem),
                         OCLML_ARG(dg.off), OCLML_ARG(db.mem), OCLML_ARG(db.off), OCLML_ARG(flags)};
    return oclml__launch(ctx, k, args, 8, 1, &global, &local);
}

/* dgamma and dbeta for rows too long for the fused kernel: column sums over row slices, enough
 * slices that every compute unit has work. */
static oclml_status param_grads(oclml_ctx *ctx, bool rms, const oclml_tensor *x, const oclml_tensor *mean,
                                const oclml_tensor *rstd, const oclml_tensor *dy, oclml_tensor *dgamma,
                                oclml_tensor *dbeta, size_t rows, size_t cols) {
    cl_kernel kp;
    oclml_status st = oclml__get_kernel(ctx, FILE_CL, NULL, "oclml_norm_param_part", &kp);
    if (st) return st;
    size_t local = ctx->info.max_work_group_size < 256 ? ctx->info.max_work_group_size : 256;
    size_t col_groups = (cols + local - 1) / local;
    size_t want_groups = (size_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * 8;
    size_t splits = want_groups / col_groups;
    if (splits < 1) splits = 1;
    if (splits > rows) splits = rows;
    cl_uint rows_per_split = (cl_uint)((rows + splits - 1) / splits);
    splits = (rows + rows_per_split - 1) / rows_per_split;
    cl_mem part;
    st = oclml__scratch_get(ctx, splits * cols * 2 * sizeof(float), &part);
    if (st) return st;
    opt_arg m = opt(mean), r = opt(rstd);
    cl_ulong xo = oclml__elem_offset(x), go = oclml__elem_offset(dy);
    cl_uint urms = rms, urows = (cl_uint)rows, ucols = (cl_uint)cols;
    oclml__arg a1[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(m.mem), OCLML_ARG(m.off),
                       OCLML_ARG(r.mem), OCLML_ARG(r.off), OCLML_ARG(dy->mem), OCLML_ARG(go),
                       OCLML_ARG(urms), OCLML_ARG(part), OCLML_ARG(urows), OCLML_ARG(ucols),
                       OCLML_ARG(rows_per_split)};
    size_t g1[2] = {col_groups * local, splits}, l1[2] = {local, 1};
    st = oclml__launch(ctx, kp, a1, 13, 2, g1, l1);
    if (!st) st = param_finish(ctx, part, splits, cols, dgamma, dbeta);
    oclml__scratch_put(ctx, part);
    return st;
}

/* dx with dgamma/dbeta fused (NORM_BWD_PARAMS): a fixed number of work-groups loops over the
 * rows. *done is false when the row does not fit the fused kernel's registers. */
static oclml_status fused_backward(oclml_ctx *ctx, bool rms, const oclml__arg *args, size_t rows,
                                   size_t cols, bool vec4, oclml_tensor *dgamma, oclml_tensor *dbeta,
                                   bool *done) {
    const char *base = rms ? "oclml_rmsnorm_bwd_params" : "oclml_layernorm_bwd_params";
    oclml__row_plan p;
    *done = false;
    oclml_status st = oclml__row_plan_for(ctx, FILE_CL, base, rows, cols, vec4, 4, &p);
    if (st || p.long_rows) return st;
    /* Enough groups to fill the device a few times over, no more: each writes a partial row. */
    size_t row_groups = p.global[0] / p.local;
    size_t per_cu = p.local >= 1024 ? 2 : 2048 / p.local;
    size_t groups = (size_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * per_cu;
    if (groups > row_groups) groups = row_groups;
    p.global[0] = groups * p.local;
    cl_mem part;
    st = oclml__scratch_get(ctx, groups * cols * 2 * sizeof(float), &part);
    if (st) return st;
    oclml__arg all[14];
    memcpy(all, args, 13 * sizeof *args);
    all[13] = OCLML_ARG(part);
    st = oclml__row_launch(ctx, FILE_CL, base, &p, all, 14);
    if (!st) st = param_finish(ctx, part, groups, cols, dgamma, dbeta);
    oclml__scratch_put(ctx, part);
    *done = true;
    return st;
}

static oclml_status norm_backward(oclml_ctx *ctx, bool rms, const oclml_tensor *x,
                                  const oclml_tensor *gamma, const oclml_tensor *mean,
                                  const oclml_tensor *rstd, const oclml_tensor *dy, oclml_tensor *dx,
                                  oclml_tensor *dgamma, oclml_tensor *dbeta) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_same_shape(ctx, x, "x", dy, "dy");
    if (!st) st = oclml__check_same_shape(ctx, x, "x", dx, "dx");
    if (st) return st;
    size_t rows, cols;
    oclml__check_matrix_view(ctx, x, "x", &rows, &cols);
    if (!rms) st = oclml__check_numel(ctx, mean, "mean", rows);
    if (!st) st = oclml__check_numel(ctx, rstd, "rstd", rows);
    if (!st) st = check_opt(ctx, gamma, "gamma", cols);
    if (!st) st = check_opt(ctx, dgamma, "dgamma", cols);
    if (!st) st = check_opt(ctx, dbeta, "dbeta", cols);
    if (st) return st;
    const oclml_tensor *all[] = {x, dy, dx, gamma};
    const char *base = rms ? "oclml_rmsnorm_bwd" : "oclml_layernorm_bwd";
    cl_uint flags = gamma ? HAS_GAMMA : 0;
    opt_arg g = opt(gamma), m = opt(rms ? NULL : mean), r = opt(rstd);
    cl_ulong xo = oclml__elem_offset(x), go = oclml__elem_offset(dy), dxo = oclml__elem_offset(dx);
    oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(g.mem), OCLML_ARG(g.off),
                         OCLML_ARG(m.mem), OCLML_ARG(m.off), OCLML_ARG(r.mem), OCLML_ARG(r.off),
                         OCLML_ARG(dy->mem), OCLML_ARG(go), OCLML_ARG(dx->mem), OCLML_ARG(dxo),
                         OCLML_ARG(flags)};
    if (dgamma || dbeta) {
        bool done;
        st = fused_backward(ctx, rms, args, rows, cols, vec4_all(all, 4), dgamma, dbeta, &done);
        if (st || done) return st;
    }
    oclml__row_plan p;
    st = oclml__row_plan_for(ctx, FILE_CL, base, rows, cols, vec4_all(all, 4), 2, &p);
    if (st) return st;
    if (!p.long_rows) {
        st = oclml__row_launch(ctx, FILE_CL, base, &p, args, 13);
    } else {
        cl_mem part;
        st = oclml__scratch_get(ctx, p.rows * p.nchunks * 2 * sizeof(float), &part);
        if (st) return st;
        oclml__arg a1[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(g.mem), OCLML_ARG(g.off),
                           OCLML_ARG(m.mem), OCLML_ARG(m.off), OCLML_ARG(r.mem), OCLML_ARG(r.off),
                           OCLML_ARG(dy->mem), OCLML_ARG(go), OCLML_ARG(flags), OCLML_ARG(part)};
        st = oclml__row_launch_long(ctx, FILE_CL, rms ? "oclml_rmsnorm_bwd_part" : "oclml_layernorm_bwd_part",
                                    &p, a1, 12);
        oclml__arg a2[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(g.mem), OCLML_ARG(g.off),
                           OCLML_ARG(m.mem), OCLML_ARG(m.off), OCLML_ARG(r.mem), OCLML_ARG(r.off),
                           OCLML_ARG(dy->mem), OCLML_ARG(go), OCLML_ARG(dx->mem), OCLML_ARG(dxo),
                           OCLML_ARG(flags), OCLML_ARG(part)};
        if (!st)
            st = oclml__row_launch_long(ctx, FILE_CL, rms ? "oclml_rmsnorm_bwd_finish" : "oclml_layernorm_bwd_finish",
                                        &p, a2, 14);
        oclml__scratch_put(ctx, part);
    }
    if (!st && (dgamma || dbeta)) st = param_grads(ctx, rms, x, rms ? NULL : mean, rstd, dy, dgamma, dbeta, rows, cols);
    return st;
}

oclml_status oclml_layernorm(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *gamma,
                             const oclml_tensor *beta, float eps, oclml_tensor *y, oclml_tensor *mean,
                             oclml_tensor *rstd) {
    OCLML__ROW_RETRY(ctx, norm_forward(ctx, false, x, gamma, beta, eps, y, mean, rstd));
}

oclml_status oclml_rmsnorm(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *gamma, float eps,
                           oclml_tensor *y, oclml_tensor *rstd) {
    OCLML__ROW_RETRY(ctx, norm_forward(ctx, true, x, gamma, NULL, eps, y, NULL, rstd));
}

oclml_status oclml_layernorm_backward(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *gamma,
                                      const oclml_tensor *mean, const oclml_tensor *rstd,
                                      const oclml_tensor *dy, oclml_tensor *dx, oclml_tensor *dgamma,
                                      oclml_tensor *dbeta) {
    OCLML__ROW_RETRY(ctx, norm_backward(ctx, false, x, gamma, mean, rstd, dy, dx, dgamma, dbeta));
}

oclml_status oclml_rmsnorm_backward(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *gamma,
                                    const oclml_tensor *rstd, const oclml_tensor *dy, oclml_tensor *dx,
                                    oclml_tensor *dgamma) {
    OCLML__ROW_RETRY(ctx, norm_backward(ctx, true, x, gamma, NULL, rstd, dy, dx, dgamma, NULL));
}

/* ---- which variant an op runs for a shape ---- */
typedef struct variant_entry {
    const char *op, *file, *base;
    unsigned arrays;
} variant_entry;

static const variant_entry VARIANTS[] = {
    {"softmax", "softmax.cl", "oclml_softmax_fwd", 1},
    {"log_softmax", "softmax.cl", "oclml_log_softmax_fwd", 1},
    {"softmax_backward", "softmax.cl", "oclml_softmax_bwd", 2},
    {"log_softmax_backward", "softmax.cl", "oclml_log_softmax_bwd", 2},
    {"layernorm", FILE_CL, "oclml_layernorm_fwd", 1},
    {"rmsnorm", FILE_CL, "oclml_rmsnorm_fwd", 1},
    {"layernorm_backward", FILE_CL, "oclml_layernorm_bwd_params", 4},
    {"rmsnorm_backward", FILE_CL, "oclml_rmsnorm_bwd_params", 4},
};

oclml_status oclml_op_variant(oclml_ctx *ctx, const char *op, size_t rows, size_t cols, char *text,
                              size_t len) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!op || !text || len == 0)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "op or text buffer is NULL or empty");
    if (rows == 0 || cols == 0) return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "rows and cols must be >= 1");
    for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++) {
        const variant_entry *v = &VARIANTS[i];
        if (strcmp(v->op, op)) continue;
        oclml__row_plan p;
        st = oclml__row_plan_for(ctx, v->file, v->base, rows, cols, cols % 4 == 0, v->arrays, &p);
        if (!st) snprintf(text, len, "%s", p.variant);
        return st;
    }
    return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "no row op named '%s'", op);
}
