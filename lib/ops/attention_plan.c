/* The attention planner (attention_plan.h): from a call's shape, the device's capabilities and
 * the tuning table, the kernels a forward and a backward run, their tiles and their programs.
 * One program per kernel and variant (head dim, tile, layout, which masks exist): a call compiles
 * only what it runs. */
#include "ops/attention_lp.h"
#include "ops/attention_plan.h"
#include "ops/gemm.h"
#include "ops/ops.h"

#include <stdio.h>

#define FILE_CL "attention.cl"
#define DC 16 /* head-dim columns a staged chunk of the score products (DC in attention.cl) */
/* The kernels keep their accumulators in registers: NVIDIA's default cap of 64 would spill. */
#define ATT_MAX_REGISTERS 255

static const char *const KERNEL_NAMES[] = {"oclml_attention_fwd",      "oclml_attention_merge",
                                           "oclml_attention_delta",    "oclml_attention_dkdv",
                                           "oclml_attention_dq",       "oclml_attention_dmask",
                                           "oclml_attention_dq_empty", "oclml_attention_fwd_mma",
                                           "oclml_attention_dkdv_mma", "oclml_attention_dq_mma"};

const char *oclml__att_kernel_name(oclml__att_kernel kind) { return KERNEL_NAMES[kind]; }

/* ---- the FMA tiles (attention.cl) ---- */

static size_t local_floats(oclml__att_kernel kind, oclml__att_tile t, size_t D) {
    const size_t bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk, p = bq * (bk + 1);
    size_t stage = DC * (bq + bk + 2);
    if (t.jc * D > stage) stage = t.jc * D;
    const size_t rows = bq * 7; /* three ulong and one int table, in floats */
    switch (kind) {
    case ATT_FWD:
        return stage + rows + p + bq * t.tx;
    case ATT_DKDV:
        return stage + rows + 2 * p;
    case ATT_DQ:
        return stage + rows + p;
    default:
        return stage + rows;
    }
}

/* The tile of a kernel: the tuning key attention.tile, else 16 x 16 work-items with 4 x 4
 * scores each (8 x 8 or 4 x 4 where work-groups are smaller); the dK/dV kernel keeps two
 * probability tiles in local memory and so takes half the rows. A forward whose key head has at
 * most DECODE_ROWS query rows (decoding: one row per query head of the group) takes one score
 * row per work-item row and as few rows as it has, the rest of the work-group along the keys:
 * a 64-row tile would compute 64 times the scores it keeps. JC: as many value rows as the score
 * stage's space holds (a power of two dividing the side the accumulating product sums over). */
#define DECODE_ROWS 8
static oclml__att_tile plan_tile(oclml_ctx *ctx, oclml__att_kernel kind,
                                 const oclml__att_shape *s) {
    oclml__att_tile t = {(unsigned)oclml__tune(ctx, OCLML__TUNE_ATTENTION_TILE, 0),
                         (unsigned)oclml__tune(ctx, OCLML__TUNE_ATTENTION_TILE, 1),
                         (unsigned)oclml__tune(ctx, OCLML__TUNE_ATTENTION_TILE, 2),
                         (unsigned)oclml__tune(ctx, OCLML__TUNE_ATTENTION_TILE, 3), 1};
    const size_t wg = ctx->caps.max_work_group_size < 256 ? ctx->caps.max_work_group_size : 256,
                 group_rows = s->H / s->HKV * s->LQ;
    if (!t.tx || !t.ty || !t.rq || !t.rk) {
        const unsigned side = wg >= 256 ? 16 : wg >= 64 ? 8 : wg >= 16 ? 4 : wg >= 4 ? 2 : 1;
        t = (oclml__att_tile){side, side, 4, 4, 1};
        if (kind == ATT_DKDV) t.rq = 2;
        if ((kind == ATT_FWD || kind == ATT_MERGE) && group_rows <= DECODE_ROWS) {
            const size_t ty = oclml__pow2_ceil(group_rows) < wg ? oclml__pow2_ceil(group_rows) : 1;
            t = (oclml__att_tile){(unsigned)(oclml__pow2_floor(wg) / ty), (unsigned)ty, 1, 1, 1};
        }
    }
    const size_t D = s->D, bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk,
                 side = kind == ATT_DKDV ? bq : bk, room = DC * (bq + bk + 2) / (D ? D : 1);
    t.jc = (unsigned)oclml__pow2_floor(room < side ? (room ? room : 1) : side);
    while (t.rq > 1 && local_floats(kind, t, D) * 4 > ctx->caps.local_mem_bytes) t.rq /= 2;
    /* Fewer rows may leave the dK/dV side no longer a multiple of JC. */
    while (t.jc > 1 && (kind == ATT_DKDV ? (size_t)t.ty * t.rq : bk) % t.jc) t.jc /= 2;
    return t;
}

/* The dK/dV kernel also needs its key block a multiple of the work-items along rows (each
 * stores BK / TY keys' gradients). */
static bool tile_fits(oclml_ctx *ctx, oclml__att_kernel kind, oclml__att_tile t, size_t D) {
    const size_t bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk;
    return (size_t)t.tx * t.ty <= ctx->caps.max_work_group_size &&
           (kind == ATT_DKDV ? bq : bk) % t.jc == 0 && (kind != ATT_DKDV || bk % t.ty == 0) &&
           local_floats(kind, t, D) * 4 <= ctx->caps.local_mem_bytes;
}

/* ---- the tensor-core kernels ---- */

/* The tensor-core kernels (attention_fwd_mma.cl, attention_bwd_mma.cl): the tuning key
 * attention.mma (-1 auto, 0 never, 1 where the device has TF32 mma.sync, 2 the kernels with the
 * instruction emulated, for tests), by default where the device has them; head dims that are
 * multiples of 8 up to 128 (above 128 up to 256 where the warps share the head dim: mma_wide)
 * and more query rows a key head than the decode tile takes, where the device's work-groups and
 * local memory hold the tile (else the FMA kernels run; each kernel of the backward decides for
 * itself). Work-groups of 4 or 8 warps of 16 rows (mma_warps); score tiles of 16 to 64 columns
 * (mma_columns). */
#define MMA_WARPS 4
static size_t mma_local_floats(oclml_ctx *ctx, oclml__att_kernel kind, size_t D, bool pos,
                               bool emulate, bool async);
static unsigned mma_warps(oclml_ctx *ctx, oclml__att_kernel kind, size_t D, bool pos);
static bool dkdv_pairs(oclml_ctx *ctx, size_t D);
static bool dq_pairs(oclml_ctx *ctx, size_t D);
static bool fwd_pairs(oclml_ctx *ctx, size_t D);
static bool split_kv(oclml_ctx *ctx, oclml__att_kernel kind, size_t D);
static bool mma_paired(oclml_ctx *ctx, oclml__att_kernel kind, size_t D);
static unsigned head_split(oclml_ctx *ctx, oclml__att_kernel kind, size_t D);
static size_t dkdv_rows(size_t D);

/* Whether a tensor-core kernel takes head dim D above 128, where the warps must share the head
 * dim to keep their operands in registers: the paired forward, the dK/dV kernel's groups of four
 * and the dQ kernel's (head_split), the last by default only above 192, where its fours beat
 * the FMA dQ kernel (at 160 and 192 they lose to it); dK/dV's fours run 2-3.5x faster than the
 * FMA dK/dV kernel at every head dim above 128 (H100; bench/DECISIONS.md, "The backward above
 * D128 in fours"). */
static bool mma_wide(oclml_ctx *ctx, oclml__att_kernel kind, size_t D) {
    if (kind != ATT_DQ_MMA) return head_split(ctx, kind, D) == 2;
    return head_split(ctx, kind, D) == 4 &&
           (oclml__tune(ctx, OCLML__TUNE_ATTENTION_DQ_PAIRS, 0) == 1 || D > 192);
}

/* 0 (FMA kernels), 1 (tensor cores) or 2 (emulated) for a kernel (ATT_FWD_MMA, ATT_DKDV_MMA or
 * ATT_DQ_MMA: the forward, the backward's two); a device whose work-groups or local memory cannot
 * hold the tile takes the FMA kernels. */
static int mma_mode(oclml_ctx *ctx, const oclml__att_shape *s, oclml__att_kernel kind) {
    const long mode = oclml__tune(ctx, OCLML__TUNE_ATTENTION_MMA, 0);
    const size_t most = mma_wide(ctx, kind, s->D) ? 256 : 128;
    if (!mode || s->D % 8 || s->D > most || s->H / s->HKV * s->LQ <= DECODE_ROWS ||
        ctx->caps.max_work_group_size < 32 * MMA_WARPS ||
        mma_local_floats(ctx, kind, s->D, s->by_position, mode == 2, false) * 4 >
            ctx->caps.local_mem_bytes)
        return 0;
    if (mode == 2) return 2;
    return ctx->caps.is_gpu && oclml__caps_mma(ctx) ? 1 : 0;
}

/* The score tile's columns of a tensor-core kernel (BN in attention_mma.h): the tuning keys
 * attention.mma_keys (forward) and attention.mma_bwd_cols (backward), 16, 32 or 64; by default
 * 32 in the forward up to head dim 64 (faster there than 64) and 16 above (32 spills registers
 * at head dim 128); in the backward 16 for dQ and 32 for dK/dV, each the faster of the two at
 * head dim 64 (H100; bench/DECISIONS.md, "Score tiles", "Backward score columns"). */
static unsigned mma_columns(oclml_ctx *ctx, oclml__att_kernel kind, size_t D) {
    const long forced = oclml__tune(ctx,
                                    kind == ATT_FWD_MMA ? OCLML__TUNE_ATTENTION_MMA_KEYS
                                                        : OCLML__TUNE_ATTENTION_MMA_BWD_COLS,
                                    0);
    const unsigned most = kind == ATT_DKDV_MMA ? (unsigned)dkdv_rows(D) : 64;
    if (forced > 0) return forced >= 64 && most >= 64 ? 64 : forced >= 32 && most >= 32 ? 32 : 16;
    if (kind == ATT_FWD_MMA) return D <= 64 ? 32 : 16;
    return kind == ATT_DKDV_MMA && D <= 64 ? 32 : 16;
}

/* Warps a work-group of a tensor-core kernel (WARPS in attention_mma.h), 16 query rows (or
 * keys) each: from the tuning key attention.mma_warps (4 or 8) for the forward and the paired
 * backward kernels; by default 8 in the forward above head dim 64 (faster there, slower at 64)
 * unless rows see keys by position (pos: causal masks, windows) up to head dim 128, where a
 * block of fewer rows leaves fewer warps idle on its last keys (the paired forward above 128
 * keeps 8, the count it was tuned with); 4 elsewhere (the backward's staged rows fill local
 * memory). H100: bench/DECISIONS.md, "4 warps (64-row blocks) in the forward above D64". */
static unsigned mma_warps(oclml_ctx *ctx, oclml__att_kernel kind, size_t D, bool pos) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_MMA_WARPS, 0);
    const bool fewer = pos && D <= 128; /* the paired forward above 128 was timed with 8 */
    const unsigned want = forced > 0                                ? (forced >= 8 ? 8 : 4)
                          : kind == ATT_FWD_MMA && D > 64 && !fewer ? 8
                                                                    : 4;
    const bool free = kind == ATT_FWD_MMA || mma_paired(ctx, kind, D);
    return free && 32 * want <= ctx->caps.max_work_group_size ? want : MMA_WARPS;
}

/* The dK/dV kernel's DKDV_PAIRS (attention_mma.h): the tuning key attention.dkdv_pairs, by
 * default above head dim 64, where one warp's K, V, dK and dV spill registers (paired, nothing
 * spills and the kernel takes about 60% of the time); at 64 nothing spills and pairs lose (H100;
 * bench/DECISIONS.md, "Head dims above 64: paired warps"). */
static bool dkdv_pairs(oclml_ctx *ctx, size_t D) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_DKDV_PAIRS, 0);
    return forced >= 0 ? forced == 1 : D > 64;
}

/* The dQ kernel's DQ_PAIRS (attention_mma.h): the tuning key attention.dq_pairs, by default
 * above head dim 64, where one warp's Q, dO and dQ spill registers (paired, in work-groups of 4
 * warps rather than 8, nothing spills and the kernel takes about 60% of the time); head dims
 * that are multiples of 16. At 64 nothing spills and pairs lose (the same section). */
static bool dq_pairs(oclml_ctx *ctx, size_t D) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_DQ_PAIRS, 0);
    return D % 16 == 0 && (forced >= 0 ? forced == 1 : D > 64); /* halves of whole 8-wide steps */
}

/* The forward's FWD_PAIRS (attention_mma.h): the tuning key attention.fwd_pairs, by default
 * above head dim 128 (where one warp's Q and O do not fit its registers); head dims that are
 * multiples of 16. There the double buffers of K and V pass 48 KiB: the paired forward keeps one
 * of each, refilled as soon as read (split_kv). Paired, the forward above head dim 128 runs
 * about twice as fast as the FMA kernels (with the asynchronous copies: without them, about as
 * fast); at 64 and 128, where the unpaired kernel runs, pairs lose 20-25% (H100;
 * bench/DECISIONS.md, "The paired forward above D128"). */
static bool fwd_pairs(oclml_ctx *ctx, size_t D) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_FWD_PAIRS, 0);
    return D % 16 == 0 && (forced >= 0 ? forced == 1 : D > 128);
}

/* The head dims and warps the float4 fragment reads take (vec_fragments): multiples of 32,
 * warps that hold the whole head dim (the dK/dV kernel's pairs do: one product each) or, in the
 * dK/dV kernel's fours and the paired forward, a half of it that is a multiple of 32. */
static bool vec_shape(oclml_ctx *ctx, oclml__att_kernel kind, size_t D) {
    return D % 32 == 0 &&
           (kind == ATT_DQ_MMA ? !dq_pairs(ctx, D) : D / head_split(ctx, kind, D) % 32 == 0);
}

/* Whether a tensor-core kernel runs with its warps in pairs (DKDV_PAIRS, DQ_PAIRS, FWD_PAIRS). */
static bool mma_paired(oclml_ctx *ctx, oclml__att_kernel kind, size_t D) {
    return (kind == ATT_DKDV_MMA && dkdv_pairs(ctx, D)) ||
           (kind == ATT_DQ_MMA && dq_pairs(ctx, D)) || (kind == ATT_FWD_MMA && fwd_pairs(ctx, D));
}

/* Whether a tensor-core kernel staging by asynchronous copies keeps one K and one V buffer, each
 * refilled once read (SPLIT_KV in attention_mma.h), rather than two of each: the paired
 * forward, whose double buffers pass 48 KiB above head dim 128. */
static bool split_kv(oclml_ctx *ctx, oclml__att_kernel kind, size_t D) {
    return kind == ATT_FWD_MMA && fwd_pairs(ctx, D);
}

/* How many warps share the head dim of a group's operands and accumulators, a part each
 * (HEAD_SPLIT in attention_mma.h): 2 in the paired forward; in the paired dQ kernel 2, or 4
 * above head dim 128 (head dims that are multiples of 32); in the paired dK/dV kernel 2 above
 * 128 (multiples of 16: its groups of four warps on 16 keys); else 1. */
static unsigned head_split(oclml_ctx *ctx, oclml__att_kernel kind, size_t D) {
    if (!mma_paired(ctx, kind, D)) return 1;
    if (kind == ATT_FWD_MMA) return 2;
    if (kind == ATT_DQ_MMA) return D > 128 && D % 32 == 0 ? 4 : 2;
    return D > 128 && D % 16 == 0 ? 2 : 1;
}

/* Keys (dK/dV) or query rows (forward, dQ) a work-group of a tensor-core kernel takes: 16 a
 * warp, or 16 a group of the warps that share them (two on the paired products, more on parts
 * of the head dim). */
static unsigned mma_block(oclml_ctx *ctx, oclml__att_kernel kind, size_t D, bool pos) {
    const unsigned share =
        (kind == ATT_DKDV_MMA && mma_paired(ctx, kind, D) ? 2 : 1) * head_split(ctx, kind, D);
    return 16 * mma_warps(ctx, kind, D, pos) / share;
}

/* Query rows the dK/dV kernel stages at a time (BQ in attention_mma.h): 64, 32 above head dim
 * 64, 16 above 128 (Q and dO rows in 48 KiB). */
static size_t dkdv_rows(size_t D) { return D > 128 ? 16 : D > 64 ? 32 : 64; }

/* async: the K and V blocks double-buffered (the forward and dQ kernels' ASYNC_KV). */
static size_t mma_local_floats(oclml_ctx *ctx, oclml__att_kernel kind, size_t D, bool pos,
                               bool emulate, bool async) {
    /* rows: the row tables of a block's query rows; extra: the emulation's exchange buffers and
     * 16 floats for the padding a compiler may put before the 16-byte aligned arrays. */
    const size_t warps = mma_warps(ctx, kind, D, pos), bn = mma_columns(ctx, kind, D),
                 extra = (emulate ? warps * (16 * 8 + 8 * 8 + 32) : 0) + 16,
                 kv = async && !split_kv(ctx, kind, D) ? 2 : 1;
    /* Each sharing warp's part of S (and of dP) */
    const size_t parts = head_split(ctx, kind, D) > 1 ? warps * bn * 16 : 0;
    if (kind == ATT_FWD_MMA)
        return kv * 2 * bn * (D + 4) + mma_block(ctx, kind, D, pos) * 7 + parts + extra;
    if (kind == ATT_DQ_MMA)
        return kv * 2 * bn * (D + 4) + mma_block(ctx, kind, D, pos) * 7 + 2 * parts + extra;
    /* P tiles: 2 x groups x KTILES x 128 floats */
    const size_t staged = dkdv_rows(D),
                 p_tiles =
                     dkdv_pairs(ctx, D) ? 2 * (mma_block(ctx, kind, D, pos) / 16) * bn * 16 : 0;
    return 2 * staged * (D + 4) + 2 * staged + staged * 7 + p_tiles + parts + extra;
}

/* Whether a tensor-core kernel stages by asynchronous copies (ASYNC_KV in attention_mma.h):
 * the forward and dQ kernels their K and V blocks on float4-aligned K and V rows, double-buffered
 * where the second buffers fit the local memory (the paired forward: one buffer each, refilled
 * by turns, split_kv); the dK/dV kernel its Q and dO rows, on float4-aligned ones; unless the
 * tuning key attention.async is 0 (the emulated kernels copy at once, testing the same code
 * everywhere). */
static bool kv_async(oclml_ctx *ctx, const oclml__att_shape *s, oclml__att_kernel kind, int mode) {
    if (oclml__tune(ctx, OCLML__TUNE_ATTENTION_ASYNC, 0) == 0) return false;
    if (kind == ATT_DKDV_MMA) return s->qd_vec;
    return (kind == ATT_FWD_MMA || kind == ATT_DQ_MMA) && s->kv_vec &&
           mma_local_floats(ctx, kind, s->D, s->by_position, mode == 2, true) * 4 <=
               ctx->caps.local_mem_bytes;
}

/* Whether a tensor-core kernel reads its staged operands' fragment values as float4s
 * (VEC_FRAGMENTS in attention_mma.h: K and V in the forward and dQ, Q and dO in dK/dV): head dims
 * that are multiples of 32, the warps of vec_shape, staging by asynchronous copies; the tuning key
 * attention.vec_fragments 0 turns it off. Every kernel that takes them runs 3-16% faster so: the
 * forward and dQ unpaired, the dK/dV kernel unpaired, paired (each warp holding the whole head
 * dim of its operand) and in fours, the paired forward (each warp half the head dim). The paired
 * dQ kernel keeps float reads (its warps hold half the head dim): unpaired with float4s it is
 * still much slower than paired without (H100 and H200; bench/DECISIONS.md, "Staging and
 * operand reads"). */
static bool vec_fragments(oclml_ctx *ctx, const oclml__att_shape *s, oclml__att_kernel kind,
                          int mode) {
    return vec_shape(ctx, kind, s->D) &&
           oclml__tune(ctx, OCLML__TUNE_ATTENTION_VEC_FRAGMENTS, 0) != 0 &&
           kv_async(ctx, s, kind, mode);
}

/* Column tiles whose B values a tensor-core kernel's accumulating products read together
 * (ACC_BATCH in attention_mma.h): the tuning key attention.mma_col_batch (1, 2, 4, 8 or 16), by
 * default 8 in the forward, 8 in dQ up to head dim 64 and 4 above, 2 in dK/dV: the fastest of
 * 2, 4 and 8 for each at head dims 64 and 128 (more values in flight leave fewer registers:
 * dK/dV already spills at head dim 64; H100: bench/DECISIONS.md, "Reads batched before the
 * products"). */
static unsigned col_batch(oclml_ctx *ctx, oclml__att_kernel kind, size_t D) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_MMA_COL_BATCH, 0);
    if (forced > 0)
        return forced >= 16 ? 16 : forced >= 8 ? 8 : forced >= 4 ? 4 : forced >= 2 ? 2 : 1;
    if (kind == ATT_FWD_MMA) return 8;
    return kind == ATT_DQ_MMA ? (D <= 64 ? 8 : 4) : 2;
}

/* Key splits of the forward: the tuning key attention.splits, else where the row blocks leave
 * compute units idle (decoding: a few rows against long keys), enough splits to give every
 * compute unit four work-groups, each at least two key blocks. */
static size_t plan_splits(oclml_ctx *ctx, const oclml__att_shape *s, oclml__att_tile t) {
    const size_t bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk;
    const size_t groups = oclml__ceil_div(s->H / s->HKV * s->LQ, bq) * s->B * s->HKV,
                 key_blocks = oclml__ceil_div(s->LK, bk);
    long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_SPLITS, 0);
    size_t splits = forced > 0 ? (size_t)forced : 1;
    if (forced <= 0 && ctx->caps.is_gpu) {
        const size_t want = 4 * (size_t)ctx->caps.compute_units;
        if (groups < want) splits = oclml__ceil_div(want, groups);
        if (splits > key_blocks / 2) splits = key_blocks / 2 ? key_blocks / 2 : 1;
    }
    if (splits > key_blocks) splits = key_blocks;
    if (splits > 65535) splits = 65535;
    return splits;
}

/* Key heads a chunk of the dS workspace holds where dQ comes from the dK/dV kernel's dS
 * (DS_OUT in attention_bwd_mma.cl) as one GEMM, dQ = scale dS K, rather than from the dQ kernel,
 * which computes S and dP again (two of its three products); 0 where it does not. The tuning key
 * attention.dq_gemm: 0 never, N key heads a chunk (past the workspace, up to the device's
 * largest buffer), -1 (default) as many as the device's workspace holds (caps.workspace_bytes).
 * Only with dK/dV on tensor cores, without key lengths (the GEMM reads every key, padding
 * included) and where one key head's dS (its H / HKV Lq stacked rows against Lk keys) fits.
 * Under causal masks and windows the dQ kernel skips the blocks its rows do not see and the GEMM
 * reads dS only up to its band, but the dK/dV kernel's launches a chunk each leave its uneven
 * work-groups' tails: by default the dQ kernel stays there at head dims up to 64 or with
 * grouped query heads unless every key head fits one chunk, the cases where the GEMM loses;
 * elsewhere it takes 10-40% off the backward (H100; bench/DECISIONS.md, "dQ as a GEMM on dS"). */
static size_t dq_gemm_heads(oclml_ctx *ctx, const oclml__att_shape *s, int dkdv_mma) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_DQ_GEMM, 0);
    if (!forced || !dkdv_mma || s->keylen) return 0;
    const size_t total = s->B * s->HKV, head_bytes = oclml__att_ds_head_bytes(s);
    size_t heads = ctx->caps.workspace_bytes / head_bytes;
    /* An explicit N may pass the default workspace, up to the device's largest buffer. */
    if (forced > 0) heads = (size_t)forced;
    if (ctx->info.max_alloc_bytes && heads > ctx->info.max_alloc_bytes / head_bytes)
        heads = ctx->info.max_alloc_bytes / head_bytes;
    if (forced < 0 && s->by_position && (s->D <= 64 || s->H > s->HKV) && heads < total) return 0;
    return heads < total ? heads : total;
}
/* ---- the plans ---- */

oclml__program_spec oclml__att_spec(const oclml__att_kernel_plan *k) {
    const char *file = k->kind < ATT_FWD_MMA    ? FILE_CL
                       : k->kind == ATT_FWD_MMA ? "attention_fwd_mma.cl"
                                                : "attention_bwd_mma.cl";
    return (oclml__program_spec){file, k->defines, KERNEL_NAMES[k->kind], ATT_MAX_REGISTERS};
}

static void plan_fma(oclml_ctx *ctx, const oclml__att_shape *s, oclml__att_kernel kind,
                     oclml__att_kernel_plan *k) {
    const oclml__att_tile t = plan_tile(ctx, kind, s);
    *k = (oclml__att_kernel_plan){.kind = kind, .tile = t, .fits = tile_fits(ctx, kind, t, s->D)};
    snprintf(k->defines, sizeof k->defines,
             "-DHEAD_DIM=%zu -DTX=%u -DTY=%u -DRQ=%u -DRK=%u -DDC=%d -DJC=%u -DLAYOUT_BLHD=%d "
             "-DHAS_MASK=%d -DHAS_KEYLEN=%d -DHAS_DROPOUT=%d",
             s->D, t.tx, t.ty, t.rq, t.rk, DC, t.jc, s->blhd, s->mask, s->keylen, s->dropout);
}

/* A tensor-core kernel in mode 1 or 2 (mma_mode has checked that its tile fits the device).
 * ds_out: the dK/dV kernel writing dS for the dQ GEMM (DS_OUT). */
static void plan_mma(oclml_ctx *ctx, const oclml__att_shape *s, oclml__att_kernel kind, int mode,
                     bool ds_out, oclml__att_kernel_plan *k) {
    const size_t D = s->D;
    const bool pos = s->by_position;
    *k = (oclml__att_kernel_plan){.kind = kind,
                                  .mma = mode,
                                  .fits = true,
                                  .warps = mma_warps(ctx, kind, D, pos),
                                  .columns = mma_columns(ctx, kind, D),
                                  .block = mma_block(ctx, kind, D, pos),
                                  .head_split = head_split(ctx, kind, D),
                                  .col_batch = col_batch(ctx, kind, D),
                                  .paired = mma_paired(ctx, kind, D),
                                  .async = kv_async(ctx, s, kind, mode),
                                  .vec = vec_fragments(ctx, s, kind, mode)};
    /* 32 warps work-items; 16 warps rows, or fewer where warps share them */
    k->tile =
        (oclml__att_tile){16, 2 * k->warps, 8 * k->block / (16 * k->warps), k->columns / 16, 1};
    snprintf(k->defines, sizeof k->defines,
             "-DHEAD_DIM=%zu -DBN=%u -DWARPS=%u -DMMA_EMULATE=%d -DLAYOUT_BLHD=%d -DHAS_MASK=%d "
             "-DHAS_KEYLEN=%d -DASYNC_KV=%d -DDKDV_PAIRS=%d -DDQ_PAIRS=%d -DFWD_PAIRS=%d "
             "-DSPLIT_KV=%d -DHEAD_SPLIT=%u -DBQ=%zu -DACC_BATCH=%u -DVEC_FRAGMENTS=%d -DDS_OUT=%d "
             "-DHAS_DROPOUT=%d -DONE_TF32=%d",
             D, k->columns, k->warps, mode == 2, s->blhd, s->mask, s->keylen, k->async,
             k->paired && kind == ATT_DKDV_MMA, k->paired && kind == ATT_DQ_MMA,
             k->paired && kind == ATT_FWD_MMA, k->async && split_kv(ctx, kind, D), k->head_split,
             kind == ATT_DKDV_MMA ? dkdv_rows(D) : (size_t)k->block, k->col_batch, k->vec,
             ds_out && kind == ATT_DKDV_MMA, s->dropout, s->one_tf32);
}

void oclml__att_plan_forward(oclml_ctx *ctx, const oclml__att_shape *s,
                             oclml__att_forward_plan *p) {
    const int mma = mma_mode(ctx, s, ATT_FWD_MMA);
    if (mma)
        plan_mma(ctx, s, ATT_FWD_MMA, mma, false, &p->main);
    else
        plan_fma(ctx, s, ATT_FWD, &p->main);
    p->splits = plan_splits(ctx, s, p->main.tile);
    plan_fma(ctx, s, ATT_MERGE, &p->merge);
}

void oclml__att_plan_backward(oclml_ctx *ctx, const oclml__att_shape *s, bool dq_and_dkdv,
                              oclml__att_backward_plan *p) {
    const int dkdv_mma = mma_mode(ctx, s, ATT_DKDV_MMA), dq_mma = mma_mode(ctx, s, ATT_DQ_MMA);
    p->dq_gemm_heads = dq_and_dkdv ? dq_gemm_heads(ctx, s, dkdv_mma) : 0;
    plan_fma(ctx, s, ATT_DELTA, &p->delta);
    if (dkdv_mma)
        plan_mma(ctx, s, ATT_DKDV_MMA, dkdv_mma, p->dq_gemm_heads > 0, &p->dkdv);
    else
        plan_fma(ctx, s, ATT_DKDV, &p->dkdv);
    if (dq_mma)
        plan_mma(ctx, s, ATT_DQ_MMA, dq_mma, false, &p->dq);
    else
        plan_fma(ctx, s, ATT_DQ, &p->dq);
    plan_fma(ctx, s, ATT_DMASK, &p->dmask);
    plan_fma(ctx, s, ATT_DQ_EMPTY, &p->dq_empty);
}

static const char *engine_of(int mma, bool one_tf32) {
    static const char *const names[2][2] = {
        {"3xTF32 tensor cores", "3xTF32 tensor cores (emulated)"},
        {"TF32 tensor cores (16-bit inputs)", "TF32 tensor cores (16-bit inputs, emulated)"}};
    return names[one_tf32][mma == 2];
}

void oclml__att_describe(oclml_ctx *ctx, const oclml__att_shape *s, char *text, size_t len) {
    oclml__att_forward_plan fp;
    oclml__att_backward_plan bp;
    oclml__att_plan_forward(ctx, s, &fp);
    oclml__att_plan_backward(ctx, s, true, &bp);
    const oclml__att_kernel_plan *f = &fp.main;
    char fwd[192], bwd[288];
    if (f->mma) {
        snprintf(fwd, sizeof fwd, "%s, %u rows x %u keys a block%s%s",
                 engine_of(f->mma, s->one_tf32), f->block, f->columns,
                 f->paired ? " (warps paired on 16 rows)" : "",
                 !f->async ? ""
                 : f->paired /* one K and one V buffer (split_kv) */
                     ? (f->vec ? ", K and V copied ahead in turn, read as float4s"
                               : ", K and V copied ahead in turn")
                     : f->vec ? ", the next copied ahead, K and V read as float4s"
                              : ", the next copied ahead");
    } else {
        const oclml__att_tile t = f->tile;
        snprintf(fwd, sizeof fwd, "FMA tiles %ux%u of %ux%u scores%s", t.tx, t.ty, t.rq, t.rk,
                 fp.splits > 1 ? ", keys split" : "");
        if (fp.splits > 1) {
            const size_t n = strlen(fwd);
            snprintf(fwd + n, sizeof fwd - n, " %zu ways, merged by log-sum-exp", fp.splits);
        }
    }
    /* Each backward kernel's engine, block and grouping; one engine named once. */
    const oclml__att_kernel_plan *kd = &bp.dkdv, *kq = &bp.dq;
    char engine[2][48], dkdv[96], dq[80];
    const oclml__att_kernel_plan *kernels[2] = {kd, kq};
    for (int i = 0; i < 2; i++)
        if (kernels[i]->mma)
            snprintf(engine[i], sizeof engine[i], "%s", engine_of(kernels[i]->mma, s->one_tf32));
        else
            snprintf(engine[i], sizeof engine[i], "FMA tiles %ux%u", kernels[i]->tile.tx,
                     kernels[i]->tile.ty);
    snprintf(dkdv, sizeof dkdv, "dK/dV per %u keys%s%s",
             kd->mma ? kd->block : kd->tile.tx * kd->tile.rk,
             !kd->mma             ? ""
             : kd->head_split > 1 ? " (four warps on 16 keys)"
             : kd->paired         ? " (warps paired on 16 keys)"
                                  : "",
             kd->vec ? ", Q and dO read as float4s" : "");
    snprintf(dq, sizeof dq, "dQ per %u rows%s", kq->mma ? kq->block : kq->tile.ty * kq->tile.rq,
             kq->vec ? ", K and V read as float4s" : "");
    if (bp.dq_gemm_heads) {
        snprintf(dq, sizeof dq, "dQ = dS K by GEMM, %zu key head%s at a time", bp.dq_gemm_heads,
                 bp.dq_gemm_heads > 1 ? "s" : "");
        strcpy(engine[1], engine[0]);
    }
    if (!strcmp(engine[0], engine[1]))
        snprintf(bwd, sizeof bwd, "%s, %s, %s", engine[0], dkdv, dq);
    else
        snprintf(bwd, sizeof bwd, "%s on %s, %s on %s", dkdv, engine[0], dq, engine[1]);
    snprintf(text, len, "forward: %s; backward: %s", fwd, bwd);
}

/* The call forms a warm list plans for: with every_shape (checks of the kernels), each head dim
 * of EVERY_DIM with each form; else head dims 64 and 128 unmasked (the first form). */
typedef struct warm_form {
    bool causal, blhd, mask, keylen;
    bool vec; /* rows float4-aligned */
} warm_form;
static const warm_form FORMS[] = {{.vec = true},
                                  {.causal = true, .vec = true},
                                  {.mask = true, .vec = true},
                                  {.keylen = true, .vec = true},
                                  {.blhd = true, .keylen = true, .vec = true},
                                  {.blhd = true, .mask = true, .keylen = true, .vec = true},
                                  {.blhd = true}};
static const size_t COMMON_DIMS[] = {64, 128}, EVERY_DIM[] = {24, 64, 128, 192, 256};

/* Prewarm: the kernels a call with head dims 64 and 128 runs without masks (BHLD, 1024 rows a
 * key head, rows float4-aligned): the tensor-core ones where the device has them, else the FMA
 * tiles; the forward a causal mask takes where it differs (mma_warps); the dQ GEMM on dS with
 * the kernel that zeroes the rows that see no key, where the backward takes it; and the native
 * 16-bit forward's and backward's programs (attention_lp_fwd.c, attention_lp_bwd.c) where the
 * device runs them. With
 * every_shape, the same for each head dim of EVERY_DIM and each form of FORMS. */
void oclml__attention_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    const bool bwd = strstr(op, "backward") != NULL;
    const size_t *dims = list->every_shape ? EVERY_DIM : COMMON_DIMS;
    const size_t n_dims = list->every_shape ? sizeof EVERY_DIM / sizeof EVERY_DIM[0] : 2,
                 n_forms = list->every_shape ? sizeof FORMS / sizeof FORMS[0] : 1;
    for (size_t i = 0; i < n_dims * n_forms; i++) {
        const warm_form f = FORMS[i % n_forms];
        const size_t D = dims[i / n_forms];
        oclml__att_shape s = {.B = 1,
                              .H = 1,
                              .HKV = 1,
                              .LQ = 1024,
                              .LK = 1024,
                              .D = D,
                              .mask_b = 1,
                              .mask_h = 1,
                              .by_position = f.causal,
                              .blhd = f.blhd,
                              .mask = f.mask,
                              .keylen = f.keylen,
                              .kv_vec = f.vec,
                              .qd_vec = f.vec};
        char variant[64];
        if (!bwd) {
            oclml__att_forward_plan p;
            oclml__att_plan_forward(ctx, &s, &p);
            snprintf(variant, sizeof variant, "head dim %zu, %s", D, KERNEL_NAMES[p.main.kind]);
            oclml__warm_add(list, op, variant, oclml__att_spec(&p.main));
            if (f.causal) continue;
            s.by_position = true; /* the list keeps one of two equal programs */
            oclml__att_plan_forward(ctx, &s, &p);
            snprintf(variant, sizeof variant, "head dim %zu, causal, %s", D,
                     KERNEL_NAMES[p.main.kind]);
            oclml__warm_add(list, op, variant, oclml__att_spec(&p.main));
            continue;
        }
        oclml__att_backward_plan p;
        oclml__att_plan_backward(ctx, &s, true, &p);
        if (p.dq_gemm_heads) {
            const oclml__gemm_desc g = {.m = s.LQ,
                                        .n = s.D,
                                        .k = s.LK,
                                        .batch = 1,
                                        .alpha = 1.0f,
                                        .a = {NULL, 0, oclml__att_ds_ld(&s), 0},
                                        .b = {NULL, 0, s.D, 0},
                                        .c = {NULL, 0, s.D, 0},
                                        .a_lower = f.causal};
            char what[64];
            snprintf(what, sizeof what, "head dim %zu, dQ = dS K", D);
            oclml__gemm_warm_desc(ctx, op, what, &g, list);
        }
        const oclml__att_kernel_plan *kernels[] = {&p.delta, &p.dkdv,
                                                   p.dq_gemm_heads ? &p.dq_empty : &p.dq};
        for (size_t j = 0; j < sizeof kernels / sizeof kernels[0]; j++) {
            snprintf(variant, sizeof variant, "head dim %zu, %s", D,
                     KERNEL_NAMES[kernels[j]->kind]);
            oclml__warm_add(list, op, variant, oclml__att_spec(kernels[j]));
        }
    }
    if (!bwd) oclml__attention_lp_fwd_warm(ctx, op, list); /* 16-bit q, k and v, natively */
    if (bwd) oclml__attention_lp_bwd_warm(ctx, op, list);  /* and dout */
}
