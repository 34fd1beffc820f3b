#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/nixl_vram.sh WHEEL_DIR - NIXL with the TPX backend on GPU memory, as vLLM
# uses it, on a GPU host, in one run:
#   1. python -m tpx.nixl_check --mem vram: the user's check (READ and WRITE, verified)
#   2. tpx-perf one-sided READ/WRITE of GPU memory (the C API's own rows)
#   3. bench/nixl_bench.py --mem vram: NIXL+TPX, tpx (Python), NIXL+UCX over TCP
#      (UCX_TLS=tcp,cuda_copy), READ and WRITE of 1000 x 16 KiB, 1000 x 128 KiB,
#      100 x 2 MiB, each verified
#   4. tests/python/vllm_seq.py --mem vram: vLLM's NixlConnector call sequence,
#      decode TP = prefill TP and 2 x prefill TP, with a prefill restart
# and a summary with the ratios the targets name. WHEEL_DIR holds the NIXL wheels
# (bench/gpu/repack_nixl.sh makes them small enough to carry); nothing is fetched.
# Environment: GPU=0  ITERS=20  OUT=DIR (logs and JSON kept there)
set -euo pipefail
cd "$(dirname "$0")/../.."
GPU=${GPU:-0}
ITERS=${ITERS:-20}

. bench/gpu/lib.sh
gpu_setup "$1"
python3 -c 'import torch, nixl._api, tpx; print("torch", torch.__version__, "tpx", tpx.version())'

echo "== 1. python -m tpx.nixl_check --mem vram"
python3 -m tpx.nixl_check --mem vram --gpu "$GPU" --blocks 1000 2>&1 | tee "$OUT/check.log"

echo "== 2. tpx-perf: one-sided GPU memory"
perf=build/release/bin/tpx-perf
for op in read write; do
    "$perf" --op $op --mem cuda --gpu "$GPU" --block 16K,128K --blocks 1000 --iters "$ITERS" \
        --verify --json "$OUT/perf_${op}_small.json" | tail -3
    "$perf" --op $op --mem cuda --gpu "$GPU" --block 2M --blocks 100 --iters "$ITERS" \
        --verify --json "$OUT/perf_${op}_2m.json" | tail -1
done

echo "== 3. NIXL+TPX, tpx, NIXL+UCX on VRAM"
python3 bench/nixl_bench.py --mem vram --gpu "$GPU" --ops READ,WRITE --iters "$ITERS" \
    --json "$OUT/nixl.json" 2>&1 | tee "$OUT/nixl.log"

if grep -q '"NIXL+UCX"' "$OUT/nixl.json" && python3 - "$OUT/nixl.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]["NIXL+UCX"]
sys.exit(0 if any(isinstance(v, str) for v in r.values()) else 1)
PY
then
    echo "== 3b. why NIXL+UCX failed: its libraries, then an agent with UCX_LOG_LEVEL=info"
    libs=$(python3 -c 'import nixl_cu12, os; print(os.path.dirname(nixl_cu12.__file__) + ".libs")')
    for f in "$libs"/ucx/libuct_cuda.so* "$libs"/nixl/libplugin_UCX.so; do
        echo "-- ldd $(basename "$f"):"; ldd "$f" | grep -E 'not found|cuda|nvidia' || true
    done
    UCX_TLS=tcp,cuda_copy UCX_LOG_LEVEL=info timeout 60 python3 - "$GPU" <<'PY' 2>&1 | tail -25
import sys, torch
from nixl._api import nixl_agent, nixl_agent_config
t = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda:%s" % sys.argv[1])
a = nixl_agent("ucx-probe", nixl_agent_config(backends=["UCX"]))
a.register_memory([(t.data_ptr(), t.numel(), int(sys.argv[1]), "")], "VRAM")
print("UCX agent registered VRAM")
PY
fi

echo "== 4. vLLM's sequence on VRAM"
for r in 1 2; do
    python3 tests/python/vllm_seq.py --mem vram --gpu "$GPU" --layers 32 --blocks 256 \
        --block-kib 32 --tp-ratio $r --requests 40 --json "$OUT/vllm_tp$r.json" 2>&1 |
        grep -v 'NIXL INFO' | tee "$OUT/vllm_tp$r.log"
done

echo "== summary (GB/s = 1e9 B/s; one host, loopback)"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
perf = {}
for op in ("read", "write"):
    for f in ("small", "2m"):
        for r in json.load(open(os.path.join(out, "perf_%s_%s.json" % (op, f))))["rows"]:
            perf[(op.upper(), r["block"])] = (r["gbps"], r["verified"])
nx = json.load(open(os.path.join(out, "nixl.json")))["results"]
print("%-14s %10s %10s %10s %10s %12s %12s" % ("row", "tpx-perf", "NIXL+TPX", "tpx(py)",
                                                 "NIXL+UCX", "TPX/tpx-perf", "TPX/UCX"))
for op in ("READ", "WRITE"):
    for b in (16384, 131072, 2097152):
        k = "%s %d" % (op, b)
        p = perf.get((op, b), (None, False))[0]
        t, y, u = (nx[l].get(k) for l in ("NIXL+TPX", "tpx", "NIXL+UCX"))
        num = lambda v: isinstance(v, (int, float))
        f = lambda v: "%10.2f" % v if num(v) else "%10s" % "error"
        r1 = "%12.2f" % (t / p) if num(t) and num(p) and p else "%12s" % "-"
        r2 = "%12.1f" % (t / u) if num(t) and num(u) and u else "%12s" % "-"
        print("%-14s %s %s %s %s %s %s" % ("%s %dK" % (op, b // 1024), f(p), f(t), f(y), f(u),
                                           r1, r2))
for r in (1, 2):
    p = os.path.join(out, "vllm_tp%d.json" % r)
    if os.path.exists(p):
        v = json.load(open(p))
        print("vLLM sequence, decode TP = %d x prefill: %d requests verified, first after "
              "restart %.3f s" % (r, v["requests"], v["first_after_restart_s"]))
    else:
        print("vLLM sequence, decode TP = %d x prefill: FAILED (see vllm_tp%d.log)" % (r, r))
PY
