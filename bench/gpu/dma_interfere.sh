#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/dma_interfere.sh - does a GPU path's staging DMA slow the CPU's
# own socket copies? Host-memory 1 MiB tpx-perf rows on CPUs 0-15, alone and
# beside bench/gpu/dma_load.cu (D2H + H2D copies paced to RATE GB/s each
# way, on CPUs 16-31, no CPU work of the benchmark's), next to the GPU-memory
# row, rounds interleaved. Needs 32 CPUs and a GPU.
# Usage: bench/gpu/dma_interfere.sh   Environment: ROUNDS=3 RATES="10 20 0" ITERS=40000
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/cuda/bin TPX_SOCKET_IFNAME=lo
ROUNDS=${ROUNDS:-3} RATES=${RATES:-"10 20 0"} ITERS=${ITERS:-40000}
nvcc -O2 -arch=sm_90 -o /tmp/dma_load bench/gpu/dma_load.cu || exit 1
P=build/release/bin/tpx-perf
row() { # LABEL perf-args...
  local l=$1; shift
  taskset -c 0-15 $P --loopback --size 1M --iters "$ITERS" --no-verify "$@" 2>&1 |
    awk -v l="$l" '$1 ~ /^[0-9]+$/ && NF >= 10 { print l, $5, $9; exit }' >>/tmp/dmai.rows
}
: >/tmp/dmai.rows
for r in $(seq "$ROUNDS"); do
  row host
  row cuda --mem cuda --gpu 0,0
  for L in $RATES; do
    # the load outlasts the row (killed after it): the whole row runs beside it
    taskset -c 16-31 /tmp/dma_load 600 "$L" 0 >/tmp/dmai.load 2>&1 &
    load=$!
    sleep 2.5
    row "host+dma$L"
    kill -INT $load 2>/dev/null
    wait $load 2>/dev/null
    echo "round $r load $L: $(cat /tmp/dmai.load)"
  done
done
python3 - <<'PY'
import statistics as st
rows = [l.split() for l in open('/tmp/dmai.rows') if len(l.split()) == 3]
labels = []
for r in rows:
    if r[0] not in labels: labels.append(r[0])
ref = max(float(r[1]) for r in rows if r[0] == 'host')
print(f"{'row':12} {'best':>7} {'median':>7} {'cpu s/GB':>9} {'best/host':>10}")
for l in labels:
    v = [float(r[1]) for r in rows if r[0] == l]; c = [float(r[2]) for r in rows if r[0] == l]
    print(f"{l:12} {max(v):7.2f} {st.median(v):7.2f} {st.median(c):9.3f} {max(v)/ref:10.2f}")
PY
