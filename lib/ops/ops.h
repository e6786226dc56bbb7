/* What the ops share besides core: the prewarm list that each op's warm planner fills, and the
 * planners named in ops.def. */
#ifndef OCLML_OPS_H
#define OCLML_OPS_H

#include "core/core.h"

#include <stdio.h>
#include <string.h>

/* The largest power of two <= v (1 for 0), and the smallest >= v: work-group sizes. */
static inline size_t oclml__pow2_floor(size_t v) {
    size_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
}
static inline size_t oclml__pow2_ceil(size_t v) {
    size_t p = 1;
    while (p < v) p *= 2;
    return p;
}
/* a / b rounded up: groups, tiles and chunks covering an extent. */
static inline size_t oclml__ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* Whether ops take their CPU-shaped kernels (no barriers; a work-item owns whole rows or a
 * contiguous chunk, in loops the CPU compiler vectorises): on CPU devices, unless the tuning key
 * cpu.layout is 0 (the GPU's layout, which the suite also runs on PoCL). */
static inline bool oclml__cpu_layout(const oclml_ctx *ctx) {
    return !ctx->caps.is_gpu && oclml__tune(ctx, OCLML__TUNE_CPU_LAYOUT, 0) != 0;
}

/* The grid of a kernel built with -DOCLML_CHUNKS=1 (common.h's OCLML_CHUNK) over n elements: a
 * few work-items a compute unit, so that a core that finishes early takes another, none with
 * fewer than 16 elements; one a work-group. */
static inline void oclml__chunk_grid(const oclml_ctx *ctx, size_t n, size_t *global,
                                     size_t *local) {
    size_t units = ctx->caps.compute_units ? ctx->caps.compute_units : 1, most = n / 16;
    *global = units * 4 < most ? units * 4 : most ? most : 1;
    *local = 1;
}

/* Programs to build up front, collected from the ops' warm planners. */
typedef struct oclml__warm_item {
    const char *op;
    char variant[96];
    char file[32], defines[384], kernels[160];
    unsigned max_registers;
} oclml__warm_item;

typedef struct oclml__warm_list {
    oclml__warm_item *items;
    size_t n, cap;
    bool out_of_memory;
    /* The first item whose file, defines or kernels did not fit the item's text (not added:
     * prewarm fails rather than build a program other than the op's); NULL if none. */
    const char *too_long_op;
    /* Set by the caller: the planners add the programs of the shapes prewarm leaves to first use
     * too (other head dims, masks, layouts, ...), so that a check of the kernels (the OpenCL
     * lint, tests/warm_programs.c) sees every variant they can pick, not only the common ones. */
    bool every_shape;
} oclml__warm_list;

/* Adds spec (copied) unless an item with the same program is there already; one that does not
 * fit an item sets too_long_op. */
void oclml__warm_add(oclml__warm_list *list, const char *op, const char *variant,
                     oclml__program_spec spec);

/* Adds the programs of the named ops (comma-separated; NULL or "": all) to list, as their warm
 * planners plan them on ctx's device (prewarm builds them; tests read them); an unknown name is
 * an error. */
oclml_status oclml__warm_collect(oclml_ctx *ctx, const char *ops, oclml__warm_list *list);

/* spec as built on ctx's device: with -DOCLML_CHUNKS=1 added on CPUs (oclml__cpu_layout), its
 * defines then written into text. */
static inline oclml__program_spec
oclml__chunked_spec(const oclml_ctx *ctx, oclml__program_spec spec, char *text, size_t len) {
    if (!oclml__cpu_layout(ctx)) return spec;
    snprintf(text, len, "%s%s-DOCLML_CHUNKS=1", spec.defines ? spec.defines : "",
             spec.defines ? " " : "");
    spec.defines = text;
    return spec;
}

/* The program of memory.cl's kernel (oclml_fill, oclml_copy, oclml_cast, ...) as the memory ops
 * build it on ctx's device: defines (or NULL) and on CPUs OCLML_CHUNKS, written into text. */
oclml__program_spec oclml__memory_spec(const oclml_ctx *ctx, const char *kernel,
                                       const char *defines, char *text, size_t len);

/* Converts n elements at (src, src_off) of dtype from to (dst, dst_off) of dtype to, offsets in
 * elements (oclml_cast's kernel, for ops converting their operands internally). */
oclml_status oclml__cast_raw(oclml_ctx *ctx, oclml_dtype from, cl_mem src, size_t src_off,
                             oclml_dtype to, cl_mem dst, size_t dst_off, size_t n);

/* Copies batch x rows rows of cols 16-bit elements at (src, src_off) (ld apart, batch entries
 * stride apart) to dst from offset 0 with rows dst_ld (even, >= cols) apart and batch entries
 * rows dst_ld apart, zeros past cols (memory.cl's oclml_pad_rows16): operands padded for 16-byte
 * copies. */
oclml_status oclml__pad_rows16(oclml_ctx *ctx, cl_mem src, size_t src_off, size_t ld, size_t stride,
                               size_t batch, size_t rows, size_t cols, cl_mem dst, size_t dst_ld);

/* Row lengths whose variants row ops prewarm: the register variants and the long-row path. */
#define OCLML__WARM_ROW_LENGTHS 9
extern const size_t oclml__warm_row_lengths[OCLML__WARM_ROW_LENGTHS];

/* The fused activations (activation.c): an argument check, the -DACT_<NAME>=1 define that
 * cl/include/activation.h reads (NULL for none), and the name. */
#define OCLML__N_ACTS ((unsigned)OCLML_ACT_SIGMOID + 1)
oclml_status oclml__check_act(oclml_ctx *ctx, oclml_activation act);

/* Where a 16-bit tensor-core kernel runs, from its tuning key's mode: -1 or 1 on the instruction
 * where the device has it; 0 never; 2 the kernel with the instruction emulated where the device
 * lacks it (tests; on a device that has it, the instruction, so that the same tests check it
 * there). OCLML__MMA16_NONE leaves the call to the op's other path (fp32 stand-ins). */
typedef enum oclml__mma16_path {
    OCLML__MMA16_NONE,
    OCLML__MMA16_HW,
    OCLML__MMA16_EMULATED
} oclml__mma16_path;
static inline oclml__mma16_path oclml__mma16_path_of(oclml_ctx *ctx, long mode) {
    if (mode == 0) return OCLML__MMA16_NONE;
    if (ctx->caps.is_gpu && oclml__caps_mma(ctx)) return OCLML__MMA16_HW;
    return mode == 2 ? OCLML__MMA16_EMULATED : OCLML__MMA16_NONE;
}

/* The params a call runs with: p, or what NULL means everywhere, the defaults (init fills them
 * into *defaults, a caller's local). */
#define OCLML__OR_DEFAULTS(p, defaults, init) ((p) ? (p) : ((void)init(defaults), (defaults)))

/* Dropout's parameters (dropout.c): NULL, a wrong struct_size or p outside [0, 1] refused; the
 * kept elements' scale 1 / (1 - p), 0 at p = 1 (and for NULL params: no dropout is not asked
 * for a scale). */
oclml_status oclml__check_dropout(oclml_ctx *ctx, const oclml_dropout_params *d);

float oclml__dropout_scale(const oclml_dropout_params *d);
/* d where it drops anything (p > 0), else NULL: p = 0 is no dropout, bit for bit. */
const oclml_dropout_params *oclml__dropout_active(const oclml_dropout_params *d);
/* A dropout's kernel arguments, in the order every kernel that drops takes them (philox.h's
 * drop_mult: p 0 is no dropout, scale 1): NULL or p = 0 params give p 0, scale 1. */
typedef struct oclml__drop_args {
    float p, scale;
    cl_uint seed_lo, seed_hi;
    cl_ulong offset;
} oclml__drop_args;
oclml__drop_args oclml__drop_args_of(const oclml_dropout_params *d);
/* Its five kernel arguments as oclml__arg initialisers (a must outlive the launch). */
#define OCLML__DROP_ARG_LIST(a)                                                             \
    OCLML_ARG((a).p), OCLML_ARG((a).scale), OCLML_ARG((a).seed_lo), OCLML_ARG((a).seed_hi), \
        OCLML_ARG((a).offset)
const char *oclml__act_define(oclml_activation act);
const char *oclml__act_name(oclml_activation act);

typedef void oclml__warm_fn(oclml_ctx *ctx, const char *op, oclml__warm_list *list);
oclml__warm_fn oclml__memory_warm, oclml__elementwise_warm, oclml__dropout_warm,
    oclml__embedding_warm, oclml__reduce_warm, oclml__probe_warm, oclml__softmax_warm,
    oclml__norm_warm, oclml__gru_warm, oclml__rssm_warm, oclml__history_warm, oclml__gemm_warm,
    oclml__linear_warm, oclml__axis_warm, oclml__layout_warm, oclml__loss_warm;

oclml__warm_fn oclml__conv_warm, oclml__pool_warm;
oclml__warm_fn oclml__optim_warm;
oclml__warm_fn oclml__attention_warm;

/* The op list (registry.c, from ops.def): the i-th op's name and its tuning families (NULL past
 * the last op); an op's warm planner by name, NULL for one that builds no kernel or for an
 * unknown name (*found tells the two apart). */
const char *oclml__op_name(size_t i);
const char *oclml__op_families(size_t i);
oclml__warm_fn *oclml__op_warm(const char *name, size_t len, bool *found);

/* The row families of the row ops, for oclml_op_variant. */
struct oclml__row_family;
const struct oclml__row_family *oclml__softmax_family(const char *op);
const struct oclml__row_family *oclml__norm_family(const char *op);
/* Cross-entropy over class indices (its registers, registers + local memory or chunked plan). */
oclml_status oclml__xent_variant(oclml_ctx *ctx, size_t rows, size_t cols, char *text, size_t len);

#endif
