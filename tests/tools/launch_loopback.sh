#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/tpx-launch on one host over loopback, host memory: a server side and
# a client side of NPROCS processes each (pairs i<->i, or with --full-mesh
# every index to every index), both launched in the background of this script.
# Both must exit 0; the client's summary must have one ok row per process and
# a total line equal to the sum of the rows with 0 failed.
#   usage: launch_loopback.sh TPX-LAUNCH TPX-PERF NPROCS [--full-mesh]
# Never hangs: every launcher runs under `timeout`, every tpx-perf under the
# launcher's --timeout, and an EXIT trap stops what is left and removes the
# temporary folder.
set -eu
launch=$1 perf=$2 nprocs=$3 mesh=${4:-}
rows=$nprocs
[ -z "$mesh" ] || rows=$((nprocs * nprocs))

dir=$(mktemp -d "${TMPDIR:-/tmp}/tpx-launch-test.XXXXXX")
spid="" cpid=""
# shellcheck disable=SC2317 # run by the trap
cleanup() {
    for p in $spid $cpid; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $spid $cpid; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# A port base from our pid (below the ephemeral range), whose 512 ports are
# all free on 127.0.0.1 right now; a few tries.
base=""
n=0
while [ $n -lt 20 ]; do
    b=$((20000 + (($$ + n * 7) % 40) * 300))
    if python3 - "$b" <<'EOF'
import socket, sys
b = int(sys.argv[1])
for p in range(b, b + 512):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
EOF
    then base=$b; break; fi
    n=$((n + 1))
done
[ -n "$base" ] || { echo "no free port range found"; exit 1; }
echo "port base $base, $nprocs process(es) a side ${mesh:-(pairs)}"

# shellcheck disable=SC2086 # $mesh: empty or --full-mesh, split on purpose
timeout -k 5 100 "$launch" --role server --nprocs "$nprocs" $mesh --port-base "$base" \
    --logdir "$dir/server" --timeout 80 --perf "$perf" -- --size 4M --iters 3 \
    >"$dir/server.out" 2>&1 &
spid=$!
# (in the background too, so that a signal to this script is handled at once)
# shellcheck disable=SC2086
timeout -k 5 100 "$launch" --role client --peer 127.0.0.1 --nprocs "$nprocs" $mesh \
    --port-base "$base" --logdir "$dir/client" --timeout 80 --perf "$perf" \
    >"$dir/client.out" 2>&1 &
cpid=$!
crc=0
wait "$cpid" || crc=$?
cpid=""
src=0
wait "$spid" || src=$?
spid=""

echo "--- server side (exit $src)"; cat "$dir/server.out"
echo "--- client side (exit $crc)"; cat "$dir/client.out"
fail=0
if [ "$src" -ne 0 ] || [ "$crc" -ne 0 ]; then
    echo "FAIL: a launcher exited non-zero"
    for f in "$dir"/*/*.log; do echo "--- $f"; tail -n 20 "$f"; done
    fail=1
fi
# one ok row per process, and total = sum of rows, 0 failed
awk -v rows="$rows" '
    /^client-[0-9-]+ / && $NF == "ok" { n++; sum += $(NF-1) }
    /^# total: / { total = $3; line = $0 }
    END {
        if (n != rows) { print "FAIL: " n " ok rows, expected " rows; exit 1 }
        if (line !~ (" over " rows " process\\(es\\), 0 failed$")) { print "FAIL: total line: " line; exit 1 }
        d = total - sum; if (d < 0) d = -d
        if (d > 0.002 * rows) { print "FAIL: total " total " != sum of rows " sum; exit 1 }
        print "ok: " n " rows, total " total " GB/s = sum " sum
    }' "$dir/client.out" || fail=1
exit $fail
