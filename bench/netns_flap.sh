#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/netns_flap.sh [TOOLS_DIR] - a NIC that fails, over and over, in the middle of
# verified transfers: what it costs in bandwidth, and that it costs no transfer.
# Two hosts of scripts/testbed (network namespaces, data NICs eth1..eth4, nothing
# outside them touched; needs root), tpx-perf B -> A, every byte verified:
#   two-sided  back-to-back 256 MiB transfers;
#   read       one-sided READs of 1000 x 128 KiB blocks (A, the owner, sends).
# Each workload runs with all NICs up, then under each fault, repeated for the whole
# run (2 s on, 3 s off):
#   flap       B's eth2 down, then up;
#   blackhole  every packet of A's eth3 dropped (nft), then let through;
#   two        B's eth2 and eth4 down, then up.
# Both ways the NICs meet tpx: fused (TPX_NIC_FUSE=auto: every channel's connections
# over all four NICs, the transport fails over) and split (TPX_NIC_FUSE=0: a channel
# a NIC, the engine deals a lost channel's chunks again and connects it again); and
# tcpx: split, in strict TCPX mode (TPX_SOCK_TCPX=1: FIFO pairing, tags ignored, so
# every byte verified proves both sides dealt the lost chunks in the same order).
# Prints one row per run: GB/s, the ratio to the same workload with all NICs up,
# failed transfers (0: both sides verified every byte), threads and fds of the
# client at the end against its first seconds.
# Environment: SECS=60 (the run's length, set by its iterations from the all-up
# rate)  MODES="fused split tcpx"  FAULTS="flap blackhole two"  LOADS="two-sided read"
# TPX_SOCK_STALL_MS=1000  TPX_CHANNEL_STALL_MS (1000 split, 3 x TPX_SOCK_STALL_MS fused)
# LOGS=DIR keeps both sides' output of every run there (MODE-LOAD-FAULT.{server,client}.log:
# the engine's counters of lost and rejoined channels, chunks dealt again, recovery times)
set -u -o pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${1:-$here/build/release/bin}
if [ -z "${TPXTB_PREFIX:-}" ]; then
    exec "$here/scripts/testbed" run bash "$0" "$TOOLS"
fi
set -- "$TOOLS" "$here/scripts/testbed"
. "$here/tests/netns/lib.sh"
SECS=${SECS:-60}
MODES=${MODES:-"fused split tcpx"}
FAULTS=${FAULTS:-"flap blackhole two"}
LOADS=${LOADS:-"two-sided read"}
export TPX_SOCK_STALL_MS=${TPX_SOCK_STALL_MS:-1000}
# The engine's stall verdict (TPX_CHANNEL_STALL_MS) is for channels the transport does not
# save: split, 1000 ms; fused, three times the transport's (found within 1.25 x
# TPX_SOCK_STALL_MS), since a NIC's loss stalls every fused channel at once and a verdict
# before the transport fails over takes two channels for lost, which fails the peer.
CHAN_STALL_SPLIT=${TPX_CHANNEL_STALL_MS:-1000}
CHAN_STALL_FUSED=${TPX_CHANNEL_STALL_MS:-$((3 * TPX_SOCK_STALL_MS))}

fault_on() {
    case $1 in
    flap) "$TESTBED" link B eth2 down ;;
    blackhole) "$TESTBED" blackhole A eth3 ;;
    two) "$TESTBED" link B eth2 down && "$TESTBED" link B eth4 down ;;
    esac
}
fault_off() {
    case $1 in
    flap) "$TESTBED" link B eth2 up ;;
    blackhole) "$TESTBED" clear A eth3 ;;
    two) "$TESTBED" link B eth2 up && "$TESTBED" link B eth4 up ;;
    esac
}
# counts PID: "threads fds" of a process
counts() { echo "$(ls "/proc/$1/task" 2>/dev/null | wc -l) $(ls "/proc/$1/fd" 2>/dev/null | wc -l)"; }

# run LOAD ITERS FAULT: sets GBPS, FAILED, T0 (threads fds early), T1 (at the end)
run() {
    local load=$1 iters=$2 fault=$3 args pid
    if [ "$load" = read ]; then
        args=(--op read --block 128K --blocks 1000 --iters "$iters" --warmup 1 --no-raw)
    else
        args=(--size 256M --iters "$iters" --warmup 1)
    fi
    start_server "${args[@]}" --verify --timeout 20
    # READ: the requester (the client) reads, so the block list is its own options
    if [ "$load" = read ]; then start_client "${args[@]}" --verify; else start_client; fi
    # the first fault once data flows (the sender's eth1 carried 50 MB), not while the
    # channels still connect: a fault during the connect is not what this measures
    wait_tx "$([ "$load" = read ] && echo A || echo B)" eth1 50000000 60 || true
    pid=$(pgrep -n -f "tpx-perf client $TPXTB_A_ETH0" || true)
    T0=$( [ -n "$pid" ] && counts "$pid" || echo "- -")
    T1=$T0
    while kill -0 "$CLIENT" 2>/dev/null; do
        if [ "$fault" != none ]; then
            fault_on "$fault" >/dev/null 2>&1
            sleep 2
            [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && T1=$(counts "$pid")
            fault_off "$fault" >/dev/null 2>&1
            sleep 3
        else
            [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && T1=$(counts "$pid")
            sleep 1
        fi
    done
    fault_off "$fault" >/dev/null 2>&1
    wait_pair $((SECS * 3 + 60)) "$(now_ms)" >/dev/null 2>&1
    FAILED=0
    [ "$SERVER_RC" = 0 ] && [ "$CLIENT_RC" = 0 ] || FAILED=1
    if [ "$load" = read ]; then
        GBPS=$(awk '$1 == "read" { print $10 }' "$WORK/client.log" | tail -1)
    else
        GBPS=$(awk '/^# best:/ { print $3 }' "$WORK/server.log" "$WORK/client.log" | head -1)
    fi
    [ -n "$GBPS" ] || GBPS=0
    [ "$FAILED" = 0 ] || { echo "--- failed run ($load, $fault):"; show_logs | tail -20; }
    if [ -n "${LOGS:-}" ]; then
        mkdir -p "$LOGS"
        cp "$WORK/server.log" "$LOGS/$mode-$load-$fault.server.log"
        cp "$WORK/client.log" "$LOGS/$mode-$load-$fault.client.log"
    fi
}

printf '%-6s %-10s %-10s %8s %8s %7s %14s %14s\n' nics load fault GB/s x_up failed \
    "thr/fd early" "thr/fd end"
for mode in $MODES; do
    if [ "$mode" = fused ]; then
        export TPX_NIC_FUSE=auto TPX_SOCK_FAILOVER=-1 TPX_CHANNEL_STALL_MS=$CHAN_STALL_FUSED
    else
        export TPX_NIC_FUSE=0 TPX_SOCK_FAILOVER=0 TPX_CHANNEL_STALL_MS=$CHAN_STALL_SPLIT
    fi
    if [ "$mode" = tcpx ]; then export TPX_SOCK_TCPX=1; else unset TPX_SOCK_TCPX; fi
    for load in $LOADS; do
        # the all-up run sets the iterations of SECS seconds
        probe=$([ "$load" = read ] && echo 20 || echo 10)
        run "$load" "$probe" none
        per=$(awk -v g="$GBPS" -v l="$load" 'BEGIN { b = (l == "read") ? 1000 * 131072 : 268435456;
            print (g > 0) ? g * 1e9 / b : 1 }')
        iters=$(awk -v p="$per" -v s="$SECS" 'BEGIN { n = int(p * s); print (n < 10) ? 10 : n }')
        run "$load" "$iters" none
        up=$GBPS
        printf '%-6s %-10s %-10s %8.2f %8s %7s %14s %14s\n' "$mode" "$load" none "$up" 1.00 \
            "$FAILED" "$T0" "$T1"
        for fault in $FAULTS; do
            if [ "$fault" = blackhole ] && ! command -v nft >/dev/null 2>&1; then
                echo "no nft: blackhole skipped"; continue
            fi
            run "$load" "$iters" "$fault"
            printf '%-6s %-10s %-10s %8.2f %8.2f %7s %14s %14s\n' "$mode" "$load" "$fault" \
                "$GBPS" "$(awk -v a="$GBPS" -v b="$up" 'BEGIN { print (b > 0) ? a / b : 0 }')" \
                "$FAILED" "$T0" "$T1"
        done
    done
done
