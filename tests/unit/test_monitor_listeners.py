"""How `kmon.monitor.Monitor` hands findings to its listeners: the alert path (the exporter,
`on_findings`) in the evaluation, the decision step in the detector query's write-behind;
a failing listener never stops detection, and an unreachable remediation queue is one
warning line. No SparkSession."""

from __future__ import annotations

import io
import logging

import pytest

from kmon.config import Config
from kmon.monitor import Monitor
from remediation.queue import QueueError

pytestmark = pytest.mark.unit


class _Decisions:
    def __init__(self, error: Exception):
        self.error, self.calls = error, 0

    def run(self, findings, now_ms, cluster_sizes):
        self.calls += 1
        raise self.error


def _monitor(decisions, seen):
    m = Monitor(Config(), on_findings=[lambda findings, now_ms: seen.append(now_ms)])
    m.decisions = decisions
    m.background_listeners.append(m._decide)
    return m


def _evaluation(m, now_ms):
    """What the detector query does with one evaluation's findings, in order."""
    m._on_findings([], now_ms)
    m._on_findings_in_background([], now_ms)


def test_an_unreachable_queue_is_one_warning_and_the_other_listeners_still_run(caplog):
    seen: list[int] = []
    decisions = _Decisions(QueueError("1 action(s) still queued and 0 failed on q"))
    m = _monitor(decisions, seen)
    with caplog.at_level(logging.WARNING):
        _evaluation(m, 1_000)
        _evaluation(m, 2_000)
    assert seen == [1_000, 2_000] and decisions.calls == 2
    warnings = [r for r in caplog.records if r.name == "kmon.monitor"]
    assert len(warnings) == 2
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in warnings)
    assert "actions not published" in warnings[0].getMessage()
    assert "1 action(s) still queued" in warnings[0].getMessage()


def test_any_other_listener_error_is_logged_with_its_traceback_and_detection_goes_on(caplog):
    seen: list[int] = []
    m = _monitor(_Decisions(ValueError("bug")), seen)
    with caplog.at_level(logging.ERROR):
        _evaluation(m, 3_000)
    assert seen == [3_000]
    [r] = [r for r in caplog.records if r.name == "kmon.monitor"]
    assert r.levelno == logging.ERROR and r.exc_info is not None


def test_the_decision_step_is_not_on_the_alert_path():
    seen: list[int] = []
    decisions = _Decisions(ValueError("not reached"))
    m = _monitor(decisions, seen)
    m._on_findings([], 4_000)
    assert seen == [4_000] and decisions.calls == 0


class _SparkNotYet(Exception):
    pass


def test_the_exporter_answers_before_spark_starts_with_the_findings_it_saved(
        tmp_path, monkeypatch):
    """A restarted `kmon run` is back on /metrics before its Spark session exists (a minute
    on a small machine), serving the open findings its last run saved."""
    import socket
    import urllib.request

    import infra.spark_session
    from core.findings import (ActionKind, AnomalyType, EntityKind, Finding, Severity,
                               Status)
    from kmon.monitor import exporter_state_path

    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     spark={"storage_root": str(tmp_path / "lake")})
    state = exporter_state_path(config)
    assert state.parent == tmp_path / "exporter-state"
    other_lake = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                         spark={"storage_root": str(tmp_path / "lake2")})
    assert exporter_state_path(other_lake) != state       # a test's lake is not the user's
    f = Finding(finding_id="f1", cluster=config.watch.cluster, type=AnomalyType.SLOW_BROKER,
                severity=Severity.HIGH, entity_kind=EntityKind.BROKER, entity="broker:2",
                first_seen_ms=1, last_seen_ms=2, status=Status.OPEN, evidence={},
                cause="local_disk_or_page_cache", explanation="x",
                suggested_action=ActionKind.MOVE_LEADERSHIP)
    Monitor(config, exporter_state=state).exporter.set_findings([f], now_ms=2)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    served = {}

    def build(_config, *a, **kw):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            served["text"] = r.read().decode()
        raise _SparkNotYet()

    monkeypatch.setattr(infra.spark_session, "build_spark_session", build)
    m = Monitor(config, exporter_state=state)
    try:
        with pytest.raises(_SparkNotYet):
            m.start(port, out=io.StringIO())
    finally:
        m.stop()
    assert 'kmon_findings_open{' in served["text"] and 'finding="f1"' in served["text"]
