#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/repack_nixl.sh OUT_DIR [VERSION [PYTHON]]
#
# The NIXL wheels a GPU host needs, small enough to travel (a run there may carry
# 64 MiB and reach no index): `nixl` (what vLLM imports) and `nixl-cu12` (or with
# CUDA_MAJOR=13 `nixl-cu13`, for a host whose torch is built for CUDA 13) without
# its nixl_ep_cuXX/ folder (the torch expert-parallel extensions, 38 of its 68 MB,
# which neither NIXL's agent nor its plugins load). Install them there with
#   pip install --no-index --no-deps --target DIR OUT_DIR/*.whl
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd) ver=${2:-1.5.1} pyver=${3:-}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# PYTHON (e.g. 3.12): the GPU host's Python, when it is not this one's.
plat=()
[ -n "$pyver" ] && plat=(--python-version "$pyver" --only-binary=:all: --platform manylinux_2_28_x86_64)
cu=${CUDA_MAJOR:-12} # the CUDA of the host's torch: `nixl` picks nixl-cu12 or nixl-cu13 by it
python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" "nixl==$ver" "nixl-cu$cu==$ver"
cp "$tmp"/nixl-"$ver"-*.whl "$out"/
whl=$(ls "$tmp"/nixl_cu"$cu"-"$ver"-*.whl)
mkdir "$tmp/x"
(cd "$tmp/x" && python3 -m zipfile -e "$whl" . && rm -rf nixl_ep_cu"$cu" &&
    sed -i "/^nixl_ep_cu$cu\//d" nixl_cu"$cu"-"$ver".dist-info/RECORD &&
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
