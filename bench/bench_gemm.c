/* GEMM on the peer's shapes (torch_peers.py gemm): square 1024 to 8192, transformer products,
 * skinny M = 1, 16, 64 against 4096 x 4096, and 64 batched 256^3 products; each on the own
 * kernels and on CLBlast alone (two contexts, picked through the tuning option), with the max
 * error against the double-precision reference on sampled entries, relative to each entry's
 * rounding scale sum |a_ip b_pj| (a full reference at 8192 would take minutes). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct gemm_args {
    oclml_ctx *ctx;
    oclml_tensor *a, *b, *c;
    int batched;
} gemm_args;

static oclml_status gemm_run(void *user) {
    gemm_args *g = user;
    if (g->batched)
        return oclml_gemm_batched(g->ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, g->a, g->b, 0.0f,
                                  g->c);
    return oclml_gemm(g->ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, g->a, g->b, 0.0f, g->c);
}

/* The two paths every shape runs on. */
static const struct {
    const char *tuning, *label;
} PATHS[] = {{"gemm.own=1", "own"}, {"gemm.own=0", "CLBlast alone"}};

static int bench_shape(bench_env *env, oclml_ctx *const ctxs[2], size_t batch, size_t m, size_t n,
                       size_t k) {
    size_t na = batch * m * k, nb = batch * k * n, nc = batch * m * n;
    size_t ash[3] = {batch, m, k}, bsh[3] = {batch, k, n}, csh[3] = {batch, m, n};
    int nd = batch > 1 ? 3 : 2, off = batch > 1 ? 0 : 1;
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
    int rc = (a && b && c) ? 0 : bench_fail(env, OCLML_ERR_OUT_OF_MEMORY, "gemm setup");
    if (!rc) {
        bench_random(a, na, 2);
        bench_random(b, nb, 3);
    }
    char sh[64];
    if (batch > 1)
        snprintf(sh, sizeof sh, "%zux%zux%zux%zu", batch, m, n, k);
    else
        snprintf(sh, sizeof sh, "%zux%zux%zu", m, n, k);
    for (int p = 0; p < 2 && !rc; p++) {
        if (!ctxs[p]) continue;
        oclml_tensor *pa = NULL, *pb = NULL, *pc = NULL;
        oclml_status st = oclml_tensor_create(ctxs[p], nd, ash + off, &pa);
        if (!st) st = oclml_tensor_create(ctxs[p], nd, bsh + off, &pb);
        if (!st) st = oclml_tensor_create(ctxs[p], nd, csh + off, &pc);
        if (!st) st = oclml_tensor_write(pa, a, na);
        if (!st) st = oclml_tensor_write(pb, b, nb);
        if (st) rc = bench_fail(env, st, "gemm setup");
        char variant[200], plan[160] = "";
        oclml_gemm_plan(ctxs[p], OCLML_NO_TRANS, OCLML_NO_TRANS, m, n, k, batch, plan, sizeof plan);
        snprintf(variant, sizeof variant, "%s: %s", PATHS[p].label, plan);
        bench_result r = {
            .op = batch > 1 ? "gemm_batched" : "gemm", .shape = sh, .variant = variant};
        gemm_args g = {ctxs[p], pa, pb, pc, batch > 1};
        oclml_ctx *keep = env->ctx;
        env->ctx = ctxs[p]; /* bench_time times on env->ctx's queue */
        if (!rc) rc = bench_time(env, gemm_run, &g, &r.t);
        env->ctx = keep;
        if (!rc && (st = oclml_tensor_read(pc, c, nc))) rc = bench_fail(env, st, "download");
        if (!rc) {
            r.flops = 2.0 * (double)batch * m * n * k;
            r.max_rel_err = bench_gemm_error(a, b, c, m, n, k);
            bench_report(env, &r);
        }
        if (pa) oclml_tensor_destroy(pa);
        if (pb) oclml_tensor_destroy(pb);
        if (pc) oclml_tensor_destroy(pc);
    }
    free(a);
    free(b);
    free(c);
    return rc;
}

int bench_gemm(bench_env *env) {
    const char *defaults = env->quick ? "256x256x256,512x512x512,16x512x512,4x64x64x64"
                                      : "1024x1024x1024,2048x2048x2048,4096x4096x4096,"
                                        "8192x8192x8192,8192x4096x1024,8192x1024x4096,"
                                        "1x4096x4096,16x4096x4096,64x4096x4096,64x256x256x256";
    const char *list = env->sizes ? env->sizes : defaults;
    oclml_ctx *ctxs[2] = {NULL, NULL};
    int rc = 0;
    for (int p = 0; p < 2 && !rc; p++) {
        /* $OCLML_TUNE adds to both paths' tuning (tile sweeps). */
        char tuning[512];
        const char *extra = getenv("OCLML_TUNE");
        snprintf(tuning, sizeof tuning, "%s%s%s", PATHS[p].tuning, extra ? " " : "",
                 extra ? extra : "");
        oclml_ctx_config o = env->opts;
        o.tuning = tuning;
        char err[2048];
        oclml_status st = oclml_ctx_create(&ctxs[p], &o, err, sizeof err);
        if (st) {
            fprintf(stderr, "oclml-bench: context with %s: %s\n", o.tuning, err);
            rc = 1;
        }
    }
    /* Shapes MxNxK, or BATCHxMxNxK for batched products. */
    for (const char *s = list; *s && !rc;) {
        long v[4];
        int nv = 0;
        char *end;
        while (nv < 4) {
            v[nv++] = strtol(s, &end, 10);
            s = end;
            if (*s != 'x') break;
            s++;
        }
        if ((nv == 3 || nv == 4) && v[0] > 0 && v[1] > 0 && v[2] > 0 && (nv == 3 || v[3] > 0))
            rc = nv == 3 ? bench_shape(env, ctxs, 1, (size_t)v[0], (size_t)v[1], (size_t)v[2])
                         : bench_shape(env, ctxs, (size_t)v[0], (size_t)v[1], (size_t)v[2],
                                       (size_t)v[3]);
        else {
            fprintf(stderr, "oclml-bench gemm: bad shape in '%s' (MxNxK or BxMxNxK)\n", list);
            rc = 2;
        }
        if (*s == ',')
            s++;
        else if (*s) {
            fprintf(stderr, "oclml-bench gemm: bad shape list '%s'\n", list);
            rc = 2;
        }
    }
    for (int p = 0; p < 2; p++)
        if (ctxs[p]) oclml_ctx_destroy(ctxs[p]);
    return rc;
}
