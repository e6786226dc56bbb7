/* Data parallelism for the training examples. Built with liboclml-mpi (configure found MPI),
 * an example run under `mpirun -np N` trains with one process per device: each takes its part of
 * the global batch (train_parallel.h), the gradients are averaged over the processes
 * (oclml_mpi.h), every process holds the same parameters, and rank 0 prints the loss averaged
 * over them, which is the loss of the global batch. Run without mpirun, or built without MPI,
 * the example is one process on the whole batch, as before. */
#ifndef OCLML_TRAIN_DP_H
#define OCLML_TRAIN_DP_H

#include <oclml.h>
#include <stdio.h>
#include <stdlib.h>

#include "train_parallel.h"

#ifdef OCLML_EXAMPLES_MPI
#include <oclml_mpi.h>
#endif

typedef struct train_dp {
    int rank, ranks;
    train_parallel par; /* hand it to the model */
#ifdef OCLML_EXAMPLES_MPI
    oclml_dp *dp;
#endif
} train_dp;

#ifdef OCLML_EXAMPLES_MPI
static oclml_status train_dp_ready_(void *user, size_t first, size_t count) {
    train_dp *d = user;
    return d->dp ? oclml_dp_grads_ready(d->dp, first, count) : OCLML_SUCCESS;
}
static oclml_status train_dp_sync_(void *user) {
    train_dp *d = user;
    return d->dp ? oclml_dp_sync(d->dp) : OCLML_SUCCESS;
}
static oclml_status train_dp_gather_(void *user, const oclml_tensor *x, oclml_tensor *all,
                                     size_t *parts) {
    train_dp *d = user;
    *parts = d->dp ? (size_t)d->ranks : 0;
    return d->dp && x ? oclml_dp_allgather(d->dp, x, all) : OCLML_SUCCESS;
}
#endif

/* Starts MPI (when built with it) and creates this process's context on its device. */
static inline oclml_status train_dp_begin(train_dp *d, int *argc, char ***argv, oclml_ctx **ctx,
                                          char *err, size_t len) {
    *d = (train_dp){.rank = 0, .ranks = 1};
#ifdef OCLML_EXAMPLES_MPI
    int level;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->ranks);
    d->par = (train_parallel){(size_t)d->rank, (size_t)d->ranks, train_dp_ready_, train_dp_sync_, d,
                              train_dp_gather_};
    return oclml_dp_ctx_create(MPI_COMM_WORLD, NULL, ctx, err, len);
#else
    return oclml_ctx_create(ctx, NULL, err, len);
#endif
}

/* After the model is made: the exchange over its arena (order: the backward's, NULL for the
 * reverse of the arena's), and rank 0's weights everywhere. */
static inline oclml_status train_dp_attach(train_dp *d, oclml_ctx *ctx, oclml_arena *arena,
                                           const size_t *order) {
#ifdef OCLML_EXAMPLES_MPI
    if (d->ranks < 2) return OCLML_SUCCESS;
    oclml_dp_config c;
    oclml_dp_config_init(&c);
    c.order = order;
    oclml_status st = oclml_dp_create(ctx, arena, &c, &d->dp);
    return st ? st : oclml_dp_broadcast(d->dp);
#else
    (void)d, (void)ctx, (void)arena, (void)order;
    return OCLML_SUCCESS;
#endif
}

/* The mean of a value over the processes (the loss of the global batch). */
static inline float train_dp_mean(const train_dp *d, float v) {
#ifdef OCLML_EXAMPLES_MPI
    if (d->ranks > 1) {
        double sum = 0, mine = v;
        MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        return (float)(sum / d->ranks);
    }
#endif
    (void)d;
    return v;
}

/* 1 when every process holds bit-identical parameters (a hash of the arena's, compared). */
static inline int train_dp_identical(const train_dp *d, oclml_arena *arena) {
#ifdef OCLML_EXAMPLES_MPI
    if (d->ranks < 2) return 1;
    oclml_tensor *flat;
    size_t n = 0;
    if (oclml_arena_flat(arena, 0, &flat) || oclml_arena_info(arena, NULL, NULL, &n)) return 0;
    float *p = malloc(n * sizeof *p);
    unsigned long long h = 14695981039346656037ull, lo, hi;
    if (!p || oclml_tensor_read(flat, p, n)) {
        free(p);
        return 0;
    }
    const unsigned char *bytes = (const unsigned char *)p;
    for (size_t i = 0; i < n * sizeof *p; i++) h = (h ^ bytes[i]) * 1099511628211ull;
    free(p);
    MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
#else
    (void)d, (void)arena;
    return 1;
#endif
}

/* After step s of an example: its loss averaged over the processes into curve[s] and printed by
 * rank 0. 0 when every process holds the same weights, 1 (said on stderr) when not. */
static inline int train_dp_step_done(const train_dp *d, oclml_arena *arena, int s, float loss,
                                     float *curve) {
    curve[s] = train_dp_mean(d, loss);
    if (!d->rank) printf("step %3d  loss %.6f\n", s, curve[s]);
    if (train_dp_identical(d, arena)) return 0;
    fprintf(stderr, "rank %d: the processes' weights differ after step %d\n", d->rank, s);
    return 1;
}

/* Frees the exchange (before the arena) and ends MPI. */
static inline void train_dp_detach(train_dp *d) {
#ifdef OCLML_EXAMPLES_MPI
    oclml_dp_destroy(d->dp);
    d->dp = NULL;
#else
    (void)d;
#endif
}
static inline void train_dp_end(train_dp *d) {
#ifdef OCLML_EXAMPLES_MPI
    MPI_Finalize();
#endif
    (void)d;
}

#endif
