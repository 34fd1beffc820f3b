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

if [ -z "${TPXTB_PREFIX:-}" ]; then
    exec "$TESTBED" run bash "$0" "$@"
fi

export TPX_SOCKET_IFNAME=eth1,eth2,eth3,eth4 # data NICs only; bootstrap goes over eth0
export TPX_CHANNELS=4
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
