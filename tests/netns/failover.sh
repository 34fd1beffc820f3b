#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.failover: with one NIC per channel (TPX_NIC_FUSE=0: channel k on
# eth(k+1); the control stream shares eth1 with channel 0), host B's data
# links eth1 to eth4 go down in turn, each for 2 s and then up, 3 s
# apart, in the middle of verified transfers B -> A (64 MiB, tpx-perf
# --verify). Each lost channel costs bandwidth, not transfers
# (TPX_CHANNEL_FAILOVER): A declares the channel lost after
# TPX_CHANNEL_STALL_MS, B deals its missing chunks again over the live ones,
# and both sides must end verified: 0 failed transfers, 0 wrong bytes. The
# control stream goes over the bootstrap connection (eth0) from the start
# (TPX_CTRL_BOOTSTRAP=1, the default): it never moves. Over the plugin's
# control comms (failover.ctrlcomm: TPX_CTRL_BOOTSTRAP=0) it shares eth1 with
# channel 0, stalls with it, moves to the bootstrap connection and stays
# there. A
# link that comes back carries traffic again: the lost channel is connected
# again in the background and rejoins the dealing, so B's NIC sends at least
# 20 MB of the transfers within 5 s of its link coming up (measured 0.2-0.4 s,
# up to 1.4 s beside two busy loops). A link whose window the transfers did
# not outlast is not judged (a run that recovers fast ends sooner: at 450
# transfers one ended while the last link was down, its NIC "never back"),
# and at least three of the four must be. Run
# plain and in strict TCPX mode (TPX_SOCK_TCPX=1: FIFO pairing of the chunks
# dealt again, proven by the bytes).
# Prints RESULT failover[.ctrlcomm|.tcpx]: <outcome> after S s (channels lost ...).
. "$(dirname "$0")/lib.sh"

export TPX_NIC_FUSE=0 TPX_CHANNEL_STALL_MS=500
TMO=30

# run_case NAME: sets OUTCOME
run_case() {
    local name=$1 t0 t1 hung=0 srv cli lost moved nic downs=0 back=0
    start_server --size 64M --iters 700 --warmup 1 --verify --timeout $TMO
    start_client
    wait_tx B eth2 100000000 60 || { show_logs; fail "$name: transfer did not start"; }
    t0=$(now_ms)
    for nic in eth1 eth2 eth3 eth4; do
        kill -0 "$CLIENT" 2>/dev/null || break
        "$TESTBED" link B "$nic" down || fail "testbed link B $nic down failed"
        sleep 2
        "$TESTBED" link B "$nic" up || fail "testbed link B $nic up failed"
        downs=$((downs + 1))
        echo "$name: $nic was down for 2 s"
        t1=$(now_ms)
        if wait_tx B "$nic" 20000000 5; then
            back=$((back + 1))
            echo "$name: $nic carries transfers again $(secs $(($(now_ms) - t1))) s after its link came up"
        elif ! kill -0 "$CLIENT" 2>/dev/null; then
            # the transfers ended before the link's return could be judged
            downs=$((downs - 1))
            echo "$name: the transfers ended within 5 s of $nic coming back: not judged"
        fi
        sleep 2
    done
    wait_pair 150 "$t0" || hung=1
    show_logs
    [ "$hung" = 0 ] || fail "$name: hang after a data link went down"
    srv=$(perf_outcome "$WORK/server.log" "$SERVER_RC")
    cli=$(perf_outcome "$WORK/client.log" "$CLIENT_RC")
    lost=$(grep -c 'its missing chunks are dealt again' "$WORK/server.log")
    moved=$(cat "$WORK/server.log" "$WORK/client.log" |
            grep -c 'control messages go over the bootstrap connection')
    grep -h '^# data channels' "$WORK/server.log" "$WORK/client.log" || true
    result "$name: server $srv, client $cli after $(secs "$SERVER_MS") s (channels lost at A: $lost; control streams moved: $moved; B/eth1..eth4 down 2 s each, 64 MiB transfers; links back carrying transfers: $back of $downs)"
    [ "$srv" = verified ] && [ "$cli" = verified ] ||
        fail "$name: a transfer failed although the peer lived and a channel was left"
    [ "$lost" -ge 1 ] || fail "$name: no channel was declared lost (the test proved nothing)"
    if [ "${TPX_CTRL_BOOTSTRAP:-1}" = 0 ]; then
        [ "$moved" -ge 1 ] || fail "$name: eth1 went down and no control stream moved"
    else
        [ "$moved" = 0 ] || fail "$name: a control stream on the bootstrap connection moved"
    fi
    [ "$downs" -ge 3 ] && [ "$back" = "$downs" ] ||
        fail "$name: a link that came back carried no transfers again ($back of $downs judged)"
}

run_case failover
TPX_CTRL_BOOTSTRAP=0 run_case failover.ctrlcomm
TPX_SOCK_TCPX=1 run_case failover.tcpx
echo PASS
