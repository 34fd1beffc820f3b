#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/cuda_vs_host.sh - two-sided throughput of GPU memory (through the
# built-in transport's pinned staging) next to host memory, same run, at
# 1 MiB and 256 MiB, with the ratio and the targets (GPU >= 0.7x host
# at 1 MiB, >= 0.9x at 256 MiB). About 1-2 minutes on one GPU.
#
# Usage: bench/gpu/cuda_vs_host.sh
# Environment: ROUNDS=3 (interleaved: host, cuda, host, cuda, ...; best of)
#              GPUS="0,0" (--gpu of the cuda rows; "0,0 0,1" adds GPU0 -> GPU1,
#              the default when the host has two GPUs)
#              EXTRA="" (more tpx-perf options for every row, e.g. "--channels 8")
#              BLOCKS="default" (TPX_SOCK_CUDA_BLOCK of the cuda rows; "default":
#              the environment's or the library's; a sweep: BLOCKS="256K 512K 1M",
#              a few seconds more per value; BLOCK:PIECE also sets
#              TPX_SOCK_CUDA_PIECE, e.g. "256K 512K:2M"; BLOCK/RING also sets
#              TPX_SOCK_CUDA_RING, e.g. "256K/2M 512K/4M")
# Prints one table: size, host GB/s, cuda GB/s per --gpu and block, ratio,
# target, and the cpu(s/GB) of each. Exits non-zero if a row failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/cuda/bin TPX_SOCKET_IFNAME=lo
B=build/release
cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" --target tpx tpx-perf \
  >/dev/null || { echo "build failed"; exit 1; }
ROUNDS=${ROUNDS:-3}
EXTRA=${EXTRA:-}
BLOCKS=${BLOCKS:-default}
block0=${TPX_SOCK_CUDA_BLOCK:-} ring0=${TPX_SOCK_CUDA_RING:-}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
GPUS=${GPUS:-$([ "${ngpu:-0}" -ge 2 ] && echo "0,0 0,1" || echo "0,0")}
echo "== $(uname -n), $(nproc) cores, ${ngpu:-?} GPU(s), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git log -1 --format=%h 2>/dev/null)"
LOG=$(mktemp); trap 'rm -f $LOG' EXIT
declare -A best cpu
fails=0
row() { # KEY SIZE ITERS tpx-perf options...: best GB/s (and its cpu s/GB) of KEY
  local key=$1 size=$2 iters=$3 g c; shift 3
  if ! timeout -k 5 120 $B/bin/tpx-perf --loopback --size "$size" --iters "$iters" --no-verify $EXTRA "$@" \
      >$LOG 2>&1; then
    echo "FAILED: tpx-perf --loopback --size $size $*"; tail -5 $LOG | sed 's/^/    /'
    fails=$((fails + 1)); return
  fi
  # the row: size count iters time GB/s lat p50 p99 cpu verified
  read -r g c < <(awk '$1 ~ /^[0-9]+$/ && NF >= 10 { print $5, $9; exit }' $LOG)
  if [ -n "${g:-}" ] && awk -v a="$g" -v b="${best[$key]:-0}" 'BEGIN { exit !(a > b) }'; then
    best[$key]=$g; cpu[$key]=$c
  fi
}
piece0=${TPX_SOCK_CUDA_PIECE:-}
for r in $(seq 1 "$ROUNDS"); do
  for s in 1M 256M; do
    it=$([ $s = 1M ] && echo 20000 || echo 30) # 21 GB, 8 GB: 1 GB was over in 40 ms
    row "host $s" $s $it
    for g in $GPUS; do
      for b in $BLOCKS; do
        # BLOCK alone keeps the piece of the environment (TPX_SOCK_CUDA_PIECE,
        # default 1 MiB; this script used to force 512K); BLOCK:PIECE sets it
        if [[ $b == *:* ]]; then export TPX_SOCK_CUDA_PIECE=${b#*:}
        elif [ -n "$piece0" ]; then export TPX_SOCK_CUDA_PIECE=$piece0
        else unset TPX_SOCK_CUDA_PIECE; fi
        bs=${b%%:*} blk=$block0 rg=$ring0
        [ "$bs" = default ] || blk=${bs%%/*}
        [[ $bs == */* ]] && rg=${bs#*/}
        TPX_SOCK_CUDA_BLOCK=$blk TPX_SOCK_CUDA_RING=$rg row "cuda $s $g $b" $s $it --mem cuda --gpu "$g"
      done
    done
  done
  echo "round $r of $ROUNDS done"
done
printf '\n%-6s %-5s %-8s %10s %10s %7s %7s   %s\n' size gpu block "host GB/s" "cuda GB/s" ratio target \
  "cpu s/GB host / cuda"
for s in 1M 256M; do
  tgt=$([ $s = 1M ] && echo 0.7 || echo 0.9)
  for g in $GPUS; do
    for b in $BLOCKS; do
      h=${best["host $s"]:-0} c=${best["cuda $s $g $b"]:-0}
      ratio=$(awk -v a="$c" -v b="$h" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
      ok=$(awk -v r="$ratio" -v t="$tgt" 'BEGIN { print (r >= t ? "met" : "short") }')
      printf '%-6s %-5s %-8s %10s %10s %7s %7s   %s / %s  %s\n' $s "$g" "$b" "$h" "$c" "$ratio" \
        ">=$tgt" "${cpu["host $s"]:-?}" "${cpu["cuda $s $g $b"]:-?}" "$ok"
    done
  done
done
exit $((fails > 0))
