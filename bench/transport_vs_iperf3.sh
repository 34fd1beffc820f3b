#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# transport_vs_iperf3.sh - loopback throughput of tpx's built-in TCP transport
# next to iperf3, in the same run on the same machine.
#
# Usage: bench/transport_vs_iperf3.sh [BUILD_DIR]     (default: build/release)
#
# Runs iperf3 over 127.0.0.1 with 1, 2, 4 and 8 parallel streams (-t 5 each),
# then `tpx-netbench --loopback --size 256M --nsocks 1,2,4,8,16 --no-verify`,
# and prints single-stream (iperf3 -P 1 vs tpx nsocks 1) and best-of (best
# -P vs best nsocks) with the ratio tpx / iperf3, and the core count.
# GB/s = 1e9 bytes per second for both: iperf3's sum_received bits/s / 8e9.
# tpx runs without --verify because iperf3 checks nothing either.
#
# Environment:
#   PORT=5299        iperf3 server port (127.0.0.1 only)
#   SECONDS_PER=5    iperf3 -t
#   STREAMS="1 2 4 8"  iperf3 -P values
#   NSOCKS=1,2,4,8,16  tpx-netbench --nsocks
#   ITERS=20         tpx-netbench --iters (256 MiB each; warm-up is automatic)
#   NETBENCH_ARGS=   extra tpx-netbench arguments (e.g. --verify)
#   OUT=DIR          keep the raw JSON files there (default: a temporary folder)
#   STRICT=1         exit 1 when a ratio is below 1.0
# Installs nothing. Needs iperf3 and python3.
set -euo pipefail

BUILD=${1:-build/release}
PORT=${PORT:-5299}
SECONDS_PER=${SECONDS_PER:-5}
STREAMS=${STREAMS:-"1 2 4 8"}
NSOCKS=${NSOCKS:-1,2,4,8,16}
ITERS=${ITERS:-20}
NETBENCH_ARGS=${NETBENCH_ARGS:-}
STRICT=${STRICT:-0}

die() { echo "transport_vs_iperf3: $*" >&2; exit 1; }

BIN=$BUILD/bin/tpx-netbench
[ -x "$BIN" ] || die "$BIN not found: build it first (cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD --target tpx-netbench)"
command -v iperf3 >/dev/null 2>&1 || die "iperf3 not found: apt-get install iperf3"
command -v python3 >/dev/null 2>&1 || die "python3 not found: apt-get install python3"

if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    DIR=$OUT
else
    DIR=$(mktemp -d /tmp/tpx-vs-iperf3.XXXXXX)
fi

SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT INT TERM

# Wait until something listens on 127.0.0.1:$PORT (or the server died).
wait_listen() {
    for _ in $(seq 1 50); do
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        if command -v ss >/dev/null 2>&1; then
            ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q . && return 0
        else
            sleep 0.5 && return 0
        fi
        sleep 0.1
    done
    return 1
}

NPROC=$(nproc)
echo "# transport vs iperf3 over loopback, $NPROC cores, $(uname -r)"
echo "# iperf3 $(iperf3 --version 2>/dev/null | head -1 | awk '{print $2}'): -c 127.0.0.1 -t $SECONDS_PER -P {$STREAMS}"

for P in $STREAMS; do
    iperf3 -s -1 -B 127.0.0.1 -p "$PORT" >"$DIR/iperf3-server-P$P.log" 2>&1 &
    SERVER_PID=$!
    wait_listen || die "iperf3 server did not start on port $PORT (busy? set PORT=...): $(tail -2 "$DIR/iperf3-server-P$P.log")"
    iperf3 -c 127.0.0.1 -p "$PORT" -t "$SECONDS_PER" -P "$P" -J >"$DIR/iperf3-P$P.json" ||
        die "iperf3 -P $P failed: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("error","?"))' "$DIR/iperf3-P$P.json" 2>/dev/null)"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
done

echo "# $BIN --loopback --size 256M --iters $ITERS --nsocks $NSOCKS --no-verify $NETBENCH_ARGS"
# shellcheck disable=SC2086 # NETBENCH_ARGS is a word list on purpose
"$BIN" --loopback --size 256M --iters "$ITERS" --nsocks "$NSOCKS" --no-verify $NETBENCH_ARGS \
    --json "$DIR/tpx.json" || die "tpx-netbench failed (raw output: $DIR/tpx.json)"

python3 - "$DIR" "$NPROC" "$STREAMS" "$STRICT" <<'EOF'
import json, sys
d, nproc, streams, strict = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4] == "1"

ip = {}
for p in streams:
    j = json.load(open(f"{d}/iperf3-P{p}.json"))
    if "error" in j:
        sys.exit(f"iperf3 -P {p}: {j['error']}")
    ip[int(p)] = j["end"]["sum_received"]["bits_per_second"] / 8 / 1e9

t = json.load(open(f"{d}/tpx.json"))
if not t.get("ok"):
    sys.exit(f"tpx-netbench: {t.get('error')}")
tpx = {}
for r in t["results"]:
    tpx[r["nsocks"]] = max(tpx.get(r["nsocks"], 0.0), r["GBps"])

print("#")
print("# iperf3  " + "  ".join(f"P{p}={v:.2f}" for p, v in sorted(ip.items())))
print("# tpx     " + "  ".join(f"nsocks{n}={v:.2f}" for n, v in sorted(tpx.items())))
print("#")
rows = []
if 1 in ip and 1 in tpx:
    rows.append(("single stream", "P1", ip[1], "nsocks 1", tpx[1]))
bp = max(ip, key=ip.get)
bn = max(tpx, key=tpx.get)
rows.append(("best", f"P{bp}", ip[bp], f"nsocks {bn}", tpx[bn]))
print(f"{'':14} {'iperf3 GB/s':>18} {'tpx GB/s':>20} {'tpx/iperf3':>11}")
low = False
for name, ik, iv, tk, tv in rows:
    ratio = tv / iv if iv > 0 else float("inf")
    low |= ratio < 1.0
    print(f"{name:14} {iv:8.2f} ({ik:>7}) {tv:8.2f} ({tk:>9}) {ratio:10.2f}x")
print(f"nproc {nproc}; GB/s = 1e9 bytes/s; 256 MiB messages; raw JSON in {d}")
sys.exit(1 if strict and low else 0)
EOF
