# SPDX-License-Identifier: Apache-2.0
"""The command-line tools in the wheel: `tpx-perf`, `tpx-doctor` and `tpx-netbench` are
console scripts that run the programs bundled in tpx/_bin (built with the libraries of
tpx/_lib, which they find there), as a source build installs them in <prefix>/bin."""
from __future__ import annotations

import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin")


def _run(name: str) -> None:
    path = os.path.join(_BIN, name)
    if not os.access(path, os.X_OK):
        sys.exit(f"{name}: this tpx package was built without its tools ({path} is missing): "
                 "build it from source with TPX_BUILD_TOOLS on (the default)")
    os.execv(path, [name] + sys.argv[1:])


def perf() -> None:
    _run("tpx-perf")


def doctor() -> None:
    _run("tpx-doctor")


def netbench() -> None:
    _run("tpx-netbench")
