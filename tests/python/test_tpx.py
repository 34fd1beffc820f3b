"""The Python package `tpx` (ctypes over libtpx's C API) on its own: the same
one-sided cases as the NIXL tests, plus two-sided send/recv and the API's
objects."""
import ctypes
import os
import time

import numpy as np
import pytest

import tpx
from conftest import KiB, MiB, SHAPES, agent_name, pattern, wait_until
from peerproc import Peer, sha


@pytest.fixture
def engines():
    with tpx.Engine(name=agent_name()) as a, tpx.Engine(name=agent_name()) as b:
        yield a, b


def test_version_and_paths():
    assert tpx.version().count(".") == 2
    assert os.path.isfile(tpx.library_path())
    assert os.path.isfile(tpx.nccl_plugin_path())
    assert os.path.isfile(os.path.join(tpx.nixl_plugin_dir(), "libplugin_TPX.so"))


@pytest.mark.parametrize("op", [tpx.READ, tpx.WRITE])
@pytest.mark.parametrize("nblocks,bsize", SHAPES)
def test_transfer_sizes(engines, op, nblocks, bsize):
    a, b = engines
    total = nblocks * bsize
    la, lb = pattern(total, 1), pattern(total, 2)
    ra, rb = a.register(la), b.register(lb)
    remote = a.load_remote(b.metadata())
    offs = np.arange(nblocks, dtype=np.uint64) * bsize
    want_la, want_lb = la.copy(), lb.copy()
    if op == tpx.READ:
        want_la[:] = lb.reshape(nblocks, bsize)[::-1].reshape(-1)
    else:
        want_lb[:] = la.reshape(nblocks, bsize)[::-1].reshape(-1)
    x = remote.prepare(op, ra, offs, rb.export(), offs[::-1], bsize).post(notif=b"n")
    assert x.wait(30000) == total
    wait_until(lambda: b.notifs(), what="notification")
    assert np.array_equal(la, want_la) and np.array_equal(lb, want_lb)


def test_repost_and_notifications(engines):
    a, b = engines
    n, bs = 256, 16 * KiB
    la, lb = np.zeros(n * bs, np.uint8), pattern(n * bs, 3)
    ra, rb = a.register(la), b.register(lb)
    remote = a.load_remote(b.metadata())
    remote.connect()
    offs = np.arange(n) * bs
    prep = remote.prepare(tpx.WRITE, ra, offs, rb.export(), offs, bs)
    for k in range(4):
        la[:] = pattern(n * bs, 10 + k)
        x = prep.post(notif=b"post-%d" % k)
        assert x.wait() == n * bs
        got = wait_until(lambda: b.notifs(), what="notification")
        assert got == [(a_name(a), b"post-%d" % k)]
        assert np.array_equal(la, lb)
        x.release()
    prep.release()
    remote.notify(b"standalone")
    assert wait_until(lambda: b.notifs(), what="notification") == [(a_name(a), b"standalone")]
    c = b.counters()
    assert c["rma_served"] == 4 and c["notifs_received"] == 5


def a_name(engine):
    md = engine.metadata()
    with tpx.Engine(name="probe") as p:
        return p.load_remote(md).name


def test_errors_carry_status(engines):
    a, b = engines
    la, lb = np.zeros(64 * KiB, np.uint8), pattern(64 * KiB, 4)
    ra, rb = a.register(la), b.register(lb)
    remote = a.load_remote(b.metadata())
    desc = rb.export(0, 32 * KiB)
    with pytest.raises(tpx.TpxError) as e:  # past the exported range: refused, nothing moves
        remote.prepare(tpx.READ, ra, [0], desc, [30 * KiB], 4 * KiB)
    assert e.value.status == -1 and e.value.name == "TPX_ERR_INVALID_ARG"
    with pytest.raises(tpx.TpxError) as e:
        a.load_remote(b"garbage")
    assert e.value.status < 0 and e.value.text
    # still works
    x = remote.read(ra, [0], desc, [0], 32 * KiB)
    x.wait()
    assert np.array_equal(la[:32 * KiB], lb[:32 * KiB])


def test_forget_with_live_preparation(engines):
    a, b = engines
    la, lb = np.zeros(1 * MiB, np.uint8), pattern(1 * MiB, 5)
    ra, rb = a.register(la), b.register(lb)
    remote = a.load_remote(b.metadata())
    prep = remote.prepare(tpx.READ, ra, np.arange(256) * 4096, rb.export(),
                          np.arange(256) * 4096, 4096)
    x = prep.post()
    prep.release()  # posts still running keep what they need
    x.wait()
    remote.forget()
    remote = a.load_remote(b.metadata())
    remote.read(ra, [0], rb.export(), [0], 1 * MiB).wait()
    assert np.array_equal(la, lb)


def test_send_recv(engines):
    a, b = engines
    src, dst = pattern(4 * MiB, 6), np.zeros(4 * MiB, np.uint8)
    rs, rd = a.register(src), b.register(dst)
    pa = a.connect("127.0.0.1", b.port, 10000)
    pb = b.accept(10000)
    r = pb.recv(rd, 0, dst.nbytes)
    s = pa.send(rs, 0, src.nbytes)
    assert s.wait(30000) == src.nbytes and r.wait(30000) == src.nbytes
    assert np.array_equal(src, dst)


def test_register_objects(engines):
    a, _ = engines

    class TorchLike:  # what register() needs of a torch.Tensor
        def __init__(self, arr):
            self.arr = arr
            self.is_cuda = False

        def data_ptr(self):
            return self.arr.ctypes.data

        def element_size(self):
            return self.arr.itemsize

        def numel(self):
            return self.arr.size

        def is_contiguous(self):
            return True

    arr = np.zeros(1000, np.float32)
    r = a.register(TorchLike(arr))
    assert r.addr == arr.ctypes.data and r.length == 4000
    r2 = a.register(bytearray(8192))
    assert r2.length == 8192
    assert tpx._bytes_of(type("C", (), {"__cuda_array_interface__": {
        "shape": (4, 1024), "typestr": "<f4", "data": (4096, False), "version": 3}})()) \
        == (4096, 16384, tpx.MEM_CUDA)


def test_two_processes():
    size = 8 * MiB
    p = Peer("tpx", agent_name(), size, seed=7)
    try:
        with tpx.Engine(name=agent_name()) as a:
            la = np.zeros(size, np.uint8)
            ra = a.register(la)
            remote = a.load_remote(p.md)
            assert remote.name == p.name
            desc = bytes.fromhex(p.info)
            offs = np.arange(2048) * 4096
            remote.read(ra, offs, desc, offs, 4096).wait()
            assert np.array_equal(la, pattern(size, 7))
            la[:] = pattern(size, 8)
            remote.write(ra, offs, desc, offs, 4096, notif=b"w").wait()
            wait_until(lambda: p.notifs(), what="notification in the peer")
            assert p.sha() == sha(la)
            me = p.cmd("LOAD " + a.metadata().hex(), "LOADED")
            p.cmd("NOTIFY %s %s" % (me, b"hi".hex()), "NOTIFIED")
            assert wait_until(lambda: a.notifs(), what="notification") == [(p.name, b"hi")]
    finally:
        p.close()


def test_peer_killed_mid_transfer():
    size, name = 16 * MiB, agent_name()
    p = Peer("tpx", name, size, seed=9)
    with tpx.Engine(name=agent_name()) as a:
        la = np.zeros(size, np.uint8)
        ra = a.register(la)
        try:
            remote = a.load_remote(p.md)
            offs = np.arange(4) * 4 * MiB
            prep = remote.prepare(tpx.READ, ra, offs, bytes.fromhex(p.info), offs, 4 * MiB)
            prep.post().wait()
            p.stop()  # every thread stopped: it cannot serve the READ
            t0 = time.monotonic()
            x = prep.post(timeout_ms=20000)
            time.sleep(0.3)
            p.kill()
            with pytest.raises(tpx.TpxError) as e:
                x.wait()
            assert time.monotonic() - t0 < 20
            assert e.value.status in (-22, -20, -44)  # reset / timed out / canceled
            prep.release()
            remote.forget()
            p = Peer("tpx", name, size, seed=10)  # restarted: new metadata
            remote = a.load_remote(p.md)
            remote.prepare(tpx.READ, ra, offs, bytes.fromhex(p.info), offs, 4 * MiB).post().wait()
            assert np.array_equal(la, pattern(size, 10))
        finally:
            p.kill()


def test_struct_sizes():
    """The binding's tpx_engine_params_t is the library's (size set by _init), and
    counters come back through a struct of the binding's own size."""
    buf = (ctypes.c_char * 4096)()
    tpx._api().tpx_engine_params_init(ctypes.cast(buf, ctypes.POINTER(tpx._EngineParams)))
    assert ctypes.c_size_t.from_buffer(buf).value == ctypes.sizeof(tpx._EngineParams)
    with tpx.Engine(name=agent_name()) as e:
        c = e.counters()
        assert c["rma_served"] == 0 and "rma_refused" in c
