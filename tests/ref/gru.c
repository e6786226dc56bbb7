/* GRU reference, double accumulation (RSSM.md). */
#include <math.h>
#include <stdlib.h>

#include "ref/ref.h"

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

void ref_gru_step(int cho, size_t B, size_t I, size_t D, const float *x, const float *h,
                  const float *w_ih, const float *w_hh, const float *b_ih, const float *b_hh,
                  double *h_new) {
    double *rh = malloc(D * sizeof *rh);
    for (size_t b = 0; b < B; b++) {
        const float *xb = x + b * I, *hb = h + b * D;
        /* gi[g], gh[g] for unit j: input and hidden sides of gate g. */
        for (size_t pass = 0; pass < 2; pass++)
            for (size_t j = 0; j < D; j++) {
                double gi[3], gh[3];
                for (size_t g = 0; g < 3; g++) {
                    size_t row = g * D + j;
                    gi[g] = b_ih ? b_ih[row] : 0.0;
                    gh[g] = b_hh ? b_hh[row] : 0.0;
                    for (size_t k = 0; k < I; k++) gi[g] += (double)w_ih[row * I + k] * xb[k];
                    for (size_t k = 0; k < D; k++)
                        gh[g] += (double)w_hh[row * D + k] * (cho && g == 2 ? rh[k] : hb[k]);
                }
                double r = sigmoid(gi[0] + gh[0]);
                if (pass == 0) { /* CHO needs r * h of every unit before any n */
                    rh[j] = r * hb[j];
                    continue;
                }
                double z = sigmoid(gi[1] + gh[1]);
                double n = tanh(gi[2] + (cho ? gh[2] : r * gh[2]));
                h_new[b * D + j] = (1 - z) * n + z * hb[j];
            }
    }
    free(rh);
}
