"""The HTML incident report in a real browser: headless Chromium (Debian package chromium,
which ./kmonw installs) loads the file offline and draws it.

The report has no JavaScript, so to prove the charts were laid out (not just parsed) a
copy of the file gets a tiny inline probe script that writes each chart's and each
series path's `getBBox()` into data attributes; `--dump-dom` returns the DOM after it ran.
Screenshots check the pixels: a chart alone must show every series in its own colour,
and the whole report must be far from the blank page of the same size.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from reports.render import CSS, chart_figure, render_html
from reports.svg_chart import PALETTE
from tests.unit.test_report_render import sample_report

pytestmark = pytest.mark.integration

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars")
# A hang guard only (a browser that never returns), not an assertion on speed.
HANG_GUARD_S = 300

PROBE = """<script>
(function () {
  var charts = document.querySelectorAll('svg.kmon-chart');
  charts.forEach(function (svg) {
    var b = svg.getBBox();
    svg.setAttribute('data-probe-bbox', [b.width, b.height].join(','));
    svg.setAttribute('data-probe-svg', String(svg instanceof SVGSVGElement));
    svg.querySelectorAll('path.kmon-series').forEach(function (p) {
      var pb = p.getBBox();
      p.setAttribute('data-probe-bbox', [pb.width, pb.height].join(','));
      p.setAttribute('data-probe-length', String(p.getTotalLength()));
    });
  });
  document.body.setAttribute('data-probed', String(charts.length));
})();
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (Debian package chromium; ./kmonw installs it)")
    return path


def _run(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)


def _dump_dom(chromium: str, tmp_path: Path, page: Path) -> str:
    r = _run(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert r.returncode == 0 and "<html" in r.stdout, r.stderr[-2000:]
    return r.stdout


def _screenshot(chromium: str, tmp_path: Path, page: Path, size: tuple[int, int]) -> Path:
    png = tmp_path / f"{page.stem}.png"
    r = _run(chromium, tmp_path, f"--window-size={size[0]},{size[1]}", f"--screenshot={png}",
             page.as_uri())
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]
    return png


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))


def _elements(dom: str) -> list[tuple[str, dict]]:
    p = _Elements()
    p.feed(dom)
    return p.elements


def _box(attr: str) -> tuple[float, float]:
    w, h = attr.split(",")
    return float(w), float(h)


# --- a minimal PNG decoder (8-bit RGB/RGBA, no interlace: what Chromium writes) ----------

def decode_png(path: Path) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows of raw pixel bytes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def _pixels(rows: list[bytes], bpp: int) -> set[tuple[int, int, int]]:
    return {tuple(row[i:i + 3]) for row in rows for i in range(0, len(row), bpp)}


def _hex(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


# --- tests -------------------------------------------------------------------------------

def test_the_png_decoder_reads_a_known_page(chromium, tmp_path):
    # The colour checks below are only as good as the decoder: check it on known pixels.
    page = tmp_path / "known.html"
    page.write_text('<!DOCTYPE html><html><body style="margin:0;background:#123456">'
                    '<div style="position:absolute;left:40px;top:30px;width:100px;'
                    'height:50px;background:#e69f00"></div>'
                    '<div style="position:absolute;left:0;top:200px;width:100%;height:3px;'
                    'background:linear-gradient(to right,#000,#fff)"></div></body></html>',
                    encoding="utf-8")
    width, height, bpp, rows = decode_png(_screenshot(chromium, tmp_path, page, (320, 240)))
    assert (width, height) == (320, 240)

    def at(x: int, y: int) -> tuple[int, ...]:
        return tuple(rows[y][x * bpp:x * bpp + 3])

    assert at(5, 5) == at(300, 230) == (0x12, 0x34, 0x56)
    assert at(41, 31) == at(139, 79) == at(90, 55) == (0xe6, 0x9f, 0x00)
    assert at(20, 100) == (0x12, 0x34, 0x56)
    ramp = [at(x, 201)[0] for x in range(0, 320, 40)]
    assert ramp == sorted(ramp) and ramp[0] < 40 and ramp[-1] > 200, ramp


def test_chromium_draws_every_chart_and_series(chromium, tmp_path):
    html = render_html(sample_report())
    report = tmp_path / "report.html"
    report.write_text(html, encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")

    # the file as written: the browser parses the inline SVG with its paths
    plain = _elements(_dump_dom(chromium, tmp_path, report))
    charts = [a for t, a in plain if t == "svg" and "kmon-chart" in a.get("class", "")]
    assert [a["data-kind"] for a in charts] == ["stages", "stages", "offsets", "lag"]
    paths = [a for t, a in plain if t == "path" and "kmon-series" in a.get("class", "")]
    assert len(paths) == 7 + 7 + 2 + 1 and all(a.get("d") for a in paths)
    assert not any(t == "script" for t, _ in plain)

    # with the probe: every chart and every series path has a laid-out, non-empty box
    probed = _elements(_dump_dom(chromium, tmp_path, probe))
    body = next(a for t, a in probed if t == "body")
    assert body.get("data-probed") == "4", "the probe script did not run"
    charts = [a for t, a in probed if t == "svg" and "kmon-chart" in a.get("class", "")]
    for a in charts:
        assert a["data-probe-svg"] == "true"
        w, h = _box(a["data-probe-bbox"])
        assert w > 300 and h > 100, a
    paths = [a for t, a in probed if t == "path" and "kmon-series" in a.get("class", "")]
    assert len(paths) == 17
    for a in paths:
        w, h = _box(a["data-probe-bbox"])
        assert w > 10 and float(a["data-probe-length"]) > 10, a
    # the stage lines rise over the 30 minutes: each one spans height as well as width
    assert all(_box(a["data-probe-bbox"])[1] > 5 for a in paths[:14])


def test_screenshot_of_a_chart_shows_each_series_in_its_colour(chromium, tmp_path):
    data = sample_report()
    chart = data.brokers[0].charts[0]
    page = tmp_path / "chart.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{CSS}'
                    f"body{{margin:0;padding:0}}</style></head><body>"
                    f"{chart_figure(chart, data)}</body></html>", encoding="utf-8")
    width, height, bpp, rows = decode_png(_screenshot(chromium, tmp_path, page, (800, 340)))
    assert (width, height) == (800, 340)
    seen = _pixels(rows, bpp)
    assert len(seen) > 50, "the screenshot is (nearly) one colour"

    def near(colour: tuple[int, int, int]) -> bool:
        return any(all(abs(p[i] - colour[i]) <= 12 for i in range(3)) for p in seen)

    for i, _series in enumerate(chart.series):
        assert near(_hex(PALETTE[i % len(PALETTE)])), f"no pixel of series {i}'s colour"
    assert near(_hex("#b00020")), "the finding marker is not drawn"


def test_screenshot_of_the_report_is_far_from_blank(chromium, tmp_path):
    report = tmp_path / "report.html"
    report.write_text(render_html(sample_report()), encoding="utf-8")
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>", encoding="utf-8")
    size = (1000, 2400)
    shot = decode_png(_screenshot(chromium, tmp_path, report, size))
    empty = decode_png(_screenshot(chromium, tmp_path, blank, size))
    assert shot[:2] == empty[:2] == size
    # Counted in pixels, not PNG bytes: how well a blank page compresses varies with the
    # Chromium build. A blank page is one colour; the report's text, badges and charts
    # cover a good share of the page in many colours.
    assert len(_pixels(empty[3], empty[2])) <= 2
    background = tuple(empty[3][0][:3])
    inked = _inked(shot[3], shot[2], background)
    assert inked > 0.03 * size[0] * size[1], inked
    assert len(_pixels(shot[3], shot[2])) > 1000


def _inked(rows: list[bytes], bpp: int, background: tuple[int, ...]) -> int:
    bg = bytes(background)
    return sum(1 for row in rows for i in range(0, len(row), bpp) if row[i:i + 3] != bg)
