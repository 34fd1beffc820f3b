#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench_smoke.sh BUILD_DIR SOURCE_DIR
#     bench/peers, bench/kv_bench.py and bench/strided_bench.py, tiny (10 blocks, 2 posts, a
#     160-token prompt; a 2-layer slice of 8 blocks), with
#     the peers the test venv of python.setup has (Mooncake only when it imports), --strict:
#     every row runs and is verified. Numbers are not judged. Exit 77 without the venv.
set -euo pipefail
bdir=$1 src=$2
py=$bdir/pyenv/bin/python
if ! "$py" -c 'import tpx, nixl._api' 2>/dev/null; then
    echo "SKIPPED: no test venv with tpx and NIXL (python.setup was skipped: PyPI unreachable?)"
    exit 77
fi
peers=tpx-C,tpx-py,NIXL+TPX,NIXL+UCX
if "$py" -c 'import mooncake.engine' 2>/dev/null; then
    peers=$peers,Mooncake
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PYTHON=$py "$src/bench/peers" --strict --peers "$peers" --rounds 2 --iters 2 --blocks 10 \
    --large-blocks 2 --sizes 4K,2M --lat-iters 20 --tpx-perf "$bdir/bin/tpx-perf" \
    --json "$out/peers.json" 2>"$out/peers.log" || { cat "$out/peers.log"; exit 1; }
"$py" "$src/bench/kv_bench.py" --strict --prompt 160 --rounds 2 --iters 2 --raw-iters 2 \
    --tpx-netbench "$bdir/bin/tpx-netbench" --json "$out/kv.json" 2>"$out/kv.log" ||
    { cat "$out/kv.log"; exit 1; }
"$py" "$src/bench/strided_bench.py" --strict --layers 2 --blocks 8 --iters 2 \
    --json "$out/strided.json" 2>"$out/strided.log" || { cat "$out/strided.log"; exit 1; }
# every cell is a verified number: the JSON says so row by row
"$py" - "$out/peers.json" "$out/kv.json" "$out/strided.json" <<'PY'
import json, sys
p, k, s = (json.load(open(f)) for f in sys.argv[1:])
assert sorted(s["rows"]) == list("abcde") and all(o.get("verified") is True
                                                 for o in s["rows"].values()), s["rows"]
for name, by_peer in p["rounds"].items():
    for peer, outs in by_peer.items():
        assert outs and all(o.get("verified") is True for o in outs), (name, peer, outs)
for name, by_peer in k["rounds"].items():
    for peer, outs in by_peer.items():
        assert outs and all(o.get("reqs") for o in outs), (name, peer, outs)
print("peers: %d rows x %d peers, kv: %d rows, strided: 5 rows, all verified"
      % (len(p["rounds"]), len(p["peers"]), len(k["rows"])))
PY
