/* Mixed precision on the peer's shapes (torch_peers.py bf16): bf16 and fp16 GEMM, A [M x K]
 * times B [K x N] into C of the operands' dtype, as `A @ B` runs in PyTorch: squares 2048 to
 * 8192 and GPT-2's products (MLP up, MLP down, the LM head). Shapes carry the dtype as the peer
 * prints them ("4096x4096x4096 bf16"). The error is the max over sampled entries of |c - ref| /
 * sum |a_ip b_pj|, ref the double product of the operands as their dtype holds them. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lp_args {
    oclml_ctx *ctx;
    oclml_tensor *a, *b, *c;
} lp_args;

static oclml_status lp_run(void *user) {
    lp_args *g = user;
    return oclml_gemm(g->ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, g->a, g->b, 0.0f, g->c);
}

static double sampled_error(const float *a, const float *b, const float *c, size_t m, size_t n,
                            size_t k) {
    double worst = 0;
    unsigned long long s = 12345;
    for (int t = 0; t < 64; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const size_t i = (size_t)(s >> 33) % m, j = (size_t)(s >> 13) % n;
        double want = 0, scale = 0;
        for (size_t p = 0; p < k; p++) {
            const double x = (double)a[i * k + p] * b[p * n + j];
            want += x;
            scale += fabs(x);
        }
        worst = fmax(worst, fabs(c[i * n + j] - want) / (scale > 0 ? scale : 1));
    }
    return worst;
}

static int bench_gemm_shape(bench_env *env, oclml_dtype dt, size_t m, size_t n, size_t k) {
    const size_t na = m * k, nb = k * n, nc = m * n;
    const size_t ash[2] = {m, k}, bsh[2] = {k, n}, csh[2] = {m, n};
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return bench_fail(env, OCLML_ERR_OUT_OF_MEMORY, "gemm setup");
    }
    bench_random(a, na, 2);
    bench_random(b, nb, 3);
    oclml_tensor *pa = NULL, *pb = NULL, *pc = NULL;
    oclml_status st = oclml_tensor_create_dtype(env->ctx, dt, 2, ash, &pa);
    if (!st) st = oclml_tensor_create_dtype(env->ctx, dt, 2, bsh, &pb);
    if (!st) st = oclml_tensor_create_dtype(env->ctx, dt, 2, csh, &pc);
    if (!st) st = oclml_tensor_write(pa, a, na);
    if (!st) st = oclml_tensor_write(pb, b, nb);
    /* The operands as the dtype holds them, for the reference. */
    if (!st) st = oclml_tensor_read(pa, a, na);
    if (!st) st = oclml_tensor_read(pb, b, nb);
    int rc = st ? bench_fail(env, st, "gemm setup") : 0;
    char shape[64], plan[200] = "";
    snprintf(shape, sizeof shape, "%zux%zux%zu %s", m, n, k, oclml_dtype_name(dt));
    oclml_gemm_plan_dtype(env->ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, m, n, k, 1, dt, dt, plan,
                          sizeof plan);
    bench_result r = {.op = "gemm", .shape = shape, .variant = plan};
    lp_args g = {env->ctx, pa, pb, pc};
    if (!rc) rc = bench_time(env, lp_run, &g, &r.t);
    if (!rc && (st = oclml_tensor_read(pc, c, nc))) rc = bench_fail(env, st, "download");
    if (!rc) {
        r.flops = 2.0 * (double)m * n * k;
        r.max_rel_err = sampled_error(a, b, c, m, n, k);
        bench_report(env, &r);
    }
    if (pa) oclml_tensor_destroy(pa);
    if (pb) oclml_tensor_destroy(pb);
    if (pc) oclml_tensor_destroy(pc);
    free(a);
    free(b);
    free(c);
    return rc;
}

int bench_lp(bench_env *env) {
    const char *defaults = env->quick ? "256x256x256,512x384x128"
                                      : "2048x2048x2048,4096x4096x4096,8192x8192x8192,"
                                        "8192x3072x768,8192x768x3072,8192x50304x768";
    long v[3 * 16];
    const int n = bench_shapes(env->sizes ? env->sizes : defaults, 3, v, 16);
    int rc = 0;
    for (int d = 0; d < 2 && !rc; d++)
        for (int i = 0; i < n && !rc; i++)
            rc = bench_gemm_shape(env, d ? OCLML_FLOAT16 : OCLML_BFLOAT16, (size_t)v[3 * i],
                                  (size_t)v[3 * i + 1], (size_t)v[3 * i + 2]);
    return rc;
}
