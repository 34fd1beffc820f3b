#!/usr/bin/env bash
# bench/gpu/tput16.sh - throughput on a many-core host (loopback), rows
# interleaved over rounds, medians: raw TCP vs the transport at N
# connections with the benchmark's poller spinning (nap 0, as NCCL's proxy)
# or napping between empty passes (--nap-us), and the engine at 256 MiB
# under a few settings (SETS, comma lists of VAR=VALUE, or "default").
#   env: ROUNDS=3 NS="8 16" NAPS="0 20 100" SETS="default TPX_CHUNK_BYTES=1M ..."
set -uo pipefail
cd "$(dirname "$0")/../.."
export TPX_SOCKET_IFNAME=lo
cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" >/dev/null ||
  { echo "build failed"; exit 1; }
B=build/release/bin
ROUNDS=${ROUNDS:-3} NS=${NS:-"8 16"} NAPS=${NAPS:-"0 20 100"}
SETS=${SETS:-"default TPX_CHUNK_BYTES=1M TPX_CHUNK_BYTES=2M TPX_CHUNK_BYTES=4M"}
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
nb() { # KEY ARGS...: GB/s and cpu of tpx-netbench's last row
  local k=$1; shift
  $B/tpx-netbench "$@" --size 256M --iters 10 2>&1 |
    awk -v k="$k" '!/^#/ && NF >= 6 { l = $5 " " $6 } END { split(l, a, " "); print k "_GB/s", a[1]; print k "_cpu", a[2] }' >> "$rows"
}
for r in $(seq "$ROUNDS"); do
  for n in $NS; do
    nb "raw$n" --raw --nsocks "$n"
    for z in $NAPS; do nb "tr${n}_nap$z" --nsocks "$n" --no-verify --nap-us "$z"; done
  done
  for e in $SETS; do
    env=(); [ "$e" = default ] || IFS=, read -ra env <<< "$e"
    env "${env[@]}" $B/tpx-perf --loopback --size 256M --iters 10 --no-verify 2>&1 |
      awk -v e="$e" '!/^#/ && NF > 6 { print "engine_" e "_GB/s", $5; print "engine_" e "_cpu", $(NF - 1) }' >> "$rows"
  done
done
echo "# tput16.sh: $(nproc) CPUs, $ROUNDS rounds, medians (GB/s = 1e9 B/s; cpu = s per GB, both sides)"
python3 - "$rows" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 2]
keys = []
for k, _ in rows:
    if k not in keys:
        keys.append(k)
med = {}
for k in keys:
    v = [float(x) for kk, x in rows if kk == k and x not in ('-', '')]
    med[k] = st.median(v) if v else float('nan')
for k in keys:
    extra = ''
    if k.startswith('tr') and k.endswith('_GB/s'):
        n = k[2:].split('_')[0]
        extra = f"  x raw {med[k] / med['raw' + n + '_GB/s']:.2f}"
    if k.startswith('engine') and k.endswith('_GB/s'):
        best = max(v for kk, v in med.items() if kk.startswith('raw') and kk.endswith('_GB/s'))
        extra = f"  x best raw {med[k] / best:.2f}"
    print(f"{k:40} {med[k]:8.3g}{extra}")
PY
