/* Layout ops (cl/ops/layout.cl): bias add along an axis, permute and transpose, concat and split.
 * Permutes are canonicalised first (size-1 axes dropped, axes that stay neighbours in the same
 * order merged), so any permute of up to 4-D becomes a copy, a gather of whole rows (the
 * innermost axis stays innermost) or a batched tiled transpose. */
#include "ops/ops.h"

#include <stdio.h>

#define FILE_CL "layout.cl"
#define MAX_PARTS 8 /* parts per concat/split launch */

static unsigned log2u(size_t v) {
    unsigned l = 0;
    while ((size_t)1 << (l + 1) <= v) l++;
    return l;
}

static size_t wg_limit(const oclml_ctx *ctx) {
    size_t m = ctx->caps.max_work_group_size;
    return oclml__pow2_floor(m < 256 ? (m ? m : 1) : 256);
}

/* A 2-D launch over rows x items: work-items side by side along a row, several rows per group
 * where rows are short; each dimension capped at 65535 groups (the kernels loop past it). */
static void grid_2d(const oclml_ctx *ctx, size_t items, size_t rows, size_t global[2],
                    size_t local[2]) {
    size_t wg = wg_limit(ctx);
    local[0] = oclml__pow2_ceil(items) < wg ? oclml__pow2_ceil(items) : wg;
    local[1] = wg / local[0];
    size_t g0 = (items + local[0] - 1) / local[0], g1 = (rows + local[1] - 1) / local[1];
    global[0] = (g0 < 65535 ? g0 : 65535) * local[0];
    global[1] = (g1 < 65535 ? g1 : 65535) * local[1];
}

/* Concat and split move 16-bit elements as they are (LY_ELEM ushort). */
#define LY_16BIT " -DLY_ELEM=ushort"

static oclml_status ly_kernel_of(oclml_ctx *ctx, const char *name, unsigned vec, bool bits16,
                                 cl_kernel *k) {
    char defines[48];
    snprintf(defines, sizeof defines, "-DLY_VEC=%u%s", vec, bits16 ? LY_16BIT : "");
    oclml__program_spec spec = {FILE_CL, defines, name, 0};
    return oclml__kernel(ctx, &spec, name, k);
}

static oclml_status ly_kernel(oclml_ctx *ctx, const char *name, unsigned vec, cl_kernel *k) {
    return ly_kernel_of(ctx, name, vec, false, k);
}

static oclml_status norm_axis(oclml_ctx *ctx, int axis, int ndim, const char *what, int *out) {
    int a = axis < 0 ? axis + ndim : axis;
    if (a < 0 || a >= ndim)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "%s %d is out of range for %d dimensions", what, axis, ndim);
    *out = a;
    return OCLML_SUCCESS;
}

/* ---- bias add ---- */
oclml_status oclml_add_bias(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *b, int axis,
                            oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor(ctx, x, "x");
    if (!st) st = oclml__check_tensor(ctx, b, "b");
    if (!st) st = oclml__check_same_shape(ctx, x, "x", y, "y");
    int a = 0;
    if (!st) st = norm_axis(ctx, axis, x->ndim, "axis", &a);
    if (!st) st = oclml__check_numel(ctx, b, "b", x->shape[a]);
    if (st) return st;
    bool in_place = y->mem == x->mem && y->offset_bytes == x->offset_bytes;
    if (!in_place && oclml__overlap(x, y))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "y overlaps x (other than in place)");
    if (oclml__overlap(b, y)) return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "y overlaps b");
    size_t outer = 1, inner = 1, C = x->shape[a];
    for (int d = 0; d < a; d++) outer *= x->shape[d];
    for (int d = a + 1; d < x->ndim; d++) inner *= x->shape[d];
    cl_uint per_col = inner == 1;
    cl_ulong rows = per_col ? outer : outer * C, cols = per_col ? C : inner, uc = C;
    cl_ulong xo = oclml__elem_offset(x), bo = oclml__elem_offset(b), yo = oclml__elem_offset(y);
    unsigned vec = cols % 4 == 0 && xo % 4 == 0 && yo % 4 == 0 ? 4 : 1;
    cl_kernel k;
    st = ly_kernel(ctx, "oclml_layout_bias", vec, &k);
    if (st) return st;
    size_t global[2], local[2];
    grid_2d(ctx, cols / vec, rows, global, local);
    oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo),     OCLML_ARG(b->mem), OCLML_ARG(bo),
                         OCLML_ARG(y->mem), OCLML_ARG(yo),     OCLML_ARG(rows),   OCLML_ARG(cols),
                         OCLML_ARG(uc),     OCLML_ARG(per_col)};
    return oclml__launch(ctx, k, args, 10, 2, global, local, NULL);
}

/* ---- permute ---- */
typedef struct perm_view {
    int n;          /* merged axes */
    size_t size[4]; /* in x's order */
    int perm[4];    /* y's axis i is x's merged axis perm[i] */
} perm_view;

static void perm_canonical(const oclml_tensor *x, const int *perm, perm_view *v) {
    int rank[OCLML_MAX_DIMS], nk = 0, order[OCLML_MAX_DIMS], ny = 0;
    for (int d = 0; d < x->ndim; d++) rank[d] = x->shape[d] > 1 ? nk++ : -1;
    for (int i = 0; i < x->ndim; i++)
        if (rank[perm[i]] >= 0) order[ny++] = rank[perm[i]];
    /* Groups in y's order: runs of consecutive x ranks. first[g]: the run's first rank. */
    int first[4], ng = 0, group_of_rank[4];
    for (int i = 0; i < ny; i++) {
        if (i == 0 || order[i] != order[i - 1] + 1) first[ng++] = order[i];
        group_of_rank[order[i]] = ng - 1;
    }
    /* Number the groups in x's order. */
    int xid[4];
    for (int g = 0; g < ng; g++) {
        xid[g] = 0;
        for (int h = 0; h < ng; h++) xid[g] += first[h] < first[g];
    }
    size_t kept[4];
    for (int d = 0, r = 0; d < x->ndim; d++)
        if (rank[d] >= 0) kept[r++] = x->shape[d];
    v->n = ng;
    for (int g = 0; g < ng; g++) {
        v->perm[g] = xid[g];
        v->size[xid[g]] = 1;
    }
    for (int r = 0; r < nk; r++) v->size[xid[group_of_rank[r]]] *= kept[r];
}

typedef struct tile_plan {
    unsigned li, lj;
    size_t wg;
} tile_plan;

static void plan_tile(const oclml_ctx *ctx, size_t ni, size_t nj, tile_plan *p) {
    p->wg = wg_limit(ctx);
    unsigned le = log2u(4 * p->wg);
    unsigned li = le / 2, lj = le - li;
    unsigned ci = log2u(oclml__pow2_ceil(ni)), cj = log2u(oclml__pow2_ceil(nj));
    if (ci < li) {
        li = ci;
        lj = le - li < cj ? le - li : cj;
    } else if (cj < lj) {
        lj = cj;
        li = le - lj < ci ? le - lj : ci;
    }
    p->li = li;
    p->lj = lj;
}

static oclml_status check_perm(oclml_ctx *ctx, int ndim, const int *perm, int *out) {
    if (!perm) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "perm is NULL");
    unsigned seen = 0;
    for (int i = 0; i < ndim; i++) {
        int a = 0;
        oclml_status st = norm_axis(ctx, perm[i], ndim, "perm axis", &a);
        if (st) return st;
        if (seen & (1u << a))
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "perm lists axis %d twice",
                               perm[i]);
        seen |= 1u << a;
        out[i] = a;
    }
    return OCLML_SUCCESS;
}

oclml_status oclml_permute(oclml_ctx *ctx, const oclml_tensor *x, const int *perm,
                           oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor(ctx, x, "x");
    if (!st) st = oclml__check_tensor(ctx, y, "y");
    int p[OCLML_MAX_DIMS];
    if (!st) st = check_perm(ctx, x->ndim, perm, p);
    if (st) return st;
    bool shape_ok = y->ndim == x->ndim;
    for (int i = 0; shape_ok && i < x->ndim; i++) shape_ok = y->shape[i] == x->shape[p[i]];
    if (!shape_ok) {
        size_t w[OCLML_MAX_DIMS] = {1, 1, 1, 1};
        for (int i = 0; i < x->ndim; i++) w[i] = x->shape[p[i]];
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "y must be x's shape permuted: [%zu x %zu x %zu x %zu] (first %d)", w[0],
                           w[1], w[2], w[3], x->ndim);
    }
    if (oclml__overlap(x, y)) return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "y overlaps x");
    perm_view v;
    perm_canonical(x, p, &v);
    if (v.n <= 1) return oclml_copy(ctx, x, y);
    cl_ulong xo = oclml__elem_offset(x), yo = oclml__elem_offset(y);
    cl_ulong xs[4], ys[4]; /* x's strides of x's merged axes; y's strides of y's axes */
    xs[v.n - 1] = ys[v.n - 1] = 1;
    for (int g = v.n - 2; g >= 0; g--) {
        xs[g] = xs[g + 1] * v.size[g + 1];
        ys[g] = ys[g + 1] * v.size[v.perm[g + 1]];
    }
    cl_kernel k;
    if (v.perm[v.n - 1] == v.n - 1) {
        /* The innermost axis stays: rows of it move whole. y's outer axes, padded to 3. */
        cl_ulong d[3] = {1, 1, 1}, s[3] = {0, 0, 0}, cols = v.size[v.n - 1], rows = 1;
        for (int i = 0; i < v.n - 1; i++) {
            d[3 - (v.n - 1) + i] = v.size[v.perm[i]];
            s[3 - (v.n - 1) + i] = xs[v.perm[i]];
            rows *= v.size[v.perm[i]];
        }
        unsigned vec = cols % 4 == 0 && xo % 4 == 0 && yo % 4 == 0 ? 4 : 1;
        st = ly_kernel(ctx, "oclml_layout_rows", vec, &k);
        if (st) return st;
        size_t global[2], local[2];
        grid_2d(ctx, cols / vec, rows, global, local);
        oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo),   OCLML_ARG(y->mem), OCLML_ARG(yo),
                             OCLML_ARG(rows),   OCLML_ARG(cols), OCLML_ARG(d[1]),   OCLML_ARG(d[2]),
                             OCLML_ARG(s[0]),   OCLML_ARG(s[1]), OCLML_ARG(s[2])};
        return oclml__launch(ctx, k, args, 11, 2, global, local, NULL);
    }
    /* Tiled: j = x's innermost axis, i = the x axis that is y's innermost; the rest batch. */
    int ai = v.perm[v.n - 1], aj = v.n - 1, qj = 0;
    for (int q = 0; q < v.n; q++)
        if (v.perm[q] == aj) qj = q;
    cl_ulong ni = v.size[ai], nj = v.size[aj], xs_i = xs[ai], ys_j = ys[qj];
    cl_ulong nb = 1, nb1 = 1, bx[2] = {0, 0}, by[2] = {0, 0};
    int nbatch = 0;
    size_t bsize[2] = {1, 1};
    for (int q = 0; q < v.n; q++) {
        int g = v.perm[q];
        if (g == ai || g == aj) continue;
        bx[nbatch] = xs[g];
        by[nbatch] = ys[q];
        bsize[nbatch] = v.size[g];
        nbatch++;
    }
    nb = bsize[0] * bsize[1];
    nb1 = bsize[1];
    tile_plan tp;
    plan_tile(ctx, ni, nj, &tp);
    st = ly_kernel(ctx, "oclml_layout_tile", 1, &k);
    if (st) return st;
    size_t ntiles =
        ((ni + ((size_t)1 << tp.li) - 1) >> tp.li) * ((nj + ((size_t)1 << tp.lj) - 1) >> tp.lj);
    size_t local[2] = {tp.wg, 1};
    size_t global[2] = {(ntiles < 65535 ? ntiles : 65535) * tp.wg, nb < 65535 ? nb : 65535};
    cl_uint li = tp.li, lj = tp.lj;
    size_t tile_bytes = ((size_t)1 << li) * (((size_t)1 << lj) + 1) * sizeof(float);
    oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo),          OCLML_ARG(y->mem),
                         OCLML_ARG(yo),     OCLML_ARG(ni),          OCLML_ARG(nj),
                         OCLML_ARG(xs_i),   OCLML_ARG(ys_j),        OCLML_ARG(nb),
                         OCLML_ARG(nb1),    OCLML_ARG(bx[0]),       OCLML_ARG(bx[1]),
                         OCLML_ARG(by[0]),  OCLML_ARG(by[1]),       OCLML_ARG(li),
                         OCLML_ARG(lj),     OCLML_LOCAL(tile_bytes)};
    return oclml__launch(ctx, k, args, 17, 2, global, local, NULL);
}

oclml_status oclml_transpose_axes(oclml_ctx *ctx, const oclml_tensor *x, int dim0, int dim1,
                                  oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor(ctx, x, "x");
    int a = 0, b = 0;
    if (!st) st = norm_axis(ctx, dim0, x->ndim, "dim0", &a);
    if (!st) st = norm_axis(ctx, dim1, x->ndim, "dim1", &b);
    if (st) return st;
    int perm[OCLML_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return oclml_permute(ctx, x, perm, y);
}

/* ---- concat and split ---- */
/* Checks the parts against the whole: same rank, same shape but along axis, where the sizes add
 * up; none overlaps the whole (nor, for split, another part). */
static oclml_status check_parts(oclml_ctx *ctx, const oclml_tensor *whole, const char *wname,
                                const oclml_tensor *const *parts, int n, int axis, bool split,
                                int *a) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor_of(ctx, whole, wname, OCLML__DTYPES_ALL);
    if (st) return st;
    if (!parts) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "the list of parts is NULL");
    if (n < 1) return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "n must be >= 1, not %d", n);
    st = norm_axis(ctx, axis, whole->ndim, "axis", a);
    if (st) return st;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        char name[24];
        snprintf(name, sizeof name, "part %d", i);
        st = oclml__check_tensor_of(ctx, parts[i], name, OCLML__DTYPES_ALL);
        if (st) return st;
        if (parts[i]->dtype != whole->dtype)
            return oclml__fail(ctx, OCLML_ERR_DTYPE,
                               "part %d is %s and %s %s: concat and split move elements of one "
                               "dtype",
                               i, oclml_dtype_name(parts[i]->dtype), wname,
                               oclml_dtype_name(whole->dtype));
        bool ok = parts[i]->ndim == whole->ndim;
        for (int d = 0; ok && d < whole->ndim; d++)
            ok = d == *a || parts[i]->shape[d] == whole->shape[d];
        if (!ok)
            return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                               "part %d must have %s's shape but along axis %d", i, wname, *a);
        total += parts[i]->shape[*a];
        if (oclml__overlap(parts[i], whole))
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "part %d overlaps %s", i, wname);
        for (int j = 0; split && j < i; j++)
            if (oclml__overlap(parts[i], parts[j]))
                return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "parts %d and %d overlap", j,
                                   i);
    }
    if (total != whole->shape[*a])
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "the parts' sizes along axis %d add up to %zu, %s has %zu", *a, total,
                           wname, whole->shape[*a]);
    return OCLML_SUCCESS;
}

static oclml_status move_parts(oclml_ctx *ctx, const oclml_tensor *whole,
                               const oclml_tensor *const *parts, int n, int a, bool split) {
    size_t outer = 1, inner = 1;
    for (int d = 0; d < a; d++) outer *= whole->shape[d];
    for (int d = a + 1; d < whole->ndim; d++) inner *= whole->shape[d];
    cl_ulong rows = outer, C = whole->shape[a] * inner, wo = oclml__elem_offset(whole);
    cl_kernel k;
    const char *name = split ? "oclml_layout_split" : "oclml_layout_concat";
    oclml_status st = ly_kernel_of(ctx, name, 1, whole->dtype != OCLML_FLOAT32, &k);
    if (st) return st;
    cl_ulong start = 0;
    for (int g = 0; g < n && !st; g += MAX_PARTS) {
        int m = n - g < MAX_PARTS ? n - g : MAX_PARTS;
        cl_mem mem[MAX_PARTS];
        cl_ulong off[MAX_PARTS], s[MAX_PARTS];
        for (int i = 0; i < MAX_PARTS; i++) {
            const oclml_tensor *t = i < m ? parts[g + i] : NULL;
            mem[i] = t ? t->mem : NULL;
            off[i] = t ? oclml__elem_offset(t) : 0;
            s[i] = start;
            if (t) start += t->shape[a] * inner;
        }
        cl_ulong end = start;
        cl_uint um = (cl_uint)m;
        oclml__arg args[6 + 3 * MAX_PARTS] = {OCLML_ARG(whole->mem), OCLML_ARG(wo), OCLML_ARG(rows),
                                              OCLML_ARG(C),          OCLML_ARG(um), OCLML_ARG(end)};
        for (int i = 0; i < MAX_PARTS; i++) {
            args[6 + 3 * i] = OCLML_ARG(mem[i]);
            args[7 + 3 * i] = OCLML_ARG(off[i]);
            args[8 + 3 * i] = OCLML_ARG(s[i]);
        }
        size_t global[2], local[2];
        grid_2d(ctx, end - s[0], rows, global, local);
        st = oclml__launch(ctx, k, args, 6 + 3 * MAX_PARTS, 2, global, local, NULL);
    }
    return st;
}

oclml_status oclml_concat(oclml_ctx *ctx, const oclml_tensor *const *xs, int n, int axis,
                          oclml_tensor *y) {
    int a = 0;
    oclml_status st = check_parts(ctx, y, "y", xs, n, axis, false, &a);
    return st ? st : move_parts(ctx, y, xs, n, a, false);
}

oclml_status oclml_split(oclml_ctx *ctx, const oclml_tensor *x, int axis, oclml_tensor *const *ys,
                         int n) {
    int a = 0;
    oclml_status st = check_parts(ctx, x, "x", (const oclml_tensor *const *)ys, n, axis, true, &a);
    return st ? st : move_parts(ctx, x, (const oclml_tensor *const *)ys, n, a, true);
}

void oclml__layout_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    static const char *const tile[] = {"oclml_layout_tile", NULL};
    const char *one = !strcmp(op, "add_bias") ? "oclml_layout_bias"
                      : !strcmp(op, "concat") ? "oclml_layout_concat"
                      : !strcmp(op, "split")  ? "oclml_layout_split"
                                              : "oclml_layout_rows";
    for (unsigned vec = 1; vec <= 4; vec += 3) {
        bool vectored = strcmp(one, "oclml_layout_concat") && strcmp(one, "oclml_layout_split");
        if (vec == 4 && !vectored) break;
        char defines[32], variant[64];
        snprintf(defines, sizeof defines, "-DLY_VEC=%u", vec);
        snprintf(variant, sizeof variant, "%s vec%u", one + 13, vec);
        oclml__warm_add(list, op, variant, (oclml__program_spec){FILE_CL, defines, one, 0});
    }
    if (!strcmp(one, "oclml_layout_concat") || !strcmp(one, "oclml_layout_split")) {
        char variant[64];
        snprintf(variant, sizeof variant, "%s 16-bit", one + 13);
        oclml__warm_add(list, op, variant,
                        (oclml__program_spec){FILE_CL, "-DLY_VEC=1" LY_16BIT, one, 0});
    }
    if (!strcmp(op, "permute") || !strcmp(op, "transpose_axes"))
        oclml__warm_add(list, op, "tile", (oclml__program_spec){FILE_CL, "-DLY_VEC=1", tile[0], 0});
    (void)ctx;
}
