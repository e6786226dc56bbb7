/* Attention reference (oclml_attention), double accumulation: the definition, key by key, with
 * no blocking and no online softmax. Invisible keys (masked by causality, the window, the key
 * length or a -inf mask entry) are skipped, so nothing about them (not even a NaN) is read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

/* Element offset of (b, h, i, 0) of a [B, heads, L, D] (or BLHD: [B, L, heads, D]) tensor. */
static size_t at(const ref_attention_args *a, size_t b, size_t h, size_t i, size_t heads,
                 size_t L) {
    return a->blhd ? ((b * L + i) * heads + h) * a->D : ((b * heads + h) * L + i) * a->D;
}

static size_t key_len(const ref_attention_args *a, size_t b) {
    if (!a->key_lengths) return a->Lk;
    float x = a->key_lengths[b];
    if (!(x > 0)) return 0; /* NaN and negatives */
    return x >= (float)a->Lk ? a->Lk : (size_t)x;
}

double ref_attention_scale(const ref_attention_args *a) {
    return a->scale != 0 ? a->scale : 1.0 / sqrt((double)a->D);
}

size_t ref_attention_mask_at(const ref_attention_args *a, size_t b, size_t h, size_t i) {
    size_t bm = a->mask_b == 1 ? 0 : b, hm = a->mask_h == 1 ? 0 : h;
    return ((bm * a->mask_h + hm) * a->Lq + i) * a->Lk;
}

int ref_attention_visible(const ref_attention_args *a, size_t b, size_t i, size_t j) {
    if (j >= key_len(a, b)) return 0;
    long d = (long)i + (a->causal == 2 ? (long)a->Lk - (long)a->Lq : 0);
    long wr = a->causal ? 0 : a->wr; /* causal: nothing right of the diagonal */
    if (a->wl >= 0 && (long)j < d - a->wl) return 0;
    if (wr >= 0 && (long)j > d + wr) return 0;
    return 1;
}

/* The dropout factor of P's element (b, h, i, j): 1 without dropout, else 1 / (1 - p) where kept
 * and 0 where dropped. */
static double drop_factor(const ref_attention_args *a, size_t b, size_t h, size_t i, size_t j) {
    if (!(a->drop_p > 0)) return 1.0;
    const uint64_t e = (((uint64_t)b * a->H + h) * a->Lq + i) * a->Lk + j;
    return ref_dropout_keep(a->drop_seed, a->drop_offset, e, a->drop_p) ? 1.0 / (1.0 - a->drop_p)
                                                                        : 0.0;
}

/* The scores of row (b, h, i) into s[Lk] (-inf where invisible); returns the row's
 * log-sum-exp (-inf: no key seen, NaN: a NaN score). */
static double row_scores(const ref_attention_args *a, const float *q, const float *k, size_t b,
                         size_t h, size_t i, double *s) {
    const size_t G = a->H / a->Hkv, hk = h / G, D = a->D;
    const double scale = ref_attention_scale(a);
    const float *qr = q + at(a, b, h, i, a->H, a->Lq);
    double m = -INFINITY;
    int nan = 0;
    for (size_t j = 0; j < a->Lk; j++) {
        s[j] = -INFINITY;
        if (!ref_attention_visible(a, b, i, j)) continue;
        const float *kr = k + at(a, b, hk, j, a->Hkv, a->Lk);
        double dot = 0;
        for (size_t c = 0; c < D; c++) dot += (double)qr[c] * kr[c];
        s[j] = scale * dot + (a->mask ? a->mask[ref_attention_mask_at(a, b, h, i) + j] : 0.0);
        if (isnan(s[j]))
            nan = 1;
        else if (s[j] > m)
            m = s[j];
    }
    if (nan) return NAN;
    if (m == -INFINITY) return -INFINITY;
    if (m == INFINITY) return NAN; /* +inf in the mask: inf - inf */
    double sum = 0;
    for (size_t j = 0; j < a->Lk; j++)
        if (s[j] != -INFINITY) sum += exp(s[j] - m);
    return m + log(sum);
}

void ref_attention(const ref_attention_args *a, const float *q, const float *k, const float *v,
                   double *o, double *lse) {
    const size_t G = a->H / a->Hkv, D = a->D;
    double *s = malloc((a->Lk ? a->Lk : 1) * sizeof *s);
    for (size_t b = 0; b < a->B; b++)
        for (size_t h = 0; h < a->H; h++)
            for (size_t i = 0; i < a->Lq; i++) {
                const double l = row_scores(a, q, k, b, h, i, s);
                double *orow = o + at(a, b, h, i, a->H, a->Lq);
                if (lse) lse[(b * a->H + h) * a->Lq + i] = l;
                for (size_t c = 0; c < D; c++) orow[c] = isnan(l) ? NAN : 0.0;
                if (!isfinite(l)) continue;
                for (size_t j = 0; j < a->Lk; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double p = exp(s[j] - l) * drop_factor(a, b, h, i, j);
                    const float *vr = v + at(a, b, h / G, j, a->Hkv, a->Lk);
                    for (size_t c = 0; c < D; c++) orow[c] += p * vr[c];
                }
            }
    free(s);
}

void ref_attention_backward(const ref_attention_args *a, const float *q, const float *k,
                            const float *v, const float *dout, double *dq, double *dk, double *dv,
                            double *dmask, double *sq, double *sk, double *sv, double *smask) {
    const size_t G = a->H / a->Hkv, D = a->D, Lq = a->Lq, Lk = a->Lk;
    const size_t nq = a->B * a->H * Lq * D, nk = a->B * a->Hkv * Lk * D;
    const size_t nm = a->mask ? a->mask_b * a->mask_h * Lq * Lk : 0;
    const double scale = ref_attention_scale(a);
    double *zero[] = {dq, dk, dv, dmask, sq, sk, sv, smask};
    const size_t len[] = {nq, nk, nk, nm, nq, nk, nk, nm};
    for (int t = 0; t < 8; t++)
        if (zero[t]) memset(zero[t], 0, len[t] * sizeof(double));
    double *s = malloc((Lk ? Lk : 1) * sizeof *s), *o = malloc(D * sizeof *o);
    for (size_t b = 0; b < a->B; b++)
        for (size_t h = 0; h < a->H; h++)
            for (size_t i = 0; i < Lq; i++) {
                const double l = row_scores(a, q, k, b, h, i, s);
                if (l == -INFINITY) continue; /* sees nothing: zero gradients */
                const size_t qo = at(a, b, h, i, a->H, Lq);
                const float *qr = q + qo, *gr = dout + qo;
                const size_t mrow = a->mask ? ref_attention_mask_at(a, b, h, i) : 0;
                /* O and delta = dO . O, and |dO| . |O| for the scales. */
                double delta = 0, adelta = 0;
                for (size_t c = 0; c < D; c++) o[c] = 0;
                for (size_t j = 0; j < Lk; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double p = exp(s[j] - l) * drop_factor(a, b, h, i, j);
                    const float *vr = v + at(a, b, h / G, j, a->Hkv, Lk);
                    for (size_t c = 0; c < D; c++) o[c] += p * vr[c];
                }
                for (size_t c = 0; c < D; c++) {
                    delta += (double)gr[c] * o[c];
                    adelta += fabs((double)gr[c] * o[c]);
                }
                for (size_t j = 0; j < Lk; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double p = exp(s[j] - l), f = drop_factor(a, b, h, i, j);
                    const size_t ko = at(a, b, h / G, j, a->Hkv, Lk);
                    const float *kr = k + ko, *vr = v + ko;
                    double dp = 0, adp = 0;
                    for (size_t c = 0; c < D; c++) {
                        dp += (double)gr[c] * vr[c];
                        adp += fabs((double)gr[c] * vr[c]);
                    }
                    /* With dropout dP = m (dO V^T) and dV sums the dropped P: dO's row times P m. */
                    const double ds = p * (f * dp - delta), ads = p * (f * adp + adelta);
                    for (size_t c = 0; c < D; c++) {
                        if (dq) dq[qo + c] += scale * ds * kr[c];
                        if (sq) sq[qo + c] += scale * ads * fabs(kr[c]);
                        if (dk) dk[ko + c] += scale * ds * qr[c];
                        if (sk) sk[ko + c] += scale * ads * fabs(qr[c]);
                        if (dv) dv[ko + c] += p * f * gr[c];
                        if (sv) sv[ko + c] += p * f * fabs(gr[c]);
                    }
                    if (dmask) dmask[mrow + j] += ds;
                    if (smask) smask[mrow + j] += ads;
                }
            }
    free(s);
    free(o);
}
