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

#include "engine.h"
#include "mem.h"
#include "peer.h"
#include "window.h"
#include "xfer.h"

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

int tpx__comm_post_ctrl(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    tpx_engine_t *e = p->e;
    if (p->outbox_n == 0 || p->ctrl_send_nfree == 0)
        return 0;
    uint32_t idx = p->ctrl_send_free[p->ctrl_send_nfree - 1];
    tpx_ctrl_out_t *o = &p->outbox[p->outbox_head];
    unsigned char *buf = p->ctrl_buf + (size_t)(e->cfg.window + idx) * TPX_CTRL_BUF_SLOT;
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
