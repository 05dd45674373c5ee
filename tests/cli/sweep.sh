#!/usr/bin/env bash
# `streamlab sweep` on the CPU reference: the grid, one line per cell, SIGKILL mid-sweep and a torn
# last line, then --resume finishing every cell exactly once; bad grids refused.
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
echo "sweep: all checks passed"
