#!/usr/bin/env bash
# `streamlab run --expert-ranks N` as a user runs it: the tiny model's routed experts split over
# 2 and 4 ranks (threads of one process, an in-process all-reduce) give the one-rank logits
# (bit for bit: tiny routes 2 experts per token, and two partial sums add exactly in either
# order), the JSON says how many ranks ran, and what cannot combine with it is refused by name.
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for n in 1 2 4; do
  "$bin" run --config tiny --backend cpu --steps 2 --expert-ranks $n --dump-logits "$tmp/l$n.npy" --json > "$tmp/r$n.json"
done
"$bin" run --config tiny --backend cpu --steps 1 --expert-ranks 4 > "$tmp/text.txt"
grep -q "expert parallelism: 4 ranks in this process, 2 routed experts each" "$tmp/text.txt" || fail "no expert parallelism line"
cmp -s "$tmp/l1.npy" "$tmp/l2.npy" || fail "2 ranks: prefill logits differ from one rank's"
cmp -s "$tmp/l1.npy" "$tmp/l4.npy" || fail "4 ranks: prefill logits differ from one rank's"
python3 - "$tmp" <<'PY'
import json, sys
runs = {n: json.load(open(f"{sys.argv[1]}/r{n}.json")) for n in (1, 2, 4)}
for n, r in runs.items():
    assert r["expert_ranks"] == n, (n, r["expert_ranks"])
    assert len(r["steps"]) == len(runs[1]["steps"]) == 3, (n, len(r["steps"]))
    for a, b in zip(r["steps"], runs[1]["steps"]):
        assert a["logits_checksum"] == b["logits_checksum"], (n, a, b)
        assert a["sampled"] == b["sampled"] and a["drafts"] == b["drafts"], (n, a, b)
PY

# A saved checkpoint loads into each of 2 ranks (every rank reads its own experts and skips the
# others'): the same logits as loading it on one rank.
"$bin" run --config tiny --backend cpu --steps 1 --save-checkpoint "$tmp/full" > /dev/null
"$bin" run --checkpoint "$tmp/full" --backend cpu --steps 1 --json > "$tmp/s1.json"
"$bin" run --checkpoint "$tmp/full" --backend cpu --steps 1 --expert-ranks 2 --json > "$tmp/s2.json"
python3 - "$tmp/s1.json" "$tmp/s2.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["expert_ranks"] == 2 and len(a["steps"]) == len(b["steps"]) == 2
for x, y in zip(a["steps"], b["steps"]):
    assert x["sampled"] == y["sampled"] and x["drafts"] == y["drafts"], (x, y)
    assert x["logits_checksum"] == y["logits_checksum"], (x, y)
PY

# The schedule of rank 0: every MoE layer's all-reduce on the comm stream, forked after the routed
# experts and joined before the sum, with no unordered access (leaving the join out gives 15).
"$bin" schedule --config tiny --expert-ranks 2 --json > "$tmp/sched.json"
"$bin" schedule --config tiny --expert-ranks 2 > "$tmp/sched.txt"
grep -q "comm: routed_experts.all_reduce -> L0.comm_join" "$tmp/sched.txt" || fail "no all-reduce on the comm stream in L0"
python3 - "$tmp/sched.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["hazards"] == [], d["hazards"][:3]
PY

# Refusals, each naming what to change.
expect_error() {  # expect_error WHAT PATTERN ARGS...
  local what=$1 pattern=$2; shift 2
  if "$bin" run --config tiny --steps 1 "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"; then fail "$what: exit 0"; fi
  grep -q -- "$pattern" "$tmp/err.txt" || { cat "$tmp/err.txt" >&2; fail "$what: no '$pattern'"; }
}
expect_error "uneven split" "8 routed experts do not split evenly over 3 ranks" --backend cpu --expert-ranks 3
expect_error "cuda backend" "use --backend cpu" --backend cuda --expert-ranks 2
expect_error "save" "cannot run with --save-checkpoint" --backend cpu --expert-ranks 2 --save-checkpoint "$tmp/ck"
expect_error "graph" "cannot run with --graph" --backend cpu --expert-ranks 2 --graph
expect_error "zero ranks" "expert-ranks" --backend cpu --expert-ranks 0
test ! -e "$tmp/ck" || fail "a refused run wrote a checkpoint"
echo "PASS"
