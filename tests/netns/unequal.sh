#!/usr/bin/env bash
# netns.unequal: B -> A over 3 links shaped to 2 Gbit/s and one to 500 Mbit/s
# (tbf on B's egress); the throughput must reach 0.8 x the sum of the link
# rates (6.5 Gbit/s = 0.8125 GB/s), i.e. the slow link must not pace the others.
# The engine fuses the four NICs into one virtual device (TPX_NIC_FUSE=auto:
# the built-in transport has makeVDevice), so each channel's comm spreads its
# data connections over all four links and the transport's piece scheduling
# gives the slow link fewer pieces. Shares per link are printed.
. "$(dirname "$0")/lib.sh"

for k in 1 2 3; do "$TESTBED" shape B "eth$k" 2gbit || fail "shape"; done
"$TESTBED" shape B eth4 500mbit || fail "shape"
declare -A before
for k in 1 2 3 4; do before[$k]=$(tx_bytes B "eth$k"); done
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
total=0
declare -A sent
for k in 1 2 3 4; do sent[$k]=$(($(tx_bytes B "eth$k") - before[$k])); total=$((total + sent[$k])); done
echo "per link (host B tx_bytes, 256 MiB x 7 incl. warmup; fair shares 30.8/30.8/30.8/7.7%):"
for k in 1 2 3 4; do
    pm=$((sent[$k] * 1000 / (total > 0 ? total : 1)))
    printf '  eth%d %14d %5d.%d%%\n' "$k" "${sent[$k]}" $((pm / 10)) $((pm % 10))
done
echo "throughput $gbs GB/s; sum of link rates 0.8125 GB/s; need >= 0.65 GB/s"
awk -v g="$gbs" 'BEGIN { exit !(g >= 0.65) }' || fail "$gbs GB/s < 0.8 x the sum of link rates"
echo PASS
