/* The tuning table: one value per declared knob, with where it came from. Precedence, lowest
 * first: the op's built-in default, what the device's capabilities imply, the tuned-values file
 * shipped for this device, the one the tuning tool wrote in the cache directory, then the
 * context's `tuning` option (or $OCLML_TUNE when the option is NULL). Everything is read once,
 * at context creation; ops only look values up. */
#include "core/core.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef OCLML_DATA_DIR
#error "OCLML_DATA_DIR must be defined by the build ($(pkgdatadir))"
#endif

static const char *SOURCE_NAMES[] = {"default", "shipped file", "tuned file", "tuning option",
                                     "OCLML_TUNE"};

const char *oclml__tune_source_name(oclml__tune_source s) {
    return (unsigned)s < sizeof SOURCE_NAMES / sizeof SOURCE_NAMES[0] ? SOURCE_NAMES[s] : "?";
}

static int find_key(const char *key, size_t n) {
    for (int i = 0; oclml__tunables[i].key; i++)
        if (strlen(oclml__tunables[i].key) == n && !strncmp(oclml__tunables[i].key, key, n))
            return i;
    return -1;
}

/* Parses "a:b:c" into the knob's integers; every one must be given and within bounds. */
static bool parse_value(const oclml__tunable *t, const char *s, size_t n,
                        long out[OCLML__TUNE_MAX_INTS]) {
    char buf[256];
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *p = buf;
    for (unsigned i = 0; i < t->n; i++) {
        if (i && *p++ != ':') return false;
        if (!isdigit((unsigned char)*p) && *p != '-') return false;
        errno = 0;
        char *end;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < t->min || v > t->max) return false;
        out[i] = v;
        p = end;
    }
    return *p == '\0';
}

static oclml_status set_from(oclml_ctx *ctx, const char *key, size_t kn, const char *val, size_t vn,
                             oclml__tune_source src, const char *origin) {
    int i = find_key(key, kn);
    if (i < 0) {
        char known[1024];
        size_t used = 0;
        known[0] = '\0';
        for (int j = 0; oclml__tunables[j].key && used < sizeof known; j++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "",
                                     oclml__tunables[j].key);
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "%s: unknown tuning key '%.*s' (known: %s)", origin, (int)kn, key,
                           known);
    }
    const oclml__tunable *t = &oclml__tunables[i];
    long v[OCLML__TUNE_MAX_INTS] = {0};
    if (!parse_value(t, val, vn, v))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "%s: bad value '%.*s' for %s: %u integer%s from %ld to %ld, ':' between "
                           "them (%s)",
                           origin, (int)vn, val, t->key, t->n, t->n > 1 ? "s" : "", t->min, t->max,
                           t->help);
    memcpy(ctx->tune[i].v, v, sizeof v);
    ctx->tune[i].source = src;
    return OCLML_SUCCESS;
}

/* "key=value, key=value" (commas, semicolons or spaces between entries). */
static oclml_status apply_string(oclml_ctx *ctx, const char *s, oclml__tune_source src,
                                 const char *origin) {
    while (s && *s) {
        s += strspn(s, " ,;\t\n");
        if (!*s) break;
        size_t n = strcspn(s, " ,;\t\n");
        const char *eq = memchr(s, '=', n);
        if (!eq)
            return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "%s: '%.*s' is not key=value",
                               origin, (int)n, s);
        oclml_status st =
            set_from(ctx, s, (size_t)(eq - s), eq + 1, (size_t)(s + n - eq - 1), src, origin);
        if (st) return st;
        s += n;
    }
    return OCLML_SUCCESS;
}

/* The string value of "name": "..." in a JSON line (no escapes: keys and values are plain). */
static bool json_field(const char *line, const char *name, const char **val, size_t *n) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", name);
    const char *p = strstr(line, pat);
    if (!p) return false;
    p += strlen(pat);
    p += strspn(p, " \t");
    if (*p++ != ':') return false;
    p += strspn(p, " \t");
    if (*p++ != '"') return false;
    const char *q = strchr(p, '"');
    if (!q) return false;
    *val = p;
    *n = (size_t)(q - p);
    return true;
}

/* The file name of a device's tuned values: its name with anything but letters and digits
 * turned into '-', e.g. "NVIDIA-H100-80GB-HBM3.jsonl". */
static void device_file_name(const oclml_ctx *ctx, char *out, size_t len) {
    size_t j = 0;
    for (const char *p = ctx->info.device_name; *p && j + 7 < len; p++)
        out[j++] = isalnum((unsigned char)*p) ? *p : '-';
    while (j > 0 && out[j - 1] == '-') j--;
    snprintf(out + j, len - j, ".jsonl");
}

/* A tuned-values file: one JSON object a line with "key" and "value" (other fields, such as the
 * measured figures, are for readers). A line that does not parse or names a key this version
 * does not know is skipped with a warning: the file may come from another version. */
static void apply_file(oclml_ctx *ctx, const char *path, oclml__tune_source src) {
    size_t len;
    char *text = oclml__read_file(path, &len);
    if (!text) return;
    oclml__log(ctx, OCLML_LOG_INFO, "tuned values from %s", path);
    unsigned line_no = 0;
    for (char *line = text; line && *line; line_no++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        const char *k, *v;
        size_t kn, vn;
        if (line[strspn(line, " \t\r")]) {
            if (!json_field(line, "key", &k, &kn) || !json_field(line, "value", &v, &vn) ||
                set_from(ctx, k, kn, v, vn, src, path)) {
                oclml__log(ctx, OCLML_LOG_WARN, "%s:%u: tuning line skipped (%s)", path,
                           line_no + 1, oclml_ctx_last_error(ctx));
                oclml__clear_error(ctx);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
}

/* The shipped file: tuning/NAME beside the first kernel directory (the kernel_path option, then
 * $OCLML_KERNEL_PATH) that has one, as a source tree's cl/ has tuning/ beside it, else the
 * install's ($(pkgdatadir)/tuning, beside its cl/). Returns whether one was found. */
static bool apply_shipped_named(oclml_ctx *ctx, const char *name) {
    char path[1400];
    for (const char *s = ctx->kernel_path; s && *s;) {
        const char *colon = strchr(s, ':');
        size_t n = colon ? (size_t)(colon - s) : strlen(s);
        if (n > 0 && n < 1024) {
            snprintf(path, sizeof path, "%.*s/../tuning/%s", (int)n, s, name);
            if (access(path, R_OK) == 0) {
                apply_file(ctx, path, OCLML__TUNE_SHIPPED);
                return true;
            }
        }
        s = colon ? colon + 1 : NULL;
    }
    snprintf(path, sizeof path, "%s/tuning/%s", OCLML_DATA_DIR, name);
    if (access(path, R_OK) != 0) return false;
    apply_file(ctx, path, OCLML__TUNE_SHIPPED);
    return true;
}

/* Only one shipped file applies: the device's own name first, then that name cut back one
 * '-'-separated part at a time, so a family's file serves its members (PoCL names CPU devices
 * "pthread-<LLVM CPU>-<model>": pthread.jsonl serves any CPU it runs on; "NVIDIA-H100.jsonl"
 * would serve every H100 variant). */
static void apply_shipped(oclml_ctx *ctx, const char *file_name) {
    char name[160];
    snprintf(name, sizeof name, "%s", file_name);
    char *ext = strstr(name, ".jsonl");
    if (!ext) return;
    for (;;) {
        if (apply_shipped_named(ctx, name)) return;
        *ext = '\0';
        char *cut = strrchr(name, '-');
        if (!cut) return;
        snprintf(cut, sizeof name - (size_t)(cut - name), ".jsonl");
        ext = cut;
    }
}

oclml_status oclml__tune_init(oclml_ctx *ctx, const char *option) {
    size_t n = 0;
    while (oclml__tunables[n].key) n++;
    ctx->tune = calloc(n + 1, sizeof *ctx->tune);
    if (!ctx->tune) return oclml__fail(ctx, OCLML_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++)
        memcpy(ctx->tune[i].v, oclml__tunables[i].defaults, sizeof ctx->tune[i].v);
    char name[160], path[1400];
    device_file_name(ctx, name, sizeof name);
    apply_shipped(ctx, name);
    if (ctx->disk.enabled) {
        snprintf(path, sizeof path, "%s/tuning/%s", ctx->disk.dir, name);
        apply_file(ctx, path, OCLML__TUNE_FILE);
    }
    if (option) return apply_string(ctx, option, OCLML__TUNE_OPTION, "tuning option");
    const char *env = getenv("OCLML_TUNE");
    return env ? apply_string(ctx, env, OCLML__TUNE_ENV, "OCLML_TUNE") : OCLML_SUCCESS;
}

long oclml__tune(const oclml_ctx *ctx, const char *key, unsigned i) {
    int k = find_key(key, strlen(key));
    return k >= 0 && i < OCLML__TUNE_MAX_INTS ? ctx->tune[k].v[i] : 0;
}
