/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_plugin.c - the ncclNet v7..v12 entry points of the built-in transport.
 *
 * One implementation (size_t sizes, tpx_status_t results) and one thin
 * adapter per ABI difference: int sizes in v7/v8, the profiler handle in
 * v10, the contexts of v11/v12, the properties layouts. tpx_status_t
 * becomes ncclResult_t here and nowhere else.
 *
 * Contexts (v11+): the transport's state is per process (devices, I/O
 * workers, settings), so init() sets it up the first time and every init()
 * returns a small context of its own: what the client said about itself
 * (its id, setNetAttr's hints). finalize() frees only that; comms outlive
 * nothing of it. setNetAttr's maxFlowsPerPeer is logged, not applied: NCCL's
 * flows to a peer are its channels, each already a comm of TPX_NSOCKS
 * connections, so sizing each comm by the flow count would multiply the
 * connections to a peer by it (tpx's engine sizes its comms itself).
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "sock.h"
#include "sock_cuda.h"
#include "sock_symbol.h"
#include "sock_tables.h"

tpx_nccl_logger_t tpx__sock_logger;
tpx_sock_params_t tpx__sock_params;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int sock_cuda; /* CUDA buffers accepted (a GPU is present, not strict mode) */
/* init_done is set (release) once init_status is final and read (acquire)
 * without the lock by every entry point; both are written under init_lock. */
static atomic_int init_done;
static tpx_status_t init_status;

tpx_nccl_result_t tpx__sock_result(tpx_status_t st)
{
    switch (st) {
    case TPX_OK:
    case TPX_INPROGRESS: return TPX_NCCL_SUCCESS;
    case TPX_ERR_CONN_RESET:
    case TPX_ERR_CONN_REFUSED:
    case TPX_ERR_TIMED_OUT:
    case TPX_ERR_UNREACHABLE:
    case TPX_ERR_ADDR_IN_USE:
    case TPX_ERR_IO: return TPX_NCCL_SYSTEM_ERROR;
    case TPX_ERR_INVALID_ARG:
    case TPX_ERR_CONFIG: return TPX_NCCL_INVALID_ARGUMENT;
    case TPX_ERR_INVALID_STATE: return TPX_NCCL_INVALID_USAGE;
    case TPX_ERR_CUDA: return TPX_NCCL_UNHANDLED_CUDA_ERROR;
    default: return TPX_NCCL_INTERNAL_ERROR; /* NO_RESOURCE, TRUNCATED, PROTOCOL, ... */
    }
}

/* Strict TCPX mode whatever TPX_SOCK_TCPX says (at least 1): set by the
 * init of libnccl-net-tpx-tcpx.so, before the settings are read. */
static _Atomic int force_tcpx;

/* repeat_ok: a later call is a client's new context (v11+), not a second
 * init of the process (which strict TCPX mode refuses, as Google's plugin). */
static tpx_status_t sock_init(tpx_nccl_logger_t logger, int repeat_ok)
{
    pthread_mutex_lock(&init_lock);
    if (atomic_load_explicit(&init_done, memory_order_relaxed)) {
        pthread_mutex_unlock(&init_lock);
        if (tpx__sock_params.tcpx && !repeat_ok) {
            SOCK_WARN("init called twice: TCPX must be initialised once per process");
            return TPX_ERR_INVALID_STATE;
        }
        return init_status;
    }
    tpx__sock_logger = logger;
    tpx_status_t st = tpx__config_load();
    if (st == TPX_OK) {
        tpx__sock_params = (tpx_sock_params_t){
            .nsocks = (int)tpx__config_int(TPX_CFG_NSOCKS),
            .workers = (int)tpx__config_int(TPX_CFG_SOCK_WORKERS),
            .max_reqs = (int)tpx__config_int(TPX_CFG_MAX_REQUESTS),
            .piece_bytes = (uint64_t)tpx__config_int(TPX_CFG_PIECE_BYTES),
            .cuda_block = (uint32_t)tpx__config_int(TPX_CFG_SOCK_CUDA_BLOCK),
            .cuda_ring = (uint64_t)tpx__config_int(TPX_CFG_SOCK_CUDA_RING),
            .cuda_pinned = (uint64_t)tpx__config_int(TPX_CFG_SOCK_CUDA_PINNED),
            .cuda_piece = (uint64_t)tpx__config_int(TPX_CFG_SOCK_CUDA_PIECE),
            .cuda_word = (int)tpx__config_int(TPX_CFG_SOCK_CUDA_WORD),
            .eager_bytes = (uint32_t)tpx__config_int(TPX_CFG_SOCK_EAGER_BYTES),
            .poll_ns = (uint64_t)tpx__config_int(TPX_CFG_SOCK_POLL_US) * 1000u,
            .direct_bytes = (uint64_t)tpx__config_int(TPX_CFG_SOCK_DIRECT_BYTES),
            .fault_dry_ns = (uint64_t)tpx__config_int(TPX_CFG_FAULT_DIRECT_DRY_US) * 1000u,
            .fault_connect_down = (int)tpx__config_int(TPX_CFG_FAULT_SOCK_CONNECT_DOWN),
            .sock_buf = (int)tpx__config_int(TPX_CFG_SOCK_BUF_BYTES),
            .connect_timeout_ms = (int)tpx__config_int(TPX_CFG_CONNECT_TIMEOUT_MS),
            .tcpx = TPX_MAX((int)tpx__config_int(TPX_CFG_SOCK_TCPX), atomic_load(&force_tcpx)),
            .tcpx_rxmem_skip = (int)tpx__config_int(TPX_CFG_SOCK_TCPX_RXMEM_SKIP),
            .tcpx_sigpipe = (int)tpx__config_int(TPX_CFG_SOCK_TCPX_SIGPIPE),
            .tcpx_chunk = (uint64_t)tpx__config_int(TPX_CFG_SOCK_TCPX_CHUNK),
            .failover = (int)tpx__config_int(TPX_CFG_SOCK_FAILOVER),
            .stall_ms = (int)tpx__config_int(TPX_CFG_SOCK_STALL_MS),
        };
        if (tpx__sock_params.tcpx)
            tpx__sock_params.eager_bytes = 0; /* only test() moves data there */
        long spin = (long)tpx__config_int(TPX_CFG_SOCK_CUDA_SPIN_US);
        tpx__sock_params.cuda_spin_auto = spin < 0;
        tpx__sock_params.cuda_spin_ns = (uint64_t)(spin < 0 ? 10 : spin) * 1000u;
        st = tpx__sock_dev_init();
        sock_cuda = st == TPX_OK && tpx__sock_cuda_available();
    } else {
        SOCK_WARN("init: invalid TPX_* setting (see the error above)");
    }
    if (st == TPX_OK)
        SOCK_INFO("built-in TCP transport%s: %d device(s), %d data socket(s) per comm, "
                  "%d request(s) per comm", tpx__sock_params.tcpx ? " (strict TCPX mode)" : "",
                  tpx__sock_ndev(), tpx__sock_params.nsocks,
                  tpx__sock_params.tcpx ? SOCK_TCPX_MAX_REQS : tpx__sock_params.max_reqs);
    init_status = st;
    atomic_store_explicit(&init_done, 1, memory_order_release);
    pthread_mutex_unlock(&init_lock);
    return st;
}

tpx_status_t tpx__sock_init(tpx_nccl_logger_t logger)
{
    return sock_init(logger, 0);
}

tpx_nccl_result_t tpx__sock_v7_init(tpx_nccl_logger_t logger)
{
    return tpx__sock_result(tpx__sock_init(logger));
}

tpx_nccl_result_t tpx__sock_v7_tcpx_init(tpx_nccl_logger_t logger)
{
    atomic_store(&force_tcpx, 1);
    return tpx__sock_result(tpx__sock_init(logger));
}

tpx_nccl_result_t tpx__sock_v10_init(tpx_nccl_logger_t logger, tpx_nccl_profiler_cb_t prof)
{
    (void)prof;
    return tpx__sock_result(tpx__sock_init(logger));
}

/* A v11+ client's context. */
#define SOCK_CTX_MAGIC 0x54505843u /* "TPXC" */
typedef struct {
    uint32_t magic; /* SOCK_CTX_MAGIC while alive, 0 once finalised */
    uint64_t comm_id;
    int32_t send_flows, recv_flows; /* setNetAttr's maxFlowsPerPeer, or -1 */
} sock_ctx_t;

static int ctx_ok(void *ctx, const char *fn)
{
    if (ctx != NULL && ((sock_ctx_t *)ctx)->magic == SOCK_CTX_MAGIC)
        return 1;
    SOCK_WARN("%s: %s context (init() gives one per client, finalize() ends it)", fn,
              ctx == NULL ? "no" : "not a live");
    return 0;
}

tpx_nccl_result_t tpx__sock_v11_init(void **ctx, uint64_t comm_id,
                                     tpx_ncclnet_comm_config_t *config, tpx_nccl_logger_t logger,
                                     tpx_nccl_profiler_cb_t prof)
{
    (void)config; /* traffic classes are not used by this transport */
    (void)prof;
    if (ctx == NULL) {
        SOCK_WARN("init: NULL context pointer");
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    tpx_status_t st = sock_init(logger, 1);
    if (st != TPX_OK)
        return tpx__sock_result(st);
    sock_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        SOCK_WARN("init: out of memory for a context");
        return TPX_NCCL_INTERNAL_ERROR;
    }
    *c = (sock_ctx_t){.magic = SOCK_CTX_MAGIC, .comm_id = comm_id, .send_flows = -1,
                      .recv_flows = -1};
    SOCK_DEBUG("context %p for client %016llx", (void *)c, (unsigned long long)comm_id);
    *ctx = c;
    return TPX_NCCL_SUCCESS;
}

tpx_nccl_result_t tpx__sock_v11_finalize(void *ctx)
{
    if (!ctx_ok(ctx, "finalize"))
        return TPX_NCCL_INVALID_ARGUMENT;
    sock_ctx_t *c = ctx;
    SOCK_DEBUG("context %p of client %016llx finalised", ctx, (unsigned long long)c->comm_id);
    c->magic = 0;
    free(c);
    return TPX_NCCL_SUCCESS;
}

tpx_nccl_result_t tpx__sock_v11_set_net_attr(void *ctx, tpx_ncclnet_attr_t *attr)
{
    if (!ctx_ok(ctx, "setNetAttr"))
        return TPX_NCCL_INVALID_ARGUMENT;
    if (attr == NULL) {
        SOCK_WARN("setNetAttr: NULL attributes");
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    sock_ctx_t *c = ctx;
    if (c->send_flows != attr->sendCommAttr.maxFlowsPerPeer ||
        c->recv_flows != attr->recvCommAttr.maxFlowsPerPeer)
        SOCK_DEBUG("client %016llx: up to %d send / %d receive flows per peer (a hint; each "
                   "comm keeps its own connections)", (unsigned long long)c->comm_id,
                   (int)attr->sendCommAttr.maxFlowsPerPeer, (int)attr->recvCommAttr.maxFlowsPerPeer);
    c->send_flows = attr->sendCommAttr.maxFlowsPerPeer;
    c->recv_flows = attr->recvCommAttr.maxFlowsPerPeer;
    return TPX_NCCL_SUCCESS;
}

static int initialized(const char *fn)
{
    if (atomic_load_explicit(&init_done, memory_order_acquire) && init_status == TPX_OK)
        return 1;
    SOCK_WARN("%s called before a successful init()", fn);
    return 0;
}

tpx_nccl_result_t tpx__sock_devices(int *ndev)
{
    if (ndev == NULL || !initialized("devices"))
        return TPX_NCCL_INVALID_ARGUMENT;
    *ndev = tpx__sock_ndev();
    return TPX_NCCL_SUCCESS;
}

/* Fill the newest layout; older ones copy from it. */
static tpx_nccl_result_t props_fill(int dev, tpx_ncclnet_props_v9_t *p)
{
    if (p == NULL || !initialized("getProperties"))
        return TPX_NCCL_INVALID_ARGUMENT;
    const tpx_sock_dev_t *d = tpx__sock_dev(dev);
    if (d == NULL) {
        SOCK_WARN("getProperties: no device %d (have %d)", dev, tpx__sock_ndev());
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    memset(p, 0, sizeof(*p));
    p->name = (char *)d->name;
    p->pciPath = d->pci_path;
    p->guid = (uint64_t)dev;
    /* TCPX always announces CUDA (a machine without a GPU cannot load it). */
    p->ptrSupport = TPX_NCCL_PTR_HOST |
                    (sock_cuda || tpx__sock_params.tcpx ? TPX_NCCL_PTR_CUDA : 0);
    p->regIsGlobal = 0;
    p->forceFlush = 0;
    p->speed = d->speed_mbps;
    p->port = 0;
    p->latency = 0;
    p->maxComms = 65536;
    p->maxRecvs = 1;
    p->netDeviceType = TPX_NCCL_NET_DEVICE_HOST;
    p->netDeviceVersion = TPX_NCCL_NET_DEVICE_INVALID_VERSION;
    if (tpx__sock_params.tcpx) {
        p->netDeviceType = TPX_NCCL_NET_DEVICE_UNPACK;
        p->netDeviceVersion = TPX_NCCL_NET_DEVICE_UNPACK_VERSION;
    }
    /* A physical device is its own one-member virtual device, as in NCCL. */
    p->vProps.ndevs = d->nmembers;
    for (int i = 0; i < d->nmembers; i++)
        p->vProps.devs[i] = d->members[i];
    /* test() reports sizes as int: never let a single message exceed it. */
    p->maxP2pBytes = INT_MAX;
    p->maxCollBytes = INT_MAX;
    return TPX_NCCL_SUCCESS;
}

tpx_nccl_result_t tpx__sock_v9_props(int dev, tpx_ncclnet_props_v9_t *props)
{
    return props_fill(dev, props);
}

tpx_nccl_result_t tpx__sock_v8_props(int dev, tpx_ncclnet_props_v8_t *props)
{
    tpx_ncclnet_props_v9_t p;
    tpx_nccl_result_t r = props_fill(dev, &p);
    if (r != TPX_NCCL_SUCCESS || props == NULL)
        return r;
    *props = (tpx_ncclnet_props_v8_t){p.name, p.pciPath, p.guid, p.ptrSupport, p.regIsGlobal,
                                      p.speed, p.port, p.latency, p.maxComms, p.maxRecvs,
                                      p.netDeviceType, p.netDeviceVersion};
    return r;
}

/* maxMultiRequestSize 1: no multi-requests. railId/planeId: an interface
 * found by name carries neither, so NCCL keeps its own pairing. */
tpx_nccl_result_t tpx__sock_v11_props(int dev, tpx_ncclnet_props_v11_t *props)
{
    tpx_ncclnet_props_v9_t p;
    tpx_nccl_result_t r = props_fill(dev, &p);
    if (r != TPX_NCCL_SUCCESS || props == NULL)
        return r;
    memset(props, 0, sizeof(*props));
    memcpy(props, &p, sizeof(p)); /* v11 is v9 with one field more */
    props->maxMultiRequestSize = 1;
    return r;
}

tpx_nccl_result_t tpx__sock_v12_props(int dev, tpx_ncclnet_props_v12_t *props)
{
    tpx_ncclnet_props_v9_t p;
    tpx_nccl_result_t r = props_fill(dev, &p);
    if (r != TPX_NCCL_SUCCESS || props == NULL)
        return r;
    *props = (tpx_ncclnet_props_v12_t){
        .name = p.name, .pciPath = p.pciPath, .guid = p.guid, .ptrSupport = p.ptrSupport,
        .regIsGlobal = p.regIsGlobal, .forceFlush = p.forceFlush, .speed = p.speed,
        .port = p.port, .latency = p.latency, .maxComms = p.maxComms, .maxRecvs = p.maxRecvs,
        .netDeviceType = p.netDeviceType, .netDeviceVersion = p.netDeviceVersion,
        .vProps = {.ndevs = p.vProps.ndevs}, .maxP2pBytes = p.maxP2pBytes,
        .maxCollBytes = p.maxCollBytes, .maxMultiRequestSize = 1,
        .railId = TPX_NCCL_NET_ID_UNDEF, .planeId = TPX_NCCL_NET_ID_UNDEF};
    for (int i = 0; i < p.vProps.ndevs && i < TPX_NCCL_NET_MAX_DEVS_PER_NIC; i++)
        props->vProps.devs[i] = p.vProps.devs[i];
    return r;
}

_Static_assert(offsetof(tpx_ncclnet_props_v11_t, maxMultiRequestSize) ==
                   sizeof(tpx_ncclnet_props_v9_t),
               "v11 properties extend v9's");

tpx_nccl_result_t tpx__sock_v7_props(int dev, tpx_ncclnet_props_v7_t *props)
{
    tpx_ncclnet_props_v9_t p;
    tpx_nccl_result_t r = props_fill(dev, &p);
    if (r != TPX_NCCL_SUCCESS || props == NULL)
        return r;
    *props = (tpx_ncclnet_props_v7_t){p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port,
                                      p.latency, p.maxComms, p.maxRecvs, p.netDeviceType,
                                      p.netDeviceVersion};
    return r;
}

tpx_nccl_result_t tpx__sock_v9_make_vdevice(int *d, tpx_ncclnet_vdev_props_t *props)
{
    if (!initialized("makeVDevice"))
        return TPX_NCCL_INVALID_USAGE;
    return tpx__sock_result(tpx__sock_dev_make_virtual(props, d));
}

/* v12 allows 8 members; this transport's connect handle names at most
 * TPX_NCCL_NET_MAX_DEVS_PER_NIC listeners (sock_wire.h), so more are refused. */
tpx_nccl_result_t tpx__sock_v12_make_vdevice(int *d, tpx_ncclnet_vdev_props_v12_t *props)
{
    if (props != NULL && props->ndevs > TPX_NCCL_NET_MAX_DEVS_PER_NIC &&
        props->ndevs <= TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12) {
        SOCK_WARN("makeVDevice: %d NICs asked for; this transport fuses at most %d (its connect "
                  "handle names that many listeners)", props->ndevs,
                  TPX_NCCL_NET_MAX_DEVS_PER_NIC);
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    if (props == NULL)
        return tpx__sock_v9_make_vdevice(d, NULL);
    tpx_ncclnet_vdev_props_t p = {.ndevs = props->ndevs};
    for (int i = 0; i < props->ndevs && i < TPX_NCCL_NET_MAX_DEVS_PER_NIC; i++)
        p.devs[i] = props->devs[i];
    return tpx__sock_v9_make_vdevice(d, &p);
}

tpx_nccl_result_t tpx__sock_v11_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
    if (!ctx_ok(ctx, "listen"))
        return TPX_NCCL_INVALID_ARGUMENT;
    return tpx__sock_v_listen(dev, handle, listen_comm);
}

tpx_nccl_result_t tpx__sock_v11_connect(void *ctx, int dev, void *handle, void **send_comm,
                                        tpx_ncclnet_dev_handle_t **dev_comm)
{
    if (!ctx_ok(ctx, "connect"))
        return TPX_NCCL_INVALID_ARGUMENT;
    return tpx__sock_v7_connect(dev, handle, send_comm, dev_comm);
}

tpx_nccl_result_t tpx__sock_v_listen(int dev, void *handle, void **listen_comm)
{
    if (!initialized("listen"))
        return TPX_NCCL_INVALID_USAGE;
    return tpx__sock_result(tpx__sock_listen(dev, handle, listen_comm));
}

tpx_nccl_result_t tpx__sock_v7_connect(int dev, void *handle, void **send_comm,
                                       tpx_ncclnet_dev_handle_t **dev_comm)
{
    (void)dev_comm; /* no device offload: NCCL's request for one is declined */
    if (!initialized("connect"))
        return TPX_NCCL_INVALID_USAGE;
    return tpx__sock_result(tpx__sock_connect(dev, handle, send_comm, 0));
}

/* ---- the extension table (net_ext.h): what tpx's engine uses beyond ncclNet ---- */

static tpx_nccl_result_t ext_connect_socks(int dev, void *handle, void **send_comm, int nsocks)
{
    if (!initialized("connect"))
        return TPX_NCCL_INVALID_USAGE;
    if (nsocks < 0 || nsocks > TPX_SOCK_MAX_SOCKS) {
        SOCK_WARN("connect: %d data connections asked for (0..%d)", nsocks, TPX_SOCK_MAX_SOCKS);
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    /* Strict TCPX mode stays what Google's plugin does: every comm alike. */
    return tpx__sock_result(
        tpx__sock_connect(dev, handle, send_comm, tpx__sock_params.tcpx ? 0 : nsocks));
}

static int ext_vec_ok(void)
{
    return !tpx__sock_params.tcpx; /* Google's plugin has nothing like it */
}

static int ext_raises_sigpipe(void)
{
    return tpx__sock_params.tcpx && tpx__sock_params.tcpx_sigpipe;
}

static int ext_max_requests(void)
{
    return tpx__sock_params.tcpx ? SOCK_TCPX_MAX_REQS : tpx__sock_params.max_reqs;
}

/* Devices are named by the comm (its NICs, CUDA staging on the buffer's own
 * device); the calling thread's current GPU is never used. */
static int ext_keeps_gpu(void) { return 1; }

static tpx_nccl_result_t ext_isendv(void *send_comm, const struct iovec *iov, int iovcnt,
                                    void **request)
{
    return tpx__sock_result(tpx__sock_postv(send_comm, SOCK_COMM_SEND, iov, iovcnt, request));
}

static tpx_nccl_result_t ext_irecvv(void *recv_comm, const struct iovec *iov, int iovcnt,
                                    void **request)
{
    return tpx__sock_result(tpx__sock_postv(recv_comm, SOCK_COMM_RECV, iov, iovcnt, request));
}

static int ext_handle_addrs(const void *handle, struct sockaddr_storage *out, int max)
{
    tpx_sock_handle_t h;
    if (handle == NULL || tpx__sock_handle_decode(handle, &h) != TPX_OK)
        return -1;
    int n = h.naddrs > 0 ? h.naddrs : 1;
    for (int k = 0; k < n && k < max; k++) {
        const tpx_sock_addr_t *a = tpx__sock_handle_addr(&h, k);
        memset(&out[k], 0, sizeof(out[k]));
        memcpy(&out[k], a, tpx__sock_addr_len(a));
    }
    return n;
}

_Static_assert(TPX_SOCK_HANDLE_MAX_ADDRS <= TPX_NET_EXT_HANDLE_ADDRS_MAX,
               "a handle's addresses fit what handle_addrs reports");
_Static_assert(TPX_SOCK_IOV_MAX == TPX_NET_EXT_IOV_MAX, "one limit");

static const tpx_net_ext_v1_t sock_net_ext = {
    .version = TPX_NET_EXT_VERSION,
    .size = sizeof(tpx_net_ext_v1_t),
    .max_requests = ext_max_requests,
    .raises_sigpipe = ext_raises_sigpipe,
    .vec_ok = ext_vec_ok,
    .keeps_gpu = ext_keeps_gpu,
    .vdev_max = TPX_SOCK_HANDLE_MAX_ADDRS, /* the listeners one connect handle names */
    .comm_set_wake = tpx__sock_comm_set_wake,
    .connect_socks = ext_connect_socks,
    .isendv = ext_isendv,
    .irecvv = ext_irecvv,
    .handle_addrs = ext_handle_addrs,
};

const void *tpx__sock_symbol(const char *name)
{
    if (name == NULL)
        return NULL;
    if (strcmp(name, TPX_NCCLNET_SYMBOL_PREFIX "12") == 0)
        return &tpx__sock_net_v12;
    if (strcmp(name, TPX_NET_EXT_SYMBOL) == 0)
        return &sock_net_ext;
    return NULL;
}

tpx_nccl_result_t tpx__sock_v10_connect(int dev, tpx_ncclnet_comm_config_t *config, void *handle,
                                        void **send_comm, tpx_ncclnet_dev_handle_t **dev_comm)
{
    (void)config; /* traffic classes are not used by this transport */
    return tpx__sock_v7_connect(dev, handle, send_comm, dev_comm);
}

tpx_nccl_result_t tpx__sock_v_accept(void *listen_comm, void **recv_comm,
                                     tpx_ncclnet_dev_handle_t **dev_comm)
{
    if (tpx__sock_params.tcpx && (dev_comm == NULL || *dev_comm == NULL)) {
        SOCK_WARN("accept: TCPX writes a device handle into storage the caller provides; "
                  "none given (Google's plugin would crash later)");
        return TPX_NCCL_INTERNAL_ERROR;
    }
    tpx_status_t st = tpx__sock_accept(listen_comm, recv_comm);
    if (st == TPX_OK && tpx__sock_params.tcpx && recv_comm != NULL && *recv_comm != NULL) {
        tpx_sock_comm_t *c = *recv_comm;
        **dev_comm = (tpx_ncclnet_dev_handle_t){
            .netDeviceType = TPX_NCCL_NET_DEVICE_UNPACK,
            .netDeviceVersion = TPX_NCCL_NET_DEVICE_UNPACK_VERSION,
            .handle = c->devh, /* device memory: never read on the CPU */
            .size = sizeof(tpx_nccl_unpack_handle_t),
            .needsProxyProgress = 1,
        };
    }
    return tpx__sock_result(st);
}

tpx_nccl_result_t tpx__sock_v8_regmr(void *comm, void *data, size_t size, int type, void **mh)
{
    if (tpx__sock_params.tcpx && type == TPX_NCCL_PTR_CUDA &&
        (((uintptr_t)data & 4095) != 0 || size > INT_MAX)) {
        SOCK_WARN("regMr: TCPX needs 4096-byte aligned CUDA buffers of < 2 GiB (%p, %zu)", data,
                  size);
        return TPX_NCCL_INTERNAL_ERROR;
    }
    return tpx__sock_result(tpx__sock_regmr(comm, data, size, type, mh));
}

tpx_nccl_result_t tpx__sock_v7_regmr(void *comm, void *data, int size, int type, void **mh)
{
    if (size < 0) {
        SOCK_WARN("regMr: negative size %d", size);
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    return tpx__sock_v8_regmr(comm, data, (size_t)size, type, mh);
}

tpx_nccl_result_t tpx__sock_v_regmr_dmabuf(void *comm, void *data, size_t size, int type,
                                           uint64_t offset, int fd, void **mh)
{
    (void)offset;
    (void)fd;
    if (type != TPX_NCCL_PTR_HOST) {
        SOCK_WARN("regMrDmaBuf: DMA-BUF registration is not supported by this transport");
        return TPX_NCCL_INTERNAL_ERROR;
    }
    return tpx__sock_v8_regmr(comm, data, size, type, mh);
}

tpx_nccl_result_t tpx__sock_v_deregmr(void *comm, void *mh)
{
    return tpx__sock_result(tpx__sock_deregmr(comm, mh));
}

tpx_nccl_result_t tpx__sock_v9_isend(void *comm, void *data, size_t size, int tag, void *mh,
                                     void **request)
{
    return tpx__sock_result(tpx__sock_isend(comm, data, size, tag, mh, request));
}

tpx_nccl_result_t tpx__sock_v7_isend(void *comm, void *data, int size, int tag, void *mh,
                                     void **request)
{
    if (size < 0) {
        SOCK_WARN("isend: negative size %d", size);
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    return tpx__sock_v9_isend(comm, data, (size_t)size, tag, mh, request);
}

tpx_nccl_result_t tpx__sock_v10_isend(void *comm, void *data, size_t size, int tag, void *mh,
                                      void *phandle, void **request)
{
    (void)phandle;
    return tpx__sock_v9_isend(comm, data, size, tag, mh, request);
}

tpx_nccl_result_t tpx__sock_v9_irecv(void *comm, int n, void **data, size_t *sizes, int *tags,
                                     void **mh, void **request)
{
    return tpx__sock_result(tpx__sock_irecv(comm, n, data, sizes, tags, mh, request));
}

tpx_nccl_result_t tpx__sock_v7_irecv(void *comm, int n, void **data, int *sizes, int *tags,
                                     void **mh, void **request)
{
    if (n != 1 || sizes == NULL) /* the core reports n != 1 */
        return tpx__sock_v9_irecv(comm, n, data, NULL, tags, mh, request);
    if (sizes[0] < 0) {
        SOCK_WARN("irecv: negative size %d", sizes[0]);
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    size_t sz = (size_t)sizes[0];
    return tpx__sock_v9_irecv(comm, n, data, &sz, tags, mh, request);
}

tpx_nccl_result_t tpx__sock_v10_irecv(void *comm, int n, void **data, size_t *sizes, int *tags,
                                      void **mh, void **phandles, void **request)
{
    (void)phandles;
    return tpx__sock_v9_irecv(comm, n, data, sizes, tags, mh, request);
}

tpx_nccl_result_t tpx__sock_v_iflush(void *comm, int n, void **data, int *sizes, void **mh,
                                     void **request)
{
    /* Host memory written by recv() is visible once test() says done. */
    (void)comm, (void)n, (void)data, (void)sizes, (void)mh;
    if (tpx__sock_params.tcpx) {
        SOCK_WARN("iflush: must not be called on TCPX (its iflush dereferences the request)");
        return TPX_NCCL_INTERNAL_ERROR;
    }
    if (request != NULL)
        *request = NULL;
    return TPX_NCCL_SUCCESS;
}

tpx_nccl_result_t tpx__sock_v_test(void *request, int *done, int *sizes)
{
    size_t sz = 0;
    tpx_status_t st = tpx__sock_test(request, done, &sz);
    if (st == TPX_OK && *done && sizes != NULL && !tpx__sock_params.tcpx) /* TCPX never does */
        *sizes = sz > INT_MAX ? INT_MAX : (int)sz;
    return tpx__sock_result(st);
}

tpx_nccl_result_t tpx__sock_v_close_send(void *comm)
{
    return tpx__sock_result(tpx__sock_close(comm, SOCK_COMM_SEND));
}

tpx_nccl_result_t tpx__sock_v_close_recv(void *comm)
{
    return tpx__sock_result(tpx__sock_close(comm, SOCK_COMM_RECV));
}

tpx_nccl_result_t tpx__sock_v_close_listen(void *comm)
{
    return tpx__sock_result(tpx__sock_close_listen(comm));
}

tpx_nccl_result_t tpx__sock_v_get_device_mr(void *comm, void *mh, void **dptr)
{
    (void)comm, (void)mh;
    if (dptr != NULL && !tpx__sock_params.tcpx) /* TCPX leaves the output untouched */
        *dptr = NULL; /* no device-side offload */
    return TPX_NCCL_SUCCESS;
}

tpx_nccl_result_t tpx__sock_v_irecv_consumed(void *comm, int n, void *request)
{
    return tpx__sock_result(tpx__sock_consumed(comm, n, request));
}

const tpx_ncclnet_v7_t tpx__sock_net_v7 = TPX_SOCK_NET_V7_INIT;
const tpx_ncclnet_v8_t tpx__sock_net_v8 = TPX_SOCK_NET_V8_INIT;
const tpx_ncclnet_v9_t tpx__sock_net_v9 = TPX_SOCK_NET_V9_INIT;
const tpx_ncclnet_v10_t tpx__sock_net_v10 = TPX_SOCK_NET_V10_INIT;
const tpx_ncclnet_v11_t tpx__sock_net_v11 = TPX_SOCK_NET_V11_INIT;
const tpx_ncclnet_v12_t tpx__sock_net_v12 = TPX_SOCK_NET_V12_INIT;
