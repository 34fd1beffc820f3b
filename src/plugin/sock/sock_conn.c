/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_conn.c - listen, connect and accept, as non-blocking state machines.
 *
 * connect() and accept() never block: each call advances the set-up as far
 * as it can without waiting and returns a NULL comm until the comm is
 * complete (the ncclNet contract). Each has a deadline
 * (TPX_CONNECT_TIMEOUT_MS) after which it fails with TPX_ERR_TIMED_OUT.
 *
 * A listener's connections go through two stages before they make a comm,
 * and anyone who can reach its port can open connections, so both stages
 * are bounded in count and in time, and a full stage makes room by evicting
 * rather than by refusing newcomers (SECURITY.md):
 *  - pending: accepted, hello not complete. At most TPX_SOCK_MAX_PENDING,
 *    of which one source address holds at most TPX_SOCK_LISTEN_PER_SOURCE;
 *    a connection silent for TPX_SOCK_HELLO_TIMEOUT_MS is closed. A new
 *    connection from a source at its share replaces that source's oldest
 *    once that one is older than SOCK_SHARE_GRACE_NS;
 *    one that finds the list full replaces the oldest of the source that
 *    holds the most.
 *  - groups: the sockets of one comm, grouped by the random conn_id of
 *    their hellos (which carry the listener's nonce) until control + all
 *    data sockets are there. At most SOCK_MAX_GROUPS incomplete, of which
 *    one source holds at most SOCK_GROUPS_PER_SOURCE; a group that gains no
 *    socket for TPX_SOCK_HELLO_TIMEOUT_MS is dropped; eviction as above,
 *    the group that progressed least recently first.
 * Each accept() call first advances what it holds (hellos of pending
 * connections), then takes at most SOCK_ACCEPT_BUDGET new connections per
 * listening socket (each read at once: a real connector's hello is usually
 * there already, so it never waits behind silent ones), then returns the
 * first complete group. Nothing taken in during a call is evicted in that
 * call (a victim is read once more before it goes): when only such entries
 * are left, the call stops accepting and the rest waits in the kernel's
 * backlog. Rejections are counted and logged at most once a second per
 * listener, with the counts.
 *
 * What this cannot tell apart: an attacker on the same source address as
 * a real connector that opens connections faster than the connector sends
 * its hello can evict it (the connector's comm then fails); anyone with the
 * handle's nonce can make comms (the handle is the admission ticket).
 *
 * On a virtual device the listener listens on every member NIC and its
 * handle names them all; the connector binds data connection i to its own
 * member j = i % n (the control connection to member 0) and connects it to
 * the listener's j-th NIC (j modulo the NICs the handle names), so member
 * NIC j of one side talks to member NIC j of the other, and the data
 * connections of a comm are spread evenly over the links. The piece
 * scheduler (sock_send.c) then gives a slow link fewer pieces.
 *
 * Members down at connect: on a comm that fails over and rejoins, a
 * data connection whose NIC does not work (the connect fails: unreachable,
 * no route, an address gone; or it is still unanswered SOCK_PARTIAL_GRACE_MS
 * after another data connection of the comm got through: a black hole)
 * does not fail the connect. The comm starts without it, as if it had
 * failed at once (sock_failover.c: the others carry its pieces, nothing
 * waits for it), and the rejoin thread makes it once its NIC works, as it
 * replaces a failed one (sock_rejoin.c). The control connection goes over
 * the next member when member 0's fails. Both ends must agree on what the
 * comm starts with: the control hello goes last, once every data
 * connection either sent its hello or was given up, and its `missing`
 * names those given up, so the listener completes the comm with the
 * others and keeps the missing ones' places for their rejoins. A listener
 * says it can (TPX_SOCK_HANDLE_CAP_PARTIAL); to an older one, and where
 * the comm does not fail over or cannot rejoin, a data connection that
 * fails fails the connect, as before. Every data connection given up fails
 * it too. The grace is well under the listener's TPX_SOCK_HELLO_TIMEOUT_MS
 * (3 s), during which it holds the comm's connections that came. A NIC
 * administratively down when the process started is a member too
 * (sock_dev.c): its connections fail at once (no route) and start missing,
 * and the members of both sides keep pairing by index.
 *
 * The connector keeps its progress in a process-local table; the handle's
 * private bytes hold the id of the entry (NCCL requires connect to be
 * polled with the same handle buffer), never a pointer, so a stale or
 * forged handle cannot make us dereference garbage.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/tcp.h>

#include "common/config.h"
#include "sock.h"

#define SOCK_LISTEN_MAGIC 0x4c49534eu /* "LISN" */
#define SOCK_MAX_GROUPS 64            /* comms being assembled at once */
#define SOCK_GROUPS_PER_SOURCE 8      /* ... of which one source address holds */
/* A source over its share loses only entries this old: a real connector's
 * hello follows its connect at once and its comm completes within
 * milliseconds, so a legitimate burst (16 data sockets + control, several
 * comms of an engine's channels at once, all from one host) is never cut
 * by its own share; it is held back only when the whole stage is full. */
#define SOCK_SHARE_GRACE_NS 500000000ull
#define SOCK_ACCEPT_BUDGET 256        /* new connections per accept() call and socket */
#define SOCK_LISTEN_BACKLOG 1024
#define SOCK_REJECT_LOG_NS 1000000000ull /* one rejection summary a second */
#define SOCK_REFUSED_RETRY_MS 2000 /* retry ECONNREFUSED this long */
/* A data or control connection still unanswered this long after another
 * data connection of its comm got through is given up (its NIC's path is
 * taken for dead: a black hole). A SYN lost on a healthy link is resent
 * after 1 s: such a connection then joins as a rejoin does. */
#define SOCK_PARTIAL_GRACE_MS 1000

typedef struct {
    int fd;
    uint32_t got;
    uint64_t since_ns; /* accepted at */
    uint64_t gen;      /* by this accept() call (never evicted in the same call) */
    tpx_sock_addr_t peer;
    unsigned char buf[TPX_SOCK_HELLO_WIRE_SIZE];
} pending_t;

typedef struct {
    uint64_t conn_id;
    int nsocks; /* 0 until a hello told us */
    uint16_t flags; /* the hellos' TPX_SOCK_HELLO_* (the same on each) */
    uint16_t missing; /* the control hello's: data connections that join later */
    int ctrl_fd;
    int data_fds[TPX_SOCK_MAX_SOCKS];
    int ndata;
    tpx_sock_addr_t src;  /* where its first connection came from */
    uint64_t created_ns;  /* its first hello */
    uint64_t progress_ns; /* its latest hello */
    uint64_t gen;         /* the accept() call of its latest hello */
} group_t;

/* Why a listener closed a connection (or dropped a comm being assembled). */
enum {
    REJ_SILENT,
    REJ_EOF,
    REJ_MALFORMED,
    REJ_NONCE,
    REJ_CONFLICT,
    REJ_SHARE,
    REJ_FULL,
    REJ_BUSY,
    REJ_GROUP_EVICTED,
    REJ_GROUP_REFUSED,
    REJ_GROUP_EXPIRED,
    REJ_ACCEPT,
    REJ_REJOIN,
    REJ__COUNT
};
static const char *const rej_what[REJ__COUNT] = {
    [REJ_SILENT] = "no complete hello in time",
    [REJ_EOF] = "closed before its hello",
    [REJ_MALFORMED] = "malformed hello",
    [REJ_NONCE] = "wrong nonce",
    [REJ_CONFLICT] = "hello contradicting its comm",
    [REJ_SHARE] = "evicted: its source's share was full",
    [REJ_FULL] = "evicted: the listener was full",
    [REJ_BUSY] = "refused: the listener was full of connections as new",
    [REJ_GROUP_EVICTED] = "incomplete comm evicted for a newer one",
    [REJ_GROUP_REFUSED] = "no room for another comm",
    [REJ_GROUP_EXPIRED] = "incomplete comm expired",
    [REJ_ACCEPT] = "accept() failed",
    [REJ_REJOIN] = "rejoin refused (no such comm, or not now)",
};

typedef struct {
    uint32_t magic;
    int dev;
    int fds[TPX_SOCK_MAX_MEMBERS]; /* one listening socket per member NIC */
    int nfds;
    uint64_t nonce;
    tpx_sock_addr_t addrs[TPX_SOCK_MAX_MEMBERS];
    uint64_t accept_deadline_ns; /* 0: no accept() waiting */
    int polls;                   /* strict TCPX: accept() calls since the last comm */
    uint64_t gen;                /* accept() calls so far */
    uint64_t hello_ns;           /* TPX_SOCK_HELLO_TIMEOUT_MS (at most the connect timeout) */
    uint64_t comm_ns;            /* TPX_CONNECT_TIMEOUT_MS: a group's whole life */
    int per_source;              /* TPX_SOCK_LISTEN_PER_SOURCE */
    pending_t pend[TPX_SOCK_MAX_PENDING];
    int npend;
    group_t groups[SOCK_MAX_GROUPS];
    int ngroups;
    /* Rejections since the last summary line. */
    uint32_t rej[REJ__COUNT];
    uint64_t rej_total;    /* since listen() */
    uint64_t rej_log_at;   /* no summary before this time */
    int rej_last;          /* the latest one's reason and peer */
    char rej_last_peer[96];
    /* Made with its first comm that rejoins (sock_rejoin.c): it keeps the
     * listening sockets once this closes. */
    tpx_sock_rj_acc_t *acc;
} listen_comm_t;

static uint64_t deadline_after_ms(int ms) { return tpx__now_ns() + (uint64_t)ms * 1000000ull; }

/* ---- rejections: counted, summarised at most once a second ---------------- */

/* One line with every count since the last one; `force`: even within the
 * second (closeListen). */
static void reject_flush(listen_comm_t *l, uint64_t now, int force)
{
    uint32_t n = 0;
    for (int i = 0; i < REJ__COUNT; i++)
        n += l->rej[i];
    if (n == 0 || (!force && now < l->rej_log_at))
        return;
    char list[512], a[96];
    size_t off = 0;
    list[0] = '\0';
    for (int i = 0; i < REJ__COUNT && off < sizeof(list); i++) {
        if (l->rej[i] == 0)
            continue;
        int w = snprintf(list + off, sizeof(list) - off, "%s%u %s", off ? ", " : "", l->rej[i],
                         rej_what[i]);
        off = w < 0 ? sizeof(list) : off + (size_t)w;
    }
    SOCK_WARN("listener %s: refused %u connection(s) or comm(s) (%s); latest: %s, %s; %llu "
              "since listen (at most one such line a second)",
              tpx__sock_addr_str(&l->addrs[0], a, sizeof(a)), n, list, l->rej_last_peer,
              rej_what[l->rej_last], (unsigned long long)l->rej_total);
    memset(l->rej, 0, sizeof(l->rej));
    l->rej_log_at = now + SOCK_REJECT_LOG_NS;
}

/* Count a rejection; `peer` (may be NULL) and `why` name the latest. */
static void reject_note(listen_comm_t *l, int why, const char *peer, uint64_t now)
{
    l->rej[why]++;
    l->rej_total++;
    l->rej_last = why;
    snprintf(l->rej_last_peer, sizeof(l->rej_last_peer), "%s", peer != NULL ? peer : "-");
    SOCK_DEBUG("listener: %s: %s", l->rej_last_peer, rej_what[why]);
    reject_flush(l, now, 0);
}

static void reject_fd(listen_comm_t *l, int fd, int why, const tpx_sock_addr_t *peer,
                      uint64_t now)
{
    char a[96];
    close(fd);
    reject_note(l, why, tpx__sock_addr_str(peer, a, sizeof(a)), now);
}

/* ---- listen ---------------------------------------------------------------- */

/* A listening socket on `a` (port 0: any); the bound address back in `a`. */
static tpx_status_t listen_one(const tpx_sock_dev_t *m, tpx_sock_addr_t *a, int *fd_out)
{
    char s[96];
    tpx_status_t st;
    a->sin.sin_port = 0; /* same offset in sin and sin6 */
    int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        st = tpx__status_from_errno(errno);
        SOCK_WARN("listen on %s: socket: %s", m->name, strerror(errno));
        return st;
    }
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    socklen_t len = sizeof(*a);
    if (bind(fd, &a->sa, tpx__sock_addr_len(a)) != 0 ||
        listen(fd, SOCK_LISTEN_BACKLOG) != 0 || getsockname(fd, &a->sa, &len) != 0) {
        st = tpx__status_from_errno(errno);
        SOCK_WARN("listen on %s (%s): %s", m->name, tpx__sock_addr_str(a, s, sizeof(s)),
                  strerror(errno));
        close(fd);
        return st;
    }
    *fd_out = fd;
    return TPX_OK;
}

tpx_status_t tpx__sock_listen(int dev, void *handle, void **listen_comm)
{
    const tpx_sock_dev_t *d = tpx__sock_dev(dev);
    if (d == NULL || handle == NULL || listen_comm == NULL) {
        SOCK_WARN("listen: invalid argument (dev %d of %d, handle %p)", dev, tpx__sock_ndev(),
                  handle);
        return TPX_ERR_INVALID_ARG;
    }
    tpx_status_t st;
    char a[96];
    listen_comm_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return TPX_ERR_NO_MEMORY;
    l->magic = SOCK_LISTEN_MAGIC;
    l->dev = dev;
    l->comm_ns = (uint64_t)tpx__sock_params.connect_timeout_ms * 1000000ull;
    l->hello_ns = (uint64_t)tpx__config_int(TPX_CFG_SOCK_HELLO_TIMEOUT_MS) * 1000000ull;
    if (l->hello_ns > l->comm_ns)
        l->hello_ns = l->comm_ns;
    l->per_source = (int)tpx__config_int(TPX_CFG_SOCK_LISTEN_PER_SOURCE);
    tpx_sock_handle_t h = {.naddrs = d->nmembers};
    for (int i = 0; i < d->nmembers; i++) {
        const tpx_sock_dev_t *m = tpx__sock_dev(d->members[i]);
        l->addrs[i] = m->addr;
        TPX_CHECK_GOTO(listen_one(m, &l->addrs[i], &l->fds[i]), st, err_close);
        l->nfds++;
        if (i == 0)
            h.addr = l->addrs[0];
        else
            h.more[i - 1] = l->addrs[i];
    }
    TPX_CHECK_GOTO(tpx__random_bytes(&l->nonce, sizeof(l->nonce)), st, err_close);
    h.nonce = l->nonce;
    if (!tpx__sock_params.tcpx) /* strict TCPX: never fails over (sock_failover.c) */
        h.caps = TPX_SOCK_HANDLE_CAP_ACKS | TPX_SOCK_HANDLE_CAP_REJOIN |
                 TPX_SOCK_HANDLE_CAP_PARTIAL | TPX_SOCK_HANDLE_CAP_TELL;
    tpx__sock_handle_encode(&h, handle);
    SOCK_DEBUG("listening on %s (%s%s)", d->name, tpx__sock_addr_str(&l->addrs[0], a, sizeof(a)),
               l->nfds > 1 ? " and the other members" : "");
    *listen_comm = l;
    return TPX_OK;

err_close:
    for (int i = 0; i < l->nfds; i++)
        close(l->fds[i]);
    free(l);
    return st;
}

tpx_status_t tpx__sock_close_listen(void *listen_comm)
{
    listen_comm_t *l = listen_comm;
    if (l == NULL || l->magic != SOCK_LISTEN_MAGIC) {
        SOCK_WARN("closeListen: not a listen comm (%p)", listen_comm);
        return TPX_ERR_INVALID_ARG;
    }
    reject_flush(l, tpx__now_ns(), 1);
    for (int i = 0; i < l->npend; i++)
        close(l->pend[i].fd);
    for (int g = 0; g < l->ngroups; g++) {
        if (l->groups[g].ctrl_fd >= 0)
            close(l->groups[g].ctrl_fd);
        for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++)
            if (l->groups[g].data_fds[i] >= 0)
                close(l->groups[g].data_fds[i]);
    }
    if (l->acc != NULL)
        tpx__sock_rejoin_acc_listen_closed(l->acc); /* its sockets live on */
    else
        for (int i = 0; i < l->nfds; i++)
            close(l->fds[i]);
    l->magic = 0;
    free(l);
    return TPX_OK;
}

/* ---- accept ------------------------------------------------------------------ */

static void group_close(group_t *g)
{
    if (g->ctrl_fd >= 0)
        close(g->ctrl_fd);
    for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++)
        if (g->data_fds[i] >= 0)
            close(g->data_fds[i]);
}

static void group_remove(listen_comm_t *l, int gi)
{
    l->groups[gi] = l->groups[--l->ngroups];
}

static int group_complete(const group_t *g)
{
    return g->nsocks > 0 && g->ctrl_fd >= 0 &&
           g->ndata + __builtin_popcount(g->missing) == g->nsocks;
}

static void group_drop(listen_comm_t *l, int gi, int why, uint64_t now)
{
    char a[96];
    group_t *g = &l->groups[gi];
    snprintf(a, sizeof(a), "comm %016llx of ", (unsigned long long)g->conn_id);
    size_t n = strlen(a);
    tpx__sock_addr_str(&g->src, a + n, sizeof(a) - n);
    group_close(g);
    group_remove(l, gi);
    reject_note(l, why, a, now);
}

/* The incomplete group to drop for a new one from `src`: the stalest of
 * src if it holds its share and that one is older than the grace, else
 * (table full) the stalest of the source
 * holding the most. Groups complete or grown in this accept() call are
 * never chosen. -1: none needed, or none possible (*refuse set). */
static int group_victim(const listen_comm_t *l, const tpx_sock_addr_t *src, uint64_t now,
                        int *refuse)
{
    int mine = 0, stalest = -1;
    for (int i = 0; i < l->ngroups; i++) {
        const group_t *g = &l->groups[i];
        if (!tpx__sock_same_host(&g->src, src) || group_complete(g))
            continue; /* complete comms wait for accept(): not in the share */
        mine++;
        if (g->gen != l->gen &&
            (stalest < 0 || g->progress_ns < l->groups[stalest].progress_ns))
            stalest = i;
    }
    if (mine >= SOCK_GROUPS_PER_SOURCE && stalest >= 0 &&
        l->groups[stalest].progress_ns + SOCK_SHARE_GRACE_NS <= now)
        return stalest;
    if (l->ngroups < SOCK_MAX_GROUPS)
        return -1;
    int best = -1, best_n = 0;
    for (int i = 0; i < l->ngroups; i++) {
        const group_t *g = &l->groups[i];
        if (group_complete(g) || g->gen == l->gen)
            continue;
        int n = 0;
        for (int j = 0; j < l->ngroups; j++)
            n += tpx__sock_same_host(&l->groups[j].src, &g->src);
        if (n > best_n || (n == best_n && g->progress_ns < l->groups[best].progress_ns)) {
            best = i;
            best_n = n;
        }
    }
    *refuse = best < 0;
    return best;
}

/* Take a valid hello's socket into its group (made room for if new).
 * Returns 0, or a REJ_* reason (the socket is then the caller's to close). */
static int group_add(listen_comm_t *l, const tpx_sock_hello_t *h, int fd,
                     const tpx_sock_addr_t *peer, uint64_t now)
{
    group_t *g = NULL;
    for (int i = 0; i < l->ngroups; i++)
        if (l->groups[i].conn_id == h->conn_id)
            g = &l->groups[i];
    if (g == NULL) {
        int refuse = 0;
        int victim = group_victim(l, peer, now, &refuse);
        if (refuse)
            return REJ_GROUP_REFUSED;
        if (victim >= 0)
            group_drop(l, victim, REJ_GROUP_EVICTED, now);
        g = &l->groups[l->ngroups++];
        memset(g, 0, sizeof(*g));
        g->conn_id = h->conn_id;
        g->ctrl_fd = -1;
        for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++)
            g->data_fds[i] = -1;
        g->src = *peer;
        g->created_ns = now;
    }
    if (g->nsocks != 0 && (g->nsocks != h->nsocks || g->flags != h->flags))
        return REJ_CONFLICT;
    if (h->kind == TPX_SOCK_HELLO_CTRL ? g->ctrl_fd >= 0 : g->data_fds[h->index] >= 0)
        return REJ_CONFLICT; /* a duplicate */
    /* A data connection the control hello said would not come, or a
     * control hello saying so of one that came. */
    if (h->kind == TPX_SOCK_HELLO_CTRL) {
        if (h->missing != 0 && tpx__sock_params.tcpx)
            return REJ_CONFLICT; /* strict TCPX never said it could */
        for (int i = 0; i < TPX_SOCK_MAX_SOCKS; i++)
            if ((h->missing & (1u << i)) && g->data_fds[i] >= 0)
                return REJ_CONFLICT;
        g->missing = h->missing;
    } else if (g->missing & (1u << h->index)) {
        return REJ_CONFLICT;
    }
    g->nsocks = h->nsocks;
    g->flags = h->flags;
    if (h->kind == TPX_SOCK_HELLO_CTRL) {
        g->ctrl_fd = fd;
    } else {
        g->data_fds[h->index] = fd;
        g->ndata++;
    }
    g->progress_ns = now;
    g->gen = l->gen;
    return 0;
}

/* A complete hello: its socket joins its group, or is closed. */
static void hello_take(listen_comm_t *l, int fd, const tpx_sock_addr_t *peer,
                       const unsigned char *buf, uint64_t now)
{
    tpx_sock_hello_t h;
    int why;
    if (tpx__sock_hello_decode(buf, &h) != TPX_OK)
        why = REJ_MALFORMED;
    else if (h.nonce != l->nonce)
        why = REJ_NONCE; /* a handle of another listener, or a guess */
    else if (h.kind == TPX_SOCK_HELLO_REJOIN_DATA)
        why = l->acc != NULL && tpx__sock_rejoin_offer(l->acc, fd, &h) == SOCK_RJ_OK
                  ? 0
                  : REJ_REJOIN;
    else
        why = group_add(l, &h, fd, peer, now);
    if (why != 0)
        reject_fd(l, fd, why, peer, now);
}

/* Read what a connection has sent of its hello (never past it: piece data
 * may follow). 1: complete, 0: more to come, -1: closed or failed. */
static int hello_read(int fd, unsigned char *buf, uint32_t *got)
{
    while (*got < TPX_SOCK_HELLO_WIRE_SIZE) {
        ssize_t n = recv(fd, buf + *got, TPX_SOCK_HELLO_WIRE_SIZE - *got, MSG_DONTWAIT);
        if (n > 0) {
            *got += (uint32_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
    return 1;
}

static void pending_drop(listen_comm_t *l, int i, int why, uint64_t now)
{
    pending_t p = l->pend[i];
    l->pend[i] = l->pend[--l->npend];
    reject_fd(l, p.fd, why, &p.peer, now);
}

/* Pending connection i made progress or ran out of time. Returns 1 when it
 * left the list (grouped or rejected), 0 if it is still waiting. */
static int pending_advance(listen_comm_t *l, int i, uint64_t now)
{
    pending_t *p = &l->pend[i];
    int r = hello_read(p->fd, p->buf, &p->got);
    if (r == 0 && now < p->since_ns + l->hello_ns)
        return 0;
    if (r <= 0) {
        pending_drop(l, i, r == 0 ? REJ_SILENT : REJ_EOF, now);
        return 1;
    }
    pending_t taken = *p;
    l->pend[i] = l->pend[--l->npend];
    hello_take(l, taken.fd, &taken.peer, taken.buf, now);
    return 1;
}

/* The pending connection to close for a new one from `src`: the oldest of
 * src if it holds its share and that one is older than the grace, else
 * (list full) the oldest of the source
 * holding the most. Connections accepted in this accept() call are never
 * chosen (each is read once more first). -1: there is room; -2: no
 * candidate (*why: the reason). */
static int pending_victim(const listen_comm_t *l, const tpx_sock_addr_t *src, uint64_t now,
                          int *why)
{
    int mine = 0, oldest = -1;
    for (int i = 0; i < l->npend; i++) {
        if (!tpx__sock_same_host(&l->pend[i].peer, src))
            continue;
        mine++;
        if (l->pend[i].gen != l->gen &&
            (oldest < 0 || l->pend[i].since_ns < l->pend[oldest].since_ns))
            oldest = i;
    }
    if (mine >= l->per_source && oldest >= 0 &&
        l->pend[oldest].since_ns + SOCK_SHARE_GRACE_NS <= now) {
        *why = REJ_SHARE;
        return oldest;
    }
    if (l->npend < TPX_SOCK_MAX_PENDING)
        return -1;
    int best = -1, best_n = 0;
    for (int i = 0; i < l->npend; i++) {
        if (l->pend[i].gen == l->gen)
            continue;
        int n = 0;
        for (int j = 0; j < l->npend; j++)
            n += tpx__sock_same_host(&l->pend[j].peer, &l->pend[i].peer);
        if (n > best_n || (n == best_n && l->pend[i].since_ns < l->pend[best].since_ns)) {
            best = i;
            best_n = n;
        }
    }
    *why = REJ_FULL;
    return best >= 0 ? best : -2;
}

/* A connection fresh from accept(): its hello is usually there already.
 * Returns 1 when the pending list has no room this call (stop accepting:
 * the rest waits in the kernel's backlog), else 0. */
static int conn_arrived(listen_comm_t *l, int fd, const tpx_sock_addr_t *peer, uint64_t now)
{
    unsigned char buf[TPX_SOCK_HELLO_WIRE_SIZE];
    uint32_t got = 0;
    tpx__sock_setopts(fd, 1);
    tpx__sock_setopts_connected(fd);
    int r = hello_read(fd, buf, &got);
    if (r > 0) {
        hello_take(l, fd, peer, buf, now);
        return 0;
    }
    if (r < 0) {
        reject_fd(l, fd, REJ_EOF, peer, now);
        return 0;
    }
    int why = 0, victim;
    for (int tries = 0;; tries++) {
        victim = pending_victim(l, peer, now, &why);
        if (victim < 0)
            break;
        /* Read the victim once more: a hello that arrived since saves it. */
        if (tries < 4 && pending_advance(l, victim, now))
            continue;
        pending_drop(l, victim, why, now);
        break;
    }
    if (victim == -2) {
        reject_fd(l, fd, REJ_BUSY, peer, now);
        return 1;
    }
    pending_t *p = &l->pend[l->npend++];
    p->fd = fd;
    p->got = got;
    p->since_ns = now;
    p->gen = l->gen;
    p->peer = *peer;
    memcpy(p->buf, buf, got);
    return 0;
}

/* Could a new connection find room in both stages without evicting
 * anything this accept() call took in? If not, the rest of the backlog
 * waits for the next call (after the pending ones had their read). */
static int room_for_one(const listen_comm_t *l)
{
    int pend = l->npend < TPX_SOCK_MAX_PENDING, grp = l->ngroups < SOCK_MAX_GROUPS;
    for (int i = 0; i < l->npend && !pend; i++)
        pend = l->pend[i].gen != l->gen;
    for (int i = 0; i < l->ngroups && !grp; i++)
        grp = l->groups[i].gen != l->gen && !group_complete(&l->groups[i]);
    return pend && grp;
}

/* A comm that fails over (sock_failover.c). Its data connections get no
 * TCP_USER_TIMEOUT: Linux counts a peer's zero window against it, so it
 * would also end the connections of a receiver that reads nothing that
 * long; the I/O workers' stall detector finds black holes instead
 * (sock_worker.c, "Stalls"). */
static void comm_set_failover(tpx_sock_comm_t *c) { c->failover = 1; }

static tpx_status_t group_to_comm(listen_comm_t *l, group_t *g, tpx_sock_comm_t **out)
{
    tpx_sock_comm_t *c = tpx__sock_comm_alloc(SOCK_COMM_RECV, l->dev, g->nsocks);
    if (c == NULL)
        return TPX_ERR_NO_MEMORY;
    c->conn_id = g->conn_id;
    c->ctrl_fd = g->ctrl_fd;
    g->ctrl_fd = -1;
    for (int i = 0; i < g->nsocks; i++) {
        c->chans[i].fd = g->data_fds[i];
        g->data_fds[i] = -1;
        /* One the comm starts without holds a socket that never connects
         * until its rejoin takes its place (the workers need one). */
        if ((g->missing & (1u << i)) &&
            (c->chans[i].fd = socket(l->addrs[0].sa.sa_family,
                                     SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
            tpx_status_t st = tpx__status_from_errno(errno);
            SOCK_WARN("accept: socket: %s", strerror(errno));
            tpx__sock_comm_destroy(c);
            return st;
        }
    }
    /* The sender chose (sock_failover.c); strict TCPX mode keeps Google's
     * plugin's semantics, where a failed connection fails the comm. */
    if ((g->flags & TPX_SOCK_HELLO_ACKS) && !tpx__sock_params.tcpx)
        comm_set_failover(c);
    /* The sender replaces failed connections (sock_rejoin.c): keep the
     * listening sockets for it. Without memory for that, it cannot. */
    if (c->failover && (g->flags & TPX_SOCK_HELLO_REJOIN) && l->acc == NULL)
        l->acc = tpx__sock_rejoin_acc_new(l->nonce, l->fds, l->nfds);
    c->rejoin = c->failover && (g->flags & TPX_SOCK_HELLO_REJOIN) && l->acc != NULL;
    c->tell = c->failover && (g->flags & TPX_SOCK_HELLO_TELL); /* sock_failover.c, "Tells" */
    if (g->missing != 0 && c->failover) {
        for (int i = 0; i < g->nsocks; i++)
            if (g->missing & (1u << i))
                tpx__sock_fo_start_missing(c, i);
        SOCK_INFO("recv comm %p (conn %016llx): starts without data connection(s) 0x%x of %d "
                  "(their NICs did not work at the sender's connect); they join when they do",
                  (void *)c, (unsigned long long)c->conn_id, g->missing, g->nsocks);
    }
    tpx_status_t st = tpx__sock_comm_start(c);
    if (st != TPX_OK) {
        tpx__sock_comm_destroy(c);
        return st;
    }
    if (c->rejoin)
        tpx__sock_rejoin_acc_add(l->acc, c);
    *out = c;
    return TPX_OK;
}

tpx_status_t tpx__sock_accept(void *listen_comm, void **recv_comm)
{
    listen_comm_t *l = listen_comm;
    if (l == NULL || l->magic != SOCK_LISTEN_MAGIC || recv_comm == NULL) {
        SOCK_WARN("accept: not a listen comm (%p)", listen_comm);
        return TPX_ERR_INVALID_ARG;
    }
    *recv_comm = NULL;
    uint64_t now = tpx__now_ns();
    if (l->accept_deadline_ns == 0)
        l->accept_deadline_ns = now + l->comm_ns;
    reject_flush(l, now, 0);
    l->gen++;

    /* What we hold first: hellos of pending connections. */
    for (int i = 0; i < l->npend;)
        if (!pending_advance(l, i, now))
            i++;
    /* Then a bounded number of new connections, on every member NIC. */
    int stop = 0;
    for (int i = 0; i < l->nfds && !stop; i++) {
        for (int k = 0; k < SOCK_ACCEPT_BUDGET && !stop && room_for_one(l); k++) {
            tpx_sock_addr_t peer;
            socklen_t alen = sizeof(peer);
            memset(&peer, 0, sizeof(peer));
            int fd = accept4(l->fds[i], &peer.sa, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK) /* e.g. EMFILE: retried later */
                    reject_note(l, REJ_ACCEPT, strerror(errno), now);
                break;
            }
            stop = conn_arrived(l, fd, &peer, now);
        }
    }
    /* Complete or expired groups. Strict TCPX mode hands out NULL comms for
     * the first few calls, as Google's plugin does while it sets up. */
    int hold = tpx__sock_params.tcpx && ++l->polls <= SOCK_TCPX_NULL_POLLS;
    for (int gi = 0; gi < l->ngroups;) {
        group_t *g = &l->groups[gi];
        if (group_complete(g)) {
            if (hold) {
                gi++;
                continue;
            }
            tpx_sock_comm_t *c = NULL;
            tpx_status_t st = group_to_comm(l, g, &c);
            group_close(g);
            group_remove(l, gi);
            if (st != TPX_OK)
                return st;
            l->accept_deadline_ns = 0;
            l->polls = 0;
            *recv_comm = c;
            return TPX_OK;
        }
        if (now >= g->progress_ns + l->hello_ns || now >= g->created_ns + l->comm_ns) {
            group_drop(l, gi, REJ_GROUP_EXPIRED, now);
            continue;
        }
        gi++;
    }
    if (now >= l->accept_deadline_ns) {
        l->accept_deadline_ns = 0;
        SOCK_WARN("accept: no peer completed a connection within %d ms "
                  "(TPX_CONNECT_TIMEOUT_MS)", tpx__sock_params.connect_timeout_ms);
        return TPX_ERR_TIMED_OUT;
    }
    return TPX_OK;
}

/* ---- connect --------------------------------------------------------------- */

enum { CS_NEW = 0, CS_CONNECTING, CS_HELLO, CS_DONE };

typedef struct {
    int fd;
    int stage;
    int local;  /* which of the connector's member addresses it binds to */
    int remote; /* which of the handle's addresses it connects to */
    uint32_t sent;
    uint64_t retry_at_ns; /* CS_NEW: not before this time (after a refusal) */
    uint64_t since_ns;    /* its connect() (the control one's latest) */
    int err;              /* why its connect failed (errno), once it did */
    int missing;          /* data: given up, the comm starts without it (see the top) */
    int tries;            /* control: members it tried */
    unsigned char hello[TPX_SOCK_HELLO_WIRE_SIZE];
} csock_t;

typedef struct connecting {
    uint64_t id;
    struct connecting *next;
    tpx_sock_comm_t *comm;
    tpx_sock_handle_t h;
    tpx_sock_addr_t local[TPX_SOCK_MAX_MEMBERS]; /* bind addresses (the members'), port 0 */
    int nlocal;
    int bind_local;
    csock_t socks[1 + TPX_SOCK_MAX_SOCKS]; /* [0] control, [1..] data */
    int nsocks;
    uint64_t deadline_ns;
    uint64_t first_refused_ns; /* 0 until a connection was refused */
    int polls;                 /* connect() calls so far */
    int partial;               /* may start without data connections (see the top) */
    uint64_t first_done_ns;    /* a data connection sent its hello first (0: none yet) */
    tpx_sock_hello_t ctrl_hello; /* sent last, with `missing` */
} connecting_t;

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static connecting_t *conn_list;

static uint64_t handle_stage_get(const void *handle)
{
    uint64_t id;
    memcpy(&id, (const char *)handle + TPX_SOCK_HANDLE_STAGE_OFF, sizeof(id));
    return id;
}

static void handle_stage_set(void *handle, uint64_t id)
{
    memcpy((char *)handle + TPX_SOCK_HANDLE_STAGE_OFF, &id, sizeof(id));
}

static connecting_t *conn_take(uint64_t id)
{
    pthread_mutex_lock(&conn_lock);
    connecting_t **pp = &conn_list, *s = NULL;
    for (; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            s = *pp;
            *pp = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&conn_lock);
    return s;
}

static void conn_free(connecting_t *s);

/* A caller may abandon a connect (NCCL has no call to cancel one): free
 * states nobody has advanced past their deadline, with their sockets. */
static void conn_sweep(uint64_t now)
{
    connecting_t *dead = NULL;
    pthread_mutex_lock(&conn_lock);
    for (connecting_t **pp = &conn_list; *pp != NULL;) {
        connecting_t *s = *pp;
        if (now > s->deadline_ns + 1000000000ull) {
            *pp = s->next;
            s->next = dead;
            dead = s;
        } else {
            pp = &s->next;
        }
    }
    pthread_mutex_unlock(&conn_lock);
    while (dead != NULL) {
        connecting_t *s = dead;
        dead = s->next;
        SOCK_DEBUG("dropping a connect abandoned by its caller");
        conn_free(s);
    }
}

static void conn_put(connecting_t *s)
{
    pthread_mutex_lock(&conn_lock);
    s->next = conn_list;
    conn_list = s;
    pthread_mutex_unlock(&conn_lock);
}

static void conn_free(connecting_t *s)
{
    for (int i = 0; i <= s->nsocks; i++)
        if (s->socks[i].fd >= 0)
            close(s->socks[i].fd);
    if (s->comm != NULL)
        tpx__sock_comm_destroy(s->comm);
    free(s);
}

/* A connect to a loopback port nobody listens on can pick that very port as
 * its source and connect to itself (TCP simultaneous open): the hello then
 * "succeeds". Such a connection is a refusal. */
static int self_connected(int fd)
{
    tpx_sock_addr_t a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (getsockname(fd, &a.sa, &la) != 0 || getpeername(fd, &b.sa, &lb) != 0 || la != lb)
        return 0;
    return memcmp(&a, &b, la) == 0;
}

static int data_decided(const connecting_t *s);

/* Advance one socket. Returns TPX_OK (maybe not finished), or an error;
 * k->err: the errno of a failed connect or hello, not logged (the caller
 * decides what it means: csock_lost). */
static tpx_status_t csock_advance(connecting_t *s, csock_t *k, uint64_t now)
{
    const tpx_sock_addr_t *remote = tpx__sock_handle_addr(&s->h, k->remote);
    for (;;) {
        switch (k->stage) {
        case CS_NEW:
            if (now < k->retry_at_ns)
                return TPX_OK; /* backing off after a refusal */
            k->fd = socket(remote->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (k->fd < 0) {
                SOCK_WARN("connect: socket: %s", strerror(errno));
                return tpx__status_from_errno(errno);
            }
            tpx__sock_setopts(k->fd, k != &s->socks[0]);
            if (k != &s->socks[0] && s->nlocal > 1) {
                /* Links of a virtual device may differ in speed: keep what a
                 * data connection has queued but not sent small, so that a
                 * slow link is "free" for a new piece only once it has
                 * nearly sent the last, and holds few bytes others wait on
                 * (without a bound, netns.unequal's 500 Mbit/s link carried
                 * up to 11% of the bytes, its fair share 7.7%, at 0.62x of
                 * the links' sum). Once TCP has measured the connection's
                 * rate the bound follows it (sock_rate.c). */
                int lowat = TPX_SOCK_VDEV_LOWAT_MAX;
                (void)setsockopt(k->fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat));
            }
            if (s->bind_local &&
                bind(k->fd, &s->local[k->local].sa, tpx__sock_addr_len(&s->local[k->local])) != 0)
                SOCK_DEBUG("connect: bind to device address failed (%s); using routing",
                           strerror(errno));
            k->since_ns = now;
            if (TPX_UNLIKELY(tpx__sock_params.fault_connect_down > 0) &&
                k - s->socks == tpx__sock_params.fault_connect_down) {
                errno = ENETUNREACH; /* TPX_FAULT_SOCK_CONNECT_DOWN (tests) */
                goto failed;
            }
            if (connect(k->fd, &remote->sa, tpx__sock_addr_len(remote)) == 0) {
                if (self_connected(k->fd)) {
                    errno = ECONNREFUSED;
                    goto failed;
                }
                if (k != &s->socks[0])
                    tpx__sock_setopts_connected(k->fd);
                k->stage = CS_HELLO;
                continue;
            }
            if (errno == EINPROGRESS || errno == EINTR) {
                k->stage = CS_CONNECTING;
                return TPX_OK;
            }
            goto failed;
        case CS_CONNECTING: {
            struct pollfd pfd = {.fd = k->fd, .events = POLLOUT};
            if (poll(&pfd, 1, 0) <= 0)
                return TPX_OK;
            int err = 0;
            socklen_t len = sizeof(err);
            if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
            if (err == 0 && self_connected(k->fd))
                err = ECONNREFUSED;
            if (err == 0) {
                if (k != &s->socks[0])
                    tpx__sock_setopts_connected(k->fd);
                k->stage = CS_HELLO;
                continue;
            }
            errno = err;
            goto failed;
        }
        case CS_HELLO: {
            if (k == &s->socks[0]) {
                /* The control hello goes last: it says which data
                 * connections the comm starts without. */
                if (!data_decided(s))
                    return TPX_OK;
                if (k->sent == 0)
                    tpx__sock_hello_encode(&s->ctrl_hello, k->hello);
            }
            ssize_t n = send(k->fd, k->hello + k->sent, sizeof(k->hello) - k->sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                    return TPX_OK;
                goto failed;
            }
            k->sent += (uint32_t)n;
            if (k->sent == sizeof(k->hello))
                k->stage = CS_DONE;
            continue;
        }
        default:
            return TPX_OK;
        }
    }
failed:
    if (errno == ECONNREFUSED) {
        /* A listener whose backlog overflowed refuses too: retry briefly. */
        if (s->first_refused_ns == 0)
            s->first_refused_ns = now;
        if (now < s->deadline_ns && now - s->first_refused_ns < SOCK_REFUSED_RETRY_MS * 1000000ull) {
            close(k->fd);
            k->fd = -1;
            k->stage = CS_NEW;
            k->retry_at_ns = now + 50 * 1000000ull;
            return TPX_OK;
        }
    }
    k->err = errno;
    return tpx__status_from_errno(errno);
}

/* Every data connection sent its hello or was given up: what the control
 * hello says. */
static int data_decided(const connecting_t *s)
{
    for (int i = 1; i <= s->nsocks; i++)
        if (s->socks[i].stage != CS_DONE && !s->socks[i].missing)
            return 0;
    return 1;
}

/* Socket k's path is lost (k->err says why): a data connection is given
 * up (the comm starts without it), the control connection moves to the
 * next member. 0 if it cannot be: the connect fails (said here). */
static int csock_lost(connecting_t *s, csock_t *k)
{
    char a[96], b[96];
    const int idx = (int)(k - s->socks);
    const tpx_sock_addr_t *remote = tpx__sock_handle_addr(&s->h, k->remote);
    tpx__sock_addr_str(&s->local[k->local], b, sizeof(b));
    tpx__sock_addr_str(remote, a, sizeof(a));
    if (!s->partial || k->err == ECONNREFUSED) {
        const char *hint = s->comm->failover && !s->partial && k->err != ECONNREFUSED
                               ? " (the listener's build cannot start a comm without one of "
                                 "its connections)"
                               : "";
        SOCK_WARN("connect %s -> %s: %s%s", b, a, strerror(k->err), hint);
        return 0;
    }
    if (idx == 0) {
        if (++k->tries >= s->nlocal) {
            SOCK_WARN("connect %s -> %s: %s; the control connection found no working NIC "
                      "(tried %d)", b, a, strerror(k->err), k->tries);
            return 0;
        }
        SOCK_INFO("connect %s -> %s: %s; the control connection tries the next NIC", b, a,
                  strerror(k->err));
        close(k->fd);
        k->fd = -1;
        k->stage = CS_NEW;
        k->retry_at_ns = 0;
        k->local = (k->local + 1) % s->nlocal;
        k->remote = k->local % s->h.naddrs;
        return 1;
    }
    /* Its socket stays, unconnected, as the placeholder the workers hold
     * until the rejoin's takes its place. */
    struct sockaddr unspec = {.sa_family = AF_UNSPEC};
    if (k->fd >= 0)
        (void)connect(k->fd, &unspec, sizeof(unspec));
    else
        k->fd = socket(remote->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (k->fd < 0) {
        SOCK_WARN("connect: socket: %s", strerror(errno));
        return 0;
    }
    k->missing = 1;
    int left = 0;
    for (int i = 1; i <= s->nsocks; i++)
        left += !s->socks[i].missing;
    if (left == 0) {
        SOCK_WARN("connect to %s: no data connection could be made over any of the %d NIC(s) "
                  "(the last: %s -> %s: %s)", a, s->nlocal, b, a, strerror(k->err));
        return 0;
    }
    s->ctrl_hello.missing |= (uint16_t)(1u << (idx - 1));
    SOCK_WARN("connect %s -> %s: %s; the comm starts without data connection %d (the %d "
              "others carry its share), which joins once its NIC works",
              b, a, strerror(k->err), idx - 1, left);
    return 1;
}

/* Sockets unanswered SOCK_PARTIAL_GRACE_MS after a data connection got
 * through: their paths are taken for dead (a black hole). */
static void csock_graced(connecting_t *s, csock_t *k, uint64_t now)
{
    const uint64_t grace = (uint64_t)SOCK_PARTIAL_GRACE_MS * 1000000ull;
    if (!s->partial || s->first_done_ns == 0 || k->missing || k->stage != CS_CONNECTING)
        return;
    uint64_t from = k->since_ns > s->first_done_ns ? k->since_ns : s->first_done_ns;
    if (now >= from + grace)
        k->err = ETIMEDOUT;
}

static tpx_status_t conn_begin(int dev, const void *handle, int nsocks, connecting_t **out)
{
    tpx_status_t st;
    const tpx_sock_dev_t *d = tpx__sock_dev(dev);
    if (d == NULL) {
        SOCK_WARN("connect: invalid device %d (have %d)", dev, tpx__sock_ndev());
        return TPX_ERR_INVALID_ARG;
    }
    connecting_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return TPX_ERR_NO_MEMORY;
    for (int i = 0; i <= TPX_SOCK_MAX_SOCKS; i++)
        s->socks[i].fd = -1;
    if (tpx__sock_handle_decode(handle, &s->h) != TPX_OK) {
        SOCK_WARN("connect: the handle is not a tpx handle (bad magic, version or address)");
        st = TPX_ERR_INVALID_ARG;
        goto err_free;
    }
    s->nlocal = d->nmembers;
    for (int i = 0; i < d->nmembers; i++) {
        s->local[i] = tpx__sock_dev(d->members[i])->addr;
        s->local[i].sin.sin_port = 0;
    }
    s->bind_local = d->addr.sa.sa_family == s->h.addr.sa.sa_family;
    /* Every member NIC gets as many data connections as the others: round
     * up to a multiple of the members (and down within the limit). */
    s->nsocks = nsocks > 0 ? nsocks : tpx__sock_params.nsocks;
    s->nsocks = (s->nsocks + s->nlocal - 1) / s->nlocal * s->nlocal;
    if (s->nsocks > TPX_SOCK_MAX_SOCKS)
        s->nsocks = TPX_SOCK_MAX_SOCKS - TPX_SOCK_MAX_SOCKS % s->nlocal;
    s->comm = tpx__sock_comm_alloc(SOCK_COMM_SEND, dev, s->nsocks);
    if (s->comm == NULL) {
        st = TPX_ERR_NO_MEMORY;
        goto err_free;
    }
    s->comm->links = s->nlocal;
    TPX_CHECK_GOTO(tpx__random_bytes(&s->comm->conn_id, sizeof(uint64_t)), st, err_free);
    do {
        TPX_CHECK_GOTO(tpx__random_bytes(&s->id, sizeof(s->id)), st, err_free);
    } while (s->id == 0);
    /* Failover (sock_failover.c): where the data connections span several
     * NICs (TPX_SOCK_FAILOVER=-1), or wherever there are several of them
     * (1); never in strict TCPX mode, nor to a listener that does not
     * acknowledge pieces (an older build). */
    int fail = tpx__sock_params.failover;
    s->comm->failover = !tpx__sock_params.tcpx && s->nsocks > 1 &&
                        (s->h.caps & TPX_SOCK_HANDLE_CAP_ACKS) &&
                        (fail > 0 || (fail < 0 && s->nlocal > 1));
    for (int i = 0; i <= s->nsocks; i++) {
        tpx_sock_hello_t hello = {
            .kind = i == 0 ? TPX_SOCK_HELLO_CTRL : TPX_SOCK_HELLO_DATA,
            .index = (uint16_t)(i == 0 ? 0 : i - 1),
            .nsocks = (uint16_t)s->nsocks,
            .flags = (uint16_t)(!s->comm->failover
                                    ? 0
                                    : TPX_SOCK_HELLO_ACKS |
                                          ((s->h.caps & TPX_SOCK_HANDLE_CAP_REJOIN)
                                               ? TPX_SOCK_HELLO_REJOIN
                                               : 0) |
                                          ((s->h.caps & TPX_SOCK_HANDLE_CAP_TELL)
                                               ? TPX_SOCK_HELLO_TELL
                                               : 0)),
            .nonce = s->h.nonce,
            .conn_id = s->comm->conn_id,
        };
        tpx__sock_hello_encode(&hello, s->socks[i].hello);
        if (i == 0)
            s->ctrl_hello = hello; /* encoded again, with `missing`, when it goes */
        /* Member j of ours talks to NIC j of theirs: the links pair up. */
        s->socks[i].local = i == 0 ? 0 : (i - 1) % s->nlocal;
        s->socks[i].remote = s->socks[i].local % s->h.naddrs;
        if (i > 0) { /* where a replacement goes (sock_rejoin.c) */
            s->comm->rj_local[i - 1] = s->local[s->socks[i].local];
            s->comm->rj_remote[i - 1] = *tpx__sock_handle_addr(&s->h, s->socks[i].remote);
        }
    }
    s->comm->rejoin = s->comm->failover && (s->h.caps & TPX_SOCK_HANDLE_CAP_REJOIN);
    s->comm->tell = s->comm->failover && (s->h.caps & TPX_SOCK_HANDLE_CAP_TELL);
    s->partial = s->comm->rejoin && (s->h.caps & TPX_SOCK_HANDLE_CAP_PARTIAL);
    s->comm->rj_bind = s->bind_local;
    s->comm->rj_nonce = s->h.nonce;
    s->deadline_ns = deadline_after_ms(tpx__sock_params.connect_timeout_ms);
    *out = s;
    return TPX_OK;

err_free:
    conn_free(s);
    return st;
}

tpx_status_t tpx__sock_connect(int dev, void *handle, void **send_comm, int nsocks)
{
    if (handle == NULL || send_comm == NULL) {
        SOCK_WARN("connect: NULL handle or comm pointer");
        return TPX_ERR_INVALID_ARG;
    }
    *send_comm = NULL;
    tpx_status_t st;
    connecting_t *s;
    conn_sweep(tpx__now_ns());
    uint64_t id = handle_stage_get(handle);
    if (id != 0) {
        s = conn_take(id);
        if (s == NULL) {
            SOCK_WARN("connect: the handle carries the state of a connect that is not in "
                      "progress (copied or reused handle?)");
            return TPX_ERR_INVALID_ARG;
        }
    } else {
        TPX_CHECK_GOTO(conn_begin(dev, handle, nsocks, &s), st, out);
    }

    uint64_t now = tpx__now_ns();
    int done = !tpx__sock_params.tcpx || ++s->polls > SOCK_TCPX_NULL_POLLS;
    /* The data connections first, the control one last (its hello waits
     * for theirs, see CS_HELLO). */
    for (int j = 1; j <= s->nsocks + 1; j++) {
        csock_t *k = &s->socks[j % (s->nsocks + 1)];
        if (k->missing)
            continue;
        k->err = 0;
        st = csock_advance(s, k, now);
        if (st == TPX_OK && k != &s->socks[0] && k->stage == CS_DONE && s->first_done_ns == 0)
            s->first_done_ns = now;
        if (st == TPX_OK)
            csock_graced(s, k, now);
        if (k->err != 0 && !csock_lost(s, k))
            st = st != TPX_OK ? st : TPX_ERR_TIMED_OUT;
        else if (k->err != 0)
            st = TPX_OK;
        if (st != TPX_OK)
            goto err_conn;
    }
    done &= s->socks[0].stage == CS_DONE && data_decided(s);
    if (done) {
        tpx_sock_comm_t *c = s->comm;
        c->ctrl_fd = s->socks[0].fd;
        for (int i = 0; i < s->nsocks; i++)
            c->chans[i].fd = s->socks[i + 1].fd;
        for (int i = 0; i <= s->nsocks; i++)
            s->socks[i].fd = -1;
        if (c->failover)
            comm_set_failover(c);
        for (int i = 0; i < s->nsocks; i++)
            if (s->socks[i + 1].missing)
                tpx__sock_fo_start_missing(c, i);
        s->comm = NULL;
        conn_free(s);
        handle_stage_set(handle, 0);
        st = tpx__sock_comm_start(c);
        if (st != TPX_OK) {
            tpx__sock_comm_destroy(c);
            return st;
        }
        if (c->rejoin)
            tpx__sock_rejoin_watch(c);
        *send_comm = c;
        return TPX_OK;
    }
    if (now >= s->deadline_ns) {
        char a[96];
        SOCK_WARN("connect to %s: not established within %d ms (TPX_CONNECT_TIMEOUT_MS)",
                  tpx__sock_addr_str(&s->h.addr, a, sizeof(a)),
                  tpx__sock_params.connect_timeout_ms);
        st = TPX_ERR_TIMED_OUT;
        goto err_conn;
    }
    handle_stage_set(handle, s->id);
    conn_put(s);
    return TPX_OK;

err_conn:
    handle_stage_set(handle, 0);
    conn_free(s);
out:
    return st;
}
