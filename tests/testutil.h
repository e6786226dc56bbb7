/* Helpers shared by the Check suites: contexts, seeded random data, NaN poisoning, error measures
 * against the double-precision references. */
#ifndef OCLML_TESTUTIL_H
#define OCLML_TESTUTIL_H

#include <check.h>
#include <stdio.h>
#include <oclml.h>
#include <stdbool.h>

/* Check's ck_assert_msg (and every ck_assert_* built on it) marks the point reached on each
 * assertion that holds: in fork mode a write to the parent per assertion, and the suites assert
 * per element, millions of system calls a suite (half of a warm check_softmax's time). Here an
 * assertion that holds costs nothing; a failing one reports its file and line as before. */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...) \
    ((expr)                      \
         ? (void)0               \
         : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))

#include "ref/ref.h"
#include "tolerance.h"

/* The context of the running test, made by the fixture test_setup()/test_teardown() inside the
 * forked test process (an OpenCL call in Check's parent process would hang forked tests). */
extern oclml_ctx *T;
void test_setup(void);
void test_teardown(void);
/* Creates a context with the given options (NULL: defaults) or fails the test with its text. */
oclml_ctx *test_ctx_new(const oclml_ctx_config *opts);
/* Replaces T by a context with the tuning option `tuning` (how tests pick variants: never
 * setenv, which is process-global). NULL: the defaults again. */
void test_retune(const char *tuning);

/* The suite's two tiers. `make check` runs the quick tier: every op's semantics, bad input, NaN
 * and finite-difference checks, and every variant a device picks by default (PoCL's own, and a
 * GPU's through the emulated tensor-core kernels), small shapes. `make check-sweep` sets
 * $OCLML_TEST_SWEEP=1 and adds the variant sweeps: tiles, splits and forced paths that a device
 * takes only when tuned to. Read in Check's parent process (no OpenCL call there). */
bool test_sweep(void);
/* A loop test's iteration count: all in a sweep, else quick (the first quick iterations are the
 * quick tier's). */
int test_tier(int quick, int all);

/* The seed of this test run: $OCLML_TEST_SEED, else time-based. Printed by failing checks. */
unsigned test_seed(void);
/* Uniform values in [lo, hi) from a per-call stream of the run's seed. */
void test_random(float *x, size_t n, float lo, float hi);
/* Dropout params (initialised, then p, seed and offset set). */
oclml_dropout_params test_dropout_params(float p, uint64_t seed, uint64_t offset);

float *test_floats(size_t n);                             /* malloc'd, NaN-filled */
double *test_doubles(size_t n);                           /* malloc'd */
oclml_tensor *test_tensor(int ndim, const size_t *shape); /* NaN-poisoned */
oclml_tensor *test_tensor_from(int ndim, const size_t *shape, const float *data);
void test_read(const oclml_tensor *t, float *out, size_t n);

/* Low precision (tolerance.h): the unit roundoff of dtype's values, and the absolute floor its
 * outputs need (fp16's subnormal step; 0 for the others). */
double test_unit_roundoff(oclml_dtype dt);
double test_abs_floor(oclml_dtype dt);
/* A tensor of dtype dt with uniform values in [lo, hi), or NaN-poisoned where lo >= hi; *held
 * (may be NULL) receives its values as the dtype holds them (malloc'd). */
oclml_tensor *test_tensor_held(oclml_dtype dt, int ndim, const size_t *shape, float lo, float hi,
                               float **held);
/* A NaN-poisoned tensor of dtype dt, `skip` elements into a buffer of its own: a wrapped view
 * of *owner where skip > 0 (destroy both), else a tensor of its own and *owner NULL. */
oclml_tensor *test_tensor_at(oclml_dtype dt, int ndim, const size_t *shape, size_t skip,
                             oclml_tensor **owner);
/* v[] rounded as dtype dt holds it (the host's conversion, which the device's matches). */
void test_round_to(oclml_dtype dt, float *v, size_t n);
/* Asserts that out is, bit for bit, the fp32 tensor ref rounded to out's dtype (NaN where ref is
 * NaN): a 16-bit op that runs the fp32 one's arithmetic. */
void test_assert_rounded(const char *what, const oclml_tensor *out, const oclml_tensor *ref);
/* oclml_gemm on T (ta, tb: transposes) with fresh random A, B and, where beta != 0, C, checked
 * against the double reference within TOL_GEMM. */
void test_gemm_case(int ta, int tb, size_t m, size_t n, size_t k, float alpha, float beta);

/* Asserts that out matches ref within a relative L2 error of tol and a max-abs error of
 * tol * max|ref| (plus a tiny floor for all-zero references), and that no element is NaN where
 * the reference is finite (every element written). what names the output. */
void test_assert_close(const char *what, const float *out, const double *ref, size_t n, double tol);
/* The same with errors measured against scale[] (the magnitude of the terms that make each
 * reference value) instead of the reference itself: for outputs that are small differences of
 * large terms, like backward passes, where cancellation is the math and not the kernel's fault. */
void test_assert_close_scaled(const char *what, const float *out, const double *ref,
                              const double *scale, size_t n, double tol);

/* The fused activations (oclml_activation) in double: act(z), and act'(z) from the
 * pre-activation z. */
double test_act(int act, double z);
double test_act_grad(int act, double z);

/* Asserts status == want, printing the library's last error otherwise. */
#define ASSERT_OK(expr) test_assert_status((expr), OCLML_SUCCESS, #expr, __FILE__, __LINE__)
#define ASSERT_STATUS(expr, want) test_assert_status((expr), (want), #expr, __FILE__, __LINE__)
void test_assert_status(oclml_status got, oclml_status want, const char *expr, const char *file,
                        int line);

/* Fails unless every element of t (made by test_tensor) is still NaN: nothing was written. */
void test_assert_untouched(const oclml_tensor *t, size_t n);

/* A fresh directory under $OCLML_TEST_TMP (the build tree). */
void test_tmpdir(char *out, size_t len, const char *tag);
void test_write_file(const char *dir, const char *name, const char *text);

/* PyTorch's golden files, tests/data/NAME under $OCLML_TEST_SRCDIR: the path into out, and
 * whether it exists (where not, a note says the suite's golden test is skipped). */
bool test_golden_path(char *out, size_t len, const char *suite, const char *name);
/* Reads "name count values..." from a golden file into v: count must be n. */
void test_golden_read(FILE *f, const char *name, size_t n, double *v);
/* The same as malloc'd floats (for tensors). */
float *test_golden_floats(FILE *f, const char *name, size_t n);

/* Runs the suite: exits 77 (skipped) when no OpenCL device exists, probing in a child process so
 * that this process makes no OpenCL call. Returns the exit status. */
int test_main(Suite *s);

#endif
