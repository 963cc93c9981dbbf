"""The README's first-look commands, run verbatim from the repository root.

CI runs the suite in a fresh clone (`.ci/run`), so these run there exactly as a new user
would type them. (`./kmonw test` is this suite itself; `./kmonw demo` is run in its short
mode by test_demo.py.)
"""

from __future__ import annotations

import re
import subprocess

import pytest

from kmon.config import REPO_ROOT
from tests.integration.console_checks import check_console

pytestmark = pytest.mark.timeout(1900)


def readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"<!-- readme-commands:begin -->\s*```sh\n(.*?)```\s*"
                      r"<!-- readme-commands:end -->", text, re.S)
    assert block, "README lost its readme-commands block"
    return [line for line in block.group(1).splitlines() if line.strip()]


# The replay's four faults: the start of each title, and the finding type that shows it
# (the first finding of the row; offset rewinds show as offset_rewind or offset_reset).
EXPECTED_FAULTS = {
    "slow broker": ("slow_broker",),
    "offset rewinds": ("offset_rewind", "offset_reset"),
    "compaction lag": ("compaction_lag",),
    "unclean leader election": ("unclean_election",),
}
BORDER = re.compile(r"^\+(-+\+)+$")


def summary_rows(output: str) -> list[dict[str, str]]:
    """The replay's summary table as one dict per fault, keyed by the header.

    The table is drawn with `+---+` borders and `| a | b |` lines. A cell may wrap over
    several lines (and a row may list several findings, one per line); a line whose
    "detected" cell is empty continues the row above it, its cells joined with spaces."""
    lines = output.splitlines()
    borders = [i for i, line in enumerate(lines) if BORDER.match(line.strip())]
    assert len(borders) >= 3, f"no summary table in the output:\n{output[-4000:]}"
    # the last table printed: from the last border back to the first of its run
    end = borders[-1]
    start = end
    while start > 0 and lines[start - 1].strip().startswith(("|", "+")):
        start -= 1
    segments: list[list[list[str]]] = [[]]   # the lines between two borders, as cells
    for line in lines[start + 1:end + 1]:
        if BORDER.match(line.strip()):
            segments.append([])
        else:
            segments[-1].append([c.strip() for c in line.strip()[1:-1].split(" | ")])
    header = [" ".join(filter(None, col)) for col in zip(*segments[0])]
    assert header[:2] == ["fault", "detected"], header
    rows: list[list[str]] = []
    for cells in (c for seg in segments[1:] for c in seg):
        assert len(cells) == len(header), (cells, header)
        if cells[1] or not rows:
            rows.append(cells)
        else:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
    return [dict(zip(header, r)) for r in rows]


def test_summary_rows_parse_plain_and_wrapped_tables():
    plain = """
+-------------+----------+----------------+---------------------+---------------+
| fault       | detected | time to detect | finding             | action queued |
+-------------+----------+----------------+---------------------+---------------+
| slow broker | yes      | 40 s           | slow_broker broker:2 | move          |
| compaction  | NO       | -              | -                   | -             |
+-------------+----------+----------------+---------------------+---------------+"""
    wrapped = """
+------------+----------+---------+----------------------+--------+
| fault      | detected | time to | finding              | action |
|            |          | detect  |                      | queued |
+------------+----------+---------+----------------------+--------+
| slow       | yes      | 40 s    | slow_broker broker:2 | move   |
| broker     |          |         | slow_broker broker:3 | page   |
+------------+----------+---------+----------------------+--------+
| compaction | NO       | -       | -                    | -      |
+------------+----------+---------+----------------------+--------+"""
    assert [(r["fault"], r["detected"]) for r in summary_rows(plain)] == [
        ("slow broker", "yes"), ("compaction", "NO")]
    assert summary_rows(wrapped) == [
        {"fault": "slow broker", "detected": "yes", "time to detect": "40 s",
         "finding": "slow_broker broker:2 slow_broker broker:3", "action queued": "move page"},
        {"fault": "compaction", "detected": "NO", "time to detect": "-", "finding": "-",
         "action queued": "-"}]


def test_readme_first_look_commands_run_as_written():
    commands = readme_commands()
    assert commands[0] == "./kmonw demo --replay"
    outputs, consoles = [], []
    for line in commands:
        done = subprocess.run(["bash", "-c", line], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"{line}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        outputs.append(done.stdout)
        consoles.append(done.stdout + done.stderr)
    replay, sql = outputs
    # What a person sees: few lines, no log records, a table without cut words, the log
    # file named and holding the records.
    check_console(consoles[0], REPO_ROOT)
    rows = summary_rows(replay)
    assert len(rows) == len(EXPECTED_FAULTS), rows
    for (title, types), row in zip(EXPECTED_FAULTS.items(), rows):
        assert row["fault"].startswith(title), (title, row)
        assert row["detected"] == "yes", f"{title} not detected:\n{replay[-4000:]}"
        assert re.fullmatch(r"\d+ s", row["time to detect"]), row
        assert row["finding"].startswith(types), (title, row)
    assert "unclean_election" in sql and "ledger-0" in sql, sql[-3000:]
