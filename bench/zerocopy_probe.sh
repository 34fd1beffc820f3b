#!/usr/bin/env bash
# zerocopy_probe.sh - does MSG_ZEROCOPY help a bulk TCP sender here?
#
# Usage: bench/zerocopy_probe.sh
#
# Builds bench/zerocopy_probe.c (gcc, into a temporary folder) and runs it
#  1. over loopback (127.0.0.1), sender and receiver threads in one process;
#  2. when running as root and `ip netns` works: across a veth pair between two
#     network namespaces this script creates (tpxzc-<pid>-a 10.231.0.1 sends,
#     tpxzc-<pid>-b 10.231.0.2 receives). Loopback delivery makes the kernel
#     copy MSG_ZEROCOPY data (it reports SO_EE_CODE_ZEROCOPY_COPIED); veth is
#     the closest device path available without a NIC. The namespaces (and the
#     veth pair, which lives only inside them) are deleted on exit by a trap;
#     nothing outside them is touched and no traffic leaves them.
# Each prints one line per run and a copy-vs-zerocopy table.
#
# Environment:
#   SIZES=64K,256K,1M,4M  send() sizes
#   DURATION=3            seconds per run
#   REPEAT=3              runs per configuration (interleaved; table: median (best))
#   BUF=256M              sender buffer
#   SOCKBUF=0             SO_SNDBUF/SO_RCVBUF (0 = autotuning)
#   PORT=5399             port inside the namespaces (loopback uses an ephemeral one)
#   VETH_MTU=1500         MTU of the veth pair
#   NO_VETH=1             skip the namespace run
#   CC=gcc
set -euo pipefail

SIZES=${SIZES:-64K,256K,1M,4M}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
BUF=${BUF:-256M}
SOCKBUF=${SOCKBUF:-0}
PORT=${PORT:-5399}
VETH_MTU=${VETH_MTU:-1500}
NO_VETH=${NO_VETH:-0}
CC=${CC:-gcc}

here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/tpxzc.XXXXXX)
NS_A=tpxzc-$$-a
NS_B=tpxzc-$$-b
made_a=0
made_b=0
recv_pid=

cleanup() {
    set +e
    if [ -n "$recv_pid" ]; then
        kill "$recv_pid" 2>/dev/null
        wait "$recv_pid" 2>/dev/null
    fi
    [ "$made_a" = 1 ] && ip netns del "$NS_A" 2>/dev/null
    [ "$made_b" = 1 ] && ip netns del "$NS_B" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$CC" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -pthread \
    -o "$tmp/zerocopy_probe" "$here/zerocopy_probe.c"
P=$tmp/zerocopy_probe
common=(--sizes "$SIZES" --duration "$DURATION" --repeat "$REPEAT" --buf "$BUF" --sockbuf "$SOCKBUF")

echo "# kernel $(uname -r), $(nproc) CPU(s), optmem_max $(cat /proc/sys/net/core/optmem_max 2>/dev/null || echo '?')"
echo "# loopback (127.0.0.1, lo MTU $(cat /sys/class/net/lo/mtu 2>/dev/null || echo '?'))"
"$P" --addr 127.0.0.1 --label loopback "${common[@]}" | tee "$tmp/loopback.txt"

if [ "$NO_VETH" = 1 ]; then
    echo "# veth: skipped (NO_VETH=1)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "# veth: skipped (not root)"
    exit 0
fi
if ! ip netns add "$NS_A" 2>/dev/null; then
    echo "# veth: skipped (ip netns add failed)"
    exit 0
fi
made_a=1
ip netns add "$NS_B"
made_b=1
# created directly inside the namespaces: nothing appears in the caller's one
ip link add tpxzc-a netns "$NS_A" type veth peer name tpxzc-b netns "$NS_B"
ip -n "$NS_A" link set lo up
ip -n "$NS_B" link set lo up
ip -n "$NS_A" link set tpxzc-a mtu "$VETH_MTU" up
ip -n "$NS_B" link set tpxzc-b mtu "$VETH_MTU" up
ip -n "$NS_A" addr add 10.231.0.1/24 dev tpxzc-a
ip -n "$NS_B" addr add 10.231.0.2/24 dev tpxzc-b

nsizes=$(awk -F, '{print NF}' <<<"$SIZES")
count=$((REPEAT * nsizes * 2))
echo
echo "# veth ($NS_A 10.231.0.1 -> $NS_B 10.231.0.2, MTU $VETH_MTU)"
ip netns exec "$NS_B" "$P" --mode recv --addr 10.231.0.2 --port "$PORT" --count "$count" \
    --sockbuf "$SOCKBUF" &
recv_pid=$!
ip netns exec "$NS_A" "$P" --mode send --addr 10.231.0.2 --port "$PORT" --label veth \
    "${common[@]}" | tee "$tmp/veth.txt"
wait "$recv_pid" || true
recv_pid=

echo
echo "# summary"
sed -n '/^== /,$p' "$tmp/loopback.txt"
echo
sed -n '/^== /,$p' "$tmp/veth.txt"
