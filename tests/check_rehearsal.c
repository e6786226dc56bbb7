/* Rehearsals (lib/core/rehearsal.c): a multi-program op's first call at a shape learns its
 * programs without launching, builds them in parallel, then runs. Checked on three ops: the
 * results are bit for bit those of a context without rehearsals; every program is built before
 * the first launch (the fault hook fails that launch: a rehearsing context has loaded them all by
 * then, one without only the first); the rehearsal launches nothing (the failure leaves the
 * outputs untouched and counts no launch); a shape rehearses once; bad input reports the real
 * run's error. Links the internal library for the hook and the rehearsal calls. */
#include "testutil.h"

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_T 12

typedef struct shape {
    int nd;
    size_t d[4];
} shape;

typedef struct op_case {
    const char *name;
    int n_in, n_out;
    shape in[MAX_T], out[MAX_T];
    /* t: the inputs, then the outputs (made on T). prepare (or NULL) runs before the fault hook
     * is armed. */
    oclml_status (*prepare)(oclml_tensor **t);
    oclml_status (*run)(oclml_tensor **t);
} op_case;

static oclml_status run_gru_backward(oclml_tensor **t) {
    return oclml_gru_step_backward(T, OCLML_GRU_CHO, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
                                   t[8], t[9], t[10], t[11], t[12]);
}

static oclml_status run_conv_backward(oclml_tensor **t) {
    oclml_conv2d_params p;
    oclml_conv2d_params_init(&p);
    p.pad_before[0] = p.pad_before[1] = p.pad_after[0] = p.pad_after[1] = 1;
    p.groups = 2;
    return oclml_conv2d_backward(T, &p, t[0], t[1], t[2], t[3], t[4], t[5], 0);
}

static void causal(oclml_attention_params *p) {
    oclml_attention_params_init(p);
    p->causal = OCLML_CAUSAL_TOP_LEFT;
}

/* q, k, v, dout, then o and lse: the forward's. */
static oclml_status attention_forward(oclml_tensor **t) {
    oclml_attention_params p;
    causal(&p);
    return oclml_attention(T, &p, t[0], t[1], t[2], t[4], t[5]);
}

static oclml_status run_attention_backward(oclml_tensor **t) {
    oclml_attention_params p;
    causal(&p);
    return oclml_attention_backward(T, &p, t[0], t[1], t[2], t[4], t[5], t[3], t[6], t[7], t[8],
                                    NULL);
}

/* B 3, I 5, D 4 (CHO: two more products than TORCH); conv x [2 x 4 x 5 x 5], 3x3 taps in two
 * groups; attention B1 H2 L8 D8, causal. */
static const op_case CASES[] = {
    {"gru_step_backward",
     7,
     6,
     {{2, {3, 5}}, {2, {3, 4}}, {2, {12, 5}}, {2, {12, 4}}, {1, {12}}, {1, {12}}, {2, {3, 4}}},
     {{2, {3, 5}}, {2, {3, 4}}, {2, {12, 5}}, {2, {12, 4}}, {1, {12}}, {1, {12}}},
     NULL,
     run_gru_backward},
    {"conv2d_backward",
     3,
     3,
     {{4, {2, 4, 5, 5}}, {4, {4, 2, 3, 3}}, {4, {2, 4, 5, 5}}},
     {{4, {2, 4, 5, 5}}, {4, {4, 2, 3, 3}}, {1, {4}}},
     NULL,
     run_conv_backward},
    {"attention_backward",
     6,
     3,
     {{4, {1, 2, 8, 8}},
      {4, {1, 2, 8, 8}},
      {4, {1, 2, 8, 8}},
      {4, {1, 2, 8, 8}},
      {4, {1, 2, 8, 8}},
      {3, {1, 2, 8}}},
     {{4, {1, 2, 8, 8}}, {4, {1, 2, 8, 8}}, {4, {1, 2, 8, 8}}},
     attention_forward,
     run_attention_backward},
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

static size_t numel(const shape *s) {
    size_t n = 1;
    for (int i = 0; i < s->nd; i++) n *= s->d[i];
    return n;
}

/* Programs a context has obtained, from source or from the disk cache. */
static unsigned long programs_loaded(void) {
    oclml_cache_info ci;
    ASSERT_OK(oclml_ctx_cache_info(T, &ci));
    return ci.builds + ci.disk_hits;
}

typedef struct outcome {
    oclml_status st;
    char error[512];
    unsigned long programs;
    float *out[MAX_T];
} outcome;

/* Runs c once on a fresh context with `tuning`, the fault hook armed to fail launch `fail_at`
 * (< 0: none), on the inputs `in`; the outputs start NaN. */
static outcome run_once(const op_case *c, const char *tuning, int fail_at, float *const *in) {
    test_retune(tuning);
    oclml_tensor *t[2 * MAX_T] = {NULL};
    for (int i = 0; i < c->n_in; i++) t[i] = test_tensor_from(c->in[i].nd, c->in[i].d, in[i]);
    for (int i = 0; i < c->n_out; i++) t[c->n_in + i] = test_tensor(c->out[i].nd, c->out[i].d);
    outcome o = {0};
    if (c->prepare) ASSERT_OK(c->prepare(t));
    oclml__test_fail_launch_after(T, fail_at);
    o.st = c->run(t);
    snprintf(o.error, sizeof o.error, "%s", oclml_ctx_last_error(T));
    oclml__test_fail_launch_after(T, -1);
    o.programs = programs_loaded();
    for (int i = 0; i < c->n_out; i++) {
        o.out[i] = test_floats(numel(&c->out[i]));
        test_read(t[c->n_in + i], o.out[i], numel(&c->out[i]));
    }
    for (int i = 0; i < c->n_in + c->n_out; i++) oclml_tensor_destroy(t[i]);
    return o;
}

static void free_outcome(const op_case *c, outcome *o) {
    for (int i = 0; i < c->n_out; i++) free(o->out[i]);
}

START_TEST(first_call_builds_every_program_before_launching) {
    const op_case *c = &CASES[_i];
    float *in[MAX_T];
    for (int i = 0; i < c->n_in; i++) {
        in[i] = test_floats(numel(&c->in[i]));
        test_random(in[i], numel(&c->in[i]), -1, 1);
    }
    outcome plain = run_once(c, "build.rehearse=0", -1, in);
    ASSERT_OK(plain.st);
    outcome rehearsed = run_once(c, "build.rehearse=1", -1, in);
    ASSERT_OK(rehearsed.st);
    for (int i = 0; i < c->n_out; i++)
        ck_assert_msg(!memcmp(plain.out[i], rehearsed.out[i], numel(&c->out[i]) * sizeof(float)),
                      "%s: output %d differs with a rehearsal", c->name, i);
    /* Program counts are compared between contexts made after the first: capability probes
     * run once a process and device (the first context's count has them). */
    /* The first launch fails: with a rehearsal every program is loaded by then, and nothing
     * was written (the rehearsal launched nothing and the hook counted no launch of it). */
    outcome failed = run_once(c, "build.rehearse=1", 0, in);
    ck_assert_int_eq(failed.st, OCLML_ERR_OPENCL);
    ck_assert_msg(strstr(failed.error, "injected"), "%s", failed.error);
    ck_assert_uint_eq(failed.programs, rehearsed.programs);
    for (int i = 0; i < c->n_out; i++)
        for (size_t j = 0; j < numel(&c->out[i]); j++)
            ck_assert_msg(isnan(failed.out[i][j]), "%s: output %d written at %zu", c->name, i, j);
    outcome unrehearsed = run_once(c, "build.rehearse=0", 0, in);
    ck_assert_int_eq(unrehearsed.st, OCLML_ERR_OPENCL);
    ck_assert_uint_lt(unrehearsed.programs, rehearsed.programs);
    free_outcome(c, &plain);
    free_outcome(c, &rehearsed);
    free_outcome(c, &failed);
    free_outcome(c, &unrehearsed);
    for (int i = 0; i < c->n_in; i++) free(in[i]);
}
END_TEST

START_TEST(a_key_rehearses_once) {
    test_retune("build.rehearse=1");
    ck_assert(oclml__rehearsal_begin(T, 7));
    ck_assert(oclml__rehearsing(T));
    ck_assert(!oclml__rehearsal_begin(T, 9)); /* one at a time: nested calls just record */
    oclml__rehearsal_end(T);
    ck_assert(!oclml__rehearsing(T));
    ck_assert(!oclml__rehearsal_begin(T, 7));
    ck_assert(oclml__rehearsal_begin(T, 9));
    oclml__rehearsal_end(T);
    /* The table fills, then nothing more rehearses. */
    unsigned more = 0;
    for (uint64_t k = 100; k < 100 + 2 * OCLML__REHEARSED_MOST; k++)
        if (oclml__rehearsal_begin(T, k)) {
            more++;
            oclml__rehearsal_end(T);
        }
    ck_assert_uint_eq(more, OCLML__REHEARSED_MOST - 3);
    test_retune("build.rehearse=0");
    ck_assert(!oclml__rehearsal_begin(T, 7));
    ck_assert(!oclml__rehearsal_begin(NULL, 7));
}
END_TEST

/* A refused call: its status and text as without a rehearsal (the rehearsal's text is cleared),
 * nothing written. w_hh has 3 columns where h has 4. */
static oclml_status refused_call(char *text, size_t len) {
    const size_t xs[2] = {3, 5}, hs[2] = {3, 4}, wi[2] = {12, 5}, wh[2] = {12, 3};
    oclml_tensor *x = test_tensor(2, xs), *h = test_tensor(2, hs), *w_ih = test_tensor(2, wi),
                 *w_hh = test_tensor(2, wh), *dx = test_tensor(2, xs);
    oclml_status st = oclml_gru_step_backward(T, OCLML_GRU_TORCH, x, h, w_ih, w_hh, NULL, NULL, h,
                                              dx, NULL, NULL, NULL, NULL, NULL);
    snprintf(text, len, "%s", oclml_ctx_last_error(T));
    test_assert_untouched(dx, 15);
    oclml_tensor *all[] = {x, h, w_ih, w_hh, dx};
    for (int i = 0; i < 5; i++) oclml_tensor_destroy(all[i]);
    return st;
}

START_TEST(bad_input_reports_the_real_error) {
    char plain[512], rehearsed[512];
    test_retune("build.rehearse=0");
    ASSERT_STATUS(refused_call(plain, sizeof plain), OCLML_ERR_INVALID_SHAPE);
    test_retune("build.rehearse=1");
    ASSERT_STATUS(refused_call(rehearsed, sizeof rehearsed), OCLML_ERR_INVALID_SHAPE);
    ck_assert_str_eq(rehearsed, plain);
    ck_assert_int_gt(strlen(plain), 0);
    ASSERT_STATUS(oclml_gru_step_backward(NULL, OCLML_GRU_TORCH, NULL, NULL, NULL, NULL, NULL, NULL,
                                          NULL, NULL, NULL, NULL, NULL, NULL, NULL),
                  OCLML_ERR_NULL_POINTER);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("rehearsal");
    TCase *tc = tcase_create("rehearsal");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, first_call_builds_every_program_before_launching, 0, N_CASES);
    tcase_add_test(tc, a_key_rehearses_once);
    tcase_add_test(tc, bad_input_reports_the_real_error);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return test_main(suite()); }
