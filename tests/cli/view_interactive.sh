#!/usr/bin/env bash
# `streamlab view` driven the way a user drives it: a real window on a virtual X server (Xvfb),
# a mouse and a keyboard from xdotool. The viewer's --log says what each action changed; the
# expectations come from the pixels the test moved the mouse to: wheel zoom keeps the time
# under the cursor, a left drag pans by the dragged distance, a right drag selects the range
# between its ends, a click selects the item under the cursor, `f` fits the trace, the panels'
# tabs open their tables; in the A/B view
# a right drag selects one range in both traces and a click selects an item of B in aligned time.
set -euo pipefail
bin=$1
tmp=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
if "$bin" view tests/cli/view_interactive.sh --frames 1 2>&1 | cat > "$tmp/probe.log"; grep -q "built without the viewer" "$tmp/probe.log"; then
  echo "view_interactive: this build has no viewer (STREAMLAB_UI=OFF): nothing to drive"; exit 0
fi
for tool in Xvfb xdotool; do command -v $tool >/dev/null || { echo "FAIL: $tool is missing (Debian: xvfb, xdotool)"; exit 1; }; done
gunzip -c results/2026-12-03-h200-round9/c7/api_b1.sqlite.gz > "$tmp/h200.sqlite"
for d in $(seq 90 140); do [ -e /tmp/.X$d-lock ] || { display=:$d; break; }; done
Xvfb "$display" -screen 0 1600x1000x24 -noreset > "$tmp/xvfb.log" 2>&1 &
export DISPLAY=$display
for i in $(seq 50); do xdotool getmouselocation >/dev/null 2>&1 && break; sleep 0.1; done
# Helpers both sessions share: the log, waiting for a line, xdotool.
cat > "$tmp/drive.py" <<'PY'
import re, subprocess, sys, time
log_path = sys.argv[1]
num = r"(-?[0-9.]+)"

def lines():
    return open(log_path).read().splitlines()

def wait_for(pattern, after, what, timeout=15.0):
    """The first line matching `pattern` at index >= after; fails after `timeout` s."""
    t_end = time.time() + timeout
    while time.time() < t_end:
        ls = lines()
        for i in range(after, len(ls)):
            m = re.match(pattern, ls[i])
            if m: return i, m
        time.sleep(0.05)
    sys.exit("FAIL: no '%s' (%s) in the log:\n%s" % (pattern, what, "\n".join(lines()[-20:])))

def xdo(*args):
    subprocess.run(["xdotool", *map(str, args)], check=True)

def window_to_origin(name):
    """Moves the viewer's window (found by title) to the screen's origin; returns its id."""
    wid = subprocess.run(["xdotool", "search", "--sync", "--name", name], capture_output=True,
                         text=True, check=True).stdout.split()[0]
    xdo("windowmove", "--sync", wid, 0, 0)
    time.sleep(0.5)
    return wid

def right_drag(xa, xb, y, i):
    """A right drag from xa to xb at height y; returns (index, match) of the range line."""
    xdo("mousemove", "--sync", xa, y); time.sleep(0.2)
    xdo("mousedown", 3)
    # The press must reach a frame before the mouse moves on: ImGui 1.86 reads the position at
    # the frame, so a press and a move taken in one frame would start the range at the moved
    # position.
    i, start = wait_for(r"view: selecting from %s us" % num, i + 1, "the start of a right drag")
    for xx in range(xa + 20, xb + 1, 20):
        xdo("mousemove", "--sync", xx, y); time.sleep(0.03)
    time.sleep(0.2); xdo("mouseup", 3)
    i, m = wait_for(r"view: range %s \.\. %s us, kernels busy %s us, overlap across streams %s us(.*)" % (num, num, num, num),
                    i + 1, "a range selected by a right drag")
    return i, start, m

def click_tabs(i):
    """Opens the Kernels, Streams, then Selection panel by clicking their tabs; the viewer must
    draw each (the panel line comes after the frame). Returns the log index."""
    tabs = {}
    for l in lines():
        m = re.match(r"view: tab (\w+) x %s \.\. %s y %s \.\. %s" % (num, num, num, num), l)
        if m: tabs[m[1]] = [float(v) for v in m.groups()[1:]]
    for name in ("Kernels", "Streams", "Selection"):
        x0, x1, y0, y1 = tabs[name]
        xdo("mousemove", "--sync", int((x0 + x1) / 2), int((y0 + y1) / 2)); time.sleep(0.1); xdo("click", 1)
        i, _ = wait_for(r"view: panel %s$" % name, i + 1, "the %s panel after a click on its tab" % name)
    return i
PY
"$bin" view "$tmp/h200.sqlite" --log --size 1600x1000 --window 1300:1700 2> "$tmp/view.log" &
viewer=$!
PYTHONPATH="$tmp" python3 - "$tmp/view.log" <<'PY'
import re, subprocess, sys, time
from drive import *
_, m = wait_for(r"view: trace %s \.\. %s us" % (num, num), 0, "the layout")
trace_b, trace_e = float(m[1]), float(m[2])
_, m = wait_for(r"view: axis x %s \.\. %s, tracks top %s" % (num, num, num), 0, "the layout")
ax0, ax1, top = map(float, m.groups())
_, m = wait_for(r"view: track 1 rows \d+ top %s main" % num, 0, "the main stream's track")
main_y = int(top + float(m[1]) + 9)  # the middle of its first row
i, m = wait_for(r"view: window %s \.\. %s us" % (num, num), 0, "the initial window")
w0, w1 = float(m[1]), float(m[2])
assert abs(w0 - 1300) < 1e-3 and abs(w1 - 1700) < 1e-3, (w0, w1)
wid = window_to_origin("streamlab view")
aw = ax1 - ax0
t_at = lambda x, a, b: a + (x - ax0) / aw * (b - a)
x_at = lambda t, a, b: ax0 + (t - a) / (b - a) * aw
px_us = lambda a, b: (b - a) / aw  # microseconds per pixel

# 1. Wheel: 4 notches up at 1500 us zoom in 1.25^4, the time under the cursor staying put.
x = int(x_at(1500, w0, w1)); t_cursor = t_at(x, w0, w1)
xdo("mousemove", "--sync", x, main_y); time.sleep(0.3)
for _ in range(4):
    xdo("click", 4); time.sleep(0.15)
want_span = 400 / 1.25 ** 4
t_end = time.time() + 15
while True:
    i, m = wait_for(r"view: window %s \.\. %s us" % (num, num), i + 1, "a zoom")
    w0, w1 = float(m[1]), float(m[2])
    if abs((w1 - w0) - want_span) < 0.01 or time.time() > t_end: break
assert abs((w1 - w0) - want_span) < 0.01, ("zoom", w0, w1, want_span)
assert abs(t_at(x, w0, w1) - t_cursor) < px_us(w0, w1), ("zoom moved the time under the cursor", t_at(x, w0, w1), t_cursor)
print("wheel: span %.2f us, %.3f us under the cursor" % (w1 - w0, t_at(x, w0, w1)))

# 2. Left drag 200 px to the right: earlier times come into view by 200 px (ImGui starts a drag
# after a few pixels, so allow those).
span = w1 - w0; before = w0
xdo("mousedown", 1); time.sleep(0.3)  # a frame takes the press before the mouse moves
for dx in range(10, 201, 10):
    xdo("mousemove", "--sync", x + dx, main_y); time.sleep(0.03)
time.sleep(0.2); xdo("mouseup", 1)
t_end = time.time() + 15  # the last window line may come a few frames later on a busy machine
while True:
    ls = lines(); wins = [re.match(r"view: window %s \.\. %s us" % (num, num), l) for l in ls[i + 1:]]
    wins = [m for m in wins if m]
    moved_px = (before - float(wins[-1][1])) / (span / aw) if wins else 0
    if moved_px >= 185 or time.time() > t_end: break
    time.sleep(0.1)
assert wins, "no window change after a drag"
w0, w1 = float(wins[-1][1]), float(wins[-1][2]); i = len(ls) - 1
assert abs((w1 - w0) - span) < 1e-3 and 185 <= moved_px <= 201, ("pan", moved_px)
print("left drag 200 px: window moved %.1f px" % moved_px)

# 3. Right drag from 300 px to 700 px into the axis: that range is selected.
xa, xb = int(ax0 + 300), int(ax0 + 700)
tol = 1.5 * px_us(w0, w1)
i, start, m = right_drag(xa, xb, main_y + 60, i)
assert abs(float(start[1]) - t_at(xa, w0, w1)) < tol, ("range start", start[1], t_at(xa, w0, w1))
ra, rb, busy, overlap = map(float, m.groups()[:4])
assert abs(ra - t_at(xa, w0, w1)) < tol and abs(rb - t_at(xb, w0, w1)) < tol, (ra, rb, t_at(xa, w0, w1), t_at(xb, w0, w1))
assert 0 <= overlap <= busy <= rb - ra + 1e-3, (busy, overlap)
print("right drag: range %.3f .. %.3f us, kernels busy %.3f us" % (ra, rb, busy))

# 4. Clicks along the main stream's first row until one lands on a kernel: it spans the click.
selected = None
for xx in range(int(ax0 + 20), int(ax1 - 20), 37):
    xdo("mousemove", "--sync", xx, main_y); time.sleep(0.1); xdo("click", 1); time.sleep(0.25)
    ls = lines()
    sel = [re.match(r"view: selected kernel %s \.\. %s us on track 1: (.*)" % (num, num), l) for l in ls[i + 1:]]
    sel = [m for m in sel if m]
    if sel:
        selected = (xx, sel[-1]); break
assert selected, "no click selected a kernel on the main stream"
xx, m = selected
ks, ke = float(m[1]), float(m[2]); t_click = t_at(xx, w0, w1)
assert ks - px_us(w0, w1) <= t_click <= ke + px_us(w0, w1), (ks, ke, t_click)
print("click at %.3f us: %s (%.3f .. %.3f us)" % (t_click, m[3][:60], ks, ke))
i = len(lines()) - 1

# 5. 'f' fits the whole trace (2 % margins).
xdo("key", "--window", wid, "f")
want0, want1 = trace_b - 0.02 * (trace_e - trace_b), trace_e + 0.02 * (trace_e - trace_b)
i, m = wait_for(r"view: window %s \.\. %s us" % (num, num), i + 1, "the fit after 'f'")
assert abs(float(m[1]) - want0) < 1e-2 and abs(float(m[2]) - want1) < 1e-2, (m[1], m[2], want0, want1)
print("f: window %s .. %s us" % (m[1], m[2]))
i = click_tabs(i)
print("tabs: Kernels, Streams, Selection drawn")
PY
kill $viewer; wait $viewer 2>/dev/null || true

# A/B: per-layer over shared, aligned at the first decode. A right drag over B's block selects
# one range of the shared axis in both traces; a click on B's main track selects a kernel of B,
# reported in aligned time.
ab=results/compare/2026-12-04_NVIDIA-H200_2896d51/traces
"$bin" view $ab/per-layer.eager.json.gz $ab/shared.eager.json.gz --log --size 1600x1000 --window 0:4000 \
  2> "$tmp/ab.log" &
PYTHONPATH="$tmp" python3 - "$tmp/ab.log" <<'PY'
import re, time
from drive import *
_, m = wait_for(r"view: axis x %s \.\. %s, tracks top %s" % (num, num, num), 0, "the layout")
ax0, ax1, top = map(float, m.groups())
j, _ = wait_for(r"view: block B top %s" % num, 0, "block B")
wait_for(r"view: track (\d+) rows \d+ top %s main$" % num, j + 1, "B's main track")
mains = [re.match(r"view: track (\d+) rows \d+ top %s main$" % num, l) for l in lines()]
mains = [x for x in mains if x]
assert len(mains) == 2, [x[0] for x in mains]
b_track, b_main_y = int(mains[1][1]), int(top + float(mains[1][2]) + 9)
i, m = wait_for(r"view: window %s \.\. %s us" % (num, num), 0, "the initial window")
w0, w1 = float(m[1]), float(m[2])
assert abs(w0) < 1e-3 and abs(w1 - 4000) < 1e-3, (w0, w1)
window_to_origin(" vs ")
aw = ax1 - ax0
t_at = lambda x: w0 + (x - ax0) / aw * (w1 - w0)
px_us = (w1 - w0) / aw
xa, xb = int(ax0 + 300), int(ax0 + 700)
i, start, m = right_drag(xa, xb, b_main_y, i)
ra, rb = float(m[1]), float(m[2])
assert abs(ra - t_at(xa)) < 1.5 * px_us and abs(rb - t_at(xb)) < 1.5 * px_us, (ra, rb, t_at(xa), t_at(xb))
b = re.match(r"; B: kernels busy %s us, overlap across streams %s us; roles (\d+)" % (num, num), m[5])
assert b and 0 < float(b[1]) <= rb - ra + 1e-3 and int(b[3]) > 0, m[0]
print("A/B right drag: range %.3f .. %.3f us, A busy %s us, B busy %s us, %s roles" % (ra, rb, m[3], b[1], b[3]))
selected = None
for xx in range(int(ax0 + 20), int(ax1 - 20), 23):
    xdo("mousemove", "--sync", xx, b_main_y); time.sleep(0.1); xdo("click", 1); time.sleep(0.25)
    sel = [re.match(r"view: selected kernel %s \.\. %s us on track (\d+): (.*)" % (num, num), l) for l in lines()[i + 1:]]
    sel = [x for x in sel if x]
    if sel:
        selected = (xx, sel[-1]); break
assert selected, "no click selected a kernel on B's main track"
xx, m = selected
assert int(m[3]) == b_track, ("selected on track", m[3], "B's main is", b_track)
assert float(m[1]) - px_us <= t_at(xx) <= float(m[2]) + px_us, (m[1], m[2], t_at(xx))
print("A/B click at %.3f us: B's %s (%s .. %s us)" % (t_at(xx), m[4][:50], m[1], m[2]))
click_tabs(len(lines()) - 1)
print("A/B tabs: Kernels, Streams (a table per trace), Selection drawn")
PY
echo "view_interactive: ok"
