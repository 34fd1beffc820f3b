#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tpx-perf --all-gpus's lane machinery without GPUs (--mem host --lanes N:
# N engines of host memory in one process per side, one thread each):
#   1. loopback, 2 lanes, verified: the JSON's sum row equals the sum of its
#      lanes and every engine reported its NICs;
#   2. server and client, 3 lanes over loopback TCP (control ports P..P+2,
#      engine ports Q..Q+2): both exit 0 with 3 lanes and a sum row;
#   3. a client without --all-gpus against an --all-gpus server: exit 1,
#      saying why;
#   4. tpx-summary over those JSON files: one row per lane and a total equal
#      to the sum of the lanes' GB/s.
#   usage: perf_lanes.sh TPX-PERF TPX-SUMMARY
set -eu
perf=$1 summary=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpx-lanes-test.XXXXXX")
spid=""
# shellcheck disable=SC2317 # run by the trap
cleanup() {
    [ -z "$spid" ] || { kill -TERM "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
export TPX_SOCKET_IFNAME=lo
fail=0

# 1.
timeout -k 5 60 "$perf" --all-gpus --mem host --lanes 2 --sizes 64K,1M --iters 3 --verify \
    --json "$dir/loop.json"
python3 - "$dir/loop.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] and d["config"]["all_gpus"] and d["config"]["lanes"] == 2, d["config"]
assert len(d["engines"]) == 4 and all(e["nics"] and e["nics"][0]["name"] == "lo" for e in d["engines"])
assert len(d["results"]) == 2
for r in d["results"]:
    g = [x["GBps"] for x in r["gpus"]]
    assert len(g) == 2 and abs(sum(g) - r["GBps"]) < 1e-6, (g, r["GBps"])
    assert r["verified"] and all(x["verified"] for x in r["gpus"])
    assert [(x["client_gpu"], x["server_gpu"]) for x in r["gpus"]] == [(0, 1), (1, 0)]
print("ok: loopback lanes, sum row = sum of lanes")
PY

# 2. ports: 8 free ones in a row (control P..P+2, engines P+4..P+6)
cport=$(python3 -c '
import random, socket, sys
for _ in range(200):
    b = random.randrange(21000, 32000)
    ok = True
    for p in range(b, b + 8):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            ok = False
        s.close()
    if ok:
        print(b)
        sys.exit(0)
sys.exit(1)') || { echo "no free ports"; exit 1; }
eport=$((cport + 4))
timeout -k 5 60 "$perf" server --all-gpus --mem host --lanes 3 --port "$cport" \
    --engine-port "$eport" --size 1M --iters 3 --json "$dir/srv.json" >"$dir/srv.out" 2>&1 &
spid=$!
crc=0
timeout -k 5 60 "$perf" client 127.0.0.1 --all-gpus --mem host --lanes 3 --port "$cport" \
    --json "$dir/cli.json" >"$dir/cli.out" 2>&1 || crc=$?
src=0
wait "$spid" || src=$?
spid=""
cat "$dir/srv.out" "$dir/cli.out"
[ $src -eq 0 ] && [ $crc -eq 0 ] || { echo "FAIL: server $src, client $crc"; fail=1; }
[ "$(grep -c '^ *sum ' "$dir/cli.out")" -eq 1 ] && [ "$(grep -cE '^ +[0-2] +1048576 ' "$dir/cli.out")" -eq 3 ] ||
    { echo "FAIL: client table: 3 lanes and a sum row expected"; fail=1; }

# 3.
timeout -k 5 60 "$perf" server --all-gpus --mem host --lanes 2 --port "$cport" --engine-port "$eport" \
    --size 1M --iters 3 >"$dir/srv2.out" 2>&1 &
spid=$!
crc=0
timeout -k 5 60 "$perf" client 127.0.0.1 --port "$cport" >"$dir/cli2.out" 2>&1 || crc=$?
kill -TERM "$spid" 2>/dev/null || true
wait "$spid" 2>/dev/null || true
spid=""
[ $crc -eq 1 ] && grep -q "the server runs --all-gpus (2 GPUs): give --all-gpus here too" "$dir/cli2.out" ||
    { echo "FAIL: mismatched client: exit $crc"; cat "$dir/cli2.out"; fail=1; }

# 4.
mkdir "$dir/sum"
cp "$dir/loop.json" "$dir/sum/loop.json"
[ ! -s "$dir/cli.json" ] || cp "$dir/cli.json" "$dir/sum/client.json"
"$summary" --json "$dir/sum.json" "$dir/sum" | tee "$dir/sum.out" || { echo "FAIL: tpx-summary"; fail=1; }
python3 - "$dir/sum" "$dir/sum.json" <<'PY' || fail=1
import glob, json, os, sys
lanes = []
for j in glob.glob(os.path.join(sys.argv[1], "*.json")):
    d = json.load(open(j))
    lanes += [g["GBps"] for g in max(d["results"], key=lambda r: r["size"])["gpus"]]
s = json.load(open(sys.argv[2]))
assert len(s["rows"]) == len(lanes) == 5, (len(s["rows"]), len(lanes))
assert abs(s["total"]["GBps"] - sum(lanes)) < 1e-6, (s["total"], sum(lanes))
assert abs(sum(v["GBps"] for v in s["gpus"].values()) - sum(lanes)) < 1e-6
assert abs(s["nics"]["lo"]["GBps"] - sum(lanes)) < 1e-6
print("ok: summary total %.3f = sum of %d lanes" % (s["total"]["GBps"], len(lanes)))
PY
exit $fail
