#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.linkdown: host B's data link eth2 is set down (`testbed link B eth2
# down`: `ip link set eth2 down` inside B) in the middle of a verified
# transfer B -> A (64 MiB transfers, tpx-perf --verify, transfer deadline
# --timeout 10 s). Two cases:
#   flap  eth2 down for 2 s, then up again: TCP retransmits and the run must
#         end in byte-verified success (exit 0 with --verify on both sides);
#   down  eth2 stays down: the run must end within the deadline plus 15 s of
#         slack, in byte-verified success or with a clear error on both sides
#         (a tpx_status_string() text in tpx-perf's FAILED line): never a hang.
# Prints, the times counted from `ip link set eth2 down`:
#   RESULT linkflap: <outcome> after S s (...)
#   RESULT linkdown: <outcome> after S s (server: <outcome> after S s, client: ...)
. "$(dirname "$0")/lib.sh"

TMO=10
FLAP_S=2

# run_case NAME ITERS FLAP_SECONDS(0: stays down): sets OUTCOME, END_MS, DETAIL
run_case() {
    local name=$1 iters=$2 flap=$3 t0 hung=0 srv cli
    start_server --size 64M --iters "$iters" --warmup 1 --verify --timeout $TMO
    start_client
    wait_tx B eth2 200000000 60 || { show_logs; fail "$name: transfer did not start"; }
    kill -0 "$CLIENT" 2>/dev/null || { show_logs; fail "$name: client ended before the link went down"; }
    "$TESTBED" link B eth2 down || fail "testbed link B eth2 down failed"
    t0=$(now_ms)
    if [ "$flap" != 0 ]; then
        sleep "$flap"
        "$TESTBED" link B eth2 up || fail "testbed link B eth2 up failed"
        echo "$name: eth2 was down for $(secs $(($(now_ms) - t0))) s"
    fi
    wait_pair $((TMO + 15)) "$t0" || hung=1
    show_logs
    if [ "$hung" = 1 ]; then
        result "$name: HANG (server rc $SERVER_RC, client rc $CLIENT_RC, $((TMO + 15)) s after eth2 went down)"
        fail "$name: hang after a data link went down"
    fi
    srv=$(perf_outcome "$WORK/server.log" "$SERVER_RC")
    cli=$(perf_outcome "$WORK/client.log" "$CLIENT_RC")
    # The run ended when its last side did; name the first error that surfaced.
    END_MS=$((SERVER_MS > CLIENT_MS ? SERVER_MS : CLIENT_MS))
    if [ "$srv" = verified ] && [ "$cli" = verified ]; then
        OUTCOME=verified
    elif [ "$cli" != verified ] && { [ "$srv" = verified ] || [ "$CLIENT_MS" -le "$SERVER_MS" ]; }; then
        OUTCOME=$cli
    else
        OUTCOME=$srv
    fi
    DETAIL="server: $srv after $(secs "$SERVER_MS") s, client: $cli after $(secs "$CLIENT_MS") s; deadline ${TMO} s"
    case "$srv $cli" in
        *UNCLEAR*) fail "$name: a side failed without a clear error" ;;
    esac
    [ "$END_MS" -le $(((TMO + 15) * 1000)) ] || fail "$name: the run took too long to end"
}

run_case linkflap 40 $FLAP_S
result "linkflap: $OUTCOME after $(secs $END_MS) s (B/eth2 down for ${FLAP_S} s mid-run, 64 MiB x 40; $DETAIL)"
[ "$OUTCOME" = verified ] || fail "a ${FLAP_S} s link flap inside a ${TMO} s deadline was not survived"

run_case linkdown 100 0
result "linkdown: $OUTCOME after $(secs $END_MS) s (B/eth2 down for good mid-run; $DETAIL)"
echo PASS
