#!/usr/bin/env python3
"""Write a random-weight checkpoint in streamlab's / DeepSeek's layout (docs/model.md section 9 names,
config.json + model-0000K-of-0000N.safetensors + model.safetensors.index.json) for a streamlab
config file, without building streamlab. For trying hf_peer.py at flash dimensions on a machine
that has torch but no streamlab build; the scales follow model/weights.cpp roughly (LeCun
uniform linears, norms near 1, small sinks/biases), not its exact random streams, so logits are
NOT comparable with a streamlab run: use it for loading and timing only.

usage: make_random_ckpt.py CONFIG.json OUTDIR [--dtype bf16|f32] [--no-mtp] [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys


def specs(c: dict, mtp: bool):
    """(name, shape, kind) in streamlab's order; kind: linear | norm | f32 | hcfn | tid2eid."""
    D, H, Dh, Lq = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, Lo, E, F = c["o_groups"], c["o_lora_rank"], c["n_routed_experts"], c["moe_intermediate_size"]
    V, k, hc = c["vocab_size"], c["num_experts_per_tok"], c["hc_mult"]
    Hi, di = c["index_n_heads"], c["index_head_dim"]
    L = c["num_hidden_layers"]
    mix = (2 + hc) * hc
    out = [("embed.weight", (V, D), "embed"), ("head.weight", (V, D), "linear"), ("norm.weight", (D,), "norm"),
           ("hc_head_fn", (hc, hc * D), "hcfn"), ("hc_head_base", (hc,), "f32"), ("hc_head_scale", (1,), "hcscale")]

    def comp(p, ratio, d):
        cc = 2 if ratio == 4 else 1
        return [(p + "wkv.weight", (cc * d, D), "linear"), (p + "wgate.weight", (cc * d, D), "linear"),
                (p + "ape", (ratio, cc * d), "f32"), (p + "norm.weight", (d,), "norm")]

    def block(p, ratio, hash_routed):
        b = [(p + "attn.wq_a.weight", (Lq, D), "linear"), (p + "attn.wq_b.weight", (H * Dh, Lq), "linear"),
             (p + "attn.wkv.weight", (Dh, D), "linear"), (p + "attn.wo_a.weight", (G * Lo, H * Dh // G), "linear"),
             (p + "attn.wo_b.weight", (D, G * Lo), "linear"), (p + "attn.q_norm.weight", (Lq,), "norm"),
             (p + "attn.kv_norm.weight", (Dh,), "norm"), (p + "attn.attn_sink", (H,), "f32")]
        if ratio > 1:
            b += comp(p + "attn.compressor.", ratio, Dh)
        if ratio == 4:
            b += [(p + "attn.indexer.wq_b.weight", (Hi * di, Lq), "linear"),
                  (p + "attn.indexer.weights_proj.weight", (Hi, D), "linear")]
            b += comp(p + "attn.indexer.compressor.", 4, di)
        b.append((p + "ffn.gate.weight", (E, D), "gate"))
        b.append((p + "ffn.gate.tid2eid", (V, k), "tid2eid") if hash_routed else (p + "ffn.gate.bias", (E,), "f32"))
        for e in range(E):
            q = f"{p}ffn.experts.{e}."
            b += [(q + "w1.weight", (F, D), "linear"), (q + "w2.weight", (D, F), "linear"),
                  (q + "w3.weight", (F, D), "linear")]
        Fs = F * c["n_shared_experts"]
        b += [(p + "ffn.shared_experts.w1.weight", (Fs, D), "linear"),
              (p + "ffn.shared_experts.w2.weight", (D, Fs), "linear"),
              (p + "ffn.shared_experts.w3.weight", (Fs, D), "linear"),
              (p + "attn_norm.weight", (D,), "norm"), (p + "ffn_norm.weight", (D,), "norm")]
        for s in ("attn", "ffn"):
            b += [(f"{p}hc_{s}_fn", (mix, hc * D), "hcfn"), (f"{p}hc_{s}_base", (mix,), "f32"),
                  (f"{p}hc_{s}_scale", (3,), "hcscale")]
        return b

    ratios = c["compress_ratios"]
    for l in range(L):
        out += block(f"layers.{l}.", max(1, ratios[l]), l < c["num_hash_layers"])
    if mtp:
        for i in range(c.get("num_nextn_predict_layers", 0)):
            p = f"mtp.{i}."
            out += [(p + "e_proj.weight", (D, D), "linear"), (p + "h_proj.weight", (D, D), "linear"),
                    (p + "enorm.weight", (D,), "norm"), (p + "hnorm.weight", (D,), "norm"),
                    (p + "norm.weight", (D,), "norm"), (p + "hc_head_fn", (hc, hc * D), "hcfn"),
                    (p + "hc_head_base", (hc,), "f32"), (p + "hc_head_scale", (1,), "hcscale")]
            out += block(p, max(1, c.get("mtp_compress_ratio", ratios[L] if len(ratios) > L else 0)), False)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("outdir")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--no-mtp", action="store_true", help="leave out the mtp.* tensors (HF ignores them)")
    ap.add_argument("--device", default="cpu", help="where to draw the random numbers (cuda is much faster)")
    ap.add_argument("--shard-gb", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch
    from safetensors.torch import save_file

    with open(a.config) as f:
        c = json.load(f)
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    g = torch.Generator(device=a.device).manual_seed(a.seed)
    wdt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    V, E, k = c["vocab_size"], c["n_routed_experts"], c["num_experts_per_tok"]

    def make(shape, kind):
        def u(scale, offset=0.0):
            return ((torch.rand(shape, generator=g, device=a.device) * 2 - 1) * scale + offset)
        if kind == "linear":
            return u(math.sqrt(3.0 / shape[-1])).to(wdt)
        if kind == "embed":
            return u(1.0).to(wdt)
        if kind == "norm":
            return u(0.1, 1.0).to(wdt)
        if kind == "gate":
            return u(math.sqrt(3.0 / shape[-1]))
        if kind == "hcfn":
            return u(math.sqrt(3.0 / shape[-1]))
        if kind == "hcscale":
            return u(0.05, 0.5)
        if kind == "f32":
            return u(0.1)
        if kind == "tid2eid":
            return torch.rand((V, E), generator=g, device=a.device).argsort(dim=1)[:, :k].to(torch.int64)
        raise ValueError(kind)

    limit = int(a.shard_gb * (1 << 30))
    shards, cur, size = [[]], 0, 0
    sp = specs(c, not a.no_mtp)
    for name, shape, kind in sp:
        nbytes = math.prod(shape) * (8 if kind == "tid2eid" else 4 if kind in ("gate", "hcfn", "hcscale", "f32")
                                     else wdt.itemsize)
        if cur and cur + nbytes > limit:
            shards.append([])
            cur = 0
        shards[-1].append((name, shape, kind))
        cur += nbytes
        size += nbytes
    wm = {}
    n = len(shards)
    for i, sh in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save_file({name: make(shape, kind).cpu().contiguous() for name, shape, kind in sh},
                  os.path.join(a.outdir, fn))
        for name, _, _ in sh:
            wm[name] = fn
        print(f"make_random_ckpt: {fn} ({len(sh)} tensors)", file=sys.stderr, flush=True)
    with open(os.path.join(a.outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": size}, "weight_map": wm}, f, indent=2)
    print(f"make_random_ckpt: {len(sp)} tensors, {size / 2**30:.2f} GiB in {a.outdir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
