#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/multi.sh - on a host with two or more GPUs: every GPU in one
# process (tpx-perf --all-gpus) next to one process per GPU (tpx-launch),
# and the one-sided mode (--op read|write) on GPU memory, plain and strict
# TCPX. All on loopback (TPX_SOCKET_IFNAME=lo), all byte-verified; the
# tables come last.
#
# Usage: bench/gpu/multi.sh   (SIZE=256M ITERS=20 BLOCKS=1000)
set -uo pipefail
cd "$(dirname "$0")/../.."
SIZE=${SIZE:-256M}
ITERS=${ITERS:-20}
BLOCKS=${BLOCKS:-1000}
B=build/release/bin
OUT=${OUT:-/tmp/tpx-multi}
rm -rf "$OUT"; mkdir -p "$OUT"
export TPX_SOCKET_IFNAME=lo TPX_LOG_LEVEL=warn

echo "== host: $(uname -n), $(nproc) cores"
nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader 2>/dev/null
cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" \
  --target tpx-perf test_engine_gpu test_rma >/dev/null || { echo "build failed"; exit 1; }
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
GPUS=$(seq -s, 0 $((NGPU - 1)))

echo "== 1. --all-gpus: one process per side, GPU i <-> GPU i, $SIZE x $ITERS"
$B/tpx-perf server --all-gpus --size "$SIZE" --iters "$ITERS" --verify --port 18600 \
  > "$OUT/all-srv.log" 2>&1 &
sleep 1
$B/tpx-perf client 127.0.0.1 --all-gpus --port 18600 --json "$OUT/all-cli.json" \
  > "$OUT/all-cli.log" 2>&1; echo "client rc=$?"; wait; cat "$OUT/all-cli.log"

echo "== 2. one process per GPU (tpx-launch), same pairs"
scripts/tpx-launch --role server --gpus "$GPUS" --logdir "$OUT/pg-srv" -- --mem cuda \
  --size "$SIZE" --iters "$ITERS" --verify > "$OUT/pg-srv.log" 2>&1 &
sleep 1
scripts/tpx-launch --role client --peer 127.0.0.1 --gpus "$GPUS" --logdir "$OUT/pg-cli" \
  > "$OUT/pg-cli.log" 2>&1; echo "launch rc=$?"; wait; cat "$OUT/pg-cli.log"

echo "== 3. --all-gpus loopback sweep (GPU i -> GPU i+1, all at once)"
$B/tpx-perf --all-gpus --sizes 1M:256M --iters 10 2>&1 | tail -25

echo "== 4. one-sided on GPU memory (loopback, GPU 0), $BLOCKS blocks"
for mode in plain tcpx; do
  for op in read write; do
    env $([ $mode = tcpx ] && echo TPX_SOCK_TCPX=1) $B/tpx-perf --op $op --mem cuda --gpu 0 \
      --block 16K,128K,2M --blocks "$BLOCKS" --iters 20 --warmup 3 --verify \
      > "$OUT/rma-$mode-$op.log" 2>&1; echo "rma $mode $op rc=$?"
  done
done
for op in read write; do
  $B/tpx-perf --op $op --block 16K,128K,2M --blocks "$BLOCKS" --iters 20 --warmup 3 \
    --no-verify > "$OUT/rma-host-$op.log" 2>&1
  $B/tpx-perf --op $op --block 16K --blocks "$BLOCKS" --iters 20 --warmup 3 --no-verify \
    --prep-each > "$OUT/rma-host-prep-$op.log" 2>&1
done

echo "== 5. one-sided tests with a GPU present (strict TCPX bounce in host-mapped memory)"
for t in basic notif reject; do
  TPX_SOCK_TCPX=1 $B/test_rma $t > "$OUT/test-rma-$t.log" 2>&1; echo "test_rma tcpx $t rc=$?"
done

echo
echo "================ tables ================"
for f in "$OUT"/rma-*.log; do echo "-- $(basename "$f")"; grep -v '^#  *op\|WARN' "$f" | tail -4; done
