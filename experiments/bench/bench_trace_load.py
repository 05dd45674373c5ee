#!/usr/bin/env python3
"""Trace loading: streamlab's JSON loader against Holistic Trace Analysis's on the same file.

Writes a synthetic trace once (our layout with the "streamlab" block, or PyTorch's layout),
then times, a few times each, on that one file:
  - streamlab: bench_trace_load FILE (the loader behind `streamlab analyze / compare / view`);
  - HTA: hta.common.trace_parser.parse_trace_dataframe(FILE) (what TraceAnalysis runs per rank);
and prints the medians, events/s and MB/s of each and the ratio of the rates.

Rates count the events of streamlab's trace model in the file (kernels, memcpys, API calls,
...), the same number for both, so the ratio is the ratio of load times.

Usage: bench_trace_load.py [--events N] [--layout streamlab|pytorch|both] [--reps R]
                           [--binary build-cpu/bench_trace_load] [--hta-python PYTHON] [--dir DIR]
HTA runs under --hta-python (default: this interpreter); `scripts/quickstart.sh test` or
`python3 -m venv /tmp/hta && /tmp/hta/bin/pip install holistictraceanalysis` makes one.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HTA_SNIPPET = r"""
import json, logging, sys, time
logging.disable(logging.WARNING)
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
secs, rows = [], 0
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    meta, df, symbols = parse_trace_dataframe(sys.argv[1], ParserConfig())
    secs.append(time.perf_counter() - t)
    rows = len(df)
    del meta, df, symbols
print(json.dumps({"secs": secs, "rows": rows}))
"""


def streamlab_times(binary, path, reps):
    out = subprocess.run([binary, path, "--reps", str(reps)], check=True, capture_output=True, text=True).stdout
    secs = [float(m) for m in re.findall(r"^rep \d+: .*: ([0-9.]+) s = ", out, re.M)]
    events = int(re.search(r"^rep 0: \S+ loader.*?, (\d+) events,", out, re.M).group(1))
    loader = re.search(r"^rep 0: (\S+) loader", out, re.M).group(1)
    return secs, events, loader, out


def hta_times(python, path, reps):
    r = subprocess.run([python, "-c", HTA_SNIPPET, path, str(reps)], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    return json.loads(r.stdout.strip().splitlines()[-1]), None


def bench(layout, args, workdir):
    path = os.path.join(workdir, f"trace_{layout}_{args.events}.json")
    flag = "--write-synthetic" if layout == "streamlab" else "--write-pytorch"
    subprocess.run([args.binary, flag, str(args.events), path], check=True, capture_output=True)
    mb = os.path.getsize(path) / 1e6
    # The file just written: flushed, then read once untimed, so that neither side pays for the
    # writeback or a cold page cache.
    os.sync()
    subprocess.run([args.binary, path, "--reps", "1"], check=True, capture_output=True)
    ours, events, loader, detail = streamlab_times(args.binary, path, args.reps)
    ours_s = statistics.median(ours)
    print(f"\n{layout} layout: {path}, {mb:.1f} MB, {events} events of the trace model")
    print(f"  streamlab ({loader} loader): median {ours_s:.3f} s of {[round(s, 3) for s in ours]}"
          f" = {events / ours_s / 1e6:.2f} M events/s, {mb / ours_s:.0f} MB/s (target 5 M events/s)")
    if args.verbose:
        print(detail)
    hta, why = hta_times(args.hta_python, path, args.reps)
    if hta is None:
        print(f"  HTA: not run ({why})")
        return
    hta_s = statistics.median(hta["secs"])
    print(f"  HTA parse_trace_dataframe: median {hta_s:.3f} s of {[round(s, 3) for s in hta['secs']]}"
          f" = {events / hta_s / 1e6:.3f} M events/s, {mb / hta_s:.1f} MB/s ({hta['rows']} rows)")
    print(f"  ratio: streamlab loads this file {hta_s / ours_s:.1f}x faster than HTA")
    if not args.keep:
        os.remove(path)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--layout", choices=["streamlab", "pytorch", "both"], default="both")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--binary", default=os.path.join(root, "build-cpu", "bench_trace_load"))
    p.add_argument("--hta-python", default=sys.executable)
    p.add_argument("--dir", default=None, help="where to write the trace (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the trace files")
    p.add_argument("--verbose", action="store_true", help="print streamlab's per-phase times")
    args = p.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} not found: cmake --preset cpu && cmake --build build-cpu --target bench_trace_load")
    workdir = args.dir or tempfile.mkdtemp(prefix="sl_load_")
    print(f"{os.cpu_count()} cores; {args.reps} loads each; the machine may be shared, so medians")
    for layout in (["streamlab", "pytorch"] if args.layout == "both" else [args.layout]):
        bench(layout, args, workdir)


if __name__ == "__main__":
    main()
