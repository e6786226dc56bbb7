/* Attention forward and backward (cl/ops/attention.cl on FMA tiles, attention_fwd_mma.cl and
 * attention_bwd_mma.cl on tensor cores): argument checks, the plan (which kernels, their tiles,
 * the key split of the decode path, the backward's dQ from its own kernel or as a GEMM on dS),
 * and the launches. One program per kernel and variant (head dim, tile, layout, which masks
 * exist): a call compiles only what it runs. */
#include "ops/gemm.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>

#define FILE_CL "attention.cl"
#define MAX_HEAD_DIM 256
#define DC 16 /* head-dim columns a staged chunk of the score products (DC in attention.cl) */
/* The kernels keep their accumulators in registers: NVIDIA's default cap of 64 would spill. */
#define ATT_MAX_REGISTERS 255

typedef struct att_shape {
    size_t B, H, HKV, LQ, LK, D;
    size_t mask_b, mask_h; /* the mask's batch and head extents (1 where broadcast) */
    bool by_position;      /* a causal mask or a window: rows see keys by position */
} att_shape;

/* A kernel's tile: TX x TY work-items, each RQ query rows x RK keys of the score tile; JC rows
 * staged at a time in the accumulating products. */
typedef struct att_tile {
    unsigned tx, ty, rq, rk, jc;
} att_tile;

typedef enum att_kernel {
    K_FWD,
    K_MERGE,
    K_DELTA,
    K_DKDV,
    K_DQ,
    K_DMASK,
    K_DQ_EMPTY,
    K_FWD_MMA,
    K_DKDV_MMA,
    K_DQ_MMA
} att_kernel;
static const char *const KERNEL_NAMES[] = {"oclml_attention_fwd",      "oclml_attention_merge",
                                           "oclml_attention_delta",    "oclml_attention_dkdv",
                                           "oclml_attention_dq",       "oclml_attention_dmask",
                                           "oclml_attention_dq_empty", "oclml_attention_fwd_mma",
                                           "oclml_attention_dkdv_mma", "oclml_attention_dq_mma"};

void oclml_attention_params_init(oclml_attention_params *p) {
    if (!p) return;
    *p = (oclml_attention_params){.struct_size = sizeof *p, .window_left = -1, .window_right = -1};
}

/* ---- argument checks ---- */

static oclml_status check_params(oclml_ctx *ctx, const oclml_attention_params *p) {
    if (p->struct_size != sizeof *p)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "attention params struct_size is %zu, this library's is %zu (call "
                           "oclml_attention_params_init)",
                           p->struct_size, sizeof *p);
    if ((unsigned)p->causal > OCLML_CAUSAL_BOTTOM_RIGHT)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "causal %d is not an oclml_attention_causal", (int)p->causal);
    if ((unsigned)p->layout > OCLML_ATTENTION_BLHD)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "layout %d is not an oclml_attention_layout", (int)p->layout);
    if (!isfinite(p->scale))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "attention scale must be finite");
    if (p->window_left < -1 || p->window_right < -1 || p->window_left > INT32_MAX ||
        p->window_right > INT32_MAX)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "attention windows must be -1 (open) or 0 to 2^31 - 1");
    return OCLML_SUCCESS;
}

/* (batch, heads, length, dim) of a 4-D tensor in the params' layout. */
static oclml_status bhld_of(oclml_ctx *ctx, const oclml_attention_params *p, const oclml_tensor *t,
                            const char *name, size_t out[4]) {
    oclml_status st = oclml__check_tensor(ctx, t, name);
    if (st) return st;
    if (t->ndim != 4)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "attention takes 4-D '%s' (%s)", name,
                           p->layout == OCLML_ATTENTION_BLHD ? "batch, length, heads, dim"
                                                             : "batch, heads, length, dim");
    const bool blhd = p->layout == OCLML_ATTENTION_BLHD;
    out[0] = t->shape[0];
    out[1] = t->shape[blhd ? 2 : 1];
    out[2] = t->shape[blhd ? 1 : 2];
    out[3] = t->shape[3];
    return OCLML_SUCCESS;
}

static oclml_status check_mask(oclml_ctx *ctx, const oclml_tensor *m, att_shape *s) {
    oclml_status st = oclml__check_tensor(ctx, m, "mask");
    if (st) return st;
    const int nd = m->ndim;
    bool ok = (nd == 2 || nd == 4) && m->shape[nd - 2] == s->LQ && m->shape[nd - 1] == s->LK;
    s->mask_b = nd == 4 ? m->shape[0] : 1;
    s->mask_h = nd == 4 ? m->shape[1] : 1;
    ok = ok && (s->mask_b == 1 || s->mask_b == s->B) && (s->mask_h == 1 || s->mask_h == s->H);
    if (!ok)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "mask must be [Lq, Lk] = [%zu, %zu] or [1 or %zu, 1 or %zu, %zu, %zu]",
                           s->LQ, s->LK, s->B, s->H, s->LQ, s->LK);
    return OCLML_SUCCESS;
}

/* Checks q, k, v, the optional tables of params and the sizes the kernels index in 32 bits. */
static oclml_status check_inputs(oclml_ctx *ctx, const oclml_attention_params *p,
                                 const oclml_tensor *q, const oclml_tensor *k,
                                 const oclml_tensor *v, att_shape *s) {
    size_t qs[4], ks[4], vs[4];
    oclml_status st = check_params(ctx, p);
    if (!st) st = bhld_of(ctx, p, q, "q", qs);
    if (!st) st = bhld_of(ctx, p, k, "k", ks);
    if (!st) st = bhld_of(ctx, p, v, "v", vs);
    if (st) return st;
    if (memcmp(ks, vs, sizeof ks))
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "k and v must have the same shape");
    if (ks[0] != qs[0] || ks[3] != qs[3])
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "q, k and v must have the same batch (%zu, %zu) and head dim (%zu, %zu)",
                           qs[0], ks[0], qs[3], ks[3]);
    if (ks[1] == 0 || qs[1] % ks[1])
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "key/value heads (%zu) must divide the query heads (%zu)", ks[1], qs[1]);
    *s = (att_shape){.B = qs[0], .H = qs[1], .HKV = ks[1], .LQ = qs[2], .LK = ks[2], .D = qs[3]};
    if (s->D > MAX_HEAD_DIM)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED, "head dim %zu: at most %d", s->D,
                           MAX_HEAD_DIM);
    /* Rows are addressed as (b H + h) L + i in 32 bits before widening. */
    const size_t L = s->LQ > s->LK ? s->LQ : s->LK;
    if (s->B * s->H * L >= (size_t)INT32_MAX || L >= (size_t)INT32_MAX / 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "attention of %zu x %zu heads x %zu positions: too many rows", s->B,
                           s->H, L);
    if (p->key_lengths && (st = oclml__check_numel(ctx, p->key_lengths, "key_lengths", s->B)))
        return st;
    s->mask_b = s->mask_h = 1;
    if (p->mask && (st = check_mask(ctx, p->mask, s))) return st;
    return OCLML_SUCCESS;
}

/* A window side as the kernels take it: a window reaching past every key is no window, -1, so
 * that the kernels' 32-bit bounds (row + shift -+ window) cannot overflow with windows up to
 * INT32_MAX. */
static cl_int window_side(long w, const att_shape *s) {
    return w >= (long)s->LQ + (long)s->LK ? -1 : (cl_int)w;
}

/* The start of every entry point: params (NULL: the defaults, set in *defaults) and the inputs
 * checked, *s their shape. */
static oclml_status begin_call(oclml_ctx *ctx, const oclml_attention_params **params,
                               oclml_attention_params *defaults, const oclml_tensor *q,
                               const oclml_tensor *k, const oclml_tensor *v, att_shape *s) {
    if (!*params) {
        oclml_attention_params_init(defaults);
        *params = defaults;
    }
    oclml_status st = check_inputs(ctx, *params, q, k, v, s);
    if (st) return st; /* params unread past a struct_size the check refused */
    s->by_position = (*params)->causal != OCLML_CAUSAL_NONE ||
                     window_side((*params)->window_left, s) >= 0 ||
                     window_side((*params)->window_right, s) >= 0;
    return OCLML_SUCCESS;
}

/* Fails when output t overlaps any of the n tensors in others (NULLs skipped). */
static oclml_status check_apart(oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                const oclml_tensor *const *others, int n) {
    for (int i = 0; i < n; i++)
        if (t && others[i] && oclml__overlap(t, others[i]))
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "attention output '%s' overlaps an input or another output", name);
    return OCLML_SUCCESS;
}

/* ---- the plan ---- */

static size_t local_floats(att_kernel kind, att_tile t, size_t D) {
    const size_t bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk, p = bq * (bk + 1);
    size_t stage = DC * (bq + bk + 2);
    if (t.jc * D > stage) stage = t.jc * D;
    const size_t rows = bq * 7; /* three ulong and one int table, in floats */
    switch (kind) {
    case K_FWD:
        return stage + rows + p + bq * t.tx;
    case K_DKDV:
        return stage + rows + 2 * p;
    case K_DQ:
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
static att_tile plan_tile(oclml_ctx *ctx, att_kernel kind, const att_shape *s) {
    att_tile t = {(unsigned)oclml__tune(ctx, OCLML__TUNE_ATTENTION_TILE, 0),
                  (unsigned)oclml__tune(ctx, OCLML__TUNE_ATTENTION_TILE, 1),
                  (unsigned)oclml__tune(ctx, OCLML__TUNE_ATTENTION_TILE, 2),
                  (unsigned)oclml__tune(ctx, OCLML__TUNE_ATTENTION_TILE, 3), 1};
    const size_t wg = ctx->caps.max_work_group_size < 256 ? ctx->caps.max_work_group_size : 256,
                 group_rows = s->H / s->HKV * s->LQ;
    if (!t.tx || !t.ty || !t.rq || !t.rk) {
        const unsigned side = wg >= 256 ? 16 : wg >= 64 ? 8 : wg >= 16 ? 4 : wg >= 4 ? 2 : 1;
        t = (att_tile){side, side, 4, 4, 1};
        if (kind == K_DKDV) t.rq = 2;
        if ((kind == K_FWD || kind == K_MERGE) && group_rows <= DECODE_ROWS) {
            const size_t ty = oclml__pow2_ceil(group_rows) < wg ? oclml__pow2_ceil(group_rows) : 1;
            t = (att_tile){(unsigned)(oclml__pow2_floor(wg) / ty), (unsigned)ty, 1, 1, 1};
        }
    }
    const size_t D = s->D, bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk,
                 side = kind == K_DKDV ? bq : bk, room = DC * (bq + bk + 2) / (D ? D : 1);
    t.jc = (unsigned)oclml__pow2_floor(room < side ? (room ? room : 1) : side);
    while (t.rq > 1 && local_floats(kind, t, D) * 4 > ctx->caps.local_mem_bytes) t.rq /= 2;
    /* Fewer rows may leave the dK/dV side no longer a multiple of JC. */
    while (t.jc > 1 && (kind == K_DKDV ? (size_t)t.ty * t.rq : bk) % t.jc) t.jc /= 2;
    return t;
}

/* The dK/dV kernel also needs its key block a multiple of the work-items along rows (each
 * stores BK / TY keys' gradients). */
static bool tile_fits(oclml_ctx *ctx, att_kernel kind, att_tile t, size_t D) {
    const size_t bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk;
    return (size_t)t.tx * t.ty <= ctx->caps.max_work_group_size &&
           (kind == K_DKDV ? bq : bk) % t.jc == 0 && (kind != K_DKDV || bk % t.ty == 0) &&
           local_floats(kind, t, D) * 4 <= ctx->caps.local_mem_bytes;
}

/* The tensor-core kernels (attention_fwd_mma.cl, attention_bwd_mma.cl): the tuning key
 * attention.mma (-1 auto, 0 never, 1 where the device has TF32 mma.sync, 2 the kernels with the
 * instruction emulated, for tests), by default where the device has them; head dims that are
 * multiples of 8 up to 128 (above 128 up to 256 where the warps share the head dim: mma_wide)
 * and more query rows a key head than the decode tile takes, where the device's work-groups and
 * local memory hold the tile (else the FMA kernels run; each kernel of the backward decides for
 * itself). Work-groups of 4 or 8 warps of 16 rows (mma_warps); score tiles of 16 to 64 columns
 * (mma_columns): on the H100 (2026-11-23) 32 keys ran the head-dim-64 forward 1.08x faster than
 * 64, and 16 keys the head-dim-128 forward 1.05x faster than 32 (which spills registers there). */
#define MMA_WARPS 4
static size_t mma_local_floats(oclml_ctx *ctx, att_kernel kind, size_t D, bool pos, bool emulate,
                               bool async);
static unsigned mma_warps(oclml_ctx *ctx, att_kernel kind, size_t D, bool pos);
static bool dkdv_pairs(oclml_ctx *ctx, size_t D);
static bool dq_pairs(oclml_ctx *ctx, size_t D);
static bool fwd_pairs(oclml_ctx *ctx, size_t D);
static bool split_kv(oclml_ctx *ctx, att_kernel kind, size_t D);
static bool mma_paired(oclml_ctx *ctx, att_kernel kind, size_t D);
static unsigned head_split(oclml_ctx *ctx, att_kernel kind, size_t D);
static size_t dkdv_rows(size_t D);

/* Whether a tensor-core kernel takes head dim D above 128, where the warps must share the head
 * dim to keep their operands in registers: the paired forward, the dK/dV kernel's groups of four
 * and the dQ kernel's (head_split), the last by default only above 192. On the H100 (2026-11-26,
 * B4 H16 L2048, full, against the FMA kernels): dK/dV 21.7 ms against 71.6 at head dim 256, 15.4
 * against 53.3 at 192, 13.1 against 28.2 at 160; dQ 19.4 against 29.1 at 256 but 34.2 against
 * 19.7 at 192 and 22.2 against 16.5 at 160. */
static bool mma_wide(oclml_ctx *ctx, att_kernel kind, size_t D) {
    if (kind != K_DQ_MMA) return head_split(ctx, kind, D) == 2;
    return head_split(ctx, kind, D) == 4 &&
           (oclml__tune(ctx, OCLML__TUNE_ATTENTION_DQ_PAIRS, 0) == 1 || D > 192);
}

/* 0 (FMA kernels), 1 (tensor cores) or 2 (emulated) for a kernel (K_FWD_MMA, K_DKDV_MMA or
 * K_DQ_MMA: the forward, the backward's two); a device whose work-groups or local memory cannot
 * hold the tile takes the FMA kernels. */
static int mma_mode(oclml_ctx *ctx, const att_shape *s, att_kernel kind) {
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
 * 32 in the forward up to head dim 64 and 16 above; in the backward 16 for dQ and 32 for dK/dV:
 * on the H100 (2026-11-24, B4 H16 L4096 D64, staging by asynchronous copies) dK/dV took 14.9 ms
 * with 32 and 15.6 with 16, dQ 10.5 and 9.3 (before those copies, 32 spilled 784 bytes of the
 * dK/dV kernel's registers and ran 1.5% slower). */
static unsigned mma_columns(oclml_ctx *ctx, att_kernel kind, size_t D) {
    const long forced = oclml__tune(
        ctx,
        kind == K_FWD_MMA ? OCLML__TUNE_ATTENTION_MMA_KEYS : OCLML__TUNE_ATTENTION_MMA_BWD_COLS, 0);
    const unsigned most = kind == K_DKDV_MMA ? (unsigned)dkdv_rows(D) : 64;
    if (forced > 0) return forced >= 64 && most >= 64 ? 64 : forced >= 32 && most >= 32 ? 32 : 16;
    if (kind == K_FWD_MMA) return D <= 64 ? 32 : 16;
    return kind == K_DKDV_MMA && D <= 64 ? 32 : 16;
}

/* Warps a work-group of a tensor-core kernel (WARPS in attention_mma.h), 16 query rows (or
 * keys) each: from the tuning key attention.mma_warps (4 or 8) for the forward and the paired
 * backward kernels, by default 8 in the forward above head dim 64 (1.10x faster there on the H100,
 * 1.2x slower at 64; 11.41 against 11.50-11.53 ms at B4 H16 L4096 D128 on 2026-11-27) unless
 * rows see keys by position (pos: causal masks, windows) up to head dim 128 (the paired forward
 * above was timed with 8), where a block of fewer rows leaves
 * fewer warps idle on its last keys (causal D128: 6.03 against 6.09-6.10 ms), and 4 elsewhere
 * (the backward's staged rows fill local memory). */
static unsigned mma_warps(oclml_ctx *ctx, att_kernel kind, size_t D, bool pos) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_MMA_WARPS, 0);
    const bool fewer = pos && D <= 128; /* the paired forward above 128 was timed with 8 */
    const unsigned want = forced > 0                              ? (forced >= 8 ? 8 : 4)
                          : kind == K_FWD_MMA && D > 64 && !fewer ? 8
                                                                  : 4;
    const bool free = kind == K_FWD_MMA || mma_paired(ctx, kind, D);
    return free && 32 * want <= ctx->caps.max_work_group_size ? want : MMA_WARPS;
}

/* The dK/dV kernel's DKDV_PAIRS (attention_mma.h): the tuning key attention.dkdv_pairs, by
 * default above head dim 64, where one warp's K, V, dK and dV spill registers. On the H100
 * (2026-11-26, B4 H16 L4096 D128) unpaired: 2.7 KB spilled a work-item, 64.1 ms; paired, no
 * spill: 37.2 ms (8 warps: the same); at head dim 64 paired 15.3 ms against 14.9. */
static bool dkdv_pairs(oclml_ctx *ctx, size_t D) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_DKDV_PAIRS, 0);
    return forced >= 0 ? forced == 1 : D > 64;
}

/* The dQ kernel's DQ_PAIRS (attention_mma.h): the tuning key attention.dq_pairs, by default
 * above head dim 64, where one warp's Q, dO and dQ spill registers; head dims that are multiples
 * of 16. On the H100 (2026-11-26, B4 H16 L4096 D128) unpaired: 1 KB spilled a work-item,
 * 33.5 ms; paired, no spill: 21.0 ms with 4 warps, 26.4 with 8; at head dim 64 paired 11.8 ms
 * against 9.4. */
static bool dq_pairs(oclml_ctx *ctx, size_t D) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_DQ_PAIRS, 0);
    return D % 16 == 0 && (forced >= 0 ? forced == 1 : D > 64); /* halves of whole 8-wide steps */
}

/* The forward's FWD_PAIRS (attention_mma.h): the tuning key attention.fwd_pairs, by default
 * above head dim 128 (where one warp's Q and O do not fit its registers); head dims that are
 * multiples of 16. There the double buffers of K and V pass 48 KiB: the paired forward keeps one
 * of each, refilled as soon as read (split_kv). On the H100 (2026-11-26, B4 H16 L2048), against
 * the FMA kernels: head dim 256 8.0 ms against 15.3 (causal 4.4 against 8.9), 192 5.7 against
 * 12.6, 160 4.8 against 10.4; with K and V staged without the asynchronous copies, 12.0, 14.1 and
 * 11.5 ms. At 64 and 128, where the unpaired kernel runs, pairs lose 20-25%. */
static bool fwd_pairs(oclml_ctx *ctx, size_t D) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_FWD_PAIRS, 0);
    return D % 16 == 0 && (forced >= 0 ? forced == 1 : D > 128);
}

/* The head dims and warps the float4 fragment reads take (vec_fragments): multiples of 32,
 * warps that hold the whole head dim (the dK/dV kernel's pairs do: one product each) or, in the
 * dK/dV kernel's fours and the paired forward, a half of it that is a multiple of 32. */
static bool vec_shape(oclml_ctx *ctx, att_kernel kind, size_t D) {
    return D % 32 == 0 &&
           (kind == K_DQ_MMA ? !dq_pairs(ctx, D) : D / head_split(ctx, kind, D) % 32 == 0);
}

/* Whether a tensor-core kernel runs with its warps in pairs (DKDV_PAIRS, DQ_PAIRS, FWD_PAIRS). */
static bool mma_paired(oclml_ctx *ctx, att_kernel kind, size_t D) {
    return (kind == K_DKDV_MMA && dkdv_pairs(ctx, D)) || (kind == K_DQ_MMA && dq_pairs(ctx, D)) ||
           (kind == K_FWD_MMA && fwd_pairs(ctx, D));
}

/* Whether a tensor-core kernel staging by asynchronous copies keeps one K and one V buffer, each
 * refilled once read (SPLIT_KV in attention_mma.h), rather than two of each: the paired
 * forward, whose double buffers pass 48 KiB above head dim 128. */
static bool split_kv(oclml_ctx *ctx, att_kernel kind, size_t D) {
    return kind == K_FWD_MMA && fwd_pairs(ctx, D);
}

/* How many warps share the head dim of a group's operands and accumulators, a part each
 * (HEAD_SPLIT in attention_mma.h): 2 in the paired forward; in the paired dQ kernel 2, or 4
 * above head dim 128 (head dims that are multiples of 32); in the paired dK/dV kernel 2 above
 * 128 (multiples of 16: its groups of four warps on 16 keys); else 1. */
static unsigned head_split(oclml_ctx *ctx, att_kernel kind, size_t D) {
    if (!mma_paired(ctx, kind, D)) return 1;
    if (kind == K_FWD_MMA) return 2;
    if (kind == K_DQ_MMA) return D > 128 && D % 32 == 0 ? 4 : 2;
    return D > 128 && D % 16 == 0 ? 2 : 1;
}

/* Keys (dK/dV) or query rows (forward, dQ) a work-group of a tensor-core kernel takes: 16 a
 * warp, or 16 a group of the warps that share them (two on the paired products, more on parts
 * of the head dim). */
static unsigned mma_block(oclml_ctx *ctx, att_kernel kind, size_t D, bool pos) {
    const unsigned share =
        (kind == K_DKDV_MMA && mma_paired(ctx, kind, D) ? 2 : 1) * head_split(ctx, kind, D);
    return 16 * mma_warps(ctx, kind, D, pos) / share;
}

/* Query rows the dK/dV kernel stages at a time (BQ in attention_mma.h): 64, 32 above head dim
 * 64, 16 above 128 (Q and dO rows in 48 KiB). */
static size_t dkdv_rows(size_t D) { return D > 128 ? 16 : D > 64 ? 32 : 64; }

/* async: the K and V blocks double-buffered (the forward and dQ kernels' ASYNC_KV). */
static size_t mma_local_floats(oclml_ctx *ctx, att_kernel kind, size_t D, bool pos, bool emulate,
                               bool async) {
    /* rows: the row tables of a block's query rows; extra: the emulation's exchange buffers and
     * 16 floats for the padding a compiler may put before the 16-byte aligned arrays. */
    const size_t warps = mma_warps(ctx, kind, D, pos), bn = mma_columns(ctx, kind, D),
                 extra = (emulate ? warps * (16 * 8 + 8 * 8 + 32) : 0) + 16,
                 kv = async && !split_kv(ctx, kind, D) ? 2 : 1;
    /* Each sharing warp's part of S (and of dP) */
    const size_t parts = head_split(ctx, kind, D) > 1 ? warps * bn * 16 : 0;
    if (kind == K_FWD_MMA) /* K's rows 12 floats longer where the float4 forward may run */
        return kv * bn * (2 * (D + 4) + (vec_shape(ctx, kind, D) ? 12 : 0)) +
               mma_block(ctx, kind, D, pos) * 7 + parts + extra;
    if (kind == K_DQ_MMA)
        return kv * 2 * bn * (D + 4) + mma_block(ctx, kind, D, pos) * 7 + 2 * parts + extra;
    /* P tiles: 2 x groups x KTILES x 128 floats */
    const size_t staged = dkdv_rows(D),
                 p_tiles =
                     dkdv_pairs(ctx, D) ? 2 * (mma_block(ctx, kind, D, pos) / 16) * bn * 16 : 0;
    return 2 * staged * (D + 4) + 2 * staged + staged * 7 + p_tiles + parts + extra;
}

static oclml__program_spec spec_of(att_kernel kind, att_tile t, size_t D, bool blhd, bool mask,
                                   bool keylen, char *defines, size_t len) {
    snprintf(defines, len,
             "-DHEAD_DIM=%zu -DTX=%u -DTY=%u -DRQ=%u -DRK=%u -DDC=%d -DJC=%u -DLAYOUT_BLHD=%d "
             "-DHAS_MASK=%d -DHAS_KEYLEN=%d",
             D, t.tx, t.ty, t.rq, t.rk, DC, t.jc, blhd, mask, keylen);
    return (oclml__program_spec){FILE_CL, defines, KERNEL_NAMES[kind], ATT_MAX_REGISTERS};
}

/* What every launch of one call shares: the shape, the tables, the geometry arguments. */
typedef struct att_call {
    oclml_ctx *ctx;
    const oclml_attention_params *p;
    att_shape s;
    cl_uint B, H, HKV, LQ, LK;
    float scale;
    cl_int shift, wl, wr;
    cl_ulong mask_bstride, mask_hstride;
    cl_mem mask, keylen;
    cl_ulong mask_off, keylen_off;
    bool kv_vec; /* K's and V's rows float4-aligned (the asynchronous copies) */
    bool qd_vec; /* Q's and dO's rows float4-aligned (the dK/dV kernel's copies) */
} att_call;

/* dout: the backward's (NULL in the forward). */
static att_call call_of(oclml_ctx *ctx, const oclml_attention_params *p, att_shape s,
                        const oclml_tensor *q, const oclml_tensor *k, const oclml_tensor *v,
                        const oclml_tensor *dout) {
    att_call c = {.ctx = ctx, .p = p, .s = s};
    c.kv_vec = s.D % 4 == 0 && oclml__elem_offset(k) % 4 == 0 && oclml__elem_offset(v) % 4 == 0;
    c.qd_vec =
        s.D % 4 == 0 && oclml__elem_offset(q) % 4 == 0 && dout && oclml__elem_offset(dout) % 4 == 0;
    c.B = (cl_uint)s.B, c.H = (cl_uint)s.H, c.HKV = (cl_uint)s.HKV, c.LQ = (cl_uint)s.LQ,
    c.LK = (cl_uint)s.LK;
    c.scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)s.D));
    c.shift = p->causal == OCLML_CAUSAL_BOTTOM_RIGHT ? (cl_int)s.LK - (cl_int)s.LQ : 0;
    c.wl = window_side(p->window_left, &s);
    c.wr = p->causal != OCLML_CAUSAL_NONE ? 0 : window_side(p->window_right, &s);
    c.mask_bstride = s.mask_b > 1 ? (cl_ulong)(s.mask_h * s.LQ * s.LK) : 0;
    c.mask_hstride = s.mask_h > 1 ? (cl_ulong)(s.LQ * s.LK) : 0;
    c.mask = p->mask ? p->mask->mem : NULL;
    c.mask_off = p->mask ? oclml__elem_offset(p->mask) : 0;
    c.keylen = p->key_lengths ? p->key_lengths->mem : NULL;
    c.keylen_off = p->key_lengths ? oclml__elem_offset(p->key_lengths) : 0;
    return c;
}

/* Appends the geometry arguments (ATT_GEOM) to args. */
static unsigned geom_args(const att_call *c, oclml__arg *args, unsigned n) {
    const oclml__arg g[] = {OCLML_ARG(c->B),           OCLML_ARG(c->H),
                            OCLML_ARG(c->HKV),         OCLML_ARG(c->LQ),
                            OCLML_ARG(c->LK),          OCLML_ARG(c->scale),
                            OCLML_ARG(c->shift),       OCLML_ARG(c->wl),
                            OCLML_ARG(c->wr),          OCLML_ARG(c->mask_bstride),
                            OCLML_ARG(c->mask_hstride)};
    for (unsigned i = 0; i < sizeof g / sizeof g[0]; i++) args[n++] = g[i];
    return n;
}

/* Whether a tensor-core kernel stages by asynchronous copies (ASYNC_KV in attention_mma.h):
 * the forward and dQ kernels their K and V blocks on float4-aligned K and V rows, double-buffered
 * where the second buffers fit the local memory (the paired forward: one buffer each, refilled
 * by turns, split_kv); the dK/dV kernel its Q and dO rows, on float4-aligned ones; unless the
 * tuning key attention.async is 0 (the emulated kernels copy at once, testing the same code
 * everywhere). */
static bool kv_async(const att_call *c, att_kernel kind, int mode) {
    if (oclml__tune(c->ctx, OCLML__TUNE_ATTENTION_ASYNC, 0) == 0) return false;
    if (kind == K_DKDV_MMA) return c->qd_vec;
    return (kind == K_FWD_MMA || kind == K_DQ_MMA) && c->kv_vec &&
           mma_local_floats(c->ctx, kind, c->s.D, c->s.by_position, mode == 2, true) * 4 <=
               c->ctx->caps.local_mem_bytes;
}

/* Whether a tensor-core kernel reads its staged operands' fragment values as float4s
 * (VEC_FRAGMENTS in attention_mma.h: K and V in the forward and dQ, Q and dO in dK/dV): head dims
 * that are multiples of 32, the warps of vec_shape, staging by asynchronous copies; the tuning key
 * attention.vec_fragments 0 turns it off. On the
 * H100 (2026-11-27, B4 H16 L4096, two rounds) the forward went 5.93-6.03 -> 5.76-5.78 ms at head
 * dim 64 (causal 3.11-3.12 -> 3.00-3.02) and 13.44 -> 12.68 at 128 (causal 7.25 -> 6.84-6.91);
 * at head dim 64 dQ 8.88-8.94 -> 8.63-8.69 (causal 4.72-4.86 -> 4.65-4.67) and dK/dV
 * 14.10-14.11 -> 12.74-12.81 (causal 7.67-7.71 -> 6.87-6.89). The paired dK/dV kernel, each
 * warp holding the whole head dim of its operand, reads so too: at head dim 128 29.5-29.7 ms
 * against 35.2-35.5 (causal 15.4 against 18.1; H200, 2026-11-27 12:03 UTC, two rounds). The
 * paired dQ kernel keeps float reads (its warps hold half the head dim): dQ unpaired with
 * float4s at 128 ran 32.4 ms against 20.2 paired. The paired forward (head dims 192 and 256,
 * each warp of a pair half the head dim) reads K and V so: B4 H16 L2048 full 7.85-7.89 ->
 * 6.67-6.69 ms at 256 (causal 4.12-4.13 -> 3.49), 5.37-5.43 -> 4.95-4.97 at 192 (H100,
 * 2026-11-27 16:34 UTC, two rounds); the dK/dV kernel's fours at 256, dK/dV alone,
 * 20.75-20.77 -> 19.25 ms (15:28 UTC). */
static bool vec_fragments(const att_call *c, att_kernel kind, int mode) {
    return vec_shape(c->ctx, kind, c->s.D) &&
           oclml__tune(c->ctx, OCLML__TUNE_ATTENTION_VEC_FRAGMENTS, 0) != 0 &&
           kv_async(c, kind, mode);
}

/* Column tiles whose B values a tensor-core kernel's accumulating products read together
 * (ACC_BATCH in attention_mma.h): the tuning key attention.mma_col_batch (1, 2, 4, 8 or 16), by
 * default 8 in the forward, 8 in dQ up to head dim 64 and 4 above, 2 in dK/dV. On the H100
 * (2026-11-27, B4 H16 L4096, full; 2 / 4 / 8) the forward took 6.36 / 6.03-6.08 / 5.99-6.00 ms at
 * head dim 64 and 14.2-14.3 / 14.1 / 13.7 at 128; dQ 8.98 / 8.94 / 8.81 and 20.2 / 19.9 / 20.0;
 * dK/dV 14.08-14.10 / 14.07 / 14.36 and 33.95-33.98 / 34.5 / 35.5 (more values in flight, fewer
 * registers left: dK/dV already spills at head dim 64). */
static unsigned col_batch(oclml_ctx *ctx, att_kernel kind, size_t D) {
    const long forced = oclml__tune(ctx, OCLML__TUNE_ATTENTION_MMA_COL_BATCH, 0);
    if (forced > 0)
        return forced >= 16 ? 16 : forced >= 8 ? 8 : forced >= 4 ? 4 : forced >= 2 ? 2 : 1;
    if (kind == K_FWD_MMA) return 8;
    return kind == K_DQ_MMA ? (D <= 64 ? 8 : 4) : 2;
}

/* The program of a tensor-core kernel for head dim D (its tile in *t). */
static oclml__program_spec mma_spec_of(oclml_ctx *ctx, att_kernel kind, int mode, size_t D,
                                       bool pos, bool blhd, bool mask, bool keylen, bool async,
                                       bool vec, bool ds_out, att_tile *t, char *defines,
                                       size_t len) {
    const unsigned bn = mma_columns(ctx, kind, D), warps = mma_warps(ctx, kind, D, pos);
    *t = (att_tile){16, 2 * warps, 8, bn / 16, 1}; /* 32 warps work-items, 16 warps rows */
    const bool pairs = mma_paired(ctx, kind, D);
    t->rq = 8 * mma_block(ctx, kind, D, pos) / (16 * warps); /* 16 warps rows, or fewer: shared */
    snprintf(defines, len,
             "-DHEAD_DIM=%zu -DBN=%u -DWARPS=%u -DMMA_EMULATE=%d -DLAYOUT_BLHD=%d -DHAS_MASK=%d "
             "-DHAS_KEYLEN=%d -DASYNC_KV=%d -DDKDV_PAIRS=%d -DDQ_PAIRS=%d -DFWD_PAIRS=%d "
             "-DSPLIT_KV=%d -DHEAD_SPLIT=%u -DBQ=%zu -DACC_BATCH=%u -DVEC_FRAGMENTS=%d -DDS_OUT=%d",
             D, bn, warps, mode == 2, blhd, mask, keylen, async, pairs && kind == K_DKDV_MMA,
             pairs && kind == K_DQ_MMA, pairs && kind == K_FWD_MMA, async && split_kv(ctx, kind, D),
             head_split(ctx, kind, D),
             kind == K_DKDV_MMA ? dkdv_rows(D) : (size_t)mma_block(ctx, kind, D, pos),
             col_batch(ctx, kind, D), vec, ds_out && kind == K_DKDV_MMA);
    return (oclml__program_spec){kind == K_FWD_MMA ? "attention_fwd_mma.cl"
                                                   : "attention_bwd_mma.cl",
                                 defines, KERNEL_NAMES[kind], ATT_MAX_REGISTERS};
}

/* mma_mode has checked that the tile fits the device. */
/* ds_out: the dK/dV kernel writing dS for the dQ GEMM (DS_OUT). */
static oclml_status mma_kernel_of(const att_call *c, att_kernel kind, int mode, bool ds_out,
                                  att_tile *t, cl_kernel *k) {
    char defines[256];
    const oclml__program_spec spec = mma_spec_of(
        c->ctx, kind, mode, c->s.D, c->s.by_position, c->p->layout == OCLML_ATTENTION_BLHD,
        c->mask != NULL, c->keylen != NULL, kv_async(c, kind, mode), vec_fragments(c, kind, mode),
        ds_out, t, defines, sizeof defines);
    return oclml__kernel(c->ctx, &spec, spec.kernels, k);
}

static oclml_status kernel_of(const att_call *c, att_kernel kind, att_tile *t, cl_kernel *k) {
    *t = plan_tile(c->ctx, kind, &c->s);
    if (!tile_fits(c->ctx, kind, *t, c->s.D))
        return oclml__fail(c->ctx, OCLML_ERR_UNSUPPORTED,
                           "attention tile %ux%u work-items, %ux%u scores each, head dim %zu: "
                           "more than the device's work-group or local memory, or (dK/dV) "
                           "keys not a multiple of the work-items along rows",
                           t->tx, t->ty, t->rq, t->rk, c->s.D);
    char defines[256];
    const oclml__program_spec spec =
        spec_of(kind, *t, c->s.D, c->p->layout == OCLML_ATTENTION_BLHD, c->mask != NULL,
                c->keylen != NULL, defines, sizeof defines);
    return oclml__kernel(c->ctx, &spec, spec.kernels, k);
}

/* Launches a tiled kernel over (blocks work-groups, dim1, dim2). */
static oclml_status launch_tiled(const att_call *c, cl_kernel k, att_tile t, const oclml__arg *a,
                                 unsigned n, size_t blocks, size_t dim1, size_t dim2) {
    const size_t nt = (size_t)t.tx * t.ty, global[3] = {blocks * nt, dim1, dim2},
                 local[3] = {nt, 1, 1};
    return oclml__launch(c->ctx, k, a, n, 3, global, local, NULL);
}

static oclml_status launch_rows(const att_call *c, cl_kernel k, const oclml__arg *a, unsigned n,
                                size_t items) {
    size_t local = c->ctx->caps.max_work_group_size < 64 ? c->ctx->caps.max_work_group_size : 64;
    size_t global = (items + local - 1) / local * local;
    return oclml__launch(c->ctx, k, a, n, 1, &global, &local, NULL);
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* Key splits of the forward: the tuning key attention.splits, else where the row blocks leave
 * compute units idle (decoding: a few rows against long keys), enough splits to give every
 * compute unit four work-groups, each at least two key blocks. */
static size_t plan_splits(const att_call *c, att_tile t) {
    const size_t bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk;
    const size_t groups = ceil_div(c->s.H / c->s.HKV * c->s.LQ, bq) * c->s.B * c->s.HKV,
                 key_blocks = ceil_div(c->s.LK, bk);
    long forced = oclml__tune(c->ctx, OCLML__TUNE_ATTENTION_SPLITS, 0);
    size_t splits = forced > 0 ? (size_t)forced : 1;
    if (forced <= 0 && c->ctx->caps.is_gpu) {
        const size_t want = 4 * (size_t)c->ctx->caps.compute_units;
        if (groups < want) splits = ceil_div(want, groups);
        if (splits > key_blocks / 2) splits = key_blocks / 2 ? key_blocks / 2 : 1;
    }
    if (splits > key_blocks) splits = key_blocks;
    if (splits > 65535) splits = 65535;
    return splits;
}

static oclml_status forward(const att_call *c, const oclml_tensor *q, const oclml_tensor *k,
                            const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse) {
    att_tile t;
    cl_kernel kf, km = NULL;
    const int mma = mma_mode(c->ctx, &c->s, K_FWD_MMA);
    oclml_status st =
        mma ? mma_kernel_of(c, K_FWD_MMA, mma, false, &t, &kf) : kernel_of(c, K_FWD, &t, &kf);
    if (st) return st;
    const size_t bq = (size_t)t.ty * t.rq, bk = (size_t)t.tx * t.rk;
    const size_t splits = plan_splits(c, t), key_blocks = ceil_div(c->s.LK, bk);
    att_tile tm;
    if (splits > 1 && (st = kernel_of(c, K_MERGE, &tm, &km))) return st;
    cl_ulong rows_all = (cl_ulong)(c->s.B * c->s.H * c->s.LQ), q_off = oclml__elem_offset(q),
             k_off = oclml__elem_offset(k), v_off = oclml__elem_offset(v),
             o_off = oclml__elem_offset(o), lse_off = lse ? oclml__elem_offset(lse) : 0;
    cl_uint has_lse = lse != NULL, n_split = (cl_uint)splits,
            per_split = (cl_uint)ceil_div(key_blocks, splits);
    cl_mem lse_mem = lse ? lse->mem : NULL, part = NULL;
    if (splits > 1 &&
        (st = oclml__scratch_get(c->ctx, splits * rows_all * (c->s.D + 1) * sizeof(float), &part)))
        return st;
    oclml__arg a[32];
    unsigned n = 0;
    a[n++] = OCLML_ARG(q->mem), a[n++] = OCLML_ARG(q_off), a[n++] = OCLML_ARG(k->mem),
    a[n++] = OCLML_ARG(k_off), a[n++] = OCLML_ARG(v->mem), a[n++] = OCLML_ARG(v_off),
    a[n++] = OCLML_ARG(o->mem), a[n++] = OCLML_ARG(o_off), a[n++] = OCLML_ARG(lse_mem),
    a[n++] = OCLML_ARG(lse_off), a[n++] = OCLML_ARG(has_lse), a[n++] = OCLML_ARG(c->mask),
    a[n++] = OCLML_ARG(c->mask_off), a[n++] = OCLML_ARG(c->keylen),
    a[n++] = OCLML_ARG(c->keylen_off), a[n++] = OCLML_ARG(part), a[n++] = OCLML_ARG(rows_all),
    a[n++] = OCLML_ARG(n_split), a[n++] = OCLML_ARG(per_split);
    n = geom_args(c, a, n);
    st = launch_tiled(c, kf, t, a, n, ceil_div(c->s.H / c->s.HKV * c->s.LQ, bq), c->s.B * c->s.HKV,
                      splits);
    if (!st && splits > 1) {
        const oclml__arg m[] = {OCLML_ARG(part),    OCLML_ARG(rows_all), OCLML_ARG(n_split),
                                OCLML_ARG(o->mem),  OCLML_ARG(o_off),    OCLML_ARG(lse_mem),
                                OCLML_ARG(lse_off), OCLML_ARG(has_lse),  OCLML_ARG(c->H),
                                OCLML_ARG(c->LQ)};
        st = launch_rows(c, km, m, sizeof m / sizeof m[0], rows_all * c->s.D);
    }
    if (part) oclml__scratch_put(c->ctx, part);
    return st;
}

oclml_status oclml_attention(oclml_ctx *ctx, const oclml_attention_params *params,
                             const oclml_tensor *q, const oclml_tensor *k, const oclml_tensor *v,
                             oclml_tensor *o, oclml_tensor *lse) {
    oclml_status st = oclml__check_ctx(ctx);
    oclml_attention_params defaults;
    att_shape s;
    if (!st) st = begin_call(ctx, &params, &defaults, q, k, v, &s);
    if (st) return st;
    st = oclml__check_same_shape(ctx, o, "o", q, "q");
    if (!st && lse) {
        const size_t want[3] = {s.B, s.H, s.LQ};
        st = oclml__check_dims(ctx, lse, "lse", 3, want);
    }
    const oclml_tensor *in[] = {q, k, v, params->mask, params->key_lengths, lse};
    if (!st) st = check_apart(ctx, o, "o", in, 6);
    if (!st) st = check_apart(ctx, lse, "lse", in, 5);
    if (st) return st;
    const att_call c = call_of(ctx, params, s, q, k, v, NULL);
    return forward(&c, q, k, v, o, lse);
}

/* Floats a row of the dS workspace: Lk rounded up to a float4 (the GEMM's aligned reads). */
static size_t ds_ld(const att_shape *s) { return (s->LK + 3) / 4 * 4; }

/* Bytes of one key head's dS in the workspace: its H / HKV Lq stacked rows. */
static size_t ds_head_bytes(const att_shape *s) {
    return s->H / s->HKV * s->LQ * ds_ld(s) * sizeof(float);
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
 * grouped query heads unless every key head fits one chunk. On the H100 (2026-11-27, backward
 * alone, dQ kernel -> GEMM on dS): B4 H16 L4096 full 21.3 -> 17.3 ms at head dim 64, 54.7 ->
 * 42.1 at 128; causal 11.1 -> 11.7 at 64 (four chunks), 27.6 -> 23.8 at 128; B8 H16 L1024 D64
 * causal (one chunk) 1.69 -> 1.50; B2 H32 Hkv8 L4096 D128 full 55.1 -> 42.7, causal 28.8 ->
 * 33.1; B4 H16 L2048 D256 full 40.3 -> 25.1, causal 21.8 -> 12.7. */
static size_t dq_gemm_heads(const att_call *c, int dkdv_mma) {
    const long forced = oclml__tune(c->ctx, OCLML__TUNE_ATTENTION_DQ_GEMM, 0);
    if (!forced || !dkdv_mma || c->keylen) return 0;
    const size_t total = c->s.B * c->s.HKV, head_bytes = ds_head_bytes(&c->s);
    size_t heads = c->ctx->caps.workspace_bytes / head_bytes;
    /* An explicit N may pass the default workspace, up to the device's largest buffer. */
    if (forced > 0) heads = (size_t)forced;
    if (c->ctx->info.max_alloc_bytes && heads > c->ctx->info.max_alloc_bytes / head_bytes)
        heads = c->ctx->info.max_alloc_bytes / head_bytes;
    if (forced < 0 && c->s.by_position && (c->s.D <= 64 || c->s.H > c->s.HKV) && heads < total)
        return 0;
    return heads < total ? heads : total;
}

oclml_status oclml_attention_plan(oclml_ctx *ctx, const oclml_attention_params *params,
                                  const oclml_tensor *q, const oclml_tensor *k,
                                  const oclml_tensor *v, char *text, size_t len) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st && (!text || len == 0))
        st = oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "text buffer is NULL or empty");
    oclml_attention_params defaults;
    att_shape s;
    if (!st) st = begin_call(ctx, &params, &defaults, q, k, v, &s);
    if (st) return st;
    /* dO taken to be laid out as Q, as the forward's output is. */
    const att_call c = call_of(ctx, params, s, q, k, v, q);
    const int fwd_mma = mma_mode(ctx, &s, K_FWD_MMA), dkdv_mma = mma_mode(ctx, &s, K_DKDV_MMA),
              dq_mma = mma_mode(ctx, &s, K_DQ_MMA);
    char fwd[192], bwd[288];
    if (fwd_mma) {
        snprintf(fwd, sizeof fwd, "%s, %u rows x %u keys a block%s%s",
                 fwd_mma == 2 ? "3xTF32 tensor cores (emulated)" : "3xTF32 tensor cores",
                 mma_block(ctx, K_FWD_MMA, s.D, s.by_position), mma_columns(ctx, K_FWD_MMA, s.D),
                 fwd_pairs(ctx, s.D) ? " (warps paired on 16 rows)" : "",
                 !kv_async(&c, K_FWD_MMA, fwd_mma) ? ""
                 : split_kv(ctx, K_FWD_MMA, s.D)
                     ? (vec_fragments(&c, K_FWD_MMA, fwd_mma)
                            ? ", K and V copied ahead in turn, read as float4s"
                            : ", K and V copied ahead in turn")
                 : vec_fragments(&c, K_FWD_MMA, fwd_mma)
                     ? ", the next copied ahead, K and V read as float4s"
                     : ", the next copied ahead");
    } else {
        const att_tile t = plan_tile(ctx, K_FWD, &s);
        const size_t splits = plan_splits(&c, t);
        snprintf(fwd, sizeof fwd, "FMA tiles %ux%u of %ux%u scores%s", t.tx, t.ty, t.rq, t.rk,
                 splits > 1 ? ", keys split" : "");
        if (splits > 1) {
            const size_t n = strlen(fwd);
            snprintf(fwd + n, sizeof fwd - n, " %zu ways, merged by log-sum-exp", splits);
        }
    }
    /* Each backward kernel's engine, block and grouping; one engine named once. */
    const att_tile t = plan_tile(ctx, K_DKDV, &s), tq = plan_tile(ctx, K_DQ, &s);
    char engine[2][48], dkdv[96], dq[80];
    const int modes[2] = {dkdv_mma, dq_mma};
    const att_tile tiles[2] = {t, tq};
    for (int i = 0; i < 2; i++)
        if (modes[i])
            snprintf(engine[i], sizeof engine[i], "%s",
                     modes[i] == 2 ? "3xTF32 tensor cores (emulated)" : "3xTF32 tensor cores");
        else
            snprintf(engine[i], sizeof engine[i], "FMA tiles %ux%u", tiles[i].tx, tiles[i].ty);
    const bool dkdv_vec = dkdv_mma && vec_fragments(&c, K_DKDV_MMA, dkdv_mma);
    snprintf(dkdv, sizeof dkdv, "dK/dV per %u keys%s%s",
             dkdv_mma ? mma_block(ctx, K_DKDV_MMA, s.D, s.by_position) : t.tx * t.rk,
             !dkdv_mma                              ? ""
             : head_split(ctx, K_DKDV_MMA, s.D) > 1 ? " (four warps on 16 keys)"
             : dkdv_pairs(ctx, s.D)                 ? " (warps paired on 16 keys)"
                                                    : "",
             dkdv_vec ? ", Q and dO read as float4s" : "");
    snprintf(dq, sizeof dq, "dQ per %u rows%s",
             dq_mma ? mma_block(ctx, K_DQ_MMA, s.D, s.by_position) : tq.ty * tq.rq,
             dq_mma && vec_fragments(&c, K_DQ_MMA, dq_mma) ? ", K and V read as float4s" : "");
    const size_t heads = dq_gemm_heads(&c, dkdv_mma); /* with dK and dV wanted */
    if (heads) {
        snprintf(dq, sizeof dq, "dQ = dS K by GEMM, %zu key head%s at a time", heads,
                 heads > 1 ? "s" : "");
        strcpy(engine[1], engine[0]);
    }
    if (!strcmp(engine[0], engine[1]))
        snprintf(bwd, sizeof bwd, "%s, %s, %s", engine[0], dkdv, dq);
    else
        snprintf(bwd, sizeof bwd, "%s on %s, %s on %s", dkdv, engine[0], dq, engine[1]);
    snprintf(text, len, "forward: %s; backward: %s", fwd, bwd);
    return OCLML_SUCCESS;
}

/* ---- backward ---- */

/* The backward's arguments before each kernel's own (BWD_ARGS). */
typedef struct bwd_args {
    cl_mem q, k, v, dout, lse, delta;
    cl_ulong q_off, k_off, v_off, dout_off, lse_off;
} bwd_args;

static unsigned put_bwd_args(const att_call *c, const bwd_args *b, oclml__arg *a) {
    unsigned n = 0;
    a[n++] = OCLML_ARG(b->q), a[n++] = OCLML_ARG(b->q_off), a[n++] = OCLML_ARG(b->k),
    a[n++] = OCLML_ARG(b->k_off), a[n++] = OCLML_ARG(b->v), a[n++] = OCLML_ARG(b->v_off),
    a[n++] = OCLML_ARG(b->dout), a[n++] = OCLML_ARG(b->dout_off), a[n++] = OCLML_ARG(b->lse),
    a[n++] = OCLML_ARG(b->lse_off), a[n++] = OCLML_ARG(b->delta), a[n++] = OCLML_ARG(c->mask),
    a[n++] = OCLML_ARG(c->mask_off), a[n++] = OCLML_ARG(c->keylen),
    a[n++] = OCLML_ARG(c->keylen_off);
    return n;
}

/* dQ = scale dS K of key heads c0 .. c1 - 1 (b HKV + hkv, in that order) from their dS in the
 * workspace ds, c0's first: batched GEMMs over key heads, the chunk's in BHLD, each batch
 * entry's in BLHD. In BHLD a key head's H / HKV query heads are contiguous rows of dQ, as of dS:
 * one product of the stacked rows, unless a causal mask or a right window bands dS (query i sees
 * no key past i + shift + wr: the GEMM reads a block of rows only up to its band), then one per
 * query head of the group, as in BLHD. With band_rows, runs nothing and sets *band_rows to the
 * tallest row block of those products that read dS only up to their band (0 if any reads it
 * all): the dK/dV kernel then leaves out the zeros past it. */
static oclml_status dq_from_ds(const att_call *c, const bwd_args *b, cl_mem ds, size_t c0,
                               size_t c1, oclml_tensor *dq, size_t *band_rows) {
    const att_shape *s = &c->s;
    const size_t ld = ds_ld(s), G = s->H / s->HKV, rows = G * s->LQ, D = s->D,
                 dq_off = oclml__elem_offset(dq);
    const bool blhd = c->p->layout == OCLML_ATTENTION_BLHD, banded = c->wr >= 0,
               stacked = !blhd && (!banded || G == 1);
    oclml__gemm_desc g = {.m = stacked ? rows : s->LQ,
                          .n = D,
                          .k = s->LK,
                          .alpha = c->scale,
                          .a_lower = banded,
                          .a_band = (long)c->shift + c->wr};
    oclml_status st = OCLML_SUCCESS;
    for (size_t u = c0; u < c1 && !st;) {
        const size_t bi = u / s->HKV, h0 = u % s->HKV,
                     u1 = blhd && c1 - u > s->HKV - h0 ? u + (s->HKV - h0) : c1;
        g.batch = u1 - u;
        for (size_t j = 0; j < (stacked ? 1 : G) && !st; j++) {
            g.a = (oclml__matrix){ds, ((u - c0) * rows + j * s->LQ) * ld, ld, rows * ld};
            if (blhd) {
                g.b =
                    (oclml__matrix){b->k, b->k_off + (bi * s->LK * s->HKV + h0) * D, s->HKV * D, D};
                g.c = (oclml__matrix){dq->mem, dq_off + (bi * s->LQ * s->H + h0 * G + j) * D,
                                      s->H * D, G * D};
            } else {
                g.b = (oclml__matrix){b->k, b->k_off + u * s->LK * D, D, s->LK * D};
                g.c = (oclml__matrix){dq->mem, dq_off + (u * rows + j * s->LQ) * D, D, rows * D};
            }
            if (band_rows) { /* the tallest block, 0 if any product reads every column */
                const size_t h = oclml__gemm_band_rows(c->ctx, &g);
                *band_rows = u == c0 && j == 0   ? h
                             : !h || !*band_rows ? 0
                             : h > *band_rows    ? h
                                                 : *band_rows;
            } else {
                st = oclml__gemm(c->ctx, &g);
            }
        }
        u = u1;
    }
    return st;
}

/* dK and dV (the dK/dV kernel over every key head) and, with heads > 0, dQ from dS: the key
 * heads taken `heads` at a time, each chunk's dS written to the workspace and multiplied by K. */
static oclml_status dkdv(const att_call *c, const bwd_args *b, int mode, size_t heads,
                         oclml_tensor *dq, cl_mem dk, cl_ulong dk_off, cl_mem dv, cl_ulong dv_off) {
    att_tile t;
    cl_kernel kern;
    oclml_status st = mode ? mma_kernel_of(c, K_DKDV_MMA, mode, heads > 0, &t, &kern)
                           : kernel_of(c, K_DKDV, &t, &kern);
    if (st) return st;
    const size_t total = c->s.B * c->s.HKV, chunk = heads ? heads : total;
    cl_mem ds = NULL;
    cl_ulong ld = heads ? ds_ld(&c->s) : 0;
    cl_uint bh0 = 0, band_rows = 0;
    oclml__arg a[40];
    unsigned n = put_bwd_args(c, b, a);
    a[n++] = OCLML_ARG(dk), a[n++] = OCLML_ARG(dk_off), a[n++] = OCLML_ARG(dv),
    a[n++] = OCLML_ARG(dv_off);
    /* The arguments point at ds, bh0 and band_rows, read at each launch: set below, the last
     * two per chunk (band_rows: the dQ GEMM's, DS_OUT). */
    if (mode)
        a[n++] = OCLML_ARG(ds), a[n++] = OCLML_ARG(ld), a[n++] = OCLML_ARG(bh0),
        a[n++] = OCLML_ARG(band_rows);
    n = geom_args(c, a, n);
    if (heads && (st = oclml__scratch_get(c->ctx, heads * ds_head_bytes(&c->s), &ds))) return st;
    /* Key blocks: BK keys on FMAs, KEYS of the tensor-core kernel (mma_block: 16 a warp, 8
     * paired, 4 in fours). */
    const size_t keys = mode ? (size_t)t.ty * t.rq : (size_t)t.tx * t.rk;
    for (size_t c0 = 0; c0 < total && !st; c0 += chunk) {
        const size_t c1 = c0 + chunk < total ? c0 + chunk : total;
        bh0 = (cl_uint)c0;
        /* Where the GEMM reads dS only up to its band, the kernel writes no zero past it: on
         * the H100 (2026-11-27 12:22 UTC, B4 H16 L4096 D128 causal, two rounds) the backward
         * went 20.78-20.80 -> 20.17 ms. */
        size_t rows = 0;
        if (heads && c->wr >= 0) dq_from_ds(c, b, ds, c0, c1, dq, &rows);
        band_rows = (cl_uint)rows;
        st = launch_tiled(c, kern, t, a, n, ceil_div(c->s.LK, keys), c1 - c0, 1);
        if (!st && heads) st = dq_from_ds(c, b, ds, c0, c1, dq, NULL);
    }
    if (ds) oclml__scratch_put(c->ctx, ds);
    if (st || !heads) return st;
    /* The rows that see no key: dQ 0, as from the dQ kernel. */
    if ((st = kernel_of(c, K_DQ_EMPTY, &t, &kern))) return st;
    cl_ulong rows_all = (cl_ulong)(c->s.B * c->s.H * c->s.LQ), dq_off = oclml__elem_offset(dq);
    const oclml__arg ae[] = {OCLML_ARG(b->lse), OCLML_ARG(b->lse_off), OCLML_ARG(dq->mem),
                             OCLML_ARG(dq_off), OCLML_ARG(rows_all),   OCLML_ARG(c->H),
                             OCLML_ARG(c->LQ)};
    return launch_rows(c, kern, ae, sizeof ae / sizeof ae[0], rows_all);
}

static oclml_status backward(const att_call *c, const bwd_args *b, const oclml_tensor *o,
                             oclml_tensor *dq, cl_mem dk, cl_ulong dk_off, cl_mem dv,
                             cl_ulong dv_off, oclml_tensor *dmask) {
    att_tile t;
    cl_kernel kern;
    cl_ulong rows_all = (cl_ulong)(c->s.B * c->s.H * c->s.LQ), o_off = oclml__elem_offset(o);
    oclml_status st = kernel_of(c, K_DELTA, &t, &kern);
    if (st) return st;
    const oclml__arg ad[] = {OCLML_ARG(o->mem),      OCLML_ARG(o_off),    OCLML_ARG(b->dout),
                             OCLML_ARG(b->dout_off), OCLML_ARG(b->delta), OCLML_ARG(rows_all),
                             OCLML_ARG(c->H),        OCLML_ARG(c->LQ)};
    if ((st = launch_rows(c, kern, ad, sizeof ad / sizeof ad[0], rows_all))) return st;
    oclml__arg a[40];
    unsigned n;
    const int dkdv_mma = mma_mode(c->ctx, &c->s, K_DKDV_MMA),
              dq_mma = mma_mode(c->ctx, &c->s, K_DQ_MMA);
    /* Key heads a chunk of the dS workspace (0: dQ from the dQ kernel). */
    const size_t heads = dk && dq ? dq_gemm_heads(c, dkdv_mma) : 0;
    if (dk && (st = dkdv(c, b, dkdv_mma, heads, dq, dk, dk_off, dv, dv_off))) return st;
    if (dq && !heads) {
        if ((st = dq_mma ? mma_kernel_of(c, K_DQ_MMA, dq_mma, false, &t, &kern)
                         : kernel_of(c, K_DQ, &t, &kern)))
            return st;
        cl_ulong dq_off = oclml__elem_offset(dq);
        n = put_bwd_args(c, b, a);
        a[n++] = OCLML_ARG(dq->mem), a[n++] = OCLML_ARG(dq_off);
        n = geom_args(c, a, n);
        if ((st = launch_tiled(c, kern, t, a, n,
                               ceil_div(c->s.H / c->s.HKV * c->s.LQ, (size_t)t.ty * t.rq),
                               c->s.B * c->s.HKV, 1)))
            return st;
    }
    if (dmask) {
        if ((st = kernel_of(c, K_DMASK, &t, &kern))) return st;
        cl_ulong dm_off = oclml__elem_offset(dmask);
        cl_uint mb = (cl_uint)c->s.mask_b, mh = (cl_uint)c->s.mask_h;
        n = put_bwd_args(c, b, a);
        a[n++] = OCLML_ARG(dmask->mem), a[n++] = OCLML_ARG(dm_off), a[n++] = OCLML_ARG(mb),
        a[n++] = OCLML_ARG(mh);
        n = geom_args(c, a, n);
        st = launch_tiled(c, kern, t, a, n, ceil_div(c->s.LK, (size_t)t.tx * t.rk),
                          ceil_div(c->s.LQ, (size_t)t.ty * t.rq), c->s.mask_b * c->s.mask_h);
    }
    return st;
}

oclml_status oclml_attention_backward(oclml_ctx *ctx, const oclml_attention_params *params,
                                      const oclml_tensor *q, const oclml_tensor *k,
                                      const oclml_tensor *v, const oclml_tensor *o,
                                      const oclml_tensor *lse, const oclml_tensor *dout,
                                      oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv,
                                      oclml_tensor *dmask) {
    oclml_status st = oclml__check_ctx(ctx);
    oclml_attention_params defaults;
    att_shape s;
    if (!st) st = begin_call(ctx, &params, &defaults, q, k, v, &s);
    if (st) return st;
    st = oclml__check_same_shape(ctx, o, "o", q, "q");
    if (!st) st = oclml__check_same_shape(ctx, dout, "dout", q, "q");
    if (!st) {
        const size_t want[3] = {s.B, s.H, s.LQ};
        st = oclml__check_tensor(ctx, lse, "lse");
        if (!st) st = oclml__check_dims(ctx, lse, "lse", 3, want);
    }
    if (!st && dq) st = oclml__check_same_shape(ctx, dq, "dq", q, "q");
    if (!st && dk) st = oclml__check_same_shape(ctx, dk, "dk", k, "k");
    if (!st && dv) st = oclml__check_same_shape(ctx, dv, "dv", v, "v");
    if (!st && dmask && !params->mask)
        st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "dmask given but params has no mask");
    if (!st && dmask) st = oclml__check_same_shape(ctx, dmask, "dmask", params->mask, "mask");
    const oclml_tensor *all[] = {q,  k,  v,  o,    lse, dout, params->mask, params->key_lengths,
                                 dq, dk, dv, dmask};
    oclml_tensor *outs[] = {dq, dk, dv, dmask};
    const char *names[] = {"dq", "dk", "dv", "dmask"};
    /* Every gradient against the 8 inputs and the other gradients (slot 8 + i is itself). */
    for (int i = 0; i < 4 && !st; i++) {
        for (int j = 0; j < 12 && !st; j++)
            if (j != 8 + i && outs[i] && all[j] && oclml__overlap(outs[i], all[j]))
                st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                                 "attention gradient '%s' overlaps an input or another output",
                                 names[i]);
    }
    if (st) return st;
    const att_call c = call_of(ctx, params, s, q, k, v, dout);
    bwd_args b = {.q = q->mem,
                  .k = k->mem,
                  .v = v->mem,
                  .dout = dout->mem,
                  .lse = lse->mem,
                  .q_off = oclml__elem_offset(q),
                  .k_off = oclml__elem_offset(k),
                  .v_off = oclml__elem_offset(v),
                  .dout_off = oclml__elem_offset(dout),
                  .lse_off = oclml__elem_offset(lse)};
    /* dK and dV come from one kernel: a missing one goes to scratch. */
    cl_mem spare = NULL;
    const size_t kv_bytes = k->numel * sizeof(float);
    if ((dk != NULL) != (dv != NULL)) st = oclml__scratch_get(ctx, kv_bytes, &spare);
    if (!st) st = oclml__scratch_get(ctx, s.B * s.H * s.LQ * sizeof(float), &b.delta);
    if (!st) {
        cl_mem dk_mem = dk ? dk->mem : spare, dv_mem = dv ? dv->mem : spare;
        cl_ulong dk_off = dk ? oclml__elem_offset(dk) : 0, dv_off = dv ? oclml__elem_offset(dv) : 0;
        st = backward(&c, &b, o, dq, dk || dv ? dk_mem : NULL, dk_off, dv_mem, dv_off, dmask);
    }
    if (b.delta) oclml__scratch_put(ctx, b.delta);
    if (spare) oclml__scratch_put(ctx, spare);
    return st;
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

/* A key-length buffer the warm list names and never touches: the planner reads only whether
 * there is one. */
static char placeholder;

/* Prewarm: the kernels a call with head dims 64 and 128 runs without masks (BHLD, 1024 rows a
 * key head): the tensor-core ones where the device has them, else the FMA tiles; and the
 * forward that a causal mask takes where its blocks differ (mma_warps). With every_shape, the
 * same for each head dim of EVERY_DIM and each form of FORMS. */
void oclml__attention_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    const bool bwd = strstr(op, "backward") != NULL;
    const size_t *dims = list->every_shape ? EVERY_DIM : COMMON_DIMS;
    const size_t n_dims = list->every_shape ? sizeof EVERY_DIM / sizeof EVERY_DIM[0] : 2,
                 n_forms = list->every_shape ? sizeof FORMS / sizeof FORMS[0] : 1;
    for (size_t i = 0; i < n_dims * n_forms; i++) {
        const warm_form f = FORMS[i % n_forms];
        const size_t D = dims[i / n_forms];
        const att_shape s = {.B = 1,
                             .H = 1,
                             .HKV = 1,
                             .LQ = 1024,
                             .LK = 1024,
                             .D = D,
                             .mask_b = 1,
                             .mask_h = 1,
                             .by_position = f.causal};
        const att_call c = {.ctx = ctx,
                            .s = s,
                            .keylen = f.keylen ? (cl_mem)(void *)&placeholder : NULL,
                            .kv_vec = f.vec,
                            .qd_vec = f.vec};
        const att_kernel fma_kinds[2][3] = {{K_FWD, K_FWD, K_FWD}, {K_DELTA, K_DKDV, K_DQ}},
                         mma_kinds[2][3] = {{K_FWD_MMA, K_FWD_MMA, K_FWD_MMA},
                                            {K_DELTA, K_DKDV_MMA, K_DQ_MMA}};
        /* dQ as a GEMM on the dK/dV kernel's dS, in place of the dQ kernel, where it runs. */
        const size_t heads = bwd ? dq_gemm_heads(&c, mma_mode(ctx, &s, K_DKDV_MMA)) : 0;
        if (heads) {
            const oclml__gemm_desc g = {.m = s.LQ,
                                        .n = s.D,
                                        .k = s.LK,
                                        .batch = 1,
                                        .alpha = 1.0f,
                                        .a = {NULL, 0, ds_ld(&s), 0},
                                        .b = {NULL, 0, s.D, 0},
                                        .c = {NULL, 0, s.D, 0},
                                        .a_lower = f.causal};
            char what[64];
            snprintf(what, sizeof what, "head dim %zu, dQ = dS K", D);
            oclml__gemm_warm_desc(ctx, op, what, &g, list);
        }
        for (int j = 0; j < (bwd ? (heads ? 2 : 3) : 1); j++) {
            const int mma = mma_kinds[bwd][j] == K_DELTA ? 0 : mma_mode(ctx, &s, mma_kinds[bwd][j]);
            const att_kernel kind = mma ? mma_kinds[bwd][j] : fma_kinds[bwd][j];
            char defines[256], variant[64];
            att_tile t;
            snprintf(variant, sizeof variant, "head dim %zu, %s", D, KERNEL_NAMES[kind]);
            const oclml__program_spec spec =
                kind >= K_FWD_MMA
                    ? mma_spec_of(ctx, kind, mma, D, f.causal, f.blhd, f.mask, f.keylen,
                                  kv_async(&c, kind, mma), vec_fragments(&c, kind, mma), heads > 0,
                                  &t, defines, sizeof defines)
                    : spec_of(kind, plan_tile(ctx, kind, &s), D, f.blhd, f.mask, f.keylen, defines,
                              sizeof defines);
            oclml__warm_add(list, op, variant, spec);
            if (kind == K_FWD_MMA && !f.causal &&
                mma_warps(ctx, kind, D, true) != mma_warps(ctx, kind, D, false)) {
                snprintf(variant, sizeof variant, "head dim %zu, causal, %s", D,
                         KERNEL_NAMES[kind]);
                oclml__warm_add(list, op, variant,
                                mma_spec_of(ctx, kind, mma, D, true, f.blhd, f.mask, f.keylen,
                                            kv_async(&c, kind, mma), vec_fragments(&c, kind, mma),
                                            false, &t, defines, sizeof defines));
            }
        }
        if (heads) {
            char defines[256], variant[64];
            snprintf(variant, sizeof variant, "head dim %zu, %s", D, KERNEL_NAMES[K_DQ_EMPTY]);
            oclml__warm_add(list, op, variant,
                            spec_of(K_DQ_EMPTY, plan_tile(ctx, K_DQ_EMPTY, &s), D, f.blhd, f.mask,
                                    f.keylen, defines, sizeof defines));
        }
    }
}
