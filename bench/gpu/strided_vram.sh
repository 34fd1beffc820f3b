#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/strided_vram.sh WHEEL_DIR - KV cache moved into the reader's layout on a GPU host,
# in one run:
#   1. test_strided gpu on the real GPU (strided READ/WRITE of GPU memory against a CPU
#      reference, plain and strict TCPX), and engine.rma.packsize's host check
#   2. bench/strided_bench.py --mem vram: the Llama-3.1-70B-shaped slice, rows a-e, verified
#   3. the same on host memory (this host's cores, beside row 2's numbers)
#   4. bench/rma_sizes.sh: one-sided READ/WRITE of 1000 blocks of 4K..2M against
#      two-sided 256 MiB, host memory
# WHEEL_DIR holds the NIXL wheels (bench/gpu/repack_nixl.sh); nothing is fetched.
# Environment: GPU=0  ITERS=5  ROUNDS=2  STEPS="1 2 3 4" (which of the above)
#   OUT=DIR (logs and JSON kept there)
#   BASE=TAR  a source tree (`git archive REV > TAR`, relative to the tree's root) whose
#     libtpx also runs rows AB_ROWS (default a,b,d) of steps 2 and 3, ROUNDS times,
#     interleaved with this tree's (TPX_LIBRARY): a before/after table last
set -euo pipefail
cd "$(dirname "$0")/../.."
GPU=${GPU:-0}
ITERS=${ITERS:-5}
ROUNDS=${ROUNDS:-2}
STEPS=" ${STEPS:-1 2 3 4} "
step() { case $STEPS in *" $1 "*) return 0 ;; esac; return 1; }

. bench/gpu/lib.sh
gpu_setup "$1" test_strided test_rma

base_lib=
if [ -n "${BASE:-}" ]; then
    echo "== base tree $BASE"
    rm -rf /tmp/tpx-strided-base && mkdir -p /tmp/tpx-strided-base
    tar -xf "$BASE" -C /tmp/tpx-strided-base
    (cd /tmp/tpx-strided-base && cmake --preset release >/dev/null &&
        cmake --build --preset release -j "$(nproc)" --target tpx >/dev/null)
    base_lib=/tmp/tpx-strided-base/build/release/lib/libtpx.so.0
fi

# ab MEM: rows AB_ROWS on MEM with the base library and this tree's, interleaved
ab() {
    local r lib
    for r in $(seq "$ROUNDS"); do
        for lib in base new; do
            local so=$base_lib
            [ $lib = new ] && so=$PWD/build/release/lib/libtpx.so.0
            TPX_LIBRARY=$so python3 bench/strided_bench.py --mem "$1" --gpu "$GPU" \
                --iters "$ITERS" --rows "${AB_ROWS:-a,b,d}" 2>&1 |
                awk -v l=$lib -v m="$1" '/^[a-e]   /{print m, l, $0}' |
                tee -a "$OUT/ab.txt"
        done
    done
}

if step 1; then
echo "== 1. strided entries on the real GPU"
(cd build/release && ./bin/test_strided gpu 2>&1 | tail -3)
(cd build/release && TPX_SOCK_TCPX=1 TPX_UNPACK=d2d ./bin/test_strided gpu 2>&1 | tail -3)
(cd build/release && ./bin/test_rma packsize 2>&1 | grep -E 'packsize:|^ok|FAIL')
fi

if step 2; then
echo "== 2. strided_bench --mem vram"
python3 bench/strided_bench.py --mem vram --gpu "$GPU" --iters "$ITERS" \
    --json "$OUT/strided_vram.json" 2>&1 | tee "$OUT/strided_vram.log"
fi

if step 3; then
echo "== 3. strided_bench --mem dram"
python3 bench/strided_bench.py --mem dram --iters "$ITERS" \
    --json "$OUT/strided_dram.json" 2>&1 | tee "$OUT/strided_dram.log"
fi

if [ -n "$base_lib" ]; then
    echo "== before/after: mem, tree, then the row"
    for m in vram dram; do
        case $m in vram) step 2 || continue ;; dram) step 3 || continue ;; esac
        ab $m
    done
fi

if step 4; then
echo "== 4. one-sided block sizes against two-sided, host memory"
ROUNDS=$ROUNDS OUT=$OUT bench/rma_sizes.sh build/release/bin 2>&1 | tee "$OUT/rma_sizes.log"
fi
