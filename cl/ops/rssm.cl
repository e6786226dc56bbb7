/* RSSM ensemble rollout (RSSM.md): all T steps in one launch (oclml_rssm_rollout), then the
 * ensemble summary (oclml_rssm_summary).
 * flags: 1 b_ih, 2 b_hh, 4 hnorm, 8 final h, 16 final z, 32 final f, 64 f0 shared by members. */
#include "common.h"
#include "ptx.h"
#include "gru_abi.h"
#include "gru_cell.h"
#include "rssm_abi.h"
#include "philox.h"

/* SAMPLE mode: replaces group g's probabilities pi[C] by the one-hot of the first class whose
 * running sum exceeds u, u uniform from Philox keyed by the seed, counter (member, step, group). */
inline void sample_one_hot(__local float *pi, uint C, uint e, uint step, uint g, uint seed_lo,
                           uint seed_hi) {
    const uint4 rnd = philox4x32_10((uint4)(e, step, g, 0u), (uint2)(seed_lo, seed_hi));
    const float u = (float)(rnd.x >> 8) * (1.0f / 16777216.0f);
    float cum = 0.0f;
    uint pick = C - 1;
    for (uint c = 0; c < C; c++) {
        cum += pi[c];
        if (u < cum) {
            pick = c;
            break;
        }
    }
    for (uint c = 0; c < C; c++) pi[c] = (c == pick) ? 1.0f : 0.0f;
}

/* ---- the rollout: P work-groups per member run all T steps in one launch ----
 * Work-group p of member e owns hidden units [p U, p U + U) of the GRU and the stochastic groups
 * p, p + P, p + 2P, ... of the prior. Each step has two phases (three for CHO), each ending in a
 * sync of the member's P work-groups through a counter in global memory:
 *   A  the GRU for the owned units: h' slice to the exchange buffer, partial sums of y's h part
 *      and of |h'|^2 (CHO first runs A0: r * h of the owned units, then a sync, as the n gate's
 *      hidden side needs r * h of every unit);
 *   B  with all of h' loaded: the owned groups' prior logits, unimix softmax, entropy and z,
 *      z slice to the exchange buffer, partial sums of y's z part and of the entropy.
 * Then every work-group loads z and the P partial sums, adds them in the same order (so all get
 * the same y) and shifts the feedback into its own copy of f. With P = 1 there is nothing to
 * sync and each work-group is a whole member. The host keeps E P within the compute units, so
 * all work-groups are resident at once; should a device not run them together anyway, a sync
 * gives up after spin_limit polls and raises the abort flag, and the host's guard launch (P = 1,
 * guard = 1) recomputes the rollout: a rollout never hangs.
 * Weights stay in PyTorch's row-major layout; a row's dot product is split over SEG work-items,
 * whose shares of the row stay in registers across steps when built with RSSM_REGS.
 * Exchange buffer per member: h' [D], z [S], r*h [D], partial sums [2 parities][4][P] (the
 * parity keeps a fast work-group's next partials off the slots a slow one is still reading). */
#define X_PARTS 4 /* y's h part, |h'|^2, y's z part, entropy */

/* The syncs use sync_arrive and sync_load (ptx.h): PTX's GPU-scope release and acquire where
 * OCLML_PTX is set, mem_fence plus volatile accesses elsewhere (enough on PoCL, where the tests
 * split members; unverified on other GPUs, so the host splits members by default only where
 * OCLML_PTX is set). */

/* The sync of a member's work-groups: waits until the counter reaches target (n P at the n-th
 * sync), or gives up: after spin_limit polls it raises the abort flag, and once the flag is up
 * (checked every 64 polls) every sync returns at once. Every work-item must call it; with P = 1
 * it is a barrier (the exchange buffer's writes become visible to the work-group). */
inline void member_sync(__global volatile uint *count, __global volatile uint *abort_flag,
                        uint target, uint spin_limit, uint P, uint lid) {
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (lid == 0 && P > 1) {
        sync_arrive(count);
        for (uint n = 1; (int)(sync_load(count) - target) < 0; n++)
            if ((n & 63) == 0 && (*abort_flag || n >= spin_limit)) {
                *abort_flag = 1;
                break;
            }
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
}

/* This work-item's share (every SEG-th element, or float4) of a weight row's dot product with a
 * vector in local memory. vec4: rows and vectors 16-byte aligned (the host checks). */
inline float lane_dot(__global const float *restrict w, __local const float *x, uint n, uint lane,
                      uint SEG, uint vec4) {
    if (vec4) { /* four loads in flight per work-item: the rows come from L1/L2, latency-bound */
        __global const float4 *w4 = (__global const float4 *)w;
        __local const float4 *x4 = (__local const float4 *)x;
        float4 a0 = (float4)(0.0f), a1 = a0, a2 = a0, a3 = a0;
        uint k = lane;
        for (; k + 3 * SEG < n / 4; k += 4 * SEG) {
            a0 += w4[k] * x4[k];
            a1 += w4[k + SEG] * x4[k + SEG];
            a2 += w4[k + 2 * SEG] * x4[k + 2 * SEG];
            a3 += w4[k + 3 * SEG] * x4[k + 3 * SEG];
        }
        for (; k < n / 4; k += SEG) a0 += w4[k] * x4[k];
        const float4 a = (a0 + a1) + (a2 + a3);
        return (a.x + a.y) + (a.z + a.w);
    }
    float a0 = 0.0f, a1 = 0.0f;
    uint k = lane;
    for (; k + SEG < n; k += 2 * SEG) {
        a0 += w[k] * x[k];
        a1 += w[k + SEG] * x[k + SEG];
    }
    if (k < n) a0 += w[k] * x[k];
    return a0 + a1;
}

/* Zeroes the sync counters and the abort flag before a split launch. */
#if OCLML_WANT(oclml_rssm_sync_reset)
__kernel void oclml_rssm_sync_reset(__global uint *sync, uint n) {
    if (get_global_id(0) < n) sync[get_global_id(0)] = 0;
}
#endif

/* The rollout kernel's arguments (lib/ops/rssm.c passes them in this order), shared by its CPU
 * and general forms. */
#define RSSM_ROLLOUT_ARGS                                                                         \
    __global const float *restrict w_ih, ulong wio, __global const float *restrict w_hh,          \
        ulong who, __global const float *restrict b_ih, ulong bio,                                \
        __global const float *restrict b_hh, ulong bho, __global const float *restrict w_p,       \
        ulong wpo, __global const float *restrict b_p, ulong bpo,                                 \
        __global const float *restrict w_y, ulong wyo, __global const float *restrict b_y,        \
        ulong byo, __global const float *h0, ulong h0o, __global const float *z0, ulong z0o,      \
        __global const float *f0, ulong f0o, __global float *Y, ulong yo, __global float *Hent,   \
        ulong heo, __global float *hnorm, ulong hno, __global float *hfin, ulong hfo,             \
        __global float *zfin, ulong zfo, __global float *ffin, ulong ffo,                         \
        __global volatile float *xch, __global volatile uint *sync, uint flags, uint cho, uint T, \
        uint D, uint G, uint C, uint F, uint K, float unimix, uint sample, uint seed_lo,          \
        uint seed_hi, uint t0, uint P, uint U, uint vec4, uint spin_limit, uint guard,            \
        __local float4 *lm4

/* Member e's slices of the exchange buffer, the sync counters and the weights (e, E, P, D, S,
 * IN, D3 in scope), in both forms of the rollout kernel. */
#define RSSM_MEMBER_POINTERS                                                                       \
    __global volatile float *xh = xch + (ulong)e * (3 * D + S + 2 * X_PARTS * P);                  \
    __global volatile float *xz = xh + D, *xrh = xz + S, *xpart = xrh + D;                         \
    __global volatile uint *count = sync + e, *abort_flag = sync + E;                              \
    __global const float *Wi = w_ih + wio + (ulong)e * D3 * IN;                                    \
    __global const float *Wh = w_hh + who + (ulong)e * D3 * D;                                     \
    __global const float *Wp = w_p + wpo + (ulong)e * S * D, *wy = w_y + wyo + (ulong)e * (D + S); \
    __global const float *bi = (flags & R_BIH) ? b_ih + bio + (ulong)e * D3 : 0;                   \
    __global const float *bh = (flags & R_BHH) ? b_hh + bho + (ulong)e * D3 : 0;

#ifdef RSSM_CPU
/* ---- The CPU rollout (RSSM_CPU; lib/rssm.c picks it on devices that are not GPUs) ----
 * The same phases, syncs, exchange buffer and guard as the general kernel below, with one
 * work-item per work-group (the host launches L = 1): every loop runs over rows, units and groups
 * in that work-item, so there is no barrier, no register array and nothing unrolled. PoCL builds
 * a work-group function per local size and, for the program binary that the disk cache stores, a
 * generic one; PoCL 3.1 took 35-45 s and 135 s for these with the general kernel (barriers
 * inside the step loop, 64-wide groups), about a second each with this one. Sums run in a fixed
 * order; they differ from the general kernel's (another order of the same terms) by rounding
 * only. Local memory: x [IN], h [D], h' or r*h [D], the owned groups' logits [NG C]. */
inline void cpu_sync(__global volatile uint *count, __global volatile uint *abort_flag, uint target,
                     uint spin_limit, uint P) {
    if (P > 1) {
        sync_arrive(count);
        for (uint n = 1; (int)(sync_load(count) - target) < 0; n++)
            if ((n & 63) == 0 && (*abort_flag || n >= spin_limit)) {
                *abort_flag = 1;
                break;
            }
    }
}

/* Row r's dot product with x (n elements), bias added when given. */
inline float cpu_row(__global const float *restrict w, ulong r, __local const float *x, uint n,
                     uint vec4, __global const float *b) {
    return lane_dot(w + r * n, x, n, 0, 1, vec4) + (b ? b[r] : 0.0f);
}

#if OCLML_WANT(oclml_rssm_rollout)
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void oclml_rssm_rollout(RSSM_ROLLOUT_ARGS) {
    const uint e = get_group_id(0) / P, p = get_group_id(0) % P, E = get_num_groups(0) / P;
    const uint S = G * C, IN = F + S, D3 = 3 * D;
    const uint j_lo = min(p * U, D), j_hi = min(j_lo + U, D); /* owned units */
    const uint ng = p < G ? (G - p + P - 1) / P : 0;          /* owned groups */
    __local float *xs = (__local float *)lm4;  /* x = concat(f, z): IN; float4-aligned */
    __local float *ha = xs + ((IN + 3) & ~3u); /* h: D */
    __local float *hn = ha + ((D + 3) & ~3u);  /* h' (phase B), r*h (CHO phase A): D */
    __local float *lg = hn + ((D + 3) & ~3u);  /* the owned groups' logits: NG C */
    RSSM_MEMBER_POINTERS
    __global const float *bp = b_p + bpo + (ulong)e * S;

    /* A guard launch computes only when the split launch before it gave up. */
    const uint steps = (guard ? *abort_flag : 1u) ? T : 0;
    uint nsync = 0;
    for (uint i = 0; i < F && steps; i++)
        xs[i] = f0[f0o + ((flags & R_F0_SHARED) ? 0 : (ulong)e * F) + i];
    for (uint i = 0; i < S && steps; i++) xs[F + i] = z0[z0o + (ulong)e * S + i];
    for (uint i = 0; i < D && steps; i++) ha[i] = h0[h0o + (ulong)e * D + i];

    for (uint t = 0; t < steps; t++) {
        const bool last = t + 1 == T;
        __global volatile float *slot = xpart + (t % 2) * X_PARTS * P;
        if (cho) { /* A0: r * h of the owned units, shared through the exchange buffer */
            for (uint j = j_lo; j < j_hi; j++)
                xrh[j] = oclml_sigmoid(cpu_row(Wi, j, xs, IN, vec4, bi) +
                                       cpu_row(Wh, j, ha, D, vec4, bh)) *
                         ha[j];
            cpu_sync(count, abort_flag, ++nsync * P, spin_limit, P);
            for (uint i = 0; i < D; i++) hn[i] = xrh[i];
        }
        /* A: the GRU for the owned units. */
        float yh = 0.0f, hq = 0.0f;
        for (uint j = j_lo; j < j_hi; j++) {
            const float ir = cpu_row(Wi, j, xs, IN, vec4, bi),
                        iz = cpu_row(Wi, D + j, xs, IN, vec4, bi);
            const float in = cpu_row(Wi, 2 * D + j, xs, IN, vec4, bi);
            const float hr = cpu_row(Wh, j, ha, D, vec4, bh),
                        hz = cpu_row(Wh, D + j, ha, D, vec4, bh);
            const float hh = cpu_row(Wh, 2 * D + j, cho ? hn : ha, D, vec4, bh);
            const float h = gru_cell(ir + hr, iz + hz, in, hh, ha[j], cho);
            xh[j] = h;
            if (last && (flags & R_HFIN)) hfin[hfo + (ulong)e * D + j] = h;
            yh += wy[j] * h;
            hq += h * h;
        }
        slot[p] = yh, slot[P + p] = hq;
        cpu_sync(count, abort_flag, ++nsync * P, spin_limit, P);

        /* B: per owned group, its logits, unimix softmax, entropy and z. */
        for (uint i = 0; i < D; i++) hn[i] = xh[i];
        float ent = 0.0f, yz = 0.0f;
        for (uint gi = 0; gi < ng; gi++) {
            const uint g = p + gi * P;
            __local float *l = lg + gi * C;
            float m = -INFINITY, sum = 0.0f;
            for (uint c = 0; c < C; c++) {
                l[c] = cpu_row(Wp, (ulong)g * C + c, hn, D, vec4, bp);
                m = fmax(m, l[c]);
            }
            for (uint c = 0; c < C; c++) sum += (l[c] = exp(l[c] - m));
            for (uint c = 0; c < C; c++) {
                const float pi = (1.0f - unimix) * (l[c] / sum) + unimix / (float)C;
                l[c] = pi;
                ent -= (pi > 0.0f || isnan(pi)) ? pi * log(pi) : 0.0f; /* NaN in, NaN out */
            }
            if (sample) { /* z = onehot(first class whose running sum of pi exceeds u), Philox u */
                sample_one_hot(l, C, e, t0 + t, g, seed_lo, seed_hi);
            }
            for (uint c = 0; c < C; c++) { /* z to the exchange buffer, y's z part */
                const uint sz = g * C + c;
                xz[sz] = l[c];
                if (last && (flags & R_ZFIN)) zfin[zfo + (ulong)e * S + sz] = l[c];
                yz += wy[D + sz] * l[c];
            }
        }
        slot[2 * P + p] = yz, slot[3 * P + p] = ent;
        cpu_sync(count, abort_flag, ++nsync * P, spin_limit, P);

        /* The next state: h' (already in hn), z, y from the partial sums (the same order in
         * every work-group), f's shift register. */
        for (uint i = 0; i < D; i++) ha[i] = hn[i];
        for (uint i = 0; i < S; i++) xs[F + i] = xz[i];
        float sums[X_PARTS];
        for (uint k = 0; k < X_PARTS; k++) {
            float a = 0.0f;
            for (uint q = 0; q < P; q++) a += slot[k * P + q];
            sums[k] = a;
        }
        const float y = (sums[0] + sums[2]) + b_y[byo + e];
        if (p == 0) {
            Y[yo + (ulong)e * T + t] = y;
            Hent[heo + (ulong)e * T + t] = sums[3];
            if (flags & R_HNORM) hnorm[hno + (ulong)e * T + t] = sqrt(sums[1]);
        }
        for (uint i = K; i > 1; i--) xs[i - 1] = xs[i - 2];
        if (K) xs[0] = y;
    }
    for (uint i = 0; i < F && p == 0 && steps && (flags & R_FFIN); i++)
        ffin[ffo + (ulong)e * F + i] = xs[i];
}
#endif

#else /* the general kernel: GPUs, and any device under rssm.wg >= 8 */

/* Work-items per row: the largest power of two <= 32 such that `rows` rows fit the work-group.
 * When there are more rows than work-items, chunks of rows take turns; on GPUs 8 work-items then
 * share a row, so that a warp's loads stay coalesced (8 x 16 bytes of one row). */
inline uint lanes_per_row(uint rows, uint L) {
    uint s = 1;
    while (s < 32 && 2 * s * rows <= L) s *= 2;
#if OCLML_IS_GPU
    if (rows > L) s = 8;
#endif
    return s;
}

/* part[lid] holds each lane's share (lane 0's with the row's bias); sums each row's SEG shares
 * into out[row]. */
inline void rows_reduce(__local float *part, __local float *out, uint lid, uint L, uint SEG) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < L / SEG) {
        float a = 0.0f;
        for (uint l = 0; l < SEG; l++) a += part[lid * SEG + l];
        out[lid] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Gate pre-activations of units [j0, j0 + n) of the chunk, rpu rows per unit: 6 (input side r,
 * z, n, then hidden side r, z, n) or 2 (r's input and hidden side). gates[u rpu + q], biases
 * included (added to lane 0's share). hvec_n: the vector of the n gate's hidden side (h, or r*h
 * for CHO). pre: this work-item's share (bias included) comes from registers (RSSM_REGS). */
inline void gru_gates(__global const float *Wi, __global const float *Wh, __global const float *bi,
                      __global const float *bh, __local const float *xs, __local const float *ha,
                      __local const float *hvec_n, __local float *part, __local float *gates,
                      uint j0, uint n, uint rpu, uint SEG, uint IN, uint D, uint vec4, uint lid,
                      uint L, bool pre, float a_pre) {
    const uint row = lid / SEG, lane = lid % SEG, u = row / rpu, q = row % rpu, side = rpu / 2;
    const uint gate = q % side;
    const ulong r = (ulong)gate * D + j0 + u;
    float a = 0.0f;
    if (pre) {
        a = a_pre;
    } else if (u < n) {
        if (q < side)
            a = lane_dot(Wi + r * IN, xs, IN, lane, SEG, vec4) + ((lane == 0 && bi) ? bi[r] : 0.0f);
        else
            a = lane_dot(Wh + r * D, gate == 2 ? hvec_n : ha, D, lane, SEG, vec4) +
                ((lane == 0 && bh) ? bh[r] : 0.0f);
    }
    part[lid] = a;
    rows_reduce(part, gates, lid, L, SEG);
}

#ifdef RSSM_REGS
/* Register-resident weights. When a work-group's rows fit one chunk, each work-item serves the
 * same row and lane every step, so its share of the row (up to REG float4, zero beyond the
 * row) is loaded once before the steps; a step then reads only the vector from local memory. */
#ifndef REG_A /* float4 per work-item kept for a GRU row and for a prior row */
#define REG_A 20
#define REG_B 4
#endif
#define REG_LOAD(WR, ROW4, N4, LANE, SEG, OWN, REG)                  \
    for (uint i_ = 0; i_ < (REG); i_++) {                            \
        const uint k_ = (LANE) + i_ * (SEG);                         \
        WR[i_] = ((OWN) && k_ < (N4)) ? (ROW4)[k_] : (float4)(0.0f); \
    }
#define REG_DOT(ACC, WR, X4, N4, LANE, SEG, REG)                                                   \
    do {                                                                                           \
        float4 a_ = (float4)(0.0f);                                                                \
        for (uint i_ = 0; i_ < (REG); i_++) a_ += WR[i_] * (X4)[min((LANE) + i_ * (SEG), (N4)-1)]; \
        ACC = (a_.x + a_.y) + (a_.z + a_.w);                                                       \
    } while (0)
#endif

/* Sums over the first n work-items (values beyond n are 0), for two values at once; the result
 * is work-item 0's. With OCLML_PTX and n <= 32, one warp's shuffles and no barrier. */
inline float2 first_n_sum2(float a, float b, __local float *red, uint n, uint lid, uint L) {
#if OCLML_PTX
    if (n <= 32 && L >= 32) {
        float2 s = (float2)(0.0f);
        if (lid < 32) s = (float2)(warp_sum(a), warp_sum(b));
        return s;
    }
#endif
    red[lid] = a;
    red[L + lid] = b;
    barrier(CLK_LOCAL_MEM_FENCE);
    float2 s = (float2)(0.0f);
    if (lid == 0)
        for (uint i = 0; i < n; i++) s += (float2)(red[i], red[L + i]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return s;
}

/* Zeroes the sync counters and the abort flag before a split launch. */

#if OCLML_WANT(oclml_rssm_rollout)
__kernel void oclml_rssm_rollout(RSSM_ROLLOUT_ARGS) {
    const uint lid = get_local_id(0), L = get_local_size(0);
    const uint e = get_group_id(0) / P, p = get_group_id(0) % P, E = get_num_groups(0) / P;
    const uint S = G * C, IN = F + S, D3 = 3 * D;
    const uint j_lo = min(p * U, D), j_hi = min(j_lo + U, D); /* owned units */
    const uint ng = p < G ? (G - p + P - 1) / P : 0;          /* owned groups */
    const uint NG = (G + P - 1) / P;
    __local float *lm = (__local float *)lm4;     /* float4: aligned for the vec4 loads */
    __local float *xs = lm;                       /* x = concat(f, z): IN */
    __local float *ha = xs + ((IN + 3) & ~3u);    /* h: D */
    __local float *hn = ha + ((D + 3) & ~3u);     /* h' (phase B), r*h (CHO phase A): D */
    __local float *part = hn + ((D + 3) & ~3u);   /* L */
    __local float *gates = part + L;              /* L */
    __local float *red = gates + L;               /* 2 L */
    __local float *lg = red + 2 * L;              /* the owned groups' logits: NG C */
    __local float *gst = lg + NG * C;             /* per owned group: max, then sum: 2 NG */
    __local float *fk = gst + 2 * NG;             /* f's first K slots while shifting */
    __local uint *run = (__local uint *)(fk + K); /* 1: this launch computes */
    RSSM_MEMBER_POINTERS

    /* A guard launch computes only when the split launch before it gave up. */
    if (lid == 0) *run = guard ? *abort_flag : 1u;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint steps = *run ? T : 0;
    uint nsync = 0;
    for (uint i = lid; i < F && steps; i += L)
        xs[i] = f0[f0o + ((flags & R_F0_SHARED) ? 0 : (ulong)e * F) + i];
    for (uint i = lid; i < S && steps; i += L) xs[F + i] = z0[z0o + (ulong)e * S + i];
    for (uint i = lid; i < D && steps; i += L) ha[i] = h0[h0o + (ulong)e * D + i];
    barrier(CLK_LOCAL_MEM_FENCE);

    const uint SEG_A = lanes_per_row(6 * U, L), UC_A = L / SEG_A / 6;
    const uint SEG_R = lanes_per_row(2 * U, L), UC_R = L / SEG_R / 2;
    const uint SEG_B = lanes_per_row(NG * C, L), RC_B = L / SEG_B;
#ifdef RSSM_REGS
    const uint nu = j_hi - j_lo, rowA = lid / SEG_A, laneA = lid % SEG_A, uA = rowA / 6,
               qA = rowA % 6;
    const uint lenA4 = (qA < 3 ? IN : D) / 4;
    const bool keepA = vec4 && nu <= UC_A && (IN / 4 + SEG_A - 1) / SEG_A <= REG_A &&
                       (D / 4 + SEG_A - 1) / SEG_A <= REG_A;
    const bool ownA = keepA && uA < nu;
    const ulong rA = (ulong)(qA % 3) * D + j_lo + uA;
    float4 wa[REG_A];
    REG_LOAD(wa, (__global const float4 *)(qA < 3 ? Wi + rA * IN : Wh + rA * D), lenA4, laneA,
             SEG_A, ownA, REG_A)
    const float biasA =
        (ownA && laneA == 0) ? (qA < 3 ? (bi ? bi[rA] : 0.0f) : (bh ? bh[rA] : 0.0f)) : 0.0f;
    const float wyA = (keepA && lid < nu) ? wy[j_lo + lid] : 0.0f;
    const uint rowB = lid / SEG_B, laneB = lid % SEG_B, sB = (p + rowB / C * P) * C + rowB % C;
    const bool keepB = vec4 && ng * C <= RC_B && (D / 4 + SEG_B - 1) / SEG_B <= REG_B;
    const bool ownB = keepB && rowB < ng * C;
    float4 wb[REG_B];
    REG_LOAD(wb, (__global const float4 *)(Wp + (ulong)sB * D), D / 4, laneB, SEG_B, ownB, REG_B)
    const float biasB = (ownB && laneB == 0) ? b_p[bpo + (ulong)e * S + sB] : 0.0f;
    const bool keepZ = ng * C <= L;
    const float wyZ = (keepZ && lid < ng * C) ? wy[D + (p + lid / C * P) * C + lid % C] : 0.0f;
#else
    const bool keepA = false, keepB = false, keepZ = false;
    const float wyA = 0.0f, wyZ = 0.0f;
#endif
    for (uint t = 0; t < steps; t++) {
        const bool last = t + 1 == T;
        __global volatile float *slot = xpart + (t % 2) * X_PARTS * P;
        if (cho) { /* A0: r * h of the owned units, shared through the exchange buffer */
            for (uint j0 = j_lo; j0 < j_hi; j0 += UC_R) {
                gru_gates(Wi, Wh, bi, bh, xs, ha, ha, part, gates, j0, min(UC_R, j_hi - j0), 2,
                          SEG_R, IN, D, vec4, lid, L, false, 0.0f);
                if (lid < min(UC_R, j_hi - j0))
                    xrh[j0 + lid] =
                        oclml_sigmoid(gates[2 * lid] + gates[2 * lid + 1]) * ha[j0 + lid];
            }
            member_sync(count, abort_flag, ++nsync * P, spin_limit, P, lid);
            for (uint i = lid; i < D; i += L) hn[i] = xrh[i];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        /* A: the GRU for the owned units, UC_A at a time. */
        float yh = 0.0f, hq = 0.0f;
        for (uint j0 = j_lo; j0 < j_hi; j0 += UC_A) {
            const uint n = min(UC_A, j_hi - j0);
            float a_pre = 0.0f;
#ifdef RSSM_REGS
            if (keepA) {
                __local const float4 *x4 = (__local const float4 *)(qA < 3             ? xs
                                                                    : (qA == 5 && cho) ? hn
                                                                                       : ha);
                REG_DOT(a_pre, wa, x4, lenA4, laneA, SEG_A, REG_A);
                a_pre = ownA ? a_pre + biasA : 0.0f;
            }
#endif
            gru_gates(Wi, Wh, bi, bh, xs, ha, cho ? hn : ha, part, gates, j0, n, 6, SEG_A, IN, D,
                      vec4, lid, L, keepA, a_pre);
            if (lid < n) {
                __local const float *g = gates + 6 * lid;
                const uint j = j0 + lid;
                const float h = gru_cell(g[0] + g[3], g[1] + g[4], g[2], g[5], ha[j], cho);
                xh[j] = h;
                if (last && (flags & R_HFIN)) hfin[hfo + (ulong)e * D + j] = h;
                yh += (keepA ? wyA : wy[j]) * h;
                hq += h * h;
            }
        }
        float2 s = first_n_sum2(yh, hq, red, min(UC_A, j_hi - j_lo), lid, L);
        if (lid == 0) slot[p] = s.x, slot[P + p] = s.y;
        member_sync(count, abort_flag, ++nsync * P, spin_limit, P, lid);

        /* B: logits of the owned groups (RC_B rows at a time), then unimix, entropy and z. */
        for (uint i = lid; i < D; i += L) hn[i] = xh[i];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint r0 = 0; r0 < ng * C; r0 += RC_B) {
            const uint row = r0 + lid / SEG_B, lane = lid % SEG_B,
                       s_row = (p + row / C * P) * C + row % C;
            float a = 0.0f;
#ifdef RSSM_REGS
            if (keepB) {
                REG_DOT(a, wb, (__local const float4 *)hn, D / 4, laneB, SEG_B, REG_B);
                a = ownB ? a + biasB : 0.0f;
            } else
#endif
                if (row < ng * C)
                a = lane_dot(Wp + (ulong)s_row * D, hn, D, lane, SEG_B, vec4) +
                    (lane == 0 ? b_p[bpo + (ulong)e * S + s_row] : 0.0f);
            part[lid] = a;
            rows_reduce(part, gates, lid, L, SEG_B);
            if (lid < RC_B && r0 + lid < ng * C) lg[r0 + lid] = gates[lid];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        /* Unimix softmax of each owned group, work-item per logit; a group's first work-item
         * finds its max, then its sum of exponentials (gst: max then sum per group). */
        for (uint gi = lid; gi < ng; gi += L) {
            float m = -INFINITY;
            for (uint c = 0; c < C; c++) m = fmax(m, lg[gi * C + c]);
            gst[gi] = m;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint i = lid; i < ng * C; i += L) lg[i] = exp(lg[i] - gst[i / C]);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint gi = lid; gi < ng; gi += L) {
            float sum = 0.0f;
            for (uint c = 0; c < C; c++) sum += lg[gi * C + c];
            gst[NG + gi] = sum;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float ent = 0.0f, yz = 0.0f;
        for (uint i = lid; i < ng * C; i += L) {
            const float pi = (1.0f - unimix) * (lg[i] / gst[NG + i / C]) + unimix / (float)C;
            lg[i] = pi;
            ent -= (pi > 0.0f || isnan(pi)) ? pi * log(pi) : 0.0f; /* NaN in, NaN out */
        }
        if (sample) { /* z = onehot(first class whose running sum of pi exceeds u), Philox u */
            barrier(CLK_LOCAL_MEM_FENCE);
            for (uint gi = lid; gi < ng; gi += L) {
                const uint g = p + gi * P;
                sample_one_hot(lg + gi * C, C, e, t0 + t, g, seed_lo, seed_hi);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint i = lid; i < ng * C; i += L) { /* z to the exchange buffer, y's z part */
            const uint sz = (p + i / C * P) * C + i % C;
            const float z = lg[i];
            xz[sz] = z;
            if (last && (flags & R_ZFIN)) zfin[zfo + (ulong)e * S + sz] = z;
            yz += (keepZ ? wyZ : wy[D + sz]) * z;
        }
        s = first_n_sum2(yz, ent, red, min(L, ng * C), lid, L);
        if (lid == 0) slot[2 * P + p] = s.x, slot[3 * P + p] = s.y;
        member_sync(count, abort_flag, ++nsync * P, spin_limit, P, lid);

        /* The next state: h' (already in hn), z, y from the partial sums, f's shift register. */
        for (uint i = lid; i < D; i += L) ha[i] = hn[i];
        for (uint i = lid; i < S; i += L) xs[F + i] = xz[i];
        for (uint i = lid; i < X_PARTS * P; i += L) red[i] = slot[i];
        for (uint i = lid; i < K; i += L) fk[i] = xs[i];
        barrier(CLK_LOCAL_MEM_FENCE);
        /* Four sums side by side, each in the same order in every work-group: a warp each
         * with OCLML_PTX (warp shuffles), else a work-item each. */
#if OCLML_PTX
        if (P <= 32 && L >= 32 * X_PARTS) {
            if (lid < 32 * X_PARTS) {
                const float a = warp_sum(lid % 32 < P ? red[lid / 32 * P + lid % 32] : 0.0f);
                if (lid % 32 == 0) gates[lid / 32] = a;
            }
        } else
#endif
            if (lid < X_PARTS) {
            float a = 0.0f;
            for (uint q = 0; q < P; q++) a += red[lid * P + q];
            gates[lid] = a;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const float y = (gates[0] + gates[2]) + b_y[byo + e];
        if (lid == 0 && p == 0) {
            Y[yo + (ulong)e * T + t] = y;
            Hent[heo + (ulong)e * T + t] = gates[3];
            if (flags & R_HNORM) hnorm[hno + (ulong)e * T + t] = sqrt(gates[1]);
        }
        for (uint i = lid; i < K; i += L) xs[i] = i ? fk[i - 1] : y;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (uint i = lid; i < F && p == 0 && steps && (flags & R_FFIN); i += L)
        ffin[ffo + (ulong)e * F + i] = xs[i];
}
#endif

#endif /* RSSM_CPU */

/* Ensemble summary over members per step (mean, population std of y) and per-member metrics:
 * step deltas |y_t+1 - y_t| (y_0 given), variance of y over the trajectory, smoothness (mean
 * |y_t+1 - 2 y_t + y_t-1| over the steps that have both neighbours, the given y_0 included),
 * total entropy. One work-item per step (ensemble stats) and per member (metrics). */
#if OCLML_WANT(oclml_rssm_summary)
__kernel void oclml_rssm_summary(__global const float *Y, ulong yo, __global const float *Hent,
                                 ulong heo, __global const float *y0, ulong y0o, uint has_y0,
                                 uint E, uint T, __global float *ymean, ulong ymo,
                                 __global float *ystd, ulong yso, __global float *deltas, ulong dlo,
                                 __global float *var, ulong vo, __global float *smooth, ulong smo,
                                 __global float *tent, ulong teo, uint outs) {
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
#endif
