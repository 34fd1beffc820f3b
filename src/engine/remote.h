/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote.h - peer engines known by their metadata (remote.c): lazy
 * connection, reconnection after a failure (a new epoch), and reuse of a
 * connection the peer opened to us.
 */
#ifndef TPX_ENGINE_REMOTE_H
#define TPX_ENGINE_REMOTE_H

#include "engine.h"

/* A source of fresh metadata for a remote (tpx_registry_load_remote): asked
 * before each new connection after the first (its engine may have
 * restarted with a new id and port). fn writes the current blob of the
 * remote's name into blob[*len] (*len: its size in, the blob's out); an
 * error fails that connection. It returns by deadline_ns (tpx__now_ns()
 * clock; UINT64_MAX: its own default), TPX_ERR_TIMED_OUT once that passed.
 * Owned by the remote: destroy at its end. */
typedef struct tpx__resolver tpx__resolver_t;
struct tpx__resolver {
    tpx_status_t (*fn)(tpx__resolver_t *r, uint64_t deadline_ns, unsigned char *blob,
                       size_t *len);
    void (*destroy)(tpx__resolver_t *r);
};

struct tpx_remote {
    tpx_engine_t *e;
    tpx_remote_t *next;         /* engine's list */
    int refs;                   /* tpx_remote_load() calls not forgotten */
    int nprep;                  /* preparations not released */
    tpx_md_t md;
    tpx_peer_t *peer;           /* the connection in use (owned: peer->remote == this) */
    uint64_t epoch;             /* connections made so far */
    int forgetting;             /* tpx_remote_release() is closing it: it frees it */
    pthread_mutex_t conn_lock;  /* one connect at a time; taken before e->lock */
    tpx__resolver_t *resolver;  /* owned; NULL: the blob it was loaded with is final */
    /* The ticket of the engine instance its first connection reached (ident.h
     * INSTANCE): every later connection must prove that instance. Set under
     * conn_lock and e->lock; cleared when the resolver names a new engine. */
    int has_ticket;
    unsigned char ticket_id[16], ticket[32];
};

/* Every up interface's address into md (IPv4 first, loopback last), for
 * tpx_engine_get_metadata. */
void tpx__md_addrs(const tpx_engine_t *e, tpx_md_t *md);
/* This engine's metadata (tpx_engine_get_metadata), addresses included;
 * takes the lock for the GPU and NICs. */
void tpx__md_mine(tpx_engine_t *e, tpx_md_t *md);
/* tpx_remote_load of checked metadata: the remote of that engine (and key)
 * if loaded already (one more reference), else a new one. Takes the lock. */
tpx_status_t tpx__remote_load(tpx_engine_t *e, const tpx_md_t *md, tpx_remote_t **out);
/* tpx_remote_release: drop a reference; at the last, its peer is closed
 * and it is freed (or by the last tpx_prep_release). Takes conn_lock, then
 * the lock. */
void tpx__remote_release(tpx_remote_t *rm);
/* Give the remote a resolver (it takes ownership; one that already has
 * one keeps it and destroys `r`). */
void tpx__remote_set_resolver(tpx_remote_t *rm, tpx__resolver_t *r);
/* A remote of e loaded by `name` with a resolver (tpx_registry_load_remote)
 * and still referenced, whose engine is not engine_id (it restarted): it,
 * with one more reference (tpx__remote_release drops it); NULL if none.
 * Takes the lock. */
tpx_remote_t *tpx__remote_moved(tpx_engine_t *e, const char *name, uint64_t engine_id);
/* Ask the resolver now: if it names another engine (the old one
 * restarted), the remote moves to it and drops its connection to the old
 * one; the next use connects anew. */
tpx_status_t tpx__remote_refresh(tpx_remote_t *rm);

/* A ready connection to the remote: the current one, one the remote engine
 * opened to us, or a new one (timeout_ms 0: TPX_CONNECT_TIMEOUT_MS). A
 * failed connection is closed and replaced. Everything, waiting for another
 * thread's connect included, ends by timeout_ms (TPX_ERR_TIMED_OUT).
 * Engine lock NOT held. */
tpx_status_t tpx__remote_peer(tpx_remote_t *rm, int timeout_ms, tpx_peer_t **out);
/* The same, returning with e->lock held and the peer current: it stays
 * valid until the lock is released (another thread may replace a failed
 * connection and free it as soon as the lock is dropped). */
tpx_status_t tpx__remote_peer_locked(tpx_remote_t *rm, int timeout_ms, tpx_peer_t **out);
/* Free a forgotten remote (refs 0, no preparation left). */
void tpx__remote_free(tpx_remote_t *rm);
/* Free every remote at engine destruction (peers already destroyed). */
void tpx__remotes_fini(tpx_engine_t *e);

#endif
