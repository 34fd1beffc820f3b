# SPDX-License-Identifier: Apache-2.0
"""tpx.Registry (tpx/registry.h) against a real etcd started for this module
(Debian's etcd-server, on 127.0.0.1 with free ports and its own data
directory; skipped without it): publish, lookup, list, a remote by name that
reads the published export, and departures."""
import os
import shutil
import sys
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import numpy as np
import pytest

import tpx
from conftest import MiB, agent_name, pattern


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def etcd():
    exe = os.environ.get("TPX_ETCD") or shutil.which("etcd") or "/usr/bin/etcd"
    if not os.access(exe, os.X_OK):
        pytest.skip("no etcd binary (Debian: etcd-server)")
    d = tempfile.mkdtemp(prefix="tpx-etcd-py-")
    cp, pp = _free_port(), _free_port()
    cu, pu = f"http://127.0.0.1:{cp}", f"http://127.0.0.1:{pp}"
    log = open(os.path.join(d, "etcd.log"), "w")
    p = subprocess.Popen([exe, "--name", "py", "--data-dir", os.path.join(d, "data"),
                          "--listen-client-urls", cu, "--advertise-client-urls", cu,
                          "--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
                          "--initial-cluster", f"py={pu}"], stdout=log, stderr=log)
    try:
        end = time.monotonic() + 30
        while True:
            try:
                req = urllib.request.Request(cu + "/v3/kv/range", data=b'{"key":"AA=="}')
                urllib.request.urlopen(req, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > end or p.poll() is not None:
                    raise AssertionError("etcd did not start: " + open(log.name).read()[-2000:])
                time.sleep(0.05)
        yield f"etcd://127.0.0.1:{cp}"
    finally:
        p.terminate()
        p.wait(10)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


def test_publish_lookup_list_read(etcd):
    prefix = "/py-" + agent_name()
    sname, n = "srv-" + agent_name()[:8], 4 * MiB
    with tpx.Engine(name=sname) as s, tpx.Engine(name=agent_name()) as c, \
            tpx.Registry(etcd, prefix) as pub, tpx.Registry(etcd, prefix) as reg:
        data = pattern(n, 7)
        desc = s.register(data).export()
        pub.publish(s, [desc], ttl=5)
        assert reg.list() == [sname]
        md, descs = reg.lookup(sname)
        assert descs == [desc] and len(md) > 0
        with pytest.raises(tpx.TpxError) as e:
            reg.lookup("nobody")
        assert e.value.name == "TPX_ERR_NOT_FOUND"
        remote, descs = reg.load_remote(c, sname)
        assert remote.name == sname
        buf = np.zeros(n, np.uint8)
        x = remote.read(c.register(buf), [0], descs[0], [0], n)
        assert x.wait(30000) == n
        assert np.array_equal(buf, data)
        pub.unpublish(s)
        assert reg.list() == []


def test_publish_refuses_descriptors_of_another_size(etcd):
    """Every descriptor must be RDESC_SIZE bytes: others are refused and nothing is
    published (the library would read past shorter ones)."""
    prefix = "/py-" + agent_name()
    sname = "srv-" + agent_name()[:8]
    with tpx.Engine(name=sname) as s, tpx.Registry(etcd, prefix) as reg:
        desc = s.register(np.ones(4096, np.uint8)).export()
        for bad in ([b"k" * 5, b"z" * 3], [desc, b"k" * 5], [desc + desc], [desc[:-1]]):
            with pytest.raises(ValueError):
                reg.publish(s, bad, ttl=5)
        assert reg.list() == []
        with pytest.raises(tpx.TpxError) as e:
            reg.lookup(sname)
        assert e.value.name == "TPX_ERR_NOT_FOUND"
        reg.publish(s, [desc, bytearray(desc)], ttl=5)
        assert reg.lookup(sname)[1] == [desc, desc]


PUBLISHER = """
import os, sys, time, numpy as np, tpx
e = tpx.Engine(name=sys.argv[1])
r = tpx.Registry(sys.argv[2], sys.argv[3])
r.publish(e, [e.register(np.ones(4096, np.uint8)).export()], ttl=2)
print("ready", flush=True)
time.sleep(600)
"""


def test_sigkilled_publisher_leaves(etcd):
    prefix = "/py-" + agent_name()
    p = subprocess.Popen([sys.executable, "-c", PUBLISHER, "victim", etcd, prefix],
                         stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == b"ready"
        with tpx.Registry(etcd, prefix) as reg:
            time.sleep(3)  # longer than the TTL: the lease is being renewed
            assert reg.list() == ["victim"]
            assert reg.watch(200) == []
            p.kill()
            p.wait()
            t0 = time.monotonic()
            assert reg.watch(10000) == [("victim", True)]
            assert time.monotonic() - t0 <= 2 + 2
            assert reg.list() == []
    finally:
        p.kill()
        p.wait()


def test_close_waits_for_a_watch_in_another_thread(etcd, monkeypatch):
    """close() while another thread is blocked in watch(): close waits for that call
    (the library would free the registry under it), then refuses new calls."""
    lib = tpx._api()
    real, state = lib.tpx_registry_watch, {}

    def watch_noted(*a):  # the library's watch, noting when it is entered and left
        state["in"] = time.monotonic()
        try:
            return real(*a)
        finally:
            state["out"] = time.monotonic()

    monkeypatch.setattr(lib, "tpx_registry_watch", watch_noted)
    prefix = "/py-" + agent_name()
    reg = tpx.Registry(etcd, prefix)
    assert reg.list() == []
    got = {}

    def watcher():
        try:
            got["events"] = reg.watch(1500)
        except Exception as ex:  # recorded: the test fails on it below
            got["error"] = ex

    t = threading.Thread(target=watcher)
    t.start()
    deadline = time.monotonic() + 10
    while "in" not in state and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "in" in state, "watch() did not start"
    reg.close()
    closed = time.monotonic()
    assert "out" in state and state["out"] <= closed, \
        "close() returned while watch() was still in the library"
    t.join()
    assert got.get("events") == [], got
    for call in (reg.list, lambda: reg.watch(10), lambda: reg.lookup("x")):
        with pytest.raises(tpx.TpxError) as e:
            call()
        assert e.value.name == "TPX_ERR_INVALID_STATE"
    reg.close()  # again: nothing
