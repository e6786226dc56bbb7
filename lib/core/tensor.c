/* Device tensors (a buffer, an offset, a row-major shape and a dtype) and the scratch pool. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* Validates a shape and computes its element and byte counts. */
static oclml_status shape_size(const oclml_ctx *ctx, size_t elem_bytes, int ndim,
                               const size_t *shape, size_t *numel, size_t *bytes) {
    if (!shape) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "shape is NULL");
    if (ndim < 1 || ndim > OCLML_MAX_DIMS)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "ndim is %d, must be 1 to %d", ndim,
                           OCLML_MAX_DIMS);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                               "dimension %d is 0; every dimension must be >= 1", i);
        if (!oclml__mul_ok(n, shape[i], &n))
            return oclml__fail(ctx, OCLML_ERR_SIZE_OVERFLOW,
                               "element count of the shape overflows");
    }
    if (!oclml__mul_ok(n, elem_bytes, bytes))
        return oclml__fail(ctx, OCLML_ERR_SIZE_OVERFLOW, "byte size of the shape overflows");
    *numel = n;
    return OCLML_SUCCESS;
}

static oclml_status check_dtype(const oclml_ctx *ctx, oclml_dtype dtype) {
    if (oclml_dtype_size(dtype)) return OCLML_SUCCESS;
    return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                       "dtype %d is none of OCLML_FLOAT32, OCLML_BFLOAT16, OCLML_FLOAT16",
                       (int)dtype);
}

static oclml_status tensor_new(oclml_ctx *ctx, oclml_dtype dtype, cl_mem mem, size_t offset,
                               int ndim, const size_t *shape, size_t numel, oclml_tensor **out) {
    oclml_tensor *t = calloc(1, sizeof *t);
    if (!t) return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    t->ctx = ctx;
    t->mem = mem;
    t->offset_bytes = offset;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = numel;
    t->dtype = dtype;
    t->elem_bytes = oclml_dtype_size(dtype);
    atomic_fetch_add_explicit(&ctx->tensors_alive, 1, memory_order_relaxed);
    *out = t;
    return OCLML_SUCCESS;
}

oclml_status oclml_tensor_create_dtype(oclml_ctx *ctx, oclml_dtype dtype, int ndim,
                                       const size_t *shape, oclml_tensor **out) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!out) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "tensor out-pointer is NULL");
    *out = NULL;
    size_t numel, bytes;
    st = check_dtype(ctx, dtype);
    if (!st) st = shape_size(ctx, oclml_dtype_size(dtype), ndim, shape, &numel, &bytes);
    if (st) return st;
    if (bytes > ctx->info.max_alloc_bytes)
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED,
                           "%zu bytes exceed the device's largest allocation (%llu bytes)", bytes,
                           (unsigned long long)ctx->info.max_alloc_bytes);
    cl_mem mem;
    st = oclml__buffer_create(ctx, bytes, NULL, "clCreateBuffer", &mem);
    if (!st) st = tensor_new(ctx, dtype, mem, 0, ndim, shape, numel, out);
    if (!st)
        (*out)->owned_bytes = bytes;
    else if (mem)
        oclml__buffer_release(ctx, mem, bytes);
    return st;
}

oclml_status oclml_tensor_create(oclml_ctx *ctx, int ndim, const size_t *shape,
                                 oclml_tensor **out) {
    return oclml_tensor_create_dtype(ctx, OCLML_FLOAT32, ndim, shape, out);
}

oclml_status oclml_tensor_wrap_dtype(oclml_ctx *ctx, oclml_dtype dtype, cl_mem buffer,
                                     size_t offset_bytes, int ndim, const size_t *shape,
                                     oclml_tensor **out) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!out || !buffer)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "buffer or out-pointer is NULL");
    *out = NULL;
    st = check_dtype(ctx, dtype);
    if (st) return st;
    const size_t elem = oclml_dtype_size(dtype);
    if (offset_bytes % elem)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "offset %zu is not a multiple of %zu bytes (%s)", offset_bytes, elem,
                           oclml_dtype_name(dtype));
    size_t numel, bytes, end;
    st = shape_size(ctx, elem, ndim, shape, &numel, &bytes);
    if (st) return st;
    size_t size = 0;
    cl_context owner = NULL;
    cl_int err = clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (!err) err = clGetMemObjectInfo(buffer, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    if (err) return oclml__cl_fail(ctx, err, "clGetMemObjectInfo");
    if (owner != ctx->context)
        return oclml__fail(ctx, OCLML_ERR_CONTEXT_MISMATCH,
                           "the buffer belongs to another cl_context");
    if (!oclml__add_ok(offset_bytes, bytes, &end) || end > size)
        return oclml__fail(ctx, OCLML_ERR_BUFFER_TOO_SMALL,
                           "buffer of %zu bytes cannot hold %zu bytes at offset %zu", size, bytes,
                           offset_bytes);
    st = tensor_new(ctx, dtype, buffer, offset_bytes, ndim, shape, numel, out);
    if (!st) clRetainMemObject(buffer);
    return st;
}

oclml_status oclml_tensor_wrap(oclml_ctx *ctx, cl_mem buffer, size_t offset_bytes, int ndim,
                               const size_t *shape, oclml_tensor **out) {
    return oclml_tensor_wrap_dtype(ctx, OCLML_FLOAT32, buffer, offset_bytes, ndim, shape, out);
}

oclml_status oclml_tensor_destroy(oclml_tensor *t) {
    if (!t) return OCLML_ERR_NULL_POINTER;
    atomic_fetch_sub_explicit(&t->ctx->tensors_alive, 1, memory_order_relaxed);
    if (t->owned_bytes)
        oclml__buffer_release(t->ctx, t->mem, t->owned_bytes);
    else
        clReleaseMemObject(t->mem); /* the reference a wrap took */
    free(t);
    return OCLML_SUCCESS;
}

static oclml_status check_transfer(const oclml_tensor *t, const void *host, size_t count) {
    if (!t) return OCLML_ERR_NULL_POINTER;
    oclml__clear_error(t->ctx);
    if (!host) return oclml__fail(t->ctx, OCLML_ERR_NULL_POINTER, "host pointer is NULL");
    if (count != t->numel)
        return oclml__fail(t->ctx, OCLML_ERR_INVALID_SHAPE,
                           "count %zu does not match the tensor's %zu elements", count, t->numel);
    return OCLML_SUCCESS;
}

oclml_status oclml_tensor_write_raw(oclml_tensor *t, const void *src, size_t count) {
    oclml_status st = check_transfer(t, src, count);
    if (st) return st;
    cl_int err = clEnqueueWriteBuffer(t->ctx->queue, t->mem, CL_TRUE, t->offset_bytes,
                                      count * t->elem_bytes, src, 0, NULL, NULL);
    return err ? oclml__cl_fail(t->ctx, err, "clEnqueueWriteBuffer") : OCLML_SUCCESS;
}

oclml_status oclml_tensor_read_raw(const oclml_tensor *t, void *dst, size_t count) {
    oclml_status st = check_transfer(t, dst, count);
    if (st) return st;
    cl_int err = clEnqueueReadBuffer(t->ctx->queue, t->mem, CL_TRUE, t->offset_bytes,
                                     count * t->elem_bytes, dst, 0, NULL, NULL);
    return err ? oclml__cl_fail(t->ctx, err, "clEnqueueReadBuffer") : OCLML_SUCCESS;
}

/* fp32 tensors move as they are; others through a host buffer of their elements, converted. */
oclml_status oclml_tensor_write(oclml_tensor *t, const float *src, size_t count) {
    oclml_status st = check_transfer(t, src, count);
    if (st || t->dtype == OCLML_FLOAT32) return st ? st : oclml_tensor_write_raw(t, src, count);
    void *raw = malloc(count * t->elem_bytes);
    if (!raw) return oclml__fail(t->ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    oclml__to_dtype(t->dtype, src, raw, count);
    st = oclml_tensor_write_raw(t, raw, count);
    free(raw);
    return st;
}

oclml_status oclml_tensor_read(const oclml_tensor *t, float *dst, size_t count) {
    oclml_status st = check_transfer(t, dst, count);
    if (st || t->dtype == OCLML_FLOAT32) return st ? st : oclml_tensor_read_raw(t, dst, count);
    void *raw = malloc(count * t->elem_bytes);
    if (!raw) return oclml__fail(t->ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    st = oclml_tensor_read_raw(t, raw, count);
    if (!st) oclml__from_dtype(t->dtype, raw, dst, count);
    free(raw);
    return st;
}

oclml_status oclml_tensor_dtype(const oclml_tensor *t, oclml_dtype *dtype) {
    if (!t || !dtype) return OCLML_ERR_NULL_POINTER;
    *dtype = t->dtype;
    return OCLML_SUCCESS;
}

oclml_status oclml_tensor_shape(const oclml_tensor *t, int *ndim, size_t shape[OCLML_MAX_DIMS]) {
    if (!t || !ndim || !shape) return OCLML_ERR_NULL_POINTER;
    *ndim = t->ndim;
    for (int i = 0; i < OCLML_MAX_DIMS; i++) shape[i] = i < t->ndim ? t->shape[i] : 1;
    return OCLML_SUCCESS;
}

oclml_status oclml_tensor_numel(const oclml_tensor *t, size_t *count) {
    if (!t || !count) return OCLML_ERR_NULL_POINTER;
    *count = t->numel;
    return OCLML_SUCCESS;
}

oclml_status oclml_tensor_buffer(const oclml_tensor *t, cl_mem *buffer, size_t *offset_bytes) {
    if (!t || !buffer || !offset_bytes) return OCLML_ERR_NULL_POINTER;
    *buffer = t->mem;
    *offset_bytes = t->offset_bytes;
    return OCLML_SUCCESS;
}

/* ---- scratch pool ----
 * Temporaries of an op (partial sums of a long-row reduction, a GEMM's intermediate) come from
 * here. The queue is in order, so a buffer handed back right after its op was enqueued can serve
 * the next op: that op runs only after the previous one finished with it. */

oclml_status oclml__scratch_get(oclml_ctx *ctx, size_t bytes, cl_mem *mem) {
    if (bytes == 0) bytes = sizeof(float);
    pthread_mutex_lock(&ctx->scratch_lock);
    oclml__scratch *best = NULL;
    for (oclml__scratch *s = ctx->scratch; s; s = s->next)
        if (!s->in_use && s->bytes >= bytes && (!best || s->bytes < best->bytes)) best = s;
    if (best) {
        best->in_use = true;
        *mem = best->mem;
        pthread_mutex_unlock(&ctx->scratch_lock);
        return OCLML_SUCCESS;
    }
    pthread_mutex_unlock(&ctx->scratch_lock);
    cl_mem m;
    oclml_status st = oclml__buffer_create(ctx, bytes, NULL, "clCreateBuffer (scratch)", &m);
    if (st) return st;
    oclml__scratch *s = calloc(1, sizeof *s);
    if (!s) {
        oclml__buffer_release(ctx, m, bytes);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    s->mem = m;
    s->bytes = bytes;
    s->in_use = true;
    pthread_mutex_lock(&ctx->scratch_lock);
    s->next = ctx->scratch;
    ctx->scratch = s;
    pthread_mutex_unlock(&ctx->scratch_lock);
    *mem = m;
    return OCLML_SUCCESS;
}

void oclml__scratch_put(oclml_ctx *ctx, cl_mem mem) {
    pthread_mutex_lock(&ctx->scratch_lock);
    for (oclml__scratch *s = ctx->scratch; s; s = s->next)
        if (s->mem == mem) s->in_use = false;
    pthread_mutex_unlock(&ctx->scratch_lock);
}

void oclml__scratch_free_all(oclml_ctx *ctx, bool only_unused) {
    pthread_mutex_lock(&ctx->scratch_lock);
    oclml__scratch **link = &ctx->scratch;
    while (*link) {
        oclml__scratch *s = *link;
        if (only_unused && s->in_use) {
            link = &s->next;
            continue;
        }
        *link = s->next;
        oclml__buffer_release(ctx, s->mem, s->bytes);
        free(s);
    }
    pthread_mutex_unlock(&ctx->scratch_lock);
}

oclml_status oclml_ctx_trim_scratch(oclml_ctx *ctx) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    oclml__scratch_free_all(ctx, true);
    return OCLML_SUCCESS;
}
