#!/usr/bin/env bash
# Diagnostic: one-sided READ of GPU blocks on one GPU (issue 14's hang), host vs cuda side by side.
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/cuda/bin TPX_SOCKET_IFNAME=lo
cmake --preset release >/dev/null && cmake --build --preset release -j16 --target tpx tpx-perf >/dev/null || exit 1
B=build/release/bin
probe() { # name timeout cmd...: run; if still running after T s, show threads and kill
  local name=$1 t=$2; shift 2
  echo "== $name"
  "$@" > /tmp/probe.log 2>&1 & local p=$! i
  for i in $(seq 1 $((t*2))); do sleep 0.5; kill -0 $p 2>/dev/null || break; done
  if kill -0 $p 2>/dev/null; then
    echo "STILL RUNNING after $t s; threads (tid state utime stime wchan comm):"
    for d in /proc/$p/task/*; do
      read -r st < $d/stat; set -- $st; echo "  $1 $3 ut=${14} st=${15} $(cat $d/wchan 2>/dev/null) $(cat $d/comm)"
    done | sort -k4 -t= -n | tail -25
    kill -9 $p
  fi
  wait $p 2>/dev/null; echo "rc=$?"; grep -vE "^tpx .* DEBUG" /tmp/probe.log | tail -4
  grep -E "DEBUG|INFO|WARN|ERROR" /tmp/probe.log | tail -30
}
probe cuda4K-1000-1it 40 $B/tpx-perf --op read --mem cuda --gpu 0,0 --block 4K --blocks 1000 --iters 1 --warmup 0 --verify
probe cuda4K-10 40 $B/tpx-perf --op read --mem cuda --gpu 0,0 --block 4K --blocks 10 --iters 20 --verify
probe cuda8K-1000 40 $B/tpx-perf --op read --mem cuda --gpu 0,0 --block 8K --blocks 1000 --iters 5 --verify
probe cuda4K-1000-dbg 30 env TPX_LOG_LEVEL=debug $B/tpx-perf --op read --mem cuda --gpu 0,0 --block 4K --blocks 1000 --iters 3 --warmup 0 --verify
probe cuda4K-1000-write 40 $B/tpx-perf --op write --mem cuda --gpu 0,0 --block 4K --blocks 1000 --iters 3 --warmup 0 --verify
