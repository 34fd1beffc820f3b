/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net_ext.h - the one extension table a plugin may export next to its
 * ncclNet tables: what tpx's engine uses beyond ncclNet.
 *
 * The engine sees every transport, the built-in one included, through the
 * ncclNet tables plus, optionally, this table. A plugin offers it as the
 * symbol TPX_NET_EXT_SYMBOL ("tpxNetExt_v1"); the loader (net.c) looks it
 * up by name exactly as it looks up ncclNetPlugin_vN: dlsym() on a loaded
 * library, and the built-in transport's symbol lookup for "builtin"
 * (tpx__sock_symbol). A plugin without it is driven through ncclNet only:
 * the engine polls its requests, makes ordinary comms, sends every message
 * whole, and trusts its connect handles as opaque bytes (net.h says what
 * each wrapper does then).
 *
 * Versions. `version` is TPX_NET_EXT_VERSION of the header the plugin was
 * built with and `size` its sizeof(tpx_net_ext_v1_t); a later version only
 * appends entries, so a loader reads the entries that fit in `size` and a
 * table of another major layout has another symbol name. A table with a
 * version below 1 or a size below the v1 layout is ignored (logged once).
 *
 * Ownership and threads. The table is the plugin's, constant, and lives as
 * long as the plugin library (the process). Every entry is non-NULL. The
 * property entries (max_requests .. keeps_gpu) are read once, after the
 * plugin's init(), by the thread that opened it. The comm entries follow the
 * ncclNet rules for the comm they name: one thread at a time per comm, any
 * thread. handle_addrs reads caller memory only and may run on any thread
 * at any time, before or without a listen or connect in this process.
 */
#ifndef TPX_NET_EXT_H
#define TPX_NET_EXT_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tpx/ncclnet.h"

#define TPX_NET_EXT_SYMBOL "tpxNetExt_v1"
#define TPX_NET_EXT_VERSION 1
/* Most addresses handle_addrs reports for one connect handle. */
#define TPX_NET_EXT_HANDLE_ADDRS_MAX 8
/* Most pieces of one vectored message. */
#define TPX_NET_EXT_IOV_MAX 1024

/*
 * An engine's wake-up: when one of a comm's requests completes while
 * `armed` is set, the plugin's thread that completed it clears `armed` and
 * writes 1 to the eventfd `fd`, so an engine sleeping in poll() acts within
 * microseconds. The engine owns it and keeps it alive longer than its
 * comms; the plugin only reads `fd` and clears `armed`.
 */
typedef struct {
    _Atomic int armed;
    int fd;
} tpx_net_wake_t;

struct iovec;

typedef struct {
    uint32_t version; /* TPX_NET_EXT_VERSION */
    uint32_t size;    /* sizeof(tpx_net_ext_v1_t) */
    /* ---- properties, after init() ---- */
    /* Requests one comm accepts in flight; 0: the plugin does not say. */
    int (*max_requests)(void);
    /* 1 when a call may raise SIGPIPE (then every call runs inside the
     * caller's SIGPIPE guard); 0 when the plugin never raises it. */
    int (*raises_sigpipe)(void);
    /* 1 when isendv/irecvv below take messages now (a mode may refuse them:
     * then every vectored post fails). */
    int (*vec_ok)(void);
    /* 1 when no call places memory or work on the calling thread's current
     * GPU (the plugin names its devices itself): the engine then need not
     * make its GPU current around its progress passes. */
    int (*keeps_gpu)(void);
    /* The most physical devices one virtual device fuses (makeVDevice),
     * when fewer than the ncclNet version allows; 0: what the version
     * allows. */
    int vdev_max;
    /* ---- comms ---- */
    /* Have `comm` (a send or receive comm) wake `wake` on completions,
     * from now on; NULL stops it. Not a comm of this plugin: nothing. */
    void (*comm_set_wake)(void *comm, tpx_net_wake_t *wake);
    /* connect() (as ncclNet v7's, non-blocking, called again with the same
     * handle until *comm is set) for a comm of `nsocks` data connections:
     * 1 for a comm of small messages, 0 the plugin's default. */
    tpx_nccl_result_t (*connect_socks)(int dev, void *handle, void **comm, int nsocks);
    /* Vectored messages of host memory: the message is iov[0..iovcnt) back
     * to back (1 to TPX_NET_EXT_IOV_MAX pieces); the array is read until the
     * ncclNet test() says done; a receive's capacity is the sum. Requests
     * are the ncclNet ones (test() ends them); no tag, no registration. */
    tpx_nccl_result_t (*isendv)(void *send_comm, const struct iovec *iov, int iovcnt,
                                void **request);
    tpx_nccl_result_t (*irecvv)(void *recv_comm, const struct iovec *iov, int iovcnt,
                                void **request);
    /* The addresses a connect handle (from listen(), maybe a peer's) makes
     * connect() reach, into out[0..max): their number (>= 1), or -1 when
     * the handle is not one the plugin accepts (connect() would refuse
     * it). Lets the engine check what an unauthenticated peer asks it to
     * connect to (SECURITY.md). */
    int (*handle_addrs)(const void *handle, struct sockaddr_storage *out, int max);
} tpx_net_ext_v1_t;

#endif
