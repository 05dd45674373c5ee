#!/usr/bin/env bash
# `streamlab sweep` on the CPU reference: the grid, one line per cell, SIGKILL mid-sweep and a torn
# last line, then --resume finishing every cell exactly once; bad grids refused; damaged records
# and settings named; a changed config refused; one sweep per folder.
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
G=(--backend cpu --config tiny --context 32 --modes eager --mtp-layers 1,2 --mtp-compress 0,4 --connections 0,2 --batches 1,2)
cells=32  # 2 policies x 2 x 2 x 2 x 1 x 2

"$bin" sweep "${G[@]}" --steps 40 --out-dir "$tmp" > /dev/null 2> "$tmp/err" & pid=$!
for i in $(seq 100); do sleep 0.1; f=$(ls "$tmp"/*/cells.jsonl 2>/dev/null || true); [ -n "$f" ] && [ "$(wc -l < "$f")" -ge 5 ] && break; done
{ kill -KILL $pid; wait $pid; } 2>/dev/null || true
folder=$(ls -d "$tmp"/*_sweep)
n=$(wc -l < "$folder/cells.jsonl"); [ "$n" -ge 5 ] && [ "$n" -lt $cells ] || fail "killed sweep should have some but not all cells ($n)"
printf '{"cell":{"policy":"shared","mtp_la' >> "$folder/cells.jsonl"   # a writer killed mid-line
"$bin" sweep --resume "$folder" > "$tmp/summary.txt" 2> "$tmp/resume.err" || { cat "$tmp/resume.err"; fail "resume failed"; }
grep -q "cut short" "$tmp/resume.err" || fail "the torn line should be reported"
python3 - "$folder" $cells <<'PY'
import json, sys
folder, cells = sys.argv[1], int(sys.argv[2])
lines = open(folder + "/cells.jsonl").read().split("\n")
recs = []
for l in lines:
    try: recs.append(json.loads(l))
    except json.JSONDecodeError: assert l == "", "a damaged line: %r" % l
ids = [r["id"] for r in recs]
assert len(set(ids)) == cells, (len(set(ids)), cells)
assert len(ids) == cells, "a cell ran twice: %d lines for %d cells" % (len(ids), cells)
assert all(r["status"] == "ok" and r["step_ms"] > 0 for r in recs)
s = json.load(open(folder + "/summary.json"))
assert len(s["cells"]) == cells and len(s["rows"]) == cells // 2
assert all("relative_difference" in r for r in s["rows"])
PY
grep -q "shared/per-layer - 1" "$tmp/summary.txt" || fail "summary table missing"
test -s "$folder/summary.html" && test -s "$folder/summary.md" || fail "summary files missing"
# Resuming a finished sweep runs nothing.
"$bin" sweep --resume "$folder" 2>&1 >/dev/null | grep -q "0 to run" || fail "a finished sweep should have nothing to run"

expect_error() { local want=$1; shift; local out; if out=$("$@" 2>&1); then fail "expected an error from: $*"; fi
                 echo "$out" | grep -q "$want" || fail "error for '$*' should mention '$want': $out"; }
expect_error "not an integer" "$bin" sweep --backend cpu --mtp-layers 1,x --out-dir "$tmp"
expect_error "must be 0, 4 or 128" "$bin" sweep --backend cpu --mtp-compress 3 --out-dir "$tmp"
expect_error "unknown stream policy" "$bin" sweep --backend cpu --policies shared,bogus --modes eager --out-dir "$tmp"
expect_error "no sweep.json" "$bin" sweep --resume "$tmp"
# --resume runs the folder's own grid: an option that would change it is refused, not ignored.
expect_error "cannot change them" "$bin" sweep --resume "$folder" --steps 100 --batches 7
expect_error "is outside (0" "$bin" sweep --backend cpu --child-timeout 0 --out-dir "$tmp"
expect_error "not a finite number" "$bin" sweep --backend cpu --child-timeout nan --out-dir "$tmp"
# Cells that fail (here: every child past a 50 ms limit) leave the summary written and exit 1, so
# that a nightly job notices; --resume --retry-failed would run them again.
mkdir "$tmp/failing"
rc=0; "$bin" sweep --backend cpu --config tiny --context 16 --modes eager --mtp-layers 1 --mtp-compress 0 \
  --connections 0 --batches 1 --child-timeout 0.05 --out-dir "$tmp/failing" > /dev/null 2> "$tmp/failing.err" || rc=$?
[ "$rc" = 1 ] || fail "a sweep whose cells failed should exit 1, not $rc: $(tail -n 3 "$tmp/failing.err")"
grep -q "2 of 2 cells failed" "$tmp/failing.err" || fail "the failed cells are not reported: $(cat "$tmp/failing.err")"
test -s "$(ls -d "$tmp"/failing/*_sweep)/summary.json" || fail "a sweep with failed cells should still write its summary"
grep -q "timed out after 0\.[0-9] s" "$tmp/failing.err" || fail "a 0.05 s limit should not read as 0 s: $(cat "$tmp/failing.err")"

# Damaged or foreign records and settings are named, never turned into results.
cp "$folder/cells.jsonl" "$tmp/cells.bak"; cp "$folder/sweep.json" "$tmp/sweep.bak"
sed -i '1s/"step_ms":[^,]*,/"step_ms":-5,/' "$folder/cells.jsonl"
expect_error 'line 1: "step_ms" is -5, outside' "$bin" sweep --resume "$folder"
sed -i '1s/"step_ms":-5,//' "$folder/cells.jsonl"
expect_error 'line 1: expected a number "step_ms"' "$bin" sweep --resume "$folder"
cp "$tmp/cells.bak" "$folder/cells.jsonl"
sed -i '1s/"batch":1/"batch":64/' "$folder/cells.jsonl"   # a cell the grid does not hold
"$bin" sweep --resume "$folder" --json > "$tmp/s.json" 2> "$tmp/foreign.err" || true
grep -q "not in the sweep's grid: ignored" "$tmp/foreign.err" || fail "a foreign cell should be named: $(cat "$tmp/foreign.err")"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert all(c['cell']['batch'] in (1, 2) for c in s['cells']), 'a foreign cell in the summary'" "$tmp/s.json"
cp "$tmp/cells.bak" "$folder/cells.jsonl"
for edit in 'j["steps"]="2"' 'j["backend"]="tpu"' 'j["schema"]="streamlab.compare/1"' 'j["draft_steps"]=-1'; do
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); $edit; json.dump(j, open(sys.argv[2], 'w'))" \
    "$tmp/sweep.bak" "$folder/sweep.json"
  expect_error "sweep.json': \"" "$bin" sweep --resume "$folder"
done
cp "$tmp/sweep.bak" "$folder/sweep.json"

# A config file is recorded by its absolute path and its content: a resume from elsewhere finds
# it, and a resume after it changed is refused instead of mixing two models in one table.
mkdir "$tmp/cfg"; (cd "$tmp" && "$bin" sweep --backend cpu --config tiny --context 16 --modes eager --mtp-layers 1 \
  --mtp-compress 0 --connections 0 --batches 1 --steps 2 --warmup 1 --policies shared --out-dir cfg > /dev/null 2>&1) || true
cp "$(dirname "$0")/../../model/configs/tiny.json" "$tmp/my.json"
mkdir "$tmp/own"
(cd "$tmp" && "$bin" sweep --backend cpu --config my.json --context 16 --modes eager --mtp-layers 1 --mtp-compress 0 \
  --connections 0 --batches 1,2 --steps 2 --warmup 1 --policies shared --out-dir own > /dev/null 2>&1) || fail "sweep with a config file failed"
own=$(ls -d "$tmp"/own/*_sweep)
head -n 1 "$own/cells.jsonl" > "$tmp/one" && mv "$tmp/one" "$own/cells.jsonl"
(cd / && "$bin" sweep --resume "$own" > /dev/null 2>&1) || fail "a resume from another folder did not find the config file"
head -n 1 "$own/cells.jsonl" > "$tmp/one" && mv "$tmp/one" "$own/cells.jsonl"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['hidden_size']=512; json.dump(j, open(sys.argv[1], 'w'))" "$tmp/my.json"
expect_error "changed since the sweep started (hidden_size: was 256, now 512)" "$bin" sweep --resume "$own"

# 0 MTP layers: cells without draft steps (they used to fail in their child); draft steps without
# MTP layers are refused before any cell runs.
mkdir "$tmp/n0"
"$bin" sweep --backend cpu --config tiny --context 16 --modes eager --mtp-layers 0 --mtp-compress 0 --connections 0 \
  --batches 1 --steps 2 --warmup 1 --policies shared --out-dir "$tmp/n0" > /dev/null 2> "$tmp/n0.err" || fail "a sweep of 0 MTP layers failed: $(tail -n 3 "$tmp/n0.err")"
expect_error "needs MTP layers, and --mtp-layers has 0" "$bin" sweep --backend cpu --mtp-layers 0,1 --draft-steps 1 --modes eager --out-dir "$tmp"

# One sweep per folder: a second run of the same folder is refused while the first runs, and
# the interrupted one says how many cells have a result.
mkdir "$tmp/lock"
"$bin" sweep --backend cpu --config tiny --context 16 --modes eager --mtp-layers 1 --mtp-compress 0 --connections 0 \
  --batches 1,2 --steps 100000 --warmup 1 --out-dir "$tmp/lock" > /dev/null 2> "$tmp/lock.err" & pid=$!
# (The lock file holds the process id once the lock is held: wait for that, not for the file.)
for i in $(seq 100); do sleep 0.1; [ -s "$(ls -d "$tmp"/lock/*_sweep 2>/dev/null || true)/sweep.lock" ] && break; done
locked=$(ls -d "$tmp"/lock/*_sweep)
expect_error "is in use by another sweep (process $pid)" "$bin" sweep --resume "$locked"
kill -INT $pid; wait $pid 2>/dev/null || true
grep -q "0 of 4 cells have a result (0 ok, 0 failed)" "$tmp/lock.err" || fail "the interrupted sweep's count: $(cat "$tmp/lock.err")"
echo "sweep: all checks passed"
