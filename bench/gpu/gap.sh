#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/gap.sh - where the two throughput gaps (GPU/host, transport/raw) come from,
# on one GPU host, one run: settings side by side, rounds interleaved (a noisy
# minute hits every row), best and median of the rounds printed.
#
#   cuda: GPU memory against host memory at 1 MiB transfers (target >= 0.7x),
#         tpx-perf --loopback --size 1M --iters 10000 (one GPU, GPU0 -> GPU0),
#         under staging block sizes, chunk sizes, channel shapes, workers
#   n16:  the transport alone with 16 connections against raw TCP with 16
#         (target >= 0.9x), tpx-netbench --size 256M --nsocks 16, under worker
#         counts, poller naps and piece sizes
#
# Usage: bench/gpu/gap.sh            (build/release must exist: bench/gpu/targets.sh
#                                     or cmake --build --preset release)
# Environment: ROUNDS=3  WHAT="cuda n16"  OUT=/tmp/gap (the raw rows, kept)
#              ROWS_FILE=F (more rows, one per line: GROUP|LABEL|ENV,ENV|COMMAND,
#              as the tables below, with the group first; a new group's first
#              row is its reference)
#              ONLY=REGEX (run only the rows whose label matches; the first
#              row of each group, the reference, always runs)
# Prints one table per group: row, best GB/s, median GB/s, median cpu s/GB,
# best / the group's reference row (host memory; raw TCP).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/cuda/bin TPX_SOCKET_IFNAME=lo
ROUNDS=${ROUNDS:-3} WHAT=${WHAT:-"cuda n16"} OUT=${OUT:-/tmp/gap} ONLY=${ONLY:-.}
B=build/release/bin
mkdir -p "$OUT"
rows=$OUT/rows
: >"$rows"
# Each row: label, then env assignments (comma list, "-" for none), then the
# command. tpx-perf rows read columns 5 (GB/s) and NF-1 (cpu); tpx-netbench
# rows columns 5 and 6.
cuda_rows=(
  "host|-|perf --size 1M --iters 10000"
  "cuda|-|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "cuda-block128K|TPX_SOCK_CUDA_BLOCK=128K|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "cuda-block512K|TPX_SOCK_CUDA_BLOCK=512K|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "host-chunk1M|TPX_CHUNK_BYTES=1M|perf --size 1M --iters 10000"
  "cuda-chunk1M|TPX_CHUNK_BYTES=1M|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "cuda-chunk1M-d33|TPX_CHUNK_BYTES=1M|perf --size 1M --iters 10000 --mem cuda --gpu 0,0 --depth 33"
  "cuda-depth64|-|perf --size 1M --iters 10000 --mem cuda --gpu 0,0 --depth 64"
  "cuda-window32|TPX_WINDOW=32|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "host-window32|TPX_WINDOW=32|perf --size 1M --iters 10000"
  "cuda-csocks1|TPX_CHANNEL_SOCKS=1|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "cuda-csocks2|TPX_CHANNEL_SOCKS=2|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "cuda-ch8|TPX_CHANNELS=8|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "cuda-workers8|TPX_SOCK_WORKERS=8|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "cuda-workers32|TPX_SOCK_WORKERS=32|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
  "cuda-spin0|TPX_SPIN_US=0|perf --size 1M --iters 10000 --mem cuda --gpu 0,0"
)
n16_rows=(
  "raw16|-|netbench --raw --size 256M --nsocks 16 --iters 10"
  "tr16|-|netbench --size 256M --nsocks 16 --iters 10 --no-verify"
  "tr16-nap20|-|netbench --size 256M --nsocks 16 --iters 10 --no-verify --nap-us 20"
  "tr16-workers8|TPX_SOCK_WORKERS=8|netbench --size 256M --nsocks 16 --iters 10 --no-verify"
  "tr16-workers32|TPX_SOCK_WORKERS=32|netbench --size 256M --nsocks 16 --iters 10 --no-verify"
  "tr16-piece256K|TPX_PIECE_BYTES=256K|netbench --size 256M --nsocks 16 --iters 10 --no-verify"
  "tr16-piece4M|TPX_PIECE_BYTES=4M|netbench --size 256M --nsocks 16 --iters 10 --no-verify"
  "tr16-buf4M|TPX_SOCK_BUF_BYTES=4M|netbench --size 256M --nsocks 16 --iters 10 --no-verify"
  "tr16-buf1M|TPX_SOCK_BUF_BYTES=1M|netbench --size 256M --nsocks 16 --iters 10 --no-verify"
  "tr16-buf512K|TPX_SOCK_BUF_BYTES=512K|netbench --size 256M --nsocks 16 --iters 10 --no-verify"
  "tr16-nap-buf1M|TPX_SOCK_BUF_BYTES=1M|netbench --size 256M --nsocks 16 --iters 10 --no-verify --nap-us 20"
  "raw8|-|netbench --raw --size 256M --nsocks 8 --iters 10"
  "tr8|-|netbench --size 256M --nsocks 8 --iters 10 --no-verify"
)
if [ -n "${ROWS_FILE:-}" ]; then
  while IFS= read -r line; do
    [ -z "$line" ] || [[ $line == \#* ]] && continue
    g=${line%%|*}
    declare -n list=${g}_rows
    list+=("${line#*|}")
    unset -n list
  done <"$ROWS_FILE"
fi
echo "== gap.sh: $(uname -n), $(nproc) CPUs, $(date -u +%FT%TZ), $(git log -1 --format=%h 2>/dev/null), groups: $WHAT"
for r in $(seq "$ROUNDS"); do
  for g in $WHAT; do
    declare -n list=${g}_rows
    for row in "${list[@]}"; do
      IFS='|' read -r label envs cmd <<<"$row"
      [ "$row" = "${list[0]}" ] || [[ $label =~ $ONLY ]] || continue
      env=()
      [ "$envs" = - ] || IFS=, read -ra env <<<"$envs"
      set -- $cmd
      tool=$1
      shift
      case $tool in
      perf) bin=$B/tpx-perf; set -- --loopback "$@" --no-verify ;;
      netbench) bin=$B/tpx-netbench ;;
      raw) bin=/tmp/raw_staged  # the bare staged pipeline (bench/gpu/raw_staged.cu)
        [ -n "${raw_built:-}" ] || nvcc -O2 -arch=sm_90 -o $bin bench/gpu/raw_staged.cu -lpthread || exit 1
        raw_built=1
        set -- "$@" --verify ;;
      esac
      if out=$(env "${env[@]}" timeout -k 5 120 "$bin" "$@" 2>&1); then
        echo "$out" | awk -v g="$g" -v l="$label" -v t="$tool" '!/^#/ && $1 ~ /^[0-9]+$/ && NF >= 6 { line = $0 }
          t == "raw" && $7 == "yes" { line = $0 }
          END { if (line == "") exit; n = split(line, f, " ");
                print g, l, f[5], (t == "perf" ? f[n - 1] : f[6]) }' >>"$rows"
      else
        echo "== FAILED ($g $label): $bin $*"
        echo "$out" | tail -3
      fi
    done
    unset -n list
  done
  echo "== round $r of $ROUNDS done ($(date -u +%T))"
done
python3 - "$rows" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 4]
groups = []
for r in rows:
    if r[0] not in groups:
        groups.append(r[0])
for g in groups:
    labels = []
    for r in rows:
        if r[0] == g and r[1] not in labels:
            labels.append(r[1])
    ref = max(float(r[2]) for r in rows if r[0] == g and r[1] == labels[0])
    print(f"\n{g}: {'row':16} {'best':>7} {'median':>7} {'cpu':>6} {'best/' + labels[0]:>12}")
    for l in labels:
        v = [float(r[2]) for r in rows if r[0] == g and r[1] == l]
        c = [float(r[3]) for r in rows if r[0] == g and r[1] == l]
        print(f"{'':{len(g) + 2}}{l:16} {max(v):7.2f} {st.median(v):7.2f} {st.median(c):6.2f} "
              f"{max(v) / ref:12.2f}")
PY
