/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock.h - private interface of tpx's built-in TCP transport ("sock").
 *
 * The transport is an ncclNet plugin and nothing else: it knows nothing of
 * the tpx engine. It promises:
 *  - a comm is one control connection plus `nsocks` data connections; their
 *    socket I/O happens in a small process-wide pool of I/O workers
 *    (TPX_SOCK_WORKERS, see sock_io.h), each multiplexing the connections of
 *    many comms with edge-triggered epoll; a comm's data connections are
 *    dealt over the workers (NUMA-local to the NIC first), so the threads of
 *    a process do not grow with peers or comms, and the pool stops when the
 *    last comm closes;
 *  - each message is cut into pieces that free data connections take as
 *    they become free (guided self-scheduling: large pieces first, shrinking
 *    toward 64 KiB at the end of a message), so a slow connection never sets
 *    the pace;
 *  - isend/irecv/test never block; their only system calls are an eventfd
 *    write to wake a sleeping worker and, for a small message (at most
 *    TPX_SOCK_DIRECT_BYTES of host memory) posted while a data connection is
 *    idle, one non-blocking sendmsg that writes it from the caller's thread
 *    (its worker goes on from a partial write; not in strict TCPX mode);
 *    test() only reads counters;
 *  - every failure (peer close, reset, malformed data, a message larger than
 *    the receive) is sticky on the comm and reported by test(), never turned
 *    into "not done";
 *  - except, on a comm that fails over (several NICs, TPX_SOCK_FAILOVER,
 *    sock_failover.c), the failure of some of its data connections: their
 *    unacknowledged pieces go to the others, and a send completes only
 *    once the receiver acknowledged all of it; a new connection replaces
 *    a failed one once its NIC works again (sock_rejoin.c).
 *
 * Threading: the calls on one comm (isend/irecv/test/close) must come from
 * one thread at a time, as NCCL's proxy does; different comms are
 * independent.
 */
#ifndef TPX_SOCK_H
#define TPX_SOCK_H

#include <pthread.h>
#include <sys/uio.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"
#include "net/net_ext.h"
#include "sock_wire.h"
#include "tpx/ncclnet.h"

#define TPX_SOCK_MIN_PIECE (64u * 1024)
#define TPX_SOCK_BUSY_PIECE (512u * 1024) /* smallest piece while messages queue behind */
#define TPX_SOCK_MAX_REQS 256
#define TPX_SOCK_MAX_DEVS 64
#define TPX_SOCK_MAX_PENDING 256 /* half-open connections a listener holds */
/* Send buffer of a data connection between two ends of one host
 * (TPX_SOCK_BUF_BYTES=-1). Autotuned buffers grow to megabytes there and
 * the kernel's two copies then run from memory instead of cache: 16-core
 * H200 host, 16 loopback connections, 256 MiB: 27 GB/s at 0.60 s of CPU per
 * GB autotuned, 36 at 0.45 with 512 KiB (raw TCP 38 at 0.39); 1 MiB: 29.
 * Receive buffers of 512 KiB changed nothing. */
#define TPX_SOCK_LOCAL_SNDBUF (512 * 1024)

/* ---- logging: through NCCL's logger when one was given to init() ------- */
extern tpx_nccl_logger_t tpx__sock_logger;
#define SOCK_LOG(tpxlvl, ncclvl, ...)                                                              \
    do {                                                                                           \
        if (tpx__sock_logger != NULL)                                                              \
            tpx__sock_logger((ncclvl), TPX_NCCL_LOG_NET, __FILE__, __LINE__, __VA_ARGS__);         \
        else                                                                                       \
            TPX_LOG((tpxlvl), __VA_ARGS__);                                                        \
    } while (0)
#define SOCK_WARN(...) SOCK_LOG(TPX_LOG_WARN, TPX_NCCL_LOG_WARN, "NET/tpx: " __VA_ARGS__)
#define SOCK_INFO(...) SOCK_LOG(TPX_LOG_INFO, TPX_NCCL_LOG_INFO, "NET/tpx: " __VA_ARGS__)
#define SOCK_DEBUG(...) SOCK_LOG(TPX_LOG_DEBUG, TPX_NCCL_LOG_TRACE, "NET/tpx: " __VA_ARGS__)

/* ---- devices (sock_dev.c) ---------------------------------------------- */
/*
 * Devices 0..nphys-1 are the interfaces found at init. makeVDevice appends
 * virtual devices after them: a virtual device fuses 1..4 physical ones
 * (NCCL's "vNIC"), and a comm on it spreads its data connections over the
 * members (data connection i on member i % n, see sock_conn.c), so the
 * piece scheduler balances links of unequal speed by itself. Entries never
 * change once published; the table only grows.
 */
#define TPX_SOCK_MAX_MEMBERS TPX_NCCL_NET_MAX_DEVS_PER_NIC
_Static_assert(TPX_SOCK_MAX_MEMBERS == TPX_SOCK_HANDLE_MAX_ADDRS,
               "a handle must name every member of a virtual device");

typedef struct {
    char name[64];        /* interface name; "eth1+eth2" for a virtual device */
    tpx_sock_addr_t addr; /* the address we listen on / connect from (first member's) */
    char *pci_path;       /* realpath of /sys/class/net/IF/device, or NULL (first member's) */
    int speed_mbps;       /* a virtual device: the sum of its members' */
    int numa_node; /* -1 if unknown */
    int nmembers;  /* 1 for a physical device */
    int members[TPX_SOCK_MAX_MEMBERS]; /* physical device indices; [0] = itself if physical */
    int down_at_init; /* physical: not IFF_UP when found (sock_dev.c); for the log only */
} tpx_sock_dev_t;

/* Settings read once at init. */
typedef struct {
    int nsocks, workers, max_reqs;
    uint64_t piece_bytes;
    uint32_t cuda_block; /* CUDA staging: bytes per block (TPX_SOCK_CUDA_BLOCK) */
    uint64_t cuda_ring;  /* CUDA staging: pinned bytes per connection (TPX_SOCK_CUDA_RING) */
    uint64_t cuda_pinned; /* CUDA staging: pinned bytes of all rings, before they shrink
                             (TPX_SOCK_CUDA_PINNED) */
    uint64_t cuda_piece; /* CUDA: smallest piece while messages queue (TPX_SOCK_CUDA_PIECE) */
    int cuda_word;       /* CUDA staging: completion word, not events (TPX_SOCK_CUDA_WORD) */
    uint32_t eager_bytes; /* TPX_SOCK_EAGER_BYTES (0 in strict TCPX mode) */
    uint64_t poll_ns;     /* TPX_SOCK_POLL_US: a worker polls this long after activity */
    uint64_t cuda_spin_ns; /* TPX_SOCK_CUDA_SPIN_US: polls CUDA waits this long, then naps */
    int cuda_spin_auto;    /* ...-1: not while the comms of all of them stream */
    uint64_t direct_bytes; /* TPX_SOCK_DIRECT_BYTES: isend/irecv/test move this much themselves */
    uint64_t fault_dry_ns; /* TPX_FAULT_DIRECT_DRY_US (testing only) */
    int fault_connect_down; /* TPX_FAULT_SOCK_CONNECT_DOWN (testing only) */
    int sock_buf;
    int connect_timeout_ms;
    int tcpx; /* strict GPUDirect-TCPX emulation (TPX_SOCK_TCPX) */
    int tcpx_rxmem_skip; /* ... in the plugin's rxmem skip state: no bounce buffer
                            (TPX_SOCK_TCPX_RXMEM_SKIP) */
    int tcpx_sigpipe;    /* ... writing its control connection without MSG_NOSIGNAL
                            (TPX_SOCK_TCPX_SIGPIPE) */
    uint64_t tcpx_chunk; /* ... its NCCL_DYNAMIC_CHUNK_SIZE, as a peer's close shows
                            (TPX_SOCK_TCPX_CHUNK) */
    int failover; /* TPX_SOCK_FAILOVER: -1 comms over several NICs, 1 every comm of more
                     than one data connection, 0 none (sock_failover.c) */
    int stall_ms; /* TPX_SOCK_STALL_MS: those comms' black-hole detector (sock_stall.c) */
} tpx_sock_params_t;

/* Strict TCPX mode: limits of Google's plugin. */
#define SOCK_TCPX_MAX_REQS TPX_NCCL_UNPACK_QUEUE_DEPTH /* 16 */
#define SOCK_TCPX_MAX_RECV TPX_NCCL_UNPACK_MAX_SLICE_SIZE /* 4 MiB per irecv */
#define SOCK_TCPX_NULL_POLLS 3 /* connect/accept return NULL comms this often first */
/* Bounce pages per receive slot: a 4 MiB receive takes 1024 pages, the
 * rest allow fragments split at random lengths (each takes a page). */
#define SOCK_TCPX_SLOT_PAGES 1280
#define SOCK_TCPX_SLOT_BYTES ((size_t)SOCK_TCPX_SLOT_PAGES * TPX_NCCL_UNPACK_PAGE_SIZE)

extern tpx_sock_params_t tpx__sock_params;

tpx_status_t tpx__sock_dev_discover(tpx_sock_dev_t *devs, int max, int *ndev);
/* Discover once into the process-wide device table (from init). */
tpx_status_t tpx__sock_dev_init(void);
/* Devices, physical and virtual (what devices() reports). */
int tpx__sock_ndev(void);
int tpx__sock_nphys(void);
/* A device, physical or virtual; NULL if out of range. */
const tpx_sock_dev_t *tpx__sock_dev(int dev);
/* The physical device whose address a connected socket's local end has
 * (the NIC it leaves by); -1 if none matches (an address of no device
 * found at init, a failed getsockname). */
int tpx__sock_dev_of_fd(int fd);
/* makeVDevice: a virtual device of props->devs (distinct physical devices
 * of one address family, 1..4 of them). The same member list asked again
 * gives the same device. Not in strict TCPX mode (TCPX is v7: no vNICs). */
tpx_status_t tpx__sock_dev_make_virtual(const tpx_ncclnet_vdev_props_t *props, int *dev);

/* NCCL-style interface list match (sock_ifname.c): "eth,ib", "^docker",
 * "=eth0", "^=lo". Returns 1 if `ifname` is selected by `list`. */
int tpx__sock_ifname_match(const char *list, const char *ifname);

/* ---- requests and comms ------------------------------------------------ */
typedef enum {
    SOCK_REQ_FREE = 0,
    SOCK_REQ_POSTED = 1,
    SOCK_REQ_UNCONSUMED = 2, /* strict TCPX: test said done, irecvConsumed not yet */
} tpx_sock_req_state_t;
#define SOCK_TOTAL_UNKNOWN UINT64_MAX
/* Stretches of a receive's message announced out of order that it tracks
 * (beyond the announced start): a connection whose piece would need one
 * more waits until the stretches below it are announced (sock_claim.c). */
#define SOCK_CLAIM_RUNS 16
_Static_assert(TPX_SOCK_MAX_SOCKS <= 31, "a receive's `waiting` has a bit per data connection");

struct tpx_sock_comm;
typedef struct tpx_sock_cuda_chan tpx_sock_cuda_chan_t; /* sock_cuda.c */

/* One posted isend/irecv. Lives in the comm's ring; slot = seq % max_reqs. */
typedef struct {
    struct tpx_sock_comm *comm;
    _Atomic uint64_t seq; /* message number */
    char *buf;
    /* A vectored request (the extension table's isendv/irecvv, net_ext.h;
     * host memory only): the message is these pieces of memory back to back
     * (the caller's array, read until the request is done); NULL: `buf`. */
    const struct iovec *iov;
    int iovcnt;
    uint64_t size;        /* posted size (send: message size; recv: capacity) */
    int tag;
    int state;            /* tpx_sock_req_state_t, API thread only */
    int cuda_dev;         /* device of a CUDA buffer (moved through staging); -1: host */
    int bounce;           /* strict TCPX recv: delivered into the bounce buffer */
    /* Progress, written by helper threads. A message is complete when
     * `done` == max(total, 1): zero-byte messages count one unit. */
    _Atomic uint64_t done;
    _Atomic uint64_t total;   /* recv: sender's size once the first piece arrived */
    _Atomic uint64_t claimed; /* recv: bytes announced by piece headers (1 for the
                                 zero-byte piece of a zero-byte message), as `done` */
    /* recv: the stretches of the message that piece headers announced, so
     * that no byte is announced twice (sock_claim.c, "Claims"): [0, front)
     * and runs[0..nruns), disjoint, in order, beyond it and not touching
     * it or each other. Under claim_lock (a spin lock: held for a few
     * compares). `waiting`: bit i set while data connection i waits
     * because runs[] was full when it tried, cleared by the next claim
     * that succeeds (any claim may make room; the waiters try again):
     * every connection's bit set at once proves the sender broke the
     * order of its pieces (sock_claim.c, "Claims"). */
    _Atomic int claim_lock;
    int nruns;
    uint32_t waiting;
    uint64_t front;
    struct {
        uint64_t start, end;
    } runs[SOCK_CLAIM_RUNS];
} tpx_sock_req_t;

/* Where the last stretch of a vectored message started: r->iov[i] begins at
 * the message's byte `base`. A connection's next stretch of the same message
 * starts at or after it, so the walk resumes there instead of at the first
 * piece (1024 pieces of 1 KiB a message, 64 a call: the walk from the start
 * cost each call ~500 steps). Valid only for the message it names (the
 * request, its message number and piece array). */
typedef struct {
    const tpx_sock_req_t *r;
    uint64_t seq;
    const struct iovec *iov;
    int i;
    uint64_t base;
} tpx_sock_iov_at_t;

struct tpx_sock_worker; /* sock_io.h: one thread of the process-wide I/O pool */

/* Per data connection progress. Everything but the atomics and the fields
 * marked otherwise belongs to whoever holds `owner`: the worker the
 * connection is assigned to, for a turn, or an API thread (isend's direct
 * write on a send connection, a direct read on a receive connection). */
typedef struct tpx_sock_chan {
    int fd;
    int active;            /* a piece is in progress */
    _Atomic int parked;    /* recv: header read, message not posted yet (posters read it) */
    _Atomic int idle;      /* send: found no piece to take (posters read it) */
    int want_write;        /* send: the last write would block */
    int eof;               /* recv: the sender closed this connection between pieces; send,
                              failing over: the receiver closed it (read and written by
                              the connection's owner only: see `owner`) */
    int hup;               /* recv: epoll saw the sender's close (EPOLLRDHUP/HUP/ERR): what
                              the socket holds is all that will come (owner only) */
    /* recv, what the sender's close left on this connection (its owner
     * writes it, any thread that decides whether the comm's posted
     * receives can still complete reads it, sock_closed.c "Closed
     * connections"): SOCK_CHAN_OPEN; SOCK_CHAN_ENDED (at its end, or stuck
     * behind a piece no byte can be added to); SOCK_CHAN_WAITS (its piece
     * waits for room to claim its bytes, see `wait_slot`); or the number
     * of the message whose header it holds, parked or eagerly, behind the
     * close. */
    _Atomic uint64_t gone;
    tpx_sock_piece_t piece;
    unsigned char hdr[TPX_SOCK_PIECE_WIRE_SIZE];
    tpx_sock_iov_at_t iov_at; /* the walk of a vectored message's pieces (sock_iov.c) */
    uint32_t hdr_done;     /* header bytes moved */
    uint32_t data_done;    /* payload bytes moved */
    tpx_sock_req_t *req;
    uint64_t bytes;        /* payload bytes moved in total (stats) */
    /* send, links > 1 (sock_rate.c): TCP's delivery rate in bytes/s, an
     * EWMA (0: unknown; the owner writes it, the comm's scheduler reads
     * every connection's), when it was last sampled, and the
     * TCP_NOTSENT_LOWAT set from it (the owner's) */
    _Atomic uint64_t rate;
    uint64_t rate_ns;
    int lowat;
    uint64_t api_bytes;    /* recv: of them, moved by direct reads (stats, tests) */
    uint32_t copy_done;    /* CUDA send: payload bytes copied to staging */
    /* CUDA send: the next piece, taken while `piece` is written so that
     * its copies to staging run meanwhile (sock_cuda.c); valid while
     * ahead_req != NULL. Its blocks follow the current piece's in the
     * staging ring: blk0 / ahead_blk0 number each piece's first block
     * (sock_cuda.c sets them when it copies their first bytes). */
    tpx_sock_piece_t ahead;
    tpx_sock_req_t *ahead_req;
    uint32_t ahead_copy_done;
    uint64_t blk0, ahead_blk0;
    tpx_sock_cuda_chan_t *cu; /* CUDA staging of this connection, made on first use */
    /* The worker's bookkeeping (sock_worker.c). */
    struct tpx_sock_comm *comm;
    struct tpx_sock_worker *worker; /* set once at start, before the worker sees it */
    struct tpx_sock_chan *kick_next; /* the worker's kick stack (lock-free, MPSC) */
    _Atomic int kicked;    /* on the kick stack */
    /* Who moves the connection's state: 0 nobody, SOCK_OWNER_WORKER (a turn
     * of its worker) or SOCK_OWNER_API (isend's direct write, a direct
     * read); taken by CAS, which orders one owner's writes before the
     * next owner's reads. */
    _Atomic int owner;
    _Atomic int missed;    /* the worker found it owned by the API: kick it after */
    struct tpx_sock_chan *run_next;  /* the worker's run queue */
    int queued;            /* on the run queue */
    int registered;        /* in the worker's epoll set */
    uint32_t events;       /* epoll events not handled yet */
    /* recv, eager (sock_eager.c): the payload of a small
     * message that came before its receive, read into `eager` (the
     * worker's, grown on demand up to TPX_SOCK_EAGER_BYTES). While
     * eager_state is SOCK_EAGER_READY the worker leaves ch->piece and the
     * buffer alone; whoever moves it READY -> TAKING (irecv) or READY ->
     * NONE (the worker) delivers the message. */
    unsigned char *eager;
    uint32_t eager_cap;
    int claim_wait;        /* recv: its piece waits for room in its receive's runs[] */
    _Atomic int claim_waiting; /* ...the same, for a claimer that made room (kicks it) */
    /* recv: the slot of the receive its waiting piece belongs to, stored
     * before `gone` becomes SOCK_CHAN_WAITS (read by whoever then decides
     * whether the comm's posted receives can still complete) */
    _Atomic uint32_t wait_slot;
    int eager_fill;        /* worker: reading a payload into `eager` */
    int eager_held;        /* worker: parked with a payload in `eager` */
    _Atomic int eager_state;
    _Atomic uint64_t eager_seq; /* the held message's number (stored before READY) */
    /* Failover (a comm with `failover` set, sock_failover.c). Both sides:
     * fo_dead is set once, by the owner, when the connection failed; no
     * byte moves on it after that (the comm goes on over the others). */
    _Atomic int fo_dead;
    /* send (owner): the pieces taken on this connection whose receipt the
     * receiver has not acknowledged, log[tail % SOCK_FO_LOG .. head), and
     * the acknowledgement being read (8 bytes, ack_len of them so far). */
    struct tpx_sock_fo_ent *fo_log;
    uint64_t fo_head, fo_tail;
    unsigned char ack_buf[8];
    uint32_t ack_len;
    /* recv (owner): pieces read off the socket into memory they are
     * delivered from without this connection (fo_safe), the count last
     * acknowledged (fo_acked), and the 8 bytes of an acknowledgement still
     * being written (from ack_off; 8: none). fo_drop: the current piece's
     * payload is read and dropped (a copy the receive has already). */
    uint64_t fo_safe, fo_acked;
    uint32_t ack_off;
    int fo_drop;
    /* recv, under the comm's fo_lock (sock_comm.c, "failover"): the piece
     * being read, which this connection counts if it reads all of it
     * before another copy of it does (fo_live); fo_busy while a recvmsg
     * writes it into the receive's memory (read by whoever counts
     * another copy, which waits for the write to end). */
    int fo_live;
    uint64_t fo_seq, fo_off;
    uint32_t fo_len;
    _Atomic int fo_busy;
    /* Stalls (sock_worker.c, a comm that fails over, TPX_SOCK_STALL_MS >
     * 0): the worker's list of such connections (its own), and, the
     * owner's: the progress seen at the last look (bytes moved plus
     * pieces acknowledged), and the time without an answer from the
     * peer's TCP (ms) when the detector (sock_stall.c) ended it: not 0,
     * the failure is that (the reset it caused is not reported). */
    struct tpx_sock_chan *stall_next;
    uint64_t stall_seen;
    uint32_t stall_dead_ms;
    /* Links (sock_worker.c, "Links"): the physical device this connection
     * leaves by (-1: unknown; set at start and at a rejoin), the progress
     * seen at the last look at its link, and why a look ended it
     * (SOCK_LINK_*: its NIC here lost its link, or the receiver said its
     * NIC did). fo_told (send): the receiver's word that this connection's
     * NIC at its end lost its link, read on another connection (that
     * connection's owner sets it, this one's takes it in its turn). */
    int nic;
    uint64_t link_seen;
    int link_lost;
    int link_ok; /* a look saw its NIC with its link since it connected (the flag lags) */
    _Atomic int fo_told;
    /* send: when the receiver last acknowledged pieces of it (monotonic
     * ns, 0: never; the owner writes it, the looks at the comm's other
     * connections read it: sock_stall.c, "A sibling's word"); stall_sib:
     * the detector ended it on that word. */
    _Atomic uint64_t stall_ack_ns;
    int stall_sib;
    /* Rejoin (a comm with `rejoin` set, sock_rejoin.c). rj_phase: where
     * its replacement stands (SOCK_RJ_PHASE_*; the owner and the rejoin
     * thread hand it to each other). rj_fd: a new connected socket handed
     * to the owner, who takes it in place of `fd` (-1: none). rj_joining
     * (send, owner): taken, the receiver's welcome not read yet. The
     * rejoin thread's own, under its lock: the attempt's socket, stage,
     * count and when the next is due; rj_since_ns (owner): when it
     * failed. */
    _Atomic int rj_phase;
    _Atomic int rj_fd;
    int rj_joining;
    int rj_afd, rj_astage;
    uint32_t rj_attempt;
    uint64_t rj_next_ns, rj_since_ns;
} tpx_sock_chan_t;
#define SOCK_RJ_PHASE_LIVE 0   /* carrying pieces (or not failed) */
#define SOCK_RJ_PHASE_DEAD 1   /* failed: the rejoin thread tries to replace it */
#define SOCK_RJ_PHASE_HANDED 2 /* send: a new socket is the owner's (rj_fd, then joining) */
#define SOCK_CHAN_OPEN UINT64_MAX
#define SOCK_CHAN_ENDED (UINT64_MAX - 1)
#define SOCK_CHAN_WAITS (UINT64_MAX - 2)
#define SOCK_EAGER_NONE 0
#define SOCK_EAGER_READY 1
#define SOCK_EAGER_TAKING 2 /* irecv is copying it out */

typedef enum { SOCK_COMM_SEND = 1, SOCK_COMM_RECV = 2 } tpx_sock_comm_kind_t;

typedef struct tpx_sock_comm {
    uint32_t magic; /* SOCK_COMM_MAGIC_SEND / _RECV while alive */
    tpx_sock_comm_kind_t kind;
    int dev;
    int ctrl_fd;
    int nsocks, max_reqs;
    int links; /* the links its data connections spread over (a virtual device's members) */
    uint64_t conn_id;
    tpx_sock_chan_t chans[TPX_SOCK_MAX_SOCKS];

    tpx_sock_req_t *reqs;         /* ring of max_reqs */
    _Atomic uint64_t posted;      /* messages posted (API thread writes) */
    _Atomic uint64_t finished;    /* messages whose bytes have all moved */
    /* The engine to wake when a message finishes (tpx__sock_comm_set_wake). */
    tpx_net_wake_t *_Atomic wake;
    /* Messages the helpers may move: `posted`, except in strict TCPX mode,
     * where only test() makes progress: there it is what `posted` was at
     * the last test() call. */
    _Atomic uint64_t movable;

    /* send: isend's direct writes (API thread): the connection of the last
     * one and when it was taken */
    int direct_chan;
    uint64_t direct_ns;
    /* send: the piece scheduler, shared by the helper threads */
    pthread_mutex_t sched_lock;
    uint64_t sched_seq, sched_off;

    _Atomic int error;    /* sticky tpx_status_t; 0 while healthy */
    _Atomic int closing;  /* set by close: workers stop moving its data */
    _Atomic int eof_chans; /* recv: data connections the sender closed (send, failing
                              over: those the receiver closed, sock_failover.c) */
    _Atomic int gone_chans; /* recv: data connections whose `gone` is not SOCK_CHAN_OPEN */
    _Atomic int peer_gone; /* send: the receiver closed; connections are stopping */
    int pooled;           /* counted by the I/O pool (sock_worker.c) */
    uint64_t pool_forks;  /* the pool's fork count when it started */
    _Atomic int running;  /* data connections of this comm a worker is moving right now */

    /* strict TCPX mode */
    int tcpx;
    _Atomic int hung;          /* a data connection failed: TCPX's test() never ends */
    uint64_t test_head;        /* next request test() may be called on */
    uint64_t consume_head;     /* next receive irecvConsumed() may release */
    uint32_t nfrags[SOCK_TCPX_MAX_REQS]; /* recv: fragments laid out per slot */
    /* Placement, as in Google's plugin (see sock_tcpx.c): the fragment
     * queue is host memory (CUDA host-mapped with a GPU); the handle and
     * the bounce buffer are device memory: cuMemAlloc memory with a GPU,
     * else emulated device memory the CPU cannot read (a PROT_NONE view
     * of a memfd; the helpers write through a second, writable view). */
    tpx_nccl_unpack_meta_t *meta;        /* recv: the published fragment queue (CPU address) */
    void *meta_dev;                      /* its device address (what the handle holds) */
    void *devh;                          /* the 24-byte unpack handle (device address) */
    unsigned char *bounce;               /* 16 slots of SOCK_TCPX_SLOT_BYTES (device address) */
    unsigned char *bounce_io;            /* emulated: where helpers write the bounce buffer */
    int gpu;                             /* CUDA device of handle + bounce; -1: emulated */
    void *gpu_devh, *gpu_bounce;         /* their allocations (sock_cuda.c) */
    unsigned char *emu_dev, *emu_rw;     /* emulated device memory: the two views */
    size_t emu_len;
    int meta_mapped;                     /* meta is CUDA host-mapped memory (on `gpu`) */
    uint64_t rng;

    /* Failover (sock_failover.c): set at connect/accept for a comm whose
     * data connections span several NICs (TPX_SOCK_FAILOVER); never in
     * strict TCPX mode. send: the pieces of failed connections to send
     * again, taken before new ones (under sched_lock), a ring of
     * nsocks * SOCK_FO_LOG entries; the connections that failed and the
     * pieces sent again (stats). recv: fo_lock orders the connections'
     * fo_live claims (a spin lock, held for a scan of nsocks entries). */
    int failover;
    /* Tells (sock_failover.c, "Tells"; a comm that fails over whose hellos
     * carried TPX_SOCK_HELLO_TELL): the receiver tells the sender, on
     * another connection, which data connections lost their NIC at its
     * end. recv: fo_tell, those to tell (bit i: connection i), taken by
     * the first live connection's acknowledgement flush. */
    int tell;
    _Atomic uint32_t fo_tell;
    /* Rejoin (sock_rejoin.c): set at connect/accept for a comm that fails
     * over, whose hellos carried TPX_SOCK_HELLO_REJOIN. send: where data
     * connection i went (bound to rj_local[i] if rj_bind, connected to
     * rj_remote[i]) and the handle's nonce; recv: the rejoin acceptor of
     * its listener. rj_next: the rejoin thread's list (its lock). */
    int rejoin;
    int rj_bind;
    uint64_t rj_nonce;
    tpx_sock_addr_t rj_local[TPX_SOCK_MAX_SOCKS], rj_remote[TPX_SOCK_MAX_SOCKS];
    struct tpx_sock_rj_acc *rj_acc;
    struct tpx_sock_comm *rj_next;
    uint64_t rj_gen; /* the rejoin lists' fork() generation when it joined them */
    _Atomic uint64_t fo_rejoined; /* data connections replaced (stats) */
    struct tpx_sock_fo_ent *fo_resend;
    uint64_t fo_rs_head, fo_rs_tail;
    _Atomic int fo_dead_chans;
    _Atomic uint64_t fo_resent;
    _Atomic int fo_lock;
} tpx_sock_comm_t;

/* Failover: a piece a sender may have to send again, and its message. */
typedef struct tpx_sock_fo_ent {
    tpx_sock_piece_t piece;
    tpx_sock_req_t *req;
} tpx_sock_fo_ent_t;
/* Pieces a connection of a failover comm may have unacknowledged: one
 * more waits for an acknowledgement (the kernel's buffers hold a few MiB,
 * pieces are at least 64 KiB but for the last of a message). */
#define SOCK_FO_LOG 256

#define SOCK_COMM_MAGIC_SEND 0x53454e44u /* "SEND" */
#define SOCK_COMM_MAGIC_RECV 0x52454356u /* "RECV" */

/* Memory registration handle. */
typedef struct {
    uint32_t magic;
    int type;
    int dev;         /* CUDA: the buffer's device */
    uintptr_t base;
    size_t size;
} tpx_sock_mr_t;
#define SOCK_MR_MAGIC 0x4d52544bu

/* ---- sock_conn.c: listen / connect / accept ----------------------------- */
tpx_status_t tpx__sock_listen(int dev, void *handle, void **listen_comm);
/* nsocks: data connections of the new comm (0: TPX_NSOCKS); a later call
 * for the same handle continues with what the first chose. */
tpx_status_t tpx__sock_connect(int dev, void *handle, void **send_comm, int nsocks);
tpx_status_t tpx__sock_accept(void *listen_comm, void **recv_comm);
tpx_status_t tpx__sock_close_listen(void *listen_comm);

/* ---- the I/O workers (sock_io.h lists their files) ---------------------- */
/* Allocate the ring and hand the data connections of a fully connected
 * comm to the process-wide I/O workers (started on first use). */
tpx_status_t tpx__sock_comm_start(tpx_sock_comm_t *c);
/* Take the comm's connections back from the workers (waits until none of
 * them touches the comm any more), close sockets, free. Safe on a partly
 * built comm. */
void tpx__sock_comm_destroy(tpx_sock_comm_t *c);
/* After a post (or strict TCPX test()) made more messages movable: hand the
 * connections that wait for one (send: idle; recv: parked) to their
 * workers. API thread of the comm only. */
void tpx__sock_comm_kick(tpx_sock_comm_t *c);
/* The engine's wake-up on this comm's completions (the extension table's
 * comm_set_wake, net_ext.h); `comm` not a live send/receive comm: nothing. */
void tpx__sock_comm_set_wake(void *comm, tpx_net_wake_t *wake);
/* isend of message `seq` (just made movable): if it is small, host memory
 * and a data connection is idle, write it from the calling thread (one
 * non-blocking sendmsg; the rest, if any, is left to the connection's
 * worker). Returns 1 if the message was taken (no kick needed), 0 if the
 * workers must move it. Not in strict TCPX mode. */
int tpx__sock_send_direct(tpx_sock_comm_t *c, tpx_sock_req_t *r, uint64_t seq);
#define SOCK_DIRECT_BURST_NS 20000   /* direct writes closer than this spread over connections */
/* irecv of message `seq` (just made movable): if a connection holds it
 * eagerly and the receive is host memory, copy it out here. Returns 1 if
 * it was delivered. Plain mode only. */
int tpx__sock_recv_eager(tpx_sock_comm_t *c, tpx_sock_req_t *r, uint64_t seq);
/* irecv or test() of receive `r` (host memory, at most
 * TPX_SOCK_DIRECT_BYTES, plain mode, the only receive of the comm in
 * flight -- a stream is left to the workers): read what the comm's connections
 * hold from the calling thread, on each connection no worker is moving
 * now (the owner token, as isend's direct write). The thread that waits
 * for a message moves it: no worker wake-up on its path (on a 2-core host
 * one-sided READ's three spinning threads left the workers' wake-ups
 * queued behind them). Never blocks; returns 1 if bytes moved. */
int tpx__sock_recv_direct(tpx_sock_comm_t *c, tpx_sock_req_t *r);
#define SOCK_OWNER_WORKER 1
/* tpx_sock_chan_t.link_lost: why a look at links ended a connection */
#define SOCK_LINK_HERE 1 /* its NIC on this host lost its link */
#define SOCK_LINK_TOLD 2 /* the receiver said its NIC there did */
#define SOCK_OWNER_API 2
/* irecv, plain mode: after a receive was posted, fail the comm if the
 * sender closed every data connection and none holds the posted ones' data
 * (a cheap test first: only once every connection was seen closed). */
void tpx__sock_recv_posted(tpx_sock_comm_t *c);
/* Forget the stretches a receive's slot claimed (irecv, before posting). */
void tpx__sock_req_claim_reset(tpx_sock_req_t *r);
/* Publish `units` more bytes of message `r` (1 for a zero-byte message)
 * whose size is `total`; the last unit completes it. */
void tpx__sock_piece_done(tpx_sock_comm_t *c, tpx_sock_req_t *r, uint64_t units, uint64_t total);
/* Failover (sock_failover.c), receive side: connection ch has read its
 * piece; whether its bytes count (1 unless another copy of the piece was
 * read first; always 1 on a comm that does not fail over). The copies of
 * it still being read are disarmed, and none of them writes any more when
 * this returns. */
int tpx__sock_fo_settle(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);
/* Record the first error of a comm (sticky) and wake its engine. */
void tpx__sock_comm_fail(tpx_sock_comm_t *c, tpx_status_t st, const char *why);
tpx_sock_comm_t *tpx__sock_comm_alloc(tpx_sock_comm_kind_t kind, int dev, int nsocks);
/* Threads of the I/O pool (0 before the first comm). */
int tpx__sock_pool_size(void);
/* The index of the I/O worker that serves data connection i of a started
 * comm (-1: none): for tests and diagnostics. */
int tpx__sock_chan_worker(const tpx_sock_comm_t *c, int i);

/* sock_opts.c: the same host (address, not port)? */
int tpx__sock_same_host(const tpx_sock_addr_t *a, const tpx_sock_addr_t *b);
/* Socket options common to every data/control connection. */
void tpx__sock_setopts(int fd, int data);
/* A data socket once connected: with TPX_SOCK_BUF_BYTES=-1 (auto), a send
 * buffer of TPX_SOCK_LOCAL_SNDBUF when both ends are on this host. */
void tpx__sock_setopts_connected(int fd);

/* sock_rate.c, data connections of a send comm whose links differ: fold
 * TCP's latest delivery-rate sample into ch->rate (at most once per
 * TPX_SOCK_RATE_EVERY_NS) and keep the unsent bytes the kernel may hold
 * (TCP_NOTSENT_LOWAT) near TPX_SOCK_VDEV_QUEUE_NS of that rate, within
 * [TPX_SOCK_VDEV_LOWAT_MIN, TPX_SOCK_VDEV_LOWAT_MAX]. By the connection's
 * owner. */
#define TPX_SOCK_RATE_EVERY_NS 1000000ull
#define TPX_SOCK_VDEV_QUEUE_NS 2000000ull
#define TPX_SOCK_VDEV_LOWAT_MIN (16 * 1024)
#define TPX_SOCK_VDEV_LOWAT_MAX (256 * 1024) /* what the connection starts with */
void tpx__sock_rate_update(tpx_sock_chan_t *ch, uint64_t now_ns);
/* The rate estimate (bytes/s, 0: none yet) after TCP's delivery-rate
 * sample r (0: none), which the kernel flagged app_limited or not. */
uint64_t tpx__sock_rate_next(uint64_t prev, uint64_t r, int app_limited);

/* sock_stall.c, data connections of a comm that fails over: what tcp_info
 * said of a connection's peer, and whether that is a black hole (1) or
 * not (0): nothing heard from the peer's TCP for `stall_ms` while it owes
 * an acknowledgement of data in flight in an open window, or the answers
 * to two window probes in a row. A zero window whose probes are answered
 * (a receiver that does not read) is never one. */
typedef struct {
    uint32_t state;            /* tcpi_state */
    uint32_t probes;           /* tcpi_probes: window probes unanswered in a row */
    uint32_t unacked;          /* tcpi_unacked: segments in flight */
    uint32_t snd_wnd;          /* tcpi_snd_wnd: the peer's last advertised window */
    uint32_t last_ack_recv_ms; /* tcpi_last_ack_recv: since the peer's TCP last answered */
    uint32_t retransmits;      /* tcpi_retransmits: timeouts since an acknowledgement */
    uint32_t rto_ms;           /* tcpi_rto: the retransmission timeout */
    uint32_t notsent;          /* tcpi_notsent_bytes: queued, never sent */
} tpx_sock_tcp_seen_t;
int tpx__sock_stall_rule(const tpx_sock_tcp_seen_t *s, uint32_t stall_ms);
/* The same verdict reached sooner on a sibling's word (sock_stall.c): a
 * send connection whose data in flight in an open window has gone
 * unacknowledged through a retransmission timeout (one counted, or twice
 * its length), or that holds bytes this host does not send (nothing in
 * flight, an open window), for stall_ms / 4,
 * while the receiver acknowledged pieces of another connection of the
 * comm after this one's peer last answered: sib_ms ago (UINT32_MAX: no
 * such connection). */
int tpx__sock_stall_rule_sib(const tpx_sock_tcp_seen_t *s, uint32_t stall_ms, uint32_t sib_ms);
/* The rules on the connection's tcp_info now (one getsockopt; *seen
 * filled when it could be read; sib_ms as above, UINT32_MAX: the sibling
 * rule is not asked): 0 no verdict, 1 a black hole, 2 one on a sibling's
 * word. By the connection's owner. */
int tpx__sock_stall_verdict(int fd, uint32_t stall_ms, uint32_t sib_ms,
                            tpx_sock_tcp_seen_t *seen);

/* sock_rejoin.c, comms that fail over: a failed data connection replaced
 * once its NIC works again. Attempt k of a connection waits
 * tpx__sock_rejoin_delay_ms(k) after the one before (SOCK_REJOIN_FIRST_MS
 * doubling to SOCK_REJOIN_MAX_MS). */
#define SOCK_REJOIN_FIRST_MS 10u
#define SOCK_REJOIN_MAX_MS 250u
uint32_t tpx__sock_rejoin_delay_ms(uint32_t attempt);
/* What a rejoin acceptor knows of a comm accepted from its listener. */
typedef struct {
    uint64_t conn_id; /* the comm's (its hellos') */
    uint16_t nsocks;  /* its data connections */
    uint16_t flags;   /* its first hellos' TPX_SOCK_HELLO_* */
    int failed;       /* its sticky error is set: it takes no rejoin */
    uint32_t taking;  /* bit i: a new connection i is being taken */
} tpx_sock_rejoin_key_t;
/* Why a rejoin hello is refused (SOCK_RJ_OK: taken). */
enum {
    SOCK_RJ_OK = 0,
    SOCK_RJ_MALFORMED,     /* not a rejoin hello, or not with ACKS and REJOIN */
    SOCK_RJ_NONCE,         /* not this listener's nonce */
    SOCK_RJ_NO_COMM,       /* no live comm of this listener has its conn_id */
    SOCK_RJ_NOT_REJOINING, /* the comm was made without TPX_SOCK_HELLO_REJOIN */
    SOCK_RJ_CONFLICT,      /* nsocks not the comm's, or index out of range */
    SOCK_RJ_FAILED,        /* the comm failed: final */
    SOCK_RJ_BUSY,          /* a new connection of that index is being taken */
};
/* The admission rule of a rejoin hello `h` at a listener of nonce `nonce`
 * whose live comms are comms[0..ncomms): SOCK_RJ_OK and the comm's index
 * in *which (set only then), or why not. */
int tpx__sock_rejoin_admit(const tpx_sock_hello_t *h, uint64_t nonce,
                           const tpx_sock_rejoin_key_t *comms, int ncomms, int *which);
struct tpx_sock_comm;
struct tpx_sock_chan;
/* A listener's rejoin acceptor: its listening sockets, kept past
 * closeListen while a comm accepted from it may rejoin. */
typedef struct tpx_sock_rj_acc tpx_sock_rj_acc_t;
/* The acceptor of a listener (nonce, its listening sockets, still the
 * listener's until tpx__sock_rejoin_acc_listen_closed) with its first
 * comm; NULL if out of memory (the comm then does not rejoin). */
tpx_sock_rj_acc_t *tpx__sock_rejoin_acc_new(uint64_t nonce, const int *fds, int nfds);
/* A comm accepted with TPX_SOCK_HELLO_REJOIN joins acceptor `a` (started
 * comm). */
void tpx__sock_rejoin_acc_add(tpx_sock_rj_acc_t *a, struct tpx_sock_comm *c);
/* closeListen: the sockets are the acceptor's now (closed with it). */
void tpx__sock_rejoin_acc_listen_closed(tpx_sock_rj_acc_t *a);
/* A rejoin hello read by the open listener: 0 (fd taken) or a SOCK_RJ_*
 * reason (the caller closes fd). */
int tpx__sock_rejoin_offer(tpx_sock_rj_acc_t *a, int fd, const tpx_sock_hello_t *h);
/* A started send comm that rejoins: its failed connections are replaced. */
void tpx__sock_rejoin_watch(struct tpx_sock_comm *c);
/* Comm destroy, first: nothing of the rejoin thread touches c after. */
void tpx__sock_rejoin_forget(struct tpx_sock_comm *c);
/* A connection of a comm that rejoins failed (its owner, phase set). */
void tpx__sock_rejoin_wake(void);
/* The owner's turn on a connection with rj_fd set or joining: 1 if it is
 * live again (go on with a normal turn), 0 if not (end the turn). */
int tpx__sock_rejoin_turn(struct tpx_sock_comm *c, struct tpx_sock_chan *ch);
/* Worker (sock_worker.c): ch (its owner, the worker's) takes socket fd
 * in place of its own, which is closed. TPX_OK, or an epoll error. */
tpx_status_t tpx__sock_chan_swap_fd(struct tpx_sock_chan *ch, int fd);
/* sock_failover.c: data connection i of comm c (not started yet) is one it
 * starts without (its NIC did not work at connect, sock_conn.c): counted
 * as failed, and ended on a receiver, from the start; a sender's rejoin
 * thread makes it once the NIC works. Its fd: a socket that never
 * connects, held until the rejoin's takes its place. */
void tpx__sock_fo_start_missing(struct tpx_sock_comm *c, int i);
/* sock_comm.c: ch (its owner, failed) reads no copy of a piece any more. */
void tpx__sock_fo_forget_live(struct tpx_sock_comm *c, struct tpx_sock_chan *ch);
/* sock_closed.c: a receiving connection that ended is open again (its
 * owner; undoes what its end counted). */
void tpx__sock_chan_reopen(struct tpx_sock_comm *c, struct tpx_sock_chan *ch);

/* The stretch [off, off + len) of r's message as iovecs in `out` (at most
 * max: a longer stretch is cut short, the caller moves the rest later);
 * returns the count. */
int tpx__sock_req_iov(const tpx_sock_req_t *r, uint64_t off, uint64_t len, struct iovec *out,
                      int max, tpx_sock_iov_at_t *at);
#define SOCK_IOV_BATCH 256 /* iovecs per sendmsg/recvmsg of a vectored request */

/* ---- sock_req.c: the request API ---------------------------------------- */
tpx_status_t tpx__sock_isend(void *comm, void *data, size_t size, int tag, void *mh,
                             void **request);
tpx_status_t tpx__sock_irecv(void *comm, int n, void **data, const size_t *sizes, const int *tags,
                             void **mh, void **request);
/* Vectored isend/irecv of host memory (sock_tables.h). */
tpx_status_t tpx__sock_postv(void *comm, tpx_sock_comm_kind_t kind, const struct iovec *iov,
                             int iovcnt, void **request);
tpx_status_t tpx__sock_test(void *request, int *done, size_t *size);
tpx_status_t tpx__sock_regmr(void *comm, void *data, size_t size, int type, void **mh);
tpx_status_t tpx__sock_deregmr(void *comm, void *mh);
tpx_status_t tpx__sock_close(void *comm, tpx_sock_comm_kind_t kind);
tpx_status_t tpx__sock_consumed(void *comm, int n, void *request);
/* Strict TCPX: where in the bounce buffer [msg_off, msg_off+len) of the
 * receive in `slot` lands, as iovecs (at most max); returns the count. */
tpx_status_t tpx__sock_tcpx_comm_init(tpx_sock_comm_t *c);
void tpx__sock_tcpx_comm_free(tpx_sock_comm_t *c);
void tpx__sock_tcpx_layout(tpx_sock_comm_t *c, uint32_t slot, uint64_t size);
/* Publish the fragments of a completed receive (0 for a receive that
 * did not go through the bounce buffer). */
void tpx__sock_tcpx_publish(tpx_sock_comm_t *c, uint32_t slot, uint64_t total, int bounce);
/* iovecs count from `base`: bounce_io for host writes, bounce for device
 * addresses (the HtoD copies into a GPU bounce buffer). */
int tpx__sock_tcpx_iov(tpx_sock_comm_t *c, uint32_t slot, uint64_t msg_off, uint64_t len,
                       unsigned char *base, struct iovec *iov, int max);

/* ---- sock_ring.c: a staging ring's bookkeeping ------------------------------ */
/* A connection's staging ring: `bytes` of pinned memory in segments of
 * `seg` (the largest block), blocks in order. Owned by the connection's
 * staging (sock_cuda.c); no memory of its own. */
#define TPX_SOCK_RING_BLKS 32 /* blocks holding space at once, at most (a power of two) */
#define TPX_SOCK_RING_MIN_SEG (64u * 1024) /* the smallest segment, and block */
typedef struct {
    uint32_t seg;   /* segment = largest block: TPX_SOCK_CUDA_BLOCK, 64 KiB..half the ring */
    uint32_t bytes; /* TPX_SOCK_CUDA_RING rounded down to whole segments, at least two */
    uint64_t put;   /* the position after the newest block */
    uint64_t next;  /* blocks given space, ever: the next block's number */
    uint64_t at[TPX_SOCK_RING_BLKS]; /* block b's first position, while it holds space */
} tpx_sock_ring_t;
void tpx__sock_ring_init(tpx_sock_ring_t *r, uint32_t ring, uint32_t block);
/* Where a block of n bytes (n <= seg) goes if the one before it ends at pos. */
uint64_t tpx__sock_ring_place(const tpx_sock_ring_t *r, uint64_t pos, uint32_t n);
/* Does block b (n bytes, the one before it ending at pos) fit beside blocks
 * [live, b), which hold space? 1: yes, its position in *at (and noted as
 * block b's, for fits measured from it before it is taken); 0: no. */
int tpx__sock_ring_fit(tpx_sock_ring_t *r, uint64_t live, uint64_t b, uint64_t pos, uint32_t n,
                       uint64_t *at);
/* Give block `next` (n bytes) its space; returns its position. */
uint64_t tpx__sock_ring_take(tpx_sock_ring_t *r, uint32_t n);
/* tpx__sock_ring_init, and book r->bytes in *booked (the process's rings):
 * a ring that would take *booked past `budget` is made two segments
 * instead, the least that pipelines. Unbook the same ring once freed. */
void tpx__sock_ring_init_booked(tpx_sock_ring_t *r, _Atomic uint64_t *booked, uint64_t budget,
                                uint32_t ring, uint32_t block);
void tpx__sock_ring_unbook(const tpx_sock_ring_t *r, _Atomic uint64_t *booked);

/* ---- sock_plugin.c ------------------------------------------------------ */
tpx_status_t tpx__sock_init(tpx_nccl_logger_t logger);
tpx_nccl_result_t tpx__sock_result(tpx_status_t st);

#endif
