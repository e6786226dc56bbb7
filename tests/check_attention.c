/* Attention against the double-precision definition (tests/ref/attention.c): forward and
 * backward over odd lengths, Lq != Lk, every causal alignment, windows, grouped-query heads, both
 * layouts, key lengths and broadcast masks; the emulated tensor-core forward; the gradients also
 * by central finite differences of the library's own forward; bit-for-bit repeatable backward;
 * rows that see no key; the NaN policy (padding past the key length is never read); scores that
 * would overflow an unshifted exp; decoding, and key splits forced; dropout on the probabilities
 * (the reference with the host's mask, finite differences, p = 0, repeats); bad arguments and
 * aliased gradients touching nothing.
 *
 * Kernel variants are compiled per head dim, layout and mask/key-length combination (seconds
 * each on PoCL), so the cases share four: D 16 BHLD plain, D 64 BLHD with mask and key lengths,
 * D 24 BHLD with a mask, D 128 BLHD with key lengths. Lengths 1, 7, 33, 65 and 70 sit around
 * the 64-row and 64-key blocks of the default tile; 8 rows a key head or fewer take the decode
 * tile. */
#include "testutil.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A softmax and sums over at most a few hundred keys and the head dim (PoCL: below 5e-7). */
#define TOL_ATT TOL_REDUCTION

enum { BHLD = OCLML_ATTENTION_BHLD, BLHD = OCLML_ATTENTION_BLHD };
enum { NONE = OCLML_CAUSAL_NONE, TL = OCLML_CAUSAL_TOP_LEFT, BR = OCLML_CAUSAL_BOTTOM_RIGHT };
/* The mask: none, [Lq, Lk], or 4-D [1, H], [B, 1], [B, H] (then Lq, Lk). */
enum { NOMASK, M2D, M1H, MB1, MBH };
static const char *const MASK_NAMES[] = {"none", "2-D", "1xH", "Bx1", "BxH"};

typedef struct att_case {
    size_t B, H, Hkv, Lq, Lk, D;
    int layout, causal;
    long wl, wr;
    float scale; /* 0: the default 1 / sqrt(D) */
    int mask, keylen;
} att_case;

/* One case's inputs on the host and the device, its outputs (NaN-poisoned) and references. */
typedef struct att_data {
    att_case c;
    ref_attention_args ra;
    size_t nq, nk, nl, nm;
    float *q, *k, *v, *m, *kl, *g; /* g: the upstream gradient dO */
    oclml_tensor *Q, *K, *V, *M, *KL, *O, *LSE, *G, *DQ, *DK, *DV, *DM;
    oclml_attention_params p;
    char name[200];
} att_data;

static void shape4(size_t s[4], int layout, size_t B, size_t H, size_t L, size_t D) {
    s[0] = B;
    s[1] = layout == BLHD ? L : H;
    s[2] = layout == BLHD ? H : L;
    s[3] = D;
}

/* Key lengths that cover the clamp (past Lk), a partial last block and a single key. */
static float key_length_of(size_t b, size_t Lk) {
    const float l[3] = {(float)Lk + 7, (float)(Lk * 2 / 3 + 1), 1};
    return l[b % 3];
}

static void poison(oclml_tensor *t, size_t n) {
    float *nan = test_floats(n);
    ASSERT_OK(oclml_tensor_write(t, nan, n));
    free(nan);
}

/* Random inputs (q, k, v in [-1.5, 1.5), a mask in [-2, 2) with about one entry in eight -inf),
 * the tensors and the params of case c. */
static void att_make(att_data *d, const att_case *c) {
    memset(d, 0, sizeof *d);
    d->c = *c;
    const size_t B = c->B, H = c->H, Hkv = c->Hkv, Lq = c->Lq, Lk = c->Lk, D = c->D;
    const size_t mb = c->mask == MB1 || c->mask == MBH ? B : 1,
                 mh = c->mask == M1H || c->mask == MBH ? H : 1;
    d->nq = B * H * Lq * D, d->nk = B * Hkv * Lk * D, d->nl = B * H * Lq;
    d->nm = c->mask ? mb * mh * Lq * Lk : 0;
    d->q = test_floats(d->nq), d->k = test_floats(d->nk), d->v = test_floats(d->nk);
    d->g = test_floats(d->nq);
    test_random(d->q, d->nq, -1.5f, 1.5f);
    test_random(d->k, d->nk, -1.5f, 1.5f);
    test_random(d->v, d->nk, -1.5f, 1.5f);
    test_random(d->g, d->nq, -1, 1);
    size_t qs[4], ks[4], ls[3] = {B, H, Lq};
    shape4(qs, c->layout, B, H, Lq, D);
    shape4(ks, c->layout, B, Hkv, Lk, D);
    d->Q = test_tensor_from(4, qs, d->q);
    d->K = test_tensor_from(4, ks, d->k);
    d->V = test_tensor_from(4, ks, d->v);
    d->G = test_tensor_from(4, qs, d->g);
    d->O = test_tensor(4, qs);
    d->LSE = test_tensor(3, ls);
    d->DQ = test_tensor(4, qs);
    d->DK = test_tensor(4, ks);
    d->DV = test_tensor(4, ks);
    oclml_attention_params_init(&d->p);
    d->p.scale = c->scale;
    d->p.causal = c->causal;
    d->p.layout = c->layout;
    d->p.window_left = c->wl;
    d->p.window_right = c->wr;
    if (c->mask) {
        d->m = test_floats(d->nm);
        float *u = test_floats(d->nm);
        test_random(d->m, d->nm, -2, 2);
        test_random(u, d->nm, 0, 1);
        for (size_t i = 0; i < d->nm; i++)
            if (u[i] < 0.125f) d->m[i] = -INFINITY;
        free(u);
        size_t ms[4] = {mb, mh, Lq, Lk};
        d->M = c->mask == M2D ? test_tensor_from(2, ms + 2, d->m) : test_tensor_from(4, ms, d->m);
        d->DM = c->mask == M2D ? test_tensor(2, ms + 2) : test_tensor(4, ms);
        d->p.mask = d->M;
    }
    if (c->keylen) {
        d->kl = test_floats(B);
        for (size_t b = 0; b < B; b++) d->kl[b] = key_length_of(b, Lk);
        d->KL = test_tensor_from(1, &B, d->kl);
        d->p.key_lengths = d->KL;
    }
    d->ra = (ref_attention_args){B,         H,        Hkv,   Lq,    Lk,    D,    c->layout == BLHD,
                                 c->causal, c->scale, c->wl, c->wr, d->kl, d->m, mb,
                                 mh,        0,        0,     0};
    snprintf(d->name, sizeof d->name,
             "B%zu H%zu/%zu Lq%zu Lk%zu D%zu %s causal %d window %ld,%ld scale %g mask %s%s", B, H,
             Hkv, Lq, Lk, D, c->layout == BLHD ? "BLHD" : "BHLD", c->causal, c->wl, c->wr,
             (double)c->scale, MASK_NAMES[c->mask], c->keylen ? " key lengths" : "");
}

/* Writes host copies that were changed (special values) to the device. */
static void att_upload(att_data *d) {
    ASSERT_OK(oclml_tensor_write(d->Q, d->q, d->nq));
    ASSERT_OK(oclml_tensor_write(d->K, d->k, d->nk));
    ASSERT_OK(oclml_tensor_write(d->V, d->v, d->nk));
    if (d->M) ASSERT_OK(oclml_tensor_write(d->M, d->m, d->nm));
    if (d->KL) ASSERT_OK(oclml_tensor_write(d->KL, d->kl, d->c.B));
}

static void att_free(att_data *d) {
    oclml_tensor *t[] = {d->Q,   d->K, d->V,  d->M,  d->KL, d->O,
                         d->LSE, d->G, d->DQ, d->DK, d->DV, d->DM};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i]) oclml_tensor_destroy(t[i]);
    float *f[] = {d->q, d->k, d->v, d->m, d->kl, d->g};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
}

static float *read_all(const oclml_tensor *t, size_t n) {
    float *x = test_floats(n);
    test_read(t, x, n);
    return x;
}

/* Runs the forward into poisoned O and LSE. */
static void att_forward(att_data *d) {
    poison(d->O, d->nq);
    poison(d->LSE, d->nl);
    ASSERT_OK(oclml_attention(T, &d->p, d->Q, d->K, d->V, d->O, d->LSE));
}

/* Runs the forward, then the backward into poisoned gradients. */
static void att_backward(att_data *d) {
    att_forward(d);
    poison(d->DQ, d->nq);
    poison(d->DK, d->nk);
    poison(d->DV, d->nk);
    if (d->DM) poison(d->DM, d->nm);
    ASSERT_OK(oclml_attention_backward(T, &d->p, d->Q, d->K, d->V, d->O, d->LSE, d->G, d->DQ, d->DK,
                                       d->DV, d->DM));
}

static void check_out(const att_data *d, const char *what, const oclml_tensor *t, const double *ref,
                      const double *scale, size_t n) {
    char name[260];
    snprintf(name, sizeof name, "%s: %s", d->name, what);
    float *got = read_all(t, n);
    test_assert_close_scaled(name, got, ref, scale, n, TOL_ATT);
    free(got);
}

/* lse against the reference, each judged against 1 + |lse| (a log-sum-exp near 0 is a
 * difference of its maximum score and a log of order 1, not a small number to be relatively
 * exact). */
static void check_lse(const att_data *d, const double *ref) {
    double *scale = test_doubles(d->nl);
    for (size_t i = 0; i < d->nl; i++) scale[i] = 1 + (isfinite(ref[i]) ? fabs(ref[i]) : 0);
    check_out(d, "lse", d->LSE, ref, scale, d->nl);
    free(scale);
}

/* o and lse against the reference (every element written: test_assert_close fails on NaN where
 * the reference is finite, and on a mismatched -inf). */
static void att_check_forward(att_data *d) {
    att_forward(d);
    double *ro = test_doubles(d->nq), *rl = test_doubles(d->nl);
    ref_attention(&d->ra, d->q, d->k, d->v, ro, rl);
    check_out(d, "o", d->O, ro, NULL, d->nq);
    check_lse(d, rl);
    free(ro);
    free(rl);
}

/* dq, dk, dv and dmask against the reference, each judged against the magnitude of its terms
 * (dS = P (dP - delta) cancels by design). */
static void att_check_backward(att_data *d) {
    att_backward(d);
    double *r[8];
    const size_t n[8] = {d->nq, d->nk, d->nk, d->nm, d->nq, d->nk, d->nk, d->nm};
    for (int i = 0; i < 8; i++) r[i] = test_doubles(n[i]);
    ref_attention_backward(&d->ra, d->q, d->k, d->v, d->g, r[0], r[1], r[2], d->M ? r[3] : NULL,
                           r[4], r[5], r[6], d->M ? r[7] : NULL);
    check_out(d, "dq", d->DQ, r[0], r[4], d->nq);
    check_out(d, "dk", d->DK, r[1], r[5], d->nk);
    check_out(d, "dv", d->DV, r[2], r[6], d->nk);
    if (d->M) check_out(d, "dmask", d->DM, r[3], r[7], d->nm);
    for (int i = 0; i < 8; i++) free(r[i]);
}

/* ---- forward and backward against the reference ---- */

static const att_case CASES[] = {
    /* D 16, BHLD, no mask or key lengths. */
    {1, 1, 1, 1, 1, 16, BHLD, NONE, -1, -1, 0, NOMASK, 0},   /* one query, one key */
    {2, 4, 2, 7, 33, 16, BHLD, TL, -1, -1, 0.3f, NOMASK, 0}, /* GQA, explicit scale */
    {1, 4, 1, 70, 33, 16, BHLD, BR, -1, -1, 0, NOMASK, 0},   /* MQA; rows 0..36 see nothing */
    {2, 2, 2, 65, 65, 16, BHLD, NONE, 5, 3, 0, NOMASK, 0},   /* two-sided window */
    {1, 4, 2, 33, 65, 16, BHLD, BR, 8, 4, 0, NOMASK, 0},     /* causal overrides wr = 4 */
    {1, 2, 1, 65, 7, 16, BHLD, NONE, 2, -1, 0, NOMASK, 0},   /* left window only */
    {2, 2, 1, 33, 65, 16, BHLD, TL, -1, 9, 1.0f, NOMASK, 0}, /* causal overrides wr = 9 */
    /* D 64, BLHD, mask and key lengths. */
    {2, 2, 1, 33, 65, 64, BLHD, NONE, -1, -1, 0, M2D, 1},
    {3, 4, 2, 7, 33, 64, BLHD, TL, -1, -1, 0, MB1, 1},
    {2, 2, 2, 65, 65, 64, BLHD, BR, 16, -1, 0.2f, M1H, 1},
    {2, 4, 4, 1, 7, 64, BLHD, NONE, -1, -1, 0, MBH, 1},
    /* D 24 (not a multiple of 16), BHLD, mask. */
    {2, 2, 1, 33, 33, 24, BHLD, TL, -1, -1, 0, MBH, 0},
    {1, 2, 2, 7, 65, 24, BHLD, NONE, 3, 10, 0, M2D, 0},
    /* D 128, BLHD, key lengths. */
    {2, 2, 2, 33, 70, 128, BLHD, NONE, -1, -1, 0, NOMASK, 1},
    {1, 4, 2, 65, 33, 128, BLHD, BR, -1, -1, 0, NOMASK, 1},
    /* D 256 and 160 (past the unpaired tensor-core kernels): GQA, causal, key lengths; a window
     * and a mask. */
    {1, 4, 2, 33, 40, 256, BLHD, TL, -1, -1, 0, NOMASK, 1},
    {2, 2, 2, 20, 33, 160, BHLD, NONE, 4, -1, 0, M2D, 0},
    /* D 32: the float4 kernels' smallest head dim (one 32-column group), GQA, causal. */
    {1, 4, 2, 37, 41, 32, BHLD, TL, -1, -1, 0, NOMASK, 0},
    /* D 64, BLHD without key lengths (where the tensor-core backward may take dQ as a GEMM on
     * dS): GQA, causal, a mask broadcast over the batch. */
    {2, 4, 2, 33, 40, 64, BLHD, TL, -1, -1, 0, MB1, 0},
    /* More than 128 query rows with a causal mask or a window: BHLD GQA causal bottom-right,
     * BLHD a window. */
    {1, 4, 2, 300, 310, 16, BHLD, BR, -1, -1, 0, NOMASK, 0},
    {2, 2, 2, 260, 200, 16, BLHD, NONE, 40, 8, 0, NOMASK, 0},
    /* D 192: the paired forward's float4 reads on halves of 96 columns (three 32-column groups),
     * a mask. */
    {1, 2, 2, 20, 33, 192, BHLD, NONE, -1, -1, 0, M2D, 0},
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

/* The order the reference loops take the cases in: the quick tier's first, head dims 16, 64, 24
 * and 128 (every mask, layout, causal alignment, window, GQA, key lengths and decode on PoCL's
 * FMA kernels); the sweep adds the same kernels at head dims 256, 160, 32 and 192, the mask
 * without key lengths in BLHD and the window past 128 rows in BLHD. */
static const int CASE_ORDER[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                 11, 12, 13, 14, 19, 15, 16, 17, 18, 20, 21};
_Static_assert(sizeof CASE_ORDER / sizeof CASE_ORDER[0] == sizeof CASES / sizeof CASES[0],
               "CASE_ORDER takes every case once");
#define QUICK_CASES 16

START_TEST(forward_matches_reference) {
    att_data d;
    att_make(&d, &CASES[CASE_ORDER[_i]]);
    att_check_forward(&d);
    att_free(&d);
}
END_TEST

START_TEST(backward_matches_reference) {
    att_data d;
    att_make(&d, &CASES[CASE_ORDER[_i]]);
    att_check_backward(&d);
    att_free(&d);
}
END_TEST

/* The tensor-core kernels (3xTF32, held to the fp32 tolerance) with the instruction emulated
 * (attention.mma = 2), on the cases they take: head dims that are multiples of 8 and more than
 * the decode tile's 8 rows a key head (head dim 128's dK/dV and dQ with warps paired by default;
 * above 128 the forward paired, its K and V staged by turns or, at 160, without the
 * asynchronous copies, and the backward's warps in fours, each with a part of the head dim:
 * dQ's forced at 160, where they are not the default; at 256 with 8 warps, two groups of four
 * a work-group). Half of the first runs stage K and V without the asynchronous copies
 * (attention.async = 0); then the forward's key blocks of 16 and 64 (attention.mma_keys) on a
 * window and on head dim 128, the paired dK/dV and dQ at head dim 64 with a mask and key
 * lengths, the unpaired ones at 128, the paired forward at 64 (float4 reads on its halves), the
 * accumulating products reading one column tile's values at a time (attention.mma_col_batch),
 * the three kernels
 * reading their staged operands one float at a time where they read float4s by default
 * (attention.vec_fragments: the forward at 64 and 128, dQ and dK/dV at 64), the float4
 * kernels at their smallest head dim, 32. Without key lengths dQ comes as a GEMM on the dK/dV
 * kernel's dS by default (with them from the dQ kernel; so too by default with causal masks or
 * windows at head dims up to 64 or with grouped query heads where the key heads take more than
 * one chunk of the workspace, never in these small cases), here with at most N key heads a
 * chunk (attention.dq_gemm = N): BLHD GQA causal one a chunk (chunks that split a batch entry's
 * key heads); on liboclml's own GEMM kernels (gemm.own = 1), which read the banded dS of causal
 * masks and right windows only up to each block's band, BHLD GQA causal one a chunk on tensor
 * cores (emulated), BHLD GQA causal bottom-right two a chunk on FMA tiles split over K, BLHD
 * with a window one a chunk with a last-wave split asked for (which a banded A, its block rows
 * run bottom first, does not take); the dQ kernel without key lengths (attention.dq_gemm = 0)
 * on the two-sided window and the fours at 160; the paired float4 forward at 192, and at 256
 * the paired forward and the fours reading one float at a time (their asynchronous copies and
 * turns of the default at 160 with them). */
static const struct mma_run {
    int c; /* the case */
    const char *tuning;
} MMA_RUNS[] = {
    /* The quick tier's: each kernel family's default on a GPU with tensor cores, at one head
     * dim: unpaired at 64 (float4 fragments), the backward's pairs at 128, the paired forward
     * and the backward's fours at 256, dQ as liboclml's own tensor-core GEMM on dS. */
    {7, "attention.mma=2"},
    {14, "attention.mma=2"},
    {15, "attention.mma=2"},
    {1, "attention.mma=2,attention.dq_gemm=1,gemm.own=1,gemm.mma=2"},
    /* The sweep's: the same defaults at head dims 16, 32 and 192, forced variants. */
    {1, "attention.mma=2"},
    {17, "attention.mma=2"},
    {21, "attention.mma=2"},
    {2, "attention.mma=2,attention.async=0"},
    {3, "attention.mma=2"},
    {4, "attention.mma=2,attention.async=0"},
    {8, "attention.mma=2,attention.async=0"},
    {11, "attention.mma=2"},
    {13, "attention.mma=2,attention.async=0"},
    {16, "attention.mma=2,attention.fwd_pairs=1,attention.dq_pairs=1,attention.async=0"},
    {15, "attention.mma=2,attention.mma_warps=8"},
    {3, "attention.mma=2,attention.mma_keys=16"},
    {13, "attention.mma=2,attention.mma_keys=64"},
    {9, "attention.mma=2,attention.dkdv_pairs=1,attention.dq_pairs=1"},
    {13, "attention.mma=2,attention.dkdv_pairs=0,attention.dq_pairs=0"},
    {9, "attention.mma=2,attention.fwd_pairs=1"},
    {10, "attention.mma=2,attention.mma_col_batch=1"},
    {10, "attention.mma=2,attention.vec_fragments=0"},
    {18, "attention.mma=2,attention.dq_gemm=1"},
    {3, "attention.mma=2,attention.dq_gemm=0"},
    {16, "attention.mma=2,attention.dq_gemm=0,attention.async=0"},
    {19, "attention.mma=2,attention.dq_gemm=2,gemm.own=1,gemm.mma=0,gemm.splitk=3"},
    {20, "attention.mma=2,attention.dq_gemm=1,gemm.own=1,gemm.mma=2,gemm.tail_splits=2,"
         "gemm.wave_warps=4"},
    {15, "attention.mma=2,attention.vec_fragments=0"},
};
#define N_MMA (int)(sizeof MMA_RUNS / sizeof MMA_RUNS[0])
#define QUICK_MMA 4

START_TEST(tensor_core_emulated) {
    test_retune(MMA_RUNS[_i].tuning);
    att_data d;
    att_make(&d, &CASES[MMA_RUNS[_i].c]);
    att_check_forward(&d);
    att_check_backward(&d);
    att_free(&d);
}
END_TEST

/* Under a causal mask the dK/dV kernel leaves out dS's zeros past the band that the dQ GEMM
 * reads (own kernels: FMA tiles of 128 rows, taller than the kernel's 64 staged rows). The
 * workspace first holds the dS of the full attention of the same shape, none of which may reach
 * the causal dQ: top-left, then bottom-right with 20 more keys than rows (BHLD, one query head
 * a key head), then a window in BLHD with grouped heads at head dim 32 (the float4 forward's
 * blocks that every row of a warp sees, one product a batch entry and query head). */
START_TEST(dq_gemm_reads_no_stale_ds) {
    test_retune(
        "attention.mma=2,attention.dq_gemm=1,gemm.own=1,gemm.mma=0,gemm.fma_tile=8:8:16:4:16");
    const att_case full =
        _i < 2 ? (att_case){1, 2, 2, 200, 200 + 20 * _i, 16, BHLD, NONE, -1, -1, 0, NOMASK, 0}
               : (att_case){2, 4, 2, 150, 150, 32, BLHD, NONE, -1, -1, 0, NOMASK, 0};
    att_case causal = full;
    causal.causal = _i == 0 ? TL : _i == 1 ? BR : NONE;
    if (_i == 2) causal.wl = 40, causal.wr = 10;
    att_data d;
    att_make(&d, &full);
    att_check_backward(&d);
    att_free(&d);
    att_make(&d, &causal);
    att_check_backward(&d);
    att_free(&d);
}
END_TEST

/* lse is optional in the forward, and each gradient in the backward (dK and dV come from one
 * kernel: either alone takes the scratch path). */
START_TEST(optional_outputs) {
    att_data d;
    att_make(&d, &CASES[8]);
    double *ro = test_doubles(d.nq), *r[8];
    ref_attention(&d.ra, d.q, d.k, d.v, ro, NULL);
    poison(d.O, d.nq);
    ASSERT_OK(oclml_attention(T, &d.p, d.Q, d.K, d.V, d.O, NULL));
    check_out(&d, "o without lse", d.O, ro, NULL, d.nq);
    att_forward(&d);
    const size_t n[8] = {d.nq, d.nk, d.nk, d.nm, d.nq, d.nk, d.nk, d.nm};
    for (int i = 0; i < 8; i++) r[i] = test_doubles(n[i]);
    ref_attention_backward(&d.ra, d.q, d.k, d.v, d.g, r[0], r[1], r[2], r[3], r[4], r[5], r[6],
                           r[7]);
    oclml_tensor *out[4] = {d.DQ, d.DK, d.DV, d.DM};
    const char *names[4] = {"dq alone", "dk alone", "dv alone", "dmask alone"};
    for (int want = 0; want < 4; want++) {
        for (int i = 0; i < 4; i++) poison(out[i], n[i]);
        ASSERT_OK(oclml_attention_backward(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE, d.G,
                                           want == 0 ? d.DQ : NULL, want == 1 ? d.DK : NULL,
                                           want == 2 ? d.DV : NULL, want == 3 ? d.DM : NULL));
        for (int i = 0; i < 4; i++)
            if (i != want) test_assert_untouched(out[i], n[i]);
        check_out(&d, names[want], out[want], r[want], r[want + 4], n[want]);
    }
    for (int i = 0; i < 8; i++) free(r[i]);
    free(ro);
    att_free(&d);
}
END_TEST

/* Dropout p on the probabilities of case d, in its params and its reference alike (drop must
 * outlive d's use). */
static void att_dropout(att_data *d, oclml_dropout_params *drop, float p, uint64_t seed,
                        uint64_t offset) {
    ASSERT_OK(oclml_dropout_params_init(drop));
    drop->p = p, drop->seed = seed, drop->offset = offset;
    d->p.dropout = drop;
    d->ra.drop_p = p, d->ra.drop_seed = seed, d->ra.drop_offset = offset;
    const size_t n = strlen(d->name);
    snprintf(d->name + n, sizeof d->name - n, " dropout %g", (double)p);
}

/* ---- finite differences of the library's forward ---- */

/* L = sum(o * g) in double from the library's o (g is dO, so dL/dx is the backward's output). */
static double loss_of(att_data *d) {
    poison(d->O, d->nq);
    ASSERT_OK(oclml_attention(T, &d->p, d->Q, d->K, d->V, d->O, NULL));
    float *o = read_all(d->O, d->nq);
    double l = 0;
    for (size_t i = 0; i < d->nq; i++) l += (double)o[i] * d->g[i];
    free(o);
    return l;
}

/* Central differences (h = 1e-2 on values of order 1, in float on the device) of 6 elements
 * each of q, k, v and the mask against the backward's gradients (of order 1e-2 .. 1e-1). fp32
 * rounding of the loss over 2h and the h^2 term leave up to 1e-4 absolute (PoCL, 10 seeds); a
 * wrong gradient is off by a good part of its own size. */
static void fd_case(const att_case *c, float drop_p) {
    att_data d;
    att_make(&d, c);
    oclml_dropout_params drop;
    if (drop_p > 0) att_dropout(&d, &drop, drop_p, 0xfeedull, 5);
    att_backward(&d);
    float *host[4] = {d.q, d.k, d.v, d.m};
    oclml_tensor *in[4] = {d.Q, d.K, d.V, d.M}, *grad[4] = {d.DQ, d.DK, d.DV, d.DM};
    const size_t n[4] = {d.nq, d.nk, d.nk, d.nm};
    const char *names[4] = {"q", "k", "v", "mask"};
    const float h = 1e-2f;
    for (int t = 0; t < (d.M ? 4 : 3); t++) {
        float *g = read_all(grad[t], n[t]), *r = test_floats(6);
        test_random(r, 6, 0, 1);
        for (int e = 0; e < 6; e++) {
            size_t i = (size_t)(r[e] * (float)n[t]) % n[t];
            if (t == 3)
                while (isinf(d.m[i])) i = (i + 1) % n[t]; /* -inf +- h is -inf: nothing to see */
            const float keep = host[t][i];
            host[t][i] = keep + h;
            ASSERT_OK(oclml_tensor_write(in[t], host[t], n[t]));
            const double lp = loss_of(&d);
            host[t][i] = keep - h;
            ASSERT_OK(oclml_tensor_write(in[t], host[t], n[t]));
            const double lm = loss_of(&d);
            host[t][i] = keep;
            ASSERT_OK(oclml_tensor_write(in[t], host[t], n[t]));
            /* The step as stored in float. */
            const double fd = (lp - lm) / ((double)(keep + h) - (double)(keep - h));
            ck_assert_msg(fabs(fd - g[i]) <= 3e-4 + 1e-2 * fabs(fd),
                          "%s: d%s[%zu] = %.6g, central difference %.6g (seed %u)", d.name,
                          names[t], i, (double)g[i], fd, test_seed());
        }
        free(g);
        free(r);
    }
    att_free(&d);
}

START_TEST(backward_by_finite_differences) {
    /* GQA with a broadcast mask and key lengths (BLHD); causal bottom-right with a window. Loop
     * 2, 3: the same on the (emulated) tensor-core kernels; 4, 5: with the dK/dV and dQ warps
     * paired. */
    if (_i >= 2)
        test_retune(_i >= 4 ? "attention.mma=2,attention.dkdv_pairs=1,attention.dq_pairs=1"
                            : "attention.mma=2");
    const att_case c0 = {2, 4, 2, 9, 13, 64, BLHD, NONE, -1, -1, 0, MB1, 1};
    const att_case c1 = {1, 4, 2, 9, 13, 16, BHLD, BR, 4, -1, 0.5f, NOMASK, 0};
    fd_case(_i % 2 ? &c1 : &c0, 0.0f);
}
END_TEST

/* ---- dropout on the probabilities ---- */

/* Forward and backward against the reference with the host's mask: GQA causal at head dim 16
 * (BHLD) on the FMA kernels; on the emulated tensor cores head dim 64 BLHD with a mask broadcast
 * over the batch (dmask) and key lengths (the float4 kernels, dQ from its own kernel), the same
 * GQA causal case at 16 with dQ as a GEMM on the dK/dV kernel's dS, head dim 128 (the backward's
 * warps paired) and 256 (the paired forward, the backward's fours). */
static const struct {
    int c;
    const char *tuning;
} DROPOUT_RUNS[] = {{1, "attention.mma=0"},
                    {8, "attention.mma=2"},
                    {1, "attention.mma=2,attention.dq_gemm=1,gemm.own=1,gemm.mma=2"},
                    {14, "attention.mma=2"},
                    {15, "attention.mma=2"}};

START_TEST(dropout_matches_reference) {
    test_retune(DROPOUT_RUNS[_i].tuning);
    att_data d;
    att_make(&d, &CASES[DROPOUT_RUNS[_i].c]);
    oclml_dropout_params drop;
    att_dropout(&d, &drop, _i ? 0.5f : 0.3f, 1234567ull + (uint64_t)_i, (uint64_t)_i * 3);
    att_check_forward(&d);
    att_check_backward(&d);
    att_free(&d);
}
END_TEST

/* The gradients by central differences of the library's forward, the mask fixed by its
 * params: GQA, a broadcast mask and key lengths (BLHD); causal bottom-right with a window. */
START_TEST(dropout_by_finite_differences) {
    const att_case c0 = {2, 4, 2, 9, 13, 64, BLHD, NONE, -1, -1, 0, MB1, 1};
    const att_case c1 = {1, 4, 2, 9, 13, 16, BHLD, BR, 4, -1, 0.5f, NOMASK, 0};
    fd_case(_i ? &c1 : &c0, 0.25f);
}
END_TEST

/* On the (emulated) tensor cores: p = 0 is no dropout bit for bit (o, lse, dq, dk, dv); the same
 * params twice give the same bits, another offset other bits; params of the size before the
 * dropout field run without it; the plan is the undropped one; p outside [0, 1] is refused
 * before anything is written. */
START_TEST(dropout_edges) {
    test_retune("attention.mma=2");
    const att_case c = {1, 2, 1, 33, 40, 16, BHLD, TL, -1, -1, 0, NOMASK, 0};
    att_data d;
    att_make(&d, &c);
    oclml_tensor *out[5] = {d.O, d.LSE, d.DQ, d.DK, d.DV};
    const size_t n[5] = {d.nq, d.nl, d.nq, d.nk, d.nk};
    float *plain[5], *got[5];
    att_backward(&d);
    for (int i = 0; i < 5; i++) plain[i] = read_all(out[i], n[i]);
    oclml_dropout_params drop;
    att_dropout(&d, &drop, 0.0f, 9, 0);
    att_backward(&d);
    for (int i = 0; i < 5; i++) {
        got[i] = read_all(out[i], n[i]);
        ck_assert_msg(memcmp(plain[i], got[i], n[i] * sizeof(float)) == 0,
                      "p = 0: output %d differs from no dropout", i);
        free(got[i]);
    }
    /* Dropout changes no kernel choice: the plan is the undropped one (the tensor cores where
     * the device's local memory holds their tiles; PoCL sizes it from the CPU's caches). */
    char plan[512], undropped_plan[512];
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, undropped_plan, sizeof undropped_plan));
    drop.p = 0.4f;
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, plan, sizeof plan));
    ck_assert_msg(!strcmp(plan, undropped_plan), "dropout changed the plan: %s, undropped %s", plan,
                  undropped_plan);
    for (int run = 0; run < 3; run++) {
        drop.offset = run == 2 ? 1 : 0;
        att_backward(&d);
        for (int i = 0; i < 5; i++) {
            got[i] = read_all(out[i], n[i]);
            const bool same = memcmp(plain[i], got[i], n[i] * sizeof(float)) == 0;
            if (run == 1)
                ck_assert_msg(same, "output %d differs between two runs with the same params", i);
            if (run == 2 && i != 1)
                ck_assert_msg(!same, "output %d the same under another offset", i);
            free(plain[i]);
            plain[i] = got[i];
        }
    }
    /* The last run's o (offset 1) against the reference; lse the undropped one. */
    d.ra.drop_p = drop.p, d.ra.drop_offset = drop.offset;
    double *ro = test_doubles(d.nq), *rl = test_doubles(d.nl);
    ref_attention(&d.ra, d.q, d.k, d.v, ro, rl);
    check_lse(&d, rl);
    check_out(&d, "o", d.O, ro, NULL, d.nq);
    free(ro);
    free(rl);
    /* Params of the size before the dropout field: the field is not read (here it points at
     * p = 0.4), o is the undropped one bit for bit. */
    oclml_attention_params old = d.p, none = d.p;
    old.struct_size = offsetof(oclml_attention_params, dropout);
    none.dropout = NULL;
    ASSERT_OK(oclml_attention(T, &none, d.Q, d.K, d.V, d.O, d.LSE));
    float *undropped = read_all(d.O, d.nq);
    poison(d.O, d.nq);
    ASSERT_OK(oclml_attention(T, &old, d.Q, d.K, d.V, d.O, d.LSE));
    float *got_old = read_all(d.O, d.nq);
    ck_assert_msg(memcmp(undropped, got_old, d.nq * sizeof(float)) == 0,
                  "params of the old size read the dropout field");
    free(undropped);
    free(got_old);
    drop.p = 1.5f;
    poison(d.O, d.nq);
    ASSERT_STATUS(oclml_attention(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE), OCLML_ERR_INVALID_ARGUMENT);
    test_assert_untouched(d.O, d.nq);
    drop.p = NAN;
    poison(d.DQ, d.nq);
    ASSERT_STATUS(
        oclml_attention_backward(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE, d.G, d.DQ, NULL, NULL, NULL),
        OCLML_ERR_INVALID_ARGUMENT);
    test_assert_untouched(d.DQ, d.nq);
    for (int i = 0; i < 5; i++) free(plain[i]);
    att_free(&d);
}
END_TEST

/* ---- determinism ---- */

/* The backward twice: the same bits (every gradient element summed by one work-item in a fixed
 * order, grouped heads included), on the FMA and the (emulated) tensor-core kernels. */
START_TEST(backward_repeatable_bit_for_bit) {
    /* 1: the tensor-core dK/dV and dQ; 2: with their warps paired. */
    if (_i)
        test_retune(_i == 2 ? "attention.mma=2,attention.dkdv_pairs=1,attention.dq_pairs=1"
                            : "attention.mma=2");
    const att_case c = {2, 4, 2, 65, 65, 64, BLHD, NONE, -1, -1, 0, MB1, 1};
    att_data d;
    att_make(&d, &c);
    float *first[4], *second[4];
    oclml_tensor *out[4] = {d.DQ, d.DK, d.DV, d.DM};
    const size_t n[4] = {d.nq, d.nk, d.nk, d.nm};
    const char *names[4] = {"dq", "dk", "dv", "dmask"};
    for (int run = 0; run < 2; run++) {
        att_backward(&d);
        for (int i = 0; i < 4; i++) (run ? second : first)[i] = read_all(out[i], n[i]);
    }
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(memcmp(first[i], second[i], n[i] * sizeof(float)) == 0,
                      "%s differs between two runs (seed %u)", names[i], test_seed());
        free(first[i]);
        free(second[i]);
    }
    att_free(&d);
}
END_TEST

/* ---- rows that see no key ---- */

/* Every row of (b, h, i) for which row_empty holds: o exactly 0, lse -inf, dq exactly 0; no NaN
 * anywhere; dk and dv exactly 0 for keys no row sees; everything else against the reference. */
static void check_empty_rows(att_data *d, int (*row_empty)(const att_data *, size_t, size_t)) {
    att_check_forward(d);
    att_check_backward(d);
    float *o = read_all(d->O, d->nq), *l = read_all(d->LSE, d->nl), *dq = read_all(d->DQ, d->nq),
          *dk = read_all(d->DK, d->nk), *dv = read_all(d->DV, d->nk);
    float *dm = d->DM ? read_all(d->DM, d->nm) : NULL;
    const att_case *c = &d->c;
    size_t empty = 0;
    for (size_t b = 0; b < c->B; b++)
        for (size_t h = 0; h < c->H; h++)
            for (size_t i = 0; i < c->Lq; i++) {
                const size_t r = (b * c->H + h) * c->Lq + i,
                             at = (c->layout == BLHD ? (b * c->Lq + i) * c->H + h : r) * c->D;
                if (!row_empty(d, b, i)) continue;
                empty++;
                ck_assert_msg(l[r] == -INFINITY, "%s: lse[%zu, %zu, %zu] = %g, want -inf", d->name,
                              b, h, i, (double)l[r]);
                for (size_t e = 0; e < c->D; e++)
                    ck_assert_msg(o[at + e] == 0 && dq[at + e] == 0,
                                  "%s: row (%zu, %zu, %zu) o %g dq %g, want 0", d->name, b, h, i,
                                  (double)o[at + e], (double)dq[at + e]);
            }
    ck_assert_msg(empty > 0, "%s: no empty row (test setup)", d->name);
    for (size_t b = 0; b < c->B; b++)
        for (size_t j = 0; j < c->Lk; j++) {
            int seen = 0;
            for (size_t i = 0; i < c->Lq; i++) seen |= ref_attention_visible(&d->ra, b, i, j);
            for (size_t h = 0; h < c->Hkv && !seen; h++) {
                const size_t at = (c->layout == BLHD ? (b * c->Lk + j) * c->Hkv + h
                                                     : (b * c->Hkv + h) * c->Lk + j) *
                                  c->D;
                for (size_t e = 0; e < c->D; e++)
                    ck_assert_msg(dk[at + e] == 0 && dv[at + e] == 0,
                                  "%s: unseen key (%zu, %zu, %zu) dk %g dv %g, want 0", d->name, b,
                                  h, j, (double)dk[at + e], (double)dv[at + e]);
            }
        }
    float *all[] = {o, l, dq, dk, dv, dm};
    const size_t n[] = {d->nq, d->nl, d->nq, d->nk, d->nk, d->nm};
    for (int t = 0; t < 6; t++) {
        for (size_t e = 0; all[t] && e < n[t]; e++)
            ck_assert_msg(!isnan(all[t][e]), "%s: output %d [%zu] is NaN", d->name, t, e);
        free(all[t]);
    }
}

/* Whether any key is visible to row i of batch entry b (by position and key length). */
static int no_visible_key(const att_data *d, size_t b, size_t i) {
    for (size_t j = 0; j < d->c.Lk; j++)
        if (ref_attention_visible(&d->ra, b, i, j)) return 0;
    return 1;
}

/* Also the rows whose visible keys are all -inf in the (2-D) mask. */
static int no_visible_unmasked_key(const att_data *d, size_t b, size_t i) {
    for (size_t j = 0; j < d->c.Lk; j++)
        if (ref_attention_visible(&d->ra, b, i, j) && d->m[i * d->c.Lk + j] != -INFINITY) return 0;
    return 1;
}

/* Each with the FMA forward and the (emulated) tensor-core forward. */
START_TEST(rows_that_see_nothing) {
    if (_i) test_retune("attention.mma=2");
    att_data d;
    /* Bottom-right causal with Lq > Lk: rows 0 .. Lq - Lk - 1 see no key (GQA). */
    const att_case br = {2, 4, 2, 70, 5, 16, BHLD, BR, -1, -1, 0, NOMASK, 0};
    att_make(&d, &br);
    check_empty_rows(&d, no_visible_key);
    att_free(&d);
    /* A window of just the diagonal (causal none) with Lq > Lk: rows i >= Lk see nothing. */
    const att_case win = {1, 2, 1, 40, 33, 16, BHLD, NONE, 0, 0, 0, NOMASK, 0};
    att_make(&d, &win);
    check_empty_rows(&d, no_visible_key);
    att_free(&d);
    /* Key lengths 0, NaN, -2 and past Lk (the last entry sees every key), and a 2-D mask with
     * rows 3 and 40 all -inf. */
    const att_case kl = {4, 2, 1, 65, 65, 64, BLHD, NONE, -1, -1, 0, M2D, 1};
    att_make(&d, &kl);
    const float lens[4] = {0, NAN, -2, 1000};
    memcpy(d.kl, lens, sizeof lens);
    for (size_t j = 0; j < 65; j++) d.m[3 * 65 + j] = d.m[40 * 65 + j] = -INFINITY;
    att_upload(&d);
    check_empty_rows(&d, no_visible_unmasked_key);
    att_free(&d);
}
END_TEST

/* A row that sees no key stays 0 (o and dQ) beside an infinite V and K at a key another row of
 * its block sees (0 x inf would be NaN): FMA and (emulated) tensor-core kernels, dQ from the dQ
 * kernel (attention.dq_gemm = 0) and as a GEMM on dS (every row's dS against the infinite key). */
START_TEST(empty_rows_stay_zero_beside_infinity) {
    if (_i) test_retune(_i == 1 ? "attention.mma=2,attention.dq_gemm=0" : "attention.mma=2");
    /* A window of just the diagonal with Lq > Lk: row i < 33 sees key i, rows i >= 33 nothing. */
    const att_case c = {1, 1, 1, 40, 33, 16, BHLD, NONE, 0, 0, 0, NOMASK, 0};
    att_data d;
    att_make(&d, &c);
    d.v[20 * 16] = d.k[10 * 16 + 1] = INFINITY; /* rows 20 and 10 see them */
    att_upload(&d);
    att_forward(&d);
    ASSERT_OK(
        oclml_attention_backward(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE, d.G, d.DQ, d.DK, d.DV, NULL));
    float *o = read_all(d.O, d.nq), *dq = read_all(d.DQ, d.nq);
    /* inf on FMAs; NaN on the tensor cores (the 3xTF32 split of inf is inf + NaN). */
    ck_assert_msg(!isfinite(o[20 * 16]), "o[20, 0] = %g, want inf or NaN", (double)o[20 * 16]);
    for (size_t e = 33 * 16; e < 40 * 16; e++)
        ck_assert_msg(o[e] == 0 && dq[e] == 0, "empty row %zu: o %g dq %g, want 0", e / 16,
                      (double)o[e], (double)dq[e]);
    free(o);
    free(dq);
    att_free(&d);
}
END_TEST

/* ---- NaN policy ---- */

/* A NaN in one element of q row (b 1, h 2, i 5): that row of o and its lse are NaN, every other
 * row finite: with one split, with the keys split in three (the merge), on the tensor-core
 * forward. */
static const char *const FWD_TUNING[3] = {NULL, "attention.splits=3", "attention.mma=2"};

START_TEST(nan_in_query_row) {
    const att_case c = {2, 4, 2, 33, 150, 16, BHLD, NONE, -1, -1, 0, NOMASK, 0}; /* 3 key blocks */
    if (_i) test_retune(FWD_TUNING[_i]);
    att_data d;
    att_make(&d, &c);
    const size_t bad = (1 * 4 + 2) * 33 + 5;
    d.q[bad * 16 + 7] = NAN;
    att_upload(&d);
    att_forward(&d);
    float *o = read_all(d.O, d.nq), *l = read_all(d.LSE, d.nl);
    for (size_t r = 0; r < d.nl; r++) {
        ck_assert_msg(r == bad ? isnan(l[r]) : isfinite(l[r]), "%s: lse[%zu] = %g (NaN row %zu)",
                      d.name, r, (double)l[r], bad);
        for (size_t e = 0; e < 16; e++)
            ck_assert_msg(r == bad ? isnan(o[r * 16 + e]) : isfinite(o[r * 16 + e]),
                          "%s: o row %zu [%zu] = %g (NaN row %zu)", d.name, r, e,
                          (double)o[r * 16 + e], bad);
    }
    free(o);
    free(l);
    att_free(&d);
}
END_TEST

/* Scores of order 1e3 whose softmax is one-hot: query i and key i % Lk share a spike of 40 in
 * head-dim column i % D (with Lk <= D, one key a row), every other entry in [-1, 1), so each row
 * scores its key near 1600 and the others within about 100: P is exactly 1 and 0 in fp32, O =
 * V of the row's key, and exactly dV_j = the sum of dO over the rows of key j, dQ = dK = 0 (within
 * the rounding of dP - delta, which the reference's scales bound). A backward whose scores
 * differ from the forward's in their last bits (2^-21 of 1600 is 8e-4) gives P = exp(S - lse)
 * off 1 by that much, and dV with it (PyTorch's fp32 SDPA stays within 1e-8). Loop: head dim 16
 * and 64 on the default kernels (tensor cores where the device has them), then the tensor-core
 * kernels emulated, then with their warps paired, then head dims 160 and 192 (swept). */
START_TEST(large_scores_backward) {
    static const char *const tuning[4] = {
        "", "attention.mma=2", "attention.mma=2,attention.dkdv_pairs=1,attention.dq_pairs=1",
        "attention.mma=2"};
    test_retune(tuning[_i / 2]);
    /* Last: head dim 160 and 192 on the emulated kernels' defaults there, the forward's warps
     * paired on halves of the head dim and the backward's in fours. */
    const size_t D = _i >= 6 ? (_i % 2 ? 192 : 160) : _i % 2 ? 64 : 16;
    const att_case c = {1, 2, 2, 2 * D + 1, D, D, BHLD, NONE, -1, -1, 1.0f, NOMASK, 0};
    att_data d;
    att_make(&d, &c);
    const size_t Lq = c.Lq, Lk = c.Lk;
    test_random(d.q, d.nq, -1, 1);
    test_random(d.k, d.nk, -1, 1);
    for (size_t h = 0; h < 2; h++) {
        for (size_t i = 0; i < Lq; i++) d.q[(h * Lq + i) * D + i % Lk] = 40.0f;
        for (size_t j = 0; j < Lk; j++) d.k[(h * Lk + j) * D + j] = 40.0f;
    }
    att_upload(&d);
    snprintf(d.name + strlen(d.name), sizeof d.name - strlen(d.name),
             " one-hot scores near 1600%s%s", tuning[_i / 2][0] ? ", " : "", tuning[_i / 2]);
    att_check_backward(&d);
    att_free(&d);
}
END_TEST

/* A NaN in dO reaches dK through every key its row sees, also where that row's probability
 * underflowed to 0 (dS = 0 (dP - delta) is NaN, as in PyTorch), and never through keys the row
 * does not see (the mask's dS is 0 whatever dP holds). Query row 3 of 16 (causal top-left: keys
 * 0..3; rows 4.. see the later keys) scores key j at 100 j, so keys 0 and 1 get P = 0 exactly
 * (key 2 a subnormal or 0) and key 3 all of it. 16 rows a key head take the tensor cores where
 * tuned so (8 or fewer take the decode tile). Loop: FMA kernels, tensor cores (emulated), warps
 * paired. */
START_TEST(nan_in_do_reaches_underflowed_keys) {
    const att_case c = {1, 1, 1, 16, 16, 16, BHLD, TL, -1, -1, 1.0f, NOMASK, 0};
    static const char *const tuning[3] = {
        "attention.mma=0", "attention.mma=2,attention.dkdv_pairs=0",
        "attention.mma=2,attention.dkdv_pairs=1,attention.dq_pairs=1"};
    test_retune(tuning[_i]);
    att_data d;
    att_make(&d, &c);
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    char text[256];
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, text, sizeof text));
    if (_i && info.max_work_group_size >= 128) /* the kernels meant, not a fallback */
        ck_assert_msg(strstr(text, "backward: 3xTF32 tensor cores (emulated)") &&
                          (_i == 1 || strstr(text, "paired")),
                      "%s: %s", tuning[_i], text);
    for (size_t e = 0; e < 16; e++) d.q[3 * 16 + e] = e == 0 ? 100.0f : 0.0f;
    for (size_t j = 0; j < 16; j++) d.k[j * 16] = (float)j;
    att_upload(&d);
    att_forward(&d);
    d.g[3 * 16 + 5] = NAN; /* dO of row 3, after the forward */
    ASSERT_OK(oclml_tensor_write(d.G, d.g, d.nq));
    poison(d.DK, d.nk);
    ASSERT_OK(
        oclml_attention_backward(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE, d.G, NULL, d.DK, d.DV, NULL));
    float *dk = read_all(d.DK, d.nk);
    for (size_t j = 0; j < 16; j++)
        for (size_t e = 0; e < 16; e++)
            ck_assert_msg(j < 4 ? isnan(dk[j * 16 + e]) : isfinite(dk[j * 16 + e]),
                          "%s (%s): dk[%zu][%zu] = %g, want %s", d.name, tuning[_i], j, e,
                          (double)dk[j * 16 + e], j < 4 ? "NaN" : "finite");
    free(dk);
    att_free(&d);
}
END_TEST

/* NaN in k, v and the mask past each batch entry's key length (key lengths 37 and 50, not
 * multiples of the key block, so padding shares a block with seen keys): no output may see it
 * (padding is never read). Loop 0..2: the forward with one split, three, on tensor cores; 3, 4:
 * the backward on FMAs and on tensor cores (from the forward of finite padding, so that it is
 * tested alone), dk and dv exactly 0 for padding keys. Both cases BLHD: [B, Lk, Hkv, D]. */
START_TEST(nan_padding_never_read) {
    const att_case c[2] = {{3, 4, 2, 33, 70, 64, BLHD, TL, -1, -1, 0, MBH, 1},
                           {2, 2, 1, 7, 70, 128, BLHD, NONE, -1, -1, 0, NOMASK, 1}};
    if (_i == 1 || _i == 2) test_retune(FWD_TUNING[_i]);
    if (_i == 4) test_retune("attention.mma=2");
    for (int k = 0; k < 2; k++) {
        att_data d;
        att_make(&d, &c[k]);
        const size_t B = d.c.B, Hkv = d.c.Hkv, Lk = d.c.Lk, D = d.c.D;
        for (size_t b = 0; b < B; b++) d.kl[b] = b % 3 == 0 ? 37 : 50;
        att_upload(&d);
        if (_i >= 3) att_forward(&d); /* o and lse of finite padding */
        for (size_t b = 0; b < B; b++)
            for (size_t j = (size_t)d.kl[b]; j < Lk; j++) {
                for (size_t e = 0; e < Hkv * D; e++)
                    d.k[(b * Lk + j) * Hkv * D + e] = d.v[(b * Lk + j) * Hkv * D + e] = NAN;
                for (size_t h = 0; d.m && h < d.c.H; h++)
                    for (size_t i = 0; i < d.c.Lq; i++)
                        d.m[ref_attention_mask_at(&d.ra, b, h, i) + j] = NAN;
            }
        att_upload(&d);
        if (_i < 3) {
            att_check_forward(&d);
            att_free(&d);
            continue;
        }
        poison(d.DQ, d.nq);
        poison(d.DK, d.nk);
        poison(d.DV, d.nk);
        if (d.DM) poison(d.DM, d.nm);
        ASSERT_OK(oclml_attention_backward(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE, d.G, d.DQ, d.DK,
                                           d.DV, d.DM));
        double *r[8];
        const size_t n[8] = {d.nq, d.nk, d.nk, d.nm, d.nq, d.nk, d.nk, d.nm};
        for (int i = 0; i < 8; i++) r[i] = test_doubles(n[i]);
        ref_attention_backward(&d.ra, d.q, d.k, d.v, d.g, r[0], r[1], r[2], d.M ? r[3] : NULL, r[4],
                               r[5], r[6], d.M ? r[7] : NULL);
        float *dk = read_all(d.DK, d.nk), *dv = read_all(d.DV, d.nk);
        for (size_t b = 0; b < B; b++)
            for (size_t j = (size_t)d.kl[b]; j < Lk; j++)
                for (size_t e = 0; e < Hkv * D; e++) {
                    const size_t at = (b * Lk + j) * Hkv * D + e;
                    ck_assert_msg(dk[at] == 0 && dv[at] == 0,
                                  "%s: padding key %zu of batch %zu: dk %g dv %g, want 0", d.name,
                                  j, b, (double)dk[at], (double)dv[at]);
                }
        check_out(&d, "dq", d.DQ, r[0], r[4], d.nq);
        check_out(&d, "dk", d.DK, r[1], r[5], d.nk);
        check_out(&d, "dv", d.DV, r[2], r[6], d.nk);
        if (d.M) check_out(&d, "dmask", d.DM, r[3], r[7], d.nm);
        for (int i = 0; i < 8; i++) free(r[i]);
        free(dk);
        free(dv);
        att_free(&d);
    }
}
END_TEST

/* ---- extremes ---- */

/* Scores up to about 2e4 (q, k in [-40, 40), scale 1) and a mask of +-1e4: exp must not
 * overflow (every output finite). fp32 scores that large are only good to ulp(1e4) ~ 1e-3, so
 * the comparison is loose: it is there to catch inf or NaN from an unshifted exp. */
START_TEST(large_scores_do_not_overflow) {
    const att_case c = {2, 2, 1, 33, 40, 16, BHLD, NONE, -1, -1, 1.0f, M2D, 0};
    att_data d;
    att_make(&d, &c);
    test_random(d.q, d.nq, -40, 40);
    test_random(d.k, d.nk, -40, 40);
    for (size_t i = 0; i < d.nm; i++)
        if (isfinite(d.m[i])) d.m[i] *= 5e3f;
    att_upload(&d);
    att_forward(&d);
    double *ro = test_doubles(d.nq), *rl = test_doubles(d.nl);
    ref_attention(&d.ra, d.q, d.k, d.v, ro, rl);
    float *o = read_all(d.O, d.nq), *l = read_all(d.LSE, d.nl);
    for (size_t i = 0; i < d.nq; i++) ck_assert_msg(isfinite(o[i]), "o[%zu] = %g", i, (double)o[i]);
    for (size_t i = 0; i < d.nl; i++)
        ck_assert_msg(isfinite(l[i]), "lse[%zu] = %g", i, (double)l[i]);
    test_assert_close("large scores o", o, ro, d.nq, 2e-2);
    test_assert_close("large scores lse", l, rl, d.nl, 1e-5);
    free(o);
    free(l);
    free(ro);
    free(rl);
    att_free(&d);
}
END_TEST

/* Windows reaching past every key, up to INT32_MAX, are no window (no 32-bit overflow in the
 * kernels' bounds): against the reference, forward and backward, FMA and (emulated) tensor-core
 * kernels; bottom-right causal with more queries than keys (negative diagonals). */
START_TEST(huge_windows_are_open) {
    if (_i >= 2) test_retune("attention.mma=2");
    const att_case cases[2] = {{1, 2, 1, 70, 33, 16, BHLD, NONE, -1, INT32_MAX, 0, NOMASK, 0},
                               {1, 2, 2, 70, 33, 16, BHLD, BR, INT32_MAX, -1, 0, M2D, 0}};
    att_data d;
    att_make(&d, &cases[_i % 2]);
    att_check_forward(&d);
    att_check_backward(&d);
    att_free(&d);
}
END_TEST

/* A tuned FMA tile whose dK/dV key block (2 x 3 = 6 keys here) is not a multiple of its
 * work-items along rows (8) would leave keys without gradients: refused, nothing touched. */
START_TEST(tuned_tile_that_skips_keys_is_refused) {
    /* 16 work-items; the forward takes it; FMA kernels on every device */
    test_retune("attention.mma=0,attention.tile=2:8:1:3");
    const att_case c = {1, 2, 2, 33, 65, 16, BHLD, NONE, -1, -1, 0, NOMASK, 0};
    att_data d;
    att_make(&d, &c);
    att_forward(&d);
    oclml_tensor *out[3] = {d.DQ, d.DK, d.DV};
    const size_t n[3] = {d.nq, d.nk, d.nk};
    for (int i = 0; i < 3; i++) poison(out[i], n[i]);
    ck_assert_int_eq(
        oclml_attention_backward(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE, d.G, d.DQ, d.DK, d.DV, NULL),
        OCLML_ERR_UNSUPPORTED);
    for (int i = 0; i < 3; i++) test_assert_untouched(out[i], n[i]);
    att_free(&d);
}
END_TEST

/* ---- decoding ---- */

static const att_case DECODE[] = {
    {1, 4, 2, 1, 300, 16, BHLD, NONE, -1, -1, 0, NOMASK, 0}, /* GQA: two rows per key head */
    {2, 2, 2, 1, 300, 16, BHLD, BR, -1, -1, 0, NOMASK, 0},
    {2, 4, 1, 1, 300, 128, BLHD, NONE, -1, -1, 0, NOMASK, 1}, /* MQA with key lengths */
    {2, 2, 1, 1, 301, 64, BLHD, BR, 40, -1, 0, MBH, 1},       /* window, mask, key lengths */
};

/* Lq = 1 against 300 keys: forward and backward against the reference, with the planner's
 * splits (several on GPUs) and with attention.splits = 3 forced. */
START_TEST(decode_matches_reference) {
    if (_i) test_retune("attention.splits=3");
    for (size_t k = 0; k < sizeof DECODE / sizeof DECODE[0]; k++) {
        att_data d;
        att_make(&d, &DECODE[k]);
        att_check_forward(&d);
        att_check_backward(&d);
        att_free(&d);
    }
}
END_TEST

/* Forced splits on small cases: every split seeing keys (200 and 150 keys: 4 and 3 blocks),
 * splits that cover no visible key (a window, bottom-right rows that see nothing) must merge to
 * the unsplit result; splits past the key blocks clamp; the tensor-core forward (emulated: more
 * than 8 rows a key head in every case) writes split parts too. */
START_TEST(forced_splits_small) {
    const att_case c[4] = {{1, 2, 1, 7, 200, 16, BHLD, NONE, -1, -1, 0, NOMASK, 0},
                           {1, 4, 2, 5, 150, 16, BHLD, BR, -1, -1, 0, NOMASK, 0},
                           {1, 2, 2, 9, 200, 16, BHLD, NONE, 3, 3, 0, NOMASK, 0},
                           {2, 4, 2, 70, 33, 16, BHLD, BR, -1, -1, 0, NOMASK, 0}};
    const char *tune[3] = {"attention.splits=3", "attention.splits=50",
                           "attention.mma=2,attention.splits=3"};
    test_retune(tune[_i]);
    for (int k = 0; k < 4; k++) {
        att_data d;
        att_make(&d, &c[k]);
        att_check_forward(&d);
        att_free(&d);
    }
}
END_TEST

/* oclml_attention_plan names the path each call takes: by default FMA tiles, or the real tensor
 * cores on a device that has them; the emulated tensor cores where forced (up to head dim 128,
 * the dK/dV warps paired above 64; at 256 the forward's in pairs and the backward's in fours
 * sharing the head dim); the decode tile's key split where forced. A missing buffer or a
 * bad shape is an error that writes nothing. */
START_TEST(plan_names_the_path) {
    const att_case c64 = {1, 4, 2, 33, 40, 64, BHLD, TL, -1, -1, 0, NOMASK, 0};
    att_data d;
    att_make(&d, &c64);
    char text[320];
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, text, sizeof text));
    /* By default: FMA tiles, or the real tensor cores where the device has them (never the
     * emulation). */
    ck_assert_msg((strstr(text, "forward: FMA tiles") && strstr(text, "backward: FMA tiles")) ||
                      (strstr(text, "forward: 3xTF32 tensor cores,") &&
                       strstr(text, "backward: 3xTF32 tensor cores,")),
                  "default plan: %s", text);
    att_free(&d); /* a new context below: no tensor may outlive the old one */
    test_retune("attention.mma=2");
    oclml_device_info info;
    ASSERT_OK(oclml_ctx_device_info(T, &info));
    /* The tensor-core tile takes 128 work-items; smaller work-groups keep the FMA tiles. */
    const bool fits = info.max_work_group_size >= 128;
    att_make(&d, &c64);
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, text, sizeof text));
    ck_assert_msg(fits ? strstr(text, "forward: 3xTF32 tensor cores (emulated)") &&
                             strstr(text, "backward: 3xTF32 tensor cores (emulated)")
                       : strstr(text, "forward: FMA tiles") && strstr(text, "backward: FMA tiles"),
                  "attention.mma=2 at head dim 64, %zu work-items: %s", info.max_work_group_size,
                  text);
    att_free(&d);
    const att_case c128 = {1, 2, 2, 65, 65, 128, BHLD, NONE, -1, -1, 0, NOMASK, 0};
    att_make(&d, &c128);
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, text, sizeof text));
    ck_assert_msg(fits ? strstr(text, "forward: 3xTF32") &&
                             strstr(text, "backward: 3xTF32 tensor cores (emulated), dK/dV per 32 "
                                          "keys (warps paired on 16 keys)")
                       : strstr(text, "forward: FMA tiles") && strstr(text, "backward: FMA tiles"),
                  "head dim 128: tensor cores where they fit, dK/dV warps paired: %s", text);
    att_free(&d);
    /* At head dim 256 the warps share the head dim: the forward's in pairs, the backward's in
     * fours. The emulation's exchange buffers take the forward's 8 warps past 48 KiB of local
     * memory (NVIDIA's), not the backward's 4. */
    const att_case c256 = {1, 2, 2, 33, 40, 256, BHLD, NONE, -1, -1, 0, NOMASK, 0};
    att_make(&d, &c256);
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, text, sizeof text));
    /* The emulated forward needs about 50 KiB, the backward 42: below 64 and 48 KiB either
     * engine may run. */
    const bool fwd_paired = strstr(text, "forward: 3xTF32 tensor cores (emulated), ") &&
                            strstr(text, "(warps paired on 16 rows), K and V copied ahead in "
                                         "turn, read as float4s"),
               fwd_fma = strstr(text, "forward: FMA tiles") != NULL,
               bwd_fours = strstr(text, "backward: 3xTF32 tensor cores (emulated), dK/dV per 16 "
                                        "keys (four warps on 16 keys), Q and dO read as float4s, "
                                        "dQ = dS K by GEMM") != NULL,
               bwd_fma = strstr(text, "backward: FMA tiles") != NULL;
    ck_assert_msg(!fits                               ? fwd_fma
                  : info.local_mem_bytes >= 64 * 1024 ? fwd_paired
                                                      : fwd_paired || fwd_fma,
                  "head dim 256, the forward paired where it fits: %s", text);
    ck_assert_msg(!fits                               ? bwd_fma
                  : info.local_mem_bytes >= 48 * 1024 ? bwd_fours
                                                      : bwd_fours || bwd_fma,
                  "head dim 256, the backward's warps in fours: %s", text);
    att_free(&d);
    /* At 192 the dQ kernel's fours lose to the FMA tiles (lib/ops/attention_plan.c): dQ comes
     * as a GEMM on the dK/dV kernel's dS, or (attention.dq_gemm = 0) from the FMA tiles, the
     * backward's kernels then on different engines. */
    const att_case c192 = {1, 2, 2, 33, 40, 192, BHLD, NONE, -1, -1, 0, NOMASK, 0};
    att_make(&d, &c192);
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, text, sizeof text));
    ck_assert_msg(fits ? strstr(text, "backward: 3xTF32 tensor cores (emulated), dK/dV per 16 keys "
                                      "(four warps on 16 keys), Q and dO read as float4s, dQ = dS "
                                      "K by GEMM, 2 key heads at a time") != NULL
                       : strstr(text, "backward: FMA tiles") != NULL,
                  "head dim 192, dQ as a GEMM on dS: %s", text);
    att_free(&d);
    test_retune("attention.mma=2,attention.dq_gemm=0");
    att_make(&d, &c192);
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, text, sizeof text));
    ck_assert_msg(fits ? strstr(text,
                                "backward: dK/dV per 16 keys (four warps on 16 keys), Q and dO "
                                "read as float4s on 3xTF32 tensor cores (emulated), dQ per ") &&
                             strstr(text, " rows on FMA tiles")
                       : strstr(text, "backward: FMA tiles") != NULL,
                  "head dim 192, dK/dV on tensor cores and dQ on FMAs: %s", text);
    att_free(&d);
    const att_case dec = {2, 4, 4, 1, 1000, 64, BHLD, NONE, -1, -1, 0, NOMASK, 0}; /* 4 blocks */
    test_retune("attention.splits=3");
    att_make(&d, &dec);
    ASSERT_OK(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, text, sizeof text));
    ck_assert_msg(strstr(text, "keys split 3 ways"), "decode with 3 splits: %s", text);
    memcpy(text, "untouched", 10);
    ck_assert_int_eq(oclml_attention_plan(T, &d.p, d.Q, d.K, d.V, NULL, 16),
                     OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_attention_plan(T, &d.p, d.Q, d.Q, d.V, text, sizeof text),
                     OCLML_ERR_INVALID_SHAPE);
    ck_assert_str_eq(text, "untouched");
    att_free(&d);
}
END_TEST

/* ---- bad arguments ---- */

START_TEST(bad_input_touches_nothing) {
    const size_t B = 2, H = 4, Hkv = 2, Lq = 3, Lk = 5, D = 8;
    size_t qs[4] = {B, H, Lq, D}, ks[4] = {B, Hkv, Lk, D}, ls[3] = {B, H, Lq};
    size_t k3[4] = {B, 3, Lk, D}, q3[3] = {B, H, Lq * D}, kb[4] = {3, Hkv, Lk, D},
           kd[4] = {B, Hkv, Lk, D + 1}, kl6[4] = {B, Hkv, Lk + 1, D}, lsb[3] = {B, H, Lq + 1};
    size_t big_q[4] = {1, 1, 2, 257}, m2[2] = {Lq, Lk}, m2b[2] = {Lq, Lk + 1}, m3[3] = {H, Lq, Lk},
           m4b[4] = {3, 1, Lq, Lk}, m4h[4] = {1, 2, Lq, Lk}, m4[4] = {B, H, Lq, Lk}, nb = B,
           nb1 = B + 1;
    float buf[2 * 2 * 4 * 6 * 9];
    test_random(buf, sizeof buf / sizeof buf[0], -1, 1);
    oclml_tensor *Q = test_tensor_from(4, qs, buf), *K = test_tensor_from(4, ks, buf),
                 *V = test_tensor_from(4, ks, buf), *G = test_tensor_from(4, qs, buf),
                 *K3 = test_tensor_from(4, k3, buf), *Q3 = test_tensor_from(3, q3, buf),
                 *KB = test_tensor_from(4, kb, buf), *KD = test_tensor_from(4, kd, buf),
                 *KL6 = test_tensor_from(4, kl6, buf), *BQ = test_tensor_from(4, big_q, buf),
                 *M2 = test_tensor_from(2, m2, buf), *M2B = test_tensor_from(2, m2b, buf),
                 *M3 = test_tensor_from(3, m3, buf), *M4B = test_tensor_from(4, m4b, buf),
                 *M4H = test_tensor_from(4, m4h, buf), *M4 = test_tensor_from(4, m4, buf),
                 *KLEN = test_tensor_from(1, &nb, buf), *KLEN1 = test_tensor_from(1, &nb1, buf),
                 *LSEIN = test_tensor_from(3, ls, buf), *OIN = test_tensor_from(4, qs, buf);
    /* Outputs: NaN-poisoned, must stay so. */
    oclml_tensor *O = test_tensor(4, qs), *LSE = test_tensor(3, ls), *OB = test_tensor(4, big_q),
                 *LSEB = test_tensor(3, lsb), *OK3 = test_tensor(4, k3), *DQ = test_tensor(4, qs),
                 *DK = test_tensor(4, ks), *DV = test_tensor(4, ks), *DM = test_tensor(4, m4),
                 *DM2 = test_tensor(2, m2), *DKB = test_tensor(4, kl6);
    oclml_attention_params p;
    oclml_attention_params_init(&p);
#define FWD(params, q, k, v, o, l, want) \
    ASSERT_STATUS(oclml_attention(T, params, q, k, v, o, l), want)
    /* NULL pointers. */
    ASSERT_STATUS(oclml_attention(NULL, &p, Q, K, V, O, LSE), OCLML_ERR_NULL_POINTER);
    FWD(&p, NULL, K, V, O, LSE, OCLML_ERR_NULL_POINTER);
    FWD(&p, Q, NULL, V, O, LSE, OCLML_ERR_NULL_POINTER);
    FWD(&p, Q, K, NULL, O, LSE, OCLML_ERR_NULL_POINTER);
    FWD(&p, Q, K, V, NULL, LSE, OCLML_ERR_NULL_POINTER);
    /* Ranks and shapes. */
    FWD(&p, Q3, K, V, O, LSE, OCLML_ERR_INVALID_SHAPE);  /* q 3-D */
    FWD(&p, Q, K, KL6, O, LSE, OCLML_ERR_INVALID_SHAPE); /* k and v lengths differ */
    FWD(&p, Q, KB, KB, O, LSE, OCLML_ERR_INVALID_SHAPE); /* batch 3 vs 2 */
    FWD(&p, Q, KD, KD, O, LSE, OCLML_ERR_INVALID_SHAPE); /* head dim 9 vs 8 */
    FWD(&p, Q, K3, K3, O, LSE, OCLML_ERR_INVALID_SHAPE); /* 3 key heads for 4 query heads */
    FWD(&p, Q, K, V, OK3, LSE, OCLML_ERR_INVALID_SHAPE); /* o not q's shape */
    FWD(&p, Q, K, V, O, LSEB, OCLML_ERR_INVALID_SHAPE);  /* lse [B, H, Lq + 1] */
    p.layout = OCLML_ATTENTION_BLHD;                     /* read as BLHD: 3 heads, 5 keys */
    FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_SHAPE);
    oclml_attention_params_init(&p);
    /* Head dim 257: past the documented 1 .. 256 (the header names no status: a shape the
     * operation does not take, or unsupported). */
    {
        oclml_status st = oclml_attention(T, &p, BQ, BQ, BQ, OB, NULL);
        ck_assert_msg(st == OCLML_ERR_INVALID_SHAPE || st == OCLML_ERR_UNSUPPORTED,
                      "head dim 257 gave %s", oclml_status_name(st));
    }
    /* Masks and key lengths of the wrong shape. */
    const oclml_tensor *bad_masks[5] = {M2B, M3, M4B, M4H, KLEN};
    for (int i = 0; i < 5; i++) {
        p.mask = bad_masks[i];
        FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_SHAPE);
    }
    p.mask = NULL;
    p.key_lengths = KLEN1;
    FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_SHAPE);
    /* Params: struct_size, enums, window, scale. */
    oclml_attention_params_init(&p);
    p.struct_size = 0;
    FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_ARGUMENT);
    p.struct_size = sizeof p - 1;
    FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_ARGUMENT);
    oclml_attention_params_init(&p);
    p.causal = (oclml_attention_causal)3;
    FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_ARGUMENT);
    oclml_attention_params_init(&p);
    p.layout = (oclml_attention_layout)2;
    FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_ARGUMENT);
    oclml_attention_params_init(&p);
    p.window_left = -2;
    FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_ARGUMENT);
    oclml_attention_params_init(&p);
    p.scale = NAN;
    FWD(&p, Q, K, V, O, LSE, OCLML_ERR_INVALID_ARGUMENT);
    oclml_attention_params_init(&p);
    /* o over q (a q-shaped view one element into a buffer that holds q), o is q, lse over k. */
    {
        cl_context cx;
        oclml_ctx_cl_objects(T, &cx, NULL, NULL);
        cl_int err;
        const size_t nq = B * H * Lq * D;
        cl_mem m = clCreateBuffer(cx, CL_MEM_READ_WRITE, (nq + 1) * sizeof(float), NULL, &err);
        ck_assert(m != NULL);
        oclml_tensor *Qw, *Ow, *LK;
        ASSERT_OK(oclml_tensor_wrap(T, m, 0, 4, qs, &Qw));
        ASSERT_OK(oclml_tensor_wrap(T, m, sizeof(float), 4, qs, &Ow));
        ASSERT_OK(oclml_tensor_write(Qw, buf, nq));
        FWD(&p, Qw, K, V, Ow, LSE, OCLML_ERR_INVALID_ARGUMENT);
        FWD(&p, Qw, K, V, Qw, LSE, OCLML_ERR_INVALID_ARGUMENT);
        float *back = read_all(Qw, nq);
        ck_assert_msg(memcmp(back, buf, nq * sizeof(float)) == 0, "q was written");
        free(back);
        cl_mem km;
        size_t koff;
        ASSERT_OK(oclml_tensor_buffer(K, &km, &koff));
        ASSERT_OK(oclml_tensor_wrap(T, km, koff, 3, ls, &LK));
        FWD(&p, Q, K, V, O, LK, OCLML_ERR_INVALID_ARGUMENT);
        back = read_all(K, B * Hkv * Lk * D);
        ck_assert_msg(memcmp(back, buf, B * Hkv * Lk * D * sizeof(float)) == 0, "k was written");
        free(back);
        oclml_tensor *w[] = {Qw, Ow, LK};
        for (int i = 0; i < 3; i++) oclml_tensor_destroy(w[i]);
        clReleaseMemObject(m);
    }
#undef FWD
    /* Backward. */
#define BWD(params, q, k, v, o, l, g, dq, dk, dv, dm, want) \
    ASSERT_STATUS(oclml_attention_backward(T, params, q, k, v, o, l, g, dq, dk, dv, dm), want)
    ASSERT_STATUS(oclml_attention_backward(NULL, &p, Q, K, V, OIN, LSEIN, G, DQ, DK, DV, NULL),
                  OCLML_ERR_NULL_POINTER);
    BWD(&p, NULL, K, V, OIN, LSEIN, G, DQ, DK, DV, NULL, OCLML_ERR_NULL_POINTER);
    BWD(&p, Q, NULL, V, OIN, LSEIN, G, DQ, DK, DV, NULL, OCLML_ERR_NULL_POINTER);
    BWD(&p, Q, K, NULL, OIN, LSEIN, G, DQ, DK, DV, NULL, OCLML_ERR_NULL_POINTER);
    BWD(&p, Q, K, V, NULL, LSEIN, G, DQ, DK, DV, NULL, OCLML_ERR_NULL_POINTER);
    BWD(&p, Q, K, V, OIN, NULL, G, DQ, DK, DV, NULL, OCLML_ERR_NULL_POINTER);
    BWD(&p, Q, K, V, OIN, LSEIN, NULL, DQ, DK, DV, NULL, OCLML_ERR_NULL_POINTER);
    BWD(&p, Q, K3, K3, OIN, LSEIN, G, DQ, DK, DV, NULL, OCLML_ERR_INVALID_SHAPE);
    BWD(&p, Q, K, V, OIN, LSEIN, OK3, DQ, DK, DV, NULL, OCLML_ERR_INVALID_SHAPE); /* dout */
    BWD(&p, Q, K, V, OIN, LSEB, G, DQ, DK, DV, NULL, OCLML_ERR_INVALID_SHAPE);
    BWD(&p, Q, K, V, OIN, LSEIN, G, OK3, DK, DV, NULL, OCLML_ERR_INVALID_SHAPE); /* dq */
    BWD(&p, Q, K, V, OIN, LSEIN, G, DQ, DKB, DV, NULL, OCLML_ERR_INVALID_SHAPE); /* dk */
    BWD(&p, Q, K, V, OIN, LSEIN, G, DQ, DK, DKB, NULL, OCLML_ERR_INVALID_SHAPE); /* dv */
    BWD(&p, Q, K, V, OIN, LSEIN, G, DQ, DK, DV, DM, OCLML_ERR_INVALID_ARGUMENT); /* no mask */
    p.mask = M2;
    BWD(&p, Q, K, V, OIN, LSEIN, G, DQ, DK, DV, DM, OCLML_ERR_INVALID_SHAPE); /* 4-D for 2-D */
    p.mask = M4;
    BWD(&p, Q, K, V, OIN, LSEIN, G, DQ, DK, DV, DM2, OCLML_ERR_INVALID_SHAPE);
    p.mask = NULL;
    /* A gradient over an input: dv another tensor on v's memory. */
    {
        cl_mem vm;
        size_t voff;
        oclml_tensor *VV;
        ASSERT_OK(oclml_tensor_buffer(V, &vm, &voff));
        ASSERT_OK(oclml_tensor_wrap(T, vm, voff, 4, ks, &VV));
        BWD(&p, Q, K, V, OIN, LSEIN, G, DQ, DK, VV, NULL, OCLML_ERR_INVALID_ARGUMENT);
        oclml_tensor_destroy(VV);
    }
    p.struct_size = 0;
    BWD(&p, Q, K, V, OIN, LSEIN, G, DQ, DK, DV, NULL, OCLML_ERR_INVALID_ARGUMENT);
#undef BWD
    oclml_tensor *untouched[] = {O, LSE, OB, LSEB, OK3, DQ, DK, DV, DM, DM2, DKB};
    for (size_t i = 0; i < sizeof untouched / sizeof untouched[0]; i++) {
        size_t n;
        oclml_tensor_numel(untouched[i], &n);
        test_assert_untouched(untouched[i], n);
    }
    oclml_tensor *all[] = {Q,   K,    V,   G,   K3, Q3,   KB,    KD,    KL6, BQ, M2,
                           M2B, M3,   M4B, M4H, M4, KLEN, KLEN1, LSEIN, OIN, O,  LSE,
                           OB,  LSEB, OK3, DQ,  DK, DV,   DM,    DM2,   DKB};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) oclml_tensor_destroy(all[i]);
}
END_TEST

/* Gradients that are the same tensor as an input or as each other: each kernel would read what
 * another writes (dk is k: the dq kernel reads k after the dk/dv kernel wrote it; dk is dv: one
 * kernel writes both; dq is q with a mask: the dmask kernel reads q after dq). Refused like a
 * partial overlap, nothing written. */
START_TEST(gradients_may_not_alias) {
    const att_case c = {1, 2, 2, 5, 5, 8, BHLD, NONE, -1, -1, 0, M2D, 0};
    att_data d;
    att_make(&d, &c);
    ASSERT_OK(oclml_attention(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE));
    struct {
        const char *what;
        oclml_tensor *dq, *dk, *dv;
    } cases[] = {{"dk is dv", d.DQ, d.DK, d.DK},
                 {"dk is k", d.DQ, d.K, d.DV},
                 {"dq is q", d.Q, d.DK, d.DV},
                 {"dq is dout", d.G, d.DK, d.DV},
                 {"dq is dk", d.DQ, d.DQ, d.DV}};
    float *q0 = read_all(d.Q, d.nq), *k0 = read_all(d.K, d.nk), *g0 = read_all(d.G, d.nq);
    char accepted[200] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        poison(d.DQ, d.nq);
        poison(d.DK, d.nk);
        poison(d.DV, d.nk);
        poison(d.DM, d.nm);
        oclml_status st = oclml_attention_backward(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE, d.G,
                                                   cases[i].dq, cases[i].dk, cases[i].dv, d.DM);
        if (st != OCLML_ERR_INVALID_ARGUMENT) { /* collected: one failure names them all */
            snprintf(accepted + strlen(accepted), sizeof accepted - strlen(accepted), "%s%s (%s)",
                     *accepted ? ", " : "", cases[i].what, oclml_status_name(st));
            att_upload(&d); /* it may have written over the inputs */
            ASSERT_OK(oclml_tensor_write(d.G, g0, d.nq));
            ASSERT_OK(oclml_attention(T, &d.p, d.Q, d.K, d.V, d.O, d.LSE));
            continue;
        }
        test_assert_untouched(d.DQ, d.nq);
        test_assert_untouched(d.DK, d.nk);
        test_assert_untouched(d.DV, d.nk);
        test_assert_untouched(d.DM, d.nm);
        float *q = read_all(d.Q, d.nq), *k = read_all(d.K, d.nk), *g = read_all(d.G, d.nq);
        ck_assert_msg(!memcmp(q, q0, d.nq * sizeof *q) && !memcmp(k, k0, d.nk * sizeof *k) &&
                          !memcmp(g, g0, d.nq * sizeof *g),
                      "%s: an input was written", cases[i].what);
        free(q);
        free(k);
        free(g);
    }
    ck_assert_msg(!*accepted, "aliased gradients accepted, expected %s: %s",
                  oclml_status_name(OCLML_ERR_INVALID_ARGUMENT), accepted);
    free(q0);
    free(k0);
    free(g0);
    att_free(&d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("attention");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    /* Quick tier (tests/testutil.h): the loops' first iterations; the sweep runs them all. */
    tcase_add_loop_test(tc, forward_matches_reference, 0, test_tier(QUICK_CASES, N_CASES));
    tcase_add_loop_test(tc, backward_matches_reference, 0, test_tier(QUICK_CASES, N_CASES));
    tcase_add_loop_test(tc, tensor_core_emulated, 0, test_tier(QUICK_MMA, N_MMA));
    /* The workspace's stale dS under both causal alignments; the BLHD window at 32 swept. */
    tcase_add_loop_test(tc, dq_gemm_reads_no_stale_ds, 0, test_tier(2, 3));
    tcase_add_test(tc, optional_outputs);
    /* The warps paired at head dims where they are no default: swept. */
    tcase_add_loop_test(tc, backward_by_finite_differences, 0, test_tier(4, 6));
    tcase_add_loop_test(tc, backward_repeatable_bit_for_bit, 0, test_tier(2, 3));
    /* Dropout: the FMA kernels and the float4 tensor-core kernels (emulated); the sweep adds the
     * dQ GEMM, the pairs and the fours. */
    tcase_add_loop_test(tc, dropout_matches_reference, 0, test_tier(2, 5));
    tcase_add_loop_test(tc, dropout_by_finite_differences, 0, 2);
    tcase_add_test(tc, dropout_edges);
    tcase_add_loop_test(tc, rows_that_see_nothing, 0, 2);
    tcase_add_loop_test(tc, empty_rows_stay_zero_beside_infinity, 0, 3);
    tcase_add_loop_test(tc, nan_in_query_row, 0, 3);
    tcase_add_loop_test(tc, nan_in_do_reaches_underflowed_keys, 0, test_tier(2, 3));
    tcase_add_loop_test(tc, nan_padding_never_read, 0, 5);
    tcase_add_test(tc, large_scores_do_not_overflow);
    /* Large scores on the default kernels (a GPU's tensor cores); the emulated ones swept. */
    tcase_add_loop_test(tc, large_scores_backward, 0, test_tier(2, 8));
    /* A window past every key is clamped to none on the host, for every kernel alike: the open
     * left window and the tensor cores' runs swept. */
    tcase_add_loop_test(tc, huge_windows_are_open, 0, test_tier(1, 4));
    tcase_add_test(tc, tuned_tile_that_skips_keys_is_refused);
    tcase_add_loop_test(tc, decode_matches_reference, 0, 2);
    tcase_add_loop_test(tc, forced_splits_small, 0, 3);
    tcase_add_test(tc, plan_names_the_path);
    tcase_add_test(tc, bad_input_touches_nothing);
    tcase_add_test(tc, gradients_may_not_alias);
    suite_add_tcase(s, tc);
    return test_main(s);
}
