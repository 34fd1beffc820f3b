#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python package on GPU memory (run by bench/gpu/run.sh): two engines on one
GPU, a torch CUDA tensor registered through data_ptr() (MEM_CUDA), a READ of 1000
x 128 KiB blocks in reversed order, byte-verified with torch.equal, then timed.
Exit 77 without torch or a GPU. Uses python/tpx of this tree and the library
named by TPX_LIBRARY."""
import os
import sys
import time

try:
    import torch
except ImportError:
    print("py-vram: torch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("py-vram: no CUDA device")
    sys.exit(77)
import numpy as np

import tpx

dev = int(os.environ.get("DEVICE", "0"))
n, bs, iters = 1000, 128 * 1024, int(os.environ.get("ITERS", "20"))
src = torch.randint(0, 256, (n * bs,), dtype=torch.uint8, device="cuda:%d" % dev)
dst = torch.zeros_like(src)
with tpx.Engine(name="py-a", gpu=dev) as a, tpx.Engine(name="py-b", gpu=dev) as b:
    ra, rb = a.register(dst), b.register(src)
    remote = a.load_remote(b.metadata())
    remote.connect()
    offs = np.arange(n, dtype=np.uint64) * bs
    prep = remote.prepare(tpx.READ, ra, offs, rb.export(), offs[::-1].copy(), bs)
    prep.post().wait()
    torch.cuda.synchronize()
    ok = torch.equal(dst.view(n, bs), src.view(n, bs).flip(0))
    t0 = time.perf_counter()
    for _ in range(iters):
        prep.post().wait()
    dt = time.perf_counter() - t0
    print("python tpx VRAM READ %d x 128 KiB: %.2f GB/s %s"
          % (n, n * bs * iters / dt / 1e9, "verified" if ok else "MISMATCH"))
    sys.exit(0 if ok else 1)
