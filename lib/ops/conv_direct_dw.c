/* The weight gradient of convolutions with few columns (Cg R S: input channels of a group times
 * taps), computed directly (cl/ops/conv_direct_dw.cl): work-groups own a tile of dW and a range
 * of output positions, gather their columns from x into local memory, and write partial sums
 * that a second kernel adds in order (deterministic, no atomics). An image model's first layer
 * (3 channels, 5x5 taps: 75 columns, 32 output channels) leaves the GEMM paths a 32 x 75 product
 * over a million positions, which their tiles cover mostly with padding after unfolding 300 MB of
 * columns.
 * Where: the tuning key conv.direct_dw (1 wherever it applies: every shape; 0 never); by default
 * (-1) where the products run on tensor cores and a group has at most MAX_COLUMNS columns and at
 * least MIN_ROWS output channels: against the GEMM paths' best on the H100, an image model's
 * first layer (75 columns) runs 2.3x faster and a 1x1 from 64 channels 1.4x, where 147 columns
 * tie and 576 or more lose 1.1-1.3x (bench/DECISIONS.md, "Direct weight gradient"). */
#include "ops/conv.h"
#include "ops/ops.h"

#include <stdio.h>

#define MAX_COLUMNS 96
/* Output channels a group has at least: fewer leave tiles of a few work-items each holding a
 * long prefetch (depthwise convolutions: untimed, so they keep the GEMM paths). */
#define MIN_ROWS 32

/* Tiles: rows (output channels) and columns of dW a work-group owns, positions a chunk. */
#define MOST_TILE_ROWS 32
#define MOST_TILE_COLUMNS 128
#define MOST_ITEMS 256
#define CHUNK_POSITIONS 64
/* Work-groups to aim for per compute unit (ranges times tiles). */
#define GROUPS_PER_UNIT 4

typedef struct direct_plan {
    unsigned tk, tc, tp;             /* tile rows, columns (multiples of 4), chunk positions */
    size_t k_tiles, c_tiles, ranges; /* grid: ranges x (groups k_tiles c_tiles) */
    size_t span;                     /* positions a range */
} direct_plan;

static size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

static bool local_fits(const oclml_ctx *ctx, unsigned tk, unsigned tc, unsigned tp) {
    const size_t tables = (tc + tp) * 4 * sizeof(cl_uint);
    return (size_t)tp * (tk + tc) * sizeof(float) + tables <= ctx->caps.local_mem_bytes;
}

/* The tile within the device's work-group and local memory limits; false where none fits. */
static bool plan_of(oclml_ctx *ctx, const conv_shape *s, direct_plan *p) {
    const size_t kg = s->K / s->groups, crs = cg_rs(s);
    size_t items =
        ctx->caps.max_work_group_size < MOST_ITEMS ? ctx->caps.max_work_group_size : MOST_ITEMS;
    if (items < 1) return false;
    size_t tk = round_up(kg, 4) < MOST_TILE_ROWS ? round_up(kg, 4) : MOST_TILE_ROWS;
    if (tk / 4 > items) tk = 4 * items;
    size_t tc = round_up(crs, 4), most_tc = 4 * (items / (tk / 4));
    if (most_tc > MOST_TILE_COLUMNS) most_tc = MOST_TILE_COLUMNS;
    if (tc > most_tc) tc = most_tc;
    const long forced_tp = oclml__tune(ctx, OCLML__TUNE_CONV_DIRECT_DW_GRID, 0),
               forced_groups = oclml__tune(ctx, OCLML__TUNE_CONV_DIRECT_DW_GRID, 1);
    /* Chunks of 64 positions, 32 for tiles wider than 64 columns: on the H100 the 76-column tile
     * of 3 channels of 5x5 taps runs 1.7x faster with 32, the 64-column tile of a 1x1 from 64
     * channels 1.1x faster with 64 (bench/DECISIONS.md, "Direct weight gradient"). */
    unsigned tp = forced_tp == 32 || forced_tp == 64 || forced_tp == 128 ? (unsigned)forced_tp
                  : tc > 64                                              ? 32
                                                                         : CHUNK_POSITIONS;
    while (tp > 32 && !local_fits(ctx, (unsigned)tk, (unsigned)tc, tp)) tp /= 2;
    if (!local_fits(ctx, (unsigned)tk, (unsigned)tc, tp)) return false;
    p->tk = (unsigned)tk;
    p->tc = (unsigned)tc;
    p->tp = tp;
    p->k_tiles = (kg + tk - 1) / tk;
    p->c_tiles = (crs + tc - 1) / tc;
    const size_t positions = s->N * s->P * s->Q, tiles = s->groups * p->k_tiles * p->c_tiles;
    const size_t per_unit = forced_groups > 0 ? (size_t)forced_groups : GROUPS_PER_UNIT;
    size_t want = (per_unit * (size_t)ctx->caps.compute_units + tiles - 1) / tiles;
    if (want < 1) want = 1;
    p->span = round_up((positions + want - 1) / want, tp);
    p->ranges = (positions + p->span - 1) / p->span;
    /* Tiles along grid dimension 1 (65535 at most on some devices); dW's entries in 32 bits. */
    return tiles <= 65535 && s->K * crs <= UINT32_MAX;
}

static oclml__program_spec program_of(const direct_plan *p, char *defines, size_t len) {
    snprintf(defines, len, "-DTK=%u -DTC=%u -DTP=%u", p->tk, p->tc, p->tp);
    return (oclml__program_spec){"conv_direct_dw.cl", defines,
                                 "oclml_conv_dw_partial oclml_conv_dw_sum", 0};
}

void oclml__conv_direct_dw_warm(oclml_ctx *ctx, const conv_shape *s, const char *op,
                                oclml__warm_list *list) {
    direct_plan p;
    char defines[64];
    if (plan_of(ctx, s, &p))
        oclml__warm_add(list, op, "direct weight gradient",
                        program_of(&p, defines, sizeof defines));
}

bool oclml__conv_weight_gradient_direct_applies(oclml_ctx *ctx, const conv_shape *s) {
    direct_plan p;
    if (!plan_of(ctx, s, &p)) return false;
    long forced = oclml__tune(ctx, OCLML__TUNE_CONV_DIRECT_DW, 0);
    if (forced >= 0) return forced > 0;
    return cg_rs(s) <= MAX_COLUMNS && s->K / s->groups >= MIN_ROWS &&
           oclml__tune(ctx, OCLML__TUNE_GEMM_OWN, 0) != 0 && oclml__gemm_gather_fast(ctx);
}

oclml_status oclml__conv_weight_gradient_direct(oclml_ctx *ctx, const conv_shape *s,
                                                const oclml_tensor *x, const oclml_tensor *dy,
                                                oclml_tensor *dw, int accumulate) {
    direct_plan p;
    if (!plan_of(ctx, s, &p))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "no direct weight-gradient tile fits this device");
    char defines[64];
    const oclml__program_spec spec = program_of(&p, defines, sizeof defines);
    const size_t n = s->K * cg_rs(s);
    cl_mem part = NULL;
    cl_kernel kp, ks;
    oclml_status st = oclml__kernel(ctx, &spec, "oclml_conv_dw_partial", &kp);
    if (!st) st = oclml__kernel(ctx, &spec, "oclml_conv_dw_sum", &ks);
    if (!st) st = oclml__scratch_get(ctx, p.ranges * n * sizeof(float), &part);
    if (st) return st;
    GEOM(s);
    cl_mem xm = x->mem, ym = dy->mem, wm = dw->mem;
    cl_ulong x_off = oclml__elem_offset(x), y_off = oclml__elem_offset(dy),
             w_off = oclml__elem_offset(dw), positions = s->N * s->P * s->Q, span = p.span;
    cl_uint K = (cl_uint)s->K, Kg = (cl_uint)(s->K / s->groups), Cg = (cl_uint)(s->C / s->groups),
            k_tiles = (cl_uint)p.k_tiles, c_tiles = (cl_uint)p.c_tiles, ranges = (cl_uint)p.ranges,
            un = (cl_uint)n, acc = accumulate != 0;
    oclml__arg args[] = {
        OCLML_ARG(xm),      OCLML_ARG(x_off),   OCLML_ARG(ym),        OCLML_ARG(y_off),
        GEOM_ARGS,          OCLML_ARG(K),       OCLML_ARG(Kg),        OCLML_ARG(Cg),
        OCLML_ARG(k_tiles), OCLML_ARG(c_tiles), OCLML_ARG(positions), OCLML_ARG(span),
        OCLML_ARG(part)};
    const size_t items = (size_t)(p.tk / 4) * (p.tc / 4);
    const size_t global[2] = {p.ranges * items, s->groups * p.k_tiles * p.c_tiles},
                 local[2] = {items, 1};
    st = oclml__launch(ctx, kp, args, sizeof args / sizeof args[0], 2, global, local, NULL);
    /* The sum: work-groups of outputs x lanes over the ranges (8 lanes where the device allows). */
    const size_t most = ctx->caps.max_work_group_size;
    const size_t lanes = most >= 8 ? 8 : most, outs = most >= 256 ? 32 : most / lanes;
    const size_t sum_global[2] = {round_up(n, outs), lanes}, sum_local[2] = {outs, lanes};
    oclml__arg sum_args[] = {OCLML_ARG(part),
                             OCLML_ARG(ranges),
                             OCLML_ARG(un),
                             OCLML_ARG(wm),
                             OCLML_ARG(w_off),
                             OCLML_ARG(acc),
                             OCLML_LOCAL(outs * lanes * sizeof(float))};
    if (!st) st = oclml__launch(ctx, ks, sum_args, 7, 2, sum_global, sum_local, NULL);
    oclml__scratch_put(ctx, part);
    return st;
}

void oclml__conv_describe_direct_dw(oclml_ctx *ctx, const conv_shape *s, char *text, size_t len) {
    direct_plan p;
    if (!plan_of(ctx, s, &p)) {
        snprintf(text, len, "direct (no tile fits)");
        return;
    }
    snprintf(text, len,
             "direct (%ux%u tiles, %zu position ranges in chunks of %u, summed in order)", p.tk,
             p.tc, p.ranges, p.tp);
}
