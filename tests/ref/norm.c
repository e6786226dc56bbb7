/* LayerNorm / RMSNorm references, double accumulation. */
#include <math.h>
#include <string.h>

#include "ref/ref.h"

void ref_norm(int rms, size_t rows, size_t cols, const float *x, const float *gamma,
              const float *beta, double eps, double *y, double *mean, double *rstd) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        double mu = 0, var = 0;
        if (!rms) {
            for (size_t c = 0; c < cols; c++) mu += xr[c];
            mu /= (double)cols;
        }
        for (size_t c = 0; c < cols; c++) var += ((double)xr[c] - mu) * ((double)xr[c] - mu);
        var /= (double)cols;
        double rs = 1.0 / sqrt(var + eps);
        for (size_t c = 0; c < cols; c++)
            y[r * cols + c] =
                ((double)xr[c] - mu) * rs * (gamma ? gamma[c] : 1.0) + (beta ? beta[c] : 0.0);
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
    }
}

void ref_norm_backward(int rms, size_t rows, size_t cols, const float *x, const float *gamma,
                       const float *mean, const float *rstd, const float *dy, double *dx,
                       double *dgamma, double *dbeta, double *scale) {
    if (dgamma) memset(dgamma, 0, cols * sizeof *dgamma);
    if (dbeta) memset(dbeta, 0, cols * sizeof *dbeta);
    for (size_t r = 0; r < rows; r++) {
        double mu = rms ? 0.0 : mean[r], rs = rstd[r], a = 0, b = 0, aa = 0, ab = 0;
        for (size_t c = 0; c < cols; c++) {
            double h = ((double)x[r * cols + c] - mu) * rs,
                   gd = (double)dy[r * cols + c] * (gamma ? gamma[c] : 1.0);
            a += gd;
            b += gd * h;
            aa += fabs(gd);
            ab += fabs(gd * h);
            if (dgamma) dgamma[c] += dy[r * cols + c] * h;
            if (dbeta) dbeta[c] += dy[r * cols + c];
        }
        a = rms ? 0 : a / (double)cols;
        aa = rms ? 0 : aa / (double)cols;
        b /= (double)cols;
        ab /= (double)cols;
        for (size_t c = 0; c < cols; c++) {
            double h = ((double)x[r * cols + c] - mu) * rs,
                   gd = (double)dy[r * cols + c] * (gamma ? gamma[c] : 1.0);
            dx[r * cols + c] = rs * (gd - a - h * b);
            if (scale) scale[r * cols + c] = rs * (fabs(gd) + aa + fabs(h) * ab);
        }
    }
}

void ref_norm_param_scale(int rms, size_t rows, size_t cols, const float *x, const float *mean,
                          const float *rstd, const float *dy, double *sg, double *sb) {
    memset(sg, 0, cols * sizeof *sg);
    memset(sb, 0, cols * sizeof *sb);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            const double d = dy[r * cols + c];
            sg[c] += fabs(d * ((double)x[r * cols + c] - (rms ? 0.0 : mean[r])) * rstd[r]);
            sb[c] += fabs(d);
        }
}
