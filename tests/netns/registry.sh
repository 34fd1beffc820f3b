#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.registry: two hosts find each other through etcd. etcd runs in host A
# (on its control address, data in this test's own directory); a tpx-perf
# server publishes itself by name in each host; a client in each host reads
# from every server by name (one pair crosses the data NICs, every byte
# checked). Then B's server is SIGKILLed: its name leaves the registry within
# TTL + 2 s, and a client asking for it is told so.
. "$(dirname "$0")/lib.sh"

ETCD=${TPX_ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
[ -x "$ETCD" ] || { echo "SKIP: no etcd (Debian: etcd-server)" >&2; exit 77; }
EP="http://$TPXTB_A_ETH0:2379"
"$TESTBED" exec A "$ETCD" --name a --data-dir "$WORK/etcd" --listen-client-urls "$EP" \
    --advertise-client-urls "$EP" --listen-peer-urls "http://$TPXTB_A_ETH0:2380" \
    --initial-advertise-peer-urls "http://$TPXTB_A_ETH0:2380" \
    --initial-cluster "a=http://$TPXTB_A_ETH0:2380" >"$WORK/etcd.log" 2>&1 &
PIDS="$PIDS $!"
export TPX_METADATA="etcd://$TPXTB_A_ETH0:2379" TPX_METADATA_PREFIX="/netns-$$"
up=0
for _ in $(seq 100); do
    if "$TESTBED" exec B "$PERF" --metadata "$TPX_METADATA" list >/dev/null 2>&1; then
        up=1
        break
    fi
    sleep 0.2
done
[ $up = 1 ] || { tail -20 "$WORK/etcd.log"; fail "etcd did not answer in host A"; }

TTL=3
"$TESTBED" exec A "$PERF" --metadata "$TPX_METADATA" server --name srvA --size 32M --ttl $TTL \
    >"$WORK/srvA.log" 2>&1 &
SA=$!; PIDS="$PIDS $SA"
"$TESTBED" exec B "$PERF" --metadata "$TPX_METADATA" server --name srvB --size 32M --ttl $TTL \
    >"$WORK/srvB.log" 2>&1 &
SB=$!; PIDS="$PIDS $SB"
for h in A B; do
    "$TESTBED" exec $h "$PERF" --metadata "$TPX_METADATA" client --name "cli$h" \
        --peer srvA,srvB --iters 3 --timeout 30 >"$WORK/cli$h.log" 2>&1 ||
        { cat "$WORK"/*.log; fail "client in $h failed"; }
    cat "$WORK/cli$h.log"
    grep -q "all data verified" "$WORK/cli$h.log" || fail "client in $h did not verify"
done
before=$(tx_bytes A eth1)
[ "$before" -gt 0 ] || fail "no bytes on A's data NIC"

kill -9 "$SB"
t0=$(now_ms)
gone=0
while [ $(($(now_ms) - t0)) -lt $(((TTL + 5) * 1000)) ]; do
    "$TESTBED" exec A "$PERF" --metadata "$TPX_METADATA" list >"$WORK/list.log" 2>&1 || true
    grep -qx srvA "$WORK/list.log" || { cat "$WORK/list.log"; fail "srvA missing from the list"; }
    if ! grep -qx srvB "$WORK/list.log"; then gone=1; break; fi
    sleep 0.1
done
dt=$(($(now_ms) - t0))
[ $gone = 1 ] || fail "srvB still in the registry $dt ms after SIGKILL"
result "SIGKILLed server left the registry after $(secs $dt) s (TTL $TTL s)"
[ $dt -le $(((TTL + 2) * 1000)) ] || fail "took longer than TTL + 2 s"
# a client asking for it by name is told it is gone
if "$TESTBED" exec A "$PERF" --metadata "$TPX_METADATA" client --peer srvB --timeout 1 \
    >"$WORK/gone.log" 2>&1; then fail "a client read from srvB after it was gone"; fi
grep -q "no engine named 'srvB'" "$WORK/gone.log" || { cat "$WORK/gone.log"; fail "unclear error"; }
kill -TERM "$SA"
wait_pid "$SA" 10 || fail "srvA did not stop on SIGTERM"
echo PASS
