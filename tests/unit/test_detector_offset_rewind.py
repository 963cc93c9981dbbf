"""Offset rewind and reset rules on named scenarios, each asserting the rewind found, every
rule's result, then the detections. Group "billing" reads orders-2 unless said otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from detectors.findings import ActionKind, AnomalyType, Severity
from detectors.offset_rewind import (OffsetRewindSection, PartitionInputs, assess_rewind,
                                     detect_offset_anomalies, find_rewinds)
from detectors.partition_signals import (ClientOffsetReset, GroupMembership, LogTruncation,
                                         OffsetCommit, PartitionOffsets, ResetReason,
                                         ResetTarget, client_event_meaning, pair_reset_events)

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
S = 1000
CONFIG = OffsetRewindSection()
ENTITY = "group:billing/orders-2"


def at(seconds: float) -> int:
    return T0 + int(seconds * S)


def commits(*pairs, group="billing"):
    """(seconds, offset) pairs -> commits of `group` on orders-2."""
    return [OffsetCommit("c1", group, "orders", 2, off, at(t)) for t, off in pairs]


def ends(*triples):
    """(seconds, end offset, log start) -> broker offsets of orders-2."""
    return [PartitionOffsets("c1", "orders", 2, at(t), end, start) for t, end, start in triples]


def members(*pairs, group="billing"):
    return [GroupMembership("c1", group, at(t), n) for t, n in pairs]


def reset(t, reason, *, frm=None, to=None, target=ResetTarget.UNKNOWN, group="billing"):
    return ClientOffsetReset("c1", "orders", 2, at(t), group, "billing-1", frm, to, target, reason)


STEADY = commits((0, 1000), (60, 2000), (120, 3000), (180, 4000), (240, 5000))
ACTIVE = members((0, 3), (60, 3), (120, 3), (180, 3), (240, 3), (300, 3))


@dataclass
class Scenario:
    name: str
    commits: list
    offsets: list = field(default_factory=list)
    resets: list = field(default_factory=list)
    members: list = field(default_factory=list)
    truncations: list = field(default_factory=list)
    now_s: float = 600
    rewind: dict | None = None       # the latest rewind's shape and every rule's result
    detections: dict = field(default_factory=dict)  # (type, entity) -> (cause, severity, action)
    evidence: dict = field(default_factory=dict)    # (type, entity) -> evidence items


def scenarios():
    yield Scenario(
        "operator_reset_to_earliest_with_no_members",
        commits((0, 1000), (60, 2000), (120, 3000), (400, 0)),
        offsets=ends((0, 1200, 0), (120, 3100, 0), (400, 3500, 0), (600, 3500, 0)),
        members=members((0, 3), (120, 3), (350, 0)),
        rewind={"old_position": 3000, "new_position": 0, "drops": 1, "active": True,
                "member_count": 0, "admin_commit": True, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 3000,
                "cause": "operator_reset"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("operator_reset", Severity.INFO,
                                                          ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"reset_target": "earliest",
                                                        "duplicates": 3000, "member_count": 0,
                                                        "lag_now": 3500}})

    yield Scenario(
        "stale_process_commits_old_offset",
        STEADY + commits((300, 3000)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        rewind={"old_position": 5000, "new_position": 3000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 2000,
                "cause": "stale_offset_after_coordinator_move"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_offset_after_coordinator_move", Severity.HIGH,
            ActionKind.RESTORE_GROUP_OFFSETS)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"restore_to": 5000, "old_position": 5000,
                                                        "new_position": 3000,
                                                        "previous_commit_offset": 5000}})

    # A broker bug answers OffsetOutOfRange for a valid position (KAFKA-9543 and kin); the
    # consumer resets to earliest and re-reads everything.
    yield Scenario(
        "spurious_out_of_range_resets_to_earliest",
        STEADY + commits((305, 100)),
        offsets=ends((240, 5100, 100), (300, 5200, 100)), members=ACTIVE,
        resets=[reset(301, ResetReason.OUT_OF_RANGE, frm=5000, to=100,
                      target=ResetTarget.EARLIEST)],
        rewind={"old_position": 5000, "new_position": 100, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": True,
                "truncation": False, "past_log_end": 0, "duplicates": 4900,
                "cause": "auto_reset_after_out_of_range"},
        detections={
            (AnomalyType.OFFSET_REWIND, ENTITY): ("auto_reset_after_out_of_range", Severity.HIGH,
                                                  ActionKind.RESTORE_GROUP_OFFSETS),
            (AnomalyType.OFFSET_RESET, ENTITY): ("auto_reset_after_out_of_range", Severity.HIGH,
                                                 ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_RESET, ENTITY): {"from_offset": 5000, "to_offset": 100,
                                                       "duplicates": 4900, "skipped": 0,
                                                       "target": "earliest"}})

    yield Scenario(
        "reset_to_latest_skips_messages",
        commits((0, 1000), (300, 5000)),
        offsets=ends((0, 1500, 0), (200, 5000, 0), (300, 5000, 0)),
        members=members((0, 2), (300, 2)),
        resets=[reset(200, ResetReason.OUT_OF_RANGE, frm=1000, target=ResetTarget.LATEST)],
        detections={(AnomalyType.OFFSET_RESET, ENTITY): ("auto_reset_after_out_of_range",
                                                         Severity.HIGH,
                                                         ActionKind.RESTORE_GROUP_OFFSETS)},
        evidence={(AnomalyType.OFFSET_RESET, ENTITY): {"from_offset": 1000, "to_offset": 5000,
                                                       "skipped": 4000, "possible_loss": True,
                                                       "restore_to": 1000, "target": "latest"}})

    # Burrow #714: lag was zero all along, then the group jumped back.
    yield Scenario(
        "zero_lag_does_not_hide_a_rewind",
        commits((0, 10), (60, 20), (120, 30), (180, 20)),
        offsets=ends((0, 10, 0), (60, 20, 0), (120, 30, 0), (180, 40, 0)),
        members=members((0, 1), (180, 1)),
        rewind={"old_position": 30, "new_position": 20, "drops": 1, "active": True,
                "member_count": 1, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 10,
                "cause": "stale_offset_after_coordinator_move"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_offset_after_coordinator_move", Severity.HIGH,
            ActionKind.RESTORE_GROUP_OFFSETS)})

    yield Scenario(
        "recovered_rewind_is_reported_but_not_active",
        commits((0, 1000), (60, 2000), (120, 1500), (180, 2100)),
        offsets=ends((0, 1000, 0), (180, 2200, 0)), members=members((0, 2)), now_s=200,
        rewind={"old_position": 2000, "new_position": 1500, "drops": 1, "active": False,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 500,
                "cause": "stale_offset_after_coordinator_move"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_offset_after_coordinator_move", Severity.HIGH, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"active": False,
                                                        "recovered_ms": at(180),
                                                        "restore_to": None}})

    # Burrow's lag only moves at commits; the group stopped after the rewind, and the
    # end offsets show how far behind it now is.
    yield Scenario(
        "stopped_group_after_rewind_stays_active_against_end_offsets",
        commits((0, 1000), (60, 2000), (120, 500)),
        offsets=ends((0, 1100, 0), (120, 2100, 0), (590, 9000, 0)), members=members((0, 2)),
        rewind={"old_position": 2000, "new_position": 500, "drops": 1, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 1500,
                "cause": "stale_offset_after_coordinator_move"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_offset_after_coordinator_move", Severity.HIGH,
            ActionKind.RESTORE_GROUP_OFFSETS)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"lag_now": 8500, "active": True}})

    # An unclean election truncated the log under the group: its old position no longer
    # exists, so the drop back to the new end is not re-reading.
    yield Scenario(
        "truncated_old_position_is_not_counted_as_duplicates",
        commits((0, 4000), (60, 5000), (130, 4200)),
        offsets=ends((60, 5000, 0), (125, 4200, 0)), members=members((0, 2)),
        truncations=[LogTruncation("c1", 1, "orders", 2, at(120), 4200, 5000)],
        rewind={"old_position": 5000, "new_position": 4200, "drops": 1, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": True, "past_log_end": 800, "duplicates": 0,
                "cause": "auto_reset_after_out_of_range"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("auto_reset_after_out_of_range",
                                                          Severity.HIGH, ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"old_position_past_log_end": 800,
                                                        "truncation": {"event_ms": at(120),
                                                                       "broker": 1,
                                                                       "truncated_to": 4200,
                                                                       "high_watermark": 5000}}})

    # Seen in the demo once its quorum stayed up: the readers met the new leader's shorter
    # log and their rewind was committed 5.2 s before the old leader, restarted, logged
    # the truncation (more than the 5 s allowed for clock skew). The end offset had
    # already passed the old position again (the new leader takes writes), so only the
    # truncation can explain it.
    yield Scenario(
        "the_old_leaders_truncation_logged_after_the_readers_rewind_explains_it",
        commits((0, 28000), (60, 28545), (70, 28440)),
        offsets=ends((65, 28815, 0)), members=members((0, 1)), now_s=100,
        truncations=[LogTruncation("c1", 1, "orders", 2, at(75.2), 28120, 28545)],
        rewind={"old_position": 28545, "new_position": 28440, "drops": 1, "active": True,
                "member_count": 1, "admin_commit": False, "reset_event": False,
                "truncation": True, "past_log_end": 0, "duplicates": 105,
                "cause": "auto_reset_after_out_of_range"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("auto_reset_after_out_of_range",
                                                          Severity.HIGH, ActionKind.PAGE_HUMAN)})

    # Seen on a real 3-replica topic: followers log "Truncating partition ... due to local
    # high watermark 0" at creation and truncate to their high watermark after a leader
    # change. Neither removed anything a consumer read: a stale commit stays stale. Nor
    # does one that removed committed data but is farther than evidence_window_s away.
    yield Scenario(
        "follower_truncations_to_the_high_watermark_explain_no_rewind",
        commits((0, 1000), (60, 2000), (120, 1500)),
        offsets=ends((0, 1000, 0), (120, 2200, 0)), members=members((0, 2)), now_s=150,
        truncations=[LogTruncation("c1", 1, "orders", 2, at(-10), 900, 1000),
                     LogTruncation("c1", 2, "orders", 2, at(100), 0, None),
                     LogTruncation("c1", 3, "orders", 2, at(110), 2100, 2100)],
        rewind={"old_position": 2000, "new_position": 1500, "drops": 1, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 500,
                "cause": "stale_offset_after_coordinator_move"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_offset_after_coordinator_move", Severity.HIGH,
            ActionKind.RESTORE_GROUP_OFFSETS)})

    yield Scenario(
        "new_group_initial_reset_is_benign",
        commits((30, 0), (60, 700)),
        offsets=ends((0, 700, 0)), members=members((0, 1)),
        resets=[reset(10, ResetReason.NO_COMMITTED_OFFSET, to=0, target=ResetTarget.EARLIEST),
                reset(10, ResetReason.UNKNOWN, to=0, group="newcomer")])

    yield Scenario(
        "operator_moves_empty_group_forward",
        commits((0, 1000), (400, 9000)),
        offsets=ends((0, 1100, 0), (400, 9000, 0)),
        members=members((0, 2), (300, 0)),
        detections={(AnomalyType.OFFSET_RESET, ENTITY): ("operator_reset_forward",
                                                         Severity.WARNING, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_RESET, ENTITY): {"skipped": 8000, "target": "latest"}})

    # Flink-style committers use assign(): the group never has members, so "empty" at
    # the rewind proves no operator was involved.
    yield Scenario(
        "standalone_committer_rewind_is_not_called_operator_reset",
        commits((0, 1000), (60, 2000), (120, 1200)),
        offsets=ends((0, 2100, 0)), members=members((0, 0), (60, 0), (120, 0)),
        rewind={"old_position": 2000, "new_position": 1200, "drops": 1, "active": True,
                "member_count": 0, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 800, "cause": "unknown"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("unknown", Severity.WARNING,
                                                          ActionKind.PAGE_HUMAN)})

    yield Scenario(
        "deepening_rewind_is_one_rewind",
        commits((0, 1000), (60, 2000), (120, 1500), (180, 800), (240, 900)),
        offsets=ends((0, 2100, 0)), members=members((0, 2)),
        rewind={"old_position": 2000, "new_position": 800, "drops": 2, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 1200,
                "cause": "stale_offset_after_coordinator_move"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_offset_after_coordinator_move", Severity.HIGH,
            ActionKind.RESTORE_GROUP_OFFSETS)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"rewinds_seen": 1}})

    # A replay: the application sought back itself and committed from there.
    yield Scenario(
        "application_seek_replay_is_deliberate",
        STEADY + commits((305, 2000)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        resets=[reset(302, ResetReason.APPLICATION_SEEK, to=2000, target=ResetTarget.OFFSET)],
        rewind={"old_position": 5000, "new_position": 2000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "seek": True, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 3000,
                "cause": "operator_reset"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("operator_reset", Severity.INFO,
                                                          ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {
            "reset_event": {"event_ms": at(302), "client_id": "billing-1",
                            "reason": "application_seek", "from_offset": None,
                            "to_offset": 2000}}})

    yield Scenario("monotonic_commits_are_healthy", STEADY, offsets=ends((0, 5100, 0)),
                   members=ACTIVE)


SCENARIOS = list(scenarios())


def rule_results(a) -> dict:
    r = a.rewind
    return {"old_position": r.old_position, "new_position": r.new_position, "drops": r.drops,
            "active": r.active, "member_count": a.member_count, "admin_commit": a.admin_commit,
            "seek": a.seek is not None, "reset_event": a.reset_event is not None, "truncation": a.truncation is not None,
            "past_log_end": a.past_log_end, "duplicates": a.duplicates, "cause": a.cause}


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(s: Scenario):
    billing = [c for c in s.commits if c.group == "billing"]
    rewinds = find_rewinds(billing)
    if s.rewind is None:
        assert rewinds == []
    else:
        inputs = PartitionInputs(offsets=s.offsets, resets=pair_reset_events(s.resets, 5000),
                                 truncations=s.truncations)
        expected = {"seek": False, **s.rewind}
        assert rule_results(assess_rewind(rewinds[-1], inputs, s.members, CONFIG)) == expected

    detections = detect_offset_anomalies(s.commits, offsets=s.offsets, resets=s.resets,
                                         memberships=s.members, truncations=s.truncations,
                                         now_ms=at(s.now_s), config=CONFIG)
    got = {(d.type, d.entity): (d.cause, d.severity, d.suggested_action) for d in detections}
    assert got == s.detections
    by_key = {(d.type, d.entity): d for d in detections}
    for key, items in s.evidence.items():
        for k, v in items.items():
            assert by_key[key].evidence[k] == v, (key, k)
    for d in detections:
        assert {"group", "topic", "partition"} <= set(d.evidence)
        assert d.explanation.endswith(".")


def test_active_rewind_is_seen_until_now_and_recovered_one_until_recovery():
    active = detect_offset_anomalies(commits((0, 1000), (60, 2000), (120, 500)),
                                     memberships=members((0, 2)), now_ms=at(600))
    assert (active[0].first_seen_ms, active[0].last_seen_ms) == (at(120), at(600))
    recovered = detect_offset_anomalies(commits((0, 1000), (60, 2000), (120, 500), (180, 2000)),
                                        memberships=members((0, 2)), now_ms=at(600))
    assert (recovered[0].first_seen_ms, recovered[0].last_seen_ms) == (at(120), at(180))


def test_java_cause_and_position_lines_are_paired():
    cause = reset(100, ResetReason.OUT_OF_RANGE, frm=5000)
    position = reset(100.2, ResetReason.UNKNOWN, to=100)
    late = reset(200, ResetReason.UNKNOWN, to=300)
    paired = pair_reset_events([position, cause, late], 5000)
    assert [(e.reason, e.from_offset, e.to_offset, e.event_ms) for e in paired] == [
        (ResetReason.OUT_OF_RANGE, 5000, 100, at(100)),
        (ResetReason.UNKNOWN, None, 300, at(200)),
    ]


def test_small_drops_below_min_rewind_messages_are_ignored():
    cs = commits((0, 1000), (60, 995))
    assert find_rewinds(cs, min_messages=10) == []
    assert len(find_rewinds(cs, min_messages=1)) == 1


def test_groups_and_partitions_are_judged_apart():
    cs = (commits((0, 1000), (60, 2000), (120, 500), group="a")
          + commits((0, 1000), (60, 2000), (120, 2500), group="b")
          + [OffsetCommit("c1", "a", "orders", 3, off, at(t)) for t, off in ((0, 5), (60, 9))])
    got = {d.entity for d in detect_offset_anomalies(cs, now_ms=at(600))}
    assert got == {"group:a/orders-2"}


@pytest.mark.parametrize("kind,target,reason,expected", [
    ("offset_out_of_range", None, None, (ResetReason.OUT_OF_RANGE, ResetTarget.UNKNOWN)),
    ("truncation_detected", "explicit", None, (ResetReason.TRUNCATION, ResetTarget.OFFSET)),
    ("offset_reset", "explicit", "seek", (ResetReason.APPLICATION_SEEK, ResetTarget.OFFSET)),
    ("offset_reset", "latest",
     "fetch failed due to requested offset not available on the broker: Broker: Offset out of "
     "range", (ResetReason.OUT_OF_RANGE, ResetTarget.LATEST)),
    ("offset_reset", "explicit", None, (ResetReason.UNKNOWN, ResetTarget.OFFSET)),
    ("offset_reset", "earliest", None, (ResetReason.UNKNOWN, ResetTarget.EARLIEST)),
    ("offset_reset", "stored", None, (ResetReason.UNKNOWN, ResetTarget.OFFSET)),
], ids=["java_out_of_range_line", "java_truncation_line", "application_seek",
        "librdkafka_out_of_range_to_end", "java_position_line", "librdkafka_to_beginning",
        "librdkafka_to_stored"])
def test_silver_client_events_map_to_reasons_and_targets(kind, target, reason, expected):
    assert client_event_meaning(kind, target, reason) == expected
