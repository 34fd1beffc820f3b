#!/usr/bin/env bash
# netns.unequal: B -> A over 3 links shaped to 2 Gbit/s and one to 500 Mbit/s
# (tbf on B's egress); the throughput must reach 0.8 x the sum of the link
# rates (6.5 Gbit/s = 0.8125 GB/s), i.e. the slow link must not pace the others.
. "$(dirname "$0")/lib.sh"

for k in 1 2 3; do "$TESTBED" shape B "eth$k" 2gbit || fail "shape"; done
"$TESTBED" shape B eth4 500mbit || fail "shape"
start_server --size 256M --iters 6 --warmup 1 --no-verify --timeout 60
start_client
wait_pid "$CLIENT" 200 || { show_logs; fail "client did not finish in 200 s"; }
crc=$WAIT_RC
wait_pid "$SERVER" 20 || { show_logs; fail "server did not finish"; }
src=$WAIT_RC
show_logs
[ "$crc" = 0 ] && [ "$src" = 0 ] || fail "tpx-perf failed (client rc $crc, server rc $src)"
gbs=$(awk '/^ *[0-9]+ +[0-9]+ +[0-9]+ /{print $5}' "$WORK/server.log" | head -1)
[ -n "$gbs" ] || fail "no result row"
for k in 1 2 3 4; do echo "eth$k tx_bytes $(tx_bytes B "eth$k")"; done
echo "throughput $gbs GB/s; sum of link rates 0.8125 GB/s; need >= 0.65 GB/s"
awk -v g="$gbs" 'BEGIN { exit !(g >= 0.65) }' || fail "$gbs GB/s < 0.8 x the sum of link rates"
echo PASS
