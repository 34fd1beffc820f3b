/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_rma.c - `tpx-perf --op read|write`: one-sided transfers of many
 * blocks (the KV-cache shape), through the public API only.
 *
 * The requester READs `blocks` blocks of `block` bytes from the owner's
 * exported memory (or WRITEs them there). Blocks lie at a stride of two
 * blocks on each side, in a shuffled order on the owner's side, so none
 * coalesce: each is its own descriptor, as in a paged KV cache. Reported
 * per row: the time to prepare the descriptor list (once, or every
 * iteration with --prep-each), the time from post to completion, GB/s of
 * payload (1e9 B/s), and whether every byte verified.
 *
 * Roles: loopback (requester and owner engines in one process), server
 * (the owner: exports memory and serves; never posts anything) and client
 * HOST (the requester). The two processes talk over a small TCP control
 * stream: the owner's metadata and descriptor, fills and checks.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "perf_failover.h"
#include "perf_rma.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

#define PR_MAX_ROWS 32
#define PR_MAGIC 0x54505252u /* "TPRR" */

typedef struct {
    tpx_op_t op;
    uint64_t blocks[1], block[PR_MAX_ROWS];
    uint64_t nblock, nblocks;
    uint64_t iters, warmup, inflight;
    int prep_each, verify, notif;
    int raw;     /* the raw TCP request/response row beside each row (default on) */
    int latency; /* --latency: notification latency and idle CPU too */
    uint64_t gap_ms; /* --gap: idle time before each transfer (a cold owner) */
    int mem_cuda, gpu; /* gpu: this side's GPU (--loopback: the owner's) */
    int gpu_req;       /* --loopback: the requester's GPU (--gpu A,B: B; else = gpu) */
    int channels, window;
    uint64_t chunk;
    const char *plugin, *json, *host;
    int port;
    uint64_t timeout_s;
    bench_mode_t mode;
} pr_opts_t;

/* Where the timed transfers' time went: the engines' phase counters
 * (tpx_engine_counters_t), their change over the timed iterations, per
 * transfer. Requester: post -> the owner's answer, -> the last data
 * message, -> complete; its data messages, how many carried packed blocks,
 * their average post -> done and how many were in flight on average
 * (their summed time over the timed span). Owner (loopback only; its own
 * process otherwise): checking the list, request in -> served. Both:
 * bytes copied through staging chunks and the time those copies took. */
typedef struct {
    int have, have_owner;
    double answer_us, data_us, total_us;
    double msgs, msgs_packed, msg_us, inflight;
    double check_us, served_us;
    double staged_bytes, stage_us;
} pr_phases_t;

typedef struct {
    uint64_t block, blocks, bytes, iters;
    double prep_us, xfer_avg_us, xfer_p50_us, xfer_p99_us, gbps;
    double cpu_us;                   /* process CPU per transfer (both engines in loopback) */
    double raw_p50_us, raw_p99_us;   /* raw TCP: 64 B request, reply of `bytes` (0: not run) */
    double raw_cpu_us;               /* process CPU per raw round trip */
    double notif_p50_us, notif_p99_us; /* --latency WRITE: data in the owner's memory ->
                                          tpx_engine_get_notifs() returned it (0: not run) */
    int verified;
    pr_phases_t ph;
} pr_row_t;

/* ---- memory of one side --------------------------------------------------------- */

typedef struct {
    tpx_engine_t *e;
    unsigned char *buf; /* host memory, or the host mirror of GPU memory */
    void *dev;          /* GPU memory, or NULL */
    size_t size;
    tpx_region_t *r;
    tpx_rdesc_t d;
} pr_side_t;

static int pr_engine(const pr_opts_t *o, const char *name, int port, int gpu, tpx_engine_t **e)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.plugin = o->plugin;
    p.gpu = o->mem_cuda ? gpu : -1;
    p.channels = o->channels;
    p.chunk_bytes = o->chunk;
    p.window = o->window;
    p.port = port;
    p.name = name;
    p.timeout_ms = (int)(o->timeout_s * 1000);
    if (o->mode == BENCH_MODE_LOOPBACK)
        p.bind_addr = "127.0.0.1";
    tpx_status_t st = tpx_engine_create(&p, e);
    if (st != TPX_OK) {
        fprintf(stderr, "tpx-perf: cannot create the %s engine: %s\n", name,
                tpx_status_string(st));
        return -1;
    }
    return 0;
}

static int pr_side_mem(const pr_opts_t *o, pr_side_t *s, size_t size, int gpu)
{
    s->size = size;
    s->buf = aligned_alloc(4096, (size + 4095) & ~(size_t)4095); /* a multiple of it (C11) */
    if (s->buf == NULL) {
        fprintf(stderr, "tpx-perf: cannot allocate %zu bytes\n", size);
        return -1;
    }
    memset(s->buf, 0, size);
    void *addr = s->buf;
    if (o->mem_cuda) {
        tpx_status_t st = tpx_gpu_alloc(gpu, size, &s->dev);
        if (st != TPX_OK) {
            fprintf(stderr, "tpx-perf: --mem cuda: cannot allocate %zu bytes on GPU %d: %s\n",
                    size, gpu, tpx_status_string(st));
            return -1;
        }
        addr = s->dev;
    }
    tpx_status_t st = tpx_mem_register(s->e, addr, size, o->mem_cuda ? TPX_MEM_CUDA : TPX_MEM_HOST,
                                       &s->r);
    if (st == TPX_OK)
        st = tpx_region_export(s->r, 0, 0, &s->d);
    if (st != TPX_OK) {
        fprintf(stderr, "tpx-perf: registering %zu bytes failed: %s\n", size,
                tpx_status_string(st));
        return -1;
    }
    return 0;
}

static void pr_side_free(pr_side_t *s)
{
    if (s->r != NULL)
        tpx_mem_deregister(s->r);
    tpx_gpu_free(s->dev);
    free(s->buf);
    s->r = NULL;
    s->dev = NULL;
    s->buf = NULL;
}

/* GPU memory: the host mirror goes down / comes up. */
static int pr_sync(pr_side_t *s, int down)
{
    if (s->dev == NULL)
        return 0;
    tpx_status_t st = down ? tpx_gpu_copy(s->dev, s->buf, s->size)
                           : tpx_gpu_copy(s->buf, s->dev, s->size);
    return st == TPX_OK ? 0 : -1;
}

/* ---- block layout ------------------------------------------------------------------ */

/* Block i: at 2*i*block on the requester, at 2*perm(i)*block on the owner. */
static void pr_layout(uint64_t block, uint64_t n, uint64_t *roff)
{
    for (uint64_t i = 0; i < n; i++)
        roff[i] = i;
    uint64_t s = 0x853c49e6748fea9bull ^ block ^ (n << 20);
    for (uint64_t i = n - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t j = (s >> 33) % (i + 1), t = roff[i];
        roff[i] = roff[j];
        roff[j] = t;
    }
    for (uint64_t i = 0; i < n; i++)
        roff[i] *= 2 * block;
}

static uint64_t pr_key(uint64_t iter, uint64_t i) { return iter << 32 | i; }

static void pr_fill(unsigned char *base, const uint64_t *off, uint64_t block, uint64_t n,
                    uint64_t iter)
{
    for (uint64_t i = 0; i < n; i++)
        bench_fill(base + off[i], block, pr_key(iter, i));
}

/* -1 and a message if a block is wrong. */
static int pr_check(const unsigned char *base, const uint64_t *off, uint64_t block, uint64_t n,
                    uint64_t iter, const char *who)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t csum = BENCH_FNV_BASIS, bad = 0;
        if (bench_check(base + off[i], block, pr_key(iter, i), &csum, &bad) != 0) {
            fprintf(stderr, "tpx-perf: verify failed on the %s: block %llu (iteration %llu), "
                    "byte %llu\n", who, (unsigned long long)i, (unsigned long long)iter,
                    (unsigned long long)bad);
            return -1;
        }
    }
    return 0;
}

/* ---- control stream between client and server --------------------------------------- */

/* PRM_RAW: serve a raw TCP row (a: reply bytes, b: round trips); PRM_OK a = its port. */
enum { PRM_HELLO = 1, PRM_MD, PRM_FILL, PRM_CHECK, PRM_OK, PRM_FAIL, PRM_BYE, PRM_RAW };

typedef struct {
    uint32_t magic, type;
    uint64_t a, b, c; /* per type: HELLO size; FILL/CHECK block, blocks, iter; RAW bytes, n */
    uint32_t len;     /* bytes following */
} pr_msg_t;

static int pr_send(int fd, uint32_t type, uint64_t a, uint64_t b, uint64_t c, const void *p,
                   uint32_t len)
{
    unsigned char h[40];
    bench_put64(h, (uint64_t)PR_MAGIC << 32 | type);
    bench_put64(h + 8, a);
    bench_put64(h + 16, b);
    bench_put64(h + 24, c);
    bench_put64(h + 32, len);
    if (bench_send_all(fd, h, sizeof(h)) != 0 || (len && bench_send_all(fd, p, len) != 0))
        return -1;
    return 0;
}

static int pr_recv(int fd, pr_msg_t *m, void *p, uint32_t cap, uint64_t timeout_s)
{
    unsigned char h[40];
    uint64_t deadline = bench_now_ns() + timeout_s * 1000000000ull;
    if (bench_recv_all(fd, h, sizeof(h), deadline) != 0)
        return -1;
    uint64_t w = bench_get64(h);
    m->magic = (uint32_t)(w >> 32);
    m->type = (uint32_t)w;
    m->a = bench_get64(h + 8);
    m->b = bench_get64(h + 16);
    m->c = bench_get64(h + 24);
    uint64_t len = bench_get64(h + 32);
    if (m->magic != PR_MAGIC || len > cap) {
        fprintf(stderr, "tpx-perf: malformed control message from the peer\n");
        return -1;
    }
    m->len = (uint32_t)len;
    if (len && bench_recv_all(fd, p, len, deadline) != 0)
        return -1;
    return 0;
}

/* ---- the raw TCP round trip beside each row ----------------------------------------------
 * What the wire alone costs for the same bytes: one TCP connection
 * (TCP_NODELAY), a 64-byte request answered by a reply of the transfer's
 * size, one at a time; the requester times each round trip. */

#define PR_RAW_REQ 64

static uint64_t pr_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A listener on an ephemeral port of every address; its port in *port. */
static int pr_raw_listen(int *port)
{
    char err[256];
    int lfd = bench_tcp_listen(0, err, sizeof(err));
    if (lfd < 0) {
        fprintf(stderr, "tpx-perf: raw TCP row: %s\n", err);
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) != 0) {
        close(lfd);
        return -1;
    }
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
    return lfd;
}

/* The answering side: accept one connection on lfd (closed here), answer
 * n requests with `reply` bytes each. 0 or -1. */
static int pr_raw_serve(int lfd, uint64_t reply, uint64_t n, uint64_t timeout_s)
{
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    int fd = poll(&pf, 1, (int)(timeout_s * 1000)) == 1 ? accept(lfd, NULL, NULL) : -1;
    close(lfd);
    if (fd < 0) {
        fprintf(stderr, "tpx-perf: raw TCP row: no connection\n");
        return -1;
    }
    bench_tcp_nodelay(fd);
    unsigned char req[PR_RAW_REQ];
    unsigned char *buf = calloc(1, reply);
    int rc = buf == NULL ? -1 : 0;
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        uint64_t deadline = bench_now_ns() + timeout_s * 1000000000ull;
        if (bench_recv_all(fd, req, sizeof(req), deadline) != 0 ||
            bench_send_all(fd, buf, reply) != 0)
            rc = -1;
    }
    free(buf);
    close(fd);
    return rc;
}

typedef struct {
    int lfd;
    uint64_t reply, n, timeout_s;
    int rc;
} pr_raw_srv_t;

static void *pr_raw_thread(void *arg)
{
    pr_raw_srv_t *s = arg;
    s->rc = pr_raw_serve(s->lfd, s->reply, s->n, s->timeout_s);
    return NULL;
}

/* The timing side: connect to host:port, warmup + iters round trips. */
static int pr_raw_time(const char *host, int port, const pr_opts_t *o, uint64_t reply,
                       pr_row_t *row)
{
    char err[256];
    int fd = bench_tcp_connect(host, port, "", err, sizeof(err));
    if (fd < 0) {
        fprintf(stderr, "tpx-perf: raw TCP row: %s\n", err);
        return -1;
    }
    bench_tcp_nodelay(fd);
    uint64_t total = o->warmup + o->iters, cpu0 = 0;
    uint64_t *lat = malloc(total * sizeof(*lat));
    unsigned char *buf = malloc(reply), req[PR_RAW_REQ] = {0};
    int rc = -1;
    if (lat == NULL || buf == NULL)
        goto out;
    for (uint64_t i = 0; i < total; i++) {
        if (i == o->warmup)
            cpu0 = pr_cpu_ns();
        uint64_t t0 = bench_now_ns();
        if (bench_send_all(fd, req, sizeof(req)) != 0 ||
            bench_recv_all(fd, buf, reply, t0 + o->timeout_s * 1000000000ull) != 0) {
            fprintf(stderr, "tpx-perf: raw TCP row: the connection broke\n");
            goto out;
        }
        lat[i] = bench_now_ns() - t0;
    }
    row->raw_cpu_us = (double)(pr_cpu_ns() - cpu0) / 1e3 / (double)o->iters;
    uint64_t pct[4];
    bench_percentiles(lat + o->warmup, o->iters, pct);
    row->raw_p50_us = (double)pct[1] / 1e3;
    row->raw_p99_us = (double)pct[2] / 1e3;
    rc = 0;
out:
    free(lat);
    free(buf);
    close(fd);
    return rc;
}

/* ---- the measurement ------------------------------------------------------------------ */

typedef struct {
    const pr_opts_t *o;
    pr_side_t *req;      /* requester */
    pr_side_t *own;      /* owner: loopback only (else NULL) */
    tpx_remote_t *rm;
    tpx_rdesc_t rdesc;   /* the owner's exported memory */
    int ctl;             /* client: control stream to the server */
} pr_ctx_t;

static double pr_us(uint64_t ns) { return (double)ns / 1e3; }

static int pr_owner_fill(pr_ctx_t *c, uint64_t block, uint64_t n, const uint64_t *roff,
                         uint64_t iter)
{
    if (c->own != NULL) {
        pr_fill(c->own->buf, roff, block, n, iter);
        return pr_sync(c->own, 1);
    }
    pr_msg_t m;
    unsigned char b[8];
    if (pr_send(c->ctl, PRM_FILL, block, n, iter, NULL, 0) != 0 ||
        pr_recv(c->ctl, &m, b, sizeof(b), c->o->timeout_s) != 0 || m.type != PRM_OK) {
        fprintf(stderr, "tpx-perf: the server did not fill its blocks\n");
        return -1;
    }
    return 0;
}

static int pr_owner_check(pr_ctx_t *c, uint64_t block, uint64_t n, const uint64_t *roff,
                          uint64_t iter)
{
    if (c->own != NULL)
        return pr_sync(c->own, 0) == 0 ? pr_check(c->own->buf, roff, block, n, iter, "owner") : -1;
    pr_msg_t m;
    unsigned char b[8];
    if (pr_send(c->ctl, PRM_CHECK, block, n, iter, NULL, 0) != 0 ||
        pr_recv(c->ctl, &m, b, sizeof(b), c->o->timeout_s) != 0 || m.type != PRM_OK) {
        fprintf(stderr, "tpx-perf: the server found wrong bytes (or did not answer)\n");
        return -1;
    }
    return 0;
}


/* The raw TCP row of `bytes`: in loopback against a thread of this process,
 * else against the server (PRM_RAW). */
static int pr_raw_row(pr_ctx_t *c, uint64_t bytes, pr_row_t *row)
{
    const pr_opts_t *o = c->o;
    uint64_t n = o->warmup + o->iters;
    if (c->own == NULL) {
        pr_msg_t m;
        unsigned char b[8];
        if (pr_send(c->ctl, PRM_RAW, bytes, n, 0, NULL, 0) != 0 ||
            pr_recv(c->ctl, &m, b, sizeof(b), o->timeout_s) != 0 || m.type != PRM_OK ||
            m.a == 0 || m.a > 65535) {
            fprintf(stderr, "tpx-perf: the server did not open a raw TCP row\n");
            return -1;
        }
        return pr_raw_time(o->host, (int)m.a, o, bytes, row);
    }
    int port;
    pr_raw_srv_t srv = {.reply = bytes, .n = n, .timeout_s = o->timeout_s};
    if ((srv.lfd = pr_raw_listen(&port)) < 0)
        return -1;
    pthread_t th;
    if (pthread_create(&th, NULL, pr_raw_thread, &srv) != 0) {
        close(srv.lfd);
        return -1;
    }
    int rc = pr_raw_time("127.0.0.1", port, o, bytes, row);
    pthread_join(th, NULL);
    return rc == 0 && srv.rc == 0 ? 0 : -1;
}

/*
 * --latency, loopback WRITE: how long after its data is in the owner's
 * memory tpx_engine_get_notifs() hands out a transfer's notification. The
 * requester stamps the last 8 bytes of its last block with the iteration;
 * this thread (the owner's application) watches that word in the owner's
 * memory, notes when it changes (the data is there), then polls
 * tpx_engine_get_notifs() until the notification comes. Both loops yield
 * between looks, so the result includes a scheduling delay on a busy host.
 */
#define PR_STAMP (0x54505853ull << 32) /* "TPXS" */
typedef struct {
    tpx_engine_t *e;
    const unsigned char *slot; /* the stamp's place in the owner's memory */
    uint64_t total, timeout_s;
    uint64_t *lat;             /* [total] ns */
    _Atomic uint64_t done;     /* iterations whose notification came */
    int rc;
} pr_watch_t;

static void *pr_watch_main(void *arg)
{
    pr_watch_t *w = arg;
    for (uint64_t it = 0; it < w->total; it++) {
        uint64_t want = PR_STAMP | (it + 1), deadline = bench_now_ns() + w->timeout_s * 1000000000ull;
        while (__atomic_load_n((const uint64_t *)w->slot, __ATOMIC_ACQUIRE) != want) {
            if (bench_now_ns() > deadline)
                goto fail;
            sched_yield();
        }
        uint64_t t_data = bench_now_ns();
        tpx_notif_t nt;
        size_t k = 0;
        while (tpx_engine_get_notifs(w->e, &nt, 1, &k) == TPX_OK && k == 0) {
            if (bench_now_ns() > deadline)
                goto fail;
            sched_yield();
        }
        if (k != 1)
            goto fail;
        w->lat[it] = bench_now_ns() - t_data;
        atomic_store(&w->done, it + 1);
    }
    return NULL;
fail:
    fprintf(stderr, "tpx-perf: --latency: no data or notification within --timeout\n");
    w->rc = -1;
    atomic_store(&w->done, UINT64_MAX);
    return NULL;
}

static void pr_counters(tpx_engine_t *e, tpx_engine_counters_t *ct)
{
    *ct = (tpx_engine_counters_t){.size = sizeof(*ct)};
    if (e != NULL)
        (void)tpx_engine_counters(e, ct);
}

/* The phases of the transfers completed over `span_ns`, from two snapshots of the
 * requester's (r0, r1) and the owner's (o0, o1) counters. */
static void pr_phases(const tpx_engine_counters_t *r0, const tpx_engine_counters_t *r1,
                      const tpx_engine_counters_t *o0, const tpx_engine_counters_t *o1,
                      int owner, uint64_t span_ns, pr_phases_t *ph)
{
    /* per transfer completed between the snapshots (with --inflight > 1 the
     * first of them may have been posted before the timed span) */
    double done = (double)(r1->rma_done - r0->rma_done);
    double msgs = (double)(r1->rma_msgs - r0->rma_msgs);
    if (done <= 0)
        return;
    ph->have = 1;
    ph->answer_us = (double)(r1->rma_ns_answer - r0->rma_ns_answer) / 1e3 / done;
    ph->data_us = (double)(r1->rma_ns_data - r0->rma_ns_data) / 1e3 / done;
    ph->total_us = (double)(r1->rma_ns_total - r0->rma_ns_total) / 1e3 / done;
    ph->msgs = msgs / done;
    ph->msgs_packed = (double)(r1->rma_msgs_packed - r0->rma_msgs_packed) / done;
    ph->msg_us = msgs > 0 ? (double)(r1->rma_msg_ns - r0->rma_msg_ns) / 1e3 / msgs : 0;
    ph->inflight = span_ns > 0 ? (double)(r1->rma_msg_ns - r0->rma_msg_ns) / (double)span_ns : 0;
    ph->staged_bytes = (double)(r1->rma_bytes_staged - r0->rma_bytes_staged) / done;
    ph->stage_us = (double)(r1->rma_stage_ns - r0->rma_stage_ns) / 1e3 / done;
    if (!owner)
        return;
    double served = (double)(o1->rma_served - o0->rma_served);
    ph->have_owner = served > 0;
    if (served > 0) {
        ph->check_us = (double)(o1->rma_check_ns - o0->rma_check_ns) / 1e3 / served;
        ph->served_us = (double)(o1->rma_served_ns - o0->rma_served_ns) / 1e3 / served;
    }
    ph->staged_bytes += (double)(o1->rma_bytes_staged - o0->rma_bytes_staged) / done;
    ph->stage_us += (double)(o1->rma_stage_ns - o0->rma_stage_ns) / 1e3 / done;
}

static int pr_row(pr_ctx_t *c, uint64_t block, uint64_t n, pr_row_t *row)
{
    const pr_opts_t *o = c->o;
    uint64_t *loff = malloc(n * sizeof(*loff)), *roff = malloc(n * sizeof(*roff));
    tpx_iov_t *iov = malloc(n * sizeof(*iov));
    uint64_t total = o->warmup + o->iters;
    uint64_t *lat = malloc(total * sizeof(*lat));
    tpx_xfer_t **fly = calloc(o->inflight, sizeof(*fly));
    uint64_t *t_post = calloc(o->inflight, sizeof(*t_post));
    int rc = -1;
    if (!loff || !roff || !iov || !lat || !fly || !t_post)
        goto out;
    for (uint64_t i = 0; i < n; i++)
        loff[i] = 2 * i * block;
    pr_layout(block, n, roff);
    for (uint64_t i = 0; i < n; i++)
        iov[i] = (tpx_iov_t){.local = c->req->r, .local_offset = loff[i], .remote = &c->rdesc,
                             .remote_offset = roff[i], .len = block};
    if (o->op == TPX_OP_READ && o->verify && pr_owner_fill(c, block, n, roff, 0) != 0)
        goto out;
    tpx_prep_t *prep = NULL;
    uint64_t prep_ns = 0, nprep = 0;
    uint64_t t0 = bench_now_ns();
    tpx_status_t st = tpx_xfer_prepare(c->rm, o->op, iov, n, &prep);
    prep_ns += bench_now_ns() - t0;
    nprep++;
    if (st != TPX_OK) {
        fprintf(stderr, "tpx-perf: tpx_xfer_prepare: %s\n", tpx_status_string(st));
        goto out;
    }
    char note[32];
    bench_progress_t prog;
    uint64_t bytes = block * n, timed_ns = 0, tstart = 0, cpu0 = 0, cpu_ns = 0;
    tpx_engine_counters_t ctr_r0 = {0}, ctr_r1 = {0}, ctr_o0 = {0}, ctr_o1 = {0};
    int verified = o->verify;
    /* --latency WRITE in loopback: the owner's application watches for the
     * data and its notification (pr_watch_main) */
    pr_watch_t watch = {.e = c->own != NULL ? c->own->e : NULL, .total = total,
                        .timeout_s = o->timeout_s};
    pthread_t watch_th;
    int watching = 0;
    if (o->latency && o->notif && o->op == TPX_OP_WRITE && c->own != NULL && !o->mem_cuda) {
        watch.slot = c->own->buf + roff[n - 1] + block - 8;
        watch.lat = calloc(total, sizeof(*watch.lat));
        if (watch.lat == NULL || pthread_create(&watch_th, NULL, pr_watch_main, &watch) != 0) {
            free(watch.lat);
            goto out_prep;
        }
        watching = 1;
    }
    /* With verification, one transfer at a time (each checked); else
     * keep `inflight` posted. */
    uint64_t depth = o->verify ? 1 : o->inflight;
    uint64_t posted = 0, done = 0;
    bench_progress_start(&prog, bench_now_ns());
    while (done < total) {
        while (posted < total && posted - done < depth) {
            uint64_t it = posted;
            if (o->verify && o->op == TPX_OP_WRITE) {
                pr_fill(c->req->buf, loff, block, n, it);
                if (pr_sync(c->req, 1) != 0)
                    goto out_prep;
            } else if (o->verify) {
                for (uint64_t i = 0; i < n; i++)
                    memset(c->req->buf + loff[i], 0, block);
                if (pr_sync(c->req, 1) != 0)
                    goto out_prep;
            }
            if (watching) {
                /* the previous notification first; then this one's stamp */
                while (atomic_load(&watch.done) < it)
                    sched_yield();
                if (atomic_load(&watch.done) == UINT64_MAX)
                    goto out_prep;
                uint64_t stamp = PR_STAMP | (it + 1);
                memcpy(c->req->buf + loff[n - 1] + block - 8, &stamp, 8);
            }
            if (o->gap_ms > 0) {
                struct timespec ts = {.tv_sec = (time_t)(o->gap_ms / 1000),
                                      .tv_nsec = (long)(o->gap_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            if (it == o->warmup) {
                pr_counters(c->req->e, &ctr_r0);
                pr_counters(c->own != NULL ? c->own->e : NULL, &ctr_o0);
                tstart = bench_now_ns();
                cpu0 = pr_cpu_ns();
            }
            if (o->prep_each && it > 0) {
                tpx_prep_release(prep);
                t0 = bench_now_ns();
                st = tpx_xfer_prepare(c->rm, o->op, iov, n, &prep);
                prep_ns += bench_now_ns() - t0;
                nprep++;
                if (st != TPX_OK)
                    goto out;
            }
            int nl = o->notif ? snprintf(note, sizeof(note), "it%llu", (unsigned long long)it) : 0;
            t_post[it % o->inflight] = bench_now_ns();
            st = tpx_xfer_post(prep, o->notif ? note : NULL, (size_t)nl, 0,
                               &fly[it % o->inflight]);
            if (st != TPX_OK) {
                fprintf(stderr, "tpx-perf: tpx_xfer_post: %s\n", tpx_status_string(st));
                goto out_prep;
            }
            posted++;
        }
        uint64_t it = done;
        tpx_xfer_t *x = fly[it % o->inflight];
        st = tpx_xfer_wait(x, (int)(o->timeout_s * 1000), NULL);
        uint64_t now = bench_now_ns();
        lat[it] = now - t_post[it % o->inflight];
        tpx_xfer_release(x);
        fly[it % o->inflight] = NULL;
        if (st != TPX_OK) {
            fprintf(stderr, "tpx-perf: %s of %llu blocks: %s\n",
                    o->op == TPX_OP_READ ? "READ" : "WRITE", (unsigned long long)n,
                    st == TPX_INPROGRESS ? "not done within --timeout" : tpx_status_string(st));
            goto out_prep;
        }
        done++;
        if (done == total) {
            timed_ns = now - tstart;
            cpu_ns = pr_cpu_ns() - cpu0;
            pr_counters(c->req->e, &ctr_r1);
            pr_counters(c->own != NULL ? c->own->e : NULL, &ctr_o1);
        }
        if (o->verify && o->op == TPX_OP_READ) {
            if (pr_sync(c->req, 0) != 0 || pr_check(c->req->buf, loff, block, n, 0, "requester"))
                goto out_prep;
        } else if (o->verify && (c->own != NULL || done == total)) {
            if (pr_owner_check(c, block, n, roff, it) != 0)
                goto out_prep;
        }
        if (bench_progress_due(&prog, now))
            bench_progress_draw(&prog, "%s %s x %llu: %llu/%llu",
                                o->op == TPX_OP_READ ? "READ" : "WRITE",
                                bench_human(block, note, sizeof(note)), (unsigned long long)n,
                                (unsigned long long)done, (unsigned long long)total);
    }
    bench_progress_clear(&prog);
    uint64_t pct[4];
    bench_percentiles(lat + o->warmup, o->iters, pct);
    double sum = 0;
    for (uint64_t i = o->warmup; i < total; i++)
        sum += (double)lat[i];
    *row = (pr_row_t){.block = block, .blocks = n, .bytes = bytes, .iters = o->iters,
                      .prep_us = pr_us(prep_ns) / (double)nprep,
                      .xfer_avg_us = sum / (double)o->iters / 1e3,
                      .xfer_p50_us = pr_us(pct[1]), .xfer_p99_us = pr_us(pct[2]),
                      /* verifying: the checks between transfers are not timed */
                      .gbps = (double)(bytes * o->iters) / (depth == 1 ? sum : (double)timed_ns),
                      .cpu_us = (double)cpu_ns / 1e3 / (double)o->iters,
                      .verified = verified};
    pr_phases(&ctr_r0, &ctr_r1, &ctr_o0, &ctr_o1, c->own != NULL, timed_ns, &row->ph);
    if (watching) {
        pthread_join(watch_th, NULL);
        watching = 0;
        if (watch.rc != 0)
            goto out_prep;
        bench_percentiles(watch.lat + o->warmup, o->iters, pct);
        row->notif_p50_us = pr_us(pct[1]);
        row->notif_p99_us = pr_us(pct[2]);
    }
    if (o->raw && pr_raw_row(c, bytes, row) != 0)
        goto out_prep;
    rc = 0;
out_prep:
    for (uint64_t i = 0; i < o->inflight; i++)
        if (fly[i] != NULL) {
            (void)tpx_xfer_wait(fly[i], (int)(o->timeout_s * 1000), NULL);
            tpx_xfer_release(fly[i]);
        }
    tpx_prep_release(prep);
    if (watching) {
        /* a failed run: the watcher gives up at its deadline */
        pthread_join(watch_th, NULL);
    }
    free(watch.lat);
out:
    free(loff);
    free(roff);
    free(iov);
    free(lat);
    free(fly);
    free(t_post);
    return rc;
}

/* ---- output ------------------------------------------------------------------------ */

static void pr_print(const pr_opts_t *o, const pr_row_t *rows, int n)
{
    static const bench_col_t cols[] = {{"op", 5},       {"block", 9},    {"blocks", 7},
                                       {"bytes", 11},   {"prep_us", 9},  {"xfer_us", 9},
                                       {"p50_us", 9},   {"p99_us", 9},   {"GB/s", 7},
                                       {"cpu_us", 8},   {"raw_p50", 8},  {"raw_p99", 8},
                                       {"x_raw", 6},    {"raw_cpu", 8},  {"ntf_p50", 8},
                                       {"ntf_p99", 8},  {"verified", 8}};
    enum { NC = sizeof(cols) / sizeof(cols[0]) };
    printf("# tpx-perf --op %s, %s, %s memory, %llu iterations (+%llu warm-up), %s "
           "preparation, GB/s = 1e9 B/s of payload\n",
           o->op == TPX_OP_READ ? "read" : "write", bench_mode_name(o->mode),
           o->mem_cuda ? "cuda" : "host", (unsigned long long)o->iters,
           (unsigned long long)o->warmup, o->prep_each ? "per-iteration" : "one");
    printf("# cpu_us: CPU of this process per transfer (%s); raw_*: raw TCP round trip, "
           "64 B request, reply of `bytes`, TCP_NODELAY, one connection, same run; "
           "x_raw = p50 / raw_p50; ntf_*: data in the owner's memory -> "
           "tpx_engine_get_notifs() (--latency, loopback WRITE); us\n",
           o->mode == BENCH_MODE_LOOPBACK ? "both engines" : "the requester");
    bench_table_header(stdout, cols, NC);
    for (int i = 0; i < n; i++) {
        char cell[NC][BENCH_CELL];
        snprintf(cell[0], BENCH_CELL, "%s", o->op == TPX_OP_READ ? "read" : "write");
        bench_human(rows[i].block, cell[1], BENCH_CELL);
        snprintf(cell[2], BENCH_CELL, "%llu", (unsigned long long)rows[i].blocks);
        snprintf(cell[3], BENCH_CELL, "%llu", (unsigned long long)rows[i].bytes);
        snprintf(cell[4], BENCH_CELL, "%.1f", rows[i].prep_us);
        snprintf(cell[5], BENCH_CELL, "%.1f", rows[i].xfer_avg_us);
        snprintf(cell[6], BENCH_CELL, "%.1f", rows[i].xfer_p50_us);
        snprintf(cell[7], BENCH_CELL, "%.1f", rows[i].xfer_p99_us);
        snprintf(cell[8], BENCH_CELL, "%.2f", rows[i].gbps);
        snprintf(cell[9], BENCH_CELL, "%.1f", rows[i].cpu_us);
        int raw = rows[i].raw_p50_us > 0, ntf = rows[i].notif_p50_us > 0;
        snprintf(cell[10], BENCH_CELL, raw ? "%.1f" : "-", rows[i].raw_p50_us);
        snprintf(cell[11], BENCH_CELL, raw ? "%.1f" : "-", rows[i].raw_p99_us);
        snprintf(cell[12], BENCH_CELL, raw ? "%.1f" : "-", rows[i].xfer_p50_us / rows[i].raw_p50_us);
        snprintf(cell[13], BENCH_CELL, raw ? "%.1f" : "-", rows[i].raw_cpu_us);
        snprintf(cell[14], BENCH_CELL, ntf ? "%.1f" : "-", rows[i].notif_p50_us);
        snprintf(cell[15], BENCH_CELL, ntf ? "%.1f" : "-", rows[i].notif_p99_us);
        snprintf(cell[16], BENCH_CELL, "%s", rows[i].verified ? "yes" : "off");
        bench_table_row(stdout, cols, NC, cell);
    }
    /* where the time went (pr_phases_t), one line per row */
    for (int i = 0; i < n; i++) {
        const pr_phases_t *ph = &rows[i].ph;
        char b[BENCH_CELL], m[BENCH_CELL];
        if (!ph->have)
            continue;
        bench_human(rows[i].block, b, sizeof(b));
        bench_human((uint64_t)(ph->msgs > 0 ? (double)rows[i].bytes / ph->msgs : 0), m, sizeof(m));
        printf("# phases %s %s: post->answer %.1f us, ->last data %.1f us, ->done %.1f us; "
               "%.1f data messages (%.1f packed, ~%s each) %.1f us each, %.1f in flight",
               o->op == TPX_OP_READ ? "read" : "write", b, ph->answer_us, ph->data_us,
               ph->total_us, ph->msgs, ph->msgs_packed, m, ph->msg_us, ph->inflight);
        if (ph->have_owner)
            printf("; owner: list check %.1f us, request in->served %.1f us", ph->check_us,
                   ph->served_us);
        printf("; staged copies %.0f B in %.1f us\n", ph->staged_bytes, ph->stage_us);
    }
    fflush(stdout);
}

static int pr_json(const pr_opts_t *o, const pr_row_t *rows, int n)
{
    FILE *f = strcmp(o->json, "-") == 0 ? stdout : fopen(o->json, "w");
    if (f == NULL) {
        fprintf(stderr, "tpx-perf: --json %s: %s\n", o->json, strerror(errno));
        return -1;
    }
    fprintf(f, "{\"tool\": \"tpx-perf\", \"version\": ");
    bench_json_str(f, tpx_version_string());
    fprintf(f, ", \"op\": \"%s\", \"mode\": \"%s\", \"config\": {",
            o->op == TPX_OP_READ ? "read" : "write", bench_mode_name(o->mode));
    fprintf(f, "\"mem\": \"%s\", ", o->mem_cuda ? "cuda" : "host");
    bench_json_u64(f, "iters", o->iters, 1);
    bench_json_u64(f, "warmup", o->warmup, 1);
    bench_json_u64(f, "inflight", o->inflight, 1);
    bench_json_u64(f, "prep_each", (uint64_t)o->prep_each, 1);
    bench_json_u64(f, "notif", (uint64_t)o->notif, 1);
    bench_json_u64(f, "verify", (uint64_t)o->verify, 1);
    bench_json_u64(f, "channels", (uint64_t)o->channels, 1);
    bench_json_u64(f, "chunk", o->chunk, 1);
    bench_json_u64(f, "window", (uint64_t)o->window, 0);
    fprintf(f, ", \"env\": ");
    bench_json_env(f, NULL);
    fprintf(f, "}, \"system\": {");
    bench_json_sysinfo(f);
    fprintf(f, "}, \"rows\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{", i ? ", " : "");
        bench_json_u64(f, "block", rows[i].block, 1);
        bench_json_u64(f, "blocks", rows[i].blocks, 1);
        bench_json_u64(f, "bytes", rows[i].bytes, 1);
        bench_json_u64(f, "iters", rows[i].iters, 1);
        bench_json_dbl(f, "prep_us", rows[i].prep_us, 1);
        bench_json_dbl(f, "xfer_us_avg", rows[i].xfer_avg_us, 1);
        bench_json_dbl(f, "xfer_us_p50", rows[i].xfer_p50_us, 1);
        bench_json_dbl(f, "xfer_us_p99", rows[i].xfer_p99_us, 1);
        bench_json_dbl(f, "gbps", rows[i].gbps, 1);
        bench_json_dbl(f, "cpu_us", rows[i].cpu_us, 1);
        if (rows[i].raw_p50_us > 0) {
            bench_json_dbl(f, "raw_us_p50", rows[i].raw_p50_us, 1);
            bench_json_dbl(f, "raw_us_p99", rows[i].raw_p99_us, 1);
            bench_json_dbl(f, "raw_cpu_us", rows[i].raw_cpu_us, 1);
        }
        if (rows[i].notif_p50_us > 0) {
            bench_json_dbl(f, "notif_us_p50", rows[i].notif_p50_us, 1);
            bench_json_dbl(f, "notif_us_p99", rows[i].notif_p99_us, 1);
        }
        const pr_phases_t *ph = &rows[i].ph;
        if (ph->have) {
            fprintf(f, "\"phases\": {");
            bench_json_dbl(f, "answer_us", ph->answer_us, 1);
            bench_json_dbl(f, "last_data_us", ph->data_us, 1);
            bench_json_dbl(f, "done_us", ph->total_us, 1);
            bench_json_dbl(f, "msgs", ph->msgs, 1);
            bench_json_dbl(f, "msgs_packed", ph->msgs_packed, 1);
            bench_json_dbl(f, "msg_us", ph->msg_us, 1);
            bench_json_dbl(f, "msgs_in_flight", ph->inflight, 1);
            if (ph->have_owner) {
                bench_json_dbl(f, "owner_check_us", ph->check_us, 1);
                bench_json_dbl(f, "owner_served_us", ph->served_us, 1);
            }
            bench_json_dbl(f, "staged_bytes", ph->staged_bytes, 1);
            bench_json_dbl(f, "stage_us", ph->stage_us, 0);
            fprintf(f, "}, ");
        }
        fprintf(f, "\"verified\": %s}", rows[i].verified ? "true" : "false");
    }
    fprintf(f, "]}\n");
    if (f != stdout)
        fclose(f);
    return 0;
}

/* ---- roles --------------------------------------------------------------------------- */

static uint64_t pr_max_bytes(const pr_opts_t *o)
{
    uint64_t m = 0;
    for (uint64_t i = 0; i < o->nblock; i++)
        m = o->block[i] > m ? o->block[i] : m;
    return 2 * m * o->blocks[0];
}

static int pr_requester(pr_ctx_t *c)
{
    const pr_opts_t *o = c->o;
    pr_row_t rows[PR_MAX_ROWS];
    for (uint64_t i = 0; i < o->nblock; i++)
        if (pr_row(c, o->block[i], o->blocks[0], &rows[i]) != 0)
            return 1;
    pr_print(o, rows, (int)o->nblock);
    if (o->latency) {
        /* the idle engine(s): past the owner's hot polling after the last
         * transfer, CPU of this process over one second */
        struct timespec ts = {.tv_sec = 1, .tv_nsec = 200 * 1000000L};
        nanosleep(&ts, NULL);
        uint64_t c0 = pr_cpu_ns(), t0 = bench_now_ns();
        ts = (struct timespec){.tv_sec = 1};
        nanosleep(&ts, NULL);
        double pct = 100.0 * (double)(pr_cpu_ns() - c0) / (double)(bench_now_ns() - t0);
        printf("# idle: %s used %.2f%% of a core over 1 s (1.2 s after the last transfer)\n",
               c->own != NULL ? "both engines" : "the requester's engine", pct);
    }
    if (o->json != NULL && pr_json(o, rows, (int)o->nblock) != 0)
        return 1;
    return 0;
}

static int pr_loopback(const pr_opts_t *o)
{
    pr_side_t req = {0}, own = {0};
    pr_ctx_t c = {.o = o, .req = &req, .own = &own, .ctl = -1};
    int rc = 1;
    size_t size = pr_max_bytes(o);
    if (pr_engine(o, "requester", TPX_PORT_EPHEMERAL, o->gpu_req, &req.e) != 0 ||
        pr_engine(o, "owner", TPX_PORT_EPHEMERAL, o->gpu, &own.e) != 0 ||
        pr_side_mem(o, &req, size, o->gpu_req) != 0 || pr_side_mem(o, &own, size, o->gpu) != 0)
        goto out;
    unsigned char blob[TPX_METADATA_MAX];
    size_t len = sizeof(blob);
    if (tpx_engine_get_metadata(own.e, blob, &len) != TPX_OK ||
        tpx_remote_load(req.e, blob, len, &c.rm) != TPX_OK)
        goto out;
    c.rdesc = own.d;
    rc = pr_requester(&c);
    tpx_remote_release(c.rm);
out:
    pf_print_failover(req.e, "requester");
    pf_print_failover(own.e, "owner");
    pr_side_free(&req);
    pr_side_free(&own);
    tpx_engine_destroy(req.e);
    tpx_engine_destroy(own.e);
    return rc;
}

static int pr_client(const pr_opts_t *o)
{
    char err[256];
    pr_side_t req = {0};
    pr_ctx_t c = {.o = o, .req = &req, .ctl = -1};
    int rc = 1;
    c.ctl = bench_tcp_connect(o->host, o->port, " (is `tpx-perf --op ... server` running?)",
                              err, sizeof(err));
    if (c.ctl < 0) {
        fprintf(stderr, "tpx-perf: %s\n", err);
        return 1;
    }
    bench_tcp_nodelay(c.ctl);
    size_t size = pr_max_bytes(o);
    unsigned char buf[TPX_METADATA_MAX + TPX_RDESC_SIZE];
    pr_msg_t m;
    if (pr_send(c.ctl, PRM_HELLO, size, (uint64_t)o->mem_cuda, 0, NULL, 0) != 0 ||
        pr_recv(c.ctl, &m, buf, sizeof(buf), o->timeout_s) != 0 || m.type != PRM_MD ||
        m.len <= TPX_RDESC_SIZE) {
        fprintf(stderr, "tpx-perf: no metadata from the server at %s:%d\n", o->host, o->port);
        goto out;
    }
    memcpy(c.rdesc.bytes, buf + m.len - TPX_RDESC_SIZE, TPX_RDESC_SIZE);
    if (pr_engine(o, "client", TPX_PORT_EPHEMERAL, o->gpu, &req.e) != 0 ||
        pr_side_mem(o, &req, size, o->gpu) != 0)
        goto out;
    if (tpx_remote_load(req.e, buf, m.len - TPX_RDESC_SIZE, &c.rm) != TPX_OK)
        goto out;
    rc = pr_requester(&c);
    tpx_remote_release(c.rm);
    (void)pr_send(c.ctl, PRM_BYE, 0, 0, 0, NULL, 0);
out:
    pf_print_failover(req.e, "requester");
    close(c.ctl);
    pr_side_free(&req);
    tpx_engine_destroy(req.e);
    return rc;
}

/* The owner: serves one client, then exits. */
static int pr_server(const pr_opts_t *o)
{
    char err[256];
    int lfd = bench_tcp_listen(o->port, err, sizeof(err));
    if (lfd < 0) {
        fprintf(stderr, "tpx-perf: %s\n", err);
        return 1;
    }
    printf("# tpx-perf --op server: waiting for a client on port %d\n", o->port);
    fflush(stdout);
    int fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (fd < 0) {
        fprintf(stderr, "tpx-perf: accept: %s\n", strerror(errno));
        return 1;
    }
    bench_tcp_nodelay(fd);
    pr_side_t own = {0};
    int rc = 1;
    pr_msg_t m;
    unsigned char buf[TPX_METADATA_MAX + TPX_RDESC_SIZE];
    if (pr_recv(fd, &m, buf, sizeof(buf), o->timeout_s) != 0 || m.type != PRM_HELLO ||
        m.a == 0 || m.a > (64ull << 30)) {
        fprintf(stderr, "tpx-perf: the client did not say hello\n");
        goto out;
    }
    pr_opts_t so = *o;
    so.mem_cuda = (int)m.b && o->mem_cuda;
    if (pr_engine(&so, "server", TPX_PORT_DEFAULT, so.gpu, &own.e) != 0 ||
        pr_side_mem(&so, &own, (size_t)m.a, so.gpu) != 0)
        goto out;
    size_t len = TPX_METADATA_MAX;
    if (tpx_engine_get_metadata(own.e, buf, &len) != TPX_OK)
        goto out;
    memcpy(buf + len, own.d.bytes, TPX_RDESC_SIZE);
    if (pr_send(fd, PRM_MD, 0, 0, 0, buf, (uint32_t)(len + TPX_RDESC_SIZE)) != 0)
        goto out;
    for (;;) {
        if (pr_recv(fd, &m, buf, sizeof(buf), 24 * 3600) != 0)
            goto out;
        if (m.type == PRM_BYE)
            break;
        if (m.type == PRM_RAW) {
            int rport;
            int rl = m.a == 0 || m.a > own.size || m.b == 0 || m.b > 2000000 ? -1
                                                                              : pr_raw_listen(&rport);
            if (rl < 0 || pr_send(fd, PRM_OK, (uint64_t)rport, 0, 0, NULL, 0) != 0 ||
                pr_raw_serve(rl, m.a, m.b, o->timeout_s) != 0) {
                fprintf(stderr, "tpx-perf: the raw TCP row failed\n");
                goto out;
            }
            continue;
        }
        uint64_t block = m.a, n = m.b;
        if ((m.type != PRM_FILL && m.type != PRM_CHECK) || block == 0 || n == 0 ||
            2 * block * n > own.size) {
            fprintf(stderr, "tpx-perf: bad request from the client\n");
            goto out;
        }
        uint64_t *roff = malloc(n * sizeof(*roff));
        if (roff == NULL)
            goto out;
        pr_layout(block, n, roff);
        int ok;
        if (m.type == PRM_FILL) {
            pr_fill(own.buf, roff, block, n, m.c);
            ok = pr_sync(&own, 1) == 0;
        } else {
            ok = pr_sync(&own, 0) == 0 && pr_check(own.buf, roff, block, n, m.c, "owner") == 0;
        }
        free(roff);
        if (pr_send(fd, ok ? PRM_OK : PRM_FAIL, 0, 0, 0, NULL, 0) != 0)
            goto out;
    }
    tpx_engine_counters_t ctr = {.size = sizeof(ctr)};
    if (tpx_engine_counters(own.e, &ctr) == TPX_OK)
        printf("# served %llu request(s), refused %llu; %llu B read, %llu B written\n",
               (unsigned long long)ctr.rma_served, (unsigned long long)ctr.rma_rejected,
               (unsigned long long)ctr.rma_bytes_out, (unsigned long long)ctr.rma_bytes_in);
    rc = 0;
out:
    pf_print_failover(own.e, "owner");
    close(fd);
    pr_side_free(&own);
    tpx_engine_destroy(own.e);
    return rc;
}

/* ---- options ----------------------------------------------------------------------------- */

const char perf_rma_usage[] =
    "One-sided mode (--op): READ or WRITE many blocks of the owner's exported memory\n"
    "  --op read|write       the requester reads the owner's blocks / writes into them\n"
    "  --block SIZES         block size(s): 16K, or 16K,128K,2M (one row each; default 16K)\n"
    "  --blocks N            blocks per transfer (default 1000); each is its own\n"
    "                        descriptor (blocks never adjacent, shuffled on the owner)\n"
    "  --iters N, --warmup N timed transfers per row (default 100) and untimed first ones (10)\n"
    "  --inflight N          transfers posted at once without --verify (default 1)\n"
    "  --prep-each           prepare the descriptor list before every transfer (the cost a\n"
    "                        per-request preparation pays); default: prepare once, post many\n"
    "  --notif               attach a notification to every transfer\n"
    "  --no-raw              leave out the raw TCP round trip of each row (64 B request,\n"
    "                        reply of the row's bytes, TCP_NODELAY, one connection)\n"
    "  --latency             one transfer at a time, no verification; a WRITE carries a\n"
    "                        notification and (loopback) the time from its data in the\n"
    "                        owner's memory to tpx_engine_get_notifs() is measured; then\n"
    "                        the CPU an idle engine uses over 1 s\n"
    "  --gap MS              sleep MS before each transfer, so that it finds the engines\n"
    "                        idle (the latency of a lone request; one at a time)\n"
    "  --verify/--no-verify  check every byte of every transfer (default on in loopback)\n"
    "  --gpu N | A,B         the GPU of --mem cuda; in loopback A,B puts the owner on GPU A\n"
    "                        and the requester on GPU B (N = N,N)\n"
    "  --mem host|cuda, --channels N, --chunk B, --window N, --plugin P,\n"
    "  --timeout S, --json FILE, --port P (control port, default 18515)\n"
    "  roles: loopback (default; both engines in this process), server (the owner: serves one\n"
    "  client), client HOST (the requester)\n"
    "  After the table, one \"# phases\" line per row (--json: \"phases\"), from the engines'\n"
    "  counters (tpx_engine_counters_t) over the timed transfers, per transfer: post -> the\n"
    "  owner's answer, -> the last data message, -> done; the data messages (how many carried\n"
    "  packed blocks, their size, their time each and how many were in flight on average);\n"
    "  the owner's list check and request in -> served (loopback, or in the server's process);\n"
    "  bytes copied through staging chunks and the time those copies took\n";

int perf_rma_main(int argc, char **argv)
{
    pr_opts_t o = {.blocks = {1000}, .block = {16384}, .nblock = 1, .iters = 100, .warmup = 10,
                   .inflight = 1, .verify = -1, .raw = 1, .gpu = 0, .port = 18515, .timeout_s = 60};
    int first_pos = argc, ngpu_arg = 0;
    bench_prog = "tpx-perf";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u;
#define NEED()                                                                                     \
    do {                                                                                           \
        if (v == NULL)                                                                             \
            return bench_usage_error("%s needs a value", a);                                       \
        i++;                                                                                       \
    } while (0)
        if (strcmp(a, "--op") == 0) {
            NEED();
            if (strcmp(v, "read") == 0)
                o.op = TPX_OP_READ;
            else if (strcmp(v, "write") == 0)
                o.op = TPX_OP_WRITE;
            else
                return bench_usage_error("--op %s: expected read or write", v);
        } else if (strcmp(a, "--block") == 0) {
            NEED();
            if (bench_parse_sizes(v, o.block, PR_MAX_ROWS, 64ull << 20, &o.nblock) != 0)
                return bench_usage_error("--block %s: expected sizes such as 16K,128K,2M "
                                         "(each at most 64 MiB)", v);
        } else if (strcmp(a, "--blocks") == 0) {
            NEED();
            if (bench_parse_uint(v, 1, TPX_RMA_MAX_IOVS, &o.blocks[0]) != 0)
                return bench_usage_error("--blocks %s: expected 1..%u", v, TPX_RMA_MAX_IOVS);
        } else if (strcmp(a, "--iters") == 0 || strcmp(a, "--warmup") == 0 ||
                   strcmp(a, "--inflight") == 0 || strcmp(a, "--timeout") == 0) {
            NEED();
            uint64_t lo = strcmp(a, "--warmup") == 0 ? 0 : 1;
            uint64_t hi = strcmp(a, "--inflight") == 0 ? 64 : 1000000;
            if (bench_parse_uint(v, lo, hi, &u) != 0)
                return bench_usage_error("%s %s: expected %llu..%llu", a, v,
                                         (unsigned long long)lo, (unsigned long long)hi);
            if (a[2] == 'i' && a[3] == 't')
                o.iters = u;
            else if (a[2] == 'w')
                o.warmup = u;
            else if (a[2] == 'i')
                o.inflight = u;
            else
                o.timeout_s = u;
        } else if (strcmp(a, "--prep-each") == 0) {
            o.prep_each = 1;
        } else if (strcmp(a, "--notif") == 0) {
            o.notif = 1;
        } else if (strcmp(a, "--no-raw") == 0) {
            o.raw = 0;
        } else if (strcmp(a, "--latency") == 0) {
            o.latency = 1;
        } else if (strcmp(a, "--gap") == 0) {
            NEED();
            if (bench_parse_uint(v, 1, 60000, &o.gap_ms) != 0)
                return bench_usage_error("--gap %s: expected 1..60000 (ms)", v);
            o.inflight = 1;
        } else if (strcmp(a, "--verify") == 0) {
            o.verify = 1;
        } else if (strcmp(a, "--no-verify") == 0) {
            o.verify = 0;
        } else if (strcmp(a, "--mem") == 0) {
            NEED();
            if (strcmp(v, "host") != 0 && strcmp(v, "cuda") != 0)
                return bench_usage_error("--mem %s: expected host or cuda", v);
            o.mem_cuda = strcmp(v, "cuda") == 0;
        } else if (strcmp(a, "--gpu") == 0) {
            NEED();
            int g[2];
            ngpu_arg = bench_parse_gpus(v, 1023, g);
            if (ngpu_arg == 0)
                return bench_usage_error("--gpu %s: expected N or A,B (0..1023)", v);
            o.gpu = g[0];
            o.gpu_req = ngpu_arg == 2 ? g[1] : g[0];
        } else if (strcmp(a, "--channels") == 0 ||
                   strcmp(a, "--window") == 0 || strcmp(a, "--port") == 0) {
            NEED();
            uint64_t hi = strcmp(a, "--port") == 0 ? 65535 : 32;
            if (bench_parse_uint(v, 1, hi, &u) != 0)
                return bench_usage_error("%s %s: out of range", a, v);
            if (a[2] == 'c')
                o.channels = (int)u;
            else if (a[2] == 'w')
                o.window = (int)u;
            else
                o.port = (int)u;
        } else if (strcmp(a, "--chunk") == 0) {
            NEED();
            if (bench_parse_size(v, &o.chunk) != 0 || o.chunk < 4096 || o.chunk > (4u << 20))
                return bench_usage_error("--chunk %s: expected 4K..4M", v);
        } else if (strcmp(a, "--plugin") == 0) {
            NEED();
            o.plugin = v;
        } else if (strcmp(a, "--json") == 0) {
            NEED();
            o.json = v;
        } else if (a[0] == '-' && strcmp(a, "--loopback") != 0) {
            return bench_usage_error("%s is not an option of the one-sided mode (--op)", a);
        } else if (strcmp(a, "--loopback") != 0 && first_pos == argc) {
            first_pos = i;
        }
#undef NEED
    }
    if (o.op == 0)
        return bench_usage_error("--op needs read or write");
    o.mode = BENCH_MODE_LOOPBACK;
    if (first_pos < argc) {
        if (strcmp(argv[first_pos], "server") == 0) {
            o.mode = BENCH_MODE_SERVER;
        } else if (strcmp(argv[first_pos], "client") == 0 && first_pos + 1 < argc) {
            o.mode = BENCH_MODE_CLIENT;
            o.host = argv[first_pos + 1];
        } else if (strcmp(argv[first_pos], "loopback") != 0) {
            return bench_usage_error("unexpected '%s': the role is loopback, server or client "
                                     "HOST", argv[first_pos]);
        }
    }
    if (o.latency) {
        if (o.verify == 1)
            return bench_usage_error("--latency times one transfer at a time without "
                                     "verification: leave out --verify");
        o.verify = 0;
        o.inflight = 1;
        o.notif |= o.op == TPX_OP_WRITE;
    }
    if (o.gap_ms > 0)
        o.inflight = 1;
    if (ngpu_arg == 2 && o.mode != BENCH_MODE_LOOPBACK)
        return bench_usage_error("--gpu A,B places the two engines of --loopback; a server or "
                                 "client has one: --gpu N");
    if (o.verify < 0)
        o.verify = o.mode == BENCH_MODE_LOOPBACK;
    if (pr_max_bytes(&o) > (32ull << 30))
        return bench_usage_error("--block x --blocks needs more than 16 GiB per side");
    if (o.mem_cuda) {
        int ngpu = 0;
        if (tpx_gpu_count(&ngpu) != TPX_OK || o.gpu >= ngpu || o.gpu_req >= ngpu) {
            fprintf(stderr, "tpx-perf: --mem cuda: no CUDA GPU %d on this machine\n",
                    o.gpu >= ngpu ? o.gpu : o.gpu_req);
            return 1;
        }
    }
    switch (o.mode) {
    case BENCH_MODE_SERVER:
        return pr_server(&o);
    case BENCH_MODE_CLIENT:
        return pr_client(&o);
    default:
        return pr_loopback(&o);
    }
}
