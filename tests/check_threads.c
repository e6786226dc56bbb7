/* Thread safety: two threads with two contexts, and several threads sharing one context (first
 * build raced, kernels shared, GEMM through CLBlast), each checking its own results. */
#include "testutil.h"

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
    w->failures++;
    snprintf(w->why, sizeof w->why, "thread %d: %s: %s %s", w->id, what, oclml_status_name(st),
             oclml_ctx_last_error(w->ctx));
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

START_TEST(four_threads_one_context) {
    /* No disk cache: all four threads race to build the same programs from source. */
    oclml_ctx_options o;
    oclml_ctx_options_init(&o);
    o.cache_dir = "";
    oclml_ctx *ctx = test_ctx_new(&o);
    worker ws[4];
    for (int i = 0; i < 4; i++) ws[i] = (worker){ctx, i, 0, ""};
    run_workers(ws, 4);
    oclml_cache_info c;
    oclml_ctx_cache_info(ctx, &c);
    ck_assert_uint_eq(c.builds, 2); /* fill's and copy's programs, each built once, shared by all */
    oclml_ctx_destroy(ctx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("threads");
    tcase_add_test(tc, two_threads_two_contexts);
    tcase_add_test(tc, four_threads_one_context);
    suite_add_tcase(s, tc);
    return test_main(s);
}
