/* warm_programs: the programs each op's warm planner lists (lib/ops/ops.def's warm column), as
 * planned for the device profiles of device_profiles.h; no OpenCL device is needed. One line a
 * program, tab-separated: profile, op, kernel file, 1 where the device builds it with its PTX
 * helpers on (-DOCLML_PTX=1) else 0, defines ("" for none), kernels. The OpenCL lint
 * (tests/cl_pedantic.sh) checks each; prewarm builds the same list on a real device.
 *
 *   warm_programs [--every-shape] [--tf32] [--tune KEY=VALUE,...] [PROFILE ...]
 *   (default: every profile)
 *
 * --every-shape: the planners' wider lists (the shapes prewarm leaves to first use: other head
 * dims, masks, layouts, operand forms), so that the lint sees every variant a planner can pick.
 * --tf32: in math mode TF32 (oclml_ctx_set_math_mode: one TF32 product an element).
 * --tune: tuning values over the profiles' own (variants only a tuning key selects). */
#include "device_profiles.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int list_profile(const char *name, bool every_shape, bool tf32, const char *tuning) {
    oclml_ctx *ctx = device_profile_ctx(name, tuning);
    if (!ctx) return 1;
    if (tf32) ctx->math_mode = OCLML_MATH_TF32;
    oclml__warm_list list = {.every_shape = every_shape};
    oclml_status st = oclml__warm_collect(ctx, NULL, &list);
    int rc = 0;
    if (st)
        fprintf(stderr, "warm_programs: %s: %s\n", name, ctx->last_error);
    else if (list.out_of_memory)
        fprintf(stderr, "warm_programs: %s: out of memory\n", name);
    else if (list.too_long_op)
        fprintf(stderr, "warm_programs: %s: a program of %s does not fit a warm item\n", name,
                list.too_long_op);
    rc = st || list.out_of_memory || list.too_long_op;
    for (size_t i = 0; !rc && i < list.n; i++) {
        const oclml__warm_item *it = &list.items[i];
        printf("%s\t%s\t%s\t%d\t%s\t%s\n", name, it->op, it->file, ctx->caps.inline_ptx,
               it->defines, it->kernels);
    }
    free(list.items);
    device_profile_free(ctx);
    return rc;
}

static int usage(FILE *f) {
    fprintf(f, "usage: warm_programs [--every-shape] [--tf32] [--tune KEY=VALUE,...] "
               "[PROFILE ...]\n"
               "profiles:\n");
    for (const device_profile *p = device_profiles; p->name; p++)
        fprintf(f, "  %-18s %s\n", p->name, p->what);
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
    bool every_shape = false, tf32 = false;
    const char *tuning = NULL;
    int named = 0, rc = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--every-shape"))
            every_shape = true;
        else if (!strcmp(argv[i], "--tf32"))
            tf32 = true;
        else if (!strcmp(argv[i], "--tune") && i + 1 < argc)
            tuning = argv[++i];
        else if (argv[i][0] == '-')
            return usage(strcmp(argv[i], "--help") ? stderr : stdout);
        else
            argv[1 + named++] = argv[i]; /* profile names, packed at the front */
    }
    for (int i = 1; i <= named; i++) rc |= list_profile(argv[i], every_shape, tf32, tuning);
    for (const device_profile *p = device_profiles; !named && p->name; p++)
        rc |= list_profile(p->name, every_shape, tf32, tuning);
    return rc;
}
