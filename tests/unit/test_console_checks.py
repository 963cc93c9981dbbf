"""tests/integration/console_checks.py, on consoles made here: what it lets through and
what it stops (the replay that feeds it takes minutes; its checks should not)."""

from __future__ import annotations

import pytest

from core.findings import ActionKind, AnomalyType, EntityKind, Finding, Severity, Status
from demo.outcomes import FaultOutcome
from demo.summary import summary_table
from tests.integration.console_checks import check_console, check_live_console

pytestmark = pytest.mark.unit

RECORD = "2026-11-26 02:01:09,123 INFO evaluation.detect: detectors at 1795359781812: 0 findings\n"


def finding(type_: str, entity: str) -> Finding:
    return Finding(finding_id=f"{type_}:{entity}", cluster="local", type=AnomalyType(type_),
                   severity=Severity.WARNING, entity_kind=EntityKind.BROKER, entity=entity,
                   first_seen_ms=1, last_seen_ms=1, status=Status.OPEN, evidence={},
                   cause="c", explanation="because", suggested_action=ActionKind.NONE)


def outcomes(action: str = "(replay: no queue)") -> list[FaultOutcome]:
    rewinds = [(1, finding("offset_rewind", "group:billing/orders-3")),
               (2, finding("offset_rewind", "group:analytics/clicks-3"))]
    return [
        FaultOutcome("slow_broker", "slow broker (freezes in bursts)", 0, 30_000,
                     [(1, finding("slow_broker", "broker:2"))], action=action),
        FaultOutcome("offset_rewind", "offset rewinds (operator reset, stale process)", 0,
                     62_000, rewinds, action=f"{action}\n{action}"),
        FaultOutcome("compaction_lag", "compaction lag (throttled cleaner)", 0, action=action),
        FaultOutcome("unclean_election", "unclean leader election (and its chain)", 0, 69_000,
                     [(1, finding("unclean_election", "ledger-0"))], action=action)]


def console(table: str, extra: str = "") -> str:
    return ("kmon demo: logs: logs/kmon-demo-1.log (librdkafka and the JVM: kmon-demo-1."
            "stderr.log, Spark: spark.log, beside it; -v shows the log here)\n"
            "[1/4] copying the captured telemetry (4.5 MB, 4 faults) into a fresh lake  (+0s)\n"
            + extra
            + "   >> HIGH     slow_broker (slow_follower) on broker:2: Broker 2 is slow\n"
            "   >> WARNING  compaction_lag on broker:3: behind\n"
            "[4/4] summary (times are detector time on complete data)  (+251s)\n\n"
            + table + "\n\nDelta tables under /w/.kmon/demo-replay/lake\n")


@pytest.fixture
def cwd(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "kmon-demo-1.log").write_text(RECORD)
    return tmp_path


def test_a_console_for_people_passes(cwd):
    check_console(console(summary_table(outcomes())), cwd)
    live = outcomes("none: the detector suggests no action for offset_rewind with cause "
                    "operator_reset, which an operator asked for")
    check_console(console(summary_table(live, width=110)), cwd)


@pytest.mark.parametrize("line", [
    "02:00:25 INFO jobs.silver: silver batch 0: 209464 rows of 5 streams in 74.1 s",
    "02:00:25 WARNING ingest.partition_offsets_agent: partition offsets agent demo: ledger-0",
    "WARNING:root:something",
    "26/11/26 01:59:04 WARN ProcessingTimeExecutor: Current batch is falling behind.",
    "WARNING: Using incubator modules: jdk.incubator.vector",
    "%3|1795360201.812|FAIL|rdkafka#producer-1| [thrd:127.0.0.1:39092/1]: Connect failed",
], ids=["python_info", "python_warning", "basic_config", "spark", "jvm", "librdkafka"])
def test_a_log_line_on_the_console_fails(cwd, line):
    with pytest.raises(AssertionError, match="log lines on the console"):
        check_console(console(summary_table(outcomes()), line + "\n"), cwd)


def test_too_many_lines_fail(cwd):
    with pytest.raises(AssertionError, match="console lines, at most"):
        check_console(console(summary_table(outcomes()), "      10/12 evaluations\n" * 40), cwd)


def test_a_cut_word_or_comma_joined_actions_fail(cwd):
    cut = summary_table(outcomes()).replace("(freezes in bursts)", "(freezes in burs  ")
    with pytest.raises(AssertionError, match="not a whole title"):
        check_console(console(cut), cwd)
    joined = outcomes("none: the detector suggests no action, none: the finding is resolved")
    with pytest.raises(AssertionError, match="several actions"):
        check_console(console(summary_table(joined, width=160)), cwd)


def test_a_missing_or_empty_log_file_fails(cwd):
    (cwd / "logs" / "kmon-demo-1.log").write_text("")
    with pytest.raises(AssertionError, match="no log records"):
        check_console(console(summary_table(outcomes())), cwd)
    (cwd / "logs" / "kmon-demo-1.log").unlink()
    with pytest.raises(AssertionError, match="does not exist"):
        check_console(console(summary_table(outcomes())), cwd)



def test_the_live_console_may_be_longer_but_not_repeat_a_line(cwd):
    waits = "".join(f"      waiting for the detectors: {s} s since the fault started\n"
                    for s in range(15, 900, 15))
    check_live_console(console(summary_table(outcomes()), waits), cwd)
    same = "      detected; waiting for the findings of its effects: readers\n" * 4
    with pytest.raises(AssertionError, match="more than 3 times"):
        check_live_console(console(summary_table(outcomes()), same), cwd)
    with pytest.raises(AssertionError, match="log lines on the console"):
        check_live_console(console(summary_table(outcomes()),
                                   "02:00:25 WARNING ingest.x: leader not available\n"), cwd)
