/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_transport.c - two-process tests of an ncclNet plugin, through its
 * exported tables only.
 *
 *   test_transport PLUGIN_SO ABI SCENARIO
 *
 * The plugin is loaded with dlopen() and driven through "ncclNetPlugin_v<ABI>"
 * exactly as NCCL drives it (see nettest.h). Each scenario is a pair of
 * roles run in two forked processes: the receiver (init, listen on device 0,
 * hand the 128-byte handle over a socketpair, accept, receive, verify) and the
 * sender (read the handle, init, connect, send). The main process only
 * supervises: it forks both roles before anything touches the plugin (the
 * plugin starts threads at init), waits for them with a deadline, kills
 * stragglers and reports. Each role also arms alarm() as a last-resort
 * hang guard. A role exits 0 when its half of the scenario passed.
 *
 * Scenarios that expect a role to die (peerclose, peerclose_recv) have that
 * role SIGKILL itself; the supervisor checks that it died of exactly that.
 *
 * This file holds the harness (transport_test.h), the transfer scenarios and
 * the supervisor; test_faults.c the failure scenarios. The tests run with
 * TPX_SOCKET_IFNAME=lo, so device 0 is loopback.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport_test.h"

/* A role that runs longer than this is killed by SIGALRM (ThreadSanitizer:
 * several times slower; ctest's limit there is 300 s). */
#if defined(__SANITIZE_THREAD__)
#define ROLE_ALARM_S 280
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ROLE_ALARM_S 280
#endif
#endif
#ifndef ROLE_ALARM_S
#define ROLE_ALARM_S 100
#endif
#define SUPERVISE_S  (ROLE_ALARM_S + 10) /* the supervisor kills both roles after this: after
                                            their own guard, which is longer under TSan */
#define GRACE_S      15  /* after one role failed, how long the other may still run */

/* ---- the harness (transport_test.h) ------------------------------------------ */

uint64_t tt_seed(unsigned scen, unsigned a, unsigned b)
{
    return ((uint64_t)scen << 48) ^ ((uint64_t)a << 24) ^ (uint64_t)b ^ 0x5eed;
}

/* ---- the link between the roles -------------------------------------------- */

int tt_link_put(role_t *r, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = send(r->fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            test_say("link write: %s", strerror(errno));
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* 0, or -1 on EOF (the peer is gone), error or timeout. */
int tt_link_get(role_t *r, void *buf, size_t n, int timeout_ms)
{
    char *p = buf;
    uint64_t deadline = test_deadline_ms(timeout_ms);
    while (n > 0) {
        uint64_t now = test_now_ns();
        if (now >= deadline) {
            test_say("link read: no word from the peer role within %d ms", timeout_ms);
            return -1;
        }
        int left = (int)((deadline - now) / 1000000);
        struct pollfd pfd = {.fd = r->fd, .events = POLLIN};
        int pr = poll(&pfd, 1, left > 0 ? left : 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        ssize_t k = read(r->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            test_say("link read: %s", k == 0 ? "the peer role exited" : strerror(errno));
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int tt_sync_put(role_t *r, char c)
{
    return tt_link_put(r, &c, 1);
}

int tt_sync_get(role_t *r, char want, int timeout_ms)
{
    char c = 0;
    if (tt_link_get(r, &c, 1, timeout_ms) != 0)
        return -1;
    if (c != want) {
        test_say("link: expected '%c' from the peer role, got '%c'", want, c);
        return -1;
    }
    return 0;
}

/* Wait until the peer role has exited (EOF on the link). */
int tt_wait_peer_exit(role_t *r, int timeout_ms)
{
    struct pollfd pfd = {.fd = r->fd, .events = POLLIN};
    char c;
    int pr = poll(&pfd, 1, timeout_ms);
    CHECK(pr == 1 && read(r->fd, &c, 1) == 0, "the peer role did not exit within %d ms",
          timeout_ms);
    return 0;
}

/* 1 if the peer role has exited (EOF on the link; pending bytes stay). */
static int peer_gone(role_t *r)
{
    char c;
    return recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- set-up helpers ---------------------------------------------------------- */

int tt_role_init(role_t *r)
{
    if (r->inited)
        return 0;
    r->inited = 1;
    CHECK_RC(nt_init(&r->nt));
    int ndev = 0;
    CHECK_RC(nt_devices(&r->nt, &ndev));
    CHECK(ndev >= 1, "devices() = %d: no device (is TPX_SOCKET_IFNAME=lo set?)", ndev);
    return 0;
}

static int accept_all(role_t *r, int n, void **lcomm, void **rcomm, uint64_t deadline)
{
    for (int i = 0; i < n; i++)
        rcomm[i] = NULL;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (rcomm[i] != NULL)
                continue;
            int rc = nt_accept(&r->nt, lcomm[i], &rcomm[i]);
            CHECK(rc == 0, "accept(listen comm %d) returned rc %d", i, rc);
            pending += rcomm[i] == NULL;
        }
        if (pending == 0)
            return 0;
        CHECK(test_now_ns() < deadline, "accept: %d of %d comms not accepted by the deadline",
              pending, n);
        CHECK(!peer_gone(r), "accept: the sender role exited");
        sched_yield();
    }
}

/* `handles` is n * 128 bytes; each connect is polled with its own buffer. */
static int connect_all(role_t *r, int n, unsigned char *handles, void **scomm, uint64_t deadline)
{
    for (int i = 0; i < n; i++)
        scomm[i] = NULL;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (scomm[i] != NULL)
                continue;
            int rc = nt_connect(&r->nt, 0, handles + (size_t)i * HANDLE_SIZE, &scomm[i]);
            CHECK(rc == 0, "connect(handle %d) returned rc %d", i, rc);
            pending += scomm[i] == NULL;
        }
        if (pending == 0)
            return 0;
        CHECK(test_now_ns() < deadline, "connect: %d of %d comms not connected by the deadline",
              pending, n);
        CHECK(!peer_gone(r), "connect: the receiver role exited");
        sched_yield();
    }
}

/* Receiver: listen n times on device 0, hand the handles over, accept all. */
int tt_recv_open(role_t *r, int n, void **lcomm, void **rcomm)
{
    unsigned char handles[TT_MAX_COMMS * HANDLE_SIZE];
    CHECK(n <= TT_MAX_COMMS, "at most %d comms at once", TT_MAX_COMMS);
    memset(handles, 0, sizeof(handles));
    for (int i = 0; i < n; i++)
        CHECK_RC(nt_listen(&r->nt, 0, handles + (size_t)i * HANDLE_SIZE, &lcomm[i]));
    TRY(tt_link_put(r, handles, (size_t)n * HANDLE_SIZE));
    return accept_all(r, n, lcomm, rcomm, test_deadline_ms(CONN_MS));
}

/* Sender: read n handles, init (the first time), connect to each. */
int tt_send_open(role_t *r, int n, void **scomm)
{
    unsigned char handles[TT_MAX_COMMS * HANDLE_SIZE];
    CHECK(n <= TT_MAX_COMMS, "at most %d comms at once", TT_MAX_COMMS);
    TRY(tt_link_get(r, handles, (size_t)n * HANDLE_SIZE, CONN_MS));
    TRY(tt_role_init(r));
    return connect_all(r, n, handles, scomm, test_deadline_ms(CONN_MS));
}

int tt_recv_close(role_t *r, int n, void **lcomm, void **rcomm)
{
    for (int i = 0; i < n; i++) {
        CHECK_RC(nt_close_recv(&r->nt, rcomm[i]));
        CHECK_RC(nt_close_listen(&r->nt, lcomm[i]));
    }
    return 0;
}

/* A scenario without expected errors must not make the plugin warn. */
int tt_expect_no_warnings(void)
{
    int w = nt_warn_count();
    CHECK(w == 0, "the plugin logged %d WARN line(s) in a scenario that expects none", w);
    return 0;
}

/* ---- one message ----------------------------------------------------------- */

/* isend `size` bytes of nt_fill(seed) from buf and wait for it. */
int tt_send_one(role_t *r, void *comm, void *buf, size_t size, int tag, void *mh, uint64_t seed)
{
    void *req = NULL;
    nt_fill(buf, size, seed);
    CHECK_RC(nt_isend(&r->nt, comm, buf, size, tag, mh, &req));
    CHECK(req != NULL, "isend(%zu bytes) returned success without a request", size);
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc != NT_TIMEOUT, "isend of %zu bytes not done within %d ms", size, IO_MS);
    CHECK(w.rc == 0, "test() of an isend of %zu bytes returned rc %d", size, w.rc);
    CHECK(w.size == (int)size, "test() of an isend of %zu bytes reported size %d", size, w.size);
    return 0;
}

/* irecv into buf with capacity `posted`, expect `size` bytes of nt_fill(seed)
 * and the bytes after them (up to `posted`) untouched. */
int tt_recv_one(role_t *r, void *comm, unsigned char *buf, size_t posted, size_t size, int tag,
                void *mh, uint64_t seed)
{
    void *req = NULL;
    memset(buf, 0xA5, posted);
    CHECK_RC(nt_irecv1(&r->nt, comm, buf, posted, tag, mh, &req));
    CHECK(req != NULL, "irecv(%zu bytes) returned success without a request", posted);
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc != NT_TIMEOUT, "irecv of %zu bytes (posted %zu) not done within %d ms", size, posted,
          IO_MS);
    CHECK(w.rc == 0, "test() of an irecv of %zu bytes returned rc %d", size, w.rc);
    CHECK(w.size == (int)size,
          "test() of an irecv posted with %zu bytes reported size %d, "
          "the sender sent %zu",
          posted, w.size, size);
    size_t bad = nt_verify(buf, size, seed);
    CHECK(bad == NT_VERIFY_OK, "message of %zu bytes: first wrong byte at offset %zu", size, bad);
    bad = nt_check_byte(buf + size, posted - size, 0xA5);
    CHECK(bad == NT_VERIFY_OK,
          "message of %zu bytes posted with %zu: byte %zu past the end was "
          "written",
          size, posted, bad);
    return 0;
}

/* test() every request until all are done; any rc is a failure. */
int tt_wait_all(role_t *r, slot_t *s, int n, uint64_t deadline, const char *what)
{
    for (int i = 0; i < n; i++)
        s[i].done = 0;
    int left = n;
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            if (s[i].done)
                continue;
            int done = 0, size = -1;
            int rc = nt_test(&r->nt, s[i].req, &done, &size);
            CHECK(rc == 0, "%s: test() of request %d of %d returned rc %d", what, i, n, rc);
            if (done) {
                s[i].done = 1;
                s[i].size = size;
                left--;
            }
        }
        CHECK(left == 0 || test_now_ns() < deadline,
              "%s: %d of %d requests not done by the deadline", what, left, n);
        sched_yield();
    }
    return 0;
}
/* ---- scenario: sizes ------------------------------------------------------- */

static const size_t sizes_list[] = {0, 1, 4095, 4096, 65537, MiB, 64 * MiB};
#define SIZES_N     (sizeof(sizes_list) / sizeof(sizes_list[0]))
#define SIZES_EXTRA 4097 /* a receive posted larger than the message, by this */
#define SIZES_BUF   (64 * MiB + 2 * SIZES_EXTRA)

static int sizes_recv(role_t *r)
{
    void *lc, *rc, *mh = NULL;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    unsigned char *buf = nt_alloc(SIZES_BUF);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, rc, buf, SIZES_BUF, TPX_NCCL_PTR_HOST, &mh));
    for (unsigned i = 0; i < 2 * SIZES_N; i++) {
        size_t size = sizes_list[i / 2];
        size_t posted = i % 2 ? size + SIZES_EXTRA : size; /* every other one posted larger */
        uint64_t t0 = test_now_ns();
        TRY(tt_recv_one(r, rc, buf, posted, size, 7, mh, tt_seed(1, i, 0)));
        test_say("received %zu bytes (posted %zu) in %.3f s, verified", size, posted,
                 test_secs_since(t0));
    }
    CHECK_RC(nt_deregmr(&r->nt, rc, mh));
    TRY(tt_recv_close(r, 1, &lc, &rc));
    nt_free(buf, SIZES_BUF);
    return tt_expect_no_warnings();
}

static int sizes_send(role_t *r)
{
    void *sc, *mh = NULL;
    TRY(tt_send_open(r, 1, &sc));
    unsigned char *buf = nt_alloc(SIZES_BUF);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, sc, buf, SIZES_BUF, TPX_NCCL_PTR_HOST, &mh));
    for (unsigned i = 0; i < 2 * SIZES_N; i++)
        TRY(tt_send_one(r, sc, buf, sizes_list[i / 2], 7, mh, tt_seed(1, i, 0)));
    CHECK_RC(nt_deregmr(&r->nt, sc, mh));
    CHECK_RC(nt_close_send(&r->nt, sc));
    nt_free(buf, SIZES_BUF);
    return tt_expect_no_warnings();
}

/* ---- scenario: big ------------------------------------------------------------ */

#define BIG_SIZE GiB /* fits the int sizes of v7/v8 too */

static int big_recv(role_t *r)
{
    void *lc, *rc, *mh = NULL, *req = NULL;
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    unsigned char *buf = nt_alloc(BIG_SIZE);
    CHECK(buf != NULL, "out of memory (1 GiB)");
    CHECK_RC(nt_regmr(&r->nt, rc, buf, BIG_SIZE, TPX_NCCL_PTR_HOST, &mh));
    uint64_t t0 = test_now_ns();
    CHECK_RC(nt_irecv1(&r->nt, rc, buf, BIG_SIZE, 1, mh, &req));
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(90000));
    CHECK(w.rc != NT_TIMEOUT, "1 GiB receive not done within 90 s");
    CHECK(w.rc == 0, "test() of the 1 GiB receive returned rc %d", w.rc);
    CHECK(w.size == (int)BIG_SIZE, "1 GiB receive reported size %d", w.size);
    double s = test_secs_since(t0);
    size_t bad = nt_verify(buf, BIG_SIZE, tt_seed(2, 0, 0));
    CHECK(bad == NT_VERIFY_OK, "1 GiB message: first wrong byte at offset %zu", bad);
    test_say("received 1 GiB in %.2f s (%.2f GB/s incl. the sender's fill), verified", s,
             (double)BIG_SIZE / s / 1e9);
    CHECK_RC(nt_deregmr(&r->nt, rc, mh));
    TRY(tt_recv_close(r, 1, &lc, &rc));
    nt_free(buf, BIG_SIZE);
    return tt_expect_no_warnings();
}

static int big_send(role_t *r)
{
    void *sc, *mh = NULL;
    TRY(tt_send_open(r, 1, &sc));
    unsigned char *buf = nt_alloc(BIG_SIZE);
    CHECK(buf != NULL, "out of memory (1 GiB)");
    CHECK_RC(nt_regmr(&r->nt, sc, buf, BIG_SIZE, TPX_NCCL_PTR_HOST, &mh));
    TRY(tt_send_one(r, sc, buf, BIG_SIZE, 1, mh, tt_seed(2, 0, 0)));
    CHECK_RC(nt_deregmr(&r->nt, sc, mh));
    CHECK_RC(nt_close_send(&r->nt, sc));
    nt_free(buf, BIG_SIZE);
    return tt_expect_no_warnings();
}

/* ---- scenarios: inflight16, inflight32 ---------------------------------------- */

static const size_t mix_sizes[] = {0, 1, 17, 4096, 65536, 65537, 300000, MiB, MiB + 3, 2 * MiB - 1};
#define MIX_N           (sizeof(mix_sizes) / sizeof(mix_sizes[0]))
#define MIX_SLOT        (2 * MiB + 4096) /* buffer region per request */
#define INFLIGHT_ROUNDS 4

static size_t inflight_size(int round, int j)
{
    return mix_sizes[(size_t)(round * 3 + j) % MIX_N];
}

static int inflight_recv_n(role_t *r, int n)
{
    void *lc, *rc, *mh = NULL;
    slot_t s[64];
    TRY(tt_role_init(r));
    TRY(tt_recv_open(r, 1, &lc, &rc));
    size_t len = (size_t)n * MIX_SLOT;
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, rc, buf, len, TPX_NCCL_PTR_HOST, &mh));
    for (int round = 0; round < INFLIGHT_ROUNDS; round++) {
        memset(buf, 0xA5, len);
        for (int j = 0; j < n; j++) {
            size_t size = inflight_size(round, j);
            size_t posted = j % 3 == 0 ? size + 100 : size;
            s[j].req = NULL;
            int rc2 = nt_irecv1(&r->nt, rc, buf + (size_t)j * MIX_SLOT, posted, j, mh, &s[j].req);
            CHECK(rc2 == 0 && s[j].req != NULL,
                  "round %d: irecv %d of %d returned rc %d "
                  "(request %p)",
                  round, j, n, rc2, s[j].req);
        }
        TRY(tt_wait_all(r, s, n, test_deadline_ms(IO_MS), "inflight recv"));
        for (int j = 0; j < n; j++) {
            size_t size = inflight_size(round, j);
            unsigned char *b = buf + (size_t)j * MIX_SLOT;
            CHECK(s[j].size == (int)size, "round %d request %d: size %d, the sender sent %zu",
                  round, j, s[j].size, size);
            size_t bad = nt_verify(b, size, tt_seed(3, (unsigned)round, (unsigned)j));
            CHECK(bad == NT_VERIFY_OK, "round %d request %d (%zu bytes): first wrong byte at %zu",
                  round, j, size, bad);
            bad = nt_check_byte(b + size, MIX_SLOT - size, 0xA5);
            CHECK(bad == NT_VERIFY_OK, "round %d request %d: byte %zu past the message written",
                  round, j, bad);
        }
        test_say("round %d: %d receives in flight, all verified", round, n);
    }
    CHECK_RC(nt_deregmr(&r->nt, rc, mh));
    TRY(tt_recv_close(r, 1, &lc, &rc));
    nt_free(buf, len);
    return tt_expect_no_warnings();
}

static int inflight_send_n(role_t *r, int n)
{
    void *sc, *mh = NULL;
    slot_t s[64];
    TRY(tt_send_open(r, 1, &sc));
    size_t len = (size_t)n * MIX_SLOT;
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, sc, buf, len, TPX_NCCL_PTR_HOST, &mh));
    for (int round = 0; round < INFLIGHT_ROUNDS; round++) {
        for (int j = 0; j < n; j++)
            nt_fill(buf + (size_t)j * MIX_SLOT, inflight_size(round, j),
                    tt_seed(3, (unsigned)round, (unsigned)j));
        for (int j = 0; j < n; j++) {
            s[j].req = NULL;
            int rc2 = nt_isend(&r->nt, sc, buf + (size_t)j * MIX_SLOT, inflight_size(round, j), j,
                               mh, &s[j].req);
            CHECK(rc2 == 0 && s[j].req != NULL,
                  "round %d: isend %d of %d returned rc %d "
                  "(request %p)",
                  round, j, n, rc2, s[j].req);
        }
        TRY(tt_wait_all(r, s, n, test_deadline_ms(IO_MS), "inflight send"));
        for (int j = 0; j < n; j++)
            CHECK(s[j].size == (int)inflight_size(round, j),
                  "round %d: send %d reported size %d, sent %zu", round, j, s[j].size,
                  inflight_size(round, j));
    }
    CHECK_RC(nt_deregmr(&r->nt, sc, mh));
    CHECK_RC(nt_close_send(&r->nt, sc));
    nt_free(buf, len);
    return tt_expect_no_warnings();
}

static int inflight16_recv(role_t *r)
{
    return inflight_recv_n(r, 16);
}
static int inflight16_send(role_t *r)
{
    return inflight_send_n(r, 16);
}
static int inflight32_recv(role_t *r)
{
    return inflight_recv_n(r, 32);
}
static int inflight32_send(role_t *r)
{
    return inflight_send_n(r, 32);
}

/* ---- scenario: overflow ----------------------------------------------------- */

/* The request limit the plugin runs with (TPX_MAX_REQUESTS, default 32). */
static int max_requests(void)
{
    const char *e = getenv("TPX_MAX_REQUESTS");
    int v = e != NULL ? atoi(e) : 0;
    return v > 0 && v <= 60 ? v : TPX_NCCL_NET_MAX_REQUESTS;
}

#define OVF_SIZE (64 * KiB)

/* Post `limit` requests, check that one more fails cleanly, drain, and check
 * that the comm still works: the failed post must not have consumed a message. */
static int overflow_role(role_t *r, int is_recv)
{
    void *lc = NULL, *comm, *mh = NULL, *extra = NULL;
    slot_t s[64];
    int limit = max_requests();
    if (is_recv) /* the sender inits in tt_send_open(), after it has the handle */
        TRY(tt_role_init(r));
    if (is_recv)
        TRY(tt_recv_open(r, 1, &lc, &comm));
    else
        TRY(tt_send_open(r, 1, &comm));
    size_t len = (size_t)(limit + 1) * OVF_SIZE;
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, comm, buf, len, TPX_NCCL_PTR_HOST, &mh));
    for (int j = 0; j <= limit; j++) {
        unsigned char *b = buf + (size_t)j * OVF_SIZE;
        if (!is_recv)
            nt_fill(b, OVF_SIZE, tt_seed(4, (unsigned)j, 0));
        void **reqp = j < limit ? &s[j].req : &extra;
        *reqp = NULL;
        int rc = is_recv ? nt_irecv1(&r->nt, comm, b, OVF_SIZE, 0, mh, reqp)
                         : nt_isend(&r->nt, comm, b, OVF_SIZE, 0, mh, reqp);
        if (j < limit) {
            CHECK(rc == 0 && *reqp != NULL, "%s %d of %d returned rc %d (request %p)",
                  is_recv ? "irecv" : "isend", j + 1, limit, rc, *reqp);
            continue;
        }
        CHECK(rc != 0,
              "%s number %d (limit %d) returned success with request %p; expected an "
              "error rc",
              is_recv ? "irecv" : "isend", limit + 1, limit, extra);
        CHECK(rc == TPX_NCCL_INTERNAL_ERROR, "%s number %d failed with rc %d; expected %d",
              is_recv ? "irecv" : "isend", limit + 1, rc, TPX_NCCL_INTERNAL_ERROR);
        test_say("request %d of a %d-request window refused with rc %d, as expected", limit + 1,
                 limit, rc);
    }
    TRY(tt_wait_all(r, s, limit, test_deadline_ms(IO_MS),
                    is_recv ? "overflow recv" : "overflow send"));
    /* The window is free again: the refused request's message comes now. */
    unsigned char *b = buf + (size_t)limit * OVF_SIZE;
    if (is_recv) {
        for (int j = 0; j < limit; j++) {
            CHECK(s[j].size == (int)OVF_SIZE, "request %d reported size %d", j, s[j].size);
            size_t bad =
                nt_verify(buf + (size_t)j * OVF_SIZE, OVF_SIZE, tt_seed(4, (unsigned)j, 0));
            CHECK(bad == NT_VERIFY_OK, "message %d: first wrong byte at %zu", j, bad);
        }
        TRY(tt_recv_one(r, comm, b, OVF_SIZE, OVF_SIZE, 0, mh, tt_seed(4, (unsigned)limit, 0)));
        test_say("after the refused post the comm still works; %d messages verified", limit + 1);
    } else {
        TRY(tt_send_one(r, comm, b, OVF_SIZE, 0, mh, tt_seed(4, (unsigned)limit, 0)));
    }
    CHECK_RC(nt_deregmr(&r->nt, comm, mh));
    if (is_recv)
        TRY(tt_recv_close(r, 1, &lc, &comm));
    else
        CHECK_RC(nt_close_send(&r->nt, comm));
    nt_free(buf, len);
    return 0;
}

static int overflow_recv(role_t *r)
{
    return overflow_role(r, 1);
}
static int overflow_send(role_t *r)
{
    return overflow_role(r, 0);
}

/* ---- scenario: multicomm ------------------------------------------------------ */

#define MC_COMMS  4
#define MC_PER    2 /* requests in flight per comm per round */
#define MC_ROUNDS 4
#define MC_ITERS  2 /* the whole set-up twice: the second must not leak */
#define MC_SLOT   (3 * MiB)

static size_t mc_size(int it, int round, int c, int m)
{
    static const size_t s[] = {3 * MiB, 0, 65536 * 3 + 1, 1, MiB + 7, 4096, 2 * MiB, 777777};
    return s[(size_t)(it + round * 3 + c * 5 + m) % (sizeof(s) / sizeof(s[0]))];
}

static int settle_counts(int fds, int threads, int *fds_now, int *threads_now)
{
    uint64_t deadline = test_deadline_ms(3000);
    do {
        *fds_now = test_fd_count();
        *threads_now = test_thread_count();
        if (*fds_now <= fds && *threads_now <= threads)
            return 0;
        usleep(10000);
    } while (test_now_ns() < deadline);
    return -1;
}

static int multicomm_role(role_t *r, int is_recv)
{
    void *lc[MC_COMMS], *comm[MC_COMMS], *mh[MC_COMMS];
    slot_t s[MC_COMMS * MC_PER];
    int fds0 = 0, thr0 = 0;
    if (is_recv) /* the sender inits in tt_send_open(), after it has the handle */
        TRY(tt_role_init(r));
    size_t len = (size_t)MC_COMMS * MC_PER * MC_SLOT;
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    for (int it = 0; it < MC_ITERS; it++) {
        if (is_recv)
            TRY(tt_recv_open(r, MC_COMMS, lc, comm));
        else
            TRY(tt_send_open(r, MC_COMMS, comm));
        for (int c = 0; c < MC_COMMS; c++)
            CHECK_RC(nt_regmr(&r->nt, comm[c], buf + (size_t)c * MC_PER * MC_SLOT,
                              (size_t)MC_PER * MC_SLOT, TPX_NCCL_PTR_HOST, &mh[c]));
        for (int round = 0; round < MC_ROUNDS; round++) {
            if (is_recv)
                memset(buf, 0xA5, len);
            /* Post interleaved across comms: m-major, then comm. */
            for (int m = 0; m < MC_PER; m++) {
                for (int c = 0; c < MC_COMMS; c++) {
                    slot_t *sl = &s[c * MC_PER + m];
                    unsigned char *b = buf + ((size_t)c * MC_PER + (size_t)m) * MC_SLOT;
                    size_t size = mc_size(it, round, c, m);
                    uint64_t seed =
                        tt_seed(5, (unsigned)(it * 100 + round), (unsigned)(c * 10 + m));
                    int rc;
                    sl->req = NULL;
                    if (is_recv) {
                        rc = nt_irecv1(&r->nt, comm[c], b, MC_SLOT, m, mh[c], &sl->req);
                    } else {
                        nt_fill(b, size, seed);
                        rc = nt_isend(&r->nt, comm[c], b, size, m, mh[c], &sl->req);
                    }
                    CHECK(rc == 0 && sl->req != NULL, "comm %d request %d: post returned rc %d", c,
                          m, rc);
                }
            }
            TRY(tt_wait_all(r, s, MC_COMMS * MC_PER, test_deadline_ms(IO_MS), "multicomm"));
            for (int c = 0; c < MC_COMMS; c++) {
                for (int m = 0; m < MC_PER; m++) {
                    slot_t *sl = &s[c * MC_PER + m];
                    unsigned char *b = buf + ((size_t)c * MC_PER + (size_t)m) * MC_SLOT;
                    size_t size = mc_size(it, round, c, m);
                    uint64_t seed =
                        tt_seed(5, (unsigned)(it * 100 + round), (unsigned)(c * 10 + m));
                    CHECK(sl->size == (int)size,
                          "iter %d round %d comm %d msg %d: size %d, "
                          "expected %zu",
                          it, round, c, m, sl->size, size);
                    if (!is_recv)
                        continue;
                    size_t bad = nt_verify(b, size, seed);
                    CHECK(bad == NT_VERIFY_OK,
                          "iter %d round %d comm %d msg %d (%zu bytes): "
                          "first wrong byte at %zu",
                          it, round, c, m, size, bad);
                    bad = nt_check_byte(b + size, MC_SLOT - size, 0xA5);
                    CHECK(bad == NT_VERIFY_OK, "comm %d msg %d: byte %zu past the message written",
                          c, m, bad);
                }
            }
        }
        for (int c = 0; c < MC_COMMS; c++)
            CHECK_RC(nt_deregmr(&r->nt, comm[c], mh[c]));
        if (is_recv)
            TRY(tt_recv_close(r, MC_COMMS, lc, comm));
        else
            for (int c = 0; c < MC_COMMS; c++)
                CHECK_RC(nt_close_send(&r->nt, comm[c]));
        if (it == 0) {
            /* Give closing helpers a moment, then take the reference. */
            usleep(200000);
            fds0 = test_fd_count();
            thr0 = test_thread_count();
            test_say("iteration 0: %d comms x %d rounds verified; after close: %d fds, %d threads",
                     MC_COMMS, MC_ROUNDS, fds0, thr0);
        } else {
            int fds1, thr1;
            int ok = settle_counts(fds0, thr0, &fds1, &thr1);
            test_say("iteration %d verified; after close: %d fds, %d threads", it, fds1, thr1);
            CHECK(ok == 0, "a connect/transfer/close cycle leaked: %d -> %d fds, %d -> %d threads",
                  fds0, fds1, thr0, thr1);
        }
    }
    nt_free(buf, len);
    return tt_expect_no_warnings();
}

static int multicomm_recv(role_t *r)
{
    return multicomm_role(r, 1);
}
static int multicomm_send(role_t *r)
{
    return multicomm_role(r, 0);
}

/* ---- scenarios: tags, tagmismatch --------------------------------------------- */

static const int tag_list[] = {0, 1, 7, 7, 12345, 0x7fffffff, 3, 1};
#define TAG_N    (int)(sizeof(tag_list) / sizeof(tag_list[0]))
#define TAG_SLOT (256 * KiB)

static size_t tag_size(int i)
{
    return (size_t)(i * 33331) % TAG_SLOT;
}

static int tags_role(role_t *r, int is_recv)
{
    void *lc = NULL, *comm, *mh = NULL;
    slot_t s[TAG_N];
    if (is_recv) /* the sender inits in tt_send_open(), after it has the handle */
        TRY(tt_role_init(r));
    if (is_recv)
        TRY(tt_recv_open(r, 1, &lc, &comm));
    else
        TRY(tt_send_open(r, 1, &comm));
    size_t len = (size_t)TAG_N * TAG_SLOT;
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, comm, buf, len, TPX_NCCL_PTR_HOST, &mh));
    /* One at a time, then all in flight. */
    for (int i = 0; i < TAG_N; i++) {
        if (is_recv)
            TRY(tt_recv_one(r, comm, buf, TAG_SLOT, tag_size(i), tag_list[i], mh,
                            tt_seed(6, 0, i)));
        else
            TRY(tt_send_one(r, comm, buf, tag_size(i), tag_list[i], mh, tt_seed(6, 0, i)));
    }
    if (is_recv)
        memset(buf, 0xA5, len);
    for (int i = 0; i < TAG_N; i++) {
        unsigned char *b = buf + (size_t)i * TAG_SLOT;
        int rc;
        s[i].req = NULL;
        if (is_recv) {
            rc = nt_irecv1(&r->nt, comm, b, TAG_SLOT, tag_list[i], mh, &s[i].req);
        } else {
            nt_fill(b, tag_size(i), tt_seed(6, 1, i));
            rc = nt_isend(&r->nt, comm, b, tag_size(i), tag_list[i], mh, &s[i].req);
        }
        CHECK(rc == 0 && s[i].req != NULL, "post %d (tag %d) returned rc %d", i, tag_list[i], rc);
    }
    TRY(tt_wait_all(r, s, TAG_N, test_deadline_ms(IO_MS), "tags"));
    for (int i = 0; i < TAG_N && is_recv; i++) {
        CHECK(s[i].size == (int)tag_size(i), "tag %d: size %d, expected %zu", tag_list[i],
              s[i].size, tag_size(i));
        size_t bad = nt_verify(buf + (size_t)i * TAG_SLOT, tag_size(i), tt_seed(6, 1, i));
        CHECK(bad == NT_VERIFY_OK, "message %d (tag %d): first wrong byte at %zu", i, tag_list[i],
              bad);
    }
    if (is_recv)
        test_say("%d tagged messages one by one and %d in flight matched and verified", TAG_N,
                 TAG_N);
    CHECK_RC(nt_deregmr(&r->nt, comm, mh));
    if (is_recv)
        TRY(tt_recv_close(r, 1, &lc, &comm));
    else
        CHECK_RC(nt_close_send(&r->nt, comm));
    nt_free(buf, len);
    return tt_expect_no_warnings();
}

static int tags_recv(role_t *r)
{
    return tags_role(r, 1);
}
static int tags_send(role_t *r)
{
    return tags_role(r, 0);
}
/* ---- scenario: props ------------------------------------------------------------ */

static int props_role(role_t *r)
{
    int ndev = 0, ndev2 = 0;
    nt_props_t p;
    CHECK(r->nt.name != NULL, "the table has no name");
    test_say("table \"%s\" (ncclNetPlugin_v%d)", r->nt.name, r->nt.abi);
    CHECK_RC(nt_init(&r->nt));
    CHECK_RC(nt_devices(&r->nt, &ndev));
    CHECK_RC(nt_devices(&r->nt, &ndev2));
    CHECK(ndev >= 1, "devices() = %d with TPX_SOCKET_IFNAME=lo", ndev);
    CHECK(ndev == ndev2, "devices() changed from %d to %d", ndev, ndev2);
    CHECK_RC(nt_props(&r->nt, 0, &p));
    test_say("dev 0: name %s pci %s guid %#llx ptr %#x speed %d port %d latency %.1f maxComms %d "
             "maxRecvs %d type %d version %d regIsGlobal %d forceFlush %d vProps %d/%d maxP2p %zu "
             "maxColl %zu",
             p.name ? p.name : "(null)", p.pci_path ? p.pci_path : "(null)",
             (unsigned long long)p.guid, p.ptr_support, p.speed, p.port, (double)p.latency,
             p.max_comms, p.max_recvs, p.dev_type, p.dev_version, p.reg_is_global, p.force_flush,
             p.vprops_ndevs, p.vprops_dev0, p.max_p2p_bytes, p.max_coll_bytes);
    CHECK(p.name != NULL && strcmp(p.name, "lo") == 0, "dev 0 is \"%s\", expected \"lo\"",
          p.name ? p.name : "(null)");
    CHECK(p.ptr_support & TPX_NCCL_PTR_HOST, "ptrSupport %#x lacks TPX_NCCL_PTR_HOST",
          p.ptr_support);
    CHECK(p.max_recvs == 1, "maxRecvs %d, expected 1", p.max_recvs);
    CHECK(p.speed > 0, "speed %d", p.speed);
    CHECK(p.max_comms > 0, "maxComms %d", p.max_comms);
    CHECK(p.dev_type == TPX_NCCL_NET_DEVICE_HOST, "netDeviceType %d, expected HOST", p.dev_type);
    if (r->nt.abi >= 11)
        CHECK(p.max_multi_request == 1, "v%d: maxMultiRequestSize %d, expected 1 (no "
              "multi-requests)", r->nt.abi, p.max_multi_request);
    if (r->nt.abi >= 12)
        CHECK(p.rail_id == TPX_NCCL_NET_ID_UNDEF && p.plane_id == TPX_NCCL_NET_ID_UNDEF,
              "v12: railId %d planeId %d, expected both undefined (%d)", p.rail_id, p.plane_id,
              TPX_NCCL_NET_ID_UNDEF);
    if (r->nt.abi >= 9) {
        CHECK(p.max_p2p_bytes > 0 && p.max_coll_bytes > 0, "v%d: maxP2pBytes %zu maxCollBytes %zu",
              r->nt.abi, p.max_p2p_bytes, p.max_coll_bytes);
        CHECK(p.vprops_ndevs == 1 && p.vprops_dev0 == 0,
              "v%d: vProps of a physical device 0 "
              "should be {ndevs 1, devs[0] 0}, got {%d, %d}",
              r->nt.abi, p.vprops_ndevs, p.vprops_dev0);
    }
    for (int d = 1; d < ndev; d++) {
        CHECK_RC(nt_props(&r->nt, d, &p));
        test_say("dev %d: %s", d, p.name ? p.name : "(null)");
    }
    return tt_expect_no_warnings();
}

/* ---- scenario: contexts (v11+) ---------------------------------------------------- */

/* Two clients of one process, as two NCCL communicators: init() gives each a
 * context of its own and may be called again in the same process; setNetAttr
 * is taken on each; a comm listened for on one context and connected from
 * the other carries a message both ways of the API (host memory); each
 * context is finalised after its comms are closed. A listen() without a
 * context is refused with one warning. */
#define CTX_SIZE 65536

static int contexts_role(role_t *r)
{
    void *a = NULL, *b = NULL, *lc = NULL, *sc = NULL, *rc = NULL;
    unsigned char h[HANDLE_SIZE];
    int ndev = 0;
    CHECK(r->nt.abi >= 11, "v%d has no contexts", r->nt.abi);
    CHECK_RC(nt_init_ctx(&r->nt, 0x1111, &a));
    CHECK_RC(nt_init_ctx(&r->nt, 0x2222, &b));
    CHECK(a != NULL && b != NULL && a != b, "init() gave contexts %p and %p: expected two", a, b);
    CHECK_RC(nt_devices(&r->nt, &ndev));
    CHECK(ndev >= 1, "devices() = %d", ndev);
    CHECK_RC(nt_set_flows(&r->nt, a, 4));
    CHECK_RC(nt_set_flows(&r->nt, b, 2));
    memset(h, 0, sizeof(h));
    CHECK_RC(nt_listen_ctx(&r->nt, a, 0, h, &lc));
    uint64_t deadline = test_deadline_ms(CONN_MS);
    while (sc == NULL || rc == NULL) {
        if (sc == NULL)
            CHECK_RC(nt_connect_ctx(&r->nt, b, 0, h, &sc));
        if (rc == NULL)
            CHECK_RC(nt_accept(&r->nt, lc, &rc));
        CHECK(test_now_ns() < deadline, "connect/accept across two contexts did not finish");
    }
    unsigned char *sbuf = nt_alloc(CTX_SIZE), *rbuf = nt_alloc(CTX_SIZE);
    CHECK(sbuf != NULL && rbuf != NULL, "out of memory");
    nt_fill(sbuf, CTX_SIZE, tt_seed(60, 0, 0));
    memset(rbuf, 0, CTX_SIZE);
    void *sreq = NULL, *rreq = NULL;
    CHECK_RC(nt_irecv1(&r->nt, rc, rbuf, CTX_SIZE, 0, NULL, &rreq));
    CHECK_RC(nt_isend(&r->nt, sc, sbuf, CTX_SIZE, 0, NULL, &sreq));
    CHECK(sreq != NULL && rreq != NULL, "isend/irecv returned no request");
    int sdone = 0, rdone = 0, got = -1;
    deadline = test_deadline_ms(IO_MS);
    while (!sdone || !rdone) {
        int sz = -1;
        if (!sdone)
            CHECK_RC(nt_test(&r->nt, sreq, &sdone, &sz));
        if (!rdone) {
            CHECK_RC(nt_test(&r->nt, rreq, &rdone, &sz));
            if (rdone)
                got = sz;
        }
        CHECK(test_now_ns() < deadline, "a message between two contexts did not finish");
    }
    CHECK(got == CTX_SIZE, "received %d bytes, sent %d", got, CTX_SIZE);
    size_t bad = nt_verify(rbuf, CTX_SIZE, tt_seed(60, 0, 0));
    CHECK(bad == NT_VERIFY_OK, "byte %zu differs", bad);
    CHECK_RC(nt_close_send(&r->nt, sc));
    CHECK_RC(nt_close_recv(&r->nt, rc));
    CHECK_RC(nt_close_listen(&r->nt, lc));
    CHECK_RC(nt_finalize(&r->nt, b));
    CHECK_RC(nt_finalize(&r->nt, a));
    nt_free(sbuf, CTX_SIZE);
    nt_free(rbuf, CTX_SIZE);
    TRY(tt_expect_no_warnings());
    /* A listen without a context: refused, said once. */
    lc = NULL;
    CHECK(nt_listen_ctx(&r->nt, NULL, 0, h, &lc) != 0 && lc == NULL,
          "listen() without a context returned success");
    CHECK(nt_warn_count() == 1, "%d warnings for a listen() without a context, expected 1",
          nt_warn_count());
    return 0;
}

/* ---- the supervisor --------------------------------------------------------------- */

typedef struct {
    const char *name;
    role_fn recv; /* the receiver role (or the only role) */
    role_fn send; /* NULL: a one-process scenario */
    int recv_sig; /* the signal the receiver is expected to die of, or 0 */
    int send_sig;
} scenario_t;

static const scenario_t scenarios[] = {
    {"sizes", sizes_recv, sizes_send, 0, 0},
    {"big", big_recv, big_send, 0, 0},
    {"inflight16", inflight16_recv, inflight16_send, 0, 0},
    {"inflight32", inflight32_recv, inflight32_send, 0, 0},
    {"overflow", overflow_recv, overflow_send, 0, 0},
    {"multicomm", multicomm_recv, multicomm_send, 0, 0},
    {"pool", pool_recv, pool_send, 0, 0},
    {"smallbig", smallbig_recv, smallbig_send, 0, 0},
    {"tags", tags_recv, tags_send, 0, 0},
    {"tagmismatch", tagmismatch_recv, tagmismatch_send, 0, 0},
    {"peerclose", peerclose_recv, peerclose_send, 0, SIGKILL},
    {"peerclose_recv", peerclose_recv_side_dies, peerclose_send_side_survives, SIGKILL, 0},
    {"garbage", garbage_recv, garbage_send, 0, 0},
    {"closebusy", closebusy_recv, closebusy_send, 0, 0},
    {"latepost", latepost_recv, latepost_send, 0, 0},
    {"closerace", closerace_recv, closerace_send, 0, 0},
    {"recvsmall", recvsmall_recv, recvsmall_send, 0, 0},
    {"badargs", badargs_recv, badargs_send, 0, 0},
    {"failover", failover_recv, failover_send, 0, 0},
    {"failover_stream", failover_stream_recv, failover_stream_send, 0, 0},
    {"failover_all", failover_all_recv, failover_all_send, 0, 0},
    {"failover_slowread", failover_slowread_recv, failover_slowread_send, 0, 0},
    {"failover_rejoin", failover_rejoin_recv, failover_rejoin_send, 0, 0},
    {"failover_partial", failover_partial_recv, failover_partial_send, 0, 0},
    {"props", props_role, NULL, 0, 0},
    {"contexts", contexts_role, NULL, 0, 0},
    /* strict TCPX mode (TPX_SOCK_TCPX=1), test_tcpx.c */
    {"tcpx_props", tcpx_props_role, NULL, 0, 0},
    {"tcpx_nullcomm", tcpx_nullcomm_recv, tcpx_nullcomm_send, 0, 0},
    {"tcpx_devhandle", tcpx_devhandle_recv, tcpx_devhandle_send, 0, 0},
    {"tcpx_unpack", tcpx_unpack_recv, tcpx_unpack_send, 0, 0},
    {"tcpx_17th", tcpx_17th_recv, tcpx_17th_send, 0, 0},
    {"tcpx_nonhead", tcpx_nonhead_recv, tcpx_nonhead_send, 0, 0},
    {"tcpx_consume_order", tcpx_consume_order_recv, tcpx_consume_order_send, 0, 0},
    {"tcpx_tags", tcpx_tags_recv, tcpx_tags_send, 0, 0},
    {"tcpx_peerclose", tcpx_peerclose_recv, tcpx_peerclose_send, 0, SIGKILL},
    {"tcpx_iflush", tcpx_iflush_recv, tcpx_iflush_send, 0, 0},
    {"tcpx_init_twice", tcpx_init_twice_recv, tcpx_init_twice_send, 0, 0},
    {"tcpx_bigrecv", tcpx_bigrecv_recv, tcpx_bigrecv_send, 0, 0},
    {"tcpx_nocpu", tcpx_nocpu_recv, tcpx_nocpu_send, 0, 0},
    /* virtual devices (makeVDevice, v9+), test_vdev.c */
    {"vdev", vdev_recv, vdev_send, 0, 0},
    {"vdev_badargs", vdev_badargs_role, NULL, 0, 0},
    {"tcpx_vdev", tcpx_vdev_role, NULL, 0, 0},
    /* test_listen.c */
    {"listen_idle", listen_idle_recv, listen_idle_send, 0, 0},
    {"listen_half", listen_half_recv, listen_half_send, 0, 0},
    {"listen_flood", listen_flood_recv, listen_flood_send, 0, 0},
    {"listen_burst", listen_burst_role, NULL, 0, 0},
    /* a hostile sender's piece headers (test_pieces.c) */
    {"pieces_zdup", pieces_zdup_role, NULL, 0, 0},
    {"pieces_overlap", pieces_overlap_role, NULL, 0, 0},
    {"pieces_parkclose", pieces_parkclose_role, NULL, 0, 0},
    {"pieces_closeheld", pieces_closeheld_role, NULL, 0, 0},
    {"pieces_lostwake", pieces_lostwake_role, NULL, 0, 0},
    {"pieces_waitclose", pieces_waitclose_role, NULL, 0, 0},
    {"pieces_gapstuck", pieces_gapstuck_role, NULL, 0, 0},
    {"pieces_gapclose", pieces_gapclose_role, NULL, 0, 0},
    /* CUDA buffers through staging, on the stand-in libcuda (test_cuda.c) */
    {"cudastage", cudastage_recv, cudastage_send, 0, 0},
    {"cudazero", cudazero_recv, cudazero_send, 0, 0},
    {"cudafail", cudafail_recv, cudafail_send, 0, 0},
    {"cudafailover", cudafailover_recv, cudafailover_send, 0, 0},
    {"cudarejoin", cudarejoin_recv, cudarejoin_send, 0, 0},
};

/* Fork a role on `fd` (its end of the socketpair); `other` is closed in it. */
static pid_t spawn_role(const char *tag, role_fn fn, const char *so, int abi, int fd, int other)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    nt_set_tag(tag);
    test_set_tag("%s", tag);
    close(other);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGPIPE, SIG_DFL); /* the plugin must not raise it (MSG_NOSIGNAL) */
    alarm(ROLE_ALARM_S);
    role_t r = {.fd = fd};
    int rc = 1;
    if (nt_open(so, abi, &r.nt) == 0)
        rc = fn(&r);
    test_say("%s", rc == 0 ? "role passed" : "role FAILED");
    fflush(stderr);
    _exit(rc == 0 ? 0 : 1);
}

static const char *describe(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == SIGALRM ? " - the role's hang guard fired" : "");
    else
        snprintf(buf, len, "status %#x", status);
    return buf;
}

static int status_ok(int status, int want_sig)
{
    if (want_sig != 0)
        return WIFSIGNALED(status) && WTERMSIG(status) == want_sig;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int run(const scenario_t *sc, const char *so, int abi)
{
    /* One socketpair links the roles (a socket, not a pipe, so that writing
     * to a dead peer is EPIPE under MSG_NOSIGNAL: a role keeps SIGPIPE at
     * its default to catch the plugin raising it). Each role keeps its own
     * end only, so that a dead role is seen as EOF by the other. */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        perror("socketpair");
        return 1;
    }
    pid_t pids[2] = {-1, -1};
    int want[2] = {sc->recv_sig, sc->send_sig};
    const char *names[2] = {sc->send != NULL ? "receiver" : "process", "sender"};
    pids[0] = spawn_role(sc->send != NULL ? "recv" : "main", sc->recv, so, abi, sv[0], sv[1]);
    if (sc->send != NULL)
        pids[1] = spawn_role("send", sc->send, so, abi, sv[1], sv[0]);
    close(sv[0]);
    close(sv[1]);

    int status[2] = {0, 0}, left = sc->send != NULL ? 2 : 1, failed = 0;
    uint64_t deadline = test_deadline_ms(SUPERVISE_S * 1000);
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (p > 0 && p == pids[i]) {
                status[i] = st;
                pids[i] = -1;
                left--;
                if (!status_ok(st, want[i]) && !failed) {
                    failed = 1;
                    uint64_t grace = test_deadline_ms(GRACE_S * 1000);
                    if (grace < deadline)
                        deadline = grace;
                }
            }
        }
        if (p > 0)
            continue;
        if (test_now_ns() >= deadline) {
            for (int i = 0; i < 2; i++) {
                if (pids[i] > 0) {
                    fprintf(stderr, "supervisor: the %s (pid %d) is still running; killing it\n",
                            names[i], (int)pids[i]);
                    kill(pids[i], SIGKILL);
                }
            }
            deadline = UINT64_MAX;
        }
        usleep(5000);
    }
    int ok = 1;
    char d[128];
    for (int i = 0; i < (sc->send != NULL ? 2 : 1); i++) {
        int good = status_ok(status[i], want[i]);
        ok &= good;
        fprintf(stderr, "supervisor: %s: %s%s\n", names[i], describe(status[i], d, sizeof(d)),
                good ? (want[i] ? " (expected)" : "") : " <- FAILED");
        if (!good && want[i] != 0)
            fprintf(stderr, "supervisor: the %s should have died of signal %d\n", names[i],
                    want[i]);
    }
    fprintf(stderr, "%s: v%d %s\n", ok ? "PASS" : "FAIL", abi, sc->name);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s PLUGIN_SO ABI(7..12) SCENARIO\nscenarios:", argv[0]);
        for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
            fprintf(stderr, " %s", scenarios[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    int abi = atoi(argv[2]);
    if (abi < 7 || abi > 12) {
        fprintf(stderr, "ABI must be 7..12, not %s\n", argv[2]);
        return 2;
    }
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        if (strcmp(argv[3], scenarios[i].name) == 0)
            return run(&scenarios[i], argv[1], abi);
    fprintf(stderr, "unknown scenario '%s'\n", argv[3]);
    return 2;
}
