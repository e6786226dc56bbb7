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

#endif
