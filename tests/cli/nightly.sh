#!/usr/bin/env bash
# scripts/nightly.sh end to end, small: two nights into a scratch folder (the benchmarks of this
# build, tiny traces, 2 repetitions), the second compared with the first; bad setups refused
# without leaving a night behind; nights stopped by SIGTERM / SIGINT (the running benchmark
# stopped, nothing left) or killed outright (their .part folder removed by the next night, unless
# a night is running).
#
# $1: the streamlab binary; the benchmarks are those of its build folder, which the nights bring
# up to date (cmake --build). BIN_DIR=<folder> instead runs the programs there as they are, with
# no build: for a build tree that is not ours to rebuild.
set -euo pipefail
bin=$1
build=$(cd "$(dirname "$bin")" && pwd)
bin_dir=${BIN_DIR:-}; unset BIN_DIR  # only for the real nights; the fake ones set their own
# What the real nights run: the build ($1's) or BIN_DIR's programs.
if [ -n "$bin_dir" ]; then build=$(cd "$bin_dir" && pwd); programs=(BIN_DIR="$build"); else programs=(BUILD_DIR="$build"); fi
tmp=$(mktemp -d)
# Fake benchmarks write their pids to $tmp/pids/: none outlives the test, even a failed one.
mkdir "$tmp/pids"
trap 'kill -KILL $(cat "$tmp"/pids/* 2>/dev/null) 2>/dev/null || true; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# The policy check runs on the CPU reference (POLICY_CHECK=cpu) with a gate no CPU noise can trip.
# The nights' folder has a space in its name: the baseline search split such names apart and never
# compared a night.
nights_dir="$tmp/the nights"
night() { env "${programs[@]}" OUT_ROOT="$nights_dir" REPS=${REPS:-2} STREAMLAB_BENCH_EVENTS=20000 POLICY_CHECK=${POLICY_CHECK:-cpu} \
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
grep -qF "== compared with $nights_dir/" "$tmp/n2.log" || { tail -20 "$tmp/n2.log"; fail "the second night did not compare"; }
grep -q "^== policy check: passed" "$tmp/n1.log" || { tail -20 "$tmp/n1.log"; fail "the policy check did not run"; }
grep -q "shared night over night: no regression" "$tmp/n2.log" || { tail -30 "$tmp/n2.log"; fail "no night-over-night policy compare"; }
nights=("$nights_dir"/*)
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
print("nights:", ", ".join(sorted(n for n in os.listdir(os.path.dirname(d)) if not n.startswith("."))))
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
# Nights stopped part-way. The fake benchmark (FAKE=hang) starts a child of its own and waits:
# its pid and its child's are in $tmp/pids/<night>.bench and .child.
cat > "$tmp/fake/bench_profiler" <<'SH'
#!/bin/sh
if [ "${FAKE:-}" != hang ]; then echo "bench_profiler: error: broken on purpose" >&2; exit 1; fi
sleep 60 & echo $! > "$FAKE_PIDS.child"
echo $$ > "$FAKE_PIDS.bench"
wait
SH
chmod +x "$tmp/fake/bench_profiler"
# alive PID: the process runs (a zombie no init reaps counts as gone).
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${s#Z}" = "$s" ]; }
# gone PID...: each ends within 10 s.
gone() { local p i; for p; do for i in $(seq 100); do alive "$p" || break; sleep 0.1; done; ! alive "$p" || return 1; done; }
# hang NAME OUT_ROOT: starts a night whose benchmark hangs, in the background ($! its pid), its
# output in $tmp/NAME.log; returns once the benchmark runs. With job control (set -m), as from a
# terminal or cron: a script started with `&` by a non-interactive shell has SIGINT ignored, which
# no trap can undo.
hang() {
  set -m
  FAKE=hang FAKE_PIDS=$tmp/pids/$1 BIN_DIR=$tmp/fake OUT_ROOT=$2 REPS=3 bash scripts/nightly.sh > "$tmp/$1.log" 2>&1 &
  set +m
  local i; for i in $(seq 100); do [ -s "$tmp/pids/$1.bench" ] && [ -s "$tmp/pids/$1.child" ] && return; sleep 0.1; done
  cat "$tmp/$1.log"; fail "the night $1 never started its benchmark"
}
# stopped SIGNAL STATUS: a night stopped by SIGNAL exits STATUS, stops its benchmark and the
# benchmark's child, says so, and leaves nothing behind (the lock file aside).
stopped() {
  local sig=$1 want=$2 name=stop_$1 pid rc
  hang "$name" "$tmp/$name"; pid=$!
  ls -d "$tmp/$name"/*.part > /dev/null 2>&1 || fail "$sig: no .part folder while the benchmark runs"
  kill -"$sig" "$pid"
  set +e; wait "$pid"; rc=$?; set -e
  [ "$rc" = "$want" ] || { cat "$tmp/$name.log"; fail "$sig: exit $rc, expected $want"; }
  gone "$(cat "$tmp/pids/$name.bench")" "$(cat "$tmp/pids/$name.child")" || { cat "$tmp/$name.log"; fail "$sig: the benchmark outlived the night"; }
  grep -q "^nightly: SIG$sig: stopped bench_profiler (process group" "$tmp/$name.log" \
    && grep -q "^nightly: SIG$sig: removed the unfinished night .*\.part" "$tmp/$name.log" || { cat "$tmp/$name.log"; fail "$sig: messages"; }
  [ "$(ls -A "$tmp/$name")" = .nightly.lock ] || fail "$sig: the stopped night left $(ls -A "$tmp/$name")"
}
stopped TERM 143
stopped INT 130
# A night killed outright (SIGKILL) leaves its .part folder (and its benchmark running, which
# holds the lock): while that runs, the next night leaves the folder alone; once it is gone, the
# next night removes it, and only it: not another host's, nor a folder of another name.
hang killed "$tmp/killed"; pid=$!
killed_part=$(ls -d "$tmp"/killed/*.part)
kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
alive "$(cat "$tmp/pids/killed.bench")" || fail "the benchmark of the SIGKILLed night did not outlive it (the test needs it to)"
mkdir "$tmp/killed/2020-01-01T000000Z-otherhost.part" "$tmp/killed/notes.part"
set +e
BIN_DIR=$tmp/fake OUT_ROOT=$tmp/killed REPS=3 bash scripts/nightly.sh > "$tmp/k2.log" 2>&1; rc=$?
set -e
[ $rc = 1 ] || { cat "$tmp/k2.log"; fail "the night beside a running one exited $rc, expected 1 (its benchmark fails)"; }
grep -q "another night is running under $tmp/killed .*stale .part folders left alone" "$tmp/k2.log" || { cat "$tmp/k2.log"; fail "no word of the running night"; }
[ -d "$killed_part" ] || fail "the .part folder of a night still running was removed"
kill -KILL "$(cat "$tmp/pids/killed.bench")" "$(cat "$tmp/pids/killed.child")"
gone "$(cat "$tmp/pids/killed.bench")" "$(cat "$tmp/pids/killed.child")" || fail "could not end the orphaned benchmark"
sleep 1  # the next night's name differs from the last one's by the second
set +e
BIN_DIR=$tmp/fake OUT_ROOT=$tmp/killed REPS=3 bash scripts/nightly.sh > "$tmp/k3.log" 2>&1; rc=$?
set -e
[ $rc = 1 ] || { cat "$tmp/k3.log"; fail "the night after the killed one exited $rc, expected 1"; }
grep -q "^nightly: removed $killed_part, left by a night killed before it finished" "$tmp/k3.log" || { cat "$tmp/k3.log"; fail "no word of the stale .part removed"; }
[ ! -e "$killed_part" ] || fail "the stale $killed_part was left"
[ -d "$tmp/killed/2020-01-01T000000Z-otherhost.part" ] && [ -d "$tmp/killed/notes.part" ] || fail "removed a .part folder not ours: $(ls "$tmp/killed")"
[ "$(ls -d "$tmp"/killed/*.part | wc -l)" = 2 ] || fail "left: $(ls "$tmp/killed")"
# A BASELINE that is not a night: refused.
set +e
BASELINE=$tmp/nowhere night > "$tmp/bad0.log" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q "is not a night's folder" "$tmp/bad0.log" || { cat "$tmp/bad0.log"; fail "a bad BASELINE was accepted"; }

# Bad setups: exit 2, no third night, no leftover .part folder.
set +e
REPS=abc night > "$tmp/bad1.log" 2>&1; rc=$?
BUILD_DIR=$tmp/none OUT_ROOT="$nights_dir" bash scripts/nightly.sh > "$tmp/bad2.log" 2>&1; rc2=$?
set -e
[ $rc = 2 ] && [ $rc2 = 2 ] || fail "bad setups exited $rc / $rc2, expected 2"
grep -q "REPS must be" "$tmp/bad1.log" && grep -q "no build in" "$tmp/bad2.log" || fail "messages"
[ "$(ls "$nights_dir" | wc -l)" = 2 ] || fail "a refused night left something: $(ls "$nights_dir")"
# A night with other settings is not compared with these.
STREAMLAB_BENCH_EVENTS=30000 env "${programs[@]}" OUT_ROOT="$nights_dir" REPS=2 bash scripts/nightly.sh > "$tmp/n3.log" 2>&1 || true
grep -q "not compared with .*STREAMLAB_BENCH_EVENTS" "$tmp/n3.log" || { tail -5 "$tmp/n3.log"; fail "compared across settings"; }
echo "nightly: ok"
