/* The planners as pure functions, linked from the internal library: no OpenCL device is needed,
 * so devices we do not have (a 1024-wide GPU, a GPU with TF32 tensor cores, a small embedded
 * GPU) are planned for here: the row ops', attention's, GEMM's and convolution's, each against
 * the rules their files document, and the tuning table's overrides. */
#include "testutil.h"

#include "core/core.h"
#include "ops/attention_plan.h"
#include "ops/conv.h"
#include "ops/gemm.h"
#include "ops/ops.h"
#include "ops/rows.h"

#include <string.h>

/* A context with nothing but the capabilities a planner reads. */
static oclml_ctx *fake_ctx(bool gpu, size_t max_wg, unsigned cus) {
    oclml_ctx *ctx = calloc(1, sizeof *ctx);
    pthread_mutex_init(&ctx->build_lock, NULL);
    pthread_mutex_init(&ctx->error_lock, NULL);
    ctx->caps.is_gpu = gpu;
    ctx->caps.max_work_group_size = max_wg;
    ctx->caps.compute_units = cus;
    ctx->caps.local_mem_bytes = 48 << 10;
    pthread_mutex_init(&ctx->caps_lock, NULL);
    return ctx;
}

static void fake_free(oclml_ctx *ctx) {
    free(ctx->last_error);
    free(ctx->tune);
    pthread_mutex_destroy(&ctx->build_lock);
    pthread_mutex_destroy(&ctx->error_lock);
    pthread_mutex_destroy(&ctx->caps_lock);
    free(ctx);
}

/* Devices as their capabilities describe them. */
typedef struct fake_device {
    bool gpu, mma; /* mma: TF32 mma.sync (and inline PTX), as if probed */
    unsigned cus, simd;
    size_t max_wg, local_bytes;
} fake_device;
/* A GPU with TF32 tensor cores like an H100: 132 units, warps of 32, 227 KiB local memory. */
static const fake_device H100 = {true, true, 132, 32, 1024, 227 << 10};
/* PoCL's CPU device: no tensor cores, work-groups up to 4096. */
static const fake_device POCL = {false, false, 2, 1, 4096, 1 << 20};
/* A small GPU whose work-groups hold 16 work-items. */
static const fake_device SMALL = {true, false, 4, 16, 16, 32 << 10};

/* A context of the device with the tuning option `tuning` applied ("" the defaults). */
static oclml_ctx *device_ctx(const fake_device *d, const char *tuning) {
    oclml_ctx *ctx = fake_ctx(d->gpu, d->max_wg, d->cus);
    ctx->caps.simd_width = d->simd;
    ctx->caps.local_mem_bytes = d->local_bytes;
    ctx->caps.inline_ptx = ctx->caps.mma_tf32 = d->mma; /* probed: nothing is built */
    ctx->caps.workspace_bytes = d->gpu ? (size_t)1 << 30 : (size_t)128 << 20;
    ctx->info.max_alloc_bytes = d->gpu ? (size_t)20 << 30 : (size_t)1 << 30;
    ASSERT_OK(oclml__tune_init(ctx, tuning));
    return ctx;
}

static const oclml__row_family FAMILY = {
    "softmax.cl", "oclml_softmax_fwd", "oclml_softmax_fwd_part oclml_softmax_fwd_finish", 1, NULL};

START_TEST(row_plans_per_device) {
    oclml_ctx *gpu = fake_ctx(true, 1024, 132), *cpu = fake_ctx(false, 4096, 2),
              *cpu_gpu_layout = fake_ctx(false, 4096, 2), *small = fake_ctx(true, 16, 4);
    ASSERT_OK(oclml__tune_init(cpu, ""));
    ASSERT_OK(oclml__tune_init(cpu_gpu_layout, "cpu.layout=0"));
    oclml__row_plan p;
    /* Short rows: a few lanes per row on GPUs, one on CPUs; float4 where the offsets allow. */
    ASSERT_OK(oclml__row_plan_for(gpu, &FAMILY, 4096, 64, true, &p));
    ck_assert(!p.long_rows);
    ck_assert_uint_eq(p.G, 8);
    ck_assert_uint_eq(p.vec, 4);
    ck_assert_str_eq(oclml__row_spec(&FAMILY, &p).defines, "-DROW_ITEMS=2 -DROW_VEC=4");
    ck_assert_str_eq(oclml__row_spec(&FAMILY, &p).kernels, "oclml_softmax_fwd");
    /* CPUs: a work-item a row, with no barrier, up to 8192 values over its arrays. */
    ASSERT_OK(oclml__row_plan_for(cpu, &FAMILY, 4096, 64, false, &p));
    ck_assert(p.solo);
    ck_assert_uint_eq(p.G, 1);
    ck_assert_uint_eq(p.vec, 1);
    ck_assert_str_eq(oclml__row_spec(&FAMILY, &p).defines,
                     "-DROW_ITEMS=64 -DROW_VEC=1 -DROW_SOLO=1");
    ASSERT_OK(oclml__row_plan_for(cpu, &FAMILY, 4096, 8192, true, &p));
    ck_assert(p.solo && p.items * p.vec == 8192);
    ASSERT_OK(oclml__row_plan_for(cpu, &FAMILY, 4096, 8196, true, &p));
    ck_assert(!p.solo);
    /* cpu.layout=0: the GPU's layout there too. */
    ASSERT_OK(oclml__row_plan_for(cpu_gpu_layout, &FAMILY, 4096, 64, false, &p));
    ck_assert(!p.solo);
    ck_assert_uint_eq(p.G, 4); /* 16 floats a work-item */
    ck_assert_str_eq(oclml__row_spec(&FAMILY, &p).defines, "-DROW_ITEMS=16 -DROW_VEC=1");
    /* Registers hold at most 32 floats a work-item: 32768 columns is the longest register row
     * on a 1024-wide device, one more goes to the chunked pair. */
    ASSERT_OK(oclml__row_plan_for(gpu, &FAMILY, 8, 32768, true, &p));
    ck_assert(!p.long_rows);
    ck_assert_uint_le(p.items * p.vec, 32);
    ASSERT_OK(oclml__row_plan_for(gpu, &FAMILY, 8, 32772, true, &p));
    ck_assert(p.long_rows);
    ck_assert_str_eq(oclml__row_spec(&FAMILY, &p).kernels, FAMILY.long_pair);
    ck_assert_ptr_null(oclml__row_spec(&FAMILY, &p).defines);
    /* A 16-wide device takes rows of 512 floats in registers, longer ones chunked. */
    ASSERT_OK(oclml__row_plan_for(small, &FAMILY, 8, 512, true, &p));
    ck_assert(!p.long_rows);
    ck_assert_uint_le(p.local, 16);
    ASSERT_OK(oclml__row_plan_for(small, &FAMILY, 8, 516, true, &p));
    ck_assert(p.long_rows);
    ck_assert_uint_le(p.local, 16);
    /* Beyond 32-bit indexing is refused with a reason. */
    ck_assert_int_eq(oclml__row_plan_for(gpu, &FAMILY, (size_t)1 << 33, 4, true, &p),
                     OCLML_ERR_INVALID_SHAPE);
    ck_assert_ptr_nonnull(strstr(gpu->last_error, "32-bit"));
    fake_free(gpu);
    fake_free(cpu);
    fake_free(cpu_gpu_layout);
    fake_free(small);
}
END_TEST

/* 16-bit rows keep twice fp32's values a work-item (rows.lp_floats, 0 auto: 32): a bf16 row of
 * 1024 on half the lanes of an fp32 one; the key set to 16 plans it as fp32. */
START_TEST(row_plans_for_16bit_rows) {
    static const fake_device *const devices[] = {&H100, &POCL};
    for (int d = 0; d < 2; d++) {
        /* The GPU's layout on the CPU too (cpu.layout=0): a work-item a row holds whole rows. */
        oclml_ctx *ctx = device_ctx(devices[d], d ? "cpu.layout=0" : ""),
                  *as32 = device_ctx(devices[d],
                                     d ? "rows.lp_floats=16,cpu.layout=0" : "rows.lp_floats=16");
        oclml__row_plan f32, b16, b16_as32;
        ASSERT_OK(oclml__row_plan_for_dtype(ctx, &FAMILY, 4096, 1024, true, OCLML_FLOAT32, &f32));
        ASSERT_OK(oclml__row_plan_for_dtype(ctx, &FAMILY, 4096, 1024, true, OCLML_BFLOAT16, &b16));
        ASSERT_OK(
            oclml__row_plan_for_dtype(as32, &FAMILY, 4096, 1024, true, OCLML_FLOAT16, &b16_as32));
        ck_assert_uint_eq(f32.items * f32.vec, 16);
        ck_assert_uint_eq(b16.items * b16.vec, 32);
        ck_assert_uint_eq(b16.G * 2, f32.G);
        ck_assert_uint_eq(b16_as32.G, f32.G);
        ck_assert_uint_eq(b16_as32.items, f32.items);
        /* Long rows: a 16-bit chunk twice fp32's (its program says so), as fp32's under
         * rows.lp_long_items=16; rows of two arrays keep fp32's. */
        ASSERT_OK(oclml__row_plan_for_dtype(ctx, &FAMILY, 8, 50257, false, OCLML_FLOAT32, &f32));
        ASSERT_OK(oclml__row_plan_for_dtype(ctx, &FAMILY, 8, 50257, false, OCLML_BFLOAT16, &b16));
        ck_assert(f32.long_rows && b16.long_rows);
        ck_assert_uint_eq(b16.long_items, 2 * f32.long_items);
        ck_assert_uint_eq(b16.nchunks,
                          (50257 + b16.local * b16.long_items - 1) / (b16.local * b16.long_items));
        ck_assert_ptr_nonnull(
            strstr(oclml__row_spec(&FAMILY, &b16).defines, "-DOCLML_LONG_ITEMS=32"));
        ck_assert_ptr_null(oclml__row_spec(&FAMILY, &f32).defines);
        oclml__row_plan two;
        const oclml__row_family TWO = {"softmax.cl", "oclml_softmax_bwd",
                                       "oclml_softmax_bwd_part oclml_softmax_bwd_finish", 2, NULL};
        ASSERT_OK(oclml__row_plan_for_dtype(ctx, &TWO, 8, 50257, false, OCLML_BFLOAT16, &two));
        ck_assert_uint_eq(two.long_items, f32.long_items);
        fake_free(ctx);
        fake_free(as32);
    }
}
END_TEST

long oclml__tune(const oclml_ctx *ctx, oclml__tune_key key, unsigned i);

START_TEST(tuning_table_parses) {
    oclml_ctx *ctx = fake_ctx(true, 1024, 132);
    ASSERT_OK(oclml__tune_init(ctx, " rssm.split=7;gru.tile=2:4:2:1:2 , rssm.guard=0"));
    ck_assert_int_eq(oclml__tune(ctx, OCLML__TUNE_RSSM_SPLIT, 0), 7);
    ck_assert_int_eq(oclml__tune(ctx, OCLML__TUNE_GRU_TILE, 1), 4);
    ck_assert_int_eq(oclml__tune(ctx, OCLML__TUNE_GRU_TILE, 4), 2);
    ck_assert_int_eq(oclml__tune(ctx, OCLML__TUNE_RSSM_GUARD, 0), 0);
    ck_assert_int_eq(oclml__tune(ctx, OCLML__TUNE_RSSM_WG, 0), 0); /* default */
    free(ctx->tune);
    ctx->tune = NULL;
    ck_assert_int_eq(oclml__tune_init(ctx, "gru.tile=2:4:2:1:2:9"), OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(ctx->last_error, "gru.tile"));
    fake_free(ctx);
}
END_TEST

/* ---- attention (lib/ops/attention_plan.c) ---- */

/* A call of B H (HKV key heads) x LQ rows x LK keys of head dim D in BHLD, rows float4-aligned,
 * without mask or key lengths; by_position: a causal mask or a window. */
static oclml__att_shape att_shape(size_t B, size_t H, size_t HKV, size_t LQ, size_t LK, size_t D,
                                  bool by_position) {
    return (oclml__att_shape){.B = B,
                              .H = H,
                              .HKV = HKV,
                              .LQ = LQ,
                              .LK = LK,
                              .D = D,
                              .mask_b = 1,
                              .mask_h = 1,
                              .by_position = by_position,
                              .kv_vec = true,
                              .qd_vec = true};
}

static oclml__att_kernel_plan att_forward(oclml_ctx *ctx, oclml__att_shape s, size_t *splits) {
    oclml__att_forward_plan p;
    oclml__att_plan_forward(ctx, &s, &p);
    if (splits) *splits = p.splits;
    return p.main;
}

static oclml__att_backward_plan att_backward(oclml_ctx *ctx, oclml__att_shape s, bool dq_and_dkdv) {
    oclml__att_backward_plan p;
    oclml__att_plan_backward(ctx, &s, dq_and_dkdv, &p);
    return p;
}

static void assert_tile(oclml__att_tile t, unsigned tx, unsigned ty, unsigned rq, unsigned rk) {
    ck_assert_msg(t.tx == tx && t.ty == ty && t.rq == rq && t.rk == rk,
                  "tile %ux%u of %ux%u, expected %ux%u of %ux%u", t.tx, t.ty, t.rq, t.rk, tx, ty,
                  rq, rk);
}

START_TEST(attention_plans_per_device) {
    oclml_ctx *gpu = device_ctx(&H100, ""), *cpu = device_ctx(&POCL, ""),
              *small = device_ctx(&SMALL, "");
    /* Tensor cores where the device has them, 8 warps in the forward above head dim 64, but 4
     * up to 128 where rows see keys by position (fewer warps idle on a block's last keys). */
    oclml__att_kernel_plan k = att_forward(gpu, att_shape(2, 8, 8, 1024, 1024, 128, false), NULL);
    ck_assert_int_eq(k.kind, ATT_FWD_MMA);
    ck_assert_int_eq(k.mma, 1);
    ck_assert_uint_eq(k.warps, 8);
    ck_assert(!k.paired);
    ck_assert_ptr_nonnull(strstr(k.defines, "-DHEAD_DIM=128 -DBN=16 -DWARPS=8 -DMMA_EMULATE=0"));
    ck_assert_uint_eq(att_forward(gpu, att_shape(2, 8, 8, 1024, 1024, 128, true), NULL).warps, 4);
    ck_assert_uint_eq(att_forward(gpu, att_shape(2, 8, 8, 1024, 1024, 64, false), NULL).warps, 4);
    /* 32 keys a block up to head dim 64, 16 above. */
    ck_assert_uint_eq(att_forward(gpu, att_shape(2, 8, 8, 1024, 1024, 64, false), NULL).columns,
                      32);
    ck_assert_uint_eq(k.columns, 16);
    /* Above 128 the forward's warps pair on 16 rows, each with half the head dim, 8 warps also
     * under a causal mask. */
    k = att_forward(gpu, att_shape(2, 8, 8, 1024, 1024, 192, true), NULL);
    ck_assert_int_eq(k.mma, 1);
    ck_assert(k.paired);
    ck_assert_uint_eq(k.head_split, 2);
    ck_assert_uint_eq(k.warps, 8);
    /* Head dims that are not multiples of 8, and decoding (at most 8 rows a key head), take the
     * FMA tiles; decoding one row a query head, the rest of the work-group along the keys, the
     * keys split where the row blocks leave compute units idle: GPUs only. */
    ck_assert_int_eq(att_forward(gpu, att_shape(2, 8, 8, 1024, 1024, 100, false), NULL).kind,
                     ATT_FWD);
    size_t splits;
    k = att_forward(gpu, att_shape(1, 8, 2, 1, 4096, 128, false), &splits);
    ck_assert_int_eq(k.kind, ATT_FWD);
    assert_tile(k.tile, 64, 4, 1, 1);
    ck_assert_uint_eq(splits, 32); /* 4 work-groups a unit, capped at half the 64 key blocks */
    k = att_forward(cpu, att_shape(1, 8, 2, 1, 4096, 128, false), &splits);
    assert_tile(k.tile, 64, 4, 1, 1);
    ck_assert_uint_eq(splits, 1);
    /* No tensor cores: FMA tiles of 16 x 16 work-items with 4 x 4 scores, the dK/dV kernel's
     * half the rows; 4 x 4 work-items where work-groups hold 16. */
    k = att_forward(cpu, att_shape(2, 8, 8, 1024, 1024, 64, false), NULL);
    ck_assert_int_eq(k.kind, ATT_FWD);
    ck_assert_int_eq(k.mma, 0);
    assert_tile(k.tile, 16, 16, 4, 4);
    oclml__att_backward_plan b = att_backward(cpu, att_shape(2, 8, 8, 1024, 1024, 64, false), true);
    assert_tile(b.dkdv.tile, 16, 16, 2, 4);
    ck_assert_int_eq(b.dq.kind, ATT_DQ);
    ck_assert_uint_eq(b.dq_gemm_heads, 0); /* only with dK/dV on tensor cores */
    k = att_forward(small, att_shape(2, 8, 8, 1024, 1024, 64, false), NULL);
    ck_assert_int_eq(k.mma, 0);
    assert_tile(k.tile, 4, 4, 4, 4);
    ck_assert(k.fits);
    /* The backward on tensor cores: dK/dV and dQ with warps in pairs above head dim 64. */
    b = att_backward(gpu, att_shape(2, 8, 8, 1024, 1024, 128, false), true);
    ck_assert(b.dkdv.mma == 1 && b.dkdv.paired && b.dq.mma == 1 && b.dq.paired);
    b = att_backward(gpu, att_shape(2, 8, 8, 1024, 1024, 64, false), true);
    ck_assert(b.dkdv.mma == 1 && !b.dkdv.paired && !b.dq.paired);
    fake_free(gpu);
    fake_free(cpu);
    fake_free(small);
}
END_TEST

START_TEST(attention_dq_from_ds) {
    oclml_ctx *gpu = device_ctx(&H100, "");
    /* dQ = scale dS K by GEMM where dK or dV is wanted too, as many key heads a chunk as the
     * workspace holds: 1 GiB of 64 MiB heads (4096 x 4096 floats). */
    oclml__att_shape s = att_shape(4, 16, 16, 4096, 4096, 64, false);
    oclml__att_backward_plan b = att_backward(gpu, s, true);
    ck_assert_uint_eq(b.dq_gemm_heads, 16);
    ck_assert_ptr_nonnull(strstr(b.dkdv.defines, "-DDS_OUT=1"));
    ck_assert_uint_eq(att_backward(gpu, s, false).dq_gemm_heads, 0);
    ck_assert_ptr_nonnull(strstr(att_backward(gpu, s, false).dkdv.defines, "-DDS_OUT=0"));
    /* Not with key lengths: the GEMM reads every key. */
    s.keylen = true;
    ck_assert_uint_eq(att_backward(gpu, s, true).dq_gemm_heads, 0);
    /* Under a causal mask, by default not at head dims up to 64 or with grouped query heads
     * unless every key head fits one chunk. */
    ck_assert_uint_eq(
        att_backward(gpu, att_shape(4, 16, 16, 4096, 4096, 64, true), true).dq_gemm_heads, 0);
    ck_assert_uint_eq(
        att_backward(gpu, att_shape(4, 16, 16, 4096, 4096, 128, true), true).dq_gemm_heads, 16);
    ck_assert_uint_eq(
        att_backward(gpu, att_shape(1, 8, 8, 4096, 4096, 64, true), true).dq_gemm_heads, 8);
    ck_assert_uint_eq(
        att_backward(gpu, att_shape(4, 16, 4, 4096, 4096, 128, true), true).dq_gemm_heads, 0);
    ck_assert_uint_eq(
        att_backward(gpu, att_shape(4, 16, 4, 4096, 4096, 128, false), true).dq_gemm_heads, 4);
    fake_free(gpu);
}
END_TEST

START_TEST(attention_tuning_is_honoured) {
    const oclml__att_shape d128 = att_shape(2, 8, 8, 1024, 1024, 128, false),
                           d64 = att_shape(2, 8, 8, 1024, 1024, 64, false),
                           decode = att_shape(1, 8, 2, 1, 4096, 128, false);
    oclml_ctx *ctx = device_ctx(&H100, "attention.mma_warps=4,attention.mma_keys=64");
    ck_assert_uint_eq(att_forward(ctx, d128, NULL).warps, 4);
    ck_assert_uint_eq(att_forward(ctx, d64, NULL).columns, 64);
    fake_free(ctx);
    ctx = device_ctx(&H100, "attention.mma=0");
    ck_assert_int_eq(att_forward(ctx, d128, NULL).kind, ATT_FWD);
    ck_assert_int_eq(att_backward(ctx, d128, true).dkdv.kind, ATT_DKDV);
    fake_free(ctx);
    ctx = device_ctx(&H100, "attention.fwd_pairs=1,attention.dkdv_pairs=0");
    ck_assert(att_forward(ctx, d128, NULL).paired);
    ck_assert(!att_backward(ctx, d128, true).dkdv.paired);
    fake_free(ctx);
    ctx = device_ctx(&H100, "attention.dq_gemm=0");
    ck_assert_uint_eq(att_backward(ctx, d64, true).dq_gemm_heads, 0);
    fake_free(ctx);
    ctx = device_ctx(&H100, "attention.dq_gemm=3");
    ck_assert_uint_eq(att_backward(ctx, d64, true).dq_gemm_heads, 3);
    fake_free(ctx);
    size_t splits;
    ctx = device_ctx(&POCL, "attention.splits=3,attention.tile=8:8:2:2");
    att_forward(ctx, decode, &splits);
    ck_assert_uint_eq(splits, 3);
    assert_tile(att_forward(ctx, d64, NULL).tile, 8, 8, 2, 2);
    fake_free(ctx);
    /* The emulated tensor-core kernels (tests) where the work-groups hold 4 warps, not on the
     * 16-wide device. */
    ctx = device_ctx(&POCL, "attention.mma=2");
    oclml__att_kernel_plan k = att_forward(ctx, d64, NULL);
    ck_assert_int_eq(k.kind, ATT_FWD_MMA);
    ck_assert_int_eq(k.mma, 2);
    ck_assert_ptr_nonnull(strstr(k.defines, "-DMMA_EMULATE=1"));
    fake_free(ctx);
    ctx = device_ctx(&SMALL, "attention.mma=2");
    ck_assert_int_eq(att_forward(ctx, d64, NULL).mma, 0);
    fake_free(ctx);
}
END_TEST

/* Prewarm builds the programs the calls plan, whole (no defines cut), each once. */
START_TEST(attention_prewarm_matches_plans) {
    /* The native 16-bit forward, on by default, is left out where it is turned off. */
    oclml_ctx *off = device_ctx(&H100, "attention.lp_mma=0");
    oclml__warm_list none = {0};
    oclml__attention_warm(off, "attention", &none);
    ck_assert_uint_eq(none.n, 3);
    free(none.items);
    fake_free(off);
    oclml_ctx *gpu = device_ctx(&H100, "");
    oclml__warm_list list = {0};
    oclml__attention_warm(gpu, "attention", &list);
    /* Head dims 64 and 128, and 128's causal forward (4 warps); 64's causal is the same. Then
     * the native 16-bit forward's: bf16 and fp16 q, k, v, o in their dtype or fp32, at head
     * dims 64 and 128. */
    ck_assert_uint_eq(list.n, 3 + 8);
    for (size_t i = 3; i < list.n; i++) {
        ck_assert_str_eq(list.items[i].file, "attention_lp_fwd.cl");
        ck_assert_str_eq(list.items[i].kernels, "oclml_attention_lp_fwd");
        ck_assert_ptr_nonnull(strstr(list.items[i].defines, "-DMMA_EMULATE=0"));
    }
    const size_t dims[3] = {64, 128, 128};
    for (size_t i = 0; i < 3; i++) {
        const oclml__att_kernel_plan k =
            att_forward(gpu, att_shape(1, 1, 1, 1024, 1024, dims[i], i == 2), NULL);
        ck_assert_str_eq(list.items[i].defines, k.defines);
        ck_assert_str_eq(list.items[i].kernels, "oclml_attention_fwd_mma");
    }
    free(list.items);
    list = (oclml__warm_list){0};
    oclml__attention_warm(gpu, "attention_backward", &list);
    const oclml__att_backward_plan b =
        att_backward(gpu, att_shape(1, 1, 1, 1024, 1024, 64, false), true);
    bool found = false;
    for (size_t i = 0; i < list.n; i++)
        if (!strcmp(list.items[i].kernels, "oclml_attention_dkdv_mma") &&
            !strcmp(list.items[i].defines, b.dkdv.defines))
            found = true;
    ck_assert_msg(found, "the head dim 64 dK/dV kernel writing dS is not in the warm list");
    free(list.items);
    fake_free(gpu);
    /* The native backward, on by default, is not listed where attention.lp_bwd_mma=0 turns it
     * off; by default its programs (bf16 and fp16, head dims 64 and 128, the gradients in the
     * inputs' dtype) follow the fp32 backward's, on the instruction. */
    oclml_ctx *dflt = device_ctx(&H100, "attention.lp_bwd_mma=0");
    list = (oclml__warm_list){0};
    oclml__attention_warm(dflt, "attention_backward", &list);
    for (size_t i = 0; i < list.n; i++) ck_assert_str_ne(list.items[i].file, "attention_lp_bwd.cl");
    free(list.items);
    fake_free(dflt);
    oclml_ctx *lp = device_ctx(&H100, "");
    list = (oclml__warm_list){0};
    oclml__attention_warm(lp, "attention_backward", &list);
    size_t native = 0;
    for (size_t i = 0; i < list.n; i++)
        if (!strcmp(list.items[i].file, "attention_lp_bwd.cl")) {
            native++;
            ck_assert_str_eq(
                list.items[i].kernels,
                "oclml_attention_lp_delta oclml_attention_lp_dkdv oclml_attention_lp_dq");
            ck_assert_ptr_nonnull(strstr(list.items[i].defines, "-DMMA_EMULATE=0"));
        }
    ck_assert_uint_eq(native, 4);
    free(list.items);
    fake_free(lp);
}
END_TEST

/* ---- GEMM (lib/ops/gemm_plan.c) ---- */

/* The planner's choice for a dense m x n x k product, in words. */
static const char *gemm_plan(oclml_ctx *ctx, size_t m, size_t n, size_t k) {
    static char text[256];
    const oclml__gemm_desc d = oclml__gemm_desc_dense(m, n, k);
    oclml__gemm_describe(ctx, &d, text, sizeof text);
    return text;
}

#define ASSERT_PLAN_HAS(text, part) \
    ck_assert_msg(strstr((text), (part)) != NULL, "plan \"%s\" lacks \"%s\"", (text), (part))

START_TEST(gemm_plans_per_device) {
    oclml_ctx *gpu = device_ctx(&H100, ""), *cpu = device_ctx(&POCL, ""),
              *small = device_ctx(&SMALL, "");
    /* From depth 8192 the 128 x 128 tile, staged through registers, runs any size. */
    const char *t = gemm_plan(gpu, 8192, 8192, 8192);
    ASSERT_PLAN_HAS(t, "own 3xTF32 tensor cores, tile 128x128x16");
    ASSERT_PLAN_HAS(t, "staged through registers");
    /* Below it, with K <= 4 N, it gives way to 64 x 128 with 4 asynchronous copy stages; with
     * K > 4 N (attention's dQ = dS K: the staged tile loses at larger depth) it stays. */
    t = gemm_plan(gpu, 8192, 2048, 6144);
    ASSERT_PLAN_HAS(t, "tile 64x128x16");
    ASSERT_PLAN_HAS(t, "4 async copy stages");
    t = gemm_plan(gpu, 8192, 1024, 6144);
    ASSERT_PLAN_HAS(t, "tile 128x128x16");
    ASSERT_PLAN_HAS(t, "staged through registers");
    /* Few rows and a long K: the tile that covers the rows, K split for the compute units (up
     * to 4 blocks a unit, each split at least 8 K tiles). */
    t = gemm_plan(gpu, 16, 4096, 4096);
    ASSERT_PLAN_HAS(t, "tile 16x64x32");
    ASSERT_PLAN_HAS(t, "8 K splits");
    ASSERT_PLAN_HAS(gemm_plan(gpu, 4096, 4096, 4096), "1 K split");
    /* No tensor cores: the FMA tiles on a CPU (CLBlast's own programs take PoCL 7-13 s to
     * compile), on a small device, and CLBlast on GPUs where it runs (work-groups of 64) and on
     * CPUs whose CLBlast parameters were tuned (gemm_tuning_is_honoured). */
    ASSERT_PLAN_HAS(gemm_plan(cpu, 1024, 1024, 1024), "own FMA tiles, tile 32x32x16");
    t = gemm_plan(small, 1024, 1024, 1024);
    ASSERT_PLAN_HAS(t, "own FMA tiles, tile 16x16x16, 4x4 work-items");
    fake_free(gpu);
    fake_free(cpu);
    fake_free(small);
}
END_TEST

START_TEST(gemm_tuning_is_honoured) {
    oclml_ctx *ctx = device_ctx(&H100, "gemm.splitk=3,gemm.mma_tile=64:64:32:2:2");
    const char *t = gemm_plan(ctx, 16, 4096, 4096);
    ASSERT_PLAN_HAS(t, "tile 64x64x32");
    ASSERT_PLAN_HAS(t, "3 K splits");
    fake_free(ctx);
    ctx = device_ctx(&H100, "gemm.stages=0");
    ASSERT_PLAN_HAS(gemm_plan(ctx, 8192, 2048, 6144), "staged through registers");
    fake_free(ctx);
    ctx = device_ctx(&H100, "gemm.mma=0");
    ASSERT_PLAN_HAS(gemm_plan(ctx, 1024, 1024, 1024), "CLBlast sgemm");
    fake_free(ctx);
    ctx = device_ctx(&POCL, "gemm.own=0");
    ASSERT_PLAN_HAS(gemm_plan(ctx, 1024, 1024, 1024), "CLBlast sgemm");
    fake_free(ctx);
    ctx = device_ctx(&POCL, "clblast.xgemm=0:1:32:1:8:8:64:16:8:64:1:1:1:1:4:4");
    ASSERT_PLAN_HAS(gemm_plan(ctx, 1024, 1024, 1024), "CLBlast sgemm");
    fake_free(ctx);
    ctx = device_ctx(&POCL, "gemm.mma=2");
    ASSERT_PLAN_HAS(gemm_plan(ctx, 1024, 1024, 1024), "3xTF32 tensor cores (emulated)");
    fake_free(ctx);
}
END_TEST

/* ---- convolution (lib/ops/conv*.c) ---- */

/* N images of C channels H x W into K channels by R x R taps at stride and padding (one group,
 * dilation 1). */
static conv_shape conv_of(size_t N, size_t C, size_t H, size_t W, size_t K, size_t R,
                          unsigned stride, unsigned pad) {
    return (conv_shape){.N = N,
                        .C = C,
                        .H = H,
                        .W = W,
                        .K = K,
                        .R = R,
                        .S = R,
                        .P = (H + 2 * pad - R) / stride + 1,
                        .Q = (W + 2 * pad - R) / stride + 1,
                        .sh = stride,
                        .sw = stride,
                        .ph = pad,
                        .pw = pad,
                        .dh = 1,
                        .dw = 1,
                        .groups = 1};
}

static void assert_paths(oclml_ctx *ctx, conv_shape s, conv_path forward, conv_path data,
                         conv_path weight) {
    const conv_path got[3] = {oclml__conv_forward_path(ctx, &s), oclml__conv_data_path(ctx, &s),
                              oclml__conv_weight_path(ctx, &s)};
    ck_assert_msg(got[0] == forward && got[1] == data && got[2] == weight,
                  "C%zu K%zu %zux%zu taps %zu stride %u: paths %d %d %d, expected %d %d %d", s.C,
                  s.K, s.H, s.W, s.R, s.sh, got[0], got[1], got[2], forward, data, weight);
}

START_TEST(conv_paths_per_device) {
    oclml_ctx *gpu = device_ctx(&H100, ""), *cpu = device_ctx(&POCL, "");
    /* On tensor cores: Winograd for 3x3 from 96 channels (32 for the weight gradient); the
     * implicit GEMM where an image gives 256 columns (the data gradient also 32 rows, stride
     * 1); direct gradients into or from an image's few channels (a first layer); 1x1 as a
     * product with the images; the unfolded copy otherwise. */
    assert_paths(gpu, conv_of(8, 128, 28, 28, 128, 3, 1, 1), CONV_WINOGRAD, CONV_WINOGRAD,
                 CONV_WINOGRAD);
    assert_paths(gpu, conv_of(8, 64, 56, 56, 64, 3, 1, 1), CONV_GATHERED, CONV_GATHERED,
                 CONV_WINOGRAD);
    assert_paths(gpu, conv_of(8, 64, 14, 14, 64, 3, 1, 1), CONV_UNFOLDED, CONV_UNFOLDED,
                 CONV_WINOGRAD);
    assert_paths(gpu, conv_of(8, 3, 64, 64, 32, 5, 1, 2), CONV_GATHERED, CONV_DIRECT, CONV_DIRECT);
    assert_paths(gpu, conv_of(8, 64, 56, 56, 256, 1, 1, 0), CONV_POINTWISE, CONV_POINTWISE,
                 CONV_DIRECT);
    assert_paths(gpu, conv_of(8, 64, 56, 56, 128, 3, 2, 1), CONV_GATHERED, CONV_UNFOLDED,
                 CONV_UNFOLDED);
    /* Without tensor cores every pass but the pointwise unfolds (CLBlast's products). */
    assert_paths(cpu, conv_of(8, 128, 28, 28, 128, 3, 1, 1), CONV_UNFOLDED, CONV_UNFOLDED,
                 CONV_UNFOLDED);
    assert_paths(cpu, conv_of(8, 3, 64, 64, 32, 5, 1, 2), CONV_UNFOLDED, CONV_UNFOLDED,
                 CONV_UNFOLDED);
    assert_paths(cpu, conv_of(8, 64, 56, 56, 256, 1, 1, 0), CONV_POINTWISE, CONV_POINTWISE,
                 CONV_UNFOLDED);
    fake_free(gpu);
    fake_free(cpu);
}
END_TEST

START_TEST(conv_tuning_is_honoured) {
    oclml_ctx *ctx = device_ctx(&POCL, "conv.winograd=1,conv.direct_dx=1,conv.implicit=1");
    assert_paths(ctx, conv_of(8, 128, 28, 28, 128, 3, 1, 1), CONV_WINOGRAD, CONV_WINOGRAD,
                 CONV_WINOGRAD);
    assert_paths(ctx, conv_of(8, 3, 64, 64, 32, 5, 1, 2), CONV_WINOGRAD, CONV_DIRECT,
                 CONV_WINOGRAD);
    assert_paths(ctx, conv_of(8, 64, 56, 56, 128, 3, 2, 1), CONV_GATHERED, CONV_UNFOLDED,
                 CONV_GATHERED);
    fake_free(ctx);
    ctx = device_ctx(&H100, "conv.winograd=0,conv.direct_dw=0,conv.implicit_dx=0");
    assert_paths(ctx, conv_of(8, 128, 28, 28, 128, 3, 1, 1), CONV_GATHERED, CONV_UNFOLDED,
                 CONV_UNFOLDED);
    assert_paths(ctx, conv_of(8, 3, 64, 64, 32, 5, 1, 2), CONV_GATHERED, CONV_DIRECT,
                 CONV_UNFOLDED);
    fake_free(ctx);
    /* A forced pass still needs a shape it takes: the direct data gradient needs work-groups
     * of 256. */
    ctx = device_ctx(&SMALL, "conv.direct_dx=1");
    const conv_shape first = conv_of(8, 3, 64, 64, 32, 5, 1, 2);
    ck_assert_int_eq(oclml__conv_data_path(ctx, &first), CONV_UNFOLDED);
    fake_free(ctx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("planners");
    TCase *tc = tcase_create("planners");
    tcase_add_test(tc, row_plans_per_device);
    tcase_add_test(tc, row_plans_for_16bit_rows);
    tcase_add_test(tc, tuning_table_parses);
    tcase_add_test(tc, attention_plans_per_device);
    tcase_add_test(tc, attention_dq_from_ds);
    tcase_add_test(tc, attention_tuning_is_honoured);
    tcase_add_test(tc, attention_prewarm_matches_plans);
    tcase_add_test(tc, gemm_plans_per_device);
    tcase_add_test(tc, gemm_tuning_is_honoured);
    tcase_add_test(tc, conv_paths_per_device);
    tcase_add_test(tc, conv_tuning_is_honoured);
    suite_add_tcase(s, tc);
    return test_main(s);
}
