/* What an op leaves behind when a backend call fails part way (the header's partial-results
 * paragraph): the test build's fault hook (oclml__test_fail_launch_after, core.h) fails the op's
 * first launch, then its second, and so on until it succeeds. After each failure every output
 * is read back: untouched (its poison or initial values, bit for bit), written (the bits of a
 * successful run), or in part (anything else). The outputs are listed in the order the header
 * names them (a stage each); a failure must leave every stage before the furthest one it reached
 * written, that one written or, where the header says "in part", partly written, and the rest
 * untouched; each intermediate state the header names must occur. Ops the header does not list
 * have one stage that a failure leaves untouched. Links the internal library for the hook. */
#include "testutil.h"

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OUTS 16

typedef enum { UNTOUCHED, WRITTEN, IN_PART } out_state;
static const char *const STATE_NAMES[] = {"untouched", "written", "in part"};

typedef struct out_spec {
    const char *name;
    oclml_tensor *t;
    int stage;         /* the header's order: lower stages are written first */
    bool in_part;      /* the header lets a failure leave it partly written */
    const float *init; /* its values before each run; NULL: NaN (poisoned) */
    size_t n;
    float *ref, *got;
} out_spec;

typedef struct fault_case {
    const char *op;
    oclml_status (*run)(const void *arg);
    void (*reset)(const void *arg); /* NULL, or restores state other than the outputs */
    const void *arg;
    out_spec out[MAX_OUTS];
    int n_out;
} fault_case;

static void add_out(fault_case *c, const char *name, oclml_tensor *t, int stage, bool in_part,
                    const float *init) {
    ck_assert_int_lt(c->n_out, MAX_OUTS);
    out_spec *o = &c->out[c->n_out++];
    *o = (out_spec){name, t, stage, in_part, init, 0, NULL, NULL};
    ASSERT_OK(oclml_tensor_numel(t, &o->n));
    o->ref = test_floats(o->n);
    o->got = test_floats(o->n);
}

static void free_case(fault_case *c) {
    for (int i = 0; i < c->n_out; i++) {
        free(c->out[i].ref);
        free(c->out[i].got);
    }
}

/* Before a run: every output at its initial values (NaN unless given). */
static void prepare(const fault_case *c) {
    for (int i = 0; i < c->n_out; i++) {
        const out_spec *o = &c->out[i];
        float *v = test_floats(o->n);
        if (o->init) memcpy(v, o->init, o->n * sizeof *v);
        ASSERT_OK(oclml_tensor_write(o->t, v, o->n));
        free(v);
    }
    if (c->reset) c->reset(c->arg);
}

static bool same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }

/* Initial value i of o: NaN poison compares as any NaN (kernels never write NaN here: the
 * reference has none). */
static bool is_initial(const out_spec *o, size_t i) {
    return o->init ? same_bits(o->got[i], o->init[i]) : isnan(o->got[i]);
}

static out_state state_of(out_spec *o) {
    test_read(o->t, o->got, o->n);
    bool initial = true, written = true;
    for (size_t i = 0; i < o->n; i++) {
        initial = initial && is_initial(o, i);
        written = written && same_bits(o->got[i], o->ref[i]);
    }
    return written ? WRITTEN : initial ? UNTOUCHED : IN_PART;
}

/* Fails launch k (0 first) of the case's op; the op's status. */
static oclml_status run_failing(const fault_case *c, int k) {
    prepare(c);
    oclml__test_fail_launch_after(T, k);
    oclml_status st = c->run(c->arg);
    oclml__test_fail_launch_after(T, -1);
    return st;
}

/* Runs the case with each launch failing in turn (see the top of the file); returns how many
 * launches the op makes, at least min_launches. */
static int check_faults(fault_case *c, int min_launches) {
    int stages = 0;
    for (int i = 0; i < c->n_out; i++)
        if (c->out[i].stage + 1 > stages) stages = c->out[i].stage + 1;
    /* The successful run's bits, twice the same: what "written" compares against. */
    for (int pass = 0; pass < 2; pass++) {
        prepare(c);
        ASSERT_OK(c->run(c->arg));
        for (int i = 0; i < c->n_out; i++) {
            out_spec *o = &c->out[i];
            if (pass == 1) {
                ck_assert_msg(state_of(o) == WRITTEN, "%s: %s differs between two runs", c->op,
                              o->name);
                continue;
            }
            test_read(o->t, o->ref, o->n);
            bool differs = false;
            for (size_t j = 0; j < o->n; j++) {
                ck_assert_msg(o->init || !isnan(o->ref[j]), "%s: %s[%zu] is NaN", c->op, o->name,
                              j);
                differs = differs || !o->init || !same_bits(o->ref[j], o->init[j]);
            }
            ck_assert_msg(differs, "%s: %s is its initial value after a run", c->op, o->name);
        }
    }
    bool complete[MAX_OUTS] = {false}; /* stage s seen written with everything after untouched */
    int reached_before = -1, k;
    for (k = 0;; k++) {
        ck_assert_msg(k < 500, "%s: still failing after %d launches", c->op, k);
        oclml_status st = run_failing(c, k);
        if (st == OCLML_SUCCESS) {
            for (int i = 0; i < c->n_out; i++)
                ck_assert_msg(state_of(&c->out[i]) == WRITTEN, "%s: %s after the armed run", c->op,
                              c->out[i].name);
            break;
        }
        ck_assert_msg(st == OCLML_ERR_OPENCL, "%s, launch %d failing: %s", c->op, k,
                      oclml_status_name(st));
        ck_assert_msg(strstr(oclml_ctx_last_error(T), "injected"), "%s, launch %d: %s", c->op, k,
                      oclml_ctx_last_error(T));
        out_state s[MAX_OUTS];
        int reached = -1;
        bool all_written = true;
        char seen[512] = "";
        for (int i = 0; i < c->n_out; i++) {
            s[i] = state_of(&c->out[i]);
            if (s[i] != UNTOUCHED && c->out[i].stage > reached) reached = c->out[i].stage;
            all_written = all_written && s[i] == WRITTEN;
            snprintf(seen + strlen(seen), sizeof seen - strlen(seen), " %s %s", c->out[i].name,
                     STATE_NAMES[s[i]]);
        }
        ck_assert_msg(!all_written, "%s, launch %d failing: every output written", c->op, k);
        ck_assert_msg(k > 0 || reached < 0, "%s: the first launch failing left%s", c->op, seen);
        ck_assert_msg(reached >= reached_before, "%s, launch %d: went back a stage:%s", c->op, k,
                      seen);
        bool reached_whole = true;
        for (int i = 0; i < c->n_out; i++) {
            const out_spec *o = &c->out[i];
            if (o->stage < reached)
                ck_assert_msg(s[i] == WRITTEN, "%s, launch %d failing:%s (%s is before)", c->op, k,
                              seen, o->name);
            if (o->stage == reached) {
                ck_assert_msg(s[i] == WRITTEN || o->in_part,
                              "%s, launch %d failing:%s (%s, of the furthest stage reached, may "
                              "only be written)",
                              c->op, k, seen, o->name);
                reached_whole = reached_whole && s[i] == WRITTEN;
            }
        }
        if (reached >= 0 && reached_whole) complete[reached] = true;
        reached_before = reached;
    }
    for (int st = 0; st + 1 < stages; st++)
        ck_assert_msg(complete[st], "%s: no failure left stage %d written and the rest not", c->op,
                      st);
    ck_assert_msg(k >= min_launches, "%s: %d launches, expected at least %d", c->op, k,
                  min_launches);
    printf("%s: %d launches, %d stage%s\n", c->op, k, stages, stages > 1 ? "s" : "");
    return k;
}

/* A tensor of uniform values in [lo, hi). */
static oclml_tensor *rand_tensor(int nd, const size_t *shape, float lo, float hi) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    float *v = test_floats(n);
    test_random(v, n, lo, hi);
    oclml_tensor *t = test_tensor_from(nd, shape, v);
    free(v);
    return t;
}

static void destroy_all(oclml_tensor **t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i]) oclml_tensor_destroy(t[i]);
}

/* ---- linear layers ---- */

typedef struct linear_args {
    oclml_activation act;
    oclml_tensor *x, *w, *b, *saved, *dy, *dx, *dw, *db, *y, *pre;
    const oclml_dropout_params *drop; /* NULL: the plain layer; else its _dropout twin */
} linear_args;

static oclml_status run_linear_backward(const void *p) {
    const linear_args *a = p;
    if (a->drop)
        return oclml_linear_dropout_backward(T, a->act, a->drop, a->x, a->w, a->saved, a->dy, a->dx,
                                             a->dw, a->db, 0);
    return oclml_linear_backward(T, a->act, a->x, a->w, a->saved, a->dy, a->dx, a->dw, a->db, 0);
}

static oclml_status run_linear(const void *p) {
    const linear_args *a = p;
    if (a->drop) return oclml_linear_dropout(T, a->act, a->drop, a->x, a->w, a->b, a->y, a->pre);
    return oclml_linear(T, a->act, a->x, a->w, a->b, a->y, a->pre);
}

/* Dropout 0.5 for the layers' _dropout twins. */
static oclml_dropout_params half_dropout(void) { return test_dropout_params(0.5f, 11, 0); }

/* linear_backward: db (the dZ pass's sums), then dx, then dw, each written whole; with db alone
 * (the dZ pass into scratch, then its sums) nothing. With and without an activation, on the
 * default products and on liboclml's own (gemm.own=1); loop 2: linear_dropout_backward. */
START_TEST(linear_backward_outputs_in_order) {
    if (_i == 1) test_retune("gemm.own=1");
    const oclml_dropout_params drop = half_dropout();
    const size_t xs[2] = {5, 6}, ws[2] = {7, 6}, ys[2] = {5, 7}, bs[1] = {7};
    for (int act = 0; act < 2; act++) {
        linear_args a = {.drop = _i == 2 ? &drop : NULL,
                         .act = act ? OCLML_ACT_GELU_ERF : OCLML_ACT_NONE,
                         .x = rand_tensor(2, xs, -1, 1),
                         .w = rand_tensor(2, ws, -1, 1),
                         .saved = rand_tensor(2, ys, -2, 2),
                         .dy = rand_tensor(2, ys, -1, 1),
                         .dx = test_tensor(2, xs),
                         .dw = test_tensor(2, ws),
                         .db = test_tensor(1, bs)};
        oclml_tensor *all[] = {a.x, a.w, a.saved, a.dy, a.dx, a.dw, a.db};
        fault_case c = {
            .op = _i == 2 ? (act ? "linear_dropout_backward gelu" : "linear_dropout_backward")
                  : act   ? "linear_backward gelu"
                          : "linear_backward",
            .run = run_linear_backward,
            .arg = &a};
        add_out(&c, "db", a.db, 0, false, NULL);
        add_out(&c, "dx", a.dx, 1, false, NULL);
        add_out(&c, "dw", a.dw, 2, false, NULL);
        check_faults(&c, 4);
        free_case(&c);
        a.dx = a.dw = NULL;
        fault_case only = {.op = "linear_backward db only", .run = run_linear_backward, .arg = &a};
        add_out(&only, "db", a.db, 0, false, NULL);
        check_faults(&only, 2);
        free_case(&only);
        destroy_all(all, 7);
    }
}
END_TEST

/* linear where the product runs before a separate epilogue kernel (CLBlast's product, asked for
 * with gemm.own=0): a failing epilogue leaves y holding x W^T, without the bias and the
 * activation, and pre untouched. Loop 1: linear_dropout, whose epilogue drops too. */
START_TEST(linear_epilogue_after_product) {
    test_retune("gemm.own=0");
    const oclml_dropout_params drop = half_dropout();
    const size_t xs[2] = {5, 6}, ws[2] = {7, 6}, ys[2] = {5, 7}, bs[1] = {7};
    char plan[200];
    ASSERT_OK(oclml_gemm_plan(T, OCLML_NO_TRANS, OCLML_TRANS, 5, 7, 6, 1, plan, sizeof plan));
    if (!strstr(plan, "CLBlast")) {
        printf("linear: the product runs with its epilogue here (%s): nothing to check\n", plan);
        return;
    }
    linear_args a = {.act = OCLML_ACT_GELU_ERF,
                     .x = rand_tensor(2, xs, -1, 1),
                     .w = rand_tensor(2, ws, -1, 1),
                     .b = rand_tensor(1, bs, -1, 1),
                     .y = test_tensor(2, ys),
                     .pre = test_tensor(2, ys),
                     .drop = _i ? &drop : NULL};
    fault_case c = {.op = _i ? "linear_dropout (product, then epilogue)"
                             : "linear (product, then epilogue)",
                    .run = run_linear,
                    .arg = &a};
    add_out(&c, "y", a.y, 0, true, NULL);
    add_out(&c, "pre", a.pre, 0, true, NULL);
    const int launches = check_faults(&c, 2);
    /* The epilogue failing: y is the product alone, bit for bit. */
    oclml_tensor *product = test_tensor(2, ys);
    ASSERT_OK(oclml_gemm(T, OCLML_NO_TRANS, OCLML_TRANS, 1.0f, a.x, a.w, 0.0f, product));
    float *want = test_floats(35);
    test_read(product, want, 35);
    ASSERT_STATUS(run_failing(&c, launches - 1), OCLML_ERR_OPENCL);
    ck_assert_int_eq(state_of(&c.out[1]), UNTOUCHED);
    state_of(&c.out[0]);
    for (size_t i = 0; i < 35; i++)
        ck_assert_msg(same_bits(c.out[0].got[i], want[i]), "y[%zu] = %g, the product %g", i,
                      (double)c.out[0].got[i], (double)want[i]);
    free(want);
    free_case(&c);
    oclml_tensor *all[] = {a.x, a.w, a.b, a.y, a.pre, product};
    destroy_all(all, 6);
}
END_TEST

/* gemm whose last wave of blocks runs as a product of its own (the tensor-core kernel, emulated
 * here, set up as check_gemm's last-wave test): a failure there leaves the blocks before written,
 * c in part. */
typedef struct gemm_args {
    oclml_tensor *a, *b, *c;
} gemm_args;

static oclml_status run_gemm(const void *p) {
    const gemm_args *g = p;
    return oclml_gemm(T, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, g->a, g->b, 0.0f, g->c);
}

START_TEST(gemm_last_wave_in_part) {
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    const size_t units = info.compute_units, rows = units == 2 ? 3 : 2;
    const size_t m = 32 * rows - 5, n = 32 * (units + 1) - 3, k = 117;
    test_retune("gemm.own=1 gemm.mma=2 gemm.mma_tile=32:32:8:2:2 gemm.wave_warps=4 "
                "gemm.tail_splits=3");
    char plan[200];
    ASSERT_OK(oclml_gemm_plan(T, OCLML_NO_TRANS, OCLML_NO_TRANS, m, n, k, 1, plan, sizeof plan));
    if (!strstr(plan, "last wave")) {
        printf("gemm: no last-wave split on this device (%s): nothing to check\n", plan);
        return;
    }
    const size_t as[2] = {m, k}, bs[2] = {k, n}, cs[2] = {m, n};
    gemm_args g = {rand_tensor(2, as, -1, 1), rand_tensor(2, bs, -1, 1), test_tensor(2, cs)};
    fault_case c = {.op = "gemm (last wave split)", .run = run_gemm, .arg = &g};
    add_out(&c, "c", g.c, 0, true, NULL);
    check_faults(&c, 3);
    free_case(&c);
    oclml_tensor *all[] = {g.a, g.b, g.c};
    destroy_all(all, 3);
}
END_TEST

/* ---- convolutions: several image chunks (conv.chunk=1) and two groups ---- */

typedef struct conv_args {
    oclml_conv2d_params p;
    oclml_tensor *x, *w, *b, *dy, *y, *dx, *dw, *db;
    bool transposed;
} conv_args;

static oclml_status run_conv(const void *p) {
    const conv_args *a = p;
    return a->transposed ? oclml_conv_transpose2d(T, &a->p, a->x, a->w, a->b, a->y)
                         : oclml_conv2d(T, &a->p, a->x, a->w, a->b, a->y);
}

static oclml_status run_conv_backward(const void *p) {
    const conv_args *a = p;
    return a->transposed
               ? oclml_conv_transpose2d_backward(T, &a->p, a->x, a->w, a->dy, a->dx, a->dw, a->db,
                                                 0)
               : oclml_conv2d_backward(T, &a->p, a->x, a->w, a->dy, a->dx, a->dw, a->db, 0);
}

/* conv2d and conv_transpose2d: y in part; their backwards: dx, then dw, each possibly in part,
 * then db. x [2 x 4 x 5 x 5], 3x3 taps, padding 1, two groups: the convolution's output is x's
 * size, and so is the transposed one's. */
START_TEST(conv_outputs_in_order) {
    const bool transposed = _i;
    test_retune("conv.chunk=1");
    const size_t xs[4] = {2, 4, 5, 5}, ws[4] = {4, 2, 3, 3}, bs[1] = {4};
    conv_args a = {.transposed = transposed};
    oclml_conv2d_params_init(&a.p);
    a.p.pad_before[0] = a.p.pad_before[1] = a.p.pad_after[0] = a.p.pad_after[1] = 1;
    a.p.groups = 2;
    a.x = rand_tensor(4, xs, -1, 1);
    a.w = rand_tensor(4, ws, -1, 1);
    a.b = rand_tensor(1, bs, -1, 1);
    a.dy = rand_tensor(4, xs, -1, 1);
    a.y = test_tensor(4, xs);
    a.dx = test_tensor(4, xs);
    a.dw = test_tensor(4, ws);
    a.db = test_tensor(1, bs);
    fault_case f = {.op = transposed ? "conv_transpose2d" : "conv2d", .run = run_conv, .arg = &a};
    add_out(&f, "y", a.y, 0, true, NULL);
    check_faults(&f, 2);
    free_case(&f);
    fault_case b = {.op = transposed ? "conv_transpose2d_backward" : "conv2d_backward",
                    .run = run_conv_backward,
                    .arg = &a};
    add_out(&b, "dx", a.dx, 0, true, NULL);
    add_out(&b, "dw", a.dw, 1, true, NULL);
    add_out(&b, "db", a.db, 2, false, NULL);
    check_faults(&b, 3);
    free_case(&b);
    oclml_tensor *all[] = {a.x, a.w, a.b, a.dy, a.y, a.dx, a.dw, a.db};
    destroy_all(all, 8);
}
END_TEST

/* ---- attention ---- */

typedef struct attention_args {
    oclml_attention_params p;
    oclml_tensor *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv, *dmask;
} attention_args;

static oclml_status run_attention(const void *p) {
    const attention_args *a = p;
    return oclml_attention(T, &a->p, a->q, a->k, a->v, a->o, a->lse);
}

static oclml_status run_attention_backward(const void *p) {
    const attention_args *a = p;
    return oclml_attention_backward(T, &a->p, a->q, a->k, a->v, a->o, a->lse, a->dout, a->dq, a->dk,
                                    a->dv, a->dmask);
}

/* attention_backward: dk and dv, then dq, then dmask. */
START_TEST(attention_backward_outputs_in_order) {
    const size_t qs[4] = {1, 2, 8, 8}, ls[3] = {1, 2, 8}, ms[2] = {8, 8};
    attention_args a;
    oclml_attention_params_init(&a.p);
    a.q = rand_tensor(4, qs, -1, 1);
    a.k = rand_tensor(4, qs, -1, 1);
    a.v = rand_tensor(4, qs, -1, 1);
    a.p.mask = rand_tensor(2, ms, -1, 1);
    a.o = test_tensor(4, qs);
    a.lse = test_tensor(3, ls);
    ASSERT_OK(oclml_attention(T, &a.p, a.q, a.k, a.v, a.o, a.lse));
    a.dout = rand_tensor(4, qs, -1, 1);
    a.dq = test_tensor(4, qs);
    a.dk = test_tensor(4, qs);
    a.dv = test_tensor(4, qs);
    a.dmask = test_tensor(2, ms);
    fault_case c = {.op = "attention_backward", .run = run_attention_backward, .arg = &a};
    add_out(&c, "dk", a.dk, 0, false, NULL);
    add_out(&c, "dv", a.dv, 0, false, NULL);
    add_out(&c, "dq", a.dq, 1, false, NULL);
    add_out(&c, "dmask", a.dmask, 2, false, NULL);
    check_faults(&c, 4);
    free_case(&c);
    oclml_tensor *all[] = {a.q,  a.k,  a.v,    (oclml_tensor *)a.p.mask, a.o, a.lse, a.dout, a.dq,
                           a.dk, a.dv, a.dmask};
    destroy_all(all, 11);
}
END_TEST

/* The forward with its keys split (partials into scratch, then the merge): never in part. */
START_TEST(attention_split_keys_whole) {
    test_retune("attention.splits=2");
    const size_t qs[4] = {1, 1, 4, 8}, ks[4] = {1, 1, 256, 8}, ls[3] = {1, 1, 4};
    attention_args a;
    oclml_attention_params_init(&a.p);
    a.q = rand_tensor(4, qs, -1, 1);
    a.k = rand_tensor(4, ks, -1, 1);
    a.v = rand_tensor(4, ks, -1, 1);
    a.o = test_tensor(4, qs);
    a.lse = test_tensor(3, ls);
    fault_case c = {.op = "attention (split keys)", .run = run_attention, .arg = &a};
    add_out(&c, "o", a.o, 0, false, NULL);
    add_out(&c, "lse", a.lse, 0, false, NULL);
    check_faults(&c, 2);
    free_case(&c);
    oclml_tensor *all[] = {a.q, a.k, a.v, a.o, a.lse};
    destroy_all(all, 5);
}
END_TEST

/* ---- normalisation ---- */

typedef struct norm_args {
    bool rms;
    oclml_tensor *x, *gamma, *mean, *rstd, *dy, *dx, *dgamma, *dbeta;
} norm_args;

static oclml_status run_norm_backward(const void *p) {
    const norm_args *a = p;
    return a->rms ? oclml_rmsnorm_backward(T, a->x, a->gamma, a->rstd, a->dy, a->dx, a->dgamma)
                  : oclml_layernorm_backward(T, a->x, a->gamma, a->mean, a->rstd, a->dy, a->dx,
                                             a->dgamma, a->dbeta);
}

/* layernorm_backward and rmsnorm_backward: dx, then dgamma and dbeta. */
START_TEST(norm_backward_outputs_in_order) {
    const bool rms = _i;
    const size_t xs[2] = {6, 40}, cs[1] = {40}, rs[1] = {6};
    norm_args a = {.rms = rms,
                   .x = rand_tensor(2, xs, -1, 1),
                   .gamma = rand_tensor(1, cs, 0.5f, 1.5f),
                   .mean = test_tensor(1, rs),
                   .rstd = test_tensor(1, rs),
                   .dy = rand_tensor(2, xs, -1, 1),
                   .dx = test_tensor(2, xs),
                   .dgamma = test_tensor(1, cs),
                   .dbeta = rms ? NULL : test_tensor(1, cs)};
    oclml_tensor *y = test_tensor(2, xs);
    if (rms)
        ASSERT_OK(oclml_rmsnorm(T, a.x, a.gamma, 1e-5f, y, a.rstd));
    else
        ASSERT_OK(oclml_layernorm(T, a.x, a.gamma, NULL, 1e-5f, y, a.mean, a.rstd));
    fault_case c = {
        .op = rms ? "rmsnorm_backward" : "layernorm_backward", .run = run_norm_backward, .arg = &a};
    add_out(&c, "dx", a.dx, 0, false, NULL);
    add_out(&c, "dgamma", a.dgamma, 1, false, NULL);
    if (!rms) add_out(&c, "dbeta", a.dbeta, 1, false, NULL);
    check_faults(&c, 2);
    free_case(&c);
    oclml_tensor *all[] = {a.x, a.gamma, a.mean, a.rstd, a.dy, a.dx, a.dgamma, a.dbeta, y};
    destroy_all(all, 9);
}
END_TEST

/* ---- losses with a reduced loss: the gradients, then the loss ---- */

typedef struct loss_args {
    int kind; /* 0 mse, 1 huber, 2 bce, 3 cross-entropy, 4 KL */
    oclml_loss_params p;
    oclml_tensor *x, *t, *loss, *dx, *dt;
} loss_args;

static oclml_status run_loss(const void *p) {
    const loss_args *a = p;
    switch (a->kind) {
    case 0:
        return oclml_mse_loss(T, &a->p, a->x, a->t, NULL, a->loss, a->dx);
    case 1:
        return oclml_huber_loss(T, &a->p, a->x, a->t, NULL, a->loss, a->dx);
    case 2:
        return oclml_bce_with_logits(T, &a->p, a->x, a->t, NULL, a->loss, a->dx);
    case 3:
        return oclml_cross_entropy(T, &a->p, a->x, a->t, NULL, a->loss, a->dx);
    default:
        return oclml_kl_div_logits(T, &a->p, a->x, a->t, NULL, a->loss, a->dx, a->dt);
    }
}

START_TEST(loss_gradients_before_loss) {
    static const char *const names[] = {"mse_loss", "huber_loss", "bce_with_logits",
                                        "cross_entropy", "kl_div_logits"};
    const size_t xs[2] = {6, 10}, rs[1] = {6}, one[1] = {1};
    loss_args a = {.kind = _i};
    oclml_loss_params_init(&a.p);
    a.p.delta = 0.5f;
    a.x = rand_tensor(2, xs, -2, 2);
    if (a.kind == 3) {
        float cls[6] = {0, 9, 3, 5, 5, 1};
        a.t = test_tensor_from(1, rs, cls);
    } else {
        a.t = rand_tensor(2, xs, a.kind == 2 ? 0 : -2, a.kind == 2 ? 1 : 2);
    }
    a.loss = test_tensor(1, one);
    a.dx = test_tensor(2, xs);
    a.dt = a.kind == 4 ? test_tensor(2, xs) : NULL;
    fault_case c = {.op = names[a.kind], .run = run_loss, .arg = &a};
    add_out(&c, a.kind >= 3 ? "dlogits" : "dinput", a.dx, 0, false, NULL);
    if (a.dt) add_out(&c, "dq", a.dt, 0, false, NULL);
    add_out(&c, "loss", a.loss, 1, false, NULL);
    check_faults(&c, 2);
    free_case(&c);
    oclml_tensor *all[] = {a.x, a.t, a.loss, a.dx, a.dt};
    destroy_all(all, 5);
}
END_TEST

/* ---- layout: more than eight parts take a launch per eight ---- */

typedef struct parts_args {
    oclml_tensor *whole, *parts[9];
} parts_args;

static oclml_status run_concat(const void *p) {
    const parts_args *a = p;
    return oclml_concat(T, (const oclml_tensor *const *)a->parts, 9, 1, a->whole);
}

static oclml_status run_split(const void *p) {
    const parts_args *a = p;
    return oclml_split(T, a->whole, 1, a->parts, 9);
}

/* concat of nine: y in part; split into nine: the first eight, then the ninth. */
START_TEST(concat_split_eight_a_launch) {
    const size_t ps[2] = {3, 2}, ws[2] = {3, 18};
    parts_args a;
    a.whole = test_tensor(2, ws);
    for (int i = 0; i < 9; i++) a.parts[i] = rand_tensor(2, ps, -1, 1);
    fault_case c = {.op = "concat of 9", .run = run_concat, .arg = &a};
    add_out(&c, "y", a.whole, 0, true, NULL);
    check_faults(&c, 2);
    free_case(&c);
    oclml_tensor *all[10];
    for (int i = 0; i < 9; i++) {
        oclml_tensor_destroy(a.parts[i]);
        a.parts[i] = test_tensor(2, ps);
        all[i] = a.parts[i];
    }
    oclml_tensor_destroy(a.whole);
    a.whole = rand_tensor(2, ws, -1, 1);
    all[9] = a.whole;
    fault_case s = {.op = "split into 9", .run = run_split, .arg = &a};
    static const char *const names[] = {"ys[0]", "ys[1]", "ys[2]", "ys[3]", "ys[4]",
                                        "ys[5]", "ys[6]", "ys[7]", "ys[8]"};
    for (int i = 0; i < 9; i++) add_out(&s, names[i], a.parts[i], i / 8, false, NULL);
    check_faults(&s, 2);
    free_case(&s);
    destroy_all(all, 10);
}
END_TEST

/* ---- reductions through scratch: never in part ---- */

typedef struct reduce_args {
    oclml_tensor *x, *y;
} reduce_args;

static oclml_status run_reduce_all(const void *p) {
    const reduce_args *a = p;
    return oclml_reduce_all(T, OCLML_REDUCE_SUM, a->x, a->y);
}

START_TEST(reduce_all_whole) {
    const size_t xs[1] = {1000}, one[1] = {1};
    reduce_args a = {rand_tensor(1, xs, -1, 1), test_tensor(1, one)};
    fault_case c = {.op = "reduce_all", .run = run_reduce_all, .arg = &a};
    add_out(&c, "y", a.y, 0, false, NULL);
    check_faults(&c, 2);
    free_case(&c);
    oclml_tensor *all[] = {a.x, a.y};
    destroy_all(all, 2);
}
END_TEST

/* ---- embedding_backward: the sort in scratch, one launch writes dtable ---- */

typedef struct embedding_args {
    oclml_tensor *ids, *dy, *dtable;
    int accumulate;
} embedding_args;

static oclml_status run_embedding_backward(const void *p) {
    const embedding_args *a = p;
    return oclml_embedding_backward(T, a->ids, a->dy, a->dtable, a->accumulate);
}

/* Six launches, dtable untouched by any failing one: poisoned when overwriting, its random
 * start (no addition begun) when accumulating. */
START_TEST(embedding_backward_whole) {
    const size_t N = 40, V = 6, D = 8, is[1] = {N}, ys[2] = {N, D}, ts[2] = {V, D};
    float ids[40], start[48];
    for (size_t n = 0; n < N; n++) ids[n] = (float)((n * 7) % V);
    test_random(start, V * D, -1, 1);
    embedding_args a = {test_tensor_from(1, is, ids), rand_tensor(2, ys, -1, 1), test_tensor(2, ts),
                        0};
    for (a.accumulate = 0; a.accumulate < 2; a.accumulate++) {
        fault_case c = {.op = a.accumulate ? "embedding_backward accumulate" : "embedding_backward",
                        .run = run_embedding_backward,
                        .arg = &a};
        add_out(&c, "dtable", a.dtable, 0, false, a.accumulate ? start : NULL);
        check_faults(&c, 6);
        free_case(&c);
    }
    oclml_tensor *all[] = {a.ids, a.dy, a.dtable};
    destroy_all(all, 3);
}
END_TEST

/* ---- GRU ---- */

typedef struct gru_args {
    oclml_gru_variant variant;
    oclml_tensor *x, *h, *w_ih, *w_hh, *b_ih, *b_hh, *h_new, *xs, *hs, *dh_new;
    oclml_tensor *dx, *dh, *dw_ih, *dw_hh, *db_ih, *db_hh;
} gru_args;

static oclml_status run_gru_step(const void *p) {
    const gru_args *a = p;
    return oclml_gru_step(T, a->variant, a->x, a->h, a->w_ih, a->w_hh, a->b_ih, a->b_hh, a->h_new);
}

static oclml_status run_gru_sequence(const void *p) {
    const gru_args *a = p;
    return oclml_gru_sequence(T, a->variant, a->xs, a->h, a->w_ih, a->w_hh, a->b_ih, a->b_hh,
                              a->hs);
}

static oclml_status run_gru_backward(const void *p) {
    const gru_args *a = p;
    return oclml_gru_step_backward(T, a->variant, a->x, a->h, a->w_ih, a->w_hh, a->b_ih, a->b_hh,
                                   a->dh_new, a->dx, a->dh, a->dw_ih, a->dw_hh, a->db_ih, a->db_hh);
}

/* gru_step (CHO's r h into scratch first): never in part; gru_sequence: the steps before the
 * failing one; gru_step_backward: dx, dh (its copy before its product: in part), dw_ih, dw_hh
 * (CHO's n rows after the rest: in part), db_ih, db_hh (likewise). */
START_TEST(gru_outputs_in_order) {
    const oclml_gru_variant v = _i ? OCLML_GRU_CHO : OCLML_GRU_TORCH;
    const bool cho = v == OCLML_GRU_CHO;
    const size_t B = 3, I = 5, D = 4, xs[2] = {B, I}, hs[2] = {B, D}, wi[2] = {3 * D, I},
                 wh[2] = {3 * D, D}, bs[1] = {3 * D}, sx[3] = {3, B, I}, sh[3] = {3, B, D};
    gru_args a = {.variant = v,
                  .x = rand_tensor(2, xs, -1, 1),
                  .h = rand_tensor(2, hs, -1, 1),
                  .w_ih = rand_tensor(2, wi, -0.5f, 0.5f),
                  .w_hh = rand_tensor(2, wh, -0.5f, 0.5f),
                  .b_ih = rand_tensor(1, bs, -0.5f, 0.5f),
                  .b_hh = rand_tensor(1, bs, -0.5f, 0.5f),
                  .h_new = test_tensor(2, hs),
                  .xs = rand_tensor(3, sx, -1, 1),
                  .hs = test_tensor(3, sh),
                  .dh_new = rand_tensor(2, hs, -1, 1),
                  .dx = test_tensor(2, xs),
                  .dh = test_tensor(2, hs),
                  .dw_ih = test_tensor(2, wi),
                  .dw_hh = test_tensor(2, wh),
                  .db_ih = test_tensor(1, bs),
                  .db_hh = test_tensor(1, bs)};
    fault_case step = {.op = cho ? "gru_step cho" : "gru_step", .run = run_gru_step, .arg = &a};
    add_out(&step, "h_new", a.h_new, 0, false, NULL);
    check_faults(&step, cho ? 2 : 1);
    free_case(&step);
    fault_case seq = {
        .op = cho ? "gru_sequence cho" : "gru_sequence", .run = run_gru_sequence, .arg = &a};
    add_out(&seq, "hs", a.hs, 0, true, NULL);
    check_faults(&seq, 3);
    free_case(&seq);
    fault_case bwd = {.op = cho ? "gru_step_backward cho" : "gru_step_backward",
                      .run = run_gru_backward,
                      .arg = &a};
    add_out(&bwd, "dx", a.dx, 0, false, NULL);
    add_out(&bwd, "dh", a.dh, 1, true, NULL);
    add_out(&bwd, "dw_ih", a.dw_ih, 2, false, NULL);
    add_out(&bwd, "dw_hh", a.dw_hh, 3, cho, NULL);
    add_out(&bwd, "db_ih", a.db_ih, 4, false, NULL);
    add_out(&bwd, "db_hh", a.db_hh, 5, cho, NULL);
    check_faults(&bwd, 8);
    free_case(&bwd);
    oclml_tensor *all[] = {a.x,  a.h,      a.w_ih, a.w_hh, a.b_ih,  a.b_hh,  a.h_new, a.xs,
                           a.hs, a.dh_new, a.dx,   a.dh,   a.dw_ih, a.dw_hh, a.db_ih, a.db_hh};
    destroy_all(all, 16);
}
END_TEST

/* ---- RSSM rollout: the per-step and final-state outputs, then the summary's ---- */

typedef struct rssm_args {
    oclml_rssm_params c;
    oclml_rssm_weights w;
    oclml_rssm_state s;
    oclml_rssm_outputs o;
} rssm_args;

static oclml_status run_rssm(const void *p) {
    const rssm_args *a = p;
    return oclml_rssm_rollout(T, &a->c, &a->w, &a->s, &a->o);
}

START_TEST(rssm_steps_before_summary) {
    const size_t E = 2, D = 8, G = 2, C = 2, S = G * C, F = 4, n = 3;
    rssm_args a;
    oclml_rssm_params_init(&a.c);
    a.c.steps = n;
    a.c.groups = G;
    a.c.classes = C;
    a.c.feedback = 2;
    const size_t wi[3] = {E, 3 * D, F + S}, wh[3] = {E, 3 * D, D}, b3[2] = {E, 3 * D},
                 wp[3] = {E, S, D}, bp[2] = {E, S}, wy[2] = {E, D + S}, e1[1] = {E}, ed[2] = {E, D},
                 es[2] = {E, S}, ef[2] = {E, F}, en[2] = {E, n}, t1[1] = {n};
    a.w = (oclml_rssm_weights){rand_tensor(3, wi, -0.3f, 0.3f), rand_tensor(3, wh, -0.3f, 0.3f),
                               rand_tensor(2, b3, -0.3f, 0.3f), rand_tensor(2, b3, -0.3f, 0.3f),
                               rand_tensor(3, wp, -0.5f, 0.5f), rand_tensor(2, bp, -0.5f, 0.5f),
                               rand_tensor(2, wy, -0.3f, 0.3f), rand_tensor(1, e1, -0.5f, 0.5f)};
    float z0[8];
    for (size_t i = 0; i < E * S; i++) z0[i] = 1.0f / (float)C;
    a.s = (oclml_rssm_state){rand_tensor(2, ed, -1, 1), test_tensor_from(2, es, z0),
                             rand_tensor(2, ef, -1, 1), rand_tensor(1, e1, -1, 1)};
    a.o = (oclml_rssm_outputs){test_tensor(2, en), test_tensor(2, en), test_tensor(2, en),
                               test_tensor(2, ed), test_tensor(2, es), test_tensor(2, ef),
                               test_tensor(1, t1), test_tensor(1, t1), test_tensor(2, en),
                               test_tensor(1, e1), test_tensor(1, e1), test_tensor(1, e1)};
    fault_case c = {.op = "rssm_rollout", .run = run_rssm, .arg = &a};
    oclml_tensor *outs[12] = {a.o.y,       a.o.entropy,  a.o.hnorm,      a.o.h_final,
                              a.o.z_final, a.o.f_final,  a.o.y_mean,     a.o.y_std,
                              a.o.deltas,  a.o.variance, a.o.smoothness, a.o.total_entropy};
    static const char *const names[12] = {"y",       "entropy",  "hnorm",      "h_final",
                                          "z_final", "f_final",  "y_mean",     "y_std",
                                          "deltas",  "variance", "smoothness", "total_entropy"};
    for (int i = 0; i < 12; i++) add_out(&c, names[i], outs[i], i < 6 ? 0 : 1, false, NULL);
    check_faults(&c, 2);
    free_case(&c);
    oclml_tensor *ins[] = {
        (oclml_tensor *)a.w.w_ih, (oclml_tensor *)a.w.w_hh, (oclml_tensor *)a.w.b_ih,
        (oclml_tensor *)a.w.b_hh, (oclml_tensor *)a.w.w_p,  (oclml_tensor *)a.w.b_p,
        (oclml_tensor *)a.w.w_y,  (oclml_tensor *)a.w.b_y,  (oclml_tensor *)a.s.h,
        (oclml_tensor *)a.s.z,    (oclml_tensor *)a.s.f,    (oclml_tensor *)a.s.y0};
    destroy_all(ins, 12);
    destroy_all(outs, 12);
}
END_TEST

/* ---- optimizer: adaptive clipping rewrites the gradients before the step ---- */

typedef struct optim_args {
    oclml_optim *o;
} optim_args;

static oclml_status run_optim(const void *p) {
    return oclml_optim_step(((const optim_args *)p)->o);
}

/* Each run from step 0 (the outputs' initial values restore the rest). */
static void reset_optim(const void *p) {
    ASSERT_OK(oclml_optim_set_step(((const optim_args *)p)->o, 0));
}

/* optim_step with agc_clip: the gradients clipped in place, then the parameters and the state;
 * with a global-norm clip (its check pass writes scratch): never in part. */
START_TEST(optim_step_outputs_in_order) {
    const bool agc = _i;
    oclml_arena_shape shapes[2] = {{2, {4, 6}}, {1, {5}}};
    oclml_arena *arena;
    ASSERT_OK(oclml_arena_create(T, 2, shapes, &arena));
    size_t padded;
    ASSERT_OK(oclml_arena_info(arena, NULL, NULL, &padded));
    float *p0 = test_floats(padded), *g0 = test_floats(padded), *zero = test_floats(padded);
    test_random(p0, padded, -1, 1);
    test_random(g0, padded, -1, 1);
    memset(zero, 0, padded * sizeof *zero);
    oclml_tensor *params, *grads, *m, *v;
    ASSERT_OK(oclml_arena_flat(arena, 0, &params));
    ASSERT_OK(oclml_arena_flat(arena, 1, &grads));
    oclml_optim_config cfg;
    ASSERT_OK(oclml_optim_config_init(&cfg, OCLML_OPTIM_ADAM));
    cfg.lr = 0.1f;
    if (agc)
        cfg.agc_clip = 0.01f;
    else
        cfg.max_grad_norm = 0.5f;
    optim_args a;
    ASSERT_OK(oclml_optim_create(T, arena, &cfg, &a.o));
    ASSERT_OK(oclml_optim_state(a.o, 0, &m));
    ASSERT_OK(oclml_optim_state(a.o, 1, &v));
    size_t state_n;
    ASSERT_OK(oclml_tensor_numel(m, &state_n));
    ck_assert_uint_le(state_n, padded);
    fault_case c = {.op = agc ? "optim_step agc" : "optim_step norm clip",
                    .run = run_optim,
                    .reset = reset_optim,
                    .arg = &a};
    /* Without AGC the gradients are only read: not an output. */
    if (agc) add_out(&c, "gradients", grads, 0, false, g0);
    add_out(&c, "parameters", params, agc, false, p0);
    add_out(&c, "exp_avg", m, agc, false, zero);
    add_out(&c, "exp_avg_sq", v, agc, false, zero);
    if (!agc) ASSERT_OK(oclml_tensor_write(grads, g0, padded));
    check_faults(&c, 2);
    free_case(&c);
    ASSERT_OK(oclml_optim_destroy(a.o));
    ASSERT_OK(oclml_arena_destroy(arena));
    free(p0);
    free(g0);
    free(zero);
}
END_TEST

int main(void) {
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_loop_test(tc, linear_backward_outputs_in_order, 0, 3);
    tcase_add_loop_test(tc, linear_epilogue_after_product, 0, 2);
    tcase_add_test(tc, gemm_last_wave_in_part);
    tcase_add_loop_test(tc, conv_outputs_in_order, 0, 2);
    tcase_add_test(tc, attention_backward_outputs_in_order);
    tcase_add_test(tc, attention_split_keys_whole);
    tcase_add_loop_test(tc, norm_backward_outputs_in_order, 0, 2);
    tcase_add_loop_test(tc, loss_gradients_before_loss, 0, 5);
    tcase_add_test(tc, concat_split_eight_a_launch);
    tcase_add_test(tc, reduce_all_whole);
    tcase_add_test(tc, embedding_backward_whole);
    tcase_add_loop_test(tc, gru_outputs_in_order, 0, 2);
    tcase_add_test(tc, rssm_steps_before_summary);
    tcase_add_loop_test(tc, optim_step_outputs_in_order, 0, 2);
    suite_add_tcase(s, tc);
    return test_main(s);
}
