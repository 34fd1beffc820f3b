# SPDX-License-Identifier: Apache-2.0
"""Stock NCCL (through PyTorch) loading tpx's plugin, next to NCCL's own socket transport.

Two GPUs on one host, P2P and SHM off so all traffic takes the network plugin over loopback.
For each transport: send/recv GPU0 -> GPU1 of a deterministic pattern, checked on the receiver;
all_reduce of known values, checked; then send/recv bandwidth (1e9 B/s) for the given sizes.

usage: python3 nccl_plugin.py PLUGIN_SO [SIZES_BYTES,...]   (prints one table at the end)
"""
import json, os, subprocess, sys, time

def worker(rank, sizes, port, out):
    import torch, torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    peer = 1 - rank
    res = {"ok": True, "bw": {}}
    # correctness: send/recv of a pattern that differs per byte position
    n = 64 << 20
    ref = (torch.arange(n, device="cuda", dtype=torch.int64) * 2654435761 % 251).to(torch.uint8)
    buf = ref.clone() if rank == 0 else torch.zeros(n, dtype=torch.uint8, device="cuda")
    (dist.send if rank == 0 else dist.recv)(buf, peer)
    torch.cuda.synchronize()
    if rank == 1 and not torch.equal(buf, ref):
        res["ok"] = False
        res["err"] = "send/recv data mismatch"
    # correctness: all_reduce
    x = torch.full((1 << 22,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if not torch.all(x == 3.0):
        res["ok"] = False
        res["err"] = "all_reduce result wrong"
    for sz in sizes:
        b = torch.empty(sz, dtype=torch.uint8, device="cuda")
        iters = max(3, min(30, (2 << 30) // sz))
        for _ in range(3):
            (dist.send if rank == 0 else dist.recv)(b, peer)
        torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            (dist.send if rank == 0 else dist.recv)(b, peer)
        torch.cuda.synchronize()
        res["bw"][sz] = sz * iters / (time.perf_counter() - t) / 1e9
    if rank == 1:
        with open(out, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()

def run(label, env, sizes, port):
    out = f"/tmp/nccl_{label}.json"
    if os.path.exists(out):
        os.remove(out)
    e = dict(os.environ, NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", **env)
    code = ("import sys; sys.path.insert(0, %r); import nccl_plugin as m, torch.multiprocessing as mp; "
            "mp.spawn(m.worker, args=(%r, %d, %r), nprocs=2)") % (os.path.dirname(os.path.abspath(__file__)), sizes, port, out)
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)
    log = p.stdout + p.stderr
    loaded = [l for l in log.splitlines() if "NET/Plugin" in l or "Using network" in l or "Loaded net plugin" in l]
    if p.returncode != 0 or not os.path.exists(out):
        return {"ok": False, "err": f"exit {p.returncode}: " + log[-1500:], "bw": {}, "loaded": loaded}
    r = json.load(open(out))
    r["loaded"] = loaded
    return r

if __name__ == "__main__":
    plugin = os.path.abspath(sys.argv[1])
    sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "1048576,16777216,268435456").split(",")]
    common = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    cfgs = [
        ("nccl-socket-default", {"NCCL_NET": "Socket"}),
        ("nccl-socket-2x4", {"NCCL_NET": "Socket", "NCCL_NSOCKS_PERTHREAD": "2", "NCCL_SOCKET_NTHREADS": "4"}),
        ("nccl-socket-4x4", {"NCCL_NET": "Socket", "NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "4"}),
        ("nccl-socket-4x8", {"NCCL_NET": "Socket", "NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "8"}),
        ("nccl-socket-8x8", {"NCCL_NET": "Socket", "NCCL_NSOCKS_PERTHREAD": "8", "NCCL_SOCKET_NTHREADS": "8"}),
        ("tpx-plugin", {"NCCL_NET_PLUGIN": plugin, "NCCL_NET": "tpx", "TPX_SOCKET_IFNAME": "lo",
                        "LD_LIBRARY_PATH": os.path.dirname(plugin) + ":" + os.environ.get("LD_LIBRARY_PATH", "")}),
    ]
    # The strict TCPX mode is not listed: NCCL runs its own device-side unpack for
    # UNPACK devices, which needs the bounce buffer in GPU memory (not emulated yet).
    rows = []
    for i, (label, env) in enumerate(cfgs):
        r = run(label, dict(common, **env), sizes, 29500 + i)
        rows.append((label, r))
        for l in r.get("loaded", [])[:3]:
            print(f"[{label}] {l.strip()}")
        if not r["ok"]:
            print(f"[{label}] FAILED: {r.get('err')}")
    print("\n==== NCCL send/recv GPU0->GPU1 over loopback (GB/s = 1e9 B/s); correctness = send/recv 64 MiB pattern + all_reduce ====")
    print(f"{'transport':28s} {'correct':8s} " + " ".join(f"{s>>20:>8d}M" for s in sizes))
    for label, r in rows:
        bw = " ".join(f"{r['bw'].get(str(s), r['bw'].get(s, float('nan'))):9.2f}" for s in sizes)
        print(f"{label:28s} {'yes' if r['ok'] else 'NO':8s} {bw}")
