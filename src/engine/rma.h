/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rma.h - one-sided READ and WRITE, preparations, and notifications
 * (rma.c). The transfers' one-sided parts are in xfer.h (rma, req, own).
 *
 * Ownership: a preparation belongs to the user (tpx_xfer_prepare/
 * tpx_prep_release) and is referenced by each post running from it
 * (`refs`); the last reference frees it -- or, when a failed peer's comm may
 * still read its list (any failed peer's comms still open), hands it to
 * the engine's list of zombies (e->rma), freed once those comms are
 * closed. It holds its local regions (`holds`; the last hold may be all
 * that keeps a deregistered region's record, so freeing it may free a
 * region: tpx_mem_deregister guards its own) and owns its list and list
 * region. The notification queue (e->rma, rma.c's) is the engine's;
 * entries are handed to the user by tpx_engine_get_notifs(). All under
 * e->lock.
 */
#ifndef TPX_ENGINE_RMA_H
#define TPX_ENGINE_RMA_H

#include "engine.h"
#include "xfer.h"

/* A prepared one-sided transfer. */
struct tpx_prep {
    tpx_prep_t *next_zombie; /* engine's list of preparations freed after comms close */
    tpx_remote_t *rm;
    tpx_op_t op;
    int refs;               /* the user's + one per post running */
    uint32_t chunk;
    tpx_seg_t *segs;        /* local side, coalesced (strided entries: one per element) */
    uint32_t nsegs;
    uint32_t nent;          /* entries of the encoded list (= nsegs without strided ones) */
    int strided;            /* the list has strided entries: version 3 (wire.h) */
    uint32_t npayload;      /* payload chunks */
    int remote_host;        /* every remote block is host memory (its descriptor says) */
    int host;               /* every local block is host memory */
    int cuda_direct;        /* a local GPU block goes alone in its chunk: a READ receives
                               straight into GPU memory (no shared staging) */
    uint64_t total;
    unsigned char *list;    /* the encoded request list */
    size_t list_len;
    uint32_t nlist;         /* its chunks */
    tpx_region_t *list_region;
    tpx_region_t **regions; /* distinct local regions (held) */
    uint32_t nregions;
};

/* The owner got RMA_REQ m: start serving it (list receives queued; with
 * flag INLINE, body holds the list and a WRITE's data: served at once). */
void tpx__rma_target_begin(tpx_peer_t *p, const tpx_ctrl_t *m, const unsigned char *body);
/* The owner's lists still expanding into segments (a long list is expanded
 * a step per pass, its chunks dealt behind a gate as they are covered): one
 * step each. Called in every pass over a ready peer. */
void tpx__rma_expand_pass(tpx_peer_t *p);
/* A list chunk of owner transfer x arrived; the last one checks the list. */
void tpx__rma_list_chunk_done(tpx_xfer_t *x);
/* The requester got RMA_RESP m, its body (flag INLINE: a READ's data) in
 * body (a protocol error fails the peer). */
tpx_status_t tpx__rma_resp(tpx_peer_t *p, const tpx_ctrl_t *m, const unsigned char *body);
/* The peer's control stream ended (its goodbye, or the plugin said so): no
 * answer comes any more. Every request still waiting for one ends with st
 * as if the owner had answered so, once its own chunks have left. */
void tpx__rma_unanswered_fail(tpx_peer_t *p, tpx_status_t st);
/* The body of owner x's control message, as it takes a send slot: a
 * requester's list (and WRITE data), an owner's READ data. */
tpx_status_t tpx__rma_body_fill(tpx_xfer_t *x, char *buf, uint32_t len);
/* One-sided transfer x (either role) is DONE: answer, notify, count. */
void tpx__rma_completed(tpx_xfer_t *x);
void tpx__rma_notif_part(tpx_peer_t *p, const tpx_ctrl_t *m);
/* Check where control message m arrives against the HELD notifications
 * (wire.h); 0: the peer failed. */
int tpx__rma_held_order(tpx_peer_t *p, const tpx_ctrl_t *m);
/* The owner got RMA_CANCEL: drop that WRITE's notification if still held. */
void tpx__rma_cancel_received(tpx_peer_t *p, const tpx_ctrl_t *m);
/* The application canceled requester transfer x (engine lock held): a
 * WRITE whose notification went ahead asks the owner to drop it. 1: a
 * control message was queued (the caller runs a pass to send it). */
int tpx__rma_canceled(tpx_xfer_t *x);
/* Free the peer's list buffers and the notifications it holds. */
void tpx__peer_listbufs_free(tpx_peer_t *p);

/* ---- what the API (api_rma.c) calls ---- */
/* Build a preparation of n blocks (iov) or strided entries (sv) for rm
 * (takes the engine lock itself). */
tpx_status_t tpx__rma_prepare(tpx_remote_t *rm, tpx_op_t op, const tpx_iov_t *iov,
                              const tpx_strided_t *sv, size_t n, tpx_prep_t **out);
/* The caller's reference to pp goes (lock held); 1: its remote was
 * forgotten meanwhile and is now the caller's to free (tpx__remote_free,
 * after the lock). */
int tpx__rma_prep_drop(tpx_prep_t *pp);
/* Post pp to ready peer p (lock held; t0: when the caller's deadline of
 * timeout_ms began): the request and its chunks are queued, the peer's
 * doorbell rung; the caller runs the pass that sends them. */
tpx_status_t tpx__rma_post(tpx_prep_t *pp, tpx_peer_t *p, const void *notif, size_t notif_len,
                           uint64_t t0, int timeout_ms, tpx_xfer_t **out);
/* Queue a notification of len bytes to p (lock held); the caller runs the pass. */
tpx_status_t tpx__rma_notif_send(tpx_peer_t *p, const void *msg, size_t len);
/* Take up to max notifications received (lock held): *n of them; TPX_ERR_OVERFLOW
 * once after some were dropped. */
tpx_status_t tpx__rma_notifs_take(tpx_engine_t *e, tpx_notif_t *out, size_t max, size_t *n);
/* The one-sided kinds' ops (xfer.h, tpx_xfer_ops_t) in place: once per
 * process, before the first engine is created; idempotent. */
void tpx__rma_kinds(void);
/* The released preparations a failed peer's comm may still read: any
 * (lock held), and freed (its comms are closed, or the engine ends). */
int tpx__prep_zombies_any(const tpx_engine_t *e);
void tpx__prep_zombies_free(tpx_engine_t *e);
/* The engine's one-sided state (e->rma, struct tpx_rma_state: this
 * file's alone): the notification queue and the preparations kept for
 * failed peers' comms. Made with the engine; fini frees the notifications
 * left, the exports (export.c) and the state. */
tpx_status_t tpx__rma_engine_init(tpx_engine_t *e);
void tpx__rma_engine_fini(tpx_engine_t *e);

#endif
