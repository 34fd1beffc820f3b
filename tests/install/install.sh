#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# install.consumer: `cmake --install` into a fresh prefix, then build and run a
# tiny C program against it twice: with `pkg-config --cflags --libs tpx`
# and with find_package(tpx) (shared and static libtpx). Nothing is taken
# from the build or source tree but the consumer's sources.
set -eu
BUILD=$1
SRC=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$BUILD" --prefix "$WORK/inst" > "$WORK/install.log" || { cat "$WORK/install.log"; fail "cmake --install"; }
for f in include/tpx/tpx.h include/tpx/status.h include/tpx/log.h bin/tpx-perf bin/tpx-netbench \
         bin/tpx-doctor; do
    [ -e "$WORK/inst/$f" ] || fail "$f not installed"
done
PC=$(find "$WORK/inst" -name tpx.pc | head -1)
[ -n "$PC" ] || fail "tpx.pc not installed"
LIBDIR=$(dirname "$(dirname "$PC")")
ls "$LIBDIR"/libtpx.so.0 "$LIBDIR"/libtpx.a "$LIBDIR"/libnccl-net-tpx.so > /dev/null || fail "libraries"
"$WORK/inst/bin/tpx-perf" --help > /dev/null 2>&1 || fail "installed tpx-perf does not run"

# 1. pkg-config (the .pc file is relocatable: the prefix is found from its place)
if command -v pkg-config > /dev/null; then
    export PKG_CONFIG_PATH="$(dirname "$PC")"
    # shellcheck disable=SC2046
    cc -Wall -Werror "$SRC/consumer.c" -o "$WORK/pc_consumer" $(pkg-config --cflags --libs tpx) \
        -Wl,-rpath,"$LIBDIR" || fail "build with pkg-config"
    "$WORK/pc_consumer" || fail "pkg-config consumer"
    echo "pkg-config: $(pkg-config --cflags --libs tpx)"
else
    fail "pkg-config is not installed (./dev installs it)"
fi

# 2. find_package(tpx)
cmake -S "$SRC/cmake_consumer" -B "$WORK/cm" -DCMAKE_PREFIX_PATH="$WORK/inst" \
    -DCMAKE_BUILD_TYPE=Release > "$WORK/cm.log" 2>&1 || { cat "$WORK/cm.log"; fail "find_package(tpx)"; }
cmake --build "$WORK/cm" > "$WORK/cmb.log" 2>&1 || { cat "$WORK/cmb.log"; fail "build with find_package"; }
"$WORK/cm/consumer_shared" || fail "find_package consumer (shared)"
"$WORK/cm/consumer_static" || fail "find_package consumer (static)"
echo PASS
