/* The GEMM planner: per shape and device, CLBlast or one of liboclml's tiled kernels
 * (cl/ops/gemm.cl), its tile, and how many K splits; then the launch of what it picked.
 *
 * The tuning table decides first (gemm.own, gemm.mma, gemm.mma_tile, gemm.fma_tile,
 * gemm.splitk); left on auto, the own kernels run where the device has TF32 tensor cores (3xTF32
 * beats any fp32 SGEMM there) or where CLBlast cannot run (work-groups below its 8 x 8), and
 * CLBlast, tuned by oclml-tune, runs everywhere else. */
#include "ops/gemm.h"
#include "ops/ops.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

typedef enum { PATH_CLBLAST, PATH_MMA, PATH_FMA } gemm_path;

typedef struct gemm_plan {
    gemm_path path;
    unsigned bm, bn, bk, wm, wn; /* PATH_MMA: block tile and warps */
    unsigned tx, ty, rm, rn;     /* PATH_FMA: work-items and each one's outputs */
    unsigned threads;
    unsigned stages;      /* PATH_MMA: asynchronous copy stages (0: staging registers) */
    unsigned tile_stages; /* the stages the tile's table entry asks for */
    int mma_mode;         /* 1 3xTF32, 2 TF32 */
    bool emulate; /* PATH_MMA with the instruction in portable code (gemm.mma = 2, for tests) */
    unsigned splits;
    size_t kchunk;
    /* The last wave split over K (choose_tail): the trailing tail_blocks of the swizzled block
     * order, rows from tail_r0 and columns from tail_c0, run as their own product of
     * tail_splits K splits; 0 blocks: none. */
    size_t tail_blocks, tail_r0, tail_c0;
    unsigned tail_splits;
} gemm_plan;

/* CLBlast's smallest default work-groups are 8 x 8 (copy and GEMM kernels). */
#define CLBLAST_MIN_WORK_GROUP 64
/* Grid dimensions 1 and 2 hold at most this many groups on some devices (CUDA's limit). */
#define GRID_YZ_MAX 65535u
/* The tiled kernels' block-order swizzle: groups of this many block rows (GROUP_M). */
#define SWIZZLE_ROWS 8u

static bool clblast_can_run(const oclml_ctx *ctx) {
    return ctx->caps.max_work_group_size >= CLBLAST_MIN_WORK_GROUP;
}

/* Whether someone tuned CLBlast's Xgemm parameters for this device (oclml-tune, a shipped file,
 * the tuning option): any of its integers set. */
static bool clblast_tuned(const oclml_ctx *ctx) {
    for (unsigned i = 0; i < OCLML__TUNE_MAX_INTS; i++) /* unset integers read 0 */
        if (oclml__tune(ctx, OCLML__TUNE_CLBLAST_XGEMM, i)) return true;
    return false;
}

/* Where the planner picks CLBlast by itself: on GPUs, and on CPUs only with parameters tuned for
 * them (oclml-tune). With its own parameters CLBlast's programs take PoCL 7-13 s to compile on a
 * first call, the FMA tiles' 1.4 s, which run at two thirds of CLBlast's speed there
 * (bench/DECISIONS.md, GEMM: CLBlast). */
static bool clblast_by_default(const oclml_ctx *ctx) {
    return ctx->caps.is_gpu || clblast_tuned(ctx);
}

static bool mma_available(oclml_ctx *ctx) {
    return oclml__tune(ctx, OCLML__TUNE_GEMM_MMA, 0) != 0 && ctx->caps.is_gpu &&
           oclml__caps_mma(ctx);
}

/* gemm.mma = 2 on a device without tensor cores: the tensor-core kernel with the instruction
 * emulated, so that its layout and 3xTF32 accuracy are tested everywhere. */
static bool mma_emulated(oclml_ctx *ctx) {
    return oclml__tune(ctx, OCLML__TUNE_GEMM_MMA, 0) == 2 && !mma_available(ctx);
}

bool oclml__gemm_gather_fast(oclml_ctx *ctx) { return mma_available(ctx) || mma_emulated(ctx); }

/* The own kernels index each matrix with 32-bit rows, leading dimensions and sizes. */
static bool fits_own_kernels(const oclml__gemm_desc *d) {
    const size_t most = UINT_MAX - 1024; /* block indices round up by a tile */
    return d->m <= most && d->n <= most && d->k <= most && d->a.ld <= UINT_MAX &&
           d->b.ld <= UINT_MAX && d->c.ld <= UINT_MAX && d->pre.ld <= UINT_MAX &&
           d->batch <= GRID_YZ_MAX;
}

static size_t local_bytes(const gemm_plan *p, bool trans_a, bool trans_b) {
    size_t xchg = p->emulate ? p->wm * p->wn * (16 * 8 + 8 * 8) : 0; /* MMA_XCHG_FLOATS */
    if (p->stages) /* unpadded, swizzled buffers */
        return (p->stages * (size_t)(p->bm + p->bn) * p->bk + xchg) * sizeof(float);
    /* LDK and LDR of cl/ops/gemm.cl */
    size_t ldk = p->bk % 16 == 0 ? p->bk + 8 : p->bk + 16;
    size_t a = !trans_a ? p->bm * ldk : p->bk * (p->bm + 4);
    size_t b = trans_b ? p->bn * ldk : p->bk * (p->bn + 4);
    return (2 * (a + b) + xchg) * sizeof(float);
}

/* Tiles the kernels are written for: warps of whole 16 x 8 blocks, K tiles of whole 8-deep
 * steps, and tiles whose staging splits into float4s. */
static bool tile_valid(const gemm_plan *p) {
    if (!p->bm || !p->bn || !p->bk || p->bk % 8 || p->bm % 4 || p->bn % 4 || p->threads == 0)
        return false;
    if (p->path == PATH_MMA)
        return p->wm && p->wn && p->bm % (16 * p->wm) == 0 && p->bn % (8 * p->wn) == 0;
    return true;
}

static bool tile_fits(const oclml_ctx *ctx, const gemm_plan *p, const oclml__gemm_desc *d) {
    return tile_valid(p) && p->threads <= ctx->caps.max_work_group_size &&
           local_bytes(p, d->trans_a, d->trans_b) <= ctx->caps.local_mem_bytes &&
           oclml__ceil_div(d->m, p->bm) <= GRID_YZ_MAX;
}

/* Tensor-core tiles, largest first: block rows, columns, K depth, warps along rows and columns;
 * then the cap on the blocks a compute unit may get (0: any number), and the tile's asynchronous
 * copy stages where the operands allow them (0: staging registers). 128 x 128 suits products of
 * up to 2 blocks a compute unit (the tile sweep, tools/dev/gemm_sweep.sh); from 8 blocks a unit
 * on (K below LONG_K) 64 x 128 with 4 copy stages beats 128 x 64 with stages, other warp
 * arrangements, 96 x 128 and 64 x 256 by about 10% on the H100, where other swizzle groups and
 * register caps gain nothing (bench/DECISIONS.md, "64 x 128 blocks"). 128 x 64 stays for
 * products whose columns a 128-wide tile would pad. choose_stages applies stages to
 * untransposed operands only. */
static const unsigned MMA_TILES[][7] = {
    {128, 128, 16, 2, 4, 4, 0}, {64, 128, 16, 2, 2, 0, 4}, {128, 64, 16, 2, 2, 0, 4},
    {64, 64, 32, 2, 2, 0, 0},   {32, 64, 32, 1, 2, 0, 0},  {16, 64, 32, 1, 4, 0, 0},
};
#define N_MMA_TILES (sizeof MMA_TILES / sizeof MMA_TILES[0])
#define BATCHED_TILE 3 /* 64 x 64 x 32: where batched products start (choose_mma_tile) */

/* t: a row of MMA_TILES (or a forced tile, without stages). */
static void set_mma_tile(gemm_plan *p, const unsigned t[7]) {
    p->bm = t[0];
    p->bn = t[1];
    p->bk = t[2];
    p->wm = t[3];
    p->wn = t[4];
    p->threads = 32 * p->wm * p->wn;
    p->stages = 0;
    p->tile_stages = t[6];
}

/* Whether 64-column tiles would pad fewer of the product's columns than this tile (64 of them,
 * a convolution's 8x8 planes, one product an image: the 128-column tile computes half padding). */
static bool pads_columns(const gemm_plan *p, const oclml__gemm_desc *d) {
    return oclml__ceil_div(d->n, p->bn) * p->bn > oclml__ceil_div(d->n, 64) * 64;
}

/* The fewest K tiles a split of K takes (choose_splits). */
#define SPLIT_MIN_TILES 8

static size_t blocks_of(const gemm_plan *p, const oclml__gemm_desc *d) {
    return oclml__ceil_div(d->m, p->bm) * oclml__ceil_div(d->n, p->bn) * d->batch;
}

static void choose_stages(oclml_ctx *ctx, const oclml__gemm_desc *d, gemm_plan *p);

/* Whether row t of MMA_TILES runs this product with copy stages (choose_stages). */
static bool takes_stages(oclml_ctx *ctx, const oclml__gemm_desc *d, const gemm_plan *p,
                         unsigned t) {
    gemm_plan q = *p;
    set_mma_tile(&q, MMA_TILES[t]);
    choose_stages(ctx, d, &q);
    return q.stages > 0;
}

/* The depth from which the 128 x 128 tile, staged through registers, runs products of any size
 * (choose_mma_tile): neither giving way to copy stages nor capped at 4 blocks a compute unit.
 * There it is steadier and 1-2.5% faster than 64 x 128 with 4 stages on the H100, which at K
 * 4096 it ties or loses to by 1-5% (bench/DECISIONS.md, "From depth 8192"). */
#define LONG_K 8192

/* Whether row t, staged through registers, gives way to row t + 1 (choose_mma_tile): the next
 * tile of its width, which runs this product with copy stages, K at most 4 N and below LONG_K. */
static bool gives_way_to_stages(oclml_ctx *ctx, const oclml__gemm_desc *d, const gemm_plan *p,
                                unsigned t) {
    return !MMA_TILES[t][6] && t + 1 < N_MMA_TILES && MMA_TILES[t + 1][1] == MMA_TILES[t][1] &&
           MMA_TILES[t + 1][6] && d->k <= 4 * d->n && d->k < LONG_K &&
           takes_stages(ctx, d, p, t + 1);
}

/* The largest tile no taller than the rows need that still gives every compute unit a block
 * and no more blocks than its cap (the smallest where none does). A tile staged through
 * registers gives way to the next of its width where that one runs the product with copy
 * stages and K is at most 4 N: the staged tile runs square and batched products 1-12% faster,
 * but loses on deep, narrow ones such as attention's dQ = dS K (K 8-32 N), hence the bound
 * (bench/DECISIONS.md, "64 x 128 with 4 stages in place of 128 x 128"). */
static void choose_mma_tile(oclml_ctx *ctx, const oclml__gemm_desc *d, gemm_plan *p) {
    long forced[5];
    for (unsigned i = 0; i < 5; i++) forced[i] = oclml__tune(ctx, OCLML__TUNE_GEMM_MMA_TILE, i);
    if (forced[0]) {
        const unsigned t[7] = {(unsigned)forced[0], (unsigned)forced[1], (unsigned)forced[2],
                               (unsigned)forced[3], (unsigned)forced[4]};
        set_mma_tile(p, t);
        return;
    }
    /* No taller tile than the rows need: a 128-row tile over 64 rows would spend half its
     * products on padding (convolutions with 64 output channels over many images). */
    const unsigned first = d->m <= 16   ? N_MMA_TILES - 1
                           : d->m <= 32 ? N_MMA_TILES - 2
                           : d->m <= 64 ? N_MMA_TILES - 3
                                        : 0;
    /* A single product of up to 64 rows with a long K: the tile that covers the rows, and K
     * splits (choose_splits) for the compute units, rather than shorter tiles that would each
     * read all of B again (64 rows on 16-row tiles read it four times). */
    if (d->m <= 64 && d->batch == 1) {
        set_mma_tile(p, MMA_TILES[first]);
        size_t most_splits = d->k / (SPLIT_MIN_TILES * (size_t)p->bk);
        if (tile_fits(ctx, p, d) && blocks_of(p, d) * most_splits >= ctx->caps.compute_units)
            return;
    }
    /* A long K on fewer blocks than compute units (a convolution's weight gradient, K over
     * images and positions; batched: Winograd's 16 products over the tiles): the largest tile,
     * with K splits for the compute units, rather than smaller tiles that would each read the
     * operands again: 1.2-1.9x faster for weight gradients of 128 and 256 output channels on
     * the H100 than the split-less 64 x 64 or 16 x 64 tiles the loop below picks
     * (bench/DECISIONS.md, "Planner rules for convolution products"). */
    const bool long_k = d->k >= 4 * (d->m > d->n ? d->m : d->n);
    /* Batched products of depth up to 128 take the 64 x 64 x 32 tile (two K tiles instead of
     * four of 16), and batched long-K ones start their search there (more blocks, fewer K
     * splits); deeper batched products keep the search below from the largest tile. Winograd's
     * weight gradients run 1.05-1.2x faster so than on 128-row tiles, its products of depth 64
     * to 128 1.03-1.04x, depth 256 alike; the per-image products of 1x1 convolutions and
     * implicit GEMMs as fast or faster (bench/DECISIONS.md, "Batched products start"). */
    const unsigned batched_first = d->batch > 1 && first < BATCHED_TILE ? BATCHED_TILE : first;
    if (d->batch > 1 && !long_k && d->k <= 128) {
        set_mma_tile(p, MMA_TILES[batched_first]);
        if (tile_fits(ctx, p, d) && !pads_columns(p, d)) return;
    }
    if (long_k) {
        for (unsigned i = batched_first; i < N_MMA_TILES; i++) {
            set_mma_tile(p, MMA_TILES[i]);
            if (!tile_fits(ctx, p, d) || pads_columns(p, d)) continue;
            const size_t blocks = blocks_of(p, d), most_splits = d->k / (SPLIT_MIN_TILES * p->bk);
            if (blocks < ctx->caps.compute_units && blocks * most_splits >= ctx->caps.compute_units)
                return;
            break; /* the largest tile that fits gives every unit a block: the table decides */
        }
    }
    for (unsigned i = first; i < N_MMA_TILES; i++) {
        set_mma_tile(p, MMA_TILES[i]);
        if (pads_columns(p, d)) continue; /* no wider tile than the columns need either */
        if (gives_way_to_stages(ctx, d, p, i)) continue;
        size_t blocks = blocks_of(p, d), units = ctx->caps.compute_units;
        unsigned cap = d->k >= LONG_K ? 0 : MMA_TILES[i][5];
        if (tile_fits(ctx, p, d) && blocks >= units && (!cap || blocks <= cap * units)) return;
    }
    for (unsigned i = N_MMA_TILES; i-- > first;) {
        set_mma_tile(p, MMA_TILES[i]);
        if (tile_fits(ctx, p, d)) return;
    }
}

/* FMA tiles: 8 x 8 work-items of 4 x 4 outputs where the device takes 64, else 4 x 4 or 2 x 2.
 * forced: take gemm.fma_tile's values (not when falling back from a tile that failed). */
static void choose_fma_tile(oclml_ctx *ctx, gemm_plan *p, bool forced_ok) {
    long forced[5];
    for (unsigned i = 0; i < 5; i++)
        forced[i] = forced_ok ? oclml__tune(ctx, OCLML__TUNE_GEMM_FMA_TILE, i) : 0;
    unsigned side = ctx->caps.max_work_group_size >= 64   ? 8
                    : ctx->caps.max_work_group_size >= 16 ? 4
                                                          : 2;
    p->ty = forced[0] ? (unsigned)forced[0] : side;
    p->tx = forced[1] ? (unsigned)forced[1] : side;
    p->rm = forced[2] ? (unsigned)forced[2] : 4;
    p->rn = forced[3] ? (unsigned)forced[3] : 4;
    p->bk = forced[4] ? (unsigned)forced[4] : 16;
    p->bm = p->ty * p->rm;
    p->bn = p->tx * p->rn;
    p->threads = p->tx * p->ty;
}

/* Splits K where the blocks would leave compute units idle: up to four blocks per unit, each
 * split at least SPLIT_MIN_TILES K tiles long. */
static void choose_splits(oclml_ctx *ctx, const oclml__gemm_desc *d, gemm_plan *p) {
    long forced = oclml__tune(ctx, OCLML__TUNE_GEMM_SPLITK, 0);
    size_t blocks = blocks_of(p, d), want = 1;
    if (forced > 0)
        want = (size_t)forced;
    else if (blocks < ctx->caps.compute_units)
        while (want < 64 && blocks * want * 2 <= 4 * (size_t)ctx->caps.compute_units &&
               d->k / (want * 2) >= SPLIT_MIN_TILES * (size_t)p->bk)
            want *= 2;
    if (want > GRID_YZ_MAX / d->batch) want = GRID_YZ_MAX / d->batch;
    p->kchunk = oclml__ceil_div(oclml__ceil_div(d->k, want), p->bk) * p->bk;
    p->splits = (unsigned)(d->k ? oclml__ceil_div(d->k, p->kchunk) : 1);
    if (p->splits == 0) p->splits = 1;
}

/* The last wave. Blocks run in waves of as many as the compute units hold at once, and a wave
 * that is partly filled takes as long as a full one (on the H100 products of 7.5, 7.8 and 8.0
 * waves run equally long: bench/DECISIONS.md, "A partly filled last wave"). So where the
 * device's table says how many warps of this kernel a compute unit runs at once
 * (gemm.wave_warps), the blocks that would make the last wave are left out of the main launch
 * and run after it as a product of their own, split over K so that its partial blocks fill the
 * compute units; the K-split sum finishes them.
 * Those blocks are the last of the swizzled order: the last group of block rows, its last
 * columns (a rectangle). In K tiles of a block, split s costs ceil(blocks s / slots) rounds of
 * K / s tiles and TAIL_ROUND_TILES more (the pipeline's fill and the partials' store), and the
 * sum 3 tiles per slots-worth of partials (a read of each) and TAIL_LAUNCH_TILES for the two
 * launches; the split is taken where it saves TAIL_MIN_GAIN of a wave. The constants fit the
 * H100: with them the model splits the products that ran faster split (8192^3, 4096 x 3968 x
 * 4096, 4096^3) and not 8192 x 4096 x 1024, which ran slower split (bench/DECISIONS.md, "The last
 * wave split over K"). */
#define TAIL_ROUND_TILES 6.0
#define TAIL_LAUNCH_TILES 8.0
#define TAIL_MIN_GAIN 0.02
static void choose_tail(oclml_ctx *ctx, const oclml__gemm_desc *d, gemm_plan *p) {
    p->tail_blocks = 0;
    /* A banded A's blocks run in reverse row order (gemm.cl): the swizzle's last blocks are not
     * the bottom rows' rectangle this takes. */
    if (p->path != PATH_MMA || p->splits > 1 || d->batch > 1 || d->gather_b ||
        oclml__gemm_banded(d))
        return;
    const long warps = oclml__tune(ctx, OCLML__TUNE_GEMM_WAVE_WARPS, 0);
    if (warps <= 0) return;
    const size_t slots = (size_t)warps / (p->wm * p->wn) * ctx->caps.compute_units;
    const size_t gx = oclml__ceil_div(d->n, p->bn), gy = oclml__ceil_div(d->m, p->bm),
                 total = gx * gy;
    if (!slots || total <= slots || total % slots == 0) return;
    const size_t first_row = (gy - 1) / SWIZZLE_ROWS * SWIZZLE_ROWS, rows = gy - first_row;
    const size_t cols = oclml__ceil_div(total % slots, rows);
    if (cols > gx) return; /* the last wave reaches into the group before: no rectangle */
    const size_t blocks = rows * cols, ktiles = oclml__ceil_div(d->k, p->bk);
    /* The rounding up to whole columns may take every block (a single column of blocks, fewer
     * slots than its rows): nothing would be left for the main launch. */
    if (blocks >= total) return;
    p->tail_r0 = first_row * p->bm;
    p->tail_c0 = (gx - cols) * p->bn;
    const long forced = oclml__tune(ctx, OCLML__TUNE_GEMM_TAIL_SPLITS, 0);
    if (forced > 0) { /* tests: every partial last wave, so split */
        if ((size_t)forced > ktiles) return;
        p->tail_splits = (unsigned)forced;
        p->tail_blocks = blocks;
        return;
    }
    /* Waves the tail may take: what it saves against running with the rest. */
    double best = (double)oclml__ceil_div(total, slots) -
                  (double)oclml__ceil_div(total - blocks, slots) - TAIL_MIN_GAIN;
    for (size_t s = 2; s <= ktiles / SPLIT_MIN_TILES && s <= 64; s++) {
        const double kt = (double)ktiles,
                     rounds = (double)oclml__ceil_div(blocks * s, slots) *
                              (kt / (double)s + TAIL_ROUND_TILES),
                     sum = 3.0 * (double)(blocks * s) / (double)slots + TAIL_LAUNCH_TILES;
        const double waves = (rounds + sum) / kt;
        if (waves < best) {
            best = waves;
            p->tail_splits = (unsigned)s;
            p->tail_blocks = blocks;
        }
    }
}

/* float4 loads of an operand: its contiguous extent (K, or its rows when transposed for A and
 * not for B), leading dimension, offset and batch stride all multiples of 4. */
static bool vec_ok(const oclml__matrix *x, size_t extent) {
    return extent % 4 == 0 && x->ld % 4 == 0 && x->offset % 4 == 0 && x->stride % 4 == 0;
}

static bool vec_a(const oclml__gemm_desc *d) {
    bool segmented = d->gather_b && d->gather_b->segment;
    return !segmented && vec_ok(&d->a, d->trans_a ? d->m : d->k);
}

static bool vec_b(const oclml__gemm_desc *d) {
    return !d->gather_b && vec_ok(&d->b, d->trans_b ? d->k : d->n);
}

/* The tensor-core tile's pipeline: gemm.stages, else the stages its table entry gives
 * (MMA_TILES; 0 for a forced tile), where the device has the copies (its tensor cores, or the
 * emulation when forced) and the operands and tile suit them (cl/ops/gemm.cl: float4-aligned
 * operands, K depth 8, 16 or 32, [k][row] tiles of whole 32 rows), fewer where the local memory
 * takes fewer; else 0 (staging registers). */
static void choose_stages(oclml_ctx *ctx, const oclml__gemm_desc *d, gemm_plan *p) {
    long forced = oclml__tune(ctx, OCLML__TUNE_GEMM_STAGES, 0);
    /* The table's stages only for untransposed operands: transposed ones (a linear layer's
     * x W^T) run 7-17% slower with them on the H100 (bench/DECISIONS.md, "Asynchronous copy
     * stages"). */
    unsigned want = forced >= 0                              ? (unsigned)forced
                    : p->emulate || d->trans_a || d->trans_b ? 0
                                                             : p->tile_stages;
    bool rows_ok = (!d->trans_a || p->bm % 32 == 0) && (d->trans_b || p->bn % 32 == 0);
    p->stages = 0;
    if (want < 2 || p->path != PATH_MMA || d->gather_b || !vec_a(d) || !vec_b(d) ||
        (p->bk != 8 && p->bk != 16 && p->bk != 32) || !rows_ok)
        return;
    for (unsigned s = want; s >= 2; s--) {
        p->stages = s;
        if (local_bytes(p, d->trans_a, d->trans_b) <= ctx->caps.local_mem_bytes) return;
    }
    p->stages = 0;
}

static void make_plan(oclml_ctx *ctx, const oclml__gemm_desc *d, gemm_plan *p) {
    *p = (gemm_plan){.path = PATH_CLBLAST, .splits = 1};
    long own = oclml__tune(ctx, OCLML__TUNE_GEMM_OWN, 0);
    /* A gathered operand exists only for the own kernels. */
    bool clblast_ok = clblast_can_run(ctx) && !d->gather_b;
    if (!fits_own_kernels(d) || (own == 0 && clblast_ok)) return;
    bool emulate = mma_emulated(ctx), mma = emulate || mma_available(ctx);
    if (own < 0 && !mma && clblast_ok && clblast_by_default(ctx)) return;
    if (mma) {
        p->path = PATH_MMA;
        p->emulate = emulate;
        p->mma_mode = ctx->math_mode == OCLML_MATH_TF32 ? 2 : 1;
        choose_mma_tile(ctx, d, p);
        /* Then the fit with the stages it gets: unpadded stage buffers can fit where the padded
         * staging-register layout does not (a forced 64 x 128 x 32 tile: 48 KiB in 2 stages,
         * 53 KiB padded). */
        choose_stages(ctx, d, p);
    } else {
        p->path = PATH_FMA;
        choose_fma_tile(ctx, p, true);
    }
    if (!tile_fits(ctx, p, d)) {
        /* A forced tile the device cannot take, or a huge M: CLBlast if it can, else the
         * smallest FMA tile. */
        if (clblast_ok) {
            p->path = PATH_CLBLAST;
            return;
        }
        p->path = PATH_FMA;
        p->emulate = false;
        p->stages = 0;
        choose_fma_tile(ctx, p, false);
    }
    choose_splits(ctx, d, p);
    choose_tail(ctx, d, p);
}

static bool has_dropout(const oclml__gemm_desc *d) { return oclml__dropout_active(d->drop); }

static bool has_epilogue(const oclml__gemm_desc *d) {
    return d->bias || d->pre.mem || d->act != OCLML_ACT_NONE || has_dropout(d);
}

int oclml__gemm_epilogue_defines(char *out, size_t len, const oclml__gemm_desc *d) {
    const char *act = oclml__act_define(d->act);
    /* Dropout's column pairs share a draw where the masked indices of even columns are even. */
    const int drop = !has_dropout(d) ? 0 : d->drop_ld % 2 == 0 && d->drop_base % 2 == 0 ? 2 : 1;
    return snprintf(out, len, "-DHAS_BIAS=%d -DHAS_PRE=%d%s%s%s",
                    d->bias ? (d->bias_per_row ? 2 : 1) : 0, d->pre.mem != NULL, act ? " " : "",
                    act ? act : "",
                    drop == 2 ? " -DHAS_DROPOUT=2"
                    : drop    ? " -DHAS_DROPOUT=1"
                              : "");
}

unsigned oclml__gemm_drop_args(const oclml__gemm_desc *d, oclml__gemm_drop_values *v,
                               oclml__arg *args, unsigned n) {
    if (!has_dropout(d)) return n;
    *v = (oclml__gemm_drop_values){oclml__drop_args_of(d->drop), d->drop_base, (cl_uint)d->drop_ld};
    const oclml__arg more[] = {OCLML__DROP_ARG_LIST(v->a), OCLML_ARG(v->base), OCLML_ARG(v->ld)};
    for (unsigned i = 0; i < sizeof more / sizeof more[0]; i++) args[n++] = more[i];
    return n;
}

typedef struct gemm_program {
    char defines[320];
    oclml__program_spec spec;
    const char *kernel;
} gemm_program;

static void program_of(const gemm_plan *p, const oclml__gemm_desc *d, bool split, gemm_program *g) {
    char epi[96] = "-DHAS_BIAS=0 -DHAS_PRE=0";
    if (!split) oclml__gemm_epilogue_defines(epi, sizeof epi, d);
    bool segmented = d->gather_b && d->gather_b->segment, va = vec_a(d), vb = vec_b(d);
    int n = snprintf(g->defines, sizeof g->defines,
                     "-DTRANS_A=%d -DTRANS_B=%d -DVEC_A=%d -DVEC_B=%d -DBK=%u %s -DGATHER_B=%d "
                     "-DA_BANDED=%d",
                     d->trans_a, d->trans_b, va, vb, p->bk, epi,
                     d->gather_b ? (segmented ? 2 : 1) : 0, oclml__gemm_banded(d));
    if (p->path == PATH_MMA) {
        snprintf(g->defines + n, sizeof g->defines - (size_t)n,
                 " -DGEMM_MMA=%d -DBM=%u -DBN=%u -DWM=%u -DWN=%u -DGEMM_STAGES=%u -DGROUP_M=%u%s",
                 p->mma_mode, p->bm, p->bn, p->wm, p->wn, p->stages, SWIZZLE_ROWS,
                 p->emulate ? " -DMMA_EMULATE=1" : "");
        g->kernel = "oclml_gemm_mma";
    } else {
        snprintf(g->defines + n, sizeof g->defines - (size_t)n,
                 " -DGEMM_MMA=0 -DTX=%u -DTY=%u -DRM=%u -DRN=%u -DGROUP_M=%u", p->tx, p->ty, p->rm,
                 p->rn, SWIZZLE_ROWS);
        g->kernel = "oclml_gemm_fma";
    }
    /* Accumulators and staged float4s exceed the default register cap of some compilers; a
     * work-group of up to 256 fits 255 each. */
    g->spec = (oclml__program_spec){"gemm.cl", g->defines, g->kernel, 255};
}

typedef struct finish_program {
    char defines[96];
    oclml__program_spec spec;
} finish_program;

static void finish_program_of(const oclml__gemm_desc *d, finish_program *f) {
    oclml__gemm_epilogue_defines(f->defines, sizeof f->defines, d);
    f->spec = (oclml__program_spec){"gemm.cl", f->defines, "oclml_gemm_finish", 0};
}

void oclml__gemm_finish_warm(const char *op, const oclml__gemm_desc *d, oclml__warm_list *list) {
    finish_program f;
    finish_program_of(d, &f);
    oclml__warm_add(list, op, "K split sum", f.spec);
}

/* C = act(alpha sum of the splits in w + beta C + bias) (w == C's buffer with one split and
 * alpha 1, beta 0: the epilogue of a product made elsewhere). */
oclml_status oclml__gemm_finish(oclml_ctx *ctx, const oclml__gemm_desc *d, const oclml__matrix *w,
                                size_t w_split, unsigned splits, float alpha, float beta) {
    finish_program f;
    finish_program_of(d, &f);
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &f.spec, "oclml_gemm_finish", &k);
    if (st) return st;
    cl_mem wm = w->mem, cm = d->c.mem, bias = d->bias, pm = d->pre.mem;
    cl_ulong w_off = w->offset, w_sp = w_split, w_st = w->stride, c_off = d->c.offset,
             c_st = d->c.stride, b_off = d->bias_offset, p_off = d->pre.offset,
             p_st = d->pre.stride;
    cl_uint ldw = (cl_uint)w->ld, ldc = (cl_uint)d->c.ld, ldp = (cl_uint)d->pre.ld,
            M = (cl_uint)d->m, N = (cl_uint)d->n, S = splits, B = (cl_uint)d->batch;
    oclml__arg args[] = {OCLML_ARG(wm),    OCLML_ARG(w_off), OCLML_ARG(ldw),  OCLML_ARG(w_sp),
                         OCLML_ARG(w_st),  OCLML_ARG(S),     OCLML_ARG(cm),   OCLML_ARG(c_off),
                         OCLML_ARG(ldc),   OCLML_ARG(c_st),  OCLML_ARG(M),    OCLML_ARG(N),
                         OCLML_ARG(alpha), OCLML_ARG(beta),  OCLML_ARG(bias), OCLML_ARG(b_off),
                         OCLML_ARG(pm),    OCLML_ARG(p_off), OCLML_ARG(ldp),  OCLML_ARG(p_st),
                         OCLML_ARG(B),     {0, NULL},        {0, NULL},       {0, NULL},
                         {0, NULL},        {0, NULL},        {0, NULL},       {0, NULL}};
    oclml__gemm_drop_values dv;
    const unsigned n = oclml__gemm_drop_args(d, &dv, args, 21);
    size_t lx = ctx->caps.max_work_group_size >= 64 ? 64 : ctx->caps.max_work_group_size;
    /* Rows and batch entries beyond the grid's 65535 groups a dimension loop in the kernel. */
    size_t local[3] = {lx, 1, 1},
           global[3] = {oclml__ceil_div(d->n, lx) * lx, d->m < GRID_YZ_MAX ? d->m : GRID_YZ_MAX,
                        d->batch < GRID_YZ_MAX ? d->batch : GRID_YZ_MAX};
    return oclml__launch(ctx, k, args, n, 3, global, local, NULL);
}

unsigned oclml__gemm_operand_args(const oclml__gemm_desc *d, const oclml__matrix *c, bool split,
                                  oclml__gemm_arg_values *v, oclml__arg *args) {
    *v = (oclml__gemm_arg_values){.am = d->a.mem,
                                  .bm = d->b.mem,
                                  .cm = c->mem,
                                  .bias = split ? NULL : d->bias,
                                  .pm = split ? NULL : d->pre.mem,
                                  .a_off = d->a.offset,
                                  .a_st = d->a.stride,
                                  .b_off = d->b.offset,
                                  .b_st = d->b.stride,
                                  .c_off = c->offset,
                                  .c_st = c->stride,
                                  .bias_off = d->bias_offset,
                                  .p_off = d->pre.offset,
                                  .p_st = d->pre.stride,
                                  .lda = (cl_uint)d->a.ld,
                                  .ldb = (cl_uint)d->b.ld,
                                  .ldc = (cl_uint)c->ld,
                                  .ldp = (cl_uint)d->pre.ld,
                                  .M = (cl_uint)d->m,
                                  .N = (cl_uint)d->n,
                                  .K = (cl_uint)d->k,
                                  .alpha = split ? 1.0f : d->alpha,
                                  .beta = split ? 0.0f : d->beta};
    const oclml__arg a[] = {
        OCLML_ARG(v->am),    OCLML_ARG(v->a_off), OCLML_ARG(v->lda),      OCLML_ARG(v->a_st),
        OCLML_ARG(v->bm),    OCLML_ARG(v->b_off), OCLML_ARG(v->ldb),      OCLML_ARG(v->b_st),
        OCLML_ARG(v->cm),    OCLML_ARG(v->c_off), OCLML_ARG(v->ldc),      OCLML_ARG(v->c_st),
        OCLML_ARG(v->M),     OCLML_ARG(v->N),     OCLML_ARG(v->K),        OCLML_ARG(v->alpha),
        OCLML_ARG(v->beta),  OCLML_ARG(v->bias),  OCLML_ARG(v->bias_off), OCLML_ARG(v->pm),
        OCLML_ARG(v->p_off), OCLML_ARG(v->ldp),   OCLML_ARG(v->p_st)};
    const unsigned n = sizeof a / sizeof a[0];
    for (unsigned i = 0; i < n; i++) args[i] = a[i];
    return n;
}

/* One launch of a tiled kernel writing c (d's C, or a split workspace): every block, or the
 * first `blocks` of the swizzled order (one row of work-groups). */
static oclml_status run_tiled(oclml_ctx *ctx, const oclml__gemm_desc *d, const gemm_plan *p,
                              const oclml__matrix *c, bool split, size_t blocks) {
    gemm_program g;
    program_of(p, d, split, &g);
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &g.spec, g.kernel, &k);
    if (st) return st;
    const cl_uint ks = p->splits, kchunk = (cl_uint)p->kchunk;
    /* A band below every row's reach is clamped (32 bits). */
    const cl_int band =
        d->a_band < -(long)d->m - (long)p->bm ? -(cl_int)(d->m + p->bm) : (cl_int)d->a_band;
    cl_uint geom[13] = {0};
    cl_ulong segs[2] = {0, 0};
    if (d->gather_b) {
        const oclml__gather *x = d->gather_b;
        const cl_uint v[13] = {x->H,  x->W,  x->R,  x->S,  x->Q,    x->sh,     x->sw,
                               x->ph, x->pw, x->dh, x->dw, x->flip, x->segment};
        memcpy(geom, v, sizeof geom);
        segs[0] = x->a_seg;
        segs[1] = x->b_seg;
    }
    oclml__arg args[48];
    oclml__gemm_arg_values ov;
    unsigned n = oclml__gemm_operand_args(d, c, split, &ov, args);
    /* K splits, then the gathered operand's geometry (GATHER_ARGS), where it has one */
    const oclml__arg more[] = {OCLML_ARG(ks),       OCLML_ARG(kchunk),   OCLML_ARG(geom[0]),
                               OCLML_ARG(geom[1]),  OCLML_ARG(geom[2]),  OCLML_ARG(geom[3]),
                               OCLML_ARG(geom[4]),  OCLML_ARG(geom[5]),  OCLML_ARG(geom[6]),
                               OCLML_ARG(geom[7]),  OCLML_ARG(geom[8]),  OCLML_ARG(geom[9]),
                               OCLML_ARG(geom[10]), OCLML_ARG(geom[11]), OCLML_ARG(geom[12]),
                               OCLML_ARG(segs[0]),  OCLML_ARG(segs[1])};
    const unsigned n_more = d->gather_b ? 17 : 2;
    for (unsigned i = 0; i < n_more; i++) args[n++] = more[i];
    size_t local[3] = {p->threads, 1, 1};
    size_t global[3] = {oclml__ceil_div(d->n, p->bn) * p->threads, oclml__ceil_div(d->m, p->bm),
                        d->batch * p->splits};
    if (blocks) {
        global[0] = blocks * p->threads;
        global[1] = 1;
    }
    if (oclml__gemm_banded(d)) args[n++] = OCLML_ARG(band); /* BAND_ARG, after the others */
    oclml__gemm_drop_values dv;
    if (!split) n = oclml__gemm_drop_args(d, &dv, args, n); /* DROP_ARGS, last */
    return oclml__launch(ctx, k, args, n, 3, global, local, NULL);
}

/* The product as K splits into a workspace, then the sum with alpha, beta and the epilogue. */
oclml_status oclml__gemm_in_splits(oclml_ctx *ctx, const oclml__gemm_desc *d, unsigned splits,
                                   oclml__gemm_partials_fn partials, const void *plan) {
    const size_t slice = d->m * d->n;
    cl_mem ws;
    oclml_status st = oclml__scratch_get(ctx, slice * splits * d->batch * sizeof(float), &ws);
    if (st) return st;
    oclml__matrix w = {ws, 0, d->n, slice};
    st = partials(ctx, d, plan, &w);
    w.stride = slice * splits;
    if (!st) st = oclml__gemm_finish(ctx, d, &w, slice, splits, d->alpha, d->beta);
    oclml__scratch_put(ctx, ws);
    return st;
}

static oclml_status tiled_partials(oclml_ctx *ctx, const oclml__gemm_desc *d, const void *plan,
                                   const oclml__matrix *w) {
    return run_tiled(ctx, d, plan, w, true, 0);
}

static oclml_status run_split(oclml_ctx *ctx, const oclml__gemm_desc *d, const gemm_plan *p) {
    return oclml__gemm_in_splits(ctx, d, p->splits, tiled_partials, p);
}

/* The part of d from row r0 and column c0 on (a batch of one). */
static oclml__gemm_desc sub_product(const oclml__gemm_desc *d, size_t r0, size_t c0) {
    oclml__gemm_desc t = *d;
    t.m -= r0;
    t.n -= c0;
    t.a.offset += d->trans_a ? r0 : r0 * d->a.ld;
    t.b.offset += d->trans_b ? c0 * d->b.ld : c0;
    t.c.offset += r0 * d->c.ld + c0;
    if (d->pre.mem) t.pre.offset += r0 * d->pre.ld + c0;
    if (d->bias) t.bias_offset += d->bias_per_row ? r0 : c0;
    t.drop_base += r0 * d->drop_ld + c0;
    t.a_band += (long)r0; /* row r of the part is row r0 + r of d */
    return t;
}

/* The plan of the last wave's product (choose_tail): p's tile, tail_splits K splits. */
static gemm_plan tail_plan(const gemm_plan *p, const oclml__gemm_desc *tail) {
    gemm_plan t = *p;
    t.tail_blocks = 0;
    t.kchunk = oclml__ceil_div(oclml__ceil_div(tail->k, p->tail_splits), p->bk) * p->bk;
    t.splits = (unsigned)oclml__ceil_div(tail->k, t.kchunk);
    return t;
}

static oclml_status run_own(oclml_ctx *ctx, const oclml__gemm_desc *d, const gemm_plan *p) {
    if (p->splits > 1) return run_split(ctx, d, p);
    if (!p->tail_blocks) return run_tiled(ctx, d, p, &d->c, false, 0);
    const size_t blocks =
        oclml__ceil_div(d->m, p->bm) * oclml__ceil_div(d->n, p->bn) - p->tail_blocks;
    oclml_status st = run_tiled(ctx, d, p, &d->c, false, blocks);
    if (st) return st;
    const oclml__gemm_desc tail = sub_product(d, p->tail_r0, p->tail_c0);
    const gemm_plan tp = tail_plan(p, &tail);
    return run_split(ctx, &tail, &tp);
}

/* CLBlast's refusals of this device's work-group or local memory limits, which it reports before
 * enqueueing anything. */
static bool clblast_refused_device(cl_int cb) {
    return cb == CL_INVALID_WORK_GROUP_SIZE || cb == CL_INVALID_WORK_ITEM_SIZE || cb == -2046;
}

size_t oclml__gemm_band_rows(oclml_ctx *ctx, const oclml__gemm_desc *d) {
    if (!oclml__gemm_banded(d)) return 0;
    gemm_plan p;
    make_plan(ctx, d, &p);
    return p.path == PATH_CLBLAST ? 0 : p.bm;
}

bool oclml__gemm_can_gather(const oclml__gemm_desc *d) {
    bool segmented = d->gather_b && d->gather_b->segment;
    return fits_own_kernels(d) && d->trans_b == segmented &&
           (!segmented || (d->batch == 1 && !d->trans_a));
}

oclml_status oclml__gemm(oclml_ctx *ctx, const oclml__gemm_desc *d) {
    if (oclml__gemm_is_lp(d)) return oclml__gemm_lp(ctx, d);
    if (oclml__gemv_takes(ctx, d)) return oclml__gemv(ctx, d);
    gemm_plan p;
    make_plan(ctx, d, &p);
    if (p.path != PATH_CLBLAST) return run_own(ctx, d, &p);
    if (d->gather_b) /* callers ask oclml__gemm_can_gather first */
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "a product reading its columns in place exceeds the own kernels");
    cl_int cb = 0;
    /* A rehearsal learns only liboclml's programs: CLBlast builds its own on its first call. */
    oclml_status st = oclml__rehearsing(ctx) ? OCLML_SUCCESS : oclml__gemm_clblast(ctx, d, &cb);
    if (st && clblast_refused_device(cb) && fits_own_kernels(d)) {
        /* Its kernels do not fit this device (tuned parameters for another one, say): the FMA
         * tiles run anywhere. */
        p.path = PATH_FMA;
        choose_fma_tile(ctx, &p, false);
        choose_splits(ctx, d, &p);
        if (tile_fits(ctx, &p, d)) return run_own(ctx, d, &p);
    }
    if (st == OCLML_ERR_CLBLAST) return oclml__gemm_clblast_fail(ctx, d, cb);
    if (st) return st; /* recorded already (its temporary buffer) */
    if (!has_epilogue(d)) return OCLML_SUCCESS;
    oclml__matrix c = d->c;
    return oclml__gemm_finish(ctx, d, &c, 0, 1, 1.0f, 0.0f);
}

static const char *stages_text(const gemm_plan *p, char *text, size_t len) {
    if (!p->stages) return "staged through registers";
    snprintf(text, len, "%u async copy stages", p->stages);
    return text;
}

void oclml__gemm_describe(oclml_ctx *ctx, const oclml__gemm_desc *d, char *text, size_t len) {
    if (oclml__gemm_is_lp(d)) {
        oclml__gemm_lp_describe(ctx, d, text, len);
        return;
    }
    if (oclml__gemv_takes(ctx, d)) {
        oclml__gemv_describe(ctx, d, text, len);
        return;
    }
    char stages[32];
    gemm_plan p;
    make_plan(ctx, d, &p);
    const char *epi = has_epilogue(d) ? " + epilogue kernel" : "";
    if (p.path == PATH_CLBLAST)
        snprintf(text, len, "CLBlast sgemm%s%s", d->batch > 1 ? " strided batched" : "", epi);
    else if (p.path == PATH_MMA)
        snprintf(text, len, "own %s tensor cores%s, tile %ux%ux%u, %u warps, %s, %u K split%s%s",
                 p.mma_mode == 1 ? "3xTF32" : "TF32", p.emulate ? " (emulated)" : "", p.bm, p.bn,
                 p.bk, p.wm * p.wn, stages_text(&p, stages, sizeof stages), p.splits,
                 p.splits > 1 ? "s" : "", p.splits > 1 ? epi : "");
    else
        snprintf(text, len, "own FMA tiles, tile %ux%ux%u, %ux%u work-items, %u K split%s%s", p.bm,
                 p.bn, p.bk, p.ty, p.tx, p.splits, p.splits > 1 ? "s" : "",
                 p.splits > 1 ? epi : "");
    if (p.path == PATH_MMA && p.tail_blocks) {
        size_t used = strlen(text);
        if (used < len)
            snprintf(text + used, len - used, ", last wave's %zu blocks in %u K splits%s",
                     p.tail_blocks, p.tail_splits, epi);
    }
}

oclml__matrix oclml__matrix_of(const oclml_tensor *t) {
    size_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    return (oclml__matrix){t->mem, oclml__elem_offset(t), cols, t->ndim == 3 ? rows * cols : 0};
}

/* Prewarm: the programs the product d plans onto (`what` names it in the list): its kernel
 * (and the last wave's split one) where liboclml's own take it; the summing kernel of split
 * products, or where CLBlast takes it the epilogue kernel that follows. */
void oclml__gemm_warm_desc(oclml_ctx *ctx, const char *op, const char *what,
                           const oclml__gemm_desc *d, oclml__warm_list *list) {
    if (oclml__gemv_takes(ctx, d)) {
        oclml__gemv_warm(ctx, op, what, d, list);
        return;
    }
    gemm_plan p;
    make_plan(ctx, d, &p);
    if (p.path != PATH_CLBLAST) {
        gemm_program g;
        program_of(&p, d, p.splits > 1, &g);
        oclml__warm_add(list, op, what, g.spec);
    }
    /* The last wave's split product (without the epilogue) and its sum. */
    if (p.path != PATH_CLBLAST && p.tail_blocks) {
        gemm_program g;
        program_of(&p, d, true, &g);
        oclml__warm_add(list, op, "last wave's K splits", g.spec);
    }
    if (p.splits > 1 || p.tail_blocks || (p.path == PATH_CLBLAST && has_epilogue(d))) {
        finish_program f;
        finish_program_of(d, &f);
        oclml__warm_add(list, op, p.path == PATH_CLBLAST ? "epilogue" : "K split sum", f.spec);
    }
}
