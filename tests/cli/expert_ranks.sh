#!/usr/bin/env bash
# `streamlab run --expert-ranks N` as a user runs it: the tiny model's routed experts split over
# 2 and 4 ranks (threads of one process, an in-process all-reduce) give the one-rank logits
# (bit for bit: tiny routes 2 experts per token, and two partial sums add exactly in either
# order), the JSON says how many ranks ran, and what cannot combine with it is refused by name.
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# kill_rank1 RANKS_TMPDIR LOG PATTERN: once rank 1's process (started with its socket under
# RANKS_TMPDIR) runs and LOG shows PATTERN, SIGKILL it.
kill_rank1() {
  local pid=""
  for _ in $(seq 1 200); do
    pid=$(pgrep -f -- "--rank-of 1:$1" || true)
    [ -n "$pid" ] && grep -q -- "$3" "$2" && break
    sleep 0.05
  done
  [ -n "$pid" ] || fail "rank 1's process never appeared"
  sleep 0.1; kill -9 $pid
}

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

# ... and into 2 ranks that split the attention's heads too: each reads its rows and columns of
# the checkpoint's whole tensors; the same tokens as one rank (the logits differ by fp32 rounding).
"$bin" run --checkpoint "$tmp/full" --backend cpu --steps 1 --expert-ranks 2 --attention-tp --json > "$tmp/s2tp.json"
python3 - "$tmp/s1.json" "$tmp/s2tp.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["attention_tp"] is True and len(a["steps"]) == len(b["steps"]) == 2
for x, y in zip(a["steps"], b["steps"]):
    assert x["sampled"] == y["sampled"] and x["drafts"] == y["drafts"], (x, y)
    assert abs(x["logits_checksum"] - y["logits_checksum"]) <= 1e-4 * max(1.0, abs(x["logits_checksum"])), (x, y)
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

# --expert-scheme all-to-all: 4 sequences over 2 ranks, each rank holding 2 and sending its tokens'
# expert rows to their owners and back. Rank 0 reports its own sequences, whose prefill and decode
# logits are the first rows of the one-rank run of all 4, bit for bit (each expert output is that
# expert on that one row).
"$bin" run --config tiny --backend cpu --batch 4 --steps 2 --dump-logits "$tmp/b4.npy" \
  --dump-decode-logits "$tmp/b4d.npy" > /dev/null
"$bin" run --config tiny --backend cpu --batch 4 --steps 2 --expert-ranks 2 --expert-scheme all-to-all \
  --dump-logits "$tmp/a2a.npy" --dump-decode-logits "$tmp/a2ad.npy" --json > "$tmp/a2a.json" 2> "$tmp/a2a.err"
grep -q "all-to-all scheme: each rank holds 2 of the 4 sequences; rank 0 reports its own" "$tmp/a2a.err" ||
  fail "no all-to-all line"
python3 - "$tmp" <<'PY'
import json, struct, sys
t = sys.argv[1]
def npy(path):  # (shape, raw little-endian float32 bytes) of a version-1 .npy
    b = open(path, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    header = b[10:10 + n].decode()
    shape = eval(header[header.index("(") : header.index(")") + 1])
    return shape, b[10 + n :]
(one_shape, one), (a2a_shape, a2a) = npy(f"{t}/b4.npy"), npy(f"{t}/a2a.npy")
T0, V = one_shape[0] // 4, one_shape[1]
assert a2a_shape == (2 * T0, V), a2a_shape
assert a2a == one[: 2 * T0 * V * 4], "prefill logits of rank 0's sequences differ from the one-rank rows"
(ds, d1), (das, da) = npy(f"{t}/b4d.npy"), npy(f"{t}/a2ad.npy")
row = V * 4
for step in range(2):  # decode rows: one per sequence and step
    assert da[step * 2 * row : (step + 1) * 2 * row] == d1[step * 4 * row : step * 4 * row + 2 * row], step
j = json.load(open(f"{t}/a2a.json"))
assert j["expert_ranks"] == 2 and j["expert_scheme"] == "all-to-all" and j["batch"] == 2, j
PY
"$bin" schedule --config tiny --expert-ranks 2 --expert-scheme all-to-all --json > "$tmp/a2a-sched.json"
python3 - "$tmp/a2a-sched.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["hazards"] == [] and d["expert_scheme"] == "all-to-all", d["expert_scheme"]
PY

# --rank-launch processes: ranks 1 .. N-1 as copies of the command joined through a socket group.
# The logits are the threads' (and one rank's) bit for bit, under both schemes, and nothing is
# left behind in $TMPDIR.
export TMPDIR="$tmp/t"; mkdir -p "$TMPDIR"
for n in 2 4; do
  "$bin" run --config tiny --backend cpu --steps 2 --expert-ranks $n --rank-launch processes \
    --dump-logits "$tmp/p$n.npy" --json > "$tmp/p$n.json"
  cmp -s "$tmp/l1.npy" "$tmp/p$n.npy" || fail "$n rank processes: prefill logits differ from one rank's"
done
"$bin" run --config tiny --backend cpu --batch 4 --steps 2 --expert-ranks 2 --expert-scheme all-to-all \
  --rank-launch processes --dump-logits "$tmp/pa2a.npy" > "$tmp/pa2a.txt"
cmp -s "$tmp/a2a.npy" "$tmp/pa2a.npy" || fail "all-to-all over 2 rank processes: logits differ from threads'"
grep -q "2 ranks as processes (a socket group)" "$tmp/pa2a.txt" || fail "no processes line"
test -z "$(ls -A "$TMPDIR")" || fail "rank processes left $(ls "$TMPDIR") behind"

# --attention-tp: the attention's heads split over the ranks too. Threads and processes give the
# same bits; against one rank the logits differ only by the order of fp32 sums (wo_b summed per
# rank, then over ranks: measured below 1e-6 of the largest logit).
"$bin" run --config tiny --backend cpu --steps 2 --expert-ranks 2 --attention-tp --dump-logits "$tmp/tp.npy" \
  --json > "$tmp/tp.json"
"$bin" run --config tiny --backend cpu --steps 2 --expert-ranks 2 --attention-tp --rank-launch processes \
  --dump-logits "$tmp/tpp.npy" > "$tmp/tpp.txt"
cmp -s "$tmp/tp.npy" "$tmp/tpp.npy" || fail "--attention-tp: processes differ from threads"
grep -q "the attention's 4 heads and 2 output groups split over the 2 ranks (2 and 1 each)" "$tmp/tpp.txt" ||
  fail "no tensor parallelism line"
python3 - "$tmp/tp.npy" "$tmp/l1.npy" "$tmp/tp.json" <<'PY'
import json, struct, sys
def floats(path):
    b = open(path, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    data = b[10 + n:]
    return struct.unpack("<%df" % (len(data) // 4), data)
tp, one = floats(sys.argv[1]), floats(sys.argv[2])
assert len(tp) == len(one)
rel = max(abs(a - b) for a, b in zip(tp, one)) / max(abs(b) for b in one)
assert 0 < rel < 1e-5, rel  # not bit-equal (the split sums in another order) but within fp32 rounding
assert json.load(open(sys.argv[3]))["attention_tp"] is True
print("attention-tp over 2 ranks vs one rank: %.3g of the largest logit" % rel)
PY
"$bin" schedule --config tiny --expert-ranks 2 --attention-tp --json > "$tmp/tp-sched.json"
python3 - "$tmp/tp-sched.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["hazards"] == [] and d["attention_tp"] is True, d["hazards"][:3]
PY

# measure, compare and sweep over ranks (rank 0 timed, the others repeat its steps as processes):
# the split is in every result, and a setting the ranks cannot run is refused before any child.
"$bin" measure --backend cpu --config tiny --modes eager --steps 2 --warmup 1 --expert-ranks 2 --attention-tp \
  --out "$tmp/m2.json" 2> "$tmp/m2.err" || { cat "$tmp/m2.err" >&2; fail "measure over 2 ranks"; }
mkdir -p "$tmp/cmp"
"$bin" compare --backend cpu --config tiny --context 64 --modes eager --policies per-layer,shared --repetitions 1 \
  --no-baseline-twice --steps 2 --warmup 1 --expert-ranks 2 --out-dir "$tmp/cmp" --json > "$tmp/cmp.json" 2> "$tmp/cmp.err" \
  || { tail -20 "$tmp/cmp.err" >&2; fail "compare over 2 ranks"; }
python3 - "$tmp/m2.json" "$tmp/cmp.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["model"]["expert_ranks"] == 2 and m["model"]["attention_tp"] is True, m["model"]
c = json.load(open(sys.argv[2]))
assert c["settings"]["model"]["expert_ranks"] == 2, c["settings"]["model"]
assert "experts split over 2 ranks (rank 0 timed)" in c["settings"]["description"], c["settings"]["description"]
assert len(c["sides"]) == 2, [s["label"] for s in c["sides"]]
PY
if "$bin" compare --backend cpu --config tiny --modes eager,graph --expert-ranks 2 --out-dir "$tmp/cmp" \
   > /dev/null 2> "$tmp/cmpg.err"; then fail "compare over ranks with graphs accepted"; fi
grep -q "only --modes eager (graph capture of the ranks' collectives is not supported yet)" "$tmp/cmpg.err" ||
  { cat "$tmp/cmpg.err" >&2; fail "no word of graph mode over ranks"; }
mkdir -p "$tmp/sw"
"$bin" sweep --backend cpu --config tiny --context 32 --policies per-layer,shared --mtp-layers 1 --mtp-compress 0 \
  --modes eager --batches 1 --connections 0 --steps 2 --warmup 1 --expert-ranks 2 --out-dir "$tmp/sw" > "$tmp/sw.txt" 2>&1 \
  || { tail -20 "$tmp/sw.txt" >&2; fail "sweep over 2 ranks"; }
grep -q "experts split over 2 ranks, rank 0 timed" "$tmp/sw.txt" || { cat "$tmp/sw.txt" >&2; fail "sweep without its split"; }
# A rank of a measurement killed mid-way: measure fails naming it, and writes no measurement.
mkdir -p "$tmp/mt"
TMPDIR="$tmp/mt" "$bin" measure --backend cpu --config tiny --modes eager --steps 3000 --warmup 1 --expert-ranks 2 \
  --out "$tmp/killed.json" > /dev/null 2> "$tmp/mkill.err" &
mpid=$!
kill_rank1 "$tmp/mt" "$tmp/mkill.err" "1 warm-up"
if wait $mpid; then fail "measure finished although rank 1 was killed"; fi
grep -q "rank 1 ended: killed by signal 9" "$tmp/mkill.err" || { cat "$tmp/mkill.err" >&2; fail "measure: no word of the killed rank"; }
test ! -e "$tmp/killed.json" || fail "measure wrote a measurement although a rank was killed"
test -z "$(ls -A "$tmp/mt")" || fail "the killed measurement left $(ls "$tmp/mt") behind"

# A rank killed mid-run: rank 0 fails (no hang), saying which rank was killed and by what, and
# no rank process outlives the run.
"$bin" run --config tiny --backend cpu --steps 3000 --expert-ranks 2 --rank-launch processes \
  > "$tmp/kill.out" 2> "$tmp/kill.err" &
run_pid=$!
kill_rank1 "$TMPDIR" "$tmp/kill.out" "^3 *decode"
if wait $run_pid; then fail "rank 0 finished although rank 1 was killed"; fi
grep -q "rank 1 ended: killed by signal 9" "$tmp/kill.err" || { cat "$tmp/kill.err" >&2; fail "no word of the killed rank"; }
test -z "$(pgrep -f -- "--rank-of 1:$TMPDIR" || true)" || fail "a rank process outlived the run"
test -z "$(ls -A "$TMPDIR")" || fail "the killed run left $(ls "$TMPDIR") behind"
unset TMPDIR

# analyze of a job's traces given in part says which ranks are missing (text and --json).
rt=$(ls results/compare/*/traces/shared.graph.json.gz | head -n 1)
for r in 0 2; do "$bin" export "$rt" --to kineto --rank $r --world-size 3 "$tmp/part$r.json" > /dev/null 2>&1; done
"$bin" analyze "$tmp/part0.json" "$tmp/part2.json" > "$tmp/part.txt"
grep -q "^ranks: 2 traces (not given: rank 1 of the world of 3)$" "$tmp/part.txt" || { head -3 "$tmp/part.txt" >&2; fail "no missing rank"; }
"$bin" analyze "$tmp/part0.json" "$tmp/part2.json" --json > "$tmp/part.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['missing_ranks'] == [1], d['missing_ranks']" "$tmp/part.json"

# Refusals, each naming what to change.
expect_error() {  # expect_error WHAT PATTERN ARGS...
  local what=$1 pattern=$2; shift 2
  if "$bin" run --config tiny --steps 1 "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"; then fail "$what: exit 0"; fi
  grep -q -- "$pattern" "$tmp/err.txt" || { cat "$tmp/err.txt" >&2; fail "$what: no '$pattern'"; }
}
expect_error "uneven split" "8 routed experts do not split evenly over 3 ranks" --backend cpu --expert-ranks 3
expect_error "cuda backend" "add --rank-launch processes (or use --gpus 2)" --backend cuda --expert-ranks 2
expect_error "save" "cannot run with --save-checkpoint" --backend cpu --expert-ranks 2 --save-checkpoint "$tmp/ck"
expect_error "graph" "the CPU backend has no graphs" --backend cpu --expert-ranks 2 --graph
expect_error "gpu graph" "capture of a model split over GPUs" --gpus 2 --graph
expect_error "zero ranks" "expert-ranks" --backend cpu --expert-ranks 0
expect_error "a2a batch" "the batch (3) must be a multiple of 2" --backend cpu --expert-ranks 2 --expert-scheme all-to-all --batch 3
expect_error "a2a native" "runs bf16 weights only" --backend cpu --expert-ranks 2 --expert-scheme all-to-all --batch 2 --weights native
expect_error "bad scheme" "expert-scheme" --backend cpu --expert-ranks 2 --expert-scheme ring
expect_error "bad launch" "rank-launch" --backend cpu --expert-ranks 2 --rank-launch fibers
expect_error "cuda a2a" "runs on the CPU backend only" --backend cuda --expert-ranks 2 --rank-launch processes --expert-scheme all-to-all
expect_error "gpus and backend" "excludes" --gpus 2 --backend cpu
# --gpus 2 here: no GPU (CI), no CUDA in the build, or too few GPUs, each said.
expect_error "gpus" "CUDA device\|without CUDA\|need a GPU each" --gpus 2
expect_error "bad rank-of" "expected RANK:SOCKET" --backend cpu --expert-ranks 2 --rank-of nonsense
expect_error "tp alone" "splits the attention's heads over the ranks of --expert-ranks N" --backend cpu --attention-tp
expect_error "tp a2a" "in the all-gather scheme" --backend cpu --expert-ranks 2 --attention-tp --expert-scheme all-to-all --batch 2
expect_error "tp uneven" "to split evenly" --backend cpu --expert-ranks 4 --attention-tp
test ! -e "$tmp/ck" || fail "a refused run wrote a checkpoint"
echo "PASS"
