/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_vec.c - vectored messages of the built-in transport (net.h:
 * tpx__net_isendv / tpx__net_irecvv), through the engine's view of the
 * plugin, one process, one thread driving both ends of a loopback comm.
 *
 * Usage: test_vec SCENARIO
 *   mixed   messages whose pieces of memory are cut at odd places on both
 *           sides (vectored -> contiguous, contiguous -> vectored, vectored
 *           -> vectored, cut differently), large ones spread over the data
 *           connections in pieces that start inside an iovec, small ones
 *           written from isend (more iovecs than one sendmsg takes); every
 *           byte checked, and the bytes around each piece left alone
 *   eager   a small vectored message that arrives before its receive (held
 *           by the transport, copied into the iovecs by irecvv)
 *   badargs no iovecs, too many, a NULL base, the largest count, a receive
 *           too small for the message (the comm fails, nothing written past)
 *   strict  TPX_SOCK_TCPX=1: no vectored messages (has_vec 0, posts refused)
 *   sticky  which data connection isend's direct write picks (4 per comm):
 *           small messages one at a time, as a request/response caller posts
 *           them, all arrive on one connection (its receiving worker is the
 *           one still polling); 16 posted back to back arrive on several
 *           (several workers read a burst at once); every byte checked
 *   direct  irecv/test read a message themselves (TPX_SOCK_DIRECT_BYTES=64K,
 *           one data connection, no eager buffer): a message that arrived
 *           before its receive parks its connection, and the irecv that
 *           posts the receive reads it (complete when irecv returns, counted
 *           as the connection's direct-read bytes); one larger than the
 *           setting is left to the worker; then 200 messages of random
 *           sizes, receive first, test() racing the workers; every byte
 *           checked
 *   directrace  the hand-off between a direct read and the connection's
 *           worker, made deterministic: TPX_FAULT_DIRECT_DRY_US (ctest: 200
 *           ms) holds a dry direct read between its last read and its look
 *           at whether the worker tried to take the connection; two
 *           messages arrive in that window, and their edge finds the
 *           connection taken. A second receive posted right after makes the
 *           first no longer lone, so only the worker moves them: had the
 *           reader dropped the worker's try, both would wait forever (a lost
 *           wake-up). Every byte checked
 *   sockbuf the data connections' socket buffers (TPX_SOCK_BUF_BYTES, as
 *           ctest sets it): unset (-1, auto) a loopback connection's send
 *           buffer is what asking for 512 KiB gives, on both ends; 0 what a
 *           plain loopback connection autotunes to; N what asking for N
 *           gives, send and receive buffer alike; then 8 MiB moved and
 *           checked
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "net/net.h"
#include "plugin/sock/sock.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "test_vec: %s:%d: ", __FILE__, __LINE__);                                  \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)
#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c))                                                                                  \
            FAIL(__VA_ARGS__);                                                                     \
    } while (0)

typedef struct {
    tpx_net_t *n;
    void *lc, *sc, *rc;
    _Alignas(16) unsigned char sdh[64], rdh[64];
} pair_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void pair_open(pair_t *p)
{
    CHECK(tpx__net_open("builtin", 1, &p->n) == TPX_OK, "cannot open the built-in transport");
    unsigned char handle[TPX_NCCL_NET_HANDLE_MAXSIZE];
    CHECK(tpx__net_listen(p->n, 0, handle, &p->lc) == TPX_OK, "listen");
    uint64_t until = now_ms() + 10000;
    while (p->sc == NULL || p->rc == NULL) {
        CHECK(now_ms() < until, "connect/accept did not finish in 10 s");
        tpx_ncclnet_dev_handle_t *sd = (tpx_ncclnet_dev_handle_t *)p->sdh;
        tpx_ncclnet_dev_handle_t *rd = (tpx_ncclnet_dev_handle_t *)p->rdh;
        if (p->sc == NULL)
            CHECK(tpx__net_connect(p->n, 0, handle, &p->sc, &sd) == TPX_OK, "connect");
        if (p->rc == NULL)
            CHECK(tpx__net_accept(p->n, p->lc, &p->rc, &rd) == TPX_OK, "accept");
    }
}

static void pair_close(pair_t *p)
{
    tpx__net_close_send(p->n, p->sc);
    tpx__net_close_recv(p->n, p->rc);
    tpx__net_close_listen(p->n, p->lc);
    tpx__net_close(p->n);
    p->n = NULL;
}

/* Wait for both requests (either may be NULL); the receive's size in *got.
 * Returns the first error. */
static tpx_status_t wait2(pair_t *p, void *sreq, void *rreq, int *got)
{
    uint64_t until = now_ms() + 20000;
    int sdone = sreq == NULL, rdone = rreq == NULL;
    while (!sdone || !rdone) {
        CHECK(now_ms() < until, "a message did not complete in 20 s");
        int size = -1, rc = 0;
        tpx_status_t st;
        if (!sdone && (st = tpx__net_test(p->n, sreq, &sdone, &size, &rc)) != TPX_OK)
            return st;
        if (!rdone && (st = tpx__net_test(p->n, rreq, &rdone, &size, &rc)) != TPX_OK)
            return st;
        if (rdone && rreq != NULL && got != NULL && *got < 0)
            *got = size;
    }
    return TPX_OK;
}

static unsigned char pat(uint64_t seed, uint64_t i)
{
    uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (unsigned char)(x * 0x94D049BB133111EBull >> 56);
}

/* Cut [0, len) of buf into iovecs of sizes from `cuts` (cycled), with a
 * gap of `gap` bytes after each (so a stray write shows). Returns the count. */
static int cut(unsigned char *buf, size_t len, const size_t *cuts, int ncuts, size_t gap,
               struct iovec *iov, int max, size_t *span)
{
    size_t at = 0, done = 0;
    int n = 0;
    while (done < len) {
        CHECK(n < max, "too many iovecs for the test's array");
        size_t l = cuts[n % ncuts];
        if (l > len - done)
            l = len - done;
        iov[n++] = (struct iovec){buf + at, l};
        at += l + gap;
        done += l;
    }
    *span = at;
    return n;
}

#define MAXV 1100

/* One message of len bytes: sent from scuts (0 cuts: contiguous), received
 * into rcuts (0: contiguous); bytes checked, gaps untouched. */
static void one(pair_t *p, size_t len, const size_t *scuts, int nscuts, const size_t *rcuts,
                int nrcuts, uint64_t seed)
{
    static struct iovec siov[MAXV], riov[MAXV];
    size_t gap = 3, sspan = len, rspan = len;
    unsigned char *sb = malloc(2 * len + MAXV * gap + 1), *rb = malloc(2 * len + MAXV * gap + 1);
    CHECK(sb != NULL && rb != NULL, "out of memory");
    int ns = nscuts ? cut(sb, len, scuts, nscuts, gap, siov, MAXV, &sspan) : 0;
    int nr = nrcuts ? cut(rb, len, rcuts, nrcuts, gap, riov, MAXV, &rspan) : 0;
    memset(sb, 0x11, sspan);
    memset(rb, 0xEE, rspan);
    uint64_t k = 0;
    if (ns) {
        for (int i = 0; i < ns; i++)
            for (size_t j = 0; j < siov[i].iov_len; j++)
                ((unsigned char *)siov[i].iov_base)[j] = pat(seed, k++);
    } else {
        for (size_t j = 0; j < len; j++)
            sb[j] = pat(seed, j);
    }
    void *sreq = NULL, *rreq = NULL;
    tpx_status_t st = nr ? tpx__net_irecvv(p->n, p->rc, riov, nr, &rreq)
                         : tpx__net_irecv(p->n, p->rc, rb, len, 0, NULL, &rreq);
    CHECK(st == TPX_OK && rreq != NULL, "irecv(v) of %zu bytes in %d iovecs: %d", len, nr, st);
    st = ns ? tpx__net_isendv(p->n, p->sc, siov, ns, &sreq)
            : tpx__net_isend(p->n, p->sc, sb, len, 0, NULL, &sreq);
    CHECK(st == TPX_OK && sreq != NULL, "isend(v) of %zu bytes in %d iovecs: %d", len, ns, st);
    int got = -1;
    CHECK(wait2(p, sreq, rreq, &got) == TPX_OK, "message of %zu bytes failed", len);
    CHECK(got == (int)len, "received %d bytes, sent %zu", got, len);
    k = 0;
    if (nr) {
        for (int i = 0; i < nr; i++) {
            const unsigned char *b = riov[i].iov_base;
            for (size_t j = 0; j < riov[i].iov_len; j++, k++)
                CHECK(b[j] == pat(seed, k), "byte %llu (iovec %d) wrong", (unsigned long long)k, i);
            if (i + 1 < nr)
                for (size_t j = 0; j < gap; j++)
                    CHECK(b[riov[i].iov_len + j] == 0xEE, "a gap after iovec %d was written", i);
        }
    } else {
        for (size_t j = 0; j < len; j++)
            CHECK(rb[j] == pat(seed, j), "byte %zu wrong", j);
    }
    free(sb);
    free(rb);
}

static int t_mixed(void)
{
    pair_t p = {0};
    pair_open(&p);
    static const size_t odd[] = {4096, 1, 777, 65536, 3, 100000, 4095};
    static const size_t other[] = {5000, 12345, 1, 2, 262144, 999};
    static const size_t tiny[] = {7, 1, 60, 13};
    uint64_t seed = 1;
    for (int round = 0; round < 3; round++) {
        one(&p, 4u << 20, odd, 7, NULL, 0, seed++);       /* vectored -> contiguous */
        one(&p, 4u << 20, NULL, 0, other, 6, seed++);     /* contiguous -> vectored */
        one(&p, 3u << 20, odd, 7, other, 6, seed++);      /* cut differently */
        one(&p, 20000, tiny, 4, tiny + 1, 3, seed++);     /* small: direct write, > 64 iovecs */
        one(&p, 1, tiny + 1, 1, tiny + 1, 1, seed++);     /* one byte, one iovec */
        one(&p, 60000, odd + 2, 1, NULL, 0, seed++);      /* 77 iovecs of 777 */
    }
    pair_close(&p);
    printf("mixed: ok\n");
    return 0;
}

static int t_eager(void)
{
    pair_t p = {0};
    pair_open(&p);
    static struct iovec siov[8], riov[8];
    unsigned char sb[3000], rb[3000 + 64];
    for (int i = 0; i < 3000; i++)
        sb[i] = pat(9, (uint64_t)i);
    memset(rb, 0xEE, sizeof(rb));
    siov[0] = (struct iovec){sb, 1000};
    siov[1] = (struct iovec){sb + 1000, 2000};
    riov[0] = (struct iovec){rb, 10};
    riov[1] = (struct iovec){rb + 20, 2500}; /* rb[10..20) stays */
    riov[2] = (struct iovec){rb + 2530, 490};
    void *sreq = NULL, *rreq = NULL;
    CHECK(tpx__net_isendv(p.n, p.sc, siov, 2, &sreq) == TPX_OK && sreq != NULL, "isendv");
    CHECK(wait2(&p, sreq, NULL, NULL) == TPX_OK, "send");
    /* let a worker read it before the receive exists (held eagerly) */
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    CHECK(tpx__net_irecvv(p.n, p.rc, riov, 3, &rreq) == TPX_OK && rreq != NULL, "irecvv");
    int got = -1;
    CHECK(wait2(&p, NULL, rreq, &got) == TPX_OK && got == 3000, "receive: got %d", got);
    for (int i = 0; i < 10; i++)
        CHECK(rb[i] == sb[i], "byte %d", i);
    for (int i = 10; i < 20; i++)
        CHECK(rb[i] == 0xEE, "gap byte %d written", i);
    for (int i = 10; i < 2510; i++)
        CHECK(rb[i + 10] == sb[i], "byte %d", i);
    for (int i = 2510; i < 3000; i++)
        CHECK(rb[i + 20] == sb[i], "byte %d", i);
    for (size_t i = 3020; i < sizeof(rb); i++)
        CHECK(rb[i] == 0xEE, "byte %zu past the end written", i);
    pair_close(&p);
    printf("eager: ok\n");
    return 0;
}

static int t_badargs(void)
{
    pair_t p = {0};
    pair_open(&p);
    static struct iovec v[TPX_NET_IOV_MAX + 1];
    static unsigned char b[TPX_NET_IOV_MAX + 1];
    for (int i = 0; i <= TPX_NET_IOV_MAX; i++)
        v[i] = (struct iovec){b + i, 1};
    void *req = NULL;
    CHECK(tpx__net_isendv(p.n, p.sc, v, 0, &req) == TPX_ERR_INVALID_ARG, "0 iovecs accepted");
    CHECK(tpx__net_isendv(p.n, p.sc, v, TPX_NET_IOV_MAX + 1, &req) == TPX_ERR_INVALID_ARG,
          "too many iovecs accepted");
    CHECK(tpx__net_irecvv(p.n, p.rc, NULL, 1, &req) == TPX_ERR_INVALID_ARG, "NULL iov accepted");
    struct iovec nul[2] = {{b, 1}, {NULL, 5}};
    CHECK(tpx__net_isendv(p.n, p.sc, nul, 2, &req) == TPX_ERR_INVALID_ARG, "NULL base accepted");
    CHECK(tpx__net_isendv(p.n, p.rc, v, 1, &req) == TPX_ERR_INVALID_ARG,
          "a receive comm took an isendv");
    CHECK(req == NULL, "a refused post returned a request");
    /* the comm still works, with the largest count */
    void *sreq = NULL, *rreq = NULL;
    static struct iovec rv[TPX_NET_IOV_MAX];
    static unsigned char rbuf[TPX_NET_IOV_MAX * 2];
    for (int i = 0; i < TPX_NET_IOV_MAX; i++) {
        b[i] = (unsigned char)(i * 7 + 1);
        rv[i] = (struct iovec){rbuf + 2 * i, 1};
    }
    CHECK(tpx__net_irecvv(p.n, p.rc, rv, TPX_NET_IOV_MAX, &rreq) == TPX_OK, "irecvv max");
    CHECK(tpx__net_isendv(p.n, p.sc, v, TPX_NET_IOV_MAX, &sreq) == TPX_OK, "isendv max");
    int got = -1;
    CHECK(wait2(&p, sreq, rreq, &got) == TPX_OK && got == TPX_NET_IOV_MAX, "max: got %d", got);
    for (int i = 0; i < TPX_NET_IOV_MAX; i++)
        CHECK(rbuf[2 * i] == b[i], "max: byte %d", i);
    /* a receive smaller than the message: the comm fails (truncated) */
    unsigned char big[100000], small[2][1000];
    memset(big, 1, sizeof(big));
    memset(small, 0xEE, sizeof(small));
    struct iovec sv[2] = {{small[0], 500}, {small[1], 500}};
    CHECK(tpx__net_irecvv(p.n, p.rc, sv, 2, &rreq) == TPX_OK, "irecvv small");
    CHECK(tpx__net_isend(p.n, p.sc, big, sizeof(big), 0, NULL, &sreq) == TPX_OK, "isend big");
    tpx_status_t st = TPX_OK;
    uint64_t until = now_ms() + 20000;
    for (int done = 0; st == TPX_OK && !done;) {
        CHECK(now_ms() < until, "the truncation was not reported in 20 s");
        int size, rc;
        st = tpx__net_test(p.n, rreq, &done, &size, &rc);
        CHECK(st != TPX_OK || !done, "a receive too small completed");
    }
    CHECK(st != TPX_OK, "a receive too small did not fail"); /* the plugin said why (log) */
    for (int i = 500; i < 1000; i++)
        CHECK(small[0][i] == 0xEE && small[1][i] == 0xEE, "written past an iovec");
    pair_close(&p);
    printf("badargs: ok\n");
    return 0;
}

static int t_strict(void)
{
    pair_t p = {0};
    pair_open(&p);
    CHECK(!tpx__net_has_vec(p.n), "strict TCPX mode offers vectored messages");
    unsigned char b[16];
    struct iovec v[1] = {{b, sizeof(b)}};
    void *req = NULL;
    CHECK(tpx__net_isendv(p.n, p.sc, v, 1, &req) == TPX_ERR_UNSUPPORTED, "isendv accepted");
    CHECK(tpx__net_irecvv(p.n, p.rc, v, 1, &req) == TPX_ERR_UNSUPPORTED, "irecvv accepted");
    pair_close(&p);
    printf("strict: ok\n");
    return 0;
}

/* Payload bytes each data connection of receive comm rc has taken in. Read
 * once the messages are complete (each connection's count is updated
 * before the completion that the test saw is published). */
static void chan_bytes(void *rc, uint64_t *out)
{
    const tpx_sock_comm_t *c = rc;
    CHECK(c->magic == SOCK_COMM_MAGIC_RECV && c->nsocks == 4, "not a 4-connection receive comm");
    for (int i = 0; i < c->nsocks; i++)
        out[i] = c->chans[i].bytes;
}

/* The connection whose count grew since `before` (-1: none or several). */
static int chan_grew(void *rc, const uint64_t *before)
{
    uint64_t now[4];
    chan_bytes(rc, now);
    int which = -1, n = 0;
    for (int i = 0; i < 4; i++)
        if (now[i] != before[i]) {
            which = i;
            n++;
        }
    return n == 1 ? which : -1;
}

/* Connections whose count grew since `before`. */
static int chans_used(void *rc, const uint64_t *before)
{
    uint64_t now[4];
    chan_bytes(rc, now);
    int n = 0;
    for (int i = 0; i < 4; i++)
        n += now[i] != before[i];
    return n;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

#define STICKY_LEN 4096
#define STICKY_MSGS 30
#define STICKY_BURST 16

/* The rule is about time (sock_direct_write.c: direct writes closer than 20 us
 * spread), so the checks allow for a slow or busy machine: one at a time,
 * at least 80% of the messages share one connection (a worker that holds
 * the connection for an instant sends the odd one elsewhere; rotating put
 * 25% on each); a burst must spread only if two of its posts really came
 * within 10 us (under ThreadSanitizer they do not). */
static int t_sticky(void)
{
    setenv("TPX_NSOCKS", "4", 1);
    setenv("TPX_SOCK_POLL_US", "0", 1); /* no polling worker takes a piece first */
    pair_t p = {0};
    pair_open(&p);
    static unsigned char sb[STICKY_BURST][STICKY_LEN], rb[STICKY_BURST][STICKY_LEN];
    uint64_t before[4];
    int on[4] = {0};
    /* one at a time, 200 us apart */
    for (int m = 0; m < STICKY_MSGS; m++) {
        for (int i = 0; i < STICKY_LEN; i++)
            sb[0][i] = pat((uint64_t)m, (uint64_t)i);
        memset(rb[0], 0, STICKY_LEN);
        struct iovec sv = {sb[0], STICKY_LEN}, rv = {rb[0], STICKY_LEN};
        void *sreq = NULL, *rreq = NULL;
        chan_bytes(p.rc, before);
        CHECK(tpx__net_irecvv(p.n, p.rc, &rv, 1, &rreq) == TPX_OK, "irecvv");
        CHECK(tpx__net_isendv(p.n, p.sc, &sv, 1, &sreq) == TPX_OK, "isendv");
        int got = -1;
        CHECK(wait2(&p, sreq, rreq, &got) == TPX_OK && got == STICKY_LEN, "message %d: got %d", m,
              got);
        CHECK(memcmp(sb[0], rb[0], STICKY_LEN) == 0, "message %d: bytes differ", m);
        int which = chan_grew(p.rc, before);
        CHECK(which >= 0, "message %d: not on exactly one connection", m);
        on[which]++;
        struct timespec ts = {0, 200 * 1000L};
        nanosleep(&ts, NULL);
    }
    int most = 0;
    for (int i = 0; i < 4; i++)
        most = on[i] > most ? on[i] : most;
    CHECK(most * 5 >= STICKY_MSGS * 4,
          "%d messages one at a time: %d / %d / %d / %d on the 4 connections, expected >= 80%% "
          "on one", STICKY_MSGS, on[0], on[1], on[2], on[3]);
    /* a burst: 16 posted back to back */
    chan_bytes(p.rc, before);
    void *sreq[STICKY_BURST], *rreq[STICKY_BURST];
    for (int m = 0; m < STICKY_BURST; m++) {
        for (int i = 0; i < STICKY_LEN; i++)
            sb[m][i] = pat((uint64_t)(100 + m), (uint64_t)i);
        memset(rb[m], 0, STICKY_LEN);
        struct iovec rv = {rb[m], STICKY_LEN};
        CHECK(tpx__net_irecvv(p.n, p.rc, &rv, 1, &rreq[m]) == TPX_OK, "irecvv");
    }
    uint64_t t[STICKY_BURST];
    for (int m = 0; m < STICKY_BURST; m++) {
        struct iovec sv = {sb[m], STICKY_LEN};
        t[m] = now_us();
        CHECK(tpx__net_isendv(p.n, p.sc, &sv, 1, &sreq[m]) == TPX_OK, "isendv");
    }
    uint64_t gap = UINT64_MAX;
    for (int m = 1; m < STICKY_BURST; m++)
        gap = t[m] - t[m - 1] < gap ? t[m] - t[m - 1] : gap;
    for (int m = 0; m < STICKY_BURST; m++) {
        int got = -1;
        CHECK(wait2(&p, sreq[m], rreq[m], &got) == TPX_OK && got == STICKY_LEN,
              "burst message %d: got %d", m, got);
        CHECK(memcmp(sb[m], rb[m], STICKY_LEN) == 0, "burst message %d: bytes differ", m);
    }
    int used = chans_used(p.rc, before);
    if (gap < 10)
        CHECK(used >= 2, "16 messages posted back to back (closest %llu us apart) arrived on %d "
              "connection(s)", (unsigned long long)gap, used);
    pair_close(&p);
    printf("sticky: ok (one at a time: %d / %d / %d / %d; burst: closest posts %llu us apart, "
           "%d connections%s)\n", on[0], on[1], on[2], on[3], (unsigned long long)gap, used,
           gap < 10 ? "" : ", not checked: posts too far apart");
    return 0;
}

#define DIRECT_MAX 65536

/* A pair whose receives irecv/test read themselves: one data connection,
 * no eager buffer, no polling workers, direct reads up to DIRECT_MAX. */
static void direct_pair_open(pair_t *p)
{
    setenv("TPX_NSOCKS", "1", 1);
    setenv("TPX_SOCK_EAGER_BYTES", "0", 1);
    setenv("TPX_SOCK_POLL_US", "0", 1);
    setenv("TPX_SOCK_DIRECT_BYTES", "65536", 1);
    pair_open(p);
}

static int t_direct(void)
{
    pair_t p = {0};
    direct_pair_open(&p);
    const tpx_sock_comm_t *rc = p.rc;
    CHECK(rc->magic == SOCK_COMM_MAGIC_RECV && rc->nsocks == 1, "not a 1-connection comm");
    static unsigned char sb[300000], rb[300000 + 1];
    static const size_t lens[] = {0, 1, 4096, DIRECT_MAX, DIRECT_MAX + 1, 300000};
    for (int m = 0; m < 6; m++) {
        size_t len = lens[m];
        for (size_t i = 0; i < len; i++)
            sb[i] = pat((uint64_t)m, i);
        memset(rb, 0xEE, sizeof(rb));
        void *sreq = NULL, *rreq = NULL;
        CHECK(tpx__net_isend(p.n, p.sc, sb, len, 0, NULL, &sreq) == TPX_OK, "isend %zu", len);
        struct timespec ts = {0, 50 * 1000000L}; /* its worker reads the header and parks */
        nanosleep(&ts, NULL);
        uint64_t before = rc->chans[0].api_bytes;
        CHECK(tpx__net_irecv(p.n, p.rc, rb, len, 0, NULL, &rreq) == TPX_OK, "irecv %zu", len);
        if (len <= DIRECT_MAX) {
            int done = 0, size = -1, rcode = 0;
            CHECK(tpx__net_test(p.n, rreq, &done, &size, &rcode) == TPX_OK && done &&
                  size == (int)len, "%zu bytes: not complete when irecv returned", len);
            CHECK(rc->chans[0].api_bytes - before == len,
                  "%zu bytes: %llu moved by irecv itself", len,
                  (unsigned long long)(rc->chans[0].api_bytes - before));
            rreq = NULL;
        }
        int got = -1;
        CHECK(wait2(&p, sreq, rreq, &got) == TPX_OK, "message of %zu bytes failed", len);
        if (len > DIRECT_MAX)
            CHECK(got == (int)len && rc->chans[0].api_bytes == before,
                  "%zu bytes (more than TPX_SOCK_DIRECT_BYTES): got %d, %llu read directly", len,
                  got, (unsigned long long)(rc->chans[0].api_bytes - before));
        CHECK(memcmp(sb, rb, len) == 0 && rb[len] == 0xEE, "%zu bytes: wrong bytes", len);
    }
    /* receive first, test() racing the connection's worker */
    uint64_t x = 12345, direct = rc->chans[0].api_bytes;
    for (int m = 0; m < 200; m++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = (size_t)(x >> 33) % (m % 2 ? 4096 : 300000);
        for (size_t i = 0; i < len; i++)
            sb[i] = pat((uint64_t)m + 100, i);
        memset(rb, 0xEE, len + 1);
        void *sreq = NULL, *rreq = NULL;
        CHECK(tpx__net_irecv(p.n, p.rc, rb, len, 0, NULL, &rreq) == TPX_OK, "irecv %zu", len);
        CHECK(tpx__net_isend(p.n, p.sc, sb, len, 0, NULL, &sreq) == TPX_OK, "isend %zu", len);
        int got = -1;
        CHECK(wait2(&p, sreq, rreq, &got) == TPX_OK && got == (int)len,
              "race message %d of %zu bytes: got %d", m, len, got);
        CHECK(memcmp(sb, rb, len) == 0 && rb[len] == 0xEE, "race message %d: wrong bytes", m);
    }
    direct = rc->chans[0].api_bytes - direct;
    pair_close(&p);
    printf("direct: ok (racing: %llu bytes read by test() itself)\n", (unsigned long long)direct);
    return 0;
}

/* dstream: a sender thread keeps small messages flowing back to back
 * while the receiver alternates a lone receive (read by irecv/test
 * themselves) with a batch of four (not lone: only the worker reads
 * them). A message that lands just after a direct read found the socket
 * dry wakes the worker while the reader still owns the connection; the
 * reader must hand that wake-up on, or the batch behind it waits forever
 * (the edge was spent, the bytes stay in the socket). */
enum { DS_MSGS = 30000, DS_MAX = 8192, DS_INFLIGHT = 8, DS_BATCH = 4 };

static size_t ds_len(uint64_t m) { return (size_t)((m * 2654435761u) % DS_MAX) + 1; }

static void *ds_sender(void *arg)
{
    pair_t *p = arg;
    static unsigned char sb[DS_INFLIGHT][DS_MAX];
    void *req[DS_INFLIGHT] = {0};
    uint64_t next = 0, done = 0, until = now_ms() + 120000;
    while (done < DS_MSGS) {
        CHECK(now_ms() < until, "dstream: the sender did not finish in 120 s (%llu sent)",
              (unsigned long long)done);
        int k = (int)(next % DS_INFLIGHT);
        if (next < DS_MSGS && next - done < DS_INFLIGHT) {
            size_t len = ds_len(next);
            for (size_t i = 0; i < len; i++)
                sb[k][i] = pat(next + 7, i);
            CHECK(tpx__net_isend(p->n, p->sc, sb[k], len, 0, NULL, &req[k]) == TPX_OK &&
                      req[k] != NULL,
                  "dstream: isend %llu", (unsigned long long)next);
            next++;
            continue;
        }
        int h = (int)(done % DS_INFLIGHT), d = 0, size = 0, rc = 0;
        CHECK(tpx__net_test(p->n, req[h], &d, &size, &rc) == TPX_OK, "dstream: send failed");
        if (d)
            done++;
    }
    return NULL;
}

static int t_dstream(void)
{
    pair_t p = {0};
    direct_pair_open(&p);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, ds_sender, &p) == 0, "pthread_create");
    static unsigned char rb[DS_BATCH][DS_MAX + 1];
    uint64_t m = 0;
    while (m < DS_MSGS) {
        int n = (m / (1 + DS_BATCH)) % 2 == 0 ? 1 : DS_BATCH; /* lone, then a batch */
        if (m + (uint64_t)n > DS_MSGS)
            n = (int)(DS_MSGS - m);
        void *req[DS_BATCH] = {0};
        for (int i = 0; i < n; i++) {
            memset(rb[i], 0xEE, ds_len(m + (uint64_t)i) + 1);
            CHECK(tpx__net_irecv(p.n, p.rc, rb[i], ds_len(m + (uint64_t)i), 0, NULL, &req[i]) ==
                      TPX_OK,
                  "dstream: irecv %llu", (unsigned long long)(m + (uint64_t)i));
        }
        uint64_t until = now_ms() + 10000;
        for (int i = 0; i < n; i++) {
            int d = 0, size = -1, rc = 0;
            while (!d) {
                CHECK(now_ms() < until,
                      "dstream: message %llu (%s of %d) did not arrive in 10 s: a lost wake-up",
                      (unsigned long long)(m + (uint64_t)i), n == 1 ? "lone" : "batch", n);
                CHECK(tpx__net_test(p.n, req[i], &d, &size, &rc) == TPX_OK, "dstream: recv failed");
            }
            size_t len = ds_len(m + (uint64_t)i);
            CHECK(size == (int)len, "dstream: message %llu: %d bytes, not %zu",
                  (unsigned long long)(m + (uint64_t)i), size, len);
            for (size_t j = 0; j < len; j++)
                CHECK(rb[i][j] == pat(m + (uint64_t)i + 7, j), "dstream: message %llu: wrong bytes",
                      (unsigned long long)(m + (uint64_t)i));
            CHECK(rb[i][len] == 0xEE, "dstream: written past the message");
        }
        m += (uint64_t)n;
    }
    CHECK(pthread_join(th, NULL) == 0, "pthread_join");
    uint64_t direct = p.rc ? ((const tpx_sock_comm_t *)p.rc)->chans[0].api_bytes : 0;
    pair_close(&p);
    printf("dstream: ok (%d messages; %llu bytes read by irecv/test themselves)\n", DS_MSGS,
           (unsigned long long)direct);
    return 0;
}

#define DR_LEN    4096
#define DR_ROUNDS 5

typedef struct {
    pair_t *p;
    int round;
} dr_arg_t;

static void *dr_sender(void *arg)
{
    dr_arg_t *a = arg;
    pair_t *p = a->p;
    static unsigned char sb[2][DR_LEN];
    struct timespec ts = {0, 50 * 1000000L}; /* inside the reader's 200 ms window */
    nanosleep(&ts, NULL);
    void *req[2] = {0};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < DR_LEN; i++)
            sb[k][i] = pat((uint64_t)(a->round * 2 + k) + 300, i);
        CHECK(tpx__net_isend(p->n, p->sc, sb[k], DR_LEN, 0, NULL, &req[k]) == TPX_OK &&
                  req[k] != NULL,
              "directrace: isend %d", k);
    }
    uint64_t until = now_ms() + 10000;
    for (int k = 0; k < 2; k++) {
        int d = 0, size = 0, rc = 0;
        while (!d) {
            CHECK(now_ms() < until, "directrace: send %d not done in 10 s", k);
            CHECK(tpx__net_test(p->n, req[k], &d, &size, &rc) == TPX_OK, "directrace: send failed");
        }
    }
    return NULL;
}

/* One round; returns whether irecv's direct read waited in the window (it
 * does not when the worker held the connection at that moment). */
static int dr_round(pair_t *p, int round)
{
    static unsigned char rb[2][DR_LEN + 1];
    memset(rb, 0xEE, sizeof(rb));
    dr_arg_t a = {p, round};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, dr_sender, &a) == 0, "pthread_create");
    void *req[2] = {0};
    /* A lone receive: irecv reads directly, finds nothing, and waits in the
     * window while both messages arrive. */
    uint64_t t0 = now_ms();
    CHECK(tpx__net_irecv(p->n, p->rc, rb[0], DR_LEN, 0, NULL, &req[0]) == TPX_OK, "irecv 0");
    int waited = now_ms() - t0 >= 150;
    CHECK(tpx__net_irecv(p->n, p->rc, rb[1], DR_LEN, 0, NULL, &req[1]) == TPX_OK, "irecv 1");
    uint64_t until = now_ms() + 5000;
    for (int k = 0; k < 2; k++) {
        int d = 0, size = -1, rc = 0;
        while (!d) {
            CHECK(now_ms() < until,
                  "directrace: message %d did not arrive in 5 s: the worker's wake-up was lost", k);
            CHECK(tpx__net_test(p->n, req[k], &d, &size, &rc) == TPX_OK, "directrace: recv failed");
        }
        CHECK(size == DR_LEN, "directrace: message %d: %d bytes", k, size);
    }
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < DR_LEN; i++)
            CHECK(rb[k][i] == pat((uint64_t)(round * 2 + k) + 300, i),
                  "directrace: message %d: wrong bytes", k);
        CHECK(rb[k][DR_LEN] == 0xEE, "directrace: written past message %d", k);
    }
    pthread_join(th, NULL);
    return waited;
}

static int t_directrace(void)
{
    CHECK(getenv("TPX_FAULT_DIRECT_DRY_US") != NULL,
          "directrace needs TPX_FAULT_DIRECT_DRY_US (ctest sets it)");
    pair_t p = {0};
    direct_pair_open(&p);
    int round = 0;
    while (!dr_round(&p, round))
        CHECK(++round < DR_ROUNDS, "directrace: in %d rounds, irecv never waited in the window",
              DR_ROUNDS);
    pair_close(&p);
    printf("directrace: ok (the window met the worker in round %d)\n", round + 1);
    return 0;
}

/* A socket option's value on fd. */
static int fd_opt(int fd, int opt)
{
    int v = -1;
    socklen_t len = sizeof(v);
    CHECK(getsockopt(fd, SOL_SOCKET, opt, &v, &len) == 0, "getsockopt");
    return v;
}

/* What the kernel makes of asking a TCP socket for `bytes` of buffer `opt`
 * (it doubles the request and caps it at net.core.[rw]mem_max). */
static int asked(int bytes, int opt)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0 && setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)) == 0, "setsockopt");
    int v = fd_opt(fd, opt);
    close(fd);
    return v;
}

/* The send buffer of a plain loopback TCP connection once connected. */
static int autotuned_sndbuf(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0 && c >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
              getsockname(l, (struct sockaddr *)&a, &len) == 0 &&
              connect(c, (struct sockaddr *)&a, sizeof(a)) == 0,
          "a plain loopback connection");
    int v = fd_opt(c, SO_SNDBUF);
    close(c);
    close(l);
    return v;
}

static int t_sockbuf(void)
{
    const char *e = getenv("TPX_SOCK_BUF_BYTES");
    int mode = e == NULL ? -1 : atoi(e);
    int want = mode < 0    ? asked(TPX_SOCK_LOCAL_SNDBUF, SO_SNDBUF)
               : mode == 0 ? autotuned_sndbuf()
                           : asked(mode, SO_SNDBUF);
    pair_t p = {0};
    pair_open(&p);
    const tpx_sock_comm_t *sc = p.sc, *rc = p.rc;
    CHECK(sc->nsocks == rc->nsocks && sc->nsocks > 0, "comms of %d and %d connections", sc->nsocks,
          rc->nsocks);
    for (int i = 0; i < sc->nsocks; i++) {
        int s = fd_opt(sc->chans[i].fd, SO_SNDBUF), r = fd_opt(rc->chans[i].fd, SO_SNDBUF);
        printf("connection %d: SO_SNDBUF %d (sender) / %d (receiver), expected %d\n", i, s, r,
               want);
        CHECK(s == want && r == want,
              "TPX_SOCK_BUF_BYTES=%d: connection %d's send buffers are "
              "%d and %d, not %d",
              mode, i, s, r, want);
        if (mode > 0)
            CHECK(fd_opt(rc->chans[i].fd, SO_RCVBUF) == asked(mode, SO_RCVBUF),
                  "TPX_SOCK_BUF_BYTES=%d: connection %d's receive buffer is %d", mode, i,
                  fd_opt(rc->chans[i].fd, SO_RCVBUF));
    }
    static const size_t whole[] = {8u << 20};
    one(&p, 8u << 20, whole, 1, whole, 1, 77);
    pair_close(&p);
    printf("sockbuf: ok (TPX_SOCK_BUF_BYTES=%d: send buffers of %d bytes)\n", mode, want);
    return 0;
}

int main(int argc, char **argv)
{
    const char *s = argc > 1 ? argv[1] : "";
    if (strcmp(s, "mixed") == 0)
        return t_mixed();
    if (strcmp(s, "eager") == 0)
        return t_eager();
    if (strcmp(s, "badargs") == 0)
        return t_badargs();
    if (strcmp(s, "strict") == 0)
        return t_strict();
    if (strcmp(s, "sticky") == 0)
        return t_sticky();
    if (strcmp(s, "direct") == 0)
        return t_direct();
    if (strcmp(s, "dstream") == 0)
        return t_dstream();
    if (strcmp(s, "sockbuf") == 0)
        return t_sockbuf();
    if (strcmp(s, "directrace") == 0)
        return t_directrace();
    fprintf(stderr, "usage: test_vec mixed|eager|badargs|strict|sticky|direct|dstream|sockbuf|"
                    "directrace\n");
    return 2;
}
