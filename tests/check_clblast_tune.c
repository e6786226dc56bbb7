/* Tuned CLBlast parameters (tuning keys clblast.*): applied at context creation and reported,
 * GEMMs right under them, bad sets refused (option) or ignored (file), the later context
 * winning on a device, and oclml-tune --quick writing a store that a new context loads. */
#include "testutil.h"

#include <stdbool.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <clblast_c.h>
#pragma GCC diagnostic pop

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Small valid sets (CLBlast's order: GEMMK:KREG:KWG:KWI:MDIMA:MDIMC:MWG:NDIMB:NDIMC:NWG:SA:SB:
 * STRM:STRN:VWM:VWN and KWID:MDIMAD:MDIMCD:NDIMBD:NDIMCD:PADA:PADB:VWMD:VWND:WGD). */
#define XGEMM_A "0:1:16:2:8:8:32:8:8:32:1:1:0:0:2:2"
#define XGEMM_B "0:1:16:2:8:8:32:8:8:32:0:0:1:1:4:4"
#define XGEMM_K1 "1:2:1:1:8:8:32:8:8:32:0:0:0:0:2:2" /* GEMMK 1: the library asks row-major */
#define DIRECT_A "2:8:8:8:8:1:1:2:2:16"
#define NONE                                                                                  \
    "clblast.xgemm=0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0,clblast.xgemm_direct=0:0:0:0:0:0:0:0:0:0," \
    "clblast.gemm_switch=0"

static oclml_ctx *ctx_with(const char *tuning, const char *cache_dir) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.tuning = tuning;
    o.cache_dir = cache_dir;
    return test_ctx_new(&o);
}

/* Whether CLBlast's kernels can run here at all (work-groups of 8 x 8; PoCL with
 * POCL_MAX_WORK_GROUP_SIZE=16 stands in for devices where they cannot, and GEMM runs on the own
 * kernels). There, a tuned set of 8 x 8 work-groups must be refused at context creation. */
static bool clblast_runs_here(void) {
    oclml_ctx *ctx = ctx_with(NONE, NULL); /* applies nothing: CLBlast's state stays untouched */
    oclml_device_info d;
    ASSERT_OK(oclml_ctx_device_info(ctx, &d));
    oclml_ctx_destroy(ctx);
    return d.max_work_group_size >= 64;
}

static void expect_refused(const char *tuning) {
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.tuning = tuning;
    oclml_ctx *ctx = NULL;
    char err[2048];
    ck_assert_int_eq(oclml_ctx_create(&ctx, &o, err, sizeof err), OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err, "larger than the device allows"), "%s", err);
}

static int active(const oclml_ctx *ctx, char *text, size_t len) {
    int on = -1;
    ASSERT_OK(oclml_ctx_clblast_tuning(ctx, &on, text, len));
    return on;
}

/* C = A B through CLBlast on the context's queue (the kernel oclml_gemm would pick, asked for
 * row-major where the library may ask for the swapped column-major product), and through
 * oclml_gemm, both against the double reference. */
static void check_gemm(oclml_ctx *ctx, size_t m, size_t n, size_t k) {
    float *a = test_floats(m * k), *b = test_floats(k * n), *c = test_floats(m * n);
    test_random(a, m * k, -1, 1);
    test_random(b, k * n, -1, 1);
    size_t ash[2] = {m, k}, bsh[2] = {k, n}, csh[2] = {m, n};
    oclml_ctx *saved = T;
    T = ctx;
    oclml_tensor *A = test_tensor_from(2, ash, a), *B = test_tensor_from(2, bsh, b);
    oclml_tensor *C = test_tensor(2, csh);
    T = saved;
    cl_mem am, bm, cm;
    size_t ao, bo, co;
    ASSERT_OK(oclml_tensor_buffer(A, &am, &ao));
    ASSERT_OK(oclml_tensor_buffer(B, &bm, &bo));
    ASSERT_OK(oclml_tensor_buffer(C, &cm, &co));
    cl_command_queue q;
    ASSERT_OK(oclml_ctx_cl_objects(ctx, NULL, NULL, &q));
    CLBlastStatusCode s =
        CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k, 1.0f,
                     am, ao / 4, k, bm, bo / 4, n, 0.0f, cm, co / 4, n, &q, NULL);
    ck_assert_msg(s == CLBlastSuccess, "CLBlastSgemm %zux%zux%zu: status %d", m, n, k, (int)s);
    double *ref = test_doubles(m * n);
    ref_gemm(0, 0, m, n, k, 1.0, a, b, 0.0, NULL, ref);
    test_read(C, c, m * n);
    char what[96];
    snprintf(what, sizeof what, "CLBlastSgemm %zux%zux%zu, tuned parameters", m, n, k);
    test_assert_close(what, c, ref, m * n, TOL_GEMM);
    ASSERT_OK(oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, A, B, 0.0f, C));
    test_read(C, c, m * n);
    snprintf(what, sizeof what, "oclml_gemm %zux%zux%zu, tuned parameters", m, n, k);
    test_assert_close(what, c, ref, m * n, TOL_GEMM);
    oclml_tensor_destroy(A);
    oclml_tensor_destroy(B);
    oclml_tensor_destroy(C);
    free(a);
    free(b);
    free(c);
    free(ref);
}

/* A tuning option's sets are in force and reported; products on both kernels (the switch at
 * 48: 100x70x90 on Xgemm, 20x30x10 on XgemmDirect) stay right. */
START_TEST(option_applied_and_gemm_right) {
    if (!clblast_runs_here()) {
        expect_refused("clblast.xgemm=" XGEMM_A);
        return;
    }
    oclml_ctx *ctx = ctx_with(
        "clblast.xgemm=" XGEMM_A ",clblast.xgemm_direct=" DIRECT_A ",clblast.gemm_switch=48", NULL);
    char text[512];
    ck_assert_int_eq(active(ctx, text, sizeof text), 1);
    ck_assert_msg(strstr(text, "Xgemm tuned from the tuning option: " XGEMM_A) &&
                      strstr(text, "XgemmDirect tuned from the tuning option: " DIRECT_A) &&
                      strstr(text, "GemmRoutine tuned from the tuning option: 48"),
                  "%s", text);
    check_gemm(ctx, 100, 70, 90);
    check_gemm(ctx, 20, 30, 10);
    oclml_ctx_destroy(ctx);
}
END_TEST

/* Under a GEMMK 1 set (whose kernel wants C row-major, so the library asks CLBlast for the
 * row-major product rather than the swapped column-major one) every transpose, with alpha and
 * beta, on the indirect kernel (the switch at 48), stays right. */
START_TEST(gemmk1_every_transpose) {
    if (!clblast_runs_here()) return;
    oclml_ctx *ctx = ctx_with("clblast.xgemm=" XGEMM_K1 ",clblast.gemm_switch=48", NULL);
    char text[512];
    ck_assert_int_eq(active(ctx, text, sizeof text), 1);
    ck_assert_msg(strstr(text, "Xgemm tuned from the tuning option: " XGEMM_K1), "%s", text);
    oclml_ctx *saved = T;
    T = ctx;
    for (int t = 0; t < 4; t++) test_gemm_case(t & 1, t >> 1, 100, 70, 90, 0.5f, -1.5f);
    T = saved;
    oclml_ctx_destroy(ctx);
}
END_TEST

/* All 0 leaves CLBlast's own; the later context on a device wins, and the earlier one says so. */
START_TEST(none_then_later_context_wins) {
    if (!clblast_runs_here()) {
        expect_refused("clblast.xgemm=" XGEMM_B);
        return;
    }
    oclml_ctx *none = ctx_with(NONE, NULL);
    char text[512];
    ck_assert_int_eq(active(none, text, sizeof text), 0);
    ck_assert_msg(strstr(text, "Xgemm CLBlast's own"), "%s", text);
    oclml_ctx *a = ctx_with("clblast.xgemm=" XGEMM_A, NULL);
    ck_assert_int_eq(active(a, text, sizeof text), 1);
    oclml_ctx *b = ctx_with("clblast.xgemm=" XGEMM_B, NULL);
    ck_assert_int_eq(active(b, text, sizeof text), 1);
    ck_assert_msg(strstr(text, "Xgemm tuned from the tuning option: " XGEMM_B), "%s", text);
    ck_assert_int_eq(active(a, text, sizeof text), 1);
    ck_assert_msg(strstr(text, "Xgemm tuned by another context in this process: " XGEMM_B), "%s",
                  text);
    /* A context asking for none leaves what is in force. */
    oclml_ctx *none2 = ctx_with(NONE, NULL);
    ck_assert_int_eq(active(none2, text, sizeof text), 1);
    ck_assert_int_eq(oclml_ctx_clblast_tuning(NULL, NULL, NULL, 0), OCLML_ERR_NULL_POINTER);
    oclml_ctx_destroy(none);
    oclml_ctx_destroy(none2);
    oclml_ctx_destroy(a);
    oclml_ctx_destroy(b);
}
END_TEST

/* Sets that break CLBlast's rules are refused at creation, naming the rule and the order. */
START_TEST(bad_option_refused) {
    static const struct {
        const char *tuning, *expect;
    } BAD[] = {
        {"clblast.xgemm=0:1:16:2:8:8:24:8:8:32:1:1:0:0:2:2", "powers of two"},
        {"clblast.xgemm=0:1:16:2:8:8:32:8:8:32:1:1:0:0:8:2", "MWG must be a multiple of MDIMC*VWM"},
        {"clblast.xgemm=0:1:16:32:8:8:32:8:8:32:1:1:0:0:2:2", "KWG must be a multiple of KWI"},
        {"clblast.xgemm=0:1:1024:2:8:128:128:8:64:64:0:0:0:0:1:1", "larger than the device"},
        {"clblast.xgemm_direct=2:8:8:8:8:1:1:4:4:16", "WGD must be a multiple of MDIMCD*VWMD"},
        {"clblast.xgemm_direct=2:8:8:8:8:2:1:2:2:16", "PADA and PADB must be 0 or 1"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        oclml_ctx_config o;
        oclml_ctx_config_init(&o);
        o.tuning = BAD[i].tuning;
        oclml_ctx *ctx = NULL;
        char err[1024];
        oclml_status st = oclml_ctx_create(&ctx, &o, err, sizeof err);
        ck_assert_msg(st == OCLML_ERR_INVALID_ARGUMENT && !ctx, "%s: %s", BAD[i].tuning,
                      oclml_status_name(st));
        ck_assert_msg(strstr(err, BAD[i].expect) && strstr(err, "clblast.xgemm") &&
                          strstr(err, "tuning option"),
                      "%s: %s", BAD[i].tuning, err);
    }
    /* The wrong count is the tuning table's own error. */
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.tuning = "clblast.xgemm=0:1:16";
    oclml_ctx *ctx = NULL;
    char err[1024];
    ck_assert_int_eq(oclml_ctx_create(&ctx, &o, err, sizeof err), OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err, "16 integers") && strstr(err, "GEMMK:KREG"), "%s", err);
}
END_TEST

/* The store of a device named device_name under the cache directory dir. */
static void store_path_of(const char *device_name, const char *dir, char *out, size_t len) {
    char name[200];
    size_t j = 0;
    for (const char *p = device_name; *p && j + 1 < sizeof name; p++)
        name[j++] = isalnum((unsigned char)*p) ? *p : '-';
    while (j > 0 && name[j - 1] == '-') j--;
    name[j] = '\0';
    snprintf(out, len, "%s/tuning/%s.jsonl", dir, name);
}

static void store_path(const oclml_ctx *ctx, const char *dir, char *out, size_t len) {
    oclml_device_info d;
    ASSERT_OK(oclml_ctx_device_info(ctx, &d));
    store_path_of(d.device_name, dir, out, len);
}

/* A bad set in a tuned-values file is skipped (CLBlast's own stay), not an error. */
START_TEST(bad_file_ignored) {
    char dir[1024], path[1400], sub[1100];
    test_tmpdir(dir, sizeof dir, "clblast-bad");
    snprintf(sub, sizeof sub, "%s/tuning", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    oclml_ctx *probe = ctx_with(NONE, NULL);
    store_path(probe, dir, path, sizeof path);
    oclml_ctx_destroy(probe);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"key\": \"clblast.xgemm\", \"value\": \"0:1:16:2:8:8:32:8:8:32:1:1:0:0:8:2\"}\n");
    fclose(f);
    /* The option names only the other keys, so the file's clblast.xgemm is what counts. */
    oclml_ctx *ctx =
        ctx_with("clblast.xgemm_direct=0:0:0:0:0:0:0:0:0:0,clblast.gemm_switch=0", dir);
    char text[512];
    ck_assert_int_eq(active(ctx, text, sizeof text), 0);
    oclml_ctx_destroy(ctx);
}
END_TEST

/* What the tool test learns from the device before running oclml-tune: whether CLBlast runs
 * here, and the store's path under dir. */
typedef struct tool_facts {
    int runs;
    char path[1400];
} tool_facts;

/* Learns them in a child process, so that this one has not opened the device when oclml-tune
 * runs: a GPU in exclusive-process mode (the H100 machine) stays held by a process that opened
 * it (CLBlast keeps its programs), and the tool then found no NVIDIA device and exited 1.
 * No Check assertions in the child: it reports through the pipe and its exit status. */
static tool_facts facts_in_child(const char *dir) {
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fd[0]);
        tool_facts f = {0};
        oclml_ctx_config o;
        oclml_ctx_config_init(&o);
        o.tuning = NONE; /* applies nothing: CLBlast's state stays untouched */
        oclml_ctx *ctx = NULL;
        oclml_device_info d;
        if (oclml_ctx_create(&ctx, &o, NULL, 0) || oclml_ctx_device_info(ctx, &d)) _exit(2);
        f.runs = d.max_work_group_size >= 64;
        store_path_of(d.device_name, dir, f.path, sizeof f.path);
        oclml_ctx_destroy(ctx);
        _exit(write(fd[1], &f, sizeof f) == (ssize_t)sizeof f ? 0 : 3);
    }
    close(fd[1]);
    tool_facts f;
    const ssize_t got = read(fd[0], &f, sizeof f);
    close(fd[0]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got == (ssize_t)sizeof f,
                  "the device probe's child failed (status %d)", status);
    return f;
}

/* oclml-tune --quick on this device writes a store; a context with that cache directory loads it
 * and has the values in force. */
START_TEST(tool_quick_store_loaded) {
    const char *build = getenv("OCLML_TEST_BUILDDIR");
    ck_assert_msg(build != NULL, "OCLML_TEST_BUILDDIR is not set");
    char dir[1024], path[1400], sub[1100], cmd[4096];
    test_tmpdir(dir, sizeof dir, "clblast-tune");
    snprintf(sub, sizeof sub, "%s/tuning", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    const tool_facts facts = facts_in_child(dir);
    const bool runs = facts.runs != 0;
    snprintf(path, sizeof path, "%s", facts.path);
    /* A line of another key survives the rewrite. */
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"key\": \"rssm.guard\", \"value\": \"1\"}\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s/oclml-tune' --quick --budget 20 --out '%s' > '%s/out.txt' 2>&1",
             build, path, dir);
    int rc = system(cmd);
    char out[8192] = "";
    snprintf(sub, sizeof sub, "%s/out.txt", dir);
    f = fopen(sub, "r");
    if (f) {
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    if (!runs) { /* no parameter set can run here: the tool says so and writes nothing */
        ck_assert_msg(rc != 0, "oclml-tune --quick succeeded where CLBlast cannot run:\n%s", out);
        return;
    }
    ck_assert_msg(rc == 0, "oclml-tune --quick failed (%d):\n%s", rc, out);
    ck_assert_msg(strstr(out, "written to"), "%s", out);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char store[8192];
    size_t n = fread(store, 1, sizeof store - 1, f);
    store[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(store, "\"key\": \"rssm.guard\""), "%s", store);
    /* Without an option naming them, the store's clblast values apply (over the shipped file). */
    oclml_ctx *ctx = ctx_with("rssm.guard=1", dir);
    char text[512];
    int on = active(ctx, text, sizeof text);
    ck_assert_msg(!strstr(store, "clblast.") || (on == 1 && strstr(text, "tuned file")),
                  "store:\n%s\nin force: %s", store, text);
    if (strstr(store, "clblast.xgemm\"")) check_gemm(ctx, 130, 70, 129);
    oclml_ctx_destroy(ctx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("clblast_tune");
    TCase *tc = tcase_create("clblast_tune");
    tcase_add_test(tc, option_applied_and_gemm_right);
    tcase_add_test(tc, gemmk1_every_transpose);
    tcase_add_test(tc, none_then_later_context_wins);
    tcase_add_test(tc, bad_option_refused);
    tcase_add_test(tc, bad_file_ignored);
    tcase_add_test(tc, tool_quick_store_loaded);
    suite_add_tcase(s, tc);
    return test_main(s);
}
