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
# --verify), and the NICs left must have carried the bytes after the fault;
# in the flaps, eth2 carries bytes again soon after each time it comes back
# (carries_again).
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

# After a NIC comes back, the comm replaces the connection it lost over it
# (sock_rejoin.c) and the NIC carries the transfer's bytes again: B's eth2
# moves CARRY_BYTES (far above ARP and the replacement's handshake) within
# CARRY_MS of the link coming up. The issue's bound is 1 s; measured here
# (2-core host, the transfers verified) 0.1-0.3 s, so 3 s leaves room for a
# loaded machine. A flap during which the run ends (its last transfers
# done) proves nothing and is not counted; the flap case must count one
# (its run spans the three flaps; readflap's READs of 128 KiB blocks may
# end within the first, and are measured when they do not).
CARRY_BYTES=1048576 CARRY_MS=3000 CARRY_WORST=0 CARRY_SEEN=0
running() { kill -0 "$CLIENT" 2>/dev/null && kill -0 "$SERVER" 2>/dev/null; }
carries_again() {
    local t0=$1 start waited
    start=$(io_bytes B eth2)
    while :; do
        waited=$(($(now_ms) - t0))
        [ $(($(io_bytes B eth2) - start)) -ge $CARRY_BYTES ] && break
        running || { echo "the run ended $waited ms after eth2 came back"; return 0; }
        [ "$waited" -lt $CARRY_MS ] ||
            fail "B's eth2 carried under $CARRY_BYTES bytes in $CARRY_MS ms after it came back (no connection replaced over it?)"
        sleep 0.02
    done
    [ "$waited" -gt "$CARRY_WORST" ] && CARRY_WORST=$waited
    CARRY_SEEN=$((CARRY_SEEN + 1))
    echo "B's eth2 carries again $waited ms after it came back"
}

flap() {
    local k up
    for k in 1 2 3; do
        "$TESTBED" link B eth2 down || fail "testbed link B eth2 down failed"
        sleep 2
        "$TESTBED" link B eth2 up || fail "testbed link B eth2 up failed"
        up=$(now_ms)
        running || { sleep 3; continue; }
        carries_again "$up"
        sleep "$(awk -v ms=$((3000 - ($(now_ms) - up))) 'BEGIN { printf "%.2f", (ms > 0 ? ms / 1000 : 0) }')"
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
[ "$CARRY_SEEN" -gt 0 ] || fail "flap: the run ended before eth2 came back"
result "flap: B's eth2 carried again at most $CARRY_WORST ms after it came back ($CARRY_SEEN flaps)"
"$TESTBED" link B eth2 up
# One-sided READ of 1000 x 128 KiB blocks: the owner (A) sends.
CARRY_WORST=0 CARRY_SEEN=0
run_case readflap flap A "--op read --verify" --op read --block 128K --blocks 1000 --iters 100 \
    --warmup 1 --no-raw
[ "$CARRY_SEEN" -gt 0 ] &&
    result "readflap: B's eth2 carried again at most $CARRY_WORST ms after it came back ($CARRY_SEEN flaps)"
"$TESTBED" link B eth2 up
if command -v nft >/dev/null 2>&1; then
    run_case blackhole blackhole B "" --size 64M --iters 100 --warmup 1
    "$TESTBED" clear A eth3
fi
run_case two two B "" --size 64M --iters 100 --warmup 1
echo PASS
