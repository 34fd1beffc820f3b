#!/usr/bin/env python3
"""nixl_bench.py - GB/s of one-sided READs of N blocks (default 1000 x 16 KiB,
128 KiB, 2 MiB) between two agents, three ways in one run:

  NIXL+TPX   NIXL agents with backend "TPX" (libplugin_TPX.so of the tpx wheel)
  tpx        the tpx C API through the Python package (tpx.Engine)
  NIXL+UCX   NIXL agents with its UCX backend (UCX_TLS=tcp by default: TCP vs TCP)

Each runs in its own process (NIXL_PLUGIN_DIR replaces NIXL's plugin folder,
so TPX and UCX cannot share one), both agents in that process, over loopback
unless TPX_SOCKET_IFNAME / TPX_BIND_ADDR say otherwise. One request of N
blocks is prepared once and posted --iters times after a verified warm-up;
GB/s = bytes moved / wall time of those posts (1 GB = 1e9 B).

  pip install nixl-cu12 numpy ./      # or the tpx wheel
  python3 bench/nixl_bench.py [--blocks 1000] [--sizes 16K,128K,2M] [--iters 20]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def parse_size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1].upper()] if s[-1].upper() in m else int(s)


def human(n):
    for unit, v in (("M", 1 << 20), ("K", 1 << 10)):
        if n % v == 0:
            return "%d %siB" % (n // v, unit)
    return "%d B" % n


def nixl_api():
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except ImportError:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    return nixl_agent, nixl_agent_config


FIRST = []  # ms of each size's first (warm-up) READ, the connection made before it


def run_nixl(backend, nblocks, size, iters):
    nixl_agent, nixl_agent_config = nixl_api()
    cfg = nixl_agent_config(backends=[backend])
    a, b = nixl_agent("bench-initiator", cfg), nixl_agent("bench-target", cfg)
    la = np.zeros(nblocks * size, np.uint8)
    lb = np.random.default_rng(1).integers(0, 256, nblocks * size, dtype=np.uint8)
    a.register_memory([(la.ctypes.data, la.nbytes, 0, "")], "DRAM")
    b.register_memory([(lb.ctypes.data, lb.nbytes, 0, "")], "DRAM")
    peer = a.add_remote_agent(b.get_agent_metadata())

    def blocks(arr):
        d = np.zeros((nblocks, 3), np.uint64)
        d[:, 0] = arr.ctypes.data + np.arange(nblocks, dtype=np.uint64) * size
        d[:, 1] = size
        return d

    h = a.initialize_xfer("READ", a.get_xfer_descs(blocks(la), "DRAM"),
                          a.get_xfer_descs(blocks(lb), "DRAM"), peer)

    def once():
        st = a.transfer(h)
        while st == "PROC":
            st = a.check_xfer_state(h)
        if st != "DONE":
            raise RuntimeError("%s transfer: %s" % (backend, st))

    time.sleep(0.05)  # what an application does between loading metadata and its first READ
    t = time.perf_counter()
    once()
    FIRST.append((time.perf_counter() - t) * 1e3)
    if not np.array_equal(la, lb):
        raise RuntimeError("%s: data mismatch" % backend)
    t0 = time.perf_counter()
    for _ in range(iters):
        once()
    dt = time.perf_counter() - t0
    a.release_xfer_handle(h)
    return nblocks * size * iters / dt / 1e9


def run_tpx(nblocks, size, iters):
    import tpx
    with tpx.Engine(name="bench-initiator") as a, tpx.Engine(name="bench-target") as b:
        la = np.zeros(nblocks * size, np.uint8)
        lb = np.random.default_rng(1).integers(0, 256, nblocks * size, dtype=np.uint8)
        ra, rb = a.register(la), b.register(lb)
        remote = a.load_remote(b.metadata())
        remote.connect()
        offs = np.arange(nblocks, dtype=np.uint64) * size
        prep = remote.prepare(tpx.READ, ra, offs, rb.export(), offs, size)
        t = time.perf_counter()
        prep.post().wait()
        FIRST.append((time.perf_counter() - t) * 1e3)
        if not np.array_equal(la, lb):
            raise RuntimeError("tpx: data mismatch")
        t0 = time.perf_counter()
        for _ in range(iters):
            x = prep.post()
            x.wait()
            x.release()
        dt = time.perf_counter() - t0
        return nblocks * size * iters / dt / 1e9


def worker(args):
    out = {}
    for s in args.sizes.split(","):
        size = parse_size(s)
        try:
            if args.worker == "tpx":
                gbs = run_tpx(args.blocks, size, args.iters)
            else:
                gbs = run_nixl(args.worker, args.blocks, size, args.iters)
            out[str(size)] = round(gbs, 3)
        except Exception as e:  # reported in the table, the others still run
            out[str(size)] = "error: %s" % e
    out["first_ms"] = [round(v, 2) for v in FIRST]
    print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--sizes", default="16K,128K,2M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ucx-tls", default="tcp", help="UCX_TLS for NIXL+UCX ('' : UCX's choice)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
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
               str(args.blocks), "--sizes", args.sizes, "--iters", str(args.iters)]
        p = subprocess.run(cmd, env=e, capture_output=True, text=True)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode != 0 or not line:
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["?"]
            results[label] = {str(parse_size(s)): "failed: " + tail[0]
                              for s in args.sizes.split(",")}
        else:
            results[label] = json.loads(line[0][7:])
    labels = [r[0] for r in runs]
    print("# READ of %d blocks per request, GB/s (1e9 B/s), %d posts after a verified warm-up%s"
          % (args.blocks, args.iters,
             "; UCX_TLS=%s" % args.ucx_tls if args.ucx_tls else ""))
    print("%-10s" % "block" + "".join("%14s" % l for l in labels))
    for s in args.sizes.split(","):
        size = str(parse_size(s))
        cells = []
        for l in labels:
            v = results[l].get(size)
            cells.append("%14.2f" % v if isinstance(v, (int, float)) else "%14s" % "error")
        print("%-10s" % human(int(size)) + "".join(cells))
    for l in labels:
        first = results[l].pop("first_ms", None)
        if first:
            print("# %s: first READ after loading the peer's metadata (+50 ms): %s ms"
                  % (l, ", ".join("%.1f" % v for v in first)))
        for size, v in results[l].items():
            if not isinstance(v, (int, float)):
                print("# %s %s: %s" % (l, human(int(size)), v))


if __name__ == "__main__":
    main()
