"""A small time-series line chart as inline SVG markup, for reports that need no JavaScript.

`line_chart` draws each series as one `<path class="kmon-series">` (a gap where a value is
missing starts a new subpath), a dot with a `<title>` tooltip per point while there are few
enough to tell apart, vertical `<line class="kmon-marker">`s for events, and axes with
round-number ticks: y by 1/2/5 x 10^k steps, x (UTC) by whole minutes or hours. Every text
that reaches the markup goes through `html.escape`.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping, Sequence

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 24, 30
MAX_DOTS = 120  # per series; more dots would hide the line
TIME_STEPS_MS = [m * 60_000 for m in (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440,
                                      2880, 10080)]
# Colour-blind-safe palette (Okabe-Ito), then greys.
PALETTE = ("#333333", "#e69f00", "#56b4e9", "#009e73", "#cc79a7", "#0072b2", "#d55e00",
           "#999999")


@dataclass(frozen=True)
class Line:
    label: str
    column: str
    points: Sequence[tuple[int, float | None]]
    color: str
    emphasis: bool = False


@dataclass(frozen=True)
class VLine:
    t_ms: int
    label: str
    kind: str


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def nice_step(span: float, ticks: int = 5) -> float:
    """A 1, 2 or 5 x 10^k step that cuts `span` into about `ticks` parts."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def y_domain(values: Sequence[float], zero_based: bool) -> tuple[float, float, float]:
    """(low, high, step) with low and high on whole steps around every value."""
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if zero_based:
        lo, hi = min(0.0, lo), max(0.0, hi)
    if hi == lo:
        hi, lo = hi + 1, (lo if zero_based and lo == 0 else lo - 1)
    step = nice_step(hi - lo)
    return math.floor(lo / step) * step, math.ceil(hi / step) * step, step


def format_tick(v: float, step: float) -> str:
    if abs(v) >= 1e6 and step >= 1e5:
        return f"{v / 1e6:,.{max(0, -math.floor(math.log10(step / 1e6)))}f}M"
    if step >= 1:
        return f"{v:,.0f}"
    return f"{v:,.{-math.floor(math.log10(step))}f}"


def utc(ms: int, with_date: bool = True) -> str:
    t = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC" if with_date else "%H:%M")


def time_ticks(start_ms: int, end_ms: int, ticks: int = 7) -> list[int]:
    span = max(1, end_ms - start_ms)
    step = next((s for s in TIME_STEPS_MS if span / s <= ticks), TIME_STEPS_MS[-1])
    first = -(-start_ms // step) * step
    return list(range(first, end_ms + 1, step))


def _time_label(ms: int, span_ms: int) -> str:
    t = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return t.strftime("%m-%d %H:%M" if span_ms > 86_400_000 else "%H:%M")


def path_d(points: Sequence[tuple[float, float | None]]) -> str:
    """SVG path data through the points; None breaks the line. A lone point becomes a short
    horizontal stroke so it still has a visible extent."""
    parts: list[str] = []
    run: list[tuple[float, float]] = []

    def flush() -> None:
        if len(run) == 1:
            x, y = run[0]
            parts.append(f"M{x - 3:.1f},{y:.1f}L{x + 3:.1f},{y:.1f}")
        elif run:
            parts.append("M" + "L".join(f"{x:.1f},{y:.1f}" for x, y in run))
        run.clear()

    for x, y in points:
        if y is None:
            flush()
        else:
            run.append((x, y))
    flush()
    return "".join(parts)


def line_chart(*, kind: str, title: str, lines: Sequence[Line], start_ms: int, end_ms: int,
               unit: str, attrs: Mapping[str, str], markers: Sequence[VLine] = (),
               zero_based: bool = True) -> str:
    values = [v for ln in lines for _, v in ln.points if v is not None]
    frame = _Frame.around(values, start_ms, end_ms, zero_based)
    out = [_svg_open(kind, title, attrs, empty=not values), *_y_axis(frame, unit),
           *_x_axis(frame)]
    if not values:
        out.append(f'<text class="kmon-nodata" x="{LEFT + frame.plot_w / 2:.0f}" '
                   f'y="{TOP + frame.plot_h / 2:.0f}" text-anchor="middle">no rows in this window'
                   f"</text>")
    out += [*_markers(frame, markers), *_series(frame, lines, unit), "</g></svg>"]
    return "".join(out)


@dataclass(frozen=True)
class _Frame:
    """The plot area and its scales: time [start_ms, start_ms + span] across, [lo, hi] up."""
    start_ms: int
    end_ms: int
    span: int
    lo: float
    hi: float
    step: float
    plot_w: int = WIDTH - LEFT - RIGHT
    plot_h: int = HEIGHT - TOP - BOTTOM

    @classmethod
    def around(cls, values: Sequence[float], start_ms: int, end_ms: int,
               zero_based: bool) -> _Frame:
        return cls(start_ms, end_ms, max(1, end_ms - start_ms), *y_domain(values, zero_based))

    def x_of(self, t: int) -> float:
        return LEFT + self.plot_w * (t - self.start_ms) / self.span

    def y_of(self, v: float) -> float:
        return TOP + self.plot_h * (1 - (v - self.lo) / (self.hi - self.lo))


def _svg_open(kind: str, title: str, attrs: Mapping[str, str], *, empty: bool) -> str:
    """The <svg> element with its data- attributes, its title and the plot's background."""
    data_attrs = "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in attrs.items())
    return (f'<svg class="kmon-chart" data-kind="{esc(kind)}"{data_attrs} '
            f'data-empty="{"true" if empty else "false"}" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{esc(title)}">'
            f"<title>{esc(title)}</title>"
            f'<rect class="kmon-plot" x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
            f'height="{HEIGHT - TOP - BOTTOM}"/>')


def _y_axis(frame: _Frame, unit: str) -> list[str]:
    """A grid line and a label per whole step of the value range, and the unit on top."""
    out = ['<g class="kmon-axis kmon-y">']
    n = round((frame.hi - frame.lo) / frame.step)
    for i in range(n + 1):
        v = frame.lo + i * frame.step
        y = frame.y_of(v)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + frame.plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{esc(format_tick(v, frame.step))}</text>")
    out.append(f'<text class="kmon-unit" x="{LEFT - 6}" y="{TOP - 10}" text-anchor="end">'
               f"{esc(unit)}</text></g>")
    return out


def _x_axis(frame: _Frame) -> list[str]:
    """A grid line and a UTC label per round time step."""
    out = ['<g class="kmon-axis kmon-x">']
    for t in time_ticks(frame.start_ms, frame.end_ms):
        x = frame.x_of(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + frame.plot_h}"/>'
                   f'<text x="{x:.1f}" y="{HEIGHT - 10}" text-anchor="middle">'
                   f"{esc(_time_label(t, frame.span))}</text>")
    out.append("</g>")
    return out


def _markers(frame: _Frame, markers: Sequence[VLine]) -> list[str]:
    """A vertical line with a tooltip per event inside the time range."""
    out = ['<g class="kmon-markers">']
    for m in markers:
        if frame.start_ms <= m.t_ms <= frame.end_ms:
            x = frame.x_of(m.t_ms)
            out.append(f'<line class="kmon-marker kmon-marker-{esc(m.kind)}" x1="{x:.1f}" '
                       f'x2="{x:.1f}" y1="{TOP}" y2="{TOP + frame.plot_h}">'
                       f"<title>{esc(m.label)} at {esc(utc(m.t_ms))}</title></line>")
    out.append("</g>")
    return out


def _series(frame: _Frame, lines: Sequence[Line], unit: str) -> list[str]:
    """A path per series with values, and its dots while there are few enough to tell apart
    (the closing tag of the group is the caller's)."""
    out = ['<g class="kmon-data">']
    # emphasised lines last, so they are drawn on top of the others
    for ln in sorted(lines, key=lambda ln: ln.emphasis):
        pts = sorted(ln.points)
        if not any(v is not None for _, v in pts):
            continue
        d = path_d([(frame.x_of(t), None if v is None else frame.y_of(v)) for t, v in pts])
        out.append(f'<path class="kmon-series{" kmon-emphasis" if ln.emphasis else ""}" '
                   f'data-series="{esc(ln.column)}" d="{d}" stroke="{esc(ln.color)}" '
                   f'fill="none"/>')
        shown = [(t, v) for t, v in pts if v is not None]
        if len(shown) <= MAX_DOTS:
            for t, v in shown:
                out.append(f'<circle class="kmon-point" cx="{frame.x_of(t):.1f}" '
                           f'cy="{frame.y_of(v):.1f}" r="2.5" fill="{esc(ln.color)}">'
                           f"<title>{esc(ln.label)}: {esc(format_number(v))} {esc(unit)} at "
                           f"{esc(utc(t))}</title></circle>")
    return out


def format_number(v: object) -> str:
    """How a report prints a number: integers whole, others to at most 3 decimals."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v.is_integer():
            return str(int(v))
        return f"{v:.3f}".rstrip("0").rstrip(".")
    return str(v)
