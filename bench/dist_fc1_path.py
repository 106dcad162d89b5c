#!/usr/bin/env python3
"""The mlp's fc1 shards on the critical path of a 1 ps + 1 worker step, from a merged trace
(`psgraph launch --ps 1 --workers 1 -- psgraph train --model mlp --trace FILE
--trace-steps A:B`): for each shard (fc1/weights/part_k) and each traced worker step, the
worker's gradient Send, the ps's Recv of it done, the ps's ApplyMomentum, the ps's Send of
the next read of the shard, the worker's Recv of it done, the worker's MatMul by it. Events
are matched by time (both processes share the host's monotonic clock; the ps numbers its
steps its own way). Prints the median, 25th and 75th percentile of each segment, in us.

    python3 bench/dist_fc1_path.py t.json
"""
import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
ev = [e for e in (d['traceEvents'] if isinstance(d, dict) else d) if e.get('ph') == 'X']
end = lambda e: e['ts'] + e['dur']
def sel(pid, name):
    return sorted((e for e in ev if e['pid'] == pid and e['name'] == name), key=end)
def first_after(lst, t, key=end):
    for e in lst:
        if key(e) >= t: return e
    return None
for k, (g, r, mm) in enumerate([('gradients/model/fc1/MatMul/grad/MatMul_1', 'model/fc1/ReadVariable', 'model/fc1/MatMul'),
                            ('gradients/model/fc1/MatMul_1/grad/MatMul_1', 'model/fc1/ReadVariable_1', 'model/fc1/MatMul_1')]):
    wsend, precv = sel(1, g + '/_send_0'), sel(0, g + '/_recv_0')
    app = sorted((e for e in ev if e['pid'] == 0 and e['name'] == 'Momentum/update_model/fc1/weights/part_%d' % k), key=lambda e: e['ts'])
    psend, wrecv = sel(0, r + '/_send_1'), sel(1, r + '/_recv_0')
    wmm = sorted((e for e in ev if e['pid'] == 1 and e['name'] == mm), key=lambda e: e['ts'])
    segs = {}
    def add(k_, v): segs.setdefault(k_, []).append(v)
    for s in wsend[:-1]:
        t0 = end(s)
        pr = first_after(precv, t0)
        if not pr: continue
        ap = first_after(app, end(pr), key=lambda e: e['ts'])
        if not ap: continue
        ps = first_after(psend, end(ap))
        if not ps: continue
        wr = first_after(wrecv, end(ps))
        if not wr: continue
        m = first_after(wmm, end(wr), key=lambda e: e['ts'])
        if not m: continue
        add('grad send -> ps recv done', end(pr) - t0)
        add('ps recv -> apply start', ap['ts'] - end(pr))
        add('apply', ap['dur'])
        add('apply end -> ps send done', end(ps) - end(ap))
        add('ps send -> worker recv done', end(wr) - end(ps))
        add('worker recv -> matmul start', m['ts'] - end(wr))
        add('grad send -> next matmul', m['ts'] - t0)
    print('part_%d' % k, 'steps', len(segs.get('apply', [])))
    for kk, v in segs.items():
        v = sorted(v); print('   %-30s median %7.1f  p25 %7.1f  p75 %7.1f' % (kk, st.median(v), v[len(v)//4], v[3*len(v)//4]))
