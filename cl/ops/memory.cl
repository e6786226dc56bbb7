/* Memory ops: fill and copy. Work-items stride over the range in float4 steps (vload4/vstore4
 * need only float alignment, so any tensor offset works); the last n % 4 elements are done one
 * per work-item. */
#include "common.h"

#if OCLML_WANT(oclml_fill)
__kernel void oclml_fill(__global float *dst, ulong dst_off, ulong n, float value) {
    __global float *d = OCLML_AT(dst, dst_off);
    const ulong n4 = n / 4;
    const float4 v = (float4)(value);
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) vstore4(v, i, d);
    const ulong tail = 4 * n4 + get_global_id(0);
    if (tail < n) d[tail] = value;
}
#endif

#if OCLML_WANT(oclml_copy)
__kernel void oclml_copy(__global const float *src, ulong src_off, __global float *dst,
                         ulong dst_off, ulong n) {
    __global const float *s = OCLML_AT(src, src_off);
    __global float *d = OCLML_AT(dst, dst_off);
    const ulong n4 = n / 4;
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) vstore4(vload4(i, s), i, d);
    const ulong tail = 4 * n4 + get_global_id(0);
    if (tail < n) d[tail] = s[tail];
}
#endif
