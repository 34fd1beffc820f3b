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
        atomic_init(&c->chans[i].rj_fd, -1);
        c->chans[i].rj_afd = -1;
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
/*
 * A piece sent again may meet its first copy still being read on another
 * connection, which may never finish (its NIC died) or may finish first.
 * Every copy being read is `fo_live`; the first to have read all its bytes
 * counts them and disarms the others, which read the rest of theirs into
 * nowhere (MSG_TRUNC). A copy is `fo_busy` while a recvmsg writes into the
 * receive's memory, and starts one only while live (under fo_lock): the
 * one that counts waits until no copy it disarmed is inside such a write,
 * so no byte of a copy lands after the message completed (its buffer may
 * be the caller's again by then). A connection that died is inside no
 * write: nothing waits for it.
 */

static void fo_lock(tpx_sock_comm_t *c)
{
    while (atomic_exchange_explicit(&c->fo_lock, 1, memory_order_acquire))
        while (atomic_load_explicit(&c->fo_lock, memory_order_relaxed))
            sched_yield(); /* held for a scan of the comm's connections */
}

static void fo_unlock(tpx_sock_comm_t *c) { atomic_store_explicit(&c->fo_lock, 0, memory_order_release); }

void tpx__sock_fo_forget_live(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    fo_lock(c);
    ch->fo_live = 0;
    fo_unlock(c);
}

static int fo_same(const tpx_sock_chan_t *k, const tpx_sock_piece_t *p)
{
    return k->fo_live && k->fo_seq == p->seq && k->fo_off == p->offset && k->fo_len == p->len;
}

static void fo_arm(tpx_sock_chan_t *ch, const tpx_sock_piece_t *p)
{
    ch->fo_seq = p->seq;
    ch->fo_off = p->offset;
    ch->fo_len = p->len;
    ch->fo_live = 1;
}

/* Disarm the copies of p other than ch's (under fo_lock); a mask of them. */
static uint32_t fo_disarm(tpx_sock_comm_t *c, const tpx_sock_chan_t *ch, const tpx_sock_piece_t *p)
{
    uint32_t mask = 0;
    for (int i = 0; i < c->nsocks; i++) {
        tpx_sock_chan_t *k = &c->chans[i];
        if (k != ch && fo_same(k, p)) {
            k->fo_live = 0;
            mask |= 1u << i;
        }
    }
    return mask;
}

/* Until none of the disarmed copies is inside a write (each starts none
 * after its disarming): one recvmsg at most, rare (copies that race). */
static void fo_wait_writes(tpx_sock_comm_t *c, uint32_t mask)
{
    for (int i = 0; i < c->nsocks; i++)
        if (mask & (1u << i))
            while (atomic_load(&c->chans[i].fo_busy))
                sched_yield();
}

void tpx__sock_fo_begin(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, const tpx_sock_piece_t *p)
{
    fo_lock(c);
    fo_arm(ch, p);
    fo_unlock(c);
}

int tpx__sock_fo_take_over(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, const tpx_sock_piece_t *p)
{
    int live = 0;
    uint32_t mask = 0;
    fo_lock(c);
    for (int i = 0; i < c->nsocks && !live; i++)
        live = &c->chans[i] != ch && fo_same(&c->chans[i], p);
    if (live && ch != NULL)
        fo_arm(ch, p); /* another copy: the first to finish counts */
    else if (live)
        mask = fo_disarm(c, NULL, p); /* delivered whole now: it counts */
    fo_unlock(c);
    fo_wait_writes(c, mask);
    return live;
}

int tpx__sock_fo_write_begin(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    fo_lock(c);
    int live = ch->fo_live;
    if (live)
        atomic_store(&ch->fo_busy, 1);
    fo_unlock(c);
    return live;
}

void tpx__sock_fo_write_end(tpx_sock_chan_t *ch) { atomic_store(&ch->fo_busy, 0); }

int tpx__sock_fo_settle(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    if (!c->failover)
        return 1;
    uint32_t mask = 0;
    fo_lock(c);
    int live = ch->fo_live;
    if (live) {
        tpx_sock_piece_t p = {.seq = ch->fo_seq, .offset = ch->fo_off, .len = ch->fo_len};
        mask = fo_disarm(c, ch, &p);
        ch->fo_live = 0;
    }
    fo_unlock(c);
    fo_wait_writes(c, mask);
    return live;
}
