/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sock_ring.c - the staging ring's bookkeeping (sock_ring.c): where
 * the built-in transport puts the blocks of CUDA pieces in a connection's
 * pinned ring.
 *
 * Checked against a model that remembers every block's place:
 *  - a block never straddles two segments, never runs past the ring's end,
 *    and never overlaps a block that still holds space;
 *  - a block is refused only when it does not fit: the span from the
 *    oldest block holding space to its end would pass the ring's size, or
 *    32 blocks hold space. A receive plans several blocks before it takes
 *    any, measuring each from the oldest block holding space; when that is
 *    the plan's own first block, its place must be the planned one (an
 *    empty ring once measured from a stale entry and took one 512 KiB block
 *    of a 1 MiB piece per read instead of two);
 *  - large blocks sit at segment starts after small ones (aligned copies).
 * Random sequences of block sizes, partial takes (a read that got only
 * part of its plan) and frees, over several ring shapes. And the process's
 * budget of pinned rings (TPX_SOCK_CUDA_PINNED): full rings while they fit,
 * two segments past it, every byte unbooked again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/sock/sock.h"

#define KiB  1024u
#define MAXB 200000 /* blocks per run */

static int fails;
static uint64_t pos_of[MAXB];
static uint32_t len_of[MAXB];

#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "test_sock_ring: FAIL: " __VA_ARGS__);                                 \
            fputc('\n', stderr);                                                                   \
            fails++;                                                                               \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Would block b (n bytes after pos) fit beside blocks [live, b), by the model? */
static int model_fits(const tpx_sock_ring_t *r, uint64_t live, uint64_t b, uint64_t pos, uint32_t n)
{
    if (b - live >= TPX_SOCK_RING_BLKS)
        return 0;
    uint64_t p = tpx__sock_ring_place(r, pos, n);
    return live == b || p + n - pos_of[live] <= r->bytes;
}

/* One run: `steps` random plans / frees on a ring of `ring` bytes with
 * blocks up to `block`. */
static void run(uint32_t ring, uint32_t block, int steps, int small_only)
{
    tpx_sock_ring_t r;
    tpx__sock_ring_init(&r, ring, block);
    CHECK(r.seg >= 64 * KiB && r.seg % 4096 == 0 && r.seg <= TPX_MAX(ring / 2, 64 * KiB),
          "ring %u block %u: segment %u", ring, block, r.seg);
    CHECK(r.bytes % r.seg == 0 && r.bytes >= 2 * r.seg && r.bytes <= TPX_MAX(ring, 128 * KiB),
          "ring %u block %u: %u bytes", ring, block, r.bytes);
    uint64_t live = 0; /* the oldest block holding space */
    for (int s = 0; s < steps && r.next + 40 < MAXB; s++) {
        if (rnd(3) == 0 || r.next - live == TPX_SOCK_RING_BLKS) { /* free some, oldest first */
            uint64_t k = rnd(4) == 0 ? r.next - live : rnd((uint32_t)(r.next - live) + 1);
            live += k;
            continue;
        }
        /* A plan of up to 6 blocks (a receive's read), sizes as pieces cut them. */
        int want = 1 + (int)rnd(6), planned = 0;
        uint32_t n[6];
        uint64_t at[6], pos = r.put;
        for (int i = 0; i < want; i++) {
            uint32_t cap = small_only ? r.seg / 4 : r.seg;
            n[i] = rnd(2) ? cap : 4096 * (1 + rnd(cap / 4096));
            if (rnd(8) == 0)
                n[i] = 1 + rnd(cap); /* a piece's odd tail */
            uint64_t b = r.next + (uint64_t)i;
            int fit = tpx__sock_ring_fit(&r, live, b, pos, n[i], &at[i]);
            CHECK(fit == model_fits(&r, live, b, pos, n[i]),
                  "ring %u seg %u: block %llu (%u bytes, %llu blocks held) %s but %s", r.bytes,
                  r.seg, (unsigned long long)b, n[i], (unsigned long long)(b - live),
                  fit ? "fit" : "was refused", fit ? "does not fit" : "fits");
            if (!fit)
                break;
            pos_of[b] = at[i]; /* planned: where a later block of the plan measures from */
            pos = at[i] + n[i];
            planned++;
        }
        /* Take all of the plan or the first part of it, at the planned places. */
        int take = planned == 0 ? 0 : rnd(3) ? planned : 1 + (int)rnd((uint32_t)planned);
        for (int i = 0; i < take; i++) {
            uint64_t b = r.next, p = tpx__sock_ring_take(&r, n[i]);
            CHECK(p == at[i], "block %llu taken at %llu, planned at %llu", (unsigned long long)b,
                  (unsigned long long)p, (unsigned long long)at[i]);
            CHECK(p % r.seg + n[i] <= r.seg, "block %llu (%u bytes at %llu) straddles segments",
                  (unsigned long long)b, n[i], (unsigned long long)p);
            CHECK(p % r.bytes + n[i] <= r.bytes, "block %llu runs past the ring's end",
                  (unsigned long long)b);
            if (n[i] == r.seg)
                CHECK(p % r.seg == 0, "a full-size block at %llu is not aligned",
                      (unsigned long long)p);
            /* no overlap with any block still holding space */
            uint64_t lo = p % r.bytes, hi = lo + n[i];
            for (uint64_t o = live; o < b; o++) {
                uint64_t olo = pos_of[o] % r.bytes, ohi = olo + len_of[o];
                CHECK(hi <= olo || ohi <= lo, "block %llu overlaps block %llu",
                      (unsigned long long)b, (unsigned long long)o);
            }
            pos_of[b] = p;
            len_of[b] = n[i];
        }
    }
}

/* The case that was wrong: an empty ring after many blocks, a 1 MiB piece
 * in two 512 KiB blocks planned at once. */
static void empty_ring_plan(void)
{
    tpx_sock_ring_t r;
    tpx__sock_ring_init(&r, 2048 * KiB, 512 * KiB);
    for (int i = 0; i < 80; i++)
        (void)tpx__sock_ring_take(&r, i % 5 == 0 ? 128 * KiB : 512 * KiB);
    uint64_t live = r.next, at0, at1; /* every block before is done */
    CHECK(tpx__sock_ring_fit(&r, live, r.next, r.put, 512 * KiB, &at0), "first block refused");
    CHECK(tpx__sock_ring_fit(&r, live, r.next + 1, at0 + 512 * KiB, 512 * KiB, &at1),
          "an empty 2 MiB ring refused the second 512 KiB block of a plan");
    CHECK(at0 % (512 * KiB) == 0 && at1 == at0 + 512 * KiB, "blocks not aligned: %llu %llu",
          (unsigned long long)at0, (unsigned long long)at1);
    /* four fit, a fifth does not */
    uint64_t at2, at3, at4;
    CHECK(tpx__sock_ring_fit(&r, live, r.next + 2, at1 + 512 * KiB, 512 * KiB, &at2) &&
              tpx__sock_ring_fit(&r, live, r.next + 3, at2 + 512 * KiB, 512 * KiB, &at3),
          "four 512 KiB blocks do not fit in 2 MiB");
    CHECK(!tpx__sock_ring_fit(&r, live, r.next + 4, at3 + 512 * KiB, 512 * KiB, &at4),
          "a fifth 512 KiB block fit in 2 MiB");
    /* 128 KiB then 512 KiB: the large one starts the next segment */
    tpx__sock_ring_init(&r, 2048 * KiB, 512 * KiB);
    (void)tpx__sock_ring_take(&r, 128 * KiB);
    uint64_t p = tpx__sock_ring_take(&r, 512 * KiB);
    CHECK(p == 512 * KiB, "a 512 KiB block after a 128 KiB one at %llu", (unsigned long long)p);
    CHECK(tpx__sock_ring_take(&r, 64 * KiB) == 1024 * KiB &&
              tpx__sock_ring_take(&r, 64 * KiB) == 1088 * KiB,
          "small blocks do not pack");
}

/* Rings booked against a budget: full size while the total fits, then two
 * segments of the same size; freeing one makes room again. */
static void budget(void)
{
    _Atomic uint64_t booked = 0;
    tpx_sock_ring_t r[4];
    tpx__sock_ring_init_booked(&r[0], &booked, 9 * 1024 * KiB, 4096 * KiB, 512 * KiB);
    CHECK(r[0].bytes == 4096 * KiB && r[0].seg == 512 * KiB, "budget: first ring %u", r[0].bytes);
    tpx__sock_ring_init_booked(&r[1], &booked, 9 * 1024 * KiB, 4096 * KiB, 512 * KiB);
    CHECK(r[1].bytes == 4096 * KiB, "budget: second ring %u (8 of 9 MiB)", r[1].bytes);
    tpx__sock_ring_init_booked(&r[2], &booked, 9 * 1024 * KiB, 4096 * KiB, 512 * KiB);
    CHECK(r[2].bytes == 1024 * KiB && r[2].seg == 512 * KiB,
          "budget: third ring %u, segment %u (past the budget: two segments)", r[2].bytes,
          r[2].seg);
    CHECK(booked == 9 * 1024 * KiB, "budget: booked %llu", (unsigned long long)booked);
    tpx__sock_ring_unbook(&r[0], &booked);
    tpx__sock_ring_init_booked(&r[3], &booked, 9 * 1024 * KiB, 4096 * KiB, 512 * KiB);
    CHECK(r[3].bytes == 4096 * KiB, "budget: a freed ring's room goes to the next (%u)", r[3].bytes);
    for (int i = 1; i < 4; i++)
        tpx__sock_ring_unbook(&r[i], &booked);
    CHECK(booked == 0, "budget: %llu bytes left booked", (unsigned long long)booked);
    /* 0: every ring two segments; one already that small stays as it is */
    tpx__sock_ring_init_booked(&r[0], &booked, 0, 4096 * KiB, 512 * KiB);
    tpx__sock_ring_init_booked(&r[1], &booked, 0, 200000, 512 * KiB);
    CHECK(r[0].bytes == 1024 * KiB && r[1].bytes == 2 * 96 * KiB,
          "budget 0: rings %u and %u", r[0].bytes, r[1].bytes);
}

int main(void)
{
    empty_ring_plan();
    budget();
    static const uint32_t shapes[][2] = {
        {2048 * KiB, 512 * KiB}, /* the defaults */
        {200000, 512 * KiB},     /* not whole segments: 2 x 96 KiB */
        {128 * KiB, 4096 * KiB}, /* the smallest ring */
        {4096 * KiB, 64 * KiB},  /* 64 segments: the 32-block limit binds */
        {3000000, 700000},       /* odd sizes */
        {64 * 1024 * KiB, 4096 * KiB},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int small = 0; small <= 1; small++) {
            memset(pos_of, 0, sizeof(pos_of));
            run(shapes[i][0], shapes[i][1], 20000, small);
        }
    if (fails)
        return 1;
    printf("test_sock_ring: ok\n");
    return 0;
}
