/* The attention planner (attention_plan.c): for a call's shape, the device's capabilities and the
 * tuning table, which kernels run (FMA tiles of cl/ops/attention.cl or the tensor-core kernels of
 * attention_fwd_mma.cl and attention_bwd_mma.cl), their tiles and programs, the forward's key
 * splits and where the backward's dQ comes from. A pure function of those three: it touches no
 * OpenCL object, so tests plan for devices they do not have (tests/check_planners.c). attention.c
 * checks the arguments, asks for the plan and launches it. */
#ifndef OCLML_OPS_ATTENTION_PLAN_H
#define OCLML_OPS_ATTENTION_PLAN_H

#include "core/core.h"

/* A call as the planner sees it: its sizes, and what else selects a program. */
typedef struct oclml__att_shape {
    size_t B, H, HKV, LQ, LK, D;
    size_t mask_b, mask_h; /* the mask's batch and head extents (1 where broadcast) */
    bool by_position;      /* a causal mask or a window: rows see keys by position */
    bool blhd;             /* the layout (batch, length, heads, dim) */
    bool mask, keylen;     /* an additive mask, key lengths */
    bool kv_vec;           /* K's and V's rows float4-aligned (the asynchronous copies) */
    bool qd_vec;           /* Q's and dO's rows float4-aligned (the dK/dV kernel's copies) */
    bool dropout;          /* dropout on the probabilities (the kernels' HAS_DROPOUT) */
    bool one_tf32;         /* q, k, v, dO exact in TF32 (16-bit stand-ins): one TF32 product */
} oclml__att_shape;

typedef enum oclml__att_kernel {
    ATT_FWD,
    ATT_MERGE,
    ATT_DELTA,
    ATT_DKDV,
    ATT_DQ,
    ATT_DMASK,
    ATT_DQ_EMPTY,
    ATT_FWD_MMA,
    ATT_DKDV_MMA,
    ATT_DQ_MMA
} oclml__att_kernel;

/* The kernel's name in its file ("oclml_attention_fwd"). */
const char *oclml__att_kernel_name(oclml__att_kernel kind);

/* A kernel's tile: TX x TY work-items, each RQ query rows x RK keys of the score tile; JC rows
 * staged at a time in the accumulating products. A tensor-core kernel's: 32 work-items a warp
 * (TX 16, TY twice the warps), TY RQ its rows (keys in dK/dV), TX RK its score columns. */
typedef struct oclml__att_tile {
    unsigned tx, ty, rq, rk, jc;
} oclml__att_tile;

/* One kernel as planned. */
typedef struct oclml__att_kernel_plan {
    oclml__att_kernel kind;
    int mma; /* 0 FMA tiles, 1 tensor cores, 2 the tensor-core kernel with its instruction
              * emulated (tests) */
    oclml__att_tile tile;
    /* Whether the device takes the tile (an FMA tile may not: the call then fails, saying why;
     * a tensor-core kernel is planned only where it fits). */
    bool fits;
    /* The tensor-core kernels' choices (0 and false for the FMA tiles): warps a work-group,
     * score columns, rows (keys in dK/dV) a work-group, warps sharing the head dim, column tiles
     * read together; warps in pairs, staging by asynchronous copies, float4 fragment reads. */
    unsigned warps, columns, block, head_split, col_batch;
    bool paired, async, vec;
    char defines[320];
} oclml__att_kernel_plan;

/* The program of k (its file, defines and kernel; the defines point into k). */
oclml__program_spec oclml__att_spec(const oclml__att_kernel_plan *k);

typedef struct oclml__att_forward_plan {
    oclml__att_kernel_plan main; /* ATT_FWD_MMA or ATT_FWD */
    size_t splits;               /* key splits, merged by log-sum-exp where more than 1 */
    oclml__att_kernel_plan merge;
} oclml__att_forward_plan;

void oclml__att_plan_forward(oclml_ctx *ctx, const oclml__att_shape *s, oclml__att_forward_plan *p);

typedef struct oclml__att_backward_plan {
    oclml__att_kernel_plan delta, dkdv, dq, dmask, dq_empty;
    /* Key heads a chunk of the dS workspace where dQ = scale dS K comes from a GEMM on the dK/dV
     * kernel's dS (then dkdv writes dS, dq is not run, dq_empty zeroes the rows that see no
     * key); 0: dQ from the dq kernel. */
    size_t dq_gemm_heads;
} oclml__att_backward_plan;

/* dq_and_dkdv: both dQ and one of dK, dV are wanted (only then can dQ come from dS). */
void oclml__att_plan_backward(oclml_ctx *ctx, const oclml__att_shape *s, bool dq_and_dkdv,
                              oclml__att_backward_plan *p);

/* Both plans in words (oclml_attention_plan), the backward's with dQ, dK and dV wanted. */
void oclml__att_describe(oclml_ctx *ctx, const oclml__att_shape *s, char *text, size_t len);

/* Floats a row of the dS workspace: Lk rounded up to a float4 (the GEMM's aligned reads). */
static inline size_t oclml__att_ds_ld(const oclml__att_shape *s) { return (s->LK + 3) / 4 * 4; }

/* Bytes of one key head's dS in the workspace: its H / HKV Lq stacked rows. */
static inline size_t oclml__att_ds_head_bytes(const oclml__att_shape *s) {
    return s->H / s->HKV * s->LQ * oclml__att_ds_ld(s) * sizeof(float);
}

#endif
