#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/lat.sh - one-sided latency on one host (loopback), under a few
# settings in the same run, rounds interleaved; then one traced READ 4K
# iteration (TPX_TRACE_FILE) with the time of each step. Prints a table
# last: p50 us per row (median over the rounds), raw TCP round trip of the
# same size, and the ratio.
#   env: ROUNDS=3 ITERS=1000 OUT=/tmp/lat
#        SETS="default TPX_RMA_INLINE_BYTES=0 TPX_RMA_INLINE_BYTES=0,TPX_SOCK_EAGER_BYTES=0"
#        (each a comma list of VAR=VALUE, or "default")
. "$(dirname "$0")/perf_env.sh"
ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-1000} OUT=${OUT:-/tmp/lat}
SETS=${SETS:-"default TPX_RMA_INLINE_BYTES=0 TPX_RMA_INLINE_BYTES=0,TPX_SOCK_EAGER_BYTES=0"}
mkdir -p "$OUT"; : > "$OUT/rows"
row() { # SET OP BLOCKS BLOCK
  local env=(); [ "$1" = default ] || IFS=, read -ra env <<< "$1"
  env "${env[@]}" $P --loopback --op "$2" --latency --blocks "$3" --block "$4" --iters "$ITERS" 2>&1 |
    awk -v e="$1" -v op="$2" -v n="$3" -v b="$4" '$1 == op && $4 == n { print op, n "x" b, e, $8, $9, $11, $12, $16, $13 }' >> "$OUT/rows"
}
for r in $(seq "$ROUNDS"); do
  for e in $SETS; do
    for op in read write; do
      for b in 4K 64K 512K; do row "$e" $op 1 $b; done
      row "$e" $op 32 16K
    done
  done
done
steps() { # TRACE: median time of each step from the post, over the iterations
  python3 - "$1" <<'PY'
import collections, statistics as st, sys
its, cur = [], None
for l in open(sys.argv[1]):
    if l.startswith('#'):
        continue
    f = l.split()
    if f[3] == 'post':
        if cur:
            its.append(cur)
        cur = [(float(f[0]), f[3], f[1])]
    elif cur is not None:
        cur.append((float(f[0]), f[3], f[1]))
steps = collections.defaultdict(list)
for it in its[len(its) // 4:]:
    seen = collections.Counter()
    for t, ev, th in it[1:]:
        seen[ev] += 1
        steps[(ev, seen[ev], th)].append(t - it[0][0])
n = len(its) - len(its) // 4
for (ev, k, th), v in sorted(steps.items(), key=lambda kv: st.median(kv[1])):
    if len(v) >= n * 0.9:
        print(f"  {st.median(v):8.1f} us  {ev}#{k} ({th})")
PY
}
TPX_TRACE_FILE=$OUT/trace.txt $P --loopback --op read --latency --blocks 1 --block 4K --iters 300 >/dev/null 2>&1
echo "== READ 1 x 4K, traced: median us from the post to each step"
steps "$OUT/trace.txt"
TPX_TRACE_FILE=$OUT/trace32.txt $P --loopback --op read --latency --blocks 32 --block 16K --iters 300 >/dev/null 2>&1
echo "== READ 32 x 16K, traced: median us from the post to each step"
steps "$OUT/trace32.txt"
echo "== p50 / p99 us, median of $ROUNDS rounds (cpu: us of CPU per transfer, raw/raw_p99: raw TCP round trip of the size, same run, ntf: WRITE data -> notification p50)"
python3 - "$OUT/rows" <<'PY'
import sys, statistics as st
rows = {}
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) < 8: continue
    rows.setdefault((f[0], f[1], f[2]), []).append(f[3:])
def med(v):
    v = [float(x) for x in v if x not in ('-', '')]
    return st.median(v) if v else float('nan')
w = max([len(k[2]) for k in rows] + [3])
print(f"{'op':6} {'size':9} {'set':{w}} {'p50':>7} {'p99':>7} {'p99/p50':>7} {'cpu':>7} {'raw':>6} {'raw_p99':>7} {'x_raw':>6} {'ntf':>6}")
for (op, sz, e), v in rows.items():
    p50, p99, cpu, raw, ntf, rawp99 = (med([x[i] for x in v if len(x) > i]) for i in range(6))
    print(f"{op:6} {sz:9} {e:{w}} {p50:7.1f} {p99:7.1f} {p99/p50:7.2f} {cpu:7.1f} {raw:6.1f} {rawp99:7.1f} {p50/raw:6.2f} {ntf:6.1f}")
PY
