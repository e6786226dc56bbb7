/* The planners as pure functions, linked from the internal library: no OpenCL device is needed,
 * so devices we do not have (a 1024-wide GPU, a small embedded GPU) are planned for here. */
#include "testutil.h"

#include "core/core.h"
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
    return ctx;
}

static void fake_free(oclml_ctx *ctx) {
    free(ctx->last_error);
    free(ctx->tune);
    pthread_mutex_destroy(&ctx->build_lock);
    pthread_mutex_destroy(&ctx->error_lock);
    free(ctx);
}

static const oclml__row_family FAMILY = {
    "softmax.cl", "oclml_softmax_fwd", "oclml_softmax_fwd_part oclml_softmax_fwd_finish", 1, NULL};

START_TEST(row_plans_per_device) {
    oclml_ctx *gpu = fake_ctx(true, 1024, 132), *cpu = fake_ctx(false, 4096, 2),
              *small = fake_ctx(true, 16, 4);
    oclml__row_plan p;
    /* Short rows: a few lanes per row on GPUs, one on CPUs; float4 where the offsets allow. */
    ASSERT_OK(oclml__row_plan_for(gpu, &FAMILY, 4096, 64, true, &p));
    ck_assert(!p.long_rows);
    ck_assert_uint_eq(p.G, 8);
    ck_assert_uint_eq(p.vec, 4);
    ck_assert_str_eq(oclml__row_spec(&FAMILY, &p).defines, "-DROW_ITEMS=2 -DROW_VEC=4");
    ck_assert_str_eq(oclml__row_spec(&FAMILY, &p).kernels, "oclml_softmax_fwd");
    ASSERT_OK(oclml__row_plan_for(cpu, &FAMILY, 4096, 64, false, &p));
    ck_assert_uint_eq(p.G, 4); /* 16 floats a work-item */
    ck_assert_uint_eq(p.vec, 1);
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
    fake_free(small);
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

int main(void) {
    Suite *s = suite_create("planners");
    TCase *tc = tcase_create("planners");
    tcase_add_test(tc, row_plans_per_device);
    tcase_add_test(tc, tuning_table_parses);
    suite_add_tcase(s, tc);
    return test_main(s);
}
