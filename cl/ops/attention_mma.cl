/* Attention forward on TF32 tensor cores with fp32-level accuracy (3xTF32: each product as
 * hi*hi + hi*lo + lo*hi, mma.h), for head dims that are multiples of 8 up to 128
 * (lib/ops/attention.c picks it where the device reports TF32 mma.sync; attention.cl is the FMA
 * kernel with the same arguments and semantics, including the key splits).
 *
 * A work-group of WARPS warps takes BQ = 16 WARPS query rows (16 a warp: the m16n8k8 rows) against
 * key blocks of BK keys staged in local memory. Each warp keeps its rows of Q in registers as
 * m16n8k8 A fragments, computes S = Q K^T for the block (BK / 8 tiles of 8 keys), applies the
 * masks and the online softmax on the accumulator fragments (a row's statistics reduced over the
 * 4 work-items that hold it), moves P from the accumulator layout to the A layout by shuffles
 * within those 4, and adds P V into O's fragments (HEAD_DIM / 8 tiles).
 *
 * Fragments (gid = lane / 4, tig = lane % 4): A holds rows gid, gid + 8 and k = tig, tig + 4; B
 * holds k = tig, tig + 4 of column gid; an accumulator holds rows gid, gid + 8 and columns
 * 2 tig, 2 tig + 1. */
#include "common.h"
#ifndef MMA_EMULATE
#define MMA_EMULATE 0 /* 1: the instruction and the shuffles in portable code (tests) */
#endif
#if !MMA_EMULATE && defined(OCLML_PTX) && OCLML_PTX
#define OCLML_WANT_MMA_TF32 1
#elif !MMA_EMULATE /* no inline PTX in this build: the portable code */
#undef MMA_EMULATE
#define MMA_EMULATE 1
#endif
#include "ptx.h"
#include "mma.h"

#ifndef HEAD_DIM
#define HEAD_DIM 64 /* a multiple of 8, at most 128 */
#endif
#ifndef BK
#define BK 32
#endif
#define WARPS 4
#define NT (32 * WARPS)
#define BQ (16 * WARPS)
#define DSTEPS (HEAD_DIM / 8) /* 8-wide steps over the head dim: Q's k steps, O's column tiles */
#define KTILES (BK / 8)       /* 8-key tiles of a key block: S's column tiles, P V's k steps */
#define CHUNK_STEPS 4         /* 8-deep steps S sums on the tensor cores before an fp32 add */
/* Row strides of the staged blocks: B fragment reads of K (row gid, column tig) and of V (row
 * tig, column gid) fall on 32 distinct banks. */
#define K_LD (HEAD_DIM + 4)
#define V_LD (HEAD_DIM + 8)
#include "attention.h"

#if MMA_EMULATE
/* Lane src's v through this warp's 32 floats of local memory; every work-item of the work-group
 * calls it together (barriers). */
OCLML_INLINE float shuffle_emulated(float v, uint src, __local float *shfl, uint lane) {
    barrier(CLK_LOCAL_MEM_FENCE);
    shfl[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    return shfl[src];
}
#define SHUFFLE(v, src) shuffle_emulated(v, src, shfl, lane)
#else
#define SHUFFLE(v, src) warp_shuffle(v, src)
#endif

/* d += a b in 3xTF32, a and b as floats (a: this work-item's 4 A values, b: its 2 B values). */
#define MMA3(d, a, b)                                                                              \
    {                                                                                              \
        uint ah_[4], al_[4], bh_[2], bl_[2];                                                       \
        _Pragma("unroll") for (uint x_ = 0; x_ < 4; x_++) tf32_split((a)[x_], &ah_[x_], &al_[x_]); \
        tf32_split((b)[0], &bh_[0], &bl_[0]);                                                      \
        tf32_split((b)[1], &bh_[1], &bl_[1]);                                                      \
        MMA(d, al_[0], al_[1], al_[2], al_[3], bh_[0], bh_[1]);                                    \
        MMA(d, ah_[0], ah_[1], ah_[2], ah_[3], bl_[0], bl_[1]);                                    \
        MMA(d, ah_[0], ah_[1], ah_[2], ah_[3], bh_[0], bh_[1]);                                    \
    }

#if OCLML_WANT(oclml_attention_fwd_mma)
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
oclml_attention_fwd_mma(__global const float *q, ulong q_off, __global const float *k, ulong k_off,
                        __global const float *v, ulong v_off, __global float *o, ulong o_off,
                        __global float *lse, ulong lse_off, uint has_lse,
                        __global const float *mask, ulong mask_off, __global const float *keylen,
                        ulong keylen_off, __global float *part, ulong rows_all, uint splits,
                        uint blocks_per_split, ATT_GEOM) {
    __local float ks[BK * K_LD], vs[BK * V_LD];
    __local ulong rows_qkv[BQ], rows_stat[BQ], rows_mask[BQ];
    __local int rows_i[BQ];
    const row_table rows = {rows_qkv, rows_stat, rows_mask, rows_i};
    const uint lid = get_local_id(0), lane = lid % 32, warp = lid / 32, gid = lane / 4,
               tig = lane % 4;
#if MMA_EMULATE
    __local float xchg_all[WARPS * MMA_XCHG_FLOATS], shfl_all[WARPS * 32];
    __local float *xchg = xchg_all + warp * MMA_XCHG_FLOATS, *shfl = shfl_all + warp * 32;
#endif
    const uint bh = get_global_id(1), b = bh / HKV, hkv = bh % HKV, split = get_global_id(2);
    const uint n_rows = H / HKV * LQ, R0 = get_group_id(0) * BQ;
    k += k_off + row_offset(b, hkv, 0, HKV, LK);
    v += v_off + row_offset(b, hkv, 0, HKV, LK);
    const ulong kstride = KEY_STRIDE(HKV);
    const int klen = key_length(keylen, keylen_off, b, LK);
    fill_rows(rows, R0, b, hkv, n_rows, B, H, HKV, LQ, LK, scale, shift, wl, wr, mask_bstride,
              mask_hstride);
    int imin, imax, jlo, jhi;
    query_span(R0, n_rows, LQ, &imin, &imax);
    key_span(imin, imax, klen, shift, wl, wr, &jlo, &jhi);
    const int first = jlo / BK * BK + (int)(split * blocks_per_split) * BK;
    const int end = min(jhi, first + (int)blocks_per_split * BK);

    /* This work-item's rows: r[0] = warp 16 + gid and r[1] = r[0] + 8 of the block. */
    const uint r[2] = {warp * 16 + gid, warp * 16 + gid + 8};
    const ulong qrow[2] = {rows_qkv[r[0]], rows_qkv[r[1]]};
    float qa[DSTEPS][4], acc[DSTEPS][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (uint kk = 0; kk < DSTEPS; kk++)
#pragma unroll
        for (uint x = 0; x < 4; x++) {
            const ulong at = qrow[x % 2];
            qa[kk][x] = at != NO_ROW ? q[q_off + at + kk * 8 + tig + 4 * (x / 2)] : 0.0f;
            acc[kk][x] = 0.0f;
        }
    const uint src_lo = (lane & ~3u) | (tig >> 1), src_hi = src_lo + 2;
    for (int kb = first; kb < end; kb += BK) {
        const uint nk = (uint)min(BK, (int)LK - kb);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < BK * HEAD_DIM; e += NT) {
            const uint j = e / HEAD_DIM, c = e % HEAD_DIM;
            const bool in = j < nk;
            ks[j * K_LD + c] = in ? k[(kb + j) * kstride + c] : 0.0f;
            vs[j * V_LD + c] = in ? v[(kb + j) * kstride + c] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* S = Q K^T. The tensor cores round their sums toward zero, a bias that grows with every
         * accumulation into the same register (the GEMM measured it): each 8-key tile sums
         * CHUNK_STEPS 8-deep steps at a time from zero, and fp32 adds carry the total. */
        float s[KTILES][4];
#if !MMA_EMULATE
#pragma unroll
#endif
        for (uint nt = 0; nt < KTILES; nt++) {
#pragma unroll
            for (uint x = 0; x < 4; x++) s[nt][x] = 0.0f;
            for (uint k0 = 0; k0 < DSTEPS; k0 += CHUNK_STEPS) {
                float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#if !MMA_EMULATE
#pragma unroll
#endif
                for (uint kk = k0; kk < min(k0 + CHUNK_STEPS, (uint)DSTEPS); kk++) {
                    const float kb2[2] = {ks[(nt * 8 + gid) * K_LD + kk * 8 + tig],
                                          ks[(nt * 8 + gid) * K_LD + kk * 8 + tig + 4]};
                    MMA3(t, qa[kk], kb2)
                }
#pragma unroll
                for (uint x = 0; x < 4; x++) s[nt][x] += t[x];
            }
        }
        /* Masks, and the online softmax of each of the two rows. */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
            for (uint x = 0; x < 4; x++) {
                const uint row = r[x / 2];
                s[nt][x] = masked_score(s[nt][x], rows_i[row], kb + (int)(nt * 8 + 2 * tig + x % 2),
                                        klen, shift, wl, wr, scale, mask, mask_off, rows_mask[row]);
                mx[x / 2] = fmax(mx[x / 2], s[nt][x]);
            }
        float base[2];
#pragma unroll
        for (uint h = 0; h < 2; h++) {
            mx[h] = fmax(mx[h], SHUFFLE(mx[h], lane ^ 1u));
            mx[h] = fmax(mx[h], SHUFFLE(mx[h], lane ^ 2u));
            const float mn = fmax(m[h], mx[h]);
            /* exp(x - -inf) would be NaN where the row has seen nothing yet: shift by 0 there. */
            base[h] = mn == -INFINITY ? 0.0f : mn;
            const float alpha = exp(m[h] - base[h]);
            m[h] = mn;
            l[h] *= alpha;
#pragma unroll
            for (uint nt = 0; nt < DSTEPS; nt++) {
                acc[nt][2 * h] *= alpha;
                acc[nt][2 * h + 1] *= alpha;
            }
        }
#pragma unroll
        for (uint nt = 0; nt < KTILES; nt++)
#pragma unroll
            for (uint x = 0; x < 4; x++) {
                s[nt][x] = exp(s[nt][x] - base[x / 2]);
                l[x / 2] += s[nt][x];
            }
        /* O += P V: P's 8-key tile kt as an A fragment, key tig of row gid from work-item
         * (gid, tig / 2) and key tig + 4 from (gid, 2 + tig / 2), the even or odd column; split
         * into tf32 parts once. Each of O's column tiles sums the block from zero on the tensor
         * cores and adds it in fp32 (the rounding toward zero, as above). */
        uint pah[KTILES][4], pal[KTILES][4];
#if !MMA_EMULATE
#pragma unroll
#endif
        for (uint kt = 0; kt < KTILES; kt++) {
            const float lo0 = SHUFFLE(s[kt][0], src_lo), lo1 = SHUFFLE(s[kt][1], src_lo),
                        lo2 = SHUFFLE(s[kt][2], src_lo), lo3 = SHUFFLE(s[kt][3], src_lo),
                        hi0 = SHUFFLE(s[kt][0], src_hi), hi1 = SHUFFLE(s[kt][1], src_hi),
                        hi2 = SHUFFLE(s[kt][2], src_hi), hi3 = SHUFFLE(s[kt][3], src_hi);
            const bool odd = tig & 1u;
            tf32_split(odd ? lo1 : lo0, &pah[kt][0], &pal[kt][0]);
            tf32_split(odd ? lo3 : lo2, &pah[kt][1], &pal[kt][1]);
            tf32_split(odd ? hi1 : hi0, &pah[kt][2], &pal[kt][2]);
            tf32_split(odd ? hi3 : hi2, &pah[kt][3], &pal[kt][3]);
        }
#if !MMA_EMULATE
#pragma unroll
#endif
        for (uint nt = 0; nt < DSTEPS; nt++) {
            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#if !MMA_EMULATE
#pragma unroll
#endif
            for (uint kt = 0; kt < KTILES; kt++) {
                uint bh[2], bl[2];
                tf32_split(vs[(kt * 8 + tig) * V_LD + nt * 8 + gid], &bh[0], &bl[0]);
                tf32_split(vs[(kt * 8 + tig + 4) * V_LD + nt * 8 + gid], &bh[1], &bl[1]);
                MMA(t, pal[kt][0], pal[kt][1], pal[kt][2], pal[kt][3], bh[0], bh[1]);
                MMA(t, pah[kt][0], pah[kt][1], pah[kt][2], pah[kt][3], bl[0], bl[1]);
                MMA(t, pah[kt][0], pah[kt][1], pah[kt][2], pah[kt][3], bh[0], bh[1]);
            }
#pragma unroll
            for (uint x = 0; x < 4; x++) acc[nt][x] += t[x];
        }
    }
    /* Each row's sum over the 4 work-items that hold it, then O / l and the log-sum-exp. */
#pragma unroll
    for (uint h = 0; h < 2; h++) {
        l[h] += SHUFFLE(l[h], lane ^ 1u);
        l[h] += SHUFFLE(l[h], lane ^ 2u);
        const ulong stat = rows_stat[r[h]];
        const float sum = l[h];
        const float inv = sum > 0.0f ? 1.0f / sum : (sum == 0.0f ? 0.0f : sum);
        const float row_lse = sum > 0.0f ? m[h] + log(sum) : (sum == 0.0f ? -INFINITY : sum);
        /* One split: O and lse in place; several: this split's part (rows in [B, H, LQ]). */
        const ulong at = splits == 1 ? qrow[h] : stat == NO_ROW ? NO_ROW : stat * HEAD_DIM;
        __global float *dst = splits == 1 ? o + o_off : part + (ulong)split * rows_all * HEAD_DIM;
        if (at != NO_ROW)
#pragma unroll
            for (uint nt = 0; nt < DSTEPS; nt++) {
                dst[at + nt * 8 + 2 * tig] = inv * acc[nt][2 * h];
                dst[at + nt * 8 + 2 * tig + 1] = inv * acc[nt][2 * h + 1];
            }
        if (stat != NO_ROW && tig == 0) {
            if (splits > 1)
                part[splits * rows_all * HEAD_DIM + split * rows_all + stat] = row_lse;
            else if (has_lse)
                lse[lse_off + stat] = row_lse;
        }
    }
}
#endif
