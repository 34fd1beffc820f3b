/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_claim.c - which bytes of a posted receive its pieces announced
 * ("Claims" below), and the check of a piece against its receive.
 */
#include <errno.h>
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

/* Pieces of one message never overlap: the sender cuts them one after the
 * other (sock_send.c, sched_cut), so they tile [0, total). Their lengths adding up to
 * `total` does not prove that (two pieces of [0, 50) "complete" a 100-byte
 * message whose last 50 bytes nobody wrote), so each receive keeps the
 * stretches announced: [0, front) and up to SOCK_CLAIM_RUNS disjoint runs
 * beyond it, in order. A piece that overlaps one fails the comm; with the
 * lengths adding up to `total`, disjoint pieces cover every byte.
 *
 * The runs are bounded and a legitimate sender is never failed for
 * having too many: a piece that would need one run too many waits (its
 * connection does not read on, CH_PARKED with claim_wait) and is tried
 * again after the next claim of its receive, whichever connection makes
 * it (any claim may make room: one that fills a gap, or extends the front
 * or a run up to the waiting piece). This cannot deadlock: the
 * lowest piece not announced yet starts at `front` (everything below it
 * is announced) and extends it without a run, and it is the next header
 * of its connection (a connection carries its pieces in the order they
 * were cut), so announcements always go on. Pieces arrive nearly in order
 * (each connection takes the next piece when it becomes free): a wait
 * needs 16 stretches announced ahead of a missing one.
 *
 * The same argument bounds what a sender that breaks that order can do:
 * the connection that carries the lowest missing piece never waits, so if
 * every data connection of the comm waits on one receive with no claim of
 * it since (each bit of r->waiting set), no piece on the wire can ever
 * fill the gap; the comm fails at once (test(): rc 2), since the receive
 * would otherwise stay "not done" forever and NCCL has no deadline. A
 * sender that breaks the order on some connections and closes the others
 * is caught when the waiting connections' close is seen ("Closed
 * connections"): a waiter whose bit is still set holds a piece that only
 * a connection still open could let in. */

static void req_claim_lock(tpx_sock_req_t *r)
{
    while (atomic_exchange_explicit(&r->claim_lock, 1, memory_order_acquire))
        while (atomic_load_explicit(&r->claim_lock, memory_order_relaxed))
            sched_yield(); /* held for a few compares, by another connection's owner */
}

static void req_claim_unlock(tpx_sock_req_t *r)
{
    atomic_store_explicit(&r->claim_lock, 0, memory_order_release);
}

void tpx__sock_req_claim_reset(tpx_sock_req_t *r)
{
    req_claim_lock(r); /* a stray piece of the slot's last message may be checked now */
    r->front = 0;
    r->nruns = 0;
    r->waiting = 0;
    req_claim_unlock(r);
}

#define SOCK_CLAIM_OK 0
#define SOCK_CLAIM_OVERLAP 1
#define SOCK_CLAIM_FULL 2
#define SOCK_CLAIM_STUCK 3 /* full, and every connection of the comm waits: never resolves */
#define SOCK_CLAIM_AGAIN 4 /* failover: bytes announced before, by an earlier copy */

/* Announce [off, end) of r's message; under claim_lock. */
static int req_claim_range(tpx_sock_req_t *r, uint64_t off, uint64_t end)
{
    if (off < r->front)
        return SOCK_CLAIM_OVERLAP;
    int i = 0; /* the first run that ends after off: the only one that can overlap */
    while (i < r->nruns && r->runs[i].end <= off)
        i++;
    if (i < r->nruns && r->runs[i].start < end)
        return SOCK_CLAIM_OVERLAP;
    int join_prev = i == 0 ? off == r->front : r->runs[i - 1].end == off;
    int join_next = i < r->nruns && r->runs[i].start == end;
    if (join_prev && join_next) { /* fills the gap between two stretches */
        if (i == 0)
            r->front = r->runs[0].end;
        else
            r->runs[i - 1].end = r->runs[i].end;
        memmove(&r->runs[i], &r->runs[i + 1], (size_t)(r->nruns - i - 1) * sizeof(r->runs[0]));
        r->nruns--;
    } else if (join_prev) {
        if (i == 0)
            r->front = end;
        else
            r->runs[i - 1].end = end;
    } else if (join_next) {
        r->runs[i].start = off;
    } else {
        if (r->nruns == SOCK_CLAIM_RUNS)
            return SOCK_CLAIM_FULL;
        memmove(&r->runs[i + 1], &r->runs[i], (size_t)(r->nruns - i) * sizeof(r->runs[0]));
        r->runs[i].start = off;
        r->runs[i].end = end;
        r->nruns++;
    }
    return SOCK_CLAIM_OK;
}

/* Whether [off, end) lies inside what was announced; under claim_lock. */
static int req_claim_covers(const tpx_sock_req_t *r, uint64_t off, uint64_t end)
{
    if (end <= r->front)
        return 1;
    for (int i = 0; i < r->nruns; i++)
        if (r->runs[i].start <= off && end <= r->runs[i].end)
            return 1;
    return 0;
}

/* Announce piece p of r's message, read by connection ch (NULL: a whole
 * message, which never needs a run); ch->claim_waiting is set if it must
 * wait for room. Kicks the connections that waited once this claim made
 * room. */
static int req_claim(tpx_sock_comm_t *c, tpx_sock_req_t *r, const tpx_sock_piece_t *p,
                     tpx_sock_chan_t *ch)
{
    req_claim_lock(r);
    int st = req_claim_range(r, p->offset, p->offset + p->len);
    if (st == SOCK_CLAIM_OVERLAP && c->failover && req_claim_covers(r, p->offset, p->offset + p->len))
        st = SOCK_CLAIM_AGAIN;
    int wake = 0;
    if (st == SOCK_CLAIM_FULL && ch == NULL)
        st = SOCK_CLAIM_OVERLAP; /* [0, total) overlaps any run: not reached */
    if (st == SOCK_CLAIM_FULL) {
        /* before the unlock: the claimer that makes room sees it */
        atomic_store(&ch->claim_waiting, 1);
        r->waiting |= 1u << (ch - c->chans);
        if (r->waiting == (1u << c->nsocks) - 1) /* see "Claims" */
            st = SOCK_CLAIM_STUCK;
    } else if (st == SOCK_CLAIM_OK && r->waiting) { /* any claim may make room (see above) */
        r->waiting = 0;
        wake = 1;
    }
    req_claim_unlock(r);
    for (int i = 0; wake && i < c->nsocks; i++)
        if (atomic_load(&c->chans[i].claim_waiting))
            tpx__sock_chan_kick(&c->chans[i]);
    return st;
}

/* Whether connection i still waits for room in the receive of `slot`
 * with no claim of it since (any thread; see "Claims"). */
int tpx__sock_req_chan_waits(tpx_sock_comm_t *c, uint32_t slot, int i)
{
    tpx_sock_req_t *r = &c->reqs[slot];
    req_claim_lock(r);
    int waits = (r->waiting >> i) & 1;
    req_claim_unlock(r);
    return waits;
}

/* Check piece p against its posted receive r and claim its bytes: 1, 0 if
 * the comm failed, SOCK_CLAIM_WAIT if it must wait for room (see
 * "Claims"; only with `ch`, the connection that read it). */
int tpx__sock_piece_check(tpx_sock_comm_t *c, const tpx_sock_piece_t *p, tpx_sock_req_t *r,
                          tpx_sock_chan_t *ch)
{
    char why[200];
    /* Failover: a copy of a piece of a message whose receive completed
     * (and maybe was posted again for a later one) is dropped. */
    if (c->failover && atomic_load_explicit(&r->seq, memory_order_relaxed) > p->seq)
        return SOCK_CLAIM_DUP;
    if (atomic_load_explicit(&r->seq, memory_order_relaxed) != p->seq) {
        snprintf(why, sizeof(why), "piece of message %llu arrived after that message completed",
                 (unsigned long long)p->seq);
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, why);
        return 0;
    }
    if (!c->tcpx && (int)p->tag != r->tag) { /* TCPX ignores tags */
        snprintf(why, sizeof(why),
                 "message %llu: sender tag %d does not match the posted receive's tag %d",
                 (unsigned long long)p->seq, (int)p->tag, r->tag);
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, why);
        return 0;
    }
    if (p->total > r->size) {
        snprintf(why, sizeof(why),
                 "message %llu of %llu bytes is larger than the posted receive of %llu bytes",
                 (unsigned long long)p->seq, (unsigned long long)p->total,
                 (unsigned long long)r->size);
        tpx__sock_comm_fail(c, TPX_ERR_TRUNCATED, why);
        return 0;
    }
    uint64_t expected = SOCK_TOTAL_UNKNOWN;
    if (!atomic_compare_exchange_strong(&r->total, &expected, p->total) &&
        expected != p->total) {
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, "pieces of one message disagree on its size");
        return 0;
    }
    if (c->failover && p->len == 0 && atomic_load(&r->claimed) != 0)
        return SOCK_CLAIM_DUP; /* a zero-byte message announced already */
    int st = req_claim(c, r, p, ch);
    if (st == SOCK_CLAIM_FULL)
        return SOCK_CLAIM_WAIT;
    if (st == SOCK_CLAIM_AGAIN) /* sent again: take over from the first copy, or drop it */
        return tpx__sock_fo_take_over(c, ch, p) ? 1 : SOCK_CLAIM_DUP;
    if (st == SOCK_CLAIM_STUCK) {
        /* rc 2 (a broken peer, as its close would be), also in strict TCPX
         * mode: the stretches are this transport's own bookkeeping, not a
         * behaviour of Google's plugin to emulate. */
        snprintf(why, sizeof(why),
                 "message %llu: each of the %d data connections holds a piece beyond a gap "
                 "none of them fills (more than %d stretches announced ahead of it): the "
                 "sender broke the order of its pieces",
                 (unsigned long long)p->seq, c->nsocks, SOCK_CLAIM_RUNS);
        tpx__sock_comm_fail(c, TPX_ERR_CONN_RESET, why);
        return 0;
    }
    if (st == SOCK_CLAIM_OVERLAP) {
        snprintf(why, sizeof(why),
                 "message %llu: a piece of bytes %llu..%llu overlaps bytes announced before",
                 (unsigned long long)p->seq, (unsigned long long)p->offset,
                 (unsigned long long)(p->offset + p->len));
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, why);
        return 0;
    }
    /* Claimed in the units of `done`: a zero-byte piece (the only kind a
     * zero-byte message has, sock_wire.c) is one unit, so that a second
     * one fails here instead of taking `done` past the 1 that completes
     * the message (its receive then hung with no error). */
    uint64_t units = p->len ? p->len : 1;
    uint64_t claimed = atomic_fetch_add(&r->claimed, units) + units;
    if (claimed > (p->total ? p->total : 1)) {
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, "more bytes announced than the message holds");
        return 0;
    }
    if (c->failover && ch != NULL && p->len > 0)
        tpx__sock_fo_begin(c, ch, p); /* ch counts them once read (a copy may take over) */
    return 1;
}

/* Bind the piece in ch->piece to its posted receive and check it:
 * CH_PROGRESS, CH_ERROR, or CH_PARKED while it waits for room to claim its
 * bytes (claim_wait: tpx__sock_chan_recv tries again when kicked). */
int tpx__sock_chan_attach(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    const tpx_sock_piece_t *p = &ch->piece;
    tpx_sock_req_t *r = &c->reqs[p->seq % (uint64_t)c->max_reqs];
    int ok = tpx__sock_piece_check(c, p, r, ch);
    ch->claim_wait = ok == SOCK_CLAIM_WAIT;
    if (ok == SOCK_CLAIM_WAIT)
        return CH_PARKED;
    atomic_store_explicit(&ch->claim_waiting, 0, memory_order_relaxed);
    if (!ok)
        return CH_ERROR;
    if (p->len == 0) {
        ch->fo_safe++; /* (counted on every comm; acknowledged where it fails over) */
        if (ok != SOCK_CLAIM_DUP)
            sock_piece_done(c, r, 1, 0);
        return CH_PROGRESS;
    }
    ch->req = r;
    ch->data_done = 0;
    ch->fo_drop = ok == SOCK_CLAIM_DUP; /* read and dropped */
    ch->active = 1;
    return CH_PROGRESS;
}
