/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_mem.c - the public entry points of registered memory (tpx.h:
 * tpx_mem_register, _register_gpu, _deregister, tpx_region_base) and of
 * its exports (tpx_region_export, _unexport, tpx_rdesc_info; the table is
 * export.c's). A deregistration while transfers still use the memory
 * fails their peers and closes their comms: a decision above the regions
 * (mem.c), which only report what uses them.
 */
#include <stdlib.h>

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

TPX_API tpx_status_t tpx_region_export(tpx_region_t *r, size_t offset, size_t len,
                                       tpx_rdesc_t *desc)
{
    if (r == NULL || desc == NULL) {
        TPX_ERROR("tpx_region_export: NULL %s", r == NULL ? "region" : "descriptor");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_engine_t *e = r->e;
    pthread_mutex_lock(&e->lock);
    tpx_status_t st = TPX_OK;
    if (r->dead || r->internal) {
        TPX_ERROR("tpx_region_export: the region is deregistered");
        st = TPX_ERR_INVALID_ARG;
        goto out;
    }
    if (len == 0 && offset <= r->len)
        len = r->len - offset;
    if (offset >= r->len || len > r->len - offset) {
        TPX_ERROR("tpx_region_export: bytes [%zu, +%zu) are outside the region of %zu bytes",
                  offset, len, r->len);
        st = TPX_ERR_INVALID_ARG;
        goto out;
    }
    struct tpx_export *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        st = TPX_ERR_NO_MEMORY;
        goto out;
    }
    do {
        if ((st = tpx__random_bytes(&x->key, sizeof(x->key))) != TPX_OK)
            goto err_free;
    } while (x->key == 0 || tpx__export_find(e, x->key) != NULL);
    x->region = r;
    x->off = offset;
    x->len = len;
    if ((st = tpx__export_insert(e, x)) != TPX_OK)
        goto err_free;
    x->next_in_region = r->exports;
    r->exports = x;
    if (e->nexports++ == 0) {
        /* The first export makes an idle engine a server: its progress
         * thread leaves the 100 ms sleep for the owner's polling at once,
         * or a request arriving now would wait for that sleep to end. */
        e->last_move_ns = tpx__now_ns();
        tpx__progress_kick(e);
    }
    tpx_rdesc_fields_t f = {.mem_type = (uint8_t)r->type, .engine_id = e->id, .key = x->key,
                            .addr = (uint64_t)(r->base + offset), .len = len,
                            .gpu = r->cuda_dev};
    tpx__rdesc_encode(&f, desc->bytes);
    goto out;

err_free:
    free(x);
out:
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API tpx_status_t tpx_region_unexport(tpx_region_t *r, const tpx_rdesc_t *desc)
{
    tpx_rdesc_fields_t f;
    if (r == NULL || desc == NULL) {
        TPX_ERROR("tpx_region_unexport: NULL %s", r == NULL ? "region" : "descriptor");
        return TPX_ERR_INVALID_ARG;
    }
    if (tpx__rdesc_decode(desc->bytes, &f) != TPX_OK) {
        TPX_ERROR("tpx_region_unexport: not a valid region descriptor");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_engine_t *e = r->e;
    pthread_mutex_lock(&e->lock);
    tpx_status_t st = TPX_OK;
    if (f.engine_id != e->id) {
        TPX_ERROR("tpx_region_unexport: the descriptor is another engine's");
        st = TPX_ERR_INVALID_ARG;
        goto out;
    }
    struct tpx_export **pp = &r->exports;
    while (*pp != NULL && (*pp)->key != f.key)
        pp = &(*pp)->next_in_region;
    if (*pp == NULL) { /* not an error worth a log line: a second unexport */
        st = TPX_ERR_NOT_FOUND;
        goto out;
    }
    struct tpx_export *x = *pp;
    *pp = x->next_in_region;
    tpx__export_remove(e, x);
    e->nexports--;
    free(x);
out:
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API tpx_status_t tpx_rdesc_info(const tpx_rdesc_t *desc, uint64_t *addr, uint64_t *len)
{
    tpx_rdesc_fields_t f;
    if (desc == NULL) {
        TPX_ERROR("tpx_rdesc_info: NULL descriptor");
        return TPX_ERR_INVALID_ARG;
    }
    if (tpx__rdesc_decode(desc->bytes, &f) != TPX_OK) {
        TPX_ERROR("tpx_rdesc_info: not a valid region descriptor");
        return TPX_ERR_PROTOCOL;
    }
    if (addr != NULL)
        *addr = f.addr;
    if (len != NULL)
        *len = f.len;
    return TPX_OK;
}
