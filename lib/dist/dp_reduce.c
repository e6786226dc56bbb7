/* The host arithmetic of a bucket's exchange: the shards summed in rank order, and bf16's
 * conversions, split over a few threads for large buckets (host memory moves faster from
 * several cores than from one). The order of the sum is fixed (rank 0 first), so a rank count
 * gives one result whatever the timing or the split; the 1 / ranks scale comes after the sum,
 * as one rounding. */
#include <pthread.h>
#include <string.h>

#include "dp.h"

/* Threads for host arithmetic, and the least work that earns one. */
#define HOST_THREADS 4
#define ELEMENTS_PER_THREAD ((size_t)1 << 18)

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even; a NaN stays a NaN (its quiet bit set, so no rounding carries it into
 * an infinity). */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

typedef enum { JOB_REDUCE_F32, JOB_REDUCE_BF16, JOB_TO_BF16, JOB_FROM_BF16, JOB_COPY } job_kind;

typedef struct job {
    job_kind kind;
    const void *const *ins; /* reduce: each rank's shard, in rank order */
    const void *in;
    void *out;
    int ranks;
    size_t begin, end; /* this thread's range */
} job;

static void run_range(const job *j) {
    const float scale = 1.0f / (float)j->ranks;
    switch (j->kind) {
    case JOB_REDUCE_F32: {
        const float *const *in = (const float *const *)j->ins;
        float *out = j->out;
        for (size_t k = j->begin; k < j->end; k++) {
            float sum = in[0][k];
            for (int r = 1; r < j->ranks; r++) sum += in[r][k];
            out[k] = sum * scale;
        }
        break;
    }
    case JOB_REDUCE_BF16: {
        const uint16_t *const *in = (const uint16_t *const *)j->ins;
        uint16_t *out = j->out;
        for (size_t k = j->begin; k < j->end; k++) {
            float sum = bf16_to_f32(in[0][k]);
            for (int r = 1; r < j->ranks; r++) sum += bf16_to_f32(in[r][k]);
            out[k] = f32_to_bf16(sum * scale);
        }
        break;
    }
    case JOB_COPY:
        memcpy((float *)j->out + j->begin, (const float *)j->in + j->begin,
               (j->end - j->begin) * sizeof(float));
        break;
    case JOB_TO_BF16:
        for (size_t k = j->begin; k < j->end; k++)
            ((uint16_t *)j->out)[k] = f32_to_bf16(((const float *)j->in)[k]);
        break;
    case JOB_FROM_BF16:
        for (size_t k = j->begin; k < j->end; k++)
            ((float *)j->out)[k] = bf16_to_f32(((const uint16_t *)j->in)[k]);
        break;
    }
}

static void *run_thread(void *arg) {
    run_range(arg);
    return NULL;
}

/* Splits [0, n) over up to HOST_THREADS threads (this one included). */
static void run_split(job base, size_t n) {
    size_t threads = n / ELEMENTS_PER_THREAD;
    if (threads > HOST_THREADS) threads = HOST_THREADS;
    if (threads < 2) {
        base.begin = 0, base.end = n;
        run_range(&base);
        return;
    }
    job jobs[HOST_THREADS];
    pthread_t tid[HOST_THREADS];
    bool started[HOST_THREADS] = {false};
    for (size_t t = 0; t < threads; t++) {
        jobs[t] = base;
        jobs[t].begin = n * t / threads, jobs[t].end = n * (t + 1) / threads;
        started[t] = t > 0 && !pthread_create(&tid[t], NULL, run_thread, &jobs[t]);
    }
    for (size_t t = 0; t < threads; t++)
        if (!started[t]) run_range(&jobs[t]); /* this thread's share, or a thread not had */
    for (size_t t = 1; t < threads; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}

void dp_reduce(bool bf16, const void *const *shards, int ranks, size_t n, void *out) {
    run_split((job){bf16 ? JOB_REDUCE_BF16 : JOB_REDUCE_F32, shards, NULL, out, ranks, 0, 0}, n);
}

void dp_to_bf16(const float *x, size_t n, uint16_t *y) {
    run_split((job){JOB_TO_BF16, NULL, x, y, 1, 0, 0}, n);
}

void dp_from_bf16(const uint16_t *x, size_t n, float *y) {
    run_split((job){JOB_FROM_BF16, NULL, x, y, 1, 0, 0}, n);
}

void dp_copy_f32(const float *x, size_t n, float *y) {
    run_split((job){JOB_COPY, NULL, x, y, 1, 0, 0}, n);
}
