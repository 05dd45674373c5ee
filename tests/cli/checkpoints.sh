#!/usr/bin/env bash
# Checkpoints and token files a hostile user hands over: a NaN weight, two tensors over the same
# bytes, an index that leaves a tensor out or points outside its folder, a .npy with more data than
# its header says. Each is an error naming the file and the tensor, before the model runs.
set -euo pipefail
bin=$(realpath "$1")
EXPECT_ERROR_TIMEOUT=60
. "$(dirname "${BASH_SOURCE[0]}")/../tools/refusals.sh"  # $tmp, fail, expect_error
"$bin" run --config tiny --backend cpu --steps 1 --save-checkpoint "$tmp/good" --save-dtype f32 > /dev/null 2>&1
"$bin" run --config tiny --backend cpu --steps 1 --checkpoint "$tmp/good" > /dev/null 2>&1 || fail "the good checkpoint does not load"

# mutate NAME PYTHON: a copy of the good checkpoint changed by a Python snippet that gets `d` (its
# folder), `st` (the shard path), `hdr` (the header dict) and `data` (bytes after the header) and
# may set hdr / data; the shard is written back from them.
mutate() {
  cp -r "$tmp/good" "$tmp/$1"
  python3 - "$tmp/$1" "$2" <<'PY'
import json, glob, os, struct, sys
d, code = sys.argv[1], sys.argv[2]
st = glob.glob(os.path.join(d, "*.safetensors"))[0]
raw = open(st, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr, data = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
exec(code)
h = json.dumps(hdr).encode()
open(st, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
PY
}
# A NaN weight.
mutate nan 'name = "layers.0.attn.wq_a.weight"; b = hdr[name]["data_offsets"][0]; data[b:b + 4] = struct.pack("<f", float("nan"))'
expect_error "tensor layers.0.attn.wq_a.weight in .* holds a non-finite value (NaN or Inf) at element 0" \
  "$bin" run --config tiny --backend cpu --steps 1 --checkpoint "$tmp/nan"
# Two tensors of one size over the same bytes.
mutate overlap 'hdr["layers.1.attn.wq_a.weight"]["data_offsets"] = hdr["layers.0.attn.wq_a.weight"]["data_offsets"]'
expect_error "overlap in the data section" "$bin" run --config tiny --backend cpu --steps 1 --checkpoint "$tmp/overlap"
# The index leaves a tensor out; the index points outside the folder.
cp -r "$tmp/good" "$tmp/noindex"
python3 -c "
import json,sys; p=sys.argv[1]+'/model.safetensors.index.json'; j=json.load(open(p)); del j['weight_map']['layers.0.attn.wq_a.weight']; json.dump(j,open(p,'w'))" "$tmp/noindex"
expect_error "tensor layers.0.attn.wq_a.weight in .* is not in model.safetensors.index.json" \
  "$bin" run --config tiny --backend cpu --steps 1 --checkpoint "$tmp/noindex"
cp -r "$tmp/good" "$tmp/outside"
python3 -c "
import json,sys; p=sys.argv[1]+'/model.safetensors.index.json'; j=json.load(open(p)); j['weight_map']['embed.weight']='../good/x.safetensors'; json.dump(j,open(p,'w'))" "$tmp/outside"
expect_error "is not a file name in the checkpoint's directory" "$bin" run --config tiny --backend cpu --steps 1 --checkpoint "$tmp/outside"
# A .npy whose data is longer than its header says.
python3 - "$tmp/tokens.npy" <<'PY'
import struct, sys
hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (8,), }"
hdr += " " * (64 - (10 + len(hdr) + 1) % 64) + "\n"
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + struct.pack("<10i", *range(10)))
PY
expect_error "tokens.npy: the header's shape (8) of <i4 covers 32 bytes, but 40 bytes follow the header" \
  "$bin" run --config tiny --backend cpu --steps 1 --tokens "$tmp/tokens.npy"

# --weights native: a native model saves DeepSeek's quantized layout, loads back to the same run,
# loads into bf16 weights too (dequantized), and a broken quantized tensor is refused by name.
sampled() { grep -E '^1 +decode' "$1" | sed -E 's/ +[0-9.]+ +sampled/ sampled/'; }
"$bin" run --config tiny --backend cpu --weights native --steps 1 --save-checkpoint "$tmp/native" --save-dtype f32 \
  > "$tmp/native_run.txt" 2>&1 || fail "a native run with --save-checkpoint failed: $(cat "$tmp/native_run.txt")"
python3 - "$tmp/native" <<'PY' || fail "the native checkpoint's dtypes are not DeepSeek's"
import glob, json, os, struct, sys
st = glob.glob(os.path.join(sys.argv[1], "*.safetensors"))[0]
raw = open(st, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
want = {"layers.0.attn.wq_a.weight": "F8_E4M3", "layers.0.attn.wq_a.scale": "F8_E8M0",
        "layers.1.ffn.experts.0.w2.weight": "I8", "layers.1.ffn.experts.0.w2.scale": "F8_E8M0",
        "layers.2.attn.compressor.wkv.weight": "F32"}
bad = {k: h.get(k, {}).get("dtype") for k, v in want.items() if h.get(k, {}).get("dtype") != v}
sys.exit(1 if bad else 0)
PY
"$bin" run --backend cpu --weights native --steps 1 --checkpoint "$tmp/native" > "$tmp/native_again.txt" 2>&1 ||
  fail "the native checkpoint does not load into native weights: $(cat "$tmp/native_again.txt")"
[ "$(sampled "$tmp/native_run.txt")" = "$(sampled "$tmp/native_again.txt")" ] ||
  fail "native save + load changed the run: $(sampled "$tmp/native_run.txt") vs $(sampled "$tmp/native_again.txt")"
"$bin" run --backend cpu --steps 1 --checkpoint "$tmp/native" --json > "$tmp/deq.json" 2> /dev/null ||
  fail "the native checkpoint does not load into bf16 weights"
grep -q '"weights": "bf16"' "$tmp/deq.json" || fail "run --json does not record the weight format"
"$bin" run --backend cpu --weights native --steps 1 --checkpoint "$tmp/native" --json > "$tmp/nat.json" 2> /dev/null ||
  fail "the native checkpoint does not run with --json"
grep -q '"weights": "native"' "$tmp/nat.json" || fail "run --json does not record --weights native"
# The same checkpoint runs its experts on FP8 activations (W4A8), and the record says so.
"$bin" run --backend cpu --weights native-w4a8 --steps 1 --checkpoint "$tmp/native" --json > "$tmp/a8.json" \
  2> /dev/null || fail "the native checkpoint does not run with --weights native-w4a8"
grep -q '"weights": "native-w4a8"' "$tmp/a8.json" || fail "run --json does not record --weights native-w4a8"
# mutate copies $tmp/good: from here on that is the native checkpoint.
rm -rf "$tmp/good" && cp -r "$tmp/native" "$tmp/good"
# An MXFP4 scale tensor as F32 with a value that is not a power of two.
mutate mxscale 'name = "layers.1.ffn.experts.0.w2.scale"; t = hdr[name]; b, e = t["data_offsets"]; n = e - b
vals = [2.0 ** (x - 127) for x in data[b:e]]; vals[3] = 0.3
new = struct.pack("<%df" % n, *vals); data = data[:b] + bytearray(new) + data[e:]
shift = len(new) - n; t["dtype"] = "F32"; t["data_offsets"] = [b, b + len(new)]
for k, v in hdr.items():
    if k != "__metadata__" and k != name and v["data_offsets"][0] >= e: v["data_offsets"] = [v["data_offsets"][0] + shift, v["data_offsets"][1] + shift]'
expect_error "the scales of layers.1.ffn.experts.0.w2.weight in .* hold 0.3 at element 3, not a power of two" \
  "$bin" run --backend cpu --weights native --steps 1 --checkpoint "$tmp/mxscale"
# An FP8 weight whose scales are missing, and an FP8 NaN code.
mutate noscale 'del hdr["layers.0.attn.wq_b.scale"]'
python3 -c "
import json,sys; p=sys.argv[1]+'/model.safetensors.index.json'; j=json.load(open(p)); del j['weight_map']['layers.0.attn.wq_b.scale']; json.dump(j,open(p,'w'))" "$tmp/noscale"
expect_error "tensor layers.0.attn.wq_b.weight in .* is F8_E4M3 but has no layers.0.attn.wq_b.scale beside it" \
  "$bin" run --backend cpu --weights native --steps 1 --checkpoint "$tmp/noscale"
mutate fp8nan 'b = hdr["layers.0.attn.wkv.weight"]["data_offsets"][0]; data[b + 5] = 0x7F'
expect_error "tensor layers.0.attn.wkv.weight in .* holds an FP8 NaN at element 5" \
  "$bin" run --backend cpu --weights native --steps 1 --checkpoint "$tmp/fp8nan"
# An index whose weight_map is empty is named as such (it read "no *.safetensors files").
cp -r "$tmp/good" "$tmp/emptymap"
printf '{"metadata": {}, "weight_map": {}}' > "$tmp/emptymap/model.safetensors.index.json"
expect_error "weight_map is empty" "$bin" run --config tiny --backend cpu --steps 1 --checkpoint "$tmp/emptymap"

# A save that fails (a full disk: here a file-size limit) leaves the checkpoint it was writing over
# as it was, config.json included (it used to leave a new config.json beside the old weights, which
# loaded without a word), and no folder where there was none.
cp -r "$tmp/good" "$tmp/over"
rc=0; ( trap '' XFSZ; ulimit -f 20000; exec "$bin" run --config tiny-clamp --backend cpu --steps 1 \
  --save-checkpoint "$tmp/over" --save-dtype f32 ) > "$tmp/save.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a save past the file-size limit should fail with status 1, not $rc: $(tail -n 2 "$tmp/save.out")"
grep -q "File too large" "$tmp/save.out" || fail "the failed save does not say why: $(tail -n 2 "$tmp/save.out")"
for f in config.json model.safetensors.index.json model-00001-of-00001.safetensors; do
  cmp -s "$tmp/good/$f" "$tmp/over/$f" || fail "a failed save changed $f"
done
[ -z "$(ls -A "$tmp/over" | grep '^\.')" ] || fail "a failed save left staged files: $(ls -A "$tmp/over")"
rc=0; ( trap '' XFSZ; ulimit -f 20000; exec "$bin" run --config tiny --backend cpu --steps 1 \
  --save-checkpoint "$tmp/fresh" --save-dtype f32 ) > /dev/null 2>&1 || rc=$?
[ "$rc" = 1 ] && [ ! -e "$tmp/fresh" ] || fail "a failed save into a new folder left it behind (status $rc)"
# ... and a save that completes replaces it whole.
"$bin" run --config tiny-clamp --backend cpu --steps 1 --save-checkpoint "$tmp/over" --save-dtype f32 > /dev/null 2>&1
grep -q '"swiglu_limit": 0.5' "$tmp/over/config.json" || fail "the completed save did not write its config"
"$bin" run --backend cpu --steps 1 --checkpoint "$tmp/over" > /dev/null 2>&1 || fail "the re-saved checkpoint does not load"
echo "checkpoints: ok"
