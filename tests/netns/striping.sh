#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.striping: host B sends to host A over 4 equal veth links (eth1..eth4),
# 4 channels, host memory; every data NIC must carry 15..35% of the bytes
# (an even share is 25%) and the control NIC eth0 under 1%.
. "$(dirname "$0")/lib.sh"

NICS="eth0 eth1 eth2 eth3 eth4"
declare -A before after
for n in $NICS; do before[$n]=$(tx_bytes B "$n"); done

start_server --size 256M --iters 8 --warmup 1 --channels 4 --verify --timeout 60
start_client
wait_pid "$CLIENT" 200 || { show_logs; fail "client did not finish in 200 s"; }
crc=$WAIT_RC
wait_pid "$SERVER" 20 || { show_logs; fail "server did not finish"; }
src=$WAIT_RC
show_logs
[ "$crc" = 0 ] && [ "$src" = 0 ] || fail "tpx-perf failed (client rc $crc, server rc $src)"

for n in $NICS; do after[$n]=$(tx_bytes B "$n"); done
total=0
for n in $NICS; do total=$((total + after[$n] - before[$n])); done
[ "$total" -gt $((9 * 256 * 1024 * 1024)) ] || fail "only $total bytes sent in all"
echo "striping table (host B tx_bytes, 256 MiB x 9 incl. warmup):"
printf '  %-5s %14s %7s\n' nic bytes share
bad=0
for n in $NICS; do
    d=$((after[$n] - before[$n]))
    pm=$((d * 1000 / total)) # per mille
    printf '  %-5s %14d %5d.%d%%\n' "$n" "$d" $((pm / 10)) $((pm % 10))
    if [ "$n" = eth0 ]; then
        [ "$pm" -lt 10 ] || { echo "eth0 carries ${pm}/1000 of the bytes" >&2; bad=1; }
    else
        [ "$pm" -ge 150 ] && [ "$pm" -le 350 ] || { echo "$n carries ${pm}/1000, not 150..350" >&2; bad=1; }
    fi
done
[ "$bad" = 0 ] || fail "uneven striping"
echo PASS
