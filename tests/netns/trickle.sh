#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.trickle: host B's data link eth2 is shaped to a trickle (tc tbf
# 1mbit on B's egress: the direction of the data) before B sends 64 MiB x 2
# (plus one warm-up transfer) to A, verified, with a transfer deadline of
# tpx-perf --timeout 8. A chunk (512 KiB) that rides that link takes ~4 s, so
# whether a transfer beats its deadline depends on how many chunks the engine
# gives the slow link. Every transfer either completes or fails by its
# deadline, so the run must end within 3 x 8 s plus 15 s of slack, in
# byte-verified success or with a clear error on both sides: never a hang.
# Prints
#   RESULT trickle: <outcome> after S s (...)
. "$(dirname "$0")/lib.sh"

TMO=8
ITERS=2
LIMIT=$(((ITERS + 1) * TMO + 15))
RATE=1mbit
"$TESTBED" shape B eth2 $RATE || fail "testbed shape failed"
tx0=$(tx_bytes B eth2)
t0=$(now_ms)
start_server --size 64M --iters $ITERS --warmup 1 --verify --timeout $TMO
start_client
hung=0
wait_pair $LIMIT "$t0" || hung=1
tx=$(($(tx_bytes B eth2) - tx0))
show_logs
if [ "$hung" = 1 ]; then
    result "trickle: HANG (server rc $SERVER_RC, client rc $CLIENT_RC, $LIMIT s after the start)"
    fail "hang with a trickle link"
fi
srv=$(perf_outcome "$WORK/server.log" "$SERVER_RC")
cli=$(perf_outcome "$WORK/client.log" "$CLIENT_RC")
end_ms=$((SERVER_MS > CLIENT_MS ? SERVER_MS : CLIENT_MS))
if [ "$srv" = verified ] && [ "$cli" = verified ]; then
    outcome=verified
elif [ "$cli" != verified ] && { [ "$srv" = verified ] || [ "$CLIENT_MS" -le "$SERVER_MS" ]; }; then
    outcome=$cli
else
    outcome=$srv
fi
# which transfer failed, as tpx-perf numbers them: "(iteration N, transfer M)"
where=$(grep -h -m1 -o 'iteration [0-9]*' "$WORK/server.log" "$WORK/client.log" | head -1)
result "trickle: $outcome after $(secs $end_ms) s${where:+ (tpx-perf: $where)} (B/eth2 at $RATE carried $tx bytes;" \
    "server: $srv after $(secs "$SERVER_MS") s, client: $cli after $(secs "$CLIENT_MS") s;" \
    "64 MiB x $ITERS + 1 warm-up, deadline ${TMO} s per transfer)"
case "$srv $cli" in
    *UNCLEAR*) fail "a side failed without a clear error" ;;
esac
echo PASS
