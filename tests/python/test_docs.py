"""docs/python.md's example runs as written: its READ is verified and its notifications arrive."""
import os
import re
import subprocess
import sys

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python.md")


def test_python_md_example():
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"<!-- example -->\n```python\n(.*?)```", text, re.S)
    assert m, "docs/python.md has no block marked <!-- example -->"
    r = subprocess.run([sys.executable, "-c", m.group(1)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "READ verified: 64 blocks" in r.stdout, r.stdout
    assert "b'req-2'" in r.stdout, r.stdout
