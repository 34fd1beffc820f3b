# SPDX-License-Identifier: Apache-2.0
"""Stock NCCL loads tpx's plugin: which ncclNet version it took, and the plugin's devices.

One process, one GPU, a one-rank communicator (ncclCommInitRank with nranks 1) made by
the libnccl of NVIDIA's wheel (nvidia-nccl-cu12 or -cu13) through ctypes, with
NCCL_NET_PLUGIN naming libnccl-net-tpx.so and NCCL_NET=tpx (so a plugin NCCL cannot use
is an error, not a silent fall-back to its socket transport). NCCL's own log says which
table it loaded ("NET/Plugin: Loaded net plugin tpx (v11)" from NCCL 2.28, v12 from 2.30)
and which network the communicator uses; the plugin lists its devices there ("NET/tpx:
device 0: ..."). No traffic: that needs two ranks (nccl_plugin.py, two GPUs).

usage: python3 nccl_net_check.py PLUGIN_SO [LIBNCCL_SO]
  LIBNCCL_SO: default the nvidia.nccl wheel's lib/libnccl.so.2, else libnccl.so.2 on the
  loader's path. NCCL_SOCKET_IFNAME defaults to lo (the bootstrap of one rank);
  TPX_SOCKET_IFNAME, if set, picks the plugin's devices.
Exit status 0 when NCCL loaded tpx through the table its version should take.
"""
import ctypes, os, re, sys, tempfile


def wheel_libnccl():
    try:
        import nvidia.nccl as m  # nvidia-nccl-cu12 / -cu13
    except ImportError:
        return None
    for d in getattr(m, "__path__", []):
        p = os.path.join(d, "lib", "libnccl.so.2")
        if os.path.exists(p):
            return p
    return None


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]  # NCCL_UNIQUE_ID_BYTES


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    plugin = os.path.abspath(sys.argv[1])
    libpath = sys.argv[2] if len(sys.argv) > 2 else (wheel_libnccl() or "libnccl.so.2")
    log = tempfile.NamedTemporaryFile(prefix="nccl_net_check.", suffix=".log", delete=False).name
    # NCCL reads these when the communicator is made, after the library is loaded.
    os.environ.update(NCCL_NET_PLUGIN=plugin, NCCL_NET="tpx", NCCL_DEBUG="INFO",
                      NCCL_DEBUG_SUBSYS="INIT,NET", NCCL_DEBUG_FILE=log)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    nccl = ctypes.CDLL(libpath)
    ver = ctypes.c_int(0)
    nccl.ncclGetVersion(ctypes.byref(ver))
    v = ver.value  # 22809 = 2.28.9
    major, minor, patch = v // 10000, v // 100 % 100, v % 100
    want = 12 if (major, minor) >= (2, 30) else 11 if (major, minor) >= (2, 28) else None
    print(f"NCCL {major}.{minor}.{patch} ({libpath}); plugin {plugin}")
    nccl.ncclGetErrorString.restype = ctypes.c_char_p
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                      ctypes.c_int]
    uid, comm = UniqueId(), ctypes.c_void_p()
    rc = nccl.ncclGetUniqueId(ctypes.byref(uid))
    if rc == 0:
        rc = nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)
    if rc == 0:
        rc = nccl.ncclCommDestroy(comm)  # the plugin's context is finalised here
    text = open(log, errors="replace").read()
    loaded = re.findall(r"NET/Plugin: Loaded net plugin (\S+) \(v(\d+)\)", text)
    using = re.findall(r"Using network (\S+)", text)
    devices = [l.split("NET/tpx: ", 1)[1] for l in text.splitlines()
               if "NET/tpx: device" in l or "NET/tpx: built-in" in l]
    trouble = [l for l in text.splitlines()
               if "WARN" in l or "unsupported" in l or "Failed to initialize" in l]
    print(f"communicator: {'made and destroyed' if rc == 0 else 'FAILED: ' + nccl.ncclGetErrorString(rc).decode()}")
    print("loaded: " + (", ".join(f"{n} through ncclNet v{k}" for n, k in loaded) or "no external net plugin"))
    print("network used: " + (using[0] if using else "(none logged)"))
    print("plugin devices:" + ("" if devices else " (none logged)"))
    for d in devices:
        print("  " + d)
    for l in trouble[:10]:
        print("  log: " + l.strip())
    ok = rc == 0 and any(n == "tpx" for n, _ in loaded) and using[:1] == ["tpx"]
    if want is not None:
        ok = ok and any(n == "tpx" and int(k) == want for n, k in loaded)
        print(f"expected ncclNet v{want} for NCCL {major}.{minor}: {'yes' if ok else 'NO'}")
    print(f"NCCL log: {log}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
