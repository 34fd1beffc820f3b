# SPDX-License-Identifier: Apache-2.0
# bench/gpu/perf_env.sh - sourced by the engine benchmark scripts here: go to
# the repository root, keep traffic on loopback, build tpx-perf (release) and
# set P to it; exits with "build failed" if the build does.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export TPX_SOCKET_IFNAME=lo
cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" --target tpx-perf >/dev/null ||
  { echo "build failed"; exit 1; }
P=build/release/bin/tpx-perf
