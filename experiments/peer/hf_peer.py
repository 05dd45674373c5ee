#!/usr/bin/env python3
"""Independent peer for streamlab: Hugging Face transformers' DeepseekV4ForCausalLM.

Loads a checkpoint directory that streamlab saved (DeepSeek's layout: config.json +
model-0000K-of-0000N.safetensors + model.safetensors.index.json, tensor names of docs/model.md
section 9, bf16 or f32) with transformers' eager PyTorch implementation, then

  * --prefill TOKENS.npy [--dump-logits OUT.npy]: logits of every prompt position, float32
    [batch*T, vocab] (the layout of `streamlab run --dump-logits`);
  * --decode-steps S: greedy decode after the prefill with HF's KV cache, each step timed with
    torch.cuda.Event after a warm-up run; prints the median ms per step;
  * --decode-tokens TOKENS.npy: feed these tokens to the decode steps instead of HF's own greedy
    choices (teacher forcing, e.g. the tokens another implementation sampled), so that both sides
    see the same inputs; [S] or [S, batch] (row s = the token fed to decode step s+1);
  * --batch B: B sequences (a [T] prompt is repeated B times, as `streamlab run` does).

The weights are loaded as they are: transformers 5.x maps DeepSeek's names onto its modules
itself (conversion_mapping.py, "deepseek_v4"). Only the config is converted here (streamlab's
config.json -> DeepseekV4Config): HF maps compress_ratios only for the values 0/4/128, so a
testbed HCA ratio (e.g. 16) becomes explicit `layer_types` + `compress_rates`, and streamlab's
own knobs are dropped. See HF_NOTES.md for the facts this relies on.

Exit codes: 0 ok; 2 usage; 3 checkpoint directory / files missing or unreadable; 4 tensors
missing, unexpected or of the wrong shape; 5 config that HF cannot represent; 6 environment
(transformers without deepseek_v4, CUDA unavailable); 7 error during the forward.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

EXIT_OK, EXIT_USAGE, EXIT_CKPT, EXIT_KEYS, EXIT_CONFIG, EXIT_ENV, EXIT_RUNTIME = 0, 2, 3, 4, 5, 6, 7

# streamlab's own config.json knobs (config_to_json); HF does not know them.
STREAMLAB_KNOBS = (
    "mtp_compress_ratio",
    "swa_layers_use_yarn",
    "mtp_zero_embed_pos0",
    "batch",
    "context_length",
    "draft_steps",
    "prefill_chunk",
    "seed",
)

# Keys DeepseekV4Config needs from config.json (no usable default for a non-Flash model).
REQUIRED_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "head_dim",
    "qk_rope_head_dim",
    "q_lora_rank",
    "o_groups",
    "o_lora_rank",
    "sliding_window",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "routed_scaling_factor",
    "num_hash_layers",
    "swiglu_limit",
    "compress_ratios",
    "hc_mult",
    "hc_sinkhorn_iters",
    "hc_eps",
    "rms_norm_eps",
    "rope_theta",
    "compress_rope_theta",
    "rope_scaling",
    "max_position_embeddings",
)


class PeerError(Exception):
    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code


def log(*a):
    print("hf_peer:", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ config


def convert_config(raw: dict) -> tuple[dict, list[str]]:
    """streamlab config.json -> a dict DeepseekV4Config.from_dict accepts. Returns (dict, notes)."""
    notes: list[str] = []
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise PeerError(EXIT_CONFIG, f"config.json lacks key(s) {missing}: HF would silently use V4-Flash defaults")
    d = {k: v for k, v in raw.items() if k not in STREAMLAB_KNOBS}
    if raw.get("swa_layers_use_yarn", False):
        notes.append(
            "config.json has swa_layers_use_yarn=true (vLLM RoPE); HF always uses plain RoPE on sliding layers "
            "(docs/model.md 3.2): compare with a streamlab run made with --rope plain"
        )
    L = int(d["num_hidden_layers"])
    ratios = list(d.pop("compress_ratios"))
    if len(ratios) < L:
        raise PeerError(EXIT_CONFIG, f"compress_ratios has {len(ratios)} entries, need >= num_hidden_layers = {L}")
    layer_types, hca = [], set()
    for i, r in enumerate(ratios[:L]):
        if r in (0, 1):
            layer_types.append("sliding_attention")
        elif r == 4:
            layer_types.append("compressed_sparse_attention")
        elif r >= 2:
            layer_types.append("heavily_compressed_attention")
            hca.add(int(r))
        else:
            raise PeerError(EXIT_CONFIG, f"compress_ratios[{i}] = {r} is not a valid ratio")
    if len(hca) > 1:
        raise PeerError(
            EXIT_CONFIG,
            f"HCA layers use several ratios {sorted(hca)}; HF has one HCA rate for the whole model "
            "(config.compress_rates['heavily_compressed_attention'])",
        )
    hca_rate = hca.pop() if hca else 128
    if hca_rate != 128:
        notes.append(f"HCA ratio {hca_rate} passed to HF as compress_rates['heavily_compressed_attention']")
    d["layer_types"] = layer_types
    d["compress_rates"] = {"compressed_sparse_attention": 4, "heavily_compressed_attention": hca_rate}
    n_hash = int(d.pop("num_hash_layers"))
    d["mlp_layer_types"] = ["hash_moe"] * min(L, n_hash) + ["moe"] * max(0, L - n_hash)
    if int(d.get("n_shared_experts", 1)) != 1:
        raise PeerError(
            EXIT_CONFIG,
            f"n_shared_experts = {d['n_shared_experts']}: HF's shared expert is one MLP of width "
            "moe_intermediate_size (no n_shared_experts multiplier)",
        )
    if int(d.get("num_key_value_heads", 1)) != 1:
        raise PeerError(EXIT_CONFIG, "num_key_value_heads must be 1")
    if d.get("scoring_func", "sqrtsoftplus") != "sqrtsoftplus":
        raise PeerError(EXIT_CONFIG, f"scoring_func {d['scoring_func']!r} (expected sqrtsoftplus)")
    if int(d["qk_rope_head_dim"]) <= 0 or int(d["head_dim"]) % 1:
        raise PeerError(EXIT_CONFIG, "bad qk_rope_head_dim / head_dim")
    rs = d.get("rope_scaling") or {}
    rt = rs.get("rope_type", rs.get("type"))
    if rt != "yarn":
        raise PeerError(EXIT_CONFIG, f"rope_scaling type {rt!r} (expected yarn)")
    if "quantization_config" in d:
        raise PeerError(EXIT_CONFIG, "quantization_config present: streamlab checkpoints are bf16/f32 only")
    return d, notes


def build_hf_config(raw: dict, DeepseekV4Config):
    d, notes = convert_config(raw)
    cfg = DeepseekV4Config.from_dict(d)
    # Cross-check what HF derived against the streamlab values.
    checks = [
        ("qk_rope_head_dim", cfg.qk_rope_head_dim, raw["qk_rope_head_dim"]),
        ("layer_types", list(cfg.layer_types), d["layer_types"]),
        ("mlp_layer_types", list(cfg.mlp_layer_types), d["mlp_layer_types"]),
        ("rope main theta", cfg.rope_parameters["main"]["rope_theta"], raw["rope_theta"]),
        ("rope compress theta", cfg.rope_parameters["compress"]["rope_theta"], raw["compress_rope_theta"]),
        ("rope compress type", cfg.rope_parameters["compress"]["rope_type"], "yarn"),
        ("rope main type", cfg.rope_parameters["main"]["rope_type"], "default"),
        ("yarn attention_factor", cfg.rope_parameters["compress"].get("attention_factor"), 1.0),
    ]
    bad = [f"{n}: HF {a!r} != {b!r}" for n, a, b in checks if a != b]
    if bad:
        raise PeerError(EXIT_CONFIG, "HF config differs from streamlab's: " + "; ".join(bad))
    return cfg, notes


# ------------------------------------------------------------------------------------ loading


def check_dir(path: str) -> dict:
    if not os.path.isdir(path):
        raise PeerError(EXIT_CKPT, f"checkpoint directory {path!r} does not exist")
    cpath = os.path.join(path, "config.json")
    if not os.path.isfile(cpath):
        raise PeerError(EXIT_CKPT, f"{cpath} not found")
    st = [f for f in os.listdir(path) if f.endswith(".safetensors")]
    if not st:
        raise PeerError(EXIT_CKPT, f"no *.safetensors files in {path}")
    try:
        with open(cpath) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise PeerError(EXIT_CKPT, f"{cpath}: {e}")


def checkpoint_tensor_names(path: str) -> list[str]:
    from safetensors import safe_open

    names = []
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(path, f), framework="pt") as sf:
                names += list(sf.keys())
    return names


def read_tensor(path: str, name: str):
    from safetensors import safe_open

    idx = os.path.join(path, "model.safetensors.index.json")
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if os.path.isfile(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        files = [wm[name]] if name in wm else files
    for fn in files:
        with safe_open(os.path.join(path, fn), framework="pt") as sf:
            if name in sf.keys():
                return sf.get_tensor(name)
    raise PeerError(EXIT_KEYS, f"tensor {name} not found in {path}")


def spot_check_weights(model, path: str, raw: dict):
    """Compare a few converted parameters with the file tensors (catches a wrong name mapping,
    e.g. w1/w3 swapped in gate_up_proj, or a missing transpose)."""
    import torch

    F = int(raw["moe_intermediate_size"])
    E = int(raw["n_routed_experts"])
    sd = model.state_dict()
    L = int(raw["num_hidden_layers"])
    last = L - 1
    e = min(1, E - 1)
    pairs = [
        ("model.embed_tokens.weight", lambda: read_tensor(path, "embed.weight")),
        ("lm_head.weight", lambda: read_tensor(path, "head.weight")),
        ("model.hc_head.hc_fn", lambda: read_tensor(path, "hc_head_fn")),
        ("model.layers.0.attn_hc.fn", lambda: read_tensor(path, "layers.0.hc_attn_fn")),
        ("model.layers.0.self_attn.sinks", lambda: read_tensor(path, "layers.0.attn.attn_sink")),
        (f"model.layers.{last}.mlp.experts.gate_up_proj",
         lambda: torch.cat([read_tensor(path, f"layers.{last}.ffn.experts.{e}.w1.weight"),
                            read_tensor(path, f"layers.{last}.ffn.experts.{e}.w3.weight")], 0), e),
        (f"model.layers.{last}.mlp.experts.down_proj",
         lambda: read_tensor(path, f"layers.{last}.ffn.experts.{e}.w2.weight"), e),
        (f"model.layers.{last}.self_attn.o_a_proj.weight", lambda: read_tensor(path, f"layers.{last}.attn.wo_a.weight")),
    ]
    if int(raw["num_hash_layers"]) > 0:
        pairs.append(("model.layers.0.mlp.gate.tid2eid", lambda: read_tensor(path, "layers.0.ffn.gate.tid2eid")))
    if int(raw["num_hash_layers"]) < L:
        pairs.append((f"model.layers.{last}.mlp.gate.e_score_correction_bias",
                      lambda: read_tensor(path, f"layers.{last}.ffn.gate.bias")))
    for p in pairs:
        hf_name, get = p[0], p[1]
        if hf_name not in sd:
            raise PeerError(EXIT_KEYS, f"HF model has no parameter {hf_name} (transformers layout changed?)")
        got = sd[hf_name]
        if len(p) == 3:
            got = got[p[2]]
        want = get()
        if tuple(got.shape) != tuple(want.shape):
            raise PeerError(EXIT_KEYS, f"{hf_name}: HF shape {tuple(got.shape)} != file {tuple(want.shape)}")
        if got.dtype in (torch.int64, torch.int32):
            ok = torch.equal(got.cpu().long(), want.long())
        else:
            # The file may be f32 and the model bf16: compare after rounding both to the model dtype.
            ok = torch.equal(got.cpu(), want.to(got.dtype))
        if not ok:
            raise PeerError(EXIT_KEYS, f"{hf_name} does not hold the checkpoint's values (name mapping wrong?)")


def patch_rmsnorm_dtype(model) -> int:
    """transformers 5.17 keeps every parameter whose name contains "norm" in fp32 when loading in
    bf16 (_keep_in_fp32_modules_strict, matched as an unanchored regex), and DeepseekV4RMSNorm
    returns `weight * x.to(input_dtype)`, i.e. fp32. The next bf16 nn.Linear then raises
    "expected m1 and m2 to have the same dtype". Cast each norm's output back to its input dtype
    (what the module returns when its weight has the model dtype); the weights stay fp32."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4RMSNorm

    def cast_back(mod, args, out):
        return out.to(args[0].dtype)

    n = 0
    for mod in model.modules():
        if isinstance(mod, DeepseekV4RMSNorm):
            mod.register_forward_hook(cast_back)
            n += 1
    return n


def patch_stable_indexer_topk(model, torch) -> int:
    """Make the lightning indexer's top-k break ties toward the lower entry index (docs/model.md 5.4's
    rule, which streamlab follows). HF calls `index_scores.topk(...)`, whose order among equal
    scores is unspecified; exact ties are common in tiny configs (score = sum_h w_h ReLU(q.k) is
    exactly 0 whenever every head's dot product is <= 0). Only the indexer's forward is affected:
    a pre-hook swaps torch.Tensor.topk for a stable sort, the hook restores it."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Indexer

    orig = torch.Tensor.topk

    def stable_topk(self, k, dim=-1, largest=True, sorted=True):
        v, i = torch.sort(self, dim=dim, descending=largest, stable=True)
        return torch.return_types.topk((v.narrow(dim, 0, k), i.narrow(dim, 0, k)))

    def pre(mod, args):
        torch.Tensor.topk = stable_topk

    def post(mod, args, out):
        torch.Tensor.topk = orig

    n = 0
    for mod in model.modules():
        if isinstance(mod, DeepseekV4Indexer):
            mod.register_forward_pre_hook(pre)
            mod.register_forward_hook(post)
            n += 1
    return n


def load_model(path: str, raw: dict, dtype_name: str, device: str, attn: str, torch, transformers,
               stable_topk: bool = False):
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    cfg, notes = build_hf_config(raw, DeepseekV4Config)
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype_name]
    names = checkpoint_tensor_names(path)
    fp8 = [n for n in names if n.endswith(".scale")]
    if fp8:
        raise PeerError(EXIT_CKPT, f"checkpoint has FP8 scale tensors ({fp8[0]}, ...): not a streamlab bf16/f32 save")
    t0 = time.perf_counter()
    try:
        import importlib.util

        # device_map needs `accelerate`; without it load on the CPU and move.
        use_map = device != "cpu" and importlib.util.find_spec("accelerate") is not None
        model, info = DeepseekV4ForCausalLM.from_pretrained(
            path,
            config=cfg,
            dtype=dtype,
            attn_implementation=attn,
            output_loading_info=True,
            **({"device_map": device} if use_map else {}),
        )
        if not use_map:
            model = model.to(device)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise PeerError(EXIT_KEYS, f"from_pretrained failed: {type(e).__name__}: {e}")
    load_s = time.perf_counter() - t0
    missing = sorted(info.get("missing_keys", []))
    unexpected = sorted(k for k in info.get("unexpected_keys", []) if not k.startswith("mtp.") and ".mtp." not in k)
    mismatched = info.get("mismatched_keys", [])
    errs = info.get("error_msgs", [])
    if missing or unexpected or mismatched or errs:
        msg = []
        if missing:
            msg.append(f"{len(missing)} HF parameter(s) not found in the checkpoint (they would be random): "
                       f"{missing[:8]}{' ...' if len(missing) > 8 else ''}")
        if unexpected:
            msg.append(f"{len(unexpected)} checkpoint tensor(s) HF did not map: {unexpected[:8]}"
                       f"{' ...' if len(unexpected) > 8 else ''}")
        if mismatched:
            msg.append(f"shape mismatches: {list(mismatched)[:8]}")
        if errs:
            msg.append(f"errors: {errs[:4]}")
        raise PeerError(EXIT_KEYS, "; ".join(msg))
    spot_check_weights(model, path, raw)
    if dtype != torch.float32:
        n = patch_rmsnorm_dtype(model)
        notes.append(f"bf16 workaround: {n} DeepseekV4RMSNorm outputs cast back to their input dtype "
                     "(fp32 weights kept by _keep_in_fp32_modules_strict otherwise promote q/kv to fp32 and "
                     "the next bf16 Linear fails)")
    if stable_topk:
        n = patch_stable_indexer_topk(model, torch)
        notes.append(f"--stable-topk: {n} indexer top-k(s) break ties toward the lower entry index (docs/model.md 5.4)")
    model.eval()
    n_mtp = sum(1 for n in names if n.startswith("mtp."))
    if n_mtp:
        notes.append(f"{n_mtp} mtp.* tensors ignored (HF has no MTP; _keys_to_ignore_on_load_unexpected)")
    return model, cfg, notes, load_s


# ------------------------------------------------------------------------------------ running


def read_tokens(path: str, batch: int | None, vocab: int):
    import numpy as np

    if not os.path.isfile(path):
        raise PeerError(EXIT_USAGE, f"tokens file {path!r} not found")
    ids = np.load(path)
    if ids.dtype.kind not in "iu":
        raise PeerError(EXIT_USAGE, f"{path}: token ids must be integers, got {ids.dtype}")
    if ids.ndim == 1:
        B = batch or 1
        ids = np.tile(ids[None, :], (B, 1))
    elif ids.ndim == 2:
        if batch is not None and ids.shape[0] != batch:
            raise PeerError(EXIT_USAGE, f"{path}: shape {ids.shape} but --batch {batch}")
    else:
        raise PeerError(EXIT_USAGE, f"{path}: expected [T] or [batch, T], got shape {ids.shape}")
    if ids.shape[1] < 1:
        raise PeerError(EXIT_USAGE, f"{path}: empty prompt")
    if ids.min() < 0 or ids.max() >= vocab:
        raise PeerError(EXIT_USAGE, f"{path}: token ids outside [0, {vocab})")
    return ids.astype(np.int64)


class Timer:
    """CUDA events on a GPU, perf_counter elsewhere."""

    def __init__(self, torch, device: str):
        self.torch, self.cuda = torch, device.startswith("cuda")

    def start(self):
        if self.cuda:
            s, e = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            s.record()
            return (s, e)
        return time.perf_counter()

    def stop(self, h):
        if self.cuda:
            h[1].record()
            return h
        return (time.perf_counter() - h) * 1e3

    def ms(self, h):
        if self.cuda:
            h[1].synchronize()
            return h[0].elapsed_time(h[1])
        return h


def read_decode_tokens(path: str, batch: int, vocab: int):
    """--decode-tokens: [S] (every sequence) or [S, batch] token ids -> int64 [S, batch]."""
    import numpy as np

    if not os.path.isfile(path):
        raise PeerError(EXIT_USAGE, f"decode tokens file {path!r} not found")
    t = np.load(path)
    if t.dtype.kind not in "iu":
        raise PeerError(EXIT_USAGE, f"{path}: token ids must be integers, got {t.dtype}")
    if t.ndim == 1:
        t = np.tile(t[:, None], (1, batch))
    elif t.ndim != 2 or t.shape[1] != batch:
        raise PeerError(EXIT_USAGE, f"{path}: expected [steps] or [steps, batch={batch}], got shape {t.shape}")
    if t.shape[0] < 1:
        raise PeerError(EXIT_USAGE, f"{path}: no decode tokens")
    if t.min() < 0 or t.max() >= vocab:
        raise PeerError(EXIT_USAGE, f"{path}: token ids outside [0, {vocab})")
    return t.astype(np.int64)


def run_sequence(model, torch, ids, steps: int, timer: Timer, want_prefill_logits: bool, want_decode_logits: bool,
                 chunk: int = 0, forced=None):
    """Prefill `ids` [B, T] (in chunks of `chunk` tokens per sequence if > 0) then `steps` greedy
    decode steps with a fresh DynamicCache. `forced` ([>= steps, B] int): the token fed to decode
    step s+1 is forced[s] instead of the previous greedy choice (teacher forcing); the greedy
    choices are still recorded in out["tokens"]."""
    from transformers import DynamicCache

    dev = next(model.parameters()).device
    x = torch.as_tensor(ids, device=dev)
    cache = DynamicCache(config=model.config)
    out = {}
    with torch.no_grad():
        T = x.shape[1]
        step = chunk if chunk > 0 else T
        parts = []
        h = timer.start()
        for c0 in range(0, T, step):
            o = model(input_ids=x[:, c0 : c0 + step], past_key_values=cache, use_cache=True,
                      logits_to_keep=0 if want_prefill_logits else 1)
            if want_prefill_logits:
                parts.append(o.logits.float().cpu() if step < T else o.logits.float())
        tok = o.logits[:, -1, :].float().argmax(-1, keepdim=True)  # [B, 1]
        h = timer.stop(h)
        out["prefill_timer"] = h
        if want_prefill_logits:
            lg = torch.cat(parts, 1) if len(parts) > 1 else parts[0]
            out["prefill_logits"] = lg.reshape(-1, lg.shape[-1]).cpu().numpy()
            del parts, lg
        out["prefill_checksums"] = o.logits[:, -1, :].float().sum(-1).tolist()
        del o
        toks, timers, dec_logits, checks = [tok], [], [], []
        if forced is not None:
            forced_dev = torch.as_tensor(forced[:steps], device=dev).unsqueeze(-1)  # [steps, B, 1]
        for s in range(steps):
            if forced is not None:
                tok = forced_dev[s]
            h = timer.start()
            o = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
            last = o.logits[:, -1, :].float()
            tok = last.argmax(-1, keepdim=True)
            h = timer.stop(h)
            timers.append(h)
            toks.append(tok)
            checks.append(last.sum(-1))
            if want_decode_logits:
                dec_logits.append(last.cpu())
        out["prefill_ms"] = timer.ms(out.pop("prefill_timer"))
        out["step_ms"] = [timer.ms(h) for h in timers]
        # tokens[s][b]: token produced by the prefill (s = 0) and by decode step s.
        out["tokens"] = [t[:, 0].tolist() for t in toks]
        out["decode_checksums"] = [c.tolist() for c in checks]
        if want_decode_logits:
            out["decode_logits"] = torch.stack(dec_logits, 0).reshape(-1, dec_logits[0].shape[-1]).numpy() if dec_logits else None
    return out


def gpu_info(torch, device: str) -> dict:
    if not device.startswith("cuda"):
        return {"device": "cpu", "cpu": platform.processor() or platform.machine()}
    i = torch.device(device).index or 0
    p = torch.cuda.get_device_properties(i)
    info = {"device": device, "gpu": torch.cuda.get_device_name(i), "gpu_memory_bytes": int(p.total_memory),
            "capability": f"{p.major}.{p.minor}", "cuda_runtime": torch.version.cuda}
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", f"--id={i}"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode == 0:
            info["driver"] = r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="directory saved by `streamlab run --save-checkpoint DIR`")
    ap.add_argument("--prefill", metavar="TOKENS.npy", help="prompt token ids [T] or [batch, T] (int)")
    ap.add_argument("--dump-logits", metavar="OUT.npy", help="write the prefill logits, float32 [batch*T, vocab]")
    ap.add_argument("--dump-decode-logits", metavar="OUT.npy",
                    help="write the logits of each decode step, float32 [steps*batch, vocab] (step-major)")
    ap.add_argument("--decode-steps", type=int, default=0, metavar="S", help="greedy decode steps after the prefill")
    ap.add_argument("--decode-tokens", metavar="TOKENS.npy",
                    help="teacher forcing: feed these tokens to the decode steps instead of HF's own greedy choices; "
                         "[S] or [S, batch] int, row s = the input of decode step s+1 (e.g. the tokens streamlab "
                         "sampled: its prefill's and then each step's). --decode-steps defaults to S")
    ap.add_argument("--prefill-chunk", type=int, default=0, metavar="N",
                    help="prefill N tokens per sequence per forward through the cache (0 = whole prompt at once; "
                         "eager attention materialises [B, H, N, N + entries] scores, so long prompts need chunks)")
    ap.add_argument("--warmup-steps", type=int, default=3,
                    help="decode steps of the untimed warm-up run (a full prefill + these steps) before the "
                         "measured run; 0 = no warm-up run")
    ap.add_argument("--batch", type=int, default=None, help="sequences (a [T] prompt is repeated)")
    ap.add_argument("--context", type=int, default=None,
                    help="without --prefill: prompt length of deterministic pseudo-random ids (seed 0)")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--attn", default="eager", help="attention implementation (HF V4 supports eager only)")
    ap.add_argument("--json", metavar="OUT.json", help="write the result JSON here (else to stdout)")
    ap.add_argument("--stable-topk", action="store_true",
                    help="indexer top-k ties go to the lower entry index (docs/model.md 5.4, as streamlab); HF's own "
                         "order among equal scores is unspecified")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args(argv)

    if args.decode_steps < 0 or args.warmup_steps < 0 or args.prefill_chunk < 0:
        ap.error("--decode-steps, --warmup-steps and --prefill-chunk must be >= 0")
    if args.batch is not None and args.batch < 1:
        ap.error("--batch must be >= 1")
    if args.prefill is None and args.context is None:
        ap.error("give --prefill TOKENS.npy or --context T")
    if args.dump_logits and args.prefill is None and args.context is None:
        ap.error("--dump-logits needs a prompt")

    try:
        raw = check_dir(args.checkpoint)
        try:
            import numpy as np
            import torch
            import transformers
        except ImportError as e:
            raise PeerError(EXIT_ENV, f"cannot import {e.name}: pip install torch transformers safetensors numpy")
        try:
            from transformers import DeepseekV4ForCausalLM  # noqa: F401
        except ImportError:
            raise PeerError(EXIT_ENV, f"transformers {transformers.__version__} has no DeepseekV4ForCausalLM "
                                      "(models/deepseek_v4 needs transformers >= 5.x with DeepSeek V4)")
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise PeerError(EXIT_ENV, "--device cuda but torch.cuda.is_available() is False (use --device cpu)")
        if args.threads:
            torch.set_num_threads(args.threads)
        torch.manual_seed(0)

        vocab = int(raw["vocab_size"])
        if args.prefill:
            ids = read_tokens(args.prefill, args.batch, vocab)
        else:
            B, T = args.batch or 1, args.context
            if T < 1:
                raise PeerError(EXIT_USAGE, "--context must be >= 1")
            rng = np.random.default_rng(0)
            ids = np.tile(rng.integers(0, vocab, size=(1, T), dtype=np.int64), (B, 1))
        B, T = ids.shape
        forced = None
        if args.decode_tokens:
            forced = read_decode_tokens(args.decode_tokens, B, vocab)
            if args.decode_steps == 0:
                args.decode_steps = int(forced.shape[0])
            elif args.decode_steps > forced.shape[0]:
                raise PeerError(EXIT_USAGE, f"--decode-steps {args.decode_steps} but {args.decode_tokens} holds only "
                                            f"{forced.shape[0]} step(s)")
        log(f"transformers {transformers.__version__}, torch {torch.__version__}, device {args.device}, "
            f"dtype {args.dtype}, batch {B}, prompt {T}, decode steps {args.decode_steps}")

        model, cfg, notes, load_s = load_model(args.checkpoint, raw, args.dtype, args.device, args.attn, torch,
                                               transformers, args.stable_topk)
        for n in notes:
            log("note:", n)
        log(f"loaded {args.checkpoint} in {load_s:.1f} s; layer types {list(cfg.layer_types)}")

        timer = Timer(torch, args.device)
        try:
            if args.warmup_steps > 0 and (args.decode_steps > 0 or args.device.startswith("cuda")):
                run_sequence(model, torch, ids, min(args.warmup_steps, max(args.decode_steps, 1)), timer, False, False,
                             args.prefill_chunk, forced)
            res = run_sequence(model, torch, ids, args.decode_steps, timer, bool(args.dump_logits),
                               bool(args.dump_decode_logits), args.prefill_chunk, forced)
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            raise PeerError(EXIT_RUNTIME, f"forward failed: {type(e).__name__}: {e}")

        if args.dump_logits:
            np.save(args.dump_logits, np.ascontiguousarray(res["prefill_logits"], dtype=np.float32))
            log(f"prefill logits {list(res['prefill_logits'].shape)} written to {args.dump_logits}")
        if args.dump_decode_logits and res.get("decode_logits") is not None:
            np.save(args.dump_decode_logits, np.ascontiguousarray(res["decode_logits"], dtype=np.float32))
            log(f"decode logits {list(res['decode_logits'].shape)} written to {args.dump_decode_logits}")

        steps = res["step_ms"]
        med = statistics.median(steps) if steps else None
        mem = None
        if args.device.startswith("cuda"):
            mem = int(torch.cuda.max_memory_allocated())
        result = {
            "tool": "experiments/peer/hf_peer.py",
            "peer": "transformers DeepseekV4ForCausalLM (eager, no MTP)",
            "provenance": {
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "python": platform.python_version(),
                "host": platform.node(),
                **gpu_info(torch, args.device),
                "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
            },
            "checkpoint": os.path.abspath(args.checkpoint),
            "dtype": args.dtype,
            "attn_implementation": args.attn,
            "stable_topk": args.stable_topk,
            "batch": B,
            "prompt_tokens": T,
            "prefill_chunk": args.prefill_chunk,
            "config": {
                "layer_types": list(cfg.layer_types),
                "mlp_layer_types": list(cfg.mlp_layer_types),
                "compress_rates": dict(cfg.compress_rates),
                "rope_parameters": cfg.rope_parameters,
                "notes": notes,
            },
            "load_s": load_s,
            "prefill_ms": res["prefill_ms"],
            "prefill_last_logits_checksum": res["prefill_checksums"],
            "decode": {
                "steps": args.decode_steps,
                "warmup_run_steps": args.warmup_steps,
                "timer": "torch.cuda.Event" if args.device.startswith("cuda") else "time.perf_counter",
                "per_step_ms": steps,
                "median_ms": med,
                "mean_ms": (sum(steps) / len(steps)) if steps else None,
                "min_ms": min(steps) if steps else None,
                "logits_checksums": res["decode_checksums"],
            },
            "greedy_tokens": res["tokens"],
            "decode_tokens": (None if forced is None else {
                "file": os.path.abspath(args.decode_tokens),
                "fed": forced[: args.decode_steps].tolist(),
                # HF's greedy choice at the prefill / step s vs the token fed to step s+1.
                "greedy_agreement": float((np.asarray(res["tokens"][: args.decode_steps]) ==
                                           forced[: args.decode_steps]).mean()) if args.decode_steps else None,
            }),
            "peak_memory_bytes": mem,
        }
        if med is not None:
            print(f"hf_peer: decode median {med:.3f} ms/step over {len(steps)} steps (batch {B}, prompt {T}); "
                  f"prefill {res['prefill_ms']:.3f} ms", file=sys.stderr, flush=True)
        else:
            print(f"hf_peer: prefill {res['prefill_ms']:.3f} ms (batch {B}, prompt {T})", file=sys.stderr,
                  flush=True)
        text = json.dumps(result, indent=2, default=float)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
            log(f"JSON written to {args.json}")
        else:
            print(text)
        return EXIT_OK
    except PeerError as e:
        print(f"hf_peer: error: {e}", file=sys.stderr, flush=True)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
