/* GRU reference, double accumulation (RSSM.md). */
#include <math.h>
#include <stdlib.h>

#include "ref/ref.h"

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

void ref_gru_cell(int cho, size_t I, size_t D, const double *x, const double *h, const float *w_ih,
                  const float *w_hh, const float *b_ih, const float *b_hh, double *rh,
                  double *h_new) {
    /* gi[g], gh[g] for unit j: input and hidden sides of gate g. Pass 0 computes r * h of every
     * unit, which CHO's n gate needs before any n. */
    for (size_t pass = 0; pass < 2; pass++)
        for (size_t j = 0; j < D; j++) {
            double gi[3], gh[3];
            for (size_t g = 0; g < 3; g++) {
                size_t row = g * D + j;
                gi[g] = b_ih ? b_ih[row] : 0.0;
                gh[g] = b_hh ? b_hh[row] : 0.0;
                for (size_t k = 0; k < I; k++) gi[g] += (double)w_ih[row * I + k] * x[k];
                for (size_t k = 0; k < D; k++)
                    gh[g] += (double)w_hh[row * D + k] * (cho && g == 2 ? rh[k] : h[k]);
            }
            double r = sigmoid(gi[0] + gh[0]);
            if (pass == 0) {
                rh[j] = r * h[j];
                continue;
            }
            double z = sigmoid(gi[1] + gh[1]);
            double n = tanh(gi[2] + (cho ? gh[2] : r * gh[2]));
            h_new[j] = (1 - z) * n + z * h[j];
        }
}

void ref_gru_step(int cho, size_t B, size_t I, size_t D, const float *x, const float *h,
                  const float *w_ih, const float *w_hh, const float *b_ih, const float *b_hh,
                  double *h_new) {
    double *xd = malloc(I * sizeof *xd), *hd = malloc(D * sizeof *hd), *rh = malloc(D * sizeof *rh);
    for (size_t b = 0; b < B; b++) {
        for (size_t k = 0; k < I; k++) xd[k] = x[b * I + k];
        for (size_t k = 0; k < D; k++) hd[k] = h[b * D + k];
        ref_gru_cell(cho, I, D, xd, hd, w_ih, w_hh, b_ih, b_hh, rh, h_new + b * D);
    }
    free(xd);
    free(hd);
    free(rh);
}
