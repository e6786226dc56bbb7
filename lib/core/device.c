/* Device facts and capabilities, probed once per context: the one place that knows vendor
 * extensions and compiler options. Ops ask capabilities ("has TF32 mma.sync", "takes a register
 * cap"), never vendor names. */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* From cl_nv_device_attribute_query and cl_amd_device_attribute_query (not in every cl_ext.h). */
#define NV_COMPUTE_CAPABILITY_MAJOR 0x4000
#define NV_COMPUTE_CAPABILITY_MINOR 0x4001
#define NV_WARP_SIZE 0x4003
#define AMD_WAVEFRONT_WIDTH 0x4043

/* Registers per work-item when an op asks for the default: NVIDIA's compiler budgets registers
 * without knowing the work-group size and otherwise builds row kernels that cannot run the
 * 1024-wide work-groups long rows need (65536 registers per SM / 1024 = 64). */
#define DEFAULT_REGISTER_CAP 64

static void device_text(oclml_ctx *ctx, cl_device_info what, char *out, size_t len) {
    out[0] = '\0';
    clGetDeviceInfo(ctx->device, what, len - 1, out, NULL);
}

static char *extensions(oclml_ctx *ctx) {
    size_t n = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_EXTENSIONS, 0, NULL, &n) || !n) return NULL;
    char *ext = malloc(n + 1);
    if (ext && clGetDeviceInfo(ctx->device, CL_DEVICE_EXTENSIONS, n, ext, NULL)) {
        free(ext);
        return NULL;
    }
    if (ext) ext[n] = '\0';
    return ext;
}

void oclml__device_probe(oclml_ctx *ctx) {
    oclml_device_info *i = &ctx->info;
    oclml__caps *c = &ctx->caps;
    clGetPlatformInfo(ctx->platform, CL_PLATFORM_NAME, sizeof i->platform_name - 1,
                      i->platform_name, NULL);
    clGetPlatformInfo(ctx->platform, CL_PLATFORM_VERSION, sizeof i->platform_version - 1,
                      i->platform_version, NULL);
    device_text(ctx, CL_DEVICE_NAME, i->device_name, sizeof i->device_name);
    device_text(ctx, CL_DEVICE_VERSION, i->device_version, sizeof i->device_version);
    device_text(ctx, CL_DRIVER_VERSION, i->driver_version, sizeof i->driver_version);
    cl_device_type type = 0;
    clGetDeviceInfo(ctx->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    i->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    cl_uint cu = 0, mhz = 0;
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof mhz, &mhz, NULL);
    i->compute_units = cu ? cu : 1;
    i->clock_mhz = mhz;
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof i->max_work_group_size,
                    &i->max_work_group_size, NULL);
    if (!i->max_work_group_size) i->max_work_group_size = 1;
    cl_ulong v = 0;
    clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof v, &v, NULL);
    i->local_mem_bytes = (size_t)v;
    clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof v, &v, NULL);
    i->global_mem_bytes = v;
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof v, &v, NULL);
    i->max_alloc_bytes = v;

    c->is_gpu = i->is_gpu;
    c->compute_units = i->compute_units;
    c->max_work_group_size = i->max_work_group_size;
    c->local_mem_bytes = i->local_mem_bytes;
    const uint64_t least = (uint64_t)128 << 20, most = (uint64_t)1 << 30;
    uint64_t ws = i->global_mem_bytes / 16;
    ws = ws < least ? least : ws > most ? most : ws;
    if (i->max_alloc_bytes && ws > i->max_alloc_bytes) ws = i->max_alloc_bytes;
    c->workspace_bytes = (size_t)ws;
    c->simd_width = 1;
    cl_uint floats = 0;
    clGetDeviceInfo(ctx->device, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof floats, &floats, NULL);
    c->vector_floats = floats ? floats : 1;
    c->inline_ptx = c->mma_tf32 = -1; /* probed when first asked */
    c->static_local = -1;
    c->driver_program_cache = strstr(i->platform_name, "Portable Computing Language") != NULL;
    cl_device_fp_config fp = 0;
    c->fp64 = !clGetDeviceInfo(ctx->device, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp, &fp, NULL) && fp;
    char *ext = extensions(ctx);
    if (ext) {
        c->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
        c->register_cap_option = strstr(ext, "cl_nv_compiler_options") != NULL;
        cl_uint u = 0;
        if (strstr(ext, "cl_nv_device_attribute_query")) {
            if (!clGetDeviceInfo(ctx->device, NV_COMPUTE_CAPABILITY_MAJOR, sizeof u, &u, NULL))
                c->nv_cc_major = u;
            if (!clGetDeviceInfo(ctx->device, NV_COMPUTE_CAPABILITY_MINOR, sizeof u, &u, NULL))
                c->nv_cc_minor = u;
            if (!clGetDeviceInfo(ctx->device, NV_WARP_SIZE, sizeof u, &u, NULL) && u)
                c->simd_width = u;
        }
        if (strstr(ext, "cl_amd_device_attribute_query") &&
            !clGetDeviceInfo(ctx->device, AMD_WAVEFRONT_WIDTH, sizeof u, &u, NULL) && u)
            c->simd_width = u;
        free(ext);
    }
}

/* The probes: a kernel with the inline PTX the helpers use (warp shuffle, GPU-scope release
 * and acquire), and one with the TF32 tensor-core instruction. Built, not run: a driver that
 * compiles them runs them (PoCL and non-NVIDIA drivers reject the asm at build time). */
static const char *PTX_PROBE =
    "__kernel void oclml_probe_ptx(__global uint *p, float v) {\n"
    "    float t;\n"
    "    asm volatile(\"shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\" : \"=f\"(t) : \"f\"(v), "
    "\"r\"(1));\n"
    "    asm volatile(\"red.release.gpu.global.add.u32 [%0], 1;\" ::\"l\"(p) : \"memory\");\n"
    "    uint u;\n"
    "    asm volatile(\"ld.acquire.gpu.global.u32 %0, [%1];\" : \"=r\"(u) : \"l\"(p) : "
    "\"memory\");\n"
    "    p[1] = u + (uint)t;\n"
    "}\n";
static const char *MMA_PROBE = "__kernel void oclml_probe_mma(__global float *p) {\n"
                               "    uint a0 = as_uint(p[0]), b0 = as_uint(p[1]);\n"
                               "    float d0, d1, d2, d3;\n"
                               "    asm(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, \"\n"
                               "        \"{%8,%9}, {%10,%11,%12,%13};\"\n"
                               "        : \"=f\"(d0), \"=f\"(d1), \"=f\"(d2), \"=f\"(d3)\n"
                               "        : \"r\"(a0), \"r\"(a0), \"r\"(a0), \"r\"(a0), \"r\"(b0), "
                               "\"r\"(b0), \"f\"(0.0f), \"f\"(0.0f),\n"
                               "          \"f\"(0.0f), \"f\"(0.0f));\n"
                               "    p[2] = d0 + d1 + d2 + d3;\n"
                               "}\n";

void oclml__device_key(const oclml_ctx *ctx, oclml__sha256_ctx *s) {
    oclml__sha256_update_str(s, ctx->info.platform_name);
    oclml__sha256_update_str(s, ctx->info.platform_version);
    oclml__sha256_update_str(s, ctx->info.device_name);
    oclml__sha256_update_str(s, ctx->info.device_version);
    oclml__sha256_update_str(s, ctx->info.driver_version);
    oclml__sha256_update_str(s, OCLML_VERSION_STRING);
}

/* The probes' results are kept in the disk cache directory, keyed like a program (device, driver,
 * library version), so that a process whose disk cache knows the device builds no probe: on
 * NVIDIA even a cached program binary is PTX that the driver compiles again at load. */
static void probe_file(const oclml_ctx *ctx, char *path, size_t len) {
    oclml__sha256_ctx s;
    uint8_t key[32];
    char hex[65];
    oclml__sha256_init(&s);
    oclml__sha256_update_str(&s, "oclml-caps-v2");
    oclml__device_key(ctx, &s);
    oclml__sha256_final(&s, key);
    oclml__hex(key, 32, hex);
    snprintf(path, len, "%s/caps-%s.txt", ctx->disk.dir, hex);
}

/* The opt-in maxima of the compute units that have them (KiB), largest first. */
static const size_t STATIC_LOCAL_KIB[] = {227, 163, 99, 64};

/* A kept record's static local size: unknown, the reported size or one of the probed ones
 * (anything else is a damaged record, which would have the planners build kernels that fail). */
static bool static_local_valid(const oclml_ctx *ctx, long bytes) {
    if (bytes == -1 || bytes == (long)ctx->caps.local_mem_bytes) return true;
    for (size_t i = 0; i < sizeof STATIC_LOCAL_KIB / sizeof STATIC_LOCAL_KIB[0]; i++)
        if (bytes == (long)(STATIC_LOCAL_KIB[i] * 1024)) return true;
    return false;
}

/* Reads the kept results; a fact still unknown there stays -1. */
static void probes_from_disk(oclml_ctx *ctx) {
    char path[1200];
    if (!ctx->disk.enabled) return;
    probe_file(ctx, path, sizeof path);
    size_t n;
    char *text = oclml__read_file(path, &n, NULL, 0);
    int ptx = -1, mma = -1;
    long local = -1;
    if (text &&
        sscanf(text, "inline_ptx=%d mma_tf32=%d static_local=%ld", &ptx, &mma, &local) == 3 &&
        ptx >= -1 && ptx <= 1 && mma >= -1 && mma <= 1 && static_local_valid(ctx, local)) {
        if (ctx->caps.inline_ptx < 0) ctx->caps.inline_ptx = ptx;
        if (ctx->caps.mma_tf32 < 0) ctx->caps.mma_tf32 = mma;
        if (ctx->caps.static_local < 0) ctx->caps.static_local = local;
    }
    free(text);
}

static void probes_to_disk(oclml_ctx *ctx) {
    char path[1200], tmp[1300];
    if (!ctx->disk.enabled) return;
    probe_file(ctx, path, sizeof path);
    /* A fresh file of a name nobody else has (a fixed name could be a FIFO, and opening one for
     * writing waits for a reader); the cache's scan removes it if this process dies first. */
    snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", ctx->disk.dir);
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return;
    }
    bool ok = fprintf(f, "inline_ptx=%d mma_tf32=%d static_local=%ld\n", ctx->caps.inline_ptx,
                      ctx->caps.mma_tf32, ctx->caps.static_local) > 0;
    ok = !fclose(f) && ok;
    if (!ok || rename(tmp, path)) unlink(tmp); /* readers never see a partial file */
}

/* One lazily probed fact: from the disk cache directory's record, else by building its probe.
 * Only GPUs run PTX: a CPU driver is spared the failing compile. */
static bool probe(oclml_ctx *ctx, int *fact, const char *label, const char *source) {
    pthread_mutex_lock(&ctx->caps_lock);
    if (*fact < 0 && ctx->caps.is_gpu) probes_from_disk(ctx);
    if (*fact < 0) {
        *fact = ctx->caps.is_gpu && !oclml__build_probe(ctx, label, source, "-cl-std=CL1.2");
        oclml__log(ctx, OCLML_LOG_DEBUG, "capability %s: %s", label, *fact ? "yes" : "no");
        if (ctx->caps.is_gpu) probes_to_disk(ctx);
    }
    bool yes = *fact == 1;
    pthread_mutex_unlock(&ctx->caps_lock);
    return yes;
}

bool oclml__caps_ptx(oclml_ctx *ctx) {
    return probe(ctx, &ctx->caps.inline_ptx, "inline PTX", PTX_PROBE);
}

bool oclml__caps_mma(oclml_ctx *ctx) {
    return oclml__caps_ptx(ctx) && probe(ctx, &ctx->caps.mma_tf32, "TF32 mma.sync", MMA_PROBE);
}

/* A kernel with an array of n floats in local memory: each of 64 work-items writes its share with
 * the elements' indices, then counts the elements that read back wrong the other way round. All
 * counts are 0 when the array is real; a driver that wrapped it at a smaller size would have two
 * indices write one place. */
static const char *LOCAL_PROBE =
    "__kernel void oclml_probe_local(__global uint *out) {\n"
    "    __local float s[OCLML_PROBE_FLOATS];\n"
    "    const uint l = get_local_id(0), n = OCLML_PROBE_FLOATS;\n"
    "    for (uint i = l; i < n; i += 64) s[i] = (float)i;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    uint wrong = 0;\n"
    "    for (uint i = l; i < n; i += 64) wrong += s[n - 1 - i] != (float)(n - 1 - i);\n"
    "    out[l] = wrong;\n"
    "}\n";

typedef enum probe_answer { PROBE_NO, PROBE_YES, PROBE_UNKNOWN } probe_answer;

/* Whether a kernel with `bytes` of __local array builds and computes right (one work-group of 64,
 * on a queue of its own, so that the user's queue is neither drained nor waited for). A refused
 * build or launch, or a wrong count, is a definite no; a failure to make the queue, the buffer
 * or to read back says nothing about the device. */
static probe_answer static_local_runs(oclml_ctx *ctx, size_t bytes) {
    char options[64];
    snprintf(options, sizeof options, "-cl-std=CL1.2 -DOCLML_PROBE_FLOATS=%zuu", bytes / 4);
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx->context, 1, &LOCAL_PROBE, NULL, &err);
    if (!prog) return PROBE_UNKNOWN;
    probe_answer answer = PROBE_UNKNOWN;
    cl_kernel k = NULL;
    cl_mem out = NULL;
    cl_command_queue q = NULL;
    cl_uint wrong[64];
    if (clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL)) {
        answer = PROBE_NO;
    } else if ((k = clCreateKernel(prog, "oclml_probe_local", &err)) &&
               (q = clCreateCommandQueue(ctx->context, ctx->device, 0, &err)) &&
               (out = clCreateBuffer(ctx->context, CL_MEM_WRITE_ONLY, sizeof wrong, NULL, &err)) &&
               !clSetKernelArg(k, 0, sizeof out, &out)) {
        const size_t n = 64;
        if (clEnqueueNDRangeKernel(q, k, 1, NULL, &n, &n, 0, NULL, NULL)) {
            answer = PROBE_NO;
        } else if (!clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof wrong, wrong, 0, NULL, NULL)) {
            answer = PROBE_YES;
            for (size_t i = 0; i < 64; i++)
                if (wrong[i]) answer = PROBE_NO;
        }
    }
    if (out) clReleaseMemObject(out);
    if (q) clReleaseCommandQueue(q);
    if (k) clReleaseKernel(k);
    clReleaseProgram(prog);
    return answer;
}

size_t oclml__caps_static_local(oclml_ctx *ctx) {
    pthread_mutex_lock(&ctx->caps_lock);
    if (ctx->caps.static_local < 0 && ctx->caps.is_gpu) probes_from_disk(ctx);
    if (ctx->caps.static_local < 0) {
        /* One probe a size at most, on GPUs only; kept on disk only when every answer was
         * definite (a transient failure leaves the next process to probe again). */
        size_t found = ctx->caps.local_mem_bytes;
        bool definite = true;
        for (size_t i = 0;
             ctx->caps.is_gpu && i < sizeof STATIC_LOCAL_KIB / sizeof STATIC_LOCAL_KIB[0]; i++) {
            const size_t bytes = STATIC_LOCAL_KIB[i] * 1024;
            if (bytes <= found) break;
            const probe_answer a = static_local_runs(ctx, bytes);
            if (a == PROBE_YES) found = bytes;
            definite = a != PROBE_UNKNOWN;
            if (a != PROBE_NO) break;
        }
        ctx->caps.static_local = (long)found;
        oclml__log(ctx, OCLML_LOG_DEBUG, "capability static local memory: %zu bytes", found);
        if (ctx->caps.is_gpu && definite) probes_to_disk(ctx);
    }
    const size_t bytes = (size_t)ctx->caps.static_local;
    pthread_mutex_unlock(&ctx->caps_lock);
    return bytes < ctx->caps.local_mem_bytes ? ctx->caps.local_mem_bytes : bytes;
}

char *oclml__device_options(oclml_ctx *ctx, unsigned max_registers) {
    unsigned cap = max_registers ? max_registers : DEFAULT_REGISTER_CAP;
    if (ctx->caps.register_cap_option) return oclml__asprintf(" -cl-nv-maxrregcount=%u", cap);
    return oclml__strdup("");
}
