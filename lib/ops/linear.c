/* Linear layers in PyTorch's layout: y = act(x W^T + b) as one product with the bias and the
 * activation in its epilogue (oclml__gemm, gemm_plan.c), and the backward: dZ = dy act'(saved)
 * with db's column sums fused into the same pass (cl/ops/linear.cl), then dx = dZ W and
 * dw = dZ^T x on the GEMM.
 *
 * dtypes: with x and w fp32 every tensor is fp32. With x and w bf16 (or fp16) the products run on
 * that dtype (gemm_lp.c) and each other tensor may be of any dtype, rounded once where written:
 * a mixed-precision step keeps y and dx in bf16 and dw, db in fp32. The backward's dZ is then of
 * x's dtype, so that both its products are 16-bit too (as autocast's are). */
#include "ops/gemm.h"
#include "ops/ops.h"

#include <limits.h>
#include <stdio.h>

#define FILE_CL "linear.cl"
/* Flags of oclml_linear_dz (cl/ops/linear.cl). */
#define LIN_WRITE_DZ 1u
#define LIN_WANT_DB 2u

/* Whether the derivative reads the pre-activation (else the output y). */
static bool reads_pre(oclml_activation act) {
    return act == OCLML_ACT_GELU_ERF || act == OCLML_ACT_GELU_TANH || act == OCLML_ACT_SILU;
}

/* Fails when output `o` shares memory with any of the n tensors in `others` (NULLs skipped). */
static oclml_status check_no_alias(oclml_ctx *ctx, const oclml_tensor *o, const char *oname,
                                   const oclml_tensor *const *others, const char *const *names,
                                   int n) {
    for (int i = 0; i < n; i++)
        if (o && others[i] && oclml__overlap(o, others[i]))
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "output '%s' overlaps '%s' in memory (linear outputs may not "
                               "alias inputs or other outputs)",
                               oname, names[i]);
    return OCLML_SUCCESS;
}

static void shape_text(const oclml_tensor *t, char *out, size_t len) {
    int n = snprintf(out, len, "[");
    for (int i = 0; i < t->ndim && n > 0 && (size_t)n < len; i++)
        n += snprintf(out + n, len - (size_t)n, i ? " x %zu" : "%zu", t->shape[i]);
    if (n > 0 && (size_t)n < len) snprintf(out + n, len - (size_t)n, "]");
}

/* The dtypes a layer's other tensors may have: fp32 with fp32 x, any with 16-bit x. */
static unsigned dtypes_with(const oclml_tensor *x) {
    return x->dtype == OCLML_FLOAT32 ? 1u << OCLML_FLOAT32 : OCLML__DTYPES_ALL;
}

/* Checks that t has x's shape with `last` as its last dimension. */
static oclml_status check_like(oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                               const oclml_tensor *x, size_t last, const char *last_name) {
    oclml_status st = oclml__check_tensor_of(ctx, t, name, dtypes_with(x));
    if (st) return st;
    bool ok = t->ndim == x->ndim && t->shape[t->ndim - 1] == last;
    for (int i = 0; ok && i < x->ndim - 1; i++) ok = t->shape[i] == x->shape[i];
    if (ok) return OCLML_SUCCESS;
    char ts[128], xs[128];
    shape_text(t, ts, sizeof ts);
    shape_text(x, xs, sizeof xs);
    return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                       "%s is %s, expected x's shape %s with %s = %zu last", name, ts, xs,
                       last_name, last);
}

/* w [out x in] and x [... x in]: the layer's sizes, rows = x's elements / in. */
static oclml_status check_x_w(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *w,
                              size_t *rows, size_t *in, size_t *out) {
    oclml_status st = oclml__check_tensor_of(ctx, x, "x", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_tensor_of(ctx, w, "w", OCLML__DTYPES_ALL);
    if (st) return st;
    if (x->dtype != w->dtype)
        return oclml__fail(ctx, OCLML_ERR_DTYPE, "x (%s) and w (%s) differ in dtype",
                           oclml_dtype_name(x->dtype), oclml_dtype_name(w->dtype));
    if (w->ndim != 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "w must be [out x in] (2 dimensions), it has %d", w->ndim);
    *out = w->shape[0];
    *in = w->shape[1];
    if (x->shape[x->ndim - 1] != *in) {
        char xs[128];
        shape_text(x, xs, sizeof xs);
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "shapes do not chain: x is %s, its last dimension must be w's in = %zu "
                           "(w is [%zu x %zu])",
                           xs, *in, *out, *in);
    }
    if (*out > UINT_MAX || *in > UINT_MAX)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "w is [%zu x %zu]: in and out must each be below 2^32", *out, *in);
    *rows = x->numel / *in;
    return OCLML_SUCCESS;
}

static oclml_status check_bias(oclml_ctx *ctx, const oclml_tensor *b, const char *name,
                               const oclml_tensor *x, size_t out) {
    if (!b) return OCLML_SUCCESS;
    oclml_status st = oclml__check_tensor_of(ctx, b, name, dtypes_with(x));
    if (st) return st;
    if (b->numel != out)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "%s must have out = %zu elements (w's rows), it has %zu", name, out,
                           b->numel);
    return OCLML_SUCCESS;
}

static oclml_dtype dtype_or_fp32(const oclml_tensor *t) { return t ? t->dtype : OCLML_FLOAT32; }

/* A dense row-major [rows x ld] tensor as a matrix. */
static oclml__matrix mat(const oclml_tensor *t, size_t ld) {
    return (oclml__matrix){t->mem, oclml__elem_offset(t), ld, 0};
}

static oclml_status linear_forward(oclml_ctx *ctx, oclml_activation act,
                                   const oclml_dropout_params *drop, const oclml_tensor *x,
                                   const oclml_tensor *w, const oclml_tensor *b, oclml_tensor *y,
                                   oclml_tensor *pre) {
    size_t rows, in, out;
    oclml_status st = oclml__check_act(ctx, act);
    if (!st) st = check_x_w(ctx, x, w, &rows, &in, &out);
    if (!st) st = check_bias(ctx, b, "b", x, out);
    if (!st) st = check_like(ctx, y, "y", x, out, "out");
    if (!st && pre) st = check_like(ctx, pre, "pre", x, out, "out");
    if (st) return st;
    const oclml_tensor *inputs[] = {x, w, b};
    const char *const in_names[] = {"x", "w", "b"};
    st = check_no_alias(ctx, y, "y", inputs, in_names, 3);
    if (!st) st = check_no_alias(ctx, pre, "pre", inputs, in_names, 3);
    if (!st && oclml__overlap(y, pre))
        st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "outputs 'y' and 'pre' overlap");
    if (st) return st;
    oclml__gemm_desc d = {.trans_b = true,
                          .m = rows,
                          .n = out,
                          .k = in,
                          .batch = 1,
                          .alpha = 1.0f,
                          .beta = 0.0f,
                          .a = mat(x, in),
                          .b = mat(w, in),
                          .c = mat(y, out),
                          .bias = b ? b->mem : NULL,
                          .bias_offset = b ? oclml__elem_offset(b) : 0,
                          .act = act,
                          .drop = oclml__dropout_active(drop),
                          .drop_ld = out,
                          .ab_dtype = x->dtype,
                          .c_dtype = y->dtype,
                          .bias_dtype = dtype_or_fp32(b),
                          .pre_dtype = dtype_or_fp32(pre)};
    if (pre) d.pre = mat(pre, out);
    return oclml__gemm(ctx, &d);
}

oclml_status oclml_linear(oclml_ctx *ctx, oclml_activation act, const oclml_tensor *x,
                          const oclml_tensor *w, const oclml_tensor *b, oclml_tensor *y,
                          oclml_tensor *pre) {
    oclml_status st = oclml__check_ctx(ctx);
    return st ? st : linear_forward(ctx, act, NULL, x, w, b, y, pre);
}

oclml_status oclml_linear_dropout(oclml_ctx *ctx, oclml_activation act,
                                  const oclml_dropout_params *drop, const oclml_tensor *x,
                                  const oclml_tensor *w, const oclml_tensor *b, oclml_tensor *y,
                                  oclml_tensor *pre) {
    oclml_dropout_params defaults;
    drop = OCLML__OR_DEFAULTS(drop, &defaults, oclml_dropout_params_init);
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_dropout(ctx, drop);
    return st ? st : linear_forward(ctx, act, drop, x, w, b, y, pre);
}

/* ---- backward ---- */

/* The dZ pass's program: the activation's derivative, with or without dropout's mask. */
typedef struct dz_program {
    char defines[160];
    oclml__program_spec spec;
} dz_program;

/* dt: the dtypes of dy, saved, dZ and db (all fp32: no defines). */
static void dz_program_of(oclml_activation act, bool dropout, const oclml_dtype dt[4],
                          dz_program *g) {
    const char *a = oclml__act_define(act);
    static const char *const names[4] = {"DY", "SAVED", "DZ", "DB"};
    char dtypes[96];
    oclml__dtype_defines_of(dtypes, sizeof dtypes, 4, names, dt);
    snprintf(g->defines, sizeof g->defines, "%s%s%s%s", a ? a : "",
             dropout ? (a ? " -DHAS_DROPOUT=1" : "-DHAS_DROPOUT=1") : "",
             dtypes[0] && (a || dropout) ? " " : "", dtypes);
    g->spec = (oclml__program_spec){FILE_CL, g->defines[0] ? g->defines : NULL,
                                    "oclml_linear_dz oclml_linear_db_finish", 0};
}

/* The dZ pass's grid: work-groups of up to 256 columns, and slices of rows enough to give every
 * compute unit several groups (each slice writes one row of db partials). Depends on the shape
 * and the device only, so a result is reproducible on its device. Narrow layers take narrower
 * groups on GPUs (no mostly idle lanes); CPUs keep one size: their compilers build a kernel
 * for every work-group size, and idle work-items cost a CPU's loop little. */
static void dz_grid(const oclml_ctx *ctx, size_t rows, size_t cols, size_t *local,
                    size_t *col_groups, size_t *slices, size_t *rps) {
    size_t lx = ctx->caps.max_work_group_size < 256 ? ctx->caps.max_work_group_size : 256;
    while (ctx->caps.is_gpu && lx > 1 && lx / 2 >= cols) lx /= 2;
    if (lx < 1) lx = 1;
    *local = lx;
    *col_groups = (cols + lx - 1) / lx;
    size_t want = (size_t)(ctx->caps.compute_units ? ctx->caps.compute_units : 1) * 8;
    size_t s = want / *col_groups;
    if (s < 1) s = 1;
    if (s > 65535) s = 65535;
    if (s > rows) s = rows;
    *rps = (rows + s - 1) / s;
    *slices = (rows + *rps - 1) / *rps;
}

/* dZ (into dz when flags has LIN_WRITE_DZ) and db (when db is not NULL); drop: the forward's
 * dropout (NULL: none). */
static oclml_status dz_pass(oclml_ctx *ctx, oclml_activation act, const oclml_dropout_params *drop,
                            const oclml_tensor *saved, const oclml_tensor *dy, cl_mem dz,
                            oclml_dtype dz_dtype, size_t rows, size_t cols, oclml_tensor *db,
                            bool accumulate) {
    dz_program g;
    const oclml_dtype dt[4] = {dy->dtype, dtype_or_fp32(saved), dz_dtype, dtype_or_fp32(db)};
    dz_program_of(act, drop != NULL, dt, &g);
    cl_kernel kdz, kfin = NULL;
    oclml_status st = oclml__kernel(ctx, &g.spec, "oclml_linear_dz", &kdz);
    if (!st && db) st = oclml__kernel(ctx, &g.spec, "oclml_linear_db_finish", &kfin);
    if (st) return st;
    size_t local, col_groups, slices, rps;
    dz_grid(ctx, rows, cols, &local, &col_groups, &slices, &rps);
    cl_mem part = NULL;
    if (db && (st = oclml__scratch_get(ctx, slices * cols * sizeof(float), &part))) return st;
    cl_mem dym = dy->mem, sm = oclml__opt_mem(saved);
    cl_ulong dy_off = oclml__elem_offset(dy), s_off = oclml__opt_offset(saved), dz_off = 0,
             urows = rows, urps = rps;
    cl_uint ucols = (cl_uint)cols, flags = (dz ? LIN_WRITE_DZ : 0) | (db ? LIN_WANT_DB : 0);
    const oclml__drop_args da = oclml__drop_args_of(drop);
    oclml__arg args[] = {OCLML_ARG(dym),   OCLML_ARG(dy_off), OCLML_ARG(sm),
                         OCLML_ARG(s_off), OCLML_ARG(dz),     OCLML_ARG(dz_off),
                         OCLML_ARG(part),  OCLML_ARG(urows),  OCLML_ARG(ucols),
                         OCLML_ARG(urps),  OCLML_ARG(flags),  OCLML__DROP_ARG_LIST(da)};
    size_t global[2] = {col_groups * local, slices}, lsize[2] = {local, 1};
    st = oclml__launch(ctx, kdz, args, 16, 2, global, lsize, NULL);
    if (!st && db) {
        cl_mem dbm = db->mem;
        cl_ulong db_off = oclml__elem_offset(db);
        cl_uint uslices = (cl_uint)slices, acc = accumulate;
        oclml__arg fargs[] = {OCLML_ARG(part), OCLML_ARG(uslices), OCLML_ARG(ucols),
                              OCLML_ARG(dbm),  OCLML_ARG(db_off),  OCLML_ARG(acc)};
        size_t fg = col_groups * local;
        st = oclml__launch(ctx, kfin, fargs, 6, 1, &fg, &local, NULL);
    }
    if (part) oclml__scratch_put(ctx, part);
    return st;
}

static oclml_status check_backward(oclml_ctx *ctx, oclml_activation act,
                                   const oclml_dropout_params *drop, const oclml_tensor *x,
                                   const oclml_tensor *w, const oclml_tensor *saved,
                                   const oclml_tensor *dy, const oclml_tensor *dx,
                                   const oclml_tensor *dw, const oclml_tensor *db, size_t *rows,
                                   size_t *in, size_t *out) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_act(ctx, act);
    if (!st) st = check_x_w(ctx, x, w, rows, in, out);
    if (!st) st = check_like(ctx, dy, "dy", x, *out, "out");
    if (st) return st;
    if (!saved && act != OCLML_ACT_NONE)
        return oclml__fail(
            ctx, OCLML_ERR_NULL_POINTER, "saved is NULL: the %s derivative reads the forward's %s",
            oclml__act_name(act), reads_pre(act) || drop ? "pre-activation (pre)" : "output (y)");
    if (saved) st = check_like(ctx, saved, "saved", x, *out, "out");
    if (!st && dx) st = check_like(ctx, dx, "dx", x, *in, "in");
    if (!st && dw) st = oclml__check_tensor_of(ctx, dw, "dw", dtypes_with(x));
    if (!st && dw && (dw->ndim != 2 || dw->shape[0] != *out || dw->shape[1] != *in))
        st = oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "dw must be [%zu x %zu]", *out, *in);
    if (!st) st = check_bias(ctx, db, "db", x, *out);
    if (st) return st;
    const oclml_tensor *others[] = {x, w, saved, dy, dx, dw, db};
    const char *const names[] = {"x", "w", "saved", "dy", "dx", "dw", "db"};
    /* Each output against the inputs and the outputs before it. */
    st = check_no_alias(ctx, dx, "dx", others, names, 4);
    if (!st) st = check_no_alias(ctx, dw, "dw", others, names, 5);
    if (!st) st = check_no_alias(ctx, db, "db", others, names, 6);
    return st;
}

static oclml_status linear_backward_run(oclml_ctx *ctx, oclml_activation act,
                                        const oclml_dropout_params *drop, const oclml_tensor *x,
                                        const oclml_tensor *w, const oclml_tensor *saved,
                                        const oclml_tensor *dy, oclml_tensor *dx, oclml_tensor *dw,
                                        oclml_tensor *db, int accumulate) {
    size_t rows, in, out;
    oclml_status st = check_backward(ctx, act, drop, x, w, saved, dy, dx, dw, db, &rows, &in, &out);
    if (st || (!dx && !dw && !db)) return st;
    /* dZ: dy itself without an activation, else a scratch matrix written by the dZ pass (which
     * also makes db's partials); db alone of a plain layer is the same pass, writing no dZ. */
    oclml__matrix dz = mat(dy, out);
    cl_mem dz_mem = NULL;
    /* dy serves as dZ where it is dZ already and of the products' dtype. */
    bool need_dz = (act != OCLML_ACT_NONE || drop || dy->dtype != x->dtype) && (dx || dw);
    if (need_dz) {
        size_t bytes;
        if (!oclml__mul_ok(rows, out, &bytes) || !oclml__mul_ok(bytes, x->elem_bytes, &bytes))
            return oclml__fail(ctx, OCLML_ERR_SIZE_OVERFLOW, "dZ of %zu x %zu overflows", rows,
                               out);
        if ((st = oclml__scratch_get(ctx, bytes, &dz_mem))) return st;
        dz = (oclml__matrix){dz_mem, 0, out, 0};
    }
    if (need_dz || db)
        st = dz_pass(ctx, act, drop, act == OCLML_ACT_NONE ? NULL : saved, dy, dz_mem, x->dtype,
                     rows, out, db, accumulate != 0);
    if (!st && dx) {
        /* dx [rows x in] = dZ [rows x out] W [out x in]. */
        oclml__gemm_desc d = {.m = rows,
                              .n = in,
                              .k = out,
                              .batch = 1,
                              .alpha = 1.0f,
                              .beta = 0.0f,
                              .a = dz,
                              .b = mat(w, in),
                              .c = mat(dx, in),
                              .act = OCLML_ACT_NONE,
                              .ab_dtype = x->dtype,
                              .c_dtype = dx->dtype};
        st = oclml__gemm(ctx, &d);
    }
    if (!st && dw) {
        /* dw [out x in] (+)= dZ^T [out x rows] x [rows x in]. */
        oclml__gemm_desc d = {.trans_a = true,
                              .m = out,
                              .n = in,
                              .k = rows,
                              .batch = 1,
                              .alpha = 1.0f,
                              .beta = accumulate ? 1.0f : 0.0f,
                              .a = dz,
                              .b = mat(x, in),
                              .c = mat(dw, in),
                              .act = OCLML_ACT_NONE,
                              .ab_dtype = x->dtype,
                              .c_dtype = dw->dtype};
        st = oclml__gemm(ctx, &d);
    }
    if (dz_mem) oclml__scratch_put(ctx, dz_mem);
    return st;
}

static oclml_status linear_backward(oclml_ctx *ctx, oclml_activation act,
                                    const oclml_dropout_params *drop, const oclml_tensor *x,
                                    const oclml_tensor *w, const oclml_tensor *saved,
                                    const oclml_tensor *dy, oclml_tensor *dx, oclml_tensor *dw,
                                    oclml_tensor *db, int accumulate) {
    uint64_t key = oclml__rehearsal_key(0, "linear_backward", 15);
    key = oclml__rehearsal_key(key, &act, sizeof act);
    const int dropping = drop != NULL; /* the programs differ, not the values */
    key = oclml__rehearsal_key(key, &dropping, sizeof dropping);
    key = oclml__rehearsal_key(key, &accumulate, sizeof accumulate);
    key = oclml__rehearsal_key_tensor(key, x);
    key = oclml__rehearsal_key_tensor(key, w);
    key = oclml__rehearsal_key_tensor(key, saved);
    key = oclml__rehearsal_key_tensor(key, dy);
    key = oclml__rehearsal_key_tensor(key, dx);
    key = oclml__rehearsal_key_tensor(key, dw);
    key = oclml__rehearsal_key_tensor(key, db);
    OCLML__REHEARSED(ctx, key,
                     linear_backward_run(ctx, act, drop, x, w, saved, dy, dx, dw, db, accumulate));
}

oclml_status oclml_linear_backward(oclml_ctx *ctx, oclml_activation act, const oclml_tensor *x,
                                   const oclml_tensor *w, const oclml_tensor *saved,
                                   const oclml_tensor *dy, oclml_tensor *dx, oclml_tensor *dw,
                                   oclml_tensor *db, int accumulate) {
    return linear_backward(ctx, act, NULL, x, w, saved, dy, dx, dw, db, accumulate);
}

oclml_status oclml_linear_dropout_backward(oclml_ctx *ctx, oclml_activation act,
                                           const oclml_dropout_params *drop, const oclml_tensor *x,
                                           const oclml_tensor *w, const oclml_tensor *pre,
                                           const oclml_tensor *dy, oclml_tensor *dx,
                                           oclml_tensor *dw, oclml_tensor *db, int accumulate) {
    oclml_dropout_params defaults;
    drop = OCLML__OR_DEFAULTS(drop, &defaults, oclml_dropout_params_init);
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_dropout(ctx, drop);
    /* The derivative reads pre whatever p is: the output-based forms (ReLU, tanh, sigmoid) take
     * the dropout program even at p = 0, where every element is kept at scale 1 (the same bits
     * as no mask); the others read pre anyway and skip the draws there. */
    const bool output_form = act != OCLML_ACT_NONE && !reads_pre(act);
    return st ? st
              : linear_backward(ctx, act, output_form ? drop : oclml__dropout_active(drop), x, w,
                                pre, dy, dx, dw, db, accumulate);
}

/* Prewarm: the products' kernels (the GEMM's warm list: square and linear-shaped products with
 * and without the GELU epilogue; the forward with dropout, a linear-shaped product with GELU and
 * dropout in place of that list: its backward's products are the list's) and, for the backward,
 * the dZ pass of every activation. */
void oclml__linear_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    const bool dropout = strstr(op, "dropout") != NULL, backward = strstr(op, "backward") != NULL;
    if (dropout && !backward) {
        static const oclml_dropout_params drop = {sizeof drop, 0.1f, 0, 0};
        oclml__gemm_desc d = oclml__gemm_desc_dense(8192, 4096, 1024);
        d.trans_b = true, d.b.ld = d.k;
        d.act = OCLML_ACT_GELU_ERF, d.drop = &drop, d.drop_ld = d.n;
        oclml__gemm_warm_desc(ctx, op, "8192x4096x1024 gelu dropout", &d, list);
    } else {
        oclml__gemm_warm(ctx, op, list);
    }
    if (!backward) return;
    const oclml_dtype fp32[4] = {OCLML_FLOAT32, OCLML_FLOAT32, OCLML_FLOAT32, OCLML_FLOAT32};
    for (unsigned a = 0; a < OCLML__N_ACTS; a++) {
        dz_program g;
        dz_program_of((oclml_activation)a, dropout, fp32, &g);
        oclml__warm_add(list, op, oclml__act_name((oclml_activation)a), g.spec);
    }
}
