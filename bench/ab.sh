#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/ab.sh - before/after in one run: build two trees of tpx and run the
# same benchmark rows on each, interleaved (base, new, base, new, ...), then
# print one table: row, base, new, new/base (best of ROUNDS each; GB/s rows:
# higher is better, us and thread rows: lower is better).
#
# Usage: bench/ab.sh BASE [NEW]
#   BASE, NEW: a git revision of this repository, a directory holding a tpx
#   source tree, or a .tar of one (`git archive REV > base.tar`, for a
#   machine that has no .git). NEW defaults to this working tree.
# Environment: ROUNDS=3  ROWS="net perf rma lat cuda threads" (groups to run)
#   MEM=host|cuda (cuda adds GPU rows to "rma" and "cuda")  SIZE=256M
#   OUT=DIR (also keep the table and the raw log there)
# Rows (the throughput and latency rows of docs/performance.md):
#   net:     raw TCP and the transport alone (tpx-netbench), N = 1,2,4,8,16
#   perf:    engine host->host at SIZE, defaults, --channels 8, --direction bidir
#   rma:     one-sided READ of 1000 x 4K/16K/128K/2M blocks (host)
#   cuda:    two-sided and one-sided with GPU memory (MEM=cuda only; two-sided
#            also with TPX_SOCK_CUDA_WORD=1)
#   lat:     one-sided READ/WRITE latency p50 of 1 x 4K/64K/512K, 32 x 16K, raw TCP beside
#   p99:     one-sided READ/WRITE latency p99 of 1 x 4K/64K/512K (2000 iterations; not by default)
#   threads: threads and fds of a process with a connected engine pair
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BASE=${1:?usage: bench/ab.sh BASE [NEW]}
NEW=${2:-$here}
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-"net perf rma lat threads"}
MEM=${MEM:-host}
SIZE=${SIZE:-256M}
WORK=$(mktemp -d /tmp/tpx-ab.XXXXXX)
LOG=$WORK/log
trap 'rm -rf "$WORK"' EXIT
export TPX_SOCKET_IFNAME=lo
export PATH=$PATH:/usr/local/cuda/bin

# ---- trees --------------------------------------------------------------------
tree() { # tree SPEC DIR: the source tree of SPEC in DIR
  local spec=$1 dir=$2
  mkdir -p "$dir"
  if [ -d "$spec" ]; then
    (cd "$spec" && tar --exclude=./build --exclude=./.git -cf - .) | tar -xf - -C "$dir"
  elif [ -f "$spec" ]; then
    tar -xf "$spec" -C "$dir"
  else
    git -C "$here" archive "$spec" | tar -xf - -C "$dir"
  fi
}
build() { # build DIR
  (cd "$1" && cmake --preset release >/dev/null &&
    cmake --build --preset release -j "$(nproc)" --target tpx tpx-perf tpx-netbench >/dev/null)
}
for side in base new; do
  spec=$BASE
  [ $side = new ] && spec=$NEW
  tree "$spec" "$WORK/$side" || { echo "ab: cannot get the $side tree ($spec)" >&2; exit 1; }
  echo "== building $side ($spec)"
  build "$WORK/$side" || { echo "ab: the $side tree does not build" >&2; exit 1; }
done

# ---- rows ---------------------------------------------------------------------
# Each row: NAME, BETTER (hi/lo), an AWK program printing one number, COMMAND (run from bin/)
rows=()
SEP=$'\x1f' # fields of a row (awk programs hold '|')
add() { rows+=("$1$SEP$2$SEP$3$SEP$4"); }
best='/^# best:/ { print $3 }'
has() { case " $ROWS " in *" $1 "*) return 0 ;; esac; return 1; }
if has net; then
  for n in 1 2 4 8 16; do
    add "raw TCP, $n conn (GB/s)" hi "$best" "./tpx-netbench --raw --size $SIZE --nsocks $n --iters 10 --quiet"
    add "transport, $n sock (GB/s)" hi "$best" "./tpx-netbench --size $SIZE --nsocks $n --iters 10 --no-verify --quiet"
  done
fi
if has perf; then
  add "engine $SIZE defaults (GB/s)" hi "$best" "./tpx-perf --loopback --size $SIZE --iters 10 --no-verify --quiet"
  add "engine $SIZE --channels 8 (GB/s)" hi "$best" "./tpx-perf --loopback --size $SIZE --iters 10 --no-verify --quiet --channels 8"
  add "engine $SIZE bidir (GB/s, both)" hi "$best" "./tpx-perf --loopback --size $SIZE --iters 10 --no-verify --quiet --direction bidir"
  add "engine 64K two-sided (GB/s)" hi "$best" "./tpx-perf --loopback --size 64K --iters 2000 --no-verify --quiet"
fi
rmarow='$1 == "read" || $1 == "write" { print $10 }' # "4 KiB" is two fields
if has rma; then
  for b in 4K 16K 128K 2M; do
    add "READ 1000 x $b host (GB/s)" hi "$rmarow" "./tpx-perf --op read --block $b --blocks 1000 --iters 20 --no-verify"
  done
fi
if has cuda && [ "$MEM" = cuda ]; then
  for s in 1M 256M; do
    it=$([ $s = 1M ] && echo 20000 || echo 50) # 21 GB, 13 GB: not a blink
    add "two-sided $s cuda (GB/s)" hi "$best" "./tpx-perf --loopback --mem cuda --gpu 0,0 --size $s --iters $it --no-verify --quiet"
    add "two-sided $s cuda, words (GB/s)" hi "$best" "TPX_SOCK_CUDA_WORD=1 ./tpx-perf --loopback --mem cuda --gpu 0,0 --size $s --iters $it --no-verify --quiet"
    add "two-sided $s host (GB/s)" hi "$best" "./tpx-perf --loopback --size $s --iters $it --no-verify --quiet"
  done
  for b in 4K 16K 128K 2M; do
    add "READ 1000 x $b cuda (GB/s)" hi "$rmarow" "timeout -k 5 120 ./tpx-perf --op read --mem cuda --gpu 0,0 --block $b --blocks 1000 --iters 20 --no-verify"
  done
fi
p50='$1 == "read" || $1 == "write" { print $8 }'
p99='$1 == "read" || $1 == "write" { print $9 }'
rawp50='$1 == "read" || $1 == "write" { print $12 }'
lat_rows() { # STAT (p50|p99) AWK ITERS: READ and WRITE latency rows (p50 adds 32 x 16K)
  for op in read write; do
    for b in 4K 64K 512K; do
      add "$op 1 x $b $1 (us)" lo "$2" "./tpx-perf --op $op --latency --blocks 1 --block $b --iters $3"
    done
    [ "$1" = p50 ] &&
      add "$op 32 x 16K p50 (us)" lo "$2" "./tpx-perf --op $op --latency --blocks 32 --block 16K --iters $3"
  done
}
if has lat; then
  lat_rows p50 "$p50" 1000
  for b in 4K 64K 512K; do
    add "raw TCP round trip $b p50 (us)" lo "$rawp50" "./tpx-perf --op read --latency --blocks 1 --block $b --iters 1000"
  done
fi
has p99 && lat_rows p99 "$p99" 2000
if has threads; then
  # a loopback pair moving data for a while: threads and fds of the process
  cnt='/^threads/ { print $2 }'
  # (tpx-perf --loopback may run each side in a process of its own: the largest counts)
  tcmd='./tpx-perf --loopback --size 1M --iters 100000 --no-verify --quiet --timeout 30 & p=$!; sleep 3; t=0; f=0; for q in $p $(pgrep -P $p); do a=$(ls /proc/$q/task | wc -l); b=$(ls /proc/$q/fd | wc -l); [ $a -gt $t ] && t=$a; [ $b -gt $f ] && f=$b; done; echo "threads $t fds $f"; pkill -P $p; kill $p; wait $p 2>/dev/null'
  add "threads per process, engine pair, defaults" lo "$cnt" "$tcmd"
  add "fds per process, engine pair, defaults" lo '/^threads/ { print $4 }' "$tcmd"
  add "threads per process, NSOCKS=8, 8 channels" lo "$cnt" "TPX_NSOCKS=8 ${tcmd/--quiet/--quiet --channels 8}"
fi

# ---- run, interleaved -------------------------------------------------------------
declare -A val
for r in $(seq 1 "$ROUNDS"); do
  for i in "${!rows[@]}"; do
    IFS=$SEP read -r name better prog cmd <<<"${rows[$i]}"
    for side in base new; do
      out=$(cd "$WORK/$side/build/release/bin" && bash -c "$cmd" 2>&1)
      echo "### round $r $side: $name: $cmd" >>"$LOG"
      echo "$out" >>"$LOG"
      v=$(echo "$out" | awk "$prog" | tail -1)
      [ -n "$v" ] || v=-
      old=${val[$i,$side]:-}
      if [ -z "$old" ] || [ "$old" = - ]; then
        val[$i,$side]=$v
      elif [ "$v" != - ]; then # keep the best
        val[$i,$side]=$(awk -v a="$old" -v b="$v" -v hi="$better" \
          'BEGIN { print (hi == "hi" ? (b > a ? b : a) : (b < a ? b : a)) }')
      fi
    done
  done
  echo "== round $r of $ROUNDS done" >&2
done

# ---- table ------------------------------------------------------------------------
{
  echo "# bench/ab.sh: $(uname -n), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%M:%SZ); best of $ROUNDS"
  echo "# base: $BASE   new: $NEW"
  printf '%-44s %12s %12s %9s\n' row base new new/base
  for i in "${!rows[@]}"; do
    IFS=$SEP read -r name better prog cmd <<<"${rows[$i]}"
    b=${val[$i,base]} n=${val[$i,new]}
    ratio=$(awk -v a="$b" -v b="$n" 'BEGIN { if (a + 0 > 0 && b != "-") printf "%.2f", b / a; else print "-" }')
    printf '%-44s %12s %12s %9s\n' "$name" "$b" "$n" "$ratio"
  done
} | tee "$WORK/table"
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$WORK/table" "$WORK/log" "$OUT/"; fi
