/* Attention on 16-bit tensors (attention_lp.c): the public entry points hand calls with any
 * 16-bit tensor here; the forward and the backward run on the native 16-bit kernels where they
 * apply (attention_lp_fwd.c, attention_lp_bwd.c), everything else through fp32 stand-ins. */
#ifndef OCLML_OPS_ATTENTION_LP_H
#define OCLML_OPS_ATTENTION_LP_H

#include "core/core.h"
#include "ops/attention_plan.h"
#include "ops/ops.h"

oclml_status oclml__attention_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                 const oclml_tensor *q, const oclml_tensor *k,
                                 const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse);
oclml_status oclml__attention_backward_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                          const oclml_tensor *q, const oclml_tensor *k,
                                          const oclml_tensor *v, const oclml_tensor *o,
                                          const oclml_tensor *lse, const oclml_tensor *dout,
                                          oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv,
                                          oclml_tensor *dmask);
oclml_status oclml__attention_plan_lp(oclml_ctx *ctx, const oclml_attention_params *params,
                                      const oclml_tensor *q, const oclml_tensor *k,
                                      const oclml_tensor *v, char *text, size_t len);

/* The fp32 op (attention.c) on tensors the caller knows to be fp32; one_tf32: q, k, v and dout
 * hold values exact in TF32 (the 16-bit stand-ins), so the tensor-core kernels take one TF32
 * product in place of 3xTF32's three. */
oclml_status oclml__attention_fp32(oclml_ctx *ctx, const oclml_attention_params *params,
                                   const oclml_tensor *q, const oclml_tensor *k,
                                   const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse,
                                   bool one_tf32);
oclml_status oclml__attention_backward_fp32(oclml_ctx *ctx, const oclml_attention_params *params,
                                            const oclml_tensor *q, const oclml_tensor *k,
                                            const oclml_tensor *v, const oclml_tensor *o,
                                            const oclml_tensor *lse, const oclml_tensor *dout,
                                            oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv,
                                            oclml_tensor *dmask, bool one_tf32);
oclml_status oclml__attention_plan_fp32(oclml_ctx *ctx, const oclml_attention_params *params,
                                        const oclml_tensor *q, const oclml_tensor *k,
                                        const oclml_tensor *v, char *text, size_t len,
                                        bool one_tf32);

/* A forward call's shape and positional geometry as the kernels take it (attention.c's rules:
 * the scale in use, the diagonal's shift, the window sides, -1 open; causal masks have wr 0);
 * window: the params ask for a window (not a causal mask alone). */
typedef struct oclml__att_geometry {
    oclml__att_shape s;
    float scale;
    int shift, wl, wr;
    bool window;
} oclml__att_geometry;

/* The forward's argument checks (attention.c's, with q, k, v and o of any dtype; lse fp32; o
 * NULL: not checked, for plans) and the call's geometry. */
oclml_status oclml__attention_geometry(oclml_ctx *ctx, const oclml_attention_params *params,
                                       const oclml_tensor *q, const oclml_tensor *k,
                                       const oclml_tensor *v, const oclml_tensor *o,
                                       const oclml_tensor *lse, oclml__att_geometry *g);

/* The backward's argument checks (attention.c's, with q, k, v, o, dout, dq, dk and dv of any
 * dtype; lse and dmask fp32; dq, dk, dv, dmask may be NULL) and the call's geometry. */
oclml_status oclml__attention_backward_geometry(
    oclml_ctx *ctx, const oclml_attention_params *params, const oclml_tensor *q,
    const oclml_tensor *k, const oclml_tensor *v, const oclml_tensor *o, const oclml_tensor *lse,
    const oclml_tensor *dout, const oclml_tensor *dq, const oclml_tensor *dk,
    const oclml_tensor *dv, const oclml_tensor *dmask, oclml__att_geometry *g);

/* The native 16-bit forward (attention_lp_fwd.c). oclml__attention_lp_fwd_applies: whether it
 * takes a call of this geometry (q, k, v checked), per the tuning key attention.lp_mma and the
 * device; oclml__attention_lp_fwd runs it (every argument checked); _describe writes its plan;
 * _warm lists its programs for the attention forward's warm list. */
bool oclml__attention_lp_fwd_applies(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v);
oclml_status oclml__attention_lp_fwd(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse);
void oclml__attention_lp_fwd_describe(oclml_ctx *ctx, const oclml__att_geometry *g,
                                      const oclml_tensor *k, const oclml_tensor *v, char *text,
                                      size_t len);
void oclml__attention_lp_fwd_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list);

/* The native 16-bit backward (attention_lp_bwd.c). oclml__attention_lp_bwd_applies: whether it
 * takes a call of this geometry (q, k, v, dout checked; dmask NULL), per the tuning key
 * attention.lp_bwd_mma and the device; oclml__attention_lp_bwd runs it (every argument checked;
 * dq, dk, dv may be NULL); _describe writes its plan (the tile: its choices read the operands'
 * offsets); _warm lists its programs for the attention
 * backward's warm list. */
bool oclml__attention_lp_bwd_applies(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v, const oclml_tensor *dout,
                                     const oclml_tensor *dmask);
oclml_status oclml__attention_lp_bwd(oclml_ctx *ctx, const oclml__att_geometry *g,
                                     const oclml_tensor *q, const oclml_tensor *k,
                                     const oclml_tensor *v, const oclml_tensor *o,
                                     const oclml_tensor *lse, const oclml_tensor *dout,
                                     oclml_tensor *dq, oclml_tensor *dk, oclml_tensor *dv);
void oclml__attention_lp_bwd_describe(oclml_ctx *ctx, const oclml__att_geometry *g,
                                      const oclml_tensor *q, const oclml_tensor *k,
                                      const oclml_tensor *v, const oclml_tensor *dout, char *text,
                                      size_t len);
void oclml__attention_lp_bwd_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list);

#endif
