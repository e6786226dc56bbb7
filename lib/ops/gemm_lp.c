/* Products on 16-bit operands (bf16, fp16): the tensor-core kernel cl/ops/gemm_lp.cl (an operand
 * whose contiguous extent, leading dimension, offset or batch stride is not a multiple of 8 either
 * copied first into scratch with padded rows or staged element by element; K splits into an fp32
 * workspace where the blocks would leave compute units idle), or, on devices without the
 * instruction, the operands converted to fp32 in scratch, the fp32 planner's product, and C
 * converted back. Both accumulate in fp32 over products of the 16-bit values, which are exact in
 * fp32. */
#include "ops/gemm.h"
#include "ops/ops.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

typedef struct lp_plan {
    oclml__mma16_path path; /* NONE: the operands converted to fp32 */
    unsigned bm, bn, warps_m, warps_n, stages;
    unsigned depth;    /* a stage's K depth: 32 or 64 */
    unsigned prefetch; /* the next K step's fragments loaded before this step's products */
    unsigned splits;   /* K splits (1: none), kchunk deep each */
    size_t kchunk;
    bool pad_a, pad_b; /* the operand copied first with rows padded to a multiple of 8 */
} lp_plan;

/* An operand as it lies in memory: rows of cols contiguous elements (op(A) [m x k] is stored
 * [k x m] when transposed, op(B) [k x n] stored [n x k]). */
typedef struct stored_shape {
    size_t rows, cols;
} stored_shape;
static stored_shape a_stored(const oclml__gemm_desc *d) {
    return d->trans_a ? (stored_shape){d->k, d->m} : (stored_shape){d->m, d->k};
}
static stored_shape b_stored(const oclml__gemm_desc *d) {
    return d->trans_b ? (stored_shape){d->n, d->k} : (stored_shape){d->k, d->n};
}

/* An operand the kernel copies 16 bytes at a time: its contiguous extent, ld, offset and stride
 * multiples of 8 elements. Others it stages element by element, or the host pads them first. */
static bool aligned(const oclml__matrix *x, size_t extent) {
    return extent % 8 == 0 && x->ld % 8 == 0 && x->offset % 8 == 0 && x->stride % 8 == 0;
}
static bool a_aligned(const oclml__gemm_desc *d) { return aligned(&d->a, a_stored(d).cols); }
static bool b_aligned(const oclml__gemm_desc *d) { return aligned(&d->b, b_stored(d).cols); }

static bool kernel_takes(const oclml__gemm_desc *d) {
    const size_t most = UINT_MAX - 1024;
    return !d->gather_b && !d->a_lower && !d->bias_per_row && d->pre.ld <= UINT_MAX &&
           d->drop_ld <= UINT_MAX && d->m <= most && d->n <= most && d->k <= most &&
           d->c.ld <= UINT_MAX && d->batch <= 65535 && d->a.ld <= UINT_MAX && d->b.ld <= UINT_MAX;
}

/* The tile where no key forces one. On the tensor cores, with the local memory a kernel's own
 * arrays may take: 128 x 256 blocks in 2 x 4 warps of 64 x 64, three stages of 32 (72 KiB),
 * fragments loaded a step ahead, where they make three waves of the compute units or more (the
 * wider warp tile reads half the local memory a product that 64 x 32 reads); fewer, larger
 * blocks would leave compute units idle in the last wave, so 128 x 128 blocks with stages 64
 * deep (96 KiB) there. Within 48 KiB (and in the emulation, whose programs the suite compiles):
 * 128 x 128 in 2 x 4 warps of 64 x 32, three stages of 32. bench/DECISIONS.md has the sweep. */
static void default_tile(oclml_ctx *ctx, const oclml__gemm_desc *d, bool hw, lp_plan *p) {
    *p = (lp_plan){OCLML__MMA16_NONE, 128, 128, 2, 4, 3, 32, 0, 1, 0, false, false};
    if (!hw || ctx->caps.max_work_group_size < 256) return;
    const size_t local = oclml__caps_static_local(ctx),
                 wide_blocks = oclml__ceil_div(d->m, 128) * oclml__ceil_div(d->n, 256) * d->batch;
    if (wide_blocks >= 3 * (size_t)ctx->caps.compute_units && local >= 72 * 1024)
        *p = (lp_plan){OCLML__MMA16_NONE, 128, 256, 2, 4, 3, 32, 1, 1, 0, false, false};
    else if (local >= 96 * 1024)
        *p = (lp_plan){OCLML__MMA16_NONE, 128, 128, 2, 4, 3, 64, 1, 1, 0, false, false};
}

/* An operand's rows padded to a multiple of 8 elements, and the bytes of its padded copy. */
static size_t padded_ld(stored_shape s) { return (s.cols + 7) / 8 * 8; }
static size_t padded_bytes(const oclml__matrix *x, stored_shape s, size_t batch) {
    return (x->stride ? batch : 1) * s.rows * padded_ld(s) * 2;
}

/* K splits (the tuning key gemm.lp_splits: 0 auto, 1 none, N that many) where C, the bias and
 * pre are fp32 (the splits' sums and the epilogue are gemm.cl's finish): by default where the
 * blocks would leave half the compute units idle or more, as many as make two work-groups a
 * compute unit, each at least 8 stages deep. The weight gradient of a 768 x 768 linear layer
 * over 8192 tokens (36 blocks) is such a product; with half the compute units busy or more,
 * splits that make more than one wave gained little or lost (bench/DECISIONS.md). */
static void choose_splits(oclml_ctx *ctx, const oclml__gemm_desc *d, lp_plan *p) {
    p->splits = 1;
    p->kchunk = d->k;
    const bool fp32_out = d->c_dtype == OCLML_FLOAT32 &&
                          (!d->bias || d->bias_dtype == OCLML_FLOAT32) &&
                          (!d->pre.mem || d->pre_dtype == OCLML_FLOAT32);
    const long forced = oclml__tune(ctx, OCLML__TUNE_GEMM_LP_SPLITS, 0);
    if (!fp32_out || forced == 1 || !d->k) return;
    const size_t blocks = oclml__ceil_div(d->m, p->bm) * oclml__ceil_div(d->n, p->bn) * d->batch,
                 slots = 2 * (size_t)ctx->caps.compute_units;
    size_t want = forced                                  ? (size_t)forced
                  : 2 * blocks >= ctx->caps.compute_units ? 1
                                                          : oclml__ceil_div(slots, blocks);
    const size_t most = forced ? oclml__ceil_div(d->k, p->depth) : d->k / (8 * (size_t)p->depth);
    if (want > most) want = most;
    /* within the grid's 65535 work-groups along dimension 1 and the workspace an op may hold */
    while (want > 1 && (d->batch * want > 65535 ||
                        d->batch * want * d->m * d->n * sizeof(float) > ctx->caps.workspace_bytes))
        want--;
    if (want < 2) return;
    p->kchunk = oclml__ceil_div(oclml__ceil_div(d->k, want), p->depth) * p->depth;
    p->splits = (unsigned)oclml__ceil_div(d->k, p->kchunk);
}

/* The tuning key gemm.lp_mma: -1 auto (the tensor cores where the device has them), 0 the fp32
 * conversion, 1 the tensor cores, 2 the kernel with the instruction emulated (tests). The tile
 * from gemm.lp_tile (block rows, columns, warps along rows, along columns, stages: stages 32
 * deep, no fragments ahead, unless gemm.lp_depth or gemm.lp_prefetch say otherwise), else
 * default_tile's. */
static void make_plan(oclml_ctx *ctx, const oclml__gemm_desc *d, lp_plan *p) {
    const oclml__mma16_path where =
        oclml__mma16_path_of(ctx, oclml__tune(ctx, OCLML__TUNE_GEMM_LP_MMA, 0));
    default_tile(ctx, d, where == OCLML__MMA16_HW, p);
    if (oclml__tune(ctx, OCLML__TUNE_GEMM_LP_TILE, 0)) {
        p->bm = (unsigned)oclml__tune(ctx, OCLML__TUNE_GEMM_LP_TILE, 0);
        p->bn = (unsigned)oclml__tune(ctx, OCLML__TUNE_GEMM_LP_TILE, 1);
        p->warps_m = (unsigned)oclml__tune(ctx, OCLML__TUNE_GEMM_LP_TILE, 2);
        p->warps_n = (unsigned)oclml__tune(ctx, OCLML__TUNE_GEMM_LP_TILE, 3);
        p->stages = (unsigned)oclml__tune(ctx, OCLML__TUNE_GEMM_LP_TILE, 4);
        p->depth = 32, p->prefetch = 0;
    }
    const long depth = oclml__tune(ctx, OCLML__TUNE_GEMM_LP_DEPTH, 0),
               prefetch = oclml__tune(ctx, OCLML__TUNE_GEMM_LP_PREFETCH, 0);
    if (depth) p->depth = (unsigned)depth;
    if (prefetch >= 0) p->prefetch = (unsigned)prefetch;
    /* Multiples of 64: the row-contiguous stages swizzle chunks in groups of eight. */
    const bool tile_ok = p->bm % 64 == 0 && p->bn % 64 == 0 && p->bm && p->bn && p->warps_m &&
                         p->warps_n && p->bm % (16 * p->warps_m) == 0 &&
                         p->bn % (16 * p->warps_n) == 0 && p->stages >= 2 && p->stages <= 8 &&
                         (p->depth == 32 || p->depth == 64) &&
                         32 * p->warps_m * p->warps_n <= ctx->caps.max_work_group_size;
    const size_t local =
        (size_t)p->stages * (p->bm + p->bn) * p->depth * 2 +
        (where == OCLML__MMA16_EMULATED ? (size_t)p->warps_m * p->warps_n * 384 * 4 : 0);
    if (d->ab_dtype == OCLML_FLOAT32 || !tile_ok || local > oclml__caps_static_local(ctx) ||
        !kernel_takes(d))
        return;
    p->path = where;
    if (p->path == OCLML__MMA16_NONE) return;
    choose_splits(ctx, d, p);
    /* Unaligned operands copied padded where each element feeds at least 512 products (the
     * tuning key gemm.lp_pad: -1 auto, 0 never, 1 always) and the copy fits the workspace an op
     * may hold: the copy reads and writes the operand once, while staging element by element
     * loads two bytes a work-item into every stage (bench/DECISIONS.md has the figures). */
    const long pad = oclml__tune(ctx, OCLML__TUNE_GEMM_LP_PAD, 0);
    p->pad_a = pad != 0 && !a_aligned(d) && (pad == 1 || d->n >= 512) &&
               padded_bytes(&d->a, a_stored(d), d->batch) <= ctx->caps.workspace_bytes;
    p->pad_b = pad != 0 && !b_aligned(d) && (pad == 1 || d->m >= 512) &&
               padded_bytes(&d->b, b_stored(d), d->batch) <= ctx->caps.workspace_bytes;
}

typedef struct lp_program {
    char defines[384];
    oclml__program_spec spec;
} lp_program;

static void program_of(const lp_plan *p, const oclml__gemm_desc *d, lp_program *g) {
    const char *act = oclml__act_define(d->act);
    snprintf(g->defines, sizeof g->defines,
             "-DAB_DT=%d -DC_DT=%d -DTRANS_A=%d -DTRANS_B=%d -DBM=%u -DBN=%u -DWARPS_M=%u "
             "-DWARPS_N=%u -DSTAGES=%u -DMMA_EMULATE=%d -DHAS_BIAS=%d -DBIAS_DT=%d -DHAS_PRE=%d "
             "-DPRE_DT=%d -DHAS_DROPOUT=%d -DA_ALIGNED=%d -DB_ALIGNED=%d -DBK=%u -DPREFETCH=%u%s%s",
             (int)d->ab_dtype, (int)d->c_dtype, d->trans_a, d->trans_b, p->bm, p->bn, p->warps_m,
             p->warps_n, p->stages, p->path == OCLML__MMA16_EMULATED, d->bias != NULL,
             (int)d->bias_dtype, d->pre.mem != NULL, (int)d->pre_dtype,
             oclml__dropout_active(d->drop) != NULL, a_aligned(d) || p->pad_a,
             b_aligned(d) || p->pad_b, p->depth, p->prefetch, act ? " " : "", act ? act : "");
    g->spec = (oclml__program_spec){"gemm_lp.cl", g->defines, "oclml_gemm_lp", 255};
}

/* One launch: d's product, or with K splits the partials of d into its (fp32) C. */
static oclml_status launch_kernel(oclml_ctx *ctx, const oclml__gemm_desc *d, const lp_plan *p,
                                  cl_ulong c_split) {
    lp_program g;
    program_of(p, d, &g);
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &g.spec, "oclml_gemm_lp", &k);
    if (st) return st;
    cl_uint M = (cl_uint)d->m, N = (cl_uint)d->n, K = (cl_uint)d->k, lda = (cl_uint)d->a.ld,
            ldb = (cl_uint)d->b.ld, ldc = (cl_uint)d->c.ld;
    cl_ulong a_off = d->a.offset, a_st = d->a.stride, b_off = d->b.offset, b_st = d->b.stride,
             c_off = d->c.offset, c_st = d->c.stride;
    float alpha = d->alpha, beta = d->beta;
    cl_ulong bias_off = d->bias_offset, p_off = d->pre.offset, p_st = d->pre.stride,
             drop_base = d->drop_base;
    cl_uint ldp = (cl_uint)d->pre.ld, drop_ld = (cl_uint)d->drop_ld;
    const oclml__drop_args da = oclml__drop_args_of(oclml__dropout_active(d->drop));
    oclml__arg args[] = {
        OCLML_ARG(M),         OCLML_ARG(N),        OCLML_ARG(K),        OCLML_ARG(alpha),
        OCLML_ARG(beta),      OCLML_ARG(d->a.mem), OCLML_ARG(a_off),    OCLML_ARG(lda),
        OCLML_ARG(a_st),      OCLML_ARG(d->b.mem), OCLML_ARG(b_off),    OCLML_ARG(ldb),
        OCLML_ARG(b_st),      OCLML_ARG(d->c.mem), OCLML_ARG(c_off),    OCLML_ARG(ldc),
        OCLML_ARG(c_st),      OCLML_ARG(d->bias),  OCLML_ARG(bias_off), OCLML_ARG(d->pre.mem),
        OCLML_ARG(p_off),     OCLML_ARG(ldp),      OCLML_ARG(p_st),     OCLML__DROP_ARG_LIST(da),
        OCLML_ARG(drop_base), OCLML_ARG(drop_ld)};
    cl_uint splits = p->splits, kchunk = (cl_uint)p->kchunk;
    oclml__arg all[sizeof args / sizeof args[0] + 3];
    const size_t n = sizeof args / sizeof args[0];
    memcpy(all, args, sizeof args);
    all[n] = OCLML_ARG(splits);
    all[n + 1] = OCLML_ARG(kchunk);
    all[n + 2] = OCLML_ARG(c_split);
    const size_t threads = 32 * p->warps_m * p->warps_n;
    size_t local[2] = {threads, 1};
    size_t global[2] = {oclml__ceil_div(d->m, p->bm) * oclml__ceil_div(d->n, p->bn) * threads,
                        d->batch * p->splits};
    return oclml__launch(ctx, k, all, n + 3, 2, global, local, NULL);
}

/* The product, or its K splits into an fp32 workspace [batch][split][m][n] and then their sum
 * with d's epilogue. */
static oclml_status run_aligned(oclml_ctx *ctx, const oclml__gemm_desc *d, const lp_plan *p) {
    if (p->splits == 1) return launch_kernel(ctx, d, p, 0);
    const size_t slice = d->m * d->n;
    cl_mem ws;
    oclml_status st = oclml__scratch_get(ctx, slice * p->splits * d->batch * sizeof(float), &ws);
    if (st) return st;
    oclml__gemm_desc part = *d;
    part.c = (oclml__matrix){ws, 0, d->n, slice * p->splits};
    part.c_dtype = OCLML_FLOAT32;
    part.alpha = 1.0f, part.beta = 0.0f;
    part.bias = NULL, part.pre.mem = NULL, part.drop = NULL;
    part.act = OCLML_ACT_NONE;
    st = launch_kernel(ctx, &part, p, slice);
    if (!st) st = oclml__gemm_finish(ctx, d, &part.c, slice, p->splits, d->alpha, d->beta);
    oclml__scratch_put(ctx, ws);
    return st;
}

/* Operand x (of shape s as stored) copied into scratch with rows padded to a multiple of 8
 * elements (zeros in the padding, which the kernel's 16-byte copies at the edge read). */
static oclml_status pad_operand(oclml_ctx *ctx, oclml__matrix *x, stored_shape s, size_t batch,
                                cl_mem *scratch) {
    const size_t ld = padded_ld(s), entries = x->stride ? batch : 1;
    oclml_status st = oclml__scratch_get(ctx, padded_bytes(x, s, batch), scratch);
    if (!st)
        st = oclml__pad_rows16(ctx, x->mem, x->offset, x->ld, x->stride, entries, s.rows, s.cols,
                               *scratch, ld);
    *x = (oclml__matrix){*scratch, 0, ld, x->stride ? s.rows * ld : 0};
    return st;
}

static oclml_status run_kernel(oclml_ctx *ctx, const oclml__gemm_desc *d, const lp_plan *p) {
    if (!p->pad_a && !p->pad_b) return run_aligned(ctx, d, p);
    oclml__gemm_desc e = *d;
    cl_mem sa = NULL, sb = NULL;
    oclml_status st = OCLML_SUCCESS;
    if (p->pad_a) st = pad_operand(ctx, &e.a, a_stored(d), d->batch, &sa);
    if (!st && p->pad_b) st = pad_operand(ctx, &e.b, b_stored(d), d->batch, &sb);
    if (!st) st = run_aligned(ctx, &e, p);
    if (sa) oclml__scratch_put(ctx, sa);
    if (sb) oclml__scratch_put(ctx, sb);
    return st;
}

/* Elements a matrix spans in its buffer (its batch entries and the gaps between rows). */
static size_t span_of(const oclml__matrix *x, size_t rows, size_t cols, size_t batch) {
    return (batch - 1) * x->stride + (rows - 1) * x->ld + cols;
}

/* An operand of dtype dt as fp32 in scratch (the same layout from offset 0), or as it is. */
static oclml_status to_fp32(oclml_ctx *ctx, oclml_dtype dt, const oclml__matrix *x, size_t rows,
                            size_t cols, size_t batch, oclml__matrix *out, cl_mem *scratch) {
    *out = *x;
    *scratch = NULL;
    if (dt == OCLML_FLOAT32) return OCLML_SUCCESS;
    const size_t n = span_of(x, rows, cols, batch);
    oclml_status st = oclml__scratch_get(ctx, n * sizeof(float), scratch);
    if (!st) st = oclml__cast_raw(ctx, dt, x->mem, x->offset, OCLML_FLOAT32, *scratch, 0, n);
    out->mem = *scratch;
    out->offset = 0;
    return st;
}

static oclml_status run_converted(oclml_ctx *ctx, const oclml__gemm_desc *d) {
    oclml__gemm_desc f = *d;
    f.ab_dtype = f.c_dtype = f.bias_dtype = f.pre_dtype = OCLML_FLOAT32;
    cl_mem sa = NULL, sb = NULL, sc = NULL, sbias = NULL, spre = NULL;
    const stored_shape a = a_stored(d), b = b_stored(d);
    const size_t a_batch = d->a.stride ? d->batch : 1, b_batch = d->b.stride ? d->batch : 1;
    oclml_status st = to_fp32(ctx, d->ab_dtype, &d->a, a.rows, a.cols, a_batch, &f.a, &sa);
    if (!st) st = to_fp32(ctx, d->ab_dtype, &d->b, b.rows, b.cols, b_batch, &f.b, &sb);
    /* C whole (its old values where beta reads them): converting back then rewrites every
     * element of the span as it was or as the product made it. */
    if (!st) st = to_fp32(ctx, d->c_dtype, &d->c, d->m, d->n, d->batch, &f.c, &sc);
    if (!st && d->bias) {
        const oclml__matrix bias = {d->bias, d->bias_offset, 0, 0};
        oclml__matrix fb;
        st = to_fp32(ctx, d->bias_dtype, &bias, 1, d->bias_per_row ? d->m : d->n, 1, &fb, &sbias);
        f.bias = fb.mem;
        f.bias_offset = fb.offset;
    }
    if (!st && d->pre.mem)
        st = to_fp32(ctx, d->pre_dtype, &d->pre, d->m, d->n, d->batch, &f.pre, &spre);
    if (!st) st = oclml__gemm(ctx, &f);
    if (!st && sc)
        st = oclml__cast_raw(ctx, OCLML_FLOAT32, sc, 0, d->c_dtype, d->c.mem, d->c.offset,
                             span_of(&d->c, d->m, d->n, d->batch));
    if (!st && spre)
        st = oclml__cast_raw(ctx, OCLML_FLOAT32, spre, 0, d->pre_dtype, d->pre.mem, d->pre.offset,
                             span_of(&d->pre, d->m, d->n, d->batch));
    const cl_mem scratch[5] = {sa, sb, sc, sbias, spre};
    for (int i = 0; i < 5; i++)
        if (scratch[i]) oclml__scratch_put(ctx, scratch[i]);
    return st;
}

oclml_status oclml__gemm_lp(oclml_ctx *ctx, const oclml__gemm_desc *d) {
    lp_plan p;
    make_plan(ctx, d, &p);
    return p.path == OCLML__MMA16_NONE ? run_converted(ctx, d) : run_kernel(ctx, d, &p);
}

void oclml__gemm_lp_describe(oclml_ctx *ctx, const oclml__gemm_desc *d, char *text, size_t len) {
    lp_plan p;
    make_plan(ctx, d, &p);
    if (p.path == OCLML__MMA16_NONE) {
        oclml__gemm_desc f = *d;
        f.ab_dtype = f.c_dtype = f.bias_dtype = f.pre_dtype = OCLML_FLOAT32;
        char inner[256];
        oclml__gemm_describe(ctx, &f, inner, sizeof inner);
        snprintf(text, len, "%s operands converted to fp32: %s", oclml_dtype_name(d->ab_dtype),
                 inner);
        return;
    }
    char splits[32] = "", operands[64] = "";
    if (p.splits > 1) snprintf(splits, sizeof splits, ", %u K splits", p.splits);
    /* How each unaligned operand is staged: copied padded first, or element by element. */
    const bool ok[2] = {a_aligned(d), b_aligned(d)}, pad[2] = {p.pad_a, p.pad_b};
    for (int i = 0; i < 2; i++)
        if (!ok[i]) {
            const size_t n = strlen(operands);
            snprintf(operands + n, sizeof operands - n, ", %s %s", i ? "B" : "A",
                     pad[i] ? "copied padded" : "staged by element");
        }
    snprintf(text, len,
             "%s tensor cores%s (m16n8k16), tile %ux%ux%u, %ux%u warps, %u stages%s%s, C %s%s",
             oclml_dtype_name(d->ab_dtype), p.path == OCLML__MMA16_EMULATED ? " emulated" : "",
             p.bm, p.bn, p.depth, p.warps_m, p.warps_n, p.stages,
             p.prefetch ? ", fragments ahead" : "", splits, oclml_dtype_name(d->c_dtype), operands);
}

/* The common 16-bit products: bf16 and fp16 operands, C of their dtype or fp32, PyTorch's
 * layouts (plain, the weight transposed, the input transposed). */
void oclml__gemm_lp_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    for (int dt = OCLML_BFLOAT16; dt <= OCLML_FLOAT16; dt++)
        for (int c = 0; c < 2; c++)
            for (int t = 0; t < 3; t++) {
                oclml__gemm_desc d = oclml__gemm_desc_dense(4096, 4096, 4096);
                d.ab_dtype = (oclml_dtype)dt;
                d.c_dtype = c ? OCLML_FLOAT32 : (oclml_dtype)dt;
                d.trans_a = t == 2;
                d.trans_b = t == 1;
                lp_plan p;
                make_plan(ctx, &d, &p);
                if (p.path == OCLML__MMA16_NONE) continue;
                lp_program g;
                program_of(&p, &d, &g);
                oclml__warm_add(list, op, g.defines, g.spec);
            }
    /* the copy of unaligned operands of large products (the LM head's logits) */
    oclml__warm_add(list, op, "padded rows",
                    (oclml__program_spec){"memory.cl", NULL, "oclml_pad_rows16", 0});
}
