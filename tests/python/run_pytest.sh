#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_pytest.sh setup BUILD_DIR SOURCE_DIR
#     A venv in BUILD_DIR/pyenv with the real NIXL wheels from PyPI (`nixl`,
#     the package vLLM imports, and nixl-cu12 behind it: both load without a
#     GPU; --no-deps leaves out torch and nixl-cu13), numpy, pytest and mypy; then the tpx wheel
#     built from this tree by its build backend around the libraries of BUILD_DIR/lib
#     (TPX_PREBUILT_LIBDIR: nothing compiled again) installed into it. The wheel as
#     users get it is wheel.sh's.
# run_pytest.sh test BUILD_DIR SOURCE_DIR [pytest arguments]
#     pytest in tests/python with that venv.
# Exit 77 (ctest: skipped) with a message when PyPI cannot be reached.
set -euo pipefail
mode=$1 bdir=$2 src=$3
shift 3
venv=$bdir/pyenv
NIXL_VERSION=1.5.1 # the NIXL release the tests and bench/ run against
py=$venv/bin/python

pypi_reachable() {
    python3 -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=20)' \
        >/dev/null 2>&1
}

if [ "$mode" = setup ]; then
    if [ ! -x "$py" ]; then
        python3 -m venv "$venv"
    fi
    if ! "$py" -c 'import nixl._api, nixl_cu12, numpy, pytest, scikit_build_core, mypy' 2>/dev/null; then
        pip=("$py" -m pip install -q --disable-pip-version-check)
        # `nixl` is what vLLM imports (nixl._api): it picks nixl_cu12 or
        # nixl_cu13 by the CUDA it finds, else whichever is installed.
        if ! "${pip[@]}" --no-deps "nixl==$NIXL_VERSION" "nixl-cu12==$NIXL_VERSION" ||
            ! "${pip[@]}" numpy pytest "scikit-build-core>=0.10" "mypy==2.4.1"; then
            if ! pypi_reachable; then
                echo "SKIPPED: PyPI is unreachable: cannot install the NIXL wheel, numpy and pytest"
                exit 77
            fi
            echo "run_pytest.sh: pip install failed although PyPI answers" >&2
            exit 1
        fi
    fi
    rm -rf "$bdir/wheel"
    "$py" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
        -C cmake.define.TPX_PREBUILT_LIBDIR="$bdir/lib" -C build-dir="$bdir/wheel-prebuilt" \
        -w "$bdir/wheel" "$src"
    "$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$bdir"/wheel/tpx-*.whl
    echo "venv $venv: $("$py" -c 'import tpx, nixl._api, numpy; print("tpx", tpx.version(), "numpy", numpy.__version__)')"
    exit 0
fi

if ! "$py" -c 'import tpx, nixl._api' 2>/dev/null; then
    echo "SKIPPED: no test venv with tpx and NIXL (python.setup was skipped: PyPI unreachable?)"
    exit 77
fi
cd "$src/tests/python"
exec "$py" -m pytest -q -p no:cacheprovider "$@"
