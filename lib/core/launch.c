/* Enqueuing kernels: arguments and enqueue as one step under the launch lock (kernel objects
 * are shared by every thread of a context), and the 1-D grid most ops use. */
#include "core/core.h"

#include <stdio.h>

static cl_int enqueue(oclml_ctx *ctx, cl_kernel kernel, cl_uint dims, const size_t *offset,
                      const size_t *global, const size_t *local) {
    cl_event ev = NULL;
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, dims, offset, global, local, 0, NULL,
                                        ctx->profiling_active ? &ev : NULL);
    if (ev) oclml__profile_commit(ctx, ev);
    return err;
}

/* Enqueues the grid, in slices of at most max_groups_yz work-groups along dimensions 1 and 2
 * where it has more (each slice offset to its place in the whole range). */
static cl_int enqueue_sliced(oclml_ctx *ctx, cl_kernel kernel, cl_uint dims, const size_t *global,
                             const size_t *local) {
    size_t most = ctx->max_groups_yz ? ctx->max_groups_yz : 65535;
    bool slice = false;
    for (cl_uint d = 1; local && d < dims; d++) slice |= global[d] / local[d] > most;
    if (!slice) return enqueue(ctx, kernel, dims, NULL, global, local);
    size_t span[3] = {global[0], 1, 1}, offset[3] = {0, 0, 0}, size[3] = {global[0], 1, 1};
    for (cl_uint d = 1; d < dims; d++) span[d] = most * local[d];
    cl_int err = CL_SUCCESS;
    for (offset[2] = 0; !err && offset[2] < (dims > 2 ? global[2] : 1); offset[2] += span[2]) {
        size[2] = dims > 2 && global[2] - offset[2] < span[2] ? global[2] - offset[2] : span[2];
        for (offset[1] = 0; !err && offset[1] < global[1]; offset[1] += span[1]) {
            size[1] = global[1] - offset[1] < span[1] ? global[1] - offset[1] : span[1];
            err = enqueue(ctx, kernel, dims, offset, size, local);
        }
    }
    return err;
}

/* The code an injected failure gives: one no op re-plans on. */
#define INJECTED_ERROR CL_OUT_OF_HOST_MEMORY
#define INJECTED_TEXT "injected by the test fault hook: "

void oclml__test_fail_launch_after(oclml_ctx *ctx, int n) {
    pthread_mutex_lock(&ctx->launch_lock);
    ctx->fail_launch_in = n < 0 ? 0 : (unsigned)n + 1;
    pthread_mutex_unlock(&ctx->launch_lock);
}

/* Whether the hook makes this call fail (counting it). Caller holds launch_lock. */
static bool fault_due(oclml_ctx *ctx) { return ctx->fail_launch_in && --ctx->fail_launch_in == 0; }

oclml_status oclml__injected_fault(oclml_ctx *ctx, const char *what) {
    if (oclml__rehearsing(ctx)) return OCLML_SUCCESS;
    pthread_mutex_lock(&ctx->launch_lock);
    bool due = fault_due(ctx);
    pthread_mutex_unlock(&ctx->launch_lock);
    if (!due) return OCLML_SUCCESS;
    char text[160];
    snprintf(text, sizeof text, INJECTED_TEXT "%s", what);
    return oclml__cl_fail(ctx, INJECTED_ERROR, text);
}

oclml_status oclml__launch(oclml_ctx *ctx, cl_kernel kernel, const oclml__arg *args, unsigned nargs,
                           cl_uint dims, const size_t *global, const size_t *local,
                           cl_int *cl_err) {
    cl_int err = CL_SUCCESS;
    unsigned i;
    if (cl_err) *cl_err = CL_SUCCESS;
    if (oclml__rehearsing(ctx)) return OCLML_SUCCESS;
    pthread_mutex_lock(&ctx->launch_lock);
    const bool injected = fault_due(ctx);
    if (injected) err = INJECTED_ERROR;
    for (i = 0; i < nargs && !err; i++) err = clSetKernelArg(kernel, i, args[i].size, args[i].ptr);
    bool arg_failed = err != CL_SUCCESS && !injected;
    if (!err) err = enqueue_sliced(ctx, kernel, dims, global, local);
    pthread_mutex_unlock(&ctx->launch_lock);
    if (cl_err) *cl_err = err;
    if (!err) return OCLML_SUCCESS;
    char name[64] = "?", what[160];
    clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof name - 1, name, NULL);
    if (arg_failed)
        snprintf(what, sizeof what, "clSetKernelArg(%s, %u)", name, i - 1);
    else
        snprintf(what, sizeof what, "%sclEnqueueNDRangeKernel(%s)", injected ? INJECTED_TEXT : "",
                 name);
    return oclml__cl_fail(ctx, err, what);
}

void oclml__grid_1d_groups(const oclml_ctx *ctx, cl_kernel kernel, size_t n, size_t group,
                           size_t per_unit, size_t *global, size_t *local) {
    size_t wg = group < ctx->caps.max_work_group_size ? group : ctx->caps.max_work_group_size,
           kernel_most = 0;
    if (kernel &&
        !clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE,
                                  sizeof kernel_most, &kernel_most, NULL) &&
        kernel_most && wg > kernel_most)
        wg = kernel_most;
    if (wg == 0) wg = 1;
    size_t groups = (n + wg - 1) / wg;
    size_t cap = (size_t)(ctx->caps.compute_units ? ctx->caps.compute_units : 1) * per_unit;
    if (groups > cap) groups = cap;
    if (groups == 0) groups = 1;
    *local = wg;
    *global = groups * wg;
}

void oclml__grid_1d(const oclml_ctx *ctx, size_t n, size_t *global, size_t *local) {
    oclml__grid_1d_groups(ctx, NULL, n, 256, 32, global, local);
}
