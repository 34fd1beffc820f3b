# SPDX-License-Identifier: Apache-2.0
"""vLLM's NixlConnector call sequence over NIXL with the TPX backend, checked byte by byte.

The calls are the ones vLLM's NixlConnector makes, in its order, through the `nixl`
package (the import vLLM uses): an agent per worker with backends=["TPX"] and no
backend parameters, telemetry on; one registration per layer for K and one for V
(get_reg_descs + register_memory, the GPU's devId on VRAM); prep_xfer_dlist of the
local blocks ("NIXL_INIT_AGENT") and, after add_remote_agent, of the remote ones; per
request make_prepped_xfer("READ", ...) with block-id lists and a notification,
transfer, check_xfer_state until DONE, get_xfer_telemetry, release_xfer_handle; the
owner's get_new_notifs; send_notif; and a prefill worker that dies and comes back
(remove_remote_agent, add_remote_agent of the new one, prep_xfer_dlist again, the next
request).

Heterogeneous TP (--tp-ratio 2, decode TP = 2 x prefill TP): the KV layout is HND
([heads][tokens][head dim] per block), so each decode rank reads its half of the heads
of every block: the remote descriptor of a block starts at rank * (block bytes / 2).

    python vllm_seq.py [--mem dram|vram] [--layers 32] [--blocks 256] [--block-kib 64]
                       [--tp-ratio 1|2] [--requests 40] [--gpu 0] [--json FILE]

Prints one line per phase and a summary; exit 0 when every request was verified.
The prefill worker is another process (`--role prefill`, driven on stdin/stdout).
"""
import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.abspath(__file__)


def nixl_api():
    from nixl._api import nixl_agent, nixl_agent_config  # what vLLM imports
    return nixl_agent, nixl_agent_config


def plugin_dir():
    import tpx
    os.environ.setdefault("NIXL_PLUGIN_DIR", tpx.nixl_plugin_dir())


class Caches:
    """2 x layers KV regions of blocks x block_bytes: numpy (DRAM) or torch (VRAM)."""

    def __init__(self, mem, nregions, nblocks, block_bytes, gpu):
        self.mem, self.gpu, self.nblocks, self.block_bytes = mem, gpu, nblocks, block_bytes
        n = nblocks * block_bytes
        if mem == "vram":
            import torch
            self.t = [torch.zeros(n, dtype=torch.uint8, device="cuda:%d" % gpu)
                      for _ in range(nregions)]
            self.addrs = [t.data_ptr() for t in self.t]
        else:
            self.t = [np.zeros(n, dtype=np.uint8) for _ in range(nregions)]
            self.addrs = [a.ctypes.data for a in self.t]
        self.dev = gpu if mem == "vram" else 0
        self.nmem = "VRAM" if mem == "vram" else "DRAM"

    def fill(self, seed):
        for i, t in enumerate(self.t):
            v = pattern(seed, i, len(t))
            if self.mem == "vram":
                import torch
                t.copy_(torch.from_numpy(v))
            else:
                t[:] = v

    def host(self, i):
        t = self.t[i]
        return t.cpu().numpy() if self.mem == "vram" else t

    def reg_list(self):
        return [(a, self.nblocks * self.block_bytes, self.dev, "") for a in self.addrs]

    def block_list(self, offset=0, length=None):
        length = length or self.block_bytes
        return [(a + b * self.block_bytes + offset, length, self.dev)
                for a in self.addrs for b in range(self.nblocks)]


def pattern(seed, region, n):
    return np.random.default_rng([seed, region]).integers(0, 256, n, dtype=np.uint8)


def desc_ids(nblocks, nregions, block_ids):
    """vLLM's _get_block_descs_ids: region-major, block-minor."""
    b = np.asarray(block_ids, dtype=np.int64)
    return (np.arange(nregions, dtype=np.int64)[:, None] * nblocks + b[None, :]).ravel()


# ---- the prefill worker (another process) ------------------------------------------------

def prefill_main(a):
    plugin_dir()
    nixl_agent, nixl_agent_config = nixl_api()
    agent = nixl_agent(a.name, nixl_agent_config(backends=["TPX"], capture_telemetry=True))
    kv = Caches(a.mem, 2 * a.layers, a.blocks, a.block_kib * 1024, a.gpu)
    kv.fill(a.seed)
    agent.register_memory(agent.get_reg_descs(kv.reg_list(), kv.nmem))
    agent.prep_xfer_dlist("NIXL_INIT_AGENT", kv.block_list(), kv.nmem)
    print("MD", agent.get_agent_metadata().hex(), flush=True)
    print("ADDRS", json.dumps(kv.addrs), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "NOTIFS":
            n = agent.get_new_notifs()
            print("NOTIFS", json.dumps({k: [m.hex() for m in v] for k, v in n.items()}),
                  flush=True)
        elif cmd[0] == "QUIT":
            break
    print("BYE", flush=True)


class Prefill:
    def __init__(self, a, seed):
        args = [sys.executable, HERE, "--role", "prefill", "--name", a.prefill_name,
                "--mem", a.mem, "--layers", str(a.layers), "--blocks", str(a.blocks),
                "--block-kib", str(a.block_kib), "--gpu", str(a.gpu), "--seed", str(seed)]
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.md = bytes.fromhex(self.expect("MD"))
        self.addrs = json.loads(self.expect("ADDRS"))
        self.seed = seed

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, word, timeout=120.0):
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                raise SystemExit("FAIL: prefill worker exited (rc %s) before %s"
                                 % (self.p.poll(), word))
            head, _, rest = line.rstrip("\n").partition(" ")
            if head == word:
                return rest

    def notifs(self):
        self.p.stdin.write("NOTIFS\n")
        self.p.stdin.flush()
        return {k: [bytes.fromhex(m) for m in v]
                for k, v in json.loads(self.expect("NOTIFS")).items()}

    def kill(self):
        os.kill(self.p.pid, signal.SIGKILL)
        self.p.wait()

    def quit(self):
        try:
            self.p.stdin.write("QUIT\n")
            self.p.stdin.flush()
            self.p.wait(timeout=30)
        except Exception:
            self.p.kill()


# ---- the decode side (this process) --------------------------------------------------------

class DecodeRank:
    def __init__(self, a, rank, nixl_agent, nixl_agent_config):
        self.a, self.rank = a, rank
        self.local_bytes = a.block_kib * 1024 // a.tp_ratio
        self.agent = nixl_agent("decode-%d" % rank,
                                nixl_agent_config(backends=["TPX"], capture_telemetry=True))
        self.kv = Caches(a.mem, 2 * a.layers, a.blocks, self.local_bytes, a.gpu)
        self.agent.register_memory(self.agent.get_reg_descs(self.kv.reg_list(), self.kv.nmem))
        self.local = self.agent.prep_xfer_dlist("NIXL_INIT_AGENT", self.kv.block_list(),
                                                self.kv.nmem)
        self.remote = None
        self.remote_name = None

    def attach(self, pf):
        """vLLM's handshake: add the agent, prepare its blocks (this rank's heads)."""
        self.remote_name = self.agent.add_remote_agent(pf.md)
        rb = self.a.block_kib * 1024
        off = (self.rank % self.a.tp_ratio) * self.local_bytes
        blocks = [(addr + b * rb + off, self.local_bytes, self.kv.dev)
                  for addr in pf.addrs for b in range(self.a.blocks)]
        self.remote = self.agent.prep_xfer_dlist(self.remote_name, blocks, self.kv.nmem)
        self.seed = pf.seed

    def detach(self):
        self.agent.remove_remote_agent(self.remote_name)
        self.remote = None

    def read(self, remote_ids, local_ids, notif, timeout=30.0):
        """One request; returns (seconds, telemetry) after checking every byte."""
        nreg = 2 * self.a.layers
        t0 = time.monotonic()
        h = self.agent.make_prepped_xfer("READ", self.local, desc_ids(self.a.blocks, nreg, local_ids),
                                         self.remote, desc_ids(self.a.blocks, nreg, remote_ids),
                                         notif)
        st = self.agent.transfer(h)
        end = t0 + timeout
        while st == "PROC":
            st = self.agent.check_xfer_state(h)
            if time.monotonic() > end:
                raise SystemExit("FAIL: request still in progress after %.0f s" % timeout)
        secs = time.monotonic() - t0
        if st != "DONE":
            raise SystemExit("FAIL: request ended %s" % st)
        tel = self.agent.get_xfer_telemetry(h)
        self.agent.release_xfer_handle(h)
        self.verify(remote_ids, local_ids)
        return secs, tel

    def verify(self, remote_ids, local_ids):
        rb, lb = self.a.block_kib * 1024, self.local_bytes
        off = (self.rank % self.a.tp_ratio) * lb
        if getattr(self, "_src_seed", None) != self.seed:
            self._src = [pattern(self.seed, reg, self.a.blocks * rb)
                         for reg in range(2 * self.a.layers)]
            self._src_seed = self.seed
        for reg in range(2 * self.a.layers):
            src = self._src[reg]
            got = self.kv.host(reg)
            for r, l in zip(remote_ids, local_ids):
                want = src[r * rb + off:r * rb + off + lb]
                if not np.array_equal(got[l * lb:(l + 1) * lb], want):
                    raise SystemExit("FAIL: rank %d region %d block %d -> %d: wrong bytes"
                                     % (self.rank, reg, r, l))


def decode_main(a):
    plugin_dir()
    nixl_agent, nixl_agent_config = nixl_api()
    rng = np.random.default_rng(a.seed)
    pf = Prefill(a, a.seed)
    ranks = [DecodeRank(a, r, nixl_agent, nixl_agent_config) for r in range(a.tp_ratio)]
    for d in ranks:
        d.attach(pf)
    out = {"mem": a.mem, "layers": a.layers, "blocks": a.blocks, "block_bytes": a.block_kib * 1024,
           "tp_ratio": a.tp_ratio, "requests": 0, "bytes": 0, "seconds": 0.0}
    sent = []

    def request(k, tag):
        n = int(rng.integers(4, max(5, a.blocks // 4)))
        remote_ids = rng.choice(a.blocks, n, replace=False)
        local_ids = rng.choice(a.blocks, n, replace=False)
        worst = 0.0
        for d in ranks:
            msg = ("%s-%d-r%d" % (tag, k, d.rank)).encode()
            secs, tel = d.read(remote_ids, local_ids, msg)
            worst = max(worst, secs)
            sent.append((d.agent.name, msg))
            out["requests"] += 1
            out["bytes"] += int(tel.totalBytes)
            out["seconds"] += secs
            want = n * 2 * a.layers * d.local_bytes
            if int(tel.totalBytes) != want or int(tel.descCount) < 1:
                raise SystemExit("FAIL: telemetry says %d bytes in %d descriptors; %d expected"
                                 % (tel.totalBytes, tel.descCount, want))
        return worst

    for k in range(a.requests):
        request(k, "req")
    print("requests: %d verified, %.1f MB, %.1f ms per request on average (a correctness "
          "run: see bench/ for speed)" % (out["requests"], out["bytes"] / 1e6,
                                           1e3 * out["seconds"] / max(out["requests"], 1)))
    # Notifications: each request's message once, after its bytes, from its agent.
    got = {}
    deadline = time.monotonic() + 20
    while sum(len(v) for v in got.values()) < len(sent) and time.monotonic() < deadline:
        for k, v in pf.notifs().items():
            got.setdefault(k, []).extend(v)
        time.sleep(0.05)
    for agent, msg in sent:
        if got.get(agent, []).count(msg) != 1:
            raise SystemExit("FAIL: notification %r from %s seen %d times" %
                             (msg, agent, got.get(agent, []).count(msg)))
    for d in ranks:
        d.agent.send_notif(d.remote_name, b"free-blocks")
    deadline = time.monotonic() + 20
    seen = 0
    while seen < len(ranks) and time.monotonic() < deadline:
        seen += sum(v.count(b"free-blocks") for v in pf.notifs().values())
        time.sleep(0.05)
    if seen != len(ranks):
        raise SystemExit("FAIL: send_notif: %d of %d seen" % (seen, len(ranks)))
    print("notifications: %d request messages and %d send_notif, each once" % (len(sent), seen))

    # The prefill worker dies and a new one (same agent name) comes back.
    pf.kill()
    for d in ranks:
        d.detach()
    pf = Prefill(a, a.seed + 1)
    t0 = time.monotonic()
    for d in ranks:
        d.attach(pf)
    attach = time.monotonic() - t0
    first = request(0, "restart")  # the transfer's time, not the test's checking of it
    out["first_after_restart_s"] = attach + first
    for k in range(1, 4):
        request(k, "restart")
    print("restart: the first request after re-adding the prefill was DONE %.3f s after "
          "add_remote_agent (handshake and prep %.3f s, the request %.3f s), verified"
          % (out["first_after_restart_s"], attach, first))
    pf.quit()
    if out["first_after_restart_s"] > 1.0:
        raise SystemExit("FAIL: the first request after a restart took %.2f s (> 1 s)"
                         % out["first_after_restart_s"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    print("vllm sequence: passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=["decode", "prefill"], default="decode")
    ap.add_argument("--name", default="prefill-0")
    ap.add_argument("--mem", choices=["dram", "vram"], default="dram")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--block-kib", type=int, default=16)
    ap.add_argument("--tp-ratio", type=int, choices=[1, 2], default=1)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json")
    a = ap.parse_args()
    a.prefill_name = a.name
    if a.role == "prefill":
        prefill_main(a)
    else:
        decode_main(a)


if __name__ == "__main__":
    main()
