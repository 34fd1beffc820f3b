/*
 * net.c - loading ncclNet plugins and calling them through one interface.
 *
 * Plugins are kept for the life of the process: init() may be called only
 * once per process (TCPX), and no version of the ABI can finalise one.
 */
#include "net.h"

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/config.h"
#include "common/log.h"
#include "common/sigpipe.h"
#include "plugin/sock/sock_tables.h"

#define NET_MAX 8

static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static tpx_net_t nets[NET_MAX];
static int nnets;

int tpx__net_set_wake(tpx_net_t *n, void *comm, tpx_net_wake_t *w)
{
    if (n == NULL || n->table != (const void *)&tpx__sock_net_v10)
        return 0;
    if (comm != NULL)
        tpx__sock_comm_set_wake(comm, w);
    return 1;
}

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

static tpx_status_t net_load(const char *which, tpx_net_t *n)
{
    memset(n, 0, sizeof(*n));
    snprintf(n->label, sizeof(n->label), "%s", which);
    if (strcmp(which, "builtin") == 0) {
        n->abi = 10;
        n->table = &tpx__sock_net_v10;
        n->name = tpx__sock_net_v10.name;
        return TPX_OK;
    }
    char path[PATH_MAX];
    if (strchr(which, '/') != NULL)
        snprintf(path, sizeof(path), "%s", which);
    else
        snprintf(path, sizeof(path), "libnccl-net-%s.so", which);
    n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (n->dl == NULL) {
        TPX_ERROR("net plugin '%s': cannot load %s: %s", which, path, dlerror());
        return TPX_ERR_PLUGIN;
    }
    static const char *const syms[] = {TPX_NCCLNET_SYMBOL_V10, TPX_NCCLNET_SYMBOL_V9,
                                       TPX_NCCLNET_SYMBOL_V8, TPX_NCCLNET_SYMBOL_V7};
    for (int i = 0; i < 4 && n->table == NULL; i++) {
        n->table = dlsym(n->dl, syms[i]);
        n->abi = 10 - i;
    }
    if (n->table == NULL) {
        TPX_ERROR("net plugin '%s' (%s) exports none of ncclNetPlugin_v7..v10", which, path);
        dlclose(n->dl);
        return TPX_ERR_PLUGIN;
    }
    n->name = ((const tpx_ncclnet_v7_t *)n->table)->name; /* `name` leads every version */
    if (n->name == NULL)
        n->name = "(unnamed)";
    return TPX_OK;
}

static tpx_status_t net_init(tpx_net_t *n)
{
    n->is_tcpx = name_is_tcpx(n->name);
    if (n->is_tcpx && !cuda_device_present()) {
        TPX_ERROR("net plugin '%s' (%s) needs a CUDA GPU and none is usable here (it would "
                  "exit the process); use TPX_NET_PLUGIN=builtin on this machine",
                  n->label, n->name);
        return TPX_ERR_NO_DEVICE;
    }
    tpx_nccl_result_t rc;
    /* Threads the plugin starts in init (and in listen/connect/accept)
     * inherit the guard's blocked SIGPIPE. */
    tpx_sigpipe_guard_t g;
    tpx__sigpipe_enter(&g, n->dl != NULL);
    switch (n->abi) {
    case 10: rc = ((const tpx_ncclnet_v10_t *)n->table)->init(tpx__net_log, NULL); break;
    case 9: rc = ((const tpx_ncclnet_v9_t *)n->table)->init(tpx__net_log); break;
    case 8: rc = ((const tpx_ncclnet_v8_t *)n->table)->init(tpx__net_log); break;
    default: rc = ((const tpx_ncclnet_v7_t *)n->table)->init(tpx__net_log); break;
    }
    tpx__sigpipe_leave(&g);
    n->sigpipe = n->dl != NULL || tpx__sock_raises_sigpipe();
    if (rc != TPX_NCCL_SUCCESS) {
        TPX_ERROR("net plugin '%s' (%s, v%d): init failed with ncclResult %d", n->label, n->name,
                  n->abi, (int)rc);
        return TPX_ERR_PLUGIN;
    }
    int ndev = 0;
    rc = ((const tpx_ncclnet_v7_t *)n->table)->devices(&ndev); /* same slot in every version */
    if (rc != TPX_NCCL_SUCCESS || ndev <= 0) {
        TPX_ERROR("net plugin '%s' (%s): no devices (rc %d)", n->label, n->name, (int)rc);
        return TPX_ERR_NO_DEVICE;
    }
    n->ndev = ndev;
    TPX_INFO("net plugin '%s': %s, ncclNet v%d, %d device(s)", n->label, n->name, n->abi, ndev);
    return TPX_OK;
}

tpx_status_t tpx__net_open(const char *which, tpx_net_t **out)
{
    tpx_status_t st = tpx__config_load();
    if (st != TPX_OK)
        return st;
    if (which == NULL || *which == '\0')
        which = tpx__config_str(TPX_CFG_NET_PLUGIN);
    pthread_mutex_lock(&net_lock);
    for (int i = 0; i < nnets; i++) {
        if (strcmp(nets[i].label, which) == 0) {
            *out = &nets[i];
            pthread_mutex_unlock(&net_lock);
            return TPX_OK;
        }
    }
    if (nnets == NET_MAX) {
        pthread_mutex_unlock(&net_lock);
        TPX_ERROR("net plugin '%s': too many different plugins in one process", which);
        return TPX_ERR_NO_RESOURCE;
    }
    tpx_net_t *n = &nets[nnets];
    st = net_load(which, n);
    if (st == TPX_OK) {
        st = net_init(n);
        if (st == TPX_OK) {
            nnets++;
            *out = n;
        } else if (n->dl != NULL) {
            /* init may have started threads: keep the library mapped. */
            n->table = NULL;
        }
    }
    pthread_mutex_unlock(&net_lock);
    return st;
}

/* ---- calls --------------------------------------------------------------------- */

#define T7(n) ((const tpx_ncclnet_v7_t *)(n)->table)
#define T8(n) ((const tpx_ncclnet_v8_t *)(n)->table)
#define T9(n) ((const tpx_ncclnet_v9_t *)(n)->table)
#define T10(n) ((const tpx_ncclnet_v10_t *)(n)->table)

/* Every call into the plugin's table runs inside a SIGPIPE guard when the
 * plugin may raise it (n->sigpipe): free inside the engine's guard of a
 * pass and on libtpx's own threads, three system calls on any other path
 * (set-up, registration, close). */
#define NET_GUARD(n)                                                                               \
    tpx_sigpipe_guard_t guard_;                                                                    \
    tpx__sigpipe_enter(&guard_, (n)->sigpipe)
#define NET_UNGUARD() tpx__sigpipe_leave(&guard_)

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
    tpx_ncclnet_props_v9_t p9;
    tpx_nccl_result_t rc;
    memset(&p9, 0, sizeof(p9));
    memset(out, 0, sizeof(*out));
    out->max_p2p_bytes = INT_MAX;
    if (n->abi >= 9) {
        rc = n->abi == 10 ? T10(n)->getProperties(dev, &p9) : T9(n)->getProperties(dev, &p9);
        out->max_p2p_bytes = p9.maxP2pBytes ? p9.maxP2pBytes : INT_MAX;
        out->reg_is_global = p9.regIsGlobal;
    } else if (n->abi == 8) {
        tpx_ncclnet_props_v8_t p;
        memset(&p, 0, sizeof(p));
        rc = T8(n)->getProperties(dev, &p);
        p9 = (tpx_ncclnet_props_v9_t){.name = p.name, .pciPath = p.pciPath, .ptrSupport =
                                      p.ptrSupport, .speed = p.speed, .maxComms = p.maxComms,
                                      .maxRecvs = p.maxRecvs, .netDeviceType = p.netDeviceType,
                                      .netDeviceVersion = p.netDeviceVersion};
        out->reg_is_global = p.regIsGlobal;
    } else {
        tpx_ncclnet_props_v7_t p;
        memset(&p, 0, sizeof(p));
        rc = T7(n)->getProperties(dev, &p);
        p9 = (tpx_ncclnet_props_v9_t){.name = p.name, .pciPath = p.pciPath, .ptrSupport =
                                      p.ptrSupport, .speed = p.speed, .maxComms = p.maxComms,
                                      .maxRecvs = p.maxRecvs, .netDeviceType = p.netDeviceType,
                                      .netDeviceVersion = p.netDeviceVersion};
    }
    if (rc != TPX_NCCL_SUCCESS)
        return net_rc(n, "getProperties", rc);
    snprintf(out->name, sizeof(out->name), "%s", p9.name ? p9.name : "?");
    snprintf(out->pci_path, sizeof(out->pci_path), "%s", p9.pciPath ? p9.pciPath : "");
    out->ptr_support = p9.ptrSupport;
    out->speed_mbps = p9.speed;
    out->max_comms = p9.maxComms;
    out->max_recvs = p9.maxRecvs;
    out->dev_type = (int)p9.netDeviceType;
    out->dev_version = p9.netDeviceVersion;
    out->nmembers = 1;
    out->members[0] = dev;
    if (n->abi >= 9 && p9.vProps.ndevs >= 1 && p9.vProps.ndevs <= TPX_NCCL_NET_MAX_DEVS_PER_NIC) {
        out->nmembers = p9.vProps.ndevs;
        memcpy(out->members, p9.vProps.devs, sizeof(int) * (size_t)p9.vProps.ndevs);
    }
    return TPX_OK;
}

/* makeVDevice sits at the same offset in v9 and v10. */
_Static_assert(offsetof(tpx_ncclnet_v9_t, makeVDevice) == offsetof(tpx_ncclnet_v10_t, makeVDevice),
               "makeVDevice moved between v9 and v10");

int tpx__net_has_vdev(const tpx_net_t *n)
{
    return n->abi >= 9 && T9(n)->makeVDevice != NULL;
}

tpx_status_t tpx__net_make_vdev(tpx_net_t *n, const int *devs, int ndevs, int *vdev)
{
    if (!tpx__net_has_vdev(n)) {
        TPX_ERROR("net plugin %s (ncclNet v%d) cannot fuse NICs into a virtual device: %s",
                  n->name, n->abi,
                  n->abi < 9 ? "makeVDevice needs ncclNet v9 or newer" : "it has no makeVDevice");
        return TPX_ERR_UNSUPPORTED;
    }
    if (devs == NULL || vdev == NULL || ndevs < 1 || ndevs > TPX_NCCL_NET_MAX_DEVS_PER_NIC) {
        TPX_ERROR("virtual device of %d NICs: a virtual device fuses 1 to %d", ndevs,
                  TPX_NCCL_NET_MAX_DEVS_PER_NIC);
        return TPX_ERR_INVALID_ARG;
    }
    tpx_ncclnet_vdev_props_t p;
    memset(&p, 0, sizeof(p));
    p.ndevs = ndevs;
    memcpy(p.devs, devs, sizeof(int) * (size_t)ndevs);
    int d = -1;
    tpx_nccl_result_t rc = T9(n)->makeVDevice(&d, &p);
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
    tpx_nccl_result_t rc = T7(n)->listen(dev, handle, listen_comm);
    NET_UNGUARD();
    return net_rc(n, "listen", rc);
}

tpx_status_t tpx__net_connect(tpx_net_t *n, int dev, void *handle, void **comm,
                              tpx_ncclnet_dev_handle_t **dev_handle)
{
    tpx_nccl_result_t rc;
    NET_GUARD(n);
    if (n->abi == 10) {
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

int tpx__net_is_own(const tpx_net_t *n)
{
    return n != NULL && n->table == (const void *)&tpx__sock_net_v10;
}

int tpx__net_max_requests(const tpx_net_t *n)
{
    if (tpx__net_is_own(n))
        return tpx__sock_max_requests();
    return n != NULL && n->is_tcpx ? 16 : 0;
}

tpx_status_t tpx__net_connect_socks(tpx_net_t *n, int dev, void *handle, void **comm,
                                    tpx_ncclnet_dev_handle_t **dev_handle, int nsocks)
{
    if (!tpx__net_is_own(n))
        return tpx__net_connect(n, dev, handle, comm, dev_handle);
    return net_rc(n, "connect", tpx__sock_connect_socks(dev, handle, comm, nsocks));
}

int tpx__net_has_vec(const tpx_net_t *n)
{
    return n != NULL && n->table == (const void *)&tpx__sock_net_v10 && tpx__sock_vec_ok();
}

_Static_assert(TPX_NET_IOV_MAX == TPX_SOCK_IOV_MAX, "one limit");

tpx_status_t tpx__net_isendv(tpx_net_t *n, void *comm, const struct iovec *iov, int iovcnt,
                             void **req)
{
    if (!tpx__net_has_vec(n))
        return TPX_ERR_UNSUPPORTED;
    return net_rc(n, "isendv", tpx__sock_isendv(comm, iov, iovcnt, req));
}

tpx_status_t tpx__net_irecvv(tpx_net_t *n, void *comm, const struct iovec *iov, int iovcnt,
                             void **req)
{
    if (!tpx__net_has_vec(n))
        return TPX_ERR_UNSUPPORTED;
    return net_rc(n, "irecvv", tpx__sock_irecvv(comm, iov, iovcnt, req));
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
