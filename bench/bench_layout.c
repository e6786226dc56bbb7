/* Axis reductions and layout ops (issue 14 item 3): column sums of [rows x cols] (a linear
 * layer's bias gradient), the NCHW conv bias gradient (sum over N, H, W), a 2-D transpose, NCHW
 * <-> NHWC permutes and the NCHW conv bias add, in GB/s against the copy rate (each element read
 * once, outputs written once); then the embedding's cases (bench_embedding.c). Every result is checked against a double (or exact) host
 * reference on all outputs or a sample.
 *
 *   --sizes ROWSxCOLS (matrix ops) — the NCHW shape stays the encoder's 256 x 32 x 64 x 64
 *   (--quick: 1024 x 512 and 8 x 32 x 32 x 32). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { COL_SUM, CONV_BIAS_GRAD, TRANSPOSE, TO_NHWC, TO_NCHW, BIAS_NCHW };

typedef struct ly_case {
    oclml_ctx *ctx;
    oclml_tensor *x, *y, *v; /* input, output, vector (bias or sums) */
    int which;
} ly_case;

static oclml_status run_ly(void *user) {
    static const int cbg[3] = {0, 2, 3}, to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    static const int rows_axis[1] = {0};
    ly_case *c = user;
    switch (c->which) {
    case COL_SUM:
        return oclml_reduce_axes(c->ctx, OCLML_REDUCE_SUM, c->x, rows_axis, 1, c->v);
    case CONV_BIAS_GRAD:
        return oclml_reduce_axes(c->ctx, OCLML_REDUCE_SUM, c->x, cbg, 3, c->v);
    case TRANSPOSE:
        return oclml_transpose_axes(c->ctx, c->x, 0, 1, c->y);
    case TO_NHWC:
        return oclml_permute(c->ctx, c->x, to_nhwc, c->y);
    case TO_NCHW:
        return oclml_permute(c->ctx, c->x, to_nchw, c->y);
    default:
        return oclml_add_bias(c->ctx, c->x, c->v, 1, c->y);
    }
}

/* Sums of v's columns (double) against out: the relative L2 error. */
static double col_sum_err(const float *x, size_t rows, size_t cols, const float *out) {
    double *acc = calloc(cols, sizeof *acc), num = 0, den = 0;
    if (!acc) return -1;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) acc[c] += x[r * cols + c];
    for (size_t c = 0; c < cols; c++) {
        num += (out[c] - acc[c]) * (out[c] - acc[c]);
        den += acc[c] * acc[c];
    }
    free(acc);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One op on x of shape (nd, sh): time, check, report. */
static int run_one(bench_env *env, int which, const char *op, int nd, const size_t *sh,
                   const char *shape_name) {
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= sh[d];
    size_t C = sh[1], vn = C;
    size_t ysh[4];
    memcpy(ysh, sh, nd * sizeof *ysh);
    if (which == TRANSPOSE) ysh[0] = sh[1], ysh[1] = sh[0];
    if (which == TO_NHWC) ysh[1] = sh[2], ysh[2] = sh[3], ysh[3] = sh[1];
    if (which == TO_NCHW) ysh[1] = sh[3], ysh[2] = sh[1], ysh[3] = sh[2];
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *v = malloc(vn * sizeof *v);
    ly_case c = {env->ctx, NULL, NULL, NULL, which};
    oclml_status st = (x && y && v) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
    if (!st) st = oclml_tensor_create(env->ctx, nd, sh, &c.x);
    if (!st) st = oclml_tensor_create(env->ctx, nd, ysh, &c.y);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &vn, &c.v);
    if (!st) {
        bench_random(x, n, 11);
        bench_random(v, vn, 12);
        st = oclml_tensor_write(c.x, x, n);
    }
    if (!st) st = oclml_tensor_write(c.v, v, vn);
    int rc = st ? bench_fail(env, st, op) : 0;
    bench_result r = {.op = op, .shape = shape_name, .variant = ""};
    if (!rc) rc = bench_time(env, run_ly, &c, &r.t);
    if (!rc) {
        int reduces = which == COL_SUM || which == CONV_BIAS_GRAD;
        r.bytes = (reduces ? 4.0 : 8.0) * (double)n;
        st = reduces ? oclml_tensor_read(c.v, v, vn) : oclml_tensor_read(c.y, y, n);
        if (st) rc = bench_fail(env, st, "download");
    }
    if (!rc) {
        if (which == COL_SUM) {
            r.max_rel_err = col_sum_err(x, sh[0], sh[1], v);
        } else if (which == CONV_BIAS_GRAD) {
            double num = 0, den = 0;
            size_t hw = sh[2] * sh[3];
            for (size_t ch = 0; ch < C; ch++) {
                double s = 0;
                for (size_t b = 0; b < sh[0]; b++)
                    for (size_t k = 0; k < hw; k++) s += x[(b * C + ch) * hw + k];
                num += (v[ch] - s) * (v[ch] - s);
                den += s * s;
            }
            r.max_rel_err = den > 0 ? sqrt(num / den) : sqrt(num);
        } else {
            /* Exact ops: every 97th output against the host's index arithmetic (0 or 1). */
            size_t bad = 0, hw = nd == 4 ? sh[2] * sh[3] : 0;
            for (size_t o = 0; o < n; o += 97) {
                float want;
                if (which == TRANSPOSE) {
                    want = x[(o % sh[0]) * sh[1] + o / sh[0]];
                } else if (which == TO_NHWC) { /* y[b][p][ch] = x[b][ch][p] */
                    size_t ch = o % C, p = (o / C) % hw, b = o / (C * hw);
                    want = x[(b * C + ch) * hw + p];
                } else if (which == TO_NCHW) { /* x is NHWC of shape sh */
                    size_t cx = sh[3], hwx = sh[1] * sh[2];
                    size_t p = o % hwx, ch = (o / hwx) % cx, b = o / (cx * hwx);
                    want = x[(b * hwx + p) * cx + ch];
                } else {
                    want = x[o] + v[(o / hw) % C];
                }
                bad += y[o] != want;
            }
            r.max_rel_err = bad ? 1 : 0;
        }
        bench_report(env, &r);
    }
    if (c.x) oclml_tensor_destroy(c.x);
    if (c.y) oclml_tensor_destroy(c.y);
    if (c.v) oclml_tensor_destroy(c.v);
    free(x);
    free(y);
    free(v);
    return rc;
}

int bench_layout(bench_env *env) {
    long shapes[8][2];
    int ns = env->sizes ? bench_shapes(env->sizes, 2, &shapes[0][0], 8) : 1;
    if (!env->sizes) {
        shapes[0][0] = env->quick ? 1024 : 8192;
        shapes[0][1] = env->quick ? 512 : 4096;
    }
    for (int i = 0; i < ns; i++) {
        size_t sh[2] = {(size_t)shapes[i][0], (size_t)shapes[i][1]};
        char name[48];
        snprintf(name, sizeof name, "%zux%zu", sh[0], sh[1]);
        if (run_one(env, COL_SUM, "col_sum", 2, sh, name)) return 1;
        if (run_one(env, TRANSPOSE, "transpose2d", 2, sh, name)) return 1;
    }
    size_t nchw[4] = {256, 32, 64, 64};
    if (env->quick) nchw[0] = 8, nchw[2] = nchw[3] = 32;
    size_t nhwc[4] = {nchw[0], nchw[2], nchw[3], nchw[1]};
    char name[64];
    snprintf(name, sizeof name, "%zux%zux%zux%zu", nchw[0], nchw[1], nchw[2], nchw[3]);
    if (run_one(env, CONV_BIAS_GRAD, "conv_bias_grad", 4, nchw, name)) return 1;
    if (run_one(env, BIAS_NCHW, "add_bias_nchw", 4, nchw, name)) return 1;
    if (run_one(env, TO_NHWC, "nchw_to_nhwc", 4, nchw, name)) return 1;
    snprintf(name, sizeof name, "%zux%zux%zux%zu", nhwc[0], nhwc[1], nhwc[2], nhwc[3]);
    if (run_one(env, TO_NCHW, "nhwc_to_nchw", 4, nhwc, name)) return 1;
    return bench_embedding(env); /* bench_embedding.c */
}
