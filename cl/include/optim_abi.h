/* The optimizer's host/kernel contract (lib/ops/optim.c, cl/ops/optim.cl), valid in C and OpenCL C.
 *
 * Scalars block: OPT_BLOCK 32-bit words, two of them (ping-pong). A step with parity q reads
 * block q, which nothing writes during that launch, and its leader work-item (group 0, item 0)
 * writes block 1 - q (the step count advanced unless skipped, the found-inf flag cleared); the
 * next step has parity 1 - q. Floats are stored as their bits. */
#ifndef OCLML_OPTIM_ABI_H
#define OCLML_OPTIM_ABI_H

#define OPT_LR 0         /* float: learning rate */
#define OPT_GRAD_SCALE 1 /* float: gradients are divided by it (a loss scale); 1 by default */
#define OPT_STEP 2       /* uint: steps taken (torch's state['step']) */
#define OPT_FOUND 3      /* uint: set to 1 by the check pass when a gradient is inf or NaN */
#define OPT_LAST_FOUND 4 /* uint: the last step's flag (1: it was skipped) */
#define OPT_SKIPPED 5    /* uint: steps skipped so far */
#define OPT_NORM 6       /* float: the last step's global gradient norm (clipping), unscaled */
#define OPT_LR1 7        /* float: LaProp's lr-weighted bias-correction sum */
#define OPT_GROWTH 8     /* uint: steps in a row without inf/NaN since the scale last changed */
#define OPT_BLOCK 16

/* Runtime flags of the step kernel. */
#define OPT_F_MAXIMIZE 1u
#define OPT_F_DECOUPLED 2u /* AdamW: p *= 1 - lr wd; else wd p is added to the gradient */
#define OPT_F_BIAS_CORR 4u
#define OPT_F_CHECK 8u /* skip the step when the check pass found inf/NaN */
#define OPT_F_CLIP 16u /* clip by the global norm of the partials */
#define OPT_F_NESTEROV 32u
#define OPT_F_DYNAMIC 64u /* dynamic loss scaling (GradScaler's update after the check) */

/* Kinds (-DOPT_KIND=...). */
#define OPT_SGD 0
#define OPT_ADAM 1
#define OPT_LAPROP 2

/* The AGC pass's tensor table: OPT_T_WORDS 64-bit words a tensor. */
#define OPT_T_OFFSET 0 /* element offset in the arena */
#define OPT_T_NUMEL 1
#define OPT_T_ROW 2  /* elements of a unit (a row: numel / shape[0]; 1-D: numel) */
#define OPT_T_UNIT 3 /* units before this tensor */
#define OPT_T_WORDS 4

#endif
