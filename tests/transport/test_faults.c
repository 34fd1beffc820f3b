/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_faults.c - the failure scenarios of test_transport: a wrong tag, a
 * peer that dies or closes mid-transfer, a close with requests in flight,
 * a sender gone before the receives are posted, garbage on the listen port,
 * a receive too small for its message, invalid arguments. Each must end in
 * an error rc (or the documented outcome) within a deadline: never a hang,
 * a crash, SIGPIPE or a write outside the posted buffer.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "plugin/sock/sock_wire.h"
#include "transport_test.h"

/* ---- scenario: tagmismatch ---------------------------------------------------- */

#define MISMATCH_SIZE 1000

int tagmismatch_recv(role_t *r)
{
    void *lc, *rc, *req = NULL;
    unsigned char buf[MISMATCH_SIZE];
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    /* A matching message first: the comm works. */
    TRY(tt_recv_one(r, rc, buf, sizeof(buf), sizeof(buf), 5, NULL, tt_seed(7, 0, 0)));
    CHECK_RC(nt_irecv1(&r->nt, rc, buf, sizeof(buf), 6, NULL, &req));
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc != NT_TIMEOUT,
          "a receive for tag 6 of a message sent with tag 5 neither "
          "completed nor failed within %d ms",
          IO_MS);
    CHECK(!(w.rc == 0 && w.done),
          "a receive for tag 6 completed with a message sent with tag 5 "
          "(size %d); expected an error rc",
          w.size);
    CHECK(w.done == 0, "test() returned rc %d with done=1", w.rc);
    test_say("tag mismatch reported by test() with rc %d, as expected", w.rc);
    TRY(tt_sync_put(r, 'x'));
    TRY(tt_recv_close(r, 1, &lc, &rc));
    return 0;
}

int tagmismatch_send(role_t *r)
{
    void *sc, *req = NULL;
    unsigned char buf[MISMATCH_SIZE];
    TRY(tt_send_open(r, 1, &sc));
    TRY(tt_send_one(r, sc, buf, sizeof(buf), 5, NULL, tt_seed(7, 0, 0)));
    nt_fill(buf, sizeof(buf), tt_seed(7, 1, 0));
    CHECK_RC(nt_isend(&r->nt, sc, buf, sizeof(buf), 5, NULL, &req));
    TRY(tt_sync_get(r, 'x', IO_MS));
    /* Whatever the sender's request says (done, or the receiver's close), it
     * must say it: no hang. */
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(PEERCLOSE_MS));
    CHECK(w.rc != NT_TIMEOUT,
          "after the receiver rejected the message, the send neither "
          "completed nor failed within %d ms",
          PEERCLOSE_MS);
    test_say("the send of the mismatched message ended with rc %d done %d", w.rc, w.done);
    (void)nt_close_send(&r->nt, sc);
    return 0;
}
/* ---- scenarios: peerclose, peerclose_recv ------------------------------------- */

#define PC_SIZE          GiB
#define PC_KILL_AFTER_MS 20

/* Poll test() for `ms` milliseconds (driving progress), then SIGKILL self. */
static void die_midway(role_t *r, void *req, int ms)
{
    uint64_t end = test_deadline_ms(ms);
    int done = 0, size = 0, rc = 0;
    while (test_now_ns() < end && rc == 0 && !done)
        rc = nt_test(&r->nt, req, &done, &size);
    test_say("killing myself %d ms into a 1 GiB transfer (test: rc %d done %d)", ms, rc, done);
    fflush(stderr);
    kill(getpid(), SIGKILL);
    pause();
}

/* The surviving side: test() must fail with rc 2, done 0, within PEERCLOSE_MS;
 * closing the comm afterwards must not hang. */
static int expect_peer_gone(role_t *r, void *req, const char *side)
{
    uint64_t t0 = test_now_ns();
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(PEERCLOSE_MS));
    double s = test_secs_since(t0);
    CHECK(w.rc != NT_TIMEOUT,
          "%s: the peer died mid-transfer, but test() still reports not-done "
          "with rc 0 after %d ms (hang)",
          side, PEERCLOSE_MS);
    CHECK(!(w.rc == 0 && w.done),
          "%s: the 1 GiB transfer completed before the peer died; "
          "inconclusive (the peer was to die %d ms in)",
          side, PC_KILL_AFTER_MS);
    CHECK(w.rc == TPX_NCCL_SYSTEM_ERROR && w.done == 0,
          "%s: after the peer died, test() returned "
          "rc %d done %d; expected rc %d done 0",
          side, w.rc, w.done, TPX_NCCL_SYSTEM_ERROR);
    test_say("%s: peer death reported as rc %d after %.3f s (%d polls)", side, w.rc, s, w.polls);
    return 0;
}

int peerclose_recv(role_t *r)
{
    void *lc, *rc, *mh = NULL, *req = NULL;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    unsigned char *buf = nt_alloc(PC_SIZE);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, rc, buf, PC_SIZE, TPX_NCCL_PTR_HOST, &mh));
    CHECK_RC(nt_irecv1(&r->nt, rc, buf, PC_SIZE, 0, mh, &req));
    TRY(tt_sync_put(r, 'p'));
    TRY(expect_peer_gone(r, req, "receiver"));
    /* A post after the failure must fail too, not hang. */
    void *req2 = NULL;
    int rc2 = nt_irecv1(&r->nt, rc, buf, 4096, 0, mh, &req2);
    if (rc2 == 0) {
        nt_result_t w = nt_wait(&r->nt, req2, test_deadline_ms(PEERCLOSE_MS));
        CHECK(w.rc != 0 && w.rc != NT_TIMEOUT,
              "a receive posted after the peer died: rc %d "
              "done %d (expected an error)",
              w.rc, w.done);
    }
    CHECK_RC(nt_deregmr(&r->nt, rc, mh));
    uint64_t t0 = test_now_ns();
    (void)nt_close_recv(&r->nt, rc);
    (void)nt_close_listen(&r->nt, lc);
    CHECK(test_secs_since(t0) < 5.0, "closing after the peer died took %.1f s",
          test_secs_since(t0));
    nt_free(buf, PC_SIZE);
    return 0;
}

int peerclose_send(role_t *r)
{
    void *sc, *mh = NULL, *req = NULL;
    TRY(tt_send_open(r, 1, &sc));
    TRY(tt_sync_get(r, 'p', IO_MS));
    unsigned char *buf = nt_alloc(PC_SIZE); /* zero pages: no time spent filling */
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, sc, buf, PC_SIZE, TPX_NCCL_PTR_HOST, &mh));
    CHECK_RC(nt_isend(&r->nt, sc, buf, PC_SIZE, 0, mh, &req));
    die_midway(r, req, PC_KILL_AFTER_MS);
    return 1; /* not reached */
}

int peerclose_recv_side_dies(role_t *r)
{
    void *lc, *rc, *mh = NULL, *req = NULL;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    unsigned char *buf = nt_alloc(PC_SIZE);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, rc, buf, PC_SIZE, TPX_NCCL_PTR_HOST, &mh));
    CHECK_RC(nt_irecv1(&r->nt, rc, buf, PC_SIZE, 0, mh, &req));
    TRY(tt_sync_put(r, 'p'));
    TRY(tt_sync_get(r, 's', IO_MS));
    die_midway(r, req, PC_KILL_AFTER_MS);
    return 1;
}

int peerclose_send_side_survives(role_t *r)
{
    void *sc, *mh = NULL, *req = NULL;
    TRY(tt_send_open(r, 1, &sc));
    TRY(tt_sync_get(r, 'p', IO_MS));
    unsigned char *buf = nt_alloc(PC_SIZE);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, sc, buf, PC_SIZE, TPX_NCCL_PTR_HOST, &mh));
    CHECK_RC(nt_isend(&r->nt, sc, buf, PC_SIZE, 0, mh, &req));
    TRY(tt_sync_put(r, 's'));
    TRY(expect_peer_gone(r, req, "sender"));
    CHECK_RC(nt_deregmr(&r->nt, sc, mh));
    uint64_t t0 = test_now_ns();
    (void)nt_close_send(&r->nt, sc);
    CHECK(test_secs_since(t0) < 5.0, "closeSend after the peer died took %.1f s",
          test_secs_since(t0));
    nt_free(buf, PC_SIZE);
    test_say("sender survived the receiver's death (no SIGPIPE)");
    return 0;
}

/* ---- scenario: garbage ---------------------------------------------------------- */

/* A raw TCP client of the listener. Returns the fd or -1. */
static int raw_connect(const tpx_sock_addr_t *a)
{
    int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, &a->sa, tpx__sock_addr_len(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int raw_send(int fd, const void *buf, size_t n)
{
    return send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* 1 if the plugin closed its end (EOF or reset) within `ms`, else 0. */
static int raw_closed_within(int fd, int ms)
{
    uint64_t deadline = test_deadline_ms(ms);
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        uint64_t now = test_now_ns();
        int left = now >= deadline ? 0 : (int)((deadline - now) / 1000000);
        int pr = poll(&pfd, 1, left);
        if (pr > 0) {
            char b[256];
            ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return 1;
            continue; /* the transport never talks back during the hello; keep reading */
        }
        if (test_now_ns() >= deadline)
            return 0;
    }
}

typedef struct {
    const char *what;
    int fd;
} bad_peer_t;

static void hello_bytes(unsigned char *out, uint16_t kind, uint16_t nsocks, uint64_t nonce,
                        uint64_t conn_id)
{
    tpx_sock_hello_t h = {
        .kind = kind, .index = 0, .nsocks = nsocks, .flags = 0, .nonce = nonce, .conn_id = conn_id};
    tpx__sock_hello_encode(&h, out);
}

/* Connect one bad client of each kind; `phase` picks the set. */
static int garbage_connect(const tpx_sock_handle_t *h, int phase, bad_peer_t *bad, int *nbad)
{
    unsigned char junk[200], hello[TPX_SOCK_HELLO_WIRE_SIZE];
    nt_fill(junk, sizeof(junk), tt_seed(9, (unsigned)phase, 0));
    int n = 0;
#define BAD(name)                                                                                  \
    do {                                                                                           \
        bad[n].what = (name);                                                                      \
        bad[n].fd = raw_connect(&h->addr);                                                         \
        CHECK(bad[n].fd >= 0, "raw connect to the listener (%s): %s", (name), strerror(errno));    \
    } while (0)
    BAD("random bytes");
    CHECK(raw_send(bad[n].fd, junk, sizeof(junk)) == 0, "raw send failed");
    n++;
    BAD("hello with a wrong nonce");
    hello_bytes(hello, TPX_SOCK_HELLO_CTRL, 1, h->nonce ^ 0x1, 0x1111 + (uint64_t)phase);
    CHECK(raw_send(bad[n].fd, hello, sizeof(hello)) == 0, "raw send failed");
    n++;
    if (phase == 0) {
        BAD("hello with a wrong magic");
        hello_bytes(hello, TPX_SOCK_HELLO_CTRL, 1, h->nonce, 0x2222);
        hello[0] ^= 0xff;
        CHECK(raw_send(bad[n].fd, hello, sizeof(hello)) == 0, "raw send failed");
        n++;
        BAD("hello with a wrong version");
        hello_bytes(hello, TPX_SOCK_HELLO_CTRL, 1, h->nonce, 0x3333);
        hello[4] = 0x7f;
        CHECK(raw_send(bad[n].fd, hello, sizeof(hello)) == 0, "raw send failed");
        n++;
        BAD("hello announcing 0 data sockets");
        hello_bytes(hello, TPX_SOCK_HELLO_CTRL, 0, h->nonce, 0x4444);
        CHECK(raw_send(bad[n].fd, hello, sizeof(hello)) == 0, "raw send failed");
        n++;
        BAD("half a hello, then EOF");
        hello_bytes(hello, TPX_SOCK_HELLO_CTRL, 1, h->nonce, 0x5555);
        CHECK(raw_send(bad[n].fd, hello, 10) == 0, "raw send failed");
        shutdown(bad[n].fd, SHUT_WR);
        n++;
        BAD("connect and close at once");
        close(bad[n].fd);
        bad[n].fd = -1;
        n++;
    }
#undef BAD
    *nbad = n;
    return 0;
}

/* Call accept() for `ms` (the plugin reads hellos inside accept); none may
 * return a comm or an error. */
static int accept_idle(role_t *r, void *lc, int ms)
{
    uint64_t end = test_deadline_ms(ms);
    while (test_now_ns() < end) {
        void *c = NULL;
        int rc = nt_accept(&r->nt, lc, &c);
        CHECK(rc == 0, "accept() returned rc %d while only bad peers were connecting", rc);
        CHECK(c == NULL, "accept() returned a comm for a bad peer");
        usleep(1000);
    }
    return 0;
}

static int check_rejected(bad_peer_t *bad, int n, int ms)
{
    for (int i = 0; i < n; i++) {
        if (bad[i].fd < 0)
            continue;
        CHECK(raw_closed_within(bad[i].fd, ms),
              "bad peer '%s' was not closed by the listener "
              "within %d ms",
              bad[i].what, ms);
        close(bad[i].fd);
        bad[i].fd = -1;
    }
    return 0;
}

#define GB_SIZE       (3 * MiB + 5)
#define GB_TIMEOUT_MS 3000 /* TPX_CONNECT_TIMEOUT_MS of this scenario (CMake) */

int garbage_recv(role_t *r)
{
    void *lc, *rc[2], *mh[2];
    unsigned char handle[HANDLE_SIZE];
    tpx_sock_handle_t h;
    bad_peer_t bad0[16], bad1[16];
    int nbad0 = 0, nbad1 = 0;
    TRY(tt_role_init(r));
    CHECK_RC(nt_listen(&r->nt, 0, handle, &lc));
    CHECK(tpx__sock_handle_decode(handle, &h) == TPX_OK, "listen() produced a handle that "
                                                         "tpx__sock_handle_decode rejects");
    char a[96];
    test_say("listener at %s", tpx__sock_addr_str(&h.addr, a, sizeof(a)));

    /* Phase 1: bad peers, including one that stays silent; then the real sender. */
    TRY(garbage_connect(&h, 0, bad0, &nbad0));
    int silent = raw_connect(&h.addr);
    CHECK(silent >= 0, "raw connect: %s", strerror(errno));
    TRY(accept_idle(r, lc, 300));
    TRY(tt_link_put(r, handle, sizeof(handle)));
    CHECK_RC(nt_accept_wait(&r->nt, lc, &rc[0], test_deadline_ms(CONN_MS)));
    test_say("accepted the real sender after %d bad peers and a silent one", nbad0);
    TRY(check_rejected(bad0, nbad0, 1000));

    /* Phase 2: more bad peers, a control connection whose data sockets never
     * come, then a second real comm on the same listener. */
    TRY(garbage_connect(&h, 1, bad1, &nbad1));
    int half = raw_connect(&h.addr);
    CHECK(half >= 0, "raw connect: %s", strerror(errno));
    unsigned char hello[TPX_SOCK_HELLO_WIRE_SIZE];
    hello_bytes(hello, TPX_SOCK_HELLO_CTRL, 2, h.nonce, 0x6666);
    CHECK(raw_send(half, hello, sizeof(hello)) == 0, "raw send failed");
    TRY(accept_idle(r, lc, 200));
    TRY(tt_sync_put(r, 'g'));
    CHECK_RC(nt_accept_wait(&r->nt, lc, &rc[1], test_deadline_ms(CONN_MS)));
    test_say("the listener kept serving: second real comm accepted");
    TRY(check_rejected(bad1, nbad1, 1000));

    /* Phase 3: the silent peer and the incomplete comm expire at their
     * deadline; accept() then times out itself (no real peer is coming). */
    uint64_t t0 = test_now_ns();
    void *c = NULL;
    int arc = nt_accept_wait(&r->nt, lc, &c, test_deadline_ms(4 * GB_TIMEOUT_MS));
    CHECK(arc != NT_TIMEOUT,
          "accept() with no peer coming did not fail within %d ms "
          "(TPX_CONNECT_TIMEOUT_MS=%d)",
          4 * GB_TIMEOUT_MS, GB_TIMEOUT_MS);
    CHECK(c == NULL && arc != 0,
          "accept() returned a comm (rc %d) from a silent peer or an "
          "incomplete set of connections",
          arc);
    test_say("idle accept() failed with rc %d after %.1f s, as expected", arc, test_secs_since(t0));
    CHECK(raw_closed_within(silent, 500), "the silent peer was not closed by its deadline");
    CHECK(raw_closed_within(half, 500), "the control connection without data sockets was not "
                                        "closed by its deadline");
    close(silent);
    close(half);

    /* The real comms work. */
    unsigned char *buf = nt_alloc(2 * GB_SIZE);
    CHECK(buf != NULL, "out of memory");
    for (int i = 0; i < 2; i++) {
        CHECK_RC(
            nt_regmr(&r->nt, rc[i], buf + (size_t)i * GB_SIZE, GB_SIZE, TPX_NCCL_PTR_HOST, &mh[i]));
        TRY(tt_recv_one(r, rc[i], buf + (size_t)i * GB_SIZE, GB_SIZE, GB_SIZE, 0, mh[i],
                        tt_seed(9, 9, (unsigned)i)));
        CHECK_RC(nt_deregmr(&r->nt, rc[i], mh[i]));
        CHECK_RC(nt_close_recv(&r->nt, rc[i]));
    }
    test_say("both real comms transferred %zu bytes, verified", (size_t)GB_SIZE);
    CHECK_RC(nt_close_listen(&r->nt, lc));
    test_say("the plugin logged %d warnings for the bad peers", nt_warn_count());
    nt_free(buf, 2 * GB_SIZE);
    return 0;
}

int garbage_send(role_t *r)
{
    unsigned char handle[HANDLE_SIZE], copy[2][HANDLE_SIZE];
    void *sc[2], *mh[2];
    TRY(tt_link_get(r, handle, sizeof(handle), CONN_MS));
    TRY(tt_role_init(r));
    memcpy(copy[0], handle, sizeof(handle));
    memcpy(copy[1], handle, sizeof(handle));
    CHECK_RC(nt_connect_wait(&r->nt, 0, copy[0], &sc[0], test_deadline_ms(CONN_MS)));
    TRY(tt_sync_get(r, 'g', CONN_MS));
    CHECK_RC(nt_connect_wait(&r->nt, 0, copy[1], &sc[1], test_deadline_ms(CONN_MS)));
    unsigned char *buf = nt_alloc(2 * GB_SIZE);
    CHECK(buf != NULL, "out of memory");
    for (int i = 0; i < 2; i++) {
        CHECK_RC(
            nt_regmr(&r->nt, sc[i], buf + (size_t)i * GB_SIZE, GB_SIZE, TPX_NCCL_PTR_HOST, &mh[i]));
        TRY(tt_send_one(r, sc[i], buf + (size_t)i * GB_SIZE, GB_SIZE, 0, mh[i],
                        tt_seed(9, 9, (unsigned)i)));
    }
    for (int i = 0; i < 2; i++) {
        CHECK_RC(nt_deregmr(&r->nt, sc[i], mh[i]));
        CHECK_RC(nt_close_send(&r->nt, sc[i]));
    }
    nt_free(buf, 2 * GB_SIZE);
    return tt_expect_no_warnings();
}

/* ---- scenario: closebusy ------------------------------------------------------ */

/* closeRecv() with receives in flight (what an abort does): it returns
 * promptly (not after the in-flight data has drained), the plugin writes
 * nothing into the buffers afterwards, and the sender's requests fail with
 * rc 2. All receives share one buffer, all sends one zero-filled buffer:
 * CB_N x CB_SIZE bytes are in flight with CB_SIZE of memory per process. */
#define CB_SIZE    (256 * MiB)
#define CB_N       16
#define CB_CLOSE_S 2.0

int closebusy_recv(role_t *r)
{
    void *lc, *rc, *mh = NULL;
    slot_t s[CB_N];
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    unsigned char *buf = nt_alloc(CB_SIZE);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, rc, buf, CB_SIZE, TPX_NCCL_PTR_HOST, &mh));
    for (int i = 0; i < CB_N; i++)
        CHECK_RC(nt_irecv1(&r->nt, rc, buf, CB_SIZE, 0, mh, &s[i].req));
    TRY(tt_sync_put(r, 'p'));
    TRY(tt_sync_get(r, 's', IO_MS));
    uint64_t end = test_deadline_ms(PC_KILL_AFTER_MS);
    int done = 0, size = 0, trc = 0;
    while (test_now_ns() < end && trc == 0 && !done)
        trc = nt_test(&r->nt, s[0].req, &done, &size);
    CHECK(trc == 0 && !done,
          "the first 256 MiB receive ended within %d ms (rc %d done %d); "
          "inconclusive",
          PC_KILL_AFTER_MS, trc, done);
    CHECK_RC(nt_deregmr(&r->nt, rc, mh));
    uint64_t t0 = test_now_ns();
    CHECK_RC(nt_close_recv(&r->nt, rc));
    double secs = test_secs_since(t0);
    test_say("closeRecv with %d x 256 MiB receives in flight returned in %.3f s", CB_N, secs);
    CHECK(secs < CB_CLOSE_S,
          "closeRecv with receives in flight took %.2f s (> %.0f s): it waits "
          "for in-flight data instead of stopping",
          secs, CB_CLOSE_S);
    memset(buf, 0x77, CB_SIZE);
    usleep(300000);
    size_t bad = nt_check_byte(buf, CB_SIZE, 0x77);
    CHECK(bad == NT_VERIFY_OK, "byte %zu of a receive buffer was written after closeRecv returned",
          bad);
    test_say("no writes into the buffers after closeRecv returned");
    CHECK_RC(nt_close_listen(&r->nt, lc));
    TRY(tt_sync_put(r, 'd'));
    nt_free(buf, CB_SIZE);
    return 0;
}

int closebusy_send(role_t *r)
{
    void *sc, *mh = NULL;
    slot_t s[CB_N];
    TRY(tt_send_open(r, 1, &sc));
    TRY(tt_sync_get(r, 'p', IO_MS));
    unsigned char *buf = nt_alloc(CB_SIZE);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, sc, buf, CB_SIZE, TPX_NCCL_PTR_HOST, &mh));
    for (int i = 0; i < CB_N; i++)
        CHECK_RC(nt_isend(&r->nt, sc, buf, CB_SIZE, 0, mh, &s[i].req));
    TRY(tt_sync_put(r, 's'));
    TRY(tt_sync_get(r, 'd', IO_MS));
    TRY(expect_peer_gone(r, s[CB_N - 1].req, "sender"));
    CHECK_RC(nt_deregmr(&r->nt, sc, mh));
    uint64_t t0 = test_now_ns();
    (void)nt_close_send(&r->nt, sc);
    CHECK(test_secs_since(t0) < 5.0, "closeSend after the receiver closed took %.1f s",
          test_secs_since(t0));
    nt_free(buf, CB_SIZE);
    return 0;
}

/* ---- scenario: latepost ------------------------------------------------------ */

/* The sender finishes (every isend done), closes its comm and exits before
 * the receiver has posted a single receive: the messages are still there to
 * be received, and only a receive beyond them fails (the peer is gone). */
static const size_t late_sizes[] = {0, 1, 4095, 4096, 30000, 0, 7};
#define LATE_N   (int)(sizeof(late_sizes) / sizeof(late_sizes[0]))
#define LATE_BUF (32 * KiB)

int latepost_recv(role_t *r)
{
    void *lc, *rc, *req = NULL;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    TRY(tt_sync_get(r, 'c', IO_MS));
    TRY(tt_wait_peer_exit(r, IO_MS));
    usleep(200000); /* let the plugin see the closed connections first */
    unsigned char *buf = nt_alloc(LATE_BUF);
    CHECK(buf != NULL, "out of memory");
    for (int i = 0; i < LATE_N; i++)
        TRY(tt_recv_one(r, rc, buf, LATE_BUF, late_sizes[i], i, NULL, tt_seed(12, (unsigned)i, 0)));
    test_say("%d messages sent before the sender closed and exited were received, verified",
             LATE_N);
    int prc = nt_irecv1(&r->nt, rc, buf, LATE_BUF, LATE_N, NULL, &req);
    if (prc == 0) {
        nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(PEERCLOSE_MS));
        CHECK(w.rc != NT_TIMEOUT,
              "a receive beyond the last message of a closed sender neither "
              "failed nor completed within %d ms",
              PEERCLOSE_MS);
        CHECK(w.rc != 0,
              "a receive beyond the last message of a closed sender completed "
              "(size %d)",
              w.size);
        prc = w.rc;
    }
    test_say("a receive beyond the last message failed with rc %d, as expected", prc);
    CHECK(prc == TPX_NCCL_SYSTEM_ERROR, "rc %d; a closed peer is rc %d", prc,
          TPX_NCCL_SYSTEM_ERROR);
    (void)nt_close_recv(&r->nt, rc);
    CHECK_RC(nt_close_listen(&r->nt, lc));
    nt_free(buf, LATE_BUF);
    return 0;
}

int latepost_send(role_t *r)
{
    void *sc;
    TRY(tt_send_open(r, 1, &sc));
    unsigned char *buf = nt_alloc(LATE_BUF);
    CHECK(buf != NULL, "out of memory");
    for (int i = 0; i < LATE_N; i++)
        TRY(tt_send_one(r, sc, buf, late_sizes[i], i, NULL, tt_seed(12, (unsigned)i, 0)));
    CHECK_RC(nt_close_send(&r->nt, sc));
    TRY(tt_sync_put(r, 'c'));
    nt_free(buf, LATE_BUF);
    return tt_expect_no_warnings();
}

/* ---- scenario: closerace ------------------------------------------------------ */

/* The sender closes right after its last message is done, while the
 * receiver is polling test() on that message: test() must report the
 * message done (its bytes all arrived before the close), never rc 2.
 * The window is short, so the whole set-up is repeated many times. */
#define CR_ITERS 300
#define CR_SIZE  (64 * KiB)

int closerace_recv(role_t *r)
{
    unsigned char *buf = nt_alloc(CR_SIZE);
    CHECK(buf != NULL, "out of memory");
    TRY(tt_role_init(r));
    for (int it = 0; it < CR_ITERS; it++) {
        void *lc, *rc, *req = NULL;
        TRY(tt_recv_open(r, 1, &lc, &rc));
        CHECK_RC(nt_irecv1(&r->nt, rc, buf, CR_SIZE, 0, NULL, &req));
        TRY(tt_sync_put(r, 'r'));
        nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
        CHECK(w.rc == 0 && w.done == 1,
              "iteration %d: the sender closed right after its message "
              "was done; test() on the receive returned rc %d done %d (after %d polls), but "
              "every byte had arrived",
              it, w.rc, w.done, w.polls);
        size_t bad = nt_verify(buf, CR_SIZE, tt_seed(13, (unsigned)it, 0));
        CHECK(bad == NT_VERIFY_OK, "iteration %d: first wrong byte at %zu", it, bad);
        (void)nt_close_recv(&r->nt, rc);
        CHECK_RC(nt_close_listen(&r->nt, lc));
    }
    test_say("%d sender-closes racing the receiver's test(): all messages reported done", CR_ITERS);
    nt_free(buf, CR_SIZE);
    return 0;
}

int closerace_send(role_t *r)
{
    unsigned char *buf = nt_alloc(CR_SIZE);
    CHECK(buf != NULL, "out of memory");
    for (int it = 0; it < CR_ITERS; it++) {
        void *sc;
        TRY(tt_send_open(r, 1, &sc));
        TRY(tt_sync_get(r, 'r', IO_MS));
        TRY(tt_send_one(r, sc, buf, CR_SIZE, 0, NULL, tt_seed(13, (unsigned)it, 0)));
        CHECK_RC(nt_close_send(&r->nt, sc));
    }
    nt_free(buf, CR_SIZE);
    return 0;
}

/* ---- scenario: recvsmall ----------------------------------------------------- */

#define RS_SEND  MiB
#define RS_POST  (64 * KiB)
#define RS_GUARD MiB

int recvsmall_recv(role_t *r)
{
    void *lc, *rc, *mh = NULL, *req = NULL;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    unsigned char *buf = nt_alloc(RS_POST + RS_GUARD);
    CHECK(buf != NULL, "out of memory");
    memset(buf, 0x5A, RS_POST + RS_GUARD);
    CHECK_RC(nt_regmr(&r->nt, rc, buf, RS_POST, TPX_NCCL_PTR_HOST, &mh));
    CHECK_RC(nt_irecv1(&r->nt, rc, buf, RS_POST, 0, mh, &req));
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc != NT_TIMEOUT,
          "a 64 KiB receive of a 1 MiB message neither failed nor completed "
          "within %d ms",
          IO_MS);
    CHECK(w.rc != 0,
          "a 64 KiB receive of a 1 MiB message completed (size %d); expected an "
          "error rc",
          w.size);
    CHECK(w.done == 0, "test() returned rc %d with done=1", w.rc);
    size_t bad = nt_check_byte(buf + RS_POST, RS_GUARD, 0x5A);
    CHECK(bad == NT_VERIFY_OK,
          "OVERRUN: guard byte %zu after the 64 KiB receive buffer was "
          "written",
          bad);
    test_say("receive too small: test() rc %d, done 0, guard bytes intact", w.rc);
    CHECK(w.rc == TPX_NCCL_INTERNAL_ERROR, "rc %d; the transport's spec says %d", w.rc,
          TPX_NCCL_INTERNAL_ERROR);
    TRY(tt_sync_put(r, 'x'));
    CHECK_RC(nt_deregmr(&r->nt, rc, mh));
    (void)nt_close_recv(&r->nt, rc);
    CHECK_RC(nt_close_listen(&r->nt, lc));
    bad = nt_check_byte(buf + RS_POST, RS_GUARD, 0x5A);
    CHECK(bad == NT_VERIFY_OK, "OVERRUN after close: guard byte %zu written", bad);
    nt_free(buf, RS_POST + RS_GUARD);
    return 0;
}

int recvsmall_send(role_t *r)
{
    void *sc, *mh = NULL, *req = NULL;
    TRY(tt_send_open(r, 1, &sc));
    unsigned char *buf = nt_alloc(RS_SEND);
    CHECK(buf != NULL, "out of memory");
    nt_fill(buf, RS_SEND, tt_seed(10, 0, 0));
    CHECK_RC(nt_regmr(&r->nt, sc, buf, RS_SEND, TPX_NCCL_PTR_HOST, &mh));
    CHECK_RC(nt_isend(&r->nt, sc, buf, RS_SEND, 0, mh, &req));
    TRY(tt_sync_get(r, 'x', IO_MS));
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(PEERCLOSE_MS));
    CHECK(w.rc != NT_TIMEOUT,
          "after the receiver rejected the message, the send neither "
          "completed nor failed within %d ms",
          PEERCLOSE_MS);
    test_say("the send of the oversized message ended with rc %d done %d", w.rc, w.done);
    CHECK_RC(nt_deregmr(&r->nt, sc, mh));
    (void)nt_close_send(&r->nt, sc);
    nt_free(buf, RS_SEND);
    return 0;
}

/* ---- scenario: badargs -------------------------------------------------------- */

#define BA_TIMEOUT_MS 2000 /* TPX_CONNECT_TIMEOUT_MS of this scenario (CMake) */
#define BA_SIZE       (100 * KiB)

static int bad_props(role_t *r)
{
    int ndev = 0;
    nt_props_t p;
    CHECK_RC(nt_devices(&r->nt, &ndev));
    int rc = nt_props(&r->nt, -1, &p);
    CHECK(rc != 0, "getProperties(-1) returned success");
    rc = nt_props(&r->nt, ndev, &p);
    CHECK(rc != 0, "getProperties(%d) with %d devices returned success", ndev, ndev);
    return 0;
}

/* connect() with this handle must fail (not hang) well within the deadline. */
static int connect_must_fail(role_t *r, const unsigned char *handle, const char *what)
{
    unsigned char h[HANDLE_SIZE];
    void *c = NULL;
    memcpy(h, handle, sizeof(h));
    uint64_t t0 = test_now_ns();
    int rc = nt_connect_wait(&r->nt, 0, h, &c, test_deadline_ms(3 * BA_TIMEOUT_MS + 2000));
    CHECK(rc != NT_TIMEOUT,
          "connect with %s neither failed nor connected within %d ms (the "
          "connect deadline is %d ms)",
          what, 3 * BA_TIMEOUT_MS + 2000, BA_TIMEOUT_MS);
    CHECK(rc != 0, "connect with %s returned a comm %p", what, c);
    test_say("connect with %s failed with rc %d after %.2f s, as expected", what, rc,
             test_secs_since(t0));
    return 0;
}

/* Binds (without listening) every address of a closed listener's handle, so
 * that no other process can listen there while the sender tries the handle:
 * a connect to it is refused, as for a port nobody holds. Returns 0 and the
 * sockets in fds[], or -1 when one address was taken in the meantime. */
static int reserve_handle(const unsigned char *handle, int fds[TPX_SOCK_HANDLE_MAX_ADDRS])
{
    tpx_sock_handle_t h;
    for (int i = 0; i < TPX_SOCK_HANDLE_MAX_ADDRS; i++)
        fds[i] = -1;
    if (tpx__sock_handle_decode(handle, &h) != TPX_OK)
        return -1;
    for (int i = 0; i < (h.naddrs > 0 ? h.naddrs : 1); i++) {
        const tpx_sock_addr_t *a = tpx__sock_handle_addr(&h, i);
        int v6 = a->sin.sin_family == AF_INET6;
        fds[i] = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0 || bind(fds[i], (const struct sockaddr *)a,
                               v6 ? sizeof(a->sin6) : sizeof(a->sin)) != 0)
            return -1;
    }
    return 0;
}

static void unreserve_handle(int fds[TPX_SOCK_HANDLE_MAX_ADDRS])
{
    for (int i = 0; i < TPX_SOCK_HANDLE_MAX_ADDRS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

int badargs_recv(role_t *r)
{
    void *lc, *lc_closed, *rc, *req = NULL;
    unsigned char handles[2][HANDLE_SIZE];
    int ndev = 0;
    TRY(tt_role_init(r));
    TRY(bad_props(r));
    CHECK_RC(nt_devices(&r->nt, &ndev));
    void *l = NULL;
    CHECK(nt_listen(&r->nt, ndev, handles[0], &l) != 0, "listen on device %d of %d succeeded", ndev,
          ndev);
    CHECK(nt_listen(&r->nt, -1, handles[0], &l) != 0, "listen on device -1 succeeded");
    CHECK_RC(nt_listen(&r->nt, 0, handles[0], &lc));
    /* The closed listener's port stays ours until the sender has tried it:
     * a test running beside this one could otherwise listen on it and
     * accept the connect. The port is free between the close and the bind
     * for an instant; when another socket took it then, take a new one. */
    int held[TPX_SOCK_HANDLE_MAX_ADDRS], reserved = -1;
    for (int tries = 0; tries < 20 && reserved != 0; tries++) {
        CHECK_RC(nt_listen(&r->nt, 0, handles[1], &lc_closed));
        CHECK_RC(nt_close_listen(&r->nt, lc_closed));
        reserved = reserve_handle(handles[1], held);
        if (reserved != 0)
            unreserve_handle(held);
    }
    CHECK(reserved == 0, "could not hold the port of a closed listener (%s)", strerror(errno));
    TRY(tt_link_put(r, handles, sizeof(handles)));
    TRY(tt_sync_get(r, 'c', 60000)); /* the sender's failing connects come first */
    unreserve_handle(held);
    CHECK_RC(nt_accept_wait(&r->nt, lc, &rc, test_deadline_ms(CONN_MS)));

    /* irecv with n = 2 (maxRecvs is 1). */
    unsigned char *buf = nt_alloc(2 * BA_SIZE);
    CHECK(buf != NULL, "out of memory");
    void *data[2] = {buf, buf + BA_SIZE};
    size_t sizes[2] = {BA_SIZE, BA_SIZE};
    int tags[2] = {0, 0};
    void *mhs[2] = {NULL, NULL};
    int rc2 = nt_irecv(&r->nt, rc, 2, data, sizes, tags, mhs, &req);
    CHECK(rc2 != 0, "irecv with n = 2 (maxRecvs 1) returned success (request %p)", req);
    test_say("irecv with n = 2 refused with rc %d", rc2);
    /* A post that failed never completes; the comm still works. */
    TRY(tt_recv_one(r, rc, buf, BA_SIZE, BA_SIZE, 0, NULL, tt_seed(11, 0, 0)));
    CHECK_RC(nt_close_recv(&r->nt, rc));
    CHECK_RC(nt_close_listen(&r->nt, lc));
    nt_free(buf, 2 * BA_SIZE);
    return 0;
}

int badargs_send(role_t *r)
{
    unsigned char handles[2][HANDLE_SIZE], h[HANDLE_SIZE];
    void *sc;
    TRY(tt_link_get(r, handles, sizeof(handles), CONN_MS));
    TRY(tt_role_init(r));
    TRY(bad_props(r));
    memset(h, 0, sizeof(h));
    TRY(connect_must_fail(r, h, "an all-zero handle"));
    nt_fill(h, sizeof(h), tt_seed(11, 1, 0));
    TRY(connect_must_fail(r, h, "a random handle"));
    /* A well-formed handle for an address that loopback cannot reach
     * (TEST-NET-1, RFC 5737). */
    tpx_sock_handle_t dead = {.nonce = 42};
    dead.addr.sin.sin_family = AF_INET;
    dead.addr.sin.sin_port = htons(9);
    dead.addr.sin.sin_addr.s_addr = htonl(0xC0000201u); /* 192.0.2.1 */
    tpx__sock_handle_encode(&dead, h);
    TRY(connect_must_fail(r, h, "a handle for an address device 0 cannot reach (192.0.2.1)"));
    TRY(connect_must_fail(r, handles[1], "the handle of a closed listener"));
    TRY(tt_sync_put(r, 'c'));
    memcpy(h, handles[0], sizeof(h));
    CHECK_RC(nt_connect_wait(&r->nt, 0, h, &sc, test_deadline_ms(CONN_MS)));
    unsigned char *buf = nt_alloc(BA_SIZE);
    CHECK(buf != NULL, "out of memory");
    TRY(tt_send_one(r, sc, buf, BA_SIZE, 0, NULL, tt_seed(11, 0, 0)));
    CHECK_RC(nt_close_send(&r->nt, sc));
    nt_free(buf, BA_SIZE);
    return 0;
}

/* ---- scenarios: failover, failover_stream, failover_all ------------------------------ */
/*
 * A comm that fails over (TPX_SOCK_FAILOVER=1, TPX_NSOCKS=4: CMake) loses
 * data connections in the middle of a message: the sender resets them
 * itself (connect(AF_UNSPEC) on the socket: an RST to the receiver, and
 * ECONNRESET/EPIPE on the sender's next use), as a NIC that died would end
 * them. The sender finds its data connections among its process's TCP
 * sockets as the ones with bytes queued (its control connection carries
 * none while a message is in flight; the link to the peer role is a unix
 * socket).
 *
 *   failover         the receiver posts nothing until the reset, so the
 *                    64 MiB message cannot have completed: one connection
 *                    with pieces in flight is reset; the message and one
 *                    after it arrive whole over the other three.
 *   failover_stream  the receiver's receive is posted first and a
 *                    connection is reset while the 256 MiB message
 *                    streams: pieces partly read on it are sent again.
 *   failover_all     every data connection is reset: both sides fail
 *                    (rc != 0) within PEERCLOSE_MS, as without failover.
 */
#include <fcntl.h>
#include <dirent.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>

#define FO_NSOCKS 4
#define FO_SIZE   (64 * MiB)
#define FO_STREAM (256 * MiB)
#define FO_AFTER  (4 * MiB)

/* The TCP sockets of this process with bytes queued to send, up to max. */
static int fo_busy_sockets(int *fds, int max)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        struct sockaddr_storage a;
        socklen_t al = sizeof(a);
        int type = 0, outq = 0;
        socklen_t tl = sizeof(type);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
            getsockname(fd, (struct sockaddr *)&a, &al) != 0 ||
            (a.ss_family != AF_INET && a.ss_family != AF_INET6) ||
            ioctl(fd, SIOCOUTQ, &outq) != 0 || outq <= 0)
            continue;
        fds[n++] = fd;
    }
    closedir(d);
    return n;
}

int tt_reset_busy(int want, int kill)
{
    int fds[16], n = 0;
    uint64_t deadline = test_deadline_ms(IO_MS);
    while ((n = fo_busy_sockets(fds, 16)) < want && test_now_ns() < deadline)
        usleep(1000);
    if (n < want)
        return 0;
    struct sockaddr unspec = {.sa_family = AF_UNSPEC};
    for (int i = 0; i < kill; i++)
        if (connect(fds[i], &unspec, sizeof(unspec)) != 0)
            return 0;
    return kill;
}

static int fo_expect_failed(role_t *r, void *req, const char *side)
{
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(PEERCLOSE_MS));
    CHECK(w.rc != NT_TIMEOUT, "%s: every data connection was reset, but test() still says "
                              "not done with rc 0 after %d ms",
          side, PEERCLOSE_MS);
    CHECK(w.rc != 0 && w.done == 0, "%s: every data connection was reset; test() returned "
                                    "rc %d done %d (expected an error)",
          side, w.rc, w.done);
    test_say("%s: a comm with every data connection reset failed with rc %d", side, w.rc);
    return 0;
}

/* The receiver of failover / failover_stream / failover_all. */
static int fo_recv(role_t *r, size_t size, int post_first, int all)
{
    void *lc, *rc, *req = NULL;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    unsigned char *buf = nt_alloc(size);
    CHECK(buf != NULL, "out of memory");
    if (post_first)
        CHECK_RC(nt_irecv1(&r->nt, rc, buf, size, 1, NULL, &req));
    TRY(tt_sync_put(r, 'p'));
    TRY(tt_sync_get(r, 'x', IO_MS)); /* the sender reset its connection(s) */
    int posted = post_first ? 0 : nt_irecv1(&r->nt, rc, buf, size, 1, NULL, &req);
    if (all && posted != 0) {
        test_say("receiver: a comm with every data connection reset refused a receive (rc %d)",
                 posted);
    } else if (all) {
        TRY(fo_expect_failed(r, req, "receiver"));
    } else {
        CHECK(posted == 0, "irecv after one data connection was reset: rc %d", posted);
        nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
        CHECK(w.rc == 0 && w.done == 1 && w.size == (int)size,
              "the receive of a %zu-byte message whose data connection was reset: rc %d "
              "done %d size %d (expected rc 0, done, all bytes)",
              size, w.rc, w.done, w.size);
        size_t bad = nt_verify(buf, size, tt_seed(40, 0, 0));
        CHECK(bad == NT_VERIFY_OK, "first wrong byte at %zu of %zu", bad, size);
        TRY(tt_recv_one(r, rc, buf, FO_AFTER, FO_AFTER, 2, NULL, tt_seed(40, 1, 0)));
        test_say("%zu MiB arrived whole over the connections left, and %zu MiB after it",
                 size / MiB, FO_AFTER / MiB);
    }
    TRY(tt_sync_put(r, 'd'));
    (void)nt_close_recv(&r->nt, rc);
    CHECK_RC(nt_close_listen(&r->nt, lc));
    nt_free(buf, size);
    return 0;
}

/* Every failover sender's start: its comm opened, the receiver ready
 * ('p'), and the first message, `size` bytes of tt_seed(series, 0, 0)
 * with tag 1, posted from a new buffer (*buf, its request *req). */
static int fo_send_first(role_t *r, size_t size, unsigned series, void **sc, unsigned char **buf,
                         void **req)
{
    *req = NULL;
    TRY(tt_send_open(r, 1, sc));
    TRY(tt_sync_get(r, 'p', IO_MS));
    *buf = nt_alloc(size);
    CHECK(*buf != NULL, "out of memory");
    nt_fill(*buf, size, tt_seed(series, 0, 0));
    CHECK_RC(nt_isend(&r->nt, *sc, *buf, size, 1, NULL, req));
    return 0;
}

static int fo_send(role_t *r, size_t size, int all)
{
    void *sc, *req;
    unsigned char *buf;
    TRY(fo_send_first(r, size, 40, &sc, &buf, &req));
    int kill = all ? FO_NSOCKS : 1;
    CHECK(tt_reset_busy(all ? FO_NSOCKS : 2, kill) == kill,
          "found no %d data connections with bytes queued to reset", all ? FO_NSOCKS : 2);
    TRY(tt_sync_put(r, 'x'));
    if (all) {
        TRY(fo_expect_failed(r, req, "sender"));
    } else {
        nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
        CHECK(w.rc == 0 && w.done == 1, "the send of a %zu-byte message whose data connection "
                                        "was reset: rc %d done %d (expected rc 0, done)",
              size, w.rc, w.done);
        TRY(tt_send_one(r, sc, buf, FO_AFTER, 2, NULL, tt_seed(40, 1, 0)));
    }
    TRY(tt_sync_get(r, 'd', IO_MS));
    (void)nt_close_send(&r->nt, sc);
    nt_free(buf, size);
    return 0;
}

int failover_recv(role_t *r) { return fo_recv(r, FO_SIZE, 0, 0); }
int failover_send(role_t *r) { return fo_send(r, FO_SIZE, 0); }
int failover_stream_recv(role_t *r) { return fo_recv(r, FO_STREAM, 1, 0); }
int failover_stream_send(role_t *r) { return fo_send(r, FO_STREAM, 0); }
int failover_all_recv(role_t *r) { return fo_recv(r, FO_SIZE, 0, 1); }
int failover_all_send(role_t *r) { return fo_send(r, FO_SIZE, 1); }

/* ---- scenario: failover_rejoin ---------------------------------------------------- */
/*
 * A comm that fails over replaces a reset data connection (sock_rejoin.c):
 * the sender resets one of its four while a 64 MiB message is in flight,
 * then sends verified 4 MiB messages one after the other until its process
 * again has four TCP connections that carry data (established, at least
 * 1 MiB acknowledged by the peer: the reset one is closed, so only a new
 * connection makes the fourth), and then one more 64 MiB message, which
 * the four share. The receiver closes its listen comm after the accept,
 * as NCCL and the engine do. The receiver verifies every message. Without rejoining
 * there are three, and the sender gives up after REJ_TRIES messages. The
 * time from the reset until the fourth carries is printed (no bound here:
 * netns.nicfail bounds it where a NIC comes back).
 */
#include <linux/tcp.h>

#define REJ_MSG (4 * MiB)
#define REJ_TRIES 2000 /* 8 GB of 4 MiB messages, seconds on loopback */
#define REJ_CARRY (1 * MiB)

int tt_tcp_carrying(uint64_t min)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        struct tcp_info ti;
        socklen_t tl = sizeof(ti);
        memset(&ti, 0, sizeof(ti));
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0)
            continue;
        if (ti.tcpi_state == 1 /* TCP_ESTABLISHED */ && ti.tcpi_bytes_acked >= min)
            n++;
    }
    closedir(d);
    return n;
}

/* The receiver of failover_rejoin and failover_partial: messages of
 * tt_seed(series, ...). */
static int rej_recv(role_t *r, unsigned series)
{
    void *lc, *rc;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    /* As NCCL and the engine do: the listener's sockets go on for rejoins. */
    CHECK_RC(nt_close_listen(&r->nt, lc));
    unsigned char *buf = nt_alloc(FO_SIZE);
    CHECK(buf != NULL, "out of memory");
    TRY(tt_sync_put(r, 'p'));
    TRY(tt_recv_one(r, rc, buf, FO_SIZE, FO_SIZE, 1, NULL, tt_seed(series, 0, 0)));
    char more = 'm';
    for (int i = 1; more == 'm'; i++) {
        TRY(tt_recv_one(r, rc, buf, REJ_MSG, REJ_MSG, 2, NULL,
                        tt_seed(series, (uint64_t)i, 0)));
        TRY(tt_link_get(r, &more, 1, IO_MS));
    }
    CHECK(more == 'e', "the sender gave up: no fourth connection carried data");
    TRY(tt_recv_one(r, rc, buf, FO_SIZE, FO_SIZE, 3, NULL, tt_seed(series, 1u << 20, 0)));
    test_say("every message arrived whole, over the replaced connection too");
    TRY(tt_sync_put(r, 'd'));
    (void)nt_close_recv(&r->nt, rc);
    nt_free(buf, FO_SIZE);
    return 0;
}

int failover_rejoin_recv(role_t *r) { return rej_recv(r, 41); }

/* After the first message of series 41 or 42 (its request req) on sc:
 * 4 MiB messages one after the other until FO_NSOCKS connections carry
 * data, then one more of FO_SIZE. `what`: the fault, from t0. */
static int rej_send_rest(role_t *r, void *sc, unsigned char *buf, void *req, unsigned series,
                         uint64_t t0, const char *what)
{
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc == 0 && w.done == 1, "the first send (%s): rc %d done %d", what, w.rc, w.done);
    int carrying = 0, i;
    uint64_t t1 = 0;
    for (i = 1; i <= REJ_TRIES; i++) {
        nt_fill(buf, REJ_MSG, tt_seed(series, (uint64_t)i, 0));
        TRY(tt_send_one(r, sc, buf, REJ_MSG, 2, NULL, tt_seed(series, (uint64_t)i, 0)));
        carrying = tt_tcp_carrying(REJ_CARRY);
        if (carrying >= FO_NSOCKS) {
            t1 = test_now_ns();
            break;
        }
        if (i < REJ_TRIES)
            TRY(tt_sync_put(r, 'm'));
    }
    TRY(tt_sync_put(r, carrying >= FO_NSOCKS ? 'e' : 'x'));
    CHECK(carrying >= FO_NSOCKS,
          "after %d messages of %zu MiB, %d TCP connections carry data (expected %d: the "
          "connection lost (%s) made)",
          REJ_TRIES, REJ_MSG / MiB, carrying, FO_NSOCKS, what);
    test_say("%d connections carry data %.1f ms after the fault (%s; %d messages of %zu MiB)",
             carrying, (double)(t1 - t0) / 1e6, what, i, REJ_MSG / MiB);
    nt_fill(buf, FO_SIZE, tt_seed(series, 1u << 20, 0));
    TRY(tt_send_one(r, sc, buf, FO_SIZE, 3, NULL, tt_seed(series, 1u << 20, 0)));
    TRY(tt_sync_get(r, 'd', IO_MS));
    (void)nt_close_send(&r->nt, sc);
    nt_free(buf, FO_SIZE);
    return 0;
}

int failover_rejoin_send(role_t *r)
{
    void *sc, *req;
    unsigned char *buf;
    TRY(fo_send_first(r, FO_SIZE, 41, &sc, &buf, &req));
    CHECK(tt_reset_busy(2, 1) == 1, "found no 2 data connections with bytes queued to reset");
    return rej_send_rest(r, sc, buf, req, 41, test_now_ns(), "a reset");
}

/* ---- scenario: failover_partial --------------------------------------------------- */
/*
 * A comm that fails over connects while one of its data connections
 * cannot be made (TPX_FAULT_SOCK_CONNECT_DOWN=2: the connect of data
 * connection 1 finds its network unreachable, as with its NIC down): it
 * starts with the other three (sock_conn.c, "Members down at connect"),
 * its first 64 MiB message arrives whole, and the missing connection is
 * made by the rejoin thread and carries data, as in failover_rejoin.
 */
int failover_partial_recv(role_t *r) { return rej_recv(r, 42); }

int failover_partial_send(role_t *r)
{
    void *sc, *req;
    unsigned char *buf;
    uint64_t t0 = test_now_ns();
    TRY(fo_send_first(r, FO_SIZE, 42, &sc, &buf, &req));
    return rej_send_rest(r, sc, buf, req, 42, t0, "data connection 1 unreachable at connect");
}

/* ---- scenario: failover_slowread -------------------------------------------------- */
/*
 * A comm that fails over whose receiver reads nothing for a while (a
 * decode rank that posts its receive late): the sender's connections sit
 * in a zero window, their window probes answered. That is no black hole:
 * with TPX_SOCK_STALL_MS=500 (CMake) the receive is posted only after
 * three times that, and the 64 MiB message and one after it must arrive
 * whole with no data connection lost (the plugin warns when one is).
 * A detector that takes a long zero window for a dead path (Linux's
 * TCP_USER_TIMEOUT does) ends every connection, and the comm fails.
 */
#define SR_STALLS 3

static int sr_stall_ms(void)
{
    const char *e = getenv("TPX_SOCK_STALL_MS");
    return e != NULL && atoi(e) > 0 ? atoi(e) : 500;
}

int failover_slowread_recv(role_t *r)
{
    void *lc, *rc, *req = NULL;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    unsigned char *buf = nt_alloc(FO_SIZE);
    CHECK(buf != NULL, "out of memory");
    TRY(tt_sync_put(r, 'p'));
    TRY(tt_sync_get(r, 's', IO_MS)); /* the send is posted */
    usleep((useconds_t)(SR_STALLS * sr_stall_ms()) * 1000u);
    CHECK_RC(nt_irecv1(&r->nt, rc, buf, FO_SIZE, 1, NULL, &req));
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc == 0 && w.done == 1 && w.size == (int)FO_SIZE,
          "a %d MiB receive posted %d ms after its send: rc %d done %d size %d (expected rc 0, "
          "done, all bytes)",
          (int)(FO_SIZE / MiB), SR_STALLS * sr_stall_ms(), w.rc, w.done, w.size);
    size_t bad = nt_verify(buf, FO_SIZE, tt_seed(41, 0, 0));
    CHECK(bad == NT_VERIFY_OK, "first wrong byte at %zu of %zu", bad, (size_t)FO_SIZE);
    TRY(tt_recv_one(r, rc, buf, FO_AFTER, FO_AFTER, 2, NULL, tt_seed(41, 1, 0)));
    test_say("a receive posted %d ms (%d x TPX_SOCK_STALL_MS) after its send: %zu MiB whole, "
             "and %zu MiB after it",
             SR_STALLS * sr_stall_ms(), SR_STALLS, (size_t)(FO_SIZE / MiB),
             (size_t)(FO_AFTER / MiB));
    TRY(tt_sync_put(r, 'd'));
    CHECK_RC(nt_close_recv(&r->nt, rc));
    CHECK_RC(nt_close_listen(&r->nt, lc));
    nt_free(buf, FO_SIZE);
    return tt_expect_no_warnings();
}

int failover_slowread_send(role_t *r)
{
    void *sc, *req;
    unsigned char *buf;
    TRY(fo_send_first(r, FO_SIZE, 41, &sc, &buf, &req));
    TRY(tt_sync_put(r, 's'));
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc == 0 && w.done == 1, "the send of a %d MiB message received %d ms late: rc %d "
                                    "done %d (expected rc 0, done)",
          (int)(FO_SIZE / MiB), SR_STALLS * sr_stall_ms(), w.rc, w.done);
    TRY(tt_send_one(r, sc, buf, FO_AFTER, 2, NULL, tt_seed(41, 1, 0)));
    TRY(tt_sync_get(r, 'd', IO_MS));
    CHECK_RC(nt_close_send(&r->nt, sc));
    nt_free(buf, FO_SIZE);
    return tt_expect_no_warnings();
}
