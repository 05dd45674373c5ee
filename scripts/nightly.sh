#!/usr/bin/env bash
# The nightly perf job: runs every Google Benchmark program this machine can run (the profiler's
# and the viewer's everywhere; with a GPU also bench_decode, bench_launch, bench_trace_overhead),
# writes their JSON (--benchmark_out) and the night's provenance to
# results/nightly/<UTC time>-<host>/, and compares each with the newest earlier night of the same
# host that finished clean and measured the same way (scripts/bench_compare.py: median ratio
# new / old, regressions beyond 10 % or the benchmark's own noise). Exit status: 0 no
# regression, 3 a regression, 1 a benchmark failed (the night is kept, marked failed in its
# `status` file, and never used as a baseline), 2 bad setup (no night written).
#
# Night over night, a regression is reported once: the next night compares with the slower
# one. BASELINE=<night folder> pins a reference night instead (for drift).
#
# The policy check: with a GPU (or POLICY_CHECK=cpu: the CPU reference on the tiny config, for
# tests), `streamlab compare` runs its default comparison into <night>/compare/ with
# --fail-if-slower POLICY_PCT (default 2): shared slower than per-layer beyond that is a
# regression (exit 3), and so is the baseline night's shared faster than tonight's by more than
# POLICY_PCT (compare of the two nights' folders). POLICY_CHECK=off skips it; POLICY_REPS sets
# the repetitions (default 5).
#
# Repetitions: bench_compare judges a change against a benchmark's noise only with at least 3
# repetitions a side; with fewer (REPS below 3; the GPU benchmarks, which run once) a change
# beyond THRESHOLD is reported as "noise unknown", not as a regression. A benchmark of the
# baseline night missing tonight counts as a regression.
#
# Interrupted (SIGINT, e.g. Ctrl-C or `kill -INT` to the script alone; SIGTERM; SIGHUP), the
# script stops the running benchmark (its whole process group), removes the unfinished
# `<night>.part` folder and exits 130 / 143 / 129; once the night is complete (renamed from
# .part), it is kept and only its comparisons are cut short. A night killed outright (SIGKILL,
# power) leaves its `.part` folder: the next night of this host removes it, saying so, unless
# another night runs under OUT_ROOT (OUT_ROOT/.nightly.lock tells).
#
# Environment: BUILD_DIR (default build, e.g. from scripts/quickstart.sh), or BIN_DIR: a folder
# of built benchmark programs to run as they are (the GPU machine, which cannot build: the
# `.gpu/` folder of scripts/gpu_build.sh, carried there), OUT_ROOT (default results/nightly),
# REPS (repetitions of the CPU benchmarks, default 5), BASELINE, THRESHOLD (default 0.10),
# STREAMLAB_BENCH_EVENTS (the CPU benchmarks' synthetic trace size, default here 2000000).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BIN_DIR:-${BUILD_DIR:-build}}
out_root=${OUT_ROOT:-results/nightly}
reps=${REPS:-5}
threshold=${THRESHOLD:-0.10}
export STREAMLAB_BENCH_EVENTS=${STREAMLAB_BENCH_EVENTS:-2000000}
bad() { echo "nightly: $*" >&2; exit 2; }
dir=""  # the night's folder (without .part), once named

# Signals. Each child (the build, a benchmark, a compare) runs in a session and process group of
# its own, in the background, and the script waits for it: bash runs a trap only once a
# foreground child has ended (so a SIGINT to the script alone was ignored), but at once during
# `wait`; and a group lets the trap stop the child's own children too (a SIGTERM used to orphan
# the benchmark). Needs setsid (util-linux), as the lock below needs flock.
child=""       # the running child's process group
child_what=""  # what it is, for the message
run_child() {  # run_child WHAT CMD...: CMD's exit status
  setsid "${@:2}" &
  child=$! child_what=$1
  wait "$child"
  local rc=$?
  child=""
  return $rc
}
stop() {  # stop SIGNAL STATUS: the trap of INT, TERM and HUP
  trap '' INT TERM HUP  # a second Ctrl-C does not cut the cleanup short
  if [ -n "$child" ]; then
    kill -TERM -- "-$child" 2>/dev/null
    # 5 s to finish, then SIGKILL: nothing of it may write into the night once it is removed.
    for i in $(seq 50); do kill -0 -- "-$child" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$child" 2>/dev/null
    echo "nightly: $1: stopped $child_what (process group $child)" >&2
  fi
  if [ -n "$dir" ] && [ -d "$dir.part" ]; then
    echo "nightly: $1: removed the unfinished night $dir.part" >&2  # by the EXIT trap, as exit runs it
  elif [ -n "$dir" ] && [ -d "$dir" ]; then
    echo "nightly: $1: the night $dir is complete; its comparisons were cut short" >&2
  else
    echo "nightly: $1: stopped before the night started" >&2
  fi
  exit "$2"
}
trap 'stop SIGINT 130' INT
trap 'stop SIGTERM 143' TERM
trap 'stop SIGHUP 129' HUP
command -v setsid >/dev/null && command -v flock >/dev/null || bad "needs setsid and flock (util-linux)"
[[ $reps =~ ^[1-9][0-9]*$ ]] || bad "REPS must be a positive integer, not '$reps'"
((reps >= 3)) || echo "nightly: REPS=$reps: with fewer than 3 repetitions bench_compare cannot measure the noise;" \
  "a change beyond THRESHOLD is reported as 'noise unknown', not as a regression" >&2
[ -z "${BASELINE:-}" ] || [ -f "${BASELINE%/}/provenance.json" ] || bad "BASELINE $BASELINE is not a night's folder"
if [ -z "${BIN_DIR:-}" ]; then
  [ -f "$build/CMakeCache.txt" ] || bad "no build in $build (run scripts/quickstart.sh, or set BUILD_DIR)"
else
  [ -d "$build" ] || bad "BIN_DIR $build is not a folder"
  # Prebuilt programs bring the shared libraries the machine lacks (scripts/gpu_build.sh).
  export LD_LIBRARY_PATH="$(cd "$build" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export STREAMLAB_CONFIG_DIR=${STREAMLAB_CONFIG_DIR:-$PWD/model/configs}

gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi

# What each benchmark runs with (besides its output files): part of what makes nights comparable.
declare -A args=(
  [bench_profiler]="--benchmark_repetitions=$reps"
  [bench_timeline]="--benchmark_repetitions=$reps"
  [bench_decode]="--config=flash-6l --batches=1,8 --policy=shared --context=2048 --mtp-layers=1 --draft-steps=1 --steps=20"
  [bench_launch]=""
  [bench_trace_overhead]="--config=flash-2l --batch=8 --context=1024 --steps=20"
)
policy=${POLICY_CHECK:-auto}
case $policy in auto) policy=off; ((gpu)) && policy=gpu ;; gpu|cpu|off) ;; *) bad "POLICY_CHECK must be auto, gpu, cpu or off, not '$policy'" ;; esac
policy_pct=${POLICY_PCT:-2}
policy_reps=${POLICY_REPS:-5}
[[ $policy_pct =~ ^[0-9]+([.][0-9]+)?$ ]] && python3 -c "import sys; sys.exit(not 0 <= float(sys.argv[1]) <= 1000)" "$policy_pct" \
  || bad "POLICY_PCT must be a number in 0..1000 (compare --fail-if-slower's range), not '$policy_pct'"
[[ $policy_reps =~ ^[1-9][0-9]*$ ]] || bad "POLICY_REPS must be a positive integer, not '$policy_reps'"
policy_args=(--repetitions "$policy_reps")
[ "$policy" = cpu ] && policy_args+=(--backend cpu --modes eager --config tiny --mtp-layers 2 --draft-steps 2 --context 32 --steps 5)
[ "$policy" = off ] || [ -x "$build/streamlab" ] || bad "POLICY_CHECK=$policy needs $build/streamlab"
[ "$policy" = off ] || args[policy_check]="${policy_args[*]}"
declare -A own_json=([bench_decode]=decode_floor.json [bench_launch]=launch_cost.json [bench_trace_overhead]=trace_overhead.json)
cpu_benches=(bench_profiler bench_timeline)
gpu_benches=(bench_decode bench_launch bench_trace_overhead)
candidates=("${cpu_benches[@]}")
((gpu)) && candidates+=("${gpu_benches[@]}")
targets=()
if [ -z "${BIN_DIR:-}" ]; then
  available=$(cmake --build "$build" --target help 2>/dev/null)
  for b in "${candidates[@]}"; do grep -qw -- "$b" <<< "$available" && targets+=("$b"); done
  ((${#targets[@]})) || bad "$build has no benchmark targets (STREAMLAB_BENCH=OFF?)"
  echo "== building ${targets[*]}"
  run_child "the build" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > /dev/null || bad "the build failed"
else
  for b in "${candidates[@]}"; do [ -x "$build/$b" ] && targets+=("$b"); done
  ((${#targets[@]})) || bad "no benchmark programs in $build"
fi
((gpu)) || echo "== no GPU here: the GPU benchmarks do not run"

host=$(hostname -s 2>/dev/null || echo host)
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
mkdir -p "$out_root" || bad "cannot create $out_root"

# The lock: every night holds OUT_ROOT/.nightly.lock shared while it runs (its children inherit
# it, so a benchmark orphaned by a SIGKILL of the script still holds it); one that gets it
# exclusive knows no other night runs, so the .part folders of this host are left by killed
# nights: it removes them. Only this host's (other hosts may share OUT_ROOT, and the lock speaks
# for this one only) and only names this script makes (<UTC time>-<host>.part). The exclusive
# lock is downgraded before this night's .part exists, so no other night can take it for stale.
exec 9>> "$out_root/.nightly.lock" || bad "cannot open $out_root/.nightly.lock"
if flock -n -x 9; then
  for stale in "$out_root"/[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9][0-9][0-9][0-9][0-9]Z-"$host".part; do
    [ -d "$stale" ] || continue
    rm -rf "$stale" && echo "nightly: removed $stale, left by a night killed before it finished" >&2
  done
else
  echo "nightly: another night is running under $out_root (it holds $out_root/.nightly.lock):" \
    "its timings and these may disturb each other; stale .part folders left alone" >&2
fi
flock -s -w 60 9 || bad "could not lock $out_root/.nightly.lock"

# Nights are named by the second they start: one started in the same second as another (running,
# finished or killed) waits for the next second rather than share or fail on its folder. Not
# mkdir -p: if two still collide, the second fails here instead of sharing.
dir="$out_root/$stamp-$host"
for _ in 1 2 3 4 5; do
  [ -e "$dir" ] || [ -e "$dir.part" ] || break
  sleep 1
  stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
  dir="$out_root/$stamp-$host"
done
mkdir "$dir.part" || bad "cannot create $dir.part"
trap 'rm -rf "$dir.part"' EXIT  # a night that did not finish leaves nothing under its name
if [ -n "${BIN_DIR:-}" ] && [ -f "$build/COMMIT" ]; then
  commit=$(head -c 40 "$build/COMMIT"); grep -q dirty "$build/COMMIT" && commit="$commit (dirty)"
else
  commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || commit="$commit (dirty)"
fi
export STREAMLAB_COMMIT=$commit  # the GPU benchmarks put it in their own JSON
settings=$(for b in "${targets[@]}"; do printf '%s\t%s\n' "$b" "${args[$b]}"; done
           [ "$policy" = off ] || printf 'policy_check\t%s --fail-if-slower %s\n' "${args[policy_check]}" "$policy_pct")
python3 - "$dir.part/provenance.json" "$commit" "$host" "$gpu" "$settings" <<'PY'
import json, os, platform, subprocess, sys, datetime
path, commit, host, gpu, settings = sys.argv[1:]
def run(*cmd):
    try: return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception: return ""
cpu = next((l.split(":", 1)[1].strip() for l in run("lscpu").splitlines() if l.startswith("Model name")), platform.processor())
env = {k: v for k, v in os.environ.items()
       if (k.startswith("STREAMLAB_") and k not in ("STREAMLAB_COMMIT", "STREAMLAB_CONFIG_DIR"))
       or k == "CUDA_DEVICE_MAX_CONNECTIONS"}
p = {"commit": commit, "host": host, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
     "cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
     "gpu": run("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader") if gpu == "1" else None,
     "cuda": (run("nvcc", "--version").splitlines() or [""])[-1] or None,
     "STREAMLAB_BENCH_EVENTS": os.environ.get("STREAMLAB_BENCH_EVENTS"),
     "environment": env,
     "benchmark_args": dict(l.split("\t", 1) for l in settings.splitlines() if l)}
json.dump(p, open(path, "w"), indent=1)
PY
[ -f "$dir.part/provenance.json" ] || bad "could not write provenance.json"

failed=()
for b in "${targets[@]}"; do
  t0=$SECONDS
  # shellcheck disable=SC2206  # the argument strings above are word lists on purpose
  cmd=("$build/$b" ${args[$b]})
  [ -n "${own_json[$b]:-}" ] && cmd+=("--out=$dir.part/${own_json[$b]}")
  echo "== $b ${args[$b]}"
  echo "${cmd[*]}" | sed "s|$dir.part|<night>|g" >> "$dir.part/commands.txt"
  if ! run_child "$b" "${cmd[@]}" --benchmark_out="$dir.part/$b.json" --benchmark_out_format=json; then
    echo "nightly: $b failed" >&2
    failed+=("$b")
    rm -f "$dir.part/$b.json"
  fi
  echo "== $b: $((SECONDS - t0)) s"
done
# The policy check: streamlab compare's default comparison, gated.
policy_regressed=0
if [ "$policy" != off ]; then
  echo "== policy check: streamlab compare ${policy_args[*]} --fail-if-slower $policy_pct"
  mkdir -p "$dir.part/compare"
  echo "streamlab compare ${policy_args[*]} --fail-if-slower $policy_pct" >> "$dir.part/commands.txt"
  run_child "the policy check" "$build/streamlab" compare "${policy_args[@]}" --fail-if-slower "$policy_pct" \
    --out-dir "$dir.part/compare" > "$dir.part/policy_check.txt" 2> "$dir.part/policy_check.log"
  case $? in
    0) echo "== policy check: passed" ;;
    3) policy_regressed=1; echo "== policy check: REGRESSION"; cat "$dir.part/policy_check.log" | grep "slower than" ;;
    *) failed+=(policy_check); tail -5 "$dir.part/policy_check.log" ;;
  esac
  sed -n '/^verdict/,/^$/p' "$dir.part/policy_check.txt"
fi
if ((${#failed[@]})); then echo "failed: ${failed[*]}" > "$dir.part/status"; else echo ok > "$dir.part/status"; fi
mv "$dir.part" "$dir" && trap - EXIT

# The baseline: BASELINE, or the newest earlier night of this host that finished clean and
# measured the same way (hardware, settings, arguments).
comparable() {  # comparable OLD NEW: empty output and status 0 when they are
  python3 - "$1/provenance.json" "$2/provenance.json" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:])
except Exception as e:
    sys.exit("no usable provenance.json (%s)" % e)
keys = ("cpu", "cores", "gpu", "STREAMLAB_BENCH_EVENTS", "environment", "benchmark_args")
diff = [k for k in keys if a.get(k) != b.get(k)]
sys.exit("they differ in " + "; ".join("%s (%s / %s)" % (k, a.get(k), b.get(k)) for k in diff) if diff else 0)
PY
}
baseline=${BASELINE:+${BASELINE%/}}
if [ -z "$baseline" ]; then
  # The earlier nights, newest first, as whole names (an OUT_ROOT with a space split them apart, and
  # no night was ever a baseline).
  nights=()
  for night in "$out_root"/*Z-"$host"; do [ -d "$night" ] && [ "$night" != "$dir" ] && nights+=("$night"); done
  for ((k = ${#nights[@]} - 1; k >= 0; k--)); do
    night=${nights[$k]}
    [ "$(cat "$night/status" 2>/dev/null)" = ok ] || { echo "== skipped $night as a baseline: $(cat "$night/status" 2>/dev/null || echo 'no status')"; continue; }
    if why=$(comparable "$night" "$dir" 2>&1); then baseline=$night; break; fi
    echo "== not compared with $night: $why"
  done
elif ! why=$(comparable "$baseline" "$dir" 2>&1); then
  echo "== warning: BASELINE $baseline was measured differently: $why"
fi
regressed=0
if [ -n "$baseline" ]; then
  echo "== compared with $baseline"
  for f in "$dir"/bench_*.json; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    if [ ! -f "$baseline/$name" ]; then echo "== no baseline for ${name%.json} in $baseline"; continue; fi
    python3 scripts/bench_compare.py "$baseline/$name" "$f" --threshold "$threshold" \
      --json "$dir/compare_$name" | tee "$dir/compare_${name%.json}.txt"
    case ${PIPESTATUS[0]} in 0) ;; 3) regressed=1 ;; *) failed+=("compare:${name%.json}") ;; esac
  done
  # The policies night over night: tonight's shared against the baseline night's.
  old_cmp=; new_cmp=
  for c in "$baseline"/compare/*/; do [ -d "$c" ] && { old_cmp=$c; break; }; done
  for c in "$dir"/compare/*/; do [ -d "$c" ] && { new_cmp=$c; break; }; done
  if [ -n "$old_cmp" ] && [ -n "$new_cmp" ]; then
    for p in ${POLICY_NIGHTLY:-shared per-layer}; do
      run_child "the $p compare" "$build/streamlab" compare "$old_cmp" "$new_cmp" --policy "$p" \
        --fail-if-slower "$policy_pct" > "$dir/compare_policy_$p.txt" 2>&1
      case $? in 0) echo "== $p night over night: no regression beyond $policy_pct %" ;;
                 3) regressed=1; echo "== $p night over night: REGRESSION"; grep "slower than" "$dir/compare_policy_$p.txt" ;;
                 *) failed+=("compare_policy:$p"); tail -3 "$dir/compare_policy_$p.txt" ;; esac
    done
  fi
else
  echo "== no earlier clean, comparable night of $host under $out_root: nothing to compare with"
fi
((policy_regressed)) && regressed=1
echo "== results: $dir ($(cat "$dir/status"))"
((${#failed[@]})) && exit 1
((regressed)) && exit 3
exit 0
