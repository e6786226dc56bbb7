/* Embedding lookup and its deterministic backward (cl/ops/embedding.cl). The table, y, dy and
 * dtable may be of any dtype each (fp32 math, each output rounded once); ids are fp32. */
#include "ops/ops.h"
#include "ops/rows.h"

#include <stdio.h>
#include <string.h>

#define FILE_CL "embedding.cl"

#define BACKWARD_KERNELS                                                                       \
    "oclml_embedding_zero oclml_embedding_count oclml_embedding_scan oclml_embedding_scatter " \
    "oclml_embedding_rank oclml_embedding_sum"

static const oclml__program_spec FWD[2] = {{FILE_CL, "-DEMB_VEC=1", "oclml_embedding_fwd", 0},
                                           {FILE_CL, "-DEMB_VEC=4", "oclml_embedding_fwd", 0}};
static const oclml__program_spec BWD[2] = {{FILE_CL, "-DEMB_VEC=1", BACKWARD_KERNELS, 0},
                                           {FILE_CL, "-DEMB_VEC=4", BACKWARD_KERNELS, 0}};

/* A program of spec (the fp32 one) for the tensors' dtypes: the same program where both are
 * fp32, else its defines with "-D<NAME>_DT=<dtype>" for each. */
typedef struct emb_program {
    char defines[96];
    oclml__program_spec spec;
} emb_program;

static void program_for(emb_program *p, const oclml__program_spec *spec, const char *an,
                        const oclml_tensor *a, const char *bn, const oclml_tensor *b) {
    char dt[64];
    const char *const names[] = {an, bn};
    const oclml_tensor *const ts[] = {a, b};
    oclml__dtype_defines(dt, sizeof dt, 2, names, ts);
    p->spec = *spec;
    if (!dt[0]) return;
    snprintf(p->defines, sizeof p->defines, "%s %s", spec->defines, dt);
    p->spec.defines = p->defines;
}

/* The table [V x D] and the rows tensor (y or dy: N x D elements, last dimension D), of any
 * dtype; ids fp32. */
static oclml_status check_shapes(oclml_ctx *ctx, const oclml_tensor *ids, const oclml_tensor *table,
                                 const char *tn, const oclml_tensor *rows, const char *rn,
                                 size_t *N, size_t *V, size_t *D) {
    oclml_status st = oclml__check_tensor(ctx, ids, "ids");
    if (!st) st = oclml__check_tensor_of(ctx, table, tn, OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_tensor_of(ctx, rows, rn, OCLML__DTYPES_ALL);
    if (st) return st;
    if (table->ndim != 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "%s must be [V x D]", tn);
    *N = ids->numel;
    *V = table->shape[0];
    *D = table->shape[1];
    size_t want;
    if (!oclml__mul_ok(*N, *D, &want) || rows->numel != want || rows->shape[rows->ndim - 1] != *D)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "%s must hold %zu rows of %zu (ids' elements x the table's width)", rn,
                           *N, *D);
    if (*N >= 0xFFFFFFFFu || *V >= 0xFFFFFFFFu || *D >= 0xFFFFFFFFu || *V > (1u << 24))
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "embedding sizes past the kernels' 32-bit indices, or a vocabulary "
                           "over 2^24 (ids travel as floats)");
    return OCLML_SUCCESS;
}

static bool vec4(size_t D, const oclml_tensor *a, const oclml_tensor *b) {
    return D % 4 == 0 && oclml__elem_offset(a) % 4 == 0 && oclml__elem_offset(b) % 4 == 0;
}

oclml_status oclml_embedding(oclml_ctx *ctx, const oclml_tensor *ids, const oclml_tensor *table,
                             oclml_tensor *y) {
    oclml_status st = oclml__check_ctx(ctx);
    size_t N, V, D;
    if (!st) st = check_shapes(ctx, ids, table, "table", y, "y", &N, &V, &D);
    if (!st && (oclml__overlap(y, table) || oclml__overlap(y, ids)))
        st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "y overlaps ids or the table");
    if (st) return st;
    const bool v4 = vec4(D, table, y);
    emb_program prog;
    program_for(&prog, &FWD[v4], "TABLE", table, "Y", y);
    cl_kernel k;
    st = oclml__kernel(ctx, &prog.spec, "oclml_embedding_fwd", &k);
    if (st) return st;
    cl_ulong io = oclml__elem_offset(ids), to = oclml__elem_offset(table),
             yo = oclml__elem_offset(y);
    cl_uint uN = (cl_uint)N, uV = (cl_uint)V, uD = (cl_uint)D;
    oclml__arg args[] = {OCLML_ARG(ids->mem), OCLML_ARG(io),     OCLML_ARG(table->mem),
                         OCLML_ARG(to),       OCLML_ARG(y->mem), OCLML_ARG(yo),
                         OCLML_ARG(uN),       OCLML_ARG(uV),     OCLML_ARG(uD)};
    size_t global, local;
    oclml__grid_1d(ctx, N * (D / (v4 ? 4 : 1)), &global, &local);
    return oclml__launch(ctx, k, args, 9, 1, &global, &local, NULL);
}

/* Scratch of the backward: counts and offsets (V + 1 each), slot, tmp and sorted (N each). */
enum { S_COUNTS, S_OFFSETS, S_SLOT, S_TMP, S_SORTED, S_N };

static oclml_status backward_launches(oclml_ctx *ctx, const oclml__program_spec *spec,
                                      const oclml_tensor *ids, const oclml_tensor *dy,
                                      oclml_tensor *dtable, cl_mem *s, size_t N, size_t V, size_t D,
                                      bool v4, int accumulate) {
    cl_kernel kz, kc, ks, kx, kr, ku;
    oclml_status st = oclml__kernel(ctx, spec, "oclml_embedding_zero", &kz);
    if (!st) st = oclml__kernel(ctx, spec, "oclml_embedding_count", &kc);
    if (!st) st = oclml__kernel(ctx, spec, "oclml_embedding_scan", &ks);
    if (!st) st = oclml__kernel(ctx, spec, "oclml_embedding_scatter", &kx);
    if (!st) st = oclml__kernel(ctx, spec, "oclml_embedding_rank", &kr);
    if (!st) st = oclml__kernel(ctx, spec, "oclml_embedding_sum", &ku);
    if (st) return st;
    cl_ulong io = oclml__elem_offset(ids), dyo = oclml__elem_offset(dy),
             dto = oclml__elem_offset(dtable);
    cl_uint uN = (cl_uint)N, uV = (cl_uint)V, uD = (cl_uint)D, uV1 = uV + 1, acc = accumulate != 0;
    size_t global, local;
    oclml__grid_1d(ctx, V + 1, &global, &local);
    oclml__arg az[] = {OCLML_ARG(s[S_COUNTS]), OCLML_ARG(uV1)};
    st = oclml__launch(ctx, kz, az, 2, 1, &global, &local, NULL);
    oclml__grid_1d(ctx, N, &global, &local);
    oclml__arg ac[] = {OCLML_ARG(ids->mem), OCLML_ARG(io),          OCLML_ARG(uN),
                       OCLML_ARG(uV),       OCLML_ARG(s[S_COUNTS]), OCLML_ARG(s[S_SLOT])};
    if (!st) st = oclml__launch(ctx, kc, ac, 6, 1, &global, &local, NULL);
    /* The scan: one work-group of a power of two up to 256 (a width every device's kernels
     * take; each work-item sums a run of counts, so width matters little). */
    size_t wg = 1;
    while (wg * 2 <= ctx->caps.max_work_group_size && wg < 256) wg *= 2;
    oclml__arg as[] = {OCLML_ARG(s[S_COUNTS]), OCLML_ARG(s[S_OFFSETS]), OCLML_ARG(uV),
                       OCLML_LOCAL(wg * sizeof(cl_uint))};
    if (!st) st = oclml__launch(ctx, ks, as, 4, 1, &wg, &wg, NULL);
    oclml__arg ax[] = {OCLML_ARG(ids->mem), OCLML_ARG(io),        OCLML_ARG(uN),
                       OCLML_ARG(uV),       OCLML_ARG(s[S_SLOT]), OCLML_ARG(s[S_OFFSETS]),
                       OCLML_ARG(s[S_TMP])};
    if (!st) st = oclml__launch(ctx, kx, ax, 7, 1, &global, &local, NULL);
    oclml__arg ar[] = {OCLML_ARG(ids->mem),   OCLML_ARG(io),           OCLML_ARG(uN),
                       OCLML_ARG(uV),         OCLML_ARG(s[S_OFFSETS]), OCLML_ARG(s[S_TMP]),
                       OCLML_ARG(s[S_SORTED])};
    if (!st) st = oclml__launch(ctx, kr, ar, 7, 1, &global, &local, NULL);
    /* The sum: a work-item a column vector of a row. */
    size_t cols = D / (v4 ? 4 : 1), lx = cols < 64 ? cols : 64;
    if (lx > ctx->caps.max_work_group_size) lx = ctx->caps.max_work_group_size;
    size_t g2[2] = {(cols + lx - 1) / lx * lx, V}, l2[2] = {lx, 1};
    oclml__arg au[] = {OCLML_ARG(dy->mem), OCLML_ARG(dyo),         OCLML_ARG(dtable->mem),
                       OCLML_ARG(dto),     OCLML_ARG(s[S_SORTED]), OCLML_ARG(s[S_OFFSETS]),
                       OCLML_ARG(uV),      OCLML_ARG(uD),          OCLML_ARG(acc)};
    if (!st) st = oclml__launch(ctx, ku, au, 9, 2, g2, l2, NULL);
    return st;
}

oclml_status oclml_embedding_backward(oclml_ctx *ctx, const oclml_tensor *ids,
                                      const oclml_tensor *dy, oclml_tensor *dtable,
                                      int accumulate) {
    oclml_status st = oclml__check_ctx(ctx);
    size_t N, V, D;
    if (!st) st = check_shapes(ctx, ids, dtable, "dtable", dy, "dy", &N, &V, &D);
    if (!st && (oclml__overlap(dtable, dy) || oclml__overlap(dtable, ids)))
        st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "dtable overlaps ids or dy");
    if (st) return st;
    const bool v4 = vec4(D, dtable, dy);
    const size_t bytes[S_N] = {(V + 1) * 4, (V + 1) * 4, (N ? N : 1) * 4, (N ? N : 1) * 4,
                               (N ? N : 1) * 4};
    cl_mem s[S_N] = {NULL};
    for (int i = 0; i < S_N && !st; i++) st = oclml__scratch_get(ctx, bytes[i], &s[i]);
    emb_program prog;
    program_for(&prog, &BWD[v4], "DY", dy, "DTABLE", dtable);
    if (!st) st = backward_launches(ctx, &prog.spec, ids, dy, dtable, s, N, V, D, v4, accumulate);
    for (int i = 0; i < S_N; i++)
        if (s[i]) oclml__scratch_put(ctx, s[i]);
    return st;
}

/* ---- the op list's planner: both vector widths ---- */
void oclml__embedding_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    (void)ctx;
    const bool backward = strstr(op, "backward") != NULL;
    for (int v = 0; v < 2; v++)
        oclml__warm_add(list, op, v ? "float4 rows" : "float rows", backward ? BWD[v] : FWD[v]);
}
