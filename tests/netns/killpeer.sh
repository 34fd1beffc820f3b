#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.killpeer: host B's client is killed with SIGKILL in the middle of a long
# transfer to host A; A's tpx-perf must exit non-zero with an error within 10 s
# (its transfer deadline is 60 s: the error has to come from the peer's death).
. "$(dirname "$0")/lib.sh"

start_server --size 64M --iters 100000 --warmup 1 --no-verify --timeout 60
start_client
wait_tx B eth1 100000000 60 || { show_logs; fail "transfer did not start"; }
kill -0 "$CLIENT" 2>/dev/null || { show_logs; fail "client ended before the kill"; }
kill -9 "$CLIENT"
t0=$(now_ms)
if ! wait_pid "$SERVER" 10; then
    show_logs
    fail "server still running 10 s after its peer was killed (hang)"
fi
dt=$(($(now_ms) - t0))
show_logs
echo "server exited with status $WAIT_RC ${dt} ms after the peer's SIGKILL"
[ "$WAIT_RC" != 0 ] || fail "server exited 0 after its peer was killed"
grep -qi 'error\|fail\|peer\|closed' "$WORK/server.log" || fail "server printed no error"
echo PASS
