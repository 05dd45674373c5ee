#!/usr/bin/env bash
# Inputs that are not plain files, as a hostile user gives them: JSON nested 100 000 levels deep, a
# trace on a pipe (`analyze /dev/stdin`, plain and gzipped), a FIFO without a writer named as a
# trace, a config, a checkpoint shard or a token file, a directory named as a trace, a stream that
# is no trace and a copy that would fill TMPDIR. Each must
# end with a clear error or a correct result, never a crash or a hang.
set -euo pipefail
bin=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/../tools/refusals.sh"  # $tmp, fail, expect_error
export STREAMLAB_FIFO_WAIT_S=2

# 1. Deep nesting: refused by depth, in every command that reads traces.
python3 -c "n=100000; open('$tmp/deep.json','w').write('{\"traceEvents\":' + '['*n + ']'*n + '}')"
expect_error "nested deeper than" "$bin" analyze "$tmp/deep.json"
expect_error "nested deeper than" "$bin" export "$tmp/deep.json" --to csv "$tmp/deep_csv"
gzip -c "$tmp/deep.json" > "$tmp/deep.json.gz"
expect_error "nested deeper than" "$bin" analyze "$tmp/deep.json.gz"

# 2. A trace on a pipe, plain and gzipped, gives the same analysis as the file.
trace=$(ls "$root"/results/compare/*/traces/shared.graph.json.gz | head -n 1)
gunzip -c "$trace" > "$tmp/t.json"
"$bin" analyze "$tmp/t.json" --json > "$tmp/file.json"
"$bin" analyze /dev/stdin --json < <(cat "$tmp/t.json") > "$tmp/pipe.json" || fail "analyze of a piped trace failed"
cat "$trace" | "$bin" analyze /dev/stdin --json > "$tmp/pipegz.json" || fail "analyze of a piped gzipped trace failed"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
a, b, c = (json.load(open(f"{d}/{n}.json")) for n in ("file", "pipe", "pipegz"))
strip = lambda j: {k: v for k, v in j.items() if k not in ("trace", "format")}
assert b["format"] == "stream" and c["format"] == "stream", (b["format"], c["format"])
assert strip(a) == strip(b), "piped trace analysed differently"
assert strip(a) == strip(c), "piped gzipped trace analysed differently"
PY
printf '' | expect_error "stream is empty" "$bin" analyze /dev/stdin
# A trace without GPU activity says so (instead of reporting zeros silently).
printf '{"traceEvents":[]}' | "$bin" analyze /dev/stdin > /dev/null 2> "$tmp/none.err"
grep -q "has no GPU activity" "$tmp/none.err" || fail "no 'no GPU activity' note for an empty trace"

# 3. FIFOs without a writer: a trace waits a bounded time, files that must be regular are refused.
mkfifo "$tmp/fifo.json"
expect_error "nothing to read after 2 s" "$bin" analyze "$tmp/fifo.json"
expect_error "FIFO (named pipe), not a regular file" "$bin" run --config "$tmp/fifo.json" --backend cpu
mkdir "$tmp/ckpt"
"$bin" run --config tiny --backend cpu --steps 1 --save-checkpoint "$tmp/ckpt" > /dev/null 2>&1
shard=$(ls "$tmp"/ckpt/*.safetensors | head -n 1)
rm "$shard"; mkfifo "$shard"
expect_error "safetensors file '.*': a FIFO" "$bin" run --config tiny --backend cpu --steps 1 --checkpoint "$tmp/ckpt"
mkfifo "$tmp/tokens.npy"
if "$bin" run --help | grep -q -- "--tokens"; then
  expect_error ".npy file '.*': a FIFO" "$bin" run --config tiny --backend cpu --steps 1 --tokens "$tmp/tokens.npy"
fi

# 4. A directory named as a trace.
expect_error "directory" "$bin" analyze "$tmp/ckpt"

# 5. Traces read through a temporary copy (streams, gzip) name the user's file in their errors,
# not the copy: a truncated gzipped SQLite, a damaged gzip.
"$bin" export "$tmp/t.json" --to sqlite "$tmp/t.sqlite" > /dev/null
head -c 20000 "$tmp/t.sqlite" | gzip -c > "$tmp/cut.sqlite.gz"
expect_error "'$tmp/cut.sqlite.gz'" "$bin" analyze "$tmp/cut.sqlite.gz"
grep -q "streamlab-trace-" "$tmp/out" && fail "the error names the temporary copy: $(cat "$tmp/out")"
head -c $(( $(stat -c %s "$trace") / 2 )) "$trace" > "$tmp/cut.json.gz"
expect_error "ends early" "$bin" analyze "$tmp/cut.json.gz"

# 6. A JSON trace the fast loader cannot read and too big for the precise loader (which parses
# the document whole, about 4x the file) is refused up front with both figures, not allocated
# until the process is killed. Half of MemAvailable, sparse: no disk used.
avail_mib=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
printf '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 1, "args": {"stream": 7}},\n' > "$tmp/huge.json"
truncate -s $((avail_mib / 2))M "$tmp/huge.json"
expect_error "the precise JSON loader would need about" "$bin" analyze "$tmp/huge.json"
grep -q "GiB available" "$tmp/out" || fail "no available figure: $(cat "$tmp/out")"
rm "$tmp/huge.json"
# 7. A stream that is no trace is refused at its first bytes, not copied whole into TMPDIR first
# (`analyze /dev/zero` filled the disk before failing); a copy that would leave TMPDIR with less
# than 1 GiB (here: more than the disk holds) stops, and leaves nothing behind.
expect_error "not a trace streamlab can read .*byte 0 is 0x00" "$bin" analyze /dev/zero
# (Pipes by process substitution: the writer of a pipe that streamlab stops reading gets SIGPIPE,
# which a `|` pipeline would report under pipefail.)
expect_error "byte 0 is 0x7f" "$bin" analyze /dev/stdin < <(head -c 100000 /bin/sh)
mkdir "$tmp/tmpd"
expect_error "stopped so as not to fill the disk (it keeps 1e+12 GiB free" \
  env TMPDIR="$tmp/tmpd" STREAMLAB_TMP_RESERVE_GIB=1e12 "$bin" analyze /dev/stdin < <(cat "$trace")
expect_error "stopped so as not to fill the disk" env TMPDIR="$tmp/tmpd" STREAMLAB_TMP_RESERVE_GIB=1e12 "$bin" analyze "$trace"
[ -z "$(ls -A "$tmp/tmpd")" ] || fail "a stopped copy was left in TMPDIR: $(ls "$tmp/tmpd")"
echo "input_streams: ok"
