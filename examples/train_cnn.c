/* Trains a small CNN image classifier on the device: convolutions, SiLU, max-pooling, a linear
 * head, cross-entropy and AdamW, forward and backward, all through liboclml; prints the loss
 * curve (and compares it with PyTorch's when a golden file is given).
 *
 * Model (the image world-model encoder of the benchmarks, in small): conv 3 -> C1 5x5 "same",
 * SiLU, 2x2 max-pool, conv C1 -> C2 5x5 "same", SiLU, 2x2 max-pool, flatten, linear to 10
 * classes. Data: N random 16x16 RGB images labelled by a fixed random linear teacher (argmax of
 * its 10 outputs, in double). Weights and data come from examples/train_common.h's generator,
 * which examples/train_golden.py reproduces, so PyTorch trains from exactly the same start.
 *   usage: train_cnn [--steps N] [--images N] [--golden FILE]
 * Exit status: 0 when the loss fell below 80% of its start (and matched the golden file within
 * 1e-3 relative when one is given), 1 otherwise, 3 when a call failed. */
#include "train_common.h"

enum { SIDE = 16, C0 = 3, C1 = 8, C2 = 16, CLASSES = 10, FLAT = C2 * (SIDE / 4) * (SIDE / 4) };

int main(int argc, char **argv) {
    int steps = 50;
    size_t N = 128;
    const char *golden = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--images")) N = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--golden")) golden = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s [--steps N] [--images N] [--golden FILE]\n", argv[0]);
            return 2;
        }
    }
    if (argc % 2 == 0 || steps < 1 || !N) {
        fprintf(stderr, "usage: %s [--steps N] [--images N] [--golden FILE]\n", argv[0]);
        return 2;
    }
    char err[4096];
    oclml_ctx *ctx;
    if (oclml_ctx_create(&ctx, NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* Parameters: conv1 w, b; conv2 w, b; head w, b (PyTorch's layouts and default init). */
    const oclml_arena_shape shapes[6] = {{4, {C1, C0, 5, 5}}, {1, {C1}}, {4, {C2, C1, 5, 5}},
                                         {1, {C2}},           {2, {CLASSES, FLAT}}, {1, {CLASSES}}};
    const size_t fan_in[3] = {C0 * 25, C1 * 25, FLAT};
    oclml_arena *arena;
    TRAIN_CHECK(oclml_arena_create(ctx, 6, shapes, &arena));
    oclml_tensor *P[6], *G[6];
    train_rng rng = {4321};
    for (int i = 0; i < 6; i++) {
        TRAIN_CHECK(oclml_arena_param(arena, (size_t)i, &P[i]));
        TRAIN_CHECK(oclml_arena_grad(arena, (size_t)i, &G[i]));
        size_t n = 1;
        for (int d = 0; d < shapes[i].ndim; d++) n *= shapes[i].shape[d];
        float *v = malloc(n * sizeof *v);
        train_fill(&rng, v, n, 1.0f / sqrtf((float)fan_in[i / 2]));
        TRAIN_CHECK(oclml_tensor_write(P[i], v, n));
        free(v);
    }
    /* Images uniform in [-1, 1); labels: argmax of a teacher's 10 outputs, in double. */
    size_t npix = (size_t)C0 * SIDE * SIDE;
    float *img = malloc(N * npix * sizeof *img), *teacher = malloc(npix * CLASSES * sizeof *teacher),
          *labels = malloc(N * sizeof *labels);
    train_fill(&rng, img, N * npix, 1.0f);
    train_fill(&rng, teacher, npix * CLASSES, 1.0f);
    for (size_t n = 0; n < N; n++) {
        double best = -INFINITY;
        for (int c = 0; c < CLASSES; c++) {
            double s = 0;
            for (size_t p = 0; p < npix; p++) s += (double)img[n * npix + p] * teacher[p * CLASSES + c];
            if (s > best) best = s, labels[n] = (float)c;
        }
    }
    size_t xs[4] = {N, C0, SIDE, SIDE}, c1s[4] = {N, C1, SIDE, SIDE},
           p1s[4] = {N, C1, SIDE / 2, SIDE / 2}, c2s[4] = {N, C2, SIDE / 2, SIDE / 2},
           p2s[4] = {N, C2, SIDE / 4, SIDE / 4}, flat[2] = {N, FLAT}, ls[2] = {N, CLASSES},
           ts[1] = {N}, one[1] = {1};
    oclml_tensor *X = train_tensor(ctx, 4, xs, img), *T = train_tensor(ctx, 1, ts, labels);
    oclml_tensor *C1o = train_tensor(ctx, 4, c1s, NULL), *S1 = train_tensor(ctx, 4, c1s, NULL),
                 *P1 = train_tensor(ctx, 4, p1s, NULL), *C2o = train_tensor(ctx, 4, c2s, NULL),
                 *S2 = train_tensor(ctx, 4, c2s, NULL), *P2 = train_tensor(ctx, 4, p2s, NULL),
                 *LOG = train_tensor(ctx, 2, ls, NULL), *DLOG = train_tensor(ctx, 2, ls, NULL),
                 *DP2 = train_tensor(ctx, 4, p2s, NULL), *DS2 = train_tensor(ctx, 4, c2s, NULL),
                 *DC2 = train_tensor(ctx, 4, c2s, NULL), *DP1 = train_tensor(ctx, 4, p1s, NULL),
                 *DS1 = train_tensor(ctx, 4, c1s, NULL), *DC1 = train_tensor(ctx, 4, c1s, NULL),
                 *LOSS = train_tensor(ctx, 1, one, NULL);
    oclml_tensor *F = train_view(ctx, P2, 2, flat), *DF = train_view(ctx, DP2, 2, flat);
    oclml_conv2d_params cp;
    oclml_conv2d_params_init(&cp);
    cp.pad_before[0] = cp.pad_before[1] = cp.pad_after[0] = cp.pad_after[1] = 2;
    oclml_pool2d_params pp;
    oclml_pool2d_params_init(&pp);
    oclml_optim_config cfg;
    TRAIN_CHECK(oclml_optim_config_init(&cfg, OCLML_OPTIM_ADAMW));
    oclml_optim *opt;
    TRAIN_CHECK(oclml_optim_create(ctx, arena, &cfg, &opt));

    float *curve = malloc((size_t)steps * sizeof *curve);
    for (int s = 0; s < steps; s++) {
        TRAIN_CHECK(oclml_conv2d(ctx, &cp, X, P[0], P[1], C1o));
        TRAIN_CHECK(oclml_unary(ctx, OCLML_SILU, C1o, S1));
        TRAIN_CHECK(oclml_max_pool2d(ctx, &pp, S1, P1));
        TRAIN_CHECK(oclml_conv2d(ctx, &cp, P1, P[2], P[3], C2o));
        TRAIN_CHECK(oclml_unary(ctx, OCLML_SILU, C2o, S2));
        TRAIN_CHECK(oclml_max_pool2d(ctx, &pp, S2, P2));
        TRAIN_CHECK(oclml_linear(ctx, OCLML_ACT_NONE, F, P[4], P[5], LOG, NULL));
        TRAIN_CHECK(oclml_cross_entropy(ctx, NULL, LOG, T, NULL, LOSS, DLOG));
        TRAIN_CHECK(oclml_linear_backward(ctx, OCLML_ACT_NONE, F, P[4], NULL, DLOG, DF, G[4], G[5],
                                          0));
        TRAIN_CHECK(oclml_max_pool2d_backward(ctx, &pp, S2, DP2, DS2));
        TRAIN_CHECK(oclml_unary_backward(ctx, OCLML_SILU, C2o, DS2, DC2));
        TRAIN_CHECK(oclml_conv2d_backward(ctx, &cp, P1, P[2], DC2, DP1, G[2], G[3], 0));
        TRAIN_CHECK(oclml_max_pool2d_backward(ctx, &pp, S1, DP1, DS1));
        TRAIN_CHECK(oclml_unary_backward(ctx, OCLML_SILU, C1o, DS1, DC1));
        TRAIN_CHECK(oclml_conv2d_backward(ctx, &cp, X, P[0], DC1, NULL, G[0], G[1], 0));
        TRAIN_CHECK(oclml_optim_step(opt));
        curve[s] = train_read1(LOSS);
        printf("step %3d  loss %.6f\n", s, curve[s]);
    }
    int rc = curve[steps - 1] < 0.8f * curve[0] ? 0 : 1;
    if (rc) fprintf(stderr, "the loss did not fall below 80%% of its start\n");
    if (golden) rc |= train_compare_golden(golden, curve, steps, 1e-3) ? 1 : 0;

    oclml_tensor *all[] = {X,   T,   C1o, S1,  P1,  C2o, S2,  P2,   LOG, DLOG,
                           DP2, DS2, DC2, DP1, DS1, DC1, LOSS, F, DF};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) oclml_tensor_destroy(all[i]);
    oclml_optim_destroy(opt);
    oclml_arena_destroy(arena);
    oclml_ctx_destroy(ctx);
    free(img);
    free(teacher);
    free(labels);
    free(curve);
    return rc;
}
