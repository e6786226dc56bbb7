/* Convolution references (oclml_conv2d, oclml_conv_transpose2d) by their definitions in double,
 * independent of the im2col formulation. */
#include "ref/ref.h"

/* y = conv(x, w) + b in double, by its definition. */
void ref_conv(const ref_conv_case *c, const double *x, const double *w, const double *b, double *y,
              size_t P, size_t Q) {
    size_t cg = c->C / c->groups, kg = c->K / c->groups;
    for (size_t n = 0; n < c->N; n++)
        for (size_t k = 0; k < c->K; k++)
            for (size_t p = 0; p < P; p++)
                for (size_t q = 0; q < Q; q++) {
                    double sum = b ? b[k] : 0;
                    size_t g = k / kg;
                    for (size_t ci = 0; ci < cg; ci++)
                        for (size_t r = 0; r < c->R; r++)
                            for (size_t s = 0; s < c->S; s++) {
                                long h = (long)(p * c->sh + r * c->dh) - c->pt;
                                long v = (long)(q * c->sw + s * c->dw) - c->pl;
                                if (h < 0 || h >= (long)c->H || v < 0 || v >= (long)c->W) continue;
                                sum += x[((n * c->C + g * cg + ci) * c->H + h) * c->W + v] *
                                       w[((k * cg + ci) * c->R + r) * c->S + s];
                            }
                    y[((n * c->K + k) * P + p) * Q + q] = sum;
                }
}

/* The transposed convolution by its definition: each input element scatters x * w into the
 * output window it maps to. x [N, C, H, W], w [C, K/g, R, S], y [N, K, P, Q]. */
void ref_conv_transpose(const ref_conv_case *c, const double *x, const double *w, const double *b,
                        double *y, size_t P, size_t Q) {
    size_t cg = c->C / c->groups, kg = c->K / c->groups;
    for (size_t i = 0; i < c->N * c->K * P * Q; i++) y[i] = b ? b[i / (P * Q) % c->K] : 0;
    for (size_t n = 0; n < c->N; n++)
        for (size_t ch = 0; ch < c->C; ch++)
            for (size_t h = 0; h < c->H; h++)
                for (size_t v = 0; v < c->W; v++) {
                    size_t g = ch / cg;
                    double xv = x[((n * c->C + ch) * c->H + h) * c->W + v];
                    for (size_t kl = 0; kl < kg; kl++)
                        for (size_t r = 0; r < c->R; r++)
                            for (size_t s = 0; s < c->S; s++) {
                                long p = (long)(h * c->sh + r * c->dh) - c->pt;
                                long q = (long)(v * c->sw + s * c->dw) - c->pl;
                                if (p < 0 || p >= (long)P || q < 0 || q >= (long)Q) continue;
                                size_t k = g * kg + kl;
                                y[((n * c->K + k) * P + p) * Q + q] +=
                                    xv * w[((ch * kg + kl) * c->R + r) * c->S + s];
                            }
                }
}
