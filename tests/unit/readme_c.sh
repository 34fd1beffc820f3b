#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# unit.readme_c: the README's C quick start compiles as written (warnings are
# errors) against this build's libtpx and moves verified bytes over loopback;
# and every relative link of the tree's Markdown pages (README.md, SECURITY.md,
# docs/, bench/ ...) leads to a file that exists, and to a heading of it when
# it names one (#anchor, as GitHub makes them from the heading's words); and
# the README stays short (at most 250 lines).
#
# Usage: readme_c.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=${1:?usage: readme_c.sh SOURCE_DIR BUILD_DIR} bin=${2:?}
readme=$src/README.md
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# GitHub's anchor of each heading of a page: lower case, punctuation dropped,
# spaces to hyphens (outside fenced code blocks).
anchors() {
    awk '/^```/ { f = !f; next } !f && /^#+ / { sub(/^#+ +/, ""); print }' "$1" |
        tr '[:upper:]' '[:lower:]' | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g'
}
bad=0
# The README is a newcomer's ten minutes: at most 250 lines; the rest lives in docs/.
lines=$(wc -l <"$readme")
echo "README.md: $lines lines (at most 250)"
if [ "$lines" -gt 250 ]; then
    echo "README.md has $lines lines: move what a newcomer does not need into docs/" >&2
    bad=1
fi
while IFS= read -r md; do
    dir=$(dirname "$md")
    # [text](target) outside fenced code blocks; absolute URLs and mail are not checked
    while IFS= read -r link; do
        case $link in *://* | mailto:*) continue ;; esac
        path=${link%%#*} anchor=
        [ "$path" != "$link" ] && anchor=${link#*#}
        target=$md
        [ -n "$path" ] && target=$dir/$path
        if [ ! -e "$target" ]; then
            echo "broken link in ${md#$src/}: ($link): no ${target#$src/}" >&2
            bad=1
        elif [ -n "$anchor" ] && ! anchors "$target" | grep -xF -- "$anchor" >/dev/null; then
            echo "broken link in ${md#$src/}: ($link): no heading #$anchor" >&2
            bad=1
        fi
    done < <(awk '/^```/ { f = !f; next } !f' "$md" | grep -o '\]([^) ]*)' | sed 's/^](//; s/)$//')
done < <(find "$src" \( -name .git -o -name 'build*' -o -name dist -o -name .venv \) -prune \
             -o -name '*.md' -type f -print)
[ $bad -eq 0 ] || { echo "FAIL: Markdown links that lead nowhere" >&2; exit 1; }
echo "OK: every relative link of the Markdown pages leads to a file (and heading)"
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
