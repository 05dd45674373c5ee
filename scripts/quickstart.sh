#!/usr/bin/env bash
# streamlab quick start: installs what is missing (Debian 12 packages), builds, then either
#   scripts/quickstart.sh          runs the main job (streamlab compare: per-layer vs shared streams,
#                                  live on a GPU, else the comparison recorded on an H200), or
#   scripts/quickstart.sh test     runs every test (CTest; GPU tests skip with a reason without a GPU).
# Environment: BUILD_DIR (default build), JOBS (default: all cores), STREAMLAB_CUDA=OFF to skip
# the CUDA backend even when nvcc is present.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
case "$mode" in run|test) ;; *) echo "usage: $0 [run|test]" >&2; exit 2 ;; esac

pkgs=(build-essential cmake pkg-config python3 python3-pip python3-venv libgtest-dev libbenchmark-dev libsqlite3-dev sqlite3 zlib1g-dev
      nlohmann-json3-dev libsimdjson-dev libcli11-dev libimgui-dev libglfw3-dev libgl-dev libstb-dev xvfb xauth xdotool)
# The fuzz targets' bounded run (CTest fuzz.bounded, scripts/fuzz.sh ci) needs clang and libFuzzer.
if [ "$mode" = test ]; then pkgs+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

export PATH="/usr/local/cuda/bin:$PATH"
cuda=${STREAMLAB_CUDA:-ON}
if [ "$cuda" = ON ] && ! command -v nvcc >/dev/null; then
  echo "== nvcc not found: building without the CUDA backend (STREAMLAB_CUDA=OFF)"
  cuda=OFF
fi
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
echo "== configuring $build (CUDA $cuda)"
mkdir -p "$build"
py_args=()
if [ "$mode" = test ]; then
  # Holistic Trace Analysis (PyPI) for the HTA cross-check test and numpy for the HF round's test
  # (peer.hf_round_cpu), in a venv of its own (Debian's system python refuses pip installs).
  venv="$build/hta-venv"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import hta, numpy" 2>/dev/null; then
    echo "== installing Holistic Trace Analysis and numpy into $venv"
    { python3 -m venv "$venv" && "$venv/bin/python" -m pip install -q holistictraceanalysis numpy; } \
      || echo "warning: could not install holistictraceanalysis / numpy; the HTA and HF round tests will be skipped"
  fi
  [ -x "$venv/bin/python" ] && py_args=(-DPython3_EXECUTABLE="$(cd "$venv/bin" && pwd)/python")
fi
# CI builds with warnings as errors (CI=true, as .ci/run runs).
werror=OFF; [ "${CI:-}" = true ] && werror=ON
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTREAMLAB_CUDA="$cuda" -DSTREAMLAB_WERROR=$werror "${py_args[@]}" \
  >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
echo "== building with $jobs jobs"
cmake --build "$build" -j "$jobs"

if [ "$mode" = run ]; then
  echo "== streamlab compare"
  "$build/streamlab" compare
else
  echo "== ctest (label gpu tests skip without a GPU, and say so)"
  ctest --test-dir "$build" --output-on-failure -j "$jobs"
fi
