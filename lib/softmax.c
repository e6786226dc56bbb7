/* Softmax and log-softmax along the last axis, forward and backward (cl/softmax.cl). */
#include "rows.h"

#include <stdio.h>

#define FILE_CL "softmax.cl"

/* Rows and columns of x with y (and dy) of the same shape; the plan for them. */
static oclml_status plan_rows(oclml_ctx *ctx, const char *base, const oclml_tensor *a, const char *an,
                              const oclml_tensor *b, const char *bn, const oclml_tensor *c,
                              const char *cn, unsigned arrays, oclml__row_plan *plan) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_same_shape(ctx, a, an, b, bn);
    if (!st && c) st = oclml__check_same_shape(ctx, a, an, c, cn);
    if (!st && !c && cn) st = oclml__check_tensor(ctx, c, cn);
    if (st) return st;
    size_t rows, cols;
    oclml__check_matrix_view(ctx, a, an, &rows, &cols);
    bool vec4 = oclml__vec4_offset(a) && oclml__vec4_offset(b) && oclml__vec4_offset(c);
    return oclml__row_plan_for(ctx, FILE_CL, base, rows, cols, vec4, arrays, plan);
}

static oclml_status forward_once(oclml_ctx *ctx, const oclml_tensor *x, oclml_tensor *y, bool log) {
    oclml__row_plan p;
    const char *base = log ? "oclml_log_softmax_fwd" : "oclml_softmax_fwd";
    oclml_status st = plan_rows(ctx, base, x, "x", y, "y", NULL, NULL, 1, &p);
    if (st) return st;
    cl_ulong xo = oclml__elem_offset(x), yo = oclml__elem_offset(y);
    if (!p.long_rows) {
        oclml__arg args[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(y->mem), OCLML_ARG(yo)};
        return oclml__row_launch(ctx, FILE_CL, base, &p, args, 4);
    }
    cl_mem part;
    st = oclml__scratch_get(ctx, p.rows * p.nchunks * 2 * sizeof(float), &part);
    if (st) return st;
    oclml__arg a1[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(part)};
    st = oclml__row_launch_long(ctx, FILE_CL, "oclml_softmax_fwd_part", &p, a1, 3);
    oclml__arg a2[] = {OCLML_ARG(x->mem), OCLML_ARG(xo), OCLML_ARG(y->mem), OCLML_ARG(yo), OCLML_ARG(part)};
    if (!st)
        st = oclml__row_launch_long(ctx, FILE_CL, log ? "oclml_log_softmax_fwd_finish" : "oclml_softmax_fwd_finish",
                                    &p, a2, 5);
    oclml__scratch_put(ctx, part);
    return st;
}

static oclml_status backward_once(oclml_ctx *ctx, const oclml_tensor *y, const oclml_tensor *dy,
                                  oclml_tensor *dx, bool log) {
    oclml__row_plan p;
    const char *base = log ? "oclml_log_softmax_bwd" : "oclml_softmax_bwd";
    oclml_status st = plan_rows(ctx, base, y, "y", dy, "dy", dx, "dx", 2, &p);
    if (st) return st;
    cl_ulong yo = oclml__elem_offset(y), go = oclml__elem_offset(dy), xo = oclml__elem_offset(dx);
    if (!p.long_rows) {
        oclml__arg args[] = {OCLML_ARG(y->mem), OCLML_ARG(yo), OCLML_ARG(dy->mem), OCLML_ARG(go),
                             OCLML_ARG(dx->mem), OCLML_ARG(xo)};
        return oclml__row_launch(ctx, FILE_CL, base, &p, args, 6);
    }
    cl_mem part;
    st = oclml__scratch_get(ctx, p.rows * p.nchunks * sizeof(float), &part);
    if (st) return st;
    oclml__arg a1[] = {OCLML_ARG(y->mem), OCLML_ARG(yo), OCLML_ARG(dy->mem), OCLML_ARG(go), OCLML_ARG(part)};
    st = oclml__row_launch_long(ctx, FILE_CL, log ? "oclml_log_softmax_bwd_part" : "oclml_softmax_bwd_part",
                                &p, a1, 5);
    oclml__arg a2[] = {OCLML_ARG(y->mem), OCLML_ARG(yo), OCLML_ARG(dy->mem), OCLML_ARG(go),
                       OCLML_ARG(dx->mem), OCLML_ARG(xo), OCLML_ARG(part)};
    if (!st)
        st = oclml__row_launch_long(ctx, FILE_CL, log ? "oclml_log_softmax_bwd_finish" : "oclml_softmax_bwd_finish",
                                    &p, a2, 7);
    oclml__scratch_put(ctx, part);
    return st;
}

oclml_status oclml_softmax(oclml_ctx *ctx, const oclml_tensor *x, oclml_tensor *y) {
    OCLML__ROW_RETRY(ctx, forward_once(ctx, x, y, false));
}

oclml_status oclml_log_softmax(oclml_ctx *ctx, const oclml_tensor *x, oclml_tensor *y) {
    OCLML__ROW_RETRY(ctx, forward_once(ctx, x, y, true));
}

oclml_status oclml_softmax_backward(oclml_ctx *ctx, const oclml_tensor *y, const oclml_tensor *dy,
                                    oclml_tensor *dx) {
    OCLML__ROW_RETRY(ctx, backward_once(ctx, y, dy, dx, false));
}

oclml_status oclml_log_softmax_backward(oclml_ctx *ctx, const oclml_tensor *y,
                                        const oclml_tensor *dy, oclml_tensor *dx) {
    OCLML__ROW_RETRY(ctx, backward_once(ctx, y, dy, dx, true));
}

