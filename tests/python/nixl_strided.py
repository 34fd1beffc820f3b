# SPDX-License-Identifier: Apache-2.0
"""nixl_strided.py CASE OP: two NIXL agents with backend TPX in this process move a
descriptor list through the backend and compare every byte with a reference; prints
"verified". CASE:
  per_token      SGLang's heterogeneous TP: the decode rank (TP 2) READs/WRITEs its half
                 of the heads of every token of a 256-token sequence from/to the prefill
                 rank (TP 1), NHD caches of 8 layers, K and V: one descriptor per token per
                 layer per K/V (4096 of 1 KiB), the sequence in consecutive blocks on each
                 side
  per_token_paged  the same at random block ids on both sides
  per_token_off  per_token with the backend parameter strided=0
  mixed          regular runs (1 and 2 dimensions) among plain blocks
  random         40 lists of random patterns of 0 to 3 dimensions
  irregular      a vLLM block list (1000 x 4 KiB, random ids on both sides), then a list
                 whose blocks overlap in the destination (all carrying the same bytes)
The test (test_strided.py) reads the backend's debug lines (TPX_LOG_LEVEL=debug)."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tpx  # noqa: E402
os.environ["NIXL_PLUGIN_DIR"] = tpx.nixl_plugin_dir()
import nixl_util as nu  # noqa: E402

L, KV, BT, H, D, NT = 8, 2, 16, 8, 64, 256  # layers, tensors, block tokens, heads, dim, tokens


def agent(name, strided=True):
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except ImportError:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    a = nixl_agent(name, nixl_agent_config(backends=[]))
    a.create_backend("TPX", {} if strided else {"strided": "0"})
    return a


def xfer(a, op, local, remote, peer):
    h = a.initialize_xfer(op, a.get_xfer_descs(local, "DRAM"),
                          a.get_xfer_descs(remote, "DRAM"), peer, b"")
    st = a.transfer(h)
    if st == "PROC":
        st = nu.wait_xfer(a, h)
    a.release_xfer_handle(h)
    assert st == "DONE", st


def per_token(op, paged, strided):
    """Decode (a, heads 4..8 of 8, NHD) and prefill (b, all 8 heads, NHD) caches of 24
    blocks; the sequence's blocks at ids dblk / pblk."""
    nb, tok = 24, 2 * D  # blocks a cache, bytes of one head of one token
    rng = np.random.default_rng(3)
    if paged:
        dblk, pblk = rng.permutation(nb)[:NT // BT], rng.permutation(nb)[:NT // BT]
    else:
        dblk, pblk = np.arange(NT // BT) + 5, np.arange(NT // BT) + 2
    dec = rng.integers(0, 1 << 16, (L, KV, nb, BT, H // 2, D), dtype=np.uint16)
    pre = rng.integers(0, 1 << 16, (L, KV, nb, BT, H, D), dtype=np.uint16)
    a, b = agent("decode", strided), agent("prefill", strided)
    nu.reg(a, dec)
    nu.reg(b, pre)
    peer = a.add_remote_agent(b.get_agent_metadata())
    t = np.arange(NT)
    li, ki, ti = np.meshgrid(np.arange(L), np.arange(KV), t, indexing="ij")  # layer-major
    loff = (((li * KV + ki) * nb + dblk[ti // BT]) * BT + ti % BT) * (H // 2) * tok
    roff = ((((li * KV + ki) * nb + pblk[ti // BT]) * BT + ti % BT) * H + H // 2) * tok
    local = np.zeros((loff.size, 3), np.uint64)
    local[:, 0] = dec.ctypes.data + loff.ravel()
    local[:, 1] = (H // 2) * tok
    remote = np.zeros_like(local)
    remote[:, 0] = pre.ctypes.data + roff.ravel()
    remote[:, 1] = (H // 2) * tok
    want_dec, want_pre = dec.copy(), pre.copy()
    tb, tt = t // BT, t % BT
    if op == "READ":
        want_dec[:, :, dblk[tb], tt] = pre[:, :, pblk[tb], tt, H // 2:]
    else:
        want_pre[:, :, pblk[tb], tt, H // 2:] = dec[:, :, dblk[tb], tt]
    xfer(a, op, local, remote, peer)
    assert np.array_equal(dec, want_dec) and np.array_equal(pre, want_pre)


def irregular(op):
    n, bs = 1000, 4096
    rng = np.random.default_rng(9)
    la, lb = rng.integers(0, 256, n * bs, dtype=np.uint8), rng.integers(0, 256, n * bs,
                                                                        dtype=np.uint8)
    a, b = agent("vllm-decode"), agent("vllm-prefill")
    nu.reg(a, la)
    nu.reg(b, lb)
    peer = a.add_remote_agent(b.get_agent_metadata())
    lid, rid = rng.permutation(n), rng.permutation(n)
    want_la, want_lb = la.copy(), lb.copy()
    lv, rv = want_la.reshape(n, bs), want_lb.reshape(n, bs)
    if op == "READ":
        lv[lid] = lb.reshape(n, bs)[rid]
    else:
        rv[rid] = la.reshape(n, bs)[lid]
    xfer(a, op, nu.blocks(la, n, bs)[lid], nu.blocks(lb, n, bs)[rid], peer)
    assert np.array_equal(la, want_la) and np.array_equal(lb, want_lb)
    # 64 blocks of 256 bytes, 128 apart in the destination, all from one source block of
    # equal bytes: evenly spaced, but overlapping where they land
    src, dst = (lb, la) if op == "READ" else (la, lb)
    src[:256] = 0x5A
    step = np.zeros((64, 3), np.uint64)
    step[:, 0] = dst.ctypes.data + 8192 + np.arange(64, dtype=np.uint64) * 128
    step[:, 1] = 256
    same = np.zeros((64, 3), np.uint64)
    same[:, 0] = src.ctypes.data
    same[:, 1] = 256
    want = dst.copy()
    want[8192:8192 + 63 * 128 + 256] = 0x5A
    if op == "READ":
        xfer(a, op, step, same, peer)
    else:
        xfer(a, op, same, step, peer)
    assert np.array_equal(dst, want)


def mixed(op):
    """Regular runs among plain blocks: a run of 100, a 10 x 8 grid, 3 evenly spaced blocks
    (too few for a run) and 5 scattered ones, each part in its own area of the buffers."""
    n = 1 << 20
    rng = np.random.default_rng(11)
    la, lb = rng.integers(0, 256, n, dtype=np.uint8), rng.integers(0, 256, n, dtype=np.uint8)
    a, b = agent("mixed-a"), agent("mixed-b")
    nu.reg(a, la)
    nu.reg(b, lb)
    peer = a.add_remote_agent(b.get_agent_metadata())
    blocks = [(1000 + i * 300, 50000 + i * 700, 200) for i in range(100)]
    blocks += [(700000 + i * 9000, 700000 + (4 - i) * 11000, 64 + i) for i in range(5)]
    blocks += [(200000 + r * 4096 + c * 256, 400000 + r * 8192 + c * 512, 128)
               for r in range(10) for c in range(8)]
    blocks += [(900000 + i * 1000, 900000 + i * 3000, 100) for i in range(3)]
    want_la, want_lb = la.copy(), lb.copy()
    for lo, ro, ln in blocks:
        if op == "READ":
            want_la[lo:lo + ln] = lb[ro:ro + ln]
        else:
            want_lb[ro:ro + ln] = la[lo:lo + ln]
    d = np.array(blocks, dtype=np.uint64)
    local, remote = np.zeros((len(d), 3), np.uint64), np.zeros((len(d), 3), np.uint64)
    local[:, 0], local[:, 1] = la.ctypes.data + d[:, 0], d[:, 2]
    remote[:, 0], remote[:, 1] = lb.ctypes.data + d[:, 1], d[:, 2]
    xfer(a, op, local, remote, peer)
    assert np.array_equal(la, want_la) and np.array_equal(lb, want_lb)


def random_lists(op, nlists=40):
    """Lists made of random patterns -- blocks, and runs of 1 to 3 dimensions with random
    counts, element lengths and strides (the source's may repeat bytes, the destination's
    in any order of dimensions, never sharing a byte) -- each expanded into its blocks in
    row-major order and moved through NIXL; every byte checked."""
    n = 4 << 20
    rng = np.random.default_rng(13)
    la, lb = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    a, b = agent("random-a"), agent("random-b")
    nu.reg(a, la)
    nu.reg(b, lb)
    peer = a.add_remote_agent(b.get_agent_metadata())
    for _ in range(nlists):
        la[:] = rng.integers(0, 256, n, dtype=np.uint8)
        lb[:] = rng.integers(0, 256, n, dtype=np.uint8)
        blocks, bump = [], 0  # destination offsets grow: parts never share a byte
        for _ in range(int(rng.integers(1, 8))):
            nd, elem = int(rng.integers(0, 4)), int(rng.integers(1, 200))
            counts = [int(rng.integers(1, 7)) for _ in range(nd)]
            order = rng.permutation(nd)  # which dimension is innermost on the destination
            dst, ext = [0] * nd, elem
            for k in order[::-1]:
                dst[k] = ext + int(rng.integers(0, 40))
                ext = dst[k] * (counts[k] - 1) + ext
            src = [int(rng.choice([0, elem, int(rng.integers(0, 3 * elem + 64))]))
                   for _ in range(nd)]
            sspan = elem + sum((c - 1) * s for c, s in zip(counts, src))
            s0, d0 = int(rng.integers(0, n // 2 - sspan)), bump
            bump += ext + int(rng.integers(0, 64))
            offs = [(s0, d0)]
            for c, ss, ds in zip(counts, src, dst):
                offs = [(x + i * ss, y + i * ds) for x, y in offs for i in range(c)]
            blocks += [(so, do, elem) for so, do in offs]
        assert bump < n
        want_la, want_lb = la.copy(), lb.copy()
        for so, do, ln in blocks:
            if op == "READ":
                want_la[do:do + ln] = lb[so:so + ln]
            else:
                want_lb[do:do + ln] = la[so:so + ln]
        d = np.array(blocks, dtype=np.uint64)
        lo, ro = (d[:, 1], d[:, 0]) if op == "READ" else (d[:, 0], d[:, 1])
        local, remote = np.zeros((len(d), 3), np.uint64), np.zeros((len(d), 3), np.uint64)
        local[:, 0], local[:, 1] = la.ctypes.data + lo, d[:, 2]
        remote[:, 0], remote[:, 1] = lb.ctypes.data + ro, d[:, 2]
        xfer(a, op, local, remote, peer)
        assert np.array_equal(la, want_la) and np.array_equal(lb, want_lb)


def main():
    case, op = sys.argv[1], sys.argv[2]
    if case == "random":
        random_lists(op)
        print("verified")
        return
    if case == "irregular":
        irregular(op)
    elif case == "mixed":
        mixed(op)
    else:
        per_token(op, paged=case == "per_token_paged", strided=case != "per_token_off")
    print("verified")


if __name__ == "__main__":
    main()
