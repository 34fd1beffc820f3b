#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools.perf.op: the one-sided mode of tpx-perf (--op read|write): loopback
# READ and WRITE, verified, with JSON (checked by python3 -m json.tool when
# python3 exists), --latency, then a server (the owner) and a client on
# 127.0.0.1 (with the raw TCP row served by the server).
set -u
PERF=$1
WORK=$(mktemp -d)
trap 'kill $SRV 2>/dev/null; rm -rf "$WORK"' EXIT
SRV=
fail() { echo "FAIL: $*"; exit 1; }

for op in read write; do
    "$PERF" --op $op --block 4K,64K --blocks 100 --iters 5 --warmup 1 --notif \
        --json "$WORK/$op.json" > "$WORK/$op.out" 2>&1 || { cat "$WORK/$op.out"; fail "loopback $op"; }
    cat "$WORK/$op.out"
    grep -q ' yes$' "$WORK/$op.out" || fail "loopback $op: not verified"
    if command -v python3 > /dev/null; then
        python3 -m json.tool "$WORK/$op.json" > /dev/null || fail "$op: invalid JSON"
        python3 - "$WORK/$op.json" <<'PY' || fail "$op: JSON content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["op"] in ("read", "write") and len(d["rows"]) == 2
for r in d["rows"]:
    assert r["verified"] and r["gbps"] > 0 and r["blocks"] == 100
PY
    fi
done
"$PERF" --op read --prep-each --block 16K --blocks 50 --iters 3 --warmup 0 > "$WORK/pe.out" 2>&1 \
    || { cat "$WORK/pe.out"; fail "--prep-each"; }

# TPX_TRACE_FILE: a packed READ's timeline names the request and the answer
# (control types 3 and 4), and -- staged, TPX_RMA_IOV=0 -- the gathers and
# scatters of its packed chunks; by default they are vectored messages (none)
TPX_RMA_IOV=0 TPX_TRACE_FILE="$WORK/tl.txt" "$PERF" --op read --block 4K --blocks 300 --iters 2 \
    --warmup 0 --no-raw > "$WORK/tl.out" 2>&1 || { cat "$WORK/tl.out"; fail "TPX_TRACE_FILE run"; }
for ev in 'ctrl-in +3$' 'ctrl-in +4$' ' gathered ' ' scattered '; do
    grep -Eq "$ev" "$WORK/tl.txt" || fail "trace: no '$ev' record"
done
TPX_TRACE_FILE="$WORK/tv.txt" "$PERF" --op read --block 4K --blocks 300 --iters 2 --warmup 0 \
    --no-raw > "$WORK/tv.out" 2>&1 || { cat "$WORK/tv.out"; fail "TPX_TRACE_FILE run (vectored)"; }
grep -Eq 'ctrl-in +4$' "$WORK/tv.txt" || fail "trace (vectored): no answer record"
! grep -Eq ' gathered | scattered ' "$WORK/tv.txt" || fail "trace (vectored): a staging copy"

# --latency: the raw TCP row, WRITE's notification latency, the idle engine's CPU
"$PERF" --op write --latency --block 4K --blocks 1 --iters 20 --warmup 2 > "$WORK/lat.out" 2>&1 \
    || { cat "$WORK/lat.out"; fail "--latency"; }
cat "$WORK/lat.out"
awk '$1 == "write" && $11 != "-" && $15 != "-" { ok = 1 } END { exit !ok }' "$WORK/lat.out" \
    || fail "--latency: no raw TCP or notification columns"
grep -q '^# idle: both engines used' "$WORK/lat.out" || fail "--latency: no idle CPU line"
"$PERF" --op read --latency --gap 120 --block 4K --blocks 1 --iters 3 --warmup 0 > "$WORK/gap.out" 2>&1 \
    || { cat "$WORK/gap.out"; fail "--gap"; }

# server and client: the control port and the engine's bootstrap port
# (TPX_PORT_BASE, the next one), both free (ports.sh)
. "$(dirname "$0")/ports.sh"
PORT=$(free_port)
[ -n "$PORT" ] || fail "no two free ports in a row"
for op in write read; do
    TPX_PORT_BASE=$((PORT + 1)) "$PERF" --op $op --port "$PORT" server > "$WORK/srv.out" 2>&1 &
    SRV=$!
    "$PERF" --op $op --port "$PORT" --verify --block 8K --blocks 64 --iters 4 --warmup 1 \
        client 127.0.0.1 > "$WORK/cli.out" 2>&1 || { cat "$WORK/cli.out" "$WORK/srv.out"; fail "client $op"; }
    wait $SRV || { cat "$WORK/srv.out"; fail "server $op"; }
    SRV=
    cat "$WORK/cli.out" "$WORK/srv.out"
    grep -q ' yes$' "$WORK/cli.out" || fail "client $op: not verified"
    awk '$1 == "'$op'" && $11 != "-" { ok = 1 } END { exit !ok }' "$WORK/cli.out" \
        || fail "client $op: no raw TCP row"
    grep -q 'served 5 request' "$WORK/srv.out" || fail "server $op: did not serve 5 requests"
done
# bad input gets a usage error (exit 2)
"$PERF" --op sideways > /dev/null 2>&1; [ $? = 2 ] || fail "--op sideways: exit status"
"$PERF" --op read --blocks 0 > /dev/null 2>&1; [ $? = 2 ] || fail "--blocks 0: exit status"
# --gpu A,B places the two loopback engines (as in the two-sided mode); host memory
# ignores it, a server or client has one engine and refuses a pair
"$PERF" --op read --gpu 0,0 --block 4K --blocks 10 --iters 2 --warmup 0 > "$WORK/g.out" 2>&1 \
    || { cat "$WORK/g.out"; fail "--gpu 0,0 in loopback"; }
"$PERF" --op read --gpu 0,1 server > "$WORK/g.out" 2>&1; [ $? = 2 ] || fail "--gpu A,B server: exit status"
grep -q 'tpx-perf: --gpu A,B' "$WORK/g.out" || fail "--gpu A,B server: message"
"$PERF" --op read --gpu 0,x > /dev/null 2>&1; [ $? = 2 ] || fail "--gpu 0,x: exit status"
echo PASS
