/* The op list (ops.def) as data: the public listing, the tuning keys core parses, and the
 * variant a row op plans for a shape. */
#include "ops/ops.h"
#include "ops/rows.h"

#include <stdio.h>

typedef struct op_entry {
    oclml_op_desc desc;
    oclml__warm_fn *warm;
} op_entry;

static const op_entry OPS[] = {
#define OCLML_OP(name, file, tunables, warm, summary) {{#name, file, tunables, summary}, warm},
#define OCLML_TUNABLE(key, n, min, max, def, help)
#include "ops/ops.def"
#undef OCLML_OP
#undef OCLML_TUNABLE
};

const oclml__tunable oclml__tunables[] = {
#define OCLML_OP(name, file, tunables, warm, summary)
#define OCLML_TUNABLE(key, n, min, max, d, help) \
    {#key, n, min, max, {d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d}, help},
#include "ops/ops.def"
#undef OCLML_OP
#undef OCLML_TUNABLE
    {NULL, 0, 0, 0, {0}, NULL}};

#define N_OPS (sizeof OPS / sizeof OPS[0])

oclml_status oclml_ops_list(void (*fn)(void *, const oclml_op_desc *), void *user) {
    if (!fn) return OCLML_ERR_NULL_POINTER;
    for (size_t i = 0; i < N_OPS; i++) fn(user, &OPS[i].desc);
    return OCLML_SUCCESS;
}

/* The op's warm planner, or NULL for an unknown name; *found tells the two apart. */
oclml__warm_fn *oclml__op_warm(const char *name, size_t len, bool *found) {
    for (size_t i = 0; i < N_OPS; i++)
        if (strlen(OPS[i].desc.name) == len && !strncmp(OPS[i].desc.name, name, len)) {
            *found = true;
            return OPS[i].warm;
        }
    *found = false;
    return NULL;
}

const char *oclml__op_name(size_t i) { return i < N_OPS ? OPS[i].desc.name : NULL; }

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
