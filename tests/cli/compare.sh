#!/usr/bin/env bash
# `streamlab compare` as a user runs it, on the CPU reference (the tiny config) so that CI runs the
# whole pipeline: child processes, the report folder (written atomically), reading it back, trace
# inputs, the regression gate on hand-made runs with a known difference, and bad input.
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() { local want=$1; shift; local out; if out=$("$@" 2>&1); then fail "expected an error from: $*"; fi
                 echo "$out" | grep -q "$want" || fail "error for '$*' should mention '$want': $out"; }
M=(--backend cpu --modes eager --config tiny --mtp-layers 2 --draft-steps 2 --context 32)

# 1. A live compare on the CPU: 2 repetitions of 3 policies + the baseline again = 8 children.
mkdir "$tmp/out"
"$bin" compare "${M[@]}" --repetitions 2 --steps 6 --out-dir "$tmp/out" > "$tmp/live.txt" 2> "$tmp/live.err" \
  || { cat "$tmp/live.err"; fail "live compare failed"; }
grep -q "about .* left" "$tmp/live.err" || fail "no progress with time left on stderr"
folder=$(ls -d "$tmp"/out/*/)
test "$(ls "$tmp"/out | wc -l)" = 1 || fail "expected one report folder"
ls -A "$tmp/out" | grep -q staging && fail "a staging folder was left behind"
for f in summary.json report.md report.html; do test -s "$folder/$f" || fail "$f missing"; done
test "$(ls "$folder"/runs/*.json | wc -l)" = 8 || fail "expected 8 measurements in runs/"
grep -q "^verdict" "$tmp/live.txt" || fail "no verdict section"
python3 - "$folder" <<'PY'
import json, sys, html.parser
folder = sys.argv[1]
s = json.load(open(folder + "/summary.json"))
assert s["schema"] == "streamlab.compare/1", s["schema"]
labels = [x["label"] for x in s["sides"]]
assert labels == ["per-layer", "shared", "serial", "per-layer (again)"], labels
roles = {x["label"]: x["role"] for x in s["sides"]}
assert roles["per-layer"] == "baseline" and roles["serial"] == "reference" and roles["per-layer (again)"] == "baseline again"
ok = {"A faster", "B faster", "no meaningful difference", "inconclusive"}
assert s["differences"] and all(d["verdict"] in ok for d in s["differences"])
assert {d["b"] for d in s["differences"]} == {"shared", "serial"}
for d in s["differences"]:
    r = d["relative_difference"]
    assert r["lo"] <= r["estimate"] <= r["hi"] or abs(r["hi"] - r["lo"]) < 1e-12, d
assert set(s["noise"]) == {"eager/step", "eager/target", "eager/draft"}
res = {x["label"]: x["resources"] for x in s["sides"]}
assert res["per-layer"]["streams_created"] == 10 and res["shared"]["streams_created"] == 7 and res["serial"]["streams_created"] == 0
# The HTML parses and holds non-empty plots (one distribution per step part).
class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.svg = 0; self.marks = 0; self.depth = 0
    def handle_starttag(self, t, a):
        if t == "svg": self.svg += 1
        if t in ("circle", "rect"): self.marks += 1
p = P(); p.feed(open(folder + "/report.html").read())
assert p.svg >= 3 and p.marks >= 24, (p.svg, p.marks)
md = open(folder + "/report.md").read()
assert "## Verdict" in md and "| shared |" in md
PY

# 2. Read back: the same differences from the folder alone (the bootstrap is seeded).
"$bin" compare "$folder" --json > "$tmp/back.json"
python3 - "$folder/summary.json" "$tmp/back.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda d: (d["b"], d["key"])
da = {key(d): d for d in a["differences"]}; db = {key(d): d for d in b["differences"]}
assert da.keys() == db.keys()
for k in da:
    assert da[k]["relative_difference"] == db[k]["relative_difference"], k
    assert da[k]["verdict"] == db[k]["verdict"], k
PY
"$bin" compare --recorded "$folder" > "$tmp/rec.txt"
head -1 "$tmp/rec.txt" | grep -q "^Showing the comparison recorded on the CPU" || fail "--recorded first line: $(head -1 "$tmp/rec.txt")"

# 3. An interrupted compare leaves no folder (Ctrl-C), or only a staging folder that the next run
#    removes (SIGKILL).
mkdir "$tmp/int"
"$bin" compare "${M[@]}" --repetitions 50 --steps 6 --out-dir "$tmp/int" > /dev/null 2>&1 & pid=$!
sleep 1.5; kill -INT $pid; rc=0; wait $pid || rc=$?
test $rc = 130 || fail "a compare stopped by SIGINT should exit 130 (128 + 2), got $rc"
test -z "$(ls -A "$tmp/int")" || { ls -la "$tmp/int"; fail "an interrupted compare left files"; }
#    SIGHUP (a closed terminal) stops it in the same order, exit 129 (it used to die, leaving its
#    staging folder).
"$bin" compare "${M[@]}" --repetitions 50 --steps 6 --out-dir "$tmp/int" > /dev/null 2>&1 & pid=$!
sleep 1.5; kill -HUP $pid; rc=0; wait $pid || rc=$?
test $rc = 129 || fail "a compare stopped by SIGHUP should exit 129, got $rc"
test -z "$(ls -A "$tmp/int")" || { ls -la "$tmp/int"; fail "a compare stopped by SIGHUP left files"; }
#    Under nohup (SIGHUP ignored) it carries on.
nohup "$bin" compare "${M[@]}" --repetitions 2 --steps 2 --no-trace --out-dir "$tmp/int" > /dev/null 2>&1 & pid=$!
sleep 1.5; kill -HUP $pid 2> /dev/null || true; rc=0; wait $pid || rc=$?
test $rc = 0 || fail "a compare under nohup should ignore SIGHUP and finish, got $rc"
rm -rf "$tmp/int"/*
"$bin" compare "${M[@]}" --repetitions 50 --steps 6 --out-dir "$tmp/int" > /dev/null 2>&1 & pid=$!
sleep 1.5; { kill -KILL $pid; wait $pid; } 2>/dev/null || true
ls -A "$tmp/int" | grep -vq staging && fail "SIGKILL left a final folder"
"$bin" compare "${M[@]}" --policies shared,serial --repetitions 1 --steps 3 --no-baseline-twice --out-dir "$tmp/int" > /dev/null 2>&1
ls -A "$tmp/int" | grep -q staging && fail "the stale staging folder was not removed"
test "$(ls "$tmp/int" | wc -l)" = 1 || fail "expected exactly the new folder"

# 4. The gate on hand-made runs with a known difference: B 10 % slower than A, 0.2 % noise.
python3 - "$tmp" <<'PY'
import json, os, random, sys
root = sys.argv[1]
def folder(name, centre):
    d = os.path.join(root, name); os.makedirs(d + "/runs")
    runs = []
    for r in range(5):
        rnd = random.Random(hash((name, r)) & 0xffff)
        steps = [centre * (1 + rnd.gauss(0, 0.002)) for _ in range(10)]
        m = {"schema": "streamlab.measure/1", "provenance": {"gpu": "test", "commit": "x", "date": "2026-01-01T00:00:00Z"},
             "stream_source": "cuda",
             "model": {"config": "tiny", "layers": 6, "mtp_layers": 1, "mtp_compress": 0, "batch": 1, "context": 32, "draft_steps": 1},
             "policy": {"name": "shared", "aux_priority": "default", "shared_expert_stream": True, "connections": ""},
             "resources": {"streams_created": 7, "stream_names": [], "stream_owners": [], "stream_setup_ms": 0.1,
                           "events_created": 48, "weights_bytes": 1, "activations_bytes": 1, "peak_bytes": 1, "library_bytes": 0},
             "modes": [{"mode": "graph", "step_ms": steps, "target_ms": [x / 2 for x in steps], "draft_ms": [x / 2 for x in steps],
                        "host_ms": steps, "enqueue_ms": steps, "graph": {"nodes": 1, "edges": 0, "capture_ms": 0, "instantiate_ms": 0}}],
             "traced": []}
        p = f"runs/shared_r{r+1}.json"; json.dump(m, open(os.path.join(d, p), "w"))
        runs.append({"side": "shared", "policy": "shared", "repetition": r + 1, "traced": False, "out": p, "log": ""})
    json.dump({"schema": "streamlab.compare/1", "provenance": {"gpu": "test"},
               "settings": {"kind": "live", "baseline": "shared", "runs": runs}}, open(d + "/summary.json", "w"))
folder("night1", 2.0); folder("night2", 2.2)
PY
rc=0; "$bin" compare "$tmp/night1" "$tmp/night2" --policy shared --fail-if-slower 5 > "$tmp/gate.txt" 2> "$tmp/gate.err" || rc=$?
test $rc = 3 || { cat "$tmp/gate.txt" "$tmp/gate.err"; fail "a 10 % slowdown with --fail-if-slower 5 should exit 3, got $rc"; }
grep -q "night1:shared faster" "$tmp/gate.txt" || fail "verdict should say A faster"
grep -q "slower than" "$tmp/gate.err" || fail "the gate should say what is slower"
"$bin" compare "$tmp/night1" "$tmp/night2" --policy shared --fail-if-slower 15 > /dev/null || fail "15 % gate should pass"
# The two nights share their settings: no note. A side measured otherwise is said to be (here the
# hand-made tiny night beside a recorded flash-6l run on an H200).
# (Output to a file first: grep -q stops reading at its match, and the writer's SIGPIPE would fail
# the pipeline under pipefail, now and then.)
"$bin" compare "$tmp/night1" "$tmp/night2" --policy shared > "$tmp/same.txt"
grep -q "other settings" "$tmp/same.txt" && fail "a note on settings that agree"
recorded=("$(dirname "$0")"/../../results/compare/*/)
"$bin" compare "${recorded[0]}" "$tmp/night1" --policy shared > "$tmp/other_settings.txt"
grep -q "night1:shared. was measured with other settings than .*config flash-6l[-a-z0-9]* against tiny" \
  "$tmp/other_settings.txt" || fail "no note that the sides were measured with other settings"
"$bin" compare "$tmp/night1" "$tmp/night1" --policy shared --fail-if-slower 1 > "$tmp/self.txt"
grep -q "no meaningful difference" "$tmp/self.txt" || fail "a folder against itself should be no meaningful difference"
# 4b. Inputs that would bend the verdict are refused, naming the file and field: a run listed twice
#     in summary.json (its steps would count double), a step of zero time; a missing input is named.
cp -r "$tmp/night2" "$tmp/dup"
python3 - "$tmp/dup/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["settings"]["runs"].append(dict(s["settings"]["runs"][0])); json.dump(s, open(sys.argv[1], "w"))
PY
rc=0; "$bin" compare "$tmp/night1" "$tmp/dup" --policy shared > /dev/null 2> "$tmp/dup.err" || rc=$?
test $rc = 1 && grep -q "settings.runs lists 'runs/shared_r1.json' twice" "$tmp/dup.err" ||
  { cat "$tmp/dup.err"; fail "a run listed twice should be refused (exit $rc)"; }
cp -r "$tmp/night2" "$tmp/zero"
python3 - "$tmp/zero/runs/shared_r3.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["modes"][0]["step_ms"][4] = 0; json.dump(m, open(sys.argv[1], "w"))
PY
rc=0; "$bin" compare "$tmp/night1" "$tmp/zero" --policy shared > /dev/null 2> "$tmp/zero.err" || rc=$?
test $rc = 1 && grep -q "shared_r3.json'.modes\[0\].step_ms\[4\]: 0 ms, expected a time of 1 ns" "$tmp/zero.err" ||
  { cat "$tmp/zero.err"; fail "a step of 0 ms should be refused (exit $rc)"; }
rc=0; "$bin" compare "$tmp/no-such-folder" > /dev/null 2> "$tmp/missing.err" || rc=$?
test $rc = 1 && grep -q "'$tmp/no-such-folder' does not exist" "$tmp/missing.err" ||
  { cat "$tmp/missing.err"; fail "a missing input should be named as missing (exit $rc)"; }

# 5. Two PyTorch profiler traces of another framework: steps from ProfilerStep ranges, kernels
#    matched by role across different stream ids, events counted from the runtime calls.
python3 - "$tmp" <<'PY'
import json, sys
def trace(path, main, aux, gemm_us):
    ev, corr, t = [], 1, 1_700_000_000_000_000.0   # an absolute clock in us, as PyTorch writes it
    for step in range(12):
        s0 = t
        for name, stream, dur in (("gemm", main, gemm_us), ("softmax", aux, 20.0), ("add", main, 10.0)):
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t, "dur": 4,
                       "args": {"correlation": corr}})
            if name == "softmax":
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecordWithFlags", "pid": 1, "tid": 1, "ts": t + 5, "dur": 1, "args": {"correlation": corr + 1000}})
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 1, "tid": 1, "ts": t + 6, "dur": 1, "args": {"correlation": corr + 2000}})
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": t + 8, "dur": dur,
                       "args": {"stream": stream, "correlation": corr, "device": 0}})
            t += 8 + dur + 2; corr += 1
        ev.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d" % step, "pid": 1, "tid": 1, "ts": s0 - 1, "dur": t - s0 + 1})
        t += 50
    json.dump({"schemaVersion": 1, "traceEvents": ev}, open(path, "w"))
trace(sys.argv[1] + "/torch_a.json", 7, 21, 100.0)
trace(sys.argv[1] + "/torch_b.json", 20, 24, 110.0)
PY
"$bin" compare "$tmp/torch_a.json" "$tmp/torch_b.json" --json > "$tmp/torch.json" || fail "compare of two PyTorch traces failed"
python3 - "$tmp/torch.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
d = [x for x in s["differences"] if x["key"] == "eager/step"]
assert len(d) == 1, s["differences"]
# Each step: first kernel start to last end = 8 + 100 + 2 + 8 + 20 + 2 + 8 + 10 - 8 = 150 us (B: gemm +10 us), to the ns.
assert d[0]["latency_a"]["median_ms"] == 0.150 and d[0]["latency_b"]["median_ms"] == 0.160, d[0]
assert d[0]["verdict"] == "A faster", d[0]["verdict"]
assert s["sides"][0]["one_process"] is True
diff = s["structure"]["diffs"][0]
assert diff["ops"]["paired"] == 36 and diff["ops"]["only_a"] == 0, diff["ops"]
PY
"$bin" compare "$tmp/torch_a.json" "$tmp/torch_b.json" > "$tmp/torch.txt"
grep -q "event records (API) *12 *12" "$tmp/torch.txt" || { grep -n "event records" "$tmp/torch.txt"; fail "event records from runtime calls not counted"; }
grep -q "one process" "$tmp/torch.txt" || fail "the one-process caveat is missing"

# 6. The main job without a GPU (README quick start (a)): the comparison recorded on an H200 that
#    ships in results/compare/, said so on the first line, exit 0. On a GPU machine it would measure.
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "compare: a GPU is present, the no-GPU main job is not checked here"
else
  "$bin" compare > "$tmp/main.txt" 2> "$tmp/main.err" || { cat "$tmp/main.err"; fail "streamlab compare without a GPU failed"; }
  head -1 "$tmp/main.txt" | grep -q "^No GPU here (.*): showing the comparison recorded on NVIDIA H200 .* at commit [0-9a-f]\{7\}" \
    || fail "first line of the no-GPU main job: $(head -1 "$tmp/main.txt")"
  grep -q "shared vs per-layer, graph replay, whole step: " "$tmp/main.txt" || fail "no graph replay verdict in the main job"
  grep -q "roles whose time changed most" "$tmp/main.txt" || fail "no role-matched table in the main job"
  # compare's defaults were recorded: the line does not hedge. Settings never recorded (tiny): the
  # newest recorded run is shown, and the first line says that its settings differ.
  head -1 "$tmp/main.txt" | grep -q "no recorded run has the settings" && fail "the defaults' recorded run taken for another's"
  "$bin" compare --config tiny > "$tmp/other.txt" 2>&1 || fail "compare --config tiny without a GPU failed"
  head -1 "$tmp/other.txt" | grep -q "no recorded run has the settings asked for" ||
    fail "a recorded run of other settings shown without saying so: $(head -1 "$tmp/other.txt")"
  sed -n 2p "$tmp/other.txt" | grep -q "^flash-6l" || fail "the setup line does not name what was measured"
fi

# 6b. The torch stream source past PyTorch's pool of 32 (12 MTP layers: 40 draws): the report says
#     which system it is true of and lists the CUDA streams that serve two roles.
mkdir "$tmp/torch"
"$bin" compare --backend cpu --modes eager --config tiny --mtp-layers 12 --draft-steps 12 --context 16 \
  --stream-source torch --policies per-layer,shared --repetitions 1 --steps 2 --no-trace --out-dir "$tmp/torch" \
  > "$tmp/torch.txt" 2> "$tmp/torch.err" || { cat "$tmp/torch.err"; fail "torch-source compare failed"; }
grep -q "per-layer: torch.pool.p0.00 = target.aux0 + mtp9.aux1" "$tmp/torch.txt" || fail "aliasing not listed by compare"
grep -q "aliased CUDA streams  *8  *0" "$tmp/torch.txt" || fail "aliased stream counts missing"
grep -q "^- per-layer: torch.pool.p0.03 = shared_expert + mtp10.aux1" "$tmp"/torch/*/report.md \
  || fail "aliasing not listed in report.md"
grep -q '"stream_source": "cpu-reference:torch"' "$tmp"/torch/*/runs/per-layer_r1.json || fail "measurement does not record the source"

# 6c. --weights native --kv-cache fp8: the children run the checkpoint's formats and every record
#     says so (the CPU packs the FP8 caches in vLLM's bytes); without a GPU the recorded native
#     comparison is the one shown.
mkdir "$tmp/native"
"$bin" compare --backend cpu --modes eager --config tiny --mtp-layers 1 --draft-steps 1 --context 16 --weights native \
  --kv-cache fp8 --policies per-layer,shared --repetitions 1 --steps 2 --no-trace --out-dir "$tmp/native" \
  > "$tmp/native.txt" 2> "$tmp/native.err" || { cat "$tmp/native.err"; fail "native compare failed"; }
grep -q "^tiny (native weights, fp8 KV cache (packed))" "$tmp/native.txt" ||
  fail "the setup line does not name the weight and KV cache formats: $(sed -n 2p "$tmp/native.txt")"
grep -q '"kv_cache": "fp8"' "$tmp"/native/*/runs/per-layer_r1.json || fail "measurement does not record the KV cache format"
grep -q '"weights": "native"' "$tmp"/native/*/runs/per-layer_r1.json || fail "measurement does not record the weights"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['settings']['model']['weights'] == 'native', s['settings']['model']" \
  "$tmp"/native/*/summary.json || fail "summary.json does not record the weights"
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  "$bin" compare --weights native > "$tmp/native_recorded.txt" 2>&1 || fail "compare --weights native without a GPU failed"
  sed -n 2p "$tmp/native_recorded.txt" | grep -q "^flash-6l (native weights)" ||
    fail "no recorded native comparison shown: $(head -2 "$tmp/native_recorded.txt")"
fi

# 7. A recorded folder's reports written again by this binary, with timeline screenshots (the
#    viewer under Xvfb, when this build has it); the measurements stay untouched.
rec=$(ls -d "$(dirname "$0")"/../../results/compare/*/ | head -n 1)
cp -r "$rec" "$tmp/rec"
# A folder's summary, plain or gzipped (the recorded folders keep summary.json.gz).
summary_json() { python3 -c 'import gzip, json, os, sys
p = sys.argv[1] if os.path.exists(sys.argv[1]) else sys.argv[1] + ".gz"
print(json.dumps(json.load(gzip.open(p, "rt") if p.endswith(".gz") else open(p))))' "$1"; }
if "$bin" view --help 2>&1 | grep -q -- "--screenshot" && command -v xvfb-run >/dev/null; then
  (cd "$tmp/rec" && find runs traces -type f | sort | xargs md5sum) > "$tmp/before.md5"
  # `view --help` lists --screenshot in every build; only running it tells a build without the viewer.
  if xvfb-run -a "$bin" compare "$tmp/rec" --rewrite-report --screenshots > /dev/null 2> "$tmp/rw.err"; then
    (cd "$tmp/rec" && find runs traces -type f | sort | xargs md5sum) | cmp -s - "$tmp/before.md5" || fail "the measurements changed"
    n=$(summary_json "$tmp/rec/summary.json" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["settings"]["policies"]))')
    test "$(ls "$tmp"/rec/screenshots/*.png | wc -l)" = "$n" || fail "expected a screenshot per policy ($n)"
    grep -q "data:image/png;base64," "$tmp/rec/report.html" || fail "report.html does not embed the screenshots"
    summary_json "$tmp/rec/summary.json" |
      python3 -c "import json,sys; s=json.load(sys.stdin); assert s['report_written_by'] and s['settings']['runs']" ||
      fail "the rewritten summary lacks its writer or its runs"
  elif grep -q "built without the viewer" "$tmp/rw.err"; then
    echo "compare: no viewer in this build (STREAMLAB_UI=OFF): the screenshot check is skipped"
  else
    cat "$tmp/rw.err"
    fail "--rewrite-report failed"
  fi
else
  echo "compare: no viewer in this build or no xvfb-run: the screenshot check is skipped"
fi
expect_error "exactly one run folder" "$bin" compare "$tmp/night1" "$tmp/night2" --rewrite-report

# 7b. summary.json gzipped (as the recorded folders keep it) reads as the plain file does, and
#     --rewrite-report keeps the form it found, its reports linking the file by that name.
cp -r "$rec" "$tmp/recgz"; cp -r "$rec" "$tmp/recplain"
if [ -f "$tmp/recplain/summary.json.gz" ]; then gunzip "$tmp/recplain/summary.json.gz"; else gzip "$tmp/recgz/summary.json"; fi
"$bin" compare "$tmp/recplain" | sed 1d > "$tmp/plain.txt" || fail "compare on a plain summary failed"
"$bin" compare "$tmp/recgz" | sed 1d > "$tmp/gz.txt" || fail "compare on a gzipped summary failed"
test -s "$tmp/gz.txt" && cmp -s "$tmp/plain.txt" "$tmp/gz.txt" || fail "a gzipped summary.json reads differently from the plain one"
"$bin" compare "$tmp/recgz" --rewrite-report > /dev/null 2>&1 || fail "--rewrite-report on a gzipped summary failed"
test -f "$tmp/recgz/summary.json.gz" && ! test -e "$tmp/recgz/summary.json" || fail "--rewrite-report did not keep summary.json gzipped"
grep -q "^- \[summary.json.gz\](summary.json.gz)$" "$tmp/recgz/report.md" || fail "report.md does not link summary.json.gz"
summary_json "$tmp/recgz/summary.json" | python3 -c "import json,sys; assert 'summary.json.gz' in json.load(sys.stdin)['files']" ||
  fail "the rewritten gzipped summary does not list itself as summary.json.gz"
"$bin" compare "$tmp/recplain" --rewrite-report > /dev/null 2>&1 || fail "--rewrite-report on a plain summary failed"
test -f "$tmp/recplain/summary.json" && ! test -e "$tmp/recplain/summary.json.gz" || fail "--rewrite-report gzipped a plain summary"
grep -q "^- \[summary.json\](summary.json)$" "$tmp/recplain/report.md" || fail "report.md of a plain summary does not link summary.json"
# Both forms at once: which is current cannot be told, so the folder is refused (and a recorded
# folder like it is never the one shown).
cp "$tmp/recplain/summary.json" "$tmp/recgz/"
expect_error "holds both summary.json and summary.json.gz" "$bin" compare "$tmp/recgz"
rm "$tmp/recgz/summary.json"
head -c 300 "$tmp/recgz/summary.json.gz" > "$tmp/cut.gz" && mv "$tmp/cut.gz" "$tmp/recgz/summary.json.gz"
expect_error "summary.json.gz': the gzip data ends early" "$bin" compare "$tmp/recgz"

# 8. Bad input: clear errors, exit 1, never a crash.
expect_error "does not exist" "$bin" compare "$tmp/nope" "$tmp/night1"
mkdir "$tmp/empty"; expect_error "no summary.json" "$bin" compare "$tmp/empty" "$tmp/night1"
head -c 100 "$tmp/night1/summary.json" > "$tmp/trunc.json"; mkdir "$tmp/trunc"; cp "$tmp/trunc.json" "$tmp/trunc/summary.json"
expect_error "not valid JSON" "$bin" compare "$tmp/trunc" "$tmp/night1"
expect_error "margin" "$bin" compare "$tmp/night1" "$tmp/night2" --margin 0
# Options that would be ignored, and a summary whose A-vs-A pair is A itself, are refused.
expect_error "rewrites the whole folder's reports" "$bin" compare "$tmp/night1" --rewrite-report --policy shared
expect_error "traced runs are live CUDA runs" "$bin" compare "${M[@]}" --traced-steps 3 --out-dir "$tmp/out"
cp -r "$tmp/night1" "$tmp/selfnoise"
python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); j['settings']['baseline_again']='shared'; json.dump(j, open(p, 'w'))" \
  "$tmp/selfnoise/summary.json"
expect_error "baseline_again names the baseline itself" "$bin" compare "$tmp/selfnoise"
# A field of the wrong type is named with its file (it was nlohmann's bare "type must be string").
cp -r "$tmp/recplain" "$tmp/wrongtype"
python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); j['settings']['runs'][0]['traced']='yes'; json.dump(j, open(p, 'w'))" \
  "$tmp/wrongtype/summary.json"
expect_error "wrongtype/summary.json': a field holds a value of the wrong type" "$bin" compare "$tmp/wrongtype"
expect_error "does not exist" "$bin" compare "${M[@]}" --out-dir "$tmp/missing/dir"
expect_error "steps must be" "$bin" compare "${M[@]}" --steps 0 --out-dir "$tmp/out"
expect_error "unknown stream policy" "$bin" compare "${M[@]}" --policies shared,nope --out-dir "$tmp/out"
expect_error "modes takes" "$bin" compare --modes warp --out-dir "$tmp/out"
expect_error "listed twice" "$bin" compare "${M[@]}" --policies shared,shared --out-dir "$tmp/out"
# Two spellings of one policy are one side (they wrote one run file, the second over the first).
expect_error "pool:2 is listed twice ('pool:2' and 'pool:+2')" "$bin" compare "${M[@]}" --policies per-layer,pool:2,pool:+2 --out-dir "$tmp/out"
# Without a GPU a gate has nothing to judge: refused, not passed or failed on a recorded run.
expect_error "compare --fail-if-slower: no GPU here" "$bin" compare --fail-if-slower 5
# A folder shown again keeps the margin it was measured for, unless --margin says otherwise.
mkdir "$tmp/m60"
"$bin" compare "${M[@]}" -r 2 --steps 3 --warmup 1 --margin 60 --no-baseline-twice --out-dir "$tmp/m60" > /dev/null 2>&1 \
  || fail "the --margin 60 compare failed"
m60=$(ls -d "$tmp"/m60/*/)
"$bin" compare "$m60" > "$tmp/m60.txt"
grep -q "margin +-60.00 %" "$tmp/m60.txt" || fail "a folder shown again lost its recorded margin of 60 %"
"$bin" compare "$m60" --rewrite-report > /dev/null 2>&1 || fail "--rewrite-report of the --margin 60 folder failed"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['settings']['margin_floor_pct'] == 60, s['settings']" "$m60/summary.json"
"$bin" compare "$m60" --margin 2 > "$tmp/m2.txt"
grep -q "margin +-60.00 %" "$tmp/m2.txt" && fail "--margin 2 was not used for the folder shown again"
echo "compare: all checks passed"
