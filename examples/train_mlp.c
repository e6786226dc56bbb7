/* Trains a small MLP regression on the device: every op of forward, loss, backward and the AdamW
 * step runs through liboclml, and the loss curve is printed (and compared with PyTorch's when a
 * golden file is given).
 *
 * Model: in -> hidden -> hidden -> out, GELU between layers (nn.Linear layout), MSE loss against
 * tanh(x T) of a fixed random teacher T, full batch, AdamW (lr 1e-3, PyTorch's defaults
 * otherwise). Weights and data come from examples/train_common.h's generator, which
 * examples/train_golden.py reproduces, so PyTorch trains from exactly the same start.
 *   usage: train_mlp [--steps N] [--batch B] [--in I] [--hidden H] [--out O] [--golden FILE]
 * Exit status: 0 when the loss fell to under half its start (and matched the golden file within
 * 1e-3 relative when one is given), 1 otherwise, 3 when a call failed. */
#include "train_common.h"

typedef struct layer {
    oclml_tensor *w, *b, *dw, *db; /* arena views */
    size_t in, out;
} layer;

int main(int argc, char **argv) {
    int steps = 50;
    size_t B = 256, I = 64, H = 256, O = 64;
    const char *golden = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: %s [--steps N] [--batch B] [--in I] [--hidden H] [--out O] "
                            "[--golden FILE]\n",
                    argv[0]);
            return 2;
        }
        if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--batch")) B = (size_t)atol(v);
        else if (!strcmp(a, "--in")) I = (size_t)atol(v);
        else if (!strcmp(a, "--hidden")) H = (size_t)atol(v);
        else if (!strcmp(a, "--out")) O = (size_t)atol(v);
        else if (!strcmp(a, "--golden")) golden = v;
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (steps < 1 || !B || !I || !H || !O) return 2;

    char err[4096];
    oclml_ctx *ctx;
    if (oclml_ctx_create(&ctx, NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* Parameters in one arena: w1, b1, w2, b2, w3, b3. */
    const size_t dims[4] = {I, H, H, O};
    oclml_arena_shape shapes[6];
    for (int l = 0; l < 3; l++) {
        shapes[2 * l] = (oclml_arena_shape){2, {dims[l + 1], dims[l]}};
        shapes[2 * l + 1] = (oclml_arena_shape){1, {dims[l + 1]}};
    }
    oclml_arena *arena;
    TRAIN_CHECK(oclml_arena_create(ctx, 6, shapes, &arena));
    train_rng rng = {1234};
    layer L[3];
    for (int l = 0; l < 3; l++) {
        L[l].in = dims[l];
        L[l].out = dims[l + 1];
        TRAIN_CHECK(oclml_arena_param(arena, 2 * l, &L[l].w));
        TRAIN_CHECK(oclml_arena_param(arena, 2 * l + 1, &L[l].b));
        TRAIN_CHECK(oclml_arena_grad(arena, 2 * l, &L[l].dw));
        TRAIN_CHECK(oclml_arena_grad(arena, 2 * l + 1, &L[l].db));
        float bound = 1.0f / sqrtf((float)L[l].in);
        float *w = malloc(L[l].in * L[l].out * sizeof *w), *b = malloc(L[l].out * sizeof *b);
        train_fill(&rng, w, L[l].in * L[l].out, bound);
        train_fill(&rng, b, L[l].out, bound);
        TRAIN_CHECK(oclml_tensor_write(L[l].w, w, L[l].in * L[l].out));
        TRAIN_CHECK(oclml_tensor_write(L[l].b, b, L[l].out));
        free(w);
        free(b);
    }
    /* Data: x uniform in [-1, 1), target tanh(x T), T uniform in [-0.25, 0.25). */
    float *x = malloc(B * I * sizeof *x), *teacher = malloc(I * O * sizeof *teacher),
          *t = malloc(B * O * sizeof *t);
    train_fill(&rng, x, B * I, 1.0f);
    train_fill(&rng, teacher, I * O, 0.25f);
    for (size_t i = 0; i < B; i++)
        for (size_t j = 0; j < O; j++) {
            float sum = 0.0f;
            for (size_t p = 0; p < I; p++) sum += x[i * I + p] * teacher[p * O + j];
            t[i * O + j] = tanhf(sum);
        }
    size_t xs[2] = {B, I}, hs[2] = {B, H}, os[2] = {B, O}, one[1] = {1};
    oclml_tensor *X = train_tensor(ctx, 2, xs, x), *Tg = train_tensor(ctx, 2, os, t);
    oclml_tensor *Z1 = train_tensor(ctx, 2, hs, NULL), *A1 = train_tensor(ctx, 2, hs, NULL),
                 *Z2 = train_tensor(ctx, 2, hs, NULL), *A2 = train_tensor(ctx, 2, hs, NULL),
                 *Y = train_tensor(ctx, 2, os, NULL), *DY = train_tensor(ctx, 2, os, NULL),
                 *DA2 = train_tensor(ctx, 2, hs, NULL), *DA1 = train_tensor(ctx, 2, hs, NULL),
                 *LOSS = train_tensor(ctx, 1, one, NULL);
    oclml_optim_config cfg;
    TRAIN_CHECK(oclml_optim_config_init(&cfg, OCLML_OPTIM_ADAMW));
    oclml_optim *opt;
    TRAIN_CHECK(oclml_optim_create(ctx, arena, &cfg, &opt));

    float *curve = malloc((size_t)steps * sizeof *curve);
    for (int s = 0; s < steps; s++) {
        /* forward */
        TRAIN_CHECK(oclml_linear(ctx, OCLML_ACT_GELU_ERF, X, L[0].w, L[0].b, A1, Z1));
        TRAIN_CHECK(oclml_linear(ctx, OCLML_ACT_GELU_ERF, A1, L[1].w, L[1].b, A2, Z2));
        TRAIN_CHECK(oclml_linear(ctx, OCLML_ACT_NONE, A2, L[2].w, L[2].b, Y, NULL));
        /* loss and its gradient in one call */
        TRAIN_CHECK(oclml_mse_loss(ctx, NULL, Y, Tg, NULL, LOSS, DY));
        /* backward */
        TRAIN_CHECK(oclml_linear_backward(ctx, OCLML_ACT_NONE, A2, L[2].w, NULL, DY, DA2, L[2].dw,
                                          L[2].db, 0));
        TRAIN_CHECK(oclml_linear_backward(ctx, OCLML_ACT_GELU_ERF, A1, L[1].w, Z2, DA2, DA1,
                                          L[1].dw, L[1].db, 0));
        TRAIN_CHECK(oclml_linear_backward(ctx, OCLML_ACT_GELU_ERF, X, L[0].w, Z1, DA1, NULL,
                                          L[0].dw, L[0].db, 0));
        TRAIN_CHECK(oclml_optim_step(opt));
        curve[s] = train_read1(LOSS);
        printf("step %3d  loss %.6f\n", s, curve[s]);
    }
    int rc = curve[steps - 1] < 0.5f * curve[0] ? 0 : 1;
    if (rc) fprintf(stderr, "the loss did not fall to half its start\n");
    if (golden) rc |= train_compare_golden(golden, curve, steps, 1e-3) ? 1 : 0;

    oclml_tensor *all[] = {X, Tg, Z1, A1, Z2, A2, Y, DY, DA2, DA1, LOSS};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) oclml_tensor_destroy(all[i]);
    oclml_optim_destroy(opt);
    oclml_arena_destroy(arena);
    oclml_ctx_destroy(ctx);
    free(x);
    free(teacher);
    free(t);
    free(curve);
    return rc;
}
