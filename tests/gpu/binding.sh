#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# binding.sh c TEST_GPU_BIND      the C API cases of test_gpu_bind.c
# binding.sh py PYTHON SCRIPT     a Python script (the tpx package, NIXL)
#
# Runs in a network namespace of its own (unshare -n) with four NICs eth1..eth4
# (veth) and a stand-in sysfs tree (TPX_SYSFS_ROOT) in which GPU d and
# NIC eth(d+1) share a PCI switch, over the stand-in CUDA driver with four
# devices (FAKE_CUDA_DEVICES, FAKE_CUDA_PCI; LD_LIBRARY_PATH from ctest).
# FAKE_CUDA_ALLOC_LOG names the file where the driver logs every allocation
# with its device: where an engine put its buffers. Exit 77 (skipped)
# without root, unshare or ip.
set -u -o pipefail

if [ -z "${TPX_BINDING_NS:-}" ]; then
    if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then
        echo "SKIPPED: needs root, unshare and ip (a network namespace of the test's own)"
        exit 77
    fi
    if ! unshare -n true 2>/dev/null; then
        echo "SKIPPED: cannot create a network namespace here"
        exit 77
    fi
    exec env TPX_BINDING_NS=1 unshare -n -- bash "$0" "$@"
fi

fail() { echo "FAIL: $*" >&2; exit 1; }

ip link set lo up || fail "lo"
for i in 1 2 3 4; do
    ip link add "eth$i" type veth peer name "peer$i" && ip addr add "10.77.$i.1/24" dev "eth$i" &&
        ip link set "eth$i" up && ip link set "peer$i" up || fail "cannot make eth$i"
done

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
sys=$WORK/sys
pci=""
mkdir -p "$sys/bus/pci/devices" "$sys/class/net"
for d in 0 1 2 3; do
    sw=$sys/devices/pci0000:00/0000:00:0$((d + 1)).0
    gpu=0000:$((d + 1))1:00.0
    nic=0000:$((d + 1))2:00.0
    mkdir -p "$sw/$gpu" "$sw/$nic" "$sys/class/net/eth$((d + 1))"
    echo -1 >"$sw/$nic/numa_node"
    ln -s "$sw/$gpu" "$sys/bus/pci/devices/$gpu"
    ln -s "$sw/$nic" "$sys/class/net/eth$((d + 1))/device"
    pci=$pci${pci:+,}$gpu
done
export TPX_SYSFS_ROOT=$sys FAKE_CUDA_DEVICES=4 FAKE_CUDA_PCI=$pci
export TPX_SOCKET_IFNAME=eth1,eth2,eth3,eth4 TPX_BIND_ADDR=127.0.0.1
# The data NICs are not the bootstrap's address: peers prove themselves.
export TPX_AUTH_TOKEN=tpx-binding-test

# devices LOG: the devices the allocations of LOG were made on, sorted, unique
devices() { awk '{print $2}' "$1" | sort -u | tr '\n' ' '; }

case "${1:-}" in
c)
    bin=$2
    for mode in memory context params claims; do
        export FAKE_CUDA_ALLOC_LOG=$WORK/alloc.$mode
        : >"$FAKE_CUDA_ALLOC_LOG"
        "$bin" "$mode" || fail "test_gpu_bind $mode"
    done
    # Every buffer of the memory case is GPU 3's: the test's two, and the
    # strict TCPX comms' bounce buffers and handles, made on the engine's GPU
    # whatever thread set them up.
    d=$(devices "$WORK/alloc.memory")
    echo "memory: allocations on GPU(s) $d($(wc -l <"$WORK/alloc.memory") in all)"
    [ "$d" = "3 " ] || fail "the memory case allocated on GPU(s) $d, not only on GPU 3"
    if [ "${TPX_SOCK_TCPX:-0}" != 0 ]; then
        n=$(grep -c '^device' "$WORK/alloc.memory")
        [ "$n" -gt 2 ] || fail "no comm device memory was allocated ($n device allocations)"
    fi
    ;;
py)
    if ! "$2" -c 'import tpx, nixl._api' 2>/dev/null; then
        echo "SKIPPED: no Python with tpx and NIXL at $2 (python.setup skipped?)"
        exit 77
    fi
    export FAKE_CUDA_ALLOC_LOG=$WORK/alloc.py
    : >"$FAKE_CUDA_ALLOC_LOG"
    "$2" "$3" || fail "$3"
    ;;
*)
    sed -n '3,4p' "$0" >&2
    exit 2
    ;;
esac
echo "binding: passed"
