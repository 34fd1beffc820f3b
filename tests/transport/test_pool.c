/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool.c - the built-in transport's shared I/O workers.
 *
 * pool:     POOL_COMMS comms of TPX_NSOCKS=8 data connections each between
 *           two processes, every message verified; each process holds no
 *           more threads than before its first comm + TPX_SOCK_WORKERS
 *           (CMake sets 2) + a small constant, however many comms it has.
 * smallbig: small messages (a direct write from isend when the connection
 *           is idle) interleaved with large ones on one comm, many in
 *           flight: every byte verified, each message in its own receive
 *           (order kept), and a round of small messages alone, one at a
 *           time, as a latency-bound caller posts them.
 */
#include <stdlib.h>
#include <string.h>

#include "transport_test.h"

#define POOL_COMMS   32
#define POOL_PER     3 /* messages per comm */
#define POOL_SLOT    (512 * KiB)
#define POOL_WORKERS 2 /* TPX_SOCK_WORKERS of the test (CMake) */
#define POOL_SLACK   2 /* threads beyond the pool a process may gain (none expected) */

static size_t pool_size(int c, int m)
{
    static const size_t s[] = {1, 4096, 65537, 300000, 0, POOL_SLOT, 12345};
    return s[(size_t)(c * 3 + m) % (sizeof(s) / sizeof(s[0]))];
}

static int pool_role(role_t *r, int is_recv)
{
    void *lc[POOL_COMMS], *comm[POOL_COMMS], *mh[POOL_COMMS];
    slot_t s[POOL_COMMS * POOL_PER];
    int thr0 = test_thread_count();
    if (is_recv) /* the sender inits in tt_send_open(), after it has the handle */
        TRY(tt_role_init(r));
    size_t len = (size_t)POOL_COMMS * POOL_PER * POOL_SLOT;
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    if (is_recv)
        TRY(tt_recv_open(r, POOL_COMMS, lc, comm));
    else
        TRY(tt_send_open(r, POOL_COMMS, comm));
    for (int c = 0; c < POOL_COMMS; c++)
        CHECK_RC(nt_regmr(&r->nt, comm[c], buf + (size_t)c * POOL_PER * POOL_SLOT,
                          (size_t)POOL_PER * POOL_SLOT, TPX_NCCL_PTR_HOST, &mh[c]));
    if (is_recv)
        memset(buf, 0xA5, len);
    for (int m = 0; m < POOL_PER; m++) {
        for (int c = 0; c < POOL_COMMS; c++) {
            slot_t *sl = &s[c * POOL_PER + m];
            unsigned char *b = buf + ((size_t)c * POOL_PER + (size_t)m) * POOL_SLOT;
            size_t size = pool_size(c, m);
            int rc;
            sl->req = NULL;
            if (is_recv) {
                rc = nt_irecv1(&r->nt, comm[c], b, POOL_SLOT, m, mh[c], &sl->req);
            } else {
                nt_fill(b, size, tt_seed(40, (unsigned)c, (unsigned)m));
                rc = nt_isend(&r->nt, comm[c], b, size, m, mh[c], &sl->req);
            }
            CHECK(rc == 0 && sl->req != NULL, "comm %d request %d: post returned rc %d", c, m, rc);
        }
    }
    int thr = test_thread_count();
    TRY(tt_wait_all(r, s, POOL_COMMS * POOL_PER, test_deadline_ms(IO_MS), "pool"));
    for (int c = 0; c < POOL_COMMS && is_recv; c++) {
        for (int m = 0; m < POOL_PER; m++) {
            slot_t *sl = &s[c * POOL_PER + m];
            unsigned char *b = buf + ((size_t)c * POOL_PER + (size_t)m) * POOL_SLOT;
            size_t size = pool_size(c, m);
            CHECK(sl->size == (int)size, "comm %d msg %d: size %d, expected %zu", c, m, sl->size,
                  size);
            size_t bad = nt_verify(b, size, tt_seed(40, (unsigned)c, (unsigned)m));
            CHECK(bad == NT_VERIFY_OK, "comm %d msg %d (%zu bytes): first wrong byte at %zu", c,
                  m, size, bad);
            bad = nt_check_byte(b + size, POOL_SLOT - size, 0xA5);
            CHECK(bad == NT_VERIFY_OK, "comm %d msg %d: byte %zu past the message written", c, m,
                  bad);
        }
    }
    test_say("%d comms of 8 data connections: %d threads before the first comm, %d with them "
             "(%d I/O workers)", POOL_COMMS, thr0, thr, POOL_WORKERS);
    CHECK(thr <= thr0 + POOL_WORKERS + POOL_SLACK,
          "%d threads with %d comms: more than %d before + %d workers + %d", thr, POOL_COMMS,
          thr0, POOL_WORKERS, POOL_SLACK);
    for (int c = 0; c < POOL_COMMS; c++)
        CHECK_RC(nt_deregmr(&r->nt, comm[c], mh[c]));
    if (is_recv)
        TRY(tt_recv_close(r, POOL_COMMS, lc, comm));
    else
        for (int c = 0; c < POOL_COMMS; c++)
            CHECK_RC(nt_close_send(&r->nt, comm[c]));
    nt_free(buf, len);
    return tt_expect_no_warnings();
}

int pool_recv(role_t *r) { return pool_role(r, 1); }
int pool_send(role_t *r) { return pool_role(r, 0); }

/* ---- smallbig ---------------------------------------------------------------- */

#define SB_N     24 /* requests in flight (TPX_MAX_REQUESTS is 32) */
#define SB_BIG   (6 * MiB + 3)
#define SB_SLOT  (6 * MiB + 4096)
#define SB_ROUNDS 3
#define SB_ALONE 200 /* small messages one at a time */

static size_t sb_size(int round, int i)
{
    static const size_t small[] = {0, 1, 64, 4096, 65536 - 64, 65536, 777, 30000};
    if ((i + round) % 3 == 2)
        return SB_BIG - (size_t)i;
    return small[(size_t)(i * 5 + round) % (sizeof(small) / sizeof(small[0]))];
}

static int smallbig_role(role_t *r, int is_recv)
{
    void *lc = NULL, *comm, *mh = NULL;
    slot_t s[SB_N];
    if (is_recv)
        TRY(tt_role_init(r));
    if (is_recv)
        TRY(tt_recv_open(r, 1, &lc, &comm));
    else
        TRY(tt_send_open(r, 1, &comm));
    size_t len = (size_t)SB_N * SB_SLOT;
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, comm, buf, len, TPX_NCCL_PTR_HOST, &mh));
    for (int round = 0; round < SB_ROUNDS; round++) {
        if (is_recv)
            memset(buf, 0xA5, len);
        for (int i = 0; i < SB_N; i++) {
            unsigned char *b = buf + (size_t)i * SB_SLOT;
            size_t size = sb_size(round, i);
            int rc;
            s[i].req = NULL;
            if (is_recv) {
                rc = nt_irecv1(&r->nt, comm, b, SB_SLOT, i, mh, &s[i].req);
            } else {
                nt_fill(b, size, tt_seed(41, (unsigned)round, (unsigned)i));
                rc = nt_isend(&r->nt, comm, b, size, i, mh, &s[i].req);
            }
            CHECK(rc == 0 && s[i].req != NULL, "round %d post %d returned rc %d", round, i, rc);
        }
        TRY(tt_wait_all(r, s, SB_N, test_deadline_ms(IO_MS), "smallbig"));
        for (int i = 0; i < SB_N && is_recv; i++) {
            unsigned char *b = buf + (size_t)i * SB_SLOT;
            size_t size = sb_size(round, i);
            CHECK(s[i].size == (int)size, "round %d msg %d: size %d, expected %zu", round, i,
                  s[i].size, size);
            size_t bad = nt_verify(b, size, tt_seed(41, (unsigned)round, (unsigned)i));
            CHECK(bad == NT_VERIFY_OK, "round %d msg %d (%zu bytes): first wrong byte at %zu",
                  round, i, size, bad);
            bad = nt_check_byte(b + size, SB_SLOT - size, 0xA5);
            CHECK(bad == NT_VERIFY_OK, "round %d msg %d: byte %zu past the message written",
                  round, i, bad);
        }
    }
    /* Small messages one at a time: each finds the connection idle. */
    for (int i = 0; i < SB_ALONE; i++) {
        size_t size = (size_t)(i * 331) % (64 * KiB);
        uint64_t seed = tt_seed(42, 0, (unsigned)i);
        if (is_recv)
            TRY(tt_recv_one(r, comm, buf, 64 * KiB + 1, size, i, mh, seed));
        else
            TRY(tt_send_one(r, comm, buf, size, i, mh, seed));
    }
    test_say("%d rounds of %d small and large messages and %d small ones alone verified",
             SB_ROUNDS, SB_N, SB_ALONE);
    CHECK_RC(nt_deregmr(&r->nt, comm, mh));
    if (is_recv)
        TRY(tt_recv_close(r, 1, &lc, &comm));
    else
        CHECK_RC(nt_close_send(&r->nt, comm));
    nt_free(buf, len);
    return tt_expect_no_warnings();
}

int smallbig_recv(role_t *r) { return smallbig_role(r, 1); }
int smallbig_send(role_t *r) { return smallbig_role(r, 0); }
