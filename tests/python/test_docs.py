# SPDX-License-Identifier: Apache-2.0
"""The Python examples of the docs run as written: docs/python.md's, and the README's quick
start."""
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def run_block(path, pattern):
    with open(path) as f:
        text = f.read()
    m = re.search(pattern, text, re.S)
    assert m, "%s: no Python example block (%s)" % (path, pattern)
    r = subprocess.run([sys.executable, "-c", m.group(1)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_python_md_example():
    out = run_block(os.path.join(ROOT, "docs", "python.md"),
                    r"<!-- example -->\n```python\n(.*?)```")
    assert "READ verified: 64 blocks" in out, out
    assert "b'req-2'" in out, out


def test_readme_quick_start():
    out = run_block(os.path.join(ROOT, "README.md"), r"## Quick start: Python\n\n```python\n(.*?)```")
    assert "READ verified" in out, out
