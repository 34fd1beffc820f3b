#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A stand-in for ethtool on PATH (as "ethtool"): `ethtool -S IF` prints the
# counters of $FAKE_ETHTOOL_DIR/IF.stats ("NAME: VALUE" lines, like a real
# driver), `ethtool -g IF` the ring settings of $FAKE_ETHTOOL_DIR/IF.ring;
# an interface without a file has no statistics (exit 94, as ethtool does).
case $1 in
    -S) f=$FAKE_ETHTOOL_DIR/$2.stats; head="NIC statistics:" ;;
    -g) f=$FAKE_ETHTOOL_DIR/$2.ring; head="Ring parameters for $2:" ;;
    *) echo "fake ethtool: unsupported: $*" >&2; exit 1 ;;
esac
[ -r "$f" ] || { echo "no stats available" >&2; exit 94; }
echo "$head"
sed 's/^/     /' "$f"
