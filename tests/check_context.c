/* Context manager: device selection (good and bad selectors), wrapping an application's OpenCL
 * objects, status codes, last-error text, log callback. */
#include "testutil.h"

#include <unistd.h>

#include <sys/stat.h>

#include <stdio.h>

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static oclml_status try_select(const char *sel, char *err, size_t len) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.device = sel;
    oclml_ctx *ctx = (oclml_ctx *)1;
    oclml_status st = oclml_ctx_create(&ctx, &o, err, len);
    if (!st) {
        ck_assert_ptr_nonnull(ctx);
        oclml_ctx_destroy(ctx);
    } else {
        ck_assert_ptr_null(ctx);
    }
    return st;
}

static int count_devices(cl_device_type type) {
    cl_platform_id p[16];
    cl_uint np = 0, total = 0;
    clGetPlatformIDs(16, p, &np);
    for (cl_uint i = 0; i < np && i < 16; i++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(p[i], type, 0, NULL, &nd) == CL_SUCCESS) total += nd;
    }
    return (int)total;
}

START_TEST(default_device_and_info) {
    unsetenv("OCLML_DEVICE");
    oclml_ctx *ctx = test_ctx_new(NULL);
    oclml_device_info d;
    ASSERT_OK(oclml_ctx_device_info(ctx, &d));
    ck_assert(strlen(d.device_name) > 0 && strlen(d.platform_name) > 0);
    ck_assert(d.compute_units > 0 && d.max_work_group_size > 0 && d.global_mem_bytes > 0);
    ck_assert_ptr_nonnull(strstr(d.selected_by, "default"));
    /* The default is the first GPU when there is one. */
    ck_assert_int_eq(d.is_gpu, count_devices(CL_DEVICE_TYPE_GPU) > 0);
    ASSERT_STATUS(oclml_ctx_device_info(ctx, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_ctx_cache_info(ctx, NULL), OCLML_ERR_NULL_POINTER);
    oclml_ctx_destroy(ctx);
}
END_TEST

START_TEST(good_selectors) {
    char err[4096];
    oclml_ctx *ctx = test_ctx_new(NULL);
    oclml_device_info d;
    oclml_ctx_device_info(ctx, &d);
    oclml_ctx_destroy(ctx);
    ASSERT_OK(try_select("0:0", err, sizeof err));
    ASSERT_OK(try_select(d.is_gpu ? "gpu" : "cpu", err, sizeof err));
    ASSERT_OK(try_select(d.is_gpu ? "GPU" : "CPU", err, sizeof err));
    /* A substring of the device name, in another case. */
    char part[8] = {0};
    for (int i = 0; i < 4 && d.device_name[i]; i++)
        part[i] = (char)toupper((unsigned char)d.device_name[i]);
    ASSERT_OK(try_select(part, err, sizeof err));
    /* The environment selects when the option does not; the option wins over it. */
    setenv("OCLML_DEVICE", "0:0", 1);
    ASSERT_OK(try_select(NULL, err, sizeof err));
    setenv("OCLML_DEVICE", "no-such-device-anywhere", 1);
    ASSERT_OK(try_select("0:0", err, sizeof err));
    unsetenv("OCLML_DEVICE");
}
END_TEST

START_TEST(bad_selectors_list_devices) {
    char err[4096];
    const char *bad[] = {"no-such-device-anywhere", "9:9", "0:99", "accelerator-xyz"};
    for (int i = 0; i < 4; i++) {
        ASSERT_STATUS(try_select(bad[i], err, sizeof err), OCLML_ERR_DEVICE_NOT_FOUND);
        ck_assert_msg(strstr(err, bad[i]) != NULL, "error does not name the selector: %s", err);
        ck_assert_msg(strstr(err, "0:0") != NULL, "error does not list the devices: %s", err);
    }
    if (count_devices(CL_DEVICE_TYPE_GPU) == 0) {
        ASSERT_STATUS(try_select("gpu", err, sizeof err), OCLML_ERR_DEVICE_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(err, "devices found"));
    }
    setenv("OCLML_DEVICE", "9:9", 1);
    ASSERT_STATUS(try_select(NULL, err, sizeof err), OCLML_ERR_DEVICE_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err, "OCLML_DEVICE"));
    unsetenv("OCLML_DEVICE");
    ASSERT_STATUS(oclml_ctx_create(NULL, NULL, err, sizeof err), OCLML_ERR_NULL_POINTER);
    /* A NULL error buffer is allowed. */
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.device = "9:9";
    oclml_ctx *ctx;
    ASSERT_STATUS(oclml_ctx_create(&ctx, &o, NULL, 0), OCLML_ERR_DEVICE_NOT_FOUND);
}
END_TEST

START_TEST(wrap_application_objects) {
    cl_platform_id p;
    cl_device_id dev;
    cl_int err;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    cl_context c = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_command_queue q = clCreateCommandQueue(c, dev, 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    char text[1024];
    oclml_ctx *ctx;
    ASSERT_OK(oclml_ctx_wrap(&ctx, c, dev, q, NULL, text, sizeof text));
    cl_context got_c;
    cl_command_queue got_q;
    oclml_ctx_cl_objects(ctx, &got_c, NULL, &got_q);
    ck_assert(got_c == c && got_q == q);
    /* An op through the wrapped context, on a buffer the application made. */
    cl_mem buf = clCreateBuffer(c, CL_MEM_READ_WRITE, 64 * sizeof(float), NULL, &err);
    size_t n = 64;
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_wrap(ctx, buf, 0, 1, &n, &t));
    ASSERT_OK(oclml_fill(ctx, t, 2.5f));
    float out[64];
    clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
    for (int i = 0; i < 64; i++) ck_assert(out[i] == 2.5f);
    /* A context with a live tensor (here a wrapped one) is not destroyed: the tensor stays
     * usable, and the context goes once the tensor has. */
    ck_assert_int_eq(oclml_ctx_destroy(ctx), OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(oclml_ctx_last_error(ctx), "1 tensor of this context still alive"), "%s",
                  oclml_ctx_last_error(ctx));
    ASSERT_OK(oclml_fill(ctx, t, -1.0f));
    clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
    ck_assert(out[0] == -1.0f && out[63] == -1.0f);
    oclml_tensor_destroy(t);
    ASSERT_OK(oclml_ctx_destroy(ctx));
    /* The application's objects outlive the library's context. */
    ck_assert_int_eq(clFinish(q), CL_SUCCESS);
    ck_assert_int_eq(clReleaseMemObject(buf), CL_SUCCESS);

    /* A queue of another context is refused. */
    cl_context c2 = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q2 = clCreateCommandQueue(c2, dev, 0, &err);
    ASSERT_STATUS(oclml_ctx_wrap(&ctx, c, dev, q2, NULL, text, sizeof text),
                  OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(text, "in-order queue"));
    ASSERT_STATUS(oclml_ctx_wrap(&ctx, NULL, dev, q, NULL, text, sizeof text),
                  OCLML_ERR_NULL_POINTER);
    clReleaseCommandQueue(q2);
    clReleaseContext(c2);
    clReleaseCommandQueue(q);
    clReleaseContext(c);
}
END_TEST

START_TEST(status_codes) {
    const oclml_status all[] = {
#define X(name, value, text) name,
        OCLML_STATUS_LIST(X)
#undef X
    };
    size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_ne(oclml_status_str(all[i]), "unknown status");
        ck_assert_str_ne(oclml_status_name(all[i]), "OCLML_STATUS_UNKNOWN");
        /* Library codes stay clear of OpenCL's (-1..-1100) and CLBlast's (-1024..-2050). */
        if (all[i] != OCLML_SUCCESS) ck_assert(all[i] <= -7000 && all[i] > -7100);
        for (size_t j = 0; j < i; j++) ck_assert(all[i] != all[j]);
    }
    ck_assert_str_eq(oclml_status_str((oclml_status)-11), "unknown status");
    ck_assert_str_eq(oclml_status_name(OCLML_ERR_BUILD_FAILED), "OCLML_ERR_BUILD_FAILED");
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", OCLML_VERSION_MAJOR, OCLML_VERSION_MINOR,
             OCLML_VERSION_PATCH);
    ck_assert_str_eq(oclml_version_string(), v);
    ck_assert_str_eq(oclml_ctx_last_error(NULL), "context is NULL");
    int code;
    ASSERT_STATUS(oclml_ctx_backend_error(NULL, &code), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_ctx_config_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_ctx_destroy(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_ctx_finish(NULL), OCLML_ERR_NULL_POINTER);
    oclml_cache_info ci;
    ASSERT_STATUS(oclml_ctx_cache_info(NULL, &ci), OCLML_ERR_NULL_POINTER);
    cl_context cc;
    ASSERT_STATUS(oclml_ctx_cl_objects(NULL, &cc, NULL, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_ctx_wrap(NULL, NULL, NULL, NULL, NULL, NULL, 0), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_ctx_device_info(NULL, NULL), OCLML_ERR_NULL_POINTER);
}
END_TEST

typedef struct log_record {
    int calls, errors;
    char last[512];
} log_record;

static void record_log(void *user, oclml_log_level level, const char *msg) {
    log_record *r = user;
    r->calls++;
    r->errors += level == OCLML_LOG_ERROR;
    snprintf(r->last, sizeof r->last, "%s", msg);
}

START_TEST(log_callback_and_last_error) {
    log_record rec = {0};
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.log_fn = record_log;
    o.log_user = &rec;
    oclml_ctx *ctx = test_ctx_new(&o);
    ck_assert_int_gt(rec.calls, 0); /* the device choice is logged */
    size_t zero = 0;
    oclml_tensor *t;
    ck_assert_int_eq(oclml_tensor_create(ctx, 1, &zero, &t), OCLML_ERR_INVALID_SHAPE);
    ck_assert_int_eq(rec.errors, 1);
    ck_assert_ptr_nonnull(strstr(rec.last, "dimension 0"));
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(ctx), "dimension 0"));
    /* The copy that threads should use: the same text, truncated and terminated. */
    char copy[8];
    ASSERT_OK(oclml_ctx_last_error_copy(ctx, copy, sizeof copy));
    ck_assert_int_eq(strncmp(copy, oclml_ctx_last_error(ctx), 7), 0);
    ck_assert_uint_eq(strlen(copy), 7);
    ck_assert_int_eq(oclml_ctx_last_error_copy(NULL, copy, sizeof copy), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_ctx_last_error_copy(ctx, NULL, 8), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_ctx_last_error_copy(ctx, copy, 0), OCLML_ERR_BUFFER_TOO_SMALL);
    /* A successful call clears the text. */
    ASSERT_OK(oclml_ctx_finish(ctx));
    ck_assert_str_eq(oclml_ctx_last_error(ctx), "");
    oclml_ctx_destroy(ctx);
}
END_TEST

static void count_op(void *user, const oclml_op_desc *op) {
    int *n = user;
    ck_assert_ptr_nonnull(op->name);
    ck_assert_ptr_nonnull(op->kernel_file);
    ck_assert_ptr_nonnull(op->tunables);
    ck_assert_ptr_nonnull(op->summary);
    (*n)++;
}

static void no_tunable(void *user, const char *key, const char *value, const char *source,
                       const char *help) {
    (void)user, (void)key, (void)value, (void)source, (void)help;
}

/* The listing functions: the op list, the capabilities, the tuning table; NULL arguments are
 * refused. */
START_TEST(op_list_caps_and_tuning) {
    int n = 0;
    ASSERT_OK(oclml_ops_list(count_op, &n));
    ck_assert_int_ge(n, 26);
    ck_assert_int_eq(oclml_ops_list(NULL, NULL), OCLML_ERR_NULL_POINTER);
    oclml_ctx *ctx = test_ctx_new(NULL);
    oclml_device_caps c;
    oclml_device_info d;
    ASSERT_OK(oclml_ctx_device_caps(ctx, &c));
    ASSERT_OK(oclml_ctx_device_info(ctx, &d));
    ck_assert_int_eq(c.is_gpu, d.is_gpu);
    ck_assert_uint_eq(c.compute_units, d.compute_units);
    ck_assert_uint_eq(c.max_work_group_size, d.max_work_group_size);
    ck_assert_uint_ge(c.simd_width, 1);
    ck_assert(!c.mma_tf32 || c.inline_ptx); /* tensor cores through PTX only */
    if (!c.is_gpu) ck_assert(!c.inline_ptx);
    ck_assert_int_eq(oclml_ctx_device_caps(NULL, &c), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_ctx_device_caps(ctx, NULL), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_ctx_tuning(NULL, no_tunable, NULL), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_ctx_tuning(ctx, NULL, NULL), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_ctx_prewarm(NULL, "fill", 0, NULL, NULL), OCLML_ERR_NULL_POINTER);
    oclml_ctx_destroy(ctx);
}
END_TEST

static void find_splitk(void *user, const char *key, const char *value, const char *source,
                        const char *help) {
    (void)help;
    if (!strcmp(key, "gemm.splitk")) snprintf(user, 128, "%s from %s", value, source);
}

/* The device's tuning-file stem: its name with anything but letters and digits turned into '-'
 * (as lib/core/tune.c names the files), no trailing '-'. */
static void device_file_stem(char *name, size_t len) {
    oclml_ctx *ctx = test_ctx_new(NULL);
    oclml_device_info d;
    ASSERT_OK(oclml_ctx_device_info(ctx, &d));
    oclml_ctx_destroy(ctx);
    size_t j = 0;
    for (const char *p = d.device_name; *p && j + 1 < len; p++)
        name[j++] = isalnum((unsigned char)*p) ? *p : '-';
    while (j > 0 && name[j - 1] == '-') j--;
    name[j] = '\0';
}

/* A shipped tuning file serves a device family: with no file of the device's own name, the name
 * cut back by its last '-'-part is found (PoCL's "pthread-<cpu>-<model>" takes pthread.jsonl). */
START_TEST(shipped_file_of_a_device_family) {
    char name[160];
    device_file_stem(name, sizeof name);
    char *cut = strrchr(name, '-');
    if (!cut) return; /* a one-part name has no family */
    char exact[1400], dir[1024], sub[1100], family[200];
    snprintf(exact, sizeof exact, "%s/tuning/%s.jsonl", getenv("OCLML_TEST_SRCDIR"), name);
    *cut = '\0';
    snprintf(family, sizeof family, "%s.jsonl", name);
    test_tmpdir(dir, sizeof dir, "family");
    snprintf(sub, sizeof sub, "%s/cl", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(sub, sizeof sub, "%s/tuning", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    test_write_file(sub, family, "{\"key\": \"gemm.splitk\", \"value\": \"7\"}\n");
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    snprintf(sub, sizeof sub, "%s/cl", dir);
    o.kernel_path = sub;
    oclml_ctx *ctx = test_ctx_new(&o);
    char got[128] = "";
    ASSERT_OK(oclml_ctx_tuning(ctx, find_splitk, got));
    oclml_ctx_destroy(ctx);
    if (access(exact, R_OK) != 0) /* the device's own file, where the tree ships one, wins */
        ck_assert_str_eq(got, "7 from shipped file");
}
END_TEST

/* Every message of a context's log, one a line, each behind its level's number. */
typedef struct log_lines {
    char text[16384];
    size_t used;
    int warnings, errors;
} log_lines;

static void keep_log(void *user, oclml_log_level level, const char *msg) {
    log_lines *l = user;
    l->warnings += level == OCLML_LOG_WARN;
    l->errors += level == OCLML_LOG_ERROR;
    if (l->used < sizeof l->text)
        l->used += (size_t)snprintf(l->text + l->used, sizeof l->text - l->used, "%d %s\n",
                                    (int)level, msg);
}

/* Warning lines (level OCLML_LOG_WARN) of the log that contain all of a, b and c. */
static int warnings_with(const log_lines *l, const char *a, const char *b, const char *c) {
    int n = 0;
    char prefix[8];
    snprintf(prefix, sizeof prefix, "%d ", (int)OCLML_LOG_WARN);
    for (const char *line = l->text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[2048];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        n += !strncmp(buf, prefix, strlen(prefix)) && strstr(buf, a) && strstr(buf, b) &&
             strstr(buf, c);
        line += len + (end != NULL);
    }
    return n;
}

/* Where a tuning file is looked up, something that is not a regular file (a FIFO, whose open
 * for reading would wait for a writer forever; a directory) is skipped with a warning, and the
 * lookup goes on to the next candidate. An alarm turns a regression into a failure, not a hang. */
START_TEST(non_regular_tuning_files_skipped) {
    char name[160];
    device_file_stem(name, sizeof name);
    char exact[200], family[200] = "", shipped[1400];
    snprintf(exact, sizeof exact, "%s.jsonl", name);
    snprintf(shipped, sizeof shipped, "%s/tuning/%s", getenv("OCLML_TEST_SRCDIR"), exact);
    char *cut = strrchr(name, '-');
    /* The device's own file, where the tree ships one, would win over the family's. */
    if (cut && access(shipped, R_OK) != 0) {
        *cut = '\0';
        snprintf(family, sizeof family, "%s.jsonl", name);
    }
    for (int fifo = 1; fifo >= 0; fifo--) {
        char dir[1024], sub[1100], cache[1100], path[2400];
        test_tmpdir(dir, sizeof dir, fifo ? "fifo" : "dirfile");
        snprintf(sub, sizeof sub, "%s/cl", dir);
        ck_assert_int_eq(mkdir(sub, 0700), 0);
        snprintf(sub, sizeof sub, "%s/tuning", dir);
        ck_assert_int_eq(mkdir(sub, 0700), 0);
        snprintf(cache, sizeof cache, "%s/cache", dir);
        ck_assert_int_eq(mkdir(cache, 0700), 0);
        snprintf(path, sizeof path, "%s/tuning", cache);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        /* The shipped file of the device's own name and the cache directory's tuned file. */
        const char *places[2] = {sub, path};
        char at[2][2600];
        for (int i = 0; i < 2; i++) {
            snprintf(at[i], sizeof at[i], "%s/%s", places[i], exact);
            ck_assert_int_eq(fifo ? mkfifo(at[i], 0600) : mkdir(at[i], 0700), 0);
        }
        /* Past the skipped shipped file, the family's is found. */
        if (family[0])
            test_write_file(sub, family, "{\"key\": \"gemm.splitk\", \"value\": \"7\"}\n");
        log_lines log = {0};
        oclml_ctx_config o;
        oclml_ctx_config_init(&o);
        snprintf(sub, sizeof sub, "%s/cl", dir);
        o.kernel_path = sub;
        o.cache_dir = cache;
        o.log_fn = keep_log;
        o.log_user = &log;
        alarm(120);
        oclml_ctx *ctx = test_ctx_new(&o);
        alarm(0);
        const char *kind = fifo ? "a FIFO" : "a directory";
        ck_assert_msg(warnings_with(&log, "skipped", exact, kind) == 2,
                      "expected one warning for each of the two places, naming %s:\n%s", kind,
                      log.text);
        ck_assert_int_eq(log.errors, 0);
        char got[128] = "";
        ASSERT_OK(oclml_ctx_tuning(ctx, find_splitk, got));
        if (family[0]) ck_assert_str_eq(got, "7 from shipped file");
        oclml_ctx_destroy(ctx);
        for (int i = 0; i < 2; i++) /* no FIFO left for a later reader of the build tree */
            ck_assert_int_eq(fifo ? unlink(at[i]) : rmdir(at[i]), 0);
    }
}
END_TEST

/* Each skipped line of a tuned-values file is one warning that says why (no error-level message:
 * a skipped line does not fail anything); good lines still apply. */
START_TEST(skipped_tuning_lines_warn_once_with_reason) {
    char name[160], dir[1024], store[1100], file[200];
    device_file_stem(name, sizeof name);
    snprintf(file, sizeof file, "%s.jsonl", name);
    test_tmpdir(dir, sizeof dir, "lines");
    snprintf(store, sizeof store, "%s/tuning", dir);
    ck_assert_int_eq(mkdir(store, 0700), 0);
    static const struct {
        const char *line, *reason;
    } BAD[] = {
        {"rssm.split=3", "not a JSON object"},
        {"{\"key\": \"rssm.splitt\", \"value\": \"3\"}", "unknown tuning key 'rssm.splitt'"},
        {"{\"key\": \"rssm.split\", \"value\": \"5000\"}", "out of range"},
        {"{\"key\": \"rssm.split\", \"value\": \"abc\"}", "bad value 'abc'"},
        {"{\"key\": \"rssm.split\", \"value\": 3}", "no \"value\" string"},
        {"{\"value\": \"3\"}", "no \"key\" string"},
    };
    const size_t n_bad = sizeof BAD / sizeof BAD[0];
    char text[2048] = "";
    size_t used = 0;
    for (size_t i = 0; i < n_bad; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s\n", BAD[i].line);
    snprintf(text + used, sizeof text - used, "\n{\"key\": \"gemm.splitk\", \"value\": \"6\"}\n");
    test_write_file(store, file, text);
    log_lines log = {0};
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.cache_dir = dir;
    o.log_fn = keep_log;
    o.log_user = &log;
    oclml_ctx *ctx = test_ctx_new(&o);
    ck_assert_msg(log.errors == 0, "a skipped line is no error:\n%s", log.text);
    ck_assert_msg(warnings_with(&log, "tuning line skipped", "", "") == (int)n_bad,
                  "expected %zu warnings:\n%s", n_bad, log.text);
    for (size_t i = 0; i < n_bad; i++) {
        char at[16];
        snprintf(at, sizeof at, ":%zu: ", i + 1);
        ck_assert_msg(warnings_with(&log, at, "tuning line skipped", BAD[i].reason) == 1,
                      "line %zu should be skipped for \"%s\":\n%s", i + 1, BAD[i].reason, log.text);
    }
    char got[128] = "";
    ASSERT_OK(oclml_ctx_tuning(ctx, find_splitk, got));
    ck_assert_str_eq(got, "6 from tuned file");
    oclml_ctx_destroy(ctx);
}
END_TEST

/* One API style: every parameter struct's init returns a status (NULL refused), and the former
 * names of the renamed structs fill the same bytes as the new ones. */
START_TEST(inits_and_former_names) {
    oclml_ctx_config cc, old_cc;
    oclml_rssm_params rp, old_rp;
    oclml_optim_config oc;
    oclml_dropout_params dp;
    oclml_conv2d_params cp;
    oclml_pool2d_params pp;
    oclml_loss_params lp;
    oclml_attention_params ap;
    memset(&old_cc, 0x5a, sizeof old_cc);
    memset(&old_rp, 0x5a, sizeof old_rp);
    ASSERT_OK(oclml_ctx_config_init(&cc));
    ASSERT_OK(oclml_ctx_options_init(&old_cc));
    ck_assert(memcmp(&cc, &old_cc, sizeof cc) == 0);
    ASSERT_OK(oclml_rssm_params_init(&rp));
    ASSERT_OK(oclml_rssm_config_init(&old_rp));
    ck_assert(memcmp(&rp, &old_rp, sizeof rp) == 0);
    ASSERT_OK(oclml_optim_config_init(&oc, OCLML_OPTIM_ADAM));
    ASSERT_OK(oclml_dropout_params_init(&dp));
    ASSERT_OK(oclml_conv2d_params_init(&cp));
    ASSERT_OK(oclml_pool2d_params_init(&pp));
    ASSERT_OK(oclml_loss_params_init(&lp));
    ASSERT_OK(oclml_attention_params_init(&ap));
    ck_assert(cc.struct_size == sizeof cc && rp.struct_size == sizeof rp &&
              oc.struct_size == sizeof oc && dp.struct_size == sizeof dp &&
              cp.struct_size == sizeof cp && pp.struct_size == sizeof pp &&
              lp.struct_size == sizeof lp && ap.struct_size == sizeof ap);
    ASSERT_STATUS(oclml_ctx_config_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_ctx_options_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_rssm_params_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_rssm_config_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_optim_config_init(NULL, OCLML_OPTIM_ADAM), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_dropout_params_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_conv2d_params_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_pool2d_params_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_loss_params_init(NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_attention_params_init(NULL), OCLML_ERR_NULL_POINTER);
}
END_TEST

int main(void) {
    Suite *s = suite_create("context");
    TCase *tc = tcase_create("context");
    tcase_add_test(tc, default_device_and_info);
    tcase_add_test(tc, good_selectors);
    tcase_add_test(tc, bad_selectors_list_devices);
    tcase_add_test(tc, wrap_application_objects);
    tcase_add_test(tc, status_codes);
    tcase_add_test(tc, log_callback_and_last_error);
    tcase_add_test(tc, op_list_caps_and_tuning);
    tcase_add_test(tc, shipped_file_of_a_device_family);
    tcase_add_test(tc, non_regular_tuning_files_skipped);
    tcase_add_test(tc, skipped_tuning_lines_warn_once_with_reason);
    tcase_add_test(tc, inits_and_former_names);
    suite_add_tcase(s, tc);
    return test_main(s);
}
