/* Whole training steps (torch_peers.py train): forward, loss, backward and the AdamW step of the
 * models in examples/train_models.c, on the peer's sizes and names: the MLP at batch 4096,
 * 1024-4096-4096-1024, GELU, MSE; the CNN on 256 64x64 RGB images, 5x5 convolutions to 32, 64,
 * 128 and 256 channels, each with SiLU and 2x2 max-pool, a linear head, cross-entropy. --quick
 * runs both in small. The variant notes the loss after the timed steps (finite, and falling from
 * the first: the step trains). */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpt_model.h"
#include "train_models.h"

static oclml_status mlp_step(void *m) { return train_mlp_step(m); }
static oclml_status cnn_step(void *m) { return train_cnn_step(m); }

/* Times steps of a model; reports with the loss before and after. */
static int time_steps(bench_env *env, const char *shape, bench_fn step, void *model,
                      oclml_status (*loss)(void *, float *)) {
    float first = NAN, last = NAN;
    oclml_status st = step(model);
    if (!st) st = loss(model, &first);
    bench_result r = {.op = "train_step", .shape = shape, .max_rel_err = -1};
    int rc = st ? bench_fail(env, st, "first step") : bench_time(env, step, model, &r.t);
    if (!rc && (st = loss(model, &last))) rc = bench_fail(env, st, "loss");
    if (rc) return rc;
    char variant[96];
    snprintf(variant, sizeof variant, "loss %.4g after the first step, %.4g after the timed ones",
             first, last);
    r.variant = variant;
    bench_report(env, &r);
    return isfinite(last) && last < first ? 0 : 1;
}

static oclml_status mlp_loss(void *m, float *l) { return train_mlp_loss(m, l); }
static oclml_status cnn_loss(void *m, float *l) { return train_cnn_loss(m, l); }

static oclml_status gpt_step_fn(void *m) { return gpt_step(m); }
static oclml_status gpt_loss_fn(void *m, float *l) { return gpt_loss(m, l); }

/* GPT-2 small at batch 8 x 1024 on random tokens (torch_peers.py gpt2's data), or the tiny model
 * with --quick, in fp32 or mixed precision (dtype bf16: the peer's autocast): the step's time,
 * tokens/s, the device memory the library held at its peak, and where the step's kernel time
 * goes (profiled once, after the timed steps). */
static int bench_gpt(bench_env *env, oclml_dtype dtype) {
    gpt_config c = env->quick ? gpt_config_tiny() : gpt_config_small();
    c.dtype = dtype;
    size_t before;
    oclml_status st = oclml_ctx_memory(env->ctx, &before, NULL);
    if (!st) st = oclml_ctx_reset_peak_memory(env->ctx);
    gpt_model *m = NULL;
    if (!st) st = gpt_create(env->ctx, &c, &m);
    if (st) return bench_fail(env, st, "GPT setup");
    uint32_t *tok = malloc(c.batch * (c.seq + 1) * sizeof *tok);
    if (!tok) return bench_fail(env, OCLML_ERR_OUT_OF_MEMORY, "GPT batch");
    uint64_t s = 7;
    for (size_t i = 0; i < c.batch * (c.seq + 1); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (uint32_t)((s >> 33) % c.vocab);
    }
    st = gpt_set_batch(m, tok);
    free(tok);
    if (st) return bench_fail(env, st, "GPT batch");
    char shape[96];
    snprintf(shape, sizeof shape, "%s B%zu T%zu %s", env->quick ? "gpt-tiny" : "gpt2-small",
             c.batch, c.seq, oclml_dtype_name(dtype));
    float first = NAN, last = NAN;
    st = gpt_step(m);
    if (!st) st = gpt_loss(m, &first);
    bench_result r = {.op = "train_step", .shape = shape, .max_rel_err = -1};
    int rc = st ? bench_fail(env, st, "first GPT step") : bench_time(env, gpt_step_fn, m, &r.t);
    if (!rc && (st = gpt_loss_fn(m, &last))) rc = bench_fail(env, st, "GPT loss");
    size_t peak = 0;
    if (!rc && (st = oclml_ctx_memory(env->ctx, NULL, &peak))) rc = bench_fail(env, st, "memory");
    double ms[GPT_PHASES];
    char variant[160], extra[320];
    if (!rc && (st = gpt_step_phases(m, ms))) rc = bench_fail(env, st, "GPT phases");
    if (!rc) {
        snprintf(variant, sizeof variant,
                 "loss %.4g after the first step, %.4g after the timed ones; %zu parameters", first,
                 last, gpt_parameters(m));
        int n = snprintf(extra, sizeof extra, "\"tokens_per_s\":%.0f,\"peak_mem_gib\":%.2f",
                         (double)(c.batch * c.seq) / (r.t.median_ms * 1e-3),
                         (double)(peak - before) / (1u << 30));
        for (int i = 0; i < GPT_PHASES && n > 0 && (size_t)n < sizeof extra; i++)
            n += snprintf(extra + n, sizeof extra - (size_t)n, ",\"%s_ms\":%.3f",
                          gpt_phase_names[i], ms[i]);
        r.variant = variant;
        r.extra_json = extra;
        bench_report(env, &r);
        printf("  phases (kernel ms):");
        for (int i = 0; i < GPT_PHASES; i++) printf(" %s %.2f", gpt_phase_names[i], ms[i]);
        printf("; peak device memory %.2f GiB\n", (double)(peak - before) / (1u << 30));
        rc = isfinite(last) && last < first ? 0 : 1;
    }
    gpt_destroy(m);
    return rc;
}

int bench_gpt_bf16(bench_env *env) { return bench_gpt(env, OCLML_BFLOAT16); }

int bench_train(bench_env *env) {
    size_t B = env->quick ? 128 : 4096;
    size_t dims[4] = {1024, 4096, 4096, 1024}, quick_dims[4] = {64, 256, 256, 64};
    train_mlp *mlp;
    oclml_status st =
        train_mlp_create(env->ctx, B, env->quick ? quick_dims : dims, OCLML_FLOAT32, NULL, &mlp);
    if (st) return bench_fail(env, st, "MLP setup");
    char shape[96];
    const size_t *d = env->quick ? quick_dims : dims;
    snprintf(shape, sizeof shape, "mlp B%zu %zu-%zu-%zu-%zu gelu mse adamw", B, d[0], d[1], d[2],
             d[3]);
    int rc = time_steps(env, shape, mlp_step, mlp, mlp_loss);
    train_mlp_destroy(mlp);
    if (rc) return rc;

    const size_t channels[4] = {32, 64, 128, 256}, quick_ch[2] = {8, 16};
    size_t images = env->quick ? 16 : 256, side = env->quick ? 16 : 64;
    int n_conv = env->quick ? 2 : 4;
    train_cnn *cnn;
    st = train_cnn_create(env->ctx, images, side, n_conv, env->quick ? quick_ch : channels, 10,
                          OCLML_FLOAT32, NULL, &cnn);
    if (st) return bench_fail(env, st, "CNN setup");
    if (env->quick)
        snprintf(shape, sizeof shape, "cnn B%zu %zux%zux3 k5 8-16 maxpool silu xent adamw", images,
                 side, side);
    else
        snprintf(shape, sizeof shape, "cnn B256 64x64x3 k5 32-64-128-256 maxpool silu xent adamw");
    rc = time_steps(env, shape, cnn_step, cnn, cnn_loss);
    train_cnn_destroy(cnn);
    if (!rc) rc = bench_gpt(env, OCLML_FLOAT32);
    return rc ? rc : bench_gpt(env, OCLML_BFLOAT16);
}
