# SPDX-License-Identifier: Apache-2.0
"""python -m tpx.nixl_check: does NIXL load the TPX backend here, and does it move bytes?

Run it on the machine (and in the environment) where vLLM, SGLang or Dynamo will run,
before starting them. Two NIXL agents in this process, with backends=["TPX"] and no
backend parameters (as vLLM makes them), register memory, exchange metadata, and READ and
WRITE blocks between them through tpx's engine; every byte is compared. With --mem vram
the blocks are GPU memory (torch), registered with the GPU's devId as vLLM does.

    python -m tpx.nixl_check [--mem dram|vram] [--gpu N] [--blocks 256] [--block-kib 128]

Exit 0 and "nixl_check: OK" when every byte arrived; otherwise the first failure, with
NIXL's and tpx's messages above it. NIXL_PLUGIN_DIR is set to this package's plugin
folder unless it is set already.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, List, Optional


class _Buf:
    """n bytes of host (numpy) or GPU (torch) memory that the check can fill and read."""

    def __init__(self, mem: str, gpu: int, n: int) -> None:
        import numpy as np
        self.mem = mem
        if mem == "vram":
            import torch  # type: ignore
            self.t = torch.zeros(n, dtype=torch.uint8, device="cuda:%d" % gpu)
            self.addr = self.t.data_ptr()
        else:
            self.t = np.zeros(n, dtype=np.uint8)
            self.addr = self.t.ctypes.data

    def fill(self, seed: int) -> None:
        import numpy as np
        data = np.random.default_rng(seed).integers(0, 256, self.t.shape[0], dtype=np.uint8)
        if self.mem == "vram":
            import torch  # type: ignore
            self.t.copy_(torch.from_numpy(data))
            torch.cuda.synchronize()
        else:
            self.t[:] = data

    def host(self) -> Any:
        return self.t.cpu().numpy() if self.mem == "vram" else self.t.copy()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tpx.nixl_check",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--mem", choices=["dram", "vram"], default="dram")
    ap.add_argument("--gpu", type=int, default=0, help="the GPU of --mem vram (default 0)")
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--block-kib", type=int, default=128)
    a = ap.parse_args(argv)

    import numpy as np
    import tpx
    if "NIXL_PLUGIN_DIR" not in os.environ:
        plugin_dir = tpx.nixl_plugin_dir()
        if plugin_dir is None:
            print("nixl_check: this tpx was built without its NIXL backend (no C++ compiler "
                  "at build time): reinstall it where g++ is present, or from the binary "
                  "wheel", file=sys.stderr)
            return 1
        os.environ["NIXL_PLUGIN_DIR"] = plugin_dir
    os.environ.setdefault("TPX_BIND_ADDR", "127.0.0.1")  # both agents are in this process
    try:
        from nixl._api import nixl_agent, nixl_agent_config  # type: ignore
    except ImportError as e:
        print("nixl_check: cannot import nixl._api (%s): pip install nixl (the package vLLM "
              "imports)" % e, file=sys.stderr)
        return 1
    print("tpx %s, NIXL plugin folder %s" % (tpx.version(), os.environ["NIXL_PLUGIN_DIR"]))
    bsize = a.block_kib * 1024
    n = a.blocks * bsize
    kind = "VRAM" if a.mem == "vram" else "DRAM"
    dev = a.gpu if a.mem == "vram" else 0
    try:
        owner = nixl_agent("tpx-check-owner", nixl_agent_config(backends=["TPX"]))
        reader = nixl_agent("tpx-check-reader", nixl_agent_config(backends=["TPX"]))
    except Exception as e:
        print("nixl_check: NIXL could not make an agent with the TPX backend (%s): is "
              "libplugin_TPX.so in NIXL_PLUGIN_DIR?" % e, file=sys.stderr)
        return 1
    sb, db = _Buf(a.mem, a.gpu, n), _Buf(a.mem, a.gpu, n)
    src, dst = sb.addr, db.addr
    owner.register_memory([(src, n, dev, "")], kind)
    reader.register_memory([(dst, n, dev, "")], kind)
    reader.add_remote_agent(owner.get_agent_metadata())
    perm = np.random.default_rng(3).permutation(a.blocks)
    rows = []
    for op, seed in (("READ", 1), ("WRITE", 2)):
        # The side that gives the bytes gets a fresh pattern, the other zeros.
        (sb if op == "READ" else db).fill(seed)
        (db if op == "READ" else sb).fill(100 + seed)
        local = reader.get_xfer_descs([(dst + i * bsize, bsize, dev) for i in range(a.blocks)],
                                      kind)
        remote = reader.get_xfer_descs([(src + int(i) * bsize, bsize, dev) for i in perm], kind)
        t0 = time.monotonic()
        h = reader.initialize_xfer(op, local, remote, "tpx-check-owner", b"")
        st = reader.transfer(h)
        while st == "PROC":
            st = reader.check_xfer_state(h)
            if time.monotonic() - t0 > 60:
                print("nixl_check: %s still in progress after 60 s" % op, file=sys.stderr)
                return 1
        secs = time.monotonic() - t0
        reader.release_xfer_handle(h)
        if st != "DONE":
            print("nixl_check: %s ended %s" % (op, st), file=sys.stderr)
            return 1
        # Local block i and remote block perm[i] must now hold the same bytes.
        local_blocks = db.host().reshape(a.blocks, bsize)
        remote_blocks = sb.host().reshape(a.blocks, bsize)[perm]
        if not np.array_equal(local_blocks, remote_blocks):
            print("nixl_check: %s moved wrong bytes" % op, file=sys.stderr)
            return 1
        rows.append((op, secs))
    for op, secs in rows:
        print("%-5s %d x %d KiB of %s: verified, %.3f s (first use included: connect and "
              "registration)" % (op, a.blocks, a.block_kib, kind, secs))
    print("nixl_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
