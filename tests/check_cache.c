/* The disk cache of program binaries, across processes: a hit in a second process, corrupted,
 * truncated and FIFO entries recovered, a changed option misses, unsafe directories refused, the size cap,
 * the directory's mode. Each build runs in a fresh process (tests/cache_client). */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct run_result {
    int status, enabled;
    unsigned long builds, hits, misses, evictions, entries, bytes;
    double ms;
    char reason[256];
} run_result;

static run_result client(const char *dir, const char *file, const char *options,
                         unsigned long cap) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/tests/cache_client' '%s' '%s' '%s' %lu",
             getenv("OCLML_TEST_BUILDDIR"), dir, file, options ? options : "", cap);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[1024] = "";
    char *got = fgets(line, sizeof line, p);
    pclose(p);
    run_result r = {0};
    ck_assert_msg(got && sscanf(line,
                                "status=%d enabled=%d builds=%lu hits=%lu misses=%lu evictions=%lu "
                                "entries=%lu bytes=%lu ms=%lf reason=%255[^\n]",
                                &r.status, &r.enabled, &r.builds, &r.hits, &r.misses, &r.evictions,
                                &r.entries, &r.bytes, &r.ms, r.reason) == 10,
                  "cache_client printed: %s", line);
    return r;
}

/* The one entry file in dir. */
static void entry_file(const char *dir, char *out, size_t len) {
    DIR *d = opendir(dir);
    struct dirent *e;
    out[0] = '\0';
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".bin")) snprintf(out, len, "%s/%s", dir, e->d_name);
    if (d) closedir(d);
    ck_assert_msg(out[0], "no cache entry in %s", dir);
}

START_TEST(hit_in_second_process) {
    char dir[1024];
    test_tmpdir(dir, sizeof dir, "disk");
    run_result a = client(dir, "memory.cl", NULL, 0);
    ck_assert_int_eq(a.status, 0);
    ck_assert_int_eq(a.enabled, 1);
    ck_assert_uint_eq(a.builds, 1);
    ck_assert_uint_eq(a.misses, 1);
    ck_assert_uint_eq(a.entries, 1);
    run_result b = client(dir, "memory.cl", NULL, 0);
    ck_assert_int_eq(b.status, 0);
    ck_assert_uint_eq(b.builds, 0);
    ck_assert_uint_eq(b.hits, 1);
    printf("memory.cl: cold build %.1f ms, disk hit %.1f ms\n", a.ms, b.ms);
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    /* A directory the cache creates itself is private. */
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    run_result c = client(sub, "memory.cl", NULL, 0);
    ck_assert_int_eq(c.enabled, 1);
    ck_assert_int_eq(stat(sub, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
}
END_TEST

typedef enum damage { CORRUPT, TRUNCATE, FIFO } damage;

static void damage_and_recover(damage how) {
    char dir[1024], entry[2048];
    test_tmpdir(dir, sizeof dir, how == TRUNCATE ? "trunc" : how == FIFO ? "fifo" : "corrupt");
    ck_assert_int_eq(client(dir, "memory.cl", NULL, 0).builds, 1);
    entry_file(dir, entry, sizeof entry);
    struct stat st;
    stat(entry, &st);
    if (how == FIFO) {
        /* Opening a FIFO for reading waits for a writer: the cache must not (cache_client's
         * alarm turns a hang into a failure). */
        ck_assert_int_eq(unlink(entry), 0);
        ck_assert_int_eq(mkfifo(entry, 0600), 0);
    } else if (how == TRUNCATE) {
        ck_assert_int_eq(truncate(entry, st.st_size / 2), 0);
    } else {
        FILE *f = fopen(entry, "r+b");
        fseek(f, st.st_size - 10, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, st.st_size - 10, SEEK_SET);
        fputc(ch ^ 0x5a, f);
        fclose(f);
    }
    run_result r = client(dir, "memory.cl", NULL, 0);
    ck_assert_int_eq(r.status, 0); /* the op still ran */
    ck_assert_uint_eq(r.evictions, 1);
    ck_assert_uint_eq(r.builds, 1);
    ck_assert_uint_eq(r.entries, 1);
    /* The rebuilt entry is good again. */
    run_result again = client(dir, "memory.cl", NULL, 0);
    ck_assert_uint_eq(again.hits, 1);
    ck_assert_uint_eq(again.builds, 0);
}

START_TEST(corrupted_entry_recovered) { damage_and_recover(CORRUPT); }
END_TEST

START_TEST(truncated_entry_recovered) { damage_and_recover(TRUNCATE); }
END_TEST

START_TEST(fifo_entry_recovered) { damage_and_recover(FIFO); }
END_TEST

START_TEST(changed_option_misses) {
    char dir[1024];
    test_tmpdir(dir, sizeof dir, "opts");
    ck_assert_uint_eq(client(dir, "probe.cl", "-DSOME_OPTION=1", 0).builds, 1);
    ck_assert_uint_eq(client(dir, "probe.cl", "-DSOME_OPTION=1", 0).hits, 1);
    run_result r = client(dir, "probe.cl", "-DSOME_OPTION=2", 0);
    ck_assert_uint_eq(r.builds, 1);
    ck_assert_uint_eq(r.hits, 0);
    ck_assert_uint_eq(r.entries, 2);
}
END_TEST

START_TEST(unsafe_directories_refused) {
    char dir[1024], link[1100];
    test_tmpdir(dir, sizeof dir, "unsafe");
    chmod(dir, 0777);
    run_result r = client(dir, "memory.cl", NULL, 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_int_eq(r.enabled, 0);
    ck_assert_ptr_nonnull(strstr(r.reason, "writable by others"));
    chmod(dir, 0700);
    snprintf(link, sizeof link, "%s-link", dir);
    ck_assert_int_eq(symlink(dir, link), 0);
    r = client(link, "memory.cl", NULL, 0);
    ck_assert_int_eq(r.enabled, 0);
    ck_assert_ptr_nonnull(strstr(r.reason, "symbolic link"));
    /* Trailing slashes, "." and "name/.." after the link once made lstat follow it; and a
     * "link/.." is refused, whose ".." leaves the link's target rather than the text's
     * directory. */
    char spelled[1200], sub[1100];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    static const char *const refused[] = {
        "/",       "//",       "/.",        "/./",        "/./.",
        "/sub/..", "/sub/../", "/sub/./..", "/sub/..//.", "/sub/../sub/..",
        "/.."};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(spelled, sizeof spelled, "%s%s", link, refused[i]);
        r = client(spelled, "memory.cl", NULL, 0);
        ck_assert_int_eq(r.status, 0);
        ck_assert_msg(!r.enabled && strstr(r.reason, "symbolic link"), "%s: enabled %d, %s",
                      spelled, r.enabled, r.reason);
    }
    /* The real directory in those spellings is used, and the entry lands in it. */
    static const char *const used[] = {"/.", "/./", "/sub/..", "/sub/./../."};
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++) {
        snprintf(spelled, sizeof spelled, "%s%s", dir, used[i]);
        r = client(spelled, "memory.cl", NULL, 0);
        ck_assert_msg(r.status == 0 && r.enabled, "%s: %s", spelled, r.reason);
    }
    char entry[2048];
    entry_file(dir, entry, sizeof entry);
    /* A path too long to hold is refused, not cut to another directory's name. */
    char longer[1400];
    int n = snprintf(longer, sizeof longer, "%s/", dir);
    while (n < 1100) n += snprintf(longer + n, sizeof longer - (size_t)n, "x");
    r = client(longer, "memory.cl", NULL, 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_int_eq(r.enabled, 0);
    ck_assert_ptr_nonnull(strstr(r.reason, "longer than"));
    if (geteuid() == 0) { /* only root can hand a directory to another user */
        ck_assert_int_eq(chown(dir, 65534, 65534), 0);
        r = client(dir, "memory.cl", NULL, 0);
        ck_assert_int_eq(r.enabled, 0);
        ck_assert_ptr_nonnull(strstr(r.reason, "another user"));
    }
    setenv("OCLML_CACHE_DIR", "", 1);
    r = client("-", "memory.cl", NULL, 0);
    ck_assert_int_eq(r.enabled, 0);
    ck_assert_int_eq(r.status, 0);
}
END_TEST

START_TEST(size_cap_evicts_oldest) {
    char dir[1024], sizing[1024];
    test_tmpdir(dir, sizeof dir, "cap");
    test_tmpdir(sizing, sizeof sizing, "capsize");
    unsigned long b_bytes = client(sizing, "probe.cl", NULL, 0).bytes;
    run_result a = client(dir, "memory.cl", NULL, 0);
    ck_assert_uint_eq(a.entries, 1);
    sleep(1); /* distinct modification times */
    /* Room for either entry but not both: adding probe.cl must evict the older memory.cl. */
    unsigned long cap = a.bytes + b_bytes - 1;
    ck_assert_uint_ge(cap, a.bytes > b_bytes ? a.bytes : b_bytes);
    run_result b = client(dir, "probe.cl", NULL, cap);
    ck_assert_int_eq(b.status, 0);
    ck_assert_uint_eq(b.entries, 1);
    ck_assert_uint_ge(b.evictions, 1);
    ck_assert_uint_eq(client(dir, "probe.cl", NULL, cap).hits, 1);
    ck_assert_uint_eq(client(dir, "memory.cl", NULL, cap).builds, 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("cache");
    tcase_add_test(tc, hit_in_second_process);
    tcase_add_test(tc, corrupted_entry_recovered);
    tcase_add_test(tc, truncated_entry_recovered);
    tcase_add_test(tc, fifo_entry_recovered);
    tcase_add_test(tc, changed_option_misses);
    tcase_add_test(tc, unsafe_directories_refused);
    tcase_add_test(tc, size_cap_evicts_oldest);
    suite_add_tcase(s, tc);
    return test_main(s);
}
