/* 16-bit tensors through an fp32 op: each 16-bit tensor argument gets an fp32 stand-in in
 * scratch (filled from it where it is read), the op runs on the stand-ins, and the 16-bit
 * outputs are rounded back from theirs once it succeeded. The arithmetic is then the fp32 op's on
 * values the 16-bit inputs hold exactly, and every output is rounded once. It costs a pass over
 * each 16-bit tensor and its fp32 size in scratch while the op runs. */
#ifndef OCLML_OPS_STAND_IN_H
#define OCLML_OPS_STAND_IN_H

#include "core/core.h"

#define OCLML__VIA_FP32_MOST 10 /* tensor arguments at most */

/* Whether any of the n tensors (NULLs skipped) is not fp32. */
bool oclml__any_16bit(unsigned n, const oclml_tensor *const *ts);

/* The fp32 op on the stand-ins: views[i] stands for the call's tensor i. */
typedef oclml_status (*oclml__fp32_run)(oclml_ctx *ctx, const void *call,
                                        oclml_tensor *const *views);

/* Checks the n tensors (any dtype; NULLs skipped: the fp32 op decides whether they may be),
 * makes their stand-ins, filling those whose bit is set in `inputs`, runs `run`, and on success
 * rounds back those whose bit is set in `outputs` (a tensor both read and written, as an
 * accumulated gradient, has both bits). fp32 tensors are passed as they are. */
oclml_status oclml__via_fp32(oclml_ctx *ctx, unsigned n, unsigned inputs, unsigned outputs,
                             const oclml_tensor *const *ts, const char *const *names,
                             oclml__fp32_run run, const void *call);

#endif
