/* Internal declarations shared by the library's files. Internal names start with oclml__ and
 * are not exported (the link exports only oclml_ followed by a letter). */
#ifndef OCLML_INTERNAL_H
#define OCLML_INTERNAL_H

#define OCLML_BUILDING_LIBRARY 1
#include "oclml.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>

#include "sha256.h"

/* A compiled program with the kernel objects made from it so far. */
typedef struct oclml__kernel_entry {
    char *name;
    cl_kernel kernel;
    struct oclml__kernel_entry *next;
} oclml__kernel_entry;

typedef struct oclml__program_entry {
    char *file;       /* e.g. "softmax.cl" */
    char *options;    /* complete build options */
    uint8_t source_hash[32];
    cl_program program;
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

struct oclml_ctx {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;

    oclml_device_info info;
    /* The device takes NVIDIA's compiler options (cl_nv_compiler_options). */
    bool nv_options;
    /* NVIDIA's compute capability major version (cl_nv_device_attribute_query), 0 elsewhere:
     * 8 and up have the tf32 tensor-core instructions the tiled GRU step uses. */
    unsigned nv_cc_major;
    char *kernel_path;    /* the option's directories, colon-separated, or NULL */
    char *build_options;  /* $OCLML_BUILD_OPTIONS then the option's, space-separated */
    oclml_log_fn log_fn;
    void *log_user;

    /* build_lock guards the program cache, the disk cache and the counters; launch_lock makes
     * set-args plus enqueue on a shared kernel object atomic; error_lock guards the error text. */
    pthread_mutex_t build_lock;
    pthread_mutex_t launch_lock;
    pthread_mutex_t error_lock;
    pthread_mutex_t scratch_lock;

    oclml__program_entry *programs;
    oclml__scratch *scratch;
    oclml__diskcache disk;
    unsigned long memory_hits, disk_hits, disk_misses, disk_evictions, builds;

    char *last_error;
    int backend_error;

    /* Work-group caps learned per kernel family from launches the device refused for lack of
     * resources (rows.c); guarded by build_lock. */
    struct {
        char base[64];
        size_t cap;
    } wg_caps[32];
    unsigned n_wg_caps;

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
};

/* ---- errors and logging (context.c) ---- */

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

/* ---- strings and files (util.c) ---- */
char *oclml__strdup(const char *s);
char *oclml__asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reads a whole file; returns NULL (errno set) on failure. */
char *oclml__read_file(const char *path, size_t *len);
bool oclml__mul_ok(size_t a, size_t b, size_t *out);
bool oclml__add_ok(size_t a, size_t b, size_t *out);
double oclml__now_ms(void);

/* ---- argument checks (check.c) ---- */
oclml_status oclml__check_ctx(const oclml_ctx *ctx);
/* Checks a tensor argument: not NULL, same context. name appears in the error text. */
oclml_status oclml__check_tensor(const oclml_ctx *ctx, const oclml_tensor *t, const char *name);
/* Checks that a tensor is 2-D or more and returns (rows, cols) with cols the last dimension. */
oclml_status oclml__check_matrix_view(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                      size_t *rows, size_t *cols);
/* Checks that two tensors have the same shape. */
oclml_status oclml__check_same_shape(const oclml_ctx *ctx, const oclml_tensor *a, const char *an,
                                     const oclml_tensor *b, const char *bn);
/* Checks that a tensor has exactly nd (1 to 3) dimensions of sizes a, b, c (unused ones ignored). */
oclml_status oclml__check_shape(const oclml_ctx *ctx, const oclml_tensor *t, const char *name, int nd,
                                size_t a, size_t b, size_t c);
/* Checks that a tensor is 1-D (or any shape) with exactly n elements. */
oclml_status oclml__check_numel(const oclml_ctx *ctx, const oclml_tensor *t, const char *name,
                                size_t n);

/* ---- programs and kernels (program.c) ---- */

/* Returns a cached kernel object of file+options, building the program if needed. The kernel is
 * owned by the cache; launch it only through oclml__launch. */
oclml_status oclml__get_kernel(oclml_ctx *ctx, const char *file, const char *options,
                               const char *kernel_name, cl_kernel *kernel);
void oclml__programs_free(oclml_ctx *ctx);

/* One kernel argument: a value (ptr != NULL) or local memory of size bytes (ptr == NULL). */
typedef struct oclml__arg {
    size_t size;
    const void *ptr;
} oclml__arg;
#define OCLML_ARG(x) ((oclml__arg){sizeof(x), &(x)})
#define OCLML_LOCAL(bytes) ((oclml__arg){(bytes), NULL})

/* Sets the arguments and enqueues the kernel atomically with respect to other threads. local may
 * be NULL. */
oclml_status oclml__launch(oclml_ctx *ctx, cl_kernel kernel, const oclml__arg *args, unsigned nargs,
                           cl_uint dims, const size_t *global, const size_t *local);

/* A 1-D launch for n work units: a work-group size the device takes, and a global size that is a
 * multiple of it, capped so that kernels stride over large ranges (enough groups to fill every
 * compute unit several times over). */
void oclml__grid_1d(const oclml_ctx *ctx, size_t n, size_t *global, size_t *local);

/* Records the event of a kernel enqueued while profiling is active. Caller holds launch_lock. */
void oclml__profile_commit(oclml_ctx *ctx, cl_event ev);
/* For commands enqueued outside oclml__launch (CLBlast): records ev when profiling, else releases
 * it. Takes launch_lock itself. */
void oclml__event_done(oclml_ctx *ctx, cl_event ev);
/* When profiling, enqueues a marker and records it: CLBlast returns the event of its last kernel
 * only, so the marker stands for the start of a multi-kernel CLBlast routine. */
void oclml__profile_mark(oclml_ctx *ctx);

/* ---- disk cache (diskcache.c) ---- */
void oclml__diskcache_open(oclml_ctx *ctx, const char *dir_option, size_t max_bytes);
/* Loads and verifies an entry; true with *bin (malloc'd) on a hit. A bad entry is evicted. */
bool oclml__diskcache_load(oclml_ctx *ctx, const uint8_t key[32], unsigned char **bin, size_t *len);
void oclml__diskcache_store(oclml_ctx *ctx, const uint8_t key[32], const unsigned char *bin,
                            size_t len);
/* Removes the entry of key (a binary the driver rejected). */
void oclml__diskcache_evict(oclml_ctx *ctx, const uint8_t key[32]);
void oclml__diskcache_usage(const oclml_ctx *ctx, size_t *entries, uint64_t *bytes);

/* ---- scratch pool (tensor.c) ---- */
oclml_status oclml__scratch_get(oclml_ctx *ctx, size_t bytes, cl_mem *mem);
void oclml__scratch_put(oclml_ctx *ctx, cl_mem mem);
void oclml__scratch_free_all(oclml_ctx *ctx, bool only_unused);

/* Element offset of a tensor within its buffer (kernels take element offsets). */
static inline cl_ulong oclml__elem_offset(const oclml_tensor *t) {
    return (cl_ulong)(t->offset_bytes / sizeof(float));
}

/* An optional tensor as kernel arguments: its buffer and element offset, or NULL and 0 (the
 * kernel's flag bits say not to touch it). */
static inline cl_mem oclml__opt_mem(const oclml_tensor *t) { return t ? t->mem : NULL; }
static inline cl_ulong oclml__opt_offset(const oclml_tensor *t) { return t ? oclml__elem_offset(t) : 0; }

#endif
