/* The only inline PTX of the kernels, behind OCLML_PTX: core defines it where the device's
 * capability probe built inline PTX (NVIDIA), and only for programs that include this header.
 * Each helper has a portable counterpart or a portable caller path, tested on PoCL.
 *   warp_sum         sum over the 32 work-items of a warp by shuffles (no local memory, no
 *                    barrier); every work-item of the warp must call it, all get the sum
 *   warp_shuffle     the value v of lane src of the warp (every work-item of the warp calls it)
 *   sync_arrive/load a counter in global memory as a device-wide sync point: arrive makes this
 *                    work-group's global writes visible to every work-group, then counts it;
 *                    load reads the counter, and reads after it see what arrivals before wrote
 *   mma_tf32         d += a * b on TF32 tensor cores (m16n8k8), where the op defines
 *                    OCLML_WANT_MMA_TF32 (it does so only where the capability is present)
 *   mma_16bit        d += a * b on bf16 or fp16 tensor cores (m16n8k16, fp32 accumulation),
 *                    where the op defines OCLML_WANT_MMA_16BIT as 1 (bf16) or 2 (fp16), with
 *   ldmatrix_x4      four 8 x 8 tiles of 16-bit words from local memory into the fragments of
 *                    the warp (each work-item gives one tile row's address; _trans transposes)
 *   cp_async16       where the op defines OCLML_WANT_CP_ASYNC (hosts do so only on devices with
 *                    the tensor cores above, sm_80 on): 16 bytes from global to local memory
 *                    without passing through registers, `bytes` of them read and the rest
 *                    zero-filled (0: nothing is read); cp_async_commit closes a group of copies,
 *                    cp_async_wait(n) waits until at most n groups are in flight (n a constant),
 *                    after which a barrier shows the copies to the whole work-group. Without
 *                    OCLML_PTX, or with OCLML_CP_ASYNC_PORTABLE set, the copy is done at once. */
#ifndef OCLML_PTX_H
#define OCLML_PTX_H

#include "common.h"

#ifndef OCLML_PTX
#define OCLML_PTX 0
#endif

#if OCLML_PTX
OCLML_INLINE float warp_sum(float v) {
    for (uint o = 16; o > 0; o >>= 1) {
        float t;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(t) : "f"(v), "r"(o));
        v += t;
    }
    return v;
}

OCLML_INLINE float warp_shuffle(float v, uint src) {
    float t;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(t) : "f"(v), "r"(src));
    return t;
}

/* PTX's release reduction and acquire load at GPU scope (cheaper than membar.gl around relaxed
 * atomics): OpenCL 1.2's mem_fence promises only the work-group (NVIDIA compiles it to
 * membar.cta). */
OCLML_INLINE void sync_arrive(__global volatile uint *count) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
}
OCLML_INLINE uint sync_load(__global volatile uint *count) {
    uint v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
    return v;
}
#else
/* mem_fence plus volatile accesses: enough on PoCL (the tests split RSSM members there),
 * unverified on other GPUs, so hosts split work over work-groups by default only where
 * OCLML_PTX is set. */
OCLML_INLINE void sync_arrive(__global volatile uint *count) {
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    atomic_inc(count);
}
OCLML_INLINE uint sync_load(__global volatile uint *count) {
    const uint v = *count;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    return v;
}
#endif

#if OCLML_PTX && defined(OCLML_WANT_MMA_TF32)
/* d += a * b on the tensor cores, tf32 inputs, fp32 accumulation (PTX m16n8k8, sm_80 on). */
OCLML_INLINE void mma_tf32(float *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
    float d0, d1, d2, d3;
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]), "f"(d[2]),
          "f"(d[3]));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
}
#endif

#if OCLML_PTX && defined(OCLML_WANT_MMA_16BIT)
#if OCLML_WANT_MMA_16BIT == 1
#define OCLML_MMA_16BIT_TYPE "bf16"
#else
#define OCLML_MMA_16BIT_TYPE "f16"
#endif
/* d += a * b, a four words (8 elements) of the A fragment, b two of the B fragment (PTX
 * m16n8k16, sm_80 on, the same devices as TF32's). */
OCLML_INLINE void mma_16bit(float *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
    float d0, d1, d2, d3;
    /* volatile: a .sync.aligned instruction must not be moved under a divergent branch */
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." OCLML_MMA_16BIT_TYPE
                 "." OCLML_MMA_16BIT_TYPE
                 ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]),
                   "f"(d[2]), "f"(d[3]));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
}

/* Volatile with a memory clobber: the reads must stay after the barrier that shows the tile. */
OCLML_INLINE void ldmatrix_x4(uint *r, __local const ushort *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint)(size_t)row)
                 : "memory");
}
OCLML_INLINE void ldmatrix_x4_trans(uint *r, __local const ushort *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint)(size_t)row)
                 : "memory");
}
#endif

#ifdef OCLML_WANT_CP_ASYNC
#if OCLML_PTX && !OCLML_CP_ASYNC_PORTABLE
/* cp.async takes the destination's shared-window address: a local pointer's integer value. */
OCLML_INLINE void cp_async16(__local float *dst, __global const float *src, uint bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((uint)(size_t)dst), "l"(src),
                 "r"(bytes)
                 : "memory");
}
OCLML_INLINE void cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
#define cp_async_wait(n) asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory")
#else
/* The instruction faults on a destination or a read source that is not 16-byte aligned: here
 * such a copy writes NaN (at the aligned address below), so that tests catch it. */
OCLML_INLINE void cp_async16(__local float *dst, __global const float *src, uint bytes) {
    float4 v = (float4)(0.0f);
    if (bytes >= 4) v.x = src[0];
    if (bytes >= 8) v.y = src[1];
    if (bytes >= 12) v.z = src[2];
    if (bytes >= 16) v.w = src[3];
    const bool misaligned = ((size_t)dst & 15u) || (bytes && ((size_t)src & 15u));
    *(__local float4 *)((size_t)dst & ~(size_t)15u) = misaligned ? (float4)(NAN) : v;
}
OCLML_INLINE void cp_async_commit(void) {}
#define cp_async_wait(n) ((void)0)
#endif
#endif

#endif
