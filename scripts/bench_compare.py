#!/usr/bin/env python3
"""Compares two Google Benchmark JSON files (--benchmark_out) benchmark by benchmark: the median
real time of each (the `median` aggregate when repetitions were run, else the median of its
iterations' entries), the ratio new / old, and a verdict:

  regression       slower by more than --threshold and by more than its own noise (twice the
                   median absolute deviation of its repetitions over their median; the larger of
                   the two files'); faster by as much: improvement; otherwise: same.
  noise unknown    slower or faster by more than --threshold, but with fewer than 3 repetitions
                   on a side its noise cannot be measured, so the change cannot be told from
                   noise: not a regression, and not passed silently either; the summary counts
                   them. With --strict the slower ones fail the comparison (exit 3).
  failed in new    the benchmark reports an error in the new file: counts as a regression.
  missing in new   in the old file, not in the new one (it no longer runs, or was renamed):
                   counts as a regression, so that a benchmark cannot drop out unnoticed.
  new benchmark    only in the new file: reported, nothing to compare, not a failure.

Of the aggregates only a run's median is used; its mean, stddev and cv, and a Complexity()
benchmark's BigO and RMS fits, are not benchmarks of their own (files from older Google Benchmark
versions, without run_type, name them NAME_mean, NAME_median, ...).

Unusable input exits 2 with a message naming the file (and the benchmark): unreadable or
malformed JSON, an empty benchmark list, a time that is not a positive finite number (a boolean
or a string is not a number), a --json destination that cannot be written.

Exit status: 0 no regression, 3 at least one regression (slower, failed or missing in new; with
--strict also slower with noise unknown), 2 unusable input.

  scripts/bench_compare.py OLD.json NEW.json [--threshold 0.10] [--strict] [--json OUT.json]
"""
import argparse
import json
import math
import os
import statistics
import sys

# Fewer repetitions than this and the noise is not measured: the MAD of 2 is half their
# difference, so one cold repetition alone would set the bar, and one repetition has none.
MIN_REPS = 3


def fail(msg):
    print("bench_compare: " + msg, file=sys.stderr)
    sys.exit(2)


UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def jtype(v):
    """What a JSON value is, in JSON's words, for messages."""
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(v), type(v).__name__)


def real_time_ns(path, name, b):
    """The entry's real time in ns; unusable input (exit 2) unless a positive finite number."""
    try:
        v = b["real_time"]
        # A number, not a boolean (float(True) is 1.0: "real_time": true read as 1 ns) or a string.
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError("real_time is a %s, not a number" % jtype(v))
        t = float(v) * UNIT_NS[b.get("time_unit", "ns")]
    except (KeyError, ValueError, TypeError) as e:
        fail("%s: benchmark %s: no usable real time (%s: %s)" % (path, name, type(e).__name__, e))
    # A time of 0, below 0 or NaN is a broken measurement, not a fast one: compared, it would
    # pass (NaN compares false) or divide by zero.
    if not (math.isfinite(t) and t > 0):
        fail("%s: benchmark %s: real time %r %s is not a positive finite number"
             % (path, name, b.get("real_time"), b.get("time_unit", "ns")))
    return t


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
        entries = doc["benchmarks"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail("%s: not a Google Benchmark JSON file (%s)" % (path, e))
    if not isinstance(entries, list):
        fail('%s: not a Google Benchmark JSON file ("benchmarks" is a %s, not a list)' % (path, jtype(entries)))
    if not entries:
        fail('%s: no benchmarks (an empty "benchmarks" list): nothing was measured' % path)
    runs = {}  # run name -> {"median": ns or None, "samples": [ns...], "error": message or None}
    for i, b in enumerate(entries):
        if not isinstance(b, dict):
            fail("%s: benchmark entry %d is a %s, not an object" % (path, i, jtype(b)))
        name = b.get("run_name", b.get("name"))
        if not isinstance(name, str) or not name:
            fail("%s: benchmark entry %d has no name" % (path, i))
        run_type, aggregate = b.get("run_type"), b.get("aggregate_name")
        if run_type is None:
            # Older Google Benchmark files have no run_type / run_name: their aggregates are named
            # NAME_mean, NAME_median, NAME_stddev (and NAME_cv), which are not benchmarks of their own.
            for suffix in ("_mean", "_median", "_stddev", "_cv", "_BigO", "_RMS"):
                if name.endswith(suffix) and len(name) > len(suffix):
                    run_type, aggregate, name = "aggregate", suffix[1:], name[:-len(suffix)]
                    break
        # A Complexity() benchmark's fit (BigO, RMS) names the family, not a run, and holds no real
        # time: no benchmark of its own.
        if run_type == "aggregate" and aggregate in ("BigO", "RMS"):
            continue
        r = runs.setdefault(name, {"median": None, "samples": [], "error": None})
        # Of a run's aggregates only the median is used; the others (stddev 0 when all repetitions
        # agree, cv in percent) are not times to check.
        if run_type == "aggregate" and aggregate != "median":
            continue
        # An errored entry's time (often 0) means nothing: look at the error first.
        if b.get("error_occurred") or b.get("skipped"):
            r["error"] = str(b.get("error_message") or "error")
            continue
        if run_type == "aggregate":
            r["median"] = real_time_ns(path, name, b)
        else:
            r["samples"].append(real_time_ns(path, name, b))
    out = {}
    for name, r in runs.items():
        if r["error"] is not None:
            out[name] = {"error": r["error"]}
            continue
        if r["median"] is None and not r["samples"]:
            fail("%s: benchmark %s has neither repetitions nor a median aggregate" % (path, name))
        med = r["median"] if r["median"] is not None else statistics.median(r["samples"])
        # Noise: twice the median absolute deviation of the repetitions, relative to their median.
        # Robust: one cold repetition (866 ms among 655 and 657) does not widen it. Unknown (None)
        # below MIN_REPS repetitions.
        spread = None
        if len(r["samples"]) >= MIN_REPS:
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--threshold", type=float, default=0.10, help="relative change that counts (default 0.10)")
    ap.add_argument("--strict", action="store_true",
                    help="fail (exit 3) when a benchmark is slower beyond the threshold but its noise is unknown "
                         "(fewer than %d repetitions on a side)" % MIN_REPS)
    ap.add_argument("--json", help="also write the comparison as JSON here")
    a = ap.parse_args()
    if not (a.threshold > 0 and math.isfinite(a.threshold)):
        fail("--threshold must be a number > 0")
    # Where --json goes is checked before comparing: failing to write it afterwards would end in a
    # traceback (status 1) that hides the comparison's own status.
    if a.json is not None:
        folder = os.path.dirname(a.json) or "."
        if not a.json or os.path.isdir(a.json) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            fail("--json %r: not a file name in a writable folder" % a.json)
    old, new = load(a.old), load(a.new)
    rows = []
    regressions, missing, added, unknown = [], [], [], []  # names, for the summary
    for name in sorted(set(old) | set(new)):
        o, n = old.get(name), new.get(name)
        if n is None:
            missing.append(name)
            rows.append({"name": name, "verdict": "missing in new"})
            continue
        if o is None:
            added.append(name)
            rows.append({"name": name, "verdict": "new benchmark"})
            continue
        if "error" in n or "error" in o:  # a benchmark that broke counts as a regression
            broke = "error" in n
            if broke:
                regressions.append(name + " (failed in new)")
            rows.append({"name": name, "verdict": ("failed in new: " if broke else "failed in old: ") +
                         (n if broke else o)["error"]})
            continue
        ratio = n["median_ns"] / o["median_ns"]
        row = {"name": name, "old_ns": o["median_ns"], "new_ns": n["median_ns"], "ratio": ratio,
               "old_repetitions": o["repetitions"], "new_repetitions": n["repetitions"]}
        beyond = ratio > 1 + a.threshold or ratio < 1 / (1 + a.threshold)
        if o["spread"] is None or n["spread"] is None:
            # Within the threshold it is "same" whatever the noise (noise only raises the bar);
            # beyond it, the change might be noise: say so rather than guess.
            row["noise"] = None
            if beyond:
                row["verdict"] = ("slower" if ratio > 1 else "faster") + ", noise unknown"
                unknown.append(name)
            else:
                row["verdict"] = "same"
        else:
            noise = max(o["spread"], n["spread"])
            bar = max(a.threshold, noise)
            row["noise"] = noise
            row["verdict"] = "regression" if ratio > 1 + bar else "improvement" if ratio < 1 / (1 + bar) else "same"
            if row["verdict"] == "regression":
                regressions.append(name)
        rows.append(row)
    unknown_slower = [r["name"] for r in rows if r["verdict"] == "slower, noise unknown"]

    width = max([len(r["name"]) for r in rows] + [9])
    print("%-*s %12s %12s %8s %7s  %s" % (width, "benchmark", "old", "new", "new/old", "noise", "verdict"))
    for r in rows:
        if "ratio" in r:
            noise = "%6.1f%%" % (100 * r["noise"]) if r["noise"] is not None else "?"
            print("%-*s %12s %12s %8.3f %7s  %s" % (width, r["name"], fmt(r["old_ns"]), fmt(r["new_ns"]), r["ratio"],
                                                   noise, r["verdict"]))
        else:
            print("%-*s %12s %12s %8s %7s  %s" % (width, r["name"], "", "", "", "", r["verdict"]))
    print("%d regression(s) beyond %.0f%% (or the benchmark's own noise, when larger)%s"
          % (len(regressions), 100 * a.threshold, ": " + ", ".join(regressions) if regressions else ""))
    if missing:
        print("%d benchmark(s) missing in new, counted as regressions: %s" % (len(missing), ", ".join(missing)))
    if added:
        print("%d new benchmark(s), nothing to compare: %s" % (len(added), ", ".join(added)))
    if unknown:
        print("%d benchmark(s) not judged, noise unknown: changed by more than %.0f%% with fewer than %d repetitions "
              "on a side (%s)%s: %s"
              % (len(unknown), 100 * a.threshold, MIN_REPS,
                 "%d slower, %d faster" % (len(unknown_slower), len(unknown) - len(unknown_slower)),
                 "; --strict: the slower ones fail" if a.strict else
                 "; not failed (--strict fails the slower ones); run more repetitions to judge them",
                 ", ".join(unknown)))
    failed = bool(regressions or missing or (a.strict and unknown_slower))
    status = 3 if failed else 0
    if a.json:
        summary = {"regressions": regressions, "missing_in_new": missing, "new": added, "noise_unknown": unknown,
                   "min_repetitions": MIN_REPS, "strict": a.strict, "exit_status": status}
        try:
            with open(a.json + ".part", "w") as f:
                json.dump({"old": a.old, "new": a.new, "threshold": a.threshold, "summary": summary, "rows": rows}, f,
                          indent=1)
            os.replace(a.json + ".part", a.json)
        except OSError as e:
            try:
                os.remove(a.json + ".part")
            except OSError:
                pass
            fail("--json %s: cannot write it (%s)" % (a.json, e))
    return status


if __name__ == "__main__":
    sys.exit(main())
