# SPDX-License-Identifier: Apache-2.0
"""NIXL with backend TPX (libplugin_TPX.so from the tpx wheel) loaded into the real
NIXL wheel from PyPI: the plugin ABI, transfers, notifications and failures."""
import time

import numpy as np
import pytest

from conftest import KiB, MiB, SHAPES, agent_name, pattern, wait_until
import nixl_util as nu
from peerproc import Peer, sha


class Pair:
    """Two agents in this process; load() gives `a` the metadata of `b`."""

    def __init__(self):
        self.a, self.b = nu.new_agent(agent_name()), nu.new_agent(agent_name())

    def load(self):
        peer = self.a.add_remote_agent(self.b.get_agent_metadata())
        return peer.decode() if isinstance(peer, bytes) else peer


@pytest.fixture
def pair():
    return Pair()


def test_plugin_loads():
    a = nu.new_agent(agent_name())
    assert "TPX" in a.get_plugin_list()
    assert set(a.get_plugin_mem_types("TPX")) >= {"DRAM_SEG", "VRAM_SEG"}
    assert "gpu" in a.get_plugin_params("TPX")
    assert set(a.get_backend_mem_types("TPX")) >= {"DRAM_SEG", "VRAM_SEG"}


@pytest.mark.parametrize("op", ["READ", "WRITE"])
@pytest.mark.parametrize("nblocks,bsize", SHAPES)
def test_transfer_sizes(pair, op, nblocks, bsize):
    a, b = pair.a, pair.b
    total = nblocks * bsize
    la, lb = pattern(total, 1), pattern(total, 2)
    ra, rb = nu.reg(a, la), nu.reg(b, lb)
    peer = pair.load()
    # scattered blocks: block i of the initiator <-> block (n-1-i) of the target
    local = nu.blocks(la, nblocks, bsize)
    remote = nu.blocks(lb, nblocks, bsize)[::-1].copy()
    want_la, want_lb = la.copy(), lb.copy()
    src, dst = (lb, want_la) if op == "READ" else (la, want_lb)
    for i in range(nblocks):
        j = nblocks - 1 - i
        if op == "READ":
            dst[i * bsize:(i + 1) * bsize] = src[j * bsize:(j + 1) * bsize]
        else:
            dst[j * bsize:(j + 1) * bsize] = src[i * bsize:(i + 1) * bsize]
    assert nu.run_xfer(a, op, local, remote, peer, b"n") == "DONE"
    if op == "WRITE":  # the notification comes after the data: then lb is complete
        wait_until(lambda: b.get_new_notifs(), what="notification")
    assert np.array_equal(la, want_la) and np.array_equal(lb, want_lb)
    a.deregister_memory(ra)
    b.deregister_memory(rb)


def test_repost_and_notifications(pair):
    a, b = pair.a, pair.b
    n, bs = 256, 16 * KiB
    la, lb = np.zeros(n * bs, np.uint8), pattern(n * bs, 3)
    ra, rb = nu.reg(a, la), nu.reg(b, lb)
    peer = pair.load()
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(nu.blocks(la, n, bs), "DRAM"),
                          a.get_xfer_descs(nu.blocks(lb, n, bs), "DRAM"), peer, b"first")
    me = a.name if isinstance(a.name, str) else a.name.decode()
    for k in range(4):  # one preparation, posted again after each completion
        la[:] = pattern(n * bs, 10 + k)
        msg = b"post-%d" % k
        st = a.transfer(h, msg)
        assert st in ("PROC", "DONE")
        assert nu.wait_xfer(a, h) == "DONE"
        got = wait_until(lambda: b.get_new_notifs(), what="transfer notification")
        assert got == {me: [msg]}  # sender agent name (36 chars) and message
        assert np.array_equal(la, lb)  # the data was there when it arrived
    a.release_xfer_handle(h)
    # standalone notification, and one from the other direction
    a.send_notif(peer, b"standalone")
    assert wait_until(lambda: b.get_new_notifs(), what="notification") == {me: [b"standalone"]}
    a.deregister_memory(ra)
    b.deregister_memory(rb)


def test_out_of_range_refused(pair):
    a, b = pair.a, pair.b
    la, lb = np.zeros(64 * KiB, np.uint8), pattern(64 * KiB, 4)
    ra, rb = nu.reg(a, la), nu.reg(b, lb)
    peer = pair.load()
    bad = nu.blocks(lb, 1, 8 * KiB, first=60 * KiB)  # runs 4 KiB past the registered end
    with pytest.raises(Exception):
        h = a.initialize_xfer("READ", a.get_xfer_descs(nu.blocks(la, 1, 8 * KiB), "DRAM"),
                              a.get_xfer_descs(bad, "DRAM"), peer)
        st = a.transfer(h)
        if st != "ERR" and nu.wait_xfer(a, h) != "ERR":
            pytest.fail("an out-of-range READ succeeded")
        raise RuntimeError("refused")
    # and the agents still work
    assert nu.run_xfer(a, "READ", nu.blocks(la, 16, 4 * KiB), nu.blocks(lb, 16, 4 * KiB),
                       peer) == "DONE"
    assert np.array_equal(la, lb)
    a.deregister_memory(ra)
    b.deregister_memory(rb)


def test_deregistered_memory_unreachable(pair):
    """b registers a buffer, then its first 4 KiB again (one tpx region, two
    registrations), then deregisters the buffer: a holds b's earlier metadata,
    and its WRITE into the buffer must be refused, not land."""
    a, b = pair.a, pair.b
    la = np.full(1 * MiB, 0xAB, np.uint8)
    lb = np.zeros(1 * MiB, np.uint8)
    ra = nu.reg(a, la)
    r_all = nu.reg(b, lb)
    r_head = b.register_memory([(lb.ctypes.data, 4 * KiB, 0, "")], "DRAM")
    peer = pair.load()
    b.deregister_memory(r_all)
    try:
        st = nu.run_xfer(a, "WRITE", nu.blocks(la, 1, 4 * KiB),
                         nu.blocks(lb, 1, 4 * KiB, first=512 * KiB), peer)
    except Exception:  # refused at preparation: as good
        st = "ERR"
    assert st == "ERR"
    assert not lb[512 * KiB:516 * KiB].any()  # it was written before
    # the registration still alive still serves
    assert nu.run_xfer(a, "WRITE", nu.blocks(la, 1, 4 * KiB), nu.blocks(lb, 1, 4 * KiB),
                       peer) == "DONE"
    assert (lb[:4 * KiB] == 0xAB).all()
    b.deregister_memory(r_head)
    a.deregister_memory(ra)


def test_disconnect_with_live_requests(pair):
    a, b = pair.a, pair.b
    la, lb = np.zeros(1 * MiB, np.uint8), pattern(1 * MiB, 5)
    ra, rb = nu.reg(a, la), nu.reg(b, lb)
    peer = pair.load()
    md = b.get_agent_metadata()
    h = a.initialize_xfer("READ", a.get_xfer_descs(nu.blocks(la, 256, 4 * KiB), "DRAM"),
                          a.get_xfer_descs(nu.blocks(lb, 256, 4 * KiB), "DRAM"), peer)
    h2 = a.initialize_xfer("READ", a.get_xfer_descs(nu.blocks(la, 256, 4 * KiB), "DRAM"),
                           a.get_xfer_descs(nu.blocks(lb, 256, 4 * KiB), "DRAM"), peer)
    assert a.transfer(h2) in ("PROC", "DONE")  # maybe still moving
    a.remove_remote_agent(peer)  # NIXL disconnects the backend: requests still exist
    a.release_xfer_handle(h)
    a.release_xfer_handle(h2)
    # metadata loaded again: transfers work again
    peer2 = a.add_remote_agent(md)
    peer2 = peer2.decode() if isinstance(peer2, bytes) else peer2
    assert nu.run_xfer(a, "READ", nu.blocks(la, 256, 4 * KiB), nu.blocks(lb, 256, 4 * KiB),
                       peer2) == "DONE"
    assert np.array_equal(la, lb)
    a.deregister_memory(ra)
    b.deregister_memory(rb)


def test_two_processes():
    size = 8 * MiB
    p = Peer("nixl", agent_name(), size, seed=7)
    try:
        a = nu.new_agent(agent_name())
        me = a.name if isinstance(a.name, str) else a.name.decode()
        peer = a.add_remote_agent(p.md)
        peer = peer.decode() if isinstance(peer, bytes) else peer
        assert peer == p.name
        p.cmd("LOAD " + a.get_agent_metadata().hex(), "LOADED")
        base = int(p.info)
        remote = np.zeros((2048, 3), np.uint64)
        remote[:, 0] = base + np.arange(2048, dtype=np.uint64) * 4096
        remote[:, 1] = 4096
        la = np.zeros(size, np.uint8)
        ra = nu.reg(a, la)
        # READ all of it, then WRITE new bytes back with a notification
        assert nu.run_xfer(a, "READ", nu.blocks(la, 2048, 4096), remote, peer) == "DONE"
        assert np.array_equal(la, pattern(size, 7))
        la[:] = pattern(size, 8)
        assert nu.run_xfer(a, "WRITE", nu.blocks(la, 2048, 4096), remote, peer, b"w") == "DONE"
        wait_until(lambda: p.notifs().get(me) == [b"w"], what="notification in the peer")
        assert p.sha() == sha(la)
        # the peer's standalone notification to us
        p.cmd("NOTIFY %s %s" % (me, b"hi".hex()), "NOTIFIED")
        assert wait_until(lambda: a.get_new_notifs(), what="notification") == {p.name: [b"hi"]}
        a.deregister_memory(ra)
    finally:
        p.close()


def test_peer_killed_mid_transfer():
    """A peer dies while a READ from it is in flight: the error comes before the
    deadline; the restarted peer (same agent name, new metadata) serves the next one."""
    size, name = 16 * MiB, agent_name()
    p = Peer("nixl", name, size, seed=9)
    a = nu.new_agent(agent_name())
    la = np.zeros(size, np.uint8)
    ra = nu.reg(a, la)
    try:
        peer = a.add_remote_agent(p.md)
        remote = nu.blocks(la, 4, 4 * MiB)
        remote[:, 0] = int(p.info) + np.arange(4, dtype=np.uint64) * (4 * MiB)
        h = a.initialize_xfer("READ", a.get_xfer_descs(nu.blocks(la, 4, 4 * MiB), "DRAM"),
                              a.get_xfer_descs(remote, "DRAM"), peer)
        assert nu.run_xfer(a, "READ", nu.blocks(la, 4, 4 * MiB), remote, peer) == "DONE"
        p.stop()  # it cannot serve the READ...
        t0 = time.monotonic()
        assert a.transfer(h) == "PROC"
        time.sleep(0.3)
        p.kill()  # ... and then dies in the middle of it
        assert nu.wait_xfer(a, h, timeout=20) == "ERR"
        assert time.monotonic() - t0 < 20
        a.release_xfer_handle(h)
        # a restarted peer: same agent name, new metadata
        p = Peer("nixl", name, size, seed=10)
        try:
            a.remove_remote_agent(peer)
        except Exception:
            pass  # NIXL may have dropped it already (remote disconnect)
        peer = a.add_remote_agent(p.md)
        remote = nu.blocks(la, 4, 4 * MiB)
        remote[:, 0] = int(p.info) + np.arange(4, dtype=np.uint64) * (4 * MiB)
        assert nu.run_xfer(a, "READ", nu.blocks(la, 4, 4 * MiB), remote, peer) == "DONE"
        assert np.array_equal(la, pattern(size, 10))
    finally:
        p.kill()
        a.deregister_memory(ra)


def test_load_dead_peer_does_not_block():
    """loadRemoteConnInfo must not wait for a connection (NIXL calls it under its
    lock): the metadata of a dead peer loads at once, a transfer to it fails, and
    the agent is torn down while its background connect is still retrying."""
    p = Peer("nixl", agent_name(), 1 * MiB, seed=11)
    md, base = p.md, int(p.info)
    p.kill()
    a = nu.new_agent(agent_name())
    la = np.zeros(1 * MiB, np.uint8)
    ra = nu.reg(a, la)
    t0 = time.monotonic()
    peer = a.add_remote_agent(md)
    assert time.monotonic() - t0 < 5  # TPX_CONNECT_TIMEOUT_MS is 30 s
    remote = nu.blocks(la, 1, 4096)
    remote[:, 0] = base
    t0 = time.monotonic()
    with pytest.raises(Exception):
        h = a.initialize_xfer("READ", a.get_xfer_descs(nu.blocks(la, 1, 4096), "DRAM"),
                              a.get_xfer_descs(remote, "DRAM"), peer)
        st = a.transfer(h)
        if st == "PROC":
            st = nu.wait_xfer(a, h, timeout=60)
        assert st != "DONE"
        raise RuntimeError("refused")
    assert time.monotonic() - t0 < 15  # a post waits at most 3 s for a connection
    a.deregister_memory(ra)
    t0 = time.monotonic()
    del a
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("name_len", [62, 63, 64, 200])
def test_agent_names(name_len):
    """Engine names are the agents' names up to 62 bytes (UUIDs are 36); longer ones
    (to 255) travel in front of each notification; 300 bytes are refused cleanly."""
    a, b = nu.new_agent("a" * (name_len - 5) + agent_name()[:5]), nu.new_agent(agent_name())
    la, lb = np.zeros(4096, np.uint8), pattern(4096, 12)
    ra, rb = nu.reg(a, la), nu.reg(b, lb)
    peer = b.add_remote_agent(a.get_agent_metadata())
    assert nu.run_xfer(b, "WRITE", nu.blocks(lb, 1, 4096), nu.blocks(la, 1, 4096), peer,
                       b"x") == "DONE"
    assert wait_until(lambda: a.get_new_notifs(), what="notification") == {b.name: [b"x"]}
    a.add_remote_agent(b.get_agent_metadata())
    a.send_notif(b.name, b"back")  # a long-named sender: a's name arrives in full
    got = wait_until(lambda: b.get_new_notifs(), what="notification")
    assert got == {a.name: [b"back"]}
    with pytest.raises(Exception):
        nu.new_agent("c" * 300)
    a.deregister_memory(ra)
    b.deregister_memory(rb)


def test_vram_without_gpu_refused():
    """VRAM_SEG is offered; without a GPU (CI) registering "VRAM" fails cleanly."""
    a = nu.new_agent(agent_name())
    buf = np.zeros(1 * MiB, np.uint8)
    with pytest.raises(Exception):
        a.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "VRAM")
    nu.reg(a, buf)  # DRAM still registers
