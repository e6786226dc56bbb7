/* Runtime kernel compilation: finds kernel files and the helper headers they include, composes
 * the source the compiler sees, builds one variant per request and caches programs in memory
 * (per context) and as binaries on disk (diskcache.c).
 *
 * Search path: the context's directories (the kernel_path option, then $OCLML_KERNEL_PATH, read
 * at context creation), then the install directory; never the current directory. In each, a
 * kernel file NAME.cl is looked up as ops/NAME.cl, then NAME.cl; a header as include/NAME.h,
 * then NAME.h. A directory that others can write, or that is a symbolic link, is skipped with a
 * warning, as it would let others run code as us (the disk cache refuses the same). */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef OCLML_KERNEL_DIR
#error "OCLML_KERNEL_DIR must be defined by the build ($(pkgdatadir)/cl)"
#endif

#define MAX_INCLUDE_DEPTH 8
#define MAX_SEARCH_DIRS 16

/* ---- the search path ---- */

typedef struct search_path {
    char dirs[MAX_SEARCH_DIRS][1024];
    int n;
} search_path;

/* A kernel directory is code we run: one that others can write, or that is a symbolic link
 * (which whoever can write the link's directory may point elsewhere), is skipped, as the disk
 * cache refuses one, and named as skipped wherever the search path is listed. The directory is
 * judged, and then searched, as the path spelled to name it last (oclml__dir_path: "link/." is
 * "link"). Returns why it is skipped, "" where it is no directory (skipped quietly), or NULL
 * with the path to search in `use`. */
static const char *dir_refusal(const char *dir, char *use, size_t len) {
    struct stat st;
    const int bad = oclml__dir_path(dir, use, len);
    if (bad) return bad == ELOOP ? "a symbolic link" : "";
    if (lstat(use, &st)) return "";
    if (S_ISLNK(st.st_mode)) return "a symbolic link";
    if (!S_ISDIR(st.st_mode)) return "";
    return oclml__writable_by_others(&st) ? "writable by others" : NULL;
}

/* The directories to search, in order. `listed` (may be NULL) receives every directory named,
 * usable or not, for error messages. */
static void search_dirs(const oclml_ctx *ctx, search_path *sp, char *listed, size_t len) {
    const char *lists[2] = {ctx->kernel_path, OCLML_KERNEL_DIR};
    size_t used = 0;
    sp->n = 0;
    if (listed && len) listed[0] = '\0';
    for (int l = 0; l < 2; l++) {
        for (const char *s = lists[l]; s && *s;) {
            const char *colon = strchr(s, ':');
            size_t n = colon ? (size_t)(colon - s) : strlen(s);
            if (n > 0 && n < sizeof sp->dirs[0]) {
                char dir[1024], use[1024];
                memcpy(dir, s, n);
                dir[n] = '\0';
                const char *refused = dir_refusal(dir, use, sizeof use),
                           *why = refused && *refused ? refused : NULL;
                if (why)
                    oclml__log(ctx, OCLML_LOG_WARN, "kernel directory %s is %s: not used", dir,
                               why);
                if (listed && used < len)
                    used += (size_t)snprintf(listed + used, len - used, "%s%s%s%s%s",
                                             used ? ", " : "", dir, why ? " (skipped: " : "",
                                             why ? why : "", why ? ")" : "");
                if (sp->n < MAX_SEARCH_DIRS && !refused)
                    memcpy(sp->dirs[sp->n++], use, strlen(use) + 1);
            }
            s = colon ? colon + 1 : NULL;
        }
    }
}

/* Finds sub/name, then name, in the search path's directories. */
static bool find_in(const search_path *sp, const char *sub, const char *name, char *path,
                    size_t len) {
    struct stat st;
    for (int i = 0; i < sp->n; i++) {
        snprintf(path, len, "%s/%s/%s", sp->dirs[i], sub, name);
        if (!stat(path, &st) && S_ISREG(st.st_mode)) return true;
        snprintf(path, len, "%s/%s", sp->dirs[i], name);
        if (!stat(path, &st) && S_ISREG(st.st_mode)) return true;
    }
    return false;
}

static bool name_with_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), s = strlen(suffix);
    return n > s && n < 128 && !strchr(name, '/') && name[0] != '.' &&
           !strcmp(name + n - s, suffix);
}

/* ---- composing the source ----
 * A kernel file includes helper headers with #include "name.h". Core resolves them itself from
 * the search path (each header once), so the composed text is exactly what the compiler sees:
 * the caches key on it, and a change to any header rebuilds what includes it. */

typedef struct composer {
    oclml_ctx *ctx;
    const search_path *sp;
    char *out;
    size_t len, cap;
    char seen[32][128];
    int n_seen;
    bool uses_ptx;
} composer;

static bool append(composer *c, const char *s, size_t n) {
    if (c->len + n + 1 > c->cap) {
        size_t cap = (c->cap ? c->cap : 16384);
        while (cap < c->len + n + 1) cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p) return false;
        c->out = p;
        c->cap = cap;
    }
    memcpy(c->out + c->len, s, n);
    c->len += n;
    c->out[c->len] = '\0';
    return true;
}

static bool appendf(composer *c, const char *fmt, const char *s, unsigned line) {
    char buf[256];
    int n = snprintf(buf, sizeof buf, fmt, line, s);
    return n > 0 && (size_t)n < sizeof buf && append(c, buf, (size_t)n);
}

/* If line (up to its end) is #include "x", copies x into name. */
static bool include_line(const char *line, const char *end, char *name, size_t len) {
    const char *p = line;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p >= end || *p != '#') return false;
    p++;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (end - p < 8 || strncmp(p, "include", 7)) return false;
    p += 7;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p >= end || *p != '"') return false;
    const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
    if (!q || (size_t)(q - p - 1) >= len) return false;
    memcpy(name, p + 1, (size_t)(q - p - 1));
    name[q - p - 1] = '\0';
    return true;
}

static oclml_status compose(composer *c, const char *path, const char *label, int depth);

static oclml_status compose_header(composer *c, const char *name, const char *from, int depth) {
    for (int i = 0; i < c->n_seen; i++)
        if (!strcmp(c->seen[i], name)) return OCLML_SUCCESS; /* each header once */
    if (!name_with_suffix(name, ".h") || depth >= MAX_INCLUDE_DEPTH || c->n_seen >= 32)
        return oclml__fail(c->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "%s includes \"%s\": kernel headers are NAME.h, at most %d deep", from,
                           name, MAX_INCLUDE_DEPTH);
    char path[1200];
    if (!find_in(c->sp, "include", name, path, sizeof path))
        return oclml__fail(c->ctx, OCLML_ERR_KERNEL_NOT_FOUND,
                           "header \"%s\" (included by %s) not found on the kernel search path",
                           name, from);
    snprintf(c->seen[c->n_seen++], sizeof c->seen[0], "%s", name);
    if (!strcmp(name, "ptx.h")) c->uses_ptx = true;
    return compose(c, path, name, depth + 1);
}

static oclml_status compose(composer *c, const char *path, const char *label, int depth) {
    size_t n = 0;
    char why[256];
    char *text = oclml__read_file(path, &n, why, sizeof why);
    if (!text)
        return oclml__fail(c->ctx, OCLML_ERR_IO, "cannot read kernel source %s: %s", path, why);
    oclml_status st = OCLML_SUCCESS;
    bool ok = appendf(c, "#line %u \"%s\"\n", label, 1);
    unsigned line_no = 1;
    for (const char *line = text; ok && !st && line < text + n; line_no++) {
        const char *end = memchr(line, '\n', (size_t)(text + n - line));
        if (!end) end = text + n;
        char name[128];
        if (include_line(line, end, name, sizeof name)) {
            st = compose_header(c, name, label, depth);
            ok = appendf(c, "#line %u \"%s\"\n", label, line_no + 1);
        } else {
            ok = append(c, line, (size_t)(end - line)) && append(c, "\n", 1);
        }
        line = end + 1;
    }
    free(text);
    if (!ok && !st)
        st = oclml__fail(c->ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory composing %s", label);
    return st;
}

/* The composed source of a kernel file (malloc'd), whether it uses inline PTX, and the path it
 * was found at (malloc'd). */
static oclml_status compose_file(oclml_ctx *ctx, const char *file, char **source, bool *uses_ptx,
                                 char **found_at) {
    if (!name_with_suffix(file, ".cl"))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "'%s' is not a kernel file name (NAME.cl, no directory; helpers are "
                           "headers that kernel files include)",
                           file);
    search_path sp;
    char listed[4096];
    search_dirs(ctx, &sp, listed, sizeof listed);
    char path[1200];
    if (!find_in(&sp, "ops", file, path, sizeof path))
        return oclml__fail(ctx, OCLML_ERR_KERNEL_NOT_FOUND,
                           "kernel source '%s' not found; searched: %s (set OCLML_KERNEL_PATH or "
                           "the kernel_path option)",
                           file, listed[0] ? listed : "(no directory)");
    composer c = {.ctx = ctx, .sp = &sp};
    oclml_status st = compose(&c, path, file, 0);
    if (st) {
        free(c.out);
        return st;
    }
    *found_at = oclml__strdup(path);
    if (!*found_at) {
        free(c.out);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory composing %s", file);
    }
    *source = c.out;
    *uses_ptx = c.uses_ptx;
    return OCLML_SUCCESS;
}

/* ---- options ---- */

/* Build options must reach the driver as options: a stray -D without a name or an unbalanced
 * quote has crashed drivers inside clBuildProgram. */
bool oclml__options_well_formed(const char *opts) {
    for (const char *p = opts; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *w = p;
        while (*p && *p != ' ') {
            if (*p == '"' || *p == '\'' || *p == '\\' || (unsigned char)*p < 0x20) return false;
            p++;
        }
        if (*w != '-') return false;
        if ((p - w == 2) && (w[1] == 'D' || w[1] == 'I' || w[1] == 'U')) return false;
        if (w[1] == 'D' && (w[2] == '=' || (w[2] >= '0' && w[2] <= '9'))) return false;
    }
    return true;
}

/* Every option of a program: the language version, what the device's capabilities mean for
 * the kernels (device.c), the op's variant, the kernels wanted, and the user's options. */
static char *full_options(oclml_ctx *ctx, const oclml__program_spec *spec, bool uses_ptx) {
    char *dev = oclml__device_options(ctx, spec->max_registers);
    char wants[512] = "";
    if (!spec->kernels) {
        snprintf(wants, sizeof wants, " -DOCLML_WANT_ALL=1");
    } else {
        size_t used = 0;
        for (const char *s = spec->kernels; *s && used < sizeof wants;) {
            size_t n = strcspn(s, " ");
            if (n)
                used += (size_t)snprintf(wants + used, sizeof wants - used, " -DOCLML_WANT_%.*s=1",
                                         (int)n, s);
            s += n;
            s += strspn(s, " ");
        }
    }
    /* A tensor-core kernel with its instruction emulated (MMA_EMULATE=1, the tests' way to run
     * those kernels where the device lacks them) is built without optimization on CPUs: it
     * exists to check layouts and accuracy, and optimizing its unrolled, barrier-laden code is
     * most of what such a program costs a CPU compiler (minutes per program on PoCL, seconds
     * without). GPU compilers take such programs in seconds either way. */
    const bool emulates =
        !ctx->caps.is_gpu && spec->defines && strstr(spec->defines, "-DMMA_EMULATE=1");
    char *opts = dev ? oclml__asprintf("-cl-std=CL1.2%s%s%s %s%s %s", dev,
                                       uses_ptx && oclml__caps_ptx(ctx) ? " -DOCLML_PTX=1" : "",
                                       wants, spec->defines ? spec->defines : "",
                                       emulates ? " -cl-opt-disable" : "", ctx->build_options)
                     : NULL;
    free(dev);
    return opts;
}

/* ---- building ---- */

static void disk_key(const oclml_ctx *ctx, const char *source, const char *options,
                     uint8_t key[32]) {
    oclml__sha256_ctx s;
    oclml__sha256_init(&s);
    oclml__sha256_update_str(&s, "oclml-program-cache-v2");
    oclml__sha256_update_str(&s, source);
    oclml__sha256_update_str(&s, options);
    oclml__device_key(ctx, &s);
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

void oclml__count(oclml_ctx *ctx, unsigned long *counter) {
    pthread_mutex_lock(&ctx->build_lock);
    (*counter)++;
    pthread_mutex_unlock(&ctx->build_lock);
}

/* Whether programs go through the disk cache: where it is enabled, and by default not where the
 * driver caches programs itself at less cost (the tuning key cache.binaries overrides that). */
static bool disk_binaries(const oclml_ctx *ctx) {
    long policy = oclml__tune(ctx, OCLML__TUNE_CACHE_BINARIES, 0);
    return ctx->disk.enabled && (policy == 1 || (policy == -1 && !ctx->caps.driver_program_cache));
}

/* Tries the disk cache: a verified binary that the driver accepts and builds. */
static cl_program program_from_disk(oclml_ctx *ctx, const uint8_t key[32], const char *options) {
    if (!disk_binaries(ctx)) return NULL;
    unsigned char *bin = NULL;
    size_t len = 0;
    if (!oclml__diskcache_load(ctx, key, &bin, &len)) {
        oclml__count(ctx, &ctx->disk_misses);
        return NULL;
    }
    cl_int err, bin_status = CL_SUCCESS;
    const unsigned char *bins[1] = {bin};
    cl_program prog =
        clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &len, bins, &bin_status, &err);
    free(bin);
    if (prog && !err && !bin_status)
        err = clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL);
    if (!prog || err || bin_status) {
        if (prog) clReleaseProgram(prog);
        oclml__log(ctx, OCLML_LOG_WARN, "cached binary rejected by the driver (%s); rebuilding",
                   oclml__cl_error_name(err ? err : bin_status));
        oclml__diskcache_evict(ctx, key);
        oclml__count(ctx, &ctx->disk_evictions);
        oclml__count(ctx, &ctx->disk_misses);
        return NULL;
    }
    oclml__count(ctx, &ctx->disk_hits);
    return prog;
}

static void program_to_disk(oclml_ctx *ctx, cl_program prog, const uint8_t key[32]) {
    if (!disk_binaries(ctx)) return;
    size_t len = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) || len == 0) return;
    unsigned char *bin = malloc(len);
    if (!bin) return;
    unsigned char *bins[1] = {bin};
    if (!clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL))
        oclml__diskcache_store(ctx, key, bin, len);
    free(bin);
}

/* Builds source with options, from the disk cache when it holds it. `label` names the program in
 * errors and logs. quiet: a failure records no error (capability probes). */
static oclml_status build_source(oclml_ctx *ctx, const char *label, const char *source,
                                 const char *options, bool quiet, cl_program *out) {
    if (!oclml__options_well_formed(ctx->build_options))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "build options '%s' are malformed (each must be a -option; -D needs a "
                           "name; no quotes or backslashes)",
                           ctx->build_options);
    uint8_t key[32];
    disk_key(ctx, source, options, key);
    cl_program prog = program_from_disk(ctx, key, options);
    if (prog) {
        *out = prog;
        return OCLML_SUCCESS;
    }
    cl_int err;
    prog = clCreateProgramWithSource(ctx->context, 1, &source, NULL, &err);
    if (!prog)
        return quiet ? OCLML_ERR_OPENCL : oclml__cl_fail(ctx, err, "clCreateProgramWithSource");
    oclml__count(ctx, &ctx->builds);
    oclml__log(ctx, OCLML_LOG_DEBUG, "building %s with: %s", label, options);
    err = clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL);
    char *log = build_log(ctx, prog);
    oclml_status st = OCLML_SUCCESS;
    if (err) {
        st = OCLML_ERR_BUILD_FAILED;
        if (!quiet)
            oclml__fail_text(
                ctx, st, err,
                oclml__asprintf("building %s failed (%s) on device '%s' [%s]\noptions: "
                                "%s\nbuild log:\n%s",
                                label, oclml__cl_error_name(err), ctx->info.device_name,
                                ctx->info.platform_name, options, log ? log : "(unavailable)"));
        clReleaseProgram(prog);
    } else {
        /* Warnings, or register and spill counts with -cl-nv-verbose. */
        if (log && log[strspn(log, " \n")])
            oclml__log(ctx, OCLML_LOG_DEBUG, "%s build log:\n%s", label, log);
        program_to_disk(ctx, prog, key);
        *out = prog;
    }
    free(log);
    return st;
}

oclml_status oclml__build_probe(oclml_ctx *ctx, const char *label, const char *source,
                                const char *options) {
    cl_program prog = NULL;
    oclml_status st = build_source(ctx, label, source, options, true, &prog);
    if (prog) clReleaseProgram(prog);
    return st;
}

/* ---- the in-memory cache ----
 * Entries are found by their request text (file, defines, kernels, registers), which costs no
 * file access on the hot path. A request seen for the first time is composed and keyed by its
 * content; an entry of the same content and options shares its program. While an entry builds,
 * build_lock is free: other programs build in parallel, and requests for this one wait on
 * built_cond. */

static int request_text(const oclml__program_spec *spec, char *out, size_t len) {
    int n = snprintf(out, len, "%s|%s|%s|%u", spec->file, spec->defines ? spec->defines : "",
                     spec->kernels ? spec->kernels : "*", spec->max_registers);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

static void entry_free(oclml__program_entry *e) {
    for (oclml__kernel_entry *k = e->kernels, *kn; k; k = kn) {
        kn = k->next;
        clReleaseKernel(k->kernel);
        free(k->name);
        free(k);
    }
    if (e->program) clReleaseProgram(e->program);
    free(e->path);
    free(e->request);
    free(e);
}

static void unlink_entry(oclml_ctx *ctx, oclml__program_entry *e) {
    for (oclml__program_entry **p = &ctx->programs; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            return;
        }
}

/* Composes and builds the program of e (not holding build_lock). */
static oclml_status build_entry(oclml_ctx *ctx, const oclml__program_spec *spec,
                                oclml__program_entry *e) {
    char *source = NULL, *options = NULL;
    bool uses_ptx = false;
    oclml_status st = compose_file(ctx, spec->file, &source, &uses_ptx, &e->path);
    if (st) return st;
    options = full_options(ctx, spec, uses_ptx);
    if (!options) {
        free(source);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory building %s", spec->file);
    }
    oclml__sha256_ctx s;
    oclml__sha256_init(&s);
    oclml__sha256_update_str(&s, source);
    oclml__sha256_update_str(&s, options);
    oclml__sha256_final(&s, e->key);
    /* The same content built for another request: share it. */
    cl_program shared = NULL;
    pthread_mutex_lock(&ctx->build_lock);
    for (oclml__program_entry *o = ctx->programs; o && !shared; o = o->next)
        if (o != e && o->state == OCLML__PROG_READY && !memcmp(o->key, e->key, 32))
            shared = o->program;
    if (shared) clRetainProgram(shared);
    pthread_mutex_unlock(&ctx->build_lock);
    /* A build error names the file found, not just its name: another directory of the search
     * path may shadow the library's. */
    char label[1400];
    snprintf(label, sizeof label, "%s (%s)", spec->file, e->path);
    if (shared)
        e->program = shared;
    else
        st = build_source(ctx, label, source, options, false, &e->program);
    free(source);
    free(options);
    return st;
}

/* Finds or builds the program of spec. *built_ms (may be NULL): time spent building here. On
 * success build_lock is held on return, so that a caller that looks up a kernel next takes the
 * lock once per launch; callers release it. */
static oclml_status get_program(oclml_ctx *ctx, const oclml__program_spec *spec,
                                oclml__program_entry **out, double *built_ms) {
    char req[1024];
    if (built_ms) *built_ms = 0;
    if (!spec->file || request_text(spec, req, sizeof req))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "kernel request too long or without a file");
    pthread_mutex_lock(&ctx->build_lock);
    for (;;) {
        oclml__program_entry *e = ctx->programs;
        while (e && strcmp(e->request, req)) e = e->next;
        if (!e) break;
        if (e->state == OCLML__PROG_READY) {
            ctx->memory_hits++;
            *out = e;
            return OCLML_SUCCESS; /* build_lock held */
        }
        pthread_cond_wait(&ctx->built_cond, &ctx->build_lock); /* BUILDING elsewhere */
    }
    oclml__program_entry *e = calloc(1, sizeof *e);
    if (e) e->request = oclml__strdup(req);
    if (!e || !e->request) {
        pthread_mutex_unlock(&ctx->build_lock);
        free(e);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
    }
    e->state = OCLML__PROG_BUILDING;
    e->next = ctx->programs;
    ctx->programs = e;
    pthread_mutex_unlock(&ctx->build_lock);

    double t0 = oclml__now_ms();
    oclml_status st = build_entry(ctx, spec, e);
    double ms = oclml__now_ms() - t0;
    if (built_ms) *built_ms = ms;
    oclml__log(ctx, OCLML_LOG_DEBUG, "%s %s [%s] in %.0f ms", st ? "failed to build" : "built",
               spec->file, spec->defines ? spec->defines : "", ms);

    pthread_mutex_lock(&ctx->build_lock);
    if (st) {
        /* Forget the failure: a later request tries again and records its own error. */
        unlink_entry(ctx, e);
        entry_free(e);
        e = NULL;
    } else {
        e->state = OCLML__PROG_READY;
    }
    pthread_cond_broadcast(&ctx->built_cond);
    if (st) pthread_mutex_unlock(&ctx->build_lock);
    *out = e;
    return st; /* on success, build_lock held */
}

/* Whether spec's program is built (a rehearsal records those that are not). */
static bool program_ready(oclml_ctx *ctx, const oclml__program_spec *spec) {
    char req[1024];
    if (!spec->file || request_text(spec, req, sizeof req)) return true; /* the run reports it */
    pthread_mutex_lock(&ctx->build_lock);
    oclml__program_entry *e = ctx->programs;
    while (e && strcmp(e->request, req)) e = e->next;
    bool ready = e && e->state == OCLML__PROG_READY;
    pthread_mutex_unlock(&ctx->build_lock);
    return ready;
}

/* A kernel the built program does not give: the error names the OpenCL code, the kernel, the
 * file and the variant's options, so that a kernel file that is empty or not the library's
 * (CL_INVALID_KERNEL_NAME) is found from the text alone. */
static oclml_status kernel_fail(oclml_ctx *ctx, cl_int err, const char *name,
                                const oclml__program_spec *spec, const char *path) {
    const char *defines = spec->defines && *spec->defines ? spec->defines : "(none)";
    char *text =
        err == CL_INVALID_KERNEL_NAME
            ? oclml__asprintf("clCreateKernel failed: %s (%d): the program built from %s (%s, "
                              "options %s) has no kernel named '%s'",
                              oclml__cl_error_name(err), (int)err, spec->file, path ? path : "?",
                              defines, name)
            : oclml__asprintf("clCreateKernel failed: %s (%d) for kernel '%s' of %s (%s, options "
                              "%s)",
                              oclml__cl_error_name(err), (int)err, name, spec->file,
                              path ? path : "?", defines);
    return oclml__fail_text(ctx, OCLML_ERR_OPENCL, err, text);
}

oclml_status oclml__kernel(oclml_ctx *ctx, const oclml__program_spec *spec, const char *name,
                           cl_kernel *kernel) {
    if (oclml__rehearsing(ctx)) {
        if (!program_ready(ctx, spec)) oclml__rehearsal_record(spec);
        *kernel = NULL;
        return OCLML_SUCCESS;
    }
    oclml__program_entry *p = NULL;
    oclml_status st = get_program(ctx, spec, &p, NULL);
    if (st) return st;
    oclml__kernel_entry *k = p->kernels; /* build_lock held since get_program */
    while (k && strcmp(k->name, name)) k = k->next;
    if (!k) {
        cl_int err;
        cl_kernel obj = clCreateKernel(p->program, name, &err);
        k = obj ? calloc(1, sizeof *k) : NULL;
        if (k) k->name = oclml__strdup(name);
        if (!obj) {
            st = kernel_fail(ctx, err, name, spec, p->path);
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
    pthread_mutex_unlock(&ctx->build_lock);
    return st;
}

oclml_status oclml__program_build(oclml_ctx *ctx, const oclml__program_spec *spec,
                                  double *built_ms) {
    oclml__program_entry *p;
    oclml_status st = get_program(ctx, spec, &p, built_ms);
    if (!st) pthread_mutex_unlock(&ctx->build_lock);
    return st;
}

void oclml__programs_free(oclml_ctx *ctx) {
    for (oclml__program_entry *e = ctx->programs, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    ctx->programs = NULL;
}

oclml_status oclml_ctx_build_file(oclml_ctx *ctx, const char *file, const char *options,
                                  double *elapsed_ms) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!file) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "file is NULL");
    if (options && !oclml__options_well_formed(options))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "build options '%s' are malformed (each must be a -option; -D needs a "
                           "name; no quotes or backslashes)",
                           options);
    double t0 = oclml__now_ms();
    oclml__program_spec spec = {.file = file, .defines = options};
    st = oclml__program_build(ctx, &spec, NULL);
    if (elapsed_ms) *elapsed_ms = oclml__now_ms() - t0;
    return st;
}

/* ---- listing the kernel files on the search path ---- */

typedef struct file_list {
    char names[128][128];
    char dirs[128][1024];
    int n;
} file_list;

static void list_dir(file_list *l, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d)) && l->n < 128) {
        if (!name_with_suffix(ent->d_name, ".cl")) continue;
        bool seen = false;
        for (int i = 0; i < l->n && !seen; i++) seen = !strcmp(l->names[i], ent->d_name);
        if (seen) continue; /* an earlier directory of the search path wins */
        snprintf(l->names[l->n], sizeof l->names[0], "%s", ent->d_name);
        snprintf(l->dirs[l->n], sizeof l->dirs[0], "%s", dir);
        l->n++;
    }
    closedir(d);
}

oclml_status oclml_ctx_kernel_files(oclml_ctx *ctx, void (*fn)(void *, const char *, const char *),
                                    void *user) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!fn) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "callback is NULL");
    file_list *l = calloc(1, sizeof *l);
    search_path *sp = calloc(1, sizeof *sp);
    char listed[4096];
    if (!l || !sp) {
        free(l);
        free(sp);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
    }
    search_dirs(ctx, sp, listed, sizeof listed);
    for (int i = 0; i < sp->n; i++) {
        char ops[1100];
        snprintf(ops, sizeof ops, "%s/ops", sp->dirs[i]);
        list_dir(l, ops);
        list_dir(l, sp->dirs[i]);
    }
    int order[128];
    for (int i = 0; i < l->n; i++) order[i] = i;
    for (int i = 1; i < l->n; i++)
        for (int j = i; j > 0 && strcmp(l->names[order[j - 1]], l->names[order[j]]) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < l->n; i++) fn(user, l->names[order[i]], l->dirs[order[i]]);
    int n = l->n;
    free(l);
    free(sp);
    if (n == 0)
        return oclml__fail(ctx, OCLML_ERR_KERNEL_NOT_FOUND, "no kernel files found; searched: %s",
                           listed[0] ? listed : "(no directory)");
    return OCLML_SUCCESS;
}
