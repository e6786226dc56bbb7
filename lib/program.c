/* Runtime kernel compilation: finds .cl sources, builds them per device with the op's options,
 * caches programs in memory (per context) and as binaries on disk (diskcache.c). */
#include "internal.h"
#include "rows.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef OCLML_KERNEL_DIR
#error "OCLML_KERNEL_DIR must be defined by the build ($(pkgdatadir)/cl)"
#endif

#define COMMON_FILE "common.cl"

/* Calls fn(dir) for each directory of the search path, in order: the context option,
 * $OCLML_KERNEL_PATH, then the install directory. Stops when fn returns true. */
static bool each_search_dir(const oclml_ctx *ctx, bool (*fn)(void *user, const char *dir), void *user) {
    const char *lists[3] = {ctx->kernel_path, getenv("OCLML_KERNEL_PATH"), OCLML_KERNEL_DIR};
    for (int l = 0; l < 3; l++) {
        const char *s = lists[l];
        while (s && *s) {
            const char *colon = strchr(s, ':');
            size_t n = colon ? (size_t)(colon - s) : strlen(s);
            if (n > 0 && n < 1024) {
                char dir[1024];
                memcpy(dir, s, n);
                dir[n] = '\0';
                if (fn(user, dir)) return true;
            }
            s = colon ? colon + 1 : NULL;
        }
    }
    return false;
}

typedef struct find_state {
    const char *file;
    char path[1200];
    char searched[4096];
    size_t used;
} find_state;

static bool try_dir(void *user, const char *dir) {
    find_state *f = user;
    snprintf(f->path, sizeof f->path, "%s/%s", dir, f->file);
    struct stat st;
    if (stat(f->path, &st) == 0 && S_ISREG(st.st_mode)) return true;
    if (f->used < sizeof f->searched)
        f->used += (size_t)snprintf(f->searched + f->used, sizeof f->searched - f->used, "%s%s",
                                    f->used ? ", " : "", dir);
    return false;
}

static bool valid_file_name(const char *file) {
    size_t n = strlen(file);
    return n > 3 && n < 128 && !strchr(file, '/') && file[0] != '.' && !strcmp(file + n - 3, ".cl");
}

/* Reads a kernel file found on the search path. */
static oclml_status load_file(oclml_ctx *ctx, const char *file, char **text, size_t *len) {
    find_state f = {.file = file};
    if (!each_search_dir(ctx, try_dir, &f))
        return oclml__fail(ctx, OCLML_ERR_KERNEL_NOT_FOUND,
                           "kernel source '%s' not found; searched: %s (set OCLML_KERNEL_PATH or "
                           "the kernel_path option)", file, f.used ? f.searched : "(no directory)");
    *text = oclml__read_file(f.path, len);
    if (!*text)
        return oclml__fail(ctx, OCLML_ERR_IO, "cannot read kernel source %s: %s", f.path,
                           strerror(errno));
    return OCLML_SUCCESS;
}

/* The complete source of a program: common.cl followed by the op's file. Kernels use no
 * #include, so this text with the build options is exactly what the compiler sees. */
static oclml_status assemble_source(oclml_ctx *ctx, const char *file, char **source) {
    char *common = NULL, *body = NULL;
    size_t clen = 0, blen = 0;
    oclml_status st = load_file(ctx, COMMON_FILE, &common, &clen);
    if (!st) st = load_file(ctx, file, &body, &blen);
    if (!st) {
        *source = oclml__asprintf("%s\n#line 1 \"%s\"\n%s", common, file, body);
        if (!*source) st = oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory assembling %s", file);
    }
    free(common);
    free(body);
    return st;
}

/* Options every program gets: facts of the device that kernels specialise on. Ops choose their
 * variants from the same facts, so one file has one option set per device and warm-up can build
 * exactly what the ops will use.
 * On NVIDIA, registers are capped at 64 per work-item: its compiler budgets registers without
 * knowing the work-group size and otherwise builds row kernels that cannot run the 1024-wide
 * work-groups long rows need (65536 registers per SM / 1024 = 64), unless the op sets its own cap
 * (it then keeps its work-groups small enough). OCLML_NV tells kernels that
 * inline PTX is available (its mem_fence is CTA-scoped; device-wide syncs need membar.gl). */
static char *full_options(const oclml_ctx *ctx, const char *op_options) {
    bool own_cap = op_options && strstr(op_options, "-cl-nv-maxrregcount"); /* an op's own cap */
    return oclml__asprintf("-cl-std=CL1.2%s%s -DOCLML_MAX_WG=%zu -DOCLML_IS_GPU=%d -DOCLML_LONG_ITEMS=%d %s %s",
                           ctx->nv_options && !own_cap ? " -cl-nv-maxrregcount=64" : "",
                           ctx->nv_options ? " -DOCLML_NV=1" : "",
                           ctx->info.max_work_group_size, ctx->info.is_gpu, OCLML_LONG_ITEMS,
                           op_options ? op_options : "", ctx->build_options);
}

static void disk_key(const oclml_ctx *ctx, const char *source, const char *options, uint8_t key[32]) {
    oclml__sha256_ctx s;
    oclml__sha256_init(&s);
    oclml__sha256_update_str(&s, "oclml-program-cache-v1");
    oclml__sha256_update_str(&s, source);
    oclml__sha256_update_str(&s, options);
    oclml__sha256_update_str(&s, ctx->info.platform_name);
    oclml__sha256_update_str(&s, ctx->info.platform_version);
    oclml__sha256_update_str(&s, ctx->info.device_name);
    oclml__sha256_update_str(&s, ctx->info.device_version);
    oclml__sha256_update_str(&s, ctx->info.driver_version);
    oclml__sha256_update_str(&s, OCLML_VERSION_STRING);
    oclml__sha256_final(&s, key);
}

/* The compiler's output for a program (malloc'd; NULL if there is none). */
static char *build_log(oclml_ctx *ctx, cl_program prog) {
    size_t n = 0;
    clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = malloc(n + 1);
    if (log) {
        log[0] = '\0';
        clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
        log[n] = '\0';
    }
    return log;
}

static oclml_status build_failed(oclml_ctx *ctx, cl_program prog, cl_int err, const char *file,
                                 const char *options) {
    char *log = build_log(ctx, prog);
    char *text = oclml__asprintf("building %s failed (%s) on device '%s' [%s]\noptions: %s\nbuild log:\n%s",
                                 file, oclml__cl_error_name(err), ctx->info.device_name,
                                 ctx->info.platform_name, options, log ? log : "(unavailable)");
    free(log);
    return oclml__fail_text(ctx, OCLML_ERR_BUILD_FAILED, err, text);
}

/* Tries the disk cache: a verified binary that the driver accepts and builds. */
static cl_program program_from_disk(oclml_ctx *ctx, const uint8_t key[32], const char *options) {
    unsigned char *bin = NULL;
    size_t len = 0;
    if (!oclml__diskcache_load(ctx, key, &bin, &len)) {
        ctx->disk_misses += ctx->disk.enabled;
        return NULL;
    }
    cl_int err, bin_status = CL_SUCCESS;
    const unsigned char *bins[1] = {bin};
    cl_program prog = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &len, bins,
                                                &bin_status, &err);
    free(bin);
    if (prog && !err && !bin_status) err = clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL);
    if (!prog || err || bin_status) {
        if (prog) clReleaseProgram(prog);
        oclml__log(ctx, OCLML_LOG_WARN, "cached binary rejected by the driver (%s); rebuilding",
                   oclml__cl_error_name(err ? err : bin_status));
        oclml__diskcache_evict(ctx, key);
        ctx->disk_evictions++;
        ctx->disk_misses++;
        return NULL;
    }
    ctx->disk_hits++;
    return prog;
}

static void program_to_disk(oclml_ctx *ctx, cl_program prog, const uint8_t key[32]) {
    if (!ctx->disk.enabled) return;
    size_t len = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) || len == 0) return;
    unsigned char *bin = malloc(len);
    if (!bin) return;
    unsigned char *bins[1] = {bin};
    if (!clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL))
        oclml__diskcache_store(ctx, key, bin, len);
    free(bin);
}

static oclml_status build_program(oclml_ctx *ctx, const char *file, const char *op_options,
                                  oclml__program_entry **out) {
    char *source = NULL, *options = NULL;
    oclml_status st = assemble_source(ctx, file, &source);
    if (st) return st;
    options = full_options(ctx, op_options);
    oclml__program_entry *e = calloc(1, sizeof *e);
    if (!options || !e) {
        free(source);
        free(options);
        free(e);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory building %s", file);
    }
    oclml__sha256(source, strlen(source), e->source_hash);
    uint8_t key[32];
    disk_key(ctx, source, options, key);

    cl_program prog = program_from_disk(ctx, key, options);
    if (!prog) {
        cl_int err;
        const char *src = source;
        prog = clCreateProgramWithSource(ctx->context, 1, &src, NULL, &err);
        if (!prog) st = oclml__cl_fail(ctx, err, "clCreateProgramWithSource");
        else {
            ctx->builds++;
            oclml__log(ctx, OCLML_LOG_DEBUG, "building %s with: %s", file, options);
            err = clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL);
            if (err) {
                st = build_failed(ctx, prog, err, file, options);
                clReleaseProgram(prog);
                prog = NULL;
            } else {
                /* Warnings, or register and spill counts with -cl-nv-verbose. */
                char *log = build_log(ctx, prog);
                if (log && log[strspn(log, " \n")]) oclml__log(ctx, OCLML_LOG_DEBUG, "%s build log:\n%s", file, log);
                free(log);
                program_to_disk(ctx, prog, key);
            }
        }
    }
    free(source);
    if (st) {
        free(options);
        free(e);
        return st;
    }
    e->file = oclml__strdup(file);
    e->options = oclml__strdup(op_options ? op_options : "");
    e->program = prog;
    free(options);
    if (!e->file || !e->options) {
        clReleaseProgram(prog);
        free(e->file);
        free(e->options);
        free(e);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
    }
    e->next = ctx->programs;
    ctx->programs = e;
    *out = e;
    return OCLML_SUCCESS;
}

/* Finds or builds the program; caller holds build_lock. */
static oclml_status get_program(oclml_ctx *ctx, const char *file, const char *op_options,
                                oclml__program_entry **out) {
    if (!valid_file_name(file))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "'%s' is not a kernel file name (NAME.cl, no directory)", file);
    const char *opts = op_options ? op_options : "";
    for (oclml__program_entry *e = ctx->programs; e; e = e->next)
        if (!strcmp(e->file, file) && !strcmp(e->options, opts)) {
            ctx->memory_hits++;
            *out = e;
            return OCLML_SUCCESS;
        }
    return build_program(ctx, file, opts, out);
}

oclml_status oclml__get_kernel(oclml_ctx *ctx, const char *file, const char *options,
                               const char *kernel_name, cl_kernel *kernel) {
    pthread_mutex_lock(&ctx->build_lock);
    oclml__program_entry *p = NULL;
    oclml_status st = get_program(ctx, file, options, &p);
    if (!st) {
        oclml__kernel_entry *k = p->kernels;
        while (k && strcmp(k->name, kernel_name)) k = k->next;
        if (!k) {
            cl_int err;
            cl_kernel obj = clCreateKernel(p->program, kernel_name, &err);
            k = obj ? calloc(1, sizeof *k) : NULL;
            if (k) k->name = oclml__strdup(kernel_name);
            if (!obj) {
                st = oclml__cl_fail(ctx, err, "clCreateKernel");
            } else if (!k || !k->name) {
                clReleaseKernel(obj);
                free(k);
                k = NULL;
                st = oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
            } else {
                k->kernel = obj;
                k->next = p->kernels;
                p->kernels = k;
            }
        }
        if (k) *kernel = k->kernel;
    }
    pthread_mutex_unlock(&ctx->build_lock);
    return st;
}

void oclml__programs_free(oclml_ctx *ctx) {
    oclml__program_entry *e = ctx->programs;
    while (e) {
        oclml__program_entry *next = e->next;
        oclml__kernel_entry *k = e->kernels;
        while (k) {
            oclml__kernel_entry *kn = k->next;
            clReleaseKernel(k->kernel);
            free(k->name);
            free(k);
            k = kn;
        }
        clReleaseProgram(e->program);
        free(e->file);
        free(e->options);
        free(e);
        e = next;
    }
    ctx->programs = NULL;
}

oclml_status oclml__launch(oclml_ctx *ctx, cl_kernel kernel, const oclml__arg *args, unsigned nargs,
                           cl_uint dims, const size_t *global, const size_t *local) {
    cl_int err = CL_SUCCESS;
    unsigned i;
    pthread_mutex_lock(&ctx->launch_lock);
    for (i = 0; i < nargs && !err; i++) err = clSetKernelArg(kernel, i, args[i].size, args[i].ptr);
    bool arg_failed = err != CL_SUCCESS;
    if (!err) {
        cl_event ev = NULL;
        err = clEnqueueNDRangeKernel(ctx->queue, kernel, dims, NULL, global, local, 0, NULL,
                                     ctx->profiling_active ? &ev : NULL);
        if (ev) oclml__profile_commit(ctx, ev);
    }
    pthread_mutex_unlock(&ctx->launch_lock);
    if (!err) return OCLML_SUCCESS;
    char name[64] = "?", what[128];
    clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof name - 1, name, NULL);
    if (arg_failed)
        snprintf(what, sizeof what, "clSetKernelArg(%s, %u)", name, i - 1);
    else
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", name);
    return oclml__cl_fail(ctx, err, what);
}

void oclml__grid_1d(const oclml_ctx *ctx, size_t n, size_t *global, size_t *local) {
    size_t wg = ctx->info.max_work_group_size < 256 ? ctx->info.max_work_group_size : 256;
    if (wg == 0) wg = 1;
    size_t groups = (n + wg - 1) / wg;
    size_t cap = (size_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * 32;
    if (groups > cap) groups = cap;
    if (groups == 0) groups = 1;
    *local = wg;
    *global = groups * wg;
}

oclml_status oclml_ctx_build_file(oclml_ctx *ctx, const char *file, const char *options,
                                  double *elapsed_ms) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!file) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "file is NULL");
    double t0 = oclml__now_ms();
    pthread_mutex_lock(&ctx->build_lock);
    oclml__program_entry *p;
    st = get_program(ctx, file, options, &p);
    pthread_mutex_unlock(&ctx->build_lock);
    if (elapsed_ms) *elapsed_ms = oclml__now_ms() - t0;
    return st;
}

/* ---- listing the kernel files on the search path ---- */

typedef struct file_list {
    char names[128][128];
    char dirs[128][1024];
    int n;
} file_list;

static bool list_dir(void *user, const char *dir) {
    file_list *l = user;
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *ent;
    while ((ent = readdir(d)) && l->n < 128) {
        if (!valid_file_name(ent->d_name) || !strcmp(ent->d_name, COMMON_FILE)) continue;
        bool seen = false;
        for (int i = 0; i < l->n && !seen; i++) seen = !strcmp(l->names[i], ent->d_name);
        if (seen) continue; /* an earlier directory of the search path wins */
        snprintf(l->names[l->n], sizeof l->names[0], "%s", ent->d_name);
        snprintf(l->dirs[l->n], sizeof l->dirs[0], "%s", dir);
        l->n++;
    }
    closedir(d);
    return false;
}

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

oclml_status oclml_ctx_kernel_files(oclml_ctx *ctx, void (*fn)(void *, const char *, const char *),
                                    void *user) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!fn) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "callback is NULL");
    file_list *l = calloc(1, sizeof *l);
    if (!l) return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
    each_search_dir(ctx, list_dir, l);
    /* Sort names, keeping each with its directory. */
    int order[128];
    for (int i = 0; i < l->n; i++) order[i] = i;
    for (int i = 1; i < l->n; i++)
        for (int j = i; j > 0 && by_name(l->names[order[j - 1]], l->names[order[j]]) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < l->n; i++) fn(user, l->names[order[i]], l->dirs[order[i]]);
    int n = l->n;
    free(l);
    if (n == 0) {
        find_state f = {.file = COMMON_FILE};
        each_search_dir(ctx, try_dir, &f);
        return oclml__fail(ctx, OCLML_ERR_KERNEL_NOT_FOUND, "no kernel files found; searched: %s",
                           f.used ? f.searched : "(no directory)");
    }
    return OCLML_SUCCESS;
}
