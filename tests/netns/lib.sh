# SPDX-License-Identifier: Apache-2.0
# lib.sh - shared by the netns tests (sourced). Usage of a test:
#   TEST.sh TOOLS_DIR TESTBED      (TOOLS_DIR holds tpx-perf; TESTBED is scripts/testbed)
# The test re-runs itself under `testbed run`, which creates hosts A and B and
# always removes them afterwards; exit 77 (no root / no netns) means skipped.
set -u -o pipefail

[ $# -ge 2 ] || { echo "usage: $0 TOOLS_DIR TESTBED" >&2; exit 2; }
TOOLS=$(cd "$1" && pwd) || exit 1
TESTBED=$2
PERF="$TOOLS/tpx-perf"
[ -x "$PERF" ] || { echo "no tpx-perf in $TOOLS" >&2; exit 1; }

# TESTBED_HOSTS=N before sourcing: N hosts (3 and more meet through a switch
# namespace: a NIC set down at one host leaves the other end of its link up)
if [ -z "${TPXTB_PREFIX:-}" ]; then
    exec "$TESTBED" ${TESTBED_HOSTS:+--hosts "$TESTBED_HOSTS"} run bash "$0" "$@"
fi

export TPX_SOCKET_IFNAME=eth1,eth2,eth3,eth4 # data NICs only; bootstrap goes over eth0
export TPX_CHANNELS=4
# Data NICs differ from the bootstrap address: peers must be authenticated
# to name them (TPX_TRUST_HANDLES, SECURITY.md).
export TPX_AUTH_TOKEN=${TPX_AUTH_TOKEN:-tpx-netns-testbed}
export TPX_LOG_LEVEL=${TPX_LOG_LEVEL:-warn}
WORK=$(mktemp -d)
PIDS=""
cleanup_lib() {
    local p
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup_lib EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
now_ms() { date +%s%3N; }

# tx_bytes of HOST's interface
tx_bytes() { "$TESTBED" exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes"; }

# wait_pid PID SECONDS: 0 and $WAIT_RC when PID exited in time, 1 if not
wait_pid() {
    local pid=$1 t=$(($2 * 10))
    while [ $t -gt 0 ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            WAIT_RC=0; wait "$pid" || WAIT_RC=$?
            return 0
        fi
        sleep 0.1; t=$((t - 1))
    done
    return 1
}

# start_server ARGS...: tpx-perf server in host A, output in $WORK/server.log
start_server() {
    "$TESTBED" exec A "$PERF" server --port 18516 "$@" >"$WORK/server.log" 2>&1 &
    SERVER=$!; PIDS="$PIDS $SERVER"
}
# start_client: tpx-perf client in host B connecting to A's eth0 address
start_client() {
    "$TESTBED" exec B "$PERF" client "$TPXTB_A_ETH0" --port 18516 "$@" >"$WORK/client.log" 2>&1 &
    CLIENT=$!; PIDS="$PIDS $CLIENT"
}
show_logs() {
    echo "--- server:"; cat "$WORK/server.log"
    echo "--- client:"; cat "$WORK/client.log"
}

# wait_tx HOST IFACE BYTES SECONDS: until HOST's IFACE sent BYTES more than now
wait_tx() {
    local start t=$(($4 * 10))
    start=$(tx_bytes "$1" "$2")
    while [ $t -gt 0 ]; do
        [ $(($(tx_bytes "$1" "$2") - start)) -ge "$3" ] && return 0
        sleep 0.1; t=$((t - 1))
    done
    return 1
}

# ---- fault tests (linkdown, loss, trickle, leaks, recovery) ------------------------

# The peer program (third argument of leaks/recovery): tests/netns/netns_peer.c.
PEER=${3:-}

# secs MS: milliseconds as seconds with two decimals
secs() { awk -v ms="$1" 'BEGIN { printf "%.2f", ms / 1000 }'; }

# result TEXT: the one-line summary a report can quote
result() { echo "RESULT $*"; }

# status_name TEXT: the tpx_status_t name (TPX_ERR_ stripped) of the first
# tpx_status_string() text found in TEXT; NO_PROGRESS for tpx-perf's own stall
# detector; UNCLEAR if there is none.
status_name() {
    local t="$1" pair
    for pair in "timed out:TIMED_OUT" "connection refused:CONN_REFUSED" \
        "connection closed by peer:CONN_RESET" "protocol error:PROTOCOL" \
        "message larger than the receive buffer:TRUNCATED" "peer unreachable:UNREACHABLE" \
        "address already in use:ADDR_IN_USE" "no usable device:NO_DEVICE" "I/O error:IO" \
        "net plugin error:PLUGIN" "internal error:INTERNAL" "canceled:CANCELED" \
        "invalid state:INVALID_STATE" "invalid argument:INVALID_ARG" \
        "no resource available:NO_RESOURCE" "out of memory:NO_MEMORY" \
        "no progress for:NO_PROGRESS"; do
        case "$t" in *"${pair%%:*}"*) echo "${pair##*:}"; return 0 ;; esac
    done
    echo UNCLEAR
}

# perf_outcome LOG RC: "verified" for a tpx-perf that exited 0 with --verify,
# else "error NAME" from its FAILED line
perf_outcome() {
    if [ "$2" = 0 ]; then echo verified; return; fi
    echo "error $(status_name "$(grep -m1 'FAILED:' "$1")")"
}

# wait_pair SECONDS T0_MS: wait until both $SERVER and $CLIENT exited, at most
# SECONDS after T0_MS; sets SERVER_RC/_MS, CLIENT_RC/_MS (ms after T0_MS;
# rc "hang" and ms -1 for one still running, which is then killed).
# Returns 1 if one hung.
wait_pair() {
    local lim=$1 t0=$2 who pid left hung=0
    for who in SERVER CLIENT; do
        pid=${!who}
        left=$((lim - ($(now_ms) - t0) / 1000))
        [ "$left" -lt 1 ] && left=1
        if wait_pid "$pid" "$left"; then
            printf -v "${who}_RC" %s "$WAIT_RC"
            printf -v "${who}_MS" %s "$(($(now_ms) - t0))"
        else
            printf -v "${who}_RC" %s hang
            printf -v "${who}_MS" %s -1
            echo "$who still running $lim s after the fault: killed" >&2
            kill -9 "$pid" 2>/dev/null
            hung=1
        fi
    done
    return $hung
}

# wait_log FILE REGEX SECONDS: until a line of FILE matches REGEX
wait_log() {
    local t=$(($3 * 20))
    while [ $t -gt 0 ]; do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.05; t=$((t - 1))
    done
    return 1
}

# log_field FILE REGEX KEY: KEY=VALUE of the first line of FILE matching REGEX
log_field() {
    grep -m1 -E "$2" "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$3=//p" | head -1
}

# need_peer: the peer program must have been given (third argument)
# io_bytes HOST NIC: the bytes HOST's NIC has sent and received
io_bytes() {
    "$TESTBED" exec "$1" sh -c "echo \$((\$(cat /sys/class/net/$2/statistics/tx_bytes) + \$(cat /sys/class/net/$2/statistics/rx_bytes)))"
}

# wait_carry HOST NIC START UP: waits until HOST's NIC has moved CARRY_BYTES since
# io_bytes read START, UP (now_ms) being when it came up; WAITED: the ms it took. Fails
# when CARRY_MS pass first, or the client (CLIENT) ends before, with the logs of ALL.
wait_carry() {
    local host=$1 nic=$2 start=$3 up=$4
    while :; do
        WAITED=$(($(now_ms) - up))
        [ $(($(io_bytes "$host" "$nic") - start)) -ge "$CARRY_BYTES" ] && return 0
        kill -0 "$CLIENT" 2>/dev/null ||
            { show_peer_logs $ALL; fail "the run ended $WAITED ms after $nic came back, before $nic carried data"; }
        [ "$WAITED" -lt "$CARRY_MS" ] || {
            show_peer_logs $ALL
            fail "$host's $nic carried under $CARRY_BYTES bytes in $CARRY_MS ms after it came up (the connections it lacked never joined?)"
        }
        sleep 0.02
    done
}

# pair_verified UP WHAT: waits for the server and the client (wait_pair, from UP), then
# requires both to exit 0 and no round to fail; their logs in $WORK/case.txt. WHAT names
# the case in the failures.
pair_verified() {
    wait_pair 100 "$1" || { show_peer_logs $ALL; fail "hang with $2"; }
    show_peer_logs $ALL >"$WORK/case.txt"
    [ "$SERVER_RC" = 0 ] && [ "$CLIENT_RC" = 0 ] || {
        cat "$WORK/case.txt"
        fail "verified rounds with $2 failed (server rc $SERVER_RC, client rc $CLIENT_RC)"
    }
    ! grep -q '^FAULT' "$WORK/case.txt" || { cat "$WORK/case.txt"; fail "a round failed"; }
}

need_peer() { [ -n "$PEER" ] && [ -x "$PEER" ] || fail "no netns_peer program (third argument)"; }

# start_peer NAME HOST ARGS...: $PEER ARGS in HOST, output in $WORK/NAME.log;
# sets $PEER_PID
start_peer() {
    local n=$1 h=$2
    shift 2
    "$TESTBED" exec "$h" "$PEER" "$@" >"$WORK/$n.log" 2>&1 &
    PEER_PID=$!; PIDS="$PIDS $PEER_PID"
}
show_peer_logs() {
    local n
    for n in "$@"; do echo "--- $n:"; cat "$WORK/$n.log" 2>/dev/null; done
}
