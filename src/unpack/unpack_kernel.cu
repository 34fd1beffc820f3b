/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unpack_kernel.cu - the batched devmem gather kernel.
 *
 * One launch unpacks many receives. The grid is (groups, jobs): block
 * (x, y) copies fragment groups x, x + gridDim.x, ... of job y, a group
 * being TPX__UNPACK_GPU_FRAGS_PER_BLOCK consecutive descriptors; each warp
 * copies TPX__UNPACK_GPU_FRAGS_PER_WARP whole fragments one after the
 * other. Jobs come inline in the launch parameters (the constant bank) or
 * from a device-visible array; descriptors are read where they lie
 * (host-mapped memory included): lanes 0..FRAGS_PER_WARP-1 each load one
 * 16-byte descriptor and the warp shares them by shuffles, so a warp pays
 * one round trip for them.
 *
 * Copying a fragment: the destination is first brought to a 16-byte
 * boundary (at most 15 bytes, copied bytewise together with the at most 15
 * tail bytes in the same instruction). The body is then stored as 16-byte
 * vectors. When the source is equally aligned it is loaded as 16-byte
 * vectors too; when it is not, each output vector is assembled with funnel
 * shifts from the two aligned 16-byte source vectors that hold its bytes.
 * That covers every relative alignment with full-width stores (there is no
 * separate 8-, 4- or 1-byte body path to fall back to). The shifted path
 * reads up to 15 bytes before and after the fragment's source bytes, never
 * beyond the aligned 16-byte blocks that hold them, so it cannot fault.
 *
 * Lengths are u32 (up to 4 GiB), src_off u32, dst_off u64: all address
 * arithmetic is done in 64 bits.
 */
#include <stdint.h>

#include "unpack/unpack_gpu.h"

namespace
{

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kFragsPerWarp = TPX__UNPACK_GPU_FRAGS_PER_WARP;
constexpr int kFragsPerBlock = TPX__UNPACK_GPU_FRAGS_PER_BLOCK;
constexpr int kUnrollAligned = 8; /* 8 x 16 B per lane: a 4 KiB page in one pass */
constexpr int kUnrollShifted = 4; /* 2 x 4 x 16 B loads per lane in flight */

static_assert(TPX__UNPACK_GPU_THREADS % kWarp == 0, "whole warps");
static_assert(sizeof(tpx_nccl_load_meta_t) == 16, "loadMeta is 16 bytes");

/* Source and destination equally aligned: n 16-byte vectors. */
__device__ __forceinline__ void copy_aligned(uint4 *__restrict__ d, const uint4 *__restrict__ s,
                                             uint32_t n, int lane)
{
    uint32_t i = (uint32_t)lane;
    /* Full passes first (all kUnrollAligned loads issued before any store),
     * then what is left, one vector per lane. */
    for (; i + (kUnrollAligned - 1) * kWarp < n; i += kUnrollAligned * kWarp) {
        uint4 v[kUnrollAligned];
#pragma unroll
        for (int u = 0; u < kUnrollAligned; u++)
            v[u] = __ldg(s + i + u * kWarp);
#pragma unroll
        for (int u = 0; u < kUnrollAligned; u++)
            __stwb(d + i + u * kWarp, v[u]);
    }
    for (; i < n; i += kWarp)
        __stwb(d + i, __ldg(s + i));
}

/* The 16 bytes that start at byte 4 * Q + rbits / 8 of the 32 bytes a:b
 * (little-endian), for Q in 0..3 and rbits in {0, 8, 16, 24}. */
template <int Q>
__device__ __forceinline__ uint4 extract16(const uint4 &a, const uint4 &b, unsigned rbits)
{
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint4 o;
    o.x = __funnelshift_r(w[Q + 0], w[Q + 1], rbits);
    o.y = __funnelshift_r(w[Q + 1], w[Q + 2], rbits);
    o.z = __funnelshift_r(w[Q + 2], w[Q + 3], rbits);
    o.w = __funnelshift_r(w[Q + 3], w[Q + 4], rbits);
    return o;
}

/* Destination 16-byte aligned, source not: output vector i is built from
 * the aligned source vectors base[i] and base[i + 1]. */
template <int Q>
__device__ __forceinline__ void copy_shifted(uint4 *__restrict__ d, const uint4 *__restrict__ base,
                                             uint32_t n, unsigned rbits, int lane)
{
    uint32_t i = (uint32_t)lane;
    for (; i + (kUnrollShifted - 1) * kWarp < n; i += kUnrollShifted * kWarp) {
        uint4 a[kUnrollShifted], b[kUnrollShifted];
#pragma unroll
        for (int u = 0; u < kUnrollShifted; u++) {
            a[u] = __ldg(base + i + u * kWarp);
            b[u] = __ldg(base + i + u * kWarp + 1);
        }
#pragma unroll
        for (int u = 0; u < kUnrollShifted; u++)
            __stwb(d + i + u * kWarp, extract16<Q>(a[u], b[u], rbits));
    }
    for (; i < n; i += kWarp)
        __stwb(d + i, extract16<Q>(__ldg(base + i), __ldg(base + i + 1), rbits));
}

/* The whole warp copies one fragment. */
__device__ __forceinline__ void copy_fragment(char *dst, const char *src, uint32_t len, int lane)
{
    uint32_t head = (uint32_t)(-(uintptr_t)dst) & 15u;
    if (head > len)
        head = len;
    const uint32_t body = (len - head) >> 4; /* 16-byte vectors */
    const uint32_t tail = (len - head) & 15u;
    const uint64_t tail_at = (uint64_t)head + (uint64_t)body * 16u;

    /* Head bytes on lanes 0..15, tail bytes on lanes 16..31. */
    if ((uint32_t)lane < head)
        __stwb(dst + lane, __ldg(src + lane));
    else if (lane >= 16 && (uint32_t)(lane - 16) < tail)
        __stwb(dst + tail_at + (uint32_t)(lane - 16), __ldg(src + tail_at + (uint32_t)(lane - 16)));
    if (body == 0)
        return;

    uint4 *d = reinterpret_cast<uint4 *>(dst + head);
    const char *s = src + head;
    const unsigned mis = (unsigned)((uintptr_t)s & 15u); /* same for the whole warp */
    if (mis == 0) {
        copy_aligned(d, reinterpret_cast<const uint4 *>(s), body, lane);
        return;
    }
    const uint4 *base = reinterpret_cast<const uint4 *>(s - mis);
    const unsigned rbits = (mis & 3u) * 8u;
    switch (mis >> 2) {
    case 0:
        copy_shifted<0>(d, base, body, rbits, lane);
        break;
    case 1:
        copy_shifted<1>(d, base, body, rbits, lane);
        break;
    case 2:
        copy_shifted<2>(d, base, body, rbits, lane);
        break;
    default:
        copy_shifted<3>(d, base, body, rbits, lane);
        break;
    }
}

} // namespace

extern "C" __global__ void __launch_bounds__(TPX__UNPACK_GPU_THREADS)
    tpx_unpack_kernel(const __grid_constant__ tpx__unpack_gpu_args_t args)
{
    const uint32_t j = blockIdx.y;
    if (j >= args.njobs)
        return;
    const int lane = (int)(threadIdx.x & (kWarp - 1));
    const int warp = (int)(threadIdx.x / kWarp);

    /* From the constant bank, or the same 32 bytes read by every lane (one
     * transaction per warp). */
    const tpx_nccl_load_meta_t *frags;
    const char *bounce;
    char *dst;
    uint64_t nfrags;
    if (args.inline_jobs) {
        frags = args.inl[j].frags;
        bounce = args.inl[j].bounce;
        dst = args.inl[j].dst;
        nfrags = args.inl[j].nfrags;
    } else {
        frags = args.jobs[j].frags;
        bounce = args.jobs[j].bounce;
        dst = args.jobs[j].dst;
        nfrags = args.jobs[j].nfrags;
    }
    const ulonglong2 *meta = reinterpret_cast<const ulonglong2 *>(frags);

    /* Lanes 0..kFragsPerWarp-1 each load one descriptor: r64[0] = src_off |
     * len << 32, r64[1] = dst_off. .cv: fetched afresh, never from a cache
     * line of an earlier launch that read this (reused) row. (Prefetching
     * the next iteration's descriptors across the copy made ptxas spill the
     * carried registers right after the load, which waits for it anyway;
     * with the default grid a warp rarely loops.) */
    const uint64_t stride = (uint64_t)gridDim.x * kFragsPerBlock;
    uint64_t first = (uint64_t)blockIdx.x * kFragsPerBlock + (uint64_t)warp * kFragsPerWarp;
    for (; first < nfrags; first += stride) {
        ulonglong2 cur = make_ulonglong2(0, 0);
        if (lane < kFragsPerWarp && first + (uint64_t)lane < nfrags)
            cur = __ldcv(meta + first + (uint64_t)lane);
#pragma unroll
        for (int k = 0; k < kFragsPerWarp; k++) {
            const unsigned long long a = __shfl_sync(kFullMask, cur.x, k);
            const unsigned long long b = __shfl_sync(kFullMask, cur.y, k);
            if (first + (uint64_t)k >= nfrags) /* the same for every lane */
                break;
            copy_fragment(dst + b, bounce + (uint32_t)a, (uint32_t)(a >> 32), lane);
        }
    }
}
