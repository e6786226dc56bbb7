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

typedef enum value_check { VALUE_OK, VALUE_MALFORMED, VALUE_OUT_OF_RANGE } value_check;

/* Parses "a:b:c" into the knob's integers; every one must be given and within bounds. */
static value_check parse_value(const oclml__tunable *t, const char *s, size_t n,
                               long out[OCLML__TUNE_MAX_INTS]) {
    char buf[256];
    if (n == 0 || n >= sizeof buf) return VALUE_MALFORMED;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *p = buf;
    bool in_range = true;
    for (unsigned i = 0; i < t->n; i++) {
        if (i && *p++ != ':') return VALUE_MALFORMED;
        if (!isdigit((unsigned char)*p) && *p != '-') return VALUE_MALFORMED;
        errno = 0;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return VALUE_MALFORMED;
        in_range &= !errno && v >= t->min && v <= t->max;
        out[i] = v;
        p = end;
    }
    if (*p != '\0') return VALUE_MALFORMED;
    return in_range ? VALUE_OK : VALUE_OUT_OF_RANGE;
}

/* Checks key=value against the table: on success the knob's index and integers; else why it is
 * refused, in a sentence that names the key and the value. known: whether an unknown key's
 * message lists the known ones (for the user's own option; a file's line may come from another
 * version, where the list is noise). */
static bool parse_entry(const char *key, size_t kn, const char *val, size_t vn, bool known,
                        int *index, long v[OCLML__TUNE_MAX_INTS], char *why, size_t why_len) {
    int i = find_key(key, kn);
    if (i < 0) {
        int used = snprintf(why, why_len, "unknown tuning key '%.*s'", (int)kn, key);
        for (int j = 0; known && oclml__tunables[j].key && used >= 0 && (size_t)used < why_len; j++)
            used += snprintf(why + used, why_len - (size_t)used, "%s%s%s",
                             j ? ", " : " (known: ", oclml__tunables[j].key,
                             oclml__tunables[j + 1].key ? "" : ")");
        return false;
    }
    const oclml__tunable *t = &oclml__tunables[i];
    value_check c = parse_value(t, val, vn, v);
    if (c == VALUE_OUT_OF_RANGE)
        snprintf(why, why_len, "value '%.*s' for %s out of range: %sfrom %ld to %ld (%s)", (int)vn,
                 val, t->key, t->n > 1 ? "each " : "", t->min, t->max, t->help);
    else if (c == VALUE_MALFORMED)
        snprintf(why, why_len,
                 "bad value '%.*s' for %s: %u integer%s from %ld to %ld, ':' between them (%s)",
                 (int)vn, val, t->key, t->n, t->n > 1 ? "s" : "", t->min, t->max, t->help);
    *index = i;
    return c == VALUE_OK;
}

static void set_knob(oclml_ctx *ctx, int i, const long v[OCLML__TUNE_MAX_INTS],
                     oclml__tune_source src) {
    memcpy(ctx->tune[i].v, v, sizeof ctx->tune[i].v);
    ctx->tune[i].source = src;
}

/* One key=value of the user's (the option or $OCLML_TUNE): a refused one fails the call. */
static oclml_status set_from(oclml_ctx *ctx, const char *key, size_t kn, const char *val, size_t vn,
                             oclml__tune_source src, const char *origin) {
    long v[OCLML__TUNE_MAX_INTS] = {0};
    int i;
    char why[1536];
    if (!parse_entry(key, kn, val, vn, true, &i, v, why, sizeof why))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "%s: %s", origin, why);
    set_knob(ctx, i, v, src);
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

/* Sets the knob of one line of a tuned-values file; false with the reason where it is skipped. */
static bool apply_line(oclml_ctx *ctx, char *line, oclml__tune_source src, char *why,
                       size_t why_len) {
    line += strspn(line, " \t");
    size_t n = strlen(line);
    while (n > 0 && strchr(" \t\r", line[n - 1])) line[--n] = '\0';
    const char *k, *v;
    size_t kn, vn;
    long val[OCLML__TUNE_MAX_INTS] = {0};
    int i;
    if (n < 2 || line[0] != '{' || line[n - 1] != '}')
        snprintf(why, why_len, "not a JSON object");
    else if (!json_field(line, "key", &k, &kn))
        snprintf(why, why_len, "no \"key\" string");
    else if (!json_field(line, "value", &v, &vn))
        snprintf(why, why_len, "no \"value\" string for %.*s", (int)kn, k);
    else if (parse_entry(k, kn, v, vn, false, &i, val, why, why_len)) {
        set_knob(ctx, i, val, src);
        return true;
    }
    return false;
}

/* A tuned-values file: one JSON object a line with "key" and "value" (other fields, such as the
 * measured figures, are for readers). A line that does not parse or names a key this version
 * does not know is skipped with one warning that says why: the file may come from another
 * version, and a bad line is no reason to refuse a context. Returns whether the file was read:
 * where there is none, nothing is said; where the path names something that is not a readable
 * regular file (a directory, a FIFO: reading one would wait for a writer forever), it is skipped
 * with a warning. */
static bool apply_file(oclml_ctx *ctx, const char *path, oclml__tune_source src) {
    size_t len;
    char why[1024];
    char *text = oclml__read_file(path, &len, why, sizeof why);
    if (!text) {
        if (errno != ENOENT)
            oclml__log(ctx, OCLML_LOG_WARN, "tuning file %s skipped: %s", path, why);
        return false;
    }
    oclml__log(ctx, OCLML_LOG_INFO, "tuned values from %s", path);
    unsigned line_no = 0;
    for (char *line = text; line && *line; line_no++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (line[strspn(line, " \t\r")] && !apply_line(ctx, line, src, why, sizeof why))
            oclml__log(ctx, OCLML_LOG_WARN, "%s:%u: tuning line skipped: %s", path, line_no + 1,
                       why);
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return true;
}

/* The shipped file: tuning/NAME beside the first kernel directory (the kernel_path option, then
 * $OCLML_KERNEL_PATH) that has one, as a source tree's cl/ has tuning/ beside it, else the
 * install's ($(pkgdatadir)/tuning, beside its cl/). Returns whether one was read. */
static bool apply_shipped_named(oclml_ctx *ctx, const char *name) {
    char path[1400];
    for (const char *s = ctx->kernel_path; s && *s;) {
        const char *colon = strchr(s, ':');
        size_t n = colon ? (size_t)(colon - s) : strlen(s);
        if (n > 0 && n < 1024) {
            snprintf(path, sizeof path, "%.*s/../tuning/%s", (int)n, s, name);
            if (apply_file(ctx, path, OCLML__TUNE_SHIPPED)) return true;
        }
        s = colon ? colon + 1 : NULL;
    }
    snprintf(path, sizeof path, "%s/tuning/%s", OCLML_DATA_DIR, name);
    return apply_file(ctx, path, OCLML__TUNE_SHIPPED);
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

long oclml__tune(const oclml_ctx *ctx, oclml__tune_key key, unsigned i) {
    return (unsigned)key < OCLML__N_TUNABLES && i < OCLML__TUNE_MAX_INTS ? ctx->tune[key].v[i] : 0;
}

oclml_status oclml_tuning_key_for_developers(const char *key, int *for_developers) {
    if (!key || !for_developers) return OCLML_ERR_NULL_POINTER;
    int i = find_key(key, strlen(key));
    if (i < 0) return OCLML_ERR_INVALID_ARGUMENT;
    *for_developers = oclml__tunables[i].developers;
    return OCLML_SUCCESS;
}
