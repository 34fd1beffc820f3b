#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/pack_bound.sh - READs of 1000 GPU blocks (GPU memory on both sides, loopback,
# every byte verified) under the default packing bound against a 64 KiB bound (what the
# default was for GPU blocks) and a whole chunk, rounds interleaved; a table of medians last.
# Environment: BLOCKS="32K 64K 128K 256K 512K"  ROUNDS=2
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
BLOCKS=${BLOCKS:-"32K 64K 128K 256K 512K"}
echo "== host: $(uname -n), $(nproc) cores"
cmake --preset release >/dev/null &&
    cmake --build --preset release -j "$(nproc)" --target tpx tpx-perf >/dev/null || exit 1
P=$PWD/build/release/bin/tpx-perf
export TPX_SOCKET_IFNAME=lo
raw=$(mktemp)
for r in $(seq "$ROUNDS"); do
    for b in $BLOCKS; do
        for bound in default 65536 1048576; do
            envs=()
            [ "$bound" = default ] || envs=(TPX_RMA_PACK_BYTES="$bound")
            v=$(env "${envs[@]}" "$P" --op read --mem cuda --block "$b" --blocks 1000 --iters 20 --warmup 2 \
                --no-raw 2>&1 | awk '$1 == "read" { print $10, $NF; exit }')
            echo "$b|$bound|$v" | tee -a "$raw"
        done
    done
done
echo "== medians of $ROUNDS rounds, GB/s (verified: the last column of each run)"
printf '%-6s %10s %10s %10s\n' block default 64K chunk
for b in $BLOCKS; do
    row=$b
    for bound in default 65536 1048576; do
        m=$(awk -F'|' -v b="$b" -v k="$bound" '$1 == b && $2 == k { split($3, f, " "); print f[1] }' "$raw" |
            sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
        row="$row $m"
    done
    printf '%-6s %10s %10s %10s\n' $row
done
grep -c '|.* no$' "$raw" | sed 's/^/rows not verified: /'
