/* The row-op family (softmax, the norms): how rows are laid onto work-groups for the device at
 * hand, which kernel variant that needs, and launching it (cl/include/rows.h is the kernel
 * side). */
#ifndef OCLML_OPS_ROWS_H
#define OCLML_OPS_ROWS_H

#include "core/core.h"

#include "../../cl/include/rows_abi.h"

/* One row kernel and its long-row pair: the register path's kernel (compiled per ROW_ITEMS x
 * ROW_VEC variant) and the chunked path's part and finish kernels (compiled together). */
typedef struct oclml__row_family {
    const char *file;
    const char *kernel;    /* register path; also names the family's learned work-group cap */
    const char *long_pair; /* "part finish" */
    /* Row arrays the kernel keeps in registers at once (1 forward, 2 backward holding y and
     * dy, 4 the fused norm backward): they share the register budget. */
    unsigned arrays;
    /* The register path's program when it holds more than `kernel` ("kernel helper"); NULL:
     * just `kernel`. */
    const char *register_program;
} oclml__row_family;

typedef struct oclml__row_plan {
    size_t rows, cols;
    bool long_rows;         /* chunked multi-pass path */
    unsigned G;             /* work-items per row (power of two) */
    unsigned items, vec;    /* register path: ITEMS vectors of VEC floats per work-item */
    bool solo;              /* register path, CPUs: a work-item a row, no barrier (ROW_SOLO) */
    size_t local;           /* work-group size */
    size_t global[2];       /* launch size; long path is 2-D (chunks x rows) */
    unsigned nchunks;       /* long path */
    unsigned long_items;    /* long path: elements a work-item of a chunk (OCLML_LONG_ITEMS) */
    char variant[96];       /* readable, for benchmarks and prewarm */
    char defines[160];      /* the register path's -D options */
    char long_defines[144]; /* the long path's (its items where not the default, the dtypes) */
} oclml__row_plan;

/* Validates rows/cols against the kernels' 32-bit indexing and picks the variant within the
 * work-group cap learned for the family's kernel. vec4_ok: the row length and every tensor's
 * element offset are multiples of 4. */
oclml_status oclml__row_plan_for(oclml_ctx *ctx, const oclml__row_family *f, size_t rows,
                                 size_t cols, bool vec4_ok, oclml__row_plan *plan);
/* The same for a row whose input has the given dtype: 16-bit rows keep more values a work-item
 * (the tuning key rows.lp_floats). */
oclml_status oclml__row_plan_for_dtype(oclml_ctx *ctx, const oclml__row_family *f, size_t rows,
                                       size_t cols, bool vec4_ok, oclml_dtype dtype,
                                       oclml__row_plan *plan);

/* The chunked path's plan for rows x cols, whatever their length (validated as above). */
oclml_status oclml__row_plan_chunked(oclml_ctx *ctx, const oclml__row_family *f, size_t rows,
                                     size_t cols, oclml_dtype dtype, oclml__row_plan *plan);

/* Adds the op's dtype defines ("-DX_DT=1 -DY_DT=1", dtype.h's numbers) to the plan's programs;
 * an op with every tensor fp32 adds none, so its programs stay the fp32 ones. */
void oclml__row_plan_dtypes(oclml__row_plan *p, const char *dtype_defines);

/* The program a plan runs: the register kernel's variant, or the long path's pair. */
oclml__program_spec oclml__row_spec(const oclml__row_family *f, const oclml__row_plan *p);

/* Launches the register kernel: args, then (rows, cols, G, local reduction buffer). A launch the
 * device refuses for lack of resources (CL_OUT_OF_RESOURCES or CL_INVALID_WORK_GROUP_SIZE, read
 * from this launch's own status) halves the family's cap and sets *replan: the op plans again
 * and retries. (CL_KERNEL_WORK_GROUP_SIZE is no guide: NVIDIA's OpenCL reports 256 for kernels
 * that run at 1024.) */
oclml_status oclml__row_launch(oclml_ctx *ctx, const oclml__row_family *f, const oclml__row_plan *p,
                               const oclml__arg *args, unsigned nargs, bool *replan);
/* Launches the long path's part (finish = false) or finish kernel: args, then (rows, cols,
 * nchunks, local reduction buffer). */
oclml_status oclml__row_launch_long(oclml_ctx *ctx, const oclml__row_family *f, bool finish,
                                    const oclml__row_plan *p, const oclml__arg *args,
                                    unsigned nargs);

/* Runs attempt(ctx, call) until it no longer asks for a re-plan (each re-plan halved a
 * work-group cap, so this ends); a success after a re-plan clears the refused launch's error. */
oclml_status oclml__row_retry(oclml_ctx *ctx,
                              oclml_status (*attempt)(oclml_ctx *, const void *, bool *),
                              const void *call);

/* Whether a tensor's element offset allows float4 access. */
static inline bool oclml__vec4_offset(const oclml_tensor *t) {
    return t == NULL || oclml__elem_offset(t) % 4 == 0;
}

#endif
