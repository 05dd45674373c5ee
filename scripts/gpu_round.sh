#!/usr/bin/env bash
# One round on the lent H200 (run through the device tool from the repo root, with .gpu/
# carried; see scripts/gpu_build.sh): GPU tests, sanitizer, model runs at real shapes, writes
# logs and JSON under $OUT. Stages are independent: one failing does not stop the rest; the
# summary at the end lists each stage's exit code.
#   STAGES="tests sanitizer tiny flash" (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/streamlab-out}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
export STREAMLAB_CONFIG_DIR="$PWD/model/configs"
B=.gpu
export LD_LIBRARY_PATH="$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export STREAMLAB_COMMIT="$(head -c 40 $B/COMMIT)"
stages=${STAGES:-"env tests sanitizer tiny flash bench"}
declare -A rc
run() { local name=$1; shift; echo "=== $name: $*"; "$@" > "$OUT/$name.log" 2>&1; rc[$name]=$?; tail -n 25 "$OUT/$name.log"; }

for st in $stages; do case $st in
  env)
    { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
      nvcc --version | tail -n 2; cat $B/COMMIT; date -u; } > "$OUT/provenance.txt" 2>&1
    cat "$OUT/provenance.txt" ;;
  tests)
    run test_cuda_ops $B/test_cuda_ops --gtest_brief=1
    run test_cuda_model $B/test_cuda_model --gtest_brief=1 ;;
  sanitizer)
    run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 $B/streamlab run --config tiny --backend cuda \
      --policy per-layer --steps 2 ;;
  tiny)
    run tiny_eager $B/streamlab run --config tiny --backend cuda --policy shared --steps 4
    run tiny_graph $B/streamlab run --config tiny --backend cuda --policy shared --steps 4 --graph ;;
  flash)
    run flash6l $B/streamlab run --config flash-6l --backend cuda --policy shared --mtp-layers 4 --mtp-compress 4 \
      --batch 8 --steps 4 --json
    cp "$OUT/flash6l.log" "$OUT/flash6l.json" ;;
  bench)
    run bench_decode $B/bench_decode --config=flash-6l --batches=1,8 --policy=shared --context=4096 --mtp-layers=1 \
      --draft-steps=1 --steps=20 --out="$OUT/decode_floor.json" ;;
  *) echo "unknown stage $st" ;;
esac; done
echo "=== summary (exit codes)"
for k in "${!rc[@]}"; do echo "$k ${rc[$k]}"; done | sort
