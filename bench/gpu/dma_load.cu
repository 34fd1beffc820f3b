/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/gpu/dma_load.cu - DMA traffic through host memory with (almost) no
 * CPU: device-to-host and host-to-device copies of BLOCK bytes between one
 * GPU and rings of pinned host memory, paced to RATE GB/s per direction,
 * for SECONDS. Run it on CPUs the benchmark does not use, beside a
 * host-memory run, to see what a GPU path's staging copies cost the CPU's
 * own copies (memory bandwidth, caches) apart from any CPU work.
 *
 * Build and run (on a GPU host):
 *   nvcc -O2 -arch=sm_90 -o /tmp/dma_load bench/gpu/dma_load.cu
 *   taskset -c 16-31 /tmp/dma_load SECONDS RATE_GBPS [GPU] [RING_MIB] [BLOCK_KIB]
 * RATE 0: as fast as the copy engines go. Prints what it moved at the end
 * (after SECONDS, or at SIGINT).
 */
#include "bench_cuda.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define INFLIGHT 8

static volatile sig_atomic_t stop; /* SIGINT: stop early, print what moved */
static void on_int(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 10, rate = argc > 2 ? atof(argv[2]) : 20;
    int gpu = argc > 3 ? atoi(argv[3]) : 0;
    size_t ring = (size_t)(argc > 4 ? atol(argv[4]) : 64) << 20;
    size_t blk = (size_t)(argc > 5 ? atol(argv[5]) : 512) << 10;
    CK(cudaSetDevice(gpu));
    char *h[2], *d[2];
    cudaStream_t s[2];
    cudaEvent_t ev[2][INFLIGHT];
    for (int k = 0; k < 2; k++) {
        CK(cudaHostAlloc((void **)&h[k], ring, cudaHostAllocPortable));
        CK(cudaMalloc((void **)&d[k], ring));
        CK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
        for (int i = 0; i < INFLIGHT; i++)
            CK(cudaEventCreateWithFlags(&ev[k][i], cudaEventDisableTiming));
    }
    if (blk == 0 || blk > ring || secs <= 0) {
        fprintf(stderr, "dma_load: need SECONDS > 0 and 0 < BLOCK_KIB <= RING_MIB * 1024\n");
        return 2;
    }
    size_t nblk = ring / blk, issued[2] = {0, 0}, done[2] = {0, 0};
    double t0 = now(), end = t0 + secs;
    struct timespec nap = {0, 20000};
    signal(SIGINT, on_int);
    while (now() < end && !stop) {
        for (int k = 0; k < 2; k++) {
            while (done[k] < issued[k] && cudaEventQuery(ev[k][done[k] % INFLIGHT]) == cudaSuccess)
                done[k]++;
            double allowed = rate > 0 ? (now() - t0) * rate * 1e9 / (double)blk : 1e18;
            while (issued[k] - done[k] < INFLIGHT && (double)issued[k] < allowed) {
                size_t off = (issued[k] % nblk) * blk;
                if (k == 0)
                    CK(cudaMemcpyAsync(h[0] + off, d[0] + off, blk, cudaMemcpyDeviceToHost, s[0]));
                else
                    CK(cudaMemcpyAsync(d[1] + off, h[1] + off, blk, cudaMemcpyHostToDevice, s[1]));
                CK(cudaEventRecord(ev[k][issued[k] % INFLIGHT], s[k]));
                issued[k]++;
            }
        }
        nanosleep(&nap, NULL);
    }
    CK(cudaDeviceSynchronize());
    double t = now() - t0;
    printf("dma_load: GPU %d, %.1f s, D2H %.2f GB/s, H2D %.2f GB/s (blocks of %zu KiB, rings of %zu MiB)\n",
           gpu, t, issued[0] * blk / t / 1e9, issued[1] * blk / t / 1e9, blk >> 10, ring >> 20);
    return 0;
}
