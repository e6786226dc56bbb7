/* Element types: their sizes and names, and the host's conversions between floats and the
 * 16-bit types (tensor reads and writes, fill's value), rounding as cl/include/dtype.h does on
 * the device: to nearest, ties to even; NaN stays a quiet NaN of the same sign. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

size_t oclml_dtype_size(oclml_dtype dtype) {
    switch (dtype) {
    case OCLML_FLOAT32:
        return 4;
    case OCLML_BFLOAT16:
    case OCLML_FLOAT16:
        return 2;
    }
    return 0;
}

const char *oclml_dtype_name(oclml_dtype dtype) {
    switch (dtype) {
    case OCLML_FLOAT32:
        return "fp32";
    case OCLML_BFLOAT16:
        return "bf16";
    case OCLML_FLOAT16:
        return "fp16";
    }
    return "?";
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t oclml__bf16_of(float f) {
    const uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float oclml__float_of_bf16(uint16_t h) { return float_of((uint32_t)h << 16); }

uint16_t oclml__fp16_of(float f) {
    const uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x1ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: infinity */
    if (a < 0x38800000u) {
        /* Below fp16's smallest normal (2^-14): a multiple of 2^-24, rounded in the float
         * adding 0.5 (2^-1 has the ulp 2^-24 here): exact ties to even by the FPU. */
        const float r = float_of(a) + 0.5f;
        return (uint16_t)(sign | (bits_of(r) - 0x3f000000u));
    }
    /* Normal: rebias the exponent (127 -> 15), round the 13 dropped bits to even. */
    const uint32_t m = a + 0xc8000fffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (m >> 13));
}

float oclml__float_of_fp16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13));
    if (e == 0) /* subnormal or zero: m 2^-24, exact in a float */
        return float_of(sign | bits_of((float)m * 0x1p-24f));
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

void oclml__to_dtype(oclml_dtype dtype, const float *src, void *dst, size_t n) {
    uint16_t *h = dst;
    if (dtype == OCLML_FLOAT32)
        memcpy(dst, src, n * sizeof(float));
    else if (dtype == OCLML_BFLOAT16)
        for (size_t i = 0; i < n; i++) h[i] = oclml__bf16_of(src[i]);
    else
        for (size_t i = 0; i < n; i++) h[i] = oclml__fp16_of(src[i]);
}

void oclml__from_dtype(oclml_dtype dtype, const void *src, float *dst, size_t n) {
    const uint16_t *h = src;
    if (dtype == OCLML_FLOAT32)
        memcpy(dst, src, n * sizeof(float));
    else if (dtype == OCLML_BFLOAT16)
        for (size_t i = 0; i < n; i++) dst[i] = oclml__float_of_bf16(h[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = oclml__float_of_fp16(h[i]);
}

void oclml__dtype_defines_of(char *out, size_t len, unsigned n, const char *const *names,
                             const oclml_dtype *dts) {
    bool any = false;
    for (unsigned i = 0; i < n; i++) any |= dts[i] != OCLML_FLOAT32;
    out[0] = '\0';
    for (size_t at = 0, i = 0; any && i < n && at < len; i++)
        at += (size_t)snprintf(out + at, len - at, "%s-D%s_DT=%d", at ? " " : "", names[i],
                               (int)dts[i]);
}

void oclml__dtype_defines(char *out, size_t len, unsigned n, const char *const *names,
                          const oclml_tensor *const *ts) {
    oclml_dtype dts[OCLML__MOST_DTYPE_DEFINES];
    for (unsigned i = 0; i < n && i < OCLML__MOST_DTYPE_DEFINES; i++)
        dts[i] = ts[i] ? ts[i]->dtype : OCLML_FLOAT32;
    oclml__dtype_defines_of(out, len, n < OCLML__MOST_DTYPE_DEFINES ? n : OCLML__MOST_DTYPE_DEFINES,
                            names, dts);
}
