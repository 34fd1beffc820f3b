/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_ctrl.c - a peer's outgoing control stream: control messages queued
 * on its outbox in sequence, posted into the control send comm's window
 * as slots free up, and the doorbell that wakes a peer that may be asleep.
 *
 * Used by the layers that decide what to say (rma.c, peer_pass.c, peer.c
 * and the API); a message with a body gets it from its owner transfer
 * through the owner's kind's ops (xfer.h) as it takes a send slot. A
 * failure to post fails the peer (peer_fail.c).
 */
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "engine.h"
#include "mem.h"
#include "peer.h"
#include "window.h"
#include "xfer.h"

/* A full ring of `n` elements of `size` bytes, the first at *head, in a
 * new array of twice *cap (64 at first), in order from its slot 0: the new
 * array (the old one freed, *cap and *head set), or NULL with nothing
 * changed when there is no memory. */
static void *ring_grow(void *ring, size_t size, uint32_t n, uint32_t *cap, uint32_t *head)
{
    uint32_t ncap = *cap ? *cap * 2 : 64;
    unsigned char *nb = malloc(ncap * size);
    if (nb == NULL)
        return NULL;
    for (uint32_t i = 0; i < n; i++)
        memcpy(nb + i * size, (unsigned char *)ring + ((*head + i) % *cap) * size, size);
    free(ring);
    *cap = ncap;
    *head = 0;
    return nb;
}

tpx_status_t tpx__peer_ctrl_post(tpx_peer_t *p, const unsigned char msg[TPX_CTRL_MSG_SIZE],
                                 tpx_xfer_t *owner, uint32_t body_len, int answer)
{
    if (p->outbox_n == p->outbox_cap) {
        tpx_ctrl_out_t *nb =
            ring_grow(p->outbox, sizeof(*nb), p->outbox_n, &p->outbox_cap, &p->outbox_head);
        if (nb == NULL)
            return TPX_ERR_NO_MEMORY;
        p->outbox = nb;
    }
    tpx_ctrl_out_t *o = &p->outbox[(p->outbox_head + p->outbox_n) % p->outbox_cap];
    memcpy(o->msg, msg, TPX_CTRL_MSG_SIZE);
    o->owner = owner;
    o->body_len = body_len;
    o->answer = answer;
    p->outbox_n++;
    p->outbox_answers += answer != 0;
    return TPX_OK;
}

/* Send a control message (its seq is assigned here, in posting order). */
tpx_status_t tpx__peer_ctrl_send(tpx_peer_t *p, tpx_ctrl_t *m, tpx_xfer_t *owner)
{
    unsigned char msg[TPX_CTRL_MSG_SIZE];
    m->seq = p->send_seq;
    tpx__ctrl_encode(m, msg);
    tpx_status_t st = tpx__peer_ctrl_post(p, msg, owner, m->body_len,
                                          m->type == TPX_CTRL_RMA_RESP);
    if (st == TPX_OK)
        p->send_seq++;
    return st;
}

/* ---- the control stream over the bootstrap connection ----------------------------------
 *
 * The control comms sit on channel 0's device; when that NIC goes, the
 * data channels are repaired over the others (peer_repair.c), and the
 * control stream moves to the bootstrap connection, a plain TCP socket
 * that stays up while the peer lives. A completed send only means the
 * plugin took the bytes, so each message posted on the control comm is
 * kept until the peer says it arrived: every 10 ms while messages come
 * in, the receiver sends the next sequence number it expects
 * (TPX_MSG_CTRL_SEEN, peer_sweep.c), and the sender drops what is before
 * it. The move, from either side:
 *
 *  sender    its control send comm fails: it closes it, sends what it kept
 *            (in order) as TPX_MSG_CTRL frames, and from then on the
 *            outbox goes there (nothing is kept any more: TCP delivers or
 *            the peer fails).
 *            A control comm that stalls without an error (TCPX never
 *            reports one) is found by its sender: messages unseen, and
 *            none confirmed for TPX_CHANNEL_STALL_MS (peer_sweep.c).
 *            A receiver that held its reads back that long (flow control)
 *            draws the same verdict: a move it did not need, which costs
 *            nothing but the comm.
 *  receiver  its control receive comm fails: it closes it and sends
 *            TPX_MSG_CTRL_SEEN with `move`; the sender moves as above,
 *            from that number on. A receiver takes TPX_MSG_CTRL frames at
 *            any time, closing its control receive comm at the first, and
 *            drops those it already has (a message is taken once, by its
 *            sequence number, from whichever path brings it first: each
 *            path is in order, the bootstrap one starts at or before the
 *            receiver's next).
 *
 * A direction whose sender said in its READY that it sends there
 * (TPX_CTRL_BOOTSTRAP, peer.c) starts there: no comm, nothing kept, no
 * move to confirm. An engine that predates READY's flags may start there
 * unannounced: its receiver takes the first frame, sequence number 0, for
 * that choice (no warning) and answers it as a move.
 *
 * Cost on the healthy path (TPX_CHANNEL_FAILOVER): a copy of each control
 * message's header (and body) as it is posted, freed when the peer's next
 * TPX_MSG_CTRL_SEEN comes; one 21-byte bootstrap frame per 10 ms per peer
 * while control messages arrive. */
struct tpx_ctrl_kept {
    uint64_t seq;
    uint64_t t_ns;                      /* when it was posted */
    uint32_t len;                       /* header + body */
    unsigned char hdr[TPX_CTRL_MSG_SIZE];
    unsigned char *body;                /* len > header: owned */
};

static tpx_status_t kept_add(tpx_peer_t *p, const unsigned char *buf, uint32_t len)
{
    if (p->kept_n == p->kept_cap) {
        struct tpx_ctrl_kept *nb =
            ring_grow(p->ctrl_kept, sizeof(*nb), p->kept_n, &p->kept_cap, &p->kept_head);
        if (nb == NULL)
            return TPX_ERR_NO_MEMORY;
        p->ctrl_kept = nb;
    }
    struct tpx_ctrl_kept *k = &p->ctrl_kept[(p->kept_head + p->kept_n) % p->kept_cap];
    k->body = NULL;
    if (len > TPX_CTRL_MSG_SIZE) {
        k->body = malloc(len - TPX_CTRL_MSG_SIZE);
        if (k->body == NULL)
            return TPX_ERR_NO_MEMORY;
        memcpy(k->body, buf + TPX_CTRL_MSG_SIZE, len - TPX_CTRL_MSG_SIZE);
    }
    memcpy(k->hdr, buf, TPX_CTRL_MSG_SIZE);
    k->seq = tpx__get64(buf + 8);
    k->t_ns = tpx__now_ns();
    k->len = len;
    p->kept_n++;
    return TPX_OK;
}

void tpx__peer_ctrl_seen(tpx_peer_t *p, uint64_t seq)
{
    int moved = 0;
    while (p->kept_n > 0) {
        struct tpx_ctrl_kept *k = &p->ctrl_kept[p->kept_head];
        if (k->seq >= seq)
            break;
        free(k->body);
        p->kept_head = (p->kept_head + 1) % p->kept_cap;
        p->kept_n--;
        moved = 1;
    }
    if (moved)
        p->seen_adv_ns = tpx__now_ns();
}

/* The stall clock: since the oldest message still unseen was posted, or
 * since the peer last confirmed more, whichever is later. A control comm
 * that moves slowly is not stalled: under a heavy load (strict TCPX, data
 * comms busy) a message waited 1.2 s on loopback while its predecessors
 * arrived in runs, and only a comm that moves nothing at all is lost. */
uint64_t tpx__peer_ctrl_unseen_ns(const tpx_peer_t *p)
{
    if (p->kept_n == 0)
        return 0;
    uint64_t t = p->ctrl_kept[p->kept_head].t_ns;
    return TPX_MAX(t, p->seen_adv_ns);
}

void tpx__peer_ctrl_kept_free(tpx_peer_t *p)
{
    tpx__peer_ctrl_seen(p, UINT64_MAX);
    free(p->ctrl_kept);
    p->ctrl_kept = NULL;
    p->kept_cap = p->kept_head = 0;
}

/* The outbox's next message as a bootstrap frame: 1 sent, 0 nothing to
 * send, the connection's queue is full or no send slot is free, -1 the
 * peer failed.
 *
 * A frame is sent once tpx__bs_send took it, but its owner (a transfer
 * that waits for its header or answer to leave) is not completed here: it
 * takes a send slot as on the control comm, and the slot completes in the
 * pass (bs_reap), never inside tpx__peer_ctrl_flush, whose callers (a
 * request being served, rma.c) still use that transfer. */
static int bs_post(tpx_peer_t *p)
{
    if (p->outbox_n == 0)
        return 0;
    tpx_ctrl_out_t *o = &p->outbox[p->outbox_head];
    if (o->owner != NULL && p->ctrl_send_nfree == 0)
        return 0; /* slots complete in the pass */
    unsigned char buf[TPX_CTRL_BUF_SLOT];
    memcpy(buf, o->msg, TPX_CTRL_MSG_SIZE);
    tpx_status_t st = TPX_OK;
    if (o->body_len > 0)
        st = o->owner->ops->body_fill(o->owner, (char *)buf + TPX_CTRL_MSG_SIZE, o->body_len);
    if (st == TPX_OK)
        st = tpx__bs_send(p->bs, TPX_MSG_CTRL, buf, TPX_CTRL_MSG_SIZE + o->body_len);
    if (st == TPX_ERR_NO_RESOURCE)
        return 0; /* a megabyte unsent already: later (tpx__bs_flush) */
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, "sending a control message over the bootstrap connection failed");
        return -1;
    }
    if (o->owner != NULL) {
        uint32_t idx = p->ctrl_send_free[--p->ctrl_send_nfree];
        p->ctrl_send_owner[idx] = o->owner;
        p->bs_sent[(p->bs_sent_head + p->bs_sent_n++) % TPX_WINDOW_MAX] = (uint16_t)idx;
    }
    p->outbox_answers -= o->answer != 0;
    p->outbox_head = (p->outbox_head + 1) % p->outbox_cap;
    p->outbox_n--;
    return 1;
}

/* The slots of the frames bs_post sent complete, in order: their owners
 * may end now (pass only). */
static void bs_reap(tpx_peer_t *p)
{
    while (p->bs_sent_n > 0 && p->state == PEER_READY) {
        uint16_t idx = p->bs_sent[p->bs_sent_head];
        p->bs_sent_head = (p->bs_sent_head + 1) % TPX_WINDOW_MAX;
        p->bs_sent_n--;
        tpx__peer_ctrl_sent(p, idx);
    }
}

void tpx__peer_ctrl_bs_reap(tpx_peer_t *p) { bs_reap(p); }

/* Whether one direction of p's control stream moves to the bootstrap
 * connection now: not if the peer is no longer ready or that direction
 * moved already (`moved`); a peer that cannot move it (failover off, the
 * bootstrap connection gone, or the peer said goodbye) fails, for `why`. */
static int ctrl_may_move(tpx_peer_t *p, int moved, const char *why)
{
    if (p->state != PEER_READY || moved)
        return 0;
    if (!p->e->cfg.failover || p->bs == NULL || p->bs_eof_ns != 0 || p->remote_closed) {
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, why);
        return 0;
    }
    return 1;
}

void tpx__peer_ctrl_move(tpx_peer_t *p, uint64_t from_seq, const char *why)
{
    tpx_engine_t *e = p->e;
    if (!ctrl_may_move(p, p->ctrl_bs_tx, why))
        return;
    /* The comm's messages in flight count as sent: they go again below,
     * with those that completed and were not seen. */
    tpx_comm_t *c = p->ctrl_send;
    uint16_t idx[TPX_WINDOW_MAX];
    int n = 0;
    for (uint64_t i = c->win.done; i < c->win.posted; i++)
        idx[n++] = c->win.slots[i % (uint64_t)c->win.cap].ctrl;
    c->win.done = c->win.posted;
    tpx__comm_close_plugin(e, c);
    p->ctrl_bs_tx = 1;
    uint32_t again = 0;
    tpx_status_t st = TPX_OK;
    for (uint32_t i = 0; i < p->kept_n && st == TPX_OK; i++) {
        struct tpx_ctrl_kept *k = &p->ctrl_kept[(p->kept_head + i) % p->kept_cap];
        if (from_seq != UINT64_MAX && k->seq < from_seq)
            continue;
        unsigned char buf[TPX_CTRL_BUF_SLOT];
        memcpy(buf, k->hdr, TPX_CTRL_MSG_SIZE);
        if (k->len > TPX_CTRL_MSG_SIZE)
            memcpy(buf + TPX_CTRL_MSG_SIZE, k->body, k->len - TPX_CTRL_MSG_SIZE);
        st = tpx__bs_send(p->bs, TPX_MSG_CTRL, buf, k->len);
        again++;
    }
    tpx__peer_ctrl_kept_free(p); /* nothing is kept on the bootstrap connection */
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, "moving the control stream to the bootstrap connection failed");
        return;
    }
    TPX_WARN("peer %s: %s; its control messages go over the bootstrap connection from now on "
             "(%u sent again)", p->name, why, again);
    for (int i = 0; i < n && p->state == PEER_READY; i++)
        tpx__peer_ctrl_sent(p, idx[i]);
    while (p->state == PEER_READY && bs_post(p) > 0)
        bs_reap(p);
    bs_reap(p);
    e->last_move_ns = tpx__now_ns();
}

void tpx__peer_ctrl_rx_move(tpx_peer_t *p, const char *why)
{
    tpx_engine_t *e = p->e;
    if (why == NULL ? p->state != PEER_READY || p->ctrl_bs_rx
                    : !ctrl_may_move(p, p->ctrl_bs_rx, why))
        return;
    /* no late message lands in a buffer: what it held comes again */
    tpx_comm_t *c = p->ctrl_recv;
    for (uint64_t i = c->win.done; i < c->win.posted; i++)
        p->ctrl_idle[p->ctrl_nidle++] = c->win.slots[i % (uint64_t)c->win.cap].ctrl;
    c->win.done = c->win.posted;
    tpx__comm_close_plugin(e, c);
    p->ctrl_bs_rx = 1;
    unsigned char f[9];
    tpx__put64(f, p->recv_seq);
    f[8] = 1;
    if (tpx__bs_send(p->bs, TPX_MSG_CTRL_SEEN, f, sizeof(f)) != TPX_OK) {
        tpx__peer_fail(p, TPX_ERR_CONN_RESET,
                       why ? why : "its bootstrap connection failed as its control stream began");
        return;
    }
    p->seen_sent = p->recv_seq;
    if (why == NULL)
        TPX_INFO("peer %s: its control messages come over the bootstrap connection, "
                 "unannounced (an engine without the READY flags: TPX_CTRL_BOOTSTRAP)", p->name);
    else
        TPX_WARN("peer %s: %s; its control messages come over the bootstrap connection from "
                 "now on", p->name, why);
    e->last_move_ns = tpx__now_ns();
}

int tpx__comm_post_ctrl(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    tpx_engine_t *e = p->e;
    if (p->ctrl_bs_tx) {
        (void)tpx__bs_flush(p->bs); /* a broken connection: the sweep sees its EOF */
        bs_reap(p); /* (the pass: comm_schedule) */
        return p->state == PEER_READY ? bs_post(p) : -1;
    }
    if (p->outbox_n == 0 || p->ctrl_send_nfree == 0)
        return 0;
    uint32_t idx = p->ctrl_send_free[p->ctrl_send_nfree - 1];
    tpx_ctrl_out_t *o = &p->outbox[p->outbox_head];
    unsigned char *buf = p->ctrl_buf + (size_t)(e->cfg.window + idx) * TPX_CTRL_BUF_SLOT;
    memcpy(buf, o->msg, TPX_CTRL_MSG_SIZE);
    void *mh;
    tpx_status_t st = tpx__region_mh(p->ctrl_region, c->id, c->comm, 0, &mh);
    if (st == TPX_OK && o->body_len > 0)
        st = o->owner->ops->body_fill(o->owner, (char *)buf + TPX_CTRL_MSG_SIZE, o->body_len);
    if (st == TPX_OK)
        st = tpx__window_post(c, buf, TPX_CTRL_MSG_SIZE + o->body_len, mh,
                              &(tpx_slot_t){.kind = SLOT_CTRL, .dst_dev = -1,
                                            .ctrl = (uint16_t)idx});
    if (st == TPX_INPROGRESS)
        return 0;
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, "posting a control message failed");
        return -1;
    }
    /* kept until the peer says it arrived (a move sends it again) */
    if (e->cfg.failover && kept_add(p, buf, TPX_CTRL_MSG_SIZE + o->body_len) != TPX_OK) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory to keep a control message");
        return -1;
    }
    p->ctrl_send_nfree--;
    p->ctrl_send_owner[idx] = o->owner;
    p->outbox_answers -= o->answer != 0;
    p->outbox_head = (p->outbox_head + 1) % p->outbox_cap;
    p->outbox_n--;
    return 1;
}

void tpx__peer_ctrl_bs_drain(tpx_peer_t *p)
{
    while (p->ctrl_bs_tx && p->state == PEER_READY && bs_post(p) > 0)
        bs_reap(p);
    bs_reap(p);
}

void tpx__peer_ctrl_flush(tpx_peer_t *p)
{
    /* Over the bootstrap connection the frames leave now and their owners
     * complete in the pass (bs_post), as on the control comm. */
    if (p->ctrl_bs_tx) {
        while (p->state == PEER_READY && bs_post(p) > 0)
            ;
        return;
    }
    while (p->state == PEER_READY && !tpx__window_full(p->ctrl_send) &&
           tpx__comm_post_ctrl(p->ctrl_send) > 0)
        ;
}

void tpx__peer_ctrl_sent(tpx_peer_t *p, uint16_t idx)
{
    tpx_xfer_t *owner = p->ctrl_send_owner[idx];
    p->ctrl_send_owner[idx] = NULL;
    p->ctrl_send_free[p->ctrl_send_nfree++] = idx;
    if (owner != NULL) {
        owner->hdr_pending = 0;
        tpx__xfer_maybe_done(owner);
    }
}

void tpx__peer_ring(tpx_peer_t *p)
{
    uint64_t now = tpx__now_ns();
    /* An engine polls every 200 us for 100 ms after it last saw work
     * (which is after our last message reached it): only a peer we have
     * been quiet to for 50 ms may be asleep. */
    if (p->bs != NULL && now - p->last_tx_ns > 50 * 1000000ull)
        (void)tpx__bs_send(p->bs, TPX_MSG_BELL, NULL, 0); /* best effort */
    p->last_tx_ns = now;
}
