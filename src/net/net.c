/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.c - loading ncclNet plugins and calling them through one interface.
 *
 * Plugin libraries are kept for the life of the process. Before v11 init()
 * may be called only once per process (TCPX) and nothing can finalise a
 * plugin, so every client shares one initialised entry. v11 moved the
 * per-client state into a context: init() per client, finalize() at its
 * end, as NCCL does per communicator; tpx does it per engine.
 */
#include "net.h"

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/config.h"
#include "common/log.h"
#include "common/sigpipe.h"
#include "plugin/sock/sock_symbol.h"

#define NET_MAX 8

static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static tpx_net_t nets[NET_MAX];
static int nnets;

/* ---- the logger handed to plugins ----------------------------------------- */

static int nccl_to_tpx_level(tpx_nccl_log_level_t level)
{
    switch (level) {
    case TPX_NCCL_LOG_WARN: return TPX_LOG_WARN;
    case TPX_NCCL_LOG_ABORT: return TPX_LOG_ERROR;
    case TPX_NCCL_LOG_VERSION:
    case TPX_NCCL_LOG_INFO: return TPX_LOG_INFO;
    case TPX_NCCL_LOG_TRACE: return TPX_LOG_TRACE;
    default: return TPX_LOG_NONE;
    }
}

/* A plugin may log the same line on every progress call (TCPX does in
 * host-memory mode): at most LOG_BURST lines per call site per second pass;
 * the rest are counted and reported with the next line that passes. */
#define LOG_SITES 64
#define LOG_BURST 5
static struct {
    const char *file;
    int line;
    uint64_t window_s;
    unsigned count, suppressed;
} log_sites[LOG_SITES];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void tpx__net_log(tpx_nccl_log_level_t level, unsigned long flags, const char *file, int line,
                  const char *fmt, ...)
{
    (void)flags;
    int lvl = nccl_to_tpx_level(level);
    if (lvl == TPX_LOG_NONE || !TPX_LOG_ON(lvl) || fmt == NULL)
        return;
    if (file == NULL)
        file = "plugin";
    uint64_t now_s = tpx__now_ns() / 1000000000ull;
    unsigned suppressed = 0;
    pthread_mutex_lock(&log_lock);
    unsigned h = ((unsigned)(uintptr_t)file * 31u + (unsigned)line) % LOG_SITES;
    if (log_sites[h].file != file || log_sites[h].line != line) {
        log_sites[h].file = file;
        log_sites[h].line = line;
        log_sites[h].window_s = now_s;
        log_sites[h].count = 0;
        log_sites[h].suppressed = 0;
    }
    if (log_sites[h].window_s != now_s) {
        log_sites[h].window_s = now_s;
        log_sites[h].count = 0;
    }
    int pass = ++log_sites[h].count <= LOG_BURST;
    if (pass) {
        suppressed = log_sites[h].suppressed;
        log_sites[h].suppressed = 0;
    } else {
        log_sites[h].suppressed++;
    }
    pthread_mutex_unlock(&log_lock);
    if (!pass)
        return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (suppressed)
        tpx__log_emit(lvl, file, line, "plugin: %s [%u similar lines suppressed]", msg,
                      suppressed);
    else
        tpx__log_emit(lvl, file, line, "plugin: %s", msg);
}

/* ---- loading ------------------------------------------------------------------ */

/* TCPX calls exit(1) from init() when there is no CUDA device; find out
 * first, without linking CUDA. */
static int cuda_device_present(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return 0;
    int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*cu_count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
    int n = 0;
    int ok = cu_init && cu_count && cu_init(0) == 0 && cu_count(&n) == 0 && n > 0;
    /* libcuda stays loaded: the plugin will use it. */
    return ok;
}

static int name_is_tcpx(const char *name)
{
    char low[128];
    size_t i = 0;
    for (; name[i] && i < sizeof(low) - 1; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = '\0';
    return strstr(low, "tcpx") != NULL;
}

/* Tables newer than tpx knows are looked for up to this version. */
#define NET_ABI_PROBE_MAX 32

/* A symbol of the plugin: dlsym() on its library, or the built-in
 * transport's own lookup ("builtin"), which answers the same names. */
static void *net_sym(const tpx_net_t *n, const char *name)
{
    return n->dl != NULL ? dlsym(n->dl, name) : (void *)tpx__sock_symbol(name);
}

/* The optional extension table (net_ext.h), if the plugin exports a usable one. */
static const tpx_net_ext_v1_t *net_ext(const tpx_net_t *n)
{
    const tpx_net_ext_v1_t *x = net_sym(n, TPX_NET_EXT_SYMBOL);
    if (x == NULL)
        return NULL;
    if (x->version < 1 || x->size < sizeof(*x) || x->max_requests == NULL ||
        x->raises_sigpipe == NULL || x->vec_ok == NULL || x->keeps_gpu == NULL ||
        x->comm_set_wake == NULL || x->connect_socks == NULL || x->isendv == NULL ||
        x->irecvv == NULL || x->handle_addrs == NULL) {
        TPX_WARN("net plugin '%s': its %s (version %u, %u bytes) is not one tpx can use: "
                 "ignored, the plugin is driven through ncclNet only", n->label,
                 TPX_NET_EXT_SYMBOL, (unsigned)x->version, (unsigned)x->size);
        return NULL;
    }
    return x;
}

static tpx_status_t net_load(const char *which, tpx_net_t *n)
{
    memset(n, 0, sizeof(*n));
    snprintf(n->label, sizeof(n->label), "%s", which);
    char path[PATH_MAX];
    if (strcmp(which, "builtin") == 0)
        snprintf(path, sizeof(path), "%s", "the built-in transport");
    else if (strchr(which, '/') != NULL)
        snprintf(path, sizeof(path), "%s", which);
    else
        snprintf(path, sizeof(path), "libnccl-net-%s.so", which);
    if (strcmp(which, "builtin") != 0) {
        n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (n->dl == NULL) {
            TPX_ERROR("net plugin '%s': cannot load %s: %s", which, path, dlerror());
            return TPX_ERR_PLUGIN;
        }
    }
    /* A table newer than this header is not something tpx can call; the
     * plugin's newest known table is (plugins export several for exactly
     * this), and saying so tells the reader why NCCL and tpx differ. */
    char sym[64];
    for (int v = NET_ABI_PROBE_MAX; v > TPX_NCCLNET_ABI_MAX && n->newer == 0; v--) {
        snprintf(sym, sizeof(sym), TPX_NCCLNET_SYMBOL_PREFIX "%d", v);
        if (net_sym(n, sym) != NULL)
            n->newer = v;
    }
    for (int v = TPX_NCCLNET_ABI_MAX; v >= TPX_NCCLNET_ABI_MIN && n->table == NULL; v--) {
        snprintf(sym, sizeof(sym), TPX_NCCLNET_SYMBOL_PREFIX "%d", v);
        n->table = net_sym(n, sym);
        n->abi = v;
    }
    if (n->table == NULL) {
        if (n->newer)
            TPX_ERROR("net plugin '%s' (%s) exports ncclNetPlugin_v%d, newer than this tpx "
                      "knows, and none of ncclNetPlugin_v%d..v%d: use a tpx that knows v%d",
                      which, path, n->newer, TPX_NCCLNET_ABI_MIN, TPX_NCCLNET_ABI_MAX, n->newer);
        else
            TPX_ERROR("net plugin '%s' (%s) exports none of ncclNetPlugin_v%d..v%d", which, path,
                      TPX_NCCLNET_ABI_MIN, TPX_NCCLNET_ABI_MAX);
        if (n->dl != NULL)
            dlclose(n->dl);
        return TPX_ERR_PLUGIN;
    }
    n->ext = net_ext(n);
    n->name = ((const tpx_ncclnet_v7_t *)n->table)->name; /* `name` leads every version */
    if (n->name == NULL)
        n->name = "(unnamed)";
    if (n->newer)
        TPX_INFO("net plugin '%s' (%s) exports ncclNetPlugin_v%d, newer than this tpx knows: "
                 "driving it through ncclNetPlugin_v%d", which, n->name, n->newer, n->abi);
    return TPX_OK;
}

#define T7(n) ((const tpx_ncclnet_v7_t *)(n)->table)
#define T8(n) ((const tpx_ncclnet_v8_t *)(n)->table)
#define T9(n) ((const tpx_ncclnet_v9_t *)(n)->table)
#define T10(n) ((const tpx_ncclnet_v10_t *)(n)->table)
#define T11(n) ((const tpx_ncclnet_v11_t *)(n)->table)
#define T12(n) ((const tpx_ncclnet_v12_t *)(n)->table)

/* v11 and v12 differ in the properties and makeVDevice only. */
_Static_assert(offsetof(tpx_ncclnet_v11_t, finalize) == offsetof(tpx_ncclnet_v12_t, finalize) &&
                   offsetof(tpx_ncclnet_v11_t, setNetAttr) ==
                       offsetof(tpx_ncclnet_v12_t, setNetAttr) &&
                   offsetof(tpx_ncclnet_v11_t, listen) == offsetof(tpx_ncclnet_v12_t, listen) &&
                   offsetof(tpx_ncclnet_v11_t, connect) == offsetof(tpx_ncclnet_v12_t, connect),
               "v11 and v12 share their context entries");

/* The plugin's check before any init(): TCPX exits the process without a GPU. */
static tpx_status_t net_precheck(tpx_net_t *n)
{
    n->is_tcpx = name_is_tcpx(n->name);
    if (n->is_tcpx && !cuda_device_present()) {
        TPX_ERROR("net plugin '%s' (%s) needs a CUDA GPU and none is usable here (it would "
                  "exit the process); use TPX_NET_PLUGIN=builtin on this machine",
                  n->label, n->name);
        return TPX_ERR_NO_DEVICE;
    }
    return TPX_OK;
}

static tpx_status_t net_devices(tpx_net_t *n)
{
    int ndev = 0;
    tpx_nccl_result_t rc = T7(n)->devices(&ndev); /* same slot in every version */
    if (rc != TPX_NCCL_SUCCESS || ndev <= 0) {
        TPX_ERROR("net plugin '%s' (%s): no devices (rc %d)", n->label, n->name, (int)rc);
        return TPX_ERR_NO_DEVICE;
    }
    n->ndev = ndev;
    TPX_INFO("net plugin '%s': %s, ncclNet v%d, %d device(s)", n->label, n->name, n->abi, ndev);
    return TPX_OK;
}

/* Before v11: init() once per process. */
static tpx_status_t net_init(tpx_net_t *n)
{
    tpx_status_t st = net_precheck(n);
    if (st != TPX_OK)
        return st;
    tpx_nccl_result_t rc;
    /* Threads the plugin starts in init (and in listen/connect/accept)
     * inherit the guard's blocked SIGPIPE. */
    tpx_sigpipe_guard_t g;
    tpx__sigpipe_enter(&g, n->dl != NULL);
    switch (n->abi) {
    case 10: rc = T10(n)->init(tpx__net_log, NULL); break;
    case 9: rc = T9(n)->init(tpx__net_log); break;
    case 8: rc = T8(n)->init(tpx__net_log); break;
    default: rc = T7(n)->init(tpx__net_log); break;
    }
    tpx__sigpipe_leave(&g);
    n->sigpipe = n->ext == NULL || n->ext->raises_sigpipe();
    if (rc != TPX_NCCL_SUCCESS) {
        TPX_ERROR("net plugin '%s' (%s, v%d): init failed with ncclResult %d", n->label, n->name,
                  n->abi, (int)rc);
        return TPX_ERR_PLUGIN;
    }
    return net_devices(n);
}

/* v11+: a context for one client, in a tpx_net_t of its own (a copy of the
 * loaded entry `lib`). The devices are counted after the first init, as
 * NCCL does; later clients reuse the count. */
static tpx_status_t net_init_client(tpx_net_t *lib, uint64_t client_id, tpx_net_t **out)
{
    tpx_status_t st = net_precheck(lib);
    if (st != TPX_OK)
        return st;
    tpx_net_t *n = malloc(sizeof(*n));
    if (n == NULL) {
        TPX_ERROR("net plugin '%s': out of memory", lib->label);
        return TPX_ERR_NO_MEMORY;
    }
    *n = *lib;
    tpx_ncclnet_comm_config_t cfg = {.trafficClass = TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
    void *ctx = NULL;
    tpx_sigpipe_guard_t g;
    tpx__sigpipe_enter(&g, n->dl != NULL);
    tpx_nccl_result_t rc = T11(n)->init(&ctx, client_id, &cfg, tpx__net_log, NULL);
    tpx__sigpipe_leave(&g);
    n->sigpipe = n->ext == NULL || n->ext->raises_sigpipe();
    if (rc != TPX_NCCL_SUCCESS) {
        TPX_ERROR("net plugin '%s' (%s, v%d): init failed with ncclResult %d", n->label, n->name,
                  n->abi, (int)rc);
        free(n);
        return TPX_ERR_PLUGIN;
    }
    n->ctx = ctx;
    n->client = 1;
    if (lib->ndev == 0) {
        st = net_devices(n);
        if (st != TPX_OK) {
            tpx__net_close(n);
            return st;
        }
        lib->ndev = n->ndev;
    }
    TPX_DEBUG("net plugin %s: context %p for client %016llx", n->name, ctx,
              (unsigned long long)client_id);
    *out = n;
    return TPX_OK;
}

tpx_status_t tpx__net_open(const char *which, uint64_t client_id, tpx_net_t **out)
{
    tpx_status_t st = tpx__config_load();
    if (st != TPX_OK)
        return st;
    if (which == NULL || *which == '\0')
        which = tpx__config_str(TPX_CFG_NET_PLUGIN);
    pthread_mutex_lock(&net_lock);
    tpx_net_t *lib = NULL;
    for (int i = 0; i < nnets && lib == NULL; i++)
        if (strcmp(nets[i].label, which) == 0)
            lib = &nets[i];
    if (lib == NULL) {
        if (nnets == NET_MAX) {
            pthread_mutex_unlock(&net_lock);
            TPX_ERROR("net plugin '%s': too many different plugins in one process", which);
            return TPX_ERR_NO_RESOURCE;
        }
        tpx_net_t *n = &nets[nnets];
        st = net_load(which, n);
        if (st == TPX_OK && n->abi < 11) {
            st = net_init(n);
            if (st != TPX_OK && n->dl != NULL)
                n->table = NULL; /* init may have started threads: keep the library mapped */
        }
        if (st != TPX_OK) {
            pthread_mutex_unlock(&net_lock);
            return st;
        }
        nnets++; /* v11+: loaded; each client initialises it below */
        lib = n;
    }
    if (lib->abi < 11)
        *out = lib;
    else
        st = net_init_client(lib, client_id, out);
    pthread_mutex_unlock(&net_lock);
    return st;
}

/* Every call into the plugin's table runs inside a SIGPIPE guard when the
 * plugin may raise it (n->sigpipe): free inside the engine's guard of a
 * pass and on libtpx's own threads, three system calls on any other path
 * (set-up, registration, close). */
#define NET_GUARD(n)                                                                               \
    tpx_sigpipe_guard_t guard_;                                                                    \
    tpx__sigpipe_enter(&guard_, (n)->sigpipe)
#define NET_UNGUARD() tpx__sigpipe_leave(&guard_)

void tpx__net_close(tpx_net_t *n)
{
    if (n == NULL || !n->client)
        return;
    /* NCCL calls finalize unconditionally; a table without one has nothing to end. */
    NET_GUARD(n);
    tpx_nccl_result_t rc = T11(n)->finalize != NULL ? T11(n)->finalize(n->ctx) : TPX_NCCL_SUCCESS;
    NET_UNGUARD();
    if (rc != TPX_NCCL_SUCCESS)
        TPX_WARN("net plugin %s: finalize of context %p failed with ncclResult %d", n->name,
                 n->ctx, (int)rc);
    else
        TPX_DEBUG("net plugin %s: context %p finalised", n->name, n->ctx);
    free(n);
}

int tpx__net_set_flows(tpx_net_t *n, int flows)
{
    if (n == NULL || !n->client || T11(n)->setNetAttr == NULL || flows < 1)
        return 1;
    tpx_ncclnet_comm_attr_t ca = {.maxConcurrentPeers = TPX_NCCL_NET_ATTR_UNDEF,
                                  .minConcurrentPeers = 1,
                                  .maxFlowsPerPeer = flows,
                                  .minFlowsPerPeer = 1};
    tpx_ncclnet_attr_t a = {.sendCommAttr = ca,
                            .recvCommAttr = ca,
                            .op = (uint32_t)TPX_NCCL_NET_ATTR_UNDEF,
                            .algo = (uint32_t)TPX_NCCL_NET_ATTR_UNDEF,
                            .proto = (uint32_t)TPX_NCCL_NET_ATTR_UNDEF};
    NET_GUARD(n);
    tpx_nccl_result_t rc = T11(n)->setNetAttr(n->ctx, &a);
    NET_UNGUARD();
    if (rc != TPX_NCCL_SUCCESS) {
        TPX_DEBUG("net plugin %s: setNetAttr (%d flows per peer) refused with ncclResult %d; "
                  "a hint only, going on", n->name, flows, (int)rc);
        return 1;
    }
    TPX_DEBUG("net plugin %s: setNetAttr: %d flows per peer", n->name, flows);
    return 0;
}

/* ---- calls --------------------------------------------------------------------- */


/* Plugin failures: the plugin has logged its reason; we add which call. */
static tpx_status_t net_rc(tpx_net_t *n, const char *fn, tpx_nccl_result_t rc)
{
    if (rc == TPX_NCCL_SUCCESS)
        return TPX_OK;
    TPX_DEBUG("net plugin %s: %s returned %d", n->name, fn, (int)rc);
    switch (rc) {
    case TPX_NCCL_SYSTEM_ERROR:
    case TPX_NCCL_REMOTE_ERROR: return TPX_ERR_CONN_RESET;
    case TPX_NCCL_INVALID_ARGUMENT:
    case TPX_NCCL_INVALID_USAGE: return TPX_ERR_INVALID_ARG;
    default: return TPX_ERR_PLUGIN;
    }
}

tpx_status_t tpx__net_props(tpx_net_t *n, int dev, tpx_net_props_t *out)
{
    /* Every version is read into the v12 layout, the widest. */
    tpx_ncclnet_props_v12_t p;
    tpx_nccl_result_t rc;
    memset(&p, 0, sizeof(p));
    memset(out, 0, sizeof(*out));
    out->max_p2p_bytes = INT_MAX;
    out->max_multi_request = 1;
    out->rail_id = TPX_NCCL_NET_ID_UNDEF;
    out->plane_id = TPX_NCCL_NET_ID_UNDEF;
    if (n->abi == 12) {
        rc = T12(n)->getProperties(dev, &p);
        out->rail_id = p.railId;
        out->plane_id = p.planeId;
    } else if (n->abi >= 9) {
        tpx_ncclnet_props_v11_t q; /* v9/v10 are its prefix */
        memset(&q, 0, sizeof(q));
        q.maxMultiRequestSize = 1;
        rc = n->abi == 11   ? T11(n)->getProperties(dev, &q)
             : n->abi == 10 ? T10(n)->getProperties(dev, (tpx_ncclnet_props_v10_t *)&q)
                            : T9(n)->getProperties(dev, (tpx_ncclnet_props_v9_t *)&q);
        p = (tpx_ncclnet_props_v12_t){
            .name = q.name, .pciPath = q.pciPath, .ptrSupport = q.ptrSupport,
            .regIsGlobal = q.regIsGlobal, .speed = q.speed, .maxComms = q.maxComms,
            .maxRecvs = q.maxRecvs, .netDeviceType = q.netDeviceType,
            .netDeviceVersion = q.netDeviceVersion, .vProps = {.ndevs = q.vProps.ndevs},
            .maxP2pBytes = q.maxP2pBytes, .maxMultiRequestSize = q.maxMultiRequestSize};
        for (int i = 0; i < TPX_NCCL_NET_MAX_DEVS_PER_NIC; i++)
            p.vProps.devs[i] = q.vProps.devs[i];
    } else if (n->abi == 8) {
        tpx_ncclnet_props_v8_t q;
        memset(&q, 0, sizeof(q));
        rc = T8(n)->getProperties(dev, &q);
        p = (tpx_ncclnet_props_v12_t){.name = q.name, .pciPath = q.pciPath,
                                      .ptrSupport = q.ptrSupport, .regIsGlobal = q.regIsGlobal,
                                      .speed = q.speed, .maxComms = q.maxComms,
                                      .maxRecvs = q.maxRecvs, .netDeviceType = q.netDeviceType,
                                      .netDeviceVersion = q.netDeviceVersion};
    } else {
        tpx_ncclnet_props_v7_t q;
        memset(&q, 0, sizeof(q));
        rc = T7(n)->getProperties(dev, &q);
        p = (tpx_ncclnet_props_v12_t){.name = q.name, .pciPath = q.pciPath,
                                      .ptrSupport = q.ptrSupport, .speed = q.speed,
                                      .maxComms = q.maxComms, .maxRecvs = q.maxRecvs,
                                      .netDeviceType = q.netDeviceType,
                                      .netDeviceVersion = q.netDeviceVersion};
    }
    if (rc != TPX_NCCL_SUCCESS)
        return net_rc(n, "getProperties", rc);
    snprintf(out->name, sizeof(out->name), "%s", p.name ? p.name : "?");
    snprintf(out->pci_path, sizeof(out->pci_path), "%s", p.pciPath ? p.pciPath : "");
    out->ptr_support = p.ptrSupport;
    out->speed_mbps = p.speed;
    out->max_comms = p.maxComms;
    out->max_recvs = p.maxRecvs;
    out->dev_type = (int)p.netDeviceType;
    out->dev_version = p.netDeviceVersion;
    out->reg_is_global = p.regIsGlobal;
    if (n->abi >= 9)
        out->max_p2p_bytes = p.maxP2pBytes ? p.maxP2pBytes : INT_MAX;
    if (n->abi >= 11 && p.maxMultiRequestSize >= 1)
        out->max_multi_request = p.maxMultiRequestSize;
    out->nmembers = 1;
    out->members[0] = dev;
    int vmax = n->abi == 12 ? TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12 : TPX_NCCL_NET_MAX_DEVS_PER_NIC;
    if (n->abi >= 9 && p.vProps.ndevs >= 1 && p.vProps.ndevs <= vmax) {
        out->nmembers = p.vProps.ndevs;
        memcpy(out->members, p.vProps.devs, sizeof(int) * (size_t)p.vProps.ndevs);
    }
    return TPX_OK;
}

/* makeVDevice sits at the same offset from v9 to v12. */
_Static_assert(offsetof(tpx_ncclnet_v9_t, makeVDevice) == offsetof(tpx_ncclnet_v10_t, makeVDevice) &&
                   offsetof(tpx_ncclnet_v9_t, makeVDevice) ==
                       offsetof(tpx_ncclnet_v11_t, makeVDevice) &&
                   offsetof(tpx_ncclnet_v9_t, makeVDevice) ==
                       offsetof(tpx_ncclnet_v12_t, makeVDevice),
               "makeVDevice moved between v9 and v12");

int tpx__net_has_vdev(const tpx_net_t *n)
{
    return n->abi >= 9 && T9(n)->makeVDevice != NULL;
}

int tpx__net_vdev_max(const tpx_net_t *n)
{
    if (!tpx__net_has_vdev(n))
        return 0;
    int vmax = n->abi == 12 ? TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12 : TPX_NCCL_NET_MAX_DEVS_PER_NIC;
    return n->ext != NULL && n->ext->vdev_max > 0 ? TPX_MIN(vmax, n->ext->vdev_max) : vmax;
}

tpx_status_t tpx__net_make_vdev(tpx_net_t *n, const int *devs, int ndevs, int *vdev)
{
    if (!tpx__net_has_vdev(n)) {
        TPX_ERROR("net plugin %s (ncclNet v%d) cannot fuse NICs into a virtual device: %s",
                  n->name, n->abi,
                  n->abi < 9 ? "makeVDevice needs ncclNet v9 or newer" : "it has no makeVDevice");
        return TPX_ERR_UNSUPPORTED;
    }
    int vmax = tpx__net_vdev_max(n);
    if (devs == NULL || vdev == NULL || ndevs < 1 || ndevs > vmax) {
        TPX_ERROR("virtual device of %d NICs: a virtual device of %s (ncclNet v%d) fuses 1 to %d",
                  ndevs, n->name, n->abi, vmax);
        return TPX_ERR_INVALID_ARG;
    }
    int d = -1;
    tpx_nccl_result_t rc;
    if (n->abi == 12) {
        tpx_ncclnet_vdev_props_v12_t p;
        memset(&p, 0, sizeof(p));
        p.ndevs = ndevs;
        memcpy(p.devs, devs, sizeof(int) * (size_t)ndevs);
        rc = T12(n)->makeVDevice(&d, &p);
    } else {
        tpx_ncclnet_vdev_props_t p;
        memset(&p, 0, sizeof(p));
        p.ndevs = ndevs;
        memcpy(p.devs, devs, sizeof(int) * (size_t)ndevs);
        rc = T9(n)->makeVDevice(&d, &p);
    }
    if (rc != TPX_NCCL_SUCCESS)
        return net_rc(n, "makeVDevice", rc); /* the plugin has said why */
    if (d < 0) {
        TPX_ERROR("net plugin %s: makeVDevice returned device %d", n->name, d);
        return TPX_ERR_PLUGIN;
    }
    *vdev = d;
    return TPX_OK;
}

tpx_status_t tpx__net_listen(tpx_net_t *n, int dev, void *handle, void **listen_comm)
{
    NET_GUARD(n);
    tpx_nccl_result_t rc = n->abi >= 11 ? T11(n)->listen(n->ctx, dev, handle, listen_comm)
                                        : T7(n)->listen(dev, handle, listen_comm);
    NET_UNGUARD();
    return net_rc(n, "listen", rc);
}

tpx_status_t tpx__net_connect(tpx_net_t *n, int dev, void *handle, void **comm,
                              tpx_ncclnet_dev_handle_t **dev_handle)
{
    tpx_nccl_result_t rc;
    NET_GUARD(n);
    if (n->abi >= 11) {
        rc = T11(n)->connect(n->ctx, dev, handle, comm, dev_handle);
    } else if (n->abi == 10) {
        tpx_ncclnet_comm_config_t cfg = {.trafficClass = TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
        rc = T10(n)->connect(dev, &cfg, handle, comm, dev_handle);
    } else {
        rc = T7(n)->connect(dev, handle, comm, dev_handle); /* same slot and type v7..v9 */
    }
    NET_UNGUARD();
    return net_rc(n, "connect", rc);
}

tpx_status_t tpx__net_connect_small(tpx_net_t *n, int dev, void *handle, void **comm,
                                    tpx_ncclnet_dev_handle_t **dev_handle)
{
    return tpx__net_connect_socks(n, dev, handle, comm, dev_handle, 1);
}

int tpx__net_set_wake(tpx_net_t *n, void *comm, tpx_net_wake_t *w)
{
    if (n == NULL || n->ext == NULL)
        return 0;
    if (comm != NULL)
        n->ext->comm_set_wake(comm, w);
    return 1;
}

int tpx__net_max_requests(const tpx_net_t *n)
{
    if (n != NULL && n->ext != NULL)
        return n->ext->max_requests();
    return n != NULL && n->is_tcpx ? 16 : 0;
}

int tpx__net_keeps_gpu(const tpx_net_t *n)
{
    return n != NULL && n->ext != NULL && n->ext->keeps_gpu();
}

int tpx__net_reads_handles(const tpx_net_t *n)
{
    return n != NULL && n->ext != NULL;
}

int tpx__net_handle_addrs(const tpx_net_t *n, const void *handle, struct sockaddr_storage *out,
                          int max)
{
    if (!tpx__net_reads_handles(n))
        return -1;
    return n->ext->handle_addrs(handle, out, max);
}

tpx_status_t tpx__net_connect_socks(tpx_net_t *n, int dev, void *handle, void **comm,
                                    tpx_ncclnet_dev_handle_t **dev_handle, int nsocks)
{
    if (n->ext == NULL)
        return tpx__net_connect(n, dev, handle, comm, dev_handle);
    return net_rc(n, "connect", n->ext->connect_socks(dev, handle, comm, nsocks));
}

int tpx__net_has_vec(const tpx_net_t *n)
{
    return n != NULL && n->ext != NULL && n->ext->vec_ok();
}

tpx_status_t tpx__net_isendv(tpx_net_t *n, void *comm, const struct iovec *iov, int iovcnt,
                             void **req)
{
    if (!tpx__net_has_vec(n))
        return TPX_ERR_UNSUPPORTED;
    return net_rc(n, "isendv", n->ext->isendv(comm, iov, iovcnt, req));
}

tpx_status_t tpx__net_irecvv(tpx_net_t *n, void *comm, const struct iovec *iov, int iovcnt,
                             void **req)
{
    if (!tpx__net_has_vec(n))
        return TPX_ERR_UNSUPPORTED;
    return net_rc(n, "irecvv", n->ext->irecvv(comm, iov, iovcnt, req));
}

tpx_status_t tpx__net_accept(tpx_net_t *n, void *listen_comm, void **comm,
                             tpx_ncclnet_dev_handle_t **dev_handle)
{
    NET_GUARD(n);
    tpx_nccl_result_t rc = T7(n)->accept(listen_comm, comm, dev_handle);
    NET_UNGUARD();
    return net_rc(n, "accept", rc);
}

tpx_status_t tpx__net_regmr(tpx_net_t *n, void *comm, void *data, size_t size, int type,
                            void **mh)
{
    if (n->abi == 7) {
        if (size > INT_MAX) {
            TPX_ERROR("registration of %zu bytes exceeds the v7 ABI's int size", size);
            return TPX_ERR_INVALID_ARG;
        }
    }
    NET_GUARD(n);
    tpx_nccl_result_t rc = n->abi == 7 ? T7(n)->regMr(comm, data, (int)size, type, mh)
                                       : T8(n)->regMr(comm, data, size, type, mh);
    NET_UNGUARD();
    return net_rc(n, "regMr", rc);
}

tpx_status_t tpx__net_deregmr(tpx_net_t *n, void *comm, void *mh)
{
    NET_GUARD(n);
    tpx_nccl_result_t rc = T7(n)->deregMr(comm, mh);
    NET_UNGUARD();
    return net_rc(n, "deregMr", rc);
}

tpx_status_t tpx__net_isend(tpx_net_t *n, void *comm, void *data, size_t size, int tag, void *mh,
                            void **req)
{
    tpx_nccl_result_t rc;
    if (n->abi < 9 && size > INT_MAX)
        return TPX_ERR_INVALID_ARG;
    NET_GUARD(n);
    switch (n->abi) {
    case 12:
    case 11: /* v10's isend */
    case 10: rc = T10(n)->isend(comm, data, size, tag, mh, NULL, req); break;
    case 9: rc = T9(n)->isend(comm, data, size, tag, mh, req); break;
    default: rc = T7(n)->isend(comm, data, (int)size, tag, mh, req); break;
    }
    NET_UNGUARD();
    return net_rc(n, "isend", rc);
}

tpx_status_t tpx__net_irecv(tpx_net_t *n, void *comm, void *data, size_t size, int tag, void *mh,
                            void **req)
{
    tpx_nccl_result_t rc;
    void *datas[1] = {data}, *mhs[1] = {mh};
    int tags[1] = {tag};
    if (n->abi < 9 && size > INT_MAX)
        return TPX_ERR_INVALID_ARG;
    NET_GUARD(n);
    switch (n->abi) {
    case 12:
    case 11: /* v10's irecv */
    case 10: {
        size_t sizes[1] = {size};
        rc = T10(n)->irecv(comm, 1, datas, sizes, tags, mhs, NULL, req);
        break;
    }
    case 9: {
        size_t sizes[1] = {size};
        rc = T9(n)->irecv(comm, 1, datas, sizes, tags, mhs, req);
        break;
    }
    default: {
        int sizes[1] = {(int)size};
        rc = T7(n)->irecv(comm, 1, datas, sizes, tags, mhs, req);
        break;
    }
    }
    NET_UNGUARD();
    return net_rc(n, "irecv", rc);
}

tpx_status_t tpx__net_test(tpx_net_t *n, void *req, int *done, int *size, int *rc_out)
{
    NET_GUARD(n);
    int rc = (int)T7(n)->test(req, done, size);
    NET_UNGUARD();
    *rc_out = rc;
    return rc == TPX_NCCL_SUCCESS ? TPX_OK : net_rc(n, "test", (tpx_nccl_result_t)rc);
}

tpx_status_t tpx__net_consumed(tpx_net_t *n, void *comm, void *req)
{
    if (T7(n)->irecvConsumed == NULL)
        return TPX_OK;
    NET_GUARD(n);
    tpx_nccl_result_t rc = T7(n)->irecvConsumed(comm, 1, req);
    NET_UNGUARD();
    return net_rc(n, "irecvConsumed", rc);
}

void tpx__net_close_send(tpx_net_t *n, void *comm)
{
    if (comm == NULL)
        return;
    NET_GUARD(n);
    tpx_nccl_result_t rc = T7(n)->closeSend(comm);
    NET_UNGUARD();
    if (rc != TPX_NCCL_SUCCESS)
        TPX_WARN("net plugin %s: closeSend failed", n->name);
}

void tpx__net_close_recv(tpx_net_t *n, void *comm)
{
    if (comm == NULL)
        return;
    NET_GUARD(n);
    tpx_nccl_result_t rc = T7(n)->closeRecv(comm);
    NET_UNGUARD();
    if (rc != TPX_NCCL_SUCCESS)
        TPX_WARN("net plugin %s: closeRecv failed", n->name);
}

void tpx__net_close_listen(tpx_net_t *n, void *comm)
{
    if (comm == NULL)
        return;
    NET_GUARD(n);
    tpx_nccl_result_t rc = T7(n)->closeListen(comm);
    NET_UNGUARD();
    if (rc != TPX_NCCL_SUCCESS)
        TPX_WARN("net plugin %s: closeListen failed", n->name);
}
