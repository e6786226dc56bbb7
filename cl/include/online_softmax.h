/* The online softmax: a running (max m, sum s of exp(x - m)) that takes values or other pairs in
 * any order, so rows can be reduced in chunks (the long-row softmax; attention's key blocks). */
#ifndef OCLML_ONLINE_SOFTMAX_H
#define OCLML_ONLINE_SOFTMAX_H

/* exp(v - m), with masked positions (-inf) exactly 0 even when everything is masked (m = -inf). */
inline float masked_exp(float v, float m) { return (v == -INFINITY) ? 0.0f : exp(v - m); }

/* (m, s) += one value v. */
inline void online_add(float *m, float *s, float v) {
    if (v > *m) {
        *s = *s * masked_exp(*m, v) + 1.0f;
        *m = v;
    } else {
        *s += masked_exp(v, *m);
    }
}

/* (m, s) += another pair (pm, ps). */
inline void online_merge(float *m, float *s, float pm, float ps) {
    if (pm > *m) {
        *s = *s * masked_exp(*m, pm) + ps;
        *m = pm;
    } else {
        *s += (pm == -INFINITY) ? ps : ps * exp(pm - *m);
    }
}

#endif
