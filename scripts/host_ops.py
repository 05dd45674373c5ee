#!/usr/bin/env python3
"""Host time per op of the last decode step in an nsys-layout SQLite written by `streamlab run
--sqlite` (NVTX op ranges on the launching thread): the range time and the CUDA runtime calls in
it. What an eager step's enqueue is made of. Usage: host_ops.py TRACE.sqlite"""
import bisect
import collections
import os
import sqlite3
import sys

if len(sys.argv) != 2 or not os.path.isfile(sys.argv[1]):
    sys.exit("usage: host_ops.py TRACE.sqlite (an nsys-layout SQLite from `streamlab run --sqlite`)")
db = sqlite3.connect(sys.argv[1])
rt = db.execute("select r.start, r.end, s.value from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id=r.nameId order by r.start").fetchall()
try:
    dr = db.execute("select count(*) from CUPTI_ACTIVITY_KIND_DRIVER").fetchone()[0]
except Exception as e: dr = str(e)
print("runtime calls", len(rt), "driver calls", dr)
nv = db.execute("select start, end, coalesce(text,(select value from StringIds where id=textId)) from NVTX_EVENTS where end is not null order by start").fetchall()
print("nvtx ranges", len(nv))
# decode step ranges
steps = [r for r in nv if r[2] == 'decode']
print("decode ranges", len(steps), [round((e-s)/1e3,1) for s,e,_ in steps])
if not steps:
    sys.exit("no 'decode' NVTX range in this trace (trace decode steps with NVTX on)")
# innermost ranges: those containing no other range
nv_sorted = sorted(nv, key=lambda r:(r[0], -r[1]))
inner = []
for i,(s,e,t) in enumerate(nv_sorted):
    j = i+1
    if j < len(nv_sorted) and nv_sorted[j][0] < e and nv_sorted[j][1] <= e: continue
    inner.append((s,e,t))
# restrict to last decode step
s0,e0,_ = steps[-1]
agg = collections.defaultdict(lambda:[0,0.0,0.0])
starts=[r[0] for r in rt]
tot=0
for s,e,t in inner:
    if s < s0 or e > e0: continue
    i = bisect.bisect_left(starts, s)
    api=0.0; n=0
    while i < len(rt) and rt[i][0] < e:
        api += rt[i][1]-rt[i][0]; n+=1; i+=1
    a=agg[t]; a[0]+=1; a[1]+=(e-s)/1e3; a[2]+=api/1e3
    tot += (e-s)/1e3
print("last decode step span %.1f us, inner op ranges total %.1f us" % ((e0-s0)/1e3, tot))
for t,(n,d,api) in sorted(agg.items(), key=lambda kv:-kv[1][1])[:40]:
    print("%-28s n=%3d host %8.1f us  runtime-api %8.1f us  per call %6.1f" % (t[:28], n, d, api, d/n))
