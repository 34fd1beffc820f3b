/* SPDX-License-Identifier: Apache-2.0 */
/*
 * side.h - one engine on 127.0.0.1 with one exported host region, for the
 * one-sided tests (test_rma.c, test_sec.c): open, close, and load another
 * side's metadata as a remote. Header-only: each test program includes it
 * once.
 */
#ifndef TPX_TESTS_ENGINE_SIDE_H
#define TPX_TESTS_ENGINE_SIDE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tpx/tpx.h"

typedef struct {
    tpx_engine_t *e;
    unsigned char *mem; /* size bytes, 4 KiB-aligned, filled from the name's first byte */
    size_t size;
    tpx_region_t *r;    /* mem, registered */
    tpx_rdesc_t d;      /* all of r, exported */
} side_t;

/* A xorshift pattern of n bytes from `seed`. */
static inline void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p[i] = (unsigned char)s;
    }
}

/* notif_queue 0: TPX_NOTIF_QUEUE; progress_thread 0: the caller drives
 * progress (tpx_progress). -1 on any failure. */
static inline int side_open_ex(side_t *s, const char *name, size_t size, int notif_queue,
                               int progress_thread)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.bind_addr = "127.0.0.1";
    p.port = TPX_PORT_EPHEMERAL;
    p.name = name;
    p.notif_queue = notif_queue;
    p.progress_thread = progress_thread;
    /* TPX_CHUNK_BYTES set just before this call applies to this engine: the
     * process reads its TPX_* settings only once, so pass it as a parameter
     * (other settings stay the process's) */
    const char *cb = getenv("TPX_CHUNK_BYTES");
    if (cb != NULL) {
        char *end;
        unsigned long long v = strtoull(cb, &end, 10);
        p.chunk_bytes = (size_t)(*end == 'K' ? v << 10 : *end == 'M' ? v << 20 : v);
    }
    memset(s, 0, sizeof(*s));
    if (tpx_engine_create(&p, &s->e) != TPX_OK)
        return -1;
    s->size = size;
    s->mem = aligned_alloc(4096, size);
    if (s->mem == NULL)
        return -1;
    fill(s->mem, size, (uint64_t)name[0]);
    if (tpx_mem_register(s->e, s->mem, size, TPX_MEM_HOST, &s->r) != TPX_OK ||
        tpx_region_export(s->r, 0, 0, &s->d) != TPX_OK)
        return -1;
    return 0;
}

/* With the engine's progress thread. */
static inline int side_open(side_t *s, const char *name, size_t size, int notif_queue)
{
    return side_open_ex(s, name, size, notif_queue, 1);
}

static inline void side_close(side_t *s)
{
    tpx_engine_destroy(s->e);
    free(s->mem);
}

/* `from` loads the metadata of `to`; NULL on failure. */
static inline tpx_remote_t *load(side_t *from, side_t *to)
{
    unsigned char blob[TPX_METADATA_MAX];
    size_t len = sizeof(blob);
    tpx_remote_t *rm = NULL;
    if (tpx_engine_get_metadata(to->e, blob, &len) != TPX_OK ||
        tpx_remote_load(from->e, blob, len, &rm) != TPX_OK)
        return NULL;
    return rm;
}

#endif
