/* A GPT-2 model trained on the device with liboclml: token and learned position embeddings,
 * pre-norm blocks (fused residual + layernorm, causal attention in the BLHD layout, a GELU-tanh
 * MLP), a final layernorm and an LM head tied to the token embedding; cross-entropy, AdamW
 * (weight decay on matrices only, nanoGPT's betas), clipping by the global norm, a cosine
 * learning rate after a linear warm-up; dropout (off by default) on attention's probabilities and
 * on both residual branches, as nanoGPT places it (not on the embeddings' sum, which the first
 * fused norm adds). Parameters live in one arena, activations in buffers made once: a step
 * allocates nothing. Used by examples/train_gpt and `oclml-bench train`. */
#ifndef OCLML_GPT_MODEL_H
#define OCLML_GPT_MODEL_H

#include <oclml.h>
#include <stddef.h>
#include <stdint.h>

#include "train_parallel.h"

typedef struct gpt_config {
    size_t vocab;   /* V */
    size_t context; /* the longest sequence (learned positions) */
    size_t layers;  /* L */
    size_t heads;   /* H (width divisible by it) */
    size_t width;   /* C */
    size_t batch;   /* B sequences a step */
    size_t seq;     /* T tokens a sequence, <= context */
    float lr;       /* peak learning rate */
    float min_lr;   /* the cosine's floor */
    size_t warmup;  /* steps of linear warm-up */
    size_t steps;   /* the schedule's length: the cosine reaches min_lr there */
    float weight_decay, grad_clip;
    float dropout; /* p of every dropout site in training steps (0: none) */
    uint64_t seed; /* initial weights, and with the step the dropout masks */
    /* OCLML_FLOAT32, or mixed precision as autocast splits it: the products (Q, K, V, the
     * projections, the MLP, the head) and attention on bf16 (fp16) activations and the arena's
     * 16-bit copy of the weights; the residual stream, the norms, the embeddings, the logits and
     * loss, and every parameter gradient fp32 (AdamW's master weights). */
    oclml_dtype dtype;
} gpt_config;

/* GPT-2 small (124M) at batch 8 x 1024, nanoGPT's optimizer settings. */
gpt_config gpt_config_small(void);
/* A 2-layer, width-64 model at a byte vocabulary, batch 4 x 32: minutes on PoCL. */
gpt_config gpt_config_tiny(void);

typedef struct gpt_model gpt_model;

oclml_status gpt_create(oclml_ctx *ctx, const gpt_config *cfg, gpt_model **model);
void gpt_destroy(gpt_model *m);
/* Parameters in the arena and their count. */
size_t gpt_parameters(const gpt_model *m);

/* Data parallelism: the gradient exchange's calls (train_parallel.h; its part and parts are the
 * caller's business: gpt_set_batch takes this process's sequences). NULL: one process. */
void gpt_set_parallel(gpt_model *m, const train_parallel *par);
/* The model's copy, which its steps call through. */
train_parallel *gpt_parallel(gpt_model *m);
/* The arena's tensors in the order the backward finishes their gradients (gpt_tensors of
 * them), for the exchange's buckets; after gpt_set_parallel (a gather moves the token
 * embedding's gradient forward). */
size_t gpt_tensors(const gpt_model *m);
oclml_arena *gpt_arena(const gpt_model *m);
void gpt_grad_order(const gpt_model *m, size_t *order);

/* Writes a batch: B x (T + 1) tokens per sequence, inputs the first T, targets the last T. */
oclml_status gpt_set_batch(gpt_model *m, const uint32_t *tokens);
/* One training step on the batch set last: forward, loss, backward, learning rate of the
 * schedule at this step, the optimizer step. Enqueued, no wait. */
oclml_status gpt_step(gpt_model *m);
/* The forward alone, without dropout (logits of the batch set last, no loss). */
oclml_status gpt_forward(gpt_model *m);
/* The last step's mean loss (waits for it). */
oclml_status gpt_loss(gpt_model *m, float *loss);
/* The logits of sequence 0 at position t after gpt_forward or gpt_step (waits), V floats. */
oclml_status gpt_logits_at(gpt_model *m, size_t t, float *logits);
/* Phase times of one step with profiling on the context, ms of kernel time each: the forward's
 * embedding (with the first norm), attention halves of the blocks (with the second norm), MLP
 * halves (with the next norm), head and loss; the backward's head (with the final norm), MLP
 * halves, attention halves, embeddings; the optimizer. */
#define GPT_PHASES 9
extern const char *const gpt_phase_names[GPT_PHASES];
oclml_status gpt_step_phases(gpt_model *m, double ms[GPT_PHASES]);

/* Checkpoints: the configuration's shape, the step, the parameters and AdamW's moments. */
oclml_status gpt_save(gpt_model *m, const char *path);
oclml_status gpt_load(gpt_model *m, const char *path);

#endif
