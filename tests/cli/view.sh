#!/usr/bin/env bash
# `streamlab view`: a real H200 trace (round 9's eager flash-6l decode, our SQLite, and the same
# exported to our JSON) drawn headless under Xvfb into PNG screenshots; bad input refused with a
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

# The whole trace, from SQLite and from our JSON.
xvfb "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/sqlite.png" --size 1280x800 2> "$tmp/view.log" \
  || { cat "$tmp/view.log"; fail "view of the SQLite trace"; }
grep -q "items on 8 tracks" "$tmp/view.log" || { cat "$tmp/view.log"; fail "expected 8 tracks (6 streams, NVTX, API)"; }
"$bin" export "$tmp/h200.sqlite" --to kineto "$tmp/h200.json" > /dev/null 2>&1
xvfb "$bin" view "$tmp/h200.json" --screenshot "$tmp/json.png" --size 1280x800 --window 1300:1700 --select 1400:1500 \
  2> "$tmp/view2.log" || { cat "$tmp/view2.log"; fail "view of the JSON trace"; }
python3 - "$tmp/sqlite.png" "$tmp/json.png" <<'PY'
import struct, sys, zlib
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path + ": not a PNG"
    w, h = struct.unpack(">II", data[16:24])
    assert (w, h) == (1280, 800), (path, w, h)
    # Decode (8-bit RGBA, stb writes filter bytes per row) and count distinct colors: a drawn
    # timeline has dozens (one per kernel name), an empty or failed frame a handful.
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

# Bad input: a message, a non-zero exit, no image.
expect_error() {  # expect_error PATTERN CMD...
  local pat=$1; shift
  if "$@" > "$tmp/err.log" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$pat" "$tmp/err.log" || { cat "$tmp/err.log"; fail "no '$pat' in the message of: $*"; }
  [ ! -e "$tmp/bad.png" ] || fail "a failed run left $tmp/bad.png"
}
expect_error "END must be after START" xvfb "$bin" view "$tmp/h200.sqlite" --window 5:1 --screenshot "$tmp/bad.png"
expect_error "expected WIDTHxHEIGHT" xvfb "$bin" view "$tmp/h200.sqlite" --size big --screenshot "$tmp/bad.png"
expect_error "does not exist" "$bin" view "$tmp/missing.json" --screenshot "$tmp/bad.png"
echo "not a trace" > "$tmp/junk.json"
expect_error "junk.json" xvfb "$bin" view "$tmp/junk.json" --screenshot "$tmp/bad.png"
expect_error "xvfb-run" env -u DISPLAY "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/bad.png"
expect_error "cannot write" xvfb "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/no/such/dir/bad.png"
# A screenshot name that is a directory: written to its temporary name, the rename fails, and
# neither a PNG nor the temporary file is left.
mkdir "$tmp/adir"
expect_error "cannot rename" xvfb "$bin" view "$tmp/h200.sqlite" --screenshot "$tmp/adir"
[ -d "$tmp/adir" ] && [ ! -e "$tmp/adir.part" ] || fail "a failed screenshot left $tmp/adir.part"
expect_error "expected START:END" xvfb "$bin" view "$tmp/h200.sqlite" --window 0:inf --screenshot "$tmp/bad.png"
echo "view: ok"
