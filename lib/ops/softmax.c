/* Softmax and log-softmax along the last axis, forward and backward (cl/ops/softmax.cl), on
 * tensors of any dtype each (fp32 math inside, each output rounded once). */
#include "ops/ops.h"
#include "ops/rows.h"

#define FILE_CL "softmax.cl"

static const oclml__row_family FWD = {FILE_CL, "oclml_softmax_fwd",
                                      "oclml_softmax_fwd_part oclml_softmax_fwd_finish", 1, NULL};
static const oclml__row_family LOG_FWD = {FILE_CL, "oclml_log_softmax_fwd",
                                          "oclml_softmax_fwd_part oclml_log_softmax_fwd_finish", 1,
                                          NULL};
static const oclml__row_family BWD = {FILE_CL, "oclml_softmax_bwd",
                                      "oclml_softmax_bwd_part oclml_softmax_bwd_finish", 2, NULL};
static const oclml__row_family LOG_BWD = {FILE_CL, "oclml_log_softmax_bwd",
                                          "oclml_log_softmax_bwd_part oclml_log_softmax_bwd_finish",
                                          2, NULL};

typedef struct softmax_call {
    const oclml_tensor *a, *b; /* forward x, y; backward y, dy */
    oclml_tensor *out;         /* forward y; backward dx */
    bool log, backward;
} softmax_call;

static const oclml__row_family *family(bool log, bool backward) {
    return backward ? (log ? &LOG_BWD : &BWD) : (log ? &LOG_FWD : &FWD);
}

/* The shapes as the fp32 checks see them, the dtypes apart: any. */
static oclml_status check(oclml_ctx *ctx, const softmax_call *c, size_t *rows, size_t *cols) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor_of(ctx, c->a, c->backward ? "y" : "x", OCLML__DTYPES_ALL);
    if (!st) st = oclml__check_tensor_of(ctx, c->out, c->backward ? "dx" : "y", OCLML__DTYPES_ALL);
    if (!st && c->backward) st = oclml__check_tensor_of(ctx, c->b, "dy", OCLML__DTYPES_ALL);
    if (st) return st;
    bool same = c->a->ndim == c->out->ndim && (!c->backward || c->a->ndim == c->b->ndim);
    for (int i = 0; same && i < c->a->ndim; i++)
        same = c->a->shape[i] == c->out->shape[i] &&
               (!c->backward || c->a->shape[i] == c->b->shape[i]);
    if (!same)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "%s must have the same shape",
                           c->backward ? "y, dy and dx" : "x and y");
    *cols = c->a->shape[c->a->ndim - 1];
    *rows = c->a->numel / *cols;
    return OCLML_SUCCESS;
}

static oclml_status attempt(oclml_ctx *ctx, const void *call, bool *replan) {
    const softmax_call *c = call;
    const oclml__row_family *f = family(c->log, c->backward);
    size_t rows = 0, cols = 0;
    oclml_status st = check(ctx, c, &rows, &cols);
    if (st) return st;
    bool vec4 = oclml__vec4_offset(c->a) && oclml__vec4_offset(c->b) && oclml__vec4_offset(c->out);
    oclml__row_plan p;
    st = oclml__row_plan_for_dtype(ctx, f, rows, cols, vec4, c->a->dtype, &p);
    if (st) return st;
    char dt[96];
    const char *const fwd_names[] = {"X", "Y"}, *const bwd_names[] = {"Y", "DY", "DX"};
    const oclml_tensor *const fwd[] = {c->a, c->out}, *const bwd[] = {c->a, c->b, c->out};
    oclml__dtype_defines(dt, sizeof dt, c->backward ? 3 : 2, c->backward ? bwd_names : fwd_names,
                         c->backward ? bwd : fwd);
    oclml__row_plan_dtypes(&p, dt);
    const oclml_tensor *a = c->a, *b = c->b ? c->b : c->a;
    cl_ulong ao = oclml__elem_offset(a), bo = oclml__elem_offset(b),
             oo = oclml__elem_offset(c->out);
    /* Forward: (x, y); backward: (y, dy, dx). */
    oclml__arg args[] = {OCLML_ARG(a->mem),      OCLML_ARG(ao), OCLML_ARG(b->mem), OCLML_ARG(bo),
                         OCLML_ARG(c->out->mem), OCLML_ARG(oo), {0, NULL}};
    oclml__arg *io =
        c->backward ? args : (oclml__arg[]){args[0], args[1], args[4], args[5], {0, NULL}};
    unsigned n_io = c->backward ? 6 : 4;
    if (!p.long_rows) return oclml__row_launch(ctx, f, &p, io, n_io, replan);
    /* Long rows: per-chunk partials ((max, sum) forward, sum backward), then the finish pass. */
    cl_mem part;
    st = oclml__scratch_get(ctx, p.rows * p.nchunks * (c->backward ? 1 : 2) * sizeof(float), &part);
    if (st) return st;
    oclml__arg a1[] = {args[0], args[1], args[2], args[3], OCLML_ARG(part)};
    if (!c->backward) a1[2] = OCLML_ARG(part);
    st = oclml__row_launch_long(ctx, f, false, &p, a1, c->backward ? 5 : 3);
    io[n_io] = OCLML_ARG(part);
    if (!st) st = oclml__row_launch_long(ctx, f, true, &p, io, n_io + 1);
    oclml__scratch_put(ctx, part);
    return st;
}

oclml_status oclml_softmax(oclml_ctx *ctx, const oclml_tensor *x, oclml_tensor *y) {
    softmax_call c = {x, NULL, y, false, false};
    return oclml__row_retry(ctx, attempt, &c);
}

oclml_status oclml_log_softmax(oclml_ctx *ctx, const oclml_tensor *x, oclml_tensor *y) {
    softmax_call c = {x, NULL, y, true, false};
    return oclml__row_retry(ctx, attempt, &c);
}

oclml_status oclml_softmax_backward(oclml_ctx *ctx, const oclml_tensor *y, const oclml_tensor *dy,
                                    oclml_tensor *dx) {
    softmax_call c = {y, dy, dx, false, true};
    return oclml__row_retry(ctx, attempt, &c);
}

oclml_status oclml_log_softmax_backward(oclml_ctx *ctx, const oclml_tensor *y,
                                        const oclml_tensor *dy, oclml_tensor *dx) {
    softmax_call c = {y, dy, dx, true, true};
    return oclml__row_retry(ctx, attempt, &c);
}

/* ---- the op list's planner: the programs these ops build for a row length ---- */
void oclml__softmax_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    bool log = strstr(op, "log_") != NULL, backward = strstr(op, "backward") != NULL;
    const oclml__row_family *f = family(log, backward);
    for (size_t i = 0; i < OCLML__WARM_ROW_LENGTHS; i++) {
        oclml__row_plan p;
        if (oclml__row_plan_for(ctx, f, 1024, oclml__warm_row_lengths[i], true, &p)) continue;
        oclml__warm_add(list, op, p.variant, oclml__row_spec(f, &p));
    }
}

const oclml__row_family *oclml__softmax_family(const char *op) {
    return family(strstr(op, "log_") != NULL, strstr(op, "backward") != NULL);
}
