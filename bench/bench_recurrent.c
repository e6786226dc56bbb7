/* GRU step and RSSM rollout on torch_peers.py's canonical shapes: latency (device time), checked
 * against the double reference. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

static float *filled(size_t n, float scale, unsigned seed) {
    float *v = malloc(n * sizeof *v);
    if (v) {
        bench_random(v, n, seed);
        for (size_t i = 0; i < n; i++) v[i] *= scale;
    }
    return v;
}

static oclml_tensor *upload(bench_env *env, int nd, const size_t *shape, const float *data,
                            oclml_status *st) {
    oclml_tensor *t = NULL;
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    if (!*st) *st = oclml_tensor_create(env->ctx, nd, shape, &t);
    if (!*st && data) *st = oclml_tensor_write(t, data, n);
    return t;
}

typedef struct gru_case {
    oclml_ctx *ctx;
    oclml_tensor *x, *h, *wi, *wh, *bi, *bh, *hn;
} gru_case;

static oclml_status run_gru(void *u) {
    gru_case *g = u;
    return oclml_gru_step(g->ctx, OCLML_GRU_TORCH, g->x, g->h, g->wi, g->wh, g->bi, g->bh, g->hn);
}

int bench_gru(bench_env *env) {
    /* the canonical shapes of torch_peers.py, or --sizes "BxIxD,..." */
    long shapes[16][3] = {
        {1, 64, 256}, {64, 64, 256}, {4096, 64, 256}, {1, 64, 1024}, {256, 256, 1024}};
    int count = env->sizes ? bench_shapes(env->sizes, 3, &shapes[0][0], 16) : env->quick ? 2 : 5;
    for (int i = 0; i < count; i++) {
        size_t B = (size_t)shapes[i][0], I = (size_t)shapes[i][1], D = (size_t)shapes[i][2];
        size_t xs[2] = {B, I}, hs[2] = {B, D}, wis[2] = {3 * D, I}, whs[2] = {3 * D, D}, bs = 3 * D;
        float sc = 1.0f / sqrtf((float)D);
        float *x = filled(B * I, 1, 11), *h = filled(B * D, 1, 12), *wi = filled(3 * D * I, sc, 13);
        float *wh = filled(3 * D * D, sc, 14), *bi = filled(3 * D, sc, 15),
              *bh = filled(3 * D, sc, 16);
        float *out = malloc(B * D * sizeof *out);
        oclml_status st =
            (x && h && wi && wh && bi && bh && out) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
        gru_case g = {.ctx = env->ctx};
        g.x = upload(env, 2, xs, x, &st);
        g.h = upload(env, 2, hs, h, &st);
        g.wi = upload(env, 2, wis, wi, &st);
        g.wh = upload(env, 2, whs, wh, &st);
        g.bi = upload(env, 1, &bs, bi, &st);
        g.bh = upload(env, 1, &bs, bh, &st);
        g.hn = upload(env, 2, hs, NULL, &st);
        bench_result r = {.op = "gru_step", .max_rel_err = -1};
        char sh[48], variant[48];
        snprintf(sh, sizeof sh, "B%zu,I%zu,D%zu", B, I, D);
        snprintf(variant, sizeof variant, "%s",
                 B >= 128 ? "tiled, gates fused, 1 launch" : "fused, 1 launch");
        r.shape = sh;
        r.variant = variant;
        r.flops = 6.0 * B * D * (I + D);
        int rc = st ? bench_fail(env, st, "gru setup") : bench_time(env, run_gru, &g, &r.t);
        if (!rc && !(st = oclml_tensor_read(g.hn, out, B * D))) {
            size_t check = B < 4 ? B : 4;
            double *ref = malloc(check * D * sizeof *ref), num = 0, den = 0;
            ref_gru_step(0, check, I, D, x, h, wi, wh, bi, bh, ref);
            for (size_t k = 0; k < check * D; k++) {
                num += (out[k] - ref[k]) * (out[k] - ref[k]);
                den += ref[k] * ref[k];
            }
            r.max_rel_err = sqrt(num / den);
            free(ref);
            bench_report(env, &r);
        }
        oclml_tensor *all[] = {g.x, g.h, g.wi, g.wh, g.bi, g.bh, g.hn};
        for (int k = 0; k < 7; k++)
            if (all[k]) oclml_tensor_destroy(all[k]);
        void *mem[] = {x, h, wi, wh, bi, bh, out};
        for (int k = 0; k < 7; k++) free(mem[k]);
        if (rc || st) return rc ? rc : bench_fail(env, st, "gru");
    }
    return 0;
}

typedef struct rssm_case {
    oclml_ctx *ctx;
    oclml_rssm_params cfg;
    oclml_rssm_weights w;
    oclml_rssm_state s;
    oclml_rssm_outputs o;
} rssm_case;

static oclml_status run_rssm(void *u) {
    rssm_case *c = u;
    return oclml_rssm_rollout(c->ctx, &c->cfg, &c->w, &c->s, &c->o);
}

int bench_rssm(bench_env *env) {
    static const size_t shapes[][7] = {{5, 50, 256, 16, 16, 64, 8}, {5, 50, 1024, 32, 32, 64, 8}};
    int count = env->quick ? 1 : 2;
    for (int i = 0; i < count; i++) {
        size_t E = shapes[i][0], T = env->quick ? 10 : shapes[i][1], D = shapes[i][2],
               G = shapes[i][3];
        size_t C = shapes[i][4], F = shapes[i][5], K = shapes[i][6], S = G * C, IN = F + S;
        float si = 1.0f / sqrtf((float)IN), sd = 1.0f / sqrtf((float)D);
        size_t n[8] = {E * 3 * D * IN, E * 3 * D * D, E * 3 * D,   E * 3 * D,
                       E * S * D,      E * S,         E * (D + S), E};
        float sc[8] = {si, sd, sd, sd, 2 * sd, 0.5f, 1.0f / sqrtf((float)(D + S)), 0.5f};
        float *w[8], *h0 = filled(E * D, 1, 30), *z0 = malloc(E * S * sizeof *z0),
                     *f0 = filled(E * F, 1, 31);
        float *y = malloc(E * T * sizeof *y);
        oclml_status st = (h0 && z0 && f0 && y) ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
        for (int k = 0; k < 8; k++) {
            w[k] = filled(n[k], sc[k], 20 + k);
            if (!w[k]) st = OCLML_ERR_OUT_OF_MEMORY;
        }
        for (size_t k = 0; z0 && k < E * S; k++) z0[k] = 1.0f / (float)C;
        size_t s_wih[3] = {E, 3 * D, IN}, s_whh[3] = {E, 3 * D, D}, s_b[2] = {E, 3 * D},
               s_wp[3] = {E, S, D};
        size_t s_bp[2] = {E, S}, s_wy[2] = {E, D + S}, s_h[2] = {E, D}, s_z[2] = {E, S},
               s_f[2] = {E, F}, s_y[2] = {E, T};
        rssm_case c = {.ctx = env->ctx};
        oclml_rssm_params_init(&c.cfg);
        c.cfg.steps = T;
        c.cfg.groups = G;
        c.cfg.classes = C;
        c.cfg.feedback = K;
        oclml_tensor *t[13];
        t[0] = upload(env, 3, s_wih, w[0], &st);
        t[1] = upload(env, 3, s_whh, w[1], &st);
        t[2] = upload(env, 2, s_b, w[2], &st);
        t[3] = upload(env, 2, s_b, w[3], &st);
        t[4] = upload(env, 3, s_wp, w[4], &st);
        t[5] = upload(env, 2, s_bp, w[5], &st);
        t[6] = upload(env, 2, s_wy, w[6], &st);
        t[7] = upload(env, 1, &E, w[7], &st);
        t[8] = upload(env, 2, s_h, h0, &st);
        t[9] = upload(env, 2, s_z, z0, &st);
        t[10] = upload(env, 2, s_f, f0, &st);
        t[11] = upload(env, 2, s_y, NULL, &st);
        t[12] = upload(env, 1, &T, NULL, &st);
        c.w = (oclml_rssm_weights){t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]};
        c.s = (oclml_rssm_state){t[8], t[9], t[10], NULL};
        c.o = (oclml_rssm_outputs){.y = t[11], .y_std = t[12]};
        bench_result r = {
            .op = "rssm_rollout", .variant = "one call, T steps on device", .max_rel_err = -1};
        char sh[64];
        snprintf(sh, sizeof sh, "E%zu,T%zu,D%zu,G%zu,C%zu,F%zu,k%zu", E, T, D, G, C, F, K);
        r.shape = sh;
        int rc = st ? bench_fail(env, st, "rssm setup") : bench_time(env, run_rssm, &c, &r.t);
        if (!rc && !(st = oclml_tensor_read(t[11], y, E * T))) {
            ref_rssm_args a = {0,  0,  1,    T,    D,    G,    C,    F,    K,    c.cfg.unimix,
                               0,  0,  w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
                               h0, z0, f0,   0};
            double *ref = malloc(T * sizeof *ref), num = 0, den = 0;
            ref_rssm_rollout(&a, ref, NULL, NULL, NULL, NULL, NULL); /* member 0 */
            for (size_t k = 0; k < T; k++) {
                num += (y[k] - ref[k]) * (y[k] - ref[k]);
                den += ref[k] * ref[k];
            }
            r.max_rel_err = sqrt(num / den);
            free(ref);
            bench_report(env, &r);
        }
        for (int k = 0; k < 13; k++)
            if (t[k]) oclml_tensor_destroy(t[k]);
        for (int k = 0; k < 8; k++) free(w[k]);
        free(h0);
        free(z0);
        free(f0);
        free(y);
        if (rc || st) return rc ? rc : bench_fail(env, st, "rssm");
    }
    return 0;
}
