/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx_netbench.c - tpx-netbench: throughput of tpx's built-in TCP transport,
 * driven through one of its ncclNet tables alone (--abi 10, 11 or 12:
 * tpx_net_builtin_table(); 12, what NCCL 2.30 drives, by default). v11 and
 * v12 add a context from init() that listen/connect take, finalize(), and
 * (v12) the NIC's rail and plane, which the device line shows.
 *
 * What it promises: the numbers are the transport's, and the bytes they count
 * arrived intact (--verify). The transport reads its TPX_* settings once per
 * process, so every configuration (one TPX_NSOCKS value) runs in a fresh
 * receiver process and a fresh sender process; the parent never touches the
 * transport, it only forks, collects result rows and prints them. Before each
 * phase the receiver posts its receives and only then releases the sender
 * (the barrier); the time reported is the receiver's, from that release to
 * its last completion. Warm-up iterations are never timed. Every wait has a
 * deadline: a peer that vanishes ends the run with an error, never a hang.
 *
 * Roles: --loopback (both processes on this host: the default), or `server`
 * (the receiver side) and `client HOST` (the sender side) on two machines.
 * Server and client first meet on a small TCP bootstrap connection of this
 * tool (--port); it then carries the run parameters, the 128-byte listen
 * handle, the barriers and the results. In loopback mode a socketpair does
 * the same job.
 *
 * What tpx-perf (the engine's benchmark) shares with this tool -- options,
 * the data pattern, the control stream, the worker processes, the table,
 * the progress line and the JSON writer -- lives in bench_common.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench_common.h"
#include "tpx/tpx.h"

#define NB_PROG              "tpx-netbench"
#define NB_DEFAULT_PORT      18515
#define NB_DEFAULT_SIZE      (256ull << 20)
#define NB_DEFAULT_WINDOW    8
#define NB_DEFAULT_TIMEOUT_S 60
#define NB_MAX_SIZES         64
#define NB_MAX_NSOCKS        32
#define NB_MAX_SIZE          (16ull << 30)
/* Largest single isend when --chunk is not given: fits test()'s int sizes. */
#define NB_MAX_CHUNK (1ull << 30)
/* Buffer memory of one side; the window is reduced to stay under it. */
#define NB_MEM_BUDGET (1ull << 30)
/* Automatic --iters: every row moves at least 1 GiB (bench_auto_iters()). */
#define NB_AUTO BENCH_AUTO

typedef enum { NB_RECV, NB_SEND } nb_role_t;

/*
 * The run parameters. The server (or, in loopback mode, the command line)
 * decides them and the client receives them. Only uint64_t fields: the wire
 * form is this struct as big-endian 64-bit words.
 */
typedef struct {
    uint64_t nsizes;
    uint64_t sizes[NB_MAX_SIZES]; /* message sizes, bytes */
    uint64_t nnsocks;
    uint64_t nsocks[NB_MAX_NSOCKS]; /* TPX_NSOCKS per configuration; 0: environment */
    uint64_t iters;                 /* timed iterations; NB_AUTO: per size */
    uint64_t warmup;                /* untimed iterations; NB_AUTO: iters / 10, >= 1 */
    uint64_t window;                /* requests in flight per comm */
    uint64_t chunk;                 /* largest isend; 0: whole message (<= 1 GiB) */
    uint64_t verify;                /* fill a pattern and check every byte */
    uint64_t timeout_s;             /* no progress for this long: error */
    uint64_t nthreads;              /* TPX_SOCK_WORKERS; NB_AUTO: environment */
    uint64_t nap_us;                /* a pass of test()s that moved nothing: sleep this
                                       long (0: sched_yield, a spinning poller) */
    uint64_t abi;                   /* the ncclNet table both sides drive: 10, 11 or 12 */
} nb_params_t;

/*
 * One result row: one message size of one configuration. The receiver
 * writes it; uint64_t fields first (sent as big-endian words), then the name.
 */
typedef struct {
    uint64_t cfg;         /* index into params.nsocks */
    uint64_t nsocks;      /* effective TPX_NSOCKS of the receiver */
    uint64_t nthreads;    /* effective TPX_SOCK_WORKERS of the receiver */
    uint64_t peer_nsocks; /* effective TPX_NSOCKS of the sender */
    uint64_t size, iters, warmup, window, chunk, nchunks, nbuf;
    uint64_t time_ns;                   /* receiver: barrier release to last completion */
    uint64_t send_time_ns;              /* sender: barrier release to its last completion */
    uint64_t rcpu_user_ns, rcpu_sys_ns; /* receiver process, timed phase */
    uint64_t scpu_user_ns, scpu_sys_ns; /* sender process, timed phase */
    uint64_t verified;                  /* 1: every byte of every iteration was checked */
    uint64_t checksum;                  /* of the timed iterations' received bytes */
    /* Receiver: time between consecutive message completions in the timed
     * phase (the first from the release): min, median, 99th percentile, max. */
    uint64_t gap_min_ns, gap_p50_ns, gap_p99_ns, gap_max_ns;
    uint64_t dev, speed_mbps;
    uint64_t abi;            /* the table the receiver drove */
    uint64_t rail, plane;    /* v12 railId/planeId + 1: 0 when not known (or before v12) */
    char dev_name[32];
} nb_row_t;
#define NB_ROW_WORDS (offsetof(nb_row_t, dev_name) / 8)

/* What a worker tells its parent through the result pipe: a row, or the
 * text of its first error (so the summary and the JSON name the cause). One
 * write() each: records stay whole because they are below PIPE_BUF. */
typedef struct {
    bench_rec_hdr_t h;
    nb_row_t row;
} nb_rec_t;
_Static_assert(sizeof(nb_rec_t) <= PIPE_BUF, "a record is one atomic pipe write");
_Static_assert(sizeof(nb_params_t) % 8 == 0, "params are 64-bit words");
_Static_assert(offsetof(nb_row_t, dev_name) % 8 == 0, "row words");

/* ---- small helpers ------------------------------------------------------ */

static uint64_t nb_iters_for(const nb_params_t *p, uint64_t size)
{
    return p->iters != NB_AUTO ? p->iters : bench_auto_iters(size);
}

static uint64_t nb_warmup_for(const nb_params_t *p, uint64_t iters)
{
    return p->warmup != NB_AUTO ? p->warmup : bench_auto_warmup(iters);
}

/* ---- the control stream (socketpair or bootstrap TCP) --------------------- */

/* Framing, magic and checks: bench_common.h. */
#define NB_MAGIC   0x54504E42u /* "TPNB" */
#define NB_VERSION 3 /* 2: params.nap_us; 3: params.abi, row abi/rail/plane */
enum {
    NB_MSG_HELLO = 1, /* client -> server: empty */
    NB_MSG_PARAMS,    /* server -> client: nb_params_t */
    NB_MSG_HANDLE,    /* receiver -> sender: the 128-byte listen handle; arg = cfg */
    NB_MSG_READY,     /* sender -> receiver: ready for phase `arg` */
    NB_MSG_GO,        /* receiver -> sender: receives posted, start phase `arg` */
    NB_MSG_SRES,      /* sender -> receiver: its time and CPU of row `arg` */
    NB_MSG_ROW,       /* receiver -> sender: the finished row `arg` */
    NB_MSG_ERROR,     /* either way: a text, then the sender of it exits */
};
_Static_assert(sizeof(nb_params_t) <= BENCH_MSG_MAX, "params fit a message");
_Static_assert(sizeof(nb_row_t) <= BENCH_MSG_MAX, "row fits a message");

static const char *const nb_msg_names[] = {"?",  "HELLO", "PARAMS", "HANDLE", "READY",
                                           "GO", "SRES",  "ROW",    "ERROR"};
static const bench_proto_t nb_proto = {NB_MAGIC, NB_VERSION, NB_MSG_ERROR, nb_msg_names,
                                       sizeof(nb_msg_names) / sizeof(nb_msg_names[0])};

static int nb_msg_send(int fd, unsigned type, uint32_t arg, const void *payload, uint32_t len)
{
    return bench_msg_send(&nb_proto, fd, type, arg, payload, len);
}

static int nb_msg_recv(int fd, unsigned want, uint32_t arg, void *buf, uint32_t len,
                       uint64_t timeout_ns, const char *peer, char *err, size_t errlen)
{
    return bench_msg_recv(&nb_proto, fd, want, arg, buf, len, timeout_ns, peer, err, errlen);
}

/* ---- the worker: one side of one configuration, in its own process ------- */

typedef struct {
    /* The data path's entries, the same in v10, v11 and v12 (copied out of
     * the chosen table); init/listen/connect/getProperties go through
     * `t11`/`t12` from v11 on (NULL entries here then). */
    tpx_ncclnet_v10_t netv;
    const tpx_ncclnet_v10_t *net; /* &netv */
    const tpx_ncclnet_v11_t *t11; /* v11 and v12 share its context entries */
    const tpx_ncclnet_v12_t *t12; /* v12 only */
    void *ctx;                    /* v11+: init()'s context */
    int rail, plane;              /* v12 railId/planeId (TPX_NCCL_NET_ID_UNDEF otherwise) */
    const nb_params_t *p;
    nb_role_t role;
    bench_side_t side; /* who, peer, control stream, result pipe, progress line, failed */
    int out_rows;      /* this side reports the rows (the other reports only errors) */
    int dev;
    uint64_t cfg;
    void *comm;  /* recvComm or sendComm */
    void *lcomm; /* receiver: listenComm */
    tpx_ncclnet_props_v10_t props;
    int64_t nsocks, nthreads; /* effective, from tpx_config_print() */
} nb_worker_t;

/* One message size: buffers, their registrations and the request ring. */
typedef struct {
    uint64_t row;
    uint64_t size, chunk, nchunks, nbuf, window, iters, warmup;
    unsigned char **buf;
    void **mh;
    void **req;
    uint64_t checksum;
    uint64_t *done_ns; /* receiver: completion time of each timed message */
} nb_sized_t;

static const char *nb_rc_string(tpx_nccl_result_t rc)
{
    switch (rc) {
    case TPX_NCCL_SUCCESS:
        return "ncclSuccess";
    case TPX_NCCL_UNHANDLED_CUDA_ERROR:
        return "ncclUnhandledCudaError";
    case TPX_NCCL_SYSTEM_ERROR:
        return "ncclSystemError: peer closed or connection broken";
    case TPX_NCCL_INTERNAL_ERROR:
        return "ncclInternalError";
    case TPX_NCCL_INVALID_ARGUMENT:
        return "ncclInvalidArgument";
    case TPX_NCCL_INVALID_USAGE:
        return "ncclInvalidUsage";
    case TPX_NCCL_REMOTE_ERROR:
        return "ncclRemoteError";
    }
    return "unknown ncclResult_t";
}

/* Call one function of table `tbl`; any rc != 0 fails the worker and jumps.
 * NB_CALL: the v10 view of the table; NB_CALL_CTX: the v11/v12 entries that
 * take the context. */
#define NB_CALL_ON(tbl, w, label, fn, ...)                                                         \
    do {                                                                                           \
        tpx_nccl_result_t nb_rc_ = (tbl)->fn(__VA_ARGS__);                                         \
        if (nb_rc_ != TPX_NCCL_SUCCESS) {                                                          \
            bench_fail(&(w)->side, "%s() failed: rc %d (%s)", #fn, (int)nb_rc_,                    \
                       nb_rc_string(nb_rc_));                                                      \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)
#define NB_CALL(w, label, fn, ...) NB_CALL_ON((w)->net, w, label, fn, __VA_ARGS__)
#define NB_CALL_CTX(w, label, fn, ...) NB_CALL_ON((w)->t11, w, label, fn, __VA_ARGS__)

static const char *nb_log_who = "worker";

/* ncclDebugLogger_t for init(): warnings go to stderr; info and trace are
 * the transport's own TPX_LOG_LEVEL business. */
static void nb_nccl_log(tpx_nccl_log_level_t level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    (void)flags;
    if (level != TPX_NCCL_LOG_WARN && level != TPX_NCCL_LOG_ABORT && level != TPX_NCCL_LOG_VERSION)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s: %s %s (%s:%d)\n", NB_PROG, nb_log_who,
            level == TPX_NCCL_LOG_VERSION ? "VERSION" : "WARN", msg, file ? file : "?", line);
}

/* Wait for the peer; also an error if it hung up. 0 or -1 (already reported). */
static int nb_check_alive(nb_worker_t *w, uint64_t now, uint64_t *next_check,
                          uint64_t last_progress, const char *what)
{
    return bench_check_alive(&w->side, w->p->timeout_s, now, next_check, last_progress, 0, what);
}

static int nb_sized_alloc(nb_worker_t *w, nb_sized_t *s)
{
    size_t alloc = s->size > 0 ? s->size : 1;
    s->buf = calloc(s->nbuf, sizeof(*s->buf));
    s->mh = calloc(s->nbuf, sizeof(*s->mh));
    s->req = calloc(s->window, sizeof(*s->req));
    s->done_ns = calloc(s->iters, sizeof(*s->done_ns));
    if (s->buf == NULL || s->mh == NULL || s->req == NULL || s->done_ns == NULL) {
        bench_fail(&w->side, "out of memory");
        return -1;
    }
    for (uint64_t i = 0; i < s->nbuf; i++) {
        void *b = mmap(NULL, alloc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED) {
            bench_fail(&w->side, "cannot map %zu bytes of buffer: %s", alloc, strerror(errno));
            return -1;
        }
        s->buf[i] = b;
        madvise(b, alloc, MADV_HUGEPAGE); /* best effort: fewer TLB misses in recv/send copies */
        memset(b, 0, alloc);              /* fault every page in before timing */
        NB_CALL(w, fail, regMr, w->comm, b, alloc, TPX_NCCL_PTR_HOST, &s->mh[i]);
    }
    return 0;
fail:
    return -1;
}

static void nb_sized_free(nb_worker_t *w, nb_sized_t *s)
{
    size_t alloc = s->size > 0 ? s->size : 1;
    for (uint64_t i = 0; s->buf != NULL && i < s->nbuf; i++) {
        if (s->mh != NULL && s->mh[i] != NULL) {
            tpx_nccl_result_t rc = w->net->deregMr(w->comm, s->mh[i]);
            if (rc != TPX_NCCL_SUCCESS)
                bench_fail(&w->side, "deregMr() failed: rc %d (%s)", (int)rc, nb_rc_string(rc));
        }
        if (s->buf[i] != NULL)
            munmap(s->buf[i], alloc);
    }
    free(s->buf);
    free(s->mh);
    free(s->req);
    free(s->done_ns);
    s->done_ns = NULL;
    s->buf = NULL;
    s->mh = NULL;
    s->req = NULL;
}

/* Post request `r` of a phase whose first iteration is `iter0`. 1 posted,
 * 0 the transport asked to retry later (NULL request), -1 failed. */
static int nb_post(nb_worker_t *w, nb_sized_t *s, uint64_t r, uint64_t iter0)
{
    uint64_t m = r / s->nchunks, c = r % s->nchunks;
    uint64_t off = c * s->chunk;
    uint64_t len = s->size - off < s->chunk ? s->size - off : s->chunk;
    unsigned char *data = s->buf[m % s->nbuf] + off;
    void *mh = s->mh[m % s->nbuf];
    int tag = (int)((iter0 * s->nchunks + r) & 0x3fffffff);
    void **req = &s->req[r % s->window];
    *req = NULL;
    if (w->role == NB_SEND) {
        NB_CALL(w, fail, isend, w->comm, data, (size_t)len, tag, mh, NULL, req);
    } else {
        void *d = data, *ph = NULL;
        size_t sz = (size_t)len;
        NB_CALL(w, fail, irecv, w->comm, 1, &d, &sz, &tag, &mh, &ph, req);
    }
    return *req != NULL;
fail:
    return -1;
}

typedef struct {
    uint64_t t0, t1;
    uint64_t user0, sys0, user1, sys1;
} nb_phase_t;

/*
 * One phase: `iters` messages of s->size bytes, iteration numbers iter0...
 * `phase` is the barrier id both sides agree on. Timed or not is the
 * caller's business: the phase always records its times.
 */
static int nb_phase(nb_worker_t *w, nb_sized_t *s, uint64_t iters, uint64_t iter0, uint32_t phase,
                    int timed, nb_phase_t *ph)
{
    const uint64_t tmo = w->p->timeout_s * 1000000000ull;
    const uint64_t nreq = iters * s->nchunks;
    uint64_t posted = 0, done = 0;
    char err[512];
    const int verify = (int)w->p->verify;

    if (w->role == NB_RECV) {
        if (nb_msg_recv(w->side.ctl, NB_MSG_READY, phase, NULL, 0, tmo, w->side.peer, err,
                        sizeof(err)) != 0) {
            bench_fail(&w->side, "%s", err);
            return -1;
        }
    } else if (nb_msg_send(w->side.ctl, NB_MSG_READY, phase, NULL, 0) != 0) {
        bench_fail(&w->side, "cannot send READY to the %s: %s", w->side.peer, strerror(errno));
        return -1;
    }

    /* The receiver posts its first window of receives before the release. */
    uint64_t now = bench_now_ns(), last_progress = now, next_check = now;
    bench_progress_t line = {.on = w->side.progress && timed};
    for (;;) {
        if (w->role == NB_SEND)
            break;
        if (posted >= nreq || posted - done >= s->window)
            break;
        uint64_t m = posted / s->nchunks;
        if (posted % s->nchunks == 0 && m - done / s->nchunks >= s->nbuf)
            break;
        int r = nb_post(w, s, posted, iter0);
        if (r < 0)
            return -1;
        if (r == 0)
            break; /* not ready: the loop below retries */
        posted++;
    }

    if (w->role == NB_RECV) {
        bench_cpu_ns(&ph->user0, &ph->sys0);
        ph->t0 = bench_now_ns();
        if (nb_msg_send(w->side.ctl, NB_MSG_GO, phase, NULL, 0) != 0) {
            bench_fail(&w->side, "cannot send GO to the %s: %s", w->side.peer, strerror(errno));
            return -1;
        }
    } else {
        if (nb_msg_recv(w->side.ctl, NB_MSG_GO, phase, NULL, 0, tmo, w->side.peer, err,
                        sizeof(err)) != 0) {
            bench_fail(&w->side, "%s", err);
            return -1;
        }
        bench_cpu_ns(&ph->user0, &ph->sys0);
        ph->t0 = bench_now_ns();
    }
    last_progress = next_check = ph->t0;
    bench_progress_start(&line, ph->t0);

    while (done < nreq) {
        int progressed = 0;
        while (posted < nreq && posted - done < s->window) {
            uint64_t m = posted / s->nchunks;
            if (posted % s->nchunks == 0) {
                /* A new message needs a buffer no request of it still uses. */
                if (m - done / s->nchunks >= s->nbuf)
                    break;
                if (verify && w->role == NB_SEND)
                    bench_fill(s->buf[m % s->nbuf], s->size, iter0 + m);
            }
            int r = nb_post(w, s, posted, iter0);
            if (r < 0)
                return -1;
            if (r == 0)
                break;
            posted++;
            progressed = 1;
        }
        if (done < posted) {
            int d = 0, got = -1;
            void *req = s->req[done % s->window];
            NB_CALL(w, fail, test, req, &d, &got);
            if (d) {
                uint64_t c = done % s->nchunks;
                uint64_t off = c * s->chunk;
                uint64_t len = s->size - off < s->chunk ? s->size - off : s->chunk;
                if (w->role == NB_RECV && (got < 0 || (uint64_t)got != len)) {
                    bench_fail(&w->side,
                               "test() reported %d bytes received, expected %" PRIu64
                               " (iteration %" PRIu64 ", piece %" PRIu64 ")",
                               got, len, iter0 + done / s->nchunks, c);
                    return -1;
                }
                s->req[done % s->window] = NULL;
                done++;
                progressed = 1;
                if (w->role == NB_RECV && done % s->nchunks == 0) {
                    uint64_t m = done / s->nchunks - 1, bad = 0, scratch = 0;
                    if (timed)
                        s->done_ns[m] = bench_now_ns();
                    if (verify && bench_check(s->buf[m % s->nbuf], s->size, iter0 + m,
                                              timed ? &s->checksum : &scratch, &bad) != 0) {
                        bench_fail(&w->side,
                                   "DATA MISMATCH: size %" PRIu64 ", iteration %" PRIu64
                                   ", first wrong byte at offset %" PRIu64 " (piece %" PRIu64 ")",
                                   s->size, iter0 + m, bad, bad / s->chunk);
                        return -1;
                    }
                }
            }
        }
        now = bench_now_ns();
        if (progressed) {
            last_progress = now;
            if (bench_progress_due(&line, now)) {
                double el = (double)(now - ph->t0) / 1e9;
                char hb[32];
                bench_progress_draw(
                    &line, "  nsocks %" PRId64 "  size %s  iter %" PRIu64 "/%" PRIu64 "  %.2f GB/s",
                    w->nsocks, bench_human(s->size, hb, sizeof(hb)), done / s->nchunks, iters,
                    el > 0 ? (double)(done / s->nchunks) * (double)s->size / el / 1e9 : 0.0);
            }
        } else {
            if (w->p->nap_us > 0) {
                struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)w->p->nap_us * 1000};
                nanosleep(&ts, NULL); /* --nap-us: the poller leaves its core to the workers */
            } else {
                sched_yield(); /* leave the core to the transport's helper threads */
            }
            if (nb_check_alive(w, now, &next_check, last_progress,
                               w->role == NB_SEND ? "isend/test" : "irecv/test") != 0)
                return -1;
        }
    }
    ph->t1 = bench_now_ns();
    bench_cpu_ns(&ph->user1, &ph->sys1);
    bench_progress_clear(&line);
    return 0;
fail:
    return -1;
}

/* min, p50, p99, max of the gaps between timed completions (sorts done_ns). */
static void nb_gaps(nb_sized_t *s, uint64_t t0, uint64_t out[4])
{
    uint64_t prev = t0;
    for (uint64_t i = 0; i < s->iters; i++) {
        uint64_t t = s->done_ns[i];
        s->done_ns[i] = t - prev;
        prev = t;
    }
    bench_percentiles(s->done_ns, s->iters, out);
}

/* Run one message size on an established comm: warm-up, timed phase, row. */
static int nb_run_size(nb_worker_t *w, uint64_t row_idx, uint64_t size)
{
    const nb_params_t *p = w->p;
    const uint64_t tmo = p->timeout_s * 1000000000ull;
    nb_sized_t s = {.row = row_idx, .size = size, .window = p->window, .checksum = BENCH_FNV_BASIS};
    char err[512];
    int rc = -1;

    s.iters = nb_iters_for(p, size);
    s.warmup = nb_warmup_for(p, s.iters);
    s.chunk = p->chunk ? p->chunk : (size < NB_MAX_CHUNK ? size : NB_MAX_CHUNK);
    if (s.chunk == 0)
        s.chunk = 1; /* a zero-byte message is one zero-byte request */
    if (s.chunk > w->props.maxP2pBytes) {
        bench_fail(&w->side,
                   "a request of %" PRIu64 " bytes exceeds the device's maxP2pBytes %zu: "
                   "use --chunk",
                   s.chunk, w->props.maxP2pBytes);
        return -1;
    }
    s.nchunks = size == 0 ? 1 : (size + s.chunk - 1) / s.chunk;
    /* Buffers: enough messages to keep the window full, within the budget. */
    uint64_t want = (s.window + s.nchunks - 1) / s.nchunks + (s.nchunks > 1 ? 1 : 0);
    uint64_t fit = size > 0 ? NB_MEM_BUDGET / size : want;
    uint64_t total = s.iters > s.warmup ? s.iters : s.warmup;
    s.nbuf = want < fit ? want : fit;
    if (s.nbuf > total)
        s.nbuf = total;
    if (s.nbuf == 0)
        s.nbuf = 1;

    if (nb_sized_alloc(w, &s) != 0)
        goto out;
    uint32_t phase = (uint32_t)(row_idx * 2);
    nb_phase_t warm, timed;
    if (s.warmup > 0 && nb_phase(w, &s, s.warmup, 0, phase, 0, &warm) != 0)
        goto out;
    if (nb_phase(w, &s, s.iters, s.warmup, phase + 1, 1, &timed) != 0)
        goto out;

    /* SRES: sender -> receiver; ROW: receiver -> sender. */
    unsigned char wire[8 * NB_ROW_WORDS + sizeof(((nb_row_t *)0)->dev_name)];
    uint64_t sres[4];
    if (w->role == NB_SEND) {
        uint64_t mine[4] = {timed.t1 - timed.t0, timed.user1 - timed.user0, timed.sys1 - timed.sys0,
                            (uint64_t)w->nsocks};
        bench_words_out(wire, mine, 4);
        if (nb_msg_send(w->side.ctl, NB_MSG_SRES, (uint32_t)row_idx, wire, 32) != 0) {
            bench_fail(&w->side, "cannot send results to the %s: %s", w->side.peer,
                       strerror(errno));
            goto out;
        }
        if (nb_msg_recv(w->side.ctl, NB_MSG_ROW, (uint32_t)row_idx, wire, sizeof(wire), tmo,
                        w->side.peer, err, sizeof(err)) != 0) {
            bench_fail(&w->side, "%s", err);
            goto out;
        }
        if (w->side.out >= 0 && w->out_rows) {
            nb_rec_t rec = {.h.kind = BENCH_REC_ROW};
            bench_words_in(&rec.row, wire, NB_ROW_WORDS);
            memcpy(rec.row.dev_name, wire + 8 * NB_ROW_WORDS, sizeof(rec.row.dev_name));
            rec.row.dev_name[sizeof(rec.row.dev_name) - 1] = '\0';
            if (bench_put_row(&w->side, &rec) != 0)
                goto out;
        }
    } else {
        if (nb_msg_recv(w->side.ctl, NB_MSG_SRES, (uint32_t)row_idx, wire, 32, tmo, w->side.peer,
                        err, sizeof(err)) != 0) {
            bench_fail(&w->side, "%s", err);
            goto out;
        }
        bench_words_in(sres, wire, 4);
        uint64_t gaps[4];
        nb_gaps(&s, timed.t0, gaps);
        nb_row_t row = {
            .cfg = w->cfg,
            .nsocks = (uint64_t)w->nsocks,
            .nthreads = (uint64_t)w->nthreads,
            .peer_nsocks = sres[3],
            .size = size,
            .iters = s.iters,
            .warmup = s.warmup,
            .window = s.window,
            .chunk = s.chunk,
            .nchunks = s.nchunks,
            .nbuf = s.nbuf,
            .time_ns = timed.t1 - timed.t0,
            .send_time_ns = sres[0],
            .rcpu_user_ns = timed.user1 - timed.user0,
            .rcpu_sys_ns = timed.sys1 - timed.sys0,
            .scpu_user_ns = sres[1],
            .scpu_sys_ns = sres[2],
            .verified = p->verify ? 1 : 0,
            .checksum = p->verify ? s.checksum : 0,
            .gap_min_ns = gaps[0],
            .gap_p50_ns = gaps[1],
            .gap_p99_ns = gaps[2],
            .gap_max_ns = gaps[3],
            .dev = (uint64_t)w->dev,
            .speed_mbps = w->props.speed > 0 ? (uint64_t)w->props.speed : 0,
            .abi = p->abi,
            .rail = w->rail >= 0 ? (uint64_t)w->rail + 1 : 0,
            .plane = w->plane >= 0 ? (uint64_t)w->plane + 1 : 0,
        };
        snprintf(row.dev_name, sizeof(row.dev_name), "%s",
                 w->props.name != NULL ? w->props.name : "?");
        bench_words_out(wire, &row, NB_ROW_WORDS);
        memcpy(wire + 8 * NB_ROW_WORDS, row.dev_name, sizeof(row.dev_name));
        if (nb_msg_send(w->side.ctl, NB_MSG_ROW, (uint32_t)row_idx, wire, sizeof(wire)) != 0) {
            bench_fail(&w->side, "cannot send the result to the %s: %s", w->side.peer,
                       strerror(errno));
            goto out;
        }
        if (w->side.out >= 0 && w->out_rows) {
            nb_rec_t rec = {.h.kind = BENCH_REC_ROW, .row = row};
            if (bench_put_row(&w->side, &rec) != 0)
                goto out;
        }
    }
    rc = 0;
out:
    nb_sized_free(w, &s);
    return w->side.failed ? -1 : rc;
}

/* Point the worker at the table of params.abi. */
static int nb_table_open(nb_worker_t *w)
{
    const void *t = tpx_net_builtin_table((int)w->p->abi);
    if (t == NULL || w->p->abi < 10) {
        bench_fail(&w->side, "ncclNet v%" PRIu64 ": this tool drives v10, v11 or v12", w->p->abi);
        return -1;
    }
    w->rail = w->plane = TPX_NCCL_NET_ID_UNDEF;
    if (w->p->abi == 10) {
        w->netv = *(const tpx_ncclnet_v10_t *)t;
    } else {
        /* The data entries of v11/v12 are v10's, slot for slot. */
        const tpx_ncclnet_v11_t *x = t;
        w->t11 = x;
        w->t12 = w->p->abi == 12 ? t : NULL;
        w->netv = (tpx_ncclnet_v10_t){.name = x->name,
                                      .devices = x->devices,
                                      .accept = x->accept,
                                      .regMr = x->regMr,
                                      .regMrDmaBuf = x->regMrDmaBuf,
                                      .deregMr = x->deregMr,
                                      .isend = x->isend,
                                      .irecv = x->irecv,
                                      .iflush = x->iflush,
                                      .test = x->test,
                                      .closeSend = x->closeSend,
                                      .closeRecv = x->closeRecv,
                                      .closeListen = x->closeListen,
                                      .getDeviceMr = x->getDeviceMr,
                                      .irecvConsumed = x->irecvConsumed};
    }
    w->net = &w->netv;
    return 0;
}

/* getProperties of the chosen version into the worker's v10 view, and
 * v12's rail and plane beside it. */
static int nb_props(nb_worker_t *w)
{
    if (w->t11 == NULL) {
        NB_CALL(w, fail, getProperties, w->dev, &w->props);
        return 0;
    }
    tpx_ncclnet_props_v12_t q;
    memset(&q, 0, sizeof(q));
    if (w->t12 != NULL) {
        tpx_nccl_result_t rc = w->t12->getProperties(w->dev, &q);
        if (rc != TPX_NCCL_SUCCESS) {
            bench_fail(&w->side, "getProperties() failed: rc %d (%s)", (int)rc, nb_rc_string(rc));
            return -1;
        }
        w->rail = q.railId;
        w->plane = q.planeId;
    } else {
        tpx_ncclnet_props_v11_t r;
        memset(&r, 0, sizeof(r));
        NB_CALL_CTX(w, fail, getProperties, w->dev, &r);
        q.name = r.name;
        q.speed = r.speed;
        q.maxP2pBytes = r.maxP2pBytes;
    }
    memset(&w->props, 0, sizeof(w->props));
    w->props.name = q.name;
    w->props.speed = q.speed;
    w->props.maxP2pBytes = q.maxP2pBytes;
    return 0;
fail:
    return -1;
}

/* Set up the transport in this (fresh) process, make the comm, run every size. */
static int nb_worker(nb_worker_t *w)
{
    const nb_params_t *p = w->p;
    const uint64_t tmo = p->timeout_s * 1000000000ull;
    unsigned char handle[TPX_NCCL_NET_HANDLE_MAXSIZE];
    tpx_ncclnet_dev_handle_t dh_store;
    tpx_ncclnet_dev_handle_t *dh = &dh_store;
    char err[512];
    int ndev = 0;

    nb_log_who = w->side.who;
    if (tpx_config_check() != TPX_OK) {
        bench_fail(&w->side, "a TPX_* setting is malformed (see above; `%s --print-config`)",
                   NB_PROG);
        return -1;
    }
    w->nsocks = bench_config_int("TPX_NSOCKS");
    w->nthreads = bench_config_int("TPX_SOCK_WORKERS");
    if (w->nsocks < 0) /* tpx_config_print() changed its format: say what we asked for */
        w->nsocks = (int64_t)p->nsocks[w->cfg];
    if (w->nthreads < 0)
        w->nthreads = p->nthreads != NB_AUTO ? (int64_t)p->nthreads : 0;
    int64_t max_reqs = bench_config_int("TPX_MAX_REQUESTS");
    if (max_reqs > 0 && (int64_t)p->window > max_reqs) {
        bench_fail(&w->side,
                   "--window %" PRIu64 " exceeds TPX_MAX_REQUESTS=%" PRId64
                   " (requests a comm accepts in flight): lower --window or raise TPX_MAX_REQUESTS",
                   p->window, max_reqs);
        return -1;
    }
    if (nb_table_open(w) != 0)
        return -1;
    if (w->t11 != NULL) {
        tpx_ncclnet_comm_config_t cc = {.trafficClass = TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
        tpx_nccl_result_t irc = w->t11->init(&w->ctx, (uint64_t)getpid(), &cc, nb_nccl_log, NULL);
        if (irc != TPX_NCCL_SUCCESS) {
            bench_fail(&w->side, "init() failed: rc %d (%s)", (int)irc, nb_rc_string(irc));
            return -1;
        }
    } else {
        NB_CALL(w, fail, init, nb_nccl_log, NULL);
    }
    NB_CALL(w, fail, devices, &ndev);
    if (ndev == 0 || w->dev >= ndev) {
        const char *ifn = getenv("TPX_SOCKET_IFNAME");
        bench_fail(&w->side, "no device %d: the transport found %d (TPX_SOCKET_IFNAME=%s)", w->dev,
                   ndev, ifn != NULL ? ifn : "(unset: every non-loopback interface)");
        goto fail;
    }
    if (nb_props(w) != 0)
        goto fail;
    memset(&dh_store, 0, sizeof(dh_store));

    uint64_t deadline = bench_now_ns() + tmo, next_check = 0;
    if (w->role == NB_RECV) {
        memset(handle, 0, sizeof(handle));
        if (w->t11 != NULL)
            NB_CALL_CTX(w, fail, listen, w->ctx, w->dev, handle, &w->lcomm);
        else
            NB_CALL(w, fail, listen, w->dev, handle, &w->lcomm);
        if (nb_msg_send(w->side.ctl, NB_MSG_HANDLE, (uint32_t)w->cfg, handle, sizeof(handle)) !=
            0) {
            bench_fail(&w->side, "cannot send the listen handle to the %s: %s", w->side.peer,
                       strerror(errno));
            goto fail;
        }
        while (w->comm == NULL) {
            NB_CALL(w, fail, accept, w->lcomm, &w->comm, &dh);
            if (w->comm == NULL) {
                uint64_t now = bench_now_ns();
                if (nb_check_alive(w, now, &next_check, now, "accept") != 0)
                    goto fail;
                if (now > deadline) {
                    bench_fail(&w->side, "accept(): no connection within %" PRIu64 " s",
                               p->timeout_s);
                    goto fail;
                }
                usleep(100);
            }
        }
    } else {
        if (nb_msg_recv(w->side.ctl, NB_MSG_HANDLE, (uint32_t)w->cfg, handle, sizeof(handle), tmo,
                        w->side.peer, err, sizeof(err)) != 0) {
            bench_fail(&w->side, "%s", err);
            goto fail;
        }
        tpx_ncclnet_comm_config_t cc = {.trafficClass = TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
        while (w->comm == NULL) {
            if (w->t11 != NULL)
                NB_CALL_CTX(w, fail, connect, w->ctx, w->dev, handle, &w->comm, &dh);
            else
                NB_CALL(w, fail, connect, w->dev, &cc, handle, &w->comm, &dh);
            if (w->comm == NULL) {
                uint64_t now = bench_now_ns();
                if (nb_check_alive(w, now, &next_check, now, "connect") != 0)
                    goto fail;
                if (now > deadline) {
                    bench_fail(&w->side, "connect(): not connected within %" PRIu64 " s",
                               p->timeout_s);
                    goto fail;
                }
                usleep(100);
            }
        }
    }

    for (uint64_t i = 0; i < p->nsizes; i++)
        if (nb_run_size(w, w->cfg * NB_MAX_SIZES + i, p->sizes[i]) != 0)
            goto fail;

fail:
    if (w->comm != NULL) {
        tpx_nccl_result_t rc =
            w->role == NB_SEND ? w->net->closeSend(w->comm) : w->net->closeRecv(w->comm);
        if (rc != TPX_NCCL_SUCCESS)
            bench_fail(&w->side, "%s() failed: rc %d (%s)",
                       w->role == NB_SEND ? "closeSend" : "closeRecv", (int)rc, nb_rc_string(rc));
        w->comm = NULL;
    }
    if (w->lcomm != NULL) {
        tpx_nccl_result_t rc = w->net->closeListen(w->lcomm);
        if (rc != TPX_NCCL_SUCCESS)
            bench_fail(&w->side, "closeListen() failed: rc %d (%s)", (int)rc, nb_rc_string(rc));
        w->lcomm = NULL;
    }
    if (w->ctx != NULL) {
        tpx_nccl_result_t rc = w->t11->finalize(w->ctx);
        if (rc != TPX_NCCL_SUCCESS)
            bench_fail(&w->side, "finalize() failed: rc %d (%s)", (int)rc, nb_rc_string(rc));
        w->ctx = NULL;
    }
    return w->side.failed ? -1 : 0;
}

/* ---- the parent: configurations, children, the table, JSON --------------- */

typedef struct {
    bench_mode_t mode;
    nb_params_t p;
    int dev;
    int port;
    const char *host;
    const char *json;
    const char *plot;
    int progress;
    int user_set_run_opts; /* client: run options given, but the server decides */
    nb_row_t *rows;
    size_t nrows;
    uint64_t cfg;    /* the configuration running now */
    size_t got_rows; /* its rows so far */
    char error[512];
    int header_done;
    char started[64];
    uint64_t raw_buffer; /* --raw-buffer: reuse this many bytes per connection; 0: the message */
} nb_main_t;

/* The run's first error (later ones are only printed). */
#define nb_set_error(m, ...) bench_set_error((m)->error, sizeof((m)->error), __VA_ARGS__)

static double nb_row_gbps(const nb_row_t *r)
{
    return r->time_ns > 0 ? (double)r->size * (double)r->iters / (double)r->time_ns : 0.0;
}

static double nb_row_cpu_per_gb(const nb_row_t *r)
{
    double bytes = (double)r->size * (double)r->iters;
    double cpu =
        (double)(r->rcpu_user_ns + r->rcpu_sys_ns + r->scpu_user_ns + r->scpu_sys_ns) / 1e9;
    return bytes > 0 ? cpu / (bytes / 1e9) : 0.0;
}

static void nb_print_header(nb_main_t *m)
{
    const nb_params_t *p = &m->p;
    char hb[32], cores[48];
    if (bench_quiet)
        return;
    printf("# %s %s: ncclNet v%" PRIu64 " table \"%s\" (tpx's built-in TCP transport), %s mode, "
           "%s\n", NB_PROG, tpx_version_string(), p->abi, tpx_net_builtin()->name,
           bench_mode_name(m->mode), bench_cores_text(cores, sizeof(cores)));
    printf("# sizes");
    for (uint64_t i = 0; i < p->nsizes; i++)
        printf(" %s", bench_human(p->sizes[i], hb, sizeof(hb)));
    char it[24] = "auto", wu[24] = "auto";
    if (p->iters != NB_AUTO)
        snprintf(it, sizeof(it), "%" PRIu64, p->iters);
    if (p->warmup != NB_AUTO)
        snprintf(wu, sizeof(wu), "%" PRIu64, p->warmup);
    printf("  iters %s  warmup %s  window %" PRIu64 "  chunk %s  verify %s  timeout %" PRIu64
           " s  nap %" PRIu64 " us\n",
           it, wu, p->window, p->chunk ? bench_human(p->chunk, hb, sizeof(hb)) : "whole message",
           p->verify ? "on" : "off", p->timeout_s, p->nap_us);
    const char *ifn = getenv("TPX_SOCKET_IFNAME");
    printf("# TPX_SOCKET_IFNAME=%s  dev %d  TPX_SOCK_WORKERS=%s\n", ifn ? ifn : "(unset)", m->dev,
           getenv("TPX_SOCK_WORKERS") ? getenv("TPX_SOCK_WORKERS") : "(default)");
    printf("# GB/s = 1e9 bytes/s, receiver side: from the barrier release (receives posted)\n"
           "#   to the last completion; time(ms) = that time / iters; warm-up not timed;\n"
           "#   cpu(s/GB) = user+sys CPU of both processes (all threads) per 1e9 bytes\n");
    fflush(stdout);
}

static const bench_col_t nb_cols[] = {
    {"nsocks", 6}, {"size", 12},      {"iters", 7},    {"time(ms)", 10},
    {"GB/s", 8},   {"cpu(s/GB)", 10}, {"verified", 9}, {"checksum", 0},
};
#define NB_NCOLS ((int)(sizeof(nb_cols) / sizeof(nb_cols[0])))

static void nb_print_row(nb_main_t *m, const nb_row_t *r)
{
    if (bench_quiet)
        return;
    if (!m->header_done) {
        m->header_done = 1;
        char rp[80] = "", rail[24] = "not known", plane[24] = "not known";
        if (r->rail)
            snprintf(rail, sizeof(rail), "%" PRIu64, r->rail - 1);
        if (r->plane)
            snprintf(plane, sizeof(plane), "%" PRIu64, r->plane - 1);
        if (r->abi >= 12)
            snprintf(rp, sizeof(rp), ", rail %s, plane %s", rail, plane);
        printf("# device %" PRIu64 ": %s, %" PRIu64 " Mb/s%s; TPX_SOCK_WORKERS effective %" PRIu64
               " (0: the default pool)\n#\n",
               r->dev, r->dev_name, r->speed_mbps, rp, r->nthreads);
        bench_table_header(stdout, nb_cols, NB_NCOLS);
    }
    char c[NB_NCOLS][BENCH_CELL];
    snprintf(c[0], BENCH_CELL, "%" PRIu64, r->nsocks);
    snprintf(c[1], BENCH_CELL, "%" PRIu64, r->size);
    snprintf(c[2], BENCH_CELL, "%" PRIu64, r->iters);
    snprintf(c[3], BENCH_CELL, "%.3f",
             (double)r->time_ns / 1e6 / (double)(r->iters ? r->iters : 1));
    snprintf(c[4], BENCH_CELL, "%.3f", nb_row_gbps(r));
    snprintf(c[5], BENCH_CELL, "%.3f", nb_row_cpu_per_gb(r));
    snprintf(c[6], BENCH_CELL, "%s", r->verified ? "yes" : "no");
    if (r->verified)
        snprintf(c[7], BENCH_CELL, "0x%016" PRIx64, r->checksum);
    else
        snprintf(c[7], BENCH_CELL, "-");
    bench_table_row(stdout, nb_cols, NB_NCOLS, c);
    fflush(stdout);
}

/* ---- --raw: plain TCP, the baseline -------------------------------------- */

/* What the transport stands on: N TCP connections on 127.0.0.1, a sender
 * and a receiver thread each, plain send()/recv() loops -- no framing, no
 * requests, no copies beyond the kernel's. One message of SIZE bytes is cut
 * into N equal stretches, one per connection, and each side's stretch is
 * memory of its own of that size: the sender reads, and the receiver
 * writes, as many distinct bytes as a transfer of SIZE through tpx does.
 * --raw-buffer B loops over at most B bytes instead (a small buffer stays
 * in the CPU caches, which a 256 MiB message does not: a ceiling that no
 * transfer of that size can reach). Timing as for the transport: warm-up
 * iterations, a barrier, then the timed ones until the last receiver has
 * all its bytes. */
typedef struct {
    int fd;
    int send;
    uint64_t bytes;             /* per iteration on this connection */
    uint64_t warmup, iters;
    uint64_t buffer;            /* bytes looped over; 0: the whole stretch */
    pthread_barrier_t *barrier; /* 2 * N threads: after the warm-up */
    uint64_t t_end;
    int failed;
} nb_raw_conn_t;

static int nb_raw_move(nb_raw_conn_t *c, unsigned char *buf, size_t cap, uint64_t bytes)
{
    while (bytes > 0) {
        size_t n = bytes < cap ? (size_t)bytes : cap;
        ssize_t r = c->send ? send(c->fd, buf, n, MSG_NOSIGNAL) : recv(c->fd, buf, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        bytes -= (uint64_t)r;
    }
    return 0;
}

static void *nb_raw_main(void *arg)
{
    nb_raw_conn_t *c = arg;
    uint64_t want = c->buffer != 0 && c->buffer < c->bytes ? c->buffer : c->bytes;
    size_t cap = (size_t)(want ? want : 1);
    unsigned char *buf = malloc(cap);
    if (buf == NULL) {
        c->failed = 1;
        pthread_barrier_wait(c->barrier);
        return NULL;
    }
    memset(buf, 0x5a, cap);
    c->failed = nb_raw_move(c, buf, cap, c->bytes * c->warmup) != 0;
    pthread_barrier_wait(c->barrier);
    if (!c->failed)
        c->failed = nb_raw_move(c, buf, cap, c->bytes * c->iters) != 0;
    c->t_end = bench_now_ns();
    free(buf);
    return NULL;
}

/* N connected pairs on 127.0.0.1: fds[2k] sends, fds[2k + 1] receives. */
static int nb_raw_connect(int n, int *fds, int timeout_s)
{
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, n) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) != 0) {
        fprintf(stderr, "%s: --raw: listening on 127.0.0.1: %s\n", NB_PROG, strerror(errno));
        if (ls >= 0)
            close(ls);
        return -1;
    }
    struct timeval tv = {.tv_sec = timeout_s};
    for (int k = 0; k < n; k++) {
        fds[2 * k] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[2 * k] < 0 || connect(fds[2 * k], (struct sockaddr *)&a, sizeof(a)) != 0 ||
            (fds[2 * k + 1] = accept4(ls, NULL, NULL, SOCK_CLOEXEC)) < 0) {
            fprintf(stderr, "%s: --raw: connection %d: %s\n", NB_PROG, k, strerror(errno));
            close(ls);
            return -1;
        }
        for (int j = 0; j < 2; j++) { /* a dead peer ends the run, never hangs it */
            setsockopt(fds[2 * k + j], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
            setsockopt(fds[2 * k + j], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        }
    }
    close(ls);
    return 0;
}

/* The transport's TPX_NSOCKS in effect (its default depends on the CPUs),
 * as --print-config shows it. */
static uint64_t nb_raw_default_nsocks(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    uint64_t n = 2;
    if (f == NULL)
        return n;
    tpx_config_print(f, 0);
    fclose(f);
    const char *v = text ? strstr(text, "TPX_NSOCKS=") : NULL;
    if (v != NULL && strtoull(v + 11, NULL, 10) > 0)
        n = strtoull(v + 11, NULL, 10);
    free(text);
    return n;
}

static int nb_run_raw(nb_main_t *m)
{
    const nb_params_t *p = &m->p;
    if (!bench_quiet)
        printf("# %s %s --raw: plain TCP on 127.0.0.1, nsocks connections with a sender and a "
               "receiver thread each\n#   (send()/recv() loops; a message is cut into nsocks "
               "equal stretches, each in memory of its own%s); no data checks\n#\n",
               NB_PROG, tpx_version_string(),
               m->raw_buffer ? ", looped over at most --raw-buffer bytes" : "");
    if (!bench_quiet)
        bench_table_header(stdout, nb_cols, NB_NCOLS);
    for (uint64_t ci = 0; ci < p->nnsocks; ci++) {
        int n = (int)(p->nsocks[ci] ? p->nsocks[ci] : nb_raw_default_nsocks());
        for (uint64_t si = 0; si < p->nsizes; si++) {
            uint64_t size = p->sizes[si], iters = nb_iters_for(p, size);
            int fds[2 * NB_MAX_NSOCKS * 2];
            if (n > 2 * NB_MAX_NSOCKS || nb_raw_connect(n, fds, (int)p->timeout_s) != 0)
                return -1;
            nb_raw_conn_t c[2 * 2 * NB_MAX_NSOCKS];
            pthread_t t[2 * 2 * NB_MAX_NSOCKS];
            pthread_barrier_t bar;
            pthread_barrier_init(&bar, NULL, (unsigned)(2 * n + 1));
            for (int k = 0; k < 2 * n; k++) {
                uint64_t share = size / (uint64_t)n + ((uint64_t)(k / 2) < size % (uint64_t)n);
                c[k] = (nb_raw_conn_t){.fd = fds[k], .send = k % 2 == 0, .bytes = share,
                                       .warmup = nb_warmup_for(p, iters), .iters = iters,
                                       .buffer = m->raw_buffer, .barrier = &bar};
                pthread_create(&t[k], NULL, nb_raw_main, &c[k]);
            }
            uint64_t u0, s0, u1, s1;
            pthread_barrier_wait(&bar);
            uint64_t t0 = bench_now_ns();
            bench_cpu_ns(&u0, &s0);
            int failed = 0;
            uint64_t t_end = t0;
            for (int k = 0; k < 2 * n; k++) {
                pthread_join(t[k], NULL);
                failed |= c[k].failed;
                if (!c[k].send && c[k].t_end > t_end)
                    t_end = c[k].t_end;
            }
            bench_cpu_ns(&u1, &s1);
            pthread_barrier_destroy(&bar);
            for (int k = 0; k < 2 * n; k++)
                close(fds[k]);
            if (failed) {
                nb_set_error(m, "--raw: a connection failed or stalled for %" PRIu64 " s",
                             p->timeout_s);
                return -1;
            }
            nb_row_t r = {.cfg = ci, .nsocks = (uint64_t)n, .peer_nsocks = (uint64_t)n,
                          .size = size, .iters = iters, .warmup = nb_warmup_for(p, iters),
                          .time_ns = t_end - t0, .rcpu_user_ns = u1 - u0, .rcpu_sys_ns = s1 - s0};
            snprintf(r.dev_name, sizeof(r.dev_name), "raw-tcp");
            nb_row_t *nr = realloc(m->rows, (m->nrows + 1) * sizeof(*nr));
            if (nr == NULL)
                return -1;
            m->rows = nr;
            m->rows[m->nrows++] = r;
            m->header_done = 1; /* no transport device line */
            nb_print_row(m, &r);
        }
    }
    return 0;
}

static int nb_write_json(nb_main_t *m)
{
    const nb_params_t *p = &m->p;
    FILE *f = fopen(m->json, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", NB_PROG, m->json, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n  \"tool\": \"%s\", \"version\": ", NB_PROG);
    bench_json_str(f, tpx_version_string());
    fprintf(f, ", \"transport\": ");
    bench_json_str(f, tpx_net_builtin()->name);
    fprintf(f, ", \"abi\": \"ncclNet v%" PRIu64 "\",\n  \"mode\": \"%s\", ", p->abi,
            bench_mode_name(m->mode));
    fprintf(f, "\"started\": ");
    bench_json_str(f, m->started);
    fprintf(f, ", ");
    bench_json_sysinfo(f);
    fprintf(f, ",\n  \"peer\": ");
    bench_json_str(f, m->host);
    fprintf(f, ", \"port\": %d, \"dev\": %d,\n", m->port, m->dev);
    fprintf(
        f, "  \"units\": {\"GBps\": \"1e9 bytes per second, receiver side, barrier release to "
           "last completion\", \"time_ms\": \"milliseconds\", \"cpu_s_per_GB\": \"user+sys CPU "
           "seconds of sender and receiver processes per 1e9 bytes\", \"gap_ms\": \"receiver: time "
           "between consecutive message completions of the timed phase\"},\n");
    fprintf(f, "  \"params\": {\"sizes\": [");
    for (uint64_t i = 0; i < p->nsizes; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : "", p->sizes[i]);
    fprintf(f, "], \"nsocks\": [");
    for (uint64_t i = 0; i < p->nnsocks; i++)
        if (p->nsocks[i] == 0)
            fprintf(f, "%snull", i ? ", " : "");
        else
            fprintf(f, "%s%" PRIu64, i ? ", " : "", p->nsocks[i]);
    fprintf(f, "], \"iters\": ");
    if (p->iters == NB_AUTO)
        fputs("\"auto\"", f);
    else
        fprintf(f, "%" PRIu64, p->iters);
    fprintf(f, ", \"warmup\": ");
    if (p->warmup == NB_AUTO)
        fputs("\"auto\"", f);
    else
        fprintf(f, "%" PRIu64, p->warmup);
    fprintf(f, ", ");
    bench_json_u64(f, "window", p->window, 1);
    bench_json_u64(f, "chunk", p->chunk, 1);
    fprintf(f, "\"verify\": %s, ", p->verify ? "true" : "false");
    bench_json_u64(f, "timeout_s", p->timeout_s, 1);
    bench_json_u64(f, "nap_us", p->nap_us, 1);
    fprintf(f, "\"nthreads\": ");
    if (p->nthreads == NB_AUTO)
        fputs("null", f);
    else
        fprintf(f, "%" PRIu64, p->nthreads);
    fprintf(f, "},\n  \"env\": ");
    bench_json_env(f, "TPX_NSOCKS"); /* TPX_NSOCKS: per row */
    fprintf(f, ",\n  \"results\": [");
    const nb_row_t *best = NULL;
    for (size_t i = 0; i < m->nrows; i++) {
        const nb_row_t *r = &m->rows[i];
        if (best == NULL || nb_row_gbps(r) > nb_row_gbps(best))
            best = r;
        fprintf(f, "%s\n    {", i ? "," : "");
        bench_json_u64(f, "nsocks", r->nsocks, 1);
        bench_json_u64(f, "peer_nsocks", r->peer_nsocks, 1);
        bench_json_u64(f, "nthreads", r->nthreads, 1);
        bench_json_u64(f, "size", r->size, 1);
        bench_json_u64(f, "iters", r->iters, 1);
        bench_json_u64(f, "warmup", r->warmup, 1);
        bench_json_u64(f, "window", r->window, 1);
        bench_json_u64(f, "chunk", r->chunk, 1);
        bench_json_u64(f, "requests_per_message", r->nchunks, 1);
        bench_json_u64(f, "buffers", r->nbuf, 1);
        bench_json_dbl(f, "time_ms_total", (double)r->time_ns / 1e6, 1);
        bench_json_dbl(f, "time_ms", (double)r->time_ns / 1e6 / (double)(r->iters ? r->iters : 1),
                       1);
        bench_json_dbl(f, "GBps", nb_row_gbps(r), 1);
        bench_json_dbl(f, "gap_ms_min", (double)r->gap_min_ns / 1e6, 1);
        bench_json_dbl(f, "gap_ms_p50", (double)r->gap_p50_ns / 1e6, 1);
        bench_json_dbl(f, "gap_ms_p99", (double)r->gap_p99_ns / 1e6, 1);
        bench_json_dbl(f, "gap_ms_max", (double)r->gap_max_ns / 1e6, 1);
        bench_json_dbl(f, "sender_time_ms_total", (double)r->send_time_ns / 1e6, 1);
        bench_json_dbl(f, "cpu_recv_user_s", (double)r->rcpu_user_ns / 1e9, 1);
        bench_json_dbl(f, "cpu_recv_sys_s", (double)r->rcpu_sys_ns / 1e9, 1);
        bench_json_dbl(f, "cpu_send_user_s", (double)r->scpu_user_ns / 1e9, 1);
        bench_json_dbl(f, "cpu_send_sys_s", (double)r->scpu_sys_ns / 1e9, 1);
        bench_json_dbl(f, "cpu_s_per_GB", nb_row_cpu_per_gb(r), 1);
        fprintf(f, "\"verified\": %s, ", r->verified ? "true" : "false");
        if (r->verified)
            fprintf(f, "\"checksum\": \"0x%016" PRIx64 "\", ", r->checksum);
        else
            fprintf(f, "\"checksum\": null, ");
        bench_json_u64(f, "dev", r->dev, 1);
        fprintf(f, "\"dev_name\": ");
        bench_json_str(f, r->dev_name);
        fprintf(f, ", ");
        bench_json_u64(f, "speed_mbps", r->speed_mbps, 1);
        /* v12's rail and plane; null when the transport does not know them */
        if (r->rail)
            fprintf(f, "\"rail\": %" PRIu64 ", ", r->rail - 1);
        else
            fprintf(f, "\"rail\": null, ");
        if (r->plane)
            fprintf(f, "\"plane\": %" PRIu64 "}", r->plane - 1);
        else
            fprintf(f, "\"plane\": null}");
    }
    fprintf(f, "\n  ],\n  \"best\": ");
    if (best != NULL)
        fprintf(f, "{\"GBps\": %.9g, \"nsocks\": %" PRIu64 ", \"size\": %" PRIu64 "}",
                nb_row_gbps(best), best->nsocks, best->size);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"ok\": %s, \"error\": ", m->error[0] ? "false" : "true");
    if (m->error[0])
        bench_json_str(f, m->error);
    else
        fputs("null", f);
    fputs("\n}\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", NB_PROG, m->json, strerror(errno));
        return -1;
    }
    return 0;
}

/* setenv for one configuration (before the transport reads it in a child). */
static void nb_env_apply(const nb_params_t *p, uint64_t cfg)
{
    char v[32];
    if (p->nsocks[cfg] != 0) {
        snprintf(v, sizeof(v), "%" PRIu64, p->nsocks[cfg]);
        setenv("TPX_NSOCKS", v, 1);
    }
    if (p->nthreads != NB_AUTO) {
        snprintf(v, sizeof(v), "%" PRIu64, p->nthreads);
        setenv("TPX_SOCK_WORKERS", v, 1);
    }
}

/* Fork one worker (side 0: receiver, 1: sender); in the child it never returns. */
static pid_t nb_spawn(void *ctx, int side, int ctl, int out, int out_rows, const int *close_fds,
                      int nclose)
{
    nb_main_t *m = ctx;
    nb_role_t role = side == 0 ? NB_RECV : NB_SEND;
    pid_t pid = bench_fork(close_fds, nclose);
    if (pid != 0)
        return pid;
    nb_worker_t w = {
        .p = &m->p,
        .role = role,
        .side =
            {
                .who = role == NB_RECV ? "receiver" : "sender",
                .peer = role == NB_RECV ? "sender" : "receiver",
                .ctl = ctl,
                .out = out,
                .rec_size = sizeof(nb_rec_t),
                .proto = &nb_proto,
                .progress = role == NB_RECV && m->progress,
            },
        .out_rows = out_rows,
        .dev = m->dev,
        .cfg = m->cfg,
    };
    _exit(nb_worker(&w) == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL);
}

/* A row arrived from a worker: keep it and print it. */
static void nb_on_row(void *ctx, const void *rec)
{
    nb_main_t *m = ctx;
    const nb_rec_t *r = rec;
    m->got_rows++;
    nb_row_t *nr = realloc(m->rows, (m->nrows + 1) * sizeof(*nr));
    if (nr != NULL) {
        m->rows = nr;
        m->rows[m->nrows++] = r->row;
    }
    nb_print_row(m, &r->row);
}

/* Run every configuration. `boot` is the bootstrap socket (server/client). */
static int nb_run_configs(nb_main_t *m, int boot)
{
    static const char *const names[2] = {"receiver", "sender"};
    const nb_params_t *p = &m->p;
    for (m->cfg = 0; m->cfg < p->nnsocks; m->cfg++) {
        nb_env_apply(p, m->cfg);
        m->got_rows = 0;
        int rc = bench_run_sides(m->mode, boot, nb_spawn, m, names, sizeof(nb_rec_t), nb_on_row,
                                 p->timeout_s + 15, m->error, sizeof(m->error));
        if (rc == 0 && m->got_rows != (size_t)p->nsizes) {
            nb_set_error(m, "expected %zu result rows, got %zu", (size_t)p->nsizes, m->got_rows);
            rc = -1;
        }
        if (rc != 0 || m->error[0] != '\0')
            return -1;
    }
    return 0;
}

/* ---- bootstrap (server/client) ------------------------------------------- */

static int nb_run_server(nb_main_t *m)
{
    char err[512] = "";
    unsigned char wire[sizeof(nb_params_t)];
    bench_words_out(wire, &m->p, sizeof(nb_params_t) / 8);
    int cfd =
        bench_server_start(&nb_proto, m->port, NB_MSG_HELLO, NB_MSG_PARAMS, wire, sizeof(wire),
                           "not a tpx-netbench client of this version", err, sizeof(err));
    if (cfd < 0) {
        nb_set_error(m, "%s", err);
        return -1;
    }
    nb_print_header(m);
    int rc = nb_run_configs(m, cfd);
    close(cfd);
    return rc;
}

static int nb_run_client(nb_main_t *m)
{
    char err[512] = "";
    unsigned char wire[sizeof(nb_params_t)];
    int fd = bench_client_start(
        &nb_proto, m->host, m->port, NB_MSG_HELLO, NB_MSG_PARAMS, wire, sizeof(wire),
        " (is `" NB_PROG " server` running there, on this --port?)", err, sizeof(err));
    if (fd < 0) {
        nb_set_error(m, "%s", err);
        return -1;
    }
    nb_params_t p;
    bench_words_in(&p, wire, sizeof(nb_params_t) / 8);
    if (p.nsizes == 0 || p.nsizes > NB_MAX_SIZES || p.nnsocks == 0 || p.nnsocks > NB_MAX_NSOCKS ||
        p.window == 0 || p.window > 256 || p.timeout_s == 0) {
        nb_set_error(m, "the server sent parameters out of range");
        close(fd);
        return -1;
    }
    for (uint64_t i = 0; i < p.nsizes; i++)
        if (p.sizes[i] > NB_MAX_SIZE) {
            nb_set_error(m, "the server asked for a size out of range");
            close(fd);
            return -1;
        }
    m->p = p;
    if (m->user_set_run_opts && !bench_quiet)
        fprintf(stderr, "%s: client: run options come from the server; yours are ignored\n",
                NB_PROG);
    nb_print_header(m);
    int rc = nb_run_configs(m, fd);
    close(fd);
    return rc;
}

/* ---- command line -------------------------------------------------------- */

/* --plot: one line per configuration (TPX_NSOCKS in effect). */
static int nb_plot(const nb_main_t *m)
{
    bench_point_t *pts = calloc(m->nrows, sizeof(*pts));
    if (pts == NULL)
        return -1;
    char title[128];
    snprintf(title, sizeof(title), "tpx-netbench %s: %s transport alone", bench_mode_name(m->mode),
             tpx_net_builtin()->name);
    for (size_t i = 0; i < m->nrows; i++) {
        const nb_row_t *r = &m->rows[i];
        if (r->nthreads > 0)
            snprintf(pts[i].label, sizeof(pts[i].label), "nsocks %" PRIu64 ", nthreads %" PRIu64,
                     r->nsocks, r->nthreads);
        else
            snprintf(pts[i].label, sizeof(pts[i].label), "nsocks %" PRIu64, r->nsocks);
        pts[i].size = r->size;
        pts[i].gbps = nb_row_gbps(r);
    }
    int rc = bench_plot(m->plot, title, pts, m->nrows);
    free(pts);
    if (rc == 0 && !bench_quiet)
        printf("# plot: %s (gnuplot script %s.gp)\n", m->plot, m->plot);
    return rc;
}

static void nb_usage(FILE *f)
{
    fprintf(f,
            "NAME\n"
            "    %1$s - throughput of tpx's built-in TCP transport (an ncclNet table)\n"
            "\n"
            "SYNOPSIS\n"
            "    %1$s [--loopback] [OPTIONS]\n"
            "    %1$s --raw [--sizes ...] [--nsocks ...] [--iters N]\n"
            "    %1$s server [--port P] [OPTIONS]\n"
            "    %1$s client HOST [--port P] [--dev N] [--json FILE] [--quiet]\n"
            "    %1$s --print-config | --help | --version\n"
            "\n"
            "DESCRIPTION\n"
            "    Moves host memory through the transport that libtpx embeds (the same\n"
            "    code as libnccl-net-tpx.so), using only one ncclNet function table\n"
            "    (--abi: v12 by default, as NCCL 2.30 drives it; v11 as NCCL 2.28; v10),\n"
            "    and prints bandwidth in a table like nccl-tests.\n"
            "\n"
            "    Every configuration (each --nsocks value) runs in a fresh receiver\n"
            "    process and a fresh sender process, because the transport reads its\n"
            "    TPX_* settings once per process. For each message size: --warmup\n"
            "    untimed iterations, then a barrier (the receiver posts its receives, then\n"
            "    releases the sender), then --iters timed iterations. One iteration is one\n"
            "    message of SIZE bytes, sent as one isend (or several, see --chunk).\n"
            "\n"
            "    Columns: nsocks (TPX_NSOCKS in effect), size (bytes), iters, time(ms)\n"
            "    (per iteration), GB/s (1e9 bytes per second, receiver side: barrier\n"
            "    release to last completion), cpu(s/GB) (user+sys CPU time of both\n"
            "    processes, all threads, per 1e9 bytes), verified, checksum (of the\n"
            "    received bytes of the timed iterations: FNV-1a over 8-byte words in four\n"
            "    lanes, folded per message). A final line names the best row.\n"
            "\n"
            "ROLES\n"
            "    --loopback\n"
            "        Receiver and sender on this host (the default when no role is given).\n"
            "        TPX_SOCKET_IFNAME defaults to \"lo\" in this mode.\n"
            "    --raw\n"
            "        No tpx at all: the same sizes over plain TCP on 127.0.0.1, nsocks\n"
            "        connections (default: the transport's TPX_NSOCKS), one sender and one\n"
            "        receiver thread each, send()/recv() loops; a message is cut into nsocks\n"
            "        equal stretches, each sent out of and received into memory of its own\n"
            "        (as many distinct bytes as a transfer of SIZE touches). The baseline\n"
            "        the transport's rows compare with; the same columns, nothing verified,\n"
            "        cpu(s/GB) of both sides.\n"
            "    --raw-buffer B\n"
            "        With --raw: each connection loops over at most B bytes (e.g. 4M)\n"
            "        instead of its whole stretch. A buffer that fits the CPU caches makes\n"
            "        the kernel's copies cheaper than any large transfer's can be: an\n"
            "        upper bound, not a like-for-like baseline.\n"
            "    server\n"
            "        The receiver side on two machines. Waits on the bootstrap --port for\n"
            "        one client, sends it the run parameters (this side's options decide\n"
            "        them) and the listen handle, runs, prints, exits.\n"
            "    client HOST\n"
            "        The sender side: connects to HOST's bootstrap --port (retrying for\n"
            "        10 s), takes the run parameters from the server, prints the same table.\n"
            "\n"
            "OPTIONS\n"
            "    --port P         bootstrap TCP port of server/client (default %2$d)\n"
            "    --dev N          transport device to use on this side (default 0; devices\n"
            "                     are the interfaces TPX_SOCKET_IFNAME selects)\n"
            "    --size N         one message size (default 256M). K, M, G = 2^10, 2^20, 2^30\n"
            "    --sizes A:B      sizes from A to B, doubling (e.g. 64K:1G); or a comma list\n"
            "                     of sizes and ranges (e.g. 4K,1M:64M). At most %3$d sizes\n"
            "    --iters N        timed iterations per size (default: 5, or more for small\n"
            "                     sizes so that each row moves at least 1 GiB, up to %4$d)\n"
            "    --warmup N       untimed iterations before them (default: iters/10, at least 1)\n"
            "    --nsocks LIST    TPX_NSOCKS values, one configuration each, e.g. 1,2,4,8,16\n"
            "                     (default: TPX_NSOCKS from the environment, or the transport's\n"
            "                     default); 1..16, or with --raw 1..64 connections (on one host,\n"
            "                     --raw with 2N connections is the ceiling of N each way)\n"
            "    --nthreads N     TPX_SOCK_WORKERS (I/O threads) for every configuration (default: environment)\n"
            "    --window W       requests in flight per comm (default %5$d, at most 256; the\n"
            "                     transport accepts TPX_MAX_REQUESTS). Buffers: enough messages\n"
            "                     to fill the window, at most 1 GiB per side, at least one\n"
            "    --chunk BYTES    cut each message into isends of at most BYTES (default:\n"
            "                     the whole message in one isend, up to 1 GiB)\n"
            "    --abi N          the ncclNet table to drive: 12 (default: NCCL 2.30's, with\n"
            "                     a context from init() and the NIC's rail and plane), 11\n"
            "                     (NCCL 2.28's) or 10; both sides use the server's choice\n"
            "    --nap-us US      when a pass over the requests in flight completed nothing,\n"
            "                     sleep US microseconds before testing again (default 0: yield\n"
            "                     and test at once, as NCCL's proxy thread does; that poller\n"
            "                     takes a core from the transport's I/O workers when they\n"
            "                     are CPU-bound: e.g. 16 connections on 16 cores)\n"
            "    --verify         fill every message with a pattern seeded by its iteration\n"
            "                     (sender) and check every byte (receiver); the fill and the\n"
            "                     check are part of the timed loop. Default: on in loopback\n"
            "                     mode, off for server/client\n"
            "    --no-verify      do not fill or check: pure transport throughput\n"
            "    --timeout SEC    a wait without progress this long is an error (default %6$d)\n"
            "    --json FILE      also write every number and the configuration to FILE\n"
            "    --plot FILE.png  also plot GB/s against size (log2 axis), one line per\n"
            "                     --nsocks value, with gnuplot (Debian: gnuplot-nox); the\n"
            "                     script is kept as FILE.png.gp. An error before the run\n"
            "                     if gnuplot is missing\n"
            "    -q, --quiet      print only the final \"best\" line (and errors)\n"
            "    --print-config   print every TPX_* setting with its value and meaning\n"
            "    -V, --version    print the version\n"
            "    -h, --help       print this text\n"
            "\n"
            "ENVIRONMENT\n"
            "    The transport's TPX_* variables apply (TPX_SOCKET_IFNAME, TPX_NSOCKS,\n"
            "    TPX_SOCK_WORKERS, TPX_PIECE_BYTES, TPX_SOCK_BUF_BYTES, TPX_LOG_LEVEL, ...);\n"
            "    `%1$s --print-config` lists them all with defaults and meanings.\n"
            "    --nsocks and --nthreads set TPX_NSOCKS and TPX_SOCK_WORKERS per configuration.\n"
            "\n"
            "EXAMPLES\n"
            "    %1$s\n"
            "        loopback, 256 MiB messages, verified: the quick demo\n"
            "    %1$s --sizes 64K:1G --nsocks 1,2,4,8,16 --no-verify --json sweep.json\n"
            "        the full sweep, pure throughput, with a JSON record\n"
            "    TPX_SOCKET_IFNAME=eth1 %1$s server --nsocks 4,8 --sizes 1M:256M\n"
            "    TPX_SOCKET_IFNAME=eth1 %1$s client 10.0.0.2\n"
            "        two machines\n"
            "\n"
            "EXIT STATUS\n"
            "    0  every configuration ran and (with --verify) every byte was right\n"
            "    1  the transport returned an error, data did not match, a peer went away\n"
            "       or stopped making progress, or the bootstrap failed\n"
            "    2  bad command line\n",
            NB_PROG, NB_DEFAULT_PORT, NB_MAX_SIZES, BENCH_AUTO_MAX_ITERS, NB_DEFAULT_WINDOW,
            NB_DEFAULT_TIMEOUT_S);
}

static int nb_parse_nsocks(const char *arg, nb_params_t *p)
{
    char buf[256];
    if (strlen(arg) >= sizeof(buf))
        return -1;
    strcpy(buf, arg);
    p->nnsocks = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (p->nnsocks >= NB_MAX_NSOCKS || bench_parse_uint(tok, 1, 2 * NB_MAX_NSOCKS, &v) != 0)
            return -1;
        p->nsocks[p->nnsocks++] = v;
    }
    return p->nnsocks > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    enum {
        O_DEV = 256,
        O_NSOCKS,
        O_NTHREADS,
        O_WINDOW,
        O_CHUNK,
        O_RAW,
        O_RAW_BUFFER,
        O_NAP_US,
        O_ABI,
    };
    static const struct option opts[] = {
        {"dev", required_argument, NULL, O_DEV},
        {"nsocks", required_argument, NULL, O_NSOCKS},
        {"nthreads", required_argument, NULL, O_NTHREADS},
        {"window", required_argument, NULL, O_WINDOW},
        {"chunk", required_argument, NULL, O_CHUNK},
        {"raw", no_argument, NULL, O_RAW},
        {"raw-buffer", required_argument, NULL, O_RAW_BUFFER},
        {"nap-us", required_argument, NULL, O_NAP_US},
        {"abi", required_argument, NULL, O_ABI},
        BENCH_OPTIONS_COMMON,
        {NULL, 0, NULL, 0},
    };
    static nb_main_t m;
    nb_params_t *p = &m.p;
    int loopback_flag = 0, verify = -1, run_opts = 0, raw = 0;
    uint64_t v;

    bench_prog = NB_PROG;
    m.mode = BENCH_MODE_LOOPBACK;
    m.port = NB_DEFAULT_PORT;
    p->nsizes = 1;
    p->sizes[0] = NB_DEFAULT_SIZE;
    p->nnsocks = 1;
    p->nsocks[0] = 0;
    p->iters = NB_AUTO;
    p->warmup = NB_AUTO;
    p->window = NB_DEFAULT_WINDOW;
    p->timeout_s = NB_DEFAULT_TIMEOUT_S;
    p->nthreads = NB_AUTO;
    p->abi = 12;

    const bench_opts_t bo = {.loopback = &loopback_flag,
                             .port = &m.port,
                             .sizes = p->sizes,
                             .nsizes = &p->nsizes,
                             .max_sizes = NB_MAX_SIZES,
                             .max_size = NB_MAX_SIZE,
                             .sizes_eg = "64K:1G or 4K,1M:64M",
                             .iters = &p->iters,
                             .warmup = &p->warmup,
                             .timeout_s = &p->timeout_s,
                             .verify = &verify,
                             .run_opts = &run_opts,
                             .json = &m.json,
                             .plot = &m.plot,
                             .usage = nb_usage};
    int c;
    while ((c = getopt_long(argc, argv, "hqV", opts, NULL)) != -1) {
        int orc = bench_opt(&bo, c, optarg);
        if (orc == BENCH_OPT_DONE)
            continue;
        if (orc != BENCH_OPT_OTHER)
            return orc;
        switch (c) {
        case O_DEV:
            if (bench_parse_uint(optarg, 0, 1023, &v) != 0)
                return bench_usage_error("--dev: '%s' is not a device number", optarg);
            m.dev = (int)v;
            break;
        case O_NSOCKS:
            if (nb_parse_nsocks(optarg, p) != 0)
                return bench_usage_error("--nsocks: bad list '%s' (values 1..16, or 1..%d with "
                                         "--raw, e.g. 1,2,4,8,16; at most %d)",
                                         optarg, 2 * NB_MAX_NSOCKS, NB_MAX_NSOCKS);
            run_opts = 1;
            break;
        case O_NTHREADS:
            if (bench_parse_uint(optarg, 0, 16, &v) != 0)
                return bench_usage_error("--nthreads: '%s' is not in 0..16", optarg);
            p->nthreads = v;
            run_opts = 1;
            break;
        case O_WINDOW:
            if (bench_parse_uint(optarg, 1, 256, &v) != 0)
                return bench_usage_error("--window: '%s' is not in 1..256", optarg);
            p->window = v;
            run_opts = 1;
            break;
        case O_CHUNK:
            if (bench_parse_size(optarg, &v) != 0 || v == 0 || v > INT_MAX)
                return bench_usage_error("--chunk: bad size '%s' (1 .. 2^31-1 bytes)", optarg);
            p->chunk = v;
            run_opts = 1;
            break;
        case O_RAW:
            raw = 1;
            break;
        case O_ABI:
            if (bench_parse_uint(optarg, 10, 12, &v) != 0)
                return bench_usage_error("--abi: '%s' is not 10, 11 or 12", optarg);
            p->abi = v;
            run_opts = 1;
            break;
        case O_NAP_US:
            if (bench_parse_uint(optarg, 0, 100000, &v) != 0)
                return bench_usage_error("--nap-us: '%s' is not in 0..100000", optarg);
            p->nap_us = v;
            run_opts = 1;
            break;
        case O_RAW_BUFFER:
            if (bench_parse_size(optarg, &v) != 0 || v == 0)
                return bench_usage_error("--raw-buffer: bad size '%s'", optarg);
            m.raw_buffer = v;
            break;
        default:
            fprintf(stderr, "Try '%s --help'.\n", NB_PROG);
            return BENCH_EXIT_USAGE;
        }
    }
    int role_rc = bench_parse_role(argc, argv, optind, loopback_flag, &m.mode, &m.host);
    if (role_rc != BENCH_EXIT_OK)
        return role_rc;
    p->verify = verify >= 0 ? (uint64_t)verify : m.mode == BENCH_MODE_LOOPBACK;
    if (m.plot != NULL) {
        char gnuplot[PATH_MAX];
        if (bench_gnuplot_find(gnuplot, sizeof(gnuplot)) != 0) {
            fprintf(stderr, "%s: --plot needs gnuplot, which is not on PATH: install it "
                            "(Debian: apt-get install gnuplot-nox) or drop --plot\n",
                    NB_PROG);
            return BENCH_EXIT_FAIL;
        }
    }
    m.user_set_run_opts = run_opts && m.mode == BENCH_MODE_CLIENT;

    signal(SIGPIPE, SIG_IGN);
    if (m.mode == BENCH_MODE_LOOPBACK && getenv("TPX_SOCKET_IFNAME") == NULL)
        setenv("TPX_SOCKET_IFNAME", "lo", 1);
    m.progress = !bench_quiet && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
    bench_started(m.started, sizeof(m.started));

    int rc;
    if (raw && m.mode != BENCH_MODE_LOOPBACK)
        return bench_usage_error("--raw runs on this host only (--loopback)");
    if (m.raw_buffer != 0 && !raw)
        return bench_usage_error("--raw-buffer needs --raw");
    for (uint64_t i = 0; i < p->nnsocks && !raw; i++)
        if (p->nsocks[i] > 16)
            return bench_usage_error("--nsocks: %" PRIu64 " connections: the transport takes "
                                     "1..16 (more only with --raw)",
                                     p->nsocks[i]);
    if (raw) {
        p->verify = 0;
        rc = nb_run_raw(&m);
    } else if (m.mode == BENCH_MODE_SERVER) {
        rc = nb_run_server(&m);
    } else if (m.mode == BENCH_MODE_CLIENT) {
        rc = nb_run_client(&m);
    } else {
        nb_print_header(&m);
        rc = nb_run_configs(&m, -1);
    }
    if (m.error[0] != '\0')
        rc = -1;

    const nb_row_t *best = NULL;
    int all_verified = m.nrows > 0;
    for (size_t i = 0; i < m.nrows; i++) {
        if (best == NULL || nb_row_gbps(&m.rows[i]) > nb_row_gbps(best))
            best = &m.rows[i];
        all_verified &= (int)m.rows[i].verified;
    }
    if (best != NULL) {
        char hb[32];
        printf("# best: %.3f GB/s at nsocks %" PRIu64 ", size %" PRIu64 " (%s)%s%s\n",
               nb_row_gbps(best), best->nsocks, best->size, bench_human(best->size, hb, sizeof(hb)),
               all_verified ? "; all data verified" : "",
               rc != 0 ? "; run FAILED (see above)" : "");
    }
    if (rc != 0)
        fprintf(stderr, "%s: FAILED: %s\n", NB_PROG, m.error[0] ? m.error : "see above");
    if (m.json != NULL && nb_write_json(&m) != 0 && rc == 0)
        rc = -1;
    if (m.plot != NULL && m.nrows > 0 && nb_plot(&m) != 0 && rc == 0)
        rc = -1;
    free(m.rows);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}
