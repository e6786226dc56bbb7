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

/* For helpers with large bodies: C99 inline alone lets a compiler keep them out of line, which
 * fails to link (no external definition) or moves their private arrays to slow memory. */
#define OCLML_INLINE inline __attribute__((always_inline))

/* Work-items stride over [0, total) taken as units of `per` elements (an image, a plane):
 * every element runs the statement list after the unit index `unit` and the index `within` it
 * (< per, 32-bit) are set. The divisions run in 32 bits wherever the range allows: a 64-bit
 * division costs tens of instructions on GPUs, more than a memory-bound element's work. */
#define OCLML_FOR_UNITS(total, per, ...)                                                   \
    if ((ulong)(total) + get_global_size(0) <= 0xffffffffUL) {                             \
        for (uint e_ = (uint)get_global_id(0); e_ < (uint)(total);                         \
             e_ += (uint)get_global_size(0)) {                                             \
            const uint unit = e_ / (uint)(per), within = e_ % (uint)(per);                 \
            __VA_ARGS__;                                                                   \
        }                                                                                  \
    } else {                                                                               \
        for (ulong e_ = get_global_id(0); e_ < (ulong)(total); e_ += get_global_size(0)) { \
            const ulong unit = e_ / (per);                                                 \
            const uint within = (uint)(e_ % (per));                                        \
            __VA_ARGS__;                                                                   \
        }                                                                                  \
    }

/* Kernels address tensors as (buffer, element offset): a wrapped cl_mem may start anywhere. */
#define OCLML_AT(buf, off) ((buf) + (off))

/* The logistic function of the elementwise op, the GRU gates and the RSSM rollout (one
 * definition, so they round alike). exp(-x) overflows to inf for x < -88: the result is then 0,
 * not NaN. */
inline float oclml_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

#endif
