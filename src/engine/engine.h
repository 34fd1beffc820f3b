/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.h - the engine object (engine.c), its progress loop, and the map
 * of the engine's private headers, threads and locks.
 *
 * ---- objects and their headers (one per object, lower layers first) ---------------
 *
 *   wire.h    wire formats: pure encoders/decoders (wire.c); no engine state
 *   ident.h   engine identity (ident.c)
 *   engine.h  this file: struct tpx_engine, its settings resolved once
 *             (tpx_engine_cfg_t e->cfg: engine.c), constants shared by all
 *             layers
 *   mem.h     struct tpx_region (mem.c) and its exports (export.c)
 *   window.h  struct tpx_comm: one plugin comm and its window of requests in
 *             flight (window.c)
 *   pack.h    the small blocks of a shared chunk, gathered and scattered
 *             (pack.c)
 *   xfer.h    struct tpx_xfer: a transfer, its chunk streams and lanes
 *             (xfer.c; its end in peer_fail.c; a send or receive posted
 *             in xfer_user.c; waited for, canceled, released in wait.c;
 *             the one-sided roles in rma.c, reached from below through
 *             the kind's ops)
 *   peer.h    struct tpx_peer: one connection: its failure (peer_fail.c),
 *             what it is proven to be (peer_trust.c),
 *             outgoing control stream (peer_ctrl.c), pass and incoming
 *             control stream (peer_pass.c), liveness (peer_sweep.c), a
 *             data channel lost and repaired (peer_repair.c), set-up and
 *             close (peer.c)
 *   rma.h     struct tpx_prep and one-sided READ/WRITE/notifications (rma.c)
 *   remote.h  struct tpx_remote: peers known by metadata (remote.c)
 *   faults.h  the test-only fault hooks, one table apart from the engine
 *             (faults.c)
 *
 * Data path, top to bottom: a transfer (xfer.c) is cut into chunks dealt
 * round-robin over a peer's data channels in an order both sides derive
 * from the transfer sequence; each channel is one plugin comm per
 * direction (peer.c); a comm posts chunks into its window (window.c) and
 * tests only the window's head; a completed receive is unpacked (devmem
 * plugins) before irecvConsumed releases its slot; when a transfer's last
 * chunk is released the transfer completes.
 *
 * ---- threads ------------------------------------------------------------------------
 *
 *  API callers     any number of application threads. Every API call that
 *                  reads or writes engine state takes e->lock; the only
 *                  reads without it are immutable fields (tpx_engine_fd,
 *                  tpx_engine_port, tpx_engine_info) and a transfer's atomic
 *                  `settled` flag (tpx_xfer_poll/wait(0) of a progress-thread
 *                  engine: xfer.h). In caller-driven mode (no progress
 *                  thread) tpx_progress/poll/wait run the progress loop in
 *                  the caller.
 *  progress        "tpx-progress" (params.progress_thread): runs the progress
 *                  loop (tpx__engine_progress) holding e->lock; drops it only
 *                  to nap (cond wait on e->cond, ppoll on wake_efd and the
 *                  peers' bootstrap fds, sched_yield).
 *  bootstrap       "tpx-bootstrap" (an engine with a listener port): accepts
 *                  and sets up incoming peers. A peer being set up belongs
 *                  to the thread setting it up (this one, or the caller of
 *                  tpx_peer_connect) and is invisible to others until it is
 *                  linked into e->peers; its bootstrap I/O runs without
 *                  e->lock; plugin listen/connect/accept, admission,
 *                  linking, reaping and freeing stale peers take e->lock.
 *  transport       the plugin's own threads (the built-in transport's socket
 *                  workers, TCPX's): they never call into the engine and
 *                  never take e->lock; they reach it only through the
 *                  net_wake eventfd (an atomic `armed` flag, then a write).
 *  registry        the registry's keep-alive thread (src/registry) touches
 *                  only the registry; a remote's resolver (registry HTTP) is
 *                  called by remote.c under rm->conn_lock, without e->lock.
 *
 *  SIGPIPE         the threads above that libtpx starts block it for their
 *                  life; a pass run on an API caller's thread, and every
 *                  plugin call outside one, runs inside a guard that blocks
 *                  it and consumes one the plugin raised (common/sigpipe.h).
 *                  The process's disposition is never changed.
 *
 * ---- locks, and the order in which they are taken ------------------------------------
 *
 *  1. registry locks (registry.c: lock, then pub_lock; watch_lock) are never
 *                    held across a call into the engine: they nest with none
 *                    of the locks below
 *  2. rm->conn_lock  one connect per remote at a time (remote.h); held
 *                    across a whole connect; never taken with e->lock held
 *  3. e->lock        THE engine lock: guards every engine structure (engine,
 *                    peers once linked, comms, windows, transfers, regions,
 *                    exports, remotes' fields other than conn_lock, prep
 *                    refcounts, notifications) and serialises every plugin
 *                    call of the engine. e->cond (CLOCK_MONOTONIC) waits on it.
 *  4. plugin locks   taken inside plugin calls (net.c net_lock/log_lock, the
 *                    built-in transport's locks), so after e->lock; a plugin
 *                    never calls back into the engine holding one
 *  5. CUDA wrappers  cuda.c ctx_lock, unpack_gpu.c gpu_lock: inside
 *                    e->lock, never around it
 *  6. log.c cb_lock  innermost: logging happens under any of the above
 *                    (never on the hot path)
 *
 * A thread holds at most one lock of each level and takes them in this
 * order (2 -> 3 -> 4/5 -> 6); e->lock is never held while a thread waits
 * for rm->conn_lock, joins a thread or sleeps (cond waits release it).
 * Orderings that travel through sockets between engines (TSan cannot see
 * them) are annotated in common/tsan.h. The eventfd e->efd is readable
 * exactly while e->nunseen > 0 (xfer.c, under e->lock).
 *
 * ---- progress: the phases, top to bottom ---------------------------------------------
 *
 * One function drives the engine: tpx__engine_progress() (engine.c). It
 * never blocks and returns the transfers completed during the pass. It is
 * run by the progress thread, or by tpx_progress/poll/wait in caller-driven
 * mode; an API call that queued work runs at most one pass of its own peer
 * (tpx__engine_post_pass). The phases, each a function of the file that
 * owns its structure:
 *
 *   post          in the API call, under e->lock (tpx_send/recv: xfer_user.c
 *                 tpx__xfer_two_post; tpx_xfer_post/tpx_notif_send: rma.c):
 *                 check, build the transfer, queue its control message on
 *                 the peer's outbox (tpx__peer_ctrl_send) and its chunk streams on the comms'
 *                 lanes (tpx__stream_enqueue); then tpx__engine_post_pass.
 *   per peer      peer_pass.c tpx__peer_pass: control receives back on idle
 *                 buffers (flow control), then each comm's pass
 *                 (tpx__comm_pass: control receive, control send, data
 *                 channels, control send again for messages just produced):
 *     plugin window  window.c tpx__window_test: test the FIFO head only,
 *                 unpack a devmem receive, release the slot (irecvConsumed)
 *     completion  peer_pass.c comm_complete: a chunk of a transfer
 *                 (tpx__xfer_chunk_done -> peer_fail.c tpx__xfer_complete,
 *                 the kind's ops for the one-sided roles), a control message sent
 *                 (tpx__peer_ctrl_sent) or received (tpx__peer_ctrl_received:
 *                 matched to receives, one-sided requests and answers)
 *     schedule    peer_pass.c comm_schedule: the next chunk of the comm's lane
 *                 queue or the next outbox message, into the window
 *                 (window.c tpx__window_post: isend/irecv within the window,
 *                 <= 16 in flight for TCPX); then the head is tested again
 *   notification  as a transfer completes (peer_fail.c tpx__xfer_complete): the
 *                 engine fd is raised for the user (level-triggered on
 *                 e->nunseen), e->cond is broadcast to waiters, tpx_progress
 *                 counts it (e->ncompleted); a notification received goes
 *                 to the engine's queue (rma.c)
 *   sweep         engine.c engine_sweep, every 10 ms: abandoned connects,
 *                 deadlines, bootstrap liveness (peer_sweep.c tpx__peer_sweep);
 *                 then the comms of peers that failed in this pass close
 *                 (peer.c tpx__peer_close_failed)
 *
 * Layering of the calls between files (scripts/engine-calls checks it,
 * public functions included; docs/design.md draws it):
 *   wire, ident, faults < topo < export < mem < window, pack < xfer
 *   < peer_fail, peer_trust < peer_ctrl < rma < peer_repair < peer_pass < peer_sweep,
 *   xfer_user < peer < remote < engine < wait < api_engine, api_mem, api_peer,
 *   api_remote, api_rma, api_xfer, info, kv (the public entry points: they
 *   check their arguments, take the lock and call one internal function).
 * A file calls only files of lower layers (none of its own), so no two
 * files call each other. A file includes only the headers of its own row
 * and below (this one is the bottom's); the few links up that remain are
 * data, a lower object pointing to its owner (a comm's or transfer's peer,
 * a peer's remote), each named in scripts/engine-calls (INCLUDE_UP).
 * window.c calls only the plugin and the CUDA wrappers.
 * What goes up is a status (a lower layer reports, its caller fails the
 * peer) or a call through a table set from above: a transfer's kind's ops
 * (xfer.h, set by rma.c).
 */
#ifndef TPX_ENGINE_H
#define TPX_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "common/log.h"
#include "net/net.h"
#include "wire.h"
#include "tpx/tpx.h"

#define TPX_MAX_CHANNELS 32
#define TPX_WINDOW_MAX 32
/* GPU copies of shared chunks in flight at once (pack.c): each op slot has
 * its device scratch chunk, fragment lists and event. */
#define TPX_PACK_OPS 8
#define TPX_RMA_PACK_AUTO UINT32_MAX /* TPX_RMA_PACK_BYTES=-1 (rma.c pack_bound) */
/* Chunks when TPX_CHUNK_BYTES is 0: on tpx's own transport 1 MiB (its CUDA
 * staging copies a message in fewer, larger blocks; docs/design.md), on
 * other plugins and in strict TCPX mode 512 KiB (NCCL's chunk for TCPX). */
#define TPX_CHUNK_OWN     (1024u * 1024)
#define TPX_CHUNK_OTHER   (512u * 1024)
/* Window when TPX_WINDOW is 0: on tpx's own transport 32 requests per comm
 * (at most its TPX_MAX_REQUESTS): a CUDA buffer's chunk spends part of its
 * time in staging copies at both ends, so its comms need more in flight to
 * keep the sockets busy (1 MiB GPU transfers 1.06-1.43x faster than with 16 on
 * H200 hosts, docs/design.md); on other plugins and in strict TCPX mode 16
 * (TCPX's limit). */
#define TPX_WINDOW_OWN    32
#define TPX_WINDOW_OTHER  16
#define TPX_CTRL_MSG_SIZE 64      /* every control message's header has exactly this size */
#define TPX_CTRL_BUF_SLOT TPX_CTRL_SLOT /* a control buffer: header + body (wire.h) */
#define TPX_DEVH_STORAGE 512      /* device-handle storage per comm */
#define TPX_MSG_BELL (TPX_BS_TYPE_USER + 2) /* bootstrap frame "a request is on its way":
                                               wakes an idle owner (peer.c) */
#define TPX_MSG_CHAN (TPX_BS_TYPE_USER + 5) /* bootstrap frame: the sender's listen handles of
                                               its data channels, once per peer (peer.c) */
#define TPX_MSG_REJOIN (TPX_BS_TYPE_USER + 6) /* bootstrap frame: u8 channel, then the
                                                 receiver's listen handle of that lost
                                                 channel, to connect it again (peer.c) */
#define TPX_MSG_CTRL (TPX_BS_TYPE_USER + 7) /* bootstrap frame: one control message (header
                                               and body), once its sender's control comm
                                               failed (peer_ctrl.c) */
#define TPX_MSG_CTRL_SEEN (TPX_BS_TYPE_USER + 8) /* bootstrap frame: u64 the next control
                                                    sequence number expected (all before it
                                                    arrived), u8 move: 1 = this side's control
                                                    receive comm failed, send over bootstrap
                                                    (peer_ctrl.c) */
#define TPX_MAX_UNEXPECTED 1024   /* early send headers held before flow control stops the peer */
#define TPX_MAX_ANSWERS_QUEUED 4096 /* answers to a peer's requests waiting to be sent, ditto */

typedef struct tpx_comm tpx_comm_t; /* window.h */
/* The engine's parts owned by one file each (struct tpx_engine below): their
 * types are defined in their owner's .c file alone. */
typedef struct tpx_rma_state tpx_rma_state_t;       /* rma.c */
typedef struct tpx_window_state tpx_window_state_t; /* window.c */
typedef struct tpx_pack_state tpx_pack_state_t;     /* pack.c */
typedef struct tpx_listener_state tpx_listener_state_t; /* peer.c */
typedef struct tpx_ident_state tpx_ident_state_t;   /* ident.c */

/* The engine's settings: the application's params, the environment
 * (config_table.h) and the plugin's capabilities, resolved once by
 * tpx_engine_create() (engine.c) before any other thread starts and never
 * written again: every thread reads them without the lock (e->cfg.X). */
typedef struct {
    /* ---- params, else the environment ---- */
    int nchan;                 /* data channels per peer (params.channels, TPX_CHANNELS) */
    uint32_t chunk;            /* chunk bytes (params.chunk_bytes, TPX_CHUNK_BYTES; 0 there:
                                  by plugin, TPX_CHUNK_OWN/OTHER) */
    int window;                /* requests in flight per comm (params.window, TPX_WINDOW; 0
                                  there: by plugin), within the plugin's request limit and
                                  a devmem plugin's unpack queue */
    int timeout_ms;            /* a transfer's deadline (params.timeout_ms, TPX_TIMEOUT_MS) */
    int close_grace_ms;        /* TPX_CLOSE_GRACE_MS */
    int chan_stall_ms;         /* TPX_CHANNEL_STALL_MS: a data channel this long still while a
                                  sibling moved is dead (peer_sweep.c tpx__peer_sweep); 0 off */
    int failover;              /* TPX_CHANNEL_FAILOVER: a lost data channel is repaired
                                  (peer_repair.c) */
    int ctrl_bootstrap;        /* TPX_CTRL_BOOTSTRAP: our control stream goes over the
                                  bootstrap connection from the start (peer_ctrl.c) */
    int connect_timeout_ms;    /* TPX_CONNECT_TIMEOUT_MS */
    char auth_token[256];      /* params.auth_token, TPX_AUTH_TOKEN */
    char bind_addr[64];        /* params.bind_addr, TPX_BIND_ADDR ("" none) */
    uint32_t notif_limit;      /* the notification queue's bound (params.notif_queue,
                                  TPX_NOTIF_QUEUE) */
    int progress_thread;       /* params.progress_thread */
    int progress_numa;         /* params.progress_cpu was TPX_CPU_NUMA_LOCAL */
    /* ---- the environment ---- */
    uint32_t rma_pack_bytes;   /* small blocks share chunks (TPX_RMA_PACK_BYTES; pack.c);
                                  TPX_RMA_PACK_AUTO: by the memory and plugin (rma.c) */
    uint32_t rma_pack_chunk;   /* ... of this size (TPX_RMA_PACK_CHUNK; 0: the chunk) */
    int rma_iov;               /* shared chunks of host blocks as vectored messages
                                  (TPX_RMA_IOV and a plugin that takes them, net.h) */
    uint32_t rma_inline_bytes; /* small transfers inside control messages (TPX_RMA_INLINE_BYTES) */
    uint64_t spin_ns;          /* TPX_SPIN_US: poll without sleeping this long after it */
    uint64_t wait_spin_ns;     /* TPX_WAIT_SPIN_US: tpx_xfer_wait watches this long first */
    int chan_socks;            /* TPX_CHANNEL_SOCKS: data connections per channel (own transport) */
    int unpack_mode;           /* TPX_UNPACK: TPX_UNPACK_KERNEL .. NONE */
    int pack_async;            /* TPX_RMA_PACK_ASYNC: GPU copies of shared chunks overlap (pack.c) */
    int pack_streams;          /* TPX_RMA_PACK_STREAMS: CUDA streams of those copies (pack.c) */
    /* ---- the plugin's capabilities ---- */
    int gpu_passes;            /* the plugin may place memory on the current GPU in any call
                                  (all but a plugin whose extension table says it names its
                                  devices itself, tpx__net_keeps_gpu: the built-in transport
                                  outside strict TCPX mode): passes enter the GPU too */
    int net_wakes;             /* the plugin wakes a sleeping progress thread (built-in) */
    int bulk_waits;            /* ... and moves data alone: sleep between completions of
                                  a bulk transfer (engine.c, progress_wait_bulk;
                                  TPX_BULK_WAIT) */
} tpx_engine_cfg_t;

/* The engine. Created and destroyed by the application (tpx_engine_create/
 * destroy); owns its peers, regions, remotes, exports and notifications.
 * Immutable after create, read without the lock: `cfg` (the settings),
 * `net`, the identity (e->ident: ident.c), the fds efd and wake_efd,
 * bs_fd and bs_port, the progress thread's fields once it runs; the GPU
 * and NICs once gpu_fixed. Every other field is live state guarded by
 * `lock` unless its comment says otherwise. Each field is written only by
 * the file its section names, and by engine.c, which gives every field its
 * first value and frees what is left; a field written by several files
 * names them. scripts/engine-calls (FIELD_WRITERS) fails on a write
 * anywhere else. A file's private state is not a field here but a part of
 * its own (e->rma, e->window, e->pack, e->listener: a type that only its owner's .c
 * file defines, so no other file can read or write inside it; the others
 * call its functions); scripts/engine-calls (STATE_OWNERS) fails on a
 * file that reaches inside another's part or defines its type. */
struct tpx_engine {
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* completions, new peers, progress-thread work */
    tpx_engine_cfg_t cfg;      /* the settings, resolved once (above) */
    /* ---- the plugin, GPU, NICs (topo.c) and identity (ident.c); immutable, but see
     * gpu_fixed ---- */
    tpx_net_t *net;
    tpx_net_props_t props;     /* of devs[0] */
    /* The GPU the engine serves and the NICs its channels use (devs, ndevs,
     * props): fixed from params.gpu, else bound by the first CUDA memory
     * registered, else by the CUDA context current at create. Until the
     * first peer is set up (gpu_fixed) a registration may rebind them,
     * under `lock` (topo.c tpx__topo_gpu_bind); after that they do not
     * change and are read without the lock. */
    int gpu;
    int gpu_from;              /* tpx_gpu_from_t: why `gpu` */
    int nics_from;             /* tpx_nics_from_t: why `devs` */
    int gpu_fixed;             /* 1: gpu and devs no longer change (lock; set by the first
                                  peer's set-up, peer.c) */
    int devs[TPX_MAX_CHANNELS]; /* plugin devices used by this engine, in channel order */
    int ndevs;
    int devs_fused;            /* devs are virtual devices of several NICs (TPX_NIC_FUSE):
                                  a NIC's loss is the plugin's to fail over (peer_sweep.c) */
    tpx_ident_state_t *ident;  /* ident.c: the engine's id, name, key pair and instance
                                  secret (tpx__ident_engine_id, _name, _keys, _ticket) */
    /* ---- wake-ups (engine.c: the progress loop) ---- */
    int efd;                   /* eventfd (immutable fd): readable while nunseen > 0 */
    struct pollfd *nap_fds;    /* progress thread only: what a nap polls (wake_efd + one
                                  doorbell per ready peer), grown as peers come, never
                                  shrunk; freed by destroy */
    int nap_cap;
    int wake_efd;              /* eventfd (immutable fd): wakes the progress thread out of
                                  poll(); written by any thread, read by the progress thread */
    int sleeping;              /* the progress thread sleeps in poll() (lock held to read) */
    atomic_int api_waiting;    /* API callers blocked on `lock` (tpx__engine_lock): the
                                  progress thread lets them in before it takes it again */
    atomic_int drivers;        /* tpx_xfer_wait callers running the loop themselves while
                                  they watch (tpx__engine_drive_begin): the progress thread
                                  stands aside until the last one leaves */
    _Atomic uint64_t poll_lease_ns; /* a tpx_xfer_poll loop drives the passes until then
                                  (tpx__engine_poll_drive): the progress thread stands
                                  aside meanwhile */
    tpx_net_wake_t net_wake;   /* the plugin's wake-up of a sleeping progress thread: its
                                  `armed` flag is atomic (read by transport threads) */
    /* ---- peers and memory (peer.c links the peers, mem.c the regions) ---- */
    tpx_peer_t *peers;         /* linked peers (peer.h); set-ups are not in it */
    tpx_region_t *regions;     /* every region (mem.h), internal ones included */
    int next_comm_id;
    /* ---- counters of the loop (engine.c; a transfer's start and end: xfer.c,
     * peer_fail.c; each other writer named below) ---- */
    uint64_t inflight;         /* transfers ACTIVE or QUEUED on a comm */
    uint64_t ncompleted;       /* transfers completed, ever */
    uint64_t nreported;        /* of which tpx_progress() has reported */
    uint64_t nunseen;          /* user transfers DONE that no poll/wait has reported */
    uint64_t nmoves;           /* plugin requests completed, ever (progress-thread backoff;
                                  window.c) */
    uint64_t nbells;           /* doorbells heard, ever (tests; peer.c, peer_sweep.c) */
    uint64_t last_move_ns;     /* progress thread: last completion or post (written by every
                                  file that moves data or control: scripts/engine-calls
                                  lists them) */
    uint64_t sweep_ns;         /* last deadline/liveness sweep */
    int failed_open;           /* a peer failed (peer_fail.c) since tpx__peer_close_failed()
                                  last ran (peer.c) */
    /* ---- progress thread (its fields are immutable once it runs; engine.c) ---- */
    int progress_cpu;          /* params.progress_cpu; NUMA-local: the NICs' node's, chosen
                                  at create and again when the GPU rebinds (topo.c; lock) */
    pthread_t progress_tid;
    int progress_started;
    /* ---- bootstrap listener (made by engine.c; its thread, in e->listener, started
     * and stopped by peer.c) ---- */
    int bs_fd, bs_port;        /* immutable once created */
    _Atomic int stop;          /* destruction began: threads leave their loops */
    /* ---- one-sided: exports, remotes, notifications, counters (rma.c, export.c) ---- */
    void *xtab;                /* export table (export.c) */
    uint32_t nexports;
    tpx_remote_t *remotes;     /* loaded remotes (remote.h) */
    tpx_engine_counters_t ctr; /* each counter written by the file that counts it (rma.c,
                                  pack.c, peer.c, peer_pass.c, peer_repair.c) */
    /* ---- the state of one file each: a type that file alone defines (opaque
     * here: only its owner reads or writes inside; the others call its
     * functions), made and freed by its owner's init/fini, which engine.c
     * calls at create and destroy ---- */
    tpx_rma_state_t *rma;      /* rma.c: the notification queue, the preparations kept for
                                  failed peers' comms */
    tpx_window_state_t *window; /* window.c: GPU unpack of devmem receives, the engine's
                                  GPU context */
    tpx_pack_state_t *pack;    /* pack.c: the pack streams, kernel, scratch and op slots of
                                  shared chunks of GPU blocks */
    tpx_listener_state_t *listener; /* peer.c: the bootstrap thread, the abandoned
                                  connects it drives */
};

enum { TPX_UNPACK_KERNEL = 0, TPX_UNPACK_D2D, TPX_UNPACK_HOST, TPX_UNPACK_NONE };

/* Wake a progress thread that naps (cond wait or poll); a no-op without
 * one. Lock held. It only signals (like uv_async_send): any layer may
 * call it without calling up into the loop. */
static inline void tpx__progress_kick(tpx_engine_t *e)
{
    if (!e->cfg.progress_thread)
        return;
    pthread_cond_broadcast(&e->cond);
    if (e->sleeping) {
        uint64_t one = 1;
        ssize_t n = write(e->wake_efd, &one, sizeof(one));
        (void)n;
    }
}

/* ---- engine.c: the engine's life (api_engine.c's entry points call these) ---- */

/* The defaults of tpx_engine_params_t (tpx.h). */
void tpx__engine_params_init(tpx_engine_params_t *p);
/* tpx_engine_create: validate params (logged), build the engine, start its
 * threads; *out only on success. Takes no lock: nothing else sees it yet. */
tpx_status_t tpx__engine_create(const tpx_engine_params_t *params, tpx_engine_t **out);
/* tpx_engine_destroy of a non-NULL engine: stop its threads, close every
 * peer, comm and registration, free it. */
void tpx__engine_destroy(tpx_engine_t *e);
/* tpx_progress of a non-NULL engine: one pass in caller-driven mode (takes
 * e->lock), then the transfers completed since the last call. */
int tpx__engine_completions(tpx_engine_t *e);

/* ---- engine.c: the loop and its notification phase (lock held unless said) ---- */

/* One pass of the progress loop over every ready peer (the phases above);
 * never blocks; the number of transfers completed during it. */
int tpx__engine_progress(tpx_engine_t *e);
/* An API call queued work on peer p (lanes, outbox): run one pass of p's
 * comms now -- the caller's thread posts its first chunks at once, as the
 * plugin allows -- and wake the progress thread for the rest. The only
 * way an API call drives progress. */
void tpx__engine_post_pass(tpx_engine_t *e, tpx_peer_t *p);
/* Wait on e->cond for at most `ns` (it is released meanwhile). */
void tpx__engine_cond_wait(tpx_engine_t *e, uint64_t ns);
/* A caller that waits for a transfer runs the loop's passes itself while
 * it watches (tpx_xfer_wait) and the progress thread stands aside: one
 * spinning thread instead of two. begin: any time (no lock). end: lock
 * held; `more`: the caller goes to sleep with its transfer unfinished, so
 * the progress thread must take over now (woken), else it is woken by the
 * next completion a transport thread makes (armed: no system call here). */
void tpx__engine_drive_begin(tpx_engine_t *e);
void tpx__engine_drive_end(tpx_engine_t *e, int more);
/* A tpx_xfer_poll of a running transfer: when the engine lock is free and
 * few data requests are in flight (a request/response exchange, not a
 * stream), run one pass on the caller's thread and hold the loop for
 * TPX_POLL_LEASE_NS: a caller that polls in a loop drives, the progress
 * thread stands aside until the polls stop. 1 when it found a stream in
 * flight (its cores belong to the transport's threads), else 0. No lock
 * held; never blocks. */
int tpx__engine_poll_drive(tpx_engine_t *e);
/* ---- ident.c: the engine's id, and its key pair where libsodium allows (logs the
 * mode). topo.c: the plugin devices of the engine's GPU, and its NUMA-local CPU. ---- */
/* The engine's identity (e->ident, ident.c's alone), named `name`: made
 * at create before any other thread starts, immutable after (read without
 * the lock); fini wipes the secrets and frees it. */
tpx_status_t tpx__ident_engine_init(tpx_engine_t *e, const char *name);
void tpx__ident_engine_fini(tpx_engine_t *e);
/* 1: KEY mode, the engine has a key pair (tpx__ident_engine_keys). No lock. */
int tpx__ident_keyed(const tpx_engine_t *e);
/* The engine's id (in its metadata, descriptors, INFO). No lock. */
uint64_t tpx__ident_engine_id(const tpx_engine_t *e);
/* A ticket of this engine's instance for ticket id `id` (ident.h
 * INSTANCE: tpx__ident_ticket under the instance's secret). No lock. */
void tpx__ident_engine_ticket(const tpx_engine_t *e, const unsigned char id[16],
                              unsigned char ticket[32]);
/* Tests only (tests/engine/test_sec*.c): the engine poses as another: its
 * id (0: kept), its keys (0: it has none; -1: kept), its name (NULL:
 * kept). Before it connects, or under e->lock. */
void tpx__ident_pose(tpx_engine_t *e, uint64_t id, int keys, const char *name);
/* The engine's name (shown to peers, the key it is published under).
 * Immutable after create: no lock. */
const char *tpx__ident_name(const tpx_engine_t *e);
/* KEY mode: 1, and the engine's key pair in *pk, *sk (TPX_IDENT_PK,
 * TPX_IDENT_SK bytes, the engine's: valid while it lives); DIAL mode: 0,
 * nothing written. Immutable after create: no lock. */
int tpx__ident_engine_keys(const tpx_engine_t *e, const unsigned char **pk,
                           const unsigned char **sk);
tpx_status_t tpx__topo_devs(tpx_engine_t *e);
int tpx__topo_local_cpu(tpx_engine_t *e);
/* Bind the engine to GPU `gpu` for reason `from` (tpx_gpu_from_t) and
 * choose its NICs again; lock held, no peer set up yet (!gpu_fixed). On
 * failure nothing changes. */
tpx_status_t tpx__topo_gpu_bind(tpx_engine_t *e, int gpu, int from);
/* The engine keeps its GPU, bound now for reason `from` (tpx_gpu_from_t);
 * lock held, !gpu_fixed. */
void tpx__topo_gpu_because(tpx_engine_t *e, int from);
/* One info line: the engine's GPU and NICs, and why. */
void tpx__topo_log(tpx_engine_t *e);

/* e->lock for an API call on the hot path (post, poll, wait). The holder
 * is most often the progress thread in the middle of a pass, which lets
 * counted callers in at its next pause (engine.c; a mutex is not fair: it
 * would take the lock again at once). The caller spins for it up to 40 us
 * (by the clock: a pause lasts 10 to 140 cycles depending on the CPU)
 * instead of sleeping in the kernel: the futex wake-up cost ~12 us per
 * small READ on the H100 host. */
static inline void tpx__engine_lock(tpx_engine_t *e)
{
    if (pthread_mutex_trylock(&e->lock) == 0)
        return;
    atomic_fetch_add_explicit(&e->api_waiting, 1, memory_order_relaxed);
    int got = 0;
    uint64_t until = tpx__now_ns() + 40000;
    for (int i = 1; !got; i++) {
        TPX_CPU_RELAX();
        got = pthread_mutex_trylock(&e->lock) == 0;
        if (!got && i % 64 == 0 && tpx__now_ns() >= until)
            break;
    }
    if (!got)
        pthread_mutex_lock(&e->lock);
    atomic_fetch_sub_explicit(&e->api_waiting, 1, memory_order_relaxed);
}

#endif
