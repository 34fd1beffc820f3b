#!/usr/bin/env bash
# bench/gpu/rma_tput.sh - one-sided READ throughput of 1000 host blocks of
# 4K / 16K / 128K / 2M on one host (loopback) under a few settings in the
# same run, rounds interleaved; prints the median GB/s per row and the
# 4K / 2M ratio of each setting (issue 14: >= 0.5).
#   env: ROUNDS=3 SETS="default TPX_RMA_IOV=0" (each a comma list of VAR=VALUE)
#        BLOCKS="4K 16K 128K 2M" VERIFY=--verify (or --no-verify)
. "$(dirname "$0")/perf_env.sh"
ROUNDS=${ROUNDS:-3} SETS=${SETS:-"default TPX_RMA_IOV=0"} BLOCKS=${BLOCKS:-"4K 16K 128K 2M"}
VERIFY=${VERIFY:---verify}
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for r in $(seq "$ROUNDS"); do
  for e in $SETS; do
    env=(); [ "$e" = default ] || IFS=, read -ra env <<< "$e"
    for b in $BLOCKS; do
      it=200; case $b in 128K) it=50 ;; 2M) it=5 ;; esac
      env "${env[@]}" $P --op read --block "$b" --blocks 1000 --iters $it "$VERIFY" 2>&1 |
        awk -v e="$e" -v b="$b" '$1 == "read" { print e, b, $10, $NF }' >> "$rows"
    done
  done
done
echo "# rma_tput: $(nproc) CPUs, READ of 1000 host blocks, $ROUNDS rounds (median GB/s), verified: $VERIFY"
python3 - "$rows" "$SETS" "$BLOCKS" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
sets, blocks = sys.argv[2].split(), sys.argv[3].split()
print("%-28s" % "setting" + "".join("%9s" % b for b in blocks) + "   4K/2M  verified")
for s in sets:
    med = {}
    for b in blocks:
        v = [float(r[2]) for r in rows if r[0] == s and r[1] == b]
        med[b] = st.median(v) if v else float('nan')
    ratio = med.get("4K", float('nan')) / med.get("2M", float('nan')) if "4K" in med and "2M" in med else float('nan')
    print("%-28s" % s + "".join("%9.2f" % med[b] for b in blocks) + "   %5.2f  %s" % (ratio, ",".join(sorted(set(r[3] for r in rows if r[0] == s)))))
PY
