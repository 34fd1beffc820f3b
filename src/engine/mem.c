/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem.c - memory regions: registration, the per-comm handle cache, and the
 * address-range cache of the public API.
 *
 * A region is registered with the plugin lazily, once per comm that moves
 * its bytes (plugins whose registrations are not global need one handle per
 * comm). A v7 plugin takes `int` sizes, so a large region is registered as
 * pieces of at most 1 GiB that overlap by 4 MiB: every chunk (<= 4 MiB)
 * lies wholly inside one piece, found by its offset.
 */
#define PIECE_MAX (1ull << 30)
#define PIECE_STRIDE (PIECE_MAX - 4ull * 1024 * 1024)
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine.h"
#include "mem.h"
#include "gpu/cuda.h"

tpx_status_t tpx__region_create(tpx_engine_t *e, void *addr, size_t len, tpx_mem_type_t type,
                                int internal, tpx_region_t **out)
{
    tpx_region_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return TPX_ERR_NO_MEMORY;
    r->e = e;
    r->base = (uintptr_t)addr;
    r->len = len;
    r->type = type;
    r->refs = 1;
    r->internal = internal;
    r->cuda_dev = -1;
    r->npieces = 1;
    /* v7 regMr sizes are int; so are the devmem (TCPX) plugin's for CUDA memory */
    if ((e->net->abi == 7 || e->props.dev_type == TPX_NCCL_NET_DEVICE_UNPACK) && len > PIECE_MAX)
        r->npieces = (int)((len - PIECE_MAX + PIECE_STRIDE - 1) / PIECE_STRIDE) + 1;
    r->next = e->regions;
    e->regions = r;
    *out = r;
    return TPX_OK;
}

tpx_status_t tpx__region_mh(tpx_region_t *r, int comm_id, void *comm, uint64_t off, void **mh)
{
    tpx_engine_t *e = r->e;
    int piece = r->npieces > 1 ? (int)TPX_MIN(off / PIECE_STRIDE, (uint64_t)r->npieces - 1) : 0;
    size_t k = (size_t)comm_id * (size_t)r->npieces + (size_t)piece;
    if (comm_id < r->nmh && r->mh[k] != NULL) {
        *mh = r->mh[k];
        return TPX_OK;
    }
    if (comm_id >= r->nmh) {
        int n = TPX_MAX(comm_id + 1, r->nmh * 2);
        void **nb = realloc(r->mh, (size_t)n * (size_t)r->npieces * sizeof(*nb));
        if (nb == NULL)
            return TPX_ERR_NO_MEMORY;
        r->mh = nb; /* larger than nmh says until both grew: harmless */
        void **nc = realloc(r->mh_comm, (size_t)n * sizeof(*nc));
        if (nc == NULL)
            return TPX_ERR_NO_MEMORY;
        r->mh_comm = nc;
        memset(nb + (size_t)r->nmh * (size_t)r->npieces, 0,
               (size_t)(n - r->nmh) * (size_t)r->npieces * sizeof(*nb));
        memset(nc + r->nmh, 0, (size_t)(n - r->nmh) * sizeof(*nc));
        r->nmh = n;
    }
    int type = r->type == TPX_MEM_CUDA ? TPX_NCCL_PTR_CUDA : TPX_NCCL_PTR_HOST;
    uint64_t pstart = (uint64_t)piece * PIECE_STRIDE;
    uint64_t plen = r->npieces > 1 ? TPX_MIN(PIECE_MAX, r->len - pstart) : r->len;
    void *h = NULL;
    tpx_status_t st = tpx__net_regmr(e->net, comm, (void *)(r->base + pstart), plen, type, &h);
    if (st != TPX_OK) {
        TPX_ERROR("registering %llu bytes at %p with plugin %s failed", (unsigned long long)plen,
                  (void *)(r->base + pstart), e->net->name);
        return st;
    }
    r->mh[k] = h;
    r->mh_comm[comm_id] = comm;
    *mh = h;
    return TPX_OK;
}

/* Deregister r's handles on the comm of id `id`, if any. */
static void region_drop_id(tpx_region_t *r, int id)
{
    if (id >= r->nmh || r->mh_comm[id] == NULL)
        return;
    for (int i = 0; i < r->npieces; i++) {
        void **h = &r->mh[(size_t)id * (size_t)r->npieces + (size_t)i];
        if (*h != NULL) {
            (void)tpx__net_deregmr(r->e->net, r->mh_comm[id], *h);
            *h = NULL;
        }
    }
    r->mh_comm[id] = NULL;
}

void tpx__regions_forget_comm(tpx_engine_t *e, int comm_id)
{
    for (tpx_region_t *r = e->regions; r != NULL; r = r->next)
        region_drop_id(r, comm_id);
}

void tpx__region_release(tpx_region_t *r)
{
    tpx_engine_t *e = r->e;
    tpx__region_exports_drop(r);
    /* every comm it holds handles on is still open: a closing comm drops
     * its handles first (tpx__regions_forget_comm) */
    for (int id = 0; id < r->nmh; id++)
        region_drop_id(r, id);
    for (tpx_region_t **pp = &e->regions; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    free(r->mh);
    free(r->mh_comm);
    free(r);
}

/* Is every page of [addr, addr + len) mapped? msync(MS_ASYNC) changes
 * nothing (a no-op since Linux 2.6.19; madvise() would reset a mapping's
 * advice and split it) and fails with ENOMEM on a hole or past the address
 * space's end: peers could otherwise be handed a range the caller never
 * owned. */
static int host_range_mapped(const void *addr, size_t len)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(page - 1);
    uintptr_t end = (uintptr_t)addr + len; /* no wrap: checked before */
    return msync((void *)start, end - start, MS_ASYNC) == 0;
}

/* CUDA memory of GPU `dev` for engine e (lock held): the first such
 * registration before any peer binds the engine to that GPU (tpx.h "The
 * engine's GPU"); later, memory of another GPU is refused where the plugin
 * cannot receive into it. */
static tpx_status_t region_gpu_admit(tpx_engine_t *e, void *addr, int dev)
{
    if (!e->gpu_fixed && e->gpu_from != TPX_GPU_FROM_MEMORY) {
        if (dev == e->gpu) {
            tpx__topo_gpu_because(e, TPX_GPU_FROM_MEMORY);
            return TPX_OK;
        }
        return tpx__topo_gpu_bind(e, dev, TPX_GPU_FROM_MEMORY);
    }
    int devmem = e->net->is_tcpx || e->props.dev_type == TPX_NCCL_NET_DEVICE_UNPACK;
    if (dev == e->gpu || !devmem)
        return TPX_OK;
    if (e->gpu < 0)
        TPX_ERROR("tpx_mem_register: %p is memory of GPU %d, but this engine serves no GPU and "
                  "has peers already: plugin %s receives into the GPU its comms were made on; "
                  "register GPU memory before the first peer, or set params.gpu", addr, dev,
                  e->net->name);
    else
        TPX_ERROR("tpx_mem_register: %p is memory of GPU %d, but this engine serves GPU %d: "
                  "plugin %s receives into its comms' GPU only; use one engine per GPU", addr,
                  dev, e->gpu, e->net->name);
    return TPX_ERR_UNSUPPORTED;
}

tpx_status_t tpx__mem_register(tpx_engine_t *e, void *addr, size_t len, tpx_mem_type_t type,
                               int claim, tpx_region_t **out)
{
    if (e == NULL || addr == NULL || len == 0 || out == NULL ||
        (type != TPX_MEM_HOST && type != TPX_MEM_CUDA)) {
        TPX_ERROR("tpx_mem_register: invalid argument (engine %p, addr %p, len %zu, type %d)",
                  (void *)e, addr, len, (int)type);
        return TPX_ERR_INVALID_ARG;
    }
    if (len > UINTPTR_MAX - (uintptr_t)addr) {
        TPX_ERROR("tpx_mem_register: %p + %zu bytes runs past the end of the address space",
                  addr, len);
        return TPX_ERR_INVALID_ARG;
    }
    if (type == TPX_MEM_HOST && !host_range_mapped(addr, len)) {
        TPX_ERROR("tpx_mem_register: [%p, +%zu) is not all mapped memory of this process", addr,
                  len);
        return TPX_ERR_INVALID_ARG;
    }
    if (type == TPX_MEM_CUDA && ((uintptr_t)addr % 4096) != 0) {
        TPX_ERROR("tpx_mem_register: CUDA memory must be 4096-byte aligned (%p is not)", addr);
        return TPX_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&e->lock); /* props: see tpx__topo_gpu_bind */
    int takes_cuda = (e->props.ptr_support & TPX_NCCL_PTR_CUDA) != 0;
    pthread_mutex_unlock(&e->lock);
    if (type == TPX_MEM_CUDA && !takes_cuda) {
        TPX_ERROR("tpx_mem_register: plugin %s does not take CUDA memory", e->net->name);
        return TPX_ERR_UNSUPPORTED;
    }
    int dev = -1;
    if (type == TPX_MEM_CUDA && (tpx__cuda_init() != TPX_OK ||
                                 tpx__cuda_ptr_device(addr, &dev) != TPX_OK || dev < 0)) {
        TPX_ERROR("tpx_mem_register: %p is not CUDA device memory%s%s", addr,
                  tpx__cuda_error_reason()[0] ? ": " : "", tpx__cuda_error_reason());
        return TPX_ERR_INVALID_ARG;
    }
    if (claim >= 0 && dev != claim) {
        TPX_ERROR("tpx_mem_register: %p is memory of GPU %d, not of GPU %d as the caller says",
                  addr, dev, claim);
        return TPX_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&e->lock);
    uintptr_t a = (uintptr_t)addr;
    for (tpx_region_t *r = e->regions; r != NULL; r = r->next) {
        if (!r->internal && !r->dead && r->type == type && a >= r->base &&
            len <= r->len && a - r->base <= r->len - len) {
            r->refs++;
            pthread_mutex_unlock(&e->lock);
            *out = r;
            return TPX_OK;
        }
    }
    tpx_status_t st = type == TPX_MEM_CUDA ? region_gpu_admit(e, addr, dev) : TPX_OK;
    if (st == TPX_OK)
        st = tpx__region_create(e, addr, len, type, 0, out);
    if (st == TPX_OK)
        (*out)->cuda_dev = dev;
    pthread_mutex_unlock(&e->lock);
    return st;
}

void tpx__region_maybe_release(tpx_region_t *r)
{
    if (r->dead && r->xfers == 0 && r->refs == 0 && r->holds == 0 && !r->guard)
        tpx__region_release(r);
}
