/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/gpu/raw_staged.cu - the raw-TCP ceiling for GPU memory: what the
 * simplest staged pipeline moves between GPU buffers over loopback TCP,
 * next to plain TCP between host buffers, same program, same shape. The
 * built-in transport's GPU path is judged against host memory (target:
 * >= 0.7x at 1 MiB); this says how much of that ratio any TCP staging
 * pays on the host at hand, with no transport, engine or event loop.
 *
 * Shape: N connections, each with a sender thread and a receiver thread
 * (blocking sockets, one thread per direction per connection, as
 * tpx-netbench --raw). Host mode sends from / receives into host buffers
 * (THP) of the message size. CUDA mode stages through a ring of pinned
 * host memory per connection and side, in blocks: the sender queues
 * device-to-host copies up to the ring's size ahead and writes each block
 * once its event has completed; the receiver reads each block into the
 * ring (MSG_WAITALL) and queues its host-to-device copy, reusing a ring
 * block once its copy's event completed. One stream per thread, one copy
 * and one event record per block, events polled.
 *
 * Build and run (on a GPU host):
 *   nvcc -O2 -arch=sm_90 -o /tmp/raw_staged bench/gpu/raw_staged.cu -lpthread
 *   /tmp/raw_staged [--mem host|cuda] [--gpus S,R] [--conns N] [--size BYTES]
 *                   [--iters N] [--block BYTES] [--ring BYTES] [--sndbuf BYTES]
 *                   [--procs 1|2] [--verify]
 * Prints one line: mem gpus conns size GB/s cpu_s/GB verified.
 *
 * Each connection cycles its messages through NSLOT buffers per side, each
 * with its own byte pattern, so a block that lands in the wrong message (a
 * ring block reused before its copy finished) leaves a pattern that --verify
 * (after the timing) finds in the receiver's buffers.
 */
#include "bench_cuda.h"
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 64
#define MAX_RING 64
#define NSLOT 3 /* messages in a side's buffers, each its own pattern */
static int cuda_mem, verify, gpu_s, gpu_r = 0, nconns = 16, iters = 2000;
static size_t msg = 1 << 20, blk = 512 << 10, ring = 4 << 20;
static int sndbuf; /* SO_SNDBUF of the sending ends; 0: autotuned */
static int procs = 1; /* 2: the receivers in a process of their own */
static pthread_barrier_t start_bar;

typedef struct {
    int fd, send, conn;
    int failed;
    double end; /* when its last byte moved (before any verification) */
} side_t;

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    }
    return (size_t)v;
}

static unsigned char pattern(int conn, int slot, size_t i)
{
    return (unsigned char)(conn * 131 + slot * 59 + i * 7 + (i >> 12));
}

static int io_all(int fd, unsigned char *p, size_t n, int send)
{
    while (n > 0) {
        ssize_t k = send ? ::send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, MSG_WAITALL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void ev_wait(cudaEvent_t e)
{
    cudaError_t r;
    while ((r = cudaEventQuery(e)) == cudaErrorNotReady)
        sched_yield();
    CK(r);
}

static void *side_main(void *arg)
{
    side_t *s = (side_t *)arg;
    const size_t all = msg * NSLOT; /* NSLOT messages' buffers, message m in slot m % NSLOT */
    unsigned char *hbuf = NULL, *dbuf = NULL, *rb = NULL;
    cudaStream_t st = NULL;
    cudaEvent_t ev[MAX_RING];
    size_t nr = ring / blk;
    hbuf = (unsigned char *)mmap(NULL, all, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (hbuf == MAP_FAILED) {
        fprintf(stderr, "raw_staged: cannot map %zu bytes: %s\n", all, strerror(errno));
        exit(1);
    }
    madvise(hbuf, all, MADV_HUGEPAGE);
    for (int k = 0; k < NSLOT; k++)
        for (size_t i = 0; i < msg; i++)
            hbuf[k * msg + i] = s->send ? pattern(s->conn, k, i) : 0;
    if (cuda_mem) {
        CK(cudaSetDevice(s->send ? gpu_s : gpu_r));
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CK(cudaMalloc((void **)&dbuf, all));
        CK(cudaHostAlloc((void **)&rb, ring, cudaHostAllocPortable));
        for (size_t i = 0; i < nr; i++)
            CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
        CK(cudaMemcpy(dbuf, hbuf, all, cudaMemcpyHostToDevice));
    }
    pthread_barrier_wait(&start_bar);
    /* blocks in stream order; block j is message j / per, part j % per */
    size_t per = (msg + blk - 1) / blk, nblk = per * (size_t)iters;
#define BLK_AT(j) (((j) / per % NSLOT) * msg + ((j) % per) * blk) /* its offset in the buffers */
#define BLK_LEN(j) (msg - ((j) % per) * blk < blk ? msg - ((j) % per) * blk : blk)
    if (!cuda_mem) {
        for (int it = 0; it < iters && !s->failed; it++)
            s->failed = io_all(s->fd, hbuf + (size_t)(it % NSLOT) * msg, msg, s->send) != 0;
    } else if (s->send) {
        size_t issued = 0;
        for (size_t j = 0; j < nblk && !s->failed; j++) {
            /* ring block issued % nr was written out (block issued - nr < j) */
            while (issued < nblk && issued < j + nr) {
                CK(cudaMemcpyAsync(rb + (issued % nr) * blk, dbuf + BLK_AT(issued), BLK_LEN(issued),
                                   cudaMemcpyDeviceToHost, st));
                CK(cudaEventRecord(ev[issued % nr], st));
                issued++;
            }
            ev_wait(ev[j % nr]);
            s->failed = io_all(s->fd, rb + (j % nr) * blk, BLK_LEN(j), 1) != 0;
        }
    } else {
        for (size_t j = 0; j < nblk && !s->failed; j++) {
            if (j >= nr)
                ev_wait(ev[j % nr]); /* the copy out of this ring block finished */
            s->failed = io_all(s->fd, rb + (j % nr) * blk, BLK_LEN(j), 0) != 0;
            if (s->failed)
                break;
            CK(cudaMemcpyAsync(dbuf + BLK_AT(j), rb + (j % nr) * blk, BLK_LEN(j),
                               cudaMemcpyHostToDevice, st));
            CK(cudaEventRecord(ev[j % nr], st));
        }
        CK(cudaStreamSynchronize(st));
    }
    s->end = now();
    if (s->failed) /* the other side is not left blocked on this connection */
        shutdown(s->fd, SHUT_RDWR);
    if (verify && !s->send && !s->failed) {
        /* slot k holds the last message m with m % NSLOT == k: pattern k */
        if (cuda_mem)
            CK(cudaMemcpy(hbuf, dbuf, all, cudaMemcpyDeviceToHost));
        for (int k = 0; k < NSLOT && k < iters && s->failed == 0; k++)
            for (size_t i = 0; i < msg; i++)
                if (hbuf[k * msg + i] != pattern(s->conn, k, i)) {
                    fprintf(stderr, "raw_staged: connection %d, buffer %d: byte %zu is %u, expected %u\n",
                            s->conn, k, i, hbuf[k * msg + i], pattern(s->conn, k, i));
                    s->failed = 2;
                    break;
                }
    }
    return NULL;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--mem")) cuda_mem = !strcmp(v, "cuda"), i++;
        else if (!strcmp(a, "--gpus")) { gpu_s = atoi(v); const char *c = strchr(v, ','); gpu_r = c ? atoi(c + 1) : gpu_s; i++; }
        else if (!strcmp(a, "--conns")) nconns = atoi(v), i++;
        else if (!strcmp(a, "--size")) msg = parse_size(v), i++;
        else if (!strcmp(a, "--iters")) iters = atoi(v), i++;
        else if (!strcmp(a, "--block")) blk = parse_size(v), i++;
        else if (!strcmp(a, "--ring")) ring = parse_size(v), i++;
        else if (!strcmp(a, "--sndbuf")) sndbuf = (int)parse_size(v), i++;
        else if (!strcmp(a, "--procs")) procs = atoi(v), i++;
        else if (!strcmp(a, "--verify")) verify = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: raw_staged [--mem host|cuda] [--gpus S,R] [--conns N] [--size B] [--iters N]\n"
                   "                  [--block B] [--ring B] [--sndbuf B] [--procs 1|2] [--verify]\n"
                   "N loopback TCP connections, a sender and a receiver thread each; cuda: staged\n"
                   "through a pinned ring of --ring bytes in --block copies per connection and side.\n"
                   "--sndbuf: the senders' SO_SNDBUF (default autotuned; tpx's same-host: 512K).\n"
                   "--procs 2: the receivers in a second process (two CUDA contexts on one GPU).\n"
                   "Prints: mem gpus conns size GB/s cpu_s/GB verified\n");
            return 0;
        } else { fprintf(stderr, "raw_staged: unknown option '%s' (--help)\n", a); return 2; }
    }
    if (nconns < 1 || nconns > MAX_CONNS || msg == 0 || iters < 1 || blk == 0 || ring < blk ||
        (procs != 1 && procs != 2) ||
        ring / blk > MAX_RING) {
        fprintf(stderr, "raw_staged: bad arguments (conns 1..%d, ring/block <= %d, procs 1 or 2)\n", MAX_CONNS, MAX_RING);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, MAX_CONNS) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0) {
        perror("raw_staged: listen");
        return 1;
    }
    static side_t sides[2 * MAX_CONNS];
    for (int c = 0; c < nconns; c++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            perror("raw_staged: connect");
            return 1;
        }
        int afd = accept(lfd, NULL, NULL);
        if (afd < 0) {
            perror("raw_staged: accept");
            return 1;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (sndbuf > 0) /* as tpx's same-host data connections (TPX_SOCK_BUF_BYTES=-1) */
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
        sides[2 * c] = (side_t){fd, 1, c, 0, 0};
        sides[2 * c + 1] = (side_t){afd, 0, c, 0, 0};
    }
    /* --procs 2: the receivers run in a child process, forked before either
     * side touches CUDA (two contexts on a GPU, as tpx-perf --loopback's two
     * engines); it reports its end, CPU and failure over a pipe. */
    int pfd[2] = {-1, -1}, first = 0, step = 1;
    pid_t child = -1;
    if (procs == 2) {
        if (pipe(pfd) != 0 || (child = fork()) < 0) {
            perror("raw_staged: fork");
            return 1;
        }
        first = child == 0; /* the child runs the receivers (odd), the parent the senders */
        step = 2;
        close(pfd[child == 0 ? 0 : 1]); /* a child that dies ends the parent's read */
        for (int k = 1 - first; k < 2 * nconns; k += 2)
            close(sides[k].fd);
    }
    pthread_barrier_init(&start_bar, NULL, (unsigned)(2 * nconns / step + 1));
    pthread_t t[2 * MAX_CONNS];
    for (int k = first; k < 2 * nconns; k += step)
        pthread_create(&t[k], NULL, side_main, &sides[k]);
    if (child > 0) { /* the senders start once the receivers are set up */
        char ready;
        if (read(pfd[0], &ready, 1) != 1) {
            fprintf(stderr, "raw_staged: the receiving process ended before its start\n");
            return 1;
        }
    }
    pthread_barrier_wait(&start_bar); /* this process's sides are set up */
    if (child == 0 && write(pfd[1], "r", 1) != 1)
        return 1;
    double t0 = now(), c0 = cpu_s(), t1 = t0;
    int failed = 0;
    for (int k = first; k < 2 * nconns; k += step) {
        pthread_join(t[k], NULL);
        failed |= sides[k].failed;
        t1 = sides[k].end > t1 ? sides[k].end : t1;
    }
    double cpu = cpu_s() - c0;
    if (child == 0) { /* the receivers' end, CPU and failure, to the parent */
        double rep[3] = {t1, cpu, (double)failed};
        return write(pfd[1], rep, sizeof(rep)) == (ssize_t)sizeof(rep) ? 0 : 1;
    }
    if (child > 0) {
        double rep[3];
        int ok = read(pfd[0], rep, sizeof(rep)) == (ssize_t)sizeof(rep);
        waitpid(child, NULL, 0);
        if (!ok) {
            fprintf(stderr, "raw_staged: the receiving process ended without a report\n");
            return 1;
        }
        t1 = rep[0] > t1 ? rep[0] : t1;
        cpu += rep[1];
        failed |= (int)rep[2];
    }
    double dt = t1 - t0, gb = (double)msg * iters * nconns / 1e9;
    printf("%s %d,%d %d %zu %.3f %.3f %s\n", cuda_mem ? "cuda" : "host", gpu_s, gpu_r, nconns, msg,
           gb / dt, cpu / gb, failed ? "FAILED" : verify ? "yes" : "no");
    return failed ? 1 : 0;
}
