# SPDX-License-Identifier: Apache-2.0
"""Strided entries from Python (tpx.Strided, tpx.kv_entries) and through NIXL (whose lists
have no strides: the TPX backend finds the regular runs), every byte checked against a
reference computed here."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tpx
from conftest import HERE, agent_name, pattern


@pytest.fixture
def engines():
    with tpx.Engine(name=agent_name()) as a, tpx.Engine(name=agent_name()) as b:
        yield a, b


def elements(e):
    """(local offset, remote offset) of every element of a Strided, in the order they move."""
    lo, ro = [e.local_offset], [e.remote_offset]
    for count, ls, rs in e.dims:
        lo = [x + i * ls for x in lo for i in range(count)]
        ro = [x + i * rs for x in ro for i in range(count)]
    return list(zip(lo, ro))


def reference(op, entries, local, remote):
    """The local and remote bytes after `entries` moved (one Region and one export)."""
    want_l, want_r = local.copy(), remote.copy()
    for e in entries:
        if not isinstance(e, tpx.Strided):
            e = tpx.Strided(*e)
        for lo, ro in elements(e):
            if op == tpx.READ:
                want_l[lo:lo + e.elem_len] = remote[ro:ro + e.elem_len]
            else:
                want_r[ro:ro + e.elem_len] = local[lo:lo + e.elem_len]
    return want_l, want_r


@pytest.mark.parametrize("op", [tpx.READ, tpx.WRITE])
def test_strided_mixed_with_blocks(engines, op):
    a, b = engines
    la, lb = pattern(1 << 20, 1), pattern(1 << 20, 2)
    ra, rb = a.register(la), b.register(lb)
    desc = rb.export()
    remote = a.load_remote(b.metadata())
    entries = [
        (ra, 0, desc, 4096, 100),                                  # a plain block
        tpx.Strided(ra, 8192, desc, 65536, 48, [(64, 48, 256)]),    # gather on one side
        tpx.Strided(ra, 200000, desc, 300000, 16,                  # 3 dims, odd strides
                    [(5, 4000, 100), (7, 300, 5000), (3, 64, 20)]),
        (ra, 500000, desc, 600000, 7),
        tpx.Strided(ra, 700000, desc, 800000, 1024, []),           # no dims: one block
        tpx.Strided(ra, 900000, desc, 900000, 256, [(40, 256, 256)]),  # contiguous: merged
    ]
    want_la, want_lb = reference(op, entries, la, lb)
    prep = remote.prepare(op, entries)
    total = sum(e.nbytes() if isinstance(e, tpx.Strided) else e[4] for e in entries)
    assert prep.post().wait(30000) == total
    assert np.array_equal(la, want_la) and np.array_equal(lb, want_lb)
    # posted again after the destination changed: the same bytes move again
    if op == tpx.READ:
        la[:] = 0
    else:
        lb[:] = 0
    want_la, want_lb = reference(op, entries, la, lb)
    assert prep.post().wait(30000) == total
    assert np.array_equal(la, want_la) and np.array_equal(lb, want_lb)
    prep.release()


def test_strided_refused(engines):
    a, b = engines
    la, lb = np.zeros(1 << 16, np.uint8), pattern(1 << 16, 3)
    ra, rb = a.register(la), b.register(lb)
    desc = rb.export()
    remote = a.load_remote(b.metadata())
    with pytest.raises(ValueError, match="dimensions"):
        remote.prepare(tpx.READ, [tpx.Strided(ra, 0, desc, 0, 8, [(2, 8, 8)] * 4)])
    with pytest.raises(ValueError, match="registered"):  # local elements past the region
        remote.prepare(tpx.READ, [tpx.Strided(ra, 0, desc, 0, 64, [(1025, 64, 0)])])
    with pytest.raises(ValueError, match="no bytes"):
        remote.prepare(tpx.READ, [tpx.Strided(ra, 0, desc, 0, 64, [(0, 64, 64)])])
    # the destination of a READ is local: elements that share bytes are refused by the
    # library (the source side may repeat itself)
    with pytest.raises(tpx.TpxError) as ei:
        remote.prepare(tpx.READ, [tpx.Strided(ra, 0, desc, 0, 64, [(4, 32, 64)])])
    assert ei.value.name == "TPX_ERR_INVALID_ARG"
    with pytest.raises(tpx.TpxError) as ei:  # remote elements past the export
        remote.prepare(tpx.READ, [tpx.Strided(ra, 0, desc, 0, 64, [(4, 64, 1 << 15)])])
    assert ei.value.name == "TPX_ERR_INVALID_ARG"
    x = remote.prepare(tpx.READ, [tpx.Strided(ra, 0, desc, 0, 64, [(4, 64, 0)])]).post()
    assert x.wait(30000) == 256  # a repeated source: the first 64 bytes four times
    assert np.array_equal(la[:256], np.tile(lb[:64], 4)) and not la[256:].any()


def kv_array(c, buf):
    """The cache as [layer, kv, block, token, head, dim] of uint16, whatever its layout."""
    if c.layout == "NHD":
        v = buf.view(np.uint16).reshape(c.layers, c.kv, c.blocks, c.block_size, c.heads,
                                        c.head_dim)
        return v
    v = buf.view(np.uint16).reshape(c.layers, c.kv, c.blocks, c.heads, c.block_size,
                                    c.head_dim)
    return v.transpose(0, 1, 2, 4, 3, 5)


def tokens(c, arr, blocks, ntokens, h0, h1):
    """[layer, kv, token, head, dim] of tokens [0, ntokens), heads [h0, h1) of the model."""
    t = np.arange(ntokens)
    v = arr[:, :, np.asarray(blocks)[t // c.block_size], t % c.block_size]
    return v[:, :, :, h0 - c.head0:h1 - c.head0]


@pytest.mark.parametrize("op", [tpx.READ, tpx.WRITE])
@pytest.mark.parametrize("case", ["tp2_nhd", "hnd_32", "nhd_to_hnd"])
def test_kv_entries(engines, op, case):
    """A decode rank's view of a prefill cache: decode TP 2 x prefill TP 1 (NHD), 16-token
    prefill blocks into 32-token HND decode blocks, NHD into HND."""
    a, b = engines
    H, D, L, n = 8, 64, 3, 100
    pre = tpx.KVCache(layers=L, blocks=12, block_size=16, heads=H, head_dim=D)
    dec = {"tp2_nhd": tpx.KVCache(L, 10, 16, H // 2, D, head0=H // 2),
           "hnd_32": tpx.KVCache(L, 6, 32, H // 2, D, layout="HND"),
           "nhd_to_hnd": tpx.KVCache(L, 8, 16, H, D, layout="HND")}[case]
    rng = np.random.default_rng(4)
    pblocks = rng.permutation(pre.blocks)[:-(-n // 16)]
    dblocks = rng.permutation(dec.blocks)[:-(-n // dec.block_size)]
    off = 4096  # each cache at an offset of its memory
    la, lb = pattern(dec.nbytes() + off, 5), pattern(pre.nbytes() + off, 6)
    ra, rb = a.register(la), b.register(lb)
    desc = rb.export()
    remote = a.load_remote(b.metadata())
    ents = tpx.kv_entries(dec, ra, off, pre, desc, off, dblocks, pblocks, n)
    assert len(ents) == len(set((i // 16, i // dec.block_size) for i in range(n)))
    want_la, want_lb = la.copy(), lb.copy()
    h0, h1 = max(pre.head0, dec.head0), min(pre.head0 + pre.heads, dec.head0 + dec.heads)
    src_c, src_b, src_blocks = (pre, lb, pblocks) if op == tpx.READ else (dec, la, dblocks)
    dst_c, dst_b, dst_blocks = (dec, want_la, dblocks) if op == tpx.READ else (pre, want_lb,
                                                                              pblocks)
    src = tokens(src_c, kv_array(src_c, src_b[off:]), src_blocks, n, h0, h1)
    dst = kv_array(dst_c, dst_b[off:])
    t = np.arange(n)
    db, dt = np.asarray(dst_blocks)[t // dst_c.block_size], t % dst_c.block_size
    for hh in range(h0, h1):
        dst[:, :, db, dt, hh - dst_c.head0] = src[:, :, :, hh - h0]
    x = remote.prepare(op, ents).post()
    assert x.wait(30000) == L * 2 * n * (h1 - h0) * D * 2
    assert np.array_equal(la, want_la) and np.array_equal(lb, want_lb)


def test_kv_entries_refused():
    c = tpx.KVCache(2, 4, 16, 8, 128)
    with pytest.raises(tpx.TpxError):  # head_dim differs
        tpx.kv_entries(c, None, 0, tpx.KVCache(2, 4, 16, 8, 64), b"\0" * 48, 0, [0], [0], 16)
    with pytest.raises(tpx.TpxError):  # no head in common
        tpx.kv_entries(c, None, 0, tpx.KVCache(2, 4, 16, 8, 128, head0=8), b"\0" * 48, 0,
                       [0], [0], 16)
    with pytest.raises(tpx.TpxError):  # a block id past the cache
        tpx.kv_entries(c, None, 0, c, b"\0" * 48, 0, [4], [0], 16)
    with pytest.raises(ValueError, match="block ids"):
        tpx.kv_entries(c, None, 0, c, b"\0" * 48, 0, [0], [0], 17)


# ---- NIXL: per-token descriptor lists -------------------------------------------------


def run_nixl_case(case, op, log):
    """nixl_strided.py in its own process (the backend's logger reads TPX_LOG_LEVEL once,
    when its engine starts): its output, the debug lines of the backend in `log`."""
    env = dict(os.environ, TPX_LOG_LEVEL="debug", TPX_LOG_FILE=str(log))
    p = subprocess.run([sys.executable, os.path.join(HERE, "nixl_strided.py"), case, op],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in open(log).read().splitlines() if "prepXfer" in ln]
    return p.stdout, lines


@pytest.mark.parametrize("op", ["READ", "WRITE"])
def test_nixl_per_token_lists(tmp_path, op):
    """SGLang's heterogeneous TP: one descriptor per token per layer per K/V (the decode
    rank's half of the heads), 4096 of them: the same bytes as plain blocks, sent as one
    strided entry (tokens x layers and tensors) when the sequence's blocks follow each
    other on both sides."""
    out, lines = run_nixl_case("per_token", op, tmp_path / "log")
    assert "verified" in out
    assert len(lines) == 1, lines
    assert f"prepXfer {op} of 4096 descriptors: as 1 entries, 1 strided" in lines[0], lines


@pytest.mark.parametrize("op", ["READ", "WRITE"])
def test_nixl_per_token_lists_paged(tmp_path, op):
    """The same at random block ids: at most one entry per block per layer per K/V (each
    the block's 16 tokens), every one strided."""
    out, lines = run_nixl_case("per_token_paged", op, tmp_path / "log")
    assert "verified" in out
    assert len(lines) == 1, lines
    m = re.search(r"of 4096 descriptors: as (\d+) entries, (\d+) strided", lines[0])
    assert m and int(m.group(1)) == int(m.group(2)) <= 256, lines


@pytest.mark.parametrize("op", ["READ", "WRITE"])
def test_nixl_mixed_lists(tmp_path, op):
    """Runs among plain blocks: 188 descriptors go as the run of 100, the 10 x 8 grid and
    the 8 others as plain blocks (3 evenly spaced ones are too few for a run)."""
    out, lines = run_nixl_case("mixed", op, tmp_path / "log")
    assert "verified" in out
    assert len(lines) == 1 and "of 188 descriptors: as 10 entries, 2 strided" in lines[0], lines


@pytest.mark.parametrize("op", ["READ", "WRITE"])
def test_nixl_random_lists(tmp_path, op):
    """40 lists of random patterns (blocks, runs of 1 to 3 dimensions, repeated sources,
    destinations in any order of dimensions): every byte where the plain blocks put it."""
    out, lines = run_nixl_case("random", op, tmp_path / "log")
    assert "verified" in out
    assert len(lines) == 40, lines
    assert sum(" strided" in ln for ln in lines) >= 30, lines


@pytest.mark.parametrize("op", ["READ", "WRITE"])
def test_nixl_irregular_lists_stay_plain(tmp_path, op):
    """Random blocks (vLLM's block lists) and a list whose runs would overlap in the
    destination go as plain blocks, as before."""
    out, lines = run_nixl_case("irregular", op, tmp_path / "log")
    assert "verified" in out
    assert len(lines) == 2, lines
    assert all("no regular run" in ln for ln in lines), lines


def test_nixl_strided_off(tmp_path):
    """Backend parameter strided=0: the regular list goes as plain blocks (peers of tpx
    without strided entries)."""
    out, lines = run_nixl_case("per_token_off", "READ", tmp_path / "log")
    assert "verified" in out
    assert len(lines) == 1 and "4096 plain blocks (strided entries off)" in lines[0], lines
