#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.nicdown: a NIC of the fused device is down when a new peer connects
# (a NIC under maintenance). One channel on the virtual device that fuses
# eth1..eth4 (TPX_CHANNELS=1, TPX_NIC_FUSE=auto, TPX_SOCK_FAILOVER=-1), as
# netns.nicfail. The server (tests/netns/netns_peer) runs in B and has found
# the four NICs up; B's eth2 goes down; then the client starts in A (A's eth2
# stays up, without carrier) and connects: both comms of the channel are
# made while the link is down.
#   - the comms connect over the three NICs that work, and byte-verified
#     rounds of 16 MiB each way run with no fault (both sides exit 0, no
#     FAULT line);
#   - once eth2 is up again, it carries the rounds' bytes within 3 s (the
#     connection each comm lacked joins as a replaced one does,
#     sock_rejoin.c);
#   - with every data NIC of B down, the connect fails with an error.
# Prints RESULT lines.
. "$(dirname "$0")/lib.sh"
need_peer

export TPX_CHANNELS=1 TPX_SOCK_STALL_MS=1000 TPX_SOCK_FAILOVER=-1
PORT=18611
TMO_MS=10000
CARRY_BYTES=1048576 CARRY_MS=3000
ALL="server client"

io_bytes() {
    "$TESTBED" exec "$1" sh -c "echo \$((\$(cat /sys/class/net/$2/statistics/tx_bytes) + \$(cat /sys/class/net/$2/statistics/rx_bytes)))"
}

# start_down ROUNDS DEADLINE IFACES...: the server in B, B's IFACES down once
# its engine exists, then the client in A.
start_down() {
    local rounds=$1 dl=$2 i
    shift 2
    start_peer server B server --port $PORT --timeout-ms $TMO_MS --deadline "$dl"
    SERVER=$PEER_PID
    wait_log "$WORK/server.log" '^ENGINE' 20 || { show_peer_logs $ALL; fail "the server did not start"; }
    for i in "$@"; do
        "$TESTBED" link B "$i" down || fail "testbed link B $i down failed"
    done
    start_peer client A client "$TPXTB_B_ETH0" --port $PORT --size 16777216 --faults 0 \
        --rounds "$rounds" --timeout-ms $TMO_MS --deadline "$dl"
    CLIENT=$PEER_PID
}

# Case 1: eth2 down at connect, up once the rounds run.
start_down 1500 100 eth2
wait_log "$WORK/client.log" '^RUNNING' 40 ||
    { show_peer_logs $ALL; fail "no verified round with B's eth2 down at connect"; }
kill -0 "$CLIENT" 2>/dev/null || { show_peer_logs $ALL; fail "the run ended before eth2 came back"; }
start=$(io_bytes B eth2)
"$TESTBED" link B eth2 up || fail "testbed link B eth2 up failed"
up=$(now_ms)
while :; do
    waited=$(($(now_ms) - up))
    [ $(($(io_bytes B eth2) - start)) -ge $CARRY_BYTES ] && break
    kill -0 "$CLIENT" 2>/dev/null ||
        { show_peer_logs $ALL; fail "the run ended $waited ms after eth2 came back, before eth2 carried data"; }
    [ "$waited" -lt $CARRY_MS ] || {
        show_peer_logs $ALL
        fail "B's eth2 carried under $CARRY_BYTES bytes in $CARRY_MS ms after it came back (the connection it lacked never joined?)"
    }
    sleep 0.02
done
result "eth2 down at connect: B's eth2 carries again $waited ms after it came back"
wait_pair 100 "$up" || { show_peer_logs $ALL; fail "hang with eth2 down at connect"; }
show_peer_logs $ALL >"$WORK/case1.txt"
[ "$SERVER_RC" = 0 ] && [ "$CLIENT_RC" = 0 ] || {
    cat "$WORK/case1.txt"
    fail "verified rounds whose comms were made with B's eth2 down failed (server rc $SERVER_RC, client rc $CLIENT_RC)"
}
! grep -q '^FAULT' "$WORK/case1.txt" || { cat "$WORK/case1.txt"; fail "a round failed"; }
grep -E 'starts without|^CONNECTED' "$WORK/case1.txt" | head -6
result "eth2 down at connect: every round verified, no fault (server and client exit 0)"

# Case 2: every data NIC of B down: the connect fails (an error, no hang).
# (netns_peer's client tries its connect again until its --deadline.)
start_down 4 15 eth1 eth2 eth3 eth4
t0=$(now_ms)
wait_pair 30 "$t0" || { show_peer_logs $ALL; fail "every data NIC down: hang"; }
[ "$CLIENT_RC" != 0 ] ||
    { show_peer_logs $ALL; fail "every data NIC of B down, yet the client succeeded"; }
grep -q 'no data connection could be made over any' "$WORK/client.log" "$WORK/server.log" ||
    { show_peer_logs $ALL; fail "every data NIC of B down: no error saying so"; }
grep -h -m1 'no data connection could be made' "$WORK/client.log"
result "every data NIC down: the client failed after $(secs $(($(now_ms) - t0))) s (rc $CLIENT_RC)"
echo PASS
