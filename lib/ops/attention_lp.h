/* Attention on 16-bit tensors through fp32 stand-ins (attention_lp.c): the public entry points
 * hand calls with any 16-bit tensor here. */
#ifndef OCLML_OPS_ATTENTION_LP_H
#define OCLML_OPS_ATTENTION_LP_H

#include "core/core.h"

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

#endif
