#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/check.sh - the fast GPU correctness pass (a few minutes): every GPU
# path moves verified data once, on one GPU. bench/gpu/run.sh is the full run.
#   unpack kernel + d2d; strict TCPX handle/bounce in GPU memory (tcpx_nocpu,
#   ncclnet_diff); two-sided GPU->GPU plain and strict (kernel, d2d); the
#   transport's CUDA staging alone (test_transport cudastage); one-sided
#   READ/WRITE of GPU blocks packed (kernel, d2d) and unpacked, plain and strict.
# Prints one line per check and a summary; exits non-zero if any failed.
# Environment: ONLY=REGEX (run only the checks whose name matches, e.g.
#              ONLY='two-sided|cudastage|nopack': the quick ones, ~20 s)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/cuda/bin TPX_SOCKET_IFNAME=lo
B=build/release
cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" --target tpx \
  test_unpack_gpu tpx-perf nccl-net-tpx nccl-net-tpx-tcpx test_transport ncclnet_diff >/dev/null ||
  { echo "build failed"; exit 1; }
grep -q '^TPX_NVCC:FILEPATH=/' $B/CMakeCache.txt || { echo "no nvcc: no kernel"; exit 1; }
fails=0
LOG=$(mktemp); trap 'rm -f $LOG' EXIT
ONLY=${ONLY:-.}
chk() { # NAME CMD...
  local name=$1; shift
  [[ $name =~ $ONLY ]] || return 0
  local t0=$(date +%s%N)
  if timeout -k 5 120 "$@" >$LOG 2>&1 && ! grep -qE ' no$|WRONG|FAIL' $LOG; then r=ok; else r=FAILED; fails=$((fails+1)); fi
  printf '%-34s %-6s %5.1fs  %s\n' "$name" $r "$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { print (b - a) / 1e9 }')" \
    "$(grep -E '^ +(read|write) |^# best' $LOG | awk '{printf "%s ", ($1=="#" ? $3 "GB/s" : $2 $3 ":" $10)}')"
  [ $r = ok ] || tail -15 $LOG | sed 's/^/    /'
}
P=$B/bin/tpx-perf
chk unpack $B/bin/test_unpack_gpu --rounds 50 --no-bench
chk tcpx-nocpu-v7 env TPX_SOCK_TCPX=2 $B/bin/test_transport $B/lib/libnccl-net-tpx.so 7 tcpx_nocpu
chk tcpx-diff $B/bin/ncclnet_diff $B/lib/libnccl-net-tpx-tcpx.so
chk two-sided-plain $P --loopback --mem cuda --gpu 0,0 --sizes 1M,64M --iters 20 --verify
chk transport-cudastage env TPX_NSOCKS=4 TPX_SOCK_WORKERS=2 \
  $B/bin/test_transport $B/lib/libnccl-net-tpx.so 10 cudastage
for u in kernel d2d; do
  chk two-sided-strict-$u env TPX_SOCK_TCPX=1 TPX_UNPACK=$u $P --loopback --mem cuda --gpu 0,0 --sizes 1M,64M --iters 20 --verify
done
for op in read write; do
  for u in kernel d2d; do
    chk "$op-pack-$u" env TPX_UNPACK=$u $P --op $op --mem cuda --gpu 0,0 --block 4K,64K,100000,2M --blocks 500 --iters 5 --verify --no-raw
    chk "$op-pack-strict-$u" env TPX_SOCK_TCPX=1 TPX_UNPACK=$u $P --op $op --mem cuda --gpu 0,0 --block 4K,64K,100000,2M --blocks 500 --iters 5 --verify --no-raw
  done
  chk "$op-nopack" env TPX_RMA_PACK_BYTES=0 $P --op $op --mem cuda --gpu 0,0 --block 4K,128K --blocks 500 --iters 5 --verify --no-raw
done
echo "== $fails check(s) failed"
exit $((fails > 0))
