/* Device buffers the library creates, counted per context so that a training program can report
 * its peak device memory as PyTorch's max_memory_allocated does. */
#include "core/core.h"

oclml_status oclml__buffer_create(oclml_ctx *ctx, size_t bytes, const void *init, const char *what,
                                  cl_mem *mem) {
    cl_int err;
    *mem = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0),
                          bytes, (void *)init, &err);
    if (!*mem) return oclml__cl_fail(ctx, err, what);
    size_t now = atomic_fetch_add_explicit(&ctx->bytes_now, bytes, memory_order_relaxed) + bytes;
    size_t peak = atomic_load_explicit(&ctx->bytes_peak, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&ctx->bytes_peak, &peak, now,
                                                  memory_order_relaxed, memory_order_relaxed)) {}
    return OCLML_SUCCESS;
}

void oclml__buffer_release(oclml_ctx *ctx, cl_mem mem, size_t bytes) {
    clReleaseMemObject(mem);
    atomic_fetch_sub_explicit(&ctx->bytes_now, bytes, memory_order_relaxed);
}

oclml_status oclml_ctx_memory(const oclml_ctx *ctx, size_t *bytes, size_t *peak_bytes) {
    if (!ctx) return OCLML_ERR_NULL_POINTER;
    oclml__clear_error(ctx);
    if (bytes) *bytes = atomic_load_explicit(&ctx->bytes_now, memory_order_relaxed);
    if (peak_bytes) *peak_bytes = atomic_load_explicit(&ctx->bytes_peak, memory_order_relaxed);
    return OCLML_SUCCESS;
}

oclml_status oclml_ctx_reset_peak_memory(oclml_ctx *ctx) {
    if (!ctx) return OCLML_ERR_NULL_POINTER;
    oclml__clear_error(ctx);
    atomic_store_explicit(&ctx->bytes_peak,
                          atomic_load_explicit(&ctx->bytes_now, memory_order_relaxed),
                          memory_order_relaxed);
    return OCLML_SUCCESS;
}
