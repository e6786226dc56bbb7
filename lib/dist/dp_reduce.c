/* The host arithmetic of a bucket's exchange: the shards summed in rank order, and bf16's
 * conversions. The order of the sum is fixed (rank 0 first), so a rank count gives one result
 * whatever the timing; the 1 / ranks scale comes after the sum, as one rounding. */
#include <string.h>

#include "dp.h"

void dp_reduce_f32(const float *shards, int ranks, size_t n, float *out) {
    const float scale = 1.0f / (float)ranks;
    for (size_t k = 0; k < n; k++) {
        float sum = shards[k];
        for (int r = 1; r < ranks; r++) sum += shards[(size_t)r * n + k];
        out[k] = sum * scale;
    }
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even; a NaN stays a NaN (its quiet bit set, so no rounding carries it into
 * an infinity). */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void dp_reduce_bf16(const uint16_t *shards, int ranks, size_t n, uint16_t *out) {
    const float scale = 1.0f / (float)ranks;
    for (size_t k = 0; k < n; k++) {
        float sum = bf16_to_f32(shards[k]);
        for (int r = 1; r < ranks; r++) sum += bf16_to_f32(shards[(size_t)r * n + k]);
        out[k] = f32_to_bf16(sum * scale);
    }
}

void dp_to_bf16(const float *x, size_t n, uint16_t *y) {
    for (size_t k = 0; k < n; k++) y[k] = f32_to_bf16(x[k]);
}

void dp_from_bf16(const uint16_t *x, size_t n, float *y) {
    for (size_t k = 0; k < n; k++) y[k] = bf16_to_f32(x[k]);
}
