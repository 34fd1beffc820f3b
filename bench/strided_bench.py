#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""strided_bench.py - a KV-cache slice moved straight into the reader's layout, five ways in
one run: what strided entries cost beside a contiguous copy.

The slice (default: Llama-3.1-70B-shaped): 80 layers, K and V, 8 KV heads, head dim 128,
bf16, 16-token blocks, 512 blocks (8192 tokens) on the owner (prefill) side, READ by the
decode side, block ids a random permutation on each side (a request's blocks in a busy
cache; row a excepted):
  a  contiguous     the whole slice, the same layout on both sides: one block
  b  strided        the decode half of the heads (decode TP = 2 x prefill TP, NHD on both
                    sides) with strided entries (tpx.kv_entries: one per block, 3 dims)
                    through tpx's Python package (the C API)
  c  per-token      the same bytes as one descriptor per token per layer per K/V (SGLang's
                    heterogeneous TP) through NIXL with backend TPX, which finds the runs
  d  HND 32         every head of the HND 16-token prefill blocks into HND 32-token decode
                    blocks (vLLM's block-size mismatch, with no permute after it), strided
  e  per-token, plain  row c with the backend parameter strided=0: the descriptors as plain
                    blocks, what finding the runs saves
Rows a to d are the ones with targets. Each row: prepared once, one verified post (the destination zeroed before, every element
compared after), then --iters timed posts; GB/s = payload bytes / median post-to-done time
(1e9 B/s). A row whose blocks exceed TPX_RMA_MAX_IOVS (2^20 non-contiguous elements)
is cut by layers into as many transfers, posted together. Printed: the table, the ratios
b/a, c/a, d/a beside their targets (b, d >= 0.8; c >= 0.5), --json for all of it.

  python3 bench/strided_bench.py [--layers 80 --blocks 512 ...] [--iters 5]
        [--rows a,b,c,d,e] [--mem dram|vram --gpu N] [--json FILE] [--strict]
Needs numpy, the tpx package and NIXL (rows c, e), as bench/kv_bench.py:
build/release/pyenv/bin/python bench/strided_bench.py (ctest -R python.setup makes it);
torch for --mem vram.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

MAX_ELEMS = 1 << 20  # TPX_RMA_MAX_IOVS
TARGETS = {"b": 0.8, "c": 0.5, "d": 0.8}
ROWS = {"a": "contiguous", "b": "strided, decode half of the heads",
        "c": "per-token descriptors, NIXL+TPX", "d": "into HND 32-token blocks",
        "e": "per-token, NIXL+TPX strided=0"}


class Mem:
    """n bytes of host memory (numpy) or GPU memory (torch), seen as uint16 values."""

    def __init__(self, n, seed, vram, gpu):
        self.vram, self.n = vram, n
        vals = n // 2
        if seed:
            data = np.random.default_rng(seed).integers(0, 1 << 16, vals, dtype=np.uint16)
        else:
            data = np.zeros(vals, np.uint16)
        if vram:
            import torch
            self.t = torch.from_numpy(data.view(np.int16)).to("cuda:%d" % gpu)
            torch.cuda.synchronize()
            self.addr = self.t.data_ptr()
        else:
            self.t = data
            self.addr = data.ctypes.data

    def view(self, shape):
        """The first values, as an array of `shape`."""
        t = self.t[:int(np.prod(shape))]
        return t.view(*shape) if self.vram else t.reshape(shape)

    def zero(self):
        if self.vram:
            import torch
            self.t.zero_()
            torch.cuda.synchronize()
        else:
            self.t.fill(0)


def equal(x, y):
    if hasattr(x, "cpu"):
        return bool((x == y).all().item())
    return np.array_equal(x, y)


def idx(a, like):
    if hasattr(like, "cpu"):
        import torch
        return torch.as_tensor(np.asarray(a, dtype=np.int64), device=like.device)
    return np.asarray(a)


class Slice:
    """The owner's slice and the reader's memory, the block ids, the checks."""

    def __init__(self, args):
        self.a = args
        L, B, T, H, D = args.layers, args.blocks, args.block_tokens, args.heads, args.head_dim
        self.shape_nhd = (L, 2, B, T, H, D)
        self.nbytes = L * 2 * B * T * H * D * 2
        rng = np.random.default_rng(args.seed)
        self.pblk, self.dblk = rng.permutation(B), rng.permutation(B)  # 16-token blocks
        self.dblk32 = rng.permutation(B // 2)                           # 32-token blocks
        self.src = Mem(self.nbytes, 17, args.mem == "vram", args.gpu)
        self.dst = Mem(self.nbytes, 0, args.mem == "vram", args.gpu)

    def check(self, row):
        L, B, T, H, D = (self.a.layers, self.a.blocks, self.a.block_tokens, self.a.heads,
                         self.a.head_dim)
        for lay in range(L):  # a layer at a time: temporaries stay small
            if row == "a":
                s = self.src.view((L, 2 * B * T * H * D))[lay]
                ok = equal(self.dst.view((L, 2 * B * T * H * D))[lay], s)
            elif row in "bce":
                s = self.src.view(self.shape_nhd)[lay]
                d = self.dst.view((L, 2, B, T, H // 2, D))[lay]
                ok = equal(d[:, idx(self.dblk, d)], s[:, idx(self.pblk, s)][:, :, :, H // 2:])
            else:  # HND 16 -> HND 32: decode block j holds prefill blocks 2j, 2j + 1
                s = self.src.view((L, 2, B, H, T, D))[lay]
                d = self.dst.view((L, 2, B // 2, H, 2 * T, D))[lay]
                d = d[:, idx(self.dblk32, d)]
                ok = (equal(d[:, :, :, :T], s[:, idx(self.pblk[0::2], s)]) and
                      equal(d[:, :, :, T:], s[:, idx(self.pblk[1::2], s)]))
            if not ok:
                raise RuntimeError("row %s: layer %d differs from the reference" % (row, lay))

    def payload(self, row):
        return self.nbytes // 2 if row in "bce" else self.nbytes

    def layer_groups(self, elems_per_layer):
        """Layer ranges whose transfers stay within MAX_ELEMS elements."""
        per = max(1, MAX_ELEMS // elems_per_layer)
        return [(l0, min(self.a.layers, l0 + per)) for l0 in range(0, self.a.layers, per)]


def timed(post_all, iters):
    """Seconds of each of iters posts (post every part, wait for all)."""
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        post_all()
        out.append(time.perf_counter() - t0)
    return out


def run_tpx(sl, row, iters):
    import tpx
    a = sl.a
    L, B, T, H, D = a.layers, a.blocks, a.block_tokens, a.heads, a.head_dim
    kind = tpx.MEM_CUDA if a.mem == "vram" else tpx.MEM_HOST
    with tpx.Engine(name="sb-decode") as dec, tpx.Engine(name="sb-prefill") as pre:
        rd = dec.register_ptr(sl.dst.addr, sl.dst.n, kind)
        rp = pre.register_ptr(sl.src.addr, sl.src.n, kind)
        desc = rp.export()
        remote = dec.load_remote(pre.metadata())
        remote.connect()
        t0 = time.perf_counter()
        lists = []
        if row == "a":
            lists.append([(rd, 0, desc, 0, sl.nbytes)])
        else:
            layer_b = 2 * B * T * H * D * 2  # bytes of one layer of the prefill cache
            if row == "b":
                pc = dict(blocks=B, block_size=T, heads=H, head_dim=D)
                dc = dict(blocks=B, block_size=T, heads=H // 2, head_dim=D, head0=H // 2)
                dlayer_b, dblk, per_layer = layer_b // 2, sl.dblk, 2 * B * T
            else:
                pc = dict(blocks=B, block_size=T, heads=H, head_dim=D, layout="HND")
                dc = dict(blocks=B // 2, block_size=2 * T, heads=H, head_dim=D, layout="HND")
                dlayer_b, dblk, per_layer = layer_b, sl.dblk32, 2 * B * H
            for l0, l1 in sl.layer_groups(per_layer):
                n = l1 - l0
                lists.append(tpx.kv_entries(
                    tpx.KVCache(layers=n, **dc), rd, l0 * dlayer_b,
                    tpx.KVCache(layers=n, **pc), desc, l0 * layer_b, dblk, sl.pblk, B * T))
        preps = [remote.prepare(tpx.READ, e) for e in lists]
        prep_s = time.perf_counter() - t0

        def post_all():
            xs = [p.post() for p in preps]
            for x in xs:
                x.wait()
                x.release()
        sl.dst.zero()
        post_all()
        sl.check(row)
        c0, o0 = dec.counters(), pre.counters()
        times = timed(post_all, iters)
        c1, o1 = dec.counters(), pre.counters()
        for p in preps:
            p.release()
    n = max(c1["rma_done"] - c0["rma_done"], 1)

    def ms(c0, c1, k):
        return round((c1[k] - c0[k]) / n / 1e6, 2)
    # where a transfer's time went (per transfer, ms): the requester's post -> answer ->
    # last data; the owner's request in -> served, of which checking and expanding its list
    phases = dict(answer=ms(c0, c1, "rma_ns_answer"), data=ms(c0, c1, "rma_ns_data"),
                  served=ms(o0, o1, "rma_served_ns"), check=ms(o0, o1, "rma_check_ns"))
    return dict(prep_ms=prep_s * 1e3, parts=len(preps), entries=sum(len(e) for e in lists),
                times=times, phases_ms=phases)


def run_nixl(sl, row, iters):
    """Rows c, e: one descriptor per token per layer per K/V, layer-major as SGLang lists
    them; e with the backend's runs off."""
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except ImportError:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    a = sl.a
    L, B, T, H, D = a.layers, a.blocks, a.block_tokens, a.heads, a.head_dim
    kind, dev = ("VRAM", a.gpu) if a.mem == "vram" else ("DRAM", 0)
    cfg = nixl_agent_config(backends=[])
    dec, pre = nixl_agent("sb-decode-" + row, cfg), nixl_agent("sb-prefill-" + row, cfg)
    for ag in (dec, pre):
        ag.create_backend("TPX", {"strided": "0"} if row == "e" else {})
    dec.register_memory([(sl.dst.addr, sl.dst.n, dev, "")], kind)
    pre.register_memory([(sl.src.addr, sl.src.n, dev, "")], kind)
    peer = dec.add_remote_agent(pre.get_agent_metadata())
    tok = D * 2 * (H // 2)  # bytes of a token's half of the heads
    t = np.arange(B * T, dtype=np.uint64)
    t0 = time.perf_counter()
    handles = []
    for l0, l1 in sl.layer_groups(2 * B * T):
        li, ki, ti = np.meshgrid(np.arange(l0, l1, dtype=np.uint64),
                                 np.arange(2, dtype=np.uint64), t, indexing="ij")
        tens = (li * 2 + ki) * B
        dblk, pblk = sl.dblk.astype(np.uint64), sl.pblk.astype(np.uint64)
        loff = ((tens + dblk[ti // T]) * T + ti % T) * tok
        roff = ((tens + pblk[ti // T]) * T + ti % T) * (2 * tok) + tok
        ld = np.zeros((loff.size, 3), np.uint64)
        ld[:, 0], ld[:, 1], ld[:, 2] = sl.dst.addr + loff.ravel(), tok, dev
        rdsc = np.zeros_like(ld)
        rdsc[:, 0], rdsc[:, 1], rdsc[:, 2] = sl.src.addr + roff.ravel(), tok, dev
        handles.append(dec.initialize_xfer("READ", dec.get_xfer_descs(ld, kind),
                                           dec.get_xfer_descs(rdsc, kind), peer, b""))
    prep_s = time.perf_counter() - t0

    def post_all():
        sts = [dec.transfer(h) for h in handles]
        for h, st in zip(handles, sts):
            while st == "PROC":
                st = dec.check_xfer_state(h)
            if st != "DONE":
                raise RuntimeError("NIXL transfer: %s" % st)
    time.sleep(0.05)
    sl.dst.zero()
    post_all()
    sl.check(row)
    times = timed(post_all, iters)
    for h in handles:
        dec.release_xfer_handle(h)
    dec.remove_remote_agent(peer)
    return dict(prep_ms=prep_s * 1e3, parts=len(handles), entries=2 * a.layers * B * T,
                times=times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for k, v, h in (("layers", 80, "layers"), ("blocks", 512, "16-token blocks of the slice"),
                    ("block_tokens", 16, "tokens a prefill block (decode HND: twice that)"),
                    ("heads", 8, "KV heads"), ("head_dim", 128, "head dim (bf16 values)"),
                    ("iters", 5, "timed posts a row, after the verified one"),
                    ("seed", 1, "block ids"), ("gpu", 0, "GPU of --mem vram")):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v,
                        help="%s (default %d)" % (h, v))
    ap.add_argument("--rows", default="a,b,c,d,e", help="of a, b, c, d, e (default all)")
    ap.add_argument("--mem", choices=["dram", "vram"], default="dram")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a row failed")
    args = ap.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    if any(r not in ROWS for r in rows) or args.blocks % 2 or args.heads % 2:
        ap.error("rows are of a, b, c, d, e; blocks and heads even")
    os.environ.setdefault("TPX_SOCKET_IFNAME", "lo")
    os.environ.setdefault("TPX_BIND_ADDR", "127.0.0.1")
    os.environ.setdefault("TPX_LOG_LEVEL", "error")
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    import tpx
    if "c" in rows or "e" in rows:
        os.environ["NIXL_PLUGIN_DIR"] = tpx.nixl_plugin_dir() or "/nonexistent"
    t_start = time.time()
    sl = Slice(args)
    res = {}
    for r in rows:
        try:
            res[r] = (run_nixl(sl, r, args.iters) if r in "ce" else
                      run_tpx(sl, r, args.iters))
            med = statistics.median(res[r]["times"])
            res[r].update(payload=sl.payload(r), s=med, gbps=sl.payload(r) / med / 1e9,
                          verified=True)
        except Exception as e:  # the other rows still run
            res[r] = {"error": "%s: %s" % (type(e).__name__, e)}
        print("# row %s %s" % (r, json.dumps({k: v for k, v in res[r].items()
                                              if k != "times"})), file=sys.stderr, flush=True)
    base = res.get("a", {}).get("gbps")
    ratios = {r: res[r]["gbps"] / base for r in rows
              if r != "a" and base and "gbps" in res[r]}
    print("# strided_bench: %d layers x K,V x %d blocks of %d tokens x %d heads x %d, bf16 "
          "(%.2f GB), %s memory, loopback, READ; median of %d posts a row, every row "
          "verified; GB/s = 1e9 B/s of payload" % (
              args.layers, args.blocks, args.block_tokens, args.heads, args.head_dim,
              sl.nbytes / 1e9, "GPU" if args.mem == "vram" else "host", args.iters))
    print("# host %s, %d CPUs, tpx %s" % (platform.node(), os.cpu_count(), tpx.version()))
    print("%-3s %-36s %10s %6s %9s %9s %9s %7s %6s %8s" % (
        "row", "what", "payload MB", "parts", "entries", "prep ms", "post ms", "GB/s",
        "x a", "target"))
    for r in rows:
        o = res[r]
        head = "%-3s %-36s" % (r, ROWS[r])
        if "error" in o:
            print(head + "  error: " + o["error"])
            continue
        x = ratios.get(r)
        tgt = TARGETS.get(r)
        print(head + " %10.1f %6d %9d %9.1f %9.1f %7.2f %6s %8s" % (
            o["payload"] / 1e6, o["parts"], o["entries"], o["prep_ms"], o["s"] * 1e3,
            o["gbps"], "%.2f" % x if x is not None else "-",
            ("%s %.1f" % ("ok >=" if x >= tgt else "MISS <", tgt)) if x is not None and tgt
            else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "bench/strided_bench.py", "args": vars(args),
                       "host": platform.node(), "cpus": os.cpu_count(), "tpx": tpx.version(),
                       "bytes": sl.nbytes, "rows": res, "ratios": ratios,
                       "targets": TARGETS}, f, indent=1)
    print("# %.0f s" % (time.time() - t_start), file=sys.stderr)
    if args.strict and any("error" in o for o in res.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
