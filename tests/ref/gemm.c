/* GEMM reference, double accumulation. */
#include "ref/ref.h"

#include <stdlib.h>

double ref_gemm_at(int ta, int tb, size_t m, size_t n, size_t k, double alpha, const float *a,
                   const float *b, double beta, const float *c_in, size_t i, size_t j) {
    double acc = 0;
    for (size_t p = 0; p < k; p++) {
        double av = ta ? a[p * m + i] : a[i * k + p];
        double bv = tb ? b[j * k + p] : b[p * n + j];
        acc += av * bv;
    }
    double out = alpha * acc;
    if (beta != 0) out += beta * (double)c_in[i * n + j];
    return out;
}

void ref_gemm(int ta, int tb, size_t m, size_t n, size_t k, double alpha, const float *a,
              const float *b, double beta, const float *c_in, double *c_out) {
    /* Rows of op(A) and columns of op(B) copied out contiguously, so the inner loop streams. */
    double *ar = malloc(m * k * sizeof *ar), *bc = malloc(n * k * sizeof *bc);
    if (!ar || !bc) {
        free(ar);
        free(bc);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++)
                c_out[i * n + j] = ref_gemm_at(ta, tb, m, n, k, alpha, a, b, beta, c_in, i, j);
        return;
    }
    for (size_t i = 0; i < m; i++)
        for (size_t p = 0; p < k; p++) ar[i * k + p] = ta ? a[p * m + i] : a[i * k + p];
    for (size_t j = 0; j < n; j++)
        for (size_t p = 0; p < k; p++) bc[j * k + p] = tb ? b[j * k + p] : b[p * n + j];
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double acc = 0;
            const double *x = ar + i * k, *y = bc + j * k;
            for (size_t p = 0; p < k; p++) acc += x[p] * y[p];
            double out = alpha * acc;
            if (beta != 0) out += beta * (double)c_in[i * n + j];
            c_out[i * n + j] = out;
        }
    free(ar);
    free(bc);
}
