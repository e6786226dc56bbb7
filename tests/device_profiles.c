/* Devices for the planners without the devices (device_profiles.h). */
#include "device_profiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const device_profile device_profiles[] = {
    {"cpu", "PoCL's CPU device"},
    {"cpu-mma-emulated", "PoCL's CPU device, tensor-core kernels emulated"},
    {"gpu-mma", "a GPU with TF32 tensor cores and inline PTX"},
    {"gpu", "a GPU without tensor cores or PTX"},
    {NULL, NULL}};

static void set_caps(oclml__caps *c, bool gpu, size_t wg, unsigned cus, size_t local, unsigned simd,
                     bool mma) {
    c->is_gpu = gpu;
    c->max_work_group_size = wg;
    c->compute_units = cus;
    c->local_mem_bytes = local;
    c->simd_width = simd;
    c->vector_floats = gpu ? 1 : 8;
    c->fp64 = true;
    c->inline_ptx = mma;
    c->mma_tf32 = mma;
    c->register_cap_option = mma;
    c->nv_cc_major = mma ? 9 : 0;
    c->driver_program_cache = !gpu;
    c->workspace_bytes = (size_t)256 << 20;
}

oclml_ctx *device_profile_ctx(const char *name, const char *tuning) {
    const char *own = NULL;
    oclml_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    pthread_mutex_init(&ctx->build_lock, NULL);
    pthread_mutex_init(&ctx->error_lock, NULL);
    pthread_mutex_init(&ctx->caps_lock, NULL);
    if (!strcmp(name, "cpu") || !strcmp(name, "cpu-mma-emulated")) {
        set_caps(&ctx->caps, false, 4096, 2, 1 << 20, 1, false);
        if (name[3]) own = "gemm.own=1 gemm.mma=2 attention.mma=2 attention.lp_mma=2";
    } else if (!strcmp(name, "gpu-mma")) {
        set_caps(&ctx->caps, true, 1024, 132, 48 << 10, 32, true);
    } else if (!strcmp(name, "gpu")) {
        set_caps(&ctx->caps, true, 256, 104, 64 << 10, 64, false);
    } else {
        fprintf(stderr, "no device profile '%s'\n", name);
        device_profile_free(ctx);
        return NULL;
    }
    ctx->max_groups_yz = 65535;
    char both[1024];
    snprintf(both, sizeof both, "%s %s", own ? own : "", tuning ? tuning : "");
    if (oclml__tune_init(ctx, both)) {
        fprintf(stderr, "device profile %s: %s\n", name, ctx->last_error);
        device_profile_free(ctx);
        return NULL;
    }
    return ctx;
}

void device_profile_free(oclml_ctx *ctx) {
    if (!ctx) return;
    free(ctx->last_error);
    free(ctx->tune);
    pthread_mutex_destroy(&ctx->build_lock);
    pthread_mutex_destroy(&ctx->error_lock);
    pthread_mutex_destroy(&ctx->caps_lock);
    free(ctx);
}
