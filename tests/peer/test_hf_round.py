#!/usr/bin/env python3
"""experiments/peer/hf_round.py on the CPU backend with the tiny config, run the way a user does.

Usage: test_hf_round.py errors|cpu STREAMLAB_BINARY

  errors  what needs no python package: --help, usage errors (exit 2, nothing created), a
          missing binary (stage ours exit 127, exit 1), DEADLINE=1 (every stage skipped with the
          reason), numpy missing from the interpreter (plan fails naming it).
  cpu     needs numpy (exit 77 = skipped, with the reason, without it): a full round (prompt and
          logits files and their shapes, the checkpoint's size against the prediction, each
          stage's exit code, the HF stages skipped with the reason when torch / transformers do
          not import, and run for real on tiny, DEVICE=cpu, when they do), the checkpoint
          removed afterwards, a deadline that skips the later stages, T beyond what the config
          allows, and SIGTERM while a stage runs (exit 143, child stopped, checkpoint removed).

The interpreter running this test is the one that runs hf_round.py (CTest passes the one CMake
found; scripts/quickstart.sh test makes it a venv with numpy).
"""
import glob
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "experiments", "peer", "hf_round.py")
HF_STAGES = ("hf32", "compare_prefill", "compare_decode", "hf16", "compare_hf_bf16")
KNOB_ENV = ("BIN", "OUT", "CONFIG", "BACKEND", "DEVICE", "PY", "T", "STEPS", "SPEED_STEPS", "TOL", "CKPT_ROOT",
            "KEEP_CKPT", "SPEED_VARIANTS", "SAVE_DTYPE", "DEADLINE", "TO_OURS", "TO_HF32", "TO_HF16", "TO_SPEED")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def env_for(tmp, **knobs):
    """A clean environment: no knob leaks in from the caller's shell."""
    env = {k: v for k, v in os.environ.items() if k not in KNOB_ENV}
    env.update(CONFIG="tiny", BACKEND="cpu", DEVICE="cpu", SPEED_STEPS="4", OUT=os.path.join(tmp, "out"),
               CKPT_ROOT=os.path.join(tmp, "ck"), TMPDIR=tmp)
    env.update({k: str(v) for k, v in knobs.items()})
    return env


def hf_round(env, *args, timeout=300):
    p = subprocess.run([sys.executable, MODULE, *args], env=env, capture_output=True, text=True, timeout=timeout,
                       cwd=ROOT)
    return p.returncode, p.stdout + p.stderr


def result(env):
    with open(os.path.join(env["OUT"], "hf_compare.json")) as f:
        return json.load(f)


def leftovers(env):
    """Data dirs (checkpoint, logits) and log dirs the run left behind."""
    return glob.glob(os.path.join(env["CKPT_ROOT"], "hf_round_data.*")) + \
        glob.glob(os.path.join(env["TMPDIR"], "hf_round_logs.*"))


def fake_bin(tmp, name, body):
    """A BIN folder whose `streamlab` wraps the real one (slower, or lingering)."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    path = os.path.join(d, "streamlab")
    with open(path, "w") as f:
        f.write("#!/usr/bin/env bash\n" + body + "\n")
    os.chmod(path, 0o755)
    return d


# ----------------------------------------------------------------------------------------- errors
def test_help():
    rc, out = hf_round(os.environ.copy(), "--help")
    check(rc == 0, "--help exits 0")
    check(all(f"[{k};" in out or f"[{k}]" in out for k in KNOB_ENV), "--help names every environment knob")
    check(all(s in out for s in ("plan", "ours", "hf32", "compare", "hf16", "speed", "exit status")),
          "--help lists the stages and the exit codes")


def test_usage_errors(tmp, sl):
    blocker = os.path.join(tmp, "a_file")
    open(blocker, "w").close()
    cases = [({"STEPS": "abc"}, (), "STEPS (environment)"), ({}, ("--speed-variants", "warp"), "unknown variant"),
             ({"CONFIG": "no-such-config"}, (), "not found"), ({"OUT": os.path.join(blocker, "out")}, (),
                                                                "not a writable directory"),
             ({"T": "0"}, (), "must be >= 1"), ({"BACKEND": "tpu"}, (), "one of cuda, cpu")]
    for knobs, args, msg in cases:
        env = env_for(tmp, BIN=os.path.dirname(sl), **knobs)
        rc, out = hf_round(env, *args)
        check(rc == 2 and msg in out, f"usage error {knobs or args}: exit 2 ({rc}), says '{msg}'")
        check(not os.path.exists(env["CKPT_ROOT"]) and not leftovers(env), f"usage error {knobs or args}: nothing created")


def test_missing_binary(tmp):
    env = env_for(tmp, BIN=os.path.join(tmp, "nowhere"))
    rc, out = hf_round(env)
    check(rc == 1, f"missing binary: exit 1 ({rc})")
    check("error: " + os.path.join(tmp, "nowhere", "streamlab") + " not found" in out,
          "missing binary: the error names the path")
    st = result(env)["stages"]
    check(st["ours"]["exit"] == "127" and "not found" in st["ours"]["reason"], "missing binary: ours exit 127, reason")
    check(all(st[s]["exit"] == "skipped" for s in ("hf32", "speed_eager")), "missing binary: later stages skipped")
    check(not leftovers(env), "missing binary: no data or log dir left")


def test_deadline_1(tmp, sl):
    env = env_for(tmp, BIN=os.path.dirname(sl), DEADLINE=1)
    rc, out = hf_round(env)
    j = result(env)
    check(rc == 1 and not j["pass"], f"DEADLINE=1: exit 1 ({rc}), not passed")
    check(j["stages"]["plan"] == {"exit": "skipped", "seconds": 0.0, "reason": "deadline 1s reached"},
          "DEADLINE=1: plan skipped, reason recorded")
    check(all(s["exit"] == "skipped" and s.get("reason") for s in j["stages"].values()),
          "DEADLINE=1: every stage skipped with a reason")
    check(not leftovers(env) and os.path.isfile(os.path.join(env["OUT"], "hf_round.tar.gz")),
          "DEADLINE=1: tarball written, nothing left behind")


def test_numpy_missing(tmp, sl):
    shim = os.path.join(tmp, "shim", "numpy")
    os.makedirs(shim)
    with open(os.path.join(shim, "__init__.py"), "w") as f:
        f.write("raise ImportError('numpy hidden by test_hf_round.py')\n")
    env = env_for(tmp, BIN=os.path.dirname(sl), PYTHONPATH=os.path.dirname(shim))
    rc, out = hf_round(env)
    st = result(env)["stages"]
    check(rc == 1 and st["plan"]["exit"] == "1" and "numpy" in st["plan"]["reason"],
          f"numpy missing: plan fails naming numpy ({st['plan']})")
    check(st["ours"]["reason"] == "plan failed" and all(st[s]["exit"] == "skipped" for s in HF_STAGES),
          "numpy missing: ours and the HF stages skipped")
    check(not leftovers(env), "numpy missing: nothing left behind")


# -------------------------------------------------------------------------------------------- cpu
def hf_importable():
    p = subprocess.run([sys.executable, "-c", "import torch, transformers, safetensors"], capture_output=True)
    return p.returncode == 0


def check_data_files(np, data, j):
    tok = np.load(os.path.join(data, "tokens.npy"))
    check(tok.dtype == np.int32 and tok.shape == (1, 27) and 0 <= tok.min() and tok.max() < 1024,
          f"tokens.npy int32 [1, 27] within the vocab ({tok.dtype} {tok.shape})")
    for name, shape in (("ours_prefill.npy", (27, 1024)), ("ours_decode.npy", (8, 1024))):
        a = np.load(os.path.join(data, name))
        check(a.dtype == np.float32 and a.shape == shape and np.isfinite(a).all(),
              f"{name} float32 {list(shape)}, finite ({a.dtype} {a.shape})")
    dec = np.load(os.path.join(data, "decode_tokens.npy"))
    check(dec.dtype == np.int64 and dec.shape == (8, 1) and dec[:, 0].tolist() == [s[0] for s in
          j["logits"]["ours_greedy_tokens"][:8]], "decode_tokens.npy int64 [8, 1] = ours' greedy tokens")
    ck = os.path.join(data, "ckpt")
    check(os.path.isfile(os.path.join(ck, "config.json")) and glob.glob(os.path.join(ck, "*.safetensors")),
          "checkpoint: config.json and safetensors shards")
    pred, disk = j["plan"]["checkpoint_bytes_predicted"], j["checkpoint_bytes_on_disk"]
    check(pred <= disk <= pred * 1.05, f"checkpoint on disk {disk} bytes within 5% above the prediction {pred}")


def test_full_round(np, tmp, sl, hf):
    env = env_for(tmp, BIN=os.path.dirname(sl), KEEP_CKPT=1)
    rc, out = hf_round(env, timeout=900)
    j = result(env)
    st = j["stages"]
    n_fail = len(failures)
    ours_ok = ("plan", "ours", "speed_eager", "speed_eager-nodraft")
    if not check(all(st[s]["exit"] == "0" for s in ours_ok), f"plan, ours, speed stages exit 0 ({st})"):
        print(out[-2000:], flush=True)  # what the round printed: the rest depends on these stages
        return
    check(list(st) == ["plan", "ours", *HF_STAGES, "speed_eager", "speed_eager-nodraft"], "every stage reported, in order")
    check(j["plan"]["prompt_tokens"] == 27 and j["plan"]["save_dtype"] == "f32", "plan: T auto = 27 on tiny, f32 save")
    check(all(j["speed"]["ours"][v]["median_ms"] > 0 for v in ("eager", "eager-nodraft")), "speed: our step times")
    if hf:
        check(rc == 0 and j["pass"] and all(st[s]["exit"] == "0" for s in HF_STAGES), f"HF stages pass (exit {rc})")
        check(j["logits"]["prefill"]["pass"] and j["logits"]["decode"]["pass"], "logits within TOL of HF fp32")
    else:
        check(rc == 1 and not j["pass"] and j["failed_stages"] == list(HF_STAGES),
              f"without torch: exit 1, failed_stages = the HF stages only ({rc}, {j['failed_stages']})")
        check(all(st[s]["exit"] == "skipped" for s in HF_STAGES), "without torch: HF stages skipped, not passed")
        check("cannot import torch" in st["hf32"]["reason"] and "cannot import torch" in st["hf16"]["reason"],
              f"without torch: the reason names torch ({st['hf32'].get('reason')})")
        check("hf32" in out and "skipped" in out and "cannot import torch" in out, "without torch: summary says so")
    data = glob.glob(os.path.join(env["CKPT_ROOT"], "hf_round_data.*"))
    if check(len(data) == 1, "KEEP_CKPT=1: the data dir is kept"):
        check_data_files(np, data[0], j)
    with tarfile.open(os.path.join(env["OUT"], "hf_round.tar.gz")) as t:
        names = set(t.getnames())
    want = {"./plan.json", "./ours.json", "./provenance.txt", "./stages.tsv", "./commands.tsv", "./summary.txt",
            "./speed_eager.json", "./ours.log", "./plan.out"}
    check(want <= names and not any(n.endswith(".npy") for n in names), f"tarball layout ({sorted(names)})")
    if len(failures) > n_fail:
        print(out[-4000:])


def test_checkpoint_removed_and_deadline(tmp, sl):
    # ours is 7 s slower than the real run: started with >= 10 s left (DEADLINE 36 - 20 reserved),
    # it ends with under 10 s left, so every later stage is skipped for the deadline. The HF
    # interpreter is one that does not run (/bin/false): probing torch + transformers takes tens of
    # seconds where they are installed, which would spend the deadline before plan; the HF stages
    # are skipped either way.
    bindir = fake_bin(tmp, "slow", f"sleep 7\nexec {sl} \"$@\"")
    env = env_for(tmp, BIN=bindir, DEADLINE=36, PY="/bin/false")
    rc, out = hf_round(env)
    st = result(env)["stages"]
    check(rc == 1 and st["plan"]["exit"] == "0" and st["ours"]["exit"] == "0", f"deadline 36: plan, ours ran ({st})")
    check(all(st[s]["exit"] == "skipped" and st[s]["reason"] == "deadline 36s reached"
              for s in ("speed_eager", "speed_eager-nodraft")), "deadline 36: the speed stages skipped for it")
    check(all(st[s]["exit"] == "skipped" and (st[s]["reason"] == "deadline 36s reached" or "cannot import" in
                                              st[s]["reason"] or "did not run" in st[s]["reason"]) for s in ("hf32", "hf16")),
          "deadline 36: the HF stages skipped (for the deadline, or torch missing)")
    check("checkpoint removed" in out and not leftovers(env), "checkpoint removed afterwards (KEEP_CKPT unset)")


def test_prompt_too_long(tmp, sl):
    env = env_for(tmp, BIN=os.path.dirname(sl), T=40)
    rc, out = hf_round(env)
    st = result(env)["stages"]
    check(rc == 1 and st["plan"]["exit"] == "1" and "T 40 + STEPS 8 > 35" in st["plan"]["reason"],
          f"T=40 on tiny: plan refuses with the reason ({st['plan']})")
    check(st["ours"] == {"exit": "skipped", "seconds": 0.0, "reason": "plan failed"} and not leftovers(env),
          "T=40: ours skipped, nothing left behind")


def test_sigterm(tmp, sl):
    # ours runs the real binary (checkpoint written), then lingers as `sleep` in the same process.
    bindir = fake_bin(tmp, "linger", f"{sl} \"$@\" || exit\necho $$ > {tmp}/linger.pid\nexec sleep 120")
    env = env_for(tmp, BIN=bindir)
    p = subprocess.Popen([sys.executable, MODULE], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    pidfile = os.path.join(tmp, "linger.pid")
    t0 = time.monotonic()
    while not os.path.exists(pidfile) and time.monotonic() - t0 < 120 and p.poll() is None:
        time.sleep(0.2)
    time.sleep(0.3)
    data = glob.glob(os.path.join(env["CKPT_ROOT"], "hf_round_data.*", "ckpt", "config.json"))
    check(len(data) == 1, "SIGTERM: the checkpoint exists while ours runs")
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    check(p.returncode == 143, f"SIGTERM: exit 143 ({p.returncode})")
    st = result(env)["stages"]
    check(st["ours"]["exit"] == "143" and st["ours"]["reason"] == "interrupted by SIGTERM",
          f"SIGTERM: ours recorded as interrupted ({st['ours']})")
    check(not leftovers(env), "SIGTERM: checkpoint and logs removed")
    with open(pidfile) as f:
        pid = int(f.read())
    check(not os.path.exists(f"/proc/{pid}"), "SIGTERM: the stage's process is stopped")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("errors", "cpu"):
        print(__doc__)
        return 2
    mode, sl = sys.argv[1], os.path.abspath(sys.argv[2])
    if mode == "cpu":
        try:
            import numpy as np
        except ImportError:
            print(f"SKIP: {sys.executable} has no numpy (stage plan writes the prompt with it); "
                  "scripts/quickstart.sh test gives CTest a venv with it")
            return 77
        hf = hf_importable()
        print("torch + transformers + safetensors " + ("import: the HF stages run on tiny (cpu)" if hf else
              "do not import: the HF stages must be reported skipped"))
    tests = {"errors": [lambda t: test_help(), lambda t: test_usage_errors(t, sl), test_missing_binary,
                        lambda t: test_deadline_1(t, sl), lambda t: test_numpy_missing(t, sl)],
             "cpu": [lambda t: test_full_round(np, t, sl, hf), lambda t: test_checkpoint_removed_and_deadline(t, sl),
                     lambda t: test_prompt_too_long(t, sl), lambda t: test_sigterm(t, sl)]}[mode]
    for test in tests:
        with tempfile.TemporaryDirectory(prefix="test_hf_round.") as tmp:
            test(tmp)
    print(f"{len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
