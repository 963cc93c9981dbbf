"""The pure steps of evaluation/detect.py: running the detectors, the lifecycle and correlation
over one evaluation, which rows change, the replay's evaluation times and the row shape of
gold.anomalies. No SparkSession."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from core.findings import ActionKind, AnomalyType, Detection, EntityKind, Finding, Severity, Status
from detectors.partition_signals import LogTruncation, OffsetCommit
from detectors.lost_range import UncleanElection
from evaluation.detect import (
    carried_findings,
    changed_findings,
    cyclic_gc_paused,
    finding_row,
    next_findings,
    replay_times,
)
from detectors.registry import run_detectors
from evaluation.inputs import DetectorInputs
from kmon.config import Config
from schemas.anomalies import ANOMALY_COLUMNS, ANOMALY_SCHEMA

pytestmark = pytest.mark.unit

T0 = 1_767_225_600_000
CONFIG = Config()


def detection(entity="broker:1", seen=(T0, T0 + 10_000), type_=AnomalyType.SLOW_BROKER):
    return Detection(cluster="c1", type=type_, severity=Severity.HIGH,
                     entity_kind=EntityKind.BROKER, entity=entity, first_seen_ms=seen[0],
                     last_seen_ms=seen[1], cause="local_disk_or_page_cache", explanation="slow",
                     suggested_action=ActionKind.MOVE_LEADERSHIP,
                     evidence={"stage": "local", "stage_p99s_ms": {"local": 400.0},
                               "held": (1, 2)})


def test_no_inputs_no_detections():
    assert run_detectors(DetectorInputs(), CONFIG, T0) == []


def test_every_detector_runs_over_its_inputs():
    inputs = DetectorInputs(
        elections=[UncleanElection("c1", "t", 0, T0, old_leader=1, new_leader=2, leader_epoch=1)],
        truncations=[LogTruncation("c1", 1, "t", 0, T0 + 5_000, 100, 200)],
        commits=[OffsetCommit("c1", "g", "t", 0, 180, T0 - 5_000),
                 OffsetCommit("c1", "g", "t", 0, 100, T0 + 10_000)])
    types = sorted(d.type.value for d in run_detectors(inputs, CONFIG, T0 + 20_000))
    assert types == ["log_truncation", "offset_rewind", "unclean_election"]
    findings = next_findings([], run_detectors(inputs, CONFIG, T0 + 20_000), CONFIG, T0 + 20_000)
    root = next(f for f in findings if f.type is AnomalyType.UNCLEAN_ELECTION)
    assert {f.incident_id for f in findings} == {root.finding_id}


def test_a_finding_read_back_from_its_row_is_not_a_change():
    [f] = next_findings([], [detection()], CONFIG, T0 + 10_000)
    back = Finding.from_row(f.to_row())      # evidence through JSON: the tuple is a list now
    assert back.evidence != f.evidence
    assert changed_findings([back], [f]) == []
    later = dataclasses.replace(f, last_seen_ms=T0 + 20_000)
    assert changed_findings([back], [later, f]) == [later]


def test_a_new_finding_is_a_change():
    [f] = next_findings([], [detection()], CONFIG, T0 + 10_000)
    assert changed_findings([], [f]) == [f]


def test_the_same_evaluation_twice_gives_the_same_findings():
    first = next_findings([], [detection()], CONFIG, T0 + 10_000)
    again = next_findings(first, [detection()], CONFIG, T0 + 10_000)
    assert changed_findings(first, again) == []


def test_a_finding_unseen_for_resolve_after_is_resolved():
    [f] = next_findings([], [detection()], CONFIG, T0 + 10_000)
    later = T0 + 10_000 + int(CONFIG.findings.resolve_after_s * 1000)
    [r] = next_findings([f], [], CONFIG, later)
    assert (r.finding_id, r.status, r.resolved_ms) == (f.finding_id, Status.RESOLVED, later)


def test_the_next_evaluation_carries_open_and_recently_resolved_findings():
    chain_ms = int(CONFIG.correlation.chain_window_s * 1000)
    now = T0 + 10 * chain_ms
    [f] = next_findings([], [detection()], CONFIG, T0 + 10_000)
    still_open = dataclasses.replace(f, finding_id="open")
    just_resolved = dataclasses.replace(f, finding_id="recent", status=Status.RESOLVED,
                                        resolved_ms=now - chain_ms)
    long_resolved = dataclasses.replace(f, finding_id="old", status=Status.RESOLVED,
                                        resolved_ms=now - chain_ms - 1)
    later_first_seen = dataclasses.replace(f, finding_id="later", first_seen_ms=now + 1)
    carried = carried_findings([still_open, just_resolved, long_resolved, later_first_seen],
                               now, CONFIG)
    assert [x.finding_id for x in carried] == ["open", "recent"]


@pytest.mark.parametrize("start, end, step, times", [
    (0, 60_000, 20, [20_000, 40_000, 60_000]),
    (0, 50_000, 20, [20_000, 40_000, 50_000]),
    (0, 10_000, 20, [10_000]),
])
def test_replay_evaluates_at_the_end_of_every_step(start, end, step, times):
    assert replay_times(start, end, step) == times


@pytest.mark.parametrize("start, end, step", [(0, 0, 10), (10, 0, 10), (0, 10_000, 0)])
def test_replay_rejects_an_empty_range_or_step(start, end, step):
    with pytest.raises(ValueError):
        replay_times(start, end, step)


def test_a_row_is_the_findings_row_plus_the_date_of_first_seen():
    [f] = next_findings([], [detection(seen=(T0 - 1, T0 + 10_000))], CONFIG, T0 + 10_000)
    row = finding_row(f)
    assert row["date"] == dt.date(2025, 12, 31)
    assert [c.name for c in ANOMALY_SCHEMA.fields] == [*f.to_row(), "date"]
    assert set(ANOMALY_COLUMNS) == set(ANOMALY_SCHEMA.fieldNames())


def test_the_cyclic_gc_is_paused_for_an_evaluation_and_left_as_it_was():
    import gc
    was = gc.isenabled()
    try:
        gc.enable()
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert gc.isenabled()
        with pytest.raises(KeyError), cyclic_gc_paused():
            raise KeyError("a read failed")
        assert gc.isenabled()               # resumed after an error too
        gc.disable()
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()           # another owner's pause is kept
    finally:
        (gc.enable if was else gc.disable)()
