/* Embedding references in double: the lookup and the scatter of row gradients by id. */
#include <math.h>

#include "ref/ref.h"

/* The id ids[n] names, or -1 when it is not an integer in [0, V). */
static long id_of(const float *ids, size_t n, size_t V) {
    double f = ids[n];
    return f >= 0 && f < (double)V && f == floor(f) ? (long)f : -1;
}

void ref_embedding(const float *ids, size_t N, const float *table, size_t V, size_t D, double *y) {
    for (size_t n = 0; n < N; n++) {
        long id = id_of(ids, n, V);
        for (size_t c = 0; c < D; c++) y[n * D + c] = id < 0 ? NAN : table[(size_t)id * D + c];
    }
}

void ref_embedding_backward(const float *ids, size_t N, const float *dy, size_t V, size_t D,
                            double *dtable) {
    for (size_t n = 0; n < N; n++) {
        long id = id_of(ids, n, V);
        if (id >= 0)
            for (size_t c = 0; c < D; c++) dtable[(size_t)id * D + c] += dy[n * D + c];
    }
}
