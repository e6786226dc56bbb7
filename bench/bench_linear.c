/* Linear layers on the peer's shapes (torch_peers.py linear): y = gelu(x W^T + b) forward
 * ("linear", 2 M N K flops) and the forward saving its pre-activation followed by the backward
 * with dx, dw and db ("linear_fwd_bwd", 6 M N K flops), shapes M{M},in{K},out{N},gelu. Inputs as
 * nn.Linear makes them: x and dy uniform in [-1, 1), W and b in +-1/sqrt(in). The error beside
 * each figure is the max over sampled entries of |out - ref| / (the entry's rounding scale: the
 * sum of the absolute terms of its product), against a double-precision reference: y for the
 * forward; dx, dw and db for the backward (dw and db overwritten each run, not accumulated).
 * Layers of 1024 rows or more also run with dropout 0.1 after the GELU ("linear_dropout",
 * "linear_dropout_fwd_bwd", shape ...,gelu,dropout=0.1; scripts/torch_peers_extra.py
 * `linear_dropout` times F.dropout(F.gelu(F.linear(...))) on them), unchecked: their masks are
 * check_linear_dropout's. */
#include "bench.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct lin_args {
    oclml_ctx *ctx;
    oclml_tensor *x, *w, *b, *y, *pre, *dy, *dx, *dw, *db;
    oclml_dropout_params drop;
} lin_args;

static oclml_status fwd_run(void *user) {
    lin_args *a = user;
    return oclml_linear(a->ctx, OCLML_ACT_GELU_ERF, a->x, a->w, a->b, a->y, NULL);
}

/* The same product without bias and activation: what the fused epilogue costs (no peer line). */
static oclml_status fwd_plain_run(void *user) {
    lin_args *a = user;
    return oclml_linear(a->ctx, OCLML_ACT_NONE, a->x, a->w, NULL, a->y, NULL);
}

static oclml_status fwd_bwd_run(void *user) {
    lin_args *a = user;
    oclml_status st = oclml_linear(a->ctx, OCLML_ACT_GELU_ERF, a->x, a->w, a->b, a->y, a->pre);
    if (!st)
        st = oclml_linear_backward(a->ctx, OCLML_ACT_GELU_ERF, a->x, a->w, a->pre, a->dy, a->dx,
                                   a->dw, a->db, 0);
    return st;
}

static oclml_status dropout_fwd_run(void *user) {
    lin_args *a = user;
    return oclml_linear_dropout(a->ctx, OCLML_ACT_GELU_ERF, &a->drop, a->x, a->w, a->b, a->y,
                                a->pre);
}

static oclml_status dropout_fwd_bwd_run(void *user) {
    lin_args *a = user;
    oclml_status st = dropout_fwd_run(a);
    if (!st)
        st = oclml_linear_dropout_backward(a->ctx, OCLML_ACT_GELU_ERF, &a->drop, a->x, a->w, a->pre,
                                           a->dy, a->dx, a->dw, a->db, 0);
    return st;
}

typedef struct lin_host {
    size_t m, k, n;
    float *x, *w, *b, *dy;
} lin_host;

/* z_ij = b_j + sum_p x_ip w_jp in double; *scale (may be NULL) gets sum |x_ip w_jp| + |b_j|. */
static double pre_at(const lin_host *h, size_t i, size_t j, double *scale) {
    double z = h->b[j], s = fabs((double)h->b[j]);
    const float *xr = h->x + i * h->k, *wr = h->w + j * h->k;
    for (size_t p = 0; p < h->k; p++) {
        double t = (double)xr[p] * wr[p];
        z += t;
        s += fabs(t);
    }
    if (scale) *scale = s;
    return z;
}

static double gelu(double z) { return 0.5 * z * erfc(-z / sqrt(2.0)); }
static double d_gelu(double z) {
    return 0.5 * erfc(-z / sqrt(2.0)) + z * exp(-0.5 * z * z) / sqrt(2.0 * M_PI);
}

static size_t next_index(unsigned long long *s, size_t n) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (size_t)(*s >> 33) % n;
}

static double rel(double got, double want, double scale) {
    if (isnan(got)) return INFINITY;
    return fabs(got - want) / (scale > 0 ? scale : 1);
}

/* Forward: 64 sampled entries of y. */
static double fwd_error(const lin_host *h, const float *y) {
    double worst = 0;
    unsigned long long s = 12345;
    for (int t = 0; t < 64; t++) {
        size_t i = next_index(&s, h->m), j = next_index(&s, h->n);
        double scale, z = pre_at(h, i, j, &scale);
        worst = fmax(worst, rel(y[i * h->n + j], gelu(z), scale));
    }
    return worst;
}

/* Backward: dx on 16 entries of each of 4 sampled rows, dw on 8 entries of each of 8 sampled
 * columns of dZ (all M rows each), db on those 8 entries. */
static double bwd_error(const lin_host *h, const float *dx, const float *dw, const float *db) {
    double worst = 0;
    unsigned long long s = 54321;
    size_t m = h->m, n = h->n, k = h->k;
    double *dz = malloc((m > n ? m : n) * sizeof *dz);
    if (!dz) return INFINITY;
    for (int r = 0; r < 4; r++) {
        size_t i = next_index(&s, m);
        for (size_t j = 0; j < n; j++) dz[j] = h->dy[i * n + j] * d_gelu(pre_at(h, i, j, NULL));
        for (int t = 0; t < 16; t++) {
            size_t p = next_index(&s, k);
            double want = 0, scale = 0;
            for (size_t j = 0; j < n; j++) {
                want += dz[j] * h->w[j * k + p];
                scale += fabs(dz[j] * h->w[j * k + p]);
            }
            worst = fmax(worst, rel(dx[i * k + p], want, scale));
        }
    }
    for (int c = 0; c < 8; c++) {
        size_t j = next_index(&s, n);
        double sum = 0, sum_abs = 0;
        for (size_t i = 0; i < m; i++) {
            dz[i] = h->dy[i * n + j] * d_gelu(pre_at(h, i, j, NULL));
            sum += dz[i];
            sum_abs += fabs(dz[i]);
        }
        worst = fmax(worst, rel(db[j], sum, sum_abs));
        for (int t = 0; t < 8; t++) {
            size_t p = next_index(&s, k);
            double want = 0, scale = 0;
            for (size_t i = 0; i < m; i++) {
                want += dz[i] * h->x[i * k + p];
                scale += fabs(dz[i] * h->x[i * k + p]);
            }
            worst = fmax(worst, rel(dw[j * k + p], want, scale));
        }
    }
    free(dz);
    return worst;
}

static int bench_shape(bench_env *env, size_t m, size_t k, size_t n) {
    oclml_ctx *ctx = env->ctx;
    lin_host h = {m,
                  k,
                  n,
                  malloc(m * k * sizeof(float)),
                  malloc(n * k * sizeof(float)),
                  malloc(n * sizeof(float)),
                  malloc(m * n * sizeof(float))};
    float *y = malloc(m * n * sizeof(float)), *dx = malloc(m * k * sizeof(float)),
          *dw = malloc(n * k * sizeof(float)), *db = malloc(n * sizeof(float));
    int rc = (h.x && h.w && h.b && h.dy && y && dx && dw && db)
                 ? 0
                 : bench_fail(env, OCLML_ERR_OUT_OF_MEMORY, "linear setup");
    lin_args a = {.ctx = ctx};
    oclml_status st = OCLML_SUCCESS;
    if (!rc) {
        bench_random(h.x, m * k, 2);
        bench_random(h.w, n * k, 3);
        bench_random(h.b, n, 4);
        bench_random(h.dy, m * n, 5);
        float bound = 1.0f / sqrtf((float)k);
        for (size_t i = 0; i < n * k; i++) h.w[i] *= bound;
        for (size_t i = 0; i < n; i++) h.b[i] *= bound;
        size_t xs[2] = {m, k}, ws[2] = {n, k}, ys[2] = {m, n}, bs[1] = {n};
        struct {
            oclml_tensor **t;
            int nd;
            const size_t *shape;
            const float *data;
            size_t count;
        } make[] = {
            {&a.x, 2, xs, h.x, m * k},   {&a.w, 2, ws, h.w, n * k}, {&a.b, 1, bs, h.b, n},
            {&a.dy, 2, ys, h.dy, m * n}, {&a.y, 2, ys, NULL, 0},    {&a.pre, 2, ys, NULL, 0},
            {&a.dx, 2, xs, NULL, 0},     {&a.dw, 2, ws, NULL, 0},   {&a.db, 1, bs, NULL, 0}};
        for (size_t i = 0; i < sizeof make / sizeof make[0] && !st; i++) {
            st = oclml_tensor_create(ctx, make[i].nd, make[i].shape, make[i].t);
            if (!st && make[i].data)
                st = oclml_tensor_write(*make[i].t, make[i].data, make[i].count);
        }
        if (st) rc = bench_fail(env, st, "linear setup");
    }
    char shape[96], fplan[160] = "", dxplan[160] = "", dwplan[160] = "", variant[600];
    snprintf(shape, sizeof shape, "M%zu,in%zu,out%zu,gelu", m, k, n);
    oclml_gemm_plan(ctx, OCLML_NO_TRANS, OCLML_TRANS, m, n, k, 1, fplan, sizeof fplan);
    oclml_gemm_plan(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, m, k, n, 1, dxplan, sizeof dxplan);
    oclml_gemm_plan(ctx, OCLML_TRANS, OCLML_NO_TRANS, n, k, m, 1, dwplan, sizeof dwplan);
    if (!rc) {
        /* The own kernels fuse the epilogue unless K is split; else a finishing kernel runs it. */
        bool fused = !strncmp(fplan, "own", 3) && strstr(fplan, " 1 K split");
        snprintf(variant, sizeof variant, "x W^T: %s; bias+gelu %s", fplan,
                 fused ? "fused" : "in the epilogue kernel");
        bench_result r = {.op = "linear", .shape = shape, .variant = variant};
        rc = bench_time(env, fwd_run, &a, &r.t);
        if (!rc && (st = oclml_tensor_read(a.y, y, m * n))) rc = bench_fail(env, st, "download");
        if (!rc) {
            r.flops = 2.0 * m * n * k;
            r.max_rel_err = fwd_error(&h, y);
            bench_report(env, &r);
        }
    }
    if (!rc) {
        char plain[96];
        snprintf(plain, sizeof plain, "M%zu,in%zu,out%zu,none", m, k, n);
        snprintf(variant, sizeof variant, "x W^T: %s; no bias, no activation", fplan);
        bench_result r = {.op = "linear",
                          .shape = plain,
                          .variant = variant,
                          .flops = 2.0 * m * n * k,
                          .max_rel_err = -1};
        rc = bench_time(env, fwd_plain_run, &a, &r.t);
        if (!rc) bench_report(env, &r);
    }
    if (!rc) {
        snprintf(variant, sizeof variant, "x W^T: %s; dx: %s; dw: %s; dZ+db: linear.cl", fplan,
                 dxplan, dwplan);
        bench_result r = {.op = "linear_fwd_bwd", .shape = shape, .variant = variant};
        rc = bench_time(env, fwd_bwd_run, &a, &r.t);
        if (!rc &&
            ((st = oclml_tensor_read(a.dx, dx, m * k)) ||
             (st = oclml_tensor_read(a.dw, dw, n * k)) || (st = oclml_tensor_read(a.db, db, n))))
            rc = bench_fail(env, st, "download");
        if (!rc) {
            r.flops = 6.0 * m * n * k;
            r.max_rel_err = bwd_error(&h, dx, dw, db);
            bench_report(env, &r);
        }
    }
    if (!rc && m >= 1024) {
        char dshape[128];
        snprintf(dshape, sizeof dshape, "M%zu,in%zu,out%zu,gelu,dropout=0.1", m, k, n);
        oclml_dropout_params_init(&a.drop);
        a.drop.p = 0.1f;
        snprintf(variant, sizeof variant, "x W^T: %s; bias+gelu+dropout %s", fplan,
                 !strncmp(fplan, "own", 3) && strstr(fplan, " 1 K split")
                     ? "fused"
                     : "in the epilogue kernel");
        bench_result r = {.op = "linear_dropout",
                          .shape = dshape,
                          .variant = variant,
                          .flops = 2.0 * m * n * k,
                          .max_rel_err = -1};
        rc = bench_time(env, dropout_fwd_run, &a, &r.t);
        if (!rc) bench_report(env, &r);
        bench_result rb = {.op = "linear_dropout_fwd_bwd",
                           .shape = dshape,
                           .variant = "the same; backward: dZ with the mask regenerated",
                           .flops = 6.0 * m * n * k,
                           .max_rel_err = -1};
        if (!rc) rc = bench_time(env, dropout_fwd_bwd_run, &a, &rb.t);
        if (!rc) bench_report(env, &rb);
    }
    oclml_tensor *all[] = {a.x, a.w, a.b, a.dy, a.y, a.pre, a.dx, a.dw, a.db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
    void *mem[] = {h.x, h.w, h.b, h.dy, y, dx, dw, db};
    for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++) free(mem[i]);
    return rc;
}

int bench_linear(bench_env *env) {
    /* M x in x out, as the peer's LINEAR_SHAPES (M, K, N). */
    const char *defaults = env->quick ? "256x256x512,256x512x256,1x512x512,16x512x512,64x512x512"
                                      : "8192x1024x4096,8192x4096x1024,1x4096x4096,"
                                        "16x4096x4096,64x4096x4096";
    long v[3 * 32];
    int n = bench_shapes(env->sizes ? env->sizes : defaults, 3, v, 32);
    if (n == 0) {
        fprintf(stderr, "oclml-bench linear: no shapes in '%s' (MxINxOUT,...)\n",
                env->sizes ? env->sizes : defaults);
        return 2;
    }
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (v[3 * i] > 0 && v[3 * i + 1] > 0 && v[3 * i + 2] > 0)
            rc = bench_shape(env, (size_t)v[3 * i], (size_t)v[3 * i + 1], (size_t)v[3 * i + 2]);
    return rc;
}
