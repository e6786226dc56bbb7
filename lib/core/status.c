/* Status texts, error recording and logging. */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *oclml_status_str(oclml_status status) {
    switch (status) {
#define OCLML_STATUS_TEXT_(name, value, text) \
    case name:                                \
        return text;
        OCLML_STATUS_LIST(OCLML_STATUS_TEXT_)
#undef OCLML_STATUS_TEXT_
    }
    return "unknown status";
}

const char *oclml_status_name(oclml_status status) {
    switch (status) {
#define OCLML_STATUS_NAME_(name, value, text) \
    case name:                                \
        return #name;
        OCLML_STATUS_LIST(OCLML_STATUS_NAME_)
#undef OCLML_STATUS_NAME_
    }
    return "OCLML_STATUS_UNKNOWN";
}

const char *oclml_version_string(void) { return OCLML_VERSION_STRING; }

/* OpenCL's error codes by name, for error texts. */
#define CL_ERROR(c) \
    { c, #c }
static const struct {
    cl_int code;
    const char *name;
} CL_ERRORS[] = {
    CL_ERROR(CL_SUCCESS),
    CL_ERROR(CL_DEVICE_NOT_FOUND),
    CL_ERROR(CL_DEVICE_NOT_AVAILABLE),
    CL_ERROR(CL_COMPILER_NOT_AVAILABLE),
    CL_ERROR(CL_MEM_OBJECT_ALLOCATION_FAILURE),
    CL_ERROR(CL_OUT_OF_RESOURCES),
    CL_ERROR(CL_OUT_OF_HOST_MEMORY),
    CL_ERROR(CL_PROFILING_INFO_NOT_AVAILABLE),
    CL_ERROR(CL_MEM_COPY_OVERLAP),
    CL_ERROR(CL_IMAGE_FORMAT_MISMATCH),
    CL_ERROR(CL_IMAGE_FORMAT_NOT_SUPPORTED),
    CL_ERROR(CL_BUILD_PROGRAM_FAILURE),
    CL_ERROR(CL_MAP_FAILURE),
    CL_ERROR(CL_MISALIGNED_SUB_BUFFER_OFFSET),
    CL_ERROR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST),
    CL_ERROR(CL_COMPILE_PROGRAM_FAILURE),
    CL_ERROR(CL_LINKER_NOT_AVAILABLE),
    CL_ERROR(CL_LINK_PROGRAM_FAILURE),
    CL_ERROR(CL_DEVICE_PARTITION_FAILED),
    CL_ERROR(CL_KERNEL_ARG_INFO_NOT_AVAILABLE),
    CL_ERROR(CL_INVALID_VALUE),
    CL_ERROR(CL_INVALID_DEVICE_TYPE),
    CL_ERROR(CL_INVALID_PLATFORM),
    CL_ERROR(CL_INVALID_DEVICE),
    CL_ERROR(CL_INVALID_CONTEXT),
    CL_ERROR(CL_INVALID_QUEUE_PROPERTIES),
    CL_ERROR(CL_INVALID_COMMAND_QUEUE),
    CL_ERROR(CL_INVALID_HOST_PTR),
    CL_ERROR(CL_INVALID_MEM_OBJECT),
    CL_ERROR(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR),
    CL_ERROR(CL_INVALID_IMAGE_SIZE),
    CL_ERROR(CL_INVALID_SAMPLER),
    CL_ERROR(CL_INVALID_BINARY),
    CL_ERROR(CL_INVALID_BUILD_OPTIONS),
    CL_ERROR(CL_INVALID_PROGRAM),
    CL_ERROR(CL_INVALID_PROGRAM_EXECUTABLE),
    CL_ERROR(CL_INVALID_KERNEL_NAME),
    CL_ERROR(CL_INVALID_KERNEL_DEFINITION),
    CL_ERROR(CL_INVALID_KERNEL),
    CL_ERROR(CL_INVALID_ARG_INDEX),
    CL_ERROR(CL_INVALID_ARG_VALUE),
    CL_ERROR(CL_INVALID_ARG_SIZE),
    CL_ERROR(CL_INVALID_KERNEL_ARGS),
    CL_ERROR(CL_INVALID_WORK_DIMENSION),
    CL_ERROR(CL_INVALID_WORK_GROUP_SIZE),
    CL_ERROR(CL_INVALID_WORK_ITEM_SIZE),
    CL_ERROR(CL_INVALID_GLOBAL_OFFSET),
    CL_ERROR(CL_INVALID_EVENT_WAIT_LIST),
    CL_ERROR(CL_INVALID_EVENT),
    CL_ERROR(CL_INVALID_OPERATION),
    CL_ERROR(CL_INVALID_GL_OBJECT),
    CL_ERROR(CL_INVALID_BUFFER_SIZE),
    CL_ERROR(CL_INVALID_MIP_LEVEL),
    CL_ERROR(CL_INVALID_GLOBAL_WORK_SIZE),
    CL_ERROR(CL_INVALID_PROPERTY),
    CL_ERROR(CL_INVALID_IMAGE_DESCRIPTOR),
    CL_ERROR(CL_INVALID_COMPILER_OPTIONS),
    CL_ERROR(CL_INVALID_LINKER_OPTIONS),
    CL_ERROR(CL_INVALID_DEVICE_PARTITION_COUNT),
};
#undef CL_ERROR

const char *oclml__cl_error_name(cl_int err) {
    for (size_t i = 0; i < sizeof CL_ERRORS / sizeof CL_ERRORS[0]; i++)
        if (CL_ERRORS[i].code == err) return CL_ERRORS[i].name;
    return "CL_UNKNOWN_ERROR";
}

/* The error text lives in the context, guarded by error_lock. The API takes const contexts where
 * the caller's view is read-only; the error record is bookkeeping, hence the casts. */
static void set_error(const oclml_ctx *cctx, int backend, char *text) {
    oclml_ctx *ctx = (oclml_ctx *)cctx;
    pthread_mutex_lock(&ctx->error_lock);
    free(ctx->last_error);
    ctx->last_error = text;
    ctx->backend_error = backend;
    pthread_mutex_unlock(&ctx->error_lock);
}

void oclml__clear_error(const oclml_ctx *ctx) {
    if (ctx) set_error(ctx, 0, NULL);
}

oclml_status oclml__fail_text(const oclml_ctx *ctx, oclml_status status, int backend, char *text) {
    if (!ctx) {
        free(text);
        return status;
    }
    /* Every failure says something: where the text could not be made (out of memory), the
     * status's own words. */
    if (!text || !*text) {
        free(text);
        text = oclml__strdup(oclml_status_str(status));
    }
    oclml__log(ctx, OCLML_LOG_ERROR, "%s: %s", oclml_status_name(status), text ? text : "");
    set_error(ctx, backend, text);
    return status;
}

oclml_status oclml__fail(const oclml_ctx *ctx, oclml_status status, const char *fmt, ...) {
    if (!ctx) return status;
    va_list ap;
    va_start(ap, fmt);
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return oclml__fail_text(ctx, status, 0, oclml__strdup(buf));
}

oclml_status oclml__cl_fail(const oclml_ctx *ctx, cl_int err, const char *what) {
    if (!ctx) return OCLML_ERR_OPENCL;
    char *text = oclml__asprintf("%s failed: %s (%d)", what, oclml__cl_error_name(err), (int)err);
    return oclml__fail_text(ctx, OCLML_ERR_OPENCL, err, text);
}

void oclml__log(const oclml_ctx *ctx, oclml_log_level level, const char *fmt, ...) {
    if (!ctx || !ctx->log_fn) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ctx->log_fn(ctx->log_user, level, buf);
}

const char *oclml_ctx_last_error(const oclml_ctx *ctx) {
    if (!ctx) return "context is NULL";
    return ctx->last_error ? ctx->last_error : "";
}

oclml_status oclml_ctx_backend_error(const oclml_ctx *ctx, int *code) {
    if (!ctx || !code) return OCLML_ERR_NULL_POINTER;
    oclml_ctx *c = (oclml_ctx *)ctx;
    pthread_mutex_lock(&c->error_lock);
    *code = c->backend_error;
    pthread_mutex_unlock(&c->error_lock);
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_last_error_copy(const oclml_ctx *ctx, char *buf, size_t len) {
    if (!ctx || !buf) return OCLML_ERR_NULL_POINTER;
    if (len == 0) return OCLML_ERR_BUFFER_TOO_SMALL;
    oclml_ctx *c = (oclml_ctx *)ctx;
    pthread_mutex_lock(&c->error_lock);
    snprintf(buf, len, "%s", c->last_error ? c->last_error : "");
    pthread_mutex_unlock(&c->error_lock);
    return OCLML_SUCCESS;
}
