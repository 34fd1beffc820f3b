#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/lat_small.sh WHEEL_DIR - a lone 4 KiB READ/WRITE through NIXL+TPX beside
# NIXL+UCX over TCP and the raw TCP round trip, on this host's cores and on two of them
# (`taskset -c 0,1`: a 2-core host's budget without its neighbours), in one run:
#   1. tpx-perf --op read|write --latency: tpx's p50/p99 and the raw TCP round trip
#   2. bench/peers latency rows (tpx-py, NIXL+TPX, NIXL+UCX), all cores
#   3. the same on CPUs 0-1
# WHEEL_DIR holds the NIXL wheels (bench/gpu/repack_nixl.sh).
# Environment: LAT_ITERS=2000  ROUNDS=3  OUT=DIR (logs and JSON kept there)
set -euo pipefail
cd "$(dirname "$0")/../.."
LAT_ITERS=${LAT_ITERS:-2000}
ROUNDS=${ROUNDS:-3}

. bench/gpu/lib.sh
gpu_setup "$1"

echo "== 1. tpx-perf latency, all cores and CPUs 0-1"
for cpus in all 0,1; do
    run=()
    [ "$cpus" = all ] || run=(taskset -c "$cpus")
    for op in read write; do
        echo "# cpus $cpus"
        "${run[@]}" build/release/bin/tpx-perf --op "$op" --latency --blocks 1 --block 4K \
            --iters "$LAT_ITERS" 2>&1 | grep -E "^#|^ *(read|write)"
    done
done | tee "$OUT/perf_lat.log"

args=(--sizes 4K --ops READ,WRITE --blocks 10 --iters 2 --rounds "$ROUNDS"
    --lat-iters "$LAT_ITERS" --peers tpx-py,NIXL+TPX,NIXL+UCX)
echo "== 2. bench/peers latency, all cores"
PYTHON=python3 bench/peers "${args[@]}" --json "$OUT/lat_all.json" 2>&1 |
    grep -vE '^# round' | tee "$OUT/lat_all.log"
echo "== 3. bench/peers latency, CPUs 0-1"
PYTHON=python3 taskset -c 0,1 bench/peers "${args[@]}" --json "$OUT/lat_2cpu.json" 2>&1 |
    grep -vE '^# round' | tee "$OUT/lat_2cpu.log"
