#!/usr/bin/env bash
# The nightly perf job: runs every Google Benchmark program this machine can run (the profiler's
# and the viewer's everywhere; with a GPU also bench_decode, bench_launch, bench_trace_overhead),
# writes their JSON (--benchmark_out) and the machine's provenance to
# results/nightly/<UTC time>-<host>/, and compares each with the newest earlier night on the
# same host (scripts/bench_compare.py: median ratio new / old, regressions beyond 10 % or the
# benchmark's own noise). Exit status: 0 no regression, 3 a regression, 1 a benchmark failed,
# 2 bad setup.
#
# Environment: BUILD_DIR (default build, e.g. from scripts/quickstart.sh), or BIN_DIR: a folder
# of built benchmark programs to run as they are (the GPU machine, which cannot build: the
# `.gpu/` folder of scripts/gpu_build.sh, carried there), OUT_ROOT (default
# results/nightly), REPS (repetitions of the CPU benchmarks, default 5), BASELINE (a night's
# folder to compare with instead of the newest earlier one), THRESHOLD (default 0.10),
# STREAMLAB_BENCH_EVENTS (bench_profiler's trace size, default here 2000000).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BIN_DIR:-${BUILD_DIR:-build}}
out_root=${OUT_ROOT:-results/nightly}
reps=${REPS:-5}
threshold=${THRESHOLD:-0.10}
export STREAMLAB_BENCH_EVENTS=${STREAMLAB_BENCH_EVENTS:-2000000}
if [ -z "${BIN_DIR:-}" ]; then
  [ -f "$build/CMakeCache.txt" ] || { echo "nightly: no build in $build (run scripts/quickstart.sh, or set BUILD_DIR)" >&2; exit 2; }
else
  [ -d "$build" ] || { echo "nightly: BIN_DIR $build is not a folder" >&2; exit 2; }
  # Prebuilt programs bring the shared libraries the machine lacks (scripts/gpu_build.sh).
  export LD_LIBRARY_PATH="$(cd "$build" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export STREAMLAB_CONFIG_DIR=${STREAMLAB_CONFIG_DIR:-$PWD/model/configs}
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "nightly: REPS must be a positive integer, not '$reps'" >&2; exit 2; }

gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
cpu_benches=(bench_profiler bench_timeline)
gpu_benches=(bench_decode bench_launch bench_trace_overhead)
targets=()
if [ -z "${BIN_DIR:-}" ]; then
  available=$(cmake --build "$build" --target help 2>/dev/null)
  for b in "${cpu_benches[@]}" "${gpu_benches[@]}"; do grep -q "\b$b\b" <<< "$available" && targets+=("$b"); done
  ((${#targets[@]})) || { echo "nightly: $build has no benchmark targets (STREAMLAB_BENCH=OFF?)" >&2; exit 2; }
  echo "== building ${targets[*]}"
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > /dev/null || { echo "nightly: build failed" >&2; exit 2; }
else
  for b in "${cpu_benches[@]}" "${gpu_benches[@]}"; do [ -x "$build/$b" ] && targets+=("$b"); done
  ((${#targets[@]})) || { echo "nightly: no benchmark programs in $build" >&2; exit 2; }
fi

host=$(hostname -s 2>/dev/null || echo host)
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
dir="$out_root/$stamp-$host"
mkdir -p "$dir.part" || exit 2
trap 'rm -rf "$dir.part"' EXIT  # a night that did not finish leaves nothing under its name
if [ -n "${BIN_DIR:-}" ] && [ -f "$build/COMMIT" ]; then
  commit=$(head -c 40 "$build/COMMIT"); grep -q dirty "$build/COMMIT" && commit="$commit (dirty)"
else
  commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || commit="$commit (dirty)"
fi
export STREAMLAB_COMMIT=$commit  # the GPU benchmarks put it in their own JSON
python3 - "$dir.part/provenance.json" "$commit" "$host" "$gpu" <<'PY'
import json, os, platform, subprocess, sys, datetime
path, commit, host, gpu = sys.argv[1:]
def run(*cmd):
    try: return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception: return ""
cpu = next((l.split(":", 1)[1].strip() for l in run("lscpu").splitlines() if l.startswith("Model name")), platform.processor())
p = {"commit": commit, "host": host, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
     "cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
     "gpu": run("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader") if gpu == "1" else None,
     "cuda": (run("nvcc", "--version").splitlines() or [""])[-1] or None,
     "STREAMLAB_BENCH_EVENTS": os.environ.get("STREAMLAB_BENCH_EVENTS")}
json.dump(p, open(path, "w"), indent=1)
PY

failed=0
run_bench() {  # run_bench NAME ARGS...: its table on the console, its JSON in the night's folder
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name $*"
  echo "$build/$name $*" >> "$dir.part/commands.txt"
  if ! "$build/$name" "$@" --benchmark_out="$dir.part/$name.json" --benchmark_out_format=json; then
    echo "nightly: $name failed" >&2; failed=1; rm -f "$dir.part/$name.json"
  fi
  echo "== $name: $((SECONDS - t0)) s"
}
for b in "${targets[@]}"; do
  case $b in
    bench_profiler|bench_timeline) run_bench "$b" --benchmark_repetitions="$reps" ;;
    bench_decode) ((gpu)) && run_bench "$b" --config=flash-6l --batches=1,8 --policy=shared --context=2048 \
                               --mtp-layers=1 --draft-steps=1 --steps=20 --out="$dir.part/decode_floor.json" ;;
    bench_launch) ((gpu)) && run_bench "$b" --out="$dir.part/launch_cost.json" ;;
    bench_trace_overhead) ((gpu)) && run_bench "$b" --config=flash-2l --batch=8 --context=1024 --steps=20 \
                                       --out="$dir.part/trace_overhead.json" ;;
  esac
done
((gpu)) || echo "== no GPU here: the GPU benchmarks did not run"
mv "$dir.part" "$dir" && trap - EXIT

# The newest earlier night of this host, unless BASELINE names one.
baseline=${BASELINE:-}
if [ -z "$baseline" ]; then
  baseline=$(ls -d "$out_root"/*-"$host" 2>/dev/null | grep -v -- "\.part$" | grep -vx -- "$dir" | sort | tail -n 1)
fi
regressed=0
# Nights are comparable when they measured the same thing on the same hardware.
same_setup() {
  python3 - "$baseline/provenance.json" "$dir/provenance.json" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:])
except Exception as e:
    sys.exit("no usable provenance.json (%s)" % e)
diff = [k for k in ("cpu", "cores", "gpu", "STREAMLAB_BENCH_EVENTS") if a.get(k) != b.get(k)]
sys.exit("they differ in " + ", ".join("%s (%s / %s)" % (k, a.get(k), b.get(k)) for k in diff) if diff else 0)
PY
}
if [ -n "$baseline" ] && [ -d "$baseline" ] && ! why=$(same_setup 2>&1); then
  echo "== not compared with $baseline: $why"
  baseline=""
fi
if [ -n "$baseline" ] && [ -d "$baseline" ]; then
  echo "== compared with $baseline"
  for f in "$dir"/bench_*.json; do
    [ -f "$baseline/$(basename "$f")" ] || continue
    python3 scripts/bench_compare.py "$baseline/$(basename "$f")" "$f" --threshold "$threshold" \
      --json "$dir/compare_$(basename "$f")" | tee "$dir/compare_$(basename "$f" .json).txt"
    case ${PIPESTATUS[0]} in 0) ;; 3) regressed=1 ;; *) failed=1 ;; esac
  done
else
  echo "== no earlier night of $host under $out_root: nothing to compare with"
fi
echo "== results: $dir"
((failed)) && exit 1
((regressed)) && exit 3
exit 0
