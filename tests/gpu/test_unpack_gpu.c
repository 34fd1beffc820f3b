/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_unpack_gpu.c - the GPU unpack: correctness, then throughput.
 *
 * Correctness: the kernel (and the d2d mode) against the CPU reference on
 * random fragment lists (random alignments, lengths 1..4096, 1..2048
 * fragments per request, 1..16 requests per launch, shuffled descriptor
 * order), on an exhaustive alignment x length sweep, and at offsets past
 * 4 GiB. The destination is poisoned (0xA5) first, so a byte written
 * outside a fragment shows up as well as a byte missing inside one.
 * Descriptors and jobs live in host-mapped memory laid out exactly as the
 * plugin's netUnpackMeta, and rows are rewritten between launches.
 *
 * Throughput: 64 MiB delivered as 4 KiB pages in shuffled bounce order,
 * unpacked by the kernel in several batchings, by the d2d mode, and copied
 * by one cuMemcpyDtoD of the same 64 MiB in the same run; one table.
 *
 * Exits 77 (ctest: skipped) without a CUDA driver, a device, or a kernel
 * in this build; 1 on any wrong byte.
 *
 * usage: test_unpack_gpu [--device N] [--rounds N] [--seed N] [--iters N]
 *                        [--no-bench] [--bench-only] [--require-ratio R]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/tpx_test.h"
#include "common/config.h"
#include "common/log.h"
#include "gpu/cuda.h"
#include "tpx/tpx.h"
#include "unpack/unpack.h"
#include "unpack/unpack_gpu.h"

#define SKIP      77
#define POISON    0xA5
#define MAX_JOBS  TPX_NCCL_UNPACK_QUEUE_DEPTH /* 16 */
#define MAX_FRAGS TPX_NCCL_UNPACK_MAX_PAGES   /* 2048 */
#define PAGE      4096u
#define GUARD     64u /* poisoned bytes checked before and after each request */
/* src_off range of one request, and destination room of one request. */
#define BOUNCE_PER_JOB ((size_t)MAX_FRAGS * PAGE + 64)
#define DST_PER_JOB    ((size_t)MAX_FRAGS * (PAGE + 16) + 4 * GUARD)
#define MIB            (1024.0 * 1024.0)

/* ---- randomness ------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    return test_xorshift64s(&rng_state);
}

static uint32_t rnd_below(uint32_t n)
{
    return (uint32_t)(rnd() % n);
}

static void fill_random(unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = rnd();
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++)
        p[i] = (unsigned char)rnd();
}

static void shuffle_u32(uint32_t *a, uint32_t n)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = rnd_below(i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* ---- the fixture -------------------------------------------------------------------- */

typedef struct {
    int dev;
    CUstream stream;
    tpx_nccl_unpack_meta_t *meta; /* host-mapped: the plugin's queue layout */
    CUdeviceptr meta_d;
    tpx_unpack_job_t *jobs; /* host-mapped */
    CUdeviceptr jobs_d;
    /* correctness buffers */
    unsigned char *bounce_h; /* what the device bounce holds */
    tpx__cuda_mem_t bounce;
    tpx__cuda_mem_t dst;
    unsigned char *expect; /* one request's destination window */
    unsigned char *got;    /* pinned */
} fixture_t;

/* What one request of a round looks like, for checking. */
typedef struct {
    uint32_t nfrags;
    size_t bounce_at; /* job's bounce base, from the start of the bounce buffer */
    size_t dst_at;    /* job's dst base, from the start of the dst buffer */
    size_t used;      /* bytes after dst base that fragments may touch */
} req_t;

static CUdeviceptr meta_row_d(const fixture_t *fx, int row)
{
    return fx->meta_d + (CUdeviceptr)((const char *)fx->meta->mem[row] - (const char *)fx->meta);
}

static void set_job(fixture_t *fx, int j, CUdeviceptr frags, CUdeviceptr bounce, CUdeviceptr dst,
                    uint32_t n)
{
    fx->jobs[j].frags = (const tpx_nccl_load_meta_t *)(uintptr_t)frags;
    fx->jobs[j].bounce = (const char *)(uintptr_t)bounce;
    fx->jobs[j].dst = (char *)(uintptr_t)dst;
    fx->jobs[j].nfrags = n;
    fx->jobs[j].reserved = 0;
}

static const tpx_unpack_job_t *jobs_at(const fixture_t *fx, int first)
{
    return (const tpx_unpack_job_t *)(uintptr_t)(fx->jobs_d +
                                                 (CUdeviceptr)first * sizeof(tpx_unpack_job_t));
}

/* Compare request j of the last round with the CPU reference. */
static int check_request(fixture_t *fx, int round, const char *what, int j, const req_t *r)
{
    size_t lo = r->dst_at - GUARD;
    size_t n = GUARD + r->used + GUARD;
    REQUIRE_OK(TPX_CU(cuMemcpyDtoH, fx->got, fx->dst.ptr + lo, n));
    memset(fx->expect, POISON, n);
    /* The CPU reference, on the host copy of the bounce buffer. */
    tpx__unpack_cpu(fx->expect + GUARD, fx->bounce_h + r->bounce_at, fx->meta->mem[j], r->nfrags);
    if (memcmp(fx->expect, fx->got, n) == 0)
        return 0;
    size_t at = 0;
    while (fx->expect[at] == fx->got[at])
        at++;
    int64_t rel = (int64_t)at - GUARD; /* from the job's dst base */
    fprintf(stderr, "%s round %d request %d (%u frags): byte %" PRId64 " is 0x%02x, want 0x%02x",
            what, round, j, r->nfrags, rel, fx->got[at], fx->expect[at]);
    for (uint32_t k = 0; k < r->nfrags; k++) {
        const tpx_nccl_load_meta_t *m = &fx->meta->mem[j][k];
        if (rel >= 0 && (uint64_t)rel >= m->f.dst_off && (uint64_t)rel < m->f.dst_off + m->f.len) {
            fprintf(stderr,
                    " (fragment %u: src_off %u len %u dst_off %" PRIu64 ", src%%16 %u dst%%16 %u)",
                    k, m->f.src_off, m->f.len, m->f.dst_off,
                    (unsigned)((fx->bounce.ptr + r->bounce_at + m->f.src_off) & 15),
                    (unsigned)((fx->dst.ptr + r->dst_at + m->f.dst_off) & 15));
            break;
        }
    }
    fprintf(stderr, "\n");
    ADD_FAILURE("%s round %d request %d differs from the CPU reference", what, round, j);
    return 1;
}

typedef enum { MODE_KERNEL, MODE_D2D } run_mode_t;

/* Run the round described by fx->meta rows 0..njobs-1 and reqs; check it. */
static int run_round(fixture_t *fx, int round, run_mode_t mode, int njobs, const req_t *reqs,
                     uint32_t max_frags, int inline_jobs)
{
    REQUIRE_OK(TPX_CU(cuMemsetD8Async, fx->dst.ptr, POISON, fx->dst.size, fx->stream));
    for (int j = 0; j < njobs; j++)
        set_job(fx, j, meta_row_d(fx, j), fx->bounce.ptr + reqs[j].bounce_at,
                fx->dst.ptr + reqs[j].dst_at, reqs[j].nfrags);
    if (mode == MODE_KERNEL && inline_jobs) {
        REQUIRE_OK(tpx__unpack_gpu_launch_inline(fx->dev, fx->jobs, (uint32_t)njobs, max_frags,
                                                 fx->stream));
    } else if (mode == MODE_KERNEL) {
        REQUIRE_OK(tpx__unpack_gpu_launch(fx->dev, jobs_at(fx, 0), (uint32_t)njobs, max_frags,
                                          fx->stream));
    } else {
        for (int j = 0; j < njobs; j++)
            REQUIRE_OK(
                tpx__unpack_gpu_d2d(fx->dev, (void *)(uintptr_t)(fx->dst.ptr + reqs[j].dst_at),
                                    (const void *)(uintptr_t)(fx->bounce.ptr + reqs[j].bounce_at),
                                    fx->meta->mem[j], reqs[j].nfrags, fx->stream));
    }
    REQUIRE_OK(TPX_CU(cuStreamSynchronize, fx->stream));
    int bad = 0;
    const char *what = mode == MODE_D2D ? "d2d" : inline_jobs ? "kernel (inline jobs)" : "kernel";
    for (int j = 0; j < njobs && bad < 3; j++)
        bad += check_request(fx, round, what, j, &reqs[j]);
    return bad;
}

/* One random round: returns the number of bad requests. */
static int random_round(fixture_t *fx, int round, run_mode_t mode, uint64_t *frags_done)
{
    static uint32_t order[MAX_FRAGS], lens[MAX_FRAGS];
    req_t reqs[MAX_JOBS];
    int njobs = 1 + (int)rnd_below(MAX_JOBS);
    uint32_t max_frags = 0;
    for (int j = 0; j < njobs; j++) {
        uint32_t n;
        switch (rnd_below(8)) {
        case 0:
            n = MAX_FRAGS;
            break;
        case 1:
            n = 1 + rnd_below(8);
            break;
        case 2:
            n = rnd_below(16) == 0 ? 0 : 1 + rnd_below(MAX_FRAGS);
            break;
        default:
            n = 1 + rnd_below(MAX_FRAGS);
            break;
        }
        int shape = (int)rnd_below(4); /* pages / any / small / mixed */
        for (uint32_t k = 0; k < n; k++) {
            switch (shape) {
            case 0:
                lens[k] = PAGE;
                break;
            case 1:
                lens[k] = 1 + rnd_below(PAGE);
                break;
            case 2:
                lens[k] = 1 + rnd_below(64);
                break;
            default:
                lens[k] = rnd_below(2) ? PAGE - rnd_below(32) : 1 + rnd_below(PAGE);
                break;
            }
            order[k] = k;
        }
        shuffle_u32(order, n); /* descriptors arrive in any order */
        req_t *r = &reqs[j];
        r->nfrags = n;
        r->bounce_at = (size_t)j * BOUNCE_PER_JOB + rnd_below(16);
        r->dst_at = (size_t)j * DST_PER_JOB + GUARD + rnd_below(16);
        uint64_t pos = 0;
        for (uint32_t k = 0; k < n; k++) {
            uint32_t len = lens[k];
            uint64_t dst_off = pos + (rnd_below(4) == 0 ? rnd_below(16) : 0);
            size_t src_room = BOUNCE_PER_JOB - 16 - r->bounce_at % 16 - len;
            uint32_t src_off = rnd_below((uint32_t)src_room);
            if (rnd_below(2)) { /* half the time: the same alignment as the destination */
                uint64_t want = fx->dst.ptr + r->dst_at + dst_off;
                uint64_t have = fx->bounce.ptr + r->bounce_at + src_off;
                src_off += (uint32_t)((want - have) & 15);
                if (src_off >= src_room)
                    src_off -= 16;
            }
            tpx_nccl_load_meta_t *m = &fx->meta->mem[j][order[k]];
            m->f.src_off = src_off;
            m->f.len = len;
            m->f.dst_off = dst_off;
            pos = dst_off + len;
        }
        r->used = pos;
        max_frags = TPX_MAX(max_frags, n);
        *frags_done += n;
    }
    /* Sometimes understate max_frags: the kernel must stride, not drop. */
    if (max_frags > 1 && rnd_below(8) == 0)
        max_frags = 1 + rnd_below(max_frags - 1);
    return run_round(fx, round, mode, njobs, reqs, max_frags, round & 1);
}

/* Every source alignment x destination alignment x awkward length. */
static int sweep_round(fixture_t *fx, run_mode_t mode, int inline_jobs, uint64_t *frags_done)
{
    static const uint32_t lens[] = {1,    2,    3,    4,    5,    7,    8,    9,   15,
                                    16,   17,   31,   32,   33,   47,   48,   63,  64,
                                    65,   127,  128,  129,  255,  256,  257,  511, 1000,
                                    1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096};
    req_t reqs[MAX_JOBS];
    uint32_t max_frags = 0;
    for (int j = 0; j < MAX_JOBS; j++) { /* job j: source addresses = j mod 16 */
        req_t *r = &reqs[j];
        r->bounce_at = (size_t)j * BOUNCE_PER_JOB;
        r->dst_at = (size_t)j * DST_PER_JOB + GUARD;
        uint32_t n = 0;
        uint64_t pos = 0, src = 0;
        for (uint32_t dm = 0; dm < 16; dm++) {
            for (size_t li = 0; li < TPX_ARRAY_SIZE(lens); li++) {
                uint64_t dst_off = pos + 1; /* at least one poisoned byte between */
                dst_off += (dm - (fx->dst.ptr + r->dst_at + dst_off) % 16 + 16) % 16;
                uint64_t src_off =
                    src + ((uint64_t)j - (fx->bounce.ptr + r->bounce_at + src) % 16 + 16) % 16;
                tpx_nccl_load_meta_t *m = &fx->meta->mem[j][n++];
                m->f.src_off = (uint32_t)src_off;
                m->f.len = lens[li];
                m->f.dst_off = dst_off;
                pos = dst_off + lens[li];
                src = src_off + lens[li] + 1;
            }
        }
        r->nfrags = n;
        r->used = pos;
        max_frags = TPX_MAX(max_frags, n);
        *frags_done += n;
    }
    return run_round(fx, -1, mode, MAX_JOBS, reqs, max_frags, inline_jobs);
}

/* Offsets past 4 GiB in the destination and near 4 GiB in the source. */
static int big_offsets(fixture_t *fx)
{
    const uint64_t G4 = 4ull << 30;
    const size_t window = 1u << 20;
    size_t free_b = 0, total_b = 0;
    REQUIRE_OK(TPX_CU(cuMemGetInfo, &free_b, &total_b));
    if (free_b < 2 * G4 + (1ull << 30)) {
        printf("  large offsets: skipped (%.1f GiB free)\n", free_b / (MIB * 1024));
        return 0;
    }
    tpx__cuda_mem_t bb, db;
    REQUIRE_OK(tpx__cuda_mem_alloc(fx->dev, G4 + window, &bb));
    REQUIRE_OK(tpx__cuda_mem_alloc(fx->dev, G4 + 2 * window, &db));
    /* The source window [4 GiB - 1 MiB, 4 GiB + 1 MiB) holds random data. */
    const uint64_t src_lo = G4 - window;
    unsigned char *src_h = malloc(2 * window);
    unsigned char *exp_h = malloc(2 * window);
    unsigned char *got_h = malloc(2 * window);
    if (!src_h || !exp_h || !got_h) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    fill_random(src_h, 2 * window);
    /* A synchronous copy from pageable memory may return before its DMA
     * lands, and the test's stream does not wait for the legacy stream. */
    REQUIRE_OK(TPX_CU(cuMemcpyHtoD, bb.ptr + src_lo, src_h, window));
    REQUIRE_OK(TPX_CU(cuCtxSynchronize));
    REQUIRE_OK(TPX_CU(cuMemsetD8Async, db.ptr + G4, POISON, 2 * window, fx->stream));
    tpx_nccl_load_meta_t cpu[256];
    uint32_t n = 256;
    uint64_t pos = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t len = 1 + rnd_below(PAGE);
        uint64_t src_off = src_lo + rnd_below((uint32_t)(window - len));
        if (k == n - 1)
            src_off = 0xFFFFFFFFull - len + 1; /* ends at the last u32 offset */
        uint64_t dst_off = G4 + 16 + pos + rnd_below(16);
        tpx_nccl_load_meta_t *m = &fx->meta->mem[0][k];
        m->f.src_off = (uint32_t)src_off;
        m->f.len = len;
        m->f.dst_off = dst_off;
        cpu[k] = *m;
        cpu[k].f.src_off = (uint32_t)(src_off - src_lo);
        cpu[k].f.dst_off = dst_off - G4;
        pos = dst_off + len - G4 - 16;
    }
    set_job(fx, 0, meta_row_d(fx, 0), bb.ptr, db.ptr, n);
    REQUIRE_OK(tpx__unpack_gpu_launch(fx->dev, jobs_at(fx, 0), 1, n, fx->stream));
    REQUIRE_OK(TPX_CU(cuStreamSynchronize, fx->stream));
    REQUIRE_OK(TPX_CU(cuMemcpyDtoH, got_h, db.ptr + G4, 2 * window));
    memset(exp_h, POISON, 2 * window);
    tpx__unpack_cpu(exp_h, src_h, cpu, n);
    int bad = memcmp(exp_h, got_h, 2 * window) != 0;
    printf("  large offsets (src_off up to 0xffffffff, dst_off > 4 GiB): %s\n",
           bad ? "FAILED" : "ok");
    EXPECT(!bad, "large offsets differ from the CPU reference");
    free(src_h);
    free(exp_h);
    free(got_h);
    tpx__cuda_mem_free(&bb);
    tpx__cuda_mem_free(&db);
    return bad;
}

static void correctness(fixture_t *fx, int rounds)
{
    size_t bounce_bytes = (size_t)MAX_JOBS * BOUNCE_PER_JOB;
    size_t dst_bytes = (size_t)MAX_JOBS * DST_PER_JOB;
    fx->bounce_h = malloc(bounce_bytes);
    fx->expect = malloc(DST_PER_JOB);
    if (!fx->bounce_h || !fx->expect) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    REQUIRE_OK(tpx__cuda_host_alloc(fx->dev, DST_PER_JOB, (void **)&fx->got, NULL));
    REQUIRE_OK(tpx__cuda_mem_alloc(fx->dev, bounce_bytes, &fx->bounce));
    REQUIRE_OK(tpx__cuda_mem_alloc(fx->dev, dst_bytes, &fx->dst));
    fill_random(fx->bounce_h, bounce_bytes);
    REQUIRE_OK(TPX_CU(cuMemcpyHtoD, fx->bounce.ptr, fx->bounce_h, bounce_bytes));
    REQUIRE_OK(TPX_CU(cuCtxSynchronize));

    uint64_t frags = 0;
    int bad = sweep_round(fx, MODE_KERNEL, 0, &frags);
    bad += sweep_round(fx, MODE_KERNEL, 1, &frags);
    bad += sweep_round(fx, MODE_D2D, 0, &frags);
    printf("  alignment sweep (16 src x 16 dst alignments x 35 lengths): %s\n",
           bad ? "FAILED" : "ok");

    uint64_t t0 = tpx__now_ns();
    int bad_rounds = 0;
    uint64_t kfrags = 0, dfrags = 0;
    for (int i = 0; i < rounds && bad_rounds < 5; i++)
        bad_rounds += random_round(fx, i, MODE_KERNEL, &kfrags) != 0;
    for (int i = 0; i < rounds / 10 + 1 && bad_rounds < 5; i++)
        bad_rounds += random_round(fx, i, MODE_D2D, &dfrags) != 0;
    printf("  random rounds: %d kernel (%" PRIu64 " fragments), %d d2d (%" PRIu64
           " fragments), %.1f s: %s\n",
           rounds, kfrags, rounds / 10 + 1, dfrags, (tpx__now_ns() - t0) / 1e9,
           bad_rounds ? "FAILED" : "ok");
    big_offsets(fx);

    free(fx->bounce_h);
    free(fx->expect);
    tpx__cuda_host_free(fx->dev, fx->got);
    tpx__cuda_mem_free(&fx->bounce);
    tpx__cuda_mem_free(&fx->dst);
}

/* ---- throughput ------------------------------------------------------------------------ */

#define BENCH_BYTES (64u << 20)

typedef struct {
    const char *name;
    uint32_t frag; /* fragment bytes */
    int reqs_per_launch;
    uint32_t dst_shift; /* destination misaligned by this much */
    int inline_jobs;    /* tpx__unpack_gpu_launch_inline */
    int d2d;            /* d2d mode instead of the kernel */
    int memcpy;         /* one cuMemcpyDtoD instead */
} bench_cfg_t;

typedef struct {
    double gbs;
    int launches;
} bench_res_t;

/* Lay 64 MiB out as MAX_JOBS requests of frag-byte fragments, the source
 * pages shuffled through the bounce buffer as TCPX delivers them. */
static void bench_layout(fixture_t *fx, const bench_cfg_t *c, tpx__cuda_mem_t *b,
                         tpx__cuda_mem_t *d, uint32_t *perm)
{
    uint32_t total = BENCH_BYTES / c->frag, per = total / MAX_JOBS;
    for (uint32_t i = 0; i < total; i++)
        perm[i] = i;
    shuffle_u32(perm, total);
    for (int j = 0; j < MAX_JOBS; j++) {
        for (uint32_t k = 0; k < per; k++) {
            tpx_nccl_load_meta_t *m = &fx->meta->mem[j][k];
            m->f.src_off = perm[(uint32_t)j * per + k] * c->frag;
            m->f.len = c->frag;
            m->f.dst_off = ((uint64_t)j * per + k) * c->frag;
        }
        set_job(fx, j, meta_row_d(fx, j), b->ptr, d->ptr + c->dst_shift, per);
    }
}

static tpx_status_t bench_once(fixture_t *fx, const bench_cfg_t *c, tpx__cuda_mem_t *b,
                               tpx__cuda_mem_t *d, int *launches)
{
    uint32_t per = BENCH_BYTES / c->frag / MAX_JOBS;
    tpx_status_t st = TPX_OK;
    *launches = 0;
    if (c->memcpy) {
        *launches = 1;
        return TPX_CU(cuMemcpyDtoDAsync, d->ptr, b->ptr, BENCH_BYTES, fx->stream);
    }
    for (int j = 0; j < MAX_JOBS && st == TPX_OK; j += c->d2d ? 1 : c->reqs_per_launch) {
        if (c->d2d) {
            st = tpx__unpack_gpu_d2d(fx->dev, (void *)(uintptr_t)(d->ptr + c->dst_shift),
                                     (const void *)(uintptr_t)b->ptr, fx->meta->mem[j], per,
                                     fx->stream);
            *launches += (int)per;
        } else if (c->inline_jobs) {
            st = tpx__unpack_gpu_launch_inline(fx->dev, fx->jobs + j, (uint32_t)c->reqs_per_launch,
                                               per, fx->stream);
            *launches += 1;
        } else {
            st = tpx__unpack_gpu_launch(fx->dev, jobs_at(fx, j), (uint32_t)c->reqs_per_launch, per,
                                        fx->stream);
            *launches += 1;
        }
    }
    return st;
}

static bench_res_t bench_run(fixture_t *fx, const bench_cfg_t *c, tpx__cuda_mem_t *b,
                             tpx__cuda_mem_t *d, uint32_t *perm, int iters)
{
    bench_res_t res = {0, 0};
    CUevent e0, e1;
    bench_layout(fx, c, b, d, perm);
    REQUIRE_OK(tpx__cuda_event_create(fx->dev, 1, &e0));
    REQUIRE_OK(tpx__cuda_event_create(fx->dev, 1, &e1));
    for (int w = 0; w < 3; w++)
        REQUIRE_OK(bench_once(fx, c, b, d, &res.launches));
    REQUIRE_OK(TPX_CU(cuStreamSynchronize, fx->stream));
    if (!c->memcpy) { /* what was timed must also be right */
        unsigned char *hb = malloc(BENCH_BYTES + 64), *hd = malloc(BENCH_BYTES + 64);
        unsigned char *he = malloc(BENCH_BYTES + 64);
        if (!hb || !hd || !he) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
        REQUIRE_OK(TPX_CU(cuMemcpyDtoH, hb, b->ptr, BENCH_BYTES));
        REQUIRE_OK(TPX_CU(cuMemcpyDtoH, hd, d->ptr + c->dst_shift, BENCH_BYTES));
        uint32_t per = BENCH_BYTES / c->frag / MAX_JOBS;
        for (int j = 0; j < MAX_JOBS; j++)
            tpx__unpack_cpu(he, hb, fx->meta->mem[j], per);
        EXPECT(memcmp(he, hd, BENCH_BYTES) == 0,
               "bench '%s': destination differs from the CPU reference", c->name);
        free(hb);
        free(hd);
        free(he);
    }
    float best_ms = 0;
    for (int trial = 0; trial < 3; trial++) {
        float ms = 0;
        REQUIRE_OK(tpx__cuda_event_record(e0, fx->stream));
        for (int i = 0; i < iters; i++)
            REQUIRE_OK(bench_once(fx, c, b, d, &res.launches));
        REQUIRE_OK(tpx__cuda_event_record(e1, fx->stream));
        REQUIRE_OK(tpx__cuda_event_sync(e1));
        REQUIRE_OK(TPX_CU(cuEventElapsedTime, &ms, e0, e1));
        if (trial == 0 || ms < best_ms)
            best_ms = ms;
    }
    res.gbs = (double)BENCH_BYTES * iters / (best_ms / 1e3) / 1e9;
    tpx__cuda_event_destroy(fx->dev, e0);
    tpx__cuda_event_destroy(fx->dev, e1);
    return res;
}

static int throughput(fixture_t *fx, int iters, const char *gpu, double require_ratio)
{
    /* name, fragment, requests per launch, dst shift, inline jobs, d2d, memcpy */
    static const bench_cfg_t cfgs[] = {
        {"cuMemcpyDtoD, one 64 MiB copy", PAGE, 0, 0, 0, 0, 1},
        {"kernel 16x1024x4K, inline jobs", PAGE, 16, 0, 1, 0, 0},
        {"kernel 16x1024x4K, mapped jobs", PAGE, 16, 0, 0, 0, 0},
        {"kernel 4x1024x4K, inline jobs", PAGE, 4, 0, 1, 0, 0},
        {"kernel 1x1024x4K, inline jobs", PAGE, 1, 0, 1, 0, 0},
        {"kernel 16x2048x2K, inline jobs", PAGE / 2, 16, 0, 1, 0, 0},
        {"kernel 16x1024x4K, dst+1 (shifted)", PAGE, 16, 1, 1, 0, 0},
        {"d2d: cuMemcpyDtoDAsync per 4K", PAGE, 1, 0, 0, 1, 0},
    };
    bench_res_t res[TPX_ARRAY_SIZE(cfgs)];
    tpx__cuda_mem_t b, d;
    uint32_t *perm = malloc(sizeof(uint32_t) * (BENCH_BYTES / (PAGE / 2)));
    if (!perm) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    REQUIRE_OK(tpx__cuda_mem_alloc(fx->dev, BENCH_BYTES, &b));
    REQUIRE_OK(tpx__cuda_mem_alloc(fx->dev, BENCH_BYTES + 64, &d));
    {
        unsigned char *h = malloc(BENCH_BYTES);
        if (!h) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
        fill_random(h, BENCH_BYTES);
        REQUIRE_OK(TPX_CU(cuMemcpyHtoD, b.ptr, h, BENCH_BYTES));
        REQUIRE_OK(TPX_CU(cuCtxSynchronize));
        free(h);
    }
    for (size_t i = 0; i < TPX_ARRAY_SIZE(cfgs); i++)
        res[i] =
            bench_run(fx, &cfgs[i], &b, &d, perm, cfgs[i].d2d ? TPX_MAX(iters / 10, 2) : iters);
    tpx__cuda_mem_free(&b);
    tpx__cuda_mem_free(&d);
    free(perm);

    double base = res[0].gbs, ratio = res[1].gbs / base, ratio_mapped = res[2].gbs / base;
    printf("\n== unpack throughput: %s, 64 MiB per iteration, best of 3 x %d iterations ==\n", gpu,
           iters);
    printf("   (GB/s = bytes delivered / time; source pages shuffled; descriptors and jobs in "
           "host-mapped memory)\n");
    printf("%-36s %12s %10s %9s\n", "mode", "calls/64MiB", "GB/s", "vs DtoD");
    for (size_t i = 0; i < TPX_ARRAY_SIZE(cfgs); i++)
        printf("%-36s %12d %10.1f %9.3f\n", cfgs[i].name, res[i].launches, res[i].gbs,
               res[i].gbs / base);
    printf("kernel 16x1024x4K (1 launch per 64 MiB) / cuMemcpyDtoD: inline jobs %.3f, mapped "
           "jobs %.3f (goal >= 0.90: %s)\n",
           ratio, ratio_mapped, ratio >= 0.90 ? "met" : "NOT met");
    if (require_ratio > 0 && ratio < require_ratio) {
        fprintf(stderr, "throughput ratio %.3f below the required %.3f\n", ratio, require_ratio);
        return 1;
    }
    return 0;
}

/* ---- main ------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    int dev = 0, rounds = 200, iters = 50, bench = 1, check = 1;
    double require_ratio = 0;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            dev = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--require-ratio") && i + 1 < argc)
            require_ratio = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-bench"))
            bench = 0;
        else if (!strcmp(argv[i], "--bench-only"))
            check = 0;
        else {
            fprintf(stderr,
                    "usage: %s [--device N] [--rounds N] [--seed N] [--iters N] [--no-bench] "
                    "[--bench-only] [--require-ratio R]\n",
                    argv[0]);
            return 2;
        }
    }
    iters = TPX_MAX(iters, 1);
    rng_state = seed ? seed : 1;
    if (tpx__config_load() < 0)
        return 1;

    if (tpx__cuda_init() < 0) {
        printf("SKIP: %s\n", tpx__cuda_error_reason());
        return SKIP;
    }
    if (!tpx__unpack_gpu_built()) {
        printf("SKIP: tpx was built without the GPU unpack kernel\n");
        return SKIP;
    }
    if (dev < 0 || dev >= tpx__cuda_device_count()) {
        printf("SKIP: no CUDA device %d (%d present)\n", dev, tpx__cuda_device_count());
        return SKIP;
    }

    fixture_t fx;
    memset(&fx, 0, sizeof(fx));
    fx.dev = dev;
    char name[128], bus[32], gpu[320];
    int sms = 0, ccmaj = 0, ccmin = 0, pushed = 0;
    REQUIRE_OK(tpx__cuda_ctx_retain(dev, NULL));
    REQUIRE_OK(tpx__cuda_ctx_enter(dev, &pushed));
    REQUIRE_OK(tpx__cuda_device_name(dev, name, sizeof(name)));
    REQUIRE_OK(tpx__cuda_device_pci_bus_id(dev, bus, sizeof(bus)));
    REQUIRE_OK(tpx__cuda_device_attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &sms));
    REQUIRE_OK(tpx__cuda_device_attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &ccmaj));
    REQUIRE_OK(tpx__cuda_device_attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &ccmin));
    int drv = tpx__cuda_driver_version();
    snprintf(gpu, sizeof(gpu), "%s (sm_%d%d, %d SMs, %s, driver API %d.%d)", name, ccmaj, ccmin,
             sms, bus, drv / 1000, (drv % 1000) / 10);
    printf("GPU %d: %s; seed %" PRIu64 "\n", dev, gpu, seed);

    tpx_status_t st = tpx__unpack_gpu_init(dev);
    if (st < 0) {
        printf("FAIL: the unpack kernel does not load on this GPU: %s\n", tpx_status_string(st));
        return 1;
    }
    REQUIRE_OK(tpx__cuda_stream_create(dev, &fx.stream));
    REQUIRE_OK(
        tpx__cuda_host_alloc(dev, sizeof(tpx_nccl_unpack_meta_t), (void **)&fx.meta, &fx.meta_d));
    REQUIRE_OK(tpx__cuda_host_alloc(dev, MAX_JOBS * sizeof(tpx_unpack_job_t), (void **)&fx.jobs,
                                    &fx.jobs_d));

    int rc = 0;
    if (check) {
        printf("correctness:\n");
        correctness(&fx, rounds);
    }
    if (bench)
        rc = throughput(&fx, iters, gpu, require_ratio);

    tpx__cuda_host_free(dev, fx.meta);
    tpx__cuda_host_free(dev, fx.jobs);
    tpx__cuda_stream_destroy(dev, fx.stream);
    tpx__unpack_gpu_fini(dev);
    tpx__cuda_ctx_leave(pushed);
    tpx__cuda_ctx_release(dev);
    if (test_failed()) {
        printf("FAIL: %d check(s) failed (seed %" PRIu64 ")\n", test_failed(), seed);
        return 1;
    }
    printf("%s\n", rc ? "FAIL: throughput below the required ratio" : "ok");
    return rc;
}
