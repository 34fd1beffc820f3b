/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/gpu/copy_probe.cu - what the GPU's copy engines give the built-in
 * transport's staging: pinned host <-> device copies cut into blocks on S
 * streams (one per connection, as sock_cuda.c does), device-to-host alone,
 * host-to-device alone and both at once (a loopback run's sender and
 * receiver share one GPU). Prints GB/s (1e9 B/s) per direction.
 *
 * Build and run (on a GPU host):
 *   nvcc -O2 -arch=sm_90 -o /tmp/copy_probe bench/gpu/copy_probe.cu && /tmp/copy_probe
 * Options: copy_probe [TOTAL_MIB] (bytes per direction and configuration, default 2048)
 */
#include "bench_cuda.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SLOTS 4
typedef struct {
    cudaStream_t s;
    cudaEvent_t ev[SLOTS];
    char *host[SLOTS];
    char *dev;
    size_t done, issued;
} lane_t;

/* Run `nl` lanes per direction (dirs: 1 D2H, 2 H2D, 3 both), each moving
 * total/nl bytes in blocks of `blk`, at most SLOTS blocks in flight per
 * lane, polled like the transport does (event query, no blocking). */
static void run(lane_t *lanes, int nl, int dirs, size_t blk, size_t total, double *gbs)
{
    size_t per = total / nl / blk * blk;
    int n = nl * 2;
    for (int i = 0; i < n; i++)
        lanes[i].done = lanes[i].issued = 0;
    double t0 = now();
    for (;;) {
        int busy = 0;
        for (int i = 0; i < n; i++) {
            lane_t *l = &lanes[i];
            int d2h = i < nl;
            if (!(dirs & (d2h ? 1 : 2)))
                continue;
            while (l->done < l->issued &&
                   cudaEventQuery(l->ev[(l->done / blk) % SLOTS]) == cudaSuccess)
                l->done += blk;
            while (l->issued < per && l->issued - l->done < SLOTS * blk) {
                int s = (int)((l->issued / blk) % SLOTS);
                if (d2h)
                    CK(cudaMemcpyAsync(l->host[s], l->dev + l->issued % (64 << 20), blk,
                                       cudaMemcpyDeviceToHost, l->s));
                else
                    CK(cudaMemcpyAsync(l->dev + l->issued % (64 << 20), l->host[s], blk,
                                       cudaMemcpyHostToDevice, l->s));
                CK(cudaEventRecord(l->ev[s], l->s));
                l->issued += blk;
            }
            busy |= l->done < per;
        }
        if (!busy)
            break;
    }
    double dt = now() - t0;
    gbs[0] = dirs & 1 ? per * nl / dt / 1e9 : 0;
    gbs[1] = dirs & 2 ? per * nl / dt / 1e9 : 0;
}

int main(int argc, char **argv)
{
    size_t total = (size_t)(argc > 1 ? atol(argv[1]) : 2048) << 20;
    const int maxl = 16;
    lane_t lanes[2 * 16];
    for (int i = 0; i < 2 * maxl; i++) {
        CK(cudaStreamCreateWithFlags(&lanes[i].s, cudaStreamNonBlocking));
        for (int s = 0; s < SLOTS; s++) {
            CK(cudaEventCreateWithFlags(&lanes[i].ev[s], cudaEventDisableTiming));
            CK(cudaHostAlloc((void **)&lanes[i].host[s], 4 << 20, cudaHostAllocDefault));
        }
        CK(cudaMalloc((void **)&lanes[i].dev, (64 << 20) + (4 << 20)));
    }
    static const size_t blks[] = {64 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20};
    static const int nls[] = {1, 4, 16};
    printf("# copy_probe: pinned staging copies, %d slots per stream, %zu MiB per direction\n",
           SLOTS, total >> 20);
    printf("%-8s %-7s %9s %9s %11s %11s\n", "block", "streams", "D2H", "H2D", "both:D2H",
           "both:H2D");
    for (int b = 0; b < 5; b++)
        for (int k = 0; k < 3; k++) {
            /* the lanes' streams: nls[k] per direction, lanes [0, nl) D2H
             * and [nl, 2 nl) H2D */
            lane_t l[2 * 16];
            for (int i = 0; i < nls[k]; i++) {
                l[i] = lanes[i];
                l[nls[k] + i] = lanes[maxl + i];
            }
            double a[2], c[2], d[2];
            run(l, nls[k], 1, blks[b], total, a);
            run(l, nls[k], 2, blks[b], total, c);
            run(l, nls[k], 3, blks[b], total, d);
            printf("%-8zu %-7d %9.1f %9.1f %11.1f %11.1f\n", blks[b] >> 10, nls[k], a[0], c[1],
                   d[0], d[1]);
        }
    return 0;
}
