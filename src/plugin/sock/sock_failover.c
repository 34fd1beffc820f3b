/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_failover.c - a comm that survives the failure of some of its data
 * connections (a NIC of a virtual device going down or black-holing).
 *
 * A comm fails over when its data connections span several NICs and
 * TPX_SOCK_FAILOVER asks for it (never in strict TCPX mode, whose
 * semantics are Google's plugin's): the sender tells the receiver in its
 * hellos (TPX_SOCK_HELLO_ACKS), and from then on:
 *
 *  - The receiver acknowledges, on each data connection, how many pieces
 *    it has read off that connection into memory it delivers them from
 *    without the connection (the user buffer, the eager buffer, CUDA
 *    staging whose copies run on): an 8-byte cumulative count, sent at the
 *    end of the connection's turn when it grew (sock_wire.h). TCP is
 *    two-way, so the acknowledgements cost no connection; they cost one
 *    small write per turn of a receiving connection that read pieces.
 *
 *  - The sender keeps, per connection, the pieces it took and the
 *    receiver has not acknowledged (at most SOCK_FO_LOG: the connection
 *    takes no more until acknowledgements come), and a message's bytes
 *    count as sent only once acknowledged: a send request completes (its
 *    buffer may be reused) when the receiver has every piece of it, not
 *    when the kernel took the bytes. Nothing is copied: the buffer is the
 *    copy kept for a resend. CUDA pieces sent again go through staging
 *    again.
 *
 *  - A connection fails on a socket error (EPIPE, ECONNRESET), or when
 *    its I/O worker's stall detector finds its path dead: the peer's TCP
 *    answered nothing for TPX_SOCK_STALL_MS although it owes an answer
 *    (sock_stall.c; a receiver that only reads slowly answers its window
 *    probes, and is never one). Its
 *    unacknowledged pieces go to the comm's resend queue, which every
 *    other connection takes from before it cuts new pieces; the
 *    connection is aborted (an RST, its queues dropped: no byte of it
 *    may reach the receiver later) and never used again; a new
 *    connection replaces it once its NIC works (sock_rejoin.c), if both
 *    ends can. The comm fails as before only
 *    when every data connection has. The detector costs nothing on the
 *    data path: the worker looks a few times per TPX_SOCK_STALL_MS, and
 *    asks the kernel only about a connection that owes something and
 *    moved nothing since its last look (sock_worker.c, "Stalls").
 *
 *  - The receiver places pieces by offset, so a piece received twice is
 *    harmless to the bytes; it must not count twice. A piece sent again
 *    covers bytes announced before (sock_claim.c): if a connection is
 *    still reading an earlier copy (it may never finish: its NIC died),
 *    the new copy is read too, the first read whole counts and the others
 *    write no byte after it (sock_comm.c, "failover"); if the bytes were
 *    counted already, or the message is complete, it is read and dropped.
 *    A receiving connection that fails (reset, timed out, cut in the
 *    middle of a piece) ends like one the sender closed; what it held
 *    safe (acknowledged) is still delivered.
 *
 * A data connection that could not be made at connect (sock_conn.c,
 * "Members down at connect") is, from the start, one that failed with
 * nothing to move (tpx__sock_fo_start_missing).
 *
 * Tells: a NIC that loses its link (set down, its carrier gone) is seen
 * by the I/O workers of its own host at once (sock_worker.c, "Links"),
 * but TCP at the other end learns nothing until its retransmission
 * timeouts (200 ms and more) and then the stall rules, and a sender that
 * waits for its last pieces on that connection waits that long: READs of
 * 1000 x 128 KiB with two of four NICs lost 2 s of every 5 at the
 * requester's end found their owner's connections dead 0.3-0.6 s after the
 * loss, and 1-2 s after it where the connection held the transfer's last
 * pieces (no sibling's acknowledgement then to take the word of). So a
 * receiver whose connection's NIC lost its link tells the sender, on the
 * first of the comm's other connections whose turn flushes its
 * acknowledgements: an 8-byte word with TPX_SOCK_ACK_TELL set and bit i
 * for connection i (sock_wire.h). The sender fails those connections over
 * as it would on their error (their owners' next turn). Only between
 * builds that both say so (TPX_SOCK_HANDLE_CAP_TELL, TPX_SOCK_HELLO_TELL);
 * a tell that comes after its connection was already replaced costs one
 * more replacement. A sender's own NIC that lost its link is seen by its
 * own workers the same way.
 *
 * A comm that does not fail over pays nothing: none of this runs, and its
 * sends complete when the kernel took the bytes, as ever.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"
#include "sock.h"
#include "sock_io.h"

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

tpx_status_t tpx__sock_fo_start(tpx_sock_comm_t *c)
{
    for (int i = 0; i < c->nsocks; i++) {
        c->chans[i].ack_off = sizeof(c->chans[i].ack_buf);
        /* the NIC whose link the workers look at ("Tells"); a connection
         * that starts missing learns its own when it joins */
        c->chans[i].nic = c->failover && !atomic_load(&c->chans[i].fo_dead)
                              ? tpx__sock_dev_of_fd(c->chans[i].fd)
                              : -1;
    }
    if (!c->failover || c->kind != SOCK_COMM_SEND)
        return TPX_OK;
    size_t n = (size_t)c->nsocks * SOCK_FO_LOG;
    c->fo_resend = calloc(n, sizeof(*c->fo_resend));
    if (c->fo_resend == NULL)
        return TPX_ERR_NO_MEMORY;
    for (int i = 0; i < c->nsocks; i++) {
        c->chans[i].fo_log = calloc(SOCK_FO_LOG, sizeof(*c->chans[i].fo_log));
        if (c->chans[i].fo_log == NULL)
            return TPX_ERR_NO_MEMORY;
    }
    return TPX_OK;
}

void tpx__sock_fo_free(tpx_sock_comm_t *c)
{
    for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++) {
        free(c->chans[i].fo_log);
        c->chans[i].fo_log = NULL;
    }
    free(c->fo_resend);
    c->fo_resend = NULL;
}

void tpx__sock_fo_start_missing(tpx_sock_comm_t *c, int i)
{
    tpx_sock_chan_t *ch = &c->chans[i];
    atomic_store(&ch->fo_dead, 1);
    atomic_fetch_add(&c->fo_dead_chans, 1);
    if (c->kind == SOCK_COMM_RECV) {
        /* As one the sender closed: its rejoin reopens it (sock_rejoin_turn.c). */
        ch->eof = 1;
        atomic_fetch_add(&c->eof_chans, 1);
        atomic_store(&ch->gone, SOCK_CHAN_ENDED);
        atomic_fetch_add(&c->gone_chans, 1);
    } else if (c->rejoin) {
        ch->rj_since_ns = tpx__sock_mono_ns();
        atomic_store(&ch->rj_phase, SOCK_RJ_PHASE_DEAD);
    }
}

int tpx__sock_fo_resend_take(tpx_sock_comm_t *c, tpx_sock_piece_t *piece, tpx_sock_req_t **req)
{
    if (c->fo_rs_tail == c->fo_rs_head)
        return 0;
    uint64_t cap = (uint64_t)c->nsocks * SOCK_FO_LOG;
    const tpx_sock_fo_ent_t *e = &c->fo_resend[c->fo_rs_tail++ % cap];
    *piece = e->piece;
    *req = e->req;
    atomic_fetch_add_explicit(&c->fo_resent, 1, memory_order_relaxed);
    return 1;
}

/* The receiver acknowledged `acked` pieces of ch: their bytes are sent. */
static int fo_acked(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, uint64_t acked)
{
    if (acked < ch->fo_tail || acked > ch->fo_head) {
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL,
                            "the receiver acknowledged pieces that were never sent");
        return CH_ERROR;
    }
    if (acked == ch->fo_tail)
        return CH_IDLE;
    while (ch->fo_tail < acked) {
        const tpx_sock_fo_ent_t *e = &ch->fo_log[ch->fo_tail++ % SOCK_FO_LOG];
        sock_piece_done(c, e->req, e->piece.len ? e->piece.len : 1, e->piece.total);
    }
    /* the receiver lives and reads: the stall looks at the other
     * connections take its word (sock_stall.c; a clock read per
     * acknowledgement, one per receiving turn of the peer) */
    if (tpx__sock_params.stall_ms > 0)
        atomic_store_explicit(&ch->stall_ack_ns, tpx__sock_mono_ns(), memory_order_relaxed);
    return CH_IDLE;
}

/* The receiver's tell ("Tells"): the connections in `word` lost their NIC
 * at its end; their owners fail them over in their next turn. */
static int fo_told(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, uint64_t word)
{
    uint64_t set = word & ~TPX_SOCK_ACK_TELL;
    if (!c->tell || set == 0 || set >= (1ull << c->nsocks)) {
        tpx__sock_comm_fail(c, TPX_ERR_PROTOCOL,
                            "the receiver told of lost links this comm did not ask about "
                            "or does not have");
        return CH_ERROR;
    }
    for (int i = 0; i < c->nsocks; i++) {
        tpx_sock_chan_t *o = &c->chans[i];
        if (!(set & (1ull << i)) || o == ch || atomic_load(&o->fo_dead))
            continue;
        atomic_store(&o->fo_told, 1);
        tpx__sock_chan_kick(o);
    }
    return CH_IDLE;
}

int tpx__sock_fo_take_told(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    if (!atomic_exchange(&ch->fo_told, 0) || atomic_load(&ch->fo_dead))
        return CH_IDLE;
    ch->link_lost = SOCK_LINK_TOLD;
    return tpx__sock_fo_chan_dead(c, ch, ENETDOWN, "told");
}

int tpx__sock_fo_read_acks(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    for (;;) {
        ssize_t n = recv(ch->fd, ch->ack_buf + ch->ack_len, sizeof(ch->ack_buf) - ch->ack_len,
                         MSG_DONTWAIT);
        if (n == 0) {
            /* The receiver closed: every acknowledgement ch will get is
             * read. One with nothing unacknowledged just ends (the others
             * may still hold acknowledgements to read); the receiver is
             * gone once all did, or at once if ch carried pieces it never
             * acknowledged (their messages cannot complete). */
            ch->eof = 1;
            int ended = atomic_fetch_add(&c->eof_chans, 1) + 1;
            if (ch->fo_tail != ch->fo_head || ch->active ||
                ended + atomic_load(&c->fo_dead_chans) >= c->nsocks)
                tpx__sock_comm_peer_closed(c, "receiver");
            return CH_ERROR;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return CH_IDLE;
            return tpx__sock_fo_chan_dead(c, ch, errno, "data connection failed");
        }
        ch->ack_len += (uint32_t)n;
        if (ch->ack_len == sizeof(ch->ack_buf)) {
            ch->ack_len = 0;
            uint64_t word = get64(ch->ack_buf);
            if (((word & TPX_SOCK_ACK_TELL) ? fo_told(c, ch, word) : fo_acked(c, ch, word)) ==
                CH_ERROR)
                return CH_ERROR;
        }
    }
}

int tpx__sock_fo_chan_dead(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int err, const char *what)
{
    if (atomic_load_explicit(&ch->fo_dead, memory_order_relaxed))
        return CH_IDLE;
    char stalled[160];
    if (ch->link_lost != 0) {
        /* A look at its link ended it (sock_worker.c, "Links"), or the
         * receiver told ("Tells"). */
        const tpx_sock_dev_t *d = ch->link_lost == SOCK_LINK_HERE ? tpx__sock_dev(ch->nic) : NULL;
        if (d != NULL)
            snprintf(stalled, sizeof(stalled), "its NIC %s lost its link", d->name);
        else
            snprintf(stalled, sizeof(stalled),
                     "its NIC at the receiver's end lost its link (the receiver said so on "
                     "another connection)");
        err = ENETDOWN;
        what = stalled;
    } else if (ch->stall_dead_ms != 0) {
        /* The stall detector aborted it (sock_worker.c): that is why, not
         * the reset the abort left on the socket. */
        snprintf(stalled, sizeof(stalled), "no answer from the peer's TCP for %u ms%s",
                 ch->stall_dead_ms,
                 ch->stall_sib ? ", while it acknowledged the others' pieces" : "");
        err = ETIMEDOUT;
        what = stalled;
    }
    atomic_store(&ch->fo_dead, 1);
    atomic_store(&ch->idle, 0); /* no direct write picks it */
    /* Abort it (an RST, its queues dropped): whatever the error was (an
     * unreachable network leaves the connection alive), no byte of it may
     * reach the receiver later, where a copy sent again may have completed
     * the message and its buffer been reused. The descriptor stays open
     * (its worker's epoll set holds it) until the comm closes. */
    struct sockaddr unspec = {.sa_family = AF_UNSPEC};
    (void)connect(ch->fd, &unspec, sizeof(unspec));
    int idx = (int)(ch - c->chans);
    uint64_t moved = 0;
    if (c->kind == SOCK_COMM_SEND) {
        /* Its pieces not acknowledged go to the resend queue: room for
         * them, since a connection fails once and holds at most
         * SOCK_FO_LOG. The piece being written (and a CUDA piece taken
         * ahead) are among them: taken pieces are logged at once. */
        uint64_t cap = (uint64_t)c->nsocks * SOCK_FO_LOG;
        pthread_mutex_lock(&c->sched_lock);
        for (; ch->fo_tail < ch->fo_head; ch->fo_tail++, moved++)
            c->fo_resend[c->fo_rs_head++ % cap] = ch->fo_log[ch->fo_tail % SOCK_FO_LOG];
        pthread_mutex_unlock(&c->sched_lock);
        ch->active = 0;
        ch->ahead_req = NULL;
    }
    int dead = atomic_fetch_add(&c->fo_dead_chans, 1) + 1;
    if (c->rejoin && c->kind == SOCK_COMM_SEND && dead < c->nsocks) {
        /* The rejoin thread replaces it once its NIC works (sock_rejoin.c). */
        ch->rj_since_ns = tpx__sock_mono_ns();
        atomic_store(&ch->rj_phase, SOCK_RJ_PHASE_DEAD);
        tpx__sock_rejoin_wake();
    }
    if (c->kind == SOCK_COMM_SEND && dead < c->nsocks &&
        dead + atomic_load(&c->eof_chans) >= c->nsocks) {
        /* The others were closed by the receiver: it is gone (its close
         * reset the connections it had not read to the end). */
        tpx__sock_comm_peer_closed(c, "receiver");
        return CH_ERROR;
    }
    if (dead == c->nsocks) {
        char why[256];
        snprintf(why, sizeof(why), "every data connection failed (the last: %s: %s)", what,
                 strerror(err));
        tpx__sock_comm_fail(c, TPX_ERR_CONN_RESET, why);
        return CH_ERROR;
    }
    if (c->kind == SOCK_COMM_SEND)
        SOCK_WARN("send comm %p (conn %016llx): data connection %d failed (%s: %s); its %llu "
                  "unacknowledged piece(s) go to the %d other connection(s)",
                  (void *)c, (unsigned long long)c->conn_id, idx, what, strerror(err),
                  (unsigned long long)moved, c->nsocks - dead);
    else
        SOCK_WARN("recv comm %p (conn %016llx): data connection %d failed (%s: %s); the %d "
                  "other connection(s) go on",
                  (void *)c, (unsigned long long)c->conn_id, idx, what, strerror(err),
                  c->nsocks - dead);
    if (c->kind == SOCK_COMM_SEND)
        for (int i = 0; i < c->nsocks; i++)
            if (&c->chans[i] != ch && !atomic_load(&c->chans[i].fo_dead))
                tpx__sock_chan_kick(&c->chans[i]);
    return CH_IDLE;
}

int tpx__sock_fo_recv_dead(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int err, const char *what)
{
    if (tpx__sock_fo_chan_dead(c, ch, err, what) == CH_ERROR)
        return CH_ERROR;
    return CH_EOF; /* ends like a connection the sender closed (sock_closed.c) */
}

void tpx__sock_fo_ack_flush(tpx_sock_comm_t *c, tpx_sock_chan_t *ch)
{
    if (atomic_load_explicit(&ch->fo_dead, memory_order_relaxed))
        return;
    for (;;) {
        if (ch->ack_off == sizeof(ch->ack_buf)) {
            /* a tell first ("Tells"): whichever live connection flushes
             * first takes it */
            uint32_t tell = c->tell && atomic_load_explicit(&c->fo_tell, memory_order_relaxed)
                                ? atomic_exchange(&c->fo_tell, 0)
                                : 0;
            if (tell != 0) {
                put64(ch->ack_buf, TPX_SOCK_ACK_TELL | tell);
            } else {
                if (ch->fo_safe == ch->fo_acked)
                    return;
                put64(ch->ack_buf, ch->fo_safe);
                ch->fo_acked = ch->fo_safe;
            }
            ch->ack_off = 0;
        }
        ssize_t n = send(ch->fd, ch->ack_buf + ch->ack_off, sizeof(ch->ack_buf) - ch->ack_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return; /* the sender reads them: the next turn goes on */
            /* Its next turn ends it (sock_recv.c): an error seen here is
             * the socket's, and reading reports it again. */
            tpx__sock_chan_kick(ch);
            return;
        }
        ch->ack_off += (uint32_t)n;
    }
}
