/* Dropout's keep rule (cl/include/philox.h) on the host: element i under (seed, offset) draws
 * word i % 4 of Philox4x32-10 at counter (offset + i / 4, the "drop" tag, 0). */
#include <stdint.h>

#include "ref/ref.h"

double ref_dropout_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
    const uint64_t c = offset + i / 4;
    const unsigned ctr[4] = {(unsigned)c, (unsigned)(c >> 32), 0x64726f70u, 0u},
                   key[2] = {(unsigned)seed, (unsigned)(seed >> 32)};
    unsigned w[4];
    ref_philox4x32_10(ctr, key, w);
    return (double)(w[i % 4] >> 8) * (1.0 / 16777216.0);
}

bool ref_dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, double p) {
    return ref_dropout_uniform(seed, offset, i) >= p;
}
