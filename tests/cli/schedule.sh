#!/usr/bin/env bash
# `streamlab schedule`: stream counts and owners per policy, fork/join structure, no hazards.
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$bin" schedule --config tiny --policy per-layer --mtp-layers 4 --json > "$tmp/pl.json"
"$bin" schedule --config tiny --policy shared --mtp-layers 4 --json > "$tmp/sh.json"
"$bin" schedule --config flash --policy per-layer-all --mtp-layers 1 --json > "$tmp/fl.json"
# The torch source: 40 draws (3 target + shared expert + 3 x 12 MTP) on PyTorch's pool of 32.
"$bin" schedule --config tiny --policy per-layer --mtp-layers 12 --draft-steps 12 --mtp-compress 4 \
  --stream-source torch --json > "$tmp/torch.json"
"$bin" schedule --config flash --policy trtllm-per-layer --mtp-layers 1 --json > "$tmp/trt.json"
python3 - "$tmp" <<'PY'
import json, sys, os
d = sys.argv[1]
pl, sh, fl, to, trt = (json.load(open(os.path.join(d, n)))
                       for n in ("pl.json", "sh.json", "fl.json", "torch.json", "trt.json"))
assert pl["aux_streams_requested"] == 3 + 3 * 4, pl["aux_streams_requested"]
assert pl["streams_created"] == 3 + 3 * 4 + 1, pl["streams_created"]  # + the shared-expert stream
assert sh["aux_streams_requested"] == 3 + 3, sh["aux_streams_requested"]
owners = [s["owner"] for s in pl["stream_plan"]["streams"]]
assert owners.count("mtp.layer3") == 3 and owners.count("target") == 3
assert fl["aux_streams_requested"] == 3 * (43 + 1), fl["aux_streams_requested"]
# torch: the whole pool is created, 8 pool streams serve two draws, aliasing starts at N = 10
assert to["stream_source"] == "torch" and to["streams_requested"] == 40 and to["streams_created"] == 32, to
plan = to["stream_plan"]
assert len(plan["aliased"]) == 8 and plan["aliasing_from_mtp_layers"] == 10, plan
assert {"physical": "torch.pool.p0.00", "serves": "target.aux0 + mtp9.aux1"} in plan["aliased"], plan["aliased"]
r = to["predicted_resources"]
assert r["cublas_handles"] == 1 and r["cublas_workspaces"] == 33 and r["cuda_streams"] == 32, r
assert pl["predicted_resources"]["cublas_handles"] == 17, pl["predicted_resources"]
# trtllm-per-layer: flash has 21 compress-4 layers, 3 streams each; the MTP layer (compress 0) none
assert trt["aux_streams_requested"] == 3 * 21, trt["aux_streams_requested"]
for j in (pl, sh, fl, to, trt):
    assert j["hazards"] == [], j["hazards"][:3]
    layers = [l["layer"] for l in j["layers"]]
    assert "L2" in layers, layers
    l2 = next(l for l in j["layers"] if l["layer"] == "L2")
    assert l2["type"] == "c4a"
    pa = next(p for p in l2["phases"] if p["phase"] == "phase_a")
    assert len(pa["branches"]) == 3 and pa["forks"] and len(pa["joins"]) == 3, pa
PY
"$bin" schedule --config tiny --policy per-layer --mtp-layers 4 | grep -q "CUDA streams created: 16" || { echo "FAIL: text output"; exit 1; }
"$bin" schedule --config tiny --policy per-layer --mtp-layers 12 --stream-source torch > "$tmp/torch.txt"
grep -q "torch.pool.p0.00 = target.aux0 + mtp9.aux1" "$tmp/torch.txt" || { echo "FAIL: aliasing not listed"; exit 1; }
if "$bin" schedule --stream-source pytorch > "$tmp/err" 2>&1; then echo "FAIL: bad source accepted"; exit 1; fi
echo "schedule: ok"
