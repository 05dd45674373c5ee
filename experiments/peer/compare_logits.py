#!/usr/bin/env python3
"""Compare two float32 logits files: ours (streamlab) against a reference (HF peer).

Both are .npy arrays of shape [N, vocab] (N = batch*T positions; a 3-D [B, T, vocab] array is
flattened to [B*T, vocab]). Prints a table (overall and per position) and a JSON summary:

  rel      = ||a - b|| / ||b||            (Frobenius, float64), overall and per position
  top1     = fraction of positions where argmax(a) == argmax(b)
  max_abs  = max |a - b|, overall and per position

Exit codes: 0 within --tol, 1 relative error above --tol (or NaN/Inf present), 2 usage or
shape errors.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def load(path: str) -> np.ndarray:
    try:
        a = np.load(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"compare_logits: error: cannot read {path}: {e}") from None
    if a.ndim == 3:
        a = a.reshape(-1, a.shape[-1])
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise SystemExit(f"compare_logits: error: {path}: expected [N, vocab], got shape {a.shape}")
    return a


def compare(a: np.ndarray, b: np.ndarray) -> dict:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = a64 - b64
    finite = bool(np.isfinite(a64).all() and np.isfinite(b64).all())
    nb = np.linalg.norm(b64)
    rel = float(np.linalg.norm(d) / nb) if nb > 0 else float("inf")
    row_nb = np.linalg.norm(b64, axis=1)
    row_rel = np.linalg.norm(d, axis=1) / np.where(row_nb > 0, row_nb, np.inf)
    row_max = np.abs(d).max(axis=1)
    ta, tb = a64.argmax(axis=1), b64.argmax(axis=1)
    agree = ta == tb
    # Where top-1 differs: how close were the reference's top-2 (a near tie explains a flip)?
    srt = np.sort(b64, axis=1)
    margin = srt[:, -1] - srt[:, -2] if b64.shape[1] > 1 else np.full(len(b64), np.inf)
    return {
        "positions": int(a.shape[0]),
        "vocab": int(a.shape[1]),
        "finite": finite,
        "rel": rel,
        "rel_max_position": float(row_rel.max()),
        "rel_median_position": float(np.median(row_rel)),
        "top1_agreement": float(agree.mean()),
        "top1_disagree_positions": [int(i) for i in np.nonzero(~agree)[0]],
        "max_abs": float(np.abs(d).max()),
        "ref_abs_max": float(np.abs(b64).max()),
        "per_position": [
            {"pos": i, "rel": float(row_rel[i]), "max_abs": float(row_max[i]), "top1_ours": int(ta[i]),
             "top1_ref": int(tb[i]), "ref_top2_margin": float(margin[i])}
            for i in range(a.shape[0])
        ],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ours", help="logits .npy (streamlab)")
    ap.add_argument("ref", help="reference logits .npy (HF peer)")
    ap.add_argument("--tol", type=float, default=2e-2, help="max overall relative error (default 2e-2)")
    ap.add_argument("--json", metavar="OUT.json", help="write the JSON summary here (else to stdout)")
    ap.add_argument("--rows", type=int, default=16, help="per-position rows to print (the worst ones; 0 = all)")
    ap.add_argument("--skip", type=int, default=0,
                    help="ignore the first SKIP positions of each sequence (with --seq-len)")
    ap.add_argument("--seq-len", type=int, default=0, help="positions per sequence (for --skip with batch > 1)")
    args = ap.parse_args(argv)

    a, b = load(args.ours), load(args.ref)
    if a.shape != b.shape:
        print(f"compare_logits: error: shapes differ: ours {a.shape}, ref {b.shape}", file=sys.stderr)
        return 2
    if args.skip:
        T = args.seq_len or a.shape[0]
        if a.shape[0] % T:
            print(f"compare_logits: error: {a.shape[0]} positions is not a multiple of --seq-len {T}", file=sys.stderr)
            return 2
        keep = np.tile(np.arange(T) >= args.skip, a.shape[0] // T)
        a, b = a[keep], b[keep]
    r = compare(a, b)
    r["tol"] = args.tol
    r["pass"] = bool(r["finite"] and r["rel"] <= args.tol)

    rows = sorted(r["per_position"], key=lambda x: -x["rel"])
    if args.rows:
        rows = rows[: args.rows]
        rows.sort(key=lambda x: x["pos"])
    out = sys.stderr if not args.json else sys.stdout
    print(f"{'pos':>6} {'rel':>10} {'max_abs':>10} {'top1 ours':>10} {'top1 ref':>9} {'ref margin':>10}", file=out)
    for x in rows:
        flag = "" if x["top1_ours"] == x["top1_ref"] else "  <- top-1 differs"
        print(f"{x['pos']:>6} {x['rel']:>10.3e} {x['max_abs']:>10.3e} {x['top1_ours']:>10} {x['top1_ref']:>9} "
              f"{x['ref_top2_margin']:>10.3e}{flag}", file=out)
    print(f"overall: rel {r['rel']:.4e} (tol {args.tol:g}), per-position rel max {r['rel_max_position']:.4e} "
          f"median {r['rel_median_position']:.4e}, top-1 agreement {100 * r['top1_agreement']:.2f}% "
          f"({r['positions']} positions), max |diff| {r['max_abs']:.4e} (ref |max| {r['ref_abs_max']:.3e})"
          f"{'' if r['finite'] else ', NON-FINITE VALUES'} -> {'PASS' if r['pass'] else 'FAIL'}", file=out)
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(r, indent=2) + "\n")
    else:
        # stdout: the summary plus the per-position errors as compact lists.
        pp = r.pop("per_position")
        r["per_position_rel"] = [float(f"{x['rel']:.4g}") for x in pp]
        r["per_position_max_abs"] = [float(f"{x['max_abs']:.4g}") for x in pp]
        print(json.dumps(r))
    return 0 if r["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
