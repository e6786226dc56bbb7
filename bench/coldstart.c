/* oclml-coldstart: what each public op's first call costs in a fresh process, once with every
 * program cache empty (liboclml's disk cache, PoCL's, NVIDIA's: CUDA_CACHE_DISABLE=1) and once
 * with liboclml's disk cache holding the programs; compiles dominate both.
 *
 *   oclml-coldstart [--device SEL] [--json FILE] [--keep-caches] [OPS...]
 *
 * Each measurement runs this binary again as a child (`--child OP`), because any compile cached
 * in a process (by liboclml, the driver or CLBlast) would hide the next op's cost. The child
 * prints one RESULT line; the parent prints the table and the JSON lines. */
#include <oclml.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tree.h"

extern char **environ;

/* ======================== child: one op, timed ======================== */

enum { MAX_SLOTS = 16 };

typedef struct shape {
    int nd;
    size_t d[OCLML_MAX_DIMS];
} shape;

/* A runner is called once to make its op's inputs (preparing: the op is not called), then once
 * per timed call. Its tensors live in numbered slots, so that the timed calls find the same
 * ones and the child can free them all. */
typedef struct op_case {
    oclml_ctx *ctx;
    int preparing;
    oclml_status st; /* the first failure while making inputs */
    oclml_tensor *slot[MAX_SLOTS];
    unsigned seed;
} op_case;

typedef oclml_status (*runner_fn)(op_case *c);

static float uniform01(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 16777216.0f;
}

/* The tensor of dtype in slot i, made while preparing: uniform values in [lo, hi) when fill is
 * set (lo == hi gives a constant), else uninitialised (an output). */
static oclml_tensor *make_of(op_case *c, int i, const shape *s, oclml_dtype dtype, int fill,
                             float lo, float hi) {
    if (!c->preparing || c->st || c->slot[i]) return c->slot[i];
    c->st = oclml_tensor_create_dtype(c->ctx, dtype, s->nd, s->d, &c->slot[i]);
    if (c->st || !fill) return c->slot[i];
    size_t n = 1;
    for (int d = 0; d < s->nd; d++) n *= s->d[d];
    float *v = malloc(n * sizeof *v);
    if (!v) {
        c->st = OCLML_ERR_OUT_OF_MEMORY;
        return c->slot[i];
    }
    for (size_t k = 0; k < n; k++) v[k] = lo + (hi - lo) * uniform01(&c->seed);
    c->st = oclml_tensor_write(c->slot[i], v, n); /* blocking: not part of any timed call */
    free(v);
    return c->slot[i];
}

static oclml_tensor *make(op_case *c, int i, const shape *s, int fill, float lo, float hi) {
    return make_of(c, i, s, OCLML_FLOAT32, fill, lo, hi);
}

static oclml_tensor *input(op_case *c, int i, const shape *s, float lo, float hi) {
    return make(c, i, s, 1, lo, hi);
}

static oclml_tensor *output(op_case *c, int i, const shape *s) { return make(c, i, s, 0, 0, 0); }

/* Whether the runner calls its op now: not while making inputs, nor after a failure there. */
static int ready(const op_case *c) { return !c->preparing && !c->st; }

/* Row ops: 64 rows of 1024; elementwise and memory ops: 4096 elements. */
static const shape ROWS = {2, {64, 1024}}, ROW = {1, {1024}}, PER_ROW = {1, {64}};
static const shape ELEMS = {1, {4096}}, SCALAR = {1, {1}};

static oclml_status run_fill(op_case *c) {
    oclml_tensor *y = output(c, 0, &ELEMS);
    return ready(c) ? oclml_fill(c->ctx, y, 1.0f) : c->st;
}

static oclml_status run_copy(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, -1, 1), *y = output(c, 1, &ELEMS);
    return ready(c) ? oclml_copy(c->ctx, x, y) : c->st;
}

static oclml_status run_cast(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, -1, 1),
                 *y = make_of(c, 1, &ELEMS, OCLML_BFLOAT16, 0, 0, 0);
    return ready(c) ? oclml_cast(c->ctx, x, y) : c->st;
}

static oclml_status run_unary(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, -1, 1), *y = output(c, 1, &ELEMS);
    return ready(c) ? oclml_unary(c->ctx, OCLML_GELU_ERF, x, y) : c->st;
}

static oclml_status run_unary_backward(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, -1, 1), *dy = input(c, 1, &ELEMS, -1, 1);
    oclml_tensor *dx = output(c, 2, &ELEMS);
    return ready(c) ? oclml_unary_backward(c->ctx, OCLML_GELU_ERF, x, dy, dx) : c->st;
}

/* Positive bases, so that x^1.5 is a number (the time would not change, but NaNs look wrong). */
static oclml_status run_pow(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, 0.5f, 1.5f), *y = output(c, 1, &ELEMS);
    return ready(c) ? oclml_pow(c->ctx, x, 1.5f, y) : c->st;
}

static oclml_status run_pow_backward(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, 0.5f, 1.5f), *dy = input(c, 1, &ELEMS, -1, 1);
    oclml_tensor *dx = output(c, 2, &ELEMS);
    return ready(c) ? oclml_pow_backward(c->ctx, x, 1.5f, dy, dx) : c->st;
}

static oclml_status run_binary(op_case *c) {
    oclml_tensor *a = input(c, 0, &ELEMS, -1, 1), *b = input(c, 1, &ELEMS, -1, 1);
    oclml_tensor *y = output(c, 2, &ELEMS);
    return ready(c) ? oclml_binary(c->ctx, OCLML_ADD, a, b, y) : c->st;
}

static oclml_status run_binary_scalar(op_case *c) {
    oclml_tensor *a = input(c, 0, &ELEMS, -1, 1), *y = output(c, 1, &ELEMS);
    return ready(c) ? oclml_binary_scalar(c->ctx, OCLML_MUL, a, 2.0f, y) : c->st;
}

/* Dropout at p 0.1 (a transformer's). */
static oclml_dropout_params drop_params(void) {
    oclml_dropout_params d;
    oclml_dropout_params_init(&d);
    d.p = 0.1f;
    d.seed = 7;
    return d;
}

static oclml_status run_dropout(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, -1, 1), *y = output(c, 1, &ELEMS);
    oclml_dropout_params d = drop_params();
    return ready(c) ? oclml_dropout(c->ctx, &d, x, y) : c->st;
}

static oclml_status run_dropout_backward(op_case *c) {
    oclml_tensor *dy = input(c, 0, &ELEMS, -1, 1), *dx = output(c, 1, &ELEMS);
    oclml_dropout_params d = drop_params();
    return ready(c) ? oclml_dropout_backward(c->ctx, &d, dy, dx) : c->st;
}

static oclml_status run_dropout_add(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, -1, 1), *y = input(c, 1, &ELEMS, -1, 1),
                 *r = output(c, 2, &ELEMS);
    oclml_dropout_params d = drop_params();
    return ready(c) ? oclml_dropout_add(c->ctx, &d, x, y, r) : c->st;
}

/* Embedding: 2048 tokens (all id 7) of a 1000 x 256 table. */
static const shape EMB_IDS = {1, {2048}}, EMB_TABLE = {2, {1000, 256}}, EMB_ROWS = {2, {2048, 256}};

static oclml_status run_embedding(op_case *c) {
    oclml_tensor *ids = input(c, 0, &EMB_IDS, 7, 7), *table = input(c, 1, &EMB_TABLE, -1, 1),
                 *y = output(c, 2, &EMB_ROWS);
    return ready(c) ? oclml_embedding(c->ctx, ids, table, y) : c->st;
}

static oclml_status run_embedding_backward(op_case *c) {
    oclml_tensor *ids = input(c, 0, &EMB_IDS, 7, 7), *dy = input(c, 1, &EMB_ROWS, -1, 1),
                 *dtable = output(c, 2, &EMB_TABLE);
    return ready(c) ? oclml_embedding_backward(c->ctx, ids, dy, dtable, 0) : c->st;
}

static oclml_status run_residual_layernorm(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *y = input(c, 1, &ROWS, -1, 1),
                 *g = input(c, 2, &ROW, 0.5f, 1.5f), *b = input(c, 3, &ROW, -1, 1),
                 *r = output(c, 4, &ROWS), *out = output(c, 5, &ROWS), *m = output(c, 6, &PER_ROW),
                 *s = output(c, 7, &PER_ROW);
    oclml_dropout_params d = drop_params();
    return ready(c) ? oclml_residual_layernorm(c->ctx, &d, x, y, g, b, 1e-5f, r, out, m, s) : c->st;
}

static oclml_status run_residual_layernorm_backward(op_case *c) {
    oclml_tensor *r = input(c, 0, &ROWS, -1, 1), *g = input(c, 1, &ROW, 0.5f, 1.5f),
                 *m = input(c, 2, &PER_ROW, -0.1f, 0.1f), *s = input(c, 3, &PER_ROW, 0.5f, 2),
                 *dout = input(c, 4, &ROWS, -1, 1), *dr = input(c, 5, &ROWS, -1, 1),
                 *dx = output(c, 6, &ROWS), *dy = output(c, 7, &ROWS), *dg = output(c, 8, &ROW),
                 *db = output(c, 9, &ROW);
    oclml_dropout_params d = drop_params();
    return ready(c)
               ? oclml_residual_layernorm_backward(c->ctx, &d, r, g, m, s, dout, dr, dx, dy, dg, db)
               : c->st;
}

static oclml_status run_residual_rmsnorm(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *y = input(c, 1, &ROWS, -1, 1),
                 *g = input(c, 2, &ROW, 0.5f, 1.5f), *r = output(c, 3, &ROWS),
                 *out = output(c, 4, &ROWS), *s = output(c, 5, &PER_ROW);
    oclml_dropout_params d = drop_params();
    return ready(c) ? oclml_residual_rmsnorm(c->ctx, &d, x, y, g, 1e-5f, r, out, s) : c->st;
}

static oclml_status run_residual_rmsnorm_backward(op_case *c) {
    oclml_tensor *r = input(c, 0, &ROWS, -1, 1), *g = input(c, 1, &ROW, 0.5f, 1.5f),
                 *s = input(c, 2, &PER_ROW, 0.5f, 2), *dout = input(c, 3, &ROWS, -1, 1),
                 *dr = input(c, 4, &ROWS, -1, 1), *dx = output(c, 5, &ROWS),
                 *dy = output(c, 6, &ROWS), *dg = output(c, 7, &ROW);
    oclml_dropout_params d = drop_params();
    return ready(c) ? oclml_residual_rmsnorm_backward(c->ctx, &d, r, g, s, dout, dr, dx, dy, dg)
                    : c->st;
}

static oclml_status run_reduce_rows(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *y = output(c, 1, &PER_ROW);
    return ready(c) ? oclml_reduce_rows(c->ctx, OCLML_REDUCE_SUM, x, y) : c->st;
}

static oclml_status run_reduce_all(op_case *c) {
    oclml_tensor *x = input(c, 0, &ELEMS, -1, 1), *y = output(c, 1, &SCALAR);
    return ready(c) ? oclml_reduce_all(c->ctx, OCLML_REDUCE_SUM, x, y) : c->st;
}

/* Axis reductions and layout ops on an NCHW tensor of 8 x 16 x 16 x 16. */
static const shape NCHW = {4, {8, 16, 16, 16}}, NHWC = {4, {8, 16, 16, 16}}, CHAN = {1, {16}},
                   HALF = {4, {8, 8, 16, 16}};

static oclml_status run_reduce_axes(op_case *c) {
    static const int axes[3] = {0, 2, 3};
    oclml_tensor *x = input(c, 0, &NCHW, -1, 1), *y = output(c, 1, &CHAN);
    return ready(c) ? oclml_reduce_axes(c->ctx, OCLML_REDUCE_SUM, x, axes, 3, y) : c->st;
}

static oclml_status run_add_bias(op_case *c) {
    oclml_tensor *x = input(c, 0, &NCHW, -1, 1), *b = input(c, 1, &CHAN, -1, 1),
                 *y = output(c, 2, &NCHW);
    return ready(c) ? oclml_add_bias(c->ctx, x, b, 1, y) : c->st;
}

static oclml_status run_permute(op_case *c) {
    static const int to_nhwc[4] = {0, 2, 3, 1};
    oclml_tensor *x = input(c, 0, &NCHW, -1, 1), *y = output(c, 1, &NHWC);
    return ready(c) ? oclml_permute(c->ctx, x, to_nhwc, y) : c->st;
}

static oclml_status run_transpose_axes(op_case *c) {
    oclml_tensor *x = input(c, 0, &NCHW, -1, 1), *y = output(c, 1, &NCHW);
    return ready(c) ? oclml_transpose_axes(c->ctx, x, 2, 3, y) : c->st;
}

static oclml_status run_concat(op_case *c) {
    oclml_tensor *a = input(c, 0, &HALF, -1, 1), *b = input(c, 1, &HALF, -1, 1),
                 *y = output(c, 2, &NCHW);
    const oclml_tensor *parts[2] = {a, b};
    return ready(c) ? oclml_concat(c->ctx, parts, 2, 1, y) : c->st;
}

static oclml_status run_split(op_case *c) {
    oclml_tensor *x = input(c, 0, &NCHW, -1, 1), *a = output(c, 1, &HALF), *b = output(c, 2, &HALF);
    oclml_tensor *parts[2] = {a, b};
    return ready(c) ? oclml_split(c->ctx, x, 1, parts, 2) : c->st;
}

/* The probe has a fixed size of its own and blocks until done. */
static oclml_status run_probe_fma_gflops(op_case *c) {
    double gflops;
    return ready(c) ? oclml_probe_fma_gflops(c->ctx, &gflops) : c->st;
}

static const shape SQUARE = {2, {256, 256}}, BATCHED = {3, {4, 256, 256}};

static oclml_status run_gemm(op_case *c) {
    oclml_tensor *a = input(c, 0, &SQUARE, -1, 1), *b = input(c, 1, &SQUARE, -1, 1);
    oclml_tensor *y = output(c, 2, &SQUARE);
    return ready(c) ? oclml_gemm(c->ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1, a, b, 0, y) : c->st;
}

/* A linear layer of 256 rows, 256 -> 512 features, GELU: the transformer MLP's shape in small. */
static const shape LIN_X = {2, {256, 256}}, LIN_W = {2, {512, 256}}, LIN_B = {1, {512}},
                   LIN_Y = {2, {256, 512}};

static oclml_status run_linear(op_case *c) {
    oclml_tensor *x = input(c, 0, &LIN_X, -1, 1), *w = input(c, 1, &LIN_W, -0.1f, 0.1f),
                 *b = input(c, 2, &LIN_B, -1, 1), *y = output(c, 3, &LIN_Y);
    return ready(c) ? oclml_linear(c->ctx, OCLML_ACT_GELU_ERF, x, w, b, y, NULL) : c->st;
}

static oclml_status run_linear_backward(op_case *c) {
    oclml_tensor *x = input(c, 0, &LIN_X, -1, 1), *w = input(c, 1, &LIN_W, -0.1f, 0.1f),
                 *pre = input(c, 2, &LIN_Y, -1, 1), *dy = input(c, 3, &LIN_Y, -1, 1),
                 *dx = output(c, 4, &LIN_X), *dw = output(c, 5, &LIN_W), *db = output(c, 6, &LIN_B);
    return ready(c)
               ? oclml_linear_backward(c->ctx, OCLML_ACT_GELU_ERF, x, w, pre, dy, dx, dw, db, 0)
               : c->st;
}

/* The same layer with dropout 0.1 after its GELU. */
static oclml_dropout_params linear_drop(void) {
    oclml_dropout_params d;
    oclml_dropout_params_init(&d);
    d.p = 0.1f;
    return d;
}

static oclml_status run_linear_dropout(op_case *c) {
    oclml_tensor *x = input(c, 0, &LIN_X, -1, 1), *w = input(c, 1, &LIN_W, -0.1f, 0.1f),
                 *b = input(c, 2, &LIN_B, -1, 1), *y = output(c, 3, &LIN_Y),
                 *pre = output(c, 4, &LIN_Y);
    const oclml_dropout_params d = linear_drop();
    return ready(c) ? oclml_linear_dropout(c->ctx, OCLML_ACT_GELU_ERF, &d, x, w, b, y, pre) : c->st;
}

static oclml_status run_linear_dropout_backward(op_case *c) {
    oclml_tensor *x = input(c, 0, &LIN_X, -1, 1), *w = input(c, 1, &LIN_W, -0.1f, 0.1f),
                 *pre = input(c, 2, &LIN_Y, -1, 1), *dy = input(c, 3, &LIN_Y, -1, 1),
                 *dx = output(c, 4, &LIN_X), *dw = output(c, 5, &LIN_W), *db = output(c, 6, &LIN_B);
    const oclml_dropout_params d = linear_drop();
    return ready(c) ? oclml_linear_dropout_backward(c->ctx, OCLML_ACT_GELU_ERF, &d, x, w, pre, dy,
                                                    dx, dw, db, 0)
                    : c->st;
}

/* A 3x3 convolution of 8 images 16 -> 32 channels at 16x16, and 2x2 pooling of its output. */
static const shape CONV_X = {4, {8, 16, 16, 16}}, CONV_W = {4, {32, 16, 3, 3}}, CONV_B = {1, {32}},
                   CONV_Y = {4, {8, 32, 16, 16}}, CONV_WT = {4, {16, 32, 3, 3}},
                   POOL_Y = {4, {8, 32, 8, 8}};

static oclml_conv2d_params same_3x3(void) {
    oclml_conv2d_params p;
    oclml_conv2d_params_init(&p);
    p.pad_before[0] = p.pad_before[1] = p.pad_after[0] = p.pad_after[1] = 1;
    return p;
}

static oclml_status run_conv2d(op_case *c) {
    oclml_conv2d_params p = same_3x3();
    oclml_tensor *x = input(c, 0, &CONV_X, -1, 1), *w = input(c, 1, &CONV_W, -0.1f, 0.1f),
                 *b = input(c, 2, &CONV_B, -1, 1), *y = output(c, 3, &CONV_Y);
    return ready(c) ? oclml_conv2d(c->ctx, &p, x, w, b, y) : c->st;
}

static oclml_status run_conv2d_backward(op_case *c) {
    oclml_conv2d_params p = same_3x3();
    oclml_tensor *x = input(c, 0, &CONV_X, -1, 1), *w = input(c, 1, &CONV_W, -0.1f, 0.1f),
                 *dy = input(c, 2, &CONV_Y, -1, 1), *dx = output(c, 3, &CONV_X),
                 *dw = output(c, 4, &CONV_W), *db = output(c, 5, &CONV_B);
    return ready(c) ? oclml_conv2d_backward(c->ctx, &p, x, w, dy, dx, dw, db, 0) : c->st;
}

static oclml_status run_conv_transpose2d(op_case *c) {
    oclml_conv2d_params p = same_3x3();
    oclml_tensor *x = input(c, 0, &CONV_X, -1, 1), *w = input(c, 1, &CONV_WT, -0.1f, 0.1f),
                 *b = input(c, 2, &CONV_B, -1, 1), *y = output(c, 3, &CONV_Y);
    return ready(c) ? oclml_conv_transpose2d(c->ctx, &p, x, w, b, y) : c->st;
}

static oclml_status run_conv_transpose2d_backward(op_case *c) {
    oclml_conv2d_params p = same_3x3();
    oclml_tensor *x = input(c, 0, &CONV_X, -1, 1), *w = input(c, 1, &CONV_WT, -0.1f, 0.1f),
                 *dy = input(c, 2, &CONV_Y, -1, 1), *dx = output(c, 3, &CONV_X),
                 *dw = output(c, 4, &CONV_WT), *db = output(c, 5, &CONV_B);
    return ready(c) ? oclml_conv_transpose2d_backward(c->ctx, &p, x, w, dy, dx, dw, db, 0) : c->st;
}

static oclml_status run_max_pool2d(op_case *c) {
    oclml_pool2d_params p;
    oclml_pool2d_params_init(&p);
    oclml_tensor *x = input(c, 0, &CONV_Y, -1, 1), *y = output(c, 1, &POOL_Y);
    return ready(c) ? oclml_max_pool2d(c->ctx, &p, x, y) : c->st;
}

static oclml_status run_max_pool2d_backward(op_case *c) {
    oclml_pool2d_params p;
    oclml_pool2d_params_init(&p);
    oclml_tensor *x = input(c, 0, &CONV_Y, -1, 1), *dy = input(c, 1, &POOL_Y, -1, 1),
                 *dx = output(c, 2, &CONV_Y);
    return ready(c) ? oclml_max_pool2d_backward(c->ctx, &p, x, dy, dx) : c->st;
}

/* The activation fused into the pooling's read: a convolution's ReLU and 2x2 pooling. */
static oclml_status run_act_max_pool2d(op_case *c) {
    oclml_pool2d_params p;
    oclml_pool2d_params_init(&p);
    oclml_tensor *x = input(c, 0, &CONV_Y, -1, 1), *y = output(c, 1, &POOL_Y);
    return ready(c) ? oclml_act_max_pool2d(c->ctx, &p, OCLML_ACT_RELU, x, y) : c->st;
}

static oclml_status run_act_max_pool2d_backward(op_case *c) {
    oclml_pool2d_params p;
    oclml_pool2d_params_init(&p);
    oclml_tensor *x = input(c, 0, &CONV_Y, -1, 1), *dy = input(c, 1, &POOL_Y, -1, 1),
                 *dx = output(c, 2, &CONV_Y);
    return ready(c) ? oclml_act_max_pool2d_backward(c->ctx, &p, OCLML_ACT_RELU, x, dy, dx) : c->st;
}

static oclml_status run_avg_pool2d(op_case *c) {
    oclml_pool2d_params p;
    oclml_pool2d_params_init(&p);
    oclml_tensor *x = input(c, 0, &CONV_Y, -1, 1), *y = output(c, 1, &POOL_Y);
    return ready(c) ? oclml_avg_pool2d(c->ctx, &p, x, y) : c->st;
}

static oclml_status run_avg_pool2d_backward(op_case *c) {
    oclml_pool2d_params p;
    oclml_pool2d_params_init(&p);
    oclml_tensor *dy = input(c, 0, &POOL_Y, -1, 1), *dx = output(c, 1, &CONV_Y);
    return ready(c) ? oclml_avg_pool2d_backward(c->ctx, &p, dy, dx) : c->st;
}

static oclml_status run_gemm_batched(op_case *c) {
    oclml_tensor *a = input(c, 0, &BATCHED, -1, 1), *b = input(c, 1, &BATCHED, -1, 1);
    oclml_tensor *y = output(c, 2, &BATCHED);
    return ready(c) ? oclml_gemm_batched(c->ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1, a, b, 0, y)
                    : c->st;
}

static oclml_status run_softmax(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -4, 4), *y = output(c, 1, &ROWS);
    return ready(c) ? oclml_softmax(c->ctx, x, y) : c->st;
}

static oclml_status run_log_softmax(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -4, 4), *y = output(c, 1, &ROWS);
    return ready(c) ? oclml_log_softmax(c->ctx, x, y) : c->st;
}

/* The backward ops get made-up forward outputs: calling the forward op would build its program
 * too and add it to the time. */
static oclml_status run_softmax_backward(op_case *c) {
    oclml_tensor *y = input(c, 0, &ROWS, 0, 2.0f / 1024), *dy = input(c, 1, &ROWS, -1, 1);
    oclml_tensor *dx = output(c, 2, &ROWS);
    return ready(c) ? oclml_softmax_backward(c->ctx, y, dy, dx) : c->st;
}

static oclml_status run_log_softmax_backward(op_case *c) {
    oclml_tensor *y = input(c, 0, &ROWS, -9, -5), *dy = input(c, 1, &ROWS, -1, 1);
    oclml_tensor *dx = output(c, 2, &ROWS);
    return ready(c) ? oclml_log_softmax_backward(c->ctx, y, dy, dx) : c->st;
}

/* Losses on the row shape (64 rows of 1024 classes), loss and gradients in one call. */
static oclml_status run_cross_entropy(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *t = input(c, 1, &PER_ROW, 3, 3),
                 *loss = output(c, 2, &SCALAR), *dx = output(c, 3, &ROWS);
    return ready(c) ? oclml_cross_entropy(c->ctx, NULL, x, t, NULL, loss, dx) : c->st;
}

static oclml_status run_kl_div_logits(op_case *c) {
    oclml_tensor *p = input(c, 0, &ROWS, -1, 1), *q = input(c, 1, &ROWS, -1, 1),
                 *loss = output(c, 2, &SCALAR), *dp = output(c, 3, &ROWS),
                 *dq = output(c, 4, &ROWS);
    return ready(c) ? oclml_kl_div_logits(c->ctx, NULL, p, q, NULL, loss, dp, dq) : c->st;
}

static oclml_status run_pointwise_loss(op_case *c, int which) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *t = input(c, 1, &ROWS, 0, 1),
                 *loss = output(c, 2, &SCALAR), *dx = output(c, 3, &ROWS);
    if (!ready(c)) return c->st;
    if (which == 0) return oclml_mse_loss(c->ctx, NULL, x, t, NULL, loss, dx);
    if (which == 1) return oclml_huber_loss(c->ctx, NULL, x, t, NULL, loss, dx);
    return oclml_bce_with_logits(c->ctx, NULL, x, t, NULL, loss, dx);
}

static oclml_status run_mse_loss(op_case *c) { return run_pointwise_loss(c, 0); }
static oclml_status run_huber_loss(op_case *c) { return run_pointwise_loss(c, 1); }
static oclml_status run_bce_with_logits(op_case *c) { return run_pointwise_loss(c, 2); }

static oclml_status run_layernorm(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *g = input(c, 1, &ROW, 0.5f, 1.5f);
    oclml_tensor *b = input(c, 2, &ROW, -1, 1), *y = output(c, 3, &ROWS);
    oclml_tensor *mean = output(c, 4, &PER_ROW), *rstd = output(c, 5, &PER_ROW);
    return ready(c) ? oclml_layernorm(c->ctx, x, g, b, 1e-5f, y, mean, rstd) : c->st;
}

static oclml_status run_rmsnorm(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *g = input(c, 1, &ROW, 0.5f, 1.5f);
    oclml_tensor *y = output(c, 2, &ROWS), *rstd = output(c, 3, &PER_ROW);
    return ready(c) ? oclml_rmsnorm(c->ctx, x, g, 1e-5f, y, rstd) : c->st;
}

static oclml_status run_layernorm_backward(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *g = input(c, 1, &ROW, 0.5f, 1.5f);
    oclml_tensor *mean = input(c, 2, &PER_ROW, 0, 0), *rstd = input(c, 3, &PER_ROW, 1.7f, 1.7f);
    oclml_tensor *dy = input(c, 4, &ROWS, -1, 1), *dx = output(c, 5, &ROWS);
    oclml_tensor *dg = output(c, 6, &ROW), *db = output(c, 7, &ROW);
    return ready(c) ? oclml_layernorm_backward(c->ctx, x, g, mean, rstd, dy, dx, dg, db) : c->st;
}

static oclml_status run_rmsnorm_backward(op_case *c) {
    oclml_tensor *x = input(c, 0, &ROWS, -1, 1), *g = input(c, 1, &ROW, 0.5f, 1.5f);
    oclml_tensor *rstd = input(c, 2, &PER_ROW, 1.7f, 1.7f), *dy = input(c, 3, &ROWS, -1, 1);
    oclml_tensor *dx = output(c, 4, &ROWS), *dg = output(c, 5, &ROW);
    return ready(c) ? oclml_rmsnorm_backward(c->ctx, x, g, rstd, dy, dx, dg) : c->st;
}

/* GRU: B 256 (from 128 on, GPUs take the tiled kernel, the one worth timing), I 256, D 1024;
 * the sequence runs a few steps, since its compile happens at the first one. */
enum { GRU_B = 256, GRU_I = 256, GRU_D = 1024, GRU_T = 4 };
static const shape GRU_X = {2, {GRU_B, GRU_I}}, GRU_H = {2, {GRU_B, GRU_D}};
static const shape GRU_WIH = {2, {3 * GRU_D, GRU_I}}, GRU_WHH = {2, {3 * GRU_D, GRU_D}};
static const shape GRU_BIAS = {1, {3 * GRU_D}};
static const shape GRU_XS = {3, {GRU_T, GRU_B, GRU_I}}, GRU_HS = {3, {GRU_T, GRU_B, GRU_D}};

/* w_ih, w_hh, b_ih, b_hh in slots 2 to 5, scaled like PyTorch's init (1 / sqrt(D)). */
static void gru_weights(op_case *c) {
    const float s = 0.03125f;
    input(c, 2, &GRU_WIH, -s, s);
    input(c, 3, &GRU_WHH, -s, s);
    input(c, 4, &GRU_BIAS, -s, s);
    input(c, 5, &GRU_BIAS, -s, s);
}

static oclml_status run_gru_step(op_case *c) {
    oclml_tensor *x = input(c, 0, &GRU_X, -1, 1), *h = input(c, 1, &GRU_H, -1, 1);
    gru_weights(c);
    oclml_tensor *hn = output(c, 6, &GRU_H), **w = &c->slot[2];
    return ready(c) ? oclml_gru_step(c->ctx, OCLML_GRU_TORCH, x, h, w[0], w[1], w[2], w[3], hn)
                    : c->st;
}

static oclml_status run_gru_step_backward(op_case *c) {
    oclml_tensor *x = input(c, 0, &GRU_X, -1, 1), *h = input(c, 1, &GRU_H, -1, 1);
    gru_weights(c);
    oclml_tensor *dhn = input(c, 6, &GRU_H, -1, 1), *dx = output(c, 7, &GRU_X);
    oclml_tensor *dh = output(c, 8, &GRU_H), *dwi = output(c, 9, &GRU_WIH);
    oclml_tensor *dwh = output(c, 10, &GRU_WHH), *dbi = output(c, 11, &GRU_BIAS);
    oclml_tensor *dbh = output(c, 12, &GRU_BIAS), **w = &c->slot[2];
    if (!ready(c)) return c->st;
    return oclml_gru_step_backward(c->ctx, OCLML_GRU_TORCH, x, h, w[0], w[1], w[2], w[3], dhn, dx,
                                   dh, dwi, dwh, dbi, dbh);
}

static oclml_status run_gru_sequence(op_case *c) {
    oclml_tensor *x = input(c, 0, &GRU_XS, -1, 1), *h0 = input(c, 1, &GRU_H, -1, 1);
    gru_weights(c);
    oclml_tensor *hs = output(c, 6, &GRU_HS), **w = &c->slot[2];
    if (!ready(c)) return c->st;
    return oclml_gru_sequence(c->ctx, OCLML_GRU_TORCH, x, h0, w[0], w[1], w[2], w[3], hs);
}

/* RSSM: E 5, D 256, F 64, and oclml_rssm_params_init's defaults (T 50, 16 x 16 latent, k 8). */
enum { RSSM_E = 5, RSSM_D = 256, RSSM_F = 64 };

/* The weights and start state in slots 0 to 10, scaled by 1 / sqrt(fan-in) as in
 * bench_recurrent.c; z starts as a uniform distribution over each group's classes. */
static void rssm_inputs(op_case *c, const oclml_rssm_params *cfg) {
    const size_t E = RSSM_E, D = RSSM_D, F = RSSM_F, S = cfg->groups * cfg->classes;
    const float si = 1.0f / 18, sd = 1.0f / 16, sy = 1.0f / 23, z = 1.0f / (float)cfg->classes;
    const shape w_ih = {3, {E, 3 * D, F + S}}, w_hh = {3, {E, 3 * D, D}}, b = {2, {E, 3 * D}};
    const shape w_p = {3, {E, S, D}}, b_p = {2, {E, S}}, w_y = {2, {E, D + S}}, b_y = {1, {E}};
    const shape h = {2, {E, D}}, zs = {2, {E, S}}, f = {2, {E, F}};
    input(c, 0, &w_ih, -si, si);
    input(c, 1, &w_hh, -sd, sd);
    input(c, 2, &b, -sd, sd);
    input(c, 3, &b, -sd, sd);
    input(c, 4, &w_p, -2 * sd, 2 * sd);
    input(c, 5, &b_p, -0.5f, 0.5f);
    input(c, 6, &w_y, -sy, sy);
    input(c, 7, &b_y, -0.5f, 0.5f);
    input(c, 8, &h, -1, 1);
    input(c, 9, &zs, z, z);
    input(c, 10, &f, -1, 1);
}

static oclml_status run_rssm_rollout(op_case *c) {
    oclml_rssm_params cfg;
    oclml_rssm_params_init(&cfg);
    rssm_inputs(c, &cfg);
    const shape ys = {2, {RSSM_E, cfg.steps}};
    oclml_tensor *y = output(c, 11, &ys), **t = c->slot;
    if (!ready(c)) return c->st;
    const oclml_rssm_weights w = {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]};
    const oclml_rssm_state s = {t[8], t[9], t[10], NULL};
    const oclml_rssm_outputs o = {.y = y};
    return oclml_rssm_rollout(c->ctx, &cfg, &w, &s, &o);
}

/* History: B 64 series pairs of N 256 values, every value real (lengths NULL). */
static oclml_status run_history_encode(op_case *c) {
    const shape series = {3, {64, 2, 256}}, features = {2, {64, 64}};
    oclml_tensor *x = input(c, 0, &series, 0, 2), *y = output(c, 1, &features);
    return ready(c) ? oclml_history_encode(c->ctx, x, NULL, y) : c->st;
}

/* Optimizers: an arena of three tensors (a 64 x 33 weight, its bias, a 1000-element vector),
 * made while preparing and kept for the child's life (freed before its context). */
static oclml_arena *optim_arena;
static oclml_optim *optim_opt;

static void optim_cleanup(void) {
    oclml_optim_destroy(optim_opt);
    oclml_arena_destroy(optim_arena);
    optim_opt = NULL;
    optim_arena = NULL;
}

static oclml_status optim_prepare(op_case *c, int with_optimizer) {
    if (!c->preparing || c->st) return c->st;
    const oclml_arena_shape shapes[] = {{2, {64, 33}}, {1, {33}}, {1, {1000}}};
    c->st = oclml_arena_create(c->ctx, 3, shapes, &optim_arena);
    oclml_optim_config cfg;
    oclml_optim_config_init(&cfg, OCLML_OPTIM_ADAMW);
    if (!c->st && with_optimizer) c->st = oclml_optim_create(c->ctx, optim_arena, &cfg, &optim_opt);
    return c->st;
}

static oclml_status run_optim_step(op_case *c) {
    optim_prepare(c, 1);
    return ready(c) ? oclml_optim_step(optim_opt) : c->st;
}

static oclml_status run_arena_zero_grad(op_case *c) {
    optim_prepare(c, 0);
    return ready(c) ? oclml_arena_zero_grad(optim_arena) : c->st;
}

/* Causal self-attention of 4 heads of dim 64 over 256 positions (BHLD). The backward's o and
 * lse are made up rather than run: the forward would compile its own programs first; lse about
 * log(256), as a row's log-sum-exp of scores near 0 is. */
static const shape ATT_Q = {4, {1, 4, 256, 64}}, ATT_LSE = {3, {1, 4, 256}};

static oclml_attention_params causal(void) {
    oclml_attention_params p;
    oclml_attention_params_init(&p);
    p.causal = OCLML_CAUSAL_TOP_LEFT;
    return p;
}

static oclml_status run_attention(op_case *c) {
    oclml_attention_params p = causal();
    oclml_tensor *q = input(c, 0, &ATT_Q, -1, 1), *k = input(c, 1, &ATT_Q, -1, 1),
                 *v = input(c, 2, &ATT_Q, -1, 1), *o = output(c, 3, &ATT_Q),
                 *lse = output(c, 4, &ATT_LSE);
    return ready(c) ? oclml_attention(c->ctx, &p, q, k, v, o, lse) : c->st;
}

static oclml_status run_attention_backward(op_case *c) {
    oclml_attention_params p = causal();
    oclml_tensor *q = input(c, 0, &ATT_Q, -1, 1), *k = input(c, 1, &ATT_Q, -1, 1),
                 *v = input(c, 2, &ATT_Q, -1, 1), *o = input(c, 3, &ATT_Q, -1, 1),
                 *lse = input(c, 4, &ATT_LSE, 5, 6), *dout = input(c, 5, &ATT_Q, -1, 1),
                 *dq = output(c, 6, &ATT_Q), *dk = output(c, 7, &ATT_Q), *dv = output(c, 8, &ATT_Q);
    return ready(c) ? oclml_attention_backward(c->ctx, &p, q, k, v, o, lse, dout, dq, dk, dv, NULL)
                    : c->st;
}

typedef struct runner {
    const char *op;
    runner_fn run;
} runner;

/* One runner per op of the op list, made from it: an op without a run_NAME function above
 * does not compile. */
static const runner RUNNERS[] = {
#define OCLML_OP(name, ...) {#name, run_##name},
#define OCLML_TUNABLE(...)
#include "ops/ops.def"
#undef OCLML_OP
#undef OCLML_TUNABLE
};
#define N_RUNNERS (sizeof RUNNERS / sizeof RUNNERS[0])

static runner_fn find_runner(const char *op) {
    for (size_t i = 0; i < N_RUNNERS; i++)
        if (!strcmp(RUNNERS[i].op, op)) return RUNNERS[i].run;
    return NULL;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int child_fail(const op_case *c, oclml_status st, const char *what) {
    fprintf(stderr, "%s: %s\n%s\n", what, oclml_status_name(st),
            c->ctx ? oclml_ctx_last_error(c->ctx) : "");
    return 1;
}

/* One call of the op and the wait for it (wall time: the compile happens on the host), in ms;
 * negative on failure. */
static double timed_call(op_case *c, runner_fn run, const char *what) {
    double t0 = now_ms();
    oclml_status st = run(c);
    if (!st) st = oclml_ctx_finish(c->ctx);
    if (st) {
        child_fail(c, st, what);
        return -1;
    }
    return now_ms() - t0;
}

/* Prints the RESULT line the parent parses; the device name goes last as it may hold spaces. */
static int child_report(const op_case *c, double ctx_ms, double first_ms, double second_ms) {
    oclml_cache_info ci;
    oclml_device_info di;
    oclml_status st = oclml_ctx_cache_info(c->ctx, &ci);
    if (!st) st = oclml_ctx_device_info(c->ctx, &di);
    if (st) return child_fail(c, st, "cache and device info");
    printf("RESULT ctx_ms=%.3f first_ms=%.3f second_ms=%.3f builds=%lu disk_hits=%lu device=%s\n",
           ctx_ms, first_ms, second_ms, ci.builds, ci.disk_hits, di.device_name);
    return 0;
}

static int child_main(const char *op, const char *device) {
    runner_fn run = find_runner(op);
    if (!run) {
        fprintf(stderr, "oclml-coldstart: no runner for op '%s'\n", op);
        return 1;
    }
    oclml_ctx_config opts;
    oclml_ctx_config_init(&opts);
    opts.device = device;
    opts.kernel_path = oclml_tree_kernel_path();
    op_case c = {.preparing = 1, .seed = 12345};
    char err[4096];
    double t0 = now_ms();
    oclml_status st = oclml_ctx_create(&c.ctx, &opts, err, sizeof err);
    double ctx_ms = now_ms() - t0;
    if (st) {
        fprintf(stderr, "context: %s\n%s\n", oclml_status_name(st), err);
        return 1;
    }
    int rc = 1;
    st = run(&c);
    if (!st) st = oclml_ctx_finish(c.ctx);
    if (st) child_fail(&c, st, "making the inputs");
    c.preparing = 0;
    double first = st ? -1 : timed_call(&c, run, "first call");
    double second = first < 0 ? -1 : timed_call(&c, run, "second call");
    if (second >= 0) rc = child_report(&c, ctx_ms, first, second);
    optim_cleanup();
    for (int i = 0; i < MAX_SLOTS; i++)
        if (c.slot[i]) oclml_tensor_destroy(c.slot[i]);
    oclml_ctx_destroy(c.ctx);
    return rc;
}

/* ================ parent: one child per op and cache state ================ */

typedef struct options {
    const char *device, *json;
    int keep_caches;
    char exe[4096]; /* this binary, run again for each measurement */
} options;

typedef struct child_result {
    double ctx_ms, first_ms, second_ms;
    unsigned long builds, disk_hits;
    char device[128];
} child_result;

typedef struct op_row {
    const char *name, *kernel_file;
    int has_runner, failed;
    child_result cold, disk; /* disk: the run with liboclml's disk cache filled */
    char error[1024];        /* why it failed, with the child's stderr tail */
} op_row;

enum { MAX_OPS = 128 };

typedef struct op_list {
    op_row rows[MAX_OPS];
    size_t n;
} op_list;

static void collect_op(void *user, const oclml_op_desc *op) {
    op_list *l = user;
    if (l->n == MAX_OPS) return;
    l->rows[l->n++] = (op_row){.name = op->name,
                               .kernel_file = op->kernel_file,
                               .has_runner = find_runner(op->name) != NULL};
}

/* rm -rf: unlinks symbolic links rather than following them out of the directory. */
static void remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st)) return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[4096];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) < sizeof sub)
            remove_tree(sub);
    }
    if (d) closedir(d);
    rmdir(path);
}

static int make_tmp(char *out, size_t len) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    if ((size_t)snprintf(out, len, "%s/oclml-coldstart-XXXXXX", base) >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkdtemp(out) ? 0 : -1;
}

/* The child's environment: ours, with the caches pointed into the temporary directory tmp
 * (liboclml's in tmp/oclml, PoCL's in tmp/pocl_dir) unless --keep-caches. vars holds the
 * strings added; the returned array (malloc'ed) borrows them and environ's. */
static char **child_env(const options *o, const char *tmp, const char *pocl_dir,
                        char vars[3][1200]) {
    static const char *const ours[] = {
        "OCLML_CACHE_DIR=", "POCL_CACHE_DIR=", "CUDA_CACHE_DISABLE="};
    size_t n = 0;
    while (environ[n]) n++;
    char **env = malloc((n + 4) * sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int replaced = 0;
        for (int v = 0; v < 3 && !o->keep_caches; v++)
            replaced |= !strncmp(environ[i], ours[v], strlen(ours[v]));
        if (!replaced) env[k++] = environ[i];
    }
    if (!o->keep_caches) {
        snprintf(vars[0], sizeof vars[0], "OCLML_CACHE_DIR=%s/oclml", tmp);
        snprintf(vars[1], sizeof vars[1], "POCL_CACHE_DIR=%s/%s", tmp, pocl_dir);
        snprintf(vars[2], sizeof vars[2], "CUDA_CACHE_DISABLE=1");
        for (int v = 0; v < 3; v++) env[k++] = vars[v];
    }
    env[k] = NULL;
    return env;
}

/* Starts `exe --child op [--device SEL]` with stdout and stderr into files; -1 if it could not. */
static pid_t spawn_child(const options *o, const char *op, char **env, const char *out_path,
                         const char *err_path) {
    char *argv[] = {(char *)o->exe, "--child", (char *)op, NULL, NULL, NULL};
    if (o->device) {
        argv[3] = "--device";
        argv[4] = (char *)o->device;
    }
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa)) return -1;
    int flags = O_WRONLY | O_CREAT | O_TRUNC;
    pid_t pid = -1;
    int e = posix_spawn_file_actions_addopen(&fa, 1, out_path, flags, 0600);
    if (!e) e = posix_spawn_file_actions_addopen(&fa, 2, err_path, flags, 0600);
    if (!e) e = posix_spawn(&pid, o->exe, &fa, NULL, argv, env);
    if (e) {
        errno = e; /* posix_spawn returns the error rather than setting errno */
        pid = -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* The last bytes of a file, from the start of a line, or "" (for the child's stderr). */
static void file_tail(const char *path, char *out, size_t len) {
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f), want = (long)len - 1;
    fseek(f, size > want ? size - want : 0, SEEK_SET);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
    char *nl = size > want ? strchr(out, '\n') : NULL;
    if (nl) memmove(out, nl + 1, strlen(nl + 1) + 1);
}

/* Finds the child's RESULT line in its stdout; 0 when it was there and complete. */
static int parse_result(const char *path, child_result *r) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        int at = 0;
        found =
            sscanf(line,
                   "RESULT ctx_ms=%lf first_ms=%lf second_ms=%lf builds=%lu "
                   "disk_hits=%lu device=%n",
                   &r->ctx_ms, &r->first_ms, &r->second_ms, &r->builds, &r->disk_hits, &at) == 5 &&
            at > 0;
        if (found) snprintf(r->device, sizeof r->device, "%s", line + at);
    }
    fclose(f);
    r->device[strcspn(r->device, "\n")] = '\0';
    return found ? 0 : -1;
}

/* What went wrong: the exit status, then the tail of the child's stderr. */
static void describe_failure(int status, const char *err_path, char *out, size_t len) {
    char why[64], tail[768];
    if (WIFEXITED(status))
        snprintf(why, sizeof why, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(why, sizeof why, "signal %d", WTERMSIG(status));
    else
        snprintf(why, sizeof why, "status %d", status);
    file_tail(err_path, tail, sizeof tail);
    snprintf(out, len, "%s%s%s", status ? why : "no RESULT line", *tail ? "\n" : "", tail);
}

/* Runs one child with PoCL's cache in tmp/pocl_dir (fresh, so empty); 0 on success, else the
 * reason in err. */
static int run_child(const options *o, const char *op, const char *tmp, const char *pocl_dir,
                     child_result *r, char *err, size_t err_len) {
    char out_path[1200], err_path[1200], vars[3][1200];
    snprintf(out_path, sizeof out_path, "%s/%s.stdout", tmp, pocl_dir);
    snprintf(err_path, sizeof err_path, "%s/%s.stderr", tmp, pocl_dir);
    char **env = child_env(o, tmp, pocl_dir, vars);
    pid_t pid = env ? spawn_child(o, op, env, out_path, err_path) : -1;
    if (pid < 0) {
        snprintf(err, err_len, "cannot start %s: %s", o->exe, strerror(errno));
        free(env);
        return -1;
    }
    free(env);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) continue;
    if (status == 0 && !parse_result(out_path, r)) return 0;
    describe_failure(status, err_path, err, err_len);
    return -1;
}

static void progress(const char *op, const char *what) {
    fprintf(stderr, "oclml-coldstart: %s: %s\n", op, what);
    fflush(stderr);
}

/* The cold run, then (unless --keep-caches) the run with liboclml's disk cache as the cold run
 * left it but PoCL's empty again: the difference is what liboclml's cache saves. */
static void measure_op(const options *o, op_row *row) {
    char tmp[1024];
    if (make_tmp(tmp, sizeof tmp)) {
        snprintf(row->error, sizeof row->error, "cannot make a temporary directory: %s",
                 strerror(errno));
        row->failed = 1;
        return;
    }
    progress(row->name, o->keep_caches ? "first call, caches kept" : "cold");
    row->failed =
        run_child(o, row->name, tmp, "pocl-cold", &row->cold, row->error, sizeof row->error) != 0;
    if (!row->failed && !o->keep_caches) {
        progress(row->name, "liboclml disk cache filled");
        row->failed = run_child(o, row->name, tmp, "pocl-disk", &row->disk, row->error,
                                sizeof row->error) != 0;
    }
    remove_tree(tmp);
}

static void table_header(const options *o) {
    if (o->keep_caches)
        printf("cold: first call in a fresh process, caches as the environment has them "
               "(--keep-caches)\n");
    else
        printf("cold: first call with every cache empty; disk: first call with liboclml's disk "
               "cache filled, PoCL's empty\n");
    printf("second: second call in the cold process; builds: liboclml programs built (cold)%s\n\n",
           o->keep_caches ? "" : ", hits: disk cache hits (disk)");
    printf("%-21s %-20s %9s %10s %10s %10s %6s %5s\n", "op", "kernel file", "ctx_ms", "cold_ms",
           "disk_ms", "second_ms", "builds", "hits");
}

/* The row, or FAILED and the child's stderr tail, each line indented. */
static void table_row(const options *o, const op_row *r) {
    printf("%-21s %-20s ", r->name, r->kernel_file);
    if (!r->has_runner) {
        printf("ERROR: no runner in bench/coldstart.c for this op\n");
    } else if (r->failed) {
        printf("FAILED\n");
        for (const char *p = r->error; *p;) {
            size_t n = strcspn(p, "\n");
            printf("    | %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
    } else {
        char disk[32] = "-", hits[16] = "-";
        if (!o->keep_caches) {
            snprintf(disk, sizeof disk, "%.1f", r->disk.first_ms);
            snprintf(hits, sizeof hits, "%lu", r->disk.disk_hits);
        }
        printf("%9.1f %10.1f %10s %10.2f %6lu %5s\n", r->cold.ctx_ms, r->cold.first_ms, disk,
               r->cold.second_ms, r->cold.builds, hits);
    }
    fflush(stdout);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* One object per measured op, in bench.c's style; failed ops have none (the table and the exit
 * status report them), so that consumers of the lines see timings only. */
static void json_row(FILE *f, const options *o, const op_row *r, const char *date) {
    if (!f || !r->has_runner || r->failed) return;
    fprintf(f, "{\"suite\":\"coldstart\",\"op\":");
    json_str(f, r->name);
    fprintf(f, ",\"device\":");
    json_str(f, r->cold.device);
    fprintf(f, ",\"caches\":\"%s\",\"ctx_ms\":%.3f,\"first_ms_cold\":%.3f",
            o->keep_caches ? "kept" : "empty", r->cold.ctx_ms, r->cold.first_ms);
    if (o->keep_caches)
        fprintf(f, ",\"first_ms_disk_cache\":null");
    else
        fprintf(f, ",\"first_ms_disk_cache\":%.3f", r->disk.first_ms);
    fprintf(f, ",\"second_ms\":%.3f,\"builds\":%lu", r->cold.second_ms, r->cold.builds);
    if (!o->keep_caches) fprintf(f, ",\"disk_hits\":%lu", r->disk.disk_hits);
    fprintf(f, ",\"date\":\"%s\"}\n", date);
    fflush(f);
}

static void utc_now(char *out, size_t len) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void summary(const op_list *l, const int *selected, int failures) {
    double max = 0, sum = 0;
    const char *max_op = "-";
    int n = 0;
    for (size_t i = 0; i < l->n; i++) {
        const op_row *r = &l->rows[i];
        if (!selected[i] || !r->has_runner || r->failed) continue;
        sum += r->cold.first_ms;
        n++;
        if (r->cold.first_ms > max) max = r->cold.first_ms, max_op = r->name;
    }
    printf("\ncold first calls: max %.1f ms (%s), sum %.1f ms over %d ops", max, max_op, sum, n);
    if (failures) printf("; %d failed", failures);
    printf("\n");
}

static void usage(FILE *f) {
    fprintf(f, "usage: oclml-coldstart [options] [OP ...]   (no op: every op of the library)\n"
               "Times each op's first call in a fresh process with empty program caches, then\n"
               "with liboclml's disk cache filled (PoCL's still empty).\n"
               "options:\n"
               "  --device SEL     device selector (gpu, cpu, P:D, name substring)\n"
               "  --json FILE      also write one JSON object per op\n"
               "  --keep-caches    leave the environment's caches alone: warm-cache first calls\n");
}

/* Marks the ops named on the command line (all when none); an unknown name is an error. */
static int select_ops(const op_list *l, char **names, int n_names, int *selected) {
    for (size_t i = 0; i < l->n; i++) selected[i] = n_names == 0;
    for (int k = 0; k < n_names; k++) {
        size_t i = 0;
        while (i < l->n && strcmp(l->rows[i].name, names[k])) i++;
        if (i == l->n) {
            fprintf(stderr,
                    "oclml-coldstart: '%s' is not an op of the library (oclml-info "
                    "--ops lists them)\n",
                    names[k]);
            return -1;
        }
        selected[i] = 1;
    }
    return 0;
}

static int parent_main(const options *o, char **names, int n_names) {
    static op_list l;
    int selected[MAX_OPS];
    oclml_ops_list(collect_op, &l);
    if (select_ops(&l, names, n_names, selected)) return 2;
    FILE *json = o->json ? fopen(o->json, "w") : NULL;
    if (o->json && !json) {
        fprintf(stderr, "oclml-coldstart: cannot write %s\n", o->json);
        return 1;
    }
    char date[32];
    utc_now(date, sizeof date);
    table_header(o);
    int failures = 0, rc = 0;
    for (size_t i = 0; i < l.n; i++) {
        op_row *r = &l.rows[i];
        /* Every op of the list must have a runner, even one not asked for now. */
        if (!r->has_runner) rc = 1;
        if (!selected[i] && r->has_runner) continue;
        if (r->has_runner) measure_op(o, r);
        failures += r->failed;
        table_row(o, r);
        json_row(json, o, r, date);
    }
    summary(&l, selected, failures);
    if (json) fclose(json);
    return rc || failures ? 1 : 0;
}

int main(int argc, char **argv) {
    options o = {0};
    const char *child = NULL;
    int n_names = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--device") && has)
            o.device = argv[++i];
        else if (!strcmp(a, "--json") && has)
            o.json = argv[++i];
        else if (!strcmp(a, "--child") && has)
            child = argv[++i];
        else if (!strcmp(a, "--keep-caches"))
            o.keep_caches = 1;
        else if (a[0] == '-') {
            usage(strcmp(a, "--help") ? stderr : stdout);
            return strcmp(a, "--help") ? 2 : 0;
        } else
            argv[1 + n_names++] = argv[i]; /* op names, packed at the front */
    }
    if (child) return child_main(child, o.device);
    ssize_t n = readlink("/proc/self/exe", o.exe, sizeof o.exe - 1);
    if (n <= 0) {
        fprintf(stderr, "oclml-coldstart: cannot find its own executable: %s\n", strerror(errno));
        return 1;
    }
    o.exe[n] = '\0';
    return parent_main(&o, argv + 1, n_names);
}
