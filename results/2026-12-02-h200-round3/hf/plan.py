import json, math, sys
import numpy as np
cfg_path, T, steps, speed_steps, d, peer, save_dtype = sys.argv[1:8]
steps, speed_steps = int(steps), int(speed_steps)
sys.path.insert(0, peer)
from make_random_ckpt import specs
c = json.load(open(cfg_path))
L = c["num_hidden_layers"]
ratios = [max(1, r) for r in c["compress_ratios"][:L]]
cover = 4 * c["index_topk"] + 3 if 4 in ratios else 1 << 30    # largest T + steps fully covered
t = min(256, cover - steps) if T == "auto" else int(T)
if t < 1:
    sys.exit(f"plan: no prompt length fits: index_topk {c['index_topk']} covers {cover} positions, STEPS {steps}")
if 4 in ratios and t + steps > cover:
    sys.exit(f"plan: T {t} + STEPS {steps} > {cover}: the CSA indexer's top-{c['index_topk']} would not keep every "
             "compressed entry, and selection flips could decide the comparison (lower T or STEPS)")
def nbytes(shape, kind):
    return math.prod(shape) * (8 if kind == "tid2eid" else 4 if kind in ("gate", "hcfn", "hcscale", "f32") else
                               2 if save_dtype == "bf16" else 4)
sp = specs(c, True)
total = sum(nbytes(s, k) for _, s, k in sp)
mtp = sum(nbytes(s, k) for n, s, k in sp if n.startswith("mtp."))
rng = np.random.default_rng(1234)
ids = rng.integers(0, c["vocab_size"], size=(1, t), dtype=np.int64).astype(np.int32)
np.save(f"{d}/tokens.npy", ids)
plan = {"config_file": cfg_path, "prompt_tokens": t, "batch": 1, "decode_steps_compared": steps,
        "speed_decode_steps": speed_steps, "tokens_file": "tokens.npy (int32 [1, T], numpy default_rng(1234))",
        "index_topk": c["index_topk"], "csa_positions_fully_covered": cover if 4 in ratios else None,
        "layer_ratios": ratios, "sliding_window": c["sliding_window"],
        "save_dtype": save_dtype, "checkpoint_bytes_predicted": total, "checkpoint_mtp_bytes_predicted": mtp,
        "checkpoint_tensors_predicted": len(sp)}
json.dump(plan, open(f"{d}/plan.json", "w"), indent=2)
print(f"prompt T={t} (batch 1), {steps} compared decode steps, {speed_steps} timed; checkpoint ({save_dtype} save) "
      f"{total / 2**30:.2f} GiB = {total / 1e9:.2f} GB ({mtp / 2**30:.2f} GiB mtp.*), {len(sp)} tensors")
print(total)
