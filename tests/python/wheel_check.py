# SPDX-License-Identifier: Apache-2.0
"""Run from a venv where only the tpx wheel (and numpy, NIXL from PyPI) was
installed, with no compiler on PATH (tests/python/wheel.sh): the package
imports from that venv, says the one version everywhere, carries its
libraries and the unpack kernel, moves bytes with a verified loopback READ,
and NIXL loads its backend TPX from the wheel and moves bytes through it.

    python wheel_check.py <VERSION file> <unpack_kernel.fatbin>
"""
import importlib.metadata
import os
import sys
import time

import numpy as np

import tpx

version = open(sys.argv[1]).read().strip()
fatbin = open(sys.argv[2], "rb").read()
venv = os.path.realpath(sys.prefix)

# the one version: the library, the Python API, the wheel's metadata
assert os.path.realpath(tpx.__file__).startswith(venv), tpx.__file__
assert tpx.version() == version, (tpx.version(), version)
assert tpx.__version__ == version, tpx.__version__
assert importlib.metadata.version("tpx") == version
print(f"tpx {tpx.version()} from {os.path.dirname(tpx.__file__)}")

# the libraries in the wheel; the kernel's fatbin inside libtpx and the NIXL
# backend (which links libtpx statically), byte for byte
for p in (tpx.library_path(), tpx.nccl_plugin_path(), tpx.nccl_plugin_path(strict_tcpx=True),
          os.path.join(tpx.nixl_plugin_dir(), "libplugin_TPX.so")):
    assert os.path.isfile(p), p
for p in (tpx.library_path(), os.path.join(tpx.nixl_plugin_dir(), "libplugin_TPX.so")):
    assert open(p, "rb").read().find(fatbin) >= 0, f"no unpack kernel in {p}"
print("libtpx and the NIXL backend embed the unpack kernel fatbin (%d bytes)" % len(fatbin))

# the tools, as console scripts of the venv
import subprocess  # noqa: E402
out = subprocess.run([os.path.join(sys.prefix, "bin", "tpx-perf"), "--version"], check=True,
                     capture_output=True, text=True).stdout.strip()
assert out == f"tpx-perf {version} (libtpx {version})", out
print(out)

# a loopback READ through the Python API, verified
n, bs = 64, 64 * 1024
rng = np.random.default_rng(7)
src = rng.integers(0, 256, n * bs, dtype=np.uint8)
dst = np.zeros_like(src)
with tpx.Engine(name="wheel-a") as a, tpx.Engine(name="wheel-b") as b:
    ra, rb = a.register(dst), b.register(src)
    offs = np.arange(n, dtype=np.uint64) * bs
    x = a.load_remote(b.metadata()).read(ra, offs, rb.export(), offs[::-1], bs)
    assert x.wait(30000) == n * bs
    assert np.array_equal(dst.reshape(n, bs), src.reshape(n, bs)[::-1])
print(f"loopback READ of {n} x {bs} bytes: verified")

# NIXL loads the backend TPX from the wheel and READs through it
os.environ["NIXL_PLUGIN_DIR"] = tpx.nixl_plugin_dir()
from nixl._api import nixl_agent, nixl_agent_config  # noqa: E402

agents = [nixl_agent(f"wheel-nixl-{i}", nixl_agent_config(backends=["TPX"])) for i in (0, 1)]
assert "TPX" in agents[0].get_plugin_list(), agents[0].get_plugin_list()
bufs = [np.zeros(n * bs, np.uint8), rng.integers(0, 256, n * bs, dtype=np.uint8)]
for ag, buf in zip(agents, bufs):
    ag.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
agents[0].add_remote_agent(agents[1].get_agent_metadata())
h = agents[0].initialize_xfer(
    "READ", agents[0].get_xfer_descs([(bufs[0].ctypes.data, bufs[0].nbytes, 0)], "DRAM"),
    agents[0].get_xfer_descs([(bufs[1].ctypes.data, bufs[1].nbytes, 0)], "DRAM"),
    "wheel-nixl-1", b"")
st, end = agents[0].transfer(h), time.monotonic() + 30
while st == "PROC" and time.monotonic() < end:
    st = agents[0].check_xfer_state(h)
assert st == "DONE", st
assert np.array_equal(bufs[0], bufs[1])
agents[0].release_xfer_handle(h)
print("NIXL backend TPX from the wheel: loaded, READ verified")
