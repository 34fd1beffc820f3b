/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx/tpx.h - the public C API of libtpx.
 *
 * tpx moves GPU or host memory between machines over TCP by driving NCCL net
 * plugins ("ncclNet", see tpx/ncclnet.h). This header is the contract: a
 * function not declared here (or in tpx/status.h, tpx/log.h, tpx/registry.h,
 * tpx/gpu.h) is not part of the API.
 *
 * Conventions: every call returns tpx_status_t (tpx/status.h; a sentence
 * for one: tpx_status_string()); outputs are written only on success;
 * strings returned are static.
 *
 * Ending things: one verb per kind, paired with what began it.
 *   create  -> destroy     the engine (tpx_engine_create / _destroy)
 *   connect -> close       a connection (tpx_peer_connect, _accept / tpx_peer_close)
 *   register -> deregister memory (tpx_mem_register / tpx_mem_deregister)
 *   export  -> unexport    a range offered to peers (tpx_region_export / _unexport)
 *   release                a handle the library gave out: a transfer
 *                          (tpx_xfer_release), a preparation
 *                          (tpx_prep_release), a remote (tpx_remote_release)
 * and in the other headers, by the same rule:
 *   open    -> close       a registry client (tpx/registry.h)
 *   publish -> unpublish   an engine offered in a registry (as export -> unexport)
 *   alloc   -> free        GPU memory of the tools' helpers (tpx/gpu.h)
 */
#ifndef TPX_TPX_H
#define TPX_TPX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tpx/log.h"
#include "tpx/ncclnet.h"
#include "tpx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH" of the library. */
TPX_API const char *tpx_version_string(void);


/*
 * The built-in TCP transport, linked into libtpx, as an ncclNet v10 table.
 * It is the same code that libnccl-net-tpx.so exports to NCCL. The table is
 * static; call its init() once per process before anything else.
 */
TPX_API const tpx_ncclnet_v10_t *tpx_net_builtin(void);
/*
 * The same transport's table of ncclNet version `abi` (7..12: cast to
 * tpx_ncclnet_v<abi>_t), or NULL for another version. Before v11, init()
 * once per process; from v11 on, init() once per client, each with its own
 * context, finalize() at the client's end.
 */
TPX_API const void *tpx_net_builtin_table(int abi);

/*
 * Check every TPX_* environment variable. TPX_ERR_CONFIG (and one log line
 * per bad variable) if any is malformed.
 */
TPX_API tpx_status_t tpx_config_check(void);

/* Print every TPX_* setting with its current value and meaning
 * (`markdown` != 0: docs/config.md's table of names, defaults and meanings). */
TPX_API void tpx_config_print(FILE *out, int markdown);

/* ==== the engine ===========================================================
 *
 * An engine drives one ncclNet plugin for one GPU (or for host memory). It
 * listens for peers on a bootstrap TCP port, connects to peers, and moves
 * registered memory to and from them over `channels` plugin comms per
 * direction, each with a window of requests in flight.
 *
 * Threads: every call below is thread-safe. Completions are only ever
 * observed through tpx_xfer_poll()/tpx_xfer_wait(); they are produced by
 * tpx_progress() (caller-driven mode) or by the engine's progress thread.
 */
typedef struct tpx_engine tpx_engine_t;
typedef struct tpx_peer tpx_peer_t;
typedef struct tpx_region tpx_region_t;
typedef struct tpx_xfer tpx_xfer_t;

typedef enum {
    TPX_MEM_HOST = 1,
    TPX_MEM_CUDA = 2,
} tpx_mem_type_t;

#define TPX_PORT_DEFAULT 0   /* TPX_PORT_BASE + gpu (gpu < 0: TPX_PORT_BASE) */
#define TPX_PORT_NONE (-1)   /* no bootstrap listener: this engine only connects */
#define TPX_PORT_EPHEMERAL (-2) /* any free port; see tpx_engine_port() */
#define TPX_CPU_NUMA_LOCAL (-2) /* tpx_engine_params_t.progress_cpu */

/*
 * Growing structs: tpx_engine_params_t, tpx_engine_info_t and
 * tpx_engine_counters_t start with `size`, the caller's sizeof of the struct
 * (set by tpx_engine_params_init(), or by the caller: `info.size = sizeof
 * info`). Fields may be added at the end in later versions; the library
 * reads and writes only the first `size` bytes, so a program built against
 * an older, smaller struct keeps working (newer fields take their
 * defaults). A size of 0 (forgotten) is TPX_ERR_INVALID_ARG.
 */
typedef struct {
    size_t size;            /* sizeof(tpx_engine_params_t) of the caller; set by _init() */
    const char *plugin;     /* NULL: TPX_NET_PLUGIN ("builtin", a name or a path) */
    int gpu;                /* GPU served (NIC choice, default port, the GPU current
                             * around plugin calls); -1: chosen by the engine, see
                             * "The engine's GPU" below */
    int channels;           /* 0: TPX_CHANNELS */
    size_t chunk_bytes;     /* 0: TPX_CHUNK_BYTES (<= 4 MiB; 0 there: by plugin) */
    int window;             /* 0: TPX_WINDOW (0 there: by plugin; <= the plugin's request
                             * limit where tpx knows it) */
    int timeout_ms;         /* per-transfer deadline; 0: TPX_TIMEOUT_MS */
    const char *bind_addr;  /* bootstrap listen address; NULL: all addresses */
    int port;               /* TPX_PORT_DEFAULT, TPX_PORT_NONE, TPX_PORT_EPHEMERAL or a port */
    int progress_thread;    /* 1: an engine thread drives progress; 0: call tpx_progress() */
    int progress_cpu;       /* CPU for the progress thread; -1: not pinned;
                               TPX_CPU_NUMA_LOCAL: a CPU of the NIC's NUMA node */
    const char *auth_token; /* NULL: TPX_AUTH_TOKEN; "" : no authentication; at most
                               255 bytes (longer: TPX_ERR_CONFIG, from any source) */
    const char *name;       /* this engine's name, shown to peers with its notifications
                               (< 64 bytes); NULL: "<hostname>:<pid>:<gpu>" */
    int notif_queue;        /* bound of the notification queue; 0: TPX_NOTIF_QUEUE */
} tpx_engine_params_t;

/*
 * The engine's GPU. A devmem plugin (GPUDirect-TCPX) places each comm's
 * bounce buffer and unpack work on the GPU current in the thread that makes
 * the comm; tpx makes the engine's GPU current around every plugin call, on
 * every thread (its own, and the caller's), and its channels use that GPU's
 * nearest NICs. The GPU is, in this order:
 *  1. params.gpu, when >= 0 (TPX_GPU_FROM_PARAMS);
 *  2. else the GPU of the first CUDA memory registered before the first
 *     peer is set up (TPX_GPU_FROM_MEMORY; what one process per GPU, as
 *     vLLM or NIXL run it, gets without a parameter);
 *  3. else the GPU of the CUDA context current in the thread that called
 *     tpx_engine_create (TPX_GPU_FROM_CONTEXT);
 *  4. else none: host memory only (-1, TPX_GPU_FROM_NONE).
 * From the first peer on it no longer changes. tpx_engine_info() says which
 * and why. Memory of another GPU than the engine's: moved where the plugin
 * can (tpx's own transport stages it); refused at registration, naming both
 * GPUs, with a devmem plugin (one engine per GPU there). The default port
 * (TPX_PORT_BASE + gpu) follows params.gpu only.
 */
typedef enum {
    TPX_GPU_FROM_NONE = 0,    /* no GPU: host memory only */
    TPX_GPU_FROM_PARAMS = 1,  /* params.gpu */
    TPX_GPU_FROM_MEMORY = 2,  /* the first CUDA memory registered */
    TPX_GPU_FROM_CONTEXT = 3, /* the CUDA context current at tpx_engine_create */
} tpx_gpu_from_t;

/* Why an engine's channels use the NICs they use. */
typedef enum {
    TPX_NICS_FROM_ALL = 0, /* every device of the plugin (no GPU, or no PCI paths to compare) */
    TPX_NICS_FROM_MAP = 1, /* TPX_NIC_MAP names the GPU's NICs */
    TPX_NICS_FROM_PCI = 2, /* the NICs nearest the GPU in the PCI tree */
} tpx_nics_from_t;

/* Defaults: everything from the environment, gpu -1, progress thread on,
 * size = sizeof(tpx_engine_params_t). tpx_engine_create(NULL, ...) uses
 * these defaults. */
TPX_API void tpx_engine_params_init(tpx_engine_params_t *params);

TPX_API tpx_status_t tpx_engine_create(const tpx_engine_params_t *params, tpx_engine_t **engine);
/* Closes every peer (their transfers end with TPX_ERR_CANCELED), releases
 * every resource. Regions, transfers and remotes of the engine become
 * invalid; release preparations (tpx_prep_release) before. No other call
 * on the engine or its objects may be in progress or follow (a thread
 * blocked in tpx_peer_accept() or tpx_xfer_wait() would read freed memory):
 * bindings that let threads share an engine count their calls and wait for
 * them first (the Python package does). */
TPX_API void tpx_engine_destroy(tpx_engine_t *engine);
/* The bootstrap port (after TPX_PORT_EPHEMERAL), or -1 if none. */
TPX_API int tpx_engine_port(const tpx_engine_t *engine);
/* A file descriptor for event loops (poll/epoll/select it for reading;
 * never read from it or close it: the engine owns it). It is
 * level-triggered: readable exactly while at least one transfer of this
 * engine has ended and has not yet been "seen" -- reported ended by
 * tpx_xfer_poll() or tpx_xfer_wait() (any status but TPX_INPROGRESS), or
 * released. Nothing else clears it: tpx_progress() and other threads'
 * polls of their own transfers leave it readable, so a thread waiting on
 * it for its transfers cannot miss their completion, whichever thread
 * drives progress. After a wake-up, poll your transfers; a wake-up may
 * find only transfers of other threads done (then sleep again once
 * yours are still in progress: the fd stays readable until those are
 * seen, so wait with a timeout or see them all from one thread). */
TPX_API int tpx_engine_fd(tpx_engine_t *engine);
/* What an engine settled on, for tools and logs. */
#define TPX_INFO_MAX_NICS 8
typedef struct {
    size_t size;            /* set by the caller: sizeof(tpx_engine_info_t) */
    char plugin[64];        /* the plugin's own name ("tpx", "GPUDirectTCPX", ...) */
    int abi;                /* ncclNet version used (7..10) */
    int gpu;                /* the GPU bound (see "The engine's GPU"); -1: none */
    int channels;           /* data channels per direction per peer (upper bound) */
    size_t chunk_bytes;     /* the chunk this engine settled on */
    int window;
    int port;               /* bootstrap port, -1 if none */
    int nnics;              /* NICs the channels use, in channel order (the members of a
                               virtual device, one by one) */
    char nic[TPX_INFO_MAX_NICS][64]; /* their names (interface names for TCP plugins) */
    int nic_speed_mbps[TPX_INFO_MAX_NICS];
    int identity_keys;      /* 1: an Ed25519 key proves this engine to its peers (libsodium);
                               0: dial-only identity (TPX_IDENTITY, SECURITY.md) */
    int connect_timeout_ms; /* TPX_CONNECT_TIMEOUT_MS of this engine: how long
                               tpx_peer_accept(-1) and tpx_peer_connect(0) wait */
    int gpu_from;           /* tpx_gpu_from_t: why `gpu` */
    int nics_from;          /* tpx_nics_from_t: why `nic` */
} tpx_engine_info_t;

/* Fills the first info->size bytes (info->size itself is left as is). */
TPX_API tpx_status_t tpx_engine_info(const tpx_engine_t *engine, tpx_engine_info_t *info);
/* Drive the plugin without blocking (caller-driven mode; with a progress
 * thread it only reports). Returns the number of transfers that completed
 * since the previous call, wherever they completed. */
TPX_API int tpx_progress(tpx_engine_t *engine);

/* Connect to the engine listening at host:port; retries until timeout_ms
 * (0: TPX_CONNECT_TIMEOUT_MS). */
TPX_API tpx_status_t tpx_peer_connect(tpx_engine_t *engine, const char *host, int port,
                                      int timeout_ms, tpx_peer_t **peer);
/* Take the next peer that connected to this engine; waits up to timeout_ms
 * (0: do not wait, TPX_INPROGRESS if none; -1: TPX_CONNECT_TIMEOUT_MS). */
TPX_API tpx_status_t tpx_peer_accept(tpx_engine_t *engine, int timeout_ms, tpx_peer_t **peer);
/* Ends the peer's transfers with TPX_ERR_CANCELED and closes its comms. */
TPX_API void tpx_peer_close(tpx_peer_t *peer);

/* Register memory. Registering a range inside an existing region returns
 * that region with a reference added (a cache keyed by address range):
 * offsets given to tpx_send()/tpx_recv() always count from the start of
 * the region, which may then lie before `addr` (see tpx_region_base()).
 * CUDA memory must be 4 KiB aligned. The engine moves CUDA memory on CUDA
 * streams of its own that do not wait for the application's: finish (or
 * synchronize) the kernels and copies that write a buffer before passing
 * it to a send, READ target or WRITE source, and those that touch a
 * receive buffer before posting it; a transfer's completion means its
 * bytes are in place in device memory. */
TPX_API tpx_status_t tpx_mem_register(tpx_engine_t *engine, void *addr, size_t len,
                                      tpx_mem_type_t type, tpx_region_t **region);
/* tpx_mem_register() of CUDA memory that the caller says is on GPU `gpu`
 * (NIXL's devId): TPX_ERR_NO_DEVICE if there is no such GPU,
 * TPX_ERR_INVALID_ARG if the driver places the memory on another one. */
TPX_API tpx_status_t tpx_mem_register_gpu(tpx_engine_t *engine, void *addr, size_t len, int gpu,
                                          tpx_region_t **region);
/* Drop a reference; the last one deregisters, and always succeeds at once
 * (it never waits for the network). Work still moving bytes of the region
 * at that moment -- posted transfers, released ones that are still running
 * included, and peers' one-sided requests served from it -- cannot be taken
 * back from a FIFO plugin: it ends with TPX_ERR_CANCELED and the
 * connections that carry it are failed and closed (logged; the next use of
 * a remote connects again). When the call returns no engine or plugin
 * thread touches the memory any more and the caller may free it. A
 * preparation that names the region keeps only its record (not the
 * memory) until tpx_prep_release(); posting it fails with
 * TPX_ERR_INVALID_STATE. */
TPX_API void tpx_mem_deregister(tpx_region_t *region);
/* The first byte of the region (offset 0 of transfers). */
TPX_API void *tpx_region_base(const tpx_region_t *region);

/* Two-sided transfers: send `len` bytes at region+offset to the peer; the
 * peer's matching tpx_recv() (FIFO order per peer) receives them into a
 * buffer of at least `len` bytes. A receive smaller than the message fails
 * with TPX_ERR_TRUNCATED (nothing is written past it). */
TPX_API tpx_status_t tpx_send(tpx_peer_t *peer, tpx_region_t *region, size_t offset, size_t len,
                              tpx_xfer_t **xfer);
TPX_API tpx_status_t tpx_recv(tpx_peer_t *peer, tpx_region_t *region, size_t offset, size_t len,
                              tpx_xfer_t **xfer);
/* TPX_OK (done; *bytes = bytes moved), TPX_INPROGRESS, or the error that
 * ended it. Never blocks. `bytes` may be NULL. On an engine with a
 * progress thread, a transfer still running is answered without the
 * engine lock and the call yields the CPU (sched_yield; while a stream of
 * data requests is in flight, it naps instead, 20 us doubling to 160 us
 * over a loop's polls): a loop of polls does not starve the threads that
 * move the data. */
TPX_API tpx_status_t tpx_xfer_poll(tpx_xfer_t *xfer, size_t *bytes);
/* Like poll, but waits up to timeout_ms (-1: until the transfer's deadline). */
TPX_API tpx_status_t tpx_xfer_wait(tpx_xfer_t *xfer, int timeout_ms, size_t *bytes);
/* A transfer that has not started ends at once with TPX_ERR_CANCELED. One
 * whose data is already moving cannot be taken back from the peer's FIFO:
 * it runs to the end and then reports TPX_ERR_CANCELED (TPX_INPROGRESS is
 * returned to say so). */
TPX_API tpx_status_t tpx_xfer_cancel(tpx_xfer_t *xfer);
/* Free the handle; a transfer still running is canceled first and freed
 * when it ends. The handle is invalid afterwards, as memory is after
 * free(): passing it to any call (release included) is a bug; the calls
 * above recognise it (TPX_ERR_INVALID_ARG, logged) only while the engine
 * still holds the transfer. */
TPX_API void tpx_xfer_release(tpx_xfer_t *xfer);

/* ==== one-sided transfers (the KV-cache API) ================================
 *
 * The peer's memory is READ or WRITTEN without the peer posting anything:
 * tpx builds this on the two-sided plugin (a control message tells the
 * owner what to post; both sides derive the same chunk order). The owner's
 * memory is only ever touched inside ranges it exported with
 * tpx_region_export(); every request is checked against its table of
 * exports (range inside, key matches, region still registered) before any
 * byte moves. A rejected request ends with TPX_ERR_ACCESS and moves nothing.
 *
 * Mapping to NIXL's agent API: registerMem = tpx_mem_register +
 * tpx_region_export; getLocalMD/loadRemoteMD = tpx_engine_get_metadata /
 * tpx_remote_load; prepXferDlist+makeXferReq = tpx_xfer_prepare;
 * postXferReq = tpx_xfer_post; getXferStatus = tpx_xfer_poll; genNotif =
 * tpx_notif_send; getNotifs = tpx_engine_get_notifs. See docs/nixl.md.
 */
typedef struct tpx_remote tpx_remote_t;
typedef struct tpx_prep tpx_prep_t;

/* ---- metadata: who an engine is and where to reach it ---- */

#define TPX_METADATA_MAX 2048 /* a metadata blob is never larger */

/* Write this engine's metadata blob (versioned, checksummed: engine id and
 * name, bootstrap addresses and port, plugin, GPU, channels, NICs) into
 * buf[*len]; *len = its size. TPX_ERR_INVALID_ARG if *len is too small (it
 * is then set to the size needed). The engine must have a bootstrap port.
 * Addresses advertised: params.bind_addr if it names one address, else
 * every up interface's address (loopback last). */
TPX_API tpx_status_t tpx_engine_get_metadata(tpx_engine_t *engine, void *buf, size_t *len);

/* Accept a peer engine's blob (length-checked and verified; TPX_ERR_PROTOCOL
 * if malformed). Nothing is connected yet: the first transfer connects, or
 * tpx_remote_connect(). Loading the same engine twice returns the same
 * remote with a reference added. A remote is served only by a connection
 * proven to be that engine (TPX_IDENTITY, SECURITY.md): with libsodium on
 * both sides one the engine opened to us is used in both directions (no
 * second connection); without, only one this engine dialed. */
TPX_API tpx_status_t tpx_remote_load(tpx_engine_t *engine, const void *blob, size_t len,
                                     tpx_remote_t **remote);
/* Drop a reference; the last one closes the remote's connection (its
 * transfers end with TPX_ERR_CANCELED) and frees it. Prepared transfers of
 * the remote must be released first. */
TPX_API void tpx_remote_release(tpx_remote_t *remote);
/* Connect now (waits up to timeout_ms; 0: TPX_CONNECT_TIMEOUT_MS). After
 * the connection failed (peer restarted, link lost) the next transfer, or
 * this call, connects again: a new epoch. */
TPX_API tpx_status_t tpx_remote_connect(tpx_remote_t *remote, int timeout_ms);
/* The remote engine's name (from its metadata). */
TPX_API const char *tpx_remote_name(const tpx_remote_t *remote);

/* ---- exported memory ---- */

#define TPX_RDESC_SIZE 48
/* A region descriptor: plain bytes, safe to copy, store and send as they
 * are. It names the owner engine, an address range and a random key. */
typedef struct {
    unsigned char bytes[TPX_RDESC_SIZE];
} tpx_rdesc_t;

/* Export bytes [offset, offset + len) of a region (len 0: to its end) for
 * peers to READ and WRITE; the descriptor carries a fresh random key. The
 * export lives until tpx_region_unexport() or until the region is
 * deregistered -- its LAST reference dropped: a registration inside an
 * existing region shares it (tpx_mem_register), so whoever exports a
 * range for one registration unexports it when that registration ends. */
TPX_API tpx_status_t tpx_region_export(tpx_region_t *region, size_t offset, size_t len,
                                       tpx_rdesc_t *desc);
/* End the export that made `desc` (of this region): peers' requests naming
 * it are refused from now on (TPX_ERR_ACCESS); requests already being
 * served finish. TPX_ERR_NOT_FOUND if the region has no such export (never
 * made, or ended already), TPX_ERR_INVALID_ARG for another engine's
 * descriptor or bytes that are not one. */
TPX_API tpx_status_t tpx_region_unexport(tpx_region_t *region, const tpx_rdesc_t *desc);
/* What a descriptor says: the owner's virtual address of its first byte and
 * its length (for address-based APIs such as NIXL's). TPX_ERR_PROTOCOL if
 * the bytes are not a valid descriptor. Either output may be NULL. */
TPX_API tpx_status_t tpx_rdesc_info(const tpx_rdesc_t *desc, uint64_t *addr, uint64_t *len);

/* ---- READ / WRITE of descriptor lists ---- */

typedef enum { TPX_OP_READ = 1, TPX_OP_WRITE = 2 } tpx_op_t;

/* One block: `len` bytes between the local region at local_offset and the
 * exported range `remote` at remote_offset (offsets count from the start
 * of the region and of the exported range). */
typedef struct {
    tpx_region_t *local;
    size_t local_offset;
    const tpx_rdesc_t *remote;
    size_t remote_offset;
    size_t len;
} tpx_iov_t;

#define TPX_RMA_MAX_IOVS (1u << 20) /* blocks per transfer (a strided entry: one per element
                                       left after merging, tpx_xfer_prepare_strided) */

/* Check and prepare a transfer once, post it many times: the list is
 * validated (local ranges inside their regions, remote ranges inside their
 * descriptors, descriptors of this remote), adjacent blocks are coalesced
 * (local and remote both contiguous), and the request is encoded. Nothing
 * is sent. The iov array and descriptors are copied (not kept); the local
 * regions must stay registered while the preparation is used. */
TPX_API tpx_status_t tpx_xfer_prepare(tpx_remote_t *remote, tpx_op_t op, const tpx_iov_t *iov,
                                      size_t n, tpx_prep_t **prep);
/* ---- strided entries ----
 *
 * A strided entry moves a regular pattern of equal elements in one entry,
 * e.g. "heads [h0, h1) of every token of a KV block" or "an HND block into
 * its half of a larger one", with each side's own layout: element
 * (i_0, .., i_{ndims-1}), 0 <= i_d < dim[d].count, is the elem_len bytes at
 *     local_offset  + sum_d i_d * dim[d].local_stride   (local region)
 *     remote_offset + sum_d i_d * dim[d].remote_stride  (exported range)
 * and the elements move in row-major order (dim[0] outermost, the last
 * dimension fastest). ndims 0 is one plain block of elem_len bytes, so a
 * list may mix plain blocks and strided entries. Strides are bytes, may be
 * smaller than elem_len (or 0) on the source side; on the destination side
 * (local for READ, remote for WRITE) no two elements may share a byte.
 * Dimensions that are contiguous on both sides are merged; every other
 * element is a block of its own, moved as small blocks are (packed into
 * shared chunks, gathered and scattered on the GPU for GPU memory). */
#define TPX_STRIDED_MAX_DIMS 3

typedef struct {
    size_t count;         /* elements along this dimension (>= 1) */
    size_t local_stride;  /* bytes from one element to the next, local side */
    size_t remote_stride; /* the same in the exported range */
} tpx_dim_t;

typedef struct {
    tpx_region_t *local;
    size_t local_offset;       /* first element, from the start of the region */
    const tpx_rdesc_t *remote;
    size_t remote_offset;      /* first element, from the start of the exported range */
    size_t elem_len;           /* bytes of one element (> 0) */
    int ndims;                 /* 0..TPX_STRIDED_MAX_DIMS */
    tpx_dim_t dim[TPX_STRIDED_MAX_DIMS]; /* dim[0 .. ndims-1]; the rest is ignored */
} tpx_strided_t;

/* tpx_xfer_prepare() of a list of plain blocks and strided entries. Checked
 * here, TPX_ERR_INVALID_ARG (logged, naming the entry) and nothing
 * prepared when an entry has a count of 0, an elem_len of 0, more than
 * TPX_STRIDED_MAX_DIMS dimensions, offsets that wrap around, an element
 * outside its region or exported range, destination elements that overlap
 * (judged by the dimensions sorted by stride: each stride at least the
 * extent of the dimensions inside it), or when the list expands into more
 * than TPX_RMA_MAX_IOVS blocks. The owner checks every element against its
 * exports again before a byte moves (TPX_ERR_ACCESS from the post).
 * Ownership as tpx_xfer_prepare(): the list and descriptors are copied,
 * the local regions must stay registered while the preparation is used.
 * A list whose entries all merge into plain blocks is sent exactly as
 * tpx_xfer_prepare() sends it; one with a strided entry is a request list
 * of version 3, which engines of tpx before this function do not read:
 * such an engine drops the connection (the transfer ends with that
 * error, and this side logs that the peer may be older). */
TPX_API tpx_status_t tpx_xfer_prepare_strided(tpx_remote_t *remote, tpx_op_t op,
                                              const tpx_strided_t *list, size_t n,
                                              tpx_prep_t **prep);
/* ---- KV-cache layouts ----
 *
 * Strided entries that move a sequence's KV cache between two engines
 * whose caches differ in block layout, block size or tensor-parallel split
 * of the heads, straight into the reader's layout. A cache, on each side,
 * is `layers` layers that follow each other from the given offset, each
 * `kv` tensors (2: K then V) of `blocks` blocks of `block_size` tokens x
 * `heads` heads x `head_dim` values of `dtype_size` bytes, a block laid out
 * NHD ([token][head][dim]) or HND ([head][token][dim]); the side holds the
 * model's heads [head0, head0 + heads) (a rank of tensor parallelism t of
 * H heads: head0 = rank x H / t). */
typedef enum { TPX_KV_NHD = 0, TPX_KV_HND = 1 } tpx_kv_layout_t;

typedef struct {
    size_t layers;     /* layers moved; layer l at offset + l x kv x blocks x block bytes */
    size_t kv;         /* tensors per layer: 2 (K, V) or 1 */
    size_t blocks;     /* blocks per tensor in the cache (not the sequence's) */
    size_t block_size; /* tokens per block */
    size_t heads;      /* KV heads held on this side */
    size_t head0;      /* the model's first head held on this side */
    size_t head_dim;
    size_t dtype_size; /* bytes per value (2: bf16, fp16) */
    tpx_kv_layout_t layout;
} tpx_kv_cache_t;

/* The entries that move tokens [0, ntokens) of a sequence, held in blocks
 * local_blocks[0 ..] of the local cache (one id per local block_size
 * tokens, in token order) and remote_blocks[0 ..] of the remote one, for
 * every layer and tensor, of the heads both sides hold: one entry per run
 * of tokens that lies in one block on each side (block ids may be in any
 * order), each a 3-dimensional tpx_strided_t (layer x tensor, then heads
 * and tokens) whose elements are one head of one token, merged by the
 * preparation where both layouts are contiguous. Ready for
 * tpx_xfer_prepare_strided(), READ or WRITE. out NULL: *n = the number of
 * entries, TPX_OK. TPX_ERR_INVALID_ARG (logged) when cap is too small (*n
 * is then the number needed), a size is 0 or overflows, the caches differ
 * in kv, head_dim or dtype_size, they hold no head in common, or a block id
 * is not below its cache's `blocks`. Nothing is allocated. */
TPX_API tpx_status_t tpx_kv_entries(const tpx_kv_cache_t *local, tpx_region_t *local_region,
                                    size_t local_offset, const tpx_kv_cache_t *remote,
                                    const tpx_rdesc_t *remote_desc, size_t remote_offset,
                                    const size_t *local_blocks, const size_t *remote_blocks,
                                    size_t ntokens, tpx_strided_t *out, size_t cap, size_t *n);
/* Start a prepared transfer. `notif` (may be NULL; at most TPX_NOTIF_MAX
 * bytes) is delivered to the remote engine's tpx_engine_get_notifs() once every
 * byte is in place: for WRITE after the data landed in its memory (it
 * travels with the request; a WRITE that completes TPX_OK was notified, one
 * canceled in time reports TPX_ERR_CANCELED and was not), for READ after
 * this side has all of it. Never for one the owner refused or that failed
 * before every byte was there. timeout_ms: the transfer's deadline
 * (0: TPX_TIMEOUT_MS), counted from the call: connecting first if needed
 * (up to the deadline; with 0 up to TPX_CONNECT_TIMEOUT_MS) is part of it.
 * The result is a transfer like tpx_send()'s: poll/wait/cancel/release;
 * TPX_ERR_ACCESS if the owner refused. Transfers in flight at the same time
 * that write the same bytes (two WRITEs of one remote block, two READs into
 * one local block), like blocks of one list whose destinations overlap,
 * leave those bytes unspecified: chunks travel on different connections and
 * land in any order. */
TPX_API tpx_status_t tpx_xfer_post(tpx_prep_t *prep, const void *notif, size_t notif_len,
                                   int timeout_ms, tpx_xfer_t **xfer);
/* Free a preparation; posts still running keep what they need. */
TPX_API void tpx_prep_release(tpx_prep_t *prep);
/* prepare + post + release in one call. */
TPX_API tpx_status_t tpx_rma(tpx_remote_t *remote, tpx_op_t op, const tpx_iov_t *iov, size_t n,
                             const void *notif, size_t notif_len, tpx_xfer_t **xfer);

/* ---- notifications ---- */

#define TPX_NOTIF_MAX 1024
#define TPX_NAME_MAX 64

typedef struct {
    char from[TPX_NAME_MAX];           /* the sending engine's name */
    size_t len;
    unsigned char msg[TPX_NOTIF_MAX];
} tpx_notif_t;

/* Send a message on its own (ordered after every transfer to that remote
 * that has completed on this side). */
TPX_API tpx_status_t tpx_notif_send(tpx_remote_t *remote, const void *msg, size_t len);
/* Move up to `max` received notifications, oldest first, into out[];
 * *n = how many. The queue is bounded (TPX_NOTIF_QUEUE): notifications
 * arriving at a full queue are dropped and counted; the next call then
 * returns TPX_ERR_OVERFLOW -- with *n and out[] filled as usual -- once. */
TPX_API tpx_status_t tpx_engine_get_notifs(tpx_engine_t *engine, tpx_notif_t *out, size_t max,
                                           size_t *n);

/* ---- counters ---- */

typedef struct {
    size_t size;              /* set by the caller: sizeof(tpx_engine_counters_t) */
    uint64_t rma_served;      /* READ/WRITE requests of peers carried out */
    uint64_t rma_rejected;    /* ... refused (range, key, deregistered) */
    uint64_t rma_bytes_out;   /* bytes peers read from us */
    uint64_t rma_bytes_in;    /* bytes peers wrote to us */
    uint64_t notifs_received;
    uint64_t notifs_dropped;  /* the queue was full */
    uint64_t peers_connected; /* peers set up, ever (both directions) */
    uint64_t rma_refused;     /* READ/WRITE requests of peers refused because the peer had used
                                 up its quota (TPX_RMA_PEER_REQUESTS, TPX_RMA_PEER_LIST_BYTES);
                                 they end with TPX_ERR_NO_RESOURCE there */
    /* Where one-sided time goes, by phase. Times are sums over transfers in ns
       (transfers in flight together overlap): divide by the count beside them. */
    uint64_t rma_done;         /* READ/WRITE this engine posted that completed TPX_OK */
    uint64_t rma_ns_answer;    /* ... post -> the owner's answer arrived (READ: the request
                                  and list check; WRITE: after the data, the whole run) */
    uint64_t rma_ns_data;      /* ... post -> its last data message done */
    uint64_t rma_ns_total;     /* ... post -> complete */
    uint64_t rma_served_ns;    /* owner: a peer's request arrived -> served (rma_served) */
    uint64_t rma_check_ns;     /* owner: checking request lists against the exports */
    uint64_t rma_msgs;         /* data messages of one-sided transfers, either role */
    uint64_t rma_msgs_packed;  /* ... of them shared chunks of packed blocks */
    uint64_t rma_msg_ns;       /* ... their post -> done, summed (over the time they span:
                                  the messages in flight) */
    uint64_t rma_bytes_staged; /* bytes of packed blocks copied through a staging chunk
                                  (gathered or scattered; vectored messages copy none) */
    uint64_t rma_stage_ns;     /* ... the time those copies took */
    /* Data channels lost while their peer lived (TPX_CHANNEL_FAILOVER). */
    uint64_t chan_lost;        /* this side's receive channels declared lost and repaired */
    uint64_t chunks_resent;    /* chunks this side dealt again over other channels */
    uint64_t chan_rejoined;    /* this side's lost receive channels connected again and
                                  dealt to again */
} tpx_engine_counters_t;

/* Fills the first out->size bytes (out->size itself is left as is). */
TPX_API tpx_status_t tpx_engine_counters(tpx_engine_t *engine, tpx_engine_counters_t *out);

#ifdef __cplusplus
}
#endif
#endif
