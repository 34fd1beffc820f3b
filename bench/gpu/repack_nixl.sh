#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/repack_nixl.sh OUT_DIR [VERSION]
#
# The NIXL wheels a GPU host needs, small enough to travel (a run there may carry
# 64 MiB and reach no index): `nixl` (what vLLM imports) and `nixl-cu12` without
# its nixl_ep_cu12/ folder (the torch expert-parallel extensions, 38 of its 68 MB,
# which neither NIXL's agent nor its plugins load). Install them there with
#   pip install --no-index --no-deps --target DIR OUT_DIR/*.whl
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd) ver=${2:-1.5.1}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps -d "$tmp" "nixl==$ver" "nixl-cu12==$ver"
cp "$tmp"/nixl-"$ver"-*.whl "$out"/
whl=$(ls "$tmp"/nixl_cu12-"$ver"-*.whl)
mkdir "$tmp/x"
(cd "$tmp/x" && python3 -m zipfile -e "$whl" . && rm -rf nixl_ep_cu12 &&
    sed -i '/^nixl_ep_cu12\//d' nixl_cu12-"$ver".dist-info/RECORD &&
    python3 - "$out/$(basename "$whl")" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    for root, _, files in os.walk("."):
        for f in files:
            p = os.path.join(root, f)[2:]
            z.write(p, p)
PY
)
ls -la "$out"
