/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_gpu.c - GPU0 -> GPU1 through the engine over loopback.
 *
 * Two processes (fork before any engine exists): the server receives into
 * GPU `dst`, the client sends from GPU `src`. For each size: a pattern is
 * written into the sender's device buffer, the receiver's is cleared, the
 * transfer is repeated `iters` times after a warm-up, then the receiver
 * copies its buffer back and checks every byte. Prints one line per size
 * (GB/s = 1e9 B/s, receiver side). Public API only.
 *
 * usage: test_engine_gpu [--src N] [--dst N] [--sizes A,B,...] [--iters N]
 * Exit 77 when fewer than two GPUs (or none) are present.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

static void pattern(unsigned char *h, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        h[i] = (unsigned char)(x >> ((i & 7) * 8));
    }
}

static size_t sizes[32];
static int nsizes, iters = 10;

static int run_side(int server, int gpu, int pipefd[2])
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.gpu = gpu;
    p.port = server ? TPX_PORT_EPHEMERAL : TPX_PORT_NONE;
    tpx_engine_t *e;
    CHECK_OK(tpx_engine_create(&p, &e));
    tpx_peer_t *peer;
    if (server) {
        int port = tpx_engine_port(e);
        if (write(pipefd[1], &port, sizeof(port)) != sizeof(port))
            return 1;
        CHECK_OK(tpx_peer_accept(e, -1, &peer));
    } else {
        int port;
        if (read(pipefd[0], &port, sizeof(port)) != sizeof(port))
            return 1;
        CHECK_OK(tpx_peer_connect(e, "127.0.0.1", port, 0, &peer));
    }
    size_t max = 0;
    for (int i = 0; i < nsizes; i++)
        max = sizes[i] > max ? sizes[i] : max;
    void *dbuf;
    CHECK_OK(tpx_gpu_alloc(gpu, max, &dbuf));
    unsigned char *h = malloc(max), *w = malloc(max);
    if (h == NULL || w == NULL)
        return 1;
    tpx_region_t *r;
    CHECK_OK(tpx_mem_register(e, dbuf, max, TPX_MEM_CUDA, &r));
    int fails = 0;
    for (int s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        pattern(h, n, n);
        if (server) {
            memset(w, 0, n);
            CHECK_OK(tpx_gpu_copy(dbuf, w, n));
        } else {
            CHECK_OK(tpx_gpu_copy(dbuf, h, n));
        }
        uint64_t t0 = 0;
        for (int i = -1; i < iters; i++) { /* i = -1: warm-up */
            if (i == 0)
                t0 = test_now_ns();
            tpx_xfer_t *x;
            CHECK_OK(server ? tpx_recv(peer, r, 0, n, &x) : tpx_send(peer, r, 0, n, &x));
            CHECK_OK(tpx_xfer_wait(x, -1, NULL));
            tpx_xfer_release(x);
        }
        double dt = test_secs_since(t0);
        if (server) {
            CHECK_OK(tpx_gpu_copy(w, dbuf, n));
            int ok = memcmp(w, h, n) == 0;
            fails += !ok;
            printf("%-12zu %6d %10.3f %9.2f  %s\n", n, iters, dt * 1e3 / iters,
                   (double)n * iters / dt / 1e9, ok ? "verified" : "DATA MISMATCH");
            fflush(stdout);
        }
    }
    tpx_mem_deregister(r);
    tpx_peer_close(peer);
    tpx_engine_destroy(e);
    tpx_gpu_free(dbuf);
    free(h);
    free(w);
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    int src = 0, dst = 1;
    const char *list = "1M,4M,16M,64M,256M,1G";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--src") && i + 1 < argc)
            src = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dst") && i + 1 < argc)
            dst = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            list = argv[++i];
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--src N] [--dst N] [--sizes 1M,...] [--iters N]\n",
                    argv[0]);
            return 2;
        }
    }
    for (const char *p = list; *p && nsizes < 32;) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (*end == 'K')
            v <<= 10, end++;
        else if (*end == 'M')
            v <<= 20, end++;
        else if (*end == 'G')
            v <<= 30, end++;
        sizes[nsizes++] = (size_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            break;
    }
    /* Count GPUs in a child: CUDA must not be initialised before fork. */
    pid_t probe = fork();
    if (probe == 0) {
        int n = 0;
        _exit(tpx_gpu_count(&n) == TPX_OK ? (n > 100 ? 100 : n) : 0);
    }
    int ps, ngpu = 0;
    if (waitpid(probe, &ps, 0) == probe && WIFEXITED(ps))
        ngpu = WEXITSTATUS(ps);
    if (ngpu < 1 || src >= ngpu || dst >= ngpu) {
        printf("SKIP: needs GPUs %d and %d (%d present)\n", src, dst, ngpu);
        return 77;
    }
    if (getenv("TPX_SOCKET_IFNAME") == NULL)
        setenv("TPX_SOCKET_IFNAME", "lo", 1);
    int pfd[2];
    if (pipe(pfd) != 0)
        return 1;
    printf("# GPU%d -> GPU%d through the engine, loopback; GB/s = 1e9 B/s, receiver side\n", src,
           dst);
    printf("%-12s %6s %10s %9s\n", "bytes", "iters", "ms/iter", "GB/s");
    fflush(stdout);
    pid_t srv = fork();
    if (srv == 0)
        _exit(run_side(1, dst, pfd));
    pid_t cli = fork();
    if (cli == 0)
        _exit(run_side(0, src, pfd));
    int ss, cs;
    alarm(600);
    waitpid(srv, &ss, 0);
    waitpid(cli, &cs, 0);
    int ok = WIFEXITED(ss) && WEXITSTATUS(ss) == 0 && WIFEXITED(cs) && WEXITSTATUS(cs) == 0;
    if (!ok)
        fprintf(stderr, "FAILED (server status %d, client status %d)\n", ss, cs);
    return ok ? 0 : 1;
}
