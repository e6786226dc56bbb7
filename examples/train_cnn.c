/* Trains a small CNN image classifier on the device: convolutions, SiLU, max-pooling, a linear
 * head, cross-entropy and AdamW, forward and backward, all through liboclml (train_models.c);
 * prints the loss curve (and compares it with PyTorch's when a golden file is given).
 *
 * Model (the image world-model encoder of the benchmarks, in small): conv 3 -> 8 5x5 "same",
 * SiLU, 2x2 max-pool, conv 8 -> 16 5x5 "same", SiLU, 2x2 max-pool, flatten, linear to 10 classes.
 * Data: random 16x16 RGB images labelled by a fixed random linear teacher (argmax of its 10
 * outputs, in double). Weights and data come from train_common.h's generator, which
 * examples/train_golden.py reproduces, so PyTorch trains from exactly the same start.
 * --bf16 or --fp16 trains in mixed precision (train_models.h; golden: autocast's curve, within
 * 2e-2 relative). Under `mpirun -np N` (built with MPI) N processes share the images
 * (train_dp.h) and the curve is the same as one process's on them all; every step checks that
 * all hold the same weights.
 *   usage: train_cnn [--steps N] [--images N] [--bf16|--fp16] [--golden FILE]
 * Exit status: 0 when the loss fell below 80% of its start (and matched the golden file within
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
    size_t N = 128;
    const char *golden = NULL;
    oclml_dtype dtype = OCLML_FLOAT32;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--steps"))
            steps = atoi(v);
        else if (v && !strcmp(a, "--images"))
            N = (size_t)atol(v);
        else if (v && !strcmp(a, "--golden"))
            golden = v;
        else if (!strcmp(a, "--bf16") || !strcmp(a, "--fp16")) {
            dtype = a[2] == 'b' ? OCLML_BFLOAT16 : OCLML_FLOAT16;
            i--; /* a flag: no value */
        } else {
            fprintf(stderr, "usage: %s [--steps N] [--images N] [--bf16|--fp16] [--golden FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (steps < 1 || !N || N % (size_t)dp.ranks) return 2;
    const size_t channels[2] = {8, 16};
    train_cnn *m;
    TRAIN_CHECK(train_cnn_create(ctx, N, 16, 2, channels, 10, dtype, &dp.par, &m));
    TRAIN_CHECK(train_dp_attach(&dp, ctx, train_cnn_arena(m), NULL));
    float *curve = malloc((size_t)steps * sizeof *curve);
    int rc = 0;
    for (int s = 0; s < steps; s++) {
        TRAIN_CHECK(train_cnn_step(m));
        float loss;
        TRAIN_CHECK(train_cnn_loss(m, &loss));
        rc |= train_dp_step_done(&dp, train_cnn_arena(m), s, loss, curve);
    }
    if (curve[steps - 1] >= 0.8f * curve[0]) {
        fprintf(stderr, "the loss did not fall below 80%% of its start\n");
        rc = 1;
    }
    if (golden && !dp.rank)
        rc |= train_compare_golden(golden, curve, steps, dtype == OCLML_FLOAT32 ? 1e-3 : 2e-2) ? 1
                                                                                               : 0;
    train_dp_detach(&dp);
    train_cnn_destroy(m);
    oclml_ctx_destroy(ctx);
    train_dp_end(&dp);
    free(curve);
    return rc;
}
