/* The two models the training examples and `oclml-bench train` run: an MLP regression and a CNN
 * classifier, each with its data, parameters in an arena and an AdamW optimizer, all on the
 * device. A step is forward, loss, backward and the optimizer step, enqueued (no wait). Weights
 * and data come from train_common.h's generator, which examples/train_golden.py reproduces. */
#ifndef OCLML_TRAIN_MODELS_H
#define OCLML_TRAIN_MODELS_H

#include <oclml.h>
#include <stddef.h>

#include "train_parallel.h"

/* MLP dims[0] -> dims[1] -> dims[2] -> dims[3], GELU between layers, MSE against tanh(x T) of a
 * random teacher T, full batch, AdamW (torch's defaults). dtype OCLML_FLOAT32 trains in fp32;
 * bf16 or fp16 in mixed precision as autocast does: the inputs, hidden activations and their
 * gradients in that dtype, the products on its tensor cores, reading the arena's 16-bit copy of
 * the parameters (oclml_arena_copy_create), which AdamW keeps in step with the fp32 master
 * weights; the output, the loss and the parameters' gradients fp32. par (may be NULL): this
 * process's part of the batch and the gradient exchange (train_parallel.h); batch is the global
 * batch. */
typedef struct train_mlp train_mlp;
oclml_status train_mlp_create(oclml_ctx *ctx, size_t batch, const size_t dims[4], oclml_dtype dtype,
                              const train_parallel *par, train_mlp **model);
oclml_status train_mlp_step(train_mlp *m);
/* The loss of the last step (waits for it). */
oclml_status train_mlp_loss(train_mlp *m, float *loss);
oclml_arena *train_mlp_arena(const train_mlp *m);
/* The model's copy of par, which its steps call through (to change the hooks' user). */
train_parallel *train_mlp_parallel(train_mlp *m);
void train_mlp_destroy(train_mlp *m);

/* CNN on side x side RGB images: n_conv layers of 5x5 "same" convolution to channels[i], SiLU
 * and 2x2 max-pool, then a linear head to `classes`, cross-entropy against labels from a random
 * linear teacher (argmax, in double), AdamW (torch's defaults). dtype as the MLP's: in 16 bits
 * the images, feature maps and their gradients, the convolutions and the head reading the
 * arena's 16-bit copy; logits, loss and the parameters' gradients fp32. par as the MLP's (images
 * is the global batch). */
#define TRAIN_CNN_MAX_CONV 4
typedef struct train_cnn train_cnn;
oclml_status train_cnn_create(oclml_ctx *ctx, size_t images, size_t side, int n_conv,
                              const size_t *channels, size_t classes, oclml_dtype dtype,
                              const train_parallel *par, train_cnn **model);
oclml_status train_cnn_step(train_cnn *m);
oclml_status train_cnn_loss(train_cnn *m, float *loss);
oclml_arena *train_cnn_arena(const train_cnn *m);
train_parallel *train_cnn_parallel(train_cnn *m);
void train_cnn_destroy(train_cnn *m);

#endif
