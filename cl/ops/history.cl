/* Training-history encoder (RSSM.md): 2 series x 4 windows (last 8, 32, 128, all) x 8
 * statistics -> 64 features, feature ((series * 4) + window) * 8 + stat, stats: mean, std
 * (population), min, max, last, least-squares slope per step, mean |first difference|, relative
 * change (last - first) / (|first| + 1e-8). A window longer than the history uses all of it; an
 * empty history gives zeros; length 1 gives slope 0 and std 0.
 * One work-group per (batch entry, series); the windows are nested suffixes, so one pass feeds
 * all four (sums, extremes, differences), and a second pass takes the deviations from the
 * window's mean: squared for the standard deviation, times the centred position for the slope
 * (centred on both sides, so a large offset costs no accuracy). A NaN in a window makes its min
 * and max NaN (fmin and fmax alone would drop it). */
#include "rows.h"
#define WINDOWS 4

inline uint window_len(uint w, uint len) {
    const uint size = w == 0 ? 8u : w == 1 ? 32u : w == 2 ? 128u : len;
    return min(size, len);
}

#if OCLML_WANT(oclml_history_encode)
__kernel void oclml_history_encode(__global const float *series, ulong so,
                                   __global const float *lengths, ulong lo, uint has_lengths,
                                   uint N, __global float *out, ulong oo, __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    const uint b = get_group_id(0) / 2, s = get_group_id(0) % 2;
    const uint len = has_lengths ? min((uint)lengths[lo + b], N) : N;
    __global const float *v = series + so + ((ulong)b * 2 + s) * N;
    __global float *o = out + oo + (ulong)b * 64 + s * 32;
    float sum[WINDOWS], mn[WINDOWS], mx[WINDOWS], slope[WINDOWS], dif[WINDOWS], nans[WINDOWS];
    for (uint w = 0; w < WINDOWS; w++) {
        sum[w] = slope[w] = dif[w] = nans[w] = 0.0f;
        mn[w] = INFINITY;
        mx[w] = -INFINITY;
    }
    for (uint i = lid; i < len; i += L) {
        const float x = v[i];
        const float prev = i ? v[i - 1] : x;
        for (uint w = 0; w < WINDOWS; w++) {
            const uint n = window_len(w, len), start = len - n;
            if (i < start) continue;
            sum[w] += x;
            mn[w] = fmin(mn[w], x);
            mx[w] = fmax(mx[w], x);
            nans[w] += isnan(x) ? 1.0f : 0.0f;
            if (i > start) dif[w] += fabs(x - prev);
        }
    }
    float mean[WINDOWS];
    for (uint w = 0; w < WINDOWS; w++) {
        const float n = (float)window_len(w, len);
        sum[w] = seg_sum(sum[w], red, lid, L);
        mn[w] = -seg_max(-mn[w], red, lid, L);
        mx[w] = seg_max(mx[w], red, lid, L);
        dif[w] = seg_sum(dif[w], red, lid, L);
        if (seg_sum(nans[w], red, lid, L) > 0.0f) mn[w] = mx[w] = NAN;
        mean[w] = n > 0.0f ? sum[w] / n : 0.0f;
    }
    float sq[WINDOWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint i = lid; i < len; i += L)
        for (uint w = 0; w < WINDOWS; w++) {
            const uint n = window_len(w, len), start = len - n;
            if (i < start) continue;
            const float d = v[i] - mean[w], p = (float)(i - start) - 0.5f * (float)(n - 1);
            sq[w] += d * d;
            slope[w] += p * d;
        }
    for (uint w = 0; w < WINDOWS; w++) {
        sq[w] = seg_sum(sq[w], red, lid, L);
        slope[w] = seg_sum(slope[w], red, lid, L);
    }
    if (lid != 0) return;
    for (uint w = 0; w < WINDOWS; w++) {
        const uint n = window_len(w, len);
        __global float *f = o + w * 8;
        if (n == 0) {
            for (uint k = 0; k < 8; k++) f[k] = 0.0f;
            continue;
        }
        const float first = v[len - n], last = v[len - 1], fn = (float)n;
        const float den = fn * (fn * fn - 1.0f) / 12.0f; /* sum of (p - mean p)^2 */
        f[0] = mean[w];
        f[1] = sqrt(sq[w] / fn);
        f[2] = mn[w];
        f[3] = mx[w];
        f[4] = last;
        f[5] = n > 1 ? slope[w] / den : 0.0f;
        f[6] = n > 1 ? dif[w] / (fn - 1.0f) : 0.0f;
        f[7] = (last - first) / (fabs(first) + 1e-8f);
    }
}
#endif
