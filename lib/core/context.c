/* Context manager: device selection, OpenCL context and queue, options, teardown. */
#include "core/core.h"

#include <ctype.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One candidate device with its indices, as listed to the user. */
typedef struct device_entry {
    unsigned p, d;
    cl_platform_id platform;
    cl_device_id device;
    cl_device_type type;
    char platform_name[128];
    char device_name[128];
} device_entry;

#define MAX_DEVICES 64

static int list_devices(device_entry *list, unsigned max) {
    cl_platform_id platforms[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS) return 0;
    unsigned n = 0;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devices[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devices, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && d < 16 && n < max; d++) {
            device_entry *e = &list[n++];
            memset(e, 0, sizeof *e);
            e->p = p;
            e->d = d;
            e->platform = platforms[p];
            e->device = devices[d];
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof e->type, &e->type, NULL);
            clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof e->platform_name - 1,
                              e->platform_name, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof e->device_name - 1, e->device_name,
                            NULL);
        }
    }
    return (int)n;
}

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return true;
    }
    return n == 0;
}

static const char *type_name(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) return "GPU";
    if (t & CL_DEVICE_TYPE_CPU) return "CPU";
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    return "other";
}

/* Whether device e is one selector sel names (NULL: any GPU). */
static bool matches(const device_entry *e, const char *sel) {
    if (!sel || !*sel || !strcasecmp(sel, "gpu")) return e->type & CL_DEVICE_TYPE_GPU;
    if (!strcasecmp(sel, "cpu")) return e->type & CL_DEVICE_TYPE_CPU;
    unsigned p, d;
    char extra;
    if (sscanf(sel, "%u:%u%c", &p, &d, &extra) == 2) return e->p == p && e->d == d;
    return contains_nocase(e->platform_name, sel) || contains_nocase(e->device_name, sel);
}

/* Picks the device for selector (NULL: the first GPU, else the first device). Returns the index
 * or -1. */
static int pick(const device_entry *list, int n, const char *sel) {
    for (int i = 0; i < n; i++)
        if (matches(&list[i], sel)) return i;
    return (!sel || !*sel) && n > 0 ? 0 : -1;
}

oclml_status oclml_device_match(const char *selector, unsigned nth, unsigned *count, char *pd,
                                size_t len) {
    if (!count) return OCLML_ERR_NULL_POINTER;
    if (pd && !len) return OCLML_ERR_INVALID_ARGUMENT;
    /* No selector: the one oclml_ctx_create would take (the environment is read here, in core,
     * as there). */
    if (!selector) selector = getenv("OCLML_DEVICE");
    device_entry list[MAX_DEVICES];
    int n = list_devices(list, MAX_DEVICES), found[MAX_DEVICES], nf = 0;
    for (int i = 0; i < n; i++)
        if (matches(&list[i], selector)) found[nf++] = i;
    if (!nf && (!selector || !*selector))
        for (int i = 0; i < n; i++) found[nf++] = i; /* no GPU: every device */
    if (!nf) return n ? OCLML_ERR_DEVICE_NOT_FOUND : OCLML_ERR_NO_DEVICE;
    *count = (unsigned)nf;
    const device_entry *e = &list[found[nth % (unsigned)nf]];
    if (pd) snprintf(pd, len, "%u:%u", e->p, e->d);
    return OCLML_SUCCESS;
}

static void describe_devices(char *out, size_t len, const device_entry *list, int n) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "\n  %u:%u  %s  [%s] (%s)", list[i].p,
                                 list[i].d, list[i].device_name, list[i].platform_name,
                                 type_name(list[i].type));
}

static void log_to_stderr(void *user, oclml_log_level level, const char *msg) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "oclml[%s]: %s\n", names[level & 3], msg);
}

static void copy_error(const oclml_ctx *ctx, char *err_text, size_t err_len) {
    if (err_text && err_len) {
        snprintf(err_text, err_len, "%s", oclml_ctx_last_error(ctx));
    }
}

oclml_status oclml_ctx_config_init(oclml_ctx_config *options) {
    if (!options) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "config is NULL");
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    return OCLML_SUCCESS;
}

/* The former name (include/oclml.h's aliases). */
oclml_status oclml_ctx_options_init(oclml_ctx_config *options) {
    return oclml_ctx_config_init(options);
}

/* Options filled by oclml_ctx_config_init carry their size; others are refused (with no
 * context yet, the reason goes to err_text). */
static bool options_sized(const oclml_ctx_config *o, char *err_text, size_t err_len) {
    if (o->struct_size == sizeof *o) return true;
    if (err_text && err_len)
        snprintf(err_text, err_len,
                 "options.struct_size is %zu, not %zu: fill the options with "
                 "oclml_ctx_config_init first",
                 o->struct_size, sizeof *o);
    return false;
}

/* Allocates a context and applies the options that do not depend on the device. */
static oclml_ctx *ctx_alloc(const oclml_ctx_config *o) {
    oclml_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    atomic_init(&ctx->tensors_alive, 0);
    atomic_init(&ctx->bytes_now, 0);
    atomic_init(&ctx->bytes_peak, 0);
    pthread_mutex_init(&ctx->build_lock, NULL);
    pthread_mutex_init(&ctx->launch_lock, NULL);
    pthread_mutex_init(&ctx->error_lock, NULL);
    pthread_mutex_init(&ctx->scratch_lock, NULL);
    pthread_mutex_init(&ctx->caps_lock, NULL);
    pthread_cond_init(&ctx->built_cond, NULL);
    ctx->log_fn = o->log_fn;
    ctx->log_user = o->log_user;
    const char *verbose = getenv("OCLML_VERBOSE");
    if (!ctx->log_fn && verbose && !strcmp(verbose, "1")) ctx->log_fn = log_to_stderr;
    /* The environment is read here, once: ops never call getenv. */
    const char *env_path = getenv("OCLML_KERNEL_PATH");
    ctx->kernel_path =
        oclml__asprintf("%s:%s", o->kernel_path ? o->kernel_path : "", env_path ? env_path : "");
    const char *env_opts = getenv("OCLML_BUILD_OPTIONS");
    ctx->build_options =
        oclml__asprintf("%s%s%s", env_opts ? env_opts : "", env_opts && o->build_options ? " " : "",
                        o->build_options ? o->build_options : "");
    return ctx;
}

/* Shared tail of create and wrap: device facts, disk cache, tuning table. Nothing is compiled
 * here: ops build the variant they run on first use, or oclml_ctx_prewarm does it up front. */
static oclml_status ctx_finish_setup(oclml_ctx *ctx, const oclml_ctx_config *o) {
    if (!oclml__options_well_formed(ctx->build_options))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "build options '%s' ($OCLML_BUILD_OPTIONS, then the build_options "
                           "option) are malformed: each must be a -option, -D needs a name, no "
                           "quotes or backslashes",
                           ctx->build_options);
    oclml__device_probe(ctx);
    oclml__diskcache_open(ctx, o->cache_dir, o->cache_max_bytes);
    oclml__log(ctx, OCLML_LOG_INFO, "device %s [%s], selected by %s", ctx->info.device_name,
               ctx->info.platform_name, ctx->info.selected_by);
    oclml_status st = oclml__tune_init(ctx, o->tuning);
    if (!st) ctx->max_groups_yz = (size_t)oclml__tune(ctx, OCLML__TUNE_LAUNCH_GRID_YZ, 0);
    if (!st) {
        long rehearse = oclml__tune(ctx, OCLML__TUNE_BUILD_REHEARSE, 0);
        ctx->rehearse = rehearse > 0 || (rehearse < 0 && ctx->caps.is_gpu);
    }
    return st ? st : oclml__ops_context_init(ctx);
}

static void ctx_free(oclml_ctx *ctx) {
    if (!ctx) return;
    if (ctx->queue) clFinish(ctx->queue);
    oclml__programs_free(ctx);
    oclml__scratch_free_all(ctx, false);
    for (size_t i = 0; i < ctx->n_events; i++) clReleaseEvent(ctx->events[i]);
    free(ctx->events);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->context) clReleaseContext(ctx->context);
    pthread_mutex_destroy(&ctx->build_lock);
    pthread_mutex_destroy(&ctx->launch_lock);
    pthread_mutex_destroy(&ctx->error_lock);
    pthread_mutex_destroy(&ctx->scratch_lock);
    pthread_mutex_destroy(&ctx->caps_lock);
    pthread_cond_destroy(&ctx->built_cond);
    free(ctx->tune);
    free(ctx->kernel_path);
    free(ctx->build_options);
    free(ctx->last_error);
    free(ctx);
}

/* The start of create and wrap: the options (the caller's, or defaults filled into *defaults),
 * checked for their size, and a context allocated with what needs no device. */
static oclml_status ctx_begin(oclml_ctx_config *defaults, const oclml_ctx_config *options,
                              char *err_text, size_t err_len, oclml_ctx **out) {
    oclml_ctx_config_init(defaults);
    const oclml_ctx_config *o = options ? options : defaults;
    *out = NULL;
    if (!options_sized(o, err_text, err_len)) return OCLML_ERR_INVALID_ARGUMENT;
    oclml_ctx *ctx = ctx_alloc(o);
    if (!ctx || !ctx->build_options || !ctx->kernel_path) {
        if (err_text && err_len) snprintf(err_text, err_len, "out of host memory");
        ctx_free(ctx);
        return OCLML_ERR_OUT_OF_MEMORY;
    }
    *out = ctx;
    return OCLML_SUCCESS;
}

static oclml_status fail_create(oclml_ctx *ctx, oclml_status st, char *err_text, size_t err_len) {
    copy_error(ctx, err_text, err_len);
    ctx_free(ctx);
    return st;
}

oclml_status oclml_ctx_create(oclml_ctx **out, const oclml_ctx_config *options, char *err_text,
                              size_t err_len) {
    if (err_text && err_len) err_text[0] = '\0';
    if (!out) return OCLML_ERR_NULL_POINTER;
    *out = NULL;
    oclml_ctx_config defaults;
    const oclml_ctx_config *o = options ? options : &defaults;
    oclml_ctx *ctx;
    oclml_status st0 = ctx_begin(&defaults, options, err_text, err_len, &ctx);
    if (st0) return st0;

    /* Where creation time goes (logged at info level): the OpenCL platforms' start (driver
     * initialisation), the context, the queue, and the library's own setup. */
    double t0 = oclml__now_ms();
    device_entry list[MAX_DEVICES];
    int n = list_devices(list, MAX_DEVICES);
    double t_list = oclml__now_ms();
    if (n == 0) {
        oclml__fail(
            ctx, OCLML_ERR_NO_DEVICE,
            "no OpenCL platform or device found (is an ICD such as pocl-opencl-icd installed?)");
        return fail_create(ctx, OCLML_ERR_NO_DEVICE, err_text, err_len);
    }
    const char *sel = o->device;
    const char *origin = "the device option";
    if (!sel || !*sel) {
        sel = getenv("OCLML_DEVICE");
        origin = "OCLML_DEVICE";
    }
    int i = pick(list, n, sel);
    if (i < 0) {
        char devices[2048];
        describe_devices(devices, sizeof devices, list, n);
        oclml__fail(ctx, OCLML_ERR_DEVICE_NOT_FOUND,
                    "no OpenCL device matches %s='%s' (use gpu, cpu, P:D, or part of a platform "
                    "or device name); devices found:%s",
                    origin, sel, devices);
        return fail_create(ctx, OCLML_ERR_DEVICE_NOT_FOUND, err_text, err_len);
    }
    if (sel && *sel)
        snprintf(ctx->info.selected_by, sizeof ctx->info.selected_by, "%s=%s", origin, sel);
    else
        snprintf(ctx->info.selected_by, sizeof ctx->info.selected_by, "default: %s",
                 list[i].type & CL_DEVICE_TYPE_GPU ? "first GPU" : "no GPU, first device");

    ctx->platform = list[i].platform;
    ctx->device = list[i].device;
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
    ctx->context = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
    double t_context = oclml__now_ms();
    if (!ctx->context) {
        oclml__cl_fail(ctx, err, "clCreateContext");
        return fail_create(ctx, OCLML_ERR_OPENCL, err_text, err_len);
    }
    cl_command_queue_properties qp = o->profiling ? CL_QUEUE_PROFILING_ENABLE : 0;
    ctx->queue = clCreateCommandQueue(ctx->context, ctx->device, qp, &err);
    if (!ctx->queue) {
        oclml__cl_fail(ctx, err, "clCreateCommandQueue");
        return fail_create(ctx, OCLML_ERR_OPENCL, err_text, err_len);
    }
    ctx->profiling_queue = o->profiling != 0;
    double t_queue = oclml__now_ms();
    oclml_status st = ctx_finish_setup(ctx, o);
    if (st) return fail_create(ctx, st, err_text, err_len);
    double t_end = oclml__now_ms();
    oclml__log(ctx, OCLML_LOG_INFO,
               "context created in %.1f ms: platforms and devices (driver start) %.1f, "
               "clCreateContext %.1f, queue %.1f, library setup %.1f",
               t_end - t0, t_list - t0, t_context - t_list, t_queue - t_context, t_end - t_queue);
    *out = ctx;
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_wrap(oclml_ctx **out, cl_context cl_ctx, cl_device_id device,
                            cl_command_queue queue, const oclml_ctx_config *options, char *err_text,
                            size_t err_len) {
    if (err_text && err_len) err_text[0] = '\0';
    if (!out) return OCLML_ERR_NULL_POINTER;
    *out = NULL;
    if (!cl_ctx || !device || !queue) {
        if (err_text && err_len)
            snprintf(err_text, err_len, "oclml_ctx_wrap needs a cl_context, a device and a queue");
        return OCLML_ERR_NULL_POINTER;
    }
    oclml_ctx_config defaults;
    const oclml_ctx_config *o = options ? options : &defaults;
    oclml_ctx *ctx;
    oclml_status st0 = ctx_begin(&defaults, options, err_text, err_len, &ctx);
    if (st0) return st0;
    /* The queue must belong to this context and device, and run in order: ops rely on it. */
    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    cl_command_queue_properties qprops = 0;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (!err) err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
    if (!err) err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qprops, &qprops, NULL);
    if (err) {
        oclml__cl_fail(ctx, err, "clGetCommandQueueInfo");
        return fail_create(ctx, OCLML_ERR_OPENCL, err_text, err_len);
    }
    if (qctx != cl_ctx || qdev != device || (qprops & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
        oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                    "the queue must be an in-order queue of the given context and device");
        return fail_create(ctx, OCLML_ERR_INVALID_ARGUMENT, err_text, err_len);
    }
    err = clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof ctx->platform, &ctx->platform, NULL);
    if (err) {
        oclml__cl_fail(ctx, err, "clGetDeviceInfo(CL_DEVICE_PLATFORM)");
        return fail_create(ctx, OCLML_ERR_OPENCL, err_text, err_len);
    }
    clRetainContext(cl_ctx);
    clRetainCommandQueue(queue);
    ctx->context = cl_ctx;
    ctx->device = device;
    ctx->queue = queue;
    ctx->profiling_queue = (qprops & CL_QUEUE_PROFILING_ENABLE) != 0;
    snprintf(ctx->info.selected_by, sizeof ctx->info.selected_by, "application (wrapped context)");
    oclml_status st = ctx_finish_setup(ctx, o);
    if (st) return fail_create(ctx, st, err_text, err_len);
    *out = ctx;
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_destroy(oclml_ctx *ctx) {
    if (!ctx) return OCLML_ERR_NULL_POINTER;
    /* A tensor that outlived its context would point at freed memory. */
    const size_t alive = atomic_load_explicit(&ctx->tensors_alive, memory_order_relaxed);
    if (alive)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "%zu tensor%s of this context still alive: destroy them first", alive,
                           alive == 1 ? "" : "s");
    ctx_free(ctx);
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_finish(oclml_ctx *ctx) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    cl_int err = clFinish(ctx->queue);
    return err ? oclml__cl_fail(ctx, err, "clFinish") : OCLML_SUCCESS;
}

oclml_status oclml_ctx_cl_objects(const oclml_ctx *ctx, cl_context *cl_ctx, cl_device_id *device,
                                  cl_command_queue *queue) {
    if (!ctx) return OCLML_ERR_NULL_POINTER;
    if (cl_ctx) *cl_ctx = ctx->context;
    if (device) *device = ctx->device;
    if (queue) *queue = ctx->queue;
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_device_info(const oclml_ctx *ctx, oclml_device_info *info) {
    if (!ctx || !info) return OCLML_ERR_NULL_POINTER;
    *info = ctx->info;
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_cache_info(const oclml_ctx *ctx, oclml_cache_info *info) {
    if (!ctx || !info) return OCLML_ERR_NULL_POINTER;
    oclml_ctx *c = (oclml_ctx *)ctx;
    memset(info, 0, sizeof *info);
    pthread_mutex_lock(&c->build_lock);
    info->enabled = c->disk.enabled;
    snprintf(info->dir, sizeof info->dir, "%s", c->disk.dir);
    snprintf(info->disabled_reason, sizeof info->disabled_reason, "%s", c->disk.disabled_reason);
    info->max_bytes = c->disk.max_bytes;
    oclml__diskcache_usage(c, &info->entries, &info->bytes);
    info->memory_hits = c->memory_hits;
    info->disk_hits = c->disk_hits;
    info->disk_misses = c->disk_misses;
    info->disk_evictions = c->disk_evictions;
    info->builds = c->builds;
    pthread_mutex_unlock(&c->build_lock);
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_device_caps(oclml_ctx *ctx, oclml_device_caps *caps) {
    if (!ctx || !caps) return OCLML_ERR_NULL_POINTER;
    const oclml__caps *c = &ctx->caps;
    memset(caps, 0, sizeof *caps);
    caps->inline_ptx = oclml__caps_ptx(ctx);
    caps->mma_tf32 = oclml__caps_mma(ctx);
    caps->is_gpu = c->is_gpu;
    caps->compute_units = c->compute_units;
    caps->max_work_group_size = c->max_work_group_size;
    caps->local_mem_bytes = c->local_mem_bytes;
    caps->simd_width = c->simd_width;
    caps->fp64 = c->fp64;
    caps->fp16 = c->fp16;
    caps->nv_cc_major = c->nv_cc_major;
    caps->nv_cc_minor = c->nv_cc_minor;
    caps->register_cap_option = c->register_cap_option;
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_tuning(const oclml_ctx *ctx,
                              void (*fn)(void *, const char *, const char *, const char *,
                                         const char *),
                              void *user) {
    if (!ctx || !fn) return OCLML_ERR_NULL_POINTER;
    for (size_t i = 0; oclml__tunables[i].key; i++) {
        const oclml__tunable *t = &oclml__tunables[i];
        char value[256];
        size_t used = 0;
        for (unsigned j = 0; j < t->n && used < sizeof value; j++)
            used += (size_t)snprintf(value + used, sizeof value - used, "%s%ld", j ? ":" : "",
                                     ctx->tune[i].v[j]);
        fn(user, t->key, value, oclml__tune_source_name(ctx->tune[i].source), t->help);
    }
    return OCLML_SUCCESS;
}
