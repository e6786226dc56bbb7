/* The tensor cores' ceiling through NVIDIA's OpenCL with inline PTX: the rate of mma.sync bf16
 * and fp16 m16n8k16 and tf32 m16n8k8 (8 independent accumulators a warp, no memory traffic), and
 * whether Hopper's wgmma and cp.async.bulk with an mbarrier build at all (the driver compiles for
 * sm_90, not sm_90a). A developer's probe, not built by default (bench/DECISIONS.md, "Mixed
 * precision: the ceiling"):
 *   cc -O2 -Wno-format-security -o tensor_ceiling tools/dev/tensor_ceiling.c -lOpenCL
 *   ./tensor_ceiling */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *MMA_SRC =
    "#define ITERS 4096\n"
    "__kernel void k(__global float *out, uint seed) {\n"
    "  uint a0 = seed ^ get_global_id(0), a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u;\n"
    "  uint b0 = a0 * 11u, b1 = a0 * 13u;\n"
    "  float d[8][4];\n"
    "  for (int j = 0; j < 8; j++) for (int x = 0; x < 4; x++) d[j][x] = 0.0f;\n"
    "  for (int i = 0; i < ITERS; i++) {\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 8; j++) {\n"
    "      asm volatile(\"%s {%%0,%%1,%%2,%%3}, {%%4,%%5,%%6,%%7}, {%%8,%%9}, {%%0,%%1,%%2,%%3};\"\n"
    "        : \"+f\"(d[j][0]), \"+f\"(d[j][1]), \"+f\"(d[j][2]), \"+f\"(d[j][3])\n"
    "        : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"r\"(b0), \"r\"(b1));\n"
    "    }\n"
    "  }\n"
    "  float s = 0.0f;\n"
    "  for (int j = 0; j < 8; j++) for (int x = 0; x < 4; x++) s += d[j][x];\n"
    "  out[get_global_id(0)] = s;\n"
    "}\n";

static const char *WGMMA_SRC =
    "__kernel void k(__global float *out, uint seed) {\n"
    "  asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
    "  asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
    "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
    "  out[get_global_id(0)] = (float)seed;\n"
    "}\n";

static const char *BULK_SRC =
    "__kernel void k(__global float *out, uint seed) {\n"
    "  __local float buf[256] __attribute__((aligned(128)));\n"
    "  __local ulong bar;\n"
    "  if (get_local_id(0) == 0) {\n"
    "    asm volatile(\"mbarrier.init.shared.b64 [%0], 1;\" :: \"r\"((uint)(size_t)&bar) : \"memory\");\n"
    "    asm volatile(\"mbarrier.arrive.expect_tx.shared.b64 _, [%0], 1024;\" :: \"r\"((uint)(size_t)&bar) : \"memory\");\n"
    "    asm volatile(\"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];\"\n"
    "      :: \"r\"((uint)(size_t)buf), \"l\"(out), \"r\"((uint)(size_t)&bar) : \"memory\");\n"
    "  }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  out[get_global_id(0)] = buf[get_local_id(0) % 256] + (float)seed;\n"
    "}\n";

static void die(const char *what, cl_int err) {
    fprintf(stderr, "%s: %d\n", what, err);
    exit(1);
}

/* Builds src with -D options; returns the kernel or NULL, printing the build log's head. */
static cl_kernel build(cl_context ctx, cl_device_id dev, const char *name, const char *src,
                       const char *opts) {
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    err = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
    if (err) {
        char log[4096] = "";
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        log[600] = 0;
        for (char *c = log; *c; c++)
            if (*c == '\n') *c = ' ';
        printf("%-28s does not build (%d): %s\n", name, err, log);
        return NULL;
    }
    cl_kernel k = clCreateKernel(p, "k", &err);
    if (err) die("clCreateKernel", err);
    return k;
}

int main(void) {
    cl_platform_id plats[8];
    cl_uint np;
    clGetPlatformIDs(8, plats, &np);
    cl_device_id dev = NULL;
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL)) dev = NULL;
    if (!dev) die("no GPU", 0);
    char name[256];
    cl_uint units;
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    printf("%s, %u compute units\n", name, units);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    const size_t local = 256, global = (size_t)units * 8 * local; /* 8 warps a group, 8 groups a unit */
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, global * sizeof(float), NULL, &err);
    const struct {
        const char *name, *insn;
        double flops; /* a warp's instruction */
    } mma[] = {
        {"mma.sync bf16 m16n8k16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 4096},
        {"mma.sync fp16 m16n8k16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 4096},
        {"mma.sync tf32 m16n8k8", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 2048},
    };
    for (int m = 0; m < 3; m++) {
        static char src[4096];
        snprintf(src, sizeof src, MMA_SRC, mma[m].insn);
        cl_kernel k = build(ctx, dev, mma[m].name, src, "");
        if (!k) continue;
        cl_uint seed = 1;
        clSetKernelArg(k, 0, sizeof out, &out);
        clSetKernelArg(k, 1, sizeof seed, &seed);
        double best = 1e30;
        for (int rep = 0; rep < 6; rep++) {
            cl_event e;
            err = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &e);
            if (err) die("enqueue", err);
            clWaitForEvents(1, &e);
            cl_ulong t0, t1;
            clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
            clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
            clReleaseEvent(e);
            double ms = (double)(t1 - t0) * 1e-6;
            if (ms < best) best = ms;
        }
        const double warps = (double)global / 32, flops = warps * 4096 * 8 * mma[m].flops;
        printf("%-28s %8.1f TFLOP/s (%.3f ms)\n", mma[m].name, flops / (best * 1e-3) / 1e12, best);
    }
    if (build(ctx, dev, "wgmma (fence/commit/wait)", WGMMA_SRC, ""))
        printf("%-28s builds\n", "wgmma (fence/commit/wait)");
    if (build(ctx, dev, "cp.async.bulk + mbarrier", BULK_SRC, ""))
        printf("%-28s builds\n", "cp.async.bulk + mbarrier");
    return 0;
}
