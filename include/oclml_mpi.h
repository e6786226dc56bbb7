/*
 * liboclml-mpi: data-parallel training over MPI, one process (rank) per device
 * (`pkg-config oclml-mpi`; built when configure finds MPI).
 *
 * Every rank holds the whole model in an arena (oclml_arena_create), runs the forward and the
 * backward on its part of the global batch, and averages the arena's gradients with the other
 * ranks before its optimizer step, so that every rank steps from the same gradient and keeps
 * bit-identical parameters:
 *
 *   oclml_dp_ctx_create(MPI_COMM_WORLD, NULL, &ctx, err, sizeof err);  // device by local rank
 *   ... arena, optimizer ...
 *   oclml_dp_create(ctx, arena, NULL, &dp);
 *   oclml_dp_broadcast(dp);                 // rank 0's parameters everywhere
 *   for each step:
 *       forward, loss, backward; after each layer's backward:
 *           oclml_dp_grads_ready(dp, first, count);   // its gradients are enqueued
 *       if (oclml_dp_sync(dp) == OCLML_SUCCESS) oclml_optim_step(opt);
 *
 * How the gradients travel. The arena's tensors are grouped into buckets of about bucket_bytes,
 * in the order the backward finishes them (config.order). When the last tensor of a bucket is
 * marked ready, the bucket is copied from the device to pinned host memory on a command queue of
 * its own (after a marker on the context's queue: it waits for the kernels enqueued before it,
 * and overlaps those enqueued after), and a progress thread exchanges it while the backward goes
 * on: each rank receives one shard of every rank's bucket (nonblocking all-to-all), sums the
 * shards in rank order with fp32 accumulation, scales by 1 / ranks, and the averaged shards are
 * gathered by every rank (nonblocking all-gather) and copied back to the device. The sum's order
 * is fixed, so the result is deterministic for a fixed rank count, and every rank receives the
 * same words, so it is identical on every rank. oclml_dp_sync waits for the last bucket only.
 * Ranks of one node exchange through host memory they all map instead of messages, and each
 * shard's owner sums on its device (sum_on_device; with bf16 words the device also converts,
 * so oclml_dp_grads_ready then enqueues the casts on the context's queue).
 *
 * Failures. A rank whose step fails (an op returned an error) calls oclml_dp_fail instead of
 * oclml_dp_sync: it still takes part in the step's exchanges, and every rank's oclml_dp_sync
 * returns OCLML_ERR_PEER. A rank that waits longer than config.timeout_s for the others returns
 * OCLML_ERR_TIMEOUT, goes on taking part in the step in the background, and the ranks that come
 * late get OCLML_ERR_PEER from it. Either way every rank skips that optimizer step (the
 * gradients are left partly averaged: recompute them), so the parameters stay identical. A rank
 * that dies ends the job (mpirun stops the others); a rank that hangs for good leaves the others
 * returning OCLML_ERR_TIMEOUT: call MPI_Abort.
 *
 * Threads. MPI must be initialised by the application, preferably with
 * MPI_Init_thread(MPI_THREAD_MULTIPLE). With MPI_THREAD_SERIALIZED the application must make no
 * MPI call of its own between a step's first oclml_dp_grads_ready and its oclml_dp_sync; with
 * MPI_THREAD_FUNNELED or less there is no progress thread and the exchange runs inside
 * oclml_dp_sync (correct, not overlapped). The dp object is for one thread at a time.
 */
#ifndef OCLML_MPI_H
#define OCLML_MPI_H

#include <mpi.h>

#include "oclml.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oclml_dp oclml_dp;

typedef struct oclml_dp_config {
    size_t struct_size; /* sizeof(oclml_dp_config), set by oclml_dp_config_init */
    MPI_Comm comm;      /* the ranks that train together (duplicated); MPI_COMM_WORLD */
    /* Gradient bytes (fp32) a bucket holds at least: 25 MiB, PyTorch DDP's bucket. Buckets end
     * at tensor boundaries, except that a tensor is cut where a bucket would pass the larger of
     * this and first_bucket_bytes (it goes on in the next buckets, which then overlap one's
     * copies with the next one's exchange). Smaller buckets start sooner, larger ones move at a
     * higher rate. */
    size_t bucket_bytes;
    /* What travels between ranks: OCLML_FLOAT32 (default), or OCLML_BFLOAT16 (half the bytes:
     * each rank's gradient rounded to bf16, summed in fp32, the average rounded to bf16). */
    oclml_dtype wire_dtype;
    /* The arena's tensors in the order the backward finishes their gradients (each index once);
     * NULL: the reverse of the arena's order. Buckets follow it, so that the first bucket is
     * ready first. Marking in another order stays correct, only later. */
    const size_t *order;
    double timeout_s;    /* how long to wait for the other ranks: 300 s */
    int progress_thread; /* 1 (default): overlap the exchange with the backward; 0: in sync */
    /* The first bucket's size (1 MiB by default, as DDP's): small, so that the exchange starts
     * early in the backward. It holds at least this, whole tensors, and up to the larger of
     * this and bucket_bytes. */
    size_t first_bucket_bytes;
    /* 1 (default): when every rank is on one node, exchange through memory they all map
     * (MPI_Win_allocate_shared: one copy in, the sum in place, one copy out) instead of
     * messages; 0: messages always. */
    int shared_memory;
    /* 1 (default): where the ranks share a node's memory, each owner sums its shard on its
     * device (the shards copied in, the sum, the sums copied out: the copy engines and the
     * device's memory instead of the host's cores), and with bf16 words the device converts
     * them; 0: on the host. Either way the sum runs in rank order and is scaled once, so both
     * give the same bits. */
    int sum_on_device;
} oclml_dp_config;

/* Fills c with the defaults above and sets struct_size. */
OCLML_API oclml_status oclml_dp_config_init(oclml_dp_config *c);

/* Creates a context on this rank's device: the (node rank % count)-th of the devices that
 * options->device (else $OCLML_DEVICE, else "the GPUs") matches (oclml_device_match), so the
 * ranks of a node spread over its GPUs; a "P:D" selector names one device for this rank (the
 * override). options may be NULL. Collective over comm. */
OCLML_API oclml_status oclml_dp_ctx_create(MPI_Comm comm, const oclml_ctx_config *options,
                                           oclml_ctx **ctx, char *err_text, size_t err_len);

/* Creates the data-parallel state over an arena of ctx: buckets, pinned staging for every
 * gradient, a copy queue and the progress thread. Collective over config->comm (every rank
 * passes an arena of the same shapes and the same configuration; a mismatch is
 * OCLML_ERR_INVALID_CONFIG on every rank). config may be NULL (defaults). The arena must outlive
 * the dp object. */
OCLML_API oclml_status oclml_dp_create(oclml_ctx *ctx, oclml_arena *arena,
                                       const oclml_dp_config *config, oclml_dp **dp);
/* Stops the progress thread and frees everything (NULL: nothing to do). Collective. */
OCLML_API oclml_status oclml_dp_destroy(oclml_dp *dp);
OCLML_API oclml_status oclml_dp_rank(const oclml_dp *dp, int *rank, int *ranks);

/* Every rank's x into all, in rank order (all holds ranks times x's elements, of x's dtype), on
 * every rank: for what a model exchanges instead of a gradient (a gradient that a small input
 * makes, such as a token embedding's from its lookup). Every rank calls it between the same two
 * steps: inside a step (after the first oclml_dp_grads_ready, before oclml_dp_sync returned
 * success or failure) it is OCLML_ERR_INVALID_ARGUMENT with no collective; after a sync that
 * returned OCLML_ERR_TIMEOUT it first waits for that step (up to timeout_s). Bad arguments, or
 * another size or dtype on another rank, return before anything moves (OCLML_ERR_PEER on the
 * ranks whose own were fine). Collective; blocks until all is written, with no timeout of its
 * own; a rank's failure is OCLML_ERR_PEER on the others. */
OCLML_API oclml_status oclml_dp_allgather(oclml_dp *dp, const oclml_tensor *x, oclml_tensor *all);

/* Rank 0's parameters to every rank (and into the arena's 16-bit copy where it has one), so
 * that all start from the same weights. Collective; blocks. */
OCLML_API oclml_status oclml_dp_broadcast(oclml_dp *dp);

/* The backward has enqueued the final gradients of arena tensors [first, first + count): the
 * buckets they complete start their exchange now. Marking a tensor twice in a step is
 * harmless. */
OCLML_API oclml_status oclml_dp_grads_ready(oclml_dp *dp, size_t first, size_t count);
/* Ends the step's exchange: starts the buckets not yet marked, waits until every bucket's
 * average is back in the gradients (the context's queue waits for those copies before what is
 * enqueued next: the optimizer step). OCLML_ERR_PEER when a rank failed the step,
 * OCLML_ERR_TIMEOUT after timeout_s without the others: skip the optimizer step then. */
OCLML_API oclml_status oclml_dp_sync(oclml_dp *dp);
/* This rank's step failed: it takes part in the rest of the step's exchange so that every
 * rank's oclml_dp_sync returns OCLML_ERR_PEER, then returns (OCLML_ERR_TIMEOUT when the others
 * did not come within timeout_s). */
OCLML_API oclml_status oclml_dp_fail(oclml_dp *dp);

/* One bucket of the last step, its times in ms from the end of the backward on the device (the
 * marker oclml_dp_sync enqueues): negative before it, hidden behind the backward. The device's
 * times come from OpenCL event callbacks, which nothing waits for: NAN where one had not come
 * when the step ended. */
typedef struct oclml_dp_bucket_info {
    size_t tensors;     /* how many of the arena's tensors it holds (or pieces of: a cut one) */
    size_t elements;    /* gradient values, padding included */
    size_t wire_bytes;  /* bytes this rank sent for it (all-to-all and all-gather) */
    double ready_ms;    /* the device reached its ready marker */
    double copied_ms;   /* its copy to host memory ended */
    double reduced_ms;  /* its exchange ended (the average is in host memory) */
    double returned_ms; /* its copy back to the device ended */
} oclml_dp_bucket_info;

typedef struct oclml_dp_step_info {
    size_t buckets, elements, wire_bytes;
    /* 0: the exchange goes by messages; 1: through the node's shared memory; 2: and the
     * device's copies land in and read from the shared segments (no host copy: fp32 words, or
     * bf16 words that the device converts) */
    int shared_memory;
    int sum_on_device;          /* the owners' sums run on their devices */
    size_t steps, failed_steps; /* steps synchronised since creation, and those that failed */
    double exchange_ms; /* the last step: the buckets' exchanges (all-to-all, sum, all-gather) */
    double exposed_ms;  /* the last step: from the backward's end to the last copy back */
    double sync_ms;     /* the last step: how long oclml_dp_sync (or _fail) waited (host clock) */
} oclml_dp_step_info;

OCLML_API oclml_status oclml_dp_step_info_get(const oclml_dp *dp, oclml_dp_step_info *info);
OCLML_API oclml_status oclml_dp_bucket_info_get(const oclml_dp *dp, size_t bucket,
                                                oclml_dp_bucket_info *info);

#ifdef __cplusplus
}
#endif

#endif
