#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# unit.readme_c: the README's C quick start compiles as written (warnings are
# errors) against this build's libtpx and moves verified bytes over loopback.
# The README is docs/README.new.md while it waits to replace README.md.
#
# Usage: readme_c.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=${1:?usage: readme_c.sh SOURCE_DIR BUILD_DIR} bin=${2:?}
readme=$src/README.md
[ -e "$src/docs/README.new.md" ] && readme=$src/docs/README.new.md
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# the first ```c block after the "Quick start: C" heading
awk '/^## Quick start: C/ { s = 1 } s && /^```c$/ { b = 1; next } b && /^```$/ { exit } b' \
    "$readme" >"$work/read.c"
if [ ! -s "$work/read.c" ]; then
    echo "FAIL: $readme has no \`\`\`c block under '## Quick start: C'" >&2
    exit 1
fi
${CC:-cc} -std=c11 -Wall -Wextra -Werror -I"$src/include" "$work/read.c" -L"$bin/lib" -ltpx \
    -Wl,-rpath,"$bin/lib" -o "$work/read"
out=$(TPX_SOCKET_IFNAME=lo TPX_BIND_ADDR=127.0.0.1 timeout 60 "$work/read")
echo "$out"
[ "$out" = "READ verified" ] || { echo "FAIL: expected 'READ verified'" >&2; exit 1; }
