/* oclml-bench-dp: data-parallel training steps under mpirun (liboclml-mpi), with the names of
 * the peer (.gpu/torch_ddp.py: PyTorch DDP over NCCL): the step of the CNN (B256 64x64x3, fp32)
 * and of GPT-2 small (B8 T1024, bf16 or fp32), each rank on its own device with the same batch
 * as one device alone (weak scaling). For each model it prints the step time alone (every rank
 * at once, no exchange) and at N ranks, the weak-scaling efficiency, and where the last step's
 * exchange went, bucket by bucket: when the device reached the bucket, when its copy to host
 * memory, its exchange and its copy back ended, in ms from the end of the backward (negative:
 * hidden behind it). Then the library's allreduce path alone at 1 MB to 1 GB: bus bandwidth as
 * NCCL counts it (2 (N - 1) / N bytes per rank over the time).
 *   usage: mpirun -np N oclml-bench-dp [--quick] [--only cnn,gpt2,gpt2fp32,allreduce]
 *          [--steps S] [--wire bf16] [--messages] [--host-sums] [--bucket-mb M] [--json FILE]
 * (--messages: the exchange by messages even where the ranks share a node; --host-sums: the
 * owners' sums on the host's cores rather than their devices.)
 * JSON lines as BENCH.md, op "train_step_dp" (gpus, median_ms, weak_scaling, exposed_ms,
 * exchange_ms, buckets) and op "allreduce" (busbw_gbps), written by rank 0. */
#include <math.h>
#include <oclml_mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpt_model.h"
#include "train_models.h"

typedef struct options {
    int quick, steps, shared, host_sums;
    const char *only;
    oclml_dtype wire;
    size_t bucket_bytes;
    FILE *json;
} options;

static int rank, ranks;
static char device[256];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A model behind two calls, for the timing loop. */
typedef struct model {
    const char *shape;
    oclml_status (*step)(void *);
    void *m;
    oclml_arena *arena;
    size_t *order; /* the backward's order, or NULL */
} model;

static oclml_status cnn_step(void *m) { return train_cnn_step(m); }
static oclml_status gpt_step_fn(void *m) { return gpt_step(m); }

/* The exchange behind the models' hooks (train_parallel.h). */
static oclml_status hook_ready(void *dp, size_t first, size_t count) {
    return dp ? oclml_dp_grads_ready(dp, first, count) : OCLML_SUCCESS;
}
static oclml_status hook_sync(void *dp) { return dp ? oclml_dp_sync(dp) : OCLML_SUCCESS; }
static oclml_status hook_gather(void *dp, const oclml_tensor *x, oclml_tensor *all, size_t *parts) {
    int n = 0;
    if (dp) oclml_dp_rank(dp, NULL, &n);
    *parts = (size_t)n;
    return dp && x ? oclml_dp_allgather(dp, x, all) : OCLML_SUCCESS;
}

/* Median wall time of a step (each one finished on the device, the ranks started together). */
static int time_steps(oclml_ctx *ctx, const model *md, int steps, double *median_ms) {
    double *t = malloc((size_t)steps * sizeof *t);
    oclml_status st = OCLML_SUCCESS;
    for (int s = -3; s < steps && !st; s++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_s();
        st = md->step(md->m);
        if (!st) st = oclml_ctx_finish(ctx);
        if (s >= 0) t[s] = 1e3 * (now_s() - t0);
    }
    if (st) {
        fprintf(stderr, "rank %d: step: %s: %s\n", rank, oclml_status_name(st),
                oclml_ctx_last_error(ctx));
        free(t);
        return 1;
    }
    qsort(t, (size_t)steps, sizeof *t, cmp_double);
    /* The slowest rank's median sets the pace. */
    double mine = t[steps / 2];
    MPI_Allreduce(&mine, median_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    free(t);
    return 0;
}

/* The exchange's path as the allreduce rows name it. */
static const char *path_name(const options *o) {
    return !o->shared ? "messages" : o->host_sums ? "shared host-sums" : "shared";
}

static void report_buckets(oclml_dp *dp) {
    oclml_dp_step_info info;
    oclml_dp_step_info_get(dp, &info);
    printf(
        "    last step: %zu buckets, %.1f MB a rank sent (%s, sums on the %s), exchanges %.2f ms "
        "in all, %.2f ms after the backward's end\n",
        info.buckets, info.wire_bytes / 1e6,
        info.shared_memory == 2 ? "shared memory, no host copy"
        : info.shared_memory    ? "shared memory"
                                : "messages",
        info.sum_on_device ? "device" : "host", info.exchange_ms, info.exposed_ms);
    printf("    oclml_dp_sync waited %.2f ms (host clock)\n", info.sync_ms);
    printf("    bucket  tensors       MB   ready  copied  reduced  returned (ms from the "
           "backward's end)\n");
    for (size_t b = 0; b < info.buckets; b++) {
        oclml_dp_bucket_info bi;
        oclml_dp_bucket_info_get(dp, b, &bi);
        printf("    %6zu  %7zu  %7.2f  %6.2f  %6.2f  %7.2f  %8.2f\n", b, bi.tensors,
               bi.elements * 4 / 1e6, bi.ready_ms, bi.copied_ms, bi.reduced_ms, bi.returned_ms);
    }
}

/* Alone (no exchange), then at N ranks with the exchange: both times and the efficiency. */
static int run_model(oclml_ctx *ctx, const options *o, model *md, train_parallel *par) {
    double alone, together;
    if (time_steps(ctx, md, o->steps, &alone)) return 1;
    oclml_dp_config c;
    oclml_dp_config_init(&c);
    c.order = md->order;
    c.wire_dtype = o->wire;
    c.shared_memory = o->shared;
    c.sum_on_device = !o->host_sums;
    if (o->bucket_bytes) c.bucket_bytes = o->bucket_bytes;
    oclml_dp *dp;
    oclml_status st = oclml_dp_create(ctx, md->arena, &c, &dp);
    if (!st) st = oclml_dp_broadcast(dp);
    if (st) {
        fprintf(stderr, "rank %d: dp setup: %s\n", rank, oclml_status_name(st));
        return 1;
    }
    par->user = dp;
    int rc = time_steps(ctx, md, o->steps, &together);
    par->user = NULL;
    oclml_dp_step_info info;
    oclml_dp_step_info_get(dp, &info);
    if (!rc && !rank) {
        double eff = alone / together;
        printf("%-60s  1 GPU %8.2f ms   %d GPUs %8.2f ms   weak scaling %.3f\n", md->shape, alone,
               ranks, together, eff);
        report_buckets(dp);
        if (o->json) {
            fprintf(o->json,
                    "{\"op\":\"train_step_dp\",\"shape\":\"%s\",\"impl\":\"oclml-mpi\","
                    "\"device\":\"%s\",\"gpus\":1,\"median_ms\":%.3f}\n",
                    md->shape, device, alone);
            fprintf(o->json,
                    "{\"op\":\"train_step_dp\",\"shape\":\"%s\",\"impl\":\"oclml-mpi\","
                    "\"device\":\"%s\",\"gpus\":%d,\"median_ms\":%.3f,\"weak_scaling\":%.3f,"
                    "\"exposed_ms\":%.3f,\"exchange_ms\":%.3f,\"buckets\":%zu,\"wire\":\"%s\"}\n",
                    md->shape, device, ranks, together, eff, info.exposed_ms, info.exchange_ms,
                    info.buckets, o->wire == OCLML_BFLOAT16 ? "bf16" : "fp32");
        }
    }
    oclml_dp_destroy(dp);
    return rc;
}

static int bench_cnn(oclml_ctx *ctx, const options *o) {
    static const size_t ch[4] = {32, 64, 128, 256}, quick_ch[2] = {8, 16};
    train_parallel par = {0, 1, hook_ready, hook_sync, NULL, NULL};
    train_cnn *m;
    oclml_status st = o->quick
                          ? train_cnn_create(ctx, 16, 16, 2, quick_ch, 10, OCLML_FLOAT32, &par, &m)
                          : train_cnn_create(ctx, 256, 64, 4, ch, 10, OCLML_FLOAT32, &par, &m);
    if (st) return fprintf(stderr, "CNN setup: %s\n", oclml_status_name(st)), 1;
    /* The hooks read par.user at each call: the model keeps a copy, so point it there. */
    model md = {o->quick ? "cnn B16 16x16x3 k5 8-16 maxpool silu xent adamw fp32"
                         : "cnn B256 64x64x3 k5 32-64-128-256 maxpool silu xent adamw fp32",
                cnn_step, m, train_cnn_arena(m), NULL};
    train_parallel *live = train_cnn_parallel(m);
    int rc = run_model(ctx, o, &md, live);
    train_cnn_destroy(m);
    return rc;
}

static int bench_gpt(oclml_ctx *ctx, const options *o, oclml_dtype dtype) {
    gpt_config c = o->quick ? gpt_config_tiny() : gpt_config_small();
    c.dtype = dtype;
    gpt_model *m;
    oclml_status st = gpt_create(ctx, &c, &m);
    if (st) return fprintf(stderr, "GPT setup: %s\n", oclml_status_name(st)), 1;
    uint32_t *tok = malloc(c.batch * (c.seq + 1) * sizeof *tok);
    uint64_t s = 7 + (uint64_t)rank; /* each rank its own data */
    for (size_t i = 0; i < c.batch * (c.seq + 1); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (uint32_t)((s >> 33) % c.vocab);
    }
    st = gpt_set_batch(m, tok);
    free(tok);
    train_parallel par = {0, 1, hook_ready, hook_sync, NULL, hook_gather};
    gpt_set_parallel(m, &par);
    char shape[96];
    snprintf(shape, sizeof shape, "%s B%zu T%zu %s", o->quick ? "gpt-tiny" : "gpt2-small", c.batch,
             c.seq, dtype == OCLML_FLOAT32 ? "fp32" : "bf16");
    size_t *order = malloc(gpt_tensors(m) * sizeof *order);
    gpt_grad_order(m, order);
    model md = {shape, gpt_step_fn, m, gpt_arena(m), order};
    int rc = st ? 1 : run_model(ctx, o, &md, gpt_parallel(m));
    free(order);
    gpt_destroy(m);
    return rc;
}

/* The exchange alone over one tensor of `bytes`: its time and bus bandwidth. */
static int bench_allreduce(oclml_ctx *ctx, const options *o) {
    static const double mb[] = {1, 25, 100, 1000};
    for (size_t k = 0; k < sizeof mb / sizeof mb[0]; k++) {
        if (o->quick && mb[k] > 25) break;
        size_t n = (size_t)(mb[k] * 1e6 / 4);
        oclml_arena_shape shape = {1, {n}};
        oclml_arena *a;
        oclml_dp *dp;
        oclml_dp_config c;
        oclml_dp_config_init(&c);
        c.wire_dtype = o->wire;
        c.bucket_bytes = o->bucket_bytes ? o->bucket_bytes : n * 4;
        c.shared_memory = o->shared;
        c.sum_on_device = !o->host_sums;
        if (oclml_arena_create(ctx, 1, &shape, &a) || oclml_dp_create(ctx, a, &c, &dp)) return 1;
        double t[12];
        int reps = 12;
        for (int r = -2; r < reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now_s();
            if (oclml_dp_sync(dp) || oclml_ctx_finish(ctx)) return 1;
            if (r >= 0) t[r] = now_s() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        double med = t[reps / 2], worst;
        MPI_Allreduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double bus = 2.0 * (ranks - 1) / ranks * (double)n * 4 / worst / 1e9;
        if (!rank) {
            printf("allreduce %7.0f MB fp32 (wire %s, %s)  %8.3f ms  bus %6.1f GB/s\n", mb[k],
                   o->wire == OCLML_BFLOAT16 ? "bf16" : "fp32", path_name(o), 1e3 * worst, bus);
            if (o->json)
                fprintf(o->json,
                        "{\"op\":\"allreduce\",\"shape\":\"%.0f MB fp32 wire %s %s\","
                        "\"impl\":\"oclml-mpi\",\"device\":\"%s\",\"gpus\":%d,"
                        "\"median_ms\":%.4f,\"busbw_gbps\":%.2f}\n",
                        mb[k], o->wire == OCLML_BFLOAT16 ? "bf16" : "fp32", path_name(o), device,
                        ranks, 1e3 * worst, bus);
        }
        oclml_dp_destroy(dp);
        oclml_arena_destroy(a);
    }
    return 0;
}

static bool wanted(const options *o, const char *name) {
    if (!o->only) return strcmp(name, "gpt2fp32") != 0; /* fp32 GPT on request */
    size_t n = strlen(name);
    for (const char *p = o->only; (p = strstr(p, name)); p += n)
        if ((p == o->only || p[-1] == ',') && (p[n] == ',' || !p[n])) return true;
    return false;
}

int main(int argc, char **argv) {
    int level;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    options o = {.steps = 10, .shared = 1, .wire = OCLML_FLOAT32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick"))
            o.quick = 1;
        else if (v && !strcmp(a, "--only"))
            o.only = v, i++;
        else if (v && !strcmp(a, "--steps"))
            o.steps = atoi(v), i++;
        else if (v && !strcmp(a, "--wire"))
            o.wire = strcmp(v, "bf16") ? OCLML_FLOAT32 : OCLML_BFLOAT16, i++;
        else if (!strcmp(a, "--messages"))
            o.shared = 0;
        else if (!strcmp(a, "--host-sums"))
            o.host_sums = 1;
        else if (v && !strcmp(a, "--bucket-mb"))
            o.bucket_bytes = (size_t)(atof(v) * 1e6), i++;
        else if (v && !strcmp(a, "--json")) {
            if (!rank && !(o.json = fopen(v, "a"))) return 2;
            i++;
        } else {
            if (!rank)
                fprintf(stderr,
                        "usage: mpirun -np N %s [--quick] [--only cnn,gpt2,gpt2fp32,allreduce] "
                        "[--steps S] [--wire bf16] [--messages] [--host-sums] [--bucket-mb M] "
                        "[--json FILE]\n",
                        argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if (o.steps < 1) o.steps = 1;
    char err[4096];
    oclml_ctx *ctx;
    if (oclml_dp_ctx_create(MPI_COMM_WORLD, NULL, &ctx, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    oclml_device_info info;
    oclml_ctx_device_info(ctx, &info);
    snprintf(device, sizeof device, "%s", info.device_name);
    if (!rank) printf("%d ranks, rank 0 on %s\n", ranks, device);
    int rc = 0;
    if (wanted(&o, "cnn")) rc |= bench_cnn(ctx, &o);
    if (wanted(&o, "gpt2")) rc |= bench_gpt(ctx, &o, OCLML_BFLOAT16);
    if (wanted(&o, "gpt2fp32")) rc |= bench_gpt(ctx, &o, OCLML_FLOAT32);
    if (wanted(&o, "allreduce")) rc |= bench_allreduce(ctx, &o);
    if (o.json) fclose(o.json);
    oclml_ctx_destroy(ctx);
    MPI_Finalize();
    return rc;
}
