/* Device-side timing of enqueued ops through OpenCL profiling events. Timing by events excludes
 * the host's enqueue latency, which matters for microsecond-scale ops. */
#include "core/core.h"

#include <stdlib.h>

void oclml__profile_commit(oclml_ctx *ctx, cl_event ev) {
    if (!ctx->profiling_active) {
        clReleaseEvent(ev);
        return;
    }
    if (ctx->n_events == ctx->cap_events) {
        size_t cap = ctx->cap_events ? 2 * ctx->cap_events : 64;
        cl_event *bigger = realloc(ctx->events, cap * sizeof *bigger);
        if (!bigger) { /* losing one timing beats failing the op */
            clReleaseEvent(ev);
            return;
        }
        ctx->events = bigger;
        ctx->cap_events = cap;
    }
    ctx->events[ctx->n_events++] = ev;
}

void oclml__event_done(oclml_ctx *ctx, cl_event ev) {
    if (!ev) return;
    pthread_mutex_lock(&ctx->launch_lock);
    oclml__profile_commit(ctx, ev);
    pthread_mutex_unlock(&ctx->launch_lock);
}

void oclml__profile_mark(oclml_ctx *ctx) {
    pthread_mutex_lock(&ctx->launch_lock);
    cl_event ev = NULL;
    if (ctx->profiling_active &&
        clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &ev) == CL_SUCCESS)
        oclml__profile_commit(ctx, ev);
    pthread_mutex_unlock(&ctx->launch_lock);
}

static void drop_events(oclml_ctx *ctx) {
    for (size_t i = 0; i < ctx->n_events; i++) clReleaseEvent(ctx->events[i]);
    ctx->n_events = 0;
}

oclml_status oclml_ctx_profile_begin(oclml_ctx *ctx) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!ctx->profiling_queue)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED,
                           "profiling needs a context created with options.profiling = 1");
    pthread_mutex_lock(&ctx->launch_lock);
    drop_events(ctx);
    ctx->profiling_active = true;
    pthread_mutex_unlock(&ctx->launch_lock);
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_profile_end(oclml_ctx *ctx, double *device_ms) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!device_ms) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "device_ms is NULL");
    pthread_mutex_lock(&ctx->launch_lock);
    bool active = ctx->profiling_active;
    ctx->profiling_active = false;
    cl_int err = CL_SUCCESS;
    cl_ulong first = 0, last = 0;
    if (active && ctx->n_events) err = clWaitForEvents((cl_uint)ctx->n_events, ctx->events);
    for (size_t i = 0; active && !err && i < ctx->n_events; i++) {
        cl_ulong s = 0, e = 0;
        err =
            clGetEventProfilingInfo(ctx->events[i], CL_PROFILING_COMMAND_START, sizeof s, &s, NULL);
        if (!err)
            err = clGetEventProfilingInfo(ctx->events[i], CL_PROFILING_COMMAND_END, sizeof e, &e,
                                          NULL);
        if (i == 0 || s < first) first = s;
        if (e > last) last = e;
    }
    size_t n = ctx->n_events;
    drop_events(ctx);
    pthread_mutex_unlock(&ctx->launch_lock);
    if (!active)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "profile_end without profile_begin");
    if (err) return oclml__cl_fail(ctx, err, "profiling events");
    if (n == 0)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "no kernel was enqueued while profiling");
    *device_ms = (double)(last - first) * 1e-6;
    return OCLML_SUCCESS;
}
