/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine.c - integration tests of the tpx engine through its public API
 * (tpx/tpx.h) only, over the built-in transport on loopback.
 *
 *   test_engine SCENARIO [ARGS]
 *
 * Every scenario runs its roles (a server engine, one or more clients, a
 * fuzzer) in separate processes forked before any engine exists; the server
 * listens on an ephemeral port and hands it to the clients over a pipe. See
 * harness.h for the process model and the data checks, faults.c for the
 * scenarios where something goes wrong on purpose. This file holds the ones
 * where everything must work:
 *
 *   sizes CHANNELS  1 B .. 1 GiB, one send/recv pair each, window 16
 *   many            200 transfers of 1 B .. 4 MiB outstanding at once, each way;
 *                   one process drives tpx_progress() (and polls tpx_engine_fd()),
 *                   the other has a progress thread and waits on the fd
 *   peers           one server, three clients at once, 16 MiB both ways each
 *   idlecpu         an idle engine with a progress thread costs (almost) no CPU
 *   idlefds CHANNELS MAXFDS  an idle peer holds its bootstrap connection (and
 *                   its control comms, if used) only (MAXFDS); its data
 *                   channels open when first used
 *   bw [CHANNELS]   10 x 256 MiB, GB/s reported (passes if the data verifies)
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "scenarios.h"

static int L_main; /* server <-> first client */
static int g_channels;

/* ==== sizes ================================================================== */

static const size_t SIZES[] = {1, 4095, 4096, 65537, 524289, MiB, 2621441, 64 * MiB, GiB};
#define NSIZES (sizeof(SIZES) / sizeof(SIZES[0]))

static int sizes_srv(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, g_channels, 16, 1, NULL);
    CHECK(e != NULL, "no engine");
    int port = tpx_engine_port(e);
    CHECK(port > 0, "tpx_engine_port: %d after TPX_PORT_EPHEMERAL", port);
    TRY(ht_put(L_main, (uint64_t)port));
    tpx_peer_t *peer;
    TRY(ht_accept(e, &peer));
    ht_buf_t r;
    TRY(ht_buf_new(e, GiB + 2 * HT_GUARD, &r));
    for (size_t i = 0; i < NSIZES; i++) {
        /* Receive at offsets G, G-1, G-2: unaligned destinations too. */
        size_t len = SIZES[i], o = HT_GUARD - i % 3;
        size_t tail = r.len - o - len < HT_GUARD ? r.len - o - len : HT_GUARD;
        ht_guard_fill(r.p, o, i);
        ht_guard_fill(r.p + o + len, tail, i + 100);
        char what[128];
        snprintf(what, sizeof(what), "recv #%zu of %zu bytes at offset %zu", i, len, o);
        tpx_xfer_t *x;
        uint64_t t0 = test_now_ns();
        CHECK_OK(tpx_recv(peer, r.reg, o, len, &x));
        TRY(ht_wait(x, len, what));
        double dt = test_secs_since(t0);
        TRY(ht_verify(r.p + o, len, ht_seed(1, (unsigned)g_channels, (unsigned)i), 0, what));
        TRY(ht_guard_check(r.p, o, i, what));
        TRY(ht_guard_check(r.p + o + len, tail, i + 100, what));
        if (len >= 64 * MiB)
            test_say("received %zu MiB in %.3f s (from post)", len / MiB, dt);
    }
    TRY(ht_barrier(L_main, NULL));
    return ht_finish(e, peer, &r, res0);
}

static int sizes_cli(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, g_channels, 16, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *peer;
    TRY(ht_dial(e, L_main, &peer));
    ht_buf_t s;
    TRY(ht_buf_new(e, GiB + 8, &s));
    for (size_t i = 0; i < NSIZES; i++) {
        size_t len = SIZES[i], o = i % 8;
        ht_fill(s.p + o, len, ht_seed(1, (unsigned)g_channels, (unsigned)i), 0);
        char what[128];
        snprintf(what, sizeof(what), "send #%zu of %zu bytes at offset %zu", i, len, o);
        tpx_xfer_t *x;
        uint64_t t0 = test_now_ns();
        CHECK_OK(tpx_send(peer, s.reg, o, len, &x));
        TRY(ht_wait(x, len, what));
        double dt = test_secs_since(t0);
        if (len >= 64 * MiB)
            test_say("sent %zu MiB in %.3f s: %.2f GB/s (%d channels, window 16)", len / MiB, dt,
                     (double)len / dt / 1e9, g_channels);
    }
    TRY(ht_barrier(L_main, NULL));
    return ht_finish(e, peer, &s, res0);
}

int scen_sizes(int argc, char **argv)
{
    g_channels = argc > 2 ? atoi(argv[2]) : 4;
    if (g_channels < 1) {
        fprintf(stderr, "sizes: CHANNELS must be >= 1\n");
        return 2;
    }
    L_main = ht_link(HT_SRV, HT_C1);
    ht_spawn(HT_SRV, "server", sizes_srv, 0);
    ht_spawn(HT_C1, "client", sizes_cli, 0);
    return ht_run();
}

/* ==== many =================================================================== */

#define MANY_N   200
#define MANY_MAX (4 * MiB)

typedef struct {
    size_t len[MANY_N], off[MANY_N], total;
} layout_t;

/* Sizes log-uniform over 1 B .. 4 MiB (so small and large are both well
 * represented), each message at an odd gap after the previous one. Both
 * processes derive the same layouts. */
static void many_layout(layout_t *l, unsigned dir)
{
    uint64_t s = ht_seed(2, dir, 0);
    size_t o = 0;
    for (int i = 0; i < MANY_N; i++) {
        uint64_t r = ht_rand(&s);
        unsigned ex = (unsigned)(r % 23);
        size_t len = ((size_t)1 << ex) + (size_t)((r >> 8) % ((uint64_t)1 << ex));
        if (i % 50 == 0 || len > MANY_MAX)
            len = MANY_MAX;
        if (i % 50 == 1)
            len = 1;
        o += 64 + (size_t)((r >> 40) % 61);
        l->off[i] = o;
        l->len[i] = len;
        o += len;
    }
    l->total = o + 64;
}

static int many_fd_spins; /* the progress-thread side saw the engine fd spin */

/* Caller-driven: tpx_progress() in a loop until it has reported every
 * transfer complete (its return value is the number completed), looking at
 * the engine fd when nothing moves; then every transfer must be done. */
static int many_drive(tpx_engine_t *e, int fd, tpx_xfer_t **x, tpx_status_t *stv, size_t *got,
                      int *done)
{
    enum { NX = 2 * MANY_N };
    long sum = 0, calls = 0;
    int fd_polls = 0, fd_readable = 0;
    uint64_t t0 = test_now_ns(), t_last = t0;
    while (sum < NX) {
        int n = tpx_progress(e);
        CHECK(n >= 0, "tpx_progress returned %d", n);
        sum += n;
        calls++;
        if (n == 0 || fd_polls == 0) {
            struct pollfd p = {fd, POLLIN, 0};
            int rr = poll(&p, 1, 1);
            CHECK(rr >= 0 || errno == EINTR, "poll(tpx_engine_fd): %s", strerror(errno));
            CHECK(!(p.revents & (POLLERR | POLLNVAL)), "poll(tpx_engine_fd): revents 0x%x",
                  p.revents);
            fd_polls++;
            fd_readable += rr > 0;
        }
        if (n > 0)
            t_last = test_now_ns();
        if (test_secs_since(t_last) > 10) {
            /* Stuck: are the transfers stuck, or only the count? */
            int ndone = 0;
            for (int j = 0; j < NX; j++)
                ndone += tpx_xfer_poll(x[j], NULL) != TPX_INPROGRESS;
            FAIL("tpx_progress() has reported %ld of %d completions and nothing for 10 s (%ld "
                 "calls); tpx_xfer_poll() says %d transfers are done%s",
                 sum, NX, calls, ndone,
                 ndone > sum ? ": completions happened that tpx_progress() never reported" : "");
        }
    }
    double dt = test_secs_since(t0);
    int pending = 0;
    for (int j = 0; j < NX; j++) {
        stv[j] = tpx_xfer_poll(x[j], &got[j]);
        done[j] = stv[j] != TPX_INPROGRESS;
        pending += !done[j];
    }
    test_say(
        "caller-driven: %ld tpx_progress() calls reported %ld completions in %.3f s; engine fd "
        "polled %d times (%d readable)",
        calls, sum, dt, fd_polls, fd_readable);
    CHECK(sum == NX, "tpx_progress() reported %ld completions for %d transfers", sum, NX);
    CHECK(pending == 0, "tpx_progress() reported all %d complete, but %d are still in progress", NX,
          pending);
    return 0;
}

/* Progress thread: sleep on the engine fd, then tpx_xfer_poll() what is
 * pending (tpx.h: "poll it, then call tpx_progress()/tpx_xfer_poll()"). */
static int many_wait_fd(tpx_engine_t *e, int fd, tpx_xfer_t **x, tpx_status_t *stv, size_t *got,
                        int *done)
{
    enum { NX = 2 * MANY_N };
    int n = tpx_progress(e);
    CHECK(n >= 0, "tpx_progress on a progress-thread engine returned %d", n);
    int ndone = 0, wakeups = 0, timeouts = 0;
    uint64_t t0 = test_now_ns();
    while (ndone < NX) {
        struct pollfd p = {fd, POLLIN, 0};
        int rr = poll(&p, 1, 1000);
        CHECK(rr >= 0 || errno == EINTR, "poll(tpx_engine_fd): %s", strerror(errno));
        CHECK(!(p.revents & (POLLERR | POLLNVAL)), "poll(tpx_engine_fd): revents 0x%x", p.revents);
        wakeups += rr > 0;
        timeouts += rr == 0;
        for (int j = 0; j < NX; j++) {
            if (done[j])
                continue;
            stv[j] = tpx_xfer_poll(x[j], &got[j]);
            if (stv[j] == TPX_INPROGRESS)
                continue;
            done[j] = 1;
            ndone++;
        }
        CHECK(test_secs_since(t0) < 150, "only %d of %d transfers done after %.0f s", ndone, NX,
              test_secs_since(t0));
    }
    test_say("progress thread: all %d done in %.3f s; %d wakeups from the engine fd, %d poll "
             "timeouts (1 s)",
             NX, test_secs_since(t0), wakeups, timeouts);
    CHECK(wakeups > 0, "the engine fd never became readable while %d transfers completed", NX);
    /* Every completion has been observed: an event loop sleeping on the
     * fd must now sleep, not spin. */
    ht_sleep_ms(100);
    struct pollfd p = {fd, POLLIN, 0};
    int rr = poll(&p, 1, 0);
    if (rr != 0) {
        tpx_progress(e);
        int rr2 = poll(&p, 1, 0);
        many_fd_spins = 1; /* reported now, failed at the end (after the data checks) */
        test_say("FAIL at %s:%d", __FILE__, __LINE__);
        test_say("the engine fd stays readable after every completion was observed with "
                 "tpx_xfer_poll() (%d wakeups for %d completions): an event loop following tpx.h "
                 "(\"poll it, then call tpx_progress()/tpx_xfer_poll()\") spins; after a "
                 "tpx_progress() call it is %s",
                 wakeups, NX, rr2 == 0 ? "clear" : "still readable");
    } else if (wakeups > 2 * NX + 10) {
        many_fd_spins = 1;
        test_say("FAIL: %d wakeups from the engine fd for %d completions: it is not cleared",
                 wakeups, NX);
    }
    return 0;
}

static int many_run(tpx_engine_t *e, tpx_peer_t *peer, int caller_driven, unsigned dir_in,
                    unsigned dir_out)
{
    static layout_t in, out;
    many_layout(&in, dir_in);
    many_layout(&out, dir_out);
    ht_buf_t r, s;
    TRY(ht_buf_new(e, in.total, &r));
    TRY(ht_buf_new(e, out.total, &s));
    size_t prev = 0, bytes_in = 0;
    for (int i = 0; i < MANY_N; i++) {
        ht_guard_fill(r.p + prev, in.off[i] - prev, 1000 + (uint64_t)i);
        prev = in.off[i] + in.len[i];
        bytes_in += in.len[i];
        ht_fill(s.p + out.off[i], out.len[i], ht_seed(2, dir_out, (unsigned)i), 0);
    }
    ht_guard_fill(r.p + prev, in.total - prev, 1000 + MANY_N);

    enum { NX = 2 * MANY_N };
    static tpx_xfer_t *x[NX];
    static tpx_status_t stv[NX];
    static size_t got[NX];
    static int done[NX];
    /* Post everything first: recv i, send i, ... */
    for (int i = 0; i < MANY_N; i++) {
        tpx_status_t st = tpx_recv(peer, r.reg, in.off[i], in.len[i], &x[2 * i]);
        if (st == TPX_OK)
            st = tpx_send(peer, s.reg, out.off[i], out.len[i], &x[2 * i + 1]);
        CHECK(st == TPX_OK, "posting transfer pair %d of %d (each way) failed: %s (%d)%s", i,
              MANY_N, tpx_status_string(st), (int)st,
              st == TPX_ERR_NO_RESOURCE ? ": the engine must queue 200 outstanding transfers" : "");
    }
    test_say("posted %d receives (%zu bytes) and %d sends", MANY_N, bytes_in, MANY_N);

    int fd = tpx_engine_fd(e);
    CHECK(fd >= 0, "tpx_engine_fd: %d", fd);
    if (caller_driven)
        TRY(many_drive(e, fd, x, stv, got, done));
    else
        TRY(many_wait_fd(e, fd, x, stv, got, done));

    for (int i = 0; i < MANY_N; i++) {
        char what[128];
        for (int d = 0; d < 2; d++) {
            int j = 2 * i + d;
            size_t len = d ? out.len[i] : in.len[i];
            snprintf(what, sizeof(what), "%s #%d of %zu bytes", d ? "send" : "recv", i, len);
            CHECK(stv[j] == TPX_OK, "%s: %s (%d)", what, tpx_status_string(stv[j]), (int)stv[j]);
            CHECK(got[j] == len, "%s: %zu bytes reported", what, got[j]);
        }
        snprintf(what, sizeof(what), "recv #%d of %zu bytes", i, in.len[i]);
        TRY(ht_verify(r.p + in.off[i], in.len[i], ht_seed(2, dir_in, (unsigned)i), 0, what));
    }
    prev = 0;
    for (int i = 0; i <= MANY_N; i++) {
        size_t end = i < MANY_N ? in.off[i] : in.total;
        char what[64];
        snprintf(what, sizeof(what), "gap before recv #%d", i);
        TRY(ht_guard_check(r.p + prev, end - prev, 1000 + (uint64_t)i, what));
        if (i < MANY_N)
            prev = in.off[i] + in.len[i];
    }
    for (int j = 0; j < NX; j++)
        tpx_xfer_release(x[j]);
    ht_buf_free(&r);
    ht_buf_free(&s);
    return 0;
}

static int many_srv(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, 0, 16, 0, NULL);
    CHECK(e != NULL, "no engine");
    TRY(ht_put(L_main, (uint64_t)tpx_engine_port(e)));
    tpx_peer_t *peer;
    TRY(ht_accept(e, &peer));
    TRY(many_run(e, peer, 1, 1, 2));
    TRY(ht_barrier(L_main, e));
    return ht_finish(e, peer, NULL, res0);
}

static int many_cli(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 16, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *peer;
    TRY(ht_dial(e, L_main, &peer));
    TRY(many_run(e, peer, 0, 2, 1));
    TRY(ht_barrier(L_main, NULL));
    tpx_peer_close(peer);
    tpx_engine_destroy(e);
    return ht_res_check(res0, "after tpx_engine_destroy") || many_fd_spins;
}

int scen_many(int argc, char **argv)
{
    L_main = ht_link(HT_SRV, HT_C1);
    ht_spawn(HT_SRV, "server(caller-driven)", many_srv, 0);
    ht_spawn(HT_C1, "client(progress-thread)", many_cli, 0);
    return ht_run();
}

/* ==== peers ================================================================== */

#define NPEERS       3
#define PEERS_LEN    (16 * MiB)
#define PEERS_ROUNDS 2
static int L_peer[NPEERS];

static int peers_srv(int arg)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    int port = tpx_engine_port(e);
    for (int i = 0; i < NPEERS; i++) /* all clients connect at once */
        TRY(ht_put(L_peer[i], (uint64_t)port));
    tpx_peer_t *peer[NPEERS] = {0};
    ht_buf_t idb;
    TRY(ht_buf_new(e, 8 * NPEERS, &idb));
    for (int k = 0; k < NPEERS; k++) {
        tpx_peer_t *p;
        TRY(ht_accept(e, &p));
        /* Accept order is arbitrary: each client first sends its id. */
        tpx_xfer_t *x;
        CHECK_OK(tpx_recv(p, idb.reg, 8 * (size_t)k, 8, &x));
        TRY(ht_wait(x, 8, "recv of a client id"));
        uint64_t id;
        memcpy(&id, idb.p + 8 * k, 8);
        CHECK(id < NPEERS && peer[id] == NULL, "bad or duplicate client id %llu",
              (unsigned long long)id);
        peer[id] = p;
    }
    test_say("accepted %d peers", NPEERS);
    ht_buf_t s[NPEERS], r[NPEERS];
    for (int i = 0; i < NPEERS; i++) {
        TRY(ht_buf_new(e, PEERS_LEN, &s[i]));
        TRY(ht_buf_new(e, PEERS_LEN + 2 * HT_GUARD, &r[i]));
    }
    for (int round = 0; round < PEERS_ROUNDS; round++) {
        tpx_xfer_t *xs[NPEERS], *xr[NPEERS];
        for (int i = 0; i < NPEERS; i++) {
            ht_fill(s[i].p, PEERS_LEN, ht_seed(3, 100 + (unsigned)i, (unsigned)round), 0);
            ht_guard_fill(r[i].p, HT_GUARD, 1);
            ht_guard_fill(r[i].p + HT_GUARD + PEERS_LEN, HT_GUARD, 2);
            CHECK_OK(tpx_recv(peer[i], r[i].reg, HT_GUARD, PEERS_LEN, &xr[i]));
            CHECK_OK(tpx_send(peer[i], s[i].reg, 0, PEERS_LEN, &xs[i]));
        }
        for (int i = 0; i < NPEERS; i++) {
            char what[96];
            snprintf(what, sizeof(what), "round %d, client %d: send", round, i);
            TRY(ht_wait(xs[i], PEERS_LEN, what));
            snprintf(what, sizeof(what), "round %d, client %d: recv", round, i);
            TRY(ht_wait(xr[i], PEERS_LEN, what));
            TRY(ht_verify(r[i].p + HT_GUARD, PEERS_LEN, ht_seed(3, (unsigned)i, (unsigned)round), 0,
                          what));
            TRY(ht_guard_check(r[i].p, HT_GUARD, 1, what));
            TRY(ht_guard_check(r[i].p + HT_GUARD + PEERS_LEN, HT_GUARD, 2, what));
        }
    }
    for (int i = 0; i < NPEERS; i++)
        TRY(ht_barrier(L_peer[i], NULL));
    for (int i = 0; i < NPEERS; i++) {
        tpx_peer_close(peer[i]);
        ht_buf_free(&s[i]);
        ht_buf_free(&r[i]);
    }
    ht_buf_free(&idb);
    tpx_engine_destroy(e);
    return ht_res_check(res0, "after tpx_engine_destroy");
}

static int peers_cli(int id)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    uint64_t port;
    TRY(ht_get(L_peer[id], &port, HT_PIPE_MS));
    tpx_peer_t *peer;
    TRY(ht_connect(e, (int)port, &peer));
    ht_buf_t idb, s, r;
    TRY(ht_buf_new(e, 8, &idb));
    uint64_t v = (uint64_t)id;
    memcpy(idb.p, &v, 8);
    tpx_xfer_t *x;
    CHECK_OK(tpx_send(peer, idb.reg, 0, 8, &x));
    TRY(ht_wait(x, 8, "send of the client id"));
    TRY(ht_buf_new(e, PEERS_LEN, &s));
    TRY(ht_buf_new(e, PEERS_LEN + 2 * HT_GUARD, &r));
    for (int round = 0; round < PEERS_ROUNDS; round++) {
        tpx_xfer_t *xs, *xr;
        ht_fill(s.p, PEERS_LEN, ht_seed(3, (unsigned)id, (unsigned)round), 0);
        ht_guard_fill(r.p, HT_GUARD, 1);
        ht_guard_fill(r.p + HT_GUARD + PEERS_LEN, HT_GUARD, 2);
        CHECK_OK(tpx_send(peer, s.reg, 0, PEERS_LEN, &xs));
        CHECK_OK(tpx_recv(peer, r.reg, HT_GUARD, PEERS_LEN, &xr));
        char what[64];
        snprintf(what, sizeof(what), "round %d: send", round);
        TRY(ht_wait(xs, PEERS_LEN, what));
        snprintf(what, sizeof(what), "round %d: recv", round);
        TRY(ht_wait(xr, PEERS_LEN, what));
        TRY(ht_verify(r.p + HT_GUARD, PEERS_LEN, ht_seed(3, 100 + (unsigned)id, (unsigned)round), 0,
                      what));
        TRY(ht_guard_check(r.p, HT_GUARD, 1, what));
        TRY(ht_guard_check(r.p + HT_GUARD + PEERS_LEN, HT_GUARD, 2, what));
    }
    TRY(ht_barrier(L_peer[id], NULL));
    tpx_peer_close(peer);
    ht_buf_free(&idb);
    ht_buf_free(&s);
    ht_buf_free(&r);
    tpx_engine_destroy(e);
    return ht_res_check(res0, "after tpx_engine_destroy");
}

int scen_peers(int argc, char **argv)
{
    static const char *names[NPEERS] = {"client0", "client1", "client2"};
    for (int i = 0; i < NPEERS; i++)
        L_peer[i] = ht_link(HT_SRV, HT_C1 + i);
    ht_spawn(HT_SRV, "server", peers_srv, 0);
    for (int i = 0; i < NPEERS; i++)
        ht_spawn(HT_C1 + i, names[i], peers_cli, i);
    return ht_run();
}

/* ==== idlecpu ================================================================== */

#define IDLE_S         3.0
#define IDLE_MAX_CPU_S 0.3

/* CPU used by this process over IDLE_S seconds of doing nothing. */
static double idle_cpu(void)
{
    double c0 = ht_cpu_s();
    uint64_t t0 = test_now_ns();
    while (test_secs_since(t0) < IDLE_S)
        ht_sleep_ms(50);
    return ht_cpu_s() - c0;
}

static int idle_role(int is_srv)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e = ht_engine(is_srv ? TPX_PORT_EPHEMERAL : TPX_PORT_NONE, 0, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *peer;
    if (is_srv) {
        TRY(ht_put(L_main, (uint64_t)tpx_engine_port(e)));
        TRY(ht_accept(e, &peer));
    } else {
        uint64_t port;
        TRY(ht_get(L_main, &port, HT_PIPE_MS));
        TRY(ht_connect(e, (int)port, &peer));
    }
    /* Warm up: the connection has moved data both ways. */
    TRY(ht_exchange(e, peer, MiB, ht_seed(9, (unsigned)is_srv, 0), ht_seed(9, (unsigned)!is_srv, 0),
                    "warm-up"));
    TRY(ht_barrier(L_main, NULL));
    double cpu = idle_cpu();
    test_say("idle engine (progress thread, 1 connected peer, nothing posted): %.3f s CPU over "
             "%.1f s (limit %.1f s)",
             cpu, IDLE_S, IDLE_MAX_CPU_S);
    CHECK(cpu <= IDLE_MAX_CPU_S, "an idle engine used %.3f s of CPU in %.1f s (limit %.1f s)", cpu,
          IDLE_S, IDLE_MAX_CPU_S);
    TRY(ht_barrier(L_main, NULL));

    /* For information: the same with one receive posted and no data coming
     * (the server) and a peer that will send it later (the client). */
    ht_buf_t b;
    TRY(ht_buf_new(e, MiB, &b));
    tpx_xfer_t *x = NULL;
    if (is_srv)
        CHECK_OK(tpx_recv(peer, b.reg, 0, MiB, &x));
    TRY(ht_barrier(L_main, NULL));
    cpu = idle_cpu();
    test_say("(info) %s over %.1f s: %.3f s CPU", is_srv ? "one receive posted, waiting" : "idle",
             IDLE_S, cpu);
    TRY(ht_barrier(L_main, NULL));
    if (!is_srv) {
        ht_fill(b.p, MiB, ht_seed(9, 7, 7), 0);
        CHECK_OK(tpx_send(peer, b.reg, 0, MiB, &x));
    }
    TRY(ht_wait(x, MiB, is_srv ? "the waiting receive" : "the late send"));
    if (is_srv)
        TRY(ht_verify(b.p, MiB, ht_seed(9, 7, 7), 0, "the waiting receive"));
    TRY(ht_barrier(L_main, NULL));
    return ht_finish(e, peer, &b, res0);
}

int scen_idlecpu(int argc, char **argv)
{
    L_main = ht_link(HT_SRV, HT_C1);
    ht_spawn(HT_SRV, "server", idle_role, 1);
    ht_spawn(HT_C1, "client", idle_role, 0);
    return ht_run();
}

/* ==== idlefds =============================================================== */

/* An idle peer holds its bootstrap connection, and its two control comms
 * unless both sides send their control messages over the bootstrap
 * connection (MAXFDS in all: 1, or 1 + 2 x 2 sockets on the built-in
 * transport, 1 + 2 x 3 in its strict TCPX mode, where a comm also has its
 * devmem socket); its
 * data channels open when a transfer first needs them and stay open for the
 * next. Each side counts its descriptors (/proc/self/fd): the first peer
 * warms the transport up (its shared workers and wake-ups, made once per
 * process), the second is counted idle, then after one exchange and after
 * another. */
static int g_idle_max_fds;

static int idlefds_role(int is_srv)
{
    ht_res_t res0 = ht_res_now();
    tpx_engine_t *e =
        ht_engine(is_srv ? TPX_PORT_EPHEMERAL : TPX_PORT_NONE, g_channels, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    const char *me = is_srv ? "server" : "client";
    tpx_peer_t *p[2] = {NULL, NULL};
    int fds[4] = {0, 0, 0, 0};
    double ms[2] = {0, 0}; /* the second peer's exchanges (information) */
    for (int k = 0; k < 2; k++) {
        if (k == 1)
            fds[0] = ht_fd_count();
        if (is_srv) {
            TRY(ht_put(L_main, (uint64_t)tpx_engine_port(e)));
            TRY(ht_accept(e, &p[k]));
        } else {
            TRY(ht_dial(e, L_main, &p[k]));
        }
        TRY(ht_barrier(L_main, NULL)); /* both ends set up */
        if (k == 1) {
            fds[1] = ht_fd_count();
            /* before the other end's first post opens the channels */
            TRY(ht_barrier(L_main, NULL));
        }
        for (int n = 0; n < (k == 0 ? 1 : 2); n++) {
            uint64_t t0 = test_now_ns();
            TRY(ht_exchange(e, p[k], MiB, ht_seed(12, (unsigned)k, (unsigned)(n + 2 * is_srv)),
                            ht_seed(12, (unsigned)k, (unsigned)(n + 2 * !is_srv)), "idlefds"));
            TRY(ht_barrier(L_main, NULL));
            if (k == 1) {
                ms[n] = test_secs_since(t0) * 1e3;
                fds[2 + n] = ht_fd_count();
            }
        }
    }
    test_say("%s: an idle peer holds %d fds (at most %d), %d once its %d data channels opened "
             "with its first transfer, %d after the second",
             me, fds[1] - fds[0], g_idle_max_fds, fds[2] - fds[0], g_channels, fds[3] - fds[0]);
    test_say("%s: (info) 1 MiB each way: %.2f ms with the channels' opening, %.2f ms after", me,
             ms[0], ms[1]);
    if (fds[1] - fds[0] > g_idle_max_fds)
        ht_dump_fds(); /* now, with the channels open: what they are */
    CHECK(fds[1] - fds[0] <= g_idle_max_fds,
          "%s: an idle peer holds %d fds (at most its bootstrap connection and any control comms: %d)",
          me, fds[1] - fds[0], g_idle_max_fds);
    CHECK(fds[2] >= fds[1] + 2 * g_channels,
          "%s: %d fds after the first transfer, %d idle: its %d data channels did not open", me,
          fds[2], fds[1], g_channels);
    CHECK(fds[3] == fds[2], "%s: the second transfer changed the fds (%d -> %d)", me, fds[2],
          fds[3]);
    tpx_peer_close(p[1]);
    return ht_finish(e, p[0], NULL, res0);
}

int scen_idlefds(int argc, char **argv)
{
    g_channels = argc > 2 ? atoi(argv[2]) : 8;
    g_idle_max_fds = argc > 3 ? atoi(argv[3]) : 5;
    if (g_channels < 1 || g_idle_max_fds < 1) {
        test_say("usage: test_engine idlefds CHANNELS MAXFDS");
        return 2;
    }
    L_main = ht_link(HT_SRV, HT_C1);
    ht_spawn(HT_SRV, "server", idlefds_role, 1);
    ht_spawn(HT_C1, "client", idlefds_role, 0);
    return ht_run();
}

/* ==== window ================================================================ */

/* The window an engine runs with: params.window 0 takes TPX_WINDOW, whose
 * 0 means by plugin (32 on tpx's own transport, 16 in its strict TCPX
 * mode), and no window exceeds the requests the plugin accepts
 * (TPX_MAX_REQUESTS): args DEFAULT EXPLICIT32, what params.window 0 and 32
 * must give in this environment. */
static int g_win_default, g_win_32;

static int window_role(int arg)
{
    (void)arg;
    for (int k = 0; k < 2; k++) {
        int asked = k == 0 ? 0 : 32, want = k == 0 ? g_win_default : g_win_32;
        tpx_engine_t *e = ht_engine(TPX_PORT_NONE, 0, asked, 1, NULL);
        CHECK(e != NULL, "no engine (params.window %d)", asked);
        tpx_engine_info_t info = {.size = sizeof(info)};
        CHECK_OK(tpx_engine_info(e, &info));
        tpx_engine_destroy(e);
        CHECK(info.window == want, "params.window %d: the engine runs a window of %d, expected %d",
              asked, info.window, want);
    }
    return 0;
}

int scen_window(int argc, char **argv)
{
    if (argc < 4) {
        test_say("usage: test_engine window DEFAULT EXPLICIT32");
        return 2;
    }
    g_win_default = atoi(argv[2]);
    g_win_32 = atoi(argv[3]);
    ht_spawn(HT_SRV, "engine", window_role, 0);
    return ht_run();
}

/* ==== bw ==================================================================== */

#define BW_LEN (256 * MiB)
#define BW_N   10

static int bw_srv(int arg)
{
    tpx_engine_t *e = ht_engine(TPX_PORT_EPHEMERAL, g_channels, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    TRY(ht_put(L_main, (uint64_t)tpx_engine_port(e)));
    tpx_peer_t *peer;
    TRY(ht_accept(e, &peer));
    ht_buf_t r;
    TRY(ht_buf_new(e, BW_LEN + 2 * HT_GUARD, &r));
    memset(r.p, 0, r.len); /* fault the pages in outside the timing */
    ht_guard_fill(r.p, HT_GUARD, 1);
    ht_guard_fill(r.p + HT_GUARD + BW_LEN, HT_GUARD, 2);
    TRY(ht_barrier(L_main, NULL));
    uint64_t t0 = test_now_ns();
    for (unsigned i = 0; i < BW_N; i++) {
        tpx_xfer_t *x;
        char what[64];
        snprintf(what, sizeof(what), "recv #%u of %zu MiB", i, BW_LEN / MiB);
        CHECK_OK(tpx_recv(peer, r.reg, HT_GUARD, BW_LEN, &x));
        TRY(ht_wait(x, BW_LEN, what));
        /* Transfer i is the stream i words in: check both ends now. */
        TRY(ht_verify(r.p + HT_GUARD, 4096, ht_seed(10, 0, 0), i, what));
        uint8_t tmp[4096];
        ht_fill(tmp, sizeof(tmp), ht_seed(10, 0, 0), i + (BW_LEN - 4096) / 8);
        CHECK(memcmp(tmp, r.p + HT_GUARD + BW_LEN - 4096, 4096) == 0, "%s: the last 4 KiB differ",
              what);
    }
    double dt = test_secs_since(t0);
    TRY(ht_verify(r.p + HT_GUARD, BW_LEN, ht_seed(10, 0, 0), BW_N - 1, "the last receive"));
    TRY(ht_guard_check(r.p, HT_GUARD, 1, "bw"));
    TRY(ht_guard_check(r.p + HT_GUARD + BW_LEN, HT_GUARD, 2, "bw"));
    test_say("bw: receiver: %d x %zu MiB in %.3f s = %.2f GB/s (channels %s%d)", BW_N, BW_LEN / MiB,
             dt, (double)BW_N * BW_LEN / dt / 1e9, g_channels ? "" : "env/default, ", g_channels);
    printf("bw_GBps %.3f\n", (double)BW_N * BW_LEN / dt / 1e9);
    TRY(ht_barrier(L_main, NULL));
    tpx_peer_close(peer);
    ht_buf_free(&r);
    tpx_engine_destroy(e);
    return 0;
}

static int bw_cli(int arg)
{
    tpx_engine_t *e = ht_engine(TPX_PORT_NONE, g_channels, 0, 1, NULL);
    CHECK(e != NULL, "no engine");
    tpx_peer_t *peer;
    TRY(ht_dial(e, L_main, &peer));
    ht_buf_t s;
    TRY(ht_buf_new(e, BW_LEN + 8 * BW_N, &s));
    ht_fill(s.p, s.len, ht_seed(10, 0, 0), 0);
    TRY(ht_barrier(L_main, NULL));
    /* All sends posted at once (the receiver reposts one at a time). */
    tpx_xfer_t *x[BW_N];
    uint64_t t0 = test_now_ns();
    for (unsigned i = 0; i < BW_N; i++)
        CHECK_OK(tpx_send(peer, s.reg, 8 * (size_t)i, BW_LEN, &x[i]));
    for (unsigned i = 0; i < BW_N; i++) {
        char what[64];
        snprintf(what, sizeof(what), "send #%u of %zu MiB", i, BW_LEN / MiB);
        TRY(ht_wait(x[i], BW_LEN, what));
    }
    double dt = test_secs_since(t0);
    test_say("bw: sender: %d x %zu MiB in %.3f s = %.2f GB/s", BW_N, BW_LEN / MiB, dt,
             (double)BW_N * BW_LEN / dt / 1e9);
    TRY(ht_barrier(L_main, NULL));
    tpx_peer_close(peer);
    ht_buf_free(&s);
    tpx_engine_destroy(e);
    return 0;
}

int scen_bw(int argc, char **argv)
{
    g_channels = argc > 2 ? atoi(argv[2]) : 0;
    L_main = ht_link(HT_SRV, HT_C1);
    ht_spawn(HT_SRV, "receiver", bw_srv, 0);
    ht_spawn(HT_C1, "sender", bw_cli, 0);
    return ht_run();
}

/* ==== main ====================================================================== */

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    int clean; /* no WARN/ERROR log line is expected */
    const char *help;
} scenarios[] = {
    {"sizes", scen_sizes, 1, "CHANNELS: 1 B .. 1 GiB, window 16"},
    {"many", scen_many, 1, "200 transfers each way outstanding at once"},
    {"peers", scen_peers, 1, "three clients on one server, 16 MiB both ways"},
    {"kill", scen_kill, 0, "a client SIGKILLed mid-transfer; another unaffected"},
    {"auth", scen_auth, 0, "auth token: right, wrong, none"},
    {"garbage", scen_garbage, 0, "random bytes at the bootstrap port; then a good client"},
    {"truncated", scen_truncated, 0, "receive smaller than the message"},
    {"postfail", scen_postfail, 0, "a peer failed in the caller's own call: its buffers untouched"},
    {"badargs", scen_badargs, 0, "bad arguments are errors, not crashes"},
    {"idlecpu", scen_idlecpu, 1, "an idle engine costs no CPU"},
    {"idlefds", scen_idlefds, 1, "CHANNELS MAXFDS: an idle peer holds no data channel"},
    {"window", scen_window, 0, "DEFAULT EXPLICIT32: the window by plugin and request limit"},
    {"bw", scen_bw, 1, "[CHANNELS]: 10 x 256 MiB, GB/s"},
};

int main(int argc, char **argv)
{
    for (size_t i = 0; argc >= 2 && i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        if (strcmp(argv[1], scenarios[i].name) != 0)
            continue;
        ht_init(scenarios[i].name, scenarios[i].clean);
        return scenarios[i].fn(argc, argv);
    }
    fprintf(stderr, "usage: test_engine SCENARIO [ARGS]\n");
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        fprintf(stderr, "  %-10s %s\n", scenarios[i].name, scenarios[i].help);
    return 2;
}
