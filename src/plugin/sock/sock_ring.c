/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_ring.c - where a data connection's staging blocks go in its pinned
 * ring (sock_cuda.c): bookkeeping only, no CUDA, no memory.
 *
 * Blocks are numbered in the order they take space and free it in the
 * same order; block b, while it holds space, is entry b % TPX_SOCK_RING_BLKS.
 * Positions only grow (a byte's place in the ring is pos % bytes). The
 * ring is cut into segments of the largest block and a block never
 * straddles two: one that would starts the next segment. So large blocks
 * sit in fixed, aligned slots and small ones pack, and no block runs past
 * the ring's end. The process's rings together stay near a budget: past
 * it, a new ring gets two segments, not its full size.
 */
#include "sock.h"

void tpx__sock_ring_init(tpx_sock_ring_t *r, uint32_t ring, uint32_t block)
{
    *r = (tpx_sock_ring_t){0};
    r->seg = TPX_MAX(TPX_MIN(block, ring / 2) & ~4095u, TPX_SOCK_RING_MIN_SEG);
    r->bytes = TPX_MAX(ring / r->seg, 2u) * r->seg;
}

uint64_t tpx__sock_ring_place(const tpx_sock_ring_t *r, uint64_t pos, uint32_t n)
{
    uint64_t off = pos % r->seg;
    return off + n > r->seg ? pos - off + r->seg : pos;
}

int tpx__sock_ring_fit(tpx_sock_ring_t *r, uint64_t live, uint64_t b, uint64_t pos, uint32_t n,
                       uint64_t *at)
{
    if (b - live >= TPX_SOCK_RING_BLKS)
        return 0;
    uint64_t p = tpx__sock_ring_place(r, pos, n);
    if (live != b && p + n - r->at[live % TPX_SOCK_RING_BLKS] > r->bytes)
        return 0;
    /* Entry b is free: block b - TPX_SOCK_RING_BLKS is before `live`. A
     * later fit that measures from block b (b == live then) reads it. */
    r->at[b % TPX_SOCK_RING_BLKS] = p;
    *at = p;
    return 1;
}

uint64_t tpx__sock_ring_take(tpx_sock_ring_t *r, uint32_t n)
{
    uint64_t at = tpx__sock_ring_place(r, r->put, n);
    r->at[r->next % TPX_SOCK_RING_BLKS] = at;
    r->put = at + n;
    r->next++;
    return at;
}

void tpx__sock_ring_init_booked(tpx_sock_ring_t *r, _Atomic uint64_t *booked, uint64_t budget,
                                uint32_t ring, uint32_t block)
{
    tpx__sock_ring_init(r, ring, block);
    uint64_t was = atomic_fetch_add(booked, r->bytes);
    if (was + r->bytes > budget && r->bytes > 2 * r->seg) {
        atomic_fetch_sub(booked, r->bytes);
        tpx__sock_ring_init(r, 2 * r->seg, block); /* same segments, two of them */
        atomic_fetch_add(booked, r->bytes);
    }
}

void tpx__sock_ring_unbook(const tpx_sock_ring_t *r, _Atomic uint64_t *booked)
{
    atomic_fetch_sub(booked, r->bytes);
}
