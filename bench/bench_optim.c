/* Optimizer steps (torch_peers.py's adam group): Adam and AdamW on flat parameters of 16M and 64M
 * and AdamW over the peer's 200 tensors of mixed sizes, GB/s at 28 bytes a parameter (p, g, m,
 * v read, p, m, v written); AdamW with clipping by the global norm and the inf/NaN check as an
 * extra line (32 bytes a parameter: the check pass reads g once more). The first step of each
 * case is checked against the double reference on a sample of elements. */
#include "bench.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The peer's sizes: torch.randint(1 << 10, 1 << 18, (200,), generator=manual_seed(0)). Torch's
 * CPU generator is MT19937 seeded by init_genrand(0), and randint over a range below 2^32 takes
 * one 32-bit draw per value: low + draw % range. */
static void torch_sizes(size_t *out, int n) {
    uint32_t mt[624];
    mt[0] = 0;
    for (int i = 1; i < 624; i++)
        mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + (uint32_t)i;
    int idx = 624;
    for (int k = 0; k < n; k++) {
        if (idx >= 624) {
            for (int i = 0; i < 624; i++) {
                uint32_t y = (mt[i] & 0x80000000u) | (mt[(i + 1) % 624] & 0x7fffffffu);
                mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
            }
            idx = 0;
        }
        uint32_t y = mt[idx++];
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c5680u;
        y ^= (y << 15) & 0xefc60000u;
        y ^= y >> 18;
        out[k] = (1u << 10) + y % ((1u << 18) - (1u << 10));
    }
}

typedef struct optim_case {
    oclml_optim *opt;
} optim_case;

static oclml_status run_step(void *user) { return oclml_optim_step(((optim_case *)user)->opt); }

/* Runs one case: creates the arena of `count` tensors, fills p and g with uniform values, checks
 * the first step on a sample, then times further steps. */
static int one_case(bench_env *env, const char *op, const char *shape, const size_t *sizes,
                    int count, oclml_optim_kind kind, float wd, int clip, double bytes_per) {
    oclml_arena_shape *shapes = calloc((size_t)count, sizeof *shapes);
    oclml_arena *arena = NULL;
    oclml_optim *opt = NULL;
    float *p = NULL, *g = NULL, *out = NULL;
    size_t numel = 0, padded = 0;
    int rc = 0;
    oclml_status st = shapes ? OCLML_SUCCESS : OCLML_ERR_OUT_OF_MEMORY;
    for (int i = 0; shapes && i < count; i++) shapes[i] = (oclml_arena_shape){1, {sizes[i]}};
    if (!st) st = oclml_arena_create(env->ctx, (size_t)count, shapes, &arena);
    if (!st) st = oclml_arena_info(arena, NULL, &numel, &padded);
    if (!st) {
        p = malloc(padded * sizeof *p);
        g = malloc(padded * sizeof *g);
        out = malloc(padded * sizeof *out);
        if (!p || !g || !out) st = OCLML_ERR_OUT_OF_MEMORY;
    }
    if (!st) {
        bench_random(p, padded, 11);
        bench_random(g, padded, 12);
        /* the padding stays zero */
        for (int i = 0; i < count; i++) {
            size_t off, end = i + 1 < count ? 0 : padded;
            oclml_arena_offset(arena, (size_t)i, &off);
            if (i + 1 < count) oclml_arena_offset(arena, (size_t)i + 1, &end);
            for (size_t j = off + sizes[i]; j < end; j++) p[j] = g[j] = 0.0f;
        }
        oclml_tensor *pf, *gf;
        st = oclml_arena_flat(arena, 0, &pf);
        if (!st) st = oclml_tensor_write(pf, p, padded);
        if (!st) st = oclml_arena_flat(arena, 1, &gf);
        if (!st) st = oclml_tensor_write(gf, g, padded);
    }
    oclml_optim_config cfg;
    oclml_optim_config_init(&cfg, kind);
    cfg.lr = 1e-3f;
    cfg.weight_decay = wd;
    if (clip) {
        cfg.max_grad_norm = 1.0f;
        cfg.skip_nonfinite = 1;
    }
    if (!st) st = oclml_optim_create(env->ctx, arena, &cfg, &opt);
    if (!st) st = oclml_optim_step(opt);
    oclml_tensor *pf = NULL;
    if (!st) st = oclml_arena_flat(arena, 0, &pf);
    if (!st) st = oclml_tensor_read(pf, out, padded);
    if (st) rc = bench_fail(env, st, "optim setup");
    double worst = 0;
    if (!rc) {
        /* Step 1 from zero state: m = (1 - b1) g', v = (1 - b2) g'^2, update lr m / bc1 /
         * (sqrt(v / bc2) + eps) = lr g' / (|g'| + eps'); g' = g c (+ wd p for Adam). */
        double c = 1.0;
        if (clip) {
            double s = 0;
            for (size_t j = 0; j < padded; j++) s += (double)g[j] * g[j];
            c = fmin(1.0, 1.0 / (sqrt(s) + 1e-6));
        }
        for (size_t j = 0; j < padded; j += 1009) {
            double pj = p[j], gj = g[j] * c;
            if (kind == OCLML_OPTIM_ADAMW)
                pj *= 1.0 - 1e-3 * wd;
            else
                gj += wd * pj;
            double b1 = 0.9f, b2 = 0.999f, m = (1 - b1) * gj, v = (1 - b2) * gj * gj;
            double want = pj - 1e-3 / (1 - b1) * m / (sqrt(v / (1 - b2)) + 1e-8f);
            worst = fmax(worst, fabs(out[j] - want) / fmax(fabs((double)p[j] - want), 1e-6));
        }
    }
    if (!rc) {
        optim_case oc = {opt};
        bench_result r = {.op = op,
                          .shape = shape,
                          .variant = clip ? "norm pass + fused step" : "one launch, float4",
                          .max_rel_err = worst};
        rc = bench_time(env, run_step, &oc, &r.t);
        r.bytes = bytes_per * (double)numel;
        if (!rc) bench_report(env, &r);
    }
    oclml_optim_destroy(opt);
    oclml_arena_destroy(arena);
    free(shapes);
    free(p);
    free(g);
    free(out);
    return rc;
}

int bench_optim(bench_env *env) {
    long sizes[4];
    int ns = bench_sizes(env, env->quick ? "1048576,4194304" : "16777216,67108864", sizes, 4);
    int rc = 0;
    char shape[64];
    for (int s = 0; s < ns && !rc; s++) {
        size_t n = (size_t)sizes[s];
        snprintf(shape, sizeof shape, "%zu", n);
        rc = one_case(env, "adam", shape, &n, 1, OCLML_OPTIM_ADAM, 0.0f, 0, 28);
        if (!rc) rc = one_case(env, "adamw", shape, &n, 1, OCLML_OPTIM_ADAMW, 0.01f, 0, 28);
        if (!rc) rc = one_case(env, "adamw_clip", shape, &n, 1, OCLML_OPTIM_ADAMW, 0.01f, 1, 32);
    }
    /* The peer's 200 tensors (sizes 1024 to 262143, about 27M parameters); --quick divides each
     * by 16. */
    size_t ts[200], total = 0;
    torch_sizes(ts, 200);
    for (int i = 0; i < 200; i++) {
        if (env->quick) ts[i] = ts[i] / 16 + 1;
        total += ts[i];
    }
    snprintf(shape, sizeof shape, "200 tensors, %zu", total);
    if (!rc) rc = one_case(env, "adamw", shape, ts, 200, OCLML_OPTIM_ADAMW, 0.01f, 0, 28);
    return rc;
}
