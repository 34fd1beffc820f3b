"""tpx: move host or GPU memory between machines over TCP (NCCL net plugins).

A thin ctypes binding over libtpx's stable C API (include/tpx/tpx.h); the
GIL is released during every call into the library. Errors raise TpxError,
whose ``status`` is the tpx_status_t value.

    import numpy as np, tpx
    with tpx.Engine(name="decode-0") as eng:
        buf = np.zeros(1 << 20, np.uint8)
        reg = eng.register(buf)
        remote = eng.load_remote(peer_metadata)          # bytes from the peer
        prep = remote.prepare(tpx.READ, reg, np.arange(16) * 4096,
                              peer_desc, np.arange(16) * 4096, 4096)
        prep.post(notif=b"done").wait()

The wheel bundles libtpx.so, libnccl-net-tpx.so (for NCCL_NET_PLUGIN) and
the NIXL backend libplugin_TPX.so (for NIXL_PLUGIN_DIR); see
nccl_plugin_path() and nixl_plugin_dir().
"""

import contextlib
import ctypes
import os
import threading
import time
import weakref

import numpy as np

__all__ = [
    "TpxError", "Engine", "Region", "Remote", "Prep", "Xfer", "Peer",
    "READ", "WRITE", "MEM_HOST", "MEM_CUDA", "PORT_EPHEMERAL", "PORT_NONE", "PORT_DEFAULT",
    "RDESC_SIZE", "NOTIF_MAX", "library_path", "nccl_plugin_path", "nixl_plugin_dir",
    "version", "Registry",
]

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBDIR = os.path.join(_HERE, "_lib")

READ, WRITE = 1, 2
MEM_HOST, MEM_CUDA = 1, 2
PORT_DEFAULT, PORT_NONE, PORT_EPHEMERAL = 0, -1, -2
RDESC_SIZE = 48
NOTIF_MAX = 1024
NAME_MAX = 64
METADATA_MAX = 2048
_OK, _INPROGRESS = 0, 1


def library_path():
    """Path of the bundled libtpx (TPX_LIBRARY overrides it)."""
    return os.environ.get("TPX_LIBRARY") or os.path.join(_LIBDIR, "libtpx.so.0")


def nccl_plugin_path(strict_tcpx=False):
    """Path of libnccl-net-tpx.so: NCCL_NET_PLUGIN=<this> makes NCCL use tpx's transport.
    strict_tcpx: libnccl-net-tpx-tcpx.so instead, the strict TCPX mode as Google's
    GPUDirect-TCPX plugin looks to a loader (only ncclNetPlugin_v7)."""
    return os.path.join(_LIBDIR, "libnccl-net-tpx-tcpx.so" if strict_tcpx else
                        "libnccl-net-tpx.so")


def nixl_plugin_dir():
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
        "notifs_dropped", "peers_connected", "rma_refused")]


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

class _RegEntry(ctypes.Structure):  # tpx_registry_entry_t (tpx/registry.h)
    _fields_ = [("name", ctypes.c_char * NAME_MAX), ("md_len", ctypes.c_size_t),
                ("md", ctypes.c_ubyte * METADATA_MAX), ("ndescs", ctypes.c_size_t),
                ("descs", ctypes.c_ubyte * (RDESC_SIZE * 64))]


class _RegEvent(ctypes.Structure):  # tpx_registry_event_t
    _fields_ = [("name", ctypes.c_char * NAME_MAX), ("gone", ctypes.c_int)]


_lib = None


def _api():
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
        "tpx_engine_get_metadata": (_st, [_vp, _vp, ctypes.POINTER(_sz)]),
        "tpx_remote_load": (_st, [_vp, ctypes.c_char_p, _sz, ctypes.POINTER(_vp)]),
        "tpx_engine_counters": (_st, [_vp, ctypes.POINTER(_Counters)]),
        "tpx_engine_info": (_st, [_vp, ctypes.POINTER(_Info)]),
        "tpx_remote_forget": (None, [_vp]),
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


def version():
    """The version of libtpx (tpx_version_string()): the one version of the project
    (its VERSION file), also the wheel's."""
    return _api().tpx_version_string().decode()


def __getattr__(name):  # tpx.__version__, without loading the library at import
    if name == "__version__":
        return version()
    raise AttributeError(f"module 'tpx' has no attribute {name!r}")


class TpxError(Exception):
    """A tpx call failed: ``status`` is its tpx_status_t (negative), ``name`` the
    enum's name ("TPX_ERR_TIMED_OUT"), ``text`` its description."""

    def __init__(self, status, what=""):
        self.status = status
        self.name = _api().tpx_status_name(status).decode()
        self.text = _api().tpx_status_string(status).decode()
        msg = f"{self.text} ({self.name} = {status})"
        super().__init__(f"{what}: {msg}" if what else msg)


def _check(status, what):
    if status != _OK:
        raise TpxError(status, what)


def _bytes_of(obj):
    """(address, length, mem type) of a numpy array, a torch tensor (data_ptr()), an
    object with __cuda_array_interface__, or anything with the buffer protocol."""
    return _memory_of(obj)[:3]


def _memory_of(obj):
    """_bytes_of() plus a memoryview of obj (None for torch tensors and CUDA arrays): an
    active buffer export, so that obj cannot be resized (bytearray), closed (mmap) or
    otherwise let go of its memory while the view is held."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch.Tensor
        if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
            raise ValueError("register(): the tensor must be contiguous")
        kind = MEM_CUDA if getattr(obj, "is_cuda", False) else MEM_HOST
        return obj.data_ptr(), obj.element_size() * obj.numel(), kind, None
    if cai is not None:
        if cai.get("strides") not in (None, ()):
            raise ValueError("register(): the CUDA array must be contiguous")
        n = int(np.prod(cai["shape"])) * np.dtype(cai["typestr"]).itemsize
        return int(cai["data"][0]), n, MEM_CUDA, None
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise ValueError("register(): the array must be C-contiguous")
        try:
            view = memoryview(obj)  # also pins what the array views (a bytearray, ...)
        except (TypeError, ValueError):  # dtypes without a buffer format: the array is kept
            view = None
        return obj.ctypes.data, obj.nbytes, MEM_HOST, view
    view = memoryview(obj)
    if not view.contiguous:
        view.release()
        raise ValueError("register(): the buffer must be contiguous")
    with view.cast("B") as flat:
        a = np.frombuffer(flat, dtype=np.uint8)
        addr, n = a.ctypes.data, a.nbytes
        del a  # its export of `flat` ends here, so `flat` can be released
    return addr, n, MEM_HOST, view


# ---- objects ----------------------------------------------------------------

_ERR_INVALID_STATE, _ERR_NOT_FOUND, _ERR_TIMED_OUT = -2, -30, -20
_ACCEPT_SLICE_MS = 100  # Engine.accept() waits in steps of this, looking for close()


class _Closable:
    """A context manager whose close() also runs when it is garbage-collected."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
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

    def __init__(self, e, objs):
        self.e, self.objs = e, objs

    def __enter__(self):
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

    def __exit__(self, *exc):
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

    def __init__(self, name=None, gpu=-1, port=PORT_EPHEMERAL, bind_addr=None, plugin=None,
                 channels=0, chunk_bytes=0, window=0, timeout_ms=0, progress_thread=True,
                 auth_token=None, notif_queue=0):
        self._h = None
        self._cv = threading.Condition(threading.RLock())  # guards the counts below
        self._calls = 0  # calls into the library in flight (_InCall)
        self._closing = False
        self._closer = None  # the thread in close()
        lib = _api()
        p = _EngineParams()
        lib.tpx_engine_params_init(ctypes.byref(p))
        self._keep = []  # the C strings must outlive tpx_engine_create
        def cstr(s):
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
        self._owned = []  # regions, remotes, preps, peers: released before the engine
        self._xfers = weakref.WeakSet()  # transfers still held by the caller
        self._nbuf = (_Notif * 64)()
        info = _Info(size=ctypes.sizeof(_Info))
        if lib.tpx_engine_info(h, ctypes.byref(info)) != 0:
            lib.tpx_engine_destroy(h)
            raise TpxError(_ERR_INVALID_STATE, "tpx_engine_info failed on a new engine")
        # accept(-1); 0 from a library older than the field: its documented default
        self._connect_ms = info.connect_timeout_ms if info.connect_timeout_ms > 0 else 30000
        self._h = h

    def _call(self, *objs):
        return _InCall(self, objs)

    def close(self):
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
    def handle(self):
        if self._h is None or self._closing:
            raise TpxError(_ERR_INVALID_STATE, "the engine is closed")
        return self._h

    @property
    def port(self):
        with self._call():
            return _api().tpx_engine_port(self._h)

    def metadata(self):
        """This engine's metadata blob (bytes) for peers' load_remote()."""
        buf = ctypes.create_string_buffer(METADATA_MAX)
        n = _sz(METADATA_MAX)
        with self._call():
            _check(_api().tpx_engine_get_metadata(self._h, buf, ctypes.byref(n)),
                   "tpx_engine_get_metadata")
        return buf.raw[:n.value]

    def register(self, obj, kind=None, gpu=None):
        """Register the memory of `obj` (numpy array, torch tensor, CUDA array, buffer).
        The region keeps `obj` and, for objects with the buffer protocol, a buffer export
        of it (a memoryview) until it is deregistered: a registered bytearray cannot be
        resized nor a registered mmap closed meanwhile (BufferError). The caller must not
        free a torch tensor's or CUDA array's memory while it is registered. `gpu`: the
        GPU the caller says CUDA memory is on (checked; see info()["gpu_from"])."""
        addr, n, k, view = _memory_of(obj)
        try:
            return self._register(addr, n, kind or k, obj, view, gpu)
        except BaseException:
            if view is not None:
                view.release()
            raise

    def register_ptr(self, addr, length, kind=MEM_HOST, gpu=None):
        """Register `length` bytes at address `addr`; `gpu` as in register() (then `kind`
        is CUDA memory)."""
        return self._register(addr, length, kind, None, None, gpu)

    def _register(self, addr, n, kind, obj, view, gpu=None):
        h = _vp()
        with self._call():
            if gpu is not None:
                _check(_api().tpx_mem_register_gpu(self._h, addr, n, int(gpu), ctypes.byref(h)),
                       "tpx_mem_register_gpu")
            else:
                _check(_api().tpx_mem_register(self._h, addr, n, kind, ctypes.byref(h)),
                       "tpx_mem_register")
            base = _api().tpx_region_base(h) or 0
            return self._own(Region(self, h, addr, n, obj, view, addr - base))

    def load_remote(self, blob):
        """Accept a peer engine's metadata (bytes); connects lazily (or Remote.connect())."""
        h = _vp()
        b = bytes(blob)
        with self._call():
            _check(_api().tpx_remote_load(self._h, b, len(b), ctypes.byref(h)),
                   "tpx_remote_load")
            return self._own(Remote(self, h))

    def notifs(self):
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

    def info(self):
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

    def counters(self):
        c = _Counters()
        c.size = ctypes.sizeof(c)
        with self._call():
            _check(_api().tpx_engine_counters(self._h, ctypes.byref(c)), "tpx_engine_counters")
        return {f: getattr(c, f) for f, _ in _Counters._fields_ if f != "size"}

    def connect(self, host, port, timeout_ms=0):
        """Two-sided: connect to the engine listening at host:port (close() waits for it)."""
        h = _vp()
        with self._call():
            _check(_api().tpx_peer_connect(self._h, host.encode(), port, timeout_ms,
                                           ctypes.byref(h)), "tpx_peer_connect")
            return self._own(Peer(self, h))

    def accept(self, timeout_ms=-1):
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

    def _own(self, o):
        self._owned.append(o)
        return o

    def _disown(self, o):
        try:
            self._owned.remove(o)
        except ValueError:
            pass
        self._xfers.discard(o)


class _Owned:
    """An object of an engine holding a library handle (None once released)."""
    _what = "object"
    _h = None
    _dying = False  # release() started: new calls are refused
    _calls = 0      # calls in flight that use the handle (_InCall)

    def _drop(self):
        """Free the handle now. Only when no call uses it: from close() of the engine
        (after its calls in flight ended) or from release()."""
        h = self._h
        if h is not None:
            self._h = None
            self._free(h)

    def _wake(self):
        """Make the calls in flight on this object return sooner (release() waits)."""

    def release(self):
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

    def __init__(self, engine, h, addr, length, obj, view=None, delta=0):
        self._engine, self._h, self.addr, self.length, self._obj = engine, h, addr, length, obj
        self._view = view  # the buffer export that pins obj's memory (memoryview or None)
        self._delta = delta  # addr - base: the library's offset of our byte 0
        self._exports = []  # descriptors this Region exported (still live)

    def _free(self, h):
        lib = _api()
        for d in self._exports:  # the library's region may live on in other Regions
            lib.tpx_region_unexport(h, d)  # TPX_ERR_NOT_FOUND: ended already
        self._exports.clear()
        lib.tpx_mem_deregister(h)
        view, self._view, self._obj = self._view, None, None
        if view is not None:
            try:
                view.release()
            except BufferError:  # exported further by someone: let it go with them
                pass

    def deregister(self):
        """End this Region's exports, deregister, and let go of the object registered
        (a bytearray may be resized again)."""
        self.release()

    close = deregister

    @property
    def base(self):
        """Address of the library's offset 0 (the start of the cached region; may lie
        before addr)."""
        return self.addr - self._delta

    def _offset(self, offset, length, what):
        """The library's offset of [offset, offset+length) of this Region's memory."""
        offset, length = int(offset), int(length)
        if offset < 0 or length < 0 or offset + length > self.length:
            raise ValueError(f"{what}: bytes [{offset}, +{length}) are outside the "
                             f"{self.length} bytes registered")
        return self._delta + offset

    def export(self, offset=0, length=0):
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

    def unexport(self, desc):
        """End an export this Region made (peers' requests naming it are refused from now
        on); TpxError TPX_ERR_NOT_FOUND if it is not one of this Region's live exports."""
        d = bytes(desc)
        with self._engine._call(self) as (h,):
            if d not in self._exports:
                raise TpxError(_ERR_NOT_FOUND, "Region.unexport")
            self._exports.remove(d)
            _check(_api().tpx_region_unexport(h, d), "tpx_region_unexport")

    def _local_offset(self, offsets, lengths):
        """The library's offsets of blocks [offsets[i], +lengths[i]) of this Region's memory
        (uint64 arrays); ValueError if one leaves its `length` bytes."""
        n = np.uint64(self.length)
        if offsets.size and (np.any(offsets > n) or np.any(lengths > n - np.minimum(offsets, n))):
            raise ValueError(f"prepare(): a local block leaves the {self.length} bytes "
                             "registered")
        return offsets + np.uint64(self._delta)


def rdesc_info(desc):
    """(owner address, length) of a region descriptor."""
    a, n = ctypes.c_uint64(), ctypes.c_uint64()
    _check(_api().tpx_rdesc_info(bytes(desc), ctypes.byref(a), ctypes.byref(n)), "tpx_rdesc_info")
    return a.value, n.value


class Remote(_Owned):
    """A peer engine known by its metadata (tpx_remote_load)."""
    _what = "remote"

    def __init__(self, engine, h):
        self._engine, self._h = engine, h

    def _free(self, h):
        _api().tpx_remote_forget(h)

    forget = _Owned.release

    @property
    def name(self):
        with self._engine._call(self) as (h,):
            return _api().tpx_remote_name(h).decode()

    def connect(self, timeout_ms=0):
        with self._engine._call(self) as (h,):
            _check(_api().tpx_remote_connect(h, timeout_ms), "tpx_remote_connect")

    def prepare(self, op, local, local_offsets, remote_desc, remote_offsets, lengths):
        """Check and encode a READ or WRITE of many blocks once (tpx_xfer_prepare); post it
        many times. local: a Region; local offsets count from the memory given to
        register() (Region.addr, blocks within its length), remote ones from the start of
        the exported range; lengths: one int or an array. The arrays are used as a whole
        (no Python loop per block)."""
        lo = np.atleast_1d(np.asarray(local_offsets, dtype=np.uint64))
        ro = np.atleast_1d(np.asarray(remote_offsets, dtype=np.uint64))
        ln = np.broadcast_to(np.asarray(lengths, dtype=np.uint64), lo.shape)
        if ro.shape != lo.shape:
            raise ValueError("prepare(): local and remote offset arrays differ in length")
        desc = ctypes.create_string_buffer(bytes(remote_desc), RDESC_SIZE)
        iov = np.empty(lo.shape[0], dtype=_IOV_DTYPE)
        iov["local_offset"] = local._local_offset(lo, ln)
        iov["remote"] = ctypes.addressof(desc)
        iov["remote_offset"] = ro
        iov["len"] = ln
        h = _vp()
        with self._engine._call(self, local) as (rh, lh):
            iov["local"] = lh.value
            _check(_api().tpx_xfer_prepare(rh, op, iov.ctypes.data, iov.shape[0],
                                           ctypes.byref(h)), "tpx_xfer_prepare")
            return self._engine._own(Prep(self._engine, h))

    def read(self, *a, notif=None, timeout_ms=0):
        """prepare(READ, ...) + post + release of the preparation: returns the Xfer."""
        return self._once(READ, a, notif, timeout_ms)

    def write(self, *a, notif=None, timeout_ms=0):
        return self._once(WRITE, a, notif, timeout_ms)

    def _once(self, op, a, notif, timeout_ms):
        p = self.prepare(op, *a)
        try:
            return p.post(notif=notif, timeout_ms=timeout_ms)
        finally:
            p.release()

    def notify(self, msg):
        """A notification on its own (tpx_notif_send)."""
        b = bytes(msg)
        with self._engine._call(self) as (h,):
            _check(_api().tpx_notif_send(h, b, len(b)), "tpx_notif_send")


class Prep(_Owned):
    """A prepared one-sided transfer (tpx_xfer_prepare)."""
    _what = "preparation"

    def __init__(self, engine, h):
        self._engine, self._h = engine, h

    def _free(self, h):
        _api().tpx_prep_release(h)

    def post(self, notif=None, timeout_ms=0):
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

    def __init__(self, engine, h):
        self._engine, self._h = engine, h
        engine._xfers.add(self)

    def _free(self, h):
        _api().tpx_xfer_release(h)

    def _wake(self):
        _api().tpx_xfer_cancel(self._h)

    def poll(self):
        """True when done, False while running; raises TpxError if it failed."""
        n = _sz()
        with self._engine._call(self) as (h,):
            st = _api().tpx_xfer_poll(h, ctypes.byref(n))
        if st == _INPROGRESS:
            return False
        _check(st, "transfer")
        self.bytes = n.value
        return True

    def wait(self, timeout_ms=-1):
        """Wait until done (bytes moved) or raise TpxError (TIMED_OUT after timeout_ms)."""
        n = _sz()
        with self._engine._call(self) as (h,):
            st = _api().tpx_xfer_wait(h, timeout_ms, ctypes.byref(n))
        if st == _INPROGRESS:
            raise TpxError(_ERR_TIMED_OUT, "tpx_xfer_wait")
        _check(st, "transfer")
        return n.value

    def cancel(self):
        with self._engine._call(self) as (h,):
            st = _api().tpx_xfer_cancel(h)
        if st not in (_OK, _INPROGRESS):
            raise TpxError(st, "tpx_xfer_cancel")

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


class Peer(_Owned):
    """Two-sided connection (tpx_peer_connect / tpx_peer_accept)."""
    _what = "peer"

    def __init__(self, engine, h):
        self._engine, self._h = engine, h

    def _free(self, h):
        _api().tpx_peer_close(h)

    close = _Owned.release

    def send(self, region, offset, length):
        """Send bytes [offset, offset+length) of region's memory (offset from Region.addr,
        within its length)."""
        return self._two_sided(_api().tpx_send, region, offset, length, "tpx_send")

    def recv(self, region, offset, length):
        """Receive into bytes [offset, offset+length) of region's memory (offset from
        Region.addr, within its length)."""
        return self._two_sided(_api().tpx_recv, region, offset, length, "tpx_recv")

    def _two_sided(self, fn, region, offset, length, what):
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

    def __init__(self, url=None, prefix=None):
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
    def _call(self):
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

    def close(self):
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

    def publish(self, engine, descs=(), ttl=0):
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

    def unpublish(self, engine):
        with self._call() as h, engine._call():
            _check(_api().tpx_registry_unpublish(h, engine._h), "tpx_registry_unpublish")

    @staticmethod
    def _entry(e):
        d = bytes(e.descs)
        return bytes(e.md[:e.md_len]), [d[i * RDESC_SIZE:(i + 1) * RDESC_SIZE]
                                         for i in range(e.ndescs)]

    def lookup(self, name):
        """(metadata blob, [descriptors]) published under name; TpxError
        TPX_ERR_NOT_FOUND if there is none."""
        e = _RegEntry()
        with self._call() as h:
            _check(_api().tpx_registry_lookup(h, name.encode(), ctypes.byref(e)),
                   f"tpx_registry_lookup({name})")
        return self._entry(e)

    def list(self, max_names=4096):
        """The names published under the prefix, sorted."""
        buf = (ctypes.c_char * (NAME_MAX * max_names))()
        n = _sz(0)
        with self._call() as h:
            _check(_api().tpx_registry_list(h, buf, max_names, ctypes.byref(n)),
                   "tpx_registry_list")
        raw = bytes(buf)
        return [raw[i * NAME_MAX:(i + 1) * NAME_MAX].split(b"\0", 1)[0].decode()
                for i in range(min(n.value, max_names))]

    def load_remote(self, engine, name):
        """(Remote, [descriptors]) of the engine published under name; the remote looks
        the name up again whenever it must connect anew (its engine restarted)."""
        h, e = _vp(), _RegEntry()
        with self._call() as rh, engine._call():
            _check(_api().tpx_registry_load_remote(rh, engine._h, name.encode(),
                                                   ctypes.byref(h), ctypes.byref(e)),
                   f"tpx_registry_load_remote({name})")
            return engine._own(Remote(engine, h)), self._entry(e)[1]

    def watch(self, timeout_ms=1000, max_events=64):
        """Changes under the prefix, in order: [(name, gone)], waiting up to timeout_ms for
        the first ([] if none came); gone is True when the name left (unpublished or its
        lease expired). Starts at the last list(), resumes after a broken stream."""
        evs, n = (_RegEvent * max_events)(), _sz(0)
        with self._call() as h:
            _check(_api().tpx_registry_watch(h, evs, max_events, ctypes.byref(n), timeout_ms),
                   "tpx_registry_watch")
        return [(evs[i].name.decode(), bool(evs[i].gone)) for i in range(n.value)]
