#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nixl_bench.py - GB/s of one-sided READs (and WRITEs) of N blocks (default 1000 x 16 KiB,
1000 x 128 KiB, 100 x 2 MiB) of host or GPU memory between two agents, three ways in one run:

  NIXL+TPX   NIXL agents with backend "TPX" (libplugin_TPX.so of the tpx wheel)
  tpx        the tpx C API through the Python package (tpx.Engine)
  NIXL+UCX   NIXL agents with its UCX backend (UCX_TLS=tcp by default: TCP vs TCP;
             tcp,cuda_copy for GPU memory)

Each runs in its own process (NIXL_PLUGIN_DIR replaces NIXL's plugin folder,
so TPX and UCX cannot share one), both agents in that process, over loopback
unless TPX_SOCKET_IFNAME / TPX_BIND_ADDR say otherwise. One request of N
blocks is prepared once and posted --iters times after a verified warm-up;
GB/s = bytes moved / wall time of those posts (1 GB = 1e9 B).

  pip install nixl numpy ./      # or the tpx wheel
  python3 bench/nixl_bench.py [--blocks 1000] [--sizes 16K,128K,2M] [--iters 20]
                              [--ops READ,WRITE] [--mem vram --gpu 0] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# bench/peers.py's memory (host or GPU, MEM says which) and size words
from peers import MEM, Buf, human, parse_size, ucx_tls_default  # noqa: E402


def nixl_api():
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except ImportError:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    return nixl_agent, nixl_agent_config


FIRST = []  # ms of each size's first (warm-up) transfer, the connection made before it


def nixl_mem():
    return ("VRAM", MEM["gpu"]) if MEM["kind"] == "vram" else ("DRAM", 0)


def run_nixl(backend, op, nblocks, size, iters):
    nixl_agent, nixl_agent_config = nixl_api()
    cfg = nixl_agent_config(backends=[backend])
    a, b = nixl_agent("bench-initiator", cfg), nixl_agent("bench-target", cfg)
    la, lb = Buf(nblocks * size, 0 if op == "READ" else 1), Buf(nblocks * size, 1 if op == "READ" else 0)
    kind, dev = nixl_mem()
    a.register_memory([(la.addr, la.n, dev, "")], kind)
    b.register_memory([(lb.addr, lb.n, dev, "")], kind)
    peer = a.add_remote_agent(b.get_agent_metadata())

    def blocks(buf):
        d = np.zeros((nblocks, 3), np.uint64)
        d[:, 0] = buf.addr + np.arange(nblocks, dtype=np.uint64) * size
        d[:, 1] = size
        d[:, 2] = dev
        return d

    h = a.initialize_xfer(op, a.get_xfer_descs(blocks(la), kind),
                          a.get_xfer_descs(blocks(lb), kind), peer)

    def once():
        st = a.transfer(h)
        while st == "PROC":
            st = a.check_xfer_state(h)
        if st != "DONE":
            raise RuntimeError("%s transfer: %s" % (backend, st))

    time.sleep(0.05)  # what an application does between loading metadata and its first transfer
    t = time.perf_counter()
    once()
    FIRST.append((time.perf_counter() - t) * 1e3)
    if not np.array_equal(la.host(), lb.host()):
        raise RuntimeError("%s: data mismatch" % backend)
    t0 = time.perf_counter()
    for _ in range(iters):
        once()
    dt = time.perf_counter() - t0
    a.release_xfer_handle(h)
    return nblocks * size * iters / dt / 1e9


def run_tpx(op, nblocks, size, iters):
    import tpx
    with tpx.Engine(name="bench-initiator") as a, tpx.Engine(name="bench-target") as b:
        la = Buf(nblocks * size, 0 if op == "READ" else 1)
        lb = Buf(nblocks * size, 1 if op == "READ" else 0)
        kind = tpx.MEM_CUDA if MEM["kind"] == "vram" else tpx.MEM_HOST
        ra, rb = a.register_ptr(la.addr, la.n, kind), b.register_ptr(lb.addr, lb.n, kind)
        remote = a.load_remote(b.metadata())
        remote.connect()
        offs = np.arange(nblocks, dtype=np.uint64) * size
        prep = remote.prepare(tpx.READ if op == "READ" else tpx.WRITE, ra, offs, rb.export(),
                              offs, size)
        t = time.perf_counter()
        prep.post().wait()
        FIRST.append((time.perf_counter() - t) * 1e3)
        if not np.array_equal(la.host(), lb.host()):
            raise RuntimeError("tpx: data mismatch")
        t0 = time.perf_counter()
        for _ in range(iters):
            x = prep.post()
            x.wait()
            x.release()
        dt = time.perf_counter() - t0
        return nblocks * size * iters / dt / 1e9


def blocks_for(args, size):
    """--blocks, or for blocks of 1 MiB and more --large-blocks (100 x 2 MiB by default)."""
    return args.large_blocks if size >= (1 << 20) else args.blocks


def worker(args):
    MEM.update(kind=args.mem, gpu=args.gpu)
    out = {}
    for op in args.ops.split(","):
        for s in args.sizes.split(","):
            size = parse_size(s)
            nb = blocks_for(args, size)
            try:
                if args.worker == "tpx":
                    gbs = run_tpx(op, nb, size, args.iters)
                else:
                    gbs = run_nixl(args.worker, op, nb, size, args.iters)
                out["%s %d" % (op, size)] = round(gbs, 3)
            except Exception as e:  # reported in the table, the others still run
                out["%s %d" % (op, size)] = "error: %s" % e
    out["first_ms"] = [round(v, 2) for v in FIRST]
    print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--sizes", default="16K,128K,2M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--large-blocks", type=int, default=100,
                    help="blocks per request for sizes of 1 MiB and more (default 100)")
    ap.add_argument("--ops", default="READ", help="READ, WRITE or READ,WRITE")
    ap.add_argument("--mem", choices=["dram", "vram"], default="dram",
                    help="vram: GPU memory (torch tensors on --gpu), registered with its devId")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--ucx-tls", default=None,
                    help="UCX_TLS for NIXL+UCX (default tcp, with --mem vram tcp,cuda_copy; "
                         "'' : UCX's choice)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ucx_tls is None:
        args.ucx_tls = ucx_tls_default(args.mem)
    if args.worker:
        return worker(args)

    import tpx
    env = dict(os.environ)
    env.setdefault("TPX_SOCKET_IFNAME", "lo")
    env.setdefault("TPX_BIND_ADDR", "127.0.0.1")
    env.setdefault("TPX_LOG_LEVEL", "error")
    env.setdefault("NIXL_LOG_LEVEL", "WARN")
    runs = [("NIXL+TPX", "TPX", dict(env, NIXL_PLUGIN_DIR=tpx.nixl_plugin_dir())),
            ("tpx", "tpx", env),
            ("NIXL+UCX", "UCX", {k: v for k, v in env.items() if k != "NIXL_PLUGIN_DIR"})]
    if args.ucx_tls:
        runs[2][2]["UCX_TLS"] = args.ucx_tls
    results = {}
    for label, w, e in runs:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", w, "--blocks",
               str(args.blocks), "--large-blocks", str(args.large_blocks), "--sizes", args.sizes,
               "--iters", str(args.iters), "--ops", args.ops, "--mem", args.mem,
               "--gpu", str(args.gpu)]
        p = subprocess.run(cmd, env=e, capture_output=True, text=True)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if line and p.returncode != 0:
            # Its rows were measured and verified; only its exit failed (NIXL+UCX 1.5.1
            # can crash in its teardown here).
            print("# %s: exited with status %d after reporting its rows" % (label, p.returncode))
        if not line:
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:] or ["?"]
            results[label] = {"%s %d" % (op, parse_size(s)): "failed: " + " | ".join(tail)
                              for op in args.ops.split(",") for s in args.sizes.split(",")}
        else:
            results[label] = json.loads(line[0][7:])
    labels = [r[0] for r in runs]
    print("# %s of %s memory, blocks per request: %d (%d for 1 MiB and more), GB/s (1e9 B/s), "
          "%d posts after a verified warm-up%s"
          % (args.ops, args.mem.upper(), args.blocks, args.large_blocks, args.iters,
             "; UCX_TLS=%s" % args.ucx_tls if args.ucx_tls else ""))
    print("%-16s" % "op block" + "".join("%14s" % l for l in labels) + "%14s" % "TPX/UCX")
    for op in args.ops.split(","):
        for s in args.sizes.split(","):
            key = "%s %d" % (op, parse_size(s))
            cells = []
            for l in labels:
                v = results[l].get(key)
                cells.append("%14.2f" % v if isinstance(v, (int, float)) else "%14s" % "error")
            t, u = results["NIXL+TPX"].get(key), results["NIXL+UCX"].get(key)
            ratio = ("%14.1f" % (t / u) if isinstance(t, (int, float)) and
                     isinstance(u, (int, float)) and u > 0 else "%14s" % "-")
            print("%-16s" % ("%s %s" % (op, human(parse_size(s)))) + "".join(cells) + ratio)
    for l in labels:
        first = results[l].pop("first_ms", None)
        if first:
            print("# %s: first transfer after loading the peer's metadata (+50 ms): %s ms"
                  % (l, ", ".join("%.1f" % v for v in first)))
        for key, v in results[l].items():
            if not isinstance(v, (int, float)):
                print("# %s %s: %s" % (l, key, v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
