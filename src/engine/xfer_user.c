/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xfer_user.c - a two-sided transfer as its user starts it: built from a
 * region range (tpx_send, tpx_recv), then posted on its peer: a send's
 * header on the control stream and its chunk streams on the lanes, a
 * receive queued to be matched to a header (peer_pass.c).
 *
 * Both kinds share one path (the peer's checks, then the kind's post), so
 * the two entry points cannot drift apart. It sits beside peer_pass.c
 * because a receive may match an early header at once; it calls down
 * into the control stream (peer_ctrl.c), the peer's usability
 * (peer_fail.c) and the transfer object (xfer.c); the API runs the pass.
 */
#include <stdlib.h>

#include "engine.h"
#include "faults.h"
#include "mem.h"
#include "peer.h"
#include "xfer.h"

tpx_xfer_t *tpx__xfer_two_new(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_kind_t kind)
{
    tpx_xfer_t *x = tpx__xfer_alloc(p, kind);
    if (x == NULL)
        return NULL;
    x->two.region = r;
    x->nregions = 1;
    x->two.off = offset;
    x->two.cap = len;
    x->len = len;
    x->two.seg1 = (tpx_seg_t){.region = r, .off = offset, .len = len, .chunk0 = 0};
    return x;
}

/* The send's header goes on the control stream, its chunks on the lanes
 * from the peer's send cursor. */
static tpx_status_t send_post(tpx_peer_t *p, tpx_xfer_t *x)
{
    x->two.seq = p->send_seq;
    x->nchunks = (uint32_t)((x->len + p->chunk - 1) / p->chunk);
    x->out = (tpx_stream_t){.nchunks = x->nchunks, .gate = UINT32_MAX,
                            .run = tpx__stream_run(p, x->nchunks), .first_chan = p->send_cursor};
    x->hdr_pending = 1;
    /* until the receiver's RECV_DONE (peer_pass.c), which may be needed again */
    x->confirm_pending = p->e->cfg.failover && x->nchunks > 0;
    tpx_status_t st =
        tpx__peer_ctrl_send(p, &(tpx_ctrl_t){.type = TPX_CTRL_SEND_HDR, .len = x->len}, x);
    if (st != TPX_OK)
        return st;
    tpx__stream_cursor_move(p, &p->send_cursor, &x->out, x->len);
    x->state = XF_ACTIVE;
    tpx__xfer_attach(x);
    tpx__stream_enqueue(x, &x->out, 1);
    return TPX_OK;
}

/* The receive joins the peer's queue, in posting order; a header that
 * came early takes it now. */
static tpx_status_t recv_post(tpx_peer_t *p, tpx_xfer_t *x)
{
    tpx_status_t st = tpx__peer_rxmem_check(p, x->two.region->cuda_dev >= 0, "tpx_recv");
    if (st != TPX_OK)
        return st;
    if (p->recv_pending_n == p->recv_pending_cap) {
        uint32_t cap = p->recv_pending_cap ? p->recv_pending_cap * 2 : 64;
        tpx_xfer_t **nb = realloc(p->recv_pending, cap * sizeof(*nb));
        if (nb == NULL)
            return TPX_ERR_NO_MEMORY;
        p->recv_pending = nb;
        p->recv_pending_cap = cap;
    }
    x->state = XF_QUEUED;
    tpx__xfer_attach(x);
    p->recv_pending[p->recv_pending_n++] = x;
    if (p->unexpected_n > 0)
        tpx__peer_drain_queue(p); /* an early header takes it now */
    tpx__fault_recv(p->e); /* testing */
    return TPX_OK;
}

tpx_status_t tpx__xfer_two_post(tpx_xfer_t *x)
{
    tpx_peer_t *p = x->peer;
    int is_send = x->kind == XK_SEND;
    tpx_status_t st = tpx__peer_usable(p, is_send ? "tpx_send" : "tpx_recv");
    if (st != TPX_OK)
        return st;
    return is_send ? send_post(p, x) : recv_post(p, x);
}
