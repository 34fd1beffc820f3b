/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx/gpu.h - GPU memory helpers for tools and tests.
 *
 * Device buffers without linking CUDA: the same run-time driver the engine
 * loads (libcuda, found at run time). Not needed to move memory -- the
 * engine takes any pointer the application registers -- they serve tpx's
 * own tools (tpx-perf --mem gpu, tpx-doctor) and tests, and a program that
 * wants a buffer on a GPU without a CUDA toolkit. Without a driver or GPU
 * every call returns TPX_ERR_NO_DEVICE.
 *
 * Ownership: tpx_gpu_alloc() hands out memory the caller frees with
 * tpx_gpu_free(); nothing else frees it, and the engine never does.
 * Thread safety: every function may be called from any thread.
 */
#ifndef TPX_GPU_H
#define TPX_GPU_H

#include <stddef.h>

#include "tpx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices (0 and TPX_ERR_NO_DEVICE if none). */
TPX_API tpx_status_t tpx_gpu_count(int *count);
/* `len` bytes of device memory on `gpu`, 4 KiB aligned. */
TPX_API tpx_status_t tpx_gpu_alloc(int gpu, size_t len, void **ptr);
/* Free what tpx_gpu_alloc() returned (NULL is ignored). */
TPX_API void tpx_gpu_free(void *ptr);
/* Copy between host and device memory (any direction), synchronously. */
TPX_API tpx_status_t tpx_gpu_copy(void *dst, const void *src, size_t len);

#ifdef __cplusplus
}
#endif
#endif
