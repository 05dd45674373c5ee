#!/usr/bin/env bash
# Limits checked before any work: counts bounded with a message naming the bound, --steps checked
# in 64 bits against the config's positions, --seed refused when negative (it used to wrap) or past
# 2^64 - 1 (it was clamped), an empty number or file name refused (it read as 0, or as not given), a
# number read in decimal only ("010" was octal 8), and a
# model larger than the memory the backend can still allocate refused with both figures before
# anything is allocated. Each must fail fast (20 s) with a clear error, not run until killed.
set -euo pipefail
bin=$(realpath "$1")
. "$(dirname "${BASH_SOURCE[0]}")/../tools/refusals.sh"  # $tmp, fail, expect_error
expect_error "num_nextn_predict_layers (2000000000) must be <= 4096" "$bin" schedule --mtp-layers 2000000000
expect_error "batch (100000000) must be <= 65536" "$bin" run --backend cpu --batch 100000000 --steps 1
expect_error "draft_steps (100000) must be <= 4096" "$bin" schedule --draft-steps 100000
expect_error "needs more positions than the config's max_position_embeddings" \
  "$bin" run --backend cpu --steps 2147483647
expect_error "must be a whole number >= 0, not '-1'" "$bin" run --backend cpu --seed -1 --steps 1
expect_error "18446744073709551616 is past the largest seed" "$bin" run --backend cpu --seed 18446744073709551616 --steps 1
# An empty number (an unset shell variable) is refused, not read as 0 steps or batch 0.
expect_error "--steps: an empty value is not allowed" "$bin" run --backend cpu --steps ''
expect_error "--repetitions: an empty value is not allowed" "$bin" compare --backend cpu --repetitions ''
# ... and so is an empty file name, which read as the option not given (no trace written, exit 0).
expect_error "--trace: an empty value is not allowed" "$bin" run --backend cpu --steps 1 --trace ''
expect_error "--resume: an empty value is not allowed" "$bin" sweep --resume ''
# --tokens sets the context: a --context that disagrees is refused (it was ignored).
python3 -c "
import struct, sys
h = \"{'descr': '<i8', 'fortran_order': False, 'shape': (48,), }\"
h += ' ' * ((64 - (10 + len(h) + 1) % 64) % 64) + '\\n'
open(sys.argv[1], 'wb').write(b'\\x93NUMPY\\x01\\x00' + struct.pack('<H', len(h)) + h.encode() + struct.pack('<48q', *range(48)))" "$tmp/t48.npy"
expect_error "--context 10 disagrees with .*t48.npy, a prompt of 48 tokens" "$bin" run --backend cpu --steps 1 \
  --tokens "$tmp/t48.npy" --context 10
"$bin" run --backend cpu --steps 1 --tokens "$tmp/t48.npy" --context 48 > /dev/null 2>&1 || fail "--context equal to the prompt's length should run"
# A number is read in decimal: CLI11 read "010" as octal 8 and "0x10" as hex 16, without a word.
"$bin" run --backend cpu --steps 010 --seed 010 > "$tmp/dec.out" 2>&1 || fail "--steps 010: $(cat "$tmp/dec.out")"
grep -q "decode steps 10\$" "$tmp/dec.out" || fail "--steps 010 is not 10 steps: $(head -3 "$tmp/dec.out")"
grep -q "from seed 10\$" "$tmp/dec.out" || fail "--seed 010 is not seed 10: $(head -3 "$tmp/dec.out")"
expect_error "--steps: '0x10' is not a whole number in decimal digits" "$bin" run --backend cpu --steps 0x10
expect_error "--seed: '0x5' is not a whole number in decimal digits" "$bin" run --backend cpu --seed 0x5 --steps 1
expect_error "--margin: '0x1p3' is not a number in decimal notation" "$bin" compare --backend cpu --margin 0x1p3
expect_error "--connections: '0x3' is not a whole number in decimal digits" "$bin" compare --backend cpu --connections 0x3
# Numeric thresholds: NaN, infinities and values out of range refused by name (CLI11's range
# check alone lets NaN through, which switched compare's --fail-if-slower gate off).
traces=("$(dirname "$0")"/../../results/compare/*/traces/*.json.gz); trace=${traces[0]}  # (no `ls | head`: SIGPIPE under pipefail)
[ -f "$trace" ] || fail "no recorded trace under results/compare/*/traces/"
expect_error "'nan' is not a finite number" "$bin" analyze --kernel-wait-us nan "$trace"
expect_error "-5 is outside" "$bin" analyze --kernel-wait-us -5 "$trace"
expect_error "not in range" "$bin" analyze --top -1 "$trace"
expect_error "not in range" "$bin" analyze --false-dep-epsilon-ns 99999999999999999999 "$trace"
expect_error "not in range" "$bin" analyze --main-stream -1 "$trace"
expect_error "'nan' is not a finite number" "$bin" compare "$trace" "$trace" --fail-if-slower nan
expect_error "-5 is outside" "$bin" compare "$trace" "$trace" --fail-if-slower -5
# (An empty value of a checked option is named as empty, not as out of range.)
expect_error "--fail-if-slower: an empty value is not allowed" "$bin" compare "$trace" "$trace" --fail-if-slower ''
expect_error "--top: an empty value is not allowed" "$bin" analyze --top '' "$trace"
expect_error "'-inf' is not a finite number" "$bin" compare "$trace" "$trace" --child-timeout -inf
# A gzipped trace is unpacked into TMPDIR: one that is not a folder is named; an empty one means /tmp.
expect_error "TMPDIR '$tmp/none' is not a folder" env TMPDIR="$tmp/none" "$bin" analyze "$trace"
TMPDIR= "$bin" analyze "$trace" > /dev/null || fail "an empty TMPDIR should fall back to /tmp"
# flash in f32 on the CPU: about 1.1 TB of weights.
expect_error "GiB are available" "$bin" run --config flash --backend cpu --steps 1
grep -q "GiB of weights" "$tmp/out" || fail "the memory refusal does not name the weights' size"
# Progress on a long prefill, on stderr under --json (stdout stays one JSON document).
"$bin" run --backend cpu --context 8000 --prefill-chunk 200 --steps 1 --json > "$tmp/run.json" 2> "$tmp/run.err"
grep -q "^prefill: [0-9]* of 8000 tokens per sequence enqueued" "$tmp/run.err" || fail "no prefill progress: $(cat "$tmp/run.err")"
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/run.json" || fail "stdout is not one JSON document"
echo "limits: ok"
