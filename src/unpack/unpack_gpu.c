/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unpack_gpu.c - loading and launching the unpack kernel; the d2d mode.
 *
 * The kernel image is the fatbin nvcc built from unpack_kernel.cu, embedded
 * as a byte array by the build (cmake/gpu.cmake). Each device gets its own
 * module, loaded into its primary context on first use and kept until the
 * matching tpx__unpack_gpu_fini(). The launch path reads the per-device
 * entry without a lock: init happens-before any launch on that device.
 */
#include "unpack/unpack_gpu.h"

#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "gpu/cuda.h"

#ifdef TPX_HAVE_UNPACK_FATBIN
extern const unsigned char tpx__unpack_fatbin[];
#endif

static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUmodule module;
    CUfunction kernel;
    int refs;
} gpu_dev[TPX_CUDA_MAX_DEVICES];

int tpx__unpack_gpu_built(void)
{
#ifdef TPX_HAVE_UNPACK_FATBIN
    return 1;
#else
    return 0;
#endif
}

tpx_status_t tpx__unpack_gpu_init(int device)
{
#ifndef TPX_HAVE_UNPACK_FATBIN
    TPX_ERROR("unpack kernel: tpx was built without its GPU unpack kernel (no nvcc, and "
              "src/unpack/unpack_kernel.fatbin was not built from these sources): rebuild "
              "with nvcc on PATH, or use TPX_UNPACK=d2d");
    (void)device;
    return TPX_ERR_UNSUPPORTED;
#else
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    tpx_status_t st = tpx__cuda_init();
    if (st < 0) {
        TPX_ERROR("unpack kernel: %s", tpx__cuda_error_reason());
        return st;
    }
    if (device < 0 || device >= tpx__cuda_device_count()) {
        TPX_ERROR("unpack kernel: no CUDA device %d (%d present)", device,
                  tpx__cuda_device_count());
        return TPX_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&gpu_lock);
    if (gpu_dev[device].refs > 0) {
        gpu_dev[device].refs++;
        goto out_unlock;
    }
    TPX_CHECK_GOTO(tpx__cuda_ctx_retain(device, NULL), st, out_unlock);
    TPX_CHECK_GOTO(tpx__cuda_module_load(device, tpx__unpack_fatbin, &mod), st, err_release);
    TPX_CHECK_GOTO(tpx__cuda_module_function(mod, TPX__UNPACK_GPU_KERNEL, &fn), st, err_unload);
    gpu_dev[device].module = mod;
    gpu_dev[device].kernel = fn;
    gpu_dev[device].refs = 1;
    TPX_DEBUG("unpack kernel loaded on cuda device %d", device);
    goto out_unlock;
err_unload:
    tpx__cuda_module_unload(device, mod);
err_release:
    tpx__cuda_ctx_release(device);
out_unlock:
    pthread_mutex_unlock(&gpu_lock);
    return st;
#endif
}

void tpx__unpack_gpu_fini(int device)
{
    if (device < 0 || device >= TPX_CUDA_MAX_DEVICES) {
        TPX_WARN("unpack kernel fini: no CUDA device %d", device);
        return;
    }
    pthread_mutex_lock(&gpu_lock);
    if (gpu_dev[device].refs <= 0) {
        TPX_WARN("unpack kernel fini: device %d was not initialised", device);
    } else if (--gpu_dev[device].refs == 0) {
        tpx__cuda_module_unload(device, gpu_dev[device].module);
        gpu_dev[device].module = NULL;
        gpu_dev[device].kernel = NULL;
        tpx__cuda_ctx_release(device);
    }
    pthread_mutex_unlock(&gpu_lock);
}

/* Both launch flavours: `args` holds the jobs or points at them. */
static tpx_status_t launch(int device, tpx__unpack_gpu_args_t *args, uint32_t max_frags,
                           void *stream)
{
    if (args->njobs == 0 || max_frags == 0)
        return TPX_OK;
    if (TPX_UNLIKELY(device < 0 || device >= TPX_CUDA_MAX_DEVICES ||
                     gpu_dev[device].kernel == NULL)) {
        TPX_ERROR("unpack kernel: not initialised on cuda device %d", device);
        return TPX_ERR_INVALID_STATE;
    }
    if (TPX_UNLIKELY(args->njobs > TPX__UNPACK_GPU_MAX_JOBS)) {
        TPX_ERROR("unpack kernel: %u jobs in one launch (at most %u)", args->njobs,
                  TPX__UNPACK_GPU_MAX_JOBS);
        return TPX_ERR_INVALID_ARG;
    }
    /* One block per fragment group of the largest job; the kernel strides,
     * so a smaller grid would cost speed, never correctness. */
    unsigned int groups =
        (unsigned int)(((uint64_t)max_frags + TPX__UNPACK_GPU_FRAGS_PER_BLOCK - 1) /
                       TPX__UNPACK_GPU_FRAGS_PER_BLOCK);
    void *params[] = {args};
    int pushed;
    tpx_status_t st = tpx__cuda_ctx_enter(device, &pushed);
    if (st < 0)
        return st;
    st = TPX_CU(cuLaunchKernel, gpu_dev[device].kernel, groups, args->njobs, 1,
                TPX__UNPACK_GPU_THREADS, 1, 1, 0, (CUstream)stream, params, NULL);
    tpx__cuda_ctx_leave(pushed);
    return st;
}

tpx_status_t tpx__unpack_gpu_launch(int device, const tpx_unpack_job_t *jobs, uint32_t njobs,
                                    uint32_t max_frags, void *stream)
{
    tpx__unpack_gpu_args_t args;
    args.jobs = jobs;
    args.njobs = njobs;
    args.inline_jobs = 0;
    /* The kernel reads only what it is told to; `inl` is passed as is. */
    memset(args.inl, 0, sizeof(args.inl));
    return launch(device, &args, max_frags, stream);
}

tpx_status_t tpx__unpack_gpu_launch_inline(int device, const tpx_unpack_job_t *jobs, uint32_t njobs,
                                           uint32_t max_frags, void *stream)
{
    if (TPX_UNLIKELY(njobs > TPX__UNPACK_GPU_INLINE_JOBS)) {
        TPX_ERROR("unpack kernel: %u inline jobs (at most %u)", njobs, TPX__UNPACK_GPU_INLINE_JOBS);
        return TPX_ERR_INVALID_ARG;
    }
    tpx__unpack_gpu_args_t args;
    args.jobs = NULL;
    args.njobs = njobs;
    args.inline_jobs = 1;
    memcpy(args.inl, jobs, njobs * sizeof(*jobs));
    memset(args.inl + njobs, 0, (TPX__UNPACK_GPU_INLINE_JOBS - njobs) * sizeof(*jobs));
    return launch(device, &args, max_frags, stream);
}

tpx_status_t tpx__unpack_gpu_d2d(int device, void *dst, const void *bounce,
                                 const tpx_nccl_load_meta_t *frags, uint64_t nfrags, void *stream)
{
    int pushed;
    tpx_status_t st = tpx__cuda_ctx_enter(device, &pushed);
    if (st < 0)
        return st;
    const CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst;
    const CUdeviceptr b = (CUdeviceptr)(uintptr_t)bounce;
    for (uint64_t i = 0; i < nfrags; i++) {
        if (frags[i].f.len == 0)
            continue;
        st = TPX_CU(cuMemcpyDtoDAsync, d + frags[i].f.dst_off, b + frags[i].f.src_off,
                    frags[i].f.len, (CUstream)stream);
        if (st < 0)
            break;
    }
    tpx__cuda_ctx_leave(pushed);
    return st;
}
