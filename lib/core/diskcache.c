/* On-disk cache of program binaries.
 *
 * An entry is <dir>/<hex key>.bin: a header (magic, payload length, SHA-256 of the payload, the
 * key) followed by the driver's binary. Everything is verified before the bytes reach
 * clCreateProgramWithBinary, because a truncated binary can crash a driver (PoCL 3.1 does).
 * Writes go to a temporary file renamed into place, so readers in other processes never see a
 * partial entry. The directory must be ours and private: one that is a symlink (however the path
 * spells it), owned by another user or writable by others turns the cache off, since a planted
 * binary would run as our code. */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "OCLMLPB1"
#define HEADER_BYTES (8 + 8 + 32 + 32)
#define DEFAULT_MAX_BYTES ((uint64_t)256 << 20)
/* A temporary file older than this was left by a writer that died. */
#define STALE_TMP_SECONDS 3600

static void disable(oclml_ctx *ctx, const char *fmt, const char *arg) {
    ctx->disk.enabled = false;
    snprintf(ctx->disk.disabled_reason, sizeof ctx->disk.disabled_reason, fmt, arg);
    oclml__log(ctx, OCLML_LOG_WARN, "disk cache off: %s", ctx->disk.disabled_reason);
}

/* mkdir -p with mode 0700 for every directory it creates. */
static int make_dirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0700) && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(buf, 0700) && errno != EEXIST) ? -1 : 0;
}

void oclml__diskcache_open(oclml_ctx *ctx, const char *dir_option, size_t max_bytes) {
    oclml__diskcache *d = &ctx->disk;
    d->max_bytes = max_bytes ? max_bytes : DEFAULT_MAX_BYTES;
    const char *dir = dir_option;
    const char *origin = "cache_dir option";
    if (!dir) {
        dir = getenv("OCLML_CACHE_DIR");
        origin = "OCLML_CACHE_DIR";
    }
    if (dir && !*dir) {
        disable(ctx, "disabled: %s is empty", origin);
        return;
    }
    char given[sizeof d->dir];
    int n;
    if (dir) {
        n = snprintf(given, sizeof given, "%s", dir);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && *xdg == '/')
            n = snprintf(given, sizeof given, "%s/oclml", xdg);
        else if (home && *home == '/')
            n = snprintf(given, sizeof given, "%s/.cache/oclml", home);
        else {
            disable(ctx, "%s", "no XDG_CACHE_HOME or HOME to place it in");
            return;
        }
    }
    /* A path that does not fit is refused, not cut short (a cut path names another directory). */
    if (n < 0 || (size_t)n >= sizeof given) {
        d->dir[0] = '\0';
        disable(ctx, "the cache directory's path is longer than %s characters", "1023");
        return;
    }
    /* The path as the directory it names (no ".", "..", or trailing slash after it), so that the
     * lstat below sees a symbolic link however it was spelled ("link/" or "link/." follow it). */
    const int bad = oclml__dir_path(given, d->dir, sizeof d->dir);
    if (bad) {
        disable(ctx, bad == ELOOP ? "%s is a symbolic link" : "cannot use %s", d->dir);
        return;
    }
    if (make_dirs(d->dir)) {
        disable(ctx, "cannot create %s", d->dir);
        return;
    }
    struct stat st;
    if (lstat(d->dir, &st)) {
        disable(ctx, "cannot stat %s", d->dir);
        return;
    }
    const char *unsafe = S_ISLNK(st.st_mode)              ? "%s is a symbolic link"
                         : !S_ISDIR(st.st_mode)           ? "%s is not a directory"
                         : st.st_uid != geteuid()         ? "%s is owned by another user"
                         : oclml__writable_by_others(&st) ? "%s is writable by others"
                                                          : NULL;
    if (unsafe) {
        disable(ctx, unsafe, d->dir);
        return;
    }
    d->enabled = true;
    d->disabled_reason[0] = '\0';
}

static void entry_path(const oclml_ctx *ctx, const uint8_t key[32], char *out, size_t len) {
    char hex[65];
    oclml__hex(key, 32, hex);
    snprintf(out, len, "%s/%s.bin", ctx->disk.dir, hex);
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool read_all(int fd, unsigned char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = read(fd, buf, len);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            return false;
        }
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

static bool write_all(int fd, const unsigned char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

void oclml__diskcache_evict(oclml_ctx *ctx, const uint8_t key[32]) {
    if (!ctx->disk.enabled) return;
    char path[1200];
    entry_path(ctx, key, path, sizeof path);
    unlink(path);
}

bool oclml__diskcache_load(oclml_ctx *ctx, const uint8_t key[32], unsigned char **bin,
                           size_t *len) {
    if (!ctx->disk.enabled) return false;
    char path[1200];
    entry_path(ctx, key, path, sizeof path);
    /* O_NONBLOCK: a FIFO planted under an entry's name would otherwise block the open until a
     * writer comes; its type is then refused on the descriptor. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    unsigned char header[HEADER_BYTES];
    const char *problem = NULL;
    unsigned char *payload = NULL;
    uint64_t n = 0;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode))
        problem = "not a regular file";
    else if ((size_t)st.st_size < HEADER_BYTES)
        problem = "truncated header";
    else if (!read_all(fd, header, HEADER_BYTES) || memcmp(header, MAGIC, 8))
        problem = "bad magic";
    else if ((n = get_u64(header + 8)) != (uint64_t)st.st_size - HEADER_BYTES || n == 0)
        problem = "length does not match the file";
    else if (memcmp(header + 48, key, 32))
        problem = "key mismatch";
    else if (!(payload = malloc(n)) || !read_all(fd, payload, n))
        problem = "read failed";
    else {
        uint8_t digest[32];
        oclml__sha256(payload, n, digest);
        if (memcmp(digest, header + 16, 32)) problem = "checksum mismatch";
    }
    close(fd);
    if (problem) {
        free(payload);
        oclml__log(ctx, OCLML_LOG_WARN, "disk cache entry %s evicted: %s", path, problem);
        unlink(path);
        oclml__count(ctx, &ctx->disk_evictions);
        return false;
    }
    utimensat(AT_FDCWD, path, NULL, 0); /* mark as recently used for eviction order */
    *bin = payload;
    *len = n;
    return true;
}

typedef struct entry_stat {
    char name[80];
    time_t mtime;
    uint64_t bytes;
} entry_stat;

static bool is_entry_name(const char *name) {
    size_t n = strlen(name);
    return n == 68 && !strcmp(name + 64, ".bin");
}

/* Lists the entries (and removes stale temporaries). Returns a malloc'd array. */
static entry_stat *scan(const oclml_ctx *ctx, size_t *count, uint64_t *bytes) {
    *count = 0;
    *bytes = 0;
    DIR *d = opendir(ctx->disk.dir);
    if (!d) return NULL;
    size_t cap = 64;
    entry_stat *list = malloc(cap * sizeof *list);
    struct dirent *ent;
    time_t now = time(NULL);
    while (list && (ent = readdir(d))) {
        char path[1200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", ctx->disk.dir, ent->d_name);
        if (!strncmp(ent->d_name, ".tmp-", 5)) {
            if (!lstat(path, &st) && now - st.st_mtime > STALE_TMP_SECONDS) unlink(path);
            continue;
        }
        if (!is_entry_name(ent->d_name) || lstat(path, &st) || !S_ISREG(st.st_mode)) continue;
        if (*count == cap) {
            entry_stat *bigger = realloc(list, 2 * cap * sizeof *list);
            if (!bigger) break;
            list = bigger;
            cap *= 2;
        }
        entry_stat *e = &list[(*count)++];
        snprintf(e->name, sizeof e->name, "%s", ent->d_name);
        e->mtime = st.st_mtime;
        e->bytes = (uint64_t)st.st_size;
        *bytes += e->bytes;
    }
    closedir(d);
    return list;
}

static int oldest_first(const void *a, const void *b) {
    const entry_stat *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

static void enforce_cap(oclml_ctx *ctx) {
    size_t count;
    uint64_t bytes;
    entry_stat *list = scan(ctx, &count, &bytes);
    if (!list) return;
    if (bytes > ctx->disk.max_bytes) {
        qsort(list, count, sizeof *list, oldest_first);
        for (size_t i = 0; i < count && bytes > ctx->disk.max_bytes; i++) {
            char path[1200];
            snprintf(path, sizeof path, "%s/%s", ctx->disk.dir, list[i].name);
            if (!unlink(path)) {
                bytes -= list[i].bytes;
                oclml__count(ctx, &ctx->disk_evictions);
            }
        }
    }
    free(list);
}

void oclml__diskcache_store(oclml_ctx *ctx, const uint8_t key[32], const unsigned char *bin,
                            size_t len) {
    if (!ctx->disk.enabled || len == 0) return;
    char tmp[1200], path[1200];
    snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", ctx->disk.dir);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        oclml__log(ctx, OCLML_LOG_WARN, "disk cache: cannot create a file in %s: %s", ctx->disk.dir,
                   strerror(errno));
        return;
    }
    unsigned char header[HEADER_BYTES];
    memcpy(header, MAGIC, 8);
    put_u64(header + 8, len);
    oclml__sha256(bin, len, header + 16);
    memcpy(header + 48, key, 32);
    bool ok = write_all(fd, header, HEADER_BYTES) && write_all(fd, bin, len);
    ok = (close(fd) == 0) && ok;
    entry_path(ctx, key, path, sizeof path);
    if (!ok || rename(tmp, path)) {
        oclml__log(ctx, OCLML_LOG_WARN, "disk cache: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return;
    }
    enforce_cap(ctx);
}

void oclml__diskcache_usage(const oclml_ctx *ctx, size_t *entries, uint64_t *bytes) {
    *entries = 0;
    *bytes = 0;
    if (!ctx->disk.enabled) return;
    free(scan(ctx, entries, bytes));
}
