/* The benchmark harness shared by every op's bench (BENCH.md): device-event timing with warm-up,
 * median/min/max, a readable table and JSON lines, and the device limits measured in the same
 * run (copy bandwidth, fp32 FMA rate). */
#ifndef OCLML_BENCH_H
#define OCLML_BENCH_H

#include <oclml.h>
#include <stdio.h>

typedef struct bench_env {
    oclml_ctx *ctx;
    oclml_ctx_config opts; /* what ctx was made with, for suites that compare tunings */
    oclml_device_info dev;
    FILE *json;
    int reps, warm;
    int quick;         /* small default sizes, for CPUs and smoke runs */
    const char *sizes; /* --sizes: the subcommand's own list, comma-separated */
    double copy_gbps;  /* measured on first use */
    double fma_gflops; /* measured on first use */
} bench_env;

typedef struct bench_timing {
    double median_ms, min_ms, max_ms;
} bench_timing;

typedef struct bench_result {
    const char *op, *shape, *variant;
    bench_timing t;
    double bytes;           /* bytes moved by one run (0: not memory-bound) */
    double flops;           /* flops of one run (0: none reported) */
    double max_rel_err;     /* < 0: not checked */
    const char *extra_json; /* NULL, or more fields for the JSON line: "\"k\":v,\"k2\":v2" */
} bench_result;

/* Runs fn warm+reps times, timing each run on the device; 0 on success. */
typedef oclml_status (*bench_fn)(void *user);
int bench_time(bench_env *env, bench_fn fn, void *user, bench_timing *t);

/* Prints the table row and the JSON line; the limit fraction is against the copy rate for
 * memory-bound ops and the FMA rate for flop-bound ones. */
void bench_report(bench_env *env, const bench_result *r);
void bench_table_header(void);

double bench_copy_gbps(bench_env *env);
double bench_fma_gflops(bench_env *env);

/* Parses --sizes (or the given defaults) into up to max numbers; returns the count. */
int bench_sizes(const bench_env *env, const char *defaults, long *out, int max);
/* Shapes of `dims` sizes each, "AxB,AxB" (dims 2) or "AxBxC,..." (dims 3), into out[n * dims + d];
 * returns how many, stopping at the first malformed one. */
int bench_shapes(const char *s, int dims, long *out, int max);

/* A row-major product's error: the max over 64 sampled entries of C = A B ([m x k] times
 * [k x n]) of |c - ref| / sum_p |a_ip b_pj|, ref in double. */
double bench_gemm_error(const float *a, const float *b, const float *c, size_t m, size_t n,
                        size_t k);

/* Fills with uniform values in [-1, 1) from a fixed seed. */
void bench_random(float *x, size_t n, unsigned seed);

/* Prints the library's error and returns 1, for use as `return bench_fail(env, st, "what")`. */
int bench_fail(bench_env *env, oclml_status st, const char *what);
/* Whether the ops run their CPU-shaped kernels on this device (a CPU, tuning key cpu.layout not
 * 0): the variant text says so. */
int bench_cpu_layout(const bench_env *env);

/* Times oclml_copy of n floats; max_err (if not NULL) gets the largest difference found. */
int bench_copy_probe(bench_env *env, size_t n, bench_timing *t, double *max_err);

int bench_copy(bench_env *env);
int bench_callcost(bench_env *env);
int bench_gemm(bench_env *env);
int bench_linear(bench_env *env);
int bench_layout(bench_env *env);
int bench_conv(bench_env *env);
int bench_train(bench_env *env);
int bench_loss(bench_env *env);
int bench_softmax(bench_env *env);
int bench_norm(bench_env *env);
int bench_resnorm(bench_env *env); /* run by the norm suite */
int bench_elementwise(bench_env *env);
int bench_dropout(bench_env *env);   /* run by the elementwise suite */
int bench_embedding(bench_env *env); /* run by the layout suite */
int bench_gru(bench_env *env);
int bench_rssm(bench_env *env);
int bench_optim(bench_env *env);
int bench_attention(bench_env *env);
int bench_lp(bench_env *env);
int bench_lp_rows(bench_env *env);      /* the row ops of bench_lp alone */
int bench_lp_attention(bench_env *env); /* the attention rows of bench_lp alone */
int bench_gpt_bf16(bench_env *env);     /* the mixed-precision GPT-2 step of bench_train alone */
/* Row-op shapes: defaults or --sizes ROWSxCOLS,... */
int bench_row_shapes(const bench_env *env, long shapes[][2], int max);

#endif
