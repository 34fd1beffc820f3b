#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# unit.spdx: every source file of the tree says its licence in its first
# lines, `SPDX-License-Identifier: Apache-2.0` (LICENSE at the root holds the
# text), so a file copied out of tpx still carries it.
#
#   spdx.sh SOURCE_DIR          list the files without it; exit 1 if any
#   spdx.sh SOURCE_DIR --fix    add it to them (after a shebang line)
#
# Source files: C, CUDA and C++ sources and headers, Python, shell, CMake,
# and executable scripts with a shebang. The file list is git's where the
# tree is a checkout, else every file under the source folders.
set -euo pipefail
root=$(cd "$1" && pwd)
fix=${2:-}
cd "$root"
TAG="SPDX-License-Identifier: Apache-2.0"

list() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files
    else
        find . -path ./build -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||'
    fi
}

is_source() {
    case "$1" in
    build/* | docs/* | LICENSE | *.md | *.json | *.txt.in) return 1 ;;
    *.c | *.h | *.cu | *.cuh | *.cpp | *.hpp | *.py | *.sh | *.cmake | */CMakeLists.txt | CMakeLists.txt)
        return 0 ;;
    esac
    [ -f "$1" ] && [ -x "$1" ] && head -c 2 "$1" | grep -q '^#!'
}

missing=()
while IFS= read -r f; do
    [ -f "$f" ] || continue
    is_source "$f" || continue
    head -n 3 "$f" | grep -q "$TAG" || missing+=("$f")
done < <(list)

if [ "$fix" = --fix ]; then
    for f in "${missing[@]}"; do
        case "$f" in
        *.c | *.h | *.cu | *.cuh | *.cpp | *.hpp) line="/* $TAG */" ;;
        *) line="# $TAG" ;;
        esac
        if head -n 1 "$f" | grep -q '^#!'; then
            { head -n 1 "$f"; echo "$line"; tail -n +2 "$f"; } >"$f.spdx"
        else
            { echo "$line"; cat "$f"; } >"$f.spdx"
        fi
        chmod --reference="$f" "$f.spdx"
        mv "$f.spdx" "$f"
    done
    echo "spdx: added the identifier to ${#missing[@]} file(s)"
    exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
    printf 'no "%s" in the first 3 lines of:\n' "$TAG"
    printf '  %s\n' "${missing[@]}"
    echo "(tests/unit/spdx.sh SOURCE_DIR --fix adds it)"
    exit 1
fi
echo "spdx: every source file names its licence"
