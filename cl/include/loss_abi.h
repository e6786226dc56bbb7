/* The losses' host/kernel contract, valid C and OpenCL C (lib/ops/loss.c, cl/ops/loss.cl): the
 * flag bits of the loss kernels, the pointwise losses' kinds and the chunked path's partials. */
#ifndef OCLML_LOSS_ABI_H
#define OCLML_LOSS_ABI_H

/* Flags. */
#define OCLML_LOSSF_WANT_LOSS 1u   /* write the per-row (per-element) losses */
#define OCLML_LOSSF_WANT_DX 2u     /* write the gradient of the first input */
#define OCLML_LOSSF_WANT_DQ 4u     /* KL: write the gradient of the second input */
#define OCLML_LOSSF_DLOSS 8u       /* an upstream gradient is given (else 1) */
#define OCLML_LOSSF_DLOSS_EACH 16u /* ... one per row or element (reduction none), else one */
#define OCLML_LOSSF_MEAN \
    32u                             /* gradients divided by the count (cross-entropy on class
                                    indices: count[0], the rows not ignored) or by n_div */
#define OCLML_LOSSF_COUNT 64u       /* the mean's divisor is count[0] (else n_div) */
#define OCLML_LOSSF_PROBS 128u      /* cross-entropy: targets are class probabilities */
#define OCLML_LOSSF_POS_WEIGHT 256u /* BCE with logits: a pos_weight per class */
#define OCLML_LOSSF_WEIGHT 1024u    /* cross-entropy: a weight per class */
#define OCLML_LOSSF_REDUCE 512u     /* pointwise: partial sums per work-group (mean, sum) */

/* Pointwise losses. */
#define OCLML_LOSSK_MSE 0u
#define OCLML_LOSSK_HUBER 1u
#define OCLML_LOSSK_BCE 2u

/* Floats a chunk leaves for its row on the chunked path: cross-entropy (max, sum of exp,
 * sum t (max - x), sum t), KL (max a, sum a, max b, sum b, sum exp(a - max a) (a - b)). */
#define OCLML_XENT_PART 4
#define OCLML_KL_PART 5

#endif
