#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/tpx-launch --hosts over a fake ssh (fake_ssh.sh first on PATH: it
# runs the "remote" command here, in a bare environment), so both nodes are
# on this host, split by ports on loopback: node0 the server side, node1 the
# client side of a 2-node x 4-GPU-process full mesh (16 tpx-perf processes a
# node, host memory, --gpus 0,1,2,3). A fake ethtool (fake_ethtool.sh) makes
# every node take devmem counter snapshots around its run. Checks:
#   - the launcher exits 0; ssh was only the fake one; the environment
#     (TPX_SOCKET_IFNAME, --env FAKE_ETHTOOL_DIR) was forwarded;
#   - LOGDIR has node0/ and node1/ with 16 JSON files each, counters.diff;
#   - the merged summary's totals (text and --json) equal the sums of the
#     per-process numbers read here from the tpx-perf JSON files: per node,
#     per GPU, per NIC, and the run total (each pair once: its client).
#   usage: launch_hosts.sh TPX-LAUNCH TPX-PERF TESTS-DIR
set -eu
launch=$1 perf=$2 tests=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpx-hosts-test.XXXXXX")
lpid=""
# shellcheck disable=SC2317 # run by the trap
cleanup() {
    [ -z "$lpid" ] || { kill -TERM "$lpid" 2>/dev/null || true; wait "$lpid" 2>/dev/null || true; }
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
mkdir "$dir/bin" "$dir/ethtool"
cp "$tests/fake_ssh.sh" "$dir/bin/ssh"
cp "$tests/fake_ethtool.sh" "$dir/bin/ethtool"
chmod +x "$dir/bin/ssh" "$dir/bin/ethtool"
for p in /sys/class/net/*; do
    n=${p##*/}
    [ "$n" = lo ] || printf 'rx_bytes: 1000\nrx_devmem_pkts: 5\n' >"$dir/ethtool/$n.stats"
done
export PATH="$dir/bin:$PATH" FAKE_SSH_LOG="$dir/ssh.log" FAKE_ETHTOOL_DIR="$dir/ethtool"
export TPX_SOCKET_IFNAME=lo

# A port base whose 512 ports are free on 127.0.0.1 right now.
base=""
n=0
while [ $n -lt 20 ]; do
    b=$((20000 + (($$ + n * 11) % 40) * 300))
    if python3 - "$b" <<'PY'
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
PY
    then base=$b; break; fi
    n=$((n + 1))
done
[ -n "$base" ] || { echo "no free port range found"; exit 1; }

timeout -k 5 100 "$launch" --hosts node-a,node-b --server-addr 127.0.0.1 --gpus 0,1,2,3 \
    --full-mesh --port-base "$base" --timeout 80 --perf "$perf" --env FAKE_ETHTOOL_DIR \
    --logdir "$dir/run" --remote-logdir "$dir/remote" -- --size 1M --iters 3 \
    >"$dir/launch.out" 2>&1 &
lpid=$!
rc=0
wait "$lpid" || rc=$?
lpid=""
cat "$dir/launch.out"
fail=0
[ "$rc" -eq 0 ] || { echo "FAIL: tpx-launch --hosts exited $rc"; fail=1; }
echo "--- ssh calls"; cat "$dir/ssh.log" | cut -c1-160
grep -q "^node-a .*TPX_SOCKET_IFNAME=lo.*--role server" "$dir/ssh.log" &&
    grep -q "^node-b .*FAKE_ETHTOOL_DIR=.*--role client --peer 127.0.0.1" "$dir/ssh.log" ||
    { echo "FAIL: ssh command lines (forwarded environment, roles)"; fail=1; }
[ ! -e "$dir/remote/node0" ] && [ ! -e "$dir/remote/node1" ] ||
    { echo "FAIL: the nodes' folders were not removed after the copy"; fail=1; }
for node in node0 node1; do
    n=$(find "$dir/run/$node" -name '*.json' | wc -l)
    [ "$n" -eq 16 ] || { echo "FAIL: $node: $n JSON files, expected 16"; fail=1; }
    [ -s "$dir/run/$node/counters.diff" ] && grep -q "rx_devmem_pkts +0" "$dir/run/$node/counters.diff" ||
        { echo "FAIL: $node: no devmem counters diff"; fail=1; }
done
"$(dirname "$launch")/tpx-summary" --json "$dir/summary.json" "$dir/run" >"$dir/summary.out" || {
    echo "FAIL: tpx-summary exited non-zero"; fail=1; }
python3 - "$dir/run" "$dir/summary.json" "$dir/summary.out" <<'PY' || fail=1
import glob, json, os, sys
run, summ, text = sys.argv[1:4]
s = json.load(open(summ))
bad = []
def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))
client_total = 0.0
for node in ("node0", "node1"):
    total, gpus, nics, nrows = 0.0, {}, {}, 0
    for j in glob.glob(os.path.join(run, node, "*.json")):
        d = json.load(open(j))
        meta = json.load(open(j[:-5] + ".meta"))
        row = max(d["results"], key=lambda r: r["size"])
        g = row["GBps"]
        total += g
        nrows += 1
        gpus[str(meta["gpu"])] = gpus.get(str(meta["gpu"]), 0.0) + g
        eng = [e for e in d["engines"] if e["side"] == d["mode"]][0]
        for n in eng["nics"]:
            nics[n["name"]] = nics.get(n["name"], 0.0) + g / len(eng["nics"])
        if d["mode"] == "client":
            client_total += g
    sn = s["nodes"][node]
    if nrows != 16 or sn["ok"] != 16 or sn["failed"] != 0:
        bad.append("%s: %d rows, summary ok %d failed %d" % (node, nrows, sn["ok"], sn["failed"]))
    if not close(sn["total_GBps"], total):
        bad.append("%s: summary total %r != sum of processes %r" % (node, sn["total_GBps"], total))
    for k, v in gpus.items():
        if not close(sn["gpus"][k]["GBps"], v):
            bad.append("%s gpu %s: %r != %r" % (node, k, sn["gpus"][k]["GBps"], v))
    if set(sn["gpus"]) != set(gpus) or len(gpus) != 4:
        bad.append("%s: GPUs %s vs %s" % (node, sorted(sn["gpus"]), sorted(gpus)))
    for k, v in nics.items():
        if not close(sn["nics"][k]["GBps"], v):
            bad.append("%s nic %s: %r != %r" % (node, k, sn["nics"][k]["GBps"], v))
if not close(s["total"]["GBps"], client_total) or s["total"]["failed"] != 0 or s["total"]["ok"] != 16:
    bad.append("run total %r (ok %d) != sum of the client processes %r" %
               (s["total"]["GBps"], s["total"]["ok"], client_total))
line = [l for l in open(text) if l.startswith("# total: ")][0]
if abs(float(line.split()[2]) - client_total) > 0.0015:
    bad.append("text total line %r != %r" % (line.strip(), client_total))
for b in bad:
    print("FAIL: " + b)
if not bad:
    print("ok: 2 nodes x 16 processes; per node, per GPU, per NIC and run totals = sums "
          "of the per-process numbers (run total %.3f GB/s)" % client_total)
sys.exit(1 if bad else 0)
PY
[ $fail -eq 0 ] || { for f in "$dir"/run/*/*.log; do echo "--- $f"; tail -n 5 "$f"; done; }
exit $fail
