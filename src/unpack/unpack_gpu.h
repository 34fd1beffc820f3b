/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unpack_gpu.h - gathering devmem fragments on the GPU.
 *
 * The plain-C face of unpack_kernel.cu (also included by it, so the job
 * layout and launch shape are defined once). One launch unpacks many
 * receives: each job names a fragment list, the bounce buffer its src_off
 * values count from and the destination its dst_off values count from.
 * The kernel reads the jobs and the fragment lists straight from
 * device-visible memory (typically the host-mapped netUnpackMeta rows the
 * plugin wrote), so no host-to-device copy precedes a launch.
 *
 * The kernel is compiled by nvcc into a fatbin (sm_80, sm_90, compute_90
 * PTX) embedded in the library; a build without nvcc embeds the copy of
 * that fatbin kept in the tree (src/unpack/unpack_kernel.fatbin) if it was
 * built from the same sources and options, else it has no kernel and
 * tpx__unpack_gpu_init() says so. The d2d mode needs no kernel: it is one
 * cuMemcpyDtoDAsync per fragment, for debugging and ablations.
 *
 * Completion is the caller's: record an event on the stream after the
 * launch and call irecvConsumed only once it has completed.
 */
#ifndef TPX_UNPACK_GPU_H
#define TPX_UNPACK_GPU_H

#include <stdint.h>

#include "tpx/ncclnet.h"
#include "tpx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One receive to unpack. Every pointer is a device address (for host-mapped
 * memory: the one cuMemHostGetDevicePointer gives) valid in the context the
 * kernel runs in. Fragments must not overlap in the destination. */
typedef struct {
    const tpx_nccl_load_meta_t *frags; /* nfrags descriptors, 16-byte aligned */
    const char *bounce;                /* base that src_off counts from */
    char *dst;                         /* base that dst_off counts from */
    uint32_t nfrags;                   /* may be 0 */
    uint32_t reserved;                 /* 0 */
} tpx_unpack_job_t;

#ifdef __cplusplus
static_assert(sizeof(tpx_unpack_job_t) == 32, "tpx_unpack_job_t layout");
#else
_Static_assert(sizeof(tpx_unpack_job_t) == 32, "tpx_unpack_job_t layout");
#endif

/* Launch shape, shared by the kernel and the launcher: each block copies up
 * to TPX__UNPACK_GPU_FRAGS_PER_BLOCK fragments of one job, each warp
 * TPX__UNPACK_GPU_FRAGS_PER_WARP whole fragments, one after the other. */
#ifndef TPX__UNPACK_GPU_THREADS /* tunable at configure time: -DTPX_UNPACK_THREADS=N */
#define TPX__UNPACK_GPU_THREADS 256
#endif
#ifndef TPX__UNPACK_GPU_FRAGS_PER_WARP /* -DTPX_UNPACK_FRAGS_PER_WARP=N */
#define TPX__UNPACK_GPU_FRAGS_PER_WARP 2
#endif
#define TPX__UNPACK_GPU_FRAGS_PER_BLOCK                                                            \
    (TPX__UNPACK_GPU_THREADS / 32 * TPX__UNPACK_GPU_FRAGS_PER_WARP)
/* Jobs per launch (the grid's y dimension). */
#define TPX__UNPACK_GPU_MAX_JOBS 65535u
/* Jobs tpx__unpack_gpu_launch_inline() passes by value, in the launch's
 * parameters: one window of TCPX receives. */
#define TPX__UNPACK_GPU_INLINE_JOBS TPX_NCCL_UNPACK_QUEUE_DEPTH
/* The kernel's symbol in the fatbin. */
#define TPX__UNPACK_GPU_KERNEL "tpx_unpack_kernel"

/* The kernel's one parameter (528 bytes, well inside the 4 KiB limit).
 * Jobs come either from `jobs` (device-visible memory, read by every warp
 * that needs one: one round trip over PCIe when host-mapped) or, when
 * `inline_jobs` is 1, from `inl` (the constant bank: no memory access). */
typedef struct {
    const tpx_unpack_job_t *jobs; /* when inline_jobs == 0 */
    uint32_t njobs;
    uint32_t inline_jobs;
    tpx_unpack_job_t inl[TPX__UNPACK_GPU_INLINE_JOBS];
} tpx__unpack_gpu_args_t;

#ifndef __CUDACC__
/* Load the embedded kernel into `device`'s primary context (retaining it).
 * Idempotent per device (counted: one tpx__unpack_gpu_fini per init).
 * TPX_ERR_UNSUPPORTED in a build without the kernel; TPX_ERR_NO_DEVICE without a
 * driver or device; TPX_ERR_CUDA when the driver refuses the image (e.g. a
 * GPU older than sm_80 or a driver older than the PTX). Needs
 * tpx__cuda_init() to have succeeded first. */
tpx_status_t tpx__unpack_gpu_init(int device);
void tpx__unpack_gpu_fini(int device);

/* Whether this build carries the kernel (1) or not (0: no nvcc, and no
 * current copy of its fatbin). */
int tpx__unpack_gpu_built(void);

/*
 * Enqueue ONE kernel launch on `stream` (a CUstream; NULL = the legacy
 * default stream) that unpacks `njobs` jobs. `jobs` is a device address of
 * the job array (host-mapped memory is fine; it must stay unchanged until
 * the launch completes). `max_frags` is the largest nfrags among the jobs:
 * it only sizes the grid (a larger nfrags is still copied whole, with
 * fewer blocks per job). Makes `device`'s primary context current for the
 * call if it is not. No allocation, no logging unless the launch fails.
 */
tpx_status_t tpx__unpack_gpu_launch(int device, const tpx_unpack_job_t *jobs, uint32_t njobs,
                                    uint32_t max_frags, void *stream);

/*
 * The same with the jobs passed by value: `jobs` is a host array of at
 * most TPX__UNPACK_GPU_INLINE_JOBS entries, copied into the launch (it may
 * be reused as soon as this returns). Saves the kernel one dependent read
 * of the job array, a PCIe round trip when that array is host-mapped.
 */
tpx_status_t tpx__unpack_gpu_launch_inline(int device, const tpx_unpack_job_t *jobs, uint32_t njobs,
                                           uint32_t max_frags, void *stream);

/*
 * The d2d mode: one cuMemcpyDtoDAsync per fragment on `stream`. `frags` is
 * read by the CPU (a host address); `dst` and `bounce` are device
 * addresses. Slow by design (one driver call per 4 KiB), kept to debug the
 * kernel and to measure what batching buys.
 */
tpx_status_t tpx__unpack_gpu_d2d(int device, void *dst, const void *bounce,
                                 const tpx_nccl_load_meta_t *frags, uint64_t nfrags, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
