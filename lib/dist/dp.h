/* liboclml-mpi's internals: the data-parallel state (dp.c sets it up, dp_step.c runs a step's
 * exchange, dp_reduce.c does the arithmetic on host memory). Only the public API of liboclml is
 * used: the MPI layer is a client of the library like any application. */
#ifndef OCLML_DIST_DP_H
#define OCLML_DIST_DP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "oclml_mpi.h"

/* One contiguous range of the arena's gradient buffer and where it sits in the staging. */
typedef struct dp_run {
    size_t device_offset; /* elements from the start of the arena's flat gradient */
    size_t stage_offset;  /* elements from the start of the staging */
    size_t elements;
} dp_run;

/* A host time stamped by an OpenCL event's completion callback, for the step's figures only:
 * nothing waits for it (a driver may deliver callbacks late), so it may be missing (0). */
typedef struct dp_stamp {
    _Atomic double at; /* seconds (dp_now) */
} dp_stamp;

/* A bucket: tensors in the order the backward finishes them, staged contiguously. */
typedef struct dp_bucket {
    size_t stage_offset, elements;
    dp_run *runs;
    size_t n_runs;
    size_t waiting; /* this step: tensors not yet marked ready */
    bool started;   /* this step: its copy to the host is enqueued (or, failing, skipped) */
    bool has_data;  /* this step: the copy was enqueued (not a failing rank's filler) */
    cl_event ready, read_done, written;
    dp_stamp ready_at;
    double copied_at, reduced_at, returned_at;
    oclml_dp_bucket_info info; /* the last step's, in ms from the backward's end */
} dp_bucket;

struct oclml_dp {
    oclml_ctx *ctx;
    oclml_arena *arena;
    MPI_Comm comm;
    int rank, ranks;
    oclml_dp_config cfg;
    cl_context cl_ctx;
    cl_device_id device;
    bool poll; /* waits poll events (a GPU) rather than block (dp_wait_event) */
    cl_command_queue ctx_queue, copy_queue;
    cl_mem grads, params;               /* the arena's flat buffers */
    size_t grads_offset, params_offset; /* their views' offsets in bytes */
    size_t n_tensors, padded;
    size_t *bucket_of, *bucket_end; /* per arena tensor: its buckets, [bucket_of, bucket_end) */
    bool *ready;                    /* per arena tensor, this step */
    int *counts;                    /* 4 x ranks: the exchange's counts and displacements */
    dp_bucket *buckets;
    size_t n_buckets;
    /* Pinned staging of every gradient (fp32), mapped once; the bf16 wire words; one bucket's
     * shards from every rank (the largest bucket's). */
    cl_mem stage_mem;
    float *stage;
    uint16_t *wire16;
    void *shards;
    size_t shard_capacity; /* elements */
    const void **shard_of; /* per rank: where its shard of the bucket in hand is */
    /* Ranks that share a node exchange through memory they all map (MPI_Win_allocate_shared):
     * each rank's segment holds its buckets in the wire dtype; one copy in, the owner's sum in
     * place, one copy out, no message in between. NULL segment: messages (shards above). */
    MPI_Win win;
    void **segment; /* per rank, as this process maps it */
    /* With fp32 words the segments are the staging itself: registered with OpenCL
     * (CL_MEM_USE_HOST_PTR, which pins them), the copy to the host lands in this rank's segment
     * and the copies back read each owner's sums from its segment: no host copy at all. */
    bool zero_copy;
    cl_mem *segment_mem; /* per rank */
    /* The owners' sums on the device (dp_device.c): a liboclml context over cl_ctx with a queue
     * of its own, and room for every rank's part of a shard and their sum. NULL: the host's. */
    oclml_ctx *sum_ctx;
    cl_command_queue sum_queue;
    cl_mem sum_scratch;
    /* bf16 words on one node with the sums on the device: the segments hold words, the device
     * converts (words: every gradient's, in stage order; sum_words: a shard's slots). */
    bool device_words;
    cl_mem words, sum_words;

    /* The step, shared by the calling thread and the progress thread under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool threaded, quit;
    bool in_step;     /* a bucket started and the step's exchange has not ended */
    bool marked;      /* a gradient was marked ready this step */
    bool step_done;   /* the progress thread ended the step's exchange */
    bool stalled;     /* a wait passed timeout_s: the caller was told, writes stop */
    bool skip_writes; /* no more copies back this step (stalled) */
    bool fenced;      /* the context's queue already waits for this step's copies */
    bool broken;      /* an MPI or OpenCL failure left the exchange unusable */
    int local_failed; /* this rank failed the step (dp_fail, a failed copy, a stall) */
    int any_failed;   /* the step's outcome, agreed by every rank */
    bool abandoned;   /* requests left in flight (destroy cannot free the communicator) */
    cl_event backward_end;
    dp_stamp backward_end_at;
    atomic_int callbacks;   /* callbacks not yet run (destroy waits for them) */
    atomic_uint generation; /* the step: a late callback of an earlier one stamps nothing */
    double exchange_s;      /* this step's buckets, all-to-all to all-gather */
    oclml_dp_step_info info;
};

/* dp_step.c: the progress thread's loop. */
void *dp_progress_main(void *dp);
/* A stalled step still running in the background waited for and dropped (mu held). */
oclml_status dp_settle(oclml_dp *dp);

/* dp_device.c: the owners' sums on the device, where the segments are registered. */
void dp_device_setup(oclml_dp *dp, cl_device_id device);
void dp_device_release(oclml_dp *dp);
/* Sums stage elements [from, from + n) of bucket q over the ranks (times 1 / ranks): the
 * others' from their segments, this rank's from its gradients; the sums stay on the device and
 * go to this rank's segment. 0, or -1 when the device failed. */
int dp_device_sum(oclml_dp *dp, const dp_bucket *q, size_t from, size_t n);
/* Enqueues the copy of n of those sums, from the shard's element at, to the gradients' byte
 * offset to (on the sums' queue). */
cl_int dp_device_return(oclml_dp *dp, size_t at, size_t to, size_t n);
/* device_words: bucket q's gradients cast to bf16 into the device staging, on the context's
 * queue (the caller's thread). */
oclml_status dp_device_words_out(oclml_dp *dp, const dp_bucket *q);
/* device_words: dp_device_sum's work on the words of stage elements [from, from + n). */
int dp_device_sum_words(oclml_dp *dp, size_t from, size_t n);
/* device_words: enqueues every owner's average words of bucket q (count and displ: the
 * shards) into the device staging and from there into the gradients, on the sums' queue. */
cl_int dp_device_words_back(oclml_dp *dp, const dp_bucket *q, const int *count, const int *displ);

/* dp_reduce.c: host arithmetic of one bucket, over a few threads when large. */
/* shards: each rank's n values (bf16 words or fp32), in rank order; out (which may be one of
 * them): their sum in rank order (fp32 accumulation) times 1 / ranks, in the same type. */
void dp_reduce(bool bf16, const void *const *shards, int ranks, size_t n, void *out);
void dp_to_bf16(const float *x, size_t n, uint16_t *y);
void dp_from_bf16(const uint16_t *x, size_t n, float *y);
void dp_copy_f32(const float *x, size_t n, float *y);

double dp_now(void);
/* Waits for an event (of a flushed queue): on a GPU by polling its status (a blocking OpenCL
 * wait may hold the driver's lock and stall the caller's enqueues meanwhile), on a CPU device
 * in the driver (a polling thread takes a core from the device's own kernels). 0, or -1 if its
 * command failed. */
int dp_wait_event(const oclml_dp *dp, cl_event e);

#endif
