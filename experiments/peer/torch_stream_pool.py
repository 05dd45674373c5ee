#!/usr/bin/env python3
"""Check streamlab's `torch` stream source against PyTorch itself.

streamlab's `--stream-source torch` models what `torch.cuda.Stream()` does (docs/streams.md):
a process-wide pool of 32 streams per priority, created together at the first draw, handed out
round-robin (draw 33 is draw 1's stream), one cuBLAS handle per thread and a cuBLAS workspace per
(handle, stream) allocated at the first GEMM on that stream. This script measures those facts in
PyTorch on the GPU it runs on, replays the draws of one streamlab run (the requests of its stream
plan, in order) with a GEMM on each drawn stream, and compares the counts with what the streamlab
run reported (`streamlab run --stream-source torch --json`):

  * distinct CUDA streams among the draws         vs  streamlab's CUDA streams created
  * which draws share a stream (the alias pairs)  vs  streamlab's aliased pool streams
  * cuBLAS workspaces the draws' GEMMs allocated  vs  streamlab's cuBLAS workspaces (minus the
    main stream's, which both have before the first draw) and their size
  * handles: PyTorch keeps one per thread (by construction; not observable from Python), streamlab
    reports its count.

Usage: torch_stream_pool.py --streamlab RUN.json [--out RESULT.json]
Exit codes: 0 all agree; 1 a disagreement (listed); 2 usage / unreadable input; 6 no CUDA / torch.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def fail(code: int, msg: str) -> None:
    print(f"torch_stream_pool: {msg}", file=sys.stderr)
    sys.exit(code)


def pool_facts(torch) -> dict:
    """The pool's behaviour in a fresh process: 40 draws, distinct handles, aliasing, priorities."""
    free0, _ = torch.cuda.mem_get_info()
    t0 = time.perf_counter()
    draws = [torch.cuda.Stream() for _ in range(40)]
    draw_us = (time.perf_counter() - t0) * 1e6 / 40
    free1, _ = torch.cuda.mem_get_info()
    handles = [s.cuda_stream for s in draws]
    high = torch.cuda.Stream(priority=-1)
    return {
        "draws": 40,
        "distinct_streams": len(set(handles)),
        "draw33_is_draw1": handles[32] == handles[0],
        "high_priority_separate": high.cuda_stream not in set(handles),
        "mean_draw_us": round(draw_us, 2),
        "device_bytes_lost_at_first_draws": free0 - free1,
    }


def replay_plan(torch, requests: list[dict]) -> dict:
    """Draw one stream per request in order and run a bf16 GEMM on each, measuring what the
    caching allocator hands to cuBLAS workspaces (the GEMM's own output is freed before the
    reading)."""
    a = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    (a @ b).sum().item()  # the current stream's handle and workspace exist before the first draw
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    base_reserved = torch.cuda.memory_reserved()
    streams = [torch.cuda.Stream() for _ in requests]
    per_gemm = []
    seen = set()
    for s in streams:
        before = torch.cuda.memory_allocated()
        with torch.cuda.stream(s):
            c = a @ b
        torch.cuda.synchronize()
        del c
        grew = torch.cuda.memory_allocated() - before
        if s.cuda_stream not in seen:
            per_gemm.append(grew)
        seen.add(s.cuda_stream)
    total = torch.cuda.memory_allocated() - base
    reserved = torch.cuda.memory_reserved() - base_reserved
    nonzero = [g for g in per_gemm if g > 0]
    ws = max(set(nonzero), key=nonzero.count) if nonzero else 0
    handles = [s.cuda_stream for s in streams]
    first = {}
    pairs = []
    for i, h in enumerate(handles):
        if h in first:
            pairs.append([first[h], i])
        else:
            first[h] = i
    return {
        "draws": len(streams),
        "distinct_streams": len(set(handles)),
        "alias_pairs": pairs,
        "workspace_bytes_total": total,
        "reserved_bytes_growth": reserved,
        "workspace_bytes_each": ws,
        "workspaces": (total // ws) if ws else 0,
    }


def streamlab_facts(run: dict) -> dict:
    plan = run["stream_plan"]
    reqs = plan["streams"]
    index = {r["name"]: i for i, r in enumerate(reqs)}
    pairs = []
    for a in plan["aliased"]:
        names = a["serves"].split(" + ")
        ids = sorted(index[n] for n in names)
        pairs += [[ids[0], j] for j in ids[1:]]
    mem = run["memory"]
    ws = mem.get("cublas_workspaces", 0)
    return {
        "source": run.get("stream_source"),
        "requests": len(reqs),
        "cuda_streams_created": mem.get("cuda_streams_created"),
        "alias_pairs": sorted(pairs),
        "cublas_handles": mem.get("cublas_handles"),
        "cublas_workspaces": ws,
        "workspace_bytes_each": (mem["library_bytes"] // ws) if ws else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streamlab", required=True, help="`streamlab run --stream-source torch --json` output")
    ap.add_argument("--out", help="write the comparison here as JSON")
    args = ap.parse_args()
    try:
        text = open(args.streamlab).read()
        run = json.loads(text[text.index("{"):])
        sl = streamlab_facts(run)
    except (OSError, ValueError, KeyError) as e:
        fail(2, f"cannot read the streamlab run '{args.streamlab}': {e}")
    if sl["source"] != "torch":
        fail(2, f"'{args.streamlab}' is a {sl['source']!r} run; run streamlab with --stream-source torch")
    try:
        import torch
    except ImportError as e:
        fail(6, f"PyTorch is not installed: {e}")
    if not torch.cuda.is_available():
        fail(6, "CUDA is not available to PyTorch")
    pool = pool_facts(torch)
    # streamlab draws every request of its plan; PyTorch's pool is process-wide, so the replay
    # continues its round-robin after pool_facts' 40 default-priority draws (the high-priority
    # draw is another pool): align by drawing up to the next multiple of 32 first.
    for _ in range((-40) % 32):
        torch.cuda.Stream()
    replay = replay_plan(torch, [{}] * sl["requests"])
    problems = []
    if pool["distinct_streams"] != 32 or not pool["draw33_is_draw1"]:
        problems.append(f"PyTorch's pool is not 32 round-robin streams here: {pool}")
    if replay["distinct_streams"] != sl["cuda_streams_created"] and sl["requests"] >= 32:
        problems.append(f"distinct streams: PyTorch {replay['distinct_streams']}, streamlab {sl['cuda_streams_created']}")
    if sorted(replay["alias_pairs"]) != sl["alias_pairs"]:
        problems.append(f"alias pairs: PyTorch {replay['alias_pairs']}, streamlab {sl['alias_pairs']}")
    # Both had the current (main) stream's workspace before the draws.
    if replay["workspaces"] != sl["cublas_workspaces"] - 1:
        problems.append(f"workspaces of drawn streams: PyTorch {replay['workspaces']}, streamlab "
                        f"{sl['cublas_workspaces'] - 1}")
    if replay["workspace_bytes_each"] != sl["workspace_bytes_each"]:
        problems.append(f"workspace size: PyTorch {replay['workspace_bytes_each']}, streamlab "
                        f"{sl['workspace_bytes_each']}")
    if sl["cublas_handles"] != 1:
        problems.append(f"streamlab has {sl['cublas_handles']} cuBLAS handles; PyTorch keeps one per thread")
    result = {
        "torch_version": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "pool": pool,
        "replay_of_streamlab_draws": replay,
        "streamlab": sl,
        "agree": not problems,
        "problems": problems,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out + ".part", "w") as f:
            json.dump(result, f, indent=2)
        import os
        os.replace(args.out + ".part", args.out)
    sys.exit(0 if not problems else 1)


if __name__ == "__main__":
    main()
