/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_eager.c - eager receives: a message of at most TPX_SOCK_EAGER_BYTES
 * that arrives in one piece before its receive is posted is read at once
 * into the connection's eager buffer, and the connection parks holding it;
 * the irecv that posts its receive copies it out itself (sock_io.h says
 * why: no worker wake-up on the path of a small request/answer exchange).
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
#include "sock_cuda.h"
#include "sock_io.h"

/* The header just read can be taken eagerly: a whole small message, the
 * buffer grown to hold it. */
int tpx__sock_eager_take(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    const tpx_sock_piece_t *p = &ch->piece;
    uint32_t max = tpx__sock_params.eager_bytes;
    if (max == 0 || c->tcpx || p->offset != 0 || p->len != p->total || p->len > max)
        return 0;
    if (p->len > ch->eager_cap) {
        uint32_t cap = ch->eager_cap ? ch->eager_cap : 4096;
        while (cap < p->len)
            cap *= 2;
        unsigned char *b = realloc(ch->eager, cap);
        if (b == NULL)
            return 0; /* park as without eager receives */
        ch->eager = b;
        ch->eager_cap = cap;
    }
    return 1;
}

/* The eager payload is complete: park holding it (re-checked at the top
 * of tpx__sock_chan_recv, after these stores: Dekker with irecv). */
void tpx__sock_eager_hold(tpx_sock_chan_t *ch)
{
    ch->eager_fill = 0;
    ch->bytes += ch->piece.len;
    ch->fo_safe++; /* delivered from `eager`, whatever becomes of the connection */
    TPX_TL(TPX_TR_EAGER_HELD, ch->piece.len);
    tpx__sock_tl_small_ns = tpx__sock_mono_ns();
    ch->eager_held = 1;
    atomic_store(&ch->eager_seq, ch->piece.seq);
    atomic_store(&ch->eager_state, SOCK_EAGER_READY);
    atomic_store(&ch->parked, 1);
}

/* Deliver the message held in ch->eager to its posted receive. The caller
 * owns the held message (took it from READY). Worker or irecv; only the
 * worker may copy into CUDA memory. Returns 0 if the comm failed. */
static int eager_deliver(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    const tpx_sock_piece_t *p = &ch->piece;
    tpx_sock_req_t *r = &c->reqs[p->seq % (uint64_t)c->max_reqs];
    int ok = tpx__sock_piece_check(c, p, r, NULL); /* [0, total): never waits */
    if (ok == SOCK_CLAIM_DUP)
        return 1; /* failover: a copy of a message delivered already */
    if (ok != 1)
        return 0;
    if (p->len > 0 && r->cuda_dev >= 0) {
        if (tpx__sock_cuda_eager_copy(ch, r->cuda_dev, r->buf, ch->eager, p->len) != TPX_OK) {
            tpx__sock_comm_fail(c, TPX_ERR_CUDA, "copying a small message to a CUDA buffer failed");
            return 0;
        }
    } else if (p->len > 0) {
        tpx__sock_req_copy_in(r, ch->eager, p->len);
    }
    sock_piece_done(c, r, p->len ? p->len : 1, p->total);
    return 1;
}

/* The connection's owner, parked holding a message eagerly: CH_PARKED
 * while its receive is not posted (or irecv is copying it out),
 * CH_PROGRESS once it is delivered (by irecv or here), CH_ERROR;
 * CH_MORE when `api` (a direct read, see tpx__sock_chan_recv) would have to copy it
 * into CUDA memory: the worker does that. */
int tpx__sock_eager_parked(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int api)
{
    for (;;) {
        int st = atomic_load(&ch->eager_state);
        if (st == SOCK_EAGER_TAKING)
            return CH_PARKED; /* irecv kicks us when it is done, if bytes wait */
        if (st == SOCK_EAGER_NONE) {
            ch->eager_held = 0;
            atomic_store(&ch->parked, 0);
            return CH_PROGRESS;
        }
        /* seq_cst: after our seq_cst store of READY (Dekker with irecv) */
        if (atomic_load(&c->movable) <= ch->piece.seq)
            return CH_PARKED;
        if (api && c->reqs[ch->piece.seq % (uint64_t)c->max_reqs].cuda_dev >= 0)
            return CH_MORE;
        int expected = SOCK_EAGER_READY;
        if (atomic_compare_exchange_strong(&ch->eager_state, &expected, SOCK_EAGER_NONE)) {
            ch->eager_held = 0;
            atomic_store(&ch->parked, 0);
            return eager_deliver(c, ch) ? CH_PROGRESS : CH_ERROR;
        }
    }
}

int tpx__sock_recv_eager(tpx_sock_comm_t *c, tpx_sock_req_t *r, uint64_t seq)
{
    if (r->cuda_dev >= 0 || r->bounce)
        return 0;
    for (int i = 0; i < c->nsocks; i++) {
        tpx_sock_chan_t *ch = &c->chans[i];
        /* seq_cst: after irecv's seq_cst store of `movable` */
        if (atomic_load(&ch->eager_state) != SOCK_EAGER_READY ||
            atomic_load(&ch->eager_seq) != seq)
            continue;
        int expected = SOCK_EAGER_READY;
        if (!atomic_compare_exchange_strong(&ch->eager_state, &expected, SOCK_EAGER_TAKING))
            return 0; /* its worker saw the receive and delivers it */
        if (atomic_load(&ch->eager_seq) != seq) {
            /* The worker delivered ours and holds a later one by now. */
            atomic_store(&ch->eager_state, SOCK_EAGER_READY);
            tpx__sock_chan_kick(ch);
            return 0;
        }
        tpx__sock_tl_in_api = 1;
        int ok = eager_deliver(c, ch);
        tpx__sock_tl_in_api = 0;
        TPX_TL(TPX_TR_EAGER_IRECV, r->size);
        atomic_store(&ch->parked, 0);
        atomic_store(&ch->eager_state, SOCK_EAGER_NONE); /* the worker may read on */
        /* More bytes (or the sender's close) behind it: the worker goes on.
         * Bytes that come later raise an epoll edge of their own. */
        char b;
        ssize_t n = recv(ch->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (!ok || n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            tpx__sock_chan_kick(ch);
        return 1;
    }
    return 0;
}
