/* Small helpers: strings, files, overflow-checked arithmetic, time. */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *oclml__strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

char *oclml__asprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static const char *not_regular(mode_t mode) {
    return S_ISDIR(mode)                    ? "a directory"
           : S_ISFIFO(mode)                 ? "a FIFO"
           : S_ISSOCK(mode)                 ? "a socket"
           : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
                                            : "a special file";
}

char *oclml__read_file(const char *path, size_t *len, char *why, size_t why_len) {
    char scratch[8];
    if (!why || !why_len) {
        why = scratch;
        why_len = sizeof scratch;
    }
    /* O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever if none
     * comes. The type is checked on the open descriptor, so nothing swapped in between a check
     * and the open is read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(why, why_len, "%s", strerror(e));
        errno = e;
        return NULL;
    }
    struct stat st;
    int e = 0;
    if (fstat(fd, &st)) {
        e = errno;
        snprintf(why, why_len, "%s", strerror(e));
    } else if (!S_ISREG(st.st_mode)) {
        e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        snprintf(why, why_len, "%s, not a regular file", not_regular(st.st_mode));
    }
    if (e) {
        close(fd);
        errno = e;
        return NULL;
    }
    size_t cap = st.st_size > 0 && (uintmax_t)st.st_size < SIZE_MAX / 2 ? (size_t)st.st_size + 1
                                                                        : (size_t)1 << 16;
    size_t n = 0;
    char *buf = malloc(cap + 1);
    int failed = 0;
    while (buf) {
        if (n == cap) { /* the file grew since fstat, or its size was not known */
            char *bigger = cap <= SIZE_MAX / 2 - 1 ? realloc(buf, 2 * cap + 1) : NULL;
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) failed = errno;
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (!buf) {
        snprintf(why, why_len, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    if (failed) {
        free(buf);
        snprintf(why, why_len, "%s", strerror(failed));
        errno = failed;
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

bool oclml__mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

bool oclml__add_ok(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return false;
    *out = a + b;
    return true;
}

double oclml__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

bool oclml__writable_by_others(const struct stat *st) {
    return (st->st_mode & S_IWOTH) || ((st->st_mode & S_IWGRP) && st->st_gid != getegid());
}

int oclml__dir_path(const char *path, char *out, size_t len) {
    const bool absolute = path[0] == '/';
    const size_t root = absolute ? 1 : 0; /* out[0..root) is never removed */
    size_t n = 0;
    if (len < 2) return ENAMETOOLONG;
    if (absolute) out[n++] = '/';
    out[n] = '\0';
    for (const char *p = path; *p;) {
        while (*p == '/') p++;
        const size_t c = strcspn(p, "/");
        const bool dot = c == 1 && p[0] == '.', dotdot = c == 2 && p[0] == '.' && p[1] == '.';
        if (c == 0 || dot) {
            p += c;
            continue;
        }
        if (dotdot) {
            size_t start = n; /* the last component of out */
            while (start > root && out[start - 1] != '/') start--;
            const bool last_dotdot = n - start == 2 && out[start] == '.' && out[start + 1] == '.';
            if (n > root && !last_dotdot) {
                struct stat st;
                if (!lstat(out, &st) && S_ISLNK(st.st_mode)) return ELOOP;
                n = start > root ? start - 1 : start;
                out[n] = '\0';
                p += c;
                continue;
            }
            if (absolute && n == root) { /* "/.." is "/" */
                p += c;
                continue;
            }
        }
        const size_t sep = n > root ? 1 : 0;
        if (n + sep + c + 1 > len) return ENAMETOOLONG;
        if (sep) out[n++] = '/';
        memcpy(out + n, p, c);
        n += c;
        out[n] = '\0';
        p += c;
    }
    if (n == 0) out[n++] = '.', out[n] = '\0';
    return 0;
}
