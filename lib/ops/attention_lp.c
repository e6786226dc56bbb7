/* Attention on bf16 and fp16 tensors: q, k, v, o, dout, dq, dk and dv each of any dtype, lse,
 * the mask and dmask fp32. The 16-bit tensors are converted to fp32 copies in scratch, the fp32
 * op runs on those, and its 16-bit outputs are rounded back: the arithmetic is the fp32 op's,
 * on values the 16-bit inputs hold exactly. Attention is compute-bound (L^2 D work against L D
 * elements moved), so the conversions cost a few percent of the call; they double the 16-bit
 * tensors' memory while it runs. The fp32 op validates every argument before anything is
 * written, and the outputs are converted back only after it succeeded. */
#include "ops/attention_lp.h"

#include "ops/ops.h"

#include <stdio.h>

/* A 16-bit tensor's fp32 stand-in: a scratch buffer of its shape (filled from it when `fill`),
 * or the tensor itself where it is fp32 or NULL. */
typedef struct stand_in {
    const oclml_tensor *of;
    oclml_tensor *view; /* the fp32 tensor the op gets */
    cl_mem scratch;
} stand_in;

static oclml_status stand_in_make(oclml_ctx *ctx, const oclml_tensor *t, bool fill, stand_in *s) {
    *s = (stand_in){t, (oclml_tensor *)t, NULL};
    if (!t || t->dtype == OCLML_FLOAT32) return OCLML_SUCCESS;
    s->view = NULL;
    oclml_status st = oclml__scratch_get(ctx, t->numel * sizeof(float), &s->scratch);
    if (!st)
        st =
            oclml_tensor_wrap_dtype(ctx, OCLML_FLOAT32, s->scratch, 0, t->ndim, t->shape, &s->view);
    if (!st && fill)
        st = oclml__cast_raw(ctx, t->dtype, t->mem, oclml__elem_offset(t), OCLML_FLOAT32,
                             s->scratch, 0, t->numel);
    return st;
}

/* Rounds an output's stand-in back into it. */
static oclml_status stand_in_store(oclml_ctx *ctx, const stand_in *s) {
    if (!s->scratch) return OCLML_SUCCESS;
    return oclml__cast_raw(ctx, OCLML_FLOAT32, s->scratch, 0, s->of->dtype, s->of->mem,
                           oclml__elem_offset(s->of), s->of->numel);
}

static void stand_in_free(oclml_ctx *ctx, stand_in *s) {
    if (s->scratch) {
        if (s->view) oclml_tensor_destroy(s->view);
        oclml__scratch_put(ctx, s->scratch);
    }
}

bool oclml__attention_is_lp(unsigned n, const oclml_tensor *const *ts) {
    for (unsigned i = 0; i < n; i++)
        if (ts[i] && ts[i]->dtype != OCLML_FLOAT32) return true;
    return false;
}

/* The context and tensor checks the stand-ins rely on (the fp32 op does the rest). */
static oclml_status check_all(oclml_ctx *ctx, unsigned n, const oclml_tensor *const *ts,
                              const char *const *names) {
    oclml_status st = oclml__check_ctx(ctx);
    for (unsigned i = 0; !st && i < n; i++)
        if (ts[i]) st = oclml__check_tensor_of(ctx, ts[i], names[i], OCLML__DTYPES_ALL);
    return st;
}

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

/* Makes the stand-ins of n tensors (those whose bit is set in `inputs` filled from them), runs
 * `run` on them, on success rounds back those whose bit is set in `outputs`, and frees them. */
typedef oclml_status (*lp_run_fn)(oclml_ctx *ctx, const void *call, oclml_tensor *const *views);

static oclml_status with_stand_ins(oclml_ctx *ctx, unsigned n, unsigned inputs, unsigned outputs,
                                   const oclml_tensor *const *ts, const char *const *names,
                                   lp_run_fn run, const void *call) {
    oclml_status st = check_all(ctx, n, ts, names);
    if (st) return st;
    stand_in s[10];
    oclml_tensor *views[10];
    unsigned made = 0;
    for (; !st && made < n; made++) {
        st = stand_in_make(ctx, ts[made], inputs >> made & 1u, &s[made]);
        views[made] = s[made].view;
    }
    if (!st) st = run(ctx, call, views);
    for (unsigned i = 0; !st && i < n; i++)
        if (outputs >> i & 1u) st = stand_in_store(ctx, &s[i]);
    for (unsigned i = 0; i < made; i++) stand_in_free(ctx, &s[i]);
    return st;
}

static oclml_status forward_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const oclml_attention_params *params = call;
    return oclml_attention(ctx, params, v[0], v[1], v[2], v[3], v[4]);
}

oclml_status oclml__attention_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                 const oclml_tensor *q, const oclml_tensor *k,
                                 const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse) {
    const oclml_tensor *const ts[] = {q, k, v, o, lse};
    const char *const names[] = {"q", "k", "v", "o", "lse"};
    oclml_status st = check_fp32(ctx, params, lse, NULL);
    return st ? st : with_stand_ins(ctx, 5, 0x7u, 0x8u, ts, names, forward_fp32, params);
}

typedef struct backward_call {
    const oclml_attention_params *params;
    oclml_tensor *dmask;
} backward_call;

static oclml_status backward_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const backward_call *c = call;
    return oclml_attention_backward(ctx, c->params, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7],
                                    v[8], c->dmask);
}

oclml_status oclml__attention_backward_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                          const oclml_tensor *q, const oclml_tensor *k,
                                          const oclml_tensor *v, const oclml_tensor *o,
                                          const oclml_tensor *lse, const oclml_tensor *dout,
                                          oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv,
                                          oclml_tensor *dmask) {
    const oclml_tensor *const ts[] = {q, k, v, o, lse, dout, dq, dk, dv};
    const char *const names[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    const backward_call c = {params, dmask};
    oclml_status st = check_fp32(ctx, params, lse, dmask);
    if (st) return st;
    return with_stand_ins(ctx, 9, 0x3fu, 0x1c0u, ts, names, backward_fp32, &c);
}

typedef struct plan_call {
    const oclml_attention_params *params;
    char *text;
    size_t len;
} plan_call;

static oclml_status plan_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const plan_call *c = call;
    return oclml_attention_plan(ctx, c->params, v[0], v[1], v[2], c->text, c->len);
}

oclml_status oclml__attention_plan_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                      const oclml_tensor *q, const oclml_tensor *k,
                                      const oclml_tensor *v, char *text, size_t len) {
    const oclml_tensor *const ts[] = {q, k, v};
    const char *const names[] = {"q", "k", "v"};
    plan_call c = {params, text, len};
    if (!text || !len)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "text buffer is NULL or empty");
    /* The stand-ins are neither filled nor stored: the plan reads shapes only. */
    const int n = snprintf(text, len, "16-bit tensors converted to fp32: ");
    if (n < 0 || (size_t)n >= len)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "text buffer too small");
    c.text += n;
    c.len -= (size_t)n;
    return with_stand_ins(ctx, 3, 0, 0, ts, names, plan_fp32, &c);
}
