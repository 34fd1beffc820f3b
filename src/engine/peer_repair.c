/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_repair.c - a data channel lost while its peer lives: the chunks it
 * lost are dealt again over the peer's other channels, and later streams
 * are dealt without it, on both sides in the same order.
 *
 * Each direction is repaired by itself, led by its receiver, which alone
 * knows what arrived (a completed send only means the plugin took the
 * bytes). A comm carries lanes -- a stream's chunks dealt to one channel --
 * one after the other, each from the point of the control order where it
 * was queued there: its stream's message (a stream is named by the
 * sender's control sequence number of the message that announced it), or
 * the REPAIR_ACK that moved it there from a lost channel. Both sides queue
 * the same lanes at the same points, so a comm carries them in the order of
 * (point, stream, lane) on both sides, and completes its requests in FIFO
 * order: what a lost receive channel lacks is one cut in that order, the
 * lane at its window's head (or queue's head) from the head's chunk on and
 * every lane after it; of the lanes before it, nothing. Each lane keeps
 * where it was queued last (xfer.h: channel, point, first chunk there), so
 * losses may overlap: a channel lost before an earlier loss's ACK, or
 * holding lanes an earlier repair moved to it, is cut the same way.
 *
 *  receiver  declares the channel lost (its comm failed, or the stall
 *            verdict of TPX_CHANNEL_STALL_MS), drops its plugin comm (no
 *            late byte lands in memory the user has back) and sends
 *            REPAIR(chan, cut point, stream, lane, chunk), keeping the cut
 *            until the ACK. Lanes queued on the channel meanwhile (streams
 *            it starts, lanes earlier losses' ACKs move there) come after
 *            the cut and wait.
 *  sender    on REPAIR: drops its comm of that channel, counts what the cut
 *            says arrived, queues every lane last queued on the channel
 *            from the cut on -- its missing chunks -- behind what its live
 *            comms hold, lane l of stream s on the live channel of place
 *            (s + l) % live (a lane keeps its message boundaries: both
 *            sides cut runs alike), stops dealing new streams to the
 *            channel, and answers REPAIR_ACK on its control stream; the
 *            lanes moved are queued at the ACK's point.
 *  receiver  takes the ACK in its turn among the messages with data: every
 *            stream announced before it has started and every earlier ACK
 *            has moved its lanes, exactly the state the sender had, so it
 *            queues the same lanes in the same order and place, and deals
 *            later streams without the channel. FIFO plugins (TCPX ignores
 *            tags) pair every buffer.
 *
 * The sender must still have what it resends: a completed send only means
 * that the kernel took the bytes, and a link that dies holds a socket
 * buffer's worth of them. A WRITE's requester keeps its transfer until the
 * owner's answer, which comes after the data; a two-sided send and a served
 * READ keep theirs until the receiver's RECV_DONE (peer_pass.c), which it
 * sends as the stream's last chunk arrives. That is the healthy path's
 * cost: one 64-byte control message back per two-sided message or READ
 * with data on the channels, and the sender's completion (a two-sided
 * send's; a served READ's is internal) one control message later than its
 * last send. Not repaired (the peer fails, as before): a lost control
 * stream, the last channel.
 *
 * A lost channel comes back (peer.c, rejoin): once its repair is done,
 * its receiver listens again and the sender connects (with backoff); the
 * sender announces REJOIN on its control stream and deals the streams after
 * it to the channel, and the receiver does so from REJOIN's turn among the
 * messages with data -- the same point of the stream order, as for
 * REPAIR_ACK. The rejoined comm starts a new window (numbered from 0, as a
 * devmem plugin numbers its requests) and may be lost and repaired again.
 *
 * Between the peer's pass (peer_pass.c) and sweep (peer_sweep.c), which
 * call it, and the control stream (peer_ctrl.c), transfers (xfer.c, the
 * end in peer_fail.c) and windows (window.c), which it calls.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "mem.h"
#include "pack.h"
#include "peer.h"
#include "window.h"
#include "xfer.h"

/* The live channel of place seq % n: where a stream's moved lane goes
 * (both sides compute it from the stream's name alone). */
static int live_pick(uint32_t live, uint64_t seq)
{
    uint32_t i = (uint32_t)(seq % (uint64_t)__builtin_popcount(live));
    for (int k = 0;; k++)
        if ((live >> k & 1u) && i-- == 0)
            return k;
}

/* Chunks of stream st in [a, b) that channel k carries. */
static uint32_t lane_count(const tpx_stream_t *st, int k, uint32_t a, uint32_t b)
{
    uint32_t j0 = tpx__stream_lane_start(st, k), n = 0;
    uint64_t run = st->run > 1 ? st->run : 1, end = TPX_MIN(b, st->nchunks);
    for (uint64_t blk = j0; j0 != UINT32_MAX && blk < end; blk += run * st->nlive) {
        uint64_t lo = TPX_MAX(blk, (uint64_t)a), hi = TPX_MIN(blk + run, end);
        if (hi > lo)
            n += (uint32_t)(hi - lo);
    }
    return n;
}

/* A lost comm lets go: staging chunks of its slots back, the window
 * emptied, its queue cleared (the lanes are moved by their owners), its
 * plugin comm closed so that its threads touch no user memory again. */
static void comm_drop(tpx_comm_t *c)
{
    tpx_engine_t *e = c->peer->e;
    tpx_window_t *w = &c->win;
    for (uint64_t n = w->done; n < w->posted; n++) {
        tpx_slot_t *s = &w->slots[n % (uint64_t)w->cap];
        if (s->kind == SLOT_DATA && s->shared && !s->vec)
            tpx__pack_stage_put(c, s->stage);
    }
    w->done = w->posted;
    c->q_head = c->q_tail = NULL;
    c->dead = 1;
    c->wake_set = 0;      /* a comm connected again (peer.c, rejoin) is new: */
    c->unpack_loaded = 0; /* its wake-up and unpack handle are its own */
    c->meta_host = NULL;
    c->live.state = TPX_CHAN_DEAD;
    tpx__comm_close_plugin(e, c);
}

/* The channel whose lane chunk j of stream st is: block j / run went to
 * the live channel of place (first_chan + block) % nlive. */
static int chunk_lane(const tpx_stream_t *st, uint32_t j)
{
    uint32_t run = st->run > 1 ? st->run : 1;
    uint32_t i = (uint32_t)(((uint64_t)j / run + (uint64_t)st->first_chan) % st->nlive);
    for (int k = 0;; k++)
        if ((st->live >> k & 1u) && i-- == 0)
            return k;
}

/* A lane's place in its comm's order against a cut: < 0 before it (it
 * arrived), 0 the cut's own lane, > 0 after it. */
static int cut_cmp(uint64_t at, uint64_t seq, int lane, const tpx_cut_t *cut)
{
    if (at != cut->at)
        return at < cut->at ? -1 : 1;
    if (seq != cut->seq)
        return seq < cut->seq ? -1 : 1;
    return lane < cut->lane ? -1 : lane > cut->lane;
}

/* A lane of a stream that lost chunks on a lost channel: from `from` on. */
typedef struct {
    tpx_xfer_t *x;
    uint64_t seq;
    int lane;
    uint32_t from;
} moved_t;

static int moved_cmp(const void *a, const void *b)
{
    const moved_t *m = a, *n = b;
    if (m->seq != n->seq)
        return m->seq < n->seq ? -1 : 1;
    return m->lane < n->lane ? -1 : m->lane > n->lane;
}

/* The lanes of one direction (is_send: p's out-streams, else its
 * in-streams) last queued on channel k that lost chunks by the cut --
 * its own lanes and those moved there by earlier repairs alike -- in
 * (stream, lane) order, into *out (malloc'd; NULL and 0 when none). -1: no
 * memory. */
static int moved_collect(tpx_peer_t *p, int is_send, int k, const tpx_cut_t *cut, moved_t **out)
{
    int n = 0, cap = 0, base = is_send ? 0 : p->nchan;
    moved_t *v = NULL;
    for (tpx_xfer_t *x = p->active; x != NULL; x = x->next) {
        const tpx_stream_t *st = is_send ? &x->out : &x->in;
        if (x->state != XF_ACTIVE || st->nlive == 0)
            continue;
        for (int ch = 0; ch < p->nchan; ch++) {
            const tpx_lane_t *l = &x->lane[base + ch];
            if (l->on != k + 1)
                continue;
            int r = cut_cmp(l->at, st->seq, ch, cut);
            if (r < 0)
                continue;
            uint32_t from = r == 0 ? TPX_MAX(l->first, cut->chunk) : l->first;
            if (from >= st->nchunks)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                moved_t *nv = realloc(v, (size_t)cap * sizeof(*v));
                if (nv == NULL) {
                    free(v);
                    return -1;
                }
                v = nv;
            }
            v[n++] = (moved_t){.x = x, .seq = st->seq, .lane = ch, .from = from};
        }
    }
    if (n > 1)
        qsort(v, (size_t)n, sizeof(*v), moved_cmp);
    *out = v;
    return n;
}

/* Queue the moved lanes on the direction's live channels, at point `at` of
 * the control order (the REPAIR_ACK's): lane ch of stream seq on the live
 * channel of place (seq + ch) % live, so that the lanes of one stream that
 * two losses moved spread. */
static void moved_queue(tpx_peer_t *p, int is_send, uint32_t live, const moved_t *v, int n,
                        uint64_t at)
{
    tpx_comm_t **comms = is_send ? p->send : p->recv;
    int base = is_send ? 0 : p->nchan;
    for (int i = 0; i < n; i++)
        tpx__lane_push(comms[live_pick(live, v[i].seq + (uint64_t)v[i].lane)], v[i].x,
                       base + v[i].lane, v[i].from, at);
}

void tpx__peer_chan_lost(tpx_peer_t *p, tpx_comm_t *c, const char *why)
{
    tpx_engine_t *e = p->e;
    uint32_t bit = 1u << c->chan;
    if (p->state != PEER_READY || c->dead)
        return;
    if (c->is_send) {
        /* Only the receiver knows what arrived: its REPAIR says, or its
         * failure (every other case) ends the peer here too. */
        if (e->cfg.failover && (p->send_live & bit) && (p->send_live & ~bit) != 0) {
            c->dead = 1;
            TPX_WARN("peer %s: %s; waiting for the peer to say what it lacks", p->name, why);
            return;
        }
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, why);
        return;
    }
    const char *no = NULL;
    if (!e->cfg.failover)
        no = "TPX_CHANNEL_FAILOVER=0";
    else if (p->remote_closed)
        no = "the peer is closing";
    else if (!(p->recv_live & bit) || (p->recv_live & ~p->rx_lost & ~bit) == 0)
        no = "no other channel is left";
    if (no != NULL) {
        char msg[320];
        snprintf(msg, sizeof(msg), "%s; not repaired: %s", why, no);
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, msg);
        return;
    }
    /* Chunks that arrived and whose scatter still runs have arrived. */
    tpx_status_t sst = tpx__comm_pw_settle(c);
    if (sst != TPX_OK || p->state != PEER_READY) {
        tpx__peer_fail(p, sst != TPX_OK ? sst : TPX_ERR_CONN_RESET,
                       "scattering a packed chunk failed");
        return;
    }
    /* The cut: the lane of the oldest receive posted and not completed,
     * else the lane at the queue's head, else every lane queued from the
     * next message with data to start on (queued messages with data start
     * in order: the first of them, or the next to arrive). Lanes queued
     * here later (streams started, lanes moved by earlier losses' answers)
     * come after it in the channel's order: they are missing too. */
    tpx_window_t *w = &c->win;
    tpx_cut_t cut = {0};
    if (w->done < w->posted) {
        const tpx_slot_t *s = &w->slots[w->done % (uint64_t)w->cap];
        int ch = chunk_lane(&s->x->in, s->chunk);
        cut = (tpx_cut_t){.at = s->x->lane[p->nchan + ch].at, .seq = s->x->in.seq,
                          .chunk = s->chunk, .lane = (uint8_t)ch};
    } else if (c->q_head != NULL) {
        const tpx_lane_t *l = &c->q_head->lane[c->q_li];
        cut = (tpx_cut_t){.at = l->at, .seq = c->q_head->in.seq, .chunk = l->next_chunk,
                          .lane = (uint8_t)(c->q_li - p->nchan)};
    } else if (p->unexpected_n > 0) {
        tpx_ctrl_t m;
        (void)tpx__ctrl_decode(p->unexpected[p->unexpected_head], &m); /* checked on arrival */
        cut.at = m.seq;
    } else {
        cut.at = p->recv_seq;
    }
    comm_drop(c);
    p->rx_lost |= bit;
    p->rx_dealt_ns = tpx__now_ns();
    p->rx_cut[c->chan] = cut;
    p->repairs++;
    e->ctr.chan_lost++;
    TPX_WARN("peer %s: %s; its missing chunks are dealt again over the other %d channel(s)",
             p->name, why, __builtin_popcount(p->recv_live & ~p->rx_lost));
    tpx_ctrl_t m = {.type = TPX_CTRL_REPAIR, .chan = (uint8_t)c->chan, .cut_seq = cut.seq,
                    .cut_chunk = cut.chunk, .cut_lane = cut.lane, .cut_at = cut.at};
    if (tpx__peer_ctrl_send(p, &m, NULL) != TPX_OK) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a control message");
        return;
    }
    tpx__peer_ctrl_flush(p);
    tpx__peer_ring(p);
}

void tpx__peer_repair_received(tpx_peer_t *p, const tpx_ctrl_t *m)
{
    tpx_engine_t *e = p->e;
    int k = m->chan;
    uint32_t bit = 1u << k;
    if (k >= p->nchan || m->cut_lane >= p->nchan || !(p->send_live & bit)) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a repair of a data channel not in use");
        return;
    }
    char why[200];
    if ((p->send_live & ~bit) == 0) {
        snprintf(why, sizeof(why), "the peer lost data channel %d, its last", k);
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, why);
        return;
    }
    tpx_comm_t *c = p->send[k];
    /* gathered chunks not yet posted count as sent, as those in flight do */
    tpx_status_t sst = tpx__comm_pw_settle(c);
    if (sst != TPX_OK) {
        tpx__peer_fail(p, sst, "gathering a packed chunk failed");
        return;
    }
    /* Every send in flight on it counts as done; the cut says which of them
     * (and of those completed before) go again, and those are taken back. */
    tpx_xfer_t *touched[TPX_WINDOW_MAX];
    int nt = 0;
    tpx_window_t *w = &c->win;
    for (uint64_t n = w->done; n < w->posted; n++) {
        tpx_slot_t *s = &w->slots[n % (uint64_t)w->cap];
        if (s->kind != SLOT_DATA)
            continue;
        s->x->chunks_done += s->nrun > 1 ? s->nrun : 1;
        int i = 0;
        while (i < nt && touched[i] != s->x)
            i++;
        if (i == nt)
            touched[nt++] = s->x;
    }
    tpx_cut_t cut = {.at = m->cut_at, .seq = m->cut_seq, .chunk = m->cut_chunk,
                     .lane = m->cut_lane};
    moved_t *v = NULL;
    int n = moved_collect(p, 1, k, &cut, &v);
    if (n < 0) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a channel's repair");
        return;
    }
    uint64_t resent = 0;
    int again = 0; /* lanes an earlier loss had moved there */
    for (int i = 0; i < n; i++) {
        tpx_xfer_t *x = v[i].x;
        again += v[i].lane != k;
        const tpx_lane_t *l = &x->lane[v[i].lane];
        uint32_t posted_end = l->queued ? l->next_chunk : x->out.nchunks;
        x->chunks_done -= lane_count(&x->out, v[i].lane, v[i].from, posted_end);
        resent += lane_count(&x->out, v[i].lane, v[i].from, UINT32_MAX);
    }
    comm_drop(c);
    p->send_live &= ~bit;
    p->send_cursor %= __builtin_popcount(p->send_live);
    /* the lanes are queued at the REPAIR_ACK's point of the control order */
    moved_queue(p, 1, p->send_live, v, n, p->send_seq);
    free(v);
    p->repairs++;
    e->ctr.chunks_resent += resent;
    TPX_WARN("peer %s: it lost data channel %d: %llu chunk(s) of %d lane(s) (%d of them moved "
             "there by an earlier loss) dealt again over the other %d channel(s)", p->name, k,
             (unsigned long long)resent, n, again, __builtin_popcount(p->send_live));
    if (tpx__peer_ctrl_send(p, &(tpx_ctrl_t){.type = TPX_CTRL_REPAIR_ACK, .chan = (uint8_t)k},
                            NULL) != TPX_OK) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a control message");
        return;
    }
    /* transfers whose last sends were on the lost channel and arrived */
    for (int i = 0; i < nt && p->state == PEER_READY; i++)
        tpx__xfer_maybe_done(touched[i]);
    e->last_move_ns = tpx__now_ns();
}

void tpx__peer_repair_acked(tpx_peer_t *p, const tpx_ctrl_t *m)
{
    int k = m->chan;
    uint32_t bit = 1u << k;
    if (!(p->rx_lost & bit)) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "an answer to a repair never asked for");
        return;
    }
    tpx_comm_t *c = p->recv[k];
    c->q_head = c->q_tail = NULL; /* lanes queued since the loss: moved below */
    moved_t *v = NULL;
    int n = moved_collect(p, 0, k, &p->rx_cut[k], &v);
    if (n < 0) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a channel's repair");
        return;
    }
    p->recv_live &= ~bit;
    p->recv_cursor %= __builtin_popcount(p->recv_live);
    moved_queue(p, 0, p->recv_live, v, n, m->seq);
    free(v);
    p->rx_lost &= ~bit;
    p->rx_dealt_ns = tpx__now_ns();
    TPX_INFO("peer %s: data channel %d repaired: %d lane(s) take their missing chunks over "
             "the other %d channel(s)", p->name, k, n, __builtin_popcount(p->recv_live));
}

/* A comm that rejoins: as a new one, its window numbered from 0 again (a
 * devmem plugin's fragment queue is indexed by the request's place in its
 * comm, as the window's slots are; comm_drop left the window empty). */
static void comm_revive(tpx_comm_t *c)
{
    c->win.posted = c->win.done = 0;
    c->dead = 0;
    c->live = (tpx_chan_live_t){0};
    c->rc2_since_ns = 0;
    c->gen++;
}

void tpx__peer_rejoin_send(tpx_peer_t *p, tpx_comm_t *c)
{
    uint32_t bit = 1u << c->chan;
    comm_revive(c);
    if (tpx__peer_ctrl_send(p, &(tpx_ctrl_t){.type = TPX_CTRL_REJOIN, .chan = (uint8_t)c->chan},
                            NULL) != TPX_OK) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a control message");
        return;
    }
    /* streams announced from here on (after REJOIN) are dealt to it */
    p->send_live |= bit;
    tpx__peer_ctrl_flush(p);
    tpx__peer_ring(p);
    TPX_INFO("peer %s: data channel %d connected again: it carries new transfers", p->name,
             c->chan);
}

void tpx__peer_rejoin_started(tpx_peer_t *p, const tpx_ctrl_t *m)
{
    int k = m->chan;
    uint32_t bit = 1u << k;
    if (k >= p->nchan || (p->recv_live & bit) || (p->rx_lost & bit) ||
        (p->recv[k]->comm == NULL && p->recv[k]->rj_listen == NULL)) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a rejoin of a data channel never lost or offered");
        return;
    }
    comm_revive(p->recv[k]);
    p->recv_live |= bit;
    p->rx_dealt_ns = tpx__now_ns();
    p->e->ctr.chan_rejoined++;
    TPX_INFO("peer %s: data channel %d rejoined: new transfers are dealt to it again", p->name,
             k);
}
