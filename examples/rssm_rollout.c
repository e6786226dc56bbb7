/* Imagines a trajectory with a small RSSM ensemble and prints it with its uncertainty.
 *
 * Makes an ensemble of E members with random weights (or, with a file argument, reads them from
 * a binary file of float32 values in the order w_ih, w_hh, b_ih, b_hh, w_p, b_p, w_y, b_y, each
 * [E x ...] as oclml.h describes), rolls it out T steps in one call, and prints the ensemble mean
 * and standard deviation of the prediction per step, and per-member metrics.
 *   usage: rssm_rollout [weights.bin]   (E 5, D 64, G 8, C 8, F 16, k 4, T 20) */
#include <math.h>
#include <oclml.h>
#include <stdio.h>
#include <stdlib.h>

enum { E = 5, D = 64, G = 8, C = 8, S = G * C, F = 16, K = 4, T = 20, IN = F + S };

static float uniform(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 16777216.0f * 2.0f - 1.0f;
}

int main(int argc, char **argv) {
    const size_t counts[8] = {E * 3 * D * IN, E * 3 * D * D, E * 3 * D,   E * 3 * D,
                              E * S * D,      E * S,         E * (D + S), E};
    const float scales[8] = {0.11f, 0.125f, 0.125f, 0.125f, 0.25f, 0.5f, 0.09f, 0.5f};
    float *host[8];
    unsigned seed = 42;
    FILE *in = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (argc > 1 && !in) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 1;
    }
    for (int i = 0; i < 8; i++) {
        host[i] = malloc(counts[i] * sizeof(float));
        if (in) {
            if (fread(host[i], sizeof(float), counts[i], in) != counts[i]) {
                fprintf(stderr, "short weights file\n");
                return 1;
            }
        } else {
            for (size_t k = 0; k < counts[i]; k++) host[i][k] = scales[i] * uniform(&seed);
        }
    }
    if (in) fclose(in);

    char err[4096];
    oclml_ctx *ctx;
    if (oclml_ctx_create(&ctx, NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const size_t shp[8][3] = {{E, 3 * D, IN}, {E, 3 * D, D}, {E, 3 * D}, {E, 3 * D},
                              {E, S, D},      {E, S},        {E, D + S}, {E}};
    const int nd[8] = {3, 3, 2, 2, 3, 2, 2, 1};
    oclml_tensor *w[8] = {NULL}, *h0 = NULL, *z0 = NULL, *f0 = NULL, *y = NULL, *mean = NULL,
                 *std = NULL, *var = NULL, *smooth = NULL, *ent = NULL;
    oclml_status st = OCLML_SUCCESS;
    for (int i = 0; i < 8 && !st; i++) {
        st = oclml_tensor_create(ctx, nd[i], shp[i], &w[i]);
        if (!st) st = oclml_tensor_write(w[i], host[i], counts[i]);
    }
    float hz[E * D], zz[E * S], fz[E * F];
    for (int i = 0; i < E * D; i++) hz[i] = 0.0f;
    for (int i = 0; i < E * S; i++) zz[i] = 1.0f / C;
    for (int i = 0; i < E * F; i++) fz[i] = 0.5f * uniform(&seed);
    const size_t sh[2] = {E, D}, sz[2] = {E, S}, sf[2] = {E, F}, sy[2] = {E, T}, st_[1] = {T},
                 se[1] = {E};
    if (!st) st = oclml_tensor_create(ctx, 2, sh, &h0);
    if (!st) st = oclml_tensor_write(h0, hz, E * D);
    if (!st) st = oclml_tensor_create(ctx, 2, sz, &z0);
    if (!st) st = oclml_tensor_write(z0, zz, E * S);
    if (!st) st = oclml_tensor_create(ctx, 2, sf, &f0);
    if (!st) st = oclml_tensor_write(f0, fz, E * F);
    if (!st) st = oclml_tensor_create(ctx, 2, sy, &y);
    if (!st) st = oclml_tensor_create(ctx, 1, st_, &mean);
    if (!st) st = oclml_tensor_create(ctx, 1, st_, &std);
    if (!st) st = oclml_tensor_create(ctx, 1, se, &var);
    if (!st) st = oclml_tensor_create(ctx, 1, se, &smooth);
    if (!st) st = oclml_tensor_create(ctx, 1, se, &ent);

    oclml_rssm_params cfg;
    oclml_rssm_params_init(&cfg);
    cfg.steps = T, cfg.groups = G, cfg.classes = C, cfg.feedback = K;
    oclml_rssm_weights weights = {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]};
    oclml_rssm_state start = {h0, z0, f0, NULL};
    oclml_rssm_outputs out = {.y = y,
                              .y_mean = mean,
                              .y_std = std,
                              .variance = var,
                              .smoothness = smooth,
                              .total_entropy = ent};
    if (!st) st = oclml_rssm_rollout(ctx, &cfg, &weights, &start, &out);
    float m[T], s[T], v[E], sm[E], te[E];
    if (!st) st = oclml_tensor_read(mean, m, T);
    if (!st) st = oclml_tensor_read(std, s, T);
    if (!st) st = oclml_tensor_read(var, v, E);
    if (!st) st = oclml_tensor_read(smooth, sm, E);
    if (!st) st = oclml_tensor_read(ent, te, E);
    oclml_tensor *all[17] = {h0, z0, f0, y, mean, std, var, smooth, ent};
    for (int i = 0; i < 8; i++) all[9 + i] = w[i];
    for (int i = 0; i < 17; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
    if (st) {
        fprintf(stderr, "%s: %s\n", oclml_status_name(st), oclml_ctx_last_error(ctx));
        oclml_ctx_destroy(ctx);
        return 1;
    }
    oclml_device_info info;
    oclml_ctx_device_info(ctx, &info);
    printf("RSSM ensemble of %d members, D %d, %dx%d latent, %d steps on %s\n\n", E, D, G, C, T,
           info.device_name);
    printf(" step   mean y   +- std   band\n");
    for (int t = 0; t < T; t++) {
        int lo = (int)roundf(20 + 10 * (m[t] - s[t])), hi = (int)roundf(20 + 10 * (m[t] + s[t]));
        printf(" %4d %8.4f %8.4f   ", t + 1, m[t], s[t]);
        for (int c = 0; c < 40; c++)
            putchar(c == (int)roundf(20 + 10 * m[t]) ? '*' : (c >= lo && c <= hi) ? '-' : ' ');
        putchar('\n');
    }
    printf("\n member  variance  smoothness  total entropy\n");
    for (int e = 0; e < E; e++) printf(" %6d %9.5f %11.5f %14.3f\n", e, v[e], sm[e], te[e]);
    oclml_ctx_destroy(ctx); /* after its tensors: it drains the queue */
    for (int i = 0; i < 8; i++) free(host[i]);
    return 0;
}
