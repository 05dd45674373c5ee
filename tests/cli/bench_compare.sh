#!/usr/bin/env bash
# scripts/bench_compare.py (the nightly job's comparison) on hand-made Google Benchmark JSON:
# medians from repetitions or from iterations, units, ratios, the noise rule, exit codes.
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cmp=scripts/bench_compare.py
# Old: BM_a 3 repetitions 100/100/102 ns (median aggregate 100), BM_b 200 ns in us units, BM_noisy
# 100/140 ns, BM_cold 866/655/657 ms (one cold repetition), BM_gone, BM_err. New: BM_a 130 ns
# (+30 %: regression), BM_b 0.15 us (0.75: improvement), BM_noisy 150 ns (+25 %, inside its
# noise: 2 x MAD 20 / median 120 = 33 %: same), BM_cold 860 ms (+31 %: the cold repetition does
# not widen the noise: regression), BM_err errored (a regression), BM_added.
cat > "$tmp/old.json" <<'J'
{"context": {}, "benchmarks": [
 {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "real_time": 102, "time_unit": "ns"},
 {"name": "BM_a_median", "run_name": "BM_a", "run_type": "aggregate", "aggregate_name": "median", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_a_mean", "run_name": "BM_a", "run_type": "aggregate", "aggregate_name": "mean", "real_time": 100.7, "time_unit": "ns"},
 {"name": "BM_b", "run_name": "BM_b", "run_type": "iteration", "real_time": 0.2, "time_unit": "us"},
 {"name": "BM_noisy", "run_name": "BM_noisy", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_noisy", "run_name": "BM_noisy", "run_type": "iteration", "real_time": 140, "time_unit": "ns"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 866, "time_unit": "ms"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 655, "time_unit": "ms"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 657, "time_unit": "ms"},
 {"name": "BM_err", "run_type": "iteration", "real_time": 10, "time_unit": "ns"},
 {"name": "BM_gone", "run_name": "BM_gone", "run_type": "iteration", "real_time": 5, "time_unit": "ms"}]}
J
cat > "$tmp/new.json" <<'J'
{"context": {}, "benchmarks": [
 {"name": "BM_a", "run_type": "iteration", "real_time": 130, "time_unit": "ns"},
 {"name": "BM_b", "run_type": "iteration", "real_time": 0.15, "time_unit": "us"},
 {"name": "BM_noisy", "run_type": "iteration", "real_time": 150, "time_unit": "ns"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 860, "time_unit": "ms"},
 {"name": "BM_err", "run_type": "iteration", "real_time": 0, "time_unit": "ns", "error_occurred": true, "error_message": "CUDA out of memory"},
 {"name": "BM_added", "run_type": "iteration", "real_time": 1, "time_unit": "s"}]}
J
set +e
python3 $cmp "$tmp/old.json" "$tmp/new.json" --json "$tmp/cmp.json" > "$tmp/out.txt"; rc=$?
set -e
cat "$tmp/out.txt"
[ $rc = 3 ] || fail "exit $rc, expected 3 (a regression)"
python3 - "$tmp/cmp.json" <<'PY'
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))["rows"]}
assert abs(rows["BM_a"]["ratio"] - 1.30) < 1e-9 and rows["BM_a"]["verdict"] == "regression", rows["BM_a"]
assert abs(rows["BM_b"]["ratio"] - 0.75) < 1e-9 and rows["BM_b"]["verdict"] == "improvement", rows["BM_b"]
# BM_noisy: old median 120 (of 100, 140), new 150: 1.25, inside its noise 2 * 20 / 120.
assert abs(rows["BM_noisy"]["ratio"] - 1.25) < 1e-9 and abs(rows["BM_noisy"]["noise"] - 40 / 120) < 1e-9, rows["BM_noisy"]
assert rows["BM_noisy"]["verdict"] == "same", rows["BM_noisy"]
# BM_cold: old median 657 ms, noise 2 * 2 / 657; new 860: a regression despite the 866 outlier.
assert abs(rows["BM_cold"]["ratio"] - 860 / 657) < 1e-9 and rows["BM_cold"]["noise"] < 0.01, rows["BM_cold"]
assert rows["BM_cold"]["verdict"] == "regression", rows["BM_cold"]
assert rows["BM_err"]["verdict"] == "failed in new: CUDA out of memory", rows["BM_err"]
assert rows["BM_gone"]["verdict"] == "only in old" and rows["BM_added"]["verdict"] == "only in new"
PY
grep -q "3 regression(s) beyond 10%" "$tmp/out.txt" || fail "summary line"
# A looser threshold: only the errored benchmark is left, exit 3 still.
set +e
python3 $cmp "$tmp/old.json" "$tmp/new.json" --threshold 0.5 > "$tmp/loose.txt"; rc=$?
set -e
[ $rc = 3 ] && grep -q "1 regression(s) beyond 50%" "$tmp/loose.txt" || { cat "$tmp/loose.txt"; fail "threshold 0.5"; }
# Unusable input: exit 2 and the file named.
echo '{"benchmarks": [{"name": "x"}]}' > "$tmp/bad.json"
set +e
python3 $cmp "$tmp/old.json" "$tmp/bad.json" 2> "$tmp/err.txt"; rc=$?
python3 $cmp "$tmp/old.json" "$tmp/missing.json" 2>> "$tmp/err.txt"; rc2=$?
set -e
[ $rc = 2 ] && [ $rc2 = 2 ] || fail "exit $rc / $rc2 on bad input, expected 2"
grep -q "bad.json" "$tmp/err.txt" && grep -q "missing.json" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "messages"; }
echo "bench_compare: ok"
