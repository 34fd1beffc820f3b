#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/trace_stats.py - a throughput run's trace (TPX_TRACE_FILE), summed up.

For each trace file (one per process: TPX_TRACE_FILE=/tmp/t.%p.txt): how many
of each event per GB moved, how long receiving connections stayed parked (a
piece header for a message whose receive was not posted yet), and how many
data requests the engine had posted and not yet seen complete when a
connection parked. Usage: bench/trace_stats.py TRACE...
"""
import collections
import statistics as st
import sys


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float('nan')


for path in sys.argv[1:]:
    rows = []
    for line in open(path):
        if line.startswith('#'):
            continue
        f = line.split()
        if len(f) >= 5:
            rows.append((float(f[0]), f[1], f[2], f[3], int(f[4])))
    if not rows:
        continue
    count = collections.Counter(r[3] for r in rows)
    moved = sum(r[4] for r in rows if r[3] == 'msg-done')
    span = rows[-1][0] - rows[0][0]
    print(f"== {path}: {len(rows)} records over {span / 1e3:.1f} ms, msg-done bytes {moved / 1e9:.3f} GB")
    gb = moved / 1e9 or 1
    print('   per GB: ' + ', '.join(f"{k} {v / gb:.0f}" for k, v in sorted(count.items())))
    cu = collections.Counter(r[4] for r in rows if r[3] == 'cu-wait')
    if cu:  # which side waited on its staging copies
        what = {0: 'send: next block not copied', 1: 'receive: no ring space',
                2: 'receive: a copy to publish'}
        print('   cu-wait per GB: ' + ', '.join(f"{what.get(k, k)} {v / gb:.0f}"
                                                 for k, v in sorted(cu.items())))
    # parked -> unparked on the same worker thread, same seq
    open_parks, waits = {}, []
    posted = {0: 0, 1: 0}
    done = 0
    at_park = []
    for t, name, tid, ev, arg in rows:
        if ev == 'data-post':
            posted[arg & 1] += 1
        elif ev == 'chunk-done':
            done += 1
        elif ev == 'parked':
            open_parks[(tid, arg)] = t
            at_park.append(posted[1] - done if posted[1] else 0)
        elif ev == 'unparked' and (tid, arg) in open_parks:
            waits.append(t - open_parks.pop((tid, arg)))
    if waits:
        print(f"   parked: {len(waits)} times, waited p50 {pct(waits, .5):.1f} us, p90 {pct(waits, .9):.1f},"
              f" max {max(waits):.1f}; total {sum(waits) / 1e3:.2f} ms over all connections")
    if at_park and posted[1]:
        print(f"   receives outstanding when a connection parked: p50 {pct(at_park, .5)}, min {min(at_park)}")
    # gaps between a worker's events: how long each worker thread had nothing recorded
    thr = collections.defaultdict(list)
    for t, name, tid, ev, arg in rows:
        if name.startswith('tpx-io'):
            thr[tid].append(t)
    if thr:
        wake = [r for r in rows if r[3] == 'worker-wake']
        print(f"   worker wake-ups {len(wake)}; threads {len(thr)}")
