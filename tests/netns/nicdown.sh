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
#   - the same with eth1, which the control connections use first;
#   - with every data NIC of B down, the connect fails with an error.
# Prints RESULT lines.
. "$(dirname "$0")/lib.sh"
need_peer

export TPX_CHANNELS=1 TPX_SOCK_STALL_MS=1000 TPX_SOCK_FAILOVER=-1
PORT=18611
TMO_MS=10000
CARRY_BYTES=1048576 CARRY_MS=3000
ALL="server client"


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

# down_up IFACE ROUNDS: B's IFACE down at connect, up once the rounds run.
down_up() {
    local nic=$1 rounds=$2 start up
    start_down "$rounds" 100 "$nic"
    wait_log "$WORK/client.log" '^RUNNING' 40 ||
        { show_peer_logs $ALL; fail "no verified round with B's $nic down at connect"; }
    kill -0 "$CLIENT" 2>/dev/null || { show_peer_logs $ALL; fail "the run ended before $nic came back"; }
    start=$(io_bytes B "$nic")
    "$TESTBED" link B "$nic" up || fail "testbed link B $nic up failed"
    up=$(now_ms)
    wait_carry B "$nic" "$start" "$up"
    result "$nic down at connect: B's $nic carries again $WAITED ms after it came back"
    pair_verified "$up" "comms made with B's $nic down"
    grep -E 'starts without|control connection tries|^CONNECTED' "$WORK/case.txt" | head -6
    result "$nic down at connect: every round verified, no fault (server and client exit 0)"
}

# eth2: a data connection's NIC; eth1: also the control connection's (it
# moves to the next NIC).
down_up eth2 1500
down_up eth1 800

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
