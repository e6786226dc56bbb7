/* The native 16-bit attention backward (cl/ops/attention_lp_bwd.cl: q, k, v and dout read as
 * bf16 or fp16, every product on the m16n8k16 tensor cores, dq, dk and dv written each in its
 * own dtype): which calls it takes, its program, its launches, its plan text and its warm list.
 * Everything it does not take stays on the fp32 stand-ins (attention_lp.c). */
#include "ops/attention_lp.h"

#include <stdio.h>

/* The tile: WARPS warps of 16 keys (dK/dV) or 16 query rows (dQ); the staged blocks hold
 * `rows` rows of two tensors (Q and dO in dK/dV, K and V in dQ), two blocks each where the next
 * is copied ahead; dK/dV's K and V in registers or staged in local memory. */
#define WARPS 4u
#define ROWS (16u * WARPS)
#define THREADS (32u * WARPS)
#define MOST_HEAD_DIM 128u
#define DELTA_ITEMS 64u

typedef struct lp_bwd_plan {
    oclml__mma16_path path;
    unsigned rows; /* rows a staged block */
    bool ahead;    /* the next block copied (cp.async) while this one is used */
    bool kv_local; /* dK/dV's K and V read from local memory, not held in registers */
} lp_bwd_plan;

static size_t local_bytes(const lp_bwd_plan *p, size_t D) {
    const size_t bufs = p->ahead ? 2u : 1u, block = 2 * p->rows * (D + 8) * 2,
                 emulation = p->path == OCLML__MMA16_EMULATED ? WARPS * (384 + 32) * 4 : 0;
    /* dK/dV: the blocks, their rows' lse and delta, K and V where staged; dQ: the blocks and
     * the row table */
    const size_t dkdv = bufs * (block + p->rows * 8) + (p->kv_local ? 2 * ROWS * (D + 8) * 2 : 0),
                 dq = bufs * block + ROWS * 28;
    return (dkdv > dq ? dkdv : dq) + emulation;
}

/* The tuning key attention.lp_bwd_mma: -1 (the default) or 1 the tensor cores where the device
 * has the 16-bit mma; 0 never, the stand-ins; 2 the kernels with the instruction emulated where
 * the device has no such tensor cores (tests; on one that has them, the instruction, so that the
 * same tests check it there). The tile from attention.lp_bwd_tile (rows a staged block, copies
 * ahead 1 no 2 yes, dK/dV's K and V 1 in registers 2 in local memory; 0 auto): blocks of 64 rows
 * up to head dim 64, 32 above, where the score and dP tiles (rows / 2 floats each a work-item)
 * would crowd the registers that the operand fragments and the two accumulators already take;
 * copies ahead where the operands allow 16-byte copies (offsets multiples of 8) and the local
 * memory kernels may declare holds two blocks; K and V in registers up to head dim 64, in local
 * memory above (64 registers a work-item there). A forced choice that the local memory does not
 * hold is dropped (K and V from local memory before the copies ahead). */
static lp_bwd_plan plan_of(oclml_ctx *ctx, size_t D, bool aligned) {
    lp_bwd_plan p = {OCLML__MMA16_NONE, D <= 64 ? 64u : 32u, false, false};
    p.path = oclml__mma16_path_of(ctx, oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_BWD_MMA, 0));
    if (p.path == OCLML__MMA16_NONE) return p;
    const long rows = oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_BWD_TILE, 0),
               ahead = oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_BWD_TILE, 1),
               kv = oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_BWD_TILE, 2);
    if (rows == 32 || rows == 64) p.rows = (unsigned)rows;
    const size_t most = oclml__caps_static_local(ctx); /* the kernels' arrays, emulated or not */
    p.kv_local = kv == 2 || (kv != 1 && D > 64);
    if (p.kv_local && local_bytes(&p, D) > most) p.kv_local = false;
    p.ahead = aligned && ahead != 1;
    if (p.ahead && local_bytes(&p, D) > most) p.ahead = false;
    if (local_bytes(&p, D) > most || THREADS > ctx->caps.max_work_group_size)
        p.path = OCLML__MMA16_NONE;
    return p;
}

/* Whether q, k, v and dout allow 16-byte copies (their rows are multiples of 8 elements apart:
 * head dims are multiples of 16). */
static bool operands_aligned(const oclml_tensor *q, const oclml_tensor *k, const oclml_tensor *v,
                             const oclml_tensor *dout) {
    return oclml__elem_offset(q) % 8 == 0 && oclml__elem_offset(k) % 8 == 0 &&
           oclml__elem_offset(v) % 8 == 0 && oclml__elem_offset(dout) % 8 == 0;
}

bool oclml__attention_lp_bwd_applies(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v, const oclml_tensor *dout,
                                     const oclml_tensor *dmask) {
    const oclml__att_shape *s = &g->s;
    const oclml_dtype ab = q->dtype;
    return ab != OCLML_FLOAT32 && k->dtype == ab && v->dtype == ab && dout->dtype == ab && !dmask &&
           s->D % 16 == 0 && s->D <= MOST_HEAD_DIM && !s->mask && !s->keylen && !s->dropout &&
           !g->window &&
           plan_of(ctx, s->D, operands_aligned(q, k, v, dout)).path != OCLML__MMA16_NONE;
}

typedef struct lp_bwd_program {
    char defines[200];
    oclml__program_spec spec;
} lp_bwd_program;

/* The program of a call: the tile, the AB dtype, o's, and the gradients' (dq, dk, dv). */
static void program_of(const lp_bwd_plan *p, oclml_dtype ab, oclml_dtype o,
                       const oclml_dtype grad[3], size_t D, bool blhd, lp_bwd_program *g) {
    snprintf(g->defines, sizeof g->defines,
             "-DAB_DT=%d -DO_DT=%d -DDQ_DT=%d -DDK_DT=%d -DDV_DT=%d -DHEAD_DIM=%zu -DBN=%u "
             "-DWARPS=%u -DAHEAD=%d -DKV_LOCAL=%d -DLAYOUT_BLHD=%d -DMMA_EMULATE=%d",
             (int)ab, (int)o, (int)grad[0], (int)grad[1], (int)grad[2], D, p->rows, WARPS, p->ahead,
             p->kv_local, blhd, p->path == OCLML__MMA16_EMULATED);
    g->spec = (oclml__program_spec){
        "attention_lp_bwd.cl", g->defines,
        "oclml_attention_lp_delta oclml_attention_lp_dkdv oclml_attention_lp_dq", 255};
}

/* The launches: delta, then dK/dV (where either is wanted: the other into spare), then dQ. */
static oclml_status launch_all(oclml_ctx *ctx, const oclml__att_geometry *g,
                               const lp_bwd_program *prog, const oclml_tensor *q,
                               const oclml_tensor *k, const oclml_tensor *v, const oclml_tensor *o,
                               const oclml_tensor *lse, const oclml_tensor *dout, oclml_tensor *dq,
                               oclml_tensor *dk, oclml_tensor *dv, cl_mem delta, cl_mem spare) {
    const oclml__att_shape *s = &g->s;
    cl_kernel kd, kkv, kq;
    oclml_status st = oclml__kernel(ctx, &prog->spec, "oclml_attention_lp_delta", &kd);
    if (!st) st = oclml__kernel(ctx, &prog->spec, "oclml_attention_lp_dkdv", &kkv);
    if (!st) st = oclml__kernel(ctx, &prog->spec, "oclml_attention_lp_dq", &kq);
    if (st) return st;
    cl_ulong q_off = oclml__elem_offset(q), k_off = oclml__elem_offset(k),
             v_off = oclml__elem_offset(v), o_off = oclml__elem_offset(o),
             dout_off = oclml__elem_offset(dout), lse_off = oclml__elem_offset(lse),
             rows_all = (cl_ulong)(s->B * s->H * s->LQ), no_stride = 0;
    cl_uint B = (cl_uint)s->B, H = (cl_uint)s->H, HKV = (cl_uint)s->HKV, LQ = (cl_uint)s->LQ,
            LK = (cl_uint)s->LK;
    float scale = g->scale;
    cl_int shift = g->shift, wl = g->wl, wr = g->wr;

    const oclml__arg ad[] = {OCLML_ARG(o->mem),   OCLML_ARG(o_off), OCLML_ARG(dout->mem),
                             OCLML_ARG(dout_off), OCLML_ARG(delta), OCLML_ARG(rows_all),
                             OCLML_ARG(H),        OCLML_ARG(LQ)};
    const size_t dglobal = oclml__ceil_div(rows_all, DELTA_ITEMS) * DELTA_ITEMS,
                 dlocal = DELTA_ITEMS;
    st = oclml__launch(ctx, kd, ad, sizeof ad / sizeof ad[0], 1, &dglobal, &dlocal, NULL);
    if (st) return st;

    /* LP_BWD_ARGS, then each kernel's outputs, then ATT_GEOM */
    oclml__arg a[32];
    unsigned n = 0;
    a[n++] = OCLML_ARG(q->mem), a[n++] = OCLML_ARG(q_off), a[n++] = OCLML_ARG(k->mem),
    a[n++] = OCLML_ARG(k_off), a[n++] = OCLML_ARG(v->mem), a[n++] = OCLML_ARG(v_off),
    a[n++] = OCLML_ARG(dout->mem), a[n++] = OCLML_ARG(dout_off), a[n++] = OCLML_ARG(lse->mem),
    a[n++] = OCLML_ARG(lse_off), a[n++] = OCLML_ARG(delta);
    const unsigned lead = n;
    const oclml__arg geom[] = {OCLML_ARG(B),         OCLML_ARG(H),        OCLML_ARG(HKV),
                               OCLML_ARG(LQ),        OCLML_ARG(LK),       OCLML_ARG(scale),
                               OCLML_ARG(shift),     OCLML_ARG(wl),       OCLML_ARG(wr),
                               OCLML_ARG(no_stride), OCLML_ARG(no_stride)};
    const size_t local[2] = {THREADS, 1};
    if (dk || dv) {
        cl_mem dk_mem = dk ? dk->mem : spare, dv_mem = dv ? dv->mem : spare;
        cl_ulong dk_off = dk ? oclml__elem_offset(dk) : 0, dv_off = dv ? oclml__elem_offset(dv) : 0;
        a[n++] = OCLML_ARG(dk_mem), a[n++] = OCLML_ARG(dk_off), a[n++] = OCLML_ARG(dv_mem),
        a[n++] = OCLML_ARG(dv_off);
        for (unsigned i = 0; i < sizeof geom / sizeof geom[0]; i++) a[n++] = geom[i];
        const size_t global[2] = {oclml__ceil_div(s->LK, ROWS) * THREADS, s->B * s->HKV};
        if ((st = oclml__launch(ctx, kkv, a, n, 2, global, local, NULL))) return st;
    }
    if (dq) {
        n = lead;
        cl_ulong dq_off = oclml__elem_offset(dq);
        a[n++] = OCLML_ARG(dq->mem), a[n++] = OCLML_ARG(dq_off);
        for (unsigned i = 0; i < sizeof geom / sizeof geom[0]; i++) a[n++] = geom[i];
        const size_t global[2] = {oclml__ceil_div(s->H / s->HKV * s->LQ, ROWS) * THREADS,
                                  s->B * s->HKV};
        st = oclml__launch(ctx, kq, a, n, 2, global, local, NULL);
    }
    return st;
}

oclml_status oclml__attention_lp_bwd(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v, const oclml_tensor *o,
                                     const oclml_tensor *lse, const oclml_tensor *dout,
                                     oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv) {
    const oclml__att_shape *s = &g->s;
    if (!dq && !dk && !dv) return OCLML_SUCCESS;
    /* A missing dK or dV goes to spare in the other's dtype; a missing dQ's kernel is not run. */
    const oclml_dtype grad[3] = {dq ? dq->dtype : q->dtype,
                                 dk   ? dk->dtype
                                 : dv ? dv->dtype
                                      : q->dtype,
                                 dv   ? dv->dtype
                                 : dk ? dk->dtype
                                      : q->dtype};
    lp_bwd_program prog;
    const lp_bwd_plan plan = plan_of(ctx, s->D, operands_aligned(q, k, v, dout));
    program_of(&plan, q->dtype, o->dtype, grad, s->D, s->blhd, &prog);
    cl_mem delta = NULL, spare = NULL;
    oclml_status st = oclml__scratch_get(ctx, s->B * s->H * s->LQ * sizeof(float), &delta);
    if (!st && (dk != NULL) != (dv != NULL))
        st = oclml__scratch_get(ctx, k->numel * sizeof(float), &spare);
    if (!st) st = launch_all(ctx, g, &prog, q, k, v, o, lse, dout, dq, dk, dv, delta, spare);
    if (spare) oclml__scratch_put(ctx, spare);
    if (delta) oclml__scratch_put(ctx, delta);
    return st;
}

void oclml__attention_lp_bwd_describe(oclml_ctx *ctx, const oclml__att_geometry *g,
                                      const oclml_tensor *q, const oclml_tensor *k,
                                      const oclml_tensor *v, const oclml_tensor *dout, char *text,
                                      size_t len) {
    const lp_bwd_plan p = plan_of(ctx, g->s.D, operands_aligned(q, k, v, dout));
    snprintf(text, len,
             "%s tensor cores%s (m16n8k16), dK/dV %u keys x %u query rows a block%s, dQ %u rows "
             "x %u keys a block%s",
             oclml_dtype_name(k->dtype), p.path == OCLML__MMA16_EMULATED ? " emulated" : "", ROWS,
             p.rows, p.kv_local ? " (K and V from local memory)" : "", ROWS, p.rows,
             p.ahead ? ", the next copied ahead" : "");
}

/* The forms the attention backward's warm list holds (head dims 64 and 128, BHLD, o and the
 * gradients in q's dtype), and with every_shape every head dim the kernels take in both layouts
 * with o and the gradients in q's dtype or fp32. */
void oclml__attention_lp_bwd_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    for (size_t D = 16; D <= MOST_HEAD_DIM; D += 16) {
        const lp_bwd_plan plan = plan_of(ctx, D, true);
        if (plan.path == OCLML__MMA16_NONE || (!list->every_shape && D != 64 && D != 128)) continue;
        for (int ab = OCLML_BFLOAT16; ab <= OCLML_FLOAT16; ab++)
            for (int out32 = 0; out32 <= (int)list->every_shape; out32++)
                for (int blhd = 0; blhd <= (int)list->every_shape; blhd++) {
                    const oclml_dtype out = out32 ? OCLML_FLOAT32 : (oclml_dtype)ab,
                                      grad[3] = {out, out, out};
                    lp_bwd_program prog;
                    program_of(&plan, (oclml_dtype)ab, out, grad, D, blhd, &prog);
                    char variant[64];
                    snprintf(variant, sizeof variant, "16-bit head dim %zu", D);
                    oclml__warm_add(list, op, variant, prog.spec);
                }
    }
}
