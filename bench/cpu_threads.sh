#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/cpu_threads.sh - where a running benchmark's CPU goes, by thread.
# Starts CMD, lets it run WARM seconds, then samples every thread of CMD's
# process tree (/proc/PID/task/TID/stat: utime + stime) over SPAN seconds
# and prints CPU per thread kind (the thread name without its digits: all
# tpx-io workers together), in cores (1.00 = one core busy all the time).
# CMD must run longer than WARM + SPAN; it is stopped afterwards.
# Context switches (voluntary + involuntary, /proc/.../status) per second
# are printed beside the cores.
# -a: every thread on a line of its own too (busiest first): shows whether
# some workers are saturated while others idle.
#   Usage: bench/cpu_threads.sh [-a] [-w WARM] [-s SPAN] CMD [ARGS...]
#   e.g.:  bench/cpu_threads.sh build/release/bin/tpx-perf --loopback --size 256M --iters 200 --no-verify
set -uo pipefail
WARM=1 SPAN=2 ALL=0
while getopts "aw:s:" o; do
  case $o in a) ALL=1 ;; w) WARM=$OPTARG ;; s) SPAN=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-a] [-w WARM] [-s SPAN] CMD [ARGS...]" >&2; exit 2; }
"$@" >/dev/null 2>&1 &
root=$!
tree() { # PIDs of root and its descendants
  local q=$1
  echo "$q"
  for c in $(cat /proc/"$q"/task/*/children 2>/dev/null); do tree "$c"; done
}
snap() { # "tid name ticks switches" for every thread of the tree
  for p in $(tree "$root"); do
    for t in /proc/"$p"/task/*; do
      # comm may hold spaces or parentheses: cut at the last ')'
      s=$(cat "$t/stat" 2>/dev/null) || continue
      name=${s#*(}; name=${name%)*}; rest=${s##*) }
      set -- $rest
      cs=$(awk '/ctxt_switches/ { n += $2 } END { print n + 0 }' "$t/status" 2>/dev/null)
      echo "${t##*/} ${name// /_} $(( ${12} + ${13} )) ${cs:-0}"
    done
  done
}
sleep "$WARM"
a=$(snap)
t0=$(date +%s.%N)
sleep "$SPAN"
b=$(snap)
t1=$(date +%s.%N)
kill "$root" 2>/dev/null; pkill -P "$root" 2>/dev/null; wait "$root" 2>/dev/null
hz=$(getconf CLK_TCK)
awk -v hz="$hz" -v dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" '
  NR == FNR { a[$1] = $3; s[$1] = $4; next }
  { d = $3 - ($1 in a ? a[$1] : 0); k = $2; gsub(/[0-9]+$/, "", k); c[k] += d; n[k]++; tot += d
    w[k] += $4 - ($1 in s ? s[$1] : 0); wt += $4 - ($1 in s ? s[$1] : 0) }
  END {
    for (k in c) printf "%-18s %3d threads %6.2f cores %9.0f switches/s\n", k, n[k], c[k] / hz / dt, w[k] / dt
    printf "%-18s %3s         %6.2f cores %9.0f switches/s\n", "total", "", tot / hz / dt, wt / dt
  }' <(echo "$a") <(echo "$b") | sort -k4 -nr
if [ "$ALL" = 1 ]; then
  echo "# per thread (tid name cores)"
  awk -v hz="$hz" -v dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" '
    NR == FNR { a[$1] = $3; next }
    { printf "%-8s %-18s %6.2f\n", $1, $2, ($3 - ($1 in a ? a[$1] : 0)) / hz / dt }' \
    <(echo "$a") <(echo "$b") | sort -k3 -nr
fi
