# SPDX-License-Identifier: Apache-2.0
"""The engine's GPU through the Python package and through NIXL, as vLLM runs it.

Run by tests/gpu/binding.sh (a network namespace with NICs eth1..eth4, a stand-in
sysfs tree where GPU d shares a PCI switch with eth(d+1), the stand-in CUDA driver
with four devices logging every allocation to FAKE_CUDA_ALLOC_LOG). Two tpx
engines and two NIXL agents, none given a GPU, with no CUDA context current,
register memory of GPU 3: each must serve GPU 3 on eth4, and every buffer made
(strict TCPX comms' device memory included) must be GPU 3's. READs are verified.
"""
import ctypes
import os
import sys

import numpy as np

import tpx

GPU = 3
LEN = 1 << 20

os.environ["NIXL_PLUGIN_DIR"] = tpx.nixl_plugin_dir()
# The library's log lines, to check that refusals name their cause (read
# once, when the first engine is made).
LOG = os.environ["FAKE_CUDA_ALLOC_LOG"] + ".tpxlog"
os.environ["TPX_LOG_FILE"] = LOG

cu = ctypes.CDLL("libcuda.so.1")
_u64 = ctypes.c_uint64


def ck(rc, what):
    if rc != 0:
        raise SystemExit("FAIL: %s: CUDA error %d" % (what, rc))


ck(cu.cuInit(0), "cuInit")


class Ctx:
    """GPU `dev` current on this thread for the block (push/pop)."""

    def __init__(self, dev):
        self.dev = dev

    def __enter__(self):
        ctx = ctypes.c_void_p()
        ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.dev), "retain")
        ck(cu.cuCtxPushCurrent_v2(ctx), "push")

    def __exit__(self, *a):
        ctx = ctypes.c_void_p()
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctx))


def gpu_buffer(data):
    p = _u64()
    with Ctx(GPU):
        ck(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(len(data))), "cuMemAlloc")
        ck(cu.cuMemcpyHtoD_v2(p, data.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(len(data))),
           "htod")
    return p.value


def gpu_read(addr, n):
    out = np.zeros(n, dtype=np.uint8)
    with Ctx(GPU):
        ck(cu.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), _u64(addr), ctypes.c_size_t(n)),
           "dtoh")
    return out


class CudaArray:
    """GPU memory as CuPy or Numba show it (__cuda_array_interface__)."""

    def __init__(self, addr, n):
        self.__cuda_array_interface__ = {"shape": (n // 4,), "typestr": "<u4",
                                         "data": (addr, False), "version": 3, "strides": None}


class DLPackCuda:
    """GPU memory as a DLPack producer (JAX, CuPy, ...) shows it: a "dltensor" capsule
    over a DLManagedTensor of device kDLCUDA (2) with a 2-D shape and row-major
    strides."""

    def __init__(self, addr, n, dev):
        class Managed(ctypes.Structure):
            _fields_ = [("t", tpx._DLTensor), ("ctx", ctypes.c_void_p),
                        ("deleter", ctypes.c_void_p)]
        self.shape = (ctypes.c_int64 * 2)(n // 1024, 1024)
        self.strides = (ctypes.c_int64 * 2)(1024, 1)
        m = self.m = Managed()
        m.t.data, m.t.ndim = addr, 2
        m.t.device.device_type, m.t.device.device_id = 2, dev
        m.t.dtype.code, m.t.dtype.bits, m.t.dtype.lanes = 1, 8, 1
        m.t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        m.t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        return new(ctypes.addressof(self.m), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, self.m.t.device.device_id)


def expect_bound(info, who):
    print("%s: gpu %d (%s), nics %s (%s)" % (who, info["gpu"], info["gpu_from"], info["nics"],
                                            info["nics_from"]))
    assert info["gpu"] == GPU and info["gpu_from"] == "memory", info
    assert info["nics"] == ["eth4"] and info["nics_from"] == "pci", info


def python_package():
    src = np.random.default_rng(1).integers(0, 256, LEN, dtype=np.uint8)
    a_src, a_dst = gpu_buffer(src), gpu_buffer(np.zeros(LEN, dtype=np.uint8))
    with tpx.Engine(name="owner") as owner, tpx.Engine(name="reader") as reader:
        assert owner.info()["gpu_from"] == "none"
        # the memory as the Python GPU libraries hand it over
        rs = owner.register(CudaArray(a_src, LEN))
        rd = reader.register(DLPackCuda(a_dst, LEN, GPU), gpu=GPU)
        assert (rs.addr, rs.length, rd.addr, rd.length) == (a_src, LEN, a_dst, LEN)
        expect_bound(owner.info(), "tpx owner")
        expect_bound(reader.info(), "tpx reader")
        desc = rs.export()
        remote = reader.load_remote(owner.metadata())
        remote.read(rd, 0, desc, 0, LEN).wait(30000)
    assert np.array_equal(gpu_read(a_dst, LEN), src), "tpx READ: wrong bytes"
    print("tpx package: READ of GPU memory (__cuda_array_interface__, DLPack) verified")


def nixl_agents():
    from nixl._api import nixl_agent, nixl_agent_config
    src = np.random.default_rng(2).integers(0, 256, LEN, dtype=np.uint8)
    a_src, a_dst = gpu_buffer(src), gpu_buffer(np.zeros(LEN, dtype=np.uint8))
    # As vLLM: no backend parameters; VRAM registered with the GPU's devId.
    prefill = nixl_agent("prefill", nixl_agent_config(backends=["TPX"]))
    decode = nixl_agent("decode", nixl_agent_config(backends=["TPX"]))
    prefill.register_memory([(a_src, LEN, GPU, "")], "VRAM")
    decode.register_memory([(a_dst, LEN, GPU, "")], "VRAM")
    decode.add_remote_agent(prefill.get_agent_metadata())
    prefill.add_remote_agent(decode.get_agent_metadata())
    local = decode.prep_xfer_dlist("NIXL_INIT_AGENT", [(a_dst, LEN, GPU)], "VRAM")
    remote = decode.prep_xfer_dlist("prefill", [(a_src, LEN, GPU)], "VRAM")
    h = decode.make_prepped_xfer("READ", local, [0], remote, [0], b"done")
    st = decode.transfer(h)
    while st == "PROC":
        st = decode.check_xfer_state(h)
    assert st == "DONE", st
    decode.release_xfer_handle(h)
    assert np.array_equal(gpu_read(a_dst, LEN), src), "NIXL READ: wrong bytes"
    print("NIXL: READ of VRAM verified")


def refused(fn, what):
    try:
        fn()
    except Exception as e:  # NIXL raises its status as an exception
        print("%s: refused (%s)" % (what, type(e).__name__))
        return
    raise SystemExit("FAIL: %s was accepted" % what)


def log_has(text):
    with open(LOG) as f:
        return text in f.read()


def bad_input():
    """Each a NIXL error with a log line naming it; never a crash."""
    from nixl._api import nixl_agent, nixl_agent_config
    a = nixl_agent("bad-a", nixl_agent_config(backends=["TPX"]))
    b = nixl_agent("bad-b", nixl_agent_config(backends=["TPX"]))
    buf = gpu_buffer(np.zeros(LEN, dtype=np.uint8))
    refused(lambda: a.register_memory([(buf, LEN, 9, "")], "VRAM"), "VRAM of devId 9")
    assert log_has("there is no GPU 9"), "no log line names the missing GPU"
    refused(lambda: a.register_memory([(buf, LEN, 1, "")], "VRAM"), "devId 1 for GPU 3 memory")
    assert log_has("is memory of GPU 3, not of GPU 1"), "no log line names both GPUs"
    a.register_memory([(buf, LEN, GPU, "")], "VRAM")
    b.register_memory([(gpu_buffer(np.zeros(LEN, dtype=np.uint8)), LEN, GPU, "")], "VRAM")
    # Metadata of another tpx release: the tpx blob inside NIXL's says version 1.
    md = bytearray(a.get_agent_metadata())
    at = md.find(b"TPXM")
    assert at >= 0, "no tpx metadata inside the agent's"
    md[at + 4:at + 6] = (1).to_bytes(2, "big")
    refused(lambda: b.add_remote_agent(bytes(md)), "metadata of an older tpx")
    assert log_has("the metadata is of version 1"), "no log line names the metadata version"
    b.add_remote_agent(a.get_agent_metadata())
    # A descriptor past the registered range (NIXL or TPX refuses it).
    refused(lambda: b.prep_xfer_dlist(
        "bad-a", [(buf + LEN, 4096, GPU)], "VRAM"), "a VRAM descriptor on unregistered memory")
    print("bad input: refused, each with its cause")


def alloc_devices():
    with open(os.environ["FAKE_CUDA_ALLOC_LOG"]) as f:
        lines = [ln.split() for ln in f if ln.strip()]
    return lines, sorted({int(ln[1]) for ln in lines})


def main():
    what = sys.argv[1:] or ["tpx", "nixl", "bad"]
    if "tpx" in what:
        python_package()
    if "nixl" in what:
        nixl_agents()
    if "bad" in what:
        bad_input()
    lines, devs = alloc_devices()
    print("allocations: %d, on GPU(s) %s" % (len(lines), devs))
    assert devs == [GPU], "buffers on GPU(s) %s, not only on GPU %d" % (devs, GPU)
    if os.environ.get("TPX_SOCK_TCPX", "0") != "0":
        ours = 2 * (("tpx" in what) + ("nixl" in what)) + 2 * ("bad" in what)
        assert sum(1 for ln in lines if ln[0] == "device") > ours, "no comm device memory"
    print("gpu_binding: passed")


if __name__ == "__main__":
    main()
