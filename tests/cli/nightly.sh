#!/usr/bin/env bash
# scripts/nightly.sh end to end, small: two nights into a scratch folder (the benchmarks of this
# build, tiny traces, 2 repetitions), the second compared with the first; bad setups refused
# without leaving a night behind.
set -euo pipefail
bin=$1
build=$(cd "$(dirname "$bin")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# The policy check runs on the CPU reference (POLICY_CHECK=cpu) with a gate no CPU noise can trip.
night() { BUILD_DIR=$build OUT_ROOT=$tmp/nights REPS=${REPS:-2} STREAMLAB_BENCH_EVENTS=20000 POLICY_CHECK=${POLICY_CHECK:-cpu} \
          POLICY_PCT=1000 POLICY_REPS=2 bash scripts/nightly.sh; }
if ! [ -x "$build/bench_profiler" ]; then echo "nightly: no benchmarks in this build (STREAMLAB_BENCH=OFF): skipped"; exit 0; fi
set +e
night > "$tmp/n1.log" 2>&1; rc1=$?
sleep 1
night > "$tmp/n2.log" 2>&1; rc2=$?
set -e
[ $rc1 = 0 ] || { tail -20 "$tmp/n1.log"; fail "first night exited $rc1"; }
[ $rc2 = 0 ] || [ $rc2 = 3 ] || { tail -20 "$tmp/n2.log"; fail "second night exited $rc2"; }  # 3: noise on a busy machine
grep -q "nothing to compare with" "$tmp/n1.log" || fail "the first night compared with something"
grep -q "^== compared with $tmp/nights/" "$tmp/n2.log" || { tail -20 "$tmp/n2.log"; fail "the second night did not compare"; }
grep -q "^== policy check: passed" "$tmp/n1.log" || { tail -20 "$tmp/n1.log"; fail "the policy check did not run"; }
grep -q "shared night over night: no regression" "$tmp/n2.log" || { tail -30 "$tmp/n2.log"; fail "no night-over-night policy compare"; }
nights=("$tmp"/nights/*)
[ ${#nights[@]} = 2 ] || fail "expected 2 nights, found ${#nights[@]}: ${nights[*]}"
# bench_timeline (the viewer's frame cost) exists only in builds with the viewer (STREAMLAB_UI).
benches=bench_profiler
[ -x "$build/bench_timeline" ] && benches="$benches bench_timeline"
python3 - "${nights[1]}" "$(git rev-parse HEAD)" "$benches" <<'PY'
import json, os, sys
d, head, benches = sys.argv[1:]
p = json.load(open(os.path.join(d, "provenance.json")))
assert p["commit"].startswith(head), (p["commit"], head)
assert p["STREAMLAB_BENCH_EVENTS"] == "20000" and p["cores"] >= 1, p
for name in benches.split():
    j = json.load(open(os.path.join(d, name + ".json")))
    runs = [b for b in j["benchmarks"] if b.get("run_type") == "iteration"]
    medians = [b for b in j["benchmarks"] if b.get("aggregate_name") == "median"]
    assert runs and medians and all(b["repetitions"] == 2 for b in runs), name
    c = json.load(open(os.path.join(d, "compare_%s.json" % name)))
    assert {r["name"] for r in c["rows"]} == {b["run_name"] for b in runs}, name
    assert all("ratio" in r and r["ratio"] > 0 for r in c["rows"]), c["rows"]
print("nights:", ", ".join(sorted(os.listdir(os.path.dirname(d)))))
PY
# A night whose benchmark fails: kept, marked failed, exit 1; the next night does not use it as
# its baseline.
mkdir -p "$tmp/fake"
printf '#!/bin/sh\necho "bench_profiler: error: broken on purpose" >&2\nexit 1\n' > "$tmp/fake/bench_profiler"
chmod +x "$tmp/fake/bench_profiler"
set +e
BIN_DIR=$tmp/fake OUT_ROOT=$tmp/failed REPS=2 bash scripts/nightly.sh > "$tmp/f1.log" 2>&1; rc=$?
set -e
[ $rc = 1 ] || { cat "$tmp/f1.log"; fail "a failing benchmark exited $rc, expected 1"; }
failed_night=$(ls -d "$tmp"/failed/*)
[ "$(cat "$failed_night/status")" = "failed: bench_profiler" ] || fail "status: $(cat "$failed_night/status")"
sleep 1
BIN_DIR=$tmp/fake OUT_ROOT=$tmp/failed REPS=2 bash scripts/nightly.sh > "$tmp/f2.log" 2>&1 || true
grep -q "skipped $failed_night as a baseline: failed: bench_profiler" "$tmp/f2.log" || { cat "$tmp/f2.log"; fail "a failed night was a baseline"; }
# A night killed part-way leaves nothing, not even its .part folder.
printf '#!/bin/sh\nsleep 2\n' > "$tmp/fake/bench_profiler"
BIN_DIR=$tmp/fake OUT_ROOT=$tmp/killed REPS=2 bash scripts/nightly.sh > "$tmp/k.log" 2>&1 &
pid=$!
for i in $(seq 50); do ls -d "$tmp"/killed/*.part >/dev/null 2>&1 && break; sleep 0.1; done
ls -d "$tmp"/killed/*.part >/dev/null 2>&1 || fail "the night to kill never started"
kill -TERM $pid; wait $pid 2>/dev/null || true
[ -z "$(ls -A "$tmp/killed")" ] || fail "a killed night left $(ls "$tmp/killed")"
# A BASELINE that is not a night: refused.
set +e
BASELINE=$tmp/nowhere night > "$tmp/bad0.log" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q "is not a night's folder" "$tmp/bad0.log" || { cat "$tmp/bad0.log"; fail "a bad BASELINE was accepted"; }

# Bad setups: exit 2, no third night, no leftover .part folder.
set +e
REPS=abc night > "$tmp/bad1.log" 2>&1; rc=$?
BUILD_DIR=$tmp/none OUT_ROOT=$tmp/nights bash scripts/nightly.sh > "$tmp/bad2.log" 2>&1; rc2=$?
set -e
[ $rc = 2 ] && [ $rc2 = 2 ] || fail "bad setups exited $rc / $rc2, expected 2"
grep -q "REPS must be" "$tmp/bad1.log" && grep -q "no build in" "$tmp/bad2.log" || fail "messages"
[ "$(ls "$tmp/nights" | wc -l)" = 2 ] || fail "a refused night left something: $(ls "$tmp/nights")"
# A night with other settings is not compared with these.
STREAMLAB_BENCH_EVENTS=30000 BUILD_DIR=$build OUT_ROOT=$tmp/nights REPS=2 bash scripts/nightly.sh > "$tmp/n3.log" 2>&1 || true
grep -q "not compared with .*STREAMLAB_BENCH_EVENTS" "$tmp/n3.log" || { tail -5 "$tmp/n3.log"; fail "compared across settings"; }
echo "nightly: ok"
