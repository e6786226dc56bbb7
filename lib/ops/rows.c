/* Row-kernel planning: choose work-items per row, register items per work-item and vector width
 * from the row length and the device's work-group limit; the variant's program; launches. */
#include "ops/ops.h"
#include "ops/rows.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Floats a work-item keeps in registers: beyond 32 the kernels would spill. Below 16 the
 * planner widens rows over more work-items instead, for more parallelism per row. */
#define MAX_FLOATS 32
#define TARGET_FLOATS 16
/* Work-items per work-group when one row needs fewer: several rows share a group. */
#define ROWS_GROUP 256
/* CPUs (ROW_SOLO): values a work-item keeps of its row over all its arrays (32 KiB: the row
 * stays in the core's cache between the kernel's passes), and rows a work-group takes (enough
 * groups for every core at a few thousand rows). */
#define SOLO_FLOATS 8192
#define SOLO_GROUP 16

/* Long rows: the chunked path with scalar coalesced access. */
static void plan_chunked(const oclml_ctx *ctx, size_t max_wg, unsigned arrays, oclml_dtype dtype,
                         oclml__row_plan *p) {
    p->long_rows = true;
    p->local = oclml__pow2_floor(max_wg < ROWS_GROUP ? max_wg : ROWS_GROUP);
    /* A 16-bit row's chunks twice as long, for the same reason (one row array only: the
     * backwards' two already fill the registers). */
    const long li =
        dtype == OCLML_FLOAT32 ? 0 : oclml__tune(ctx, OCLML__TUNE_ROWS_LP_LONG_ITEMS, 0);
    p->long_items = dtype == OCLML_FLOAT32 || arrays > 1 ? OCLML_LONG_ITEMS
                    : li > 0                             ? (unsigned)li
                                                         : 2 * OCLML_LONG_ITEMS;
    if (p->long_items != OCLML_LONG_ITEMS)
        snprintf(p->long_defines, sizeof p->long_defines, "-DOCLML_LONG_ITEMS=%u", p->long_items);
    size_t chunk = p->local * p->long_items;
    p->nchunks = (unsigned)((p->cols + chunk - 1) / chunk);
    p->global[0] = (size_t)p->nchunks * p->local;
    p->global[1] = p->rows;
    p->G = (unsigned)p->local;
    snprintf(p->variant, sizeof p->variant, "chunked: %u chunks of %zu per row, 2 reads",
             p->nchunks, chunk);
}

static oclml_status plan_within(const oclml_ctx *ctx, size_t rows, size_t cols, bool vec4_ok,
                                unsigned arrays, size_t wg_cap, oclml_dtype dtype,
                                oclml__row_plan *p) {
    memset(p, 0, sizeof *p);
    if (rows > UINT_MAX || cols > UINT_MAX / 2)
        return oclml__fail(
            ctx, OCLML_ERR_INVALID_SHAPE,
            "%zu rows of %zu columns exceed the kernels' 32-bit row and column indexing", rows,
            cols);
    p->rows = rows;
    p->cols = cols;
    size_t max_wg = ctx->caps.max_work_group_size < wg_cap ? ctx->caps.max_work_group_size : wg_cap;
    size_t max_g = oclml__pow2_floor(max_wg < 1024 ? max_wg : 1024);
    /* Short rows get few work-items each: the segment's reduction costs a barrier per
     * halving, so 8 lanes holding 4 float4 each beat 32 lanes holding one (rows are contiguous,
     * so a warp still reads whole 128-byte lines). A CPU runs a work-group as a loop: one lane. */
    size_t min_g = ctx->caps.is_gpu ? 8 : 1;
    if (min_g > max_g) min_g = max_g;
    unsigned vec = (vec4_ok && cols % 4 == 0) ? 4 : 1;
    size_t units = cols / vec;
    if (oclml__cpu_layout(ctx) && units * vec <= SOLO_FLOATS / arrays) {
        /* One work-item a row: its values in a private array, its reductions plain loops. */
        size_t it = 1;
        while (it < units) it *= 2;
        p->G = 1;
        p->items = (unsigned)it;
        p->vec = vec;
        p->solo = true;
        p->local = max_wg < SOLO_GROUP ? max_wg : SOLO_GROUP;
        p->global[0] = (rows + p->local - 1) / p->local * p->local;
        p->global[1] = 1;
        snprintf(p->variant, sizeof p->variant, "registers, one work-item a row: %ux%u floats",
                 p->items, p->vec);
        snprintf(p->defines, sizeof p->defines, "-DROW_ITEMS=%u -DROW_VEC=%u -DROW_SOLO=1",
                 p->items, p->vec);
        return OCLML_SUCCESS;
    }
    size_t g = min_g;
    /* A 16-bit row moves half the bytes a value: twice the values a work-item keeps the bytes
     * in flight per work-item, and so the memory bandwidth, where fp32's are. */
    const long lp = dtype == OCLML_FLOAT32 ? 0 : oclml__tune(ctx, OCLML__TUNE_ROWS_LP_FLOATS, 0);
    const size_t aim = dtype == OCLML_FLOAT32 ? TARGET_FLOATS
                       : lp > 0               ? (size_t)lp
                                              : 2 * TARGET_FLOATS;
    const size_t max_floats = MAX_FLOATS / arrays,
                 target = aim / arrays < max_floats ? aim / arrays : max_floats;
    while (g < max_g && (units + g - 1) / g * vec > target) g *= 2;
    size_t items = (units + g - 1) / g;
    if (items * vec > max_floats) {
        plan_chunked(ctx, max_wg, arrays, dtype, p);
        return OCLML_SUCCESS;
    }
    size_t it = 1;
    while (it < items) it *= 2;
    p->G = (unsigned)g;
    p->items = (unsigned)it;
    p->vec = vec;
    size_t local = g < ROWS_GROUP ? ROWS_GROUP : g;
    if (local > max_wg) local = g;
    p->local = local;
    size_t rows_per_group = local / g;
    p->global[0] = (rows + rows_per_group - 1) / rows_per_group * local;
    p->global[1] = 1;
    snprintf(p->variant, sizeof p->variant, "registers: %u items/row, %zu rows/group, %ux%u floats",
             p->G, rows_per_group, p->items, p->vec);
    snprintf(p->defines, sizeof p->defines, "-DROW_ITEMS=%u -DROW_VEC=%u", p->items, p->vec);
    return OCLML_SUCCESS;
}

static size_t learned_cap(oclml_ctx *ctx, const char *base) {
    size_t cap = SIZE_MAX;
    pthread_mutex_lock(&ctx->build_lock);
    for (unsigned i = 0; i < ctx->n_wg_caps; i++)
        if (!strcmp(ctx->wg_caps[i].base, base)) cap = ctx->wg_caps[i].cap;
    pthread_mutex_unlock(&ctx->build_lock);
    return cap;
}

static void learn_cap(oclml_ctx *ctx, const char *base, size_t cap) {
    pthread_mutex_lock(&ctx->build_lock);
    unsigned i = 0;
    while (i < ctx->n_wg_caps && strcmp(ctx->wg_caps[i].base, base)) i++;
    if (i == ctx->n_wg_caps && i < sizeof ctx->wg_caps / sizeof ctx->wg_caps[0]) {
        snprintf(ctx->wg_caps[i].base, sizeof ctx->wg_caps[i].base, "%s", base);
        ctx->n_wg_caps++;
    }
    if (i < ctx->n_wg_caps) ctx->wg_caps[i].cap = cap;
    pthread_mutex_unlock(&ctx->build_lock);
}

oclml_status oclml__row_plan_for(oclml_ctx *ctx, const oclml__row_family *f, size_t rows,
                                 size_t cols, bool vec4_ok, oclml__row_plan *p) {
    return oclml__row_plan_for_dtype(ctx, f, rows, cols, vec4_ok, OCLML_FLOAT32, p);
}

oclml_status oclml__row_plan_for_dtype(oclml_ctx *ctx, const oclml__row_family *f, size_t rows,
                                       size_t cols, bool vec4_ok, oclml_dtype dtype,
                                       oclml__row_plan *p) {
    return plan_within(ctx, rows, cols, vec4_ok, f->arrays, learned_cap(ctx, f->kernel), dtype, p);
}

oclml_status oclml__row_plan_chunked(oclml_ctx *ctx, const oclml__row_family *f, size_t rows,
                                     size_t cols, oclml_dtype dtype, oclml__row_plan *p) {
    oclml_status st = oclml__row_plan_for_dtype(ctx, f, rows, cols, false, dtype, p);
    if (st || p->long_rows) return st;
    memset(p, 0, sizeof *p);
    p->rows = rows;
    p->cols = cols;
    const size_t cap = learned_cap(ctx, f->kernel);
    plan_chunked(ctx, ctx->caps.max_work_group_size < cap ? ctx->caps.max_work_group_size : cap,
                 f->arrays, dtype, p);
    return OCLML_SUCCESS;
}

void oclml__row_plan_dtypes(oclml__row_plan *p, const char *dtype_defines) {
    if (!dtype_defines[0]) return;
    const size_t l = strlen(p->long_defines);
    snprintf(p->long_defines + l, sizeof p->long_defines - l, "%s%s", l ? " " : "", dtype_defines);
    if (!p->long_rows) {
        const size_t n = strlen(p->defines);
        snprintf(p->defines + n, sizeof p->defines - n, " %s", dtype_defines);
    }
}

oclml__program_spec oclml__row_spec(const oclml__row_family *f, const oclml__row_plan *p) {
    oclml__program_spec s = {.file = f->file,
                             .kernels = f->long_pair,
                             .defines = p->long_defines[0] ? p->long_defines : NULL};
    if (!p->long_rows) {
        s.defines = p->defines;
        s.kernels = f->register_program ? f->register_program : f->kernel;
    }
    return s;
}

static oclml_status launch(oclml_ctx *ctx, const oclml__row_family *f, const char *kernel,
                           const oclml__row_plan *p, const oclml__arg *args, unsigned nargs,
                           cl_uint third, cl_uint dims, cl_int *code) {
    cl_kernel k;
    oclml__program_spec spec = oclml__row_spec(f, p);
    oclml_status st = oclml__kernel(ctx, &spec, kernel, &k);
    if (st) return st;
    oclml__arg all[32];
    if (nargs > 28)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "too many kernel arguments");
    memcpy(all, args, nargs * sizeof *args);
    cl_uint rows = (cl_uint)p->rows, cols = (cl_uint)p->cols;
    all[nargs] = OCLML_ARG(rows);
    all[nargs + 1] = OCLML_ARG(cols);
    all[nargs + 2] = OCLML_ARG(third);
    all[nargs + 3] = OCLML_LOCAL(p->local * sizeof(float) * 2);
    size_t local[2] = {p->local, 1};
    return oclml__launch(ctx, k, all, nargs + 4, dims, p->global, local, code);
}

oclml_status oclml__row_launch(oclml_ctx *ctx, const oclml__row_family *f, const oclml__row_plan *p,
                               const oclml__arg *args, unsigned nargs, bool *replan) {
    cl_int code = 0;
    *replan = false;
    oclml_status st = launch(ctx, f, f->kernel, p, args, nargs, p->G, 1, &code);
    if (st == OCLML_ERR_OPENCL && p->local > 1 &&
        (code == CL_OUT_OF_RESOURCES || code == CL_INVALID_WORK_GROUP_SIZE)) {
        oclml__log(ctx, OCLML_LOG_DEBUG, "%s refused work-groups of %zu: capping at %zu", f->kernel,
                   p->local, p->local / 2);
        learn_cap(ctx, f->kernel, p->local / 2);
        *replan = true;
    }
    return st;
}

oclml_status oclml__row_launch_long(oclml_ctx *ctx, const oclml__row_family *f, bool finish,
                                    const oclml__row_plan *p, const oclml__arg *args,
                                    unsigned nargs) {
    /* long_pair is "part finish". */
    char name[96];
    const char *pair = f->long_pair, *space = strchr(pair, ' ');
    if (!space || strlen(space + 1) >= sizeof name || (size_t)(space - pair) >= sizeof name)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "bad long-row kernel pair '%s'", pair);
    if (finish)
        snprintf(name, sizeof name, "%s", space + 1);
    else
        snprintf(name, sizeof name, "%.*s", (int)(space - pair), pair);
    return launch(ctx, f, name, p, args, nargs, p->nchunks, 2, NULL);
}

oclml_status oclml__row_retry(oclml_ctx *ctx,
                              oclml_status (*attempt)(oclml_ctx *, const void *, bool *),
                              const void *call) {
    /* Each re-plan halves a cap, from at most 1024: eleven tries reach a single work-item. */
    for (int i = 0; i < 12; i++) {
        bool replan = false;
        oclml_status st = attempt(ctx, call, &replan);
        if (!replan) {
            if (!st && i) oclml__clear_error(ctx);
            return st;
        }
    }
    return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED, "no work-group size of this op fits the device");
}
