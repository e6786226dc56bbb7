/* Products of 1 to 4 rows (GEMV: a decoding step's linear layers, a batch of one) on
 * cl/ops/gemv.cl: bound by reading B once, where the tiled kernels pad the rows to a tile and
 * split K over two launches to fill the device. The planner (gemm_plan.c) asks
 * oclml__gemv_takes first; gemm.gemv = 0 turns the path off. */
#include "ops/gemm.h"
#include "ops/ops.h"

#include <stdio.h>

/* The most rows of op(A) the kernel holds (ROWS, one accumulator set each). */
#define GEMV_MAX_ROWS 4u
/* Grid dimension 1 holds at most this many groups on some devices (CUDA's limit). */
#define GRID_Y_MAX 65535u

typedef struct gemv_plan {
    unsigned threads, col_quads, k_slices;
    unsigned splits; /* K splits over work-groups, summed by oclml__gemm_finish (1: none) */
    size_t kchunk;   /* rows of K a split */
    bool vec_a, vec_b;
} gemv_plan;

/* float4 reads of an operand: its rows aligned, as cl/ops/gemv.cl casts them. */
static bool vec_ok(const oclml__matrix *x) {
    return x->ld % 4 == 0 && x->offset % 4 == 0 && x->stride % 4 == 0;
}

static bool fits_32_bits(const oclml__gemm_desc *d) {
    const size_t most = 0xffffffffu;
    return d->n <= most && d->k <= most && d->a.ld <= most && d->b.ld <= most && d->c.ld <= most &&
           d->pre.ld <= most;
}

/* gemm.gemv -1 (auto): up to 4 rows, but up to 2 where the 3xTF32 tensor-core tile would take
 * the product: its 16-row tile reads B as fast as this kernel does 3 or 4 rows (H200: 4 x 4096 x
 * 4096 0.033 ms on the tile, 0.049 here; bench/DECISIONS.md, "GEMV"); 1: up to 4 rows. An own
 * kernel: gemm.own = 0 (CLBlast only) leaves it out. */
bool oclml__gemv_takes(oclml_ctx *ctx, const oclml__gemm_desc *d) {
    const long mode = oclml__tune(ctx, OCLML__TUNE_GEMM_GEMV, 0);
    if (mode == 0 || oclml__tune(ctx, OCLML__TUNE_GEMM_OWN, 0) == 0 || d->m < 1 ||
        d->m > GEMV_MAX_ROWS || d->n == 0 || d->gather_b || oclml__gemm_banded(d) ||
        oclml__gemm_is_lp(d) || !fits_32_bits(d))
        return false;
    const bool tensor_cores =
        oclml__tune(ctx, OCLML__TUNE_GEMM_MMA, 0) != 0 && ctx->caps.is_gpu && oclml__caps_mma(ctx);
    return mode == 1 || d->m <= 2 || !tensor_cores;
}

/* Work-groups of up to 256 work-items. With B's columns contiguous (TRANS_B 1), 32 work-items
 * on a column (128 floats of it a step), 8 columns a group. With B's rows contiguous (TRANS_B
 * 0), 8 work-items of four columns side by side (runs of 128 bytes of a row), narrowed to 2
 * where that leaves fewer than two groups a compute unit. No wider than the columns there
 * are, no deeper than K. Where K is long (GEMV_LONG_K) and the groups still leave compute units
 * idle, K is split over work-groups (at least 8 rows, with TRANS_B 1 32, a work-item a split),
 * the partials summed by a second launch, which costs about what a short product does
 * (bench/DECISIONS.md, "GEMV"). gemm.gemv_tile forces the three numbers. */
#define GEMV_LONG_K 8192u
#define GEMV_CPU_COLUMNS 16u /* work-items a group on CPUs, a column (or four) each */
static void make_plan(oclml_ctx *ctx, const oclml__gemm_desc *d, gemv_plan *p) {
    const size_t wg = ctx->caps.max_work_group_size;
    p->threads = (unsigned)oclml__pow2_floor(wg < 256 ? wg : 256);
    const long cq = oclml__tune(ctx, OCLML__TUNE_GEMM_GEMV_TILE, 0),
               ks = oclml__tune(ctx, OCLML__TUNE_GEMM_GEMV_TILE, 1),
               sp = oclml__tune(ctx, OCLML__TUNE_GEMM_GEMV_TILE, 2);
    const size_t cols = d->trans_b ? d->n : oclml__ceil_div(d->n, 4),
                 want = 2 * (size_t)ctx->caps.compute_units;
    const bool long_k = d->k >= GEMV_LONG_K, cpu = oclml__cpu_layout(ctx);
    if (cpu) {
        /* CPUs: no K slices (no barrier rounds: their compilers loop over the work-items
         * between barriers) and the same group at every shape, so that a CPU builds one
         * program per operand layout and epilogue rather than one per small extent. */
        p->k_slices = 1;
        p->col_quads = p->threads < GEMV_CPU_COLUMNS ? p->threads : GEMV_CPU_COLUMNS;
    } else if (d->trans_b) {
        p->k_slices = p->threads < 32 ? p->threads : 32;
        p->col_quads = p->threads / p->k_slices;
    } else {
        p->col_quads = p->threads < 8 ? p->threads : 8;
        while (!long_k && p->col_quads > 2 && oclml__ceil_div(cols, p->col_quads) * d->batch < want)
            p->col_quads /= 2;
        p->k_slices = p->threads / p->col_quads;
    }
    if (cq > 0 && ks > 0 && (size_t)(cq * ks) <= wg &&
        oclml__pow2_floor((size_t)cq) == (size_t)cq &&
        oclml__pow2_floor((size_t)ks) == (size_t)ks) {
        p->col_quads = (unsigned)cq;
        p->k_slices = (unsigned)ks;
    }
    const size_t step = d->trans_b ? 4 : 1; /* K elements a work-item takes at a time */
    if (!cpu) {                             /* GPUs: no idle work-items on short extents */
        while (p->col_quads > 1 && p->col_quads / 2 >= cols) p->col_quads /= 2;
        while (p->k_slices > 1 && (p->k_slices / 2) * step >= d->k) p->k_slices /= 2;
    }
    p->threads = p->col_quads * p->k_slices;

    const size_t groups = oclml__ceil_div(cols, p->col_quads) * d->batch,
                 most = d->k / ((size_t)p->k_slices * (d->trans_b ? 32 : 8));
    size_t splits =
        !long_k || groups >= ctx->caps.compute_units ? 1 : oclml__ceil_div(want, groups);
    if (splits > most) splits = most;
    if (splits > 64) splits = 64;
    if (sp > 0) splits = (size_t)sp;
    if (splits < 1 || d->batch * splits > GRID_Y_MAX) splits = 1;
    p->kchunk = oclml__ceil_div(oclml__ceil_div(d->k, splits), 4) * 4;
    p->splits = (unsigned)oclml__ceil_div(d->k, p->kchunk);
    p->vec_b = vec_ok(&d->b);
    p->vec_a = d->trans_b && !d->trans_a && vec_ok(&d->a);
}

typedef struct gemv_program {
    char defines[256];
    oclml__program_spec spec;
} gemv_program;

static void program_of(const gemv_plan *p, const oclml__gemm_desc *d, gemv_program *g) {
    char epi[96] = "-DHAS_BIAS=0 -DHAS_PRE=0"; /* split partials: the finishing kernel's */
    if (p->splits == 1) oclml__gemm_epilogue_defines(epi, sizeof epi, d);
    snprintf(g->defines, sizeof g->defines,
             "-DROWS=%zu -DTRANS_A=%d -DTRANS_B=%d -DVEC_A=%d -DVEC_B=%d -DCOL_QUADS=%u "
             "-DK_SLICES=%u %s",
             d->m, d->trans_a, d->trans_b, p->vec_a, p->vec_b, p->col_quads, p->k_slices, epi);
    g->spec = (oclml__program_spec){"gemv.cl", g->defines, "oclml_gemv", 0};
}

/* One launch writing c: d's C with the epilogue (one split), or the split partials. */
static oclml_status launch(oclml_ctx *ctx, const oclml__gemm_desc *d, const gemv_plan *p,
                           const oclml__matrix *c) {
    gemv_program g;
    program_of(p, d, &g);
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &g.spec, "oclml_gemv", &k);
    if (st) return st;
    const bool split = p->splits > 1;
    const cl_uint batch = (cl_uint)d->batch, splits = p->splits, kchunk = (cl_uint)p->kchunk;
    oclml__arg args[40];
    oclml__gemm_arg_values ov;
    unsigned n = oclml__gemm_operand_args(d, c, split, &ov, args);
    args[n++] = OCLML_ARG(batch);
    args[n++] = OCLML_ARG(splits);
    args[n++] = OCLML_ARG(kchunk);
    oclml__gemm_drop_values dv;
    if (!split) n = oclml__gemm_drop_args(d, &dv, args, n);
    const size_t cols = d->trans_b ? d->n : oclml__ceil_div(d->n, 4), parts = d->batch * p->splits;
    size_t local[2] = {p->threads, 1},
           global[2] = {oclml__ceil_div(cols, p->col_quads) * p->threads,
                        parts < GRID_Y_MAX ? parts : GRID_Y_MAX};
    return oclml__launch(ctx, k, args, n, 2, global, local, NULL);
}

static oclml_status gemv_partials(oclml_ctx *ctx, const oclml__gemm_desc *d, const void *plan,
                                  const oclml__matrix *w) {
    return launch(ctx, d, plan, w);
}

oclml_status oclml__gemv(oclml_ctx *ctx, const oclml__gemm_desc *d) {
    gemv_plan p;
    make_plan(ctx, d, &p);
    if (p.splits == 1) return launch(ctx, d, &p, &d->c);
    return oclml__gemm_in_splits(ctx, d, p.splits, gemv_partials, &p);
}

void oclml__gemv_describe(oclml_ctx *ctx, const oclml__gemm_desc *d, char *text, size_t len) {
    gemv_plan p;
    make_plan(ctx, d, &p);
    snprintf(text, len,
             "own GEMV (%zu row%s), %u column%s x %u K slices a work-group%s, %u K split%s%s", d->m,
             d->m > 1 ? "s" : "", d->trans_b ? p.col_quads : 4 * p.col_quads,
             d->trans_b && p.col_quads == 1 ? "" : "s", p.k_slices, p.vec_b ? ", float4 reads" : "",
             p.splits, p.splits > 1 ? "s" : "", p.splits > 1 ? " + sum kernel" : "");
}

void oclml__gemv_warm(oclml_ctx *ctx, const char *op, const char *what, const oclml__gemm_desc *d,
                      oclml__warm_list *list) {
    gemv_plan p;
    make_plan(ctx, d, &p);
    gemv_program g;
    program_of(&p, d, &g);
    oclml__warm_add(list, op, what, g.spec);
    if (p.splits > 1) oclml__gemm_finish_warm(op, d, list);
}
