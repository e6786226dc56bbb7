/* The native 16-bit attention forward (cl/ops/attention_lp_fwd.cl: q, k and v read as bf16 or
 * fp16, both products on the m16n8k16 tensor cores, o written in its own dtype): which calls it
 * takes, its program, its launch, its plan text and its warm list. Everything it does not take
 * stays on the fp32 stand-ins (attention_lp.c). */
#include "ops/attention_lp.h"

#include <stdio.h>

/* The tile: `warps` warps of MT m16 tiles of query rows each, key blocks of `keys`; the local
 * memory holds one block of K and V (2 keys (D + 8) 16-bit words), two where the next block is
 * copied ahead. */
#define MOST_HEAD_DIM 128u

typedef struct lp_fwd_plan {
    oclml__mma16_path path;
    unsigned mt;   /* m16 tiles of query rows a warp */
    unsigned keys; /* keys a block */
    unsigned warps;
    bool ahead; /* the next key block copied (cp.async) while this one is used */
} lp_fwd_plan;

static size_t local_bytes(const lp_fwd_plan *p, size_t D) {
    /* K and V of a block (two with copies ahead), the row tables, and the emulation's exchange
     * and shuffle buffers */
    return (p->ahead ? 2u : 1u) * 2 * p->keys * (D + 8) * 2 + 16 * p->mt * p->warps * 28 +
           (p->path == OCLML__MMA16_EMULATED ? p->warps * (384 + 32) * 4 : 0);
}

/* The tuning key attention.lp_mma: -1 (the default) or 1 the tensor cores where the device has
 * the 16-bit mma (faster than the stand-ins' TF32 forward: bench/DECISIONS.md); 0 never, the
 * stand-ins; 2 the kernel with the instruction emulated where the device has no such tensor
 * cores (tests; on one that has them, the instruction, so that the same tests check it there).
 * The tile from attention.lp_fwd_tile (m16 tiles a warp, keys a block, copies ahead 1 no 2
 * yes; 0 auto): one m16 tile a warp (two, each K and V fragment feeding both, ran slower at
 * head dims 64 and 128: bench/DECISIONS.md), blocks of 64 keys, and the next block copied ahead
 * (its copy overlapping this block's products) where the operands allow 16-byte copies and the
 * local memory kernels may declare holds two blocks. */
static lp_fwd_plan plan_of(oclml_ctx *ctx, size_t D, bool aligned) {
    lp_fwd_plan p = {OCLML__MMA16_NONE, 1u, 64u, 4u, false};
    p.path = oclml__mma16_path_of(ctx, oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_MMA, 0));
    if (p.path == OCLML__MMA16_NONE) return p;
    const long mt = oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_FWD_TILE, 0),
               keys = oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_FWD_TILE, 1),
               ahead = oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_FWD_TILE, 2);
    if (mt == 1 || mt == 2) p.mt = (unsigned)mt;
    if (keys == 32 || keys == 64 || keys == 128) p.keys = (unsigned)keys;
    const long warps = oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_FWD_TILE, 3);
    if (warps == 4 || warps == 8) p.warps = (unsigned)warps;
    const size_t most = oclml__caps_static_local(ctx); /* the kernels' arrays, emulated or not */
    p.ahead = aligned && ahead != 1;
    if (p.ahead) p.ahead = local_bytes(&p, D) <= most;
    if (local_bytes(&p, D) > most || 32u * p.warps > ctx->caps.max_work_group_size)
        p.path = OCLML__MMA16_NONE;
    return p;
}

/* Whether k's and v's rows start 16-byte aligned for the copies ahead: the tensors are
 * contiguous with rows D or HKV D elements apart (D a multiple of 16), so their element offsets
 * multiples of 8 suffice. */
static bool kv_aligned(const oclml_tensor *k, const oclml_tensor *v) {
    return oclml__elem_offset(k) % 8 == 0 && oclml__elem_offset(v) % 8 == 0;
}

/* The call forms the kernel takes: q, k, v of one 16-bit dtype, head dims that are multiples of
 * 16 up to 128, positions masked by a causal mask alone (no additive mask, key lengths, dropout
 * or window). */
static bool form_fits(const oclml__att_geometry *g, oclml_dtype q, oclml_dtype k, oclml_dtype v) {
    const oclml__att_shape *s = &g->s;
    return q != OCLML_FLOAT32 && q == k && q == v && s->D % 16 == 0 && s->D <= MOST_HEAD_DIM &&
           !s->mask && !s->keylen && !s->dropout && !g->window;
}

bool oclml__attention_lp_fwd_applies(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v) {
    return form_fits(g, q->dtype, k->dtype, v->dtype) &&
           plan_of(ctx, g->s.D, kv_aligned(k, v)).path != OCLML__MMA16_NONE;
}

typedef struct lp_fwd_program {
    char defines[160];
    oclml__program_spec spec;
} lp_fwd_program;

static void program_of(const lp_fwd_plan *p, oclml_dtype ab, oclml_dtype o, size_t D, bool blhd,
                       lp_fwd_program *g) {
    snprintf(g->defines, sizeof g->defines,
             "-DAB_DT=%d -DO_DT=%d -DHEAD_DIM=%zu -DBN=%u -DWARPS=%u -DMT=%u -DAHEAD=%d "
             "-DLAYOUT_BLHD=%d -DMMA_EMULATE=%d",
             (int)ab, (int)o, D, p->keys, p->warps, p->mt, p->ahead, blhd,
             p->path == OCLML__MMA16_EMULATED);
    g->spec =
        (oclml__program_spec){"attention_lp_fwd.cl", g->defines, "oclml_attention_lp_fwd", 255};
}

oclml_status oclml__attention_lp_fwd(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse) {
    const oclml__att_shape *s = &g->s;
    lp_fwd_program prog;
    const lp_fwd_plan plan = plan_of(ctx, s->D, kv_aligned(k, v));
    program_of(&plan, q->dtype, o->dtype, s->D, s->blhd, &prog);
    cl_kernel kernel;
    oclml_status st = oclml__kernel(ctx, &prog.spec, prog.spec.kernels, &kernel);
    if (st) return st;
    cl_ulong q_off = oclml__elem_offset(q), k_off = oclml__elem_offset(k),
             v_off = oclml__elem_offset(v), o_off = oclml__elem_offset(o),
             lse_off = lse ? oclml__elem_offset(lse) : 0, no_stride = 0;
    cl_mem lse_mem = lse ? lse->mem : NULL;
    cl_uint has_lse = lse != NULL, B = (cl_uint)s->B, H = (cl_uint)s->H, HKV = (cl_uint)s->HKV,
            LQ = (cl_uint)s->LQ, LK = (cl_uint)s->LK;
    float scale = g->scale;
    cl_int shift = g->shift, wl = g->wl, wr = g->wr;
    const oclml__arg args[] = {
        OCLML_ARG(q->mem),    OCLML_ARG(q_off),    OCLML_ARG(k->mem),  OCLML_ARG(k_off),
        OCLML_ARG(v->mem),    OCLML_ARG(v_off),    OCLML_ARG(o->mem),  OCLML_ARG(o_off),
        OCLML_ARG(lse_mem),   OCLML_ARG(lse_off),  OCLML_ARG(has_lse), OCLML_ARG(B),
        OCLML_ARG(H),         OCLML_ARG(HKV),      OCLML_ARG(LQ),      OCLML_ARG(LK),
        OCLML_ARG(scale),     OCLML_ARG(shift),    OCLML_ARG(wl),      OCLML_ARG(wr),
        OCLML_ARG(no_stride), OCLML_ARG(no_stride)};
    /* Row blocks of the H / HKV query heads stacked on each key head, by (batch, key head). */
    const size_t rows = 16u * plan.mt * plan.warps, threads = 32u * plan.warps,
                 blocks = (s->H / s->HKV * s->LQ + rows - 1) / rows;
    const size_t global[2] = {blocks * threads, s->B * s->HKV}, local[2] = {threads, 1};
    return oclml__launch(ctx, kernel, args, sizeof args / sizeof args[0], 2, global, local, NULL);
}

void oclml__attention_lp_fwd_describe(oclml_ctx *ctx, const oclml__att_geometry *g,
                                      const oclml_tensor *k, const oclml_tensor *v, char *text,
                                      size_t len) {
    const lp_fwd_plan p = plan_of(ctx, g->s.D, kv_aligned(k, v));
    snprintf(text, len, "%s tensor cores%s (m16n8k16), %u rows x %u keys a block%s",
             oclml_dtype_name(k->dtype), p.path == OCLML__MMA16_EMULATED ? " emulated" : "",
             16u * p.mt * p.warps, p.keys, p.ahead ? ", the next copied ahead" : "");
}

/* The forms the attention forward's warm list holds (head dims 64 and 128, BHLD, o in q's dtype
 * or fp32), and with every_shape every head dim the kernel takes in both layouts. */
void oclml__attention_lp_fwd_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    for (size_t D = 16; D <= MOST_HEAD_DIM; D += 16) {
        const lp_fwd_plan plan = plan_of(ctx, D, true);
        if (plan.path == OCLML__MMA16_NONE || (!list->every_shape && D != 64 && D != 128)) continue;
        for (int ab = OCLML_BFLOAT16; ab <= OCLML_FLOAT16; ab++)
            for (int o = 0; o < 2; o++)
                for (int blhd = 0; blhd <= (int)list->every_shape; blhd++) {
                    lp_fwd_program prog;
                    program_of(&plan, (oclml_dtype)ab, o ? OCLML_FLOAT32 : (oclml_dtype)ab, D, blhd,
                               &prog);
                    char variant[64];
                    snprintf(variant, sizeof variant, "16-bit head dim %zu", D);
                    oclml__warm_add(list, op, variant, prog.spec);
                }
    }
}
