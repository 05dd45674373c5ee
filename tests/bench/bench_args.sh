#!/usr/bin/env bash
# The GPU benchmarks refuse bad numbers before touching a GPU (this machine needs none): each
# integer flag names itself, the value and its range, and exits non-zero; a stray argument is
# refused too. Usage: bench_args.sh BENCH_DECODE BENCH_PREFILL
set -euo pipefail
decode=$(realpath "$1"); prefill=$(realpath "$2")
. "$(dirname "${BASH_SOURCE[0]}")/../tools/refusals.sh"  # $tmp, fail, expect_error
expect_error "--context=abc: expected an integer in 1 .. 1048576" "$decode" --context=abc
expect_error "--context=2.5: expected an integer in 1 .. 1048576" "$decode" --context=2.5
expect_error "--context=-5: expected an integer in 1 .. 1048576" "$decode" --context=-5
expect_error "--steps=0: expected an integer in 1 .. 100000" "$decode" --steps=0
expect_error "--draft-steps=99999999999: expected an integer in 0 .. 64" "$decode" --draft-steps=99999999999
expect_error "--mtp-layers=: expected an integer in 0 .. 64" "$decode" --mtp-layers=
expect_error "unknown" "$decode" --contxt=2048
expect_error "--reps=x: expected an integer in 1 .. 10000" "$prefill" --reps=x
expect_error "--tokens: 0 is outside 1 .. 65536" "$prefill" --tokens=0
echo "bench_args: ok"
