/*
 * liboclml: vendor-neutral fused machine-learning kernels for OpenCL devices.
 *
 * Conventions (see DESIGN.md):
 * - Every function returns an oclml_status; results come back through out-parameters.
 * - Arguments are validated before anything is enqueued: on error nothing was enqueued and no
 *   output was touched. The library never prints, exits or aborts.
 * - Ops enqueue on the context's in-order queue and return at once; oclml_ctx_finish() waits,
 *   tensor reads block.
 * - Tensors are row-major with up to 4 dimensions, of a dtype chosen at creation: fp32 (the
 *   default), bf16 or fp16. Accumulation is fp32 everywhere. Ops take fp32 tensors unless their
 *   comment lists other dtypes; any other dtype is refused (OCLML_ERR_DTYPE).
 *
 * NaN/Inf policy: a NaN input gives NaN in every output element that depends on it (the math
 * propagates it; no kernel filters NaN). Infinities follow IEEE arithmetic except where an op
 * documents otherwise.
 *
 * Partial results: validation happens before anything is enqueued, but an op of several launches
 * whose later launch fails (out of device resources, a lost device, or the build of a later
 * launch's kernel) returns that failure with the earlier launches' outputs written. The ops of
 * one launch, or whose earlier launches write only scratch memory, never do this
 * (embedding_backward, for one: its sort of the ids runs in scratch, and a failure leaves dtable
 * as it was, its accumulation not begun). Those that can, with what a failure may leave
 * written, in this order (each output whole before the next is touched unless it says "in
 * part"; an accumulating output has had its addition):
 * - linear_backward, linear_dropout_backward: db, then dx, then dw.
 * - linear and linear_dropout where CLBlast runs the product (oclml_gemm_plan says so) and a
 *   bias, an activation or dropout follows in an epilogue kernel: y holding x W^T alone, pre not
 *   written.
 * - gemm, linear and linear_dropout where the last wave of blocks runs as a product of its own
 *   (oclml_gemm_plan: "last wave's ... blocks"): c (y and pre) in part.
 * - conv2d, conv_transpose2d: y in part (image chunks and groups).
 * - conv2d_backward, conv_transpose2d_backward: dx in part, then dw in part, then db.
 * - attention_backward: dk and dv, then dq, then dmask; where dQ comes as a GEMM on dS
 *   (oclml_attention_plan says so), dk, dv and dq in part (chunks of key heads), then dmask.
 * - layernorm_backward, rmsnorm_backward: dx, then dgamma and dbeta.
 * - residual_layernorm, residual_rmsnorm on rows past the register path: r, then out, mean, rstd.
 * - residual_layernorm_backward, residual_rmsnorm_backward: dx and dy, then dgamma and dbeta.
 * - mse_loss, huber_loss, bce_with_logits, cross_entropy and kl_div_logits with a MEAN or SUM
 *   loss: the gradients, then the loss; cross_entropy and kl_div_logits over rows past the
 *   registers, more than 65535 of them: the gradients (and a NONE loss) in part, slices of 65535
 *   rows at a time.
 * - concat and split of more than 8 tensors: y in part; the outputs eight at a time.
 * - gru_sequence: hs in part (the steps before the failing one).
 * - gru_step_backward: dx, then dh in part (a copy, then its product), dw_ih, dw_hh, db_ih,
 *   db_hh (with OCLML_GRU_CHO dw_hh and db_hh in part: their n rows are written last).
 * - rssm_rollout: the per-step and final-state outputs (in part where a split rollout's guard
 *   launch redoes members), then the summary's.
 * - optim_step with agc_clip: the gradients, clipped in place, before the parameters and state.
 */
#ifndef OCLML_H
#define OCLML_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "oclml_version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(OCLML_BUILDING_LIBRARY)
#define OCLML_API __attribute__((visibility("default")))
#else
#define OCLML_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Status codes. Library codes live in -7000..-7099, apart from OpenCL's (-1..-1100) and CLBlast's
 * (-1024..-2050). When an OpenCL or CLBlast call fails, the status is OCLML_ERR_OPENCL or
 * OCLML_ERR_CLBLAST and the underlying code is kept: oclml_ctx_backend_error().
 * ------------------------------------------------------------------------------------------- */
#define OCLML_STATUS_LIST(X)                                                               \
    X(OCLML_SUCCESS, 0, "success")                                                         \
    X(OCLML_ERR_INVALID_ARGUMENT, -7001, "invalid argument")                               \
    X(OCLML_ERR_NULL_POINTER, -7002, "a required pointer argument is NULL")                \
    X(OCLML_ERR_INVALID_SHAPE, -7003, "tensor shapes do not fit the operation")            \
    X(OCLML_ERR_BUFFER_TOO_SMALL, -7004, "a buffer is smaller than the data it must hold") \
    X(OCLML_ERR_SIZE_OVERFLOW, -7005, "a size computation overflows")                      \
    X(OCLML_ERR_OUT_OF_MEMORY, -7006, "out of host memory")                                \
    X(OCLML_ERR_NO_DEVICE, -7007, "no OpenCL device found")                                \
    X(OCLML_ERR_DEVICE_NOT_FOUND, -7008, "no OpenCL device matches the selector")          \
    X(OCLML_ERR_KERNEL_NOT_FOUND, -7009, "kernel source file not found")                   \
    X(OCLML_ERR_BUILD_FAILED, -7010, "OpenCL program build failed")                        \
    X(OCLML_ERR_OPENCL, -7011, "an OpenCL call failed")                                    \
    X(OCLML_ERR_CLBLAST, -7012, "a CLBlast call failed")                                   \
    X(OCLML_ERR_IO, -7013, "file input/output failed")                                     \
    X(OCLML_ERR_UNSUPPORTED, -7014, "not supported on this device")                        \
    X(OCLML_ERR_CONTEXT_MISMATCH, -7015, "tensors belong to different contexts")           \
    X(OCLML_ERR_INVALID_CONFIG, -7016, "invalid op configuration")                         \
    X(OCLML_ERR_DTYPE, -7017, "a tensor's dtype is not one the op takes")                  \
    X(OCLML_ERR_PEER, -7018, "another process of the job failed this step")                \
    X(OCLML_ERR_TIMEOUT, -7019, "timed out waiting for another process of the job")

typedef enum oclml_status {
#define OCLML_STATUS_ENUM_(name, value, text) name = value,
    OCLML_STATUS_LIST(OCLML_STATUS_ENUM_)
#undef OCLML_STATUS_ENUM_
} oclml_status;

/* A static description of a status code ("unknown status" for codes not in the list). */
OCLML_API const char *oclml_status_str(oclml_status status);
/* The symbolic name of a status code, e.g. "OCLML_ERR_INVALID_SHAPE". */
OCLML_API const char *oclml_status_name(oclml_status status);

/* Run-time library version, e.g. "0.2.0". */
OCLML_API const char *oclml_version_string(void);

/* ---------------------------------------------------------------------------------------------
 * Context: one OpenCL device, its context and in-order queue, the program cache and options.
 * ------------------------------------------------------------------------------------------- */
typedef struct oclml_ctx oclml_ctx;
typedef struct oclml_tensor oclml_tensor;

typedef enum oclml_log_level {
    OCLML_LOG_DEBUG = 0,
    OCLML_LOG_INFO = 1,
    OCLML_LOG_WARN = 2,
    OCLML_LOG_ERROR = 3
} oclml_log_level;

/* Called with each diagnostic message, from the thread that made the library call. */
typedef void (*oclml_log_fn)(void *user, oclml_log_level level, const char *message);

typedef struct oclml_ctx_config {
    /* sizeof(oclml_ctx_config), set by oclml_ctx_config_init: lets the struct grow without
     * breaking callers compiled against an older header. */
    size_t struct_size;
    /* Device selector: "gpu", "cpu", "P:D" (platform and device index), or a case-insensitive
     * substring of the platform or device name. NULL: $OCLML_DEVICE, else the first GPU, else the
     * first device of any kind. */
    const char *device;
    /* Colon-separated directories searched for kernel sources (NAME.cl under ops/ or at the top,
     * helper headers under include/) before $OCLML_KERNEL_PATH and the install directory. A
     * directory others can write is skipped. NULL: none. */
    const char *kernel_path;
    /* Directory of the on-disk program cache. NULL: $OCLML_CACHE_DIR, else
     * $XDG_CACHE_HOME/oclml (or ~/.cache/oclml). An empty string disables the disk cache. */
    const char *cache_dir;
    /* Size cap of the disk cache in bytes; the oldest entries are evicted past it. 0: 256 MiB. */
    size_t cache_max_bytes;
    /* Extra OpenCL build options appended to every program (after $OCLML_BUILD_OPTIONS). */
    const char *build_options;
    /* Tuning values over the defaults and the device's tuned-values files, e.g.
     * "gru.tile=4:1:2:2:1, rssm.split=4" (oclml-info lists the keys). NULL: $OCLML_TUNE. An
     * unknown key or a bad value makes context creation fail with OCLML_ERR_INVALID_ARGUMENT. */
    const char *tuning;
    /* Non-zero: create the queue with profiling enabled (benchmarks use event timings). */
    int profiling;
    /* Diagnostic callback and its user pointer. NULL: silent, unless $OCLML_VERBOSE=1, which sends
     * messages to stderr. */
    oclml_log_fn log_fn;
    void *log_user;
} oclml_ctx_config;

/* Fills *options with the defaults (all NULL/0) and sets struct_size; call it before setting
 * fields (a struct without struct_size is refused). */
OCLML_API oclml_status oclml_ctx_config_init(oclml_ctx_config *options);

/* Creates a context on the selected device. options may be NULL (defaults). On failure *ctx is
 * NULL; a description of the failure is available through err_text when not NULL (a buffer of
 * err_len bytes), since there is no context to hold it. */
OCLML_API oclml_status oclml_ctx_create(oclml_ctx **ctx, const oclml_ctx_config *options,
                                        char *err_text, size_t err_len);

/* Wraps an application's OpenCL objects. The caller keeps ownership: the library retains them and
 * releases its references at oclml_ctx_destroy(). The queue must be in-order and belong to the
 * context and device. options->device is ignored. */
OCLML_API oclml_status oclml_ctx_wrap(oclml_ctx **ctx, cl_context cl_ctx, cl_device_id device,
                                      cl_command_queue queue, const oclml_ctx_config *options,
                                      char *err_text, size_t err_len);

/* Waits for queued work, then frees the context. All its tensors (and the objects holding some,
 * such as an optimizer) must be destroyed before: while any is alive the call fails with
 * OCLML_ERR_INVALID_ARGUMENT and frees nothing. */
OCLML_API oclml_status oclml_ctx_destroy(oclml_ctx *ctx);

/* Waits until every op enqueued on the context has finished. */
OCLML_API oclml_status oclml_ctx_finish(oclml_ctx *ctx);

/* Readable text of the last failure on this context ("" if none). The pointer stays valid until
 * the next library call on the context from any thread; copy it if needed. A context shared by
 * threads has one record, written by whichever call failed last: such programs should use
 * oclml_ctx_last_error_copy, which copies the text under the record's lock. */
OCLML_API const char *oclml_ctx_last_error(const oclml_ctx *ctx);
/* Copies the last failure's text into buf (len bytes, truncated, always terminated). */
OCLML_API oclml_status oclml_ctx_last_error_copy(const oclml_ctx *ctx, char *buf, size_t len);

/* The OpenCL or CLBlast code behind the last OCLML_ERR_OPENCL / OCLML_ERR_CLBLAST (0 if none). */
OCLML_API oclml_status oclml_ctx_backend_error(const oclml_ctx *ctx, int *code);

/* The devices a selector (as oclml_ctx_config.device; NULL: $OCLML_DEVICE, else the GPUs, or
 * every device where there is none) matches: *count of them, and the "P:D" selector of match number nth % *count in
 * pd (len bytes). One process per device (liboclml-mpi) picks its device so, by its rank on the
 * node. OCLML_ERR_DEVICE_NOT_FOUND when nothing matches. pd may be NULL. */
OCLML_API oclml_status oclml_device_match(const char *selector, unsigned nth, unsigned *count,
                                          char *pd, size_t len);

/* The context's OpenCL objects (borrowed, not retained). Any may be NULL. */
OCLML_API oclml_status oclml_ctx_cl_objects(const oclml_ctx *ctx, cl_context *cl_ctx,
                                            cl_device_id *device, cl_command_queue *queue);

typedef struct oclml_device_info {
    char platform_name[128];
    char platform_version[128];
    char device_name[128];
    char device_version[128];
    char driver_version[128];
    int is_gpu;
    unsigned compute_units;
    size_t max_work_group_size;
    size_t local_mem_bytes;
    uint64_t global_mem_bytes;
    uint64_t max_alloc_bytes;
    unsigned clock_mhz;
    /* How the device was chosen, e.g. "OCLML_DEVICE=gpu" or "default: first GPU". */
    char selected_by[128];
} oclml_device_info;

OCLML_API oclml_status oclml_ctx_device_info(const oclml_ctx *ctx, oclml_device_info *info);

/* Disk cache state: the directory in use (empty when disabled), why it is disabled, and what it
 * holds. */
typedef struct oclml_cache_info {
    int enabled;
    char dir[1024];
    char disabled_reason[256];
    size_t entries;
    uint64_t bytes;
    uint64_t max_bytes;
    /* Counters since the context was created. */
    unsigned long memory_hits, disk_hits, disk_misses, disk_evictions, builds;
} oclml_cache_info;

OCLML_API oclml_status oclml_ctx_cache_info(const oclml_ctx *ctx, oclml_cache_info *info);

/* Builds (or loads from cache) every kernel of one kernel file, e.g. a custom "my_op.cl" on the
 * kernel path, with the given extra options; reports the time it took in milliseconds when
 * elapsed_ms is not NULL. Ops build only the variant they run themselves; this is for checking
 * that a file compiles. Helper headers (NAME.h) are not kernel files and are refused. */
OCLML_API oclml_status oclml_ctx_build_file(oclml_ctx *ctx, const char *file, const char *options,
                                            double *elapsed_ms);

/* Lists the kernel files found on the search path: calls fn once per file name with the
 * directory it comes from. */
OCLML_API oclml_status oclml_ctx_kernel_files(
    oclml_ctx *ctx, void (*fn)(void *user, const char *file, const char *dir), void *user);

/* The ops of the library, in the order of its op list (fill, copy, unary, ...): the name, the
 * kernel files it runs (space-separated), the tuning keys it reads (comma-separated, "" if none;
 * those for developers included: oclml_tuning_key_for_developers) and one line on what it does.
 * Calls fn once per op; the strings live as long as the library. */
typedef struct oclml_op_desc {
    const char *name;
    const char *kernel_file;
    const char *tunables;
    const char *summary;
} oclml_op_desc;
OCLML_API oclml_status oclml_ops_list(void (*fn)(void *user, const oclml_op_desc *op), void *user);

/* Compiles, up front, the kernel variants that the listed ops would pick on this device for
 * their common shapes (row lengths from 1 to 65536 and the long-row path, GRU batches below and
 * from 128, the RSSM rollout's default configuration, ...), in parallel where the driver allows,
 * so that no later call pays a compile. ops: comma-separated op names, NULL or "" for all.
 * threads: parallel builds (0: one per CPU core, at most 8). progress (may be NULL) is called
 * after each program with the op, a description of the variant, its build time (0 when it was
 * cached in memory), and the count done and in total; from the calling thread. */
typedef void (*oclml_prewarm_fn)(void *user, const char *op, const char *variant, double ms,
                                 size_t done, size_t total);
OCLML_API oclml_status oclml_ctx_prewarm(oclml_ctx *ctx, const char *ops, unsigned threads,
                                         oclml_prewarm_fn progress, void *user);

/* The context's tuning table: calls fn once per key with its value ("4:1:2:2:1"), where the
 * value came from ("default", "shipped file", "tuned file", "tuning option", "OCLML_TUNE") and
 * what it does. 0 generally means: the op decides from the shape and the device. */
OCLML_API oclml_status oclml_ctx_tuning(const oclml_ctx *ctx,
                                        void (*fn)(void *user, const char *key, const char *value,
                                                   const char *source, const char *help),
                                        void *user);

/* Whether a tuning key is for developers: a kernel internal or a test hook (the tensor-core
 * kernels' fragment reads, the last wave's splits, ...), as against a choice that means
 * something to a user (which algorithm, CLBlast's parameters, the disk cache). Both kinds can be
 * set; oclml-info lists the developers' keys only with --all. *for_developers is 1 or 0;
 * OCLML_ERR_INVALID_ARGUMENT for a key the library does not have. */
OCLML_API oclml_status oclml_tuning_key_for_developers(const char *key, int *for_developers);

/* Whether tuned CLBlast kernel parameters (oclml-tune; tuning keys clblast.*) are in force on
 * this context's device: *active (may be NULL) is 1 when some are, and text (may be NULL) names
 * each kernel's state and where its values came from, e.g. "Xgemm tuned from the shipped file:
 * 0:1:32:...; XgemmDirect CLBlast's own; GemmRoutine ...". CLBlast keeps one set per device for
 * the whole process: when two contexts on one device ask for different values, the one created
 * later wins, for both (reported here as "tuned by another context in this process"). */
OCLML_API oclml_status oclml_ctx_clblast_tuning(const oclml_ctx *ctx, int *active, char *text,
                                                size_t len);

/* The device capabilities the planners use, for tools and logs. Probing the PTX facts builds a
 * tiny kernel once per context (on GPUs). */
typedef struct oclml_device_caps {
    int is_gpu;
    unsigned compute_units;
    size_t max_work_group_size;
    size_t local_mem_bytes;
    unsigned simd_width; /* warp or wavefront width; 1 where unknown */
    int fp64, fp16;
    unsigned nv_cc_major, nv_cc_minor; /* NVIDIA compute capability, 0.0 elsewhere */
    int register_cap_option;           /* the compiler takes a per-work-item register cap */
    int inline_ptx;                    /* inline PTX (warp shuffles, GPU-scope sync) builds */
    int mma_tf32;                      /* TF32 mma.sync (tensor cores) builds */
} oclml_device_caps;
OCLML_API oclml_status oclml_ctx_device_caps(oclml_ctx *ctx, oclml_device_caps *caps);

/* Device-side timing. Between begin and end, every kernel the context enqueues is recorded; end
 * waits for them and gives the span from the first kernel's start to the last one's end, in
 * milliseconds. Needs a context created with options.profiling = 1 (else OCLML_ERR_UNSUPPORTED).
 * Meant for one thread at a time. */
OCLML_API oclml_status oclml_ctx_profile_begin(oclml_ctx *ctx);
OCLML_API oclml_status oclml_ctx_profile_end(oclml_ctx *ctx, double *device_ms);

/* Measures the device's fp32 FMA rate in GFLOP/s with a kernel of independent FMA chains (its
 * result is checked by the test suite), the limit that GEMM and attention figures are set
 * against. Blocks until done. */
OCLML_API oclml_status oclml_probe_fma_gflops(oclml_ctx *ctx, double *gflops);

/* Device memory the context's library objects hold now (tensors it created, arenas, optimizer
 * state, pooled scratch; not buffers the application wrapped) and the most they held since the
 * context was created or the peak was last reset, in bytes: PyTorch's memory_allocated and
 * max_memory_allocated. Either pointer may be NULL. */
OCLML_API oclml_status oclml_ctx_memory(const oclml_ctx *ctx, size_t *bytes, size_t *peak_bytes);
OCLML_API oclml_status oclml_ctx_reset_peak_memory(oclml_ctx *ctx);
/* Frees the pooled scratch buffers that no op is using. */
OCLML_API oclml_status oclml_ctx_trim_scratch(oclml_ctx *ctx);

/* ---------------------------------------------------------------------------------------------
 * Tensors: row-major, 1 to 4 dimensions, every dimension >= 1, of one dtype.
 * ------------------------------------------------------------------------------------------- */
#define OCLML_MAX_DIMS 4

/* Element types. bf16 is the top 16 bits of an fp32 (8 exponent bits, 7 fraction bits), fp16 is
 * IEEE binary16 (5 and 10); both are stored as 16-bit words. Conversions to them round to
 * nearest, ties to even; NaN stays NaN (quiet), values past the type's range become infinities. */
typedef enum oclml_dtype {
    OCLML_FLOAT32 = 0,
    OCLML_BFLOAT16 = 1,
    OCLML_FLOAT16 = 2,
} oclml_dtype;

/* Bytes an element of dtype takes (4 or 2); 0 for a value that is no dtype. */
OCLML_API size_t oclml_dtype_size(oclml_dtype dtype);
/* "fp32", "bf16", "fp16"; "?" for a value that is no dtype. */
OCLML_API const char *oclml_dtype_name(oclml_dtype dtype);

/* Allocates an uninitialised fp32 device tensor. */
OCLML_API oclml_status oclml_tensor_create(oclml_ctx *ctx, int ndim, const size_t *shape,
                                           oclml_tensor **tensor);
/* Allocates an uninitialised device tensor of the given dtype. */
OCLML_API oclml_status oclml_tensor_create_dtype(oclml_ctx *ctx, oclml_dtype dtype, int ndim,
                                                 const size_t *shape, oclml_tensor **tensor);

/* Wraps an existing buffer as an fp32 tensor starting offset_bytes into it (a multiple of 4).
 * The caller keeps ownership of the buffer; the tensor retains it until destroyed. */
OCLML_API oclml_status oclml_tensor_wrap(oclml_ctx *ctx, cl_mem buffer, size_t offset_bytes,
                                         int ndim, const size_t *shape, oclml_tensor **tensor);
/* The same for a tensor of the given dtype (offset_bytes a multiple of its element size). */
OCLML_API oclml_status oclml_tensor_wrap_dtype(oclml_ctx *ctx, oclml_dtype dtype, cl_mem buffer,
                                               size_t offset_bytes, int ndim, const size_t *shape,
                                               oclml_tensor **tensor);

OCLML_API oclml_status oclml_tensor_destroy(oclml_tensor *tensor);

/* Blocking copies between host floats and the tensor, converted to and from its dtype on the
 * host (oclml_dtype's rounding); count must equal the element count. */
OCLML_API oclml_status oclml_tensor_write(oclml_tensor *tensor, const float *src, size_t count);
OCLML_API oclml_status oclml_tensor_read(const oclml_tensor *tensor, float *dst, size_t count);
/* Blocking copies of the raw elements (count elements of the tensor's size: 16-bit words for
 * bf16 and fp16), unconverted. */
OCLML_API oclml_status oclml_tensor_write_raw(oclml_tensor *tensor, const void *src, size_t count);
OCLML_API oclml_status oclml_tensor_read_raw(const oclml_tensor *tensor, void *dst, size_t count);
/* The tensor's dtype. */
OCLML_API oclml_status oclml_tensor_dtype(const oclml_tensor *tensor, oclml_dtype *dtype);

/* Shape, element count and the underlying buffer (borrowed) with the tensor's byte offset. */
OCLML_API oclml_status oclml_tensor_shape(const oclml_tensor *tensor, int *ndim,
                                          size_t shape[OCLML_MAX_DIMS]);
OCLML_API oclml_status oclml_tensor_numel(const oclml_tensor *tensor, size_t *count);
OCLML_API oclml_status oclml_tensor_buffer(const oclml_tensor *tensor, cl_mem *buffer,
                                           size_t *offset_bytes);

/* ---------------------------------------------------------------------------------------------
 * Memory ops (cl/ops/memory.cl).
 * ------------------------------------------------------------------------------------------- */

/* dst[i] = value for every element (value rounded to dst's dtype; every dtype). */
OCLML_API oclml_status oclml_fill(oclml_ctx *ctx, oclml_tensor *dst, float value);
/* dst = src; both must have the same element count and the same dtype (every dtype). */
OCLML_API oclml_status oclml_copy(oclml_ctx *ctx, const oclml_tensor *src, oclml_tensor *dst);
/* dst = src converted to dst's dtype (any dtype to any, oclml_dtype's rounding); both must have
 * the same element count and must not overlap. */
OCLML_API oclml_status oclml_cast(oclml_ctx *ctx, const oclml_tensor *src, oclml_tensor *dst);

/* ---------------------------------------------------------------------------------------------
 * GEMM and linear layers. Each product runs on the kernel the planner picks for the shape and
 * the device (oclml_gemm_plan says which): liboclml's own tiled kernels (on TF32 tensor cores
 * with fp32 accuracy where the device has them, FMAs elsewhere) or CLBlast (tuned by oclml-tune).
 * Any sizes, offsets and leading dimensions; no padding is asked of the caller.
 * ------------------------------------------------------------------------------------------- */
typedef enum oclml_transpose { OCLML_NO_TRANS = 0, OCLML_TRANS = 1 } oclml_transpose;

/* The precision of matrix products on this context. FP32 (the default) keeps fp32 accuracy:
 * tensor cores are used only through the 3xTF32 split. TF32 allows products on TF32 tensor cores
 * with one product per element (about 1e-3 relative error, several times faster), as PyTorch's
 * allow_tf32; devices without them compute in fp32 either way. */
typedef enum oclml_math_mode { OCLML_MATH_FP32 = 0, OCLML_MATH_TF32 = 1 } oclml_math_mode;
OCLML_API oclml_status oclml_ctx_set_math_mode(oclml_ctx *ctx, oclml_math_mode mode);
OCLML_API oclml_status oclml_ctx_math_mode(oclml_ctx *ctx, oclml_math_mode *mode);

/* C = alpha * op(A) * op(B) + beta * C, with A, B, C 2-D: op(A) [M x K], op(B) [K x N], C [M x N].
 * With beta == 0, C need not be initialised (NaN in C does not propagate). C must not overlap A
 * or B.
 * dtypes: A and B one dtype, C any: fp32 operands as described above; bf16 or fp16 operands
 * multiply on the 16-bit tensor cores where the device has them (m16n8k16), elsewhere as fp32
 * (every product of two 16-bit values is exact in fp32); either way the sums are fp32, rounded
 * once to C's dtype. */
OCLML_API oclml_status oclml_gemm(oclml_ctx *ctx, oclml_transpose trans_a, oclml_transpose trans_b,
                                  float alpha, const oclml_tensor *a, const oclml_tensor *b,
                                  float beta, oclml_tensor *c);

/* Strided batched GEMM over 3-D tensors [batch x rows x cols]: C[i] = alpha op(A[i]) op(B[i]) +
 * beta C[i]. A or B may be 2-D, then the same matrix serves every batch entry. dtypes as
 * oclml_gemm's. */
OCLML_API oclml_status oclml_gemm_batched(oclml_ctx *ctx, oclml_transpose trans_a,
                                          oclml_transpose trans_b, float alpha,
                                          const oclml_tensor *a, const oclml_tensor *b, float beta,
                                          oclml_tensor *c);

/* Describes the kernel a GEMM of this shape runs on this device (for benchmarks and logs);
 * batch 1 for a plain GEMM. Plans only: builds nothing. */
OCLML_API oclml_status oclml_gemm_plan(oclml_ctx *ctx, oclml_transpose trans_a,
                                       oclml_transpose trans_b, size_t m, size_t n, size_t k,
                                       size_t batch, char *text, size_t len);
/* The same for operands of dtype ab and C of dtype c. */
OCLML_API oclml_status oclml_gemm_plan_dtype(oclml_ctx *ctx, oclml_transpose trans_a,
                                             oclml_transpose trans_b, size_t m, size_t n, size_t k,
                                             size_t batch, oclml_dtype ab, oclml_dtype c,
                                             char *text, size_t len);

/* The activations a linear layer fuses into its product's epilogue. */
typedef enum oclml_activation {
    OCLML_ACT_NONE = 0,
    OCLML_ACT_RELU,
    OCLML_ACT_GELU_ERF,  /* 0.5 x (1 + erf(x / sqrt 2)), PyTorch's gelu */
    OCLML_ACT_GELU_TANH, /* PyTorch's gelu(approximate='tanh') */
    OCLML_ACT_SILU,
    OCLML_ACT_TANH,
    OCLML_ACT_SIGMOID
} oclml_activation;

/* y = act(x W^T + b) in PyTorch's layout: x [rows x in] (any rank >= 1; the last dimension is
 * in, the others are rows), w [out x in], b [out] or NULL, y [rows x out] (x's shape with out
 * last). pre (NULL or y's shape) receives x W^T + b, which the backward of GELU and SiLU needs.
 * The bias and the activation run in the product's epilogue, so y is written once, except where
 * CLBlast runs the product (oclml_gemm_plan says so): an epilogue kernel follows. Outputs may not
 * overlap the inputs or each other (OCLML_ERR_INVALID_ARGUMENT). NaN in x, w or b gives NaN in
 * the rows or columns of y and pre that depend on it. */
OCLML_API oclml_status oclml_linear(oclml_ctx *ctx, oclml_activation act, const oclml_tensor *x,
                                    const oclml_tensor *w, const oclml_tensor *b, oclml_tensor *y,
                                    oclml_tensor *pre);

/* The gradients of oclml_linear given dy (y's shape). saved is what the activation's derivative
 * reads: the pre-activation (pre) for GELU and SiLU, the output y for ReLU, tanh and sigmoid
 * (PyTorch's output-based forms: dy (y > 0), dy (1 - y^2), dy y (1 - y)), nothing for NONE
 * (NULL, or a tensor of y's shape that is not read). dx (x's shape), dw (w's shape) and db (out
 * elements) may each be NULL when not wanted. dx is overwritten; dw and db are overwritten, or
 * added to when accumulate is non-zero (as PyTorch accumulates .grad). Outputs may not overlap
 * the inputs or each other. NaN in dy or saved gives NaN in the gradients that depend on it
 * (ReLU, as PyTorch, drops dy where y <= 0). Deterministic: the same call on the same device
 * gives the same bits (db's column sums are fixed-order partial sums, no atomics). */
OCLML_API oclml_status oclml_linear_backward(oclml_ctx *ctx, oclml_activation act,
                                             const oclml_tensor *x, const oclml_tensor *w,
                                             const oclml_tensor *saved, const oclml_tensor *dy,
                                             oclml_tensor *dx, oclml_tensor *dw, oclml_tensor *db,
                                             int accumulate);

/* ---------------------------------------------------------------------------------------------
 * Convolution and pooling over NCHW tensors. Convolutions run as matrix products on the GEMM
 * kernels (the input unfolded a chunk of images at a time); every backward gathers (no atomics):
 * results are deterministic. NULL params: the defaults (oclml_conv2d_params_init's,
 * oclml_pool2d_params_init's).
 * ------------------------------------------------------------------------------------------- */
typedef struct oclml_conv2d_params {
    size_t struct_size;         /* sizeof(oclml_conv2d_params): oclml_conv2d_params_init sets it */
    unsigned stride[2];         /* rows, columns; default 1 */
    unsigned pad_before[2];     /* top, left; default 0 */
    unsigned pad_after[2];      /* bottom, right; default 0 (TF/JAX "SAME" with even kernels pads
                                   one more after than before) */
    unsigned dilation[2];       /* default 1 */
    unsigned groups;            /* default 1; input and output channels divisible by it */
    unsigned output_padding[2]; /* transposed convolution only: extra output rows, columns */
} oclml_conv2d_params;
OCLML_API oclml_status oclml_conv2d_params_init(oclml_conv2d_params *params);

/* y = conv2d(x, w) + b (PyTorch's Conv2d, cross-correlation): x [N, C, H, W], w [K, C/groups,
 * R, S], b [K] or NULL, y [N, K, P, Q] with P = (H + pad_before + pad_after - dilation (R - 1) -
 * 1) / stride + 1 (rounded down), Q likewise. */
OCLML_API oclml_status oclml_conv2d(oclml_ctx *ctx, const oclml_conv2d_params *params,
                                    const oclml_tensor *x, const oclml_tensor *w,
                                    const oclml_tensor *b, oclml_tensor *y);
/* How oclml_conv2d runs this convolution on this context, in words (for benchmarks and logs):
 * as a product with the images (1x1), as an implicit GEMM whose loads gather the columns from
 * x (where the GEMM runs on tensor cores; tuning key conv.implicit), or unfolded in chunks of
 * images then multiplied; the GEMM plan, and how the gradients run. Only x's and w's shapes are
 * read. */
OCLML_API oclml_status oclml_conv2d_plan(oclml_ctx *ctx, const oclml_conv2d_params *params,
                                         const oclml_tensor *x, const oclml_tensor *w, char *text,
                                         size_t len);
/* The gradients of oclml_conv2d given dy (y's shape): dx (x's shape), dw (w's shape), db (K)
 * may each be NULL. dx is overwritten; dw and db are overwritten, or added to when accumulate is
 * non-zero. */
OCLML_API oclml_status oclml_conv2d_backward(oclml_ctx *ctx, const oclml_conv2d_params *params,
                                             const oclml_tensor *x, const oclml_tensor *w,
                                             const oclml_tensor *dy, oclml_tensor *dx,
                                             oclml_tensor *dw, oclml_tensor *db, int accumulate);
/* Transposed convolution (PyTorch's ConvTranspose2d, the decoders of image models): x [N, C, H,
 * W], w [C, K/groups, R, S], b [K] or NULL, y [N, K, P, Q] with P = (H - 1) stride - pad_before
 * - pad_after + dilation (R - 1) + output_padding + 1. */
OCLML_API oclml_status oclml_conv_transpose2d(oclml_ctx *ctx, const oclml_conv2d_params *params,
                                              const oclml_tensor *x, const oclml_tensor *w,
                                              const oclml_tensor *b, oclml_tensor *y);
OCLML_API oclml_status oclml_conv_transpose2d_backward(
    oclml_ctx *ctx, const oclml_conv2d_params *params, const oclml_tensor *x, const oclml_tensor *w,
    const oclml_tensor *dy, oclml_tensor *dx, oclml_tensor *dw, oclml_tensor *db, int accumulate);

typedef struct oclml_pool2d_params {
    size_t struct_size;    /* sizeof(oclml_pool2d_params): oclml_pool2d_params_init sets it */
    unsigned kernel[2];    /* window rows, columns; default 2 x 2 */
    unsigned stride[2];    /* default 0: the window size */
    unsigned pad[2];       /* on both sides; at most half the window; default 0 */
    int ceil_mode;         /* output sizes rounded up (PyTorch's ceil_mode); default 0 */
    int count_include_pad; /* average pooling divides by the whole window; default 1 */
} oclml_pool2d_params;
OCLML_API oclml_status oclml_pool2d_params_init(oclml_pool2d_params *params);

/* y = the maximum of each window of x [N, C, H, W] (NaN counts as the largest, as PyTorch);
 * y [N, C, P, Q], P = (H + 2 pad - kernel) / stride + 1 (rounded up with ceil_mode, where the
 * last window starts inside the input). */
OCLML_API oclml_status oclml_max_pool2d(oclml_ctx *ctx, const oclml_pool2d_params *params,
                                        const oclml_tensor *x, oclml_tensor *y);
/* dx (x's shape, overwritten) = dy routed to each window's first maximum in x (its last NaN
 * where it holds NaN, as PyTorch). */
OCLML_API oclml_status oclml_max_pool2d_backward(oclml_ctx *ctx, const oclml_pool2d_params *params,
                                                 const oclml_tensor *x, const oclml_tensor *dy,
                                                 oclml_tensor *dx);
/* y = max_pool2d(act(x)) with the activation fused into the pooling's read (x is the
 * pre-activation; act(x) is never stored): a convolution's activation and pooling in one pass. */
OCLML_API oclml_status oclml_act_max_pool2d(oclml_ctx *ctx, const oclml_pool2d_params *params,
                                            oclml_activation act, const oclml_tensor *x,
                                            oclml_tensor *y);
/* dx (x's shape, overwritten) = act'(x) times dy routed to each window's first maximum of act(x):
 * oclml_max_pool2d_backward on act(x) followed by oclml_unary_backward, in one pass. */
OCLML_API oclml_status oclml_act_max_pool2d_backward(oclml_ctx *ctx,
                                                     const oclml_pool2d_params *params,
                                                     oclml_activation act, const oclml_tensor *x,
                                                     const oclml_tensor *dy, oclml_tensor *dx);
/* y = the mean of each window (padding counted as zeros with count_include_pad, else left out). */
OCLML_API oclml_status oclml_avg_pool2d(oclml_ctx *ctx, const oclml_pool2d_params *params,
                                        const oclml_tensor *x, oclml_tensor *y);
/* dx (overwritten) = each window's share of dy. */
OCLML_API oclml_status oclml_avg_pool2d_backward(oclml_ctx *ctx, const oclml_pool2d_params *params,
                                                 const oclml_tensor *dy, oclml_tensor *dx);

/* ---------------------------------------------------------------------------------------------
 * Row ops: softmax, norms and row reductions work along the last axis; a tensor of any rank is
 * rows x cols with cols its last dimension. Rows of any length work (1 to over 1,000,000
 * columns); the kernel variant is chosen per device from its properties and the row length.
 * Outputs may alias their own-shaped input (in place).
 * ------------------------------------------------------------------------------------------- */

/* Describes the kernel variant a row op runs for rows x cols on this device (for benchmarks and
 * logs). op: "softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "layernorm",
 * "rmsnorm", "layernorm_backward", "rmsnorm_backward" or "cross_entropy" (class indices as
 * targets). Plans only: builds nothing. */
OCLML_API oclml_status oclml_op_variant(oclml_ctx *ctx, const char *op, size_t rows, size_t cols,
                                        char *text, size_t len);

/* y = softmax(x) along the last axis, stable (the row max is subtracted). -inf inputs are
 * masked positions and get 0; a fully masked row gives all zeros. NaN in a row makes the whole
 * row NaN; +inf in a row gives NaN (inf - inf). */
OCLML_API oclml_status oclml_softmax(oclml_ctx *ctx, const oclml_tensor *x, oclml_tensor *y);
/* y = log_softmax(x) = x - max - log(sum(exp(x - max))); masked positions and fully masked rows
 * give -inf. */
OCLML_API oclml_status oclml_log_softmax(oclml_ctx *ctx, const oclml_tensor *x, oclml_tensor *y);
/* dx = y * (dy - sum(y * dy)) per row, from the forward output y. */
OCLML_API oclml_status oclml_softmax_backward(oclml_ctx *ctx, const oclml_tensor *y,
                                              const oclml_tensor *dy, oclml_tensor *dx);
/* dx = dy - exp(y) * sum(dy) per row, from the forward output y = log_softmax(x). */
OCLML_API oclml_status oclml_log_softmax_backward(oclml_ctx *ctx, const oclml_tensor *y,
                                                  const oclml_tensor *dy, oclml_tensor *dx);

/* LayerNorm over the last axis: y = (x - mean) * rstd * gamma + beta with the population
 * variance and rstd = 1 / sqrt(var + eps). gamma and beta are [cols] and may be NULL (1 and 0).
 * mean and rstd are [rows] outputs saved for the backward, and may be NULL. The variance is
 * computed two-pass (long rows: Chan's merge), so a row of equal values gives beta exactly.
 * Dtypes (the norms, their backwards and the fused residual + norm below alike): every tensor
 * any of fp32, bf16 and fp16, each its own, but the saved mean and rstd, fp32; the math is fp32,
 * each output rounded once to its dtype. An output may be its input in place only in the input's
 * dtype (an overlap of two dtypes is refused: OCLML_ERR_INVALID_ARGUMENT). */
OCLML_API oclml_status oclml_layernorm(oclml_ctx *ctx, const oclml_tensor *x,
                                       const oclml_tensor *gamma, const oclml_tensor *beta,
                                       float eps, oclml_tensor *y, oclml_tensor *mean,
                                       oclml_tensor *rstd);
/* Backward of LayerNorm from x, gamma (NULL: 1), the saved mean and rstd, and dy: dx, and the
 * parameter gradients dgamma = sum over rows of dy * xhat and dbeta = sum of dy ([cols], each
 * may be NULL; summed in fp32 and rounded once: fp32 ones for master gradients). Any dtypes as
 * oclml_layernorm's; mean and rstd fp32. */
OCLML_API oclml_status oclml_layernorm_backward(oclml_ctx *ctx, const oclml_tensor *x,
                                                const oclml_tensor *gamma, const oclml_tensor *mean,
                                                const oclml_tensor *rstd, const oclml_tensor *dy,
                                                oclml_tensor *dx, oclml_tensor *dgamma,
                                                oclml_tensor *dbeta);
/* RMSNorm: y = x * rstd * gamma with rstd = 1 / sqrt(mean(x^2) + eps); rstd may be NULL. Any
 * dtypes as oclml_layernorm's (rstd fp32), and so its backward. */
OCLML_API oclml_status oclml_rmsnorm(oclml_ctx *ctx, const oclml_tensor *x,
                                     const oclml_tensor *gamma, float eps, oclml_tensor *y,
                                     oclml_tensor *rstd);
OCLML_API oclml_status oclml_rmsnorm_backward(oclml_ctx *ctx, const oclml_tensor *x,
                                              const oclml_tensor *gamma, const oclml_tensor *rstd,
                                              const oclml_tensor *dy, oclml_tensor *dx,
                                              oclml_tensor *dgamma);

/* ---------------------------------------------------------------------------------------------
 * Elementwise ops. Outputs may alias inputs of the same shape. NaN in gives NaN out (relu, max
 * and min propagate NaN too); inputs of +-1e4 never overflow sigmoid, tanh, gelu or silu.
 * ------------------------------------------------------------------------------------------- */
typedef enum oclml_unary_op {
    OCLML_NEG,
    OCLML_ABS,
    OCLML_EXP,
    OCLML_LOG,
    OCLML_SQRT,
    OCLML_RSQRT,
    OCLML_RECIP,
    OCLML_RELU,
    OCLML_SIGMOID,
    OCLML_TANH,
    OCLML_GELU_ERF,  /* 0.5 x (1 + erf(x / sqrt 2)) */
    OCLML_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    OCLML_SILU,      /* x sigmoid(x) */
    OCLML_POW        /* x^p: through oclml_pow only */
} oclml_unary_op;

typedef enum oclml_binary_op {
    OCLML_ADD,
    OCLML_SUB,
    OCLML_MUL,
    OCLML_DIV,
    OCLML_MAX,
    OCLML_MIN
} oclml_binary_op;

/* y = f(x). */
OCLML_API oclml_status oclml_unary(oclml_ctx *ctx, oclml_unary_op op, const oclml_tensor *x,
                                   oclml_tensor *y);
/* dx = dy * f'(x), for every unary op (abs' (0) = 0, relu'(0) = 0). */
OCLML_API oclml_status oclml_unary_backward(oclml_ctx *ctx, oclml_unary_op op,
                                            const oclml_tensor *x, const oclml_tensor *dy,
                                            oclml_tensor *dx);
/* y = x^p (C pow semantics: a negative x with a non-integer p gives NaN) and its backward. */
OCLML_API oclml_status oclml_pow(oclml_ctx *ctx, const oclml_tensor *x, float p, oclml_tensor *y);
OCLML_API oclml_status oclml_pow_backward(oclml_ctx *ctx, const oclml_tensor *x, float p,
                                          const oclml_tensor *dy, oclml_tensor *dx);
/* y = a op b, where b has a's shape, or is a 1-D row of a's last dimension broadcast over every
 * row (bias add). */
OCLML_API oclml_status oclml_binary(oclml_ctx *ctx, oclml_binary_op op, const oclml_tensor *a,
                                    const oclml_tensor *b, oclml_tensor *y);
/* y = a op s. */
OCLML_API oclml_status oclml_binary_scalar(oclml_ctx *ctx, oclml_binary_op op,
                                           const oclml_tensor *a, float s, oclml_tensor *y);

/* ---------------------------------------------------------------------------------------------
 * Dropout. Element i (its flat index) of a call is kept iff its Philox4x32-10 uniform under
 * (seed, offset) is >= p, and scaled by 1 / (1 - p): word i % 4 of Philox at counter (offset +
 * i / 4, "drop", 0) with the seed as key, (word >> 8) 2^-24 (cl/include/philox.h). A counter-based
 * generator keeps no state: a backward regenerates the forward's mask, and seed + offset
 * reproduce a call on any device. A call uses counters offset .. offset +
 * oclml_dropout_counters(n) - 1: advance offset by that much between calls that must draw
 * differently. Every op that drops (these, the fused residual + norm) follows this rule, so
 * their masks agree element for element.
 * ------------------------------------------------------------------------------------------- */
typedef struct oclml_dropout_params {
    size_t struct_size; /* sizeof(oclml_dropout_params): oclml_dropout_params_init sets it */
    float p;            /* drop probability in [0, 1]; 0 (default): identity; 1: all dropped */
    uint64_t seed;      /* Philox key (default 0) */
    uint64_t offset;    /* Philox counter offset (default 0) */
} oclml_dropout_params;
OCLML_API oclml_status oclml_dropout_params_init(oclml_dropout_params *params);
/* Counters a call over n elements uses: ceil(n / 4). */
OCLML_API uint64_t oclml_dropout_counters(size_t n);
/* y = x * keep / (1 - p): a dropped element is x * 0 (NaN stays NaN, as PyTorch's); p = 1 gives
 * x * 0 everywhere. y may be x itself (in place: the same start and element size), no other
 * overlap. NULL params: the defaults (p = 0, the identity); p outside [0, 1] or NaN, or
 * struct_size not sizeof: OCLML_ERR_INVALID_ARGUMENT. One launch.
 * dtypes (this op, its backward and oclml_dropout_add): every tensor fp32, bf16 or fp16, each its
 * own; the math is fp32 and the output rounded once to its dtype. keep depends on (seed, offset)
 * and the element's index alone, so a 16-bit call drops exactly the elements the fp32 call
 * drops. */
OCLML_API oclml_status oclml_dropout(oclml_ctx *ctx, const oclml_dropout_params *params,
                                     const oclml_tensor *x, oclml_tensor *y);
/* dx = dy * keep / (1 - p), the forward's mask regenerated from the same params; dx may be dy. */
OCLML_API oclml_status oclml_dropout_backward(oclml_ctx *ctx, const oclml_dropout_params *params,
                                              const oclml_tensor *dy, oclml_tensor *dx);
/* The residual add with dropout on the branch: r = x + dropout(y), x, y, r of one shape; r may be
 * x (the residual stream updated in place) or y. Its backward: dx = dr, dy =
 * oclml_dropout_backward(dr). */
OCLML_API oclml_status oclml_dropout_add(oclml_ctx *ctx, const oclml_dropout_params *params,
                                         const oclml_tensor *x, const oclml_tensor *y,
                                         oclml_tensor *r);

/* A linear layer with dropout after its activation in the product's epilogue: y =
 * dropout(act(x W^T + b)), y's mask the one oclml_dropout(params) gives a tensor of y's shape, so
 * the call equals oclml_linear then oclml_dropout on y, bit for bit (p = 0: oclml_linear). pre
 * (NULL or y's shape) receives x W^T + b. Arguments and errors as oclml_linear's, and NULL or bad
 * params as oclml_dropout's. */
OCLML_API oclml_status oclml_linear_dropout(oclml_ctx *ctx, oclml_activation act,
                                            const oclml_dropout_params *params,
                                            const oclml_tensor *x, const oclml_tensor *w,
                                            const oclml_tensor *b, oclml_tensor *y,
                                            oclml_tensor *pre);
/* Its gradients given dy, the mask regenerated from the same params: as oclml_linear_backward,
 * except that the derivative of every activation but NONE reads the pre-activation pre (y is
 * scaled or zeroed by the mask), so the forward must have written pre. */
OCLML_API oclml_status oclml_linear_dropout_backward(
    oclml_ctx *ctx, oclml_activation act, const oclml_dropout_params *params, const oclml_tensor *x,
    const oclml_tensor *w, const oclml_tensor *pre, const oclml_tensor *dy, oclml_tensor *dx,
    oclml_tensor *dw, oclml_tensor *db, int accumulate);

/* ---------------------------------------------------------------------------------------------
 * The fused residual + norm of a pre-norm transformer block: the residual add (with dropout on
 * the branch) and the next norm in one pass over the rows, writing the new residual stream and
 * the normalised output; its backward adds the stream's gradient and writes the branch's.
 * ------------------------------------------------------------------------------------------- */

/* r = x + dropout(y) (drop NULL or p = 0: x + y, bit for bit oclml_dropout_add's r), then out =
 * layernorm(r) with gamma and beta (NULL: 1 and 0) and eps, as oclml_layernorm; mean and rstd
 * ([rows], each may be NULL) are saved for the backward. x, y, r and out have one shape, the last
 * axis normalised. r may be x (the stream updated in place); no other overlap. Rows up to the
 * register path's length take one launch; longer ones two (r with the chunks' statistics, then
 * out, mean and rstd from r). NaN in a row of x or y gives NaN in that row of r and out; a dropped
 * NaN of y stays NaN (y * 0, as oclml_dropout's). Dtypes: x, y, r, out, gamma and beta each any
 * (mean and rstd fp32), as oclml_layernorm's; r = x + dropout(y) is rounded once to r's dtype and
 * out normalises r as stored, the r the backward reads; r may be x only in x's dtype. */
OCLML_API oclml_status oclml_residual_layernorm(oclml_ctx *ctx, const oclml_dropout_params *drop,
                                                const oclml_tensor *x, const oclml_tensor *y,
                                                const oclml_tensor *gamma, const oclml_tensor *beta,
                                                float eps, oclml_tensor *r, oclml_tensor *out,
                                                oclml_tensor *mean, oclml_tensor *rstd);
/* Its backward from the saved r, gamma (NULL: 1), mean, rstd, dout (out's gradient) and dr (the
 * gradient reaching r from later in the stream; NULL: none): dx = dr + layernorm_backward(dout),
 * the old stream's gradient (dx may be dr); dy = dropout_backward(dx) with the forward's drop, the
 * branch's gradient (NULL: not wanted; without dropout, in dx's dtype, it equals dx); dgamma
 * and dbeta ([cols], each may be NULL), overwritten. One launch with dgamma or dbeta (two: their
 * partial sums' finish), one without; rows past the register path two (the row sums, then dx and
 * dy) and two more for dgamma and dbeta. Dtypes: r, gamma, dout, dr, dx, dy, dgamma and dbeta
 * each any (mean and rstd fp32); dx and dy are each rounded once from the fp32 dx (dy is not dx's
 * rounded value masked); dx may be dr only in dr's dtype. */
OCLML_API oclml_status oclml_residual_layernorm_backward(
    oclml_ctx *ctx, const oclml_dropout_params *drop, const oclml_tensor *r,
    const oclml_tensor *gamma, const oclml_tensor *mean, const oclml_tensor *rstd,
    const oclml_tensor *dout, const oclml_tensor *dr, oclml_tensor *dx, oclml_tensor *dy,
    oclml_tensor *dgamma, oclml_tensor *dbeta);
/* The same with RMSNorm: out = r * rstd * gamma. */
OCLML_API oclml_status oclml_residual_rmsnorm(oclml_ctx *ctx, const oclml_dropout_params *drop,
                                              const oclml_tensor *x, const oclml_tensor *y,
                                              const oclml_tensor *gamma, float eps, oclml_tensor *r,
                                              oclml_tensor *out, oclml_tensor *rstd);
OCLML_API oclml_status oclml_residual_rmsnorm_backward(
    oclml_ctx *ctx, const oclml_dropout_params *drop, const oclml_tensor *r,
    const oclml_tensor *gamma, const oclml_tensor *rstd, const oclml_tensor *dout,
    const oclml_tensor *dr, oclml_tensor *dx, oclml_tensor *dy, oclml_tensor *dgamma);

/* ---------------------------------------------------------------------------------------------
 * Reductions. NaN propagates: sums through the arithmetic; max and argmax treat NaN as the
 * largest value (argmax gives the first NaN's index), as PyTorch does. Argmax gives the first
 * index of the maximum as a float, exact for indices below 2^24 (larger extents are refused).
 * ------------------------------------------------------------------------------------------- */
typedef enum oclml_reduce_op {
    OCLML_REDUCE_SUM,
    OCLML_REDUCE_MAX,
    OCLML_REDUCE_MEAN,
    OCLML_REDUCE_ARGMAX
} oclml_reduce_op;

/* y[r] = op over the last axis of row r; y has as many elements as x has rows. */
OCLML_API oclml_status oclml_reduce_rows(oclml_ctx *ctx, oclml_reduce_op op, const oclml_tensor *x,
                                         oclml_tensor *y);
/* y[0] = op over every element of x; y has one element. */
OCLML_API oclml_status oclml_reduce_all(oclml_ctx *ctx, oclml_reduce_op op, const oclml_tensor *x,
                                        oclml_tensor *y);
/* y = op over the axes axes[0..naxes) of x (1 <= naxes <= x's rank, each axis once, any order;
 * negative axes count from the end, -1 the last). y's shape is x's with every reduced axis
 * either kept as 1 (PyTorch's keepdim=True) or removed (keepdim=False; [1] when none is left);
 * nothing else is accepted, and y must not overlap x. SUM, MEAN and MAX take any set of axes
 * (column sums of [rows x cols], a bias gradient: axes {0}; NCHW conv bias: {0, 2, 3});
 * ARGMAX takes exactly one axis and gives the index along it. NaN as above. Deterministic: no
 * atomics, a fixed order of summation for a given shape and device. */
OCLML_API oclml_status oclml_reduce_axes(oclml_ctx *ctx, oclml_reduce_op op, const oclml_tensor *x,
                                         const int *axes, int naxes, oclml_tensor *y);

/* ---------------------------------------------------------------------------------------------
 * Layout ops over contiguous tensors of 1 to 4 dimensions (cl/ops/layout.cl). Axes may be
 * negative (counted from the end). Outputs must not overlap inputs, except where stated.
 * ------------------------------------------------------------------------------------------- */

/* y = x + b broadcast along one axis: b has x.shape[axis] elements, y[..., i, ...] =
 * x[..., i, ...] + b[i] (NCHW conv bias: axis 1; a linear bias: the last axis). y has x's shape
 * and may be x itself (in place). */
OCLML_API oclml_status oclml_add_bias(oclml_ctx *ctx, const oclml_tensor *x, const oclml_tensor *b,
                                      int axis, oclml_tensor *y);
/* y = x with its axes permuted (torch.permute): y.shape[i] = x.shape[perm[i]], perm lists each of
 * x's axes once. NCHW -> NHWC is {0, 2, 3, 1}. */
OCLML_API oclml_status oclml_permute(oclml_ctx *ctx, const oclml_tensor *x, const int *perm,
                                     oclml_tensor *y);
/* y = x with axes dim0 and dim1 swapped (torch.transpose; a matrix transpose: 0, 1). */
OCLML_API oclml_status oclml_transpose_axes(oclml_ctx *ctx, const oclml_tensor *x, int dim0,
                                            int dim1, oclml_tensor *y);
/* y = xs[0..n) joined along axis (torch.cat): every part has y's rank and shape except along
 * axis, where their sizes add up to y's. One launch per 8 parts. dtypes (concat and split):
 * any, one for every tensor of the call (the elements are moved as they are). */
OCLML_API oclml_status oclml_concat(oclml_ctx *ctx, const oclml_tensor *const *xs, int n, int axis,
                                    oclml_tensor *y);
/* The inverse of concat: ys[0..n) = consecutive slices of x along axis, sized by their shapes
 * (which must add up to x's along axis and match it elsewhere; no two may overlap). */
OCLML_API oclml_status oclml_split(oclml_ctx *ctx, const oclml_tensor *x, int axis,
                                   oclml_tensor *const *ys, int n);

/* ---------------------------------------------------------------------------------------------
 * Embedding (cl/ops/embedding.cl): rows of a table gathered by ids, and the table's gradient
 * scattered back deterministically. Learned position embeddings are the same op with ids =
 * positions (0, 1, ..., T - 1 per sequence) and the position table.
 * ------------------------------------------------------------------------------------------- */

/* Embedding lookup: y[n, :] = table[ids[n], :] for the N elements of ids in order. ids: a tensor
 * of any shape holding integer ids in [0, V) as floats (as class indices are); table [V x D]; y
 * has N x D elements and last dimension D ([N x D], or ids' shape + [D]). An id that is not an
 * integer in [0, V) (NaN included) gives a row of NaN. y may not overlap ids or the table; V at
 * most 2^24 (every id exact as a float). One launch. dtypes: table and y fp32, bf16 or fp16
 * each (y the table's value rounded once to y's dtype); ids fp32. */
OCLML_API oclml_status oclml_embedding(oclml_ctx *ctx, const oclml_tensor *ids,
                                       const oclml_tensor *table, oclml_tensor *y);
/* Its backward: dtable[v, :] = (accumulate ? dtable[v, :] : 0) + the sum of dy[n, :] over the n
 * with ids[n] == v, summed in token order, so that two runs agree bit for bit (no float
 * atomics). accumulate = 1 adds to what dtable holds (a tied output projection's gradient);
 * 0 overwrites it (rows no id names become 0). Invalid ids contribute nothing. ids and dy as
 * the forward's ids and y; dtable [V x D] may not overlap ids or dy. Six launches: five sort
 * the tokens by id in scratch memory, the last writes every row of dtable, so a failure part
 * way leaves dtable as it was. dtypes: dy and dtable fp32, bf16 or fp16 each; the sums are fp32
 * (from dtable's value as its dtype holds it where accumulating), rounded once to dtable's dtype;
 * ids fp32. */
OCLML_API oclml_status oclml_embedding_backward(oclml_ctx *ctx, const oclml_tensor *ids,
                                                const oclml_tensor *dy, oclml_tensor *dtable,
                                                int accumulate);

/* ---------------------------------------------------------------------------------------------
 * Losses with PyTorch's semantics (torch.nn.functional). One call computes the loss and the
 * gradients together from one read of the inputs: `loss` (NULL: not computed) and the gradient
 * outputs (NULL: not computed); at least one must be given. dloss is the upstream gradient of
 * the loss (NULL: 1), one element for MEAN and SUM, loss's shape for NONE (on the device, so a
 * loss scale or a backward through a weighted sum needs no host round trip); the gradients are
 * dloss times d(loss)/d(input), overwritten. Reductions run in a fixed order (no atomics):
 * results are bit-for-bit repeatable on a device. A gradient may be its own input (in place:
 * dlogits = logits); no other output may overlap an input or another output.
 * NaN: a NaN input makes its row's loss and gradients NaN (cross-entropy, KL) or its element's
 * (pointwise losses), and so a MEAN or SUM loss NaN.
 * ------------------------------------------------------------------------------------------- */
typedef enum oclml_loss_reduction {
    OCLML_LOSS_MEAN = 0, /* PyTorch's default */
    OCLML_LOSS_SUM = 1,
    OCLML_LOSS_NONE = 2
} oclml_loss_reduction;

typedef struct oclml_loss_params {
    size_t struct_size;             /* sizeof(oclml_loss_params): oclml_loss_params_init sets it */
    oclml_loss_reduction reduction; /* default MEAN */
    int probabilities;     /* cross-entropy: target holds class probabilities (logits' shape);
                              default 0: class indices, one per row */
    int ignore_index;      /* cross-entropy on class indices: rows with this target add 0 to the
                              loss, get zero gradients and are left out of the mean; default -100 */
    float label_smoothing; /* cross-entropy: in [0, 1], default 0 */
    float delta;           /* Huber: the switch from quadratic to linear, > 0; default 1 */
    const oclml_tensor *pos_weight; /* BCE with logits: NULL, or one weight per class (the last
                                       dimension) multiplying the positive term */
    const oclml_tensor *weight;     /* cross-entropy: NULL, or one weight per class (PyTorch's
                                       weight; the mean divides by the targets' weights) */
} oclml_loss_params;
/* Sets the defaults above. Every loss also takes params = NULL for the defaults. */
OCLML_API oclml_status oclml_loss_params_init(oclml_loss_params *params);

/* F.cross_entropy over the last axis (rows = the leading dimensions, C = the last), fused with
 * log-softmax: logits [..., C]; target: class indices stored as floats (argmax's format, integers
 * exact below 2^24), one per row (any shape with that many elements), or with
 * params.probabilities class probabilities of logits' shape. loss: one element (MEAN: over the
 * rows not ignored, NaN when all are, or with params.weight divided by the sum of their targets'
 * weights; with probabilities over all rows; SUM), or one per row (NONE, 0 for ignored rows).
 * dlogits (logits' shape, may be logits itself) = dloss (softmax - t') / count, t' = (1 -
 * label_smoothing) target + label_smoothing / C (with class weights the gradient of PyTorch's
 * weighted loss). Rows that fit a
 * work-group's registers (up to 32 floats a work-item: 32768 classes on 1024-wide work-groups)
 * read the logits once and write dlogits once, and so do rows of class indices up to 51200
 * classes where 1024-wide work-groups and 48 KiB of local memory run (registers plus local
 * memory), except on GPUs, where such rows take the chunked path (faster there); longer rows
 * read them twice. NaN in a row makes its loss and dlogits NaN, and so does a +inf logit (inf -
 * inf, as PyTorch's log_softmax). A class index that is
 * neither ignore_index nor an integer in [0, C) makes its row's loss and gradients NaN (PyTorch
 * raises an error there). A class with target probability 0 adds nothing to the loss even where
 * its logit is -inf.
 * dtypes: logits and dlogits fp32, bf16 or fp16 each (dlogits in place: logits' dtype); the math
 * is fp32 (each logit read as a float) and each dlogit rounded once to its dtype. target,
 * params.weight, dloss and loss are fp32. */
OCLML_API oclml_status oclml_cross_entropy(oclml_ctx *ctx, const oclml_loss_params *params,
                                           const oclml_tensor *logits, const oclml_tensor *target,
                                           const oclml_tensor *dloss, oclml_tensor *loss,
                                           oclml_tensor *dlogits);
/* F.mse_loss: (input - target)^2; dinput = dloss 2 (input - target) (/ n for MEAN). input, target
 * and dinput of one shape; loss one element (MEAN over all elements, SUM) or input's element count
 * (NONE). */
OCLML_API oclml_status oclml_mse_loss(oclml_ctx *ctx, const oclml_loss_params *params,
                                      const oclml_tensor *input, const oclml_tensor *target,
                                      const oclml_tensor *dloss, oclml_tensor *loss,
                                      oclml_tensor *dinput);
/* F.huber_loss with params.delta: 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta),
 * d = input - target; shapes as oclml_mse_loss. */
OCLML_API oclml_status oclml_huber_loss(oclml_ctx *ctx, const oclml_loss_params *params,
                                        const oclml_tensor *input, const oclml_tensor *target,
                                        const oclml_tensor *dloss, oclml_tensor *loss,
                                        oclml_tensor *dinput);
/* F.binary_cross_entropy_with_logits, in PyTorch's overflow-free form: (1 - t) x + w
 * (log1p(exp(-|x|)) + max(-x, 0)), w = 1 + (pos_weight - 1) t; dlogits = dloss ((1 - t) - w
 * sigmoid(-x)) (sigmoid(x) - t without pos_weight). Shapes as oclml_mse_loss. */
OCLML_API oclml_status oclml_bce_with_logits(oclml_ctx *ctx, const oclml_loss_params *params,
                                             const oclml_tensor *logits, const oclml_tensor *target,
                                             const oclml_tensor *dloss, oclml_tensor *loss,
                                             oclml_tensor *dlogits);
/* KL(P || Q) between categorical distributions given as logits over the last axis, P =
 * softmax(p_logits), Q = softmax(q_logits) (the KL terms of world models): per row sum_j P_j
 * (log P_j - log Q_j), i.e. F.kl_div(log_softmax(q), log_softmax(p), log_target=True) summed
 * over the last axis. loss: one element (MEAN over rows: PyTorch's "batchmean" for 2-D inputs;
 * SUM) or one per row (NONE). dp = dloss P (log P - log Q - KL), dq = dloss (Q - P), each
 * p_logits' shape, NULL to skip. Classes where p_logits is -inf (P = 0) add nothing. */
OCLML_API oclml_status oclml_kl_div_logits(oclml_ctx *ctx, const oclml_loss_params *params,
                                           const oclml_tensor *p_logits,
                                           const oclml_tensor *q_logits, const oclml_tensor *dloss,
                                           oclml_tensor *loss, oclml_tensor *dp, oclml_tensor *dq);

/* ---------------------------------------------------------------------------------------------
 * Recurrent ops (RSSM.md). GRU weights use torch.nn.GRUCell's layout, so PyTorch weights load
 * as they are: W_ih [3D x I], W_hh [3D x D], b_ih, b_hh [3D], gate blocks (r, z, n).
 * ------------------------------------------------------------------------------------------- */
typedef enum oclml_gru_variant {
    OCLML_GRU_TORCH = 0, /* n = tanh(W_in x + b_in + r * (W_hn h + b_hn)): PyTorch, cuDNN */
    OCLML_GRU_CHO = 1    /* n = tanh(W_in x + b_in + W_hn (r * h) + b_hn): the original GRU */
} oclml_gru_variant;

/* h_new = GRU(x, h) for a batch: x [B x I], h [B x D], h_new [B x D] (must not overlap x or h).
 * b_ih and b_hh may be NULL (zero). No size caps. Batches below 128 run as one fused launch
 * (TORCH) or two (CHO, whose n gate needs r * h of every unit first); TORCH batches from 128 as
 * one tiled kernel that computes [x | h] times the gates' weight rows and applies the gates in
 * its epilogue (on devices with TF32 tensor cores through the 3xTF32 split, at fp32 accuracy). */
OCLML_API oclml_status oclml_gru_step(oclml_ctx *ctx, oclml_gru_variant variant,
                                      const oclml_tensor *x, const oclml_tensor *h,
                                      const oclml_tensor *w_ih, const oclml_tensor *w_hh,
                                      const oclml_tensor *b_ih, const oclml_tensor *b_hh,
                                      oclml_tensor *h_new);

/* Backward of oclml_gru_step from x, h, the weights and dh_new (the gradient of h_new): dx
 * [B x I], dh [B x D], dw_ih [3D x I], dw_hh [3D x D], db_ih, db_hh [3D]. The gates are
 * recomputed; gradients are written, not accumulated; any output may be NULL. */
OCLML_API oclml_status oclml_gru_step_backward(
    oclml_ctx *ctx, oclml_gru_variant variant, const oclml_tensor *x, const oclml_tensor *h,
    const oclml_tensor *w_ih, const oclml_tensor *w_hh, const oclml_tensor *b_ih,
    const oclml_tensor *b_hh, const oclml_tensor *dh_new, oclml_tensor *dx, oclml_tensor *dh,
    oclml_tensor *dw_ih, oclml_tensor *dw_hh, oclml_tensor *db_ih, oclml_tensor *db_hh);

/* GRU over T steps with inputs known in advance: x [T x B x I], h0 [B x D], every hidden state
 * into hs [T x B x D] (hs[t] = GRU(x[t], hs[t-1])): one oclml_gru_step launch per step, each
 * reading its x[t] in place, enqueued back to back (no host round trip). */
OCLML_API oclml_status oclml_gru_sequence(oclml_ctx *ctx, oclml_gru_variant variant,
                                          const oclml_tensor *x, const oclml_tensor *h0,
                                          const oclml_tensor *w_ih, const oclml_tensor *w_hh,
                                          const oclml_tensor *b_ih, const oclml_tensor *b_hh,
                                          oclml_tensor *hs);

/* RSSM ensemble rollout (RSSM.md): E members with independent weights imagine T steps on the
 * device in one call, with no host round trip between steps. Per member e, tensors stack the
 * members on their first dimension. */
typedef enum oclml_rssm_mode { OCLML_RSSM_MEAN = 0, OCLML_RSSM_SAMPLE = 1 } oclml_rssm_mode;

typedef struct oclml_rssm_params {
    size_t struct_size; /* sizeof(oclml_rssm_params), set by oclml_rssm_params_init */
    oclml_gru_variant variant;
    size_t steps;    /* T >= 1 */
    size_t groups;   /* G */
    size_t classes;  /* C; S = G * C must match z's size */
    size_t feedback; /* k, 0 <= k <= F: prediction shift register in f's first k slots */
    float unimix;    /* u in [0, 1): pi = (1 - u) softmax + u / C; RSSM.md's default 0.01 */
    oclml_rssm_mode mode;
    uint64_t seed;        /* SAMPLE mode: Philox4x32-10 key */
    uint64_t step_offset; /* SAMPLE mode: counter of the first step, to continue a rollout */
} oclml_rssm_params;

/* Fills c with RSSM.md's defaults: TORCH, T 50, G 16, C 16, k 8, u 0.01, MEAN, seed 0, and sets
 * struct_size (a config without it is refused). */
OCLML_API oclml_status oclml_rssm_params_init(oclml_rssm_params *c);

typedef struct oclml_rssm_weights {
    const oclml_tensor *w_ih; /* [E x 3D x (F + S)] */
    const oclml_tensor *w_hh; /* [E x 3D x D] */
    const oclml_tensor *b_ih; /* [E x 3D], may be NULL */
    const oclml_tensor *b_hh; /* [E x 3D], may be NULL */
    const oclml_tensor *w_p;  /* prior head [E x S x D] */
    const oclml_tensor *b_p;  /* [E x S] */
    const oclml_tensor *w_y;  /* prediction head [E x (D + S)] */
    const oclml_tensor *b_y;  /* [E] */
} oclml_rssm_weights;

typedef struct oclml_rssm_state {
    const oclml_tensor *h;  /* [E x D] */
    const oclml_tensor *z;  /* [E x S] */
    const oclml_tensor *f;  /* [E x F], or [F] shared by every member */
    const oclml_tensor *y0; /* [E] the value step deltas start from; NULL: 0 */
} oclml_rssm_state;

/* Outputs; every one but y may be NULL. */
typedef struct oclml_rssm_outputs {
    oclml_tensor *y;                           /* [E x T] predictions y_1 .. y_T */
    oclml_tensor *entropy;                     /* [E x T] H_t */
    oclml_tensor *hnorm;                       /* [E x T] |h_t+1| */
    oclml_tensor *h_final, *z_final, *f_final; /* [E x D], [E x S], [E x F]: to continue */
    oclml_tensor *y_mean, *y_std;              /* [T] over members (population std) */
    oclml_tensor *deltas;                      /* [E x T] |y_t+1 - y_t| */
    oclml_tensor *variance, *smoothness, *total_entropy; /* [E] */
} oclml_rssm_outputs;

/* Runs the rollout: one launch for all T steps (on NVIDIA GPUs each member spread over
 * compute units / E work-groups), then one for the summary. NULL params: the defaults
 * (oclml_rssm_params_init's). Invalid configurations (G * C not S,
 * k > F, u outside [0, 1), T = 0, shape mismatches) return a status and enqueue nothing. A
 * member's state (F + S + 2D floats, plus a few KB) must fit the device's local memory, else
 * OCLML_ERR_UNSUPPORTED: on a 48 KB device D up to about 4900 with F 64 and a 32x32 latent. */
OCLML_API oclml_status oclml_rssm_rollout(oclml_ctx *ctx, const oclml_rssm_params *config,
                                          const oclml_rssm_weights *weights,
                                          const oclml_rssm_state *start,
                                          const oclml_rssm_outputs *out);

/* Training-history encoder (RSSM.md): series [B x 2 x N] holds, per batch entry, a loss and a
 * gradient-norm history (oldest first); lengths [B] (float counts, NULL: all N) says how much of
 * each is real. features [B x 64]: ((series * 4) + window) * 8 + statistic, windows the last 8,
 * 32, 128 and all values, statistics mean, std (population), min, max, last, least-squares slope
 * per step, mean |first difference|, (last - first) / (|first| + 1e-8). A window longer than the
 * history uses all of it; an empty history gives zeros; a history of one value gives slope and
 * std 0. */
OCLML_API oclml_status oclml_history_encode(oclml_ctx *ctx, const oclml_tensor *series,
                                            const oclml_tensor *lengths, oclml_tensor *features);

/* ---------------------------------------------------------------------------------------------
 * Optimizers over a parameter arena (cl/ops/optim.cl), with torch.optim's semantics.
 *
 * An arena holds a model's parameters and their gradients in two flat device buffers, each
 * tensor at an element offset that is a multiple of 16, the gaps (padding) zero. The arena hands
 * out tensor views of each parameter and gradient (owned by the arena: valid until
 * oclml_arena_destroy, which must come before oclml_ctx_destroy); ops read and write them as
 * any tensor. An optimizer then steps a range of the arena's tensors (a parameter group) in one
 * launch, however many tensors there are, with 64-bit offsets, float4 streaming (each byte of
 * p, g and the state read and written once: Adam moves 28 bytes a parameter), plus one check
 * pass when clipping or skipping on inf/NaN. Several optimizers over disjoint ranges of one
 * arena make param groups (e.g. no weight decay on biases and norms: put them last).
 *
 * Device-side scalars: the learning rate, the gradient scale (gradients are divided by it: a
 * loss scale), the step count, the found-inf flag and the last gradient norm live in a small
 * device block. The setters below enqueue writes to it (no wait); each step reads it and
 * advances the step count on the device; a step never waits on the host. One optimizer object is
 * for one thread at a time.
 *
 * Update per element, g the gradient divided by the gradient scale and multiplied by the clip
 * coefficient, negated when maximize; t the step count after the increment; bc1 = 1 - beta1^t,
 * bc2 = 1 - beta2^t (both 1 with bias_correction 0):
 *   SGD:    g += wd p; with momentum: b = (t == 1 ? g : momentum b + (1 - dampening) g),
 *           g = nesterov ? g + momentum b : b;  p -= lr g
 *   Adam:   g += wd p; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
 *           amsgrad: vmax = max(vmax, v), v = vmax;
 *           p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
 *   AdamW:  Adam with p *= 1 - lr wd first instead of g += wd p (decoupled decay)
 *   LaProp: (timm's LaProp) v = beta2 v + (1 - beta2) g^2 (amsgrad as Adam);
 *           m = beta1 m + (1 - beta1) lr g / (sqrt(v / bc2) + eps);  s = beta1 s + (1 - beta1) lr;
 *           p -= (lr / s) m (bc1 = s / lr: the lr-weighted correction; 1 when lr is 0);
 *           p -= lr wd p (decoupled, after the update)
 * State layout (oclml_optim_state, flat buffers of the group's range: element j belongs to the
 * arena element oclml_arena_offset(first) + j): SGD with momentum: 0 momentum_buffer; Adam,
 * AdamW, LaProp: 0 exp_avg, 1 exp_avg_sq, 2 max_exp_avg_sq (amsgrad). All start at zero; the
 * step count is torch's state['step'].
 *
 * Clipping by the global norm (max_grad_norm > 0, torch.nn.utils.clip_grad_norm_ on the group's
 * gradients after unscaling): a check pass writes fixed per-work-group partial sums of g^2, and
 * the step's every work-group adds them in one order (deterministic), clip coefficient
 * min(1, max_norm / (norm + 1e-6)). Adaptive clipping (agc_clip > 0, timm's
 * adaptive_clip_grad; excludes max_grad_norm): per unit (a row of a tensor: all dimensions but
 * the first; a 1-D tensor is one unit) g *= clip max(|p|, agc_eps) / max(|g|, 1e-6) where
 * |g| >= clip max(|p|, agc_eps) (a NaN norm stays NaN, as torch.clamp: the unit becomes NaN);
 * it rewrites the gradients in place (still multiplied by the gradient scale). skip_nonfinite:
 * the check pass flags any inf or NaN gradient, and the step is skipped on the device:
 * parameters and state untouched, step count not advanced (as GradScaler.step). Without it,
 * NaN in a gradient gives NaN in its parameter and state.
 * ------------------------------------------------------------------------------------------- */
typedef struct oclml_arena oclml_arena;
typedef struct oclml_optim oclml_optim;

typedef struct oclml_arena_shape {
    int ndim;
    size_t shape[OCLML_MAX_DIMS];
} oclml_arena_shape;

/* Allocates an arena for n tensors of the given shapes; parameters and gradients start at 0. */
OCLML_API oclml_status oclml_arena_create(oclml_ctx *ctx, size_t n, const oclml_arena_shape *shapes,
                                          oclml_arena **arena);
/* Frees the arena and its tensor views (NULL: nothing to do). While an optimizer over it is
 * alive the call fails with OCLML_ERR_INVALID_ARGUMENT and frees nothing, as oclml_ctx_destroy
 * does while tensors are alive: destroy the optimizers first. */
OCLML_API oclml_status oclml_arena_destroy(oclml_arena *arena);
/* Views of tensor i's parameter and gradient (borrowed: owned by the arena). */
OCLML_API oclml_status oclml_arena_param(const oclml_arena *arena, size_t i, oclml_tensor **param);
OCLML_API oclml_status oclml_arena_grad(const oclml_arena *arena, size_t i, oclml_tensor **grad);
/* The whole parameter (grads 0) or gradient (grads 1) buffer as one 1-D tensor of padded_numel
 * elements, padding included (borrowed): for loading and saving a model at once. */
OCLML_API oclml_status oclml_arena_flat(const oclml_arena *arena, int grads, oclml_tensor **flat);
/* Tensor count, elements of the tensors, and elements with the padding; each may be NULL. */
OCLML_API oclml_status oclml_arena_info(const oclml_arena *arena, size_t *n_tensors, size_t *numel,
                                        size_t *padded_numel);
/* Element offset of tensor i in the flat buffers. */
OCLML_API oclml_status oclml_arena_offset(const oclml_arena *arena, size_t i, size_t *offset);
/* Every gradient = 0 (one launch). */
OCLML_API oclml_status oclml_arena_zero_grad(oclml_arena *arena);
/* Mixed precision: gives the arena a copy of its parameters in dtype (bf16 or fp16), filled
 * from them now (rounded), with a view per tensor. Each optimizer step over the arena then
 * writes every parameter it updates to the copy too, in the same launch: the forward reads the
 * copies, the fp32 parameters stay the master weights (and the gradients fp32: the linear
 * layers write dw and db in fp32 from 16-bit products). After writing parameters other than by
 * a step (loading a checkpoint), oclml_arena_copy_sync rounds them into the copy again. An
 * arena has one copy at most; it lives until oclml_arena_destroy. */
OCLML_API oclml_status oclml_arena_copy_create(oclml_arena *arena, oclml_dtype dtype);
/* View of tensor i's copy (borrowed: owned by the arena). */
OCLML_API oclml_status oclml_arena_copy(const oclml_arena *arena, size_t i, oclml_tensor **copy);
OCLML_API oclml_status oclml_arena_copy_sync(oclml_arena *arena);

typedef enum oclml_optim_kind {
    OCLML_OPTIM_SGD,
    OCLML_OPTIM_ADAM,
    OCLML_OPTIM_ADAMW,
    OCLML_OPTIM_LAPROP
} oclml_optim_kind;

typedef struct oclml_optim_config {
    size_t struct_size; /* sizeof(oclml_optim_config), set by oclml_optim_config_init */
    oclml_optim_kind kind;
    float lr;                  /* the initial learning rate (oclml_optim_set_lr changes it) */
    float momentum, dampening; /* SGD */
    int nesterov;              /* SGD: needs momentum > 0 and dampening 0 */
    float beta1, beta2, eps;   /* Adam, AdamW, LaProp */
    float weight_decay;
    int amsgrad;         /* Adam, AdamW, LaProp */
    int maximize;        /* ascend: the gradient is negated */
    int bias_correction; /* Adam, AdamW, LaProp: 1 (torch always corrects), 0 none */
    float max_grad_norm; /* > 0: clip by the group's global gradient norm */
    float agc_clip;      /* > 0: adaptive gradient clipping factor (e.g. 0.01) */
    float agc_eps;       /* AGC's floor of a unit's parameter norm */
    int skip_nonfinite;  /* skip the step on the device when a gradient is inf or NaN */
    size_t first, count; /* the arena's tensors [first, first + count); count 0: to the end */
    /* Weight decay on the group's first decay_tensors tensors only (0: on all): with the matrices
     * first in the arena, nanoGPT's groups (no decay on biases and norms' parameters) in one
     * optimizer, so that clipping sees the global norm of every gradient. */
    size_t decay_tensors;
    /* Dynamic loss scaling (fp16 mixed precision, torch.cuda.amp.GradScaler's rule, on the
     * device): the step checks the gradients (as skip_nonfinite, which it implies); a step that
     * finds inf or NaN is skipped and the scale multiplied by scale_backoff; after
     * scale_interval steps in a row without, by scale_growth (where the product stays finite).
     * The scale starts at oclml_optim_set_grad_scale's value (GradScaler's init_scale is
     * 65536); oclml_optim_grad_scale_tensor gives it as a tensor to seed the backward with. */
    int dynamic_scale;
    float scale_growth;      /* > 1 (default 2) */
    float scale_backoff;     /* in (0, 1) (default 0.5) */
    uint32_t scale_interval; /* >= 1 (default 2000) */
} oclml_optim_config;

/* Fills c with torch.optim's defaults for kind and sets struct_size: lr 1e-3 (LaProp: 4e-4,
 * timm's), momentum 0, dampening 0, betas 0.9 and 0.999, eps 1e-8 (LaProp 1e-15), weight decay
 * 0 (AdamW: 1e-2, as torch.optim.AdamW), bias correction on, no clipping (agc_eps 1e-3), every
 * tensor of the arena; a fixed gradient scale (GradScaler's growth 2, backoff 0.5 and interval
 * 2000 set for dynamic_scale). */
OCLML_API oclml_status oclml_optim_config_init(oclml_optim_config *c, oclml_optim_kind kind);
/* Creates an optimizer over a range of the arena's tensors, its state zero. A configuration that
 * torch.optim refuses (lr, eps, weight decay or momentum < 0, betas outside [0, 1), Nesterov
 * without momentum or with dampening, amsgrad with SGD) is OCLML_ERR_INVALID_CONFIG. The arena
 * must outlive the optimizer: oclml_arena_destroy refuses while the optimizer is alive. */
OCLML_API oclml_status oclml_optim_create(oclml_ctx *ctx, oclml_arena *arena,
                                          const oclml_optim_config *config, oclml_optim **opt);
OCLML_API oclml_status oclml_optim_destroy(oclml_optim *opt);
/* One step over the group: one launch, two with a clipping or check pass. Enqueued; no wait. */
OCLML_API oclml_status oclml_optim_step(oclml_optim *opt);
/* Enqueued writes of the device scalars, seen by the steps enqueued after them. lr >= 0;
 * scale > 0. set_step restores a step count (resuming; LaProp's lr-weighted sum is reset as if
 * every step had run at the current lr). */
OCLML_API oclml_status oclml_optim_set_lr(oclml_optim *opt, float lr);
OCLML_API oclml_status oclml_optim_set_grad_scale(oclml_optim *opt, float scale);
/* The gradient scale as a one-element fp32 tensor on the device (borrowed: owned by the
 * optimizer), the scale the next step divides by. Passed as a loss's dloss (oclml_cross_entropy,
 * oclml_mse_loss, ...), it starts the backward from loss x scale with no host round trip; each
 * step writes the next scale to it (dynamic_scale), as does oclml_optim_set_grad_scale. */
OCLML_API oclml_status oclml_optim_grad_scale_tensor(const oclml_optim *opt, oclml_tensor **scale);
OCLML_API oclml_status oclml_optim_set_step(oclml_optim *opt, uint32_t step);

typedef struct oclml_optim_scalars_info {
    float lr, grad_scale;
    float grad_norm;  /* the last clipping pass's global norm (unscaled), 0 before any */
    uint32_t step;    /* steps taken */
    uint32_t skipped; /* steps skipped on inf/NaN */
    int found_inf;    /* the last step was skipped */
} oclml_optim_scalars_info;

/* Reads the device scalars (waits for the queued steps). */
OCLML_API oclml_status oclml_optim_scalars(oclml_optim *opt, oclml_optim_scalars_info *info);
/* State buffer `which` (layout above) as a flat tensor (borrowed), for checkpoints. */
OCLML_API oclml_status oclml_optim_state(const oclml_optim *opt, int which, oclml_tensor **flat);

/* ---------------------------------------------------------------------------------------------
 * Attention: O = softmax(scale Q K^T + mask) V in one pass over key blocks with an online softmax
 * (no Lq x Lk matrix in memory), and its deterministic backward.
 * ------------------------------------------------------------------------------------------- */

/* Causal masking, with its alignment stated: which diagonal d(i) query i may see up to. */
typedef enum oclml_attention_causal {
    OCLML_CAUSAL_NONE = 0,
    OCLML_CAUSAL_TOP_LEFT,    /* d(i) = i: PyTorch's is_causal (query i sees keys 0 .. i) */
    OCLML_CAUSAL_BOTTOM_RIGHT /* d(i) = i + Lk - Lq: the queries are the last Lq positions of
                                 the keys (decoding against a cache; flash-attn's causal) */
} oclml_attention_causal;

typedef enum oclml_attention_layout {
    OCLML_ATTENTION_BHLD = 0, /* q, o [batch, heads, length, dim]: PyTorch's SDPA layout */
    OCLML_ATTENTION_BLHD      /* [batch, length, heads, dim]: a projection's output viewed per
                                 head, no transpose needed */
} oclml_attention_layout;

typedef struct oclml_attention_params {
    size_t struct_size; /* sizeof(oclml_attention_params): oclml_attention_params_init sets it */
    float scale;        /* scores = scale q.k; 0 (default): 1 / sqrt(head dim) */
    oclml_attention_causal causal;
    oclml_attention_layout layout;
    /* Sliding window around the diagonal d(i) (top-left, d(i) = i, where causal is NONE): query
     * i sees keys d(i) - window_left .. d(i) + window_right; -1 (default) leaves that side
     * open. Causal masks see nothing right of the diagonal whatever window_right says. */
    long window_left, window_right;
    /* NULL, or [batch] key lengths (integers stored as floats, as class indices are): entry b
     * sees keys 0 .. key_lengths[b] - 1 only (padding); clamped to [0, Lk], NaN counts as 0. */
    const oclml_tensor *key_lengths;
    /* NULL, or an additive float mask [Lq, Lk] or [Bm, Hm, Lq, Lk] with Bm 1 or batch and Hm 1
     * or heads (broadcast over the others); -inf hides a key. */
    const oclml_tensor *mask;
    /* NULL (default) or p = 0: none; else dropout on the probabilities, O = dropout(P) V, with
     * P's element (b, h, i, j) masked as oclml_dropout masks element ((b H + h) Lq + i) Lk + j
     * of a [B, H, Lq, Lk] tensor (either layout); the backward must be given the same params.
     * The softmax's log-sum-exp is the undropped one. Params whose struct_size is the size
     * before this field (filled by hand from an older header) run without dropout, the field
     * unread. */
    const oclml_dropout_params *dropout;
} oclml_attention_params;
/* Sets the defaults above (no masking, BHLD, scale 1 / sqrt(dim)). */
OCLML_API oclml_status oclml_attention_params_init(oclml_attention_params *params);

/* o = attention(q, k, v): q [B, H, Lq, D], k and v [B, Hkv, Lk, D] with Hkv dividing H (grouped-
 * query and multi-query attention: query head h reads key head h / (H / Hkv)), o q's shape; in
 * the BLHD layout the same with length and heads swapped. D from 1 to 256 (larger head dims:
 * OCLML_ERR_UNSUPPORTED). lse (NULL or [B, H,
 * Lq], always that order) receives each row's log-sum-exp of its masked scores, which the
 * backward needs. A row that sees no key gets o = 0 and lse = -inf (never NaN). o and lse may
 * not overlap the inputs or each other. NaN in q, k, v or the mask gives NaN in the rows that
 * see it; a NaN or infinite value of a masked key can still reach rows that share its key
 * block (0 x inf), as in PyTorch, except past a batch entry's key length (padding is never
 * read). Few query rows against long keys (decoding) split the keys over work-groups and merge
 * the parts by their log-sum-exps. q, k, v and o may be fp32, bf16 or fp16 (lse fp32): q, k
 * and v of one 16-bit dtype with a causal mask at most and head dims that are multiples of 16 up
 * to 128 run on that dtype's tensor cores where the device has them (fp32 softmax statistics
 * and sums, the probabilities rounded to the dtype before P V; the tuning key
 * attention.lp_mma=0 turns this off); other calls through fp32 copies of the 16-bit tensors
 * (oclml_attention_plan says which). */
OCLML_API oclml_status oclml_attention(oclml_ctx *ctx, const oclml_attention_params *params,
                                       const oclml_tensor *q, const oclml_tensor *k,
                                       const oclml_tensor *v, oclml_tensor *o, oclml_tensor *lse);

/* The kernels oclml_attention and oclml_attention_backward run for these shapes on this context,
 * in words (tensor cores or FMA tiles, the tile, key splits), into text (len bytes). */
OCLML_API oclml_status oclml_attention_plan(oclml_ctx *ctx, const oclml_attention_params *params,
                                            const oclml_tensor *q, const oclml_tensor *k,
                                            const oclml_tensor *v, char *text, size_t len);

/* The gradients of oclml_attention given o and lse from the forward and dout (o's shape): dq,
 * dk and dv (each NULL when not wanted; overwritten) and, where params has a mask, dmask (NULL
 * or the mask's shape: dS summed over the batch entries and heads the mask is broadcast over).
 * The probabilities are recomputed block by block from lse; every gradient element is summed by
 * one work-item in a fixed order (grouped query heads included): the same call gives the same
 * bits run to run. Rows that see no key give zero gradients. Where dQ comes as a GEMM on dS
 * (the tensor-core backward with dK or dV wanted too: oclml_attention_plan says so), a NaN or
 * infinite value of a key reaches the dQ of rows that do not see it (0 x inf), as in PyTorch;
 * it takes a workspace of up to the device's scratch size (dS a chunk of key heads at a time).
 * q, k, v, o, dout and the gradients may be fp32, bf16 or fp16 (lse and dmask fp32): with q, k,
 * v and dout of one 16-bit dtype, a causal mask at most, no dmask and head dims that are
 * multiples of 16 up to 128, every product runs on that dtype's tensor cores where the device
 * has them (P and dS recomputed in fp32 and rounded to the dtype as operands; a NaN or infinite
 * element of q, k or dout can reach the gradients of masked query-key pairs in the same block,
 * 0 x inf, as in PyTorch; the tuning key attention.lp_bwd_mma=0 turns this off); otherwise the
 * 16-bit tensors go through fp32 copies. */
OCLML_API oclml_status oclml_attention_backward(oclml_ctx *ctx,
                                                const oclml_attention_params *params,
                                                const oclml_tensor *q, const oclml_tensor *k,
                                                const oclml_tensor *v, const oclml_tensor *o,
                                                const oclml_tensor *lse, const oclml_tensor *dout,
                                                oclml_tensor *dq, oclml_tensor *dk,
                                                oclml_tensor *dv, oclml_tensor *dmask);

/* ---------------------------------------------------------------------------------------------
 * Former names (before the API's one-suffix rule: _config for what an object is created with,
 * _params for what a call takes), kept as aliases so that older code builds and older binaries
 * link: the same structs, the same functions.
 * ------------------------------------------------------------------------------------------- */
typedef oclml_ctx_config oclml_ctx_options;
typedef oclml_rssm_params oclml_rssm_config;
OCLML_API oclml_status oclml_ctx_options_init(oclml_ctx_config *options);
OCLML_API oclml_status oclml_rssm_config_init(oclml_rssm_params *params);

#ifdef __cplusplus
}
#endif

#endif /* OCLML_H */
