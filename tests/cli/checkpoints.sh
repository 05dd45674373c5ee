#!/usr/bin/env bash
# Checkpoints and token files a hostile user hands over: a NaN weight, two tensors over the same
# bytes, an index that leaves a tensor out or points outside its folder, a .npy with more data than
# its header says. Each is an error naming the file and the tensor, before the model runs.
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() {
  local want=$1; shift; local rc=0
  timeout 60 "$@" > "$tmp/out" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "expected an error from: $*"
  [ "$rc" -lt 124 ] || fail "'$*' crashed or hung (status $rc)"
  grep -q -- "$want" "$tmp/out" || fail "error for '$*' should mention '$want': $(cat "$tmp/out")"
}
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
echo "checkpoints: ok"
