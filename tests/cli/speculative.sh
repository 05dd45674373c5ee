#!/usr/bin/env bash
# Speculative decoding from the command line (docs/speculative.md): `run --verify on` with each
# --accept rule, what it reports (accepted drafts per step, committed tokens per second), its
# errors, and `schedule --verify on` listing the verifying step's own ops.
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin" run --help > "$tmp/help.txt"
grep -q -- "--verify" "$tmp/help.txt" && grep -q -- "--accept" "$tmp/help.txt" || fail "--verify/--accept not in --help"
grep -q "off.*(the default" "$tmp/help.txt" || fail "--help does not say which mode is the default"

# Default: no verification, as before; the JSON says so.
"$bin" run --config tiny --backend cpu --steps 2 --json > "$tmp/plain.json"
# Greedy on random weights, a forced count on a batch of two, and seeded random acceptance.
"$bin" run --config tiny --backend cpu --steps 3 --verify on --json > "$tmp/greedy.json"
"$bin" run --config tiny --backend cpu --steps 3 --verify on --accept 5 --draft-steps 3 --batch 2 --json > "$tmp/count.json"
"$bin" run --config tiny --backend cpu --steps 4 --verify on --accept rate:0.5:1 --batch 2 --json > "$tmp/rate.json"
"$bin" run --config tiny --backend cpu --steps 4 --verify on --accept rate:0.5:1 --batch 2 --json > "$tmp/rate2.json"
python3 - "$tmp" <<'PY'
import json, os, sys
d = sys.argv[1]
plain, greedy, count, rate, rate2 = (json.load(open(os.path.join(d, n + ".json")))
                                     for n in ("plain", "greedy", "count", "rate", "rate2"))
assert plain["verify"] is False and plain["accept"] is None, plain
assert all("accepted" not in s for s in plain["steps"]), "a plain run reports no acceptance"
assert plain["decode"]["committed_tokens"] == 2 and "mean_accepted" not in plain["decode"], plain["decode"]

assert greedy["verify"] is True and greedy["accept"] == "greedy", greedy
for s in greedy["steps"][1:]:
    assert len(s["accepted"]) == 1 and 0 <= s["accepted"][0] <= 2, s
    assert s["committed"] == s["accepted"][0] + 1 and s["tokens"] == 3, s
dec = greedy["decode"]
assert dec["committed_tokens"] == sum(s["committed"] for s in greedy["steps"][1:]), dec
assert dec["tokens_per_s"] > 0 and dec["decode_ms"] > 0, dec

# --accept 5 with k = 3: three drafts every step for each sequence, 4 tokens committed each.
assert count["accept"] == "5", count["accept"]
for s in count["steps"][1:]:
    assert s["accepted"] == [3, 3] and s["committed"] == 8 and s["tokens"] == 8, s
assert count["decode"]["mean_accepted"] == 3 and count["decode"]["committed_tokens"] == 24, count["decode"]

# Seeded draws: reproducible, within [0, k], the mean what the steps say.
acc = [a for s in rate["steps"][1:] for a in s["accepted"]]
assert acc == [a for s in rate2["steps"][1:] for a in s["accepted"]], "the same seed must draw the same counts"
assert all(0 <= a <= 2 for a in acc) and len(acc) == 8, acc
assert abs(rate["decode"]["mean_accepted"] - sum(acc) / len(acc)) < 1e-12, rate["decode"]
for x, y in zip(rate["steps"], rate2["steps"]):
    assert x["logits_checksum"] == y["logits_checksum"] and x["drafts"] == y["drafts"]
PY

# Text output: the accepted counts per step and the summary line.
"$bin" run --config tiny --backend cpu --steps 2 --verify on --accept 1 > "$tmp/text.txt"
grep -qE "^1 +decode +3 .*accepted \[1\]" "$tmp/text.txt" || fail "no accepted counts in the step rows"
grep -q "^decode: 4 tokens committed in 2 steps, .* tokens/s, 1.000 drafts accepted" "$tmp/text.txt" \
  || fail "no decode summary"

# Errors name what is wrong.
expect_error() {  # expect_error PATTERN ARGS...
  local pat=$1; shift
  if "$bin" "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"; then fail "accepted: $*"; fi
  grep -q -- "$pat" "$tmp/err.txt" || { cat "$tmp/err.txt" >&2; fail "error for '$*' does not mention '$pat'"; }
}
expect_error "add --verify on" run --config tiny --backend cpu --steps 1 --accept 2
expect_error "rate:R" run --config tiny --backend cpu --steps 1 --verify on --accept rate:2
expect_error "need drafts to verify" run --config tiny --backend cpu --steps 1 --verify on --draft-steps 0

# schedule: the verifying step's ops, recorded on the null backend (flash included), no hazards.
"$bin" schedule --config tiny --verify on | grep -q "bookkeeping ops: accept_drafts x1 .*verify_tokens x1" \
  || fail "schedule does not list the verifying step's ops"
"$bin" schedule --config flash --verify on --mtp-layers 1 --json > "$tmp/fl.json"
python3 - "$tmp/fl.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["verify"] is True and j["hazards"] == [], j["hazards"][:3]
ops = j["verify_ops"]
assert ops["verify_tokens"] == 1 and ops["accept_drafts"] == 1, ops
assert ops["rollback.swa"] == 43 + 1, ops  # every layer's window ring, the MTP layer's too
PY
echo "speculative: ok"
