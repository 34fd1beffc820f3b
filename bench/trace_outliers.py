#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/trace_outliers.py - the slowest iterations of a traced latency run.

Reads a TPX_TRACE_FILE timeline of `tpx-perf --op read|write --latency`
(one process, both engines), cuts it into iterations at each `post` of the
API thread, and prints the distribution of iteration times, then the
slowest few iterations step by step next to the median time of each step:
where a tail-latency iteration loses its time.

Usage: bench/trace_outliers.py TRACE [N_SLOWEST]
"""
import statistics as st
import sys


def load(path):
    its, cur = [], None
    for line in open(path):
        if line.startswith('#'):
            continue
        f = line.split()
        if len(f) < 4:
            continue
        rec = (float(f[0]), f[3], f[1], f[4] if len(f) > 4 else '')
        if f[3] == 'post':
            if cur:
                its.append(cur)
            cur = [rec]
        elif cur is not None:
            cur.append(rec)
    if cur:
        its.append(cur)
    return its


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    its = load(sys.argv[1])
    nslow = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    its = its[len(its) // 10:]  # skip the warm-up
    def end(it):  # the API thread's wait-return, else the last record
        w = [r[0] for r in it if r[1] == 'wait-return']
        return (w[-1] if w else it[-1][0]) - it[0][0]
    durs = sorted(end(it) for it in its)
    n = len(durs)
    if n == 0:
        sys.exit("no iterations (no 'post' records)")
    q = lambda p: durs[min(n - 1, int(p * n))]
    print(f"# {n} iterations: p50 {q(0.5):.1f}  p90 {q(0.9):.1f}  p99 {q(0.99):.1f}  max {durs[-1]:.1f} us")
    # the median offset of each (event, occurrence, thread) step
    med = {}
    for it in its:
        seen = {}
        for t, ev, th, _ in it[1:]:
            seen[ev] = seen.get(ev, 0) + 1
            med.setdefault((ev, seen[ev], th), []).append(t - it[0][0])
    med = {k: st.median(v) for k, v in med.items()}
    for it in sorted(its, key=end, reverse=True)[:nslow]:
        print(f"\n## iteration of {end(it):.1f} us (at {it[0][0]:.0f} us into the trace)")
        print(f"{'t':>9} {'+dt':>8} {'median t':>9}  step")
        seen, last = {}, it[0][0]
        for t, ev, th, arg in it:
            seen[ev] = seen.get(ev, 0) + 1
            m = med.get((ev, seen[ev], th))
            ms = f"{m:9.1f}" if m is not None else f"{'-':>9}"
            flag = "  <--" if t - last > 100 else ""
            print(f"{t - it[0][0]:9.1f} {t - last:8.1f} {ms}  {ev}#{seen[ev]} {th} {arg}{flag}")
            last = t


if __name__ == '__main__':
    main()
