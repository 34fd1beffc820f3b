/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer.c - establishing, accepting and closing peers.
 *
 * A peer is set up in stages over its bootstrap connection (a state
 * machine that never blocks, so the bootstrap thread serves many peers at
 * once and a stalled one only wastes its own deadline):
 *
 *   HANDSHAKE  framing + optional HMAC authentication (bootstrap module)
 *   INFO       both sides send {engine id, plugin, chunk, window, the
 *              ncclNet listen handle of their control channel, one empty
 *              handle per data channel}; both adopt the smaller channel
 *              count and chunk size
 *   CONNECT    poll connect() on the peer's control handle and accept() on
 *              ours until both control comms exist (TCPX may return NULL
 *              comms for a while; connect is re-called with the same
 *              handle buffer)
 *   READY      both say so, each with its flags (wire.h: whether its control
 *              messages go over the bootstrap connection); control receives
 *              are posted on the comms still used, the others closed; the
 *              peer is live
 *
 * The data channels open when a transfer first has chunks for them
 * (tpx__peer_chan_drive), so an idle peer costs its bootstrap connection
 * (and its control comms, where the control stream uses them) only: each side listens on its channels and
 * sends their handles in one bootstrap frame (MSG_CHAN) when it first needs
 * them or when the peer's came; both then connect and accept in channel
 * order as at set-up. A transfer's chunks wait on its lanes meanwhile and
 * are dealt exactly as on open channels (FIFO plugins see the same order on
 * both sides). The first transfer pays one bootstrap round trip plus the
 * plugin's connects; later ones nothing.
 *
 * The bootstrap connection stays open afterwards: its EOF tells us the
 * peer process is gone even when a plugin would keep quiet.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "bootstrap/sha256.h"
#include "common/config.h"
#include "common/tsan.h"
#include "engine.h"
#include "common/sigpipe.h"
#include "faults.h"
#include "mem.h"
#include "pack.h"
#include "peer.h"
#include "rma.h"
#include "window.h"
#include "xfer.h"
#include "ident.h"
#include "remote.h"

#define MSG_READY (TPX_BS_TYPE_USER + 1)
#define MSG_BELL TPX_MSG_BELL
#define MSG_IDENT (TPX_BS_TYPE_USER + 3) /* identity proof (ident.h, wire.h) */
#define MSG_BUSY (TPX_BS_TYPE_USER + 4)  /* "too many peers here" (TPX_MAX_PEERS), then EOF */
#define MSG_CHAN TPX_MSG_CHAN            /* data channels' listen handles (engine.h) */

/* The bootstrap thread's admission of incoming connections (SECURITY.md):
 * every stage before a peer is established is bounded in count and time,
 * and making room drops the connection that costs others most. */
#define MAX_SETUPS         64   /* connections being set up at once */
#define MAX_SETUPS_PER_SRC 16   /* ... from one address, when the table is full */
#define ACCEPTS_PER_PASS   8    /* new connections taken per pass, after the others advanced */
#define EARLY_STAGE_MS     5000 /* handshake, INFO and IDENT of an incoming peer: at most this */
#define PEER_IDLE_YIELD_MS 1000 /* a peer this long without a control message may yield its slot */

/* Doorbells (frames on a ready peer's bootstrap connection): read per peer
 * and pass, and allowed per peer and second before the peer is dropped. */

enum { ST_HANDSHAKE = 0, ST_INFO, ST_IDENT, ST_CONNECT, ST_READY_WAIT, ST_DONE };

/* A connect() the engine no longer wants. The ncclNet ABI cannot cancel
 * one, so it is driven (with its own handle buffer) until the plugin ends
 * it, and a comm it yields is closed. */
typedef struct tpx_reap {
    struct tpx_reap *next;
    int dev;
    unsigned char handle[TPX_BS_HANDLE_SIZE];
    _Alignas(64) unsigned char devh[TPX_DEVH_STORAGE];
} tpx_reap_t;

typedef struct {
    int stage;
    uint64_t deadline_ns;
    int nlisten;
    void *listen[1 + TPX_MAX_CHANNELS];
    unsigned char their[1 + TPX_MAX_CHANNELS][TPX_BS_HANDLE_SIZE];
    int ready_sent;
    unsigned char info_mine[TPX_SHA256_DIGEST_SIZE];   /* sha256 of the INFO we sent */
    unsigned char info_theirs[TPX_SHA256_DIGEST_SIZE]; /* ... and of the one received */
    /* instance tickets (ident.h INSTANCE) */
    int present;                       /* client: present this ticket, expect its proof */
    unsigned char ticket_id[TPX_IDENT_TICKET_ID], ticket[TPX_IDENT_TICKET];
    int peer_asks;                     /* server: the client presented this ticket id */
    unsigned char peer_ticket_id[TPX_IDENT_TICKET_ID];
    /* incoming connections only (bootstrap thread) */
    int inbound;
    uint64_t born_ns;          /* accepted */
    uint64_t moved_ns;         /* last reached a new stage (born_ns at first) */
    uint64_t early_ns;         /* HANDSHAKE..IDENT must be done by then */
    unsigned char src[16];     /* the peer's address (IPv4 mapped into IPv6) */
    tpx_bs_loglimit_t *lim;    /* failure lines go through it */
} setup_t;

/* A set-up failure caused by the peer: incoming peers' lines are rate
 * limited (a flood of bad connections must not flood the log). */
#define SETUP_ERR(p, ...)                                                                          \
    do {                                                                                           \
        setup_t *s_ = (p)->setup;                                                                  \
        if (s_ == NULL || s_->lim == NULL || tpx__bs_loglimit(s_->lim))                            \
            TPX_ERROR(__VA_ARGS__);                                                                \
    } while (0)

static tpx_comm_t *comm_new(tpx_peer_t *p, int is_send, int is_ctrl, int chan, int dev)
{
    tpx_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->peer = p;
    c->e = p->e;
    c->peer_name = p->name;
    c->peer_repairs = &p->repairs;
    c->is_send = is_send;
    c->is_ctrl = is_ctrl;
    c->chan = chan;
    c->dev = dev;
    tpx_net_props_t props;
    if (!is_ctrl && !p->e->devs_fused && tpx__net_props(p->e->net, dev, &props) == TPX_OK &&
        strlen(props.name) < sizeof(c->nic))
        memcpy(c->nic, props.name, strlen(props.name) + 1);
    c->win.cap = p->e->cfg.window;
    tpx__pack_comm_init(c);
    c->lane = is_ctrl ? -1 : is_send ? chan : p->nchan + chan;
    c->id = p->e->next_comm_id++;
    return c;
}

static int chan_dev(tpx_engine_t *e, int i) { return e->devs[i % e->ndevs]; }

static tpx_status_t setup_begin(tpx_peer_t *p, setup_t *s)
{
    tpx_engine_t *e = p->e;
    tpx_bs_info_t info;
    memset(&info, 0, sizeof(info));
    info.engine_id = tpx__ident_engine_id(e);
    info.chunk_bytes = e->cfg.chunk;
    info.window = (uint16_t)e->cfg.window;
    snprintf(info.plugin, sizeof(info.plugin), "%s", e->net->name);
    snprintf(info.name, sizeof(info.name), "%s", tpx__ident_name(e));
    s->nlisten = 1; /* the data channels listen when first used */
    info.nhandles = (uint16_t)(1 + e->cfg.nchan); /* handles[1..]: zero, the channel count */
    tpx_status_t st = TPX_OK;
    pthread_mutex_lock(&e->lock);
    /* From the first peer on, the engine's GPU and NICs stay as they are:
     * its comms are made on them (tpx__topo_gpu_bind). */
    e->gpu_fixed = 1;
    info.gpu = e->gpu;
    int gtok = tpx__window_gpu_enter(e);
    st = tpx__net_listen(e->net, chan_dev(e, 0), info.handles[0], &s->listen[0]);
    tpx__window_gpu_leave(gtok);
    pthread_mutex_unlock(&e->lock);
    if (st != TPX_OK) {
        TPX_ERROR("peer %s: listen on plugin %s failed", p->name, e->net->name);
        return st;
    }
    unsigned char buf[TPX_BS_INFO_MAX_SIZE];
    uint32_t len;
    st = tpx__bs_info_encode(&info, buf, sizeof(buf), &len);
    if (st == TPX_OK) {
        tpx__sha256(buf, len, s->info_mine);
        st = tpx__bs_send(p->bs, TPX_BS_MSG_INFO, buf, len);
    }
    return st;
}

/* ---- admission: the peer cap (TPX_MAX_PEERS) ------------------------------------------ */

/* A peer that moves data holds ~20 descriptors (its bootstrap connection,
 * and the plugin's sockets of its control and data channels; an idle one
 * only the first two: 5 on the built-in transport), so the soft limit
 * that most shells leave (1024, or 256) sizes the peer table small. A
 * server raises it to the hard limit at start; so does the first engine of
 * a process (TPX_RAISE_NOFILE=0: not). The kernel caps the limit at
 * fs.nr_open: an infinite hard limit is raised to that. */
static void nofile_raise_once(void)
{
    if (tpx__config_int(TPX_CFG_RAISE_NOFILE) == 0)
        return;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rlim_t want = rl.rlim_max;
    if (want == RLIM_INFINITY) {
        want = 1048576; /* the kernel's default fs.nr_open */
        FILE *f = fopen("/proc/sys/fs/nr_open", "re");
        unsigned long long v;
        if (f != NULL) {
            if (fscanf(f, "%llu", &v) == 1 && v > 0)
                want = (rlim_t)v;
            fclose(f);
        }
    }
    if (want <= rl.rlim_cur)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        TPX_INFO("open-file limit: cannot raise it from %llu to %llu: %s", (unsigned long long)was,
                 (unsigned long long)want, strerror(errno));
        return;
    }
    TPX_INFO("open-file limit raised from %llu to %llu (the hard limit): busy peers cost "
             "~20 descriptors each (TPX_RAISE_NOFILE=0 leaves it)", (unsigned long long)was,
             (unsigned long long)want);
}

void tpx__peer_nofile_raise(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, nofile_raise_once);
}

static int max_peers(const tpx_engine_t *e)
{
    int64_t v = tpx__config_int(TPX_CFG_MAX_PEERS);
    if (v > 0)
        return (int)TPX_MIN(v, 1000000);
    struct rlimit rl;
    int64_t nofile = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                         ? (int64_t)rl.rlim_cur
                         : 65536;
    v = (nofile - 64) / (8 * (1 + e->cfg.nchan));
    return (int)TPX_MAX(8, TPX_MIN(v, 4096));
}

static tpx_status_t peer_busy_received(tpx_peer_t *p)
{
    TPX_ERROR("peer %s refused the connection: it has reached its peer limit (TPX_MAX_PEERS "
              "there)", p->name);
    return TPX_ERR_NO_RESOURCE;
}

/* A peer's trust: the token authenticated it, or it proved the key of a
 * loaded remote. Lock held. */
static int peer_trusted(tpx_peer_t *q)
{
    return (q->bs != NULL && tpx__bs_authenticated(q->bs)) || tpx__peer_known(q);
}

/* May q give its slot to a newcomer? A ready peer that connected to us,
 * that nobody took (tpx_peer_accept, a remote), with nothing in flight
 * either way and no control message for PEER_IDLE_YIELD_MS. Lock held. */
static int peer_idle(const tpx_peer_t *q, uint64_t now)
{
    return q->state == PEER_READY && q->inbound && !q->accepted && q->remote == NULL &&
           !q->remote_closed && q->active == NULL && q->recv_pending_n == 0 &&
           q->unexpected_n == 0 && q->outbox_n == 0 && q->rma_ntargets == 0 &&
           q->rma_head == NULL && q->held_head == NULL &&
           q->active_ns + (uint64_t)PEER_IDLE_YIELD_MS * 1000000ull <= now;
}

/* Linked peers (ready or being set up) that connected from src. Lock held. */
static int src_peers(const tpx_engine_t *e, const unsigned char src[16])
{
    int n = 0;
    for (const tpx_peer_t *q = e->peers; q != NULL; q = q->next)
        n += q->inbound && (q->state == PEER_READY || q->state == PEER_SETUP) &&
             memcmp(q->src, src, 16) == 0;
    return n;
}

/* The peer that yields its slot to a newcomer from `src` when the table is
 * full, or NULL. Candidates are idle (peer_idle), never trusted ones for an
 * untrusted newcomer; an untrusted newcomer takes a slot only from an
 * address holding at least its share, and only from its own address once
 * that holds its share. Among candidates: untrusted first, then the address
 * holding the most peers, then the longest idle. Lock held. */
static tpx_peer_t *peer_victim(tpx_engine_t *e, const unsigned char src[16], int trusted, int share)
{
    uint64_t now = tpx__now_ns();
    int own = src_peers(e, src);
    tpx_peer_t *v = NULL;
    int vtrust = 0, vcount = 0;
    for (tpx_peer_t *q = e->peers; q != NULL; q = q->next) {
        if (!peer_idle(q, now))
            continue;
        int qt = peer_trusted(q);
        if (qt && !trusted)
            continue;
        int same = memcmp(q->src, src, 16) == 0;
        int count = same ? own : src_peers(e, q->src);
        if (!trusted && !same && (own >= share || count < share))
            continue;
        if (v == NULL || qt < vtrust ||
            (qt == vtrust &&
             (count > vcount || (count == vcount && q->active_ns < v->active_ns)))) {
            v = q;
            vtrust = qt;
            vcount = count;
        }
    }
    return v;
}

/* May this incoming peer stay? `identified`: its IDENT is in (its key is
 * known); before that only the hard cap applies. Peers authenticated by the
 * token or by a loaded remote's key may use the last quarter. With the
 * table full, an idle peer (peer_victim) yields its slot: chosen before the
 * IDENT (the newcomer goes on only if one exists), dropped after it. */
static tpx_status_t peer_admit(tpx_peer_t *p, int identified)
{
    tpx_engine_t *e = p->e;
    setup_t *s = p->setup;
    int cap = max_peers(e), n = 0, trusted = tpx__bs_authenticated(p->bs);
    int share = TPX_MAX(2, cap / 4);
    pthread_mutex_lock(&e->lock);
    /* Failed peers nobody took are freed by the bootstrap thread (at once
     * when there are many): they do not count. */
    for (tpx_peer_t *q = e->peers; q != NULL; q = q->next)
        n += q->state == PEER_READY || q->state == PEER_SETUP ||
             (q->accepted && q->state == PEER_FAILED);
    if (identified && !trusted)
        trusted = tpx__peer_known(p);
    int limit = trusted ? cap : cap - cap / 4;
    if (n < (identified ? limit : cap)) {
        pthread_mutex_unlock(&e->lock);
        return TPX_OK;
    }
    /* Before the IDENT its key is unknown: go on if any idle peer could
     * give a known one its slot. */
    tpx_peer_t *v = peer_victim(e, s->src, identified ? trusted : 1, share);
    uint64_t idle_ns = v != NULL ? tpx__now_ns() - v->active_ns : 0;
    int vcount = v != NULL ? src_peers(e, v->src) : 0;
    char vname[sizeof(v->name)];
    if (v != NULL) {
        snprintf(vname, sizeof(vname), "%s", v->name);
        if (identified)
            v->accepted = 1; /* ours now: nobody else takes it */
    }
    pthread_mutex_unlock(&e->lock);
    if (v != NULL && !identified)
        return TPX_OK; /* judged again once it identified itself */
    if (v != NULL) {
        if (s->lim == NULL || tpx__bs_loglimit(s->lim))
            TPX_WARN("peer %s (\"%s\"%s): %d peers (TPX_MAX_PEERS %d): idle peer %s (%.1f s idle, "
                     "one of %d from its address) gives it its slot", p->name, p->remote_name,
                     trusted ? ", authenticated" : "", n, cap, vname, (double)idle_ns / 1e9,
                     vcount);
        tpx__peer_destroy(v);
        return TPX_OK;
    }
    SETUP_ERR(p, "peer %s (\"%s\") refused: this engine has %d peers (TPX_MAX_PEERS %d; %s), none "
              "idle that could give it a slot", p->name, p->remote_name, n, cap,
              trusted ? "all taken" : "the last quarter is kept for authenticated peers");
    (void)tpx__bs_send(p->bs, MSG_BUSY, NULL, 0); /* best effort: tell it why */
    return TPX_ERR_NO_RESOURCE;
}

/* The message an IDENT signs, by the client side or the server side. */
static tpx_status_t ident_message(tpx_peer_t *p, setup_t *s, int signer_is_client,
                                  const unsigned char pk[TPX_IDENT_PK],
                                  unsigned char msg[TPX_IDENT_MSG_SIZE])
{
    uint8_t tr[TPX_BS_TRANSCRIPT_SIZE];
    tpx_status_t st = tpx__bs_transcript(p->bs, tr);
    if (st != TPX_OK)
        return st;
    int me_client = tpx__bs_is_client(p->bs);
    tpx__ident_message(signer_is_client, tr, me_client ? s->info_mine : s->info_theirs,
                       me_client ? s->info_theirs : s->info_mine, pk, msg);
    return TPX_OK;
}

/* The transcript and both INFO hashes, as (client, server). */
static tpx_status_t conn_hashes(tpx_peer_t *p, setup_t *s, uint8_t tr[TPX_BS_TRANSCRIPT_SIZE],
                                const unsigned char **cih, const unsigned char **sih)
{
    int me_client = tpx__bs_is_client(p->bs);
    *cih = me_client ? s->info_mine : s->info_theirs;
    *sih = me_client ? s->info_theirs : s->info_mine;
    return tpx__bs_transcript(p->bs, tr);
}

/* The token that wraps tickets on this connection: the engine's, when the
 * handshake proved both ends hold it; else none. */
static const char *wrap_token(const tpx_peer_t *p)
{
    return tpx__bs_authenticated(p->bs) ? p->e->cfg.auth_token : NULL;
}

/* Both INFOs are known: prove who we are (KEY mode) or say we cannot; the
 * client presents its ticket of the server's instance (if it holds one),
 * the server answers it and offers a ticket of its own instance. */
static tpx_status_t ident_send(tpx_peer_t *p, setup_t *s)
{
    tpx_engine_t *e = p->e;
    tpx_ident_msg_t im;
    memset(&im, 0, sizeof(im));
    const unsigned char *pk, *sk;
    if (tpx__ident_engine_keys(e, &pk, &sk)) {
        unsigned char msg[TPX_IDENT_MSG_SIZE];
        tpx_status_t st = ident_message(p, s, tpx__bs_is_client(p->bs), pk, msg);
        if (st == TPX_OK)
            st = tpx__ident_sign(sk, msg, sizeof(msg), im.sig);
        if (st != TPX_OK) {
            TPX_ERROR("peer %s: cannot sign the identity proof", p->name);
            return st;
        }
        im.flags |= TPX_IDENT_F_KEY;
        memcpy(im.pk, pk, sizeof(im.pk));
    }
    if (tpx__bs_is_client(p->bs)) {
        if (s->present) {
            im.flags |= TPX_IDENT_F_TICKET;
            memcpy(im.ticket_id, s->ticket_id, sizeof(im.ticket_id));
        }
    } else {
        uint8_t tr[TPX_BS_TRANSCRIPT_SIZE];
        const unsigned char *cih, *sih;
        tpx_status_t st = conn_hashes(p, s, tr, &cih, &sih);
        if (st == TPX_OK)
            st = tpx__random_bytes(im.offer_id, sizeof(im.offer_id));
        if (st != TPX_OK)
            return st;
        unsigned char t[TPX_IDENT_TICKET];
        if (s->peer_asks) {
            tpx__ident_engine_ticket(e, s->peer_ticket_id, t);
            tpx__ident_proof(t, tr, cih, sih, im.proof);
            im.flags |= TPX_IDENT_F_PROOF;
        }
        tpx__ident_engine_ticket(e, im.offer_id, im.offer);
        tpx__ident_wrap(wrap_token(p), tr, im.offer);
        im.flags |= TPX_IDENT_F_OFFER;
        tpx__secure_zero(t, sizeof(t));
    }
    unsigned char buf[TPX_IDENT_WIRE_SIZE];
    tpx__ident_encode(&im, buf);
    tpx_status_t st = tpx__bs_send(p->bs, MSG_IDENT, buf, sizeof(buf));
    tpx__secure_zero(buf, sizeof(buf));
    tpx__secure_zero(&im, sizeof(im));
    return st;
}

/* The client's side of the instance check: keep the ticket the server
 * offered and judge its answer to ours (the remote decides what a missing
 * or wrong answer means: tpx__peer_same_instance). */
static tpx_status_t ident_instance(tpx_peer_t *p, setup_t *s, const tpx_ident_msg_t *im)
{
    if (!(im->flags & TPX_IDENT_F_OFFER) || (im->flags & TPX_IDENT_F_TICKET)) {
        SETUP_ERR(p, "peer %s: its identity message offers no ticket of its instance: dropped",
                  p->name);
        return TPX_ERR_PROTOCOL;
    }
    uint8_t tr[TPX_BS_TRANSCRIPT_SIZE];
    const unsigned char *cih, *sih;
    tpx_status_t st = conn_hashes(p, s, tr, &cih, &sih);
    if (st != TPX_OK)
        return st;
    p->inst_offered = 1;
    memcpy(p->inst_offer_id, im->offer_id, sizeof(p->inst_offer_id));
    memcpy(p->inst_offer, im->offer, sizeof(p->inst_offer));
    tpx__ident_wrap(wrap_token(p), tr, p->inst_offer);
    if (s->present && (im->flags & TPX_IDENT_F_PROOF)) {
        unsigned char want[TPX_IDENT_TICKET];
        tpx__ident_proof(s->ticket, tr, cih, sih, want);
        p->inst_proven = tpx__ct_equal(want, im->proof, sizeof(want));
        memcpy(p->inst_proven_id, s->ticket_id, sizeof(p->inst_proven_id));
    }
    return TPX_OK;
}

/* The peer's IDENT: a key that does not verify, or that is not the key of
 * the id it claimed in INFO, ends the connection. */
static tpx_status_t ident_recv(tpx_peer_t *p, setup_t *s)
{
    unsigned char buf[TPX_IDENT_WIRE_SIZE];
    uint16_t type;
    uint32_t len;
    tpx_status_t st = tpx__bs_recv(p->bs, &type, buf, sizeof(buf), &len);
    if (st != TPX_OK)
        return st;
    tpx_ident_msg_t im;
    if (type == MSG_BUSY)
        return peer_busy_received(p);
    if (type != MSG_IDENT || tpx__ident_decode(buf, len, &im) != TPX_OK) {
        int v = type == MSG_IDENT ? tpx__ident_version(buf, len) : -1;
        if (v >= 0 && v != TPX_IDENT_VERSION)
            SETUP_ERR(p, "peer %s speaks identity protocol version %d, this engine %d: both ends "
                      "need the same tpx version", p->name, v, TPX_IDENT_VERSION);
        else
            SETUP_ERR(p, "peer %s: malformed identity message", p->name);
        return TPX_ERR_PROTOCOL;
    }
    if (tpx__bs_is_client(p->bs)) {
        if ((st = ident_instance(p, s, &im)) != TPX_OK)
            return st;
    } else {
        if (im.flags & (TPX_IDENT_F_PROOF | TPX_IDENT_F_OFFER)) {
            SETUP_ERR(p, "peer %s: a client's identity message offers a ticket: dropped", p->name);
            return TPX_ERR_PROTOCOL;
        }
        s->peer_asks = !!(im.flags & TPX_IDENT_F_TICKET);
        memcpy(s->peer_ticket_id, im.ticket_id, sizeof(s->peer_ticket_id));
    }
    if (!(im.flags & TPX_IDENT_F_KEY) || !tpx__ident_available())
        return TPX_OK; /* not proven: p->verified stays 0 */
    unsigned char msg[TPX_IDENT_MSG_SIZE];
    if ((st = ident_message(p, s, !tpx__bs_is_client(p->bs), im.pk, msg)) != TPX_OK)
        return st;
    if (tpx__ident_id(im.pk) != p->remote_id ||
        !tpx__ident_verify(im.pk, msg, sizeof(msg), im.sig)) {
        SETUP_ERR(p, "peer %s (claims engine %016llx, \"%s\"): its identity proof does not verify: "
                  "dropped", p->name, (unsigned long long)p->remote_id, p->remote_name);
        return TPX_ERR_PROTOCOL;
    }
    p->verified = 1;
    memcpy(p->remote_pk, im.pk, sizeof(p->remote_pk));
    return TPX_OK;
}

/* ---- steering: where an incoming peer's handles may send our connects ----------------- */

/* An address as IPv4 (a mapped IPv6 one too): 1 and *v4 (host order), else 0. */
static int addr_v4(const struct sockaddr *sa, uint32_t *v4)
{
    if (sa->sa_family == AF_INET) {
        *v4 = ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr);
        return 1;
    }
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
    if (sa->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
        memcpy(v4, &s6->sin6_addr.s6_addr[12], 4);
        *v4 = ntohl(*v4);
        return 1;
    }
    return 0;
}

/* 1: loopback or unspecified (a connect there reaches this host). */
static int addr_is_local_only(const struct sockaddr *sa)
{
    uint32_t v4;
    if (addr_v4(sa, &v4))
        return (v4 >> 24) == 127 || v4 == 0;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
    return sa->sa_family == AF_INET6 &&
           (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) || IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr));
}

/* 1: an address of this host (a socket can be bound to it). */
static int addr_is_ours(const struct sockaddr_storage *ss)
{
    struct sockaddr_storage a = *ss;
    socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in);
    if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&a)->sin6_port = 0;
    else
        ((struct sockaddr_in *)&a)->sin_port = 0;
    int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int ok = bind(fd, (struct sockaddr *)&a, len) == 0;
    close(fd);
    return ok;
}

/* addr_is_ours() of a handle's address. */
static int addr_sa_is_ours(const struct sockaddr *sa)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in));
    return (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) && addr_is_ours(&ss);
}

/* 1: the same IP address (IPv4-mapped IPv6 counts as IPv4). */
static int addr_same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
    uint32_t va = 0, vb = 0;
    int a4 = addr_v4(a, &va), b4 = addr_v4(b, &vb);
    if (a4 || b4)
        return a4 && b4 && va == vb;
    return a->sa_family == AF_INET6 && b->sa_family == AF_INET6 &&
           memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr, 16) == 0;
}

/* An incoming peer that no token authenticated must not steer this
 * engine's connects (handles are read where the plugin can say where they
 * lead, net.h tpx__net_handle_addrs: the built-in transport; other
 * plugins' are opaque): every address its handles name must be the one its
 * bootstrap connection came from (a local peer, on a loopback address, may
 * also name this host's other addresses: it could connect there itself).
 * Data NICs rightly differ from the
 * bootstrap address on multi-NIC hosts: there a token authenticates the
 * peer, or TPX_TRUST_HANDLES=1 (a trusted network) falls back to the
 * weaker rule: a remote peer may not name loopback or unspecified
 * addresses, a peer on another IPv4 loopback address may not name this
 * one's (SECURITY.md). */
static tpx_status_t handles_check(tpx_peer_t *p, int inbound,
                                  unsigned char (*their)[TPX_BS_HANDLE_SIZE], int n)
{
    struct sockaddr_storage peer;
    if (!inbound || tpx__bs_authenticated(p->bs) || !tpx__net_reads_handles(p->e->net) ||
        tpx__bs_peer_addr(p->bs, &peer) != TPX_OK)
        return TPX_OK;
    uint32_t pv4 = 0;
    int peer_v4 = addr_v4((struct sockaddr *)&peer, &pv4);
    int peer_loop = addr_is_local_only((struct sockaddr *)&peer);
    if (!peer_loop && addr_is_ours(&peer))
        return TPX_OK; /* another process of this host: it can connect anywhere itself */
    int own_only = tpx__config_int(TPX_CFG_TRUST_HANDLES) == 0;
    for (int i = 0; i < n; i++) {
        struct sockaddr_storage addrs[TPX_NET_EXT_HANDLE_ADDRS_MAX];
        int naddrs =
            tpx__net_handle_addrs(p->e->net, their[i], addrs, TPX_NET_EXT_HANDLE_ADDRS_MAX);
        if (naddrs < 0)
            continue; /* the plugin refuses it */
        if (naddrs > TPX_NET_EXT_HANDLE_ADDRS_MAX) {
            SETUP_ERR(p, "peer %s (not authenticated by a token) names %d addresses in a "
                      "connect handle (at most %d are checked): refused",
                      p->name, naddrs, TPX_NET_EXT_HANDLE_ADDRS_MAX);
            return TPX_ERR_PROTOCOL;
        }
        for (int k = 0; k < naddrs; k++) {
            const struct sockaddr *a = (const struct sockaddr *)&addrs[k];
            uint32_t v4;
            if (own_only && !addr_same_ip(a, (const struct sockaddr *)&peer) &&
                !(peer_loop && !addr_is_local_only(a) && addr_sa_is_ours(a))) {
                SETUP_ERR(p, "peer %s (not authenticated by a token) names an address other than "
                          "its own in its connect handles: refused (multi-NIC peers: set "
                          "TPX_AUTH_TOKEN; a trusted network: TPX_TRUST_HANDLES=1)",
                          p->name);
                return TPX_ERR_PROTOCOL;
            }
            int bad = peer_loop ? (peer_v4 && addr_v4(a, &v4) && (v4 >> 24) == 127 && v4 != pv4)
                                : addr_is_local_only(a);
            if (bad) {
                SETUP_ERR(p, "peer %s (not authenticated by a token) names a loopback address of "
                          "this host in its connect handles: refused",
                          p->name);
                return TPX_ERR_PROTOCOL;
            }
        }
    }
    return TPX_OK;
}

static tpx_status_t setup_info(tpx_peer_t *p, setup_t *s)
{
    tpx_engine_t *e = p->e;
    unsigned char buf[TPX_BS_INFO_MAX_SIZE];
    uint16_t type;
    uint32_t len;
    tpx_status_t st = tpx__bs_recv(p->bs, &type, buf, sizeof(buf), &len);
    if (st != TPX_OK)
        return st;
    tpx_bs_info_t info;
    if (type == MSG_BUSY)
        return peer_busy_received(p);
    if (type != TPX_BS_MSG_INFO || tpx__bs_info_decode(buf, len, &info) != TPX_OK ||
        info.nhandles < 2) {
        SETUP_ERR(p, "peer %s: malformed INFO message", p->name);
        return TPX_ERR_PROTOCOL;
    }
    tpx__sha256(buf, len, s->info_theirs);
    if (strcmp(info.plugin, e->net->name) != 0) {
        SETUP_ERR(p, "peer %s uses net plugin '%s', this engine '%s': both sides must use the same",
                  p->name, info.plugin, e->net->name);
        return TPX_ERR_PROTOCOL;
    }
    if (info.chunk_bytes < 4096 || info.chunk_bytes > 4u * 1024 * 1024) {
        SETUP_ERR(p, "peer %s: chunk size %u out of range", p->name, info.chunk_bytes);
        return TPX_ERR_PROTOCOL;
    }
    p->remote_id = info.engine_id;
    snprintf(p->remote_name, sizeof(p->remote_name), "%s", info.name);
    /* Both sides compute the same agreement. */
    p->nchan = TPX_MIN(e->cfg.nchan, info.nhandles - 1);
    p->send_live = p->recv_live = (uint32_t)(((uint64_t)1 << p->nchan) - 1);
    p->chunk = TPX_MIN(e->cfg.chunk, info.chunk_bytes);
    /* Runs (xfer.h: two-sided transfers, READs) of up to 4 MiB per message; not on TCPX, whose
     * devmem receives are unpacked per request (the name says so on both
     * sides: they use the same plugin, checked above). */
    p->run_max = e->net->is_tcpx ? 1u : TPX_MAX(1u, (4u << 20) / p->chunk);
    memcpy(s->their, info.handles, TPX_BS_HANDLE_SIZE);
    if ((st = handles_check(p, s->inbound, s->their, 1)) != TPX_OK)
        return st;
    pthread_mutex_lock(&e->lock);
    p->ctrl_send = comm_new(p, 1, 1, -1, chan_dev(e, 0));
    p->ctrl_recv = comm_new(p, 0, 1, -1, chan_dev(e, 0));
    for (int k = 0; k < p->nchan; k++) {
        p->send[k] = comm_new(p, 1, 0, k, chan_dev(e, k));
        p->recv[k] = comm_new(p, 0, 0, k, chan_dev(e, k));
    }
    pthread_mutex_unlock(&e->lock);
    if (p->ctrl_send == NULL || p->ctrl_recv == NULL)
        return TPX_ERR_NO_MEMORY;
    for (int k = 0; k < p->nchan; k++)
        if (p->send[k] == NULL || p->recv[k] == NULL)
            return TPX_ERR_NO_MEMORY;
    return TPX_OK;
}

/* One pass of connect/accept over a channel's pair of comms (ctrl: the
 * control channel); *all cleared while one does not exist yet. Lock held. */
static tpx_status_t pair_connect(tpx_engine_t *e, tpx_comm_t *sc, tpx_comm_t *rc, int ctrl,
                                 unsigned char *their, void *listen, int *all)
{
    tpx_status_t st = TPX_OK;
    if (sc->comm == NULL) {
        tpx_ncclnet_dev_handle_t *dh = (tpx_ncclnet_dev_handle_t *)sc->devh;
        sc->connecting = 1;
        st = ctrl ? tpx__net_connect_small(e->net, sc->dev, their, &sc->comm, &dh)
                  : tpx__net_connect_socks(e->net, sc->dev, their, &sc->comm, &dh, e->cfg.chan_socks);
        if (st != TPX_OK || sc->comm != NULL)
            sc->connecting = 0; /* the plugin ended it */
        *all &= sc->comm != NULL;
    }
    if (st == TPX_OK && rc->comm == NULL) {
        tpx_ncclnet_dev_handle_t *dh = (tpx_ncclnet_dev_handle_t *)rc->devh;
        st = tpx__net_accept(e->net, listen, &rc->comm, &dh);
        *all &= rc->comm != NULL;
    }
    return st;
}

/* One pass of connect/accept over the control comms; TPX_OK when both exist. */
static tpx_status_t setup_connect(tpx_peer_t *p, setup_t *s)
{
    tpx_engine_t *e = p->e;
    int all = 1;
    pthread_mutex_lock(&e->lock);
    int gtok = tpx__window_gpu_enter(e);
    tpx_status_t st = pair_connect(e, p->ctrl_send, p->ctrl_recv, 1, s->their[0], s->listen[0], &all);
    tpx__window_gpu_leave(gtok);
    pthread_mutex_unlock(&e->lock);
    if (st != TPX_OK) {
        SETUP_ERR(p, "peer %s: establishing the plugin's connections failed (%s)", p->name,
                  tpx_status_string(st));
        return st;
    }
    return all ? TPX_OK : TPX_INPROGRESS;
}

/* Control buffers, scratch, and the always-posted control receives. */
static tpx_status_t peer_go_live(tpx_peer_t *p)
{
    tpx_engine_t *e = p->e;
    size_t nbuf = 2 * (size_t)e->cfg.window;
    /* aligned_alloc wants the size to be a multiple of the alignment */
    p->ctrl_buf = aligned_alloc(4096, (nbuf * TPX_CTRL_BUF_SLOT + 4095) & ~(size_t)4095);
    size_t scratch = (size_t)p->run_max * p->chunk;
    p->scratch = aligned_alloc(4096, (scratch + 4095) & ~(size_t)4095);
    if (p->ctrl_buf == NULL || p->scratch == NULL)
        return TPX_ERR_NO_MEMORY;
    tpx__tsan_benign(p->scratch, scratch); /* discarded bytes: every channel writes here */
    memset(p->ctrl_buf, 0, nbuf * TPX_CTRL_BUF_SLOT);
    tpx_status_t st;
    /* Devmem plugins: the receive comm's unpack handle, copied down once
     * (the data channels' as they open). */
    TPX_CHECK_GOTO(tpx__comm_unpack_load(p->ctrl_recv), st, out);
    /* Each direction of the control stream over the bootstrap connection
     * from READY on, when its sender said so (wire.h READY): that stream
     * never moves back to a comm, so the comm it would have used closes
     * now, at both ends (with both directions there, an idle peer holds
     * its bootstrap connection only). The peer's receive comm waits for
     * nothing from our send comm only if it read our flags: an engine that
     * predates them keeps its receive comm posted, and ours stays open,
     * idle, so that it sees no close it would take for a failure. */
    p->ctrl_bs_rx = (p->ready.flags & TPX_READY_CTRL_BS) != 0;
    p->ctrl_bs_tx = e->cfg.ctrl_bootstrap;
    if (p->ctrl_bs_tx && p->ready.known)
        tpx__comm_close_plugin(e, p->ctrl_send);
    if (p->ctrl_bs_rx)
        tpx__comm_close_plugin(e, p->ctrl_recv); /* no receive is posted on it */
    TPX_CHECK_GOTO(tpx__region_create(e, p->ctrl_buf, nbuf * TPX_CTRL_BUF_SLOT, TPX_MEM_HOST, 1,
                                      &p->ctrl_region), st, out);
    TPX_CHECK_GOTO(tpx__region_create(e, p->scratch, scratch, TPX_MEM_HOST, 1,
                                      &p->scratch_region), st, out);
    for (int i = 0; i < e->cfg.window; i++)
        p->ctrl_send_free[p->ctrl_send_nfree++] = (uint32_t)(e->cfg.window - 1 - i);
    tpx_comm_t *c = p->ctrl_recv;
    void *mh = NULL;
    if (!p->ctrl_bs_rx)
        TPX_CHECK_GOTO(tpx__region_mh(p->ctrl_region, c->id, c->comm, 0, &mh), st, out);
    for (int i = 0; i < e->cfg.window && !p->ctrl_bs_rx; i++) {
        unsigned char *buf = p->ctrl_buf + (size_t)i * TPX_CTRL_BUF_SLOT;
        st = tpx__window_post(c, buf, TPX_CTRL_BUF_SLOT, mh,
                              &(tpx_slot_t){.kind = SLOT_CTRL, .dst_dev = -1, .dst = buf,
                                            .ctrl = (uint16_t)i});
        if (st == TPX_ERR_CONN_RESET) {
            /* The peer closed right after its READY (a client that connects
             * and leaves at once) and the plugin saw it before this post:
             * the peer is set up all the same and fails now, as it would a
             * moment later, so tpx_peer_accept still hands it out instead
             * of it vanishing unlogged, whichever side was faster. */
            p->state = PEER_READY;
            tpx__peer_fail(p, st, "the peer closed the connection as it was set up");
            return TPX_OK;
        }
        if (st == TPX_INPROGRESS) {
            TPX_ERROR("peer %s: plugin refused a control receive", p->name);
            return TPX_ERR_PLUGIN;
        }
        if (st < 0)
            goto out;
    }
    p->state = PEER_READY;
    p->active_ns = tpx__now_ns();
out:
    return st;
}

static void setup_close_listens(tpx_engine_t *e, setup_t *s)
{
    for (int i = 0; i < s->nlisten; i++) {
        tpx__net_close_listen(e->net, s->listen[i]);
        s->listen[i] = NULL;
    }
}

/* Advance a peer's set-up; TPX_OK once it is READY. Engine lock not held. */
static tpx_status_t setup_advance(tpx_peer_t *p)
{
    setup_t *s = p->setup;
    tpx_engine_t *e = p->e;
    tpx_status_t st = TPX_INPROGRESS;
    for (;;) {
        if (s->early_ns != 0 && s->stage <= ST_IDENT && tpx__now_ns() >= s->early_ns &&
            s->stage != ST_HANDSHAKE) {
            SETUP_ERR(p, "peer %s: did not identify itself within %d ms: dropped", p->name,
                      EARLY_STAGE_MS);
            return TPX_ERR_TIMED_OUT;
        }
        if (tpx__now_ns() >= s->deadline_ns && s->stage != ST_HANDSHAKE) {
            SETUP_ERR(p, "peer %s: set-up not finished within %d ms (TPX_CONNECT_TIMEOUT_MS)",
                      p->name, e->cfg.connect_timeout_ms);
            return TPX_ERR_TIMED_OUT;
        }
        switch (s->stage) {
        case ST_HANDSHAKE:
            st = tpx__bs_advance(p->bs); /* has its own deadline */
            if (st != TPX_OK)
                return st;
            snprintf(p->name, sizeof(p->name), "%s", tpx__bs_peer_str(p->bs));
            if (s->inbound && (st = peer_admit(p, 0)) != TPX_OK)
                return st;
            if ((st = setup_begin(p, s)) != TPX_OK)
                return st;
            s->stage = ST_INFO;
            continue;
        case ST_INFO:
            st = tpx__bs_flush(p->bs);
            if (st < 0)
                return st;
            st = setup_info(p, s);
            if (st != TPX_OK)
                return st;
            /* The client proves itself first; the server answers once it
             * admitted the client (or tells it that it is busy). */
            if (tpx__bs_is_client(p->bs) && (st = ident_send(p, s)) != TPX_OK)
                return st;
            s->stage = ST_IDENT;
            continue;
        case ST_IDENT:
            st = ident_recv(p, s);
            if (st != TPX_OK)
                return st;
            if (!tpx__bs_is_client(p->bs)) {
                if (s->inbound && (st = peer_admit(p, 1)) != TPX_OK)
                    return st;
                if ((st = ident_send(p, s)) != TPX_OK)
                    return st;
            }
            s->stage = ST_CONNECT;
            continue;
        case ST_CONNECT:
            st = setup_connect(p, s);
            if (st != TPX_OK)
                return st;
            unsigned char rf[TPX_READY_WIRE_SIZE];
            tpx__ready_encode(e->cfg.ctrl_bootstrap ? TPX_READY_CTRL_BS : 0, rf);
            /* (testing, TPX_FAULT_READY_OLD: an engine that predates the flags) */
            if ((st = tpx__bs_send(p->bs, MSG_READY, rf,
                                   tpx__faults.ready_old ? 0 : sizeof(rf))) != TPX_OK)
                return st;
            s->stage = ST_READY_WAIT;
            continue;
        case ST_READY_WAIT: {
            uint16_t type;
            uint32_t len;
            unsigned char b[8];
            st = tpx__bs_recv(p->bs, &type, b, sizeof(b), &len);
            if (st != TPX_OK)
                return st;
            if (type == MSG_BUSY)
                return peer_busy_received(p);
            if (type != MSG_READY) {
                SETUP_ERR(p, "peer %s: unexpected bootstrap message %u", p->name, type);
                return TPX_ERR_PROTOCOL;
            }
            if (tpx__ready_decode(b, len, &p->ready) != TPX_OK) {
                SETUP_ERR(p, "peer %s: malformed READY message (%u bytes)", p->name, len);
                return TPX_ERR_PROTOCOL;
            }
            pthread_mutex_lock(&e->lock);
            int gtok = tpx__window_gpu_enter(e);
            st = peer_go_live(p);
            tpx__window_gpu_leave(gtok);
            if (st == TPX_OK) {
                /* A new peer's first one-sided request usually follows at
                 * once: poll hot, waking an idle owner from its nap, rather
                 * than leave the request for the next wake-up (a fresh
                 * peer's first READ took 100 ms; the requester rings only
                 * after 50 ms of quiet). */
                e->last_move_ns = tpx__now_ns();
                tpx__progress_kick(e);
            }
            setup_close_listens(e, s);
            pthread_mutex_unlock(&e->lock);
            if (st != TPX_OK)
                return st;
            s->stage = ST_DONE;
            tpx__secure_zero(s, sizeof(*s)); /* a ticket */
            free(s);
            p->setup = NULL;
            /* The limiter belongs to the bootstrap thread; other threads
             * use the connection from now on. */
            tpx__bs_set_loglimit(p->bs, NULL);
            TPX_INFO("peer %s: ready, %d channel(s), %u-byte chunks", p->name, p->nchan,
                     p->chunk);
            return TPX_OK;
        }
        default:
            return TPX_ERR_INTERNAL;
        }
    }
}

static tpx_status_t peer_new(tpx_engine_t *e, tpx_bs_conn_t *bs, tpx_peer_t **out)
{
    tpx_peer_t *p = calloc(1, sizeof(*p));
    setup_t *s = calloc(1, sizeof(*s));
    if (p == NULL || s == NULL) {
        free(p);
        free(s);
        return TPX_ERR_NO_MEMORY;
    }
    p->e = e;
    p->bs = bs;
    p->state = PEER_SETUP;
    p->setup = s;
    snprintf(p->name, sizeof(p->name), "%s", tpx__bs_peer_str(bs));
    s->deadline_ns = tpx__now_ns() + (uint64_t)e->cfg.connect_timeout_ms * 1000000ull;
    *out = p;
    return TPX_OK;
}

static void peer_link(tpx_peer_t *p)
{
    tpx_engine_t *e = p->e;
    pthread_mutex_lock(&e->lock);
    p->next = e->peers;
    e->peers = p;
    e->ctr.peers_connected++;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

/* peer.c's part of the engine (e->listener): the bootstrap thread that
 * accepts incoming peers, and the connects abandoned mid-way that must
 * still be driven to their end. This file's alone: engine.c calls
 * tpx__peer_listener_init, tpx__peer_listener_start/stop, tpx__peer_reap and
 * tpx__peer_reaping. */
struct tpx_listener_state {
    int wake;                  /* eventfd to wake the bootstrap thread; -1: none */
    pthread_t tid;
    int started;
    tpx_reap_t *reap;          /* abandoned connects still being driven (lock) */
};

tpx_status_t tpx__peer_listener_init(tpx_engine_t *e)
{
    e->listener = calloc(1, sizeof(*e->listener));
    if (e->listener == NULL)
        return TPX_ERR_NO_MEMORY;
    e->listener->wake = -1;
    return TPX_OK;
}

int tpx__peer_reaping(const tpx_engine_t *e)
{
    return e->listener->reap != NULL;
}

void tpx__peer_reap_sweep(tpx_engine_t *e)
{
    if (e->listener->reap != NULL && !e->listener->started)
        tpx__peer_reap(e);
}

void tpx__peer_listener_fini(tpx_engine_t *e)
{
    free(e->listener); /* its thread stopped, its connects reaped (tpx__engine_destroy) */
    e->listener = NULL;
}

/* Hand a comm whose connect() to `their` is in progress to the reaper. */
static void comm_abandon_connect(tpx_engine_t *e, tpx_comm_t *c, const unsigned char *their)
{
    if (c == NULL || c->comm != NULL || !c->connecting)
        return;
    tpx_reap_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return;
    r->dev = c->dev;
    memcpy(r->handle, their, TPX_BS_HANDLE_SIZE);
    r->next = e->listener->reap;
    e->listener->reap = r;
}

/* Drive abandoned connects; engine lock held. */
void tpx__peer_reap(tpx_engine_t *e)
{
    if (e->listener == NULL)
        return; /* an engine whose create failed early */
    for (tpx_reap_t **pp = &e->listener->reap; *pp != NULL;) {
        tpx_reap_t *r = *pp;
        void *comm = NULL;
        tpx_ncclnet_dev_handle_t *dh = (tpx_ncclnet_dev_handle_t *)r->devh;
        tpx_status_t st = tpx__net_connect(e->net, r->dev, r->handle, &comm, &dh);
        if (st == TPX_OK && comm == NULL && !atomic_load(&e->stop)) {
            pp = &r->next;
            continue;
        }
        if (comm != NULL)
            tpx__net_close_send(e->net, comm);
        *pp = r->next;
        free(r);
    }
}

static void comm_close(tpx_engine_t *e, tpx_comm_t *c)
{
    if (c == NULL)
        return;
    if (c->rj_listen != NULL)
        tpx__net_close_listen(e->net, c->rj_listen);
    c->rj_listen = NULL;
    if (c->rj_got)
        comm_abandon_connect(e, c, c->rj_their);
    tpx__comm_close_plugin(e, c);
    tpx__pack_comm_fini(c);
    free(c);
}

/* Close *cp and clear it first: nothing that runs on the way (a region
 * released by the close) finds the peer holding a comm half closed. */
static void comm_close_at(tpx_engine_t *e, tpx_comm_t **cp)
{
    tpx_comm_t *c = *cp;
    *cp = NULL;
    comm_close(e, c);
}

/* ---- data channels, opened when first used ------------------------------------------ */

/* End an opening: its listens close, connects in progress go to the
 * reaper. Lock held. */
static void chan_open_free(tpx_peer_t *p)
{
    tpx_chan_open_t *c = p->chan;
    if (c == NULL)
        return;
    for (int k = 0; k < p->nchan; k++) {
        if (c->got)
            comm_abandon_connect(p->e, p->send[k], c->their[k]);
        if (c->listen[k] != NULL)
            tpx__net_close_listen(p->e->net, c->listen[k]);
    }
    free(c);
    p->chan = NULL;
}

/* A transfer has chunks waiting for a data channel. */
static int chan_wanted(const tpx_peer_t *p)
{
    for (int k = 0; k < p->nchan; k++)
        if (p->send[k]->q_head != NULL || p->recv[k]->q_head != NULL)
            return 1;
    return 0;
}

/* Listen on every data channel and send the handles (MSG_CHAN). */
static tpx_status_t chan_listen(tpx_peer_t *p, tpx_chan_open_t *c)
{
    tpx_engine_t *e = p->e;
    unsigned char h[TPX_MAX_CHANNELS][TPX_BS_HANDLE_SIZE];
    memset(h, 0, sizeof(h));
    for (int k = 0; k < p->nchan; k++) {
        tpx_status_t st = tpx__net_listen(e->net, chan_dev(e, k), h[k], &c->listen[k]);
        if (st != TPX_OK) {
            TPX_ERROR("peer %s: listen on plugin %s failed (data channel %d)", p->name,
                      e->net->name, k);
            return st;
        }
    }
    c->sent = 1;
    return tpx__bs_send(p->bs, MSG_CHAN, h, (uint32_t)p->nchan * TPX_BS_HANDLE_SIZE);
}

/* Read p's pending bootstrap frames (bounded); the doorbells among them. */
void tpx__peer_frames_pass(tpx_peer_t *p)
{
    if (TPX_UNLIKELY(p->ctrl_bs_rx || p->ctrl_bs_tx) && p->state == PEER_READY &&
        p->bs != NULL && p->bs_eof_ns == 0) {
        (void)tpx__bs_flush(p->bs);
        p->e->nbells += (uint64_t)tpx__peer_frames(p, tpx__now_ns());
    }
}

void tpx__peer_chan_drive(tpx_peer_t *p)
{
    if (TPX_LIKELY(p->chan_state == CHAN_OPEN) || p->state != PEER_READY)
        return;
    tpx_engine_t *e = p->e;
    if (p->chan_state == CHAN_CLOSED) {
        if (!chan_wanted(p))
            return;
        if ((p->chan = calloc(1, sizeof(*p->chan))) == NULL) {
            tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory to open its data channels");
            return;
        }
        p->chan_state = CHAN_OPENING;
    }
    tpx_chan_open_t *c = p->chan;
    tpx_status_t st = TPX_OK;
    if (!c->sent && (st = chan_listen(p, c)) != TPX_OK) {
        tpx__peer_fail(p, st, "opening its data channels failed");
        return;
    }
    /* Until the peer's handles come, an engine with a progress thread
     * naps: they wake it on the bootstrap fd (tpx__peer_bells), and a
     * peer that does not need its channels yet costs no CPU. */
    if (!c->got && p->bs != NULL && p->bs_eof_ns == 0)
        (void)tpx__peer_frames(p, tpx__now_ns());
    if (!c->got || p->state != PEER_READY)
        return;
    e->last_move_ns = tpx__now_ns(); /* both sides connect now: poll hot */
    if (!c->checked) {
        if (handles_check(p, p->inbound, c->their, p->nchan) != TPX_OK) {
            tpx__peer_fail(p, TPX_ERR_PROTOCOL, "its data channels' handles were refused");
            return;
        }
        c->checked = 1;
    }
    int all = 1;
    for (int k = 0; k < p->nchan && st == TPX_OK; k++)
        st = pair_connect(e, p->send[k], p->recv[k], 0, c->their[k], c->listen[k], &all);
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, "establishing its data channels failed");
        return;
    }
    if (!all)
        return;
    /* Devmem plugins: each receive comm's unpack handle, copied down once. */
    for (int k = 0; k < p->nchan && st == TPX_OK; k++)
        st = tpx__comm_unpack_load(p->recv[k]);
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, "loading its data channels' unpack handles failed");
        return;
    }
    chan_open_free(p);
    p->chan_state = CHAN_OPEN;
    TPX_INFO("peer %s: %d data channel(s) open", p->name, p->nchan);
}

/* ---- a lost data channel, connected again ----------------------------------------------
 *
 * Once a receive channel's repair is done (peer_repair.c), its receiver
 * listens on the channel's device again and sends the handle (TPX_MSG_REJOIN);
 * the sender connects, and a connect that fails (the NIC still down) is
 * tried again from the same handle after a wait that doubles up to 250 ms, so
 * a NIC that comes back carries traffic within a second. A connect
 * that fails is no failure of the peer. Once connected, the sender
 * announces REJOIN on its control stream and deals to the channel from the
 * next stream on; the receiver does the same from REJOIN's turn among the
 * messages with data (peer_repair.c), so FIFO plugins pair every buffer.
 * The receiver's accept may finish after that turn: the channel's chunks
 * wait on its queue until it has. */

#define REJOIN_BACKOFF_MIN_MS 10u
#define REJOIN_BACKOFF_MAX_MS 250u

static void rejoin_later(tpx_comm_t *c, uint64_t now)
{
    c->rj_next_ns = now + (uint64_t)c->rj_backoff_ms * 1000000ull;
    c->rj_backoff_ms = TPX_MIN(2 * c->rj_backoff_ms, REJOIN_BACKOFF_MAX_MS);
}

/* The receiver of channel k's direction: listen and send the handle, then
 * accept. */
static void rejoin_recv_drive(tpx_peer_t *p, int k, uint64_t now)
{
    tpx_engine_t *e = p->e;
    tpx_comm_t *c = p->recv[k];
    if (c->rj_listen != NULL) {
        if (c->comm != NULL)
            return;
        tpx_ncclnet_dev_handle_t *dh = (tpx_ncclnet_dev_handle_t *)c->devh;
        tpx_status_t st = tpx__net_accept(e->net, c->rj_listen, &c->comm, &dh);
        if (st == TPX_OK && c->comm == NULL)
            return;
        tpx__net_close_listen(e->net, c->rj_listen);
        c->rj_listen = NULL;
        c->nic_up = 0; /* its NIC's link flag may lag (peer_sweep.c) */
        if (st == TPX_OK)
            st = tpx__comm_unpack_load(c);
        if (st != TPX_OK) {
            /* Its stream may already be dealt to it: the peer cannot go on. */
            char why[160];
            snprintf(why, sizeof(why), "accepting lost data channel %d again failed (%s)", k,
                     tpx_status_string(st));
            tpx__peer_fail(p, st, why);
            return;
        }
        e->last_move_ns = now;
        return;
    }
    uint32_t bit = 1u << k;
    if (!c->dead || c->comm != NULL || (p->recv_live & bit) || (p->rx_lost & bit) ||
        p->remote_closed || now < c->rj_next_ns)
        return;
    unsigned char frame[1 + TPX_BS_HANDLE_SIZE];
    memset(frame, 0, sizeof(frame));
    frame[0] = (unsigned char)k;
    if (c->rj_backoff_ms == 0)
        c->rj_backoff_ms = REJOIN_BACKOFF_MIN_MS;
    if (tpx__net_listen(e->net, c->dev, frame + 1, &c->rj_listen) != TPX_OK) {
        c->rj_listen = NULL;
        rejoin_later(c, now);
        return;
    }
    if (tpx__bs_send(p->bs, TPX_MSG_REJOIN, frame, sizeof(frame)) != TPX_OK) {
        tpx__net_close_listen(e->net, c->rj_listen);
        c->rj_listen = NULL;
        rejoin_later(c, now);
        return;
    }
    TPX_INFO("peer %s: connecting lost data channel %d again", p->name, k);
}

/* The sender of channel k's direction: connect to the peer's handle. */
static void rejoin_send_drive(tpx_peer_t *p, int k, uint64_t now)
{
    tpx_engine_t *e = p->e;
    tpx_comm_t *c = p->send[k];
    if (!c->rj_got || now < c->rj_next_ns)
        return;
    if (!c->rj_checked) {
        if (handles_check(p, p->inbound, &c->rj_their0, 1) != TPX_OK) {
            tpx__peer_fail(p, TPX_ERR_PROTOCOL, "its lost data channel's new handle was refused");
            return;
        }
        c->rj_checked = 1;
    }
    if (!c->connecting) {
        memcpy(c->rj_their, c->rj_their0, TPX_BS_HANDLE_SIZE); /* a connect writes its state there */
        memset(c->devh, 0, sizeof(c->devh));
    }
    tpx_ncclnet_dev_handle_t *dh = (tpx_ncclnet_dev_handle_t *)c->devh;
    c->connecting = 1;
    tpx_status_t st = tpx__net_connect_socks(e->net, c->dev, c->rj_their, &c->comm, &dh,
                                             e->cfg.chan_socks);
    if (st == TPX_OK && c->comm == NULL)
        return;
    c->connecting = 0;
    if (st != TPX_OK) {
        c->comm = NULL;
        if (c->rj_backoff_ms == 0)
            c->rj_backoff_ms = REJOIN_BACKOFF_MIN_MS;
        TPX_DEBUG("peer %s: connecting lost data channel %d again failed (%s); again in %u ms",
                  p->name, k, tpx_status_string(st), c->rj_backoff_ms);
        rejoin_later(c, now);
        return;
    }
    c->rj_got = 0;
    c->rj_checked = 0;
    c->rj_backoff_ms = 0;
    tpx__peer_rejoin_send(p, c);
    e->last_move_ns = now;
}

void tpx__peer_rejoin_drive(tpx_peer_t *p, uint64_t now)
{
    if (p->state != PEER_READY || p->chan_state != CHAN_OPEN || !p->e->cfg.failover ||
        p->bs == NULL || p->bs_eof_ns != 0)
        return;
    uint32_t all = (uint32_t)(((uint64_t)1 << p->nchan) - 1);
    int busy = p->recv_live != all;
    for (int k = 0; k < p->nchan && !busy; k++)
        busy = p->recv[k]->rj_listen != NULL || p->send[k]->rj_got;
    if (!busy)
        return; /* the common case: nothing lost, or nothing to do about it */
    int gtok = tpx__window_gpu_enter(p->e);
    for (int k = 0; k < p->nchan && p->state == PEER_READY; k++) {
        rejoin_recv_drive(p, k, now);
        if (p->state == PEER_READY)
            rejoin_send_drive(p, k, now);
    }
    tpx__window_gpu_leave(gtok);
}

void tpx__peer_close_failed(tpx_engine_t *e)
{
    /* A failed peer's transfers have ended and their users may free the
     * memory at once: the plugin must stop touching it, so its comms close
     * now (not from inside their own progress, hence here). */
    if (!e->failed_open && !tpx__prep_zombies_any(e))
        return; /* the common case, on every progress pass */
    e->failed_open = 0;
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next)
        if (p->state == PEER_FAILED && (p->ctrl_send != NULL || p->ctrl_recv != NULL))
            tpx__peer_close_comms(p);
    tpx__prep_zombies_free(e);
}

void tpx__peer_close_comms(tpx_peer_t *p)
{
    tpx_engine_t *e = p->e;
    chan_open_free(p);
    tpx__peer_ctrl_kept_free(p);
    comm_close_at(e, &p->ctrl_send);
    comm_close_at(e, &p->ctrl_recv);
    for (int k = 0; k < p->nchan; k++) {
        comm_close_at(e, &p->send[k]);
        comm_close_at(e, &p->recv[k]);
    }
    /* The peer learns it at once from the bootstrap EOF (no goodbye came),
     * instead of waiting out its close grace on the plugin's rc 2. */
    tpx__bs_close(p->bs);
    p->bs = NULL;
}

/* Does a transfer of peer p still have r's bytes with the plugin? */
static int peer_uses(tpx_peer_t *p, tpx_region_t *r)
{
    for (tpx_xfer_t *x = p->active; x != NULL; x = x->next)
        for (uint32_t i = 0; i < x->nregions; i++)
            if (x->regions[i] == r)
                return 1;
    return 0;
}

/* Here, not in mem.c: a deregistration while transfers still use the
 * memory fails their peers and closes their comms, a decision above the
 * regions, which only report what uses them. */
void tpx__region_deregister(tpx_region_t *r)
{
    tpx_engine_t *e = r->e;
    if (r->refs <= 0 || --r->refs > 0)
        return;
    r->dead = 1;
    /* r stays ours until the end: ending its transfers below frees
     * released preparations (with the failed comms), and the hold of
     * one of them may be the last thing keeping r. */
    r->guard = 1;
    if (r->xfers > 0) {
        /* Transfers still have chunks of this memory with the plugin
         * (released ones included). A FIFO-matching plugin cannot take
         * them back, so their peers are failed and their comms closed:
         * after that no plugin thread touches the memory, and the
         * caller may free it. */
        for (tpx_peer_t *p = e->peers; p != NULL; p = p->next) {
            if (p->state == PEER_READY && peer_uses(p, r)) {
                tpx__peer_fail(p, TPX_ERR_CANCELED,
                               "memory of a transfer in flight was deregistered");
                tpx__peer_close_comms(p);
            }
        }
    }
    /* A failed peer's comms may still hold receives into (or sends from)
     * this memory that no transfer counts any more: close them first. */
    tpx__peer_close_failed(e);
    r->guard = 0;
    tpx__region_maybe_release(r);
}

void tpx__peer_destroy(tpx_peer_t *p)
{
    tpx_engine_t *e = p->e;
    pthread_mutex_lock(&e->lock);
    int gtok = tpx__window_gpu_enter(e);
    if (p->state == PEER_READY) {
        /* Tell the peer, best effort, bounded: a BYE that cannot leave
         * within 100 ms is dropped (the bootstrap EOF says it too). */
        if (tpx__peer_ctrl_send(p, &(tpx_ctrl_t){.type = TPX_CTRL_BYE}, NULL) == TPX_OK) {
            uint64_t until = tpx__now_ns() + 100 * 1000000ull;
            while (p->state == PEER_READY && p->outbox_n > 0 && tpx__now_ns() < until) {
                (void)tpx__comm_pass(p->ctrl_send);
                if (p->state != PEER_READY) {
                    /* the pass failed it: close its comms before the lock
                     * goes (its transfers ended; their memory may go) */
                    tpx__peer_close_failed(e);
                    break;
                }
                if (p->outbox_n > 0) {
                    pthread_mutex_unlock(&e->lock);
                    sched_yield();
                    pthread_mutex_lock(&e->lock);
                }
            }
            if (p->state == PEER_READY)
                (void)tpx__comm_pass(p->ctrl_send);
        }
    }
    if (p->state == PEER_READY || p->state == PEER_SETUP) {
        p->state = PEER_READY; /* let tpx__peer_fail end the transfers */
        tpx__peer_fail(p, TPX_ERR_CANCELED, "closed by the application");
    }
    p->state = PEER_CLOSED;
    if (p->remote != NULL && p->remote->peer == p)
        p->remote->peer = NULL;
    for (tpx_peer_t **pp = &e->peers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    if (p->setup != NULL)
        comm_abandon_connect(e, p->ctrl_send, ((setup_t *)p->setup)->their[0]);
    chan_open_free(p);
    tpx__peer_ctrl_kept_free(p);
    /* Closing a comm first drops every region's handles on it (the
     * internal regions' included), then the internal regions go. */
    comm_close_at(e, &p->ctrl_send);
    comm_close_at(e, &p->ctrl_recv);
    for (int k = 0; k < p->nchan; k++) {
        comm_close_at(e, &p->send[k]);
        comm_close_at(e, &p->recv[k]);
    }
    tpx__peer_listbufs_free(p);
    tpx__peer_close_failed(e); /* then preparations failed peers may still read go */
    if (p->ctrl_region)
        tpx__region_release(p->ctrl_region);
    if (p->scratch_region)
        tpx__region_release(p->scratch_region);
    if (p->setup != NULL) {
        setup_close_listens(e, p->setup);
        tpx__secure_zero(p->setup, sizeof(setup_t)); /* a ticket */
        free(p->setup);
    }
    tpx__window_gpu_leave(gtok);
    pthread_mutex_unlock(&e->lock);
    tpx__bs_close(p->bs);
    free(p->ctrl_buf);
    free(p->scratch);
    free(p->recv_pending);
    for (uint32_t i = 0; i < p->unexpected_cap; i++)
        free(p->unexpected_body[i]);
    free(p->unexpected_body);
    free(p->unexpected);
    free(p->outbox);
    free(p->confirm_q);
    tpx__secure_zero(p->inst_offer, sizeof(p->inst_offer));
    free(p);
}

/* ---- doorbells -------------------------------------------------------------------- */

int tpx__peer_bells(tpx_engine_t *e)
{
    int rung = 0;
    uint64_t now = tpx__now_ns();
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next)
        if (p->state == PEER_READY && p->bs != NULL && p->bs_eof_ns == 0)
            rung += tpx__peer_frames(p, now);
    e->nbells += (uint64_t)rung;
    return rung;
}

/* ---- client --------------------------------------------------------------------- */

tpx_status_t tpx__peer_connect_ticket(tpx_engine_t *e, const char *host, int port, int timeout_ms,
                                      const unsigned char *ticket_id, const unsigned char *ticket,
                                      tpx_peer_t **out)
{
    if (e == NULL || host == NULL || out == NULL || port <= 0 || port > 65535 || timeout_ms < 0) {
        TPX_ERROR("tpx_peer_connect: invalid argument (host %s, port %d)",
                  host ? host : "(null)", port);
        return TPX_ERR_INVALID_ARG;
    }
    int ms = timeout_ms ? timeout_ms : e->cfg.connect_timeout_ms;
    uint64_t deadline = tpx__now_ns() + (uint64_t)ms * 1000000ull;
    tpx_bs_conn_t *bs;
    tpx_status_t st = tpx__bs_client_start(host, port, e->cfg.auth_token, deadline, &bs);
    if (st != TPX_OK)
        return st;
    tpx_peer_t *p;
    st = peer_new(e, bs, &p);
    if (st != TPX_OK) {
        tpx__bs_close(bs);
        return st;
    }
    ((setup_t *)p->setup)->deadline_ns = deadline;
    if (ticket_id != NULL && ticket != NULL) {
        setup_t *s = p->setup;
        s->present = 1;
        memcpy(s->ticket_id, ticket_id, sizeof(s->ticket_id));
        memcpy(s->ticket, ticket, sizeof(s->ticket));
    }
    for (;;) {
        st = setup_advance(p);
        if (st != TPX_INPROGRESS)
            break;
        struct pollfd pfd = {.fd = tpx__bs_fd(p->bs), .events = tpx__bs_events(p->bs)};
        int stage = ((setup_t *)p->setup)->stage;
        (void)poll(&pfd, 1, stage == ST_CONNECT ? 0 : 10);
        if (stage == ST_CONNECT)
            sched_yield();
    }
    if (st != TPX_OK) {
        tpx__peer_destroy(p);
        return st;
    }
    p->accepted = 1;
    p->dialed = 1;
    peer_link(p);
    *out = p;
    return TPX_OK;
}

/* ---- server: the bootstrap thread ------------------------------------------------- */

/* The address of an accepted socket as 16 bytes (IPv4 mapped into IPv6). */
static void src_of_fd(int fd, unsigned char out[16])
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    memset(out, 0, 16);
    memset(&ss, 0, sizeof(ss));
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    if (ss.ss_family == AF_INET6) {
        memcpy(out, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    } else if (ss.ss_family == AF_INET) {
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    }
}

static setup_t *setup_of(tpx_peer_t *p) { return p->setup; }

/* How far a set-up got, for choosing whom to drop: one still in the
 * handshake or waiting for the remote's INFO has shown nothing yet (that is
 * where a stalled connection sits); each stage past it was reached by the
 * remote doing its part of the protocol. */
static int setup_progress(const setup_t *s)
{
    return s->stage <= ST_INFO ? 0 : s->stage;
}

/* When a set-up last took a step: its own stages, or its handshake's. */
static uint64_t setup_moved(const tpx_peer_t *p)
{
    uint64_t hs = tpx__bs_moved_ns(p->bs);
    const setup_t *s = p->setup;
    return TPX_MAX(s->moved_ns, hs);
}

/* The set-up to drop to make room for a connection from `src`: when that
 * address is at its own limit, one of its own; else one of anybody's. In
 * order: connections not authenticated by the token go first; then the
 * least advanced (a peer that answers is not displaced by connections that
 * stall before INFO, however many addresses they come from); then, among
 * equally advanced ones, those of the address with the most of them (a
 * flood pays for itself; a client's earlier connection still finishing its
 * set-up further along does not count against its next); then the one that
 * has gone longest without a step of its handshake or set-up (a newcomer
 * is never the victim, and a peer on a slow path is judged by its last
 * step, not its first: a flood displaces itself or stalled connections).
 * -1: none. */
static int setup_victim(tpx_peer_t **setups, int n, const unsigned char src[16], int own)
{
    int victim = -1, vcount = 0, vauth = 0, vprog = 0;
    for (int i = 0; i < n; i++) {
        setup_t *s = setup_of(setups[i]);
        if (own && memcmp(s->src, src, 16) != 0)
            continue;
        int prog = setup_progress(s), count = 0;
        for (int j = 0; j < n; j++) {
            const setup_t *o = setup_of(setups[j]);
            count += memcmp(o->src, s->src, 16) == 0 && setup_progress(o) == prog;
        }
        int auth = s->stage > ST_HANDSHAKE && tpx__bs_authenticated(setups[i]->bs);
        int better = victim < 0;
        if (!better && auth != vauth)
            better = auth < vauth;
        else if (!better && prog != vprog)
            better = prog < vprog;
        else if (!better && count != vcount)
            better = count > vcount;
        else if (!better)
            better = setup_moved(setups[i]) < setup_moved(setups[victim]);
        if (better) {
            victim = i;
            vcount = count;
            vauth = auth;
            vprog = prog;
        }
    }
    return victim;
}

static void *bs_main(void *arg)
{
    tpx_engine_t *e = arg;
    tpx__sigpipe_block_thread(); /* it calls the plugin: common/sigpipe.h */
    tpx_peer_t *setups[MAX_SETUPS];
    int n = 0;
    tpx_bs_loglimit_t lim = {0};
    pthread_setname_np(pthread_self(), "tpx-bootstrap");
    while (!atomic_load(&e->stop)) {
        struct pollfd pfd[2 + MAX_SETUPS];
        int np = 0, connecting = 0;
        pfd[np++] = (struct pollfd){.fd = e->listener->wake, .events = POLLIN};
        pfd[np++] = (struct pollfd){.fd = e->bs_fd, .events = POLLIN};
        for (int i = 0; i < n; i++) {
            setup_t *s = setups[i]->setup;
            connecting |= s->stage == ST_CONNECT;
            pfd[np++] = (struct pollfd){.fd = tpx__bs_fd(setups[i]->bs),
                                        .events = tpx__bs_events(setups[i]->bs)};
        }
        (void)poll(pfd, (nfds_t)np, connecting ? 1 : 50);
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(e->listener->wake, &v, sizeof(v));
            (void)r;
        }
        tpx__bs_loglimit_tick(&lim);
        /* Connections being set up advance before new ones are taken: a
         * flood of connects waits in the listen backlog, not in our slots. */
        for (int i = 0; i < n;) {
            setup_t *s = setup_of(setups[i]);
            int stage = s->stage;
            tpx_status_t st = setup_advance(setups[i]);
            if (st == TPX_INPROGRESS) {
                if (s->stage != stage)
                    s->moved_ns = tpx__now_ns();
                i++;
                continue;
            }
            if (st == TPX_OK)
                peer_link(setups[i]);
            else
                tpx__peer_destroy(setups[i]); /* the cause was logged */
            setups[i] = setups[--n];
        }
        for (int taken = 0; taken < ACCEPTS_PER_PASS; taken++) {
            int fd;
            if (tpx__bs_accept(e->bs_fd, &fd) != TPX_OK)
                break;
            unsigned char src[16];
            src_of_fd(fd, src);
            int from_src = 0;
            for (int i = 0; i < n; i++)
                from_src += memcmp(setup_of(setups[i])->src, src, 16) == 0;
            /* An address over its share pays for its own newcomer only
             * when the whole table is full; while slots are free nobody
             * is locked out, and a legitimate burst from one host (many
             * engines starting at once on a slow machine) is not cut. */
            int own = from_src >= MAX_SETUPS_PER_SRC;
            if (n == MAX_SETUPS) {
                int victim = setup_victim(setups, n, src, own);
                if (victim < 0) {
                    if (tpx__bs_loglimit(&lim))
                        TPX_WARN("bootstrap: %d peers being set up; refusing another", n);
                    close(fd);
                    continue;
                }
                if (tpx__bs_loglimit(&lim))
                    TPX_WARN("bootstrap: %s; dropping %s (%s, waiting %.1f s)",
                             own ? "too many connections being set up from one address"
                                 : "too many connections being set up",
                             setups[victim]->name,
                             setup_of(setups[victim])->stage == ST_HANDSHAKE ? "in the handshake"
                                                                              : "not established",
                             (double)(tpx__now_ns() - setup_of(setups[victim])->born_ns) / 1e9);
                TPX_DEBUG("bootstrap: dropping %s (stage %d, %.3f s since its last step) for a "
                          "connection from %s", setups[victim]->name,
                          setup_of(setups[victim])->stage,
                          (double)(tpx__now_ns() - setup_moved(setups[victim])) / 1e9,
                          own ? "the same address" : "another address");
                tpx__peer_destroy(setups[victim]);
                setups[victim] = setups[--n];
            }
            uint64_t now = tpx__now_ns();
            uint64_t deadline = now + (uint64_t)e->cfg.connect_timeout_ms * 1000000ull;
            uint64_t early = now + (uint64_t)EARLY_STAGE_MS * 1000000ull;
            tpx_bs_conn_t *bs;
            if (tpx__bs_server_start(fd, e->cfg.auth_token, TPX_MIN(deadline, early), &bs) != TPX_OK) {
                close(fd);
                continue;
            }
            tpx__bs_set_loglimit(bs, &lim);
            if (peer_new(e, bs, &setups[n]) != TPX_OK) {
                tpx__bs_close(bs);
                continue;
            }
            setup_t *s = setups[n]->setup;
            s->inbound = 1;
            s->born_ns = now;
            s->moved_ns = now;
            s->early_ns = TPX_MIN(deadline, early);
            s->lim = &lim;
            memcpy(s->src, src, 16);
            setups[n]->inbound = 1;
            memcpy(setups[n]->src, src, 16);
            n++;
        }
        /* A peer nobody took (tpx_peer_accept or a remote) that failed
         * long ago is freed: servers of one-sided requests never accept.
         * When there are more such peers than the peer cap (a peer that
         * connects and leaves in a loop), the oldest goes at once. */
        pthread_mutex_lock(&e->lock);
        tpx_peer_t *stale = NULL, *oldest = NULL;
        int nfailed = 0;
        for (tpx_peer_t *q = e->peers; q != NULL; q = q->next) {
            if (q->accepted || q->state != PEER_FAILED)
                continue;
            nfailed++;
            if (oldest == NULL || q->failed_ns < oldest->failed_ns)
                oldest = q;
            if (stale == NULL && tpx__now_ns() - q->failed_ns > 30 * 1000000000ull)
                stale = q;
        }
        if (stale == NULL && nfailed > max_peers(e))
            stale = oldest;
        if (stale != NULL)
            stale->accepted = 1; /* ours now */
        pthread_mutex_unlock(&e->lock);
        if (stale != NULL)
            tpx__peer_destroy(stale);
        if (e->listener->reap != NULL) {
            pthread_mutex_lock(&e->lock);
            tpx__peer_reap(e);
            pthread_mutex_unlock(&e->lock);
        }
    }
    for (int i = 0; i < n; i++)
        tpx__peer_destroy(setups[i]);
    pthread_mutex_lock(&e->lock);
    tpx__peer_reap(e); /* with e->stop set: one last call each, then freed */
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

tpx_status_t tpx__peer_listener_start(tpx_engine_t *e)
{
    e->listener->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->listener->wake < 0) {
        TPX_ERROR("eventfd: %s", strerror(errno));
        return tpx__status_from_errno(errno);
    }
    int rc = pthread_create(&e->listener->tid, NULL, bs_main, e);
    if (rc != 0) {
        TPX_ERROR("cannot start the bootstrap thread: %s", strerror(rc));
        return TPX_ERR_NO_RESOURCE;
    }
    e->listener->started = 1;
    return TPX_OK;
}

void tpx__peer_listener_stop(tpx_engine_t *e)
{
    if (e->listener == NULL)
        return;
    if (e->listener->started) {
        uint64_t one = 1;
        ssize_t r = write(e->listener->wake, &one, sizeof(one));
        (void)r;
        pthread_join(e->listener->tid, NULL);
        e->listener->started = 0;
    }
    if (e->listener->wake >= 0)
        close(e->listener->wake);
    e->listener->wake = -1;
}
