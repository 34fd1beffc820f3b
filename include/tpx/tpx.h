/*
 * tpx/tpx.h - the public C API of libtpx.
 *
 * tpx moves GPU or host memory between machines over TCP by driving NCCL net
 * plugins ("ncclNet", see tpx/ncclnet.h). This header is the contract: a
 * function not declared here is not part of the API.
 *
 * Conventions: every call returns tpx_status_t (tpx/status.h); outputs are
 * written only on success; strings returned are static.
 */
#ifndef TPX_TPX_H
#define TPX_TPX_H

#include <stdio.h>

#include "tpx/ncclnet.h"
#include "tpx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH" of the library. */
TPX_API const char *tpx_version_string(void);

/* Same as tpx_status_string(); the name users of strerror() look for. */
TPX_API const char *tpx_strerror(tpx_status_t status);

/*
 * The built-in TCP transport, linked into libtpx, as an ncclNet v10 table.
 * It is the same code that libnccl-net-tpx.so exports to NCCL. The table is
 * static; call its init() once per process before anything else.
 */
TPX_API const tpx_ncclnet_v10_t *tpx_net_builtin(void);

/*
 * Check every TPX_* environment variable. TPX_ERR_CONFIG (and one log line
 * per bad variable) if any is malformed.
 */
TPX_API tpx_status_t tpx_config_check(void);

/* Print every TPX_* setting with its current value and meaning
 * (`markdown` != 0: the README's table of names, defaults and meanings). */
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

typedef struct {
    const char *plugin;     /* NULL: TPX_NET_PLUGIN ("builtin", a name or a path) */
    int gpu;                /* GPU served (NIC choice, default port); -1: host memory only */
    int channels;           /* 0: TPX_CHANNELS */
    size_t chunk_bytes;     /* 0: TPX_CHUNK_BYTES (<= 4 MiB) */
    int window;             /* 0: TPX_WINDOW (<= the plugin's request limit) */
    int timeout_ms;         /* per-transfer deadline; 0: TPX_TIMEOUT_MS */
    const char *bind_addr;  /* bootstrap listen address; NULL: all addresses */
    int port;               /* TPX_PORT_DEFAULT, TPX_PORT_NONE, TPX_PORT_EPHEMERAL or a port */
    int progress_thread;    /* 1: an engine thread drives progress; 0: call tpx_progress() */
    int progress_cpu;       /* CPU for the progress thread; -1: not pinned;
                               TPX_CPU_NUMA_LOCAL: a CPU of the NIC's NUMA node */
    const char *auth_token; /* NULL: TPX_AUTH_TOKEN; "" : no authentication */
} tpx_engine_params_t;

/* Defaults: everything from the environment, gpu -1, progress thread on.
 * tpx_engine_create(NULL, ...) uses these defaults. */
TPX_API void tpx_engine_params_init(tpx_engine_params_t *params);

TPX_API tpx_status_t tpx_engine_create(const tpx_engine_params_t *params, tpx_engine_t **engine);
/* Closes every peer (their transfers end with TPX_ERR_CANCELED), releases
 * every resource. Regions and transfers of the engine become invalid. */
TPX_API void tpx_engine_destroy(tpx_engine_t *engine);
/* The bootstrap port (after TPX_PORT_EPHEMERAL), or -1 if none. */
TPX_API int tpx_engine_port(const tpx_engine_t *engine);
/* A file descriptor that becomes readable when a transfer completes: poll
 * it, then look at your transfers with tpx_xfer_poll() (or call
 * tpx_progress()). Each of tpx_progress(), tpx_xfer_poll() and
 * tpx_xfer_wait() clears it. Owned by the engine. */
TPX_API int tpx_engine_fd(tpx_engine_t *engine);
/* What an engine settled on, for tools and logs. */
#define TPX_INFO_MAX_NICS 8
typedef struct {
    char plugin[64];        /* the plugin's own name ("tpx", "GPUDirectTCPX", ...) */
    int abi;                /* ncclNet version used (7..10) */
    int gpu;                /* -1: host memory only */
    int channels;           /* data channels per direction per peer (upper bound) */
    size_t chunk_bytes;
    int window;
    int port;               /* bootstrap port, -1 if none */
    int nnics;              /* plugin devices the channels use, in channel order */
    char nic[TPX_INFO_MAX_NICS][64]; /* their names (interface names for TCP plugins) */
    int nic_speed_mbps[TPX_INFO_MAX_NICS];
} tpx_engine_info_t;

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
 * CUDA memory must be 4 KiB aligned. */
TPX_API tpx_status_t tpx_mem_register(tpx_engine_t *engine, void *addr, size_t len,
                                      tpx_mem_type_t type, tpx_region_t **region);
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
 * ended it. Never blocks. `bytes` may be NULL. */
TPX_API tpx_status_t tpx_xfer_poll(tpx_xfer_t *xfer, size_t *bytes);
/* Like poll, but waits up to timeout_ms (-1: until the transfer's deadline). */
TPX_API tpx_status_t tpx_xfer_wait(tpx_xfer_t *xfer, int timeout_ms, size_t *bytes);
/* A transfer that has not started ends at once with TPX_ERR_CANCELED. One
 * whose data is already moving cannot be taken back from the peer's FIFO:
 * it runs to the end and then reports TPX_ERR_CANCELED (TPX_INPROGRESS is
 * returned to say so). */
TPX_API tpx_status_t tpx_xfer_cancel(tpx_xfer_t *xfer);
/* Free the handle; a transfer still running is canceled first and freed
 * when it ends. */
TPX_API void tpx_xfer_release(tpx_xfer_t *xfer);

/* ==== GPU memory helpers ===================================================
 * For tools and tests that need device buffers without linking CUDA
 * themselves; they use the same run-time driver as the engine. Without a
 * driver or GPU they return TPX_ERR_NO_DEVICE. */

/* Number of CUDA devices (0 and TPX_ERR_NO_DEVICE if none). */
TPX_API tpx_status_t tpx_gpu_count(int *count);
/* `len` bytes of device memory on `gpu`, 4 KiB aligned. */
TPX_API tpx_status_t tpx_gpu_alloc(int gpu, size_t len, void **ptr);
/* Free what tpx_gpu_alloc() returned (NULL is ignored). */
TPX_API void tpx_gpu_free(void *ptr);
/* Copy between host and device memory (any direction), synchronously. */
TPX_API tpx_status_t tpx_gpu_copy(void *dst, const void *src, size_t len);

#ifdef __cplusplus
}
#endif
#endif
