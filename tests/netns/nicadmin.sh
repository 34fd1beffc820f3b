#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.nicadmin: a NIC of the fused device is administratively down
# (`ip link set eth2 down`) before the process starts, as after a
# maintenance. One channel on the virtual device that fuses eth1..eth4
# (TPX_CHANNELS=1, TPX_NIC_FUSE=auto, TPX_SOCK_FAILOVER=-1), as
# netns.nicdown. In turn B's eth2 (the server's side), A's eth2 (the
# client's) and A's eth1 (the one the client's control connections use
# first: they move to the next NIC) is down before its process starts:
#   - the NIC stays a member of that side's virtual device, so both sides'
#     members pair by index: every TCP connection between data NICs joins
#     the same link (10.77.K.x with 10.77.K.y; a side that dropped the NIC
#     would pair its later members with the peer's next NICs);
#   - byte-verified rounds of 4 MiB each way run with the NIC down (both
#     sides exit 0, no FAULT line);
#   - once the NIC is up it carries the rounds' bytes within 3 s (the
#     connections it lacked join as replaced ones do, sock_rejoin.c), and
#     the connections over it join its own link.
# Prints RESULT lines.
. "$(dirname "$0")/lib.sh"
need_peer

export TPX_CHANNELS=1 TPX_SOCK_STALL_MS=1000 TPX_SOCK_FAILOVER=-1
PORT=18621
TMO_MS=10000
CARRY_BYTES=1048576 CARRY_MS=3000
# Rounds go on for several seconds after the NIC is up (well past the carry
# bound, and the connections checked after it).
ROUNDS=1000 SIZE=4194304
ALL="server client"


# links_paired HOST: the established TCP connections of HOST between data
# NICs (10.77.1-4.x), "L R" by their links (the third octets); fails on one
# that joins two links. Prints how many there are per link.
links_paired() {
    local pairs bad
    pairs=$("$TESTBED" exec "$1" ss -Htn state established |
        awk '{ split($3, l, "."); split($4, r, ".");
               if (l[1] == 10 && l[2] == 77 && l[3] >= 1 && l[3] <= 4) print l[3], r[3] }')
    bad=$(echo "$pairs" | awk 'NF == 2 && $1 != $2' | sort | uniq -c)
    [ -z "$bad" ] || { echo "connections of $1 across links (count, local link, peer link):"; echo "$bad"; return 1; }
    echo "$pairs" | awk 'NF == 2 { n[$1]++ } END { for (k in n) printf "eth%s:%d ", k, n[k]; print "" }'
}

# down_before HOST ROLE NIC: HOST's NIC down before ROLE (server in B,
# client in A) starts; up once the rounds run.
down_before() {
    local host=$1 role=$2 nic=$3 start up paired
    [ "$role" = server ] && "$TESTBED" link B $nic down
    start_peer server B server --port $PORT --size $SIZE --timeout-ms $TMO_MS --deadline 100
    SERVER=$PEER_PID
    wait_log "$WORK/server.log" '^ENGINE' 20 || { show_peer_logs $ALL; fail "the server did not start"; }
    [ "$role" = client ] && "$TESTBED" link A $nic down
    start_peer client A client "$TPXTB_B_ETH0" --port $PORT --size $SIZE --faults 0 \
        --rounds $ROUNDS --timeout-ms $TMO_MS --deadline 100
    CLIENT=$PEER_PID
    wait_log "$WORK/client.log" '^RUNNING' 40 ||
        { show_peer_logs $ALL; fail "no verified round with $host's $nic down before the $role started"; }
    for h in A B; do
        paired=$(links_paired $h) || { show_peer_logs $ALL; echo "$paired"; fail "$host's $nic down before the $role started: the members do not pair by index"; }
    done
    kill -0 "$CLIENT" 2>/dev/null || { show_peer_logs $ALL; fail "the run ended before $nic came back"; }
    start=$(io_bytes "$host" $nic)
    up=$(now_ms) # before the command: its own time counts too
    "$TESTBED" link "$host" $nic up || fail "testbed link $host $nic up failed"
    wait_carry "$host" "$nic" "$start" "$up"
    result "$host's $nic down before the $role started: it carries $WAITED ms after it came up"
    for h in A B; do
        paired=$(links_paired $h) || { show_peer_logs $ALL; echo "$paired"; fail "$host's $nic up again: connections across links"; }
    done
    case "$paired" in *$nic:*) ;; *) show_peer_logs $ALL; fail "no connection over $nic after it came up ($paired)" ;; esac
    result "$host's $nic up again: connections per link of B: $paired"
    pair_verified "$up" "$host's $nic down before the $role started"
    grep -q 'is administratively down' "$WORK/$role.log" ||
        { cat "$WORK/case.txt"; fail "the $role did not say that $nic is administratively down"; }
    result "$host's $nic down before the $role started: every round verified, no fault (server and client exit 0; the run ended $(secs "$CLIENT_MS") s after $nic came up)"
}

down_before B server eth2
down_before A client eth2
down_before A client eth1
echo PASS
