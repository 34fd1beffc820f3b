/* SPDX-License-Identifier: Apache-2.0 */
/*
 * window.h - one plugin comm and its window of requests in flight
 * (window.c): the "plugin window" phase of the progress loop.
 *
 * A comm belongs to its peer (peer.h: ctrl_send, ctrl_recv, send[], recv[]);
 * it is created when the peer is set up and closed when the peer fails or
 * closes (peer.c). Its fields are guarded by e->lock; while its peer is
 * being set up only the setting-up thread touches it.
 *
 * The window is a FIFO: posted >= done, slot = n % cap, only the head is
 * tested (TCPX rejects anything else), cap <= 16 for TCPX. A slot carries
 * either a data chunk of a transfer (SLOT_DATA) or a control message
 * (SLOT_CTRL).
 */
#ifndef TPX_ENGINE_WINDOW_H
#define TPX_ENGINE_WINDOW_H

#include <sys/uio.h>

#include "engine.h"

/* What a window slot carries. */
typedef enum { SLOT_DATA = 1, SLOT_CTRL = 2 } tpx_slot_kind_t;

typedef struct {
    void *req;          /* the plugin's request */
    void *dst;          /* receive: where the bytes go (NULL: discard) */
    tpx_xfer_t *x;      /* SLOT_DATA: the transfer */
    uint32_t len;       /* bytes posted */
    uint32_t got;       /* receive, once done: bytes the plugin says arrived
                           (TPX_SLOT_GOT_UNKNOWN: it does not say, as TCPX) */
    uint8_t kind;       /* tpx_slot_kind_t */
    uint8_t tested;     /* test() said done (it must not be called again) */
    uint8_t launched;   /* the GPU unpack of this receive was launched */
    int8_t dst_dev;     /* CUDA device of dst; -1: host memory */
    uint8_t ev_wslot;   /* window slot whose unpack event covers this receive */
    uint16_t ctrl;      /* SLOT_CTRL: index of the control buffer */
    uint32_t chunk;     /* SLOT_DATA: chunk index within its stream */
    uint8_t shared;     /* SLOT_DATA: a shared chunk in the comm's staging buffer */
    uint8_t stage;      /* shared: its staging chunk (pack.h), the comm's until done */
    uint8_t vec;        /* shared: posted as a vectored message straight from/to its
                           blocks (pack.h, tpx__pack_iov): no staging chunk, no scatter */
    uint16_t nrun;      /* SLOT_DATA: chunks the message carries (a run, xfer.h); 0: one */
    uint64_t t_post_ns; /* SLOT_DATA of a one-sided transfer: when it was posted */
} tpx_slot_t;

#define TPX_SLOT_GOT_UNKNOWN UINT32_MAX

/* A shared chunk whose GPU copy runs on a pack stream (pack.h, async).
 * Send comm: gathered into its staging chunk, posted as `slot` once the
 * copy finished, in the order queued (FIFO plugins pair messages by
 * order). Receive comm: arrived, counted done once its scatter finished.
 * peer_pass.c owns them; a comm that ends waits for its copies first. */
typedef struct {
    tpx_slot_t slot;
    char *buf;             /* send: the staging chunk, its region and offset */
    tpx_region_t *region;
    uint64_t roff;
    uint64_t op;           /* the pack op (pack.h tpx__pack_op_test) */
} tpx_packwait_t;

/* A per-comm FIFO of requests in flight: posted >= done, slot = n % cap. */
typedef struct {
    tpx_slot_t slots[TPX_WINDOW_MAX];
    uint64_t posted, done;
    int cap;
} tpx_window_t;

/* What the sweep (every 10 ms) last saw of a comm's window: whether it
 * moved. Kept by tpx__window_look (no cost on the hot path: the sweep
 * compares the window's counter), read by the peer's sweep (peer_sweep.c
 * chan_verdict), which gives the verdict: a receive channel still for
 * TPX_CHANNEL_STALL_MS while a sibling moved since is dead. The same
 * record serves a later move of a dead channel's work onto the others. */
typedef enum {
    TPX_CHAN_IDLE = 0,  /* nothing in flight */
    TPX_CHAN_MOVING,    /* a request completed since the last look */
    TPX_CHAN_STILL,     /* requests in flight, none completed since the last look */
    TPX_CHAN_DEAD,      /* still past TPX_CHANNEL_STALL_MS while a sibling moved */
} tpx_chan_state_t;

typedef struct {
    uint64_t done_seen;  /* win.done at the last look */
    uint64_t still_ns;   /* the last look at which it moved or was idle: stillness since */
    uint64_t moved_ns;   /* the last look at which a request of it had completed (0: never) */
    int state;           /* tpx_chan_state_t */
} tpx_chan_live_t;

struct tpx_comm {
    tpx_peer_t *peer;    /* owner (peer.h: the files above window.c read it) */
    /* What window.c needs of its peer, set with the comm (peer.c comm_new),
     * so that it reads no peer (a file below peer.h's) */
    tpx_engine_t *e;     /* the peer's engine */
    const char *peer_name; /* the peer's name, for log lines (the peer outlives its comms) */
    const uint32_t *peer_repairs; /* the peer's channel repairs (a fault hook: faults.h
                                     die_next) */
    void *comm;          /* plugin comm */
    int is_send;
    int is_ctrl;
    int chan;            /* data channel index (ctrl: -1) */
    int lane;            /* index into transfers' lane[]: send chan, recv nchan + chan */
    int connecting;      /* connect() called, not finished */
    int id;              /* engine-wide id: index into regions' handle arrays */
    int dev;             /* plugin device */
    char nic[16];        /* the interface its device names, where it names one (NICs not
                            fused): the sweep asks it for its link (peer_sweep.c); "" else */
    int nic_up;          /* the sweep saw nic with its link since this plugin comm connected */
    tpx_window_t win;
    /* schedule: SLOT_DATA lanes waiting for window space (intrusive list
     * through the transfers' lane[lane]; xfer.c) */
    tpx_xfer_t *q_head, *q_tail;
    uint8_t q_li, q_tail_li; /* the lanes of q_head and q_tail queued here (xfer.h next_li) */
    int dead;            /* data channel lost: never tested or posted again; its plugin comm
                            closes once both sides agree on what it lost (peer_repair.c) */
    uint64_t rc2_since_ns; /* test() reported "peer closed" without done */
    uint64_t fault_next_ns; /* testing, TPX_FAULT_CTRL_SLOW_MS: no completion before this */
    /* A lost data channel connected again (peer.c, rejoin): the receiver
     * listens and sends its handle (TPX_MSG_REJOIN), the sender connects,
     * retrying with backoff, and announces REJOIN (peer_repair.c). */
    void *rj_listen;     /* receive comm: the listen its new plugin comm is accepted from */
    int rj_got;          /* send comm: the peer's handle came (rj_their0), connect pending */
    int rj_checked;      /* ... and passed the steering check */
    uint64_t rj_next_ns; /* next attempt (listen or connect) not before this */
    uint32_t rj_backoff_ms; /* ... the wait after the next failure */
    uint32_t gen;        /* plugin comms this comm had before its current one (rejoins) */
    unsigned char rj_their0[TPX_BS_HANDLE_SIZE]; /* the handle as it came */
    unsigned char rj_their[TPX_BS_HANDLE_SIZE];  /* ... the copy the connect in progress uses */
    void *unpack_ev[TPX_WINDOW_MAX]; /* CUevent per slot for GPU unpacks (lazy) */
    /* Devmem plugins: the device handle's {meta, bounce_buf, head}, copied
     * to the host once (the plugin's copy is device memory: never read on
     * the CPU), and the CPU address of meta (host-mapped memory). */
    int unpack_loaded;
    int no_bounce; /* the plugin gave no bounce buffer (Google's "rxmem skip" state:
                      RxDM exported no receive memory for the GPU): receives into host
                      memory only; meta_host may be NULL */
    tpx_nccl_unpack_handle_t unpack;
    const tpx_nccl_unpack_meta_t *meta_host;
    unsigned char *stage; /* shared chunks (packed small blocks): one chunk per window
                             slot, allocated on first use (pack.h) */
    uint8_t stage_free[TPX_WINDOW_MAX]; /* staging chunks not in a posted slot: a stack,
                                           the last freed (warmest in cache) on top */
    int stage_nfree;
    tpx_region_t *stage_region;
    unsigned char *gstage; /* ... with GPU blocks: page-locked (pack.h) */
    tpx_region_t *gstage_region;
    int gstage_dev;        /* the device it was allocated on */
    struct tpx_vecslot *vec; /* vectored shared chunks: one iovec array per window
                                slot, grown on demand (pack.h) */
    tpx_packwait_t *pw;    /* shared chunks whose GPU copy runs (TPX_WINDOW_MAX, on first
                              use): a FIFO of pw_n from pw_head */
    uint32_t pw_head, pw_n;
    int wake_set; /* the plugin wakes the engine on its completions (tpx__net_set_wake) */
    tpx_chan_live_t live; /* whether its window moves (tpx__window_look, by the sweep) */
    _Alignas(64) unsigned char devh[TPX_DEVH_STORAGE];
};

/* The plugin window phase. This layer calls only the plugin (net.h) and
 * the CUDA wrappers: never up into transfers, peers or the loop. Its
 * caller (peer_pass.c, tpx__comm_pass) hands each released slot to the
 * completion phase and decides what a failure does to the peer. */
enum {
    TPX_WIN_DONE = 1,  /* the head was released: *out is its slot (now free) */
    TPX_WIN_EMPTY = 0, /* nothing finished at the head: more may be posted */
    TPX_WIN_HOLD = -1, /* the head is held (its GPU unpack runs, or the plugin said
                          "peer closed" within TPX_CLOSE_GRACE_MS): post nothing now */
    TPX_WIN_ERR = -2,  /* the comm failed: *err says how */
};
typedef struct {
    tpx_status_t st;
    int closed;        /* the plugin said "peer closed" past the close grace */
    char why[96];      /* for the peer's failure line */
} tpx_window_err_t;

/* The sweep's look at c's window (no plugin call): moved since the last
 * look, idle, or still; a comm already DEAD stays so. Returns the state. */
int tpx__window_look(tpx_comm_t *c, uint64_t now);

/* Test the head of c's window (only the head: TCPX rejects anything else);
 * a finished receive of a devmem plugin is unpacked, then released
 * (irecvConsumed). Never blocks, never allocates. */
int tpx__window_test(tpx_comm_t *c, tpx_slot_t *out, tpx_window_err_t *err);
/* isend (send comm) or irecv (receive comm) of buf[len] with handle mh into
 * the next slot, which becomes `what` (kind, x, chunk, ctrl, dst...). The
 * caller checked that the window has room. TPX_OK posted, TPX_INPROGRESS
 * the plugin is busy (nothing posted), else the plugin's error. */
tpx_status_t tpx__window_post(tpx_comm_t *c, void *buf, uint32_t len, void *mh,
                              const tpx_slot_t *what);
/* The same for a vectored message (net.h: tpx__net_isendv) of len bytes:
 * iov must stay as it is until the slot is released. */
tpx_status_t tpx__window_postv(tpx_comm_t *c, const struct iovec *iov, int iovcnt, uint32_t len,
                               const tpx_slot_t *what);
/* 1 when c's window has no room for another request. */
static inline int tpx__window_full(const tpx_comm_t *c)
{
    return c->win.posted - c->win.done >= (uint64_t)c->win.cap;
}

/* A receive comm of a devmem plugin: copy its unpack handle (device memory)
 * to the host, once; later calls and other comms return TPX_OK at once. A
 * handle without a bounce buffer is Google's "rxmem skip" state: the comm
 * is usable for host memory (c->no_bounce) and a receive into GPU memory
 * on it is refused at post with TPX_ERR_UNSUPPORTED (tpx__comm_rxmem_refuse
 * says why, once). */
tpx_status_t tpx__comm_unpack_load(tpx_comm_t *c);
void tpx__comm_unpack_fini(tpx_engine_t *e, tpx_comm_t *c);
/* Close c's plugin comm (its unpack events, the regions' handles on it,
 * then the comm itself, in the engine's GPU context: the plugin frees the
 * comm's GPU memory); c->comm is NULL after. The tpx_comm_t stays. */
void tpx__comm_close_plugin(tpx_engine_t *e, tpx_comm_t *c);
/* Log why a receive into GPU memory cannot go over comm c, which has no
 * bounce buffer (the plugin's rxmem skip state), naming `fn`, and what to
 * fix on the host; returns TPX_ERR_UNSUPPORTED. */
tpx_status_t tpx__comm_rxmem_refuse(const tpx_comm_t *c, const char *fn);

/* ---- window.c: the engine's GPU current around every plugin call ---- */

/* Around every call into the plugin (set-up, passes, closes), on whatever
 * thread makes it: make the engine's GPU current, as NCCL's proxy does
 * (Google's plugin puts a comm's buffers and unpack work on the GPU that
 * is current when it is made). Returns a token for leave(); a no-op for a
 * host engine or without CUDA; one driver query when the thread has that
 * GPU current already. */
int tpx__window_gpu_enter(tpx_engine_t *e);
/* The same around a progress pass (the hot path): a no-op where the plugin
 * never uses the current GPU (gpu_passes 0). */
static inline int tpx__window_gpu_enter_pass(tpx_engine_t *e)
{
    return e->cfg.gpu_passes ? tpx__window_gpu_enter(e) : 0;
}
void tpx__window_gpu_leave(int token);
/* window.c's part of the engine (e->window): made with the engine, freed
 * (its GPU unpack stream and context released) by fini. */
tpx_status_t tpx__window_engine_init(tpx_engine_t *e);
void tpx__window_engine_fini(tpx_engine_t *e);

#endif
