/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xfer.h - a transfer: its state, its chunk streams and its lanes on the
 * comms (xfer.c), and its role-specific parts (two-sided: xfer.c and
 * peer_pass.c; one-sided requester and owner: rma.c, reached from the
 * files below it through the kind's ops). It ends in peer_fail.c.
 *
 * Ownership: a user transfer (tpx_send/recv, tpx_xfer_post) belongs to
 * the user's handle until tpx_xfer_release(); one released while running
 * is marked `released` and freed by the engine when it completes. An
 * owner-side transfer (XK_TWRITE/XK_TREAD) is the engine's from the start
 * (`released` = 1). While not DONE a transfer is on its peer's `active`
 * list and referenced from the comms' lane queues and window slots. All
 * fields are guarded by e->lock, except `settled` (atomic).
 */
#ifndef TPX_ENGINE_XFER_H
#define TPX_ENGINE_XFER_H

#include "engine.h"
#include "window.h"

typedef enum { XF_QUEUED = 0, XF_ACTIVE = 1, XF_DONE = 2 } tpx_xfer_state_t;
typedef enum {
    XK_SEND = 1,  /* two-sided */
    XK_RECV = 2,
    XK_WRITE = 3, /* one-sided, this side asked (rma.c) */
    XK_READ = 4,
    XK_TWRITE = 5, /* one-sided, the peer asked: carried out here (internal) */
    XK_TREAD = 6,
    XK_COUNT
} tpx_xfer_kind_t;

/* What a kind of transfer adds to the generic one, set by the file of
 * that kind (rma.c: one-sided, either role; two-sided transfers have
 * none): the files below rma.c reach one-sided transfers through it only,
 * never by name, so that the calls between files go one way. Each is
 * called under the engine lock. */
typedef struct tpx_xfer_ops {
    /* x is DONE: answer, notify, count (may free x->regions) */
    void (*completed)(tpx_xfer_t *x);
    /* the body of x's control message, as it takes a send slot */
    tpx_status_t (*body_fill)(tpx_xfer_t *x, char *buf, uint32_t len);
    /* a list chunk of owner transfer x arrived */
    void (*list_chunk_done)(tpx_xfer_t *x);
    /* the application canceled x: 1 when a control message was queued */
    int (*canceled)(tpx_xfer_t *x);
    /* x is being freed (tpx__xfer_free): free what the kind allocated for it */
    void (*freed)(tpx_xfer_t *x);
    /* 1 while x, all of its chunks done, still waits for the peer's answer */
    int (*answer_pending)(const tpx_xfer_t *x);
    /* 1 when x's sender waits for this side to confirm that every byte of
     * x's incoming stream arrived (RECV_DONE, as a receive does) */
    int (*confirms_in)(const tpx_xfer_t *x);
} tpx_xfer_ops_t;

/* A transfer's place in one comm's queue of lanes (schedule phase). Lane
 * li of a stream is the chunks its dealing gave channel li; a lost
 * channel's lanes move to other comms (peer_repair.c), so `on`, `at` and
 * `first` say where it went last: a comm carries its lanes in the order of
 * (at, stream, lane), on both sides. */
typedef struct {
    tpx_xfer_t *next;    /* next transfer in the comm's queue */
    uint32_t next_chunk; /* next chunk of this transfer for that channel */
    uint32_t seg;        /* segment of the last payload chunk posted (a cursor) */
    uint64_t at;         /* the point of the control order where it was queued there: its
                            stream's message, or the REPAIR_ACK that moved it */
    uint32_t first;      /* its first chunk there */
    uint8_t queued;
    uint8_t next_li;     /* the lane of `next` that is queued there (its comm's own, or a
                            dead channel's lane moved there: peer_repair.c) */
    uint8_t on;          /* the channel of the comm it was queued on last, plus 1 (0: never) */
} tpx_lane_t;

/* Where payload bytes live: payload chunk k lies in the segment with the
 * largest chunk0 <= k, or -- a shared chunk (wire.h, tpx_chunker_t) -- in
 * the run of segments whose chunk0 is k, at their pack_off. region NULL:
 * discarded (a receive drained). */
typedef struct {
    tpx_region_t *region;
    uint64_t off, len;   /* region offset and length */
    uint32_t chunk0;     /* index of the segment's first payload chunk */
    uint32_t pack_off;   /* shared: offset inside the chunk */
    uint8_t shared;
} tpx_seg_t;

/* A transfer's chunks in one direction (out: on the send comms, in: on the
 * receive comms). Chunks [0, nlist) carry the request list (one-sided),
 * the rest the payload segments. Chunks from `gate` on are not posted
 * until the gate opens (the owner has not checked the list yet).
 *
 * Runs: the chunks are dealt to the channels in blocks of `run` consecutive
 * chunks, round-robin from first_chan (run 0 or 1: chunk by chunk), and
 * the chunks of a block that lie in one segment (contiguous in its region,
 * not shared, not list) go as one message. Both sides compute the run from
 * the chunk count alone (tpx__stream_run) and the messages from the layout
 * they both know, so a large transfer costs each side one window slot,
 * one completion and one repost per run instead of per chunk. */
typedef struct {
    uint32_t nchunks, nlist, gate;
    uint32_t run;
    int first_chan;  /* index among the live channels, not a channel number */
    uint32_t live;   /* the channels it is dealt to (bit k: channel k), fixed when queued:
                        the direction's live channels then (peer.h send_live/recv_live) */
    uint32_t nlive;  /* ... how many (0: never queued) */
    uint64_t seq;    /* the sender's control sequence number of the message that announced
                        it: the stream's name in a repair (peer_repair.c) */
} tpx_stream_t;

/* Chunks per block of a stream of `nchunks` chunks with peer p: up to
 * p->run_max (4 MiB) once every channel still gets 8 blocks; 1 below. */
uint32_t tpx__stream_run(const tpx_peer_t *p, uint32_t nchunks);
/* A stream's blocks (its messages per channel pass). */
uint32_t tpx__stream_blocks(const tpx_stream_t *st);
/* Move a channel cursor past stream st of `bytes` bytes: by its blocks,
 * except that a stream of one chunk of at most TPX_STICKY_BYTES leaves it
 * where it is, so that back-to-back small transfers (a decode server's
 * one-block READs) use the same data comm, whose receiving I/O worker is
 * still polling after the last one, instead of a new one each time that
 * has gone to sleep. Both sides call it with the same stream and bytes
 * (part of the control protocol, version 7). */
#define TPX_STICKY_BYTES (64u * 1024)
void tpx__stream_cursor_move(const tpx_peer_t *p, int *cursor, const tpx_stream_t *st,
                             uint64_t bytes);

typedef struct tpx_listbuf tpx_listbuf_t; /* rma.c */

/* Two-sided (XK_SEND, XK_RECV): one contiguous range of one user region. */
typedef struct {
    tpx_region_t *region;   /* the user's region (regions = &region) */
    uint64_t off, cap;      /* region offset, receive capacity */
    uint64_t seq;           /* the message's control sequence number */
    int drain;              /* receive: message larger than the buffer, discard it */
    tpx_seg_t seg1;         /* its one payload segment (segs = &seg1) */
} tpx_xfer_two_t;

/* One-sided, both roles: the request list and the notification. */
typedef struct {
    uint64_t rid;           /* the requester's id of the transfer */
    uint64_t total;         /* payload bytes */
    unsigned char *list;    /* the request list (requester: the prep's; owner: lb's) */
    uint64_t list_len;
    tpx_region_t *list_region;
    unsigned char *notif;   /* READ: sent to the owner when the transfer completed;
                               owner of a WRITE: the requester's, delivered once the
                               data is in place (wire.h). Owned (freed with x). */
    uint32_t notif_len;
    int has_notif;
    /* phase counters (tpx_engine_counters_t): posted (requester) or the
     * request taken in (owner); the owner's answer came; last data message done */
    uint64_t t_start_ns, t_answer_ns, t_data_ns;
} tpx_xfer_rma_t;

/* One-sided, requester (XK_WRITE, XK_READ). */
typedef struct {
    tpx_prep_t *prep;       /* the preparation (a reference held while running) */
    int resp_pending;       /* the owner's answer has not come */
    int notif_ahead;        /* WRITE: its notification went with the request (1),
                               and a cancel after it (2) */
    int inline_req;         /* its list (and a WRITE's data) went in the RMA_REQ's body */
    int list_body;          /* WRITE: its list went in the body, its data on the channels */
    int want_inline;        /* READ: asked for the data in the RMA_RESP's body */
    int notif_inline;       /* WRITE: its notification (rma.notif, not has_notif) ends
                               the RMA_REQ's body */
    tpx_xfer_t *rnext, *rprev; /* peer's requests waiting for an answer */
} tpx_xfer_req_t;

/* One-sided, owner (XK_TWRITE, XK_TREAD): the peer's request served here. */
typedef struct {
    uint32_t list_done;     /* list chunks received */
    tpx_listbuf_t *lb;      /* pool buffer holding the list (until it is checked) */
    uint64_t seg_bytes;     /* the checked list's size, booked in the peer's list_bytes
                               from the start until the transfer is done */
    uint32_t want_nent, want_nchunks; /* what the RMA_REQ announced */
    int answer_inline;      /* READ: the requester takes the data in the RMA_RESP */
    struct tpx_rma_expand *exp; /* its list still expanding into segments (rma.c), or NULL */
} tpx_xfer_own_t;

struct tpx_xfer {
    /* ---- common to every kind ---- */
    tpx_engine_t *e;
    tpx_peer_t *peer;
    tpx_xfer_kind_t kind;
    const tpx_xfer_ops_t *ops; /* its kind's (tpx__xfer_kind_ops; NULL: two-sided) */
    tpx_xfer_state_t state;
    tpx_status_t status;     /* final status once DONE */
    tpx_status_t err;        /* status to end with once every chunk is done (one-sided:
                                the owner's refusal); TPX_OK otherwise */
    uint64_t len;            /* bytes of the message (two-sided) or payload (one-sided) */
    uint32_t nchunks, chunks_done; /* over both streams */
    int hdr_pending;         /* the control message it owns (send header, RMA_REQ) has
                                not left yet (peer's ctrl_send_owner) */
    int confirm_pending;     /* XK_SEND, XK_TREAD: its out-stream's receiver has not said
                                it arrived whole (RECV_DONE): a lost channel may still
                                need its chunks dealt again (peer_repair.c) */
    int canceled, released;  /* read and written under the engine lock only */
    int unseen;              /* DONE, not yet reported by poll/wait (counted in e->nunseen) */
    atomic_int settled;      /* 0 while it runs; 1 once DONE (stored after `status`) or
                                released: tpx_xfer_poll() answers a running transfer of a
                                progress-thread engine without the engine lock */
    uint64_t deadline_ns;
    tpx_xfer_t *next, *prev; /* peer's list of transfers not DONE */
    tpx_stream_t out, in;    /* its chunks on the send / receive comms */
    tpx_seg_t *segs;         /* payload segments; two-sided: &two.seg1 */
    uint32_t nsegs;
    int segs_owned;          /* segs and regions are x's (freed with it) */
    tpx_region_t **regions;  /* regions whose bytes move (xfers counted); two-sided:
                                &two.region */
    uint32_t nregions;
    /* ---- by role: only the part(s) of x's kind are used, the others stay zero ---- */
    tpx_xfer_two_t two;      /* XK_SEND, XK_RECV */
    tpx_xfer_rma_t rma;      /* XK_WRITE, XK_READ, XK_TWRITE, XK_TREAD */
    tpx_xfer_req_t req;      /* XK_WRITE, XK_READ */
    tpx_xfer_own_t own;      /* XK_TWRITE, XK_TREAD */
    tpx_lane_t lane[];       /* 2 * nchan: send lanes, then receive lanes */
};

/* The ops of transfers of `kind`: set once in the process by the file of
 * that kind (rma.c, tpx__rma_kinds), before its first engine. */
void tpx__xfer_kind_ops(tpx_xfer_kind_t kind, const tpx_xfer_ops_t *ops);
/* A new transfer of `kind` on p, with its kind's ops. */
tpx_xfer_t *tpx__xfer_alloc(tpx_peer_t *p, tpx_xfer_kind_t kind);
/* Count x's regions and put it on its peer's active list (inflight++). */
void tpx__xfer_attach(tpx_xfer_t *x);
/* Free x and what it owns (it is on no list any more). */
void tpx__xfer_free(tpx_xfer_t *x);
/* x is DONE and not yet seen by its owner: the engine fd is readable until
 * it is (tpx__xfer_unseen_drop). Lock held. */
void tpx__xfer_unseen_add(tpx_engine_t *e, tpx_xfer_t *x);
void tpx__xfer_unseen_drop(tpx_engine_t *e, tpx_xfer_t *x);
/* Queue stream st of x on the send (or receive) comms' lanes, dealt over
 * the direction's live channels (st->live, st->nlive, st->seq set here). */
void tpx__stream_enqueue(tpx_xfer_t *x, tpx_stream_t *st, int is_send);
/* Put lane li of x (its chunks from j0) at the tail of comm c's queue, at
 * point `at` of the control order (tpx_lane_t). */
void tpx__lane_push(tpx_comm_t *c, tpx_xfer_t *x, int li, uint32_t j0, uint64_t at);
/* The first chunk of stream st dealt to channel k (>= nchunks: none, or k
 * is not one of its channels). */
uint32_t tpx__stream_lane_start(const tpx_stream_t *st, int k);

/* ---- peer_fail.c: the end of a transfer ---- */
/* x ends with st (once): off the lists, regions released, its kind's
 * epilogue (ops->completed), waiters woken, the engine fd raised or x
 * freed. */
void tpx__xfer_complete(tpx_xfer_t *x, tpx_status_t st);
/* Complete x if every chunk is done and nothing else is awaited. */
void tpx__xfer_maybe_done(tpx_xfer_t *x);
/* The shared chunks of c whose GPU copy runs (window.h tpx_packwait_t),
 * settled now, as a lost channel's repair needs (peer_repair.c): their
 * copies waited for, and each counted done -- a receive comm's arrived (its
 * transfer may end), a send comm's as if sent (the repair takes back what
 * the receiver lacks). The copies' status. */
tpx_status_t tpx__comm_pw_settle(tpx_comm_t *c);
/* A receive that has not started leaves its peer's queue and ends canceled. */
void tpx__xfer_unqueue(tpx_xfer_t *x);

/* ---- peer_pass.c ---- */
/* A data slot of comm c completed: scatter a shared chunk, count it. */
void tpx__xfer_chunk_done(tpx_comm_t *c, tpx_slot_t *s);

/* ---- xfer_user.c: a two-sided transfer started by its user ---- */
/* tpx_send/tpx_recv (kind XK_SEND/XK_RECV) of checked arguments: a new
 * transfer of r's bytes [offset, offset + len) on p, not yet posted; NULL
 * without memory. No lock. */
tpx_xfer_t *tpx__xfer_two_new(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_kind_t kind);
/* Post x (from tpx__xfer_two_new) on its peer if it may take it: a send's
 * header and chunk streams, a receive into the queue matched to headers.
 * Lock held; on failure nothing was queued and x is still the caller's. */
tpx_status_t tpx__xfer_two_post(tpx_xfer_t *x);

/* ---- wait.c: a handle's owner waits for it or ends it ---- */
/* x runs on an engine whose thread drives progress: known without the
 * engine lock, which a caller polling in a loop would otherwise take again
 * and again while the progress thread wants it. Anything else (done,
 * released, caller-driven progress) takes the lock. */
static inline int tpx__xfer_running(const tpx_xfer_t *x)
{
    return x != NULL && x->e->cfg.progress_thread &&
           atomic_load_explicit(&x->settled, memory_order_acquire) == 0;
}
/* Take x's engine lock for API call `fn`, or say (logged) why x cannot be
 * used: NULL, or released. */
tpx_status_t tpx__xfer_lock(tpx_xfer_t *x, const char *fn);
/* tpx_xfer_poll under the lock: a pass in caller-driven mode, then x's
 * result (TPX_INPROGRESS while it runs); a DONE x is seen. */
tpx_status_t tpx__xfer_poll(tpx_xfer_t *x, size_t *bytes);
/* tpx_xfer_wait: takes the lock itself (it may spin on `settled` and run
 * passes first, then sleeps on e->cond or drives the loop). */
tpx_status_t tpx__xfer_wait(tpx_xfer_t *x, int timeout_ms, size_t *bytes);
/* tpx_xfer_cancel under the lock: a queued receive ends now (TPX_OK), an
 * active transfer is asked to end (TPX_INPROGRESS; a pass may run). */
tpx_status_t tpx__xfer_cancel(tpx_xfer_t *x);
/* tpx_xfer_release under the lock of a handle not yet released: returns x
 * when it is DONE (the caller frees it after unlocking), else NULL (x is
 * freed when it completes; a pass may run). */
tpx_xfer_t *tpx__xfer_release(tpx_xfer_t *x);

#endif
