#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/peers_gpu.sh WHEEL_DIR [MOONCAKE_TAR] - bench/peers on a GPU host, in one run:
#   1. host memory: tpx-C, tpx-py, NIXL+TPX, NIXL+UCX over TCP, Mooncake (TCP)
#   2. GPU memory: the same peers but Mooncake (its PyPI build has no CUDA)
# WHEEL_DIR holds the NIXL wheels (bench/gpu/repack_nixl.sh). MOONCAKE_TAR, a .tar.xz
# of the mooncake-transfer-engine-non-cuda wheel's mooncake/ and its .libs/ folders
# (its benchmark and store binaries left out to travel) beside Debian libibverbs1's
# libibverbs.so.1*, adds the Mooncake rows; without it they say n/a.
# Environment: GPU=0  ROUNDS=2  ITERS=5  LAT_ITERS=500  OUT=DIR (logs and JSON kept there)
set -euo pipefail
cd "$(dirname "$0")/../.."
MC=${2:-}
GPU=${GPU:-0}
ROUNDS=${ROUNDS:-2}
ITERS=${ITERS:-5}
LAT_ITERS=${LAT_ITERS:-500}

. bench/gpu/lib.sh
gpu_setup "$1"
if [ -n "$MC" ]; then
    mc=$(mktemp -d /tmp/tpx-mooncake.XXXXXX)
    tar -xJf "$MC" -C "$mc"
    export PYTHONPATH=$PYTHONPATH:$mc LD_LIBRARY_PATH=$mc:${LD_LIBRARY_PATH:-}
    python3 -c 'from mooncake.engine import TransferEngine' 2>&1 | tail -1 || true
fi

args=(--rounds "$ROUNDS" --iters "$ITERS" --lat-iters "$LAT_ITERS")
echo "== 1. bench/peers --mem dram"
PYTHON=python3 bench/peers "${args[@]}" --json "$OUT/peers_dram.json" 2>&1 | tee "$OUT/peers_dram.log"
echo "== 2. bench/peers --mem vram"
PYTHON=python3 bench/peers "${args[@]}" --mem vram --gpu "$GPU" \
    --peers tpx-C,tpx-py,NIXL+TPX,NIXL+UCX --json "$OUT/peers_vram.json" 2>&1 |
    tee "$OUT/peers_vram.log"
