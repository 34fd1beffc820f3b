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
# The patterns, with the kind of line each one was written against (this
# file is the only one allowed to quote them):
#   ordinal sessions   "(the eleventh session)", "measured in the fifth session",
#                      "the eighth session's lost wake-up", "last session"
#   numbered sessions  "0.90 in session 5"
#   issue numbers      "(issue 12)", "issue 14's targets", "issues 14 and 18",
#                      "issue #7"
#   the log itself     "bench/HISTORY.md"
#   dated rows         "2026-11-29 (eleventh session)", "| 2026-11-25 |",
#                      "(2026-11-29): three links"; an ISO timestamp
#                      such as 2026-01-31T12:00:00Z (a format example) is not one
# Words that only look alike are left alone: a TLS session, netns_peer's
# "SESSION session=1" log lines, "ssh sessions".
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
