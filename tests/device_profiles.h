/* Devices the planners can be asked about without having them: contexts with nothing but the
 * capabilities and the tuning table a planner reads (no OpenCL objects), for the tests that
 * check the per-op lists against ops.def (check_planners) and for the programs the OpenCL lint
 * checks (warm_programs, tests/cl_pedantic.sh). */
#ifndef OCLML_TESTS_DEVICE_PROFILES_H
#define OCLML_TESTS_DEVICE_PROFILES_H

#include "core/core.h"

typedef struct device_profile {
    const char *name; /* "cpu", "cpu-mma-emulated", "gpu-mma", "gpu" */
    const char *what; /* in words */
} device_profile;

/* The profiles, ending with an entry whose name is NULL:
 *   cpu: PoCL's CPU device (2 cores, work-groups up to 4096), default tuning;
 *   cpu-mma-emulated: the same with the tensor-core kernels emulated (gemm.own=1, gemm.mma=2,
 *     attention.mma=2, attention.lp_mma=2, as the suite runs them there);
 *   gpu-mma: a GPU with TF32 tensor cores and inline PTX (132 compute units, 48 KiB of local
 *     memory, 1024-wide work-groups: NVIDIA's OpenCL on an H100);
 *   gpu: a GPU without either (64-wide wavefronts, 256-wide work-groups, 64 KiB). */
extern const device_profile device_profiles[];

/* A context of the named profile with `tuning` (key=value, ...; NULL: none) over the profile's
 * own; NULL for an unknown name or a bad tuning string (why in stderr). */
oclml_ctx *device_profile_ctx(const char *name, const char *tuning);
void device_profile_free(oclml_ctx *ctx);

#endif
