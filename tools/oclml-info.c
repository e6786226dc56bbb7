/* oclml-info: what liboclml sees on this machine. Lists OpenCL platforms and devices, which one
 * the library picks and why, its capabilities, the tuning table and where each value came from
 * (the keys for developers, kernel internals and test hooks, only with --all or where set), the
 * op list, and the state of the program cache. With --warm it compiles, up front and in
 * parallel, every kernel variant the ops would pick on this device (exit status 1 if one fails). */
#include <oclml.h>

#include "tree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(void) {
    printf(
        "usage: oclml-info [--device SELECTOR] [--tune KEY=VALUE,...] [--warm [OPS]] [--ops] "
        "[--all]\n"
        "  SELECTOR: gpu, cpu, P:D, or part of a platform or device name (default: $OCLML_DEVICE,\n"
        "            else the first GPU, else the first device)\n"
        "  --warm [OPS]: compile the variants the ops (comma-separated; default all) pick here\n"
        "  --ops: list the ops with their kernel files and tuning keys\n"
        "  --all: list the tuning keys for developers too (kernel internals, test hooks)\n"
        "environment: OCLML_DEVICE, OCLML_KERNEL_PATH, OCLML_CACHE_DIR, OCLML_BUILD_OPTIONS,\n"
        "             OCLML_TUNE, OCLML_VERBOSE\n");
}

static void list_platforms(void) {
    cl_platform_id platforms[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS || np == 0) {
        printf("OpenCL platforms: none found\n");
        return;
    }
    printf("OpenCL platforms and devices:\n");
    for (cl_uint p = 0; p < np && p < 16; p++) {
        char name[256] = "", version[256] = "";
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof name - 1, name, NULL);
        clGetPlatformInfo(platforms[p], CL_PLATFORM_VERSION, sizeof version - 1, version, NULL);
        printf("  platform %u: %s (%s)\n", p, name, version);
        cl_device_id devices[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devices, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && d < 16; d++) {
            char dname[256] = "";
            cl_device_type type = 0;
            cl_uint cu = 0;
            cl_ulong mem = 0;
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
            printf("    %u:%u  %-40s %s, %u compute units, %.1f GiB\n", p, d, dname,
                   type & CL_DEVICE_TYPE_GPU   ? "GPU"
                   : type & CL_DEVICE_TYPE_CPU ? "CPU"
                                               : "other",
                   cu, (double)mem / (1 << 30));
        }
    }
}

static void show_progress(void *user, const char *op, const char *variant, double ms, size_t done,
                          size_t total) {
    double *sum = user;
    *sum += ms;
    printf("  [%3zu/%zu] %-22s %8.1f ms  %s\n", done, total, op, ms, variant);
    fflush(stdout);
}

/* Whether a key is listed: a user's key always, a developer's with --all or where it was set. */
static int listed(int all, const char *key, const char *source) {
    int dev = 0;
    return all || oclml_tuning_key_for_developers(key, &dev) || !dev ||
           (source && strcmp(source, "default"));
}

typedef struct listing {
    int all;
    unsigned hidden;
} listing;

static void show_tunable(void *user, const char *key, const char *value, const char *source,
                         const char *help) {
    listing *l = user;
    if (listed(l->all, key, source))
        printf("  %-23s %-12s %-14s %s\n", key, value, source, help);
    else
        l->hidden++;
}

static void show_op(void *user, const oclml_op_desc *op) {
    const listing *l = user;
    char keys[1024] = "";
    size_t used = 0;
    for (const char *s = op->tunables; *s;) {
        size_t n = strcspn(s, ",");
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)n, s);
        if (listed(l->all, key, NULL) && used < sizeof keys)
            used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", used ? "," : "", key);
        s += n + (s[n] == ',');
    }
    printf("  %-22s %-22s %-28s %s\n", op->name, op->kernel_file, keys[0] ? keys : "-",
           op->summary);
}

static void print_cache(const oclml_ctx *ctx) {
    oclml_cache_info c;
    oclml_ctx_cache_info(ctx, &c);
    if (c.enabled)
        printf(
            "program cache: %s\n  %zu entries, %.1f MiB of %.0f MiB cap; this run: %lu disk hits, "
            "%lu misses, %lu builds from source, %lu evictions\n",
            c.dir, c.entries, (double)c.bytes / (1 << 20), (double)c.max_bytes / (1 << 20),
            c.disk_hits, c.disk_misses, c.builds, c.disk_evictions);
    else
        printf("program cache: off (%s)\n", c.disabled_reason);
}

int main(int argc, char **argv) {
    oclml_ctx_config opts;
    oclml_ctx_config_init(&opts);
    opts.kernel_path = oclml_tree_kernel_path();
    int warm = 0, ops = 0, all = 0;
    const char *warm_ops = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            opts.device = argv[++i];
        else if (!strcmp(argv[i], "--tune") && i + 1 < argc)
            opts.tuning = argv[++i];
        else if (!strcmp(argv[i], "--warm")) {
            warm = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-') warm_ops = argv[++i];
        } else if (!strcmp(argv[i], "--ops"))
            ops = 1;
        else if (!strcmp(argv[i], "--all"))
            all = 1;
        else {
            usage();
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    printf("liboclml %s\n\n", oclml_version_string());
    list_platforms();

    char err[4096];
    oclml_ctx *ctx = NULL;
    oclml_status st = oclml_ctx_create(&ctx, &opts, err, sizeof err);
    if (st) {
        printf("\nno device selected: %s\n%s\n", oclml_status_name(st), err);
        return 1;
    }
    oclml_device_info d;
    oclml_ctx_device_info(ctx, &d);
    printf("\nselected: %s [%s]\n  why: %s\n  version: %s, driver %s\n"
           "  %u compute units at %u MHz, max work-group %zu, local memory %zu KiB, "
           "global memory %.1f GiB (largest allocation %.1f GiB)\n",
           d.device_name, d.platform_name, d.selected_by, d.device_version, d.driver_version,
           d.compute_units, d.clock_mhz, d.max_work_group_size, d.local_mem_bytes >> 10,
           (double)d.global_mem_bytes / (1 << 30), (double)d.max_alloc_bytes / (1 << 30));
    oclml_device_caps c;
    oclml_ctx_device_caps(ctx, &c);
    printf(
        "  capabilities: SIMD width %u, fp64 %s, fp16 %s, register cap option %s, inline PTX %s, "
        "TF32 mma.sync %s",
        c.simd_width, c.fp64 ? "yes" : "no", c.fp16 ? "yes" : "no",
        c.register_cap_option ? "yes" : "no", c.inline_ptx ? "yes" : "no",
        c.mma_tf32 ? "yes" : "no");
    if (c.nv_cc_major) printf(", compute capability %u.%u", c.nv_cc_major, c.nv_cc_minor);
    printf("\n\ntuning table (key, value, source, meaning):\n");
    listing keys = {all, 0};
    oclml_ctx_tuning(ctx, show_tunable, &keys);
    if (keys.hidden)
        printf("  (%u keys for developers at their defaults not shown: --all lists them)\n",
               keys.hidden);
    int tuned = 0;
    char clblast[1024];
    oclml_ctx_clblast_tuning(ctx, &tuned, clblast, sizeof clblast);
    printf("CLBlast parameters: %s (%s)\n",
           tuned ? "tuned values active for this device" : "CLBlast's own, no tuned values",
           clblast);
    if (ops) {
        printf("\nops (name, kernel files, tuning keys%s, what it does):\n",
               all ? "" : " for users");
        oclml_ops_list(show_op, &keys);
    }
    if (warm) {
        printf("\ncompiling the variants the ops pick on this device (%s):\n",
               warm_ops ? warm_ops : "all ops");
        fflush(stdout);
        double sum = 0, t0 = 0;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
        st = oclml_ctx_prewarm(ctx, warm_ops, 0, show_progress, &sum);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (st)
            printf("  %s: %s\n", oclml_status_name(st), oclml_ctx_last_error(ctx));
        else
            printf("  done in %.1f s wall (%.1f s of builds, in parallel)\n",
                   (ts.tv_sec * 1e3 + ts.tv_nsec / 1e6 - t0) / 1e3, sum / 1e3);
    }
    printf("\n");
    print_cache(ctx);
    oclml_ctx_destroy(ctx);
    return st ? 1 : 0;
}
