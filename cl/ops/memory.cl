/* Memory ops: fill, copy and cast. On fp32 tensors work-items stride over the range in float4
 * steps (vload4/vstore4 need only float alignment, so any tensor offset works); the last n % 4
 * elements are done one per work-item. On CPUs (OCLML_CHUNKS) each work-item loops over its
 * contiguous chunk instead (common.h). */
#include "common.h"

#if OCLML_WANT(oclml_fill)
__kernel void oclml_fill(__global float *dst, ulong dst_off, ulong n, float value) {
    __global float *d = OCLML_AT(dst, dst_off);
#if OCLML_CHUNKS
    OCLML_FOR_EACH(i, n) d[i] = value;
#else
    const ulong n4 = n / 4;
    const float4 v = (float4)(value);
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) vstore4(v, i, d);
    const ulong tail = 4 * n4 + get_global_id(0);
    if (tail < n) d[tail] = value;
#endif
}
#endif

#if OCLML_WANT(oclml_copy)
__kernel void oclml_copy(__global const float *src, ulong src_off, __global float *dst,
                         ulong dst_off, ulong n) {
    __global const float *s = OCLML_AT(src, src_off);
    __global float *d = OCLML_AT(dst, dst_off);
#if OCLML_CHUNKS
    OCLML_FOR_EACH(i, n) d[i] = s[i];
#else
    const ulong n4 = n / 4;
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) vstore4(vload4(i, s), i, d);
    const ulong tail = 4 * n4 + get_global_id(0);
    if (tail < n) d[tail] = s[tail];
#endif
}
#endif

/* The 16-bit dtypes: fill with a value's bits (rounded on the host), copy raw words, and the
 * conversion between any two dtypes (SRC_DT, DST_DT: dtype.h's numbers), one element a
 * work-item step: these are bandwidth-bound, and 16-bit words at any offset rule out wider
 * vectors unless aligned. */
#if OCLML_WANT(oclml_fill16)
__kernel void oclml_fill16(__global ushort *dst, ulong dst_off, ulong n, ushort bits) {
    __global ushort *d = OCLML_AT(dst, dst_off);
    OCLML_FOR_EACH(i, n) d[i] = bits;
}
#endif

#if OCLML_WANT(oclml_copy16)
__kernel void oclml_copy16(__global const ushort *src, ulong src_off, __global ushort *dst,
                           ulong dst_off, ulong n) {
    __global const ushort *s = OCLML_AT(src, src_off);
    __global ushort *d = OCLML_AT(dst, dst_off);
    OCLML_FOR_EACH(i, n) d[i] = s[i];
}
#endif

#if OCLML_WANT(oclml_pad_rows16)
/* rows_all rows of `cols` 16-bit elements (ld apart; every `rows` rows a batch entry, stride
 * apart) into rows of `pairs` element pairs (2 pairs elements apart, batch entries following
 * one another), zeros past cols: an operand with rows padded to a multiple of 8 elements. */
__kernel void oclml_pad_rows16(__global const ushort *src, ulong src_off, ulong ld, ulong stride,
                               ulong rows, __global uint *dst, ulong rows_all, ulong cols,
                               ulong pairs) {
    for (ulong R = get_global_id(1); R < rows_all; R += get_global_size(1)) {
        __global const ushort *s = src + src_off + R / rows * stride + R % rows * ld;
        __global uint *d = dst + R * pairs;
        for (ulong p = get_global_id(0); p < pairs; p += get_global_size(0)) {
            const ulong c = 2 * p;
            const uint lo = c < cols ? s[c] : 0u, hi = c + 1 < cols ? s[c + 1] : 0u;
            d[p] = lo | hi << 16;
        }
    }
}
#endif

#if OCLML_WANT(oclml_cast)
#include "dtype.h"
#ifndef SRC_DT
#define SRC_DT 0
#endif
#ifndef DST_DT
#define DST_DT 0
#endif
__kernel void oclml_cast(__global const DT_ELEM(SRC_DT) * src, ulong src_off,
                         __global DT_ELEM(DST_DT) * dst, ulong dst_off, ulong n) {
    __global const DT_ELEM(SRC_DT) *s = OCLML_AT(src, src_off);
    __global DT_ELEM(DST_DT) *d = OCLML_AT(dst, dst_off);
    OCLML_FOR_EACH(i, n) DT_STORE(DST_DT, d, i, DT_LOAD(SRC_DT, s, i));
}
#endif
