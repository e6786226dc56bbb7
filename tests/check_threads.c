/* Thread safety: two threads with two contexts, several threads sharing one context (first build
 * raced, kernels shared, GEMM through CLBlast, failing calls mixed in), and different ops' first
 * calls building at once, each checking its own results. CI runs this suite under
 * ThreadSanitizer too (configure --enable-tsan). */
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define ITERS 20

typedef struct worker {
    oclml_ctx *ctx;
    int id;
    int failures;
    char why[256];
} worker;

static pthread_barrier_t start;

static void record_failure(worker *w, const char *what, oclml_status st) {
    /* Threads share the context's error record: copy it under its lock (reading the pointer of
     * oclml_ctx_last_error would race with another thread's failure). */
    char text[160];
    oclml_ctx_last_error_copy(w->ctx, text, sizeof text);
    w->failures++;
    snprintf(w->why, sizeof w->why, "thread %d: %s: %s %s", w->id, what, oclml_status_name(st),
             text);
}

/* Fill, copy and a small GEMM on the thread's own tensors, checked after each round. */
static void *work(void *arg) {
    worker *w = arg;
    size_t n = 1000 + 17 * (size_t)w->id, sq[2] = {8, 8};
    oclml_tensor *a = NULL, *b = NULL, *ma = NULL, *me = NULL, *mc = NULL;
    oclml_status st = oclml_tensor_create(w->ctx, 1, &n, &a);
    if (!st) st = oclml_tensor_create(w->ctx, 1, &n, &b);
    if (!st) st = oclml_tensor_create(w->ctx, 2, sq, &ma);
    if (!st) st = oclml_tensor_create(w->ctx, 2, sq, &me);
    if (!st) st = oclml_tensor_create(w->ctx, 2, sq, &mc);
    float *out = malloc(n * sizeof *out), eye[64], m[64], c[64];
    memset(eye, 0, sizeof eye);
    for (int i = 0; i < 8; i++) eye[i * 9] = 1.0f;
    pthread_barrier_wait(&start);
    for (int it = 0; it < ITERS && !st && !w->failures; it++) {
        float v = (float)(w->id * 1000 + it);
        /* A failing call mixed into the work: it must fail alone, touching nothing of anyone's. */
        oclml_status bad = oclml_copy(w->ctx, a, ma); /* n elements into 64: refused */
        if (bad != OCLML_ERR_INVALID_SHAPE)
            record_failure(w, "mismatched copy was not refused", bad);
        for (int i = 0; i < 64; i++) m[i] = v + (float)i;
        st = oclml_fill(w->ctx, a, v);
        if (!st) st = oclml_copy(w->ctx, a, b);
        if (!st) st = oclml_tensor_read(b, out, n);
        for (size_t i = 0; !st && i < n && !w->failures; i++)
            if (out[i] != v) record_failure(w, "copy result", OCLML_SUCCESS);
        /* m * I = m: checks that a GEMM raced with other threads used this thread's tensors. */
        if (!st) st = oclml_tensor_write(ma, m, 64);
        if (!st) st = oclml_tensor_write(me, eye, 64);
        if (!st) st = oclml_gemm(w->ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, ma, me, 0.0f, mc);
        if (!st) st = oclml_tensor_read(mc, c, 64);
        for (int i = 0; !st && i < 64 && !w->failures; i++)
            if (c[i] != m[i]) record_failure(w, "gemm result", OCLML_SUCCESS);
    }
    if (st) record_failure(w, "op", st);
    free(out);
    oclml_tensor *all[] = {a, b, ma, me, mc};
    for (int i = 0; i < 5; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
    return NULL;
}

static void run_workers(worker *ws, int n) {
    pthread_t th[8];
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, work, &ws[i]);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < n; i++) ck_assert_msg(ws[i].failures == 0, "%s", ws[i].why);
}

START_TEST(two_threads_two_contexts) {
    worker ws[2] = {{test_ctx_new(NULL), 0, 0, ""}, {test_ctx_new(NULL), 1, 0, ""}};
    run_workers(ws, 2);
    oclml_ctx_destroy(ws[0].ctx);
    oclml_ctx_destroy(ws[1].ctx);
}
END_TEST

/* Threads making different ops' first calls at once on one context: their programs build
 * concurrently (no build waits behind another's compile), each result checked. */
typedef struct first_call {
    oclml_ctx *ctx;
    int which;
    oclml_status st;
    double err;
    float x[7 * 96]; /* made before the threads start: test_random is not thread-safe */
} first_call;

static void *first_call_work(void *arg) {
    first_call *f = arg;
    size_t shape[2] = {7, 96};
    const float *x = f->x;
    float y[7 * 96];
    oclml_tensor *X = NULL, *Y = NULL;
    oclml_status st = oclml_tensor_create(f->ctx, 2, shape, &X);
    if (!st) st = oclml_tensor_create(f->ctx, 2, shape, &Y);
    if (!st) st = oclml_tensor_write(X, x, 7 * 96);
    pthread_barrier_wait(&start);
    if (!st) {
        switch (f->which) {
        case 0:
            st = oclml_softmax(f->ctx, X, Y);
            break;
        case 1:
            st = oclml_layernorm(f->ctx, X, NULL, NULL, 1e-5f, Y, NULL, NULL);
            break;
        case 2:
            st = oclml_unary(f->ctx, OCLML_RELU, X, Y);
            break;
        default:
            st = oclml_log_softmax(f->ctx, X, Y);
            break;
        }
    }
    if (!st) st = oclml_tensor_read(Y, y, 7 * 96);
    f->st = st;
    f->err = 0;
    double ref[7 * 96];
    if (f->which == 0 || f->which == 3)
        ref_softmax(7, 96, x, f->which == 3, ref);
    else if (f->which == 1)
        ref_norm(0, 7, 96, x, NULL, NULL, 1e-5, ref, NULL, NULL);
    else
        for (int i = 0; i < 7 * 96; i++) ref[i] = ref_unary(OCLML_RELU, 0, x[i]);
    for (int i = 0; !st && i < 7 * 96; i++) {
        /* Normalised outputs are O(1): judged against 1 near zero, as NUMERICS.md does. */
        double e = fabs(y[i] - ref[i]) / (fabs(ref[i]) + (f->which == 1 ? 1.0 : 1e-3));
        if (e > f->err) f->err = e;
    }
    if (X) oclml_tensor_destroy(X);
    if (Y) oclml_tensor_destroy(Y);
    return NULL;
}

START_TEST(first_calls_build_concurrently) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.cache_dir = "";
    oclml_ctx *ctx = test_ctx_new(&o);
    static first_call f[4];
    pthread_t th[4];
    pthread_barrier_init(&start, NULL, 4);
    for (int i = 0; i < 4; i++) {
        f[i] = (first_call){ctx, i, OCLML_SUCCESS, 0, {0}};
        test_random(f[i].x, 7 * 96, -2, 2);
    }
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, first_call_work, &f[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(f[i].st == OCLML_SUCCESS, "op %d: %s", i, oclml_status_name(f[i].st));
        ck_assert_msg(f[i].err < 1e-5, "op %d: relative error %g", i, f[i].err);
    }
    oclml_cache_info c;
    oclml_ctx_cache_info(ctx, &c);
    ck_assert_uint_eq(c.builds, 4);
    oclml_ctx_destroy(ctx);
}
END_TEST

START_TEST(four_threads_one_context) {
    /* No disk cache: all four threads race to build the same programs from source. */
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.cache_dir = "";
    oclml_ctx *ctx = test_ctx_new(&o);
    /* Planning runs the device's capability probes (their builds count too, on GPUs that have
     * them), so the count starts after it. */
    char plan[160];
    ASSERT_OK(oclml_gemm_plan(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 8, 8, 8, 1, plan, sizeof plan));
    oclml_cache_info before, c;
    oclml_ctx_cache_info(ctx, &before);
    worker ws[4];
    for (int i = 0; i < 4; i++) ws[i] = (worker){ctx, i, 0, ""};
    run_workers(ws, 4);
    oclml_ctx_cache_info(ctx, &c);
    /* fill's and copy's programs, and GEMM's where it runs on the own kernels (not CLBlast: small
     * work-groups), each built once, shared by all. */
    ck_assert_uint_eq(c.builds - before.builds, strstr(plan, "CLBlast") ? 2 : 3);
    oclml_ctx_destroy(ctx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("threads");
    tcase_add_test(tc, two_threads_two_contexts);
    tcase_add_test(tc, four_threads_one_context);
    tcase_add_test(tc, first_calls_build_concurrently);
    suite_add_tcase(s, tc);
    return test_main(s);
}
