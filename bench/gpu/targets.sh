#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/targets.sh - the throughput and latency rows tpx is
# judged by, on one GPU host, in one command: each step is one of the
# scripts beside it (or bench/vs_raw.sh), its log kept under $OUT, its final
# table printed last. Build first (release), then the steps in order.
#
#   STEPS="check lat raw cuda ceiling"  which steps, in this order:
#     check  bench/gpu/check.sh      every GPU path moves verified data once
#     lat    bench/gpu/lat.sh        one-sided READ/WRITE p50/p99 against the raw
#                                    TCP round trip of the size (SETS as lat.sh)
#     raw    bench/vs_raw.sh         transport and engine against raw TCP, N = NS
#     cuda   bench/gpu/cuda_vs_host.sh  GPU memory / host memory, 1 MiB and 256 MiB,
#                                    on GPU0 -> GPU0 and, with two GPUs, GPU0 -> GPU1
#     ceiling bench/gpu/ceiling.sh   the same 1 MiB ratio for the simplest staged
#                                    pipeline over raw TCP (raw_staged.cu): what
#                                    staging itself costs on this host
#   CPUS="0-15"     run every step under `taskset -c CPUS` (empty: all CPUs). The
#                   transport's defaults are the same from 16 CPUs up (16 workers,
#                   8 sockets per comm), so 16 CPUs of a larger host stand for the
#                   16-core host the targets were set on
#   ROUNDS=3        rounds of each step (interleaved inside it; medians / best)
#   OUT=/tmp/targets
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
export PATH=$PATH:/usr/local/cuda/bin TPX_SOCKET_IFNAME=lo
STEPS=${STEPS:-"check lat raw cuda ceiling"} CPUS=${CPUS-0-15} ROUNDS=${ROUNDS:-3}
OUT=${OUT:-/tmp/targets}
mkdir -p "$OUT"
pin=()
[ -n "$CPUS" ] && pin=(taskset -c "$CPUS")
echo "== $(uname -n): $(nproc --all) CPUs (steps on: ${CPUS:-all}), $(nvidia-smi -L 2>/dev/null | grep -c '^GPU') GPU(s)," \
  "$(date -u +%FT%TZ), $(git log -1 --format=%h 2>/dev/null)"
t0=$(date +%s)
cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" >"$OUT/build.log" 2>&1 ||
  { tail -20 "$OUT/build.log"; echo "build failed"; exit 1; }
echo "== built in $(($(date +%s) - t0)) s"
fails=0
for s in $STEPS; do
  t=$(date +%s)
  case $s in
  check) cmd=(bench/gpu/check.sh) ;;
  lat) cmd=(env ROUNDS="$ROUNDS" OUT="$OUT/lat" SETS="${SETS:-default}" bench/gpu/lat.sh) ;;
  raw) cmd=(env ROUNDS="$ROUNDS" bench/vs_raw.sh) ;;
  cuda) cmd=(env ROUNDS="$ROUNDS" bench/gpu/cuda_vs_host.sh) ;;
  ceiling) cmd=(env ROUNDS="$ROUNDS" CPUS="${CPUS:-0-$(($(nproc --all) - 1))}" bench/gpu/ceiling.sh) ;;
  *) echo "targets: unknown step '$s'" >&2; exit 2 ;;
  esac
  "${pin[@]}" "${cmd[@]}" >"$OUT/$s.log" 2>&1 || { echo "== step $s FAILED"; fails=$((fails + 1)); }
  echo "== step $s: $(($(date +%s) - t)) s"
done
# The tables, last: each step's output from its table's heading on.
for s in $STEPS; do
  echo
  echo "######## $s"
  case $s in
  check) grep -E '^[a-z0-9-]+ +(ok|FAILED)|check\(s\) failed' "$OUT/$s.log" ;;
  lat) sed -n '/^== p50/,$p' "$OUT/$s.log" ;;
  raw) sed -n '/^# vs_raw.sh/,$p' "$OUT/$s.log" ;;
  cuda) sed -n '/^size /,$p' "$OUT/$s.log" | grep -v '^$' ;;
  ceiling) sed -n '/^GB\/s best/,$p' "$OUT/$s.log" ;;
  esac
done
exit $((fails > 0))
