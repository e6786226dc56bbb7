/* Where a program's device time goes, kernel by kernel: a preloaded library that turns on
 * profiling in every command queue, records each kernel launch's event, and at exit prints the
 * total device time, launch count and mean per (kernel name, global size), largest first, to
 * stderr. A developer's probe, not built by default:
 *   cc -O2 -shared -fPIC -o kernel_profile.so tools/dev/kernel_profile.c -ldl -lOpenCL
 *   LD_PRELOAD=$PWD/kernel_profile.so ./oclml-bench --reps 5 --warm 1 train
 * Every event is waited for at exit (or when the record is full), which serialises nothing
 * while the program runs; the figures include warm-up launches, so divide by the launch
 * counts. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENTS 65536
#define MAX_KEYS 1024

typedef struct {
    char key[160];
    double ms;
    unsigned long count;
} total;

static cl_event events[MAX_EVENTS];
static char *keys[MAX_EVENTS];
static size_t n_events;
static total totals[MAX_KEYS];
static size_t n_totals;

static void drain(void) {
    if (n_events) clWaitForEvents((cl_uint)n_events, events);
    for (size_t i = 0; i < n_events; i++) {
        cl_ulong s = 0, e = 0;
        clGetEventProfilingInfo(events[i], CL_PROFILING_COMMAND_START, sizeof s, &s, NULL);
        clGetEventProfilingInfo(events[i], CL_PROFILING_COMMAND_END, sizeof e, &e, NULL);
        size_t k = 0;
        while (k < n_totals && strcmp(totals[k].key, keys[i])) k++;
        if (k == n_totals && n_totals < MAX_KEYS) {
            snprintf(totals[k].key, sizeof totals[k].key, "%s", keys[i]);
            n_totals++;
        }
        if (k < n_totals) {
            totals[k].ms += (double)(e - s) * 1e-6;
            totals[k].count++;
        }
        clReleaseEvent(events[i]);
        free(keys[i]);
    }
    n_events = 0;
}

static int by_time(const void *a, const void *b) {
    double x = ((const total *)a)->ms, y = ((const total *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

__attribute__((destructor)) static void report(void) {
    drain();
    qsort(totals, n_totals, sizeof *totals, by_time);
    double all = 0;
    for (size_t k = 0; k < n_totals; k++) all += totals[k].ms;
    fprintf(stderr, "kernel_profile: %.3f ms device time in all\n", all);
    for (size_t k = 0; k < n_totals; k++)
        fprintf(stderr, "%10.3f ms %7lu x %8.4f ms  %s\n", totals[k].ms, totals[k].count,
                totals[k].ms / (double)totals[k].count, totals[k].key);
}

cl_command_queue clCreateCommandQueue(cl_context c, cl_device_id d,
                                      cl_command_queue_properties p, cl_int *err) {
    static cl_command_queue (*real)(cl_context, cl_device_id, cl_command_queue_properties,
                                    cl_int *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "clCreateCommandQueue");
    return real(c, d, p | CL_QUEUE_PROFILING_ENABLE, err);
}

cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *off,
                              const size_t *global, const size_t *local, cl_uint nwait,
                              const cl_event *wait, cl_event *ev) {
    static cl_int (*real)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,
                          const size_t *, cl_uint, const cl_event *, cl_event *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "clEnqueueNDRangeKernel");
    cl_event mine = NULL;
    cl_int err = real(q, k, dims, off, global, local, nwait, wait, &mine);
    if (err != CL_SUCCESS || !mine) return err;
    if (ev) {
        *ev = mine;
        clRetainEvent(mine);
    }
    char name[96] = "?", key[160];
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name - 1, name, NULL);
    int len = snprintf(key, sizeof key, "%s [%zu", name, global[0]);
    for (cl_uint i = 1; i < dims && len > 0 && (size_t)len < sizeof key; i++)
        len += snprintf(key + len, sizeof key - (size_t)len, "x%zu", global[i]);
    if (len > 0 && (size_t)len < sizeof key) snprintf(key + len, sizeof key - (size_t)len, "]");
    if (n_events == MAX_EVENTS) drain();
    events[n_events] = mine;
    keys[n_events++] = strdup(key);
    return err;
}
