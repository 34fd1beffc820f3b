/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_mem.c - the public entry points of registered memory (tpx.h:
 * tpx_mem_register, _register_gpu, _deregister, tpx_region_base) and of
 * its exports (tpx_region_export, _unexport, tpx_rdesc_info): argument
 * checks and the engine lock around mem.c, export.c and the
 * deregistration that may fail peers (peer.c tpx__region_deregister).
 */
#include "engine.h"
#include "mem.h"
#include "peer.h"
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

TPX_API void tpx_mem_deregister(tpx_region_t *r)
{
    if (r == NULL)
        return;
    tpx_engine_t *e = r->e;
    pthread_mutex_lock(&e->lock);
    tpx__region_deregister(r);
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
    tpx_status_t st = tpx__export_new(r, offset, len, desc);
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
    tpx_status_t st = TPX_ERR_INVALID_ARG;
    if (f.engine_id != tpx__ident_engine_id(e))
        TPX_ERROR("tpx_region_unexport: the descriptor is another engine's");
    else
        st = tpx__export_drop(r, f.key);
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
