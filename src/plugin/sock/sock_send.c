/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_send.c - the sending side of a comm's data connections.
 *
 * Each message is cut into pieces that idle connections take as they
 * become free (guided self-scheduling: large pieces first, shrinking
 * toward TPX_SOCK_MIN_PIECE at the end of a message, scaled by each
 * link's delivery rate, sock_rate.c), so a slow connection never sets the
 * pace. A sending connection's turn (by its worker) takes the next piece
 * and writes header + payload with one sendmsg per attempt; CUDA payloads
 * go through the connection's staging (sock_cuda.h).
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

/* A connection of a comm whose links differ in speed gets pieces in
 * proportion to its delivery rate, against the comm's fastest connection:
 * pieces then take about as long on every link, and at the end of a burst
 * (an engine transfer's last messages) the slow link does not hold a
 * full-size piece the fast ones wait for (netns.unequal: a 1 MiB piece on a
 * connection sharing a 500 Mbit/s link with three others takes 67 ms, plus
 * what is queued ahead of it). Only below 3/4 of the fastest: equal links
 * keep equal pieces whatever noise the samples carry (sock_rate.c). Under
 * sched_lock. */
static uint64_t sched_scale(const tpx_sock_comm_t *c, const tpx_sock_chan_t *ch, uint64_t len,
                            uint64_t min)
{
    uint64_t top = 0, mine = atomic_load_explicit(&ch->rate, memory_order_relaxed);
    for (int i = 0; i < c->nsocks; i++)
        top = TPX_MAX(top, atomic_load_explicit(&c->chans[i].rate, memory_order_relaxed));
    if (mine == 0 || mine >= top - top / 4)
        return len;
    uint64_t scaled = (uint64_t)((double)len * (double)mine / (double)top);
    return TPX_MAX(scaled, min);
}

/* The next piece of the oldest message with bytes left (there is one),
 * for connection ch, under sched_lock. */
static void sched_cut(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, tpx_sock_piece_t *piece,
                      tpx_sock_req_t **req)
{
    tpx_sock_req_t *r = &c->reqs[c->sched_seq % (uint64_t)c->max_reqs];
    uint64_t left = r->size - c->sched_off;
    uint64_t len = left / (uint64_t)c->nsocks;
    /* CUDA pieces go through staging, where each piece costs a copy
     * round trip: keep them larger (while messages queue,
     * TPX_SOCK_CUDA_PIECE: 1 MiB moved 256 MiB GPU transfers 1.05-1.08x
     * faster than 512 KiB on the H100 host). With more messages queued behind
     * this one, every connection has work anyway: cutting a message
     * finer than TPX_SOCK_BUSY_PIECE only adds pieces (an engine's
     * 512 KiB chunks went out as eight 64 KiB pieces: 20-25% of its
     * throughput on a 16-core host). A lone message is still spread
     * over every connection, for its latency. */
    uint64_t min = r->cuda_dev >= 0 ? 4 * TPX_SOCK_MIN_PIECE : TPX_SOCK_MIN_PIECE;
    uint64_t max = tpx__sock_params.piece_bytes;
    int busy = atomic_load(&c->movable) - c->sched_seq > 1;
    if (busy && r->cuda_dev >= 0) {
        min = TPX_MAX(min, tpx__sock_params.cuda_piece);
        max = TPX_MAX(max, min); /* TPX_SOCK_CUDA_PIECE wins over TPX_PIECE_BYTES */
    } else if (busy) {
        min = TPX_MAX(min, TPX_SOCK_BUSY_PIECE);
    }
    len = TPX_MAX(len, min);
    len = TPX_MIN(len, max);
    if (c->links > 1)
        len = sched_scale(c, ch, len, r->cuda_dev >= 0 ? 4 * TPX_SOCK_MIN_PIECE : TPX_SOCK_MIN_PIECE);
    len = TPX_MIN(len, left);
    *piece = (tpx_sock_piece_t){
        .tag = (uint32_t)r->tag,
        .len = (uint32_t)len,
        .seq = c->sched_seq,
        .total = r->size,
        .offset = c->sched_off,
    };
    *req = r;
    c->sched_off += len;
    if (c->sched_off == r->size) {
        c->sched_seq++;
        c->sched_off = 0;
    }
}

/* Give `ch` the next piece of the oldest message with bytes left. Guided
 * self-scheduling: a piece is 1/nsocks of what is left of its message,
 * clamped to [64 KiB, TPX_PIECE_BYTES] (to 512 KiB at least while other
 * messages wait behind it), so pieces shrink as a message nears its end and
 * a slow connection cannot hold a large tail. */
static int sched_take(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    int got = 0;
    if (c->links > 1)
        tpx__sock_rate_update(ch, tpx__sock_mono_ns());
    pthread_mutex_lock(&c->sched_lock);
    if (c->failover && tpx__sock_fo_resend_take(c, &ch->piece, &ch->req)) {
        got = 1; /* a failed connection's piece first: its message waits for it */
    } else if (c->sched_seq < atomic_load(&c->movable)) { /* seq_cst: Dekker with the poster */
        sched_cut(c, ch, &ch->piece, &ch->req);
        got = 1;
    }
    pthread_mutex_unlock(&c->sched_lock);
    if (got && c->failover)
        tpx__sock_fo_log_push(ch, &ch->piece, ch->req);
    if (got) {
        tpx__sock_piece_encode(&ch->piece, ch->hdr);
        ch->hdr_done = 0;
        ch->data_done = 0;
        ch->copy_done = 0;
        ch->active = 1;
    }
    return got;
}

/* CUDA send: take the next piece ahead of its turn, while ch's current one
 * (whose copies are all queued) is written, so that the next piece's
 * copies to staging overlap the socket instead of starting after it (each
 * piece began with a wait for its first block behind every other
 * connection's copies on the copy engine). H200 host, same run: READ of
 * 1000 x 2 MiB GPU blocks 1.19x, 256 MiB transfers 1.05x, 1 MiB unchanged.
 * Only while other messages queue behind the oldest one (every connection
 * has work then; a lone message stays spread over all of them) and only a
 * piece of a CUDA buffer on the same device. */
static void sched_take_ahead(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    if (c->failover && !tpx__sock_fo_log_room(ch))
        return;
    pthread_mutex_lock(&c->sched_lock);
    uint64_t movable = atomic_load(&c->movable);
    if (c->sched_seq < movable && movable - c->sched_seq > 1 &&
        (!c->failover || c->fo_rs_tail == c->fo_rs_head) &&
        c->reqs[c->sched_seq % (uint64_t)c->max_reqs].cuda_dev == ch->req->cuda_dev) {
        sched_cut(c, ch, &ch->ahead, &ch->ahead_req);
        ch->ahead_copy_done = 0;
        if (c->failover)
            tpx__sock_fo_log_push(ch, &ch->ahead, ch->ahead_req);
    }
    pthread_mutex_unlock(&c->sched_lock);
}

int tpx__sock_sched_has_work(tpx_sock_comm_t *c)
{
    pthread_mutex_lock(&c->sched_lock);
    int has = c->sched_seq < atomic_load(&c->movable) || c->fo_rs_tail != c->fo_rs_head;
    pthread_mutex_unlock(&c->sched_lock);
    return has;
}

int tpx__sock_chan_send(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    uint64_t turn = 0;
    for (;;) {
        if (atomic_load_explicit(&c->closing, memory_order_relaxed))
            return CH_IDLE;
        if (turn >= SOCK_TURN_BYTES)
            return CH_MORE;
        if (!ch->active && c->failover && !tpx__sock_fo_log_room(ch))
            return CH_BLOCKED; /* waits for acknowledgements: their EPOLLIN edge */
        if (!ch->active && !sched_take(c, ch))
            return CH_IDLE;
        if (ch->req->cuda_dev >= 0 && ch->hdr_done == TPX_SOCK_PIECE_WIRE_SIZE) {
            if (ch->ahead_req == NULL && ch->copy_done == ch->piece.len)
                sched_take_ahead(c, ch);
            int prog = 0, r = tpx__sock_cuda_send(ch, &prog);
            if (r < 0) {
                if (r == SOCK_CUDA_FAIL)
                    tpx__sock_comm_fail(c, TPX_ERR_CUDA, "copying a CUDA buffer to staging failed");
                else if (c->failover)
                    return tpx__sock_fo_chan_dead(c, ch, errno, "send to peer failed");
                else
                    tpx__sock_comm_fail_errno(c, errno, "send to peer failed");
                return CH_ERROR;
            }
            if (r == SOCK_CUDA_WAIT) { /* moved something: its turn goes on after the others */
                if (prog || turn > 0)
                    return CH_MORE;
                TPX_TL(TPX_TR_CU_WAIT, 0);
                return CH_CUWAIT;
            }
            if (r == 0)
                return CH_BLOCKED;
            ch->active = 0;
            ch->bytes += ch->piece.len;
            turn += ch->piece.len;
            if (!c->failover) /* else once acknowledged (sock_failover.c) */
                sock_piece_done(c, ch->req, ch->piece.len ? ch->piece.len : 1, ch->piece.total);
            if (ch->ahead_req != NULL) { /* the piece taken ahead is next */
                ch->piece = ch->ahead;
                ch->req = ch->ahead_req;
                ch->ahead_req = NULL;
                ch->copy_done = ch->ahead_copy_done;
                ch->blk0 = ch->ahead_blk0;
                tpx__sock_piece_encode(&ch->piece, ch->hdr);
                ch->hdr_done = 0;
                ch->data_done = 0;
                ch->active = 1;
            }
            continue;
        }
        struct iovec iov[1 + SOCK_IOV_BATCH];
        int n_iov = 0;
        if (ch->hdr_done < TPX_SOCK_PIECE_WIRE_SIZE)
            iov[n_iov++] = (struct iovec){ch->hdr + ch->hdr_done,
                                          TPX_SOCK_PIECE_WIRE_SIZE - ch->hdr_done};
        if (ch->data_done < ch->piece.len && ch->req->cuda_dev < 0)
            n_iov += tpx__sock_req_iov(ch->req, ch->piece.offset + ch->data_done,
                                       ch->piece.len - ch->data_done, iov + n_iov,
                                       SOCK_IOV_BATCH, &ch->iov_at);
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
        tpx__tsan_send_begin(ch->fd); /* common/tsan.h: the bytes order us before the receiver */
        ssize_t n = sendmsg(ch->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        tpx__tsan_send_end();
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                ch->want_write = 1;
                TPX_TL(TPX_TR_SEND_FULL, turn);
                return CH_BLOCKED;
            }
            if (c->failover)
                return tpx__sock_fo_chan_dead(c, ch, errno, "send to peer failed");
            tpx__sock_comm_fail_errno(c, errno, "send to peer failed");
            return CH_ERROR;
        }
        turn += (uint64_t)n;
        ch->want_write = 0;
        size_t hdr_left = TPX_SOCK_PIECE_WIRE_SIZE - ch->hdr_done;
        if ((size_t)n <= hdr_left) {
            ch->hdr_done += (uint32_t)n;
        } else {
            ch->hdr_done = TPX_SOCK_PIECE_WIRE_SIZE;
            ch->data_done += (uint32_t)((size_t)n - hdr_left);
        }
        if (ch->hdr_done == TPX_SOCK_PIECE_WIRE_SIZE && ch->data_done == ch->piece.len &&
            ch->req->cuda_dev < 0) {
            ch->active = 0;
            ch->bytes += ch->piece.len;
            if (!c->failover) /* else once acknowledged (sock_failover.c) */
                sock_piece_done(c, ch->req, ch->piece.len ? ch->piece.len : 1, ch->piece.total);
        }
    }
}

/* The receiver never writes on data connections: readable means closed. */
int tpx__sock_chan_check_peer(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    char b;
    ssize_t n = recv(ch->fd, &b, 1, MSG_DONTWAIT);
    if (n == 0) {
        tpx__sock_comm_peer_closed(c, "receiver");
        return CH_ERROR;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        tpx__sock_comm_fail_errno(c, errno, "data connection failed");
        return CH_ERROR;
    }
    if (n > 0) {
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, "the receiver sent unexpected data");
        return CH_ERROR;
    }
    return CH_IDLE;
}
