/* Reductions over any set of axes (cl/ops/axis.cl). The axes are canonicalised first: size-1
 * dimensions dropped, neighbours that are both reduced or both kept merged, which leaves at most
 * four alternating groups. Each pattern runs as one or two passes of the two kernels:
 *
 *   [K R]       rows                      [R K], [K R K]  cols (column sums, batched)
 *   [R K R]     rows, then cols           [K R K R]       rows, then cols (batched)
 *   [R K R K]   cols, then cols           [R]             oclml_reduce_all; [K], []: a copy
 *
 * and cols itself splits long columns into chunks when its blocks alone would not fill the
 * device (partials, then one more cols pass over them). */
#include "ops/ops.h"

#include <stdio.h>

#define FILE_CL "axis.cl"
/* Argmax indices travel as floats (and as uint bits in partials): exact up to 2^24. */
#define MAX_EXACT_INDEX (1u << 24)

/* ---- canonical view ---- */
typedef struct ax_view {
    int n;          /* groups, at most 4 */
    size_t size[4]; /* merged sizes */
    bool red[4];    /* reduced group? */
    size_t count;   /* elements per output (product of reduced sizes) */
} ax_view;

static void canonical(const oclml_tensor *x, unsigned mask, ax_view *v) {
    v->n = 0;
    v->count = 1;
    for (int d = 0; d < x->ndim; d++) {
        bool r = (mask >> d) & 1u;
        if (r) v->count *= x->shape[d];
        if (x->shape[d] == 1) continue;
        if (v->n > 0 && v->red[v->n - 1] == r)
            v->size[v->n - 1] *= x->shape[d];
        else {
            v->size[v->n] = x->shape[d];
            v->red[v->n] = r;
            v->n++;
        }
    }
}

/* ---- plans (pure) ---- */
static size_t wg_limit(const oclml_ctx *ctx) {
    size_t m = ctx->caps.max_work_group_size;
    return oclml__pow2_floor(m < 256 ? (m ? m : 1) : 256);
}

typedef struct cols_plan {
    unsigned vec;
    size_t tx, ty, colblocks, chunks, chunk, batches;
} cols_plan;

static void plan_cols(const oclml_ctx *ctx, size_t B, size_t R, size_t M, bool vec_ok,
                      cols_plan *p) {
    size_t wg = wg_limit(ctx);
    p->vec = vec_ok && M % 4 == 0 ? 4 : 1;
    size_t items = (M + p->vec - 1) / p->vec;
    p->tx = oclml__pow2_ceil(items);
    if (p->tx > 32) p->tx = 32;
    if (p->tx > wg) p->tx = wg;
    p->ty = wg / p->tx;
    p->colblocks = (items + p->tx - 1) / p->tx;
    p->batches = B < 65535 ? B : 65535;
    /* Chunks of rows: enough work-groups to fill the device several times over, each work-item
     * folding at least 8 rows. */
    size_t cus = ctx->caps.compute_units ? ctx->caps.compute_units : 1;
    size_t target = (ctx->caps.is_gpu ? 8 : 4) * cus, groups = p->colblocks * p->batches;
    size_t s = groups >= target ? 1 : (target + groups - 1) / groups;
    size_t max_s = (R + 8 * p->ty - 1) / (8 * p->ty);
    if (s > max_s) s = max_s;
    if (s > 65535) s = 65535;
    if (s < 1) s = 1;
    size_t chunk = (R + s - 1) / s;
    chunk = (chunk + p->ty - 1) / p->ty * p->ty;
    p->chunk = chunk;
    p->chunks = (R + chunk - 1) / chunk;
}

static void plan_rows(const oclml_ctx *ctx, size_t rows, size_t cols, size_t *g, size_t *local,
                      size_t *global) {
    size_t wg = wg_limit(ctx), G = 1;
    while (G < wg && G * 16 < cols) G *= 2;
    *g = G;
    *local = wg;
    *global = (rows + wg / G - 1) / (wg / G) * wg;
}

/* ---- launches ---- */
static oclml_status ax_kernel(oclml_ctx *ctx, const char *name, unsigned op, unsigned vec,
                              cl_kernel *k) {
    char defines[64];
    snprintf(defines, sizeof defines, "-DAX_OP=%u -DAX_VEC=%u", op, vec);
    oclml__program_spec spec = {FILE_CL, defines, name, 0};
    return oclml__kernel(ctx, &spec, name, k);
}

/* y[r] = op over x's row r (rows x cols). */
static oclml_status run_rows(oclml_ctx *ctx, unsigned op, cl_mem x, cl_ulong xo, size_t rows,
                             size_t cols, cl_mem y, cl_ulong yo, float scale) {
    cl_kernel k;
    oclml_status st = ax_kernel(ctx, "oclml_axis_rows", op, 1, &k);
    if (st) return st;
    size_t G, local, global;
    plan_rows(ctx, rows, cols, &G, &local, &global);
    cl_ulong ur = rows, uc = cols;
    cl_uint g = (cl_uint)G;
    oclml__arg args[] = {OCLML_ARG(x),     OCLML_ARG(xo), OCLML_ARG(ur),
                         OCLML_ARG(uc),    OCLML_ARG(y),  OCLML_ARG(yo),
                         OCLML_ARG(scale), OCLML_ARG(g),  OCLML_LOCAL(2 * local * sizeof(float))};
    return oclml__launch(ctx, k, args, 9, 1, &global, &local, NULL);
}

static oclml_status cols_launch(oclml_ctx *ctx, unsigned op, const cols_plan *p, size_t groups1,
                                cl_mem x, cl_ulong xo, cl_mem xi, cl_ulong xio, cl_uint pairs,
                                size_t B, size_t R, size_t M, cl_mem y, cl_ulong yo, cl_mem yi,
                                cl_ulong yio, cl_uint final, float scale) {
    cl_kernel k;
    oclml_status st = ax_kernel(ctx, "oclml_axis_cols", op, p->vec, &k);
    if (st) return st;
    cl_ulong ub = B, ur = R, um = M, chunk = groups1 > 1 ? p->chunk : R;
    size_t local[3] = {p->tx, p->ty, 1};
    size_t global[3] = {p->colblocks * p->tx, groups1 * p->ty, p->batches};
    oclml__arg args[] = {OCLML_ARG(x),     OCLML_ARG(xo),
                         OCLML_ARG(xi),    OCLML_ARG(xio),
                         OCLML_ARG(pairs), OCLML_ARG(ub),
                         OCLML_ARG(ur),    OCLML_ARG(um),
                         OCLML_ARG(chunk), OCLML_ARG(y),
                         OCLML_ARG(yo),    OCLML_ARG(yi),
                         OCLML_ARG(yio),   OCLML_ARG(final),
                         OCLML_ARG(scale), OCLML_LOCAL(2 * p->tx * p->ty * p->vec * sizeof(float))};
    return oclml__launch(ctx, k, args, 16, 3, global, local, NULL);
}

/* y [B x M] = op over R of x [B x R x M]: one pass, or chunk partials and a second pass. */
static oclml_status run_cols(oclml_ctx *ctx, unsigned op, cl_mem x, cl_ulong xo, size_t B, size_t R,
                             size_t M, cl_mem y, cl_ulong yo, float scale) {
    cols_plan p;
    plan_cols(ctx, B, R, M, xo % 4 == 0, &p);
    if (p.chunks == 1)
        return cols_launch(ctx, op, &p, 1, x, xo, NULL, 0, 0, B, R, M, y, yo, NULL, 0, 1, scale);
    size_t n = B * p.chunks * M;
    cl_mem part, idx = NULL;
    oclml_status st = oclml__scratch_get(ctx, n * sizeof(float), &part);
    if (st) return st;
    if (op == OCLML_REDUCE_ARGMAX) st = oclml__scratch_get(ctx, n * sizeof(float), &idx);
    if (!st)
        st = cols_launch(ctx, op, &p, p.chunks, x, xo, NULL, 0, 0, B, R, M, part, 0, idx, 0, 0,
                         1.0f);
    if (!st) {
        cols_plan q;
        plan_cols(ctx, B, p.chunks, M, true, &q);
        st = cols_launch(ctx, op, &q, 1, part, 0, idx, 0, idx != NULL, B, p.chunks, M, y, yo, NULL,
                         0, 1, scale);
    }
    if (idx) oclml__scratch_put(ctx, idx);
    oclml__scratch_put(ctx, part);
    return st;
}

/* ---- validation ---- */

/* The axes as a bit mask (negative axes count from the end); errors on bad lists. */
static oclml_status axes_mask(oclml_ctx *ctx, int ndim, const int *axes, int naxes,
                              unsigned *mask) {
    if (!axes) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "axes is NULL");
    if (naxes < 1 || naxes > ndim)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "naxes must be 1 to %d, not %d", ndim,
                           naxes);
    *mask = 0;
    for (int i = 0; i < naxes; i++) {
        int a = axes[i] < 0 ? axes[i] + ndim : axes[i];
        if (a < 0 || a >= ndim)
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "axis %d is out of range for %d dimensions", axes[i], ndim);
        if (*mask & (1u << a))
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "axis %d is listed twice", axes[i]);
        *mask |= 1u << a;
    }
    return OCLML_SUCCESS;
}

/* y must be x's shape with each reduced dimension 1 (keepdim) or removed ([1] if none is
 * left). */
static oclml_status check_out(oclml_ctx *ctx, const oclml_tensor *x, unsigned mask,
                              const oclml_tensor *y) {
    oclml_status st = oclml__check_tensor(ctx, y, "y");
    if (st) return st;
    size_t keep[OCLML_MAX_DIMS], drop[OCLML_MAX_DIMS];
    int nk = x->ndim, nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        bool r = (mask >> d) & 1u;
        keep[d] = r ? 1 : x->shape[d];
        if (!r) drop[nd++] = x->shape[d];
    }
    if (nd == 0) drop[nd++] = 1;
    bool ok_keep = y->ndim == nk, ok_drop = y->ndim == nd;
    for (int d = 0; d < y->ndim; d++) {
        if (ok_keep && y->shape[d] != keep[d]) ok_keep = false;
        if (ok_drop && y->shape[d] != drop[d]) ok_drop = false;
    }
    if (ok_keep || ok_drop) return OCLML_SUCCESS;
    char a[96] = "", b[96] = "";
    for (int d = 0; d < nk; d++)
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%zu", d ? " x " : "", keep[d]);
    for (int d = 0; d < nd; d++)
        snprintf(b + strlen(b), sizeof b - strlen(b), "%s%zu", d ? " x " : "", drop[d]);
    return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "y must be [%s] (keepdim) or [%s]", a, b);
}

oclml_status oclml_reduce_axes(oclml_ctx *ctx, oclml_reduce_op op, const oclml_tensor *x,
                               const int *axes, int naxes, oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if ((unsigned)op > OCLML_REDUCE_ARGMAX)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "unknown reduction %d", (int)op);
    st = oclml__check_tensor(ctx, x, "x");
    unsigned mask = 0;
    if (!st) st = axes_mask(ctx, x->ndim, axes, naxes, &mask);
    if (!st) st = check_out(ctx, x, mask, y);
    if (st) return st;
    if (oclml__overlap(x, y)) return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "y overlaps x");
    if (op == OCLML_REDUCE_ARGMAX && naxes != 1)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED, "argmax takes exactly one axis");
    ax_view v;
    canonical(x, mask, &v);
    if (op == OCLML_REDUCE_ARGMAX && v.count > MAX_EXACT_INDEX)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED,
                           "argmax indices above 2^24 are not exact in fp32");
    unsigned kop = op == OCLML_REDUCE_MEAN ? OCLML_REDUCE_SUM : (unsigned)op;
    float scale = op == OCLML_REDUCE_MEAN ? (float)(1.0 / (double)v.count) : 1.0f;
    cl_ulong xo = oclml__elem_offset(x), yo = oclml__elem_offset(y);
    /* Patterns with no reduction left: every output is its one input. */
    bool any_red = false;
    for (int i = 0; i < v.n; i++) any_red |= v.red[i];
    if (!any_red) {
        if (op == OCLML_REDUCE_ARGMAX) return oclml_fill(ctx, y, 0.0f);
        return oclml_copy(ctx, x, y);
    }
    if (v.n == 1) return oclml_reduce_all(ctx, op, x, y);
    const size_t *s = v.size;
    if (v.n == 2 && !v.red[0]) return run_rows(ctx, kop, x->mem, xo, s[0], s[1], y->mem, yo, scale);
    if (v.n == 2) return run_cols(ctx, kop, x->mem, xo, 1, s[0], s[1], y->mem, yo, scale);
    if (v.n == 3 && !v.red[0])
        return run_cols(ctx, kop, x->mem, xo, s[0], s[1], s[2], y->mem, yo, scale);
    /* Two passes through a temporary: [R K R] and [K R K R] reduce the innermost group first;
     * [R K R K] the inner [R K] pair first. */
    size_t tmp_n = v.red[0] && v.n == 4 ? s[0] * s[1] * s[3] : x->numel / s[v.n - 1];
    cl_mem tmp;
    st = oclml__scratch_get(ctx, tmp_n * sizeof(float), &tmp);
    if (st) return st;
    if (v.n == 3) { /* [R0 K R1] */
        st = run_rows(ctx, kop, x->mem, xo, s[0] * s[1], s[2], tmp, 0, 1.0f);
        if (!st) st = run_cols(ctx, kop, tmp, 0, 1, s[0], s[1], y->mem, yo, scale);
    } else if (!v.red[0]) { /* [K0 R0 K1 R1] */
        st = run_rows(ctx, kop, x->mem, xo, s[0] * s[1] * s[2], s[3], tmp, 0, 1.0f);
        if (!st) st = run_cols(ctx, kop, tmp, 0, s[0], s[1], s[2], y->mem, yo, scale);
    } else { /* [R0 K0 R1 K1] */
        st = run_cols(ctx, kop, x->mem, xo, s[0] * s[1], s[2], s[3], tmp, 0, 1.0f);
        if (!st) st = run_cols(ctx, kop, tmp, 0, 1, s[0], s[1] * s[3], y->mem, yo, scale);
    }
    oclml__scratch_put(ctx, tmp);
    return st;
}

void oclml__axis_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    static const char *const names[] = {"sum", "max", NULL, "argmax"};
    static const unsigned ops[] = {0, 1, 3};
    for (int i = 0; i < 3; i++)
        for (unsigned vec = 1; vec <= 4; vec += 3) {
            char defines[64], variant[64];
            snprintf(defines, sizeof defines, "-DAX_OP=%u -DAX_VEC=%u", ops[i], vec);
            snprintf(variant, sizeof variant, "cols %s vec%u", names[ops[i]], vec);
            oclml__warm_add(list, op, variant,
                            (oclml__program_spec){FILE_CL, defines, "oclml_axis_cols", 0});
            if (vec == 1) {
                snprintf(variant, sizeof variant, "rows %s", names[ops[i]]);
                oclml__warm_add(list, op, variant,
                                (oclml__program_spec){FILE_CL, defines, "oclml_axis_rows", 0});
            }
        }
    (void)ctx;
}
