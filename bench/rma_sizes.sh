#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/rma_sizes.sh - one-sided READ and WRITE of 1000 blocks of each size
# beside two-sided 256 MiB, on one or more builds, in one run: rounds
# interleaved (every build's rows, then the next round), medians, each
# one-sided row as a fraction of the same build's two-sided rate; with two
# builds also new/base; then the same for the best round of each row (on a
# host shared with other work, the round least disturbed). Host memory,
# loopback, no verification (pure rates).
#
# Usage: bench/rma_sizes.sh [[VAR=VAL,...:]BIN_DIR ...]   (default: build/release/bin)
#   each BIN_DIR holds a tpx-perf, run with the TPX_* settings before its ':'
#   (e.g. TPX_RMA_PACK_BYTES=64K:build/release/bin); the first is the base
#   of the new/base column
# Environment: ROUNDS=5  BLOCKS="4K 16K 64K 128K 256K 2M"  OPS="read write"
#   OUT=FILE (also keep the raw rows there)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || set -- "$here/build/release/bin"
ROUNDS=${ROUNDS:-5}
BLOCKS=${BLOCKS:-"4K 16K 64K 128K 256K 2M"}
OPS=${OPS:-"read write"}
export TPX_SOCKET_IFNAME=lo
raw=$(mktemp /tmp/tpx-rma-sizes.XXXXXX)
trap 'rm -f "$raw"' EXIT

iters() { # about 0.5-1 GB a row, at least 3 transfers
  case $1 in 4K) echo 100 ;; 16K) echo 40 ;; 64K) echo 12 ;; 128K) echo 6 ;; 256K) echo 4 ;;
    *) echo 3 ;; esac
}
for r in $(seq 1 "$ROUNDS"); do
  for d in "$@"; do
    bin=${d##*:} envs=
    [ "$bin" != "$d" ] && envs=${d%:*}
    perf() { env ${envs//,/ } "$bin/tpx-perf" "$@"; }
    v=$(perf --loopback --size 256M --iters 8 --no-verify --quiet 2>&1 |
      awk '/^# best:/ { print $3 }')
    echo "$d|two-sided|256M|${v:--}|-" >>"$raw"
    for op in $OPS; do
      for b in $BLOCKS; do
        v=$(perf --op "$op" --block "$b" --blocks 1000 --iters "$(iters "$b")" \
          --warmup 1 --no-verify --no-raw 2>&1 |
          awk '$1 == "read" || $1 == "write" { print $10 "|" $11 }')
        echo "$d|$op|$b|${v:--|-}" >>"$raw"
      done
    done
  done
  echo "== round $r of $ROUNDS done" >&2
done
[ -n "${OUT:-}" ] && cp "$raw" "$OUT"

python3 - "$raw" "$ROUNDS" "$@" <<'EOF'
import statistics, sys, os, collections
raw, rounds, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
v = collections.defaultdict(list)
cpu = collections.defaultdict(list)
for line in open(raw):
    d, op, b, g, c = line.strip().split('|')
    if g != '-':
        v[d, op, b].append(float(g))
    if c != '-':
        cpu[d, op, b].append(float(c))
med = lambda l: statistics.median(l) if l else float('nan')
best = lambda l: max(l) if l else float('nan')
low = lambda l: min(l) if l else float('nan')
print(f"# bench/rma_sizes.sh: {os.uname().nodename}, {os.cpu_count()} CPUs, {rounds} interleaved "
      "rounds, GB/s = 1e9 B/s; x2s = one-sided / two-sided 256 MiB of the same build; "
      "cpu_us: CPU of the process per transfer")
for i, d in enumerate(dirs):
    print(f"# build {i}: {d}")
rows = [('two-sided', '256M')] + [(op, b) for op in ('read', 'write') for b in
                                  ('4K', '16K', '64K', '128K', '256K', '2M')
                                  if any(k[1] == op and k[2] == b for k in v)]
for what, f, fc in (('median', med, med), ('best round (cpu_us: least)', best, low)):
    print(f"## {what}")
    head = f"{'row':<22}" + ''.join(f"{'b' + str(i) + ' GB/s':>10}{'x2s':>6}{'cpu_us':>10}"
                                    for i in range(len(dirs)))
    if len(dirs) > 1:
        head += f"{'b1/b0':>7}"
    print(head)
    for op, b in rows:
        line = f"{op + ' ' + ('1000 x ' + b if op != 'two-sided' else b):<22}"
        for d in dirs:
            g, ts = f(v[d, op, b]), f(v[d, 'two-sided', '256M'])
            line += f"{g:>10.2f}" + (f"{g / ts:>6.2f}" if op != 'two-sided' else f"{'':>6}")
            line += f"{fc(cpu[d, op, b]):>10.0f}" if cpu[d, op, b] else f"{'-':>10}"
        if len(dirs) > 1:
            a, n = f(v[dirs[0], op, b]), f(v[dirs[1], op, b])
            line += f"{n / a:>7.2f}"
        print(line)
EOF
