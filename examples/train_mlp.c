/* Trains a small MLP regression on the device: every op of forward, loss, backward and the AdamW
 * step runs through liboclml (train_models.c), and the loss curve is printed (and compared with
 * PyTorch's when a golden file is given).
 *
 * Model: in -> hidden -> hidden -> out, GELU between layers (nn.Linear layout), MSE loss against
 * tanh(x T) of a fixed random teacher T, full batch, AdamW (lr 1e-3, PyTorch's defaults
 * otherwise). Weights and data come from train_common.h's generator, which
 * examples/train_golden.py reproduces, so PyTorch trains from exactly the same start.
 * --bf16 or --fp16 trains in mixed precision (train_models.h: autocast's split, fp32 master
 * weights); the golden file then is autocast's curve, matched within 2e-2 relative. Under
 * `mpirun -np N` (built with MPI) N processes share the batch (train_dp.h) and the curve is the
 * same as one process's on the whole batch; every step checks that all hold the same weights.
 *   usage: train_mlp [--steps N] [--batch B] [--in I] [--hidden H] [--out O] [--bf16|--fp16]
 *                    [--golden FILE]
 * Exit status: 0 when the loss fell to under half its start (and matched the golden file within
 * 1e-3 relative when one is given), 1 otherwise, 3 when a call failed. */
#include "train_common.h"
#include "train_dp.h"
#include "train_models.h"

int main(int argc, char **argv) {
    char err[4096];
    oclml_ctx *ctx;
    train_dp dp;
    if (train_dp_begin(&dp, &argc, &argv, &ctx, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 3;
    }
    int steps = 50;
    size_t B = 256, dims[4] = {64, 256, 256, 64};
    const char *golden = NULL;
    oclml_dtype dtype = OCLML_FLOAT32;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--steps"))
            steps = atoi(v);
        else if (v && !strcmp(a, "--batch"))
            B = (size_t)atol(v);
        else if (v && !strcmp(a, "--in"))
            dims[0] = (size_t)atol(v);
        else if (v && !strcmp(a, "--hidden"))
            dims[1] = dims[2] = (size_t)atol(v);
        else if (v && !strcmp(a, "--out"))
            dims[3] = (size_t)atol(v);
        else if (v && !strcmp(a, "--golden"))
            golden = v;
        else if (!strcmp(a, "--bf16") || !strcmp(a, "--fp16")) {
            dtype = a[2] == 'b' ? OCLML_BFLOAT16 : OCLML_FLOAT16;
            i--; /* a flag: no value */
        } else {
            fprintf(stderr,
                    "usage: %s [--steps N] [--batch B] [--in I] [--hidden H] [--out O] "
                    "[--bf16|--fp16] [--golden FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (steps < 1 || !B || !dims[0] || !dims[1] || !dims[3] || B % (size_t)dp.ranks) return 2;
    train_mlp *m;
    TRAIN_CHECK(train_mlp_create(ctx, B, dims, dtype, &dp.par, &m));
    TRAIN_CHECK(train_dp_attach(&dp, ctx, train_mlp_arena(m), NULL));
    float *curve = malloc((size_t)steps * sizeof *curve);
    int rc = 0;
    for (int s = 0; s < steps; s++) {
        TRAIN_CHECK(train_mlp_step(m));
        float loss;
        TRAIN_CHECK(train_mlp_loss(m, &loss));
        rc |= train_dp_step_done(&dp, train_mlp_arena(m), s, loss, curve);
    }
    if (curve[steps - 1] >= 0.5f * curve[0]) {
        fprintf(stderr, "the loss did not fall to half its start\n");
        rc = 1;
    }
    if (golden && !dp.rank)
        rc |= train_compare_golden(golden, curve, steps, dtype == OCLML_FLOAT32 ? 1e-3 : 2e-2) ? 1
                                                                                               : 0;
    train_dp_detach(&dp);
    train_mlp_destroy(m);
    oclml_ctx_destroy(ctx);
    train_dp_end(&dp);
    free(curve);
    return rc;
}
