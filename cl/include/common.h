/* Helpers every kernel file includes (#include "common.h"): addressing, the shared logistic
 * function, and which kernels a build compiles.
 *
 * A program is built for one variant: the host passes -DOCLML_WANT_<kernel>=1 for each kernel
 * the op will launch (or -DOCLML_WANT_ALL=1), and a file guards each kernel with
 * #if OCLML_WANT(name), so a build compiles only what runs. */
#ifndef OCLML_COMMON_H
#define OCLML_COMMON_H

#ifndef OCLML_WANT_ALL
#define OCLML_WANT_ALL 0
#endif
#define OCLML_WANT(name) (OCLML_WANT_ALL || OCLML_WANT_##name)

/* CPU devices (the host's -DOCLML_CHUNKS=1, lib/ops/ops.h's oclml__chunk_grid): work-item g
 * takes one contiguous chunk [begin, end) of [0, n), a multiple of 16 elements long, and loops
 * over it element by element; the CPU compiler vectorises such a loop, and no two work-items
 * share a cache line. GPUs stride over the range instead, so that neighbours take neighbours. */
#ifndef OCLML_CHUNKS
#define OCLML_CHUNKS 0
#endif
#define OCLML_CHUNK(n, begin, end)                                                   \
    const ulong begin##_per =                                                        \
        (((ulong)(n) + get_global_size(0) - 1) / get_global_size(0) + 15) / 16 * 16; \
    const ulong begin = min((ulong)(n), get_global_id(0) * begin##_per),             \
                end = min((ulong)(n), begin + begin##_per);
/* A loop over [0, n) for i: the work-item's chunk on CPUs, a grid stride on GPUs. */
#if OCLML_CHUNKS
#define OCLML_FOR_EACH(i, n)           \
    OCLML_CHUNK(n, i##_begin, i##_end) \
    for (ulong i = i##_begin; i < i##_end; i++)
#else
#define OCLML_FOR_EACH(i, n) \
    for (ulong i = get_global_id(0); i < (ulong)(n); i += get_global_size(0))
#endif

/* For helpers with large bodies: C99 inline alone lets a compiler keep them out of line, which
 * fails to link (no external definition) or moves their private arrays to slow memory. */
#define OCLML_INLINE inline __attribute__((always_inline))

/* Work-items stride over [0, total) taken as units of `per` elements (an image, a plane):
 *     OCLML_FOR_UNITS_BEGIN(total, per)
 *         ... statements using `unit` (ulong) and `within` (uint, < per) ...
 *     OCLML_FOR_UNITS_END
 * The divisions run in 32 bits wherever the range allows (a uniform branch): a 64-bit division
 * costs tens of instructions on GPUs, more than a memory-bound element's work. A BEGIN/END
 * pair, because OpenCL C 1.2 has no variadic macros to pass the statements in. */
#define OCLML_FOR_UNITS_BEGIN(total, per)                                          \
    {                                                                              \
        const ulong total_ = (ulong)(total);                                       \
        const uint per_ = (uint)(per);                                             \
        const int narrow_ = total_ + get_global_size(0) <= 0xffffffffUL;           \
        for (ulong e_ = get_global_id(0); e_ < total_; e_ += get_global_size(0)) { \
            ulong unit;                                                            \
            uint within;                                                           \
            if (narrow_) {                                                         \
                unit = (uint)e_ / per_;                                            \
                within = (uint)e_ % per_;                                          \
            } else {                                                               \
                unit = e_ / per_;                                                  \
                within = (uint)(e_ % per_);                                        \
            }
#define OCLML_FOR_UNITS_END \
    }                       \
    }

/* Work-group a of na along a grid's faster dimension and b of nb along its slower one,
 * renumbered so that b varies fastest: the device starts groups in the order of a, so the
 * renumbered groups run every b of one a before the next a (attention's blocks over its heads, a
 * banded GEMM's block rows over its batch entries). Returns the renumbered (a, b). */
OCLML_INLINE uint2 oclml_block_major(uint a, uint na, uint b, uint nb) {
    const uint linear = a + na * b;
    return (uint2)(linear / nb, linear % nb);
}

/* Kernels address tensors as (buffer, element offset): a wrapped cl_mem may start anywhere. */
#define OCLML_AT(buf, off) ((buf) + (off))

/* The logistic function of the elementwise op, the GRU gates and the RSSM rollout (one
 * definition, so they round alike). exp(-x) overflows to inf for x < -88: the result is then 0,
 * not NaN. */
inline float oclml_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

#endif
