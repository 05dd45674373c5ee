#!/usr/bin/env bash
# libFuzzer targets for streamlab's input readers (tests/fuzz, docs/fuzzing.md).
#
#   scripts/fuzz.sh build                   configure + build the targets (clang, ASan + UBSan)
#   scripts/fuzz.sh run TARGET [SECONDS] [libFuzzer args...]
#                                           fuzz one target (default 60 s; 0 = until stopped)
#   scripts/fuzz.sh replay [TARGET]         run each file of tests/fuzz/regressions/<target> and
#                                           the seed corpus once
#   scripts/fuzz.sh ci [SECONDS]            CI: build, fuzz each target SECONDS (default 20),
#                                           replay the regressions; exit 1 on any crash
#   scripts/fuzz.sh long SECONDS DIR        the long run: each target SECONDS in turn (fork mode,
#                                           going on past crashes), from copies of the binaries in
#                                           DIR/bin; logs, corpora and artifacts under DIR;
#                                           FUZZ_TARGETS="a b" for some targets only
#   scripts/fuzz.sh corpus                  rewrite the seed corpora with the project's writers
#
# Targets: kineto_json nsys_sqlite config safetensors npy (tests/fuzz/fuzz_<target>.cpp).
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (default 2), FUZZ_CXX / FUZZ_CC
# (default clang++ / clang; not CXX / CC, which often name gcc). Inputs the fuzzer finds go to
# $FUZZ_BUILD_DIR/corpus/<target> (the committed seeds in tests/fuzz/corpus/<target> are read,
# never written); crashes, timeouts and out-of-memory inputs to $FUZZ_BUILD_DIR/artifacts/<target>/.
# Exit status: 0 passed, 1 a crash (or a build failure), 77 skipped (no clang / libFuzzer here).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
[ $# -gt 0 ] && shift
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${JOBS:-2}
targets=(kineto_json nsys_sqlite config safetensors npy)
# Per-input limits: a slower input is a hang, a larger footprint a memory bug.
limits=(-timeout=10 -rss_limit_mb=2048)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2; }

# Whether clang with libFuzzer is here; says why not. 77 is CTest's "skipped" for the caller.
have_libfuzzer() {
  local cxx=${FUZZ_CXX:-clang++}
  if ! command -v "$cxx" >/dev/null; then
    echo "== fuzz: SKIPPED: $cxx not found (the fuzz targets need clang with libFuzzer; apt-get install clang)"
    return 1
  fi
  local probe
  probe=$(mktemp -d)
  printf '%s\n' '#include <cstdint>' '#include <cstddef>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' > "$probe/p.cpp"
  if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >"$probe/log" 2>&1; then
    echo "== fuzz: SKIPPED: $cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer / sanitizer runtimes missing):"
    sed 's/^/   /' "$probe/log" | head -n 5
    rm -rf "$probe"
    return 1
  fi
  rm -rf "$probe"
}

do_build() {
  have_libfuzzer || exit 77
  export CXX=${FUZZ_CXX:-clang++} CC=${FUZZ_CC:-clang}
  mkdir -p "$build"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    # -O1 -g: libFuzzer's usual choice (fast to build, readable stacks); tests, benchmarks,
    # CUDA and the viewer are not needed.
    cmake -S . -B "$build" -DSTREAMLAB_FUZZ=ON -DSTREAMLAB_CUDA=OFF -DSTREAMLAB_UI=OFF -DSTREAMLAB_TESTS=OFF \
      -DSTREAMLAB_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
      >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
  fi
  cmake --build "$build" -j "$jobs" --target fuzz_targets ${FUZZ_EXTRA_TARGETS:-}
}

dict_args() {  # a dictionary when the target has one
  local d=tests/fuzz/dict/$1.dict
  [ -f "$d" ] && echo "-dict=$d"
  return 0
}

check_target() {
  case " ${targets[*]} " in *" $1 "*) ;; *) echo "unknown target '$1' (one of: ${targets[*]})" >&2; exit 2 ;; esac
}

# fuzz TARGET SECONDS [args...]: one bounded run; the last lines of its log are shown. Returns
# libFuzzer's status (0: nothing found).
fuzz() {
  local t=$1 secs=$2
  shift 2
  check_target "$t"
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t" "$build/logs"
  local time_args=()
  [ "$secs" != 0 ] && time_args=(-max_total_time="$secs")
  local log=$build/logs/$t.log
  echo "== fuzz $t for ${secs}s: $build/fuzz_$t $build/corpus/$t tests/fuzz/corpus/$t ${time_args[*]} ${limits[*]} $(dict_args "$t") $*"
  set +e
  "$build/fuzz_$t" "$build/corpus/$t" "tests/fuzz/corpus/$t" "${time_args[@]}" "${limits[@]}" $(dict_args "$t") \
    -artifact_prefix="$build/artifacts/$t/" -print_final_stats=1 "$@" >"$log" 2>&1
  local rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    echo "== fuzz $t: FAILED (libFuzzer exit $rc); log $log, the input under $build/artifacts/$t/:"
    grep -E "ERROR|SUMMARY|runtime error|fuzz:|Test unit written|terminate|what\(\)" "$log" | head -n 20 | sed 's/^/   /'
    ls -la "$build/artifacts/$t/" | tail -n +2 | sed 's/^/   /'
  else
    grep -E "^stat::|^#[0-9]+ *DONE" "$log" | sed 's/^/   /'
  fi
  return $rc
}

# replay TARGET: every regression input and seed once. Returns nonzero when one fails.
replay() {
  local t=$1 files=()
  check_target "$t"
  shopt -s nullglob
  files=(tests/fuzz/regressions/"$t"/* tests/fuzz/corpus/"$t"/*)
  shopt -u nullglob
  [ ${#files[@]} -eq 0 ] && return 0
  local log=$build/logs/replay_$t.log
  mkdir -p "$build/logs"
  set +e
  "$build/fuzz_$t" "${limits[@]}" "${files[@]}" >"$log" 2>&1
  local rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    echo "== replay $t: FAILED (exit $rc), log $log:"
    grep -E "Running:|ERROR|SUMMARY|runtime error|fuzz:|terminate|what\(\)" "$log" | tail -n 20 | sed 's/^/   /'
  else
    echo "== replay $t: ${#files[@]} inputs (regressions + seeds), no failure"
  fi
  return $rc
}

case "$mode" in
  build) do_build ;;
  run)
    [ $# -ge 1 ] || usage
    t=$1 secs=${2:-60}
    shift $(( $# >= 2 ? 2 : 1 ))
    do_build
    fuzz "$t" "$secs" "$@" || exit 1
    ;;
  replay)
    do_build
    fail=0
    for t in ${1:-${targets[@]}}; do replay "$t" || fail=1; done
    exit $fail
    ;;
  ci)
    secs=${1:-20}
    start=$(date +%s)
    do_build
    fail=()
    for t in "${targets[@]}"; do replay "$t" || fail+=("replay $t"); done
    for t in "${targets[@]}"; do fuzz "$t" "$secs" || fail+=("fuzz $t"); done
    echo "== fuzz ci: $(( $(date +%s) - start )) s in all (build included)"
    if [ ${#fail[@]} -gt 0 ]; then
      echo "== fuzz ci: FAILED: ${fail[*]}"
      echo "   Fix the reader, then add the input to tests/fuzz/regressions/<target>/ (docs/fuzzing.md)."
      exit 1
    fi
    echo "== fuzz ci: passed"
    ;;
  long)
    [ $# -eq 2 ] || usage
    secs=$1 dir=$2
    do_build
    # Copies: fork mode starts its jobs from the binary's path, and build-fuzz may be rebuilt
    # meanwhile.
    run_targets=(${FUZZ_TARGETS:-${targets[@]}})
    mkdir -p "$dir/bin"
    for t in "${run_targets[@]}"; do check_target "$t"; cp "$build/fuzz_$t" "$dir/bin/"; done
    { echo "== scripts/fuzz.sh long $secs $dir: ${run_targets[*]}"
      echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!results' || echo ' (with uncommitted changes)')"
      echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "machine: $(nproc) cores, $(uname -sr)"
      echo "compiler: $(${FUZZ_CXX:-clang++} --version | head -n 1)"; } >> "$dir/provenance.txt"
    for t in "${run_targets[@]}"; do
      mkdir -p "$dir/corpus/$t" "$dir/artifacts/$t" "$build/corpus/$t"
      cmd=("$dir/bin/fuzz_$t" "$dir/corpus/$t" "$build/corpus/$t" "tests/fuzz/corpus/$t" -max_total_time="$secs"
           "${limits[@]}" $(dict_args "$t") -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1
           -artifact_prefix="$dir/artifacts/$t/" -print_final_stats=1)
      echo "command: ${cmd[*]}" >> "$dir/provenance.txt"
      echo "== long run: $t, ${secs}s, started $(date -u +%H:%M:%SZ)"
      "${cmd[@]}" > "$dir/$t.log" 2>&1 || echo "== long run: $t: libFuzzer exit $?"
      grep -E "^#[0-9]+: cov" "$dir/$t.log" | tail -n 1 || true
    done
    echo "== long run: done $(date -u +%H:%M:%SZ)"
    ;;
  corpus)
    FUZZ_EXTRA_TARGETS=fuzz_make_corpus do_build
    "$build/fuzz_make_corpus" tests/fuzz/corpus
    du -sh tests/fuzz/corpus
    ;;
  *) usage ;;
esac
