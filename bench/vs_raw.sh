#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/vs_raw.sh - the transport and the engine against plain TCP, one run,
# ratios printed. Each round runs every row once, rounds
# interleave the rows (so a noisy minute hits all of them), and the table
# shows the median of the rounds.
#
# Usage: bench/vs_raw.sh [BUILD_DIR]       (default: build/release)
# Environment: ROUNDS=3  SIZE=256M  NS="1 2 4 8 16"  ITERS=10
#
# Rows, all over 127.0.0.1, GB/s = 1e9 B/s, cpu = s of CPU per GB (both sides):
#   raw       tpx-netbench --raw: N connections, a sender and a receiver thread
#             each, send()/recv() of each connection's stretch of a SIZE message,
#             in memory of its own (the bytes a transfer of SIZE touches)
#   raw-4M    the same, each connection looping over one 4 MiB buffer: it stays
#             in the CPU caches, so the kernel's copies cost less than any
#             SIZE transfer's can (an upper bound, printed for comparison)
#   transport tpx-netbench --nsocks N (the built-in transport alone), its
#             poller spinning on test() as NCCL's proxy thread does
#   tr-nap    the same, the poller sleeping 20 us after a pass that completed
#             nothing (--nap-us 20): on a host whose I/O workers are CPU-bound
#             (16 connections, 16 cores) the spinning poller takes a core
#   engine    tpx-perf --loopback at SIZE: defaults, --channels 8, --direction
#             bidir (both directions' bytes; on loopback both directions copy
#             on the same cores, so its ceiling is the best raw row too)
#   raw 2N    tpx-netbench --raw with twice the largest N connections: on one
#             host, N each way of a bidirectional run is just 2N connections,
#             so this bounds the engine's bidir row (printed as a ratio)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$here/build/release}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-256M}
NS=${NS:-"1 2 4 8 16"}
ITERS=${ITERS:-10}
BIN=$BUILD/bin
for t in tpx-netbench tpx-perf; do
  [ -x "$BIN/$t" ] || { echo "vs_raw: $BIN/$t is missing (build first)" >&2; exit 1; }
done
export TPX_SOCKET_IFNAME=lo
WORK=$(mktemp -d /tmp/tpx-vsraw.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# run KEY CMD...: append "GB/s cpu" of the command's last result row to $WORK/KEY
# (tpx-netbench rows: nsocks size iters time GB/s cpu ...; tpx-perf rows:
# size count iters time GB/s lat-avg p50 p99 cpu verified)
run() {
  local key=$1 out row
  shift
  if ! out=$("$@" 2>&1); then
    echo "vs_raw: failed: $*" >&2
    echo "$out" | tail -3 >&2
    echo "- -" >>"$WORK/$key"
    return
  fi
  row=$(echo "$out" | awk '!/^#/ && NF >= 6 { line = $0 } END { print line }')
  case "$(basename "$1")" in
    tpx-perf) echo "$row" | awk '{ print $5, $(NF - 1) }' >>"$WORK/$key" ;;
    *) echo "$row" | awk '{ print $5, $6 }' >>"$WORK/$key" ;;
  esac
}

NMAX=$(printf '%s\n' $NS | sort -n | tail -1)
for r in $(seq 1 "$ROUNDS"); do
  for n in $NS; do
    run "raw$n" "$BIN/tpx-netbench" --raw --size "$SIZE" --nsocks "$n" --iters "$ITERS"
    run "hot$n" "$BIN/tpx-netbench" --raw --raw-buffer 4M --size "$SIZE" --nsocks "$n" --iters "$ITERS"
    run "tr$n" "$BIN/tpx-netbench" --size "$SIZE" --nsocks "$n" --iters "$ITERS" --no-verify
    run "nap$n" "$BIN/tpx-netbench" --size "$SIZE" --nsocks "$n" --iters "$ITERS" --no-verify --nap-us 20
  done
  run engdef "$BIN/tpx-perf" --loopback --size "$SIZE" --iters "$ITERS" --no-verify
  run eng8 "$BIN/tpx-perf" --loopback --size "$SIZE" --iters "$ITERS" --no-verify --channels 8
  run engbi "$BIN/tpx-perf" --loopback --size "$SIZE" --iters "$ITERS" --no-verify --direction bidir
  run rawbi "$BIN/tpx-netbench" --raw --size "$SIZE" --nsocks "$((2 * NMAX))" --iters "$ITERS"
  echo "== round $r of $ROUNDS done" >&2
done

# med KEY COL: the median of column COL (1: GB/s, 2: cpu) over the rounds
med() {
  awk -v c="$2" '$c != "-" { v[n++] = $c }
    END { if (n == 0) { print "-"; exit }
          for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
          print (n % 2 ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2) }' "$WORK/$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }

echo
echo "# $(basename "$0"): $(nproc) CPUs, $SIZE, $ROUNDS rounds (median), $(date -u +%FT%TZ)"
printf '%-4s %9s %9s %9s %10s %9s %9s %9s %9s %9s\n' N raw raw-4M transport tr/raw tr/raw-4M tr-nap nap/raw cpu-raw cpu-tr
bestraw=0
besthot=0
for n in $NS; do
  a=$(med "raw$n" 1) h=$(med "hot$n" 1) t=$(med "tr$n" 1) z=$(med "nap$n" 1)
  printf '%-4s %9s %9s %9s %10s %9s %9s %9s %9s %9s\n' "$n" "$a" "$h" "$t" "$(ratio "$t" "$a")" \
    "$(ratio "$t" "$h")" "$z" "$(ratio "$z" "$a")" "$(med "raw$n" 2)" "$(med "tr$n" 2)"
  bestraw=$(awk -v a="$a" -v b="$bestraw" 'BEGIN { print (a != "-" && a > b) ? a : b }')
  besthot=$(awk -v a="$h" -v b="$besthot" 'BEGIN { print (a != "-" && a > b) ? a : b }')
done
echo
printf '%-22s %9s %12s %15s %9s\n' engine GB/s "/best raw" "/best raw-4M" cpu
for k in engdef:defaults eng8:"--channels 8" engbi:"bidir (both)"; do
  g=$(med "${k%%:*}" 1)
  printf '%-22s %9s %12s %15s %9s\n' "${k#*:}" "$g" "$(ratio "$g" "$bestraw")" \
    "$(ratio "$g" "$besthot")" "$(med "${k%%:*}" 2)"
done
echo "bidir / one direction (defaults): $(ratio "$(med engbi 1)" "$(med engdef 1)")"
# Both directions of one host copy on the same cores: raw TCP with 2 x NMAX
# connections (NMAX each way) is what a bidirectional run can reach here.
rb=$(med rawbi 1)
echo "bidir ceiling on this host: raw $((2 * NMAX)) conns $rb GB/s = $(ratio "$rb" "$bestraw") x best raw;" \
  "engine bidir / raw $((2 * NMAX)) conns: $(ratio "$(med engbi 1)" "$rb")"
echo "best raw $bestraw, best raw-4M $besthot GB/s"
