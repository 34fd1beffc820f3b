/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_sweep.c - a ready peer's liveness: its deadlines, its bootstrap
 * connection (doorbells, the data channels' handles, EOF) and the verdict
 * on data channels that stall. The engine's sweep (engine.c) and the
 * doorbell reader (peer.c) call it; it fails a peer or ends a transfer
 * through peer_fail.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/iflink.h"
#include "engine.h"
#include "peer.h"
#include "window.h"
#include "xfer.h"

/* The verdict on p's data channels (TPX_CHANNEL_STALL_MS): a receive
 * channel whose window has had receives in flight and completed none for
 * that long, while a sibling completed some since it stopped (or in the
 * sweep interval in which it stopped) -- or, while no sibling has receives
 * in flight, the peer's control stream brought a message since -- is dead.
 * (The control stream counts because the work a repair moves may be all
 * that is left: a second channel that dies with the lanes a REPAIR_ACK
 * just moved onto it has no sibling that could move after it, and the ACK
 * itself shows the peer alive.)
 * Google's plugin reports neither a data connection that died nor one that
 * stalls (its test() says "not done" forever) while the peer's bootstrap
 * connection and control comm stay healthy: without this only the
 * transfer deadline (TPX_TIMEOUT_MS) would end such transfers.
 *
 * Receive channels only, where stillness is proof: a receive is posted
 * once its transfer is matched (two-sided) or requested (one-sided), so
 * its sender has committed to that chunk on that channel, in the order
 * both sides derive; while the sender's other channels deliver, this one's
 * connection is what fails. A send channel may be still for good reasons
 * (a peer that has not posted a two-sided receive while one-sided
 * transfers flow on the other channels). The sender learns of the verdict
 * from this side's failure (its bootstrap connection ends). Every data
 * channel is looked at, so each has its record for a later move of a dead
 * channel's work onto the others.
 *
 * Sooner, on the siblings' word: a quarter of that (at least 250 ms), when
 * every other live receive channel moved since this one stopped and has
 * nothing left in flight: it alone holds the transfers back. A channel
 * whose connection died holds its transfers until the verdict: with
 * 1000 ms, each loss of a NIC every 5 s cost a stream of 128 MiB READs a
 * quarter to a third of its rate (bench/netns_flap.sh, split: 0.66-0.72
 * of the all-up rate), the same every 5 s for a FIFO plugin. Stillness
 * beside siblings that still move is no such word: healthy channels of a
 * loaded host sat still 75-260 ms while the others moved (strict TCPX,
 * loopback, 2 cores, beside a repair: a sender held behind a lost channel
 * by FIFO order); and not while a loss is repaired, nor for a channel
 * still since before the receive dealing last changed (a loss, a
 * REPAIR_ACK's lanes, a rejoin). A wrong verdict costs a repair and a
 * reconnect, not a transfer. Not over fused NICs either: there a NIC's
 * loss is the plugin's to fail over (the built-in transport's, within
 * 1.25 x TPX_SOCK_STALL_MS), and a quarter of a TPX_CHANNEL_STALL_MS set
 * above that came first, repairing channels the transport saves anyway.
 *
 * At once, on its NIC's word: a receive channel still for CHAN_LINK_MIN_NS
 * whose NIC here lost its link (set down, no carrier: common/iflink.c, one
 * ioctl per look at a still channel that names an interface) while another
 * live channel's NIC has its link. Nothing crosses a NIC without a link,
 * and a plugin that does not fail over (Google's) leaves its connections
 * waiting; waiting a quarter of TPX_CHANNEL_STALL_MS for each loss cost READs
 * of 1000 x 128 KiB with two of four NICs lost 2 s of every 5 at the
 * requester's end a third of their rate (strict TCPX, bench/netns_flap.sh:
 * 0.69 of the all-up rate). With every NIC down there is no verdict: the
 * host lost its network, not a channel. The kernel's flag lags: a NIC
 * whose link came back shows none for up to a second (linkwatch; 300 ms on
 * a veth here) while a channel connected again already moves over it, so
 * the word counts only for a channel whose NIC was seen with its link
 * since its plugin comm connected (looked at every sweep until it is).
 * Returns the dead channel's comm, or NULL; *link: whether its NIC's link
 * was the word. */
#define CHAN_QUICK_MIN_NS 250000000ull
#define CHAN_LINK_MIN_NS 20000000ull

/* Whether receive channel k's NIC lost its link while another live
 * channel's NIC has one (see above). */
static int chan_link_lost(const tpx_peer_t *p, int k)
{
    if (p->recv[k]->nic[0] == '\0' || !p->recv[k]->nic_up || tpx__if_link(p->recv[k]->nic) != 0)
        return 0;
    for (int s = 0; s < p->nchan; s++) {
        const tpx_comm_t *o = p->recv[s];
        if (s != k && !o->dead && o->nic[0] != '\0' && strcmp(o->nic, p->recv[k]->nic) != 0 &&
            tpx__if_link(o->nic) == 1)
            return 1;
    }
    return 0;
}
static tpx_comm_t *chan_verdict(tpx_peer_t *p, uint64_t now, int *link)
{
    const uint64_t stall = (uint64_t)p->e->cfg.chan_stall_ms * 1000000ull;
    const uint64_t quick_ns = TPX_MIN(stall, TPX_MAX(stall / 4, CHAN_QUICK_MIN_NS));
    for (int k = 0; k < p->nchan; k++) {
        (void)tpx__window_look(p->send[k], now);
        (void)tpx__window_look(p->recv[k], now);
        tpx_comm_t *r = p->recv[k];
        if (!r->nic_up && r->nic[0] != '\0' && r->comm != NULL && !r->dead)
            r->nic_up = tpx__if_link(r->nic) == 1; /* see above: the flag lags */
    }
    for (int k = 0; stall > 0 && k < p->nchan; k++) {
        tpx_chan_live_t *l = &p->recv[k]->live;
        if (p->recv[k]->dead || l->state != TPX_CHAN_STILL)
            continue;
        if (now - l->still_ns >= CHAN_LINK_MIN_NS && chan_link_lost(p, k)) {
            l->state = TPX_CHAN_DEAD;
            *link = 1;
            return p->recv[k];
        }
        if (now - l->still_ns < quick_ns)
            continue;
        if (now - l->still_ns < stall) {
            if (p->e->devs_fused || p->rx_lost != 0 || l->still_ns < p->rx_dealt_ns)
                continue; /* fused NICs; a repair's stillness: see above */
            int sibs = 0;
            for (int s = 0; s < p->nchan; s++) {
                const tpx_comm_t *o = p->recv[s];
                if (s == k || o->dead)
                    continue;
                if (o->live.state != TPX_CHAN_IDLE || o->live.moved_ns < l->still_ns) {
                    sibs = -1;
                    break;
                }
                sibs++;
            }
            if (sibs <= 0)
                continue;
            l->state = TPX_CHAN_DEAD;
            return p->recv[k];
        }
        /* a sibling moved no earlier than this one last did (at the sweep's
         * 10 ms grain: a transfer that ends on the siblings within the
         * look in which this channel stopped counts); or, with no sibling
         * that has receives in flight, the peer spoke since */
        int busy = 0;
        for (int s = 0; s < p->nchan; s++)
            busy |= s != k && !p->recv[s]->dead && p->recv[s]->live.state != TPX_CHAN_IDLE;
        if (!busy && p->active_ns >= l->still_ns) {
            l->state = TPX_CHAN_DEAD;
            return p->recv[k];
        }
        for (int s = 0; s < p->nchan; s++) {
            if (s != k && p->recv[s]->live.moved_ns >= l->still_ns) {
                l->state = TPX_CHAN_DEAD;
                return p->recv[k];
            }
        }
    }
    return NULL;
}

int tpx__peer_bs_frame(tpx_peer_t *p, uint16_t type, const unsigned char *buf, uint32_t len)
{
    if (type == TPX_MSG_BELL)
        return 1;
    if (type == TPX_MSG_CTRL) {
        /* the peer's control stream, moved (peer_ctrl.c): each message
         * once, from whichever path brings it first */
        if (len < TPX_CTRL_MSG_SIZE || len > TPX_CTRL_BUF_SLOT) {
            tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a control message frame of a wrong size");
            return 0;
        }
        /* A peer that said so in its READY sends here from the start
         * (ctrl_bs_rx already); one that predates the READY flags chose
         * this path unannounced if this is its first message ever */
        int chosen = !p->ready.known && p->recv_seq == 0 && tpx__get64(buf + 8) == 0;
        tpx__peer_ctrl_rx_move(p, chosen ? NULL
                                         : "the peer moved its control messages to the "
                                           "bootstrap connection");
        if (p->state == PEER_READY && tpx__get64(buf + 8) >= p->recv_seq)
            tpx__peer_ctrl_received(p, buf, len);
        p->e->last_move_ns = tpx__now_ns();
        return 0;
    }
    if (type == TPX_MSG_CTRL_SEEN) {
        uint64_t seq = len == 9 ? tpx__get64(buf) : UINT64_MAX;
        if (seq > p->send_seq || buf[8] > 1) {
            tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a confirmation of control messages never sent");
            return 0;
        }
        if (buf[8])
            tpx__peer_ctrl_move(p, seq, "the peer's control receive comm failed");
        tpx__peer_ctrl_seen(p, seq);
        return 0;
    }
    if (type == TPX_MSG_REJOIN) {
        /* the receiver of a lost channel's direction listens again (peer.c) */
        int k = len == 1 + TPX_BS_HANDLE_SIZE ? buf[0] : -1;
        tpx_comm_t *c = k >= 0 && k < p->nchan ? p->send[k] : NULL;
        if (c == NULL || !c->dead || c->comm != NULL || c->connecting ||
            (p->send_live & (1u << k))) {
            tpx__peer_fail(p, TPX_ERR_PROTOCOL, "it offered a data channel never lost");
            return 0;
        }
        memcpy(c->rj_their0, buf + 1, TPX_BS_HANDLE_SIZE);
        c->rj_got = 1;
        c->rj_checked = 0;
        c->rj_next_ns = 0;
        c->rj_backoff_ms = 0;
        return 0;
    }
    if (type != TPX_MSG_CHAN)
        return 0;
    if (p->chan_state == CHAN_OPEN || (p->chan != NULL && p->chan->got) ||
        len != (uint32_t)p->nchan * TPX_BS_HANDLE_SIZE) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "it sent its data channels' handles twice or cut");
        return 0;
    }
    if (p->chan == NULL && (p->chan = calloc(1, sizeof(*p->chan))) == NULL) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for its data channels");
        return 0;
    }
    memcpy(p->chan->their, buf, len);
    p->chan->got = 1;
    p->chan_state = CHAN_OPENING;
    /* its transfer is waiting for the channels: connect hot (peer.c) */
    p->e->last_move_ns = tpx__now_ns();
    return 0;
}

/* A requester rings at most once per 50 ms of quiet; a flood is dropped. */
#define BELLS_PER_PASS   16
#define BELLS_PER_SECOND 1000

int tpx__peer_frames(tpx_peer_t *p, uint64_t now)
{
    int rung = 0;
    if (now - p->bell_window_ns >= 1000000000ull) {
        p->bell_window_ns = now;
        p->bell_count = 0;
    }
    /* Bounded work per peer and pass (under the engine lock). */
    for (int k = 0; k < BELLS_PER_PASS && p->state == PEER_READY; k++) {
        uint16_t type;
        uint32_t len;
        unsigned char b[TPX_PEER_FRAME_MAX];
        /* the control stream over it (peer_ctrl.c) obeys flow control */
        if (p->ctrl_bs_rx && !tpx__peer_ctrl_may_read(p))
            break;
        tpx_status_t st = tpx__bs_recv(p->bs, &type, b, sizeof(b), &len);
        if (st == TPX_INPROGRESS)
            break;
        if (st != TPX_OK) {
            p->bs_eof_ns = tpx__now_ns(); /* judged by the sweep */
            break;
        }
        rung += tpx__peer_bs_frame(p, type, b, len);
        if (type == TPX_MSG_CTRL || type == TPX_MSG_CTRL_SEEN)
            continue; /* the control stream, not a doorbell */
        if (++p->bell_count > BELLS_PER_SECOND) {
            /* A requester rings at most once per 50 ms of quiet. */
            tpx__peer_fail(p, TPX_ERR_PROTOCOL,
                           "it sent more than 1000 doorbells in a second (a flood): dropped");
            break;
        }
    }
    /* what the frames made us answer leaves now: the caller may nap before
     * its next pass (the sweep, a nap's doorbells) */
    tpx__peer_ctrl_bs_drain(p);
    return rung;
}

void tpx__peer_sweep(tpx_peer_t *p, uint64_t now)
{
    /* The bootstrap connection stays open for the peer's life: EOF on it
     * means the peer process is gone, whatever the plugin reports. (Once
     * the control stream moved there, it is read under its flow control.) */
    if (p->bs != NULL && p->bs_eof_ns == 0) {
        /* all that came, not one frame per sweep: the peer confirms control
         * messages every 10 ms, and a reader slower than that fell behind
         * until its kept messages looked unseen (a spurious move) */
        p->e->nbells += (uint64_t)tpx__peer_frames(p, now); /* rung while awake anyway */
        if (p->state != PEER_READY)
            return;
    }
    /* A peer that closes says goodbye on the control stream first; a
     * bootstrap EOF with no goodbye within 200 ms is a process that died. */
    if (p->bs_eof_ns != 0 && !p->remote_closed && now - p->bs_eof_ns > 200 * 1000000ull) {
        tpx__peer_fail(p, TPX_ERR_CONN_RESET,
                       "the peer's bootstrap connection closed without a goodbye (process gone?)");
        return;
    }
    /* The control messages that arrived, told to their sender, which
     * keeps them until then (peer_ctrl.c; whatever our TPX_CHANNEL_FAILOVER:
     * the peer's decides whether it keeps them) */
    if (p->recv_seq != p->seen_sent && !p->ctrl_bs_rx && p->bs != NULL && p->bs_eof_ns == 0) {
        unsigned char f[9] = {0};
        tpx__put64(f, p->recv_seq);
        if (tpx__bs_send(p->bs, TPX_MSG_CTRL_SEEN, f, sizeof(f)) == TPX_OK)
            p->seen_sent = p->recv_seq;
    }
    /* A control send comm with messages unseen, of which the peer has
     * confirmed none for TPX_CHANNEL_STALL_MS, stalled (TCPX reports no
     * failure): the control stream moves to the bootstrap connection
     * (peer_ctrl.c) */
    uint64_t unseen = tpx__peer_ctrl_unseen_ns(p);
    if (unseen != 0 && !p->ctrl_bs_tx && p->e->cfg.chan_stall_ms > 0 &&
        now >= unseen + (uint64_t)p->e->cfg.chan_stall_ms * 1000000ull) {
        char why[160];
        snprintf(why, sizeof(why), "control send comm: the peer has confirmed none of its "
                 "messages for %d ms (TPX_CHANNEL_STALL_MS)", p->e->cfg.chan_stall_ms);
        tpx__peer_ctrl_move(p, UINT64_MAX, why);
        if (p->state != PEER_READY)
            return;
    }
    int link = 0;
    tpx_comm_t *dead = chan_verdict(p, now, &link);
    if (dead != NULL) {
        /* Its chunks are dealt again over the other channels, or the peer
         * fails as a whole (peer_repair.c). */
        char why[240];
        if (link)
            snprintf(why, sizeof(why),
                     "data channel %d (%s, plugin device %d) completed nothing for %llu ms and "
                     "its NIC %s lost its link", dead->chan, dead->is_send ? "send" : "receive",
                     dead->dev, (unsigned long long)((now - dead->live.still_ns) / 1000000u),
                     dead->nic);
        else
            snprintf(why, sizeof(why),
                     "data channel %d (%s, plugin device %d) completed nothing for %llu ms while "
                     "the peer's other channels did: its connection died or stalled "
                     "(TPX_CHANNEL_STALL_MS %d)", dead->chan, dead->is_send ? "send" : "receive",
                     dead->dev, (unsigned long long)((now - dead->live.still_ns) / 1000000u),
                     p->e->cfg.chan_stall_ms);
        tpx__peer_chan_lost(p, dead, why);
        if (p->state != PEER_READY)
            return;
    }
    for (uint32_t i = 0; i < p->recv_pending_n;) {
        tpx_xfer_t *x = p->recv_pending[i];
        if (now >= x->deadline_ns) {
            memmove(p->recv_pending + i, p->recv_pending + i + 1,
                    (p->recv_pending_n - i - 1) * sizeof(*p->recv_pending));
            p->recv_pending_n--;
            tpx__xfer_complete(x, TPX_ERR_TIMED_OUT);
            continue;
        }
        i++;
    }
    for (tpx_xfer_t *x = p->active; x != NULL; x = x->next) {
        if (x->state == XF_ACTIVE && now >= x->deadline_ns) {
            /* Its chunks are in the peer's FIFO: the connection cannot be
             * kept in step without them, so the whole peer fails. */
            tpx__peer_fail(p, TPX_ERR_TIMED_OUT, "a transfer passed its deadline");
            return;
        }
    }
}
