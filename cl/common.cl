/* Shared helpers, prepended to every liboclml program.
 * The build defines OCLML_MAX_WG (the device's work-group size limit) and OCLML_IS_GPU. */

/* Kernels address tensors as (buffer, element offset): a wrapped cl_mem may start anywhere. */
#define OCLML_AT(buf, off) ((buf) + (off))

/* The logistic function of the elementwise op, the GRU gates and the RSSM rollout (one
 * definition, so they round alike). exp(-x) overflows to inf for x < -88: the result is then 0,
 * not NaN. */
inline float oclml_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

/* The GRU kernels' bias flags (gru.cl, gru_tiled.cl; lib/gru.c bias_flags). */
#define GRU_B_IH 1 /* b_ih given */
#define GRU_B_HH 2 /* b_hh given */

/* ---- Row kernels ----
 * A work-group of L work-items handles L/G rows at once; a "segment" of G consecutive
 * work-items (G a power of two) owns one row. Work-item `lane` of a segment holds the row's
 * elements (i*G + lane)*VEC .. +VEC-1 for i < ITEMS in registers, so a row is read from memory
 * once, reduced, and written once. Loads are coalesced: consecutive lanes touch consecutive
 * elements (or float4 vectors when VEC == 4; the host picks VEC 4 only when the row length and
 * every tensor offset are multiples of 4, so the casts below are aligned). */

/* Reductions over the G work-items of a segment through local memory (OpenCL 1.2 has no
 * portable sub-group operations). Every work-item of the work-group must call them. */
inline float seg_sum(float v, __local float *red, uint lid, uint G) {
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = G >> 1; s > 0; s >>= 1) {
        if ((lid & (G - 1)) < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[lid & ~(G - 1)];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

#ifdef OCLML_NV
/* NVIDIA (OCLML_NV, set by the host there): butterfly sum over the 32 work-items of a warp
 * through PTX shuffles, no local memory and no barrier; every work-item of the warp must call
 * it, and all get the sum. */
inline float warp_sum(float v) {
    for (uint o = 16; o > 0; o >>= 1) {
        float t;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(t) : "f"(v), "r"(o));
        v += t;
    }
    return v;
}
#endif

inline float seg_max(float v, __local float *red, uint lid, uint G) {
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = G >> 1; s > 0; s >>= 1) {
        if ((lid & (G - 1)) < s) red[lid] = fmax(red[lid], red[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[lid & ~(G - 1)];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* v[ITEMS*VEC] <- the lane's elements of row p (cols long); missing elements get `fill`. */
#define ROW_LOAD1(v, p, ITEMS, lane, G, cols, ok, fill)                                          \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                                                     \
        const uint c_ = i_ * (G) + (lane);                                                     \
        v[i_] = ((ok) && c_ < (cols)) ? (p)[c_] : (fill);                                       \
    }
#define ROW_LOAD4(v, p, ITEMS, lane, G, cols, ok, fill)                                          \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                                                     \
        const uint c_ = i_ * (G) + (lane);                                                     \
        const float4 q_ = ((ok) && c_ < (cols) / 4) ? ((__global const float4 *)(p))[c_]       \
                                                    : (float4)(fill);                           \
        v[4 * i_] = q_.x; v[4 * i_ + 1] = q_.y; v[4 * i_ + 2] = q_.z; v[4 * i_ + 3] = q_.w;     \
    }
/* Row p <- v (only existing elements). */
#define ROW_STORE1(v, p, ITEMS, lane, G, cols, ok)                                               \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                                                     \
        const uint c_ = i_ * (G) + (lane);                                                     \
        if ((ok) && c_ < (cols)) (p)[c_] = v[i_];                                               \
    }
#define ROW_STORE4(v, p, ITEMS, lane, G, cols, ok)                                               \
    for (uint i_ = 0; i_ < (ITEMS); i_++) {                                                     \
        const uint c_ = i_ * (G) + (lane);                                                     \
        if ((ok) && c_ < (cols) / 4)                                                           \
            ((__global float4 *)(p))[c_] = (float4)(v[4 * i_], v[4 * i_ + 1], v[4 * i_ + 2],   \
                                                    v[4 * i_ + 3]);                             \
    }
/* Whether element k of v[] (k < ITEMS*VEC) is a real element of the row. */
#define ROW_VALID1(k, lane, G, cols) (((k) * (G) + (lane)) < (cols))
#define ROW_VALID4(k, lane, G, cols) (((((k) >> 2) * (G) + (lane)) << 2) + ((k) & 3) < (cols))

/* The standard prologue of a row kernel: which row this work-item serves and its lane. */
#define ROW_PROLOGUE(G, rows)                                                                    \
    const uint lid = get_local_id(0);                                                           \
    const uint lane = lid & ((G) - 1);                                                          \
    const ulong row = (ulong)get_group_id(0) * (get_local_size(0) / (G)) + lid / (G);           \
    const bool ok = row < (rows);

/* Instantiates KERNEL_MACRO(ITEMS, VEC) for every register-resident variant the host may pick:
 * up to 32 floats per work-item. */
#define ROW_VARIANTS(KERNEL_MACRO)                                                               \
    KERNEL_MACRO(1, 1) KERNEL_MACRO(2, 1) KERNEL_MACRO(4, 1) KERNEL_MACRO(8, 1)                 \
    KERNEL_MACRO(16, 1) KERNEL_MACRO(32, 1)                                                     \
    KERNEL_MACRO(1, 4) KERNEL_MACRO(2, 4) KERNEL_MACRO(4, 4) KERNEL_MACRO(8, 4)
