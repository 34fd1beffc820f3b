#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.recovery: the server process is SIGKILLed in the middle of verified
# rounds (tests/netns/netns_peer, 16 MiB each way) and restarted on the same
# port; the client process, not restarted, must see the failure, close the
# failed peer, connect again (tpx_peer_connect retried until its deadline)
# and run 8 byte-verified rounds with the new server. Everything within 45 s.
# Both the client and the new server end with netns_peer's fd/thread check.
# Prints
#   RESULT recovery: failure detected (STATUS) after S s, verified again
#   after S s (S s after the restart, N connect attempts)
. "$(dirname "$0")/lib.sh"
need_peer

PORT=18601
TMO_MS=5000
RESTART_DELAY=0.5 # the client's first connect attempts find no server
ALL="server1 server2 client"

start_peer server1 A server --port $PORT --timeout-ms $TMO_MS --deadline 45
S1=$PEER_PID
wait_log "$WORK/server1.log" '^ENGINE' 20 || { show_peer_logs $ALL; fail "server 1 did not start"; }
start_peer client B client "$TPXTB_A_ETH0" --port $PORT --faults 1 --rounds 8 \
    --timeout-ms $TMO_MS --deadline 45
CL=$PEER_PID
wait_log "$WORK/client.log" '^RUNNING' 20 || { show_peer_logs $ALL; fail "client did not run"; }
sleep 0.5
kill -9 "$S1"
t_kill=$(now_ms)
wait_pid "$S1" 5 2>/dev/null || fail "server 1 survived SIGKILL"
sleep $RESTART_DELAY
start_peer server2 A server --port $PORT --timeout-ms $TMO_MS --deadline 40
S2=$PEER_PID
t_restart=$(now_ms)

ok=1
if wait_pid "$CL" 35; then CL_RC=$WAIT_RC; else ok=0; CL_RC=hang; echo "client did not finish within 35 s of the restart" >&2; fi
if wait_pid "$S2" 10; then S2_RC=$WAIT_RC; else ok=0; S2_RC=hang; echo "server 2 did not finish" >&2; fi
show_peer_logs $ALL

fault_at=$(log_field "$WORK/client.log" '^FAULT' at)
fault_st=$(log_field "$WORK/client.log" '^FAULT' status)
rec_at=$(log_field "$WORK/client.log" '^RECOVERED' at)
attempts=$(log_field "$WORK/client.log" '^CONNECTED session=2 ' attempts)
[ -n "$fault_at" ] || { result "recovery: FAILED: the client never saw the server die (rc $CL_RC)"; fail "no FAULT"; }
detect_ms=$((fault_at - t_kill))
if [ -z "$rec_at" ]; then
    result "recovery: FAILED: failure detected ($fault_st) after $(secs $detect_ms) s, never verified again (client rc $CL_RC, server 2 rc $S2_RC)"
    fail "the client did not recover"
fi
result "recovery: failure detected ($fault_st) after $(secs $detect_ms) s, verified again after" \
    "$(secs $((rec_at - t_kill))) s ($(secs $((rec_at - t_restart))) s after the restart, $attempts connect attempt(s));" \
    "client rc $CL_RC, server 2 rc $S2_RC"
[ "$ok" = 1 ] || fail "a side hung"
grep -qw LEAK "$WORK/server2.log" "$WORK/client.log" && fail "fds or threads leaked (see LEAKCHECK above)"
[ "$CL_RC" = 0 ] || fail "client exited $CL_RC"
[ "$S2_RC" = 0 ] || fail "server 2 exited $S2_RC"
[ "$detect_ms" -le $((TMO_MS + 5000)) ] || fail "the failure took $(secs $detect_ms) s to surface"
echo PASS
