/* SPDX-License-Identifier: Apache-2.0 */
/*
 * devmem.c - reading a net plugin's device memory from the host.
 *
 * The one place tpx reads plugin device memory (device handles, bounce
 * buffers) into host memory: never by dereferencing it. See cuda.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "gpu/cuda.h"

/* The CUDA device that owns `p`, or -1 (no GPU, or not device memory). */
static int devmem_owner(const void *p)
{
    int dev = -1;
    if (tpx__cuda_init() != TPX_OK || tpx__cuda_ptr_device(p, &dev) != TPX_OK)
        return -1;
    return dev;
}

/* Host-side reads through /proc/self/mem: they reach pages mapped
 * PROT_NONE (the kernel walks the page tables with FOLL_FORCE), which is
 * how the strict mode's emulated device memory is read without a GPU. */
static int procmem_open(void)
{
    int fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        TPX_ERROR("reading plugin device memory: cannot open /proc/self/mem: %s",
                  strerror(errno));
    return fd;
}

static tpx_status_t procmem_read(int fd, void *dst, const void *src, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)dst + done, len - done, (off_t)((uintptr_t)src + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            TPX_ERROR("reading plugin device memory at %p (+%zu of %zu bytes) failed: %s", src,
                      done, len, n < 0 ? strerror(errno) : "end of file");
            return TPX_ERR_IO;
        }
        done += (size_t)n;
    }
    return TPX_OK;
}

tpx_status_t tpx__cuda_devmem_read(void *dst, const void *src, size_t len)
{
    tpx_nccl_load_meta_t one = {.f = {.src_off = 0, .len = (uint32_t)len, .dst_off = 0}};
    if (len > UINT32_MAX) {
        TPX_ERROR("reading plugin device memory: %zu bytes in one copy", len);
        return TPX_ERR_INVALID_ARG;
    }
    return tpx__cuda_devmem_gather(dst, src, &one, len > 0 ? 1 : 0);
}

tpx_status_t tpx__cuda_devmem_gather(void *dst, const void *bounce,
                                     const tpx_nccl_load_meta_t *frags, uint64_t nfrags)
{
    if (nfrags == 0)
        return TPX_OK;
    tpx_status_t st = TPX_OK;
    int dev = devmem_owner(bounce);
    if (dev >= 0) {
        int pushed = 0;
        if ((st = tpx__cuda_ctx_retain(dev, NULL)) != TPX_OK)
            return st;
        if ((st = tpx__cuda_ctx_enter(dev, &pushed)) == TPX_OK) {
            const CUdeviceptr b = (CUdeviceptr)(uintptr_t)bounce;
            for (uint64_t i = 0; i < nfrags && st == TPX_OK; i++)
                if (frags[i].f.len > 0)
                    st = TPX_CU(cuMemcpyDtoH, (char *)dst + frags[i].f.dst_off,
                                b + frags[i].f.src_off, frags[i].f.len);
            tpx__cuda_ctx_leave(pushed);
        }
        tpx__cuda_ctx_release(dev);
        return st;
    }
    int fd = procmem_open();
    if (fd < 0)
        return TPX_ERR_IO;
    for (uint64_t i = 0; i < nfrags && st == TPX_OK; i++)
        if (frags[i].f.len > 0)
            st = procmem_read(fd, (char *)dst + frags[i].f.dst_off,
                              (const char *)bounce + frags[i].f.src_off, frags[i].f.len);
    close(fd);
    return st;
}

tpx_status_t tpx__cuda_host_view(const void *dptr, const void **host)
{
    if (tpx__cuda_init() == TPX_OK) {
        /* Addresses CUDA does not know answer INVALID_VALUE: an answer,
         * not an error, so these calls bypass TPX_CU. */
        unsigned int type = 0;
        CUresult r = tpx__cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                   (CUdeviceptr)(uintptr_t)dptr);
        if (r == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE) {
            TPX_ERROR("%p is GPU memory, not host memory mapped for the GPU", dptr);
            return TPX_ERR_INVALID_ARG;
        }
        void *hp = NULL;
        if (r == CUDA_SUCCESS &&
            tpx__cu.cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                          (CUdeviceptr)(uintptr_t)dptr) == CUDA_SUCCESS &&
            hp != NULL) {
            *host = hp;
            return TPX_OK;
        }
    }
    *host = dptr;
    return TPX_OK;
}
