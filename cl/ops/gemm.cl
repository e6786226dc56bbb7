/* The GEMM family: C = act(alpha op(A) op(B) + beta C + bias) for strided batches, in two tiled
 * kernels that share their loads and their epilogue, and a finishing kernel.
 *
 *   oclml_gemm_mma     warps of 32 work-items on the m16n8k8 TF32 tensor-core instruction: by
 *                      default three products per element (3xTF32: fp32 accuracy), one with
 *                      GEMM_MMA=2 (the opt-in TF32 math mode). Where the device has TF32 mma.sync.
 *                      With MMA_EMULATE the instruction is emulated in portable code, so the
 *                      suite checks this kernel's layout and its 3xTF32 accuracy on any device.
 *   oclml_gemm_fma     the same tiling on FMAs, for every device: TY x TX work-items, each RM x RN
 *                      outputs (rows ty + i TY, columns tx + j TX: neighbours store neighbours).
 *   oclml_gemm_finish  sums split-K partial products and applies the epilogue; also the epilogue
 *                      of products computed elsewhere (CLBlast).
 *
 * A work-group owns a BM x BN block of C and walks K in tiles of BK, double-buffered in local
 * memory: the next tile's global loads are in flight (in registers) while the current one is
 * multiplied, so one barrier per tile suffices. With GEMM_STAGES (the tensor-core kernel on
 * float4-aligned operands) the tiles instead stream through GEMM_STAGES local buffers by
 * asynchronous copies (ptx.h's cp_async16), several tiles ahead and without staging registers;
 * those buffers are unpadded and swizzled (KSWZ, RSWZ below) to fit three stages of a 128 x 128
 * x 16 tile in 48 KiB. Each operand is staged with its K extent
 * contiguous or its row extent contiguous, whichever it has in global memory (A not transposed
 * and B transposed, i.e. PyTorch's weights, are K-contiguous), so every staging store is a float4
 * and every fragment read is free of bank conflicts (strides LDK and rows + 4, below).
 *
 * Edges: loads past M, N or K read zeros; stores past M or N are skipped; no padding is asked of
 * the caller. With VEC_A / VEC_B the host guarantees aligned float4 loads (leading dimension,
 * offset and the contiguous extent multiples of 4).
 *
 * Grid: dimension 0 block columns x work-group size (or the FMA work-group), dimension 1 block
 * rows, dimension 2 batch entries x K splits. A split computes its K range into its own slice of
 * C (a workspace; the finishing kernel sums them). Block order is swizzled in groups of
 * GROUP_M block rows, so blocks running together share A and B tiles in the L2 cache. A launch
 * may also run the first blocks of that order alone, as one row of work-groups in dimension 0
 * (the host's last-wave split, lib/ops/gemm_plan.c). */
#include "activation.h"
#ifndef MMA_EMULATE
#define MMA_EMULATE 0 /* 1: the tensor-core kernel on a portable m16n8k8 (tests without them) */
#endif
#ifndef GEMM_STAGES
#define GEMM_STAGES 0 /* 0: staging registers, two buffers; 2 and more: asynchronous copies */
#endif
#if GEMM_MMA && !MMA_EMULATE
#define OCLML_WANT_MMA_TF32 1
#endif
#if GEMM_STAGES
#define OCLML_WANT_CP_ASYNC 1
#define OCLML_CP_ASYNC_PORTABLE MMA_EMULATE /* tests: the copies done at once */
#endif
#include "ptx.h"

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef VEC_A
#define VEC_A 0
#endif
#ifndef VEC_B
#define VEC_B 0
#endif
#ifndef GEMM_MMA
#define GEMM_MMA 0 /* 0: FMAs; 1: 3xTF32 tensor cores; 2: TF32 tensor cores */
#endif
#define MMA_TF32_ONLY (GEMM_MMA == 2)
#include "mma.h"
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_DROPOUT
/* 1: dropout after the activation (a linear layer's, philox.h's rule); 2: the same where every
 * even column's element has an even index in the masked tensor (drop_base and drop_ld even), so
 * that the tensor-core tiles' column pairs share one Philox draw */
#define HAS_DROPOUT 0
#endif
#ifndef HAS_PRE
#define HAS_PRE 0
#endif
#ifndef GATHER_B
#define GATHER_B 0 /* 1: B is a convolution's unfolded input, read from the image (gather_chunk) */
#endif
#ifndef BK
#define BK 16
#endif
#ifndef GROUP_M
#define GROUP_M 8 /* the host passes its own (gemm_plan.c's SWIZZLE_ROWS) */
#endif

#if GEMM_MMA
#ifndef WM
#define WM 2
#endif
#ifndef WN
#define WN 4
#endif
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#define NTHREADS (32 * WM * WN)
#define WTM (BM / WM) /* a warp's rows */
#define WTN (BN / WN) /* a warp's columns */
#define MT (WTM / 16)
#define NT (WTN / 8)
#define MMA_TILE_ACCS (MT * NT * 4)

#else
#ifndef TX
#define TX 8
#endif
#ifndef TY
#define TY 8
#endif
#ifndef RM
#define RM 4
#endif
#ifndef RN
#define RN 4
#endif
#define NTHREADS (TX * TY)
#define BM (TY * RM)
#define BN (TX * RN)
#endif

/* K-contiguous operands stage as [row][k], the others as [k][row]. */
#define KCONT_A (!TRANS_A)
#define KCONT_B (TRANS_B)
/* Row strides in local memory. The tensor-core kernel reads k and k + 1 of a row together (see
 * mma_tile): [row][k] with a stride of an odd multiple of 8 floats puts the 8-byte reads of a
 * half-warp (4 rows x 4 pairs) in distinct banks; [k][row] with rows + 4 puts the 4-byte reads of
 * a warp (8 rows x 4 even k) in distinct banks. Both keep float4 staging stores aligned. */
#if GEMM_STAGES
/* The staged tiles unpadded, with the same reads free of bank conflicts by XOR swizzles of
 * 8-float groups (which keep float2 reads and float4 copies whole): [row][k] rows of BK floats
 * move k by 8 per 32/BK rows (KSWZ), [k][row] lines move the row by 8 per pair of k (RSWZ, rows
 * a multiple of 32 so that the swizzle stays inside the line). */
#if GEMM_STAGES < 2 || !GEMM_MMA || GATHER_B || !VEC_A || !VEC_B
#error "GEMM_STAGES: the tensor-core kernel on float4-aligned operands, 2 stages or more"
#endif
#if BK != 8 && BK != 16 && BK != 32
#error "GEMM_STAGES: BK 8, 16 or 32"
#endif
#if (!KCONT_A && BM % 32) || (!KCONT_B && BN % 32)
#error "GEMM_STAGES: [k][row] tiles of a multiple of 32 rows"
#endif
#define KSWZ(r) (BK == 8 ? 0u : (uint)(r) / (32u / BK) % (BK / 8u) * 8u)
#define RSWZ(k) (((uint)(k) >> 1 & 3u) << 3)
#define TILE_A_FLOATS (BM * BK)
#define TILE_B_FLOATS (BN * BK)
#define TILE_INDEX(r, k, rows, kcont) \
    ((kcont) ? (r)*BK + ((k) ^ KSWZ(r)) : (k) * (rows) + ((r) ^ RSWZ(k)))
#else
#define LDK (BK % 16 == 0 ? BK + 8 : BK + 16)
#define LDR(rows) ((rows) + 4)
#define TILE_A_FLOATS (KCONT_A ? BM * LDK : BK * LDR(BM))
#define TILE_B_FLOATS (KCONT_B ? BN * LDK : BK * LDR(BN))
#define TILE_INDEX(r, k, rows, kcont) ((kcont) ? (r)*LDK + (k) : (k)*LDR(rows) + (r))
#endif
/* Element (r, k) of a staged tile: row r of A, column r of B. */
#define A_AT(t, r, k) ((t)[TILE_INDEX(r, k, BM, KCONT_A)])
#define B_AT(t, r, k) ((t)[TILE_INDEX(r, k, BN, KCONT_B)])
/* float4 each work-item stages per tile (the last round partly where the tile has fewer). */
#define CHUNKS_A ((BM * BK / 4 + NTHREADS - 1) / NTHREADS)
#define CHUNKS_B ((BN * BK / 4 + NTHREADS - 1) / NTHREADS)
#define CHUNK_OK(c, rows) ((rows)*BK / 4 % NTHREADS == 0 || (c) < (rows)*BK / 4)

/* Four consecutive elements of a contiguous extent (zeros past its end or for an absent line).
 * With vec the host guarantees an aligned float4 wholly inside the extent. */
OCLML_INLINE float4 load4(__global const float *line, uint i, uint extent, bool present, bool vec) {
    if (!present || i >= extent) return (float4)(0.0f);
    if (vec) return *(__global const float4 *)(line + i);
    return (float4)(line[i], i + 1 < extent ? line[i + 1] : 0.0f,
                    i + 2 < extent ? line[i + 2] : 0.0f, i + 3 < extent ? line[i + 3] : 0.0f);
}

/* The (row, k) where chunk c of a tile_rows x BK tile begins: K-contiguous operands are staged in
 * chunks of four K along a row, the others in chunks of four rows along K. */
OCLML_INLINE uint2 chunk_at(uint c, uint tile_rows, bool kcont) {
    return kcont ? (uint2)(c / (BK / 4), c % (BK / 4) * 4)
                 : (uint2)(c % (tile_rows / 4) * 4, c / (tile_rows / 4));
}

/* Chunk c of a tile_rows x BK tile (rows from r0, K from k0) of an operand with `rows` rows. */
OCLML_INLINE float4 load_chunk(__global const float *x, uint ld, uint rows, uint r0, uint k0,
                               uint kend, uint c, uint tile_rows, bool kcont, bool vec) {
    const uint2 at = chunk_at(c, tile_rows, kcont);
    if (kcont)
        return load4(x + (size_t)(r0 + at.x) * ld + k0, at.y, kend - k0, r0 + at.x < rows, vec);
    return load4(x + (size_t)(k0 + at.y) * ld + r0, at.x, rows - r0, k0 + at.y < kend, vec);
}

#if GATHER_B == 1 && TRANS_B
#error "a gathered B (GATHER_B 1) is staged as [k][column]: TRANS_B must be 0"
#endif
#if GATHER_B == 2 && (TRANS_A || !TRANS_B)
#error "the segmented gather (GATHER_B 2) stages both operands K-contiguous: TRANS_A 0, TRANS_B 1"
#endif
#if GATHER_B
/* B as the unfolded input of a convolution (implicit im2col): element (k, n) is input channel
 * k / RS at kernel tap (r, s) = (k / S % R, k % S) under output position (p, q) = (n / Q, n % Q),
 * read from the image x ([channels][H][W], this batch entry's), or 0 in the padding.
 * GATHER_B 2 (a weight gradient): K runs over images of `seg` positions each; A's column k is
 * column k % seg of image k / seg's matrix (a_seg floats apart), and B is the transposed gather:
 * element (k, n) is the unfolded column n at position k % seg of image k / seg (b_seg apart). */
typedef struct gather_geom {
    uint H, W, R, S, Q, sh, sw, ph, pw, dh, dw, flip, seg;
    ulong a_seg, b_seg;
} gather_geom;
#define GATHER_ARGS                                                                        \
    , uint gH, uint gW, uint gR, uint gS, uint gQ, uint gsh, uint gsw, uint gph, uint gpw, \
        uint gdh, uint gdw, uint gflip, uint gseg, ulong ga_seg, ulong gb_seg
#define GATHER_GEOM                                                         \
    const gather_geom gg = {gH,  gW,  gR,  gS,    gQ,   gsh,    gsw,   gph, \
                            gpw, gdh, gdw, gflip, gseg, ga_seg, gb_seg};

/* Unfolded column k's source: its input channel's plane and the offsets its tap adds to an
 * output position's window corner (flip: the taps run backwards, (R-1-r, S-1-s): a data
 * gradient as a convolution of dy). */
typedef struct gather_tap {
    __global const float *plane;
    int dr, ds;
} gather_tap;

OCLML_INLINE gather_tap tap_of(__global const float *x, uint k, gather_geom g) {
    const uint tap = k % (g.R * g.S), rs = g.flip ? g.R * g.S - 1 - tap : tap;
    gather_tap t;
    t.plane = x + (size_t)(k / (g.R * g.S)) * g.H * g.W;
    t.dr = (int)(rs / g.S * g.dh) - (int)g.ph;
    t.ds = (int)(rs % g.S * g.dw) - (int)g.pw;
    return t;
}

/* The tap's value under output position (p, q), 0 in the padding or where `want` is false. The
 * load is not under a branch (outside, it reads the plane's first element, and the select drops
 * it): a chunk's loads are then issued together rather than one round trip after another. */
OCLML_INLINE float tap_at(gather_tap t, uint p, uint q, gather_geom g, bool want) {
    const int h = (int)(p * g.sh) + t.dr, w = (int)(q * g.sw) + t.ds;
    const bool in = want && h >= 0 && h < (int)g.H && w >= 0 && w < (int)g.W;
    const float v = t.plane[in ? (uint)h * g.W + (uint)w : 0u];
    return in ? v : 0.0f;
}

OCLML_INLINE float gathered(__global const float *x, uint k, uint n, gather_geom g) {
    return tap_at(tap_of(x, k, g), n / g.Q, n % g.Q, g, true);
}

/* The next output position in row-major order (selects, no branch). */
#define NEXT_POSITION(p, q, Q)             \
    do {                                   \
        const bool wrap_ = (q) + 1 == (Q); \
        (q) = wrap_ ? 0u : (q) + 1;        \
        (p) += wrap_ ? 1u : 0u;            \
    } while (0)

#if GATHER_B == 2
/* Chunk c of the K-contiguous stagings: four consecutive k at one row (A) or column (B). */
OCLML_INLINE float4 segmented_a_chunk(__global const float *A, uint lda, uint M, uint r0, uint k0,
                                      uint kend, uint c, gather_geom g) {
    const uint r = r0 + c / (BK / 4), k = k0 + c % (BK / 4) * 4;
    float e[4];
    uint image = k / g.seg, at = k % g.seg;
#pragma unroll
    for (uint j = 0; j < 4; j++) { /* loads not under branches (tap_at) */
        const bool in = r < M && k + j < kend;
        const float v = A[in ? image * g.a_seg + (size_t)r * lda + at : 0];
        e[j] = in ? v : 0.0f;
        const bool next = at + 1 == g.seg;
        at = next ? 0u : at + 1;
        image += next ? 1u : 0u;
    }
    return (float4)(e[0], e[1], e[2], e[3]);
}

OCLML_INLINE float4 segmented_b_chunk(__global const float *x, uint N, uint c0, uint k0, uint kend,
                                      uint c, gather_geom g) {
    const uint n = c0 + c / (BK / 4), k = k0 + c % (BK / 4) * 4;
    float e[4];
    /* The plane stays on an image that exists (that of the chunk's last wanted element, or of
     * element kend - 1 where none is), since tap_at reads its first element where nothing is
     * wanted. */
    const bool n_in = n < N;
    const uint first = min(k, kend - 1); /* k0 < kend */
    uint image = first / g.seg, at = first % g.seg, p = at / g.Q, q = at % g.Q;
    gather_tap t = tap_of(x + image * g.b_seg, n_in ? n : 0u, g);
#pragma unroll
    for (uint j = 0; j < 4; j++) {
        e[j] = tap_at(t, p, q, g, n_in && k + j < kend);
        NEXT_POSITION(p, q, g.Q);
        const bool next = at + 1 == g.seg; /* the next image */
        at = next ? 0u : at + 1;
        p = next ? 0u : p;
        q = next ? 0u : q;
        t.plane += next && k + j + 1 < kend ? g.b_seg : 0;
    }
    return (float4)(e[0], e[1], e[2], e[3]);
}
#define LOAD_A_CHUNK(c, k0) segmented_a_chunk(A, lda, M, p.r0, (k0), p.kend, (c), gg)
#define LOAD_B_CHUNK(c, k0) segmented_b_chunk(B, N, p.c0, (k0), p.kend, (c), gg)
#define A_ELEMENT(r, k) A[(k) / gg.seg * gg.a_seg + (size_t)(r)*lda + (k) % gg.seg]
#define B_ELEMENT(k, c) gathered(B + (k) / gg.seg * gg.b_seg, (c), (k) % gg.seg, gg)
#else
/* Chunk c: four consecutive n at one k, as load_chunk's [k][col] staging has it (one tap, the
 * positions stepped rather than divided out each). */
OCLML_INLINE float4 gather_chunk(__global const float *x, uint N, uint c0, uint k0, uint kend,
                                 uint c, gather_geom g) {
    const uint k = k0 + c / (BN / 4), n = c0 + c % (BN / 4) * 4;
    float e[4];
    const bool k_in = k < kend;
    const gather_tap t = tap_of(x, k_in ? k : k0, g); /* k0 < kend: a plane that exists */
    uint p = n / g.Q, q = n % g.Q;
#pragma unroll
    for (uint j = 0; j < 4; j++) {
        e[j] = tap_at(t, p, q, g, k_in && n + j < N);
        NEXT_POSITION(p, q, g.Q);
    }
    return (float4)(e[0], e[1], e[2], e[3]);
}
#define LOAD_B_CHUNK(c, k0) gather_chunk(B, N, p.c0, (k0), p.kend, (c), gg)
#define B_ELEMENT(k, c) gathered(B, (k), (c), gg)
#endif
#define GATHER_PARAM , gather_geom gg
#define GATHER_PASS , gg
#else
#define GATHER_ARGS
#define GATHER_GEOM
#define LOAD_B_CHUNK(c, k0) load_chunk(B, ldb, N, p.c0, (k0), p.kend, (c), BN, KCONT_B, VEC_B)
#define B_ELEMENT(k, c) (TRANS_B ? B[(size_t)(c)*ldb + (k)] : B[(size_t)(k)*ldb + (c)])
#define GATHER_PARAM
#define GATHER_PASS
#endif
#ifndef LOAD_A_CHUNK
#define LOAD_A_CHUNK(c, k0) load_chunk(A, lda, M, p.r0, (k0), p.kend, (c), BM, KCONT_A, VEC_A)
#define A_ELEMENT(r, k) (TRANS_A ? A[(size_t)(k)*lda + (r)] : A[(size_t)(r)*lda + (k)])
#endif

#if GEMM_STAGES
/* Chunk c of a tile_rows x BK tile (rows from r0, K from k0) copied asynchronously into the
 * swizzled buffer t: the float4s wholly or partly inside the operand (the rest zero-filled by the
 * copy), none outside it. The host guarantees 16-byte aligned sources (VEC_A, VEC_B). */
OCLML_INLINE void copy_chunk(__local float *t, __global const float *x, uint ld, uint rows, uint r0,
                             uint k0, uint kend, uint c, uint tile_rows, bool kcont) {
    const uint2 at = chunk_at(c, tile_rows, kcont);
    const uint r = r0 + at.x, k = k0 + at.y, left = kcont ? kend - k : rows - r;
    const uint avail = r < rows && k < kend ? min(left, 4u) : 0u; /* floats inside the operand */
    cp_async16(t + TILE_INDEX(at.x, at.y, tile_rows, kcont),
               x + (kcont ? (size_t)r * ld + k : (size_t)k * ld + r), avail * 4u);
}
#else
OCLML_INLINE void store_chunk(__local float *t, float4 v, uint c, uint tile_rows, bool kcont) {
    const uint2 at = chunk_at(c, tile_rows, kcont);
    *(__local float4 *)(t + TILE_INDEX(at.x, at.y, tile_rows, kcont)) = v;
}
#endif

/* A_BANDED 1: op(A) is lower-banded, row r 0 past column r + a_band (a causal attention's dS),
 * an argument after the others. A variant of its own: the bound costs the plain product 2-3% on
 * the H100. */
#ifndef A_BANDED
#define A_BANDED 0
#endif
/* A banded A's block rows run bottom first, the heaviest (the most of K) starting first, so
 * that no heavy block starts when the launch is nearly done (attention's causal dQ GEMM;
 * bench/DECISIONS.md, "A lower-banded A"). 0: the plain order. */
#ifndef BAND_HEAVY_FIRST
#define BAND_HEAVY_FIRST 1
#endif
/* With BAND_BLOCK_MAJOR a banded product's work-groups run row block by row block over every
 * batch entry (and K split) rather than entry by entry, where the last entry's heaviest rows
 * would start when the launch is nearly done (about 3% of attention's causal backward on the
 * H100: bench/DECISIONS.md, "A lower-banded A"). */
#ifndef BAND_BLOCK_MAJOR
#define BAND_BLOCK_MAJOR 1
#endif
#if A_BANDED && BAND_BLOCK_MAJOR
#define GROUP_YZ_                                                                            \
    oclml_block_major((uint)get_group_id(1), (uint)get_num_groups(1), (uint)get_group_id(2), \
                      (uint)get_num_groups(2))
#define GROUP_Y (GROUP_YZ_.x)
#define GROUP_Z (GROUP_YZ_.y)
#else
#define GROUP_Y ((uint)get_group_id(1))
#define GROUP_Z ((uint)get_group_id(2))
#endif
#if A_BANDED
#define BAND_ARG , int a_band
#define BAND_PASS , a_band
#else
#define BAND_ARG
#define BAND_PASS
#endif

/* The work-group's block after the swizzle, and its batch entry and K range: its K split's, and
 * with A_BANDED none past its last row's band. */
typedef struct block_pos {
    uint r0, c0, kbegin, kend;
} block_pos;

OCLML_INLINE block_pos block_of(uint M, uint N, uint K, uint ksplit, uint kchunk BAND_ARG) {
    const uint gx = (N + BN - 1) / BN, gy = (M + BM - 1) / BM;
    const uint pid = GROUP_Y * gx + (uint)get_group_id(0);
    const uint per_group = GROUP_M * gx, first = pid / per_group * GROUP_M;
    const uint rows = min(gy - first, (uint)GROUP_M), in_group = pid % per_group;
    block_pos p;
#if A_BANDED && BAND_HEAVY_FIRST /* the last rows read the most of K: they start first */
    p.r0 = (gy - 1 - (first + in_group % rows)) * BM;
#else
    p.r0 = (first + in_group % rows) * BM;
#endif
    p.c0 = in_group / rows * BN;
    const uint split = GROUP_Z % ksplit;
    p.kbegin = split * kchunk;
    p.kend = kchunk >= K - p.kbegin ? K : p.kbegin + kchunk; /* no uint wrap near 2^32 */
#if A_BANDED
    const long last = (long)p.r0 + BM + a_band; /* past the block's last row's band */
    p.kend = last <= 0 ? 0u : min(p.kend, (uint)min(last, (long)K));
#endif
    return p;
}

#include "gemm_epilogue.h"

#define GEMM_ARGS                                                                                 \
    __global const float *A, ulong a_off, uint lda, ulong a_stride, __global const float *B,      \
        ulong b_off, uint ldb, ulong b_stride, __global float *C, ulong c_off, uint ldc,          \
        ulong c_stride, uint M, uint N, uint K, float alpha, float beta,                          \
        __global const float *bias, ulong bias_off, __global float *pre, ulong pre_off, uint ldp, \
        ulong pre_stride, uint ksplit, uint kchunk GATHER_ARGS BAND_ARG DROP_ARGS

/* bias and pre move only where they exist (they are NULL otherwise). */
#if HAS_BIAS
#define GEMM_BIAS_POINTER bias += bias_off;
#else
#define GEMM_BIAS_POINTER
#endif
#if HAS_PRE
#define GEMM_PRE_POINTER pre += pre_off + entry * pre_stride;
#else
#define GEMM_PRE_POINTER
#endif
#define GEMM_EPILOGUE_POINTERS GEMM_BIAS_POINTER GEMM_PRE_POINTER

/* Moves the operands' pointers to this work-group's batch entry (and C's to its split slice). */
#define GEMM_PROLOGUE                                                \
    const uint z = GROUP_Z, entry = z / ksplit;                      \
    A += a_off + entry * a_stride;                                   \
    B += b_off + entry * b_stride;                                   \
    C += c_off + z * c_stride;                                       \
    GEMM_EPILOGUE_POINTERS                                           \
    const block_pos p = block_of(M, N, K, ksplit, kchunk BAND_PASS); \
    GATHER_GEOM                                                      \
    const uint tid = get_local_id(0);                                \
    GEMM_BUFFERS

#if GEMM_STAGES
#define GEMM_BUFFERS                                                           \
    __local float As[GEMM_STAGES][TILE_A_FLOATS] __attribute__((aligned(16))), \
        Bs[GEMM_STAGES][TILE_B_FLOATS] __attribute__((aligned(16)));
#else
#define GEMM_BUFFERS                                                 \
    __local float As[2][TILE_A_FLOATS] __attribute__((aligned(16))), \
        Bs[2][TILE_B_FLOATS] __attribute__((aligned(16)));           \
    float4 sa[CHUNKS_A], sb[CHUNKS_B];
#endif

/* Global to registers for the tile at k0, then registers to local buffer buf. */
#define GEMM_FETCH(k0)                                                                        \
    for (uint i = 0; i < CHUNKS_A; i++)                                                       \
        if (CHUNK_OK(tid + i * NTHREADS, BM)) sa[i] = LOAD_A_CHUNK(tid + i * NTHREADS, (k0)); \
    for (uint i = 0; i < CHUNKS_B; i++)                                                       \
        if (CHUNK_OK(tid + i * NTHREADS, BN)) sb[i] = LOAD_B_CHUNK(tid + i * NTHREADS, (k0));
#define GEMM_STAGE(buf)                                                   \
    for (uint i = 0; i < CHUNKS_A; i++)                                   \
        if (CHUNK_OK(tid + i * NTHREADS, BM))                             \
            store_chunk(As[buf], sa[i], tid + i * NTHREADS, BM, KCONT_A); \
    for (uint i = 0; i < CHUNKS_B; i++)                                   \
        if (CHUNK_OK(tid + i * NTHREADS, BN))                             \
            store_chunk(Bs[buf], sb[i], tid + i * NTHREADS, BN, KCONT_B);

#if GEMM_STAGES
/* The copies of the tile at k0 into buffer buf, as one group of asynchronous copies. */
#define GEMM_COPY(k0, buf)                                                                       \
    for (uint i = 0; i < CHUNKS_A; i++)                                                          \
        if (CHUNK_OK(tid + i * NTHREADS, BM))                                                    \
            copy_chunk(As[buf], A, lda, M, p.r0, (k0), p.kend, tid + i * NTHREADS, BM, KCONT_A); \
    for (uint i = 0; i < CHUNKS_B; i++)                                                          \
        if (CHUNK_OK(tid + i * NTHREADS, BN))                                                    \
            copy_chunk(Bs[buf], B, ldb, N, p.c0, (k0), p.kend, tid + i * NTHREADS, BN, KCONT_B); \
    cp_async_commit();

/* The K loop around COMPUTE(buffers): GEMM_STAGES - 1 tiles in flight ahead of the one being
 * multiplied. Every iteration commits a group (empty past the last tile), so waiting for all but
 * the newest GEMM_STAGES - 2 groups means this tile has landed; the barrier then shows every
 * work-item's copies, and says everyone is done with the buffer the next copies overwrite (the
 * one multiplied last iteration). Those copies go out after this tile's products, so that the
 * products start right after the barrier (0.5-1.5% faster on the H100 than issuing them
 * first). */
#define GEMM_MAINLOOP(COMPUTE)                                                    \
    const uint tiles = p.kbegin < p.kend ? (p.kend - p.kbegin - 1) / BK + 1 : 0u; \
    for (uint t = 0; t + 1 < GEMM_STAGES; t++) {                                  \
        if (t < tiles) {                                                          \
            GEMM_COPY(p.kbegin + t * BK, t)                                       \
        } else {                                                                  \
            cp_async_commit();                                                    \
        }                                                                         \
    }                                                                             \
    for (uint t = 0; t < tiles; t++) {                                            \
        cp_async_wait(GEMM_STAGES - 2);                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                             \
        const uint ahead = t + GEMM_STAGES - 1;                                   \
        COMPUTE(As[t % GEMM_STAGES], Bs[t % GEMM_STAGES]);                        \
        if (ahead < tiles) {                                                      \
            GEMM_COPY(p.kbegin + ahead * BK, ahead % GEMM_STAGES)                 \
        } else {                                                                  \
            cp_async_commit();                                                    \
        }                                                                         \
    }
#else
/* The K loop around COMPUTE(buffer). */
#define GEMM_MAINLOOP(COMPUTE)                        \
    uint buf = 0;                                     \
    if (p.kbegin < p.kend) {                          \
        GEMM_FETCH(p.kbegin)                          \
        GEMM_STAGE(0)                                 \
    }                                                 \
    barrier(CLK_LOCAL_MEM_FENCE);                     \
    for (uint k0 = p.kbegin; k0 < p.kend; k0 += BK) { \
        const bool more = k0 + BK < p.kend;           \
        if (more) {                                   \
            GEMM_FETCH(k0 + BK)                       \
        }                                             \
        COMPUTE(As[buf], Bs[buf]);                    \
        if (more) {                                   \
            GEMM_STAGE(buf ^ 1)                       \
        }                                             \
        barrier(CLK_LOCAL_MEM_FENCE);                 \
        buf ^= 1;                                     \
    }
#endif

#if GEMM_MMA && OCLML_WANT(oclml_gemm_mma)
#if GEMM_STAGES
/* An output the split made NaN, in plain fp32 from global memory: op(A) row r times op(B)
 * column c over this work-group's K range (the asynchronous-copy tiles' repair, below). */
OCLML_INLINE float recompute_nan(__global const float *A, uint lda, __global const float *B,
                                 uint ldb, uint r, uint c, uint kbegin, uint kend GATHER_PARAM) {
    float sum = 0.0f;
    for (uint k = kbegin; k < kend; k++) {
        sum = fma(A_ELEMENT(r, k), B_ELEMENT(k, c), sum);
    }
    return sum;
}
#endif

/* The m16n8k8 fragments of one 8-deep step at kk of a [row][k] or [k][row] tile: K slots tig and
 * tig + 4 of a work-item hold physical k = 2 tig and 2 tig + 1, for A and B alike (the same 8
 * products summed), so a K-contiguous row gives both in one 8-byte read. */
OCLML_INLINE void a_fragment(__local const float *as, uint r, uint kk, uint tig, uint *hi,
                             uint *lo) {
    const uint k = kk + 2 * tig;
    float2 lo_row, hi_row; /* rows r and r + 8, k and k + 1 */
    if (KCONT_A) {
        lo_row = *(__local const float2 *)&A_AT(as, r, k);
        hi_row = *(__local const float2 *)&A_AT(as, r + 8, k);
    } else {
        lo_row = (float2)(A_AT(as, r, k), A_AT(as, r, k + 1));
        hi_row = (float2)(A_AT(as, r + 8, k), A_AT(as, r + 8, k + 1));
    }
    tf32_split(lo_row.x, &hi[0], &lo[0]);
    tf32_split(hi_row.x, &hi[1], &lo[1]);
    tf32_split(lo_row.y, &hi[2], &lo[2]);
    tf32_split(hi_row.y, &hi[3], &lo[3]);
}

OCLML_INLINE void b_fragment(__local const float *bs, uint c, uint kk, uint tig, uint *hi,
                             uint *lo) {
    const uint k = kk + 2 * tig;
    const float2 v = KCONT_B ? *(__local const float2 *)&B_AT(bs, c, k)
                             : (float2)(B_AT(bs, c, k), B_AT(bs, c, k + 1));
    tf32_split(v.x, &hi[0], &lo[0]);
    tf32_split(v.y, &hi[1], &lo[1]);
}

/* One BK tile of this warp's MT x NT blocks. The tensor cores round their sums toward zero, a
 * bias that grows with every accumulation into the same register: over K = 4096 it cost 17x
 * fp32's error. So with 3xTF32 they sum only this tile's products (small terms first within
 * each 8-deep step) into tile_sum, from zero, for one row block at a time (holding more at once
 * measured no faster), and an fp32 add, which rounds to nearest, carries the running sum. The
 * TF32 mode accumulates on the tensor cores directly. */
OCLML_INLINE void mma_tile(__local const float *as, __local const float *bs, uint wr, uint wc,
                           uint gid, uint tig, float *acc MMA_XCHG_PARAM) {
    uint bh[BK / 8][NT][2], bl[BK / 8][NT][2];
#if !MMA_EMULATE /* loops around the emulation's barriers stay loops */
#pragma unroll
#endif
    for (uint ks = 0; ks < BK / 8; ks++)
#pragma unroll
        for (uint nt = 0; nt < NT; nt++)
            b_fragment(bs, wc + nt * 8 + gid, ks * 8, tig, bh[ks][nt], bl[ks][nt]);
#if !MMA_EMULATE
#pragma unroll
#endif
    for (uint mt = 0; mt < MT; mt++) {
#if GEMM_MMA == 1
        float tile_sum[NT * 4];
#pragma unroll
        for (uint i = 0; i < NT * 4; i++) tile_sum[i] = 0.0f;
#else
        float *tile_sum = acc + mt * NT * 4;
#endif
#if !MMA_EMULATE
#pragma unroll
#endif
        for (uint ks = 0; ks < BK / 8; ks++) {
            uint ah[4], al[4];
            a_fragment(as, wr + mt * 16 + gid, ks * 8, tig, ah, al);
#if GEMM_MMA == 1
#if !MMA_EMULATE
#pragma unroll
#endif
            for (uint pass = 0; pass < 3; pass++)
#else
            const uint pass = 2;
#endif
#if !MMA_EMULATE
#pragma unroll
#endif
                for (uint nt = 0; nt < NT; nt++) {
                    const uint *av = pass == 0 ? al : ah, *bv = pass == 1 ? bl[ks][nt] : bh[ks][nt];
                    MMA(tile_sum + nt * 4, av[0], av[1], av[2], av[3], bv[0], bv[1]);
                }
        }
#if GEMM_MMA == 1
#pragma unroll
        for (uint i = 0; i < NT * 4; i++) acc[mt * NT * 4 + i] += tile_sum[i];
#endif
    }
}

__kernel __attribute__((reqd_work_group_size(NTHREADS, 1, 1))) void oclml_gemm_mma(GEMM_ARGS) {
    GEMM_PROLOGUE
    const uint lane = tid % 32, warp = tid / 32, gid = lane / 4, tig = lane % 4;
    const uint wr = warp / WN * WTM, wc = warp % WN * WTN;
#if MMA_EMULATE
    __local float xchg_all[WM * WN * MMA_XCHG_FLOATS];
    __local float *xchg = xchg_all + warp * MMA_XCHG_FLOATS;
#endif
    float acc[MMA_TILE_ACCS];
    for (uint i = 0; i < MMA_TILE_ACCS; i++) acc[i] = 0.0f;
#define MMA_COMPUTE(as, bs) mma_tile(as, bs, wr, wc, gid, tig, acc MMA_XCHG_ARG)
    GEMM_MAINLOOP(MMA_COMPUTE)
    /* Accumulator j = nt * 4 + i of row block mt: row wr + mt*16 + gid + 8*(i/2), column
     * wc + nt*8 + 2*tig + i%2. NaN outputs are repaired first, behind one test (they are rare),
     * so that the epilogue stays straight-line code. */
#define MMA_ROW(mt, j) (p.r0 + wr + (mt)*16 + gid + 8 * ((j) % 4 / 2))
#define MMA_COL(mt, j) (p.c0 + wc + (j) / 4 * 8 + 2 * tig + (j) % 2)
#define MMA_ACC(mt, j) acc[(mt)*NT * 4 + (j)]
    bool any_nan = false;
#pragma unroll
    for (uint i = 0; i < MMA_TILE_ACCS; i++) {
        any_nan |= isnan(acc[i]);
    }
    /* An output the split made NaN is computed again in plain fp32 from global memory: op(A)
     * row times op(B) column over this work-group's K range. This runs only where an input was
     * inf or NaN (or near FLT_MAX), never on finite data. The register-staged tiles do it in one
     * loop over K for all such outputs, reading the work-item's 2 MT rows and 2 NT columns each
     * step (an outer product; redo marks the outputs, loads stay inside the operands): a loop an
     * output made their compile on NVIDIA 2-4x longer. The asynchronous-copy tiles keep a loop
     * an output, as NVIDIA's compiler scheduled their main loop 4-8% slower beside the one
     * loop (bench/DECISIONS.md, "The NaN repair as one loop"). */
#if GEMM_STAGES
    if (any_nan) {
#pragma unroll /* registers: acc is indexed by constants only */
        for (uint mt = 0; mt < MT; mt++)
#pragma unroll
            for (uint j = 0; j < NT * 4; j++) {
                const uint r = MMA_ROW(mt, j), c = MMA_COL(mt, j);
                if (isnan(MMA_ACC(mt, j)) && r < M && c < N)
                    MMA_ACC(mt, j) =
                        recompute_nan(A, lda, B, ldb, r, c, p.kbegin, p.kend GATHER_PASS);
            }
    }
#else
    if (any_nan) {
        uint redo[(MMA_TILE_ACCS + 31) / 32];
#pragma unroll
        for (uint w = 0; w < (MMA_TILE_ACCS + 31) / 32; w++) redo[w] = 0u;
#pragma unroll
        for (uint mt = 0; mt < MT; mt++)
#pragma unroll
            for (uint j = 0; j < NT * 4; j++) {
                const uint i = mt * NT * 4 + j;
                const bool bad = isnan(acc[i]) && MMA_ROW(mt, j) < M && MMA_COL(mt, j) < N;
                redo[i / 32] |= bad ? 1u << (i % 32) : 0u;
                acc[i] = bad ? 0.0f : acc[i];
            }
#pragma unroll 1
        for (uint k = p.kbegin; k < p.kend; k++) {
            float a[MT][2], b[NT][2];
#pragma unroll
            for (uint mt = 0; mt < MT; mt++)
#pragma unroll
                for (uint h = 0; h < 2; h++)
                    a[mt][h] = A_ELEMENT(min(MMA_ROW(mt, 2 * h), M - 1), k);
#pragma unroll
            for (uint nt = 0; nt < NT; nt++)
#pragma unroll
                for (uint e = 0; e < 2; e++)
                    b[nt][e] = B_ELEMENT(k, min(MMA_COL(0, nt * 4 + e), N - 1));
#pragma unroll
            for (uint mt = 0; mt < MT; mt++)
#pragma unroll
                for (uint j = 0; j < NT * 4; j++) {
                    const uint i = mt * NT * 4 + j;
                    if (redo[i / 32] >> (i % 32) & 1u)
                        acc[i] = fma(a[mt][j % 4 / 2], b[j / 4][j % 2], acc[i]);
                }
        }
    }
#endif
    TILE_EPILOGUE(MT, NT * 4, MMA_ROW, MMA_COL, MMA_ACC, 1)
}
#endif

#if !GEMM_MMA && OCLML_WANT(oclml_gemm_fma)
OCLML_INLINE void fma_tile(__local const float *as, __local const float *bs, uint ty, uint tx,
                           float acc[RM][RN]) {
#pragma unroll 4
    for (uint k = 0; k < BK; k++) {
        float a[RM], b[RN];
#pragma unroll
        for (uint i = 0; i < RM; i++) a[i] = A_AT(as, ty + i * TY, k);
#pragma unroll
        for (uint j = 0; j < RN; j++) b[j] = B_AT(bs, tx + j * TX, k);
#pragma unroll
        for (uint i = 0; i < RM; i++)
#pragma unroll
            for (uint j = 0; j < RN; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
}

__kernel __attribute__((reqd_work_group_size(NTHREADS, 1, 1))) void oclml_gemm_fma(GEMM_ARGS) {
    GEMM_PROLOGUE
    const uint tx = tid % TX, ty = tid / TX;
    float acc[RM][RN];
    for (uint i = 0; i < RM; i++)
        for (uint j = 0; j < RN; j++) acc[i][j] = 0.0f;
#define FMA_COMPUTE(as, bs) fma_tile(as, bs, ty, tx, acc)
    GEMM_MAINLOOP(FMA_COMPUTE)
#define FMA_ROW(i, j) (p.r0 + ty + (i)*TY)
#define FMA_COL(i, j) (p.c0 + tx + (j)*TX)
#define FMA_ACC(i, j) acc[i][j]
    TILE_EPILOGUE(RM, RN, FMA_ROW, FMA_COL, FMA_ACC, 0)
}
#endif

#if OCLML_WANT(oclml_gemm_finish)
/* C = act(alpha sum_s W[s] + beta C + bias) for the M x N block of batch entry z = group 2:
 * W[s] the split partials (stride w_split; one slice: a product made elsewhere, which may be C
 * itself, read before it is written by the same work-item). */
__kernel void oclml_gemm_finish(__global const float *W, ulong w_off, uint ldw, ulong w_split,
                                ulong w_stride, uint splits, __global float *C, ulong c_off,
                                uint ldc, ulong c_stride, uint M, uint N, float alpha, float beta,
                                __global const float *bias, ulong bias_off, __global float *pre,
                                ulong pre_off, uint ldp, ulong pre_stride, uint batch DROP_ARGS) {
    const uint c = get_global_id(0);
    if (c >= N) return;
#if HAS_BIAS
    bias += bias_off;
#endif
    /* Rows and batch entries stride over grid dimensions 1 and 2 (which hold at most 65535
     * groups on some devices). */
    for (uint z = get_global_id(2); z < batch; z += get_global_size(2))
        for (uint r = get_global_id(1); r < M; r += get_global_size(1)) {
            __global const float *w = W + w_off + z * w_stride + (size_t)r * ldw + c;
            float sum = 0.0f;
            for (uint s = 0; s < splits; s++) sum += w[s * w_split];
#if HAS_PRE
            __global float *pz = pre + pre_off + z * pre_stride;
#else
            __global float *pz = pre;
#endif
            __global float *cz = C + c_off + z * c_stride;
            const float v =
                epilogue_value(cz, ldc, bias, M, N, r, c, sum, alpha, beta, beta != 0.0f);
            epilogue_store(cz, ldc, pz, ldp, M, N, r, c, v, DROP_APPLY(act_apply(v), r, c));
        }
}
#endif
