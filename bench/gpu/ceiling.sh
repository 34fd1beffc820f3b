#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/ceiling.sh - GPU memory against host memory at 1 MiB, for tpx and
# for the simplest staged pipeline over raw TCP (bench/gpu/raw_staged.cu), in
# one run, rounds interleaved: how much of tpx's GPU/host ratio is the
# staging itself on this host (its copies' DMA, the driver calls) and how
# much is tpx. Steps on CPUs 0-15 (CPUS=...).
# Usage: bench/gpu/ceiling.sh   (build/release must exist)
# Environment: ROUNDS=3 SIZE=1M GB=21 (per row) CONNS=16 CPUS=0-15
#              GPUS="0,0" ("0,0 0,1" by default with two GPUs; A,B: data moves
#              GPU A -> GPU B, as tpx-perf --gpu A,B and raw_staged --gpus A,B)
#              RAW_BLOCKS="512K" (the staged pipeline's copy size, tpx's default
#              first; more sizes add rows "GPUS@SIZE", their ring 4 blocks, at
#              least 4 MiB: is the ceiling a matter of copy size?)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/cuda/bin TPX_SOCKET_IFNAME=lo
ROUNDS=${ROUNDS:-3} SIZE=${SIZE:-1M} GB=${GB:-21} CONNS=${CONNS:-16} CPUS=${CPUS:-0-15}
RAW_BLOCKS=${RAW_BLOCKS:-512K}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
GPUS=${GPUS:-$([ "${ngpu:-0}" -ge 2 ] && echo "0,0 0,1" || echo "0,0")}
nvcc -O2 -arch=sm_90 -o /tmp/raw_staged bench/gpu/raw_staged.cu -lpthread || exit 1
bytes=$(numfmt --from=iec "$SIZE")
iters=$((GB * 1000000000 / bytes)) per=$((GB * 1000000000 / bytes / CONNS))
rows=$(mktemp); trap 'rm -f $rows' EXIT
P=build/release/bin/tpx-perf
echo "== ceiling.sh: $(uname -n), $(nproc --all) CPUs (on $CPUS), ${ngpu:-0} GPU(s), $(date -u +%FT%TZ), $(git log -1 --format=%h), $SIZE x $iters per row"
for r in $(seq "$ROUNDS"); do
  taskset -c "$CPUS" /tmp/raw_staged --mem host --conns "$CONNS" --size "$bytes" --iters "$per" --verify |
    awk '$7 == "yes" { print "raw host", $5, $6 }' >>"$rows"
  taskset -c "$CPUS" $P --loopback --size "$SIZE" --iters "$iters" --no-verify |
    awk '$1 ~ /^[0-9]+$/ && NF >= 10 { print "tpx host", $5, $9; exit }' >>"$rows"
  for g in $GPUS; do
    for b in $RAW_BLOCKS; do
      bb=$(numfmt --from=iec "$b") key=$g
      [ "$b" = "${RAW_BLOCKS%% *}" ] || key="$g@$b"
      taskset -c "$CPUS" /tmp/raw_staged --mem cuda --gpus "$g" --conns "$CONNS" --size "$bytes" --iters "$per" \
        --block "$bb" --ring $((bb * 4 > 4194304 ? bb * 4 : bb * 64 < 4194304 ? bb * 64 : 4194304)) --verify |
        awk -v k="$key" '$7 == "yes" { print "raw " k, $5, $6 }' >>"$rows"
    done
    taskset -c "$CPUS" $P --loopback --size "$SIZE" --iters "$iters" --no-verify --mem cuda --gpu "$g" |
      awk -v g="$g" '$1 ~ /^[0-9]+$/ && NF >= 10 { print "tpx " g, $5, $9; exit }' >>"$rows"
  done
  echo "round $r of $ROUNDS done"
done
python3 - "$rows" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 4]
gbs, cpu = {}, {}
for who, mem, g, c in rows:
    gbs.setdefault((who, mem), []).append(float(g)); cpu.setdefault((who, mem), []).append(float(c))
best = {k: max(v) for k, v in gbs.items()}
med = {k: st.median(v) for k, v in gbs.items()}
mems = [m for w, m in gbs if w == 'raw']
print("\nGB/s best (median) of the rounds; cpu: median s/GB; ratios of the bests")
print(f"{'mem':9} {'raw GB/s':>15} {'tpx GB/s':>15} {'raw cpu':>8} {'tpx cpu':>8} {'raw/host':>9} {'tpx/host':>9} {'tpx/raw':>8}")
for m in mems:
    tm = m.split('@')[0]  # a raw row of another copy size: beside tpx's row of its GPUs
    r, t = best.get(('raw', m), 0), best.get(('tpx', tm), 0)
    rh, th = best.get(('raw', 'host'), 1), best.get(('tpx', 'host'), 1)
    print(f"{m:9} {r:7.2f} ({med[('raw', m)]:5.2f}) {t:7.2f} ({med.get(('tpx', tm), 0):5.2f})"
          f" {st.median(cpu[('raw', m)]):8.3f} {st.median(cpu.get(('tpx', tm), [0])):8.3f}"
          f" {r / rh:9.2f} {t / th:9.2f} {t / r if r else 0:8.2f}")
PY
