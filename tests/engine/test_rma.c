/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rma.c - one-sided READ/WRITE, notifications, exports and metadata,
 * between two engines of one process over the built-in transport on
 * loopback (run plain and in strict TCPX mode by ctest).
 *
 *   test_rma basic | notif | reject | badargs | dereg | twoway | prepost |
 *            coalesce | overflow | metadata | ... | pack | packmany | packfail | relfree
 *
 * Every transfer is byte-verified against a model of both memories: the
 * destination must equal its old bytes with the blocks copied in, and the
 * source (and everything outside the blocks) must be untouched.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "common/config.h"
#include "common/tsan.h"
#include "engine/engine.h"
#include "engine/faults.h" /* the ctrlready test, as engines that predate READY's flags */
#include "engine/peer.h"   /* the hostile test sends control messages out of order */
#include "engine/rma.h"    /* struct tpx_prep: the hostile test corrupts a list */
#include "engine/remote.h"
#include "engine/wire.h"
#include "net/net.h"   /* the packsize test: whether the plugin takes vectored messages */
#include "side.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

typedef struct {
    size_t loff, roff, len;
} blk_t;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    return test_xorshift64(&rng_state);
}
static size_t rnd_in(size_t lo, size_t hi) { return lo + (size_t)(rnd() % (hi - lo + 1)); }


/* n blocks in [4 KiB, maxblk] at random offsets, each in its own slot of
 * the buffer on both sides (slots permuted), so none overlap. */
static void make_blocks(blk_t *b, size_t n, size_t size, size_t maxblk)
{
    size_t slot = size / n;
    size_t *perm = malloc(n * sizeof(*perm));
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rnd() % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = rnd_in(4096, maxblk < slot ? maxblk : slot);
        b[i].len = len;
        b[i].loff = i * slot + rnd_in(0, slot - len);
        b[i].roff = perm[i] * slot + rnd_in(0, slot - len);
    }
    free(perm);
}

static tpx_iov_t *make_iov(side_t *l, side_t *r, const blk_t *b, size_t n)
{
    tpx_iov_t *v = malloc(n * sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = (tpx_iov_t){.local = l->r, .local_offset = b[i].loff, .remote = &r->d,
                           .remote_offset = b[i].roff, .len = b[i].len};
    return v;
}

/* Run one transfer A -> B (WRITE) or A <- B (READ) and check both memories. */
static int run_checked(side_t *a, side_t *b, tpx_remote_t *rm, tpx_op_t op, const blk_t *blk,
                       size_t n, const char *what)
{
    unsigned char *want_a = malloc(a->size), *want_b = malloc(b->size);
    memcpy(want_a, a->mem, a->size);
    memcpy(want_b, b->mem, b->size);
    for (size_t i = 0; i < n; i++) {
        if (op == TPX_OP_WRITE)
            memcpy(want_b + blk[i].roff, a->mem + blk[i].loff, blk[i].len);
        else
            memcpy(want_a + blk[i].loff, b->mem + blk[i].roff, blk[i].len);
    }
    tpx_iov_t *v = make_iov(a, b, blk, n);
    tpx_xfer_t *x = NULL;
    tpx_status_t st = tpx_rma(rm, op, v, n, NULL, 0, &x);
    size_t bytes = 0;
    if (st == TPX_OK)
        st = tpx_xfer_wait(x, 60000, &bytes);
    int bad = st != TPX_OK || memcmp(a->mem, want_a, a->size) != 0 ||
              memcmp(b->mem, want_b, b->size) != 0;
    if (bad)
        fprintf(stderr, "%s %s of %zu blocks: %s, a %s, b %s\n", what,
                op == TPX_OP_READ ? "READ" : "WRITE", n, tpx_status_string(st),
                memcmp(a->mem, want_a, a->size) ? "WRONG" : "ok",
                memcmp(b->mem, want_b, b->size) ? "WRONG" : "ok");
    tpx_xfer_release(x);
    free(v);
    free(want_a);
    free(want_b);
    return bad ? -1 : 0;
}

static int t_basic(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 64u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 64u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    static const struct {
        size_t n, maxblk;
    } cases[] = {{1, 2u << 20}, {2, 2u << 20}, {10, 2u << 20}, {100, 512u << 10},
                 {1000, 64u << 10}, {10000, 6u << 10}};
    blk_t *blk = malloc(10000 * sizeof(*blk));
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int op = TPX_OP_READ; op <= TPX_OP_WRITE; op++) {
            make_blocks(blk, cases[c].n, a.size, cases[c].maxblk);
            fill(a.mem, a.size, rnd());
            fill(b.mem, b.size, rnd());
            EXPECT(run_checked(&a, &b, rm, (tpx_op_t)op, blk, cases[c].n, "basic") == 0);
        }
    }
    tpx_engine_counters_t ca = {.size = sizeof(ca)}, cb = {.size = sizeof(cb)};
    EXPECT(tpx_engine_counters(a.e, &ca) == TPX_OK && tpx_engine_counters(b.e, &cb) == TPX_OK);
    EXPECT_EQ(cb.rma_served, 12);
    EXPECT_EQ(cb.rma_rejected, 0);
    EXPECT_EQ(ca.rma_served, 0);
    free(blk);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Wait for one notification on s (5 s). */
static int notif_wait(side_t *s, tpx_notif_t *out)
{
    for (int i = 0; i < 50000; i++) {
        size_t n = 0;
        tpx_status_t st = tpx_engine_get_notifs(s->e, out, 1, &n);
        if (st != TPX_OK)
            return -1;
        if (n == 1)
            return 0;
        usleep(100);
    }
    return -1;
}

static int t_notif(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 4u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 4u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    enum { NB = 64, ITERS = 150 };
    blk_t blk[NB];
    make_blocks(blk, NB, a.size, 32u << 10);
    tpx_iov_t *v = make_iov(&a, &b, blk, NB);
    tpx_prep_t *pw, *pr;
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_WRITE, v, NB, &pw) == TPX_OK);
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, v, NB, &pr) == TPX_OK);
    int early = 0;
    for (int it = 0; it < ITERS && !test_failed(); it++) {
        /* WRITE: when B sees the notification, its blocks hold the new bytes. */
        unsigned char val = (unsigned char)(it * 7 + 1);
        for (int i = 0; i < NB; i++)
            memset(a.mem + blk[i].loff, val, blk[i].len);
        char msg[32];
        int ml = snprintf(msg, sizeof(msg), "w%d", it);
        tpx_xfer_t *x;
        EXPECT(tpx_xfer_post(pw, msg, (size_t)ml, 0, &x) == TPX_OK);
        tpx_notif_t nt;
        EXPECT(notif_wait(&b, &nt) == 0);
        EXPECT(nt.len == (size_t)ml && memcmp(nt.msg, msg, nt.len) == 0);
        /* without keys an inbound peer is not proven: its name comes with "?" */
        const char *idm = getenv("TPX_IDENTITY");
        EXPECT(strcmp(nt.from, idm != NULL && strcmp(idm, "dial") == 0 ? "?A" : "A") == 0);
        for (int i = 0; i < NB; i++)
            for (size_t k = 0; k < blk[i].len; k++)
                if (b.mem[blk[i].roff + k] != val) {
                    early++;
                    break;
                }
        EXPECT(tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
        tpx_xfer_release(x);
        /* READ: B is told its blocks were read only after A has them; B
         * then overwrites them at once, and A's copy must be the old one. */
        unsigned char rv = (unsigned char)(it * 13 + 5);
        for (int i = 0; i < NB; i++)
            memset(b.mem + blk[i].roff, rv, blk[i].len);
        ml = snprintf(msg, sizeof(msg), "r%d", it);
        EXPECT(tpx_xfer_post(pr, msg, (size_t)ml, 0, &x) == TPX_OK);
        EXPECT(notif_wait(&b, &nt) == 0);
        EXPECT(nt.len == (size_t)ml && memcmp(nt.msg, msg, nt.len) == 0);
        for (int i = 0; i < NB; i++)
            memset(b.mem + blk[i].roff, 0xEE, blk[i].len);
        EXPECT(tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
        tpx_xfer_release(x);
        for (int i = 0; i < NB; i++)
            for (size_t k = 0; k < blk[i].len; k++)
                if (a.mem[blk[i].loff + k] != rv) {
                    early++;
                    break;
                }
    }
    EXPECT_EQ(early, 0);
    /* A WRITE's notification travels with its request (one to many parts)
     * and the owner delivers it before it answers: when the WRITE is done
     * here, B holds it already. Standalone ones in between do not mix. */
    enum { NW = 8 };
    static const size_t lens[NW] = {0, 1, 39, 40, 41, 200, 1023, TPX_NOTIF_MAX};
    static tpx_notif_t got[2 * NW];
    unsigned char wmsg[NW][TPX_NOTIF_MAX];
    tpx_xfer_t *wx[NW];
    tpx_prep_t *pwi[NW]; /* in flight together: each WRITE to blocks of its own (tpx.h) */
    for (int i = 0; i < NW; i++)
        EXPECT(tpx_xfer_prepare(rm, TPX_OP_WRITE, v + i * (NB / NW), NB / NW, &pwi[i]) ==
               TPX_OK);
    for (int i = 0; i < NW; i++) {
        fill(wmsg[i], lens[i], (uint64_t)i + 100);
        EXPECT(tpx_xfer_post(pwi[i], wmsg[i], lens[i], 0, &wx[i]) == TPX_OK);
        char sm[4];
        EXPECT(tpx_notif_send(rm, sm, (size_t)snprintf(sm, sizeof(sm), "s%d", i)) == TPX_OK);
    }
    for (int i = 0; i < NW; i++) {
        EXPECT(tpx_xfer_wait(wx[i], 10000, NULL) == TPX_OK);
        tpx_xfer_release(wx[i]);
        tpx_prep_release(pwi[i]);
    }
    size_t ngot = 0, nw_at_once = 0;
    EXPECT(tpx_engine_get_notifs(b.e, got, 2 * NW, &ngot) == TPX_OK);
    for (size_t k = 0; k < ngot; k++)
        nw_at_once += got[k].len != 2;
    EXPECT_EQ(nw_at_once, NW);
    while (ngot < 2 * NW && !test_failed())
        EXPECT(notif_wait(&b, &got[ngot++]) == 0);
    int seen_w[NW] = {0}, seen_s[NW] = {0};
    for (size_t k = 0; k < ngot; k++) {
        if (got[k].len == 2 && got[k].msg[0] == 's') {
            seen_s[got[k].msg[1] - '0']++;
            continue;
        }
        for (int i = 0; i < NW; i++)
            if (got[k].len == lens[i] && memcmp(got[k].msg, wmsg[i], lens[i]) == 0)
                seen_w[i]++;
    }
    for (int i = 0; i < NW; i++) {
        EXPECT_EQ(seen_w[i], 1);
        EXPECT_EQ(seen_s[i], 1);
    }
    /* standalone notifications, the largest size, ordered */
    unsigned char big[TPX_NOTIF_MAX];
    fill(big, sizeof(big), 77);
    EXPECT(tpx_notif_send(rm, big, sizeof(big)) == TPX_OK);
    EXPECT(tpx_notif_send(rm, "", 0) == TPX_OK);
    EXPECT(tpx_notif_send(rm, NULL, 0) == TPX_OK); /* documented: NULL only with 0 */
    tpx_notif_t nt;
    EXPECT(notif_wait(&b, &nt) == 0 && nt.len == sizeof(big) && memcmp(nt.msg, big, nt.len) == 0);
    EXPECT(notif_wait(&b, &nt) == 0 && nt.len == 0);
    EXPECT(notif_wait(&b, &nt) == 0 && nt.len == 0);
    tpx_prep_release(pw);
    tpx_prep_release(pr);
    free(v);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* A descriptor with one field changed (its checksum recomputed). */
static tpx_rdesc_t forge(const tpx_rdesc_t *d, uint64_t add_len, uint64_t xor_key)
{
    tpx_rdesc_fields_t f;
    tpx_rdesc_t out;
    if (tpx__rdesc_decode(d->bytes, &f) != TPX_OK)
        abort();
    f.len += add_len;
    f.key ^= xor_key;
    tpx__rdesc_encode(&f, out.bytes);
    return out;
}

static int t_reject(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 8u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 8u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    /* a sub-range export: [1 MiB, 2 MiB) of B */
    tpx_rdesc_t sub;
    EXPECT(tpx_region_export(b.r, 1u << 20, 1u << 20, &sub) == TPX_OK);
    /* a second region, exported, then deregistered */
    unsigned char *m2 = aligned_alloc(4096, 1u << 20);
    tpx_region_t *r2;
    tpx_rdesc_t d2;
    EXPECT(tpx_mem_register(b.e, m2, 1u << 20, TPX_MEM_HOST, &r2) == TPX_OK);
    EXPECT(tpx_region_export(r2, 0, 0, &d2) == TPX_OK);
    tpx_mem_deregister(r2);
    tpx_rdesc_t past_end = forge(&b.d, 4096, 0), past_sub = forge(&sub, 64 << 10, 0),
                bad_key = forge(&b.d, 0, 1);
    struct {
        const tpx_rdesc_t *d;
        size_t roff, len;
        const char *what;
    } cases[] = {
        {&past_end, b.size - 4096, 8192, "past the end of the export"},
        {&past_sub, (1u << 20) - 4096, 32768, "past the end of a sub-range export"},
        {&bad_key, 0, 4096, "wrong key"},
        {&d2, 0, 4096, "deregistered region"},
    };
    unsigned char *snap_a = malloc(a.size), *snap_b = malloc(b.size);
    int n_rej = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int op = TPX_OP_READ; op <= TPX_OP_WRITE; op++) {
            memcpy(snap_a, a.mem, a.size);
            memcpy(snap_b, b.mem, b.size);
            /* a good block first, the bad one second: nothing at all moves */
            tpx_iov_t v[2] = {
                {.local = a.r, .local_offset = 0, .remote = &b.d, .remote_offset = 0, .len = 65536},
                {.local = a.r, .local_offset = 1u << 20, .remote = cases[c].d,
                 .remote_offset = cases[c].roff, .len = cases[c].len}};
            tpx_xfer_t *x = NULL;
            tpx_status_t st = tpx_rma(rm, (tpx_op_t)op, v, 2, "n", 1, &x);
            if (st == TPX_OK)
                st = tpx_xfer_wait(x, 10000, NULL);
            tpx_xfer_release(x);
            if (st != TPX_ERR_ACCESS)
                fprintf(stderr, "%s (%s): %s\n", cases[c].what, op == 1 ? "READ" : "WRITE",
                        tpx_status_string(st));
            EXPECT(st == TPX_ERR_ACCESS);
            EXPECT(memcmp(snap_a, a.mem, a.size) == 0);
            EXPECT(memcmp(snap_b, b.mem, b.size) == 0);
            n_rej++;
        }
    }
    tpx_engine_counters_t cb = {.size = sizeof(cb)};
    EXPECT(tpx_engine_counters(b.e, &cb) == TPX_OK);
    EXPECT_EQ(cb.rma_rejected, n_rej);
    /* no notification for a refused transfer */
    size_t nn = 1;
    tpx_notif_t nt;
    EXPECT(tpx_engine_get_notifs(b.e, &nt, 1, &nn) == TPX_OK);
    EXPECT_EQ(nn, 0);
    /* the connection is still good: a valid transfer into the sub-range */
    blk_t ok = {.loff = 12345, .roff = 4000, .len = 100000};
    fill(a.mem, a.size, 5);
    memcpy(snap_b, b.mem, b.size);
    tpx_iov_t v = {.local = a.r, .local_offset = ok.loff, .remote = &sub,
                   .remote_offset = ok.roff, .len = ok.len};
    tpx_xfer_t *x;
    EXPECT(tpx_rma(rm, TPX_OP_WRITE, &v, 1, NULL, 0, &x) == TPX_OK);
    EXPECT(tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
    tpx_xfer_release(x);
    memcpy(snap_b + (1u << 20) + ok.roff, a.mem + ok.loff, ok.len);
    EXPECT(memcmp(snap_b, b.mem, b.size) == 0);
    free(snap_a);
    free(snap_b);
    free(m2);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

static int t_badargs(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 1u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    tpx_prep_t *pp;
    tpx_iov_t good = {.local = a.r, .local_offset = 0, .remote = &b.d, .remote_offset = 0,
                      .len = 4096};
    tpx_iov_t v;
    tpx_rdesc_t junk;
    memset(&junk, 0x5a, sizeof(junk));
#define BAD(field, value)                                                                          \
    do {                                                                                           \
        v = good;                                                                                  \
        v.field = value;                                                                           \
        EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, &v, 1, &pp) == TPX_ERR_INVALID_ARG);              \
    } while (0)
    BAD(len, 0);
    BAD(local, NULL);
    BAD(remote, NULL);
    BAD(remote, &junk);
    BAD(remote, &a.d); /* A's own descriptor: not of this remote */
    BAD(local_offset, a.size);
    BAD(local_offset, SIZE_MAX - 100);
    BAD(remote_offset, b.size - 100);
    BAD(remote_offset, SIZE_MAX);
#undef BAD
    /* Within a list: blocks naming one descriptor have it decoded once; a
     * bad block among them is refused all the same, whatever comes before
     * or after it; a copy of the good descriptor elsewhere is as good. */
    {
        enum { NL = 5 };
        tpx_rdesc_t copy = b.d;
        tpx_iov_t list[NL], l2[NL];
        for (int k = 0; k < NL; k++) {
            list[k] = good;
            list[k].local_offset = list[k].remote_offset = (size_t)k * 8192;
        }
        list[3].remote = &copy;
        for (int bad = 0; bad < 3; bad++) {
            for (int at = 0; at < NL; at++) {
                memcpy(l2, list, sizeof(list));
                if (bad == 0)
                    l2[at].remote = &junk;
                else if (bad == 1)
                    l2[at].remote = &a.d;
                else
                    l2[at].remote_offset = b.size - 100;
                EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, l2, NL, &pp) == TPX_ERR_INVALID_ARG);
            }
        }
        EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, list, NL, &pp) == TPX_OK);
        tpx_prep_release(pp);
    }
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, &good, 0, &pp) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_xfer_prepare(rm, (tpx_op_t)7, &good, 1, &pp) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_xfer_prepare(NULL, TPX_OP_READ, &good, 1, &pp) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, &good, 1, &pp) == TPX_OK);
    tpx_xfer_t *x;
    unsigned char big[TPX_NOTIF_MAX + 1] = {0};
    EXPECT(tpx_xfer_post(pp, big, sizeof(big), 0, &x) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_xfer_post(pp, NULL, 3, 0, &x) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_xfer_post(pp, NULL, 0, -1, &x) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_xfer_post(NULL, NULL, 0, 0, &x) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_notif_send(rm, big, sizeof(big)) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_region_export(a.r, a.size, 1, &junk) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_region_export(a.r, 0, a.size + 1, &junk) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_rdesc_info(&junk, NULL, NULL) == TPX_ERR_PROTOCOL);
    uint64_t addr = 0, len = 0;
    EXPECT(tpx_rdesc_info(&b.d, &addr, &len) == TPX_OK);
    EXPECT(addr == (uint64_t)(uintptr_t)b.mem && len == b.size);
    size_t n;
    EXPECT(tpx_engine_get_notifs(NULL, NULL, 0, &n) == TPX_ERR_INVALID_ARG);
    /* a deregistered local region: the preparation can no longer be posted */
    unsigned char *m2 = aligned_alloc(4096, 65536);
    tpx_region_t *r2;
    EXPECT(tpx_mem_register(a.e, m2, 65536, TPX_MEM_HOST, &r2) == TPX_OK);
    tpx_prep_t *p2;
    v = good;
    v.local = r2;
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, &v, 1, &p2) == TPX_OK);
    tpx_mem_deregister(r2);
    EXPECT(tpx_xfer_post(p2, NULL, 0, 0, &x) == TPX_ERR_INVALID_STATE);
    tpx_prep_release(p2);
    free(m2);
    /* the preparation still works */
    EXPECT(tpx_xfer_post(pp, NULL, 0, 0, &x) == TPX_OK);
    EXPECT(tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
    tpx_xfer_release(x);
    tpx_prep_release(pp);
    /* forget with a preparation alive: it fails cleanly, then frees */
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_WRITE, &good, 1, &pp) == TPX_OK);
    tpx_remote_release(rm);
    EXPECT(tpx_xfer_post(pp, NULL, 0, 0, &x) == TPX_ERR_INVALID_STATE);
    tpx_prep_release(pp);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* The owner deregisters memory a peer is reading: that transfer ends with
 * an error (no crash, the memory is freed at once), and the next transfer
 * connects again and works. */
static int t_dereg(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 256u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 4u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    int errors = 0;
    for (int round = 0; round < 6 && errors < 2; round++) {
        size_t big = 256u << 20;
        unsigned char *m = aligned_alloc(4096, big);
        memset(m, 0x11, big);
        tpx_region_t *r;
        tpx_rdesc_t d;
        EXPECT(tpx_mem_register(b.e, m, big, TPX_MEM_HOST, &r) == TPX_OK);
        EXPECT(tpx_region_export(r, 0, 0, &d) == TPX_OK);
        tpx_iov_t v[4];
        for (int i = 0; i < 4; i++)
            v[i] = (tpx_iov_t){.local = a.r, .local_offset = (size_t)(3 - i) * (64u << 20),
                               .remote = &d, .remote_offset = (size_t)i * (64u << 20),
                               .len = 64u << 20};
        tpx_xfer_t *x;
        EXPECT(tpx_rma(rm, TPX_OP_READ, v, 4, NULL, 0, &x) == TPX_OK);
        usleep((useconds_t)(round * 3000));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tpx_mem_deregister(r);
        memset(m, 0x22, big); /* the plugin no longer touches it */
        free(m);
        tpx_status_t st = tpx_xfer_wait(x, 20000, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("round %d: READ of a region deregistered under it: %s after %.1f ms\n", round,
               tpx_status_string(st), ms);
        EXPECT(st != TPX_INPROGRESS);
        if (st != TPX_OK)
            errors++;
        tpx_xfer_release(x);
        /* the next transfer works (connecting again if the peer failed) */
        blk_t blk = {.loff = 0, .roff = 100, .len = 1u << 20};
        fill(b.mem, b.size, (uint64_t)round);
        EXPECT(run_checked(&a, &b, rm, TPX_OP_READ, &blk, 1, "after dereg") == 0);
    }
    EXPECT(errors > 0);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* An export ends with tpx_region_unexport(), not only with its region:
 * two registrations share one region (the inner one inside the outer), the
 * outer one's export ends when that registration does (NIXL's
 * deregisterMem), and a peer can no longer reach its bytes while the inner
 * one's export still serves. */
static int t_unexport(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 1u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    size_t outer_len = 1u << 20, inner_off = 256u << 10, inner_len = 64u << 10;
    unsigned char *m = aligned_alloc(4096, outer_len);
    EXPECT(m != NULL);
    if (m == NULL)
        return 1;
    fill(m, outer_len, 9);
    tpx_region_t *outer = NULL, *inner = NULL;
    tpx_rdesc_t dout, din;
    EXPECT(tpx_mem_register(b.e, m, outer_len, TPX_MEM_HOST, &outer) == TPX_OK);
    EXPECT(tpx_mem_register(b.e, m + inner_off, inner_len, TPX_MEM_HOST, &inner) == TPX_OK);
    EXPECT(inner == outer); /* shared (the registration cache) */
    EXPECT(tpx_region_export(outer, 0, outer_len, &dout) == TPX_OK);
    EXPECT(tpx_region_export(inner, inner_off, inner_len, &din) == TPX_OK);
    if (test_failed())
        return 1;
    tpx_iov_t vo = {.local = a.r, .local_offset = 0, .remote = &dout, .remote_offset = 0,
                    .len = 4096};
    tpx_iov_t vi = {.local = a.r, .local_offset = 8192, .remote = &din, .remote_offset = 0,
                    .len = 4096};
    tpx_xfer_t *x = NULL;
    EXPECT(tpx_rma(rm, TPX_OP_READ, &vo, 1, NULL, 0, &x) == TPX_OK);
    EXPECT(x && tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
    tpx_xfer_release(x);
    EXPECT(memcmp(a.mem, m, 4096) == 0);
    /* the outer registration ends: its export with it */
    EXPECT(tpx_region_unexport(outer, &dout) == TPX_OK);
    tpx_mem_deregister(outer);
    EXPECT(tpx_region_unexport(inner, &dout) == TPX_ERR_NOT_FOUND); /* ended already */
    EXPECT(tpx_region_unexport(inner, &a.d) == TPX_ERR_INVALID_ARG); /* A's */
    tpx_rdesc_t junk;
    memset(&junk, 0x5a, sizeof(junk));
    EXPECT(tpx_region_unexport(inner, &junk) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_region_unexport(NULL, &din) == TPX_ERR_INVALID_ARG);
    x = NULL;
    EXPECT(tpx_rma(rm, TPX_OP_WRITE, &vo, 1, NULL, 0, &x) == TPX_OK);
    tpx_status_t st = x ? tpx_xfer_wait(x, 10000, NULL) : TPX_ERR_INTERNAL;
    printf("unexport: a WRITE through the ended export: %s\n", tpx_status_string(st));
    EXPECT(st == TPX_ERR_ACCESS); /* it was TPX_OK: the bytes were still reachable */
    tpx_xfer_release(x);
    unsigned char want[4096];
    fill(want, sizeof(want), 9);
    EXPECT(memcmp(m, want, sizeof(want)) == 0); /* not written */
    /* the inner registration's export still serves */
    x = NULL;
    EXPECT(tpx_rma(rm, TPX_OP_READ, &vi, 1, NULL, 0, &x) == TPX_OK);
    EXPECT(x && tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
    tpx_xfer_release(x);
    EXPECT(memcmp(a.mem + 8192, m + inner_off, 4096) == 0);
    EXPECT(tpx_region_unexport(inner, &din) == TPX_OK);
    tpx_mem_deregister(inner);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    free(m);
    TEST_DONE();
}

/* Both directions over the one connection A opened. */
static int t_twoway(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 8u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 8u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a, &b);
    EXPECT(ab != NULL);
    EXPECT(tpx_remote_connect(ab, 5000) == TPX_OK);
    tpx_remote_t *ba = load(&b, &a);
    EXPECT(ba != NULL);
    if (test_failed())
        return 1;
    EXPECT(strcmp(tpx_remote_name(ab), "B") == 0 && strcmp(tpx_remote_name(ba), "A") == 0);
    blk_t blk[8];
    for (int i = 0; i < 20 && !test_failed(); i++) {
        make_blocks(blk, 8, a.size, 256u << 10);
        EXPECT(run_checked(&a, &b, ab, i % 2 ? TPX_OP_READ : TPX_OP_WRITE, blk, 8, "a->b") == 0);
        make_blocks(blk, 8, b.size, 256u << 10);
        EXPECT(run_checked(&b, &a, ba, i % 2 ? TPX_OP_WRITE : TPX_OP_READ, blk, 8, "b->a") == 0);
    }
    tpx_engine_counters_t ca = {.size = sizeof(ca)}, cb = {.size = sizeof(cb)};
    EXPECT(tpx_engine_counters(a.e, &ca) == TPX_OK && tpx_engine_counters(b.e, &cb) == TPX_OK);
    /* one connection serves both directions when it is proven by a key;
     * without keys each side dials its own */
    const char *idm = getenv("TPX_IDENTITY");
    int conns = idm != NULL && strcmp(idm, "dial") == 0 ? 2 : 1;
    EXPECT_EQ(ca.peers_connected, conns);
    EXPECT_EQ(cb.peers_connected, conns);
    EXPECT_EQ(ca.rma_served, 20);
    EXPECT_EQ(cb.rma_served, 20);
    tpx_remote_release(ba);
    tpx_remote_release(ab);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Prepare once, post many times: in sequence and 16 at once. */
static int t_prepost(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 16u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 16u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    enum { NB = 200 };
    blk_t blk[NB];
    make_blocks(blk, NB, a.size, 64u << 10);
    tpx_iov_t *v = make_iov(&a, &b, blk, NB);
    tpx_prep_t *pp;
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, v, NB, &pp) == TPX_OK);
    for (int it = 0; it < 100 && !test_failed(); it++) {
        for (int i = 0; i < NB; i++)
            fill(b.mem + blk[i].roff, blk[i].len, (uint64_t)(it * NB + i));
        tpx_xfer_t *x;
        EXPECT(tpx_xfer_post(pp, NULL, 0, 0, &x) == TPX_OK);
        EXPECT(tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
        tpx_xfer_release(x);
        for (int i = 0; i < NB; i++)
            EXPECT(memcmp(a.mem + blk[i].loff, b.mem + blk[i].roff, blk[i].len) == 0);
    }
    tpx_xfer_t *xs[16];
    /* 16 posts of one READ at once write the same bytes to the same place
     * (identical data): by design, not a race to report */
    for (int i = 0; i < NB; i++)
        tpx__tsan_benign(a.mem + blk[i].loff, blk[i].len);
    for (int i = 0; i < 16; i++)
        EXPECT(tpx_xfer_post(pp, NULL, 0, 0, &xs[i]) == TPX_OK);
    tpx_prep_release(pp); /* the posts keep what they need */
    for (int i = 0; i < 16; i++) {
        size_t bytes = 0;
        EXPECT(tpx_xfer_wait(xs[i], 10000, &bytes) == TPX_OK);
        tpx_xfer_release(xs[i]);
    }
    for (int i = 0; i < NB; i++)
        EXPECT(memcmp(a.mem + blk[i].loff, b.mem + blk[i].roff, blk[i].len) == 0);
    free(v);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Two threads, each posting its own preparation (disjoint blocks) again and
 * again and polling it in a tight loop (tpx_xfer_poll() answers a running
 * transfer without the engine lock, and yields): every READ ends, with the
 * right bytes, and a poll after the end says the same again. */
typedef struct {
    side_t *a, *b;
    tpx_prep_t *pp;
    const blk_t *blk;
    int nb, fails;
    size_t want;
} pollloop_t;

static void *pollloop_thread(void *arg)
{
    pollloop_t *t = arg;
    for (int it = 0; it < 50 && t->fails == 0; it++) {
        for (int i = 0; i < t->nb; i++)
            fill(t->b->mem + t->blk[i].roff, t->blk[i].len, (uint64_t)(it * 1000 + i + t->nb));
        tpx_xfer_t *x;
        if (tpx_xfer_post(t->pp, NULL, 0, 10000, &x) != TPX_OK) {
            t->fails++;
            break;
        }
        tpx_status_t st;
        size_t bytes = 0, again = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while ((st = tpx_xfer_poll(x, &bytes)) == TPX_INPROGRESS) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (t1.tv_sec - t0.tv_sec > 30)
                break; /* the transfer's own deadline (10 s) ends it first */
        }
        if (st != TPX_OK || bytes != t->want || tpx_xfer_poll(x, &again) != TPX_OK ||
            again != t->want) {
            fprintf(stderr, "pollloop: %s, %zu bytes (want %zu), again %zu\n",
                    tpx_status_string(st), bytes, t->want, again);
            t->fails++;
        }
        tpx_xfer_release(x);
        for (int i = 0; i < t->nb; i++)
            if (memcmp(t->a->mem + t->blk[i].loff, t->b->mem + t->blk[i].roff,
                       t->blk[i].len) != 0) {
                fprintf(stderr, "pollloop: block %d differs after READ %d\n", i, it);
                t->fails++;
                break;
            }
    }
    return NULL;
}

static int t_pollloop(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 8u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 8u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    enum { NB = 200 };
    blk_t blk[NB];
    make_blocks(blk, NB, a.size, 16u << 10);
    pollloop_t t[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        t[k] = (pollloop_t){.a = &a, .b = &b, .blk = blk + k * (NB / 2), .nb = NB / 2};
        for (int i = 0; i < NB / 2; i++)
            t[k].want += t[k].blk[i].len;
        tpx_iov_t *v = make_iov(&a, &b, t[k].blk, NB / 2);
        EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, v, NB / 2, &t[k].pp) == TPX_OK);
        free(v);
    }
    if (test_failed())
        return 1;
    for (int k = 0; k < 2; k++)
        EXPECT(pthread_create(&th[k], NULL, pollloop_thread, &t[k]) == 0);
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        EXPECT_EQ(t[k].fails, 0);
        tpx_prep_release(t[k].pp);
    }
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Adjacent blocks (coalesced into one entry) and blocks that are adjacent on
 * one side only (not coalesced). */
static int t_coalesce(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 8u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 8u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    if (test_failed())
        return 1;
    blk_t blk[512];
    for (int i = 0; i < 256; i++) /* both sides contiguous */
        blk[i] = (blk_t){.loff = 4096u * (size_t)i, .roff = (1u << 20) + 4096u * (size_t)i,
                         .len = 4096};
    for (int i = 256; i < 512; i++) /* local contiguous, remote reversed */
        blk[i] = (blk_t){.loff = (4u << 20) + 3000u * (size_t)(i - 256),
                         .roff = (4u << 20) + 3000u * (size_t)(511 - i), .len = 3000};
    for (int op = TPX_OP_READ; op <= TPX_OP_WRITE; op++)
        EXPECT(run_checked(&a, &b, rm, (tpx_op_t)op, blk, 512, "coalesce") == 0);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

static int t_overflow(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 1u << 20, 8) == 0);
    tpx_remote_t *rm = load(&a, &b);
    if (test_failed())
        return 1;
    for (int i = 0; i < 20; i++) {
        char m[32];
        int n = snprintf(m, sizeof(m), "%d", i);
        EXPECT(tpx_notif_send(rm, m, (size_t)n) == TPX_OK);
    }
    tpx_engine_counters_t cb = {.size = sizeof(cb)};
    for (int i = 0; i < 500 && cb.notifs_received < 20; i++) {
        usleep(10000);
        EXPECT(tpx_engine_counters(b.e, &cb) == TPX_OK);
    }
    EXPECT_EQ(cb.notifs_received, 20);
    EXPECT_EQ(cb.notifs_dropped, 12);
    tpx_notif_t nt[20];
    size_t n = 0;
    EXPECT(tpx_engine_get_notifs(b.e, nt, 20, &n) == TPX_ERR_OVERFLOW);
    EXPECT_EQ(n, 8);
    for (size_t i = 0; i < n; i++) {
        char want[32];
        snprintf(want, sizeof(want), "%zu", i);
        EXPECT(nt[i].len == strlen(want) && memcmp(nt[i].msg, want, nt[i].len) == 0);
    }
    EXPECT(tpx_engine_get_notifs(b.e, nt, 20, &n) == TPX_OK);
    EXPECT_EQ(n, 0);
    EXPECT(tpx_notif_send(rm, "again", 5) == TPX_OK);
    EXPECT(notif_wait(&b, nt) == 0 && nt[0].len == 5);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

static int t_metadata(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 1u << 20, 0) == 0);
    if (test_failed())
        return 1;
    unsigned char blob[TPX_METADATA_MAX];
    size_t len = 10;
    EXPECT(tpx_engine_get_metadata(b.e, blob, &len) == TPX_ERR_INVALID_ARG);
    EXPECT(len > 10 && len <= TPX_METADATA_MAX);
    size_t need = len;
    EXPECT(tpx_engine_get_metadata(b.e, blob, &len) == TPX_OK && len == need);
    tpx_remote_t *r1, *r2;
    for (size_t i = 0; i < len; i++) { /* every flipped byte is refused */
        blob[i] ^= 0x40;
        EXPECT(tpx_remote_load(a.e, blob, len, &r1) == TPX_ERR_PROTOCOL);
        blob[i] ^= 0x40;
    }
    for (size_t l = 0; l < len; l++)
        EXPECT(tpx_remote_load(a.e, blob, l, &r1) == TPX_ERR_PROTOCOL);
    EXPECT(tpx_remote_load(a.e, blob, len, &r1) == TPX_OK);
    EXPECT(tpx_remote_load(a.e, blob, len, &r2) == TPX_OK);
    EXPECT(r1 == r2);
    EXPECT(strcmp(tpx_remote_name(r1), "B") == 0);
    tpx_remote_release(r2);
    /* connect lazily: the first transfer connects */
    tpx_iov_t v = {.local = a.r, .local_offset = 0, .remote = &b.d, .remote_offset = 0,
                   .len = 4096};
    tpx_xfer_t *x;
    EXPECT(tpx_rma(r1, TPX_OP_READ, &v, 1, NULL, 0, &x) == TPX_OK);
    EXPECT(tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
    tpx_xfer_release(x);
    EXPECT(memcmp(a.mem, b.mem, 4096) == 0);
    tpx_remote_release(r1);
    /* an engine without a bootstrap port has no metadata */
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.port = TPX_PORT_NONE;
    tpx_engine_t *e;
    EXPECT(tpx_engine_create(&p, &e) == TPX_OK);
    len = sizeof(blob);
    EXPECT(tpx_engine_get_metadata(e, blob, &len) == TPX_ERR_INVALID_STATE);
    tpx_engine_destroy(e);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Transfers of an engine in flight (engine.h), under its lock. */
static uint64_t inflight(tpx_engine_t *e)
{
    pthread_mutex_lock(&e->lock);
    uint64_t n = e->inflight;
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* Cancel and release of one-sided transfers in flight: they run to their
 * end in the FIFO (nothing can be taken back) and report CANCELED; the
 * chunk order stays intact, so the next transfers verify. */
static int t_cancel(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 64u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 64u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    if (test_failed() || rm == NULL)
        return 1;
    blk_t blk[64];
    size_t n_ok = 0;
    for (int round = 0; round < 6 && !test_failed(); round++) {
        make_blocks(blk, 64, a.size, 1u << 20);
        tpx_iov_t *v = make_iov(&a, &b, blk, 64);
        tpx_op_t op = round % 2 ? TPX_OP_WRITE : TPX_OP_READ;
        tpx_xfer_t *x;
        EXPECT(tpx_rma(rm, op, v, 64, round < 3 ? "never" : NULL, round < 3 ? 5 : 0, &x) == TPX_OK);
        if (round < 3) {
            tpx_status_t st = tpx_xfer_cancel(x);
            EXPECT(st == TPX_INPROGRESS || st == TPX_OK);
            st = tpx_xfer_wait(x, 20000, NULL);
            EXPECT(st == TPX_ERR_CANCELED || st == TPX_OK); /* OK: it had ended already */
            n_ok += st == TPX_OK;
            tpx_xfer_release(x);
        } else {
            tpx_xfer_release(x); /* running: freed when it ends */
            /* ...and it still writes where the fills below go: wait until
             * both engines have nothing in flight (read under their locks,
             * which also orders its writes before ours) */
            for (int k = 0; k < 2000 && (inflight(a.e) || inflight(b.e)); k++)
                usleep(10 * 1000);
            EXPECT(inflight(a.e) == 0 && inflight(b.e) == 0);
        }
        free(v);
        make_blocks(blk, 64, a.size, 256u << 10);
        fill(a.mem, a.size, (uint64_t)round + 7);
        fill(b.mem, b.size, (uint64_t)round + 70);
        EXPECT(run_checked(&a, &b, rm, op, blk, 64, "after a cancel") == 0);
    }
    /* a canceled transfer sends no notification: only those that ended OK */
    tpx_notif_t nt[8];
    size_t n = 0;
    usleep(200 * 1000);
    EXPECT(tpx_engine_get_notifs(b.e, nt, 8, &n) == TPX_OK);
    EXPECT_EQ(n, n_ok);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* A requester that sends a malformed request list (what a hostile or
 * broken peer would send): the owner fails that connection cleanly, keeps
 * serving others, and the requester's transfer ends with an error. */
static int t_hostile(void)
{
    side_t a, b, c;
    EXPECT(side_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 1u << 20, 0) == 0);
    EXPECT(side_open(&c, "C", 1u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b), *rc = load(&c, &b);
    if (test_failed() || rm == NULL || rc == NULL)
        return 1;
    tpx_iov_t v = {.local = a.r, .local_offset = 0, .remote = &b.d, .remote_offset = 0,
                   .len = 65536};
    for (int field = 0; field < 4; field++) {
        tpx_prep_t *pp;
        EXPECT(tpx_xfer_prepare(rm, field % 2 ? TPX_OP_WRITE : TPX_OP_READ, &v, 1, &pp) == TPX_OK);
        if (field < 2)
            pp->list[0] ^= 0xff; /* magic */
        else
            pp->list[16 + 7] ^= 1; /* total: no longer the sum of the entries */
        tpx_xfer_t *x;
        tpx_status_t st = tpx_xfer_post(pp, NULL, 0, 10000, &x);
        if (st == TPX_OK) {
            st = tpx_xfer_wait(x, 10000, NULL);
            tpx_xfer_release(x);
        }
        EXPECT(st != TPX_OK && st != TPX_INPROGRESS);
        tpx_prep_release(pp);
        /* B still serves C, and A again on a new connection */
        blk_t blk = {.loff = 0, .roff = 4096, .len = 100000};
        EXPECT(run_checked(&c, &b, rc, TPX_OP_READ, &blk, 1, "another peer") == 0);
        EXPECT(run_checked(&a, &b, rm, TPX_OP_WRITE, &blk, 1, "after reconnecting") == 0);
    }
    /* A notification held for a WRITE request that does not follow: B
     * delivers neither it nor the message after it and drops the
     * connection; A then writes with a notification again. */
    tpx_peer_t *p = NULL;
    EXPECT(tpx__remote_peer_locked(rm, 5000, &p) == TPX_OK);
    if (p != NULL) {
        tpx_ctrl_t held = {.type = TPX_CTRL_NOTIF, .notif_total = 1, .part_len = 1,
                           .flags = TPX_CTRL_NOTIF_HELD, .part = {'h'}};
        tpx_ctrl_t plain = {.type = TPX_CTRL_NOTIF, .notif_total = 1, .part_len = 1,
                            .part = {'x'}};
        EXPECT(tpx__peer_ctrl_send(p, &held, NULL) == TPX_OK);
        EXPECT(tpx__peer_ctrl_send(p, &plain, NULL) == TPX_OK);
        tpx__engine_post_pass(a.e, p);
        pthread_mutex_unlock(&a.e->lock);
    }
    int gone = 0;
    for (int i = 0; i < 500 && !gone; i++) {
        usleep(10 * 1000);
        pthread_mutex_lock(&a.e->lock);
        gone = rm->peer != p || p->state != PEER_READY || p->remote_closed;
        pthread_mutex_unlock(&a.e->lock);
    }
    EXPECT(gone);
    tpx_engine_counters_t cb = {.size = sizeof(cb)};
    EXPECT(tpx_engine_counters(b.e, &cb) == TPX_OK);
    EXPECT_EQ(cb.notifs_received, 0);
    tpx_xfer_t *x = NULL;
    EXPECT(tpx_rma(rm, TPX_OP_WRITE, &v, 1, "ok", 2, &x) == TPX_OK);
    EXPECT(tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
    tpx_xfer_release(x);
    tpx_notif_t nt;
    EXPECT(notif_wait(&b, &nt) == 0 && nt.len == 2 && memcmp(nt.msg, "ok", 2) == 0);
    tpx_remote_release(rm);
    tpx_remote_release(rc);
    side_close(&a);
    side_close(&b);
    side_close(&c);
    TEST_DONE();
}

/* A preparation that fails (more than 2^32 chunks) leaves the other
 * preparations' hold on the region alone. */
static int t_holds(void)
{
    side_t b;
    EXPECT(side_open(&b, "B", 1u << 20, 0) == 0);
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.bind_addr = "127.0.0.1";
    p.port = TPX_PORT_EPHEMERAL;
    p.chunk_bytes = 4096;
    tpx_engine_t *e = NULL;
    EXPECT(tpx_engine_create(&p, &e) == TPX_OK);
    if (test_failed())
        return 1;
    size_t big = (16u << 20) + 4096;
    unsigned char *m = aligned_alloc(4096, big);
    tpx_region_t *r;
    EXPECT(tpx_mem_register(e, m, big, TPX_MEM_HOST, &r) == TPX_OK);
    unsigned char blob[TPX_METADATA_MAX];
    size_t len = sizeof(blob);
    tpx_remote_t *rm = NULL;
    EXPECT(tpx_engine_get_metadata(b.e, blob, &len) == TPX_OK);
    EXPECT(tpx_remote_load(e, blob, len, &rm) == TPX_OK);
    /* a remote descriptor that claims a huge range (only prepare reads it) */
    tpx_rdesc_fields_t f;
    EXPECT(tpx__rdesc_decode(b.d.bytes, &f) == TPX_OK);
    f.len = 1ull << 40;
    tpx_rdesc_t huge;
    tpx__rdesc_encode(&f, huge.bytes);
    tpx_iov_t one = {.local = r, .local_offset = 0, .remote = &b.d, .remote_offset = 0,
                     .len = 4096};
    tpx_prep_t *p1, *p2;
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, &one, 1, &p1) == TPX_OK);
    size_t n = 1u << 20;
    tpx_iov_t *v = malloc(n * sizeof(*v));
    for (size_t i = 0; i < n; i++) /* 2^20 x 4097 chunks > 2^32; never adjacent */
        v[i] = (tpx_iov_t){.local = r, .local_offset = i % 2, .remote = &huge,
                           .remote_offset = (i % 2) * 8192, .len = big - 1};
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, v, n, &p2) == TPX_ERR_INVALID_ARG);
    free(v);
    tpx_mem_deregister(r); /* p1 still holds the region's record */
    tpx_prep_release(p1);  /* must not touch a freed region */
    free(m);
    tpx_remote_release(rm);
    tpx_engine_destroy(e);
    side_close(&b);
    TEST_DONE();
}

/* A receive ends at its deadline while its message is still arriving; the
 * application deregisters and unmaps the memory at once, as the API allows.
 * The failed peer's comms must be closed by then: the plugin may not write
 * another byte there (it would log "Bad address"). */
static int t_failclose(void)
{
    char logpath[] = "/tmp/tpx-failclose-XXXXXX";
    int lfd = mkstemp(logpath);
    EXPECT(lfd >= 0);
    close(lfd);
    setenv("TPX_LOG_FILE", logpath, 1);
    setenv("TPX_LOG_LEVEL", "info", 1);
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.bind_addr = "127.0.0.1";
    p.port = TPX_PORT_EPHEMERAL;
    tpx_engine_t *a = NULL, *b = NULL;
    p.name = "A";
    /* On a loaded machine the receive may end before the send's header
     * reaches B: the send is then unmatched (not failed) and ends at its
     * own deadline, which must come before the test's 10 s wait. */
    p.timeout_ms = 3000;
    EXPECT(tpx_engine_create(&p, &a) == TPX_OK);
    p.name = "B";
    p.timeout_ms = 400;
    EXPECT(tpx_engine_create(&p, &b) == TPX_OK);
    if (test_failed())
        return 1;
    size_t n = 512u << 20;
    void *ma = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                    -1, 0);
    void *mb = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                    -1, 0);
    EXPECT(ma != MAP_FAILED && mb != MAP_FAILED);
    tpx_region_t *ra, *rb;
    EXPECT(tpx_mem_register(a, ma, n, TPX_MEM_HOST, &ra) == TPX_OK);
    EXPECT(tpx_mem_register(b, mb, n, TPX_MEM_HOST, &rb) == TPX_OK);
    tpx_peer_t *pa = NULL, *pb = NULL;
    EXPECT(tpx_peer_connect(a, "127.0.0.1", tpx_engine_port(b), 5000, &pa) == TPX_OK);
    EXPECT(tpx_peer_accept(b, 5000, &pb) == TPX_OK);
    if (test_failed())
        return 1;
    tpx_xfer_t *xr, *xs;
    EXPECT(tpx_recv(pb, rb, 0, n, &xr) == TPX_OK);
    usleep(380 * 1000); /* the send starts just before the receive's deadline */
    EXPECT(tpx_send(pa, ra, 0, n, &xs) == TPX_OK);
    tpx_status_t st = tpx_xfer_wait(xr, 10000, NULL);
    printf("receive: %s\n", tpx_status_string(st));
    tpx_xfer_release(xr);
    tpx_mem_deregister(rb);
    EXPECT(munmap(mb, n) == 0);
    st = tpx_xfer_wait(xs, 10000, NULL);
    printf("send: %s\n", tpx_status_string(st));
    EXPECT(st != TPX_INPROGRESS);
    usleep(500 * 1000);
    tpx_xfer_release(xs);
    tpx_peer_close(pa);
    tpx_peer_close(pb);
    tpx_engine_destroy(a);
    tpx_engine_destroy(b);
    munmap(ma, n);
    FILE *f = fopen(logpath, "r");
    char line[1024];
    int bad = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, "Bad address") != NULL) {
            fputs(line, stderr);
            bad++;
        }
    if (f != NULL)
        fclose(f);
    unlink(logpath);
    EXPECT_EQ(bad, 0);
    TEST_DONE();
}

/* Drives an engine without a progress thread until `stop` (t_relfree). */
typedef struct {
    tpx_engine_t *e;
    atomic_int stop;
} driver_t;

static void *drive(void *arg)
{
    driver_t *d = arg;
    while (!atomic_load(&d->stop))
        if (tpx_progress(d->e) == 0)
            usleep(100);
    return NULL;
}

/* The NIXL adapter's "disconnect with live requests": a READ released
 * while it runs, its preparation released, and then the requester's local
 * region deregistered while the READ still holds it (the owner, B, has no
 * progress thread and is not driven yet: nothing can end the READ
 * before). The deregistration ends the READ (its connection fails, its
 * comms close); the released preparation goes with them, and its hold was
 * the last thing keeping the region's record: the deregistration must not
 * touch that record afterwards (it did: a use after free, SIGSEGV in
 * deregister_memory under load). The memory is free when the call
 * returns, and the remote's next READ connects again and verifies. */
static int t_relfree(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 4u << 20, 0) == 0);
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.bind_addr = "127.0.0.1";
    p.port = TPX_PORT_EPHEMERAL;
    p.name = "B";
    p.progress_thread = 0;
    memset(&b, 0, sizeof(b));
    b.size = 4u << 20;
    b.mem = aligned_alloc(4096, b.size);
    EXPECT(b.mem != NULL && tpx_engine_create(&p, &b.e) == TPX_OK);
    if (test_failed())
        return 1;
    fill(b.mem, b.size, 'B');
    EXPECT(tpx_mem_register(b.e, b.mem, b.size, TPX_MEM_HOST, &b.r) == TPX_OK);
    EXPECT(tpx_region_export(b.r, 0, 0, &b.d) == TPX_OK);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    EXPECT(rm != NULL && tpx_remote_connect(rm, 10000) == TPX_OK);
    if (test_failed())
        return 1;
    for (int round = 0; round < 3 && !test_failed(); round++) {
        size_t n = 1u << 20;
        unsigned char *m = aligned_alloc(4096, n);
        memset(m, 0x11, n);
        tpx_region_t *r;
        EXPECT(tpx_mem_register(a.e, m, n, TPX_MEM_HOST, &r) == TPX_OK);
        tpx_iov_t v[256]; /* 4 KiB blocks, as the NIXL test: packed into shared chunks */
        for (size_t i = 0; i < 256; i++)
            v[i] = (tpx_iov_t){.local = r, .local_offset = i * 4096, .remote = &b.d,
                               .remote_offset = i * 4096, .len = 4096};
        tpx_prep_t *pp;
        tpx_xfer_t *x;
        EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, v, round == 2 ? 1 : 256, &pp) == TPX_OK);
        EXPECT(tpx_xfer_post(pp, NULL, 0, 5000, &x) == TPX_OK);
        if (test_failed())
            return 1;
        if (round == 1) {
            /* the other order: the preparation first, the READ after */
            tpx_prep_release(pp);
            tpx_xfer_release(x);
        } else {
            tpx_xfer_release(x); /* running: B has not served it */
            tpx_prep_release(pp);
        }
        tpx_mem_deregister(r);
        memset(m, 0x22, n); /* the plugin no longer touches it */
        free(m);
        /* B runs again: it serves the next READ (connecting anew) */
        driver_t d = {.e = b.e};
        pthread_t th;
        EXPECT(pthread_create(&th, NULL, drive, &d) == 0);
        blk_t blk = {.loff = 4096, .roff = 100, .len = 256u << 10};
        fill(a.mem, a.size, (uint64_t)round);
        EXPECT(run_checked(&a, &b, rm, TPX_OP_READ, &blk, 1, "after a released READ") == 0);
        atomic_store(&d.stop, 1);
        pthread_join(th, NULL);
        EXPECT(inflight(a.e) == 0);
    }
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Owner's doorbells heard so far (engine.h; the lock orders the count). */
static uint64_t bells_heard(tpx_engine_t *e)
{
    pthread_mutex_lock(&e->lock);
    uint64_t n = e->nbells;
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* An owner idle for more than 100 ms sleeps in poll(); the requester's
 * doorbell wakes it: a lone small READ must not wait out a nap. Checked by
 * what cannot depend on the machine's load: every READ after a quiet
 * spell rings, and the owner hears every bell. The latencies are printed
 * (a wake-up by the bell takes well under a millisecond on an idle
 * machine; a nap would add up to 100 ms). */
static int t_bell(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 1u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL && tpx_remote_connect(rm, 5000) == TPX_OK);
    if (test_failed())
        return 1;
    tpx_iov_t v = {.local = a.r, .local_offset = 0, .remote = &b.d, .remote_offset = 0,
                   .len = 4096};
    for (int i = 0; i < 4; i++) {
        usleep(300 * 1000);
        uint64_t heard = bells_heard(b.e);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tpx_xfer_t *x;
        EXPECT(tpx_rma(rm, TPX_OP_READ, &v, 1, NULL, 0, &x) == TPX_OK);
        EXPECT(tpx_xfer_wait(x, 10000, NULL) == TPX_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        tpx_xfer_release(x);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        /* the bell went out before the request; it is heard at the latest
         * by the owner's next sweep */
        for (int k = 0; k < 500 && bells_heard(b.e) == heard; k++)
            usleep(10 * 1000);
        printf("READ of 4 KiB after 0.3 s idle: %.2f ms, %llu doorbell(s) heard\n", ms,
               (unsigned long long)(bells_heard(b.e) - heard));
        EXPECT(bells_heard(b.e) > heard);
    }
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Growing structs: a caller built against an older, smaller struct has
 * nothing written past its size, and its missing params take defaults. */
static int t_abi(void)
{
    /* An "old" params struct: everything up to and including port. */
    struct {
        tpx_engine_params_t p;
        unsigned char guard[64];
    } old;
    memset(&old, 0xA5, sizeof(old));
    tpx_engine_params_init(&old.p);
    EXPECT_EQ(old.p.size, sizeof(tpx_engine_params_t));
    old.p.bind_addr = "127.0.0.1";
    old.p.port = TPX_PORT_EPHEMERAL;
    size_t old_psize = offsetof(tpx_engine_params_t, progress_thread);
    old.p.size = old_psize;
    /* Garbage after the old size must not be read: a name pointer of
     * 0xA5... would crash if it were. */
    memset((char *)&old.p + old_psize, 0xA5, sizeof(old.p) - old_psize);
    tpx_engine_t *e = NULL;
    EXPECT(tpx_engine_create(&old.p, &e) == TPX_OK);
    if (e == NULL)
        return 1;
    EXPECT(tpx_engine_port(e) > 0);

    /* info: a caller whose struct ends after `port`. */
    union {
        tpx_engine_info_t i;
        unsigned char b[sizeof(tpx_engine_info_t) + 64];
    } info;
    size_t old_isize = offsetof(tpx_engine_info_t, nnics);
    memset(&info, 0x5A, sizeof(info));
    info.i.size = old_isize;
    EXPECT(tpx_engine_info(e, &info.i) == TPX_OK);
    EXPECT_EQ(info.i.size, old_isize);
    EXPECT_EQ(info.i.port, tpx_engine_port(e));
    EXPECT(strlen(info.i.plugin) > 0);
    for (size_t k = old_isize; k < sizeof(info.b); k++)
        EXPECT(info.b[k] == 0x5A);
    /* the full struct, and the forgotten size */
    tpx_engine_info_t full = {.size = sizeof(full)};
    EXPECT(tpx_engine_info(e, &full) == TPX_OK);
    EXPECT(full.nnics > 0);
    EXPECT_EQ(full.connect_timeout_ms, (int)tpx__config_int(TPX_CFG_CONNECT_TIMEOUT_MS));
    tpx_engine_info_t zero = {0};
    EXPECT(tpx_engine_info(e, &zero) == TPX_ERR_INVALID_ARG);

    /* counters: only the first two fields known to an old caller */
    union {
        tpx_engine_counters_t c;
        unsigned char b[sizeof(tpx_engine_counters_t) + 64];
    } ctr;
    size_t old_csize = offsetof(tpx_engine_counters_t, rma_bytes_out);
    memset(&ctr, 0x5A, sizeof(ctr));
    ctr.c.size = old_csize;
    EXPECT(tpx_engine_counters(e, &ctr.c) == TPX_OK);
    EXPECT_EQ(ctr.c.rma_served, 0);
    EXPECT_EQ(ctr.c.rma_rejected, 0);
    for (size_t k = old_csize; k < sizeof(ctr.b); k++)
        EXPECT(ctr.b[k] == 0x5A);
    tpx_engine_counters_t cz = {0};
    EXPECT(tpx_engine_counters(e, &cz) == TPX_ERR_INVALID_ARG);
    tpx_engine_destroy(e);

    /* params with size 0: refused */
    tpx_engine_params_t p0;
    tpx_engine_params_init(&p0);
    p0.size = 0;
    e = NULL;
    EXPECT(tpx_engine_create(&p0, &e) == TPX_ERR_INVALID_ARG);
    EXPECT(e == NULL);
    TEST_DONE();
}

/* ---- packed small blocks (wire.h tpx_chunker_t, pack.c) ------------------------------------- */

/* n blocks of mixed sizes at unaligned offsets, each in its own slot (slots
 * permuted on the remote side): tiny ones, ones around the packing bound
 * (64 KiB by default: 65536 packs, 65537 does not) and large ones, so that
 * packed runs are interleaved with large entries, end where a block does
 * not fit the open chunk, and straddle the 512 KiB chunk boundaries. */
static void make_mixed(blk_t *b, size_t n, size_t size)
{
    size_t slot = size / n;
    size_t *perm = malloc(n * sizeof(*perm));
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rnd() % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len;
        switch (rnd() % 10) {
        case 0: case 1: case 2: case 3: len = rnd_in(1, 700); break;
        case 4: case 5: len = rnd_in(701, 65536); break;
        case 6: len = 65536 + (rnd() % 2); break;
        case 7: len = rnd_in(60000, 70000); break;
        default: len = rnd_in(65537, 3u << 20); break;
        }
        if (len > slot)
            len = rnd_in(1, slot);
        b[i].len = len;
        b[i].loff = i * slot + rnd_in(0, slot - len);
        b[i].roff = perm[i] * slot + rnd_in(0, slot - len);
    }
    free(perm);
}

/* Both engines pack (defaults), then the engines' settings differ: each
 * side cuts a list by the bound that travels with it, so a packing engine
 * and one that does not pack (or packs more, with another chunk size) talk.
 * Last, 16 KiB chunks: a READ's payload has enough chunks to move in runs
 * (xfer.h), cut at block ends and around shared chunks. */
/* ThreadSanitizer checks the concurrency, not the volume: memories a
 * quarter the size under it (its instrumented fills and checks of 32 MiB
 * made this test 150-212 s of its 180 s limit on a 2-core host). */
#ifdef TPX_TSAN_BUILD
#define PACK_MEM (8u << 20)
#else
#define PACK_MEM (32u << 20)
#endif

static int t_pack(void)
{
    static const struct {
        const char *pack_a, *chunk_a, *pack_b, *chunk_b;
        int all; /* every count, not only 1000 blocks */
    } cfg[] = {{NULL, NULL, NULL, NULL, 1},
               {"0", "64K", "4M", NULL, 0},
               {"4M", "64K", "0", NULL, 0},
               {"700", NULL, "1", "4K", 0},
               {NULL, "16K", NULL, "16K", 1}};
    static const size_t counts[] = {1, 2, 7, 100, 1000, 10000};
    blk_t *blk = malloc(10000 * sizeof(*blk));
    for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]) && !test_failed(); k++) {
        side_t a, b;
        /* TPX_CHUNK_BYTES: per engine (side_open); TPX_RMA_PACK_BYTES is read
         * once per process, so the packing bounds here are the first
         * engine's: the engine.rma.packchunk tests vary the process's */
        if (cfg[k].pack_a) setenv("TPX_RMA_PACK_BYTES", cfg[k].pack_a, 1);
        if (cfg[k].chunk_a) setenv("TPX_CHUNK_BYTES", cfg[k].chunk_a, 1);
        EXPECT(side_open(&a, "A", PACK_MEM, 0) == 0);
        unsetenv("TPX_RMA_PACK_BYTES");
        unsetenv("TPX_CHUNK_BYTES");
        if (cfg[k].pack_b) setenv("TPX_RMA_PACK_BYTES", cfg[k].pack_b, 1);
        if (cfg[k].chunk_b) setenv("TPX_CHUNK_BYTES", cfg[k].chunk_b, 1);
        EXPECT(side_open(&b, "B", PACK_MEM, 0) == 0);
        unsetenv("TPX_RMA_PACK_BYTES");
        unsetenv("TPX_CHUNK_BYTES");
        tpx_remote_t *ab = load(&a, &b), *ba = load(&b, &a);
        EXPECT(ab != NULL && ba != NULL);
        if (test_failed())
            return 1;
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            /* the whole set one way with the first configuration; both ways
             * for 1000 blocks (and 7 with the first) */
            if (!cfg[k].all && counts[c] != 1000)
                continue;
            for (int op = TPX_OP_READ; op <= TPX_OP_WRITE; op++) {
                for (int dir = 0; dir < 1 + (counts[c] == 1000 || counts[c] == 7); dir++) {
                    make_mixed(blk, counts[c], a.size);
                    fill(a.mem, a.size, rnd());
                    fill(b.mem, b.size, rnd());
                    char what[64];
                    snprintf(what, sizeof(what), "pack cfg %zu %s", k, dir ? "B->A" : "A->B");
                    EXPECT(run_checked(dir ? &b : &a, dir ? &a : &b, dir ? ba : ab, (tpx_op_t)op,
                                      blk, counts[c], what) == 0);
                }
            }
        }
        /* all small, all tiny: many blocks per chunk (10000: 30 MB of 32 MiB) */
        size_t ntiny = TPX_MIN((size_t)PACK_MEM / 3001 - 1, (size_t)10000);
        for (int op = TPX_OP_READ; op <= TPX_OP_WRITE && k == 0; op++) {
            for (size_t i = 0; i < ntiny; i++)
                blk[i] = (blk_t){.loff = i * 3001 + 7, .roff = (ntiny - 1 - i) * 3001 + 1,
                                 .len = 1 + i % 3000};
            EXPECT(run_checked(&a, &b, ab, (tpx_op_t)op, blk, ntiny, "pack tiny") == 0);
        }
        tpx_remote_release(ab);
        tpx_remote_release(ba);
        side_close(&a);
        side_close(&b);
    }
    free(blk);
    TEST_DONE();
}

/* Packed transfers at once, every op both ways over one connection, each
 * in its own slices of both memories with its own bytes: a comm's staging
 * chunks go back to it as their chunks complete, in any order, and the
 * last freed is used next (pack.c); one handed out twice, or before its
 * chunk was done, would mix the bytes of two transfers. Small chunks: many
 * shared chunks per transfer, more than a window of them in flight. */
static int t_packmany(void)
{
    enum { NX = 8, NB = 400 };
    side_t a, b;
    setenv("TPX_CHUNK_BYTES", "64K", 1);
    EXPECT(side_open(&a, "A", 32u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 32u << 20, 0) == 0);
    unsetenv("TPX_CHUNK_BYTES");
    tpx_remote_t *ab = load(&a, &b), *ba = load(&b, &a);
    EXPECT(ab != NULL && ba != NULL);
    if (test_failed())
        return 1;
    size_t slice = a.size / NX;
    blk_t *blk = malloc(NX * NB * sizeof(*blk));
    tpx_iov_t *v[NX];
    unsigned char *want_a = malloc(a.size), *want_b = malloc(b.size);
    for (int round = 0; round < 4 && !test_failed(); round++) {
        fill(a.mem, a.size, rnd());
        fill(b.mem, b.size, rnd());
        memcpy(want_a, a.mem, a.size);
        memcpy(want_b, b.mem, b.size);
        tpx_xfer_t *x[NX] = {0};
        for (int t = 0; t < NX; t++) {
            /* t % 4: A reads B, A writes B, B reads A, B writes A */
            int from_b = (t % 4) >= 2;
            tpx_op_t op = t % 2 ? TPX_OP_WRITE : TPX_OP_READ;
            side_t *l = from_b ? &b : &a, *r = from_b ? &a : &b;
            unsigned char *want_l = from_b ? want_b : want_a, *want_r = from_b ? want_a : want_b;
            blk_t *bt = blk + (size_t)t * NB;
            for (size_t i = 0; i < NB; i++) /* 4 KiB and smaller: all packed */
                bt[i] = (blk_t){.loff = (size_t)t * slice + i * 8192 + rnd_in(0, 4096),
                                .roff = (size_t)t * slice + (NB - 1 - i) * 8192 + rnd_in(0, 4096),
                                .len = rnd_in(1, 4096)};
            for (size_t i = 0; i < NB; i++) {
                if (op == TPX_OP_WRITE)
                    memcpy(want_r + bt[i].roff, l->mem + bt[i].loff, bt[i].len);
                else
                    memcpy(want_l + bt[i].loff, r->mem + bt[i].roff, bt[i].len);
            }
            v[t] = make_iov(l, r, bt, NB);
            EXPECT(tpx_rma(from_b ? ba : ab, op, v[t], NB, NULL, 0, &x[t]) == TPX_OK);
        }
        for (int t = 0; t < NX; t++) {
            if (x[t] != NULL)
                EXPECT(tpx_xfer_wait(x[t], 60000, NULL) == TPX_OK);
            tpx_xfer_release(x[t]);
            free(v[t]);
        }
        EXPECT(memcmp(a.mem, want_a, a.size) == 0);
        EXPECT(memcmp(b.mem, want_b, b.size) == 0);
    }
    free(want_a);
    free(want_b);
    free(blk);
    tpx_remote_release(ab);
    tpx_remote_release(ba);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* A refused entry in the middle of a packed run refuses the whole request
 * (nothing moves, either way); a packed transfer canceled while it runs
 * ends canceled (or OK), and the connection carries the next one intact. */
static int t_packfail(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 16u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 16u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    EXPECT(rm != NULL);
    if (test_failed())
        return 1;
    tpx_rdesc_t bad_key = forge(&b.d, 0, 1);
    enum { N = 300 };
    tpx_iov_t *v = malloc(10000 * sizeof(*v));
    unsigned char *snap_a = malloc(a.size), *snap_b = malloc(b.size);
    for (int op = TPX_OP_READ; op <= TPX_OP_WRITE; op++) {
        for (size_t i = 0; i < N; i++)
            v[i] = (tpx_iov_t){.local = a.r, .local_offset = i * 5003 + 3, .remote = &b.d,
                               .remote_offset = (N - 1 - i) * 5003 + 11, .len = 100 + i * 13};
        v[N / 2].remote = &bad_key; /* inside a shared chunk */
        memcpy(snap_a, a.mem, a.size);
        memcpy(snap_b, b.mem, b.size);
        tpx_xfer_t *x = NULL;
        tpx_status_t st = tpx_rma(rm, (tpx_op_t)op, v, N, "refused", 7, &x);
        if (st == TPX_OK)
            st = tpx_xfer_wait(x, 20000, NULL);
        tpx_xfer_release(x);
        EXPECT(st == TPX_ERR_ACCESS);
        EXPECT(memcmp(snap_a, a.mem, a.size) == 0);
        EXPECT(memcmp(snap_b, b.mem, b.size) == 0);
    }
    size_t nn = 1;
    tpx_notif_t nt;
    EXPECT(tpx_engine_get_notifs(b.e, &nt, 1, &nn) == TPX_OK);
    EXPECT_EQ(nn, 0);
    blk_t *blk = malloc(10000 * sizeof(*blk));
    for (int round = 0; round < 6 && !test_failed(); round++) {
        tpx_op_t op = round % 2 ? TPX_OP_WRITE : TPX_OP_READ;
        for (size_t i = 0; i < 10000; i++)
            v[i] = (tpx_iov_t){.local = a.r, .local_offset = i * 1601 + 5, .remote = &b.d,
                               .remote_offset = (9999 - i) * 1601 + 9, .len = 1 + i % 1600};
        tpx_xfer_t *x;
        EXPECT(tpx_rma(rm, op, v, 10000, NULL, 0, &x) == TPX_OK);
        if (round >= 2) /* later and later into the transfer */
            usleep((useconds_t)(round * 500));
        tpx_status_t st = tpx_xfer_cancel(x);
        EXPECT(st == TPX_INPROGRESS || st == TPX_OK);
        st = tpx_xfer_wait(x, 20000, NULL);
        EXPECT(st == TPX_ERR_CANCELED || st == TPX_OK);
        tpx_xfer_release(x);
        for (int w = 0; w < 2000 && (inflight(a.e) || inflight(b.e)); w++)
            usleep(10 * 1000);
        EXPECT(inflight(a.e) == 0 && inflight(b.e) == 0);
        make_mixed(blk, 1000, a.size);
        fill(a.mem, a.size, (uint64_t)round + 17);
        fill(b.mem, b.size, (uint64_t)round + 170);
        EXPECT(run_checked(&a, &b, rm, op, blk, 1000, "after a packed cancel") == 0);
    }
    free(blk);
    free(v);
    free(snap_a);
    free(snap_b);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Packed runs that mix host and GPU blocks on both sides (each block's
 * local and remote memory picked at random), READ and WRITE, both ways;
 * needs a GPU or the fake libcuda (77 without). The GPU contents are
 * modelled on the host and compared through tpx_gpu_copy. */
typedef struct {
    side_t s;
    void *g;            /* GPU memory, s.size bytes */
    tpx_region_t *gr;
    tpx_rdesc_t gd;
    unsigned char *gm;  /* model of g */
} gside_t;

static int gside_open(gside_t *g, const char *name, size_t size, int gpu)
{
    memset(g, 0, sizeof(*g));
    if (side_open(&g->s, name, size, 0) != 0 || (g->gm = malloc(size)) == NULL)
        return -1;
    fill(g->gm, size, (uint64_t)name[0] + 99);
    if (!gpu)
        return 0;
    if (tpx_gpu_alloc(0, size, &g->g) != TPX_OK ||
        tpx_mem_register(g->s.e, g->g, size, TPX_MEM_CUDA, &g->gr) != TPX_OK ||
        tpx_region_export(g->gr, 0, 0, &g->gd) != TPX_OK)
        return -1;
    return tpx_gpu_copy(g->g, g->gm, size) == TPX_OK ? 0 : -1;
}

static void gside_close(gside_t *g)
{
    side_close(&g->s); /* the engine first: it deregisters g->gr */
    if (g->g != NULL)
        tpx_gpu_free(g->g);
    free(g->gm);
}

/* One transfer of n blocks between a and b (round: READ even, WRITE odd;
 * bit 1 the direction): lengths 1..small_max, one block in four up to its
 * slot when `big`; each block's local and remote memory host or (gpu) GPU
 * at random. Every byte of both sides is checked against the model. */
static void mixed_round(gside_t *a, gside_t *b, tpx_remote_t *ab, tpx_remote_t *ba, int round,
                        size_t n, size_t small_max, int big, int gpu)
{
    size_t size = a->s.size;
    tpx_op_t op = round % 2 ? TPX_OP_WRITE : TPX_OP_READ;
    int dir = (round / 2) % 2;
    gside_t *req = dir ? b : a, *own = dir ? a : b;
    size_t slot = size / n, stride = n % 3 ? 3 : 1; /* stride and n coprime: no overlaps */
    tpx_iov_t *v = malloc(n * sizeof(*v));
    unsigned char *chk = malloc(size);
    unsigned char *want_req_h = malloc(size), *want_req_g = malloc(size),
                  *want_own_h = malloc(size), *want_own_g = malloc(size);
    /* slot i locally, slot stride*i + round remotely */
    for (size_t i = 0; i < n; i++) {
        size_t len = !big || rnd() % 4 ? rnd_in(1, TPX_MIN(small_max, slot)) : rnd_in(1, slot);
        int lg = gpu && rnd() % 2, rg = gpu && rnd() % 2;
        size_t loff = i * slot + rnd_in(0, slot - len);
        size_t roff = ((i * stride + (size_t)round) % n) * slot + rnd_in(0, slot - len);
        v[i] = (tpx_iov_t){.local = lg ? req->gr : req->s.r, .local_offset = loff,
                           .remote = rg ? &own->gd : &own->s.d, .remote_offset = roff,
                           .len = len};
    }
    memcpy(want_req_h, req->s.mem, size);
    memcpy(want_req_g, req->gm, size);
    memcpy(want_own_h, own->s.mem, size);
    memcpy(want_own_g, own->gm, size);
    for (size_t i = 0; i < n; i++) {
        int lg = gpu && v[i].local == req->gr, rg = gpu && v[i].remote == &own->gd;
        unsigned char *lm = (lg ? req->gm : req->s.mem) + v[i].local_offset;
        unsigned char *rm = (rg ? own->gm : own->s.mem) + v[i].remote_offset;
        unsigned char *wl = (lg ? want_req_g : want_req_h) + v[i].local_offset;
        unsigned char *wr = (rg ? want_own_g : want_own_h) + v[i].remote_offset;
        if (op == TPX_OP_WRITE)
            memcpy(wr, lm, v[i].len);
        else
            memcpy(wl, rm, v[i].len);
    }
    tpx_xfer_t *x = NULL;
    tpx_status_t st = tpx_rma(dir ? ba : ab, op, v, n, NULL, 0, &x);
    if (st == TPX_OK)
        st = tpx_xfer_wait(x, 30000, NULL);
    tpx_xfer_release(x);
    EXPECT(st == TPX_OK, "round %d (%zu blocks): %s", round, n, tpx_status_string(st));
    EXPECT(memcmp(req->s.mem, want_req_h, size) == 0, "round %d: requester host", round);
    EXPECT(memcmp(own->s.mem, want_own_h, size) == 0, "round %d: owner host", round);
    if (gpu) {
        EXPECT(tpx_gpu_copy(chk, req->g, size) == TPX_OK && memcmp(chk, want_req_g, size) == 0,
               "round %d: requester GPU", round);
        EXPECT(tpx_gpu_copy(chk, own->g, size) == TPX_OK && memcmp(chk, want_own_g, size) == 0,
               "round %d: owner GPU", round);
    }
    memcpy(req->gm, want_req_g, size);
    memcpy(own->gm, want_own_g, size);
    free(want_req_h);
    free(want_req_g);
    free(want_own_h);
    free(want_own_g);
    free(v);
    free(chk);
}

static int t_packgpu(void)
{
    int ngpu = 0;
    if (tpx_gpu_count(&ngpu) != TPX_OK || ngpu < 1) {
        fprintf(stderr, "packgpu: no GPU (and no fake libcuda): skipped\n");
        return 77;
    }
    gside_t a, b;
    size_t size = 8u << 20;
    EXPECT(gside_open(&a, "A", size, 1) == 0);
    EXPECT(gside_open(&b, "B", size, 1) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s), *ba = load(&b.s, &a.s);
    EXPECT(ab != NULL && ba != NULL);
    for (int round = 0; round < 8 && !test_failed(); round++)
        mixed_round(&a, &b, ab, ba, round, 700, 3000, 1, 1);
    tpx_remote_release(ab);
    tpx_remote_release(ba);
    gside_close(&a);
    gside_close(&b);
    TEST_DONE();
}

/* Small transfers, the size of one control message's body and around it
 * (wire.h: INLINE): one block up to 5000 bytes, a few, many tiny ones whose
 * list is too long to ride with the request; READ and WRITE both ways,
 * host and (with a GPU or the fake libcuda) GPU blocks mixed, so every
 * combination of inline list, inline data and data on the channels runs. */
/* Blocks between the staged packing bound (64 KiB) and a chunk share
 * chunks where those are vectored messages (TPX_RMA_PACK_BYTES=-1, rma.c
 * pack_bound): READ and WRITE of 96 x 128 KiB, apart on both sides, are
 * 12 packed data messages of 1 MiB each (one per 128 KiB block before);
 * staged (TPX_RMA_IOV=0, strict TCPX) each block keeps a message of its
 * own. Bytes checked; the phase counters add up (one transfer done, its
 * messages counted on both engines, the owner's service timed). */
static int t_packsize(void)
{
    enum { N = 96, BLK = 128 * 1024 };
    side_t a, b;
    EXPECT(side_open(&a, "A", 2u * N * BLK, 0) == 0);
    EXPECT(side_open(&b, "B", 2u * N * BLK, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    if (test_failed())
        return 1;
    tpx_engine_info_t info = {.size = sizeof(info)};
    EXPECT(tpx_engine_info(a.e, &info) == TPX_OK);
    int vec = a.e->cfg.rma_iov && tpx__net_has_vec(a.e->net);
    uint64_t want_packed = vec ? (uint64_t)N * BLK / info.chunk_bytes : 0;
    uint64_t want_msgs = vec ? want_packed : N;
    blk_t blk[N];
    for (size_t i = 0; i < N; i++) /* every other slot, the remote's reversed */
        blk[i] = (blk_t){.loff = 2 * i * BLK, .roff = 2 * (N - 1 - i) * BLK, .len = BLK};
    for (int op = TPX_OP_READ; op <= TPX_OP_WRITE && !test_failed(); op++) {
        tpx_engine_counters_t ra = {.size = sizeof(ra)}, rb = ra, oa = ra, ob = ra;
        EXPECT(tpx_engine_counters(a.e, &ra) == TPX_OK && tpx_engine_counters(b.e, &oa) == TPX_OK);
        fill(a.mem, a.size, rnd());
        fill(b.mem, b.size, rnd());
        EXPECT(run_checked(&a, &b, rm, (tpx_op_t)op, blk, N, "packsize") == 0);
        EXPECT(tpx_engine_counters(a.e, &rb) == TPX_OK);
        /* the owner's side of a served READ ends on the requester's
         * confirmation, which may come after the requester is done */
        for (int t = 0; t < 5000; t++) {
            EXPECT(tpx_engine_counters(b.e, &ob) == TPX_OK);
            if (ob.rma_served - oa.rma_served >= 1)
                break;
            usleep(1000);
        }
        /* the list (1.9 KiB) rides in the request: every data message is payload */
        EXPECT_EQ(rb.rma_msgs - ra.rma_msgs, want_msgs);
        EXPECT_EQ(rb.rma_msgs_packed - ra.rma_msgs_packed, want_packed);
        EXPECT_EQ(ob.rma_msgs - oa.rma_msgs, want_msgs);
        EXPECT_EQ(rb.rma_done - ra.rma_done, 1);
        EXPECT(rb.rma_ns_total - ra.rma_ns_total >= rb.rma_ns_data - ra.rma_ns_data);
        EXPECT(rb.rma_ns_data - ra.rma_ns_data > 0);
        EXPECT_EQ(ob.rma_served - oa.rma_served, 1);
        EXPECT(ob.rma_served_ns - oa.rma_served_ns > 0 && ob.rma_check_ns - oa.rma_check_ns > 0);
        /* no copy of ours either way: vectored chunks, or blocks over the staged bound */
        EXPECT_EQ((rb.rma_bytes_staged - ra.rma_bytes_staged) +
                      (ob.rma_bytes_staged - oa.rma_bytes_staged), 0);
    }
    /* 1 KiB blocks (a KV head-slice): a chunk of them is ~1000 pieces, up to
     * the transport's limit, so still one vectored message and no copy */
    enum { NS = 1000, SBLK = 1024 };
    static blk_t sblk[NS];
    for (size_t i = 0; i < NS; i++)
        sblk[i] = (blk_t){.loff = 2 * i * SBLK, .roff = 2 * (NS - 1 - i) * SBLK, .len = SBLK};
    for (int op = TPX_OP_READ; op <= TPX_OP_WRITE && !test_failed(); op++) {
        tpx_engine_counters_t ra = {.size = sizeof(ra)}, rb = ra, oa = ra, ob = ra;
        EXPECT(tpx_engine_counters(a.e, &ra) == TPX_OK && tpx_engine_counters(b.e, &oa) == TPX_OK);
        fill(a.mem, a.size, rnd());
        fill(b.mem, b.size, rnd());
        EXPECT(run_checked(&a, &b, rm, (tpx_op_t)op, sblk, NS, "packsize 1 KiB") == 0);
        EXPECT(tpx_engine_counters(a.e, &rb) == TPX_OK && tpx_engine_counters(b.e, &ob) == TPX_OK);
        uint64_t staged = (rb.rma_bytes_staged - ra.rma_bytes_staged) +
                          (ob.rma_bytes_staged - oa.rma_bytes_staged);
        printf("packsize: %s of %d x 1 KiB: %llu bytes staged, %llu packed messages\n",
               op == TPX_OP_READ ? "READ" : "WRITE", NS, (unsigned long long)staged,
               (unsigned long long)(rb.rma_msgs_packed - ra.rma_msgs_packed));
        if (vec)
            EXPECT_EQ(staged, 0);
        else
            EXPECT(staged > 0);
    }
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

static int t_inline(void)
{
    int ngpu = 0, gpu = tpx_gpu_count(&ngpu) == TPX_OK && ngpu > 0;
    gside_t a, b;
    size_t size = 1u << 20;
    EXPECT(gside_open(&a, "A", size, gpu) == 0);
    EXPECT(gside_open(&b, "B", size, gpu) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s), *ba = load(&b.s, &a.s);
    EXPECT(ab != NULL && ba != NULL);
    static const struct {
        size_t n, small_max;
    } shapes[] = {{1, 5000}, {1, 4096}, {2, 2100}, {7, 600}, {64, 64}, {400, 8}};
    for (size_t k = 0; k < TPX_ARRAY_SIZE(shapes) && !test_failed(); k++)
        for (int round = 0; round < 8 && !test_failed(); round++)
            mixed_round(&a, &b, ab, ba, round, shapes[k].n, shapes[k].small_max, 0, gpu);
    tpx_remote_release(ab);
    tpx_remote_release(ba);
    gside_close(&a);
    gside_close(&b);
    TEST_DONE();
}

/* A WRITE's held notification goes with its own request even when an
 * INLINE request (started at once) overtakes an earlier one that waits
 * behind an early two-sided header: A sends B a message B does not receive
 * yet, then WRITE 1 (64 KiB: on the data channels, queued behind it) and
 * WRITE 2 (4 KiB inline, but a notification too long for the body: held).
 * Whenever B sees a notification, its WRITE's bytes are in place. */
static int t_heldorder(void)
{
    side_t a, b;
    EXPECT(side_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 1u << 20, 0) == 0);
    tpx_remote_t *rm = load(&a, &b);
    tpx_peer_t *pa = NULL, *pb = NULL;
    EXPECT(rm != NULL && tpx__remote_peer_locked(rm, 5000, &pa) == TPX_OK);
    if (test_failed() || pa == NULL)
        return 1;
    pthread_mutex_unlock(&a.e->lock);
    enum { W1 = 65536, W2 = 4096, SEND = 1000 };
    memset(a.mem, 0xA1, W1);
    memset(a.mem + W1, 0xB2, W2);
    memset(b.mem, 0, 4 * W1);
    unsigned char n1[5] = "first", n2[TPX_NOTIF_MAX];
    memset(n2, 'S', sizeof(n2));
    tpx_xfer_t *xs = NULL, *x1 = NULL, *x2 = NULL, *xr = NULL;
    EXPECT(tpx_send(pa, a.r, 2 * W1, SEND, &xs) == TPX_OK);
    tpx_iov_t v1 = {.local = a.r, .local_offset = 0, .remote = &b.d, .remote_offset = 0,
                    .len = W1};
    tpx_iov_t v2 = {.local = a.r, .local_offset = W1, .remote = &b.d, .remote_offset = W1,
                    .len = W2};
    EXPECT(tpx_rma(rm, TPX_OP_WRITE, &v1, 1, n1, sizeof(n1), &x1) == TPX_OK);
    EXPECT(tpx_rma(rm, TPX_OP_WRITE, &v2, 1, n2, sizeof(n2), &x2) == TPX_OK);
    int seen1 = 0, seen2 = 0, early = 0;
    /* Notifications before B receives: only WRITE 2's can be ready. */
    for (int i = 0; i < 300 && !test_failed(); i++) {
        tpx_notif_t nt;
        size_t n = 0;
        EXPECT(tpx_engine_get_notifs(b.e, &nt, 1, &n) == TPX_OK);
        if (n == 1) {
            int is1 = nt.len == sizeof(n1) && memcmp(nt.msg, n1, nt.len) == 0;
            int is2 = nt.len == sizeof(n2) && memcmp(nt.msg, n2, nt.len) == 0;
            EXPECT(is1 || is2);
            seen1 += is1;
            seen2 += is2;
            if (is1 && b.mem[0] != 0xA1)
                early++;
            if (is2 && b.mem[W1] != 0xB2)
                early++;
        }
        usleep(1000);
    }
    pthread_mutex_lock(&b.e->lock);
    pb = b.e->peers;
    pthread_mutex_unlock(&b.e->lock);
    EXPECT(pb != NULL && tpx_recv(pb, b.r, 2 * W1, SEND, &xr) == TPX_OK);
    EXPECT(tpx_xfer_wait(xr, 10000, NULL) == TPX_OK);
    EXPECT(tpx_xfer_wait(xs, 10000, NULL) == TPX_OK);
    EXPECT(tpx_xfer_wait(x1, 10000, NULL) == TPX_OK);
    EXPECT(tpx_xfer_wait(x2, 10000, NULL) == TPX_OK);
    while (seen1 + seen2 < 2 && !test_failed()) {
        tpx_notif_t nt;
        EXPECT(notif_wait(&b, &nt) == 0);
        seen1 += nt.len == sizeof(n1) && memcmp(nt.msg, n1, nt.len) == 0;
        seen2 += nt.len == sizeof(n2) && memcmp(nt.msg, n2, nt.len) == 0;
    }
    EXPECT_EQ(early, 0);
    EXPECT_EQ(seen1, 1);
    EXPECT_EQ(seen2, 1);
    EXPECT(b.mem[0] == 0xA1 && b.mem[W1 - 1] == 0xA1 && b.mem[W1] == 0xB2);
    tpx_xfer_release(xr);
    tpx_xfer_release(xs);
    tpx_xfer_release(x1);
    tpx_xfer_release(x2);
    tpx_remote_release(rm);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

/* Two-sided: `len` bytes of a at aoff to b at boff, checked. */
static int two_checked(side_t *a, tpx_peer_t *pa, side_t *b, tpx_peer_t *pb, size_t aoff,
                       size_t boff, size_t len)
{
    tpx_xfer_t *xs = NULL, *xr = NULL;
    size_t sent = 0, got = 0;
    tpx_status_t ss = tpx_recv(pb, b->r, boff, len, &xr);
    tpx_status_t rs = ss;
    if (ss == TPX_OK)
        ss = tpx_send(pa, a->r, aoff, len, &xs);
    if (ss == TPX_OK)
        ss = tpx_xfer_wait(xs, 60000, &sent);
    if (rs == TPX_OK)
        rs = tpx_xfer_wait(xr, 60000, &got);
    int bad = ss != TPX_OK || rs != TPX_OK || got != len ||
              memcmp(a->mem + aoff, b->mem + boff, len) != 0;
    if (bad)
        fprintf(stderr, "send of %zu bytes: send %s, recv %s (%zu bytes), data %s\n", len,
                tpx_status_string(ss), tpx_status_string(rs), got,
                memcmp(a->mem + aoff, b->mem + boff, len) ? "WRONG" : "ok");
    tpx_xfer_release(xs);
    tpx_xfer_release(xr);
    return bad ? -1 : 0;
}

/* Data channel k of p in both directions: plugin comms it had before its
 * current one (rejoins), and the requests its receive comm completed. */
static void chan_look(tpx_engine_t *e, tpx_peer_t *p, int k, uint32_t *gen_s, uint32_t *gen_r,
                      uint64_t *done_r)
{
    pthread_mutex_lock(&e->lock);
    *gen_s = p->send[k]->gen;
    *gen_r = p->recv[k]->gen;
    *done_r = p->recv[k]->win.done;
    pthread_mutex_unlock(&e->lock);
}

/* The pair the failover tests run on: sides a and b of 64 MiB, b's
 * metadata loaded by a (rm), and a peer on each (a connects: pa, b
 * accepts: pb). Nonzero when a check failed. */
static int pair_open(side_t *a, side_t *b, tpx_remote_t **rm, tpx_peer_t **pa, tpx_peer_t **pb)
{
    EXPECT(side_open(a, "A", 64u << 20, 0) == 0);
    EXPECT(side_open(b, "B", 64u << 20, 0) == 0);
    *rm = load(a, b);
    EXPECT(*rm != NULL);
    *pa = *pb = NULL;
    EXPECT(tpx_peer_connect(a->e, "127.0.0.1", tpx_engine_port(b->e), 5000, pa) == TPX_OK);
    EXPECT(tpx_peer_accept(b->e, 5000, pb) == TPX_OK);
    return test_failed() ? -1 : 0;
}

static void pair_close(side_t *a, side_t *b, tpx_remote_t *rm, tpx_peer_t *pa, tpx_peer_t *pb)
{
    tpx_peer_close(pa);
    tpx_peer_close(pb);
    tpx_remote_release(rm);
    side_close(a);
    side_close(b);
}

static int failover_round(side_t *a, side_t *b, tpx_remote_t *rm, tpx_peer_t *pa, tpx_peer_t *pb)
{
    blk_t blk[16];
    int bad = 0;
    make_blocks(blk, 16, a->size, 3u << 20);
    fill(a->mem, a->size, rnd());
    fill(b->mem, b->size, rnd());
    bad |= run_checked(a, b, rm, TPX_OP_WRITE, blk, 16, "failover") != 0;
    make_blocks(blk, 16, a->size, 3u << 20);
    bad |= run_checked(a, b, rm, TPX_OP_READ, blk, 16, "failover") != 0;
    bad |= two_checked(a, pa, b, pb, 0, 32u << 20, 24u << 20) != 0;
    bad |= two_checked(b, pb, a, pa, 1u << 20, 33u << 20, 20u << 20) != 0;
    return bad ? -1 : 0;
}

/* A data channel lost mid-transfer while the peer lives (run with
 * TPX_FAULT_CHANNEL_DIE: channel 1 of every peer stops completing in both
 * directions after its first message, as a NIC whose link went down):
 * WRITEs, READs and two-sided sends in flight on it complete with every
 * byte right, their missing chunks dealt again over the other channels, and
 * later transfers go over those (both sides deal them alike: the bytes say
 * so). Both directions of both connections lose the channel. The lost
 * channel is then connected again (the fault spares its new connection, as
 * a NIC that came back) and rejoins the dealing: the rounds after that move
 * bytes over it again, every byte checked.
 *
 * With TPX_FAULT_CHANNEL_DIE_ALSO a second channel dies with it (two losses
 * repaired at once: the second REPAIR leaves before the first is answered);
 * with TPX_FAULT_CHANNEL_DIE_NEXT a second one dies as the first repair
 * starts, holding chunks the first repair dealt to it; with both, a third
 * dies as the first two are repaired, leaving one channel. Every one is
 * lost, repaired and rejoined in every direction, bytes right. */
static int t_failover(void)
{
    int lost[3] = {1, -1, -1}, nlost = 1;
    const char *also = getenv("TPX_FAULT_CHANNEL_DIE_ALSO");
    const char *next = getenv("TPX_FAULT_CHANNEL_DIE_NEXT");
    if (also != NULL && atoi(also) > 0)
        lost[nlost++] = atoi(also) - 1;
    if (next != NULL && atoi(next) > 0)
        lost[nlost++] = atoi(next) - 1;
    side_t a, b;
    tpx_remote_t *rm;
    tpx_peer_t *pa, *pb;
    if (pair_open(&a, &b, &rm, &pa, &pb) != 0)
        return 1;
    tpx_engine_counters_t ca = {.size = sizeof(ca)}, cb = {.size = sizeof(cb)};
    /* each side loses each dying channel as a receiver on each of its two
     * peers, once, and connects it again */
    uint64_t want = 2 * (uint64_t)nlost;
    /* Rounds until the lost channels have rejoined in all four directions
     * (each side, as a receiver, on each of its two peers: the transfers'
     * own progress drives the reconnects), at most 40. */
    int rounds = 0;
    for (; rounds < 40 && !test_failed(); rounds++) {
        EXPECT(failover_round(&a, &b, rm, pa, pb) == 0);
        EXPECT(tpx_engine_counters(a.e, &ca) == TPX_OK && tpx_engine_counters(b.e, &cb) == TPX_OK);
        if (rounds >= 2 && ca.chan_rejoined == want && cb.chan_rejoined == want)
            break;
    }
    EXPECT(ca.chan_rejoined == want && cb.chan_rejoined == want);
    EXPECT(ca.chan_lost == want && cb.chan_lost == want);
    EXPECT(ca.chunks_resent > 0 && cb.chunks_resent > 0);
    if (test_failed()) /* a peer that failed has no comms to look at */
        TEST_DONE();
    uint32_t gs[3][4], gr[3][4];
    uint64_t d0[3][2], d1[3][2];
    for (int i = 0; i < nlost; i++) {
        chan_look(a.e, pa, lost[i], &gs[i][0], &gr[i][0], &d0[i][0]);
        chan_look(b.e, pb, lost[i], &gs[i][1], &gr[i][1], &d0[i][1]);
    }
    /* the rejoined channels carry data again, in both directions, bytes right */
    for (int round = 0; round < 3 && !test_failed(); round++)
        EXPECT(failover_round(&a, &b, rm, pa, pb) == 0);
    for (int i = 0; i < nlost; i++) {
        chan_look(a.e, pa, lost[i], &gs[i][2], &gr[i][2], &d1[i][0]);
        chan_look(b.e, pb, lost[i], &gs[i][3], &gr[i][3], &d1[i][1]);
        for (int j = 0; j < 4; j++)
            EXPECT(gs[i][j] == 1 && gr[i][j] == 1);
        EXPECT(d1[i][0] > d0[i][0] && d1[i][1] > d0[i][1]);
    }
    EXPECT(tpx_engine_counters(a.e, &ca) == TPX_OK && tpx_engine_counters(b.e, &cb) == TPX_OK);
    EXPECT(ca.chan_lost == want && cb.chan_lost == want);
    fprintf(stderr, "channels lost %llu + %llu, rejoined %llu + %llu after %d round(s), "
            "chunks resent %llu + %llu, channel %d received %llu + %llu after\n",
            (unsigned long long)ca.chan_lost, (unsigned long long)cb.chan_lost,
            (unsigned long long)ca.chan_rejoined, (unsigned long long)cb.chan_rejoined,
            rounds + 1, (unsigned long long)ca.chunks_resent,
            (unsigned long long)cb.chunks_resent, lost[nlost - 1],
            (unsigned long long)(d1[nlost - 1][0] - d0[nlost - 1][0]),
            (unsigned long long)(d1[nlost - 1][1] - d0[nlost - 1][1]));
    pair_close(&a, &b, rm, pa, pb);
    TEST_DONE();
}

/* The control stream moves to the bootstrap connection (run with
 * TPX_FAULT_CTRL_FAIL: every peer's control comms fail after a few
 * messages, as a connection whose NIC went down while the peer and its
 * bootstrap connection live): WRITEs, READs and two-sided sends go on with
 * every byte right, no control message lost or taken twice (the control
 * sequence check would fail the peer), on both connections, both ways. */
static int t_ctrlmove(void)
{
    side_t a, b;
    tpx_remote_t *rm;
    tpx_peer_t *pa, *pb;
    if (pair_open(&a, &b, &rm, &pa, &pb) != 0)
        return 1;
    for (int round = 0; round < 4 && !test_failed(); round++)
        EXPECT(failover_round(&a, &b, rm, pa, pb) == 0);
    /* every peer of both engines moved both ways */
    side_t *sides[2] = {&a, &b};
    int peers = 0;
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&sides[i]->e->lock);
        for (tpx_peer_t *p = sides[i]->e->peers; p != NULL; p = p->next) {
            EXPECT(p->state == PEER_READY && p->ctrl_bs_tx && p->ctrl_bs_rx);
            peers++;
        }
        pthread_mutex_unlock(&sides[i]->e->lock);
    }
    EXPECT_EQ(peers, 4);
    pair_close(&a, &b, rm, pa, pb);
    TEST_DONE();
}

/* The state of every peer of engine e: its control stream's two paths
 * (ctrl_bs_tx, ctrl_bs_rx), whether its control comms are open, and
 * whether its peer's READY carried flags; each as want says (-1: any).
 * The number of peers. */
typedef struct {
    int tx, rx, send_open, recv_open, known;
} ctrl_want_t;

static int ctrl_check(tpx_engine_t *e, const char *what, ctrl_want_t w)
{
    /* The side that accepts a peer finishes its set-up a little after the
     * side that connected returned: both peers ready first. */
    for (int k = 0, ready = 0; k < 5000 && ready < 2; k++) {
        ready = 0;
        pthread_mutex_lock(&e->lock);
        for (tpx_peer_t *p = e->peers; p != NULL; p = p->next)
            ready += p->state == PEER_READY;
        pthread_mutex_unlock(&e->lock);
        if (ready < 2)
            usleep(1000);
    }
    int n = 0;
    pthread_mutex_lock(&e->lock);
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next) {
        ctrl_want_t got = {p->ctrl_bs_tx, p->ctrl_bs_rx, p->ctrl_send->comm != NULL,
                           p->ctrl_recv->comm != NULL, p->ready.known};
        if (p->state != PEER_READY || (w.tx >= 0 && got.tx != w.tx) ||
            (w.rx >= 0 && got.rx != w.rx) || (w.send_open >= 0 && got.send_open != w.send_open) ||
            (w.recv_open >= 0 && got.recv_open != w.recv_open) ||
            (w.known >= 0 && got.known != w.known))
            TEST_FAIL_(what, "peer %s: ready %d, to it over bootstrap %d, from it %d, control "
                       "send comm open %d, receive comm open %d, its READY's flags known %d",
                       p->name, p->state == PEER_READY, got.tx, got.rx, got.send_open,
                       got.recv_open, got.known);
        n++;
    }
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* Each side says in its READY whether its control messages go over the
 * bootstrap connection (TPX_CTRL_BOOTSTRAP); the other knows it from READY
 * on, before any message came, and the comms of such a direction are
 * closed at both ends from the set-up on (a stream there never moves
 * back). Run as
 *   ctrlready  both sides TPX_CTRL_BOOTSTRAP=1: no control comm left open;
 *   ctrlmixed  A's engine set to 0 (the plugin's comms), B's 1: A -> B keeps
 *              its comms, B -> A none;
 *   ctrlold    TPX_FAULT_READY_OLD: READYs without flags, as from engines
 *              that predate them: each side sends over the bootstrap
 *              connection unannounced, keeps its send comm open (idle:
 *              the peer's receive comm waits on it), and the receiver learns
 *              the path at the first message (closing its receive comm).
 * WRITEs, READs and two-sided sends both ways, every byte checked, and
 * the state holds after them (nothing moved). */
static int ctrl_ready_run(int mixed)
{
    side_t a, b;
    tpx_remote_t *rm;
    tpx_peer_t *pa, *pb;
    EXPECT(side_open(&a, "A", 64u << 20, 0) == 0);
    EXPECT(side_open(&b, "B", 64u << 20, 0) == 0);
    if (test_failed())
        return 1;
    int old = tpx__faults.ready_old != 0; /* read with the first engine */
    if (mixed) {
        /* settings are the process's (read once): this engine's alone, set
         * before it has any peer */
        pthread_mutex_lock(&a.e->lock);
        a.e->cfg.ctrl_bootstrap = 0;
        pthread_mutex_unlock(&a.e->lock);
    }
    /* (the remote's peer connects after pa/pb, as in pair_open) */
    rm = load(&a, &b);
    EXPECT(rm != NULL);
    EXPECT(tpx_peer_connect(a.e, "127.0.0.1", tpx_engine_port(b.e), 5000, &pa) == TPX_OK);
    EXPECT(tpx_peer_accept(b.e, 5000, &pb) == TPX_OK);
    EXPECT(rm != NULL && tpx_remote_connect(rm, 5000) == TPX_OK);
    if (test_failed())
        return 1;
    for (int round = 0; round < 3 && !test_failed(); round++) {
        const char *what = round == 0 ? "at READY" : "after transfers";
        ctrl_want_t wa, wb;
        if (old) /* the first message tells the receiver (round 0: none came yet) */
            wa = wb = (ctrl_want_t){1, round == 0 ? 0 : 1, 1, round == 0, 0};
        else if (mixed)
            wa = (ctrl_want_t){0, 1, 1, 0, 1}, wb = (ctrl_want_t){1, 0, 0, 1, 1};
        else
            wa = wb = (ctrl_want_t){1, 1, 0, 0, 1};
        EXPECT_EQ(ctrl_check(a.e, what, wa), 2);
        EXPECT_EQ(ctrl_check(b.e, what, wb), 2);
        if (round < 2 && !test_failed())
            EXPECT(failover_round(&a, &b, rm, pa, pb) == 0);
    }
    pair_close(&a, &b, rm, pa, pb);
    TEST_DONE();
}

static int t_ctrlready(void) { return ctrl_ready_run(0); }
static int t_ctrlmixed(void) { return ctrl_ready_run(1); }

/* The stall clock of a control send comm runs from the later of the
 * oldest unseen message's post and the peer's last confirmation (run with
 * TPX_CTRL_BOOTSTRAP=0, TPX_CHANNEL_STALL_MS=400 and
 * TPX_FAULT_CTRL_SLOW_MS=30: each side's control receive comm completes one
 * message per 30 ms). 100 small READs at once: their requests reach the
 * owner in about 3 s, their answers come back as slowly, so the oldest
 * message unseen waits far longer than 400 ms while the confirmations
 * advance every 30-40 ms. A comm that moves slowly is not stalled: no
 * control stream moves, every byte right. */
#define SLOW_READS 100
static int t_ctrlslow(void)
{
    side_t a, b;
    tpx_remote_t *rm;
    tpx_peer_t *pa, *pb;
    if (pair_open(&a, &b, &rm, &pa, &pb) != 0)
        return 1;
    EXPECT(tpx_remote_connect(rm, 5000) == TPX_OK);
    fill(a.mem, a.size, 11);
    fill(b.mem, b.size, 12);
    unsigned char *want = malloc(a.size);
    memcpy(want, a.mem, a.size);
    tpx_xfer_t *x[SLOW_READS];
    uint64_t t0 = test_now_ns();
    for (int i = 0; i < SLOW_READS; i++) {
        size_t off = (size_t)i * 4096 + (size_t)i % 7;
        tpx_iov_t v = {.local = a.r, .local_offset = off, .remote = &b.d,
                       .remote_offset = off + 12345, .len = 64};
        memcpy(want + off, b.mem + off + 12345, 64);
        x[i] = NULL;
        EXPECT(tpx_rma(rm, TPX_OP_READ, &v, 1, NULL, 0, &x[i]) == TPX_OK);
    }
    for (int i = 0; i < SLOW_READS; i++) {
        if (x[i] != NULL)
            EXPECT(tpx_xfer_wait(x[i], 60000, NULL) == TPX_OK);
        tpx_xfer_release(x[i]);
    }
    fprintf(stderr, "%d READs of 64 bytes through slow control comms: %.2f s\n", SLOW_READS,
            (double)(test_now_ns() - t0) / 1e9);
    EXPECT(memcmp(a.mem, want, a.size) == 0);
    free(want);
    /* no control stream moved, in either direction, on any peer */
    EXPECT_EQ(ctrl_check(a.e, "slow control comms", (ctrl_want_t){0, 0, 1, 1, -1}), 2);
    EXPECT_EQ(ctrl_check(b.e, "slow control comms", (ctrl_want_t){0, 0, 1, 1, -1}), 2);
    pair_close(&a, &b, rm, pa, pb);
    TEST_DONE();
}

/* The sweep reads every bootstrap frame that came, up to 16, not one per
 * sweep (the peer confirms control messages every 10 ms with one frame,
 * and rings doorbells: a reader of one frame per 10 ms sweep fell behind
 * until its kept messages looked unseen). B's engine has no progress
 * thread and nobody drives it, so its frames are read only by the sweeps
 * this test runs: A sends 20 doorbells; once they are all in B's socket,
 * one sweep hears 16 (bounded work per peer and sweep), the next 4. */
static int t_ctrldrain(void)
{
    side_t a, b;
    tpx_peer_t *pa = NULL, *pb = NULL;
    EXPECT(side_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(side_open_ex(&b, "B", 1u << 20, 0, 0) == 0);
    if (test_failed())
        return 1;
    EXPECT(tpx_peer_connect(a.e, "127.0.0.1", tpx_engine_port(b.e), 5000, &pa) == TPX_OK);
    EXPECT(tpx_peer_accept(b.e, 5000, &pb) == TPX_OK);
    if (test_failed())
        return 1;
    pthread_mutex_lock(&a.e->lock);
    for (int i = 0; i < 20; i++)
        EXPECT(tpx__bs_send(pa->bs, TPX_MSG_BELL, NULL, 0) == TPX_OK);
    EXPECT(tpx__bs_flush(pa->bs) == TPX_OK);
    pthread_mutex_unlock(&a.e->lock);
    int fd = tpx__bs_fd(pb->bs), queued = 0;
    for (int k = 0; k < 5000 && queued < 20 * TPX_BS_HDR_SIZE; k++) {
        if (ioctl(fd, FIONREAD, &queued) != 0)
            break;
        if (queued < 20 * TPX_BS_HDR_SIZE)
            usleep(1000);
    }
    EXPECT_EQ(queued, 20 * TPX_BS_HDR_SIZE);
    pthread_mutex_lock(&b.e->lock);
    uint64_t n0 = b.e->nbells;
    tpx__peer_sweep(pb, tpx__now_ns());
    uint64_t n1 = b.e->nbells;
    tpx__peer_sweep(pb, tpx__now_ns());
    uint64_t n2 = b.e->nbells;
    int ready = pb->state == PEER_READY;
    pthread_mutex_unlock(&b.e->lock);
    EXPECT(ready);
    EXPECT_EQ(n1 - n0, 16);
    EXPECT_EQ(n2 - n1, 4);
    tpx_peer_close(pa);
    tpx_peer_close(pb);
    side_close(&a);
    side_close(&b);
    TEST_DONE();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {{"basic", t_basic},     {"notif", t_notif},     {"reject", t_reject},
                 {"badargs", t_badargs}, {"dereg", t_dereg},     {"twoway", t_twoway},
                 {"prepost", t_prepost}, {"coalesce", t_coalesce}, {"overflow", t_overflow},
                 {"metadata", t_metadata}, {"bell", t_bell},
                 {"cancel", t_cancel}, {"hostile", t_hostile}, {"holds", t_holds},
                 {"failclose", t_failclose}, {"abi", t_abi},
                 {"pollloop", t_pollloop}, {"pack", t_pack}, {"packmany", t_packmany},
                 {"packfail", t_packfail}, {"packgpu", t_packgpu}, {"relfree", t_relfree},
                 {"inline", t_inline}, {"heldorder", t_heldorder},
                 {"unexport", t_unexport}, {"packsize", t_packsize},
                 {"failover", t_failover}, {"ctrlmove", t_ctrlmove},
                 {"ctrlready", t_ctrlready}, {"ctrlmixed", t_ctrlmixed},
                 {"ctrlslow", t_ctrlslow}, {"ctrldrain", t_ctrldrain}};
    if (argc == 2)
        for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
            if (strcmp(argv[1], tests[i].name) == 0)
                return tests[i].fn();
    fprintf(stderr, "usage: test_rma basic|notif|reject|badargs|dereg|twoway|prepost|coalesce|"
                    "overflow|metadata|bell|cancel|hostile|holds|failclose|abi|pollloop|pack|"
                    "packmany|packfail|packgpu|relfree|inline|heldorder|failover|ctrlmove|ctrlready|"
                    "ctrlmixed|ctrlslow|ctrldrain\n");
    return 2;
}
