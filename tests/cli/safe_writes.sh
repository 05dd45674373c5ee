#!/usr/bin/env bash
# Every writer of results, tried as a hostile user would: a full disk (an injected ENOSPC at
# commit, STREAMLAB_WRITE_FAIL_AFTER, and /dev/full), a destination that is a folder, a missing
# parent folder, and a kill in the middle. The destination must keep its old content (or stay
# absent), no temporary file may be left after an error, and the command must fail saying why.
set -euo pipefail
bin=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
EXPECT_ERROR_TIMEOUT=60
. "$(dirname "${BASH_SOURCE[0]}")/../tools/refusals.sh"  # $tmp, fail, expect_error
no_temp_left() { ! ls -A "$1" | grep -q '\.tmp\.' || fail "a temporary file was left in $1: $(ls -A "$1")"; }
traces=("$root"/results/compare/*/traces/shared.graph.json.gz); trace=${traces[0]}  # (no `ls | head`: SIGPIPE under pipefail)

mkdir "$tmp/out_dir"
for to in kineto sqlite; do
  dst="$tmp/out_dir/trace.$to"
  echo OLD > "$dst"
  # A full disk at commit: the old file stays.
  STREAMLAB_WRITE_FAIL_AFTER=1000 expect_error "No space left on device" "$bin" export "$trace" --to $to "$dst"
  [ "$(cat "$dst")" = OLD ] || fail "--to $to: a failed export changed the destination"
  no_temp_left "$tmp/out_dir"
  # A folder as the destination, and a missing parent folder.
  mkdir "$tmp/out_dir/folder_$to"
  expect_error "not a regular file" "$bin" export "$trace" --to $to "$tmp/out_dir/folder_$to"
  expect_error "does not exist" "$bin" export "$trace" --to $to "$tmp/nowhere/sub/trace.$to"
  [ ! -e "$tmp/nowhere" ] || fail "--to $to created the missing folder"
  # Success replaces the old file with a complete one that loads.
  "$bin" export "$trace" --to $to "$dst" 2> /dev/null
  "$bin" analyze "$dst" > /dev/null || fail "--to $to: the exported file does not load"
done
# A Kineto export named .gz is gzipped as it is written (it was plain JSON under a .gz name); a
# full disk part-way leaves the old file.
echo OLD > "$tmp/out_dir/k.json.gz"
STREAMLAB_WRITE_FAIL_AFTER=1000 expect_error "No space left on device" "$bin" export "$trace" --to kineto "$tmp/out_dir/k.json.gz"
[ "$(cat "$tmp/out_dir/k.json.gz")" = OLD ] || fail "a failed gzipped export changed the destination"
no_temp_left "$tmp/out_dir"
"$bin" export "$trace" --to kineto "$tmp/out_dir/k.json.gz" --validate 2> /dev/null
"$bin" export "$trace" --to kineto "$tmp/out_dir/k.json" 2> /dev/null
gzip -t "$tmp/out_dir/k.json.gz" && zcat "$tmp/out_dir/k.json.gz" | cmp -s - "$tmp/out_dir/k.json" ||
  fail "the .gz export is not the plain export gzipped"
# An option of another format is refused, not ignored.
expect_error "--rank applies to --to kineto only; this export is --to sqlite" \
  "$bin" export "$trace" --to sqlite "$tmp/out_dir/r.sqlite" --rank 1
expect_error "--range applies to --to csv only" "$bin" export "$trace" --to kineto "$tmp/out_dir/r.json" --range step
[ ! -e "$tmp/out_dir/r.sqlite" ] && [ ! -e "$tmp/out_dir/r.json" ] || fail "a refused export wrote its file"
# A device: written in place, the write error reported (kineto); refused where a path is needed.
if [ -e /dev/full ]; then
  expect_error "No space left on device" "$bin" export "$trace" --to kineto /dev/full
  expect_error "not a regular file" "$bin" export "$trace" --to sqlite /dev/full
fi

# CSV tables: a new folder appears complete or not at all.
STREAMLAB_WRITE_FAIL_AFTER=10 expect_error "No space left on device" "$bin" export "$trace" --to csv "$tmp/out_dir/tables"
[ ! -e "$tmp/out_dir/tables" ] || fail "a failed csv export left a partial folder"
expect_error "does not exist" "$bin" export "$trace" --to csv "$tmp/nowhere/tables"
"$bin" export "$trace" --to csv "$tmp/out_dir/tables" 2> /dev/null
test -s "$tmp/out_dir/tables/gpu_ops.csv" || fail "csv export wrote no gpu_ops.csv"
ls -A "$tmp/out_dir" | grep -q staging && fail "a staging folder was left"
# In an existing folder too: a write that fails part-way (the small tables fit under the limit,
# gpu_ops.csv does not) leaves every table as it was; a later export without --range removes the
# earlier ranges.csv, so that the folder's tables all come from one trace.
etraces=("$root"/results/compare/*/traces/shared.eager.json.gz); etrace=${etraces[0]}  # (graph traces hold no NVTX ranges)
"$bin" export "$etrace" --to csv --range decode "$tmp/out_dir/tables" 2> /dev/null
test -s "$tmp/out_dir/tables/ranges.csv" || fail "csv export --range decode wrote no ranges.csv"
(cd "$tmp/out_dir/tables" && md5sum *.csv) > "$tmp/tables.md5"
# The limit: just under the graph trace's gpu_ops.csv, above its other tables (measured from a
# scratch export), so that the failing export below writes three tables before the fourth fails.
"$bin" export "$trace" --to csv "$tmp/scratch_tables" 2> /dev/null
big=$(stat -c %s "$tmp/scratch_tables/gpu_ops.csv")
for f in summary streams kernel_stats; do
  [ "$(stat -c %s "$tmp/scratch_tables/$f.csv")" -lt "$big" ] || fail "the test needs gpu_ops.csv larger than $f.csv"
done
STREAMLAB_WRITE_FAIL_AFTER=$((big - 1)) expect_error "its tables are as they were" \
  "$bin" export "$trace" --to csv "$tmp/out_dir/tables"
(cd "$tmp/out_dir/tables" && md5sum --quiet -c "$tmp/tables.md5") || fail "a failed csv export changed the folder's tables"
ls -A "$tmp/out_dir/tables" | grep -q staging && fail "a staging folder was left in the tables' folder"
"$bin" export "$trace" --to csv "$tmp/out_dir/tables" 2> "$tmp/csv.err"
[ ! -e "$tmp/out_dir/tables/ranges.csv" ] || fail "an earlier export's ranges.csv was left beside new tables"
grep -q "removed .*ranges.csv" "$tmp/csv.err" || fail "the removal of ranges.csv is not reported: $(cat "$tmp/csv.err")"

# A kill in the middle of a large export: the destination is the old file or a complete new one.
# A process killed with SIGKILL cannot remove its hidden temporary file (.NAME.tmp.*), so these
# write into a folder of their own, apart from the folder the error paths must leave clean.
gunzip -c "$trace" > "$tmp/big.json"
mkdir -p "$tmp/kill_dir"
for to in kineto sqlite; do
  dst="$tmp/kill_dir/killed.$to"
  echo OLD > "$dst"
  "$bin" export "$tmp/big.json" --to $to "$dst" 2> /dev/null & pid=$!
  sleep 0.2; kill -9 $pid 2> /dev/null || true; wait $pid 2> /dev/null || true
  if [ "$(head -c 3 "$dst" 2> /dev/null | tr -d "\\0")" != OLD ]; then
    "$bin" analyze "$dst" > /dev/null || fail "--to $to: a killed export left a destination that does not load"
  fi
done

# Ctrl-C (SIGINT) or SIGTERM in the middle: the process ends by the signal and leaves no temporary
# file, neither the unpacked copy of a gzipped trace (in TMPDIR, as large as the trace) nor the
# hidden .NAME.tmp.* beside an export (core/interrupt_cleanup.h). A trace of 200000 kernels (about
# 60 MB unpacked) keeps each command busy for longer than the earliest signal; several delays hit
# it at different points, and at least one must land while it runs.
python3 - "$tmp/many.json" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    f.write('{"schemaVersion": 1, "traceEvents": [\n')
    t = 1_000_000.0
    for i in range(200000):
        f.write(json.dumps({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t, "dur": 2,
                            "args": {"correlation": i + 1}}) + ",\n")
        f.write(json.dumps({"ph": "X", "cat": "kernel", "name": "k%d" % (i % 50), "pid": 0, "tid": 7 + i % 2, "ts": t + 3,
                            "dur": 4, "args": {"correlation": i + 1, "stream": 7 + i % 2, "device": 0}}) + ",\n")
        t += 5
    f.write('{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]}\n')
PY
gzip -1 "$tmp/many.json"
mkdir -p "$tmp/tmpdir" "$tmp/int_dir"
interrupted=0
for sig in INT TERM; do
  for d in 0.05 0.15 0.3; do
    rc=0; TMPDIR="$tmp/tmpdir" timeout -s $sig $d "$bin" analyze "$tmp/many.json.gz" > /dev/null 2>&1 || rc=$?
    [ $rc = 124 ] && interrupted=$((interrupted + 1))
    [ -z "$(ls -A "$tmp/tmpdir")" ] || fail "SIG$sig after $d s left the trace's unpacked copy: $(ls -A "$tmp/tmpdir")"
    for to in kineto sqlite; do
      rc=0; timeout -s $sig $d "$bin" export "$tmp/many.json.gz" --to $to "$tmp/int_dir/out.$to" > /dev/null 2>&1 || rc=$?
      [ $rc = 124 ] && interrupted=$((interrupted + 1))
      no_temp_left "$tmp/int_dir"
    done
  done
done
[ $interrupted -gt 0 ] || fail "no command was still running when its signal came: the interruption was not tested"
# The same for CSV tables into a new folder: its hidden staging folder (.NAME.staging-*, tables
# already written in it) goes too; the tables are written last, so the delays reach further.
for d in 0.1 0.2 0.3 0.4 0.5 0.6 0.8; do
  timeout -s INT $d "$bin" export "$tmp/many.json.gz" --to csv "$tmp/int_dir/tables" > /dev/null 2>&1 || true
  [ -z "$(ls -A "$tmp/int_dir" | grep staging)" ] || fail "SIGINT after $d s left a staging folder: $(ls -A "$tmp/int_dir")"
  rm -rf "$tmp/int_dir/tables"
done

# Model outputs: --dump-logits through the same checks.
expect_error "not a regular file" "$bin" run --config tiny --backend cpu --steps 1 --dump-logits "$tmp/out_dir/folder_kineto"
expect_error "does not exist" "$bin" run --config tiny --backend cpu --steps 1 --dump-logits "$tmp/nowhere/l.npy"
echo OLD > "$tmp/out_dir/l.npy"
STREAMLAB_WRITE_FAIL_AFTER=100 expect_error "No space left on device" "$bin" run --config tiny --backend cpu --steps 1 \
  --dump-logits "$tmp/out_dir/l.npy"
[ "$(cat "$tmp/out_dir/l.npy")" = OLD ] || fail "a failed --dump-logits changed the destination"
no_temp_left "$tmp/out_dir"
# measure checks --out before measuring (it used to fail only after the whole run): 100 000 steps
# would take minutes, the refusal must come at once (expect_error's limit, 10 s here).
EXPECT_ERROR_TIMEOUT=10 expect_error "its folder '$tmp/nowhere' does not exist" "$bin" measure --backend cpu \
  --config tiny --modes eager --steps 100000 --context 16 --out "$tmp/nowhere/m.json"
EXPECT_ERROR_TIMEOUT=10 expect_error "not a regular file" "$bin" measure --backend cpu --config tiny --modes eager \
  --steps 100000 --context 16 --out "$tmp/out_dir"
STREAMLAB_WRITE_FAIL_AFTER=100 expect_error "No space left on device" "$bin" measure --backend cpu --config tiny \
  --modes eager --steps 2 --warmup 1 --context 16 --out "$tmp/out_dir/m.json"
[ ! -e "$tmp/out_dir/m.json" ] || fail "a failed measure left its output"
no_temp_left "$tmp/out_dir"
echo "safe_writes: ok"
