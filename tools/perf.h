/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf.h - tpx-perf (the two-sided mode; the one-sided one is perf_rma.h): throughput and latency
 * of the tpx engine (tpx/tpx.h: tpx_engine_*, tpx_peer_*, tpx_mem_*, tpx_send/tpx_recv,
 * tpx_xfer_*).
 *
 * What it promises: the numbers are the engine's, through its public API
 * only, and the bytes they count arrived intact (--verify). Two processes
 * run the two sides, a "server" whose engine listens and a "client" whose
 * engine connects; --direction says which way data flows (client -> server,
 * server -> client, or both at once over the same peer). The parent process
 * never touches the engine: it forks the side(s), collects result rows
 * through a pipe and prints them (bench_common.h).
 *
 * Each message size runs untimed warm-up iterations, then timed ones. One
 * iteration is --batch transfers of --size bytes each. Before each phase
 * the receiving side posts its tpx_recv()s and only then releases the
 * sender through the control stream (the barrier); up to `depth` iterations
 * are in flight at once, each in its own buffers. The time reported is the
 * receiver's, from its release to its last completion (both directions:
 * the slower side's). Latency is per transfer, from tpx_send()/tpx_recv() to
 * the completion seen by tpx_xfer_poll() on the side that posted it. Every
 * wait has a deadline; a peer that dies ends the run with an error.
 *
 * Roles: --loopback (both sides on this host: the default), or `server` and
 * `client HOST`. Server and client meet on a small TCP control connection
 * of this tool (--port) that carries the run parameters, the engine's
 * bootstrap port, the barriers and the results; in loopback mode a
 * socketpair does the same job.
 *
 * Memory (--mem, --gpu) is each process's own choice, not a run parameter:
 * host memory, or device memory from tpx_gpu_alloc() registered as
 * TPX_MEM_CUDA. GPUs are counted in a child process before the sides are
 * forked (CUDA must not be initialised before fork), as in
 * tests/gpu/test_engine_gpu.c; with device memory, --verify fills and checks
 * through host copies outside the timed loop (pf_gpu_stage/pf_gpu_check).
 *
 * --all-gpus: every local GPU in one process per side, one engine per GPU
 * (params.gpu = that GPU, its own progress thread pinned NUMA-local), each
 * driven by its own "lane" thread running the same per-side code as a
 * single-engine run (pf_worker) on its own control stream. Lane i pairs the
 * server's and the client's engine i: GPU i <-> GPU i between two hosts
 * (control ports --port + i, engine ports TPX_PORT_BASE + i), GPU i ->
 * GPU (i+1) % n in loopback mode. The lanes of a process meet at a barrier
 * (pf_gang_t) before every phase, so their timed phases overlap; the table
 * and the JSON have one row per lane and their sum.
 *
 * Files: perf_cli.c (the command line, the roles, forking the sides),
 * perf_worker.c (one side's engine and transfers, in its own process or
 * lane thread), perf_report.c (the table, JSON, --compare-transport,
 * --plot). This header holds what they share: the run parameters, the
 * result rows, the control protocol and the state of the parent.
 */
#ifndef TPX_TOOLS_PERF_H
#define TPX_TOOLS_PERF_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_common.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

#define PF_PROG              "tpx-perf"
#define PF_DEFAULT_PORT      18516
#define PF_DEFAULT_SIZE      (256ull << 20)
#define PF_DEFAULT_TIMEOUT_S 60
#define PF_MAX_SIZES         64
#define PF_MAX_SIZE          (16ull << 30)
#define PF_MAX_BATCH         100000
/* Automatic depth: at most this many iterations and PF_MAX_INFLIGHT
 * transfers in flight, so that a sender does not run thousands of messages
 * ahead of the receives posted for them (today's engine fails the peer with
 * TPX_ERR_NO_RESOURCE beyond 4096 such messages instead of holding back). */
#define PF_MAX_DEPTH    256
#define PF_MAX_INFLIGHT 1024
/* Buffer memory of one direction on one side; depth is reduced to stay under it. */
#define PF_MEM_BUDGET (1ull << 30)
/* The largest chunk an engine picks by itself (TPX_CHUNK_BYTES=0: 1 MiB on
 * tpx's transport): what --depth's default assumes when the chunk is the
 * engines' own. */
#define PF_CHUNK_DEFAULT_MAX (1ull << 20)
/* The same for the window (TPX_WINDOW=0: 32 on tpx's transport). */
#define PF_WINDOW_DEFAULT_MAX 32
/* Latency samples kept per stream and row (beyond: every k-th). */
#define PF_LAT_CAP (1u << 20)

/* Data direction: send = client -> server, recv = server -> client. */
enum { PF_DIR_SEND = 0, PF_DIR_RECV = 1, PF_DIR_BIDIR = 2 };
enum { PF_PROGRESS_THREAD = 0, PF_PROGRESS_CALLER = 1 };
/* Where this process's buffers live (--mem): each side decides its own. */
enum { PF_MEM_HOST = 0, PF_MEM_CUDA = 1 };
#define PF_MAX_GPU   1023 /* highest --gpu index accepted on the command line */
#define PF_MAX_LANES 16   /* --all-gpus: GPUs (engines) of one process */

/*
 * The run parameters. The server (or, in loopback mode, the command line)
 * decides them and the client receives them; engine settings are resolved
 * to explicit values first, so both engines use the same. Only uint64_t
 * fields: the wire form is this struct as big-endian 64-bit words.
 */
typedef struct {
    uint64_t nsizes;
    uint64_t sizes[PF_MAX_SIZES];     /* transfer sizes, bytes */
    uint64_t iters;                   /* timed iterations; BENCH_AUTO: per size */
    uint64_t warmup;                  /* untimed iterations; BENCH_AUTO: iters / 10, >= 1 */
    uint64_t batch;                   /* transfers per iteration */
    uint64_t depth;                   /* iterations in flight; 0: automatic */
    uint64_t direction;               /* PF_DIR_* */
    uint64_t verify;                  /* fill a pattern and check every byte */
    uint64_t timeout_s;               /* no progress for this long: error */
    uint64_t channels, chunk, window; /* the engines' settings */
    uint64_t progress;                /* PF_PROGRESS_* */
    uint64_t lanes;                   /* --all-gpus: engines (GPUs) per side; 0: one engine */
    uint64_t mem;                     /* the server's buffers (PF_MEM_*): the client follows */
} pf_params_t;

/* Post-to-completion latency of one stream's transfers in the timed phase. */
typedef struct {
    uint64_t n; /* transfers */
    uint64_t avg_ns, min_ns, p50_ns, p99_ns, max_ns;
} pf_lat_t;

/* What one side measured in the timed phase of one size (uint64_t words). */
typedef struct {
    uint64_t time_ns; /* its barrier release to its last completion */
    uint64_t cpu_user_ns, cpu_sys_ns;
    pf_lat_t tx, rx;   /* its sends, its receives (n = 0: none) */
    uint64_t verified; /* 1: every byte it received was checked */
    uint64_t checksum; /* of the bytes it received (bench_check()) */
} pf_side_res_t;

/* One result row: one size. Both sides build it from the two pf_side_res_t. */
typedef struct {
    uint64_t index; /* the size's position in the sweep */
    uint64_t lane;  /* --all-gpus: the lane (engine pair) that measured it; else 0 */
    uint64_t size, batch, iters, warmup, depth, direction;
    uint64_t bytes;   /* moved in the timed phase, every direction */
    uint64_t time_ns; /* the receiver's time (both directions: the slower side's) */
    pf_side_res_t srv, cli;
} pf_row_t;
#define PF_SIDE_WORDS (sizeof(pf_side_res_t) / 8)

/* A worker's record to its parent: a result row, or what its engine settled
 * on (tpx_engine_info(), sent once after tpx_engine_create()). */
enum { PF_REC_ROW = 1, PF_REC_INFO = 2 };
typedef struct {
    bench_rec_hdr_t h;
    uint64_t type; /* PF_REC_* */
    uint64_t side; /* PF_REC_INFO: 0 server, 1 client */
    uint64_t lane; /* PF_REC_INFO: the engine's lane */
    pf_row_t row;
    tpx_engine_info_t info;
} pf_rec_t;
_Static_assert(sizeof(pf_rec_t) <= PIPE_BUF, "a record is one atomic pipe write");
_Static_assert(sizeof(pf_params_t) % 8 == 0, "params are 64-bit words");
_Static_assert(sizeof(pf_row_t) % 8 == 0, "rows are 64-bit words");

/* ---- the control stream ----------------------------------------------------- */

#define PF_MAGIC   0x54505046u /* "TPPF" */
#define PF_VERSION 4 /* 2: pf_params_t.lanes; 3: pf_params_t.mem; 4: window 0 (each engine's
                      * own) and depth up to 256 */
enum {
    PF_MSG_HELLO = 1, /* client -> server: empty */
    PF_MSG_PARAMS,    /* server -> client: pf_params_t */
    PF_MSG_PORT,      /* server -> client: the engine's bootstrap port (one word) */
    PF_MSG_GO,        /* either way: receives posted, ready for phase `arg` */
    PF_MSG_RES,       /* either way: pf_side_res_t of row `arg` */
    PF_MSG_ERROR,     /* either way: a text, then the sender of it exits */
};
_Static_assert(sizeof(pf_params_t) <= BENCH_MSG_MAX, "params fit a message");
extern const char *const pf_msg_names[];
extern const bench_proto_t pf_proto;

/* ---- the worker: one side, in its own process (perf_worker.c) ----------------- */

/* The transfers of one direction on one side, for one size. */
typedef struct {
    int active;         /* this side moves data this way */
    int is_send;        /* tpx_send (else tpx_recv) */
    uint64_t dir;       /* key bit of the pattern: 0 client -> server, 1 server -> client */
    unsigned char *mem; /* the registered buffers: host memory, or device memory (--mem cuda) */
    size_t mem_len;
    int on_gpu;           /* mem came from tpx_gpu_alloc() */
    unsigned char *stage; /* --mem cuda --verify: host copy of mem, filled or checked here */
    tpx_region_t *region;
    tpx_xfer_t **x;    /* [depth * batch]: slot = (iteration % depth) * batch + k */
    uint64_t *post_ns; /* post time of each slot */
    uint64_t posted;   /* iterations posted */
    uint64_t done;     /* iterations complete */
    uint64_t kdone;    /* transfers of iteration `done` complete */
    uint64_t *lat;     /* timed latency samples */
    uint64_t nlat, lat_every, lat_seen, lat_sum, lat_min, lat_max;
    uint64_t checksum;
} pf_stream_t;

/* One size: its geometry and its streams. */
typedef struct {
    uint64_t size, stride, batch, depth, iters, warmup;
    pf_stream_t tx, rx;
} pf_sized_t;

/*
 * --all-gpus: the lanes of one process meet here before every phase (a
 * barrier that a failing lane can break, so that no lane waits for one that
 * is gone). Generation-counted; waits are bounded by the run's timeout.
 */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;       /* lanes */
    int waiting; /* lanes at the barrier now */
    int broken;  /* a lane failed: every wait fails from now on */
    uint64_t gen;
} pf_gang_t;

typedef struct {
    const pf_params_t *p;
    int is_server;
    int lane;        /* --all-gpus: this engine's lane; else 0 */
    pf_gang_t *gang; /* --all-gpus: the lanes of this process; else NULL */
    char who[16];    /* side.who and side.peer ("server/gpu1") */
    char peer_who[16];
    bench_side_t side; /* who, peer, control stream, result pipe, progress line, failed */
    int out_rows;      /* this side reports rows to its parent */
    const char *host;  /* client: the server's engine host */
    int engine_port;   /* server: the engine's port (TPX_PORT_EPHEMERAL or a port) */
    const char *plugin;
    int cuda; /* --mem cuda: buffers in device memory of `gpu` */
    int gpu;  /* params.gpu of this side's engine (-1: none) */
    tpx_engine_t *e;
    tpx_peer_t *peer;
    int efd;
    int rc; /* pf_worker()'s result, for a lane thread */
} pf_worker_t;

/* ---- the parent: children, the table, JSON, the transport comparison ------------ */

typedef struct {
    double engine_gbps, transport_gbps;
    uint64_t size;
} pf_cmp_t;

/* --all-gpus: one size over every lane. GB/s is the sum of the lanes' GB/s
 * (each over its own receiver's time); time is the slowest lane's. */
typedef struct {
    uint64_t index; /* the size's position in the sweep */
    uint64_t size, batch, iters, direction;
    uint64_t lanes;                              /* rows summed */
    uint64_t bytes;                              /* timed bytes of every lane */
    uint64_t time_ns;                            /* the slowest lane's time */
    double gbps;                                 /* sum of the lanes' GB/s */
    double gbps_min;                             /* the slowest lane's GB/s */
    uint64_t lat_avg_ns, lat_p50_ns, lat_p99_ns; /* mean of the averages; worst p50/p99 */
    uint64_t cpu_ns; /* the process CPU (both sides) over the longest lane phase */
    int verified;    /* every lane verified */
} pf_agg_t;

typedef struct {
    bench_mode_t mode;
    pf_params_t p;
    int port, engine_port;
    const char *host;
    const char *json;
    const char *plot;
    const char *plugin;
    int mem;     /* PF_MEM_*: this process's buffers (loopback: both sides') */
    int mem_set; /* --mem given (else a client follows the server) */
    int gpu[2];  /* params.gpu of the server's and the client's engine; -1: none */
    int compare;
    int progress;
    int user_set_run_opts; /* client: run options given, but the server decides */
    pf_row_t *rows;
    size_t nrows;
    char error[512];
    int header_done;
    char started[64];
    const char *argv0;
    char cmp_cmd[1024];
    pf_cmp_t cmp[PF_MAX_SIZES];
    size_t ncmp;
    /* The engines of this process's side(s), from PF_REC_INFO records:
     * [side][lane], side 0 the server. */
    tpx_engine_info_t info[2][PF_MAX_LANES];
    int have_info[2][PF_MAX_LANES];
    /* --all-gpus */
    int all_gpus;
    int engine_port_set;           /* --engine-port given */
    int nlanes;                    /* engines per side (p.lanes) */
    int lane_gpu[2][PF_MAX_LANES]; /* [side][lane]: the GPU of that engine */
    int lane_fd[2][PF_MAX_LANES];  /* [side][lane]: its control stream; -1 none */
    pf_agg_t aggs[PF_MAX_SIZES];   /* the sum over lanes, per size */
    size_t naggs;
} pf_main_t;

#define pf_set_error(m, ...) bench_set_error((m)->error, sizeof((m)->error), __VA_ARGS__)

/* perf_worker.c */
/* Create the engine, meet the peer, run every size, tear down. 0 or -1. */
int pf_worker(pf_worker_t *w);
/* A worker for one side (and, --all-gpus, one lane) of this process. */
void pf_worker_setup(pf_main_t *m, pf_worker_t *w, int is_server, int lane, int ctl, int out,
                     int out_rows);
/* --all-gpus, in the child of one side: one thread per lane; the exit status. */
int pf_run_lanes(pf_main_t *m, int side, int out, int out_rows);

/* perf_report.c */
const char *pf_dir_name(uint64_t d);
double pf_row_gbps(const pf_row_t *r);
int pf_row_verified(const pf_row_t *r);
void pf_print_header(pf_main_t *m);
void pf_print_row(pf_main_t *m, const pf_row_t *r);
void pf_agg_make(const pf_main_t *m, uint64_t idx, pf_agg_t *a);
void pf_print_agg(pf_main_t *m, const pf_agg_t *a);
void pf_print_info(const pf_main_t *m, int side, int lane);
/* The "# best:" line after a run (rc: the run's result). */
void pf_print_best(const pf_main_t *m, int rc);
int pf_write_json(pf_main_t *m);
int pf_compare_transport(pf_main_t *m);
int pf_plot(const pf_main_t *m);

#endif
