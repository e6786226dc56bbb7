/* History encoder reference (RSSM.md), double precision, straight from the definitions. */
#include <math.h>

#include "ref/ref.h"

static void stats(const float *v, size_t n, double *f) {
    for (int k = 0; k < 8; k++) f[k] = 0;
    if (n == 0) return;
    double mean = 0, var = 0, mn = INFINITY, mx = -INFINITY, sxy = 0, sxx = 0, dif = 0,
           pm = (n - 1) / 2.0;
    for (size_t i = 0; i < n; i++) {
        mean += v[i];
        mn = isnan(v[i]) || isnan(mn) ? NAN : fmin(mn, v[i]); /* NaN propagates (RSSM.md) */
        mx = isnan(v[i]) || isnan(mx) ? NAN : fmax(mx, v[i]);
    }
    mean /= n;
    for (size_t i = 0; i < n; i++) {
        var += (v[i] - mean) * (v[i] - mean);
        sxy += (i - pm) * (v[i] - mean);
        sxx += (i - pm) * (i - pm);
        if (i) dif += fabs((double)v[i] - v[i - 1]);
    }
    f[0] = mean;
    f[1] = sqrt(var / n);
    f[2] = mn;
    f[3] = mx;
    f[4] = v[n - 1];
    f[5] = n > 1 ? sxy / sxx : 0;
    f[6] = n > 1 ? dif / (n - 1) : 0;
    f[7] = ((double)v[n - 1] - v[0]) / (fabs(v[0]) + 1e-8);
}

void ref_history_encode(const float *loss, const float *gnorm, size_t len, double out[64]) {
    const size_t sizes[4] = {8, 32, 128, (size_t)-1};
    for (int s = 0; s < 2; s++)
        for (int w = 0; w < 4; w++) {
            size_t n = sizes[w] < len ? sizes[w] : len;
            const float *v = (s ? gnorm : loss) + (len - n);
            stats(v, n, out + (s * 4 + w) * 8);
        }
}
