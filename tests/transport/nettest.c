/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nettest.c - the version-neutral shim over the ncclNet tables (see
 * nettest.h). Each wrapper is a switch on the ABI version: the only place
 * where the tests know how the versions differ.
 */
#include "nettest.h"

#include "../common/tpx_test.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static atomic_int nt_warns;
/* The most verbose level nt_logger prints; set by nt_init() before the
 * plugin can call the logger. */
static int nt_log_max = TPX_NCCL_LOG_WARN;
static const char *nt_tag_str = "test";

/* ---- loading --------------------------------------------------------- */

int nt_open(const char *so_path, int abi_version, nt_t *out)
{
    static const char *const syms[] = {TPX_NCCLNET_SYMBOL_V7,  TPX_NCCLNET_SYMBOL_V8,
                                       TPX_NCCLNET_SYMBOL_V9,  TPX_NCCLNET_SYMBOL_V10,
                                       TPX_NCCLNET_SYMBOL_V11, TPX_NCCLNET_SYMBOL_V12};
    if (abi_version < 7 || abi_version > 12) {
        fprintf(stderr, "nt_open: ABI version %d is not 7..12\n", abi_version);
        return -1;
    }
    void *dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        fprintf(stderr, "nt_open: dlopen(%s): %s\n", so_path, dlerror());
        return -1;
    }
    void *table = dlsym(dl, syms[abi_version - 7]);
    if (table == NULL) {
        fprintf(stderr, "nt_open: dlsym(%s): %s\n", syms[abi_version - 7], dlerror());
        dlclose(dl);
        return -1;
    }
    memset(out, 0, sizeof(*out));
    out->dl = dl;
    out->abi = abi_version;
    switch (abi_version) {
    case 7:
        out->t.v7 = table;
        out->name = out->t.v7->name;
        break;
    case 8:
        out->t.v8 = table;
        out->name = out->t.v8->name;
        break;
    case 9:
        out->t.v9 = table;
        out->name = out->t.v9->name;
        break;
    case 10:
        out->t.v10 = table;
        out->name = out->t.v10->name;
        break;
    case 11:
        out->t.v11 = table;
        out->name = out->t.v11->name;
        break;
    default:
        out->t.v12 = table;
        out->name = out->t.v12->name;
        break;
    }
    return 0;
}

void nt_unload(nt_t *nt)
{
    if (nt->dl != NULL)
        dlclose(nt->dl);
    nt->dl = NULL;
}

/* ---- the table, version-neutral --------------------------------------- */

/* Calls the same-named member of whichever table is loaded, for the members
 * whose signature is identical in every version. */
#define NT_CALL(nt, member, ...)                                                                   \
    ((nt)->abi == 7    ? (int)(nt)->t.v7->member(__VA_ARGS__)                                      \
     : (nt)->abi == 8  ? (int)(nt)->t.v8->member(__VA_ARGS__)                                      \
     : (nt)->abi == 9  ? (int)(nt)->t.v9->member(__VA_ARGS__)                                      \
     : (nt)->abi == 10 ? (int)(nt)->t.v10->member(__VA_ARGS__)                                     \
     : (nt)->abi == 11 ? (int)(nt)->t.v11->member(__VA_ARGS__)                                     \
                       : (int)(nt)->t.v12->member(__VA_ARGS__))

/* v11 and v12 share init/listen/connect/finalize/setNetAttr's signatures. */
#define NT_CTX_CALL(nt, member, ...)                                                               \
    ((nt)->abi == 11 ? (int)(nt)->t.v11->member(__VA_ARGS__)                                       \
                     : (int)(nt)->t.v12->member(__VA_ARGS__))

int nt_init_ctx(const nt_t *nt, uint64_t client_id, void **ctx)
{
    if (nt->abi < 11)
        return NT_NO_ENTRY;
    tpx_ncclnet_comm_config_t config = {TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
    return NT_CTX_CALL(nt, init, ctx, client_id, &config, nt_logger, NULL);
}

int nt_finalize(const nt_t *nt, void *ctx)
{
    if (nt->abi < 11)
        return NT_NO_ENTRY;
    return NT_CTX_CALL(nt, finalize, ctx);
}

int nt_set_flows(const nt_t *nt, void *ctx, int flows)
{
    if (nt->abi < 11 || (nt->abi == 11 ? nt->t.v11->setNetAttr : nt->t.v12->setNetAttr) == NULL)
        return NT_NO_ENTRY;
    tpx_ncclnet_comm_attr_t ca = {TPX_NCCL_NET_ATTR_UNDEF, 1, flows, 1};
    tpx_ncclnet_attr_t a = {ca, ca, (uint32_t)TPX_NCCL_NET_ATTR_UNDEF,
                            (uint32_t)TPX_NCCL_NET_ATTR_UNDEF, (uint32_t)TPX_NCCL_NET_ATTR_UNDEF};
    return NT_CTX_CALL(nt, setNetAttr, ctx, &a);
}

int nt_init(nt_t *nt)
{
    /* Like NCCL: WARN always, INFO with NCCL_DEBUG=INFO, all with TRACE. */
    const char *e = getenv("NCCL_DEBUG");
    nt_log_max = e == NULL                     ? TPX_NCCL_LOG_WARN
                 : strcasecmp(e, "TRACE") == 0 ? TPX_NCCL_LOG_TRACE
                 : strcasecmp(e, "INFO") == 0  ? TPX_NCCL_LOG_INFO
                                               : TPX_NCCL_LOG_WARN;
    if (nt->abi >= 11) {
        void *ctx = NULL;
        int rc = nt_init_ctx(nt, 1, &ctx);
        if (rc == 0)
            nt->ctx = ctx;
        return rc;
    }
    if (nt->abi == 10)
        return (int)nt->t.v10->init(nt_logger, NULL);
    switch (nt->abi) {
    case 7:
        return (int)nt->t.v7->init(nt_logger);
    case 8:
        return (int)nt->t.v8->init(nt_logger);
    default:
        return (int)nt->t.v9->init(nt_logger);
    }
}

int nt_devices(const nt_t *nt, int *ndev)
{
    return NT_CALL(nt, devices, ndev);
}

/* The fields v9..v12 properties share by name (their layouts differ from
 * v12 on: its vProps holds more devices), copied into the common view. */
#define NT_PROPS_V9_FIELDS(out, p, ndevs_max)                                                      \
    do {                                                                                           \
        (out)->name = (p).name;                                                                    \
        (out)->pci_path = (p).pciPath;                                                             \
        (out)->guid = (p).guid;                                                                    \
        (out)->ptr_support = (p).ptrSupport;                                                       \
        (out)->reg_is_global = (p).regIsGlobal;                                                    \
        (out)->force_flush = (p).forceFlush;                                                       \
        (out)->speed = (p).speed;                                                                  \
        (out)->port = (p).port;                                                                    \
        (out)->latency = (p).latency;                                                              \
        (out)->max_comms = (p).maxComms;                                                           \
        (out)->max_recvs = (p).maxRecvs;                                                           \
        (out)->dev_type = (int)(p).netDeviceType;                                                  \
        (out)->dev_version = (p).netDeviceVersion;                                                 \
        (out)->vprops_ndevs = (p).vProps.ndevs;                                                    \
        (out)->vprops_dev0 = (p).vProps.devs[0];                                                   \
        for (int i_ = 0; i_ < (ndevs_max); i_++)                                                   \
            (out)->vprops_devs[i_] = (p).vProps.devs[i_];                                          \
        (out)->max_p2p_bytes = (p).maxP2pBytes;                                                    \
        (out)->max_coll_bytes = (p).maxCollBytes;                                                  \
    } while (0)

int nt_props(const nt_t *nt, int dev, nt_props_t *out)
{
    int rc;
    memset(out, 0, sizeof(*out));
    if (nt->abi == 7) {
        tpx_ncclnet_props_v7_t p;
        memset(&p, 0, sizeof(p));
        rc = (int)nt->t.v7->getProperties(dev, &p);
        if (rc != 0)
            return rc;
        out->name = p.name;
        out->pci_path = p.pciPath;
        out->guid = p.guid;
        out->ptr_support = p.ptrSupport;
        out->speed = p.speed;
        out->port = p.port;
        out->latency = p.latency;
        out->max_comms = p.maxComms;
        out->max_recvs = p.maxRecvs;
        out->dev_type = (int)p.netDeviceType;
        out->dev_version = p.netDeviceVersion;
        return 0;
    }
    if (nt->abi == 8) {
        tpx_ncclnet_props_v8_t p;
        memset(&p, 0, sizeof(p));
        rc = (int)nt->t.v8->getProperties(dev, &p);
        if (rc != 0)
            return rc;
        out->name = p.name;
        out->pci_path = p.pciPath;
        out->guid = p.guid;
        out->ptr_support = p.ptrSupport;
        out->reg_is_global = p.regIsGlobal;
        out->speed = p.speed;
        out->port = p.port;
        out->latency = p.latency;
        out->max_comms = p.maxComms;
        out->max_recvs = p.maxRecvs;
        out->dev_type = (int)p.netDeviceType;
        out->dev_version = p.netDeviceVersion;
        return 0;
    }
    if (nt->abi == 12) {
        tpx_ncclnet_props_v12_t p;
        memset(&p, 0, sizeof(p));
        rc = (int)nt->t.v12->getProperties(dev, &p);
        if (rc != 0)
            return rc;
        NT_PROPS_V9_FIELDS(out, p, TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12);
        out->max_multi_request = p.maxMultiRequestSize;
        out->rail_id = p.railId;
        out->plane_id = p.planeId;
        return 0;
    }
    tpx_ncclnet_props_v11_t p; /* v9 and v10 are its prefix */
    memset(&p, 0, sizeof(p));
    rc = nt->abi == 9    ? (int)nt->t.v9->getProperties(dev, (tpx_ncclnet_props_v9_t *)&p)
         : nt->abi == 10 ? (int)nt->t.v10->getProperties(dev, (tpx_ncclnet_props_v10_t *)&p)
                         : (int)nt->t.v11->getProperties(dev, &p);
    if (rc != 0)
        return rc;
    NT_PROPS_V9_FIELDS(out, p, TPX_NCCL_NET_MAX_DEVS_PER_NIC);
    out->max_multi_request = nt->abi == 11 ? p.maxMultiRequestSize : 0;
    return 0;
}

int nt_make_vdevice(const nt_t *nt, int *d, const int *devs, int ndevs)
{
    if (nt->abi == 12) {
        tpx_ncclnet_vdev_props_v12_t q;
        memset(&q, 0, sizeof(q));
        q.ndevs = ndevs;
        for (int i = 0; i < ndevs && i < TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12 && devs != NULL; i++)
            q.devs[i] = devs[i];
        if (nt->t.v12->makeVDevice == NULL)
            return NT_NO_ENTRY;
        return (int)nt->t.v12->makeVDevice(d, &q);
    }
    tpx_ncclnet_vdev_props_t p;
    memset(&p, 0, sizeof(p));
    p.ndevs = ndevs; /* may be out of range: the plugin must refuse it */
    for (int i = 0; i < ndevs && i < TPX_NCCL_NET_MAX_DEVS_PER_NIC && devs != NULL; i++)
        p.devs[i] = devs[i];
    tpx_nccl_result_t (*make)(int *, tpx_ncclnet_vdev_props_t *) =
        nt->abi == 9    ? nt->t.v9->makeVDevice
        : nt->abi == 10 ? nt->t.v10->makeVDevice
        : nt->abi == 11 ? nt->t.v11->makeVDevice
                        : NULL;
    if (make == NULL)
        return NT_NO_ENTRY;
    return (int)make(d, &p);
}

int nt_listen_ctx(const nt_t *nt, void *ctx, int dev, void *handle, void **listen_comm)
{
    if (nt->abi >= 11)
        return NT_CTX_CALL(nt, listen, ctx, dev, handle, listen_comm);
    switch (nt->abi) {
    case 7:
        return (int)nt->t.v7->listen(dev, handle, listen_comm);
    case 8:
        return (int)nt->t.v8->listen(dev, handle, listen_comm);
    case 9:
        return (int)nt->t.v9->listen(dev, handle, listen_comm);
    default:
        return (int)nt->t.v10->listen(dev, handle, listen_comm);
    }
}

int nt_listen(const nt_t *nt, int dev, void *handle, void **listen_comm)
{
    return nt_listen_ctx(nt, nt->ctx, dev, handle, listen_comm);
}

int nt_connect(const nt_t *nt, int dev, void *handle, void **send_comm)
{
    return nt_connect_ctx(nt, nt->ctx, dev, handle, send_comm);
}

int nt_connect_ctx(const nt_t *nt, void *ctx, int dev, void *handle, void **send_comm)
{
    /* A host plugin leaves the device handle alone; NCCL passes a NULL one. */
    tpx_ncclnet_dev_handle_t *devh = NULL;
    if (nt->abi >= 11)
        return NT_CTX_CALL(nt, connect, ctx, dev, handle, send_comm, &devh);
    if (nt->abi == 10) {
        tpx_ncclnet_comm_config_t config = {TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return (int)nt->t.v10->connect(dev, &config, handle, send_comm, &devh);
    }
    switch (nt->abi) {
    case 7:
        return (int)nt->t.v7->connect(dev, handle, send_comm, &devh);
    case 8:
        return (int)nt->t.v8->connect(dev, handle, send_comm, &devh);
    default:
        return (int)nt->t.v9->connect(dev, handle, send_comm, &devh);
    }
}

int nt_accept(const nt_t *nt, void *listen_comm, void **recv_comm)
{
    tpx_ncclnet_dev_handle_t *devh = NULL;
    return NT_CALL(nt, accept, listen_comm, recv_comm, &devh);
}

int nt_regmr(const nt_t *nt, void *comm, void *data, size_t size, int type, void **mhandle)
{
    if (nt->abi == 7) {
        if (size > (size_t)INT_MAX)
            return TPX_NCCL_INVALID_ARGUMENT;
        return (int)nt->t.v7->regMr(comm, data, (int)size, type, mhandle);
    }
    switch (nt->abi) {
    case 8:
        return (int)nt->t.v8->regMr(comm, data, size, type, mhandle);
    case 9:
        return (int)nt->t.v9->regMr(comm, data, size, type, mhandle);
    case 10:
        return (int)nt->t.v10->regMr(comm, data, size, type, mhandle);
    case 11:
        return (int)nt->t.v11->regMr(comm, data, size, type, mhandle);
    default:
        return (int)nt->t.v12->regMr(comm, data, size, type, mhandle);
    }
}

int nt_deregmr(const nt_t *nt, void *comm, void *mhandle)
{
    return NT_CALL(nt, deregMr, comm, mhandle);
}

int nt_isend(const nt_t *nt, void *comm, void *data, size_t size, int tag, void *mhandle,
             void **request)
{
    switch (nt->abi) {
    case 7:
    case 8:
        if (size > (size_t)INT_MAX)
            return TPX_NCCL_INVALID_ARGUMENT;
        return nt->abi == 7 ? (int)nt->t.v7->isend(comm, data, (int)size, tag, mhandle, request)
                            : (int)nt->t.v8->isend(comm, data, (int)size, tag, mhandle, request);
    case 9:
        return (int)nt->t.v9->isend(comm, data, size, tag, mhandle, request);
    case 10:
        return (int)nt->t.v10->isend(comm, data, size, tag, mhandle, NULL, request);
    case 11:
        return (int)nt->t.v11->isend(comm, data, size, tag, mhandle, NULL, request);
    default:
        return (int)nt->t.v12->isend(comm, data, size, tag, mhandle, NULL, request);
    }
}

int nt_irecv(const nt_t *nt, void *comm, int n, void **data, const size_t *sizes, const int *tags,
             void **mhandles, void **request)
{
    int itags[NT_MAX_RECVS];
    if (n < 0 || n > NT_MAX_RECVS)
        return TPX_NCCL_INVALID_ARGUMENT;
    for (int i = 0; i < n; i++)
        itags[i] = tags[i];
    if (nt->abi == 7 || nt->abi == 8) {
        int isizes[NT_MAX_RECVS];
        for (int i = 0; i < n; i++) {
            if (sizes[i] > (size_t)INT_MAX)
                return TPX_NCCL_INVALID_ARGUMENT;
            isizes[i] = (int)sizes[i];
        }
        return nt->abi == 7 ? (int)nt->t.v7->irecv(comm, n, data, isizes, itags, mhandles, request)
                            : (int)nt->t.v8->irecv(comm, n, data, isizes, itags, mhandles, request);
    }
    size_t zsizes[NT_MAX_RECVS];
    for (int i = 0; i < n; i++)
        zsizes[i] = sizes[i];
    switch (nt->abi) {
    case 9:
        return (int)nt->t.v9->irecv(comm, n, data, zsizes, itags, mhandles, request);
    case 10:
        return (int)nt->t.v10->irecv(comm, n, data, zsizes, itags, mhandles, NULL, request);
    case 11:
        return (int)nt->t.v11->irecv(comm, n, data, zsizes, itags, mhandles, NULL, request);
    default:
        return (int)nt->t.v12->irecv(comm, n, data, zsizes, itags, mhandles, NULL, request);
    }
}

int nt_irecv1(const nt_t *nt, void *comm, void *data, size_t size, int tag, void *mhandle,
              void **request)
{
    void *d[1] = {data};
    size_t s[1] = {size};
    int t[1] = {tag};
    void *m[1] = {mhandle};
    return nt_irecv(nt, comm, 1, d, s, t, m, request);
}

int nt_test(const nt_t *nt, void *request, int *done, int *size)
{
    return NT_CALL(nt, test, request, done, size);
}

int nt_close_send(const nt_t *nt, void *comm)
{
    return NT_CALL(nt, closeSend, comm);
}
int nt_close_recv(const nt_t *nt, void *comm)
{
    return NT_CALL(nt, closeRecv, comm);
}
int nt_close_listen(const nt_t *nt, void *comm)
{
    return NT_CALL(nt, closeListen, comm);
}

/* ---- loops with deadlines --------------------------------------------- */

int nt_connect_wait(const nt_t *nt, int dev, void *handle, void **send_comm, uint64_t deadline)
{
    *send_comm = NULL;
    for (;;) {
        int rc = nt_connect(nt, dev, handle, send_comm);
        if (rc != 0 || *send_comm != NULL)
            return rc;
        if (test_now_ns() >= deadline)
            return NT_TIMEOUT;
        sched_yield();
    }
}

int nt_accept_wait(const nt_t *nt, void *listen_comm, void **recv_comm, uint64_t deadline)
{
    *recv_comm = NULL;
    for (;;) {
        int rc = nt_accept(nt, listen_comm, recv_comm);
        if (rc != 0 || *recv_comm != NULL)
            return rc;
        if (test_now_ns() >= deadline)
            return NT_TIMEOUT;
        sched_yield();
    }
}

nt_result_t nt_wait(const nt_t *nt, void *request, uint64_t deadline)
{
    nt_result_t r = {0, 0, -1, 0};
    for (;;) {
        int done = 0, size = -1;
        r.rc = nt_test(nt, request, &done, &size);
        r.polls++;
        if (r.rc != 0 || done) {
            r.done = done;
            r.size = size;
            return r;
        }
        if (test_now_ns() >= deadline) {
            r.rc = NT_TIMEOUT;
            return r;
        }
        sched_yield();
    }
}

/* ---- logger ----------------------------------------------------------- */

void nt_set_tag(const char *tag)
{
    nt_tag_str = tag;
}
const char *nt_tag(void)
{
    return nt_tag_str;
}
int nt_warn_count(void)
{
    return atomic_load(&nt_warns);
}

void nt_logger(tpx_nccl_log_level_t level, unsigned long flags, const char *file, int line,
               const char *fmt, ...)
{
    static const char *const names[] = {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};
    char msg[1024];
    va_list ap;
    (void)flags;
    if (level == TPX_NCCL_LOG_WARN)
        atomic_fetch_add(&nt_warns, 1);
    if ((int)level > nt_log_max)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *lname = (unsigned)level < sizeof(names) / sizeof(names[0]) ? names[level] : "?";
    /* One fprintf per line so that lines of two processes do not mix. */
    fprintf(stderr, "[%s %d] plugin %s %s:%d %s\n", nt_tag_str, (int)getpid(), lname,
            file != NULL ? file : "?", line, msg);
}

/* ---- data ------------------------------------------------------------- */

static inline uint64_t nt_xs_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t nt_xs_seed(uint64_t seed)
{
    /* splitmix64 of the seed, never 0 (xorshift's fixed point). */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z != 0 ? z : 1;
}

void nt_fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t s = nt_xs_seed(seed);
    unsigned char *p = buf;
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = nt_xs_next(&s);
        memcpy(p + i * 8, &w, 8);
    }
    if (len % 8 != 0) {
        uint64_t w = nt_xs_next(&s);
        memcpy(p + words * 8, &w, len % 8);
    }
}

size_t nt_verify(const void *buf, size_t len, uint64_t seed)
{
    uint64_t s = nt_xs_seed(seed);
    const unsigned char *p = buf;
    size_t words = len / 8;
    for (size_t i = 0; i <= words; i++) {
        size_t n = i < words ? 8 : len % 8;
        if (n == 0)
            break;
        uint64_t w = nt_xs_next(&s);
        if (memcmp(p + i * 8, &w, n) != 0) {
            const unsigned char *e = (const unsigned char *)&w;
            for (size_t j = 0; j < n; j++)
                if (p[i * 8 + j] != e[j])
                    return i * 8 + j;
        }
    }
    return NT_VERIFY_OK;
}

size_t nt_check_byte(const void *buf, size_t len, unsigned char byte)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < len; i++)
        if (p[i] != byte)
            return i;
    return NT_VERIFY_OK;
}

void *nt_alloc(size_t len)
{
    void *p =
        mmap(NULL, len == 0 ? 1 : len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void nt_free(void *buf, size_t len)
{
    if (buf != NULL)
        munmap(buf, len == 0 ? 1 : len);
}

