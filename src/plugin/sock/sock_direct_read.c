/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_direct_read.c - a lone small receive read on the caller's thread.
 *
 * When a receive is the only one in flight on its comm (the request /
 * response exchange whose wake-ups this saves) and a connection holds its
 * piece, irecv or test() takes the connection's turn from its worker
 * (tpx__sock_chan_own / release, sock_kick.c) and reads host memory
 * itself; whatever it cannot finish (a CUDA copy, a turn's budget) the
 * worker goes on with.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "sock.h"
#include "sock_io.h"

/* TPX_FAULT_DIRECT_DRY_US (tests): widen the window between a dry read and
 * the look at `missed`. */
static void direct_fault_wait(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int tpx__sock_recv_direct(tpx_sock_comm_t *c, tpx_sock_req_t *r)
{
    uint64_t max = tpx__sock_params.direct_bytes;
    /* Only a lone receive (nothing else in flight on the comm): that is
     * the request/response exchange whose wake-ups this saves. A stream
     * keeps several receives posted, and its workers move them in parallel
     * better than one API thread contending with them for the connections
     * (64 KiB two-sided transfers: 0.84x with direct reads of every
     * receive, H200 host, 16 CPUs). */
    if (r->size > max || r->cuda_dev >= 0 || r->bounce || c->tcpx ||
        atomic_load_explicit(&c->posted, memory_order_relaxed) -
                atomic_load_explicit(&c->finished, memory_order_relaxed) >
            1 ||
        atomic_load_explicit(&c->error, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&c->closing, memory_order_relaxed))
        return 0;
    int moved = 0;
    tpx__sock_tl_in_api = 1;
    for (int i = 0; i < c->nsocks; i++) {
        tpx_sock_chan_t *ch = &c->chans[i];
        int expected = 0;
        if (ch->worker == NULL || atomic_load_explicit(&ch->owner, memory_order_relaxed) != 0 ||
            !atomic_compare_exchange_strong(&ch->owner, &expected, SOCK_OWNER_API))
            continue;
        uint64_t before = ch->bytes;
        uint64_t done = atomic_load_explicit(&c->finished, memory_order_relaxed);
        /* A connection that ever carried a CUDA piece stays with its
         * worker (copies in flight, published in order with its close). */
        int st = CH_IDLE;
        for (int pass = 0; !ch->eof && ch->cu == NULL && pass < SOCK_DIRECT_PASSES; pass++) {
            st = tpx__sock_chan_recv(c, ch, 1, 2 * max);
            if (st == CH_BLOCKED && TPX_UNLIKELY(tpx__sock_params.fault_dry_ns != 0))
                direct_fault_wait(tpx__sock_params.fault_dry_ns);
            /* Read dry. A worker that found the connection ours meanwhile
             * set `missed`: what woke it was either read here already or
             * came after this pass's last read, and its edge is spent.
             * Only a pass that starts after `missed` was taken back proves
             * the socket holds nothing for it (taking it back after the
             * pass lost the second case: the bytes stayed in the socket
             * and the receives behind them, which only the worker moves,
             * waited until their deadline). */
            if (st != CH_BLOCKED || !atomic_exchange(&ch->missed, 0))
                break;
            st = CH_MORE; /* after the last pass: the worker goes on */
        }
        st = tpx__sock_chan_recv_settle(c, ch, st);
        if (c->failover)
            tpx__sock_fo_ack_flush(c, ch);
        if (st == CH_MORE)
            atomic_store(&ch->missed, 1); /* the worker goes on from here */
        if (ch->bytes != before)
            ch->api_bytes += ch->bytes - before;
        if (ch->bytes != before || atomic_load_explicit(&c->finished, memory_order_relaxed) != done)
            moved = 1;
        tpx__sock_chan_release(ch, SOCK_OWNER_API);
    }
    tpx__sock_tl_in_api = 0;
    if (moved)
        TPX_TL(TPX_TR_RECV_DIRECT, r->size);
    return moved;
}
