/* GRU cell (RSSM.md), PyTorch layout: W_ih [3D x I], W_hh [3D x D], b_ih, b_hh [3D], gate blocks
 * (r, z, n).
 *   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr),  z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
 *   TORCH: n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
 *   CHO:   n = tanh(W_in x + b_in + W_hn (r*h) + b_hn)
 *   h' = (1 - z) * n + z * h
 * flags: GRU_B_IH | GRU_B_HH (gru_abi.h). */
#include "rows.h"
#include "ptx.h"
#include "gru_abi.h"
#include "gru_cell.h"

/* Work-item lane's share (every S-th element) of the dot product of a weight row with a
 * vector, with four loads in flight: the serial loop waited out one load latency per element. */
inline float strided_dot(__global const float *w, __global const float *v, uint n, uint lane,
                         uint S) {
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    uint k = lane;
    for (; k + 3 * S < n; k += 4 * S) {
        a0 += w[k] * v[k];
        a1 += w[k + S] * v[k + S];
        a2 += w[k + 2 * S] * v[k + 2 * S];
        a3 += w[k + 3 * S] * v[k + 3 * S];
    }
    for (; k < n; k += S) a0 += w[k] * v[k];
    return (a0 + a1) + (a2 + a3);
}

/* Fused step for small batches: one work-group per hidden unit j and block of batch rows. Its
 * three segments of S work-items compute gate g's two dot products (input and hidden side) with
 * coalesced reads of the weight rows; work-item 0 combines the gates. hvec_n is the vector the
 * n-gate's hidden side multiplies: h (TORCH) or r*h (CHO, from oclml_gru_cho_r). */
#if OCLML_WANT(oclml_gru_step_fused)
__kernel void oclml_gru_step_fused(__global const float *x, ulong xo, __global const float *h,
                                   ulong ho, __global const float *hvec_n, ulong hno,
                                   __global const float *w_ih, ulong wio,
                                   __global const float *w_hh, ulong who,
                                   __global const float *b_ih, ulong bio,
                                   __global const float *b_hh, ulong bho, __global float *h_new,
                                   ulong hwo, uint flags, uint cho, uint B, uint I, uint D, uint S,
                                   uint BB, __local float *red) {
    const uint lid = get_local_id(0), g = lid / S, lane = lid % S;
    const uint j = get_group_id(0);
    const ulong row = (ulong)g * D + j;
    __global const float *wi = w_ih + wio + row * I, *wh = w_hh + who + row * D;
    __local float *gates = red + 3 * S;
    const uint b0 = get_group_id(1) * BB, b1 = min(B, b0 + BB);
    for (uint b = b0; b < b1; b++) {
        __global const float *xb = x + xo + (ulong)b * I;
        __global const float *hb = (g == 2 ? hvec_n + hno : h + ho) + (ulong)b * D;
        float ai = strided_dot(wi, xb, I, lane, S), ah = strided_dot(wh, hb, D, lane, S);
#if OCLML_PTX
        if (S == 32) { /* a segment is a warp: shuffles instead of seg_sum's barriers */
            ai = warp_sum(ai);
            ah = warp_sum(ah);
        } else
#endif
        {
            ai = seg_sum(ai, red, lid, S);
            ah = seg_sum(ah, red, lid, S);
        }
        if (lane == 0) {
            gates[g] = ai + ((flags & GRU_B_IH) ? b_ih[bio + row] : 0.0f);
            gates[3 + g] = ah + ((flags & GRU_B_HH) ? b_hh[bho + row] : 0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) {
            const float hj = h[ho + (ulong)b * D + j];
            h_new[hwo + (ulong)b * D + j] =
                gru_cell(gates[0] + gates[3], gates[1] + gates[4], gates[2], gates[5], hj, cho);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
#endif

/* CHO, phase 1: rh = r * h for every unit (the n gate of phase 2 needs all of it). One segment
 * of S work-items per unit and block of batch rows. */
#if OCLML_WANT(oclml_gru_cho_r)
__kernel void oclml_gru_cho_r(__global const float *x, ulong xo, __global const float *h, ulong ho,
                              __global const float *w_ih, ulong wio, __global const float *w_hh,
                              ulong who, __global const float *b_ih, ulong bio,
                              __global const float *b_hh, ulong bho, __global float *rh, uint flags,
                              uint B, uint I, uint D, uint S, uint BB, __local float *red) {
    const uint lid = get_local_id(0), lane = lid % S, j = get_group_id(0);
    __global const float *wi = w_ih + wio + (ulong)j * I, *wh = w_hh + who + (ulong)j * D;
    const uint b0 = get_group_id(1) * BB, b1 = min(B, b0 + BB);
    for (uint b = b0; b < b1; b++) {
        float a = 0.0f;
        a += strided_dot(wi, x + xo + (ulong)b * I, I, lane, S) +
             strided_dot(wh, h + ho + (ulong)b * D, D, lane, S);
        a = seg_sum(a, red, lid, S);
        if (lane == 0) {
            a += ((flags & GRU_B_IH) ? b_ih[bio + j] : 0.0f) +
                 ((flags & GRU_B_HH) ? b_hh[bho + j] : 0.0f);
            rh[(ulong)b * D + j] = oclml_sigmoid(a) * h[ho + (ulong)b * D + j];
        }
    }
}
#endif

/* ---- backward of one step ----
 * From the forward pre-activations gx = x W_ih^T, gh = h W_hh^T ([B x 3D]; for CHO ghn = (r*h)
 * W_hn^T [B x D]) and dh' (the gradient of h'):
 *   dn = dh' (1 - z), dz = dh' (h - n), da_n = dn (1 - n^2), da_z = dz z (1 - z)
 *   TORCH: da_r = da_n (W_hn h + b_hn) r (1 - r); input-side gradients (da_r, da_z, da_n),
 *          hidden-side (da_r, da_z, da_n r)
 *   CHO:   da_r needs d(r h) = da_n W_hn, a GEMM: written by oclml_gru_bwd_cho_r afterwards.
 * dh_acc = dh' z (the direct path; the GEMM with W_hh adds the rest). */
#if OCLML_WANT(oclml_gru_bwd_r)
__kernel void oclml_gru_bwd_r(__global const float *gx, __global const float *gh,
                              __global const float *b_ih, ulong bio, __global const float *b_hh,
                              ulong bho, __global const float *h, ulong ho, __global float *r_out,
                              __global float *rh, uint flags, uint B, uint D) {
    const ulong i = get_global_id(0);
    if (i >= (ulong)B * D) return;
    const ulong b = i / D, j = i % D;
    const float a = gx[b * 3 * D + j] + gh[b * 3 * D + j] +
                    ((flags & GRU_B_IH) ? b_ih[bio + j] : 0.0f) +
                    ((flags & GRU_B_HH) ? b_hh[bho + j] : 0.0f);
    const float r = oclml_sigmoid(a);
    r_out[i] = r;
    rh[i] = r * h[ho + i];
}
#endif

#if OCLML_WANT(oclml_gru_bwd_gates)
__kernel void oclml_gru_bwd_gates(__global const float *gx, __global const float *gh,
                                  __global const float *ghn, __global const float *b_ih, ulong bio,
                                  __global const float *b_hh, ulong bho, __global const float *h,
                                  ulong ho, __global const float *dhn, ulong dho,
                                  __global float *dgi, __global float *dgh, __global float *dan,
                                  __global float *dh_acc, uint flags, uint cho, uint B, uint D) {
    const ulong i = get_global_id(0);
    if (i >= (ulong)B * D) return;
    const ulong b = i / D, j = i % D, base = b * 3 * D;
    float gi[3], gg[3];
    for (uint g = 0; g < 3; g++) {
        gi[g] = gx[base + g * D + j] + ((flags & GRU_B_IH) ? b_ih[bio + g * D + j] : 0.0f);
        gg[g] = gh[base + g * D + j] + ((flags & GRU_B_HH) ? b_hh[bho + g * D + j] : 0.0f);
    }
    const float r = oclml_sigmoid(gi[0] + gg[0]), z = oclml_sigmoid(gi[1] + gg[1]);
    const float hn_lin = cho ? ghn[i] + ((flags & GRU_B_HH) ? b_hh[bho + 2 * D + j] : 0.0f) : gg[2];
    const float n = tanh(gi[2] + (cho ? hn_lin : r * hn_lin));
    const float g = dhn[dho + i], hj = h[ho + i];
    const float da_n = g * (1.0f - z) * (1.0f - n * n);
    const float da_z = g * (hj - n) * z * (1.0f - z);
    const float da_r = cho ? 0.0f : da_n * hn_lin * r * (1.0f - r);
    dgi[base + j] = da_r;
    dgi[base + D + j] = da_z;
    dgi[base + 2 * D + j] = da_n;
    dgh[base + j] = da_r;
    dgh[base + D + j] = da_z;
    dgh[base + 2 * D + j] = cho ? 0.0f : da_n * r; /* CHO: W_hn saw r*h, handled apart */
    dan[i] = da_n;
    dh_acc[i] = g * z;
}
#endif

/* CHO: with drh = da_n W_hn: da_r = drh h r (1 - r) into the r columns, dh_acc += drh r. */
#if OCLML_WANT(oclml_gru_bwd_cho_r)
__kernel void oclml_gru_bwd_cho_r(__global const float *drh, __global const float *r_in,
                                  __global const float *h, ulong ho, __global float *dgi,
                                  __global float *dgh, __global float *dh_acc, uint B, uint D) {
    const ulong i = get_global_id(0);
    if (i >= (ulong)B * D) return;
    const ulong b = i / D, j = i % D;
    const float r = r_in[i], da_r = drh[i] * h[ho + i] * r * (1.0f - r);
    dgi[b * 3 * D + j] = da_r;
    dgh[b * 3 * D + j] = da_r;
    dh_acc[i] += drh[i] * r;
}
#endif
