/* The optimizer reference (oclml_optim): torch.optim's formulas in double over an arena's
 * elements. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

static double *doubles(size_t n) {
    double *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) abort();
    return x;
}

void ref_optim_init(ref_optim *r, const oclml_optim_config *c, const ref_arena_layout *l,
                    const float *p) {
    memset(r, 0, sizeof *r);
    r->c = *c;
    size_t count = c->count ? c->count : l->n - c->first, last = c->first + count - 1;
    r->lo = l->off[c->first];
    r->hi = l->off[last] + (l->len[last] + 15) / 16 * 16;
    r->p = doubles(l->padded);
    for (size_t j = 0; j < l->padded; j++) r->p[j] = p[j];
    for (int k = 0; k < 3; k++) {
        r->s[k] = doubles(l->padded);
        for (size_t j = 0; j < l->padded; j++) r->s[k][j] = 0;
    }
    r->lr = c->lr;
    r->scale = 1;
}

void ref_optim_free(ref_optim *r) {
    free(r->p);
    for (int k = 0; k < 3; k++) free(r->s[k]);
}

static double max_nan(double a, double b) { return isnan(a) || isnan(b) ? a + b : fmax(a, b); }

/* One step; g (double, modified in place by adaptive clipping) covers the whole arena. */
void ref_optim_step(ref_optim *r, const ref_arena_layout *l, double *g) {
    const oclml_optim_config *c = &r->c;
    bool bad = false;
    double ss = 0;
    for (size_t j = r->lo; j < r->hi; j++) {
        bad |= !isfinite(g[j]);
        ss += g[j] * g[j];
    }
    double gm = 1 / r->scale;
    if (c->max_grad_norm > 0) {
        r->norm = sqrt(ss) / r->scale;
        gm *= isnan(r->norm) ? NAN : fmin(1.0, c->max_grad_norm / (r->norm + 1e-6));
    }
    if (c->agc_clip > 0) {
        size_t count = c->count ? c->count : l->n - c->first;
        for (size_t t = c->first; t < c->first + count; t++)
            for (size_t u = 0; u < l->len[t] / l->row[t]; u++) {
                double *gu = g + l->off[t] + u * l->row[t];
                const double *pu = r->p + l->off[t] + u * l->row[t];
                double sp = 0, sg = 0;
                for (size_t k = 0; k < l->row[t]; k++) {
                    sp += pu[k] * pu[k];
                    sg += gu[k] * gu[k];
                }
                double pn = sqrt(sp), gn = sqrt(sg) / r->scale;
                double maxn = (pn < c->agc_eps ? c->agc_eps : pn) * c->agc_clip;
                if (!(gn < maxn)) /* torch.clamp keeps NaN */
                    for (size_t k = 0; k < l->row[t]; k++) gu[k] *= maxn / (gn < 1e-6 ? 1e-6 : gn);
            }
    }
    /* GradScaler's update (torch._amp_update_scale_), in the float steps the device takes. */
    if (c->dynamic_scale) {
        if (bad) {
            r->scale = (float)(r->scale * c->scale_backoff);
            r->growth = 0;
        } else if (++r->growth >= c->scale_interval) {
            const float grown = (float)(r->scale * c->scale_growth);
            if (isfinite(grown)) r->scale = grown;
            r->growth = 0;
        }
    }
    if ((c->skip_nonfinite || c->dynamic_scale) && bad) {
        r->skipped++;
        r->last_found = 1;
        return;
    }
    r->last_found = 0;
    bool first = r->step == 0;
    double t = ++r->step, lr = r->lr, b1 = c->beta1, b2 = c->beta2;
    /* Decay on the group's first decay_tensors tensors (0: all). */
    size_t count = c->count ? c->count : l->n - c->first;
    size_t decay_end =
        c->decay_tensors && c->decay_tensors < count ? l->off[c->first + c->decay_tensors] : r->hi;
    double bc1 = c->bias_correction ? 1 - pow(b1, t) : 1,
           bc2 = c->bias_correction ? 1 - pow(b2, t) : 1;
    r->lr1 = b1 * r->lr1 + (1 - b1) * lr;
    for (size_t j = r->lo; j < r->hi; j++) {
        double d = g[j] * gm, *p = &r->p[j], *m = &r->s[0][j], *v = &r->s[1][j], *vm = &r->s[2][j];
        double wd = j < decay_end ? c->weight_decay : 0;
        if (c->maximize) d = -d;
        switch (c->kind) {
        case OCLML_OPTIM_SGD:
            if (wd != 0) d += wd * *p;
            if (c->momentum != 0) {
                *m = first ? d : c->momentum * *m + (1 - c->dampening) * d;
                d = c->nesterov ? d + c->momentum * *m : *m;
            }
            *p -= lr * d;
            break;
        case OCLML_OPTIM_ADAM:
        case OCLML_OPTIM_ADAMW: {
            if (c->kind == OCLML_OPTIM_ADAMW)
                *p *= 1 - lr * wd;
            else if (wd != 0)
                d += wd * *p;
            *m = b1 * *m + (1 - b1) * d;
            *v = b2 * *v + (1 - b2) * d * d;
            double vv = *v;
            if (c->amsgrad) vv = *vm = max_nan(*vm, *v);
            *p -= lr / bc1 * *m / (sqrt(vv) / sqrt(bc2) + c->eps);
            break;
        }
        default: {
            *v = b2 * *v + (1 - b2) * d * d;
            double vv = *v;
            if (c->amsgrad) vv = *vm = max_nan(*vm, *v);
            *m = b1 * *m + (1 - b1) * lr * d / (sqrt(vv / bc2) + c->eps);
            double step_size = c->bias_correction ? (lr != 0 ? lr / r->lr1 : 1) : 1;
            *p -= step_size * *m;
            if (wd != 0) *p -= lr * wd * *p;
        }
        }
    }
}
