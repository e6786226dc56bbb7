/* Elementwise ops and reductions on 64M elements (torch_peers.py's add and gelu): GB/s against
 * the copy rate, checked against the double reference on a sample; then dropout's cases. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

#include "ref/ref.h"

typedef struct ew_case {
    oclml_ctx *ctx;
    oclml_tensor *a, *b, *y, *row, *one;
    int which;
} ew_case;

enum { ADD, BIAS_ADD, GELU, GELU_BWD, RELU, SILU_BWD, SUM_ALL, MAX_ALL };

static const struct {
    const char *name;
    double bytes_per_elem; /* each input read once, each output written once */
} CASES[] = {{"add", 12}, {"bias_add", 8},  {"gelu", 8}, {"gelu_bwd", 12},
             {"relu", 8}, {"silu_bwd", 12}, {"sum", 4},  {"max", 4}};

static oclml_status run_ew(void *user) {
    ew_case *c = user;
    switch (c->which) {
    case ADD:
        return oclml_binary(c->ctx, OCLML_ADD, c->a, c->b, c->y);
    case BIAS_ADD:
        return oclml_binary(c->ctx, OCLML_ADD, c->a, c->row, c->y);
    case GELU:
        return oclml_unary(c->ctx, OCLML_GELU_TANH, c->a, c->y);
    case GELU_BWD:
        return oclml_unary_backward(c->ctx, OCLML_GELU_TANH, c->a, c->b, c->y);
    case RELU:
        return oclml_unary(c->ctx, OCLML_RELU, c->a, c->y);
    case SILU_BWD:
        return oclml_unary_backward(c->ctx, OCLML_SILU, c->a, c->b, c->y);
    case SUM_ALL:
        return oclml_reduce_all(c->ctx, OCLML_REDUCE_SUM, c->a, c->one);
    default:
        return oclml_reduce_all(c->ctx, OCLML_REDUCE_MAX, c->a, c->one);
    }
}

/* The reference value of output element i. */
static double ref_at(int which, const float *a, const float *b, const float *row, size_t cols,
                     size_t i) {
    switch (which) {
    case ADD:
        return (double)a[i] + b[i];
    case BIAS_ADD:
        return (double)a[i] + row[i % cols];
    case GELU:
        return ref_unary(OCLML_GELU_TANH, 0, a[i]);
    case GELU_BWD:
        return b[i] * ref_unary_grad(OCLML_GELU_TANH, 0, a[i]);
    case RELU:
        return ref_unary(OCLML_RELU, 0, a[i]);
    default:
        return b[i] * ref_unary_grad(OCLML_SILU, 0, a[i]);
    }
}

int bench_elementwise(bench_env *env) {
    long sizes[4];
    int ns = bench_sizes(env, env->quick ? "4194304" : "67108864", sizes, 4);
    for (int s = 0; s < ns; s++) {
        size_t n = (size_t)sizes[s], cols = 1024, one = 1;
        size_t shape[2] = {n / cols, cols};
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *y = malloc(n * sizeof *y);
        ew_case c = {.ctx = env->ctx};
        oclml_status st =
            (a && b && y && n % cols == 0) ? OCLML_SUCCESS : OCLML_ERR_INVALID_ARGUMENT;
        if (!st) st = oclml_tensor_create(env->ctx, 2, shape, &c.a);
        if (!st) st = oclml_tensor_create(env->ctx, 2, shape, &c.b);
        if (!st) st = oclml_tensor_create(env->ctx, 2, shape, &c.y);
        if (!st) st = oclml_tensor_create(env->ctx, 1, &cols, &c.row);
        if (!st) st = oclml_tensor_create(env->ctx, 1, &one, &c.one);
        if (!st) {
            bench_random(a, n, 7);
            bench_random(b, n, 8);
            for (size_t i = 0; i < n; i++) a[i] *= 4;
            st = oclml_tensor_write(c.a, a, n);
        }
        if (!st) st = oclml_tensor_write(c.b, b, n);
        if (!st) st = oclml_tensor_write(c.row, b, cols);
        int rc = st ? bench_fail(env, st, "elementwise setup") : 0;
        const int cpu = bench_cpu_layout(env);
        for (int w = 0; w < 8 && !rc; w++) {
            c.which = w;
            bench_result r = {.op = CASES[w].name,
                              .variant = w >= SUM_ALL
                                             ? (cpu ? "a partial a work-item's chunk + one row"
                                                    : "work-group partials + one row")
                                         : cpu ? "a contiguous chunk a work-item"
                                               : "float4 grid-stride",
                              .max_rel_err = -1};
            rc = bench_time(env, run_ew, &c, &r.t);
            if (rc) break;
            char sh[32];
            snprintf(sh, sizeof sh, "%zu", n);
            r.shape = sh;
            r.bytes = CASES[w].bytes_per_elem * (double)n;
            double worst = 0;
            if (w < SUM_ALL) {
                if ((st = oclml_tensor_read(c.y, y, n))) rc = bench_fail(env, st, "download");
                for (size_t i = 0; !rc && i < n; i += 997) {
                    double want = ref_at(w, a, b, b, cols, i);
                    /* relative, floored at 1e-3: derivatives cross zero, where relative
                     * error means nothing */
                    worst = fmax(worst, fabs(y[i] - want) / fmax(fabs(want), 1e-3));
                }
            } else {
                float got;
                double want = w == SUM_ALL ? 0 : -INFINITY, scale = 0;
                if ((st = oclml_tensor_read(c.one, &got, 1))) rc = bench_fail(env, st, "download");
                for (size_t i = 0; i < n; i++) {
                    if (w == SUM_ALL)
                        want += a[i];
                    else
                        want = fmax(want, a[i]);
                    scale += fabs(a[i]);
                }
                worst = fabs(got - want) / (w == SUM_ALL ? scale : fabs(want));
            }
            r.max_rel_err = worst;
            if (!rc) bench_report(env, &r);
        }
        oclml_tensor *all[] = {c.a, c.b, c.y, c.row, c.one};
        for (int k = 0; k < 5; k++)
            if (all[k]) oclml_tensor_destroy(all[k]);
        free(a);
        free(b);
        free(y);
        if (rc) return rc;
    }
    return bench_dropout(env); /* bench_dropout.c */
}
