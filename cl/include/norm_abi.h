/* The norms' host/kernel contract, valid C and OpenCL C (lib/ops/norm.c, cl/ops/norm.cl): the
 * flag bits of which optional tensors a call passes. Absent gamma and beta act as 1 and 0. */
#ifndef OCLML_NORM_ABI_H
#define OCLML_NORM_ABI_H
#define HAS_GAMMA 1 /* gamma given */
#define HAS_BETA 2  /* beta given */
#define SAVE_MEAN 4 /* write the row means */
#define SAVE_RSTD 8 /* write the row rstd */
/* The fused residual + norm's backward (oclml_residual_layernorm_backward): */
#define HAS_DR 16  /* dr given: added to the norm's input gradient */
#define WANT_DY 32 /* write the branch's gradient dy = dropout_backward(dx) */
/* The long rows' backward with parameter gradients (oclml_*norm_bwd_part_params): rows a
 * work-group's batch takes, columns a work-item owns. */
#define NORM_PP_ROWS 4
#define NORM_PP_COLS 4
#endif
