#!/usr/bin/env bash
# `streamlab check-races`: clean schedules under every policy, source and placement (and the
# verifying step) have no race; faults planted on purpose are caught and named.
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. No race anywhere the model is right (MTP layers compressed by 4 so that they use their aux
#    streams; the torch source at 12 MTP layers aliases 8 pool streams).
# pool:1 puts every role of every layer on one aux stream (two roles, one stream: serialised, not racing).
for pol in serial per-layer shared global per-layer-all trtllm-per-layer pool:2 pool:1; do
  for pl in vllm-fix vllm-head; do
    "$bin" check-races --policy $pol --placement $pl --mtp-layers 2 --draft-steps 2 --mtp-compress 4 > "$tmp/o" \
      || { cat "$tmp/o"; fail "$pol $pl: races reported on a correct schedule"; }
  done
done
"$bin" check-races --policy per-layer --stream-source torch --mtp-layers 12 --draft-steps 12 --mtp-compress 4 \
  --placement vllm-head > "$tmp/o" || { cat "$tmp/o"; fail "torch-source aliasing reported as a race"; }
"$bin" check-races --policy per-layer --mtp-layers 2 --draft-steps 2 --mtp-compress 4 --verify on --accept 1 \
  > "$tmp/o" || { cat "$tmp/o"; fail "the verifying step reported races"; }
grep -q "verifying" "$tmp/o" || fail "the verifying step was not checked"

# 2. Planted faults: exit 1, each race naming both ops, their layers, streams and the buffer.
expect_race() {  # WANT ARGS...
  local want=$1; shift; local rc=0
  "$bin" check-races "$@" > "$tmp/o" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { cat "$tmp/o"; fail "check-races $*: exit $rc, expected 1"; }
  grep -q -- "$want" "$tmp/o" || { cat "$tmp/o"; fail "check-races $*: no '$want'"; }
}
# A missing join before the sparse attention: the indexer's top-k (aux0) is read unordered.
expect_race "read-after-write on topk_indices: 'indexer_topk' (prefill/target/L2.c4a/attn/phase_b, target.aux0) is not ordered before 'sparse_attention' (prefill/target/L2.c4a/attn, main)" \
  --plant missing-join
# The join's event re-recorded by the waiting stream before its wait: the same race, under vllm-head
# too (its scoring runs on main, so the indexer's compressor entries are what race there).
expect_race "read-after-write on topk_indices" --plant rerecord
expect_race "is not ordered before 'indexer_topk'" --plant rerecord --placement vllm-head
# Two MTP layers writing the same top-k buffer on different streams without ordering.
expect_race "write-after-write on topk_indices: 'indexer_topk' (prefill/draft0/mtp0.c4a/attn/phase_b, mtp0.aux0) is not ordered before 'indexer_topk' (prefill/draft1/mtp1.c4a/attn/phase_b, mtp1.aux0)" \
  --plant mtp-missing-join --policy per-layer --mtp-layers 2 --mtp-compress 4 --draft-steps 2
# The MTP layers' aux work started without waiting for the main stream: the MTP indexer rewrites
# the top-k buffer that the target's sparse attention still reads (target and MTP share it).
expect_race "write-after-read on topk_indices: 'sparse_attention' (prefill/target/L4.c4a/attn, main) is not ordered before 'indexer_topk' (prefill/draft0/mtp0.c4a/attn/phase_b, mtp0.aux0)" \
  --plant mtp-early-fork --policy per-layer --mtp-layers 1 --mtp-compress 4 --draft-steps 1
"$bin" check-races --plant missing-join --json > "$tmp/j.json" || true
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['races'] > 0 and j['parts'][0]['races'], j" "$tmp/j.json"
if "$bin" check-races --plant nonsense > "$tmp/o" 2>&1; then fail "an unknown fault was accepted"; fi
# A fault with no site under the policy (serial: no aux stream; MTP compress 0: no MTP aux work)
# plants nothing: exit 2 and say so, not a "no race" (0) or the races-found status (1).
for args in "--plant missing-join --policy serial" "--plant mtp-missing-join --mtp-compress 0"; do
  rc=0; "$bin" check-races $args > "$tmp/o" 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "check-races $args: status $rc, expected 2: $(cat "$tmp/o")"
  grep -q "nothing was planted" "$tmp/o" || fail "check-races $args does not say nothing was planted: $(cat "$tmp/o")"
done
echo "check_races: ok"
