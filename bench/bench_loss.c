/* oclml-bench loss: cross-entropy on class indices, forward and forward+backward, on the peer's
 * shapes and names (torch_peers.py `xent`: "cross_entropy" at 4 bytes a logit,
 * "cross_entropy_fwd_bwd" at 12 bytes a logit, as the peer counts them; ours moves 8 where a row
 * fits the registers, or registers and local memory: one read of the logits, one write of
 * dlogits), then the KL between
 * categorical logits of a world model's latent and MSE forward+backward. The loss is checked
 * against a double-precision reference, dlogits on the first rows. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const long DEFAULT_SHAPES[][2] = {{8192, 32000}, {4096, 50257}};
static const long QUICK_SHAPES[][2] = {{256, 32000}, {16, 50257}};

typedef struct loss_case {
    oclml_ctx *ctx;
    oclml_tensor *x, *t, *loss, *dx, *q, *dq;
    int op;
} loss_case;

enum { XENT, XENT_FB, KL_FB, MSE_FB };

static oclml_status run(void *user) {
    loss_case *c = user;
    switch (c->op) {
    case XENT:
        return oclml_cross_entropy(c->ctx, NULL, c->x, c->t, NULL, c->loss, NULL);
    case XENT_FB:
        return oclml_cross_entropy(c->ctx, NULL, c->x, c->t, NULL, c->loss, c->dx);
    case KL_FB:
        return oclml_kl_div_logits(c->ctx, NULL, c->x, c->q, NULL, c->loss, c->dx, c->dq);
    default:
        return oclml_mse_loss(c->ctx, NULL, c->x, c->q, NULL, c->loss, c->dx);
    }
}

/* The mean cross-entropy of rows x cols logits on class indices, in double. */
static double ref_xent(const float *x, const float *t, size_t rows, size_t cols, double *dx,
                       size_t dx_rows) {
    double sum = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        double m = -INFINITY, s = 0;
        for (size_t c = 0; c < cols; c++) m = xr[c] > m ? xr[c] : m;
        for (size_t c = 0; c < cols; c++) s += exp(xr[c] - m);
        sum += m + log(s) - xr[(size_t)t[r]];
        if (r < dx_rows)
            for (size_t c = 0; c < cols; c++)
                dx[r * cols + c] = (exp(xr[c] - m) / s - (c == (size_t)t[r])) / (double)rows;
    }
    return sum / (double)rows;
}

static double rel_err(const float *out, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int run_shape(bench_env *env, size_t rows, size_t cols, int first, int last,
                     const char *const *names, const double *bytes_per) {
    size_t n = rows * cols, shape[2] = {rows, cols}, one = 1, check = rows < 4 ? rows : 4;
    float *x = malloc(n * sizeof *x), *t = malloc(rows * sizeof *t),
          *dx = malloc(check * cols * sizeof *dx);
    double *ref = malloc(check * cols * sizeof *ref);
    loss_case c = {.ctx = env->ctx};
    oclml_status st = (x && t && dx && ref) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
    if (!st) st = oclml_tensor_create(env->ctx, 2, shape, &c.x);
    if (!st) st = oclml_tensor_create(env->ctx, 2, shape, &c.dx);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &rows, &c.t);
    if (!st) st = oclml_tensor_create(env->ctx, 1, &one, &c.loss);
    if (!st && last >= KL_FB) st = oclml_tensor_create(env->ctx, 2, shape, &c.q);
    if (!st && last >= KL_FB) st = oclml_tensor_create(env->ctx, 2, shape, &c.dq);
    if (!st) {
        bench_random(x, n, 11);
        for (size_t i = 0; i < n; i++) x[i] *= 4;
        for (size_t r = 0; r < rows; r++)
            t[r] = (float)(r * 2654435761u % cols); /* spread over the classes */
        st = oclml_tensor_write(c.x, x, n);
    }
    if (!st) st = oclml_tensor_write(c.t, t, rows);
    if (!st && c.q) {
        bench_random(x, n, 12); /* q (KL) or the target (MSE) */
        st = oclml_tensor_write(c.q, x, n);
    }
    char variant[96] = "";
    if (!st && first == XENT) /* the plan the library takes (OCLML_VERBOSE=1 logs each call's) */
        st = oclml_op_variant(env->ctx, "cross_entropy", rows, cols, variant, sizeof variant);
    int rc = st ? bench_fail(env, st, "loss setup") : 0;
    double ref_loss = NAN;
    if (!rc && first == XENT) ref_loss = ref_xent(x, t, rows, cols, ref, check);
    for (int op = first; op <= last && !rc; op++) {
        c.op = op;
        bench_result r = {.op = names[op - first], .variant = variant, .max_rel_err = -1};
        if ((rc = bench_time(env, run, &c, &r.t))) break;
        char sh[48];
        snprintf(sh, sizeof sh, "%zux%zu", rows, cols);
        r.shape = sh;
        r.bytes = bytes_per[op - first] * (double)n;
        if (op == XENT || op == XENT_FB) {
            float l;
            if ((st = oclml_tensor_read(c.loss, &l, 1))) {
                rc = bench_fail(env, st, "download");
                break;
            }
            r.max_rel_err = fabs(l - ref_loss) / fabs(ref_loss);
            if (op == XENT_FB) {
                /* The first rows, through a view of dlogits' buffer. */
                cl_mem buf;
                size_t off, vshape[2] = {check, cols};
                oclml_tensor *view = NULL;
                st = oclml_tensor_buffer(c.dx, &buf, &off);
                if (!st) st = oclml_tensor_wrap(env->ctx, buf, off, 2, vshape, &view);
                if (!st) st = oclml_tensor_read(view, dx, check * cols);
                if (view) oclml_tensor_destroy(view);
                if (st) {
                    rc = bench_fail(env, st, "download");
                    break;
                }
                double e = rel_err(dx, ref, check * cols);
                if (e > r.max_rel_err) r.max_rel_err = e;
            }
        }
        bench_report(env, &r);
    }
    oclml_tensor *all[] = {c.x, c.t, c.loss, c.dx, c.q, c.dq};
    for (int k = 0; k < 6; k++)
        if (all[k]) oclml_tensor_destroy(all[k]);
    free(x);
    free(t);
    free(dx);
    free(ref);
    return rc;
}

int bench_loss(bench_env *env) {
    long shapes[16][2];
    int ns;
    if (env->sizes) {
        ns = bench_shapes(env->sizes, 2, &shapes[0][0], 16);
    } else {
        ns = 2;
        memcpy(shapes, env->quick ? QUICK_SHAPES : DEFAULT_SHAPES, sizeof DEFAULT_SHAPES);
    }
    static const char *const xent_names[] = {"cross_entropy", "cross_entropy_fwd_bwd"};
    static const double xent_bytes[] = {4, 12};
    /* KL reads p and q, writes dp and dq: 16 bytes an element. */
    static const char *const kl_names[] = {"kl_div_logits_fwd_bwd"};
    static const double kl_bytes[] = {16};
    for (int i = 0; i < ns; i++) {
        int rc = run_shape(env, (size_t)shapes[i][0], (size_t)shapes[i][1], XENT, XENT_FB,
                           xent_names, xent_bytes);
        /* Given sizes time KL's long rows too (its chunked passes past the registers). */
        if (!rc && env->sizes)
            rc = run_shape(env, (size_t)shapes[i][0], (size_t)shapes[i][1], KL_FB, KL_FB, kl_names,
                           kl_bytes);
        if (rc) return rc;
    }
    if (env->sizes) return 0;
    /* A world model's latent: batch 16 x 64 steps, 32 categoricals of 32 classes; MSE on a
     * regression head (12 bytes an element). */
    static const char *const mse_names[] = {"mse_loss_fwd_bwd"};
    static const double mse_bytes[] = {12};
    int rc = run_shape(env, env->quick ? 1024 : 32768, 32, KL_FB, KL_FB, kl_names, kl_bytes);
    if (!rc)
        rc = run_shape(env, env->quick ? 256 : 4096, env->quick ? 1024 : 4096, MSE_FB, MSE_FB,
                       mse_names, mse_bytes);
    return rc;
}
