#!/usr/bin/env bash
# `streamlab run` as a user runs it: the tiny config on the CPU reference, JSON output, a saved
# and reloaded checkpoint giving the same logits, --tokens and --dump-logits, and clear errors.
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Text output: a prefill row and 2 decode rows with a checksum each.
"$bin" run --config tiny --backend cpu --steps 2 > "$tmp/text.txt"
grep -q "^0 *prefill" "$tmp/text.txt" || fail "no prefill row"; grep -cE "^[0-9]+ +decode " "$tmp/text.txt" | grep -qx 2 || fail "want 2 decode rows"
grep -q "logits checksum" "$tmp/text.txt" || fail "no checksum"
grep -q "^weights: .* MiB" "$tmp/text.txt" || fail "weight memory not printed"

# JSON on stdout stays parseable; save f32 weights and reload them: identical checksums.
"$bin" run --config tiny --backend cpu --steps 2 --json --save-checkpoint "$tmp/ckpt" --save-dtype f32 > "$tmp/a.json"
"$bin" run --checkpoint "$tmp/ckpt" --backend cpu --steps 2 --json > "$tmp/b.json"
python3 - "$tmp/a.json" "$tmp/b.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["config"] == "tiny" and len(a["steps"]) == 3, a
assert a["steps"][0]["kind"] == "prefill" and a["steps"][1]["kind"] == "decode"
assert len(a["steps"][0]["drafts"]) == 2, "tiny has 2 draft steps"
for x, y in zip(a["steps"], b["steps"]):
    assert x["logits_checksum"] == y["logits_checksum"], (x, y)
    assert x["sampled"] == y["sampled"] and x["drafts"] == y["drafts"]
PY
test -f "$tmp/ckpt/config.json" && ls "$tmp/ckpt"/*.safetensors >/dev/null || fail "checkpoint files missing"

# --tokens from a .npy (int64 [T]) and --dump-logits [T, vocab] float32.
python3 - "$tmp/tokens.npy" <<'PY'
import struct, sys
ids = [5, 17, 900, 3, 3, 42, 1000, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20]
hdr = "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }" % len(ids)
hdr += " " * (64 - (10 + len(hdr) + 1) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + struct.pack("<%dq" % len(ids), *ids))
PY
"$bin" run --config tiny --backend cpu --steps 1 --tokens "$tmp/tokens.npy" --dump-logits "$tmp/logits.npy" > "$tmp/t.txt"
python3 - "$tmp/logits.npy" <<'PY'
import ast, struct, sys, math
raw = open(sys.argv[1], "rb").read()
assert raw[:6] == b"\x93NUMPY"
n = struct.unpack("<H", raw[8:10])[0]
h = ast.literal_eval(raw[10:10 + n].decode())
assert h["descr"] == "<f4" and h["shape"] == (20, 1024), h
vals = struct.unpack("<%df" % (20 * 1024), raw[10 + n:])
assert all(math.isfinite(v) for v in vals) and max(vals) > min(vals)
PY

# Bad input: clear errors, non-zero exit, no crash.
expect_error() { local want=$1; shift; if "$bin" "$@" > "$tmp/out" 2>&1; then fail "succeeded: $*"; fi
  grep -q -- "$want" "$tmp/out" || { cat "$tmp/out"; fail "error for '$*' does not mention '$want'"; }; }
expect_error "unknown stream policy" run --config tiny --policy bogus
expect_error "mtp_compress_ratio" run --config tiny --mtp-compress 7
expect_error "nosuchconfig" run --config nosuchconfig
expect_error "config.json" run --checkpoint "$tmp/nonexistent"
echo '{"hidden_size": 256, "num_hidden_layer": 6}' > "$tmp/bad.json"
expect_error "num_hidden_layer" run --config "$tmp/bad.json"
"$bin" run --help > "$tmp/help.txt"
grep -q -- "--mtp-compress" "$tmp/help.txt" || fail "--help lacks --mtp-compress"
echo "run_tiny: ok"

# --kernel-variants: refused with the reason on a bad spec (when the command line is read) and on
# the CPU backend (its one kernel per op has no variants); recorded as null in --json there.
out=$("$bin" run --config tiny --backend cpu --steps 1 --kernel-variants attn-decode=fast 2>&1) && fail "a bad --kernel-variants was accepted"
echo "$out" | grep -q "attn-decode=fast: expected on or off" || fail "bad --kernel-variants: $out"
out=$("$bin" run --config tiny --backend cpu --steps 1 --kernel-variants pdl=off 2>&1) && fail "--kernel-variants accepted on the cpu backend"
echo "$out" | grep -q "use --backend cuda" || fail "--kernel-variants on cpu: $out"
"$bin" run --config tiny --backend cpu --steps 1 --json | python3 -c "import json,sys; assert json.load(sys.stdin)['kernel_variants'] is None" \
  || fail "run --json on cpu: kernel_variants should be null"
# compare and sweep refuse it on the CPU backend before starting any measuring process.
for cmd in compare sweep; do
  out=$("$bin" $cmd --backend cpu --config tiny --kernel-variants pdl=off --out-dir "$tmp/$cmd" 2>&1) && fail "$cmd accepted --kernel-variants on cpu"
  echo "$out" | grep -q "$cmd: --kernel-variants choose among CUDA kernels" || fail "$cmd --kernel-variants on cpu: $out"
  [ ! -e "$tmp/$cmd" ] || [ -z "$(ls -A "$tmp/$cmd")" ] || fail "$cmd wrote a folder before refusing"
done
