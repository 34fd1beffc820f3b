#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# unit.diary_words: the product speaks of the product. No file of the tree
# (outside .git and build folders) may cite a development log, an issue
# number, a working session or a dated diary row: a finding is written as
# the design it led to ("why"), current numbers live in docs/performance.md
# with their machine and command, and history is git's.
#
# Usage: diary_words.sh SOURCE_DIR     (exit 0: clean; 1: the offending lines)
#
# The patterns (below) catch: a working session named by ordinal or by
# number; an issue named by number (with or without #); the name of the old
# measurement log; a calendar date not followed by a time (an ISO timestamp
# in a format example is allowed). Words that only look alike are left
# alone: a TLS session, netns_peer's session log lines, ssh sessions.
set -uo pipefail
src=${1:?usage: diary_words.sh SOURCE_DIR}
cd "$src" || exit 2

ordinals='first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth'
ordinals+='|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth'
patterns=(
    "\\b($ordinals|last|previous|next|this|that)[ -]sessions?\\b"
    "\\bsessions? [0-9]+\\b"
    "\\bissues? #?[0-9]+"
    "HISTORY\\.md"
    "\\b20[0-9]{2}-[01][0-9]-[0-3][0-9]([^T0-9]|$)"
)

excludes=(--exclude-dir=.git --exclude-dir='build*' --exclude-dir=dist --exclude-dir='*.egg-info'
    --exclude-dir=.venv --exclude-dir=__pycache__ --exclude=diary_words.sh)

found=0
for p in "${patterns[@]}"; do
    if out=$(grep -rInEi "${excludes[@]}" -e "$p" . 2>/dev/null); then
        printf 'diary words (pattern %s):\n%s\n' "$p" "$out"
        found=1
    fi
done
if [ $found -ne 0 ]; then
    echo "FAIL: write the finding as design (why), drop the label or date; history is git's" >&2
    exit 1
fi
echo "OK: no session labels, issue numbers, log citations or dated rows in the tree"
