/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_rejoin_turn.c - the owner's side of a rejoin (sock_rejoin.c): the
 * turn in which a connection's I/O worker takes a new socket in place of
 * a failed one, and, on the sender, reads the receiver's welcome before
 * the connection takes pieces again. Apart from the rejoin thread's file
 * because the worker calls it and it calls what the worker's turns call.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"
#include "sock_cuda.h"
#include "sock_io.h"

tpx_status_t tpx__sock_chan_swap_fd(tpx_sock_chan_t *ch, int fd)
{
    tpx_sock_worker_t *w = ch->worker;
    if (ch->registered) {
        (void)epoll_ctl(w->ep, EPOLL_CTL_DEL, ch->fd, NULL);
        ch->registered = 0;
    }
    close(ch->fd);
    ch->fd = fd;
    struct epoll_event ev = {
        .events =
            EPOLLIN | EPOLLRDHUP | EPOLLET | (ch->comm->kind == SOCK_COMM_SEND ? EPOLLOUT : 0),
        .data.ptr = ch,
    };
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
        return tpx__status_from_errno(errno);
    ch->registered = 1;
    ch->events = 0;
    return TPX_OK;
}

int tpx__sock_rejoin_turn(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    const int idx = (int)(ch - c->chans);
    if (atomic_load(&c->error) != 0)
        return 0; /* final; destroy closes a socket not taken */
    if (c->kind == SOCK_COMM_RECV) {
        int fd = atomic_load(&ch->rj_fd);
        /* What the failed connection holds for delivery stays until it is
         * delivered (the rejoin thread kicks us again). */
        if (ch->eager_held || ch->eager_fill || atomic_load(&ch->eager_state) != SOCK_EAGER_NONE)
            return 1;
        if (!atomic_load(&ch->fo_dead)) {
            /* The sender aborted it: ours may not know yet (a black hole). */
            if (tpx__sock_fo_recv_dead(c, ch, ECONNRESET, "replaced by a new connection") ==
                CH_ERROR)
                return 0;
            (void)tpx__sock_chan_recv_settle(c, ch, CH_EOF);
        }
        if (atomic_load(&c->error) != 0 || !ch->eof)
            return 0;
        if (ch->cu != NULL) {
            /* Its staging: the pieces it read are delivered when their
             * copies to the GPU end (they were acknowledged: safe); then a
             * new ring is made with the new connection's first CUDA piece. */
            int progress = 0, left = tpx__sock_cuda_reap(ch, &progress);
            if (left < 0) {
                tpx__sock_comm_fail(c, TPX_ERR_CUDA, "a CUDA copy out of staging failed");
                return 0;
            }
            if (left > 0)
                return 1; /* the rejoin thread kicks us again */
            tpx__sock_cuda_chan_free(ch);
        }
        tpx__sock_fo_forget_live(c, ch);
        atomic_store(&ch->rj_fd, -1);
        tpx_status_t st = tpx__sock_chan_swap_fd(ch, fd);
        if (st != TPX_OK) {
            tpx__sock_comm_fail(c, st, "epoll_ctl of a new data connection failed");
            return 0;
        }
        ch->active = 0;
        atomic_store(&ch->parked, 0);
        ch->hdr_done = ch->data_done = 0;
        ch->req = NULL;
        ch->fo_safe = ch->fo_acked = 0;
        ch->fo_drop = 0;
        ch->claim_wait = 0;
        atomic_store(&ch->claim_waiting, 0);
        ch->stall_dead_ms = 0;
        ch->stall_seen = UINT64_MAX;
        ch->link_lost = 0;
        ch->nic = tpx__sock_dev_of_fd(fd);
        ch->link_ok = 0; /* its NIC's link flag may lag (sock_worker.c, "Links") */
        /* The welcome: an acknowledgement of 0 pieces, written at the end
         * of this turn (tpx__sock_fo_ack_flush). */
        memset(ch->ack_buf, 0, sizeof(ch->ack_buf));
        ch->ack_off = 0;
        tpx__sock_chan_reopen(c, ch);
        atomic_store(&ch->fo_dead, 0);
        atomic_fetch_sub(&c->fo_dead_chans, 1);
        atomic_fetch_add(&c->fo_rejoined, 1);
        SOCK_INFO("recv comm %p (conn %016llx): data connection %d replaced by a new one",
                  (void *)c, (unsigned long long)c->conn_id, idx);
        return 1;
    }

    int fd = atomic_exchange(&ch->rj_fd, -1);
    if (fd >= 0) {
        /* Its staging goes (its pieces went to the resend queue when it
         * failed, long before: their copies ended); a new ring is made with
         * the new connection's first CUDA piece. */
        tpx__sock_cuda_chan_free(ch);
        ch->copy_done = ch->ahead_copy_done = 0;
        ch->blk0 = ch->ahead_blk0 = 0;
        tpx_status_t st = tpx__sock_chan_swap_fd(ch, fd);
        if (st != TPX_OK) {
            tpx__sock_comm_fail(c, st, "epoll_ctl of a new data connection failed");
            return 0;
        }
        ch->active = 0;
        ch->want_write = 0;
        ch->eof = 0;
        ch->hdr_done = ch->data_done = 0;
        ch->req = NULL;
        ch->ahead_req = NULL;
        ch->fo_head = ch->fo_tail = 0;
        ch->ack_len = 0;
        ch->stall_dead_ms = 0;
        ch->stall_sib = 0;
        ch->stall_seen = UINT64_MAX;
        ch->link_lost = 0;
        ch->nic = tpx__sock_dev_of_fd(fd);
        ch->link_ok = 0; /* its NIC's link flag may lag (sock_worker.c, "Links") */
        atomic_store(&ch->fo_told, 0); /* a tell of the connection it replaces */
        atomic_store(&ch->rate, 0);
        ch->rate_ns = 0;
        ch->lowat = TPX_SOCK_VDEV_LOWAT_MAX;
        ch->rj_joining = 1;
    }
    /* Joining: no piece before the receiver's welcome (an acknowledgement
     * of 0 pieces). */
    while (ch->ack_len < sizeof(ch->ack_buf)) {
        ssize_t n = recv(ch->fd, ch->ack_buf + ch->ack_len, sizeof(ch->ack_buf) - ch->ack_len,
                         MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0) { /* refused, or the path died again: another attempt */
            ch->rj_joining = 0;
            ch->ack_len = 0;
            atomic_store(&ch->rj_phase, SOCK_RJ_PHASE_DEAD);
            tpx__sock_rejoin_wake();
            return 0;
        }
        ch->ack_len += (uint32_t)n;
    }
    ch->ack_len = 0;
    ch->rj_joining = 0;
    for (size_t i = 0; i < sizeof(ch->ack_buf); i++)
        if (ch->ack_buf[i] != 0) {
            tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, "a new data connection's welcome was not 0");
            return 0;
        }
    atomic_fetch_sub(&c->fo_dead_chans, 1);
    atomic_store(&ch->fo_dead, 0);
    atomic_store(&ch->rj_phase, SOCK_RJ_PHASE_LIVE);
    atomic_fetch_add(&c->fo_rejoined, 1);
    SOCK_INFO("send comm %p (conn %016llx): data connection %d rejoined %llu ms after it failed",
              (void *)c, (unsigned long long)c->conn_id, idx,
              (unsigned long long)((tpx__sock_mono_ns() - ch->rj_since_ns) / 1000000u));
    tpx__sock_rejoin_wake(); /* its attempts start over next time */
    return 1;
}
