/* Planning and launching row kernels (cl/common.cl describes the kernel side): the op code of
 * softmax, the norms and the row reductions says what to compute, this says how to lay rows
 * onto work-groups for the device at hand. */
#ifndef OCLML_ROWS_H
#define OCLML_ROWS_H

#include "internal.h"

/* Rows longer than a register-resident work-group can hold go through a chunked path: chunks
 * of LONG_ITEMS elements per work-item, partial results per (row, chunk) in scratch. */
#define OCLML_LONG_ITEMS 16

typedef struct oclml__row_plan {
    size_t rows, cols;
    bool long_rows;       /* chunked multi-pass path */
    unsigned G;           /* work-items per row (power of two) */
    unsigned items, vec;  /* register path: ITEMS vectors of VEC floats per work-item */
    size_t local;         /* work-group size */
    size_t global[2];     /* launch size; long path is 2-D (chunks x rows) */
    unsigned nchunks;     /* long path */
    char variant[96];     /* readable, for benchmarks */
    char base[64];        /* kernel family (register path), for learning work-group caps */
} oclml__row_plan;

/* Validates rows/cols against the kernels' 32-bit indexing and picks the variant. vec4_ok: the
 * row length and every tensor's element offset are multiples of 4. arrays: how many row arrays
 * the kernel keeps in registers at once (1 for forward ops, 2 for backward ops holding y and dy);
 * the register budget is shared between them. */
oclml_status oclml__row_plan_make(const oclml_ctx *ctx, size_t rows, size_t cols, bool vec4_ok,
                                  unsigned arrays, oclml__row_plan *plan);

/* The plan for the register kernel family `base`: as above, within the work-group cap learned
 * for that family (see oclml__row_launch), or sent down the chunked path when a row no longer
 * fits under it. */
oclml_status oclml__row_plan_for(oclml_ctx *ctx, const char *file, const char *base, size_t rows,
                                 size_t cols, bool vec4_ok, unsigned arrays, oclml__row_plan *plan);

/* Returned by oclml__row_launch when the device refused the work-group size for lack of
 * resources (registers): the family's cap was halved; plan again and retry. Never leaves the
 * library: OCLML__ROW_RETRY wraps an op's attempt in that loop. */
#define OCLML__REPLAN ((oclml_status)-7099)
#define OCLML__ROW_RETRY(ctx, call)                                                              \
    do {                                                                                        \
        oclml_status st_;                                                                       \
        for (int try_ = 0; try_ < 8; try_++) {                                                  \
            st_ = (call);                                                                       \
            if (st_ != OCLML__REPLAN) {                                                         \
                if (!st_ && try_) oclml__clear_error(ctx);                                      \
                return st_;                                                                     \
            }                                                                                   \
        }                                                                                       \
        return oclml__fail(ctx, OCLML_ERR_UNSUPPORTED, "no work-group size of this op fits the device"); \
    } while (0)

/* Kernel name of the register-resident variant: "<base>_<items>_<vec>". */
void oclml__row_kernel_name(char *out, size_t len, const char *base, const oclml__row_plan *p);

/* Whether a tensor's element offset allows float4 access. */
static inline bool oclml__vec4_offset(const oclml_tensor *t) { return t == NULL || oclml__elem_offset(t) % 4 == 0; }

/* Launches a register-path kernel: args, then (rows, cols, G, local reduction buffer). A launch
 * refused with CL_OUT_OF_RESOURCES or CL_INVALID_WORK_GROUP_SIZE records a halved cap for the
 * family and returns OCLML__REPLAN. (The per-kernel limit CL_KERNEL_WORK_GROUP_SIZE is no guide:
 * NVIDIA's OpenCL reports 256 for kernels that run at 1024.) */
oclml_status oclml__row_launch(oclml_ctx *ctx, const char *file, const char *base,
                               const oclml__row_plan *p, const oclml__arg *args, unsigned nargs);
/* Launches a long-path kernel: args, then (rows, cols, nchunks, local reduction buffer). */
oclml_status oclml__row_launch_long(oclml_ctx *ctx, const char *file, const char *kernel,
                                    const oclml__row_plan *p, const oclml__arg *args, unsigned nargs);

#endif
