#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/onesided_why.sh [WHEEL_DIR] - where one-sided transfers lose against two-sided
# ones on a many-core host, in one run (host memory, loopback; no GPU needed except step 4):
#   1. the same bytes both ways: two-sided 256 MiB and 1000 x B in one batch, one-sided READ
#      and WRITE of 1000 x B, for B in BLOCKS; each row's "# phases" line kept in the log
#   2. READ 1000 x B under the knobs that decide its parallelism: transfers in flight,
#      channels, connections per channel, vectored messages, I/O workers (KNOBS)
#   3. CPU per thread (bench/cpu_threads.sh -a) of two-sided 256 MiB and READ 1000 x 128 KiB
#      and 4 KiB: which thread, if any, is saturated
#   4. with WHEEL_DIR: the same for the strided KV slice's row b (bench/strided_bench.py),
#      host and GPU memory
#   5. with WHEEL_DIR: GPU copies of packed chunks on 1 stream against TPX_RMA_PACK_STREAMS=8:
#      the strided rows a, b, d and READs of 1000 GPU blocks of 4K, 16K, 64K, all verified
# Rounds interleaved (ROUNDS, default 2), medians; a table last.
# Environment: BLOCKS="4K 128K 2M"  ROUNDS=2  STEPS="1 2 3 4 5"  OUT=DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
BLOCKS=${BLOCKS:-"4K 128K 2M"}
STEPS=" ${STEPS:-1 2 3 4 5} "
step() { case $STEPS in *" $1 "*) return 0 ;; esac; return 1; }
OUT=${OUT:-$(mktemp -d /tmp/onesided-why.XXXXXX)}
mkdir -p "$OUT"
raw=$OUT/rows.txt
: >"$raw"
echo "== host: $(uname -n), $(nproc) cores"
cmake --preset release >/dev/null &&
    cmake --build --preset release -j "$(nproc)" --target tpx tpx-perf >/dev/null || exit 1
P=$PWD/build/release/bin/tpx-perf
if [ -n "${1:-}" ]; then # the Python package and NIXL wheels of steps 4 and 5
    . bench/gpu/lib.sh
    gpu_pyenv "$(cd "$1" && pwd)"
fi
export TPX_SOCKET_IFNAME=lo
"$P" --loopback --size 1M --iters 2 --no-verify 2>&1 | grep '^# engine' | head -3

iters() { # about 1 s a row at 20 GB/s, at least 3 transfers
    case $1 in 4K) echo 3000 ;; 16K) echo 1000 ;; 64K) echo 300 ;; 128K) echo 150 ;;
        256K) echo 80 ;; *) echo 10 ;; esac
}
# one LABEL ENV... -- ARGS...: one row; GB/s into $raw, the output into the log
one() {
    local label=$1 envs=() v
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    v=$(env "${envs[@]}" "$P" "$@" 2>&1 | tee -a "$OUT/log.txt" |
        awk '/^# best:/ { print $3; exit } $1 == "read" || $1 == "write" { print $10; exit }')
    echo "$label|${v:--}" >>"$raw"
}
two() { one "$1" -- --loopback --size "$2" --batch "${3:-1}" --iters "${4:-8}" --no-verify --quiet; }
rma() { # LABEL OP BLOCK [ENV...] [-- EXTRA ARGS]
    local label=$1 op=$2 b=$3 envs=() extra=()
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && { shift; extra=("$@"); }
    one "$label" "${envs[@]}" -- --op "$op" --block "$b" --blocks 1000 --iters "$(iters "$b")" \
        --warmup 2 --no-verify --no-raw "${extra[@]}"
}
KNOBS=${KNOBS:-"inflight=2 inflight=4 channels=8 TPX_CHANNEL_SOCKS=1 TPX_CHANNEL_SOCKS=2 TPX_RMA_IOV=0 TPX_SOCK_WORKERS=8 TPX_CHUNK_BYTES=4M"}
knob() { # KNOB -> env or extra args for rma
    case $1 in
        inflight=*) echo "-- --inflight ${1#*=}" ;;
        channels=*) echo "-- --channels ${1#*=}" ;;
        *) echo "$1" ;;
    esac
}
for r in $(seq "$ROUNDS"); do
    if step 1; then
        two "two-sided 256M" 256M
        for b in $BLOCKS; do
            two "two-sided 1000x$b" "$b" 1000 "$(( $(iters "$b") / 20 + 3 ))"
            rma "read 1000x$b" read "$b"
            rma "write 1000x$b" write "$b"
        done
    fi
    if step 2; then
        for b in $BLOCKS; do
            for k in $KNOBS; do
                # shellcheck disable=SC2046
                rma "read 1000x$b $k" read "$b" $(knob "$k")
            done
        done
    fi
    echo "== round $r of $ROUNDS done" >&2
done

if step 3; then
    for spec in "two-sided 256M|--loopback --size 256M --iters 400 --no-verify --quiet" \
        "read 1000x128K|--op read --block 128K --blocks 1000 --iters 3000 --no-verify --no-raw" \
        "read 1000x4K|--op read --block 4K --blocks 1000 --iters 100000 --no-verify --no-raw"; do
        echo "== threads: ${spec%%|*}"
        # shellcheck disable=SC2086
        bench/cpu_threads.sh -a -w 2 -s 3 "$P" ${spec#*|} | head -24
    done
fi

if step 4 && [ -n "${1:-}" ]; then
    for mem in dram vram; do
        echo "== strided rows a, b, $mem: phases per transfer"
        python3 bench/strided_bench.py --mem $mem --rows a,b --iters 4 2>&1 | grep -E '^# row|^[ab] '
        echo "== threads: strided row b, $mem"
        bench/cpu_threads.sh -a -w 12 -s 4 python3 bench/strided_bench.py --mem $mem \
            --rows b --iters 200 | head -24
    done
fi

if step 5 && [ -n "${1:-}" ]; then
    # GPU copies of shared chunks over 1 stream or TPX_RMA_PACK_STREAMS (default): strided
    # rows and packed GPU blocks, verified, interleaved
    for r in $(seq "$ROUNDS"); do
        for s in 1 8; do
            echo "== pack streams $s, round $r"
            TPX_RMA_PACK_STREAMS=$s python3 bench/strided_bench.py --mem vram --rows a,b,d \
                --iters 4 2>&1 | grep -E '^[abd] ' | sed "s/^/streams=$s /"
            for b in 4K 16K 64K 128K 256K; do
                TPX_RMA_PACK_STREAMS=$s one "gpu read 1000x$b streams=$s" -- --op read \
                    --mem cuda --block "$b" --blocks 1000 --iters "$(( $(iters "$b") / 3 + 3 ))" \
                    --warmup 2 --no-raw
            done
            for b in 128K 256K; do # packed as well (the bound a whole chunk)
                TPX_RMA_PACK_STREAMS=$s TPX_RMA_PACK_BYTES=1048576 one \
                    "gpu read 1000x$b streams=$s packed" -- --op read --mem cuda --block "$b" \
                    --blocks 1000 --iters "$(( $(iters "$b") / 3 + 3 ))" --warmup 2 --no-raw
            done
        done
    done
fi

echo "== medians of $ROUNDS rounds, GB/s"
python3 - "$raw" <<'EOF'
import collections, statistics, sys
v = collections.OrderedDict()
for line in open(sys.argv[1]):
    k, g = line.rstrip("\n").rsplit("|", 1)
    v.setdefault(k, [])
    if g != "-":
        v[k].append(float(g))
two = statistics.median(v["two-sided 256M"]) if v.get("two-sided 256M") else None
for k, g in v.items():
    m = statistics.median(g) if g else None
    print("%-40s %7s %6s   %s" % (k, "%.2f" % m if m else "-",
                                  "%.2f" % (m / two) if m and two else "-",
                                  " ".join("%.2f" % x for x in g)))
print("(second column: / two-sided 256M of the same run)")
EOF
