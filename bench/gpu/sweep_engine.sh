cd /work/main 2>/dev/null || true
export TPX_SOCKET_IFNAME=lo
cmake --preset release >/dev/null && cmake --build --preset release -j16 --target tpx tpx-perf tpx-netbench >/dev/null || exit 1
P=build/release/bin/tpx-perf
r() { printf '%-48s ' "$*"; env "$@" $P --loopback --size 256M --iters 10 --no-verify --quiet 2>&1 | awk '/best/ {print $3}'; }
for round in 1 2; do
r TPX_CHUNK_BYTES=512K
r TPX_CHUNK_BYTES=2M
r TPX_CHUNK_BYTES=4M
r TPX_CHANNELS=2 TPX_CHUNK_BYTES=4M
r TPX_CHANNELS=8 TPX_CHUNK_BYTES=4M
r TPX_NSOCKS=2
r TPX_NSOCKS=4
r TPX_NSOCKS=16
r TPX_SOCK_WORKERS=8
r TPX_SOCK_WORKERS=32
r TPX_SOCK_WORKERS=32 TPX_CHUNK_BYTES=4M
r TPX_SPIN_US=0
done
$P --print-config 2>/dev/null | grep -E "NSOCKS|WORKERS|CHANNELS|CHUNK" | head
printf 'raw16 '; build/release/bin/tpx-netbench --raw --size 256M --nsocks 16 --iters 10 --quiet | awk '{print $3}'
