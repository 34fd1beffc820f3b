#!/usr/bin/env bash
# sweep TPX_RMA_PACK_CHUNK: 32x16K READ latency and 1000x4K READ throughput
set -uo pipefail
export TPX_SOCKET_IFNAME=lo
B=build/release
cmake --preset release >/dev/null && cmake --build --preset release -j16 --target tpx-perf >/dev/null || exit 1
P=$B/bin/tpx-perf
for r in 1 2 3; do
  for pc in 0 128K 256K; do
    l=$(TPX_RMA_PACK_CHUNK=$pc $P --loopback --op read --latency --blocks 32 --block 16K --iters 1000 2>&1 | awk '$1=="read"{print $8, $12}')
    t=$(TPX_RMA_PACK_CHUNK=$pc $P --loopback --op read --block 4K --blocks 1000 --iters 50 --no-verify --no-raw 2>&1 | awk '$1=="read"{print $10}')
    t2=$(TPX_RMA_PACK_CHUNK=$pc $P --loopback --op read --block 16K --blocks 1000 --iters 30 --no-verify --no-raw 2>&1 | awk '$1=="read"{print $10}')
    echo "round $r pack_chunk $pc: 32x16K p50/raw $l   READ 1000x4K $t GB/s  1000x16K $t2"
  done
done
