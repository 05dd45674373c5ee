#!/usr/bin/env bash
# `streamlab view`: a real H200 trace (round 9's eager flash-6l decode, our SQLite, and the same
# exported to our JSON) drawn headless under Xvfb into PNG screenshots; the A/B view of two
# policies' traces (both blocks drawn, aligned, roles in one order); bad input refused with a
# message and no image left behind. A build without the viewer must say so.
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
gunzip -c results/2026-12-03-h200-round9/c7/api_b1.sqlite.gz > "$tmp/h200.sqlite"

if ! "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/x.png" > "$tmp/nogui.log" 2>&1; then
  if grep -q "built without the viewer" "$tmp/nogui.log"; then
    [ ! -e "$tmp/x.png" ] || fail "a build without the viewer wrote a screenshot"
    echo "view: this build has no viewer (STREAMLAB_UI=OFF) and says so: ok"; exit 0
  fi
fi
command -v xvfb-run >/dev/null || fail "xvfb-run is missing (Debian package xvfb)"
xvfb() { xvfb-run -a -s "-screen 0 1920x1200x24 -noreset" "$@"; }
# Bad input: a message, a non-zero exit, no image.
expect_error() {  # expect_error PATTERN CMD...
  local pat=$1; shift
  if "$@" > "$tmp/err.log" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$pat" "$tmp/err.log" || { cat "$tmp/err.log"; fail "no '$pat' in the message of: $*"; }
  [ ! -e "$tmp/bad.png" ] || fail "a failed run left $tmp/bad.png"
}

# The whole trace, from SQLite and from our JSON.
xvfb "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/sqlite.png" --size 1280x800 2> "$tmp/view.log" \
  || { cat "$tmp/view.log"; fail "view of the SQLite trace"; }
grep -q "items on 8 tracks" "$tmp/view.log" || { cat "$tmp/view.log"; fail "expected 8 tracks (6 streams, NVTX, API)"; }
"$bin" export "$tmp/h200.sqlite" --to kineto "$tmp/h200.json" > /dev/null 2>&1
xvfb "$bin" view "$tmp/h200.json" --screenshot "$tmp/json.png" --size 1280x800 --window 1300:1700 --select 1400:1500 \
  2> "$tmp/view2.log" || { cat "$tmp/view2.log"; fail "view of the JSON trace"; }
# A PNG decoder (8-bit RGBA, stb writes filter bytes per row), shared by the checks below.
cat > "$tmp/png.py" <<'PY'
import struct, zlib
def decode(path):
    """(width, height, rows): rows[y] holds width * 4 bytes, RGBA."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path + ": not a PNG"
    w, h = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT": idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * 4 + 1
    assert len(raw) == stride * h, (path, len(raw))
    rows, prev = [], bytearray(w * 4)
    for y in range(h):
        f, line = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
        for i in range(len(line)):
            a = line[i - 4] if i >= 4 else 0
            b = prev[i]
            c = prev[i - 4] if i >= 4 else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line)); prev = line
    return w, h, rows
PY
PYTHONPATH="$tmp" python3 - "$tmp/sqlite.png" "$tmp/json.png" <<'PY'
import sys
from png import decode
for path in sys.argv[1:]:
    w, h, rows = decode(path)
    assert (w, h) == (1280, 800), (path, w, h)
    # Distinct colors: a drawn timeline has dozens (one per kernel name), an empty or failed
    # frame a handful.
    colors = {row[i:i + 3] for row in rows[::4] for i in range(0, w * 4, 16)}
    assert len(colors) >= 30, (path, len(colors))
    print(path.rsplit("/", 1)[1], w, h, len(colors), "colors")
PY

# A real per-layer-all trace (round 10 c8): 14 aux streams with work, 3 roles.
gunzip -c results/2026-12-03-h200-round10/c8/per_layer_all.json.gz > "$tmp/pla.json"
xvfb "$bin" view "$tmp/pla.json" --log --frames 2 2> "$tmp/pla.log" || { cat "$tmp/pla.log"; fail "view per-layer-all"; }
xvfb "$bin" view "$tmp/pla.json" --log --frames 2 --by-role 2> "$tmp/pla_role.log" || { cat "$tmp/pla_role.log"; fail "view --by-role"; }
[ "$(grep -c "^view: track .* L[0-9]\.aux[0-2] (stream\|^view: track .* mtp[01]\.aux[0-2] (stream" "$tmp/pla.log")" = 14 ] \
  || { grep "view: track" "$tmp/pla.log"; fail "expected 14 per-layer aux tracks"; }
for want in "aux0 (6 streams)" "aux1 (4 streams)" "aux2 (4 streams)"; do
  grep -q "^view: track [0-9]* rows [0-9]* top [0-9.]* $want\$" "$tmp/pla_role.log" || { grep "view: track" "$tmp/pla_role.log"; fail "no track '$want'"; }
done
grep -q "^view: track .*L2.aux0" "$tmp/pla_role.log" && fail "--by-role kept a per-layer track"

# A/B: per-layer over shared (the 2026-12-04 compare, eager), aligned at the first decode step;
# both blocks drawn, their GPU tracks by role in one order, a range compared in both.
ab=results/compare/2026-12-04_NVIDIA-H200_2896d51/traces
xvfb "$bin" view $ab/per-layer.eager.json.gz $ab/shared.eager.json.gz --log --size 1600x1200 --select 0:3600 \
  --screenshot "$tmp/ab.png" 2> "$tmp/ab.log" || { cat "$tmp/ab.log"; fail "view A B"; }
grep -q "^view: block A top 0.0 tracks 8: $ab/per-layer.eager.json.gz, aligned at decode:0, 1887.899 us after its start\$" \
  "$tmp/ab.log" || { cat "$tmp/ab.log"; fail "no block A aligned at decode:0"; }
grep -q "^view: block B top [0-9.]* tracks 8: $ab/shared.eager.json.gz, aligned at decode:0, 2248.191 us after its start\$" \
  "$tmp/ab.log" || { cat "$tmp/ab.log"; fail "no block B aligned at decode:0"; }
grep -Eq "^view: range 0.000 .. 3600.000 us, kernels busy [0-9.]+ us, overlap across streams [0-9.]+ us; B: kernels busy [0-9.]+ us, overlap across streams [0-9.]+ us; roles [1-9][0-9]* " \
  "$tmp/ab.log" || { grep "view: range" "$tmp/ab.log"; fail "no A/B range line"; }
PYTHONPATH="$tmp" python3 - "$tmp/ab.log" "$tmp/ab.png" <<'PY'
import re, sys
from png import decode
log = open(sys.argv[1]).read()
blocks = {m[1]: float(m[2]) for m in re.finditer(r"^view: block (\w) top ([0-9.]+)", log, re.M)}
tracks = [(int(m[1]), float(m[2]), m[3]) for m in re.finditer(r"^view: track (\d+) rows \d+ top ([0-9.]+) (.*)$", log, re.M)]
def roles(lo, hi):  # the GPU tracks' roles of the block between tops lo and hi
    return [re.sub(r" \(\d+ streams\)$", "", label) for _, top, label in tracks
            if lo <= top < hi and "thread" not in label]
a, b = roles(blocks["A"], blocks["B"]), roles(blocks["B"], 1e9)
assert a == b == ["main", "aux0", "aux1", "aux2", "shared_expert", "stream 7"], (a, b)
assert "aux0 (5 streams)" in log and "aux0 (2 streams)" in log
ax0, top = map(float, re.search(r"^view: axis x ([0-9.]+) \.\. [0-9.]+, tracks top ([0-9.]+)", log, re.M).groups())
w, h, rows = decode(sys.argv[2])
def px(x, y): return tuple(rows[int(y)][int(x) * 4:int(x) * 4 + 3])
# The header bars: A blue, B orange, at the left end of each block's first line.
assert px(ax0 - 228, top + blocks["A"] + 5) == (60, 110, 190), px(ax0 - 228, top + blocks["A"] + 5)
assert px(ax0 - 228, top + blocks["B"] + 5) == (200, 120, 40), px(ax0 - 228, top + blocks["B"] + 5)
# Each block's main track holds kernels: many colors along its first row.
for name in "AB":
    main_top = [t for _, t, label in tracks if label == "main" and t >= blocks[name]][0]
    y = top + main_top + 14
    colors = {px(x, y) for x in range(int(ax0), w - 30, 3)}
    assert len(colors) >= 10, (name, len(colors))
print("A/B: block B at %.0f px, roles %s, header colors ok" % (blocks["B"], ", ".join(a)))
PY
# Graph traces have no ranges: aligned at their starts. A missing instance names file and count.
xvfb "$bin" view $ab/per-layer.graph.json.gz $ab/shared.graph.json.gz --log --frames 1 2> "$tmp/abg.log" \
  || { cat "$tmp/abg.log"; fail "view A B of graph traces"; }
grep -q "^view: block B .*aligned at its start, 0.000 us after its start\$" "$tmp/abg.log" || { cat "$tmp/abg.log"; fail "graph traces not aligned at their starts"; }
expect_error "align decode:7: $ab/shared.eager.json.gz has 5 'decode' ranges (INDEX 0..4)" \
  xvfb "$bin" view $ab/shared.eager.json.gz $ab/per-layer.eager.json.gz --align decode:7 --screenshot "$tmp/bad.png"
expect_error "has no NVTX range 'decode'" xvfb "$bin" view $ab/per-layer.eager.json.gz $ab/per-layer.graph.json.gz \
  --align decode --screenshot "$tmp/bad.png"
expect_error "aligning needs two traces" xvfb "$bin" view $ab/per-layer.eager.json.gz --align decode --screenshot "$tmp/bad.png"
expect_error "INDEX must be a non-negative integer" xvfb "$bin" view $ab/per-layer.eager.json.gz $ab/shared.eager.json.gz \
  --align decode:x --screenshot "$tmp/bad.png"

# The ranks view: one job's traces (here one real trace exported as ranks 0..2 of 3, so the
# ranks' clocks agree exactly), given out of order, stacked by rank on one clock, a range
# measured on each; two traces that are a whole job open as ranks unless --ab; sets that are not
# one job's ranks refused by name.
for r in 0 1 2; do
  "$bin" export $ab/shared.eager.json.gz --to kineto --rank $r --world-size 3 "$tmp/rank$r.json" > /dev/null 2>&1
done
xvfb "$bin" view "$tmp/rank2.json" "$tmp/rank0.json" "$tmp/rank1.json" --log --size 1600x1400 --select 0:3600 \
  --screenshot "$tmp/ranks.png" 2> "$tmp/ranks.log" || { cat "$tmp/ranks.log"; fail "view of 3 ranks"; }
grep -q "^ranks view: 3 traces of one job, stacked by rank on their shared clock\$" "$tmp/ranks.log" \
  || { cat "$tmp/ranks.log"; fail "no ranks view"; }
python3 - "$tmp/ranks.log" "$tmp" <<'PY'
import re, sys
log, tmp = open(sys.argv[1]).read(), sys.argv[2]
blocks = re.findall(r"^view: block rank (\d) top ([0-9.]+) tracks (\d+): (\S+), starts ([0-9.]+) us after time 0$", log, re.M)
assert [b[0] for b in blocks] == ["0", "1", "2"], blocks
assert [b[3] for b in blocks] == [f"{tmp}/rank{r}.json" for r in range(3)], blocks
assert all(b[4] == "0.000" for b in blocks), blocks  # one clock, the same trace: no rank starts later
tops = [float(b[1]) for b in blocks]
assert tops[0] == 0 and tops[0] < tops[1] < tops[2], tops
m = re.search(r"^view: range 0.000 .. 3600.000 us, kernels busy ([0-9.]+) us, [^;]*; rank 1: kernels busy ([0-9.]+) us, "
              r"[^;]*; rank 2: kernels busy ([0-9.]+) us", log, re.M)
assert m and m[1] == m[2] == m[3] and float(m[1]) > 0, m and m.groups()
print("ranks view: 3 blocks by rank, range busy %s us on each" % m[1])
PY
PYTHONPATH="$tmp" python3 - "$tmp/ranks.png" <<'PY'
import sys
from png import decode
w, h, rows = decode(sys.argv[1])
colors = {row[i:i + 3] for row in rows[::4] for i in range(0, w * 4, 16)}
assert (w, h) == (1600, 1400) and len(colors) >= 30, (w, h, len(colors))
PY
xvfb "$bin" view "$tmp/rank0.json" "$tmp/rank1.json" --log --frames 1 2> "$tmp/r01.log" || fail "view of 2 ranks"
"$bin" export $ab/shared.eager.json.gz --to kineto --rank 1 --world-size 2 "$tmp/w2r1.json" > /dev/null 2>&1
"$bin" export $ab/shared.eager.json.gz --to kineto --rank 0 --world-size 2 "$tmp/w2r0.json" > /dev/null 2>&1
xvfb "$bin" view "$tmp/w2r1.json" "$tmp/w2r0.json" --log --frames 1 2> "$tmp/w2.log" || fail "view of a 2-rank job"
grep -q "^ranks view: 2 traces of one job" "$tmp/w2.log" || { cat "$tmp/w2.log"; fail "a whole 2-rank job not in the ranks view"; }
grep -q "^view: block rank 0 .*w2r0.json" "$tmp/w2.log" || fail "rank 0 is not on top"
xvfb "$bin" view "$tmp/w2r1.json" "$tmp/w2r0.json" --ab --log --frames 1 2> "$tmp/w2ab.log" || fail "view --ab"
grep -q "^view: block A " "$tmp/w2ab.log" || { cat "$tmp/w2ab.log"; fail "--ab did not give the A/B view"; }
grep -q "^view: block A .*rank0.json" "$tmp/r01.log" || fail "ranks 0 and 1 of a world of 3 are not a whole job: A/B expected"
expect_error "are both rank 1" xvfb "$bin" view "$tmp/rank0.json" "$tmp/rank1.json" "$tmp/rank1.json" --screenshot "$tmp/bad.png"
expect_error "says world_size 3 and" xvfb "$bin" view "$tmp/rank0.json" "$tmp/w2r1.json" "$tmp/rank2.json" --screenshot "$tmp/bad.png"
expect_error "the trace names no rank" xvfb "$bin" view "$tmp/rank0.json" "$tmp/rank1.json" "$tmp/h200.sqlite" --screenshot "$tmp/bad.png"
expect_error "compares two traces" xvfb "$bin" view "$tmp/rank0.json" "$tmp/rank1.json" "$tmp/rank2.json" --ab --screenshot "$tmp/bad.png"

# Bad input.
expect_error "END must be after START" xvfb "$bin" view "$tmp/h200.sqlite" --window 5:1 --screenshot "$tmp/bad.png"
expect_error "expected WIDTHxHEIGHT" xvfb "$bin" view "$tmp/h200.sqlite" --size big --screenshot "$tmp/bad.png"
expect_error "does not exist" "$bin" view "$tmp/missing.json" --screenshot "$tmp/bad.png"
echo "not a trace" > "$tmp/junk.json"
expect_error "junk.json" xvfb "$bin" view "$tmp/junk.json" --screenshot "$tmp/bad.png"
expect_error "xvfb-run" env -u DISPLAY "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/bad.png"
expect_error "cannot write" xvfb "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/no/such/dir/bad.png"
# A screenshot name that is a directory (or a device node such as /dev/full) is refused before
# anything is written, and no temporary file is left beside it.
mkdir "$tmp/adir"
expect_error "is not a regular file" xvfb "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/adir"
[ -d "$tmp/adir" ] && [ -z "$(ls -A "$tmp" | grep -F '.adir.tmp')" ] || fail "a failed screenshot left a temporary file"
if [ -e /dev/full ]; then
  expect_error "No space left\|not a regular file" xvfb "$bin" view "$tmp/h200.sqlite" --screenshot /dev/full
fi
expect_error "expected START:END" xvfb "$bin" view "$tmp/h200.sqlite" --window 0:inf --screenshot "$tmp/bad.png"
echo "view: ok"
