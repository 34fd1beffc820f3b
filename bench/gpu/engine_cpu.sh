#!/usr/bin/env bash
# bench/gpu/engine_cpu.sh - where the CPU of a 256 MiB loopback run goes
# (bench/cpu_threads.sh: cores per thread kind) for raw TCP, the transport
# and the engine; then engine settings side by side (GB/s and cpu s/GB,
# ROUNDS rounds interleaved).   env: ROUNDS=2 SETS="default TPX_CHUNK_BYTES=2M ..."
set -uo pipefail
cd "$(dirname "$0")/../.."
export TPX_SOCKET_IFNAME=lo
B=build/release/bin
cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" --target tpx-perf tpx-netbench >/dev/null ||
  { echo "build failed"; exit 1; }
for what in "raw16:$B/tpx-netbench --raw --size 256M --nsocks 16 --iters 400" \
            "transport16:$B/tpx-netbench --size 256M --nsocks 16 --iters 400 --no-verify" \
            "transport8:$B/tpx-netbench --size 256M --nsocks 8 --iters 400 --no-verify" \
            "engine:$B/tpx-perf --loopback --size 256M --iters 400 --no-verify"; do
  echo "== ${what%%:*}"
  bench/cpu_threads.sh -w 2 -s 2 ${what#*:}
done
ROUNDS=${ROUNDS:-2}
SETS=${SETS:-"default TPX_SPIN_US=0 TPX_CHUNK_BYTES=2M TPX_WINDOW=64 TPX_NSOCKS=4 TPX_NSOCKS=16 TPX_CHANNELS=1,TPX_NSOCKS=16 TPX_SOCK_WORKERS=8 TPX_SOCK_WORKERS=32"}
rows=$(mktemp)
for r in $(seq "$ROUNDS"); do
  for e in $SETS; do
    env=(); [ "$e" = default ] || IFS=, read -ra env <<< "$e"
    env "${env[@]}" $B/tpx-perf --loopback --size 256M --iters 10 --no-verify 2>&1 |
      awk -v e="$e" '!/^#/ && NF > 6 { print e, $5, $(NF - 1) }' >> "$rows"
  done
done
echo "== engine 256 MiB, median of $ROUNDS rounds: setting GB/s cpu(s/GB)"
python3 - "$rows" $SETS <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for s in sys.argv[2:]:
    g = [float(r[1]) for r in rows if r[0] == s]
    c = [float(r[2]) for r in rows if r[0] == s]
    print("%-34s %7.2f %7.3f" % (s, st.median(g), st.median(c)) if g else "%-34s failed" % s)
PY
rm -f "$rows"
