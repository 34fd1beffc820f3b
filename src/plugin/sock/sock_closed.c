/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_closed.c - what a sender's close leaves on a receiving comm
 * (sock_io.h, "Closed connections"): a close between pieces is how a
 * sender's close arrives, one cut through a piece fails the comm, and a
 * comm whose connections all ended, hold only messages not posted yet, or
 * wait with no claim since fails as closed by the peer.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/config.h"
#include "sock.h"
#include "sock_io.h"

/* Record what the sender's close left on ch (its owner). */
static void chan_set_gone(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, uint64_t gone)
{
    uint64_t was = atomic_exchange(&ch->gone, gone); /* seq_cst: Dekker with the poster */
    if (was == SOCK_CHAN_OPEN && gone != SOCK_CHAN_OPEN)
        atomic_fetch_add(&c->gone_chans, 1);
    else if (was != SOCK_CHAN_OPEN && gone == SOCK_CHAN_OPEN)
        atomic_fetch_sub(&c->gone_chans, 1);
}

void tpx__sock_chan_reopen(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    if (ch->eof) {
        ch->eof = 0;
        atomic_fetch_sub(&c->eof_chans, 1);
    }
    ch->hup = 0;
    chan_set_gone(c, ch, SOCK_CHAN_OPEN);
}

/* Every data connection ended or holds only a message not posted yet: the
 * receives posted and not complete can never complete. Fail the comm as
 * the peer's close (test(): rc 2, done 0), as when every connection ended;
 * with nothing pending the held messages are still delivered when posted.
 * A connection holding a posted message is being kicked to deliver it. */
static void comm_recv_starved(tpx_sock_comm_t *c)
{
    if (c->tcpx)
        return; /* TCPX reports a close from the first connection's end (test_tcpx) */
    uint64_t movable = atomic_load(&c->movable); /* seq_cst: after our store of `gone` */
    for (int i = 0; i < c->nsocks; i++) {
        uint64_t gone = atomic_load(&c->chans[i].gone);
        if (gone == SOCK_CHAN_OPEN || gone < movable)
            return;
        /* A waiter let in by a claim since it parked is being kicked to
         * move on: it may still complete its receive. */
        if (gone == SOCK_CHAN_WAITS &&
            !tpx__sock_req_chan_waits(c, atomic_load(&c->chans[i].wait_slot), i))
            return;
    }
    if (movable > atomic_load(&c->finished))
        tpx__sock_comm_peer_closed(c, "sender");
}

void tpx__sock_recv_posted(tpx_sock_comm_t *c)
{
    if (atomic_load(&c->gone_chans) == c->nsocks) /* seq_cst: after the poster's `movable` */
        comm_recv_starved(c);
}

/* A receiving connection's owner read its clean end: a close between
 * pieces is how a sender's close arrives; the peer is gone only when
 * every data connection has ended (later data may sit on others). */
static void chan_recv_eof(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    ch->eof = 1;
    chan_set_gone(c, ch, SOCK_CHAN_ENDED);
    if (atomic_fetch_add(&c->eof_chans, 1) + 1 == c->nsocks)
        tpx__sock_comm_peer_closed(c, "sender");
    else
        comm_recv_starved(c);
}

/* ch parked (holds a message eagerly, or waits to claim a piece's bytes)
 * and the sender closed it: its socket holds all that will ever come. A
 * parked piece whose payload is not all there was cut by the close; else
 * ch holds its message for a receive to come. Only on a hang-up: one
 * ioctl per parking. */
static int chan_recv_hup(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    /* Strict TCPX mode keeps Google's plugin's hang: a sender gone in the
     * middle of a message is never reported to the receiver (docs/tcpx.md's
     * table; the caller's deadline ends it, as it must with TCPX). */
    if (c->tcpx)
        return CH_PARKED;
    uint64_t seq = ch->eager_held ? atomic_load(&ch->eager_seq) : ch->piece.seq;
    if (!ch->claim_wait && atomic_load_explicit(&ch->gone, memory_order_relaxed) == seq)
        return CH_PARKED; /* looked at already, since it parked */
    if (!ch->eager_held) {
        int avail = 0, err = 0;
        socklen_t len = sizeof(err);
        if (ioctl(ch->fd, FIONREAD, &avail) != 0 ||
            getsockopt(ch->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            if (c->failover)
                return tpx__sock_fo_recv_dead(c, ch, err != 0 ? err : errno,
                                              "receive from peer failed");
            tpx__sock_comm_fail_errno(c, err != 0 ? err : errno, "receive from peer failed");
            return CH_ERROR;
        }
        if ((uint64_t)avail < ch->piece.len) /* a parked piece's payload is all unread */
            return tpx__sock_chan_recv_cut(c, ch);
    }
    if (ch->claim_wait) {
        /* Its piece waits for room, which only a connection still open can
         * make ("Claims"): stuck unless a claim let it in since. Looked at
         * on every turn that finds it waiting again, since each such claim
         * may have made another connection's check pass. */
        atomic_store(&ch->wait_slot, (uint32_t)(seq % (uint64_t)c->max_reqs));
        seq = SOCK_CHAN_WAITS;
    }
    chan_set_gone(c, ch, seq);
    comm_recv_starved(c);
    return CH_PARKED;
}

/* What a receiving connection's turn (tpx__sock_chan_recv's result r) says about the
 * sender's close; returns r, or what the close makes of it. Its owner. */
int tpx__sock_chan_recv_settle(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int r)
{
    if (ch->hup && r == CH_PARKED)
        r = chan_recv_hup(c, ch); /* CH_EOF: a comm that fails over lost ch (the cut) */
    else if (ch->hup && !ch->eof && r != CH_ERROR && r != CH_IDLE && r != CH_EOF)
        chan_set_gone(c, ch, SOCK_CHAN_OPEN); /* moving again: unparked by a post */
    if (r == CH_EOF)
        chan_recv_eof(c, ch);
    return r;
}
