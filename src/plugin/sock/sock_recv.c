/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_recv.c - a receiving connection's turn.
 *
 * A connection reads a piece header, finds the posted receive for its
 * message number, checks it (tag, size, bounds: sock_claim.c) and reads the
 * payload straight into the user buffer (CUDA buffers through the
 * connection's staging, sock_cuda.h). A header that arrives before its
 * receive is posted parks the connection, its payload left in the kernel,
 * unless the message is taken eagerly (sock_eager.c).
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
#include "sock_cuda.h"
#include "sock_io.h"

/* The sender closed a connection in the middle of a message. */
int tpx__sock_chan_recv_cut(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    if (c->failover) /* the sender sends its pieces again on the others */
        return tpx__sock_fo_recv_dead(c, ch, ECONNRESET,
                                      "the sender closed it in the middle of a piece");
    if (c->tcpx) {
        /* Google's plugin only ends its helper thread: test() keeps saying
         * "not done"; the caller must give up on its own deadline. The same
         * for a receive through the GPU bounce buffer. */
        if (!atomic_exchange(&c->hung, 1))
            SOCK_WARN("comm %p: the sender closed the connection in the middle of a message "
                      "(TCPX emulation: test() will not report it)",
                      (void *)c);
        return CH_ERROR;
    }
    tpx__sock_comm_fail(c, TPX_ERR_CONN_RESET,
                        "the sender closed the connection in the middle of a message");
    return CH_ERROR;
}

/* One turn of a receiving connection, by its owner: its worker, or (`api`)
 * the thread of a direct read (tpx__sock_recv_direct), which moves host
 * memory only and stops with CH_MORE where a CUDA copy or its turn's
 * budget (`budget` bytes) would begin: the worker goes on from there. */
int tpx__sock_chan_recv(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int api, uint64_t budget)
{
    uint64_t turn = 0;
    for (;;) {
        if (atomic_load_explicit(&c->closing, memory_order_relaxed))
            return CH_IDLE;
        if (turn >= budget)
            return CH_MORE;
        if (ch->eager_held) {
            int r = tpx__sock_eager_parked(c, ch, api);
            if (r != CH_PROGRESS)
                return r;
            continue;
        }
        if (c->failover && atomic_load_explicit(&ch->fo_dead, memory_order_relaxed))
            return CH_EOF; /* failed: ends as a close (what it held safe is delivered) */
        if (ch->claim_wait) { /* kicked: room to claim its bytes now? */
            int r = tpx__sock_chan_attach(c, ch);
            if (r != CH_PROGRESS)
                return r;
            continue;
        }
        if (atomic_load_explicit(&ch->parked, memory_order_relaxed)) {
            /* seq_cst: after our seq_cst store of `parked` (Dekker with the poster) */
            if (atomic_load(&c->movable) <= ch->piece.seq)
                return CH_PARKED;
            atomic_store_explicit(&ch->parked, 0, memory_order_relaxed);
            TPX_TL(TPX_TR_UNPARKED, ch->piece.seq);
            int r = tpx__sock_chan_attach(c, ch);
            if (r != CH_PROGRESS)
                return r;
            continue;
        }
        /* Through staging: a CUDA buffer, or (strict TCPX) a GPU bounce buffer. */
        if (ch->active && !ch->fo_drop &&
            (ch->req->bounce ? c->gpu >= 0 : ch->req->cuda_dev >= 0)) {
            if (api)
                return CH_MORE;
            int prog = 0, r = tpx__sock_cuda_recv(ch, &prog);
            if (r == SOCK_CUDA_CLOSED)
                return tpx__sock_chan_recv_cut(c, ch);
            if (r < 0) {
                if (r == SOCK_CUDA_FAIL)
                    tpx__sock_comm_fail(c, TPX_ERR_CUDA, "copying staging to a CUDA buffer failed");
                else if (c->failover)
                    return tpx__sock_fo_recv_dead(c, ch, errno, "receive from peer failed");
                else
                    tpx__sock_comm_fail_errno(c, errno, "receive from peer failed");
                return CH_ERROR;
            }
            if (r == SOCK_CUDA_WAIT) {
                if (prog || turn > 0)
                    return CH_MORE;
                TPX_TL(TPX_TR_CU_WAIT, 1);
                return CH_CUWAIT;
            }
            if (r == 0)
                return CH_BLOCKED;
            /* Read; published by tpx__sock_cuda_reap once its copies finished. */
            ch->fo_safe++; /* (counted on every comm; acknowledged where it fails over) */
            ch->active = 0;
            ch->bytes += ch->piece.len;
            turn += ch->piece.len;
            continue;
        }
        struct iovec iov[SOCK_IOV_BATCH];
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 1};
        int flags = MSG_DONTWAIT;
        if (ch->eager_fill) {
            iov[0] = (struct iovec){ch->eager + ch->data_done, ch->piece.len - ch->data_done};
        } else if (!ch->active) {
            iov[0] = (struct iovec){ch->hdr + ch->hdr_done,
                                    TPX_SOCK_PIECE_WIRE_SIZE - ch->hdr_done};
        } else if (ch->fo_drop || (c->failover && !tpx__sock_fo_write_begin(c, ch))) {
            ch->fo_drop = 1; /* a copy the receive has: TCP drops MSG_TRUNC bytes */
            iov[0] = (struct iovec){NULL, ch->piece.len - ch->data_done};
            flags |= MSG_TRUNC;
        } else if (!ch->req->bounce) {
            msg.msg_iovlen = (size_t)tpx__sock_req_iov(ch->req, ch->piece.offset + ch->data_done,
                                                       ch->piece.len - ch->data_done, iov,
                                                       SOCK_IOV_BATCH, &ch->iov_at);
        } else { /* devmem-style: into the (emulated) bounce pages of the slot */
            uint32_t slot = (uint32_t)(ch->piece.seq % (uint64_t)c->max_reqs);
            msg.msg_iovlen = (size_t)tpx__sock_tcpx_iov(c, slot, ch->piece.offset + ch->data_done,
                                                        ch->piece.len - ch->data_done,
                                                        c->bounce_io, iov, SOCK_IOV_BATCH);
        }
        ssize_t n = recvmsg(ch->fd, &msg, flags);
        if (c->failover)
            tpx__sock_fo_write_end(ch);
        if (n > 0)
            tpx__tsan_sock_received(ch->fd);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                TPX_TL(TPX_TR_RECV_DRY, turn);
                return CH_BLOCKED;
            }
            if (c->failover)
                return tpx__sock_fo_recv_dead(c, ch, errno, "receive from peer failed");
            tpx__sock_comm_fail_errno(c, errno, "receive from peer failed");
            return CH_ERROR;
        }
        if (n == 0) {
            if (ch->active || ch->eager_fill || ch->hdr_done != 0)
                return tpx__sock_chan_recv_cut(c, ch);
            return CH_EOF;
        }
        turn += (uint64_t)n;
        if (ch->eager_fill) {
            ch->data_done += (uint32_t)n;
            if (ch->data_done == ch->piece.len)
                tpx__sock_eager_hold(ch);
            continue;
        }
        if (!ch->active) {
            ch->hdr_done += (uint32_t)n;
            if (ch->hdr_done < TPX_SOCK_PIECE_WIRE_SIZE)
                continue;
            ch->hdr_done = 0;
            if (tpx__sock_piece_decode(ch->hdr, &ch->piece) != TPX_OK) {
                tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, "malformed piece header from the sender");
                return CH_ERROR;
            }
            if (atomic_load_explicit(&c->movable, memory_order_acquire) <= ch->piece.seq) {
                if (tpx__sock_eager_take(c, ch)) {
                    ch->data_done = 0;
                    ch->eager_fill = 1;
                    if (ch->piece.len == 0)
                        tpx__sock_eager_hold(ch);
                    continue;
                }
                atomic_store(&ch->parked, 1); /* re-checked at the top, after this store */
                TPX_TL(TPX_TR_PARKED, ch->piece.seq);
                continue;
            }
            int r = tpx__sock_chan_attach(c, ch);
            if (r != CH_PROGRESS)
                return r;
            continue;
        }
        ch->data_done += (uint32_t)n;
        if (ch->data_done == ch->piece.len) {
            ch->active = 0;
            ch->bytes += ch->piece.len;
            ch->fo_safe++; /* (counted on every comm; acknowledged where it fails over) */
            if (ch->fo_drop)
                ch->fo_drop = 0; /* a copy: its bytes counted once, elsewhere */
            else if (!c->failover || tpx__sock_fo_settle(c, ch))
                sock_piece_done(c, ch->req, ch->piece.len, ch->piece.total);
        }
    }
}
