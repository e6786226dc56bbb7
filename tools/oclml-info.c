/* oclml-info: what liboclml sees on this machine. Lists OpenCL platforms and devices, which one
 * the library picks and why, whether every kernel file compiles there (with timing), and the
 * state of the program cache. Exit status 0 when every kernel compiles, 1 otherwise. */
#include <oclml.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void) {
    printf("usage: oclml-info [--device SELECTOR] [--no-compile]\n"
           "  SELECTOR: gpu, cpu, P:D, or part of a platform or device name (default: $OCLML_DEVICE,\n"
           "            else the first GPU, else the first device)\n"
           "environment: OCLML_DEVICE, OCLML_KERNEL_PATH, OCLML_CACHE_DIR, OCLML_BUILD_OPTIONS,\n"
           "             OCLML_VERBOSE\n");
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
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devices, &nd) != CL_SUCCESS) continue;
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
                   type & CL_DEVICE_TYPE_GPU ? "GPU" : type & CL_DEVICE_TYPE_CPU ? "CPU" : "other",
                   cu, (double)mem / (1 << 30));
        }
    }
}

typedef struct compile_report {
    oclml_ctx *ctx;
    int files, failed;
    double total_ms;
} compile_report;

static void compile_one(void *user, const char *file, const char *dir) {
    compile_report *r = user;
    double ms = 0;
    oclml_status st = oclml_ctx_build_file(r->ctx, file, NULL, &ms);
    r->files++;
    r->total_ms += ms;
    if (st) {
        r->failed++;
        printf("  %-18s FAILED (%s)\n%s\n", file, oclml_status_name(st), oclml_ctx_last_error(r->ctx));
    } else {
        printf("  %-18s ok   %8.1f ms   (%s)\n", file, ms, dir);
    }
}

static void print_cache(const oclml_ctx *ctx) {
    oclml_cache_info c;
    oclml_ctx_cache_info(ctx, &c);
    if (c.enabled)
        printf("program cache: %s\n  %zu entries, %.1f MiB of %.0f MiB cap; this run: %lu disk hits, "
               "%lu misses, %lu builds from source, %lu evictions\n",
               c.dir, c.entries, (double)c.bytes / (1 << 20), (double)c.max_bytes / (1 << 20),
               c.disk_hits, c.disk_misses, c.builds, c.disk_evictions);
    else
        printf("program cache: off (%s)\n", c.disabled_reason);
}

int main(int argc, char **argv) {
    oclml_ctx_options opts;
    oclml_ctx_options_init(&opts);
    int compile = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            opts.device = argv[++i];
        else if (!strcmp(argv[i], "--no-compile"))
            compile = 0;
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

    compile_report r = {.ctx = ctx};
    if (compile) {
        printf("\nkernel files (compiled for the selected device):\n");
        st = oclml_ctx_kernel_files(ctx, compile_one, &r);
        if (st) printf("  %s\n", oclml_ctx_last_error(ctx));
        else
            printf("  %d of %d files compiled in %.1f ms\n", r.files - r.failed, r.files, r.total_ms);
    }
    printf("\n");
    print_cache(ctx);
    oclml_ctx_destroy(ctx);
    return (st || r.failed) ? 1 : 0;
}
