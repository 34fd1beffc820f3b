#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.nicfail: one channel on the virtual device that fuses eth1..eth4
# (TPX_CHANNELS=1, TPX_NIC_FUSE=auto), so a single comm of the built-in
# transport has data connections on all four NICs and fails over
# (TPX_SOCK_FAILOVER=-1): a NIC that dies in the middle of verified
# transfers B -> A costs its bandwidth, not a transfer. TPX_SOCK_STALL_MS=1000
# ends a connection whose bytes stay unacknowledged that long. Four cases,
# tpx-perf --verify with a 10 s transfer deadline:
#   flap       64 MiB transfers B -> A; B's eth2 goes down for 2 s and up
#              for 3 s, three times;
#   readflap   the same flaps under one-sided READs of 1000 x 128 KiB
#              blocks (the owner A sends);
#   blackhole  64 MiB transfers; every packet of A's eth3 is dropped (nft),
#              for good;
#   two        64 MiB transfers; B's eth2 and eth4 go down for good.
# Each must end in byte-verified success on both sides (exit 0 with
# --verify), and the NICs left must have carried the bytes after the fault.
# Prints RESULT lines with the time each run took.
. "$(dirname "$0")/lib.sh"

export TPX_CHANNELS=1 TPX_SOCK_STALL_MS=1000 TPX_SOCK_FAILOVER=-1
TMO=10

# run_case NAME FAULT_FN SENDER CLIENT_ARGS SERVER_ARGS...: a verified run
# with FAULT_FN applied once SENDER's eth2 carries traffic; fails unless both
# sides verify every byte.
run_case() {
    local name=$1 fault=$2 sender=$3 cargs=$4 t0 hung=0
    shift 4
    start_server "$@" --verify --timeout $TMO
    # shellcheck disable=SC2086 # CLIENT_ARGS are words
    start_client $cargs
    wait_tx "$sender" eth2 100000000 60 || { show_logs; fail "$name: transfer did not start"; }
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
    result "$name: verified after $(secs "$((SERVER_MS > CLIENT_MS ? SERVER_MS : CLIENT_MS))") s from the fault (tpx-perf $*, one fused channel over eth1..eth4)"
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

XFER=(--size 64M --iters 200 --warmup 1)
run_case flap flap B "" "${XFER[@]}"
"$TESTBED" link B eth2 up
# One-sided READ of 1000 x 128 KiB blocks: the owner (A) sends.
run_case readflap flap A "--op read --verify" --op read --block 128K --blocks 1000 --iters 100 \
    --warmup 1 --no-raw
"$TESTBED" link B eth2 up
if command -v nft >/dev/null 2>&1; then
    run_case blackhole blackhole B "" --size 64M --iters 100 --warmup 1
    "$TESTBED" clear A eth3
fi
run_case two two B "" --size 64M --iters 100 --warmup 1
echo PASS
