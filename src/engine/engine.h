/*
 * engine.h - private structures of the tpx engine.
 *
 * Data path, top to bottom: a transfer (xfer.c) is cut into chunks dealt
 * round-robin over a peer's data channels in an order both sides derive
 * from the transfer sequence; each channel is one plugin comm per
 * direction (peer.c); a comm posts chunks into its window (window.c) and
 * tests only the window's head; a completed receive is unpacked (devmem
 * plugins) before irecvConsumed releases its slot; when a transfer's last
 * chunk is released the transfer completes.
 *
 * Locking: one mutex per engine (e->lock) guards every structure here and
 * serialises all plugin calls of the engine. Completion waiters use
 * e->cond (CLOCK_MONOTONIC); the eventfd e->efd is readable exactly while
 * e->nunseen > 0 (tpx__engine_unseen_add/drop, under the lock).
 */
#ifndef TPX_ENGINE_H
#define TPX_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bootstrap/bootstrap.h"
#include "common/log.h"
#include "net/net.h"
#include "wire.h"
#include "tpx/tpx.h"

#define TPX_MAX_CHANNELS 32
#define TPX_WINDOW_MAX 32
#define TPX_CTRL_MSG_SIZE 64      /* every control message has exactly this size */
#define TPX_DEVH_STORAGE 512      /* device-handle storage per comm */
#define TPX_MSG_BELL (TPX_BS_TYPE_USER + 2) /* bootstrap frame "a request is on its way":
                                               wakes an idle owner (peer.c) */
#define TPX_MAX_UNEXPECTED 1024   /* early send headers held before flow control stops the peer */

typedef struct tpx_comm tpx_comm_t;

/* What a window slot carries. */
typedef enum { SLOT_DATA = 1, SLOT_CTRL = 2 } tpx_slot_kind_t;

typedef struct {
    void *req;          /* the plugin's request */
    void *dst;          /* receive: where the bytes go (NULL: discard) */
    tpx_xfer_t *x;      /* SLOT_DATA: the transfer */
    uint32_t len;       /* bytes posted */
    uint8_t kind;       /* tpx_slot_kind_t */
    uint8_t tested;     /* test() said done (it must not be called again) */
    uint8_t launched;   /* the GPU unpack of this receive was launched */
    int8_t dst_dev;     /* CUDA device of dst; -1: host memory */
    uint8_t ev_wslot;   /* window slot whose unpack event covers this receive */
    uint16_t ctrl;      /* SLOT_CTRL: index of the control buffer */
    uint32_t chunk;     /* SLOT_DATA: chunk index within its stream */
    uint8_t shared;     /* SLOT_DATA: a shared chunk in the comm's staging buffer */
} tpx_slot_t;

/* A per-comm FIFO of requests in flight: posted >= done, slot = n % cap. */
typedef struct {
    tpx_slot_t slots[TPX_WINDOW_MAX];
    uint64_t posted, done;
    int cap;
} tpx_window_t;

struct tpx_comm {
    tpx_peer_t *peer;
    void *comm;          /* plugin comm */
    int is_send;
    int is_ctrl;
    int chan;            /* data channel index (ctrl: -1) */
    int lane;            /* index into transfers' lane[]: send chan, recv nchan + chan */
    int connecting;      /* connect() called, not finished */
    int id;              /* engine-wide id: index into regions' handle arrays */
    int dev;             /* plugin device */
    tpx_window_t win;
    /* SLOT_DATA lanes waiting for window space (intrusive list through the
     * transfers' lane[chan]). */
    tpx_xfer_t *q_head, *q_tail;
    uint64_t rc2_since_ns; /* test() reported "peer closed" without done */
    void *unpack_ev[TPX_WINDOW_MAX]; /* CUevent per slot for GPU unpacks (lazy) */
    /* Devmem plugins: the device handle's {meta, bounce_buf, head}, copied
     * to the host once (the plugin's copy is device memory: never read on
     * the CPU), and the CPU address of meta (host-mapped memory). */
    int unpack_loaded;
    tpx_nccl_unpack_handle_t unpack;
    const tpx_nccl_unpack_meta_t *meta_host;
    unsigned char *stage; /* shared chunks (packed small blocks): one chunk per window
                             slot, allocated on first use */
    tpx_region_t *stage_region;
    int wake_set; /* the plugin wakes the engine on its completions (tpx__net_set_wake) */
    _Alignas(64) unsigned char devh[TPX_DEVH_STORAGE];
};

/* A control message waiting for a send slot, and the transfer it belongs to. */
typedef struct {
    unsigned char msg[TPX_CTRL_MSG_SIZE];
    tpx_xfer_t *owner;
} tpx_ctrl_out_t;

typedef enum { XF_QUEUED = 0, XF_ACTIVE = 1, XF_DONE = 2 } tpx_xfer_state_t;
typedef enum {
    XK_SEND = 1,  /* two-sided */
    XK_RECV = 2,
    XK_WRITE = 3, /* one-sided, this side asked (rma.c) */
    XK_READ = 4,
    XK_TWRITE = 5, /* one-sided, the peer asked: carried out here (internal) */
    XK_TREAD = 6,
} tpx_xfer_kind_t;

typedef struct {
    tpx_xfer_t *next;    /* next transfer in the comm's queue */
    uint32_t next_chunk; /* next chunk of this transfer for that channel */
    uint32_t seg;        /* segment of the last payload chunk posted (a cursor) */
    uint8_t queued;
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
 * until the gate opens (the owner has not checked the list yet). */
typedef struct {
    uint32_t nchunks, nlist, gate;
    int first_chan;
} tpx_stream_t;

typedef struct tpx_listbuf tpx_listbuf_t;

struct tpx_xfer {
    tpx_engine_t *e;
    tpx_peer_t *peer;
    tpx_region_t *region;    /* two-sided: the user's region */
    tpx_xfer_kind_t kind;
    tpx_xfer_state_t state;
    tpx_status_t status;     /* final status once DONE */
    tpx_status_t err;        /* one-sided: the owner's refusal, reported at the end */
    uint64_t off, cap, len;  /* region offset, recv capacity, bytes of the message */
    uint64_t seq;
    uint32_t nchunks, chunks_done; /* over both streams */
    int hdr_pending;         /* the header message has not been sent yet */
    int resp_pending;        /* one-sided request: the owner's answer has not come */
    int drain;               /* recv: message larger than the buffer, discard it */
    int canceled, released;  /* read and written under the engine lock only */
    int unseen;              /* DONE, not yet reported by poll/wait (counted in e->nunseen) */
    atomic_int settled;      /* 0 while it runs; 1 once DONE (stored after `status`) or
                                released: tpx_xfer_poll() answers a running transfer of a
                                progress-thread engine without the engine lock */
    uint64_t deadline_ns;
    tpx_xfer_t *next, *prev; /* peer's list of transfers not DONE */
    /* chunks */
    tpx_stream_t out, in;
    tpx_seg_t *segs;         /* payload segments; two-sided: &seg1 */
    uint32_t nsegs;
    int segs_owned;
    tpx_seg_t seg1;
    tpx_region_t **regions;  /* regions whose bytes move (xfers counted); two-sided: &region */
    uint32_t nregions;
    /* one-sided */
    uint64_t rid;            /* the requester's id of the transfer */
    uint64_t total;          /* payload bytes */
    unsigned char *list;     /* the request list (requester: the prep's) */
    uint64_t list_len;
    tpx_region_t *list_region;
    uint32_t list_done;      /* owner: list chunks received */
    tpx_listbuf_t *lb;       /* owner: pool buffer holding the list */
    tpx_prep_t *prep;
    unsigned char *notif;    /* READ: sent to the owner when the transfer completed;
                                owner of a WRITE: the requester's, delivered once
                                the data is in place (wire.h) */
    uint32_t notif_len;
    int has_notif;
    int notif_ahead;         /* WRITE: its notification went with the request (1),
                                and a cancel after it (2) */
    uint32_t want_nent, want_nchunks; /* owner: what the RMA_REQ announced */
    tpx_xfer_t *rnext, *rprev; /* peer's requests waiting for an answer */
    tpx_lane_t lane[];       /* 2 * nchan: send lanes, then receive lanes */
};

typedef enum {
    PEER_SETUP = 0, /* bootstrap and channel establishment in progress */
    PEER_READY = 1,
    PEER_FAILED = 2,
    PEER_CLOSED = 3,
} tpx_peer_state_t;

struct tpx_peer {
    tpx_engine_t *e;
    tpx_peer_t *next;     /* engine's list */
    tpx_peer_state_t state;
    tpx_status_t error;   /* why it failed */
    char name[96];        /* the peer's address, for logs */
    tpx_bs_conn_t *bs;    /* bootstrap connection, kept open for liveness */
    int nchan;
    uint32_t chunk;
    tpx_comm_t *ctrl_send, *ctrl_recv;
    tpx_comm_t *send[TPX_MAX_CHANNELS], *recv[TPX_MAX_CHANNELS];
    /* two-sided ordering */
    uint64_t send_seq, recv_seq;
    int send_cursor, recv_cursor;
    tpx_xfer_t *active;               /* transfers not DONE (doubly linked) */
    tpx_xfer_t **recv_pending;        /* posted receives waiting for a header */
    uint32_t recv_pending_n, recv_pending_cap;
    unsigned char (*unexpected)[TPX_CTRL_MSG_SIZE]; /* headers waiting for a receive */
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
    tpx_xfer_t *ctrl_send_owner[TPX_WINDOW_MAX]; /* transfer of each posted message */
    /* discard buffer for drained (truncated) receives */
    void *scratch;
    tpx_region_t *scratch_region;
    int accepted;         /* handed out (tpx_peer_connect/accept) or taken by a remote */
    uint64_t remote_id;   /* the peer engine's id and name (bootstrap INFO) */
    char remote_name[64];
    tpx_remote_t *remote; /* the remote that owns this connection, if any */
    int dialed;           /* this engine connected (tpx_peer_connect), not accepted */
    int verified;         /* the peer proved (IDENT) it holds remote_pk's key */
    unsigned char remote_pk[32];
    /* one-sided (rma.c) */
    uint64_t next_rid;
    tpx_xfer_t *rma_head, *rma_tail; /* requests waiting for an answer, oldest first */
    tpx_listbuf_t *listbufs;         /* free registered buffers for incoming lists */
    uint32_t nlistbufs;              /* ... how many */
    uint32_t rma_ntargets;           /* its requests being served here (quota) */
    uint64_t list_bytes;             /* list buffers its requests hold now (quota) */
    int quota_warned;                /* a refusal was logged */
    int rejects_logged;              /* refused requests logged (at most 10, then counted) */
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
    /* setup state (peer.c) */
    void *setup;
};

struct tpx_region {
    tpx_engine_t *e;
    tpx_region_t *next;
    uintptr_t base;
    size_t len;
    tpx_mem_type_t type;
    int cuda_dev;      /* TPX_MEM_CUDA: the device; -1 otherwise */
    int refs;          /* user references */
    int xfers;         /* transfers using it */
    int dead;          /* deregistered by the user, waiting for xfers */
    int holds;         /* preparations naming it (keep the struct, not the memory) */
    struct tpx_export *exports; /* its exports (export.c) */
    int guard;         /* being deregistered: not released from under the caller */
    int internal;      /* engine-owned (control, scratch) */
    int npieces;       /* registrations per comm (v7 plugins: <= 1 GiB each) */
    int nmh;           /* comm ids with room in mh */
    void **mh;         /* [comm id * npieces + piece]: plugin handle (NULL: not yet) */
};

struct tpx_engine {
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* completions, new peers, progress-thread work */
    tpx_net_t *net;
    tpx_net_props_t props;     /* of devs[0] */
    int gpu;
    int nchan;
    uint32_t chunk;
    int window;
    int timeout_ms;
    int close_grace_ms;
    int connect_timeout_ms;
    char auth_token[256];
    int devs[TPX_MAX_CHANNELS]; /* plugin devices used by this engine, in channel order */
    int ndevs;
    uint64_t id;               /* engine id: derived from ident_pk (KEY mode) or random */
    int ident_keys;            /* KEY mode (ident.h): ident_pk/ident_sk are this engine's */
    unsigned char ident_pk[32], ident_sk[64];
    int efd;                   /* eventfd: readable while nunseen > 0 (tpx_engine_fd) */
    int wake_efd;              /* eventfd: wakes the progress thread out of poll() */
    int sleeping;              /* the progress thread sleeps in poll() (lock held to read) */
    /* peers and memory */
    tpx_peer_t *peers;
    tpx_region_t *regions;
    int next_comm_id;
    uint64_t inflight;         /* transfers ACTIVE or QUEUED on a comm */
    uint64_t ncompleted;       /* transfers completed, ever */
    uint64_t nreported;        /* of which tpx_progress() has reported */
    uint64_t nunseen;          /* user transfers DONE that no poll/wait has reported */
    uint64_t nmoves;           /* plugin requests completed, ever (progress-thread backoff) */
    uint64_t nbells;           /* doorbells heard, ever (tests) */
    uint64_t last_move_ns;     /* progress thread: last completion or post */
    uint64_t spin_ns;          /* TPX_SPIN_US: poll without sleeping this long after it */
    int net_wakes;             /* the plugin wakes a sleeping progress thread (built-in) */
    tpx_net_wake_t net_wake;   /* ... through wake_efd, when armed */
    /* progress thread */
    int progress_thread;
    int progress_cpu;
    pthread_t progress_tid;
    int progress_started;
    /* bootstrap listener */
    int bs_fd, bs_port;
    int bs_wake;               /* eventfd to wake the bootstrap thread */
    pthread_t bs_tid;
    int bs_started;
    _Atomic int stop;
    char name[64];             /* shown to peers */
    char bind_addr[64];        /* params.bind_addr ("" none) */
    /* one-sided: exports, remotes, notifications, counters */
    void *xtab;                /* export table (export.c) */
    uint32_t nexports;
    tpx_remote_t *remotes;
    void **notifs;             /* ring of received notifications */
    uint32_t notif_head, notif_n, notif_cap;
    uint32_t notif_limit;      /* the queue's bound (TPX_NOTIF_QUEUE) */
    int notif_overflow;        /* dropped since the last tpx_engine_get_notifs() */
    tpx_engine_counters_t ctr;
    int rma_pack;              /* small host blocks share chunks (TPX_RMA_PACK) */
    int failed_open;           /* a peer failed since tpx__engine_close_failed() last ran */
    tpx_prep_t *prep_zombies;  /* released preparations a failed peer's comm may still read */
    uint64_t sweep_ns;         /* last deadline/liveness sweep */
    void *reap;                /* abandoned connects still being driven (peer.c) */
    /* GPU unpack of devmem receives (window.c) */
    int unpack_mode;           /* TPX_UNPACK_KERNEL .. NONE */
    int unpack_dev;            /* device the module/stream live on; -1: not set up */
    void *unpack_stream;       /* CUstream */
    void *unpack_hstage;       /* `host` mode: pinned gather buffer (4 MiB) */
    int gpu_ctx_held;          /* the primary context of `gpu` is retained (window.c) */
};

enum { TPX_UNPACK_KERNEL = 0, TPX_UNPACK_D2D, TPX_UNPACK_HOST, TPX_UNPACK_NONE };

/* window.c */
void tpx__engine_unpack_fini(tpx_engine_t *e);
void tpx__comm_unpack_fini(tpx_engine_t *e, tpx_comm_t *c);
/* A receive comm of a devmem plugin: copy its unpack handle (device memory)
 * to the host, once; later calls and other comms return TPX_OK at once. */
tpx_status_t tpx__comm_unpack_load(tpx_comm_t *c);
/* Around plugin listen/connect/accept: make the engine's GPU current, as
 * NCCL's proxy does (Google's plugin puts a comm's buffers on the GPU that
 * is current when it is made). Returns a token for leave(); a no-op for a
 * host engine or without CUDA. */
int tpx__engine_gpu_enter(tpx_engine_t *e);
void tpx__engine_gpu_leave(int token);
int tpx__comm_progress(tpx_comm_t *c);
void tpx__comm_kick(tpx_comm_t *c);
int tpx__ctrl_repost(tpx_comm_t *c);

/* xfer.c */
void tpx__xfer_complete(tpx_xfer_t *x, tpx_status_t st);
/* A data slot of comm c completed: scatter a shared chunk, count it. */
void tpx__xfer_chunk_done(tpx_comm_t *c, tpx_slot_t *s);
tpx_status_t tpx__peer_ctrl_post(tpx_peer_t *p, const unsigned char msg[TPX_CTRL_MSG_SIZE],
                                 tpx_xfer_t *owner);
/* Encode and queue m with the next control sequence number. */
tpx_status_t tpx__peer_ctrl_send(tpx_peer_t *p, tpx_ctrl_t *m, tpx_xfer_t *owner);
void tpx__peer_ctrl_received(tpx_peer_t *p, const unsigned char *msg);
void tpx__peer_ctrl_sent(tpx_peer_t *p, uint16_t idx);
/* Post the next queued item of comm c (data chunk or control message).
 * 1 posted, 0 nothing to post / plugin busy, -1 the peer failed. */
int tpx__comm_post_next(tpx_comm_t *c);
void tpx__peer_fail(tpx_peer_t *p, tpx_status_t st, const char *why);
/* The peer closed its side cleanly: fail what can no longer complete. */
void tpx__peer_remote_closed(tpx_peer_t *p, const char *why);
void tpx__engine_sweep(tpx_engine_t *e);

/* xfer.c (shared with rma.c) */
tpx_xfer_t *tpx__xfer_alloc(tpx_peer_t *p, tpx_xfer_kind_t kind);
void tpx__xfer_attach(tpx_xfer_t *x);
void tpx__xfer_maybe_done(tpx_xfer_t *x);
void tpx__stream_enqueue(tpx_xfer_t *x, tpx_stream_t *st, int is_send);
tpx_status_t tpx__peer_usable(tpx_peer_t *p, const char *fn);
void tpx__progress_kick(tpx_engine_t *e);

/* A prepared one-sided transfer (rma.c). */
struct tpx_prep {
    tpx_prep_t *next_zombie; /* engine's list of preparations freed after comms close */
    tpx_remote_t *rm;
    tpx_op_t op;
    int refs;               /* the user's + one per post running */
    uint32_t chunk;
    tpx_seg_t *segs;        /* local side, coalesced */
    uint32_t nsegs;
    uint32_t npayload;      /* payload chunks */
    uint64_t total;
    unsigned char *list;    /* the encoded request list */
    size_t list_len;
    uint32_t nlist;         /* its chunks */
    tpx_region_t *list_region;
    tpx_region_t **regions; /* distinct local regions (held) */
    uint32_t nregions;
};

/* rma.c */
void tpx__rma_target_begin(tpx_peer_t *p, const tpx_ctrl_t *m);
void tpx__rma_list_chunk_done(tpx_xfer_t *x);
tpx_status_t tpx__rma_resp(tpx_peer_t *p, const tpx_ctrl_t *m);
void tpx__rma_completed(tpx_xfer_t *x);
void tpx__rma_notif_part(tpx_peer_t *p, const tpx_ctrl_t *m);
/* Check where control message m arrives against the HELD notifications
 * (wire.h); 0: the peer failed. */
int tpx__rma_held_order(tpx_peer_t *p, const tpx_ctrl_t *m);
/* The owner got RMA_CANCEL: drop that WRITE's notification if still held. */
void tpx__rma_cancel_received(tpx_peer_t *p, const tpx_ctrl_t *m);
/* The application canceled requester transfer x (engine lock held): a
 * WRITE whose notification went ahead asks the owner to drop it. */
void tpx__rma_canceled(tpx_xfer_t *x);
/* Free the peer's list buffers and the notifications it holds. */
void tpx__peer_listbufs_free(tpx_peer_t *p);
void tpx__engine_rma_fini(tpx_engine_t *e);
void tpx__prep_zombies_free(tpx_engine_t *e);

/* export.c */
struct tpx_export {
    struct tpx_export *next_in_region;
    uint64_t key;
    tpx_region_t *region;
    uint64_t off, len; /* the exported bytes of the region */
};
struct tpx_export *tpx__export_find(tpx_engine_t *e, uint64_t key);
void tpx__region_exports_drop(tpx_region_t *r);
void tpx__exports_fini(tpx_engine_t *e);

/* mem.c */
/* Free r once nothing needs it (deregistered, no transfer, no preparation). */
void tpx__region_maybe_release(tpx_region_t *r);
/* The plugin handle of r on comm c covering bytes from `off` (4 MiB fit). */
tpx_status_t tpx__region_mh(tpx_region_t *r, tpx_comm_t *c, uint64_t off, void **mh);
tpx_status_t tpx__region_create(tpx_engine_t *e, void *addr, size_t len, tpx_mem_type_t type,
                                int internal, tpx_region_t **out);
void tpx__region_release(tpx_region_t *r);
void tpx__regions_forget_comm(tpx_engine_t *e, tpx_comm_t *c);

/* peer.c */
tpx_status_t tpx__bs_thread_start(tpx_engine_t *e);
void tpx__bs_thread_stop(tpx_engine_t *e);
void tpx__peer_destroy(tpx_peer_t *p);
/* Close a failed peer's plugin comms now (their threads stop touching user
 * memory); the peer object stays until tpx_peer_close(). Lock held. */
void tpx__peer_close_comms(tpx_peer_t *p);
int tpx__engine_progress_locked(tpx_engine_t *e);
/* Close the plugin comms of every failed peer (lock held; not from inside
 * a comm's progress). */
void tpx__engine_close_failed(tpx_engine_t *e);
/* Wait on e->cond for at most `ns` (lock held; it is released meanwhile). */
void tpx__engine_cond_wait(tpx_engine_t *e, uint64_t ns);
void tpx__engine_unseen_add(tpx_engine_t *e, tpx_xfer_t *x);
void tpx__engine_unseen_drop(tpx_engine_t *e, tpx_xfer_t *x);
void tpx__engine_reap(tpx_engine_t *e);

/* Ring the peer's doorbell (a frame on the bootstrap connection) if it
 * may be asleep: nothing sent to it for 50 ms. Lock held. */
void tpx__peer_ring(tpx_peer_t *p);
/* Read every pending bootstrap frame of every ready peer (notes an EOF).
 * The number of doorbells among them. Lock held. */
int tpx__engine_bells(tpx_engine_t *e);

/* ident.c: the engine's id, and its key pair where libsodium allows (logs
 * the mode). */
tpx_status_t tpx__ident_engine_init(tpx_engine_t *e);
/* topo.c */
tpx_status_t tpx__topo_devs(tpx_engine_t *e);
int tpx__topo_local_cpu(tpx_engine_t *e);

#endif
