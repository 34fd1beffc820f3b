#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.leaks: nothing leaks when peers fail. tests/netns/netns_peer (public
# API only) runs verified rounds (16 MiB each way, every byte checked):
#   1. a server in host A; client 1 in host B is SIGKILLed mid-run: the
#      server's transfer fails, it closes the peer and accepts the next;
#   2. client 2 in B runs rounds until B's data link eth2 is black-holed: its
#      transfers fail (deadline 5 s), it closes the failed peer; the link is
#      cleared and client 2 connects again, runs 8 verified rounds and says
#      bye; the server closes that peer too.
# Then the server and client 2 each check that their open fds (/proc/self/fd)
# and threads (/proc/self/task) are back to the counts taken right after
# tpx_engine_create(), and back to those before it after tpx_engine_destroy().
# In the ASan build LeakSanitizer checks memory at their exit. Prints
#   RESULT leaks: server fds A->B threads C->D, client fds ... threads ...
. "$(dirname "$0")/lib.sh"
# The black hole must fail client 2's transfers: the built-in transport's
# failover (its fused comms go on over the other NICs, netns.nicfail) is off.
export TPX_SOCK_FAILOVER=0
need_peer
command -v nft >/dev/null 2>&1 || { echo "SKIP: nft is not installed (Debian package nftables)"; exit 77; }

PORT=18600
TMO_MS=5000
GO="$WORK/go"
ALL="server client1 client2"

start_peer server A server --port $PORT --faults 2 --timeout-ms $TMO_MS --deadline 55
SRV=$PEER_PID
# the server's base counts are taken right after tpx_engine_create(): before a peer comes
wait_log "$WORK/server.log" '^ENGINE' 20 || { show_peer_logs $ALL; fail "server did not start"; }
start_peer client1 B client "$TPXTB_A_ETH0" --port $PORT --faults 1 --timeout-ms $TMO_MS --deadline 55
C1=$PEER_PID
wait_log "$WORK/client1.log" '^RUNNING' 20 || { show_peer_logs $ALL; fail "client 1 did not run"; }
sleep 0.5
kill -9 "$C1"
t_kill=$(now_ms)
wait_pid "$C1" 5 2>/dev/null || fail "client 1 survived SIGKILL"
wait_log "$WORK/server.log" '^SESSION session=1 end=fault' 15 ||
    { show_peer_logs $ALL; fail "server did not see client 1 die within 15 s"; }
kill_ms=$(($(log_field "$WORK/server.log" '^SESSION session=1 ' at) - t_kill))
kill_st=$(log_field "$WORK/server.log" '^SESSION session=1 ' status)
echo "client 1 killed: the server's session ended $kill_st $(secs $kill_ms) s later"

start_peer client2 B client "$TPXTB_A_ETH0" --port $PORT --faults 1 --rounds 8 \
    --timeout-ms $TMO_MS --go-file "$GO" --deadline 50
C2=$PEER_PID
wait_log "$WORK/client2.log" '^RUNNING' 20 || { show_peer_logs $ALL; fail "client 2 did not run"; }
sleep 0.5
"$TESTBED" blackhole B eth2 || fail "testbed blackhole failed"
t_bh=$(now_ms)
wait_log "$WORK/client2.log" '^FAULT' $((TMO_MS / 1000 + 10)) ||
    { show_peer_logs $ALL; fail "client 2 saw no fault within the deadline + 10 s of the black hole"; }
bh_ms=$(($(log_field "$WORK/client2.log" '^FAULT' at) - t_bh))
bh_st=$(log_field "$WORK/client2.log" '^FAULT' status)
wait_log "$WORK/server.log" '^SESSION session=2 end=fault' 15 ||
    { show_peer_logs $ALL; fail "server did not end the black-holed session"; }
bh_srv_ms=$(($(log_field "$WORK/server.log" '^SESSION session=2 ' at) - t_bh))
bh_srv_st=$(log_field "$WORK/server.log" '^SESSION session=2 ' status)
echo "black hole on B/eth2: client 2 failed $bh_st after $(secs $bh_ms) s, server $bh_srv_st after $(secs $bh_srv_ms) s"
"$TESTBED" clear B eth2 || fail "testbed clear failed"
touch "$GO"

ok=1
if wait_pid "$C2" 30; then C2_RC=$WAIT_RC; else ok=0; C2_RC=hang; echo "client 2 did not finish within 30 s" >&2; fi
if wait_pid "$SRV" 15; then SRV_RC=$WAIT_RC; else ok=0; SRV_RC=hang; echo "server did not finish within 15 s" >&2; fi
show_peer_logs $ALL

leak() { # NAME: "fds A->B threads C->D" of its check after the peers closed
    grep -m1 "^LEAKCHECK .* peers closed" "$WORK/$1.log" | sed 's/.*: //'
}
srv_leak=$(leak server)
cli_leak=$(leak client2)
result "leaks: server ${srv_leak:-no check} (rc $SRV_RC), client ${cli_leak:-no check} (rc $C2_RC);" \
    "SIGKILLed client: server $kill_st after $(secs $kill_ms) s; black hole: client $bh_st after $(secs $bh_ms) s, server $bh_srv_st after $(secs $bh_srv_ms) s"
[ "$ok" = 1 ] || fail "a side hung"
grep -qw LEAK "$WORK/server.log" "$WORK/client2.log" && fail "fds or threads leaked (see LEAKCHECK above)"
[ "$SRV_RC" = 0 ] || fail "server exited $SRV_RC"
[ "$C2_RC" = 0 ] || fail "client 2 exited $C2_RC"
grep -q 'ERROR: LeakSanitizer\|ERROR: AddressSanitizer' "$WORK/server.log" "$WORK/client2.log" &&
    fail "sanitizer report"
echo PASS
