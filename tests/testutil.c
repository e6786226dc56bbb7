/* Test helpers (testutil.h). */
#include "testutil.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

oclml_ctx *T;

oclml_ctx *test_ctx_new(const oclml_ctx_config *opts) {
    char err[8192];
    oclml_ctx *ctx = NULL;
    oclml_status st = oclml_ctx_create(&ctx, opts, err, sizeof err);
    ck_assert_msg(st == OCLML_SUCCESS, "oclml_ctx_create: %s: %s", oclml_status_name(st), err);
    return ctx;
}

void test_setup(void) { T = test_ctx_new(NULL); }

void test_retune(const char *tuning) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.tuning = tuning;
    if (T) oclml_ctx_destroy(T);
    T = test_ctx_new(&o);
}

void test_teardown(void) {
    if (T) oclml_ctx_destroy(T);
    T = NULL;
}

static unsigned seed_value;
static unsigned long long stream;

bool test_sweep(void) {
    const char *s = getenv("OCLML_TEST_SWEEP");
    return s && *s && strcmp(s, "0") != 0;
}

int test_tier(int quick, int all) { return test_sweep() || quick > all ? all : quick; }

unsigned test_seed(void) {
    if (!seed_value) {
        const char *s = getenv("OCLML_TEST_SEED");
        seed_value = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
        if (!seed_value) seed_value = 1;
        stream = seed_value;
    }
    return seed_value;
}

oclml_dropout_params test_dropout_params(float p, uint64_t seed, uint64_t offset) {
    oclml_dropout_params d;
    ASSERT_OK(oclml_dropout_params_init(&d));
    d.p = p;
    d.seed = seed;
    d.offset = offset;
    return d;
}

void test_random(float *x, size_t n, float lo, float hi) {
    test_seed();
    for (size_t i = 0; i < n; i++) {
        stream = stream * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(stream >> 40) / (double)(1ull << 24);
        x[i] = (float)(lo + (hi - lo) * u);
    }
}

float *test_floats(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

double *test_doubles(size_t n) {
    double *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    return x;
}

oclml_tensor *test_tensor_from(int ndim, const size_t *shape, const float *data) {
    oclml_tensor *t = NULL;
    ASSERT_OK(oclml_tensor_create(T, ndim, shape, &t));
    size_t n;
    oclml_tensor_numel(t, &n);
    ASSERT_OK(oclml_tensor_write(t, data, n));
    return t;
}

oclml_tensor *test_tensor(int ndim, const size_t *shape) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *nan = test_floats(n);
    oclml_tensor *t = test_tensor_from(ndim, shape, nan);
    free(nan);
    return t;
}

void test_read(const oclml_tensor *t, float *out, size_t n) {
    ASSERT_OK(oclml_tensor_read(t, out, n));
}

double test_unit_roundoff(oclml_dtype dt) {
    return dt == OCLML_BFLOAT16 ? TOL_U_BF16 : dt == OCLML_FLOAT16 ? TOL_U_FP16 : TOL_U_FP32;
}

double test_abs_floor(oclml_dtype dt) { return dt == OCLML_FLOAT16 ? TOL_ABS_FP16 : 0; }

static size_t numel_of(int ndim, const size_t *shape) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

oclml_tensor *test_tensor_held(oclml_dtype dt, int ndim, const size_t *shape, float lo, float hi,
                               float **held) {
    const size_t n = numel_of(ndim, shape);
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, ndim, shape, &t));
    float *v = test_floats(n);
    if (lo < hi) test_random(v, n, lo, hi);
    ASSERT_OK(oclml_tensor_write(t, v, n));
    test_read(t, v, n);
    if (held)
        *held = v;
    else
        free(v);
    return t;
}

oclml_tensor *test_tensor_at(oclml_dtype dt, int ndim, const size_t *shape, size_t skip,
                             oclml_tensor **owner) {
    const size_t n = numel_of(ndim, shape), whole = n + skip;
    oclml_tensor *t;
    *owner = NULL;
    if (!skip) {
        ASSERT_OK(oclml_tensor_create_dtype(T, dt, ndim, shape, &t));
    } else {
        ASSERT_OK(oclml_tensor_create_dtype(T, dt, 1, &whole, owner));
        cl_mem mem;
        size_t off;
        ASSERT_OK(oclml_tensor_buffer(*owner, &mem, &off));
        ASSERT_OK(oclml_tensor_wrap_dtype(T, dt, mem, off + skip * oclml_dtype_size(dt), ndim,
                                          shape, &t));
    }
    float *nan = test_floats(n);
    ASSERT_OK(oclml_tensor_write(t, nan, n));
    free(nan);
    return t;
}

void test_round_to(oclml_dtype dt, float *v, size_t n) {
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_create_dtype(T, dt, 1, &n, &t));
    ASSERT_OK(oclml_tensor_write(t, v, n));
    test_read(t, v, n);
    oclml_tensor_destroy(t);
}

void test_assert_close_scaled(const char *what, const float *out, const double *ref,
                              const double *scale, size_t n, double tol) {
    double num = 0, den = 0, maxscale = 0, maxerr = 0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(ref[i]))
            ck_assert_msg(!isnan(out[i]),
                          "%s[%zu] is NaN (never written?), reference %.9g (seed %u)", what, i,
                          ref[i], test_seed());
        if (isnan(ref[i])) {
            ck_assert_msg(isnan(out[i]), "%s[%zu] = %.9g, reference is NaN (seed %u)", what, i,
                          (double)out[i], test_seed());
            continue;
        }
        if (isinf(ref[i])) {
            ck_assert_msg(out[i] == ref[i], "%s[%zu] = %.9g, reference %g (seed %u)", what, i,
                          (double)out[i], ref[i], test_seed());
            continue;
        }
        double d = (double)out[i] - ref[i], sc = scale ? fabs(scale[i]) : fabs(ref[i]);
        num += d * d;
        den += sc * sc;
        if (sc > maxscale) maxscale = sc;
        if (fabs(d) > maxerr) {
            maxerr = fabs(d);
            worst = i;
        }
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    ck_assert_msg(rel <= tol, "%s: relative L2 error %.3g > %.1g (n=%zu, seed %u)", what, rel, tol,
                  n, test_seed());
    double bound = tol * maxscale * 10 + 1e-30;
    ck_assert_msg(maxerr <= bound, "%s[%zu] = %.9g vs reference %.9g: error %.3g > %.3g (seed %u)",
                  what, worst, (double)out[worst], ref[worst], maxerr, bound, test_seed());
}

void test_assert_close(const char *what, const float *out, const double *ref, size_t n,
                       double tol) {
    test_assert_close_scaled(what, out, ref, NULL, n, tol);
}

void test_assert_status(oclml_status got, oclml_status want, const char *expr, const char *file,
                        int line) {
    if (got != want)
        ck_abort_msg("%s:%d: %s returned %s, expected %s; last error: %s", file, line, expr,
                     oclml_status_name(got), oclml_status_name(want),
                     T ? oclml_ctx_last_error(T) : "");
}

void test_tmpdir(char *out, size_t len, const char *tag) {
    const char *base = getenv("OCLML_TEST_TMP");
    if (!base || !*base) base = "/tmp";
    mkdir(base, 0700);
    snprintf(out, len, "%s/%s-XXXXXX", base, tag);
    ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp %s: %s", out, strerror(errno));
}

void test_write_file(const char *dir, const char *name, const char *text) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static int device_count_in_child(void) {
    pid_t pid = fork();
    if (pid == 0) {
        cl_uint np = 0, total = 0;
        cl_platform_id p[16];
        if (clGetPlatformIDs(16, p, &np) == CL_SUCCESS)
            for (cl_uint i = 0; i < np && i < 16; i++) {
                cl_uint nd = 0;
                if (clGetDeviceIDs(p[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS)
                    total += nd;
            }
        _exit(total > 0 ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 1 : 0;
}

int test_main(Suite *s) {
    if (device_count_in_child() == 0) {
        fprintf(stderr, "no OpenCL device: skipped\n");
        return 77;
    }
    printf("test seed %u (set OCLML_TEST_SEED to repeat)\n", test_seed());
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

bool test_golden_path(char *out, size_t len, const char *suite, const char *name) {
    const char *src = getenv("OCLML_TEST_SRCDIR");
    snprintf(out, len, "%s/tests/data/%s", src ? src : ".", name);
    FILE *f = fopen(out, "r");
    if (!f) {
        fprintf(stderr, "%s: %s missing: PyTorch golden test skipped\n", suite, out);
        return false;
    }
    fclose(f);
    return true;
}

void test_golden_read(FILE *f, const char *name, size_t n, double *v) {
    char got[32];
    size_t count = 0;
    ck_assert_msg(fscanf(f, "%31s %zu", got, &count) == 2 && !strcmp(got, name) && count == n,
                  "golden file: expected %s of %zu values, got %s of %zu", name, n, got, count);
    for (size_t i = 0; i < n; i++) ck_assert(fscanf(f, "%lf", &v[i]) == 1);
}

float *test_golden_floats(FILE *f, const char *name, size_t n) {
    double *d = test_doubles(n);
    test_golden_read(f, name, n, d);
    float *v = test_floats(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)d[i];
    free(d);
    return v;
}

void test_assert_untouched(const oclml_tensor *t, size_t n) {
    float *v = test_floats(n);
    test_read(t, v, n);
    for (size_t i = 0; i < n; i++) ck_assert_msg(isnan(v[i]), "element %zu was written", i);
    free(v);
}

double test_act(int act, double z) {
    switch (act) {
    case OCLML_ACT_RELU:
        return isnan(z) ? z : z > 0 ? z : 0;
    case OCLML_ACT_GELU_ERF:
        return 0.5 * z * erfc(-z / sqrt(2.0));
    case OCLML_ACT_GELU_TANH:
        return 0.5 * z * (1 + tanh(sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    case OCLML_ACT_SILU:
        return z / (1 + exp(-z));
    case OCLML_ACT_TANH:
        return tanh(z);
    case OCLML_ACT_SIGMOID:
        return 1 / (1 + exp(-z));
    default:
        return z;
    }
}

double test_act_grad(int act, double z) {
    switch (act) {
    case OCLML_ACT_RELU:
        return isnan(z) ? z : z > 0 ? 1 : 0;
    case OCLML_ACT_GELU_ERF:
        return 0.5 * erfc(-z / sqrt(2.0)) + z * exp(-0.5 * z * z) / sqrt(2 * M_PI);
    case OCLML_ACT_GELU_TANH: {
        double k = sqrt(2 / M_PI), t = tanh(k * (z + 0.044715 * z * z * z));
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * 0.044715 * z * z);
    }
    case OCLML_ACT_SILU: {
        double sg = 1 / (1 + exp(-z));
        return sg * (1 + z * (1 - sg));
    }
    case OCLML_ACT_TANH:
        return 1 - tanh(z) * tanh(z);
    case OCLML_ACT_SIGMOID:
        return 1 / (1 + exp(-z)) / (1 + exp(z));
    default:
        return 1;
    }
}

/* One GEMM case on T against the double reference. With beta == 0, C starts NaN-poisoned
 * (test_floats): it must not leak. */
void test_gemm_case(int ta, int tb, size_t m, size_t n, size_t k, float alpha, float beta) {
    size_t ashape[2] = {ta ? k : m, ta ? m : k}, bshape[2] = {tb ? n : k, tb ? k : n},
           cshape[2] = {m, n};
    float *a = test_floats(m * k), *b = test_floats(k * n), *c = test_floats(m * n);
    test_random(a, m * k, -1, 1);
    test_random(b, k * n, -1, 1);
    if (beta != 0) test_random(c, m * n, -1, 1);
    oclml_tensor *A = test_tensor_from(2, ashape, a), *B = test_tensor_from(2, bshape, b);
    oclml_tensor *C = test_tensor_from(2, cshape, c);
    ASSERT_OK(oclml_gemm(T, ta, tb, alpha, A, B, beta, C));
    double *ref = test_doubles(m * n);
    ref_gemm(ta, tb, m, n, k, alpha, a, b, beta, c, ref);
    float *out = test_floats(m * n);
    test_read(C, out, m * n);
    char what[96];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d %zux%zux%zu alpha=%g beta=%g", ta, tb, m, n, k,
             alpha, beta);
    test_assert_close(what, out, ref, m * n, TOL_GEMM);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
    free(a);
    free(b);
    free(c);
    free(out);
    free(ref);
}

void test_assert_rounded(const char *what, const oclml_tensor *out, const oclml_tensor *ref) {
    size_t n;
    oclml_dtype dt;
    ASSERT_OK(oclml_tensor_numel(out, &n));
    ASSERT_OK(oclml_tensor_dtype(out, &dt));
    float *want = test_floats(n), *got = test_floats(n);
    test_read(ref, want, n);
    test_round_to(dt, want, n);
    test_read(out, got, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(isnan(want[i]) ? isnan(got[i]) : !memcmp(&got[i], &want[i], sizeof got[i]),
                      "%s (%s) [%zu] = %a, want %a", what, oclml_dtype_name(dt), i, got[i],
                      want[i]);
    free(want);
    free(got);
}
