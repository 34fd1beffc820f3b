/*
 * tpx_perf.c - tpx-perf: throughput and latency of the tpx engine (tpx/tpx.h:
 * tpx_engine_*, tpx_peer_*, tpx_mem_*, tpx_send/tpx_recv, tpx_xfer_*).
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
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "perf_rma.h"
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
#define PF_MAX_DEPTH    64
#define PF_MAX_INFLIGHT 1024
/* Buffer memory of one direction on one side; depth is reduced to stay under it. */
#define PF_MEM_BUDGET (1ull << 30)
/* Latency samples kept per stream and row (beyond: every k-th). */
#define PF_LAT_CAP (1u << 20)

/* Data direction: send = client -> server, recv = server -> client. */
enum { PF_DIR_SEND = 0, PF_DIR_RECV = 1, PF_DIR_BIDIR = 2 };
enum { PF_PROGRESS_THREAD = 0, PF_PROGRESS_CALLER = 1 };
/* Where this process's buffers live (--mem): each side decides its own. */
enum { PF_MEM_HOST = 0, PF_MEM_CUDA = 1 };
#define PF_MAX_GPU 1023 /* highest --gpu index accepted on the command line */
#define PF_MAX_LANES 16 /* --all-gpus: GPUs (engines) of one process */

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
#define PF_VERSION 3 /* 2: pf_params_t.lanes; 3: pf_params_t.mem */
enum {
    PF_MSG_HELLO = 1, /* client -> server: empty */
    PF_MSG_PARAMS,    /* server -> client: pf_params_t */
    PF_MSG_PORT,      /* server -> client: the engine's bootstrap port (one word) */
    PF_MSG_GO,        /* either way: receives posted, ready for phase `arg` */
    PF_MSG_RES,       /* either way: pf_side_res_t of row `arg` */
    PF_MSG_ERROR,     /* either way: a text, then the sender of it exits */
};
_Static_assert(sizeof(pf_params_t) <= BENCH_MSG_MAX, "params fit a message");
static const char *const pf_msg_names[] = {"?", "HELLO", "PARAMS", "PORT", "GO", "RES", "ERROR"};
static const bench_proto_t pf_proto = {PF_MAGIC, PF_VERSION, PF_MSG_ERROR, pf_msg_names,
                                       sizeof(pf_msg_names) / sizeof(pf_msg_names[0])};

static const char *pf_dir_name(uint64_t d)
{
    return d == PF_DIR_SEND ? "send" : d == PF_DIR_RECV ? "recv" : "bidir";
}

static const char *pf_dir_text(uint64_t d)
{
    return d == PF_DIR_SEND   ? "client -> server"
           : d == PF_DIR_RECV ? "server -> client"
                              : "both ways at once";
}

/* ---- the worker: one side, in its own process ---------------------------------- */

/* The transfers of one direction on one side, for one size. */
typedef struct {
    int active;   /* this side moves data this way */
    int is_send;  /* tpx_send (else tpx_recv) */
    uint64_t dir; /* key bit of the pattern: 0 client -> server, 1 server -> client */
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

static int pf_gang_init(pf_gang_t *g, int n)
{
    pthread_condattr_t ca;
    memset(g, 0, sizeof(*g));
    g->n = n;
    if (pthread_mutex_init(&g->mu, NULL) != 0)
        return -1;
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&g->cv, &ca) != 0) {
        pthread_mutex_destroy(&g->mu);
        return -1;
    }
    pthread_condattr_destroy(&ca);
    return 0;
}

static void pf_gang_destroy(pf_gang_t *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

static void pf_gang_break(pf_gang_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->broken = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* 0 when every lane arrived; -1 if the gang broke (or timeout_s passed:
 * then it breaks it, *timed_out = 1). */
static int pf_gang_wait(pf_gang_t *g, uint64_t timeout_s, int *timed_out)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += (time_t)timeout_s;
    *timed_out = 0;
    pthread_mutex_lock(&g->mu);
    uint64_t gen = g->gen;
    if (!g->broken && ++g->waiting == g->n) {
        g->waiting = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    }
    while (!g->broken && g->gen == gen)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT && g->gen == gen) {
            *timed_out = 1;
            g->broken = 1;
            pthread_cond_broadcast(&g->cv);
        }
    int rc = g->gen != gen ? 0 : -1;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

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

typedef struct {
    uint64_t t0, t1, user0, sys0, user1, sys1;
} pf_phase_t;

static int pf_msg_send(pf_worker_t *w, unsigned type, uint32_t arg, const void *buf, uint32_t len)
{
    if (bench_msg_send(&pf_proto, w->side.ctl, type, arg, buf, len) != 0) {
        bench_fail(&w->side, "cannot send %s to the %s: %s", pf_msg_names[type], w->side.peer,
                   strerror(errno));
        return -1;
    }
    return 0;
}

static int pf_msg_recv(pf_worker_t *w, unsigned want, uint32_t arg, void *buf, uint32_t len)
{
    char err[512];
    if (bench_msg_recv(&pf_proto, w->side.ctl, want, arg, buf, len, w->p->timeout_s * 1000000000ull,
                       w->side.peer, err, sizeof(err)) != 0) {
        bench_fail(&w->side, "%s", err);
        return -1;
    }
    return 0;
}

/* The pattern key of transfer k of iteration `iter` in direction `dir`. */
static uint64_t pf_key(uint64_t dir, uint64_t iter, uint64_t batch, uint64_t k)
{
    return dir << 62 ^ ((iter * batch + k) & ((1ull << 62) - 1));
}

static int pf_stream_alloc(pf_worker_t *w, pf_sized_t *z, pf_stream_t *s)
{
    uint64_t nslots = z->depth * z->batch;
    s->mem_len = (size_t)(nslots * z->stride);
    s->x = calloc(nslots, sizeof(*s->x));
    s->post_ns = calloc(nslots, sizeof(*s->post_ns));
    uint64_t total = z->iters * z->batch;
    s->lat_every = (total + PF_LAT_CAP - 1) / PF_LAT_CAP;
    s->lat = calloc(total < PF_LAT_CAP ? total : PF_LAT_CAP, sizeof(*s->lat));
    if (s->x == NULL || s->post_ns == NULL || s->lat == NULL) {
        bench_fail(&w->side, "out of memory");
        return -1;
    }
    if (w->cuda) {
        /* Device memory, as tests/gpu/test_engine_gpu.c does it. With
         * --verify the pattern goes through a host copy (pf_gpu_stage()). */
        void *d = NULL;
        tpx_status_t st = tpx_gpu_alloc(w->gpu, s->mem_len, &d);
        if (st != TPX_OK) {
            bench_fail(&w->side, "tpx_gpu_alloc(GPU %d, %zu bytes): %s", w->gpu, s->mem_len,
                       tpx_strerror(st));
            return -1;
        }
        s->mem = d;
        s->on_gpu = 1;
        if (w->p->verify && (s->stage = malloc(s->mem_len)) == NULL) {
            bench_fail(&w->side, "out of memory (%zu bytes of host staging)", s->mem_len);
            return -1;
        }
        st = tpx_mem_register(w->e, d, s->mem_len, TPX_MEM_CUDA, &s->region);
        if (st != TPX_OK) {
            bench_fail(&w->side, "tpx_mem_register(%zu bytes of GPU %d memory): %s", s->mem_len,
                       w->gpu, tpx_strerror(st));
            return -1;
        }
        return 0;
    }
    void *b = mmap(NULL, s->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) {
        bench_fail(&w->side, "cannot map %zu bytes of buffers: %s", s->mem_len, strerror(errno));
        return -1;
    }
    s->mem = b;
    madvise(b, s->mem_len, MADV_HUGEPAGE); /* best effort: fewer TLB misses in the copies */
    memset(b, 0, s->mem_len);              /* fault every page in before timing */
    tpx_status_t st = tpx_mem_register(w->e, b, s->mem_len, TPX_MEM_HOST, &s->region);
    if (st != TPX_OK) {
        bench_fail(&w->side, "tpx_mem_register(%zu bytes of host memory): %s", s->mem_len,
                   tpx_strerror(st));
        return -1;
    }
    return 0;
}

static void pf_stream_free(pf_worker_t *w, pf_sized_t *z, pf_stream_t *s)
{
    for (uint64_t i = 0; s->x != NULL && i < z->depth * z->batch; i++)
        if (s->x[i] != NULL)
            tpx_xfer_release(s->x[i]); /* after a failure: cancels what still runs */
    if (s->region != NULL)
        tpx_mem_deregister(s->region);
    if (s->on_gpu)
        tpx_gpu_free(s->mem);
    else if (s->mem != NULL)
        munmap(s->mem, s->mem_len);
    free(s->stage);
    free(s->x);
    free(s->post_ns);
    free(s->lat);
    memset(s, 0, sizeof(*s));
}

/* Post every transfer of the stream's next iteration (iteration iter0 + posted). */
static int pf_post_iter(pf_worker_t *w, pf_sized_t *z, pf_stream_t *s, uint64_t iter0)
{
    uint64_t it = iter0 + s->posted, set = s->posted % z->depth;
    for (uint64_t k = 0; k < z->batch; k++) {
        uint64_t slot = set * z->batch + k;
        size_t off = (size_t)(slot * z->stride);
        if (s->is_send && w->p->verify && !s->on_gpu)
            bench_fill(s->mem + off, z->size, pf_key(s->dir, it, z->batch, k));
        s->post_ns[slot] = bench_now_ns();
        tpx_status_t st = s->is_send
                              ? tpx_send(w->peer, s->region, off, (size_t)z->size, &s->x[slot])
                              : tpx_recv(w->peer, s->region, off, (size_t)z->size, &s->x[slot]);
        if (st != TPX_OK) {
            s->x[slot] = NULL;
            bench_fail(&w->side,
                       "%s(%" PRIu64 " bytes; iteration %" PRIu64 ", transfer %" PRIu64 "): %s",
                       s->is_send ? "tpx_send" : "tpx_recv", z->size, it, k, tpx_strerror(st));
            return -1;
        }
    }
    s->posted++;
    return 0;
}

/*
 * Take in the completions of the stream, oldest first (a receive's buffer
 * is checked before its set is posted again). 1 if any, 0 if none, -1 if a
 * transfer failed or its data was wrong.
 */
static int pf_drain(pf_worker_t *w, pf_sized_t *z, pf_stream_t *s, uint64_t iter0, int timed)
{
    int any = 0;
    while (s->done < s->posted) {
        uint64_t slot = (s->done % z->depth) * z->batch + s->kdone;
        uint64_t it = iter0 + s->done, k = s->kdone;
        size_t bytes = 0;
        tpx_status_t st = tpx_xfer_poll(s->x[slot], &bytes);
        if (st == TPX_INPROGRESS)
            break;
        uint64_t now = bench_now_ns();
        tpx_xfer_release(s->x[slot]);
        s->x[slot] = NULL;
        const char *op = s->is_send ? "tpx_send" : "tpx_recv";
        if (st != TPX_OK) {
            bench_fail(&w->side,
                       "%s of %" PRIu64 " bytes failed (iteration %" PRIu64 ", transfer %" PRIu64
                       "): %s",
                       op, z->size, it, k, tpx_strerror(st));
            return -1;
        }
        if (!s->is_send && bytes != z->size) {
            bench_fail(&w->side,
                       "tpx_recv reported %zu bytes received, expected %" PRIu64
                       " (iteration %" PRIu64 ", transfer %" PRIu64 ")",
                       bytes, z->size, it, k);
            return -1;
        }
        if (timed) {
            uint64_t d = now - s->post_ns[slot];
            s->lat_sum += d;
            s->lat_min = s->lat_seen == 0 || d < s->lat_min ? d : s->lat_min;
            s->lat_max = d > s->lat_max ? d : s->lat_max;
            if (s->lat_seen++ % s->lat_every == 0)
                s->lat[s->nlat++] = d;
        }
        uint64_t scratch = BENCH_FNV_BASIS, bad = 0;
        if (!s->is_send && w->p->verify && !s->on_gpu &&
            bench_check(s->mem + slot * z->stride, z->size, pf_key(s->dir, it, z->batch, k),
                        timed ? &s->checksum : &scratch, &bad) != 0) {
            bench_fail(&w->side,
                       "DATA MISMATCH: size %" PRIu64 ", iteration %" PRIu64 ", transfer %" PRIu64
                       ", first wrong byte at offset %" PRIu64 " (chunk %" PRIu64
                       " of the transfer)",
                       z->size, it, k, bad, w->p->chunk ? bad / w->p->chunk : 0);
            return -1;
        }
        any = 1;
        if (++s->kdone == z->batch) {
            s->kdone = 0;
            s->done++;
        }
    }
    return any;
}

/*
 * --mem cuda --verify, outside the timed section: the device buffers are
 * not read or written by this process's CPU in the loop. Before a phase the
 * sender writes a pattern into every slot the phase uses (set s, transfer
 * k: the key of iteration iter0 + s; every later iteration through that
 * slot sends the same bytes) and the receiver clears its slots; after the
 * phase the receiver copies its slots back and checks them, each holding
 * what the last iteration through it delivered. The host copies go through
 * tpx_gpu_copy(), as in tests/gpu/test_engine_gpu.c.
 */
static uint64_t pf_gpu_slots(const pf_sized_t *z, uint64_t iters)
{
    return (iters < z->depth ? iters : z->depth) * z->batch;
}

static int pf_gpu_stage(pf_worker_t *w, pf_sized_t *z, pf_stream_t *s, uint64_t iters,
                        uint64_t iter0)
{
    uint64_t nslots = pf_gpu_slots(z, iters);
    size_t len = (size_t)(nslots * z->stride);
    if (s->is_send) {
        for (uint64_t slot = 0; slot < nslots; slot++)
            bench_fill(s->stage + slot * z->stride, z->size,
                       pf_key(s->dir, iter0 + slot / z->batch, z->batch, slot % z->batch));
    } else {
        memset(s->stage, 0, len);
    }
    tpx_status_t st = tpx_gpu_copy(s->mem, s->stage, len);
    if (st != TPX_OK) {
        bench_fail(&w->side, "tpx_gpu_copy(%zu bytes host -> GPU %d, %s): %s", len, w->gpu,
                   s->is_send ? "the pattern" : "clearing the receive buffers", tpx_strerror(st));
        return -1;
    }
    return 0;
}

static int pf_gpu_check(pf_worker_t *w, pf_sized_t *z, pf_stream_t *s, uint64_t iters,
                        uint64_t iter0, int timed)
{
    uint64_t nslots = pf_gpu_slots(z, iters), scratch = BENCH_FNV_BASIS;
    size_t len = (size_t)(nslots * z->stride);
    tpx_status_t st = tpx_gpu_copy(s->stage, s->mem, len);
    if (st != TPX_OK) {
        bench_fail(&w->side, "tpx_gpu_copy(%zu bytes GPU %d -> host, to check them): %s", len,
                   w->gpu, tpx_strerror(st));
        return -1;
    }
    for (uint64_t slot = 0; slot < nslots; slot++) {
        uint64_t set = slot / z->batch, k = slot % z->batch, bad = 0;
        if (bench_check(s->stage + slot * z->stride, z->size,
                        pf_key(s->dir, iter0 + set, z->batch, k), timed ? &s->checksum : &scratch,
                        &bad) != 0) {
            uint64_t last = iter0 + set + (iters - 1 - set) / z->depth * z->depth;
            bench_fail(&w->side,
                       "DATA MISMATCH (GPU %d memory, checked after the phase): size %" PRIu64
                       ", iteration %" PRIu64 ", transfer %" PRIu64
                       ", first wrong byte at offset %" PRIu64 " (chunk %" PRIu64
                       " of the transfer)",
                       w->gpu, z->size, last, k, bad, w->p->chunk ? bad / w->p->chunk : 0);
            return -1;
        }
    }
    return 0;
}

/*
 * One phase: `iters` iterations, numbered iter0... `phase` is the barrier id
 * both sides agree on. The receiving direction posts first, then both sides
 * exchange GO; a side that sends starts its clock when the peer's GO
 * arrives, a side that only receives when it releases the sender.
 */
static int pf_phase(pf_worker_t *w, pf_sized_t *z, uint64_t iters, uint64_t iter0, uint32_t phase,
                    int timed, pf_phase_t *ph)
{
    pf_stream_t *streams[2] = {&z->rx, &z->tx};
    for (int i = 0; i < 2; i++) {
        streams[i]->posted = streams[i]->done = streams[i]->kdone = 0;
        if (streams[i]->active)
            streams[i]->checksum = BENCH_FNV_BASIS;
        if (streams[i]->active && streams[i]->stage != NULL &&
            pf_gpu_stage(w, z, streams[i], iters, iter0) != 0)
            return -1;
    }
    while (z->rx.active && z->rx.posted < iters && z->rx.posted < z->depth)
        if (pf_post_iter(w, z, &z->rx, iter0) != 0)
            return -1;
    int timed_out = 0;
    if (w->gang != NULL && pf_gang_wait(w->gang, w->p->timeout_s, &timed_out) != 0) {
        bench_fail(&w->side,
                   timed_out ? "the other GPUs' lanes of this process did not reach phase %u "
                               "within the timeout"
                             : "stopped at phase %u: another GPU's lane of this process failed "
                               "(see above)",
                   (unsigned)phase);
        return -1;
    }
    if (!z->tx.active) {
        bench_cpu_ns(&ph->user0, &ph->sys0);
        ph->t0 = bench_now_ns();
    }
    if (pf_msg_send(w, PF_MSG_GO, phase, NULL, 0) != 0 ||
        pf_msg_recv(w, PF_MSG_GO, phase, NULL, 0) != 0)
        return -1;
    if (z->tx.active) {
        bench_cpu_ns(&ph->user0, &ph->sys0);
        ph->t0 = bench_now_ns();
    }

    const int caller = w->p->progress == PF_PROGRESS_CALLER;
    uint64_t now = ph->t0, last_progress = now, next_check = now;
    bench_progress_t line = {.on = w->side.progress && timed};
    bench_progress_start(&line, ph->t0);
    for (;;) {
        /* Caller mode: this drives the engine. Thread mode: it only clears
         * the completion fd, so that poll() below sleeps until the next one. */
        int progressed = tpx_progress(w->e) > 0, finished = 1;
        for (int i = 0; i < 2; i++) {
            pf_stream_t *s = streams[i];
            if (!s->active)
                continue;
            int r = pf_drain(w, z, s, iter0, timed);
            if (r < 0)
                return -1;
            progressed |= r;
            while (s->posted < iters && s->posted - s->done < z->depth) {
                if (pf_post_iter(w, z, s, iter0) != 0)
                    return -1;
                progressed = 1;
            }
            finished &= s->done == iters;
        }
        if (finished)
            break;
        now = bench_now_ns();
        if (progressed) {
            last_progress = now;
            if (bench_progress_due(&line, now)) {
                pf_stream_t *s = z->rx.active ? &z->rx : &z->tx;
                double el = (double)(now - ph->t0) / 1e9;
                char hb[32];
                bench_progress_draw(
                    &line, "  size %s  count %" PRIu64 "  iter %" PRIu64 "/%" PRIu64 "  %.2f GB/s",
                    bench_human(z->size, hb, sizeof(hb)), z->batch, s->done, iters,
                    el > 0 ? (double)(s->done * z->batch * z->size) / el / 1e9 : 0.0);
            }
            continue;
        }
        int hup = 0;
        if (caller) {
            sched_yield();
        } else {
            struct pollfd pfd[2] = {{.fd = w->efd, .events = POLLIN},
                                    {.fd = w->side.ctl, .events = POLLRDHUP}};
            if (poll(pfd, 2, 100) > 0)
                hup = pfd[1].revents != 0;
        }
        now = bench_now_ns();
        if (bench_check_alive(&w->side, w->p->timeout_s, now, &next_check, last_progress, hup,
                              z->tx.active && z->rx.active ? "tpx_send/tpx_recv"
                              : z->tx.active               ? "tpx_send"
                                                           : "tpx_recv") != 0)
            return -1;
    }
    ph->t1 = bench_now_ns();
    bench_cpu_ns(&ph->user1, &ph->sys1);
    bench_progress_clear(&line);
    if (z->rx.active && z->rx.stage != NULL &&
        pf_gpu_check(w, z, &z->rx, iters, iter0, timed) != 0)
        return -1;
    return 0;
}

static void pf_lat_stats(pf_stream_t *s, pf_lat_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!s->active || s->lat_seen == 0)
        return;
    uint64_t q[4];
    bench_percentiles(s->lat, s->nlat, q);
    out->n = s->lat_seen;
    out->avg_ns = s->lat_sum / s->lat_seen;
    out->min_ns = s->lat_min;
    out->p50_ns = q[1];
    out->p99_ns = q[2];
    out->max_ns = s->lat_max;
}

/* Bytes of one direction's timed phase, and the row's totals. */
static void pf_row_finish(pf_row_t *r)
{
    uint64_t one = r->size * r->batch * r->iters;
    r->bytes = r->direction == PF_DIR_BIDIR ? 2 * one : one;
    r->time_ns = r->direction == PF_DIR_SEND       ? r->srv.time_ns
                 : r->direction == PF_DIR_RECV     ? r->cli.time_ns
                 : r->srv.time_ns > r->cli.time_ns ? r->srv.time_ns
                                                   : r->cli.time_ns;
}

/* Run one size on the connected peer: buffers, warm-up, timed phase, row. */
static int pf_run_size(pf_worker_t *w, uint64_t row_idx, uint64_t size)
{
    const pf_params_t *p = w->p;
    pf_sized_t z = {.size = size, .batch = p->batch};
    int rc = -1;

    z.stride = size < 64 ? 64 : (size + 63) / 64 * 64; /* cache-line aligned transfers */
    z.iters = p->iters != BENCH_AUTO ? p->iters : bench_auto_iters(size * p->batch);
    z.warmup = p->warmup != BENCH_AUTO ? p->warmup : bench_auto_warmup(z.iters);
    if (p->depth != 0) {
        z.depth = p->depth;
    } else {
        /* Enough iterations to fill every channel's window, plus one being
         * filled or checked; within the memory budget and the limits. */
        uint64_t set = z.stride * z.batch, pipe = p->channels * p->window * p->chunk;
        uint64_t want = (pipe + set - 1) / set + 1, fit = PF_MEM_BUDGET / set;
        uint64_t most = PF_MAX_INFLIGHT / z.batch;
        z.depth = want < fit ? want : fit;
        z.depth = z.depth < most ? z.depth : most;
        z.depth = z.depth < PF_MAX_DEPTH ? z.depth : PF_MAX_DEPTH;
    }
    uint64_t total = z.iters > z.warmup ? z.iters : z.warmup;
    if (z.depth > total)
        z.depth = total;
    if (z.depth == 0)
        z.depth = 1;
    int srv = w->is_server, dir = (int)p->direction;
    z.tx.active = dir == PF_DIR_BIDIR || (srv ? dir == PF_DIR_RECV : dir == PF_DIR_SEND);
    z.rx.active = dir == PF_DIR_BIDIR || (srv ? dir == PF_DIR_SEND : dir == PF_DIR_RECV);
    z.tx.is_send = 1;
    z.tx.dir = srv ? 1 : 0; /* the server sends server -> client */
    z.rx.dir = srv ? 0 : 1;
    if ((z.tx.active && pf_stream_alloc(w, &z, &z.tx) != 0) ||
        (z.rx.active && pf_stream_alloc(w, &z, &z.rx) != 0))
        goto out;

    uint32_t phase = (uint32_t)(row_idx * 2);
    pf_phase_t warm, timed;
    if (z.warmup > 0 && pf_phase(w, &z, z.warmup, 0, phase, 0, &warm) != 0)
        goto out;
    if (pf_phase(w, &z, z.iters, z.warmup, phase + 1, 1, &timed) != 0)
        goto out;

    pf_side_res_t mine = {
        .time_ns = timed.t1 - timed.t0,
        .cpu_user_ns = timed.user1 - timed.user0,
        .cpu_sys_ns = timed.sys1 - timed.sys0,
        .verified = z.rx.active && p->verify,
        .checksum = z.rx.active && p->verify ? z.rx.checksum : 0,
    };
    pf_lat_stats(&z.tx, &mine.tx);
    pf_lat_stats(&z.rx, &mine.rx);
    unsigned char wire[sizeof(pf_side_res_t)];
    pf_side_res_t theirs;
    bench_words_out(wire, &mine, PF_SIDE_WORDS);
    if (pf_msg_send(w, PF_MSG_RES, (uint32_t)row_idx, wire, sizeof(wire)) != 0 ||
        pf_msg_recv(w, PF_MSG_RES, (uint32_t)row_idx, wire, sizeof(wire)) != 0)
        goto out;
    bench_words_in(&theirs, wire, PF_SIDE_WORDS);
    pf_rec_t rec = {.type = PF_REC_ROW,
                    .row = {.index = row_idx,
                            .lane = (uint64_t)w->lane,
                            .size = size,
                            .batch = z.batch,
                            .iters = z.iters,
                            .warmup = z.warmup,
                            .depth = z.depth,
                            .direction = p->direction,
                            .srv = srv ? mine : theirs,
                            .cli = srv ? theirs : mine}};
    pf_row_finish(&rec.row);
    if (w->out_rows && bench_put_row(&w->side, &rec) != 0)
        goto out;
    rc = 0;
out:
    pf_stream_free(w, &z, &z.tx);
    pf_stream_free(w, &z, &z.rx);
    return w->side.failed ? -1 : rc;
}

/* Create the engine, meet the peer, run every size, tear down. */
static int pf_worker(pf_worker_t *w)
{
    const pf_params_t *p = w->p;
    const int tmo_ms = (int)(p->timeout_s * 1000 < INT_MAX ? p->timeout_s * 1000 : INT_MAX);
    tpx_status_t st;
    unsigned char word[8];

    if (tpx_config_check() != TPX_OK) {
        bench_fail(&w->side, "a TPX_* setting is malformed (see above; `%s --print-config`)",
                   PF_PROG);
        return -1;
    }
    tpx_engine_params_t ep;
    tpx_engine_params_init(&ep);
    ep.plugin = w->plugin;
    ep.channels = (int)p->channels;
    ep.chunk_bytes = (size_t)p->chunk;
    ep.window = (int)p->window;
    ep.timeout_ms = tmo_ms;
    ep.port = w->is_server ? w->engine_port : TPX_PORT_NONE;
    ep.progress_thread = p->progress == PF_PROGRESS_THREAD;
    if (w->gang != NULL) /* --all-gpus: each engine's thread near its NIC */
        ep.progress_cpu = TPX_CPU_NUMA_LOCAL;
    ep.gpu = w->gpu;
    st = tpx_engine_create(&ep, &w->e);
    if (st != TPX_OK) {
        bench_fail(&w->side,
                   "tpx_engine_create(plugin %s, gpu %d, %" PRIu64 " channels, chunk %" PRIu64
                   ", window %" PRIu64 "): %s",
                   w->plugin ? w->plugin : "from TPX_NET_PLUGIN", w->gpu, p->channels, p->chunk,
                   p->window, tpx_strerror(st));
        return -1;
    }
    w->efd = tpx_engine_fd(w->e);
    if (w->side.out >= 0) {
        /* What the engine settled on (plugin, NICs), for the table and JSON. */
        static const pf_rec_t zero;
        pf_rec_t rec = zero;
        rec.type = PF_REC_INFO;
        rec.side = w->is_server ? 0 : 1;
        rec.lane = (uint64_t)w->lane;
        st = tpx_engine_info(w->e, &rec.info);
        if (st != TPX_OK) {
            bench_fail(&w->side, "tpx_engine_info: %s", tpx_strerror(st));
            goto out;
        }
        if (bench_put_row(&w->side, &rec) != 0)
            goto out;
    }

    if (w->is_server) {
        bench_put64(word, (uint64_t)tpx_engine_port(w->e));
        if (pf_msg_send(w, PF_MSG_PORT, 0, word, 8) != 0)
            goto out;
        uint64_t now = bench_now_ns(), next_check = now, start = now;
        for (;;) {
            st = tpx_peer_accept(w->e, 100, &w->peer);
            if (st == TPX_OK)
                break;
            if (st != TPX_ERR_TIMED_OUT && st != TPX_INPROGRESS) {
                bench_fail(&w->side, "tpx_peer_accept: %s", tpx_strerror(st));
                goto out;
            }
            if (bench_check_alive(&w->side, w->p->timeout_s, bench_now_ns(), &next_check, start, 0,
                                  "tpx_peer_accept") != 0)
                goto out;
        }
    } else {
        if (pf_msg_recv(w, PF_MSG_PORT, 0, word, 8) != 0)
            goto out;
        int port = (int)bench_get64(word);
        st = tpx_peer_connect(w->e, w->host, port, tmo_ms, &w->peer);
        if (st != TPX_OK) {
            bench_fail(&w->side, "tpx_peer_connect(%s, port %d): %s", w->host, port,
                       tpx_strerror(st));
            goto out;
        }
    }
    for (uint64_t i = 0; i < p->nsizes; i++)
        if (pf_run_size(w, i, p->sizes[i]) != 0)
            goto out;
out:
    if (w->peer != NULL)
        tpx_peer_close(w->peer);
    tpx_engine_destroy(w->e);
    return w->side.failed ? -1 : 0;
}

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
    uint64_t lanes;   /* rows summed */
    uint64_t bytes;   /* timed bytes of every lane */
    uint64_t time_ns; /* the slowest lane's time */
    double gbps;      /* sum of the lanes' GB/s */
    double gbps_min;  /* the slowest lane's GB/s */
    uint64_t lat_avg_ns, lat_p50_ns, lat_p99_ns; /* mean of the averages; worst p50/p99 */
    uint64_t cpu_ns;  /* the process CPU (both sides) over the longest lane phase */
    int verified;     /* every lane verified */
} pf_agg_t;

typedef struct {
    bench_mode_t mode;
    pf_params_t p;
    int port, engine_port;
    const char *host;
    const char *json;
    const char *plot;
    const char *plugin;
    int mem;    /* PF_MEM_*: this process's buffers (loopback: both sides') */
    int mem_set; /* --mem given (else a client follows the server) */
    int gpu[2]; /* params.gpu of the server's and the client's engine; -1: none */
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
    int engine_port_set;                /* --engine-port given */
    int nlanes;                         /* engines per side (p.lanes) */
    int lane_gpu[2][PF_MAX_LANES];      /* [side][lane]: the GPU of that engine */
    int lane_fd[2][PF_MAX_LANES];       /* [side][lane]: its control stream; -1 none */
    pf_agg_t aggs[PF_MAX_SIZES];        /* the sum over lanes, per size */
    size_t naggs;
} pf_main_t;

#define pf_set_error(m, ...) bench_set_error((m)->error, sizeof((m)->error), __VA_ARGS__)

static double pf_row_gbps(const pf_row_t *r)
{
    return r->time_ns > 0 ? (double)r->bytes / (double)r->time_ns : 0.0;
}

static double pf_row_cpu_per_gb(const pf_row_t *r)
{
    double cpu =
        (double)(r->srv.cpu_user_ns + r->srv.cpu_sys_ns + r->cli.cpu_user_ns + r->cli.cpu_sys_ns) /
        1e9;
    return r->bytes > 0 ? cpu / ((double)r->bytes / 1e9) : 0.0;
}

/* The latency the table shows: the senders' (both directions: the slower one's). */
static pf_lat_t pf_row_lat(const pf_row_t *r)
{
    if (r->direction == PF_DIR_SEND)
        return r->cli.tx;
    if (r->direction == PF_DIR_RECV)
        return r->srv.tx;
    pf_lat_t a = r->srv.tx, b = r->cli.tx;
    a.avg_ns = (a.avg_ns + b.avg_ns) / 2;
    a.p50_ns = a.p50_ns > b.p50_ns ? a.p50_ns : b.p50_ns;
    a.p99_ns = a.p99_ns > b.p99_ns ? a.p99_ns : b.p99_ns;
    a.max_ns = a.max_ns > b.max_ns ? a.max_ns : b.max_ns;
    a.min_ns = a.min_ns < b.min_ns ? a.min_ns : b.min_ns;
    a.n += b.n;
    return a;
}

static int pf_row_verified(const pf_row_t *r)
{
    return r->direction == PF_DIR_SEND   ? (int)r->srv.verified
           : r->direction == PF_DIR_RECV ? (int)r->cli.verified
                                         : (int)(r->srv.verified && r->cli.verified);
}

static const char *pf_plugin_name(const pf_main_t *m)
{
    const char *env = getenv("TPX_NET_PLUGIN");
    return m->plugin != NULL ? m->plugin : env != NULL && *env != '\0' ? env : "builtin";
}

/* The GPUs of the sides this process runs, as "server GPU 0, client GPU 1". */
static void pf_lane_text(const pf_main_t *m, uint64_t lane, char *buf, size_t len);

static void pf_gpu_text(const pf_main_t *m, char *buf, size_t len)
{
    buf[0] = '\0';
    if (m->all_gpus) {
        /* "all 2 GPUs, one engine each: 0->1 1->0" */
        snprintf(buf, len, "all %d GPU%s, one engine each:", m->nlanes, m->nlanes == 1 ? "" : "s");
        for (int i = 0; i < m->nlanes; i++) {
            char g[32];
            size_t l = strlen(buf);
            pf_lane_text(m, (uint64_t)i, g, sizeof(g));
            snprintf(buf + l, len - l, " %s", g);
        }
        return;
    }
    for (int i = 0; i < 2; i++) {
        if (m->mode == (i == 0 ? BENCH_MODE_CLIENT : BENCH_MODE_SERVER))
            continue; /* the other process's side */
        size_t l = strlen(buf);
        if (m->gpu[i] >= 0)
            snprintf(buf + l, len - l, "%s%s GPU %d", l ? ", " : "", i == 0 ? "server" : "client",
                     m->gpu[i]);
        else
            snprintf(buf + l, len - l, "%s%s no GPU", l ? ", " : "", i == 0 ? "server" : "client");
    }
}

/* "host", "host (server GPU 0, ...)" (--gpu: the NIC choice) or "cuda (server GPU 0, ...)". */
static void pf_mem_text(const pf_main_t *m, char *buf, size_t len)
{
    char g[400];
    pf_gpu_text(m, g, sizeof(g));
    if (m->mem == PF_MEM_HOST && m->gpu[0] < 0 && m->gpu[1] < 0 && !m->all_gpus)
        snprintf(buf, len, "host");
    else
        snprintf(buf, len, "%s (%s)", m->mem == PF_MEM_CUDA ? "cuda" : "host", g);
}

static void pf_print_header(pf_main_t *m)
{
    const pf_params_t *p = &m->p;
    char hb[32], hc[32];
    if (bench_quiet)
        return;
    printf("# %s %s: the tpx engine, plugin \"%s\", %s mode, %ld cores\n", PF_PROG,
           tpx_version_string(), pf_plugin_name(m), bench_mode_name(m->mode),
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("# sizes");
    for (uint64_t i = 0; i < p->nsizes; i++)
        printf(" %s", bench_human(p->sizes[i], hb, sizeof(hb)));
    char it[24] = "auto", wu[24] = "auto", dp[24] = "auto";
    if (p->iters != BENCH_AUTO)
        snprintf(it, sizeof(it), "%" PRIu64, p->iters);
    if (p->warmup != BENCH_AUTO)
        snprintf(wu, sizeof(wu), "%" PRIu64, p->warmup);
    if (p->depth != 0)
        snprintf(dp, sizeof(dp), "%" PRIu64, p->depth);
    printf("  count %" PRIu64 "  iters %s  warmup %s  depth %s\n", p->batch, it, wu, dp);
    char mem[512];
    pf_mem_text(m, mem, sizeof(mem));
    printf("# direction %s (%s)  memory %s  verify %s%s  timeout %" PRIu64 " s\n",
           pf_dir_name(p->direction), pf_dir_text(p->direction), mem, p->verify ? "on" : "off",
           p->verify && m->mem == PF_MEM_CUDA ? " (outside the timed loop)" : "", p->timeout_s);
    const char *ifn = getenv("TPX_SOCKET_IFNAME");
    printf("# engine: channels %" PRIu64 "  chunk %s  window %" PRIu64
           "  progress %s  TPX_SOCKET_IFNAME=%s\n",
           p->channels, bench_human(p->chunk, hc, sizeof(hc)), p->window,
           p->progress == PF_PROGRESS_THREAD ? "thread" : "caller", ifn ? ifn : "(unset)");
    printf("# GB/s = 1e9 bytes/s: bytes of the timed iterations (count x size each) over the\n"
           "#   receiver's time from the barrier release (receives posted) to its last\n"
           "#   completion (bidir: both directions over the slower side's time); warm-up not\n"
           "#   timed; time(ms) = that time / iters; lat = one transfer, post to completion,\n"
           "#   as seen by the sender (us); cpu(s/GB) = user+sys CPU of both processes (all\n"
           "#   threads) per 1e9 bytes\n");
    if (m->all_gpus)
        printf("# --all-gpus: one row per GPU lane (gpu: %s), then their sum: GB/s\n"
               "#   added up, time(ms) the slowest lane's, lat the mean of the averages and\n"
               "#   the worst p50/p99; lanes start every phase together. cpu(s/GB) only on\n"
               "#   the sum: the whole process(es), all lanes\n",
               m->mode == BENCH_MODE_LOOPBACK ? "client GPU -> server GPU" : "this host's GPU");
    fflush(stdout);
}

static const bench_col_t pf_cols[] = {
    {"size", 12},        {"count", 6},    {"iters", 7},    {"time(ms)", 10},  {"GB/s", 8},
    {"lat-avg(us)", 11}, {"p50(us)", 10}, {"p99(us)", 10}, {"cpu(s/GB)", 10}, {"verified", 0},
};
#define PF_NCOLS ((int)(sizeof(pf_cols) / sizeof(pf_cols[0])))
/* --all-gpus: the same with the lane's GPU(s) first. */
static const bench_col_t pf_cols_gpu[] = {
    {"gpu", 7},          {"size", 12},    {"count", 6},    {"iters", 7},      {"time(ms)", 10},
    {"GB/s", 8},         {"lat-avg(us)", 11}, {"p50(us)", 10}, {"p99(us)", 10}, {"cpu(s/GB)", 10},
    {"verified", 0},
};
_Static_assert(sizeof(pf_cols_gpu) / sizeof(pf_cols_gpu[0]) == PF_NCOLS + 1, "one more column");

/* --all-gpus: the GPU cell of a lane: this host's GPU (server/client), or
 * "C->S" (client GPU to server GPU; recv: S->C, bidir: C<->S) in loopback. */
static void pf_lane_text(const pf_main_t *m, uint64_t lane, char *buf, size_t len)
{
    int s = m->lane_gpu[0][lane], c = m->lane_gpu[1][lane];
    if (m->mode == BENCH_MODE_SERVER)
        snprintf(buf, len, "%d", s);
    else if (m->mode == BENCH_MODE_CLIENT)
        snprintf(buf, len, "%d", c);
    else if (m->p.direction == PF_DIR_SEND)
        snprintf(buf, len, "%d->%d", c, s);
    else if (m->p.direction == PF_DIR_RECV)
        snprintf(buf, len, "%d->%d", s, c);
    else
        snprintf(buf, len, "%d<->%d", c, s);
}

static void pf_table_header(pf_main_t *m)
{
    if (m->header_done)
        return;
    m->header_done = 1;
    printf("#\n");
    if (m->all_gpus)
        bench_table_header(stdout, pf_cols_gpu, PF_NCOLS + 1);
    else
        bench_table_header(stdout, pf_cols, PF_NCOLS);
}

/* One table line; `gpu`: the first cell in --all-gpus mode, else NULL. */
static void pf_table_line(const char *gpu, char c[][BENCH_CELL])
{
    if (gpu == NULL) {
        bench_table_row(stdout, pf_cols, PF_NCOLS, c);
        return;
    }
    char g[PF_NCOLS + 1][BENCH_CELL];
    snprintf(g[0], BENCH_CELL, "%s", gpu);
    memcpy(g[1], c[0], sizeof(g) - sizeof(g[0]));
    bench_table_row(stdout, pf_cols_gpu, PF_NCOLS + 1, g);
}

static void pf_print_row(pf_main_t *m, const pf_row_t *r)
{
    if (bench_quiet)
        return;
    pf_table_header(m);
    pf_lat_t l = pf_row_lat(r);
    char c[PF_NCOLS][BENCH_CELL], g[32];
    snprintf(c[0], BENCH_CELL, "%" PRIu64, r->size);
    snprintf(c[1], BENCH_CELL, "%" PRIu64, r->batch);
    snprintf(c[2], BENCH_CELL, "%" PRIu64, r->iters);
    snprintf(c[3], BENCH_CELL, "%.3f", (double)r->time_ns / 1e6 / (double)r->iters);
    snprintf(c[4], BENCH_CELL, "%.3f", pf_row_gbps(r));
    snprintf(c[5], BENCH_CELL, "%.1f", (double)l.avg_ns / 1e3);
    snprintf(c[6], BENCH_CELL, "%.1f", (double)l.p50_ns / 1e3);
    snprintf(c[7], BENCH_CELL, "%.1f", (double)l.p99_ns / 1e3);
    /* --all-gpus: a lane's CPU reading is the whole process's (every lane). */
    if (m->all_gpus)
        snprintf(c[8], BENCH_CELL, "-");
    else
        snprintf(c[8], BENCH_CELL, "%.3f", pf_row_cpu_per_gb(r));
    snprintf(c[9], BENCH_CELL, "%s", pf_row_verified(r) ? "yes" : "no");
    if (m->all_gpus)
        pf_lane_text(m, r->lane, g, sizeof(g));
    pf_table_line(m->all_gpus ? g : NULL, c);
    fflush(stdout);
}

/* --all-gpus: the lanes' rows of size index `idx` summed. */
static void pf_agg_make(const pf_main_t *m, uint64_t idx, pf_agg_t *a)
{
    memset(a, 0, sizeof(*a));
    a->index = idx;
    a->verified = 1;
    for (size_t i = 0; i < m->nrows; i++) {
        const pf_row_t *r = &m->rows[i];
        if (r->index != idx)
            continue;
        pf_lat_t l = pf_row_lat(r);
        double g = pf_row_gbps(r);
        uint64_t cpu =
            r->srv.cpu_user_ns + r->srv.cpu_sys_ns + r->cli.cpu_user_ns + r->cli.cpu_sys_ns;
        a->size = r->size;
        a->batch = r->batch;
        a->iters = r->iters;
        a->direction = r->direction;
        a->gbps_min = a->lanes == 0 || g < a->gbps_min ? g : a->gbps_min;
        a->lanes++;
        a->bytes += r->bytes;
        a->gbps += g;
        a->time_ns = r->time_ns > a->time_ns ? r->time_ns : a->time_ns;
        a->lat_avg_ns += l.avg_ns;
        a->lat_p50_ns = l.p50_ns > a->lat_p50_ns ? l.p50_ns : a->lat_p50_ns;
        a->lat_p99_ns = l.p99_ns > a->lat_p99_ns ? l.p99_ns : a->lat_p99_ns;
        a->cpu_ns = cpu > a->cpu_ns ? cpu : a->cpu_ns;
        a->verified &= pf_row_verified(r);
    }
    if (a->lanes > 0)
        a->lat_avg_ns /= a->lanes;
}

static double pf_agg_cpu_per_gb(const pf_agg_t *a)
{
    return a->bytes > 0 ? ((double)a->cpu_ns / 1e9) / ((double)a->bytes / 1e9) : 0.0;
}

static void pf_print_agg(pf_main_t *m, const pf_agg_t *a)
{
    if (bench_quiet)
        return;
    pf_table_header(m);
    char c[PF_NCOLS][BENCH_CELL];
    snprintf(c[0], BENCH_CELL, "%" PRIu64, a->size);
    snprintf(c[1], BENCH_CELL, "%" PRIu64, a->batch);
    snprintf(c[2], BENCH_CELL, "%" PRIu64, a->iters);
    snprintf(c[3], BENCH_CELL, "%.3f", (double)a->time_ns / 1e6 / (double)a->iters);
    snprintf(c[4], BENCH_CELL, "%.3f", a->gbps);
    snprintf(c[5], BENCH_CELL, "%.1f", (double)a->lat_avg_ns / 1e3);
    snprintf(c[6], BENCH_CELL, "%.1f", (double)a->lat_p50_ns / 1e3);
    snprintf(c[7], BENCH_CELL, "%.1f", (double)a->lat_p99_ns / 1e3);
    snprintf(c[8], BENCH_CELL, "%.3f", pf_agg_cpu_per_gb(a));
    snprintf(c[9], BENCH_CELL, "%s", a->verified ? "yes" : "no");
    pf_table_line("sum", c);
    fflush(stdout);
}

/* "lo 100G, eth1 200G" (the engine's NICs and their speeds). */
static void pf_nics_text(const tpx_engine_info_t *in, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < in->nnics && i < TPX_INFO_MAX_NICS; i++) {
        size_t l = strlen(buf);
        if (in->nic_speed_mbps[i] > 0)
            snprintf(buf + l, len - l, "%s%s %g Gb/s", i ? ", " : "", in->nic[i],
                     in->nic_speed_mbps[i] / 1000.0);
        else
            snprintf(buf + l, len - l, "%s%s", i ? ", " : "", in->nic[i]);
    }
    if (buf[0] == '\0')
        snprintf(buf, len, "none reported");
}

static void pf_print_info(const pf_main_t *m, int side, int lane)
{
    const tpx_engine_info_t *in = &m->info[side][lane];
    char nics[512], hc[32], g[16] = "";
    if (bench_quiet)
        return;
    if (in->gpu >= 0)
        snprintf(g, sizeof(g), " GPU %d", in->gpu);
    pf_nics_text(in, nics, sizeof(nics));
    printf("# engine %s%s: plugin %s (ncclNet v%d), %d channels, chunk %s, window %d, port %d, "
           "NICs %s\n",
           side == 0 ? "server" : "client", g, in->plugin, in->abi, in->channels,
           bench_human(in->chunk_bytes, hc, sizeof(hc)), in->window, in->port, nics);
    fflush(stdout);
}

static void pf_json_lat(FILE *f, const char *key, const pf_lat_t *l, int comma)
{
    fprintf(f, "\"%s\": ", key);
    if (l->n == 0) {
        fprintf(f, "null%s", comma ? ", " : "");
        return;
    }
    fputc('{', f);
    bench_json_u64(f, "transfers", l->n, 1);
    bench_json_dbl(f, "avg_us", (double)l->avg_ns / 1e3, 1);
    bench_json_dbl(f, "min_us", (double)l->min_ns / 1e3, 1);
    bench_json_dbl(f, "p50_us", (double)l->p50_ns / 1e3, 1);
    bench_json_dbl(f, "p99_us", (double)l->p99_ns / 1e3, 1);
    bench_json_dbl(f, "max_us", (double)l->max_ns / 1e3, 0);
    fprintf(f, "}%s", comma ? ", " : "");
}

static void pf_json_side(FILE *f, const char *key, const pf_side_res_t *s)
{
    fprintf(f, "\"%s\": {", key);
    bench_json_dbl(f, "time_ms_total", (double)s->time_ns / 1e6, 1);
    bench_json_dbl(f, "cpu_user_s", (double)s->cpu_user_ns / 1e9, 1);
    bench_json_dbl(f, "cpu_sys_s", (double)s->cpu_sys_ns / 1e9, 1);
    pf_json_lat(f, "send_latency", &s->tx, 1);
    pf_json_lat(f, "recv_latency", &s->rx, 1);
    fprintf(f, "\"verified\": %s, \"checksum\": ", s->verified ? "true" : "false");
    if (s->verified)
        fprintf(f, "\"0x%016" PRIx64 "\"}", s->checksum);
    else
        fputs("null}", f);
}

static void pf_json_count(FILE *f, const char *key, uint64_t v, uint64_t autov)
{
    fprintf(f, "\"%s\": ", key);
    if (v == autov)
        fputs("\"auto\", ", f);
    else
        fprintf(f, "%" PRIu64 ", ", v);
}

/* The fields of one measured row (no braces). */
static void pf_json_row(FILE *f, const pf_row_t *r)
{
    pf_lat_t l = pf_row_lat(r);
    bench_json_u64(f, "size", r->size, 1);
    bench_json_u64(f, "batch", r->batch, 1);
    bench_json_u64(f, "iters", r->iters, 1);
    bench_json_u64(f, "warmup", r->warmup, 1);
    bench_json_u64(f, "depth", r->depth, 1);
    fprintf(f, "\"direction\": \"%s\", ", pf_dir_name(r->direction));
    bench_json_u64(f, "bytes", r->bytes, 1);
    bench_json_dbl(f, "time_ms_total", (double)r->time_ns / 1e6, 1);
    bench_json_dbl(f, "time_ms", (double)r->time_ns / 1e6 / (double)r->iters, 1);
    bench_json_dbl(f, "GBps", pf_row_gbps(r), 1);
    bench_json_dbl(f, "lat_us_avg", (double)l.avg_ns / 1e3, 1);
    bench_json_dbl(f, "lat_us_p50", (double)l.p50_ns / 1e3, 1);
    bench_json_dbl(f, "lat_us_p99", (double)l.p99_ns / 1e3, 1);
    bench_json_dbl(f, "cpu_s_per_GB", pf_row_cpu_per_gb(r), 1);
    fprintf(f, "\"verified\": %s,\n     ", pf_row_verified(r) ? "true" : "false");
    pf_json_side(f, "server", &r->srv);
    fprintf(f, ",\n     ");
    pf_json_side(f, "client", &r->cli);
}

/* The side of this process whose engine's NICs a row is counted on: its
 * own side between hosts, the server's (receiving by default) in loopback. */
static int pf_local_side(const pf_main_t *m)
{
    return m->mode == BENCH_MODE_CLIENT ? 1 : 0;
}

static void pf_json_nics(FILE *f, const tpx_engine_info_t *in)
{
    fputc('[', f);
    for (int i = 0; i < in->nnics && i < TPX_INFO_MAX_NICS; i++) {
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        bench_json_str(f, in->nic[i]);
        fprintf(f, ", \"speed_mbps\": %d}", in->nic_speed_mbps[i]);
    }
    fputc(']', f);
}

/* "engines": what every engine of this process settled on (tpx_engine_info). */
static void pf_json_engines(FILE *f, const pf_main_t *m)
{
    int n = 0;
    fputc('[', f);
    for (int lane = 0; lane < PF_MAX_LANES; lane++)
        for (int side = 0; side < 2; side++) {
            const tpx_engine_info_t *in = &m->info[side][lane];
            if (!m->have_info[side][lane])
                continue;
            fprintf(f, "%s\n    {\"side\": \"%s\", \"lane\": %d, \"gpu\": ", n++ ? "," : "",
                    side == 0 ? "server" : "client", lane);
            if (in->gpu >= 0)
                fprintf(f, "%d", in->gpu);
            else
                fputs("null", f);
            fprintf(f, ", \"plugin\": ");
            bench_json_str(f, in->plugin);
            fprintf(f, ", \"abi\": %d, \"channels\": %d, \"chunk\": %zu, \"window\": %d, "
                       "\"port\": %d, \"nics\": ",
                    in->abi, in->channels, in->chunk_bytes, in->window, in->port);
            pf_json_nics(f, in);
            fputc('}', f);
        }
    fputs(n ? "\n  ]" : "]", f);
}

/* --all-gpus: who lane `lane` is (no braces; a separator follows). */
static void pf_json_lane(FILE *f, const pf_main_t *m, int lane)
{
    int side = pf_local_side(m);
    fprintf(f, "\"lane\": %d, \"gpu\": %d, \"server_gpu\": %d, \"client_gpu\": %d, \"nics\": ",
            lane, m->lane_gpu[side][lane], m->lane_gpu[0][lane], m->lane_gpu[1][lane]);
    if (m->have_info[side][lane])
        pf_json_nics(f, &m->info[side][lane]);
    else
        fputs("[]", f);
    fputs(",\n       ", f);
}

static int pf_write_json(pf_main_t *m)
{
    const pf_params_t *p = &m->p;
    FILE *f = fopen(m->json, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", PF_PROG, m->json, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n  \"tool\": \"%s\", \"version\": ", PF_PROG);
    bench_json_str(f, tpx_version_string());
    fprintf(f, ", \"mode\": \"%s\", \"started\": ", bench_mode_name(m->mode));
    bench_json_str(f, m->started);
    fprintf(f, ", ");
    bench_json_sysinfo(f);
    fprintf(f, ",\n  \"peer\": ");
    bench_json_str(f, m->host);
    fprintf(f, ", \"port\": %d,\n", m->port);
    fprintf(f, "  \"units\": {\"GBps\": \"1e9 bytes per second: timed bytes (every direction) "
               "over the receiver's time from the barrier release to its last completion "
               "(bidir: the slower side's)\", \"time_ms\": \"milliseconds\", \"latency\": "
               "\"microseconds from tpx_send/tpx_recv to the completion seen by tpx_xfer_poll, "
               "on the side that posted\", \"cpu_s_per_GB\": \"user+sys CPU seconds of both "
               "processes per 1e9 bytes\"},\n");
    fprintf(f, "  \"config\": {\"mem\": \"%s\", \"gpu\": {",
            m->mem == PF_MEM_CUDA ? "cuda" : "host");
    for (int i = 0, n = 0; i < 2; i++) {
        if (m->mode == (i == 0 ? BENCH_MODE_CLIENT : BENCH_MODE_SERVER))
            continue; /* the other process's side: not known here */
        fprintf(f, "%s\"%s\": ", n++ ? ", " : "", i == 0 ? "server" : "client");
        if (m->all_gpus) { /* the GPU of each lane */
            for (int lane = 0; lane < m->nlanes; lane++)
                fprintf(f, "%s%d", lane ? ", " : "[", m->lane_gpu[i][lane]);
            fputs(m->nlanes > 0 ? "]" : "[]", f);
        } else if (m->gpu[i] >= 0)
            fprintf(f, "%d", m->gpu[i]);
        else
            fputs("null", f);
    }
    fprintf(f, "}, \"all_gpus\": %s, \"lanes\": %d, \"plugin\": ", m->all_gpus ? "true" : "false",
            m->all_gpus ? m->nlanes : 1);
    bench_json_str(f, pf_plugin_name(m));
    fprintf(f, ", \"sizes\": [");
    for (uint64_t i = 0; i < p->nsizes; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : "", p->sizes[i]);
    fprintf(f, "], ");
    pf_json_count(f, "iters", p->iters, BENCH_AUTO);
    pf_json_count(f, "warmup", p->warmup, BENCH_AUTO);
    pf_json_count(f, "depth", p->depth, 0);
    bench_json_u64(f, "batch", p->batch, 1);
    fprintf(f, "\"direction\": \"%s\", \"verify\": %s, ", pf_dir_name(p->direction),
            p->verify ? "true" : "false");
    bench_json_u64(f, "channels", p->channels, 1);
    bench_json_u64(f, "chunk", p->chunk, 1);
    bench_json_u64(f, "window", p->window, 1);
    fprintf(f, "\"progress\": \"%s\", ", p->progress == PF_PROGRESS_THREAD ? "thread" : "caller");
    bench_json_u64(f, "timeout_s", p->timeout_s, 0);
    fprintf(f, "},\n  \"env\": ");
    bench_json_env(f, NULL);
    fprintf(f, ",\n  \"engines\": ");
    pf_json_engines(f, m);
    fprintf(f, ",\n  \"results\": [");
    const pf_row_t *best = NULL;
    const pf_agg_t *abest = NULL;
    if (m->all_gpus) {
        /* One entry per size: the sum over the lanes, each lane inside. */
        for (size_t a = 0; a < m->naggs; a++) {
            const pf_agg_t *g = &m->aggs[a];
            if (abest == NULL || g->gbps > abest->gbps)
                abest = g;
            fprintf(f, "%s\n    {", a ? "," : "");
            bench_json_u64(f, "size", g->size, 1);
            bench_json_u64(f, "batch", g->batch, 1);
            bench_json_u64(f, "iters", g->iters, 1);
            fprintf(f, "\"direction\": \"%s\", ", pf_dir_name(g->direction));
            bench_json_u64(f, "lanes", g->lanes, 1);
            bench_json_u64(f, "bytes", g->bytes, 1);
            bench_json_dbl(f, "time_ms_total", (double)g->time_ns / 1e6, 1);
            bench_json_dbl(f, "time_ms", (double)g->time_ns / 1e6 / (double)g->iters, 1);
            bench_json_dbl(f, "GBps", g->gbps, 1);
            bench_json_dbl(f, "GBps_min_lane", g->gbps_min, 1);
            bench_json_dbl(f, "lat_us_avg", (double)g->lat_avg_ns / 1e3, 1);
            bench_json_dbl(f, "lat_us_p50", (double)g->lat_p50_ns / 1e3, 1);
            bench_json_dbl(f, "lat_us_p99", (double)g->lat_p99_ns / 1e3, 1);
            bench_json_dbl(f, "cpu_s_per_GB", pf_agg_cpu_per_gb(g), 1);
            fprintf(f, "\"verified\": %s,\n     \"gpus\": [", g->verified ? "true" : "false");
            int n = 0;
            for (int lane = 0; lane < m->nlanes; lane++)
                for (size_t i = 0; i < m->nrows; i++) {
                    const pf_row_t *r = &m->rows[i];
                    if (r->index != g->index || r->lane != (uint64_t)lane)
                        continue;
                    fprintf(f, "%s\n      {", n++ ? "," : "");
                    pf_json_lane(f, m, lane);
                    pf_json_row(f, r);
                    fputc('}', f);
                }
            fputs("]}", f);
        }
    } else {
        for (size_t i = 0; i < m->nrows; i++) {
            const pf_row_t *r = &m->rows[i];
            if (best == NULL || pf_row_gbps(r) > pf_row_gbps(best))
                best = r;
            fprintf(f, "%s\n    {", i ? "," : "");
            pf_json_row(f, r);
            fputc('}', f);
        }
    }
    fprintf(f, "\n  ],\n  \"best\": ");
    if (abest != NULL)
        fprintf(f, "{\"GBps\": %.9g, \"size\": %" PRIu64 ", \"batch\": %" PRIu64
                   ", \"lanes\": %" PRIu64 "}",
                abest->gbps, abest->size, abest->batch, abest->lanes);
    else if (best != NULL)
        fprintf(f, "{\"GBps\": %.9g, \"size\": %" PRIu64 ", \"batch\": %" PRIu64 "}",
                pf_row_gbps(best), best->size, best->batch);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"compare_transport\": ");
    if (m->compare && m->cmp_cmd[0] != '\0') {
        fprintf(f, "{\"command\": ");
        bench_json_str(f, m->cmp_cmd);
        fprintf(f, ", \"results\": [");
        for (size_t i = 0; i < m->ncmp; i++) {
            const pf_cmp_t *c = &m->cmp[i];
            fprintf(f, "%s{", i ? ", " : "");
            bench_json_u64(f, "size", c->size, 1);
            bench_json_dbl(f, "engine_GBps", c->engine_gbps, 1);
            bench_json_dbl(f, "transport_GBps", c->transport_gbps, 1);
            bench_json_dbl(f, "engine_over_transport",
                           c->transport_gbps > 0 ? c->engine_gbps / c->transport_gbps : 0.0, 0);
            fputc('}', f);
        }
        fprintf(f, "]}");
    } else {
        fputs("null", f);
    }
    fprintf(f, ",\n  \"ok\": %s, \"error\": ", m->error[0] ? "false" : "true");
    bench_json_str(f, m->error[0] ? m->error : NULL);
    fputs("\n}\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", PF_PROG, m->json, strerror(errno));
        return -1;
    }
    return 0;
}

/* A worker for one side (and, --all-gpus, one lane) of this process. */
static void pf_worker_setup(pf_main_t *m, pf_worker_t *w, int is_server, int lane, int ctl,
                            int out, int out_rows)
{
    memset(w, 0, sizeof(*w));
    w->p = &m->p;
    w->is_server = is_server;
    w->lane = lane;
    snprintf(w->who, sizeof(w->who), "%s", is_server ? "server" : "client");
    snprintf(w->peer_who, sizeof(w->peer_who), "%s", is_server ? "client" : "server");
    w->side = (bench_side_t){
        .who = w->who,
        .peer = w->peer_who,
        .ctl = ctl,
        .out = out,
        .rec_size = sizeof(pf_rec_t),
        .proto = &pf_proto,
        .progress = out_rows && m->progress && !m->all_gpus,
    };
    w->out_rows = out_rows;
    w->host = m->mode == BENCH_MODE_CLIENT ? m->host : "127.0.0.1";
    w->engine_port = m->mode == BENCH_MODE_LOOPBACK ? TPX_PORT_EPHEMERAL : m->engine_port;
    w->plugin = m->plugin;
    w->cuda = m->mem == PF_MEM_CUDA;
    w->gpu = m->gpu[is_server ? 0 : 1];
    if (m->all_gpus) {
        int side = is_server ? 0 : 1, g = m->lane_gpu[side][lane];
        w->gpu = g;
        snprintf(w->who, sizeof(w->who), "%s/gpu%d", is_server ? "server" : "client", g);
        snprintf(w->peer_who, sizeof(w->peer_who), "%s/gpu%d", is_server ? "client" : "server",
                 m->lane_gpu[!side][lane]);
        /* Between hosts: TPX_PORT_BASE + GPU (or --engine-port + lane). */
        if (m->mode == BENCH_MODE_SERVER)
            w->engine_port = m->engine_port_set ? m->engine_port + lane : TPX_PORT_DEFAULT;
    }
}

static void *pf_lane_main(void *arg)
{
    pf_worker_t *w = arg;
    w->rc = pf_worker(w);
    if (w->rc != 0)
        pf_gang_break(w->gang); /* the other lanes stop at their next phase */
    return NULL;
}

/* --all-gpus, in the child of one side: one thread per lane, each with its
 * engine; the exit status of the side. */
static int pf_run_lanes(pf_main_t *m, int side, int out, int out_rows)
{
    pf_gang_t gang;
    pf_worker_t *ws = calloc((size_t)m->nlanes, sizeof(*ws));
    pthread_t tid[PF_MAX_LANES];
    int started = 0, rc = 0;
    if (ws == NULL || pf_gang_init(&gang, m->nlanes) != 0) {
        fprintf(stderr, "%s: %s: cannot set up %d lanes\n", PF_PROG, side ? "client" : "server",
                m->nlanes);
        free(ws);
        return BENCH_EXIT_FAIL;
    }
    for (int i = 0; i < m->nlanes; i++) {
        pf_worker_setup(m, &ws[i], side == 0, i, m->lane_fd[side][i], out, out_rows);
        ws[i].gang = &gang;
    }
    for (; started < m->nlanes; started++) {
        int e = pthread_create(&tid[started], NULL, pf_lane_main, &ws[started]);
        if (e != 0) {
            bench_fail(&ws[started].side, "cannot start the thread of lane %d: %s", started,
                       strerror(e));
            pf_gang_break(&gang);
            rc = -1;
            break;
        }
    }
    for (int i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
        rc |= ws[i].rc;
    }
    pf_gang_destroy(&gang);
    free(ws);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}

static void pf_close_lane_fds(pf_main_t *m)
{
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < PF_MAX_LANES; i++)
            if (m->lane_fd[side][i] >= 0) {
                close(m->lane_fd[side][i]);
                m->lane_fd[side][i] = -1;
            }
}

/* Fork one side (0: server, 1: client); in the child it never returns. */
static pid_t pf_spawn(void *ctx, int side, int ctl, int out, int out_rows, const int *close_fds,
                      int nclose)
{
    pf_main_t *m = ctx;
    int is_server = side == 0;
    pid_t pid = bench_fork(close_fds, nclose);
    if (pid != 0) {
        /* Loopback --all-gpus: once both sides have their lanes' ends, the
         * parent lets go of them, so a side that dies is seen as gone. */
        if (m->all_gpus && m->mode == BENCH_MODE_LOOPBACK && (side == 1 || pid < 0))
            pf_close_lane_fds(m);
        return pid;
    }
    if (m->all_gpus) {
        /* This side's lane streams only; `ctl` is lane 0's stream between
         * hosts, unused in loopback mode. */
        int keep_ctl = 0;
        for (int i = 0; i < PF_MAX_LANES; i++) {
            if (m->lane_fd[!side][i] >= 0)
                close(m->lane_fd[!side][i]);
            keep_ctl |= m->lane_fd[side][i] == ctl;
        }
        if (!keep_ctl)
            close(ctl);
        _exit(pf_run_lanes(m, side, out, out_rows));
    }
    pf_worker_t w;
    pf_worker_setup(m, &w, is_server, 0, ctl, out, out_rows);
    _exit(pf_worker(&w) == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL);
}

static void pf_on_row(void *ctx, const void *rec)
{
    pf_main_t *m = ctx;
    const pf_rec_t *r = rec;
    if (r->type == PF_REC_INFO) {
        if (r->side < 2 && r->lane < PF_MAX_LANES) {
            m->info[r->side][r->lane] = r->info;
            m->have_info[r->side][r->lane] = 1;
            pf_print_info(m, (int)r->side, (int)r->lane);
        }
        return;
    }
    if (r->type != PF_REC_ROW)
        return;
    pf_row_t *nr = realloc(m->rows, (m->nrows + 1) * sizeof(*nr));
    if (nr == NULL) {
        pf_set_error(m, "out of memory");
        return;
    }
    m->rows = nr;
    m->rows[m->nrows++] = r->row;
    if (!m->all_gpus) {
        pf_print_row(m, &r->row);
        return;
    }
    /* --all-gpus: once every lane reported this size, its rows in lane
     * order and their sum (the lanes meet before every phase, so one size
     * is complete before the next one starts). */
    uint64_t idx = r->row.index;
    int have = 0;
    for (size_t i = 0; i < m->nrows; i++)
        have += m->rows[i].index == idx;
    if (have != m->nlanes || m->naggs >= PF_MAX_SIZES)
        return;
    for (int lane = 0; lane < m->nlanes; lane++)
        for (size_t i = 0; i < m->nrows; i++)
            if (m->rows[i].index == idx && m->rows[i].lane == (uint64_t)lane)
                pf_print_row(m, &m->rows[i]);
    pf_agg_make(m, idx, &m->aggs[m->naggs]);
    pf_print_agg(m, &m->aggs[m->naggs]);
    m->naggs++;
}

/* Fork the side(s) and collect their rows. `ctl`: the control socket
 * (server/client; --all-gpus: lane 0's, the others are in m->lane_fd). */
static int pf_run(pf_main_t *m, int ctl)
{
    static const char *const names[2] = {"server", "client"};
    if (m->all_gpus && m->mode == BENCH_MODE_LOOPBACK) {
        /* One control stream per lane, as between hosts. */
        for (int i = 0; i < m->nlanes; i++) {
            int sv[2];
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
                pf_set_error(m, "socketpair: %s", strerror(errno));
                pf_close_lane_fds(m);
                return -1;
            }
            m->lane_fd[0][i] = sv[0];
            m->lane_fd[1][i] = sv[1];
        }
    }
    int rc = bench_run_sides(m->mode, ctl, pf_spawn, m, names, sizeof(pf_rec_t), pf_on_row,
                             m->p.timeout_s + 15, m->error, sizeof(m->error));
    if (m->all_gpus && m->mode == BENCH_MODE_LOOPBACK)
        pf_close_lane_fds(m); /* if a fork failed before the parent let go of them */
    uint64_t want = m->p.nsizes * (m->all_gpus ? (uint64_t)m->nlanes : 1);
    if (rc == 0 && m->nrows != want) {
        pf_set_error(m, "expected %" PRIu64 " result rows, got %zu", want, m->nrows);
        rc = -1;
    }
    return rc != 0 || m->error[0] != '\0' ? -1 : 0;
}

/* --all-gpus, lanes 1..: the client of lane 0 comes back to --port + lane
 * at once; one that does not (it gave up: not --all-gpus, too few GPUs)
 * must not leave this server waiting forever. */
static int pf_accept_lane(pf_main_t *m, int lane, const unsigned char *wire, uint32_t len,
                          char *err, size_t errlen)
{
    int port = m->port + lane, lfd = bench_tcp_listen(port, err, errlen);
    if (lfd < 0)
        return -1;
    struct timeval tv = {.tv_sec = 30};
    setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int cfd = bench_accept_peer(&pf_proto, lfd, PF_MSG_HELLO, port,
                                "not a tpx-perf client of this version", err, errlen);
    close(lfd);
    if (cfd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        snprintf(err, errlen,
                 "the client did not open lane %d's control connection (port %d) within 30 s "
                 "(see its error: is it running --all-gpus, with enough GPUs?)",
                 lane, port);
        return -1;
    }
    if (cfd >= 0 && bench_msg_send(&pf_proto, cfd, PF_MSG_PARAMS, 0, wire, len) != 0) {
        snprintf(err, errlen, "cannot send the parameters to the client: %s", strerror(errno));
        close(cfd);
        return -1;
    }
    return cfd;
}

static int pf_run_server(pf_main_t *m)
{
    char err[512] = "";
    unsigned char wire[sizeof(pf_params_t)];
    bench_words_out(wire, &m->p, sizeof(pf_params_t) / 8);
    /* --all-gpus: lane i's client comes to --port + i, in lane order. */
    int n = m->all_gpus ? m->nlanes : 1, cfd = -1;
    for (int lane = 0; lane < n; lane++) {
        int fd = lane == 0 ? bench_server_start(&pf_proto, m->port, PF_MSG_HELLO, PF_MSG_PARAMS,
                                                wire, sizeof(wire),
                                                "not a tpx-perf client of this version", err,
                                                sizeof(err))
                           : pf_accept_lane(m, lane, wire, sizeof(wire), err, sizeof(err));
        if (fd < 0) {
            pf_set_error(m, "%s%s", m->all_gpus ? "lane control connection: " : "", err);
            pf_close_lane_fds(m);
            return -1;
        }
        if (lane == 0)
            cfd = fd;
        if (m->all_gpus)
            m->lane_fd[0][lane] = fd;
    }
    pf_print_header(m);
    int rc = pf_run(m, cfd);
    if (m->all_gpus)
        pf_close_lane_fds(m); /* cfd among them */
    else
        close(cfd);
    return rc;
}

/* Parameters from a server: never trusted further than the command line would be. */
static int pf_params_ok(const pf_params_t *p)
{
    if (p->nsizes == 0 || p->nsizes > PF_MAX_SIZES || p->batch == 0 || p->batch > PF_MAX_BATCH ||
        p->depth > PF_MAX_DEPTH || p->direction > PF_DIR_BIDIR || p->timeout_s == 0 ||
        p->timeout_s > 86400 || p->channels == 0 || p->channels > 32 || p->chunk < 4096 ||
        p->chunk > (4u << 20) || p->window == 0 || p->window > 32 ||
        p->progress > PF_PROGRESS_CALLER || p->verify > 1 || p->lanes > PF_MAX_LANES ||
        p->mem > PF_MEM_CUDA)
        return 0;
    for (uint64_t i = 0; i < p->nsizes; i++)
        if (p->sizes[i] > PF_MAX_SIZE)
            return 0;
    return 1;
}

static int pf_probe_gpus(char *why, size_t len);

static int pf_run_client(pf_main_t *m)
{
    char err[512] = "";
    unsigned char wire[sizeof(pf_params_t)], again[sizeof(pf_params_t)];
    static const char hint[] = " (is `" PF_PROG " server` running there, on this --port?)";
    int fd = bench_client_start(&pf_proto, m->host, m->port, PF_MSG_HELLO, PF_MSG_PARAMS, wire,
                                sizeof(wire), hint, err, sizeof(err));
    if (fd < 0) {
        pf_set_error(m, "%s", err);
        return -1;
    }
    pf_params_t p;
    bench_words_in(&p, wire, sizeof(pf_params_t) / 8);
    if (!pf_params_ok(&p)) {
        pf_set_error(m, "the server sent parameters out of range");
        close(fd);
        return -1;
    }
    if ((p.lanes > 0) != (m->all_gpus != 0) || p.lanes > (uint64_t)m->nlanes) {
        if (p.lanes > 0 && !m->all_gpus)
            pf_set_error(m, "the server runs --all-gpus (%" PRIu64 " GPUs): give --all-gpus here "
                            "too",
                         p.lanes);
        else if (p.lanes == 0)
            pf_set_error(m, "this side has --all-gpus, the server runs one engine: give "
                            "--all-gpus to both or to neither");
        else
            pf_set_error(m, "the server runs --all-gpus with %" PRIu64 " GPUs, this host has %d: "
                            "GPU i pairs with GPU i, so this host needs at least as many",
                         p.lanes, m->nlanes);
        close(fd);
        return -1;
    }
    if ((int)p.mem != m->mem && !m->all_gpus) {
        /* The patterns of GPU buffers are written before a phase, not per
         * iteration (pf_gpu_stage): both sides must use the same kind. */
        if (m->mem_set && p.verify) {
            pf_set_error(m, "the server uses %s memory, this client --mem %s: with --verify both "
                            "sides need the same kind (drop --mem here: a client follows the "
                            "server), or use --no-verify",
                         p.mem == PF_MEM_CUDA ? "cuda" : "host",
                         m->mem == PF_MEM_CUDA ? "cuda" : "host");
            close(fd);
            return -1;
        }
        if (!m->mem_set) {
            char why[160];
            if (p.mem == PF_MEM_CUDA && m->gpu[1] < 0)
                m->gpu[1] = 0;
            if (p.mem == PF_MEM_CUDA && pf_probe_gpus(why, sizeof(why)) <= m->gpu[1]) {
                pf_set_error(m, "the server uses cuda memory and this client follows it, but "
                                "there is no CUDA GPU %d here (%s): give --mem host (and "
                                "--no-verify on the server)",
                             m->gpu[1], why);
                close(fd);
                return -1;
            }
            m->mem = (int)p.mem;
        }
    }
    m->p = p;
    if (m->all_gpus) {
        m->nlanes = (int)p.lanes;
        m->lane_fd[1][0] = fd;
        for (int lane = 1; lane < m->nlanes; lane++) {
            int lfd = bench_client_start(&pf_proto, m->host, m->port + lane, PF_MSG_HELLO,
                                         PF_MSG_PARAMS, again, sizeof(again), hint, err,
                                         sizeof(err));
            if (lfd < 0 || memcmp(again, wire, sizeof(wire)) != 0) {
                pf_set_error(m, "lane %d control connection (port %d): %s", lane, m->port + lane,
                             lfd < 0 ? err : "the server sent other parameters");
                if (lfd >= 0)
                    close(lfd);
                pf_close_lane_fds(m);
                return -1;
            }
            m->lane_fd[1][lane] = lfd;
        }
    }
    if (m->user_set_run_opts && !bench_quiet)
        fprintf(stderr, "%s: client: run options come from the server; yours are ignored\n",
                PF_PROG);
    pf_print_header(m);
    int rc = pf_run(m, fd);
    if (m->all_gpus)
        pf_close_lane_fds(m);
    else
        close(fd);
    return rc;
}

/* ---- --compare-transport: tpx-netbench on the same sizes ---------------------------- */

/* The "GBps" of each entry of tpx-netbench's "results", by "size". */
static int pf_parse_netbench(const char *path, pf_main_t *m)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char *text = NULL;
    size_t cap = 0;
    ssize_t len = getdelim(&text, &cap, '\0', f);
    fclose(f);
    if (len <= 0) {
        free(text);
        return -1;
    }
    const char *s = strstr(text, "\"results\": [");
    const char *end = s != NULL ? strstr(s, "\n  ]") : NULL;
    for (const char *o = s;
         o != NULL && end != NULL && (o = strstr(o, "\n    {")) != NULL && o < end; o++) {
        const char *sz = strstr(o, "\"size\": "), *gb = strstr(o, "\"GBps\": ");
        if (sz == NULL || gb == NULL || gb > end)
            break;
        uint64_t size = strtoull(sz + 8, NULL, 10);
        double gbps = strtod(gb + 8, NULL);
        for (size_t i = 0; i < m->ncmp; i++)
            if (m->cmp[i].size == size)
                m->cmp[i].transport_gbps = gbps;
    }
    free(text);
    return 0;
}

static int pf_compare_transport(pf_main_t *m)
{
    const pf_params_t *p = &m->p;
    char nb[PATH_MAX], tmp[] = "/tmp/tpx-perf-netbench-XXXXXX.json", sizes[1024] = "";
    char iters[32], warmup[32], timeout[32];
    int fd = mkstemps(tmp, 5);
    if (fd < 0) {
        pf_set_error(m, "--compare-transport: cannot create a temporary file: %s", strerror(errno));
        return -1;
    }
    close(fd);
    bench_sibling_path(m->argv0, "tpx-netbench", nb, sizeof(nb));
    for (uint64_t i = 0; i < p->nsizes; i++) {
        size_t l = strlen(sizes);
        snprintf(sizes + l, sizeof(sizes) - l, "%s%" PRIu64, i ? "," : "", p->sizes[i]);
    }
    snprintf(iters, sizeof(iters), "%" PRIu64, p->iters);
    snprintf(warmup, sizeof(warmup), "%" PRIu64, p->warmup);
    snprintf(timeout, sizeof(timeout), "%" PRIu64, p->timeout_s);
    /* Same sizes, iteration counts, verification and timeout; the rest is
     * the transport's own default (one isend per message). */
    const char *argv[16] = {
        nb,      "--loopback", "--sizes", sizes, "--timeout",
        timeout, "--quiet",    "--json",  tmp,   p->verify ? "--verify" : "--no-verify"};
    int a = 10;
    if (p->iters != BENCH_AUTO) {
        argv[a++] = "--iters";
        argv[a++] = iters;
    }
    if (p->warmup != BENCH_AUTO) {
        argv[a++] = "--warmup";
        argv[a++] = warmup;
    }
    argv[a] = NULL;
    m->cmp_cmd[0] = '\0';
    for (int i = 0; i < a; i++) {
        size_t l = strlen(m->cmp_cmd);
        snprintf(m->cmp_cmd + l, sizeof(m->cmp_cmd) - l, "%s%s", i ? " " : "", argv[i]);
    }
    if (!bench_quiet) {
        printf("# transport alone: %s\n", m->cmp_cmd);
        fflush(stdout);
    }
    int st = bench_run_tool(argv);
    if (st != 0) {
        pf_set_error(m, "--compare-transport: %s %s (see above)", nb,
                     st < 0 ? "could not be run" : "failed");
        unlink(tmp);
        return -1;
    }
    m->ncmp = 0;
    for (size_t i = 0; i < m->nrows && i < PF_MAX_SIZES; i++)
        m->cmp[m->ncmp++] =
            (pf_cmp_t){.size = m->rows[i].size, .engine_gbps = pf_row_gbps(&m->rows[i])};
    int rc = pf_parse_netbench(tmp, m);
    unlink(tmp);
    for (size_t i = 0; rc == 0 && i < m->ncmp; i++)
        if (m->cmp[i].transport_gbps <= 0)
            rc = -1;
    if (rc != 0) {
        pf_set_error(m, "--compare-transport: no result for every size in %s's JSON", nb);
        return -1;
    }
    for (size_t i = 0; i < m->ncmp; i++) {
        char hb[32];
        printf("# engine/transport = %.3f at %s (engine %.3f GB/s, transport %.3f GB/s)\n",
               m->cmp[i].engine_gbps / m->cmp[i].transport_gbps,
               bench_human(m->cmp[i].size, hb, sizeof(hb)), m->cmp[i].engine_gbps,
               m->cmp[i].transport_gbps);
    }
    fflush(stdout);
    return 0;
}

/* ---- command line ---------------------------------------------------------------- */

/* --plot: the engine's rows, and the transport alone after --compare-transport. */
static int pf_plot(const pf_main_t *m)
{
    const pf_params_t *p = &m->p;
    size_t n = m->nrows + m->ncmp + m->naggs;
    bench_point_t *pts = calloc(n, sizeof(*pts));
    if (pts == NULL)
        return -1;
    char hc[32], mem[512], title[768];
    pf_mem_text(m, mem, sizeof(mem));
    snprintf(title, sizeof(title),
             "tpx-perf %s: %s, memory %s, %" PRIu64 " channels, chunk %s, window %" PRIu64,
             bench_mode_name(m->mode), pf_plugin_name(m), mem, p->channels,
             bench_human(p->chunk, hc, sizeof(hc)), p->window);
    for (size_t i = 0; i < m->nrows; i++) {
        const pf_row_t *r = &m->rows[i];
        char g[32];
        if (m->all_gpus) {
            pf_lane_text(m, r->lane, g, sizeof(g));
            snprintf(pts[i].label, sizeof(pts[i].label), "GPU %s, %s, batch %" PRIu64, g,
                     pf_dir_name(r->direction), r->batch);
        } else {
            snprintf(pts[i].label, sizeof(pts[i].label), "engine, %s, batch %" PRIu64,
                     pf_dir_name(r->direction), r->batch);
        }
        pts[i].size = r->size;
        pts[i].gbps = pf_row_gbps(r);
    }
    for (size_t i = 0; i < m->ncmp; i++) {
        bench_point_t *pt = &pts[m->nrows + i];
        snprintf(pt->label, sizeof(pt->label), "transport alone (tpx-netbench)");
        pt->size = m->cmp[i].size;
        pt->gbps = m->cmp[i].transport_gbps;
    }
    for (size_t i = 0; i < m->naggs; i++) { /* --all-gpus: the sum over the lanes */
        bench_point_t *pt = &pts[m->nrows + m->ncmp + i];
        snprintf(pt->label, sizeof(pt->label), "sum of %" PRIu64 " GPU lanes", m->aggs[i].lanes);
        pt->size = m->aggs[i].size;
        pt->gbps = m->aggs[i].gbps;
    }
    int rc = bench_plot(m->plot, title, pts, n);
    free(pts);
    if (rc == 0 && !bench_quiet)
        printf("# plot: %s (gnuplot script %s.gp)\n", m->plot, m->plot);
    return rc;
}

/* --gpu N (returns 1, out[0] = N) or A,B (returns 2); 0: malformed. */
static int pf_parse_gpus(const char *arg, int out[2])
{
    char a[32];
    const char *comma = strchr(arg, ',');
    uint64_t x, y;
    if (comma == NULL) {
        if (bench_parse_uint(arg, 0, PF_MAX_GPU, &x) != 0)
            return 0;
        out[0] = (int)x;
        return 1;
    }
    size_t l = (size_t)(comma - arg);
    if (l >= sizeof(a))
        return 0;
    memcpy(a, arg, l);
    a[l] = '\0';
    if (bench_parse_uint(a, 0, PF_MAX_GPU, &x) != 0 ||
        bench_parse_uint(comma + 1, 0, PF_MAX_GPU, &y) != 0)
        return 0;
    out[0] = (int)x;
    out[1] = (int)y;
    return 2;
}

/*
 * The number of CUDA devices, counted in a child process: CUDA must not be
 * initialised in this one, which forks the sides later (the way
 * tests/gpu/test_engine_gpu.c counts them). 0 or less: none; `why` says why.
 */
static int pf_probe_gpus(char *why, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = bench_fork(NULL, 0);
    if (pid == 0) {
        close(fds[0]);
        int32_t res[2] = {0, 0};
        int n = 0;
        res[0] = (int32_t)tpx_gpu_count(&n);
        res[1] = n;
        _exit(write(fds[1], res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 1);
    }
    close(fds[1]);
    if (pid < 0) {
        snprintf(why, len, "fork: %s", strerror(errno));
        close(fds[0]);
        return -1;
    }
    int32_t res[2];
    ssize_t got;
    do
        got = read(fds[0], res, sizeof(res));
    while (got < 0 && errno == EINTR);
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got != (ssize_t)sizeof(res)) {
        snprintf(why, len, "the process counting GPUs died");
        return -1;
    }
    if (res[0] != TPX_OK || res[1] <= 0) {
        snprintf(why, len, "tpx_gpu_count: %s",
                 res[0] != TPX_OK ? tpx_strerror((tpx_status_t)res[0]) : "0 devices");
        return 0;
    }
    return res[1];
}

static void pf_usage(FILE *f)
{
    fprintf(f,
            "NAME\n"
            "    %1$s - throughput and latency of the tpx engine (tpx/tpx.h)\n"
            "\n"
            "SYNOPSIS\n"
            "    %1$s [--loopback] [--mem host|cuda] [--gpu A,B | --all-gpus] [OPTIONS]\n"
            "    %1$s server [--port P] [--engine-port Q] [--mem host|cuda]\n"
            "           [--gpu N | --all-gpus] [OPTIONS]\n"
            "    %1$s client HOST [--port P] [--plugin P] [--mem host|cuda]\n"
            "           [--gpu N | --all-gpus] [--json FILE] [--quiet]\n"
            "    %1$s --print-config | --help | --version\n"
            "\n"
            "DESCRIPTION\n"
            "    Moves memory between two tpx engines with tpx_send()/tpx_recv() through\n"
            "    the public API only, and prints bandwidth and latency in a table like\n"
            "    nccl-tests. The \"server\" side's engine listens, the \"client\" side's\n"
            "    engine connects (tpx_peer_connect); each side is its own process.\n"
            "\n"
            "    For each size: --warmup untimed iterations, then a barrier (the receiving\n"
            "    side posts its tpx_recv()s, then releases the sender over the control\n"
            "    connection), then --iters timed iterations. One iteration is --batch\n"
            "    transfers of SIZE bytes each (batch 1: one transfer). Up to `depth`\n"
            "    iterations are in flight, each in its own registered buffers.\n"
            "\n"
            "    Columns: size (bytes per transfer), count (transfers per iteration),\n"
            "    iters, time(ms) (per iteration), GB/s (1e9 bytes per second: the timed\n"
            "    bytes over the receiver's time from the barrier release to its last\n"
            "    completion; bidir: both directions' bytes over the slower side's time),\n"
            "    lat-avg/p50/p99(us) (one transfer, from tpx_send() to the completion that\n"
            "    tpx_xfer_poll() reports on the sending side; bidir: the slower side),\n"
            "    cpu(s/GB) (user+sys CPU time of both processes, all threads, per 1e9\n"
            "    bytes), verified. A final line names the best row. --json has the\n"
            "    receivers' latencies, each side's time and CPU, the checksums, and what\n"
            "    every engine of this process settled on (tpx_engine_info(): plugin, ABI,\n"
            "    channels, chunk, window, port, NIC names and speeds) too; the same engine\n"
            "    lines (\"# engine ...\") are printed before the table.\n"
            "\n"
            "ALL GPUS IN ONE PROCESS (--all-gpus)\n"
            "    Every local GPU (up to %9$d) in one process per side, one engine per GPU\n"
            "    (params.gpu = that GPU, so each uses the NICs of its GPU), each engine\n"
            "    with its own progress thread pinned to a CPU of its NIC's NUMA node\n"
            "    (params.progress_cpu = TPX_CPU_NUMA_LOCAL) and driven by its own thread:\n"
            "    the shape of one inference server per host. Device memory on each GPU\n"
            "    (it implies --mem cuda). A \"lane\" is one pair of engines:\n"
            "      server/client   lane i is this host's GPU i <-> the other host's GPU i;\n"
            "                      lane i's control connection is --port + i, its\n"
            "                      server engine listens on TPX_PORT_BASE + i (the\n"
            "                      engines' TPX_PORT_DEFAULT; --engine-port Q: Q + i).\n"
            "                      Both hosts need --all-gpus; the server decides the\n"
            "                      number of lanes (its GPU count) and the client needs at\n"
            "                      least as many GPUs\n"
            "      --loopback      both sides on this host, all lanes at once: client GPU\n"
            "                      i sends to server GPU (i+1) %% n (recv: the other way;\n"
            "                      one GPU: GPU 0 -> GPU 0)\n"
            "    The lanes of a process start every phase together (a barrier), so their\n"
            "    timed phases overlap. The table gets a gpu column (the lane's GPU; in\n"
            "    loopback client -> server) and, after the rows of one size, a \"sum\"\n"
            "    row: GB/s summed over the lanes, time(ms) of the slowest lane, lat the\n"
            "    mean of the lanes' averages and the worst p50/p99, cpu(s/GB) of the whole\n"
            "    process(es) (per-lane CPU is not separable: \"-\"). In --json, each entry\n"
            "    of \"results\" is that sum with the lanes in \"gpus\" (GPU, NICs, and the\n"
            "    full row each). --verify works as with --mem cuda (host copies outside\n"
            "    the timed loop). Without a CUDA GPU: an error, exit 1 (unless --mem host\n"
            "    --lanes N: host memory, no GPU needed).\n"
            "\n"
            "ROLES\n"
            "    --loopback\n"
            "        Both sides on this host (the default when no role is given): the\n"
            "        server's engine takes an ephemeral port and tells the client over a\n"
            "        socketpair; the client connects to 127.0.0.1. TPX_SOCKET_IFNAME\n"
            "        defaults to \"lo\" in this mode.\n"
            "    server\n"
            "        Waits on the control --port for one client, sends it the run\n"
            "        parameters (this side's options decide them, engine settings\n"
            "        included) and its engine's port, runs, prints, exits.\n"
            "    client HOST\n"
            "        Connects to HOST's control --port (retrying for 10 s), takes the run\n"
            "        parameters from the server, connects its engine, prints the same table.\n"
            "\n"
            "OPTIONS\n"
            "    --port P          control TCP port of server/client (default %2$d;\n"
            "                      --all-gpus: P .. P+n-1, one per lane)\n"
            "    --engine-port Q   server: the engine's bootstrap port (default: any free\n"
            "                      port, sent to the client; set it when a firewall is on;\n"
            "                      --all-gpus: Q + lane, default TPX_PORT_BASE + GPU)\n"
            "    --mem host|cuda   where this process's buffers live (default host). cuda:\n"
            "                      device memory from tpx_gpu_alloc(), registered as\n"
            "                      TPX_MEM_CUDA, on the GPU of --gpu. Without a CUDA GPU\n"
            "                      --mem cuda fails at once (exit 1). In server/client mode\n"
            "                      each side chooses its own --mem and --gpu\n"
            "    --gpu N           this process's GPU: the engine's params.gpu (NIC choice)\n"
            "                      and, with --mem cuda, where the buffers live (default:\n"
            "                      0 with --mem cuda, none with --mem host)\n"
            "    --gpu A,B         --loopback: the server side on GPU A, the client side on\n"
            "                      GPU B (default with --mem cuda: 0,1 when the host has two\n"
            "                      or more GPUs, else 0,0); --gpu N is N,N\n"
            "    --all-gpus        one engine per local GPU, all in this process (see ALL\n"
            "                      GPUS IN ONE PROCESS); implies --mem cuda; not with --gpu\n"
            "                      or --compare-transport\n"
            "    --lanes N         --all-gpus: N lanes (GPUs 0..N-1) instead of every GPU.\n"
            "                      With --mem host no GPU is needed: N engines of host\n"
            "                      memory whose params.gpu is the lane's GPU index (NIC\n"
            "                      choice and port only) -- the lane machinery on any host\n"
            "    --size N          one transfer size (default 256M). K, M, G = 2^10, 2^20, 2^30\n"
            "    --sizes A:B       sizes from A to B, doubling (e.g. 4K:1G); or a comma list of\n"
            "                      sizes and ranges (e.g. 16K,1M:64M). At most %3$d sizes\n"
            "    --batch N         transfers per iteration (default 1), e.g. 1000 with --size\n"
            "                      16K: the KV-cache shape. At most %4$d\n"
            "    --iters N         timed iterations per size (default: 5, or more so that each\n"
            "                      row moves at least 1 GiB, up to %5$d)\n"
            "    --warmup N        untimed iterations before them (default: iters/10, >= 1)\n"
            "    --depth N         iterations in flight, each in its own buffers (default:\n"
            "                      enough to fill channels x window x chunk, plus one; at\n"
            "                      most 1 GiB of buffers per direction and side, %6$d\n"
            "                      iterations and %7$d transfers)\n"
            "    --direction D     send: client -> server (default); recv: server -> client;\n"
            "                      bidir: both at once over the same peer\n"
            "    --chunk BYTES     the engines' chunk size (params.chunk_bytes, 4K..4M;\n"
            "                      default TPX_CHUNK_BYTES)\n"
            "    --channels N      channels per peer (params.channels, 1..32; default\n"
            "                      TPX_CHANNELS)\n"
            "    --window W        requests in flight per plugin comm (params.window, 1..32;\n"
            "                      default TPX_WINDOW)\n"
            "    --plugin P        ncclNet plugin of this side: builtin, a name (loads\n"
            "                      libnccl-net-P.so) or a path (default TPX_NET_PLUGIN)\n"
            "    --progress M      thread: the engine's progress thread drives transfers\n"
            "                      (default); caller: no thread, this tool calls\n"
            "                      tpx_progress() in its loop\n"
            "    --verify          fill every transfer with a pattern seeded by its\n"
            "                      direction, iteration and index (sender) and check every\n"
            "                      byte (receiver); the fill and the check are part of the\n"
            "                      timed loop. --mem cuda: outside it, through host copies\n"
            "                      (tpx_gpu_copy): before each phase the sender fills each\n"
            "                      buffer slot it uses and the receiver clears its own;\n"
            "                      after it the receiver checks every byte of each slot,\n"
            "                      i.e. of the last transfer through it. Default: on in\n"
            "                      loopback mode, off otherwise\n"
            "    --no-verify       do not fill or check: pure engine throughput\n"
            "    --timeout SEC     no progress for this long is an error; also each\n"
            "                      transfer's deadline (params.timeout_ms; default %8$d)\n"
            "    --compare-transport\n"
            "                      loopback, one direction: afterwards run tpx-netbench (the\n"
            "                      transport alone, from the same folder as this binary) on\n"
            "                      the same sizes and print engine/transport per size (host\n"
            "                      memory only)\n"
            "    --json FILE       also write every number and the configuration to FILE\n"
            "    --plot FILE.png   also plot GB/s against size (log2 axis) with gnuplot\n"
            "                      (Debian: gnuplot-nox); the script is kept as FILE.png.gp.\n"
            "                      With --compare-transport the transport alone is a second\n"
            "                      line. An error before the run if gnuplot is missing\n"
            "    -q, --quiet       print only the final lines (best, engine/transport) and\n"
            "                      errors\n"
            "    --print-config    print every TPX_* setting with its value and meaning\n"
            "    -V, --version     print the version\n"
            "    -h, --help        print this text\n"
            "\n"
            "ENVIRONMENT\n"
            "    The engine's and the built-in transport's TPX_* variables apply\n"
            "    (TPX_SOCKET_IFNAME, TPX_NET_PLUGIN, TPX_CHANNELS, TPX_CHUNK_BYTES,\n"
            "    TPX_WINDOW, TPX_NSOCKS, TPX_AUTH_TOKEN, TPX_LOG_LEVEL, ...);\n"
            "    `%1$s --print-config` lists them all with defaults and meanings.\n"
            "    Options given here override them for both engines.\n"
            "\n"
            "EXAMPLES\n"
            "    %1$s\n"
            "        loopback, 256 MiB transfers, verified: the quick demo\n"
            "    %1$s --size 256M --compare-transport\n"
            "        the engine next to the transport alone, same sizes, same run\n"
            "    %1$s --size 16K --batch 1000 --direction bidir\n"
            "        many small transfers both ways: the KV-cache shape\n"
            "    %1$s --sizes 4K:1G --no-verify --json sweep.json\n"
            "        a sweep, pure throughput, with a JSON record\n"
            "    %1$s --mem cuda --gpu 0,1 --sizes 1M:1G\n"
            "        GPU 0 -> GPU 1 through the engine on this host\n"
            "    %1$s --all-gpus --sizes 1M:256M\n"
            "        every GPU of this host at once, GPU i -> GPU i+1, per-GPU rows and sum\n"
            "    %1$s server --all-gpus   (and on the other host)\n"
            "    %1$s client 10.0.0.2 --all-gpus\n"
            "        every GPU i <-> GPU i between two machines, one process each\n"
            "    %1$s server --mem cuda --gpu 3   (and on the other host)\n"
            "    %1$s client 10.0.0.2 --mem cuda --gpu 3\n"
            "        GPU memory between two machines\n"
            "    TPX_SOCKET_IFNAME=eth1 %1$s server --sizes 1M:256M\n"
            "    TPX_SOCKET_IFNAME=eth1 %1$s client 10.0.0.2\n"
            "        two machines\n"
            "\n"
            "EXIT STATUS\n"
            "    0  every size ran and (with --verify) every byte was right\n"
            "    1  an engine call returned an error (printed with tpx_strerror()), data\n"
            "       did not match, a peer went away or stopped making progress, the\n"
            "       control connection or --compare-transport failed, or --mem cuda or\n"
            "       --all-gpus found no CUDA GPU (or the two hosts' --all-gpus disagree)\n"
            "    2  bad command line\n",
            PF_PROG, PF_DEFAULT_PORT, PF_MAX_SIZES, PF_MAX_BATCH, BENCH_AUTO_MAX_ITERS,
            PF_MAX_DEPTH, PF_MAX_INFLIGHT, PF_DEFAULT_TIMEOUT_S, PF_MAX_LANES);
    fprintf(f, "\nONE-SIDED MODE\n    %s --op read|write [--block 16K,128K,2M] [--blocks N] "
               "[loopback | server | client HOST]\n%s"
               "    e.g. %s --op read --block 16K,128K,2M --blocks 1000\n",
            PF_PROG, perf_rma_usage, PF_PROG);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--op") == 0)
            return perf_rma_main(argc, argv); /* the one-sided mode (perf_rma.c) */
    enum {
        O_LOOPBACK = 256,
        O_PORT,
        O_ENGINE_PORT,
        O_MEM,
        O_GPU,
        O_SIZE,
        O_SIZES,
        O_BATCH,
        O_ITERS,
        O_WARMUP,
        O_DEPTH,
        O_DIRECTION,
        O_CHUNK,
        O_CHANNELS,
        O_WINDOW,
        O_PLUGIN,
        O_PROGRESS,
        O_VERIFY,
        O_NOVERIFY,
        O_TIMEOUT,
        O_COMPARE,
        O_JSON,
        O_PLOT,
        O_PRINTCFG,
        O_ALL_GPUS,
        O_LANES,
    };
    static const struct option opts[] = {
        {"loopback", no_argument, NULL, O_LOOPBACK},
        {"port", required_argument, NULL, O_PORT},
        {"engine-port", required_argument, NULL, O_ENGINE_PORT},
        {"mem", required_argument, NULL, O_MEM},
        {"gpu", required_argument, NULL, O_GPU},
        {"all-gpus", no_argument, NULL, O_ALL_GPUS},
        {"lanes", required_argument, NULL, O_LANES},
        {"size", required_argument, NULL, O_SIZE},
        {"sizes", required_argument, NULL, O_SIZES},
        {"batch", required_argument, NULL, O_BATCH},
        {"iters", required_argument, NULL, O_ITERS},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"depth", required_argument, NULL, O_DEPTH},
        {"direction", required_argument, NULL, O_DIRECTION},
        {"chunk", required_argument, NULL, O_CHUNK},
        {"channels", required_argument, NULL, O_CHANNELS},
        {"window", required_argument, NULL, O_WINDOW},
        {"plugin", required_argument, NULL, O_PLUGIN},
        {"progress", required_argument, NULL, O_PROGRESS},
        {"verify", no_argument, NULL, O_VERIFY},
        {"no-verify", no_argument, NULL, O_NOVERIFY},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"compare-transport", no_argument, NULL, O_COMPARE},
        {"json", required_argument, NULL, O_JSON},
        {"plot", required_argument, NULL, O_PLOT},
        {"quiet", no_argument, NULL, 'q'},
        {"print-config", no_argument, NULL, O_PRINTCFG},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static pf_main_t m;
    pf_params_t *p = &m.p;
    int loopback_flag = 0, verify = -1, run_opts = 0, ngpu_arg = 0, mem_set = 0, lanes_arg = 0;
    uint64_t v;

    bench_prog = PF_PROG;
    m.argv0 = argv[0];
    m.mode = BENCH_MODE_LOOPBACK;
    m.port = PF_DEFAULT_PORT;
    m.engine_port = TPX_PORT_EPHEMERAL;
    m.mem = PF_MEM_HOST;
    m.gpu[0] = m.gpu[1] = -1;
    for (int i = 0; i < PF_MAX_LANES; i++)
        m.lane_fd[0][i] = m.lane_fd[1][i] = -1;
    p->nsizes = 1;
    p->sizes[0] = PF_DEFAULT_SIZE;
    p->iters = BENCH_AUTO;
    p->warmup = BENCH_AUTO;
    p->batch = 1;
    p->direction = PF_DIR_SEND;
    p->timeout_s = PF_DEFAULT_TIMEOUT_S;
    p->progress = PF_PROGRESS_THREAD;

    int c;
    while ((c = getopt_long(argc, argv, "hqV", opts, NULL)) != -1) {
        switch (c) {
        case O_LOOPBACK:
            loopback_flag = 1;
            break;
        case O_PORT:
            if (bench_parse_uint(optarg, 1, 65535, &v) != 0)
                return bench_usage_error("--port: '%s' is not a port (1..65535)", optarg);
            m.port = (int)v;
            break;
        case O_ENGINE_PORT:
            if (bench_parse_uint(optarg, 1, 65535, &v) != 0)
                return bench_usage_error("--engine-port: '%s' is not a port (1..65535)", optarg);
            m.engine_port = (int)v;
            m.engine_port_set = 1;
            break;
        case O_MEM:
            if (strcmp(optarg, "cuda") == 0)
                m.mem = PF_MEM_CUDA;
            else if (strcmp(optarg, "host") == 0)
                m.mem = PF_MEM_HOST;
            else
                return bench_usage_error("--mem: '%s' is not host or cuda", optarg);
            mem_set = 1;
            break;
        case O_ALL_GPUS:
            m.all_gpus = 1;
            break;
        case O_LANES:
            if (bench_parse_uint(optarg, 1, PF_MAX_LANES, &v) != 0)
                return bench_usage_error("--lanes: '%s' is not in 1..%d", optarg, PF_MAX_LANES);
            lanes_arg = (int)v;
            break;
        case O_GPU:
            if ((ngpu_arg = pf_parse_gpus(optarg, m.gpu)) == 0)
                return bench_usage_error("--gpu: '%s' is not a GPU index N or a pair A,B "
                                         "(0..%d)",
                                         optarg, PF_MAX_GPU);
            break;
        case O_SIZE:
            if (bench_parse_size(optarg, &v) != 0 || v > PF_MAX_SIZE)
                return bench_usage_error(
                    "--size: bad size '%s' (e.g. 4096, 64K, 256M, 1G; at most 16G)", optarg);
            p->nsizes = 1;
            p->sizes[0] = v;
            run_opts = 1;
            break;
        case O_SIZES:
            if (bench_parse_sizes(optarg, p->sizes, PF_MAX_SIZES, PF_MAX_SIZE, &p->nsizes) != 0)
                return bench_usage_error("--sizes: bad list '%s' (e.g. 4K:1G or 16K,1M:64M; "
                                         "at most %d sizes of at most 16G)",
                                         optarg, PF_MAX_SIZES);
            run_opts = 1;
            break;
        case O_BATCH:
            if (bench_parse_uint(optarg, 1, PF_MAX_BATCH, &v) != 0)
                return bench_usage_error("--batch: '%s' is not in 1..%d", optarg, PF_MAX_BATCH);
            p->batch = v;
            run_opts = 1;
            break;
        case O_ITERS:
            if (bench_parse_uint(optarg, 1, 100000000, &v) != 0)
                return bench_usage_error("--iters: '%s' is not a count >= 1", optarg);
            p->iters = v;
            run_opts = 1;
            break;
        case O_WARMUP:
            if (bench_parse_uint(optarg, 0, 100000000, &v) != 0)
                return bench_usage_error("--warmup: '%s' is not a count", optarg);
            p->warmup = v;
            run_opts = 1;
            break;
        case O_DEPTH:
            if (bench_parse_uint(optarg, 1, PF_MAX_DEPTH, &v) != 0)
                return bench_usage_error("--depth: '%s' is not in 1..%d", optarg, PF_MAX_DEPTH);
            p->depth = v;
            run_opts = 1;
            break;
        case O_DIRECTION:
            if (strcmp(optarg, "send") == 0)
                p->direction = PF_DIR_SEND;
            else if (strcmp(optarg, "recv") == 0)
                p->direction = PF_DIR_RECV;
            else if (strcmp(optarg, "bidir") == 0)
                p->direction = PF_DIR_BIDIR;
            else
                return bench_usage_error("--direction: '%s' is not send, recv or bidir", optarg);
            run_opts = 1;
            break;
        case O_CHUNK:
            if (bench_parse_size(optarg, &v) != 0 || v < 4096 || v > (4u << 20))
                return bench_usage_error("--chunk: bad size '%s' (4K .. 4M)", optarg);
            p->chunk = v;
            run_opts = 1;
            break;
        case O_CHANNELS:
            if (bench_parse_uint(optarg, 1, 32, &v) != 0)
                return bench_usage_error("--channels: '%s' is not in 1..32", optarg);
            p->channels = v;
            run_opts = 1;
            break;
        case O_WINDOW:
            if (bench_parse_uint(optarg, 1, 32, &v) != 0)
                return bench_usage_error("--window: '%s' is not in 1..32", optarg);
            p->window = v;
            run_opts = 1;
            break;
        case O_PLUGIN:
            m.plugin = optarg;
            break;
        case O_PROGRESS:
            if (strcmp(optarg, "thread") == 0)
                p->progress = PF_PROGRESS_THREAD;
            else if (strcmp(optarg, "caller") == 0)
                p->progress = PF_PROGRESS_CALLER;
            else
                return bench_usage_error("--progress: '%s' is not thread or caller", optarg);
            run_opts = 1;
            break;
        case O_VERIFY:
            verify = 1;
            run_opts = 1;
            break;
        case O_NOVERIFY:
            verify = 0;
            run_opts = 1;
            break;
        case O_TIMEOUT:
            if (bench_parse_uint(optarg, 1, 86400, &v) != 0)
                return bench_usage_error("--timeout: '%s' is not in 1..86400 seconds", optarg);
            p->timeout_s = v;
            break;
        case O_COMPARE:
            m.compare = 1;
            break;
        case O_JSON:
            m.json = optarg;
            break;
        case O_PLOT:
            m.plot = optarg;
            break;
        case 'q':
            bench_quiet = 1;
            break;
        case O_PRINTCFG:
            tpx_config_print(stdout, 0);
            return BENCH_EXIT_OK;
        case 'V':
            printf("%s %s (libtpx %s)\n", PF_PROG, tpx_version_string(), tpx_version_string());
            return BENCH_EXIT_OK;
        case 'h':
            pf_usage(stdout);
            return BENCH_EXIT_OK;
        default:
            fprintf(stderr, "Try '%s --help'.\n", PF_PROG);
            return BENCH_EXIT_USAGE;
        }
    }
    int role_rc = bench_parse_role(argc, argv, optind, loopback_flag, &m.mode, &m.host);
    if (role_rc != BENCH_EXIT_OK)
        return role_rc;
    if (m.compare && m.mode != BENCH_MODE_LOOPBACK)
        return bench_usage_error("--compare-transport runs in loopback mode only");
    if (m.all_gpus) {
        if (ngpu_arg != 0)
            return bench_usage_error("--all-gpus uses every GPU of this host: drop --gpu");
        if (m.compare)
            return bench_usage_error("--compare-transport compares one engine with the "
                                     "transport: drop --all-gpus");
        if (!mem_set)
            m.mem = PF_MEM_CUDA;
    } else if (lanes_arg > 0) {
        return bench_usage_error("--lanes is for --all-gpus");
    }
    if (ngpu_arg == 2 && m.mode != BENCH_MODE_LOOPBACK)
        return bench_usage_error("--gpu A,B (server on A, client on B) is for --loopback; "
                                 "%s runs one side: --gpu N",
                                 bench_mode_name(m.mode));
    if (m.compare && m.mem == PF_MEM_CUDA)
        return bench_usage_error("--compare-transport compares host memory only (tpx-netbench "
                                 "moves host memory): drop it or use --mem host");
    if (m.compare && p->direction == PF_DIR_BIDIR)
        return bench_usage_error("--compare-transport measures one direction: use --direction "
                                 "send or recv");
    for (uint64_t i = 0; i < p->nsizes; i++)
        if (p->sizes[i] * p->batch > PF_MAX_SIZE)
            return bench_usage_error("--batch %" PRIu64 " x size %" PRIu64
                                     " is more than 16 GiB per iteration",
                                     p->batch, p->sizes[i]);
    p->verify = verify >= 0 ? (uint64_t)verify : m.mode == BENCH_MODE_LOOPBACK;
    if (m.plot != NULL) {
        char gnuplot[PATH_MAX];
        if (bench_gnuplot_find(gnuplot, sizeof(gnuplot)) != 0) {
            fprintf(stderr, "%s: --plot needs gnuplot, which is not on PATH: install it "
                            "(Debian: apt-get install gnuplot-nox) or drop --plot\n",
                    PF_PROG);
            return BENCH_EXIT_FAIL;
        }
    }
    m.user_set_run_opts = run_opts && m.mode == BENCH_MODE_CLIENT;
    m.mem_set = mem_set;
    p->mem = (uint64_t)m.mem;
    if (ngpu_arg == 1) /* --gpu N: this process's side(s) */
        m.gpu[1] = m.gpu[0];
    int ngpu = 0;
    if (m.mem == PF_MEM_CUDA || (m.all_gpus && lanes_arg == 0)) {
        char why[160];
        ngpu = pf_probe_gpus(why, sizeof(why));
        if (ngpu <= 0 && m.all_gpus) {
            fprintf(stderr,
                    "%s: --all-gpus: no CUDA GPU on this host (%s): it runs one engine per "
                    "local GPU; without GPUs run %s --mem host, or --all-gpus --mem host "
                    "--lanes N, or scripts/tpx-launch --nprocs N\n",
                    PF_PROG, why, PF_PROG);
            return BENCH_EXIT_FAIL;
        }
        if (ngpu <= 0) {
            fprintf(stderr, "%s: --mem cuda: no CUDA GPU on this host (%s); use --mem host\n",
                    PF_PROG, why);
            return BENCH_EXIT_FAIL;
        }
    }
    if (m.all_gpus) {
        /* Lane i: server GPU i <-> client GPU i between hosts; in loopback
         * the client's GPU i sends to the server's GPU i+1. */
        if (lanes_arg > 0 && m.mem == PF_MEM_CUDA && lanes_arg > ngpu)
            return bench_usage_error("--lanes %d: this host has %d GPU%s", lanes_arg, ngpu,
                                     ngpu == 1 ? "" : "s");
        m.nlanes = lanes_arg > 0 ? lanes_arg : ngpu < PF_MAX_LANES ? ngpu : PF_MAX_LANES;
        if (lanes_arg == 0 && ngpu > PF_MAX_LANES && !bench_quiet)
            fprintf(stderr, "%s: --all-gpus: this host has %d GPUs, using the first %d\n",
                    PF_PROG, ngpu, PF_MAX_LANES);
        for (int i = 0; i < m.nlanes; i++) {
            m.lane_gpu[1][i] = i;
            m.lane_gpu[0][i] = m.mode == BENCH_MODE_LOOPBACK ? (i + 1) % m.nlanes : i;
        }
        if (m.mode != BENCH_MODE_CLIENT)
            p->lanes = (uint64_t)m.nlanes;
        if (m.mode != BENCH_MODE_LOOPBACK && m.port + m.nlanes - 1 > 65535)
            return bench_usage_error("--port %d: the lanes need ports %d..%d", m.port, m.port,
                                     m.port + m.nlanes - 1);
        if (m.engine_port_set && m.engine_port + m.nlanes - 1 > 65535)
            return bench_usage_error("--engine-port %d: the lanes need ports %d..%d",
                                     m.engine_port, m.engine_port, m.engine_port + m.nlanes - 1);
    } else if (m.mem == PF_MEM_CUDA) {
        if (ngpu_arg == 0) { /* loopback: server on 0, client on 1 when there are two */
            m.gpu[0] = 0;
            m.gpu[1] = m.mode == BENCH_MODE_LOOPBACK && ngpu >= 2 ? 1 : 0;
        }
        for (int i = 0; i < 2; i++)
            if (m.gpu[i] >= ngpu)
                return bench_usage_error("--gpu %d: this host has %d GPU%s (0..%d)", m.gpu[i],
                                         ngpu, ngpu == 1 ? "" : "s", ngpu - 1);
    }

    signal(SIGPIPE, SIG_IGN);
    if (m.mode == BENCH_MODE_LOOPBACK && getenv("TPX_SOCKET_IFNAME") == NULL)
        setenv("TPX_SOCKET_IFNAME", "lo", 1);
    if (tpx_config_check() != TPX_OK) {
        fprintf(stderr, "%s: a TPX_* setting is malformed (see above; `%s --print-config`)\n",
                PF_PROG, PF_PROG);
        return BENCH_EXIT_FAIL;
    }
    /* Both engines get explicit settings: this side's environment decides. */
    if (p->channels == 0)
        p->channels = (uint64_t)bench_config_int("TPX_CHANNELS");
    if (p->chunk == 0)
        p->chunk = (uint64_t)bench_config_int("TPX_CHUNK_BYTES");
    if (p->window == 0)
        p->window = (uint64_t)bench_config_int("TPX_WINDOW");
    if (m.mode != BENCH_MODE_CLIENT && !pf_params_ok(p)) {
        fprintf(stderr,
                "%s: cannot read TPX_CHANNELS, TPX_CHUNK_BYTES or TPX_WINDOW from "
                "tpx_config_print(): set --channels, --chunk and --window\n",
                PF_PROG);
        return BENCH_EXIT_FAIL;
    }
    m.progress = !bench_quiet && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
    bench_started(m.started, sizeof(m.started));

    int rc;
    if (m.mode == BENCH_MODE_SERVER) {
        rc = pf_run_server(&m);
    } else if (m.mode == BENCH_MODE_CLIENT) {
        rc = pf_run_client(&m);
    } else {
        pf_print_header(&m);
        rc = pf_run(&m, -1);
    }
    if (m.error[0] != '\0')
        rc = -1;

    const pf_row_t *best = NULL;
    int all_verified = m.nrows > 0;
    for (size_t i = 0; i < m.nrows; i++) {
        if (best == NULL || pf_row_gbps(&m.rows[i]) > pf_row_gbps(best))
            best = &m.rows[i];
        all_verified &= pf_row_verified(&m.rows[i]);
    }
    const pf_agg_t *abest = NULL;
    for (size_t i = 0; i < m.naggs; i++)
        if (abest == NULL || m.aggs[i].gbps > abest->gbps)
            abest = &m.aggs[i];
    if (m.all_gpus && abest != NULL) {
        char hb[32];
        printf("# best: %.3f GB/s summed over %" PRIu64 " GPU lanes (slowest lane %.3f) at size "
               "%" PRIu64 " (%s), count %" PRIu64 ", %s%s%s\n",
               abest->gbps, abest->lanes, abest->gbps_min, abest->size,
               bench_human(abest->size, hb, sizeof(hb)), abest->batch,
               pf_dir_name(abest->direction), all_verified ? "; all data verified" : "",
               rc != 0 ? "; run FAILED (see above)" : "");
        fflush(stdout);
    } else if (best != NULL) {
        char hb[32];
        printf("# best: %.3f GB/s at size %" PRIu64 " (%s), count %" PRIu64 ", %s%s%s\n",
               pf_row_gbps(best), best->size, bench_human(best->size, hb, sizeof(hb)), best->batch,
               pf_dir_name(best->direction), all_verified ? "; all data verified" : "",
               rc != 0 ? "; run FAILED (see above)" : "");
        fflush(stdout);
    }
    if (rc == 0 && m.compare && pf_compare_transport(&m) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "%s: FAILED: %s\n", PF_PROG, m.error[0] ? m.error : "see above");
    if (m.json != NULL && pf_write_json(&m) != 0 && rc == 0)
        rc = -1;
    if (m.plot != NULL && m.nrows > 0 && pf_plot(&m) != 0 && rc == 0)
        rc = -1;
    free(m.rows);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}
