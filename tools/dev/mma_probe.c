/* Rate of the tensor-core instruction the tiled GRU step uses (PTX mma.sync m16n8k8, TF32 in,
 * fp32 accumulate) on an NVIDIA OpenCL device, for work-group sizes and counts per SM: the
 * ceiling behind bench/DECISIONS.md's entry on the tiled GRU step. A developer's probe, not
 * built by default:
 *   cc -O2 -o mma_probe tools/dev/mma_probe.c -lOpenCL && ./mma_probe [compute units]
 * Each work-item keeps NACC independent accumulators and issues NACC products per iteration,
 * with no memory traffic; cycles per product per SM sub-partition assume the clock given
 * (default 1.98 GHz, the H100's maximum; under load it ran at ~1.77). */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src =
    "inline void mma(float *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {\n"
    "  float d0, d1, d2, d3;\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, \"\n"
    "               \"{%8,%9}, {%10,%11,%12,%13};\" : \"=f\"(d0), \"=f\"(d1), \"=f\"(d2), \"=f\"(d3)\n"
    "               : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"r\"(b0), \"r\"(b1), \"f\"(d[0]), \"f\"(d[1]),\n"
    "                 \"f\"(d[2]), \"f\"(d[3]));\n"
    "  d[0] = d0; d[1] = d1; d[2] = d2; d[3] = d3;\n"
    "}\n"
    "__kernel void probe(__global float *out, uint n) {\n"
    "  const uint t = get_global_id(0);\n"
    "  float acc[NACC][4];\n"
    "  for (int i = 0; i < NACC; i++) for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;\n"
    "  const uint a1 = t ^ 5u, a2 = t + 7u, a3 = t * 11u, b0 = t + 1u, b1 = t * 13u;\n"
    "  for (uint it = 0; it < n; it++)\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < NACC; i++) mma(acc[i], t * 3u + i, a1, a2, a3, b0, b1);\n"
    "  float s = 0.0f;\n"
    "  for (int i = 0; i < NACC; i++) for (int j = 0; j < 4; j++) s += acc[i][j];\n"
    "  out[t] = s; /* keeps the products alive */\n"
    "}\n";

static int fail(const char *what, cl_int e) {
    fprintf(stderr, "%s failed: %d\n", what, e);
    return 1;
}

int main(int argc, char **argv) {
    const unsigned cus = argc > 1 ? (unsigned)atoi(argv[1]) : 132;
    const double ghz = argc > 2 ? atof(argv[2]) : 1.98;
    cl_platform_id ps[8];
    cl_uint np = 0;
    cl_device_id dev = NULL;
    cl_int e = clGetPlatformIDs(8, ps, &np);
    for (cl_uint i = 0; !e && i < np && !dev; i++) {
        char name[128] = "";
        clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
        if (strstr(name, "NVIDIA") && clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL)) dev = NULL;
    }
    if (!dev) return fail("finding an NVIDIA OpenCL GPU", e);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    if (e) return fail("clCreateContext", e);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &e);
    if (e) return fail("clCreateCommandQueue", e);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, (size_t)cus * 4 * 512 * sizeof(float), NULL, &e);
    if (e) return fail("clCreateBuffer", e);
    static const int naccs[] = {1, 4, 12};
    static const size_t locals[] = {128, 256, 512};
    for (int ai = 0; ai < 3; ai++) {
        char opt[32];
        snprintf(opt, sizeof opt, "-DNACC=%d", naccs[ai]);
        cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
        if (e || (e = clBuildProgram(p, 1, &dev, opt, NULL, NULL))) return fail("building the probe", e);
        cl_kernel k = clCreateKernel(p, "probe", &e);
        if (e) return fail("clCreateKernel", e);
        for (int li = 0; li < 3; li++)
            for (unsigned per_cu = 1; per_cu <= 4; per_cu *= 2) {
                size_t local = locals[li], global = local * cus * per_cu;
                cl_uint n = 2000;
                clSetKernelArg(k, 0, sizeof out, &out);
                clSetKernelArg(k, 1, sizeof n, &n);
                double best = 1e30;
                for (int r = 0; r < 5; r++) {
                    cl_event ev;
                    cl_ulong t0, t1;
                    if ((e = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev))) return fail("launch", e);
                    clWaitForEvents(1, &ev);
                    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
                    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
                    clReleaseEvent(ev);
                    if ((t1 - t0) * 1e-9 < best) best = (t1 - t0) * 1e-9;
                }
                const double products = (double)global / 32 * n * naccs[ai];
                printf("accumulators %2d, work-group %3zu, %u per unit (%2zu warps per sub-partition): %.3f ms, "
                       "%.1f TFLOP/s TF32, %.2f cycles per product per sub-partition at %.2f GHz\n",
                       naccs[ai], local, per_cu, local / 32 * per_cu / 4, best * 1e3, products * 2048 / best * 1e-12,
                       best * ghz * 1e9 / (products / cus / 4), ghz);
            }
        clReleaseKernel(k);
        clReleaseProgram(p);
    }
    clReleaseMemObject(out);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
