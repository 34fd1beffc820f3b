#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/sets.sh - engine settings side by side on one host (loopback):
# throughput at 256 MiB (GB/s, cpu s/GB), READ of 1000 x 4K (pipelined GB/s)
# and one-sided latency p50 (READ 1 x 4K / 64K / 512K, WRITE 1 x 4K / 512K, READ
# 32 x 16K), rounds interleaved, medians printed. MEM=cuda adds GPU memory (one
# GPU, through the transport's staging): two-sided 256 MiB and 1 MiB (GB/s, cpu
# s/GB) and READ 1 x 512K of GPU blocks (p50), with host 1 MiB beside them
# (the GPU / host ratio's other half) and GPU0 -> GPU1 1 MiB on a host with
# two GPUs.
#   env: ROUNDS=3 SETS="default TPX_CHANNELS=4,TPX_CHANNEL_SOCKS=0" (comma lists)
#        MEM=host|cuda
#   e.g. SETS="TPX_SOCK_POLL_US=0 default" (worker polling off / on)
#        MEM=cuda SETS="default TPX_SOCK_CUDA_BLOCK=512K" (staging block size)
. "$(dirname "$0")/perf_env.sh"
ROUNDS=${ROUNDS:-3} SETS=${SETS:-"default TPX_CHANNELS=4,TPX_CHANNEL_SOCKS=0"} MEM=${MEM:-host}
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for r in $(seq "$ROUNDS"); do
  for e in $SETS; do
    env=(); [ "$e" = default ] || IFS=, read -ra env <<< "$e"
    env "${env[@]}" $P --loopback --size 256M --iters 10 --no-verify 2>&1 |
      awk -v e="$e" '!/^#/ && NF > 6 { print e, "256M_GB/s", $5; print e, "256M_cpu", $(NF - 1) }' >> "$rows"
    env "${env[@]}" $P --op read --block 4K --blocks 1000 --iters 200 --no-verify 2>&1 |
      awk -v e="$e" '$1 == "read" { print e, "READ1000x4K_GB/s", $10 }' >> "$rows"
    for x in "read 1 4K" "read 1 64K" "read 1 512K" "write 1 4K" "write 1 512K" "read 32 16K"; do
      set -- $x
      env "${env[@]}" $P --op "$1" --latency --blocks "$2" --block "$3" --iters 500 2>&1 |
        awk -v e="$e" -v k="$1_$2x$3_p50" '$1 == "read" || $1 == "write" { print e, k, $8 }' >> "$rows"
    done
    if [ "$MEM" = cuda ]; then
      env "${env[@]}" timeout -k 5 120 $P --loopback --size 1M --iters 10000 --no-verify 2>&1 |
        awk -v e="$e" '!/^#/ && NF > 6 { print e, "host1M_GB/s", $5; print e, "host1M_cpu", $(NF - 1) }' >> "$rows"
      pairs="0,0"
      [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ] && pairs="0,0 0,1"
      for sz in 256M 1M; do
        for g in $pairs; do
          it=10 k=cuda; [ $sz = 1M ] && it=10000; [ $g = 0,0 ] || k="cuda[$g]"
          [ $sz = 256M ] && [ $g != 0,0 ] && continue
          env "${env[@]}" timeout -k 5 120 $P --loopback --mem cuda --gpu $g --size $sz --iters $it \
            --no-verify 2>&1 |
            awk -v e="$e" -v s=$sz -v k=$k '!/^#/ && NF > 6 { print e, k s "_GB/s", $5; print e, k s "_cpu", $(NF - 1) }' >> "$rows"
        done
      done
      env "${env[@]}" timeout -k 5 120 $P --op read --mem cuda --gpu 0,0 --latency --blocks 1 --block 512K \
        --iters 300 2>&1 | awk -v e="$e" '$1 == "read" { print e, "cuda_read_1x512K_p50", $8 }' >> "$rows"
    fi
  done
done
echo "# sets.sh: $(nproc) CPUs, $ROUNDS rounds, medians, memory $MEM"
python3 - "$rows" $SETS <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 3]
sets = sys.argv[2:]
keys = []
for r in rows:
    if r[1] not in keys:
        keys.append(r[1])
w = max(len(s) for s in sets)
print(f"{'':22}" + "".join(f"{s:>{w + 2}}" for s in sets))
for k in keys:
    vals = []
    for s in sets:
        v = [float(r[2]) for r in rows if r[0] == s and r[1] == k]
        vals.append(f"{st.median(v):>{w + 2}.3g}" if v else f"{'-':>{w + 2}}")
    print(f"{k:22}" + "".join(vals))
PY
