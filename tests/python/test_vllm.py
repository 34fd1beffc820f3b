# SPDX-License-Identifier: Apache-2.0
"""vLLM's NixlConnector sequence (vllm_seq.py) on host memory: per-layer K and V regions,
block-id lists, notifications, telemetry, a restarted prefill; same TP and decode TP = 2 x
prefill TP (each decode rank reads half the heads of HND blocks). Every byte checked."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("tp_ratio", [1, 2])
def test_vllm_sequence(tp_ratio):
    r = subprocess.run([sys.executable, os.path.join(HERE, "vllm_seq.py"), "--mem", "dram",
                        "--layers", "32", "--blocks", "32", "--block-kib", "16",
                        "--tp-ratio", str(tp_ratio), "--requests", "10"],
                       capture_output=True, text=True, timeout=300)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr[-4000:])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "vllm sequence: passed" in r.stdout


def test_nixl_check_command():
    """The one command a user runs before starting vLLM (README): verified bytes, exit 0."""
    r = subprocess.run([sys.executable, "-m", "tpx.nixl_check", "--blocks", "64"],
                       capture_output=True, text=True, timeout=120)
    sys.stdout.write(r.stdout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "READ  64 x 128 KiB of DRAM: verified" in r.stdout
    assert "WRITE 64 x 128 KiB of DRAM: verified" in r.stdout
    assert r.stdout.rstrip().endswith("nixl_check: OK")
