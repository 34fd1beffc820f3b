/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.c - engine life cycle and the progress loop.
 *
 * Progress is one function (tpx__engine_progress) that never blocks: one
 * pass of every ready peer's comms (peer_pass.c tpx__peer_pass: plugin window,
 * completion and schedule, per comm), then the sweep of deadlines and
 * peer liveness every 10 ms, then the comms of failed peers close (the
 * phases: engine.h). It is called by tpx_progress() (api_engine.c) in
 * caller-driven mode, by tpx_xfer_wait()/poll() when there is no progress thread, or by the
 * progress thread, which sleeps on a condition variable while nothing is
 * in flight so an idle engine costs no CPU.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/config.h"
#include "common/trace.h"
#include "engine.h"
#include "common/sigpipe.h"
#include "mem.h"
#include "pack.h"
#include "peer.h"
#include "faults.h"
#include "rma.h"
#include "window.h"
#include "xfer.h"
#include "remote.h"
#include "gpu/cuda.h"

void tpx__engine_params_init(tpx_engine_params_t *p)
{
    if (p == NULL)
        return;
    memset(p, 0, sizeof(*p));
    p->size = sizeof(*p);
    p->gpu = -1;
    p->port = TPX_PORT_DEFAULT;
    p->progress_thread = 1;
    p->progress_cpu = -1;
}

/* TPX_BIND_ADDR: an IP address as it is, or an interface name made into its
 * first IPv4 (else IPv6) address; "" stays "" (all addresses). */
static tpx_status_t bind_addr_from_config(char *out, size_t cap)
{
    const char *v = tpx__config_str(TPX_CFG_BIND_ADDR);
    unsigned char tmp[sizeof(struct in6_addr)];
    out[0] = '\0';
    if (v[0] == '\0')
        return TPX_OK;
    if (inet_pton(AF_INET, v, tmp) == 1 || inet_pton(AF_INET6, v, tmp) == 1) {
        snprintf(out, cap, "%s", v);
        return TPX_OK;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        TPX_ERROR("TPX_BIND_ADDR=%s: getifaddrs: %s", v, strerror(errno));
        return TPX_ERR_IO;
    }
    for (int fam = 0; fam < 2 && out[0] == '\0'; fam++)
        for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr == NULL || strcmp(i->ifa_name, v) != 0 ||
                i->ifa_addr->sa_family != (fam == 0 ? AF_INET : AF_INET6))
                continue;
            const void *a = fam == 0 ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                                     : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
            if (inet_ntop(fam == 0 ? AF_INET : AF_INET6, a, out, (socklen_t)cap) != NULL)
                break;
            out[0] = '\0';
        }
    freeifaddrs(ifs);
    if (out[0] == '\0') {
        TPX_ERROR("TPX_BIND_ADDR=%s is neither an IP address nor an interface with one", v);
        return TPX_ERR_CONFIG;
    }
    return TPX_OK;
}

/* Every 10 ms: abandoned connects (when no bootstrap thread drives them),
 * then each ready peer's deadlines and liveness. */
static void engine_sweep(tpx_engine_t *e)
{
    uint64_t now = tpx__now_ns();
    if (now - e->sweep_ns < 10 * 1000000ull)
        return;
    e->sweep_ns = now;
    tpx__peer_reap_sweep(e);
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next) {
        if (p->state == PEER_READY)
            tpx__peer_sweep(p, now);
        tpx__peer_rejoin_drive(p, now); /* lost channels connected again (peer.c) */
    }
}

/* One pass: every ready peer's comms (peer_pass.c tpx__peer_pass: plugin
 * window, completion, schedule; the notification of a completed transfer
 * happens as it completes, tpx__xfer_complete), then what may close comms,
 * which must not happen inside a comm's pass: the sweep and the comms of
 * peers that failed. */
/* A pass calls the plugin many times (isend, irecv, test, irecvConsumed):
 * on an application's thread it runs inside one SIGPIPE guard
 * (common/sigpipe.h), so a plugin that writes without MSG_NOSIGNAL cannot
 * kill the process, for three system calls per pass and none per plugin
 * call; on the progress thread (SIGPIPE blocked for good) the guard costs
 * a thread-local counter. */
int tpx__engine_progress(tpx_engine_t *e)
{
    tpx_sigpipe_guard_t g;
    tpx__sigpipe_enter(&g, e->net->sigpipe);
    uint64_t before = e->ncompleted;
    /* An idle engine with no peer makes no plugin call: no context to enter. */
    int gtok = e->peers != NULL || tpx__peer_reaping(e) ? tpx__window_gpu_enter_pass(e) : 0;
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next) {
        tpx__peer_frames_pass(p); /* its control stream moved there (peer_ctrl.c) */
        tpx__peer_chan_drive(p);
        tpx__peer_pass(p);
        if (p->chan_state != CHAN_OPEN) /* a request just received may need them */
            tpx__peer_chan_drive(p);
    }
    /* deadlines and liveness (every 10 ms), then the comms of failed peers */
    engine_sweep(e);
    tpx__peer_close_failed(e);
    tpx__window_gpu_leave(gtok);
    tpx__sigpipe_leave(&g);
    return (int)(e->ncompleted - before);
}

void tpx__engine_post_pass(tpx_engine_t *e, tpx_peer_t *p)
{
    int gtok = tpx__window_gpu_enter_pass(e);
    tpx_sigpipe_guard_t g;
    tpx__sigpipe_enter(&g, e->net->sigpipe);
    tpx__peer_chan_drive(p);
    tpx__peer_pass(p);
    if (TPX_UNLIKELY(tpx__faults.recv_pass > 0) && tpx__fault_pass_take()) {
        if (p->state == PEER_READY)
            tpx__peer_fail(p, TPX_ERR_IO, "injected failure (TPX_FAULT_RECV_PASS)");
    }
    /* A peer this pass failed has ended its transfers, whose callers may
     * free their memory as soon as the lock is free: its comms close before
     * (the I/O workers write vectored chunks straight into the blocks). */
    tpx__peer_close_failed(e);
    tpx__window_gpu_leave(gtok);
    tpx__sigpipe_leave(&g);
    tpx__progress_kick(e);
}

void tpx__engine_cond_wait(tpx_engine_t *e, uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the condition variable's clock (engine_create) */
    uint64_t t = (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec += (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    pthread_cond_timedwait(&e->cond, &e->lock, &ts);
}

int tpx__engine_completions(tpx_engine_t *e)
{
    pthread_mutex_lock(&e->lock);
    if (!e->cfg.progress_thread)
        (void)tpx__engine_progress(e);
    /* Every completion since the last call, wherever it happened (posts
     * and polls drive progress too). */
    int n = (int)TPX_MIN(e->ncompleted - e->nreported, (uint64_t)INT32_MAX);
    e->nreported += (uint64_t)n;
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* Have every comm of every ready peer wake us on its completions (the
 * built-in transport: tpx__net_set_wake), and arm the wake-up. */
static void wake_arm(tpx_engine_t *e)
{
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next) {
        if (p->state != PEER_READY)
            continue;
        tpx_comm_t *cs[2 + 2 * TPX_MAX_CHANNELS];
        int nc = tpx__peer_comms(p, cs);
        for (int i = 0; i < nc; i++)
            if (!cs[i]->wake_set)
                cs[i]->wake_set = tpx__net_set_wake(e->net, cs[i]->comm, &e->net_wake);
    }
    atomic_store(&e->net_wake.armed, 1); /* seq_cst: before the caller looks again */
    atomic_thread_fence(memory_order_seq_cst);
}

/* Data requests in flight on every ready peer's channels. */
static int data_in_flight(tpx_engine_t *e)
{
    uint64_t n = 0;
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next) {
        if (p->state != PEER_READY)
            continue;
        for (int k = 0; k < p->nchan; k++) {
            if (p->send[k] != NULL)
                n += p->send[k]->win.posted - p->send[k]->win.done;
            if (p->recv[k] != NULL)
                n += p->recv[k]->win.posted - p->recv[k]->win.done;
        }
    }
    return (int)TPX_MIN(n, (uint64_t)INT32_MAX);
}

/* Many data requests in flight on a plugin that moves them alone and wakes
 * us when one completes (tpx's own transport outside strict TCPX mode):
 * completions are tens of microseconds apart, so sleep on the wake eventfd
 * until the next (a post or a kick wakes us too; at most 1 ms, for the
 * deadline sweep) instead of polling: a polling progress thread took 1.5 of
 * 16 cores from the I/O workers that move the bytes. Lock held on entry
 * and exit. */
#define BULK_SLOTS 8 /* data requests in flight from which an engine waits */
static void progress_wait_bulk(tpx_engine_t *e)
{
    wake_arm(e);
    uint64_t before = e->nmoves, seen = e->ncompleted;
    (void)tpx__engine_progress(e); /* a completion just before arming woke no one */
    if (e->nmoves != before || e->ncompleted != seen) {
        atomic_store(&e->net_wake.armed, 0);
        e->last_move_ns = tpx__now_ns();
        return;
    }
    struct pollfd pf = {.fd = e->wake_efd, .events = POLLIN};
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000L};
    e->sleeping = 1;
    pthread_mutex_unlock(&e->lock);
    int r = ppoll(&pf, 1, &ts, NULL);
    pthread_mutex_lock(&e->lock);
    e->sleeping = 0;
    atomic_store(&e->net_wake.armed, 0);
    if (r > 0) {
        uint64_t v;
        ssize_t k = read(e->wake_efd, &v, sizeof(v));
        (void)k;
    }
}

/* Sleep up to nap_ns in poll() on the wake eventfd and every ready peer's
 * bootstrap connection (doorbells). Lock held on entry and exit. */
static void progress_sleep(tpx_engine_t *e, long nap_ns)
{
    if (e->cfg.net_wakes) {
        /* The built-in transport wakes us when one of our comms completes
         * a request (the next request, answer or notification): arm it,
         * then look once more, since a completion just before arming would
         * wake no one. */
        wake_arm(e);
        uint64_t before = e->nmoves, seen = e->ncompleted;
        (void)tpx__engine_progress(e);
        if (e->nmoves != before || e->ncompleted != seen || e->inflight > 0) {
            atomic_store(&e->net_wake.armed, 0);
            e->last_move_ns = tpx__now_ns();
            return;
        }
    }
    /* Every ready peer's doorbell: the array grows with the peers (an
     * allocation when their number passes its size, not per nap); if it
     * cannot grow, the peers beyond it are heard at the next nap's end. */
    int want = 1;
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next)
        want += p->state == PEER_READY && p->bs != NULL && p->bs_eof_ns == 0;
    if (want > e->nap_cap) {
        int cap = TPX_MAX(want, TPX_MAX(2 * e->nap_cap, 64));
        struct pollfd *grown = realloc(e->nap_fds, (size_t)cap * sizeof(*grown));
        if (grown != NULL) {
            e->nap_fds = grown;
            e->nap_cap = cap;
        }
    }
    struct pollfd one, *pf = e->nap_cap > 0 ? e->nap_fds : &one;
    int n = 0, max = e->nap_cap > 0 ? e->nap_cap : 1;
    pf[n++] = (struct pollfd){.fd = e->wake_efd, .events = POLLIN};
    for (tpx_peer_t *p = e->peers; p != NULL && n < max; p = p->next)
        if (p->state == PEER_READY && p->bs != NULL && p->bs_eof_ns == 0 &&
            (!p->ctrl_bs_rx || tpx__peer_ctrl_may_read(p))) /* (its control stream there is
                                                              held back: flow control) */
            pf[n++] = (struct pollfd){.fd = tpx__bs_fd(p->bs), .events = POLLIN};
    e->sleeping = 1;
    pthread_mutex_unlock(&e->lock);
    struct timespec ts = {.tv_sec = nap_ns / 1000000000L, .tv_nsec = nap_ns % 1000000000L};
    int r = ppoll(pf, (nfds_t)n, &ts, NULL);
    TPX_TL(TPX_TR_NAP_END, r);
    pthread_mutex_lock(&e->lock);
    e->sleeping = 0;
    atomic_store(&e->net_wake.armed, 0);
    if (r > 0 && (pf[0].revents & POLLIN)) {
        uint64_t v;
        ssize_t k = read(e->wake_efd, &v, sizeof(v));
        (void)k;
    }
    /* A doorbell: the request is right behind it (it may not even have
     * left the requester's plugin yet): poll hot from now on. */
    if (r > 0 && tpx__peer_bells(e) > 0)
        e->last_move_ns = tpx__now_ns();
}

/* A tpx_xfer_wait caller runs the loop while it watches its transfer:
 * stand aside, so that one thread spins, not two (a 2-core host has no
 * core for a third: a one-sided READ in one process had the owner's and
 * the requester's progress threads and the waiting caller spinning). Sleep
 * on the wake eventfd, without `sleeping` (a post must not wake us: the
 * driver does that work), until the last driver leaves (it writes the
 * eventfd or arms the transport's wake-up) or 1 ms passes. Lock held on
 * entry and exit. */
static void progress_stand_aside(tpx_engine_t *e, uint64_t ns)
{
    struct pollfd pf = {.fd = e->wake_efd, .events = POLLIN};
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)TPX_MIN(ns, 1000000ull)};
    pthread_mutex_unlock(&e->lock);
    int r = ppoll(&pf, 1, &ts, NULL);
    pthread_mutex_lock(&e->lock);
    if (r > 0) {
        uint64_t v;
        ssize_t k = read(e->wake_efd, &v, sizeof(v));
        (void)k;
    }
}

void tpx__engine_drive_begin(tpx_engine_t *e)
{
    atomic_fetch_add(&e->drivers, 1);
    /* The driver sees its completions itself: none should wake us. */
    atomic_store(&e->net_wake.armed, 0);
}

void tpx__engine_drive_end(tpx_engine_t *e, int more)
{
    if (atomic_fetch_sub(&e->drivers, 1) != 1)
        return;
    if (more || !e->cfg.net_wakes || !e->progress_started) {
        /* Wherever it waits: standing aside, or in a nap it took before. */
        pthread_cond_broadcast(&e->cond);
        uint64_t one = 1;
        ssize_t n = write(e->wake_efd, &one, sizeof(one));
        (void)n;
        return;
    }
    /* Done: no system call on the way out (a wake-up here cost the 2-core
     * host 11 us per small READ: the woken thread took the caller's core).
     * The next completion of a transport thread wakes the progress thread;
     * it also wakes by itself within 1 ms. */
    wake_arm(e);
}

/* How long one poll holds the loop. A loop of tpx_xfer_poll calls comes
 * back within microseconds (NIXL's checkXfer loop); when it stops, the
 * progress thread takes over this long after its last poll. */
#define TPX_POLL_LEASE_NS (100 * 1000ull)

int tpx__engine_poll_drive(tpx_engine_t *e)
{
    if (!e->progress_started || e->cfg.wait_spin_ns == 0 || pthread_mutex_trylock(&e->lock) != 0)
        return 0;
    if (e->cfg.bulk_waits && data_in_flight(e) >= BULK_SLOTS) {
        /* a stream: its cores go to the transport's threads (progress_wait_bulk) */
        pthread_mutex_unlock(&e->lock);
        return 1;
    }
    uint64_t now = tpx__now_ns();
    if (atomic_load_explicit(&e->poll_lease_ns, memory_order_relaxed) < now)
        atomic_store(&e->net_wake.armed, 0); /* the poller sees its completions itself */
    atomic_store_explicit(&e->poll_lease_ns, now + TPX_POLL_LEASE_NS, memory_order_relaxed);
    uint64_t before = e->nmoves, seen = e->ncompleted;
    (void)tpx__engine_progress(e);
    if (e->nmoves != before || e->ncompleted != seen)
        e->last_move_ns = tpx__now_ns();
    pthread_mutex_unlock(&e->lock);
    return 0;
}

/* Between passes the progress thread gives the lock up (yielding the core
 * if asked); API callers waiting for it go first (tpx__engine_lock), for
 * a bounded number of yields. Lock held on entry and exit. */
static void progress_pause(tpx_engine_t *e, int yield)
{
    pthread_mutex_unlock(&e->lock);
    if (yield)
        sched_yield();
    for (int i = 0; i < 64 && atomic_load_explicit(&e->api_waiting, memory_order_relaxed) > 0; i++)
        sched_yield();
    pthread_mutex_lock(&e->lock);
}

static void *progress_main(void *arg)
{
    tpx_engine_t *e = arg;
    tpx__sigpipe_block_thread(); /* it calls the plugin: common/sigpipe.h */
    if (e->progress_cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(e->progress_cpu, &set);
        int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
        if (rc != 0)
            TPX_WARN("cannot pin the progress thread to CPU %d: %s", e->progress_cpu,
                     strerror(rc));
    }
    pthread_setname_np(pthread_self(), "tpx-progress");
    /* Only tpx runs here: the engine's GPU context is switched to and left
     * current, not pushed and popped on every pass. */
    tpx__cuda_thread_own();
    /* Naps as long as asked, not 50 us more (the default timer slack). */
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    pthread_mutex_lock(&e->lock);
    while (!atomic_load(&e->stop)) {
        if (atomic_load_explicit(&e->drivers, memory_order_relaxed) > 0) {
            progress_stand_aside(e, 1000000ull);
            continue;
        }
        uint64_t lease = atomic_load_explicit(&e->poll_lease_ns, memory_order_relaxed);
        uint64_t t = tpx__now_ns();
        if (lease > t) {
            /* a poll loop drives (tpx__engine_poll_drive); after its last
             * poll the loop is ours again, hot */
            progress_stand_aside(e, lease - t);
            e->last_move_ns = TPX_MAX(e->last_move_ns, t);
            continue;
        }
        if (e->inflight == 0 && tpx__now_ns() - e->last_move_ns < e->cfg.spin_ns) {
            /* Just active (TPX_SPIN_US): the next request, answer or
             * notification is likely microseconds away; poll the plugin
             * without sleeping, yielding the core between passes. */
            uint64_t before = e->nmoves, seen = e->ncompleted;
            (void)tpx__engine_progress(e);
            if (e->nmoves != before || e->ncompleted != seen) {
                e->last_move_ns = tpx__now_ns();
                continue;
            }
            progress_pause(e, 1);
            continue;
        }
        if (e->inflight == 0 && (e->nexports > 0 || e->remotes != NULL)) {
            /* Idle, but peers may send one-sided requests at any time and
             * a plugin cannot tell us: poll every 200 us for 100 ms after
             * the last activity; later sleep in poll() on the peers'
             * bootstrap connections, where a requester rings a doorbell
             * when it has been quiet to us for 50 ms (tpx__peer_ring).
             * The built-in transport wakes us itself: no polling. */
            uint64_t before = e->nmoves, seen = e->ncompleted;
            int hot = !e->cfg.net_wakes && tpx__now_ns() - e->last_move_ns < 100000000ull;
            progress_sleep(e, hot ? 200 * 1000L : 100 * 1000000L);
            (void)tpx__engine_progress(e);
            if (e->nmoves != before || e->ncompleted != seen)
                e->last_move_ns = tpx__now_ns();
            continue;
        }
        if (e->inflight == 0) {
            /* Idle: sleep until work is posted; wake every 100 ms to take
             * in control messages and check peers. */
            uint64_t before = e->nmoves, seen = e->ncompleted;
            tpx__engine_cond_wait(e, 100 * 1000000ull);
            (void)tpx__engine_progress(e);
            if (e->nmoves != before || e->ncompleted != seen)
                e->last_move_ns = tpx__now_ns();
            continue;
        }
        uint64_t before = e->nmoves;
        int n = tpx__engine_progress(e);
        uint64_t now = tpx__now_ns();
        if (n > 0 || e->nmoves != before)
            e->last_move_ns = now;
        if (now - e->last_move_ns > 2 * 1000000ull) {
            /* Nothing has moved for 2 ms (a receive waiting for a sender
             * that is not there yet): poll every 200 us instead of
             * spinning; a new post wakes us at once. */
            tpx__engine_cond_wait(e, 200 * 1000ull);
            continue;
        }
        if (n == 0 && e->nmoves == before && e->cfg.bulk_waits && data_in_flight(e) >= BULK_SLOTS &&
            tpx__pack_idle(e)) /* a GPU copy's end wakes no one */
            progress_wait_bulk(e);
        else
            progress_pause(e, n == 0); /* share the core with the plugin's threads; no sleep */
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- the settings (e->cfg): resolved once, in two steps ----------------------------- */

/* The settings the params and the environment give (e->cfg), and the
 * params' name, checked before the engine exists: what is refused is
 * logged and returned. */
static tpx_status_t cfg_settings(tpx_engine_cfg_t *c, const tpx_engine_params_t *params)
{
    static const tpx_engine_cfg_t zero;
    *c = zero;
    {
        static const char *const modes[] = {"kernel", "d2d", "host", "none"};
        const char *m = tpx__config_str(TPX_CFG_UNPACK);
        c->unpack_mode = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(m, modes[i]) == 0)
                c->unpack_mode = i;
        if (c->unpack_mode < 0) {
            TPX_ERROR("TPX_UNPACK=%s is not valid: expected kernel, d2d, host or none", m);
            return TPX_ERR_CONFIG;
        }
    }
    c->nchan = params->channels ? params->channels : (int)tpx__config_int(TPX_CFG_CHANNELS);
    c->chunk = (uint32_t)(params->chunk_bytes ? params->chunk_bytes
                                              : (size_t)tpx__config_int(TPX_CFG_CHUNK_BYTES));
    if (c->chunk != 0 && c->chunk < 4096) {
        TPX_ERROR("TPX_CHUNK_BYTES=%u: 0 (the plugin's default) or 4 KiB..4 MiB", c->chunk);
        return TPX_ERR_CONFIG;
    }
    c->window = params->window ? params->window : (int)tpx__config_int(TPX_CFG_WINDOW);
    c->timeout_ms = params->timeout_ms ? params->timeout_ms
                                       : (int)tpx__config_int(TPX_CFG_TIMEOUT_MS);
    c->close_grace_ms = (int)tpx__config_int(TPX_CFG_CLOSE_GRACE_MS);
    c->chan_stall_ms = (int)tpx__config_int(TPX_CFG_CHANNEL_STALL_MS);
    c->failover = (int)tpx__config_int(TPX_CFG_CHANNEL_FAILOVER);
    c->ctrl_bootstrap = (int)tpx__config_int(TPX_CFG_CTRL_BOOTSTRAP);
    c->wait_spin_ns = (uint64_t)tpx__config_int(TPX_CFG_WAIT_SPIN_US) * 1000ull;
    c->chan_socks = (int)tpx__config_int(TPX_CFG_CHANNEL_SOCKS);
    c->connect_timeout_ms = (int)tpx__config_int(TPX_CFG_CONNECT_TIMEOUT_MS);
    c->progress_thread = params->progress_thread != 0;
    c->progress_numa = params->progress_cpu == TPX_CPU_NUMA_LOCAL;
    {
        /* An over-long token is refused (TPX_AUTH_TOKEN and its file are, by
         * tpx__config_load()), never cut: both ends must hold the same. */
        const char *tok =
            params->auth_token ? params->auth_token : tpx__config_str(TPX_CFG_AUTH_TOKEN);
        size_t tl = strlen(tok);
        if (tl >= sizeof(c->auth_token)) {
            TPX_ERROR("tpx_engine_create: the authentication token (params.auth_token) has %zu "
                      "bytes: at most %zu", tl, sizeof(c->auth_token) - 1);
            return TPX_ERR_CONFIG;
        }
        memcpy(c->auth_token, tok, tl + 1);
    }
    if (params->name != NULL && (params->name[0] == '\0' || strlen(params->name) >= 64)) {
        TPX_ERROR("tpx_engine_create: the engine name must have 1..63 bytes");
        return TPX_ERR_INVALID_ARG;
    }
    if (params->bind_addr != NULL) {
        snprintf(c->bind_addr, sizeof(c->bind_addr), "%s", params->bind_addr);
    } else {
        tpx_status_t st = bind_addr_from_config(c->bind_addr, sizeof(c->bind_addr));
        if (st != TPX_OK)
            return st;
    }
    c->notif_limit = params->notif_queue > 0 ? (uint32_t)params->notif_queue
                                             : (uint32_t)tpx__config_int(TPX_CFG_NOTIF_QUEUE);
    c->rma_pack_bytes = (uint32_t)tpx__config_int(TPX_CFG_RMA_PACK_BYTES);
    c->rma_pack_chunk = (uint32_t)tpx__config_int(TPX_CFG_RMA_PACK_CHUNK);
    c->pack_async = tpx__config_int(TPX_CFG_RMA_PACK_ASYNC) != 0;
    c->pack_streams = (int)tpx__config_int(TPX_CFG_RMA_PACK_STREAMS);
    c->rma_iov = (int)tpx__config_int(TPX_CFG_RMA_IOV);
    c->rma_inline_bytes = (uint32_t)tpx__config_int(TPX_CFG_RMA_INLINE_BYTES);
    c->spin_ns = (uint64_t)tpx__config_int(TPX_CFG_SPIN_US) * 1000ull;
    return TPX_OK;
}

/* Then what the plugin can do, once it is open and the NICs chosen
 * (e->net, e->props): the settings left to it (0), its limits on the
 * others, its capabilities. Create's last word on e->cfg. */
static tpx_status_t cfg_plugin(tpx_engine_t *e)
{
    tpx_engine_cfg_t *c = &e->cfg;
    if (c->chunk == 0) /* TPX_CHUNK_BYTES=0: by plugin */
        c->chunk = tpx__net_has_vec(e->net) ? TPX_CHUNK_OWN : TPX_CHUNK_OTHER;
    int max_reqs = tpx__net_max_requests(e->net);
    if (c->window == 0) { /* TPX_WINDOW=0: by plugin, within what it accepts */
        c->window = tpx__net_has_vec(e->net) ? TPX_WINDOW_OWN : TPX_WINDOW_OTHER;
        c->window = max_reqs > 0 ? TPX_MIN(c->window, max_reqs) : c->window;
    } else if (max_reqs > 0 && c->window > max_reqs) {
        TPX_WARN("plugin %s accepts %d requests per comm: window %d lowered to %d",
                 e->net->name, max_reqs, c->window, max_reqs);
        c->window = max_reqs;
    }
    c->gpu_passes = !tpx__net_keeps_gpu(e->net) || e->net->is_tcpx ||
                    e->props.dev_type == TPX_NCCL_NET_DEVICE_UNPACK;
    c->net_wakes = tpx__net_set_wake(e->net, NULL, NULL);
    c->bulk_waits = c->net_wakes && tpx__net_has_vec(e->net) && tpx__config_int(TPX_CFG_BULK_WAIT);
    if (e->props.dev_type == TPX_NCCL_NET_DEVICE_UNPACK && c->window > TPX_NCCL_UNPACK_QUEUE_DEPTH) {
        /* one fragment-queue row per request in flight */
        c->window = TPX_NCCL_UNPACK_QUEUE_DEPTH;
    }
    if (e->props.max_recvs < 1) {
        TPX_ERROR("plugin %s reports maxRecvs %d", e->net->name, e->props.max_recvs);
        return TPX_ERR_PLUGIN;
    }
    return TPX_OK;
}

tpx_status_t tpx__engine_create(const tpx_engine_params_t *params, tpx_engine_t **out)
{
    /* The caller's struct may be older (smaller) than ours: copy what it
     * has over our defaults, never reading past its size. */
    tpx_engine_params_t def;
    tpx__engine_params_init(&def);
    if (params != NULL) {
        if (params->size < sizeof(params->size)) {
            TPX_ERROR("tpx_engine_create: params->size is 0 (call tpx_engine_params_init())");
            return TPX_ERR_INVALID_ARG;
        }
        size_t n = params->size < sizeof(def) ? params->size : sizeof(def);
        memcpy((char *)&def + sizeof(def.size), (const char *)params + sizeof(def.size),
               n - sizeof(def.size));
    }
    params = &def;
    if (out == NULL) {
        TPX_ERROR("tpx_engine_create: NULL output pointer");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_status_t st = tpx__config_load();
    if (st != TPX_OK)
        return st;
    tpx__peer_nofile_raise(); /* before anything sizes itself by it (the peer cap) */
    if (params->channels < 0 || params->channels > TPX_MAX_CHANNELS ||
        params->chunk_bytes > 4u * 1024 * 1024 || (params->chunk_bytes && params->chunk_bytes < 4096) ||
        params->window < 0 || params->window > TPX_WINDOW_MAX || params->timeout_ms < 0 ||
        params->port < TPX_PORT_EPHEMERAL || params->port > 65535) {
        TPX_ERROR("tpx_engine_create: parameter out of range (channels 0..%d, chunk_bytes "
                  "4 KiB..4 MiB, window 0..%d, port -2..65535)", TPX_MAX_CHANNELS,
                  TPX_WINDOW_MAX);
        return TPX_ERR_INVALID_ARG;
    }
    tpx__rma_kinds();
    tpx__faults_load();
    tpx_engine_cfg_t cfg;
    if ((st = cfg_settings(&cfg, params)) != TPX_OK)
        return st;
    tpx_engine_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return TPX_ERR_NO_MEMORY;
    e->cfg = cfg; /* never written again */
    pthread_mutex_init(&e->lock, NULL);
    {
        /* Deadlines and naps on the monotonic clock: a step of the wall
         * clock must not stretch or cut them. */
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&e->cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    e->efd = e->wake_efd = e->bs_fd = -1;
    e->bs_port = -1;
    /* The engine's GPU (tpx.h "The engine's GPU"): the application's, else
     * the context current here; the first GPU memory registered before any
     * peer may still rebind the latter (tpx__topo_gpu_bind). */
    e->gpu = params->gpu;
    e->gpu_from = TPX_GPU_FROM_PARAMS;
    e->gpu_fixed = params->gpu >= 0;
    if (params->gpu < 0) {
        e->gpu = tpx__cuda_app_current_device();
        e->gpu_from = e->gpu >= 0 ? TPX_GPU_FROM_CONTEXT : TPX_GPU_FROM_NONE;
    }
    e->progress_cpu = params->progress_cpu;
    char name[64];
    if (params->name != NULL) {
        snprintf(name, sizeof(name), "%s", params->name);
    } else {
        char host[64] = "host";
        (void)gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(name, sizeof(name), "%.40s:%ld:%d", host, (long)getpid(), params->gpu);
    }
    TPX_CHECK_GOTO(tpx__peer_listener_init(e), st, err_free);
    TPX_CHECK_GOTO(tpx__pack_engine_init(e), st, err_free);
    TPX_CHECK_GOTO(tpx__rma_engine_init(e), st, err_free);
    TPX_CHECK_GOTO(tpx__window_engine_init(e), st, err_free);
    TPX_CHECK_GOTO(tpx__ident_engine_init(e, name), st, err_free);
    TPX_CHECK_GOTO(tpx__net_open(params->plugin, tpx__ident_engine_id(e), &e->net), st, err_free);
    TPX_CHECK_GOTO(tpx__topo_devs(e), st, err_free);
    TPX_CHECK_GOTO(tpx__net_props(e->net, e->devs[0], &e->props), st, err_free);
    TPX_CHECK_GOTO(cfg_plugin(e), st, err_free);
    e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->wake_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->net_wake.fd = e->wake_efd; /* before any comm can see it (tpx__net_set_wake) */
    if (e->efd < 0 || e->wake_efd < 0) {
        st = tpx__status_from_errno(errno);
        TPX_ERROR("eventfd: %s", strerror(errno));
        goto err_free;
    }
    if (params->port != TPX_PORT_NONE) {
        int port = params->port == TPX_PORT_EPHEMERAL ? 0
                   : params->port == TPX_PORT_DEFAULT
                       ? (int)tpx__config_int(TPX_CFG_PORT_BASE) + (e->gpu > 0 ? e->gpu : 0)
                       : params->port;
        if (port > 65535) {
            TPX_ERROR("bootstrap port %d (TPX_PORT_BASE + gpu) is out of range", port);
            st = TPX_ERR_INVALID_ARG;
            goto err_free;
        }
        TPX_CHECK_GOTO(tpx__bs_listen(e->cfg.bind_addr[0] ? e->cfg.bind_addr : NULL, port, &e->bs_fd,
                                      &e->bs_port), st,
                       err_free);
        TPX_CHECK_GOTO(tpx__peer_listener_start(e), st, err_free);
    }
    if (e->progress_cpu == TPX_CPU_NUMA_LOCAL) {
        e->progress_cpu = tpx__topo_local_cpu(e);
        if (e->progress_cpu < 0)
            TPX_INFO("NIC %s has no known NUMA node: progress thread not pinned", e->props.name);
    }
    if (e->cfg.progress_thread) {
        int rc = pthread_create(&e->progress_tid, NULL, progress_main, e);
        if (rc != 0) {
            TPX_ERROR("cannot start the progress thread: %s", strerror(rc));
            st = TPX_ERR_NO_RESOURCE;
            goto err_free;
        }
        e->progress_started = 1;
    }
    /* v11+ plugins hear how many comms the engine opens to each peer (one per
     * channel and direction); a hint they may ignore. */
    (void)tpx__net_set_flows(e->net, e->cfg.nchan);
    TPX_INFO("engine %016llx: plugin %s, %d channel(s) of %u-byte chunks, window %d, "
             "bootstrap port %d", (unsigned long long)tpx__ident_engine_id(e), e->net->name,
             e->cfg.nchan, e->cfg.chunk, e->cfg.window, e->bs_port);
    tpx__topo_log(e);
    *out = e;
    return TPX_OK;

err_free:
    tpx__engine_destroy(e);
    return st;
}

void tpx__engine_destroy(tpx_engine_t *e)
{
    atomic_store(&e->stop, 1);
    tpx__peer_listener_stop(e);
    if (e->progress_started) {
        pthread_mutex_lock(&e->lock);
        pthread_cond_broadcast(&e->cond);
        uint64_t one = 1; /* out of poll() */
        ssize_t k = write(e->wake_efd, &one, sizeof(one));
        (void)k;
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->progress_tid, NULL);
    }
    while (e->peers != NULL)
        tpx__peer_destroy(e->peers);
    pthread_mutex_lock(&e->lock);
    atomic_store(&e->stop, 1);
    int gtok = tpx__window_gpu_enter(e);
    tpx__peer_reap(e); /* client-side abandoned connects: freed */
    tpx__window_gpu_leave(gtok);
    pthread_mutex_unlock(&e->lock);
    tpx__prep_zombies_free(e); /* before the regions: they own list regions */
    tpx__remotes_fini(e);
    while (e->regions != NULL)
        tpx__region_release(e->regions);
    tpx__rma_engine_fini(e);
    if (e->net != NULL) {
        /* Last of the plugin calls: every comm and registration is gone. */
        int ntok = tpx__window_gpu_enter(e);
        tpx__net_close(e->net); /* v11+: the engine's context */
        tpx__window_gpu_leave(ntok);
        e->net = NULL;
    }
    tpx__window_engine_fini(e);
    tpx__pack_engine_fini(e);
    if (e->bs_fd >= 0)
        close(e->bs_fd);
    if (e->efd >= 0)
        close(e->efd);
    if (e->wake_efd >= 0)
        close(e->wake_efd);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e->nap_fds);
    tpx__peer_listener_fini(e);
    tpx__ident_engine_fini(e);
    tpx__faults_forget(e); /* before its address can be another engine's */
    free(e);
    tpx__trace_flush();
}
