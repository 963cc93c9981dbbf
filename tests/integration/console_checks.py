"""What a person sees on the console of `kmon demo` (live or `--replay`): the checks.

`check_console(output, cwd)` takes the console output of one run (standard output and
standard error together, as a terminal shows them) and the folder it ran in, and fails
with the offending lines when the console is not for people:

- more than `MAX_LINES` lines;
- a Python logging line (``12:00:01 INFO evaluation.detect: ...``, ``WARNING:root:...``), a
  Spark/JVM line (``26/11/26 01:59:04 WARN ...``, ``WARNING: Using incubator modules``,
  a Java stack frame) or a librdkafka line (``%3|1795360201.812|FAIL|rdkafka#...``);
- a summary table whose cells cut a word: each row's fault cell, read across its wrapped
  lines, must be a fault's whole title, each finding a whole ``<type> <entity>``, each
  action one of the forms the demo writes;
- no ``logs: <file>`` line naming the run's log file, or a file without the log records.

Used by the tests that run `kmon demo` anyway (its replay takes minutes): call it on the
output they already have.
"""

from __future__ import annotations

import re
from pathlib import Path

MAX_LINES = 60

LOGGING_LINE = re.compile(r"^\d\d:\d\d:\d\d(,\d+)? (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: "
                          r"|^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\S*:"
                          r"|^\S+\.py:\d+: \w*Warning: ")
JVM_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) "
                      r"|^WARNING: Using incubator modules|org\.apache\.spark|^\s+at [\w.$]+\("
                      r"|^Exception in thread |^SLF4J|log4j", re.I)
LIBRDKAFKA_LINE = re.compile(r"^%\d\|\d+\.\d+\|\w+\|")
LOG_FILE_LINE = re.compile(r"\blogs: (\S+\.log)\b")
BORDER = re.compile(r"^\+(-+\+)+$")

FINDING = re.compile(r"^[a-z_]+ [A-Za-z0-9_.:/-]+$")
ACTION = re.compile(r"^(-|\?|\(replay: no queue\)|not decided yet|[a-z_]+ \(dry run\)"
                    r"|none: .+)$")


def check_console(output: str, cwd: Path) -> None:
    lines = output.splitlines()
    assert len(lines) <= MAX_LINES, (f"{len(lines)} console lines, at most {MAX_LINES}:\n"
                                     + output[-6000:])
    noise = [line for line in lines if LOGGING_LINE.search(line) or JVM_LINE.search(line)
             or LIBRDKAFKA_LINE.search(line)]
    assert not noise, "log lines on the console:\n" + "\n".join(noise[:20])
    check_summary_table(lines)
    check_log_file(output, cwd)


MAX_REPEATS = 3


def check_live_console(output: str, cwd: Path) -> None:
    """The live demo's console (longer than the replay's: progress while it waits): no
    log lines, no line printed more than MAX_REPEATS times, the table and the log file
    as for the replay."""
    lines = output.splitlines()
    noise = [line for line in lines if LOGGING_LINE.search(line) or JVM_LINE.search(line)
             or LIBRDKAFKA_LINE.search(line)]
    assert not noise, "log lines on the console:\n" + "\n".join(noise[:20])
    counts: dict[str, int] = {}
    for line in filter(str.strip, lines):
        counts[line] = counts.get(line, 0) + 1
    repeated = {line: n for line, n in counts.items() if n > MAX_REPEATS}
    assert not repeated, f"lines printed more than {MAX_REPEATS} times: {repeated}"
    check_summary_table(lines)
    check_log_file(output, cwd)


def check_log_file(output: str, cwd: Path) -> None:
    named = LOG_FILE_LINE.search(output)
    assert named, "the console does not name the run's log file (a `logs: <file>` line)"
    path = Path(named.group(1))
    path = path if path.is_absolute() else Path(cwd) / path
    assert path.is_file(), f"the log file the console names does not exist: {path}"
    records = [line for line in path.read_text(errors="replace").splitlines()
               if re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR|"
                           r"CRITICAL) \S+: ", line)]
    assert records, f"no log records in {path}"


def table_rows(lines: list[str]) -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    """The last table's rows after its header: (fault, detected, time to detect, findings)
    with each cell's wrapped lines joined by a space, and the findings as (finding,
    action) pairs: a finding starts on a line whose finding cell starts with a finding
    type, and its action beside it."""
    from core.findings import AnomalyType

    types = {t.value for t in AnomalyType}
    borders = [i for i, line in enumerate(lines) if BORDER.match(line.strip())]
    assert len(borders) >= 3, "no summary table on the console"
    end = borders[-1]
    start = end
    while start > 0 and lines[start - 1].strip().startswith(("|", "+")):
        start -= 1
    blocks: list[list[list[str]]] = [[]]
    for line in lines[start + 1:end]:
        if BORDER.match(line.strip()):
            blocks.append([])
        else:
            blocks[-1].append([c.strip() for c in line.strip()[1:-1].split(" | ")])
    # A row starts on the line whose "detected" cell is filled (borders may or may not
    # separate the rows).
    row_blocks: list[list[list[str]]] = []
    for cells in (c for block in blocks[1:] for c in block):
        if cells[1] or not row_blocks:
            row_blocks.append([])
        row_blocks[-1].append(cells)
    rows = []
    for block in row_blocks:
        fault, detected, ttd = (" ".join(filter(None, col)) for col in list(zip(*block))[:3])
        findings: list[list[str]] = []
        for cells in block:
            if not findings or cells[3].split(" ")[0] in types:
                findings.append(["", ""])
            findings[-1] = [f"{findings[-1][0]} {cells[3]}".strip(),
                            f"{findings[-1][1]} {cells[4]}".strip()]
        rows.append((fault, detected, ttd, [(f, a) for f, a in findings]))
    return rows


def check_summary_table(lines: list[str]) -> None:
    from demo.cause import all_faults

    titles = {f.title for f in all_faults(3)}
    rows = table_rows(lines)
    assert rows, "an empty summary table"
    for fault, detected, ttd, findings in rows:
        assert fault in titles, f"fault cell {fault!r} is not a whole title of {sorted(titles)}"
        assert detected in ("yes", "NO"), detected
        assert re.fullmatch(r"\d+ s|-", ttd), ttd
        for finding, action in findings:
            assert finding == "-" or FINDING.match(finding), (
                f"finding {finding!r} is not a whole `<type> <entity>`")
            assert ACTION.match(action), f"action {action!r} beside {finding!r}"
            assert action.count("none:") + action.count("(dry run)") <= 1, (
                f"several actions for one finding: {action!r}")
