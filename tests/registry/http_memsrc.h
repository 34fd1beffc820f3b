/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_memsrc.h - an in-memory source for the registry's HTTP reader
 * (tpx__http_rd_t): each read hands out at most `step` bytes, so that a
 * response is parsed however the network would split it. Shared by
 * test_registry.c and the fuzz target tests/fuzz/fuzz_reg.c (header-only:
 * the fuzz targets are built from their sources alone).
 */
#ifndef TPX_TESTS_HTTP_MEMSRC_H
#define TPX_TESTS_HTTP_MEMSRC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "registry/registry.h"

typedef struct {
    const unsigned char *p; /* not owned: must outlive the reads */
    size_t n, off, step;
} http_memsrc_t;

static inline ssize_t http_memsrc_read(void *ctx, void *buf, size_t len, uint64_t deadline_ns)
{
    (void)deadline_ns;
    http_memsrc_t *s = ctx;
    size_t k = s->n - s->off;
    if (k > len)
        k = len;
    if (k > s->step)
        k = s->step;
    memcpy(buf, s->p + s->off, k);
    s->off += k;
    return (ssize_t)k;
}

/* Make rd read the n bytes at p through s, step bytes at a time (0: 1). */
static inline void http_memsrc_attach(tpx__http_rd_t *rd, http_memsrc_t *s, const void *p, size_t n,
                                      size_t step)
{
    *s = (http_memsrc_t){p, n, 0, step ? step : 1};
    memset(rd, 0, sizeof(*rd));
    rd->read = http_memsrc_read;
    rd->ctx = s;
}

#endif
