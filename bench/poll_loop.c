/*
 * poll_loop.c - GB/s of one-sided READs completed by a caller that polls
 * tpx_xfer_poll() in a tight loop, against one that yields between polls
 * and one that blocks in tpx_xfer_wait(). Two engines with progress
 * threads in this process, on 127.0.0.1; one request of N blocks (every
 * other block of the owner's region: not coalesced) prepared once, checked
 * once, then posted --iters times, each polled until done. The modes take
 * turns for --rounds rounds; the median of each is printed.
 *
 *   build: gcc -O2 -Iinclude bench/poll_loop.c build/release/lib/libtpx.a -lpthread -ldl
 *   run:   ./a.out [--blocks 100] [--size 16384] [--iters 200] [--rounds 5]
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpx/tpx.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

static tpx_engine_t *engine(const char *name)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.name = name;
    p.bind_addr = "127.0.0.1";
    p.port = TPX_PORT_EPHEMERAL;
    tpx_engine_t *e;
    if (tpx_engine_create(&p, &e) != TPX_OK)
        DIE("cannot create engine %s", name);
    return e;
}

enum { TIGHT, YIELD, WAIT, NMODES };
static const char *const mode_name[NMODES] = {"tight poll", "poll+yield", "wait"};

/* Post `iters` times; each ends before the next starts. GB/s (1e9 B/s). */
static double run(tpx_prep_t *prep, int mode, int iters, size_t bytes)
{
    double t0 = now_s();
    for (int i = 0; i < iters; i++) {
        tpx_xfer_t *x;
        if (tpx_xfer_post(prep, NULL, 0, 0, &x) != TPX_OK)
            DIE("post failed");
        tpx_status_t st;
        if (mode == WAIT) {
            st = tpx_xfer_wait(x, -1, NULL);
        } else {
            while ((st = tpx_xfer_poll(x, NULL)) == TPX_INPROGRESS)
                if (mode == YIELD)
                    sched_yield();
        }
        if (st != TPX_OK)
            DIE("READ failed: %s", tpx_strerror(st));
        tpx_xfer_release(x);
    }
    return (double)bytes * iters / (now_s() - t0) / 1e9;
}

int main(int argc, char **argv)
{
    size_t nblocks = 100, size = 16384;
    int iters = 200, rounds = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--blocks") == 0)
            nblocks = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--size") == 0)
            size = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--iters") == 0)
            iters = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(argv[i + 1]);
        else
            DIE("usage: %s [--blocks N] [--size B] [--iters N] [--rounds N]", argv[0]);
    }
    if (nblocks == 0 || size == 0 || iters <= 0 || rounds <= 0 || rounds > 64)
        DIE("bad arguments");
    tpx_engine_t *a = engine("poll-initiator"), *b = engine("poll-target");
    unsigned char *la = calloc(nblocks, size), *lb = malloc(2 * nblocks * size);
    if (la == NULL || lb == NULL)
        DIE("out of memory");
    for (size_t i = 0; i < 2 * nblocks * size; i++)
        lb[i] = (unsigned char)(i * 31 + (i >> 12));
    tpx_region_t *ra, *rb;
    tpx_rdesc_t d;
    if (tpx_mem_register(a, la, nblocks * size, TPX_MEM_HOST, &ra) != TPX_OK ||
        tpx_mem_register(b, lb, 2 * nblocks * size, TPX_MEM_HOST, &rb) != TPX_OK ||
        tpx_region_export(rb, 0, 0, &d) != TPX_OK)
        DIE("cannot register");
    unsigned char md[TPX_METADATA_MAX];
    size_t mdl = sizeof(md);
    tpx_remote_t *rm;
    if (tpx_engine_get_metadata(b, md, &mdl) != TPX_OK || tpx_remote_load(a, md, mdl, &rm) != TPX_OK ||
        tpx_remote_connect(rm, 10000) != TPX_OK)
        DIE("cannot connect");
    tpx_iov_t *iov = calloc(nblocks, sizeof(*iov));
    if (iov == NULL)
        DIE("out of memory");
    for (size_t i = 0; i < nblocks; i++)
        iov[i] = (tpx_iov_t){.local = ra, .local_offset = i * size, .remote = &d,
                             .remote_offset = 2 * i * size, .len = size};
    tpx_prep_t *prep;
    if (tpx_xfer_prepare(rm, TPX_OP_READ, iov, nblocks, &prep) != TPX_OK)
        DIE("cannot prepare");
    run(prep, WAIT, 1, 0);
    for (size_t i = 0; i < nblocks; i++)
        if (memcmp(la + i * size, lb + 2 * i * size, size) != 0)
            DIE("block %zu: data mismatch", i);
    double gbs[NMODES][64];
    for (int r = 0; r < rounds; r++)
        for (int m = 0; m < NMODES; m++)
            gbs[m][r] = run(prep, m, iters, nblocks * size);
    printf("# READ of %zu x %zu B per request, %d posts per run, median of %d rounds (GB/s)\n",
           nblocks, size, iters, rounds);
    for (int m = 0; m < NMODES; m++) {
        qsort(gbs[m], (size_t)rounds, sizeof(double), cmp_d);
        printf("%-12s %8.3f   (min %.3f, max %.3f)\n", mode_name[m], gbs[m][rounds / 2],
               gbs[m][0], gbs[m][rounds - 1]);
    }
    tpx_prep_release(prep);
    tpx_remote_forget(rm);
    tpx_mem_deregister(ra);
    tpx_mem_deregister(rb);
    tpx_engine_destroy(a);
    tpx_engine_destroy(b);
    free(iov);
    free(la);
    free(lb);
    return 0;
}
