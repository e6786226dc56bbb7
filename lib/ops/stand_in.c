/* fp32 stand-ins for 16-bit tensors (stand_in.h): scratch copies an fp32 op runs on, for ops
 * whose work outgrows their memory traffic (attention, convolution) or that have no 16-bit
 * kernels yet (pooling). */
#include "ops/stand_in.h"

#include "ops/ops.h"

/* A 16-bit tensor's fp32 stand-in: a scratch buffer of its shape (filled from it when `fill`),
 * or the tensor itself where it is fp32 or NULL. */
typedef struct stand_in {
    const oclml_tensor *of;
    oclml_tensor *view; /* the fp32 tensor the op gets */
    cl_mem scratch;
} stand_in;

static oclml_status stand_in_make(oclml_ctx *ctx, const oclml_tensor *t, bool fill, stand_in *s) {
    *s = (stand_in){t, (oclml_tensor *)t, NULL};
    if (!t || t->dtype == OCLML_FLOAT32) return OCLML_SUCCESS;
    s->view = NULL;
    oclml_status st = oclml__scratch_get(ctx, t->numel * sizeof(float), &s->scratch);
    if (!st)
        st =
            oclml_tensor_wrap_dtype(ctx, OCLML_FLOAT32, s->scratch, 0, t->ndim, t->shape, &s->view);
    if (!st && fill)
        st = oclml__cast_raw(ctx, t->dtype, t->mem, oclml__elem_offset(t), OCLML_FLOAT32,
                             s->scratch, 0, t->numel);
    return st;
}

/* Rounds an output's stand-in back into it. */
static oclml_status stand_in_store(oclml_ctx *ctx, const stand_in *s) {
    if (!s->scratch) return OCLML_SUCCESS;
    return oclml__cast_raw(ctx, OCLML_FLOAT32, s->scratch, 0, s->of->dtype, s->of->mem,
                           oclml__elem_offset(s->of), s->of->numel);
}

static void stand_in_free(oclml_ctx *ctx, stand_in *s) {
    if (s->scratch) {
        if (s->view) oclml_tensor_destroy(s->view);
        oclml__scratch_put(ctx, s->scratch);
    }
}

bool oclml__any_16bit(unsigned n, const oclml_tensor *const *ts) {
    for (unsigned i = 0; i < n; i++)
        if (ts[i] && ts[i]->dtype != OCLML_FLOAT32) return true;
    return false;
}

/* The context and tensor checks the stand-ins rely on (the fp32 op does the rest). */
static oclml_status check_all(oclml_ctx *ctx, unsigned n, const oclml_tensor *const *ts,
                              const char *const *names) {
    oclml_status st = oclml__check_ctx(ctx);
    for (unsigned i = 0; !st && i < n; i++)
        if (ts[i]) st = oclml__check_tensor_of(ctx, ts[i], names[i], OCLML__DTYPES_ALL);
    return st;
}

oclml_status oclml__via_fp32(oclml_ctx *ctx, unsigned n, unsigned inputs, unsigned outputs,
                             const oclml_tensor *const *ts, const char *const *names,
                             oclml__fp32_run run, const void *call) {
    oclml_status st = check_all(ctx, n, ts, names);
    if (st) return st;
    stand_in s[OCLML__VIA_FP32_MOST];
    oclml_tensor *views[OCLML__VIA_FP32_MOST];
    unsigned made = 0;
    for (; !st && made < n; made++) {
        st = stand_in_make(ctx, ts[made], inputs >> made & 1u, &s[made]);
        views[made] = s[made].view;
    }
    if (!st) st = run(ctx, call, views);
    for (unsigned i = 0; !st && i < n; i++)
        if (outputs >> i & 1u) st = stand_in_store(ctx, &s[i]);
    for (unsigned i = 0; i < made; i++) stand_in_free(ctx, &s[i]);
    return st;
}
