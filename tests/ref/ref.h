/* Plain-C references with double accumulation (NUMERICS.md). One function family per op. */
#ifndef OCLML_REF_H
#define OCLML_REF_H

#include <oclml.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* C = alpha op(A) op(B) + beta C, row-major; A is [M x K] (or [K x M] when ta), B [K x N] (or
 * [N x K] when tb). beta == 0 ignores C's old contents. */
void ref_gemm(int ta, int tb, size_t m, size_t n, size_t k, double alpha, const float *a,
              const float *b, double beta, const float *c_in, double *c_out);
/* One element of the same product. */
double ref_gemm_at(int ta, int tb, size_t m, size_t n, size_t k, double alpha, const float *a,
                   const float *b, double beta, const float *c_in, size_t i, size_t j);

/* Softmax / log-softmax along rows (NUMERICS.md semantics: -inf masked, a fully masked row gives
 * 0 (log: -inf), NaN in a row gives a NaN row). */
void ref_softmax(size_t rows, size_t cols, const float *x, int log, double *y);
/* Backward from the forward output y (float, as the device sees it). */
void ref_softmax_backward(size_t rows, size_t cols, const float *y, const float *dy, int log,
                          double *dx);
/* The magnitude of the terms of each dx (the same formula with absolute values): the scale
 * against which the backward's rounding is judged. */
void ref_softmax_backward_scale(size_t rows, size_t cols, const float *y, const float *dy, int log,
                                double *scale);

/* LayerNorm (rms = 0) / RMSNorm (rms = 1) forward: y, and per-row mean and rstd. gamma, beta
 * may be NULL. */
void ref_norm(int rms, size_t rows, size_t cols, const float *x, const float *gamma,
              const float *beta, double eps, double *y, double *mean, double *rstd);
/* Backward from the saved (float) mean and rstd: dx, dgamma, dbeta (either may be NULL), and the
 * magnitudes of dx's terms (scale, may be NULL) to judge its rounding by. */
void ref_norm_backward(int rms, size_t rows, size_t cols, const float *x, const float *gamma,
                       const float *mean, const float *rstd, const float *dy, double *dx,
                       double *dgamma, double *dbeta, double *scale);
/* The magnitudes of dgamma's and dbeta's terms (sum over rows of |dy * xhat| and |dy|), to judge
 * their rounding by: a column's sum over few rows may cancel to near zero. */
void ref_norm_param_scale(int rms, size_t rows, size_t cols, const float *x, const float *mean,
                          const float *rstd, const float *dy, double *sg, double *sb);

/* Elementwise references in double: op codes are oclml_unary_op / oclml_binary_op values. */
double ref_unary(int op, double p, double x);
double ref_unary_grad(int op, double p, double x); /* f'(x) */
/* The magnitude of f'(x)'s terms, which its rounding scales with: where they cancel (SiLU's and
 * the GELUs' derivatives cross zero near x = -1.28 and -0.75) |f'(x)| alone is no scale. */
double ref_unary_grad_scale(int op, double p, double x);
double ref_binary(int op, double a, double b);

/* One GRU cell on double state: h_new [D] from x [I] and h [D]; rh [D] is scratch. */
void ref_gru_cell(int cho, size_t I, size_t D, const double *x, const double *h, const float *w_ih,
                  const float *w_hh, const float *b_ih, const float *b_hh, double *rh,
                  double *h_new);
/* GRU step (cho: 0 TORCH, 1 CHO): h_new [B x D] from x [B x I], h [B x D], PyTorch layout weights;
 * b_ih / b_hh may be NULL. */
void ref_gru_step(int cho, size_t B, size_t I, size_t D, const float *x, const float *h,
                  const float *w_ih, const float *w_hh, const float *b_ih, const float *b_hh,
                  double *h_new);

/* RSSM ensemble rollout (RSSM.md) in double precision. Sizes and flags as in
 * oclml_rssm_params; f0 is [E x F] or shared [F]; b_ih / b_hh may be NULL. Outputs [E x T] (Y, H,
 * hnorm) and the final [E x D], [E x S], [E x F] states; any output but Y may be NULL. */
typedef struct ref_rssm_args {
    int cho, sample;
    size_t E, T, D, G, C, F, K;
    double unimix;
    unsigned long long seed, step_offset;
    const float *w_ih, *w_hh, *b_ih, *b_hh, *w_p, *b_p, *w_y, *b_y, *h0, *z0, *f0;
    int f0_shared;
} ref_rssm_args;
void ref_rssm_rollout(const ref_rssm_args *a, double *Y, double *H, double *hnorm, double *hfin,
                      double *zfin, double *ffin);
/* Philox4x32-10 as RSSM.md uses it: counter (member, step, group, 0), key (seed lo, seed hi). */
void ref_philox4x32_10(const unsigned ctr_in[4], const unsigned key_in[2], unsigned out[4]);

/* Embedding: y [N x D] = rows of table [V x D] by ids (NaN rows for ids that are not integers in
 * [0, V)); the backward adds dy's rows into dtable (which holds its start) by id. */
void ref_embedding(const float *ids, size_t N, const float *table, size_t V, size_t D, double *y);
void ref_embedding_backward(const float *ids, size_t N, const float *dy, size_t V, size_t D,
                            double *dtable);

/* Dropout's uniform and keep decision for element i (flat index) under seed and offset, the rule
 * of cl/include/philox.h: kept iff the uniform >= p. */
double ref_dropout_uniform(uint64_t seed, uint64_t offset, uint64_t i);
bool ref_dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, double p);

/* History encoder: 64 features of one series pair (loss[len], gnorm[len]) into out[64]. */
void ref_history_encode(const float *loss, const float *gnorm, size_t len, double out[64]);

/* Attention (oclml_attention) by its definition. q [B, H, Lq, D], k and v [B, Hkv, Lk, D] (blhd:
 * length and heads swapped); scale 0: 1 / sqrt(D); causal 0 none, 1 top-left, 2 bottom-right;
 * wl, wr -1: open; key_lengths NULL or [B]; mask NULL or [mask_b, mask_h, Lq, Lk] (mask_b 1 or B,
 * mask_h 1 or H); drop_p > 0: dropout on the probabilities, P's element (b, h, i, j) kept as
 * ref_dropout_keep keeps element ((b H + h) Lq + i) Lk + j under (drop_seed, drop_offset). */
typedef struct ref_attention_args {
    size_t B, H, Hkv, Lq, Lk, D;
    int blhd, causal;
    double scale;
    long wl, wr;
    const float *key_lengths, *mask;
    size_t mask_b, mask_h;
    double drop_p;
    uint64_t drop_seed, drop_offset;
} ref_attention_args;
/* The scale in use, whether key j is visible to query i of batch entry b, and the offset of
 * row (b, h, i) of the mask. */
double ref_attention_scale(const ref_attention_args *a);
int ref_attention_visible(const ref_attention_args *a, size_t b, size_t i, size_t j);
size_t ref_attention_mask_at(const ref_attention_args *a, size_t b, size_t h, size_t i);
/* o (q's shape) and lse [B, H, Lq] (may be NULL); a row that sees no key: o 0, lse -inf. */
void ref_attention(const ref_attention_args *a, const float *q, const float *k, const float *v,
                   double *o, double *lse);
/* dq, dk, dv and dmask (the mask's shape) from dout, any may be NULL; s* (may be NULL) receive
 * the magnitudes of each gradient's terms, the scale its rounding is judged against. */
void ref_attention_backward(const ref_attention_args *a, const float *q, const float *k,
                            const float *v, const float *dout, double *dq, double *dk, double *dv,
                            double *dmask, double *sq, double *sk, double *sv, double *smask);

/* A convolution (oclml_conv2d): x [N, C, H, W], w [K, C/groups, R, S] (transposed: [C, K/groups,
 * R, S]), strides (sh, sw), padding before (pt, pl) and after (pb, pr), dilation (dh, dw), and
 * the transposed convolution's output padding (oph, opw). */
typedef struct ref_conv_case {
    size_t N, C, H, W, K, R, S;
    unsigned sh, sw, pt, pl, pb, pr, dh, dw, groups, oph, opw;
} ref_conv_case;
/* y [N, K, P, Q] = conv(x, w) + b (b may be NULL), by the definition. */
void ref_conv(const ref_conv_case *c, const double *x, const double *w, const double *b, double *y,
              size_t P, size_t Q);
/* The transposed convolution: each element of x [N, C, H, W] scatters x * w into the output
 * window it maps to; w [C, K/groups, R, S], y [N, K, P, Q], b may be NULL. */
void ref_conv_transpose(const ref_conv_case *c, const double *x, const double *w, const double *b,
                        double *y, size_t P, size_t Q);

/* A pooling (oclml_pool2d_params): planes of H x W, windows kh x kw at strides (sh, sw; 0: the
 * window), padding (ph, pw), ceil mode, and whether the average counts the padding. */
typedef struct ref_pool_case {
    size_t N, C, H, W;
    unsigned kh, kw, sh, sw, ph, pw;
    int ceil_mode, include_pad;
} ref_pool_case;
/* The divisor of average window (p, q): the window up to the padded edge, or its inside part. */
double ref_pool_count(const ref_pool_case *c, size_t p, size_t q);
/* Max (the first maximum; NaN counts as largest, the last NaN wins) or mean of window (p, q) of
 * plane x; *at (may be NULL) its first maximum's offset in the plane. */
double ref_pool_window(const ref_pool_case *c, const float *x, size_t p, size_t q, int max,
                       long *at);

/* Losses (reduction: an oclml_loss_reduction value; dloss NULL: 1, else one value, or one a
 * row or element for none). Cross-entropy as PyTorch's weighted, label-smoothed one, on class
 * indices (t [rows], ignore: the ignored index) or probabilities (probs, t [rows x cols]). */
typedef struct ref_xent_opts {
    int probs, reduction, ignore;
    double eps;
    const double *dloss; /* NULL: 1; one value, or one per row for none */
    const double *cw;    /* class weights, NULL: 1 */
} ref_xent_opts;
/* loss (1 or rows values) and dx (rows x cols, may be NULL). */
void ref_xent(const ref_xent_opts *o, size_t rows, size_t cols, const double *x, const double *t,
              double *loss, double *dx);
/* KL(softmax(a) || softmax(b)) per row; loss and the gradients (each may be NULL). */
void ref_kl(int reduction, const double *dloss, size_t rows, size_t cols, const double *a,
            const double *b, double *loss, double *da, double *db);
/* MSE, Huber (delta) or BCE with logits (pos_weight pw of pwlen values, cycled; may be NULL)
 * over n elements: loss, dx, and dx_scale (each may be NULL), what each gradient's fp32 error
 * scales with (ref/loss.c). */
enum { REF_MSE, REF_HUBER, REF_BCE_WITH_LOGITS };
void ref_pointwise(int kind, int reduction, double delta, const double *pw, size_t pwlen,
                   const double *dloss, size_t n, const double *x, const double *t, double *loss,
                   double *dx, double *dx_scale);

/* An arena's tensors as the optimizer reference reads them: n tensors, tensor i's len[i]
 * elements from offset off[i] in rows of row[i] (its slices along the first dimension; all of it
 * where 1-D), padded floats in all (numel: the tensors' elements). */
typedef struct ref_arena_layout {
    size_t n, padded, numel;
    size_t off[64], len[64], row[64];
} ref_arena_layout;
/* torch.optim's step for the config's group of tensors (SGD with momentum, dampening and
 * Nesterov; Adam, AdamW and LaProp with amsgrad, weight decay, maximize, bias correction), with
 * clipping by the global norm, adaptive clipping, the skip on inf/NaN and GradScaler's dynamic
 * scale (updated after the gradients were unscaled by the old one). */
typedef struct ref_optim {
    oclml_optim_config c;
    size_t lo, hi; /* the group's element range */
    double *p, *s[3];
    unsigned step, skipped, growth;
    double lr, scale, lr1, norm;
    int last_found;
} ref_optim;
/* From the arena's parameters p (padded floats); the learning rate c->lr, gradient scale 1. */
void ref_optim_init(ref_optim *r, const oclml_optim_config *c, const ref_arena_layout *l,
                    const float *p);
void ref_optim_free(ref_optim *r);
/* One step; g (double, modified in place by adaptive clipping) covers the whole arena. */
void ref_optim_step(ref_optim *r, const ref_arena_layout *l, double *g);

#endif
