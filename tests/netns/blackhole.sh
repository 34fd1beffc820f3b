#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.blackhole: one data link (eth2) silently drops every packet in the
# middle of a long transfer B -> A. With a transfer deadline of 10 s
# (tpx-perf --timeout 10 = TPX_TIMEOUT_MS 10000) both sides must exit non-zero
# with an error within 10 s + 10 s of slack: no hang. The built-in
# transport's failover is off here (TPX_SOCK_FAILOVER=0): with it, the fused
# channels' comms go on over the other NICs (netns.nicfail).
. "$(dirname "$0")/lib.sh"
export TPX_SOCK_FAILOVER=0

start_server --size 64M --iters 100000 --warmup 1 --no-verify --timeout 10
start_client
wait_tx B eth2 100000000 60 || { show_logs; fail "transfer did not start"; }
"$TESTBED" blackhole B eth2 || fail "testbed blackhole failed"
t0=$(now_ms)
ok=1
for who in SERVER CLIENT; do
    pid=${!who}
    if wait_pid "$pid" $((20 - ($(now_ms) - t0) / 1000)); then
        eval "${who}_RC=$WAIT_RC ${who}_MS=$(($(now_ms) - t0))"
    else
        ok=0; echo "$who still running 20 s after the black hole" >&2
    fi
done
show_logs
[ "$ok" = 1 ] || fail "hang after a black-holed link"
echo "black hole on B/eth2: server exited $SERVER_RC after ${SERVER_MS} ms, client exited $CLIENT_RC after ${CLIENT_MS} ms"
[ "$SERVER_RC" != 0 ] && [ "$CLIENT_RC" != 0 ] || fail "a side exited 0 although a link was black-holed"
echo PASS
