/* RSSM rollout reference (RSSM.md), double precision, written from the spec rather than the
 * kernel: GRU, prior head with per-group unimix softmax, entropy, MEAN/SAMPLE, prediction head,
 * feedback shift register. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

void ref_philox4x32_10(const unsigned ctr_in[4], const unsigned key_in[2], unsigned out[4]) {
    uint32_t c[4] = {ctr_in[0], ctr_in[1], ctr_in[2], ctr_in[3]}, k[2] = {key_in[0], key_in[1]};
    for (int r = 0; r < 10; r++) {
        if (r) { /* the key is bumped between rounds */
            k[0] += 0x9E3779B9u;
            k[1] += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32),
                 lo1 = (uint32_t)p1;
        uint32_t n[4] = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
        memcpy(c, n, sizeof c);
    }
    memcpy(out, c, sizeof c);
}

void ref_rssm_rollout(const ref_rssm_args *a, double *Y, double *H, double *hnorm, double *hfin,
                      double *zfin, double *ffin) {
    size_t D = a->D, S = a->G * a->C, F = a->F, IN = F + S, T = a->T, C = a->C;
    double *x = malloc(IN * sizeof *x), *h = malloc(D * sizeof *h), *hn = malloc(D * sizeof *hn);
    double *rh = malloc(D * sizeof *rh), *pi = malloc(S * sizeof *pi);
    for (size_t e = 0; e < a->E; e++) {
        const float *wi = a->w_ih + e * 3 * D * IN, *wh = a->w_hh + e * 3 * D * D;
        const float *bi = a->b_ih ? a->b_ih + e * 3 * D : NULL,
                    *bh = a->b_hh ? a->b_hh + e * 3 * D : NULL;
        const float *wp = a->w_p + e * S * D, *bp = a->b_p + e * S, *wy = a->w_y + e * (D + S);
        for (size_t i = 0; i < F; i++) x[i] = a->f0[(a->f0_shared ? 0 : e * F) + i];
        for (size_t i = 0; i < S; i++) x[F + i] = a->z0[e * S + i];
        for (size_t i = 0; i < D; i++) h[i] = a->h0[e * D + i];
        for (size_t t = 0; t < T; t++) {
            ref_gru_cell(a->cho, IN, D, x, h, wi, wh, bi, bh, rh, hn); /* h' = GRU(x, h) */
            /* prior: per-group unimix softmax, entropy, z */
            double ent = 0;
            for (size_t s = 0; s < S; s++) {
                double l = bp[s];
                for (size_t d = 0; d < D; d++) l += wp[s * D + d] * hn[d];
                pi[s] = l;
            }
            for (size_t g = 0; g < a->G; g++) {
                double *lg = pi + g * C, m = -INFINITY, sum = 0;
                for (size_t c = 0; c < C; c++) m = fmax(m, lg[c]);
                for (size_t c = 0; c < C; c++) sum += exp(lg[c] - m);
                for (size_t c = 0; c < C; c++) {
                    lg[c] = (1 - a->unimix) * exp(lg[c] - m) / sum + a->unimix / (double)C;
                    if (lg[c] > 0) ent -= lg[c] * log(lg[c]);
                }
                if (a->sample) {
                    unsigned ctr[4] = {(unsigned)e, (unsigned)(a->step_offset + t), (unsigned)g, 0};
                    unsigned key[2] = {(unsigned)a->seed, (unsigned)(a->seed >> 32)}, out[4];
                    ref_philox4x32_10(ctr, key, out);
                    double u = (double)(out[0] >> 8) / 16777216.0, cum = 0;
                    size_t pick = C - 1;
                    for (size_t c = 0; c < C; c++) {
                        cum += lg[c];
                        if (u < cum) {
                            pick = c;
                            break;
                        }
                    }
                    for (size_t c = 0; c < C; c++) x[F + g * C + c] = c == pick;
                } else {
                    for (size_t c = 0; c < C; c++) x[F + g * C + c] = lg[c];
                }
            }
            /* y, |h'|, feedback */
            double y = a->b_y[e], nn = 0;
            for (size_t d = 0; d < D; d++) {
                y += wy[d] * hn[d];
                nn += hn[d] * hn[d];
            }
            for (size_t s = 0; s < S; s++) y += wy[D + s] * x[F + s];
            Y[e * T + t] = y;
            if (H) H[e * T + t] = ent;
            if (hnorm) hnorm[e * T + t] = sqrt(nn);
            for (size_t i = a->K; i-- > 1;) x[i] = x[i - 1];
            if (a->K) x[0] = y;
            memcpy(h, hn, D * sizeof *h);
        }
        if (hfin) memcpy(hfin + e * D, h, D * sizeof *h);
        if (zfin) memcpy(zfin + e * S, x + F, S * sizeof *x);
        if (ffin) memcpy(ffin + e * F, x, F * sizeof *x);
    }
    free(x);
    free(h);
    free(hn);
    free(rh);
    free(pi);
}
