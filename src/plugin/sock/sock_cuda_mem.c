/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_cuda_mem.c - the GPU memory the built-in transport itself uses,
 * over the CUDA wrapper (gpu/cuda.h): whether a GPU is there, the device of
 * a pointer and references to its primary context (registrations), and the
 * strict TCPX mode's placements (host-mapped and device memory, a
 * synchronous copy). Calls nothing of the transport: the staging
 * (sock_cuda.c) and strict TCPX mode (sock_tcpx.c) call it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda.h"
#include "sock.h"
#include "sock_cuda.h"

int tpx__sock_cuda_available(void)
{
    return tpx__cuda_init() == TPX_OK && tpx__cuda_device_count() > 0;
}

tpx_status_t tpx__sock_cuda_ptr_dev(const void *p, int *dev)
{
    return tpx__cuda_ptr_device(p, dev);
}

tpx_status_t tpx__sock_cuda_retain(int dev) { return tpx__cuda_ctx_retain(dev, NULL); }
void tpx__sock_cuda_release(int dev) { tpx__cuda_ctx_release(dev); }
void tpx__sock_cuda_worker_init(void) { tpx__cuda_thread_own(); }

/* Strict TCPX placement: on `dev`, whose primary context is retained once
 * per allocation. */
int tpx__sock_cuda_current_dev(void)
{
    int dev = tpx__cuda_ctx_current_device();
    return dev >= 0 ? dev : 0;
}

tpx_status_t tpx__sock_cuda_host_alloc(int dev, size_t len, void **out, void **dev_out)
{
    CUdeviceptr d = 0;
    tpx_status_t st = tpx__cuda_ctx_retain(dev, NULL);
    if (st != TPX_OK)
        return st;
    st = tpx__cuda_host_alloc(dev, len, out, &d);
    if (st != TPX_OK) {
        tpx__cuda_ctx_release(dev);
        return st;
    }
    memset(*out, 0, len);
    *dev_out = (void *)(uintptr_t)d;
    return TPX_OK;
}

void tpx__sock_cuda_host_free(int dev, void *p)
{
    if (p == NULL)
        return;
    tpx__cuda_host_free(dev, p);
    tpx__cuda_ctx_release(dev);
}

tpx_status_t tpx__sock_cuda_dev_alloc(int dev, size_t len, void **dptr, void **alloc)
{
    tpx__cuda_mem_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return TPX_ERR_NO_MEMORY;
    tpx_status_t st = tpx__cuda_ctx_retain(dev, NULL);
    if (st != TPX_OK) {
        free(m);
        return st;
    }
    if ((st = tpx__cuda_mem_alloc(dev, len, m)) != TPX_OK) {
        tpx__cuda_ctx_release(dev);
        free(m);
        return st;
    }
    *dptr = (void *)(uintptr_t)m->ptr;
    *alloc = m;
    return TPX_OK;
}

void tpx__sock_cuda_dev_free(void *alloc)
{
    if (alloc == NULL)
        return;
    tpx__cuda_mem_t *m = alloc;
    int dev = m->dev;
    tpx__cuda_mem_free(m);
    free(m);
    tpx__cuda_ctx_release(dev);
}

tpx_status_t tpx__sock_cuda_htod(int dev, void *dptr, const void *src, size_t len)
{
    int pushed = 0;
    tpx_status_t st = tpx__cuda_ctx_enter(dev, &pushed);
    if (st != TPX_OK)
        return st;
    st = TPX_CU(cuMemcpyHtoD, (CUdeviceptr)(uintptr_t)dptr, src, len);
    tpx__cuda_ctx_leave(pushed);
    return st;
}
