/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xfer.c - two-sided transfers: headers, chunk dealing, matching, completion.
 *
 * A send posts a 64-byte header {seq, len} on the peer's control comm and
 * its chunks on the data comms: chunk j of a transfer goes to data channel
 * (first + j) % nchan, where `first` is a cursor both sides advance by the
 * transfer's chunk count, in transfer order (not past a lone small chunk:
 * tpx__stream_cursor_move). The receiver matches headers to
 * its posted receives in FIFO order and then posts exactly the chunk sizes
 * the sender posts, in the same order on every channel -- the only order a
 * FIFO-matching plugin like TCPX can deliver correctly. A message larger
 * than its receive is drained into a scratch buffer and reported as
 * TPX_ERR_TRUNCATED; nothing is written past the receive.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/sigpipe.h"
#include "common/trace.h"
#include "engine.h"
#include "mem.h"
#include "pack.h"
#include "peer.h"
#include "rma.h"
#include "window.h"
#include "xfer.h"

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

/* ---- notification: the engine fd ---------------------------------------------------- */

/* The completion fd is level-triggered on e->nunseen (tpx.h): readable
 * exactly while some completed transfer has not been seen by its owner.
 * The eventfd's counter is changed only under the lock, on the edges 0 -> 1
 * and 1 -> 0 of nunseen, so no thread's call can take a wake-up meant for
 * another: whoever waits on the fd for its own transfer sees it readable
 * until that transfer has been polled, waited for or released. */
static void xfer_unseen_add(tpx_engine_t *e, tpx_xfer_t *x)
{
    x->unseen = 1;
    if (e->nunseen++ == 0) {
        uint64_t one = 1;
        ssize_t n = write(e->efd, &one, sizeof(one));
        (void)n;
    }
}

static void xfer_unseen_drop(tpx_engine_t *e, tpx_xfer_t *x)
{
    if (!x->unseen)
        return;
    x->unseen = 0;
    if (--e->nunseen == 0) {
        uint64_t v;
        ssize_t n = read(e->efd, &v, sizeof(v));
        (void)n;
    }
}

/* ---- completion ---------------------------------------------------------------- */

static void xfer_free(tpx_xfer_t *x)
{
    if (x->segs_owned) {
        free(x->segs);
        free(x->regions);
    }
    free(x->rma.notif);
    free(x);
}

void tpx__xfer_complete(tpx_xfer_t *x, tpx_status_t st)
{
    if (x->state == XF_DONE)
        return;
    tpx_engine_t *e = x->e;
    tpx_peer_t *p = x->peer;
    x->state = XF_DONE;
    x->status = x->canceled && st == TPX_OK ? TPX_ERR_CANCELED : st;
    TPX_TL(TPX_TR_XFER_DONE, x->kind);
    atomic_store_explicit(&x->settled, 1, memory_order_release);
    if (x->prev)
        x->prev->next = x->next;
    else if (p->active == x)
        p->active = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->next = x->prev = NULL;
    e->inflight--;
    e->ncompleted++;
    for (uint32_t i = 0; i < x->nregions; i++) {
        tpx_region_t *r = x->regions[i];
        r->xfers--;
        tpx__region_maybe_release(r);
    }
    x->nregions = 0;
    x->two.region = NULL;
    if (x->ops != NULL)
        x->ops->completed(x); /* may free the preparation (x->regions) */
    pthread_cond_broadcast(&e->cond);
    if (x->released)
        xfer_free(x);
    else
        xfer_unseen_add(e, x); /* the engine fd is readable until it is seen */
    if (p->remote_closed && p->active == NULL && p->unexpected_n == 0 && p->state == PEER_READY)
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, "the peer closed the connection");
}

void tpx__xfer_maybe_done(tpx_xfer_t *x)
{
    if (x->state == XF_ACTIVE && x->chunks_done == x->nchunks && !x->hdr_pending &&
        !x->req.resp_pending)
        tpx__xfer_complete(x, x->two.drain ? TPX_ERR_TRUNCATED : x->err);
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

void tpx__xfer_chunk_done(tpx_comm_t *c, tpx_slot_t *s)
{
    tpx_xfer_t *x = s->x;
    const tpx_stream_t *stm = c->is_send ? &x->out : &x->in;
    TPX_TL(TPX_TR_CHUNK_DONE, c->is_send);
    if (s->shared && !s->vec && !c->is_send) {
        /* scatter the received shared chunk into its blocks */
        uint32_t k = s->chunk - stm->nlist;
        uint32_t lo = 0, hi = x->nsegs; /* the last segment with chunk0 <= k */
        while (hi - lo > 1) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (x->segs[mid].chunk0 <= k)
                lo = mid;
            else
                hi = mid;
        }
        tpx_status_t st = tpx__pack_scatter(c, x, shared_run(x, lo, k), lo, s->dst);
        if (st != TPX_OK) {
            tpx__peer_fail(c->peer, st, "scattering a packed chunk failed");
            return;
        }
    }
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

/* ---- lanes: the chunks of a transfer on one data comm ----------------------------- */

uint32_t tpx__stream_run(const tpx_peer_t *p, uint32_t nchunks)
{
    uint32_t r = nchunks / (8u * (uint32_t)p->nchan);
    return TPX_MAX(1u, TPX_MIN(r, p->run_max));
}

uint32_t tpx__stream_blocks(const tpx_stream_t *st)
{
    uint32_t r = st->run > 1 ? st->run : 1;
    return st->nchunks / r + (st->nchunks % r != 0);
}

void tpx__stream_cursor_move(const tpx_peer_t *p, int *cursor, const tpx_stream_t *st,
                             uint64_t bytes)
{
    if (st->nchunks == 1 && bytes <= TPX_STICKY_BYTES)
        return;
    *cursor = (int)(((uint32_t)*cursor + tpx__stream_blocks(st)) % (uint32_t)p->nchan);
}

/* Queue stream st of x on the send (or receive) comms: block b (chunks
 * [b * run, (b + 1) * run); run 1: chunk b) goes to channel
 * (first_chan + b) % nchan. */
void tpx__stream_enqueue(tpx_xfer_t *x, tpx_stream_t *st, int is_send)
{
    tpx_peer_t *p = x->peer;
    tpx_comm_t **comms = is_send ? p->send : p->recv;
    uint32_t run = st->run > 1 ? st->run : 1;
    for (int k = 0; k < p->nchan; k++) {
        uint32_t j0 = (uint32_t)((k - st->first_chan + p->nchan) % p->nchan) * run;
        if (j0 >= st->nchunks)
            continue;
        tpx_comm_t *c = comms[k];
        x->lane[c->lane] = (tpx_lane_t){.next = NULL, .next_chunk = j0, .seg = 0, .queued = 1};
        if (c->q_tail)
            c->q_tail->lane[c->lane].next = x;
        else
            c->q_head = x;
        c->q_tail = x;
    }
}

static void lane_pop(tpx_comm_t *c)
{
    tpx_xfer_t *x = c->q_head;
    c->q_head = x->lane[c->lane].next;
    if (c->q_head == NULL)
        c->q_tail = NULL;
    x->lane[c->lane].next = NULL;
    x->lane[c->lane].queued = 0;
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
    while (l->seg + 1 < x->nsegs && x->segs[l->seg + 1].chunk0 <= k)
        l->seg++;
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
    tpx_xfer_t *x = c->q_head;
    if (x == NULL)
        return 0;
    tpx_lane_t *l = &x->lane[c->lane];
    const tpx_stream_t *stm = c->is_send ? &x->out : &x->in;
    uint32_t j = l->next_chunk;
    if (j >= stm->gate)
        return 0; /* the owner has not checked the request list yet */
    chunk_at_t at = {0};
    chunk_locate(x, stm, l, j, &at);
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
                              .dst_dev = -1});
            if (st == TPX_INPROGRESS)
                return 0;
            if (st != TPX_OK) {
                tpx__peer_fail(p, st, c->is_send ? "posting a send failed"
                                                 : "posting a receive failed");
                return -1;
            }
            goto posted;
        }
        /* small blocks packed into a free chunk of the comm's staging
         * buffer, the slot's until it is done (pack.c) */
        tpx_status_t st = tpx__pack_stage(c, tpx__pack_run_dev(x, at.seg_first, at.seg_last),
                                          &stage, &buf, &r, &roff);
        if (st == TPX_OK && c->is_send)
            st = tpx__pack_gather(c, x, at.seg_first, at.seg_last, buf);
        if (st != TPX_OK) {
            tpx__peer_fail(p, st, c->is_send ? "gathering a packed chunk failed"
                                             : "no staging buffer for a packed chunk");
            return -1;
        }
    }
    void *mh;
    tpx_status_t st = tpx__region_mh(r, c, roff, &mh);
    if (st == TPX_OK)
        st = tpx__window_post(c, buf, at.len, mh,
                              &(tpx_slot_t){.kind = SLOT_DATA, .x = x, .chunk = j,
                                            .nrun = (uint16_t)nrun,
                                            .shared = (uint8_t)at.shared, .stage = stage,
                                            .dst_dev = discard ? -1 : (int8_t)r->cuda_dev,
                                            .dst = discard ? NULL : buf});
    if (st == TPX_INPROGRESS)
        return 0; /* the plugin is busy: retry on the next pass */
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, c->is_send ? "posting a send failed" : "posting a receive failed");
        return -1;
    }
    if (at.shared)
        tpx__pack_stage_take(c);
posted:
    if (stm->run > 1) {
        /* the rest of the block, then the lane's next block */
        uint64_t b = j / stm->run, nxt = (uint64_t)j + nrun;
        if (nxt >= TPX_MIN((b + 1) * stm->run, stm->nchunks))
            nxt = (b + (uint64_t)p->nchan) * stm->run;
        l->next_chunk = (uint32_t)TPX_MIN(nxt, (uint64_t)UINT32_MAX);
    } else {
        l->next_chunk += (uint32_t)p->nchan;
    }
    if (l->next_chunk >= stm->nchunks)
        lane_pop(c);
    return 1;
}

static int post_ctrl(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    tpx_engine_t *e = p->e;
    if (p->outbox_n == 0 || p->ctrl_send_nfree == 0)
        return 0;
    uint32_t idx = p->ctrl_send_free[p->ctrl_send_nfree - 1];
    tpx_ctrl_out_t *o = &p->outbox[p->outbox_head];
    unsigned char *buf = p->ctrl_buf + (size_t)(e->window + idx) * TPX_CTRL_BUF_SLOT;
    memcpy(buf, o->msg, TPX_CTRL_MSG_SIZE);
    void *mh;
    tpx_status_t st = tpx__region_mh(p->ctrl_region, c, 0, &mh);
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
    p->ctrl_send_nfree--;
    p->ctrl_send_owner[idx] = o->owner;
    p->outbox_answers -= o->answer != 0;
    p->outbox_head = (p->outbox_head + 1) % p->outbox_cap;
    p->outbox_n--;
    return 1;
}

void tpx__peer_ctrl_flush(tpx_peer_t *p)
{
    while (p->state == PEER_READY && !tpx__window_full(p->ctrl_send) &&
           post_ctrl(p->ctrl_send) > 0)
        ;
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

/* Post control receives on the idle buffers. -1 if the peer failed or its
 * control stream ended. */
static int ctrl_repost(tpx_peer_t *p)
{
    tpx_comm_t *c = p->ctrl_recv;
    while (p->ctrl_nidle > 0 && !tpx__window_full(c)) {
        uint16_t idx = p->ctrl_idle[p->ctrl_nidle - 1];
        void *mh, *buf = p->ctrl_buf + (size_t)idx * TPX_CTRL_BUF_SLOT;
        tpx_status_t st = tpx__region_mh(p->ctrl_region, c, 0, &mh);
        if (st == TPX_OK)
            st = tpx__window_post(c, buf, TPX_CTRL_BUF_SLOT, mh,
                                  &(tpx_slot_t){.kind = SLOT_CTRL, .dst_dev = -1, .dst = buf,
                                                .ctrl = idx});
        if (st == TPX_INPROGRESS)
            return 0; /* plugin busy: retried by the next post or pass */
        if (st == TPX_ERR_CONN_RESET) {
            tpx__peer_remote_closed(p, "the peer's control stream ended");
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
        return c->is_send ? post_ctrl(c) : 0;
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
        TPX_TL(TPX_TR_CTRL_IN, msg[7]);
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
                if (err.closed && c->is_ctrl && !c->is_send)
                    /* The control stream ended: no new message will come,
                     * data already announced may still arrive. */
                    tpx__peer_remote_closed(p, "the peer's control stream ended");
                else
                    tpx__peer_fail(p, err.st, err.why);
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

void tpx__peer_pass(tpx_peer_t *p)
{
    if (p->state != PEER_READY)
        return;
    if (!p->remote_closed) {
        /* control receives back on idle buffers (flow control) */
        if (p->ctrl_nidle > 0 && ctrl_may_read(p) && ctrl_repost(p) < 0 &&
            p->state != PEER_READY)
            return;
        if (!p->remote_closed)
            (void)tpx__comm_pass(p->ctrl_recv);
    }
    (void)tpx__comm_pass(p->ctrl_send);
    /* Data channels not open yet (peer.c tpx__peer_chan_drive): their
     * chunks wait on the lanes in the order both sides derive, and are
     * dealt from there once the channels exist. */
    for (int k = 0; p->chan_state == CHAN_OPEN && k < p->nchan && p->state == PEER_READY; k++) {
        (void)tpx__comm_pass(p->send[k]);
        (void)tpx__comm_pass(p->recv[k]);
    }
    /* Control messages the data just produced (a WRITE's answer, a
     * notification after a completion) leave in this pass, not after the
     * next nap. */
    if (p->outbox_n > 0 && p->state == PEER_READY)
        (void)tpx__comm_pass(p->ctrl_send);
    /* Buffers held back above whose reason this pass removed (answers sent,
     * requests done): read on now, not at the next pass, which an idle
     * engine takes only after its nap. */
    if (p->state == PEER_READY && !p->remote_closed && p->ctrl_nidle > 0 && ctrl_may_read(p))
        (void)ctrl_repost(p);
}

/* ---- control messages ----------------------------------------------------------- */

tpx_status_t tpx__peer_ctrl_post(tpx_peer_t *p, const unsigned char msg[TPX_CTRL_MSG_SIZE],
                                 tpx_xfer_t *owner, uint32_t body_len, int answer)
{
    if (p->outbox_n == p->outbox_cap) {
        uint32_t cap = p->outbox_cap ? p->outbox_cap * 2 : 64;
        tpx_ctrl_out_t *nb = malloc(cap * sizeof(*nb));
        if (nb == NULL)
            return TPX_ERR_NO_MEMORY;
        for (uint32_t i = 0; i < p->outbox_n; i++)
            nb[i] = p->outbox[(p->outbox_head + i) % p->outbox_cap];
        free(p->outbox);
        p->outbox = nb;
        p->outbox_cap = cap;
        p->outbox_head = 0;
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
    return m->type == TPX_CTRL_SEND_HDR ||
           (m->type == TPX_CTRL_RMA_REQ && !(m->flags & TPX_CTRL_REQ_INLINE)) ||
           (m->type == TPX_CTRL_RMA_RESP && m->nchunks > 0);
}

/* Start a message that carries data, in arrival order (body: what
 * follows its header, a LIST request's list). 0: it must wait for a
 * tpx_recv() (a two-sided message with no receive posted). */
static int peer_start_data(tpx_peer_t *p, const tpx_ctrl_t *m, const unsigned char *body)
{
    switch (m->type) {
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
static void peer_drain_queue(tpx_peer_t *p)
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

/* ---- failure, deadlines, liveness -------------------------------------------------- */

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

void tpx__peer_fail(tpx_peer_t *p, tpx_status_t st, const char *why)
{
    if (p->state != PEER_READY)
        return;
    p->state = PEER_FAILED;
    p->error = st;
    p->failed_ns = tpx__now_ns();
    p->e->failed_open = 1; /* its comms close at the end of this progress pass */
    /* the transfers below end (released ones are freed): forget them */
    memset(p->ctrl_send_owner, 0, sizeof(p->ctrl_send_owner));
    if (p->active != NULL || p->recv_pending_n > 0)
        TPX_WARN("peer %s: %s (%s); its transfers end with this error", p->name, why,
                 tpx_status_string(st));
    else
        TPX_INFO("peer %s: %s (%s)", p->name, why, tpx_status_string(st));
    for (uint32_t i = 0; i < p->recv_pending_n; i++)
        tpx__xfer_complete(p->recv_pending[i], st);
    p->recv_pending_n = 0;
    while (p->active != NULL)
        tpx__xfer_complete(p->active, st);
    for (int k = 0; k < p->nchan; k++) {
        if (p->send[k])
            p->send[k]->q_head = p->send[k]->q_tail = NULL;
        if (p->recv[k])
            p->recv[k]->q_head = p->recv[k]->q_tail = NULL;
    }
}

/* The verdict on p's data channels (TPX_CHANNEL_STALL_MS): a receive
 * channel whose window has had receives in flight and completed none for
 * that long, while a sibling completed some since it stopped, is dead.
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
 * channel's work onto the others. Returns the dead channel's comm, or NULL. */
static tpx_comm_t *chan_verdict(tpx_peer_t *p, uint64_t now)
{
    const uint64_t stall = (uint64_t)p->e->chan_stall_ms * 1000000ull;
    uint64_t newest = 0; /* the latest move of any receive channel */
    for (int k = 0; k < p->nchan; k++) {
        (void)tpx__window_look(p->send[k], now);
        (void)tpx__window_look(p->recv[k], now);
        newest = TPX_MAX(newest, p->recv[k]->live.moved_ns);
    }
    for (int k = 0; stall > 0 && k < p->nchan; k++) {
        tpx_chan_live_t *l = &p->recv[k]->live;
        if (l->state == TPX_CHAN_STILL && now - l->still_ns >= stall && newest > l->still_ns) {
            l->state = TPX_CHAN_DEAD;
            return p->recv[k];
        }
    }
    return NULL;
}

int tpx__peer_bs_frame(tpx_peer_t *p, uint16_t type, const unsigned char *buf, uint32_t len)
{
    if (type == TPX_MSG_BELL)
        return 1;
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

void tpx__peer_sweep(tpx_peer_t *p, uint64_t now)
{
    /* The bootstrap connection stays open for the peer's life: EOF on it
     * means the peer process is gone, whatever the plugin reports. */
    if (p->bs != NULL && p->bs_eof_ns == 0) {
        uint16_t type;
        unsigned char buf[TPX_PEER_FRAME_MAX];
        uint32_t len;
        tpx_status_t st = tpx__bs_recv(p->bs, &type, buf, sizeof(buf), &len);
        if (st != TPX_INPROGRESS && st != TPX_OK)
            p->bs_eof_ns = now;
        else if (st == TPX_OK && tpx__peer_bs_frame(p, type, buf, len) > 0)
            p->e->nbells++; /* rung while we were awake anyway */
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
    tpx_comm_t *dead = chan_verdict(p, now);
    if (dead != NULL) {
        /* Its requests hold their place in both sides' FIFOs: the peer
         * fails as a whole (moving the channel's work onto the others is
         * what the verdict is kept for). */
        char why[200];
        snprintf(why, sizeof(why),
                 "data channel %d (%s, plugin device %d) completed nothing for %d ms while the "
                 "peer's other channels did: its connection died or stalled "
                 "(TPX_CHANNEL_STALL_MS)", dead->chan, dead->is_send ? "send" : "receive",
                 dead->dev, p->e->chan_stall_ms);
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, why);
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

/* ---- the API ------------------------------------------------------------------------ */

/* Written once per kind (under the kind's file's pthread_once) before the
 * process's first engine exists, read-only after. */
static const tpx_xfer_ops_t *kind_ops[XK_COUNT];

void tpx__xfer_kind_ops(tpx_xfer_kind_t kind, const tpx_xfer_ops_t *ops) { kind_ops[kind] = ops; }

tpx_xfer_t *tpx__xfer_alloc(tpx_peer_t *p, tpx_xfer_kind_t kind)
{
    tpx_xfer_t *x = calloc(1, sizeof(*x) + 2 * (size_t)p->nchan * sizeof(tpx_lane_t));
    if (x == NULL)
        return NULL;
    x->e = p->e;
    x->peer = p;
    x->kind = kind;
    x->ops = kind_ops[kind];
    x->status = TPX_INPROGRESS;
    x->out.gate = x->in.gate = UINT32_MAX;
    x->segs = &x->two.seg1;
    x->nsegs = 1;
    x->regions = &x->two.region;
    x->deadline_ns = tpx__now_ns() + (uint64_t)p->e->timeout_ms * 1000000ull;
    return x;
}

static tpx_status_t xfer_new(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                             tpx_xfer_kind_t kind, tpx_xfer_t **user_out, tpx_xfer_t **out)
{
    const char *fn = kind == XK_SEND ? "tpx_send" : "tpx_recv";
    if (p == NULL || r == NULL || user_out == NULL) {
        TPX_ERROR("%s: NULL %s", fn, p == NULL ? "peer" : r == NULL ? "region" : "xfer pointer");
        return TPX_ERR_INVALID_ARG;
    }
    if (r->e != p->e || r->dead) {
        TPX_ERROR("%s: the region is %s", fn, r->dead ? "deregistered" : "of another engine");
        return TPX_ERR_INVALID_ARG;
    }
    if (offset > r->len || len > r->len - offset) {
        TPX_ERROR("%s: bytes [%zu, %zu) are outside the registered region of %zu bytes", fn,
                  offset, offset + len, r->len);
        return TPX_ERR_INVALID_ARG;
    }
    tpx_xfer_t *x = tpx__xfer_alloc(p, kind);
    if (x == NULL)
        return TPX_ERR_NO_MEMORY;
    x->two.region = r;
    x->nregions = 1;
    x->two.off = offset;
    x->two.cap = len;
    x->len = len;
    x->two.seg1 = (tpx_seg_t){.region = r, .off = offset, .len = len, .chunk0 = 0};
    *out = x;
    return TPX_OK;
}

void tpx__xfer_attach(tpx_xfer_t *x)
{
    tpx_peer_t *p = x->peer;
    for (uint32_t i = 0; i < x->nregions; i++)
        x->regions[i]->xfers++;
    x->next = p->active;
    if (p->active)
        p->active->prev = x;
    p->active = x;
    p->e->inflight++;
}

tpx_status_t tpx__peer_usable(tpx_peer_t *p, const char *fn)
{
    /* After the peer's goodbye, a receive can still take a message it
     * announced before leaving (its data may sit in the kernel's buffers). */
    if (p->state == PEER_READY && p->remote_closed &&
        !(strcmp(fn, "tpx_recv") == 0 && p->unexpected_n > 0)) {
        TPX_ERROR("%s: peer %s has closed the connection", fn, p->name);
        return TPX_ERR_CONN_RESET;
    }
    if (p->state == PEER_READY)
        return TPX_OK;
    if (p->state == PEER_FAILED)
        return p->error; /* logged when it failed */
    TPX_ERROR("%s: the peer is closed", fn);
    return TPX_ERR_INVALID_STATE;
}

tpx_status_t tpx__peer_rxmem_check(tpx_peer_t *p, int cuda, const char *fn)
{
    for (int i = 0; cuda && i < p->nchan; i++)
        if (p->recv[i] != NULL && p->recv[i]->no_bounce)
            return tpx__comm_rxmem_refuse(p->recv[i], fn);
    /* Channels not open yet: the control receive comm, of the same plugin
     * and NIC, was asked at set-up and tells the plugin's state. */
    if (cuda && p->chan_state != CHAN_OPEN && p->ctrl_recv != NULL && p->ctrl_recv->no_bounce)
        return tpx__comm_rxmem_refuse(p->ctrl_recv, fn);
    return TPX_OK;
}

TPX_API tpx_status_t tpx_send(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_t **out)
{
    tpx_xfer_t *x;
    tpx_status_t st = xfer_new(p, r, offset, len, XK_SEND, out, &x);
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = p->e;
    tpx__engine_lock(e);
    st = tpx__peer_usable(p, "tpx_send");
    if (st != TPX_OK)
        goto err_unlock;
    x->two.seq = p->send_seq;
    x->nchunks = (uint32_t)((len + p->chunk - 1) / p->chunk);
    x->out = (tpx_stream_t){.nchunks = x->nchunks, .gate = UINT32_MAX,
                            .run = tpx__stream_run(p, x->nchunks), .first_chan = p->send_cursor};
    x->hdr_pending = 1;
    st = tpx__peer_ctrl_send(p, &(tpx_ctrl_t){.type = TPX_CTRL_SEND_HDR, .len = len}, x);
    if (st != TPX_OK)
        goto err_unlock;
    tpx__stream_cursor_move(p, &p->send_cursor, &x->out, len);
    x->state = XF_ACTIVE;
    tpx__xfer_attach(x);
    tpx__stream_enqueue(x, &x->out, 1);
    tpx__engine_post_pass(e, p);
    pthread_mutex_unlock(&e->lock);
    *out = x;
    return TPX_OK;

err_unlock:
    pthread_mutex_unlock(&e->lock);
    xfer_free(x);
    return st;
}

TPX_API tpx_status_t tpx_recv(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_t **out)
{
    tpx_xfer_t *x;
    tpx_status_t st = xfer_new(p, r, offset, len, XK_RECV, out, &x);
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = p->e;
    tpx__engine_lock(e);
    st = tpx__peer_usable(p, "tpx_recv");
    if (st != TPX_OK)
        goto err_unlock;
    if ((st = tpx__peer_rxmem_check(p, r->cuda_dev >= 0, "tpx_recv")) != TPX_OK)
        goto err_unlock;
    if (p->recv_pending_n == p->recv_pending_cap) {
        uint32_t cap = p->recv_pending_cap ? p->recv_pending_cap * 2 : 64;
        tpx_xfer_t **nb = realloc(p->recv_pending, cap * sizeof(*nb));
        if (nb == NULL) {
            st = TPX_ERR_NO_MEMORY;
            goto err_unlock;
        }
        p->recv_pending = nb;
        p->recv_pending_cap = cap;
    }
    x->state = XF_QUEUED;
    tpx__xfer_attach(x);
    p->recv_pending[p->recv_pending_n++] = x;
    if (p->unexpected_n > 0)
        peer_drain_queue(p); /* an early header takes it now */
    e->fault_now = e->fault_recv_pass > 0 && --e->fault_recv_pass == 0; /* testing */
    tpx__engine_post_pass(e, p);
    pthread_mutex_unlock(&e->lock);
    *out = x;
    return TPX_OK;

err_unlock:
    pthread_mutex_unlock(&e->lock);
    xfer_free(x);
    return st;
}

static tpx_status_t xfer_result(tpx_xfer_t *x, size_t *bytes)
{
    if (x->state != XF_DONE)
        return TPX_INPROGRESS;
    if (bytes != NULL)
        *bytes = x->status == TPX_OK ? x->len : 0;
    return x->status;
}

/* Lock the engine of a transfer handle, or say why it cannot be used. A
 * released handle is invalid (tpx.h); one still held by the engine is
 * recognised here, under the lock that guards `released`. */
static tpx_status_t xfer_lock(tpx_xfer_t *x, const char *fn)
{
    if (x == NULL) {
        TPX_ERROR("%s: NULL transfer handle", fn);
        return TPX_ERR_INVALID_ARG;
    }
    tpx__engine_lock(x->e);
    if (x->released) {
        pthread_mutex_unlock(&x->e->lock);
        TPX_ERROR("%s: the transfer handle was released", fn);
        return TPX_ERR_INVALID_ARG;
    }
    return TPX_OK;
}

/* The caller learns that x ended: it no longer keeps the engine fd readable. */
static tpx_status_t xfer_seen(tpx_xfer_t *x, size_t *bytes)
{
    tpx_status_t st = xfer_result(x, bytes);
    if (x->state == XF_DONE)
        xfer_unseen_drop(x->e, x);
    return st;
}

/* A transfer still running on an engine whose thread drives progress:
 * known without the engine lock, which a caller polling in a loop would
 * otherwise take again and again while the progress thread wants it.
 * Anything else (done, released, caller-driven progress) takes the lock. */
static int xfer_running(const tpx_xfer_t *x)
{
    return x != NULL && x->e->progress_thread &&
           atomic_load_explicit(&x->settled, memory_order_acquire) == 0;
}

TPX_API tpx_status_t tpx_xfer_poll(tpx_xfer_t *x, size_t *bytes)
{
    if (xfer_running(x)) {
        /* The core goes to whoever waits for it (the progress thread, the
         * transport's threads): a loop of polls on a busy machine kept
         * them waiting for its time slice to end (100 x 16 KiB READs:
         * 0.25 GB/s instead of 2.8). Returns at once on an idle core. */
        sched_yield();
        return TPX_INPROGRESS;
    }
    tpx_status_t st = xfer_lock(x, "tpx_xfer_poll");
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = x->e;
    if (x->state != XF_DONE && !e->progress_thread)
        (void)tpx__engine_progress(e);
    st = xfer_seen(x, bytes);
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* The wait may run many passes on the caller's thread: one SIGPIPE guard
 * for all of them (common/sigpipe.h), the passes' own guards nest in it. */
TPX_API tpx_status_t tpx_xfer_wait(tpx_xfer_t *x, int timeout_ms, size_t *bytes)
{
    if (timeout_ms == 0 && xfer_running(x)) {
        sched_yield(); /* a poll: see tpx_xfer_poll() */
        return TPX_INPROGRESS;
    }
    tpx_sigpipe_guard_t g;
    tpx__sigpipe_enter(&g, x != NULL && x->e->net->sigpipe);
    uint64_t now = tpx__now_ns();
    uint64_t limit = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000ull;
    int driver = xfer_running(x) && x->e->wait_spin_ns > 0;
    if (driver) {
        /* A transfer of a progress-thread engine often ends within
         * microseconds (a small READ, the tail of a larger one): watch its
         * `settled` flag for up to TPX_WAIT_SPIN_US, yielding the core,
         * before sleeping on the condition variable -- waking from it
         * costs as much as a network round trip on loopback. Meanwhile
         * this thread runs the loop's passes itself (whenever the lock is
         * free) and the progress thread stands aside (engine.c): the
         * thread that waits does the work, one spinning thread instead of
         * two. 2-core host, one-sided READ of 512 KiB in one process:
         * p50 1.99x -> 1.27x the raw TCP round trip with the transport's
         * direct reads (sock_direct_read.c), 32 x 16 KiB 1.71x -> 1.42x. */
        tpx_engine_t *e = x->e;
        uint64_t stop = TPX_MIN(limit, now + e->wait_spin_ns);
        tpx__engine_drive_begin(e);
        while (xfer_running(x) && tpx__now_ns() < stop) {
            if (pthread_mutex_trylock(&e->lock) == 0) {
                uint64_t before = e->nmoves, seen = e->ncompleted;
                (void)tpx__engine_progress(e);
                if (e->nmoves != before || e->ncompleted != seen)
                    e->last_move_ns = tpx__now_ns();
                pthread_mutex_unlock(&e->lock);
            }
            sched_yield();
        }
    }
    tpx_status_t st = xfer_lock(x, "tpx_xfer_wait");
    if (st != TPX_OK) {
        if (driver) {
            tpx__engine_lock(x->e);
            tpx__engine_drive_end(x->e, 1);
            pthread_mutex_unlock(&x->e->lock);
        }
        tpx__sigpipe_leave(&g);
        return st;
    }
    tpx_engine_t *e = x->e;
    if (driver) /* the loop goes back to the progress thread */
        tpx__engine_drive_end(e, x->state != XF_DONE);
    while (x->state != XF_DONE) {
        now = tpx__now_ns();
        if (now >= limit) {
            pthread_mutex_unlock(&e->lock);
            tpx__sigpipe_leave(&g);
            return TPX_INPROGRESS;
        }
        if (e->progress_thread) {
            /* The deadline sweep of the progress thread ends the transfer
             * at its deadline; wake up at least every 100 ms regardless. */
            tpx__engine_cond_wait(e, TPX_MIN(limit - now, 100 * 1000000ull));
        } else {
            if (tpx__engine_progress(e) == 0) {
                pthread_mutex_unlock(&e->lock);
                sched_yield();
                pthread_mutex_lock(&e->lock);
            }
        }
    }
    st = xfer_seen(x, bytes);
    pthread_mutex_unlock(&e->lock);
    TPX_TL(TPX_TR_WAIT_RETURN, 0);
    tpx__sigpipe_leave(&g);
    return st;
}

/* A receive that has not started leaves its peer's queue and ends canceled. */
static void xfer_unqueue(tpx_xfer_t *x)
{
    tpx_peer_t *p = x->peer;
    for (uint32_t i = 0; i < p->recv_pending_n; i++) {
        if (p->recv_pending[i] == x) {
            memmove(p->recv_pending + i, p->recv_pending + i + 1,
                    (p->recv_pending_n - i - 1) * sizeof(*p->recv_pending));
            p->recv_pending_n--;
            break;
        }
    }
    tpx__xfer_complete(x, TPX_ERR_CANCELED);
}

TPX_API tpx_status_t tpx_xfer_cancel(tpx_xfer_t *x)
{
    tpx_status_t st = xfer_lock(x, "tpx_xfer_cancel");
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = x->e;
    if (x->state == XF_QUEUED) {
        xfer_unqueue(x);
    } else if (x->state == XF_ACTIVE) {
        x->canceled = 1;
        if (x->ops != NULL && x->ops->canceled(x))
            tpx__engine_post_pass(e, x->peer);
        st = TPX_INPROGRESS;
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API void tpx_xfer_release(tpx_xfer_t *x)
{
    if (x == NULL)
        return;
    tpx_engine_t *e = x->e;
    pthread_mutex_lock(&e->lock);
    if (x->released) {
        pthread_mutex_unlock(&e->lock);
        TPX_ERROR("tpx_xfer_release: the transfer handle was released already");
        return;
    }
    if (x->state == XF_QUEUED)
        xfer_unqueue(x);
    if (x->state == XF_DONE) {
        xfer_unseen_drop(e, x);
        pthread_mutex_unlock(&e->lock);
        xfer_free(x);
        return;
    }
    x->canceled = 1;
    x->released = 1; /* freed when it completes */
    atomic_store_explicit(&x->settled, 1, memory_order_relaxed);
    tpx_peer_t *p = x->peer;
    if (x->ops != NULL && x->ops->canceled(x))
        tpx__engine_post_pass(e, p); /* x may complete in it, and be freed */
    pthread_mutex_unlock(&e->lock);
}
