/* What the training examples share: a deterministic generator that examples/train_golden.py
 * reproduces bit for bit (so PyTorch trains from the same weights and data), PyTorch's default
 * Linear/Conv2d initialisation drawn from it, status checks, and the comparison of a loss curve
 * with a golden file written by PyTorch. */
#ifndef OCLML_TRAIN_COMMON_H
#define OCLML_TRAIN_COMMON_H

#include <math.h>
#include <oclml.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64; uniform floats in [-1, 1) with 24 random bits (exact in float32). */
typedef struct train_rng {
    uint64_t s;
} train_rng;

static inline float train_uniform(train_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) / 8388608.0f - 1.0f;
}

/* n values uniform in [-bound, bound): PyTorch's default init of Linear and Conv2d weights and
 * biases is U(-1/sqrt(fan_in), 1/sqrt(fan_in)); fan_in a power of 4 keeps the bound exact. */
static inline void train_fill(train_rng *r, float *x, size_t n, float bound) {
    for (size_t i = 0; i < n; i++) x[i] = train_uniform(r) * bound;
}

/* A tensor of another shape over t's elements (a reshape); NULL after a failure (*st set), and
 * nothing done once *st holds one. */
static inline oclml_tensor *train_view(oclml_ctx *ctx, oclml_status *st, const oclml_tensor *t,
                                       int nd, const size_t *shape) {
    cl_mem buf;
    size_t off;
    oclml_dtype dt;
    oclml_tensor *v = NULL;
    if (!*st) *st = oclml_tensor_buffer(t, &buf, &off);
    if (!*st) *st = oclml_tensor_dtype(t, &dt);
    if (!*st) *st = oclml_tensor_wrap_dtype(ctx, dt, buf, off, nd, shape, &v);
    return v;
}

/* Mixed precision in fp16 as autocast's GradScaler runs it: the optimizer's dynamic loss scale
 * from 65536 (growth 2 every 2000 clean steps, halved and the step skipped on inf/NaN), and the
 * device tensor that holds it, to seed the backward with as the loss's dloss (*dloss; NULL,
 * dloss 1, for bf16 and fp32, whose range needs no scale). Call before oclml_optim_create. */
static inline void train_scale_config(oclml_optim_config *cfg, oclml_dtype dtype) {
    cfg->dynamic_scale = dtype == OCLML_FLOAT16;
}
static inline oclml_status train_scale_start(oclml_optim *opt, oclml_dtype dtype,
                                             oclml_tensor **dloss) {
    *dloss = NULL;
    if (dtype != OCLML_FLOAT16) return OCLML_SUCCESS;
    oclml_status st = oclml_optim_set_grad_scale(opt, 65536.0f);
    return st ? st : oclml_optim_grad_scale_tensor(opt, dloss);
}

/* A failed call ends the example with status 3 (1: it ran, but the loss did not behave). */
#define TRAIN_CHECK(expr)                                                                          \
    do {                                                                                           \
        oclml_status st_ = (expr);                                                                 \
        if (st_) {                                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, oclml_status_name(st_)); \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

/* Compares the curve with a golden file (one loss a line, PyTorch's) within rel; prints the
 * worst difference. Returns 0 when it matches, 1 when not, 2 when the file cannot be read. */
static inline int train_compare_golden(const char *path, const float *loss, int steps, double rel) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot read golden file %s\n", path);
        return 2;
    }
    double worst = 0;
    int n = 0, worst_at = 0;
    for (double want; n < steps && fscanf(f, "%lf", &want) == 1; n++) {
        double d = fabs(loss[n] - want) / fmax(fabs(want), 1e-6);
        if (d > worst) worst = d, worst_at = n;
    }
    fclose(f);
    if (n < steps) {
        fprintf(stderr, "golden file %s has %d losses, %d wanted\n", path, n, steps);
        return 2;
    }
    printf("golden %s: worst relative difference %.2e at step %d (tolerance %.0e)\n", path, worst,
           worst_at, rel);
    return worst <= rel ? 0 : 1;
}

#endif
