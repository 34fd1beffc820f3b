#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/tails.sh - where the slow iterations of one-sided latency runs
# lose their time: each row runs traced (TPX_TRACE_FILE) and
# bench/trace_outliers.py prints the iteration-time distribution and the
# slowest iterations step by step beside each step's median time.
#   env: ROWS="read:64K write:64K" ITERS=2000 SLOW=3 OUT=/tmp/tails
#        SET="VAR=VALUE,..." (settings for every row; default none)
. "$(dirname "$0")/perf_env.sh"
ROWS=${ROWS:-"read:64K write:64K"} ITERS=${ITERS:-2000} SLOW=${SLOW:-3} OUT=${OUT:-/tmp/tails} SET=${SET:-}
mkdir -p "$OUT"
env=(); [ -n "$SET" ] && IFS=, read -ra env <<< "$SET"
for row in $ROWS; do
  op=${row%%:*} b=${row#*:}
  echo "== $op 1 x $b ${SET:+($SET)}"
  env "${env[@]}" TPX_TRACE_FILE="$OUT/$op$b.txt" $P --loopback --op "$op" --latency --blocks 1 \
    --block "$b" --iters "$ITERS" 2>&1 | awk '$1 == "read" || $1 == "write" { print "p50", $8, "p99", $9, "raw p50", $12 }'
  python3 bench/trace_outliers.py "$OUT/$op$b.txt" "$SLOW"
done
