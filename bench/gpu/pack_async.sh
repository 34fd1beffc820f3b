#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/pack_async.sh WHEEL_DIR - one-sided transfers of GPU blocks with the GPU copies
# of shared chunks overlapping the engine (TPX_RMA_PACK_ASYNC=1, the default) and waited
# for chunk by chunk (=0), one build, settings interleaved, in one run:
#   1. tpx-perf READ and WRITE of 1000 blocks of 4K/16K/128K/512K and 100 x 2M, GPU
#      memory with each setting (and async with shared chunks of 256 KiB,
#      TPX_RMA_PACK_CHUNK=262144) and host memory beside; a table of GB/s (best of
#      ROUNDS) with async/sync and GPU/host ratios
#   2. bench/strided_bench.py --mem vram rows a (contiguous), b (half the heads, strided),
#      d (into HND 32-token blocks), with each setting
#   3. bench/kv_bench.py --mem vram: the Llama-3.1-70B TP 8 and DeepSeek-V3 MLA requests
# WHEEL_DIR holds the NIXL wheels (bench/gpu/repack_nixl.sh). Every row is verified once
# (the first post of each row) except the timed tpx-perf posts.
# Environment: GPU=0  ROUNDS=2  STEPS="1 2 3"  OUT=DIR (logs and JSON kept there)
set -euo pipefail
cd "$(dirname "$0")/../.."
GPU=${GPU:-0}
ROUNDS=${ROUNDS:-2}
STEPS=" ${STEPS:-1 2 3} "
step() { case $STEPS in *" $1 "*) return 0 ;; esac; return 1; }

. bench/gpu/lib.sh
gpu_setup "$1"
B=build/release/bin

if step 1; then
echo "== 1. tpx-perf one-sided, GPU blocks: copies overlapped (async) and waited for (sync)"
log=$OUT/perf.log
: >"$log"
for r in $(seq 1 "$ROUNDS"); do
    for op in read write; do
        for set in host sync async async256k; do
            mem=(--mem cuda --gpu "$GPU,$GPU")
            [ $set = host ] && mem=()
            a=$([ $set = sync ] && echo 0 || echo 1)
            pc=$([ $set = async256k ] && echo 262144 || echo 0)
            for bl in "4K,16K,128K,512K --blocks 1000" "2M --blocks 100"; do
                [ $set = async256k ] && [ "${bl%% *}" = 2M ] && continue
                # shellcheck disable=SC2086
                TPX_RMA_PACK_ASYNC=$a TPX_RMA_PACK_CHUNK=$pc $B/tpx-perf --op $op "${mem[@]}" \
                    --block $bl --iters 20 \
                    --no-verify 2>&1 | awk -v s=$set '$1 == "read" || $1 == "write" {
                        print s, $1, $2 $3, $4, $10 }' >>"$log"
            done
        done
    done
done
printf "%-22s %8s %8s %8s %9s %11s %9s\n" "row (GB/s, best)" host sync async a256k async/sync async/host |
    tee "$OUT/perf_table.txt"
awk '{ k = $2 " " $3 " x" $4; if ($5 > v[k, $1]) v[k, $1] = $5; keys[k] = 1 }
END {
    for (k in keys)
        printf "%-22s %8.2f %8.2f %8.2f %9.2f %11.2f %9.2f\n", k, v[k, "host"], v[k, "sync"], v[k, "async"], v[k, "async256k"],
            (v[k, "sync"] > 0 ? v[k, "async"] / v[k, "sync"] : 0),
            (v[k, "host"] > 0 ? v[k, "async"] / v[k, "host"] : 0)
}' "$log" | sort -k1,1 -k2,2n | tee -a "$OUT/perf_table.txt"
fi

if step 2; then
for a in 0 1; do
    echo "== 2. strided_bench --mem vram, TPX_RMA_PACK_ASYNC=$a"
    TPX_RMA_PACK_ASYNC=$a python3 bench/strided_bench.py --mem vram --gpu "$GPU" --iters 3 \
        --rows a,b,d --json "$OUT/strided_vram_$a.json" 2>&1 | grep -vE '^# row' |
        tee "$OUT/strided_vram_$a.log"
done
fi

if step 3; then
echo "== 3. kv_bench --mem vram"
python3 bench/kv_bench.py --mem vram --gpu "$GPU" --preset llama3-70b-tp8,dsv3-mla --iters 2 \
    --rounds 1 --peers tpx,NIXL+TPX --json "$OUT/kv_vram.json" 2>&1 | grep -vE '^# round' |
    tee "$OUT/kv_vram.log"
fi
