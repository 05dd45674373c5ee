#!/usr/bin/env python3
"""The kernel workbench (experiments/bench/cuda/bench_kernels.cpp) without a GPU: --dut=cpu puts a
second CPU backend in the device's place. Checks that every op family and shape of the tiny config
is run and reported, that the bytes each op must move are the ones computed here by hand from the
tiny config (an independent count), and that bad arguments are refused with a message.

usage: test_bench_kernels.py BENCH_KERNELS_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    exe = sys.argv[1]
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "k.json")
        r = subprocess.run([exe, "--dut=cpu", "--config=tiny", "--batches=1,2", "--pos=300", "--reps=2",
                            "--out=" + out], capture_output=True, text=True)
        check(r.returncode == 0, f"workbench exit {r.returncode}: {r.stderr[-2000:]}")
        rows = json.load(open(out))["rows"]
        by = {(x["op"], x["shape"]): x for x in rows}
        # tiny: D=256, q_lora=128, Dh=128, H=4, W=16, index_topk=8, E=8, k=2, F=128, o_groups=2,
        # o_lora=64, indexer 4 heads x 128; 8 GEMM shapes, the same 8 with FP8 weights (every K is a
        # multiple of 128), 1 MoE on bf16, 1 on MXFP4 experts and 1 on MXFP4 experts fed FP8
        # activations, 3 attention modes and 1 hc_pre per batch.
        check(len(rows) == 2 * (8 + 8 + 1 + 1 + 1 + 3 + 1), f"{len(rows)} rows")
        # gemm wq_a at M=1: bf16 weight N*K plus a (M*K) and out (M*N).
        x = by.get(("gemm", "wq_a M=1 N=128 K=256"))
        check(x is not None and x["bytes"] == 2 * (128 * 256 + 256 + 128), f"gemm wq_a bytes {x and x['bytes']}")
        # The same GEMM with FP8 weights: 1 byte per weight, one f32 scale per 128 x 128 block.
        x = by.get(("gemm_fp8", "wq_a M=1 N=128 K=256"))
        check(x is not None and x["bytes"] == 128 * 256 + 4 * 1 * 2 + 2 * (256 + 128), f"gemm_fp8 wq_a bytes {x and x['bytes']}")
        x = by.get(("gemm", "wo_b M=2 N=256 K=128"))
        check(x is not None and x["bytes"] == 2 * (256 * 128 + 2 * 128 + 2 * 256), f"gemm wo_b bytes {x and x['bytes']}")
        # MoE at T=1, k=2: both experts are distinct (one token): 2 experts x 3 matrices of F x D,
        # x and out (T x D bf16 each), ids (i32) and weights (f32).
        x = by.get(("moe_experts", "T=1 k=2 D=256 F=128 E=8"))
        check(x is not None and x["bytes"] == 2 * 3 * 128 * 256 * 2 + 2 * 2 * 256 + 8 * 2, f"moe bytes {x and x['bytes']}")
        # The same MoE on MXFP4 experts: half a byte per weight plus one byte per 32.
        x = by.get(("moe_experts_mxfp4", "T=1 k=2 D=256 F=128 E=8"))
        check(x is not None and x["bytes"] == 2 * 3 * 128 * 256 * (0.5 + 1 / 32) + 2 * 2 * 256 + 8 * 2,
              f"moe mxfp4 bytes {x and x['bytes']}")
        # W4A8 reads the same bytes.
        x = by.get(("moe_experts_w4a8", "T=1 k=2 D=256 F=128 E=8"))
        check(x is not None and x["bytes"] == 2 * 3 * 128 * 256 * (0.5 + 1 / 32) + 2 * 2 * 256 + 8 * 2,
              f"moe w4a8 bytes {x and x['bytes']}")
        # Attention top-k/4 at pos 300: n_c = 301 // 4 = 75 entries, K = min(8, 75) = 8 chosen,
        # window min(16, 301) = 16 keys: q and o (H x Dh bf16 each), 24 keys of Dh, 8 ids.
        x = by.get(("sparse_attention", "top-k/4 B=1 H=4 Dh=128 pos=300"))
        check(x is not None and x["bytes"] == 2 * 2 * 4 * 128 + 2 * 24 * 128 + 4 * 8, f"attn bytes {x and x['bytes']}")
        # all/128: 301 // 128 = 2 entries + 16 window keys, two sequences.
        x = by.get(("sparse_attention", "all/128 B=2 H=4 Dh=128 pos=300"))
        check(x is not None and x["bytes"] == 2 * (2 * 2 * 4 * 128 + 2 * 18 * 128), f"attn all bytes {x and x['bytes']}")
        # hc_pre at B=2: fn (24 x 4D f32), X (B x 4D bf16), y (B x D bf16), post + comb (B x 20 f32).
        x = by.get(("hc_pre", "B=2 D=256"))
        check(x is not None and x["bytes"] == 4 * 24 * 1024 + 2 * 2 * 1024 + 2 * 2 * 256 + 4 * 2 * 20,
              f"hc_pre bytes {x and x['bytes']}")
        for x in rows:
            check(x["passed"] and x["rel_err"] == 0.0, f"{x['op']} {x['shape']}: CPU vs CPU rel err {x['rel_err']}")
            check(len(x["samples_us"]) == 2 and x["median_us"] > 0, f"{x['op']} {x['shape']}: samples")

    for args, needle in [(["--batches=0"], "--batches = 0 is outside"), (["--ops=gemv"], "'gemv' is not one of"),
                         (["--variants=attn-decode=fast"], "attn-decode"), (["--reps=x"], "--reps takes a whole number"),
                         (["--frobnicate"], "unknown argument")]:
        r = subprocess.run([exe, "--dut=cpu", *args], capture_output=True, text=True)
        check(r.returncode == 1 and needle in r.stderr, f"{args}: exit {r.returncode}, stderr {r.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    print(f"{'FAILED' if failures else 'passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
