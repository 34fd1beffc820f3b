/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx/ncclnet.h - the NCCL net-plugin ABI ("ncclNet"), versions 7 to 12.
 *
 * Every transport tpx drives is a shared object that exports one or more of
 * the tables below under the symbol names `ncclNetPlugin_v7` ... `_v12`.
 * Google's GPUDirect-TCPX plugin exports v7 only; tpx's built-in TCP
 * transport (libnccl-net-tpx.so) exports all six. NCCL 2.28 drives v11,
 * NCCL 2.30 v12.
 *
 * This header was written for tpx from the published description of the
 * ABI (NCCL's net_v7.h .. net_v12.h).  Type names carry a tpx prefix so that
 * this header can coexist with NCCL's own headers in one translation unit;
 * the struct *field* names keep NCCL's spelling so that a reader can compare
 * them line by line.  Layout is what matters: every struct below is checked
 * against the LP64 offsets with static assertions.
 *
 * Ownership rules of the ABI (they apply to every version):
 *  - a `handle` is an opaque 128-byte buffer filled by listen() and copied
 *    verbatim to the peer, which passes it to connect();
 *  - connect()/accept() must not block: they return success with a NULL comm
 *    until the connection is established and must then be called again with
 *    the same arguments (the same handle buffer for connect);
 *  - a request pointer is owned by the plugin; it is freed by the test() call
 *    that reports done=1 (and, for devmem plugins, at irecvConsumed);
 *  - strings in properties (name, pciPath) are owned by the plugin and stay
 *    valid until the process ends.
 *
 * Contexts (v11+): init() is called once per client (NCCL: per
 * communicator, tpx: per engine) and returns an opaque context owned by the
 * plugin; listen()/connect()/setNetAttr() of that client pass it back, and
 * finalize() frees it after the client has closed its comms. Versions
 * before 11 have no context: init() once per process, never finalised.
 */
#ifndef TPX_NCCLNET_H
#define TPX_NCCLNET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of the connect handle exchanged out of band. */
#define TPX_NCCL_NET_HANDLE_MAXSIZE 128
/* Requests a comm can have in flight in NCCL's own transports. */
#define TPX_NCCL_NET_MAX_REQUESTS 32
/* Default maximum transfer size advertised by v9+ properties (1 TiB). */
#define TPX_NCCL_MAX_NET_SIZE_BYTES (1024ULL * 1024 * 1024 * 1024)
/* Physical devices a virtual NIC may fuse (v9, v10, v11). */
#define TPX_NCCL_NET_MAX_DEVS_PER_NIC 4
/* ... and in v12. */
#define TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12 8
/* v10 connect(): no traffic class requested. */
#define TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)

/* Pointer types a plugin supports (props.ptrSupport bits, regMr `type`). */
#define TPX_NCCL_PTR_HOST 0x1
#define TPX_NCCL_PTR_CUDA 0x2
#define TPX_NCCL_PTR_DMABUF 0x4

/* ncclResult_t. Plugins return these; 2 and 3 are what TCPX uses. */
typedef enum {
    TPX_NCCL_SUCCESS = 0,
    TPX_NCCL_UNHANDLED_CUDA_ERROR = 1,
    TPX_NCCL_SYSTEM_ERROR = 2, /* e.g. the peer closed the connection */
    TPX_NCCL_INTERNAL_ERROR = 3,
    TPX_NCCL_INVALID_ARGUMENT = 4,
    TPX_NCCL_INVALID_USAGE = 5,
    TPX_NCCL_REMOTE_ERROR = 6,
} tpx_nccl_result_t;

/* ncclDebugLogLevel. */
typedef enum {
    TPX_NCCL_LOG_NONE = 0,
    TPX_NCCL_LOG_VERSION = 1,
    TPX_NCCL_LOG_WARN = 2,
    TPX_NCCL_LOG_INFO = 3,
    TPX_NCCL_LOG_ABORT = 4,
    TPX_NCCL_LOG_TRACE = 5,
} tpx_nccl_log_level_t;

/* ncclDebugLogSubSys bits a net plugin uses in `flags`. */
#define TPX_NCCL_LOG_INIT 0x1UL
#define TPX_NCCL_LOG_NET 0x10UL
#define TPX_NCCL_LOG_ALL (~0UL)

/*
 * ncclDebugLogger_t. NCCL passes its logger to init(); the plugin calls it
 * with a printf-style format. `file`/`line` name the plugin's source line.
 */
typedef void (*tpx_nccl_logger_t)(tpx_nccl_log_level_t level, unsigned long flags,
                                  const char *file, int line, const char *fmt, ...);

/* ncclProfilerCallback_t (v10 init). tpx never calls it; NULL is allowed. */
typedef tpx_nccl_result_t (*tpx_nccl_profiler_cb_t)(void **eHandle, int type, void *phandle,
                                                    int64_t pluginId, void *extData);

/* ncclNetDeviceType: how received data reaches the user buffer. */
typedef enum {
    TPX_NCCL_NET_DEVICE_HOST = 0,   /* the plugin writes the user buffer itself */
    TPX_NCCL_NET_DEVICE_UNPACK = 1, /* devmem: data lands in a bounce buffer; the
                                       consumer gathers it ("unpack") */
} tpx_nccl_net_device_type_t;

#define TPX_NCCL_NET_DEVICE_INVALID_VERSION 0x0
#define TPX_NCCL_NET_DEVICE_UNPACK_VERSION 0x7

/*
 * ncclNetDeviceHandle_v7_t (identical in v8..v10). accept()/connect() write
 * one of these into storage the caller provides; for UNPACK devices `handle`
 * points to a tpx_nccl_unpack_handle_t.
 */
typedef struct {
    tpx_nccl_net_device_type_t netDeviceType;
    int netDeviceVersion;
    void *handle;
    size_t size;
    int needsProxyProgress;
} tpx_ncclnet_dev_handle_t;

/* ---- devmem ("UNPACK") delivery --------------------------------------- */

/* Requests a TCPX comm can have in flight; one metadata row each. */
#define TPX_NCCL_UNPACK_QUEUE_DEPTH 16
/* Largest irecv a TCPX comm accepts (bytes). */
#define TPX_NCCL_UNPACK_MAX_SLICE_SIZE (4u * 1024 * 1024)
/* Bounce-buffer page size. */
#define TPX_NCCL_UNPACK_PAGE_SIZE 4096u
/* Fragment descriptors per request: 4 MiB / 4 KiB, times 2 for slack. */
#define TPX_NCCL_UNPACK_MAX_PAGES (TPX_NCCL_UNPACK_MAX_SLICE_SIZE / TPX_NCCL_UNPACK_PAGE_SIZE * 2)

/*
 * loadMeta: one received fragment. Copy `len` bytes from
 * bounce_buf + src_off to destination + dst_off.
 */
typedef union {
    uint64_t r64[2];
    struct {
        uint32_t src_off;
        uint32_t len;
        uint64_t dst_off;
    } f;
} __attribute__((aligned(16))) tpx_nccl_load_meta_t;

/*
 * netUnpackMeta: the host-mapped fragment queue. Row `slot` describes the
 * receive in request slot `slot`; cnt[slot] is published when test() reports
 * that receive done.
 */
typedef struct {
    tpx_nccl_load_meta_t mem[TPX_NCCL_UNPACK_QUEUE_DEPTH][TPX_NCCL_UNPACK_MAX_PAGES];
    uint64_t cnt[TPX_NCCL_UNPACK_QUEUE_DEPTH];
} tpx_nccl_unpack_meta_t;

/* unpackNetDeviceHandle: what tpx_ncclnet_dev_handle_t.handle points to. */
typedef struct {
    tpx_nccl_unpack_meta_t *meta; /* host-mapped, written by the plugin */
    void *bounce_buf;             /* where the payload pages land */
    uint64_t head;                /* receives consumed so far (slot = head % 16) */
} tpx_nccl_unpack_handle_t;

/* ---- properties -------------------------------------------------------- */

typedef struct {
    char *name;      /* interface name, for logs */
    char *pciPath;   /* sysfs path of the PCI device, or NULL */
    uint64_t guid;   /* unique NIC id */
    int ptrSupport;  /* TPX_NCCL_PTR_* bits */
    int speed;       /* Mb/s */
    int port;
    float latency;   /* microseconds, 0 if unknown */
    int maxComms;
    int maxRecvs;    /* largest n accepted by irecv */
    tpx_nccl_net_device_type_t netDeviceType;
    int netDeviceVersion;
} tpx_ncclnet_props_v7_t;

typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal; /* a memory handle is valid on every comm */
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    tpx_nccl_net_device_type_t netDeviceType;
    int netDeviceVersion;
} tpx_ncclnet_props_v8_t;

typedef struct {
    int ndevs;
    int devs[TPX_NCCL_NET_MAX_DEVS_PER_NIC];
} tpx_ncclnet_vdev_props_t;

/* v9 and v10 share this layout. */
typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int forceFlush; /* receives need iflush */
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    tpx_nccl_net_device_type_t netDeviceType;
    int netDeviceVersion;
    tpx_ncclnet_vdev_props_t vProps;
    size_t maxP2pBytes;
    size_t maxCollBytes;
} tpx_ncclnet_props_v9_t;
typedef tpx_ncclnet_props_v9_t tpx_ncclnet_props_v10_t;

/* v10 connect() configuration; v11/v12 init() take the same struct. */
typedef struct {
    int trafficClass; /* TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF or a plugin value */
} tpx_ncclnet_comm_config_t;

/* v11 properties: v9's, then the largest multi-request the plugin takes
 * (1: none; a plugin of an older version is read as 1). */
typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int forceFlush;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    tpx_nccl_net_device_type_t netDeviceType;
    int netDeviceVersion;
    tpx_ncclnet_vdev_props_t vProps;
    size_t maxP2pBytes;
    size_t maxCollBytes;
    int maxMultiRequestSize;
} tpx_ncclnet_props_v11_t;

/* v12 virtual-device description: up to 8 members. */
typedef struct {
    int ndevs;
    int devs[TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12];
} tpx_ncclnet_vdev_props_v12_t;

/* Rail and plane not known (v12 railId/planeId). */
#define TPX_NCCL_NET_ID_UNDEF (-1)

/* v12 properties: v11's with the wider vProps, then the NIC's rail and plane
 * (TPX_NCCL_NET_ID_UNDEF when the plugin does not know them; NCCL pairs NICs
 * of one rail across nodes). */
typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int forceFlush;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    tpx_nccl_net_device_type_t netDeviceType;
    int netDeviceVersion;
    tpx_ncclnet_vdev_props_v12_t vProps;
    size_t maxP2pBytes;
    size_t maxCollBytes;
    int maxMultiRequestSize;
    int16_t railId;
    int16_t planeId;
} tpx_ncclnet_props_v12_t;

/* setNetAttr() hints (v11, v12): what the client expects of the comms it
 * will open on this context. Every field may be TPX_NCCL_NET_ATTR_UNDEF
 * (op/algo/proto: all bits set), and a plugin may ignore all of them. */
#define TPX_NCCL_NET_ATTR_UNDEF (-1)
typedef struct {
    int32_t maxConcurrentPeers; /* peers this side talks to at once */
    int32_t minConcurrentPeers;
    int32_t maxFlowsPerPeer; /* comms (NCCL: channels) opened to one peer */
    int32_t minFlowsPerPeer;
} tpx_ncclnet_comm_attr_t;

typedef struct {
    tpx_ncclnet_comm_attr_t sendCommAttr;
    tpx_ncclnet_comm_attr_t recvCommAttr;
    uint32_t op;    /* bit mask of NCCL collective functions */
    uint32_t algo;  /* bit mask of NCCL algorithms */
    uint32_t proto; /* bit mask of NCCL protocols */
} tpx_ncclnet_attr_t;

/* ---- function tables ---------------------------------------------------- */

typedef struct {
    const char *name;
    tpx_nccl_result_t (*init)(tpx_nccl_logger_t logFunction);
    tpx_nccl_result_t (*devices)(int *ndev);
    tpx_nccl_result_t (*getProperties)(int dev, tpx_ncclnet_props_v7_t *props);
    tpx_nccl_result_t (*listen)(int dev, void *handle, void **listenComm);
    tpx_nccl_result_t (*connect)(int dev, void *handle, void **sendComm,
                                 tpx_ncclnet_dev_handle_t **sendDevComm);
    tpx_nccl_result_t (*accept)(void *listenComm, void **recvComm,
                                tpx_ncclnet_dev_handle_t **recvDevComm);
    tpx_nccl_result_t (*regMr)(void *comm, void *data, int size, int type, void **mhandle);
    tpx_nccl_result_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                     uint64_t offset, int fd, void **mhandle);
    tpx_nccl_result_t (*deregMr)(void *comm, void *mhandle);
    tpx_nccl_result_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                               void **request);
    tpx_nccl_result_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                               void **mhandles, void **request);
    tpx_nccl_result_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                                void **request);
    tpx_nccl_result_t (*test)(void *request, int *done, int *sizes);
    tpx_nccl_result_t (*closeSend)(void *sendComm);
    tpx_nccl_result_t (*closeRecv)(void *recvComm);
    tpx_nccl_result_t (*closeListen)(void *listenComm);
    tpx_nccl_result_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    tpx_nccl_result_t (*irecvConsumed)(void *recvComm, int n, void *request);
} tpx_ncclnet_v7_t;

typedef struct {
    const char *name;
    tpx_nccl_result_t (*init)(tpx_nccl_logger_t logFunction);
    tpx_nccl_result_t (*devices)(int *ndev);
    tpx_nccl_result_t (*getProperties)(int dev, tpx_ncclnet_props_v8_t *props);
    tpx_nccl_result_t (*listen)(int dev, void *handle, void **listenComm);
    tpx_nccl_result_t (*connect)(int dev, void *handle, void **sendComm,
                                 tpx_ncclnet_dev_handle_t **sendDevComm);
    tpx_nccl_result_t (*accept)(void *listenComm, void **recvComm,
                                tpx_ncclnet_dev_handle_t **recvDevComm);
    tpx_nccl_result_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    tpx_nccl_result_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                     uint64_t offset, int fd, void **mhandle);
    tpx_nccl_result_t (*deregMr)(void *comm, void *mhandle);
    tpx_nccl_result_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                               void **request);
    tpx_nccl_result_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                               void **mhandles, void **request);
    tpx_nccl_result_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                                void **request);
    tpx_nccl_result_t (*test)(void *request, int *done, int *sizes);
    tpx_nccl_result_t (*closeSend)(void *sendComm);
    tpx_nccl_result_t (*closeRecv)(void *recvComm);
    tpx_nccl_result_t (*closeListen)(void *listenComm);
    tpx_nccl_result_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    tpx_nccl_result_t (*irecvConsumed)(void *recvComm, int n, void *request);
} tpx_ncclnet_v8_t;

typedef struct {
    const char *name;
    tpx_nccl_result_t (*init)(tpx_nccl_logger_t logFunction);
    tpx_nccl_result_t (*devices)(int *ndev);
    tpx_nccl_result_t (*getProperties)(int dev, tpx_ncclnet_props_v9_t *props);
    tpx_nccl_result_t (*listen)(int dev, void *handle, void **listenComm);
    tpx_nccl_result_t (*connect)(int dev, void *handle, void **sendComm,
                                 tpx_ncclnet_dev_handle_t **sendDevComm);
    tpx_nccl_result_t (*accept)(void *listenComm, void **recvComm,
                                tpx_ncclnet_dev_handle_t **recvDevComm);
    tpx_nccl_result_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    tpx_nccl_result_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                     uint64_t offset, int fd, void **mhandle);
    tpx_nccl_result_t (*deregMr)(void *comm, void *mhandle);
    tpx_nccl_result_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                               void **request);
    tpx_nccl_result_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **request);
    tpx_nccl_result_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                                void **request);
    tpx_nccl_result_t (*test)(void *request, int *done, int *sizes);
    tpx_nccl_result_t (*closeSend)(void *sendComm);
    tpx_nccl_result_t (*closeRecv)(void *recvComm);
    tpx_nccl_result_t (*closeListen)(void *listenComm);
    tpx_nccl_result_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    tpx_nccl_result_t (*irecvConsumed)(void *recvComm, int n, void *request);
    tpx_nccl_result_t (*makeVDevice)(int *d, tpx_ncclnet_vdev_props_t *props);
} tpx_ncclnet_v9_t;

typedef struct {
    const char *name;
    tpx_nccl_result_t (*init)(tpx_nccl_logger_t logFunction, tpx_nccl_profiler_cb_t profFunction);
    tpx_nccl_result_t (*devices)(int *ndev);
    tpx_nccl_result_t (*getProperties)(int dev, tpx_ncclnet_props_v10_t *props);
    tpx_nccl_result_t (*listen)(int dev, void *handle, void **listenComm);
    tpx_nccl_result_t (*connect)(int dev, tpx_ncclnet_comm_config_t *config, void *handle,
                                 void **sendComm, tpx_ncclnet_dev_handle_t **sendDevComm);
    tpx_nccl_result_t (*accept)(void *listenComm, void **recvComm,
                                tpx_ncclnet_dev_handle_t **recvDevComm);
    tpx_nccl_result_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    tpx_nccl_result_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                     uint64_t offset, int fd, void **mhandle);
    tpx_nccl_result_t (*deregMr)(void *comm, void *mhandle);
    tpx_nccl_result_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                               void *phandle, void **request);
    tpx_nccl_result_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **phandles, void **request);
    tpx_nccl_result_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                                void **request);
    tpx_nccl_result_t (*test)(void *request, int *done, int *sizes);
    tpx_nccl_result_t (*closeSend)(void *sendComm);
    tpx_nccl_result_t (*closeRecv)(void *recvComm);
    tpx_nccl_result_t (*closeListen)(void *listenComm);
    tpx_nccl_result_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    tpx_nccl_result_t (*irecvConsumed)(void *recvComm, int n, void *request);
    tpx_nccl_result_t (*makeVDevice)(int *d, tpx_ncclnet_vdev_props_t *props);
} tpx_ncclnet_v10_t;

/* v11 (NCCL 2.28): init() returns a context that listen()/connect() take;
 * finalize() and setNetAttr() at the end. The other entries are v10's. */
typedef struct {
    const char *name;
    tpx_nccl_result_t (*init)(void **ctx, uint64_t commId, tpx_ncclnet_comm_config_t *config,
                              tpx_nccl_logger_t logFunction, tpx_nccl_profiler_cb_t profFunction);
    tpx_nccl_result_t (*devices)(int *ndev);
    tpx_nccl_result_t (*getProperties)(int dev, tpx_ncclnet_props_v11_t *props);
    tpx_nccl_result_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    tpx_nccl_result_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                                 tpx_ncclnet_dev_handle_t **sendDevComm);
    tpx_nccl_result_t (*accept)(void *listenComm, void **recvComm,
                                tpx_ncclnet_dev_handle_t **recvDevComm);
    tpx_nccl_result_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    tpx_nccl_result_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                     uint64_t offset, int fd, void **mhandle);
    tpx_nccl_result_t (*deregMr)(void *comm, void *mhandle);
    tpx_nccl_result_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                               void *phandle, void **request);
    tpx_nccl_result_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **phandles, void **request);
    tpx_nccl_result_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                                void **request);
    tpx_nccl_result_t (*test)(void *request, int *done, int *sizes);
    tpx_nccl_result_t (*closeSend)(void *sendComm);
    tpx_nccl_result_t (*closeRecv)(void *recvComm);
    tpx_nccl_result_t (*closeListen)(void *listenComm);
    tpx_nccl_result_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    tpx_nccl_result_t (*irecvConsumed)(void *recvComm, int n, void *request);
    tpx_nccl_result_t (*makeVDevice)(int *d, tpx_ncclnet_vdev_props_t *props);
    tpx_nccl_result_t (*finalize)(void *ctx);
    tpx_nccl_result_t (*setNetAttr)(void *ctx, tpx_ncclnet_attr_t *netAttr); /* may be NULL */
} tpx_ncclnet_v11_t;

/* v12 (NCCL 2.30): v11 with the v12 properties and 8-member virtual devices. */
typedef struct {
    const char *name;
    tpx_nccl_result_t (*init)(void **ctx, uint64_t commId, tpx_ncclnet_comm_config_t *config,
                              tpx_nccl_logger_t logFunction, tpx_nccl_profiler_cb_t profFunction);
    tpx_nccl_result_t (*devices)(int *ndev);
    tpx_nccl_result_t (*getProperties)(int dev, tpx_ncclnet_props_v12_t *props);
    tpx_nccl_result_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    tpx_nccl_result_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                                 tpx_ncclnet_dev_handle_t **sendDevComm);
    tpx_nccl_result_t (*accept)(void *listenComm, void **recvComm,
                                tpx_ncclnet_dev_handle_t **recvDevComm);
    tpx_nccl_result_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    tpx_nccl_result_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                     uint64_t offset, int fd, void **mhandle);
    tpx_nccl_result_t (*deregMr)(void *comm, void *mhandle);
    tpx_nccl_result_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                               void *phandle, void **request);
    tpx_nccl_result_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **phandles, void **request);
    tpx_nccl_result_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                                void **request);
    tpx_nccl_result_t (*test)(void *request, int *done, int *sizes);
    tpx_nccl_result_t (*closeSend)(void *sendComm);
    tpx_nccl_result_t (*closeRecv)(void *recvComm);
    tpx_nccl_result_t (*closeListen)(void *listenComm);
    tpx_nccl_result_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    tpx_nccl_result_t (*irecvConsumed)(void *recvComm, int n, void *request);
    tpx_nccl_result_t (*makeVDevice)(int *d, tpx_ncclnet_vdev_props_v12_t *props);
    tpx_nccl_result_t (*finalize)(void *ctx);
    tpx_nccl_result_t (*setNetAttr)(void *ctx, tpx_ncclnet_attr_t *netAttr); /* may be NULL */
} tpx_ncclnet_v12_t;

/* Exported symbol names. */
#define TPX_NCCLNET_SYMBOL_V7 "ncclNetPlugin_v7"
#define TPX_NCCLNET_SYMBOL_V8 "ncclNetPlugin_v8"
#define TPX_NCCLNET_SYMBOL_V9 "ncclNetPlugin_v9"
#define TPX_NCCLNET_SYMBOL_V10 "ncclNetPlugin_v10"
#define TPX_NCCLNET_SYMBOL_V11 "ncclNetPlugin_v11"
#define TPX_NCCLNET_SYMBOL_V12 "ncclNetPlugin_v12"
/* "ncclNetPlugin_v" followed by the version number. */
#define TPX_NCCLNET_SYMBOL_PREFIX "ncclNetPlugin_v"
/* The versions this header describes. */
#define TPX_NCCLNET_ABI_MIN 7
#define TPX_NCCLNET_ABI_MAX 12

/* ---- layout checks (LP64) ---------------------------------------------- */
#if defined(__LP64__) && !defined(__cplusplus)
#define TPX__ABI_OFF(T, f, o) _Static_assert(offsetof(T, f) == (o), #T "." #f " offset")
#define TPX__ABI_SIZE(T, s) _Static_assert(sizeof(T) == (s), #T " size")
TPX__ABI_SIZE(tpx_ncclnet_dev_handle_t, 32);
TPX__ABI_OFF(tpx_ncclnet_dev_handle_t, handle, 8);
TPX__ABI_OFF(tpx_ncclnet_dev_handle_t, size, 16);
TPX__ABI_OFF(tpx_ncclnet_dev_handle_t, needsProxyProgress, 24);
TPX__ABI_SIZE(tpx_nccl_load_meta_t, 16);
TPX__ABI_OFF(tpx_nccl_load_meta_t, f.len, 4);
TPX__ABI_OFF(tpx_nccl_load_meta_t, f.dst_off, 8);
TPX__ABI_OFF(tpx_nccl_unpack_meta_t, cnt, 16 * 2048 * 16);
TPX__ABI_SIZE(tpx_nccl_unpack_meta_t, 16 * 2048 * 16 + 16 * 8);
TPX__ABI_SIZE(tpx_nccl_unpack_handle_t, 24);
TPX__ABI_SIZE(tpx_ncclnet_props_v7_t, 56);
TPX__ABI_OFF(tpx_ncclnet_props_v7_t, speed, 28);
TPX__ABI_OFF(tpx_ncclnet_props_v7_t, latency, 36);
TPX__ABI_OFF(tpx_ncclnet_props_v7_t, netDeviceVersion, 52);
TPX__ABI_SIZE(tpx_ncclnet_props_v8_t, 64);
TPX__ABI_OFF(tpx_ncclnet_props_v8_t, regIsGlobal, 28);
TPX__ABI_OFF(tpx_ncclnet_props_v8_t, netDeviceVersion, 56);
TPX__ABI_SIZE(tpx_ncclnet_props_v9_t, 104);
TPX__ABI_OFF(tpx_ncclnet_props_v9_t, forceFlush, 32);
TPX__ABI_OFF(tpx_ncclnet_props_v9_t, netDeviceVersion, 60);
TPX__ABI_OFF(tpx_ncclnet_props_v9_t, vProps, 64);
TPX__ABI_OFF(tpx_ncclnet_props_v9_t, maxP2pBytes, 88);
TPX__ABI_OFF(tpx_ncclnet_props_v9_t, maxCollBytes, 96);
TPX__ABI_SIZE(tpx_ncclnet_v7_t, 19 * 8);
TPX__ABI_SIZE(tpx_ncclnet_v8_t, 19 * 8);
TPX__ABI_SIZE(tpx_ncclnet_v9_t, 20 * 8);
TPX__ABI_SIZE(tpx_ncclnet_v10_t, 20 * 8);
TPX__ABI_OFF(tpx_ncclnet_v7_t, isend, 10 * 8);
TPX__ABI_OFF(tpx_ncclnet_v7_t, test, 13 * 8);
TPX__ABI_OFF(tpx_ncclnet_v7_t, irecvConsumed, 18 * 8);
TPX__ABI_OFF(tpx_ncclnet_v10_t, makeVDevice, 19 * 8);
TPX__ABI_SIZE(tpx_ncclnet_props_v11_t, 112);
TPX__ABI_OFF(tpx_ncclnet_props_v11_t, vProps, 64);
TPX__ABI_OFF(tpx_ncclnet_props_v11_t, maxP2pBytes, 88);
TPX__ABI_OFF(tpx_ncclnet_props_v11_t, maxCollBytes, 96);
TPX__ABI_OFF(tpx_ncclnet_props_v11_t, maxMultiRequestSize, 104);
TPX__ABI_SIZE(tpx_ncclnet_vdev_props_v12_t, 36);
TPX__ABI_SIZE(tpx_ncclnet_props_v12_t, 128);
TPX__ABI_OFF(tpx_ncclnet_props_v12_t, netDeviceVersion, 60);
TPX__ABI_OFF(tpx_ncclnet_props_v12_t, vProps, 64);
TPX__ABI_OFF(tpx_ncclnet_props_v12_t, maxP2pBytes, 104);
TPX__ABI_OFF(tpx_ncclnet_props_v12_t, maxCollBytes, 112);
TPX__ABI_OFF(tpx_ncclnet_props_v12_t, maxMultiRequestSize, 120);
TPX__ABI_OFF(tpx_ncclnet_props_v12_t, railId, 124);
TPX__ABI_OFF(tpx_ncclnet_props_v12_t, planeId, 126);
TPX__ABI_SIZE(tpx_ncclnet_comm_attr_t, 16);
TPX__ABI_SIZE(tpx_ncclnet_attr_t, 44);
TPX__ABI_OFF(tpx_ncclnet_attr_t, recvCommAttr, 16);
TPX__ABI_OFF(tpx_ncclnet_attr_t, op, 32);
TPX__ABI_OFF(tpx_ncclnet_attr_t, proto, 40);
TPX__ABI_SIZE(tpx_ncclnet_v11_t, 22 * 8);
TPX__ABI_SIZE(tpx_ncclnet_v12_t, 22 * 8);
TPX__ABI_OFF(tpx_ncclnet_v11_t, listen, 4 * 8);
TPX__ABI_OFF(tpx_ncclnet_v11_t, test, 13 * 8);
TPX__ABI_OFF(tpx_ncclnet_v11_t, makeVDevice, 19 * 8);
TPX__ABI_OFF(tpx_ncclnet_v11_t, finalize, 20 * 8);
TPX__ABI_OFF(tpx_ncclnet_v11_t, setNetAttr, 21 * 8);
TPX__ABI_OFF(tpx_ncclnet_v12_t, finalize, 20 * 8);
TPX__ABI_OFF(tpx_ncclnet_v12_t, setNetAttr, 21 * 8);
#undef TPX__ABI_OFF
#undef TPX__ABI_SIZE
#endif

#ifdef __cplusplus
}
#endif
#endif /* TPX_NCCLNET_H */
