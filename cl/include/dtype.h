/* The 16-bit element types on the device, stored as ushort words: bf16 (a float's top half) and
 * fp16 (IEEE binary16, converted by bit arithmetic: core OpenCL's vload_half/vstore_half are
 * missing from some compilers' headers, clang's for NVIDIA's target among them). Conversions to
 * them round to nearest, ties to even, as the host's do (lib/core/dtype.c, the same steps); NaN
 * stays NaN.
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

OCLML_INLINE float4 bf16x4_to_float4(ushort4 h) { return as_float4(convert_uint4(h) << 16); }

OCLML_INLINE ushort4 bf16x4_from_float4(float4 f) {
    return (ushort4)(bf16_from_float(f.x), bf16_from_float(f.y), bf16_from_float(f.z),
                     bf16_from_float(f.w));
}

OCLML_INLINE float fp16_to_float(ushort h) {
    const uint sign = (uint)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0u) return as_float(sign | as_uint((float)m * 0x1p-24f)); /* subnormal: exact */
    return as_float(sign | ((e + 112u) << 23) | (m << 13));
}

OCLML_INLINE ushort fp16_from_float(float f) {
    const uint u = as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (ushort)(sign | 0x7e00u | ((a >> 13) & 0x1ffu));
    if (a >= 0x477ff000u) return (ushort)(sign | 0x7c00u); /* rounds past 65504: infinity */
    if (a < 0x38800000u) /* below 2^-14: adding 0.5 (ulp 2^-24) rounds to a subnormal's step */
        return (ushort)(sign | (as_uint(as_float(a) + 0.5f) - 0x3f000000u));
    return (ushort)(sign | ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13)); /* rebias, round */
}

OCLML_INLINE float4 fp16x4_to_float4(ushort4 h) {
    return (float4)(fp16_to_float(h.x), fp16_to_float(h.y), fp16_to_float(h.z), fp16_to_float(h.w));
}

OCLML_INLINE ushort4 fp16x4_from_float4(float4 f) {
    return (ushort4)(fp16_from_float(f.x), fp16_from_float(f.y), fp16_from_float(f.z),
                     fp16_from_float(f.w));
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
#define DT_LOAD_2(p, i) fp16_to_float((p)[i])
#define DT_LOAD_(dt, p, i) DT_LOAD_##dt(p, i)
#define DT_LOAD(dt, p, i) DT_LOAD_(dt, p, i)

#define DT_LOAD4_0(p, i) (((__global const float4 *)(p))[i])
#define DT_LOAD4_1(p, i) bf16x4_to_float4(((__global const ushort4 *)(p))[i])
#define DT_LOAD4_2(p, i) fp16x4_to_float4(((__global const ushort4 *)(p))[i])
#define DT_LOAD4_(dt, p, i) DT_LOAD4_##dt(p, i)
#define DT_LOAD4(dt, p, i) DT_LOAD4_(dt, p, i)

#define DT_STORE_0(p, i, v) ((p)[i] = (v))
#define DT_STORE_1(p, i, v) ((p)[i] = bf16_from_float(v))
#define DT_STORE_2(p, i, v) ((p)[i] = fp16_from_float(v))
#define DT_STORE_(dt, p, i, v) DT_STORE_##dt(p, i, v)
#define DT_STORE(dt, p, i, v) DT_STORE_(dt, p, i, v)

/* The same four at any element alignment (vload4 and vstore4: ops whose tensors may start
 * anywhere). */
#define DT_VLOAD4_0(p, i) vload4((i), (p))
#define DT_VLOAD4_1(p, i) bf16x4_to_float4(vload4((i), (p)))
#define DT_VLOAD4_2(p, i) fp16x4_to_float4(vload4((i), (p)))
#define DT_VLOAD4_(dt, p, i) DT_VLOAD4_##dt(p, i)
#define DT_VLOAD4(dt, p, i) DT_VLOAD4_(dt, p, i)
#define DT_VSTORE4_0(p, i, v) vstore4((v), (i), (p))
#define DT_VSTORE4_1(p, i, v) vstore4(bf16x4_from_float4(v), (i), (p))
#define DT_VSTORE4_2(p, i, v) vstore4(fp16x4_from_float4(v), (i), (p))
#define DT_VSTORE4_(dt, p, i, v) DT_VSTORE4_##dt(p, i, v)
#define DT_VSTORE4(dt, p, i, v) DT_VSTORE4_(dt, p, i, v)

#define DT_STORE4_0(p, i, v) (((__global float4 *)(p))[i] = (v))
#define DT_STORE4_1(p, i, v) (((__global ushort4 *)(p))[i] = bf16x4_from_float4(v))
#define DT_STORE4_2(p, i, v) (((__global ushort4 *)(p))[i] = fp16x4_from_float4(v))
#define DT_STORE4_(dt, p, i, v) DT_STORE4_##dt(p, i, v)
#define DT_STORE4(dt, p, i, v) DT_STORE4_(dt, p, i, v)

#endif
