/* The core's interface to the ops: context, device capabilities, tuning table, programs and
 * launches, tensors, errors and checks. Internal names start with oclml__ and are not exported
 * (the link exports only oclml_ followed by a letter). Core never includes an op's header; the
 * ops include this. */
#ifndef OCLML_CORE_H
#define OCLML_CORE_H

#define OCLML_BUILDING_LIBRARY 1
#include "oclml.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>

#include "core/sha256.h"

/* ---- device capabilities (device.c) ----
 * What ops may ask of a device, probed once per context. Ops plan from these facts and never
 * from vendor names. The PTX facts are probed lazily (building a tiny kernel, through the
 * program caches) on first use, so creating a context compiles nothing. */
typedef struct oclml__caps {
    bool is_gpu;
    unsigned compute_units;
    size_t max_work_group_size;
    size_t local_mem_bytes;
    /* Work-items that execute in lock-step (NVIDIA warp, AMD wavefront); 1 where unknown. */
    unsigned simd_width;
    /* Floats in the device's native vector (CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT: a CPU's SIMD
     * width, 8 with AVX2, 16 with AVX-512; 1 on GPUs, whose vectors are across work-items). */
    unsigned vector_floats;
    bool fp64, fp16;
    /* NVIDIA compute capability (0.0 elsewhere). */
    unsigned nv_cc_major, nv_cc_minor;
    /* The compiler takes a per-work-item register cap (cl_nv_compiler_options). */
    bool register_cap_option;
    /* The driver keeps its own cache of compiled programs, and fetching a program binary costs
     * more than that cache saves (PoCL: the binary makes it compile every kernel for every
     * work-group size first, seconds to minutes). Our disk cache then stays out of the way. */
    bool driver_program_cache;
    /* Probed lazily, each when first asked (oclml__caps_ptx, oclml__caps_mma): inline PTX
     * compiles (warp shuffles, GPU-scope acquire/release); TF32 mma.sync m16n8k8 compiles (tensor
     * cores). -1 not probed yet; guarded by caps_lock. */
    int inline_ptx;
    int mma_tf32;
    /* Bytes of __local arrays a kernel may declare in its source, probed lazily (by running a
     * kernel, oclml__caps_static_local): NVIDIA's OpenCL reports 48 KiB (the bound of local
     * buffers given as kernel arguments) but builds and runs kernels whose own arrays take up to
     * the compute unit's opt-in maximum. -1 not probed yet; guarded by caps_lock. */
    long static_local;
    /* Scratch an op may hold for its intermediates at once (workspaces it chunks its work
     * through): a sixteenth of the device's memory, 128 MiB to 1 GiB, within its largest
     * allocation. */
    size_t workspace_bytes;
} oclml__caps;

/* ---- tuning table (tune.c) ----
 * Every tunable knob of every op, with the value in force for this context and where it came
 * from. Keys are declared in the op list (lib/ops/ops.def, as data: core reads no op's code) and
 * tabled by the ops (oclml__tunables, lib/ops/registry.c); core only parses and looks them up.
 * A value is 1 to OCLML__TUNE_MAX_INTS integers; 0 usually means "let the op decide from the
 * shape and the capabilities". */
#define OCLML__TUNE_MAX_INTS 16
typedef struct oclml__tunable {
    const char *key;    /* "gru.tile" */
    const char *family; /* "gru": the ops that name the family read the key */
    bool developers;    /* a kernel internal or test hook (oclml-info lists it with --all) */
    unsigned n;         /* how many integers the value has */
    long min, max;      /* bounds of each integer */
    long defaults[OCLML__TUNE_MAX_INTS];
    const char *help;
} oclml__tunable;

/* The keys in code: OCLML__TUNE_GEMM_OWN for gemm.own, ..., in the order of ops.def, which is
 * also the order of oclml__tunables. */
typedef enum oclml__tune_key {
#define OCLML_OP(...)
#define OCLML_TUNABLE(family, id, ...) OCLML__TUNE_##id,
#include "ops/ops.def"
#undef OCLML_OP
#undef OCLML_TUNABLE
    OCLML__N_TUNABLES
} oclml__tune_key;

/* Defined by the op layer: the tunables of every op, indexed by oclml__tune_key, then an entry
 * with key NULL. */
extern const oclml__tunable oclml__tunables[];

typedef enum oclml__tune_source {
    OCLML__TUNE_DEFAULT,
    OCLML__TUNE_SHIPPED,
    OCLML__TUNE_FILE,
    OCLML__TUNE_OPTION,
    OCLML__TUNE_ENV
} oclml__tune_source;

typedef struct oclml__tune_value {
    long v[OCLML__TUNE_MAX_INTS];
    oclml__tune_source source;
} oclml__tune_value;

/* ---- programs ----
 * A program is one kernel file built for one variant: the op's defines select what the file
 * compiles, and `kernels` names the kernels it must contain (each gets -DOCLML_WANT_<name>=1;
 * a file guards each kernel with #if OCLML_WANT(name), so nothing else is compiled). */
typedef struct oclml__program_spec {
    const char *file;    /* under cl/ops, e.g. "norm.cl" */
    const char *defines; /* "-DROW_ITEMS=4 -DROW_VEC=4"; NULL: none */
    const char *kernels; /* space-separated kernel names */
    /* Registers a work-item may use: 0 the device's default for full-size work-groups; a larger
     * number where the op keeps its work-groups small enough (translated by device.c). */
    unsigned max_registers;
} oclml__program_spec;

typedef struct oclml__kernel_entry {
    char *name;
    cl_kernel kernel;
    struct oclml__kernel_entry *next;
} oclml__kernel_entry;

typedef enum { OCLML__PROG_BUILDING, OCLML__PROG_READY, OCLML__PROG_FAILED } oclml__prog_state;

typedef struct oclml__program_entry {
    char *request;   /* file, options and kernels as requested: the fast lookup key */
    uint8_t key[32]; /* SHA-256 of the composed source and the complete options */
    oclml__prog_state state;
    oclml_status failure;
    cl_program program;
    char *path; /* the kernel file it was composed from, for error texts */
    oclml__kernel_entry *kernels;
    struct oclml__program_entry *next;
} oclml__program_entry;

/* A pooled device buffer for temporaries. */
typedef struct oclml__scratch {
    cl_mem mem;
    size_t bytes;
    bool in_use;
    struct oclml__scratch *next;
} oclml__scratch;

typedef struct oclml__diskcache {
    bool enabled;
    char dir[1024];
    char disabled_reason[256];
    uint64_t max_bytes;
} oclml__diskcache;

/* Op calls of distinct shapes a context rehearses (rehearsal.c); later ones build as they go. */
#define OCLML__REHEARSED_MOST 256

struct oclml_ctx {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    /* Tensors made on this context and not yet destroyed: oclml_ctx_destroy waits for none. */
    atomic_size_t tensors_alive;
    /* Device bytes the library holds (tensors it created, scratch, optimizers' own buffers)
     * and the most it has held since creation or oclml_ctx_reset_peak_memory (alloc.c). */
    atomic_size_t bytes_now, bytes_peak;

    oclml_device_info info;
    oclml__caps caps;
    oclml__tune_value *tune; /* one per oclml__tunables entry */
    char *kernel_path;       /* the option's directories, then $OCLML_KERNEL_PATH's */
    char *build_options;     /* $OCLML_BUILD_OPTIONS then the option's, space-separated */
    oclml_log_fn log_fn;
    void *log_user;

    /* build_lock guards the program list and the counters (never held during a compile: a
     * program being built is marked BUILDING and others wait on built_cond); launch_lock makes
     * set-args plus enqueue on a shared kernel object atomic; error_lock guards the error text;
     * caps_lock the lazy capability probe. */
    pthread_mutex_t build_lock;
    pthread_cond_t built_cond;
    pthread_mutex_t launch_lock;
    pthread_mutex_t error_lock;
    pthread_mutex_t scratch_lock;
    pthread_mutex_t caps_lock;

    /* oclml_math_mode: read by every product, set by the application between them (an int, set
     * and read whole). */
    volatile int math_mode;
    /* Work-groups a launch may have along dimensions 1 and 2 (CUDA's grid limit, 65535, on
     * NVIDIA's OpenCL): oclml__launch enqueues larger grids in slices. Tuning key
     * launch.grid_yz. */
    size_t max_groups_yz;

    oclml__program_entry *programs;
    oclml__scratch *scratch;
    oclml__diskcache disk;
    unsigned long memory_hits, disk_hits, disk_misses, disk_evictions, builds;

    char *last_error;
    int backend_error;
    /* The tests' fault hook (oclml__test_fail_launch_after): the backend calls left until the
     * one made to fail, counting it; 0 unarmed, so that an unarmed call costs one compare.
     * Guarded by launch_lock. */
    unsigned fail_launch_in;

    /* Work-group caps learned per kernel family from launches the device refused for lack of
     * resources (ops/rows.c); guarded by build_lock. */
    struct {
        char base[64];
        size_t cap;
    } wg_caps[32];
    unsigned n_wg_caps;

    /* Rehearsals (rehearsal.c): whether first calls rehearse (tuning key build.rehearse), and
     * the keys of the calls rehearsed so far (open addressing; 0 empty); under build_lock. */
    bool rehearse;
    uint64_t rehearsed[OCLML__REHEARSED_MOST];
    unsigned n_rehearsed;

    /* Profiling (profile.c): events of the kernels enqueued since profile_begin. */
    bool profiling_queue;
    bool profiling_active;
    cl_event *events;
    size_t n_events, cap_events;
};

struct oclml_tensor {
    oclml_ctx *ctx;
    cl_mem mem;
    size_t offset_bytes;
    int ndim;
    size_t shape[OCLML_MAX_DIMS];
    size_t numel;
    size_t owned_bytes; /* its buffer's size when the tensor created it (freed with it), else 0 */
    oclml_dtype dtype;
    size_t elem_bytes; /* oclml_dtype_size(dtype) */
};

/* ---- dtypes (dtype.c): the host's conversions, oclml_dtype's rounding ---- */
uint16_t oclml__bf16_of(float f);
uint16_t oclml__fp16_of(float f);
float oclml__float_of_bf16(uint16_t h);
float oclml__float_of_fp16(uint16_t h);
/* n floats to n elements of dtype, and back. */
void oclml__to_dtype(oclml_dtype dtype, const float *src, void *dst, size_t n);
void oclml__from_dtype(oclml_dtype dtype, const void *src, float *dst, size_t n);
#define OCLML__MOST_DTYPE_DEFINES 8 /* tensors a kernel's dtype defines name at most */
/* A kernel's dtype defines, "-D<NAME>_DT=<dtype>" for each of n (names[i], dts[i]; dtype.h's
 * numbers), into out; "" where every one is fp32, so that fp32 programs keep their defines. */
void oclml__dtype_defines_of(char *out, size_t len, unsigned n, const char *const *names,
                             const oclml_dtype *dts);
/* The same for tensors (NULL ones: fp32). */
void oclml__dtype_defines(char *out, size_t len, unsigned n, const char *const *names,
                          const oclml_tensor *const *ts);

/* ---- errors and logging (status.c) ---- */

/* Records a readable failure text on the context and returns status. ctx may be NULL. */
oclml_status oclml__fail(const oclml_ctx *ctx, oclml_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records an OpenCL failure: keeps the code, names the call. */
oclml_status oclml__cl_fail(const oclml_ctx *ctx, cl_int err, const char *what);
/* Sets the last-error text to a long, pre-built string (build logs). */
oclml_status oclml__fail_text(const oclml_ctx *ctx, oclml_status status, int backend, char *text);
void oclml__log(const oclml_ctx *ctx, oclml_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *oclml__cl_error_name(cl_int err);
/* Clears the last-error text at the start of a public call. */
void oclml__clear_error(const oclml_ctx *ctx);

/* Adds one to a counter of the context's cache statistics (under build_lock). */
void oclml__count(oclml_ctx *ctx, unsigned long *counter);

/* ---- strings and files (util.c) ---- */
char *oclml__strdup(const char *s);
char *oclml__asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reads a whole regular file (malloc'd, NUL-terminated; *len its bytes). Anything else at path (a
 * directory, a FIFO, a socket, a device) is refused without blocking. On failure returns NULL
 * with errno set (ENOENT: nothing there; EISDIR: a directory; EINVAL: another file that is not
 * a regular one) and, where why is not NULL, the reason as a phrase. */
char *oclml__read_file(const char *path, size_t *len, char *why, size_t why_len);
bool oclml__mul_ok(size_t a, size_t b, size_t *out);
bool oclml__add_ok(size_t a, size_t b, size_t *out);
double oclml__now_ms(void);
/* Whether others can write into a file or directory: writable by all, or by a group that is not
 * our own primary group (a user-private group, as with umask 002, is ours alone). A directory we
 * take code or binaries from must not be (kernel path, disk cache). */
struct stat;
bool oclml__writable_by_others(const struct stat *st);
/* A directory's path spelled so that its last component is the directory it names: '.'
 * components, repeated and trailing slashes and "name/.." pairs removed ("link/.", "link/./" and
 * "link/sub/.." become "link"), so that lstat of the result sees a symbolic link however the
 * directory was spelled (the kernel path and the disk cache refuse one). A "name/.." pair whose
 * name is a symbolic link is refused rather than removed, since there ".." leaves the link's
 * target, not the directory the text names: returns ELOOP with that name's path in out. Returns
 * 0, or ENAMETOOLONG when out (len bytes) is too small. */
int oclml__dir_path(const char *path, char *out, size_t len);

/* ---- argument checks (check.c) ---- */
oclml_status oclml__check_ctx(const oclml_ctx *ctx);
/* Checks a tensor argument: not NULL, same context, fp32. name appears in the error text. */
oclml_status oclml__check_tensor(const oclml_ctx *ctx, const oclml_tensor *t, const char *name);
/* The same for an op that takes other dtypes: dtypes is a mask of the ones it takes
 * (OCLML__DTYPES_ALL, or bits 1u << dtype). */
#define OCLML__DTYPES_ALL ((1u << OCLML_FLOAT32) | (1u << OCLML_BFLOAT16) | (1u << OCLML_FLOAT16))
oclml_status oclml__check_tensor_of(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                    unsigned dtypes);
/* Checks that a tensor is 2-D or more and returns (rows, cols) with cols the last dimension. */
oclml_status oclml__check_matrix_view(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                      size_t *rows, size_t *cols);
/* Checks that two tensors have the same shape. */
oclml_status oclml__check_same_shape(const oclml_ctx *ctx, const oclml_tensor *a, const char *an,
                                     const oclml_tensor *b, const char *bn);
/* The same for an op that takes the dtypes of the mask (oclml__check_tensor_of's). */
oclml_status oclml__check_same_shape_of(const oclml_ctx *ctx, const oclml_tensor *a, const char *an,
                                        const oclml_tensor *b, const char *bn, unsigned dtypes);
/* Checks that a tensor has exactly nd (1 to 3) dimensions of sizes a, b, c (unused ones
 * ignored). */
oclml_status oclml__check_shape(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                int nd, size_t a, size_t b, size_t c);
/* Checks that a tensor is 1-D (or any shape) with exactly n elements. */
oclml_status oclml__check_numel(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                size_t n);
/* Checks that a tensor has nd (1 to OCLML_MAX_DIMS) dimensions of exactly want[]. */
oclml_status oclml__check_dims(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                               int nd, const size_t *want);
/* Whether two tensors share any element (NULLs share none). */
bool oclml__overlap(const oclml_tensor *a, const oclml_tensor *b);
/* Fails (OCLML_ERR_INVALID_ARGUMENT, naming both) when output out overlaps in, except, where
 * in_place_ok, when out is in itself (the same buffer, offset and element size: element-for-
 * element kernels may write over what they read; elements of another size lie across other
 * work-items' elements). NULLs pass. */
oclml_status oclml__check_apart(const oclml_ctx *ctx, const oclml_tensor *out, const char *out_name,
                                const oclml_tensor *in, const char *in_name, bool in_place_ok);

/* ---- device capabilities (device.c) ---- */
void oclml__device_probe(oclml_ctx *ctx);
/* The lazily probed facts: whether inline PTX builds, whether TF32 mma.sync builds. The first
 * call per context builds a tiny probe kernel (or reads the result the disk cache directory
 * kept for this device and driver); later calls return at once. */
bool oclml__caps_ptx(oclml_ctx *ctx);
bool oclml__caps_mma(oclml_ctx *ctx);
/* The bytes of __local arrays a kernel may declare (at least local_mem_bytes): the largest of a
 * few sizes past local_mem_bytes whose probe kernel builds and computes right on a GPU, probed on
 * first call (or read from the disk cache's record). */
size_t oclml__caps_static_local(oclml_ctx *ctx);
/* The build options that carry the capabilities into kernels (-DOCLML_PTX=1 where inline PTX
 * works) and the register cap of a spec, in the device's own option syntax. malloc'd. */
char *oclml__device_options(oclml_ctx *ctx, unsigned max_registers);

/* Adds what identifies the compiler a binary came from (platform, device, driver, library
 * version) to a hash: the disk cache's keys and the probe record's name. */
void oclml__device_key(const oclml_ctx *ctx, oclml__sha256_ctx *s);

/* ---- tuning table (tune.c) ---- */
/* Fills ctx->tune: defaults (0 mostly means: the op decides from the shape and the
 * capabilities), the shipped and the cache directory's tuned-values files for this device, then
 * the option string (or $OCLML_TUNE when the option is NULL). An unknown key or a bad value in
 * the option is an error. */
oclml_status oclml__tune_init(oclml_ctx *ctx, const char *option);
/* Integer i of a key's value (i below the key's count of integers). */
long oclml__tune(const oclml_ctx *ctx, oclml__tune_key key, unsigned i);
const char *oclml__tune_source_name(oclml__tune_source s);

/* ---- the op layer's part of context creation (lib/ops/clblast_params.c) ----
 * Called once the tuning table is read: applies what the ops keep outside a context, CLBlast's
 * process-wide kernel parameters for this device. An error fails the creation. */
oclml_status oclml__ops_context_init(oclml_ctx *ctx);

/* ---- programs and kernels (program.c) ---- */

/* Returns kernel `name` of the program described by spec, building (or loading from the caches)
 * just that variant if needed. The kernel object is owned by the cache; launch it only through
 * oclml__launch. */
oclml_status oclml__kernel(oclml_ctx *ctx, const oclml__program_spec *spec, const char *name,
                           cl_kernel *kernel);
/* The kernel `name` of `file` in a program of its own, without variant defines. */
static inline oclml_status oclml__simple_kernel(oclml_ctx *ctx, const char *file, const char *name,
                                                cl_kernel *kernel) {
    oclml__program_spec spec = {file, NULL, name, 0};
    return oclml__kernel(ctx, &spec, name, kernel);
}
/* Builds the program of spec if it is not built yet; *built_ms is the time it took (0 for a
 * memory-cache hit). For prewarm. */
oclml_status oclml__program_build(oclml_ctx *ctx, const oclml__program_spec *spec,
                                  double *built_ms);
void oclml__programs_free(oclml_ctx *ctx);
/* Whether a string of build options is well formed: -options only, -D with a name, no quotes
 * or backslashes (drivers have crashed on less). */
bool oclml__options_well_formed(const char *opts);
/* Builds a self-contained source (capability probes) through the disk cache; records no error. */
oclml_status oclml__build_probe(oclml_ctx *ctx, const char *label, const char *source,
                                const char *options);

/* ---- building many programs at once (build_parallel.c) ---- */

/* Called on the calling thread as each program finishes: its index, build time, status, and how
 * many have finished. */
typedef void oclml__built_fn(void *user, size_t i, double ms, oclml_status st, size_t finished);
/* Builds the n programs on `threads` threads (0: oclml__build_threads(n)); with done, this thread
 * reports each as it finishes, without, it builds too. Returns the first failure's status (each
 * failure's text is recorded as the build recorded it). */
oclml_status oclml__build_parallel(oclml_ctx *ctx, const oclml__program_spec *specs, size_t n,
                                   unsigned threads, oclml__built_fn *done, void *user);
/* Threads worth using for n programs: the cores, at most 8, at most n. */
unsigned oclml__build_threads(size_t programs);

/* ---- rehearsals (rehearsal.c) ----
 * A multi-program op's first call at a shape, where ctx->rehearse: the op runs once with
 * oclml__kernel recording the programs not built yet (and returning no kernel), oclml__launch and
 * CLBlast calls doing nothing; the recorded programs are then built in parallel and the op runs
 * for real. An op opts in with OCLML__REHEARSED around its body; its body must not depend on a
 * kernel object or on what a launch wrote (every op's body only passes them on). */
bool oclml__rehearsing(const oclml_ctx *ctx);
void oclml__rehearsal_record(const oclml__program_spec *spec);
/* Starts a rehearsal when ctx rehearses, this thread is not rehearsing already and key is new on
 * ctx; false otherwise (then the caller just runs). */
bool oclml__rehearsal_begin(oclml_ctx *ctx, uint64_t key);
/* Ends this thread's rehearsal: builds what it recorded, clears the error text it left. */
void oclml__rehearsal_end(oclml_ctx *ctx);
/* The key of a call: an op's name, then its tensors' shapes (and offsets' alignment) and any
 * value that changes its plan, mixed in one after another. */
uint64_t oclml__rehearsal_key(uint64_t key, const void *bytes, size_t len);
uint64_t oclml__rehearsal_key_tensor(uint64_t key, const oclml_tensor *t);
/* Returns `call` (a status expression), rehearsed first where oclml__rehearsal_begin says so. */
#define OCLML__REHEARSED(ctx, key, call)            \
    do {                                            \
        if (oclml__rehearsal_begin((ctx), (key))) { \
            (void)(call);                           \
            oclml__rehearsal_end(ctx);              \
        }                                           \
        return (call);                              \
    } while (0)

/* ---- launches (launch.c) ---- */

/* One kernel argument: a value (ptr != NULL) or local memory of size bytes (ptr == NULL). */
typedef struct oclml__arg {
    size_t size;
    const void *ptr;
} oclml__arg;
#define OCLML_ARG(x) ((oclml__arg){sizeof(x), &(x)})
#define OCLML_LOCAL(bytes) ((oclml__arg){(bytes), NULL})

/* Sets the arguments and enqueues the kernel atomically with respect to other threads. local may
 * be NULL. A grid of more than ctx->max_groups_yz work-groups along dimension 1 or 2 is enqueued
 * in slices with a global offset: kernels see the whole range through get_global_id, but
 * get_group_id restarts each slice, so kernels that may get such grids index by global id.
 * cl_err (may be NULL) receives the OpenCL code of this launch's own failure (0 on success): ops
 * that re-plan on a refused work-group size read it, never the context's record. */
oclml_status oclml__launch(oclml_ctx *ctx, cl_kernel kernel, const oclml__arg *args, unsigned nargs,
                           cl_uint dims, const size_t *global, const size_t *local, cl_int *cl_err);

/* A 1-D launch for n work units: a work-group size the device takes, and a global size that is a
 * multiple of it, capped so that kernels stride over large ranges (enough groups to fill every
 * compute unit several times over). */
void oclml__grid_1d(const oclml_ctx *ctx, size_t n, size_t *global, size_t *local);
/* The same with groups of `group` work-items (fewer where the device or, given one, the kernel
 * takes fewer) and at most per_unit groups a compute unit. */
void oclml__grid_1d_groups(const oclml_ctx *ctx, cl_kernel kernel, size_t n, size_t group,
                           size_t per_unit, size_t *global, size_t *local);

/* Records the event of a kernel enqueued while profiling is active. Caller holds launch_lock. */
void oclml__profile_commit(oclml_ctx *ctx, cl_event ev);
/* For commands enqueued outside oclml__launch (CLBlast): records ev when profiling, else releases
 * it. Takes launch_lock itself. */
void oclml__event_done(oclml_ctx *ctx, cl_event ev);
/* When profiling, enqueues a marker and records it: CLBlast returns the event of its last kernel
 * only, so the marker stands for the start of a multi-kernel CLBlast routine. */
void oclml__profile_mark(oclml_ctx *ctx);

/* ---- fault injection, for tests (launch.c) ----
 * Makes the backend call after the next n succeed fail as a lost device would: nothing of it is
 * enqueued, and it returns OCLML_ERR_OPENCL with the code CL_OUT_OF_HOST_MEMORY (no op re-plans
 * on it, so the failure reaches the caller) and a last-error text saying the failure was
 * injected. The calls counted are every oclml__launch and every CLBlast product. n < 0 disarms.
 * For tests of what an op leaves behind when a later launch fails (the header's partial
 * results); arm it only on a context that one thread uses. */
void oclml__test_fail_launch_after(oclml_ctx *ctx, int n);
/* For backend calls outside oclml__launch: when the hook makes this call fail, records the
 * failure of `what` and returns OCLML_ERR_OPENCL; else OCLML_SUCCESS. Call it only where
 * ctx->fail_launch_in is set. */
oclml_status oclml__injected_fault(oclml_ctx *ctx, const char *what);

/* ---- disk cache (diskcache.c) ---- */
void oclml__diskcache_open(oclml_ctx *ctx, const char *dir_option, size_t max_bytes);
/* Loads and verifies an entry; true with *bin (malloc'd) on a hit. A bad entry is evicted. */
bool oclml__diskcache_load(oclml_ctx *ctx, const uint8_t key[32], unsigned char **bin, size_t *len);
void oclml__diskcache_store(oclml_ctx *ctx, const uint8_t key[32], const unsigned char *bin,
                            size_t len);
/* Removes the entry of key (a binary the driver rejected). */
void oclml__diskcache_evict(oclml_ctx *ctx, const uint8_t key[32]);
void oclml__diskcache_usage(const oclml_ctx *ctx, size_t *entries, uint64_t *bytes);

/* ---- device memory (alloc.c) ----
 * Every buffer the library creates goes through these, which keep ctx->bytes_now and bytes_peak
 * (oclml_ctx_memory). A failure records its OpenCL error naming `what`. */
oclml_status oclml__buffer_create(oclml_ctx *ctx, size_t bytes, const void *init, const char *what,
                                  cl_mem *mem);
void oclml__buffer_release(oclml_ctx *ctx, cl_mem mem, size_t bytes);

/* ---- scratch pool (tensor.c) ---- */
oclml_status oclml__scratch_get(oclml_ctx *ctx, size_t bytes, cl_mem *mem);
void oclml__scratch_put(oclml_ctx *ctx, cl_mem mem);
void oclml__scratch_free_all(oclml_ctx *ctx, bool only_unused);

/* Element offset of a tensor within its buffer (kernels take element offsets). */
static inline cl_ulong oclml__elem_offset(const oclml_tensor *t) {
    return (cl_ulong)(t->offset_bytes / t->elem_bytes);
}

/* An optional tensor as kernel arguments: its buffer and element offset, or NULL and 0 (the
 * kernel's flag bits say not to touch it). */
static inline cl_mem oclml__opt_mem(const oclml_tensor *t) { return t ? t->mem : NULL; }
static inline cl_ulong oclml__opt_offset(const oclml_tensor *t) {
    return t ? oclml__elem_offset(t) : 0;
}

#endif
