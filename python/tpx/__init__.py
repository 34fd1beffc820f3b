# SPDX-License-Identifier: Apache-2.0
"""tpx: move host or GPU memory between machines over TCP (NCCL net plugins).

A thin ctypes binding over libtpx's stable C API (include/tpx/tpx.h); the
GIL is released during every call into the library. Errors raise TpxError,
whose ``status`` is the tpx_status_t value. Memory is a numpy array, a torch
tensor, anything with __cuda_array_interface__ or __dlpack__, or a buffer.

Two engines in one process (on two machines, the metadata and descriptors
travel between them however the application likes):

    import numpy as np, tpx
    with tpx.Engine(name="prefill") as prefill, tpx.Engine(name="decode") as decode:
        k = [np.full(1 << 20, i, np.uint8) for i in range(4)]   # 4 layers of K
        descs = [prefill.register(x).export() for x in k]       # -> decode
        dst = [np.zeros(1 << 20, np.uint8) for _ in range(4)]
        regs = [decode.register(x) for x in dst]
        remote = decode.load_remote(prefill.metadata())         # bytes from prefill
        # block 3 (16 KiB) of every layer, one READ: (region, offset, desc, offset, len)
        prep = remote.prepare(tpx.READ, [(regs[i], 3 << 14, descs[i], 3 << 14, 1 << 14)
                                         for i in range(4)])
        prep.post(notif=b"layer blocks").wait()
        assert all((d[3 << 14:4 << 14] == i).all() for i, d in enumerate(dst))

Engine.fileno() lets an event loop wait for completions. The wheel bundles
libtpx.so, the ncclNet plugins (for NCCL_NET_PLUGIN) and the NIXL backend
libplugin_TPX.so (for NIXL_PLUGIN_DIR); see nccl_plugin_path() and
nixl_plugin_dir().
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import threading
import time
import weakref
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple,
                    TypeVar, Union)

import numpy as np

# What the API takes: a byte string of RDESC_SIZE bytes (Region.export()); an int or an
# array of ints (numpy array, list); the memory register() accepts.
Desc = Union[bytes, bytearray, memoryview]
Ints = Union[int, Sequence[int], "np.ndarray"]
# One block of Remote.prepare(): (local Region, local offset, remote descriptor, remote
# offset, length), as tpx_iov_t.
Entry = Tuple["Region", int, Desc, int, int]
_C = TypeVar("_C", bound="_Closable")
Memory = Any  # numpy array, torch tensor, __cuda_array_interface__, __dlpack__, buffer

__all__ = [
    "TpxError", "Engine", "Region", "Remote", "Prep", "Xfer", "Peer",
    "READ", "WRITE", "MEM_HOST", "MEM_CUDA", "PORT_EPHEMERAL", "PORT_NONE", "PORT_DEFAULT",
    "RDESC_SIZE", "NOTIF_MAX", "library_path", "nccl_plugin_path", "nixl_plugin_dir",
    "version", "Registry", "Strided", "KVCache", "kv_entries", "STRIDED_MAX_DIMS",
]

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBDIR = os.path.join(_HERE, "_lib")

READ, WRITE = 1, 2
MEM_HOST, MEM_CUDA = 1, 2
PORT_DEFAULT, PORT_NONE, PORT_EPHEMERAL = 0, -1, -2
RDESC_SIZE = 48
STRIDED_MAX_DIMS = 3
NOTIF_MAX = 1024
NAME_MAX = 64
METADATA_MAX = 2048
_OK, _INPROGRESS = 0, 1


def library_path() -> str:
    """Path of the bundled libtpx (TPX_LIBRARY overrides it)."""
    return os.environ.get("TPX_LIBRARY") or os.path.join(_LIBDIR, "libtpx.so.0")


def nccl_plugin_path(strict_tcpx: bool = False) -> str:
    """Path of libnccl-net-tpx.so: NCCL_NET_PLUGIN=<this> makes NCCL use tpx's transport.
    strict_tcpx: libnccl-net-tpx-tcpx.so instead, the strict TCPX mode as Google's
    GPUDirect-TCPX plugin looks to a loader (only ncclNetPlugin_v7)."""
    return os.path.join(_LIBDIR, "libnccl-net-tpx-tcpx.so" if strict_tcpx else
                        "libnccl-net-tpx.so")


def nixl_plugin_dir() -> Optional[str]:
    """Folder holding libplugin_TPX.so: NIXL_PLUGIN_DIR=<this> (it replaces NIXL's own
    folder), or copy the file into NIXL's plugin folder to keep UCX and friends. None
    when this tpx was built without the NIXL backend (no C++ compiler at build time)."""
    d = os.path.join(_LIBDIR, "nixl")
    return d if os.path.isfile(os.path.join(d, "libplugin_TPX.so")) else None


# ---- the C ABI --------------------------------------------------------------

_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_st = ctypes.c_int


class _EngineParams(ctypes.Structure):
    _fields_ = [("size", _sz), ("plugin", ctypes.c_char_p), ("gpu", ctypes.c_int),
                ("channels", ctypes.c_int), ("chunk_bytes", _sz), ("window", ctypes.c_int),
                ("timeout_ms", ctypes.c_int), ("bind_addr", ctypes.c_char_p),
                ("port", ctypes.c_int), ("progress_thread", ctypes.c_int),
                ("progress_cpu", ctypes.c_int), ("auth_token", ctypes.c_char_p),
                ("name", ctypes.c_char_p), ("notif_queue", ctypes.c_int)]


class _Counters(ctypes.Structure):
    _fields_ = [("size", _sz)] + [(n, ctypes.c_uint64) for n in (
        "rma_served", "rma_rejected", "rma_bytes_out", "rma_bytes_in", "notifs_received",
        "notifs_dropped", "peers_connected", "rma_refused", "rma_done", "rma_ns_answer",
        "rma_ns_data", "rma_ns_total", "rma_served_ns", "rma_check_ns", "rma_msgs",
        "rma_msgs_packed", "rma_msg_ns", "rma_bytes_staged", "rma_stage_ns", "chan_lost",
        "chunks_resent", "chan_rejoined")]


class _Info(ctypes.Structure):  # tpx_engine_info_t (tpx/tpx.h)
    _fields_ = [("size", _sz), ("plugin", ctypes.c_char * 64), ("abi", ctypes.c_int),
                ("gpu", ctypes.c_int), ("channels", ctypes.c_int), ("chunk_bytes", _sz),
                ("window", ctypes.c_int), ("port", ctypes.c_int), ("nnics", ctypes.c_int),
                ("nic", (ctypes.c_char * 64) * 8), ("nic_speed_mbps", ctypes.c_int * 8),
                ("identity_keys", ctypes.c_int), ("connect_timeout_ms", ctypes.c_int),
                ("gpu_from", ctypes.c_int), ("nics_from", ctypes.c_int)]


class _Notif(ctypes.Structure):
    _fields_ = [("from_", ctypes.c_char * NAME_MAX), ("len", _sz),
                ("msg", ctypes.c_ubyte * NOTIF_MAX)]


# tpx_iov_t as a numpy record: block lists are built column by column.
_IOV_DTYPE = np.dtype([("local", np.uint64), ("local_offset", np.uint64),
                       ("remote", np.uint64), ("remote_offset", np.uint64),
                       ("len", np.uint64)])

# tpx_strided_t as a numpy record (a pointer, four size_t, an int and three tpx_dim_t).
_STRIDED_DTYPE = np.dtype({
    "names": ["local", "local_offset", "remote", "remote_offset", "elem_len", "ndims", "dim"],
    "formats": [np.uint64, np.uint64, np.uint64, np.uint64, np.uint64, np.int32,
                (np.uint64, (STRIDED_MAX_DIMS, 3))],
    "offsets": [0, 8, 16, 24, 32, 40, 48], "itemsize": 48 + 24 * STRIDED_MAX_DIMS})


class _KVCache(ctypes.Structure):  # tpx_kv_cache_t
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "layers", "kv", "blocks", "block_size", "heads", "head0", "head_dim", "dtype_size")] + \
        [("layout", ctypes.c_int)]


class _RegEntry(ctypes.Structure):  # tpx_registry_entry_t (tpx/registry.h)
    _fields_ = [("name", ctypes.c_char * NAME_MAX), ("md_len", ctypes.c_size_t),
                ("md", ctypes.c_ubyte * METADATA_MAX), ("ndescs", ctypes.c_size_t),
                ("descs", ctypes.c_ubyte * (RDESC_SIZE * 64))]


class _RegEvent(ctypes.Structure):  # tpx_registry_event_t
    _fields_ = [("name", ctypes.c_char * NAME_MAX), ("gone", ctypes.c_int)]


_lib = None


def _api() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(library_path())  # CDLL: the GIL is released during calls
    sigs = {
        "tpx_version_string": (ctypes.c_char_p, []),
        "tpx_status_string": (ctypes.c_char_p, [_st]),
        "tpx_status_name": (ctypes.c_char_p, [_st]),
        "tpx_engine_params_init": (None, [ctypes.POINTER(_EngineParams)]),
        "tpx_engine_create": (_st, [ctypes.POINTER(_EngineParams), ctypes.POINTER(_vp)]),
        "tpx_engine_destroy": (None, [_vp]),
        "tpx_engine_port": (ctypes.c_int, [_vp]),
        "tpx_engine_fd": (ctypes.c_int, [_vp]),
        "tpx_engine_get_metadata": (_st, [_vp, _vp, ctypes.POINTER(_sz)]),
        "tpx_remote_load": (_st, [_vp, ctypes.c_char_p, _sz, ctypes.POINTER(_vp)]),
        "tpx_engine_counters": (_st, [_vp, ctypes.POINTER(_Counters)]),
        "tpx_engine_info": (_st, [_vp, ctypes.POINTER(_Info)]),
        "tpx_remote_release": (None, [_vp]),
        "tpx_remote_connect": (_st, [_vp, ctypes.c_int]),
        "tpx_remote_name": (ctypes.c_char_p, [_vp]),
        "tpx_mem_register": (_st, [_vp, _vp, _sz, ctypes.c_int, ctypes.POINTER(_vp)]),
        "tpx_mem_register_gpu": (_st, [_vp, _vp, _sz, ctypes.c_int, ctypes.POINTER(_vp)]),
        "tpx_mem_deregister": (None, [_vp]),
        "tpx_region_base": (_vp, [_vp]),
        "tpx_region_export": (_st, [_vp, _sz, _sz, _vp]),
        "tpx_region_unexport": (_st, [_vp, ctypes.c_char_p]),
        "tpx_rdesc_info": (_st, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64),
                                 ctypes.POINTER(ctypes.c_uint64)]),
        "tpx_xfer_prepare": (_st, [_vp, ctypes.c_int, _vp, _sz, ctypes.POINTER(_vp)]),
        "tpx_xfer_prepare_strided": (_st, [_vp, ctypes.c_int, _vp, _sz, ctypes.POINTER(_vp)]),
        "tpx_kv_entries": (_st, [ctypes.POINTER(_KVCache), _vp, _sz, ctypes.POINTER(_KVCache),
                                 _vp, _sz, _vp, _vp, _sz, _vp, _sz, ctypes.POINTER(_sz)]),
        "tpx_xfer_post": (_st, [_vp, ctypes.c_char_p, _sz, ctypes.c_int, ctypes.POINTER(_vp)]),
        "tpx_prep_release": (None, [_vp]),
        "tpx_xfer_poll": (_st, [_vp, ctypes.POINTER(_sz)]),
        "tpx_xfer_wait": (_st, [_vp, ctypes.c_int, ctypes.POINTER(_sz)]),
        "tpx_xfer_cancel": (_st, [_vp]),
        "tpx_xfer_release": (None, [_vp]),
        "tpx_notif_send": (_st, [_vp, ctypes.c_char_p, _sz]),
        "tpx_engine_get_notifs": (_st, [_vp, ctypes.POINTER(_Notif), _sz, ctypes.POINTER(_sz)]),
        "tpx_peer_connect": (_st, [_vp, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                   ctypes.POINTER(_vp)]),
        "tpx_peer_accept": (_st, [_vp, ctypes.c_int, ctypes.POINTER(_vp)]),
        "tpx_peer_close": (None, [_vp]),
        "tpx_send": (_st, [_vp, _vp, _sz, _sz, ctypes.POINTER(_vp)]),
        "tpx_recv": (_st, [_vp, _vp, _sz, _sz, ctypes.POINTER(_vp)]),
        "tpx_registry_open": (_st, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_vp)]),
        "tpx_registry_close": (None, [_vp]),
        "tpx_registry_publish": (_st, [_vp, _vp, ctypes.c_char_p, _sz, ctypes.c_int]),
        "tpx_registry_unpublish": (_st, [_vp, _vp]),
        "tpx_registry_lookup": (_st, [_vp, ctypes.c_char_p, ctypes.POINTER(_RegEntry)]),
        "tpx_registry_list": (_st, [_vp, _vp, _sz, ctypes.POINTER(_sz)]),
        "tpx_registry_load_remote": (_st, [_vp, _vp, ctypes.c_char_p, ctypes.POINTER(_vp),
                                           ctypes.POINTER(_RegEntry)]),
        "tpx_registry_watch": (_st, [_vp, ctypes.POINTER(_RegEvent), _sz, ctypes.POINTER(_sz),
                                     ctypes.c_int]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _lib = lib
    return lib


def version() -> str:
    """The version of libtpx (tpx_version_string()): the one version of the project
    (its VERSION file), also the wheel's."""
    return _api().tpx_version_string().decode()


def __getattr__(name: str) -> Any:  # tpx.__version__, without loading the library at import
    if name == "__version__":
        return version()
    raise AttributeError(f"module 'tpx' has no attribute {name!r}")


class TpxError(Exception):
    """A tpx call failed: ``status`` is its tpx_status_t (negative), ``name`` the
    enum's name ("TPX_ERR_TIMED_OUT"), ``text`` its description."""

    def __init__(self, status: int, what: str = "") -> None:
        self.status = status
        self.name = _api().tpx_status_name(status).decode()
        self.text = _api().tpx_status_string(status).decode()
        msg = f"{self.text} ({self.name} = {status})"
        super().__init__(f"{what}: {msg}" if what else msg)


def _check(status: int, what: str) -> None:
    if status != _OK:
        raise TpxError(status, what)


def _bytes_of(obj: Any) -> Tuple[int, int, int]:
    """(address, length, mem type) of memory register() accepts (see _memory_of)."""
    addr, n, kind, _ = _memory_of(obj)
    return addr, n, kind


def _compact(shape: Sequence[int], strides: Optional[Sequence[int]], itemsize: int) -> bool:
    """Whether strides (in bytes; None: row-major) describe row-major memory without
    gaps. Dimensions of one element may carry any stride; no elements, any strides."""
    if strides is None or any(int(d) == 0 for d in shape):
        return True
    want = itemsize
    for d, s in zip(reversed(list(shape)), reversed(list(strides))):
        if int(d) != 1 and int(s) != want:
            return False
        want *= int(d)
    return True


def _not_contiguous(what: str) -> ValueError:
    return ValueError(f"register(): the {what} is not contiguous (its elements are not one "
                      "gap-free run of memory in row-major order): pass a contiguous copy "
                      "(numpy.ascontiguousarray(), tensor.contiguous()) or register the "
                      "memory it views")


# DLPack (dlpack.h, unversioned ABI: the "dltensor" capsule of __dlpack__())
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_KINDS = {_DL_CPU: MEM_HOST, _DL_CUDA_HOST: MEM_HOST, _DL_CUDA: MEM_CUDA,
             _DL_CUDA_MANAGED: MEM_CUDA}


def _dlpack_of(obj: Any) -> Tuple[int, int, int, Any]:
    """(address, length, mem type, capsule) of an object with __dlpack__. The capsule is
    not consumed: while it lives (the Region keeps it) the producer keeps the memory; its
    destructor lets go of it."""
    cap = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    try:
        p = get(cap, b"dltensor")
    except ValueError:
        raise TypeError("register(): __dlpack__() did not return a \"dltensor\" capsule")
    t = _DLTensor.from_address(p)  # DLManagedTensor starts with its DLTensor
    kind = _DL_KINDS.get(t.device.device_type)
    if kind is None:
        raise ValueError(f"register(): DLPack device type {t.device.device_type} is neither "
                         "host nor CUDA memory")
    shape = [t.shape[i] for i in range(t.ndim)]
    itemsize = (t.dtype.bits * t.dtype.lanes + 7) // 8
    strides = None if not t.strides else [t.strides[i] * itemsize for i in range(t.ndim)]
    if not _compact(shape, strides, itemsize):
        raise _not_contiguous("DLPack tensor")
    n = itemsize
    for d in shape:
        n *= d
    return (t.data or 0) + t.byte_offset, n, kind, cap


def _memory_of(obj: Any) -> Tuple[int, int, int, Any]:
    """(address, length, mem type, keep) of the memory register() accepts: a torch tensor
    (data_ptr()), an object with __cuda_array_interface__ (CUDA memory), a numpy array,
    an object with __dlpack__ (host or CUDA memory, by its device), anything with the
    buffer protocol. Each must be contiguous (ValueError otherwise). keep: what the
    Region holds besides obj -- a memoryview (an active buffer export, so that obj cannot
    be resized (bytearray), closed (mmap) or otherwise let go of its memory while it is
    held), a DLPack capsule, or None."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch.Tensor
        if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
            raise _not_contiguous("tensor")
        kind = MEM_CUDA if getattr(obj, "is_cuda", False) else MEM_HOST
        return obj.data_ptr(), obj.element_size() * obj.numel(), kind, None
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        itemsize = np.dtype(cai["typestr"]).itemsize
        if cai.get("mask") is not None:
            raise ValueError("register(): a masked CUDA array cannot be registered")
        if not _compact(cai["shape"], cai.get("strides") or None, itemsize):
            raise _not_contiguous("CUDA array")
        n = int(np.prod(cai["shape"], dtype=np.int64)) * itemsize
        return int(cai["data"][0] or 0), n, MEM_CUDA, None
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise _not_contiguous("array")
        try:
            view: Optional[memoryview] = memoryview(obj)  # type: ignore[arg-type]  # also pins what the array views (a bytearray, ...)
        except (TypeError, ValueError):  # dtypes without a buffer format: the array is kept
            view = None
        return obj.ctypes.data, obj.nbytes, MEM_HOST, view
    if hasattr(obj, "__dlpack__"):
        return _dlpack_of(obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"register(): a {type(obj).__name__} is not memory (a numpy array, "
                        "torch tensor, object with __cuda_array_interface__ or __dlpack__, "
                        "or buffer)") from None
    if not view.contiguous:
        view.release()
        raise _not_contiguous("buffer")
    with view.cast("B") as flat:
        a = np.frombuffer(flat, dtype=np.uint8)
        addr, n = a.ctypes.data, a.nbytes
        del a  # its export of `flat` ends here, so `flat` can be released
    return addr, n, MEM_HOST, view


def _let_go(keep: Any) -> None:
    """End the hold _memory_of() took (a memoryview's export; a capsule goes with GC)."""
    if isinstance(keep, memoryview):
        try:
            keep.release()
        except BufferError:  # exported further by someone: let it go with them
            pass


# ---- objects ----------------------------------------------------------------

_ERR_INVALID_STATE, _ERR_NOT_FOUND, _ERR_TIMED_OUT = -2, -30, -20
_ACCEPT_SLICE_MS = 100  # Engine.accept() waits in steps of this, looking for close()


class _Closable:
    """A context manager whose close() also runs when it is garbage-collected."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class _InCall:
    """`with engine._call(obj, ...) as handles:` around a call into the library that
    takes the engine or objects of it: it is counted as in flight (Engine.close() and
    the objects' release() wait for it), and refused with TPX_ERR_INVALID_STATE once
    the engine is closing or one of the objects is released."""
    __slots__ = ("e", "objs")

    def __init__(self, e: "Engine", objs: Tuple["_Owned", ...]) -> None:
        self.e, self.objs = e, objs

    def __enter__(self) -> Tuple[Any, ...]:
        e = self.e
        with e._cv:
            if e._closing or e._h is None:
                raise TpxError(_ERR_INVALID_STATE, "the engine is closed")
            for o in self.objs:
                if o._engine is not e:
                    raise ValueError(f"the {o._what} belongs to another engine")
                if o._h is None or o._dying:
                    raise TpxError(_ERR_INVALID_STATE, f"the {o._what} is released")
            for o in self.objs:
                o._calls += 1
            e._calls += 1
            return tuple(o._h for o in self.objs)

    def __exit__(self, *exc: Any) -> None:
        e = self.e
        with e._cv:
            for o in self.objs:
                o._calls -= 1
            e._calls -= 1
            e._cv.notify_all()


class Engine(_Closable):
    """One tpx engine (tpx_engine_create). Every setting left at None comes from
    the TPX_* environment variables, as in C.

    Thread-safe: its methods and those of its objects may be called from several
    threads. close() (and an object's release()) waits for the calls still in flight
    on it -- a thread in accept() returns within 100 ms (TPX_ERR_INVALID_STATE), one
    in connect() at its timeout_ms, one in Xfer.wait() is woken by the transfer's
    cancellation -- and refuses new ones
    (TpxError TPX_ERR_INVALID_STATE)."""

    def __init__(self, name: Optional[str] = None, gpu: int = -1, port: int = PORT_EPHEMERAL,
                 bind_addr: Optional[str] = None, plugin: Optional[str] = None,
                 channels: int = 0, chunk_bytes: int = 0, window: int = 0, timeout_ms: int = 0,
                 progress_thread: bool = True, auth_token: Optional[Union[str, bytes]] = None,
                 notif_queue: int = 0) -> None:
        self._h = None
        self._cv = threading.Condition(threading.RLock())  # guards the counts below
        self._calls = 0  # calls into the library in flight (_InCall)
        self._closing = False
        self._closer: Optional[int] = None  # the thread in close()
        lib = _api()
        p = _EngineParams()
        lib.tpx_engine_params_init(ctypes.byref(p))
        self._keep: List[bytes] = []  # the C strings must outlive tpx_engine_create
        def cstr(s: Optional[Union[str, bytes]]) -> Optional[bytes]:
            if s is None:
                return None
            b = s.encode() if isinstance(s, str) else bytes(s)
            self._keep.append(b)
            return b
        p.plugin, p.bind_addr, p.auth_token, p.name = (cstr(plugin), cstr(bind_addr),
                                                       cstr(auth_token), cstr(name))
        p.gpu, p.port, p.channels, p.chunk_bytes = gpu, port, channels, chunk_bytes
        p.window, p.timeout_ms, p.notif_queue = window, timeout_ms, notif_queue
        p.progress_thread = 1 if progress_thread else 0
        h = _vp()
        _check(lib.tpx_engine_create(ctypes.byref(p), ctypes.byref(h)), "tpx_engine_create")
        self._owned: List[_Owned] = []  # regions, remotes, preps, peers: released first
        self._xfers: "weakref.WeakSet[Xfer]" = weakref.WeakSet()  # transfers still held by the caller
        self._nbuf = (_Notif * 64)()
        info = _Info(size=ctypes.sizeof(_Info))
        if lib.tpx_engine_info(h, ctypes.byref(info)) != 0:
            lib.tpx_engine_destroy(h)
            raise TpxError(_ERR_INVALID_STATE, "tpx_engine_info failed on a new engine")
        # accept(-1); 0 from a library older than the field: its documented default
        self._connect_ms = info.connect_timeout_ms if info.connect_timeout_ms > 0 else 30000
        self._h = h

    def _call(self, *objs: "_Owned") -> _InCall:
        return _InCall(self, objs)

    def close(self) -> None:
        """Release everything this engine made, then the engine. New calls on it are
        refused from now on; calls in flight in other threads are waited for: a
        transfer being waited on is canceled (a wait on one that has not started to move
        ends TPX_ERR_CANCELED at once; one whose data moves runs to its end or its
        deadline), a blocked accept() ends within 100 ms, a connect() at its timeout.
        Another thread's close() of the same engine returns once it is closed. Not from a
        signal handler or anything else that runs while this thread is inside a call of
        the engine: it would wait for itself."""
        with self._cv:
            if self._h is None:
                return
            if self._closing:
                if self._closer != threading.get_ident():
                    while self._h is not None:
                        self._cv.wait()
                return
            self._closing, self._closer = True, threading.get_ident()
            for x in list(self._xfers):
                if x._calls and x._h is not None and not x._dying:
                    _api().tpx_xfer_cancel(x._h)  # wakes its wait(); the handle stays valid
            while self._calls:
                self._cv.wait()
        try:
            for x in list(self._xfers):
                x._drop()
            for o in reversed(list(self._owned)):
                o._drop()
            self._owned.clear()
            _api().tpx_engine_destroy(self._h)
        finally:
            with self._cv:
                self._h = None
                self._cv.notify_all()

    @property
    def handle(self) -> ctypes.c_void_p:
        if self._h is None or self._closing:
            raise TpxError(_ERR_INVALID_STATE, "the engine is closed")
        return self._h

    @property
    def port(self) -> int:
        with self._call():
            return _api().tpx_engine_port(self._h)

    def fileno(self) -> int:
        """A file descriptor for event loops (tpx_engine_fd): readable exactly while a
        transfer of this engine has ended and was not yet seen (poll()/wait() said it
        ended, or it was released). Wait for it (select, selectors,
        asyncio's loop.add_reader), then poll() your transfers; never read or close it
        (the engine owns it; it is closed with the engine). Objects with fileno() go to
        select() as they are."""
        with self._call():
            fd = _api().tpx_engine_fd(self._h)
        if fd < 0:
            raise TpxError(_ERR_INVALID_STATE, "tpx_engine_fd")
        return fd

    def metadata(self) -> bytes:
        """This engine's metadata blob (bytes) for peers' load_remote()."""
        buf = ctypes.create_string_buffer(METADATA_MAX)
        n = _sz(METADATA_MAX)
        with self._call():
            _check(_api().tpx_engine_get_metadata(self._h, buf, ctypes.byref(n)),
                   "tpx_engine_get_metadata")
        return buf.raw[:n.value]

    def register(self, obj: Memory, kind: Optional[int] = None,
                 gpu: Optional[int] = None) -> "Region":
        """Register the memory of `obj`: a numpy array, a torch tensor (host or CUDA), an
        object with __cuda_array_interface__ (CUDA memory: CuPy, Numba, ...) or with
        __dlpack__ (JAX, CuPy, TensorFlow, ...: host or CUDA memory by its DLPack device),
        or anything with the buffer protocol (bytearray, mmap, ...). It must be contiguous
        (ValueError otherwise, before anything is registered). The region keeps `obj` and,
        for objects with the buffer protocol, a buffer export of it (a memoryview), for
        DLPack objects their capsule, until it is deregistered: a registered bytearray
        cannot be resized nor a registered mmap closed meanwhile (BufferError). The
        caller must not free a torch tensor's or CUDA array's memory while it is
        registered. `gpu`: the GPU the caller says CUDA memory is on (checked; see
        info()["gpu_from"])."""
        addr, n, k, keep = _memory_of(obj)
        try:
            return self._register(addr, n, kind or k, obj, keep, gpu)
        except BaseException:
            _let_go(keep)
            raise

    def register_ptr(self, addr: int, length: int, kind: int = MEM_HOST,
                     gpu: Optional[int] = None) -> "Region":
        """Register `length` bytes at address `addr`; `gpu` as in register() (then `kind`
        is CUDA memory)."""
        return self._register(addr, length, kind, None, None, gpu)

    def _register(self, addr: int, n: int, kind: int, obj: Any, keep: Any,
                  gpu: Optional[int] = None) -> "Region":
        h = _vp()
        with self._call():
            if gpu is not None:
                _check(_api().tpx_mem_register_gpu(self._h, addr, n, int(gpu), ctypes.byref(h)),
                       "tpx_mem_register_gpu")
            else:
                _check(_api().tpx_mem_register(self._h, addr, n, kind, ctypes.byref(h)),
                       "tpx_mem_register")
            base = _api().tpx_region_base(h) or 0
            return self._own(Region(self, h, addr, n, obj, keep, addr - base))

    def load_remote(self, blob: bytes) -> "Remote":
        """Accept a peer engine's metadata (bytes); connects lazily (or Remote.connect())."""
        h = _vp()
        b = bytes(blob)
        with self._call():
            _check(_api().tpx_remote_load(self._h, b, len(b), ctypes.byref(h)),
                   "tpx_remote_load")
            return self._own(Remote(self, h))

    def notifs(self) -> List[Tuple[str, bytes]]:
        """Received notifications, oldest first: a list of (sender name, bytes)."""
        out = []
        with self._call():
            while True:
                n = _sz(0)
                st = _api().tpx_engine_get_notifs(self._h, self._nbuf, len(self._nbuf),
                                                  ctypes.byref(n))
                for i in range(n.value):
                    e = self._nbuf[i]
                    out.append((e.from_.decode(errors="replace"), bytes(e.msg[:e.len])))
                if st not in (_OK, -29):  # TPX_ERR_OVERFLOW: filled as usual
                    raise TpxError(st, "tpx_engine_get_notifs")
                if n.value < len(self._nbuf):
                    return out

    def info(self) -> Dict[str, Any]:
        """What the engine settled on (tpx_engine_info): a dict with plugin, abi, gpu,
        gpu_from ("params", "memory": of the first GPU memory registered, "context": current
        at creation, "none"), channels, chunk_bytes, window, port, nics (names, in channel
        order), nics_from ("map": TPX_NIC_MAP, "pci": nearest the GPU, "all"),
        identity_keys."""
        c = _Info(size=ctypes.sizeof(_Info))
        with self._call():
            _check(_api().tpx_engine_info(self._h, ctypes.byref(c)), "tpx_engine_info")
        gpu_from = {0: "none", 1: "params", 2: "memory", 3: "context"}
        nics_from = {0: "all", 1: "map", 2: "pci"}
        return {"plugin": c.plugin.decode(errors="replace"), "abi": c.abi, "gpu": c.gpu,
                "gpu_from": gpu_from.get(c.gpu_from, str(c.gpu_from)), "channels": c.channels,
                "chunk_bytes": c.chunk_bytes, "window": c.window, "port": c.port,
                "nics": [c.nic[i].value.decode(errors="replace") for i in range(c.nnics)],
                "nics_from": nics_from.get(c.nics_from, str(c.nics_from)),
                "identity_keys": bool(c.identity_keys)}

    def counters(self) -> Dict[str, int]:
        c = _Counters()
        c.size = ctypes.sizeof(c)
        with self._call():
            _check(_api().tpx_engine_counters(self._h, ctypes.byref(c)), "tpx_engine_counters")
        return {f[0]: getattr(c, f[0]) for f in _Counters._fields_ if f[0] != "size"}

    def connect(self, host: str, port: int, timeout_ms: int = 0) -> "Peer":
        """Two-sided: connect to the engine listening at host:port (close() waits for it)."""
        h = _vp()
        with self._call():
            _check(_api().tpx_peer_connect(self._h, host.encode(), port, timeout_ms,
                                           ctypes.byref(h)), "tpx_peer_connect")
            return self._own(Peer(self, h))

    def accept(self, timeout_ms: int = -1) -> "Peer":
        """Two-sided: the next peer that connected (waits up to timeout_ms; -1:
        TPX_CONNECT_TIMEOUT_MS; 0: TpxError TPX_INPROGRESS if none). close() in another
        thread ends the wait within _ACCEPT_SLICE_MS (TpxError TPX_ERR_INVALID_STATE)."""
        h = _vp()
        total = self._connect_ms if timeout_ms < 0 else timeout_ms
        deadline = time.monotonic() + total / 1000.0
        with self._call():
            while True:
                # in slices, so that close() need not wait for the whole timeout
                left = max(0, int((deadline - time.monotonic()) * 1000))
                st = _api().tpx_peer_accept(self._h, min(left, _ACCEPT_SLICE_MS), ctypes.byref(h))
                if st in (_INPROGRESS, _ERR_TIMED_OUT):
                    if self._closing:
                        raise TpxError(_ERR_INVALID_STATE, "accept(): the engine is closing")
                    if left > _ACCEPT_SLICE_MS:
                        continue
                    if total > 0:
                        st = _ERR_TIMED_OUT
                _check(st, "tpx_peer_accept")
                return self._own(Peer(self, h))

    def _own(self, o: Any) -> Any:
        self._owned.append(o)
        return o

    def _disown(self, o: "_Owned") -> None:
        try:
            self._owned.remove(o)
        except ValueError:
            pass
        self._xfers.discard(o)  # type: ignore[arg-type]


class _Owned:
    """An object of an engine holding a library handle (None once released)."""
    _what = "object"
    _engine: Engine
    _h: Optional[ctypes.c_void_p] = None
    _dying = False  # release() started: new calls are refused
    _calls = 0      # calls in flight that use the handle (_InCall)

    def _drop(self) -> None:
        """Free the handle now. Only when no call uses it: from close() of the engine
        (after its calls in flight ended) or from release()."""
        h = self._h
        if h is not None:
            self._h = None
            self._free(h)

    def _free(self, h: ctypes.c_void_p) -> None:
        """Give the handle back to the library (each kind of object its own call)."""
        raise NotImplementedError

    def _wake(self) -> None:
        """Make the calls in flight on this object return sooner (release() waits)."""

    def release(self) -> None:
        """Free it; calls in flight on it in other threads are waited for first, new ones
        are refused. Nothing happens if it (or its engine) was released already."""
        e = self._engine
        with e._cv:
            if self._h is None or self._dying or e._closing or e._h is None:
                return  # released, being released, or its engine's close() frees it
            self._dying = True
            e._calls += 1  # a call in flight: close() waits for the free below
            if self._calls:
                self._wake()
            while self._calls:
                e._cv.wait()
        try:
            self._drop()
        finally:
            with e._cv:
                e._disown(self)  # before close() may walk the lists (it waits for us)
                e._calls -= 1
                e._cv.notify_all()


class Region(_Owned):
    """Registered memory (tpx_mem_register).

    Offsets given to its methods, to Peer.send()/recv() and as local offsets of
    Remote.prepare() count from `addr`, the first byte of the memory given to
    register(), and ranges must lie within its `length` bytes -- even where the
    library returned a larger region registered before that contains it (its cache by
    address range; `base` then lies before `addr`)."""
    _what = "region"

    def __init__(self, engine: Engine, h: ctypes.c_void_p, addr: int, length: int, obj: Any,
                 keep: Any = None, delta: int = 0) -> None:
        self._engine, self._h, self.addr, self.length, self._obj = engine, h, addr, length, obj
        self._keep = keep  # what pins obj's memory: a memoryview, a DLPack capsule or None
        self._delta = delta  # addr - base: the library's offset of our byte 0
        self._exports: List[bytes] = []  # descriptors this Region exported (still live)

    def _free(self, h: ctypes.c_void_p) -> None:
        lib = _api()
        for d in self._exports:  # the library's region may live on in other Regions
            lib.tpx_region_unexport(h, d)  # TPX_ERR_NOT_FOUND: ended already
        self._exports.clear()
        lib.tpx_mem_deregister(h)
        keep, self._keep, self._obj = self._keep, None, None
        _let_go(keep)

    def deregister(self) -> None:
        """End this Region's exports, deregister, and let go of the object registered
        (a bytearray may be resized again)."""
        self.release()

    close = deregister

    @property
    def base(self) -> int:
        """Address of the library's offset 0 (the start of the cached region; may lie
        before addr)."""
        return self.addr - self._delta

    def _offset(self, offset: int, length: int, what: str) -> int:
        """The library's offset of [offset, offset+length) of this Region's memory."""
        offset, length = int(offset), int(length)
        if offset < 0 or length < 0 or offset + length > self.length:
            raise ValueError(f"{what}: bytes [{offset}, +{length}) are outside the "
                             f"{self.length} bytes registered")
        return self._delta + offset

    def export(self, offset: int = 0, length: int = 0) -> bytes:
        """Export [offset, offset+length) of the memory given to register() (length 0: to
        its end; the range must lie within its `length` bytes) for peers to READ and
        WRITE; returns the 48-byte descriptor. The export lasts until unexport() or until
        this Region is deregistered (or its engine closed), even where another
        registration shares the library's region."""
        offset, length = int(offset), int(length)
        if length == 0:
            length = self.length - offset
        if length <= 0:
            raise ValueError(f"export(): offset {offset} leaves nothing of the "
                             f"{self.length} bytes registered")
        off = self._offset(offset, length, "export()")
        buf = ctypes.create_string_buffer(RDESC_SIZE)
        with self._engine._call(self) as (h,):
            _check(_api().tpx_region_export(h, off, length, buf), "tpx_region_export")
            desc = buf.raw
            self._exports.append(desc)
        return desc

    def unexport(self, desc: Desc) -> None:
        """End an export this Region made (peers' requests naming it are refused from now
        on); TpxError TPX_ERR_NOT_FOUND if it is not one of this Region's live exports."""
        d = bytes(desc)
        with self._engine._call(self) as (h,):
            if d not in self._exports:
                raise TpxError(_ERR_NOT_FOUND, "Region.unexport")
            self._exports.remove(d)
            _check(_api().tpx_region_unexport(h, d), "tpx_region_unexport")


def rdesc_info(desc: Desc) -> Tuple[int, int]:
    """(owner address, length) of a region descriptor."""
    a, n = ctypes.c_uint64(), ctypes.c_uint64()
    _check(_api().tpx_rdesc_info(bytes(desc), ctypes.byref(a), ctypes.byref(n)), "tpx_rdesc_info")
    return a.value, n.value


def _u64(v: Any) -> "np.ndarray":
    """Offsets or lengths as uint64 (ValueError for negative ones)."""
    a = np.asarray(v)
    if a.dtype.kind == "i" and a.size and a.min() < 0:
        raise ValueError("prepare(): offsets and lengths cannot be negative")
    return a.astype(np.uint64)


def _regions_of(local: Any) -> Tuple[List["Region"], "np.ndarray"]:
    """(the distinct Regions, the index of each entry's) of one Region or one per entry."""
    if isinstance(local, Region):
        return [local], np.zeros((), dtype=np.intp)
    local = list(local)
    ids = list(map(id, local))
    by_id = dict(zip(ids, local))  # the distinct objects, in order
    regs = list(by_id.values())
    for r in regs:
        if not isinstance(r, Region):
            raise TypeError(f"prepare(): a local region is a {type(r).__name__}, not a Region "
                            "(Engine.register())")
    pos = {k: i for i, k in enumerate(by_id)}
    return regs, np.fromiter(map(pos.__getitem__, ids), dtype=np.intp, count=len(ids))


def _descs_of(desc: Any) -> Tuple[ctypes.Array, "np.ndarray"]:
    """(a buffer of the distinct descriptors, the index of each entry's) of one descriptor,
    a sequence of them or an (n, RDESC_SIZE) uint8 array. The library copies what it needs
    at tpx_xfer_prepare: the buffer only lives through the call."""
    if isinstance(desc, (bytes, bytearray, memoryview)):
        ds, idx = [bytes(desc)], np.zeros((), dtype=np.intp)
    elif isinstance(desc, np.ndarray) and desc.ndim == 2:
        if desc.shape[1] != RDESC_SIZE:
            raise ValueError(f"prepare(): descriptor rows have {desc.shape[1]} bytes, not "
                             f"{RDESC_SIZE}")
        raw = np.ascontiguousarray(desc, dtype=np.uint8).tobytes()
        return (ctypes.create_string_buffer(raw, len(raw) or 1),
                np.arange(desc.shape[0], dtype=np.intp))
    else:
        every = [d if type(d) is bytes else bytes(d) for d in desc]
        pos = {d: i for i, d in enumerate(dict.fromkeys(every))}  # distinct, in order
        ds = list(pos)
        idx = np.fromiter(map(pos.__getitem__, every), dtype=np.intp, count=len(every))
    for i, d in enumerate(ds):
        if len(d) != RDESC_SIZE:
            raise ValueError(f"prepare(): a remote descriptor has {len(d)} bytes, not "
                             f"{RDESC_SIZE} (a Region.export() descriptor)")
    raw = b"".join(ds)
    return ctypes.create_string_buffer(raw, len(raw) or 1), idx


@dataclasses.dataclass(frozen=True)
class Strided:
    """A strided entry of Remote.prepare() (tpx_strided_t): a regular pattern of equal
    elements in one entry, each side with its own layout. Element (i_0, .., i_k) is the
    `elem_len` bytes at

        local_offset  + sum_d i_d * dims[d][1]   (of `local`, counted as prepare()'s)
        remote_offset + sum_d i_d * dims[d][2]   (of the exported range `remote`)

    with dims[d] = (count, local stride, remote stride), at most STRIDED_MAX_DIMS of them,
    the first outermost: elements move in row-major order, the last dimension fastest.
    No dims is one plain block. Strides are bytes (>= 0); on the destination side (local
    for READ, remote for WRITE) no two elements may share a byte. E.g. heads [2, 4) of 16
    tokens of an NHD block of 8 heads x 128 bf16 into a block of those 2 heads:

        Strided(region, 0, desc, 2 * 256, 512, [(16, 512, 8 * 256)])
    """
    local: "Region"
    local_offset: int
    remote: Desc
    remote_offset: int
    elem_len: int
    dims: Sequence[Tuple[int, int, int]] = ()

    def span(self, side: int) -> int:
        """Bytes from the first element's start to the last one's end, local side (0) or
        remote side (1)."""
        return self.elem_len + sum((int(d[0]) - 1) * int(d[1 + side]) for d in self.dims)

    def nbytes(self) -> int:
        """The payload: elem_len x every count."""
        n = self.elem_len
        for d in self.dims:
            n *= d[0]
        return n


@dataclasses.dataclass(frozen=True)
class KVCache:
    """One side's KV cache as tpx_kv_entries() sees it (tpx_kv_cache_t): `layers` layers
    one after another, each `kv` tensors (2: K then V) of `blocks` blocks of
    `block_size` tokens x `heads` heads x `head_dim` values of `dtype_size` bytes, a block
    laid out "NHD" ([token][head][dim]) or "HND" ([head][token][dim]); the side holds the
    model's heads [head0, head0 + heads) (rank r of tensor parallelism t of H heads:
    head0 = r * H // t)."""
    layers: int
    blocks: int
    block_size: int
    heads: int
    head_dim: int
    dtype_size: int = 2
    layout: str = "NHD"
    head0: int = 0
    kv: int = 2

    def nbytes(self) -> int:
        """Bytes of the whole cache (every layer, tensor and block)."""
        return (self.layers * self.kv * self.blocks * self.block_size * self.heads *
                self.head_dim * self.dtype_size)

    def _c(self) -> _KVCache:
        if self.layout not in ("NHD", "HND"):
            raise ValueError(f"KVCache: layout {self.layout!r} is not 'NHD' or 'HND'")
        return _KVCache(self.layers, self.kv, self.blocks, self.block_size, self.heads,
                        self.head0, self.head_dim, self.dtype_size,
                        0 if self.layout == "NHD" else 1)


def kv_entries(local: KVCache, local_region: "Region", local_offset: int, remote: KVCache,
               remote_desc: Desc, remote_offset: int, local_blocks: Ints, remote_blocks: Ints,
               ntokens: int) -> List[Strided]:
    """The strided entries that move tokens [0, ntokens) of a sequence between two KV
    caches of other layouts, block sizes or tensor-parallel splits (tpx_kv_entries):
    the heads both sides hold, of every layer and tensor, straight into the reader's
    layout. The local cache starts at local_offset of local_region, the remote one at
    remote_offset of the exported range remote_desc; local_blocks / remote_blocks are the
    sequence's block ids on each side (one per block_size tokens of that side, in token
    order). One entry per run of tokens inside one block on each side; give them to
    Remote.prepare(op, entries), READ or WRITE. TpxError TPX_ERR_INVALID_ARG when the
    caches differ in layers, kv, head_dim or dtype_size, share no head, or a block id is
    not below its cache's blocks."""
    lc, rc = local._c(), remote._c()
    lb = np.ascontiguousarray(np.asarray(local_blocks), dtype=np.uint64)
    rb = np.ascontiguousarray(np.asarray(remote_blocks), dtype=np.uint64)
    if ntokens <= 0:
        raise ValueError("kv_entries(): no tokens")
    for blocks, c, side in ((lb, local, "local"), (rb, remote, "remote")):
        if blocks.size < -(-ntokens // c.block_size):
            raise ValueError(f"kv_entries(): {blocks.size} {side} block ids for {ntokens} "
                             f"tokens of {c.block_size}-token blocks")
    n = _sz()
    _check(_api().tpx_kv_entries(ctypes.byref(lc), None, int(local_offset), ctypes.byref(rc),
                                 None, int(remote_offset), lb.ctypes.data, rb.ctypes.data,
                                 int(ntokens), None, 0, ctypes.byref(n)), "tpx_kv_entries")
    out = np.zeros(n.value, dtype=_STRIDED_DTYPE)
    _check(_api().tpx_kv_entries(ctypes.byref(lc), None, int(local_offset), ctypes.byref(rc),
                                 None, int(remote_offset), lb.ctypes.data, rb.ctypes.data,
                                 int(ntokens), out.ctypes.data, out.size, ctypes.byref(n)),
           "tpx_kv_entries")
    desc = bytes(remote_desc)
    return [Strided(local_region, int(e["local_offset"]), desc, int(e["remote_offset"]),
                    int(e["elem_len"]),
                    tuple((int(d[0]), int(d[1]), int(d[2])) for d in e["dim"][:e["ndims"]]))
            for e in out]


def _strided_list(entries: Sequence[Any]) -> Tuple[List["Region"], "np.ndarray", ctypes.Array]:
    """(the distinct Regions, the tpx_strided_t records with region indices in "local",
    the descriptors' buffer) of prepare()'s entries, plain 5-tuples and Strided mixed."""
    ents: List[Strided] = []
    for i, e in enumerate(entries):
        if isinstance(e, Strided):
            ents.append(e)
            continue
        e = tuple(e)
        if len(e) != 5:
            raise ValueError(f"prepare(): entry {i} has {len(e)} fields, not 5 (local region, "
                             "local offset, remote descriptor, remote offset, length) and is "
                             "not a Strided")
        ents.append(Strided(*e))
    regs, ridx = _regions_of([e.local for e in ents])
    dbuf, didx = _descs_of([e.remote for e in ents])
    rec = np.zeros(len(ents), dtype=_STRIDED_DTYPE)
    for i, e in enumerate(ents):
        dims = list(e.dims)
        if len(dims) > STRIDED_MAX_DIMS:
            raise ValueError(f"prepare(): entry {i} has {len(dims)} dimensions (at most "
                             f"{STRIDED_MAX_DIMS})")
        vals = [e.local_offset, e.remote_offset, e.elem_len] + [v for d in dims for v in d]
        if any(int(v) < 0 for v in vals) or any(len(d) != 3 for d in dims):
            raise ValueError(f"prepare(): entry {i}: offsets, lengths, counts and strides are "
                             "ints >= 0, a dimension (count, local stride, remote stride)")
        if e.elem_len == 0 or any(d[0] == 0 for d in dims):
            raise ValueError(f"prepare(): entry {i} has no bytes (an elem_len or count of 0)")
        reg = regs[ridx[i]]
        if e.local_offset + e.span(0) > reg.length:
            raise ValueError(f"prepare(): entry {i}'s local elements end at byte "
                             f"{e.local_offset + e.span(0)} of the {reg.length} bytes "
                             "registered of its region")
        rec[i]["local"] = ridx[i]
        rec[i]["local_offset"] = reg._delta + int(e.local_offset)
        rec[i]["remote"] = ctypes.addressof(dbuf) + int(didx[i]) * RDESC_SIZE
        rec[i]["remote_offset"] = int(e.remote_offset)
        rec[i]["elem_len"] = int(e.elem_len)
        rec[i]["ndims"] = len(dims)
        for k, d in enumerate(dims):
            rec[i]["dim"][k] = [int(v) for v in d]
    return regs, rec, dbuf


class Remote(_Owned):
    """A peer engine known by its metadata (tpx_remote_load)."""
    _what = "remote"

    def __init__(self, engine: "Engine", h: ctypes.c_void_p) -> None:
        self._engine, self._h = engine, h

    def _free(self, h: ctypes.c_void_p) -> None:
        _api().tpx_remote_release(h)

    @property
    def name(self) -> str:
        with self._engine._call(self) as (h,):
            return _api().tpx_remote_name(h).decode()

    def connect(self, timeout_ms: int = 0) -> None:
        with self._engine._call(self) as (h,):
            _check(_api().tpx_remote_connect(h, timeout_ms), "tpx_remote_connect")

    def prepare(self, op: int,
                local: Union["Region", Sequence["Region"], Iterable[Union[Entry, "Strided"]]],
                local_offsets: Optional[Ints] = None,
                remote_desc: Optional[Union[Desc, Sequence[Desc], "np.ndarray"]] = None,
                remote_offsets: Optional[Ints] = None, lengths: Optional[Ints] = None) -> "Prep":
        """Check and encode a READ or WRITE of many blocks once (tpx_xfer_prepare); post it
        many times. Each block (entry) is (local Region, local offset, remote descriptor,
        remote offset, length), as tpx_iov_t in C; local offsets count from the memory
        given to register() (Region.addr; blocks within its length), remote ones from the
        start of the exported range. Two forms:

            prepare(op, region, local_offsets, desc, remote_offsets, lengths)
            prepare(op, [(region, local_offset, desc, remote_offset, length), ...])

        In the first, each field is one value for every entry or one per entry (numpy
        broadcasting): `region` a Region or a sequence of Regions, `desc` a descriptor
        (Region.export()) or a sequence of them (or an (n, RDESC_SIZE) uint8 array), the
        offsets and lengths ints or arrays. So the blocks of many regions (vLLM: K and V of
        every layer) go in one transfer. Arrays are used as a whole; a list of entries, or
        regions and descriptors given one per entry, cost a Python step per block (64,000
        entries: tens of milliseconds), so prepare such a transfer once and post it many
        times.

        In the list form an entry may also be a Strided (a regular pattern of equal
        elements, up to STRIDED_MAX_DIMS dimensions, each side with its own strides:
        tpx_xfer_prepare_strided), mixed with plain blocks; kv_entries() makes those that
        move a KV cache between layouts, block sizes and tensor-parallel splits. A list
        with a strided entry that does not merge into plain blocks is a request list that
        tpx engines without strided entries refuse."""
        cols = (local_offsets, remote_desc, remote_offsets, lengths)
        if all(c is None for c in cols):
            if isinstance(local, Region):
                raise TypeError("prepare(op, region, local_offsets, remote_desc, "
                                "remote_offsets, lengths) or prepare(op, entries)")
            listed: List[Any] = list(local)  # type: ignore
            if any(isinstance(e, Strided) for e in listed):
                return self._prepare_strided(op, listed)
            entries: List[Tuple[Any, ...]] = [tuple(e) for e in listed]
            if any(len(e) != 5 for e in entries):
                i, e = next((i, e) for i, e in enumerate(entries) if len(e) != 5)
                raise ValueError(f"prepare(): entry {i} has {len(e)} fields, not 5 (local "
                                 "region, local offset, remote descriptor, remote offset, "
                                 "length)")
            local, local_offsets, remote_desc, remote_offsets, lengths = (  # type: ignore
                list(c) for c in zip(*entries)) if entries else ([], [], [], [], [])
        elif any(c is None for c in cols):
            raise TypeError("prepare(): give the local offsets, remote descriptor(s), remote "
                            "offsets and lengths, or one list of entries")
        regs, ridx = _regions_of(local)
        dbuf, didx = _descs_of(remote_desc)
        fields = {"local regions": ridx, "local offsets": _u64(local_offsets),
                  "remote descriptors": didx, "remote offsets": _u64(remote_offsets),
                  "lengths": _u64(lengths)}
        try:
            ridx, lo, didx, ro, ln = np.broadcast_arrays(*(np.atleast_1d(f)
                                                           for f in fields.values()))
        except ValueError:
            sizes = ", ".join(f"{k} {np.size(v)}" for k, v in fields.items() if np.ndim(v))
            raise ValueError(f"prepare(): the per-entry fields differ in length ({sizes})") \
                from None
        if lo.ndim != 1:
            raise ValueError("prepare(): offsets and lengths must be ints or 1-D arrays")
        if lo.size == 0:
            raise ValueError("prepare(): no blocks")
        rlen = np.array([r.length for r in regs], dtype=np.uint64)[ridx]
        bad = np.flatnonzero((lo > rlen) | (ln > rlen - np.minimum(lo, rlen)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"prepare(): local block {i} (bytes [{lo[i]}, +{ln[i]})) leaves the "
                             f"{rlen[i]} bytes registered of its region")
        iov = np.empty(lo.shape[0], dtype=_IOV_DTYPE)
        iov["local_offset"] = lo + np.array([r._delta for r in regs], dtype=np.uint64)[ridx]
        iov["remote"] = np.uint64(ctypes.addressof(dbuf)) + didx.astype(np.uint64) * \
            np.uint64(RDESC_SIZE)
        iov["remote_offset"] = ro
        iov["len"] = ln
        h = _vp()
        with self._engine._call(self, *regs) as handles:
            iov["local"] = np.array([x.value for x in handles[1:]], dtype=np.uint64)[ridx]
            _check(_api().tpx_xfer_prepare(handles[0], op, iov.ctypes.data, iov.shape[0],
                                           ctypes.byref(h)), "tpx_xfer_prepare")
            return self._engine._own(Prep(self._engine, h))

    def _prepare_strided(self, op: int, entries: Sequence[Any]) -> "Prep":
        if not entries:
            raise ValueError("prepare(): no blocks")
        regs, rec, dbuf = _strided_list(entries)
        h = _vp()
        with self._engine._call(self, *regs) as handles:
            rec["local"] = np.array([x.value for x in handles[1:]], dtype=np.uint64)[
                rec["local"].astype(np.intp)]
            _check(_api().tpx_xfer_prepare_strided(handles[0], op, rec.ctypes.data, rec.size,
                                                   ctypes.byref(h)), "tpx_xfer_prepare_strided")
            del dbuf  # copied by the library
            return self._engine._own(Prep(self._engine, h))

    def read(self, *a: Any, notif: Optional[bytes] = None, timeout_ms: int = 0) -> "Xfer":
        """prepare(READ, ...) + post + release of the preparation: returns the Xfer."""
        return self._once(READ, a, notif, timeout_ms)

    def write(self, *a: Any, notif: Optional[bytes] = None, timeout_ms: int = 0) -> "Xfer":
        """prepare(WRITE, ...) + post + release of the preparation: returns the Xfer."""
        return self._once(WRITE, a, notif, timeout_ms)

    def _once(self, op: int, a: Tuple[Any, ...], notif: Optional[bytes],
              timeout_ms: int) -> "Xfer":
        p = self.prepare(op, *a)
        try:
            return p.post(notif=notif, timeout_ms=timeout_ms)
        finally:
            p.release()

    def notify(self, msg: bytes) -> None:
        """A notification on its own (tpx_notif_send)."""
        b = bytes(msg)
        with self._engine._call(self) as (h,):
            _check(_api().tpx_notif_send(h, b, len(b)), "tpx_notif_send")


class Prep(_Owned):
    """A prepared one-sided transfer (tpx_xfer_prepare)."""
    _what = "preparation"

    def __init__(self, engine: "Engine", h: ctypes.c_void_p) -> None:
        self._engine, self._h = engine, h

    def _free(self, h: ctypes.c_void_p) -> None:
        _api().tpx_prep_release(h)

    def post(self, notif: Optional[bytes] = None, timeout_ms: int = 0) -> "Xfer":
        """Start it (again); `notif` (bytes) reaches the peer after all data."""
        h = _vp()
        b = None if notif is None else bytes(notif)
        with self._engine._call(self) as (ph,):
            _check(_api().tpx_xfer_post(ph, b, 0 if b is None else len(b), timeout_ms,
                                        ctypes.byref(h)), "tpx_xfer_post")
            return Xfer(self._engine, h)


class Xfer(_Owned):
    """A transfer in flight; release() (or garbage collection) frees it. release() or
    the engine's close() while another thread waits on it cancels it first."""
    _what = "transfer"

    def __init__(self, engine: "Engine", h: ctypes.c_void_p) -> None:
        self._engine, self._h = engine, h
        engine._xfers.add(self)

    def _free(self, h: ctypes.c_void_p) -> None:
        _api().tpx_xfer_release(h)

    def _wake(self) -> None:
        _api().tpx_xfer_cancel(self._h)

    def poll(self) -> bool:
        """True when done, False while running; raises TpxError if it failed."""
        n = _sz()
        with self._engine._call(self) as (h,):
            st = _api().tpx_xfer_poll(h, ctypes.byref(n))
        if st == _INPROGRESS:
            return False
        _check(st, "transfer")
        self.bytes = n.value
        return True

    def wait(self, timeout_ms: int = -1) -> int:
        """Wait until done (bytes moved) or raise TpxError (TIMED_OUT after timeout_ms)."""
        n = _sz()
        with self._engine._call(self) as (h,):
            st = _api().tpx_xfer_wait(h, timeout_ms, ctypes.byref(n))
        if st == _INPROGRESS:
            raise TpxError(_ERR_TIMED_OUT, "tpx_xfer_wait")
        _check(st, "transfer")
        return n.value

    def cancel(self) -> None:
        with self._engine._call(self) as (h,):
            st = _api().tpx_xfer_cancel(h)
        if st not in (_OK, _INPROGRESS):
            raise TpxError(st, "tpx_xfer_cancel")

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


class Peer(_Owned):
    """Two-sided connection (tpx_peer_connect / tpx_peer_accept)."""
    _what = "peer"

    def __init__(self, engine: "Engine", h: ctypes.c_void_p) -> None:
        self._engine, self._h = engine, h

    def _free(self, h: ctypes.c_void_p) -> None:
        _api().tpx_peer_close(h)

    close = _Owned.release

    def send(self, region: Region, offset: int, length: int) -> "Xfer":
        """Send bytes [offset, offset+length) of region's memory (offset from Region.addr,
        within its length)."""
        return self._two_sided(_api().tpx_send, region, offset, length, "tpx_send")

    def recv(self, region: Region, offset: int, length: int) -> "Xfer":
        """Receive into bytes [offset, offset+length) of region's memory (offset from
        Region.addr, within its length)."""
        return self._two_sided(_api().tpx_recv, region, offset, length, "tpx_recv")

    def _two_sided(self, fn: Callable[..., int], region: Region, offset: int, length: int,
                   what: str) -> "Xfer":
        off = region._offset(offset, length, what)
        h = _vp()
        with self._engine._call(self, region) as (ph, rh):
            _check(fn(ph, rh, off, int(length), ctypes.byref(h)), what)
            return Xfer(self._engine, h)


class Registry(_Closable):
    """Engines published in etcd (tpx/registry.h): publish an engine with its exported
    descriptors under <prefix>/<engine name> (a lease kept alive by a thread), look names
    up, list them, load them as remotes that reconnect through the registry. url
    "etcd://host:port[,host:port]" and prefix default to TPX_METADATA and
    TPX_METADATA_PREFIX.

    Thread-safe (the library serialises the calls on one registry). close() waits for
    the calls in flight in other threads -- a watch() returns at its timeout_ms -- and
    refuses new ones (TpxError TPX_ERR_INVALID_STATE)."""

    def __init__(self, url: Optional[str] = None, prefix: Optional[str] = None) -> None:
        self._h = None
        self._cv = threading.Condition()  # guards the three below
        self._calls = 0  # calls into the library in flight (_call)
        self._closing = False
        h = _vp()
        _check(_api().tpx_registry_open(url.encode() if url else None,
                                        prefix.encode() if prefix is not None else None,
                                        ctypes.byref(h)), "tpx_registry_open")
        self._h = h

    @contextlib.contextmanager
    def _call(self) -> Iterator[ctypes.c_void_p]:
        """Around a call into the library with the registry's handle: counted as in
        flight, refused once the registry is closing."""
        with self._cv:
            if self._closing or self._h is None:
                raise TpxError(_ERR_INVALID_STATE, "the registry is closed")
            self._calls += 1
        try:
            yield self._h
        finally:
            with self._cv:
                self._calls -= 1
                self._cv.notify_all()

    def close(self) -> None:
        """Revoke this registry's publications (their names vanish at once) and free it,
        once the calls in flight on it returned. Another thread's close() returns once it
        is closed. Not from a signal handler or anything else that runs while this thread
        is inside a call of the registry: it would wait for itself."""
        with self._cv:
            if self._h is None:
                return
            if self._closing:
                while self._h is not None:
                    self._cv.wait()
                return
            self._closing = True
            while self._calls:
                self._cv.wait()
        try:
            _api().tpx_registry_close(self._h)
        finally:
            with self._cv:
                self._h = None
                self._cv.notify_all()

    def publish(self, engine: Engine, descs: Iterable[Desc] = (), ttl: int = 0) -> None:
        """Publish engine (its name) with these exported descriptors (Region.export(): each
        exactly RDESC_SIZE bytes, else ValueError and nothing is published); ttl seconds
        (0: TPX_METADATA_TTL)."""
        descs = [bytes(d) for d in descs]
        for i, d in enumerate(descs):
            if len(d) != RDESC_SIZE:
                raise ValueError(f"publish(): descriptor {i} has {len(d)} bytes, not "
                                 f"{RDESC_SIZE} (a Region.export() descriptor)")
        raw = b"".join(descs)
        with self._call() as h, engine._call():
            _check(_api().tpx_registry_publish(h, engine._h, raw, len(descs), ttl),
                   "tpx_registry_publish")

    def unpublish(self, engine: Engine) -> None:
        with self._call() as h, engine._call():
            _check(_api().tpx_registry_unpublish(h, engine._h), "tpx_registry_unpublish")

    @staticmethod
    def _entry(e: _RegEntry) -> Tuple[bytes, List[bytes]]:
        d = bytes(e.descs)
        return bytes(e.md[:e.md_len]), [d[i * RDESC_SIZE:(i + 1) * RDESC_SIZE]
                                         for i in range(e.ndescs)]

    def lookup(self, name: str) -> Tuple[bytes, List[bytes]]:
        """(metadata blob, [descriptors]) published under name; TpxError
        TPX_ERR_NOT_FOUND if there is none."""
        e = _RegEntry()
        with self._call() as h:
            _check(_api().tpx_registry_lookup(h, name.encode(), ctypes.byref(e)),
                   f"tpx_registry_lookup({name})")
        return self._entry(e)

    def list(self, max_names: int = 4096) -> List[str]:
        """The names published under the prefix, sorted."""
        buf = (ctypes.c_char * (NAME_MAX * max_names))()
        n = _sz(0)
        with self._call() as h:
            _check(_api().tpx_registry_list(h, buf, max_names, ctypes.byref(n)),
                   "tpx_registry_list")
        raw = bytes(buf)
        return [raw[i * NAME_MAX:(i + 1) * NAME_MAX].split(b"\0", 1)[0].decode()
                for i in range(min(n.value, max_names))]

    def load_remote(self, engine: Engine, name: str) -> Tuple["Remote", List[bytes]]:
        """(Remote, [descriptors]) of the engine published under name; the remote looks
        the name up again whenever it must connect anew (its engine restarted)."""
        h, e = _vp(), _RegEntry()
        with self._call() as rh, engine._call():
            _check(_api().tpx_registry_load_remote(rh, engine._h, name.encode(),
                                                   ctypes.byref(h), ctypes.byref(e)),
                   f"tpx_registry_load_remote({name})")
            return engine._own(Remote(engine, h)), self._entry(e)[1]

    def watch(self, timeout_ms: int = 1000, max_events: int = 64) -> List[Tuple[str, bool]]:
        """Changes under the prefix, in order: [(name, gone)], waiting up to timeout_ms for
        the first ([] if none came); gone is True when the name left (unpublished or its
        lease expired). Starts at the last list(), resumes after a broken stream."""
        evs, n = (_RegEvent * max_events)(), _sz(0)
        with self._call() as h:
            _check(_api().tpx_registry_watch(h, evs, max_events, ctypes.byref(n), timeout_ms),
                   "tpx_registry_watch")
        return [(evs[i].name.decode(), bool(evs[i].gone)) for i in range(n.value)]
