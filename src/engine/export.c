/* SPDX-License-Identifier: Apache-2.0 */
/*
 * export.c - the owner's table of exported memory, and region descriptors.
 *
 * tpx_region_export() (api_mem.c, then tpx__export_new) gives a byte range
 * of a region a fresh random 64-bit key. The table maps keys to exports (open addressing, linear
 * probing, tombstones; at most half full). Every request of a peer names
 * keys and ranges; rma.c looks each key up here and checks the range and
 * that the region is still registered before a byte moves. An export
 * leaves the table when it is unexported or its region is released.
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "mem.h"

#define TOMBSTONE ((struct tpx_export *)(uintptr_t)1)

typedef struct {
    struct tpx_export **slot;
    uint32_t cap, used; /* used: live + tombstones */
} xtab_t;

static uint32_t key_hash(uint64_t k, uint32_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k & (cap - 1);
}

static tpx_status_t xtab_grow(xtab_t *t)
{
    uint32_t cap = t->cap ? t->cap * 2 : 64;
    struct tpx_export **ns = calloc(cap, sizeof(*ns));
    if (ns == NULL)
        return TPX_ERR_NO_MEMORY;
    uint32_t used = 0;
    for (uint32_t i = 0; i < t->cap; i++) {
        struct tpx_export *x = t->slot[i];
        if (x == NULL || x == TOMBSTONE)
            continue;
        uint32_t h = key_hash(x->key, cap);
        while (ns[h] != NULL)
            h = (h + 1) & (cap - 1);
        ns[h] = x;
        used++;
    }
    free(t->slot);
    t->slot = ns;
    t->cap = cap;
    t->used = used;
    return TPX_OK;
}

struct tpx_export *tpx__export_find(tpx_engine_t *e, uint64_t key)
{
    xtab_t *t = e->xtab;
    if (t == NULL || t->cap == 0 || key == 0)
        return NULL;
    for (uint32_t h = key_hash(key, t->cap), n = 0; n < t->cap; h = (h + 1) & (t->cap - 1), n++) {
        struct tpx_export *x = t->slot[h];
        if (x == NULL)
            return NULL;
        if (x != TOMBSTONE && x->key == key)
            return x;
    }
    return NULL;
}

tpx_status_t tpx__export_insert(tpx_engine_t *e, struct tpx_export *x)
{
    xtab_t *t = e->xtab;
    if (t == NULL) {
        t = calloc(1, sizeof(*t));
        if (t == NULL)
            return TPX_ERR_NO_MEMORY;
        e->xtab = t;
    }
    if ((t->used + 1) * 2 > t->cap) {
        tpx_status_t st = xtab_grow(t);
        if (st != TPX_OK)
            return st;
    }
    uint32_t h = key_hash(x->key, t->cap);
    while (t->slot[h] != NULL && t->slot[h] != TOMBSTONE)
        h = (h + 1) & (t->cap - 1);
    if (t->slot[h] == NULL)
        t->used++;
    t->slot[h] = x;
    return TPX_OK;
}

void tpx__export_remove(tpx_engine_t *e, struct tpx_export *x)
{
    xtab_t *t = e->xtab;
    for (uint32_t h = key_hash(x->key, t->cap), n = 0; n < t->cap; h = (h + 1) & (t->cap - 1), n++) {
        if (t->slot[h] == NULL)
            return;
        if (t->slot[h] == x) {
            t->slot[h] = TOMBSTONE;
            return;
        }
    }
}

tpx_status_t tpx__export_new(tpx_region_t *r, size_t offset, size_t len, tpx_rdesc_t *desc)
{
    tpx_engine_t *e = r->e;
    if (r->dead || r->internal) {
        TPX_ERROR("tpx_region_export: the region is deregistered");
        return TPX_ERR_INVALID_ARG;
    }
    if (len == 0 && offset <= r->len)
        len = r->len - offset;
    if (offset >= r->len || len > r->len - offset) {
        TPX_ERROR("tpx_region_export: bytes [%zu, +%zu) are outside the region of %zu bytes",
                  offset, len, r->len);
        return TPX_ERR_INVALID_ARG;
    }
    struct tpx_export *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return TPX_ERR_NO_MEMORY;
    tpx_status_t st;
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
    tpx_rdesc_fields_t f = {.mem_type = (uint8_t)r->type, .engine_id = tpx__ident_engine_id(e),
                            .key = x->key,
                            .addr = (uint64_t)(r->base + offset), .len = len,
                            .gpu = r->cuda_dev};
    tpx__rdesc_encode(&f, desc->bytes);
    return TPX_OK;

err_free:
    free(x);
    return st;
}

tpx_status_t tpx__export_drop(tpx_region_t *r, uint64_t key)
{
    struct tpx_export **pp = &r->exports;
    while (*pp != NULL && (*pp)->key != key)
        pp = &(*pp)->next_in_region;
    if (*pp == NULL) /* not an error worth a log line: a second unexport */
        return TPX_ERR_NOT_FOUND;
    struct tpx_export *x = *pp;
    *pp = x->next_in_region;
    tpx__export_remove(r->e, x);
    r->e->nexports--;
    free(x);
    return TPX_OK;
}

void tpx__region_exports_drop(tpx_region_t *r)
{
    tpx_engine_t *e = r->e;
    while (r->exports != NULL) {
        struct tpx_export *x = r->exports;
        r->exports = x->next_in_region;
        tpx__export_remove(e, x);
        e->nexports--;
        free(x);
    }
}

void tpx__exports_fini(tpx_engine_t *e)
{
    xtab_t *t = e->xtab;
    if (t != NULL) {
        free(t->slot);
        free(t);
    }
    e->xtab = NULL;
}
