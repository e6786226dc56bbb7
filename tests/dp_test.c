/* liboclml-mpi's tests, run by tests/dp.sh under mpirun with two (or more) ranks on the test
 * device: the averaged gradients against a double-precision reference of every rank's values
 * (each rank regenerates the others' from their seeds), bit-identical on every rank, over odd
 * tensor sizes, several buckets, an order of the backward's own, both wire dtypes, with and
 * without the progress thread, NaN carried through; rank 0's parameters broadcast; a rank that
 * fails mid-step and a rank that comes late (every rank told, no hang, the next step right);
 * configurations the ranks disagree on; argument checks.
 *   usage: dp_test [average|broadcast|fail|timeout|config|args]...  (none: all)
 * Prints one line per case on rank 0; exit status 0 when every case passed on every rank. */
#include <math.h>
#include <oclml_mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, ranks;
static oclml_ctx *ctx;

#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            return 1;                                                      \
        }                                                                  \
    } while (0)
#define OK(expr) EXPECT((expr) == OCLML_SUCCESS, "%s: %s", #expr, oclml_status_name(expr))

/* Odd sizes, a scalar, tensors of several buckets' worth at small bucket sizes, and one large
 * enough for the host arithmetic to split over threads. */
static const oclml_arena_shape shapes[] = {
    {1, {7}}, {2, {33, 5}},   {1, {1}},  {1, {129}},        {2, {16, 17}},
    {1, {3}}, {3, {3, 5, 7}}, {1, {40}}, {2, {1031, 1021}},
};
#define N_TENSORS (sizeof shapes / sizeof shapes[0])

/* splitmix64 values in [-1, 1): rank r's gradient element i of step s is value(r, s, i). */
static float value(int r, int step, size_t i) {
    uint64_t z = ((uint64_t)r << 40) + ((uint64_t)step << 32) + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) / 8388608.0f - 1.0f;
}

/* bf16 rounding (nearest, ties to even) by arithmetic in double, independent of the library's
 * bit manipulation. */
static float round_bf16(float x) {
    if (isnan(x) || isinf(x) || x == 0) return x;
    int e;
    frexp(x, &e);                   /* |x| in [2^(e-1), 2^e) */
    double ulp = ldexp(1.0, e - 8); /* 8 significant bits */
    return (float)(nearbyint(x / ulp) * ulp);
}

static bool is_poisoned(size_t t, size_t i, int step) {
    return step == 1 && ((t == 3 && i == 100) || (t == 8 && i == 777777)); /* rank 1's NaNs */
}

static oclml_arena *make_arena(void) {
    oclml_arena *a = NULL;
    return oclml_arena_create(ctx, N_TENSORS, shapes, &a) ? NULL : a;
}

static size_t numel_of(size_t t) {
    size_t n = 1;
    for (int d = 0; d < shapes[t].ndim; d++) n *= shapes[t].shape[d];
    return n;
}

/* Writes rank r's gradients of a step into the arena (padding left as it is). */
static oclml_status write_grads(oclml_arena *a, int r, int step) {
    for (size_t t = 0; t < N_TENSORS; t++) {
        size_t n = numel_of(t);
        float *v = malloc(n * sizeof *v);
        for (size_t i = 0; i < n; i++)
            v[i] = r == 1 && is_poisoned(t, i, step) ? NAN : value(r, step, t * 10000000 + i);
        oclml_tensor *g;
        oclml_status st = oclml_arena_grad(a, t, &g);
        if (!st) st = oclml_tensor_write(g, v, n);
        free(v);
        if (st) return st;
    }
    return OCLML_SUCCESS;
}

/* The expected average of element i of tensor t: the ranks' values (bf16-rounded on a bf16
 * wire) summed in double, which for two ranks is the fp32 sum rounded once. */
static float expected(size_t t, size_t i, int step, bool bf16) {
    double sum = 0;
    for (int r = 0; r < ranks; r++) {
        float v = r == 1 && is_poisoned(t, i, step) ? NAN : value(r, step, t * 10000000 + i);
        sum += bf16 ? round_bf16(v) : v;
    }
    float avg = (float)sum * (1.0f / (float)ranks);
    return bf16 ? round_bf16(avg) : avg;
}

/* Every rank holds the same bytes: a hash of the flat buffer, its minimum and maximum. */
static int same_everywhere(oclml_arena *a, int grads) {
    size_t n;
    oclml_tensor *flat;
    if (oclml_arena_info(a, NULL, NULL, &n) || oclml_arena_flat(a, grads, &flat)) return 0;
    float *v = malloc(n * sizeof *v);
    unsigned long long h = 14695981039346656037ull, lo, hi;
    if (oclml_tensor_read(flat, v, n)) return 0;
    for (size_t i = 0; i < n * sizeof *v; i++) h = (h ^ ((unsigned char *)v)[i]) * 1099511628211ull;
    free(v);
    MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* Compares every gradient with the reference, the padding with zero. */
static int check_average(oclml_arena *a, int step, bool bf16) {
    size_t padded, off[N_TENSORS + 1];
    oclml_tensor *flat;
    OK(oclml_arena_info(a, NULL, NULL, &padded));
    OK(oclml_arena_flat(a, 1, &flat));
    float *g = malloc(padded * sizeof *g);
    OK(oclml_tensor_read(flat, g, padded));
    for (size_t t = 0; t < N_TENSORS; t++) OK(oclml_arena_offset(a, t, &off[t]));
    off[N_TENSORS] = padded;
    int bad = 0;
    for (size_t t = 0; t < N_TENSORS && !bad; t++) {
        for (size_t i = 0; i < off[t + 1] - off[t] && !bad; i++) {
            float want = i < numel_of(t) ? expected(t, i, step, bf16) : 0.0f, got = g[off[t] + i];
            bool match = isnan(want) ? isnan(got) : got == want;
            if (!match) {
                fprintf(stderr, "rank %d: step %d tensor %zu [%zu]: %.9g, want %.9g\n", rank, step,
                        t, i, got, want);
                bad = 1;
            }
        }
    }
    free(g);
    return bad;
}

/* Two steps of marking in the configured order, in pieces, then sync. */
static int run_average(int wire_bf16, int threaded, int shared, int sum_on_device,
                       size_t bucket_bytes, bool custom_order) {
    oclml_arena *a = make_arena();
    EXPECT(a, "arena");
    size_t order[N_TENSORS] = {2, 7, 8, 0, 5, 1, 6, 3, 4};
    oclml_dp_config c;
    OK(oclml_dp_config_init(&c));
    c.bucket_bytes = bucket_bytes;
    c.wire_dtype = wire_bf16 ? OCLML_BFLOAT16 : OCLML_FLOAT32;
    c.progress_thread = threaded;
    c.shared_memory = shared;
    c.sum_on_device = sum_on_device;
    c.order = custom_order ? order : NULL;
    oclml_dp *dp;
    OK(oclml_dp_create(ctx, a, &c, &dp));
    for (int step = 0; step < 3; step++) {
        OK(write_grads(a, rank, step));
        /* Mark in the order's pieces, one tensor twice. */
        for (size_t k = 0; k < N_TENSORS; k++) {
            size_t t = custom_order ? order[k] : N_TENSORS - 1 - k;
            OK(oclml_dp_grads_ready(dp, t, 1));
            if (k == 3) OK(oclml_dp_grads_ready(dp, t, 1));
        }
        OK(oclml_dp_sync(dp));
        EXPECT(!check_average(a, step, wire_bf16), "wrong average (step %d)", step);
        EXPECT(same_everywhere(a, 1), "ranks differ (step %d)", step);
    }
    oclml_dp_step_info info;
    OK(oclml_dp_step_info_get(dp, &info));
    EXPECT(info.steps == 3 && !info.failed_steps, "steps %zu failed %zu", info.steps,
           info.failed_steps);
    /* The device sums where the segments hold fp32 words and it was asked for. */
    EXPECT(info.sum_on_device == (sum_on_device && info.shared_memory == 2), "sum_on_device %d",
           info.sum_on_device);
    EXPECT(info.buckets >= 1 && (bucket_bytes > 4096 || info.buckets > 2), "buckets %zu",
           info.buckets);
    oclml_dp_bucket_info b;
    OK(oclml_dp_bucket_info_get(dp, 0, &b));
    EXPECT(b.elements > 0 && b.wire_bytes > 0 && b.tensors > 0, "bucket 0 info");
    EXPECT(oclml_dp_bucket_info_get(dp, info.buckets, &b) == OCLML_ERR_INVALID_ARGUMENT,
           "bucket past the end");
    OK(oclml_dp_destroy(dp));
    OK(oclml_arena_destroy(a));
    return 0;
}

/* Every way of exchanging: fp32 and bf16 words, with and without the progress thread, by
 * messages and through shared memory (fp32's sums on the device and on the host); small buckets
 * in an order of the backward's own, one bucket, and runs that merge in the arena's reverse
 * order. */
static int test_average(void) {
    int bad = 0;
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int threaded = 0; threaded < 2; threaded++)
            for (int shared = 0; shared < 2; shared++) {
                bad |= run_average(bf16, threaded, shared, 1, 256, true);
                bad |= run_average(bf16, threaded, shared, 1, 1 << 20, false);
            }
    bad |= run_average(0, 1, 1, 0, 256, true);
    bad |= run_average(0, 0, 1, 0, 1 << 20, false);
    bad |= run_average(0, 1, 1, 1, 700, false);
    return bad;
}

static int test_broadcast(void) {
    oclml_arena *a = make_arena();
    EXPECT(a, "arena");
    OK(oclml_arena_copy_create(a, OCLML_BFLOAT16));
    size_t padded;
    OK(oclml_arena_info(a, NULL, NULL, &padded));
    oclml_tensor *flat;
    OK(oclml_arena_flat(a, 0, &flat));
    float *p = malloc(padded * sizeof *p);
    for (size_t i = 0; i < padded; i++) p[i] = value(rank, 7, i);
    OK(oclml_tensor_write(flat, p, padded));
    oclml_dp *dp;
    OK(oclml_dp_create(ctx, a, NULL, &dp));
    OK(oclml_dp_broadcast(dp));
    OK(oclml_tensor_read(flat, p, padded));
    for (size_t i = 0; i < padded; i++)
        EXPECT(p[i] == value(0, 7, i), "parameter %zu is %g, rank 0's %g", i, p[i], value(0, 7, i));
    /* The 16-bit copy follows. */
    size_t off;
    oclml_tensor *copy;
    OK(oclml_arena_offset(a, 3, &off));
    OK(oclml_arena_copy(a, 3, &copy));
    float c[129];
    OK(oclml_tensor_read(copy, c, 129));
    for (size_t i = 0; i < 129; i++)
        EXPECT(c[i] == round_bf16(value(0, 7, off + i)), "copy %zu is %g", i, c[i]);
    free(p);
    OK(oclml_dp_destroy(dp));
    OK(oclml_arena_destroy(a));
    return 0;
}

/* Rank 1 fails its step after marking half; every rank hears of it; the next step is right. */
static int test_fail(void) {
    oclml_arena *a = make_arena();
    EXPECT(a, "arena");
    oclml_dp_config c;
    OK(oclml_dp_config_init(&c));
    c.bucket_bytes = 256;
    oclml_dp *dp;
    OK(oclml_dp_create(ctx, a, &c, &dp));
    OK(write_grads(a, rank, 0));
    OK(oclml_dp_grads_ready(dp, 4, 4));
    if (rank == 1)
        OK(oclml_dp_fail(dp));
    else
        EXPECT(oclml_dp_sync(dp) == OCLML_ERR_PEER, "sync did not report the failed rank");
    OK(write_grads(a, rank, 2));
    OK(oclml_dp_grads_ready(dp, 0, N_TENSORS));
    OK(oclml_dp_sync(dp));
    EXPECT(!check_average(a, 2, false), "wrong average after a failed step");
    oclml_dp_step_info info;
    OK(oclml_dp_step_info_get(dp, &info));
    EXPECT(info.steps == 2 && info.failed_steps == 1, "steps %zu failed %zu", info.steps,
           info.failed_steps);
    OK(oclml_dp_destroy(dp));
    OK(oclml_arena_destroy(a));
    return 0;
}

/* Rank 1 comes 2 s late to a step with a 0.5 s timeout: rank 0 times out (and again while it
 * waits on), rank 1 hears that the step failed, and both go on to a right next step. */
static int test_timeout(void) {
    oclml_arena *a = make_arena();
    EXPECT(a, "arena");
    oclml_dp_config c;
    OK(oclml_dp_config_init(&c));
    c.bucket_bytes = 256;
    c.timeout_s = 0.5;
    oclml_dp *dp;
    OK(oclml_dp_create(ctx, a, &c, &dp));
    OK(write_grads(a, rank, 0));
    if (rank == 1) sleep(2);
    oclml_status st = oclml_dp_sync(dp);
    if (rank == 1)
        EXPECT(st == OCLML_ERR_PEER, "the late rank got %s", oclml_status_name(st));
    else
        EXPECT(st == OCLML_ERR_TIMEOUT, "the waiting rank got %s", oclml_status_name(st));
    OK(write_grads(a, rank, 2));
    int tries = 0;
    while ((st = oclml_dp_sync(dp)) == OCLML_ERR_TIMEOUT && rank == 0 && ++tries < 20) {}
    EXPECT(st == OCLML_SUCCESS, "the step after: %s", oclml_status_name(st));
    EXPECT(!check_average(a, 2, false), "wrong average after a timed-out step");
    OK(oclml_dp_destroy(dp));
    OK(oclml_arena_destroy(a));
    return 0;
}

/* Configurations the ranks disagree on fail on every rank, and nothing is left waiting. */
static int test_config(void) {
    oclml_arena *a = make_arena();
    EXPECT(a, "arena");
    oclml_dp_config c;
    OK(oclml_dp_config_init(&c));
    c.bucket_bytes = rank ? 512 : 256;
    oclml_dp *dp = NULL;
    EXPECT(oclml_dp_create(ctx, a, &c, &dp) == OCLML_ERR_INVALID_CONFIG && !dp, "bucket sizes");
    size_t repeated[N_TENSORS] = {0, 1, 2, 3, 4, 5, 6, 7, 7};
    OK(oclml_dp_config_init(&c));
    if (rank == 1) c.order = repeated; /* not a permutation, on one rank only */
    EXPECT(oclml_dp_create(ctx, a, &c, &dp) == OCLML_ERR_INVALID_CONFIG && !dp, "order");
    OK(oclml_dp_config_init(&c));
    c.wire_dtype = OCLML_FLOAT16; /* not a wire dtype */
    EXPECT(oclml_dp_create(ctx, a, &c, &dp) == OCLML_ERR_INVALID_CONFIG, "wire dtype");
    OK(oclml_arena_destroy(a));
    return 0;
}

/* Every rank's tensor on every rank, in rank order, through the shared segments and by
 * messages; a call inside a step and a wrong shape refused everywhere, nothing moved. */
static int run_allgather(int shared) {
    enum { N = 1001 };
    oclml_arena *a = make_arena();
    EXPECT(a, "arena");
    oclml_dp_config c;
    OK(oclml_dp_config_init(&c));
    c.shared_memory = shared;
    oclml_dp *dp;
    OK(oclml_dp_create(ctx, a, &c, &dp));
    size_t n = N, all_n = (size_t)ranks * N, wrong_n = all_n + 1;
    oclml_tensor *x, *all, *wrong;
    OK(oclml_tensor_create(ctx, 1, &n, &x));
    OK(oclml_tensor_create(ctx, 1, &all_n, &all));
    OK(oclml_tensor_create(ctx, 1, &wrong_n, &wrong));
    float *h = malloc(wrong_n * sizeof *h);
    for (size_t i = 0; i < N; i++) h[i] = value(rank, 9, i);
    h[7] = NAN;
    OK(oclml_tensor_write(x, h, N));
    for (size_t i = 0; i < wrong_n; i++) h[i] = 1e30f; /* poison */
    OK(oclml_tensor_write(all, h, all_n));
    OK(oclml_dp_allgather(dp, x, all));
    OK(oclml_tensor_read(all, h, all_n));
    for (int r = 0; r < ranks; r++)
        for (size_t i = 0; i < N; i++) {
            float want = i == 7 ? NAN : value(r, 9, i), got = h[(size_t)r * N + i];
            EXPECT(isnan(want) ? isnan(got) : got == want, "rank %d's [%zu] is %g, want %g", r, i,
                   got, want);
        }
    EXPECT(oclml_dp_allgather(dp, x, wrong) == OCLML_ERR_INVALID_SHAPE, "wrong shape");
    EXPECT(oclml_dp_allgather(dp, x, NULL) == OCLML_ERR_NULL_POINTER, "NULL all");
    /* Another size on another rank: refused everywhere before anything moves. */
    size_t m = N + (size_t)rank, all_m = (size_t)ranks * m;
    oclml_tensor *xm, *allm;
    OK(oclml_tensor_create(ctx, 1, &m, &xm));
    OK(oclml_tensor_create(ctx, 1, &all_m, &allm));
    EXPECT(oclml_dp_allgather(dp, xm, allm) == OCLML_ERR_PEER, "sizes that differ by rank");
    OK(oclml_tensor_destroy(xm));
    OK(oclml_tensor_destroy(allm));
    /* Inside a step: refused (the segments are the step's). */
    OK(oclml_dp_grads_ready(dp, 0, 1));
    EXPECT(oclml_dp_allgather(dp, x, all) == OCLML_ERR_INVALID_ARGUMENT, "inside a step");
    OK(oclml_dp_sync(dp));
    free(h);
    OK(oclml_tensor_destroy(x));
    OK(oclml_tensor_destroy(all));
    OK(oclml_tensor_destroy(wrong));
    OK(oclml_dp_destroy(dp));
    OK(oclml_arena_destroy(a));
    return 0;
}

static int test_allgather(void) { return run_allgather(1) | run_allgather(0); }

static int test_args(void) {
    int r0, n0;
    oclml_arena *a = make_arena();
    EXPECT(a, "arena");
    oclml_dp *dp;
    EXPECT(oclml_dp_config_init(NULL) == OCLML_ERR_NULL_POINTER, "config NULL");
    EXPECT(oclml_dp_create(NULL, a, NULL, &dp) == OCLML_ERR_NULL_POINTER, "ctx NULL");
    EXPECT(oclml_dp_create(ctx, a, NULL, NULL) == OCLML_ERR_NULL_POINTER, "out NULL");
    OK(oclml_dp_create(ctx, a, NULL, &dp));
    EXPECT(oclml_dp_grads_ready(dp, N_TENSORS, 1) == OCLML_ERR_INVALID_ARGUMENT, "past the end");
    EXPECT(oclml_dp_grads_ready(dp, 1, SIZE_MAX) == OCLML_ERR_INVALID_ARGUMENT, "overflow");
    EXPECT(oclml_dp_grads_ready(NULL, 0, 1) == OCLML_ERR_NULL_POINTER, "dp NULL");
    EXPECT(oclml_dp_sync(NULL) == OCLML_ERR_NULL_POINTER, "sync NULL");
    EXPECT(oclml_dp_fail(NULL) == OCLML_ERR_NULL_POINTER, "fail NULL");
    EXPECT(oclml_dp_broadcast(NULL) == OCLML_ERR_NULL_POINTER, "broadcast NULL");
    EXPECT(oclml_dp_allgather(NULL, NULL, NULL) == OCLML_ERR_NULL_POINTER, "allgather NULL");
    EXPECT(oclml_dp_rank(NULL, &r0, &n0) == OCLML_ERR_NULL_POINTER, "rank NULL");
    oclml_dp_step_info si;
    oclml_dp_bucket_info bi;
    EXPECT(oclml_dp_step_info_get(dp, NULL) == OCLML_ERR_NULL_POINTER, "step info NULL");
    EXPECT(oclml_dp_step_info_get(NULL, &si) == OCLML_ERR_NULL_POINTER, "step info dp NULL");
    EXPECT(oclml_dp_bucket_info_get(dp, 0, NULL) == OCLML_ERR_NULL_POINTER, "bucket info NULL");
    EXPECT(oclml_dp_bucket_info_get(NULL, 0, &bi) == OCLML_ERR_NULL_POINTER, "bucket dp NULL");
    EXPECT(oclml_dp_ctx_create(MPI_COMM_WORLD, NULL, NULL, NULL, 0) == OCLML_ERR_NULL_POINTER,
           "ctx_create out NULL");
    int r, n;
    OK(oclml_dp_rank(dp, &r, &n));
    EXPECT(r == rank && n == ranks, "rank %d of %d", r, n);
    unsigned count;
    char pd[16];
    EXPECT(oclml_device_match("no such device anywhere", 0, &count, pd, sizeof pd) ==
               OCLML_ERR_DEVICE_NOT_FOUND,
           "device match");
    EXPECT(oclml_device_match(NULL, 0, NULL, pd, sizeof pd) == OCLML_ERR_NULL_POINTER,
           "count NULL");
    EXPECT(oclml_device_match(NULL, 0, &count, pd, 0) == OCLML_ERR_INVALID_ARGUMENT, "len 0");
    OK(oclml_device_match(NULL, (unsigned)rank, &count, pd, sizeof pd));
    EXPECT(count >= 1 && strchr(pd, ':'), "matched %u devices, %s", count, pd);
    OK(oclml_dp_destroy(dp));
    OK(oclml_dp_destroy(NULL));
    OK(oclml_arena_destroy(a));
    return 0;
}

static const struct {
    const char *name;
    int (*fn)(void);
} cases[] = {
    {"average", test_average}, {"broadcast", test_broadcast}, {"allgather", test_allgather},
    {"fail", test_fail},       {"timeout", test_timeout},     {"config", test_config},
    {"args", test_args}};

int main(int argc, char **argv) {
    int level;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    char err[4096];
    if (ranks < 2 || oclml_dp_ctx_create(MPI_COMM_WORLD, NULL, &ctx, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, ranks < 2 ? "needs two ranks or more" : err);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int failed = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        bool wanted = argc < 2;
        for (int i = 1; i < argc; i++) wanted |= !strcmp(argv[i], cases[k].name);
        if (!wanted) continue;
        int mine = cases[k].fn(), any;
        MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (!rank) printf("%s: %s\n", cases[k].name, any ? "FAILED" : "passed");
        failed |= any;
    }
    oclml_ctx_destroy(ctx);
    MPI_Finalize();
    return failed;
}
