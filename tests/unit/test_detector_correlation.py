"""Correlation on named scenarios: which findings link, which incident they form, and which
finding is its root. The first scenario runs the whole pure chain: detectors, lifecycle,
correlation."""

from __future__ import annotations

import pytest

from core.findings import ActionKind, AnomalyType, Detection, EntityKind, Severity, update_findings
from detectors.correlation import CorrelationSection, causal_links, correlate
from detectors.lost_range import UncleanElection
from detectors.offset_rewind import detect_offset_anomalies
from detectors.partition_signals import (
    ClientOffsetReset,
    GroupMembership,
    LogTruncation,
    OffsetCommit,
    PartitionOffsets,
    ResetReason,
    ResetTarget,
)
from detectors.unclean_election import detect_unclean_elections

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
CONFIG = CorrelationSection()


def at(seconds: float) -> int:
    return T0 + int(seconds * 1000)


def test_chain_links_into_one_incident():
    # orders-2: broker 1 led with offsets up to 1000 acknowledged; it died and broker 3,
    # out of sync at 900, was elected uncleanly at t=100. Group billing had read to 950:
    # its position was out of range, it reset to the new end (900) and committed it. At
    # t=700 broker 1 came back and truncated its log to 900.
    election = UncleanElection("c1", "orders", 2, at(100), old_leader=1, new_leader=3)
    truncation = LogTruncation("c1", 1, "orders", 2, at(700), 900, 1000)
    commits = [OffsetCommit("c1", "billing", "orders", 2, o, at(t))
               for t, o in ((30, 800), (95, 950), (110, 900))]
    offsets = [PartitionOffsets("c1", "orders", 2, at(t), end, 0)
               for t, end in ((90, 1000), (102, 900))]
    resets = [ClientOffsetReset("c1", "orders", 2, at(105), "billing", "billing-1", 950, None,
                                ResetTarget.LATEST, ResetReason.OUT_OF_RANGE)]
    members = [GroupMembership("c1", "billing", at(0), 2)]
    now = at(720)
    detections = (detect_unclean_elections([election], truncations=[truncation], offsets=offsets,
                                           commits=commits)
                  + detect_offset_anomalies(commits, offsets=offsets, resets=resets,
                                            memberships=members, truncations=[truncation],
                                            now_ms=now))
    findings = correlate(update_findings([], detections, now_ms=now))

    by_type = {f.type: f for f in findings}
    assert set(by_type) == {AnomalyType.UNCLEAN_ELECTION, AnomalyType.LOG_TRUNCATION,
                            AnomalyType.OFFSET_RESET, AnomalyType.OFFSET_REWIND}
    root = by_type[AnomalyType.UNCLEAN_ELECTION]
    assert root.is_root_cause
    assert {f.incident_id for f in findings} == {root.finding_id}
    ids = {t: f.finding_id for t, f in by_type.items()}
    assert set(root.related) == {ids[AnomalyType.LOG_TRUNCATION], ids[AnomalyType.OFFSET_RESET],
                                 ids[AnomalyType.OFFSET_REWIND]}
    assert set(by_type[AnomalyType.OFFSET_REWIND].related) == {
        ids[AnomalyType.UNCLEAN_ELECTION], ids[AnomalyType.OFFSET_RESET]}
    assert by_type[AnomalyType.OFFSET_REWIND].cause == "auto_reset_after_out_of_range"
    assert by_type[AnomalyType.UNCLEAN_ELECTION].evidence["groups_inside"] == [
        {"group": "billing", "committed_offset": 950}]
    # Running it again changes nothing: ids and incidents are deterministic.
    again = correlate(update_findings(findings, detections, now_ms=now))
    assert sorted((f.finding_id, f.incident_id) for f in again) == sorted(
        (f.finding_id, f.incident_id) for f in findings)


def finding(type, entity, first_s, *, cause="x", last_s=None, **evidence):
    d = Detection("c1", type, Severity.HIGH, EntityKind.PARTITION, entity, at(first_s),
                  at(first_s if last_s is None else last_s), cause, "Something happened.",
                  ActionKind.PAGE_HUMAN, evidence)
    [f] = update_findings([], [d], now_ms=d.last_seen_ms)
    return f


def on(topic, partition, **more):
    return {"topic": topic, "partition": partition, **more}


ELECTION = finding(AnomalyType.UNCLEAN_ELECTION, "orders-2", 100, **on("orders", 2))
METER_ONLY = finding(AnomalyType.UNCLEAN_ELECTION, "cluster:c1", 120, partitions="unknown",
                     candidate_partitions=["payments-0"])
TRUNCATION = finding(AnomalyType.LOG_TRUNCATION, "payments-0", 300, **on("payments", 0))
RESET_PAYMENTS = finding(AnomalyType.OFFSET_RESET, "group:ledger/payments-0", 310,
                         **on("payments", 0, group="ledger"))
REWIND_OTHER_PARTITION = finding(AnomalyType.OFFSET_REWIND, "group:billing/orders-3", 110,
                                 cause="auto_reset_after_out_of_range",
                                 **on("orders", 3, group="billing"))
OPERATOR_REWIND = finding(AnomalyType.OFFSET_REWIND, "group:billing/orders-2", 130,
                          cause="operator_reset", **on("orders", 2, group="billing"))
LATE_REWIND = finding(AnomalyType.OFFSET_REWIND, "group:search/orders-2", 100 + 7200,
                      cause="unknown", **on("orders", 2, group="search"))
EARLY_REWIND = finding(AnomalyType.OFFSET_REWIND, "group:audit/orders-2", 100 - 600,
                       cause="unknown", **on("orders", 2, group="audit"))
REWIND_MINUTE_BEFORE = finding(AnomalyType.OFFSET_REWIND, "group:audit/orders-2", 100 - 60,
                               cause="member_commit", **on("orders", 2, group="audit"))
REWIND_SKEWED = finding(AnomalyType.OFFSET_REWIND, "group:ledger/orders-2", 100 - 2,
                        cause="auto_reset_after_out_of_range", **on("orders", 2, group="ledger"))
RESET_OTHER_GROUP = finding(AnomalyType.OFFSET_RESET, "group:a/orders-3", 105,
                            **on("orders", 3, group="a"))


def slow(broker, role, first_s=0, last_s=60, **evidence):
    return finding(AnomalyType.SLOW_BROKER, f"broker:{broker}", first_s, last_s=last_s,
                   role=role, broker=broker, **evidence)


FOLLOWER = slow(3, "culprit")
VICTIM_1 = slow(1, "victim", slow_follower="broker:3")
VICTIM_2 = slow(2, "victim", slow_follower="broker:3")
VICTIM_OF_4 = slow(5, "victim", slow_follower="broker:4")
VICTIM_LONG_AFTER = slow(6, "victim", first_s=3600, last_s=3660, slow_follower="broker:3")


@pytest.mark.parametrize("findings,incidents,root_of", [
    ([ELECTION, REWIND_OTHER_PARTITION], [], []),
    ([ELECTION, OPERATOR_REWIND], [], []),
    ([ELECTION, LATE_REWIND, EARLY_REWIND], [], []),
    ([METER_ONLY, TRUNCATION, RESET_PAYMENTS], [[METER_ONLY, TRUNCATION, RESET_PAYMENTS]],
     [(METER_ONLY, METER_ONLY), (RESET_PAYMENTS, METER_ONLY)]),
    ([RESET_OTHER_GROUP, REWIND_OTHER_PARTITION], [], []),
    ([FOLLOWER, VICTIM_1, VICTIM_2, VICTIM_OF_4, VICTIM_LONG_AFTER],
     [[FOLLOWER, VICTIM_1, VICTIM_2]], [(VICTIM_2, FOLLOWER)]),
    ([ELECTION], [], []),
    ([ELECTION, REWIND_MINUTE_BEFORE], [], []),
    ([ELECTION, REWIND_SKEWED], [[ELECTION, REWIND_SKEWED]], [(REWIND_SKEWED, ELECTION)]),
], ids=["unrelated_partitions_stay_apart", "operator_reset_is_not_blamed_on_data_loss",
        "outside_the_time_window_is_not_an_effect",
        "meter_only_election_links_through_its_candidate_truncation",
        "reset_of_another_group_does_not_explain_a_rewind",
        "slow_follower_links_the_leaders_it_holds_back", "lone_finding_has_no_incident",
        "rewind_a_minute_before_a_logged_election_is_not_its_effect",
        "rewind_seconds_before_a_logged_election_is_clock_skew"])
def test_incidents(findings, incidents, root_of):
    got = correlate(findings, CONFIG)
    by_id = {f.finding_id: f for f in got}
    groups: dict[str, set[str]] = {}
    for f in got:
        if f.incident_id is not None:
            groups.setdefault(f.incident_id, set()).add(f.finding_id)
        else:
            assert f.related == ()
    assert sorted(map(sorted, groups.values())) == sorted(
        sorted(f.finding_id for f in incident) for incident in incidents)
    for member, root in root_of:
        assert by_id[member.finding_id].incident_id == root.finding_id
        assert by_id[root.finding_id].is_root_cause


def test_links_name_the_rule():
    assert causal_links([FOLLOWER, VICTIM_1], CONFIG) == [
        (FOLLOWER.finding_id, VICTIM_1.finding_id, "slow_follower_explains_victim")]
    assert causal_links([METER_ONLY, TRUNCATION], CONFIG) == [
        (METER_ONLY.finding_id, TRUNCATION.finding_id, "election_explains_truncation")]


def test_one_election_and_a_thousand_groups_stays_cheap():
    def group_detection(type, i, first_s, **more):
        return Detection("c1", type, Severity.HIGH, EntityKind.GROUP, f"group:g{i}/orders-2",
                         at(first_s), at(first_s), "auto_reset_after_out_of_range",
                         "Something happened.", ActionKind.PAGE_HUMAN,
                         on("orders", 2, group=f"g{i}", **more))

    detections = ([group_detection(AnomalyType.OFFSET_REWIND, i, 110) for i in range(1000)]
                  + [group_detection(AnomalyType.OFFSET_RESET, i, 105) for i in range(1000)])
    findings = update_findings([ELECTION], detections, now_ms=at(120))
    got = correlate(findings, CONFIG)
    assert {f.incident_id for f in got} == {ELECTION.finding_id}
