/* SPDX-License-Identifier: Apache-2.0 */
/*
 * faults.c - engine scenarios where something goes wrong on purpose: it must
 * be reported as an error (never a hang, a crash or a silent success) and the
 * engine must go on serving everyone else.
 *
 *   kill       a client is SIGKILLed in the middle of a 1 GiB send; the
 *              server's receive fails within seconds; another client's
 *              transfers (before and after the kill) complete
 *   auth       right token works; wrong or missing token is refused quickly
 *   garbage    random and mutated bytes, silent and reset connections at the
 *              bootstrap port; then a good client is served; no fd leak
 *   truncated  a receive smaller than the message fails TPX_ERR_TRUNCATED,
 *              writes nothing past its end, and the peer goes on working
 *   badargs    bad arguments and impossible requests are errors
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "harness.h"
#include "scenarios.h"

enum {
    MSG_GO = 0x60,
    MSG_POSTED,
    MSG_COMPLETED,
    MSG_AFTER,
    MSG_REC_OK,
    MSG_REC_FAILED,
    MSG_FUZZ_DONE,
    MSG_CLOSE_HALFOPEN,
    MSG_CLOSED,
};

/* Expect one message word. */
static int expect_msg(int link, uint64_t want)
{
    uint64_t v = 0;
    if (ht_get(link, &v, HT_PIPE_MS) != 0)
        return -1;
    if (v != want) {
        test_say("expected message 0x%llx, got 0x%llx", (unsigned long long)want,
                 (unsigned long long)v);
        return -1;
    }
    return 0;
}

/* ==== kill ======================================================================== */

#define KILL_LEN      GiB
#define KILL_B_LEN    (256 * MiB)
#define KILL_B_AFTER  (16 * MiB)
#define KILL_DELAY_MS 50   /* after client A posted its send */
#define KILL_LIMIT_S  10.0 /* the server must see the error within this (TPX_TIMEOUT_MS 20 s) */

static int L_sa, L_sb, L_pa, L_ps;

/* arg 1: a caller-driven engine (every plugin call on this thread). */
static int kill_srv(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, 0, 0, !arg, NULL);
    CHECK(e != NULL, "no engine");
    int port = tpx_engine_port(e);
    /* One at a time, so that the first peer accepted is A. */
    tpx_peer_t *pa, *pb;
    TRY(ht_put(L_sa, (uint64_t)port));
    TRY(ht_accept(e, &pa));
    TRY(ht_put(L_sb, (uint64_t)port));
    TRY(ht_accept(e, &pb));
    ht_buf_t ra, rb, rb2, sb2;
    TRY(ht_buf_new(e, KILL_LEN, &ra));
    TRY(ht_buf_new(e, KILL_B_LEN + 2 * HT_GUARD, &rb));
    TRY(ht_buf_new(e, 3 * (KILL_B_AFTER + HT_GUARD) + HT_GUARD, &rb2));
    TRY(ht_buf_new(e, KILL_B_AFTER, &sb2));
    ht_guard_fill(rb.p, HT_GUARD, 1);
    ht_guard_fill(rb.p + HT_GUARD + KILL_B_LEN, HT_GUARD, 2);

    tpx_xfer_t *xa, *xb;
    CHECK_OK(tpx_recv(pa, ra.reg, 0, KILL_LEN, &xa));
    CHECK_OK(tpx_recv(pb, rb.reg, HT_GUARD, KILL_B_LEN, &xb));
    TRY(ht_put(L_sa, MSG_GO));
    TRY(ht_put(L_sb, MSG_GO));

    size_t bytes = 0;
    tpx_status_t st = tpx_xfer_wait(xa, -1, &bytes);
    uint64_t t_end = test_now_ns();
    tpx_status_t st2 = tpx_xfer_poll(xa, NULL);
    tpx_xfer_release(xa);
    uint64_t t_kill = 0;
    TRY(ht_get(L_ps, &t_kill, HT_PIPE_MS));
    CHECK(t_kill != 0, "client A was not killed mid-transfer (see the supervisor's message)");
    double after = ((double)t_end - (double)t_kill) / 1e9;
    const char *tmo = getenv("TPX_TIMEOUT_MS");
    test_say("the 1 GiB receive from the killed client ended with %s (%d) %.3f s after the SIGKILL "
             "(TPX_TIMEOUT_MS=%s; limit %.0f s)",
             tpx_status_string(st), (int)st, after, tmo ? tmo : "(default)", KILL_LIMIT_S);
    CHECK(st != TPX_OK, "the receive from the killed client ended TPX_OK (%zu bytes)", bytes);
    CHECK(st != TPX_INPROGRESS, "tpx_xfer_wait(-1) returned TPX_INPROGRESS");
    CHECK(after >= 0, "the receive from A failed %.3f s BEFORE A was killed", -after);
    CHECK(after < KILL_LIMIT_S, "the receive from the killed client took %.3f s to fail", after);
    CHECK(st2 == st, "tpx_xfer_poll after the end says %s, tpx_xfer_wait said %s",
          tpx_status_string(st2), tpx_status_string(st));

    TRY(ht_wait(xb, KILL_B_LEN, "client B's 256 MiB posted before the kill"));
    TRY(ht_verify(rb.p + HT_GUARD, KILL_B_LEN, ht_seed(4, 2, 0), 0, "client B before the kill"));
    TRY(ht_guard_check(rb.p, HT_GUARD, 1, "client B before the kill"));
    TRY(ht_guard_check(rb.p + HT_GUARD + KILL_B_LEN, HT_GUARD, 2, "client B before the kill"));

    uint64_t t0 = test_now_ns();
    tpx_peer_close(pa);
    test_say("tpx_peer_close(dead peer) took %.3f s", test_secs_since(t0));

    /* After the kill: three receives and one send on B's connection. */
    TRY(ht_put(L_sb, MSG_AFTER));
    tpx_xfer_t *xr[3], *xs;
    for (int i = 0; i < 3; i++) {
        size_t o = HT_GUARD + (size_t)i * (KILL_B_AFTER + HT_GUARD);
        ht_guard_fill(rb2.p + o - HT_GUARD, HT_GUARD, 10 + (uint64_t)i);
        CHECK_OK(tpx_recv(pb, rb2.reg, o, KILL_B_AFTER, &xr[i]));
    }
    ht_guard_fill(rb2.p + rb2.len - HT_GUARD, HT_GUARD, 13);
    ht_fill(sb2.p, KILL_B_AFTER, ht_seed(4, 3, 0), 0);
    CHECK_OK(tpx_send(pb, sb2.reg, 0, KILL_B_AFTER, &xs));
    TRY(ht_wait(xs, KILL_B_AFTER, "send to client B after the kill"));
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof(what), "receive #%d from client B after the kill", i);
        size_t o = HT_GUARD + (size_t)i * (KILL_B_AFTER + HT_GUARD);
        TRY(ht_wait(xr[i], KILL_B_AFTER, what));
        TRY(ht_verify(rb2.p + o, KILL_B_AFTER, ht_seed(4, 2, 1 + (unsigned)i), 0, what));
        TRY(ht_guard_check(rb2.p + o - HT_GUARD, HT_GUARD, 10 + (uint64_t)i, what));
    }
    TRY(ht_guard_check(rb2.p + rb2.len - HT_GUARD, HT_GUARD, 13, "after the kill"));
    test_say("client B: 256 MiB before and 4 x 16 MiB after the kill verified");
    TRY(ht_barrier(L_sb, NULL));
    tpx_peer_close(pb);
    ht_buf_free(&ra);
    ht_buf_free(&rb);
    ht_buf_free(&rb2);
    ht_buf_free(&sb2);
    t0 = test_now_ns();
    tpx_engine_destroy(e);
    test_say("tpx_engine_destroy took %.3f s", test_secs_since(t0));
    return ht_res_check(res0, "after tpx_engine_destroy");
}

static int kill_a(int arg)
{
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *peer;
    TRY(ht_dial(e, L_sa, &peer));
    ht_buf_t s;
    TRY(ht_buf_new(e, KILL_LEN, &s));
    ht_fill(s.p, KILL_LEN, ht_seed(4, 1, 0), 0);
    TRY(expect_msg(L_sa, MSG_GO));
    tpx_xfer_t *x;
    CHECK_OK(tpx_send(peer, s.reg, 0, KILL_LEN, &x));
    TRY(ht_put(L_pa, MSG_POSTED));
    tpx_status_t st = tpx_xfer_wait(x, -1, NULL);
    test_say("my 1 GiB send ended (%s) before I was killed", tpx_status_string(st));
    TRY(ht_put(L_pa, MSG_COMPLETED));
    for (;;)
        pause(); /* the supervisor kills us */
}

static int kill_b(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *peer;
    TRY(ht_dial(e, L_sb, &peer));
    ht_buf_t s, s2, r;
    TRY(ht_buf_new(e, KILL_B_LEN, &s));
    TRY(ht_buf_new(e, 3 * KILL_B_AFTER, &s2));
    TRY(ht_buf_new(e, KILL_B_AFTER + 2 * HT_GUARD, &r));
    ht_fill(s.p, KILL_B_LEN, ht_seed(4, 2, 0), 0);
    for (unsigned i = 0; i < 3; i++)
        ht_fill(s2.p + i * KILL_B_AFTER, KILL_B_AFTER, ht_seed(4, 2, 1 + i), 0);
    TRY(expect_msg(L_sb, MSG_GO));
    tpx_xfer_t *x;
    CHECK_OK(tpx_send(peer, s.reg, 0, KILL_B_LEN, &x));
    TRY(ht_wait(x, KILL_B_LEN, "256 MiB send posted before the kill"));
    TRY(expect_msg(L_sb, MSG_AFTER));
    tpx_xfer_t *xs[3], *xr;
    ht_guard_fill(r.p, HT_GUARD, 1);
    ht_guard_fill(r.p + HT_GUARD + KILL_B_AFTER, HT_GUARD, 2);
    CHECK_OK(tpx_recv(peer, r.reg, HT_GUARD, KILL_B_AFTER, &xr));
    for (unsigned i = 0; i < 3; i++)
        CHECK_OK(tpx_send(peer, s2.reg, i * KILL_B_AFTER, KILL_B_AFTER, &xs[i]));
    for (int i = 0; i < 3; i++)
        TRY(ht_wait(xs[i], KILL_B_AFTER, "send after the kill"));
    TRY(ht_wait(xr, KILL_B_AFTER, "receive after the kill"));
    TRY(ht_verify(r.p + HT_GUARD, KILL_B_AFTER, ht_seed(4, 3, 0), 0, "receive after the kill"));
    TRY(ht_guard_check(r.p, HT_GUARD, 1, "receive after the kill"));
    TRY(ht_guard_check(r.p + HT_GUARD + KILL_B_AFTER, HT_GUARD, 2, "receive after the kill"));
    TRY(ht_barrier(L_sb, NULL));
    tpx_peer_close(peer);
    ht_buf_free(&s);
    ht_buf_free(&s2);
    ht_buf_free(&r);
    tpx_engine_destroy(e);
    return ht_res_check(res0, "after tpx_engine_destroy");
}

int scen_kill(int argc, char **argv)
{
    setenv("TPX_TIMEOUT_MS", "20000", 0);
    L_sa = ht_link(HT_SRV, HT_C1);
    L_sb = ht_link(HT_SRV, HT_C2);
    L_pa = ht_link(HT_SUP, HT_C1);
    L_ps = ht_link(HT_SUP, HT_SRV);
    int caller = argc > 2 && strcmp(argv[2], "caller") == 0;
    ht_spawn(HT_SRV, caller ? "server(caller-driven)" : "server", kill_srv, caller);
    ht_spawn(HT_C1, "clientA(killed)", kill_a, 0);
    ht_spawn(HT_C2, "clientB", kill_b, 0);
    ht_start();
    pid_t a = ht_pid(HT_C1);
    ht_expect_signal(a, SIGKILL);

    int failed = 0;
    uint64_t v = 0, t_kill = 0;
    if (ht_get(L_pa, &v, HT_PIPE_MS) != 0 || v != MSG_POSTED) {
        test_say("FAIL: client A never posted its send");
        failed = 1;
    } else {
        ht_sleep_ms(KILL_DELAY_MS);
        int r = ht_get(L_pa, &v, 0);
        if (r == 0) {
            test_say("FAIL: client A's 1 GiB send completed within %d ms of its post: too fast to "
                     "kill mid-transfer (lower KILL_DELAY_MS)",
                     KILL_DELAY_MS);
            failed = 1;
        } else if (r < 0) {
            failed = 1;
        } else {
            t_kill = test_now_ns(); /* before kill(): A cannot be seen dead earlier */
        }
    }
    kill(a, SIGKILL);
    if (t_kill)
        test_say("SIGKILLed client A %d ms after it posted its 1 GiB send", KILL_DELAY_MS);
    ht_put(L_ps, t_kill);
    return ht_supervise() || failed;
}

/* ==== auth ========================================================================= */

#define AUTH_N          4
#define AUTH_CONNECT_MS 5000
static const char *const auth_token[AUTH_N] = {"s3cret", "wrong", "", "s3cret"};
static int L_auth[AUTH_N];

static int auth_srv(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, 0, 0, 1, "s3cret");
    CHECK(e != NULL, "no engine");
    int port = tpx_engine_port(e);
    for (int k = 0; k < AUTH_N; k++) {
        TRY(ht_put(L_auth[k], (uint64_t)port));
        tpx_peer_t *p = NULL;
        if (k == 0 || k == AUTH_N - 1) {
            TRY(ht_accept(e, &p));
            TRY(ht_exchange(e, p, 4 * MiB, ht_seed(5, 100, (unsigned)k), ht_seed(5, 0, (unsigned)k),
                            "good client"));
            TRY(ht_barrier(L_auth[k], NULL));
            tpx_peer_close(p);
            test_say("client with the right token (#%d) served", k);
            continue;
        }
        uint64_t st = 0;
        TRY(ht_get(L_auth[k], &st, HT_PIPE_MS)); /* the client's connect is over */
        tpx_status_t a = tpx_peer_accept(e, 500, &p);
        CHECK(a != TPX_OK, "the server accepted a peer whose token was '%s'", auth_token[k]);
    }
    tpx_engine_destroy(e);
    return ht_res_check(res0, "after tpx_engine_destroy");
}

static int auth_cli(int k)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 0, 1, auth_token[k]);
    CHECK(e != NULL, "no engine");
    uint64_t port;
    TRY(ht_get(L_auth[k], &port, HT_PIPE_MS));
    tpx_peer_t *p = NULL;
    if (k == 0 || k == AUTH_N - 1) {
        TRY(ht_connect(e, (int)port, &p));
        TRY(ht_exchange(e, p, 4 * MiB, ht_seed(5, 0, (unsigned)k), ht_seed(5, 100, (unsigned)k),
                        "good client"));
        TRY(ht_barrier(L_auth[k], NULL));
        tpx_peer_close(p);
    } else {
        uint64_t t0 = test_now_ns();
        tpx_status_t st = tpx_peer_connect(e, HT_HOST, (int)port, AUTH_CONNECT_MS, &p);
        double dt = test_secs_since(t0);
        TRY(ht_put(L_auth[k], (uint64_t)(int64_t)st));
        test_say("token '%s' against 's3cret': tpx_peer_connect returned %s (%d) after %.3f s "
                 "(connect timeout %d ms)%s",
                 auth_token[k], tpx_status_string(st), (int)st, dt, AUTH_CONNECT_MS,
                 st == TPX_ERR_TIMED_OUT ? "; a timeout, not a clear rejection" : "");
        CHECK(st < 0, "connected with token '%s' to a server that wants 's3cret'", auth_token[k]);
        CHECK(p == NULL, "tpx_peer_connect wrote its output on failure");
        CHECK(dt < AUTH_CONNECT_MS / 1000.0 + 2.0, "the refusal took %.3f s", dt);
    }
    tpx_engine_destroy(e);
    return ht_res_check(res0, "after tpx_engine_destroy");
}

int scen_auth(int argc, char **argv)
{
    static const char *const names[AUTH_N] = {"client(s3cret)", "client(wrong)", "client(no token)",
                                              "client(s3cret, after)"};
    for (int k = 0; k < AUTH_N; k++)
        L_auth[k] = ht_link(HT_SRV, HT_C1 + k);
    ht_spawn(HT_SRV, "server", auth_srv, 0);
    for (int k = 0; k < AUTH_N; k++)
        ht_spawn(HT_C1 + k, names[k], auth_cli, k);
    return ht_run();
}

/* ==== garbage ======================================================================== */

#define FUZZ_S           5.0
#define FUZZ_HALFOPEN    64
#define FUZZ_MSG         (256 * 1024)
#define FUZZ_LEAK_WAIT_S 15.0

static int L_sf, L_sg;

/* A connected TCP socket to 127.0.0.1:port (non-blocking), or -1. */
static int fz_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (errno != EINPROGRESS) {
            close(fd);
            return -1;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof(err);
        if (poll(&p, 1, 1000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 ||
            err != 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

static void fz_send(int fd, const uint8_t *b, size_t n, int max_ms)
{
    uint64_t t0 = test_now_ns();
    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k > 0) {
            b += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return;
        int left = max_ms - (int)(test_secs_since(t0) * 1000);
        if (left <= 0)
            return;
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, left) <= 0)
            return;
    }
}

static void fz_drain(int fd, int ms)
{
    uint8_t b[4096];
    struct pollfd p = {fd, POLLIN, 0};
    while (poll(&p, 1, ms) == 1 && read(fd, b, sizeof(b)) > 0) {
    }
}

/* The handshake of a real client, recorded through a relay. */
typedef struct {
    int lfd, dst_port;
    uint8_t c2s[65536];
    size_t nc2s;
    size_t ns2c;
} relay_t;

static int relay_one(int from, int to, uint8_t *rec, size_t cap, size_t *n)
{
    uint8_t b[16384];
    ssize_t k = read(from, b, sizeof(b));
    if (k <= 0)
        return -1;
    if (rec != NULL && *n < cap) {
        size_t c = (size_t)k < cap - *n ? (size_t)k : cap - *n;
        memcpy(rec + *n, b, c);
    }
    *n += (size_t)k;
    for (ssize_t o = 0; o < k;) {
        ssize_t w = send(to, b + o, (size_t)(k - o), MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        o += w;
    }
    return 0;
}

static void *relay_main(void *arg)
{
    relay_t *rl = arg;
    struct pollfd lp = {rl->lfd, POLLIN, 0};
    if (poll(&lp, 1, 15000) != 1)
        return NULL;
    int a = accept(rl->lfd, NULL, NULL);
    if (a < 0)
        return NULL;
    int b = fz_connect(rl->dst_port);
    if (b < 0) {
        close(a);
        return NULL;
    }
    fcntl(b, F_SETFL, fcntl(b, F_GETFL) & ~O_NONBLOCK);
    int open_a = 1, open_b = 1;
    uint64_t t0 = test_now_ns();
    while ((open_a || open_b) && test_secs_since(t0) < 10) {
        struct pollfd q[2] = {{a, open_a ? POLLIN : 0, 0}, {b, open_b ? POLLIN : 0, 0}};
        if (poll(q, 2, 200) <= 0)
            continue;
        if (open_a && q[0].revents && relay_one(a, b, rl->c2s, sizeof(rl->c2s), &rl->nc2s) != 0) {
            open_a = 0;
            shutdown(b, SHUT_WR);
        }
        if (open_b && q[1].revents && relay_one(b, a, NULL, 0, &rl->ns2c) != 0) {
            open_b = 0;
            shutdown(a, SHUT_WR);
        }
    }
    close(a);
    close(b);
    return NULL;
}

/* A mutation of the recorded handshake; returns its length. */
static size_t fz_mutate(uint8_t *out, const uint8_t *rec, size_t nrec, uint64_t *rs, int *kind)
{
    static const uint32_t interesting[] = {0,          1,          0x7f,       0x80,
                                           0xff,       0x7fff,     0xffff,     0x10000,
                                           0x7fffffff, 0x80000000, 0xffffffff, 0x01000000};
    int k = (int)(ht_rand(rs) % 6);
    *kind = k;
    memcpy(out, rec, nrec);
    switch (k) {
    case 0: /* exact replay of a real client's bytes */
        return nrec;
    case 1: /* cut short */
        return (size_t)(ht_rand(rs) % nrec);
    case 2: /* bit flips */
        for (int i = 1 + (int)(ht_rand(rs) % 8); i > 0; i--) {
            uint64_t r = ht_rand(rs);
            out[r % nrec] ^= (uint8_t)(1u << ((r >> 32) % 8));
        }
        return nrec;
    case 3: /* a length-like field set to an interesting value, either byte order */
        for (int i = 1 + (int)(ht_rand(rs) % 3); i > 0 && nrec >= 4; i--) {
            uint64_t r = ht_rand(rs);
            size_t pos = (size_t)(r % (nrec - 3)) & ~(size_t)3;
            uint32_t v = interesting[(r >> 20) % (sizeof(interesting) / sizeof(interesting[0]))];
            if ((r >> 40) & 1)
                v = htonl(v);
            memcpy(out + pos, &v, 4);
        }
        return nrec;
    case 4: { /* followed by random bytes */
        size_t extra = 1 + (size_t)(ht_rand(rs) % (FUZZ_MSG - nrec));
        ht_fill(out + nrec, extra, ht_rand(rs), 0);
        return nrec + extra;
    }
    default: /* twice */
        memcpy(out + nrec, rec, nrec);
        return 2 * nrec;
    }
}

static int garbage_fuzzer(int arg)
{
    uint64_t port;
    TRY(ht_get(L_sf, &port, HT_PIPE_MS));

    /* 1. Record a real handshake through a relay (the server accepts that
     * peer and closes it). */
    static relay_t rl;
    rl.dst_port = (int)port;
    rl.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(rl.lfd >= 0 && bind(rl.lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
              listen(rl.lfd, 4) == 0 && getsockname(rl.lfd, (struct sockaddr *)&sa, &sl) == 0,
          "relay listener: %s", strerror(errno));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, relay_main, &rl) == 0, "pthread_create");
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 0, 1, NULL);
    tpx_peer_t *p = NULL;
    tpx_status_t st = TPX_ERR_INTERNAL;
    if (e != NULL)
        st = tpx_peer_connect(e, HT_HOST, ntohs(sa.sin_port), 10000, &p);
    if (st == TPX_OK)
        tpx_peer_close(p);
    if (e != NULL)
        tpx_engine_destroy(e);
    pthread_join(th, NULL);
    close(rl.lfd);
    size_t nrec = rl.nc2s < sizeof(rl.c2s) ? rl.nc2s : sizeof(rl.c2s);
    test_say("recorded a real handshake through a relay: connect %s; %zu bytes client->server, %zu "
             "server->client",
             tpx_status_string(st), rl.nc2s, rl.ns2c);
    TRY(ht_put(L_sf, st == TPX_OK ? MSG_REC_OK : MSG_REC_FAILED));
    if (nrec > FUZZ_MSG / 4)
        nrec = FUZZ_MSG / 4;

    /* 2. Fuzz. */
    static uint8_t msg[FUZZ_MSG];
    int half[FUZZ_HALFOPEN], nhalf = 0;
    struct {
        int conns, connfail, random, mutated[6], closed, rst, silent, flood, tiny;
    } n;
    memset(&n, 0, sizeof(n));
    uint64_t rs = ht_seed(6, 0, 0);
    uint64_t t0 = test_now_ns();
    while (test_secs_since(t0) < FUZZ_S) {
        int fd = fz_connect((int)port);
        n.conns++;
        if (fd < 0) {
            n.connfail++;
            ht_sleep_ms(5);
            continue;
        }
        unsigned mode = (unsigned)(ht_rand(&rs) % 100);
        size_t len = 0;
        int keep = 0, rst = 0, kind = -1;
        if (mode < 25) { /* random bytes */
            len = 1 + (size_t)(ht_rand(&rs) % 2048);
            ht_fill(msg, len, ht_rand(&rs), 0);
            n.random++;
        } else if (mode < 60 && nrec > 0) { /* a mutated real handshake */
            len = fz_mutate(msg, rl.c2s, nrec, &rs, &kind);
            n.mutated[kind]++;
            keep = kind == 1 && (ht_rand(&rs) & 1); /* cut short and left open */
        } else if (mode < 68) {                     /* close at once */
            n.closed++;
        } else if (mode < 76) { /* reset at once */
            rst = 1;
            n.rst++;
        } else if (mode < 90) { /* connect and say nothing */
            keep = 1;
            n.silent++;
        } else if (mode < 92) { /* a flood */
            len = FUZZ_MSG;
            ht_fill(msg, len, ht_rand(&rs), 0);
            n.flood++;
        } else { /* a few bytes of zeros or ones */
            len = 1 + (size_t)(ht_rand(&rs) % 64);
            memset(msg, (ht_rand(&rs) & 1) ? 0xff : 0x00, len);
            n.tiny++;
        }
        if (len > 0)
            fz_send(fd, msg, len, 200);
        if (!keep && len > 0 && (ht_rand(&rs) & 3) == 0)
            fz_drain(fd, 20);
        if (keep) {
            if (nhalf == FUZZ_HALFOPEN) {
                int v = (int)(ht_rand(&rs) % FUZZ_HALFOPEN);
                close(half[v]);
                half[v] = fd;
            } else {
                half[nhalf++] = fd;
            }
        } else {
            if (rst) {
                struct linger lg = {1, 0};
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            }
            close(fd);
        }
        ht_sleep_ms(1);
    }
    test_say(
        "fuzzed for %.0f s: %d connections (%d failed to connect): %d random, mutated "
        "handshakes %d exact/%d cut/%d flipped/%d fields/%d +tail/%d twice, %d closed at once, "
        "%d reset, %d silent, %d floods of %zu KiB, %d runs of 00/ff; %d left open",
        FUZZ_S, n.conns, n.connfail, n.random, n.mutated[0], n.mutated[1], n.mutated[2],
        n.mutated[3], n.mutated[4], n.mutated[5], n.closed, n.rst, n.silent, n.flood,
        (size_t)FUZZ_MSG / 1024, n.tiny, nhalf);
    CHECK(n.connfail * 10 < n.conns, "%d of %d connections to the bootstrap port failed",
          n.connfail, n.conns);
    /* The silent and half-sent connections stay open while the good client
     * is served: a server stuck reading one of them would fail it. */
    TRY(ht_put(L_sf, MSG_FUZZ_DONE));
    TRY(expect_msg(L_sf, MSG_CLOSE_HALFOPEN));
    for (int i = 0; i < nhalf; i++)
        close(half[i]);
    TRY(ht_put(L_sf, MSG_CLOSED));
    return 0;
}

static int garbage_srv(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    int port = tpx_engine_port(e);
    int fds_idle = ht_fd_count();
    TRY(ht_put(L_sf, (uint64_t)port));

    /* The fuzzer's recording client. */
    tpx_peer_t *p = NULL;
    int accepted = 0;
    uint64_t rec = 0, t0 = test_now_ns();
    while (!(rec == MSG_REC_FAILED || (rec == MSG_REC_OK && accepted))) {
        CHECK(test_secs_since(t0) < 40, "the recording client: accepted %d, fuzzer said 0x%llx",
              accepted, (unsigned long long)rec);
        if (!accepted) {
            tpx_status_t st = tpx_peer_accept(e, 100, &p);
            accepted = st == TPX_OK; /* closed once the fuzzer's connect returned */
        } else {
            ht_sleep_ms(20);
        }
        if (rec == 0) {
            int g = ht_get(L_sf, &rec, 0);
            if (g < 0)
                return 1;
            if (g > 0)
                rec = 0;
        }
    }
    if (accepted)
        tpx_peer_close(p);
    if (rec == MSG_REC_FAILED)
        test_say("note: the relayed handshake failed (the fuzz still replays what was recorded)");

    /* During the fuzz no peer may come out of tpx_peer_accept. */
    int fds_peak = 0;
    for (;;) {
        uint64_t v = 0;
        int g = ht_get(L_sf, &v, 0);
        if (g < 0)
            return 1;
        if (g == 0) {
            CHECK(v == MSG_FUZZ_DONE, "unexpected message 0x%llx", (unsigned long long)v);
            break;
        }
        tpx_status_t st = tpx_peer_accept(e, 100, &p);
        CHECK(st != TPX_OK, "tpx_peer_accept returned a peer made of garbage");
        int nf = ht_fd_count();
        fds_peak = nf > fds_peak ? nf : fds_peak;
    }

    /* A good client, while silent connections are still open. */
    TRY(ht_put(L_sg, (uint64_t)port));
    TRY(ht_accept(e, &p));
    TRY(ht_exchange(e, p, 8 * MiB, ht_seed(6, 1, 0), ht_seed(6, 2, 0),
                    "good client after garbage"));
    TRY(ht_barrier(L_sg, NULL));
    tpx_peer_close(p);
    test_say("served a good client after the garbage");

    TRY(ht_put(L_sf, MSG_CLOSE_HALFOPEN));
    TRY(expect_msg(L_sf, MSG_CLOSED));
    t0 = test_now_ns();
    int nf = ht_fd_count();
    while (nf > fds_idle && test_secs_since(t0) < FUZZ_LEAK_WAIT_S) {
        ht_sleep_ms(100);
        nf = ht_fd_count();
    }
    test_say("server fds: %d with the engine idle, %d at most during the fuzz, %d after (%.1f s "
             "after the fuzzer closed everything)",
             fds_idle, fds_peak, nf, test_secs_since(t0));
    int leaked = nf > fds_idle;
    if (leaked) {
        test_say("FAIL: %d fds more than before the fuzz, %.0f s after the garbage ended:",
                 nf - fds_idle, FUZZ_LEAK_WAIT_S);
        ht_dump_fds();
    }
    tpx_engine_destroy(e);
    return ht_res_check(res0, "after tpx_engine_destroy") || leaked;
}

static int garbage_good(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *p;
    TRY(ht_dial(e, L_sg, &p));
    TRY(ht_exchange(e, p, 8 * MiB, ht_seed(6, 2, 0), ht_seed(6, 1, 0), "after garbage"));
    TRY(ht_barrier(L_sg, NULL));
    return ht_finish(e, p, NULL, res0);
}

int scen_garbage(int argc, char **argv)
{
    L_sf = ht_link(HT_SRV, HT_C1);
    L_sg = ht_link(HT_SRV, HT_C2);
    ht_spawn(HT_SRV, "server", garbage_srv, 0);
    ht_spawn(HT_C1, "fuzzer", garbage_fuzzer, 0);
    ht_spawn(HT_C2, "good-client", garbage_good, 0);
    return ht_run();
}

/* ==== truncated ========================================================================= */

static const struct {
    size_t send, recv;
    int truncated;
} TR[] = {
    {MiB, 64 * KiB, 1},    {MiB, MiB, 0},
    {MiB, 2 * MiB, 0},     {8 * MiB, 3 * MiB + 1, 1},
    {8 * MiB, 8 * MiB, 0}, {64 * KiB + 1, 64 * KiB, 1},
    {4096, 4096, 0},       {1, 1, 0},
    /* large enough to move in runs of chunks (xfer.h): drained whole into
     * the scratch buffer, a last run cut short, and the streams' channel
     * order intact for the next message */
    {64 * MiB, 3 * MiB + 1, 1}, {64 * MiB, 64 * MiB, 0},
    {40 * MiB + 5, 64 * MiB, 0}, {5 * MiB, 5 * MiB, 0},
};
#define NTR    (sizeof(TR) / sizeof(TR[0]))
#define TR_BUF (64 * MiB)

static int trunc_srv(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    TRY(ht_put(L_sa, (uint64_t)tpx_engine_port(e)));
    tpx_peer_t *peer;
    TRY(ht_accept(e, &peer));
    ht_buf_t r;
    TRY(ht_buf_new(e, TR_BUF + 2 * HT_GUARD, &r));
    for (size_t i = 0; i < NTR; i++) {
        size_t rl = TR[i].recv, sl = TR[i].send;
        /* Everything but the posted receive is guard; with a larger receive
         * the part past the message must stay untouched too. */
        size_t written = TR[i].truncated ? rl : sl;
        ht_guard_fill(r.p, HT_GUARD, 50 + i);
        ht_guard_fill(r.p + HT_GUARD + written, r.len - HT_GUARD - written, 60 + i);
        char what[128];
        snprintf(what, sizeof(what), "step %zu: %zu-byte message into a %zu-byte receive", i, sl,
                 rl);
        tpx_xfer_t *x;
        CHECK_OK(tpx_recv(peer, r.reg, HT_GUARD, rl, &x));
        size_t bytes = (size_t)-1;
        tpx_status_t st = tpx_xfer_wait(x, -1, &bytes);
        tpx_status_t st2 = tpx_xfer_poll(x, NULL);
        tpx_xfer_release(x);
        test_say("%s: %s (%d)", what, tpx_status_string(st), (int)st);
        CHECK(st2 == st, "%s: tpx_xfer_poll afterwards says %s", what, tpx_status_string(st2));
        if (TR[i].truncated) {
            CHECK(st == TPX_ERR_TRUNCATED, "%s: %s, expected TPX_ERR_TRUNCATED", what,
                  tpx_status_string(st));
            /* The receive itself may hold a prefix; nothing past it may change. */
            TRY(ht_guard_check(r.p + HT_GUARD + rl, r.len - HT_GUARD - rl, 60 + i, what));
        } else {
            CHECK(st == TPX_OK && bytes == sl, "%s: %s, %zu bytes", what, tpx_status_string(st), bytes);
            TRY(ht_verify(r.p + HT_GUARD, sl, ht_seed(7, (unsigned)i, 0), 0, what));
            TRY(ht_guard_check(r.p + HT_GUARD + sl, r.len - HT_GUARD - sl, 60 + i, what));
        }
        TRY(ht_guard_check(r.p, HT_GUARD, 50 + i, what));
    }
    /* The connection still works, both ways. */
    TRY(ht_exchange(e, peer, MiB, ht_seed(7, 100, 0), ht_seed(7, 101, 0), "after truncation"));
    TRY(ht_barrier(L_sa, NULL));
    return ht_finish(e, peer, &r, res0);
}

static int trunc_cli(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *peer;
    TRY(ht_dial(e, L_sa, &peer));
    ht_buf_t s;
    TRY(ht_buf_new(e, TR_BUF, &s));
    for (size_t i = 0; i < NTR; i++) {
        ht_fill(s.p, TR[i].send, ht_seed(7, (unsigned)i, 0), 0);
        tpx_xfer_t *x;
        CHECK_OK(tpx_send(peer, s.reg, 0, TR[i].send, &x));
        size_t bytes = (size_t)-1;
        tpx_status_t st = tpx_xfer_wait(x, -1, &bytes);
        tpx_xfer_release(x);
        if (TR[i].truncated) {
            test_say("step %zu: the send of %zu bytes into a %zu-byte receive ended %s (%d)", i,
                     TR[i].send, TR[i].recv, tpx_status_string(st), (int)st);
            CHECK(st == TPX_OK || st == TPX_ERR_TRUNCATED,
                  "step %zu: the sender should see TPX_OK or TPX_ERR_TRUNCATED", i);
        } else {
            CHECK(st == TPX_OK && bytes == TR[i].send, "step %zu: send of %zu: %s, %zu bytes", i,
                  TR[i].send, tpx_status_string(st), bytes);
        }
    }
    TRY(ht_exchange(e, peer, MiB, ht_seed(7, 101, 0), ht_seed(7, 100, 0), "after truncation"));
    TRY(ht_barrier(L_sa, NULL));
    return ht_finish(e, peer, &s, res0);
}

int scen_truncated(int argc, char **argv)
{
    L_sa = ht_link(HT_SRV, HT_C1);
    ht_spawn(HT_SRV, "receiver", trunc_srv, 0);
    ht_spawn(HT_C1, "sender", trunc_cli, 0);
    return ht_run();
}

/* ==== postfail ========================================================================== */

/*
 * A peer that fails inside the caller's own call (its pass finds the
 * connection broken) ends the caller's transfers at once; the caller may
 * reuse their memory as soon as it sees them done. The engine must have
 * closed the peer's comms by then: the I/O workers move chunks straight
 * into the buffers and would go on writing the sender's bytes into them.
 * The receiver drives progress itself (no progress thread, so nothing
 * else would close them later) and fails its peer in the pass of its
 * second tpx_recv (TPX_FAULT_RECV_PASS=2; the sender never receives); it
 * then overwrites the buffer and checks, 300 ms on, that no byte changed
 * while the sender streams on.
 */
#define PF_BIG (64 * MiB)
#define PF_FILL 0x3c

static int postfail_srv(int arg)
{
    (void)arg;
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, 0, 0, 0, NULL);
    CHECK(e != NULL, "no engine");
    TRY(ht_put(L_sa, (uint64_t)tpx_engine_port(e)));
    tpx_peer_t *peer;
    TRY(ht_accept(e, &peer));
    ht_buf_t r;
    TRY(ht_buf_new(e, PF_BIG, &r));
    tpx_xfer_t *x;
    CHECK_OK(tpx_recv(peer, r.reg, 0, 64 * KiB, &x)); /* tpx_recv 1 */
    TRY(ht_wait(x, 64 * KiB, "the first message"));
    uint64_t go;
    TRY(ht_get_progress(L_sa, &go, HT_PIPE_MS, e)); /* the large send is posted */
    /* Its header and first bytes are here before the receive is posted. */
    for (int i = 0; i < 50; i++) {
        tpx_progress(e);
        ht_sleep_ms(1);
    }
    CHECK_OK(tpx_recv(peer, r.reg, 0, PF_BIG, &x)); /* tpx_recv 2: the peer fails in it */
    size_t bytes = 0;
    tpx_status_t st = tpx_xfer_wait(x, 10000, &bytes);
    tpx_xfer_release(x);
    CHECK(st == TPX_ERR_IO, "the receive ended %s (%d), expected the injected TPX_ERR_IO",
          tpx_status_string(st), (int)st);
    /* The caller owns the buffer again: no engine call from here on. */
    memset(r.p, PF_FILL, PF_BIG);
    ht_sleep_ms(300);
    for (size_t i = 0; i < PF_BIG; i++)
        CHECK(((const unsigned char *)r.p)[i] == PF_FILL,
              "byte %zu of the failed receive's buffer changed after the failure was reported "
              "(the peer's comms were left open)", i);
    test_say("the failed receive's buffer stayed untouched for 300 ms");
    TRY(ht_put(L_sa, MSG_GO));
    ht_buf_free(&r);
    tpx_peer_close(peer);
    tpx_engine_destroy(e);
    return 0;
}

static int postfail_cli(int arg)
{
    (void)arg;
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *peer;
    TRY(ht_dial(e, L_sa, &peer));
    ht_buf_t s;
    TRY(ht_buf_new(e, PF_BIG, &s));
    ht_fill(s.p, PF_BIG, ht_seed(9, 0, 0), 0);
    tpx_xfer_t *x;
    CHECK_OK(tpx_send(peer, s.reg, 0, 64 * KiB, &x));
    TRY(ht_wait(x, 64 * KiB, "the first message"));
    CHECK_OK(tpx_send(peer, s.reg, 0, PF_BIG, &x));
    TRY(ht_put(L_sa, MSG_GO));
    /* The receiver goes away in the middle: any end but a hang will do. */
    tpx_status_t st = tpx_xfer_wait(x, 30000, NULL);
    tpx_xfer_release(x);
    test_say("the large send ended %s (%d)", tpx_status_string(st), (int)st);
    CHECK(st != TPX_INPROGRESS, "the large send still runs 30 s after the receiver failed");
    uint64_t done;
    TRY(ht_get(L_sa, &done, HT_PIPE_MS + 10000));
    ht_buf_free(&s);
    tpx_peer_close(peer);
    tpx_engine_destroy(e);
    return 0;
}

int scen_postfail(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    L_sa = ht_link(HT_SRV, HT_C1);
    ht_spawn(HT_SRV, "receiver", postfail_srv, 0);
    ht_spawn(HT_C1, "sender", postfail_cli, 0);
    return ht_run();
}

/* ==== badargs ============================================================================ */

#define SENT ((void *)(uintptr_t)0x5e5e5e50)

/* The call must return an error (a negative status). */
#define EXPECT_ERR(call)                                                                           \
    do {                                                                                           \
        tpx_status_t st_ = (call);                                                                 \
        EXPECT(st_ < 0, "%s returned %s (%d), expected an error", #call, tpx_status_string(st_),        \
               (int)st_);                                                                          \
    } while (0)
/* A create that must fail; its output must stay untouched. */
#define EXPECT_CREATE_ERR(params, why)                                                             \
    do {                                                                                           \
        tpx_engine_t *e_ = SENT;                                                                   \
        tpx_status_t st_ = tpx_engine_create(params, &e_);                                         \
        EXPECT(st_ < 0, "tpx_engine_create with %s returned %s", why, tpx_status_string(st_));          \
        EXPECT(e_ == SENT, "tpx_engine_create with %s wrote its output", why);                     \
        if (st_ == TPX_OK && e_ != SENT && e_ != NULL)                                             \
            tpx_engine_destroy(e_);                                                                \
        if (st_ < 0)                                                                               \
            test_say("ok: %s -> %s", why, tpx_status_string(st_));                                      \
    } while (0)
/* A send/recv that must fail without producing a transfer. */
#define EXPECT_POST_ERR(fn, ...)                                                                   \
    do {                                                                                           \
        tpx_xfer_t *x_ = SENT;                                                                     \
        tpx_status_t st_ = fn(__VA_ARGS__, &x_);                                                   \
        EXPECT(st_ < 0, "%s(%s) returned %s, expected an error", #fn, #__VA_ARGS__,                \
               tpx_status_string(st_));                                                                 \
        EXPECT(st_ >= 0 || x_ == SENT, "%s(%s) failed but wrote its output", #fn, #__VA_ARGS__);   \
        if (st_ >= 0 && x_ != SENT && x_ != NULL) {                                                \
            tpx_xfer_cancel(x_);                                                                   \
            tpx_xfer_release(x_);                                                                  \
        }                                                                                          \
    } while (0)

static int bad_srv(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    TRY(ht_put(L_sa, (uint64_t)tpx_engine_port(e)));
    tpx_peer_t *peer;
    TRY(ht_accept(e, &peer));
    ht_buf_t r;
    TRY(ht_buf_new(e, MiB, &r));
    tpx_xfer_t *x;
    CHECK_OK(tpx_recv(peer, r.reg, 0, MiB, &x));
    TRY(ht_wait(x, MiB, "the good transfer after the bad calls"));
    TRY(ht_verify(r.p, MiB, ht_seed(8, 1, 0), 0, "the good transfer after the bad calls"));
    TRY(ht_exchange(e, peer, MiB, ht_seed(8, 2, 0), ht_seed(8, 3, 0), "after the bad calls"));
    TRY(ht_barrier(L_sa, NULL));
    TRY(ht_barrier(L_sa, NULL));
    return ht_finish(e, peer, &r, res0);
}

static int bad_cli(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_params_t p;
    tpx_engine_t *e = SENT;
    tpx_peer_t *peer = SENT;
    tpx_region_t *reg = SENT;

    /* ---- engine creation ---- */
    /* NULL params: the engine takes the defaults (as if from
     * tpx_engine_params_init()); either that or an error is fine. */
    tpx_status_t st = tpx_engine_create(NULL, &e);
    if (st == TPX_OK) {
        EXPECT(e != SENT && e != NULL, "tpx_engine_create(NULL params) returned no engine");
        tpx_engine_destroy(e);
    } else {
        EXPECT(e == SENT, "tpx_engine_create(NULL params) failed but wrote its output");
    }
    e = SENT;
    tpx_engine_params_init(&p);
    p.port = TPX_PORT_NONE;
    EXPECT_ERR(tpx_engine_create(&p, NULL));
    p.plugin = "/nonexistent.so";
    EXPECT_CREATE_ERR(&p, "plugin \"/nonexistent.so\"");
    p.plugin = "no-such-plugin-xyz";
    EXPECT_CREATE_ERR(&p, "plugin \"no-such-plugin-xyz\" (libnccl-net-no-such-plugin-xyz.so)");
    p.plugin = NULL;
    p.channels = -1;
    EXPECT_CREATE_ERR(&p, "channels -1");
    p.channels = 1000;
    EXPECT_CREATE_ERR(&p, "channels 1000");
    p.channels = 0;
    p.window = -1;
    EXPECT_CREATE_ERR(&p, "window -1");
    p.window = 1000;
    EXPECT_CREATE_ERR(&p, "window 1000 (above the plugin's request limit)");
    p.window = 0;
    p.chunk_bytes = 8 * MiB;
    EXPECT_CREATE_ERR(&p, "chunk_bytes 8 MiB (> 4 MiB)");
    p.chunk_bytes = 0;
    p.port = 70000;
    EXPECT_CREATE_ERR(&p, "port 70000");
    p.port = -7;
    EXPECT_CREATE_ERR(&p, "port -7");

    /* ---- NULL handles ---- */
    tpx_engine_destroy(NULL);
    EXPECT(tpx_engine_port(NULL) < 0, "tpx_engine_port(NULL) = %d", tpx_engine_port(NULL));
    EXPECT(tpx_engine_fd(NULL) < 0, "tpx_engine_fd(NULL) = %d", tpx_engine_fd(NULL));
    int np = tpx_progress(NULL);
    EXPECT(np >= 0, "tpx_progress(NULL) = %d (documented >= 0)", np);
    EXPECT_ERR(tpx_peer_connect(NULL, HT_HOST, 1234, 1000, &peer));
    EXPECT_ERR(tpx_peer_accept(NULL, 0, &peer));
    EXPECT(peer == SENT, "a failed peer call wrote its output");
    tpx_peer_close(NULL);
    static uint8_t small[8192] __attribute__((aligned(4096)));
    EXPECT_ERR(tpx_mem_register(NULL, small, 4096, TPX_MEM_HOST, &reg));
    tpx_mem_deregister(NULL);
    EXPECT_POST_ERR(tpx_send, NULL, NULL, 0, 1);
    EXPECT_POST_ERR(tpx_recv, NULL, NULL, 0, 1);
    size_t bytes = 7;
    EXPECT_ERR(tpx_xfer_poll(NULL, &bytes));
    EXPECT_ERR(tpx_xfer_wait(NULL, 10, &bytes));
    EXPECT_ERR(tpx_xfer_cancel(NULL));
    EXPECT(bytes == 7, "a failed xfer call wrote its output");
    tpx_xfer_release(NULL);
    for (int s = -50; s <= 2; s++) {
        const char *str = tpx_status_string((tpx_status_t)s);
        EXPECT(str != NULL && str[0] != '\0', "tpx_status_string(%d) is empty", s);
    }
    EXPECT(tpx_status_string((tpx_status_t)12345) != NULL, "tpx_status_string(12345) is NULL");

    /* ---- engines that exist ---- */
    e = ht_engine(TPX_PORT_NONE, 0, 0, 1, NULL);
    tpx_engine_t *e2 = ht_engine(TPX_PORT_EPHEMERAL, 0, 0, 1, NULL);
    CHECK(e != NULL && e2 != NULL, "no engine");
    EXPECT(tpx_engine_port(e) == -1, "tpx_engine_port of a TPX_PORT_NONE engine: %d",
           tpx_engine_port(e));
    int port2 = tpx_engine_port(e2);
    EXPECT(port2 > 0, "tpx_engine_port after TPX_PORT_EPHEMERAL: %d", port2);
    tpx_engine_params_init(&p);
    p.port = port2;
    EXPECT_CREATE_ERR(&p, "a port another engine listens on");

    uint64_t t0 = test_now_ns();
    st = tpx_peer_accept(e, 1000, &peer);
    EXPECT(st < 0, "tpx_peer_accept on an engine without a listener: %s", tpx_status_string(st));
    EXPECT(test_secs_since(t0) < 3, "tpx_peer_accept on an engine without a listener took %.1f s",
           test_secs_since(t0));
    st = tpx_peer_accept(e2, 0, &peer);
    EXPECT(st == TPX_INPROGRESS, "tpx_peer_accept(timeout 0) with nobody connecting: %s",
           tpx_status_string(st));
    t0 = test_now_ns();
    st = tpx_peer_accept(e2, 300, &peer);
    double dt = test_secs_since(t0);
    EXPECT(st != TPX_OK && dt >= 0.25 && dt < 3,
           "tpx_peer_accept(timeout 300 ms) with nobody connecting: %s after %.3f s",
           tpx_status_string(st), dt);
    EXPECT(peer == SENT, "a failed accept wrote its output");
    EXPECT_ERR(tpx_peer_accept(e2, 0, NULL));
    EXPECT_ERR(tpx_peer_connect(e, NULL, port2, 1000, &peer));
    EXPECT_ERR(tpx_peer_connect(e, HT_HOST, 0, 1000, &peer));
    EXPECT_ERR(tpx_peer_connect(e, HT_HOST, -1, 1000, &peer));
    EXPECT_ERR(tpx_peer_connect(e, HT_HOST, 70000, 1000, &peer));
    EXPECT_ERR(tpx_peer_connect(e, HT_HOST, port2, 1000, NULL));
    EXPECT(peer == SENT, "a failed connect wrote its output");

    int dport = test_free_port(); /* nothing listens there */
    t0 = test_now_ns();
    st = tpx_peer_connect(e, HT_HOST, dport, 2000, &peer);
    dt = test_secs_since(t0);
    test_say("connect to port %d where nothing listens (timeout 2000 ms): %s (%d) after %.3f s",
             dport, tpx_status_string(st), (int)st, dt);
    EXPECT(st < 0, "connect to a port where nothing listens succeeded");
    EXPECT(dt < 3.5, "connect to a port where nothing listens took %.3f s (timeout 2 s)", dt);
    EXPECT(peer == SENT, "a failed connect wrote its output");

    /* ---- memory ---- */
    uint8_t *buf = mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(buf != MAP_FAILED, "mmap");
    EXPECT_ERR(tpx_mem_register(e, NULL, 4096, TPX_MEM_HOST, &reg));
    EXPECT_ERR(tpx_mem_register(e, buf, 0, TPX_MEM_HOST, &reg));
    EXPECT_ERR(tpx_mem_register(e, buf, 4096, (tpx_mem_type_t)0, &reg));
    EXPECT_ERR(tpx_mem_register(e, buf, 4096, (tpx_mem_type_t)99, &reg));
    EXPECT_ERR(tpx_mem_register(e, buf, 4096, TPX_MEM_CUDA, &reg)); /* host memory */
    EXPECT_ERR(tpx_mem_register(e, buf, 4096, TPX_MEM_HOST, NULL));
    /* a range that wraps past the end of the address space */
    EXPECT_ERR(tpx_mem_register(e, (void *)(UINTPTR_MAX - 4095), 8192, TPX_MEM_HOST, &reg));
    EXPECT_ERR(tpx_mem_register(e, buf, SIZE_MAX, TPX_MEM_HOST, &reg));
    /* host memory that is not all mapped: a hole, or a length far past the buffer */
    uint8_t *holed = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(holed != MAP_FAILED, "mmap");
    CHECK(munmap(holed + 4096, 4096) == 0, "munmap");
    EXPECT_ERR(tpx_mem_register(e, holed, 3 * 4096, TPX_MEM_HOST, &reg));
    EXPECT_ERR(tpx_mem_register(e, buf, (size_t)1 << 62, TPX_MEM_HOST, &reg));
    CHECK_OK(tpx_mem_register(e, holed + 2 * 4096, 4096, TPX_MEM_HOST, &reg)); /* mapped */
    tpx_mem_deregister(reg);
    reg = SENT;
    munmap(holed, 4096);
    munmap(holed + 2 * 4096, 4096);
    EXPECT(reg == SENT, "a failed tpx_mem_register wrote its output");
    tpx_region_t *r1 = NULL, *r2 = NULL, *rother = NULL;
    CHECK_OK(tpx_mem_register(e, buf, MiB, TPX_MEM_HOST, &r1));
    CHECK_OK(tpx_mem_register(e, buf + 4096, 8192, TPX_MEM_HOST, &r2));
    EXPECT(r2 == r1, "a range inside a registered region gave a new region (no cache hit)");
    tpx_mem_deregister(r2); /* r1 must stay usable */
    CHECK_OK(tpx_mem_register(e2, buf + MiB, 4096, TPX_MEM_HOST, &rother));

    /* ---- transfers on a real peer ---- */
    uint64_t port;
    TRY(ht_get(L_sa, &port, HT_PIPE_MS));
    peer = NULL;
    TRY(ht_connect(e, (int)port, &peer));
    const size_t huge = (size_t)-1;
    EXPECT_POST_ERR(tpx_send, NULL, r1, 0, 16);
    EXPECT_POST_ERR(tpx_send, peer, NULL, 0, 16);
    EXPECT_POST_ERR(tpx_send, peer, r1, 0, MiB + 1);
    EXPECT_POST_ERR(tpx_send, peer, r1, MiB, 1);
    EXPECT_POST_ERR(tpx_send, peer, r1, MiB - 8, 9);
    EXPECT_POST_ERR(tpx_send, peer, r1, huge - 1, 4);
    EXPECT_POST_ERR(tpx_send, peer, r1, 4, huge - 2);
    EXPECT_POST_ERR(tpx_send, peer, rother, 0, 16);
    EXPECT_POST_ERR(tpx_recv, NULL, r1, 0, 16);
    EXPECT_POST_ERR(tpx_recv, peer, NULL, 0, 16);
    EXPECT_POST_ERR(tpx_recv, peer, r1, 0, MiB + 1);
    EXPECT_POST_ERR(tpx_recv, peer, r1, MiB, 1);
    EXPECT_POST_ERR(tpx_recv, peer, r1, MiB - 8, 9);
    EXPECT_POST_ERR(tpx_recv, peer, r1, huge - 1, 4);
    EXPECT_POST_ERR(tpx_recv, peer, r1, 4, huge - 2);
    EXPECT_POST_ERR(tpx_recv, peer, rother, 0, 16);

    /* After all that, the peer and r1 still work. */
    ht_fill(buf, MiB, ht_seed(8, 1, 0), 0);
    tpx_xfer_t *x;
    CHECK_OK(tpx_send(peer, r1, 0, MiB, &x));
    TRY(ht_wait(x, MiB, "the good send after the bad calls"));
    TRY(ht_exchange(e, peer, MiB, ht_seed(8, 3, 0), ht_seed(8, 2, 0), "after the bad calls"));
    TRY(ht_barrier(L_sa, NULL));
    /* Last, as they may crash an engine that does not check: a NULL output
     * pointer for the transfer (the server waits at a second barrier). */
    EXPECT_ERR(tpx_send(peer, r1, 0, 16, NULL));
    EXPECT_ERR(tpx_recv(peer, r1, 0, 16, NULL));
    TRY(ht_barrier(L_sa, NULL));
    tpx_peer_close(peer);
    tpx_mem_deregister(r1);
    tpx_mem_deregister(rother);
    tpx_engine_destroy(e);
    tpx_engine_destroy(e2);
    munmap(buf, 2 * MiB);
    EXPECT(ht_res_check(res0, "after every engine (also the failed ones) is gone") == 0);
    if (test_failed())
        test_say("%d check(s) failed", test_failed());
    return test_failed() ? 1 : 0;
}

int scen_badargs(int argc, char **argv)
{
    L_sa = ht_link(HT_SRV, HT_C1);
    ht_spawn(HT_SRV, "server", bad_srv, 0);
    ht_spawn(HT_C1, "client", bad_cli, 0);
    return ht_run();
}
