/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem.h - memory regions (mem.c) and their exports (export.c).
 *
 * A region is registered with the plugin lazily, once per comm that moves
 * its bytes (tpx__region_mh). Ownership: the engine owns every region
 * (e->regions); a user region lives while the user holds a reference
 * (`refs`), a transfer uses it (`xfers`) or a preparation names it
 * (`holds`); internal regions (control buffers, scratch, staging, list
 * buffers) belong to the object that created them, which releases them.
 * Everything here is guarded by e->lock.
 *
 * Layering: this layer calls only the plugin (net.h) and export.c. It
 * never calls up into peers or transfers; deregistering memory that a
 * transfer still uses fails that transfer's peer, which is the API call's
 * business (tpx_mem_deregister, peer.h).
 */
#ifndef TPX_ENGINE_MEM_H
#define TPX_ENGINE_MEM_H

#include "engine.h"

struct tpx_region {
    tpx_engine_t *e;
    tpx_region_t *next;  /* engine's list */
    uintptr_t base;
    size_t len;
    tpx_mem_type_t type;
    int cuda_dev;        /* TPX_MEM_CUDA: the device; -1 otherwise */
    int refs;            /* user references */
    int xfers;           /* transfers using it */
    int dead;            /* deregistered by the user, waiting for xfers */
    int holds;           /* preparations naming it (keep the struct, not the memory) */
    struct tpx_export *exports; /* its exports (export.c) */
    int guard;           /* being deregistered: not released from under the caller */
    int internal;        /* engine-owned (control, scratch) */
    int npieces;         /* registrations per comm (v7 plugins: <= 1 GiB each) */
    int nmh;             /* comm ids with room in mh and mh_comm */
    void **mh;           /* [comm id * npieces + piece]: plugin handle (NULL: not yet) */
    void **mh_comm;      /* [comm id]: the plugin comm that id's handles were made on (NULL:
                            none), so that the region drops its handles alone */
};

/* An exported range of a region (export.c): owned by the region's list and
 * the engine's export table (e->xtab) together; dropped with the region. */
struct tpx_export {
    struct tpx_export *next_in_region;
    uint64_t key;
    tpx_region_t *region;
    uint64_t off, len; /* the exported bytes of the region */
};

/* ---- mem.c ---- */
/* tpx_mem_register(); `claim` >= 0: the GPU the caller says the memory is on. */
tpx_status_t tpx__mem_register(tpx_engine_t *e, void *addr, size_t len, tpx_mem_type_t type,
                               int claim, tpx_region_t **out);
tpx_status_t tpx__region_create(tpx_engine_t *e, void *addr, size_t len, tpx_mem_type_t type,
                                int internal, tpx_region_t **out);
/* Drop every plugin handle of r and free it (its exports go too). */
void tpx__region_release(tpx_region_t *r);
/* Free r once nothing needs it (deregistered, no transfer, no preparation). */
void tpx__region_maybe_release(tpx_region_t *r);
/* The plugin handle of r on plugin comm `comm` (the engine's comm of id
 * comm_id: window.h) covering bytes from `off` (4 MiB fit); registers on
 * first use (allocates: not on the hot path after that). */
tpx_status_t tpx__region_mh(tpx_region_t *r, int comm_id, void *comm, uint64_t off, void **mh);
/* The comm of id comm_id closes: deregister every region's handles on it. */
void tpx__regions_forget_comm(tpx_engine_t *e, int comm_id);

/* ---- export.c ---- */
struct tpx_export *tpx__export_find(tpx_engine_t *e, uint64_t key);
/* Enter export x (its key fresh) into e's table; TPX_ERR_NO_MEMORY if the
 * table cannot grow. Lock held. */
tpx_status_t tpx__export_insert(tpx_engine_t *e, struct tpx_export *x);
/* Take x out of e's table (the caller frees it). Lock held. */
void tpx__export_remove(tpx_engine_t *e, struct tpx_export *x);
/* tpx_region_export under the lock: r's bytes [offset, offset + len) (len
 * 0: to r's end) get a fresh key, described in *desc; logs a refusal. */
tpx_status_t tpx__export_new(tpx_region_t *r, size_t offset, size_t len, tpx_rdesc_t *desc);
/* tpx_region_unexport under the lock: r's export of `key` goes;
 * TPX_ERR_NOT_FOUND (not logged) when r has none (a second unexport). */
tpx_status_t tpx__export_drop(tpx_region_t *r, uint64_t key);
void tpx__region_exports_drop(tpx_region_t *r);
void tpx__exports_fini(tpx_engine_t *e);

#endif
