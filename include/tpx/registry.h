/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx/registry.h - engines find each other through etcd (optional).
 *
 * An engine publishes its metadata blob (tpx_engine_get_metadata) and the
 * region descriptors it exports under `<prefix>/<engine name>` in etcd v3,
 * bound to a lease that a thread of the registry keeps alive: an engine
 * that dies (or loses etcd for longer than the TTL) disappears from the
 * registry within the TTL. Peers look engines up by name, list them, and
 * load them as remotes that reconnect through the registry: when the
 * remote's engine restarts under the same name (a new engine id), the next
 * connection looks the name up again.
 *
 * etcd is reached through its JSON gateway (HTTP/1.1, POST /v3/...) with a
 * small client of tpx's own over plain sockets, or over TLS for https://
 * endpoints (OpenSSL's libssl, loaded at run time only then), with etcd's
 * user/password authentication when TPX_METADATA_USER is set. Nothing of
 * this runs unless tpx_registry_open() is called. Published values are
 * signed; a reader with TPX_METADATA_TRUST takes a name only when a key
 * trusted for it signed the value (SECURITY.md, "The registry").
 *
 * Errors: TPX_ERR_UNREACHABLE when no etcd endpoint answers (the message
 * names them), TPX_ERR_NOT_FOUND when a name is not published (never, or
 * its lease expired), TPX_ERR_ACCESS when etcd refused our credentials or
 * a name's value is not signed by a key trusted for it, TPX_ERR_CONFIG for
 * malformed TPX_METADATA_* settings (at open), TPX_ERR_PROTOCOL for an
 * answer that is not etcd's.
 * Threads: every call is thread-safe; calls on one registry are serialised.
 */
#ifndef TPX_REGISTRY_H
#define TPX_REGISTRY_H

#include "tpx/tpx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpx_registry tpx_registry_t;

#define TPX_REGISTRY_MAX_DESCS 64 /* descriptors published with one engine */

/* What is published for one engine. */
typedef struct {
    char name[TPX_NAME_MAX];                   /* the engine's name (the key's last part) */
    size_t md_len;                             /* bytes of md */
    unsigned char md[TPX_METADATA_MAX];        /* its metadata blob: tpx_remote_load() */
    size_t ndescs;                             /* descriptors in descs */
    tpx_rdesc_t descs[TPX_REGISTRY_MAX_DESCS]; /* the regions it exported, in publish order */
} tpx_registry_entry_t;

/* Open a registry. url: "etcd://host:port[,host:port...]" or
 * "https://host:port[,...]" (NULL: TPX_METADATA); prefix: the keys' prefix
 * (NULL: TPX_METADATA_PREFIX). The TLS, authentication, signing and trust
 * settings (TPX_METADATA_*) are read and loaded now; nothing is contacted
 * yet. */
TPX_API tpx_status_t tpx_registry_open(const char *url, const char *prefix,
                                       tpx_registry_t **registry);
/* Revoke the leases of this registry's publications (their keys vanish at
 * once), stop its keep-alive thread, free it. Remotes loaded through it
 * keep working (their resolver holds its own copy of the endpoints). Call
 * it once every other call on the registry has returned (a thread blocked
 * in tpx_registry_watch returns at its timeout): it frees what they use. */
TPX_API void tpx_registry_close(tpx_registry_t *registry);

/* Publish `engine` (it must have a bootstrap port) under its name
 * (tpx_engine_params_t.name) with `ndescs` exported descriptors, bound to a
 * lease of ttl_s seconds (0: TPX_METADATA_TTL) kept alive every TTL/3 by
 * the registry's thread. If etcd forgets the lease (it was unreachable for
 * longer than the TTL) the thread publishes again once it answers.
 * Publishing the same engine again replaces the value (new descriptors).
 * Unpublish (or close the registry) before destroying the engine: until
 * then its entry stays published. */
TPX_API tpx_status_t tpx_registry_publish(tpx_registry_t *registry, tpx_engine_t *engine,
                                          const tpx_rdesc_t *descs, size_t ndescs, int ttl_s);
/* Remove the engine's key now (revokes its lease). */
TPX_API tpx_status_t tpx_registry_unpublish(tpx_registry_t *registry, tpx_engine_t *engine);

/* The entry published under `name`; TPX_ERR_NOT_FOUND if there is none,
 * TPX_ERR_ACCESS if TPX_METADATA_TRUST refuses its value. */
TPX_API tpx_status_t tpx_registry_lookup(tpx_registry_t *registry, const char *name,
                                         tpx_registry_entry_t *entry);
/* The names published under the prefix, sorted (etcd's key order): up to
 * `max` into names[]; *n = how many there are in all (may exceed max).
 * Departures are seen by polling this, or with tpx_registry_watch(). */
TPX_API tpx_status_t tpx_registry_list(tpx_registry_t *registry, char (*names)[TPX_NAME_MAX],
                                       size_t max, size_t *n);
/* A change under the prefix. */
typedef struct {
    char name[TPX_NAME_MAX];
    int gone; /* 1: the name left (unpublished, or its lease expired); 0: published or replaced */
} tpx_registry_event_t;

/* Changes under the prefix, in order (etcd's watch): waits up to timeout_ms
 * for the first one, then returns up to `max` of those that came; *n = 0
 * when none came in time. The first call starts the watch at the revision
 * of the last tpx_registry_list() (so nothing between a list and the watch
 * is missed; without a list: from now on); a stream that breaks is opened
 * again where it stopped. Every byte is awaited only until timeout_ms: a
 * message still arriving then is kept and completed by the next call
 * (*n = 0 meanwhile), and the stream's opening is bounded by it too (by
 * TPX_METADATA_TIMEOUT_MS for a poll, timeout 0, that must open one).
 * TPX_ERR_UNREACHABLE while etcd cannot be reached.
 * One thread at a time watches a registry. */
TPX_API tpx_status_t tpx_registry_watch(tpx_registry_t *registry, tpx_registry_event_t *events,
                                        size_t max, size_t *n, int timeout_ms);

/* Look `name` up and load it as a remote of `engine` (entry, if not NULL,
 * receives what was published, descriptors included). The remote looks the
 * name up again whenever it must connect anew (its engine restarted: a new
 * epoch); a name no longer published then fails the connection with
 * TPX_ERR_NOT_FOUND. Loading the name again once its engine restarted (to
 * get the new engine's descriptors) returns the same remote, moved to the
 * new engine, with a reference added. */
TPX_API tpx_status_t tpx_registry_load_remote(tpx_registry_t *registry, tpx_engine_t *engine,
                                              const char *name, tpx_remote_t **remote,
                                              tpx_registry_entry_t *entry);

#ifdef __cplusplus
}
#endif
#endif
