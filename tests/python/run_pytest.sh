#!/usr/bin/env bash
# run_pytest.sh setup BUILD_DIR SOURCE_DIR
#     A venv in BUILD_DIR/pyenv with the real NIXL wheel from PyPI (nixl-cu12:
#     loads without a GPU; --no-deps leaves out torch, which it names but does
#     not import), numpy and pytest; then the tpx wheel built from this tree
#     (the libraries of BUILD_DIR/lib) installed into it.
# run_pytest.sh test BUILD_DIR SOURCE_DIR [pytest arguments]
#     pytest in tests/python with that venv.
# Exit 77 (ctest: skipped) with a message when PyPI cannot be reached.
set -euo pipefail
mode=$1 bdir=$2 src=$3
shift 3
venv=$bdir/pyenv
py=$venv/bin/python

pypi_reachable() {
    python3 -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=20)' \
        >/dev/null 2>&1
}

if [ "$mode" = setup ]; then
    if [ ! -x "$py" ]; then
        python3 -m venv "$venv"
    fi
    if ! "$py" -c 'import nixl_cu12, numpy, pytest, setuptools, wheel' 2>/dev/null; then
        pip=("$py" -m pip install -q --disable-pip-version-check)
        if ! "${pip[@]}" --no-deps 'nixl-cu12>=1.5,<2' || ! "${pip[@]}" numpy pytest setuptools wheel; then
            if ! pypi_reachable; then
                echo "SKIPPED: PyPI is unreachable: cannot install the NIXL wheel, numpy and pytest"
                exit 77
            fi
            echo "run_pytest.sh: pip install failed although PyPI answers" >&2
            exit 1
        fi
    fi
    rm -rf "$bdir/wheel"
    TPX_PREBUILT_LIBDIR=$bdir/lib "$py" -m pip wheel -q --disable-pip-version-check --no-deps \
        --no-build-isolation -w "$bdir/wheel" "$src"
    "$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$bdir"/wheel/tpx-*.whl
    echo "venv $venv: $("$py" -c 'import tpx, nixl_cu12, numpy; print("tpx", tpx.version(), "numpy", numpy.__version__)')"
    exit 0
fi

if ! "$py" -c 'import tpx, nixl_cu12' 2>/dev/null; then
    echo "SKIPPED: no test venv with tpx and NIXL (python.setup was skipped: PyPI unreachable?)"
    exit 77
fi
cd "$src/tests/python"
exec "$py" -m pytest -q -p no:cacheprovider "$@"
