/* The 16-bit element types on the device, stored as ushort words: bf16 (a float's top half) and
 * fp16 (IEEE binary16, through core OpenCL's vload_half/vstore_half, which need no half
 * extension). Conversions to them round to nearest, ties to even, as the host's do
 * (lib/core/dtype.c); NaN stays NaN.
 *
 * A file that moves elements of a build-time dtype defines NAME_DT (0 fp32, 1 bf16, 2 fp16) and
 * declares its pointers through DT_ELEM(NAME_DT); DT_LOAD(dt, p, i) reads element i as a float,
 * DT_STORE(dt, p, i, v) writes v rounded; DT_LOAD4 and DT_STORE4 do the same for the four
 * elements 4 i .. 4 i + 3 as a float4, p aligned to four elements (vector accesses: vload4
 * promises only element alignment, and compilers may split it). */
#ifndef OCLML_DTYPE_H
#define OCLML_DTYPE_H

#include "common.h"

OCLML_INLINE float bf16_to_float(ushort h) { return as_float((uint)h << 16); }

OCLML_INLINE ushort bf16_from_float(float f) {
    const uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u); /* quiet NaN */
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

OCLML_INLINE float4 bf16x4_to_float4(ushort4 h) {
    return as_float4(convert_uint4(h) << 16);
}

OCLML_INLINE ushort4 bf16x4_from_float4(float4 f) {
    return (ushort4)(bf16_from_float(f.x), bf16_from_float(f.y), bf16_from_float(f.z),
                     bf16_from_float(f.w));
}

/* Two floats packed as the bf16 pair a 32-bit word holds (lo in the low half). */
OCLML_INLINE uint bf16x2_from_float(float lo, float hi) {
    return (uint)bf16_from_float(lo) | (uint)bf16_from_float(hi) << 16;
}

#define DT_ELEM_0 float
#define DT_ELEM_1 ushort
#define DT_ELEM_2 ushort
#define DT_ELEM_(dt) DT_ELEM_##dt
#define DT_ELEM(dt) DT_ELEM_(dt)

#define DT_LOAD_0(p, i) ((p)[i])
#define DT_LOAD_1(p, i) bf16_to_float((p)[i])
#define DT_LOAD_2(p, i) vload_half((i), (const __global half *)(p))
#define DT_LOAD_(dt, p, i) DT_LOAD_##dt(p, i)
#define DT_LOAD(dt, p, i) DT_LOAD_(dt, p, i)

#define DT_LOAD4_0(p, i) (((__global const float4 *)(p))[i])
#define DT_LOAD4_1(p, i) bf16x4_to_float4(((__global const ushort4 *)(p))[i])
#define DT_LOAD4_2(p, i) vload_half4((i), (const __global half *)(p))
#define DT_LOAD4_(dt, p, i) DT_LOAD4_##dt(p, i)
#define DT_LOAD4(dt, p, i) DT_LOAD4_(dt, p, i)

#define DT_STORE_0(p, i, v) ((p)[i] = (v))
#define DT_STORE_1(p, i, v) ((p)[i] = bf16_from_float(v))
#define DT_STORE_2(p, i, v) vstore_half_rte((v), (i), (__global half *)(p))
#define DT_STORE_(dt, p, i, v) DT_STORE_##dt(p, i, v)
#define DT_STORE(dt, p, i, v) DT_STORE_(dt, p, i, v)

#define DT_STORE4_0(p, i, v) (((__global float4 *)(p))[i] = (v))
#define DT_STORE4_1(p, i, v) (((__global ushort4 *)(p))[i] = bf16x4_from_float4(v))
#define DT_STORE4_2(p, i, v) vstore_half4_rte((v), (i), (__global half *)(p))
#define DT_STORE4_(dt, p, i, v) DT_STORE4_##dt(p, i, v)
#define DT_STORE4(dt, p, i, v) DT_STORE4_(dt, p, i, v)

#endif
