/* Softmax references, double accumulation. */
#include <math.h>

#include "ref/ref.h"

void ref_softmax(size_t rows, size_t cols, const float *x, int log_out, double *y) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        double *yr = y + r * cols;
        double m = -INFINITY;
        int has_nan = 0;
        for (size_t c = 0; c < cols; c++) {
            if (isnan(xr[c]))
                has_nan = 1;
            else if (xr[c] > m)
                m = xr[c];
        }
        double s = 0;
        for (size_t c = 0; c < cols; c++)
            if (xr[c] != -INFINITY && !isnan(xr[c])) s += exp((double)xr[c] - m);
        for (size_t c = 0; c < cols; c++) {
            if (has_nan || (isinf(m) && m > 0))
                yr[c] = NAN;
            else if (xr[c] == -INFINITY)
                yr[c] = log_out ? -INFINITY : 0.0;
            else
                yr[c] = log_out ? (double)xr[c] - m - log(s) : exp((double)xr[c] - m) / s;
        }
    }
}

void ref_softmax_backward(size_t rows, size_t cols, const float *y, const float *dy, int log_out,
                          double *dx) {
    for (size_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        double s = 0;
        for (size_t c = 0; c < cols; c++) s += log_out ? (double)gr[c] : (double)yr[c] * gr[c];
        for (size_t c = 0; c < cols; c++)
            dx[r * cols + c] = log_out ? gr[c] - exp((double)yr[c]) * s : yr[c] * (gr[c] - s);
    }
}

void ref_softmax_backward_scale(size_t rows, size_t cols, const float *y, const float *dy,
                                int log_out, double *scale) {
    for (size_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        double s = 0;
        for (size_t c = 0; c < cols; c++) s += log_out ? fabs(gr[c]) : fabs((double)yr[c] * gr[c]);
        for (size_t c = 0; c < cols; c++)
            scale[r * cols + c] =
                log_out ? fabs(gr[c]) + exp((double)yr[c]) * s : fabs(yr[c]) * (fabs(gr[c]) + s);
    }
}
