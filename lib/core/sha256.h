/* SHA-256 (FIPS 180-4), used to key and verify the disk cache. */
#ifndef OCLML_SHA256_H
#define OCLML_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct oclml__sha256_ctx {
    uint32_t state[8];
    uint64_t length;
    uint8_t block[64];
    size_t used;
} oclml__sha256_ctx;

void oclml__sha256_init(oclml__sha256_ctx *s);
void oclml__sha256_update(oclml__sha256_ctx *s, const void *data, size_t len);
/* Adds a string with its terminating NUL, so that ("ab","c") and ("a","bc") hash differently. */
void oclml__sha256_update_str(oclml__sha256_ctx *s, const char *str);
void oclml__sha256_final(oclml__sha256_ctx *s, uint8_t digest[32]);
void oclml__sha256(const void *data, size_t len, uint8_t digest[32]);
void oclml__hex(const uint8_t *bytes, size_t n, char *out /* 2n+1 */);

#endif
