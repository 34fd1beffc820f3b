# SPDX-License-Identifier: Apache-2.0
# bench/gpu/lib.sh - sourced by the GPU-host scripts that run Python peers
# (nixl_vram.sh, strided_vram.sh, peers_gpu.sh, lat_small.sh, pack_async.sh): the
# output folder, the host line, the build, and a Python path holding the carried
# NIXL wheels and this tree's tpx package.
# A GPU host reaches no index: every wheel travels in WHEEL_DIR
# (bench/gpu/repack_nixl.sh). The path is not under OUT: only results come back.

# gpu_host_line: what ran the numbers
gpu_host_line() {
    echo "== host: $(uname -n), $(nproc) cores; $(python3 --version 2>&1)"
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null || true
}

# gpu_build [TARGET ...]: the release build of the library, its plugins and tpx-perf
gpu_build() {
    echo "== build"
    cmake --preset release >/dev/null
    cmake --build --preset release -j "$(nproc)" \
        --target tpx plugin_TPX tpx-perf tpx-netbench nccl-net-tpx "$@" >/dev/null
}

# gpu_pyenv WHEEL_DIR: exports PYTHONPATH (the wheels, then tpx with this build's
# libraries) and the loopback settings every script here uses
gpu_pyenv() {
    local py
    py=$(mktemp -d /tmp/tpx-gpu-py.XXXXXX)
    python3 -m pip install -q --no-index --no-deps --target "$py" "$1"/*.whl
    cp -r python/tpx "$py/"
    mkdir -p "$py/tpx/_lib/nixl"
    cp -a build/release/lib/libtpx.so* build/release/lib/libnccl-net-tpx.so "$py/tpx/_lib/"
    cp build/release/lib/nixl/libplugin_TPX.so "$py/tpx/_lib/nixl/"
    export PYTHONPATH=$py TPX_SOCKET_IFNAME=lo TPX_BIND_ADDR=127.0.0.1 TPX_LOG_LEVEL=error
    export NIXL_LOG_LEVEL=WARN
}

# gpu_setup WHEEL_DIR [TARGET ...]: what every script here does first, from the tree's
# root (WHEEL_DIR is relative to it): sets OUT, unless given, to a new
# /tmp/<script name, - for _>.XXXXXX and makes it, then gpu_host_line,
# gpu_build TARGET ... and gpu_pyenv WHEEL_DIR
gpu_setup() {
    local wheels name
    wheels=$(cd "$1" && pwd)
    shift
    name=$(basename "$0" .sh)
    OUT=${OUT:-$(mktemp -d "/tmp/${name//_/-}.XXXXXX")}
    mkdir -p "$OUT"
    gpu_host_line
    gpu_build "$@"
    gpu_pyenv "$wheels"
}
