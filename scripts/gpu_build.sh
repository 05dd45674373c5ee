#!/usr/bin/env bash
# Builds, on the development machine, what a GPU round needs (preset `gpu`: CUDA + CUPTI, no
# viewer) and gathers the stripped binaries into .gpu/ (git-ignored), the folder the device
# tool carries to the H200 machine (binaries built on Debian 12 with CUDA 13.0 run there);
# PACK=1 also packs them into .gpu-pack/bins.txz, small enough to carry.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
# BUILD_DIR: another build folder configured like the preset (e.g. while build-gpu is busy).
BUILD_DIR=${BUILD_DIR:-build-gpu}
if [ "$BUILD_DIR" = build-gpu ]; then cmake --preset gpu >/dev/null
else cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSTREAMLAB_UI=OFF >/dev/null; fi
targets=(streamlab test_cuda_ops test_cuda_model test_cuda_check test_nccl bench_decode bench_kernels bench_fp8_gemm bench_trace_overhead bench_launch bench_profiler bench_queues
         ${EXTRA_TARGETS:-})
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"
rm -rf .gpu && mkdir -p .gpu
for t in "${targets[@]}"; do
  [ -f "$BUILD_DIR/$t" ] && cp "$BUILD_DIR/$t" .gpu/ && strip .gpu/"$t"
done
# Debian shared libraries the GPU machine lacks (it cannot install packages): Google Benchmark
# and simdjson travel with the binaries (gpu_round.sh puts .gpu on LD_LIBRARY_PATH).
for t in "${targets[@]}"; do
  [ -f ".gpu/$t" ] || continue
  ldd ".gpu/$t" | awk '/libbenchmark|libsimdjson/ {print $3}' | while read -r lib; do cp -L "$lib" .gpu/; done
done
git rev-parse HEAD > .gpu/COMMIT
git diff --quiet HEAD || echo "dirty" >> .gpu/COMMIT
du -sh .gpu; ls -la .gpu
# The device tool carries at most 64 MiB with the tracked tree (45 MB on 2026-12-07, 41 MB of it
# results; the recorded compare folders keep summary.json gzipped to stay so), so
# the binaries travel as one solid xz archive (they share most of their code: about 6.4 MB for all
# of them): .gpu-pack/bins.txz, which gpu_round.sh unpacks when GPU_PACK names it. PACK_ONLY packs
# only the binaries it names (e.g. PACK_ONLY="streamlab" for compare rounds, about 4 MB), with
# COMMIT and the shared libraries, when the whole set would not fit beside the tree.
# BASE_PACK=FILE (an earlier bins.txz, copied aside before the change): its bench_decode,
# bench_kernels and COMMIT go into .gpu/base/ and travel in the same archive, for gpu_round.sh's
# stage `ab` (two builds of one code path timed against each other in one call). The archive's
# dictionary spans all of it: with a base the whole archive was 6.7 MB (007c2c8), where the base's
# two binaries alone pack to 5.5 MB. (One thread: about 5 minutes.)
if [ -n "${BASE_PACK:-}" ]; then
  [ -f "$BASE_PACK" ] || { echo "gpu_build: BASE_PACK $BASE_PACK is not a file" >&2; exit 1; }
  mkdir -p .gpu/base
  python3 - "$BASE_PACK" .gpu/base <<'PY' || { echo "gpu_build: cannot take the base build from $BASE_PACK" >&2; exit 1; }
import sys, tarfile
want = {"bench_decode", "bench_kernels", "COMMIT"}
with tarfile.open(sys.argv[1]) as t:
    members = [m for m in t.getmembers() if m.isfile() and m.name.lstrip("./") in want]
    if {m.name.lstrip("./") for m in members} != want:
        sys.exit("the archive lacks one of " + ", ".join(sorted(want)))
    for m in members:
        m.name = m.name.lstrip("./")
        t.extract(m, sys.argv[2])
PY
  echo "base build: $(head -c 12 .gpu/base/COMMIT)"
fi
if [ -n "${PACK:-}" ]; then
  mkdir -p .gpu-pack && rm -f .gpu-pack/bins.txz
  members=(.)
  if [ -n "${PACK_ONLY:-}" ]; then
    members=(COMMIT)
    for t in $PACK_ONLY; do
      [ -f ".gpu/$t" ] || { echo "gpu_build: PACK_ONLY names $t, which is not among the built binaries" >&2; exit 1; }
      members+=("$t")
    done
    for lib in .gpu/*.so*; do [ -f "$lib" ] && members+=("$(basename "$lib")"); done
  fi
  # (Without PACK_ONLY, "." holds the base already.)
  if [ -n "${PACK_ONLY:-}" ] && [ -d .gpu/base ]; then members+=(base); fi
  # One 256 MiB dictionary over the whole archive (xz -9e alone keeps 64 MiB, less than the
  # binaries together), so that code they share is stored once.
  tar cf - -C .gpu "${members[@]}" | xz --lzma2=preset=9e,dict=256MiB -T1 > .gpu-pack/bins.txz
  ls -la .gpu-pack
  # What a device call sends: the tracked and untracked-not-ignored files plus the carried pack,
  # at most 64 MiB. Say so here, before a call is refused for it. The tool counts more than the
  # files' bytes: a tree of 59.5 MB in 3009 files with a 6.4 MB pack was refused, 56.6 MB in about
  # 2990 files with the same pack was not, so each file is counted here with 1 KiB more.
  read -r files tree < <( { git ls-files -z; git ls-files -z --others --exclude-standard; } |
                          du -b --files0-from=- 2>/dev/null | awk '{n++; b += $1} END {print n, b}')
  tree=$((tree + 1024 * files))
  pack=$(stat -c %s .gpu-pack/bins.txz)
  limit=$((64 * 1024 * 1024))
  echo "device call: tree about $((tree / 1048576)) MiB + pack $((pack / 1048576)) MiB of $((limit / 1048576)) MiB"
  if [ $((tree + pack)) -gt "$limit" ]; then
    echo "gpu_build: the tree and the pack are over the device tool's 64 MiB: gzip large results or leave them out" >&2
    exit 1
  fi
fi
