# SPDX-License-Identifier: Apache-2.0
"""The Python package `tpx` (ctypes over libtpx's C API) on its own: the same
one-sided cases as the NIXL tests, plus two-sided send/recv and the API's
objects."""
import ctypes
import mmap
import os
import subprocess
import sys
import threading
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


def test_release_with_live_preparation(engines):
    a, b = engines
    la, lb = np.zeros(1 * MiB, np.uint8), pattern(1 * MiB, 5)
    ra, rb = a.register(la), b.register(lb)
    remote = a.load_remote(b.metadata())
    prep = remote.prepare(tpx.READ, ra, np.arange(256) * 4096, rb.export(),
                          np.arange(256) * 4096, 4096)
    x = prep.post()
    prep.release()  # posts still running keep what they need
    x.wait()
    remote.release()
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
            remote.release()
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


def test_export_counts_from_the_registered_buffer(engines):
    """A buffer inside one registered before shares its library region (which starts
    before it): Region.export(), send/recv and prepare's local offsets still count from
    the buffer given to register() and stay within its length."""
    a, b = engines
    big = pattern(1 * MiB, 11)
    rbig = a.register(big)
    small = big[64 * KiB:68 * KiB]
    rs = a.register(small)
    assert rs.addr == small.ctypes.data and rs.length == 4 * KiB
    assert rs.base == rbig.addr  # the library's region is big's
    assert tpx.rdesc_info(rs.export()) == (small.ctypes.data, 4 * KiB)
    assert tpx.rdesc_info(rs.export(1024, 512)) == (small.ctypes.data + 1024, 512)
    assert tpx.rdesc_info(rs.export(1024)) == (small.ctypes.data + 1024, 3 * KiB)
    for off, n in [(8192, 4096), (4096, 0), (0, 4097), (4000, 200), (-1, 10)]:
        with pytest.raises(ValueError):
            rs.export(off, n)
    buf = np.zeros(8 * KiB, np.uint8)
    rb = b.register(buf)
    remote = b.load_remote(a.metadata())
    remote.read(rb, [0], rs.export(), [0], 4 * KiB).wait(30000)
    assert np.array_equal(buf[:4 * KiB], small)
    # local blocks: within the registered buffer only (from its own byte 0)
    with pytest.raises(ValueError):
        a.load_remote(b.metadata()).prepare(tpx.READ, rs, [4 * KiB], rb.export(), [0], 1)
    rl = a.load_remote(b.metadata())
    rl.read(rs, [1024], rb.export(), [0], 1024).wait(30000)
    assert np.array_equal(small[1024:2048], buf[:1024])
    # two-sided: offsets from the registered buffer, range checked
    pa = a.connect("127.0.0.1", b.port, 10000)
    pb = b.accept(10000)
    with pytest.raises(ValueError):
        pa.send(rs, 4 * KiB - 10, 11)
    buf[:] = 0
    r = pb.recv(rb, 0, 4 * KiB)
    assert pa.send(rs, 2 * KiB, 2 * KiB).wait(30000) == 2 * KiB
    assert r.wait(30000) == 2 * KiB
    assert np.array_equal(buf[:2 * KiB], small[2 * KiB:])


def test_deregister_ends_the_regions_exports(engines):
    """Each Region's exports end when it is deregistered, although the library's region
    lives on in another registration that shares it."""
    a, b = engines
    big = pattern(1 * MiB, 12)
    rbig = a.register(big)
    rs = a.register(big[:4 * KiB])
    dbig, dsmall = rbig.export(), rs.export()
    buf = np.zeros(1 * MiB, np.uint8)
    rb = b.register(buf)
    remote = b.load_remote(a.metadata())
    remote.read(rb, [0], dbig, [0], 1 * MiB).wait(30000)
    rbig.deregister()
    with pytest.raises(tpx.TpxError) as e:
        remote.read(rb, [0], dbig, [0], 1 * MiB).wait(30000)
    assert e.value.name == "TPX_ERR_ACCESS"
    remote.read(rb, [0], dsmall, [0], 4 * KiB).wait(30000)  # rs's own export lives on
    d2 = rs.export(0, 1024)
    rs.unexport(d2)
    with pytest.raises(tpx.TpxError) as e:
        rs.unexport(d2)
    assert e.value.name == "TPX_ERR_NOT_FOUND"
    with pytest.raises(tpx.TpxError) as e:
        remote.read(rb, [0], d2, [0], 1024).wait(30000)
    assert e.value.name == "TPX_ERR_ACCESS"
    rs.deregister()
    with pytest.raises(tpx.TpxError) as e:
        remote.read(rb, [0], dsmall, [0], 4 * KiB).wait(30000)
    assert e.value.name == "TPX_ERR_ACCESS"
    with pytest.raises(tpx.TpxError) as e:
        rs.export()
    assert e.value.name == "TPX_ERR_INVALID_STATE"


def test_registered_buffer_is_pinned(engines):
    """While registered, a bytearray cannot be resized (its memory moved) nor an mmap
    closed; deregister() and the engine's close() let go of them."""
    a, _ = engines
    ba = bytearray(4096)
    r = a.register(ba)
    with pytest.raises(BufferError):
        ba.extend(b"\0" * 100000)
    m = mmap.mmap(-1, 8192)
    rm = a.register(m)
    with pytest.raises(BufferError):
        m.close()
    r.deregister()
    ba.extend(b"\0" * 100000)
    rm.deregister()
    m.close()
    ba2 = bytearray(4096)
    with tpx.Engine(name=agent_name()) as e:
        e.register(ba2)
        with pytest.raises(BufferError):
            ba2.extend(b"\0" * 4096)
    ba2.extend(b"\0" * 4096)


def test_close_ends_blocked_accepts(monkeypatch):
    """Engine.close() while threads are inside accept() (one with the default
    timeout, TPX_CONNECT_TIMEOUT_MS = 30 s): the accepts end within a slice
    (TPX_ERR_INVALID_STATE) and close() returns after them, not after their
    timeouts; new calls are refused (no use of a freed engine)."""
    lib = tpx._api()
    real, lock = lib.tpx_peer_accept, threading.Lock()
    inside = {"now": 0, "max": 0}  # threads inside the library's accept

    def accept_counted(*a):
        with lock:
            inside["now"] += 1
            inside["max"] = max(inside["max"], inside["now"])
        try:
            return real(*a)
        finally:
            with lock:
                inside["now"] -= 1

    monkeypatch.setattr(lib, "tpx_peer_accept", accept_counted)
    e = tpx.Engine(name=agent_name())
    res = []

    def acc(ms):
        try:
            e.accept(ms)
            res.append("accepted")
        except tpx.TpxError as ex:
            res.append(ex.name)

    ts = [threading.Thread(target=acc, args=(ms,)) for ms in (-1, 3000, 20000)]
    for t in ts:
        t.start()
    deadline = time.monotonic() + 10
    while inside["max"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inside["max"] == 3, "the accept() calls did not start"
    t0 = time.monotonic()
    e.close()
    closed, still_inside = time.monotonic(), inside["now"]
    assert closed - t0 < 2.0, f"close() took {closed - t0:.1f} s: it waited for the accepts' timeouts"
    assert still_inside == 0, "close() returned while accept() calls were in the library"
    for t in ts:
        t.join(10)
    assert res == ["TPX_ERR_INVALID_STATE"] * 3, res
    with pytest.raises(tpx.TpxError) as ex:
        e.metadata()
    assert ex.value.name == "TPX_ERR_INVALID_STATE" and "closed" in str(ex.value)
    with pytest.raises(tpx.TpxError):
        e.accept(0)
    e.close()  # again: nothing


def test_accept_timeouts():
    """accept(0) says TPX_INPROGRESS at once; accept(ms) waits ms (in slices) and
    says TPX_ERR_TIMED_OUT."""
    with tpx.Engine(name=agent_name()) as e:
        with pytest.raises(tpx.TpxError) as ex:
            e.accept(0)
        assert ex.value.name == "TPX_INPROGRESS"
        for ms in (50, 350):
            t0 = time.monotonic()
            with pytest.raises(tpx.TpxError) as ex:
                e.accept(ms)
            took = (time.monotonic() - t0) * 1000
            assert ex.value.name == "TPX_ERR_TIMED_OUT" and ms - 5 <= took < ms + 1500, (ms, took)


CLOSE_WHILE_WAITING = """
import sys, threading, time, numpy as np, tpx
lib = tpx._api()
real_wait, returned = lib.tpx_xfer_wait, []
def wait_counted(*a):  # the library's wait, noting each return
    try:
        return real_wait(*a)
    finally:
        returned.append(1)
lib.tpx_xfer_wait = wait_counted
e1, e2 = tpx.Engine(name="a"), tpx.Engine(name="b")
reg = e1.register(np.zeros(1 << 16, np.uint8))
p = e1.connect("127.0.0.1", e2.port, 10000)
q = e2.accept(10000)
res = []
def waiter(x):
    try:
        res.append(x.wait(10000))
    except tpx.TpxError as ex:
        res.append(ex.name)
x = p.recv(reg, 0, 4096)                 # nothing is ever sent: it waits
t = threading.Thread(target=waiter, args=(x,)); t.start()
time.sleep(0.5)
t0 = time.monotonic()
x.release()                              # release of a transfer being waited on
# waited: the library's wait had returned (the waiter's thread itself may still be
# finishing, so res is read after the join)
back = len(returned)
t.join()
print("release", "waited" if back == 1 else "did not wait", res, flush=True)
x = p.recv(reg, 0, 4096)
t = threading.Thread(target=waiter, args=(x,)); t.start()
time.sleep(0.5)
t0 = time.monotonic()
e1.close()                               # close of the engine of a transfer being waited on
took, back = round(time.monotonic() - t0, 1), len(returned)
t.join()
print("close", "waited" if back == 2 else "did not wait", res, took, flush=True)
e2.close()
print("ok", flush=True)
"""


def test_close_or_release_while_a_transfer_is_waited_on():
    """Xfer.release() and Engine.close() while another thread is in Xfer.wait() on it:
    the wait is woken (TPX_ERR_CANCELED) and waited for before anything is freed."""
    p = subprocess.run([sys.executable, "-c", CLOSE_WHILE_WAITING], capture_output=True,
                       text=True, timeout=120)
    out = p.stdout.splitlines()
    assert p.returncode == 0, f"rc {p.returncode}: {p.stdout} {p.stderr[-2000:]}"
    assert out[0] == "release waited ['TPX_ERR_CANCELED']", p.stdout
    assert out[1].startswith("close waited ['TPX_ERR_CANCELED', 'TPX_ERR_CANCELED']"), p.stdout
    assert float(out[1].split()[-1]) < 5, p.stdout  # woken, not left to its 10 s wait
    assert out[2] == "ok"


def kv_layers(engine, nlayers, size, seed):
    """K and V arrays of nlayers layers (as vLLM registers them), registered and exported."""
    arrs = [pattern(size, seed + i) for i in range(2 * nlayers)]
    regs = [engine.register(x) for x in arrs]
    return arrs, regs, [r.export() for r in regs]


@pytest.mark.parametrize("form", ["entries", "columns", "desc_array"])
def test_prepare_many_regions(engines, form):
    """One transfer over the blocks of 2 x layers regions on each side, in each form."""
    a, b = engines
    nl, size, bs = 3, 64 * KiB, 4 * KiB
    dst, dregs, _ = kv_layers(a, nl, size, 100)
    src, _, sdescs = kv_layers(b, nl, size, 200)
    for x in dst:
        x[:] = 0
    remote = a.load_remote(b.metadata())
    # block j of region i goes to block (j + i) % 16 of region (i + 1) % (2 nl)
    nb = size // bs
    ents = [(dregs[(i + 1) % (2 * nl)], ((j + i) % nb) * bs, sdescs[i], j * bs, bs)
            for i in range(2 * nl) for j in range(nb)]
    if form == "entries":
        prep = remote.prepare(tpx.READ, ents)
    else:
        cols = list(zip(*ents))
        descs = cols[2] if form == "columns" else np.frombuffer(b"".join(cols[2]), np.uint8) \
            .reshape(-1, tpx.RDESC_SIZE)
        prep = remote.prepare(tpx.READ, list(cols[0]), np.array(cols[1]), descs,
                              np.array(cols[3]), bs)
    assert prep.post().wait(30000) == 2 * nl * size
    for i in range(2 * nl):
        got = dst[(i + 1) % (2 * nl)].reshape(nb, bs)
        want = src[i].reshape(nb, bs)
        for j in range(nb):
            assert np.array_equal(got[(j + i) % nb], want[j])


def test_prepare_refusals(engines):
    a, b = engines
    la, lb = np.zeros(64 * KiB, np.uint8), pattern(64 * KiB, 9)
    ra, rb = a.register(la), b.register(lb)
    desc = rb.export()
    remote = a.load_remote(b.metadata())
    with pytest.raises(ValueError, match="entry 1 has 4 fields"):
        remote.prepare(tpx.READ, [(ra, 0, desc, 0, 8), (ra, 0, desc, 0)])
    with pytest.raises(ValueError, match="differ in length"):
        remote.prepare(tpx.READ, ra, [0, 4096], desc, [0, 4096, 8192], 4096)
    with pytest.raises(ValueError, match="local block 1 .* leaves the 65536 bytes"):
        remote.prepare(tpx.READ, ra, [0, 62 * KiB], desc, [0, 0], 4 * KiB)
    with pytest.raises(ValueError, match="47 bytes, not 48"):
        remote.prepare(tpx.READ, ra, 0, desc[:47], 0, 4096)
    with pytest.raises(TypeError, match="not a Region"):
        remote.prepare(tpx.READ, [ra, la], [0, 0], desc, [0, 0], 4096)
    with pytest.raises(TypeError, match="one list of entries"):
        remote.prepare(tpx.READ, ra, [0], desc)
    with pytest.raises(ValueError, match="negative"):
        remote.prepare(tpx.READ, ra, [-1], desc, [0], 8)
    with pytest.raises(ValueError, match="no blocks"):
        remote.prepare(tpx.READ, [])
    # scalars for every field: one block; descriptors given once per entry are shared
    remote.prepare(tpx.READ, ra, 0, desc, 0, 64 * KiB).post().wait(30000)
    assert np.array_equal(la, lb)


class DLPackOnly:
    """Memory seen only through DLPack (as JAX or a CuPy array offers it)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_register_dlpack(engines):
    a, b = engines
    src, dst = pattern(256 * KiB, 11), np.zeros(256 * KiB, np.uint8)
    rs = b.register(DLPackOnly(src.view(np.float32).reshape(256, -1)))
    assert rs.addr == src.ctypes.data and rs.length == src.nbytes
    rd = a.register(DLPackOnly(dst))
    a.load_remote(b.metadata()).read(rd, 0, rs.export(), 0, dst.nbytes).wait(30000)
    assert np.array_equal(src, dst)
    m = np.zeros((64, 64), np.uint32)
    for bad in (m[:, ::2], m.T, m[::2]):
        with pytest.raises(ValueError, match="DLPack tensor is not contiguous"):
            a.register(DLPackOnly(bad))
    # a column of one element, any stride; a slice of whole rows starts at its first byte
    assert tpx._bytes_of(DLPackOnly(m[:, :1][:1])) == (m.ctypes.data, 4, tpx.MEM_HOST)
    assert tpx._bytes_of(DLPackOnly(m[3:5])) == (m.ctypes.data + 3 * 256, 512, tpx.MEM_HOST)


def fake_dlpack(device_type, data, shape, strides=None, bits=8, byte_offset=0):
    """A "dltensor" capsule made by hand (DLManagedTensor without a deleter)."""
    class Managed(ctypes.Structure):
        _fields_ = [("t", tpx._DLTensor), ("ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]
    nd = len(shape)
    sh = (ctypes.c_int64 * nd)(*shape)
    st = (ctypes.c_int64 * nd)(*strides) if strides else None
    m = Managed()
    m.t.data, m.t.ndim, m.t.byte_offset = data, nd, byte_offset
    m.t.device.device_type = device_type
    m.t.dtype.code, m.t.dtype.bits, m.t.dtype.lanes = 1, bits, 1
    m.t.shape = ctypes.cast(sh, ctypes.POINTER(ctypes.c_int64))
    if st is not None:
        m.t.strides = ctypes.cast(st, ctypes.POINTER(ctypes.c_int64))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                   ctypes.c_void_p]
    cap = new(ctypes.addressof(m), b"dltensor", None)
    keep = (m, sh, st)

    class Obj:
        def __dlpack__(self, stream=None):
            self.keep = keep
            return cap
    return Obj()


def test_dlpack_devices_and_refusals():
    cuda = fake_dlpack(2, 1 << 20, (4, 256), bits=32, byte_offset=64)
    assert tpx._bytes_of(cuda) == ((1 << 20) + 64, 4096, tpx.MEM_CUDA)
    assert tpx._bytes_of(fake_dlpack(3, 4096, (10,)))[2] == tpx.MEM_HOST  # pinned host
    with pytest.raises(ValueError, match="device type 10 is neither host nor CUDA"):
        tpx._bytes_of(fake_dlpack(10, 4096, (10,)))  # ROCm
    with pytest.raises(ValueError, match="not contiguous"):
        tpx._bytes_of(fake_dlpack(2, 4096, (4, 4), strides=(1, 4)))
    assert tpx._bytes_of(fake_dlpack(2, 4096, (4, 4), strides=(4, 1)))[:2] == (4096, 16)


def test_cuda_array_interface_and_torch_contiguity(engines):
    a, _ = engines

    def cai(**kw):
        d = {"shape": (4, 1024), "typestr": "<f4", "data": (4096, False), "version": 3}
        d.update(kw)
        return type("C", (), {"__cuda_array_interface__": d})()
    assert tpx._bytes_of(cai(strides=(4096, 4))) == (4096, 16384, tpx.MEM_CUDA)
    with pytest.raises(ValueError, match="CUDA array is not contiguous"):
        a.register(cai(strides=(4, 16)))
    with pytest.raises(ValueError, match="masked"):
        a.register(cai(mask=object()))

    class StridedTensor:
        is_cuda = True

        def data_ptr(self):
            return 4096

        def element_size(self):
            return 4

        def is_contiguous(self):
            return False
    with pytest.raises(ValueError, match="tensor is not contiguous"):
        a.register(StridedTensor())
    with pytest.raises(ValueError, match="array is not contiguous"):
        a.register(np.zeros((8, 8), np.uint8)[:, 1])
    with pytest.raises(TypeError, match="is not memory"):
        a.register(object())


def test_fileno_for_event_loops(engines):
    """The engine's fd is readable once a transfer ended and until it is seen: select()
    and asyncio wait on it instead of polling."""
    import asyncio
    import select
    a, b = engines
    la, lb = np.zeros(1 * MiB, np.uint8), pattern(1 * MiB, 12)
    ra, rb = a.register(la), b.register(lb)
    remote = a.load_remote(b.metadata())
    desc = rb.export()
    fd = a.fileno()
    assert fd >= 0 and fd == a.fileno() and fd != b.fileno()
    assert select.select([a], [], [], 0)[0] == []
    x = remote.read(ra, 0, desc, 0, 1 * MiB)
    assert select.select([a], [], [], 30)[0] == [a]
    assert x.poll() and np.array_equal(la, lb)
    assert select.select([a], [], [], 0)[0] == []  # seen: not readable any more

    async def read_async():
        loop = asyncio.get_running_loop()
        la[:] = 0
        y = remote.read(ra, 0, desc, 0, 1 * MiB)
        while not y.poll():
            ready = loop.create_future()
            loop.add_reader(a.fileno(), ready.set_result, None)
            try:
                await asyncio.wait_for(ready, 30)
            finally:
                loop.remove_reader(a.fileno())
        return y.bytes
    assert asyncio.run(read_async()) == 1 * MiB
    assert np.array_equal(la, lb)
    a.close()
    with pytest.raises(tpx.TpxError):
        a.fileno()


def test_typed_package():
    """py.typed ships, and every public annotation resolves (they are strings)."""
    import typing
    assert os.path.isfile(os.path.join(os.path.dirname(tpx.__file__), "py.typed"))
    for obj in (tpx.Engine, tpx.Region, tpx.Remote, tpx.Prep, tpx.Xfer, tpx.Peer,
                tpx.Registry):
        for name, f in vars(obj).items():
            f = getattr(f, "fget", f)
            if callable(f) and not name.startswith("__"):
                typing.get_type_hints(f, vars(tpx))
    hints = typing.get_type_hints(tpx.Remote.prepare, vars(tpx))
    assert hints["return"] is tpx.Prep


def test_type_hints_check():
    """mypy finds the package's annotations complete and consistent (as installed)."""
    r = subprocess.run([sys.executable, "-m", "mypy", "--disallow-untyped-defs",
                        "--cache-dir=/dev/null", "-p", "tpx"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_module_example_runs():
    """The example at the top of the package's docstring runs as it is written."""
    doc = tpx.__doc__
    code = doc[doc.index("    import numpy as np, tpx"):doc.index("\n\nEngine.fileno()")]
    exec(compile("\n".join(ln[4:] for ln in code.split("\n")), "tpx.__doc__", "exec"), {})
