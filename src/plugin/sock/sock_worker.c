/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_worker.c - the I/O worker threads that run every comm's data
 * connections.
 *
 * A small process-wide pool of worker threads (TPX_SOCK_WORKERS; default
 * one per CPU, 2 to 16) serves the data connections of all comms: a
 * comm's connections are dealt over the workers when it starts (those
 * NUMA-local to its NIC first, when sysfs names the node). Each worker
 * multiplexes its connections with one edge-triggered epoll set and runs
 * them from a run queue, one turn each (sock_send.c, sock_recv.c), at most
 * SOCK_TURN_BYTES per connection per turn. A worker left with only
 * connections that wait for CUDA copies polls, then naps (sock_io.h).
 * Close detaches a comm from every worker that serves it.
 *
 * Stalls: a worker also watches its connections of comms that fail over
 * (sock_failover.c) for a dead path. A black hole raises no error a turn
 * would see (a send just blocks, a read gets nothing), so every
 * TPX_SOCK_STALL_MS / SOCK_STALL_LOOKS the worker looks at each such
 * connection that owes something (send: pieces the receiver has not
 * acknowledged; recv: its comm has receives posted) and moved nothing
 * since its last look, and asks the kernel whether the peer's TCP still
 * answers (sock_stall.c: one getsockopt). One that does not is aborted
 * (an RST, as a failed connection is), and its next turn fails it over.
 * Nothing of this is on the data path: the look is a timer of the worker,
 * and a connection that moves is never asked.
 *
 * Links: a NIC set down or without carrier carries nothing, and TCP learns
 * it only from retransmission timeouts (then the stall rules above). So,
 * every SOCK_LINK_LOOK_NS while any of them owes something (else at the
 * stall looks), the worker asks, of each of those connections that owes
 * something and moved nothing since its last look, whether its NIC here
 * has its link (common/iflink.c: one ioctl). One that has not is aborted
 * now, and a receiver tells its sender (sock_failover.c, "Tells"). A NIC
 * that only lost its link for an instant costs its connections a
 * replacement (sock_rejoin.c: tens of ms once it is back). The kernel's
 * flag lags: a NIC whose link came back shows none for up to a second
 * (linkwatch; 300 ms on a veth here) while a replacement already moves
 * over it, so only a connection whose NIC a look saw with its link since
 * it connected is judged (each look asks until one did).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/iflink.h"
#include "common/sigpipe.h"
#include "common/trace.h"
#include "common/tsan.h"
#include "sock.h"
#include "sock_cuda.h"
#include "sock_io.h"
#include "sock_tables.h"

#define SOCK_MAX_WORKERS 64
#define SOCK_EPOLL_BATCH 64
/* Only CUDA waits left: poll TPX_SOCK_CUDA_SPIN_US (10 us for a lone
 * message), then sleep at least this. 10 us / 25 us instead of 30 / 0 (H200 host, 16 cores, same
 * run, medians of 3): 1 MiB GPU transfers 16.9 -> 17.9 GB/s at 0.82 ->
 * 0.75 s of CPU per GB, READ of one 512 KiB GPU block p50 184 -> 186 us;
 * napping at once (0 / 25) moved 1 MiB at 19.2 but made that READ 244 us. */
#define SOCK_CU_NAP_MIN_NS 25000   /* shortest sleep while a copy runs */
#define SOCK_CU_NAP_MAX_NS 1000000 /* longest sleep while a copy runs */
/* Looks per TPX_SOCK_STALL_MS at the connections of comms that fail over:
 * a black hole is found between STALL_MS and STALL_MS + STALL_MS / this
 * after the peer's TCP last answered. */
#define SOCK_STALL_LOOKS 4
/* Looks at the links of connections that owe something ("Links"). */
#define SOCK_LINK_LOOK_NS (20 * 1000000ull)

static struct {
    pthread_mutex_t lock;
    int started; /* >0: workers running; <0: start failed */
    int n;
    int comms;   /* comms started and not destroyed: the workers stop at 0 */
    uint64_t forks; /* fork()s seen: a comm from before one has no workers here */
    tpx_sock_worker_t w[SOCK_MAX_WORKERS];
    _Atomic uint64_t next; /* placement cursor */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

int tpx__sock_pool_size(void)
{
    pthread_mutex_lock(&pool.lock);
    int n = pool.started > 0 ? pool.n : 0;
    pthread_mutex_unlock(&pool.lock);
    return n;
}

int tpx__sock_chan_worker(const tpx_sock_comm_t *c, int i)
{
    if (c == NULL || i < 0 || i >= c->nsocks || c->chans[i].worker == NULL)
        return -1;
    return c->chans[i].worker->index;
}

/* ---- the workers --------------------------------------------------------------- */

static void runq_push(tpx_sock_worker_t *w, tpx_sock_chan_t *ch)
{
    if (ch->queued)
        return;
    ch->queued = 1;
    ch->run_next = NULL;
    if (w->run_tail != NULL)
        w->run_tail->run_next = ch;
    else
        w->run_head = ch;
    w->run_tail = ch;
}

static tpx_sock_chan_t *runq_pop(tpx_sock_worker_t *w)
{
    tpx_sock_chan_t *ch = w->run_head;
    if (ch != NULL) {
        w->run_head = ch->run_next;
        if (w->run_head == NULL)
            w->run_tail = NULL;
        ch->queued = 0;
    }
    return ch;
}

/* Everything kicked since the last look: onto the run queue. A connection
 * kicked for the first time is added to the epoll set here, by its worker
 * (the kick stack orders the starter's writes before our reads). */
static void take_kicks(tpx_sock_worker_t *w)
{
    tpx_sock_chan_t *ch = atomic_exchange(&w->kicks, NULL);
    /* The stack is newest first: reverse it to run in kick order. */
    tpx_sock_chan_t *rev = NULL;
    while (ch != NULL) {
        tpx_sock_chan_t *next = ch->kick_next;
        ch->kick_next = rev;
        rev = ch;
        ch = next;
    }
    for (ch = rev; ch != NULL;) {
        tpx_sock_chan_t *next = ch->kick_next;
        atomic_store(&ch->kicked, 0); /* before it runs: a later kick is not lost */
        if (!ch->registered) {
            struct epoll_event ev = {
                .events = EPOLLIN | EPOLLRDHUP | EPOLLET |
                          (ch->comm->kind == SOCK_COMM_SEND ? EPOLLOUT : 0),
                .data.ptr = ch,
            };
            if (epoll_ctl(w->ep, EPOLL_CTL_ADD, ch->fd, &ev) != 0) {
                char why[96];
                snprintf(why, sizeof(why), "epoll_ctl: %s", strerror(errno));
                tpx__sock_comm_fail(ch->comm, tpx__status_from_errno(errno), why);
            } else {
                ch->registered = 1;
                if (ch->comm->failover && tpx__sock_params.stall_ms > 0) {
                    ch->stall_seen = UINT64_MAX; /* the first look sees it move */
                    ch->stall_next = w->stall_list;
                    w->stall_list = ch;
                }
            }
        }
        if (ch->registered)
            runq_push(w, ch);
        ch = next;
    }
}

/* One turn of one connection. Returns 0 if it leaves the run queue, 1 if
 * it stays, 2 if it stays only to wait for a CUDA copy (nothing moved), 3
 * the same while its comm has more messages in flight (a stream, not a
 * lone request: TPX_SOCK_CUDA_SPIN_US=-1 naps at once for these). */
static int chan_run(tpx_sock_chan_t *ch)
{
    tpx_sock_comm_t *c = ch->comm;
    const int send = c->kind == SOCK_COMM_SEND;
    int r = CH_IDLE, again = 0;
    atomic_fetch_add(&c->running, 1);
    if (!atomic_load(&c->closing) && /* seq_cst: after `running` (the closer waits on it) */
        atomic_load_explicit(&c->error, memory_order_relaxed) == 0 &&
        !atomic_load_explicit(&c->hung, memory_order_relaxed) && !atomic_load(&c->peer_gone) &&
        tpx__sock_chan_own(ch)) { /* not owned: isend/a direct read moves it, kicks us after */
        int live = 1;
        if (c->rejoin && (ch->rj_joining || atomic_load(&ch->rj_fd) >= 0))
            live = tpx__sock_rejoin_turn(c, ch); /* a new connection in its place */
        if (!live) {
            tpx__sock_chan_release(ch, SOCK_OWNER_WORKER);
        } else if (ch->eof || (send && atomic_load_explicit(&ch->fo_dead, memory_order_relaxed))) {
            /* Its close was taken (by us, or by a direct read: read only
             * while owning, as the reader wrote it), or it failed and the
             * comm fails over: nothing more moves on it. */
            tpx__sock_chan_release(ch, SOCK_OWNER_WORKER);
        } else if (send) {
            /* The receiver writes only acknowledgements on data
             * connections, and only to a comm that fails over: else
             * readable (or hung up) means it closed. */
            if (ch->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                r = c->failover ? tpx__sock_fo_read_acks(c, ch)
                                : tpx__sock_chan_check_peer(c, ch);
            if (r != CH_ERROR && c->tell && atomic_load_explicit(&ch->fo_told, memory_order_relaxed))
                r = tpx__sock_fo_take_told(c, ch); /* sock_failover.c, "Tells" */
            if (atomic_load_explicit(&ch->fo_dead, memory_order_relaxed))
                r = CH_ERROR; /* failed over: nothing more on it */
            if (r != CH_ERROR) {
                atomic_store_explicit(&ch->idle, 0, memory_order_relaxed);
                r = tpx__sock_chan_send(c, ch);
                if (r == CH_IDLE && atomic_load_explicit(&ch->fo_dead, memory_order_relaxed))
                    r = CH_ERROR; /* it failed: the others took its pieces */
                if (r == CH_IDLE) {
                    atomic_store(&ch->idle, 1); /* then look again: Dekker with the poster */
                    again = tpx__sock_sched_has_work(c);
                    if (again)
                        atomic_store_explicit(&ch->idle, 0, memory_order_relaxed);
                }
            }
            tpx__sock_chan_release(ch, SOCK_OWNER_WORKER);
        } else {
            /* Pieces whose last copies to the GPU finished are published
             * first; while some still wait, the connection stays polled
             * (and a close behind them is taken only after them). */
            if (ch->events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                ch->hup = 1; /* a parked connection does not read on to see it (the top) */
            int prog = 0, left = tpx__sock_cuda_reap(ch, &prog);
            r = left < 0 ? CH_ERROR : tpx__sock_chan_recv(c, ch, 0, SOCK_TURN_BYTES);
            if (r != CH_ERROR && r != CH_MORE && r != CH_CUWAIT &&
                (left = tpx__sock_cuda_reap(ch, &prog)) != 0) {
                r = left < 0 ? CH_ERROR : prog ? CH_MORE : CH_CUWAIT;
                if (r == CH_CUWAIT)
                    TPX_TL(TPX_TR_CU_WAIT, 2);
            }
            if (left < 0)
                tpx__sock_comm_fail(c, TPX_ERR_CUDA, "copying staging to a CUDA buffer failed");
            r = tpx__sock_chan_recv_settle(c, ch, r);
            if (c->failover && r != CH_MORE) /* CH_MORE: its next turn is at once */
                tpx__sock_fo_ack_flush(c, ch);
            tpx__sock_chan_release(ch, SOCK_OWNER_WORKER);
        }
        ch->events = 0;
    }
    /* A CUDA wait while more messages are in flight: a stream's (the
     * counters are read only for a wait, not on every turn). */
    int stream = 0;
    if (r == CH_CUWAIT) {
        uint64_t inflight = atomic_load_explicit(&c->posted, memory_order_relaxed) -
                            atomic_load_explicit(&c->finished, memory_order_relaxed);
        stream = inflight > 1;
    }
    /* The last connection to stop after the receiver went away reports it:
     * everything any of them moved is published by then. */
    if (atomic_fetch_sub(&c->running, 1) == 1 && send && atomic_load(&c->peer_gone))
        tpx__sock_comm_closed_error(c, "the receiver closed the connection");
    return again || r == CH_MORE ? 1 : r == CH_CUWAIT ? 2 + stream : 0;
}

/* Drop the connections of w->detach: out of the epoll set, the kick stack
 * and the run queue. */
static void detach_comm(tpx_sock_worker_t *w, tpx_sock_comm_t *c)
{
    take_kicks(w); /* the comm's own thread is closing it: no new kicks for it */
    tpx_sock_chan_t *keep_head = NULL, *keep_tail = NULL, *ch;
    while ((ch = runq_pop(w)) != NULL) {
        if (ch->comm == c)
            continue;
        ch->run_next = NULL;
        if (keep_tail != NULL)
            keep_tail->run_next = ch;
        else
            keep_head = ch;
        keep_tail = ch;
        ch->queued = 1;
    }
    w->run_head = keep_head;
    w->run_tail = keep_tail;
    for (int i = 0; i < c->nsocks; i++) {
        tpx_sock_chan_t *k = &c->chans[i];
        if (k->worker == w && k->registered) {
            (void)epoll_ctl(w->ep, EPOLL_CTL_DEL, k->fd, NULL);
            k->registered = 0;
        }
    }
    for (tpx_sock_chan_t **pp = &w->stall_list; *pp != NULL;) {
        if ((*pp)->comm == c)
            *pp = (*pp)->stall_next;
        else
            pp = &(*pp)->stall_next;
    }
}

/* ---- stalls ------------------------------------------------------------------------ */

/* What ch owes its peer or awaits from it (its owner): send, pieces the
 * receiver has not acknowledged; recv, receives posted and not complete. */
static int stall_owes(const tpx_sock_chan_t *ch)
{
    const tpx_sock_comm_t *c = ch->comm;
    if (c->kind == SOCK_COMM_SEND)
        return ch->fo_head != ch->fo_tail;
    return atomic_load_explicit(&c->posted, memory_order_relaxed) !=
           atomic_load_explicit(&c->finished, memory_order_relaxed);
}

/* How long before now_ns ch's comm last had pieces of another live
 * connection acknowledged, in ms (UINT32_MAX: never, or ch's comm does
 * not rejoin: no sibling's word, sock_stall.c). Each connection's owner
 * stamps its own (sock_failover.c); read across workers. */
static uint32_t stall_sib_ms(const tpx_sock_chan_t *ch, uint64_t now_ns)
{
    const tpx_sock_comm_t *c = ch->comm;
    uint64_t last = 0;
    if (c->kind != SOCK_COMM_SEND || !c->rejoin)
        return UINT32_MAX;
    for (int i = 0; i < c->nsocks; i++) {
        const tpx_sock_chan_t *o = &c->chans[i];
        uint64_t t = atomic_load_explicit(&o->stall_ack_ns, memory_order_relaxed);
        if (o != ch && t > last && !atomic_load_explicit(&o->fo_dead, memory_order_relaxed))
            last = t;
    }
    if (last == 0)
        return UINT32_MAX;
    return now_ns > last ? (uint32_t)TPX_MIN((now_ns - last) / 1000000u, UINT32_MAX - 1) : 0;
}

/* Abort ch (its owner): an RST, its queues dropped. Its socket's error
 * wakes its turn (epoll), which fails it over, reported as the look that
 * ended it says (sock_failover.c). */
static void stall_abort(tpx_sock_chan_t *ch)
{
    struct sockaddr unspec = {.sa_family = AF_UNSPEC};
    (void)connect(ch->fd, &unspec, sizeof(unspec));
}

/* One look at each of w's connections of comms that fail over (see the
 * top: "Stalls"). A connection another thread moves right now (isend's
 * direct write, a direct read) is moving: not looked at. */
static void stall_look(tpx_sock_worker_t *w)
{
    const uint32_t stall_ms = (uint32_t)tpx__sock_params.stall_ms;
    const uint64_t now = tpx__sock_mono_ns();
    for (tpx_sock_chan_t *ch = w->stall_list; ch != NULL; ch = ch->stall_next) {
        tpx_sock_comm_t *c = ch->comm;
        if (atomic_load(&c->closing) || atomic_load_explicit(&c->error, memory_order_relaxed) ||
            atomic_load_explicit(&ch->fo_dead, memory_order_relaxed) || !tpx__sock_chan_own(ch))
            continue;
        uint64_t seen = ch->bytes + ch->fo_tail;
        int quiet = seen == ch->stall_seen && !ch->eof && ch->stall_dead_ms == 0 &&
                    ch->link_lost == 0 &&
                    !atomic_load_explicit(&ch->fo_dead, memory_order_relaxed) && stall_owes(ch);
        ch->stall_seen = seen;
        tpx_sock_tcp_seen_t ti;
        int verdict = quiet ? tpx__sock_stall_verdict(ch->fd, stall_ms, stall_sib_ms(ch, now), &ti)
                            : 0;
        if (verdict) { /* a black hole */
            ch->stall_dead_ms = ti.last_ack_recv_ms > 0 ? ti.last_ack_recv_ms : 1;
            ch->stall_sib = verdict == 2;
            stall_abort(ch);
        }
        tpx__sock_chan_release(ch, SOCK_OWNER_WORKER);
    }
}

/* One look at the links of w's connections that owe something (see the
 * top: "Links"). Returns whether any owes something. */
static int link_look(tpx_sock_worker_t *w)
{
    int owes = 0;
    for (tpx_sock_chan_t *ch = w->stall_list; ch != NULL; ch = ch->stall_next) {
        tpx_sock_comm_t *c = ch->comm;
        if (atomic_load(&c->closing) || atomic_load_explicit(&c->error, memory_order_relaxed) ||
            atomic_load_explicit(&ch->fo_dead, memory_order_relaxed) || !tpx__sock_chan_own(ch))
            continue;
        const tpx_sock_dev_t *d = tpx__sock_dev(ch->nic);
        if (!ch->link_ok && d != NULL)
            ch->link_ok = tpx__if_link(d->name) == 1;
        if (stall_owes(ch)) {
            owes = 1;
            uint64_t seen = ch->bytes + ch->fo_tail;
            if (seen == ch->link_seen && d != NULL && ch->link_ok && !ch->eof &&
                ch->stall_dead_ms == 0 && ch->link_lost == 0 && tpx__if_link(d->name) == 0) {
                ch->link_lost = SOCK_LINK_HERE;
                if (c->kind == SOCK_COMM_RECV && c->tell) {
                    atomic_fetch_or(&c->fo_tell, 1u << (ch - c->chans));
                    for (int i = 0; i < c->nsocks; i++)
                        if (&c->chans[i] != ch && !atomic_load(&c->chans[i].fo_dead))
                            tpx__sock_chan_kick(&c->chans[i]);
                }
                stall_abort(ch);
            }
            ch->link_seen = seen;
        }
        tpx__sock_chan_release(ch, SOCK_OWNER_WORKER);
    }
    return owes;
}

/* The stall and link looks, when due; returns the longest the worker may
 * sleep before the next one (UINT64_MAX: no connection to look at). */
static uint64_t stall_tick(tpx_sock_worker_t *w)
{
    if (w->stall_list == NULL)
        return UINT64_MAX;
    uint64_t now = tpx__sock_mono_ns();
    if (now >= w->stall_next_ns) {
        stall_look(w);
        w->stall_next_ns =
            now + (uint64_t)tpx__sock_params.stall_ms * 1000000u / SOCK_STALL_LOOKS;
    }
    if (now >= w->link_next_ns) /* while none owes anything, at the stall looks only */
        w->link_next_ns = link_look(w) ? now + SOCK_LINK_LOOK_NS : w->stall_next_ns;
    uint64_t next = TPX_MIN(w->stall_next_ns, w->link_next_ns);
    /* Whole milliseconds (a plain epoll_wait), at least one. */
    return ((next - now) / 1000000u + 1) * 1000000u;
}

static void worker_commands(tpx_sock_worker_t *w)
{
    if (!atomic_load(&w->cmd))
        return;
    pthread_mutex_lock(&w->lock);
    atomic_store(&w->cmd, 0);
    if (w->detach != NULL) {
        detach_comm(w, w->detach);
        w->detach = NULL;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
}

/* epoll_wait for at most `ns` nanoseconds (0: do not block). Below a
 * millisecond it needs epoll_pwait2 (Linux 5.11; called directly, so that
 * an older C library loads us too); without it, a short wait is a poll and
 * a sched_yield. */
static int worker_epoll(tpx_sock_worker_t *w, struct epoll_event *evs, uint64_t ns)
{
    if (ns % 1000000 == 0)
        return epoll_wait(w->ep, evs, SOCK_EPOLL_BATCH, (int)(ns / 1000000));
#if defined(SYS_epoll_pwait2) && __SIZEOF_LONG__ == 8 /* timespec is the kernel's */
    static _Atomic int no_pwait2;
    if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                              .tv_nsec = (long)(ns % 1000000000u)};
        long n = syscall(SYS_epoll_pwait2, w->ep, evs, SOCK_EPOLL_BATCH, &ts, NULL, 0);
        if (n >= 0 || errno != ENOSYS)
            return (int)n;
        atomic_store_explicit(&no_pwait2, 1, memory_order_relaxed);
    }
#endif
    int n = epoll_wait(w->ep, evs, SOCK_EPOLL_BATCH, (int)(ns / 1000000));
    if (n == 0 && ns < 1000000)
        sched_yield();
    return n;
}

/* How long a worker may sleep now: long with nothing to run, not at all
 * with work queued, and a growing nap when all it has queued are CUDA
 * waits (a quarter of the time waited so far, after TPX_SOCK_CUDA_SPIN_US;
 * SOCK_CU_NAP_MIN_NS to SOCK_CU_NAP_MAX_NS). */
static uint64_t worker_nap_ns(tpx_sock_worker_t *w)
{
    if (w->run_head == NULL) {
        if (tpx__sock_params.poll_ns > 0 &&
            tpx__sock_mono_ns() - tpx__sock_tl_small_ns < tpx__sock_params.poll_ns)
            return 0; /* just moved a small message (TPX_SOCK_POLL_US): poll */
        return 1000000000u;
    }
    if (w->cu_wait_since == 0)
        return 0;
    uint64_t waited = tpx__sock_mono_ns() - w->cu_wait_since;
    if (waited < (w->cu_wait_stream ? 0 : tpx__sock_params.cuda_spin_ns))
        return 0;
    return TPX_MIN(TPX_MAX(waited / 4, SOCK_CU_NAP_MIN_NS), SOCK_CU_NAP_MAX_NS);
}

static void *worker_main(void *arg)
{
    tpx_sock_worker_t *w = arg;
    tpx__sigpipe_block_thread(); /* sends use MSG_NOSIGNAL; this is the belt to those braces */
    char name[16];
    snprintf(name, sizeof(name), "tpx-io%d", w->index);
    pthread_setname_np(pthread_self(), name);
    /* Naps while a CUDA copy runs are tens of microseconds: the default
     * 50 us of timer slack would double them. */
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    tpx__sock_cuda_worker_init();
    struct epoll_event evs[SOCK_EPOLL_BATCH];
    while (!atomic_load(&w->stop)) {
        worker_commands(w);
        tpx_sock_chan_t *tail = w->run_tail;
        take_kicks(w);
        if (w->run_tail != tail) /* kicked connections are queued: no nap */
            w->cu_wait_since = 0;
        uint64_t nap = TPX_MIN(worker_nap_ns(w), stall_tick(w));
        if (nap > 0) {
            /* Sleep. Announce it first, then look again (Dekker with
             * tpx__sock_chan_kick and the closer). */
            atomic_store(&w->sleeping, 1);
            if (atomic_load(&w->kicks) != NULL || atomic_load(&w->cmd) ||
                atomic_load(&w->stop)) {
                nap = 0;
                atomic_store(&w->sleeping, 0);
            }
        }
        int n = worker_epoll(w, evs, nap);
        atomic_store(&w->sleeping, 0);
        if (nap != 0)
            TPX_TL(TPX_TR_WORKER_WAKE, n);
        if (tpx__sock_params.poll_ns > 0 && n == 0 && nap == 0 && w->run_head == NULL)
            sched_yield(); /* polling: give the core to whoever waits for it */
        for (int i = 0; i < n; i++) {
            tpx_sock_chan_t *ch = evs[i].data.ptr;
            if (ch == NULL) { /* the eventfd */
                uint64_t v;
                ssize_t r = read(w->efd, &v, sizeof(v));
                (void)r;
                continue;
            }
            ch->events |= evs[i].events;
            runq_push(w, ch);
        }
        /* One turn for each connection queued now. */
        tpx_sock_chan_t *last = w->run_tail, *ch;
        int ran = 0, cu_waits = 0, cu_streams = 0;
        while (last != NULL && (ch = runq_pop(w)) != NULL) {
            int again = chan_run(ch);
            if (again)
                runq_push(w, ch);
            ran++;
            cu_waits += again >= 2;
            cu_streams += again == 3;
            if (ch == last)
                break;
        }
        /* Only CUDA waits queued, and none of them moved: start (or go on
         * with) the clock of worker_nap_ns. */
        if (ran > 0 && cu_waits == ran) {
            if (w->cu_wait_since == 0)
                w->cu_wait_since = tpx__sock_mono_ns();
            w->cu_wait_stream = tpx__sock_params.cuda_spin_auto && cu_streams == ran;
        } else {
            w->cu_wait_since = 0;
        }
    }
    return NULL;
}

/* CPUs of NUMA node `node` (sysfs cpulist "0-7,16-23"); 0 if unknown. */
static int numa_cpus(int node, cpu_set_t *set)
{
    char path[96], buf[1024];
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    if (!ok)
        return 0;
    CPU_ZERO(set);
    int count = 0;
    for (char *p = buf; *p != '\0' && *p != '\n';) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p)
            break;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long cpu = a; cpu <= b && cpu < CPU_SETSIZE; cpu++, count++)
            CPU_SET((int)cpu, set);
        p = *end == ',' ? end + 1 : end;
    }
    return count;
}

/* Stop every worker (pool.lock held, no comm left): a process without
 * comms keeps no thread and no descriptor of ours. */
static void pool_stop(void)
{
    for (int k = 0; k < pool.n; k++) {
        tpx_sock_worker_t *w = &pool.w[k];
        atomic_store(&w->stop, 1);
        tpx__sock_worker_wake(w);
    }
    for (int k = 0; k < pool.n; k++) {
        tpx_sock_worker_t *w = &pool.w[k];
        pthread_join(w->thread, NULL);
        close(w->ep);
        close(w->efd);
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        memset(w, 0, sizeof(*w));
    }
    pool.n = 0;
    pool.started = 0;
}

/* A child of fork() has none of the workers: forget them (the parent's comms
 * are unusable there anyway), so that the child's own comms start a pool. */
static void pool_atfork_child(void)
{
    for (int k = 0; k < pool.n; k++) {
        close(pool.w[k].ep);
        close(pool.w[k].efd);
    }
    memset(pool.w, 0, sizeof(pool.w));
    pool.n = 0;
    pool.started = 0;
    pool.comms = 0;
    pool.forks++;
    pthread_mutex_init(&pool.lock, NULL);
}

static pthread_once_t pool_atfork_once = PTHREAD_ONCE_INIT;
static void pool_atfork_register(void) { (void)pthread_atfork(NULL, NULL, pool_atfork_child); }

/* Start the pool if needed: TPX_SOCK_WORKERS threads (0: one per CPU, at
 * least 2, at most 16: on loopback a worker moves about what one raw TCP
 * connection with a thread per end moves, and a loopback pair of engines in
 * one process shares one pool; fewer halved the 2-core engine rows). With NICs on known NUMA nodes, worker k is pinned to
 * the CPUs of the k-th such node (round-robin); best effort. */
static tpx_status_t pool_start(void)
{
    pthread_once(&pool_atfork_once, pool_atfork_register);
    pthread_mutex_lock(&pool.lock);
    tpx_status_t st = TPX_OK;
    if (pool.started != 0)
        goto out;
    int n = tpx__sock_params.workers;
    if (n <= 0) {
        long cpus = tpx__config_ncpus();
        n = (int)TPX_MIN(TPX_MAX(cpus, 2), 16);
    }
    n = TPX_MIN(n, SOCK_MAX_WORKERS);
    int nodes[SOCK_MAX_WORKERS], nnodes = 0;
    for (int d = 0; d < tpx__sock_nphys() && nnodes < SOCK_MAX_WORKERS; d++) {
        int node = tpx__sock_dev(d)->numa_node, seen = 0;
        for (int k = 0; k < nnodes; k++)
            seen |= nodes[k] == node;
        if (node >= 0 && !seen)
            nodes[nnodes++] = node;
    }
    for (int k = 0; k < n; k++) {
        tpx_sock_worker_t *w = &pool.w[k];
        w->index = k;
        w->numa = nnodes > 0 ? nodes[k % nnodes] : -1;
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->thread = pthread_self();
        w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (w->ep < 0 || w->efd < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, w->efd, &ev) != 0) {
            SOCK_WARN("I/O worker: epoll/eventfd: %s", strerror(errno));
            st = tpx__status_from_errno(errno);
            break;
        }
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            SOCK_WARN("cannot start an I/O worker: %s", strerror(rc));
            st = TPX_ERR_NO_RESOURCE;
            break;
        }
        cpu_set_t set;
        if (w->numa >= 0 && numa_cpus(w->numa, &set) > 0 &&
            pthread_setaffinity_np(w->thread, sizeof(set), &set) != 0)
            SOCK_DEBUG("I/O worker %d: cannot pin to NUMA node %d", k, w->numa);
        pool.n = k + 1;
    }
    if (st != TPX_OK) {
        tpx_sock_worker_t *w = &pool.w[pool.n]; /* the one that failed */
        if (w->ep >= 0)
            close(w->ep);
        if (w->efd >= 0)
            close(w->efd);
        memset(w, 0, sizeof(*w));
        pool_stop();
        goto out;
    }
    pool.started = 1;
    SOCK_INFO("%d I/O worker(s)%s", pool.n, nnodes > 0 ? ", pinned to their NICs' NUMA nodes" : "");
out:
    if (st == TPX_OK)
        pool.comms++;
    pthread_mutex_unlock(&pool.lock);
    return st;
}

/* Which of a worker's two per-kind counts a comm's connections add to. */
static int chan_kind(const tpx_sock_comm_t *c) { return c->kind == SOCK_COMM_SEND ? 0 : 1; }

/* The worker for a new connection: of those on the comm's NUMA node (all
 * if none is), the one with the fewest connections of the same direction,
 * then the fewest in all, ties broken round-robin. Counting both
 * directions together put an engine's receiving connections on half the
 * workers of a 16-core host, their other connections being those of the
 * idle direction (8 workers at 0.84 of a core, 8 at none). */
static tpx_sock_worker_t *pool_pick(int numa, int kind)
{
    int any = 0;
    for (int k = 0; k < pool.n; k++)
        any |= pool.w[k].numa == numa;
    uint64_t start = atomic_fetch_add(&pool.next, 1);
    tpx_sock_worker_t *best = NULL;
    for (int i = 0; i < pool.n; i++) {
        tpx_sock_worker_t *w = &pool.w[(start + (uint64_t)i) % (uint64_t)pool.n];
        if (any && w->numa != numa)
            continue;
        int wk = atomic_load(&w->nkind[kind]), bk = best ? atomic_load(&best->nkind[kind]) : 0;
        if (best == NULL || wk < bk ||
            (wk == bk && atomic_load(&w->nchans) < atomic_load(&best->nchans)))
            best = w;
    }
    return best;
}

tpx_status_t tpx__sock_comm_start(tpx_sock_comm_t *c)
{
    c->max_reqs = tpx__sock_params.tcpx ? SOCK_TCPX_MAX_REQS : tpx__sock_params.max_reqs;
    if (tpx__sock_params.tcpx) {
        tpx_status_t st = tpx__sock_tcpx_comm_init(c);
        if (st != TPX_OK)
            return st;
    }
    c->reqs = calloc((size_t)c->max_reqs, sizeof(*c->reqs));
    if (c->reqs == NULL)
        return TPX_ERR_NO_MEMORY;
    for (int i = 0; i < c->max_reqs; i++) {
        c->reqs[i].comm = c;
        atomic_store(&c->reqs[i].seq, UINT64_MAX);
    }
    pthread_mutex_init(&c->sched_lock, NULL);
    tpx_status_t st = tpx__sock_fo_start(c);
    if (st != TPX_OK)
        return st;
    st = pool_start(); /* counts the comm */
    if (st != TPX_OK)
        return st;
    c->pooled = 1;
    c->pool_forks = pool.forks;
    const tpx_sock_dev_t *d = tpx__sock_dev(c->dev);
    int numa = d != NULL ? d->numa_node : -1;
    pthread_mutex_lock(&pool.lock); /* placements of concurrent starts see each other */
    for (int i = 0; i < c->nsocks; i++) {
        tpx_sock_chan_t *ch = &c->chans[i];
        ch->worker = pool_pick(numa, chan_kind(c));
        atomic_fetch_add(&ch->worker->nchans, 1);
        atomic_fetch_add(&ch->worker->nkind[chan_kind(c)], 1);
        /* One the comm starts without takes no piece (sock_conn.c). */
        atomic_store(&ch->idle, c->kind == SOCK_COMM_SEND && !atomic_load(&ch->fo_dead));
    }
    pthread_mutex_unlock(&pool.lock);
    /* The first kick registers each connection with its worker. */
    for (int i = 0; i < c->nsocks; i++)
        tpx__sock_chan_kick(&c->chans[i]);
    return TPX_OK;
}

void tpx__sock_comm_destroy(tpx_sock_comm_t *c)
{
    if (c == NULL)
        return;
    tpx__sock_rejoin_forget(c); /* before the workers drop it: no kick after */
    atomic_store(&c->closing, 1);
    if (atomic_load(&c->fo_rejoined) > 0)
        SOCK_INFO("%s comm %p (conn %016llx): %llu data connection(s) replaced after they "
                  "failed", c->kind == SOCK_COMM_SEND ? "send" : "recv", (void *)c,
                  (unsigned long long)c->conn_id,
                  (unsigned long long)atomic_load(&c->fo_rejoined));
    if (atomic_load(&c->fo_dead_chans) > 0)
        SOCK_INFO("%s comm %p (conn %016llx): %d of %d data connection(s) failed, %llu "
                  "piece(s) sent again", c->kind == SOCK_COMM_SEND ? "send" : "recv", (void *)c,
                  (unsigned long long)c->conn_id, atomic_load(&c->fo_dead_chans), c->nsocks,
                  (unsigned long long)atomic_load(&c->fo_resent));
    if (c->pooled && c->pool_forks != pool.forks) { /* made before a fork(): no workers here */
        c->pooled = 0;
        for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++)
            c->chans[i].worker = NULL;
    }
    /* A turn of one connection that began before `closing` may kick
     * another connection of the comm (a claim that made room, "Claims"),
     * onto a worker perhaps already told to drop it: let such turns end
     * first. A turn that begins after them sees `closing` (both seq_cst,
     * with `running`) and touches nothing. Turns are short. */
    while (c->pooled && atomic_load(&c->running) > 0)
        sched_yield();
    /* Each worker serving the comm drops its connections; after the last
     * answer no worker touches the comm. */
    for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++) {
        tpx_sock_worker_t *w = c->chans[i].worker;
        if (w == NULL)
            continue;
        int first = 1;
        for (int k = 0; k < i; k++)
            first &= c->chans[k].worker != w;
        if (!first)
            continue;
        pthread_mutex_lock(&w->lock);
        while (w->detach != NULL)
            pthread_cond_wait(&w->cond, &w->lock);
        w->detach = c;
        atomic_store(&w->cmd, 1);
        tpx__sock_worker_wake(w);
        while (w->detach == c)
            pthread_cond_wait(&w->cond, &w->lock);
        pthread_mutex_unlock(&w->lock);
    }
    for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++) {
        if (c->chans[i].worker != NULL) {
            atomic_fetch_sub(&c->chans[i].worker->nchans, 1);
            atomic_fetch_sub(&c->chans[i].worker->nkind[chan_kind(c)], 1);
        }
        tpx__sock_cuda_chan_free(&c->chans[i]);
        free(c->chans[i].eager);
        if (c->chans[i].fd >= 0)
            close(c->chans[i].fd);
        if (atomic_load(&c->chans[i].rj_fd) >= 0)
            close(atomic_load(&c->chans[i].rj_fd));
    }
    if (c->ctrl_fd >= 0)
        close(c->ctrl_fd);
    if (c->pooled) {
        pthread_mutex_lock(&pool.lock);
        if (--pool.comms == 0)
            pool_stop();
        pthread_mutex_unlock(&pool.lock);
    }
    if (c->reqs != NULL) {
        pthread_mutex_destroy(&c->sched_lock);
        free(c->reqs);
    }
    tpx__sock_tcpx_comm_free(c);
    tpx__sock_fo_free(c);
    c->magic = 0;
    free(c);
}
