/* The GEMM family's internal entry, for the ops built on matrix products (linear layers, and
 * after them convolution and attention): one description of a strided batched product with an
 * optional fused epilogue, planned per shape and device (gemm_plan.c) onto liboclml's own tiled
 * kernels (cl/ops/gemm.cl) or CLBlast (gemm_clblast.c). Callers validate their tensors first;
 * oclml__gemm trusts the description. */
#ifndef OCLML_OPS_GEMM_H
#define OCLML_OPS_GEMM_H

#include "core/core.h"
#include "ops/ops.h"

/* A row-major matrix in a buffer: element (r, c) of batch entry i at
 * offset + i * stride + r * ld + c (floats). stride 0 shares one matrix across the batch. */
typedef struct oclml__matrix {
    cl_mem mem;
    size_t offset, ld, stride;
} oclml__matrix;

/* A convolution's geometry, for a B operand that is its unfolded input (implicit im2col): B's
 * element (k, n) of batch entry i is the input channel k / (R S) of the image at b.offset +
 * i * b.stride ([channels][H][W]), at kernel tap (k / S % R, k % S) under output position
 * (n / Q, n % Q) with the strides, padding (top, left) and dilation given, 0 in the padding
 * (with flip, tap (R-1 - k / S % R, S-1 - k % S)).
 * b.ld is unused. Only liboclml's own kernels read such an operand. */
typedef struct oclml__gather {
    unsigned H, W, R, S, Q, sh, sw, ph, pw, dh, dw;
    unsigned flip; /* 1: taps backwards, (R-1-r, S-1-s): a data gradient as a convolution */
    /* segment > 0 (a weight gradient, trans_b set, batch 1): K runs over images of `segment`
     * output positions each. A's column k is column k % segment of the matrix at a.offset +
     * (k / segment) a_seg, and B is the transposed gather: element (k, n) is the unfolded
     * column n at position k % segment of the image at b.offset + (k / segment) b_seg. */
    unsigned segment;
    size_t a_seg, b_seg;
} oclml__gather;

/* C = act(alpha op(A) op(B) + beta C + bias), with op(A) [m x k], op(B) [k x n], C [m x n], for
 * each of batch entries. With beta == 0 C is not read. bias (mem NULL: none) is a vector of n
 * floats added to every row. pre (mem NULL: not wanted) receives the value before the
 * activation. */

typedef struct oclml__gemm_desc {
    bool trans_a, trans_b;
    size_t m, n, k, batch;
    float alpha, beta;
    oclml__matrix a, b, c;
    cl_mem bias;
    size_t bias_offset;
    bool bias_per_row; /* bias has m floats, one per row of C, instead of n */
    oclml_activation act;
    oclml__matrix pre;
    const oclml__gather *gather_b; /* NULL: B is a matrix (trans_b as given); else see above */
    /* a_lower: op(A)'s row r is 0 past column r + a_band (a causal attention's dS), and the own
     * kernels read a block of rows only up to its last row's band (CLBlast reads the zeros). */
    bool a_lower;
    long a_band;
    /* Dropout after the activation (NULL or p = 0: none; batch 1): element (r, c) of C is
     * element drop_base + r drop_ld + c of the tensor oclml_dropout would mask. */
    const oclml_dropout_params *drop;
    size_t drop_base, drop_ld;
    /* Element types: A and B (one dtype), C, the bias and pre. Products with any of them
     * 16-bit run in gemm_lp.c (no gathered B, band or per-row bias there). */
    oclml_dtype ab_dtype, c_dtype, bias_dtype, pre_dtype;
} oclml__gemm_desc;

/* A plain dense m x n x k product (no transposes, bias or epilogue; alpha 1), as planners and
 * warm lists describe one: no buffers, row-major leading dimensions. */
static inline oclml__gemm_desc oclml__gemm_desc_dense(size_t m, size_t n, size_t k) {
    const oclml__gemm_desc d = {.m = m,
                                .n = n,
                                .k = k,
                                .batch = 1,
                                .alpha = 1.0f,
                                .a = {NULL, 0, k, 0},
                                .b = {NULL, 0, n, 0},
                                .c = {NULL, 0, n, 0}};
    return d;
}

/* Whether d's A is lower-banded with columns to skip (A_BANDED in cl/ops/gemm.cl): a band that
 * leaves some row columns out. */
static inline bool oclml__gemm_banded(const oclml__gemm_desc *d) {
    return d->a_lower && d->a_band < (long)d->k - 1;
}

/* Whether a product with a gathered B would run on tensor cores here (where implicit im2col
 * beats unfolding; elsewhere the FMA tiles run it, slower than CLBlast on an unfolded copy). */
bool oclml__gemm_gather_fast(oclml_ctx *ctx);
/* Whether the own kernels can take d with a gathered B (32-bit sizes; trans_b set exactly
 * for a segmented gather). */
bool oclml__gemm_can_gather(const oclml__gemm_desc *d);
/* The rows of a block of the own kernels that would run d where op(A) is lower-banded (a_lower):
 * such a block, rows r0 .. r0 + h - 1, sums no column at or past e = r0 + h + a_band (its
 * float4 loads of A, aligned to 4 columns, may read up to the next multiple of 4, multiplied by
 * zero rows of B), so a caller need not write A's zeros from that multiple of 4 on. 0 where
 * every column is read (CLBlast, or no band). */
size_t oclml__gemm_band_rows(oclml_ctx *ctx, const oclml__gemm_desc *d);
/* Runs the product on the kernel the planner picks. */
oclml_status oclml__gemm(oclml_ctx *ctx, const oclml__gemm_desc *d);
/* C = act(alpha sum_s w[s] + beta C + bias), the epilogue of d on fp32 partials w (splits of
 * them w_split elements apart, batch entries w->stride apart), C, bias and pre fp32. */
oclml_status oclml__gemm_finish(oclml_ctx *ctx, const oclml__gemm_desc *d, const oclml__matrix *w,
                                size_t w_split, unsigned splits, float alpha, float beta);

/* d as K splits: partials(ctx, d, plan, w) writes split s of batch entry e into the workspace w
 * at (e splits + s) m n (w's stride between splits, m n; its ld, n), then oclml__gemm_finish sums
 * them with alpha, beta and the epilogue. */
typedef oclml_status (*oclml__gemm_partials_fn)(oclml_ctx *ctx, const oclml__gemm_desc *d,
                                                const void *plan, const oclml__matrix *w);
oclml_status oclml__gemm_in_splits(oclml_ctx *ctx, const oclml__gemm_desc *d, unsigned splits,
                                   oclml__gemm_partials_fn partials, const void *plan);
/* Prewarm: adds the summing kernel of d's split partials to the list. */
void oclml__gemm_finish_warm(const char *op, const oclml__gemm_desc *d,
                             struct oclml__warm_list *list);
/* Prewarm (oclml_prewarm): adds the programs product d plans onto to the list, under `what`;
 * for the ops whose own products are GEMMs of a known shape. */
struct oclml__warm_list;
void oclml__gemm_warm_desc(oclml_ctx *ctx, const char *op, const char *what,
                           const oclml__gemm_desc *d, struct oclml__warm_list *list);

/* The planner's choice for d, in words (oclml_gemm_plan, bench variant strings). */
void oclml__gemm_describe(oclml_ctx *ctx, const oclml__gemm_desc *d, char *text, size_t len);

/* The CLBlast path (gemm_clblast.c): C = alpha op(A) op(B) + beta C only (no epilogue).
 * *cb_status (may be NULL) receives CLBlast's status code; a failure is not recorded (the caller
 * may fall back), oclml__gemm_clblast_fail records it. Every call into CLBlast holds the
 * process-wide CLBlast lock, also taken where its parameters are overridden. */
oclml_status oclml__gemm_clblast(oclml_ctx *ctx, const oclml__gemm_desc *d, cl_int *cb_status);
oclml_status oclml__gemm_clblast_fail(oclml_ctx *ctx, const oclml__gemm_desc *d, cl_int cb_status);
void oclml__clblast_lock(void);
void oclml__clblast_unlock(void);
/* Whether the Xgemm parameters liboclml applied for the device have GEMMK 1 (false where none
 * were applied: CLBlast's own); the caller holds the CLBlast lock (clblast_params.c). */
bool oclml__clblast_gemmk1(cl_device_id device);

/* The 16-bit path (gemm_lp.c): the tensor-core kernel cl/ops/gemm_lp.cl where the device has
 * the instruction and the operands suit it, else the operands converted to fp32 and the fp32
 * planner's product, converted back. */
oclml_status oclml__gemm_lp(oclml_ctx *ctx, const oclml__gemm_desc *d);
static inline bool oclml__gemm_is_lp(const oclml__gemm_desc *d) {
    return d->ab_dtype != OCLML_FLOAT32 || d->c_dtype != OCLML_FLOAT32 ||
           d->bias_dtype != OCLML_FLOAT32 || d->pre_dtype != OCLML_FLOAT32;
}
void oclml__gemm_lp_describe(oclml_ctx *ctx, const oclml__gemm_desc *d, char *text, size_t len);
void oclml__gemm_lp_warm(oclml_ctx *ctx, const char *op, struct oclml__warm_list *list);

/* Products of 1 to 4 rows (gemm_gemv.c, cl/ops/gemv.cl): whether that kernel takes d (fp32, a
 * plain B, no band; gemm.gemv not 0), the launch, its words and its program for prewarm. */
bool oclml__gemv_takes(oclml_ctx *ctx, const oclml__gemm_desc *d);
oclml_status oclml__gemv(oclml_ctx *ctx, const oclml__gemm_desc *d);
void oclml__gemv_describe(oclml_ctx *ctx, const oclml__gemm_desc *d, char *text, size_t len);
void oclml__gemv_warm(oclml_ctx *ctx, const char *op, const char *what, const oclml__gemm_desc *d,
                      struct oclml__warm_list *list);

/* The leading arguments of the GEMM family's kernels (GEMM_ARGS' first 23 in cl/ops/gemm.cl,
 * cl/ops/gemv.cl's alike): A, B, C = c (d's C, or a split workspace), the sizes, alpha and beta
 * (1 and 0 for split partials) and the bias and pre (none for split partials), into args[0..];
 * the values live in *v, which must outlast the launch. Returns the count. */
typedef struct oclml__gemm_arg_values {
    cl_mem am, bm, cm, bias, pm;
    cl_ulong a_off, a_st, b_off, b_st, c_off, c_st, bias_off, p_off, p_st;
    cl_uint lda, ldb, ldc, ldp, M, N, K;
    float alpha, beta;
} oclml__gemm_arg_values;
unsigned oclml__gemm_operand_args(const oclml__gemm_desc *d, const oclml__matrix *c, bool split,
                                  oclml__gemm_arg_values *v, oclml__arg *args);

/* The epilogue's defines (HAS_BIAS, HAS_PRE, the activation, HAS_DROPOUT) into out; none for
 * split partials, which the finishing kernel completes. Returns snprintf's count. */
int oclml__gemm_epilogue_defines(char *out, size_t len, const oclml__gemm_desc *d);
/* The epilogue's dropout arguments (DROP_ARGS in gemm_epilogue.h), appended at args[n]; returns
 * the new count. The values live in *v, which must outlast the launch call. */
typedef struct oclml__gemm_drop_values {
    oclml__drop_args a;
    cl_ulong base;
    cl_uint ld;
} oclml__gemm_drop_values;
unsigned oclml__gemm_drop_args(const oclml__gemm_desc *d, oclml__gemm_drop_values *v,
                               oclml__arg *args, unsigned n);

/* A contiguous row-major tensor's last two dimensions as a matrix (batch stride rows * cols when
 * it has three dimensions, else 0). */
oclml__matrix oclml__matrix_of(const oclml_tensor *t);

#endif
