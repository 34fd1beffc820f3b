/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_comm.c - a comm's state shared by all its connections: allocation,
 * its sticky first error, the completion of its messages and the wake-up
 * of a sleeping engine.
 *
 * Completion is published with one atomic add per piece; test() reads it,
 * and the thread that completes a message wakes a sleeping engine
 * (tpx_net_wake_t) unless it is the API thread itself. The first error of
 * a comm is logged once and stored; no connection of the comm moves data
 * after it.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/config.h"
#include "sock.h"
#include "sock_io.h"
#include "common/trace.h"

_Thread_local uint64_t tpx__sock_tl_small_ns;
_Thread_local int tpx__sock_tl_in_api;

tpx_sock_comm_t *tpx__sock_comm_alloc(tpx_sock_comm_kind_t kind, int dev, int nsocks)
{
    tpx_sock_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->magic = kind == SOCK_COMM_SEND ? SOCK_COMM_MAGIC_SEND : SOCK_COMM_MAGIC_RECV;
    c->kind = kind;
    c->dev = dev;
    c->ctrl_fd = -1;
    c->nsocks = nsocks;
    c->links = 1;
    for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++) {
        c->chans[i].fd = -1;
        c->chans[i].comm = c;
        c->chans[i].lowat = TPX_SOCK_VDEV_LOWAT_MAX;
        atomic_init(&c->chans[i].gone, SOCK_CHAN_OPEN);
    }
    return c;
}

/* Wake the comm's engine if it sleeps until something happens (once per
 * arming: no system call while it is awake and polling). */
void tpx__sock_comm_wake_engine(tpx_sock_comm_t *c)
{
    /* Dekker with the engine, which stores `armed` and then looks at the
     * requests: the completion published before must be visible before
     * `armed` is read (a release store is not enough off x86). */
    atomic_thread_fence(memory_order_seq_cst);
    tpx_net_wake_t *w = atomic_load_explicit(&c->wake, memory_order_acquire);
    if (w != NULL && atomic_load_explicit(&w->armed, memory_order_relaxed) &&
        atomic_exchange(&w->armed, 0)) {
        TPX_TL(TPX_TR_ENGINE_WAKE, 0);
        uint64_t one = 1;
        ssize_t n = write(w->fd, &one, sizeof(one));
        (void)n; /* EAGAIN: a wake-up is pending already */
    }
}

void tpx__sock_comm_fail(tpx_sock_comm_t *c, tpx_status_t st, const char *why)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->error, &expected, (int)st))
        SOCK_WARN("%s comm %p (conn %016llx): %s", c->kind == SOCK_COMM_SEND ? "send" : "recv",
                  (void *)c, (unsigned long long)c->conn_id, why);
    tpx__sock_comm_wake_engine(c);
}

void tpx__sock_comm_fail_errno(tpx_sock_comm_t *c, int err, const char *what)
{
    if ((err == ECONNRESET || err == EPIPE) &&
        atomic_load(&c->finished) == atomic_load(&c->posted)) {
        /* A reset with nothing in flight: the peer closed with data of ours
         * unread (a goodbye). No byte of a message was lost. */
        tpx__sock_comm_peer_closed(c, "peer (reset)");
        return;
    }
    char why[160];
    snprintf(why, sizeof(why), "%s: %s", what, strerror(err));
    /* A failure always fails: errno 0, EINTR or EAGAIN here (left by a
     * call that is not the one that failed) would map to "in progress", a
     * comm error that test() never reports: its requests would hang. */
    tpx_status_t st = tpx__status_from_errno(err);
    tpx__sock_comm_fail(c, st == TPX_OK || st == TPX_INPROGRESS ? TPX_ERR_IO : st, why);
}

void tpx__sock_piece_done(tpx_sock_comm_t *c, tpx_sock_req_t *r, uint64_t units, uint64_t total)
{
    sock_piece_done(c, r, units, total);
}

void tpx__sock_comm_set_wake(void *comm, tpx_net_wake_t *wake)
{
    tpx_sock_comm_t *c = comm;
    if (c != NULL && (c->magic == SOCK_COMM_MAGIC_SEND || c->magic == SOCK_COMM_MAGIC_RECV))
        atomic_store_explicit(&c->wake, wake, memory_order_release);
}

/* Set the "peer closed" error, quietly: between pieces no byte was lost,
 * and whether the requests still posted matter is the caller's call. */
void tpx__sock_comm_closed_error(tpx_sock_comm_t *c, const char *why)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->error, &expected, TPX_ERR_CONN_RESET))
        SOCK_INFO("comm %p: %s (%llu message(s) posted and not complete)", (void *)c, why,
                  (unsigned long long)(atomic_load(&c->posted) - atomic_load(&c->finished)));
    tpx__sock_comm_wake_engine(c);
}

/* The peer went away. On a send comm another worker may have written the
 * last bytes of a message and not yet published them: the error is set
 * only once no connection of the comm is being moved (see chan_run), so a
 * message the peer fully received is never reported as failed. */
void tpx__sock_comm_peer_closed(tpx_sock_comm_t *c, const char *who)
{
    if (c->kind == SOCK_COMM_SEND) {
        atomic_store(&c->peer_gone, 1);
        return;
    }
    char why[96];
    snprintf(why, sizeof(why), "the %s closed the connection", who);
    tpx__sock_comm_closed_error(c, why);
}

/* ---- failover: which connection counts a piece's bytes (sock_failover.c) ---- */

static void fo_lock(tpx_sock_comm_t *c)
{
    while (atomic_exchange_explicit(&c->fo_lock, 1, memory_order_acquire))
        while (atomic_load_explicit(&c->fo_lock, memory_order_relaxed))
            sched_yield(); /* held for a scan of the comm's connections */
}

static void fo_unlock(tpx_sock_comm_t *c) { atomic_store_explicit(&c->fo_lock, 0, memory_order_release); }

void tpx__sock_fo_begin(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, const tpx_sock_piece_t *p)
{
    fo_lock(c);
    ch->fo_seq = p->seq;
    ch->fo_off = p->offset;
    ch->fo_len = p->len;
    ch->fo_live = 1;
    fo_unlock(c);
}

int tpx__sock_fo_take_over(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, const tpx_sock_piece_t *p)
{
    int found = 0;
    fo_lock(c);
    for (int i = 0; i < c->nsocks && !found; i++) {
        tpx_sock_chan_t *k = &c->chans[i];
        if (k != ch && k->fo_live && k->fo_seq == p->seq && k->fo_off == p->offset &&
            k->fo_len == p->len) {
            k->fo_live = 0;
            found = 1;
        }
    }
    if (found && ch != NULL) {
        ch->fo_seq = p->seq;
        ch->fo_off = p->offset;
        ch->fo_len = p->len;
        ch->fo_live = 1;
    }
    fo_unlock(c);
    return found;
}

int tpx__sock_fo_settle(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    if (!c->failover)
        return 1;
    fo_lock(c);
    int live = ch->fo_live;
    ch->fo_live = 0;
    fo_unlock(c);
    return live;
}
