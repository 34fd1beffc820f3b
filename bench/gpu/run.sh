#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/run.sh - build tpx on a GPU host and run everything GPU-side in
# one go, ending with the result tables.
#
# Usage: bench/gpu/run.sh          (from anywhere inside a copy of the repo)
#
# Builds with the release preset (build/release; nvcc must be found: on PATH,
# $CUDA_HOME/bin or /usr/local/cuda/bin), then runs:
#   1. test_unpack_gpu: unpack kernel + d2d correctness on random fragment
#      lists, then throughput of 64 MiB of 4 KiB fragments next to
#      cuMemcpyDtoD of the same bytes.
#   2. strict TCPX on one GPU: the plugin's device handle and
#      bounce buffer in GPU memory as with Google's plugin; a CPU read of
#      either must fault (tcpx_nocpu), the v7 table must match plugin 3.1.9
#      (ncclnet_diff), and tpx-perf moves verified data: two-sided GPU->GPU
#      (TPX_UNPACK=kernel) at 1M, 16M, 256M, host receives through the GPU
#      bounce buffer (TPX_SOCK_TCPX=2, device-to-host copies), and a
#      one-sided READ of 1000 GPU blocks.
#   3. the Python package on a torch CUDA tensor (py_vram.py): READ of
#      1000 x 128 KiB GPU blocks between two engines, verified, GB/s.
#   4. (CPU_BENCH=1, the default) the transport and the engine over loopback,
#      and one-sided READ/WRITE latency next to a raw TCP round trip.
# Environment: DEVICE=0  ROUNDS=200 (random correctness rounds)
#              ITERS=50 (timed iterations per throughput row)
#              OUT=DIR  (also keep the full log there)
# Exits non-zero if a step fails or is skipped (no GPU, no kernel).
set -euo pipefail
cd "$(dirname "$0")/../.."

DEVICE=${DEVICE:-0}
ROUNDS=${ROUNDS:-200}
ITERS=${ITERS:-50}
BUILD=build/release
LOG=$(mktemp /tmp/tpx-gpu-bench.XXXXXX)
trap 'rm -f "$LOG"' EXIT

echo "== host: $(uname -n), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total \
  --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not available)"

echo "== build (release preset)"
cmake --preset release >/dev/null
if ! grep -q '^TPX_NVCC:FILEPATH=/' "$BUILD/CMakeCache.txt"; then
  echo "nvcc not found: the unpack kernel would not be built" >&2
  exit 1
fi
# Only what the steps below run, so work in progress elsewhere cannot stop it.
cmake --build --preset release -j "$(nproc)" --target tpx test_unpack_gpu test_engine_gpu tpx-netbench tpx-perf nccl-net-tpx \
  nccl-net-tpx-tcpx test_transport ncclnet_diff >/dev/null

step() { # step NAME COMMAND...: run, log, fail on error or skip (77)
  local name=$1 rc=0
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee -a "$LOG" || rc=$? # pipefail: the command's status
  if [ "$rc" -eq 77 ]; then
    echo "$name: SKIPPED (see above)" >&2
    exit 1
  elif [ "$rc" -ne 0 ]; then
    echo "$name: FAILED (exit $rc)" >&2
    exit "$rc"
  fi
}

step unpack "$BUILD/bin/test_unpack_gpu" --device "$DEVICE" --rounds "$ROUNDS" --iters "$ITERS"
# How the driver's entry points were found (cuGetProcAddress_v2 on CUDA 12+; dlsym only
# as a fallback), and that a verified GPU transfer runs on them.
step cuda-entry sh -c 'TPX_LOG_LEVEL=debug CUDA_VISIBLE_DEVICES=$1 TPX_SOCKET_IFNAME=lo "$0" \
  --loopback --mem cuda --gpu 0,0 --size 1M --iters 2 --verify 2>&1 | grep -m1 "CUDA entry points"' \
  "$BUILD/bin/tpx-perf" "$DEVICE"

# Strict TCPX on one GPU: handle + bounce buffer in GPU memory (cuMemAlloc),
# receives into GPU memory gathered by the kernel, never read on the CPU.
TCPX_ENV="TPX_SOCKET_IFNAME=lo CUDA_VISIBLE_DEVICES=$DEVICE"
echo "==== strict TCPX, one GPU, handle + bounce in GPU memory" >>"$LOG"
for abi in 7 10; do
  step "tcpx-nocpu-v$abi" env $TCPX_ENV TPX_SOCK_TCPX=2 \
    "$BUILD/bin/test_transport" "$BUILD/lib/libnccl-net-tpx.so" $abi tcpx_nocpu
done
step tcpx-unpack env $TCPX_ENV TPX_SOCK_TCPX=2 \
  "$BUILD/bin/test_transport" "$BUILD/lib/libnccl-net-tpx.so" 7 tcpx_unpack
step tcpx-diff env $TCPX_ENV "$BUILD/bin/ncclnet_diff" "$BUILD/lib/libnccl-net-tpx-tcpx.so"
# Small sizes need many iterations: with 10, the pipeline's ramp-up is most
# of the time (1 MiB measured 0.49 GB/s at 10 iterations, 8.2 at 200).
step tcpx-gpu-perf env $TCPX_ENV TPX_SOCK_TCPX=1 TPX_UNPACK=kernel \
  "$BUILD/bin/tpx-perf" --loopback --mem cuda --gpu 0,0 --sizes 1M,16M --iters 200 --verify
step tcpx-gpu-perf-256M env $TCPX_ENV TPX_SOCK_TCPX=1 TPX_UNPACK=kernel \
  "$BUILD/bin/tpx-perf" --loopback --mem cuda --gpu 0,0 --sizes 256M --iters 10 --verify
step gpu-perf-plain env $TCPX_ENV \
  "$BUILD/bin/tpx-perf" --loopback --mem cuda --gpu 0,0 --sizes 1M,16M --iters 200 --verify
step tcpx-gpu-perf-host env $TCPX_ENV TPX_SOCK_TCPX=2 \
  "$BUILD/bin/tpx-perf" --loopback --sizes 1M,16M,256M --iters 5 --verify
step tcpx-gpu-read env $TCPX_ENV TPX_SOCK_TCPX=1 TPX_UNPACK=kernel \
  "$BUILD/bin/tpx-perf" --op read --mem cuda --gpu 0 --block 16K,128K --blocks 1000 --iters 10 \
  --verify
echo "==== end strict TCPX" >>"$LOG"
# The same READ in plain mode, both engines on GPU 0 (--gpu 0,0): a case that once hung.
step rma-gpu-plain env $TCPX_ENV timeout 120 \
  "$BUILD/bin/tpx-perf" --loopback --op read --mem cuda --gpu 0,0 --block 16K,128K --blocks 1000 \
  --iters 20 --verify

# Small blocks (target: 1000 x 4 KiB READ >= 0.5x of 1000 x 2 MiB): packed into shared
# chunks (TPX_RMA_PACK_BYTES, default 64 KiB; GPU blocks by the unpack kernel, pack.c) and
# not (=0), host and GPU memory, READ and WRITE, plain mode; then strict TCPX on the GPU.
echo "==== small blocks" >>"$LOG"
# not fatal: a failing row is reported and the later steps still run
sstep() { (step "$@") || echo "$1: FAILED (continuing)" | tee -a "$LOG"; }
for op in read write; do
  for mem in host cuda; do
    for pack in 64K 0; do
      echo "-- rma-$op-$mem-pack$pack" >>"$LOG"
      sstep "rma-$op-$mem-pack$pack" env $TCPX_ENV TPX_RMA_PACK_BYTES=$pack timeout 300 \
        "$BUILD/bin/tpx-perf" --loopback --op $op --mem $mem --gpu 0,0 --block 4K,16K,64K,128K,2M \
        --blocks 1000 --iters 20 --warmup 3 --verify --no-raw
    done
  done
  echo "-- rma-$op-cuda-strict" >>"$LOG"
  sstep "rma-$op-cuda-strict" env $TCPX_ENV TPX_SOCK_TCPX=1 TPX_UNPACK=kernel timeout 300 \
    "$BUILD/bin/tpx-perf" --loopback --op $op --mem cuda --gpu 0,0 --block 4K,16K,128K,2M \
    --blocks 1000 --iters 20 --warmup 3 --verify --no-raw
done
echo "==== end small blocks" >>"$LOG"

# GPU0 -> GPU1 through the engine (two GPUs), next to NCCL's socket transport
# and NCCL over our plugin.
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
# Stock NCCL (the nvidia-nccl wheel's libnccl, else the system's) loads the plugin in a
# one-rank communicator: which ncclNet table it took, and the plugin's devices.
if [ "$NGPU" -ge 1 ]; then
  step nccl-net-check python3 bench/gpu/nccl_net_check.py "$BUILD/lib/libnccl-net-tpx.so"
fi
if [ "$NGPU" -ge 2 ]; then
  step engine-gpu env TPX_SOCKET_IFNAME=lo "$BUILD/bin/test_engine_gpu" --sizes 1M,16M,256M,1G --iters 10
  step engine-gpu-4M env TPX_SOCKET_IFNAME=lo TPX_CHUNK_BYTES=4M TPX_NSOCKS=4 \
    "$BUILD/bin/test_engine_gpu" --sizes 1M,16M,256M,1G --iters 10
  # strict TCPX mode: devmem-style delivery, gathered by the unpack kernel
  for m in kernel d2d host; do
    step "engine-gpu-tcpx-$m" env TPX_SOCKET_IFNAME=lo TPX_SOCK_TCPX=1 TPX_UNPACK=$m \
      "$BUILD/bin/test_engine_gpu" --sizes 1M,16M,256M --iters 5
  done
  step engine-gpu-tcpx-4M env TPX_SOCKET_IFNAME=lo TPX_SOCK_TCPX=1 TPX_CHUNK_BYTES=4M \
    TPX_NSOCKS=4 "$BUILD/bin/test_engine_gpu" --sizes 256M,1G --iters 10
  step nccl python3 bench/gpu/nccl_plugin.py "$BUILD/lib/libnccl-net-tpx.so" 1048576,16777216,268435456
fi

# The host's CPU side: the transport alone over loopback for 1..16 data
# sockets (this picks TPX_NSOCKS' default), and the engine next to it.
if [ "${CPU_BENCH:-1}" = 1 ]; then
  export TPX_SOCKET_IFNAME=lo
  step netbench "$BUILD/bin/tpx-netbench" --loopback --sizes 4M:256M --nsocks 1,2,4,8,16 \
    --iters 10 --no-verify --json "${OUT:-/tmp}/netbench.json"
  for ch in 1 2 4; do
    step "perf-ch$ch" "$BUILD/bin/tpx-perf" --loopback --size 256M --iters 10 --no-verify \
      --channels "$ch" --compare-transport --quiet
  done
  # One-sided latency: a lone READ/WRITE next to a raw TCP round trip of the
  # same size in the same run (x_raw = p50 / raw p50), WRITE's notification latency, and
  # the CPU of an idle engine.
  echo "==== latency" >>"$LOG"
  lstep() { echo "-- $1" >>"$LOG"; step "$@"; } # the step's name above its rows
  for op in read write; do
    lstep "latency-$op" "$BUILD/bin/tpx-perf" --loopback --op $op --latency --blocks 1 \
      --block 4K,64K,512K --iters 1000
    lstep "latency-$op-32x16K" "$BUILD/bin/tpx-perf" --loopback --op $op --latency --blocks 32 \
      --block 16K --iters 1000
  done
  # a lone READ that finds both engines idle (150 ms since the last one)
  lstep latency-read-cold "$BUILD/bin/tpx-perf" --loopback --op read --latency --gap 150 \
    --blocks 1 --block 4K --iters 40 --warmup 2
  # the same rows with spinning off: the transport's wake-up alone (CPU per policy)
  lstep latency-read-nospin env TPX_SPIN_US=0 "$BUILD/bin/tpx-perf" --loopback --op read \
    --latency --blocks 1 --block 4K,64K,512K --iters 1000
  echo "==== end latency" >>"$LOG"
  # Shared I/O workers and isend's direct write, one line per row:
  # raw TCP ceiling, the transport with the default pool and with one worker per
  # connection, the engine one way and both ways, a lone READ, threads/fds of a pair.
  echo "==== io workers" >>"$LOG"
  lstep io-raw "$BUILD/bin/tpx-netbench" --loopback --raw --sizes 256M --nsocks 1,2,4,8,16 --iters 10
  lstep io-transport "$BUILD/bin/tpx-netbench" --loopback --sizes 256M --nsocks 1,2,4,8,16 --iters 10 --no-verify
  lstep io-transport-w16 env TPX_SOCK_WORKERS=16 "$BUILD/bin/tpx-netbench" --loopback --sizes 256M --nsocks 8,16 --iters 10 --no-verify
  lstep io-engine "$BUILD/bin/tpx-perf" --loopback --size 256M --iters 10 --no-verify --quiet
  lstep io-engine-bidir "$BUILD/bin/tpx-perf" --loopback --size 256M --iters 10 --no-verify --quiet --direction bidir
  lstep io-read-latency "$BUILD/bin/tpx-perf" --loopback --op read --latency --blocks 1 --block 4K,64K,512K --iters 1000
  lstep io-threads sh -c '"$0" --loopback --size 1M --iters 100000 --no-verify --quiet --timeout 30 & p=$!; sleep 3; echo "threads $(ls /proc/$p/task | wc -l) fds $(ls /proc/$p/fd | wc -l) (one process, engine pair, defaults)"; kill $p; wait $p 2>/dev/null; true' "$BUILD/bin/tpx-perf"
  # before/after side by side: AB_BASE=<git rev before the pool> (bench/ab.sh builds both)
  [ -n "${AB_BASE:-}" ] && lstep io-ab env ROUNDS=2 ROWS="net perf lat threads" bench/ab.sh "$AB_BASE"
  echo "==== end io workers" >>"$LOG"
fi

# The Python package on GPU memory; not fatal (torch/numpy may be missing here).
echo "== py-vram"
env PYTHONPATH="$PWD/python" TPX_LIBRARY="$BUILD/lib/libtpx.so.0" TPX_SOCKET_IFNAME=lo \
  TPX_BIND_ADDR=127.0.0.1 DEVICE="$DEVICE" python3 bench/gpu/py_vram.py 2>&1 | tee -a "$LOG" ||
  echo "py-vram: FAILED or skipped (exit $?)" | tee -a "$LOG"

if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$LOG" "$OUT/gpu-bench.log"; fi
echo
echo "================ results ================"
sed -n '/^GPU [0-9]*:/p' "$LOG" | head -1
grep -m1 'CUDA entry points' "$LOG" || true
sed -n '/^== unpack throughput/,/^kernel 16x1024x4K (1 launch/p' "$LOG"
echo "---- strict TCPX, one GPU (handle + bounce in GPU memory; all verified) ----"
sed -n '/^==== strict TCPX, one GPU/,/^==== end strict TCPX/p' "$LOG" |
  grep -E '^ +[0-9]+ +[0-9]+ |^ +(read|write) |^# best|difference|^PASS' || true
echo "---- small blocks: 1000 x 4K..2M, packed (TPX_RMA_PACK_BYTES=64K) or not (0), GB/s and CPU us per transfer ----"
sed -n '/^==== small blocks/,/^==== end small blocks/p' "$LOG" | grep -E 'FAILED' || true
sed -n '/^==== small blocks/,/^==== end small blocks/p' "$LOG" | grep -E '^-- |^ +(read|write) ' |
  awk '/^-- /{n=$2; next} {printf "%-28s %8s %-4s %9s GB/s %10s cpu_us\n", n, $2, $3, $10, $11}' || true
echo "---- transport alone (GB/s, 1e9 B/s) ----"
grep -E '^ +[0-9]+ +[0-9]+ ' "$LOG" | head -40 || true
grep -E 'engine/transport' "$LOG" || true
grep -E '^python tpx VRAM|^py-vram' "$LOG" || true
if [ "${CPU_BENCH:-1}" = 1 ]; then
  echo "---- one-sided latency, loopback, us (x_raw = p50 / raw TCP p50) ----"
  sed -n '/^==== latency/,/^==== end latency/p' "$LOG" | grep -E '^-- |^#    op|^ +(read|write) |^# idle' |
    awk '!/^#    op/ || !h++' || true
  echo "---- io workers: raw TCP vs transport, engine, READ latency, threads ----"
  sed -n '/^==== io workers/,/^==== end io workers/p' "$LOG" |
    grep -E '^-- |^ +[0-9]+ +[0-9]+ |GB/s|^ +read |^threads |new/base|^[a-z].*  +[0-9.]+ +[0-9.]+ +[0-9.]+$' || true
fi
if [ "$NGPU" -ge 2 ]; then
  echo "---- GPU0 -> GPU1 through the engine ----"
  grep -E '^(== engine-gpu|[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +verified)' "$LOG" | head -30
  sed -n '/^==== NCCL send\/recv/,$p' "$LOG" | head -6
fi
