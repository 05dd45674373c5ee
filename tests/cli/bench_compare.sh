#!/usr/bin/env bash
# scripts/bench_compare.py (the nightly job's comparison) on hand-made Google Benchmark JSON:
# medians from repetitions or from iterations, units, ratios, the noise rule (and its minimum of
# repetitions), benchmarks missing or new, unusable input, exit codes. Needs only python3 ($1,
# the streamlab binary, is not used).
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cmp=scripts/bench_compare.py
# cmp_rc OUT ARGS...: runs the comparison, stdout to $tmp/OUT.txt, stderr to $tmp/OUT.err; its
# exit status in $rc.
cmp_rc() { local out=$1; shift; set +e; python3 $cmp "$@" > "$tmp/$out.txt" 2> "$tmp/$out.err"; rc=$?; set -e; }
# it NAME NS...: iteration entries of a benchmark, one per repetition, in ns.
it() { local n=$1 t; shift; for t in "$@"; do printf ' {"name": "%s", "run_name": "%s", "run_type": "iteration", "real_time": %s, "time_unit": "ns"},\n' "$n" "$n" "$t"; done; }
# doc FILE: a benchmark file from the entries on stdin (the last comma dropped).
doc() { { echo '{"context": {}, "benchmarks": ['; sed '$ s/,$//'; echo ']}'; } > "$1"; }

# Old: BM_a 3 repetitions 100/100/102 ns (median aggregate 100), BM_b 200 ns in us units, BM_noisy
# 100/140/120 ns, BM_cold 866/655/657 ms (one cold repetition), BM_gone, BM_err, and BM_one /
# BM_two / BM_fast1 measured with 1 or 2 repetitions. New: BM_a 130 ns (+30 %: regression),
# BM_b 0.15 us (0.75: improvement; its stddev aggregate is 0, which is no broken time), BM_noisy
# 150 ns (+25 %, inside its noise: 2 x MAD 20 / median 120 = 33 %: same), BM_cold 860 ms (+31 %:
# the cold repetition does not widen the noise: regression), BM_err errored (a regression, its
# time 0 not checked), BM_gone missing (counted as a regression), BM_added (new, not a failure),
# BM_one 117 -> 131 ns in one repetition (+12 %: noise unknown, not a regression), BM_two +5 % in
# two (same: inside the threshold whatever the noise), BM_fast1 -20 % in one (faster, noise
# unknown).
cat > "$tmp/old.json" <<'J'
{"context": {}, "benchmarks": [
 {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "real_time": 102, "time_unit": "ns"},
 {"name": "BM_a_median", "run_name": "BM_a", "run_type": "aggregate", "aggregate_name": "median", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_a_mean", "run_name": "BM_a", "run_type": "aggregate", "aggregate_name": "mean", "real_time": 100.7, "time_unit": "ns"},
 {"name": "BM_b", "run_name": "BM_b", "run_type": "iteration", "real_time": 0.2, "time_unit": "us"},
 {"name": "BM_b", "run_name": "BM_b", "run_type": "iteration", "real_time": 0.2, "time_unit": "us"},
 {"name": "BM_b", "run_name": "BM_b", "run_type": "iteration", "real_time": 0.2, "time_unit": "us"},
 {"name": "BM_noisy", "run_name": "BM_noisy", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_noisy", "run_name": "BM_noisy", "run_type": "iteration", "real_time": 140, "time_unit": "ns"},
 {"name": "BM_noisy", "run_name": "BM_noisy", "run_type": "iteration", "real_time": 120, "time_unit": "ns"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 866, "time_unit": "ms"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 655, "time_unit": "ms"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 657, "time_unit": "ms"},
 {"name": "BM_err", "run_type": "iteration", "real_time": 10, "time_unit": "ns"},
 {"name": "BM_one", "run_type": "iteration", "real_time": 117, "time_unit": "ns"},
 {"name": "BM_two", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_two", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_fast1", "run_type": "iteration", "real_time": 100, "time_unit": "ns"},
 {"name": "BM_gone", "run_name": "BM_gone", "run_type": "iteration", "real_time": 5, "time_unit": "ms"}]}
J
cat > "$tmp/new.json" <<'J'
{"context": {}, "benchmarks": [
 {"name": "BM_a", "run_type": "iteration", "real_time": 130, "time_unit": "ns"},
 {"name": "BM_a", "run_type": "iteration", "real_time": 129, "time_unit": "ns"},
 {"name": "BM_a", "run_type": "iteration", "real_time": 131, "time_unit": "ns"},
 {"name": "BM_b", "run_type": "iteration", "real_time": 0.15, "time_unit": "us"},
 {"name": "BM_b", "run_type": "iteration", "real_time": 0.15, "time_unit": "us"},
 {"name": "BM_b", "run_type": "iteration", "real_time": 0.15, "time_unit": "us"},
 {"name": "BM_b_stddev", "run_name": "BM_b", "run_type": "aggregate", "aggregate_name": "stddev", "real_time": 0, "time_unit": "us"},
 {"name": "BM_noisy", "run_type": "iteration", "real_time": 150, "time_unit": "ns"},
 {"name": "BM_noisy", "run_type": "iteration", "real_time": 150, "time_unit": "ns"},
 {"name": "BM_noisy", "run_type": "iteration", "real_time": 150, "time_unit": "ns"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 860, "time_unit": "ms"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 860, "time_unit": "ms"},
 {"name": "BM_cold", "run_type": "iteration", "real_time": 861, "time_unit": "ms"},
 {"name": "BM_err", "run_type": "iteration", "real_time": 0, "time_unit": "ns", "error_occurred": true, "error_message": "CUDA out of memory"},
 {"name": "BM_one", "run_type": "iteration", "real_time": 131, "time_unit": "ns"},
 {"name": "BM_two", "run_type": "iteration", "real_time": 105, "time_unit": "ns"},
 {"name": "BM_two", "run_type": "iteration", "real_time": 105, "time_unit": "ns"},
 {"name": "BM_fast1", "run_type": "iteration", "real_time": 80, "time_unit": "ns"},
 {"name": "BM_added", "run_type": "iteration", "real_time": 1, "time_unit": "s"}]}
J
cmp_rc out "$tmp/old.json" "$tmp/new.json" --json "$tmp/cmp.json"
cat "$tmp/out.txt" "$tmp/out.err"
[ $rc = 3 ] || fail "exit $rc, expected 3 (a regression)"
python3 - "$tmp/cmp.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = {r["name"]: r for r in doc["rows"]}
assert abs(rows["BM_a"]["ratio"] - 1.30) < 1e-9 and rows["BM_a"]["verdict"] == "regression", rows["BM_a"]
assert abs(rows["BM_b"]["ratio"] - 0.75) < 1e-9 and rows["BM_b"]["verdict"] == "improvement", rows["BM_b"]
# BM_noisy: old median 120 (of 100, 120, 140), new 150: 1.25, inside its noise 2 * 20 / 120.
assert abs(rows["BM_noisy"]["ratio"] - 1.25) < 1e-9 and abs(rows["BM_noisy"]["noise"] - 40 / 120) < 1e-9, rows["BM_noisy"]
assert rows["BM_noisy"]["verdict"] == "same", rows["BM_noisy"]
# BM_cold: old median 657 ms, noise 2 * 2 / 657; new 860: a regression despite the 866 outlier.
assert abs(rows["BM_cold"]["ratio"] - 860 / 657) < 1e-9 and rows["BM_cold"]["noise"] < 0.01, rows["BM_cold"]
assert rows["BM_cold"]["verdict"] == "regression", rows["BM_cold"]
assert rows["BM_err"]["verdict"] == "failed in new: CUDA out of memory", rows["BM_err"]
assert rows["BM_gone"]["verdict"] == "missing in new" and rows["BM_added"]["verdict"] == "new benchmark", rows
# One repetition: +12 % is beyond 10 % but the noise is unknown: neither a regression nor "same".
one = rows["BM_one"]
assert abs(one["ratio"] - 131 / 117) < 1e-9 and one["noise"] is None and one["verdict"] == "slower, noise unknown", one
assert one["old_repetitions"] == 1 and one["new_repetitions"] == 1, one
assert rows["BM_two"]["verdict"] == "same" and rows["BM_two"]["noise"] is None, rows["BM_two"]
assert rows["BM_fast1"]["verdict"] == "faster, noise unknown", rows["BM_fast1"]
s = doc["summary"]
assert s["regressions"] == ["BM_a", "BM_cold", "BM_err (failed in new)"], s
assert s["missing_in_new"] == ["BM_gone"] and s["new"] == ["BM_added"], s
assert s["noise_unknown"] == ["BM_fast1", "BM_one"] and s["exit_status"] == 3 and not s["strict"], s
PY
grep -q "^3 regression(s) beyond 10%" "$tmp/out.txt" || fail "summary line"
grep -q "^1 benchmark(s) missing in new, counted as regressions: BM_gone" "$tmp/out.txt" || fail "missing line"
grep -q "^1 new benchmark(s), nothing to compare: BM_added" "$tmp/out.txt" || fail "new line"
grep -q "^2 benchmark(s) not judged, noise unknown: changed by more than 10% with fewer than 3 repetitions on a side (1 slower, 1 faster)" \
  "$tmp/out.txt" || fail "noise unknown line"
# A looser threshold: the errored and the missing benchmark are left, exit 3 still; nothing is
# beyond 50 %, so nothing is left unjudged.
cmp_rc loose "$tmp/old.json" "$tmp/new.json" --threshold 0.5
[ $rc = 3 ] && grep -q "^1 regression(s) beyond 50% .*: BM_err (failed in new)$" "$tmp/loose.txt" \
  && grep -q "missing in new" "$tmp/loose.txt" && ! grep -q "not judged" "$tmp/loose.txt" || { cat "$tmp/loose.txt"; fail "threshold 0.5"; }

# A benchmark missing in the new night, alone, fails (exit 3); one only in the new night does not.
{ it BM_x 100 101 99; it BM_y 50 50 51; } | doc "$tmp/xy.json"
{ it BM_x 100 100 100; } | doc "$tmp/x.json"
{ it BM_x 100 100 100; it BM_z 7 7 7; } | doc "$tmp/xz.json"
cmp_rc gone "$tmp/xy.json" "$tmp/x.json"
[ $rc = 3 ] && grep -q "^BM_y .* missing in new" "$tmp/gone.txt" && grep -q "^0 regression(s)" "$tmp/gone.txt" \
  && grep -q "^1 benchmark(s) missing in new" "$tmp/gone.txt" || { cat "$tmp/gone.txt"; fail "a missing benchmark passed (exit $rc)"; }
cmp_rc added "$tmp/x.json" "$tmp/xz.json"
[ $rc = 0 ] && grep -q "^BM_z .* new benchmark" "$tmp/added.txt" || { cat "$tmp/added.txt"; fail "a new benchmark (exit $rc)"; }

# One repetition a side (REPS=1): +12 % on 117 ns is not judged: exit 0, said in the summary;
# --strict fails it (exit 3), but not a faster one.
it BM_one 117 | doc "$tmp/one_old.json"; it BM_one 131 | doc "$tmp/one_new.json"; it BM_one 90 | doc "$tmp/one_fast.json"
cmp_rc one "$tmp/one_old.json" "$tmp/one_new.json"
[ $rc = 0 ] && grep -q "^BM_one .* ? *slower, noise unknown" "$tmp/one.txt" && grep -q "^0 regression(s)" "$tmp/one.txt" \
  && grep -q "^1 benchmark(s) not judged, noise unknown.*fewer than 3 repetitions" "$tmp/one.txt" \
  || { cat "$tmp/one.txt"; fail "one repetition a side: exit $rc, expected 0 with the benchmark not judged"; }
cmp_rc strict "$tmp/one_old.json" "$tmp/one_new.json" --strict
[ $rc = 3 ] && grep -q "strict: the slower ones fail" "$tmp/strict.txt" || { cat "$tmp/strict.txt"; fail "--strict: exit $rc, expected 3"; }
cmp_rc strict_fast "$tmp/one_old.json" "$tmp/one_fast.json" --strict
[ $rc = 0 ] && grep -q "faster, noise unknown" "$tmp/strict_fast.txt" || { cat "$tmp/strict_fast.txt"; fail "--strict, faster: exit $rc"; }
# Three repetitions a side are enough: the same +12 % with no spread is a regression.
it BM_one 117 117 117 | doc "$tmp/three_old.json"; it BM_one 131 131 131 | doc "$tmp/three_new.json"
cmp_rc three "$tmp/three_old.json" "$tmp/three_new.json"
[ $rc = 3 ] && grep -q "^BM_one .* regression" "$tmp/three.txt" || { cat "$tmp/three.txt"; fail "three repetitions: exit $rc"; }

# Unusable input: exit 2, no traceback, a message naming the file (and the benchmark).
# unusable FILE SIDE PATTERN: FILE as the old (SIDE=old) or new file against a good one.
unusable() {
  local f=$1 side=$2 pattern=$3
  if [ "$side" = old ]; then cmp_rc bad "$f" "$tmp/x.json"; else cmp_rc bad "$tmp/x.json" "$f"; fi
  [ $rc = 2 ] && ! grep -q Traceback "$tmp/bad.err" && grep -q "$(basename "$f")" "$tmp/bad.err" \
    && grep -q -- "$pattern" "$tmp/bad.err" || { cat "$tmp/bad.txt" "$tmp/bad.err"; fail "$(basename "$f") ($side): exit $rc, expected 2 with '$pattern'"; }
}
echo '{"benchmarks": [{"name": "x"}]}' > "$tmp/no_time.json"; unusable "$tmp/no_time.json" new "benchmark x"
unusable "$tmp/missing.json" new "not a Google Benchmark JSON file"
echo '{"context": {}, "benchmarks": []}' > "$tmp/empty.json"; unusable "$tmp/empty.json" new "no benchmarks"
unusable "$tmp/empty.json" old "no benchmarks"
echo '{"benchmarks": [' > "$tmp/truncated.json"; unusable "$tmp/truncated.json" new "not a Google Benchmark JSON file"
echo '{"benchmarks": null}' > "$tmp/null.json"; unusable "$tmp/null.json" new "not a list"
echo '{"benchmarks": ["BM_x"]}' > "$tmp/strings.json"; unusable "$tmp/strings.json" new "entry 0 is a string, not an object"
echo '{"benchmarks": [{"name": ["BM_x"], "real_time": 1}]}' > "$tmp/listname.json"; unusable "$tmp/listname.json" new "entry 0 has no name"
echo '[1, 2]' > "$tmp/list.json"; unusable "$tmp/list.json" new "not a Google Benchmark JSON file"
printf '\xff\xfe{' > "$tmp/binary.json"; unusable "$tmp/binary.json" new "not a Google Benchmark JSON file"
# Times that are no measurement: 0, below 0, NaN (literal or string), infinite; either side; in a
# repetition or in the median aggregate.
for t in 0 -5 NaN Infinity 1e999; do
  it BM_x "$t" 100 100 | doc "$tmp/time.json"; unusable "$tmp/time.json" new "benchmark BM_x: real time .* is not a positive finite number"
done
it BM_x '"nan"' 100 100 | doc "$tmp/time.json"; unusable "$tmp/time.json" new "benchmark BM_x: no usable real time (TypeError: real_time is a string"
it BM_x 0 0 0 | doc "$tmp/zero_old.json"; unusable "$tmp/zero_old.json" old "benchmark BM_x: real time 0 ns"
{ it BM_x 100 100 100
  echo ' {"name": "BM_x_median", "run_name": "BM_x", "run_type": "aggregate", "aggregate_name": "median", "real_time": NaN, "time_unit": "ns"},'
} | doc "$tmp/nan_median.json"; unusable "$tmp/nan_median.json" new "benchmark BM_x: real time nan"
echo '{"benchmarks": [{"name": "BM_x", "run_type": "aggregate", "aggregate_name": "mean", "real_time": 1}]}' > "$tmp/mean_only.json"
unusable "$tmp/mean_only.json" new "BM_x has neither repetitions nor a median"
# A Complexity() benchmark: its BigO and RMS fits name the family (run_name BM_Sort, no real
# time) and are no benchmarks of their own; the runs BM_Sort/8 and BM_Sort/64 are compared.
cx() { echo '{"benchmarks": [
 {"name": "BM_Sort/8", "run_name": "BM_Sort/8", "run_type": "iteration", "real_time": '"$1"', "time_unit": "ns"},
 {"name": "BM_Sort/64", "run_name": "BM_Sort/64", "run_type": "iteration", "real_time": '"$2"', "time_unit": "ns"},
 {"name": "BM_Sort_BigO", "run_name": "BM_Sort", "run_type": "aggregate", "aggregate_name": "BigO", "cpu_coefficient": 1.2, "real_coefficient": 1.2, "big_o": "N", "time_unit": "ns"},
 {"name": "BM_Sort_RMS", "run_name": "BM_Sort", "run_type": "aggregate", "aggregate_name": "RMS", "rms": 0.01}]}'; }
cx 100 800 > "$tmp/cx_old.json"; cx 101 805 > "$tmp/cx_new.json"
cmp_rc cx "$tmp/cx_old.json" "$tmp/cx_new.json"
[ $rc = 0 ] && grep -q "BM_Sort/64" "$tmp/cx.txt" && ! grep -q "^BM_Sort " "$tmp/cx.txt" || { cat "$tmp/cx.txt" "$tmp/cx.err"; fail "Complexity() aggregates: exit $rc"; }
# Older files without run_name / run_type: NAME_mean, NAME_median, NAME_stddev are BM_X's
# aggregates (the median used), not benchmarks; a stddev of 0 is no time to check.
old_fmt() { echo '{"benchmarks": [
 {"name": "BM_X", "real_time": '"$1"', "time_unit": "ns"}, {"name": "BM_X", "real_time": '"$1"', "time_unit": "ns"},
 {"name": "BM_X_mean", "real_time": '"$1"', "time_unit": "ns"}, {"name": "BM_X_median", "real_time": '"$1"', "time_unit": "ns"},
 {"name": "BM_X_stddev", "real_time": 0, "time_unit": "ns"}]}'; }
old_fmt 100 > "$tmp/of_old.json"; old_fmt 100 > "$tmp/of_new.json"
cmp_rc of "$tmp/of_old.json" "$tmp/of_new.json"
[ $rc = 0 ] && ! grep -q "BM_X_" "$tmp/of.txt" || { cat "$tmp/of.txt" "$tmp/of.err"; fail "old-format aggregates: exit $rc"; }
# A real time that is no number: true is not 1 ns.
it BM_x 100 100 100 | sed 's/"real_time": 100/"real_time": true/' | doc "$tmp/bool.json"
unusable "$tmp/bool.json" new "real_time is a boolean, not a number"
# --json where it cannot be written: refused before comparing (exit 2), not a traceback after.
cmp_rc js "$tmp/x.json" "$tmp/x.json" --json "$tmp/nowhere/out.json"
[ $rc = 2 ] && grep -q "not a file name in a writable folder" "$tmp/js.err" || { cat "$tmp/js.err"; fail "--json into a missing folder: exit $rc"; }
cmp_rc thr "$tmp/x.json" "$tmp/x.json" --threshold nan
[ $rc = 2 ] || fail "--threshold nan: exit $rc"
# --help documents the verdicts and the exit statuses.
python3 $cmp --help > "$tmp/help.txt"
grep -q "missing in new" "$tmp/help.txt" && grep -q "noise unknown" "$tmp/help.txt" && grep -q -- "--strict" "$tmp/help.txt" \
  && grep -q "^Exit status: 0 no regression, 3" "$tmp/help.txt" || { cat "$tmp/help.txt"; fail "--help"; }
echo "bench_compare: ok"
