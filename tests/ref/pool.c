/* Pooling references (oclml_max_pool2d, oclml_avg_pool2d) window by window, in double. */
#include <math.h>

#include "ref/ref.h"

/* The divisor of average window (p, q): the window up to the padded edge, or its inside part. */
double ref_pool_count(const ref_pool_case *c, size_t p, size_t q) {
    unsigned sh = c->sh ? c->sh : c->kh, sw = c->sw ? c->sw : c->kw;
    long h0 = (long)(p * sh) - c->ph, w0 = (long)(q * sw) - c->pw;
    long hend = h0 + c->kh < (long)(c->H + c->ph) ? h0 + c->kh : (long)(c->H + c->ph);
    long wend = w0 + c->kw < (long)(c->W + c->pw) ? w0 + c->kw : (long)(c->W + c->pw);
    if (c->include_pad) return (double)((hend - h0) * (wend - w0));
    long hs = h0 < 0 ? 0 : h0, ws = w0 < 0 ? 0 : w0;
    long he = hend < (long)c->H ? hend : (long)c->H, we = wend < (long)c->W ? wend : (long)c->W;
    return (double)((he - hs) * (we - ws));
}

/* Max (first maximum; NaN largest, the last NaN wins) or mean of window (p, q) of plane x; *at
 * its first maximum. */
double ref_pool_window(const ref_pool_case *c, const float *x, size_t p, size_t q, int max,
                       long *at) {
    unsigned sh = c->sh ? c->sh : c->kh, sw = c->sw ? c->sw : c->kw;
    long h0 = (long)(p * sh) - c->ph, w0 = (long)(q * sw) - c->pw;
    double best = 0, sum = 0;
    long arg = -1, inside = 0;
    for (long r = 0; r < c->kh; r++)
        for (long s = 0; s < c->kw; s++) {
            long h = h0 + r, v = w0 + s;
            if (h < 0 || h >= (long)c->H || v < 0 || v >= (long)c->W) continue;
            double xv = x[h * (long)c->W + v];
            inside++;
            sum += xv;
            if (arg < 0 || xv > best || isnan(xv)) /* PyTorch: the last NaN wins */
                best = xv, arg = h * (long)c->W + v;
        }
    if (at) *at = arg;
    (void)inside;
    return max ? best : sum / ref_pool_count(c, p, q);
}
