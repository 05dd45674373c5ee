#!/usr/bin/env bash
# streamlab quick start: installs what is missing (Debian 12 packages), builds, then either
#   scripts/quickstart.sh          runs the main job (streamlab run on the default config), or
#   scripts/quickstart.sh test     runs every test (CTest; GPU tests skip with a reason without a GPU).
# Environment: BUILD_DIR (default build), JOBS (default: all cores), STREAMLAB_CUDA=OFF to skip
# the CUDA backend even when nvcc is present.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
case "$mode" in run|test) ;; *) echo "usage: $0 [run|test]" >&2; exit 2 ;; esac

pkgs=(build-essential cmake pkg-config python3 python3-pip libgtest-dev libbenchmark-dev libsqlite3-dev sqlite3
      nlohmann-json3-dev libcli11-dev libimgui-dev libglfw3-dev libgl-dev xvfb xauth)
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
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTREAMLAB_CUDA="$cuda" >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
echo "== building with $jobs jobs"
cmake --build "$build" -j "$jobs"

if [ "$mode" = run ]; then
  echo "== streamlab run --config tiny --backend cpu"
  "$build/streamlab" run --config tiny --backend cpu
else
  if ! python3 -c "import hta" 2>/dev/null; then
    echo "== installing Holistic Trace Analysis (PyPI) for the HTA cross-check test"
    python3 -m pip install -q holistictraceanalysis || echo "warning: could not install holistictraceanalysis"
  fi
  echo "== ctest (label gpu tests skip without a GPU, and say so)"
  ctest --test-dir "$build" --output-on-failure -j "$jobs"
fi
