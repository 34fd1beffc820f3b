/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.h - one internal view of any ncclNet plugin (v7..v12).
 *
 * tpx__net_open() loads a plugin (a path, a name resolved as
 * libnccl-net-NAME.so, or "builtin", which is the built-in transport's v12
 * table), picks the newest table it exports among v12..v7, and initialises
 * it for one client (an engine). The wrappers below take size_t sizes and
 * return tpx_status_t; the version differences are handled inside (int
 * sizes in v7/v8 are range-checked, never truncated).
 *
 * Lifetimes. A plugin library stays loaded until the process ends. Before
 * v11 a plugin has no context: its init() runs once per process, and every
 * client of that plugin shares one tpx_net_t, which tpx__net_close() leaves
 * alone. From v11 on, each tpx__net_open() calls init() and gets a context
 * and a tpx_net_t of its own, which tpx__net_close() finalises and frees;
 * the client closes its comms first. Opens and closes are thread-safe; the
 * other calls follow the plugin's own rules.
 *
 * Beyond ncclNet, a plugin may export one extension table (net_ext.h: the
 * wake-up, vectored messages, comms with a given number of connections, its
 * request limit, reading its connect handles), looked up by name as the
 * ncclNet tables are; the built-in transport exports it. The wrappers below
 * that use it say what they do for a plugin without it.
 */
#ifndef TPX_NET_H
#define TPX_NET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "net_ext.h"
#include "tpx/ncclnet.h"
#include "tpx/status.h"

typedef struct {
    char name[64];         /* interface name */
    char pci_path[256];    /* "" if none */
    int ptr_support;       /* TPX_NCCL_PTR_* */
    int speed_mbps;
    int max_comms, max_recvs;
    int dev_type;          /* tpx_nccl_net_device_type_t */
    int dev_version;
    int reg_is_global;
    uint64_t max_p2p_bytes;
    /* v9+: the physical devices behind this one (NCCL's vProps); a physical
     * device is {1, {itself}}, and so is every device of a v7/v8 plugin. */
    int nmembers;
    int members[TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12];
    /* v11+: the largest multi-request (1 for older versions). */
    int max_multi_request;
    /* v12: the NIC's rail and plane; TPX_NCCL_NET_ID_UNDEF (-1) when the
     * plugin does not say (always before v12). */
    int rail_id, plane_id;
} tpx_net_props_t;

typedef struct tpx_net {
    char label[256];   /* what was asked for ("builtin", a name or a path) */
    const char *name;  /* the plugin's own name */
    int abi;           /* 7..12 */
    void *dl;          /* dlopen handle, NULL for builtin */
    const void *table; /* tpx_ncclnet_vN_t */
    int ndev;
    int is_tcpx;       /* Google's GPUDirect-TCPX: 16 requests per comm, FIFO test */
    const tpx_net_ext_v1_t *ext; /* the plugin's extension table (net_ext.h); NULL: none */
    int client;        /* v11+: this tpx_net_t is one client's (tpx__net_close frees it) */
    void *ctx;         /* v11+: that client's context (the plugin's; NULL is allowed) */
    int newer;         /* the newest ncclNetPlugin_vN exported beyond what tpx knows, or 0 */
    int sigpipe;       /* the plugin may raise SIGPIPE (writes without MSG_NOSIGNAL, as
                          Google's plugin): its calls on an application's thread run
                          inside a SIGPIPE guard (common/sigpipe.h). Every plugin loaded
                          from a file; the built-in transport only when it says so */
} tpx_net_t;

/* Load (once per process) and initialise for one client: `client_id` is
 * what v11+ init() receives as the communicator id (the engine's id).
 * Errors say why (not found, no symbol, init failed). A plugin that also
 * exports a newer table than tpx knows is driven through the newest known
 * one, and the log says so; one that exports only newer ones is refused. */
tpx_status_t tpx__net_open(const char *which, uint64_t client_id, tpx_net_t **out);
/* End a client: v11+ finalize() of its context, after its comms are closed.
 * Nothing for older versions (their plugin stays initialised). NULL: nothing. */
void tpx__net_close(tpx_net_t *n);
/* setNetAttr (v11+) with what the client knows: `flows` comms to each peer
 * in each direction (the engine's channels). A hint: 0 if passed, 1 if the
 * plugin has no setNetAttr (or is older than v11), never an error (a
 * refusal is logged at debug level and ignored). */
int tpx__net_set_flows(tpx_net_t *n, int flows);

tpx_status_t tpx__net_props(tpx_net_t *n, int dev, tpx_net_props_t *out);
/* 1 if the plugin can fuse devices (v9+ with a makeVDevice entry). */
int tpx__net_has_vdev(const tpx_net_t *n);
/* The most physical devices one virtual device of n may fuse: 0 without
 * makeVDevice, 4 for v9..v11, 8 for v12, fewer where the extension table
 * says (the built-in transport: 4). */
int tpx__net_vdev_max(const tpx_net_t *n);
/* makeVDevice: a virtual device of `ndevs` physical devices (1 to
 * tpx__net_vdev_max()); its index in *vdev. TPX_ERR_UNSUPPORTED, said in the log, if the plugin has no
 * virtual devices (v7/v8, or no makeVDevice); the plugin's error if it
 * refuses the list. */
tpx_status_t tpx__net_make_vdev(tpx_net_t *n, const int *devs, int ndevs, int *vdev);
tpx_status_t tpx__net_listen(tpx_net_t *n, int dev, void *handle, void **listen_comm);
/* Have `comm` (a send or receive comm of n) wake `w` on completions: 1 if
 * the plugin can (its extension table), 0 if not (the engine polls). comm
 * NULL: only ask. */
int tpx__net_set_wake(tpx_net_t *n, void *comm, tpx_net_wake_t *w);
/* Non-blocking: *comm stays NULL until established; call again with the
 * same handle / dev_handle storage. dev_handle: >= 32 bytes, 16-aligned,
 * owned by the caller for the life of the comm. */
tpx_status_t tpx__net_connect(tpx_net_t *n, int dev, void *handle, void **comm,
                              tpx_ncclnet_dev_handle_t **dev_handle);
/* The same for a comm that carries small messages only (the engine's control
 * comms): a plugin with the extension table gives it one data connection
 * (the built-in transport instead of TPX_NSOCKS); any other plugin makes an
 * ordinary comm. A call for a handle whose connect is in progress continues
 * it as begun (either function). */
tpx_status_t tpx__net_connect_small(tpx_net_t *n, int dev, void *handle, void **comm,
                                    tpx_ncclnet_dev_handle_t **dev_handle);
/* The same with `nsocks` data connections (0: the transport's default) for
 * a plugin with the extension table; any other plugin makes an ordinary
 * comm. */
tpx_status_t tpx__net_connect_socks(tpx_net_t *n, int dev, void *handle, void **comm,
                                    tpx_ncclnet_dev_handle_t **dev_handle, int nsocks);
/* Requests a comm of n accepts in flight: what the extension table says
 * (the built-in transport: TPX_MAX_REQUESTS; 16 in its strict TCPX mode),
 * Google's TCPX plugin 16; 0 for other plugins (ncclNet does not say). */
int tpx__net_max_requests(const tpx_net_t *n);
/* 1 when n never uses the calling thread's current GPU on its own (the
 * extension table says so); 0 for a plugin without it (every ncclNet
 * plugin may, as Google's does). */
int tpx__net_keeps_gpu(const tpx_net_t *n);
/* 1 when n can say where its connect handles lead (extension table). */
int tpx__net_reads_handles(const tpx_net_t *n);
/* The addresses connect() would reach with `handle`, into out[0..max): their
 * number, or -1 if the plugin would refuse the handle or cannot read
 * handles (tpx__net_reads_handles 0). */
int tpx__net_handle_addrs(const tpx_net_t *n, const void *handle, struct sockaddr_storage *out,
                          int max);
tpx_status_t tpx__net_accept(tpx_net_t *n, void *listen_comm, void **comm,
                             tpx_ncclnet_dev_handle_t **dev_handle);
tpx_status_t tpx__net_regmr(tpx_net_t *n, void *comm, void *data, size_t size, int type,
                            void **mh);
tpx_status_t tpx__net_deregmr(tpx_net_t *n, void *comm, void *mh);
tpx_status_t tpx__net_isend(tpx_net_t *n, void *comm, void *data, size_t size, int tag, void *mh,
                            void **req);
tpx_status_t tpx__net_irecv(tpx_net_t *n, void *comm, void *data, size_t size, int tag, void *mh,
                            void **req);
/* Vectored messages (the extension table): the message is iov[0..iovcnt)
 * back to back, host memory only, 1 to TPX_NET_IOV_MAX pieces; the array is
 * the caller's and must stay unchanged until test() says done.
 * tpx__net_has_vec() says whether the plugin takes them (the built-in
 * transport, not in strict TCPX mode); a plugin without them gets
 * TPX_ERR_UNSUPPORTED. */
#define TPX_NET_IOV_MAX TPX_NET_EXT_IOV_MAX
struct iovec;
int tpx__net_has_vec(const tpx_net_t *n);
tpx_status_t tpx__net_isendv(tpx_net_t *n, void *comm, const struct iovec *iov, int iovcnt,
                             void **req);
tpx_status_t tpx__net_irecvv(tpx_net_t *n, void *comm, const struct iovec *iov, int iovcnt,
                             void **req);
/* The plugin's raw ncclResult_t is kept in *rc for callers that must tell
 * rc 2 (peer closed) from other errors. */
tpx_status_t tpx__net_test(tpx_net_t *n, void *req, int *done, int *size, int *rc);
tpx_status_t tpx__net_consumed(tpx_net_t *n, void *comm, void *req);
void tpx__net_close_send(tpx_net_t *n, void *comm);
void tpx__net_close_recv(tpx_net_t *n, void *comm);
void tpx__net_close_listen(tpx_net_t *n, void *comm);

/* The NCCL logger handed to plugins: routes into tpx's log with levels and
 * rate-limits repeats. */
void tpx__net_log(tpx_nccl_log_level_t level, unsigned long flags, const char *file, int line,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
