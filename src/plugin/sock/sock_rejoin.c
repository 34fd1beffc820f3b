/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_rejoin.c - a comm that failed over replaces its failed data
 * connections once their NICs work again.
 *
 * A comm that fails over (sock_failover.c) gives a failed connection's
 * unacknowledged pieces to its other connections and never uses it again:
 * the comm lives on with the bandwidth it lost. Rejoining gives that
 * bandwidth back: the comm opens a new connection over the same pair of
 * NICs in the background, and once both ends took it, pieces are dealt
 * to it as to any other. Nothing of this runs on a healthy comm.
 *
 * Who reconnects: the sender (the connector), which knows the listener's
 * addresses from the handle. The comm keeps, per data connection, the
 * local member address it was bound to and the listener address it went
 * to (the handle's j-th NIC, sock_conn.c) and the handle's nonce. The
 * process's rejoin thread (below, "Threads") drives the attempts; only
 * the connection's owner touches the connection's state. Attempt k starts
 * tpx__sock_rejoin_delay_ms(k) after the previous one (10 ms doubling to
 * 250 ms, as the engine's channel rejoin): a non-blocking connect bound to
 * the same member address, so that it takes the same NIC. An attempt still
 * unanswered after SOCK_REJOIN_MAX_MS is closed and replaced (a black hole
 * swallows SYNs; a fresh one is answered as soon as the path is back); an
 * unreachable network fails it at once. There is no attempt limit: a NIC
 * may come back much later, and a dead connection costs one SYN per
 * 250 ms. Attempts end with the comm (close, or its sticky error).
 *
 * To what: the listener's own sockets. A listener that takes rejoins says
 * so in its handle (TPX_SOCK_HANDLE_CAP_REJOIN; never in strict TCPX mode),
 * and its listening sockets outlive closeListen (NCCL closes a listen comm
 * after its accept): closeListen hands them to a rejoin acceptor that
 * lives while a comm accepted from that listener with the REJOIN flag
 * lives (a count of such comms; the last one's destroy closes the
 * sockets). The rejoin thread accepts on them, holding at most
 * SOCK_RJ_PENDING half-open connections (a new one evicts the oldest) for
 * at most TPX_SOCK_HELLO_TIMEOUT_MS each (SECURITY.md). While the
 * listen comm is still open its accept() hands rejoin hellos to the same
 * acceptor (ncclNet's users close it after their accept: NCCL, the
 * engine). The cost is the listener's descriptors (one per member NIC)
 * and ports held while its comms live: bounded by the comms, no growth
 * over time. Rejected: one rejoin port per process (an older handle has
 * no field for it, and the same port number cannot be promised on every
 * NIC), and a per-comm listening socket (a port per comm and NIC more).
 *
 * How a new connection proves it belongs to the comm: its first 32 bytes
 * are a hello of kind TPX_SOCK_HELLO_REJOIN_DATA carrying the listener's
 * nonce, the comm's conn_id, the index of the connection it replaces, and
 * the nsocks and flags of the comm's first hellos (tpx__sock_rejoin_admit
 * is the rule). The nonce alone admits new comms (the handle is their
 * ticket); a rejoin also needs the conn_id, 64 random bits that travel only
 * on the comm's own connections, so someone who had the handle cannot
 * attach a connection to, or cut one of, a comm it did not make. Only a
 * comm made with TPX_SOCK_HELLO_REJOIN, alive and not failed, takes one.
 * Whoever reads the comm's traffic learns the conn_id: that one can inject
 * into plain TCP anyway (SECURITY.md: a trusted network, or encryption
 * below tpx).
 *
 * The old connection, on the receiver: a valid rejoin of index i is the
 * sender's word that it aborted connection i (it rejoins only a connection
 * it failed over). The receiver fails its end over first, as if it had
 * been reset (tpx__sock_fo_recv_dead: what it acknowledged is delivered,
 * a piece it was reading is disarmed), then takes the new socket in its
 * place. A second rejoin of an index whose new connection is not yet
 * taken is refused.
 *
 * Where the new connection starts carrying pieces: there is no stream
 * position to agree on. Pieces carry their message, offset and size and
 * are placed by offset; acknowledgements count pieces per connection. The
 * new connection is a new acknowledgement stream, counted from 0 at both
 * ends. The receiver's owner of connection i takes the socket in a turn:
 * the old socket leaves the epoll set and is closed, the connection's
 * state is reset (header and payload progress, fo_safe and fo_acked,
 * eager and claim waits, CUDA staging), the comm's counts of ended and
 * dead connections give it back, the new socket is registered, and the
 * receiver writes the welcome: an acknowledgement of 0 pieces (8 bytes; an
 * acknowledgement is otherwise written only when it grew, so 0 never
 * appears but here). The sender gives the connection no piece before it
 * read the welcome; then its owner sets fo_head = fo_tail = 0, clears
 * fo_dead, gives back fo_dead_chans, and the connection takes pieces like
 * the others: the resend queue first, then new ones. The old connection's
 * log went to the resend queue when it failed and its socket was aborted
 * (no byte of it arrives later), so no piece is in two acknowledgement
 * streams; a piece the receiver holds already is dropped there, as any
 * copy is.
 *
 * "Every connection failed" stays final: a comm whose error is set takes
 * no rejoin, and the counts are given back only by the connection's owner,
 * after it checked the comm's error, so a comm never comes back from a
 * failure it reported.
 *
 * A connection the comm started without (its NIC did not work at connect,
 * sock_conn.c "Members down at connect") is one that failed before it
 * carried anything: both ends start it as failed (tpx__sock_fo_start_missing,
 * a socket that never connects in its place), and it joins by this same
 * path, its first attempt 10 ms after the comm started.
 *
 * Older peers: a connector sets TPX_SOCK_HELLO_REJOIN only to a listener
 * with TPX_SOCK_HANDLE_CAP_REJOIN (older listeners refuse unknown flags),
 * and a listener keeps its sockets only for comms whose hellos carry it,
 * so either older end simply leaves failed connections dead, as before.
 * TPX_SOCK_WIRE_VERSION stays 1: its decoders require it equal, so a bump
 * would make older peers fail to connect at all; the capability bit is
 * this feature's version, as CAP_ACKS was failing over's.
 *
 * Threads: one process-wide rejoin thread (started with the first comm
 * that may rejoin, stopped with the last) polls the acceptors' sockets
 * once their listeners closed, the half-open connections they took, and
 * the attempts of send comms. It hands a new socket to a connection by
 * storing it in rj_fd and kicking the connection; only the connection's
 * owner (its I/O worker, tpx__sock_rejoin_turn) swaps it in. rj.lock
 * guards the lists and the attempt state; a comm leaves them first thing
 * in its destroy, so the thread never touches a comm being destroyed.
 *
 * CUDA staging: the receiver's owner takes the new socket once the pieces
 * the failed connection read into its staging ring were delivered (their
 * copies to the GPU ended; they were acknowledged, so nothing resends
 * them), and frees the ring; the sender's owner frees its ring at the swap
 * (the pieces staged there went to the resend queue at the failure). The
 * new connection makes a new ring with its first CUDA piece.
 * The acceptor's half-open connections are bounded in count and time, not
 * per source as the listener's are.
 */
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"
#include "sock.h"
#include "sock_io.h"

#define SOCK_RJ_PENDING    32                 /* half-open connections an acceptor holds */
#define SOCK_RJ_POLL       256                /* sockets the rejoin thread polls at once */
#define SOCK_RJ_ATTEMPT_MS SOCK_REJOIN_MAX_MS /* an unanswered attempt lives this long */
#define SOCK_RJ_REKICK_MS  10 /* a new socket its owner could not take yet: kicked again */
enum { RJ_IDLE, RJ_WAIT, RJ_CONNECTING };

uint32_t tpx__sock_rejoin_delay_ms(uint32_t attempt)
{
    if (attempt >= 5) /* 10 << 5 = 320: past the cap */
        return SOCK_REJOIN_MAX_MS;
    uint32_t ms = SOCK_REJOIN_FIRST_MS << attempt;
    return ms < SOCK_REJOIN_MAX_MS ? ms : SOCK_REJOIN_MAX_MS;
}

int tpx__sock_rejoin_admit(const tpx_sock_hello_t *h, uint64_t nonce,
                           const tpx_sock_rejoin_key_t *comms, int ncomms, int *which)
{
    const uint16_t both = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN;
    if (h->kind != TPX_SOCK_HELLO_REJOIN_DATA || h->flags != both)
        return SOCK_RJ_MALFORMED;
    if (h->nonce != nonce)
        return SOCK_RJ_NONCE;
    for (int i = 0; i < ncomms; i++) {
        const tpx_sock_rejoin_key_t *k = &comms[i];
        if (k->conn_id != h->conn_id)
            continue;
        if (k->flags != both)
            return SOCK_RJ_NOT_REJOINING;
        if (k->nsocks != h->nsocks || h->index >= k->nsocks)
            return SOCK_RJ_CONFLICT;
        if (k->failed)
            return SOCK_RJ_FAILED;
        if (k->taking & (1u << h->index))
            return SOCK_RJ_BUSY;
        *which = i;
        return SOCK_RJ_OK;
    }
    return SOCK_RJ_NO_COMM;
}

struct tpx_sock_rj_acc {
    uint64_t nonce;
    int fds[TPX_SOCK_MAX_MEMBERS];
    int nfds;
    int listen_open;        /* the listener's still: its accept() reads the hellos */
    uint64_t gen;           /* rj.gen when made: one from before a fork() is left alone */
    int refs;               /* the listener while open, and each comm */
    tpx_sock_comm_t *comms; /* via rj_next */
    struct {
        int fd;
        uint32_t got;
        uint64_t since_ns;
        unsigned char buf[TPX_SOCK_HELLO_WIRE_SIZE];
    } pend[SOCK_RJ_PENDING];
    int npend;
    struct tpx_sock_rj_acc *next;
};

static struct {
    pthread_mutex_t life; /* starts and stops the thread (never held by it) */
    pthread_mutex_t lock;
    int users; /* acceptors and watched send comms */
    int started;
    int stop;
    pthread_t thr;
    int efd;
    tpx_sock_comm_t *sends; /* via rj_next */
    tpx_sock_rj_acc_t *accs;
    uint64_t gen; /* fork()s seen in this process */
} rj = {.life = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .efd = -1};

void tpx__sock_rejoin_wake(void)
{
    /* Under the lock: the thread's stop closes the eventfd. Rare (a
     * connection failed, joined, or was offered). */
    uint64_t one = 1;
    pthread_mutex_lock(&rj.lock);
    if (rj.efd >= 0)
        (void)!write(rj.efd, &one, sizeof(one));
    pthread_mutex_unlock(&rj.lock);
}

/* A child of fork() has no rejoin thread: what the parent's lists hold is
 * left alone (its comms are of another generation: forget skips them),
 * and the first comm of the child starts a thread of its own. */
static void rj_atfork_child(void)
{
    pthread_mutex_init(&rj.lock, NULL);
    pthread_mutex_init(&rj.life, NULL);
    rj.gen++;
    rj.users = 0;
    rj.started = 0;
    rj.stop = 0;
    rj.efd = -1; /* the parent's, inherited: not ours to use (left open) */
    rj.sends = NULL;
    rj.accs = NULL;
}
static pthread_once_t rj_atfork_once = PTHREAD_ONCE_INIT;
static void rj_atfork_register(void)
{
    (void)pthread_atfork(NULL, NULL, rj_atfork_child);
}

/* ---- lists ------------------------------------------------------------------------ */

static void *rj_main(void *arg);

/* A user more (rj.life held): the thread runs. */
static int rj_use(void)
{
    pthread_once(&rj_atfork_once, rj_atfork_register);
    if (!rj.started) {
        int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (efd < 0)
            return -1;
        pthread_mutex_lock(&rj.lock);
        rj.efd = efd;
        rj.stop = 0;
        pthread_mutex_unlock(&rj.lock);
        if (pthread_create(&rj.thr, NULL, rj_main, NULL) != 0) {
            pthread_mutex_lock(&rj.lock);
            rj.efd = -1;
            pthread_mutex_unlock(&rj.lock);
            close(efd);
            return -1;
        }
        rj.started = 1;
    }
    rj.users++;
    return 0;
}

/* A user less (rj.life held, not rj.lock): the last stops the thread. */
static void rj_unuse(void)
{
    if (--rj.users > 0)
        return;
    pthread_mutex_lock(&rj.lock);
    rj.stop = 1;
    pthread_mutex_unlock(&rj.lock);
    tpx__sock_rejoin_wake();
    pthread_join(rj.thr, NULL);
    pthread_mutex_lock(&rj.lock);
    close(rj.efd);
    rj.efd = -1;
    pthread_mutex_unlock(&rj.lock);
    rj.started = 0;
}

static void acc_free_locked(tpx_sock_rj_acc_t *a)
{
    for (tpx_sock_rj_acc_t **pp = &rj.accs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    for (int i = 0; i < a->nfds; i++)
        close(a->fds[i]);
    for (int i = 0; i < a->npend; i++)
        close(a->pend[i].fd);
    free(a);
}

tpx_sock_rj_acc_t *tpx__sock_rejoin_acc_new(uint64_t nonce, const int *fds, int nfds)
{
    tpx_sock_rj_acc_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->nonce = nonce;
    a->nfds = nfds;
    for (int i = 0; i < nfds; i++)
        a->fds[i] = fds[i];
    a->listen_open = 1;
    a->refs = 1;
    pthread_mutex_lock(&rj.life);
    a->gen = rj.gen;
    if (rj_use() != 0) {
        pthread_mutex_unlock(&rj.life);
        free(a);
        return NULL;
    }
    pthread_mutex_lock(&rj.lock);
    a->next = rj.accs;
    rj.accs = a;
    pthread_mutex_unlock(&rj.lock);
    pthread_mutex_unlock(&rj.life);
    return a;
}

void tpx__sock_rejoin_acc_add(tpx_sock_rj_acc_t *a, tpx_sock_comm_t *c)
{
    pthread_mutex_lock(&rj.lock);
    c->rj_gen = rj.gen;
    c->rj_acc = a;
    a->refs++;
    c->rj_next = a->comms;
    a->comms = c;
    pthread_mutex_unlock(&rj.lock);
}

/* One reference less (rj.life held): the last frees the acceptor. */
static void acc_unref(tpx_sock_rj_acc_t *a)
{
    pthread_mutex_lock(&rj.lock);
    int last = --a->refs == 0;
    if (last)
        acc_free_locked(a);
    pthread_mutex_unlock(&rj.lock);
    if (last)
        rj_unuse();
}

void tpx__sock_rejoin_acc_listen_closed(tpx_sock_rj_acc_t *a)
{
    pthread_mutex_lock(&rj.life);
    if (a->gen != rj.gen) { /* made before a fork(): the parent's */
        pthread_mutex_unlock(&rj.life);
        for (int i = 0; i < a->nfds; i++)
            close(a->fds[i]);
        return;
    }
    pthread_mutex_lock(&rj.lock);
    a->listen_open = 0;
    pthread_mutex_unlock(&rj.lock);
    acc_unref(a);
    pthread_mutex_unlock(&rj.life);
    tpx__sock_rejoin_wake();
}

void tpx__sock_rejoin_watch(tpx_sock_comm_t *c)
{
    pthread_mutex_lock(&rj.life);
    if (rj_use() != 0) {
        pthread_mutex_unlock(&rj.life);
        c->rejoin = 0; /* no thread: failed connections stay failed */
        return;
    }
    pthread_mutex_lock(&rj.lock);
    c->rj_gen = rj.gen;
    c->rj_next = rj.sends;
    rj.sends = c;
    pthread_mutex_unlock(&rj.lock);
    pthread_mutex_unlock(&rj.life);
    /* It may have connections failed already (ones it started without):
     * the thread may be asleep with no step due. */
    tpx__sock_rejoin_wake();
}

void tpx__sock_rejoin_forget(tpx_sock_comm_t *c)
{
    if (!c->rejoin)
        return;
    pthread_mutex_lock(&rj.life);
    if (c->rj_gen != rj.gen) { /* made before a fork(): in the parent's lists */
        pthread_mutex_unlock(&rj.life);
        return;
    }
    pthread_mutex_lock(&rj.lock);
    int watched = 0;
    tpx_sock_comm_t **head = c->kind == SOCK_COMM_SEND ? &rj.sends
                             : c->rj_acc != NULL       ? &c->rj_acc->comms
                                                       : NULL;
    for (tpx_sock_comm_t **pp = head; pp != NULL && *pp != NULL; pp = &(*pp)->rj_next)
        if (*pp == c) {
            *pp = c->rj_next;
            watched = 1;
            break;
        }
    for (int i = 0; i < c->nsocks; i++)
        if (c->chans[i].rj_afd >= 0) {
            close(c->chans[i].rj_afd);
            c->chans[i].rj_afd = -1;
        }
    pthread_mutex_unlock(&rj.lock);
    if (watched && c->kind == SOCK_COMM_SEND)
        rj_unuse();
    else if (watched)
        acc_unref(c->rj_acc);
    pthread_mutex_unlock(&rj.life);
}

/* ---- admission ------------------------------------------------------------------ */

/* rj.lock held. */
static int offer_locked(tpx_sock_rj_acc_t *a, int fd, const tpx_sock_hello_t *h)
{
    tpx_sock_comm_t *c = a->comms;
    while (c != NULL && c->conn_id != h->conn_id)
        c = c->rj_next;
    tpx_sock_rejoin_key_t k = {.conn_id = h->conn_id};
    if (c != NULL) {
        k.nsocks = (uint16_t)c->nsocks;
        k.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN;
        k.failed = atomic_load(&c->error) != 0 || atomic_load(&c->closing);
        for (int i = 0; i < c->nsocks; i++)
            if (atomic_load(&c->chans[i].rj_fd) >= 0)
                k.taking |= 1u << i;
    }
    int which = -1;
    int why = tpx__sock_rejoin_admit(h, a->nonce, &k, c != NULL, &which);
    if (why != SOCK_RJ_OK)
        return why;
    tpx_sock_chan_t *ch = &c->chans[h->index];
    tpx__sock_setopts(fd, 1);
    tpx__sock_setopts_connected(fd);
    atomic_store(&ch->rj_fd, fd);
    tpx__sock_chan_kick(ch);
    return SOCK_RJ_OK;
}

int tpx__sock_rejoin_offer(tpx_sock_rj_acc_t *a, int fd, const tpx_sock_hello_t *h)
{
    pthread_mutex_lock(&rj.lock);
    int why = offer_locked(a, fd, h);
    pthread_mutex_unlock(&rj.lock);
    if (why == SOCK_RJ_OK)
        tpx__sock_rejoin_wake(); /* kicks it again until its owner took it */
    return why;
}

/* ---- the rejoin thread ---------------------------------------------------------- */

static short revents_of(const struct pollfd *pf, int n, int fd)
{
    for (int i = 0; i < n; i++)
        if (pf[i].fd == fd)
            return pf[i].revents;
    return 0;
}

static void attempt_fail(tpx_sock_chan_t *ch, uint64_t now)
{
    if (ch->rj_afd >= 0)
        close(ch->rj_afd);
    ch->rj_afd = -1;
    ch->rj_astage = RJ_WAIT;
    ch->rj_next_ns = now + (uint64_t)tpx__sock_rejoin_delay_ms(++ch->rj_attempt) * 1000000u;
}

/* Connected: the hello (32 bytes into an empty send buffer), and the
 * socket to the owner. */
static void attempt_done(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, uint64_t now)
{
    const int idx = (int)(ch - c->chans);
    tpx_sock_hello_t h = {
        .kind = TPX_SOCK_HELLO_REJOIN_DATA,
        .index = (uint16_t)idx,
        .nsocks = (uint16_t)c->nsocks,
        .flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN,
        .nonce = c->rj_nonce,
        .conn_id = c->conn_id,
    };
    unsigned char buf[TPX_SOCK_HELLO_WIRE_SIZE];
    tpx__sock_hello_encode(&h, buf);
    tpx__sock_setopts_connected(ch->rj_afd);
    if (send(ch->rj_afd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(buf)) {
        attempt_fail(ch, now);
        return;
    }
    atomic_store(&ch->rj_fd, ch->rj_afd);
    ch->rj_afd = -1;
    ch->rj_astage = RJ_IDLE;
    atomic_store(&ch->rj_phase, SOCK_RJ_PHASE_HANDED);
    tpx__sock_chan_kick(ch);
}

static void attempt_start(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, uint64_t now)
{
    const int idx = (int)(ch - c->chans);
    const tpx_sock_addr_t *to = &c->rj_remote[idx];
    int fd = socket(to->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        attempt_fail(ch, now);
        return;
    }
    ch->rj_afd = fd;
    tpx__sock_setopts(fd, 1);
    if (c->links > 1) { /* as the first connection (sock_conn.c) */
        int lowat = TPX_SOCK_VDEV_LOWAT_MAX;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat));
    }
    if (c->rj_bind && bind(fd, &c->rj_local[idx].sa, tpx__sock_addr_len(&c->rj_local[idx])) != 0) {
        attempt_fail(ch, now); /* its NIC's address is gone: not back yet */
        return;
    }
    ch->rj_astage = RJ_CONNECTING;
    ch->rj_next_ns = now + (uint64_t)SOCK_RJ_ATTEMPT_MS * 1000000u;
    if (connect(fd, &to->sa, tpx__sock_addr_len(to)) == 0)
        attempt_done(c, ch, now);
    else if (errno != EINPROGRESS && errno != EINTR)
        attempt_fail(ch, now); /* e.g. ENETUNREACH: the link is down */
}

/* Whether an attempt's connect finished: 1 connected, -1 failed, 0 not yet. */
static int attempt_connected(int fd)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
        return -1;
    tpx_sock_addr_t peer;
    socklen_t pl = sizeof(peer);
    if (getpeername(fd, &peer.sa, &pl) == 0)
        return 1;
    return errno == ENOTCONN ? 0 : -1;
}

/* One send connection's attempts (rj.lock held); *wait_ns: the time left
 * until its next step, if sooner. */
static void send_step(tpx_sock_comm_t *c, tpx_sock_chan_t *ch, uint64_t now, short rev,
                      uint64_t *wait_ns)
{
    int ph = atomic_load(&ch->rj_phase);
    if (ph == SOCK_RJ_PHASE_LIVE) {
        ch->rj_attempt = 0;
        return;
    }
    if (ph != SOCK_RJ_PHASE_DEAD)
        return; /* its owner's, or never */
    if (ch->rj_astage == RJ_IDLE) {
        ch->rj_astage = RJ_WAIT;
        ch->rj_next_ns = now + (uint64_t)tpx__sock_rejoin_delay_ms(ch->rj_attempt) * 1000000u;
    }
    if (ch->rj_astage == RJ_CONNECTING && rev != 0) {
        int r = attempt_connected(ch->rj_afd);
        if (r > 0)
            attempt_done(c, ch, now);
        else if (r < 0)
            attempt_fail(ch, now);
    }
    if (ch->rj_astage == RJ_CONNECTING && now >= ch->rj_next_ns)
        attempt_fail(ch, now); /* unanswered: a black hole, or a slow path */
    if (ch->rj_astage == RJ_WAIT && now >= ch->rj_next_ns)
        attempt_start(c, ch, now);
    if (ch->rj_astage != RJ_IDLE && ch->rj_next_ns > now && ch->rj_next_ns - now < *wait_ns)
        *wait_ns = ch->rj_next_ns - now;
    else if (ch->rj_astage != RJ_IDLE && ch->rj_next_ns <= now)
        *wait_ns = 0;
}

static void pend_drop(tpx_sock_rj_acc_t *a, int i)
{
    close(a->pend[i].fd);
    a->pend[i] = a->pend[--a->npend];
}

/* An acceptor's sockets (rj.lock held, its listener closed). */
static void acc_step(tpx_sock_rj_acc_t *a, const struct pollfd *pf, int n, uint64_t now,
                     uint64_t hello_ns, uint64_t *wait_ns)
{
    for (int i = 0; i < a->nfds; i++) {
        if (revents_of(pf, n, a->fds[i]) == 0)
            continue;
        for (int k = 0; k < 16; k++) {
            int fd = accept4(a->fds[i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0)
                break;
            if (a->npend == SOCK_RJ_PENDING) { /* full: the oldest goes */
                int old = 0;
                for (int j = 1; j < a->npend; j++)
                    if (a->pend[j].since_ns < a->pend[old].since_ns)
                        old = j;
                pend_drop(a, old);
            }
            a->pend[a->npend].fd = fd;
            a->pend[a->npend].got = 0;
            a->pend[a->npend].since_ns = now;
            a->npend++;
        }
    }
    for (int i = 0; i < a->npend;) {
        __typeof__(a->pend[0]) *p = &a->pend[i];
        int drop = 0;
        while (p->got < sizeof(p->buf)) {
            ssize_t r = recv(p->fd, p->buf + p->got, sizeof(p->buf) - p->got, MSG_DONTWAIT);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                drop = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
                break;
            }
            p->got += (uint32_t)r;
        }
        if (!drop && p->got == sizeof(p->buf)) {
            tpx_sock_hello_t h;
            if (tpx__sock_hello_decode(p->buf, &h) == TPX_OK &&
                offer_locked(a, p->fd, &h) == SOCK_RJ_OK) {
                a->pend[i] = a->pend[--a->npend]; /* the connection's now */
                continue;
            }
            drop = 1;
        }
        if (!drop && now - p->since_ns >= hello_ns)
            drop = 1;
        if (drop) {
            pend_drop(a, i);
            continue;
        }
        uint64_t left = p->since_ns + hello_ns - now;
        if (left < *wait_ns)
            *wait_ns = left;
        i++;
    }
}

static void *rj_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "tpx-rejoin");
    const uint64_t hello_ns = (uint64_t)tpx__config_int(TPX_CFG_SOCK_HELLO_TIMEOUT_MS) * 1000000u;
    struct pollfd pf[SOCK_RJ_POLL];
    int n = 0;
    pthread_mutex_lock(&rj.lock);
    while (!rj.stop) {
        uint64_t now = tpx__sock_mono_ns(), wait_ns = UINT64_MAX;
        /* What the last poll saw, then the next poll's set. */
        for (tpx_sock_comm_t *c = rj.sends; c != NULL; c = c->rj_next) {
            if (atomic_load(&c->error) != 0 || atomic_load(&c->closing))
                continue;
            for (int i = 0; i < c->nsocks; i++) {
                tpx_sock_chan_t *ch = &c->chans[i];
                short rev = ch->rj_afd >= 0 ? revents_of(pf, n, ch->rj_afd) : 0;
                send_step(c, ch, now, rev, &wait_ns);
            }
        }
        for (tpx_sock_rj_acc_t *a = rj.accs; a != NULL; a = a->next) {
            if (!a->listen_open)
                acc_step(a, pf, n, now, hello_ns, &wait_ns);
            /* A new socket its owner has not taken yet (it waits for what
             * the failed connection holds to be delivered): kick again. */
            for (tpx_sock_comm_t *c = a->comms; c != NULL; c = c->rj_next)
                for (int i = 0; i < c->nsocks; i++)
                    if (atomic_load(&c->chans[i].rj_fd) >= 0) {
                        tpx__sock_chan_kick(&c->chans[i]);
                        if (wait_ns > SOCK_RJ_REKICK_MS * 1000000ull)
                            wait_ns = SOCK_RJ_REKICK_MS * 1000000ull;
                    }
        }
        n = 0;
        pf[n++] = (struct pollfd){.fd = rj.efd, .events = POLLIN};
        for (tpx_sock_comm_t *c = rj.sends; c != NULL; c = c->rj_next)
            for (int i = 0; i < c->nsocks && n < SOCK_RJ_POLL; i++)
                if (c->chans[i].rj_afd >= 0 && c->chans[i].rj_astage == RJ_CONNECTING)
                    pf[n++] = (struct pollfd){.fd = c->chans[i].rj_afd, .events = POLLOUT};
        for (tpx_sock_rj_acc_t *a = rj.accs; a != NULL; a = a->next) {
            if (a->listen_open)
                continue;
            for (int i = 0; i < a->nfds && n < SOCK_RJ_POLL; i++)
                pf[n++] = (struct pollfd){.fd = a->fds[i], .events = POLLIN};
            for (int i = 0; i < a->npend && n < SOCK_RJ_POLL; i++)
                pf[n++] = (struct pollfd){.fd = a->pend[i].fd, .events = POLLIN};
        }
        pthread_mutex_unlock(&rj.lock);
        int ms = wait_ns == UINT64_MAX ? -1 : (int)((wait_ns + 999999u) / 1000000u);
        if (poll(pf, (nfds_t)n, ms) > 0 && (pf[0].revents & POLLIN)) {
            uint64_t v;
            (void)!read(rj.efd, &v, sizeof(v));
        }
        pthread_mutex_lock(&rj.lock);
    }
    pthread_mutex_unlock(&rj.lock);
    return NULL;
}
