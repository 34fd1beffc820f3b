/*
 * sock_io.c - the helper threads that move a comm's bytes.
 *
 * Each helper serves a fixed subset of the comm's data connections with
 * non-blocking I/O and sleeps in poll() when none can move. Sending: an idle
 * connection takes the next piece from the comm's scheduler (sched_take) and
 * writes header + payload with one sendmsg per attempt. Receiving: a
 * connection reads a piece header, finds the posted receive for its message
 * number, checks it (tag, size, bounds) and reads the payload straight into
 * the user buffer. A header that arrives before its receive is posted
 * "parks" the connection: its payload stays in the kernel (TCP flow control
 * pushes back) until irecv wakes the helper.
 *
 * Completion is published with one atomic add per piece; test() reads it.
 * Nothing here allocates or logs on the data path; the first error of a
 * comm is logged once, stored, and every helper stops moving data.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/tsan.h"
#include "sock.h"
#include "sock_tables.h"

enum { CH_IDLE = 0, CH_PROGRESS = 1, CH_BLOCKED = 2, CH_PARKED = 3, CH_EOF = 4, CH_ERROR = -1 };

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
    for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++) {
        c->chans[i].fd = -1;
        c->workers[i].efd = -1;
    }
    return c;
}

void tpx__sock_comm_fail(tpx_sock_comm_t *c, tpx_status_t st, const char *why)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->error, &expected, (int)st))
        SOCK_WARN("%s comm %p (conn %016llx): %s", c->kind == SOCK_COMM_SEND ? "send" : "recv",
                  (void *)c, (unsigned long long)c->conn_id, why);
    tpx__sock_comm_wake(c, 0);
}

static void comm_peer_closed(tpx_sock_comm_t *c, const char *who);

static void comm_fail_errno(tpx_sock_comm_t *c, int err, const char *what)
{
    if ((err == ECONNRESET || err == EPIPE) &&
        atomic_load(&c->finished) == atomic_load(&c->posted)) {
        /* A reset with nothing in flight: the peer closed with data of ours
         * unread (a goodbye). No byte of a message was lost. */
        comm_peer_closed(c, "peer (reset)");
        return;
    }
    char why[160];
    snprintf(why, sizeof(why), "%s: %s", what, strerror(err));
    tpx__sock_comm_fail(c, tpx__status_from_errno(err), why);
}

void tpx__sock_comm_wake(tpx_sock_comm_t *c, int only_sleeping)
{
    for (int t = 0; t < c->nthreads; t++) {
        tpx_sock_worker_t *w = &c->workers[t];
        if (w->efd < 0)
            continue;
        /* A sleeping receive helper needs a post only if it parked a piece. */
        if (only_sleeping && (!atomic_load(&w->sleeping) ||
                              (c->kind == SOCK_COMM_RECV && !atomic_load(&w->parked_wait))))
            continue;
        uint64_t one = 1;
        ssize_t n = write(w->efd, &one, sizeof(one));
        (void)n; /* EAGAIN: the counter is already non-zero, a wake-up is pending */
    }
}

/* Publish `units` more of a message (bytes; 1 for a zero-byte message). */
static inline void piece_done(tpx_sock_comm_t *c, tpx_sock_req_t *r, uint64_t units,
                              uint64_t total)
{
    uint64_t target = total ? total : 1;
    if (atomic_fetch_add_explicit(&r->done, units, memory_order_release) + units == target) {
        atomic_fetch_add_explicit(&c->finished, 1, memory_order_relaxed);
        /* An engine asleep until something completes: wake it (once per
         * arming: no system call while it is awake and polling). */
        tpx_net_wake_t *w = atomic_load_explicit(&c->wake, memory_order_acquire);
        if (w != NULL && atomic_load_explicit(&w->armed, memory_order_relaxed) &&
            atomic_exchange(&w->armed, 0)) {
            uint64_t one = 1;
            ssize_t n = write(w->fd, &one, sizeof(one));
            (void)n; /* EAGAIN: a wake-up is pending already */
        }
    }
}

void tpx__sock_comm_set_wake(void *comm, void *wake)
{
    tpx_sock_comm_t *c = comm;
    if (c != NULL && (c->magic == SOCK_COMM_MAGIC_SEND || c->magic == SOCK_COMM_MAGIC_RECV))
        atomic_store_explicit(&c->wake, (tpx_net_wake_t *)wake, memory_order_release);
}

/* Set the "peer closed" error, quietly: between pieces no byte was lost,
 * and whether the requests still posted matter is the caller's call. */
static void comm_closed_error(tpx_sock_comm_t *c, const char *why)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->error, &expected, TPX_ERR_CONN_RESET))
        SOCK_INFO("comm %p: %s (%llu message(s) posted and not complete)", (void *)c, why,
                  (unsigned long long)(atomic_load(&c->posted) - atomic_load(&c->finished)));
    tpx__sock_comm_wake(c, 0);
}

/* The peer went away. On a send comm another helper may have written the
 * last bytes of a message and not yet published them: the error is set
 * only when every helper has stopped (see worker_main), so a message the
 * peer fully received is never reported as failed. */
static void comm_peer_closed(tpx_sock_comm_t *c, const char *who)
{
    if (c->kind == SOCK_COMM_SEND) {
        atomic_store(&c->peer_gone, 1);
        tpx__sock_comm_wake(c, 0);
        return;
    }
    char why[96];
    snprintf(why, sizeof(why), "the %s closed the connection", who);
    comm_closed_error(c, why);
}

/* ---- sending ---------------------------------------------------------------- */

/* Give `ch` the next piece of the oldest message with bytes left. Guided
 * self-scheduling: a piece is 1/nsocks of what is left of its message,
 * clamped to [64 KiB, TPX_PIECE_BYTES], so pieces shrink as a message nears
 * its end and a slow connection cannot hold a large tail. */
static int sched_take(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    int got = 0;
    pthread_mutex_lock(&c->sched_lock);
    if (c->sched_seq < atomic_load_explicit(&c->movable, memory_order_acquire)) {
        tpx_sock_req_t *r = &c->reqs[c->sched_seq % (uint64_t)c->max_reqs];
        uint64_t left = r->size - c->sched_off;
        uint64_t len = left / (uint64_t)c->nsocks;
        /* CUDA pieces go through staging, where each piece costs a copy
         * round trip: keep them larger. */
        len = TPX_MAX(len, r->cuda_dev >= 0 ? 4 * TPX_SOCK_MIN_PIECE : TPX_SOCK_MIN_PIECE);
        len = TPX_MIN(len, tpx__sock_params.piece_bytes);
        len = TPX_MIN(len, left);
        ch->piece = (tpx_sock_piece_t){
            .tag = (uint32_t)r->tag,
            .len = (uint32_t)len,
            .seq = c->sched_seq,
            .total = r->size,
            .offset = c->sched_off,
        };
        ch->req = r;
        c->sched_off += len;
        if (c->sched_off == r->size) {
            c->sched_seq++;
            c->sched_off = 0;
        }
        got = 1;
    }
    pthread_mutex_unlock(&c->sched_lock);
    if (got) {
        tpx__sock_piece_encode(&ch->piece, ch->hdr);
        ch->hdr_done = 0;
        ch->data_done = 0;
        ch->copy_done = 0;
        ch->active = 1;
    }
    return got;
}

static int sched_has_work(tpx_sock_comm_t *c)
{
    pthread_mutex_lock(&c->sched_lock);
    int has = c->sched_seq < atomic_load(&c->movable);
    pthread_mutex_unlock(&c->sched_lock);
    return has;
}

static int chan_send(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    int moved = 0;
    for (;;) {
        if (atomic_load_explicit(&c->closing, memory_order_relaxed))
            return CH_IDLE;
        if (!ch->active && !sched_take(c, ch))
            return moved ? CH_PROGRESS : CH_IDLE;
        if (ch->req->cuda_dev >= 0 && ch->hdr_done == TPX_SOCK_PIECE_WIRE_SIZE) {
            int prog = 0, r = tpx__sock_cuda_send(ch, &prog);
            moved |= prog;
            if (r < 0) {
                if (errno == 0)
                    tpx__sock_comm_fail(c, TPX_ERR_CUDA, "copying a CUDA buffer to staging failed");
                else
                    comm_fail_errno(c, errno, "send to peer failed");
                return CH_ERROR;
            }
            if (r == 0)
                return moved ? CH_PROGRESS : CH_BLOCKED;
            ch->active = 0;
            ch->bytes += ch->piece.len;
            piece_done(c, ch->req, ch->piece.len, ch->piece.total);
            continue;
        }
        struct iovec iov[2];
        int n_iov = 0;
        if (ch->hdr_done < TPX_SOCK_PIECE_WIRE_SIZE)
            iov[n_iov++] = (struct iovec){ch->hdr + ch->hdr_done,
                                          TPX_SOCK_PIECE_WIRE_SIZE - ch->hdr_done};
        if (ch->data_done < ch->piece.len && ch->req->cuda_dev < 0)
            iov[n_iov++] = (struct iovec){ch->req->buf + ch->piece.offset + ch->data_done,
                                          ch->piece.len - ch->data_done};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
        tpx__tsan_send_begin(ch->fd); /* common/tsan.h: the bytes order us before the receiver */
        ssize_t n = sendmsg(ch->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        tpx__tsan_send_end();
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                ch->want_write = 1;
                return moved ? CH_PROGRESS : CH_BLOCKED;
            }
            comm_fail_errno(c, errno, "send to peer failed");
            return CH_ERROR;
        }
        moved = 1;
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
            piece_done(c, ch->req, ch->piece.len ? ch->piece.len : 1, ch->piece.total);
        }
    }
}

/* The receiver never writes on data connections: readable means closed. */
static int chan_check_peer(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    char b;
    ssize_t n = recv(ch->fd, &b, 1, MSG_DONTWAIT);
    if (n == 0) {
        comm_peer_closed(c, "receiver");
        return CH_ERROR;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        comm_fail_errno(c, errno, "data connection failed");
        return CH_ERROR;
    }
    if (n > 0) {
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, "the receiver sent unexpected data");
        return CH_ERROR;
    }
    return CH_IDLE;
}

/* ---- receiving -------------------------------------------------------------- */

/* Bind the piece in ch->piece to its posted receive and check it. */
static int chan_attach(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    const tpx_sock_piece_t *p = &ch->piece;
    tpx_sock_req_t *r = &c->reqs[p->seq % (uint64_t)c->max_reqs];
    char why[200];
    if (atomic_load_explicit(&r->seq, memory_order_relaxed) != p->seq) {
        snprintf(why, sizeof(why), "piece of message %llu arrived after that message completed",
                 (unsigned long long)p->seq);
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, why);
        return CH_ERROR;
    }
    if (!c->tcpx && (int)p->tag != r->tag) { /* TCPX ignores tags */
        snprintf(why, sizeof(why),
                 "message %llu: sender tag %d does not match the posted receive's tag %d",
                 (unsigned long long)p->seq, (int)p->tag, r->tag);
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, why);
        return CH_ERROR;
    }
    if (p->total > r->size) {
        snprintf(why, sizeof(why),
                 "message %llu of %llu bytes is larger than the posted receive of %llu bytes",
                 (unsigned long long)p->seq, (unsigned long long)p->total,
                 (unsigned long long)r->size);
        tpx__sock_comm_fail(c, TPX_ERR_TRUNCATED, why);
        return CH_ERROR;
    }
    uint64_t expected = SOCK_TOTAL_UNKNOWN;
    if (!atomic_compare_exchange_strong(&r->total, &expected, p->total) &&
        expected != p->total) {
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, "pieces of one message disagree on its size");
        return CH_ERROR;
    }
    uint64_t claimed = atomic_fetch_add(&r->claimed, p->len) + p->len;
    if (claimed > p->total || (p->len == 0 && claimed != 0)) {
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL, "more bytes announced than the message holds");
        return CH_ERROR;
    }
    if (p->len == 0) {
        piece_done(c, r, 1, 0);
        return CH_PROGRESS;
    }
    ch->req = r;
    ch->data_done = 0;
    ch->active = 1;
    return CH_PROGRESS;
}

static int chan_recv(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    int moved = 0;
    for (;;) {
        if (atomic_load_explicit(&c->closing, memory_order_relaxed))
            return CH_IDLE;
        if (ch->parked) {
            if (atomic_load_explicit(&c->movable, memory_order_acquire) <= ch->piece.seq)
                return moved ? CH_PROGRESS : CH_PARKED;
            ch->parked = 0;
            if (chan_attach(c, ch) == CH_ERROR)
                return CH_ERROR;
            moved = 1;
            continue;
        }
        /* Through staging: a CUDA buffer, or (strict TCPX) a GPU bounce buffer. */
        if (ch->active && (ch->req->bounce ? c->gpu >= 0 : ch->req->cuda_dev >= 0)) {
            int prog = 0, r = tpx__sock_cuda_recv(ch, &prog);
            moved |= prog;
            if (r < 0) {
                if (errno == 0)
                    tpx__sock_comm_fail(c, TPX_ERR_CUDA, "copying staging to a CUDA buffer failed");
                else
                    comm_fail_errno(c, errno, "receive from peer failed");
                return CH_ERROR;
            }
            if (r == 0)
                return moved ? CH_PROGRESS : CH_BLOCKED;
            ch->active = 0;
            ch->bytes += ch->piece.len;
            piece_done(c, ch->req, ch->piece.len, ch->piece.total);
            continue;
        }
        struct iovec iov[64];
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 1};
        if (!ch->active) {
            iov[0] = (struct iovec){ch->hdr + ch->hdr_done,
                                    TPX_SOCK_PIECE_WIRE_SIZE - ch->hdr_done};
        } else if (!ch->req->bounce) {
            iov[0] = (struct iovec){ch->req->buf + ch->piece.offset + ch->data_done,
                                    ch->piece.len - ch->data_done};
        } else { /* devmem-style: into the (emulated) bounce pages of the slot */
            uint32_t slot = (uint32_t)(ch->piece.seq % (uint64_t)c->max_reqs);
            msg.msg_iovlen = (size_t)tpx__sock_tcpx_iov(c, slot, ch->piece.offset + ch->data_done,
                                                        ch->piece.len - ch->data_done,
                                                        c->bounce_io, iov, 64);
        }
        ssize_t n = recvmsg(ch->fd, &msg, MSG_DONTWAIT);
        if (n > 0)
            tpx__tsan_sock_received(ch->fd);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return moved ? CH_PROGRESS : CH_BLOCKED;
            comm_fail_errno(c, errno, "receive from peer failed");
            return CH_ERROR;
        }
        if (n == 0) {
            if ((ch->active || ch->hdr_done != 0) && c->tcpx) {
                /* Google's plugin only ends its helper thread: test() keeps
                 * saying "not done"; the caller must give up on its own
                 * deadline. */
                if (!atomic_exchange(&c->hung, 1))
                    SOCK_WARN("comm %p: the sender closed the connection in the middle of a "
                              "message (TCPX emulation: test() will not report it)", (void *)c);
                return CH_ERROR;
            }
            if (ch->active || ch->hdr_done != 0) {
                tpx__sock_comm_fail(c, TPX_ERR_CONN_RESET,
                                    "the sender closed the connection in the middle of a message");
                return CH_ERROR;
            }
            return CH_EOF;
        }
        moved = 1;
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
                ch->parked = 1;
                continue;
            }
            if (chan_attach(c, ch) == CH_ERROR)
                return CH_ERROR;
            continue;
        }
        ch->data_done += (uint32_t)n;
        if (ch->data_done == ch->piece.len) {
            ch->active = 0;
            ch->bytes += ch->piece.len;
            piece_done(c, ch->req, ch->piece.len, ch->piece.total);
        }
    }
}

/* ---- the helper loop ---------------------------------------------------------- */

static void *worker_main(void *arg)
{
    tpx_sock_worker_t *w = arg;
    tpx_sock_comm_t *c = w->comm;
    const int send = c->kind == SOCK_COMM_SEND;
    int eof[TPX_SOCK_MAX_SOCKS] = {0};
    char name[16];
    snprintf(name, sizeof(name), "tpx-%s%d", send ? "tx" : "rx", w->first);
    pthread_setname_np(pthread_self(), name);

    struct pollfd pfd[1 + TPX_SOCK_MAX_SOCKS];
    int stopped = 0;
    while (!atomic_load_explicit(&c->closing, memory_order_acquire)) {
        if (!stopped && atomic_load(&c->peer_gone)) {
            stopped = 1; /* everything this helper moved is published */
            if (atomic_fetch_add(&c->helpers_stopped, 1) + 1 == c->nthreads)
                comm_closed_error(c, "the receiver closed the connection");
        }
        int healthy = atomic_load_explicit(&c->error, memory_order_relaxed) == 0 && !stopped &&
                      !atomic_load_explicit(&c->hung, memory_order_relaxed);
        int progress = 0, parked = 0;
        if (healthy) {
            for (int i = w->first; i < c->nsocks; i += w->stride) {
                tpx_sock_chan_t *ch = &c->chans[i];
                if (eof[i])
                    continue;
                int r = send ? chan_send(c, ch) : chan_recv(c, ch);
                if (r == CH_PROGRESS)
                    progress = 1;
                else if (r == CH_PARKED)
                    parked = 1;
                else if (r == CH_EOF) {
                    /* A clean close between pieces is how a sender's close
                     * arrives; the peer is gone only when every data
                     * connection has ended (later data may sit on others). */
                    eof[i] = 1;
                    if (atomic_fetch_add(&c->eof_chans, 1) + 1 == c->nsocks)
                        comm_peer_closed(c, "sender");
                } else if (r == CH_ERROR) {
                    break;
                }
            }
        }
        if (progress)
            continue;

        /* Nothing moved: sleep until a connection is ready or we are woken. */
        int n = 0;
        pfd[n++] = (struct pollfd){.fd = w->efd, .events = POLLIN};
        if (healthy) {
            for (int i = w->first; i < c->nsocks; i += w->stride) {
                tpx_sock_chan_t *ch = &c->chans[i];
                if (eof[i] || ch->parked)
                    continue;
                short ev = send ? (short)(POLLIN | (ch->active && ch->want_write ? POLLOUT : 0))
                                : (short)POLLIN;
                pfd[n++] = (struct pollfd){.fd = ch->fd, .events = ev};
            }
        }
        atomic_store(&w->parked_wait, parked);
        atomic_store(&w->sleeping, 1);
        /* Re-check after announcing sleep: a post that raced with us either
         * sees `sleeping` and writes the eventfd, or is seen here. */
        int recheck = 0;
        if (healthy && send) {
            for (int i = w->first; i < c->nsocks; i += w->stride)
                recheck |= !c->chans[i].active && !eof[i];
            recheck = recheck && sched_has_work(c);
        } else if (healthy && parked) {
            for (int i = w->first; i < c->nsocks; i += w->stride)
                recheck |= c->chans[i].parked &&
                           atomic_load(&c->movable) > c->chans[i].piece.seq;
        }
        if (!recheck && !atomic_load(&c->closing))
            (void)poll(pfd, (nfds_t)n, 1000);
        atomic_store(&w->sleeping, 0);
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(w->efd, &v, sizeof(v));
            (void)r;
        }
        if (send && healthy) {
            /* Readable data connection on the send side: peer closed. */
            for (int k = 1; k < n; k++) {
                if (!(pfd[k].revents & (POLLIN | POLLERR | POLLHUP)))
                    continue;
                for (int i = w->first; i < c->nsocks; i += w->stride)
                    if (c->chans[i].fd == pfd[k].fd &&
                        chan_check_peer(c, &c->chans[i]) == CH_ERROR)
                        break;
            }
        }
    }
    return NULL;
}

tpx_status_t tpx__sock_comm_start(tpx_sock_comm_t *c)
{
    c->max_reqs = tpx__sock_params.tcpx ? SOCK_TCPX_MAX_REQS : tpx__sock_params.max_reqs;
    if (tpx__sock_params.tcpx) {
        tpx_status_t st = tpx__sock_tcpx_comm_init(c);
        if (st != TPX_OK)
            return st;
    }
    c->reqs = calloc((size_t)c->max_reqs, sizeof(*c->reqs));
    if (c->reqs == NULL)
        return TPX_ERR_NO_MEMORY;
    for (int i = 0; i < c->max_reqs; i++) {
        c->reqs[i].comm = c;
        atomic_store(&c->reqs[i].seq, UINT64_MAX);
    }
    pthread_mutex_init(&c->sched_lock, NULL);
    int nt = tpx__sock_params.nthreads;
    c->nthreads = (nt <= 0 || nt > c->nsocks) ? c->nsocks : nt;
    for (int t = 0; t < c->nthreads; t++) {
        tpx_sock_worker_t *w = &c->workers[t];
        w->comm = c;
        w->first = t;
        w->stride = c->nthreads;
        w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (w->efd < 0) {
            SOCK_WARN("eventfd: %s", strerror(errno));
            return tpx__status_from_errno(errno);
        }
    }
    for (int t = 0; t < c->nthreads; t++) {
        tpx_sock_worker_t *w = &c->workers[t];
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            SOCK_WARN("cannot start a helper thread: %s", strerror(rc));
            return TPX_ERR_NO_RESOURCE;
        }
        w->started = 1;
    }
    return TPX_OK;
}

void tpx__sock_comm_destroy(tpx_sock_comm_t *c)
{
    if (c == NULL)
        return;
    atomic_store(&c->closing, 1);
    tpx__sock_comm_wake(c, 0);
    /* Join every helper before closing any eventfd: a helper may still wake
     * the others while it stops. */
    for (int t = 0; t < TPX_SOCK_MAX_SOCKS; t++)
        if (c->workers[t].started)
            pthread_join(c->workers[t].thread, NULL);
    for (int t = 0; t < TPX_SOCK_MAX_SOCKS; t++)
        if (c->workers[t].efd >= 0)
            close(c->workers[t].efd);
    for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++) {
        tpx__sock_cuda_chan_free(&c->chans[i]);
        if (c->chans[i].fd >= 0)
            close(c->chans[i].fd);
    }
    if (c->ctrl_fd >= 0)
        close(c->ctrl_fd);
    if (c->reqs != NULL) {
        pthread_mutex_destroy(&c->sched_lock);
        free(c->reqs);
    }
    tpx__sock_tcpx_comm_free(c);
    c->magic = 0;
    free(c);
}
