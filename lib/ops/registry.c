/* The op list (ops.def) as data: the public listing, the tuning keys core parses, and the
 * variant a row op plans for a shape. */
#include "ops/ops.h"
#include "ops/rows.h"

#include <stdio.h>

typedef struct op_entry {
    const char *name, *kernel_files, *families, *summary;
    oclml__warm_fn *warm;
} op_entry;

static const op_entry OPS[] = {
#define OCLML_OP(name, files, families, warm, summary) {#name, files, families, summary, warm},
#define OCLML_TUNABLE(...)
#include "ops/ops.def"
#undef OCLML_OP
#undef OCLML_TUNABLE
};

enum { TUNE_user, TUNE_dev }; /* the audience column */
const oclml__tunable oclml__tunables[] = {
#define OCLML_OP(...)
#define OCLML_TUNABLE(family, id, key, audience, n, min, max, d, help)      \
    [OCLML__TUNE_##id] = {#key,                                             \
                          #family,                                          \
                          TUNE_##audience == TUNE_dev,                      \
                          n,                                                \
                          min,                                              \
                          max,                                              \
                          {d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d}, \
                          help},
#include "ops/ops.def"
#undef OCLML_OP
#undef OCLML_TUNABLE
    [OCLML__N_TUNABLES] = {NULL, NULL, false, 0, 0, 0, {0}, NULL}};
_Static_assert(sizeof oclml__tunables / sizeof oclml__tunables[0] == OCLML__N_TUNABLES + 1,
               "one table entry per key");

#define N_OPS (sizeof OPS / sizeof OPS[0])

/* An op's tuning keys, from its families: each family's keys in turn, in the table's order,
 * comma-separated. Every key joined fits in KEYS_TEXT bytes, so no op's list is cut short. */
enum {
    KEYS_TEXT = 1
#define OCLML_OP(...)
#define OCLML_TUNABLE(family, id, key, ...) +sizeof #key
#include "ops/ops.def"
#undef OCLML_OP
#undef OCLML_TUNABLE
};

static void keys_of(const char *families, char *out, size_t len) {
    size_t used = 0;
    out[0] = '\0';
    for (const char *s = families; *s;) {
        s += strspn(s, " ");
        const size_t n = strcspn(s, " ");
        for (size_t k = 0; n && oclml__tunables[k].key; k++)
            if (strlen(oclml__tunables[k].family) == n &&
                !strncmp(oclml__tunables[k].family, s, n) && used < len)
                used += (size_t)snprintf(out + used, len - used, "%s%s", used ? "," : "",
                                         oclml__tunables[k].key);
        s += n;
    }
}

static oclml_op_desc descs[N_OPS];
static char keys_text[N_OPS][KEYS_TEXT];
static pthread_once_t descs_once = PTHREAD_ONCE_INIT;

static void make_descs(void) {
    for (size_t i = 0; i < N_OPS; i++) {
        keys_of(OPS[i].families, keys_text[i], sizeof keys_text[i]);
        descs[i] = (oclml_op_desc){OPS[i].name, OPS[i].kernel_files, keys_text[i], OPS[i].summary};
    }
}

oclml_status oclml_ops_list(void (*fn)(void *, const oclml_op_desc *), void *user) {
    if (!fn) return OCLML_ERR_NULL_POINTER;
    pthread_once(&descs_once, make_descs);
    for (size_t i = 0; i < N_OPS; i++) fn(user, &descs[i]);
    return OCLML_SUCCESS;
}

const char *oclml__op_families(size_t i) { return i < N_OPS ? OPS[i].families : NULL; }

oclml__warm_fn *oclml__op_warm(const char *name, size_t len, bool *found) {
    for (size_t i = 0; i < N_OPS; i++)
        if (strlen(OPS[i].name) == len && !strncmp(OPS[i].name, name, len)) {
            *found = true;
            return OPS[i].warm;
        }
    *found = false;
    return NULL;
}

const char *oclml__op_name(size_t i) { return i < N_OPS ? OPS[i].name : NULL; }

oclml_status oclml_op_variant(oclml_ctx *ctx, const char *op, size_t rows, size_t cols, char *text,
                              size_t len) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (!op || !text || len == 0)
        return oclml__fail(ctx, OCLML_ERR_NULL_POINTER, "op or text buffer is NULL or empty");
    if (rows == 0 || cols == 0)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "rows and cols must be >= 1");
    if (!strcmp(op, "cross_entropy")) return oclml__xent_variant(ctx, rows, cols, text, len);
    bool found;
    oclml__warm_fn *warm = oclml__op_warm(op, strlen(op), &found);
    const oclml__row_family *f = warm == oclml__softmax_warm ? oclml__softmax_family(op)
                                 : warm == oclml__norm_warm  ? oclml__norm_family(op)
                                                             : NULL;
    if (!f) return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "no row op named '%s'", op);
    oclml__row_plan p;
    st = oclml__row_plan_for(ctx, f, rows, cols, cols % 4 == 0, &p);
    if (!st) snprintf(text, len, "%s", p.variant);
    return st;
}
