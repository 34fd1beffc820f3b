/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_mem.c - the public entry points of registered memory (tpx.h:
 * tpx_mem_register, _register_gpu, _deregister, tpx_region_base). A
 * deregistration while transfers still use the memory fails their peers
 * and closes their comms: a decision above the regions (mem.c), which
 * only report what uses them.
 */
#include "engine.h"
#include "mem.h"
#include "peer.h"
#include "xfer.h"
#include "gpu/cuda.h"

TPX_API tpx_status_t tpx_mem_register(tpx_engine_t *e, void *addr, size_t len,
                                      tpx_mem_type_t type, tpx_region_t **out)
{
    return tpx__mem_register(e, addr, len, type, -1, out);
}

TPX_API tpx_status_t tpx_mem_register_gpu(tpx_engine_t *e, void *addr, size_t len, int gpu,
                                          tpx_region_t **out)
{
    if (tpx__cuda_init() != TPX_OK) {
        TPX_ERROR("tpx_mem_register_gpu: GPU %d: %s", gpu, tpx__cuda_error_reason());
        return TPX_ERR_NO_DEVICE;
    }
    if (gpu < 0 || gpu >= tpx__cuda_device_count()) {
        TPX_ERROR("tpx_mem_register_gpu: there is no GPU %d (this process sees %d)", gpu,
                  tpx__cuda_device_count());
        return TPX_ERR_NO_DEVICE;
    }
    return tpx__mem_register(e, addr, len, TPX_MEM_CUDA, gpu, out);
}

/* Does a transfer of peer p still have r's bytes with the plugin? */
static int peer_uses(tpx_peer_t *p, tpx_region_t *r)
{
    for (tpx_xfer_t *x = p->active; x != NULL; x = x->next)
        for (uint32_t i = 0; i < x->nregions; i++)
            if (x->regions[i] == r)
                return 1;
    return 0;
}

TPX_API void tpx_mem_deregister(tpx_region_t *r)
{
    if (r == NULL)
        return;
    tpx_engine_t *e = r->e;
    pthread_mutex_lock(&e->lock);
    if (r->refs > 0 && --r->refs == 0) {
        r->dead = 1;
        /* r stays ours until the end: ending its transfers below frees
         * released preparations (with the failed comms), and the hold of
         * one of them may be the last thing keeping r. */
        r->guard = 1;
        if (r->xfers > 0) {
            /* Transfers still have chunks of this memory with the plugin
             * (released ones included). A FIFO-matching plugin cannot take
             * them back, so their peers are failed and their comms closed:
             * after that no plugin thread touches the memory, and the
             * caller may free it. */
            for (tpx_peer_t *p = e->peers; p != NULL; p = p->next) {
                if (p->state == PEER_READY && peer_uses(p, r)) {
                    tpx__peer_fail(p, TPX_ERR_CANCELED,
                                   "memory of a transfer in flight was deregistered");
                    tpx__peer_close_comms(p);
                }
            }
        }
        /* A failed peer's comms may still hold receives into (or sends from)
         * this memory that no transfer counts any more: close them first. */
        tpx__engine_close_failed(e);
        r->guard = 0;
        tpx__region_maybe_release(r);
    }
    pthread_mutex_unlock(&e->lock);
}

TPX_API void *tpx_region_base(const tpx_region_t *r)
{
    return r ? (void *)r->base : NULL;
}
