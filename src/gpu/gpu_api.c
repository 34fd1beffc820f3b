/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_api.c - the public GPU memory helpers (tpx_gpu_*), over gpu/cuda.c.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "gpu/cuda.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

/* Allocations handed out, so tpx_gpu_free() can find the driver's base. */
typedef struct alloc {
    struct alloc *next;
    tpx__cuda_mem_t m;
} alloc_t;
static alloc_t *allocs;
static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;

static tpx_status_t gpu_ready(int gpu)
{
    tpx_status_t st = tpx__cuda_init();
    if (st != TPX_OK) {
        /* An answer, not a failure (tpx.h: TPX_ERR_NO_DEVICE without a GPU):
         * not an error line on the host's stderr. */
        TPX_INFO("no GPU: %s", tpx__cuda_error_reason());
        return st;
    }
    if (gpu < 0 || gpu >= tpx__cuda_device_count()) {
        TPX_ERROR("GPU %d does not exist (%d present)", gpu, tpx__cuda_device_count());
        return TPX_ERR_INVALID_ARG;
    }
    return TPX_OK;
}

TPX_API tpx_status_t tpx_gpu_count(int *count)
{
    if (count == NULL)
        return TPX_ERR_INVALID_ARG;
    tpx_status_t st = tpx__cuda_init();
    *count = st == TPX_OK ? tpx__cuda_device_count() : 0;
    return st;
}

TPX_API tpx_status_t tpx_gpu_alloc(int gpu, size_t len, void **ptr)
{
    if (ptr == NULL || len == 0)
        return TPX_ERR_INVALID_ARG;
    tpx_status_t st = gpu_ready(gpu);
    if (st != TPX_OK)
        return st;
    alloc_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return TPX_ERR_NO_MEMORY;
    st = tpx__cuda_ctx_retain(gpu, NULL); /* held while the allocation lives */
    if (st == TPX_OK) {
        st = tpx__cuda_mem_alloc(gpu, len, &a->m);
        if (st != TPX_OK)
            tpx__cuda_ctx_release(gpu);
    }
    if (st != TPX_OK) {
        free(a);
        return st;
    }
    pthread_mutex_lock(&allocs_lock);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&allocs_lock);
    *ptr = (void *)(uintptr_t)a->m.ptr;
    return TPX_OK;
}

TPX_API void tpx_gpu_free(void *ptr)
{
    if (ptr == NULL)
        return;
    alloc_t *a = NULL;
    pthread_mutex_lock(&allocs_lock);
    for (alloc_t **pp = &allocs; *pp != NULL; pp = &(*pp)->next) {
        if ((void *)(uintptr_t)(*pp)->m.ptr == ptr) {
            a = *pp;
            *pp = a->next;
            break;
        }
    }
    pthread_mutex_unlock(&allocs_lock);
    if (a == NULL) {
        TPX_WARN("tpx_gpu_free: %p was not allocated by tpx_gpu_alloc", ptr);
        return;
    }
    int dev = a->m.dev;
    tpx__cuda_mem_free(&a->m);
    tpx__cuda_ctx_release(dev);
    free(a);
}

TPX_API tpx_status_t tpx_gpu_copy(void *dst, const void *src, size_t len)
{
    if ((dst == NULL || src == NULL) && len > 0)
        return TPX_ERR_INVALID_ARG;
    if (len == 0)
        return TPX_OK;
    tpx_status_t st = tpx__cuda_init();
    if (st != TPX_OK) {
        /* An answer, not a failure (tpx.h: TPX_ERR_NO_DEVICE without a GPU):
         * not an error line on the host's stderr. */
        TPX_INFO("no GPU: %s", tpx__cuda_error_reason());
        return st;
    }
    int ddev, sdev, pushed = 0;
    if ((st = tpx__cuda_ptr_device(dst, &ddev)) != TPX_OK ||
        (st = tpx__cuda_ptr_device(src, &sdev)) != TPX_OK)
        return st;
    int dev = ddev >= 0 ? ddev : sdev;
    if (dev < 0) {
        memcpy(dst, src, len);
        return TPX_OK;
    }
    if ((st = tpx__cuda_ctx_enter(dev, &pushed)) != TPX_OK)
        return st;
    if (ddev >= 0 && sdev >= 0)
        st = TPX_CU(cuMemcpyDtoD, (CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, len);
    else if (ddev >= 0)
        st = TPX_CU(cuMemcpyHtoD, (CUdeviceptr)(uintptr_t)dst, src, len);
    else
        st = TPX_CU(cuMemcpyDtoH, dst, (CUdeviceptr)(uintptr_t)src, len);
    tpx__cuda_ctx_leave(pushed);
    return st;
}
