#!/usr/bin/env bash
# `streamlab schedule`: stream counts and owners per policy, fork/join structure, no hazards.
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$bin" schedule --config tiny --policy per-layer --mtp-layers 4 --json > "$tmp/pl.json"
"$bin" schedule --config tiny --policy shared --mtp-layers 4 --json > "$tmp/sh.json"
"$bin" schedule --config flash --policy per-layer-all --mtp-layers 1 --json > "$tmp/fl.json"
python3 - "$tmp" <<'PY'
import json, sys, os
d = sys.argv[1]
pl, sh, fl = (json.load(open(os.path.join(d, n))) for n in ("pl.json", "sh.json", "fl.json"))
assert pl["aux_streams_created"] == 3 + 3 * 4, pl["aux_streams_created"]
assert sh["aux_streams_created"] == 3 + 3, sh["aux_streams_created"]
owners = [s["owner"] for s in pl["streams"]]
assert owners.count("mtp.layer3") == 3 and owners.count("target") == 3
assert fl["aux_streams_created"] == 3 * (43 + 1), fl["aux_streams_created"]
for j in (pl, sh, fl):
    assert j["hazards"] == [], j["hazards"][:3]
    layers = [l["layer"] for l in j["layers"]]
    assert "L2" in layers, layers
    l2 = next(l for l in j["layers"] if l["layer"] == "L2")
    assert l2["type"] == "c4a"
    pa = next(p for p in l2["phases"] if p["phase"] == "phase_a")
    assert len(pa["branches"]) == 3 and pa["forks"] and len(pa["joins"]) == 3, pa
PY
"$bin" schedule --config tiny --policy per-layer --mtp-layers 4 | grep -q "streams created: 16" || { echo "FAIL: text output"; exit 1; }
echo "schedule: ok"
