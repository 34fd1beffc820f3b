/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_fail.c - the end of a transfer and the failure of its peer.
 *
 * One file because each ends the other: a peer fails by ending all its
 * transfers with its error, and the last transfer of a peer that said
 * goodbye fails it. Below the control stream (peer_ctrl.c), the one-sided
 * transfers (rma.c) and the pass (peer_pass.c), which call it when they
 * decide that a transfer or a peer is over; it calls only down (xfer.c,
 * mem.c, window.c), and a one-sided transfer's epilogue through its kind's
 * ops (xfer.h, tpx_xfer_ops_t).
 */
#include <stdlib.h>
#include <string.h>

#include "common/trace.h"
#include "engine.h"
#include "mem.h"
#include "pack.h"
#include "peer.h"
#include "window.h"
#include "xfer.h"

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
    if ((x->kind == XK_RECV || (x->ops != NULL && x->ops->confirms_in(x))) && x->in.nlive > 0 &&
        x->chunks_done == x->nchunks && p->state == PEER_READY) {
        /* every byte of its stream arrived: its sender may end it (its pass
         * sends the RECV_DONE: peer_pass.c) */
        if (p->confirm_n == p->confirm_cap) {
            uint32_t cap = p->confirm_cap ? 2 * p->confirm_cap : 16;
            uint64_t *q = realloc(p->confirm_q, cap * sizeof(*q));
            if (q != NULL) {
                p->confirm_q = q;
                p->confirm_cap = cap;
            }
        }
        if (p->confirm_n < p->confirm_cap)
            p->confirm_q[p->confirm_n++] = x->in.seq;
        else
            p->confirm_oom = 1;
    }
    if (x->ops != NULL)
        x->ops->completed(x); /* may free the preparation (x->regions) */
    pthread_cond_broadcast(&e->cond);
    if (x->released)
        tpx__xfer_free(x);
    else
        tpx__xfer_unseen_add(e, x); /* the engine fd is readable until it is seen */
    if (p->remote_closed && p->active == NULL && p->unexpected_n == 0 && p->state == PEER_READY)
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, "the peer closed the connection");
}

tpx_status_t tpx__comm_pw_settle(tpx_comm_t *c)
{
    if (c->pw_n == 0)
        return TPX_OK;
    tpx_status_t st = tpx__pack_ops_wait(c->peer->e);
    while (c->pw_n > 0) {
        tpx_slot_t s = c->pw[c->pw_head].slot;
        c->pw_head = (c->pw_head + 1) % TPX_WINDOW_MAX;
        c->pw_n--;
        tpx__pack_stage_put(c, s.stage);
        s.x->chunks_done += s.nrun > 1 ? s.nrun : 1;
        if (!c->is_send && st == TPX_OK && c->peer->state == PEER_READY)
            tpx__xfer_maybe_done(s.x);
    }
    return st;
}

void tpx__xfer_maybe_done(tpx_xfer_t *x)
{
    if (x->state == XF_ACTIVE && x->chunks_done == x->nchunks && !x->hdr_pending &&
        !x->confirm_pending && !(x->ops != NULL && x->ops->answer_pending(x)))
        tpx__xfer_complete(x, x->two.drain ? TPX_ERR_TRUNCATED : x->err);
}

void tpx__peer_fail(tpx_peer_t *p, tpx_status_t st, const char *why)
{
    if (p->state != PEER_READY)
        return;
    p->state = PEER_FAILED;
    p->error = st;
    /* no GPU copy of a shared chunk may write a transfer's memory after
     * the transfer ended (pack.h) */
    (void)tpx__pack_ops_wait(p->e); /* returns at once when none is queued */
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

/* A receive that has not started leaves its peer's queue and ends canceled. */
void tpx__xfer_unqueue(tpx_xfer_t *x)
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
