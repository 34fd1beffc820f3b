# SPDX-License-Identifier: Apache-2.0
"""Helpers for driving NIXL agents with backend TPX (tests, bench)."""
import time

import numpy as np


def new_agent(name, backends=("TPX",)):
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except ImportError:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    return nixl_agent(name, nixl_agent_config(backends=list(backends)))


def reg(agent, arr):
    return agent.register_memory([(arr.ctypes.data, arr.nbytes, 0, "")], "DRAM")


def blocks(arr, nblocks, bsize, stride=None, first=0):
    """An Nx3 (addr, len, dev) array of nblocks blocks of arr."""
    stride = stride or bsize
    d = np.zeros((nblocks, 3), dtype=np.uint64)
    d[:, 0] = arr.ctypes.data + first + np.arange(nblocks, dtype=np.uint64) * stride
    d[:, 1] = bsize
    return d


def wait_xfer(agent, h, timeout=30.0):
    """'DONE' or 'ERR' (raises on timeout)."""
    end = time.monotonic() + timeout
    st = "PROC"
    while st == "PROC":
        try:
            st = agent.check_xfer_state(h)
        except Exception:  # the bindings raise some errors (remote disconnect)
            return "ERR"
        if st == "PROC" and time.monotonic() > end:
            raise AssertionError("transfer still in progress after %.0fs" % timeout)
    return st


def run_xfer(agent, op, local, remote, peer, notif=b""):
    h = agent.initialize_xfer(op, agent.get_xfer_descs(local, "DRAM"),
                              agent.get_xfer_descs(remote, "DRAM"), peer, notif)
    try:
        st = agent.transfer(h)
        if st == "PROC":
            st = wait_xfer(agent, h)
        return st
    finally:
        agent.release_xfer_handle(h)
