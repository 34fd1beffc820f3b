/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer.h - one connection to a peer engine: its set-up and close
 * (peer.c), its failure (peer_fail.c), its outgoing control stream
 * (peer_ctrl.c), its pass and incoming control stream (peer_pass.c), its
 * deadlines and liveness (peer_sweep.c).
 *
 * Ownership: a peer being set up belongs to the thread setting it up (the
 * caller of tpx_peer_connect, or the bootstrap thread for an incoming one)
 * and is in no list. Once linked (e->peers) the engine owns it; it is
 * handed out to the application (tpx_peer_connect/accept: `accepted`) or
 * to a remote (`remote`), and freed by tpx_peer_close() -- or by the
 * bootstrap thread when nobody took it and it failed long ago. A linked
 * peer's fields are guarded by e->lock; `bs` is used without it only by
 * the thread setting the peer up.
 *
 * A peer owns its comms (window.h), its control buffers and scratch (and
 * their internal regions), its queues of early headers, pending receives
 * and outgoing control messages, and the one-sided list buffers and held
 * notifications (rma.c). Its transfers are on `active` (xfer.h).
 */
#ifndef TPX_ENGINE_PEER_H
#define TPX_ENGINE_PEER_H

#include "engine.h"
#include "window.h" /* tpx__peer_comms reads the comms */

typedef enum {
    PEER_SETUP = 0, /* bootstrap and channel establishment in progress */
    PEER_READY = 1,
    PEER_FAILED = 2,
    PEER_CLOSED = 3,
} tpx_peer_state_t;

/* A peer's data channels: opened the first time one of its transfers has
 * chunks to deal (peer.c, tpx__peer_chan_drive), so an idle peer holds its
 * bootstrap connection and control comms only. */
typedef enum {
    CHAN_CLOSED = 0,  /* none open, nothing asked */
    CHAN_OPENING = 1, /* handles on their way (MSG_CHAN), connects in progress */
    CHAN_OPEN = 2,    /* every data comm exists: chunks are dealt */
} tpx_chan_open_state_t;

/* The opening of the data channels: each side listens once and sends its
 * handles (MSG_CHAN) when it first needs a channel or when the peer's
 * handles came; then both connect and accept in channel order, as at
 * set-up. Owned by the peer; freed once open or with the peer. */
typedef struct tpx_chan_open {
    int sent;    /* our listen handles went out */
    int got;     /* the peer's came in (their) */
    int checked; /* ... and passed the steering check (peer.c) */
    void *listen[TPX_MAX_CHANNELS];
    unsigned char their[TPX_MAX_CHANNELS][TPX_BS_HANDLE_SIZE];
} tpx_chan_open_t;

/* A control message waiting for a send slot, and the transfer it belongs to.
 * A message with a body (wire.h, INLINE) gets it from its owner when it
 * takes a send slot (tpx__rma_body_fill): nothing is copied twice. */
typedef struct {
    unsigned char msg[TPX_CTRL_MSG_SIZE];
    tpx_xfer_t *owner;
    uint32_t body_len;
    int answer; /* an RMA_RESP: caused by the peer (counted in outbox_answers) */
} tpx_ctrl_out_t;

/* Where a lost receive channel's FIFO stopped (peer_repair.c, wire.h
 * REPAIR): the lane at its head -- queued at point `at` of the control
 * order, of the stream announced by message `seq`, dealt to channel `lane`
 * -- and that lane's first chunk missing. */
typedef struct {
    uint64_t at, seq;
    uint32_t chunk;
    uint8_t lane;
} tpx_cut_t;

struct tpx_peer {
    tpx_engine_t *e;
    tpx_peer_t *next;     /* engine's list */
    tpx_peer_state_t state;
    tpx_status_t error;   /* why it failed */
    char name[96];        /* the peer's address, for logs */
    tpx_bs_conn_t *bs;    /* bootstrap connection, kept open for liveness */
    int nchan;
    uint32_t chunk;
    uint32_t run_max;     /* most chunks a transfer moves as one message (xfer.h, runs:
                             two-sided and READ payloads); 1: every chunk its own */
    tpx_comm_t *ctrl_send, *ctrl_recv;
    tpx_comm_t *send[TPX_MAX_CHANNELS], *recv[TPX_MAX_CHANNELS];
                          /* allocated at set-up; their plugin comms open later */
    tpx_chan_open_state_t chan_state;
    tpx_chan_open_t *chan; /* while CHAN_OPENING */
    /* two-sided ordering */
    uint64_t send_seq, recv_seq;
    int send_cursor, recv_cursor;
    tpx_xfer_t *active;               /* transfers not DONE (doubly linked) */
    tpx_xfer_t **recv_pending;        /* posted receives waiting for a header */
    uint32_t recv_pending_n, recv_pending_cap;
    unsigned char (*unexpected)[TPX_CTRL_MSG_SIZE]; /* headers waiting for a receive */
    unsigned char **unexpected_body; /* their bodies (a LIST request's; else NULL), owned */
    uint32_t unexpected_head, unexpected_n, unexpected_cap;
    /* control buffers: [0, window) receive, [window, 2*window) send */
    unsigned char *ctrl_buf;
    tpx_region_t *ctrl_region;
    uint32_t ctrl_send_free[TPX_WINDOW_MAX];
    uint16_t ctrl_idle[TPX_WINDOW_MAX]; /* receive buffers not posted (flow control) */
    int ctrl_nidle;
    int ctrl_send_nfree;
    tpx_ctrl_out_t *outbox;          /* control messages waiting for a send slot */
    uint32_t outbox_head, outbox_n, outbox_cap;
    uint32_t outbox_answers;         /* ... of which answers to its requests (flow control) */
    tpx_xfer_t *ctrl_send_owner[TPX_WINDOW_MAX]; /* transfer of each posted message */
    /* The control stream over the bootstrap connection (peer_ctrl.c): the
     * messages posted on the control comm that the peer has not said it
     * received (TPX_MSG_CTRL_SEEN), to send again there if the comm fails. */
    struct tpx_ctrl_kept *ctrl_kept; /* a ring, oldest first */
    uint32_t kept_head, kept_n, kept_cap;
    uint64_t seen_adv_ns; /* when the peer last confirmed one of them more (the stall clock) */
    uint64_t seen_sent;   /* the last recv_seq told to the peer (TPX_MSG_CTRL_SEEN) */
    int ctrl_bs_tx;       /* our control messages go over the bootstrap connection */
    uint16_t bs_sent[TPX_WINDOW_MAX]; /* ... the send slots (ctrl_send_owner) of those sent
                                         there, completed in the pass (peer_ctrl.c bs_reap) */
    uint32_t bs_sent_head, bs_sent_n;
    int ctrl_bs_rx;       /* the peer's come over it (our control receive comm is closed) */
    tpx_ready_t ready;    /* the peer's READY (wire.h): CTRL_BS, or an engine that predates
                             the flags and may send over the bootstrap connection unannounced */
    /* discard buffer for drained (truncated) receives: run_max chunks
     * (virtual memory: untouched pages until a receive is drained) */
    void *scratch;
    tpx_region_t *scratch_region;
    int accepted;         /* handed out (tpx_peer_connect/accept) or taken by a remote */
    uint64_t remote_id;   /* the peer engine's id and name (bootstrap INFO) */
    char remote_name[64];
    tpx_remote_t *remote; /* the remote that owns this connection, if any */
    int dialed;           /* this engine connected (tpx_peer_connect), not accepted */
    int inbound;          /* the peer connected to us (the bootstrap thread set it up) */
    unsigned char src[16]; /* ... from this address (IPv4 mapped into IPv6): its share */
    uint64_t active_ns;   /* ready, or its last control message: an idle peer may yield
                             its slot (peer.c, peer_admit) */
    int verified;         /* the peer proved (IDENT) it holds remote_pk's key */
    unsigned char remote_pk[32];
    /* dialed peers: the instance of the engine reached (ident.h INSTANCE) */
    int inst_offered;     /* it offered a ticket of its instance: */
    unsigned char inst_offer_id[16], inst_offer[32]; /* ... that ticket (unwrapped) */
    int inst_proven;      /* it proved the instance of the ticket we presented: */
    unsigned char inst_proven_id[16];                /* ... that ticket's id */
    /* one-sided (rma.c) */
    uint64_t next_rid;
    tpx_xfer_t *rma_head, *rma_tail; /* requests waiting for an answer, oldest first */
    struct tpx_listbuf *listbufs;       /* free registered buffers for incoming lists */
    uint32_t nlistbufs;              /* ... how many */
    uint32_t rma_ntargets;           /* its requests being served here (quota) */
    struct tpx_rma_expand *rma_expanding; /* its requests whose lists expand a step a pass
                                             (rma.c) */
    uint64_t list_bytes;             /* list buffers and checked lists (segments) its
                                        requests hold now (quota) */
    int quota_warned;                /* a refusal was logged */
    int rejects_logged;              /* refused requests logged (at most 10, then counted) */
    int strided_warned;              /* a strided request left unanswered was logged (rma.c) */
    unsigned char notif_buf[1024];   /* a notification being reassembled */
    uint32_t notif_got, notif_total;
    uint8_t notif_flags;             /* ... its parts' flags (TPX_CTRL_NOTIF_HELD) */
    int held_ready;                  /* a HELD notification waits for its RMA_REQ */
    struct tpx_held *held_head, *held_tail; /* HELD notifications of requests not
                                               started yet, in order (rma.c) */
    uint64_t bs_eof_ns;   /* when the bootstrap connection ended (0: open) */
    uint64_t failed_ns;   /* when it failed */
    uint64_t last_tx_ns;  /* last one-sided request or notification sent */
    uint64_t bell_window_ns; /* doorbells: start of the current second (peer.c) */
    uint32_t bell_count;     /* bootstrap frames received in it */
    int remote_closed;    /* the peer said goodbye / its control stream ended:
                             no new message will come; data in flight still may */
    /* lost data channels (peer_repair.c) */
    uint32_t send_live, recv_live; /* the channels each direction's new streams are dealt
                                      to (bit k: channel k); all at set-up */
    uint64_t start_seq;   /* the peer's control sequence number of the message with data
                             being started (its receive stream's name) */
    uint32_t rx_lost;     /* receive channels declared lost whose REPAIR_ACK is awaited
                             (bit k: channel k) */
    tpx_cut_t rx_cut[TPX_MAX_CHANNELS]; /* ... what the REPAIR of each said */
    uint32_t repairs;     /* data channel repairs asked (as the receiver) or answered */
    uint64_t rx_dealt_ns; /* when the receive channels' dealing last changed (a loss, a
                             REPAIR_ACK's lanes moved, a rejoin; peer_sweep.c) */
    uint64_t *confirm_q;  /* receive streams of two-sided messages and READs that arrived
                             whole, to confirm (RECV_DONE) in this pass (peer_pass.c) */
    uint32_t confirm_n, confirm_cap;
    int confirm_oom;      /* ... one could not be queued: the peer fails */
    /* setup state (peer.c; the setting-up thread's) */
    void *setup;
};

/* ---- peer.c: set-up, close, doorbells, the bootstrap thread ---- */
/* Raise the process's soft open-file limit to the hard one, once
 * (TPX_RAISE_NOFILE; logged at info level). */
void tpx__peer_nofile_raise(void);
/* tpx_peer_connect() presenting a ticket of the instance expected there
 * (ticket_id and ticket, or both NULL): the peer's inst_proven says whether
 * the engine reached proved it. */
tpx_status_t tpx__peer_connect_ticket(tpx_engine_t *e, const char *host, int port, int timeout_ms,
                                      const unsigned char *ticket_id, const unsigned char *ticket,
                                      tpx_peer_t **out);
/* peer.c's part of the engine (e->listener, struct tpx_listener_state:
 * peer.c's alone): the bootstrap thread and the abandoned connects. Made
 * with the engine, before anything else can fail; freed last. */
tpx_status_t tpx__peer_listener_init(tpx_engine_t *e);
void tpx__peer_listener_fini(tpx_engine_t *e);
tpx_status_t tpx__peer_listener_start(tpx_engine_t *e);
void tpx__peer_listener_stop(tpx_engine_t *e);
void tpx__peer_destroy(tpx_peer_t *p);
/* Close a failed peer's plugin comms now (their threads stop touching user
 * memory); the peer object stays until tpx_peer_close(). Lock held. */
void tpx__peer_close_comms(tpx_peer_t *p);
/* tpx_mem_deregister under the lock: drop one registration of r; at the
 * last, r is dead, the peers whose transfers still use it fail and close
 * their comms, and r goes once nothing holds it. */
void tpx__region_deregister(tpx_region_t *r);
/* The peer's open plugin comms (control, then each channel's send and
 * receive) into out[2 + 2 * TPX_MAX_CHANNELS]; returns how many. A view of
 * the peer's fields, inline so that the layers below peer.c (mem.c) may
 * use it too. */
static inline int tpx__peer_comms(const tpx_peer_t *p, tpx_comm_t **out)
{
    tpx_comm_t *all[2 + 2 * TPX_MAX_CHANNELS];
    int n = 0, m = 0;
    all[n++] = p->ctrl_send;
    all[n++] = p->ctrl_recv;
    for (int k = 0; k < p->nchan; k++) {
        all[n++] = p->send[k];
        all[n++] = p->recv[k];
    }
    for (int i = 0; i < n; i++)
        if (all[i] != NULL && all[i]->comm != NULL)
            out[m++] = all[i];
    return m;
}
/* Close the plugin comms of every failed peer, then free the preparations
 * they may have read (not from inside a comm's pass). */
void tpx__peer_close_failed(tpx_engine_t *e);
/* Drive abandoned connects (lock held). */
void tpx__peer_reap(tpx_engine_t *e);
/* Abandoned connects wait to be driven (lock held). */
int tpx__peer_reaping(const tpx_engine_t *e);
/* The sweep drives them where no bootstrap thread does (lock held). */
void tpx__peer_reap_sweep(tpx_engine_t *e);
/* Read every pending bootstrap frame of every ready peer (notes an EOF).
 * The number of doorbells among them. Lock held. */
int tpx__peer_bells(tpx_engine_t *e);
/* Open p's data channels when a transfer has chunks queued on them or the
 * peer sent its handles (MSG_CHAN); drive their connects; returns at once
 * once they are open. Lock held, inside a pass (the pass's GPU context). */
void tpx__peer_chan_drive(tpx_peer_t *p);

/* A peer whose control stream moved to the bootstrap connection
 * (peer_ctrl.c) reads its frames in every pass, not only after a nap:
 * its control messages are among them. Lock held. */
void tpx__peer_frames_pass(tpx_peer_t *p);

/* Connect the peer's lost data channels again (the engine's sweep, after
 * the peer's): the receiver's listen and accept, the sender's connect
 * (retried with backoff); no-op unless the peer is ready. Lock held. */
void tpx__peer_rejoin_drive(tpx_peer_t *p, uint64_t now);

/* ---- peer_sweep.c: bootstrap frames of a ready peer (lock held) ---- */
/* Frames read from a ready peer's bootstrap connection are at most this
 * long (MSG_CHAN: a handle per channel; TPX_MSG_CTRL: a control message
 * with its body). */
#define TPX_PEER_FRAME_MAX                                                                     \
    (TPX_MAX_CHANNELS * TPX_BS_HANDLE_SIZE > TPX_CTRL_BUF_SLOT                                  \
         ? TPX_MAX_CHANNELS * TPX_BS_HANDLE_SIZE                                                \
         : TPX_CTRL_BUF_SLOT)
/* One frame: 1 for a doorbell; MSG_CHAN keeps the handles for
 * tpx__peer_chan_drive (a second one, or one of the wrong size, fails the
 * peer); TPX_MSG_CTRL and TPX_MSG_CTRL_SEEN carry the control stream
 * (peer_ctrl.c); other types are ignored. */
int tpx__peer_bs_frame(tpx_peer_t *p, uint16_t type, const unsigned char *buf, uint32_t len);
/* The bootstrap frames that arrived (at most 16 per call; flow control of
 * a moved control stream obeyed): the doorbells rung among them. */
int tpx__peer_frames(tpx_peer_t *p, uint64_t now);

/* ---- peer_repair.c: a data channel lost while the peer lives (lock held) ---- */
/* Data comm c of p failed or stalled (why: the line that says so). A
 * receive comm: its chunks missing are asked again (REPAIR), or the peer
 * fails when that cannot be done; a send comm: posts nothing more and
 * waits for the peer's REPAIR. Not from inside c's own pass after it. */
void tpx__peer_chan_lost(tpx_peer_t *p, tpx_comm_t *c, const char *why);
/* The peer's REPAIR arrived: its chunks dealt again, REPAIR_ACK sent. */
void tpx__peer_repair_received(tpx_peer_t *p, const tpx_ctrl_t *m);
/* The peer's REPAIR_ACK started, in its turn among the messages with
 * data: the same chunks queued for receiving. */
void tpx__peer_repair_acked(tpx_peer_t *p, const tpx_ctrl_t *m);
/* Lost send comm c has a plugin comm again (peer.c): REJOIN announced, and
 * the streams after it dealt to c. */
void tpx__peer_rejoin_send(tpx_peer_t *p, tpx_comm_t *c);
/* The peer's REJOIN started, in its turn among the messages with data: the
 * streams after it are dealt to the channel again. */
void tpx__peer_rejoin_started(tpx_peer_t *p, const tpx_ctrl_t *m);

/* ---- peer_pass.c: the peer's pass, its incoming control stream (lock held) ---- */
/* One pass over a ready peer's comms (no-op otherwise): control receives
 * back on idle buffers, then each comm's pass (tpx__comm_pass). */
void tpx__peer_pass(tpx_peer_t *p);
/* One comm's pass: plugin window (test the head) and completion while
 * requests finish, then schedule one more request and test again, until
 * the window is full or nothing is left to post. Completions counted. */
int tpx__comm_pass(tpx_comm_t *c);
/* May the peer's next control messages be read now (flow control)? The
 * bootstrap path (peer.c) reads its frames only then. */
int tpx__peer_ctrl_may_read(const tpx_peer_t *p);
/* A control message of `got` bytes arrived in msg (header + body). */
void tpx__peer_ctrl_received(tpx_peer_t *p, const unsigned char *msg, uint32_t got);
/* Start the early headers queued on p while receives wait for them. */
void tpx__peer_drain_queue(tpx_peer_t *p);
/* The peer closed its side cleanly: fail what can no longer complete. */
void tpx__peer_remote_closed(tpx_peer_t *p, const char *why);

/* ---- peer_ctrl.c: the outgoing control stream (lock held) ---- */
/* Queue a ready control message (copied) on the outbox; owner: the
 * transfer whose hdr_pending clears when it has left; answer: it answers
 * one of the peer's requests (flow control, peer_pass.c ctrl_may_read). */
tpx_status_t tpx__peer_ctrl_post(tpx_peer_t *p, const unsigned char msg[TPX_CTRL_MSG_SIZE],
                                 tpx_xfer_t *owner, uint32_t body_len, int answer);
/* Encode and queue m with the next control sequence number. */
tpx_status_t tpx__peer_ctrl_send(tpx_peer_t *p, tpx_ctrl_t *m, tpx_xfer_t *owner);
/* Post the outbox's messages now, as far as the control window has room
 * (no test, no completion: safe inside another comm's pass). */
void tpx__peer_ctrl_flush(tpx_peer_t *p);
/* Post the next message of the outbox on control send comm c: 1 posted,
 * 0 nothing to post or the plugin is busy, -1 the peer failed. Once the
 * control stream moved to the bootstrap connection, the outbox goes there
 * (as many as it takes now). */
int tpx__comm_post_ctrl(tpx_comm_t *c);
/* The control send comm failed (why), or the peer said its receive comm
 * did (from_seq: the next message it expects; UINT64_MAX: unknown): our
 * control messages go over the bootstrap connection from now on, those
 * the peer may not have first. Fails the peer when that cannot be. */
void tpx__peer_ctrl_move(tpx_peer_t *p, uint64_t from_seq, const char *why);
/* The control receive comm failed (why): it closes, the peer is told
 * (TPX_MSG_CTRL_SEEN with move) and its messages come over the bootstrap
 * connection; also on the first such message. Fails the peer when that
 * cannot be. why NULL: the peer sends its stream that way from the start
 * without having said so (an engine that predates READY's flags;
 * TPX_CTRL_BOOTSTRAP), whatever our TPX_CHANNEL_FAILOVER. */
void tpx__peer_ctrl_rx_move(tpx_peer_t *p, const char *why);
/* Our control stream over the bootstrap connection: send what the outbox
 * holds (as the pass does). Never from under a transfer in use: a send
 * may complete, and free, the transfer that waited for it. */
void tpx__peer_ctrl_bs_drain(tpx_peer_t *p);
/* The owners of the control messages sent over the bootstrap connection
 * (tpx__peer_ctrl_flush included) complete: from the pass only. */
void tpx__peer_ctrl_bs_reap(tpx_peer_t *p);
/* The peer received our control messages up to seq (exclusive): what was
 * kept for a move goes. */
void tpx__peer_ctrl_seen(tpx_peer_t *p, uint64_t seq);
/* Where the stall clock of the control send comm starts: when the oldest
 * control message the peer has not said it received was posted, or when
 * the peer last confirmed more, the later (0: none kept). */
uint64_t tpx__peer_ctrl_unseen_ns(const tpx_peer_t *p);
/* Free what the control stream kept (the peer's end). */
void tpx__peer_ctrl_kept_free(tpx_peer_t *p);
/* Control send slot idx is free again: its owner's message has left. */
void tpx__peer_ctrl_sent(tpx_peer_t *p, uint16_t idx);
/* Ring the peer's doorbell (a frame on the bootstrap connection) if it
 * may be asleep: nothing sent to it for 50 ms. Lock held. */
void tpx__peer_ring(tpx_peer_t *p);

/* ---- peer_fail.c: failure, and whether a peer may take transfers (lock held) ---- */
/* The peer fails with st (once): its transfers end with st. */
void tpx__peer_fail(tpx_peer_t *p, tpx_status_t st, const char *why);
/* TPX_OK if API call `fn` may start a transfer on p (logs why not). */
tpx_status_t tpx__peer_usable(tpx_peer_t *p, const char *fn);
/* A receive into GPU memory (`cuda`) from p is possible: TPX_ERR_UNSUPPORTED,
 * said with what to fix, when p's receive comms have no bounce buffer (a
 * devmem plugin's rxmem skip state); refused before it takes a message,
 * since a refusal at post fails the peer. Lock held. */
tpx_status_t tpx__peer_rxmem_check(tpx_peer_t *p, int cuda, const char *fn);

/* ---- wait.c ---- */
/* tpx_peer_accept of an engine with a listener: the next linked peer not
 * yet handed out, waiting up to timeout_ms (< 0: the connect timeout). */
tpx_status_t tpx__peer_accept(tpx_engine_t *e, int timeout_ms, tpx_peer_t **out);

/* ---- peer_sweep.c ---- */
/* Deadlines of p's transfers and receives, and its bootstrap liveness
 * (the engine's sweep, every 10 ms). */
void tpx__peer_sweep(tpx_peer_t *p, uint64_t now);

/* ---- peer_trust.c: what a peer is proven to be (lookups, no calls out) ---- */

/* Is p proven to be rm's engine (by its key, or a connection dialed for
 * rm)? Engine lock held. */
int tpx__peer_serves(const tpx_peer_t *p, const tpx_remote_t *rm);
/* 1 unless rm holds a ticket that p did not prove (ident.h INSTANCE). Engine
 * lock held. */
int tpx__peer_same_instance(const tpx_peer_t *p, const tpx_remote_t *rm);
/* The name a notification from p is reported with: the peer's own name when
 * it is proven (signed with its key, or the connection we dialed for its
 * remote) and no loaded remote of another engine has that name; else "?"
 * and the name. Engine lock held. */
void tpx__peer_proven_name(const tpx_peer_t *p, char *out, size_t len);
/* 1 when p proved (by its key) to be the engine of a loaded remote. Engine
 * lock held. */
int tpx__peer_known(const tpx_peer_t *p);

#endif
