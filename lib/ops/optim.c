/* Optimizers over a parameter arena (cl/ops/optim.cl): the arena holds a model's parameters and
 * gradients in two flat device buffers (each tensor 16-float aligned, padded with zeros), so a
 * step of SGD, Adam, AdamW or LaProp is one launch over the whole arena, plus one check pass for
 * clipping and skipping on inf/NaN. Learning rate, step count and gradient scale live in a device
 * block (optim_abi.h) written by the host through enqueued fills, read and advanced by the step:
 * no host round trip. */
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../cl/include/optim_abi.h"

#define FILE_CL "optim.cl"
#define ALIGN 16 /* floats: every tensor of an arena starts at a multiple */

struct oclml_arena {
    oclml_ctx *ctx;
    size_t n, numel, padded;
    size_t *off, *len, *row; /* per tensor: element offset, elements, elements of a unit */
    oclml_tensor **params, **grads;
    oclml_tensor *pflat, *gflat;
    oclml_tensor **copies, *cflat; /* the 16-bit copy of the parameters (NULL: none) */
    atomic_size_t optimizers;      /* alive over this arena: while any is, it must stay */
};

struct oclml_optim {
    oclml_ctx *ctx;
    oclml_arena *arena;
    oclml_optim_config cfg;
    size_t first, count;
    size_t decay4; /* float4s of the group, from its start, that weight decay applies to */
    size_t off, n; /* element range of the arena (multiples of ALIGN) */
    oclml_tensor *state[3];
    cl_mem blk, part, table;
    oclml_tensor *scale; /* the gradient scale the next step divides by (grad_scale_tensor) */
    cl_uint q;           /* the block the next step reads */
    size_t units, max_row;
    float lr; /* the last learning rate set (LaProp's set_step) */
    char defines[96];
};

/* ---- arena ---- */

static oclml_status check_arena(const oclml_arena *a) {
    if (!a) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "arena is NULL");
    return oclml__check_ctx(a->ctx);
}

oclml_status oclml_arena_destroy(oclml_arena *a) {
    if (!a) return OCLML_SUCCESS;
    oclml__clear_error(a->ctx);
    /* An optimizer's step reads and writes the arena's buffers: freeing them under it would
     * have the next step use freed memory. */
    const size_t users = atomic_load_explicit(&a->optimizers, memory_order_relaxed);
    if (users)
        return oclml__fail(a->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "%zu optimizer%s over this arena still alive: destroy them first", users,
                           users == 1 ? "" : "s");
    for (size_t i = 0; i < a->n; i++) {
        if (a->params && a->params[i]) oclml_tensor_destroy(a->params[i]);
        if (a->grads && a->grads[i]) oclml_tensor_destroy(a->grads[i]);
    }
    for (size_t i = 0; a->copies && i < a->n; i++)
        if (a->copies[i]) oclml_tensor_destroy(a->copies[i]);
    if (a->pflat) oclml_tensor_destroy(a->pflat);
    if (a->gflat) oclml_tensor_destroy(a->gflat);
    if (a->cflat) oclml_tensor_destroy(a->cflat);
    free(a->copies);
    free(a->params);
    free(a->grads);
    free(a->off);
    free(a->len);
    free(a->row);
    free(a);
    return OCLML_SUCCESS;
}

oclml_status oclml_arena_create(oclml_ctx *ctx, size_t n, const oclml_arena_shape *shapes,
                                oclml_arena **out) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!out || !shapes)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "shapes or the out-pointer is NULL");
    *out = NULL;
    if (n == 0) return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "an arena needs a tensor");
    size_t total = 0, numel = 0;
    for (size_t i = 0; i < n; i++) {
        const oclml_arena_shape *s = &shapes[i];
        if (s->ndim < 1 || s->ndim > OCLML_MAX_DIMS)
            return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                               "tensor %zu has ndim %d, must be 1 to %d", i, s->ndim,
                               OCLML_MAX_DIMS);
        size_t e = 1;
        for (int d = 0; d < s->ndim; d++) {
            if (s->shape[d] == 0)
                return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                                   "tensor %zu: dimension %d is 0; every dimension must be >= 1", i,
                                   d);
            if (!oclml__mul_ok(e, s->shape[d], &e))
                return oclml__fail(ctx, OCLML_ERR_SIZE_OVERFLOW, "tensor %zu's size overflows", i);
        }
        size_t padded = e + (ALIGN - e % ALIGN) % ALIGN;
        if (padded < e || !oclml__add_ok(total, padded, &total) ||
            !oclml__add_ok(numel, e, &numel) || total > SIZE_MAX / sizeof(float))
            return oclml__fail(ctx, OCLML_ERR_SIZE_OVERFLOW, "the arena's size overflows");
    }
    oclml_arena *a = calloc(1, sizeof *a);
    if (!a) return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    a->ctx = ctx;
    a->numel = numel;
    a->padded = total;
    a->off = calloc(n, sizeof *a->off);
    a->len = calloc(n, sizeof *a->len);
    a->row = calloc(n, sizeof *a->row);
    a->params = calloc(n, sizeof *a->params);
    a->grads = calloc(n, sizeof *a->grads);
    if (!a->off || !a->len || !a->row || !a->params || !a->grads) {
        oclml_arena_destroy(a);
        return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    st = oclml_tensor_create(ctx, 1, &total, &a->pflat);
    if (!st) st = oclml_tensor_create(ctx, 1, &total, &a->gflat);
    if (!st) st = oclml_fill(ctx, a->pflat, 0.0f);
    if (!st) st = oclml_fill(ctx, a->gflat, 0.0f);
    size_t at = 0;
    for (size_t i = 0; !st && i < n; i++) {
        const oclml_arena_shape *s = &shapes[i];
        size_t e = 1;
        for (int d = 0; d < s->ndim; d++) e *= s->shape[d];
        a->off[i] = at;
        a->len[i] = e;
        a->row[i] = s->ndim == 1 ? e : e / s->shape[0];
        a->n = i + 1;
        st = oclml_tensor_wrap(ctx, a->pflat->mem, at * sizeof(float), s->ndim, s->shape,
                               &a->params[i]);
        if (!st)
            st = oclml_tensor_wrap(ctx, a->gflat->mem, at * sizeof(float), s->ndim, s->shape,
                                   &a->grads[i]);
        at += e + (ALIGN - e % ALIGN) % ALIGN;
    }
    if (st) {
        oclml_arena_destroy(a);
        return st;
    }
    *out = a;
    return OCLML_SUCCESS;
}

static oclml_status arena_tensor(const oclml_arena *a, size_t i, oclml_tensor **out, int grad) {
    oclml_status st = check_arena(a);
    if (st) return st;
    if (!out) return oclml__fail(a->ctx, OCLML_ERR_NULL_POINTER, "out-pointer is NULL");
    if (i >= a->n)
        return oclml__fail(a->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "tensor %zu of an arena of %zu tensors", i, a->n);
    *out = grad ? a->grads[i] : a->params[i];
    return OCLML_SUCCESS;
}

oclml_status oclml_arena_param(const oclml_arena *a, size_t i, oclml_tensor **param) {
    return arena_tensor(a, i, param, 0);
}

oclml_status oclml_arena_grad(const oclml_arena *a, size_t i, oclml_tensor **grad) {
    return arena_tensor(a, i, grad, 1);
}

oclml_status oclml_arena_flat(const oclml_arena *a, int grads, oclml_tensor **flat) {
    oclml_status st = check_arena(a);
    if (st) return st;
    if (!flat) return oclml__fail(a->ctx, OCLML_ERR_NULL_POINTER, "out-pointer is NULL");
    *flat = grads ? a->gflat : a->pflat;
    return OCLML_SUCCESS;
}

oclml_status oclml_arena_info(const oclml_arena *a, size_t *n_tensors, size_t *numel,
                              size_t *padded_numel) {
    oclml_status st = check_arena(a);
    if (st) return st;
    if (n_tensors) *n_tensors = a->n;
    if (numel) *numel = a->numel;
    if (padded_numel) *padded_numel = a->padded;
    return OCLML_SUCCESS;
}

oclml_status oclml_arena_offset(const oclml_arena *a, size_t i, size_t *offset) {
    oclml_status st = check_arena(a);
    if (st) return st;
    if (!offset) return oclml__fail(a->ctx, OCLML_ERR_NULL_POINTER, "out-pointer is NULL");
    if (i >= a->n)
        return oclml__fail(a->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "tensor %zu of an arena of %zu tensors", i, a->n);
    *offset = a->off[i];
    return OCLML_SUCCESS;
}

oclml_status oclml_arena_copy_create(oclml_arena *a, oclml_dtype dtype) {
    oclml_status st = check_arena(a);
    if (st) return st;
    if (dtype != OCLML_BFLOAT16 && dtype != OCLML_FLOAT16)
        return oclml__fail(a->ctx, OCLML_ERR_DTYPE, "a parameter copy is bf16 or fp16, not %s",
                           oclml_dtype_name(dtype));
    if (a->cflat)
        return oclml__fail(a->ctx, OCLML_ERR_INVALID_ARGUMENT, "the arena has a %s copy already",
                           oclml_dtype_name(a->cflat->dtype));
    oclml_tensor **views = calloc(a->n, sizeof *views), *flat = NULL;
    if (!views) return oclml__fail(a->ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    st = oclml_tensor_create_dtype(a->ctx, dtype, 1, &a->padded, &flat);
    for (size_t i = 0; !st && i < a->n; i++) {
        const oclml_tensor *p = a->params[i];
        st = oclml_tensor_wrap_dtype(a->ctx, dtype, flat->mem, a->off[i] * flat->elem_bytes,
                                     p->ndim, p->shape, &views[i]);
    }
    if (!st) st = oclml_cast(a->ctx, a->pflat, flat);
    if (st) {
        for (size_t i = 0; i < a->n; i++)
            if (views[i]) oclml_tensor_destroy(views[i]);
        free(views);
        if (flat) oclml_tensor_destroy(flat);
        return st;
    }
    a->copies = views;
    a->cflat = flat;
    return OCLML_SUCCESS;
}

oclml_status oclml_arena_copy(const oclml_arena *a, size_t i, oclml_tensor **copy) {
    oclml_status st = check_arena(a);
    if (st) return st;
    if (!copy) return oclml__fail(a->ctx, OCLML_ERR_NULL_POINTER, "out-pointer is NULL");
    if (!a->cflat)
        return oclml__fail(a->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "the arena has no parameter copy (oclml_arena_copy_create)");
    if (i >= a->n)
        return oclml__fail(a->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "tensor %zu of an arena of %zu tensors", i, a->n);
    *copy = a->copies[i];
    return OCLML_SUCCESS;
}

oclml_status oclml_arena_copy_sync(oclml_arena *a) {
    oclml_status st = check_arena(a);
    if (st) return st;
    if (!a->cflat)
        return oclml__fail(a->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "the arena has no parameter copy (oclml_arena_copy_create)");
    return oclml_cast(a->ctx, a->pflat, a->cflat);
}

oclml_status oclml_arena_zero_grad(oclml_arena *a) {
    oclml_status st = check_arena(a);
    if (st) return st;
    return oclml_fill(a->ctx, a->gflat, 0.0f);
}

/* ---- configuration ---- */

oclml_status oclml_optim_config_init(oclml_optim_config *c, oclml_optim_kind kind) {
    if (!c) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "config is NULL");
    if ((unsigned)kind > OCLML_OPTIM_LAPROP)
        return oclml__fail(NULL, OCLML_ERR_INVALID_ARGUMENT, "unknown optimizer kind %d",
                           (int)kind);
    *c = (oclml_optim_config){.struct_size = sizeof *c,
                              .kind = kind,
                              .lr = kind == OCLML_OPTIM_LAPROP ? 4e-4f : 1e-3f,
                              .beta1 = 0.9f,
                              .beta2 = 0.999f,
                              .eps = kind == OCLML_OPTIM_LAPROP ? 1e-15f : 1e-8f,
                              .weight_decay = kind == OCLML_OPTIM_ADAMW ? 1e-2f : 0.0f,
                              .bias_correction = 1,
                              .agc_eps = 1e-3f,
                              .scale_growth = 2.0f,
                              .scale_backoff = 0.5f,
                              .scale_interval = 2000};
    return OCLML_SUCCESS;
}

static bool finite_nonneg(float v) { return isfinite(v) && v >= 0.0f; }

static oclml_status check_config(oclml_ctx *ctx, const oclml_optim_config *c) {
    if (!c) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "config is NULL");
    if (c->struct_size != sizeof *c)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG,
                           "config.struct_size is %zu, expected %zu (call "
                           "oclml_optim_config_init first)",
                           c->struct_size, sizeof *c);
    const char *bad = NULL;
    bool sgd = c->kind == OCLML_OPTIM_SGD;
    if ((unsigned)c->kind > OCLML_OPTIM_LAPROP)
        bad = "kind is not an oclml_optim_kind";
    else if (!finite_nonneg(c->lr))
        bad = "lr must be finite and >= 0";
    else if (!finite_nonneg(c->weight_decay))
        bad = "weight_decay must be finite and >= 0";
    else if (sgd && !finite_nonneg(c->momentum))
        bad = "momentum must be finite and >= 0";
    else if (sgd && !isfinite(c->dampening))
        bad = "dampening must be finite";
    else if (sgd && c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
        bad = "Nesterov momentum requires a momentum > 0 and zero dampening";
    else if (sgd && c->amsgrad)
        bad = "SGD has no amsgrad";
    else if (!sgd && !(c->beta1 >= 0.0f && c->beta1 < 1.0f))
        bad = "beta1 must be in [0, 1)";
    else if (!sgd && !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        bad = "beta2 must be in [0, 1)";
    else if (!sgd && !finite_nonneg(c->eps))
        bad = "eps must be finite and >= 0";
    else if (!finite_nonneg(c->max_grad_norm))
        bad = "max_grad_norm must be finite and >= 0 (0: no clipping)";
    else if (!finite_nonneg(c->agc_clip))
        bad = "agc_clip must be finite and >= 0 (0: no adaptive clipping)";
    else if (c->agc_clip > 0.0f && !finite_nonneg(c->agc_eps))
        bad = "agc_eps must be finite and >= 0";
    else if (c->agc_clip > 0.0f && c->max_grad_norm > 0.0f)
        bad = "clipping by the global norm and adaptive clipping exclude each other";
    else if (c->dynamic_scale && !(isfinite(c->scale_growth) && c->scale_growth > 1.0f))
        bad = "scale_growth must be finite and > 1";
    else if (c->dynamic_scale && !(c->scale_backoff > 0.0f && c->scale_backoff < 1.0f))
        bad = "scale_backoff must be in (0, 1)";
    else if (c->dynamic_scale && c->scale_interval == 0)
        bad = "scale_interval must be >= 1";
    if (bad) return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG, "optimizer config: %s", bad);
    return OCLML_SUCCESS;
}

/* ---- optimizer ---- */

static oclml_status check_optim(const oclml_optim *o) {
    if (!o) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "optimizer is NULL");
    return oclml__check_ctx(o->ctx);
}

oclml_status oclml_optim_destroy(oclml_optim *o) {
    if (!o) return OCLML_SUCCESS;
    if (o->arena) atomic_fetch_sub_explicit(&o->arena->optimizers, 1, memory_order_relaxed);
    for (int i = 0; i < 3; i++)
        if (o->state[i]) oclml_tensor_destroy(o->state[i]);
    if (o->scale) oclml_tensor_destroy(o->scale);
    cl_mem own[3] = {o->blk, o->part, o->table};
    for (int i = 0; i < 3; i++) {
        size_t bytes = 0;
        if (!own[i]) continue;
        clGetMemObjectInfo(own[i], CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
        oclml__buffer_release(o->ctx, own[i], bytes);
    }
    free(o);
    return OCLML_SUCCESS;
}

/* A power-of-two work-group size up to cap that the device takes. */
static size_t pow2_local(const oclml_ctx *ctx, size_t cap) {
    return oclml__pow2_floor(ctx->caps.max_work_group_size < cap ? ctx->caps.max_work_group_size
                                                                 : cap);
}

static size_t parts_of(const oclml_optim *o) {
    size_t l = pow2_local(o->ctx, 256), n4 = o->n / 4, cu = o->ctx->caps.compute_units;
    size_t groups = (n4 + l - 1) / l, cap = (cu ? cu : 1) * 8;
    if (cap > 1024) cap = 1024;
    return groups < cap ? (groups ? groups : 1) : cap;
}

static unsigned states_of(const oclml_optim_config *c) {
    if (c->kind == OCLML_OPTIM_SGD) return c->momentum != 0.0f ? 1 : 0;
    return c->amsgrad ? 3 : 2;
}

static oclml_status make_buffer(oclml_ctx *ctx, size_t bytes, void *init, cl_mem *out) {
    return oclml__buffer_create(ctx, bytes, init, "clCreateBuffer", out);
}

oclml_status oclml_optim_create(oclml_ctx *ctx, oclml_arena *arena,
                                const oclml_optim_config *config, oclml_optim **out) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!out) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "optimizer out-pointer is NULL");
    *out = NULL;
    if (!arena) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "arena is NULL");
    if (arena->ctx != ctx)
        return oclml__fail(ctx, OCLML_ERR_CONTEXT_MISMATCH, "the arena belongs to another context");
    st = check_config(ctx, config);
    if (st) return st;
    size_t first = config->first, count = config->count ? config->count : arena->n - first;
    if (first >= arena->n || count > arena->n - first)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG,
                           "optimizer config: tensors [%zu, %zu + %zu) outside the arena's %zu",
                           first, first, config->count, arena->n);
    if (config->decay_tensors > count)
        return oclml__fail(ctx, OCLML_ERR_INVALID_CONFIG,
                           "optimizer config: decay_tensors %zu exceeds the group's %zu tensors",
                           config->decay_tensors, count);
    oclml_optim *o = calloc(1, sizeof *o);
    if (!o) return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
    o->ctx = ctx;
    o->arena = arena;
    atomic_fetch_add_explicit(&arena->optimizers, 1, memory_order_relaxed);
    o->cfg = *config;
    o->first = first;
    o->count = count;
    o->off = arena->off[first];
    size_t last = first + count - 1;
    o->n =
        arena->off[last] + arena->len[last] + (ALIGN - arena->len[last] % ALIGN) % ALIGN - o->off;
    /* Decay stops where the first undecayed tensor starts (tensors start on float4 bounds). */
    o->decay4 = config->decay_tensors && config->decay_tensors < count
                    ? (arena->off[first + config->decay_tensors] - o->off) / 4
                    : o->n / 4;
    o->lr = config->lr;
    int kind = config->kind == OCLML_OPTIM_SGD      ? OPT_SGD
               : config->kind == OCLML_OPTIM_LAPROP ? OPT_LAPROP
                                                    : OPT_ADAM;
    snprintf(o->defines, sizeof o->defines, "-DOPT_KIND=%d -DOPT_AMSGRAD=%d -DOPT_MOMENTUM=%d",
             kind, config->amsgrad ? 1 : 0,
             config->kind == OCLML_OPTIM_SGD && config->momentum != 0.0f ? 1 : 0);
    unsigned ns = states_of(config);
    for (unsigned i = 0; !st && i < ns; i++) {
        st = oclml_tensor_create(ctx, 1, &o->n, &o->state[i]);
        if (!st) st = oclml_fill(ctx, o->state[i], 0.0f);
    }
    cl_uint blk[2 * OPT_BLOCK] = {0};
    for (int b = 0; b < 2; b++) {
        float one = 1.0f;
        memcpy(&blk[b * OPT_BLOCK + OPT_LR], &config->lr, sizeof(float));
        memcpy(&blk[b * OPT_BLOCK + OPT_GRAD_SCALE], &one, sizeof(float));
    }
    if (!st) st = make_buffer(ctx, sizeof blk, blk, &o->blk);
    const size_t one = 1;
    if (!st) st = oclml_tensor_create(ctx, 1, &one, &o->scale);
    if (!st) st = oclml_fill(ctx, o->scale, 1.0f);
    if (!st) st = make_buffer(ctx, parts_of(o) * sizeof(float), NULL, &o->part);
    if (!st && config->agc_clip > 0.0f) {
        cl_ulong *t = calloc(count * OPT_T_WORDS, sizeof *t);
        if (!t) st = oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of host memory");
        for (size_t i = 0; !st && i < count; i++) {
            size_t a = first + i;
            t[i * OPT_T_WORDS + OPT_T_OFFSET] = arena->off[a];
            t[i * OPT_T_WORDS + OPT_T_NUMEL] = arena->len[a];
            t[i * OPT_T_WORDS + OPT_T_ROW] = arena->row[a];
            t[i * OPT_T_WORDS + OPT_T_UNIT] = o->units;
            o->units += arena->len[a] / arena->row[a];
            if (arena->row[a] > o->max_row) o->max_row = arena->row[a];
        }
        if (!st) st = make_buffer(ctx, count * OPT_T_WORDS * sizeof *t, t, &o->table);
        free(t);
    }
    if (st) {
        oclml_optim_destroy(o);
        return st;
    }
    *out = o;
    return OCLML_SUCCESS;
}

static oclml_status step_kernel(oclml_optim *o, cl_kernel *k) {
    char defines[128];
    const oclml_tensor *copy = o->arena->cflat;
    snprintf(defines, sizeof defines, "%s -DCOPY_DT=%d", o->defines, copy ? (int)copy->dtype : 0);
    oclml__program_spec spec = {FILE_CL, copy ? defines : o->defines, "oclml_optim_step", 0};
    return oclml__kernel(o->ctx, &spec, "oclml_optim_step", k);
}

oclml_status oclml_optim_step(oclml_optim *o) {
    oclml_status st = check_optim(o);
    if (st) return st;
    oclml_ctx *ctx = o->ctx;
    const oclml_optim_config *c = &o->cfg;
    cl_kernel ks, kc = NULL;
    bool agc = c->agc_clip > 0.0f, clip = c->max_grad_norm > 0.0f,
         check = c->skip_nonfinite || c->dynamic_scale;
    st = step_kernel(o, &ks);
    if (!st && (agc || clip || check))
        st = oclml__simple_kernel(ctx, FILE_CL, agc ? "oclml_optim_agc" : "oclml_optim_norm", &kc);
    if (st) return st;
    cl_ulong off4 = o->off / 4, n4 = o->n / 4;
    cl_uint q = o->q, ucheck = check ? 1 : 0, nparts = (cl_uint)parts_of(o);
    size_t local = pow2_local(ctx, 256), global;
    cl_mem pm = o->arena->pflat->mem, gm = o->arena->gflat->mem;
    if (kc && agc) {
        size_t l = pow2_local(ctx, 256), cu = ctx->caps.compute_units ? ctx->caps.compute_units : 1;
        while (l > 1 && l / 2 >= o->max_row) l /= 2;
        size_t groups = o->units < cu * 32 ? o->units : cu * 32;
        global = groups * l;
        cl_uint nt = (cl_uint)o->count;
        cl_ulong units = o->units;
        float clip_f = c->agc_clip, eps = c->agc_eps;
        oclml__arg a[] = {OCLML_ARG(pm),
                          OCLML_ARG(gm),
                          OCLML_ARG(o->table),
                          OCLML_ARG(nt),
                          OCLML_ARG(units),
                          OCLML_ARG(o->blk),
                          OCLML_ARG(q),
                          OCLML_ARG(ucheck),
                          OCLML_ARG(clip_f),
                          OCLML_ARG(eps),
                          OCLML_LOCAL(l * sizeof(float))};
        st = oclml__launch(ctx, kc, a, 11, 1, &global, &l, NULL);
    } else if (kc) {
        global = nparts * local;
        oclml__arg a[] = {OCLML_ARG(gm),      OCLML_ARG(off4),
                          OCLML_ARG(n4),      OCLML_ARG(o->blk),
                          OCLML_ARG(q),       OCLML_ARG(ucheck),
                          OCLML_ARG(o->part), OCLML_LOCAL(local * sizeof(float))};
        st = oclml__launch(ctx, kc, a, 8, 1, &global, &local, NULL);
    }
    if (st) return st;
    size_t cu = ctx->caps.compute_units ? ctx->caps.compute_units : 1;
    size_t groups = (n4 + local - 1) / local;
    if (groups > cu * 32) groups = cu * 32;
    global = (groups ? groups : 1) * local;
    cl_uint flags = (c->maximize ? OPT_F_MAXIMIZE : 0) |
                    (c->kind == OCLML_OPTIM_ADAMW ? OPT_F_DECOUPLED : 0) |
                    (c->bias_correction ? OPT_F_BIAS_CORR : 0) | (check ? OPT_F_CHECK : 0) |
                    (clip ? OPT_F_CLIP : 0) | (c->nesterov ? OPT_F_NESTEROV : 0) |
                    (c->dynamic_scale ? OPT_F_DYNAMIC : 0);
    cl_mem s1 = o->state[0] ? o->state[0]->mem : NULL, s2 = o->state[1] ? o->state[1]->mem : NULL,
           s3 = o->state[2] ? o->state[2]->mem : NULL;
    float b1 = c->beta1, b2 = c->beta2, eps = c->eps, wd = c->weight_decay, mom = c->momentum,
          damp = c->dampening, max_norm = c->max_grad_norm;
    cl_ulong decay4 = o->decay4;
    cl_mem copy = o->arena->cflat ? o->arena->cflat->mem : NULL;
    float growth = c->scale_growth, backoff = c->scale_backoff;
    cl_uint interval = c->scale_interval;
    oclml__arg a[] = {
        OCLML_ARG(pm),       OCLML_ARG(gm),           OCLML_ARG(s1),
        OCLML_ARG(s2),       OCLML_ARG(s3),           OCLML_ARG(off4),
        OCLML_ARG(n4),       OCLML_ARG(o->blk),       OCLML_ARG(q),
        OCLML_ARG(o->part),  OCLML_ARG(nparts),       OCLML_ARG(b1),
        OCLML_ARG(b2),       OCLML_ARG(eps),          OCLML_ARG(wd),
        OCLML_ARG(decay4),   OCLML_ARG(mom),          OCLML_ARG(damp),
        OCLML_ARG(max_norm), OCLML_ARG(flags),        OCLML_LOCAL(local * sizeof(float)),
        OCLML_ARG(copy),     OCLML_ARG(growth),       OCLML_ARG(backoff),
        OCLML_ARG(interval), OCLML_ARG(o->scale->mem)};
    st = oclml__launch(ctx, ks, a, sizeof a / sizeof a[0], 1, &global, &local, NULL);
    if (st) {
        /* The check pass may have set the flag: clear it, so that a later step is not skipped. */
        if (kc) {
            cl_uint zero = 0;
            clEnqueueFillBuffer(ctx->queue, o->blk, &zero, sizeof zero,
                                (q * OPT_BLOCK + OPT_FOUND) * sizeof zero, sizeof zero, 0, NULL,
                                NULL);
        }
        return st;
    }
    o->q = 1 - q;
    return OCLML_SUCCESS;
}

/* Writes one word of the block the next step reads (an enqueued fill: no wait). */
static oclml_status set_word(oclml_optim *o, unsigned word, const void *value) {
    cl_int err = clEnqueueFillBuffer(o->ctx->queue, o->blk, value, 4, (o->q * OPT_BLOCK + word) * 4,
                                     4, 0, NULL, NULL);
    return err ? oclml__cl_fail(o->ctx, err, "clEnqueueFillBuffer") : OCLML_SUCCESS;
}

oclml_status oclml_optim_set_lr(oclml_optim *o, float lr) {
    oclml_status st = check_optim(o);
    if (st) return st;
    if (!finite_nonneg(lr))
        return oclml__fail(o->ctx, OCLML_ERR_INVALID_ARGUMENT, "lr %g must be finite and >= 0",
                           (double)lr);
    st = set_word(o, OPT_LR, &lr);
    if (!st) o->lr = lr;
    return st;
}

oclml_status oclml_optim_set_grad_scale(oclml_optim *o, float scale) {
    oclml_status st = check_optim(o);
    if (st) return st;
    if (!(isfinite(scale) && scale > 0.0f))
        return oclml__fail(o->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "gradient scale %g must be finite and > 0", (double)scale);
    st = set_word(o, OPT_GRAD_SCALE, &scale);
    return st ? st : oclml_fill(o->ctx, o->scale, scale);
}

oclml_status oclml_optim_grad_scale_tensor(const oclml_optim *o, oclml_tensor **scale) {
    oclml_status st = check_optim(o);
    if (st) return st;
    if (!scale) return oclml__fail(o->ctx, OCLML_ERR_NULL_POINTER, "out-pointer is NULL");
    *scale = o->scale;
    return OCLML_SUCCESS;
}

oclml_status oclml_optim_set_step(oclml_optim *o, uint32_t step) {
    oclml_status st = check_optim(o);
    if (st) return st;
    st = set_word(o, OPT_STEP, &step);
    if (!st && o->cfg.kind == OCLML_OPTIM_LAPROP) {
        /* The lr-weighted sum as if every step had run at the current lr. */
        float lr1 = (float)((double)o->lr * -expm1((double)step * log((double)o->cfg.beta1)));
        st = set_word(o, OPT_LR1, &lr1);
    }
    return st;
}

oclml_status oclml_optim_scalars(oclml_optim *o, oclml_optim_scalars_info *info) {
    oclml_status st = check_optim(o);
    if (st) return st;
    if (!info) return oclml__fail(o->ctx, OCLML_ERR_NULL_POINTER, "info is NULL");
    cl_uint b[OPT_BLOCK];
    cl_int err = clEnqueueReadBuffer(o->ctx->queue, o->blk, CL_TRUE, o->q * sizeof b, sizeof b, b,
                                     0, NULL, NULL);
    if (err) return oclml__cl_fail(o->ctx, err, "clEnqueueReadBuffer");
    memcpy(&info->lr, &b[OPT_LR], 4);
    memcpy(&info->grad_scale, &b[OPT_GRAD_SCALE], 4);
    memcpy(&info->grad_norm, &b[OPT_NORM], 4);
    info->step = b[OPT_STEP];
    info->skipped = b[OPT_SKIPPED];
    info->found_inf = (int)b[OPT_LAST_FOUND];
    return OCLML_SUCCESS;
}

oclml_status oclml_optim_state(const oclml_optim *o, int which, oclml_tensor **flat) {
    oclml_status st = check_optim(o);
    if (st) return st;
    if (!flat) return oclml__fail(o->ctx, OCLML_ERR_NULL_POINTER, "out-pointer is NULL");
    if (which < 0 || which > 2 || !o->state[which])
        return oclml__fail(o->ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "this optimizer has %u state buffers; %d asked", states_of(&o->cfg),
                           which);
    *flat = o->state[which];
    return OCLML_SUCCESS;
}

void oclml__optim_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    if (!strcmp(op, "arena_zero_grad")) {
        char text[96];
        oclml__warm_add(list, op, "fill",
                        oclml__memory_spec(ctx, "oclml_fill", NULL, text, sizeof text));
        return;
    }
    static const struct {
        const char *variant, *defines;
    } V[] = {{"adam, adamw", "-DOPT_KIND=1 -DOPT_AMSGRAD=0 -DOPT_MOMENTUM=0"},
             {"sgd momentum", "-DOPT_KIND=0 -DOPT_AMSGRAD=0 -DOPT_MOMENTUM=1"},
             {"adamw, bf16 copy", "-DOPT_KIND=1 -DOPT_AMSGRAD=0 -DOPT_MOMENTUM=0 -DCOPY_DT=1"}};
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++)
        oclml__warm_add(list, op, V[i].variant,
                        (oclml__program_spec){FILE_CL, V[i].defines, "oclml_optim_step", 0});
    oclml__warm_add(list, op, "norm pass",
                    (oclml__program_spec){FILE_CL, NULL, "oclml_optim_norm", 0});
    oclml__warm_add(list, op, "agc pass",
                    (oclml__program_spec){FILE_CL, NULL, "oclml_optim_agc", 0});
}
