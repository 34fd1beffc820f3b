/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xfer.c - the transfer object: its allocation, its kind's ops, its chunk
 * streams queued on the comms' lanes, the engine fd it raises when done.
 * The two-sided protocol it serves (the peer's files carry it out):
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
 *
 * The bottom of the transfer layers: it calls no other file of the
 * engine. Matching and dealing: peer_pass.c; the end of a transfer:
 * peer_fail.c; the API: api_xfer.c.
 */
#include <stdlib.h>
#include <unistd.h>

#include "common/trace.h"
#include "engine.h"
#include "mem.h"
#include "peer.h"
#include "xfer.h"

/* ---- notification: the engine fd ---------------------------------------------------- */

/* The completion fd is level-triggered on e->nunseen (tpx.h): readable
 * exactly while some completed transfer has not been seen by its owner.
 * The eventfd's counter is changed only under the lock, on the edges 0 -> 1
 * and 1 -> 0 of nunseen, so no thread's call can take a wake-up meant for
 * another: whoever waits on the fd for its own transfer sees it readable
 * until that transfer has been polled, waited for or released. */
void tpx__xfer_unseen_add(tpx_engine_t *e, tpx_xfer_t *x)
{
    x->unseen = 1;
    if (e->nunseen++ == 0) {
        uint64_t one = 1;
        ssize_t n = write(e->efd, &one, sizeof(one));
        (void)n;
    }
}

void tpx__xfer_unseen_drop(tpx_engine_t *e, tpx_xfer_t *x)
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

/* ---- freeing (a transfer ends in peer_fail.c) -------------------------------------- */

void tpx__xfer_free(tpx_xfer_t *x)
{
    if (x->segs_owned) {
        free(x->segs);
        free(x->regions);
    }
    if (x->ops != NULL)
        x->ops->freed(x);
    free(x);
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
    /* a cursor counts live channels of its direction (both sides drop a
     * lost one at the same point of the stream order: peer_repair.c) */
    uint32_t live = cursor == &p->send_cursor ? p->send_live : p->recv_live;
    uint32_t n = (uint32_t)__builtin_popcount(live);
    *cursor = (int)(((uint32_t)*cursor + tpx__stream_blocks(st)) % n);
}

void tpx__lane_push(tpx_comm_t *c, tpx_xfer_t *x, int li, uint32_t j0, uint64_t at)
{
    x->lane[li] = (tpx_lane_t){.next = NULL, .next_chunk = j0, .seg = 0, .queued = 1,
                               .at = at, .first = j0, .on = (uint8_t)(c->chan + 1)};
    if (c->q_tail) {
        c->q_tail->lane[c->q_tail_li].next = x;
        c->q_tail->lane[c->q_tail_li].next_li = (uint8_t)li;
    } else {
        c->q_head = x;
        c->q_li = (uint8_t)li;
    }
    c->q_tail = x;
    c->q_tail_li = (uint8_t)li;
}

uint32_t tpx__stream_lane_start(const tpx_stream_t *st, int k)
{
    if (st->nlive == 0 || !(st->live >> k & 1u))
        return UINT32_MAX;
    uint32_t i = (uint32_t)__builtin_popcount(st->live & ((1u << k) - 1u)); /* k's place */
    uint32_t run = st->run > 1 ? st->run : 1;
    uint64_t j0 = (uint64_t)((i + st->nlive - (uint32_t)st->first_chan) % st->nlive) * run;
    return j0 >= st->nchunks ? UINT32_MAX : (uint32_t)j0;
}

/* Queue stream st of x on the send (or receive) comms: block b (chunks
 * [b * run, (b + 1) * run); run 1: chunk b) goes to the live channel of
 * place (first_chan + b) % nlive -- with every channel live, channel
 * (first_chan + b) % nchan. */
void tpx__stream_enqueue(tpx_xfer_t *x, tpx_stream_t *st, int is_send)
{
    tpx_peer_t *p = x->peer;
    tpx_comm_t **comms = is_send ? p->send : p->recv;
    st->live = is_send ? p->send_live : p->recv_live;
    st->nlive = (uint32_t)__builtin_popcount(st->live);
    /* the message that announced it: just sent, or being started */
    st->seq = is_send ? p->send_seq - 1 : p->start_seq;
    for (int k = 0; k < p->nchan; k++) {
        uint32_t j0 = tpx__stream_lane_start(st, k);
        if (j0 != UINT32_MAX)
            tpx__lane_push(comms[k], x, comms[k]->lane, j0, st->seq);
    }
}

/* ---- allocation ------------------------------------------------------------------------ */

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
    x->deadline_ns = tpx__now_ns() + (uint64_t)p->e->cfg.timeout_ms * 1000000ull;
    return x;
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
