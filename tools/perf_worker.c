/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_worker.c - one side of a tpx-perf run (perf.h): its engine, its
 * peer, the phases of every size, the --all-gpus lanes of one process.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "perf.h"
#include "perf_failover.h"

const char *const pf_msg_names[] = {"?", "HELLO", "PARAMS", "PORT", "GO", "RES", "ERROR"};
const bench_proto_t pf_proto = {PF_MAGIC, PF_VERSION, PF_MSG_ERROR, pf_msg_names,
                                sizeof(pf_msg_names) / sizeof(pf_msg_names[0])};

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
                       tpx_status_string(st));
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
                       w->gpu, tpx_status_string(st));
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
                   tpx_status_string(st));
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
                       s->is_send ? "tpx_send" : "tpx_recv", z->size, it, k, tpx_status_string(st));
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
                       op, z->size, it, k, tpx_status_string(st));
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
                   s->is_send ? "the pattern" : "clearing the receive buffers", tpx_status_string(st));
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
                   w->gpu, tpx_status_string(st));
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
    if (z->rx.active && z->rx.stage != NULL && pf_gpu_check(w, z, &z->rx, iters, iter0, timed) != 0)
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
        uint64_t chunk = p->chunk != 0 ? p->chunk : PF_CHUNK_DEFAULT_MAX; /* both sides alike */
        uint64_t window = p->window != 0 ? p->window : PF_WINDOW_DEFAULT_MAX;
        uint64_t set = z.stride * z.batch, pipe = p->channels * window * chunk;
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
int pf_worker(pf_worker_t *w)
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
                   p->window, tpx_status_string(st));
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
        rec.info.size = sizeof(rec.info);
        st = tpx_engine_info(w->e, &rec.info);
        if (st != TPX_OK) {
            bench_fail(&w->side, "tpx_engine_info: %s", tpx_status_string(st));
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
                bench_fail(&w->side, "tpx_peer_accept: %s", tpx_status_string(st));
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
                       tpx_status_string(st));
            goto out;
        }
    }
    for (uint64_t i = 0; i < p->nsizes; i++)
        if (pf_run_size(w, i, p->sizes[i]) != 0)
            goto out;
out:
    pf_print_failover(w->e, w->is_server ? "server" : "client");
    if (w->peer != NULL)
        tpx_peer_close(w->peer);
    tpx_engine_destroy(w->e);
    return w->side.failed ? -1 : 0;
}

/* A worker for one side (and, --all-gpus, one lane) of this process. */
void pf_worker_setup(pf_main_t *m, pf_worker_t *w, int is_server, int lane, int ctl, int out,
                     int out_rows)
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
int pf_run_lanes(pf_main_t *m, int side, int out, int out_rows)
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
