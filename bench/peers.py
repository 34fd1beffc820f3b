#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""peers - tpx beside the engines a user would pick instead, on one workload, in one run.

Peers (each in its own process, both of its endpoints in that process, loopback):
  tpx-C      tpx-perf --op (the C API; a verified pass, then the timed one without checks)
  tpx-py     the tpx Python package (tpx.Engine, Remote.prepare, Prep.post)
  NIXL+TPX   NIXL agents with backend "TPX" (NIXL_PLUGIN_DIR = the tpx wheel's plugin folder)
  NIXL+UCX   NIXL agents with backend "UCX", UCX_TLS=tcp (with --mem vram, or on a host with
             a GPU: tcp,cuda_copy, which UCX's CUDA build needs there even for host memory)
  Mooncake   Mooncake Transfer Engine, protocol tcp, P2P handshake (host memory only)

Rows: READ and WRITE of N blocks of B bytes (1000 x 4 KiB, 16 KiB, 128 KiB; 100 x 2 MiB by
default), each block at a random offset on both sides (two independent permutations of the
block slots), the request prepared once and posted --iters times after an untimed first post;
GB/s = bytes of the timed posts / their wall time (1 GB = 1e9 B). Then the latency of one
4 KiB READ: p50/p99 of --lat-iters single posts. Every row is verified: the destination is
zeroed after the first post and its blocks compared with the source's after the last.
Rounds are interleaved: row by row, every peer in turn, --rounds times; medians are printed.
Ratios: each tpx column over the best TCP peer of the row (NIXL+UCX, Mooncake; latency:
the best p50 over tpx's). A peer that is not installed or fails says so in its cell.

  bench/peers [--rounds 3] [--iters 10] [--blocks 1000] [--sizes 4K,16K,128K,2M]
              [--large-blocks 100] [--ops READ,WRITE] [--lat-iters 1000]
              [--peers tpx-C,tpx-py,NIXL+TPX,NIXL+UCX,Mooncake] [--mem dram|vram --gpu N]
              [--json FILE]
Install (pip, in the Python that runs it; bench/peers uses build/release/pyenv when present):
  tpx (the wheel of this tree), nixl nixl-cu12 numpy, mooncake-transfer-engine-non-cuda
  (needs Debian's libibverbs1), torch for --mem vram.
"""
import argparse
import json
import os
import platform
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = ["tpx-C", "tpx-py", "NIXL+TPX", "NIXL+UCX", "Mooncake"]
TCP_PEERS = ["NIXL+UCX", "Mooncake"]
MEM = {"kind": "dram", "gpu": 0}


def ucx_tls_default(mem):
    """NIXL+UCX's transports: TCP, and for GPU memory cuda_copy to stage it. On a host
    with a GPU the CUDA build of UCX (nixl-cu12/cu13) needs cuda_copy even for host
    memory (with tcp alone every host-memory transfer failed, NIXL_ERR_BACKEND, on the
    H100 host); cuda_copy moves no host bytes, so the rows stay TCP against TCP."""
    gpu = mem == "vram" or os.path.exists("/dev/nvidiactl")
    return "tcp,cuda_copy" if gpu else "tcp"


def parse_size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1].upper()] if s[-1].upper() in m else int(s)


def human(n):
    for unit, v in (("M", 1 << 20), ("K", 1 << 10)):
        if n % v == 0:
            return "%d %siB" % (n // v, unit)
    return "%d B" % n


# ---------------------------------------------------------------- worker side (one peer)

class Buf:
    """n bytes of host memory (numpy) or, with --mem vram, GPU memory (torch)."""

    def __init__(self, n, seed):
        import numpy as np
        if not seed:
            data = np.zeros(n, np.uint8)
        elif n % 8 == 0:  # eight random bytes at a time: GiBs fill in a second
            data = np.random.default_rng(seed).integers(0, 1 << 63, n // 8,
                                                        dtype=np.uint64).view(np.uint8)
        else:
            data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
        if MEM["kind"] == "vram":
            import torch
            self.t = torch.from_numpy(data).to("cuda:%d" % MEM["gpu"])
            torch.cuda.synchronize()
            self.addr = self.t.data_ptr()
        else:
            self.t = data
            self.addr = data.ctypes.data
        self.n = n

    def host(self):
        return self.t.cpu().numpy() if MEM["kind"] == "vram" else self.t

    def zero(self):
        if MEM["kind"] == "vram":
            import torch
            self.t.fill_(0)
            torch.cuda.synchronize()  # done before the next post writes into it
        else:
            self.t.fill(0)


class Row:
    """One row's memory: the initiator's and the target's buffers, the block offsets on
    each side (random: two permutations of the slots) and the check of the destination."""

    def __init__(self, op, nblocks, size, seed=7):
        import numpy as np
        rng = np.random.default_rng(seed)
        self.op, self.nblocks, self.size = op, nblocks, size
        self.lo = (rng.permutation(nblocks) * size).astype(np.uint64)
        self.ro = (rng.permutation(nblocks) * size).astype(np.uint64)
        self.local = Buf(nblocks * size, 0 if op == "READ" else 11)
        self.remote = Buf(nblocks * size, 12 if op == "READ" else 0)

    def dst(self):
        return self.local if self.op == "READ" else self.remote

    def check(self, who):
        import numpy as np
        a = self.local.host().reshape(self.nblocks, self.size)[self.lo // self.size]
        b = self.remote.host().reshape(self.nblocks, self.size)[self.ro // self.size]
        if not np.array_equal(a, b):
            raise RuntimeError("%s: data mismatch" % who)


def timed(row, post, iters, who):
    """First post untimed, zero the destination, `iters` timed posts, check the bytes."""
    post()
    row.dst().zero()
    t0 = time.perf_counter()
    for _ in range(iters):
        post()
    dt = time.perf_counter() - t0
    row.check(who)
    return {"gbps": row.nblocks * row.size * iters / dt / 1e9, "verified": True}


def latencies(row, post, iters, who):
    post()
    row.dst().zero()
    lat = []
    for _ in range(iters):
        t = time.perf_counter()
        post()
        lat.append((time.perf_counter() - t) * 1e6)
    row.check(who)
    lat.sort()
    return {"p50_us": lat[len(lat) // 2], "p99_us": lat[min(len(lat) - 1, len(lat) * 99 // 100)],
            "verified": True}


class TpxPy:
    def __init__(self):
        import tpx
        self.tpx = tpx
        self.n = 0

    def run(self, row, measure, iters):
        tpx = self.tpx
        self.n += 1
        with tpx.Engine(name="peers-i%d" % self.n) as a, tpx.Engine(name="peers-t%d" % self.n) as b:
            kind = tpx.MEM_CUDA if MEM["kind"] == "vram" else tpx.MEM_HOST
            ra = a.register_ptr(row.local.addr, row.local.n, kind)
            rb = b.register_ptr(row.remote.addr, row.remote.n, kind)
            remote = a.load_remote(b.metadata())
            remote.connect()
            prep = remote.prepare(tpx.READ if row.op == "READ" else tpx.WRITE, ra, row.lo,
                                  rb.export(), row.ro, row.size)

            def post():
                x = prep.post()
                x.wait()
                x.release()
            return measure(row, post, iters, "tpx-py")


class Nixl:
    def __init__(self, backend):
        try:
            from nixl._api import nixl_agent, nixl_agent_config
        except ImportError:
            from nixl_cu12._api import nixl_agent, nixl_agent_config
        self.agent, self.config = nixl_agent, nixl_agent_config
        self.backend, self.n = backend, 0

    def run(self, row, measure, iters):
        import numpy as np
        self.n += 1
        cfg = self.config(backends=[self.backend])
        a = self.agent("peers-i%d" % self.n, cfg)
        b = self.agent("peers-t%d" % self.n, cfg)
        kind, dev = ("VRAM", MEM["gpu"]) if MEM["kind"] == "vram" else ("DRAM", 0)
        a.register_memory([(row.local.addr, row.local.n, dev, "")], kind)
        b.register_memory([(row.remote.addr, row.remote.n, dev, "")], kind)
        peer = a.add_remote_agent(b.get_agent_metadata())

        def descs(buf, offs):
            d = np.zeros((row.nblocks, 3), np.uint64)
            d[:, 0] = buf.addr + offs
            d[:, 1] = row.size
            d[:, 2] = dev
            return a.get_xfer_descs(d, kind)
        h = a.initialize_xfer(row.op, descs(row.local, row.lo), descs(row.remote, row.ro), peer)

        def post():
            st = a.transfer(h)
            while st == "PROC":
                st = a.check_xfer_state(h)
            if st != "DONE":
                raise RuntimeError("NIXL %s transfer: %s" % (self.backend, st))
        time.sleep(0.05)  # metadata loaded, as an application does before its first post
        try:
            return measure(row, post, iters, "NIXL+" + self.backend)
        finally:
            a.release_xfer_handle(h)
            a.remove_remote_agent(peer)
            a.deregister_memory(a.get_reg_descs([(row.local.addr, row.local.n, dev, "")], kind))
            b.deregister_memory(b.get_reg_descs([(row.remote.addr, row.remote.n, dev, "")], kind))


class Mooncake:
    """Two transfer engines (protocol tcp, P2P handshake: no metadata server). Its batch calls
    take the address lists each time: they are built once, as a prepared request is."""

    def __init__(self):
        if MEM["kind"] == "vram":
            raise RuntimeError("n/a: the non-CUDA wheel moves host memory only")
        from mooncake.engine import TransferEngine
        self.a, self.b = TransferEngine(), TransferEngine()
        for e in (self.a, self.b):
            if e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
                raise RuntimeError("TransferEngine.initialize failed")
        self.peer = "127.0.0.1:%d" % self.b.get_rpc_port()

    def run(self, row, measure, iters):
        a, b = self.a, self.b
        if a.register_memory(row.local.addr, row.local.n, "cpu:0") != 0 or \
                b.register_memory(row.remote.addr, row.remote.n, "cpu:0") != 0:
            raise RuntimeError("register_memory failed")
        la = [row.local.addr + int(o) for o in row.lo]
        rb = [row.remote.addr + int(o) for o in row.ro]
        ln = [row.size] * row.nblocks
        call = a.batch_transfer_sync_read if row.op == "READ" else a.batch_transfer_sync_write

        def post():
            rc = call(self.peer, la, rb, ln)
            if rc != 0:
                raise RuntimeError("Mooncake batch transfer: %d" % rc)
        try:
            return measure(row, post, iters, "Mooncake")
        finally:
            a.unregister_memory(row.local.addr)
            b.unregister_memory(row.remote.addr)


def worker(args):
    """Serve rows on stdin (one JSON object a line), answer `RESULT {...}` on stdout."""
    MEM.update(kind=args.mem, gpu=args.gpu)
    peer, err = None, None
    try:
        peer = {"tpx-py": TpxPy, "NIXL+TPX": lambda: Nixl("TPX"), "NIXL+UCX": lambda: Nixl("UCX"),
                "Mooncake": Mooncake}[args.worker]()
    except ImportError as e:  # answered for every row
        err = "not installed: %s" % e
    except Exception as e:
        err = "%s: %s" % (type(e).__name__, e) if not str(e).startswith("n/a") else str(e)
    for line in sys.stdin:
        req = json.loads(line)
        if err:
            out = {"error": err}
        else:
            try:
                row = Row(req["op"], req["blocks"], req["size"])
                if req["kind"] == "lat":
                    out = peer.run(row, latencies, req["iters"])
                else:
                    out = peer.run(row, timed, req["iters"])
                del row
            except Exception as e:  # this row fails, the next may not
                out = {"error": "%s: %s" % (type(e).__name__, e)}
        print("RESULT " + json.dumps(out), flush=True)


# ---------------------------------------------------------------- driver

class Proc:
    """A peer's worker process, started on first use and again after it died."""

    def __init__(self, label, env, cmd):
        self.label, self.env, self.cmd, self.p = label, env, cmd, None
        self.log = tempfile.NamedTemporaryFile(prefix="peers-%s-" % label.replace("+", ""),
                                               suffix=".log", delete=False)

    def start(self):
        self.p = subprocess.Popen(self.cmd, env=self.env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)

    def tail(self):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        return " | ".join(lines[-2:]) or "?"

    def ask(self, req, timeout):
        if self.p is None or self.p.poll() is not None:
            self.start()
        try:
            self.p.stdin.write(json.dumps(req) + "\n")
            self.p.stdin.flush()
            end = time.time() + timeout
            while True:
                r, _, _ = select.select([self.p.stdout], [], [], max(0.0, end - time.time()))
                if not r:
                    self.stop()
                    return {"error": "timed out after %d s" % timeout}
                line = self.p.stdout.readline()
                if not line:
                    rc = self.p.wait()
                    self.p = None
                    return {"error": "worker exited (%d): %s" % (rc, self.tail())}
                if line.startswith("RESULT "):
                    return json.loads(line[7:])
        except (BrokenPipeError, OSError) as e:
            self.stop()
            return {"error": "worker: %s" % e}

    def close(self):
        self.stop()
        self.log.close()
        os.unlink(self.log.name)

    def stop(self):
        if self.p is not None:
            try:
                self.p.stdin.close()
                self.p.wait(timeout=10)
            except Exception:
                self.p.kill()
                self.p.wait()
            self.p = None


def run_tpx_c(perf, env, args, req):
    """tpx-perf --op: one short verified run, then the timed one without checks."""
    if not perf:
        return {"error": "n/a: tpx-perf not found (build/release/bin, or --tpx-perf)"}
    base = [perf, "--op", req["op"].lower(), "--block", str(req["size"]), "--blocks",
            str(req["blocks"]), "--no-raw"]
    if args.mem == "vram":
        base += ["--mem", "cuda", "--gpu", str(args.gpu)]
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for verify, iters in (("--verify", 2), ("--no-verify", req["iters"])):
            js = os.path.join(d, "r.json")
            cmd = base + [verify, "--iters", str(iters), "--warmup", "1", "--json", js]
            try:
                p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                   timeout=args.timeout)
            except subprocess.TimeoutExpired:
                return {"error": "timed out after %d s" % args.timeout}
            except OSError as e:
                return {"error": "tpx-perf: %s" % e}
            if p.returncode != 0 or not os.path.exists(js):
                tail = (p.stderr or p.stdout).strip().splitlines()[-2:] or ["?"]
                return {"error": "tpx-perf %d: %s" % (p.returncode, " | ".join(tail))}
            with open(js) as f:
                r = json.load(f)["rows"][0]
            if verify == "--verify":
                if not r.get("verified"):
                    return {"error": "tpx-perf: not verified"}
                out["verified"] = True
            elif req["kind"] == "lat":
                out.update(p50_us=r["xfer_us_p50"], p99_us=r["xfer_us_p99"])
            else:
                out["gbps"] = r["gbps"]
    return out


def find_perf(args):
    if args.tpx_perf:
        return args.tpx_perf
    for p in (os.path.join(HERE, "..", "build", "release", "bin", "tpx-perf"),):
        if os.access(p, os.X_OK):
            return os.path.abspath(p)
    return shutil.which("tpx-perf")


def requests(args):
    rows = []
    for op in args.ops.split(","):
        for s in args.sizes.split(","):
            size = parse_size(s)
            nb = args.large_blocks if size >= (1 << 20) else args.blocks
            rows.append({"kind": "xfer", "op": op, "size": size, "blocks": nb,
                         "iters": args.iters, "name": "%s %d x %s" % (op, nb, human(size))})
    if args.lat_iters > 0:
        rows.append({"kind": "lat", "op": "READ", "size": 4096, "blocks": 1,
                     "iters": args.lat_iters, "name": "READ 1 x 4 KiB p50/p99 us"})
    return rows


def cell(v, kind):
    if v is None:
        return "-"
    if isinstance(v, str):
        return ("n/a" if v.startswith("n/a") else "missing" if v.startswith("not installed")
                else "error")
    return "%.2f" % v if kind == "xfer" else "%.0f/%.0f" % v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians (default 3)")
    ap.add_argument("--iters", type=int, default=10, help="timed posts per row (default 10)")
    ap.add_argument("--blocks", type=int, default=1000, help="blocks per request (default 1000)")
    ap.add_argument("--large-blocks", type=int, default=100,
                    help="blocks per request for blocks of 1 MiB and more (default 100)")
    ap.add_argument("--sizes", default="4K,16K,128K,2M",
                    help="block sizes (default 4K,16K,128K,2M)")
    ap.add_argument("--ops", default="READ,WRITE")
    ap.add_argument("--lat-iters", type=int, default=1000,
                    help="single 4 KiB READs of the latency row (0: no latency row)")
    ap.add_argument("--peers", default=",".join(PEERS), help="default: " + ",".join(PEERS))
    ap.add_argument("--mem", choices=["dram", "vram"], default="dram",
                    help="vram: GPU memory (torch tensors on --gpu; tpx-perf --mem cuda)")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--ucx-tls", default=None,
                    help="UCX_TLS of NIXL+UCX (default tcp; --mem vram or a GPU on the host: tcp,cuda_copy)")
    ap.add_argument("--tpx-perf", help="the tpx-perf binary (default build/release/bin, PATH)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds a row may take per peer")
    ap.add_argument("--json", help="also write every round's numbers here")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a peer failed a row (n/a cells aside): the smoke test's mode")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.ucx_tls is None:
        args.ucx_tls = ucx_tls_default(args.mem)
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            ap.error("unknown peer %r (peers: %s)" % (p, ", ".join(PEERS)))

    env = dict(os.environ)
    env.setdefault("TPX_SOCKET_IFNAME", "lo")
    env.setdefault("TPX_BIND_ADDR", "127.0.0.1")
    env.setdefault("TPX_LOG_LEVEL", "error")
    env.setdefault("NIXL_LOG_LEVEL", "WARN")
    env.setdefault("GLOG_minloglevel", "2")
    env.pop("NIXL_PLUGIN_DIR", None)
    try:
        import tpx
        plugin_dir = tpx.nixl_plugin_dir()
        tpx_version = tpx.version()
    except Exception:  # NIXL+TPX then fails in its own column
        plugin_dir, tpx_version = "/nonexistent-tpx-plugin-dir", None
    envs = {"tpx-py": env, "NIXL+TPX": dict(env, NIXL_PLUGIN_DIR=plugin_dir),
            "NIXL+UCX": dict(env, **({"UCX_TLS": args.ucx_tls} if args.ucx_tls else {})),
            "Mooncake": env}
    procs = {p: Proc(p, envs[p], [sys.executable, os.path.abspath(__file__), "--worker", p,
                                  "--mem", args.mem, "--gpu", str(args.gpu)])
             for p in peers if p != "tpx-C"}
    perf = find_perf(args)
    rows = requests(args)
    res = {r["name"]: {p: [] for p in peers} for r in rows}
    t0 = time.time()
    try:
        for rnd in range(args.rounds):
            for r in rows:
                for p in (peers if rnd % 2 == 0 else peers[::-1]):
                    out = (run_tpx_c(perf, env, args, r) if p == "tpx-C"
                           else procs[p].ask(r, args.timeout))
                    res[r["name"]][p].append(out)
                    print("# round %d %-26s %-9s %s" % (rnd + 1, r["name"], p, json.dumps(out)),
                          file=sys.stderr, flush=True)
    finally:
        for pr in procs.values():
            pr.close()

    # medians; an error in any round is the cell's
    med = {}
    for r in rows:
        med[r["name"]] = {}
        for p in peers:
            outs = res[r["name"]][p]
            errs = [o["error"] for o in outs if "error" in o]
            if errs:
                med[r["name"]][p] = errs[0]
            elif r["kind"] == "xfer":
                med[r["name"]][p] = statistics.median(o["gbps"] for o in outs)
            else:
                med[r["name"]][p] = (statistics.median(o["p50_us"] for o in outs),
                                     statistics.median(o["p99_us"] for o in outs))
    mine = [p for p in peers if p not in TCP_PEERS]
    print("# peers: %s memory, loopback, %d rounds interleaved (medians), %d timed posts a row "
          "after an untimed one, every row verified; GB/s = 1e9 B/s; UCX_TLS=%s"
          % ("GPU" if args.mem == "vram" else "host", args.rounds, args.iters, args.ucx_tls))
    print("# host %s, %d CPUs, tpx %s, %.0f s" % (platform.node(), os.cpu_count(), tpx_version,
                                                  time.time() - t0))
    w = 14
    head = "%-28s" % "row" + "".join("%*s" % (w, p) for p in peers)
    head += "".join("%*s" % (w, "%s/best" % p) for p in mine)
    print(head)
    for r in rows:
        m = med[r["name"]]
        line = "%-28s" % r["name"] + "".join("%*s" % (w, cell(m[p], r["kind"])) for p in peers)
        tcp = [m[p] for p in TCP_PEERS if p in m and not isinstance(m[p], str)]
        for p in mine:
            v = m[p]
            if not tcp or isinstance(v, str):
                line += "%*s" % (w, "-")
            elif r["kind"] == "xfer":
                best = max(tcp)
                line += "%*s" % (w, "%.1fx" % (v / best) if best > 0 else "-")
            else:  # latency: the best TCP peer's p50 over this one's (above 1: faster)
                best = min(t[0] for t in tcp)
                line += "%*s" % (w, "%.2fx" % (best / v[0]) if v[0] > 0 else "-")
        print(line)
    print("# x/best: GB/s over the best TCP peer's (NIXL+UCX, Mooncake); latency row: the best "
          "TCP peer's p50 over this one's (above 1: faster)")
    for r in rows:
        for p in peers:
            v = med[r["name"]][p]
            if isinstance(v, str):
                print("# %s %s: %s" % (p, r["name"], v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "bench/peers", "args": vars(args), "host": platform.node(),
                       "cpus": os.cpu_count(), "tpx": tpx_version, "peers": peers,
                       "rows": rows, "rounds": res, "medians": med}, f, indent=1)
    if args.strict and any(isinstance(v, str) and not v.startswith("n/a")
                           for m in med.values() for v in m.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
