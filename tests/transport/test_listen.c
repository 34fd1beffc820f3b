/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_listen.c - the listener under attack (SECURITY.md: listener floods).
 *
 * The receiver role listens, then forks an attacker process that keeps a
 * load of hostile connections on the listener for the whole scenario: when
 * the listener closes one, the attacker opens another at once (a persistent
 * attacker, not a burst that the listener outlasts). The attacker runs at a
 * lower priority (nice 10), as an attacker on another host would not take
 * the listener's CPU. Once the load is up, the sender makes LS_COMMS real
 * connections one after another; each must be accepted within LS_BOUND_MS
 * and carry a verified message; the listener must not log a line per
 * rejected connection.
 *
 *   listen_idle   200 connections that never send a byte, from 127.0.0.1
 *                 (the sender's own address) and 127.0.0.2..5
 *   listen_half   connections with half a hello (10 bytes), and comms that
 *                 never complete: a control hello with the listener's nonce
 *                 announcing 4 data sockets that never come, or a lone data
 *                 hello; 120 at a time from the same sources
 *   listen_flood  2000 idle connections held from 127.0.0.2..9 and a
 *                 connect-and-close churn from 127.0.0.1
 *
 * Before the listener bounded and evicted its set-up stages, idle
 * connections filled its 64 pending slots until their 30 s deadline (a
 * real connector waited for accept until then), and 8 incomplete comms
 * made every real connect be reset at once.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "plugin/sock/sock_wire.h"
#include "transport_test.h"

#define LS_COMMS    3
#define LS_BOUND_MS 10000 /* a real connection is accepted within this under attack */
#define LS_SIZE     (256 * KiB + 3)
#define LS_LOAD_MS  1500  /* how long the attack builds up before the first real connect */
#define LS_MAX_WARN 20    /* rejection summaries are rate-limited to one a second */

enum { ATK_IDLE, ATK_HALF, ATK_FLOOD };

/* Strict TCPX mode (TPX_SOCK_TCPX=1): accept() takes device-handle storage
 * and may return success with a NULL comm first; receives land in a bounce
 * buffer, so there the scenario checks the set-up only (no message). */
static int ls_tcpx(void)
{
    const char *v = getenv("TPX_SOCK_TCPX");
    return v != NULL && strcmp(v, "1") == 0;
}

#define LS_CALL(nt, member, ...)                                                                   \
    ((nt)->abi == 7   ? (int)(nt)->t.v7->member(__VA_ARGS__)                                       \
     : (nt)->abi == 8 ? (int)(nt)->t.v8->member(__VA_ARGS__)                                       \
     : (nt)->abi == 9 ? (int)(nt)->t.v9->member(__VA_ARGS__)                                       \
                      : (int)(nt)->t.v10->member(__VA_ARGS__))

static _Alignas(16) unsigned char ls_store[512];

/* accept() once, with device-handle storage in strict TCPX mode. */
static int ls_accept(role_t *r, void *lc, void **c)
{
    if (!ls_tcpx())
        return nt_accept(&r->nt, lc, c);
    tpx_ncclnet_dev_handle_t *dh = (tpx_ncclnet_dev_handle_t *)ls_store;
    *c = NULL;
    return LS_CALL(&r->nt, accept, lc, c, &dh);
}

static int ls_accept_wait(role_t *r, void *lc, void **c, uint64_t deadline)
{
    for (;;) {
        int rc = ls_accept(r, lc, c);
        if (rc != 0 || *c != NULL)
            return rc;
        if (test_now_ns() >= deadline)
            return NT_TIMEOUT;
        sched_yield();
    }
}

typedef struct {
    int fd;
    int state; /* 0 free, 1 connecting, 2 established */
    int kind;  /* what it sends (ATK_HALF) or does (ATK_FLOOD churn) */
    int src;   /* 127.0.0.(1 + src) */
} atk_conn_t;

typedef struct {
    int mode;
    tpx_sock_handle_t h;
    int n;       /* connections kept open */
    int nsrc;    /* sources 127.0.0.1 .. 127.0.0.nsrc */
    int src0;    /* the first source used (0: 127.0.0.1, the sender's own) */
    int churn;   /* ATK_FLOOD: connections of 127.0.0.1 that connect and close */
} attack_t;

static uint64_t atk_rng = 0x9e3779b97f4a7c15ull;
static uint64_t atk_next(void)
{
    return test_xorshift64(&atk_rng);
}

static void atk_open(const attack_t *a, atk_conn_t *c, long *opened)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return;
    int one = 1;
#ifdef IP_BIND_ADDRESS_NO_PORT
    (void)setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
#endif
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f000001u + (uint32_t)c->src);
    (void)bind(c->fd, (struct sockaddr *)&src, sizeof(src));
    int rc = connect(c->fd, &a->h.addr.sa, tpx__sock_addr_len(&a->h.addr));
    if (rc != 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return;
    }
    c->state = 1;
    (*opened)++;
}

/* What an established attacker connection sends, by kind. */
static void atk_payload(const attack_t *a, atk_conn_t *c)
{
    unsigned char b[TPX_SOCK_HELLO_WIRE_SIZE];
    tpx_sock_hello_t h = {.nsocks = 4, .nonce = a->h.nonce, .conn_id = atk_next()};
    switch (c->kind) {
    case 0: /* half a hello */
        h.kind = TPX_SOCK_HELLO_CTRL;
        tpx__sock_hello_encode(&h, b);
        (void)send(c->fd, b, 10, MSG_NOSIGNAL);
        break;
    case 1: /* a comm whose data sockets never come */
        h.kind = TPX_SOCK_HELLO_CTRL;
        tpx__sock_hello_encode(&h, b);
        (void)send(c->fd, b, sizeof(b), MSG_NOSIGNAL);
        break;
    default: /* a data socket of a comm whose other sockets never come */
        h.kind = TPX_SOCK_HELLO_DATA;
        h.index = 2;
        tpx__sock_hello_encode(&h, b);
        (void)send(c->fd, b, sizeof(b), MSG_NOSIGNAL);
        break;
    }
}

/* The attacker process: keeps a->n connections up until killed; writes one
 * byte to `ready` once half of them are established. */
static void attacker(const attack_t *a, int ready)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)a->n + 64) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)a->n + 64 ? rl.rlim_max : (rlim_t)a->n + 64;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (nice(10) == -1 && errno != 0)
        errno = 0;
    int n = a->n + a->churn;
    atk_conn_t *c = calloc((size_t)n, sizeof(*c));
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    if (c == NULL || pfd == NULL)
        _exit(2);
    long opened = 0, closed_by_listener = 0;
    for (int i = 0; i < n; i++) {
        c[i].fd = -1;
        c[i].kind = i % 3;
        c[i].src = i < a->n ? a->src0 + i % a->nsrc : 0;
    }
    int signalled = 0;
    uint64_t report = test_deadline_ms(1000);
    for (;;) {
        int up = 0;
        for (int i = 0; i < n; i++) {
            if (c[i].fd < 0)
                atk_open(a, &c[i], &opened);
            pfd[i].fd = c[i].fd;
            pfd[i].events = c[i].state == 1 ? POLLOUT : POLLIN;
            pfd[i].revents = 0;
            up += c[i].state == 2;
        }
        if (!signalled && up >= a->n / 2) {
            char b = 'r';
            if (write(ready, &b, 1) == 1)
                signalled = 1;
        }
        if (test_now_ns() >= report) {
            fprintf(stderr, "[attacker] %d up, %ld opened, %ld closed by the listener\n", up,
                    opened, closed_by_listener);
            report = test_deadline_ms(1000);
        }
        if (poll(pfd, (nfds_t)n, 10) < 0 && errno != EINTR)
            _exit(3);
        for (int i = 0; i < n; i++) {
            if (c[i].fd < 0 || pfd[i].revents == 0)
                continue;
            if (c[i].state == 1) {
                int err = 0;
                socklen_t len = sizeof(err);
                (void)getsockopt(c[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err != 0) {
                    close(c[i].fd);
                    c[i].fd = -1;
                    c[i].state = 0;
                    continue;
                }
                c[i].state = 2;
                if (i >= a->n) { /* churn: connect and close */
                    close(c[i].fd);
                    c[i].fd = -1;
                    c[i].state = 0;
                    continue;
                }
                if (a->mode == ATK_HALF)
                    atk_payload(a, &c[i]);
                continue;
            }
            char b[64];
            ssize_t r = recv(c[i].fd, b, sizeof(b), MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                close(c[i].fd);
                c[i].fd = -1;
                c[i].state = 0;
                closed_by_listener++;
            }
        }
    }
}

static pid_t attack_start(const attack_t *a, int *ready_fd)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        alarm(90);
        attacker(a, p[1]);
        _exit(0);
    }
    close(p[1]);
    *ready_fd = p[0];
    return pid;
}

static void attack_stop(pid_t pid, int ready_fd)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (ready_fd >= 0)
        close(ready_fd);
}

/* accept() while the attack builds up: it must neither return a comm nor
 * fail. Returns when the attacker is ready (or after LS_LOAD_MS * 4). */
static int accept_under_load(role_t *r, void *lc, int ready_fd)
{
    uint64_t t0 = test_now_ns(), end = test_deadline_ms(4 * LS_LOAD_MS);
    int ready = 0;
    while (test_now_ns() < end && !(ready && test_secs_since(t0) * 1000 >= LS_LOAD_MS)) {
        void *c = NULL;
        int rc = ls_accept(r, lc, &c);
        CHECK(rc == 0, "accept() returned rc %d under attack, before any real peer", rc);
        CHECK(c == NULL, "accept() returned a comm for an attacker connection");
        struct pollfd pfd = {.fd = ready_fd, .events = POLLIN};
        if (!ready && poll(&pfd, 1, 0) > 0)
            ready = 1;
        sched_yield();
    }
    test_say("attack %s after %.1f s", ready ? "established" : "still building up",
             test_secs_since(t0));
    return 0;
}

static int listen_attack_recv(role_t *r, int mode)
{
    void *lc;
    unsigned char handle[HANDLE_SIZE];
    attack_t a = {.mode = mode};
    TRY(tt_role_init(r));
    CHECK_RC(nt_listen(&r->nt, 0, handle, &lc));
    CHECK(tpx__sock_handle_decode(handle, &a.h) == TPX_OK, "bad handle from listen()");
    CHECK(a.h.addr.sa.sa_family == AF_INET, "the scenario needs an IPv4 loopback listener");
    switch (mode) {
    case ATK_IDLE: a.n = 200; a.nsrc = 5; a.src0 = 1; break;
    case ATK_HALF: a.n = 120; a.nsrc = 5; a.src0 = 1; break;
    default: a.n = 2000; a.nsrc = 8; a.src0 = 1; a.churn = 8; break;
    }
    int ready_fd = -1;
    pid_t atk = attack_start(&a, &ready_fd);
    CHECK(atk > 0, "fork of the attacker failed: %s", strerror(errno));
    int fail = accept_under_load(r, lc, ready_fd);
    if (!fail && tt_link_put(r, handle, sizeof(handle)) != 0)
        fail = 1;
    unsigned char *buf = nt_alloc(LS_SIZE);
    if (buf == NULL)
        fail = 1;
    double worst = 0;
    for (int k = 0; k < LS_COMMS && !fail; k++) {
        void *rc = NULL, *mh = NULL;
        if (tt_sync_put(r, 'c') != 0) {
            fail = 1;
            break;
        }
        uint64_t t0 = test_now_ns();
        int arc = ls_accept_wait(r, lc, &rc, test_deadline_ms(LS_BOUND_MS));
        double s = test_secs_since(t0);
        if (arc != 0 || rc == NULL) {
            test_say("FAIL: real connection %d not accepted within %d ms under attack (rc %d, "
                     "%.1f s)",
                     k, LS_BOUND_MS, arc, s);
            fail = 1;
            break;
        }
        worst = s > worst ? s : worst;
        test_say("real connection %d accepted %.3f s after the sender was told to connect", k, s);
        if (ls_tcpx()) {
            if (nt_close_recv(&r->nt, rc) != 0)
                fail = 1;
            continue;
        }
        if (nt_regmr(&r->nt, rc, buf, LS_SIZE, TPX_NCCL_PTR_HOST, &mh) != 0 ||
            tt_recv_one(r, rc, buf, LS_SIZE, LS_SIZE, 0, mh, tt_seed(31, (unsigned)mode,
                                                                      (unsigned)k)) != 0 ||
            nt_deregmr(&r->nt, rc, mh) != 0 || nt_close_recv(&r->nt, rc) != 0)
            fail = 1;
    }
    attack_stop(atk, ready_fd);
    nt_free(buf, LS_SIZE);
    CHECK(fail == 0, "the listener did not serve real connections under attack");
    CHECK_RC(nt_close_listen(&r->nt, lc));
    int w = nt_warn_count();
    test_say("%d real comms accepted under attack, slowest after %.3f s; the plugin logged %d "
             "WARN line(s)",
             LS_COMMS, worst, w);
    CHECK(w <= LS_MAX_WARN, "the listener logged %d WARN lines under attack: rejections must "
                            "be summarised (at most one line a second), not logged one by one",
          w);
    return 0;
}

static int listen_attack_send(role_t *r, int mode)
{
    unsigned char handle[HANDLE_SIZE], copy[HANDLE_SIZE];
    TRY(tt_role_init(r));
    unsigned char *buf = nt_alloc(LS_SIZE);
    CHECK(buf != NULL, "out of memory");
    for (int k = 0; k < LS_COMMS; k++) {
        void *sc = NULL, *mh = NULL;
        if (k == 0)
            TRY(tt_link_get(r, handle, sizeof(handle), CONN_MS));
        TRY(tt_sync_get(r, 'c', CONN_MS));
        memcpy(copy, handle, sizeof(handle));
        CHECK_RC(nt_connect_wait(&r->nt, 0, copy, &sc, test_deadline_ms(CONN_MS)));
        CHECK(sc != NULL, "connect returned no comm");
        if (ls_tcpx()) {
            CHECK_RC(nt_close_send(&r->nt, sc));
            continue;
        }
        CHECK_RC(nt_regmr(&r->nt, sc, buf, LS_SIZE, TPX_NCCL_PTR_HOST, &mh));
        TRY(tt_send_one(r, sc, buf, LS_SIZE, 0, mh, tt_seed(31, (unsigned)mode, (unsigned)k)));
        CHECK_RC(nt_deregmr(&r->nt, sc, mh));
        CHECK_RC(nt_close_send(&r->nt, sc));
    }
    nt_free(buf, LS_SIZE);
    test_say("%d comms connected and sent under attack", LS_COMMS);
    return 0;
}

int listen_idle_recv(role_t *r) { return listen_attack_recv(r, ATK_IDLE); }
int listen_idle_send(role_t *r) { return listen_attack_send(r, ATK_IDLE); }
int listen_half_recv(role_t *r) { return listen_attack_recv(r, ATK_HALF); }
int listen_half_send(role_t *r) { return listen_attack_send(r, ATK_HALF); }
int listen_flood_recv(role_t *r) { return listen_attack_recv(r, ATK_FLOOD); }
int listen_flood_send(role_t *r) { return listen_attack_send(r, ATK_FLOOD); }

/*
 * listen_burst: a legitimate burst from one host is never cut by that
 * host's own share. Two comms of 16 data sockets each (34 connections, over
 * the per-source share of pending connections) and 10 more comms' control
 * hellos (over the per-source share of comms being assembled) are opened
 * from 127.0.0.1 before any hello is sent; accept() takes them in over
 * 0.3 s of calls; then every hello goes out and both big comms must come
 * out of accept() complete. (Before the share grace, the listener evicted
 * the oldest of the source at its share: one connection of a 16-socket
 * comm whose hello came late -- seen on a 16-core host with
 * `tpx-netbench --nsocks 16` -- and the comm failed.)
 */
#define LB_COMMS 2
#define LB_NSOCKS 16
#define LB_EXTRA 10 /* control hellos of comms that complete later */

static int lb_open(const tpx_sock_handle_t *h)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, &h->addr.sa, tpx__sock_addr_len(&h->addr)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int lb_hello(int fd, const tpx_sock_handle_t *h, uint64_t conn_id, int kind, int index,
                    int nsocks)
{
    unsigned char b[TPX_SOCK_HELLO_WIRE_SIZE];
    tpx_sock_hello_t hello = {.kind = (uint8_t)kind, .index = (uint8_t)index,
                              .nsocks = (uint8_t)nsocks, .nonce = h->nonce, .conn_id = conn_id};
    tpx__sock_hello_encode(&hello, b);
    return send(fd, b, sizeof(b), MSG_NOSIGNAL) == (ssize_t)sizeof(b) ? 0 : -1;
}

int listen_burst_role(role_t *r)
{
    void *lc;
    unsigned char handle[HANDLE_SIZE];
    tpx_sock_handle_t h;
    enum { NBIG = LB_COMMS * (1 + LB_NSOCKS) };
    int fds[NBIG + LB_EXTRA];
    TRY(tt_role_init(r));
    CHECK_RC(nt_listen(&r->nt, 0, handle, &lc));
    CHECK(tpx__sock_handle_decode(handle, &h) == TPX_OK, "bad handle from listen()");
    for (int i = 0; i < NBIG + LB_EXTRA; i++) {
        fds[i] = lb_open(&h);
        CHECK(fds[i] >= 0, "connect %d to the listener failed: %s", i, strerror(errno));
    }
    /* accept() sees them all without a hello, many times over */
    uint64_t end = test_deadline_ms(300);
    while (test_now_ns() < end) {
        void *c = NULL;
        CHECK(ls_accept(r, lc, &c) == 0 && c == NULL, "accept() before any hello");
        usleep(1000);
    }
    uint64_t ids[LB_COMMS];
    for (int k = 0; k < LB_COMMS; k++) {
        ids[k] = 0x6275727374000000ull + (uint64_t)k; /* "burst" */
        int *f = &fds[k * (1 + LB_NSOCKS)];
        CHECK(lb_hello(f[0], &h, ids[k], TPX_SOCK_HELLO_CTRL, 0, LB_NSOCKS) == 0, "send hello");
        for (int i = 0; i < LB_NSOCKS; i++)
            CHECK(lb_hello(f[1 + i], &h, ids[k], TPX_SOCK_HELLO_DATA, i, LB_NSOCKS) == 0,
                  "send hello");
    }
    for (int i = 0; i < LB_EXTRA; i++)
        CHECK(lb_hello(fds[NBIG + i], &h, 0x6578747261000000ull + (uint64_t)i,
                       TPX_SOCK_HELLO_CTRL, 0, 1) == 0, "send hello");
    int got = 0;
    end = test_deadline_ms(5000);
    while (got < LB_COMMS && test_now_ns() < end) {
        void *c = NULL;
        CHECK(ls_accept(r, lc, &c) == 0, "accept() failed on a legitimate burst");
        if (c != NULL) {
            got++;
            CHECK_RC(nt_close_recv(&r->nt, c));
        } else {
            usleep(1000);
        }
    }
    CHECK(got == LB_COMMS, "%d of %d comms of %d sockets from one host came out of accept() "
                           "(the listener cut a legitimate burst)", got, LB_COMMS, LB_NSOCKS);
    for (int i = 0; i < NBIG + LB_EXTRA; i++)
        close(fds[i]);
    CHECK_RC(nt_close_listen(&r->nt, lc));
    test_say("%d comms of %d data sockets + %d more from one host accepted", LB_COMMS, LB_NSOCKS,
             LB_EXTRA);
    return 0;
}
