#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.nicfail: one channel on the virtual device that fuses eth1..eth4
# (TPX_CHANNELS=1, TPX_NIC_FUSE=auto), so a single comm of the built-in
# transport has data connections on all four NICs and fails over
# (TPX_SOCK_FAILOVER=-1): a NIC that dies in the middle of verified
# transfers B -> A costs its bandwidth, not a transfer. TPX_SOCK_STALL_MS=1000
# ends a connection whose bytes stay unacknowledged that long. Three cases,
# each 64 MiB transfers with tpx-perf --verify and a 10 s transfer deadline:
#   flap       B's eth2 goes down for 2 s and up for 3 s, three times;
#   blackhole  every packet of A's eth3 is dropped (nft), for good;
#   two        B's eth2 and eth4 go down for good.
# Each must end in byte-verified success on both sides (exit 0 with
# --verify), and the NICs left must have carried the bytes after the fault.
# Prints RESULT lines with the time each run took.
. "$(dirname "$0")/lib.sh"

export TPX_CHANNELS=1 TPX_SOCK_STALL_MS=1000
TMO=10

# run_case NAME ITERS FAULT_FN: a verified run B -> A with FAULT_FN applied
# once eth2 carries traffic; fails unless both sides verify every byte.
run_case() {
    local name=$1 iters=$2 fault=$3 t0 hung=0
    start_server --size 64M --iters "$iters" --warmup 1 --verify --timeout $TMO
    start_client
    wait_tx B eth2 100000000 60 || { show_logs; fail "$name: transfer did not start"; }
    kill -0 "$CLIENT" 2>/dev/null || { show_logs; fail "$name: the run ended before the fault"; }
    t0=$(now_ms)
    "$fault"
    wait_pair 120 "$t0" || hung=1
    show_logs
    [ "$hung" = 0 ] || fail "$name: hang after a NIC failed"
    [ "$SERVER_RC" = 0 ] && [ "$CLIENT_RC" = 0 ] ||
        fail "$name: a NIC failed and a verified run did not survive (server rc $SERVER_RC, client rc $CLIENT_RC)"
    grep -q "data connection .* failed" "$WORK/client.log" "$WORK/server.log" ||
        fail "$name: no data connection failed over (the fault came too late?)"
    result "$name: verified after $(secs "$((SERVER_MS > CLIENT_MS ? SERVER_MS : CLIENT_MS))") s from the fault ($iters x 64 MiB, one fused channel over eth1..eth4)"
}

flap() {
    local k
    for k in 1 2 3; do
        "$TESTBED" link B eth2 down || fail "testbed link B eth2 down failed"
        sleep 2
        "$TESTBED" link B eth2 up || fail "testbed link B eth2 up failed"
        sleep 3
    done
}
blackhole() {
    command -v nft >/dev/null 2>&1 || { echo "no nft: blackhole case skipped"; return 0; }
    "$TESTBED" blackhole A eth3 || fail "testbed blackhole failed"
}
two() {
    "$TESTBED" link B eth2 down || fail "testbed link B eth2 down failed"
    "$TESTBED" link B eth4 down || fail "testbed link B eth4 down failed"
}

run_case flap 200 flap
"$TESTBED" link B eth2 up
if command -v nft >/dev/null 2>&1; then
    run_case blackhole 100 blackhole
    "$TESTBED" clear A eth3
fi
run_case two 100 two
echo PASS
