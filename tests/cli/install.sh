#!/usr/bin/env bash
# `cmake --install` into a prefix of the user's choosing, then the installed binary run the way a
# user runs it: from another directory, with no source tree or config folder to lean on.
set -euo pipefail
bin=$1
build=$(dirname "$bin")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$build/cmake_install.cmake" ] || { echo "SKIP: $build is not a CMake build folder"; exit 0; }

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
installed="$tmp/prefix/bin/streamlab"
[ -x "$installed" ] || fail "no bin/streamlab under the prefix"
ls "$tmp/prefix"/share/doc/streamlab/README.md "$tmp/prefix"/share/doc/streamlab/model.md > /dev/null || fail "docs not installed"

# Runs from an empty directory; STREAMLAB_CONFIG_DIR pointing at an empty folder proves the
# built-in configs come from the binary itself.
mkdir -p "$tmp/elsewhere" "$tmp/noconfigs"
cd "$tmp/elsewhere"
STREAMLAB_CONFIG_DIR="$tmp/noconfigs" "$installed" run --config tiny --backend cpu --steps 1 > run.txt || fail "installed run --config tiny"
grep -q "logits checksum" run.txt || fail "no checksum from the installed binary"
env -u STREAMLAB_CONFIG_DIR "$installed" schedule --config flash-6l --policy shared > /dev/null || fail "installed schedule --config flash-6l"
# The error for an unknown name lists the compiled-in configs.
out=$("$installed" run --config no-such --backend cpu 2>&1) && fail "an unknown config was accepted"
echo "$out" | grep -q "flash-6l" || fail "the error does not list the built-in configs: $out"

# --version: the release, the commit the binary was built from, the CUDA / CUPTI it has.
"$installed" --version > version.txt
head -n 1 version.txt | grep -qE "^streamlab [0-9]+\.[0-9]+\.[0-9]+$" || fail "version line: $(head -n 1 version.txt)"
commit=$(git -C "$(dirname "$0")/../.." rev-parse HEAD 2>/dev/null || echo unknown)
grep -qE "^commit [0-9a-f]{40}(-dirty)?$|^commit unknown$" version.txt || fail "commit line: $(cat version.txt)"
if [ "$commit" != unknown ] && ! grep -q "^commit $commit" version.txt; then
  echo "note: binary built from $(grep ^commit version.txt), tree at $commit (a rebuild refreshes it)"
fi
grep -qE "^built with CUDA [0-9]+\.[0-9]+, CUPTI API [0-9]+$|^built without CUDA" version.txt || fail "CUDA line: $(cat version.txt)"
echo "ok: installed to a prefix, ran from elsewhere; $(tr '\n' ';' < version.txt)"
