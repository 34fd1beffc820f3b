#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kv_bench.py - one KV-cache transfer shaped like a real request, through tpx and NIXL+TPX.

A disaggregated-serving request: the decode side READs a prompt's KV blocks out of the
prefill side's cache and, with the same post, notifies the prefill side (the owner), which
may then free them. The shape comes from the model, as vLLM's NixlConnector makes it:
  caches     per layer one K and one V cache (MLA: one latent cache), each [pool blocks,
             block tokens, KV heads of this rank, head dim] of dtype
  KV heads   of one rank: max(1, kv_heads / TP) (MLA: no heads, nothing split by TP)
  request    ceil(prompt / block tokens) blocks at random block ids of the pool on each side;
             one descriptor per block per layer per K/V (block bytes = block tokens x heads
             x head dim x dtype size)
Per request: bytes and descriptors; prepare time (tpx: Remote.prepare of the request's
blocks; NIXL: make_prepped_xfer of the request's block indices, the pool's descriptor
lists prepared once beforehand, as vLLM does at handshake); transfer time (post to done on
the requester); notification time (post to the owner seeing the request's notification);
GB/s = bytes / transfer time, and its fraction of the raw TCP rate of the same run
(tpx-netbench --raw: plain TCP, as many connections as the transport opens, 256 MiB).
The destination is zeroed before every request and its blocks compared after.

Presets (--preset; a flag given with it overrides one of its values):
  llama3-8b        32 layers, 8 KV heads, head dim 128, bf16, TP 1, 16-token blocks, 8k prompt
  llama3-70b-tp8   80 layers, 8 KV heads, head dim 128, bf16, TP 8 (one KV head a rank),
                   16-token blocks, 32k prompt
  dsv3-mla         61 layers, one latent of 512 + 64 rope dims a token, bf16, no split by TP,
                   64-token blocks, 32k prompt

  python3 bench/kv_bench.py [--preset llama3-8b,llama3-70b-tp8,dsv3-mla] [--prompt TOKENS]
        [--layers N --kv-heads N --head-dim N --dtype bf16 --block-tokens N --tp N | --mla DIMS]
        [--iters 3] [--rounds 3] [--peers tpx,NIXL+TPX[,NIXL+UCX]] [--mem dram|vram --gpu N]
        [--json FILE]
Needs the tpx package and NIXL (pip install nixl nixl-cu12 numpy, the tpx wheel), as
bench/peers: build/release/pyenv/bin/python bench/kv_bench.py (ctest -R python.setup makes it).
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers as P  # noqa: E402  (Buf, Proc: the worker processes of bench/peers)

DTYPES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
PRESETS = {
    "llama3-8b": dict(layers=32, kv_heads=8, head_dim=128, dtype="bf16", tp=1,
                      block_tokens=16, prompt=8192, mla=0),
    "llama3-70b-tp8": dict(layers=80, kv_heads=8, head_dim=128, dtype="bf16", tp=8,
                           block_tokens=16, prompt=32768, mla=0),
    "dsv3-mla": dict(layers=61, kv_heads=0, head_dim=0, dtype="bf16", tp=1,
                     block_tokens=64, prompt=32768, mla=576),
}
KV_PEERS = ["tpx", "NIXL+TPX", "NIXL+UCX"]


def shape(name, spec):
    """The request of one rank: caches, blocks, block bytes, descriptors, bytes."""
    nblocks = math.ceil(spec["prompt"] / spec["block_tokens"])
    esize = DTYPES[spec["dtype"]]
    if spec["mla"]:
        caches, per_token = spec["layers"], spec["mla"] * esize
    else:
        heads = max(1, spec["kv_heads"] // spec["tp"])
        caches, per_token = 2 * spec["layers"], heads * spec["head_dim"] * esize
    bb = spec["block_tokens"] * per_token
    return dict(name=name, spec=spec, caches=caches, blocks=nblocks, block_bytes=bb,
                descs=caches * nblocks, bytes=caches * nblocks * bb)


# ---------------------------------------------------------------- worker side

class Cache:
    """Both sides' caches of one request (pool = the request's blocks) and its block ids:
    a random permutation on each side, as a request's blocks lie in a busy cache."""

    def __init__(self, sh):
        import numpy as np
        self.sh = sh
        n, bb, c = sh["blocks"], sh["block_bytes"], sh["caches"]
        rng = np.random.default_rng(5)
        self.lid, self.rid = rng.permutation(n), rng.permutation(n)
        base = (np.arange(c, dtype=np.uint64) * n)[:, None]
        self.lidx = (base + self.lid[None, :]).ravel()  # pool index: cache-major, as vLLM
        self.ridx = (base + self.rid[None, :]).ravel()
        self.lo, self.ro = self.lidx * np.uint64(bb), self.ridx * np.uint64(bb)
        self.local, self.remote = P.Buf(sh["bytes"], 0), P.Buf(sh["bytes"], 21)

    def check(self, who):
        import numpy as np
        n, bb = self.sh["blocks"], self.sh["block_bytes"]
        dst = self.local.host().reshape(self.sh["caches"], n, bb)
        src = self.remote.host().reshape(self.sh["caches"], n, bb)
        for c in range(self.sh["caches"]):
            if not np.array_equal(dst[c][self.lid], src[c][self.rid]):
                raise RuntimeError("%s: data mismatch in cache %d" % (who, c))


def wait_notif(get, msg, t0, timeout=60.0):
    while True:
        if msg in get():
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError("no notification at the owner after %.0f s" % timeout)


def run_tpx(cache, iters):
    import tpx
    sh, out = cache.sh, []
    with tpx.Engine(name="kv-decode") as a, tpx.Engine(name="kv-prefill") as b:
        kind = tpx.MEM_CUDA if P.MEM["kind"] == "vram" else tpx.MEM_HOST
        ra = a.register_ptr(cache.local.addr, cache.local.n, kind)
        rb = b.register_ptr(cache.remote.addr, cache.remote.n, kind)
        desc = rb.export()
        remote = a.load_remote(b.metadata())
        remote.connect()
        for i in range(iters + 1):  # the first one warms up, untimed
            cache.local.zero()
            msg = b"kv-req-%d" % i
            t0 = time.perf_counter()
            prep = remote.prepare(tpx.READ, ra, cache.lo, desc, cache.ro, sh["block_bytes"])
            t1 = time.perf_counter()
            x = prep.post(notif=msg)
            x.wait()
            t2 = time.perf_counter()
            tn = wait_notif(lambda: [m for _, m in b.notifs()], msg, t1)
            x.release()
            prep.release()
            cache.check("tpx")
            if i:
                out.append(dict(prep_ms=(t1 - t0) * 1e3, xfer_ms=(t2 - t1) * 1e3,
                                notif_ms=tn * 1e3))
    return out


def run_nixl(backend, cache, iters):
    import numpy as np
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except ImportError:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    sh, out = cache.sh, []
    cfg = nixl_agent_config(backends=[backend])
    a, b = nixl_agent("kv-decode", cfg), nixl_agent("kv-prefill", cfg)
    kind, dev = ("VRAM", P.MEM["gpu"]) if P.MEM["kind"] == "vram" else ("DRAM", 0)
    a.register_memory([(cache.local.addr, cache.local.n, dev, "")], kind)
    b.register_memory([(cache.remote.addr, cache.remote.n, dev, "")], kind)
    peer = a.add_remote_agent(b.get_agent_metadata())
    npool, bb = sh["caches"] * sh["blocks"], sh["block_bytes"]

    def pool(buf):  # every block of every cache: the lists vLLM prepares at handshake
        d = np.zeros((npool, 3), np.uint64)
        d[:, 0] = buf.addr + np.arange(npool, dtype=np.uint64) * np.uint64(bb)
        d[:, 1] = bb
        d[:, 2] = dev
        return a.get_xfer_descs(d, kind)
    lh = a.prep_xfer_dlist("NIXL_INIT_AGENT", pool(cache.local))
    rh = a.prep_xfer_dlist(peer, pool(cache.remote))
    lidx, ridx = cache.lidx.astype(np.int64), cache.ridx.astype(np.int64)
    seen = []

    def notifs():
        for msgs in b.get_new_notifs().values():
            seen.extend(msgs)
        return seen
    time.sleep(0.05)
    for i in range(iters + 1):
        cache.local.zero()
        msg = b"kv-req-%d" % i
        t0 = time.perf_counter()
        h = a.make_prepped_xfer("READ", lh, lidx, rh, ridx, msg)
        t1 = time.perf_counter()
        st = a.transfer(h)
        while st == "PROC":
            st = a.check_xfer_state(h)
        t2 = time.perf_counter()
        if st != "DONE":
            raise RuntimeError("NIXL %s transfer: %s" % (backend, st))
        tn = wait_notif(notifs, msg, t1)
        a.release_xfer_handle(h)
        cache.check("NIXL+" + backend)
        if i:
            out.append(dict(prep_ms=(t1 - t0) * 1e3, xfer_ms=(t2 - t1) * 1e3, notif_ms=tn * 1e3))
    a.release_dlist_handle(lh)
    a.release_dlist_handle(rh)
    a.remove_remote_agent(peer)
    return out


def worker(args):
    P.MEM.update(kind=args.mem, gpu=args.gpu)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            cache = Cache(req["shape"])
            if args.worker == "tpx":
                out = {"reqs": run_tpx(cache, req["iters"])}
            else:
                out = {"reqs": run_nixl(args.worker.split("+")[1], cache, req["iters"])}
            del cache
        except Exception as e:  # this shape fails here, the rest still run
            out = {"error": "%s: %s" % (type(e).__name__, e)}
        print("RESULT " + json.dumps(out), flush=True)


# ---------------------------------------------------------------- driver

def find_tool(name, given):
    if given:
        return given
    p = os.path.join(HERE, "..", "build", "release", "bin", name)
    return os.path.abspath(p) if os.access(p, os.X_OK) else None


def raw_tcp(netbench, env, iters):
    """GB/s of plain TCP (tpx-netbench --raw, 256 MiB, the transport's connection count)."""
    if not netbench:
        return {"error": "tpx-netbench not found (build/release/bin or --tpx-netbench)"}
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "raw.json")
        p = subprocess.run([netbench, "--raw", "--sizes", "256M", "--iters", str(iters),
                            "--json", js], env=env, capture_output=True, text=True, timeout=300)
        if p.returncode != 0 or not os.path.exists(js):
            return {"error": "tpx-netbench --raw %d: %s" % (p.returncode, p.stderr.strip()[-200:])}
        with open(js) as f:
            r = json.load(f)["results"][0]
    return {"gbps": r["GBps"], "nsocks": r["nsocks"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=",".join(PRESETS),
                    help="comma-separated presets (default all: %s)" % ", ".join(PRESETS))
    for k, h in (("prompt", "prompt tokens"), ("layers", "layers"),
                 ("kv_heads", "KV heads of the model"), ("head_dim", "head dim"),
                 ("block_tokens", "tokens a block"), ("tp", "tensor-parallel ranks"),
                 ("mla", "MLA: dims of the one latent a token (e.g. 576); 0: K and V")):
        ap.add_argument("--" + k.replace("_", "-"), type=int, help=h)
    ap.add_argument("--dtype", choices=sorted(DTYPES))
    ap.add_argument("--iters", type=int, default=3, help="requests a round (default 3), "
                    "after an untimed first one")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds, peers interleaved, raw TCP measured in each (default 3)")
    ap.add_argument("--peers", default="tpx,NIXL+TPX", help="of %s" % ", ".join(KV_PEERS))
    ap.add_argument("--mem", choices=["dram", "vram"], default="dram")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--raw-iters", type=int, default=10, help="256 MiB messages of the raw rate")
    ap.add_argument("--tpx-netbench", help="the tpx-netbench binary (default build/release/bin)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds a round may take a peer")
    ap.add_argument("--json", help="also write every request's numbers here")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a peer failed a request or raw TCP was not measured")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in KV_PEERS:
            ap.error("unknown peer %r (of %s)" % (p, ", ".join(KV_PEERS)))
    shapes = []
    for name in args.preset.split(","):
        if name not in PRESETS:
            ap.error("unknown preset %r (of %s)" % (name, ", ".join(PRESETS)))
        spec = dict(PRESETS[name])
        for k in spec:
            if getattr(args, k) is not None:
                spec[k] = getattr(args, k)
        shapes.append(shape(name, spec))

    env = dict(os.environ)
    env.setdefault("TPX_SOCKET_IFNAME", "lo")
    env.setdefault("TPX_BIND_ADDR", "127.0.0.1")
    env.setdefault("TPX_LOG_LEVEL", "error")
    env.setdefault("NIXL_LOG_LEVEL", "WARN")
    env.pop("NIXL_PLUGIN_DIR", None)
    try:
        import tpx
        plugin_dir, version = tpx.nixl_plugin_dir(), tpx.version()
    except Exception:
        plugin_dir, version = "/nonexistent-tpx-plugin-dir", None
    envs = {"tpx": env, "NIXL+TPX": dict(env, NIXL_PLUGIN_DIR=plugin_dir),
            "NIXL+UCX": dict(env, UCX_TLS=P.ucx_tls_default(args.mem))}
    procs = {p: P.Proc(p, envs[p], [sys.executable, os.path.abspath(__file__), "--worker", p,
                                    "--mem", args.mem, "--gpu", str(args.gpu)]) for p in peers}
    netbench = find_tool("tpx-netbench", args.tpx_netbench)
    raws, res = [], {s["name"]: {p: [] for p in peers} for s in shapes}
    t0 = time.time()
    try:
        for rnd in range(args.rounds):
            raws.append(raw_tcp(netbench, env, args.raw_iters))
            print("# round %d raw TCP %s" % (rnd + 1, json.dumps(raws[-1])), file=sys.stderr,
                  flush=True)
            for s in shapes:
                for p in (peers if rnd % 2 == 0 else peers[::-1]):
                    out = procs[p].ask({"shape": s, "iters": args.iters}, args.timeout)
                    res[s["name"]][p].append(out)
                    print("# round %d %-15s %-9s %s" % (rnd + 1, s["name"], p, json.dumps(out)),
                          file=sys.stderr, flush=True)
    finally:
        for pr in procs.values():
            pr.close()

    good = [r["gbps"] for r in raws if "gbps" in r]
    raw = statistics.median(good) if good else None
    rows = []
    for s in shapes:
        for p in peers:
            outs = res[s["name"]][p]
            errs = [o["error"] for o in outs if "error" in o]
            row = dict(preset=s["name"], peer=p, bytes=s["bytes"], descs=s["descs"],
                       block_bytes=s["block_bytes"])
            if errs:
                row["error"] = errs[0]
            else:
                reqs = [q for o in outs for q in o["reqs"]]
                for k in ("prep_ms", "xfer_ms", "notif_ms"):
                    row[k] = statistics.median(q[k] for q in reqs)
                row["gbps"] = s["bytes"] / (row["xfer_ms"] / 1e3) / 1e9
                row["x_raw"] = row["gbps"] / raw if raw else None
            rows.append(row)
    print("# kv_bench: one request a row, READ of the owner's blocks + notification, %s memory, "
          "loopback; medians of %d rounds x %d requests, every request verified; "
          "GB/s = 1e9 B/s" % ("GPU" if args.mem == "vram" else "host", args.rounds, args.iters))
    print("# host %s, %d CPUs, tpx %s; raw TCP %s GB/s (tpx-netbench --raw, %s connections, "
          "256 MiB, median of %d)" % (platform.node(), os.cpu_count(), version,
                                      "%.2f" % raw if raw else "?",
                                      raws[0].get("nsocks", "?") if raws else "?", len(good)))
    for s in shapes:
        sp = s["spec"]
        print("# %s: %d layers, %s, %s, %d-token blocks, %d-token prompt: %d blocks of %d B "
              "x %d caches" % (
                  s["name"], sp["layers"],
                  "MLA latent of %d (not split by TP)" % sp["mla"] if sp["mla"] else
                  "%d KV heads x %d (%d a rank at TP %d)" % (
                      sp["kv_heads"], sp["head_dim"], max(1, sp["kv_heads"] // sp["tp"]),
                      sp["tp"]),
                  sp["dtype"], sp["block_tokens"], sp["prompt"], s["blocks"], s["block_bytes"],
                  s["caches"]))
    for r in rows:
        if "error" in r:
            print("# %s %s: %s" % (r["preset"], r["peer"], r["error"]))
    print("%-15s %-9s %10s %8s %9s %9s %9s %9s %7s %6s" % (
        "preset", "peer", "MiB", "descs", "block B", "prep ms", "xfer ms", "notif ms", "GB/s",
        "x raw"))
    for r in rows:
        head = "%-15s %-9s %10.1f %8d %9d" % (r["preset"], r["peer"], r["bytes"] / 2**20,
                                              r["descs"], r["block_bytes"])
        if "error" in r:
            print(head + "  error (above)")
        else:
            print(head + " %9.2f %9.2f %9.2f %7.2f %6s" % (
                r["prep_ms"], r["xfer_ms"], r["notif_ms"], r["gbps"],
                "%.2f" % r["x_raw"] if r["x_raw"] else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "bench/kv_bench.py", "args": vars(args), "host": platform.node(),
                       "cpus": os.cpu_count(), "tpx": version, "raw_tcp": raws,
                       "raw_gbps": raw, "shapes": shapes, "rounds": res, "rows": rows},
                      f, indent=1)
    print("# %.0f s" % (time.time() - t0), file=sys.stderr)
    if args.strict and (raw is None or any("error" in r for r in rows)):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
