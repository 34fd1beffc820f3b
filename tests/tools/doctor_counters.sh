#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tpx-doctor --counters-save / --counters-diff with a fake ethtool first on
# PATH (fake_ethtool.sh), whose counters this script changes between the two:
#   - the first interface of this host "receives" 1 GiB while rx_devmem_pkts
#     stays put: the diff must warn that devmem was not in use;
#   - then it receives 1 GiB and rx_devmem_pkts grows: no warning;
#   - a missing or foreign snapshot file is an error (1); ethtool missing too.
#   usage: doctor_counters.sh TPX-DOCTOR FAKE-ETHTOOL
set -eu
doctor=$1 fake=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpx-counters-test.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/bin"
cp "$fake" "$dir/bin/ethtool"
chmod +x "$dir/bin/ethtool"
export FAKE_ETHTOOL_DIR="$dir" PATH="$dir/bin:$PATH"
if="" # the first interface but lo (the snapshot covers every one)
for p in /sys/class/net/*; do
    n=${p##*/}
    [ "$n" = lo ] || { if=$n; break; }
done
[ -n "$if" ] || { echo "no interface but lo: skipped"; exit 77; }
stats() { printf 'rx_packets: 100\nrx_bytes: %s\nrx_devmem_pkts: %s\nrx_devmem_drops: 0\ntx_bytes: 5\n' "$1" "$2" >"$dir/$if.stats"; }
printf 'RX:\t\t1024\nTCP data split:\ton\n' >"$dir/$if.ring"
fail=0
check() { # what grep -q PATTERN must find (or not: !) in the diff
    if [ "$1" = "!" ]; then
        if grep -q -- "$2" "$dir/diff.out"; then echo "FAIL: '$2' in the diff"; fail=1; fi
    elif ! grep -q -- "$1" "$dir/diff.out"; then
        echo "FAIL: no '$1' in the diff"; fail=1
    fi
}

# 1. bytes but no devmem packets: the warning
stats 1000 7
"$doctor" --counters-save "$dir/before"
grep -q "^$if rx_devmem_pkts 7\$" "$dir/before" || { echo "FAIL: snapshot:"; cat "$dir/before"; exit 1; }
grep -q "^$if tcp-data-split 1\$" "$dir/before" || { echo "FAIL: no tcp-data-split"; exit 1; }
stats 1073742824 7
"$doctor" --counters-diff "$dir/before" >"$dir/diff.out"
cat "$dir/diff.out"
check "rx_bytes +1073741824 (1 GiB)"
check "rx_devmem_pkts +0"
check "WARN: .*$if received 1073741824 bytes .* rx_devmem_pkts did not grow"

# 2. bytes and devmem packets: no warning
stats 1000 7
"$doctor" --counters-save "$dir/before"
stats 1073742824 262151
"$doctor" --counters-diff "$dir/before" >"$dir/diff.out"
cat "$dir/diff.out"
check "rx_devmem_pkts +262144"
check ! "WARN"

# 3. little traffic (below --counters-min-bytes): no warning either
stats 1000 7
"$doctor" --counters-save "$dir/before"
stats 2000 7
"$doctor" --counters-diff "$dir/before" --counters-min-bytes 1M >"$dir/diff.out"
check ! "WARN"

# 4. errors: no snapshot, not a snapshot, both modes, no ethtool
for args in "--counters-diff $dir/none" "--counters-diff $fake" \
    "--counters-save $dir/x --counters-diff $dir/before"; do
    rc=0
    # shellcheck disable=SC2086 # split on purpose
    "$doctor" $args >/dev/null 2>&1 || rc=$?
    case $args in *--counters-save*) want=2 ;; *) want=1 ;; esac
    [ $rc -eq $want ] || { echo "FAIL: $args: exit $rc, expected $want"; fail=1; }
done
rm "$dir/bin/ethtool"
rc=0
env PATH="$dir/bin:/nonexistent" "$doctor" --counters-save "$dir/x" 2>"$dir/err" || rc=$?
[ $rc -eq 1 ] && grep -q "ethtool is not installed" "$dir/err" ||
    { echo "FAIL: without ethtool: exit $rc"; cat "$dir/err"; fail=1; }
[ $fail -eq 0 ] && echo "ok: counters saved, diffed, warned only when devmem was idle"
exit $fail
