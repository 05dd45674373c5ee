#!/usr/bin/env python3
"""Compares two Google Benchmark JSON files (--benchmark_out) benchmark by benchmark: the median
real time of each (the `median` aggregate when repetitions were run, else the median of its
iterations' entries), the ratio new / old, and a verdict. A benchmark is a regression when it is
slower by more than --threshold and by more than its own noise (twice the median absolute
deviation of its repetitions over their median; the larger of the two files'); faster by as
much, an improvement. A benchmark that reports an error in the new file counts as a
regression.

Exit status: 0 no regression, 3 at least one regression, 2 unusable input.

  scripts/bench_compare.py OLD.json NEW.json [--threshold 0.10] [--json OUT.json]
"""
import argparse
import json
import os
import statistics
import sys

def fail(msg):
    print("bench_compare: " + msg, file=sys.stderr)
    sys.exit(2)


UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
        entries = doc["benchmarks"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail("%s: not a Google Benchmark JSON file (%s)" % (path, e))
    runs = {}  # run name -> {"median": ns or None, "samples": [ns...]}
    for b in entries:
        try:
            name = b.get("run_name", b["name"])
            t = float(b["real_time"]) * UNIT_NS[b.get("time_unit", "ns")]
        except (KeyError, ValueError, TypeError) as e:
            fail("%s: benchmark entry %r lacks a real time (%s)" % (path, b.get("name"), e))
        r = runs.setdefault(name, {"median": None, "samples": [], "error": None})
        if b.get("error_occurred") or b.get("skipped"):
            r["error"] = b.get("error_message") or "error"
            continue
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                r["median"] = t
        else:
            r["samples"].append(t)
    out = {}
    for name, r in runs.items():
        if r["error"] is not None:
            out[name] = {"error": r["error"]}
            continue
        med = r["median"] if r["median"] is not None else (statistics.median(r["samples"]) if r["samples"] else None)
        if med is None:
            continue
        # Noise: twice the median absolute deviation of the repetitions, relative to their median.
        # Robust: one cold repetition (866 ms among 655 and 657) does not widen it.
        spread = 0.0
        if len(r["samples"]) >= 2 and med > 0:
            m = statistics.median(r["samples"])
            spread = 2 * statistics.median(abs(x - m) for x in r["samples"]) / m
        out[name] = {"median_ns": med, "spread": spread, "repetitions": len(r["samples"])}
    return out


def fmt(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return "%.3g %s" % (ns / scale, unit)
    return "%.3g ns" % ns


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--threshold", type=float, default=0.10, help="relative change that counts (default 0.10)")
    ap.add_argument("--json", help="also write the comparison as JSON here")
    a = ap.parse_args()
    if not a.threshold > 0:
        fail("--threshold must be > 0")
    old, new = load(a.old), load(a.new)
    rows, regressions = [], 0
    for name in sorted(set(old) | set(new)):
        o, n = old.get(name), new.get(name)
        if o is None or n is None:
            rows.append({"name": name, "verdict": "only in " + ("new" if o is None else "old")})
            continue
        if "error" in n or "error" in o:  # a benchmark that broke counts as a regression
            broke = "error" in n
            regressions += broke
            rows.append({"name": name, "verdict": ("failed in new: " if broke else "failed in old: ") +
                         (n if broke else o)["error"]})
            continue
        ratio = n["median_ns"] / o["median_ns"] if o["median_ns"] > 0 else float("inf")
        noise = max(o["spread"], n["spread"])
        bar = max(a.threshold, noise)
        verdict = "regression" if ratio > 1 + bar else "improvement" if ratio < 1 / (1 + bar) else "same"
        regressions += verdict == "regression"
        rows.append({"name": name, "old_ns": o["median_ns"], "new_ns": n["median_ns"], "ratio": ratio,
                     "noise": noise, "verdict": verdict})
    width = max([len(r["name"]) for r in rows] + [9])
    print("%-*s %12s %12s %8s %7s  %s" % (width, "benchmark", "old", "new", "new/old", "noise", "verdict"))
    for r in rows:
        if "ratio" in r:
            print("%-*s %12s %12s %8.3f %6.1f%%  %s" % (width, r["name"], fmt(r["old_ns"]), fmt(r["new_ns"]), r["ratio"],
                                                       100 * r["noise"], r["verdict"]))
        else:
            print("%-*s %12s %12s %8s %7s  %s" % (width, r["name"], "", "", "", "", r["verdict"]))
    print("%d regression(s) beyond %.0f%% (or the benchmark's own noise, when larger)" % (regressions, 100 * a.threshold))
    if a.json:
        with open(a.json + ".part", "w") as f:
            json.dump({"old": a.old, "new": a.new, "threshold": a.threshold, "rows": rows}, f, indent=1)
        os.replace(a.json + ".part", a.json)
    return 3 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
