/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/gpu/bench_cuda.h - what the standalone CUDA benchmarks beside it
 * share (copy_probe.cu, dma_load.cu, raw_staged.cu): a CUDA runtime call
 * that fails ends the program with file, line and the error, and a
 * monotonic clock in seconds. Header only: each benchmark is one nvcc call.
 */
#ifndef TPX_BENCH_CUDA_H
#define TPX_BENCH_CUDA_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));        \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static inline double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#endif
