#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/perf_profile.sh - where the CPU goes, side by side: each command runs
# under a system-wide `perf record` (cpu-clock samples, which work in a VM
# without hardware counters), and the report prints its top symbols (kernel
# and user) with their share of all samples, then the commands' shares of
# the same symbol in one table, so a raw-TCP run and a tpx run of the same
# bytes read as ratios.
#
# Usage: bench/perf_profile.sh LABEL=COMMAND [LABEL=COMMAND ...]
#   e.g. bench/perf_profile.sh \
#          "raw=build/release/bin/tpx-netbench --raw --size 256M --nsocks 16 --iters 40" \
#          "tpx=build/release/bin/tpx-netbench --size 256M --nsocks 16 --iters 40 --no-verify"
# Environment: PERF="perf" (the perf command; a copied one with its own
#   loader: PERF=".perf/lib/ld-linux-x86-64.so.2 --library-path .perf/lib .perf/perf")
#   FREQ=999 (samples per second per CPU)  TOP=30 (symbols per table)
#   OUT=/tmp/perf-profile (perf.data and the reports, one per label)
#   DELAY_MS=0 (start sampling this long after the command: skip its set-up,
#   e.g. a CUDA context's creation, when it is not what is being measured)
#   GRAPH=0 (1: record call chains too, and write LABEL.graph under OUT: each
#   thread's top symbols with the chains that reached them). LABEL.thr under
#   OUT always has each thread's top symbols, flat.
set -uo pipefail
PERF=${PERF:-perf} FREQ=${FREQ:-999} TOP=${TOP:-30} OUT=${OUT:-/tmp/perf-profile} GRAPH=${GRAPH:-0}
g=()
[ "$GRAPH" = 1 ] && g=(-g)
[ "${DELAY_MS:-0}" != 0 ] && g+=(-D "$DELAY_MS")
[ $# -gt 0 ] || { sed -n '3,19p' "$0"; exit 2; }
mkdir -p "$OUT"
labels=()
for spec in "$@"; do
  label=${spec%%=*} cmd=${spec#*=}
  labels+=("$label")
  echo "== $label: $cmd"
  # shellcheck disable=SC2086
  $PERF record -q -a "${g[@]}" -F "$FREQ" -e cpu-clock -o "$OUT/$label.data" -- $cmd >"$OUT/$label.out" 2>&1 ||
    { echo "perf_profile: '$label' failed:"; tail -5 "$OUT/$label.out"; exit 1; }
  grep -v '^#' "$OUT/$label.out" | tail -2
  # symbol share (percent of all samples), command and DSO beside it
  $PERF report -q -i "$OUT/$label.data" --stdio --no-children -g none --sort sym --percent-limit 0.2 2>/dev/null |
    awk 'NF >= 3 { pct = $1; sub(/%/, "", pct); $1 = ""; $2 = ""; sub(/^ +/, ""); print pct "\t" $0 }' \
      >"$OUT/$label.sym"
  $PERF report -q -i "$OUT/$label.data" --stdio --no-children -g none --sort comm --percent-limit 0.5 2>/dev/null \
    >"$OUT/$label.comm"
  $PERF report -q -i "$OUT/$label.data" --stdio --no-children -g none --sort dso --percent-limit 0.5 2>/dev/null \
    >"$OUT/$label.dso"
  $PERF report -q -i "$OUT/$label.data" --stdio --no-children --sort comm,dso,sym --percent-limit 0.3 \
    -g none 2>/dev/null >"$OUT/$label.thr"
  if [ "$GRAPH" = 1 ]; then
    $PERF report -i "$OUT/$label.data" --stdio --no-children --sort comm,sym --percent-limit 0.8 \
      -g caller,0.5,callee,function,percent --max-stack 14 2>/dev/null >"$OUT/$label.graph"
  fi
  echo "-- $label: by thread name, then by object (share of all samples)"
  sed 's/ *$//' "$OUT/$label.comm" | grep . | paste -sd ' '
  sed 's/ *$//' "$OUT/$label.dso" | grep . | paste -sd ' ' 
done
# One table: the union of each label's TOP symbols, every label's share.
python3 - "$OUT" "$TOP" "${labels[@]}" <<'PY'
import sys
out, top, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
share = {}
for l in labels:
    d = {}
    for line in open(f"{out}/{l}.sym"):
        p, _, s = line.rstrip("\n").partition("\t")
        try:
            d[s] = d.get(s, 0.0) + float(p)
        except ValueError:
            pass
    share[l] = d
syms = []
for l in labels:
    for s, _ in sorted(share[l].items(), key=lambda kv: -kv[1])[:top]:
        if s not in syms:
            syms.append(s)
syms.sort(key=lambda s: -max(share[l].get(s, 0.0) for l in labels))
print("\n%-48s" % "symbol (% of all samples)" + "".join("%10s" % l for l in labels))
for s in syms:
    print("%-48s" % s[:48] + "".join("%10.2f" % share[l].get(s, 0.0) for l in labels))
PY
