/* oclml-bench: vendor-neutral benchmarks of liboclml's ops (BENCH.md). Each subcommand times one
 * op family on its canonical shapes and reports against the device's limits measured in the same
 * run. */
#include "bench.h"
#include "tree.h"

#include <stdlib.h>
#include <string.h>

typedef struct bench_cmd {
    const char *name;
    int (*run)(bench_env *env);
    const char *what;
} bench_cmd;

/* One line per op family. */
static const bench_cmd commands[] = {
    {"copy", bench_copy, "copy bandwidth (the memory limit)"},
    {"callcost", bench_callcost, "host time of one op call (small softmax enqueues)"},
    {"gemm", bench_gemm, "SGEMM: own kernels and CLBlast, square, transformer, skinny, batched"},
    {"linear", bench_linear,
     "linear layer y = gelu(x W^T + b): forward, forward+backward (dx, dw, db), peer shapes"},
    {"loss", bench_loss,
     "cross-entropy forward and forward+backward (peer shapes), KL of categorical logits, MSE"},
    {"conv", bench_conv,
     "conv2d forward and forward+backward, max-pool: encoder and ResNet shapes"},
    {"layout", bench_layout,
     "column sums, conv bias gradient, transpose, NCHW <-> NHWC, conv bias add (GB/s); "
     "embedding and its backward at GPT-2's 8192 tokens x 50257 x 768"},
    {"train", bench_train,
     "training steps: MLP (GELU, MSE, AdamW) and CNN (conv, pool, cross-entropy)"},
    {"softmax", bench_softmax, "softmax, log-softmax and softmax backward, canonical row shapes"},
    {"norm", bench_norm,
     "layernorm and RMSnorm forward and backward, canonical row shapes; the fused residual + norm"},
    {"elementwise", bench_elementwise,
     "add, bias add, gelu, relu, backward, sum and max on 64M elements; dropout, its "
     "backward and dropout_add on 16M and 8192x768"},
    {"gru", bench_gru, "GRU step latency on the canonical (B, I, D)"},
    {"rssm", bench_rssm, "RSSM ensemble rollout, E5 T50 at D256 and D1024"},
    {"optim", bench_optim, "Adam and AdamW steps on 16M and 64M flat parameters and 200 tensors"},
    {"attention", bench_attention,
     "attention forward and forward+backward (causal and not, GQA), decode: peer shapes"},
    {"bf16", bench_lp,
     "mixed precision: bf16/fp16 GEMM on the tensor cores (sizes MxNxK), linear, attention, "
     "softmax, layernorm, cross-entropy"},
    {"bf16rows", bench_lp_rows,
     "the bf16 suite's row ops alone: softmax, layernorm, cross-entropy on the peer's shapes"},
    {"gptbf16", bench_gpt_bf16, "the train suite's mixed-precision GPT-2 small step alone"},
    {"bf16attention", bench_lp_attention,
     "the bf16 suite's attention alone: forward and forward+backward on the peer's shapes"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(void) {
    printf(
        "usage: oclml-bench [options] [SUBCOMMAND ...]   (no subcommand: all)\n"
        "options:\n"
        "  --device SEL   device selector (gpu, cpu, P:D, name substring; default $OCLML_DEVICE)\n"
        "  --json FILE    also write one JSON object per result line (BENCH.md)\n"
        "  --reps N       timed repetitions (default 20), --warm N warm-up runs (default 3)\n"
        "  --sizes LIST   comma-separated sizes for the subcommand instead of its defaults\n"
        "                 (copy, gemm, elementwise, optim: N; softmax, norm: ROWSxCOLS; gru: "
        "BxIxD;\n"
        "                 linear: MxINxOUT; loss: ROWSxCLASSES, cross-entropy and KL;\n"
        "                 conv: NxCxHxWxKxkxsxp, batch, channels in, height, width, channels\n"
        "                 out, kernel, stride, padding;\n"
        "                 attention: BxHxHKVxLxD, batch, heads, key heads, length, head dim)\n"
        "  --quick        small default sizes (CPU devices, smoke runs)\n"
        "subcommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        printf("  %-12s %s\n", commands[i].name, commands[i].what);
}

int main(int argc, char **argv) {
    bench_env env = {.reps = 20, .warm = 3};
    oclml_ctx_config opts;
    oclml_ctx_config_init(&opts);
    opts.kernel_path = oclml_tree_kernel_path();
    opts.profiling = 1;
    const char *json = NULL;
    int first_cmd = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--device") && has)
            opts.device = argv[++i];
        else if (!strcmp(a, "--json") && has)
            json = argv[++i];
        else if (!strcmp(a, "--reps") && has)
            env.reps = atoi(argv[++i]);
        else if (!strcmp(a, "--warm") && has)
            env.warm = atoi(argv[++i]);
        else if (!strcmp(a, "--sizes") && has)
            env.sizes = argv[++i];
        else if (!strcmp(a, "--quick"))
            env.quick = 1;
        else if (!strcmp(a, "--help") || a[0] == '-') {
            usage();
            return strcmp(a, "--help") ? 2 : 0;
        } else {
            first_cmd = i;
            break;
        }
    }
    if (env.reps < 1) env.reps = 1;
    if (env.warm < 0) env.warm = 0;
    for (int i = first_cmd; i < argc; i++) {
        size_t j = 0;
        while (j < N_COMMANDS && strcmp(argv[i], commands[j].name)) j++;
        if (j == N_COMMANDS) {
            fprintf(stderr, "oclml-bench: unknown subcommand '%s'\n", argv[i]);
            usage();
            return 2;
        }
    }
    char err[4096];
    oclml_status st = oclml_ctx_create(&env.ctx, &opts, err, sizeof err);
    if (st) {
        fprintf(stderr, "oclml-bench: no device: %s\n%s\n", oclml_status_name(st), err);
        return 1;
    }
    env.opts = opts;
    oclml_ctx_device_info(env.ctx, &env.dev);
    if (json && !(env.json = fopen(json, "w"))) {
        fprintf(stderr, "oclml-bench: cannot write %s\n", json);
        oclml_ctx_destroy(env.ctx);
        return 1;
    }
    printf("device: %s [%s], %u compute units\n", env.dev.device_name, env.dev.platform_name,
           env.dev.compute_units);
    /* The call cost alone needs no device limits (their probes take seconds on a CPU). */
    int only_callcost = first_cmd < argc;
    for (int i = first_cmd; i < argc; i++) only_callcost &= !strcmp(argv[i], "callcost");
    double copy = only_callcost ? 1 : bench_copy_gbps(&env),
           fma = only_callcost ? 1 : bench_fma_gflops(&env);
    if (copy <= 0 || fma <= 0) {
        fprintf(stderr,
                "oclml-bench: the device limits could not be measured (is OCLML_KERNEL_PATH set "
                "when running from the build tree?)\n");
        oclml_ctx_destroy(env.ctx);
        return 1;
    }
    if (!only_callcost)
        printf("limits measured now: copy %.1f GB/s, fp32 FMA %.1f GFLOP/s\n\n", copy, fma);
    bench_table_header();
    int rc = 0;
    for (size_t j = 0; j < N_COMMANDS; j++) {
        /* No subcommand: all of them, the parts of bf16 and train aside (they run them). */
        int wanted = first_cmd == argc && commands[j].run != bench_lp_rows &&
                     commands[j].run != bench_lp_attention && commands[j].run != bench_gpt_bf16;
        for (int i = first_cmd; i < argc; i++) wanted |= !strcmp(argv[i], commands[j].name);
        if (wanted) rc |= commands[j].run(&env);
    }
    if (env.json) fclose(env.json);
    if (oclml_ctx_destroy(env.ctx)) { /* a benchmark left a tensor behind */
        fprintf(stderr, "oclml-bench: %s\n", oclml_ctx_last_error(env.ctx));
        rc = 1;
    }
    return rc;
}
