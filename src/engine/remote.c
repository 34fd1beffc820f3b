/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote.c - metadata blobs and remotes (their public entry points:
 * api_remote.c).
 *
 * tpx_engine_get_metadata() describes this engine (identity, where its
 * bootstrap listens, plugin, GPU, channels, NICs, public key); a peer loads
 * the blob with tpx_remote_load() and gets a remote. A remote
 * connects on first use: it takes a connection the remote engine already
 * opened to us if that connection proved to hold the blob's key (one
 * connection then serves both directions), or connects to the advertised
 * addresses in order, checking that the engine reached is the one the blob
 * names. Without keys on both sides (ident.h, DIAL mode) only a connection
 * this engine dialed serves a remote: an inbound peer's claimed id proves
 * nothing. A failed connection is replaced on the next use (a new epoch).
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/sha256.h"
#include "ident.h"
#include "peer.h"
#include "remote.h"

/* ---- metadata ------------------------------------------------------------------------- */

static int addr_is_wildcard(const char *a)
{
    return a[0] == '\0' || strcmp(a, "0.0.0.0") == 0 || strcmp(a, "::") == 0 ||
           strcmp(a, "*") == 0;
}

/* Every up interface's address, IPv4 first, loopback last. */
void tpx__md_addrs(const tpx_engine_t *e, tpx_md_t *md)
{
    if (!addr_is_wildcard(e->cfg.bind_addr)) {
        snprintf(md->addr[0], sizeof(md->addr[0]), "%s", e->cfg.bind_addr);
        md->naddrs = 1;
        return;
    }
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        ifa = NULL;
    for (int pass = 0; pass < 4; pass++) {
        int want_lo = pass >= 2, want_v4 = pass % 2 == 0;
        for (struct ifaddrs *i = ifa; i != NULL && md->naddrs < TPX_MD_MAX_ADDRS; i = i->ifa_next) {
            if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_UP) ||
                !!(i->ifa_flags & IFF_LOOPBACK) != want_lo)
                continue;
            int fam = i->ifa_addr->sa_family;
            if (fam != (want_v4 ? AF_INET : AF_INET6))
                continue;
            if (fam == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr))
                continue;
            char host[NI_MAXHOST];
            socklen_t sl = fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
            if (getnameinfo(i->ifa_addr, sl, host, sizeof(host), NULL, 0, NI_NUMERICHOST) != 0 ||
                strlen(host) >= TPX_MD_STR)
                continue;
            memcpy(md->addr[md->naddrs++], host, strlen(host) + 1); /* < TPX_MD_STR: checked */
        }
    }
    if (ifa != NULL)
        freeifaddrs(ifa);
    if (md->naddrs == 0) {
        snprintf(md->addr[0], TPX_MD_STR, "127.0.0.1");
        md->naddrs = 1;
    }
}

/* ---- remotes ------------------------------------------------------------------------------ */

static int peer_live(const tpx_peer_t *p)
{
    return p != NULL && p->state == PEER_READY && !p->remote_closed;
}

/* Connect to the advertised addresses in order. Each connection presents
 * the ticket of the instance the first one reached (ident.h INSTANCE); the
 * first one pins the ticket its engine offers. conn_lock held. */
static tpx_status_t remote_dial(tpx_remote_t *rm, int timeout_ms, tpx_peer_t **out)
{
    tpx_engine_t *e = rm->e;
    int total = timeout_ms > 0 ? timeout_ms : e->cfg.connect_timeout_ms;
    uint64_t deadline = tpx__now_ns() + (uint64_t)total * 1000000ull;
    tpx_status_t st = TPX_ERR_UNREACHABLE;
    int impostor = 0; /* an address answered with the id but without its proof */
    for (int i = 0; i < rm->md.naddrs; i++) {
        int left = tpx__ms_left(deadline);
        if (left <= 0)
            return TPX_ERR_TIMED_OUT;
        /* later addresses keep a share of the time */
        int ms = i + 1 < rm->md.naddrs ? TPX_MAX(left / (rm->md.naddrs - i), 1000) : left;
        tpx_peer_t *p;
        st = tpx__peer_connect_ticket(e, rm->md.addr[i], rm->md.port, TPX_MIN(ms, left),
                                      rm->has_ticket ? rm->ticket_id : NULL,
                                      rm->has_ticket ? rm->ticket : NULL, &p);
        if (st != TPX_OK)
            continue;
        pthread_mutex_lock(&e->lock);
        int served = tpx__peer_serves(p, rm);
        int claims = !served && p->remote_id == rm->md.engine_id; /* its id, not its proof */
        int by_key = tpx__ident_keyed(e) && rm->md.has_key;
        if (served && !rm->has_ticket && p->inst_offered) {
            rm->has_ticket = 1;
            memcpy(rm->ticket_id, p->inst_offer_id, sizeof(rm->ticket_id));
            memcpy(rm->ticket, p->inst_offer, sizeof(rm->ticket));
            /* the connection that issued the ticket is its instance */
            p->inst_proven = 1;
            memcpy(p->inst_proven_id, p->inst_offer_id, sizeof(p->inst_proven_id));
        }
        pthread_mutex_unlock(&e->lock);
        if (claims) {
            /* Only the engine's key, or the instance that issued the ticket,
             * can prove it: this is another process under the same id (the
             * owner restarted, or someone took its address), and nothing
             * may reach it. */
            TPX_WARN("remote %s: %s port %u claims its engine id %016llx but %s: refused",
                     rm->md.name, rm->md.addr[i], rm->md.port, (unsigned long long)rm->md.engine_id,
                     by_key ? "does not prove the engine's key"
                            : "is not the instance this engine reached first (it did not prove "
                              "that instance's ticket)");
            tpx__peer_destroy(p);
            impostor = 1;
            st = TPX_ERR_PROTOCOL;
            continue;
        }
        if (!served) {
            TPX_WARN("remote %s: %s port %u is engine %016llx (%s, %s), not %016llx: trying "
                     "the next address", rm->md.name, rm->md.addr[i], rm->md.port,
                     (unsigned long long)p->remote_id, p->remote_name,
                     p->verified ? "proven by its key" : "not proven by a key",
                     (unsigned long long)rm->md.engine_id);
            tpx__peer_destroy(p);
            st = TPX_ERR_UNREACHABLE;
            continue;
        }
        *out = p;
        return TPX_OK;
    }
    if (impostor) {
        TPX_ERROR("remote %s: engine %016llx is not reachable as the engine first reached: it "
                  "restarted, or another process holds its address; its transfers fail until the "
                  "application loads its current metadata (tpx_remote_load)", rm->md.name,
                  (unsigned long long)rm->md.engine_id);
        return TPX_ERR_PROTOCOL;
    }
    TPX_ERROR("remote %s: no advertised address reached it (%d tried, last: %s)", rm->md.name,
              rm->md.naddrs, tpx_status_string(st));
    return st;
}

tpx_remote_t *tpx__remote_moved(tpx_engine_t *e, const char *name, uint64_t engine_id)
{
    tpx_remote_t *rm;
    pthread_mutex_lock(&e->lock);
    for (rm = e->remotes; rm != NULL; rm = rm->next)
        if (rm->resolver != NULL && rm->refs > 0 && strcmp(rm->md.name, name) == 0 &&
            rm->md.engine_id != engine_id)
            break;
    if (rm != NULL)
        rm->refs++;
    pthread_mutex_unlock(&e->lock);
    return rm;
}

void tpx__remote_set_resolver(tpx_remote_t *rm, tpx__resolver_t *r)
{
    pthread_mutex_lock(&rm->conn_lock);
    int keep = rm->resolver == NULL;
    if (keep)
        rm->resolver = r;
    pthread_mutex_unlock(&rm->conn_lock);
    if (!keep)
        r->destroy(r);
}

/* Before connecting anew: where is the remote's name now? A restarted
 * engine has a new id (and maybe port). Returns by deadline_ns (the
 * caller's: other threads wait for conn_lock meanwhile). conn_lock held. */
static tpx_status_t remote_resolve(tpx_remote_t *rm, uint64_t deadline_ns)
{
    unsigned char blob[TPX_METADATA_MAX];
    size_t len = sizeof(blob);
    tpx_md_t md;
    tpx_status_t st = rm->resolver->fn(rm->resolver, deadline_ns, blob, &len);
    if (st != TPX_OK)
        return st; /* the resolver said why */
    if (tpx__md_decode(blob, len, &md) != TPX_OK) {
        TPX_ERROR("remote %s: the registry holds no valid metadata for it", rm->md.name);
        return TPX_ERR_PROTOCOL;
    }
    if (md.engine_id != rm->md.engine_id) {
        TPX_INFO("remote %s: the registry names a new engine %016llx (was %016llx): it restarted",
                 rm->md.name, (unsigned long long)md.engine_id,
                 (unsigned long long)rm->md.engine_id);
        pthread_mutex_lock(&rm->e->lock);
        rm->md = md;
        rm->has_ticket = 0; /* a new engine: the next connection pins its instance */
        tpx__secure_zero(rm->ticket, sizeof(rm->ticket));
        pthread_mutex_unlock(&rm->e->lock);
    }
    return TPX_OK;
}

tpx_status_t tpx__remote_refresh(tpx_remote_t *rm)
{
    pthread_mutex_lock(&rm->conn_lock);
    uint64_t was = rm->md.engine_id;
    tpx_status_t st = rm->resolver != NULL ? remote_resolve(rm, UINT64_MAX) : TPX_OK;
    tpx_peer_t *old = NULL;
    if (st == TPX_OK && rm->md.engine_id != was) {
        pthread_mutex_lock(&rm->e->lock);
        old = rm->peer;
        rm->peer = NULL;
        if (old != NULL)
            old->remote = NULL;
        pthread_mutex_unlock(&rm->e->lock);
    }
    pthread_mutex_unlock(&rm->conn_lock);
    if (old != NULL)
        tpx__peer_destroy(old);
    return st;
}

/* Take rm->conn_lock by the deadline (another thread may be connecting). */
static tpx_status_t conn_lock_by(tpx_remote_t *rm, uint64_t deadline_ns)
{
    if (pthread_mutex_trylock(&rm->conn_lock) == 0)
        return TPX_OK;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = tpx__now_ns();
    uint64_t left = deadline_ns > now ? deadline_ns - now : 0;
    uint64_t ns = (uint64_t)ts.tv_nsec + left % 1000000000ull;
    ts.tv_sec += (time_t)(left / 1000000000ull + ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    if (pthread_mutex_timedlock(&rm->conn_lock, &ts) == 0)
        return TPX_OK;
    TPX_ERROR("remote %s: another thread is connecting to it and did not finish within the "
              "caller's deadline", rm->md.name);
    return TPX_ERR_TIMED_OUT;
}

tpx_status_t tpx__remote_peer(tpx_remote_t *rm, int timeout_ms, tpx_peer_t **out)
{
    tpx_engine_t *e = rm->e;
    int ms = timeout_ms > 0 ? timeout_ms : e->cfg.connect_timeout_ms;
    uint64_t deadline = tpx__now_ns() + (uint64_t)ms * 1000000ull;
    tpx_status_t lst = conn_lock_by(rm, deadline);
    if (lst != TPX_OK)
        return lst;
    pthread_mutex_lock(&e->lock);
    if (rm->refs == 0) {
        pthread_mutex_unlock(&e->lock);
        pthread_mutex_unlock(&rm->conn_lock);
        TPX_ERROR("remote %s was forgotten (tpx_remote_release)", rm->md.name);
        return TPX_ERR_INVALID_STATE;
    }
    tpx_peer_t *p = rm->peer;
    if (peer_live(p)) {
        pthread_mutex_unlock(&e->lock);
        pthread_mutex_unlock(&rm->conn_lock);
        *out = p;
        return TPX_OK;
    }
    /* The old connection is done with: close it (its transfers ended). */
    tpx_peer_t *old = p;
    rm->peer = NULL;
    /* A connection the remote engine opened to us serves both directions. */
    for (p = e->peers; p != NULL; p = p->next)
        if (p != old && peer_live(p) && !p->accepted && tpx__peer_serves(p, rm))
            break;
    if (p != NULL) {
        p->accepted = 1;
        p->remote = rm;
        rm->peer = p;
        rm->epoch++;
    }
    pthread_mutex_unlock(&e->lock);
    if (old != NULL)
        tpx__peer_destroy(old);
    tpx_status_t st = TPX_OK;
    if (p == NULL && rm->epoch > 0 && rm->resolver != NULL)
        st = remote_resolve(rm, deadline);
    if (p == NULL && st == TPX_OK) {
        int left = tpx__ms_left(deadline);
        st = left > 0 ? remote_dial(rm, left, &p) : TPX_ERR_TIMED_OUT;
        if (st == TPX_OK) {
            pthread_mutex_lock(&e->lock);
            p->remote = rm;
            rm->peer = p;
            rm->epoch++;
            pthread_mutex_unlock(&e->lock);
            if (rm->epoch > 1)
                TPX_INFO("remote %s: connected again (epoch %llu)", rm->md.name,
                         (unsigned long long)rm->epoch);
        }
    }
    pthread_mutex_unlock(&rm->conn_lock);
    if (st == TPX_OK)
        *out = p;
    return st;
}

tpx_status_t tpx__remote_peer_locked(tpx_remote_t *rm, int timeout_ms, tpx_peer_t **out)
{
    tpx_engine_t *e = rm->e;
    int ms = timeout_ms > 0 ? timeout_ms : e->cfg.connect_timeout_ms;
    uint64_t deadline = tpx__now_ns() + (uint64_t)ms * 1000000ull;
    for (int tries = 0;; tries++) {
        tpx_peer_t *p;
        int left = tpx__ms_left(deadline);
        if (left <= 0) {
            TPX_ERROR("remote %s: not connected within %d ms", rm->md.name, ms);
            return TPX_ERR_TIMED_OUT;
        }
        tpx_status_t st = tpx__remote_peer(rm, left, &p);
        if (st != TPX_OK)
            return st;
        tpx__engine_lock(e);
        if (rm->peer == p || tries == 3) {
            /* still the current connection; or it keeps being replaced: use
             * whatever is current (tpx__peer_usable() will judge it) */
            if (rm->peer != p) {
                pthread_mutex_unlock(&e->lock);
                TPX_ERROR("remote %s: its connection keeps failing", rm->md.name);
                return TPX_ERR_CONN_RESET;
            }
            *out = p;
            return TPX_OK;
        }
        pthread_mutex_unlock(&e->lock);
    }
}

void tpx__md_mine(tpx_engine_t *e, tpx_md_t *md)
{
    static tpx_md_t zero;
    *md = zero;
    md->engine_id = tpx__ident_engine_id(e);
    pthread_mutex_lock(&e->lock); /* gpu and devs: see tpx__topo_gpu_bind */
    md->gpu = e->gpu;
    md->chunk = e->cfg.chunk;
    md->channels = (uint16_t)e->cfg.nchan;
    md->port = (uint16_t)e->bs_port;
    const unsigned char *pk, *sk;
    if (tpx__ident_engine_keys(e, &pk, &sk)) {
        md->has_key = 1;
        memcpy(md->key, pk, sizeof(md->key));
    }
    snprintf(md->name, sizeof(md->name), "%s", tpx__ident_name(e));
    snprintf(md->plugin, sizeof(md->plugin), "%s", e->net->name);
    for (int i = 0; i < e->ndevs && md->nnics < TPX_MD_MAX_NICS; i++) {
        tpx_net_props_t props;
        if (tpx__net_props(e->net, e->devs[i], &props) != TPX_OK)
            continue;
        snprintf(md->nic[md->nnics], TPX_MD_STR, "%.63s", props.name);
        md->nic_speed[md->nnics++] = (uint32_t)(props.speed_mbps > 0 ? props.speed_mbps : 0);
    }
    pthread_mutex_unlock(&e->lock);
    tpx__md_addrs(e, md);
}

tpx_status_t tpx__remote_load(tpx_engine_t *e, const tpx_md_t *md, tpx_remote_t **out)
{
    pthread_mutex_lock(&e->lock);
    for (tpx_remote_t *r = e->remotes; r != NULL; r = r->next) {
        if (r->md.engine_id == md->engine_id && r->md.has_key == md->has_key &&
            memcmp(r->md.key, md->key, sizeof(md->key)) == 0) {
            r->refs++;
            pthread_mutex_unlock(&e->lock);
            *out = r;
            return TPX_OK;
        }
    }
    tpx_remote_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        pthread_mutex_unlock(&e->lock);
        return TPX_ERR_NO_MEMORY;
    }
    r->e = e;
    r->refs = 1;
    r->md = *md;
    pthread_mutex_init(&r->conn_lock, NULL);
    r->next = e->remotes;
    e->remotes = r;
    pthread_mutex_unlock(&e->lock);
    TPX_INFO("remote %s (engine %016llx, %s port %u) loaded; %s", md->name,
             (unsigned long long)md->engine_id, md->addr[0], md->port,
             tpx__ident_keyed(e) && md->has_key ? "served only by connections proven by its key"
                                          : "served only by connections dialed to its address");
    *out = r;
    return TPX_OK;
}

void tpx__remote_release(tpx_remote_t *rm)
{
    tpx_engine_t *e = rm->e;
    pthread_mutex_lock(&rm->conn_lock);
    pthread_mutex_lock(&e->lock);
    if (--rm->refs > 0) {
        pthread_mutex_unlock(&e->lock);
        pthread_mutex_unlock(&rm->conn_lock);
        return;
    }
    rm->forgetting = 1;
    for (tpx_remote_t **pp = &e->remotes; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == rm) {
            *pp = rm->next;
            break;
        }
    }
    tpx_peer_t *p = rm->peer;
    rm->peer = NULL;
    if (p != NULL)
        p->remote = NULL;
    pthread_mutex_unlock(&e->lock);
    if (p != NULL)
        tpx__peer_destroy(p);
    pthread_mutex_unlock(&rm->conn_lock);
    pthread_mutex_lock(&e->lock);
    rm->forgetting = 0;
    int last = rm->nprep == 0; /* else the last tpx_prep_release() frees it */
    pthread_mutex_unlock(&e->lock);
    if (last)
        tpx__remote_free(rm);
}

void tpx__remote_free(tpx_remote_t *rm)
{
    if (rm->resolver != NULL)
        rm->resolver->destroy(rm->resolver);
    tpx__secure_zero(rm->ticket, sizeof(rm->ticket));
    pthread_mutex_destroy(&rm->conn_lock);
    free(rm);
}

void tpx__remotes_fini(tpx_engine_t *e)
{
    while (e->remotes != NULL) {
        tpx_remote_t *rm = e->remotes;
        e->remotes = rm->next;
        tpx__remote_free(rm);
    }
}
