#!/usr/bin/env bash
# One round on the lent H200 (run through the device tool from the repo root, with .gpu/
# carried; see scripts/gpu_build.sh): GPU tests, sanitizer, model runs at real shapes, writes
# logs and JSON under $OUT. Stages are independent: one failing does not stop the rest; the
# summary at the end lists each stage's exit code.
#   STAGES="tests sanitizer tiny flash" (default: all; `ab` times two builds, see there)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/streamlab-out}
# Logs go to a work folder, packed into $OUT/round.tar.gz at the end (the device tool returns
# at most 8 files); the JSON results are also copied to $OUT as they are.
W=$(mktemp -d)
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
export STREAMLAB_CONFIG_DIR="$PWD/model/configs"
B=${GPU_BIN:-.gpu}
# GPU_PACK: gpu_build.sh's archive (PACK=1), unpacked into $B first (python's lzma: no xz needed).
if [ -n "${GPU_PACK:-}" ]; then
  # (A base build left from an earlier pack on a warm machine must not pass for this one's.)
  rm -rf "$B/base" && mkdir -p "$B" && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$GPU_PACK" "$B" \
    && chmod -R +x "$B" || { echo "gpu_round: cannot unpack $GPU_PACK into $B"; exit 1; }
fi
export LD_LIBRARY_PATH="$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export STREAMLAB_COMMIT="$(head -c 40 $B/COMMIT)$(grep -q dirty $B/COMMIT && echo -dirty)"
# NCCL for the multi-GPU stages: the loader's libnccl.so.2 if it has one, else pip's
# nvidia-nccl-cu13 (what the GPU image holds); NVLink multicast stays off there (KINDS.md).
export NCCL_NVLS_ENABLE=0
if [ -z "${STREAMLAB_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" \
        2>/dev/null || true)
  [ -n "$lib" ] && [ -f "$lib" ] && export STREAMLAB_NCCL_LIBRARY=$lib
fi
# The flash-shaped runs' common arguments, named once (a change of the set-up is one edit):
# streamlab run on flash-6l with the shared policy and 1 MTP layer; bench_decode's spelling of
# the same at context 2048 with 1 draft step (the policy stays per call); the race runs on
# flash-6l-e32 (2 MTP layers of compress 4, 4 decode steps). BENCH_CONTEXT: bench_decode's
# context (default 2048), e.g. to time the FP8 KV caches where their bytes weigh more.
RUN_FLASH=(run --config flash-6l --backend cuda --policy shared --mtp-layers 1)
BENCH_FLASH=(--config=flash-6l --context=${BENCH_CONTEXT:-2048} --mtp-layers=1 --draft-steps=1)
RUN_RACE=(run --config flash-6l-e32 --backend cuda --policy per-layer --mtp-layers 2 --mtp-compress 4 --draft-steps 2
          --context 2048 --steps 4)
stages=${STAGES:-"env tests tiny flash sanitizer trace bench overhead"}
declare -A rc
# run NAME SECONDS CMD...: one stage, bounded in time, its output in $W/NAME.log.
run() { local name=$1 secs=$2; shift 2; echo "=== $name: $*"; timeout "$secs" "$@" > "$W/$name.log" 2>&1; rc[$name]=$?
        tail -n 20 "$W/$name.log"; tar czf "$OUT/round.tar.gz" -C "$W" .; }

for st in $stages; do case $st in
  env)
    { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
      nvcc --version | tail -n 2; cat $B/COMMIT; date -u; } > "$W/provenance.txt" 2>&1
    cat "$W/provenance.txt"; cp "$W/provenance.txt" "$OUT/" ;;
  tests)
    # OPS_FILTER: a gtest filter for the op tests (e.g. the kernels a round changed), OPS_SECONDS the
    # limit of each of OPS_SHARDS shards (default 4) that run side by side (gtest's sharding): most
    # of an op test's time is its CPU reference, so shards use the machine's cores while sharing
    # the GPU. (In one process the whole suite, 925 tests at 25 variant settings, took 292 s on an
    # H200, and 1368 tests at 36 settings ran past 420 s on an H100 at cc6767e.) One shard writes
    # test_cuda_ops.log, more write test_cuda_ops_shardI.log, each with its own exit code.
    nsh=${OPS_SHARDS:-4}; pids=()
    if ! [[ $nsh =~ ^[1-9][0-9]?$ ]]; then
      echo "tests: OPS_SHARDS=$nsh: expected a count of 1 to 99; the op tests did not run"; rc[test_cuda_ops]=2; nsh=0
    fi
    for i in $(seq 0 $((nsh - 1))); do
      log=test_cuda_ops; [ "$nsh" -gt 1 ] && log=test_cuda_ops_shard$i
      echo "=== $log: $B/test_cuda_ops (shard $i of $nsh)"
      GTEST_TOTAL_SHARDS=$nsh GTEST_SHARD_INDEX=$i timeout ${OPS_SECONDS:-360} $B/test_cuda_ops --gtest_brief=1 \
        ${OPS_FILTER:+--gtest_filter=$OPS_FILTER} > "$W/$log.log" 2>&1 & pids+=($!)
    done
    for i in $(seq 0 $((nsh - 1))); do
      log=test_cuda_ops; [ "$nsh" -gt 1 ] && log=test_cuda_ops_shard$i
      wait "${pids[$i]}"; rc[$log]=$?; tail -n 3 "$W/$log.log"
    done
    tar czf "$OUT/round.tar.gz" -C "$W" .
    # MODEL_SECONDS: the model tests' limit (they build the tiny model about 50 times); MODEL_FILTER
    # a gtest filter for them.
    run test_cuda_model ${MODEL_SECONDS:-180} $B/test_cuda_model --gtest_brief=1 ${MODEL_FILTER:+--gtest_filter=$MODEL_FILTER}
    run test_cuda_check 90 $B/test_cuda_check
    run test_nccl 120 $B/test_nccl ;;
  sanitizer)
    # SANITIZER_ARGS: more run arguments (e.g. --weights native for the FP8 and MXFP4 kernels).
    run memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B/streamlab run --config tiny --backend cuda \
      --policy per-layer --steps 2 ${SANITIZER_ARGS:-} ;;
  multi)
    # Expert parallelism over every GPU of this machine, one process per GPU over NCCL (a
    # 1-GPU machine runs only test_nccl's world of one): tiny and flash-6l over N GPUs beside
    # the same runs on one (sampled tokens, decode time; logits of tiny).
    n=$(nvidia-smi -L | wc -l)
    run test_nccl_multi 200 $B/test_nccl
    if [ "$n" -ge 2 ]; then
      run gpus_tiny_1 60 $B/streamlab run --config tiny --backend cuda --steps 4 --dump-logits "$W/tiny_g1.npy" --json
      run gpus_tiny_n 90 $B/streamlab run --config tiny --gpus "$n" --steps 4 --dump-logits "$W/tiny_g$n.npy" --json
      for g in 1 "$n"; do
        if [ "$g" = 1 ]; then where=(--backend cuda); else where=(--gpus "$g"); fi
        run "gpus_flash_$g" 200 $B/streamlab run --config flash-6l "${where[@]}" --policy shared --mtp-layers 1 \
          --batch 8 --context 2048 --steps 8 --json
        sed -n '/^{/,$p' "$W/gpus_flash_$g.log" > "$OUT/gpus_flash_$g.json"
      done
      # Per-rank traces (each rank traces its own GPU), read as one job's ranks.
      run gpus_trace 200 $B/streamlab run --config flash-6l --gpus "$n" --policy shared --mtp-layers 1 --batch 8 \
        --context 2048 --steps 6 --warmup-steps 2 --trace "$W/ep.json"
      ranks=("$W/ep.json"); for r in $(seq 1 $((n - 1))); do ranks+=("$W/ep.rank$r.json"); done
      run gpus_analyze 60 $B/streamlab analyze "${ranks[@]}"
      run gpus_analyze_json 60 $B/streamlab analyze "${ranks[@]}" --json
      sed -n '/^{/,$p' "$W/gpus_analyze_json.log" > "$OUT/gpus_analyze.json"
      rm -f "${ranks[@]}"
      # The stream-policy verdict with the experts split over every GPU (rank 0 timed, eager).
      mkdir -p "$W/cmp_gpus"
      run gpus_compare 560 $B/streamlab compare --gpus "$n" --config flash-6l --mtp-layers 1 --draft-steps 1 --batch 8 \
        --context 2048 --modes eager --policies per-layer,shared --repetitions 3 --steps 20 --out-dir "$W/cmp_gpus"
      cp -r "$W/cmp_gpus" "$OUT/" 2>/dev/null
    fi ;;
  tiny)
    run tiny_eager 25 $B/streamlab run --config tiny --backend cuda --policy shared --steps 4
    run tiny_graph 25 $B/streamlab run --config tiny --backend cuda --policy shared --steps 4 --graph ;;
  trace)
    run trace_tiny 40 $B/streamlab run --config tiny --backend cuda --policy per-layer --steps 4 --warmup-steps 1 \
      --trace "$W/tiny_trace.json" --sqlite "$W/tiny_trace.sqlite"
    nsys=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -n 1)
    run nsys_stats 40 "$nsys" stats -q -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum,cuda_gpu_trace -f csv \
      -o "$W/nsys" "$W/tiny_trace.sqlite"
    run nsys_gaps 20 "$nsys" analyze -r gpu_gaps "$W/tiny_trace.sqlite"
    run analyze_tiny 20 $B/streamlab analyze "$W/tiny_trace.json" --json ;;
  flash)
    run flash6l 150 $B/streamlab run --config flash-6l --backend cuda --policy shared --mtp-layers 4 --mtp-compress 4 \
      --batch 8 --steps 4 --json
    sed -n '/^{/,$p' "$W/flash6l.log" > "$OUT/flash6l.json" ;;
  kernels)
    # The kernel workbench: every kernel variant of the decode GEMMs, the routed experts and
    # sparse attention at flash-6l's decode shapes, checked against the CPU reference and timed
    # with the L2 flushed (GB/s and % of the copy bandwidth measured in the same run).
    run kernels ${KERNELS_SECONDS:-450} $B/bench_kernels --config=flash-6l --batches=1,8 ${KERNELS_ARGS:-} \
      --out="$OUT/kernels.json" ;;
  native)
    # --weights native (FP8 projections and shared expert, MXFP4 routed experts) on flash-6l: a
    # run, then bench_decode's step time against the bytes floor in native bytes, and the same
    # bench in bf16 in this round for the ratio.
    run native_run 150 $B/streamlab "${RUN_FLASH[@]}" --weights native --batch 8 --context 2048 --steps 4 --json
    sed -n '/^{/,$p' "$W/native_run.log" > "$OUT/native_run.json"
    # The same with the FP8 KV caches emulated (--kv-cache fp8: round_fp8_blocks on flash shapes).
    run native_kv8_run 150 $B/streamlab "${RUN_FLASH[@]}" --weights native --kv-cache fp8 --batch 8 --context 2048 \
      --steps 4 --json
    sed -n '/^{/,$p' "$W/native_kv8_run.log" > "$OUT/native_kv8_run.json"
    run bench_native ${NATIVE_BENCH_SECONDS:-200} $B/bench_decode "${BENCH_FLASH[@]}" --weights=native --batches=1,8 \
      --modes=${NATIVE_MODES:-eager,graph} --steps=${NATIVE_STEPS:-20} --out="$OUT/bench_native.json"
    run bench_bf16 ${NATIVE_BENCH_SECONDS:-200} $B/bench_decode "${BENCH_FLASH[@]}" --weights=bf16 --batches=1,8 \
      --modes=${NATIVE_MODES:-eager,graph} --steps=${NATIVE_STEPS:-20} --out="$OUT/bench_bf16.json" ;;
  kv8)
    # The decode floor with the KV caches counted in vLLM's FP8 layout (584 B per entry), the
    # caches' values FP8 (held in bf16 here): graph replay, batch 1 and 8, native weights.
    run bench_native_kv8 ${NATIVE_BENCH_SECONDS:-200} $B/bench_decode "${BENCH_FLASH[@]}" --weights=native \
      --kv-cache=fp8 --batches=1,8 --modes=graph --steps=${NATIVE_STEPS:-20} --out="$OUT/bench_native_kv8.json" ;;
  fp8gemm)
    # Does cuBLASLt run DeepSeek's block-scaled FP8 GEMM here (128x128 weight blocks, 1x128
    # activation groups), with which scale layout, and how fast against bf16.
    run fp8_gemm ${FP8_SECONDS:-300} $B/bench_fp8_gemm --out="$OUT/fp8_gemm.json" ;;
  bench)
    run bench_decode 170 $B/bench_decode --config=flash-6l --batches=1,8 --policy=shared --context=${BENCH_CONTEXT:-4096} \
      --mtp-layers=1 --draft-steps=1 --steps=${BENCH_STEPS:-20} --out="$OUT/decode_floor.json" ;;
  pdlab)
    # Programmatic dependent launch on (default) and off, batch 1 and 8, eager and graph.
    for pdl in on off; do
      run "pdl_$pdl" 150 $B/bench_decode "${BENCH_FLASH[@]}" --kernel-variants=pdl=$pdl --batches=1,8 --modes=eager,graph \
        --policy=shared --steps=${BENCH_STEPS:-20} \
        --out="$W/pdl_$pdl.json"
    done ;;
  ab)
    # Two builds of the same code path against each other (a change that is no variant, e.g. a
    # kernel's loop rewritten): $B/base holds the earlier build's bench_decode and bench_kernels
    # (gpu_build.sh BASE_PACK=...). bench_decode alternates base and new AB_ROUNDS times (default 3:
    # base, new, base2, new2, ...), so that each side is repeated and drift shows; the table reads
    # new against base with base's repeats as the noise. AB_OPS (e.g. moe_experts_mxfp4): the same
    # ops in bench_kernels, once per build. Each bench names its own build's commit.
    if [ ! -x "$B/base/bench_decode" ]; then
      echo "ab: no $B/base/bench_decode (pack the earlier build with gpu_build.sh BASE_PACK=...)"; rc[ab]=1
    else
      mkdir -p "$W/ab"
      for r in $(seq 1 "${AB_ROUNDS:-3}"); do
        sfx=$([ "$r" = 1 ] || echo "$r")
        for side in base new; do
          bin=$B/bench_decode; [ $side = base ] && bin=$B/base/bench_decode
          # The build's own commit (bench_util.h), not the pack's, for the base side.
          run "ab_$side$sfx" ${SWEEP_SECONDS_EACH:-150} env -u STREAMLAB_COMMIT "$bin" "${BENCH_FLASH[@]}" \
            ${AB_ARGS:---weights=native --batches=1,8 --modes=graph} --policy=shared --steps=${BENCH_STEPS:-20} \
            --out="$W/ab/sweep_$side$sfx.json"
        done
      done
      python3 scripts/variant_table.py "$W/ab" --base base --vary commit 2>&1 | tee "$W/ab_table.log"
      for op in ${AB_OPS:-}; do
        for side in base new; do
          bin=$B/bench_kernels; [ $side = base ] && bin=$B/base/bench_kernels
          run "ab_kernels_${op}_$side" ${KERNELS_SECONDS:-150} env -u STREAMLAB_COMMIT "$bin" --config=flash-6l \
            --batches=1,8 --ops="$op" --reps=10 --variants= --out="$W/ab/kernels_${op}_$side.json"
        done
      done
      tar czf "$OUT/round.tar.gz" -C "$W" .
    fi ;;
  variantsweep)
    # bench_decode (batch 1 and 8, eager and graph) once per kernel-variant setting:
    # VARIANT_SWEEP="name:key=v,key2=w name2:..." (--kernel-variants; empty after the colon = the defaults);
    # SWEEP_WEIGHTS=native for the checkpoint's formats. The JSON come back as $OUT/sweep_NAME.json.
    for v in ${VARIANT_SWEEP:-"default:"}; do
      name=${v%%:*}; kv=${v#*:}
      run "sweep_$name" ${SWEEP_SECONDS_EACH:-150} $B/bench_decode "${BENCH_FLASH[@]}" --kernel-variants=$kv \
        --weights=${SWEEP_WEIGHTS:-bf16} --batches=${SWEEP_BATCHES:-1,8} --modes=${SWEEP_MODES:-eager,graph} \
        --policy=shared --steps=${BENCH_STEPS:-20} --out="$OUT/sweep_$name.json"
    done
    # The settings side by side against the first (the defaults), when it ran.
    first=${VARIANT_SWEEP:-"default:"}; first=${first%%:*}
    if [ -f "$OUT/sweep_$first.json" ]; then
      python3 scripts/variant_table.py "$OUT" --base "$first" 2>&1 | tee "$W/variant_table.log"
      tar czf "$OUT/round.tar.gz" -C "$W" .
    fi ;;
  weightsweep)
    # bench_decode once per weight format, WEIGHT_SWEEP="name:format ..." (default: native, the
    # W4A8 experts, native again for the noise), SWEEP_MODES (default graph); $OUT/weights_NAME.json,
    # then their table against the first (scripts/variant_table.py --vary weights).
    for v in ${WEIGHT_SWEEP:-"native:native w4a8:native-w4a8 native2:native"}; do
      name=${v%%:*}; fmt=${v#*:}
      run "weights_$name" ${SWEEP_SECONDS_EACH:-150} $B/bench_decode "${BENCH_FLASH[@]}" --weights=$fmt \
        --batches=${SWEEP_BATCHES:-1,8} --modes=${SWEEP_MODES:-graph} --policy=shared --steps=${BENCH_STEPS:-20} \
        --out="$OUT/weights_$name.json"
    done
    first=${WEIGHT_SWEEP:-"native:"}; first=${first%%:*}
    if [ -f "$OUT/weights_$first.json" ]; then
      python3 scripts/variant_table.py "$OUT" --prefix weights_ --vary weights --base "$first" 2>&1 \
        | tee "$W/weights_table.log"
      tar czf "$OUT/round.tar.gz" -C "$W" .
    fi ;;
  kvsweep)
    # --kv-cache=fp8 with native weights, the caches packed in FP8 bytes against emulated in bf16
    # (KV_SWEEP="name:variants ...", the first the base), graph mode by default; a flash-6l run with
    # --json (memory, the storage recorded), then scripts/variant_table.py's table of the step
    # times. JSON into the logs archive.
    run kv_run 150 $B/streamlab "${RUN_FLASH[@]}" --weights native --kv-cache fp8 --kernel-variants fp8-kv=packed \
      --batch 8 --context 2048 --steps 4 --json
    for v in ${KV_SWEEP:-packed:fp8-kv=packed emulated:fp8-kv=emulated}; do
      name=${v%%:*}; kv=${v#*:}
      run "kv_$name" ${SWEEP_SECONDS_EACH:-150} $B/bench_decode "${BENCH_FLASH[@]}" --kernel-variants=$kv \
        --weights=native --kv-cache=fp8 --batches=${SWEEP_BATCHES:-1,8} --modes=${SWEEP_MODES:-graph} \
        --policy=shared --steps=${BENCH_STEPS:-20} --out="$W/kv_$name.json"
    done
    first=${KV_SWEEP:-packed:}; first=${first%%:*}
    [ -f "$W/kv_$first.json" ] && python3 scripts/variant_table.py "$W"/kv_*.json --base "kv_$first" 2>&1 |
      tee "$W/kv_table.log"
    tar czf "$OUT/round.tar.gz" -C "$W" . ;;
  policies)
    # bench_decode once per stream policy (batch 1 and 8, eager and graph): what the aux streams
    # and the shared-expert stream cost or buy at decode. POLICIES="serial shared ..."; a name
    # ending in "-nose" runs that policy with the shared expert on the main stream.
    for p in ${POLICIES:-"serial" "shared" "per-layer" "shared-nose"}; do
      extra=""; pol=$p; [[ $p == *-nose ]] && { pol=${p%-nose}; extra=--no-shared-expert-stream; }
      run "policy_$p" 150 $B/bench_decode "${BENCH_FLASH[@]}" --batches=${SWEEP_BATCHES:-1,8} \
        --modes=${SWEEP_MODES:-eager,graph} --policy=$pol $extra \
        --steps=${BENCH_STEPS:-20} --out="$W/policy_$p.json"
    done ;;
  launch)
    # The host's cost per CUDA call (launches with and without PDL, event record / wait, a fork/join).
    run bench_launch 60 $B/bench_launch --out="$OUT/launch_cost.json" ;;
  apisum)
    # Eager flash-6l decode at batch 1, traced: host time per CUDA API call (nsys cuda_api_sum on
    # our SQLite) beside the kernels; what an eager step's enqueue is made of.
    run trace_api_b1 90 $B/streamlab "${RUN_FLASH[@]}" \
      --draft-steps 1 --batch 1 --context 2048 --steps 6 --warmup-steps 2 --sqlite "$W/api_b1.sqlite"
    nsys=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -n 1)
    run api_sum_b1 60 "$nsys" stats -q -r cuda_api_sum -f csv -o "$W/api_b1" "$W/api_b1.sqlite"
    gzip -f "$W/api_b1.sqlite"; tar czf "$OUT/round.tar.gz" -C "$W" . ;;
  graphtrace)
    # Traced graph replay, batch 1: how much of a replayed step the GPU spends between kernels.
    run trace_graph_b1 90 $B/streamlab "${RUN_FLASH[@]}" \
      --draft-steps 1 --batch 1 --context 2048 --steps 6 --warmup-steps 2 --graph --trace "$W/gb1.json"
    run breakdown_graph_b1 30 $B/streamlab analyze "$W/gb1.json" --top 45
    run byop_graph_b1 30 $B/streamlab analyze "$W/gb1.json" --by-op
    rm -f "$W/gb1.json" ;;
  nativetrace)
    # Where a native decode step's time goes: traced graph replay (--weights native), batch 1 and
    # 8, kernel time by op and the largest kernels (analyze --by-op, --top). NATIVE_VARIANTS:
    # --kernel-variants for these runs; NATIVE_WEIGHTS: their format (default native).
    for b in 1 8; do
      run "ntrace_b$b" 120 $B/streamlab "${RUN_FLASH[@]}" --weights ${NATIVE_WEIGHTS:-native} --draft-steps 1 --batch $b --context 2048 \
        --steps 6 --warmup-steps 2 --graph ${NATIVE_VARIANTS:+--kernel-variants "$NATIVE_VARIANTS"} --trace "$W/nb$b.json"
      run "nbyop_b$b" 30 $B/streamlab analyze "$W/nb$b.json" --by-op
      run "ntop_b$b" 30 $B/streamlab analyze "$W/nb$b.json" --top 45
      # The trace itself comes back (gzipped, in round.tar.gz) for analyses after the round.
      gzip -f "$W/nb$b.json"; tar czf "$OUT/round.tar.gz" -C "$W" .
    done ;;
  ncu)
    # Nsight Compute on kernels of bench_kernels runs, NCU_RUNS = "op:batch:variant:skip:count ...":
    # the launches (of the kernels NCU_KERNELS names, a regex) skipped and profiled. bench_kernels
    # launches each shape's op 4 + reps times (a check, 3 warm-ups, the timed runs), shapes in order
    # (gemm_fp8: wq_a, wkv, wq_b, ...), so 12 skips at --reps=2 reach wq_b. The sections say why a
    # kernel is slow: speed of light, memory, occupancy, launch, scheduler and warp-state stalls.
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
    for spec in ${NCU_RUNS:-"gemm_fp8:1:fp8-decode=wide:12:1" "moe_experts_mxfp4:8::0:2"}; do
      IFS=: read -r op bt var skip count <<< "$spec"
      run "ncu_${op}_${bt}_${var//[=,]/_}" ${NCU_SECONDS:-150} "$ncu" --target-processes all \
        -k "regex:${NCU_KERNELS:-gemm_fp8_wide|moe_fp4}" --launch-skip "$skip" --launch-count "$count" \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
        --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis \
        $B/bench_kernels --config=flash-6l --ops=$op --batches=$bt --reps=2 --variants="$var"
    done ;;
  attnsplit)
    # The tensor-core attention's split count (attn-splits; 0 = from the shape, at most 16), batch 8,
    # graph (the batch-1 decode kernel chooses its own splits; at batch 8 on flash-6l the scratch
    # holds at most 7).
    for n in 0 4 7; do
      run attn_split_$n 90 $B/bench_decode "${BENCH_FLASH[@]}" --kernel-variants=attn-splits=$n --batches=8 --modes=graph \
        --policy=shared --steps=20 --out="$W/attn_split_$n.json"
    done ;;
  cublasws)
    # cuBLAS without a workspace (no split-K kernels) against the default 32 MiB, graph replay.
    for kb in 0 32768; do
      run cublas_ws_$kb 120 $B/bench_decode "${BENCH_FLASH[@]}" --kernel-variants=cublas-workspace-kb=$kb --batches=1,8 \
        --modes=graph --policy=shared --steps=20 \
        --out="$W/cublas_ws_$kb.json"
    done ;;
  overhead)
    run trace_overhead 150 $B/bench_trace_overhead --config=flash-2l --batch=8 --context=1024 --steps=20 \
      --out="$OUT/trace_overhead.json" ;;
  overheadvar)
    # What each record kind costs: one process per variant (flash-6l, batch 8, eager unless named).
    for v in ${OVH_VARIANTS:-"default:" "nolat:--no-latency-timestamps" "graph:--graph" \
             "graphnolat:--graph --no-latency-timestamps" "nonvtx:--no-nvtx" "noopranges:--no-op-ranges" \
             "noruntime:--no-runtime"}; do
      run "ovh_${v%%:*}" 120 $B/bench_trace_overhead --config=flash-6l --batch=8 --context=2048 --steps=20 \
        ${v#*:} --out="$W/ovh_${v%%:*}.json"
    done ;;
  flashtrace)
    # A flash-shaped traced decode (per-layer policy, 2 MTP layers), nsys reports on our SQLite.
    run trace_flash 150 $B/streamlab run --config flash-6l --backend cuda --policy per-layer --mtp-layers 2 \
      --draft-steps 2 --batch 8 --context 2048 --steps 4 --warmup-steps 2 --trace "$W/flash_trace.json" \
      --sqlite "$W/flash_trace.sqlite"
    nsys=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -n 1)
    run nsys_flash_stats 60 "$nsys" stats -q -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum -f csv \
      -o "$W/nsys_flash" "$W/flash_trace.sqlite"
    run analyze_flash 30 $B/streamlab analyze "$W/flash_trace.json" --top 40
    run analyze_flash_json 30 $B/streamlab analyze "$W/flash_trace.json" --json
    rm -f "$W/flash_trace.json" "$W/flash_trace.sqlite" ;;
  breakdown)
    # Where decode time goes, per kernel (op kind): traced flash-6l decode steps, batch 1 and 8.
    for b in 1 8; do
      run "trace_b$b" 90 $B/streamlab "${RUN_FLASH[@]}" \
        --draft-steps 1 --batch $b --context 2048 --steps 6 --warmup-steps 2 --trace "$W/b$b.json"
      run "breakdown_b$b" 30 $B/streamlab analyze "$W/b$b.json" --top 45
      rm -f "$W/b$b.json"
    done ;;
  shapes)
    # Real shapes: prefill at 4k and 32k, decode at batch 1, 8, 64, MTP compress 0 and 4.
    run shape_32k_c0 150 $B/streamlab "${RUN_FLASH[@]}" \
      --mtp-compress 0 --batch 1 --context 32768 --steps 3 --json
    run shape_b64_c4 200 $B/streamlab "${RUN_FLASH[@]}" \
      --mtp-compress 4 --batch 64 --context 4096 --steps 3 --json
    run shape_b1_c0 90 $B/streamlab "${RUN_FLASH[@]}" \
      --mtp-compress 0 --batch 1 --context 4096 --steps 3 --json
    run shape_b8_c0 90 $B/streamlab "${RUN_FLASH[@]}" \
      --mtp-compress 0 --batch 8 --context 4096 --steps 3 --json
    run shape_32k_c4 150 $B/streamlab "${RUN_FLASH[@]}" \
      --mtp-compress 4 --batch 1 --context 32768 --steps 3 --json ;;
  nightly)
    # The nightly job (scripts/nightly.sh) on the carried programs: bench_profiler on this
    # machine's CPU, bench_decode / bench_launch / bench_trace_overhead on the GPU, twice
    # (NIGHTS, default 2), the second night compared with the first.
    for n in $(seq ${NIGHTS:-2}); do
      BIN_DIR=$B OUT_ROOT="$W/nightly" REPS=${REPS:-3} run "nightly_$n" 400 bash scripts/nightly.sh
      sleep 1
    done
    cp -r "$W/nightly" "$OUT/" 2>/dev/null ;;
  prefill)
    # Prefill time per token count, serial / shared / shared with phase A always parallel
    # (docs/streams.md, prediction 5). bench_prefill is not in gpu_build.sh's default set (the carry
    # limit): build with EXTRA_TARGETS=bench_prefill and leave the test programs behind.
    # PREFILL_ARGS: more arguments (e.g. --weights=native); PREFILL_SWEEP="name:key=v ..." runs it
    # once per --kernel-variants setting (empty after the colon = the defaults), JSON to
    # $OUT/prefill_NAME.json; PREFILL_SECONDS bounds each run.
    for v in ${PREFILL_SWEEP:-"default:"}; do
      name=${v%%:*}; kv=${v#*:}
      run "prefill_$name" ${PREFILL_SECONDS:-500} $B/bench_prefill --config=flash-6l \
        --tokens=${PREFILL_TOKENS:-256,1024,2048,4096,8192} --reps=${PREFILL_REPS:-5} ${PREFILL_ARGS:-} \
        --kernel-variants=$kv --out="$OUT/prefill_$name.json"
    done ;;
  setup)
    # What each stream policy costs at load and in the graph (docs/streams.md, predictions 1, 3, 4):
    # tiny config, 4 MTP layers (compress 4), graph replay; per policy SETUP_REPS processes
    # (streams created and their host time, library memory, graph nodes / edges, step times).
    for p in ${SETUP_POLICIES:-serial global shared per-layer per-layer-all pool:6}; do
      for r in $(seq ${SETUP_REPS:-2}); do
        run "setup_${p/:/}_$r" 60 $B/streamlab run --config tiny --backend cuda --policy $p --mtp-layers 4 \
          --mtp-compress 4 --draft-steps 4 --steps 3 --graph --json
        sed -n '/^{/,$p' "$W/setup_${p/:/}_$r.log" > "$W/setup_${p/:/}_$r.json"
      done
    done ;;
  queues)
    # Hardware queues (docs/streams.md, prediction 2). QUEUE_PARTS picks: `probe` = bench_queues once
    # per CUDA_DEVICE_MAX_CONNECTIONS setting (QUEUE_SETTINGS, one process each; and unset);
    # `model` = decode with 4 MTP layers (compress 4, so their aux streams get work) under
    # per-layer and shared streams at QUEUE_MODEL_SETTINGS; `trace` = the same traced, eager,
    # at 4 queues, with `streamlab analyze` (suspected false dependencies).
    parts=${QUEUE_PARTS:-"probe model trace"}
    if [[ $parts == *probe* ]]; then
      for q in ${QUEUE_SETTINGS:-1 2 4 8 16 32}; do
        CUDA_DEVICE_MAX_CONNECTIONS=$q run "queues_$q" 60 $B/bench_queues --out="$W/queues_$q.json"
      done
      run queues_unset 60 env -u CUDA_DEVICE_MAX_CONNECTIONS $B/bench_queues --out="$W/queues_unset.json"
    fi
    if [[ $parts == *model* ]]; then
      for q in ${QUEUE_MODEL_SETTINGS:-4 8 32}; do
        for p in per-layer shared; do
          CUDA_DEVICE_MAX_CONNECTIONS=$q run "queue_model_${q}_$p" 150 $B/bench_decode --config=flash-6l \
            --batches=1,8 --modes=eager,graph --policy=$p --context=2048 --mtp-layers=4 --mtp-compress=4 \
            --draft-steps=4 --steps=${BENCH_STEPS:-20} --out="$W/queue_model_${q}_$p.json"
        done
      done
    fi
    if [[ $parts == *trace* ]]; then
      for p in per-layer shared; do
        CUDA_DEVICE_MAX_CONNECTIONS=${QUEUE_TRACE_SETTING:-4} run "queue_trace_$p" 150 $B/streamlab run --config flash-6l \
          --backend cuda --policy $p --mtp-layers 4 --mtp-compress 4 --draft-steps 4 --batch 1 --context 2048 \
          --steps 4 --warmup-steps 2 --trace "$W/queue_trace_$p.json"
        run "queue_analyze_$p" 60 $B/streamlab analyze "$W/queue_trace_$p.json" --top 10
        gzip -f "$W/queue_trace_$p.json"
      done
    fi ;;
  torchpool)
    # The torch stream source against PyTorch itself (experiments/peer/torch_stream_pool.py): the
    # same 40 draws (per-layer, 12 MTP layers of compress 4, 12 draft steps), counted by streamlab
    # and by torch.cuda.Stream() with a GEMM on every drawn stream.
    for src in torch cuda; do
      run "pool_run_$src" 90 $B/streamlab run --config tiny --backend cuda --policy per-layer --mtp-layers 12 \
        --mtp-compress 4 --draft-steps 12 --steps 3 --graph --stream-source $src --json
      sed -n '/^{/,$p' "$W/pool_run_$src.log" > "$OUT/pool_run_$src.json"
    done
    run torch_pool 120 python3 experiments/peer/torch_stream_pool.py --streamlab "$OUT/pool_run_torch.json" \
      --out "$OUT/torch_pool_check.json" ;;
  sources)
    # per-layer vs shared under both stream sources, both placements and both graph scopes,
    # at 1, 4 and 12 MTP layers, MTP compress 0 and 4, batch 1, one sweep. flash-6l-e32 = flash-6l with
    # 32 routed experts, so that 12 MTP layers fit (a decode token reads 6 experts either way).
    mkdir -p "$W/sweep"
    run sources_sweep ${SOURCES_SECONDS:-540} $B/streamlab sweep --config ${SOURCES_CONFIG:-flash-6l-e32} --context 2048 \
      --policies per-layer,shared --mtp-layers ${SOURCES_N:-1,4,12} --mtp-compress 0,4 --connections 0 \
      --modes ${SOURCES_MODES:-eager,graph} --batches 1 --sources cuda,torch --placements vllm-fix,vllm-head \
      --graph-scopes step,split --steps ${SOURCES_STEPS:-10} --warmup 3 --out-dir "$W/sweep"
    tar czf "$OUT/sources_sweep.tar.gz" -C "$W" sweep ;;
  sourcecompare)
    # streamlab compare, per-layer against shared, once per stream source (SOURCE_COMPARE_ARGS
    # for the model: default 12 MTP layers of compress 4 on flash-6l-e32, past the pool's 32).
    for src in ${COMPARE_SOURCES:-torch cuda}; do
      mkdir -p "$W/compare_$src"
      run "compare_$src" ${COMPARE_SECONDS:-240} $B/streamlab compare --config flash-6l-e32 --policies per-layer,shared \
        --stream-source $src ${SOURCE_COMPARE_ARGS:---mtp-layers 12 --draft-steps 12 --mtp-compress 4} \
        --out-dir "$W/compare_$src"
      tar czf "$OUT/compare_$src.tar.gz" -C "$W" "compare_$src"
    done ;;
  races)
    # The planted missing join (check-races' first fault) run for real: RACE_TRIALS processes with
    # it and one without, eager and graph; how often the tokens / logits differ from the clean
    # run. Then compute-sanitizer memcheck over every policy, and racecheck (shared memory) once.
    for mode in eager graph; do
      g=""; [ $mode = graph ] && g=--graph
      run "race_clean_$mode" 60 $B/streamlab "${RUN_RACE[@]}" $g --json
      for t in $(seq ${RACE_TRIALS:-10}); do
        run "race_planted_${mode}_$t" 60 $B/streamlab "${RUN_RACE[@]}" $g --json --plant missing-join
      done
    done
    for p in ${SANITIZER_POLICIES:-serial per-layer shared global per-layer-all trtllm-per-layer pool:2}; do
      run "memcheck_${p/:/}" 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/streamlab run --config tiny \
        --backend cuda --policy $p --mtp-layers 2 --mtp-compress 4 --draft-steps 2 --steps 2 --placement vllm-head
    done
    run memcheck_torch 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/streamlab run --config tiny \
      --backend cuda --policy per-layer --stream-source torch --mtp-layers 12 --mtp-compress 4 --draft-steps 12 --steps 1
    run racecheck_shared 240 compute-sanitizer --tool racecheck --error-exitcode 9 $B/streamlab run --config tiny \
      --backend cuda --policy shared --mtp-layers 1 --mtp-compress 4 --steps 1 ;;
  racecheck)
    # compute-sanitizer racecheck (shared-memory hazards inside kernels) under every policy, one
    # after another (about 25 s each; seven at once on the one GPU lost two processes without a
    # word).
    for p in ${SANITIZER_POLICIES:-serial per-layer shared global per-layer-all trtllm-per-layer pool:2}; do
      run "racecheck_${p/:/}" ${RACECHECK_SECONDS:-120} compute-sanitizer --tool racecheck --error-exitcode 9 \
        $B/streamlab run --config tiny --backend cuda --policy $p --mtp-layers 2 --mtp-compress 4 --draft-steps 2 \
        --steps 1 --placement vllm-head
    done ;;
  earlyfork)
    # check-races' mtp-early-fork fault run for real: the MTP layers' aux streams start without
    # waiting on the main stream, so the MTP indexer may rewrite the top-k buffer while the
    # target's sparse attention reads it. RACE_TRIALS processes with it, one without; eager and
    # graph. How often the logits differ from the clean run is read from the logs.
    for mode in eager graph; do
      g=""; [ $mode = graph ] && g=--graph
      run "fork_clean_$mode" 60 $B/streamlab "${RUN_RACE[@]}" $g --json
      for t in $(seq ${RACE_TRIALS:-8}); do
        run "fork_planted_${mode}_$t" 60 $B/streamlab "${RUN_RACE[@]}" $g --json --plant mtp-early-fork
      done
    done ;;
  traceload)
    # The JSON loader's speed on the host's cores (3M-event synthetic traces, ours and PyTorch's
    # layout), --check: the same trace as the precise loader; and its peak memory.
    $B/bench_trace_load --write-synthetic 3000000 "$W/ours.json" > /dev/null
    $B/bench_trace_load --write-pytorch 3000000 "$W/pytorch.json" > /dev/null
    for f in ours pytorch; do
      run "trace_load_$f" 200 $B/bench_trace_load "$W/$f.json" --reps 5 --check
      for th in 1 8; do run "trace_load_${f}_t$th" 200 $B/bench_trace_load "$W/$f.json" --reps 5 --threads $th; done
    done
    rm -f "$W/ours.json" "$W/pytorch.json" ;;
  pro)
    # The 90-stream case: V4 Pro's 61 layers (30 compress-4) with 8 routed experts so that it fits,
    # TensorRT-LLM's per-layer streams against one stream set per role.
    mkdir -p "$W/pro"
    run pro_compare 500 $B/streamlab compare --config pro-lite --policies shared,trtllm-per-layer -r ${PRO_REPS:-3} \
      --steps 10 --warmup 3 --mtp-layers 1 --mtp-compress 0 --draft-steps 1 --context 2048 --no-trace \
      --out-dir "$W/pro" ${PRO_ARGS:-}
    tar czf "$OUT/pro_compare.tar.gz" -C "$W" pro ;;
  compare)
    # The verdict as one command (README quick start (a) on a GPU): streamlab compare with its
    # defaults; the report folder comes back as compare.tar.gz (results/compare/ in the repo).
    mkdir -p "$W/compare"
    run compare ${COMPARE_SECONDS:-400} $B/streamlab compare --out-dir "$W/compare" ${COMPARE_ARGS:-}
    tar czf "$OUT/compare.tar.gz" -C "$W" compare ;;
  sweep)
    # streamlab sweep over SWEEP_ARGS, stopped after SWEEP_SECONDS (SIGTERM: the cells done so
    # far stay); SWEEP_RESUME=folder (carried from an earlier call) continues that sweep.
    mkdir -p "$W/sweep"
    if [ -n "${SWEEP_RESUME:-}" ]; then
      cp -r "$SWEEP_RESUME" "$W/sweep/"
      run sweep ${SWEEP_SECONDS:-400} $B/streamlab sweep --resume "$W/sweep/$(basename "$SWEEP_RESUME")"
    else
      run sweep ${SWEEP_SECONDS:-400} $B/streamlab sweep --out-dir "$W/sweep" ${SWEEP_ARGS:-}
    fi
    tar czf "$OUT/sweep.tar.gz" -C "$W" sweep ;;
  hfpeer)
    # The peer round's own test on the tiny config with the torch + transformers installed here:
    # the HF stages run for real (on the CPU), which the development machine cannot do.
    run hf_round_test 240 python3 tests/peer/test_hf_round.py cpu $B/streamlab ;;
  hf)
    run hf_round 575 env BIN=$B OUT="$W/hf" DEADLINE=${HF_DEADLINE:-540} bash scripts/hf_round.sh
    cp "$W"/hf/hf_compare.json "$OUT/" 2>/dev/null ;;
  *) echo "unknown stage $st" ;;
esac; done
echo "=== summary (exit codes; 124 = stage timed out)"
for k in "${!rc[@]}"; do echo "$k ${rc[$k]}"; done | sort | tee "$W/summary.txt"
tar czf "$OUT/round.tar.gz" -C "$W" .
