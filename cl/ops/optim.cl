/* Optimizer steps over a parameter arena (lib/ops/optim.c, include/oclml.h): parameters p,
 * gradients g and the state buffers s1, s2, s3 are flat fp32 buffers; a step covers the float4
 * vectors [off4, off4 + n4) of p and g (every tensor starts 16-float aligned and is padded with
 * zeros, so the range is whole vectors) and the vectors [0, n4) of the state. Work-groups of a
 * power-of-two size L stride over the range; each byte is read and written once.
 *
 * Scalars (learning rate, gradient scale, step count, found-inf flag) live in the device block
 * of optim_abi.h: a step needs no host round trip. With OPT_F_DYNAMIC the step's leader also
 * updates the gradient scale by GradScaler's rule; it writes the next scale to scale_out, the
 * tensor the backward is seeded from. Kernels:
 *
 *   oclml_optim_norm  check pass for clipping by the global norm and for skipping on inf/NaN:
 *                     part[group] = the group's sum of g^2 (fixed strided share, tree-reduced:
 *                     deterministic); a non-finite g sets blk[q].FOUND (a plain store of 1).
 *   oclml_optim_agc   adaptive gradient clipping, one work-group per unit (a row of a tensor,
 *                     the whole tensor when 1-D): g *= min(1, clip max(|p|, eps) / max(|g|,
 *                     1e-6)) where |g| (unscaled) >= clip max(|p|, eps) (timm's
 *                     adaptive_clip_grad); sets FOUND like the norm pass.
 *   oclml_optim_step  the update; with OPT_F_CLIP every group first sums the partials in the same
 *                     fixed order (identical totals), then scales its gradients by
 *                     min(1, max_norm / (norm + 1e-6)) in the same pass.
 *
 * Variants: -DOPT_KIND=OPT_SGD|OPT_ADAM|OPT_LAPROP, -DOPT_AMSGRAD=1, -DOPT_MOMENTUM=1 (SGD with a
 * momentum buffer in s1); -DCOPY_DT=1 or 2 (dtype.h's bf16, fp16) where the arena keeps a 16-bit
 * copy of its parameters: the step writes each updated parameter to it too, rounded (mixed
 * precision: the forward reads the copy, the fp32 parameters stay the master weights). Adam: s1 exp_avg, s2 exp_avg_sq, s3 max_exp_avg_sq; LaProp likewise.
 * NaN propagates through every formula (the amsgrad maximum included) unless the step is
 * skipped. */
#include "common.h"
#include "dtype.h"
#include "optim_abi.h"

#ifndef COPY_DT
#define COPY_DT 0
#endif
/* p[k] = v, and the 16-bit copy's four elements where the arena has one. */
#if COPY_DT == 1
#define SET_P(k, v)                                                                            \
    do {                                                                                       \
        const float4 v_ = (v);                                                                 \
        p[k] = v_;                                                                             \
        vstore4((ushort4)(bf16_from_float(v_.x), bf16_from_float(v_.y), bf16_from_float(v_.z), \
                          bf16_from_float(v_.w)),                                              \
                k, copy);                                                                      \
    } while (0)
#elif COPY_DT == 2
#define SET_P(k, v)                                             \
    do {                                                        \
        const float4 v_ = (v);                                  \
        p[k] = v_;                                              \
        ((__global ushort4 *)copy)[k] = fp16x4_from_float4(v_); \
    } while (0)
#else
#define SET_P(k, v) (p[k] = (v))
#endif

#ifndef OPT_KIND
#define OPT_KIND OPT_ADAM
#endif
#ifndef OPT_AMSGRAD
#define OPT_AMSGRAD 0
#endif
#ifndef OPT_MOMENTUM
#define OPT_MOMENTUM 0
#endif

/* Sum over the work-group (L a power of two); every work-item gets the total. */
inline float group_sum(float v, __local float *red, uint lid, uint L) {
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = L >> 1; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline bool all_finite4(float4 v) {
    return isfinite(v.x) && isfinite(v.y) && isfinite(v.z) && isfinite(v.w);
}

/* 1 - beta^t, accurate where beta^t is near 1. */
inline float one_minus_pow(float beta, float t) { return -expm1(t * log(beta)); }

/* The maximum that keeps NaN (torch.maximum). */
inline float4 max_nan(float4 a, float4 b) {
    return select(fmax(a, b), a + b, isnan(a) || isnan(b));
}

#if OCLML_WANT(oclml_optim_norm)
__kernel void oclml_optim_norm(__global const float4 *g, ulong off4, ulong n4, __global uint *blk,
                               uint q, uint check, __global float *part, __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    float acc = 0.0f;
    bool bad = false;
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) {
        const float4 v = g[off4 + i];
        acc += dot(v, v);
        bad |= !all_finite4(v);
    }
    if (check && bad) blk[q * OPT_BLOCK + OPT_FOUND] = 1u;
    acc = group_sum(acc, red, lid, L);
    if (lid == 0) part[get_group_id(0)] = acc;
}
#endif

#if OCLML_WANT(oclml_optim_agc)
__kernel void oclml_optim_agc(__global const float *p, __global float *g,
                              __global const ulong *table, uint ntensors, ulong units,
                              __global uint *blk, uint q, uint check, float clip, float eps,
                              __local float *red) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    const float scale = as_float(blk[q * OPT_BLOCK + OPT_GRAD_SCALE]);
    for (ulong u = get_group_id(0); u < units; u += get_num_groups(0)) {
        uint lo = 0, hi = ntensors - 1; /* the tensor t with unit base <= u, the last such */
        while (lo < hi) {
            const uint mid = (lo + hi + 1) / 2;
            if (table[mid * OPT_T_WORDS + OPT_T_UNIT] <= u)
                lo = mid;
            else
                hi = mid - 1;
        }
        __global const ulong *t = table + lo * OPT_T_WORDS;
        const ulong row = t[OPT_T_ROW];
        const ulong start = t[OPT_T_OFFSET] + (u - t[OPT_T_UNIT]) * row;
        float sp = 0.0f, sg = 0.0f;
        bool bad = false;
        for (ulong c = lid; c < row; c += L) {
            const float pv = p[start + c], gv = g[start + c];
            sp += pv * pv;
            sg += gv * gv;
            bad |= !isfinite(gv);
        }
        if (check && bad) blk[q * OPT_BLOCK + OPT_FOUND] = 1u;
        sp = group_sum(sp, red, lid, L);
        sg = group_sum(sg, red, lid, L);
        /* Clamps as torch.clamp: NaN stays NaN (a NaN unit becomes NaN, as in timm). */
        const float pnorm = sqrt(sp), gnorm = sqrt(sg) / scale;
        const float max_norm = (pnorm < eps ? eps : pnorm) * clip;
        if (!(gnorm < max_norm)) {
            const float coef = max_norm / (gnorm < 1e-6f ? 1e-6f : gnorm);
            for (ulong c = lid; c < row; c += L) g[start + c] *= coef;
        }
    }
}
#endif

#if OCLML_WANT(oclml_optim_step)
__kernel void oclml_optim_step(__global float4 *restrict p, __global const float4 *restrict g,
                               __global float4 *restrict s1, __global float4 *restrict s2,
                               __global float4 *restrict s3, ulong off4, ulong n4,
                               __global uint *blk, uint q, __global const float *part, uint nparts,
                               float beta1, float beta2, float eps, float wd_group, ulong decay4,
                               float momentum, float dampening, float max_norm, uint flags,
                               __local float *red, __global ushort *restrict copy, float growth,
                               float backoff, uint interval, __global float *scale_out) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    __global const uint *b = blk + q * OPT_BLOCK;
    const float lr = as_float(b[OPT_LR]), scale = as_float(b[OPT_GRAD_SCALE]);
    const uint step = b[OPT_STEP];
    const bool skip = (flags & OPT_F_CHECK) && b[OPT_FOUND];
    float gmul = 1.0f / scale, norm = as_float(b[OPT_NORM]);
    if (flags & OPT_F_CLIP) {
        /* Every group sums the partials in the same order: the same total everywhere. */
        float acc = 0.0f;
        for (uint i = lid; i < nparts; i += L) acc += part[i];
        norm = sqrt(group_sum(acc, red, lid, L)) / scale;
        /* A NaN norm clips every gradient to NaN, as torch's clamp does (fmin would drop it). */
        gmul *= isnan(norm) ? NAN : fmin(1.0f, max_norm / (norm + 1e-6f));
    }
    const float t = (float)(step + 1u);
    float lr1 = as_float(b[OPT_LR1]);
#if OPT_KIND == OPT_LAPROP
    lr1 = beta1 * lr1 + (1.0f - beta1) * lr;
#endif
    if (get_global_id(0) == 0) {
        __global uint *nb = blk + (1u - q) * OPT_BLOCK;
        /* GradScaler's update: back off on inf/NaN, grow after `interval` clean steps. */
        float next_scale = scale;
        uint clean = b[OPT_GROWTH];
        if (flags & OPT_F_DYNAMIC) {
            if (skip) {
                next_scale = scale * backoff;
                clean = 0u;
            } else if (++clean >= interval) {
                const float grown = scale * growth;
                next_scale = isfinite(grown) ? grown : scale;
                clean = 0u;
            }
        }
        scale_out[0] = next_scale;
        nb[OPT_LR] = b[OPT_LR];
        nb[OPT_GRAD_SCALE] = as_uint(next_scale);
        nb[OPT_GROWTH] = clean;
        nb[OPT_STEP] = skip ? step : step + 1u;
        nb[OPT_FOUND] = 0u;
        nb[OPT_LAST_FOUND] = skip ? 1u : 0u;
        nb[OPT_SKIPPED] = b[OPT_SKIPPED] + (skip ? 1u : 0u);
        nb[OPT_NORM] = as_uint(norm);
        nb[OPT_LR1] = skip ? b[OPT_LR1] : as_uint(lr1);
    }
    if (skip) return;
    const bool maximize = flags & OPT_F_MAXIMIZE;
#if OPT_KIND == OPT_SGD
    const bool first = step == 0u, nesterov = flags & OPT_F_NESTEROV;
#else
    const bool bc = flags & OPT_F_BIAS_CORR, decoupled = flags & OPT_F_DECOUPLED;
    const float bc1 = bc ? one_minus_pow(beta1, t) : 1.0f;
    const float bc2 = bc ? one_minus_pow(beta2, t) : 1.0f;
#if OPT_KIND == OPT_ADAM
    const float step_size = lr / bc1, bc2_sqrt = sqrt(bc2);
#else
    const float step_size = bc ? (lr != 0.0f ? lr / lr1 : 1.0f) : 1.0f;
#endif
#endif
    for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) {
        const ulong k = off4 + i;
        /* Weight decay on the group's first decay4 float4s (its decayed tensors) only. */
        const float wd = i < decay4 ? wd_group : 0.0f;
        float4 gr = g[k] * gmul;
        if (maximize) gr = -gr;
        float4 pv = p[k];
#if OPT_KIND == OPT_SGD
        if (wd != 0.0f) gr += wd * pv;
#if OPT_MOMENTUM
        float4 buf = first ? gr : momentum * s1[i] + (1.0f - dampening) * gr;
        s1[i] = buf;
        gr = nesterov ? gr + momentum * buf : buf;
#endif
        SET_P(k, pv - lr * gr);
#elif OPT_KIND == OPT_ADAM
        if (decoupled)
            pv *= 1.0f - lr * wd;
        else if (wd != 0.0f)
            gr += wd * pv;
        const float4 m = beta1 * s1[i] + (1.0f - beta1) * gr;
        float4 v = beta2 * s2[i] + (1.0f - beta2) * gr * gr;
        s1[i] = m;
        s2[i] = v;
#if OPT_AMSGRAD
        v = max_nan(s3[i], v);
        s3[i] = v;
#endif
        SET_P(k, pv - step_size * (m / (sqrt(v) / bc2_sqrt + eps)));
#else /* LaProp (timm's LaProp: the moment of normalised gradients carries the lr) */
        float4 v = beta2 * s2[i] + (1.0f - beta2) * gr * gr;
        s2[i] = v;
#if OPT_AMSGRAD
        v = max_nan(s3[i], v);
        s3[i] = v;
#endif
        const float4 m = beta1 * s1[i] + ((1.0f - beta1) * lr) * (gr / (sqrt(v / bc2) + eps));
        s1[i] = m;
        pv -= step_size * m;
        if (wd != 0.0f) pv -= (lr * wd) * pv;
        SET_P(k, pv);
#endif
    }
}
#endif
