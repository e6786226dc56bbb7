/* Convolution and pooling on the peer's shapes (torch_peers.py conv): the image world-model
 * encoder (batch 256 at 64x64x3, 5x5 kernels, "same" padding, 3 -> 32 -> 64 -> 128 -> 256
 * channels, each followed by a 2x2 max-pool) and ResNet layers (3x3 and 1x1, batch 64). Ops
 * "conv2d" (forward with bias, 2 N K P Q C R S flops), "conv2d_fwd_bwd" (forward, then dx, dw and
 * db: 3x the flops), each gradient alone ("conv2d_bwd_data", "conv2d_bwd_weight": no peer line,
 * they show what each backward product costs), "maxpool2d" (5 bytes a input element: read it,
 * write a quarter) with its backward and the SiLU-fused pair (ours alone), with the peer's shape
 * names. The error beside each convolution is the max over sampled outputs of
 * |y - ref| / sum |x w| against a double-precision direct convolution. */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct conv_bench {
    size_t N, C, H, W, K, k;
    unsigned s, p;
} conv_bench;

static const conv_bench SHAPES[] = {
    {256, 3, 64, 64, 32, 5, 1, 2},   {256, 32, 32, 32, 64, 5, 1, 2},
    {256, 64, 16, 16, 128, 5, 1, 2}, {256, 128, 8, 8, 256, 5, 1, 2},
    {64, 64, 56, 56, 64, 3, 1, 1},   {64, 64, 56, 56, 256, 1, 1, 0},
    {64, 128, 28, 28, 128, 3, 1, 1}, {64, 256, 14, 14, 256, 3, 1, 1},
    {64, 256, 28, 28, 256, 3, 2, 1},
};
static const conv_bench QUICK[] = {{4, 3, 16, 16, 8, 5, 1, 2}, {4, 8, 8, 8, 16, 3, 2, 1}};

typedef struct conv_args {
    oclml_ctx *ctx;
    oclml_conv2d_params p;
    oclml_pool2d_params pool;
    oclml_tensor *x, *w, *b, *y, *dy, *dx, *dw, *db, *pooled;
} conv_args;

static oclml_status fwd(void *u) {
    conv_args *a = u;
    return oclml_conv2d(a->ctx, &a->p, a->x, a->w, a->b, a->y);
}

static oclml_status fwd_bwd(void *u) {
    conv_args *a = u;
    oclml_status st = oclml_conv2d(a->ctx, &a->p, a->x, a->w, a->b, a->y);
    if (!st) st = oclml_conv2d_backward(a->ctx, &a->p, a->x, a->w, a->dy, a->dx, a->dw, a->db, 0);
    return st;
}

/* Each gradient alone (no peer line): which of the backward's two products costs what. */
static oclml_status bwd_data(void *u) {
    conv_args *a = u;
    return oclml_conv2d_backward(a->ctx, &a->p, a->x, a->w, a->dy, a->dx, NULL, NULL, 0);
}

static oclml_status bwd_weight(void *u) {
    conv_args *a = u;
    return oclml_conv2d_backward(a->ctx, &a->p, a->x, a->w, a->dy, NULL, a->dw, NULL, 0);
}

static oclml_status pool(void *u) {
    conv_args *a = u;
    return oclml_max_pool2d(a->ctx, &a->pool, a->y, a->pooled);
}

/* The pooling gradients write into dy (the convolution's output shape; timed last). */
static oclml_status pool_bwd(void *u) {
    conv_args *a = u;
    return oclml_max_pool2d_backward(a->ctx, &a->pool, a->y, a->pooled, a->dy);
}

static oclml_status silu_pool(void *u) {
    conv_args *a = u;
    return oclml_act_max_pool2d(a->ctx, &a->pool, OCLML_ACT_SILU, a->y, a->pooled);
}

static oclml_status silu_pool_bwd(void *u) {
    conv_args *a = u;
    return oclml_act_max_pool2d_backward(a->ctx, &a->pool, OCLML_ACT_SILU, a->y, a->pooled, a->dy);
}

/* Max over 48 sampled outputs of |y - ref| / sum |x w| (+ |b|). */
static double sampled_error(const conv_bench *c, size_t P, size_t Q, const float *x, const float *w,
                            const float *b, const float *y) {
    unsigned long long s = 777;
    double worst = 0;
    for (int t = 0; t < 48; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = (size_t)(s >> 33) % c->N, kk = (size_t)(s >> 20) % c->K,
               p = (size_t)(s >> 40) % P, q = (size_t)(s >> 11) % Q;
        double ref = b[kk], scale = fabs((double)b[kk]);
        for (size_t ch = 0; ch < c->C; ch++)
            for (size_t r = 0; r < c->k; r++)
                for (size_t t2 = 0; t2 < c->k; t2++) {
                    long h = (long)(p * c->s + r) - c->p, v = (long)(q * c->s + t2) - c->p;
                    if (h < 0 || h >= (long)c->H || v < 0 || v >= (long)c->W) continue;
                    double term = (double)x[((n * c->C + ch) * c->H + h) * c->W + v] *
                                  w[((kk * c->C + ch) * c->k + r) * c->k + t2];
                    ref += term;
                    scale += fabs(term);
                }
        double got = y[((n * c->K + kk) * P + p) * Q + q];
        worst = fmax(worst, fabs(got - ref) / (scale > 0 ? scale : 1));
    }
    return worst;
}

static int bench_one(bench_env *env, const conv_bench *c) {
    size_t P = (c->H + 2 * c->p - c->k) / c->s + 1, Q = (c->W + 2 * c->p - c->k) / c->s + 1;
    size_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->K, c->C, c->k, c->k}, bs[1] = {c->K},
           ys[4] = {c->N, c->K, P, Q}, ps[4] = {c->N, c->K, P / 2, Q / 2};
    size_t nx = c->N * c->C * c->H * c->W, nw = c->K * c->C * c->k * c->k, ny = c->N * c->K * P * Q;
    conv_args a = {.ctx = env->ctx};
    oclml_conv2d_params_init(&a.p);
    a.p.stride[0] = a.p.stride[1] = c->s;
    a.p.pad_before[0] = a.p.pad_before[1] = a.p.pad_after[0] = a.p.pad_after[1] = c->p;
    oclml_pool2d_params_init(&a.pool);
    float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *b = malloc(c->K * sizeof *b),
          *y = malloc(ny * sizeof *y);
    oclml_status st = (x && w && b && y) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
    oclml_tensor **ts[] = {&a.x, &a.w, &a.b, &a.y, &a.dy, &a.dx, &a.dw, &a.db, &a.pooled};
    const size_t *shapes[] = {xs, ws, bs, ys, ys, xs, ws, bs, ps};
    const int dims[] = {4, 4, 1, 4, 4, 4, 4, 1, 4};
    for (int i = 0; i < 9 && !st; i++)
        st = oclml_tensor_create(env->ctx, dims[i], shapes[i], ts[i]);
    if (!st) {
        bench_random(x, nx, 11);
        bench_random(w, nw, 12);
        bench_random(b, c->K, 13);
        for (size_t i = 0; i < nw; i++) w[i] *= 0.1f;
        st = oclml_tensor_write(a.x, x, nx);
    }
    if (!st) st = oclml_tensor_write(a.w, w, nw);
    if (!st) st = oclml_tensor_write(a.b, b, c->K);
    int rc = st ? bench_fail(env, st, "conv setup") : 0;
    char shape[96], pshape[64], variant[256] = "";
    snprintf(shape, sizeof shape, "N%zu,C%zu,%zux%zu,K%zu,k%zu,s%u,p%u", c->N, c->C, c->H, c->W,
             c->K, c->k, c->s, c->p);
    if (!rc && (st = oclml_conv2d_plan(env->ctx, &a.p, a.x, a.w, variant, sizeof variant)))
        rc = bench_fail(env, st, "conv plan");
    double flops = 2.0 * c->N * c->K * P * Q * c->C * c->k * c->k;
    bench_result r = {.op = "conv2d", .shape = shape, .variant = variant, .flops = flops};
    if (!rc) rc = bench_time(env, fwd, &a, &r.t);
    if (!rc && (st = oclml_tensor_read(a.y, y, ny))) rc = bench_fail(env, st, "download");
    if (!rc) {
        r.max_rel_err = sampled_error(c, P, Q, x, w, b, y);
        bench_report(env, &r);
        /* dy: the forward's output, any values serve for timing. */
        st = oclml_copy(env->ctx, a.y, a.dy);
        if (st) rc = bench_fail(env, st, "dy");
    }
    bench_result rb = {.op = "conv2d_fwd_bwd",
                       .shape = shape,
                       .variant = variant,
                       .flops = 3 * flops,
                       .max_rel_err = -1};
    if (!rc) rc = bench_time(env, fwd_bwd, &a, &rb.t);
    if (!rc) bench_report(env, &rb);
    oclml_status (*const grads[2])(void *) = {bwd_data, bwd_weight};
    const char *const grad_ops[2] = {"conv2d_bwd_data", "conv2d_bwd_weight"};
    for (int g = 0; g < 2 && !rc; g++) {
        bench_result rg = {.op = grad_ops[g],
                           .shape = shape,
                           .variant = variant,
                           .flops = flops,
                           .max_rel_err = -1};
        rc = bench_time(env, grads[g], &a, &rg.t);
        if (!rc) bench_report(env, &rg);
    }
    if (!rc && c->k == 5) { /* the encoder's layers are followed by a 2x2 max-pool */
        /* maxpool2d is the peer's line; the backward and the SiLU-fused pair are ours alone
         * (the CNN step's way). Bytes: read x, write a quarter (forward); read x and a quarter,
         * write x's size (backward). */
        snprintf(pshape, sizeof pshape, "N%zu,C%zu,%zux%zu,k2s2", c->N, c->K, P, Q);
        oclml_status (*const pools[4])(void *) = {pool, pool_bwd, silu_pool, silu_pool_bwd};
        const char *const pool_ops[4] = {"maxpool2d", "maxpool2d_bwd", "silu_maxpool2d",
                                         "silu_maxpool2d_bwd"};
        for (int k = 0; k < 4 && !rc; k++) {
            bench_result rp = {.op = pool_ops[k],
                               .shape = pshape,
                               .variant = k == 0 && (P / 2) * (Q / 2) <= 16
                                              ? "2x2 stride 2: one window a work-item"
                                              : "2x2 stride 2: two windows a work-item",
                               .bytes = (k % 2 ? 9.0 : 5.0) * ny,
                               .max_rel_err = -1};
            rc = bench_time(env, pools[k], &a, &rp.t);
            if (!rc) bench_report(env, &rp);
        }
    }
    for (int i = 0; i < 9; i++)
        if (*ts[i]) oclml_tensor_destroy(*ts[i]);
    free(x);
    free(w);
    free(b);
    free(y);
    return rc;
}

/* --sizes: comma-separated NxCxHxWxKxkxsxp (batch, channels in, height, width, channels out,
 * kernel, stride, padding), e.g. 256x32x32x32x64x5x1x2. Returns how many it read. */
static size_t parse_shapes(const char *text, conv_bench *out, size_t max) {
    size_t n = 0;
    while (text && *text && n < max) {
        conv_bench c;
        int used = 0;
        if (sscanf(text, "%zux%zux%zux%zux%zux%zux%ux%u%n", &c.N, &c.C, &c.H, &c.W, &c.K, &c.k,
                   &c.s, &c.p, &used) != 8 ||
            !c.N || !c.C || !c.H || !c.W || !c.K || !c.k || !c.s)
            break;
        out[n++] = c;
        text += used;
        if (*text == ',') text++;
    }
    return n;
}

int bench_conv(bench_env *env) {
    conv_bench given[16];
    const conv_bench *list = env->quick ? QUICK : SHAPES;
    size_t n = env->quick ? sizeof QUICK / sizeof QUICK[0] : sizeof SHAPES / sizeof SHAPES[0];
    if (env->sizes) {
        list = given;
        n = parse_shapes(env->sizes, given, sizeof given / sizeof given[0]);
        if (!n) {
            fprintf(stderr, "conv --sizes: expected NxCxHxWxKxkxsxp[,...], got %s\n", env->sizes);
            return 2;
        }
    }
    for (size_t i = 0; i < n; i++) {
        int rc = bench_one(env, &list[i]);
        if (rc) return rc;
    }
    return 0;
}
