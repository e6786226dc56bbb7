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
    bool vec_a, vec_b;
} gemv_plan;

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* float4 reads of an operand: its rows aligned, as cl/ops/gemv.cl casts them. */
static bool vec_ok(const oclml__matrix *x) {
    return x->ld % 4 == 0 && x->offset % 4 == 0 && x->stride % 4 == 0;
}

static bool fits_32_bits(const oclml__gemm_desc *d) {
    const size_t most = 0xffffffffu;
    return d->n <= most && d->k <= most && d->a.ld <= most && d->b.ld <= most && d->c.ld <= most &&
           d->pre.ld <= most;
}

bool oclml__gemv_takes(oclml_ctx *ctx, const oclml__gemm_desc *d) {
    return d->m >= 1 && d->m <= GEMV_MAX_ROWS && d->n > 0 && !d->gather_b &&
           !(d->a_lower && d->a_band < (long)d->k - 1) && !oclml__gemm_is_lp(d) &&
           fits_32_bits(d) && oclml__tune(ctx, OCLML__TUNE_GEMM_GEMV, 0) != 0;
}

static unsigned pow2_floor(size_t v) {
    unsigned p = 1;
    while ((size_t)p * 2 <= v) p *= 2;
    return p;
}

/* Work-groups of up to 256 work-items. With B's rows contiguous (TRANS_B 0), the widest slice
 * of columns (up to 16 work-items of four) that still gives every compute unit two groups: wide
 * slices read long runs of a row, narrow ones fill the device. With B's columns contiguous,
 * 32 work-items share a column (128 floats of it a step), fewer where K is short. No wider than
 * the columns there are, no deeper than K. */
static void make_plan(oclml_ctx *ctx, const oclml__gemm_desc *d, gemv_plan *p) {
    const size_t wg = ctx->caps.max_work_group_size;
    p->threads = pow2_floor(wg < 256 ? wg : 256);
    if (d->trans_b) {
        p->k_slices = p->threads < 32 ? p->threads : 32;
        while (p->k_slices > 1 && (size_t)p->k_slices * 2 > d->k) p->k_slices /= 2;
        p->col_quads = p->threads / p->k_slices;
        while (p->col_quads > 1 && p->col_quads / 2 >= d->n) p->col_quads /= 2;
    } else {
        const size_t quads = ceil_div(d->n, 4), want = 2 * (size_t)ctx->caps.compute_units;
        p->col_quads = p->threads < 16 ? p->threads : 16;
        while (p->col_quads > 2 && ceil_div(quads, p->col_quads) * d->batch < want)
            p->col_quads /= 2;
        while (p->col_quads > 1 && p->col_quads / 2 >= quads) p->col_quads /= 2;
        p->k_slices = p->threads / p->col_quads;
        while (p->k_slices > 1 && p->k_slices / 2 >= d->k) p->k_slices /= 2;
    }
    p->threads = p->col_quads * p->k_slices;
    p->vec_b = vec_ok(&d->b);
    p->vec_a = d->trans_b && !d->trans_a && vec_ok(&d->a);
}

typedef struct gemv_program {
    char defines[256];
    oclml__program_spec spec;
} gemv_program;

static void program_of(const gemv_plan *p, const oclml__gemm_desc *d, gemv_program *g) {
    char epi[96];
    oclml__gemm_epilogue_defines(epi, sizeof epi, d);
    snprintf(g->defines, sizeof g->defines,
             "-DROWS=%zu -DTRANS_A=%d -DTRANS_B=%d -DVEC_A=%d -DVEC_B=%d -DCOL_QUADS=%u "
             "-DK_SLICES=%u %s",
             d->m, d->trans_a, d->trans_b, p->vec_a, p->vec_b, p->col_quads, p->k_slices, epi);
    g->spec = (oclml__program_spec){"gemv.cl", g->defines, "oclml_gemv", 0};
}

oclml_status oclml__gemv(oclml_ctx *ctx, const oclml__gemm_desc *d) {
    gemv_plan p;
    make_plan(ctx, d, &p);
    gemv_program g;
    program_of(&p, d, &g);
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &g.spec, "oclml_gemv", &k);
    if (st) return st;
    cl_mem am = d->a.mem, bm = d->b.mem, cm = d->c.mem, bias = d->bias, pm = d->pre.mem;
    cl_ulong a_off = d->a.offset, a_st = d->a.stride, b_off = d->b.offset, b_st = d->b.stride,
             c_off = d->c.offset, c_st = d->c.stride, bias_off = d->bias_offset,
             p_off = d->pre.offset, p_st = d->pre.stride;
    cl_uint lda = (cl_uint)d->a.ld, ldb = (cl_uint)d->b.ld, ldc = (cl_uint)d->c.ld,
            ldp = (cl_uint)d->pre.ld, M = (cl_uint)d->m, N = (cl_uint)d->n, K = (cl_uint)d->k,
            batch = (cl_uint)d->batch;
    float alpha = d->alpha, beta = d->beta;
    oclml__arg args[40] = {
        OCLML_ARG(am),    OCLML_ARG(a_off), OCLML_ARG(lda),  OCLML_ARG(a_st),     OCLML_ARG(bm),
        OCLML_ARG(b_off), OCLML_ARG(ldb),   OCLML_ARG(b_st), OCLML_ARG(cm),       OCLML_ARG(c_off),
        OCLML_ARG(ldc),   OCLML_ARG(c_st),  OCLML_ARG(M),    OCLML_ARG(N),        OCLML_ARG(K),
        OCLML_ARG(alpha), OCLML_ARG(beta),  OCLML_ARG(bias), OCLML_ARG(bias_off), OCLML_ARG(pm),
        OCLML_ARG(p_off), OCLML_ARG(ldp),   OCLML_ARG(p_st), OCLML_ARG(batch)};
    oclml__gemm_drop_values dv;
    const unsigned n = oclml__gemm_drop_args(d, &dv, args, 24);
    const size_t cols = d->trans_b ? d->n : ceil_div(d->n, 4);
    size_t local[2] = {p.threads, 1}, global[2] = {ceil_div(cols, p.col_quads) * p.threads,
                                                   d->batch < GRID_Y_MAX ? d->batch : GRID_Y_MAX};
    return oclml__launch(ctx, k, args, n, 2, global, local, NULL);
}

void oclml__gemv_describe(oclml_ctx *ctx, const oclml__gemm_desc *d, char *text, size_t len) {
    gemv_plan p;
    make_plan(ctx, d, &p);
    snprintf(text, len, "own GEMV (%zu row%s), %u column%s x %u K slices a work-group%s", d->m,
             d->m > 1 ? "s" : "", d->trans_b ? p.col_quads : 4 * p.col_quads,
             d->trans_b && p.col_quads == 1 ? "" : "s", p.k_slices,
             p.vec_b ? ", float4 reads" : "");
}

void oclml__gemv_warm(oclml_ctx *ctx, const char *op, const char *what, const oclml__gemm_desc *d,
                      oclml__warm_list *list) {
    gemv_plan p;
    make_plan(ctx, d, &p);
    gemv_program g;
    program_of(&p, d, &g);
    oclml__warm_add(list, op, what, g.spec);
}
