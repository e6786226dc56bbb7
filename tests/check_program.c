/* Runtime compilation: the kernel search path, missing files, compile failures with their build
 * log, build options, the in-memory program cache, listing and warm-up. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *GOOD = "__kernel void k(__global float *x) {\n"
                          "#ifndef OCLML_TEST_VALUE\n"
                          "#error OCLML_TEST_VALUE must be defined\n"
                          "#endif\n"
                          "    x[get_global_id(0)] = OCLML_TEST_VALUE; }\n";

static oclml_ctx *ctx_with_path(const char *dir) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.kernel_path = dir;
    o.cache_dir = ""; /* these tests are about compiling, not the disk cache */
    return test_ctx_new(&o);
}

START_TEST(option_path_comes_first) {
    char dir[1024];
    test_tmpdir(dir, sizeof dir, "path");
    test_write_file(dir, "custom.cl", GOOD);
    /* memory.cl in this directory would shadow the real one; helper headers still come from the
     * environment's path. */
    oclml_ctx *ctx = ctx_with_path(dir);
    ASSERT_OK(oclml_ctx_build_file(ctx, "custom.cl", "-DOCLML_TEST_VALUE=1", NULL));
    ASSERT_OK(oclml_ctx_build_file(ctx, "memory.cl", NULL, NULL));
    oclml_ctx_destroy(ctx);
}
END_TEST

START_TEST(missing_file_names_searched_paths) {
    char dir[1024];
    test_tmpdir(dir, sizeof dir, "empty");
    oclml_ctx *ctx = ctx_with_path(dir);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "nothere.cl", NULL, NULL), OCLML_ERR_KERNEL_NOT_FOUND);
    const char *e = oclml_ctx_last_error(ctx);
    ck_assert_msg(strstr(e, "nothere.cl") && strstr(e, dir) &&
                      strstr(e, getenv("OCLML_KERNEL_PATH")),
                  "error should name the file and every directory searched: %s", e);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "../cl/memory.cl", NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "memory.txt", NULL, NULL), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, NULL, NULL, NULL), OCLML_ERR_NULL_POINTER);
    oclml_ctx_destroy(ctx);
}
END_TEST

START_TEST(current_directory_is_never_searched) {
    char dir[1024];
    test_tmpdir(dir, sizeof dir, "cwd");
    test_write_file(dir, "cwd_only.cl", GOOD);
    ck_assert_int_eq(chdir(dir), 0);
    oclml_ctx *ctx = test_ctx_new(NULL);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "cwd_only.cl", "-DOCLML_TEST_VALUE=1", NULL),
                  OCLML_ERR_KERNEL_NOT_FOUND);
    /* Without OCLML_KERNEL_PATH the install directory is the last resort. */
    unsetenv("OCLML_KERNEL_PATH");
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "cwd_only.cl", "-DOCLML_TEST_VALUE=1", NULL),
                  OCLML_ERR_KERNEL_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(ctx), "liboclml/cl"));
    oclml_ctx_destroy(ctx);
}
END_TEST

START_TEST(compile_error_gives_build_log) {
    char dir[1024];
    test_tmpdir(dir, sizeof dir, "broken");
    test_write_file(dir, "broken.cl",
                    "__kernel void k(__global float *x) { x[0] = undeclared_name; }\n");
    oclml_ctx *ctx = ctx_with_path(dir);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "broken.cl", "-DMARKER_OPTION=7", NULL),
                  OCLML_ERR_BUILD_FAILED);
    const char *e = oclml_ctx_last_error(ctx);
    oclml_device_info d;
    oclml_ctx_device_info(ctx, &d);
    ck_assert_msg(strstr(e, "undeclared_name") != NULL, "no build log in: %s", e);
    ck_assert_msg(strstr(e, "-DMARKER_OPTION=7") != NULL, "no options in: %s", e);
    ck_assert_msg(strstr(e, d.device_name) != NULL, "no device name in: %s", e);
    int code = 0;
    oclml_ctx_backend_error(ctx, &code);
    ck_assert_int_eq(code, CL_BUILD_PROGRAM_FAILURE);
    oclml_ctx_destroy(ctx);
}
END_TEST

/* The error text of a failed op call names what failed: the OpenCL error, the kernel, the
 * file. */
static void assert_names(oclml_ctx *ctx, const char *what, const char *a, const char *b,
                         const char *c, const char *d) {
    const char *e = oclml_ctx_last_error(ctx);
    ck_assert_msg(strstr(e, a) && strstr(e, b) && strstr(e, c) && strstr(e, d),
                  "%s: the error should name %s, %s, %s and %s: '%s'", what, a, b, c, d, e);
}

/* A kernel file on the search path that is empty (or not the library's) shadows the library's:
 * the ops that take it fail with a text that names the error, the kernel and the file found;
 * one that does not compile names the file and has the compiler's log. */
START_TEST(broken_kernel_file_named_in_error) {
    char empty[1024], broken[1024];
    test_tmpdir(empty, sizeof empty, "emptycl");
    test_write_file(empty, "softmax.cl", "");
    test_write_file(empty, "memory.cl", "");
    test_tmpdir(broken, sizeof broken, "brokencl");
    test_write_file(broken, "softmax.cl",
                    "__kernel void oclml_softmax_fwd(__global float *x) { x[0] = ; }\n");
    char empty_file[1100], broken_file[1100];
    snprintf(empty_file, sizeof empty_file, "%s/softmax.cl", empty);
    snprintf(broken_file, sizeof broken_file, "%s/softmax.cl", broken);
    /* Short rows (the register kernel) and long rows (the chunked pair), forward and backward. */
    static const size_t COLS[2] = {5, 100003};
    for (int i = 0; i < 2; i++) {
        size_t shape[2] = {3, COLS[i]};
        oclml_ctx *ctx = ctx_with_path(empty);
        oclml_tensor *x, *y, *dy;
        ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &x));
        ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &y));
        ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &dy));
        ASSERT_STATUS(oclml_softmax(ctx, x, y), OCLML_ERR_OPENCL);
        assert_names(ctx, "empty softmax.cl", "CL_INVALID_KERNEL_NAME", empty_file,
                     i ? "oclml_softmax_fwd_part" : "'oclml_softmax_fwd'", "clCreateKernel");
        int code = 0;
        ASSERT_OK(oclml_ctx_backend_error(ctx, &code));
        ck_assert_int_eq(code, CL_INVALID_KERNEL_NAME);
        ASSERT_STATUS(oclml_log_softmax_backward(ctx, y, dy, x), OCLML_ERR_OPENCL);
        assert_names(ctx, "empty softmax.cl, backward", "CL_INVALID_KERNEL_NAME", empty_file,
                     "oclml_log_softmax_bwd", "clCreateKernel");
        ASSERT_STATUS(oclml_fill(ctx, x, 1.0f), OCLML_ERR_OPENCL);
        assert_names(ctx, "empty memory.cl", "CL_INVALID_KERNEL_NAME", empty, "memory.cl",
                     "oclml_fill");
        oclml_tensor_destroy(x);
        oclml_tensor_destroy(y);
        oclml_tensor_destroy(dy);
        oclml_ctx_destroy(ctx);
    }
    oclml_ctx *ctx = ctx_with_path(broken);
    size_t shape[2] = {3, 5};
    oclml_tensor *x, *y;
    ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &x));
    ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &y));
    ASSERT_STATUS(oclml_softmax(ctx, x, y), OCLML_ERR_BUILD_FAILED);
    assert_names(ctx, "softmax.cl with a syntax error", "CL_BUILD_PROGRAM_FAILURE", broken_file,
                 "build log", "error:"); /* compilers name the source differently */
    oclml_tensor_destroy(x);
    oclml_tensor_destroy(y);
    oclml_ctx_destroy(ctx);
}
END_TEST

/* A FIFO under a kernel file's name is passed over, never opened (reading one waits for a
 * writer): the next directory's file serves. An alarm turns a regression into a failure. */
START_TEST(fifo_kernel_file_passed_over) {
    char dir[1024], fifo[1100];
    test_tmpdir(dir, sizeof dir, "fifocl");
    snprintf(fifo, sizeof fifo, "%s/softmax.cl", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    oclml_ctx *ctx = ctx_with_path(dir);
    size_t shape[2] = {2, 8};
    float ones[16], got[16];
    for (int i = 0; i < 16; i++) ones[i] = 1.0f;
    oclml_tensor *x, *y;
    ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &x));
    ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &y));
    ASSERT_OK(oclml_tensor_write(x, ones, 16));
    alarm(300);
    ASSERT_OK(oclml_softmax(ctx, x, y));
    alarm(0);
    ASSERT_OK(oclml_tensor_read(y, got, 16));
    for (int i = 0; i < 16; i++) ck_assert_float_eq_tol(got[i], 0.125f, 1e-6f);
    oclml_tensor_destroy(x);
    oclml_tensor_destroy(y);
    oclml_ctx_destroy(ctx);
    ck_assert_int_eq(unlink(fifo), 0); /* no FIFO left for a later reader of the build tree */
}
END_TEST

START_TEST(build_options_from_environment) {
    char dir[1024];
    test_tmpdir(dir, sizeof dir, "opts");
    test_write_file(dir, "needs_define.cl", GOOD);
    oclml_ctx *ctx = ctx_with_path(dir);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "needs_define.cl", NULL, NULL), OCLML_ERR_BUILD_FAILED);
    oclml_ctx_destroy(ctx);
    setenv("OCLML_BUILD_OPTIONS", "-DOCLML_TEST_VALUE=42", 1);
    ctx = ctx_with_path(dir);
    ASSERT_OK(oclml_ctx_build_file(ctx, "needs_define.cl", NULL, NULL));
    oclml_ctx_destroy(ctx);
    unsetenv("OCLML_BUILD_OPTIONS");
}
END_TEST

/* Build options reach the driver only well formed: a bare -D once crashed PoCL inside
 * clBuildProgram. Refused at context creation (environment) or at the call (argument). */
START_TEST(malformed_build_options_refused) {
    static const char *bad[] = {"-D", "-DX=1 -D", "-D=1", "-DA='b c'", "DFOO", "-I"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("OCLML_BUILD_OPTIONS", bad[i], 1);
        oclml_ctx_config o;
        oclml_ctx_config_init(&o);
        oclml_ctx *ctx = NULL;
        char err[1024];
        ck_assert_int_eq(oclml_ctx_create(&ctx, &o, err, sizeof err), OCLML_ERR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(err, "malformed") != NULL, "%s: %s", bad[i], err);
        unsetenv("OCLML_BUILD_OPTIONS");
        ASSERT_STATUS(oclml_ctx_build_file(T, "memory.cl", bad[i], NULL),
                      OCLML_ERR_INVALID_ARGUMENT);
    }
    ASSERT_OK(oclml_ctx_build_file(T, "memory.cl", "-DFOO=1 -cl-fast-relaxed-math", NULL));
}
END_TEST

/* A kernel directory that others can write is skipped (as the disk cache refuses one), and the
 * error names it as skipped. */
START_TEST(writable_kernel_dir_skipped) {
    char dir[1024];
    test_tmpdir(dir, sizeof dir, "open");
    test_write_file(dir, "custom.cl", GOOD);
    chmod(dir, 0777);
    oclml_ctx *ctx = ctx_with_path(dir);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "custom.cl", "-DOCLML_TEST_VALUE=1", NULL),
                  OCLML_ERR_KERNEL_NOT_FOUND);
    ck_assert_msg(strstr(oclml_ctx_last_error(ctx), "writable by others") != NULL, "%s",
                  oclml_ctx_last_error(ctx));
    chmod(dir, 0755);
    ASSERT_OK(oclml_ctx_build_file(ctx, "custom.cl", "-DOCLML_TEST_VALUE=1", NULL));
    oclml_ctx_destroy(ctx);
}
END_TEST

/* A kernel directory that is a symbolic link is skipped however the path spells it (as the disk
 * cache refuses one): the link itself, with trailing slashes, "." or "name/.." after it, or a
 * "link/.." whose ".." would leave the link's target. The real directory in those spellings
 * still works. */
START_TEST(symlinked_kernel_dir_skipped) {
    char dir[1024], link[1100], sub[1100], path[1300];
    test_tmpdir(dir, sizeof dir, "linked");
    test_write_file(dir, "custom.cl", GOOD);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    test_write_file(sub, "custom.cl", GOOD);
    snprintf(link, sizeof link, "%s-link", dir);
    ck_assert_int_eq(symlink(dir, link), 0);
    static const char *const refused[] = {
        "",        "/",        "//",        "/.",        "/./",           "/./.",
        "/sub/..", "/sub/../", "/sub/../.", "/sub/./..", "/sub/../sub/.."};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(path, sizeof path, "%s%s", link, refused[i]);
        oclml_ctx *ctx = ctx_with_path(path);
        ASSERT_STATUS(oclml_ctx_build_file(ctx, "custom.cl", "-DOCLML_TEST_VALUE=1", NULL),
                      OCLML_ERR_KERNEL_NOT_FOUND);
        const char *e = oclml_ctx_last_error(ctx);
        ck_assert_msg(strstr(e, "(skipped: a symbolic link)") != NULL, "%s: %s", path, e);
        oclml_ctx_destroy(ctx);
    }
    /* "dir/sub/link/.." is the parent of the link's target to the system, "dir/sub" as text:
     * refused rather than read either way. */
    char inner[1200];
    snprintf(inner, sizeof inner, "%s/back", sub);
    ck_assert_int_eq(symlink(dir, inner), 0);
    snprintf(path, sizeof path, "%s/..", inner);
    oclml_ctx *ctx = ctx_with_path(path);
    ASSERT_STATUS(oclml_ctx_build_file(ctx, "custom.cl", "-DOCLML_TEST_VALUE=1", NULL),
                  OCLML_ERR_KERNEL_NOT_FOUND);
    ck_assert_msg(strstr(oclml_ctx_last_error(ctx), "symbolic link") != NULL, "%s",
                  oclml_ctx_last_error(ctx));
    oclml_ctx_destroy(ctx);
    /* The directory itself, however spelled, is used. */
    static const char *const used[] = {"/.", "/./", "/sub/..", "/sub/../", "/sub/./../."};
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++) {
        snprintf(path, sizeof path, "%s%s", dir, used[i]);
        ctx = ctx_with_path(path);
        ASSERT_OK(oclml_ctx_build_file(ctx, "custom.cl", "-DOCLML_TEST_VALUE=1", NULL));
        oclml_ctx_destroy(ctx);
    }
}
END_TEST

START_TEST(memory_cache_hits) {
    oclml_ctx *ctx = ctx_with_path(NULL);
    oclml_cache_info c0, c1, c2;
    oclml_ctx_cache_info(ctx, &c0);
    ck_assert_int_eq(c0.enabled, 0);
    ck_assert_ptr_nonnull(strstr(c0.disabled_reason, "empty"));
    double cold = 0, warm = 0;
    ASSERT_OK(oclml_ctx_build_file(ctx, "memory.cl", NULL, &cold));
    oclml_ctx_cache_info(ctx, &c1);
    ASSERT_OK(oclml_ctx_build_file(ctx, "memory.cl", NULL, &warm));
    oclml_ctx_cache_info(ctx, &c2);
    ck_assert_uint_eq(c1.builds, c0.builds + 1);
    ck_assert_uint_eq(c2.builds, c1.builds);
    ck_assert_uint_eq(c2.memory_hits, c1.memory_hits + 1);
    ck_assert_msg(warm < cold, "memory hit (%g ms) not faster than the build (%g ms)", warm, cold);
    /* Other options are another program. */
    ASSERT_OK(oclml_ctx_build_file(ctx, "memory.cl", "-DUNUSED_OPTION=1", NULL));
    oclml_ctx_cache_info(ctx, &c1);
    ck_assert_uint_eq(c1.builds, c2.builds + 1);
    oclml_ctx_destroy(ctx);
}
END_TEST

typedef struct listing {
    int n, memory, common;
} listing;

static void count_file(void *user, const char *file, const char *dir) {
    listing *l = user;
    l->n++;
    l->memory += !strcmp(file, "memory.cl");
    l->common += !strcmp(file, "common.h") || !strcmp(file, "common.cl");
}

static void count_progress(void *user, const char *op, const char *variant, double ms, size_t done,
                           size_t total) {
    size_t *calls = user;
    ck_assert_uint_eq(done, *calls + 1);
    ck_assert_uint_le(done, total);
    ck_assert_ptr_nonnull(op);
    ck_assert_ptr_nonnull(variant);
    ck_assert(ms >= 0);
    (*calls)++;
}

START_TEST(kernel_files_and_prewarm) {
    listing l = {0};
    ASSERT_OK(oclml_ctx_kernel_files(T, count_file, &l));
    ck_assert_int_eq(l.memory, 1);
    ck_assert_int_eq(l.common, 0); /* helpers are headers, not kernel files */
    ASSERT_STATUS(oclml_ctx_kernel_files(T, NULL, NULL), OCLML_ERR_NULL_POINTER);
    /* A helper header is not a kernel file. */
    ASSERT_STATUS(oclml_ctx_build_file(T, "common.h", NULL, NULL), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_ctx_build_file(T, "common.cl", NULL, NULL), OCLML_ERR_KERNEL_NOT_FOUND);

    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.cache_dir = "";
    oclml_ctx *ctx = test_ctx_new(&o);
    oclml_cache_info c0, c1;
    size_t calls = 0;
    ASSERT_OK(oclml_ctx_prewarm(ctx, "fill,copy", 2, count_progress, &calls));
    ck_assert_uint_eq(calls, 2); /* one program each */
    oclml_ctx_cache_info(ctx, &c0);
    ck_assert_uint_eq(c0.builds, 2);
    size_t n = 5;
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_create(ctx, 1, &n, &t));
    ASSERT_OK(oclml_fill(ctx, t, 1.0f));
    oclml_ctx_cache_info(ctx, &c1);
    ck_assert_uint_eq(c1.builds, c0.builds); /* the op paid no compile */
    ck_assert_uint_eq(c1.memory_hits, c0.memory_hits + 1);
    /* Prewarming again builds nothing; an unknown op is refused before anything is built. */
    calls = 0;
    ASSERT_OK(oclml_ctx_prewarm(ctx, "fill", 0, count_progress, &calls));
    ck_assert_uint_eq(calls, 1);
    ASSERT_STATUS(oclml_ctx_prewarm(ctx, "fill,no_such_op", 0, NULL, NULL),
                  OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(ctx), "no_such_op"));
    oclml_tensor_destroy(t);
    oclml_ctx_destroy(ctx);
}
END_TEST

/* A row op compiles the one variant it runs: one program, and the next row length of another
 * variant one more. */
START_TEST(one_variant_per_call) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.cache_dir = "";
    oclml_ctx *ctx = test_ctx_new(&o);
    size_t shape[2] = {3, 40};
    oclml_tensor *x, *y;
    ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &x));
    ASSERT_OK(oclml_tensor_create(ctx, 2, shape, &y));
    ASSERT_OK(oclml_fill(ctx, x, 1.0f));
    oclml_cache_info c0, c1, c2;
    oclml_ctx_cache_info(ctx, &c0);
    ASSERT_OK(oclml_softmax(ctx, x, y));
    oclml_ctx_cache_info(ctx, &c1);
    ck_assert_uint_eq(c1.builds, c0.builds + 1);
    ASSERT_OK(oclml_softmax(ctx, x, y));
    oclml_ctx_cache_info(ctx, &c2);
    ck_assert_uint_eq(c2.builds, c1.builds);
    oclml_tensor_destroy(x);
    oclml_tensor_destroy(y);
    oclml_ctx_destroy(ctx);
}
END_TEST

/* The tuning option: known keys with valid values are taken and listed with their source;
 * unknown keys and bad values make context creation fail with a clear error. */
static void find_key(void *user, const char *key, const char *value, const char *source,
                     const char *help) {
    char *out = user;
    if (!strcmp(key, "rssm.split")) snprintf(out, 128, "%s %s", value, source);
    ck_assert_ptr_nonnull(help);
}

START_TEST(tuning_option) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.tuning = "rssm.split=3, gru.tile=2:2:2:1:2";
    oclml_ctx *ctx = test_ctx_new(&o);
    char seen[128] = "";
    ASSERT_OK(oclml_ctx_tuning(ctx, find_key, seen));
    ck_assert_str_eq(seen, "3 tuning option");
    oclml_ctx_destroy(ctx);
    static const char *bad[] = {"rssm.splitt=3", "rssm.split=abc", "rssm.split=-1",
                                "gru.tile=1:2",  "rssm.split",     "rssm.guard=2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[1024];
        o.tuning = bad[i];
        ctx = NULL;
        ck_assert_int_eq(oclml_ctx_create(&ctx, &o, err, sizeof err), OCLML_ERR_INVALID_ARGUMENT);
        ck_assert_ptr_null(ctx);
        ck_assert_msg(strstr(err, "rssm") || strstr(err, "gru"), "error should name the key: %s",
                      err);
    }
    /* $OCLML_TUNE applies when the option is not given (read once, at creation). */
    setenv("OCLML_TUNE", "rssm.split=5", 1);
    o.tuning = NULL;
    ctx = test_ctx_new(&o);
    ASSERT_OK(oclml_ctx_tuning(ctx, find_key, seen));
    ck_assert_str_eq(seen, "5 OCLML_TUNE");
    oclml_ctx_destroy(ctx);
    unsetenv("OCLML_TUNE");
    /* Options without struct_size (not filled by oclml_ctx_config_init) are refused. */
    oclml_ctx_config raw;
    memset(&raw, 0, sizeof raw);
    ck_assert_int_eq(oclml_ctx_create(&ctx, &raw, NULL, 0), OCLML_ERR_INVALID_ARGUMENT);
}
END_TEST

int main(void) {
    Suite *s = suite_create("program");
    TCase *tc = tcase_create("program");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_test(tc, option_path_comes_first);
    tcase_add_test(tc, missing_file_names_searched_paths);
    tcase_add_test(tc, current_directory_is_never_searched);
    tcase_add_test(tc, compile_error_gives_build_log);
    tcase_add_test(tc, broken_kernel_file_named_in_error);
    tcase_add_test(tc, fifo_kernel_file_passed_over);
    tcase_add_test(tc, build_options_from_environment);
    tcase_add_test(tc, malformed_build_options_refused);
    tcase_add_test(tc, writable_kernel_dir_skipped);
    tcase_add_test(tc, symlinked_kernel_dir_skipped);
    tcase_add_test(tc, memory_cache_hits);
    tcase_add_test(tc, kernel_files_and_prewarm);
    tcase_add_test(tc, one_variant_per_call);
    tcase_add_test(tc, tuning_option);
    suite_add_tcase(s, tc);
    return test_main(s);
}
