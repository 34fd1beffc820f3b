#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.linklost: a NIC of the reader (host B, the requester of READs of 1000 x 128 KiB,
# every byte verified) loses its link in the middle of the run, 3 s down, then up, with
# the timers of the stall rules set long (TPX_SOCK_STALL_MS=8000: its quarter is 2 s;
# TPX_CHANNEL_STALL_MS=20000: its quarter is 5 s), so that only the link's word can end
# the connections within the fault. Three hosts, which meet through a switch namespace:
# A's end of B's link stays up, so the sender (A, the owner) hears of the loss only from
# B. Two cases:
#   fused  TPX_NIC_FUSE=auto: the transport fails over; B's workers see eth2 without its
#          link and B tells A on another connection (sock_failover.c, "Tells"): A's log
#          names the tell;
#   tcpx   one NIC per channel, strict TCPX mode (the plugin never fails over): B's engine
#          judges the channel whose NIC lost its link (peer_sweep.c) and deals its chunks
#          again over the others: B's log names the NIC.
# Both: every transfer verified on both sides.
# Prints RESULT linklost-<case>: verified, <GB/s>, <the word seen>
TESTBED_HOSTS=3
. "$(dirname "$0")/lib.sh"

ARGS=(--op read --block 128K --blocks 1000 --iters 200 --warmup 1 --no-raw --verify --timeout 30)

run_case() {
    local name=$1 want_log=$2 want=$3 t0
    start_server "${ARGS[@]}"
    start_client "${ARGS[@]}"
    wait_tx A eth2 100000000 60 || { show_logs; fail "$name: the READs did not start"; }
    kill -0 "$CLIENT" 2>/dev/null || { show_logs; fail "$name: the client ended before the fault"; }
    "$TESTBED" link B eth2 down || fail "testbed link B eth2 down failed"
    t0=$(now_ms)
    sleep 3
    "$TESTBED" link B eth2 up || fail "testbed link B eth2 up failed"
    wait_pair 60 "$t0" || { show_logs; fail "$name: a side hung"; }
    if [ "$SERVER_RC" != 0 ] || [ "$CLIENT_RC" != 0 ]; then
        show_logs
        fail "$name: a side failed (server rc $SERVER_RC, client rc $CLIENT_RC)"
    fi
    grep -q "$want" "$WORK/$want_log.log" || {
        show_logs
        fail "$name: the $want_log's log does not say \"$want\""
    }
    result "linklost-$name: verified, $(awk '$1 == "read" { print $10 }' "$WORK/client.log" |
        tail -1) GB/s, $want_log: \"$want\""
}

export TPX_SOCK_STALL_MS=8000 TPX_CHANNEL_STALL_MS=20000
TPX_NIC_FUSE=auto TPX_SOCK_FAILOVER=-1 \
    run_case fused server "the receiver said so on another connection"
TPX_NIC_FUSE=0 TPX_SOCK_FAILOVER=0 TPX_SOCK_TCPX=1 \
    run_case tcpx client "its NIC eth2 lost its link"
echo PASS
