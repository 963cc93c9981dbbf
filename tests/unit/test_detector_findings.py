"""The finding model: ranked enums, deterministic ids, and the lifecycle on named scenarios."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.findings import (
    ActionKind,
    AnomalyType,
    Detection,
    EntityKind,
    Finding,
    FindingsSection,
    Severity,
    Status,
    finding_id,
    sort_findings,
    update_findings,
)
from detectors.compaction_lag import CompactionLagSection
from detectors.correlation import CorrelationSection
from detectors.offset_rewind_config import OffsetRewindSection
from detectors.slow_broker import SlowBrokerSection
from detectors.unclean_election import UncleanElectionSection
from kmon.config import ConfigError, _build_section

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
S = 1000
CONFIG = FindingsSection()
BUCKET = int(CONFIG.id_bucket_s * 1000)


def detection(entity="broker:3", first=0, last=30, *, type=AnomalyType.SLOW_BROKER,
              severity=Severity.HIGH, cause="local_disk_or_page_cache", evidence=None):
    return Detection(cluster="c1", type=type, severity=severity, entity_kind=EntityKind.BROKER,
                     entity=entity, first_seen_ms=T0 + first * S, last_seen_ms=T0 + last * S,
                     cause=cause, explanation="Broker 3 is slow.",
                     suggested_action=ActionKind.MOVE_LEADERSHIP,
                     evidence=evidence if evidence is not None else {"latency_ms": 900.0})


def opened(d: Detection, **changes) -> Finding:
    [f] = update_findings([], [d], now_ms=d.last_seen_ms, config=CONFIG)
    return dataclasses.replace(f, **changes)


def test_enums_are_ranked_worst_first_and_are_plain_strings():
    assert [s.rank for s in Severity] == [0, 1, 2, 3]
    assert Severity.CRITICAL.rank < Severity.HIGH.rank < Severity.WARNING.rank < Severity.INFO.rank
    assert AnomalyType.UNCLEAN_ELECTION.rank == 0
    assert AnomalyType.SLOW_CLIENT.rank == len(AnomalyType) - 1   # the client's own problem
    assert {t.value for t in AnomalyType} == {
        "slow_broker", "cluster_wide_slowness", "offset_rewind", "offset_reset",
        "compaction_lag", "unclean_election", "log_truncation", "slow_client"}
    assert {a.value for a in ActionKind} == {"move_leadership", "cancel_reassignment",
                                             "restore_group_offsets", "page_human", "none"}
    assert [s.value for s in Status] == ["open", "resolved"]
    assert json.dumps({"t": AnomalyType.SLOW_BROKER}) == '{"t": "slow_broker"}'


def test_finding_id_is_stable_within_a_bucket_and_differs_across():
    bucket_start = T0 - T0 % BUCKET

    def fid(first_seen_ms, cluster="c1", type=AnomalyType.SLOW_BROKER, entity="broker:3"):
        return finding_id(cluster, type, entity, first_seen_ms, BUCKET)

    a = fid(bucket_start)
    assert a == fid(bucket_start + BUCKET - 1)
    assert a != fid(bucket_start + BUCKET)
    assert a != fid(bucket_start, cluster="c2")
    assert a != fid(bucket_start, type=AnomalyType.COMPACTION_LAG)
    assert a != fid(bucket_start, entity="broker:4")


OPEN = opened(detection())


@pytest.mark.parametrize("previous,detections,now_s,expected", [
    # A first detection opens a finding.
    ([], [detection()], 30,
     [("broker:3", Status.OPEN, 0, 30, "new")]),
    # Seen again two minutes later, first_seen in another bucket: the same finding, refreshed.
    ([OPEN], [detection(first=100, last=150, severity=Severity.WARNING)], 150,
     [("broker:3", Status.OPEN, 0, 150, "same")]),
    # Not seen for less than resolve_after_s: still open.
    ([OPEN], [], 30 + 299, [("broker:3", Status.OPEN, 0, 30, "same")]),
    # Not seen for resolve_after_s: resolved.
    ([OPEN], [], 30 + 300, [("broker:3", Status.RESOLVED, 0, 30, "same")]),
    # A detection describing history (last seen long ago) opens nothing.
    ([], [detection(first=0, last=30)], 30 + 900, []),
    # Resolved, then seen again in the same id bucket: the same finding reopens.
    ([dataclasses.replace(OPEN, status=Status.RESOLVED, resolved_ms=T0 + 40 * S)],
     [detection(first=5, last=50)], 50, [("broker:3", Status.OPEN, 0, 50, "same")]),
    # Resolved, then a new occurrence an hour later: a new finding beside the old one.
    ([dataclasses.replace(OPEN, status=Status.RESOLVED, resolved_ms=T0 + 330 * S)],
     [detection(first=3600, last=3630)], 3630,
     [("broker:3", Status.OPEN, 3600, 3630, "new"), ("broker:3", Status.RESOLVED, 0, 30, "same")]),
    # Two detections for one entity in one evaluation: one finding, the worst severity,
    # the earliest first_seen.
    ([], [detection(first=10, last=30, severity=Severity.WARNING),
          detection(first=0, last=20, severity=Severity.HIGH)], 30,
     [("broker:3", Status.OPEN, 0, 20, "new")]),
    # Other entities and types are other findings.
    ([OPEN], [detection(entity="broker:4"), detection(type=AnomalyType.COMPACTION_LAG)], 30,
     [("broker:3", Status.OPEN, 0, 30, "same"), ("broker:4", Status.OPEN, 0, 30, "new"),
      ("broker:3", Status.OPEN, 0, 30, "new")]),
], ids=["new_detection_opens_a_finding", "persisting_detection_refreshes_not_duplicates",
        "unseen_for_less_than_resolve_after_stays_open", "unseen_for_resolve_after_resolves",
        "history_detection_opens_nothing", "flap_within_bucket_reopens_the_same_finding",
        "recurrence_after_resolution_is_a_new_finding", "duplicate_detections_merge",
        "other_entities_and_types_are_other_findings"])
def test_lifecycle(previous, detections, now_s, expected):
    got = update_findings(previous, detections, now_ms=T0 + now_s * S, config=CONFIG)
    known = {f.finding_id for f in previous}
    assert [(f.entity, f.status, (f.first_seen_ms - T0) // S, (f.last_seen_ms - T0) // S,
             "same" if f.finding_id in known else "new") for f in got] == expected
    assert len({f.finding_id for f in got}) == len(got)
    for f in got:
        assert (f.resolved_ms is not None) is (f.status is Status.RESOLVED)


def test_refresh_takes_new_facts_and_keeps_identity_and_correlation():
    correlated = dataclasses.replace(OPEN, incident_id="root", related=("x",))
    [f] = update_findings([correlated], [detection(first=60, last=90, severity=Severity.WARNING,
                                                   cause="slow_follower",
                                                   evidence={"latency_ms": 1200.0})],
                          now_ms=T0 + 90 * S, config=CONFIG)
    assert (f.finding_id, f.first_seen_ms, f.incident_id, f.related) == (
        OPEN.finding_id, OPEN.first_seen_ms, "root", ("x",))
    assert (f.severity, f.cause, f.evidence, f.last_seen_ms) == (
        Severity.WARNING, "slow_follower", {"latency_ms": 1200.0}, T0 + 90 * S)


def test_event_types_stay_open_longer():
    election = opened(detection(entity="orders-2", type=AnomalyType.UNCLEAN_ELECTION,
                                severity=Severity.CRITICAL, cause="unclean_leader_election"))
    [f] = update_findings([election], [], now_ms=T0 + 1800 * S, config=CONFIG)
    assert f.status is Status.OPEN
    [f] = update_findings([election], [], now_ms=T0 + 3630 * S, config=CONFIG)
    assert f.status is Status.RESOLVED


def test_evidence_must_be_json_serialisable():
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        detection(evidence={"brokers": {1, 2}})
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        detection(evidence={"ratio": float("nan")})


def test_row_round_trip():
    f = dataclasses.replace(OPEN, incident_id=OPEN.finding_id, related=("a", "b"))
    row = f.to_row()
    assert row["type"] == "slow_broker" and row["suggested_action"] == "move_leadership"
    assert row["is_root_cause"] is True
    assert json.loads(row["evidence_json"]) == {"latency_ms": 900.0}
    assert Finding.from_row(row) == f


def test_sorted_worst_first():
    info = opened(detection(entity="broker:1", severity=Severity.INFO))
    crit = opened(detection(entity="orders-2", type=AnomalyType.UNCLEAN_ELECTION,
                            severity=Severity.CRITICAL))
    rewind = opened(detection(entity="group:g/orders-2", type=AnomalyType.OFFSET_REWIND))
    slow = opened(detection(entity="broker:2"))
    assert [f.entity for f in sort_findings([info, rewind, slow, crit])] == [
        "orders-2", "broker:2", "group:g/orders-2", "broker:1"]


@pytest.mark.parametrize("values,message", [
    ({"resolve_after_s_by_type": {"slow_brokr": 60}}, "unknown anomaly type 'slow_brokr'"),
    ({"resolve_after_s_by_type": {"slow_broker": 0}}, "must be a positive number"),
    ({"resolve_after_s": 0}, "must be >= 1"),
])
def test_config_errors_name_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        _build_section(FindingsSection, values, "kmon.toml", "findings")


def test_every_detector_section_builds_from_defaults_like_kmon_config():
    for name, cls in {"findings": FindingsSection, "slow_broker": SlowBrokerSection,
                      "offset_rewind": OffsetRewindSection,
                      "compaction_lag": CompactionLagSection,
                      "unclean_election": UncleanElectionSection,
                      "correlation": CorrelationSection}.items():
        assert _build_section(cls, {}, "kmon.toml", name) == cls()
        for f in dataclasses.fields(cls):
            assert f.metadata.get("doc"), f"{name}.{f.name} has no doc"
