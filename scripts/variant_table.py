#!/usr/bin/env python3
"""The kernel-variant sweep of one GPU round as one table: bench_decode's JSON files (gpu_round.sh's
stage `variantsweep` writes sweep_NAME.json, one per --kernel-variants setting) side by side, per
batch and mode: each setting's median step, its ratio to the bytes floor, and its change against
the base setting (the defaults), with a verdict that the run's own noise bounds.

  noise    the larger relative difference between the base and each repeat of it (settings named
           BASE2, BASE3, ...: name them so in gpu_round's VARIANT_SWEEP, "default:" first and
           "default2:" last, so that drift over the round shows). Without a repeat the noise is
           unknown.
  verdict  faster / slower when the change is beyond max(--threshold, 2 x noise); same inside it;
           "noise unknown" when there is no repeat and the change is beyond the threshold.
  x floor  each setting's median over the base's bytes floor, so that the column compares the
           settings' times. A setting whose own floor differs from the base's by more than 0.5 %
           (the floor counts the experts a step's routing hits, and a setting that rounds
           differently can route differently) has it printed after its variants.

A file that is not bench_decode's output, a setting measured at another commit, weight format or
shape than the base, or a median that is not a positive number is refused with its name (exit 2):
a table that mixes runs would claim what no run measured.

--vary weights compares weight formats instead (gpu_round.sh's stage `weightsweep` writes
weights_NAME.json, one per --weights; --prefix weights_ finds them in a folder): the settings may
then differ in their weight format, which the table shows beside their variants, and in nothing
else. Each row's ratio is over its own bytes floor then: the formats read different bytes.

--vary commit compares builds instead (gpu_round.sh's stage `ab`: the same settings run by an
earlier build, named base, base2, ..., and by the new one): the settings may then differ in their
commit, which the table shows beside their variants, and in nothing else.

  scripts/variant_table.py DIR_OR_FILES... [--base default] [--threshold 0.01] [--json OUT.json]
                           [--prefix sweep_] [--vary weights|commit]
"""
import argparse
import glob
import json
import math
import os
import re
import sys

# The settings of one round must agree on these (their runs are compared as one experiment).
SAME = ("config", "context", "weights", "kv_cache", "mtp_layers", "draft_steps", "policy", "stream_source")


def fail(msg):
    print("variant_table: " + msg, file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(j, dict) or not isinstance(j.get("batches"), list) or not j["batches"]:
        fail(f"{path}: not bench_decode's JSON (no 'batches' list)")
    rows = {}
    for b in j["batches"]:
        try:
            key = (int(b["batch"]), str(b["mode"]))
            med, floor = float(b["median_ms"]), float(b["floor_ms"])
        except (KeyError, TypeError, ValueError):
            fail(f"{path}: a batch entry without batch, mode, median_ms and floor_ms")
        if not (math.isfinite(med) and med > 0) or not (math.isfinite(floor) and floor > 0):
            fail(f"{path}: batch {key[0]} {key[1]}: median {med} / floor {floor} ms is not a positive number")
        rows[key] = (med, floor)
    commit = (j.get("provenance") or {}).get("commit", "")
    return {"rows": rows, "commit": commit, "variants": j.get("kernel_variants", ""),
            "same": {k: j.get(k) for k in SAME}}


def setting_name(path, prefix):
    stem = os.path.splitext(os.path.basename(path))[0]
    return stem[len(prefix):] if stem.startswith(prefix) else stem


def changes(variants, base):
    """The key=value items of `variants` that differ from `base`'s."""
    b = dict(x.split("=", 1) for x in base.split(",") if "=" in x)
    out = [x for x in variants.split(",") if "=" in x and b.get(x.split("=", 1)[0]) != x.split("=", 1)[1]]
    return ",".join(out) or "(the base's)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="sweep_NAME.json files, or folders holding them")
    ap.add_argument("--base", default="default", help="the setting the others are compared with")
    ap.add_argument("--threshold", type=float, default=0.01, help="smallest relative change called a change")
    ap.add_argument("--json", help="also write the table here")
    ap.add_argument("--prefix", default="sweep_", help="the files' name before the setting (in a folder: PREFIX*.json)")
    ap.add_argument("--vary", choices=["weights", "commit"], help="let the settings differ in this (and show it)")
    a = ap.parse_args()
    if not (a.threshold >= 0 and math.isfinite(a.threshold)):
        fail(f"--threshold {a.threshold} must be a non-negative number")
    same = tuple(k for k in SAME if k != a.vary)

    paths = []
    for p in a.inputs:
        if os.path.isdir(p):
            found = sorted(glob.glob(os.path.join(p, glob.escape(a.prefix) + "*.json")))
            if not found:
                fail(f"{p}: no {a.prefix}*.json in this folder")
            paths += found
        else:
            paths.append(p)
    runs = {}
    for p in paths:
        name = setting_name(p, a.prefix)
        if name in runs:
            fail(f"{p}: a second file for setting '{name}'")
        runs[name] = load(p)
    if a.base not in runs:
        fail(f"no file for the base setting '{a.base}' (settings: {', '.join(sorted(runs))})")
    base = runs[a.base]
    for name, r in runs.items():
        if r["commit"] != base["commit"] and a.vary != "commit":
            fail(f"setting '{name}' ran at commit {r['commit'] or '?'}, the base at {base['commit'] or '?'}")
        for k in same:
            if r["same"][k] != base["same"][k]:
                fail(f"setting '{name}' has {k} = {r['same'][k]!r}, the base {base['same'][k]!r}")
    repeats = sorted(n for n in runs if re.fullmatch(re.escape(a.base) + r"[0-9]+", n))

    table = []
    weights = "weights varying" if a.vary == "weights" else f"weights {base['same']['weights']}"
    commits = "commits varying" if a.vary == "commit" else f"commit {base['commit'][:12] or '?'}"
    print(f"{commits}, {base['same']['config']}, {weights}, "
          f"base '{a.base}'" + (f", repeated as {', '.join(repeats)}" if repeats else ", not repeated (noise unknown)"))
    for key in sorted(base["rows"]):
        bmed, floor = base["rows"][key]
        noise = None
        if repeats:
            noise = max(abs(runs[n]["rows"][key][0] / bmed - 1) for n in repeats if key in runs[n]["rows"])
        bar = max(a.threshold, 2 * noise) if noise is not None else a.threshold
        print(f"\nbatch {key[0]}, {key[1]}: base {bmed:.3f} ms, floor {floor:.3f} ms"
              + (f", noise {100 * noise:.2f} %" if noise is not None else "") + f", bar {100 * bar:.2f} %")
        print(f"  {'setting':<12} {'median ms':>10} {'x floor':>8} {'change':>8}  {'verdict':<14} variants")
        for name in sorted(runs, key=lambda n: (n != a.base, n in repeats, n)):
            r = runs[name]
            if key not in r["rows"]:
                continue
            med = r["rows"][key][0]
            ch = med / bmed - 1
            if name == a.base or name in repeats:
                verdict = "base" if name == a.base else "repeat"
            elif abs(ch) <= bar:
                verdict = "same"
            elif noise is None:
                verdict = "noise unknown"
            else:
                verdict = "faster" if ch < 0 else "slower"
            var = changes(r["variants"], base["variants"])
            if a.vary:
                shown = (r["commit"][:12] or "?") if a.vary == "commit" else r["same"][a.vary]
                var = f"{a.vary}={shown}" + ("" if var == "(the base's)" else "," + var)
            own_floor = r["rows"][key][1]
            # Varying the weights, each format over its own floor (they read different bytes).
            over = own_floor if a.vary == "weights" else floor
            note = (f"  (own floor {own_floor:.3f} ms)" if abs(own_floor / floor - 1) > 0.005 else "")
            print(f"  {name:<12} {med:>10.3f} {med / over:>8.2f} {100 * ch:>+7.2f}%  {verdict:<14} {var}{note}")
            table.append({"batch": key[0], "mode": key[1], "setting": name, "median_ms": med, "floor_ms": floor,
                          "own_floor_ms": own_floor, "ratio_to_floor": med / over, "change": ch, "noise": noise,
                          "bar": bar, "verdict": verdict, "variants": var})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"commit": base["commit"], "base": a.base, "vary": a.vary, "rows": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
