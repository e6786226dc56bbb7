/* Loss references (oclml_cross_entropy, oclml_kl_div_logits, the pointwise losses) in double, on
 * double inputs so that finite differences can perturb them finely. */
#include <math.h>
#include <oclml.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

enum { MEAN = OCLML_LOSS_MEAN, NONE = OCLML_LOSS_NONE };

/* loss (1 or rows values) and dx (rows x cols, may be NULL), as PyTorch's weighted,
 * label-smoothed cross-entropy. */
void ref_xent(const ref_xent_opts *o, size_t rows, size_t cols, const double *x, const double *t,
              double *loss, double *dx) {
    double total = 0, count = 0, eps = o->eps, ue = eps / (double)cols;
    double *lr = malloc(rows * sizeof *lr), *lse = malloc(rows * sizeof *lse);
    for (size_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double m = -INFINITY, s = 0;
        for (size_t c = 0; c < cols; c++) m = xr[c] > m ? xr[c] : m;
        for (size_t c = 0; c < cols; c++) s += isnan(xr[c]) ? NAN : exp(xr[c] - m);
        lse[r] = m + log(s);
        double l = 0;
        if (o->probs) {
            for (size_t c = 0; c < cols; c++) {
                double tc = ((1 - eps) * t[r * cols + c] + ue) * (o->cw ? o->cw[c] : 1);
                if (tc != 0) l += tc * (lse[r] - xr[c]);
            }
            count += 1;
        } else if (t[r] == o->ignore) {
            l = 0;
        } else if (t[r] >= 0 && t[r] < cols && t[r] == floor(t[r])) {
            double wt = o->cw ? o->cw[(size_t)t[r]] : 1, smooth = 0;
            for (size_t c = 0; c < cols; c++) smooth += (o->cw ? o->cw[c] : 1) * (lse[r] - xr[c]);
            l = (1 - eps) * wt * (lse[r] - xr[(size_t)t[r]]) + (eps > 0 ? ue * smooth : 0);
            count += wt;
        } else {
            l = NAN;
            count += o->cw ? 0 : 1;
        }
        lr[r] = l;
        total += l;
    }
    if (loss) {
        if (o->reduction == NONE)
            memcpy(loss, lr, rows * sizeof *lr);
        else
            loss[0] = o->reduction == MEAN ? total / count : total;
    }
    for (size_t r = 0; dx && r < rows; r++) {
        const double *xr = x + r * cols;
        double g = o->dloss ? o->dloss[o->reduction == NONE ? r : 0] : 1.0;
        if (o->reduction == MEAN) g /= o->probs ? (double)rows : count;
        double tsum = 0, wsum = 0;
        for (size_t c = 0; c < cols; c++) {
            double wc = o->cw ? o->cw[c] : 1;
            wsum += wc;
            if (o->probs) tsum += ((1 - eps) * t[r * cols + c] + ue) * wc;
        }
        int ignored = !o->probs && t[r] == o->ignore;
        int valid = o->probs || (t[r] >= 0 && t[r] < cols && t[r] == floor(t[r]));
        double wt = (!o->probs && valid && o->cw) ? o->cw[(size_t)t[r]] : 1;
        for (size_t c = 0; c < cols; c++) {
            double p = exp(xr[c] - lse[r]), wc = o->cw ? o->cw[c] : 1, d;
            if (o->probs)
                d = p * tsum - ((1 - eps) * t[r * cols + c] + ue) * wc;
            else
                d = p * ((1 - eps) * wt + ue * wsum) - (c == (size_t)t[r] ? (1 - eps) * wt : 0) -
                    ue * wc;
            dx[r * cols + c] = ignored ? 0 : (valid && !isnan(lr[r]) ? g * d : NAN);
        }
    }
    free(lr);
    free(lse);
}

/* KL(softmax(a) || softmax(b)) per row; loss and the gradients (each may be NULL). */
void ref_kl(int reduction, const double *dloss, size_t rows, size_t cols, const double *a,
            const double *b, double *loss, double *da, double *db) {
    double total = 0;
    double *lr = malloc(rows * sizeof *lr);
    for (size_t r = 0; r < rows; r++) {
        const double *ar = a + r * cols, *br = b + r * cols;
        double ma = -INFINITY, mb = -INFINITY, sa = 0, sb = 0;
        for (size_t c = 0; c < cols; c++) {
            ma = ar[c] > ma ? ar[c] : ma;
            mb = br[c] > mb ? br[c] : mb;
        }
        for (size_t c = 0; c < cols; c++) {
            sa += exp(ar[c] - ma);
            sb += exp(br[c] - mb);
        }
        double la = ma + log(sa), lb = mb + log(sb), kl = 0;
        for (size_t c = 0; c < cols; c++) {
            double p = exp(ar[c] - la);
            if (p != 0 || isnan(p)) kl += p * ((ar[c] - la) - (br[c] - lb));
        }
        lr[r] = kl;
        total += kl;
        double g = dloss ? dloss[reduction == NONE ? r : 0] : 1.0;
        if (reduction == MEAN) g /= (double)rows;
        for (size_t c = 0; c < cols; c++) {
            double p = exp(ar[c] - la), q = exp(br[c] - lb);
            if (da) da[r * cols + c] = p == 0 ? 0 : g * p * ((ar[c] - la) - (br[c] - lb) - kl);
            if (db) db[r * cols + c] = g * (q - p);
        }
    }
    if (loss) {
        if (reduction == NONE)
            memcpy(loss, lr, rows * sizeof *lr);
        else
            loss[0] = reduction == MEAN ? total / (double)rows : total;
    }
    free(lr);
}

/* dx_scale (optional): what each gradient's fp32 error scales with, the magnitude of the terms
 * whose difference it is (x - t; BCE's (1 - t) - w sigmoid(-x)): where they nearly cancel, an
 * fp32 kernel's error relative to the small difference itself is large and still right. */
void ref_pointwise(int kind, int reduction, double delta, const double *pw, size_t pwlen,
                   const double *dloss, size_t n, const double *x, const double *t, double *loss,
                   double *dx, double *dx_scale) {
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        double l, d, terms, e = x[i] - t[i];
        if (kind == REF_MSE) {
            l = e * e;
            d = 2 * e;
            terms = 2 * (fabs(x[i]) + fabs(t[i]));
        } else if (kind == REF_HUBER) {
            l = fabs(e) <= delta ? 0.5 * e * e : delta * (fabs(e) - 0.5 * delta);
            d = fabs(e) <= delta ? e : (e > 0 ? delta : -delta);
            terms = fabs(e) <= delta ? fabs(x[i]) + fabs(t[i]) : delta;
        } else {
            double w = 1 + ((pw ? pw[i % pwlen] : 1) - 1) * t[i];
            double sp = log1p(exp(-fabs(x[i]))) + (x[i] < 0 ? -x[i] : 0); /* softplus(-x) */
            l = (1 - t[i]) * x[i] + w * sp;
            d = (1 - t[i]) - w / (1 + exp(x[i]));
            terms = fabs(1 - t[i]) + fabs(w / (1 + exp(x[i])));
        }
        if (isnan(x[i])) l = d = NAN;
        total += l;
        if (loss && reduction == NONE) loss[i] = l;
        double g = dloss ? dloss[reduction == NONE ? i : 0] : 1.0;
        if (reduction == MEAN) g /= (double)n;
        if (dx) dx[i] = g * d;
        if (dx_scale) dx_scale[i] = fabs(g) * terms;
    }
    if (loss && reduction != NONE) loss[0] = reduction == MEAN ? total / (double)n : total;
}
