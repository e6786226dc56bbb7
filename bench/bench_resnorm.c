/* The fused residual + norm (part of the norm suite) on GPT-2 small's residual stream (8192
 * tokens x 768), GPT-2 medium's (4096 x 1024) and the norm suite's 16384 x 8192 (or --sizes).
 * residual_layernorm and residual_layernorm_bwd are GPT-2's configuration and
 * scripts/torch_peers_extra.py's: no dropout, the backward with the stream's gradient dr and
 * no branch gradient. The _dropout cases add dropout at p 0.1 and the branch's gradient; the
 * RMSnorm ones are GPT-2's configuration with RMSnorm. Memory-bound: the forward reads x and y
 * and writes r and out, the backward reads r, dout and dr and writes dx (and dy), so the limit
 * column (the copy rate) is the target. Checked on the first rows: r bit for bit against the
 * host's x + y m (tests/ref/dropout.c's keep rule), out against the double reference of the norm
 * of that r, the backward's dx against the reference plus dr. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

static const long DEFAULT_SHAPES[][2] = {{8192, 768}, {4096, 1024}, {16384, 8192}};
static const long QUICK_SHAPES[][2] = {{256, 768}, {64, 1000}};

typedef struct resnorm_case {
    oclml_ctx *ctx;
    oclml_dropout_params d;
    const oclml_dropout_params *dp; /* &d or NULL */
    oclml_tensor *x, *y, *r, *out, *g, *b, *mean, *rstd, *dout, *dr, *dx, *dy, *dg, *db;
    oclml_tensor *want_dy; /* dy or NULL */
    int op;                /* RES_LN ... RES_RMS_BWD */
} resnorm_case;

enum { RES_LN, RES_RMS, RES_LN_BWD, RES_RMS_BWD };

static const struct {
    const char *name, *op; /* the bench's name, the op list's */
    int kind;              /* RES_LN ... RES_RMS_BWD */
    bool dropout;          /* p 0.1 and (backward) the branch's gradient; else neither */
    double bytes_per_elem; /* the [rows x cols] tensors read and written, once each */
} RES_OPS[] = {
    {"residual_layernorm", "residual_layernorm", RES_LN, false, 16},
    {"residual_layernorm_bwd", "residual_layernorm_backward", RES_LN_BWD, false, 16},
    {"residual_layernorm_dropout", "residual_layernorm", RES_LN, true, 16},
    {"residual_layernorm_dropout_bwd", "residual_layernorm_backward", RES_LN_BWD, true, 20},
    {"residual_rmsnorm", "residual_rmsnorm", RES_RMS, false, 16},
    {"residual_rmsnorm_bwd", "residual_rmsnorm_backward", RES_RMS_BWD, false, 16}};
#define N_RES_OPS (int)(sizeof RES_OPS / sizeof RES_OPS[0])

static oclml_status run_resnorm(void *user) {
    resnorm_case *c = user;
    switch (c->op) {
    case RES_LN:
        return oclml_residual_layernorm(c->ctx, c->dp, c->x, c->y, c->g, c->b, 1e-5f, c->r, c->out,
                                        c->mean, c->rstd);
    case RES_RMS:
        return oclml_residual_rmsnorm(c->ctx, c->dp, c->x, c->y, c->g, 1e-5f, c->r, c->out,
                                      c->rstd);
    case RES_LN_BWD:
        return oclml_residual_layernorm_backward(c->ctx, c->dp, c->r, c->g, c->mean, c->rstd,
                                                 c->dout, c->dr, c->dx, c->want_dy, c->dg, c->db);
    default:
        return oclml_residual_rmsnorm_backward(c->ctx, c->dp, c->r, c->g, c->rstd, c->dout, c->dr,
                                               c->dx, c->want_dy, c->dg);
    }
}

/* The error of the first `check` rows: the forward's r (any difference from the host's x + y m
 * counts as 1) and out against the reference; the backward's dx, each element relative to its
 * terms' magnitude. */
typedef struct host_rows {
    float *x, *y, *g, *dout, *dr, *r, *dev, *mean, *rstd;
} host_rows;

static double sample_error(const resnorm_case *c, const host_rows *h, size_t check, size_t cols,
                           double *ref, double *scale) {
    const int rms = c->op == RES_RMS || c->op == RES_RMS_BWD;
    const size_t n = check * cols;
    double worst = 0;
    if (c->op == RES_LN || c->op == RES_RMS) {
        for (size_t i = 0; i < n; i++) {
            float m = 1.0f;
            if (c->dp)
                m = ref_dropout_keep(c->d.seed, c->d.offset, i, c->d.p) ? 1.0f / (1.0f - c->d.p)
                                                                        : 0.0f;
            const float t = h->y[i] * m;
            if (h->r[i] != h->x[i] + t) return 1.0;
        }
        ref_norm(rms, check, cols, h->r, h->g, rms ? NULL : h->g, 1e-5, ref, NULL, NULL);
        /* out as the norm suite judges it: the error's 2-norm relative to the reference's (an
         * output near 0 has no relative error of its own). */
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            num += (h->dev[i] - ref[i]) * (h->dev[i] - ref[i]);
            den += ref[i] * ref[i];
        }
        return den > 0 ? sqrt(num / den) : sqrt(num);
    }
    ref_norm_backward(rms, check, cols, h->r, h->g, h->mean, h->rstd, h->dout, ref, NULL, NULL,
                      scale);
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst,
                     fabs(h->dev[i] - (ref[i] + h->dr[i])) / fmax(scale[i] + fabs(h->dr[i]), 1e-3));
    return worst;
}

static int bench_resnorm_shape(bench_env *env, size_t rows, size_t cols) {
    const size_t n = rows * cols, shape[2] = {rows, cols}, check = rows < 8 ? rows : 8;
    host_rows h = {0};
    float **bufs[] = {&h.x, &h.y, &h.dout, &h.dr, &h.r, &h.dev};
    bool ok = true;
    for (int k = 0; k < 6; k++) ok = (*bufs[k] = malloc(n * sizeof(float))) && ok;
    h.g = malloc(cols * sizeof *h.g);
    h.mean = malloc(rows * sizeof *h.mean);
    h.rstd = malloc(rows * sizeof *h.rstd);
    double *ref = malloc(check * cols * sizeof *ref), *scale = malloc(check * cols * sizeof *scale);
    resnorm_case c = {.ctx = env->ctx};
    oclml_status st = (ok && h.g && h.mean && h.rstd && ref && scale)
                          ? oclml_dropout_params_init(&c.d)
                          : OCLML_ERR_OUT_OF_MEMORY;
    c.d.p = 0.1f;
    c.d.seed = 0x5eed;
    c.d.offset = 3;
    oclml_tensor **mats[] = {&c.x, &c.y, &c.r, &c.out, &c.dout, &c.dr, &c.dx, &c.dy},
                 **vecs[] = {&c.g, &c.b, &c.dg, &c.db};
    for (int k = 0; k < 8 && !st; k++) st = oclml_tensor_create(env->ctx, 2, shape, mats[k]);
    for (int k = 0; k < 4 && !st; k++) st = oclml_tensor_create(env->ctx, 1, &cols, vecs[k]);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &rows, &c.mean);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &rows, &c.rstd);
    if (!st) {
        bench_random(h.x, n, 31);
        bench_random(h.y, n, 32);
        bench_random(h.dout, n, 33);
        bench_random(h.dr, n, 34);
        bench_random(h.g, cols, 35);
        st = oclml_tensor_write(c.x, h.x, n);
    }
    if (!st) st = oclml_tensor_write(c.y, h.y, n);
    if (!st) st = oclml_tensor_write(c.dout, h.dout, n);
    if (!st) st = oclml_tensor_write(c.dr, h.dr, n);
    if (!st) st = oclml_tensor_write(c.g, h.g, cols);
    if (!st) st = oclml_tensor_write(c.b, h.g, cols);
    int rc = st ? bench_fail(env, st, "residual norm setup") : 0;
    char sh[48];
    snprintf(sh, sizeof sh, "%zux%zu", rows, cols);
    for (int k = 0; k < N_RES_OPS && !rc; k++) {
        const int op = RES_OPS[k].kind;
        c.op = op;
        c.dp = RES_OPS[k].dropout ? &c.d : NULL;
        c.want_dy = RES_OPS[k].dropout ? c.dy : NULL;
        char plan[96] = "", variant[128];
        if ((st = oclml_op_variant(env->ctx, RES_OPS[k].op, rows, cols, plan, sizeof plan))) {
            rc = bench_fail(env, st, "variant");
            break;
        }
        snprintf(variant, sizeof variant, "%s%s", RES_OPS[k].dropout ? "p 0.1, " : "", plan);
        bench_result r = {.op = RES_OPS[k].name,
                          .shape = sh,
                          .variant = variant,
                          .bytes = RES_OPS[k].bytes_per_elem * (double)n,
                          .max_rel_err = -1};
        /* The backward reads the forward's r, mean and rstd: the forward of its norm runs first
         * (op - 2), outside the timing. */
        if (op >= RES_LN_BWD) {
            c.op = op - 2;
            st = run_resnorm(&c);
            c.op = op;
            if (st) {
                rc = bench_fail(env, st, "residual norm forward");
                break;
            }
        }
        rc = bench_time(env, run_resnorm, &c, &r.t);
        if (rc) break;
        oclml_tensor *dev = op >= RES_LN_BWD ? c.dx : c.out;
        /* r, the output and the saved statistics (mean stays unread for RMSnorm, whose
         * reference ignores it); the first rows are checked. */
        st = oclml_tensor_read(c.r, h.r, n);
        if (!st) st = oclml_tensor_read(dev, h.dev, n);
        if (!st) st = oclml_tensor_read(c.rstd, h.rstd, rows);
        if (!st && (op == RES_LN || op == RES_LN_BWD)) st = oclml_tensor_read(c.mean, h.mean, rows);
        if (st) {
            rc = bench_fail(env, st, "download");
            break;
        }
        r.max_rel_err = sample_error(&c, &h, check, cols, ref, scale);
        bench_report(env, &r);
    }
    oclml_tensor *all[] = {c.x,  c.y, c.r, c.out, c.dout, c.dr,   c.dx,
                           c.dy, c.g, c.b, c.dg,  c.db,   c.mean, c.rstd};
    for (int k = 0; k < 14; k++)
        if (all[k]) oclml_tensor_destroy(all[k]);
    float *fs[] = {h.x, h.y, h.g, h.dout, h.dr, h.r, h.dev, h.mean, h.rstd};
    for (int k = 0; k < 9; k++) free(fs[k]);
    free(ref);
    free(scale);
    return rc;
}

int bench_resnorm(bench_env *env) {
    long shapes[16][2];
    int ns;
    if (env->sizes)
        ns = bench_row_shapes(env, shapes, 16);
    else {
        const long(*src)[2] = env->quick ? QUICK_SHAPES : DEFAULT_SHAPES;
        ns = env->quick ? 2 : 3;
        memcpy(shapes, src, (size_t)ns * sizeof shapes[0]);
    }
    for (int i = 0; i < ns; i++) {
        int rc = bench_resnorm_shape(env, (size_t)shapes[i][0], (size_t)shapes[i][1]);
        if (rc) return rc;
    }
    return 0;
}
