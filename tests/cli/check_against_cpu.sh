#!/usr/bin/env bash
# `streamlab run --check-against-cpu`: every op compared with the CPU reference on identical
# inputs. CPU against CPU must agree exactly (the GPU runs use --backend cuda the same way).
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Batch 2, one MTP layer of compress ratio 4 (with indexer), 3 draft steps: the report goes to
# stderr, the run's rows to stdout as usual.
"$bin" run --config tiny --backend cpu --batch 2 --mtp-layers 1 --mtp-compress 4 --draft-steps 3 --steps 2 \
  --check-against-cpu > "$tmp/out.txt" 2> "$tmp/report.txt" || { cat "$tmp/report.txt"; fail "exit status $?"; }
grep -cE "^[0-9]+ +decode " "$tmp/out.txt" | grep -qx 2 || fail "want 2 decode rows"
grep -q "backend check(cpu vs cpu)" "$tmp/out.txt" || fail "backend not named"
grep -qE "^check: [0-9]+ op calls, [0-9]+ outputs compared .*: 0 failures" "$tmp/report.txt" || { cat "$tmp/report.txt"; fail "no clean summary"; }
grep -q "worst float rel err 0.000e+00" "$tmp/report.txt" || fail "cpu vs cpu is not exact"
grep -q "^no failure" "$tmp/report.txt" || fail "no 'no failure' line"
grep -q "^worst 20 float op outputs" "$tmp/report.txt" || fail "no worst list"

# --check-print-ops lists every op as it runs, draft steps included.
"$bin" run --config tiny --backend cpu --batch 2 --mtp-layers 1 --mtp-compress 4 --draft-steps 3 --steps 2 \
  --check-against-cpu --check-print-ops > /dev/null 2> "$tmp/ops.txt"
grep -q "^check: #[0-9]* decode#2/draft2/mtp0.c4a/attn/sparse_attention sparse_attention.o \[2, 4, 128\] f32: rel err 0" \
  "$tmp/ops.txt" || fail "--check-print-ops does not list the draft steps' ops"

# --json stays parseable on stdout.
"$bin" run --config tiny --backend cpu --steps 1 --check-against-cpu --check-tolerance 1e-3 --json \
  > "$tmp/a.json" 2> "$tmp/report2.txt"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["backend"]=="check(cpu vs cpu)", j["backend"]' "$tmp/a.json"
grep -q "tolerance 1.0e-03" "$tmp/report2.txt" || fail "--check-tolerance not used"

# Clear errors.
expect_error() { local want=$1; shift; if "$bin" "$@" > "$tmp/out" 2>&1; then fail "succeeded: $*"; fi
  grep -q -- "$want" "$tmp/out" || { cat "$tmp/out"; fail "error for '$*' does not mention '$want'"; }; }
expect_error "cannot run with --graph" run --config tiny --backend cpu --check-against-cpu --graph
expect_error "requires --check-against-cpu" run --config tiny --backend cpu --check-tolerance 0.1
expect_error "must be > 0" run --config tiny --backend cpu --check-against-cpu --check-tolerance 0
echo "check_against_cpu: ok"
