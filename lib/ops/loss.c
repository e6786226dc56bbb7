/* Losses with PyTorch's semantics (cl/ops/loss.cl): cross-entropy fused with log-softmax, KL
 * divergence between categorical logits (both on the row-op layout of rows.c: one read of a row
 * held in registers, chunked for long rows), and the pointwise MSE, Huber and BCE-with-logits.
 * Each computes the loss and the gradients in the same launch; reductions are deterministic
 * (per-row or per-group partials summed by one work-group in a fixed order). Cross-entropy's
 * logits and dlogits may be of any dtype (fp32 math inside, dlogits rounded once); everything
 * else is fp32. */
#include "ops/ops.h"
#include "ops/rows.h"

#include "../../cl/include/loss_abi.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define FILE_CL "loss.cl"
/* Rows per launch of the chunked paths, whose grid's second dimension counts rows (NVIDIA's
 * limit there is 65535 work-groups). */
#ifndef SLICE_ROWS
#define SLICE_ROWS 65535
#endif

/* The finish pass of a chunked loss: every chunk of each row where gradients are wanted, else
 * the first chunk's work-group alone, which writes the row's loss (the others would only merge
 * the row's partials again). */
static oclml_status launch_long_finish(oclml_ctx *ctx, const oclml__row_family *f,
                                       const oclml__row_plan *p, const oclml__arg *args,
                                       unsigned nargs, bool grads) {
    oclml__row_plan fp = *p;
    if (!grads) fp.global[0] = fp.local;
    return oclml__row_launch_long(ctx, f, true, &fp, args, nargs);
}

static const oclml__row_family XENT_IDX = {FILE_CL, "oclml_xent_rows",
                                           "oclml_xent_part oclml_xent_finish", 1, NULL};
/* Probability targets keep the target row in registers too. */
static const oclml__row_family XENT_PROB = {FILE_CL, "oclml_xent_rows",
                                            "oclml_xent_part oclml_xent_finish", 2, NULL};
/* Class indices on rows past the registers but within registers plus 48 KiB of local memory:
 * HYB_ITEMS floats a work-item in registers, the rest in local memory (cl/ops/loss.cl). */
static const oclml__row_family XENT_HYB = {FILE_CL, "oclml_xent_hybrid",
                                           "oclml_xent_part oclml_xent_finish", 1, NULL};
#define HYB_ITEMS 40
#define HYB_LOCAL_BYTES 49152
static const oclml__row_family KL = {FILE_CL, "oclml_kl_rows", "oclml_kl_part oclml_kl_finish", 2,
                                     NULL};
static const oclml__program_spec REDUCE_SPEC = {FILE_CL, NULL, "oclml_loss_finish oclml_xent_count",
                                                0};
static const oclml__program_spec POINTWISE_SPEC = {FILE_CL, NULL,
                                                   "oclml_loss_pointwise oclml_loss_finish", 0};

oclml_status oclml_loss_params_init(oclml_loss_params *p) {
    if (!p) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "params is NULL");
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->reduction = OCLML_LOSS_MEAN;
    p->ignore_index = -100;
    p->label_smoothing = 0.0f;
    p->delta = 1.0f;
    return OCLML_SUCCESS;
}

/* ---- validation ---- */

static oclml_status check_params(oclml_ctx *ctx, const oclml_loss_params *p) {
    if (p->struct_size < sizeof *p)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "params.struct_size is %zu, expected %zu: call oclml_loss_params_init",
                           p->struct_size, sizeof *p);
    if ((unsigned)p->reduction > OCLML_LOSS_NONE)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "params.reduction %d is not an oclml_loss_reduction", (int)p->reduction);
    return OCLML_SUCCESS;
}

/* The loss output: one element for mean and sum, `items` for none. */
static oclml_status check_loss_out(oclml_ctx *ctx, const oclml_loss_params *p,
                                   const oclml_tensor *t, const char *name, size_t items,
                                   const char *what) {
    if (!t) return OCLML_SUCCESS;
    oclml_status st = oclml__check_tensor(ctx, t, name);
    if (st) return st;
    size_t want = p->reduction == OCLML_LOSS_NONE ? items : 1;
    if (t->numel != want)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "%s has %zu elements; reduction %s wants %zu (%s)", name, t->numel,
                           p->reduction == OCLML_LOSS_NONE ? "none" : "mean/sum", want,
                           p->reduction == OCLML_LOSS_NONE ? what : "one value");
    return OCLML_SUCCESS;
}

/* Whether two tensors are the same elements (an in-place gradient), of one dtype: a 16-bit
 * gradient over fp32 logits would write elements other work-items still read. */
static bool same_region(const oclml_tensor *a, const oclml_tensor *b) {
    return a && b && a->mem == b->mem && a->offset_bytes == b->offset_bytes &&
           a->numel == b->numel && a->dtype == b->dtype;
}

/* Outputs may not overlap inputs or each other, except a gradient that is exactly its own input
 * (in place). outs[i] may be NULL; own[i] is the input outs[i] may replace. */
static oclml_status check_alias(oclml_ctx *ctx, const oclml_tensor *const *outs,
                                const char *const *out_names, const oclml_tensor *const *own,
                                int n_out, const oclml_tensor *const *ins,
                                const char *const *in_names, int n_in) {
    for (int o = 0; o < n_out; o++) {
        const oclml_tensor *t = outs[o];
        if (!t) continue;
        for (int i = 0; i < n_in; i++) {
            const oclml_tensor *u = ins[i];
            if (!u || !oclml__overlap(t, u)) continue;
            if (u == own[o] && same_region(t, u)) continue;
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                               "output '%s' overlaps '%s' in memory (a gradient may only be its "
                               "own input, in place)",
                               out_names[o], in_names[i]);
        }
        for (int j = 0; j < o; j++)
            if (oclml__overlap(t, outs[j]))
                return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "outputs '%s' and '%s' overlap",
                                   out_names[j], out_names[o]);
    }
    return OCLML_SUCCESS;
}

/* The upstream gradient: one element, or `items` for reduction none. */
static oclml_status check_dloss(oclml_ctx *ctx, const oclml_loss_params *p,
                                const oclml_tensor *dloss, size_t items) {
    if (!dloss) return OCLML_SUCCESS;
    oclml_status st = oclml__check_tensor(ctx, dloss, "dloss");
    if (st) return st;
    size_t want = p->reduction == OCLML_LOSS_NONE ? items : 1;
    if (dloss->numel != want)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "dloss has %zu elements, expected %zu (the loss's)", dloss->numel, want);
    return OCLML_SUCCESS;
}

/* One work-group for the small reductions: up to 256 work-items. */
static size_t reduce_local(const oclml_ctx *ctx) {
    size_t wg = ctx->caps.max_work_group_size < 256 ? ctx->caps.max_work_group_size : 256;
    return oclml__pow2_floor(wg ? wg : 1);
}

/* out[0] = sum of part[0 .. n) (divided for the mean). */
static oclml_status launch_finish(oclml_ctx *ctx, cl_mem part, size_t n, const oclml_tensor *out,
                                  cl_mem cnt, cl_uint flags, float n_div) {
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &REDUCE_SPEC, "oclml_loss_finish", &k);
    if (st) return st;
    size_t local = reduce_local(ctx);
    cl_ulong un = n, ooff = oclml__elem_offset(out);
    cl_mem om = out->mem;
    oclml__arg args[] = {
        OCLML_ARG(part), OCLML_ARG(un),    OCLML_ARG(om),    OCLML_ARG(ooff),
        OCLML_ARG(cnt),  OCLML_ARG(flags), OCLML_ARG(n_div), OCLML_LOCAL(local * sizeof(float))};
    return oclml__launch(ctx, k, args, 8, 1, &local, &local, NULL);
}

/* The flags every loss shares: what to write, the upstream gradient, the mean. */
static cl_uint base_flags(const oclml_loss_params *p, const oclml_tensor *loss,
                          const oclml_tensor *dloss) {
    cl_uint f = loss ? OCLML_LOSSF_WANT_LOSS : 0;
    if (dloss) f |= OCLML_LOSSF_DLOSS;
    if (dloss && p->reduction == OCLML_LOSS_NONE) f |= OCLML_LOSSF_DLOSS_EACH;
    if (p->reduction == OCLML_LOSS_MEAN) f |= OCLML_LOSSF_MEAN;
    return f;
}

/* Rows and columns of a tensor along its last axis. */
static oclml_status rows_cols(oclml_ctx *ctx, const oclml_tensor *t, const char *name, size_t *rows,
                              size_t *cols) {
    oclml_status st = oclml__check_tensor(ctx, t, name);
    if (st) return st;
    *cols = t->shape[t->ndim - 1];
    *rows = t->numel / *cols;
    return OCLML_SUCCESS;
}

/* ======================== cross-entropy ======================== */

typedef struct xent_call {
    const oclml_loss_params *p;
    const oclml_tensor *logits, *target, *dloss;
    oclml_tensor *loss, *dlogits;
} xent_call;

/* logits and dlogits of any dtype; target, weight, dloss and loss fp32. */
static oclml_status xent_check(oclml_ctx *ctx, const xent_call *c, size_t *rows, size_t *cols) {
    const oclml_loss_params *p = c->p;
    oclml_status st = check_params(ctx, p);
    if (!st) st = oclml__check_tensor_of(ctx, c->logits, "logits", OCLML__DTYPES_ALL);
    if (st) return st;
    *cols = c->logits->shape[c->logits->ndim - 1];
    *rows = c->logits->numel / *cols;
    if (!(p->label_smoothing >= 0.0f && p->label_smoothing <= 1.0f))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "params.label_smoothing is %g, must be in [0, 1]",
                           (double)p->label_smoothing);
    if (p->ignore_index <= -(1 << 24) || p->ignore_index >= (1 << 24))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "params.ignore_index %d: targets are floats, exact below 2^24 in "
                           "magnitude",
                           p->ignore_index);
    if (!p->probabilities && *cols >= (1u << 24))
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "%zu classes: class indices are floats, exact below 2^24", *cols);
    if (p->probabilities) {
        st = oclml__check_tensor(ctx, c->target, "target");
        if (!st)
            st = oclml__check_same_shape_of(ctx, c->logits, "logits", c->target, "target",
                                            OCLML__DTYPES_ALL);
    } else
        st = oclml__check_numel(ctx, c->target, "target", *rows);
    if (st) {
        if (st == OCLML_ERR_INVALID_SHAPE && !p->probabilities)
            oclml__fail(ctx, st,
                        "target has %zu elements: class indices want one per row of logits (%zu)",
                        c->target->numel, *rows);
        return st;
    }
    if (!c->loss && !c->dlogits)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER,
                           "loss and dlogits are both NULL: nothing to compute");
    if (p->weight && (st = oclml__check_numel(ctx, p->weight, "weight", *cols))) {
        if (st == OCLML_ERR_INVALID_SHAPE)
            oclml__fail(ctx, st, "weight has %zu elements, expected one per class (%zu)",
                        p->weight->numel, *cols);
        return st;
    }
    st = check_loss_out(ctx, p, c->loss, "loss", *rows, "one per row");
    if (!st && c->dlogits)
        st = oclml__check_same_shape_of(ctx, c->logits, "logits", c->dlogits, "dlogits",
                                        OCLML__DTYPES_ALL);
    if (!st) st = check_dloss(ctx, p, c->dloss, *rows);
    if (st) return st;
    const oclml_tensor *outs[] = {c->loss, c->dlogits}, *own[] = {NULL, c->logits};
    const oclml_tensor *ins[] = {c->logits, c->target, c->dloss, p->weight};
    const char *const on[] = {"loss", "dlogits"}, *const in[] = {"logits", "target", "dloss",
                                                                 "weight"};
    return check_alias(ctx, outs, on, own, 2, ins, in, 4);
}

/* The registers + local memory plan for class indices on rows the register path cannot hold:
 * 1024-wide work-groups (as the family's learned cap allows: a probe plan of 16384 columns needs
 * them to stay in registers), HYB_ITEMS floats a work-item, the rest within the local memory a
 * work-group gets (at most 48 KiB, the reduction buffer included). False: the chunked path. */
static bool hybrid_plan(oclml_ctx *ctx, size_t rows, size_t cols, oclml__row_plan *hp,
                        size_t *spill) {
    oclml__row_plan probe;
    if (oclml__row_plan_for(ctx, &XENT_HYB, rows, 16384, false, &probe) || probe.long_rows ||
        probe.G < 1024)
        return false;
    size_t G = probe.G, R = G * HYB_ITEMS, S = cols > R ? cols - R : 0;
    size_t budget =
        ctx->caps.local_mem_bytes < HYB_LOCAL_BYTES ? ctx->caps.local_mem_bytes : HYB_LOCAL_BYTES;
    if ((S + 2 * G) * sizeof(float) > budget || rows > SIZE_MAX / G) return false;
    memset(hp, 0, sizeof *hp);
    hp->rows = rows;
    hp->cols = cols;
    hp->G = (unsigned)G;
    hp->items = HYB_ITEMS;
    hp->vec = 1;
    hp->local = G;
    hp->global[0] = rows * G;
    hp->global[1] = 1;
    snprintf(hp->variant, sizeof hp->variant,
             "registers + local: %zu items/row, %u floats + %zu in local memory", G, HYB_ITEMS, S);
    snprintf(hp->defines, sizeof hp->defines, "-DHYB_ITEMS=%u -DHYB_SPILL=%zu", HYB_ITEMS,
             S ? (S + G - 1) / G : 1);
    *spill = S;
    return true;
}

/* Rows of class indices past the registers: loss.xent_long, or by default the chunked path on
 * GPUs and registers + local memory elsewhere (not measured against each other there). On GPUs
 * registers + local keeps one row of 1024 work-items per compute unit, whose reductions leave
 * the memory idle: on the H100 at 4096 x 50257 the chunked path takes about 0.75x its time, for
 * the loss alone and with dlogits (bench/DECISIONS.md, "Row ops"). */
static bool hybrid_wanted(oclml_ctx *ctx) {
    const long long_path = oclml__tune(ctx, OCLML__TUNE_LOSS_XENT_LONG, 0);
    return long_path > 0 || (long_path < 0 && !ctx->caps.is_gpu);
}

/* Whether class indices on rows planned as `plan` take registers + local memory (*hp, *spill). */
static bool takes_hybrid(oclml_ctx *ctx, const oclml__row_plan *plan, size_t rows, size_t cols,
                         oclml__row_plan *hp, size_t *spill) {
    return plan->long_rows && hybrid_wanted(ctx) && hybrid_plan(ctx, rows, cols, hp, spill);
}

/* The plan cross-entropy over class indices takes for rows x cols, in words (float4 loads
 * assumed where cols is a multiple of 4; a call's tensors' offsets may rule them out). */
oclml_status oclml__xent_variant(oclml_ctx *ctx, size_t rows, size_t cols, char *text, size_t len) {
    oclml__row_plan plan, hplan;
    size_t spill;
    oclml_status st = oclml__row_plan_for(ctx, &XENT_IDX, rows, cols, cols % 4 == 0, &plan);
    if (st) return st;
    const bool hybrid = takes_hybrid(ctx, &plan, rows, cols, &hplan, &spill);
    snprintf(text, len, "%s", hybrid ? hplan.variant : plan.variant);
    return OCLML_SUCCESS;
}

static oclml_status xent_attempt(oclml_ctx *ctx, const void *call, bool *replan) {
    const xent_call *c = call;
    const oclml_loss_params *p = c->p;
    size_t rows, cols;
    oclml_status st = xent_check(ctx, c, &rows, &cols);
    if (st) return st;
    const bool probs = p->probabilities != 0;
    const oclml__row_family *f = probs ? &XENT_PROB : &XENT_IDX;
    bool vec4 = oclml__vec4_offset(c->logits) && oclml__vec4_offset(c->dlogits) &&
                (!probs || oclml__vec4_offset(c->target));
    oclml__row_plan plan;
    if ((st = oclml__row_plan_for_dtype(ctx, f, rows, cols, vec4, c->logits->dtype, &plan)))
        return st;
    if (probs && !plan.long_rows)
        strncat(plan.defines, " -DXENT_PROBS=1", sizeof plan.defines - strlen(plan.defines) - 1);
    oclml__row_plan hplan;
    size_t spill = 0;
    const bool hybrid = !probs && takes_hybrid(ctx, &plan, rows, cols, &hplan, &spill);
    char dt[48];
    const char *const dt_names[] = {"X", "DX"};
    const oclml_tensor *const dt_tensors[] = {c->logits, c->dlogits};
    oclml__dtype_defines(dt, sizeof dt, 2, dt_names, dt_tensors);
    oclml__row_plan_dtypes(&plan, dt);
    if (hybrid) oclml__row_plan_dtypes(&hplan, dt);
    oclml__log(ctx, OCLML_LOG_DEBUG, "cross_entropy %zu x %zu: %s", rows, cols,
               hybrid ? hplan.variant : plan.variant);

    cl_uint flags = base_flags(p, c->loss, c->dloss);
    if (c->dlogits) flags |= OCLML_LOSSF_WANT_DX;
    if (probs) flags |= OCLML_LOSSF_PROBS;
    if (p->weight) flags |= OCLML_LOSSF_WEIGHT;
    const bool reduce = c->loss && p->reduction != OCLML_LOSS_NONE;
    const bool count = !probs && p->reduction == OCLML_LOSS_MEAN;
    if (count) flags |= OCLML_LOSSF_COUNT;
    cl_mem cnt = NULL, lr = NULL, part = NULL;
    if (count && (st = oclml__scratch_get(ctx, sizeof(float), &cnt))) return st;
    if (!st && reduce) st = oclml__scratch_get(ctx, rows * sizeof(float), &lr);
    if (st) goto done;
    if (count) {
        /* The mean's divisor: rows whose target is not ignore_index. */
        cl_kernel k;
        if ((st = oclml__kernel(ctx, &REDUCE_SPEC, "oclml_xent_count", &k))) goto done;
        size_t local = reduce_local(ctx);
        cl_mem tm = c->target->mem, cwm = oclml__opt_mem(p->weight);
        cl_ulong toff = oclml__elem_offset(c->target), ur = rows,
                 cwoff = oclml__opt_offset(p->weight);
        cl_uint ucols = (cl_uint)cols;
        float ign = (float)p->ignore_index;
        oclml__arg a[] = {OCLML_ARG(tm),    OCLML_ARG(toff),
                          OCLML_ARG(ur),    OCLML_ARG(ign),
                          OCLML_ARG(cwm),   OCLML_ARG(cwoff),
                          OCLML_ARG(flags), OCLML_ARG(ucols),
                          OCLML_ARG(cnt),   OCLML_LOCAL(local * sizeof(float))};
        if ((st = oclml__launch(ctx, k, a, 10, 1, &local, &local, NULL))) goto done;
    }
    {
        cl_mem xm = c->logits->mem, tm = c->target->mem, dxm = oclml__opt_mem(c->dlogits),
               dlm = oclml__opt_mem(c->dloss), cwm = oclml__opt_mem(p->weight);
        cl_mem lrm = reduce ? lr : oclml__opt_mem(c->loss);
        cl_ulong xoff = oclml__elem_offset(c->logits), toff = oclml__elem_offset(c->target),
                 dxoff = oclml__opt_offset(c->dlogits), dloff = oclml__opt_offset(c->dloss),
                 lroff = reduce ? 0 : oclml__opt_offset(c->loss),
                 cwoff = oclml__opt_offset(p->weight);
        float ign = (float)p->ignore_index, eps = p->label_smoothing, n_div = (float)rows;
        oclml__arg args[] = {OCLML_ARG(xm),    OCLML_ARG(xoff),  OCLML_ARG(tm),  OCLML_ARG(toff),
                             OCLML_ARG(lrm),   OCLML_ARG(lroff), OCLML_ARG(dxm), OCLML_ARG(dxoff),
                             OCLML_ARG(dlm),   OCLML_ARG(dloff), OCLML_ARG(cnt), OCLML_ARG(cwm),
                             OCLML_ARG(cwoff), OCLML_ARG(flags), OCLML_ARG(ign), OCLML_ARG(eps),
                             OCLML_ARG(n_div), {0, NULL}};
        if (!plan.long_rows) {
            st = oclml__row_launch(ctx, f, &plan, args, 17, replan);
        } else if (hybrid) {
            oclml__arg ha[18];
            memcpy(ha, args, 17 * sizeof *args);
            ha[17] = OCLML_LOCAL((spill ? spill : 1) * sizeof(float));
            st = oclml__row_launch(ctx, &XENT_HYB, &hplan, ha, 18, replan);
        } else {
            /* Slices of rows: the chunked grid's second dimension is the rows. */
            const size_t slice = rows < SLICE_ROWS ? rows : SLICE_ROWS;
            size_t nfl = (size_t)plan.nchunks * OCLML_XENT_PART + 1;
            if ((st = oclml__scratch_get(ctx, slice * nfl * sizeof(float), &part))) goto done;
            oclml__arg a1[] = {args[0],  args[1],  args[2],  args[3],  OCLML_ARG(part),
                               args[11], args[12], args[13], args[14], args[15]};
            args[17] = OCLML_ARG(part);
            const cl_ulong x0 = xoff, t0 = toff, l0 = lroff, d0 = dxoff, g0 = dloff;
            for (size_t r0 = 0; r0 < rows && !st; r0 += slice) {
                oclml__row_plan sp = plan;
                sp.rows = sp.global[1] = rows - r0 < slice ? rows - r0 : slice;
                xoff = x0 + r0 * cols;
                toff = t0 + (probs ? r0 * cols : r0);
                lroff = l0 + r0;
                dxoff = d0 + r0 * cols;
                dloff = g0 + ((flags & OCLML_LOSSF_DLOSS_EACH) ? r0 : 0);
                st = oclml__row_launch_long(ctx, f, false, &sp, a1, 10);
                if (!st)
                    st = launch_long_finish(ctx, f, &sp, args, 18, flags & OCLML_LOSSF_WANT_DX);
            }
        }
    }
    if (!st && reduce) st = launch_finish(ctx, lr, rows, c->loss, cnt, flags, (float)rows);
done:
    if (cnt) oclml__scratch_put(ctx, cnt);
    if (lr) oclml__scratch_put(ctx, lr);
    if (part) oclml__scratch_put(ctx, part);
    return st;
}

oclml_status oclml_cross_entropy(oclml_ctx *ctx, const oclml_loss_params *params,
                                 const oclml_tensor *logits, const oclml_tensor *target,
                                 const oclml_tensor *dloss, oclml_tensor *loss,
                                 oclml_tensor *dlogits) {
    oclml_loss_params def;
    xent_call c = {OCLML__OR_DEFAULTS(params, &def, oclml_loss_params_init),
                   logits,
                   target,
                   dloss,
                   loss,
                   dlogits};
    oclml_status st = oclml__check_ctx(ctx);
    return st ? st : oclml__row_retry(ctx, xent_attempt, &c);
}

/* ======================== KL divergence between logits ======================== */

typedef struct kl_call {
    const oclml_loss_params *p;
    const oclml_tensor *a, *b, *dloss;
    oclml_tensor *loss, *da, *db;
} kl_call;

static oclml_status kl_check(oclml_ctx *ctx, const kl_call *c, size_t *rows, size_t *cols) {
    oclml_status st = check_params(ctx, c->p);
    if (!st) st = rows_cols(ctx, c->a, "p_logits", rows, cols);
    if (!st) st = oclml__check_same_shape(ctx, c->a, "p_logits", c->b, "q_logits");
    if (st) return st;
    if (!c->loss && !c->da && !c->db)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER,
                           "loss, dp and dq are all NULL: nothing to compute");
    st = check_loss_out(ctx, c->p, c->loss, "loss", *rows, "one per row");
    if (!st && c->da) st = oclml__check_same_shape(ctx, c->a, "p_logits", c->da, "dp");
    if (!st && c->db) st = oclml__check_same_shape(ctx, c->a, "p_logits", c->db, "dq");
    if (!st) st = check_dloss(ctx, c->p, c->dloss, *rows);
    if (st) return st;
    const oclml_tensor *outs[] = {c->loss, c->da, c->db}, *own[] = {NULL, c->a, c->b};
    const oclml_tensor *ins[] = {c->a, c->b, c->dloss};
    const char *const on[] = {"loss", "dp", "dq"}, *const in[] = {"p_logits", "q_logits", "dloss"};
    return check_alias(ctx, outs, on, own, 3, ins, in, 3);
}

static oclml_status kl_attempt(oclml_ctx *ctx, const void *call, bool *replan) {
    const kl_call *c = call;
    const oclml_loss_params *p = c->p;
    size_t rows, cols;
    oclml_status st = kl_check(ctx, c, &rows, &cols);
    if (st) return st;
    bool vec4 = oclml__vec4_offset(c->a) && oclml__vec4_offset(c->b) && oclml__vec4_offset(c->da) &&
                oclml__vec4_offset(c->db);
    oclml__row_plan plan;
    if ((st = oclml__row_plan_for(ctx, &KL, rows, cols, vec4, &plan))) return st;
    cl_uint flags = base_flags(p, c->loss, c->dloss);
    if (c->da) flags |= OCLML_LOSSF_WANT_DX;
    if (c->db) flags |= OCLML_LOSSF_WANT_DQ;
    const bool reduce = c->loss && p->reduction != OCLML_LOSS_NONE;
    cl_mem lr = NULL, part = NULL;
    if (reduce && (st = oclml__scratch_get(ctx, rows * sizeof(float), &lr))) return st;
    cl_mem am = c->a->mem, bm = c->b->mem, dam = oclml__opt_mem(c->da), dbm = oclml__opt_mem(c->db),
           dlm = oclml__opt_mem(c->dloss);
    cl_mem lrm = reduce ? lr : oclml__opt_mem(c->loss);
    cl_ulong aoff = oclml__elem_offset(c->a), boff = oclml__elem_offset(c->b),
             daoff = oclml__opt_offset(c->da), dboff = oclml__opt_offset(c->db),
             dloff = oclml__opt_offset(c->dloss), lroff = reduce ? 0 : oclml__opt_offset(c->loss);
    float n_div = (float)rows;
    oclml__arg args[] = {OCLML_ARG(am),    OCLML_ARG(aoff),  OCLML_ARG(bm),  OCLML_ARG(boff),
                         OCLML_ARG(lrm),   OCLML_ARG(lroff), OCLML_ARG(dam), OCLML_ARG(daoff),
                         OCLML_ARG(dbm),   OCLML_ARG(dboff), OCLML_ARG(dlm), OCLML_ARG(dloff),
                         OCLML_ARG(flags), OCLML_ARG(n_div), {0, NULL}};
    if (!plan.long_rows) {
        st = oclml__row_launch(ctx, &KL, &plan, args, 14, replan);
    } else {
        const size_t slice = rows < SLICE_ROWS ? rows : SLICE_ROWS;
        st = oclml__scratch_get(ctx, slice * plan.nchunks * OCLML_KL_PART * sizeof(float), &part);
        oclml__arg a1[] = {args[0], args[1], args[2], args[3], OCLML_ARG(part)};
        args[14] = OCLML_ARG(part);
        const cl_ulong a0 = aoff, b0 = boff, l0 = lroff, da0 = daoff, db0 = dboff, g0 = dloff;
        for (size_t r0 = 0; r0 < rows && !st; r0 += slice) {
            oclml__row_plan sp = plan;
            sp.rows = sp.global[1] = rows - r0 < slice ? rows - r0 : slice;
            aoff = a0 + r0 * cols;
            boff = b0 + r0 * cols;
            lroff = l0 + r0;
            daoff = da0 + r0 * cols;
            dboff = db0 + r0 * cols;
            dloff = g0 + ((flags & OCLML_LOSSF_DLOSS_EACH) ? r0 : 0);
            st = oclml__row_launch_long(ctx, &KL, false, &sp, a1, 5);
            if (!st)
                st = launch_long_finish(ctx, &KL, &sp, args, 15,
                                        flags & (OCLML_LOSSF_WANT_DX | OCLML_LOSSF_WANT_DQ));
        }
    }
    if (!st && reduce) st = launch_finish(ctx, lr, rows, c->loss, NULL, flags, n_div);
    if (lr) oclml__scratch_put(ctx, lr);
    if (part) oclml__scratch_put(ctx, part);
    return st;
}

oclml_status oclml_kl_div_logits(oclml_ctx *ctx, const oclml_loss_params *params,
                                 const oclml_tensor *p_logits, const oclml_tensor *q_logits,
                                 const oclml_tensor *dloss, oclml_tensor *loss, oclml_tensor *dp,
                                 oclml_tensor *dq) {
    oclml_loss_params def;
    kl_call c = {OCLML__OR_DEFAULTS(params, &def, oclml_loss_params_init),
                 p_logits,
                 q_logits,
                 dloss,
                 loss,
                 dp,
                 dq};
    oclml_status st = oclml__check_ctx(ctx);
    return st ? st : oclml__row_retry(ctx, kl_attempt, &c);
}

/* ======================== pointwise losses ======================== */

static oclml_status pointwise(oclml_ctx *ctx, cl_uint kind, const oclml_loss_params *params,
                              const oclml_tensor *x, const oclml_tensor *t,
                              const oclml_tensor *dloss, oclml_tensor *loss, oclml_tensor *dx) {
    static const char *const XN[] = {"input", "input", "logits"}, *const DN[] = {"dinput", "dinput",
                                                                                 "dlogits"};
    oclml_loss_params def;
    const oclml_loss_params *p = OCLML__OR_DEFAULTS(params, &def, oclml_loss_params_init);
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = check_params(ctx, p);
    if (!st) st = oclml__check_same_shape(ctx, x, XN[kind], t, "target");
    if (st) return st;
    const size_t n = x->numel, cols = x->shape[x->ndim - 1];
    const oclml_tensor *pw = kind == OCLML_LOSSK_BCE ? p->pos_weight : NULL;
    if (kind == OCLML_LOSSK_HUBER && !(p->delta > 0.0f && isfinite(p->delta)))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "params.delta is %g, must be positive and finite", (double)p->delta);
    if (pw && (st = oclml__check_numel(ctx, pw, "pos_weight", cols))) {
        if (st == OCLML_ERR_INVALID_SHAPE)
            oclml__fail(ctx, st,
                        "pos_weight has %zu elements, expected one per class (%zu, %s's "
                        "last dimension)",
                        pw->numel, cols, XN[kind]);
        return st;
    }
    if (!loss && !dx)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER,
                           "loss and %s are both NULL: nothing to compute", DN[kind]);
    st = check_loss_out(ctx, p, loss, "loss", n, "one per element");
    if (!st && dx) st = oclml__check_same_shape(ctx, x, XN[kind], dx, DN[kind]);
    if (!st) st = check_dloss(ctx, p, dloss, n);
    if (st) return st;
    const oclml_tensor *outs[] = {loss, dx}, *own[] = {NULL, x};
    const oclml_tensor *ins[] = {x, t, dloss, pw};
    const char *const on[] = {"loss", DN[kind]}, *const in[] = {XN[kind], "target", "dloss",
                                                                "pos_weight"};
    if ((st = check_alias(ctx, outs, on, own, 2, ins, in, 4))) return st;

    cl_kernel k;
    if ((st = oclml__kernel(ctx, &POINTWISE_SPEC, "oclml_loss_pointwise", &k))) return st;
    size_t local = reduce_local(ctx), groups = (n + local - 1) / local;
    size_t cap = (size_t)(ctx->caps.compute_units ? ctx->caps.compute_units : 1) * 32;
    if (groups > cap) groups = cap;
    size_t global = groups * local;
    const bool reduce = loss && p->reduction != OCLML_LOSS_NONE;
    cl_uint flags = base_flags(p, loss, dloss) | (dx ? OCLML_LOSSF_WANT_DX : 0) |
                    (pw ? OCLML_LOSSF_POS_WEIGHT : 0) | (reduce ? OCLML_LOSSF_REDUCE : 0);
    cl_mem part = NULL;
    if (reduce && (st = oclml__scratch_get(ctx, groups * sizeof(float), &part))) return st;
    cl_mem xm = x->mem, tm = t->mem, pwm = oclml__opt_mem(pw),
           lm = reduce ? NULL : oclml__opt_mem(loss), dxm = oclml__opt_mem(dx),
           dlm = oclml__opt_mem(dloss);
    cl_ulong xoff = oclml__elem_offset(x), toff = oclml__elem_offset(t),
             pwoff = oclml__opt_offset(pw), loff = reduce ? 0 : oclml__opt_offset(loss),
             dxoff = oclml__opt_offset(dx), dloff = oclml__opt_offset(dloss), un = n;
    cl_uint pwlen = (cl_uint)(pw ? cols : 1);
    float delta = p->delta, n_div = (float)n;
    oclml__arg args[] = {
        OCLML_ARG(kind),  OCLML_ARG(xm),    OCLML_ARG(xoff),  OCLML_ARG(tm),
        OCLML_ARG(toff),  OCLML_ARG(pwm),   OCLML_ARG(pwoff), OCLML_ARG(pwlen),
        OCLML_ARG(lm),    OCLML_ARG(loff),  OCLML_ARG(dxm),   OCLML_ARG(dxoff),
        OCLML_ARG(dlm),   OCLML_ARG(dloff), OCLML_ARG(flags), OCLML_ARG(delta),
        OCLML_ARG(n_div), OCLML_ARG(part),  OCLML_ARG(un),    OCLML_LOCAL(local * sizeof(float))};
    st = oclml__launch(ctx, k, args, 20, 1, &global, &local, NULL);
    if (!st && reduce) st = launch_finish(ctx, part, groups, loss, NULL, flags, n_div);
    if (part) oclml__scratch_put(ctx, part);
    return st;
}

oclml_status oclml_mse_loss(oclml_ctx *ctx, const oclml_loss_params *params,
                            const oclml_tensor *input, const oclml_tensor *target,
                            const oclml_tensor *dloss, oclml_tensor *loss, oclml_tensor *dinput) {
    return pointwise(ctx, OCLML_LOSSK_MSE, params, input, target, dloss, loss, dinput);
}

oclml_status oclml_huber_loss(oclml_ctx *ctx, const oclml_loss_params *params,
                              const oclml_tensor *input, const oclml_tensor *target,
                              const oclml_tensor *dloss, oclml_tensor *loss, oclml_tensor *dinput) {
    return pointwise(ctx, OCLML_LOSSK_HUBER, params, input, target, dloss, loss, dinput);
}

oclml_status oclml_bce_with_logits(oclml_ctx *ctx, const oclml_loss_params *params,
                                   const oclml_tensor *logits, const oclml_tensor *target,
                                   const oclml_tensor *dloss, oclml_tensor *loss,
                                   oclml_tensor *dlogits) {
    return pointwise(ctx, OCLML_LOSSK_BCE, params, logits, target, dloss, loss, dlogits);
}

/* ---- the op list's planner ---- */
void oclml__loss_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    if (strcmp(op, "cross_entropy") && strcmp(op, "kl_div_logits")) {
        oclml__warm_add(list, op, "pointwise", POINTWISE_SPEC);
        return;
    }
    oclml__warm_add(list, op, "reduce", REDUCE_SPEC);
    const bool kl = !strcmp(op, "kl_div_logits");
    oclml__row_plan hp;
    size_t spill;
    /* The registers + local program where xent_attempt's default (or loss.xent_long) takes it. */
    if (!kl && hybrid_wanted(ctx) && hybrid_plan(ctx, 1024, 50257, &hp, &spill))
        oclml__warm_add(list, op, hp.variant, oclml__row_spec(&XENT_HYB, &hp));
    const oclml__row_family *f = kl ? &KL : &XENT_IDX;
    for (size_t i = 0; i < OCLML__WARM_ROW_LENGTHS; i++) {
        oclml__row_plan p;
        if (oclml__row_plan_for(ctx, f, 1024, oclml__warm_row_lengths[i], true, &p)) continue;
        oclml__warm_add(list, op, p.variant, oclml__row_spec(f, &p));
    }
}
