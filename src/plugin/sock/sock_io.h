/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_io.h - the I/O workers that move every comm's bytes: how the files
 * of the I/O fit together, and what they share (private to them).
 *
 * Files, lower first (each calls only files above it in this list, never
 * one below; scripts/engine-calls checks that no two call each other):
 *   sock_comm.c          a comm's failure, completion and the engine's wake-up
 *   sock_kick.c          handing connections to their workers; turns
 *   sock_iov.c           a request's memory as pieces (host, vectored)
 *   sock_failover.c      a comm that outlives some of its connections
 *   sock_claim.c         which bytes of a receive are announced ("Claims")
 *   sock_eager.c         small messages read before their receive is posted
 *   sock_recv.c          a receiving connection's turn
 *   sock_closed.c        what a sender's close leaves ("Closed connections")
 *   sock_send.c          the sender's scheduler and a sending connection's turn
 *   sock_direct_read.c   a lone small receive read on the caller's thread
 *   sock_direct_write.c  isend's write from the caller's thread
 *   sock_worker.c        the worker threads: run queue, epoll, placement
 * CUDA staging (sock_cuda.h) is called by them and calls none of them but
 * the comm's completion (sock_comm.c).
 *
 * A small process-wide pool of worker threads (TPX_SOCK_WORKERS; default
 * one per CPU, 2 to 16) serves the data connections of all comms: a
 * comm's connections are dealt over the workers when it starts (those
 * NUMA-local to its NIC first, when sysfs names the node), so the threads
 * of a process do not grow with peers, channels or sockets. Each worker
 * multiplexes its connections with one epoll set and runs them from a run
 * queue, at most SOCK_TURN_BYTES per connection per turn, so one busy
 * connection cannot starve the others of its worker.
 *
 * Edge-triggered epoll: a connection is registered once and never
 * modified. A connection leaves the run queue only when it cannot go on:
 * its socket said EAGAIN (the next edge brings it back), or it waits for a
 * post (send: no piece to take, `idle`; recv: a piece header for a message
 * not posted yet, `parked`), and then the poster's kick brings it back.
 * Level-triggered would need an epoll_ctl(MOD) every time a connection
 * parks, unparks or fills its socket buffer (the old poll() loop rebuilt
 * that set every turn); edge-triggered costs none.
 *
 * Kicks: a poster (isend/irecv, strict TCPX test()) pushes the idle/parked
 * connections of its comm on their worker's lock-free kick stack and
 * writes the worker's eventfd only if the worker announced it sleeps.
 * Both sides use the Dekker pattern with sequentially consistent atomics:
 * the worker stores idle/parked (or `sleeping`) and then re-reads
 * `movable` (or the kick stack); the poster stores `movable` (or pushes)
 * and then reads idle/parked (or `sleeping`): one of them sees the other.
 *
 * Sending: an idle connection takes the next piece from the comm's
 * scheduler (sched_take) and writes header + payload with one sendmsg per
 * attempt. Receiving: a connection reads a piece header, finds the posted
 * receive for its message number, checks it (tag, size, bounds) and reads
 * the payload straight into the user buffer. A header that arrives before
 * its receive is posted "parks" the connection: its payload stays in the
 * kernel (TCP flow control pushes back) until irecv kicks it.
 *
 * Eager receives: a message of at most TPX_SOCK_EAGER_BYTES that comes
 * in one piece before its receive is posted is read at once into the
 * connection's eager buffer, and the connection parks holding it
 * (eager_state READY). The irecv that posts its receive copies it out
 * itself (READY -> TAKING -> NONE) and the message is done before irecv
 * returns: no hand-off to the worker, whose wake-up would otherwise sit
 * on the critical path of every small request/answer exchange (a one-sided
 * READ's list at the owner, its answer's payload at the requester). The
 * worker delivers it instead when it sees the receive posted first, and
 * always for a receive into CUDA memory (a synchronous copy). irecv
 * kicks the worker afterwards only if more bytes wait on the socket.
 *
 * Completion is published with one atomic add per piece; test() reads it,
 * and the worker that completes a message wakes a sleeping engine
 * (tpx_net_wake_t). Nothing here allocates or logs on the data path; the
 * first error of a comm is logged once, stored, and no connection of the
 * comm moves data any more.
 *
 * Closed connections: a sender's close arrives as the end of each data
 * connection, and the comm's peer is gone once all of them ended. A
 * connection parked behind a header (or holding a message eagerly) does
 * not read on, so its end is seen from epoll's hang-up instead: if the
 * socket then holds less than the parked piece's payload, the close cut
 * the piece; otherwise the connection still holds a message for a
 * receive not posted yet, delivered when it is; or it waits for room to
 * claim its piece's bytes ("Claims"), which only the others can make. Once
 * every connection has ended, holds only such a message or waits with no
 * claim since, the receives posted and not complete can get no more bytes:
 * the comm fails as closed by the peer (comm_recv_starved, looked at when
 * a connection closes, when a waiter behind a close waits again, and when
 * a receive is posted). Strict TCPX mode keeps Google's plugin's
 * behaviour: a sender gone in the middle of a message is never reported.
 *
 * Close: the closing thread sets `closing`, waits for the connections'
 * turns under way to end (a claim that makes room kicks other connections
 * of the comm: "Claims"), then asks every worker that serves the comm to
 * drop its connections (out of epoll, the run queue and the kick stack)
 * and waits for each answer; after that no worker touches the comm.
 * Otherwise only the comm's own API thread kicks its connections.
 *
 * CUDA buffers go through pinned staging (sock_cuda.c), and a worker never
 * waits for a copy: a connection whose copy is still running says so
 * (CH_CUWAIT) and stays on the run queue, behind the others; a worker left
 * with only such connections polls them for TPX_SOCK_CUDA_SPIN_US (a
 * small copy's time; the default, -1, polls 10 us for a lone message and
 * not at all while every one of them belongs to a stream), then sleeps in
 * epoll for a quarter of the time it has waited, at least
 * SOCK_CU_NAP_MIN_NS and at most 1 ms, so that copies
 * queued behind other connections' on the copy engine do not cost a core
 * of cuEventQuery calls. A receiving connection whose pieces wait
 * for their last copies stays polled until they are published.
 */
#ifndef TPX_SOCK_IO_H
#define TPX_SOCK_IO_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "common/trace.h"
#include "sock.h"

/* What a connection's turn did (the turn functions' results). */
enum {
    CH_IDLE = 0,
    CH_PROGRESS = 1,
    CH_BLOCKED = 2,
    CH_PARKED = 3,
    CH_EOF = 4,
    CH_MORE = 5, /* its turn's budget is spent; more may move at once */
    CH_CUWAIT = 6, /* waits for a CUDA copy, nothing moved this turn: look again soon */
    CH_ERROR = -1
};

#define SOCK_TURN_BYTES (4u << 20) /* a connection's bytes per turn of its worker */
#define SOCK_DIRECT_PASSES 4 /* a direct read's passes while its worker keeps trying */

typedef struct tpx_sock_worker {
    int index;
    int numa;              /* NUMA node it is pinned to; -1: not pinned */
    pthread_t thread;
    int ep;                /* epoll set of its connections (+ efd) */
    int efd;               /* eventfd: kicks and commands while it sleeps */
    _Atomic int sleeping;  /* 1 while in (or about to enter) epoll_wait */
    tpx_sock_chan_t *_Atomic kicks; /* kick stack: pushed by posters, emptied by the worker */
    _Atomic int nchans;    /* connections assigned (placement) */
    _Atomic int nkind[2];  /* of them sending (SOCK_COMM_SEND) / receiving */
    /* Detach command: the closer of `detach` waits until it is NULL again. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    tpx_sock_comm_t *detach;
    _Atomic int cmd;
    _Atomic int stop;      /* the last comm closed: exit */
    /* run queue (worker only) */
    tpx_sock_chan_t *run_head, *run_tail;
    uint64_t cu_wait_since; /* monotonic ns since only CUDA waits are queued; 0: not */
    int cu_wait_stream;     /* ...all of streams (TPX_SOCK_CUDA_SPIN_US=-1: nap at once) */
    /* Stalls (worker only, sock_worker.c): its connections of comms that
     * fail over, looked at every TPX_SOCK_STALL_MS / SOCK_STALL_LOOKS, and
     * when it looks next (monotonic ns). */
    tpx_sock_chan_t *stall_list;
    uint64_t stall_next_ns;
    uint64_t link_next_ns; /* the next look at their links ("Links") */
} tpx_sock_worker_t;

static inline uint64_t tpx__sock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}


/* Wake the comm's engine if it sleeps until something happens (once per
 * arming: no system call while it is awake and polling). */
void tpx__sock_comm_wake_engine(tpx_sock_comm_t *c);

/* When this thread (an I/O worker) last moved a small message whole: it
 * polls for TPX_SOCK_POLL_US after that instead of sleeping, since the next
 * message of a request/response exchange follows within microseconds and
 * a sleeping worker's wake-up costs 5-15 us (more on a halted vCPU). Only
 * after small messages: workers of large transfers keep sleeping (polling
 * after any activity cost them 4-10% of their throughput: polling workers
 * took cores from busy ones). */
#define SOCK_POLL_SMALL_BYTES (64u * 1024)
extern _Thread_local uint64_t tpx__sock_tl_small_ns;

/* Set while this thread moves bytes inside an API call (isend's direct
 * write, a direct read): what it completes, the caller sees in its own
 * test() calls, so it wakes no one (the engine's sleeping progress thread
 * would only take the caller's core). */
extern _Thread_local int tpx__sock_tl_in_api;

/* Publish `units` more of a message (bytes; 1 for a zero-byte message). */
static inline void sock_piece_done(tpx_sock_comm_t *c, tpx_sock_req_t *r, uint64_t units,
                                   uint64_t total)
{
    uint64_t target = total ? total : 1;
    if (atomic_fetch_add_explicit(&r->done, units, memory_order_release) + units == target) {
        TPX_TL(TPX_TR_MSG_DONE, total);
        if (total <= SOCK_POLL_SMALL_BYTES)
            tpx__sock_tl_small_ns = tpx__sock_mono_ns();
        atomic_fetch_add_explicit(&c->finished, 1, memory_order_relaxed);
        if (!tpx__sock_tl_in_api)
            tpx__sock_comm_wake_engine(c); /* an engine asleep until something completes */
    }
}

/* ---- sock_comm.c ---- */
/* Fail the comm with errno `err` of `what` (a reset with nothing in flight
 * is the peer's close). */
void tpx__sock_comm_fail_errno(tpx_sock_comm_t *c, int err, const char *what);
/* Set the "peer closed" error, quietly: between pieces no byte was lost,
 * and whether the requests still posted matter is the caller's call. */
void tpx__sock_comm_closed_error(tpx_sock_comm_t *c, const char *why);
/* The peer went away (a send comm: noted, set once no connection moves). */
void tpx__sock_comm_peer_closed(tpx_sock_comm_t *c, const char *who);

/* Failover (sock_failover.c), receive side, under the comm's fo_lock:
 * ch begins piece p, whose bytes it claimed: it counts them. */
void tpx__sock_fo_begin(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, const tpx_sock_piece_t *p);
/* Piece p covers bytes claimed before, by an earlier copy: 1 if a copy is
 * still being read elsewhere (then ch reads one more, and the first to
 * finish counts; ch NULL: a whole message delivered now, which counts, the
 * other copies disarmed and out of their writes when this returns); 0 if
 * a copy was read and counted already: drop this one. */
int tpx__sock_fo_take_over(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, const tpx_sock_piece_t *p);
/* ch is about to write its piece's payload into the receive's memory: 1
 * (fo_busy set until tpx__sock_fo_write_end), or 0 if another copy was
 * counted meanwhile (read the rest into nowhere). */
int tpx__sock_fo_write_begin(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);
void tpx__sock_fo_write_end(tpx_sock_chan_t *ch);

/* ---- sock_kick.c ---- */
void tpx__sock_worker_wake(tpx_sock_worker_t *w);
/* Hand `ch` to its worker: on the kick stack, and wake the worker if it
 * sleeps. Any thread; a connection already on the stack is not pushed. */
void tpx__sock_chan_kick(tpx_sock_chan_t *ch);
/* The worker takes a connection's state for a turn (1) or learns that the
 * API thread holds it (0: the releaser kicks it). */
int tpx__sock_chan_own(tpx_sock_chan_t *ch);
/* The owner `who` (SOCK_OWNER_*) gives the connection back. */
void tpx__sock_chan_release(tpx_sock_chan_t *ch, int who);

/* ---- sock_iov.c ---- */
/* Copy len bytes to the start of r's message (an eager delivery). */
void tpx__sock_req_copy_in(const tpx_sock_req_t *r, const unsigned char *src, uint64_t len);

/* ---- sock_failover.c ---- */
/* The logs of a failover comm's connections (comm start); free them. */
tpx_status_t tpx__sock_fo_start(tpx_sock_comm_t *c);
/* send: the receiver told that ch's NIC at its end lost its link
 * (sock_failover.c, "Tells"): fail it over now (ch's owner). CH_IDLE if
 * there was no such word, or ch failed already. */
int tpx__sock_fo_take_told(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);
void tpx__sock_fo_free(tpx_sock_comm_t *c);
/* send, under sched_lock: the next piece of a failed connection to send
 * again; 0 if none. */
int tpx__sock_fo_resend_take(tpx_sock_comm_t *c, tpx_sock_piece_t *piece, tpx_sock_req_t **req);
/* send, the owner: room in ch's log for one more piece; log one. */
static inline int tpx__sock_fo_log_room(const tpx_sock_chan_t *ch)
{
    return ch->fo_head - ch->fo_tail < SOCK_FO_LOG;
}
static inline void tpx__sock_fo_log_push(tpx_sock_chan_t *ch, const tpx_sock_piece_t *p,
                                         tpx_sock_req_t *r)
{
    ch->fo_log[ch->fo_head++ % SOCK_FO_LOG] = (tpx_sock_fo_ent_t){*p, r};
}
/* send, the owner, on EPOLLIN: read the receiver's acknowledgements and
 * complete what they cover. CH_IDLE, or CH_ERROR (the comm failed or the
 * receiver closed). */
int tpx__sock_fo_read_acks(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);
/* Either side, the owner: ch failed with errno `err` of `what`. Its
 * unacknowledged pieces (send) go to the others; CH_IDLE, or CH_ERROR
 * when it was the comm's last connection (the comm failed). */
int tpx__sock_fo_chan_dead(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int err, const char *what);
/* recv: the same, as a turn's result (CH_EOF: it ends as a close). */
int tpx__sock_fo_recv_dead(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int err, const char *what);
/* recv, the owner, after a turn: acknowledge the pieces ch holds safe. */
void tpx__sock_fo_ack_flush(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);

/* ---- sock_claim.c ---- */
/* tpx__sock_piece_check: the piece must wait for room to claim its bytes. */
#define SOCK_CLAIM_WAIT 2
/* ...a comm that fails over: the piece is a copy of bytes counted already
 * (or being read by a connection that keeps counting them): drop it. */
#define SOCK_CLAIM_DUP 3
/* Whether connection i still waits for room in the receive of `slot`
 * with no claim of it since (any thread; see "Claims"). */
int tpx__sock_req_chan_waits(tpx_sock_comm_t *c, uint32_t slot, int i);
/* Check piece p against its posted receive r and claim its bytes: 1, 0 if
 * the comm failed, SOCK_CLAIM_WAIT if it must wait for room (see
 * "Claims"; only with `ch`, the connection that read it). */
int tpx__sock_piece_check(tpx_sock_comm_t *c, const tpx_sock_piece_t *p, tpx_sock_req_t *r,
                          tpx_sock_chan_t *ch);
/* Bind the piece in ch->piece to its posted receive and check it:
 * CH_PROGRESS, CH_ERROR, or CH_PARKED while it waits for room to claim its
 * bytes (claim_wait: tpx__sock_chan_recv tries again when kicked). */
int tpx__sock_chan_attach(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);

/* ---- sock_eager.c ---- */
/* The header just read can be taken eagerly: a whole small message, the
 * buffer grown to hold it. */
int tpx__sock_eager_take(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);
/* The eager payload is complete: park holding it. */
void tpx__sock_eager_hold(tpx_sock_chan_t *ch);
/* The connection's owner, parked holding a message eagerly: CH_PARKED,
 * CH_PROGRESS once delivered, CH_ERROR, or CH_MORE (`api`: a copy the
 * caller's thread must leave to the worker). */
int tpx__sock_eager_parked(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int api);

/* ---- sock_recv.c ---- */
/* The sender closed connection ch in the middle of a message (a comm
 * that fails over goes on without it: CH_EOF). */
int tpx__sock_chan_recv_cut(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);
/* One turn of a receiving connection, by its owner: its worker, or (`api`)
 * the thread of a direct read, which moves host memory only and stops with
 * CH_MORE where a CUDA copy or its turn's budget (`budget` bytes) would
 * begin. */
int tpx__sock_chan_recv(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int api, uint64_t budget);

/* ---- sock_closed.c ---- */
/* What a receiving connection's turn (tpx__sock_chan_recv's result r) says
 * about the sender's close; returns r, or what the close makes of it. */
int tpx__sock_chan_recv_settle(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, int r);

/* ---- sock_send.c ---- */
/* A send comm has pieces to cut or connections that hold one. */
int tpx__sock_sched_has_work(tpx_sock_comm_t *c);
/* One turn of a sending connection, by its worker. */
int tpx__sock_chan_send(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);
/* The receiver never writes on data connections: readable means closed. */
int tpx__sock_chan_check_peer(tpx_sock_comm_t *c, tpx_sock_chan_t *ch);

#endif
