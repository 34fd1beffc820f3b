#!/usr/bin/env bash
# bench/gpu/spin.sh - how long an I/O worker should poll its staging copies
# (TPX_SOCK_CUDA_SPIN_US) on one GPU host, one run: throughput at 1 MiB and
# 256 MiB (bench/gpu/gap.sh with bench/gpu/rows_spin.txt), then the latency
# of a lone GPU message under each setting (one-sided READ of one block,
# p50/p99 us, medians over the rounds), since polling is what a lone
# message's wake-up costs.
#
# Usage: bench/gpu/spin.sh           (build/release must exist: bench/gpu/targets.sh
#                                     or cmake --build --preset release)
# Environment: ROUNDS=3  SPINS="10 -1 0" (values of the latency rows; 10 is the
#              default)  BLOCKS="4K 64K 1M"  ITERS=1000  OUT=/tmp/spin
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/cuda/bin TPX_SOCKET_IFNAME=lo
ROUNDS=${ROUNDS:-3} SPINS=${SPINS:-"10 -1 0"} BLOCKS=${BLOCKS:-"4K 64K 1M"} ITERS=${ITERS:-1000}
OUT=${OUT:-/tmp/spin}
mkdir -p "$OUT"
GAP=${GAP:-1}
: >"$OUT/gap.log"
[ "$GAP" = 0 ] || ROWS_FILE=bench/gpu/rows_spin.txt WHAT="s1 s256" ROUNDS=$ROUNDS OUT=$OUT/gap \
  bench/gpu/gap.sh >"$OUT/gap.log" 2>&1 || echo "spin: gap.sh failed (see $OUT/gap.log)"
: >"$OUT/lat"
for r in $(seq "$ROUNDS"); do
  for s in $SPINS; do
    for b in $BLOCKS; do
      # the row: op block blocks bytes prep xfer p50 p99 ...
      TPX_SOCK_CUDA_SPIN_US=$s timeout -k 5 120 build/release/bin/tpx-perf --loopback --mem cuda --gpu 0 \
        --op read --latency --blocks 1 --block "$b" --iters "$ITERS" 2>&1 |
        awk -v s="$s" -v b="$b" '$1 == "read" && NF >= 10 { print s, b, $7, $8, $10 }' >>"$OUT/lat"
    done
  done
done
grep FAILED "$OUT/gap.log"
awk '/^[a-z0-9]+: row/ { p = 1 } p' "$OUT/gap.log"
echo
echo "# lone one-sided GPU READ, median over $ROUNDS rounds: spin_us block p50_us p99_us cpu_us"
python3 - "$OUT/lat" <<'PY'
import collections, statistics as st, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5:
        rows[(f[0], f[1])].append([float(x) for x in f[2:]])
for (s, b), v in rows.items():
    med = [st.median(c) for c in zip(*v)]
    print(f"{s:>6} {b:>5} {med[0]:9.1f} {med[1]:9.1f} {med[2]:9.1f}")
PY
