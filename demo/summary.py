"""The demo's summary table: one row per fault, one line per finding that showed it.

Cells are wrapped at word boundaries to fit the table in `width` columns, never cut: the
widest column gives way first, and no column gets narrower than its longest word. A cell
holding several lines (one per finding, in the finding and action columns) keeps each
finding's action beside it.
"""

from __future__ import annotations

import shutil
import textwrap

from demo.outcomes import FaultOutcome

HEADER = ("fault", "detected", "time to detect", "finding", "action queued")
# Below this the fault titles wrap before their third word and the rows get hard to read;
# a narrower terminal wraps the table instead.
MIN_WIDTH, MAX_WIDTH, DEFAULT_WIDTH = 110, 160, 120


def table_width() -> int:
    """The terminal's width (COLUMNS, else 120 when not a terminal), kept within bounds."""
    columns = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return max(MIN_WIDTH, min(MAX_WIDTH, columns))


def fault_row(o: FaultOutcome) -> tuple[str, ...]:
    findings = "\n".join(f"{f.type.value} {f.entity}" for _, f in o.findings) or "-"
    return (o.title, "yes" if o.detected else "NO",
            f"{o.time_to_detect_s:.0f} s" if o.detected else "-", findings, o.action)


def summary_table(outcomes: list[FaultOutcome], width: int = DEFAULT_WIDTH) -> str:
    rows = [HEADER] + [fault_row(o) for o in outcomes]
    widths = column_widths(rows, width)
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    # Borders above and below the header and at the end only: a row starts where its
    # "detected" cell is filled (a border between rows would repeat on every one).
    out = [line, *render_row(rows[0], widths), line]
    for r in rows[1:]:
        out += render_row(r, widths)
    out.append(line)
    return "\n".join(out)


def column_widths(rows: list[tuple[str, ...]], width: int) -> list[int]:
    """Each column's width: its longest line, the widest ones narrowed one character at a
    time while the table is wider than `width`, none below its longest word."""
    lines = [[ln for r in rows for ln in str(r[i]).split("\n")] for i in range(len(rows[0]))]
    widths = [max(len(ln) for ln in col) for col in lines]
    floors = [max((len(w) for ln in col for w in ln.split()), default=1) for col in lines]
    budget = width - (3 * len(widths) + 1)   # "| " + " | " between + " |"
    while sum(widths) > budget:
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def wrap(text: str, width: int) -> list[str]:
    """Lines of at most `width` characters, broken between words only."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def render_row(row: tuple[str, ...], widths: list[int]) -> list[str]:
    """A row's table lines. A cell's own lines (one per finding) line up across the row:
    line k of the finding column sits beside line k of the action column."""
    cells = [str(c).split("\n") for c in row]
    out = []
    for k in range(max(len(c) for c in cells)):
        wrapped = [wrap(c[k] if k < len(c) else "", w) for c, w in zip(cells, widths)]
        for n in range(max(len(w) for w in wrapped)):
            out.append("| " + " | ".join((w[n] if n < len(w) else "").ljust(width)
                                         for w, width in zip(wrapped, widths)) + " |")
    return out
