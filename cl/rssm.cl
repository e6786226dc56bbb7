/* RSSM ensemble rollout (RSSM.md): one work-group per member runs all T steps on the device,
 * its state (x = concat(f, z), h) in local memory. Weights come pre-transposed, [K x rows] per
 * member, so that work-item j reading row j's weights walks memory together with its neighbours
 * (coalesced) and needs no reduction: work-item j owns hidden unit j (and logit s).
 * flags: 1 b_ih, 2 b_hh, 4 hnorm, 8 final h, 16 final z, 32 final f, 64 f0 shared by members. */
#define R_BIH 1
#define R_BHH 2
#define R_HNORM 4
#define R_HFIN 8
#define R_ZFIN 16
#define R_FFIN 32
#define R_F0_SHARED 64

inline float r_sigmoid(float v) { return 1.0f / (1.0f + exp(-v)); }

/* Philox4x32-10 (Salmon et al. 2011), the counter-based generator of RSSM.md. */
inline uint4 philox4x32_10(uint4 ctr, uint2 key) {
    for (uint i = 0; i < 10; i++) {
        const uint lo0 = ctr.x * 0xD2511F53u, hi0 = mul_hi(ctr.x, 0xD2511F53u);
        const uint lo1 = ctr.z * 0xCD9E8D57u, hi1 = mul_hi(ctr.z, 0xCD9E8D57u);
        ctr = (uint4)(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
        key += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    }
    return ctr;
}

/* Per group g of this work-item's share: unimix softmax of the logits in place (LOGITS + g C),
 * the entropy summed into ENT, and z written to Z + g C: the probabilities (MEAN) or a one-hot
 * draw (SAMPLE, Philox keyed by (seed, member, step, group)). A macro because the persistent
 * path keeps logits and z in local memory and the wide path in global memory, and OpenCL 1.2
 * has no generic address space. */
#define UNIMIX_GROUPS(ENT, LOGITS, Z)                                                           \
    for (uint g = lid; g < G; g += L) {                                                         \
        float m = -INFINITY, sum = 0.0f;                                                        \
        for (uint c = 0; c < C; c++) m = fmax(m, (LOGITS)[g * C + c]);                          \
        for (uint c = 0; c < C; c++) sum += exp((LOGITS)[g * C + c] - m);                      \
        for (uint c = 0; c < C; c++) {                                                          \
            const float p = (1.0f - unimix) * (exp((LOGITS)[g * C + c] - m) / sum) + unimix / (float)C; \
            (LOGITS)[g * C + c] = p;                                                            \
            ENT -= (p > 0.0f) ? p * log(p) : 0.0f;                                              \
        }                                                                                       \
        if (sample) {                                                                           \
            const uint4 rnd = philox4x32_10((uint4)(e, t0 + t, g, 0u), (uint2)(seed_lo, seed_hi)); \
            const float u = (float)(rnd.x >> 8) * (1.0f / 16777216.0f);                         \
            float cum = 0.0f;                                                                   \
            uint pick = C - 1;                                                                  \
            for (uint c = 0; c < C; c++) {                                                      \
                cum += (LOGITS)[g * C + c];                                                     \
                if (u < cum) { pick = c; break; }                                               \
            }                                                                                   \
            for (uint c = 0; c < C; c++) (Z)[g * C + c] = (c == pick) ? 1.0f : 0.0f;           \
        } else {                                                                                \
            for (uint c = 0; c < C; c++) (Z)[g * C + c] = (LOGITS)[g * C + c];                  \
        }                                                                                       \
    }

/* Three sums over the whole work-group in one tree (y, |h|^2 and entropy of a step). */
inline float3 group_sum3(float3 v, __local float *red, uint lid, uint L) {
    red[lid] = v.x;
    red[L + lid] = v.y;
    red[2 * L + lid] = v.z;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = L >> 1; s > 0; s >>= 1) {
        if (lid < s) {
            red[lid] += red[lid + s];
            red[L + lid] += red[L + lid + s];
            red[2 * L + lid] += red[2 * L + lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float3 r = (float3)(red[0], red[L], red[2 * L]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Transposes each member's [rows x cols] matrix into [cols x rows]. Grid: (cols, rows, E). */
__kernel void oclml_rssm_transpose(__global const float *src, ulong so, __global float *dst,
                                   uint rows, uint cols) {
    const uint c = get_global_id(0), r = get_global_id(1), e = get_global_id(2);
    if (c >= cols || r >= rows) return;
    const ulong m = (ulong)e * rows * cols;
    dst[m + (ulong)c * rows + r] = src[so + m + (ulong)r * cols + c];
}

__kernel void oclml_rssm_rollout(
    __global const float *wihT, __global const float *whhT, __global const float *b_ih, ulong bio,
    __global const float *b_hh, ulong bho, __global const float *wpT, __global const float *b_p,
    ulong bpo, __global const float *w_y, ulong wyo, __global const float *b_y, ulong byo,
    __global const float *h0, ulong h0o, __global const float *z0, ulong z0o,
    __global const float *f0, ulong f0o, __global float *Y, ulong yo, __global float *Hent,
    ulong heo, __global float *hnorm, ulong hno, __global float *hfin, ulong hfo, __global float *zfin,
    ulong zfo, __global float *ffin, ulong ffo, uint flags, uint cho, uint T, uint D, uint G,
    uint C, uint F, uint K, float unimix, uint sample, uint seed_lo, uint seed_hi, uint t0,
    uint P, uint PS, __local float *lm) {
    const uint lid = get_local_id(0), L = get_local_size(0), e = get_group_id(0);
    const uint S = G * C, IN = F + S, D3 = 3 * D;
    __local float *xs = lm;              /* x = concat(f, z): IN */
    __local float *ha = xs + IN;         /* h: D */
    __local float *hb = ha + D;          /* h' (and r*h for CHO): D */
    __local float *pi = hb + D;          /* probabilities: S */
    __local float *red = pi + S;         /* 3 L */
    __local float *pp = red + 3 * L;     /* partial sums when P or PS > 1: 6 D P or S PS */
    __global const float *Wi = wihT + (ulong)e * IN * D3, *Wh = whhT + (ulong)e * D * D3;
    __global const float *Wp = wpT + (ulong)e * D * S;

    for (uint i = lid; i < F; i += L) xs[i] = f0[f0o + ((flags & R_F0_SHARED) ? 0 : (ulong)e * F) + i];
    for (uint i = lid; i < S; i += L) xs[F + i] = z0[z0o + (ulong)e * S + i];
    for (uint i = lid; i < D; i += L) ha[i] = h0[h0o + (ulong)e * D + i];
    barrier(CLK_LOCAL_MEM_FENCE);

    for (uint t = 0; t < T; t++) {
        /* GRU: work-item j owns unit j; rows j, D+j, 2D+j of the transposed weights. */
        if (cho) { /* r * h of every unit first: the n gate's hidden side multiplies it */
            for (uint j = lid; j < D; j += L) {
                float a = ((flags & R_BIH) ? b_ih[bio + (ulong)e * D3 + j] : 0.0f) +
                          ((flags & R_BHH) ? b_hh[bho + (ulong)e * D3 + j] : 0.0f);
                for (uint k = 0; k < IN; k++) a += Wi[(ulong)k * D3 + j] * xs[k];
                for (uint k = 0; k < D; k++) a += Wh[(ulong)k * D3 + j] * ha[k];
                hb[j] = r_sigmoid(a) * ha[j];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        /* Work-item u serves unit j = u % D over the part u / D of the dot products (P parts:
         * with D < L, several work-items share a unit, so more loads are in flight). */
        float hnew[4]; /* P == 1: up to 4 units per work-item (D <= 4 L) */
        for (uint q = 0, u = lid; u < D * P; q++, u += L) {
            const uint j = u % D, part = u / D;
            const uint i0 = part * IN / P, i1 = (part + 1) * IN / P, d0 = part * D / P, d1 = (part + 1) * D / P;
            const bool first = part == 0;
            float gi0 = (first && (flags & R_BIH)) ? b_ih[bio + (ulong)e * D3 + j] : 0.0f;
            float gi1 = (first && (flags & R_BIH)) ? b_ih[bio + (ulong)e * D3 + D + j] : 0.0f;
            float gi2 = (first && (flags & R_BIH)) ? b_ih[bio + (ulong)e * D3 + 2 * D + j] : 0.0f;
            float gh0 = (first && (flags & R_BHH)) ? b_hh[bho + (ulong)e * D3 + j] : 0.0f;
            float gh1 = (first && (flags & R_BHH)) ? b_hh[bho + (ulong)e * D3 + D + j] : 0.0f;
            float gh2 = (first && (flags & R_BHH)) ? b_hh[bho + (ulong)e * D3 + 2 * D + j] : 0.0f;
            #pragma unroll 4
            for (uint k = i0; k < i1; k++) {
                __global const float *w = Wi + (ulong)k * D3 + j;
                const float xv = xs[k];
                gi0 += w[0] * xv;
                gi1 += w[D] * xv;
                gi2 += w[2 * D] * xv;
            }
            if (cho) { /* the n gate's hidden side multiplies r*h (in hb) */
                for (uint k = d0; k < d1; k++) {
                    __global const float *w = Wh + (ulong)k * D3 + j;
                    gh0 += w[0] * ha[k];
                    gh1 += w[D] * ha[k];
                    gh2 += w[2 * D] * hb[k];
                }
            } else {
                #pragma unroll 4
                for (uint k = d0; k < d1; k++) {
                    __global const float *w = Wh + (ulong)k * D3 + j;
                    const float hv = ha[k];
                    gh0 += w[0] * hv;
                    gh1 += w[D] * hv;
                    gh2 += w[2 * D] * hv;
                }
            }
            if (P == 1) {
                const float r = r_sigmoid(gi0 + gh0), z = r_sigmoid(gi1 + gh1);
                const float n = tanh(gi2 + (cho ? gh2 : r * gh2));
                hnew[q] = (1.0f - z) * n + z * ha[j];
            } else {
                __local float *o = pp + (ulong)part * 6 * D + j;
                o[0] = gi0, o[D] = gi1, o[2 * D] = gi2, o[3 * D] = gh0, o[4 * D] = gh1, o[5 * D] = gh2;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done reading h (and r*h) */
        if (P == 1) {
            for (uint q = 0, j = lid; j < D; q++, j += L) hb[j] = hnew[q];
        } else {
            for (uint j = lid; j < D; j += L) {
                float g[6] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
                for (uint part = 0; part < P; part++)
                    for (uint c = 0; c < 6; c++) g[c] += pp[(part * 6 + c) * D + j];
                const float r = r_sigmoid(g[0] + g[3]), z = r_sigmoid(g[1] + g[4]);
                const float n = tanh(g[2] + (cho ? g[5] : r * g[5]));
                hb[j] = (1.0f - z) * n + z * ha[j];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Prior logits l = W_p h' + b_p, split over PS parts like the GRU. */
        for (uint u = lid; u < S * PS; u += L) {
            const uint sl = u % S, part = u / S, d0 = part * D / PS, d1 = (part + 1) * D / PS;
            float l = part == 0 ? b_p[bpo + (ulong)e * S + sl] : 0.0f;
            #pragma unroll 4
            for (uint d = d0; d < d1; d++) l += Wp[(ulong)d * S + sl] * hb[d];
            if (PS == 1) pi[sl] = l;
            else pp[part * S + sl] = l;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (PS > 1) {
            for (uint sl = lid; sl < S; sl += L) {
                float l = 0.0f;
                for (uint part = 0; part < PS; part++) l += pp[part * S + sl];
                pi[sl] = l;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }

        /* Per group: unimix softmax, entropy, then z (probabilities, or a one-hot draw). */
        float ent = 0.0f;
        UNIMIX_GROUPS(ent, pi, xs + F)
        barrier(CLK_LOCAL_MEM_FENCE);

        /* y = w_y . concat(h', z) + b_y, |h'|^2 and the step's entropy, in one reduction. */
        float3 acc = (float3)(0.0f, 0.0f, ent);
        for (uint d = lid; d < D; d += L) {
            acc.x += w_y[wyo + (ulong)e * (D + S) + d] * hb[d];
            acc.y += hb[d] * hb[d];
        }
        for (uint s = lid; s < S; s += L) acc.x += w_y[wyo + (ulong)e * (D + S) + D + s] * xs[F + s];
        const float3 tot = group_sum3(acc, red, lid, L);
        const float y = tot.x + b_y[byo + e];
        if (lid == 0) {
            Y[yo + (ulong)e * T + t] = y;
            Hent[heo + (ulong)e * T + t] = tot.z;
            if (flags & R_HNORM) hnorm[hno + (ulong)e * T + t] = sqrt(tot.y);
        }
        /* Feedback shift register in f's first K slots; h <- h'. */
        const float shifted = (lid < K) ? (lid == 0 ? y : xs[lid - 1]) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < K) xs[lid] = shifted;
        for (uint j = lid; j < D; j += L) ha[j] = hb[j];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (uint i = lid; i < D; i += L)
        if (flags & R_HFIN) hfin[hfo + (ulong)e * D + i] = ha[i];
    for (uint i = lid; i < S; i += L)
        if (flags & R_ZFIN) zfin[zfo + (ulong)e * S + i] = xs[F + i];
    for (uint i = lid; i < F; i += L)
        if (flags & R_FFIN) ffin[ffo + (ulong)e * F + i] = xs[i];
}

/* Ensemble summary over members per step (mean, population std of y) and per-member metrics:
 * step deltas |y_t+1 - y_t| (y_0 given), variance of y over the trajectory, smoothness (mean
 * |y_t+1 - 2 y_t + y_t-1| over the steps that have both neighbours, the given y_0 included),
 * total entropy. One work-item per step (ensemble stats) and per member (metrics). */
__kernel void oclml_rssm_summary(__global const float *Y, ulong yo, __global const float *Hent, ulong heo,
                                 __global const float *y0, ulong y0o, uint has_y0, uint E, uint T,
                                 __global float *ymean, ulong ymo, __global float *ystd, ulong yso,
                                 __global float *deltas, ulong dlo, __global float *var, ulong vo,
                                 __global float *smooth, ulong smo, __global float *tent, ulong teo,
                                 uint outs) {
    const uint i = get_global_id(0);
    if (i < T && (outs & 3)) {
        float m = 0.0f, q = 0.0f;
        for (uint e = 0; e < E; e++) m += Y[yo + (ulong)e * T + i];
        m /= (float)E;
        for (uint e = 0; e < E; e++) {
            const float d = Y[yo + (ulong)e * T + i] - m;
            q += d * d;
        }
        if (outs & 1) ymean[ymo + i] = m;
        if (outs & 2) ystd[yso + i] = sqrt(q / (float)E);
    }
    if (i < E) {
        __global const float *y = Y + yo + (ulong)i * T;
        const float first = has_y0 ? y0[y0o + i] : 0.0f;
        float m = 0.0f, q = 0.0f, sm = 0.0f, h = 0.0f;
        for (uint t = 0; t < T; t++) {
            const float prev = t ? y[t - 1] : first;
            if (outs & 4) deltas[dlo + (ulong)i * T + t] = fabs(y[t] - prev);
            if (t >= 1) sm += fabs(y[t] - 2.0f * y[t - 1] + (t >= 2 ? y[t - 2] : first));
            m += y[t];
            h += Hent[heo + (ulong)i * T + t];
        }
        m /= (float)T;
        for (uint t = 0; t < T; t++) q += (y[t] - m) * (y[t] - m);
        if (outs & 8) var[vo + i] = q / (float)T;
        if (outs & 16) smooth[smo + i] = T > 1 ? sm / (float)(T - 1) : 0.0f;
        if (outs & 32) tent[teo + i] = h;
    }
}

/* ---- the wide path: three launches per step, each spread over the whole device ----
 * State lives in global memory: x[E][F + S] (f then z), h ping-pong [E][D], logits [E][S].
 * Weights are read in PyTorch's row-major layout by segments of SEG work-items per row
 * (coalesced), so every SM shares every member's work. */

/* x = concat(f0, z0), h = h0. Grid: E work-groups. */
__kernel void oclml_rssm_wide_init(__global const float *h0, ulong h0o, __global const float *z0,
                                   ulong z0o, __global const float *f0, ulong f0o, uint flags,
                                   __global float *x, __global float *h, uint D, uint S, uint F) {
    const uint e = get_group_id(0), L = get_local_size(0), IN = F + S;
    for (uint i = get_local_id(0); i < F; i += L)
        x[(ulong)e * IN + i] = f0[f0o + ((flags & R_F0_SHARED) ? 0 : (ulong)e * F) + i];
    for (uint i = get_local_id(0); i < S; i += L) x[(ulong)e * IN + F + i] = z0[z0o + (ulong)e * S + i];
    for (uint i = get_local_id(0); i < D; i += L) h[(ulong)e * D + i] = h0[h0o + (ulong)e * D + i];
}

/* GRU for every (unit, member): work-group (j, e) with 3 segments of SEG work-items, segment g
 * computing gate g's input and hidden dot products. phase 1 (CHO only) writes r*h into rh;
 * phase 0 writes h'. hvec_n: h (TORCH) or rh (CHO). */
__kernel void oclml_rssm_wide_gru(__global const float *w_ih, ulong wio, __global const float *w_hh,
                                  ulong who, __global const float *b_ih, ulong bio,
                                  __global const float *b_hh, ulong bho, __global const float *x,
                                  __global const float *h, __global const float *hvec_n,
                                  __global float *out, uint flags, uint cho, uint r_phase, uint D,
                                  uint IN, uint SEG, __local float *red) {
    const uint lid = get_local_id(0), g = lid / SEG, lane = lid % SEG;
    const uint j = get_group_id(0), e = get_group_id(1), D3 = 3 * D;
    const ulong row = (ulong)e * D3 + (ulong)g * D + j;
    __global const float *wi = w_ih + wio + row * IN, *wh = w_hh + who + row * D;
    __global const float *xe = x + (ulong)e * IN;
    __global const float *he = ((g == 2 && !r_phase) ? hvec_n : h) + (ulong)e * D;
    float ai = 0.0f, ah = 0.0f;
    if (!r_phase || g == 0) {
        for (uint k = lane; k < IN; k += SEG) ai += wi[k] * xe[k];
        for (uint k = lane; k < D; k += SEG) ah += wh[k] * he[k];
    }
    ai = seg_sum(ai, red, lid, SEG);
    ah = seg_sum(ah, red, lid, SEG);
    __local float *gates = red + 3 * SEG;
    if (lane == 0) {
        gates[g] = ai + ((flags & R_BIH) ? b_ih[bio + row] : 0.0f);
        gates[3 + g] = ah + ((flags & R_BHH) ? b_hh[bho + row] : 0.0f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        const float hj = h[(ulong)e * D + j], r = r_sigmoid(gates[0] + gates[3]);
        if (r_phase) {
            out[(ulong)e * D + j] = r * hj;
        } else {
            const float z = r_sigmoid(gates[1] + gates[4]);
            const float n = tanh(gates[2] + (cho ? gates[5] : r * gates[5]));
            out[(ulong)e * D + j] = (1.0f - z) * n + z * hj;
        }
    }
}

/* Prior logits for every (logit, member): segments of SEG work-items per row of W_p. */
__kernel void oclml_rssm_wide_prior(__global const float *w_p, ulong wpo, __global const float *b_p,
                                    ulong bpo, __global const float *h, __global float *logits,
                                    uint D, uint S, uint SEG, __local float *red) {
    const uint lid = get_local_id(0), lane = lid % SEG, per = get_local_size(0) / SEG;
    const uint e = get_group_id(1), s = get_group_id(0) * per + lid / SEG;
    const bool ok = s < S;
    float a = 0.0f;
    if (ok) {
        __global const float *w = w_p + wpo + ((ulong)e * S + s) * D;
        for (uint k = lane; k < D; k += SEG) a += w[k] * h[(ulong)e * D + k];
    }
    a = seg_sum(a, red, lid, SEG);
    if (ok && lane == 0) logits[(ulong)e * S + s] = a + b_p[bpo + (ulong)e * S + s];
}

/* The rest of a step, one work-group per member: unimix softmax, entropy, z (probabilities or a
 * draw), y, |h'|, feedback; at the last step the final state. */
__kernel void oclml_rssm_wide_tail(__global float *logits, __global float *x, __global const float *h,
                                   __global const float *w_y, ulong wyo, __global const float *b_y,
                                   ulong byo, __global float *Y, ulong yo, __global float *Hent,
                                   ulong heo, __global float *hnorm, ulong hno, __global float *hfin,
                                   ulong hfo, __global float *zfin, ulong zfo, __global float *ffin,
                                   ulong ffo, uint flags, uint t, uint T, uint D, uint G, uint C,
                                   uint F, uint K, float unimix, uint sample, uint seed_lo,
                                   uint seed_hi, uint t0, __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0), e = get_group_id(0);
    const uint S = G * C, IN = F + S;
    __global float *xe = x + (ulong)e * IN, *lg0 = logits + (ulong)e * S;
    __global const float *he = h + (ulong)e * D;
    float ent = 0.0f;
    UNIMIX_GROUPS(ent, lg0, xe + F)
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    float3 acc = (float3)(0.0f, 0.0f, ent);
    for (uint d = lid; d < D; d += L) {
        acc.x += w_y[wyo + (ulong)e * (D + S) + d] * he[d];
        acc.y += he[d] * he[d];
    }
    for (uint s = lid; s < S; s += L) acc.x += w_y[wyo + (ulong)e * (D + S) + D + s] * xe[F + s];
    const float3 tot = group_sum3(acc, red, lid, L);
    const float y = tot.x + b_y[byo + e];
    if (lid == 0) {
        Y[yo + (ulong)e * T + t] = y;
        Hent[heo + (ulong)e * T + t] = tot.z;
        if (flags & R_HNORM) hnorm[hno + (ulong)e * T + t] = sqrt(tot.y);
    }
    const float shifted = (lid < K) ? (lid == 0 ? y : xe[lid - 1]) : 0.0f;
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (lid < K) xe[lid] = shifted;
    barrier(CLK_GLOBAL_MEM_FENCE); /* no early return before it: PoCL needs every work-item here */
    const bool last = t + 1 == T;
    for (uint i = lid; last && i < D; i += L)
        if (flags & R_HFIN) hfin[hfo + (ulong)e * D + i] = he[i];
    for (uint i = lid; last && i < S; i += L)
        if (flags & R_ZFIN) zfin[zfo + (ulong)e * S + i] = xe[F + i];
    for (uint i = lid; last && i < F; i += L)
        if (flags & R_FFIN) ffin[ffo + (ulong)e * F + i] = xe[i];
}
