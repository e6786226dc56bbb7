/* Attention on bf16 and fp16 tensors: q, k, v, o, dout, dq, dk and dv each of any dtype, lse,
 * the mask and dmask fp32. The forward takes the native 16-bit kernel where it applies
 * (attention_lp_fwd.c: q, k, v of one 16-bit dtype, a causal mask at most, head dims that are
 * multiples of 16 up to 128, and the tuning key attention.lp_mma with the device), the backward
 * its native kernels likewise (attention_lp_bwd.c: dout too of that dtype, no dmask, the tuning
 * key attention.lp_bwd_mma). Elsewhere the
 * 16-bit tensors are converted to fp32 copies in scratch, the fp32
 * op runs on those, and its 16-bit outputs are rounded back: the arithmetic is the fp32 op's,
 * on values the 16-bit inputs hold exactly. Attention is compute-bound (L^2 D work against L D
 * elements moved), so the conversions cost a few percent of the call; they double the 16-bit
 * tensors' memory while it runs. The values being exact in TF32, the tensor-core kernels take
 * one TF32 product where fp32 inputs take three (ONE_TF32 in attention_mma.h). The fp32 op validates every argument before anything is
 * written, and the outputs are converted back only after it succeeded. */
#include "ops/attention_lp.h"
#include "ops/stand_in.h"

#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tensors that stay fp32 (lse, dmask, the params' mask and key lengths; NULLs skipped),
 * refused before any conversion is enqueued (the fp32 op checks their shapes). */
static oclml_status check_fp32(oclml_ctx *ctx, const oclml_attention_params *params,
                               const oclml_tensor *lse, const oclml_tensor *dmask) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st && lse) st = oclml__check_tensor(ctx, lse, "lse");
    if (!st && dmask) st = oclml__check_tensor(ctx, dmask, "dmask");
    /* The params' tables where its struct_size has them (the fp32 op refuses bad sizes). */
    if (st || !params || params->struct_size < offsetof(oclml_attention_params, dropout)) return st;
    if (params->mask) st = oclml__check_tensor(ctx, params->mask, "mask");
    if (!st && params->key_lengths)
        st = oclml__check_tensor(ctx, params->key_lengths, "key_lengths");
    return st;
}

/* Whether every operand of the products is 16-bit: their stand-ins then hold values exact in
 * TF32 (an fp32 operand among them need not). */
static bool all_16bit(int n, const oclml_tensor *const *ts) {
    for (int i = 0; i < n; i++)
        if (ts[i]->dtype == OCLML_FLOAT32) return false;
    return true;
}

typedef struct forward_call {
    const oclml_attention_params *params;
    bool one_tf32;
} forward_call;

static oclml_status forward_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const forward_call *c = call;
    return oclml__attention_fp32(ctx, c->params, v[0], v[1], v[2], v[3], v[4], c->one_tf32);
}

oclml_status oclml__attention_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                 const oclml_tensor *q, const oclml_tensor *k,
                                 const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse) {
    const oclml_tensor *const ts[] = {q, k, v, o, lse};
    const char *const names[] = {"q", "k", "v", "o", "lse"};
    oclml_status st = check_fp32(ctx, params, lse, NULL);
    if (st) return st;
    if (!q || !k || !v) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "q, k or v is NULL");
    /* Every argument checked (as the fp32 op would check the stand-ins) before either path
     * enqueues anything; then the native kernel where it takes the call, else the stand-ins. A
     * NULL o is the fp32 op's to refuse. */
    oclml__att_geometry g;
    if (o && (st = oclml__attention_geometry(ctx, params, q, k, v, o, lse, &g))) return st;
    if (o && oclml__attention_lp_fwd_applies(ctx, &g, q, k, v))
        return oclml__attention_lp_fwd(ctx, &g, q, k, v, o, lse);
    const forward_call c = {params, all_16bit(3, ts)};
    return oclml__via_fp32(ctx, 5, 0x7u, 0x8u, ts, names, forward_fp32, &c);
}

typedef struct backward_call {
    const oclml_attention_params *params;
    oclml_tensor *dmask;
    bool one_tf32;
} backward_call;

static oclml_status backward_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const backward_call *c = call;
    return oclml__attention_backward_fp32(ctx, c->params, v[0], v[1], v[2], v[3], v[4], v[5], v[6],
                                          v[7], v[8], c->dmask, c->one_tf32);
}

oclml_status oclml__attention_backward_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                          const oclml_tensor *q, const oclml_tensor *k,
                                          const oclml_tensor *v, const oclml_tensor *o,
                                          const oclml_tensor *lse, const oclml_tensor *dout,
                                          oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv,
                                          oclml_tensor *dmask) {
    const oclml_tensor *const ts[] = {q, k, v, o, lse, dout, dq, dk, dv};
    const char *const names[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    oclml_status st = check_fp32(ctx, params, lse, dmask);
    if (st) return st;
    if (!q || !k || !v || !dout)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "q, k, v or dout is NULL");
    /* Every argument checked before either path enqueues anything; a NULL o or lse is the
     * checks' to refuse. */
    oclml__att_geometry g;
    if ((st = oclml__attention_backward_geometry(ctx, params, q, k, v, o, lse, dout, dq, dk, dv,
                                                 dmask, &g)))
        return st;
    if (oclml__attention_lp_bwd_applies(ctx, &g, q, k, v, dout, dmask))
        return oclml__attention_lp_bwd(ctx, &g, q, k, v, o, lse, dout, dq, dk, dv);
    const oclml_tensor *const operands[] = {q, k, v, dout};
    const backward_call c = {params, dmask, all_16bit(4, operands)};
    return oclml__via_fp32(ctx, 9, 0x3fu, 0x1c0u, ts, names, backward_fp32, &c);
}

typedef struct plan_call {
    const oclml_attention_params *params;
    char *text;
    size_t len;
    bool one_tf32;
} plan_call;

static oclml_status plan_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const plan_call *c = call;
    return oclml__attention_plan_fp32(ctx, c->params, v[0], v[1], v[2], c->text, c->len,
                                      c->one_tf32);
}

/* The plan with a native kernel: the stand-ins' plan text made so far ("16-bit tensors
 * converted to fp32: forward: F; backward: K") rewritten as "forward: ...; backward: ...", each
 * half the native kernel's text where it runs (fwd, bwd), else the stand-ins' ("16-bit tensors
 * converted to fp32: F"). */
static oclml_status native_plan(oclml_ctx *ctx, const oclml__att_geometry *g, const oclml_tensor *q,
                                const oclml_tensor *k, const oclml_tensor *v, bool fwd, bool bwd,
                                char *text, size_t len) {
    static const char lead[] = "16-bit tensors converted to fp32: ";
    char *copy = oclml__strdup(text);
    if (!copy) return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    char *f = strstr(copy, "forward: "), *b = strstr(copy, "; backward: ");
    f = f ? f + strlen("forward: ") : copy + strlen(copy);
    if (b) *b = '\0', b += strlen("; backward: ");
    char ftext[200], btext[200];
    if (fwd)
        oclml__attention_lp_fwd_describe(ctx, g, k, v, ftext, sizeof ftext);
    else
        snprintf(ftext, sizeof ftext, "%s%s", lead, f);
    if (bwd)
        oclml__attention_lp_bwd_describe(ctx, g, q, k, v, q, btext, sizeof btext);
    else
        snprintf(btext, sizeof btext, "%s%s", lead, b ? b : "");
    free(copy);
    const int n = snprintf(text, len, "forward: %s; backward: %s", ftext, btext);
    if (n < 0 || (size_t)n >= len)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "text buffer too small");
    return OCLML_SUCCESS;
}

oclml_status oclml__attention_plan_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                      const oclml_tensor *q, const oclml_tensor *k,
                                      const oclml_tensor *v, char *text, size_t len) {
    const oclml_tensor *const ts[] = {q, k, v};
    const char *const names[] = {"q", "k", "v"};
    if (!q || !k || !v) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "q, k or v is NULL");
    plan_call c = {params, text, len, all_16bit(3, ts)};
    if (!text || !len)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "text buffer is NULL or empty");
    /* The stand-ins are neither filled nor stored: the plan reads shapes only. */
    const int n = snprintf(text, len, "16-bit tensors converted to fp32: ");
    if (n < 0 || (size_t)n >= len)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "text buffer too small");
    c.text += n;
    c.len -= (size_t)n;
    oclml_status st = oclml__via_fp32(ctx, 3, 0, 0, ts, names, plan_fp32, &c);
    oclml__att_geometry g;
    if (st || oclml__attention_geometry(ctx, params, q, k, v, NULL, NULL, &g)) return st;
    /* the backward's dout taken to be of q's dtype, as the forward's o is */
    const bool fwd = oclml__attention_lp_fwd_applies(ctx, &g, q, k, v),
               bwd = oclml__attention_lp_bwd_applies(ctx, &g, q, k, v, q, NULL);
    return fwd || bwd ? native_plan(ctx, &g, q, k, v, fwd, bwd, text, len) : st;
}
