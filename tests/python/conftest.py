# SPDX-License-Identifier: Apache-2.0
"""Shared set-up of the Python tests (run by ctest through run_pytest.sh, in a
venv holding the real NIXL wheel from PyPI and the tpx wheel built from this
tree). Everything stays on loopback: TPX_BIND_ADDR=127.0.0.1 and
TPX_SOCKET_IFNAME=lo come from the environment ctest sets."""
import os
import sys
import time
import uuid

import numpy as np
import pytest

import tpx

# NIXL reads NIXL_PLUGIN_DIR once, when its first agent is made; it replaces
# NIXL's own plugin folder.
os.environ["NIXL_PLUGIN_DIR"] = tpx.nixl_plugin_dir()
os.environ.setdefault("TPX_BIND_ADDR", "127.0.0.1")
os.environ.setdefault("TPX_SOCKET_IFNAME", "lo")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

KiB, MiB = 1024, 1024 * 1024

# (blocks, block size) pairs: 1..10,000 blocks of 4 KiB..4 MiB, at most
# 40 MiB each so CI stays quick.
SHAPES = [(1, 4 * KiB), (10000, 4 * KiB), (1000, 16 * KiB), (64, 128 * KiB), (7, 2 * MiB),
          (4, 4 * MiB), (1, 4 * MiB)]


def pattern(n, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, n, dtype=np.uint8)


def wait_until(pred, timeout=20.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.002)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def agent_name():
    return str(uuid.uuid4())  # 36 characters, as vLLM names its agents


@pytest.fixture
def nixl_api():
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except ImportError:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    return nixl_agent, nixl_agent_config
