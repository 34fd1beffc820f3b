/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_pass.c - one pass over a ready peer's comms: the data chunks of its
 * transfers dealt into the windows, the completions (a chunk, a control
 * message sent or received), and the dispatch of what arrives on the
 * control stream to the transfers it belongs to: two-sided receives
 * matched here, one-sided requests and answers to rma.c.
 *
 * The top of the data path (engine.c runs it): it calls down into the
 * one-sided transfers (rma.c), the control stream (peer_ctrl.c), the end
 * of transfers and peers (peer_fail.c), the transfer objects (xfer.c),
 * the windows (window.c) and packing (pack.c), never back up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/trace.h"
#include "engine.h"
#include "mem.h"
#include "pack.h"
#include "peer.h"
#include "rma.h"
#include "window.h"
#include "xfer.h"

void tpx__peer_remote_closed(tpx_peer_t *p, const char *why)
{
    if (p->state != PEER_READY || p->remote_closed)
        return;
    p->remote_closed = 1;
    /* Messages already announced are still delivered; receives waiting for
     * a message the peer will never send end now. */
    uint32_t n = p->recv_pending_n;
    p->recv_pending_n = 0;
    if (n > 0)
        TPX_WARN("peer %s: %s with %u receive(s) waiting for a message", p->name, why, n);
    else
        TPX_INFO("peer %s: %s", p->name, why);
    for (uint32_t i = 0; i < n; i++)
        tpx__xfer_complete(p->recv_pending[i], TPX_ERR_CONN_RESET);
    /* so do one-sided requests the peer has not answered */
    tpx__rma_unanswered_fail(p, TPX_ERR_CONN_RESET);
    if (p->state == PEER_READY && p->active == NULL && p->unexpected_n == 0)
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, why);
}

/* The last segment at or after `from` whose first payload chunk is at or
 * before k (segments lie in chunk order, and `from` is at or before it): a
 * gallop, then a bisection. A lane posts every n-th chunk, so walking its
 * cursor a segment at a time cost it every segment of the transfer: 1.3
 * million 1 KiB elements of a strided READ cost the pass 40 ms a post. */
static uint32_t seg_at(const tpx_xfer_t *x, uint32_t from, uint32_t k)
{
    uint32_t lo = from;
    uint64_t hi = x->nsegs, step = 1;
    for (;;) { /* segs[lo].chunk0 <= k, or lo == from */
        uint64_t probe = (uint64_t)lo + step;
        if (probe >= x->nsegs || x->segs[probe].chunk0 > k) {
            hi = TPX_MIN(probe, (uint64_t)x->nsegs);
            break;
        }
        lo = (uint32_t)probe;
        step *= 2;
    }
    while (hi - lo > 1) { /* segs[hi].chunk0 > k, or hi == nsegs */
        uint32_t mid = (uint32_t)(lo + (hi - lo) / 2);
        if (x->segs[mid].chunk0 <= k)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The run of segments sharing payload chunk k, found from the segment a
 * lane's cursor points at (the run's last one). */
static uint32_t shared_run(const tpx_xfer_t *x, uint32_t last, uint32_t k)
{
    uint32_t first = last;
    while (first > 0 && x->segs[first - 1].shared && x->segs[first - 1].chunk0 == k)
        first--;
    return first;
}

/* ---- shared chunks whose GPU copy runs (window.h tpx_packwait_t) ------------------- */

static tpx_packwait_t *pw_push(tpx_comm_t *c)
{
    if (c->pw == NULL && (c->pw = calloc(TPX_WINDOW_MAX, sizeof(*c->pw))) == NULL)
        return NULL;
    /* each holds a staging chunk, of which the comm has its window's capacity */
    tpx_packwait_t *w = &c->pw[(c->pw_head + c->pw_n) % TPX_WINDOW_MAX];
    c->pw_n++;
    return w;
}

static void pw_pop(tpx_comm_t *c)
{
    c->pw_head = (c->pw_head + 1) % TPX_WINDOW_MAX;
    c->pw_n--;
}

/* A chunk is done: its staging chunk free again, its transfer one chunk
 * (or run) further. */
static void chunk_count(tpx_comm_t *c, const tpx_slot_t *s)
{
    tpx_xfer_t *x = s->x;
    if (s->shared && !s->vec)
        tpx__pack_stage_put(c, s->stage);
    x->chunks_done += s->nrun > 1 ? s->nrun : 1;
    if (!c->is_send && s->chunk < x->in.nlist && (x->kind == XK_TWRITE || x->kind == XK_TREAD)) {
        x->ops->list_chunk_done(x);
        if (c->peer->state != PEER_READY)
            return; /* the list failed the peer: x is done, and freed */
    }
    tpx__xfer_maybe_done(x);
}

/* Receive comm: count the chunks whose scatter finished, in order. The
 * number counted, or -1 if the peer failed. */
static int pw_reap(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    int n = 0;
    while (c->pw_n > 0 && p->state == PEER_READY) {
        tpx_packwait_t *w = &c->pw[c->pw_head];
        tpx_status_t st = tpx__pack_op_test(p->e, w->op);
        if (st == TPX_INPROGRESS)
            break;
        if (st != TPX_OK) {
            tpx__peer_fail(p, st, "scattering a packed chunk failed");
            return -1;
        }
        tpx_slot_t s = w->slot;
        pw_pop(c);
        chunk_count(c, &s);
        n++;
    }
    return p->state == PEER_READY ? n : -1;
}

/* A data channel's post failed. A connection that ended (the receiver
 * dropped the channel on its NIC's word, peer_sweep.c, before this side
 * heard) loses the channel as a failed test does: repaired if the peer
 * lives (peer_repair.c). Any other failure fails the peer. 0: the peer
 * lives, nothing was posted; -1: it failed. */
static int post_failed(tpx_comm_t *c, tpx_status_t st, const char *what)
{
    tpx_peer_t *p = c->peer;
    if (st == TPX_ERR_CONN_RESET && !c->is_ctrl) {
        char why[160];
        snprintf(why, sizeof(why), "data channel %d (%s): %s (%s)", c->chan,
                 c->is_send ? "send" : "receive", what, tpx_status_string(st));
        tpx__peer_chan_lost(p, c, why);
    } else {
        tpx__peer_fail(p, st, what);
    }
    return p->state == PEER_READY ? 0 : -1;
}

/* Send comm: post the head gathered chunk once its copy finished. 1
 * posted, 0 not finished (or the plugin is busy), -1 the peer failed. */
static int pw_post(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    tpx_packwait_t *w = &c->pw[c->pw_head];
    tpx_status_t st = tpx__pack_op_test(p->e, w->op);
    if (st == TPX_INPROGRESS)
        return 0;
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, "gathering a packed chunk failed");
        return -1;
    }
    void *mh;
    if (w->slot.t_post_ns != 0)
        w->slot.t_post_ns = tpx__now_ns();
    st = tpx__region_mh(w->region, c->id, c->comm, w->roff, &mh);
    if (st == TPX_OK)
        st = tpx__window_post(c, w->buf, w->slot.len, mh, &w->slot);
    if (st == TPX_INPROGRESS)
        return 0;
    if (st != TPX_OK)
        return post_failed(c, st, "posting a send failed");
    pw_pop(c);
    return 1;
}

void tpx__xfer_chunk_done(tpx_comm_t *c, tpx_slot_t *s)
{
    tpx_xfer_t *x = s->x;
    const tpx_stream_t *stm = c->is_send ? &x->out : &x->in;
    TPX_TL(TPX_TR_CHUNK_DONE, c->is_send);
    if (x->kind != XK_SEND && x->kind != XK_RECV) {
        /* one-sided phase counters: a clock read per message, none per block */
        uint64_t now = tpx__now_ns();
        x->e->ctr.rma_msgs++;
        x->e->ctr.rma_msgs_packed += s->shared;
        x->e->ctr.rma_msg_ns += now - s->t_post_ns;
        x->rma.t_data_ns = now;
    }
    if (s->shared && !s->vec && !c->is_send) {
        /* scatter the received shared chunk into its blocks */
        uint32_t k = s->chunk - stm->nlist;
        uint32_t lo = seg_at(x, 0, k);
        uint32_t first = shared_run(x, lo, k);
        tpx_status_t st;
        if (tpx__pack_async_ok(x->e, x, first, lo)) {
            /* counted when the copy has finished (pw_reap) */
            uint64_t op = 0;
            tpx_packwait_t *w;
            st = tpx__pack_scatter_async(c, x, first, lo, s->dst, &op);
            if (st == TPX_OK && (w = pw_push(c)) != NULL) {
                *w = (tpx_packwait_t){.slot = *s, .op = op};
                return;
            }
            if (st == TPX_OK)
                st = TPX_ERR_NO_MEMORY;
        } else {
            st = tpx__pack_scatter(c, x, first, lo, s->dst);
        }
        if (st != TPX_OK) {
            tpx__peer_fail(c->peer, st, "scattering a packed chunk failed");
            return;
        }
    }
    chunk_count(c, s);
}

static void lane_pop(tpx_comm_t *c)
{
    tpx_xfer_t *x = c->q_head;
    tpx_lane_t *l = &x->lane[c->q_li];
    c->q_head = l->next;
    c->q_li = l->next_li;
    if (c->q_head == NULL)
        c->q_tail = NULL;
    l->next = NULL;
    l->queued = 0;
}

/* Chunk j of a stream: its buffer, length, region and region offset
 * (region NULL: the peer's scratch buffer, the bytes are discarded), or a
 * shared chunk: segments [seg_first, seg_last] packed back to back. */
typedef struct {
    char *buf;
    uint32_t len;
    tpx_region_t *region;
    uint64_t roff;
    int shared;
    uint32_t seg_first, seg_last;
} chunk_at_t;

static void chunk_locate(tpx_xfer_t *x, const tpx_stream_t *st, tpx_lane_t *l, uint32_t j,
                         chunk_at_t *out)
{
    tpx_peer_t *p = x->peer;
    uint64_t chunk = p->chunk;
    out->shared = 0;
    out->roff = 0;
    if (j < st->nlist) {
        uint64_t o = (uint64_t)j * chunk;
        out->len = (uint32_t)TPX_MIN(chunk, x->rma.list_len - o);
        if (x->rma.list == NULL) { /* a request refused unread (rma.c): drained */
            out->buf = NULL;
            out->region = NULL;
            return;
        }
        out->buf = (char *)x->rma.list + o;
        out->region = x->rma.list_region;
        out->roff = (uint64_t)((uintptr_t)x->rma.list - x->rma.list_region->base) + o;
        return;
    }
    uint32_t k = j - st->nlist;
    l->seg = seg_at(x, l->seg, k);
    const tpx_seg_t *g = &x->segs[l->seg];
    out->shared = g->shared;
    if (g->shared) {
        out->seg_last = l->seg;
        out->seg_first = shared_run(x, l->seg, k);
        out->len = g->pack_off + (uint32_t)g->len;
        out->region = NULL;
        out->buf = NULL;
        return;
    }
    uint64_t o = (uint64_t)(k - g->chunk0) * chunk;
    out->len = (uint32_t)TPX_MIN(chunk, g->len - o);
    out->region = g->region;
    out->roff = g->off + o;
    out->buf = g->region ? (char *)g->region->base + g->off + o : NULL;
}

static int post_data(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    if (c->pw_n > 0 && c->is_send) {
        int r = pw_post(c);
        if (r != 0)
            return r;
    }
    tpx_xfer_t *x = c->q_head;
    if (x == NULL)
        return 0;
    tpx_lane_t *l = &x->lane[c->q_li]; /* its own lane, or a lost channel's (peer_repair.c) */
    const tpx_stream_t *stm = c->is_send ? &x->out : &x->in;
    uint32_t j = l->next_chunk;
    if (j >= stm->gate)
        return 0; /* the owner has not checked the request list yet */
    chunk_at_t at = {0};
    chunk_locate(x, stm, l, j, &at);
    int async = at.shared && tpx__pack_async_ok(p->e, x, at.seg_first, at.seg_last);
    if (c->is_send && c->pw_n > 0 && !async)
        return 0; /* behind the gathered chunks still copying: messages go in order */
    uint32_t nrun = 1;
    if (stm->run > 1 && j >= stm->nlist && !at.shared) {
        /* a run: the chunks of j's block that lie in j's segment, contiguous
         * in its region: one message (shared and list chunks go alone) */
        const tpx_seg_t *g = &x->segs[l->seg];
        uint64_t o = (uint64_t)(j - stm->nlist - g->chunk0) * p->chunk;
        uint64_t seg_end = (uint64_t)stm->nlist + g->chunk0 + g->len / p->chunk +
                           (g->len % p->chunk != 0);
        uint64_t blk_end = TPX_MIN(((uint64_t)j / stm->run + 1) * stm->run, stm->nchunks);
        uint64_t end = TPX_MIN(seg_end, blk_end);
        if (end > (uint64_t)j + 1) {
            nrun = (uint32_t)(end - j);
            at.len = (uint32_t)TPX_MIN((uint64_t)nrun * p->chunk, g->len - o);
        }
    }
    int discard = at.region == NULL && !at.shared;
    uint64_t t_post = x->kind != XK_SEND && x->kind != XK_RECV ? tpx__now_ns() : 0;
    tpx_region_t *r = discard ? p->scratch_region : at.region;
    char *buf = discard ? (char *)p->scratch : at.buf;
    uint64_t roff = discard ? 0 : at.roff;
    uint8_t stage = 0;
    if (at.shared) {
        /* straight from and to the blocks when the plugin can (one vectored
         * message: the kernel's copy gathers and scatters) */
        struct iovec *iov;
        int n = tpx__pack_iov(c, x, at.seg_first, at.seg_last, &iov);
        if (n > 0) {
            tpx_status_t st = tpx__window_postv(
                c, iov, n, at.len,
                &(tpx_slot_t){.kind = SLOT_DATA, .x = x, .chunk = j, .shared = 1, .vec = 1,
                              .dst_dev = -1, .t_post_ns = t_post});
            if (st == TPX_INPROGRESS)
                return 0;
            if (st != TPX_OK)
                return post_failed(c, st, c->is_send ? "posting a send failed"
                                                     : "posting a receive failed");
            goto posted;
        }
        /* small blocks packed into a free chunk of the comm's staging
         * buffer, the slot's until it is done (pack.c); none is free while
         * the copies of chunks that hold them run */
        if (c->stage_nfree == 0 ||
            (async && c->win.posted - c->win.done + c->pw_n >= (uint64_t)c->win.cap))
            return 0;
        tpx_status_t st = tpx__pack_stage(c, tpx__pack_run_dev(x, at.seg_first, at.seg_last),
                                          &stage, &buf, &r, &roff);
        if (st == TPX_OK && c->is_send && async) {
            /* posted once the copy has finished (pw_post), in order */
            uint64_t op = 0;
            tpx_packwait_t *w;
            st = tpx__pack_gather_async(c, x, at.seg_first, at.seg_last, buf, &op);
            if (st == TPX_OK && (w = pw_push(c)) != NULL) {
                *w = (tpx_packwait_t){
                    .slot = {.kind = SLOT_DATA, .x = x, .chunk = j, .len = at.len, .shared = 1,
                             .stage = stage, .dst_dev = -1, .dst = buf, .t_post_ns = t_post},
                    .buf = buf, .region = r, .roff = roff, .op = op};
                tpx__pack_stage_take(c);
                goto posted;
            }
            if (st == TPX_OK)
                st = TPX_ERR_NO_MEMORY;
        } else if (st == TPX_OK && c->is_send) {
            st = tpx__pack_gather(c, x, at.seg_first, at.seg_last, buf);
        }
        if (st != TPX_OK) {
            tpx__peer_fail(p, st, c->is_send ? "gathering a packed chunk failed"
                                             : "no staging buffer for a packed chunk");
            return -1;
        }
    }
    void *mh;
    tpx_status_t st = tpx__region_mh(r, c->id, c->comm, roff, &mh);
    if (st == TPX_OK)
        st = tpx__window_post(c, buf, at.len, mh,
                              &(tpx_slot_t){.kind = SLOT_DATA, .x = x, .chunk = j,
                                            .nrun = (uint16_t)nrun,
                                            .shared = (uint8_t)at.shared, .stage = stage,
                                            .dst_dev = discard ? -1 : (int8_t)r->cuda_dev,
                                            .dst = discard ? NULL : buf, .t_post_ns = t_post});
    if (st == TPX_INPROGRESS)
        return 0; /* the plugin is busy: retry on the next pass */
    if (st != TPX_OK)
        return post_failed(c, st, c->is_send ? "posting a send failed" : "posting a receive failed");
    if (at.shared)
        tpx__pack_stage_take(c);
posted:
    if (stm->run > 1) {
        /* the rest of the block, then the lane's next block */
        uint64_t b = j / stm->run, nxt = (uint64_t)j + nrun;
        if (nxt >= TPX_MIN((b + 1) * stm->run, stm->nchunks))
            nxt = (b + (uint64_t)stm->nlive) * stm->run;
        l->next_chunk = (uint32_t)TPX_MIN(nxt, (uint64_t)UINT32_MAX);
    } else {
        l->next_chunk += stm->nlive;
    }
    if (l->next_chunk >= stm->nchunks)
        lane_pop(c);
    return 1;
}

/* May the peer's next control messages be read? Not while it is far
 * ahead of us (flow control: the buffers stay unposted, the plugin holds
 * the sender back, the peer's own deadlines apply), so that nothing a peer
 * sends makes us hold memory without bound:
 *  - early send headers waiting for tpx_recv() (TPX_MAX_UNEXPECTED);
 *  - answers to its requests that it does not take off its control
 *    connection (TPX_MAX_ANSWERS_QUEUED; our own messages do not count:
 *    two engines that both post many requests must not stop each other);
 *  - requests of it served or refused here: refused ones too wait for their
 *    list on the data channels (twice TPX_RMA_PEER_REQUESTS). */
static int ctrl_may_read(const tpx_peer_t *p)
{
    return p->unexpected_n < TPX_MAX_UNEXPECTED && p->outbox_answers < TPX_MAX_ANSWERS_QUEUED &&
           p->rma_ntargets < 2 * (uint64_t)tpx__config_int(TPX_CFG_RMA_PEER_REQUESTS);
}

int tpx__peer_ctrl_may_read(const tpx_peer_t *p) { return ctrl_may_read(p); }

/* The control receive comm ended: the peer's end (it said BYE, or cannot
 * have moved its control stream to the bootstrap connection), or a move
 * (peer_ctrl.c: a peer that closes says BYE first; one that died without
 * it ends its bootstrap connection too, and the sweep fails it). */
static int ctrl_ended_for_good(const tpx_peer_t *p)
{
    return p->remote_closed || !p->e->cfg.failover || p->bs == NULL || p->bs_eof_ns != 0;
}

/* Post control receives on the idle buffers. -1 if the peer failed or its
 * control stream ended. */
static int ctrl_repost(tpx_peer_t *p)
{
    tpx_comm_t *c = p->ctrl_recv;
    while (p->ctrl_nidle > 0 && !tpx__window_full(c)) {
        uint16_t idx = p->ctrl_idle[p->ctrl_nidle - 1];
        void *mh, *buf = p->ctrl_buf + (size_t)idx * TPX_CTRL_BUF_SLOT;
        tpx_status_t st = tpx__region_mh(p->ctrl_region, c->id, c->comm, 0, &mh);
        if (st == TPX_OK)
            st = tpx__window_post(c, buf, TPX_CTRL_BUF_SLOT, mh,
                                  &(tpx_slot_t){.kind = SLOT_CTRL, .dst_dev = -1, .dst = buf,
                                                .ctrl = idx});
        if (st == TPX_INPROGRESS)
            return 0; /* plugin busy: retried by the next post or pass */
        if (st == TPX_ERR_CONN_RESET) {
            if (ctrl_ended_for_good(p))
                tpx__peer_remote_closed(p, "the peer's control stream ended");
            else
                tpx__peer_ctrl_rx_move(p, "control receive comm: the peer closed it");
            return -1;
        }
        if (st != TPX_OK) {
            tpx__peer_fail(p, st, "posting a control receive failed");
            return -1;
        }
        p->ctrl_nidle--;
    }
    return 0;
}

/* The schedule phase of one comm: the next chunk of the transfer at the
 * head of its lane queue, or the next control message of the peer's
 * outbox, into the window. 1 posted, 0 nothing to post or the plugin is
 * busy, -1 the peer failed. */
static int comm_schedule(tpx_comm_t *c)
{
    if (c->is_ctrl)
        return c->is_send ? tpx__comm_post_ctrl(c) : 0;
    return post_data(c);
}

/* The completion phase of one released slot: a chunk of a transfer, a
 * control message sent, or one received. 0: stop the comm's pass (the
 * peer failed or stopped). */
static int comm_complete(tpx_comm_t *c, tpx_slot_t *s)
{
    tpx_peer_t *p = c->peer;
    if (s->kind == SLOT_DATA) {
        tpx__xfer_chunk_done(c, s);
    } else if (c->is_send) {
        tpx__peer_ctrl_sent(p, s->ctrl);
    } else {
        const unsigned char *msg = p->ctrl_buf + (size_t)s->ctrl * TPX_CTRL_BUF_SLOT;
        tpx__peer_ctrl_received(p, msg, s->got);
        if (p->state != PEER_READY)
            return 0;
        /* Re-post the buffer, unless the peer is far ahead of our
         * receives: then the control stream is left to stall (the
         * plugin's flow control holds the sender back) until
         * tpx_recv() takes early headers off the queue. */
        p->ctrl_idle[p->ctrl_nidle++] = s->ctrl;
        if (ctrl_may_read(p) && ctrl_repost(p) < 0)
            return 0;
    }
    return p->state == PEER_READY;
}

int tpx__comm_pass(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    int completed = 0;
    if (c->pw_n > 0 && !c->is_send && (completed = pw_reap(c)) < 0)
        return 0;
    for (;;) {
        /* plugin window, then completion: the head, while it finishes */
        for (;;) {
            tpx_slot_t s;
            tpx_window_err_t err;
            int r = tpx__window_test(c, &s, &err);
            if (r == TPX_WIN_EMPTY)
                break;
            if (r == TPX_WIN_HOLD)
                return completed;
            if (r == TPX_WIN_ERR) {
                if (err.closed && c->is_ctrl && !c->is_send && ctrl_ended_for_good(p)) {
                    /* The control stream ended: no new message will come,
                     * data already announced may still arrive. */
                    tpx__peer_remote_closed(p, "the peer's control stream ended");
                } else if (!c->is_ctrl) {
                    /* one data channel: repaired if the peer lives (peer_repair.c) */
                    char why[160];
                    snprintf(why, sizeof(why), "data channel %d (%s): %s", c->chan,
                             c->is_send ? "send" : "receive", err.why);
                    tpx__peer_chan_lost(p, c, why);
                } else {
                    /* the control stream: over the bootstrap connection if the
                     * peer lives (peer_ctrl.c); a peer that closes says BYE
                     * first, so one that ends without it may have moved it
                     * there (a process that died: its bootstrap EOF follows) */
                    char why[160];
                    snprintf(why, sizeof(why), "control %s comm: %s",
                             c->is_send ? "send" : "receive", err.why);
                    if (c->is_send)
                        tpx__peer_ctrl_move(p, UINT64_MAX, why);
                    else
                        tpx__peer_ctrl_rx_move(p, why);
                }
                return completed;
            }
            completed++;
            if (!comm_complete(c, &s))
                return completed;
        }
        /* schedule: one more request, then test the head again (a request
         * never waits for the window to fill before it is tested) */
        if (tpx__window_full(c) || p->state != PEER_READY)
            return completed;
        if (comm_schedule(c) <= 0)
            return completed;
    }
}

/* Confirm the streams queued by the ends of their transfers (peer_fail.c):
 * up to TPX_CTRL_DONE_MAX in one RECV_DONE, so that a pass that completes
 * many small transfers sends few messages. */
static void confirm_flush(tpx_peer_t *p)
{
    if (p->confirm_oom) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a confirmation");
        return;
    }
    for (uint32_t i = 0; i < p->confirm_n; i += TPX_CTRL_DONE_MAX) {
        tpx_ctrl_t m = {.type = TPX_CTRL_RECV_DONE};
        while (m.ndone < TPX_CTRL_DONE_MAX && i + m.ndone < p->confirm_n) {
            m.done[m.ndone] = p->confirm_q[i + m.ndone];
            m.ndone++;
        }
        if (tpx__peer_ctrl_send(p, &m, NULL) != TPX_OK) {
            tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a control message");
            return;
        }
    }
    p->confirm_n = 0;
}

/* The peer confirmed the stream announced by our message `seq`: the
 * transfer that sent it may end. */
static void confirm_received(tpx_peer_t *p, uint64_t seq)
{
    for (tpx_xfer_t *x = p->active; x != NULL; x = x->next) {
        if (x->confirm_pending && x->out.seq == seq) {
            x->confirm_pending = 0;
            tpx__xfer_maybe_done(x);
            return;
        }
    }
    /* without TPX_CHANNEL_FAILOVER nothing waits for confirmations */
    if (p->e->cfg.failover)
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a confirmation of nothing sent");
}

void tpx__peer_pass(tpx_peer_t *p)
{
    if (p->state != PEER_READY)
        return;
    if (!p->remote_closed && !p->ctrl_bs_rx) {
        /* control receives back on idle buffers (flow control) */
        if (p->ctrl_nidle > 0 && ctrl_may_read(p) && ctrl_repost(p) < 0 &&
            p->state != PEER_READY)
            return;
        if (!p->remote_closed && !p->ctrl_bs_rx)
            (void)tpx__comm_pass(p->ctrl_recv);
    }
    (void)tpx__comm_pass(p->ctrl_send);
    if (p->rma_expanding != NULL && p->state == PEER_READY)
        tpx__rma_expand_pass(p);
    /* Data channels not open yet (peer.c tpx__peer_chan_drive): their
     * chunks wait on the lanes in the order both sides derive, and are
     * dealt from there once the channels exist. */
    for (int k = 0; p->chan_state == CHAN_OPEN && k < p->nchan && p->state == PEER_READY; k++) {
        /* (a rejoined receive comm waits for its accept: peer.c, rejoin) */
        if (!p->send[k]->dead)
            (void)tpx__comm_pass(p->send[k]);
        if (!p->recv[k]->dead && p->recv[k]->comm != NULL && p->state == PEER_READY)
            (void)tpx__comm_pass(p->recv[k]);
    }
    /* Streams that arrived whole are confirmed to their sender, which
     * holds them until then in case a lost channel needs them again. */
    if (p->confirm_n > 0 && p->state == PEER_READY)
        confirm_flush(p);
    /* Control messages the data just produced (a WRITE's answer, a
     * notification after a completion, a confirmation) leave in this pass,
     * not after the next nap. */
    if (p->outbox_n > 0 && p->state == PEER_READY)
        (void)tpx__comm_pass(p->ctrl_send);
    /* ... and the transfers whose messages a flush sent over the bootstrap
     * connection in this pass may end (peer_ctrl.c) */
    if (p->bs_sent_n > 0 && p->state == PEER_READY)
        tpx__peer_ctrl_bs_reap(p);
    /* Buffers held back above whose reason this pass removed (answers sent,
     * requests done): read on now, not at the next pass, which an idle
     * engine takes only after its nap. */
    if (p->state == PEER_READY && !p->remote_closed && !p->ctrl_bs_rx && p->ctrl_nidle > 0 &&
        ctrl_may_read(p))
        (void)ctrl_repost(p);
}

/* Start receiving the message announced by `m` into receive `x`. */
static void recv_match(tpx_peer_t *p, tpx_xfer_t *x, const tpx_ctrl_t *m)
{
    x->len = m->len;
    x->two.seq = m->seq;
    x->two.seg1 = (tpx_seg_t){.region = x->two.region, .off = x->two.off, .len = m->len, .chunk0 = 0};
    if (m->len > x->two.cap) {
        x->two.drain = 1;
        x->two.seg1.region = NULL;
        TPX_WARN("peer %s: message %llu of %llu bytes is larger than the receive of %llu bytes: "
                 "discarded (TPX_ERR_TRUNCATED)", p->name, (unsigned long long)m->seq,
                 (unsigned long long)m->len, (unsigned long long)x->two.cap);
    }
    x->nchunks = (uint32_t)((m->len + p->chunk - 1) / p->chunk);
    x->in = (tpx_stream_t){.nchunks = x->nchunks, .gate = UINT32_MAX,
                           .run = tpx__stream_run(p, x->nchunks), .first_chan = p->recv_cursor};
    tpx__stream_cursor_move(p, &p->recv_cursor, &x->in, m->len);
    x->state = XF_ACTIVE;
    if (x->nchunks == 0) {
        tpx__xfer_maybe_done(x);
        return;
    }
    tpx__stream_enqueue(x, &x->in, 0);
}

/* Does `m` carry data on the data channels (so it takes its turn in the
 * chunk order)? */
static int ctrl_has_data(const tpx_ctrl_t *m)
{
    /* An INLINE request brings everything the owner receives in its body:
     * nothing of it is on the data channels, it starts at once. */
    return m->type == TPX_CTRL_SEND_HDR || m->type == TPX_CTRL_REPAIR_ACK ||
           m->type == TPX_CTRL_REJOIN ||
           (m->type == TPX_CTRL_RMA_REQ && !(m->flags & TPX_CTRL_REQ_INLINE)) ||
           (m->type == TPX_CTRL_RMA_RESP && m->nchunks > 0);
}

/* Start a message that carries data, in arrival order (body: what
 * follows its header, a LIST request's list). 0: it must wait for a
 * tpx_recv() (a two-sided message with no receive posted). */
static int peer_start_data(tpx_peer_t *p, const tpx_ctrl_t *m, const unsigned char *body)
{
    p->start_seq = m->seq; /* the name of the stream it starts (xfer.c) */
    switch (m->type) {
    case TPX_CTRL_REPAIR_ACK:
        tpx__peer_repair_acked(p, m);
        return 1;
    case TPX_CTRL_REJOIN:
        tpx__peer_rejoin_started(p, m);
        return 1;
    case TPX_CTRL_SEND_HDR: {
        if (p->recv_pending_n == 0)
            return 0;
        tpx_xfer_t *x = p->recv_pending[0];
        memmove(p->recv_pending, p->recv_pending + 1,
                (p->recv_pending_n - 1) * sizeof(*p->recv_pending));
        p->recv_pending_n--;
        recv_match(p, x, m);
        return 1;
    }
    case TPX_CTRL_RMA_REQ:
        tpx__rma_target_begin(p, m, (m->flags & TPX_CTRL_REQ_LIST) ? body : NULL);
        return 1;
    default:
        (void)tpx__rma_resp(p, m, NULL);
        return 1;
    }
}

/* Start queued messages from the head while they can start. */
void tpx__peer_drain_queue(tpx_peer_t *p)
{
    while (p->unexpected_n > 0 && p->state == PEER_READY) {
        tpx_ctrl_t m;
        uint32_t h = p->unexpected_head;
        (void)tpx__ctrl_decode(p->unexpected[h], &m); /* checked on arrival */
        if (!peer_start_data(p, &m, p->unexpected_body[h]))
            return;
        free(p->unexpected_body[h]);
        p->unexpected_body[h] = NULL;
        p->unexpected_head = (h + 1) % p->unexpected_cap;
        p->unexpected_n--;
    }
}

/* Queue a message with data behind those that wait (a LIST request keeps
 * a copy of its body: at most TPX_CTRL_BODY_MAX bytes for each of at most
 * TPX_MAX_UNEXPECTED messages, after which flow control stops the peer). */
static tpx_status_t peer_queue(tpx_peer_t *p, const unsigned char *msg, uint32_t body_len)
{
    if (p->unexpected_n == p->unexpected_cap) {
        uint32_t cap = p->unexpected_cap ? p->unexpected_cap * 2 : 64;
        unsigned char(*nb)[TPX_CTRL_MSG_SIZE] = malloc(cap * sizeof(*nb));
        unsigned char **bodies = calloc(cap, sizeof(*bodies));
        if (nb == NULL || bodies == NULL) {
            free(nb);
            free(bodies);
            return TPX_ERR_NO_MEMORY;
        }
        for (uint32_t i = 0; i < p->unexpected_n; i++) {
            uint32_t k = (p->unexpected_head + i) % p->unexpected_cap;
            memcpy(nb[i], p->unexpected[k], TPX_CTRL_MSG_SIZE);
            bodies[i] = p->unexpected_body[k];
        }
        free(p->unexpected);
        free(p->unexpected_body);
        p->unexpected = nb;
        p->unexpected_body = bodies;
        p->unexpected_cap = cap;
        p->unexpected_head = 0;
    }
    uint32_t k = (p->unexpected_head + p->unexpected_n) % p->unexpected_cap;
    unsigned char *body = NULL;
    if (body_len > 0) {
        body = malloc(body_len);
        if (body == NULL)
            return TPX_ERR_NO_MEMORY;
        memcpy(body, msg + TPX_CTRL_MSG_SIZE, body_len);
    }
    memcpy(p->unexpected[k], msg, TPX_CTRL_MSG_SIZE);
    p->unexpected_body[k] = body;
    p->unexpected_n++;
    return TPX_OK;
}

void tpx__peer_ctrl_received(tpx_peer_t *p, const unsigned char *msg, uint32_t got)
{
    tpx_ctrl_t m;
    TPX_TL(TPX_TR_CTRL_IN, msg[7]); /* from either path (peer_ctrl.c) */
    p->active_ns = tpx__now_ns(); /* not idle: keeps its slot (peer.c, peer_admit) */
    tpx_status_t dst = tpx__ctrl_decode(msg, &m);
    if (dst == TPX_OK && got != TPX_SLOT_GOT_UNKNOWN && got != TPX_CTRL_MSG_SIZE + m.body_len) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a control message whose size is not its header's");
        return;
    }
    if (dst != TPX_OK) {
        int v = tpx__ctrl_version(msg);
        char why[128];
        if (v >= 0 && v != tpx__ctrl_version_ours())
            snprintf(why, sizeof(why), "the peer speaks control protocol version %d, this "
                     "engine %d: both ends need the same tpx version", v,
                     tpx__ctrl_version_ours());
        else
            snprintf(why, sizeof(why), "malformed control message");
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, why);
        return;
    }
    if (m.seq != p->recv_seq) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "control messages out of sequence");
        return;
    }
    p->recv_seq++;
    if (!tpx__rma_held_order(p, &m))
        return;
    if (m.type == TPX_CTRL_BYE) {
        tpx__peer_remote_closed(p, "the peer closed the connection");
        return;
    }
    if (m.type == TPX_CTRL_SEND_HDR && m.len > ((uint64_t)1 << 48)) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "announced message size is absurd");
        return;
    }
    if (m.type == TPX_CTRL_NOTIF) {
        tpx__rma_notif_part(p, &m);
        return;
    }
    if (m.type == TPX_CTRL_RMA_CANCEL) {
        tpx__rma_cancel_received(p, &m);
        return;
    }
    if (m.type == TPX_CTRL_REPAIR) {
        tpx__peer_repair_received(p, &m);
        return;
    }
    if (m.type == TPX_CTRL_RECV_DONE) {
        for (int i = 0; i < m.ndone && p->state == PEER_READY; i++)
            confirm_received(p, m.done[i]);
        return;
    }
    if (m.type == TPX_CTRL_RMA_REQ && !ctrl_has_data(&m)) {
        tpx__rma_target_begin(p, &m, msg + TPX_CTRL_MSG_SIZE); /* all of it inline */
        return;
    }
    if (!ctrl_has_data(&m)) {
        /* an answer without data on the channels: not in the chunk order */
        (void)tpx__rma_resp(p, &m, msg + TPX_CTRL_MSG_SIZE);
        return;
    }
    /* Messages with data start in arrival order: behind any that wait. */
    if (p->unexpected_n == 0 && peer_start_data(p, &m, msg + TPX_CTRL_MSG_SIZE))
        return;
    if (peer_queue(p, msg, m.body_len) != TPX_OK)
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for an early message header");
}
