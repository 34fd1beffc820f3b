/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_direct_write.c - isend's write from the caller's thread.
 *
 * A small message of host memory posted while a data connection of its
 * comm is idle is written by isend itself, with one non-blocking sendmsg,
 * on a connection whose turn it takes from the worker (tpx__sock_chan_own
 * / release, sock_kick.c); the worker goes on from a partial write. Never
 * in strict TCPX mode.
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
#include "common/tsan.h"
#include "sock.h"
#include "sock_io.h"

int tpx__sock_send_direct(tpx_sock_comm_t *c, tpx_sock_req_t *r, uint64_t seq)
{
    if (r->size > tpx__sock_params.direct_bytes || r->cuda_dev >= 0 || c->tcpx)
        return 0;
    /* An idle connection nobody else moves: the one the last direct write
     * used if that was a while ago (a request/response exchange: its
     * receiving worker still polls after the last message; moving on
     * would find a sleeping one, whose wake-up was most of a one-sided
     * READ's p99 on the 16-core host), the next one in a burst (messages
     * posted back to back are read by several workers at once). */
    uint64_t now = tpx__sock_mono_ns();
    int first = c->direct_chan;
    if (now - c->direct_ns < SOCK_DIRECT_BURST_NS)
        first = (first + 1) % c->nsocks;
    c->direct_ns = now;
    tpx_sock_chan_t *ch = NULL;
    for (int i = 0; i < c->nsocks && ch == NULL; i++) {
        tpx_sock_chan_t *k = &c->chans[(first + i) % c->nsocks];
        int expected = 0;
        if (!atomic_load_explicit(&k->idle, memory_order_relaxed) ||
            !atomic_compare_exchange_strong(&k->owner, &expected, SOCK_OWNER_API))
            continue;
        if (!k->active && atomic_load(&k->idle) && /* still idle now that it is ours */
            (!c->failover || (!atomic_load(&k->fo_dead) && tpx__sock_fo_log_room(k)))) {
            ch = k;
            c->direct_chan = (first + i) % c->nsocks;
        } else
            tpx__sock_chan_release(k, SOCK_OWNER_API);
    }
    if (ch == NULL)
        return 0;
    int taken = 0;
    atomic_fetch_add(&c->running, 1);
    if (atomic_load(&c->error) == 0 && !atomic_load(&c->peer_gone) &&
        !atomic_load(&c->closing)) {
        pthread_mutex_lock(&c->sched_lock);
        if (c->sched_seq == seq && c->sched_off == 0) { /* the whole message, one piece */
            ch->piece = (tpx_sock_piece_t){
                .tag = (uint32_t)r->tag,
                .len = (uint32_t)r->size,
                .seq = seq,
                .total = r->size,
                .offset = 0,
            };
            ch->req = r;
            c->sched_seq++;
            taken = 1;
            if (c->failover) /* sent once acknowledged (sock_failover.c) */
                tpx__sock_fo_log_push(ch, &ch->piece, r);
        }
        pthread_mutex_unlock(&c->sched_lock);
    }
    if (taken) {
        atomic_store_explicit(&ch->idle, 0, memory_order_relaxed);
        tpx__sock_piece_encode(&ch->piece, ch->hdr);
        ch->hdr_done = 0;
        ch->data_done = 0;
        ch->copy_done = 0;
        ch->active = 1;
        struct iovec iov[1 + SOCK_IOV_BATCH] = {{ch->hdr, TPX_SOCK_PIECE_WIRE_SIZE}};
        int n_iov = 1;
        if (r->size > 0)
            n_iov += tpx__sock_req_iov(r, 0, r->size, iov + 1, SOCK_IOV_BATCH, NULL);
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
        tpx__tsan_send_begin(ch->fd);
        ssize_t n = sendmsg(ch->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        tpx__tsan_send_end();
        if (n == (ssize_t)(TPX_SOCK_PIECE_WIRE_SIZE + r->size)) {
            TPX_TL(TPX_TR_ISEND_DIRECT, r->size);
            ch->active = 0;
            ch->bytes += r->size;
            if (!c->failover) {
                tpx__sock_tl_in_api = 1;
                sock_piece_done(c, r, r->size ? r->size : 1, r->size);
                tpx__sock_tl_in_api = 0;
            }
            /* Idle again: only this thread posts, and nothing it posted
             * waits in the scheduler (this message was the last). */
            atomic_store(&ch->idle, 1);
        } else {
            /* Partly written, would block, or failed: the worker goes on
             * from here (and reports a failure where it always does). */
            if (n > 0) {
                size_t hdr_left = TPX_SOCK_PIECE_WIRE_SIZE;
                if ((size_t)n <= hdr_left) {
                    ch->hdr_done = (uint32_t)n;
                } else {
                    ch->hdr_done = TPX_SOCK_PIECE_WIRE_SIZE;
                    ch->data_done = (uint32_t)((size_t)n - hdr_left);
                }
            }
            atomic_store(&ch->missed, 1);
        }
    }
    if (atomic_fetch_sub(&c->running, 1) == 1 && atomic_load(&c->peer_gone))
        tpx__sock_comm_closed_error(c, "the receiver closed the connection");
    tpx__sock_chan_release(ch, SOCK_OWNER_API);
    return taken;
}
