#!/usr/bin/env python3
"""Hugging Face peer round: streamlab against transformers' DeepseekV4ForCausalLM, in one call.

Our model (streamlab, `--backend`) against transformers' DeepseekV4ForCausalLM on the same random
checkpoint and the same prompt, stage by stage:
  plan     prompt .npy (int32 [1, T]); checks that the CSA indexer's top-k covers every
           compressed entry; predicted checkpoint size against free disk
  ours     streamlab run --rope plain: saves the checkpoint to a temp dir on local disk, dumps
           the prefill logits and STEPS decode steps' logits; its greedy tokens become the
           decode inputs of the peer (teacher forcing)
  hf32     hf_peer.py in float32 (the logits reference, HF_NOTES.md 5): prefill logits and the
           decode logits of the same STEPS steps fed with OUR tokens
  compare  compare_logits.py, ours against HF fp32: compare_prefill, compare_decode (TOL)
  hf16     hf_peer.py in bfloat16: SPEED_STEPS greedy decode steps timed (and, for scale,
           compare_hf_bf16: its prefill logits against HF fp32's)
  speed    ours at the same shape, one stage per SPEED_VARIANTS entry (speed_graph, ...)
then removes the checkpoint and writes OUT/hf_compare.json (all figures, provenance, command
lines, each stage's exit code) and OUT/hf_round.tar.gz (logs and per-stage JSON; the .npy logits
are not kept). A stage whose inputs are missing is skipped, with the reason in the summary; the
HF stages are skipped when PY cannot import torch + transformers + safetensors + numpy.

Every knob is a flag and an environment variable (the flag wins). Relative paths are relative to
the current directory (scripts/hf_round.sh runs this from the repo root).

examples:
  experiments/peer/hf_round.py                       # H200: flash-2l, cuda, HF on cuda
  experiments/peer/hf_round.py --bin build-cpu --config tiny --backend cpu --device cpu
  BIN=build-cpu CONFIG=tiny BACKEND=cpu DEVICE=cpu scripts/hf_round.sh

exit status: 0 every stage passed (logits within TOL included); 1 a stage failed, timed out
(stage exit 124) or was skipped; 2 usage (bad flag or knob value, config not found, OUT not
writable); 128+N killed by signal N (SIGTERM 143, SIGINT 130): the checkpoint is removed and the
summary written on every one of these paths. Stage exit codes: 127 streamlab binary missing (126 not executable),
124 timed out (137: killed after the grace period), plan 3 not enough disk, ours 8 its JSON gave
no decode tokens; hf_peer.py's and compare_logits.py's own codes otherwise.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field

PEER = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(PEER))
sys.path.insert(0, PEER)

# Whole-run deadline: a stage gets at most what is left minus RESERVE_S (checkpoint removal and
# the summary) and is skipped below MIN_STAGE_S, so the JSON is written even when something is
# slow (the device tool stops a command at 600 s).
RESERVE_S, MIN_STAGE_S = 20, 10
GRACE_S = 10            # SIGTERM -> SIGKILL for a stage past its limit (GNU timeout -k 10)
DISK_MARGIN = 2 << 30   # the checkpoint must leave 2 GiB free
SPEED_FLAGS = {"graph": ["--graph"], "eager": [], "graph-nodraft": ["--graph", "--draft-steps", "0"],
               "eager-nodraft": ["--draft-steps", "0"]}
HF_PACKAGES = ("torch", "transformers", "safetensors", "numpy")
EXIT_FAIL, EXIT_USAGE = 1, 2


class UsageError(Exception):
    """Bad knob, config or OUT: reported before any stage runs (exit 2)."""


class StageError(Exception):
    """An in-process step failed: the message goes to the stage's log, `code` to its exit."""

    def __init__(self, msg: str, code: int = 1):
        super().__init__(msg)
        self.code = code


class Interrupted(BaseException):
    """Raised from the signal handler so that every `finally` (child kill, cleanup) runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# ------------------------------------------------------------------------------------------ knobs
@dataclass
class Knob:
    env: str
    flag: str
    default: object     # None: derived from other knobs (see resolve_defaults)
    conv: object        # str -> value, raises ValueError with the reason
    help: str


def _pos_int(s):
    v = int(s)
    if v < 1:
        raise ValueError("must be >= 1")
    return v


def _pos_float(s):
    v = float(s)
    if not v > 0:
        raise ValueError("must be > 0")
    return v


def _tokens(s):
    return "auto" if s == "auto" else _pos_int(s)


def _choice(*allowed):
    def conv(s):
        if s not in allowed:
            raise ValueError(f"one of {', '.join(allowed)}")
        return s
    return conv


def _variants(s):
    vs = s.replace(",", " ").split()
    bad = [v for v in vs if v not in SPEED_FLAGS]
    if bad:
        raise ValueError(f"unknown variant(s) {', '.join(bad)}; known: {', '.join(SPEED_FLAGS)}")
    return vs


def _bool(s):
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("1 or 0")


KNOBS = [
    Knob("BIN", "--bin", ".gpu", str, "folder with the streamlab binary (scripts/gpu_build.sh's .gpu, "
         "or a CMake build dir such as build-cpu)"),
    Knob("OUT", "--out", "/tmp/streamlab-out", str, "where hf_compare.json and hf_round.tar.gz go"),
    Knob("CONFIG", "--config", "flash-2l", str, "model config: a name in model/configs or a .json file"),
    Knob("BACKEND", "--backend", "cuda", _choice("cuda", "cpu"), "streamlab's backend: cuda or cpu"),
    Knob("DEVICE", "--device", "cuda", str, "HF's torch device: cuda, cuda:N or cpu"),
    Knob("PY", "--python", sys.executable, str, "interpreter for the HF stages and compare_logits.py "
         "(torch, transformers 5.17, numpy, safetensors)"),
    Knob("T", "--prompt-tokens", "auto", _tokens, "prompt length, or auto: min(256, the largest prompt "
         "whose CSA selection keeps every compressed entry, minus STEPS)"),
    Knob("STEPS", "--steps", "8", _pos_int, "decode steps whose logits are compared"),
    Knob("SPEED_STEPS", "--speed-steps", "32", _pos_int, "decode steps timed (HF bf16 and ours)"),
    Knob("TOL", "--tol", "2e-2", _pos_float, "max relative logits error (bf16 level)"),
    Knob("CKPT_ROOT", "--ckpt-root", None, str, "where the temp checkpoint goes; default: whichever of "
         "$TMPDIR (or /tmp) and the repo's filesystem has the most free space"),
    Knob("KEEP_CKPT", "--keep-ckpt", "0", _bool, "keep the temp data dir (checkpoint, prompt, logits) for "
         "inspection instead of removing it (environment: KEEP_CKPT=1)"),
    Knob("SPEED_VARIANTS", "--speed-variants", None, _variants, "speed stages (space or comma separated; "
         "graph, graph-nodraft, eager, eager-nodraft); default 'graph graph-nodraft eager' on cuda, "
         "'eager eager-nodraft' on cpu"),
    Knob("SAVE_DTYPE", "--save-dtype", None, _choice("bf16", "f32"), "checkpoint dtype: default bf16 on "
         "cuda (its weights are bf16 already), f32 on cpu (a bf16 save would round its fp32 weights and "
         "the comparison would measure that rounding)"),
    Knob("DEADLINE", "--deadline", "540", _pos_int, f"seconds for the whole run: a stage gets at most "
         f"what is left minus {RESERVE_S} s and is skipped below {MIN_STAGE_S} s"),
    Knob("TO_OURS", "--timeout-ours", "150", _pos_int, "seconds for stage ours"),
    Knob("TO_HF32", "--timeout-hf32", "200", _pos_int, "seconds for stage hf32"),
    Knob("TO_HF16", "--timeout-hf16", "150", _pos_int, "seconds for stage hf16"),
    Knob("TO_SPEED", "--timeout-speed", "75", _pos_int, "seconds per speed variant"),
]


def dest(k: Knob) -> str:
    return k.flag[2:].replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hf_round.py", description=__doc__.split("\n\n", 1)[1].rsplit("\n\n", 2)[0],
                                 epilog="\n\n".join(__doc__.rsplit("\n\n", 2)[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.usage = "%(prog)s [options]   (each option also as the environment variable in brackets)"
    for k in KNOBS:
        shown = "this interpreter" if k.env == "PY" else k.default
        tail = f" [{k.env}; default {shown}]" if shown is not None else f" [{k.env}]"
        if k.conv is _bool:
            ap.add_argument(k.flag, dest=dest(k), action="store_const", const="1", help=k.help + tail)
        else:
            ap.add_argument(k.flag, dest=dest(k), metavar=k.env, help=k.help + tail)
    return ap


def read_knobs(argv, environ) -> tuple[argparse.Namespace, dict]:
    """Flags, else the environment, else the default; each converted with its reason on error.
    Returns the values and the knobs given explicitly (recorded in the JSON as before)."""
    ns = build_parser().parse_args(argv)
    given = {}
    for k in KNOBS:
        raw, src = getattr(ns, dest(k)), k.flag
        if raw is None and environ.get(k.env) is not None:
            raw, src = environ[k.env], f"{k.env} (environment)"
        if raw is not None:
            given[k.env] = raw
        raw = k.default if raw is None else raw
        try:
            setattr(ns, dest(k), None if raw is None else k.conv(raw))
        except ValueError as e:
            raise UsageError(f"{src} = {raw!r}: {e}") from None
    resolve_defaults(ns)
    return ns, given


def resolve_defaults(a: argparse.Namespace) -> None:
    """The defaults that depend on the backend."""
    if a.save_dtype is None:
        a.save_dtype = "bf16" if a.backend == "cuda" else "f32"
    if a.speed_variants is None:
        a.speed_variants = ["graph", "graph-nodraft", "eager"] if a.backend == "cuda" else ["eager", "eager-nodraft"]


def resolve_config(config: str) -> str:
    path = config if os.path.isfile(config) else os.path.join(ROOT, "model", "configs", config + ".json")
    if not os.path.isfile(path):
        raise UsageError(f"config {config!r} not found (neither a file nor model/configs/{config}.json)")
    try:
        with open(path) as f:
            json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"config {path}: {e}") from None
    return path


def check_out(out: str) -> str:
    """OUT must exist (made here) and take a file: found now, not after minutes of work."""
    try:
        os.makedirs(out, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".hf_round_probe."):
            pass
    except OSError as e:
        raise UsageError(f"OUT {out!r} is not a writable directory: {e.strerror or e}") from None
    return os.path.abspath(out)


# ------------------------------------------------------------------------------------ the round
@dataclass
class Stage:
    exit: str           # "0", "1", "124", ..., or "skipped"
    seconds: float
    reason: str = ""


@dataclass
class Round:
    """What one run holds: knobs, the two work dirs, each stage's result, the running child."""
    a: argparse.Namespace
    given: dict
    config_file: str
    out: str
    logs: str                       # L: logs and per-stage JSON, packed into OUT
    data: str = ""                  # D: checkpoint, prompt and logits, removed at the end
    t_start: float = field(default_factory=time.monotonic)
    stages: dict = field(default_factory=dict)
    commands: dict = field(default_factory=dict)
    prov: dict = field(default_factory=dict)
    hf_missing: str = ""            # why the HF stages cannot run ("" = they can)
    child: subprocess.Popen | None = None

    @property
    def ckpt(self) -> str:
        return os.path.join(self.data, "ckpt")

    @property
    def streamlab(self) -> str:
        return os.path.join(self.a.bin, "streamlab")

    def path(self, name: str) -> str:
        return os.path.join(self.data, name)

    def log(self, name: str) -> str:
        return os.path.join(self.logs, name)

    def ok(self, name: str) -> bool:
        s = self.stages.get(name)
        return s is not None and s.exit == "0"


def outcome(r: Round, name: str) -> str:
    """'skipped' or 'exit N', for the reason of a stage that depends on it."""
    s = r.stages.get(name)
    return "not run" if s is None else "skipped" if s.exit == "skipped" else f"exit {s.exit}"


def say(*a):
    print(*a, flush=True)


def tail(path: str, n: int) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:]).rstrip("\n")
    except OSError:
        return ""


def time_left(r: Round) -> float:
    return r.a.deadline - (time.monotonic() - r.t_start) - RESERVE_S


def skip(r: Round, name: str, reason: str) -> None:
    r.stages[name] = Stage("skipped", 0.0, reason)
    say(f"=== {name}: skipped ({reason})")


def budget(r: Round, name: str, limit: float) -> float | None:
    """The stage's limit under the whole-run deadline; None (and the stage skipped) when too little
    is left."""
    left = time_left(r)
    if left < MIN_STAGE_S:
        skip(r, name, f"deadline {r.a.deadline}s reached")
        return None
    return min(limit, left)


def run_child(r: Round, name: str, cmd: list, limit: float) -> int:
    """One child process, stdout to L/NAME.out, stderr to L/NAME.log (JSON-printing tools keep
    stdout clean). It stays in our process group, so a kill of the whole group (the caller's
    timeout) reaches it at once; past `limit` it gets SIGTERM, then SIGKILL after GRACE_S
    (124 / 137, as GNU timeout -k reports them). On our own SIGTERM it is stopped the same way."""
    with open(r.log(name + ".out"), "wb") as out, open(r.log(name + ".log"), "wb") as err:
        try:
            r.child = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=child_env(r))
        except OSError as e:    # the shell's codes: 127 not found, 126 not executable
            err.write(f"hf_round: cannot run {cmd[0]}: {e.strerror}\n".encode())
            return 127 if isinstance(e, FileNotFoundError) else 126
        try:
            return r.child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            return 124 if stop_child(r.child) else 137
        finally:
            if r.child.poll() is None:      # Interrupted: stop it before the cleanup removes its files
                stop_child(r.child)
            r.child = None


def stop_child(p: subprocess.Popen) -> bool:
    """SIGTERM, then SIGKILL after GRACE_S; True when SIGTERM was enough."""
    p.terminate()
    try:
        p.wait(timeout=GRACE_S)
        return True
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return False


def stage(r: Round, name: str, limit: float, cmd: list) -> bool:
    """One bounded child-process stage under the deadline: logged, timed, recorded, packed."""
    limit = budget(r, name, limit)
    if limit is None:
        return False
    cmd = [str(c) for c in cmd]
    record_command(r, name, shlex.join(cmd))
    say(f"=== {name} (limit {limit:.0f}s): {shlex.join(cmd)}")
    t0 = time.monotonic()
    try:
        rc = run_child(r, name, cmd, limit)
    except Interrupted as e:
        r.stages[name] = Stage(str(128 + e.signum), round(time.monotonic() - t0, 1),
                               f"interrupted by {signal.Signals(e.signum).name}")
        raise
    return finish(r, name, rc, t0, "timed out" if rc in (124, 137) else "")


def finish(r: Round, name: str, rc: int, t0: float, reason: str = "") -> bool:
    r.stages[name] = Stage(str(rc), round(time.monotonic() - t0, 1), reason)
    log = tail(r.log(name + ".log"), 8)
    if log:
        say(log)
    say(f"--- {name}: exit {rc} in {r.stages[name].seconds} s")
    pack(r)
    return rc == 0


def in_process(r: Round, name: str, fn) -> bool:
    """A stage run here (quick, numpy only): fn's StageError becomes the exit code and its message
    goes to L/NAME.log as a child's stderr would. No timeout: it only reads a config and writes a
    small array, but it still waits for the deadline like the others."""
    if budget(r, name, 0) is None:
        return False
    record_command(r, name, f"{shlex.join([sys.executable, os.path.abspath(__file__)])} (in-process stage {name})")
    say(f"=== {name} (in-process)")
    t0, rc, why = time.monotonic(), 0, ""
    with open(r.log(name + ".out"), "w") as out, open(r.log(name + ".log"), "w") as log:
        try:
            for line in fn():
                out.write(line + "\n")
        except StageError as e:
            log.write(f"{name}: {e}\n")
            rc, why = e.code, str(e)
        except Exception as e:      # a malformed config, a full disk: this stage's failure, not a crash
            log.write(f"{name}: {type(e).__name__}: {e}\n")
            rc, why = 1, f"{type(e).__name__}: {e}"
    return finish(r, name, rc, t0, why)


def record_command(r: Round, name: str, cmd: str) -> None:
    r.commands[name] = cmd
    with open(r.log("commands.tsv"), "a") as f:
        f.write(f"{name}\t{cmd}\n")


def child_env(r: Round) -> dict:
    env = dict(os.environ)
    env["PATH"] = "/usr/local/cuda/bin:" + env.get("PATH", "")
    env["STREAMLAB_CONFIG_DIR"] = os.path.join(ROOT, "model", "configs")
    lib = os.path.abspath(r.a.bin)
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    # The checkpoint is local: HF must never try the hub (the device machine has no network).
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
               TOKENIZERS_PARALLELISM="false")
    env.setdefault("STREAMLAB_COMMIT", r.prov.get("commit", "unknown"))
    return env


def pack(r: Round) -> None:
    """OUT/hf_round.tar.gz = L as `tar czf -C L .` made it; after every stage, so that a run killed
    with SIGKILL still leaves what it had. Written beside and renamed: never half a tarball."""
    tmp = os.path.join(r.out, ".hf_round.tar.gz.tmp")
    try:
        with tarfile.open(tmp, "w:gz") as t:
            t.add(r.logs, arcname=".")
        os.replace(tmp, os.path.join(r.out, "hf_round.tar.gz"))
    except OSError as e:
        say(f"hf_round: warning: cannot write {r.out}/hf_round.tar.gz: {e}")


# ------------------------------------------------------------------------------------------ env
# Run in PY, not here: importing torch takes seconds and this process must stay small and quick to
# clean up. Prints one JSON line: versions of what imports, the names of what does not.
PROBE = r"""
import importlib, json, sys
r = {"python": sys.version.split()[0], "versions": {}, "missing": []}
for n in sys.argv[1:]:
    try:
        m = importlib.import_module(n)
        r["versions"][n] = getattr(m, "__version__", "?")
        if n == "torch":
            r["versions"]["cuda"] = str(m.version.cuda)
    except Exception as e:
        r["missing"].append(n)
print(json.dumps(r))
"""


def probe_python(py: str) -> dict | None:
    """Which of HF_PACKAGES PY imports; None when PY itself does not run (or hangs)."""
    try:
        p = subprocess.run([py, "-c", PROBE, *HF_PACKAGES], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def python_line(probe: dict | None, py: str) -> str:
    """The provenance line, as the shell version wrote it when everything imports."""
    if probe is None:
        return f"{py} did not run (or took over 60 s to import {', '.join(HF_PACKAGES)})"
    v = probe["versions"]
    parts = [probe["python"]]
    for n in ("torch", "cuda", "transformers", "numpy", "safetensors"):
        if n in v:
            parts += [n, v[n]]
    if probe["missing"]:
        return " ".join(parts) + "; missing: " + ", ".join(probe["missing"])
    return " ".join(parts)


def command_line(cmd: list, timeout: int = 30) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return (p.stdout or p.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({e})"


def commit_of(a: argparse.Namespace) -> str:
    """The build's commit (scripts/gpu_build.sh writes BIN/COMMIT), else the checkout's."""
    try:
        with open(os.path.join(a.bin, "COMMIT")) as f:
            return f.read(40)
    except OSError:
        pass
    c = command_line(["git", "-C", ROOT, "rev-parse", "HEAD"])
    return c if len(c) == 40 else "unknown"


def mem_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(l for l in f if l.startswith("MemTotal:")).split()[1])
        return f"{kb >> 20} GiB"
    except (OSError, StopIteration, ValueError):
        return "?"


def stage_env(r: Round) -> None:
    """Provenance (GPU, driver, CUDA, commit, date, python packages): printed, kept in
    L/provenance.txt, and the facts later stages depend on (binary present, HF importable)."""
    a, p = r.a, r.prov
    p["date_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    p["host"] = socket.gethostname()
    p["commit"] = os.environ.get("STREAMLAB_COMMIT") or commit_of(a)
    p["config"] = f"{a.config} ({r.config_file})  backend: {a.backend}  hf device: {a.device}"
    p["gpu"] = (command_line(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"]).splitlines() or ["?"])[0] \
        if shutil.which("nvidia-smi") else "none (no nvidia-smi)"
    if shutil.which("nvcc"):
        p["nvcc"] = (command_line(["nvcc", "--version"]).splitlines() or ["?"])[-1]
    probe = probe_python(a.python)
    p["python"] = python_line(probe, a.python)
    p["cpus"] = f"{os.cpu_count()}  mem: {mem_gib()}"
    write_provenance(r)
    say(tail(r.log("provenance.txt"), 100))
    if probe is None or probe["missing"]:
        names = ", ".join(probe["missing"]) if probe else ", ".join(HF_PACKAGES)
        r.hf_missing = f"{a.python} cannot import {names}"
        say(f"hf_round: {r.hf_missing}: the HF stages will be skipped "
            "(pip install torch transformers safetensors numpy into that interpreter)")
    if binary_problem(r):
        say(f"hf_round: error: {binary_problem(r)}")


def binary_problem(r: Round) -> str:
    """Why BIN/streamlab cannot run ("" = it can): told at the start, recorded in stage ours."""
    if not os.path.isfile(r.streamlab):
        return f"{r.streamlab} not found (BIN={r.a.bin})"
    if not os.access(r.streamlab, os.X_OK):
        return f"{r.streamlab} is not executable (BIN={r.a.bin})"
    return ""


def write_provenance(r: Round) -> None:
    with open(r.log("provenance.txt"), "w") as f:
        for k, v in r.prov.items():
            f.write(f"{k}: {v}\n")


# ----------------------------------------------------------------------------------------- plan
def load_numpy():
    try:
        import numpy as np
    except ImportError:
        raise StageError(f"python packages missing in {sys.executable}: numpy (pip install numpy)") from None
    return np


def prompt_length(c: dict, T, steps: int) -> tuple[int, int | None, list]:
    """The prompt is kept short on purpose: at position p a CSA (ratio-4) layer has (p+1)//4
    compressed entries and its indexer keeps min(index_topk, entries). While every entry fits
    (T + STEPS <= 4*index_topk + 3) the selection is "all causal entries" on both sides, so no
    score difference between our bf16 and HF's fp32 (or HF's unspecified tie order) can flip
    which entries are attended to: a flip would move a position's logits by far more than bf16
    rounding and make the comparison meaningless. flash-2l: index_topk 512 -> 2051 positions,
    T auto = min(256, that - STEPS) = 256 = 2 x sliding_window, so the prefill runs the window mask.
    tiny: index_topk 8 -> T + STEPS <= 35 (T 27)."""
    L = c["num_hidden_layers"]
    ratios = [max(1, x) for x in c["compress_ratios"][:L]]
    csa = 4 in ratios
    cover = 4 * c["index_topk"] + 3 if csa else 1 << 30
    t = min(256, cover - steps) if T == "auto" else T
    if t < 1:
        raise StageError(f"no prompt length fits: index_topk {c['index_topk']} covers {cover} positions, STEPS {steps}")
    if csa and t + steps > cover:
        raise StageError(f"T {t} + STEPS {steps} > {cover}: the CSA indexer's top-{c['index_topk']} would not keep "
                         "every compressed entry, and selection flips could decide the comparison (lower T or STEPS)")
    return t, cover if csa else None, ratios


def checkpoint_size(c: dict, save_dtype: str) -> tuple[int, int, int]:
    """(bytes, of them mtp.*, tensors) from make_random_ckpt.specs (= model/weights.cpp: gate, hc_*,
    attn_sink, ape and gate.bias f32, tid2eid i64, the rest in the save dtype)."""
    from make_random_ckpt import specs

    def nbytes(shape, kind):
        each = 8 if kind == "tid2eid" else 4 if kind in ("gate", "hcfn", "hcscale", "f32") else \
            2 if save_dtype == "bf16" else 4
        return math.prod(shape) * each
    sp = specs(c, True)
    total = sum(nbytes(s, k) for _, s, k in sp)
    return total, sum(nbytes(s, k) for n, s, k in sp if n.startswith("mtp.")), len(sp)


def plan_steps(r: Round):
    """Stage plan: prompt + plan.json in D, then the disk check (exit 3 below size + 2 GiB)."""
    a = r.a
    with open(r.config_file) as f:
        c = json.load(f)
    t, cover, ratios = prompt_length(c, a.prompt_tokens, a.steps)
    np = load_numpy()
    total, mtp, n = checkpoint_size(c, a.save_dtype)
    rng = np.random.default_rng(1234)
    ids = rng.integers(0, c["vocab_size"], size=(1, t), dtype=np.int64).astype(np.int32)
    np.save(r.path("tokens.npy"), ids)
    plan = {"config_file": r.config_file, "prompt_tokens": t, "batch": 1, "decode_steps_compared": a.steps,
            "speed_decode_steps": a.speed_steps, "tokens_file": "tokens.npy (int32 [1, T], numpy default_rng(1234))",
            "index_topk": c["index_topk"], "csa_positions_fully_covered": cover, "layer_ratios": ratios,
            "sliding_window": c["sliding_window"], "save_dtype": a.save_dtype, "checkpoint_bytes_predicted": total,
            "checkpoint_mtp_bytes_predicted": mtp, "checkpoint_tensors_predicted": n}
    for p in (r.path("plan.json"), r.log("plan.json")):
        with open(p, "w") as f:
            json.dump(plan, f, indent=2)
    line = (f"prompt T={t} (batch 1), {a.steps} compared decode steps, {a.speed_steps} timed; checkpoint "
            f"({a.save_dtype} save) {total / 2**30:.2f} GiB = {total / 1e9:.2f} GB ({mtp / 2**30:.2f} GiB mtp.*), "
            f"{n} tensors")
    say(line)
    yield line
    yield str(total)
    check_disk(r, total)


def check_disk(r: Round, need: int) -> None:
    """flash-2l, bf16 save: 41.71 GB = 38.84 GiB in 2395 tensors (12.32 GiB of it the MTP block,
    which HF ignores), checked against the saved files. HF loads from the directory without
    writing a copy and the logits files are ~70 MB, so the 64 GiB disk of the device machine
    holds it; the run refuses to start the checkpoint below size + 2 GiB free (exit 3)."""
    avail = shutil.disk_usage(r.data).free
    fstype = (command_line(["df", "-PT", r.data]).splitlines()[-1:] or ["? ?"])[0].split()[1:2] or ["?"]
    say(f"temp dir {r.data} ({fstype[0]}): {avail >> 30} GiB free, checkpoint needs {need >> 30} GiB + 2 GiB margin")
    r.prov["disk"] = f"{r.data} {fstype[0]} avail_bytes={avail} need_bytes={need}"
    write_provenance(r)
    if avail < need + DISK_MARGIN:
        raise StageError(f"not enough disk in {os.path.dirname(r.data)} for the checkpoint: {avail} bytes free, "
                         f"{need + DISK_MARGIN} needed (set CKPT_ROOT / --ckpt-root)", 3)


def pick_ckpt_root(a: argparse.Namespace) -> str:
    """CKPT_ROOT, else whichever of $TMPDIR (or /tmp) and the repo's filesystem has the most room
    (both are local disk on the device machine)."""
    if a.ckpt_root:
        return a.ckpt_root
    best, most = "/tmp", -1
    for c in (os.environ.get("TMPDIR") or "/tmp", ROOT):
        try:
            free = shutil.disk_usage(c).free
        except OSError:
            continue
        if free > most:
            best, most = c, free
    return best


# ----------------------------------------------------------------------------------------- ours
def stage_ours(r: Round) -> None:
    a = r.a
    missing = binary_problem(r)
    if missing:
        # Recorded as the shell would have reported it (127 / 126), whatever else failed before.
        r.stages["ours"] = Stage("127" if "not found" in missing else "126", 0.0, missing)
        say(f"=== ours: exit {r.stages['ours'].exit} ({missing})")
        return
    if not r.ok("plan"):
        return skip(r, "ours", "plan failed")
    stage(r, "ours", a.timeout_ours, [
        r.streamlab, "run", "--config", a.config, "--backend", a.backend, "--batch", 1, "--rope", "plain",
        "--tokens", r.path("tokens.npy"), "--steps", a.steps, "--dump-logits", r.path("ours_prefill.npy"),
        "--dump-decode-logits", r.path("ours_decode.npy"), "--save-checkpoint", r.ckpt,
        "--save-dtype", a.save_dtype, "--json"])
    if os.path.exists(r.log("ours.out")):
        shutil.copyfile(r.log("ours.out"), r.log("ours.json"))
    if r.ok("ours"):
        try:
            decode_inputs(r)
        except StageError as e:
            r.stages["ours"] = Stage("8", r.stages["ours"].seconds, str(e))
            say(f"hf_round: ours: {e} (exit 8)")
        note_checkpoint_size(r)


def decode_inputs(r: Round) -> None:
    """The peer's decode inputs: ours fed step s+1 with the token it sampled at step s (s = 0: the
    prefill), one target token per step (the MTP drafts are not accepted)."""
    np = load_numpy()
    try:
        with open(r.log("ours.json")) as f:
            steps = json.load(f)["steps"][:r.a.steps]
        toks = np.array([s["sampled"] for s in steps], dtype=np.int64)    # [S, 1]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StageError(f"no decode tokens in ours.json: {e!r}") from None
    if toks.shape != (r.a.steps, 1):
        raise StageError(f"decode tokens of shape {toks.shape}, expected ({r.a.steps}, 1)")
    np.save(r.path("decode_tokens.npy"), toks)
    say("decode inputs (ours' greedy):", toks[:, 0].tolist())


def note_checkpoint_size(r: Round) -> None:
    """Apparent size on disk (du -sb), beside the prediction: a wrong prediction would let the disk
    check pass for a checkpoint that does not fit."""
    size = 0
    for d, _, files in os.walk(r.ckpt):
        size += os.stat(d).st_size + sum(os.stat(os.path.join(d, f)).st_size for f in files)
    msg = f"checkpoint on disk: {size} bytes ({size >> 20} MiB)"
    say(msg)
    with open(r.log("ours.log"), "a") as f:
        f.write(msg + "\n")
    r.prov["checkpoint_bytes_on_disk"] = size
    write_provenance(r)


# ------------------------------------------------------------------------------- hf32 / compare
# HF runs in child processes, as before: each loads a model of up to ~40 GB onto the GPU, and only
# a process exit gives all of that back before the next stage (and our speed runs) need it.
# compare_logits.py also stays a child: it is bounded by its stage timeout like the rest, its
# float64 copies of two [T, vocab] arrays go away with it, and its command line stays on record.
def hf_peer(r: Round, decode: list, dtype: str, rest: list) -> list:
    """hf_peer.py's command line, in the order the shell version wrote it."""
    return [r.a.python, os.path.join(PEER, "hf_peer.py"), r.ckpt, "--prefill", r.path("tokens.npy"), *decode,
            "--dtype", dtype, "--device", r.a.device, *rest]


def hf_blocker(r: Round) -> str:
    """Why an HF stage cannot run ("" = it can)."""
    if not r.ok("ours"):
        return "no checkpoint"
    return r.hf_missing


def stage_hf32(r: Round) -> None:
    why = hf_blocker(r)
    if why:
        return skip(r, "hf32", why)
    s = r.a.steps
    stage(r, "hf32", r.a.timeout_hf32, hf_peer(
        r, ["--decode-tokens", r.path("decode_tokens.npy"), "--decode-steps", s], "float32",
        ["--stable-topk", "--warmup-steps", 0, "--dump-logits", r.path("hf_prefill.npy"),
         "--dump-decode-logits", r.path("hf_decode.npy"), "--json", r.log("hf32.json")]))


def compare(r: Round, name: str, limit: int, ours: str, ref: str, tol, *extra) -> None:
    stage(r, name, limit, [r.a.python, os.path.join(PEER, "compare_logits.py"), r.path(ours), r.path(ref),
                           "--tol", tol, *extra, "--json", r.log(name + ".json")])
    last = tail(r.log(name + ".out"), 1)
    if last:
        say(last)


def stage_compare(r: Round) -> None:
    if not r.ok("hf32"):
        why = f"no HF fp32 logits (hf32 {outcome(r, 'hf32')})"
        skip(r, "compare_prefill", why)
        return skip(r, "compare_decode", why)
    compare(r, "compare_prefill", 120, "ours_prefill.npy", "hf_prefill.npy", r.a.tol)
    compare(r, "compare_decode", 60, "ours_decode.npy", "hf_decode.npy", r.a.tol, "--rows", 0)


def discard(r: Round, *names: str) -> None:
    """Logits are ~130 MB each at flash dims: gone as soon as compared (kept with KEEP_CKPT=1)."""
    if r.a.keep_ckpt:
        return
    for n in names:
        try:
            os.remove(r.path(n))
        except FileNotFoundError:
            pass


# ----------------------------------------------------------------------------------------- hf16
def stage_hf16(r: Round) -> None:
    why = hf_blocker(r)
    if why:
        skip(r, "hf16", why)
    else:
        stage(r, "hf16", r.a.timeout_hf16, hf_peer(
            r, ["--decode-steps", r.a.speed_steps], "bfloat16",
            ["--warmup-steps", 3, "--dump-logits", r.path("hf16_prefill.npy"), "--json", r.log("hf16.json")]))
    # For scale only (tolerance 1: informational): HF's own bf16 prefill logits against its fp32
    # ones (HF_NOTES.md 5: ~0.12 on tiny; its router, pooling and residual run in bf16).
    if r.ok("hf16") and os.path.exists(r.path("hf_prefill.npy")):
        compare(r, "compare_hf_bf16", 120, "hf16_prefill.npy", "hf_prefill.npy", 1)
    else:
        skip(r, "compare_hf_bf16", f"no HF bf16 logits (hf16 {outcome(r, 'hf16')})" if not r.ok("hf16")
             else f"no HF fp32 prefill logits (hf32 {outcome(r, 'hf32')})")


# ---------------------------------------------------------------------------------------- speed
def stage_speed(r: Round) -> None:
    """Ours at HF's shape (checkpoint, prompt, SPEED_STEPS steps), once per variant: the default
    step runs the target and its MTP draft step, *-nodraft the target only, as HF (no MTP)."""
    a = r.a
    for v in a.speed_variants:
        name = f"speed_{v}"
        if not r.ok("ours"):
            skip(r, name, "no checkpoint")
            continue
        stage(r, name, a.timeout_speed, [r.streamlab, "run", "--checkpoint", r.ckpt, "--backend", a.backend,
                                         "--batch", 1, "--tokens", r.path("tokens.npy"), "--steps", a.speed_steps,
                                         *SPEED_FLAGS[v], "--json"])
        if os.path.exists(r.log(name + ".out")):
            shutil.copyfile(r.log(name + ".out"), r.log(name + ".json"))


# -------------------------------------------------------------------------------------- summary
def load_json(r: Round, name: str):
    try:
        with open(r.log(name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def cmp_summary(c):
    if not c:
        return None
    keys = ("positions", "vocab", "finite", "rel", "rel_max_position", "rel_median_position", "top1_agreement",
            "top1_disagree_positions", "max_abs", "ref_abs_max", "tol", "pass")
    s = {k: c.get(k) for k in keys}
    s["per_position_rel"] = [float(f"{x['rel']:.4g}") for x in c.get("per_position", [])]
    return s


def step_ms(j, kinds) -> list:
    return [s["ms"] for s in j["steps"] if s["kind"] in kinds] if j else []


def ours_speed(j, variant: str):
    """One speed variant's figures; graph: the replays, eager: the decode steps but the first."""
    if not j:
        return None
    ms = step_ms(j, ("replay",)) if variant.startswith("graph") else step_ms(j, ("decode",))[1:]
    pre = step_ms(j, ("prefill",))
    g = j.get("graph") or {}
    return {"median_ms": statistics.median(ms) if ms else None, "min_ms": min(ms) if ms else None,
            "steps_timed": len(ms), "draft_steps": j.get("draft_steps"), "mtp_layers": j.get("mtp_layers"),
            "prefill_ms": pre[0] if pre else None, "capture_ms": g.get("capture_ms"), "nodes": g.get("nodes"),
            "memory": j.get("memory"), "timer": "steady_clock around decode_step (wall, incl. the host copy of "
            "the logits and tokens)", "per_step_ms": [round(x, 4) for x in ms]}


def hf_speed(hf16):
    if not hf16:
        return None
    d = hf16["decode"]
    return {"median_ms": d.get("median_ms"), "min_ms": d["min_ms"], "mean_ms": d["mean_ms"], "steps": d["steps"],
            "warmup_run_steps": d["warmup_run_steps"], "timer": d["timer"], "prefill_ms": hf16.get("prefill_ms"),
            "load_s": hf16.get("load_s"), "peak_memory_bytes": hf16.get("peak_memory_bytes"),
            "attn_implementation": hf16.get("attn_implementation"),
            "per_step_ms": [round(x, 4) for x in d["per_step_ms"]]}


def speed_section(r: Round, plan, hf16) -> dict:
    speed = {v: ours_speed(load_json(r, f"speed_{v}.json"), v) for v in r.a.speed_variants}
    hf_ms = ((hf16 or {}).get("decode") or {}).get("median_ms")
    ratios = {v: (hf_ms / s["median_ms"]) if (hf_ms and s and s["median_ms"]) else None for v, s in speed.items()}
    prim = next((v for v in ("graph", "eager") if ratios.get(v)), None)
    return {
        "shape": {"batch": 1, "prompt_tokens": (plan or {}).get("prompt_tokens"),
                  "decode_steps": (plan or {}).get("speed_decode_steps")},
        "hf_bf16": hf_speed(hf16), "ours": speed, "ratio_hf_over_ours": ratios, "primary": prim,
        "primary_ratio": ratios.get(prim) if prim else None, "target_ratio": 3.0,
        "note": "ours' default step runs the target and its MTP draft step (flash-2l: 1 MTP layer); *-nodraft runs the "
                "target only, as HF (no MTP). The primary ratio uses the default step (more work on our side).",
    }


def logits_section(r: Round, ours, hf32) -> dict:
    h = hf32 or {}
    return {
        "tolerance": r.a.tol,
        "note": "ours in bf16 (CUDA) or fp32 (CPU), --rope plain (HF's RoPE: plain on sliding layers); HF in "
                "float32 with --stable-topk; decode steps teacher-forced with ours' greedy tokens",
        "prefill": cmp_summary(load_json(r, "compare_prefill.json")),
        "decode": cmp_summary(load_json(r, "compare_decode.json")),
        "ours_greedy_tokens": [s["sampled"] for s in ours["steps"]] if ours and "steps" in ours else None,
        "hf_fp32_greedy_tokens": h.get("greedy_tokens"),
        "hf_fp32_greedy_agreement_with_ours": (h.get("decode_tokens") or {}).get("greedy_agreement"),
        "hf_fp32_notes": (h.get("config") or {}).get("notes"),
        "hf_fp32_load_s": h.get("load_s"),
        "hf_bf16_prefill_vs_hf_fp32": cmp_summary(load_json(r, "compare_hf_bf16.json")),
    }


def summary(r: Round) -> dict:
    """hf_compare.json: the keys of the shell version's, plus each stage's reason."""
    plan, ours, hf32, hf16 = (load_json(r, n) for n in ("plan.json", "ours.json", "hf32.json", "hf16.json"))
    p = r.prov
    bad = [n for n, s in r.stages.items() if s.exit != "0"]
    return {
        "tool": "experiments/peer/hf_round.py",
        "what": "streamlab (ours) vs Hugging Face transformers DeepseekV4ForCausalLM on one random checkpoint "
                "saved by ours: logits (HF float32 = reference) and decode step time (HF bfloat16)",
        "provenance": {"commit": p.get("commit"), "date_utc": p.get("date_utc"), "host": p.get("host"),
                       "gpu": p.get("gpu"), "nvcc": p.get("nvcc"), "python": p.get("python"), "disk": p.get("disk"),
                       "hf_fp32": (hf32 or {}).get("provenance"), "hf_bf16": (hf16 or {}).get("provenance"),
                       "script": shlex.join(sys.argv), "knobs": r.given},
        "config": r.a.config, "backend": r.a.backend, "hf_device": r.a.device,
        "plan": plan,
        "checkpoint_bytes_on_disk": p.get("checkpoint_bytes_on_disk"),
        "commands": r.commands,
        "stages": {n: {"exit": s.exit, "seconds": s.seconds, **({"reason": s.reason} if s.reason else {})}
                   for n, s in r.stages.items()},
        "wall_s": int(time.monotonic() - r.t_start),
        "logits": logits_section(r, ours, hf32),
        "speed": speed_section(r, plan, hf16),
        "pass": not bad,
        "failed_stages": bad,
    }


def summary_lines(r: Round, res: dict, out_json: str) -> list:
    lines = ["=== hf_round summary"]
    for n, s in r.stages.items():
        lines.append(f"  {n:<22} exit {s.exit:<8} {s.seconds:>7} s" + (f"  ({s.reason})" if s.reason else ""))
    lg, sp = res["logits"], res["speed"]
    for n in ("prefill", "decode"):
        c = lg[n]
        if c:
            lines.append(f"  logits {n:<8} rel {c['rel']:.3e} (per-position max {c['rel_max_position']:.3e}, median "
                         f"{c['rel_median_position']:.3e}), top-1 {100 * c['top1_agreement']:.1f}% of "
                         f"{c['positions']}, tol {c['tol']:g} -> {'PASS' if c['pass'] else 'FAIL'}")
    ch = lg["hf_bf16_prefill_vs_hf_fp32"]
    if ch:
        lines.append(f"  (scale) HF's own bf16 prefill vs HF fp32: rel {ch['rel']:.3e}, "
                     f"top-1 {100 * ch['top1_agreement']:.1f}%")
    ga = lg["hf_fp32_greedy_agreement_with_ours"]
    if ga is not None:
        lines.append(f"  HF fp32 greedy == ours' greedy on {100 * ga:.1f}% of the compared steps")
    hf_ms = (sp["hf_bf16"] or {}).get("median_ms")
    if hf_ms:
        lines.append(f"  HF bf16 decode median {hf_ms:.3f} ms/step")
    for v, s in sp["ours"].items():
        if s and s["median_ms"]:
            ratio = sp["ratio_hf_over_ours"][v]
            lines.append(f"  ours {v:<14} median {s['median_ms']:.3f} ms/step" +
                         (f"  -> HF/ours {ratio:.2f}x" if ratio else ""))
    if sp["primary"]:
        x = sp["primary_ratio"]
        lines.append(f"  primary ratio HF/ours ({sp['primary']}) {x:.2f}x (target >= 3x: {'met' if x >= 3 else 'MISSED'})")
    lines.append(f"  wall {res['wall_s']} s; JSON: {out_json}" +
                 ("" if res["pass"] else f"; not passed: {', '.join(res['failed_stages'])}"))
    return lines


def write_summary(r: Round) -> bool:
    """stages.tsv, hf_compare.json, summary.txt, then the tarball; True when every stage passed."""
    with open(r.log("stages.tsv"), "w") as f:
        for n, s in r.stages.items():
            f.write(f"{n}\t{s.exit}\t{s.seconds}" + (f"\t{s.reason}" if s.reason else "") + "\n")
    res = summary(r)
    out_json = os.path.join(r.out, "hf_compare.json")
    with open(out_json + ".tmp", "w") as f:
        json.dump(res, f, indent=2)
    os.replace(out_json + ".tmp", out_json)
    lines = summary_lines(r, res, out_json)
    say("\n".join(lines))
    with open(r.log("summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    pack(r)
    return res["pass"]


# ---------------------------------------------------------------------------------- the run
def remove_data(r: Round) -> None:
    """The checkpoint (39 GiB at flash-2l) must not outlive the run: the next device call gets the
    same 64 GiB disk. Called on every exit path, signals included."""
    if not r.data or not os.path.isdir(r.data):
        return
    if r.a.keep_ckpt:
        say(f"hf_round: KEEP_CKPT=1: data left in {r.data} (checkpoint {r.ckpt})")
        return
    shutil.rmtree(r.data, ignore_errors=True)
    say(f"=== checkpoint removed ({r.ckpt})")


def on_signal(signum, _frame):
    raise Interrupted(signum)


def run_stages(r: Round) -> None:
    stage_env(r)
    root = pick_ckpt_root(r.a)
    os.makedirs(root, exist_ok=True)
    r.data = tempfile.mkdtemp(prefix="hf_round_data.", dir=root)
    in_process(r, "plan", lambda: plan_steps(r))
    stage_ours(r)
    stage_hf32(r)
    stage_compare(r)
    discard(r, "ours_prefill.npy", "ours_decode.npy", "hf_decode.npy")
    stage_hf16(r)
    discard(r, "hf_prefill.npy", "hf16_prefill.npy")
    stage_speed(r)


def main(argv=None) -> int:
    sys.stdout.reconfigure(line_buffering=True)
    try:
        a, given = read_knobs(argv, os.environ)
        config_file = resolve_config(a.config)
        out = check_out(a.out)
    except UsageError as e:
        print(f"hf_round: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    r = Round(a, given, config_file, out, tempfile.mkdtemp(prefix="hf_round_logs."))
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    code = None
    try:
        run_stages(r)
    except Interrupted as e:
        code = 128 + e.signum
        say(f"hf_round: {signal.Signals(e.signum).name}: stopping, removing the checkpoint")
    finally:
        # No second signal may cut the cleanup short (the device tool's kill comes as SIGTERM).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
        if r.child is not None and r.child.poll() is None:
            stop_child(r.child)
        remove_data(r)
        try:
            passed = write_summary(r)
        except OSError as e:
            say(f"hf_round: error: cannot write the summary to {r.out}: {e}")
            passed = False
        shutil.rmtree(r.logs, ignore_errors=True)
    return code if code is not None else 0 if passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
