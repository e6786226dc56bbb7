/* The native 16-bit attention backward (cl/ops/attention_lp_bwd.cl: q, k, v and dout read as
 * bf16 or fp16, every product on the m16n8k16 tensor cores, dq, dk and dv written each in its
 * own dtype): which calls it takes, its program, its launches, its plan text and its warm list.
 * Everything it does not take stays on the fp32 stand-ins (attention_lp.c). */
#include "ops/attention_lp.h"

#include <stdio.h>

/* The tile: WARPS warps of 16 keys (dK/dV) or 16 query rows (dQ); the staged blocks hold BN
 * rows of two tensors (Q and dO in dK/dV, K and V in dQ): 64 up to head dim 64, 32 above, where
 * the score and dP tiles (BN / 2 floats each a work-item) would crowd the registers that the
 * operand fragments and the two accumulators already take. */
#define WARPS 4u
#define ROWS (16u * WARPS)
#define THREADS (32u * WARPS)
#define MOST_HEAD_DIM 128u
#define DELTA_ITEMS 64u

static unsigned block_of(size_t D) { return D <= 64 ? 64u : 32u; }

typedef enum lp_bwd_path { LP_STAND_IN, LP_MMA, LP_EMULATED } lp_bwd_path;

/* The tuning key attention.lp_bwd_mma: -1 (the default) or 1 the tensor cores where the device
 * has the 16-bit mma; 0 never, the stand-ins; 2 the kernels with the instruction emulated where the device has no such tensor
 * cores (tests; on one that has them, the instruction, so that the same tests check it there). */
static lp_bwd_path path_of(oclml_ctx *ctx, size_t D) {
    const long mode = oclml__tune(ctx, OCLML__TUNE_ATTENTION_LP_BWD_MMA, 0);
    if (mode == 0) return LP_STAND_IN;
    const bool hw = ctx->caps.is_gpu && oclml__caps_mma(ctx);
    const lp_bwd_path path = hw ? LP_MMA : mode == 2 ? LP_EMULATED : LP_STAND_IN;
    /* two staged blocks, dQ's row table or dK/dV's lse and delta, the emulation's buffers */
    const size_t local = 2 * block_of(D) * (D + 8) * 2 + ROWS * 28 +
                         (path == LP_EMULATED ? WARPS * (384 + 32) * 4 : 0);
    if (local > ctx->caps.local_mem_bytes || THREADS > ctx->caps.max_work_group_size)
        return LP_STAND_IN;
    return path;
}

bool oclml__attention_lp_bwd_applies(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v, const oclml_tensor *dout,
                                     const oclml_tensor *dmask) {
    const oclml__att_shape *s = &g->s;
    const oclml_dtype ab = q->dtype;
    return ab != OCLML_FLOAT32 && k->dtype == ab && v->dtype == ab && dout->dtype == ab && !dmask &&
           s->D % 16 == 0 && s->D <= MOST_HEAD_DIM && !s->mask && !s->keylen && !s->dropout &&
           !g->window && path_of(ctx, s->D) != LP_STAND_IN;
}

typedef struct lp_bwd_program {
    char defines[200];
    oclml__program_spec spec;
} lp_bwd_program;

/* The program of a call: the AB dtype, o's, and the gradients' (dq, dk, dv). */
static void program_of(lp_bwd_path path, oclml_dtype ab, oclml_dtype o, const oclml_dtype grad[3],
                       size_t D, bool blhd, lp_bwd_program *g) {
    snprintf(g->defines, sizeof g->defines,
             "-DAB_DT=%d -DO_DT=%d -DDQ_DT=%d -DDK_DT=%d -DDV_DT=%d -DHEAD_DIM=%zu -DBN=%u "
             "-DWARPS=%u -DLAYOUT_BLHD=%d -DMMA_EMULATE=%d",
             (int)ab, (int)o, (int)grad[0], (int)grad[1], (int)grad[2], D, block_of(D), WARPS, blhd,
             path == LP_EMULATED);
    g->spec = (oclml__program_spec){
        "attention_lp_bwd.cl", g->defines,
        "oclml_attention_lp_delta oclml_attention_lp_dkdv oclml_attention_lp_dq", 255};
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

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
    const size_t dglobal = ceil_div(rows_all, DELTA_ITEMS) * DELTA_ITEMS, dlocal = DELTA_ITEMS;
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
        const size_t global[2] = {ceil_div(s->LK, ROWS) * THREADS, s->B * s->HKV};
        if ((st = oclml__launch(ctx, kkv, a, n, 2, global, local, NULL))) return st;
    }
    if (dq) {
        n = lead;
        cl_ulong dq_off = oclml__elem_offset(dq);
        a[n++] = OCLML_ARG(dq->mem), a[n++] = OCLML_ARG(dq_off);
        for (unsigned i = 0; i < sizeof geom / sizeof geom[0]; i++) a[n++] = geom[i];
        const size_t global[2] = {ceil_div(s->H / s->HKV * s->LQ, ROWS) * THREADS, s->B * s->HKV};
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
    program_of(path_of(ctx, s->D), q->dtype, o->dtype, grad, s->D, s->blhd, &prog);
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
                                      oclml_dtype dtype, char *text, size_t len) {
    snprintf(text, len,
             "%s tensor cores%s (m16n8k16), dK/dV %u keys x %u query rows a block, dQ %u rows x "
             "%u keys a block",
             oclml_dtype_name(dtype), path_of(ctx, g->s.D) == LP_EMULATED ? " emulated" : "", ROWS,
             block_of(g->s.D), ROWS, block_of(g->s.D));
}

/* The forms the attention backward's warm list holds (head dims 64 and 128, BHLD, o and the
 * gradients in q's dtype), and with every_shape every head dim the kernels take in both layouts
 * with o and the gradients in q's dtype or fp32. */
void oclml__attention_lp_bwd_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    for (size_t D = 16; D <= MOST_HEAD_DIM; D += 16) {
        const lp_bwd_path path = path_of(ctx, D);
        if (path == LP_STAND_IN || (!list->every_shape && D != 64 && D != 128)) continue;
        for (int ab = OCLML_BFLOAT16; ab <= OCLML_FLOAT16; ab++)
            for (int out32 = 0; out32 <= (int)list->every_shape; out32++)
                for (int blhd = 0; blhd <= (int)list->every_shape; blhd++) {
                    const oclml_dtype out = out32 ? OCLML_FLOAT32 : (oclml_dtype)ab,
                                      grad[3] = {out, out, out};
                    lp_bwd_program prog;
                    program_of(path, (oclml_dtype)ab, out, grad, D, blhd, &prog);
                    char variant[64];
                    snprintf(variant, sizeof variant, "16-bit head dim %zu", D);
                    oclml__warm_add(list, op, variant, prog.spec);
                }
    }
}
