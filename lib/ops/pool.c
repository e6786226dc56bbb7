/* 2-D max and average pooling over NCHW tensors and their gradients (cl/ops/pool.cl), with
 * PyTorch's MaxPool2d / AvgPool2d semantics: symmetric padding of at most half the window,
 * ceil_mode, count_include_pad; the max gradient goes to each window's first maximum, or its
 * last NaN, as PyTorch's kernels do. The max-pool also comes with an activation fused before it
 * (oclml_act_max_pool2d: a convolution's activation and pooling in one pass each way). */
#include "ops/stand_in.h"
#include "ops/ops.h"

#include <stdio.h>

#define KERNEL_FILE "pool.cl"
#define DEFAULT_GROUP 64 /* work-items a group (pool.wg) */
static const oclml__program_spec AVG_FWD = {KERNEL_FILE, NULL, "oclml_avg_pool2d", 0};
static const oclml__program_spec AVG_BWD = {KERNEL_FILE, NULL, "oclml_avg_pool2d_backward", 0};
/* The plain 2x2 max-pool one window a work-item (small planes). */
static const oclml__program_spec SMALL_PLANES = {KERNEL_FILE, "-DPOOL_ONE=1",
                                                 "oclml_max_pool2d_2x2", 0};

/* A max-pool kernel's program: one a kernel and fused activation (none: the plain max-pool). */
static oclml__program_spec max_spec(const char *kernel, oclml_activation act) {
    return (oclml__program_spec){KERNEL_FILE, oclml__act_define(act), kernel, 0};
}

oclml_status oclml_pool2d_params_init(oclml_pool2d_params *p) {
    if (!p) return oclml__fail(NULL, OCLML_ERR_NULL_POINTER, "params is NULL");
    *p = (oclml_pool2d_params){.struct_size = sizeof *p, .kernel = {2, 2}, .count_include_pad = 1};
    return OCLML_SUCCESS;
}

typedef struct pool_shape {
    size_t planes, H, W, P, Q;
    unsigned kh, kw, sh, sw, ph, pw;
} pool_shape;

/* PyTorch's output extent: floor or ceil of the window count, where with ceil_mode the last
 * window must start inside the input or its leading padding. */
static size_t pool_out(size_t in, unsigned k, unsigned s, unsigned pad, int ceil_mode) {
    size_t span = in + 2 * (size_t)pad;
    if (span < k) return 0;
    size_t out = (span - k + (ceil_mode ? s - 1 : 0)) / s + 1;
    if (ceil_mode && (out - 1) * s >= in + pad) out--;
    return out;
}

static oclml_status pool_shape_of(oclml_ctx *ctx, const oclml_pool2d_params *p,
                                  const oclml_tensor *x, const char *x_name, pool_shape *s) {
    if (!p) return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "pool2d params are NULL");
    if (p->struct_size != sizeof *p)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "pool2d params struct_size is %zu, this library's is %zu (call "
                           "oclml_pool2d_params_init)",
                           p->struct_size, sizeof *p);
    oclml_status st = oclml__check_tensor(ctx, x, x_name);
    if (st) return st;
    if (x->ndim != 4)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "pooling takes 4-D %s [N x C x H x W]",
                           x_name);
    *s = (pool_shape){.planes = x->shape[0] * x->shape[1],
                      .H = x->shape[2],
                      .W = x->shape[3],
                      .kh = p->kernel[0],
                      .kw = p->kernel[1],
                      .sh = p->stride[0] ? p->stride[0] : p->kernel[0],
                      .sw = p->stride[1] ? p->stride[1] : p->kernel[1],
                      .ph = p->pad[0],
                      .pw = p->pad[1]};
    if (!s->kh || !s->kw || s->kh > 65535 || s->kw > 65535 || s->sh > 65535 || s->sw > 65535)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "pooling window and stride must be 1 to 65535");
    if (2 * s->ph > s->kh || 2 * s->pw > s->kw)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "pooling padding %ux%u exceeds half the %ux%u window", s->ph, s->pw,
                           s->kh, s->kw);
    s->P = pool_out(s->H, s->kh, s->sh, s->ph, p->ceil_mode);
    s->Q = pool_out(s->W, s->kw, s->sw, s->pw, p->ceil_mode);
    if (!s->P || !s->Q)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "the %ux%u window does not fit the padded %zux%zu input", s->kh, s->kw,
                           s->H, s->W);
    /* Kernels index a plane in signed 32-bit arithmetic. */
    if (s->H * s->W > INT32_MAX || s->P * s->Q > INT32_MAX)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "pooling plane too large");
    return OCLML_SUCCESS;
}

static oclml_status check_pair(oclml_ctx *ctx, const oclml_tensor *x, const pool_shape *s,
                               const oclml_tensor *y, const char *y_name, bool output_sized) {
    size_t want[4] = {x->shape[0], x->shape[1], output_sized ? s->P : s->H,
                      output_sized ? s->Q : s->W};
    oclml_status st = oclml__check_dims(ctx, y, y_name, 4, want);
    if (!st && oclml__overlap(x, y))
        st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "pooling output '%s' overlaps its input",
                         y_name);
    return st;
}

/* Launches kernel `name` of spec over n elements with the tensors' buffers and offsets first
 * (NULL tensors skipped), then the geometry and, for average pooling, include_pad. */
static oclml_status launch(oclml_ctx *ctx, const oclml__program_spec *spec,
                           const oclml_tensor *const *tensors, unsigned nt, const pool_shape *s,
                           int include_pad, bool with_pad_flag, size_t n, size_t group) {
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, spec, spec->kernels, &k);
    if (st) return st;
    cl_mem mems[3];
    cl_ulong offs[3];
    oclml__arg args[20];
    unsigned na = 0;
    for (unsigned i = 0; i < nt; i++) {
        mems[i] = tensors[i]->mem;
        offs[i] = oclml__elem_offset(tensors[i]);
        args[na++] = OCLML_ARG(mems[i]);
        args[na++] = OCLML_ARG(offs[i]);
    }
    cl_ulong planes = s->planes;
    cl_uint H = (cl_uint)s->H, W = (cl_uint)s->W, P = (cl_uint)s->P, Q = (cl_uint)s->Q, kh = s->kh,
            kw = s->kw, sh = s->sh, sw = s->sw, ph = s->ph, pw = s->pw, inc = include_pad != 0;
    oclml__arg geo[] = {OCLML_ARG(planes), OCLML_ARG(H),  OCLML_ARG(W),  OCLML_ARG(P),
                        OCLML_ARG(Q),      OCLML_ARG(kh), OCLML_ARG(kw), OCLML_ARG(sh),
                        OCLML_ARG(sw),     OCLML_ARG(ph), OCLML_ARG(pw), OCLML_ARG(inc)};
    for (unsigned i = 0; i < 11 + (with_pad_flag ? 1u : 0u); i++) args[na++] = geo[i];
    /* Groups of `group` work-items (pool.wg overrides), one a work unit: 64 runs the encoder's
     * max-pools 1-5% faster on the H100 than 256-item groups striding over the work
     * (oclml__grid_1d), 512 and 1024 slower (bench/DECISIONS.md, "Groups of 64 work-items");
     * average pooling takes the same groups, untimed. */
    long wg = oclml__tune(ctx, OCLML__TUNE_POOL_WG, 0);
    size_t global, local; /* at most 1024 groups a unit: the kernels stride over what is left */
    oclml__grid_1d_groups(ctx, k, n, wg > 0 ? (size_t)wg : group, 1024, &global, &local);
    return oclml__launch(ctx, k, args, na, 1, &global, &local, NULL);
}

/* Whether the max-pool takes the 2x2 stride-2 kernel: no padding, whole windows, rows of a
 * multiple of 4 floats (two windows a vload4). */
static bool is_2x2(const pool_shape *s) {
    return s->kh == 2 && s->kw == 2 && s->sh == 2 && s->sw == 2 && !s->ph && !s->pw &&
           s->H % 2 == 0 && s->W % 4 == 0;
}

/* The forward of either pooling: y from x (through act for the max), one work-item an output
 * (a pair, 2x2 max). */
static oclml_status pool_forward(oclml_ctx *ctx, const oclml_pool2d_params *p, oclml_activation act,
                                 const oclml_tensor *x, oclml_tensor *y, bool avg) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_act(ctx, act);
    pool_shape s;
    if (!st) st = pool_shape_of(ctx, p, x, "x", &s);
    if (!st) st = check_pair(ctx, x, &s, y, "y", true);
    if (st) return st;
    const oclml_tensor *t[2] = {x, y};
    if (avg)
        return launch(ctx, &AVG_FWD, t, 2, &s, p->count_include_pad, true, s.planes * s.P * s.Q,
                      DEFAULT_GROUP);
    /* Small planes of the plain max-pool (at most 16 outputs: the encoder's last, 8x8 layer):
     * one window a work-item in groups of 256, faster there on the H100 than two windows in
     * groups of 64 (2.03-2.07 against 1.39-1.97 TB/s); larger planes and the fused activation
     * lose so (bench/DECISIONS.md, "Planes of at most 16 outputs"). */
    if (is_2x2(&s) && act == OCLML_ACT_NONE && s.P * s.Q <= 16) {
        return launch(ctx, &SMALL_PLANES, t, 2, &s, 0, false, s.planes * s.P * s.Q, 256);
    }
    if (is_2x2(&s)) {
        const oclml__program_spec spec = max_spec("oclml_max_pool2d_2x2", act);
        return launch(ctx, &spec, t, 2, &s, 0, false, s.planes * s.P * s.Q / 2, DEFAULT_GROUP);
    }
    const oclml__program_spec spec = max_spec("oclml_max_pool2d", act);
    return launch(ctx, &spec, t, 2, &s, 0, false, s.planes * s.P * s.Q, DEFAULT_GROUP);
}

/* dx = act'(x) (dy routed to each window's first maximum of act(x)). */
static oclml_status max_backward(oclml_ctx *ctx, const oclml_pool2d_params *p, oclml_activation act,
                                 const oclml_tensor *x, const oclml_tensor *dy, oclml_tensor *dx) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_act(ctx, act);
    pool_shape s;
    if (!st) st = pool_shape_of(ctx, p, x, "x", &s);
    if (!st) st = check_pair(ctx, x, &s, dy, "dy", true);
    if (!st) st = check_pair(ctx, x, &s, dx, "dx", false);
    if (!st && oclml__overlap(dx, dy))
        st = oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "dx overlaps dy");
    if (st) return st;
    const oclml_tensor *t[3] = {x, dy, dx};
    if (is_2x2(&s)) {
        const oclml__program_spec spec = max_spec("oclml_max_pool2d_2x2_backward", act);
        return launch(ctx, &spec, t, 3, &s, 0, false, s.planes * s.P * s.Q / 2, DEFAULT_GROUP);
    }
    const oclml__program_spec spec = max_spec("oclml_max_pool2d_backward", act);
    return launch(ctx, &spec, t, 3, &s, 0, false, s.planes * s.H * s.W, DEFAULT_GROUP);
}

/* ---- 16-bit tensors: through fp32 stand-ins (stand_in.h) until pooling has 16-bit kernels ---- */

typedef struct pool_lp_call {
    const oclml_pool2d_params *p;
    oclml_activation act;
    int kind; /* 0 max, 1 max backward, 2 avg, 3 avg backward */
} pool_lp_call;

static oclml_status pool_fp32(oclml_ctx *ctx, const void *call, oclml_tensor *const *v) {
    const pool_lp_call *c = call;
    switch (c->kind) {
    case 0:
        return oclml_act_max_pool2d(ctx, c->p, c->act, v[0], v[1]);
    case 1:
        return oclml_act_max_pool2d_backward(ctx, c->p, c->act, v[0], v[1], v[2]);
    case 2:
        return oclml_avg_pool2d(ctx, c->p, v[0], v[1]);
    default:
        return oclml_avg_pool2d_backward(ctx, c->p, v[0], v[1]);
    }
}

/* The call on stand-ins where any of its n tensors (inputs first, the output last) is 16-bit;
 * *handled false (and nothing done) where all are fp32. */
static oclml_status pool_lp(oclml_ctx *ctx, const pool_lp_call *c, unsigned n,
                            const oclml_tensor *const *ts, const char *const *names,
                            bool *handled) {
    *handled = oclml__any_16bit(n, ts);
    if (!*handled) return OCLML_SUCCESS;
    return oclml__via_fp32(ctx, n, (1u << (n - 1)) - 1u, 1u << (n - 1), ts, names, pool_fp32, c);
}

static const char *const FWD_NAMES[] = {"x", "y"}, *const BWD_NAMES[] = {"x", "dy", "dx"},
                         *const AVG_BWD_NAMES[] = {"dy", "dx"};

oclml_status oclml_max_pool2d(oclml_ctx *ctx, const oclml_pool2d_params *p, const oclml_tensor *x,
                              oclml_tensor *y) {
    return oclml_act_max_pool2d(ctx, p, OCLML_ACT_NONE, x, y);
}

oclml_status oclml_max_pool2d_backward(oclml_ctx *ctx, const oclml_pool2d_params *p,
                                       const oclml_tensor *x, const oclml_tensor *dy,
                                       oclml_tensor *dx) {
    return oclml_act_max_pool2d_backward(ctx, p, OCLML_ACT_NONE, x, dy, dx);
}

oclml_status oclml_act_max_pool2d(oclml_ctx *ctx, const oclml_pool2d_params *p,
                                  oclml_activation act, const oclml_tensor *x, oclml_tensor *y) {
    oclml_pool2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_pool2d_params_init);
    const oclml_tensor *const ts[] = {x, y};
    const pool_lp_call c = {p, act, 0};
    bool lp;
    oclml_status st = pool_lp(ctx, &c, 2, ts, FWD_NAMES, &lp);
    return lp ? st : pool_forward(ctx, p, act, x, y, false);
}

oclml_status oclml_act_max_pool2d_backward(oclml_ctx *ctx, const oclml_pool2d_params *p,
                                           oclml_activation act, const oclml_tensor *x,
                                           const oclml_tensor *dy, oclml_tensor *dx) {
    oclml_pool2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_pool2d_params_init);
    const oclml_tensor *const ts[] = {x, dy, dx};
    const pool_lp_call c = {p, act, 1};
    bool lp;
    oclml_status st = pool_lp(ctx, &c, 3, ts, BWD_NAMES, &lp);
    return lp ? st : max_backward(ctx, p, act, x, dy, dx);
}

oclml_status oclml_avg_pool2d(oclml_ctx *ctx, const oclml_pool2d_params *p, const oclml_tensor *x,
                              oclml_tensor *y) {
    oclml_pool2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_pool2d_params_init);
    const oclml_tensor *const ts[] = {x, y};
    const pool_lp_call c = {p, OCLML_ACT_NONE, 2};
    bool lp;
    oclml_status st = pool_lp(ctx, &c, 2, ts, FWD_NAMES, &lp);
    return lp ? st : pool_forward(ctx, p, OCLML_ACT_NONE, x, y, true);
}

oclml_status oclml_avg_pool2d_backward(oclml_ctx *ctx, const oclml_pool2d_params *p,
                                       const oclml_tensor *dy, oclml_tensor *dx) {
    oclml_pool2d_params defaults;
    p = OCLML__OR_DEFAULTS(p, &defaults, oclml_pool2d_params_init);
    const oclml_tensor *const ts[] = {dy, dx};
    const pool_lp_call c = {p, OCLML_ACT_NONE, 3};
    bool lp;
    oclml_status st = pool_lp(ctx, &c, 2, ts, AVG_BWD_NAMES, &lp);
    if (lp) return st;
    st = oclml__check_ctx(ctx);
    pool_shape s;
    /* The geometry comes from dx (the input's shape); dy must be the output's. */
    if (!st) st = pool_shape_of(ctx, p, dx, "dx", &s);
    if (!st) st = check_pair(ctx, dx, &s, dy, "dy", true);
    const oclml_tensor *t[2] = {dy, dx};
    return st ? st
              : launch(ctx, &AVG_BWD, t, 2, &s, p->count_include_pad, true, s.planes * s.H * s.W,
                       DEFAULT_GROUP);
}

/* Prewarm: each kernel is its own small program; the fused max-pools with SiLU, the encoder's
 * activation (the others build on first use). */
void oclml__pool_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    (void)ctx;
    bool avg = strstr(op, "avg") != NULL, bwd = strstr(op, "backward") != NULL;
    if (avg) {
        oclml__warm_add(list, op, "pooling", bwd ? AVG_BWD : AVG_FWD);
        return;
    }
    oclml_activation act = strstr(op, "act_") ? OCLML_ACT_SILU : OCLML_ACT_NONE;
    oclml__warm_add(list, op, "pooling",
                    max_spec(bwd ? "oclml_max_pool2d_backward" : "oclml_max_pool2d", act));
    oclml__warm_add(list, op, "2x2, stride 2",
                    max_spec(bwd ? "oclml_max_pool2d_2x2_backward" : "oclml_max_pool2d_2x2", act));
    if (!bwd && act == OCLML_ACT_NONE) oclml__warm_add(list, op, "2x2, small planes", SMALL_PLANES);
}
