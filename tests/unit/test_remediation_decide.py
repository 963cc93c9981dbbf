"""The decision step: a table of single-finding situations (which rule, which outcome, which
operation), then the scenarios that need history: rechecks, cooldowns, caps, repeats."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from core.findings import (
    ActionKind,
    AnomalyType,
    EntityKind,
    Finding,
    Severity,
    Status,
    broker_entity,
    client_entity,
    cluster_entity,
    group_partition_entity,
)
from remediation.actions import Action, ActionResult, Outcome, ResultStatus
from remediation.config import RemediationSection
from remediation.decide import actions_of, decide

NOW = 1_700_000_000_000
MIN = 60_000
ALL_ON = ["move_leadership", "cancel_reassignment", "restore_group_offsets", "page_human"]
LIVE = {"enabled_actions": ALL_ON, "dry_run": False}


def slow_broker(broker: int = 3, *, cause: str = "request_handlers_saturated",
                action: ActionKind = ActionKind.MOVE_LEADERSHIP, cluster: str = "c1",
                severity: Severity = Severity.HIGH, **kw: Any) -> Finding:
    return finding(f"slow-{cluster}-{broker}", AnomalyType.SLOW_BROKER, EntityKind.BROKER,
                   broker_entity(broker), cause, action, severity=severity, cluster=cluster,
                   evidence={"broker": broker, "role": "culprit"}, **kw)


def rewind(group: str = "app", partition: int = 0, *, old: int = 5000, new: int = 100,
           cause: str = "stale_process",
           action: ActionKind = ActionKind.RESTORE_GROUP_OFFSETS, restore_to: int | None = -1,
           **kw: Any) -> Finding:
    ev = {"group": group, "topic": "orders", "partition": partition, "old_position": old,
          "new_position": new, "restore_to": old if restore_to == -1 else restore_to}
    return finding(f"rewind-{group}-{partition}", AnomalyType.OFFSET_REWIND, EntityKind.GROUP,
                   group_partition_entity(group, "orders", partition), cause, action,
                   evidence=ev, **kw)


def finding(fid: str, type_: AnomalyType, kind: EntityKind, entity: str, cause: str,
            action: ActionKind, *, severity: Severity = Severity.HIGH, cluster: str = "c1",
            status: Status = Status.OPEN, evidence: dict | None = None) -> Finding:
    return Finding(finding_id=fid, cluster=cluster, type=type_, severity=severity,
                   entity_kind=kind, entity=entity, first_seen_ms=NOW - 5 * MIN,
                   last_seen_ms=NOW - MIN, status=status, evidence=evidence or {}, cause=cause,
                   explanation=f"{type_.value} on {entity}", suggested_action=action,
                   resolved_ms=NOW if status is Status.RESOLVED else None)


# --- one finding, no history -----------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    finding: Finding
    outcome: Outcome
    reason_has: str
    kind: ActionKind | None = None
    operation: dict | None = None
    config: dict = field(default_factory=lambda: dict(LIVE))
    sizes: dict = field(default_factory=lambda: {"c1": 10})


RESET_SKIPPED = finding(
    "reset-app-1", AnomalyType.OFFSET_RESET, EntityKind.GROUP,
    group_partition_entity("app", "orders", 1), "auto_reset_after_out_of_range",
    ActionKind.RESTORE_GROUP_OFFSETS,
    evidence={"group": "app", "topic": "orders", "partition": 1, "from_offset": 700,
              "to_offset": 900, "skipped": 200, "possible_loss": True, "restore_to": 700})

CASES = [
    Case("slow_broker_saturated_handlers_moves_leadership", slow_broker(3), Outcome.ACT,
         "broker 3 is slow", ActionKind.MOVE_LEADERSHIP,
         {"op": "reorder_and_elect", "broker": 3}),
    Case("slow_broker_slow_disk_moves_leadership", slow_broker(4, cause="local_disk_or_page_cache"),
         Outcome.ACT, "local_disk_or_page_cache", ActionKind.MOVE_LEADERSHIP),
    Case("defaults_disable_everything", slow_broker(3), Outcome.IGNORE,
         "move_leadership is disabled", config={}),
    Case("dry_run_by_default_once_enabled", slow_broker(3), Outcome.ACT, "(dry run)",
         ActionKind.MOVE_LEADERSHIP, config={"enabled_actions": ["move_leadership"]}),
    Case("slow_because_clients_read_slowly_detector_suggests_nothing",
         slow_broker(3, cause="client_slow_read", action=ActionKind.NONE), Outcome.IGNORE,
         "suggests no action"),
    Case("slow_client_is_the_clients_problem_nothing_is_done",
         finding("sc", AnomalyType.SLOW_CLIENT, EntityKind.CLIENT, client_entity("reader"),
                 "client_slow_read", ActionKind.NONE, severity=Severity.WARNING),
         Outcome.IGNORE, "suggests no action"),
    Case("slow_client_never_moves_leadership_even_if_suggested",
         finding("sc2", AnomalyType.SLOW_CLIENT, EntityKind.CLIENT, client_entity("reader"),
                 "client_slow_read", ActionKind.MOVE_LEADERSHIP, severity=Severity.WARNING),
         Outcome.IGNORE, "no remediation rule for slow_client"),
    Case("slow_because_of_the_network_even_if_move_was_suggested",
         slow_broker(3, cause="network_send_slow"), Outcome.IGNORE, "would not help"),
    Case("quota_throttling_is_not_a_broker_fault",
         slow_broker(3, cause="quota_throttled", action=ActionKind.NONE,
                     severity=Severity.INFO), Outcome.IGNORE, "suggests no action"),
    Case("slow_follower_pages_a_human",
         slow_broker(2, cause="slow_follower", action=ActionKind.PAGE_HUMAN), Outcome.ACT,
         "only a human", ActionKind.PAGE_HUMAN),
    Case("one_slow_broker_of_three_is_held_back_by_the_share", slow_broker(3),
         Outcome.RECHECK_LATER, "within_cluster_share", sizes={"c1": 3}),
    Case("cluster_wide_slowness_pages_and_moves_nothing",
         finding("cw", AnomalyType.CLUSTER_WIDE_SLOWNESS, EntityKind.CLUSTER,
                 cluster_entity("c1"), "cluster_wide_slowness", ActionKind.PAGE_HUMAN),
         Outcome.ACT, "page a human", ActionKind.PAGE_HUMAN),
    Case("cluster_entity_suggesting_a_move_is_refused_as_cluster_wide",
         finding("cw2", AnomalyType.SLOW_BROKER, EntityKind.CLUSTER, cluster_entity("c1"),
                 "request_handlers_saturated", ActionKind.MOVE_LEADERSHIP),
         Outcome.IGNORE, "names no broker"),
    Case("unclean_election_pages",
         finding("ue", AnomalyType.UNCLEAN_ELECTION, EntityKind.PARTITION, "orders-0",
                 "unclean_election", ActionKind.PAGE_HUMAN, severity=Severity.CRITICAL),
         Outcome.ACT, "lost data", ActionKind.PAGE_HUMAN),
    Case("unclean_election_with_paging_disabled_is_ignored_but_still_alerts",
         finding("ue", AnomalyType.UNCLEAN_ELECTION, EntityKind.PARTITION, "orders-0",
                 "unclean_election", ActionKind.PAGE_HUMAN, severity=Severity.CRITICAL),
         Outcome.IGNORE, "alert rule still pages", config={"enabled_actions": []}),
    Case("anything_critical_pages_even_if_a_fix_was_suggested",
         rewind(severity=Severity.CRITICAL), Outcome.ACT, "critical offset_rewind",
         ActionKind.PAGE_HUMAN),
    Case("stale_offset_rewind_restores_the_old_position", rewind(), Outcome.ACT,
         "restore the last good commit 5000", ActionKind.RESTORE_GROUP_OFFSETS,
         {"op": "restore_group_offsets", "group": "app",
          "partitions": [{"topic": "orders", "partition": 0, "offset": 5000,
                          "direction": "forward"}]}),
    Case("stale_offset_after_a_seen_coordinator_move_restores",
         rewind(cause="stale_offset_after_coordinator_move"), Outcome.ACT, "restore",
         ActionKind.RESTORE_GROUP_OFFSETS),
    Case("member_commit_pages_a_human_instead_of_undoing_a_possible_seek",
         rewind(cause="member_commit", action=ActionKind.PAGE_HUMAN, severity=Severity.WARNING,
                restore_to=None), Outcome.ACT, "only a human", ActionKind.PAGE_HUMAN),
    Case("application_seek_is_deliberate",
         rewind(cause="application_seek", action=ActionKind.NONE, severity=Severity.INFO,
                restore_to=None), Outcome.IGNORE, "suggests no action"),
    Case("spurious_auto_reset_rewind_restores",
         rewind(cause="auto_reset_after_out_of_range"), Outcome.ACT, "restore",
         ActionKind.RESTORE_GROUP_OFFSETS),
    Case("reset_that_skipped_unread_messages_restores_backwards", RESET_SKIPPED, Outcome.ACT,
         "restore the last good commit 700", ActionKind.RESTORE_GROUP_OFFSETS,
         {"op": "restore_group_offsets", "group": "app",
          "partitions": [{"topic": "orders", "partition": 1, "offset": 700,
                          "direction": "backward"}]}),
    Case("rewind_caused_by_truncation_pages",
         rewind(cause="auto_reset_after_out_of_range", action=ActionKind.PAGE_HUMAN,
                restore_to=None), Outcome.ACT, "only a human", ActionKind.PAGE_HUMAN),
    Case("operator_reset_is_deliberate",
         rewind(cause="operator_reset", action=ActionKind.NONE, severity=Severity.INFO,
                restore_to=None), Outcome.IGNORE, "suggests no action"),
    Case("rewind_without_a_restore_offset_in_its_evidence", rewind(restore_to=None),
         Outcome.IGNORE, "lacks group, topic, partition or restore_to"),
    Case("compaction_lag_suggesting_a_move_has_no_rule",
         finding("cl", AnomalyType.COMPACTION_LAG, EntityKind.BROKER, broker_entity(1),
                 "cleaner_dead", ActionKind.MOVE_LEADERSHIP, severity=Severity.WARNING),
         Outcome.IGNORE, "no remediation rule for compaction_lag"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_single_finding(case: Case):
    config = RemediationSection(**case.config)
    [d] = decide([case.finding], [], config, NOW, cluster_sizes=case.sizes)
    assert d.finding_id == case.finding.finding_id
    assert d.outcome is case.outcome, d.reason
    assert case.reason_has in d.reason, d.reason
    assert d.attempt == 0 and d.decided_ms == NOW
    if case.outcome is Outcome.ACT:
        a = d.action
        assert a is not None and a.kind is case.kind
        assert a.finding_id == case.finding.finding_id
        assert a.deadline_ms == NOW + config.deadline_ms
        assert a.dry_run is config.dry_run
        if case.operation is not None:
            assert dict(a.operation) == case.operation
    else:
        assert d.action is None
    if case.outcome is Outcome.RECHECK_LATER:
        assert d.recheck_at_ms >= NOW + config.recheck_after_ms


def test_move_carries_its_preconditions_and_the_implicated_share():
    # broker 7 is slow as a follower (a human must act) but still counts toward the share
    out = decide([slow_broker(3), slow_broker(7, cause="slow_follower",
                                               action=ActionKind.PAGE_HUMAN)],
                 [], RemediationSection(enabled_actions=["move_leadership"], dry_run=False),
                 NOW, cluster_sizes={"c1": 10})
    move = next(d for d in out if d.finding_id == "slow-c1-3")
    assert move.action.preconditions == {"broker_registered": 3,
                                         "no_reassignment_in_progress": True,
                                         "other_in_sync_replica": True,
                                         "implicated_brokers": 2}


def test_too_many_slow_brokers_at_once_defers_every_move():
    findings = [slow_broker(b) for b in (1, 2, 3)]
    out = decide(findings, [], RemediationSection(**LIVE), NOW, cluster_sizes={"c1": 10})
    assert {d.outcome for d in out} == {Outcome.RECHECK_LATER}
    assert all("3 of 10" in d.reason for d in out)


# --- scenarios with history ------------------------------------------------------------

def _live(**kw: Any) -> RemediationSection:
    return RemediationSection(**{**LIVE, **kw})


def test_one_action_at_a_time_the_worst_finding_goes_first():
    warn, high = slow_broker(1, severity=Severity.WARNING), slow_broker(2)
    out = {d.finding_id: d for d in decide([warn, high], [], _live(), NOW,
                                           cluster_sizes={"c1": 10})}
    assert out[high.finding_id].outcome is Outcome.ACT
    assert out[warn.finding_id].outcome is Outcome.RECHECK_LATER
    assert "nothing_in_flight" in out[warn.finding_id].reason
    assert out[warn.finding_id].recheck_at_ms == NOW + _live().recheck_after_ms


def test_each_cluster_has_its_own_action_in_flight():
    out = decide([slow_broker(1, cluster="c1"), slow_broker(1, cluster="c2")], [], _live(),
                 NOW, cluster_sizes={"c1": 10, "c2": 10})
    assert [d.outcome for d in out] == [Outcome.ACT, Outcome.ACT]


def test_an_unchanged_finding_is_not_decided_again():
    f = slow_broker(3)
    first = decide([f], [], _live(), NOW)
    later = dataclasses.replace(f, last_seen_ms=NOW + 5 * MIN)
    assert decide([later], first, _live(), NOW + 5 * MIN) == []


def test_rerunning_the_same_step_gives_the_same_keys_and_action_ids():
    f = [slow_broker(3), rewind()]
    a, b = decide(f, [], _live(), NOW), decide(f, [], _live(), NOW)
    assert a == b
    assert [x.to_json() for x in actions_of(a)] == [x.to_json() for x in actions_of(b)]


def test_a_changed_finding_is_decided_again():
    f = slow_broker(3, severity=Severity.WARNING)
    first = decide([f], [], RemediationSection(), NOW)
    assert first[0].outcome is Outcome.IGNORE
    worse = dataclasses.replace(f, severity=Severity.HIGH)
    [d] = decide([worse], first, RemediationSection(), NOW + MIN)
    assert d.fingerprint != first[0].fingerprint and d.attempt == 0
    assert d.decision_key != first[0].decision_key


def test_enabling_an_action_kind_re_decides_open_findings():
    f = slow_broker(3)
    [off] = decide([f], [], RemediationSection(), NOW)
    assert off.outcome is Outcome.IGNORE
    [on] = decide([f], [off], _live(), NOW + MIN, cluster_sizes={"c1": 10})
    assert on.outcome is Outcome.ACT


def test_switching_dry_run_off_acts_under_a_new_action_id():
    f = slow_broker(3)
    dry = _live(dry_run=True)
    [rehearsal] = decide([f], [], dry, NOW, cluster_sizes={"c1": 10})
    assert rehearsal.action.dry_run
    [real] = decide([f], [rehearsal], _live(), NOW + MIN, cluster_sizes={"c1": 10})
    assert real.outcome is Outcome.ACT and not real.action.dry_run
    assert real.action.action_id != rehearsal.action.action_id


def test_a_dry_run_neither_blocks_nor_counts():
    dry = _live(dry_run=True, max_actions_per_hour=1)
    out = decide([slow_broker(1), slow_broker(2)], [], dry, NOW, cluster_sizes={"c1": 10})
    assert [d.outcome for d in out] == [Outcome.ACT, Outcome.ACT]


def test_a_recheck_is_decided_again_when_due_and_not_before():
    a, b = slow_broker(1), slow_broker(2, severity=Severity.WARNING)
    first = decide([a, b], [], _live(), NOW, cluster_sizes={"c1": 10})
    held = next(d for d in first if d.finding_id == b.finding_id)
    assert held.outcome is Outcome.RECHECK_LATER
    assert decide([a, b], first, _live(), held.recheck_at_ms - 1,
                  cluster_sizes={"c1": 10}) == []
    done = ActionResult(action_id=first[0].action_id, cluster="c1", kind="move_leadership",
                        target="broker:1", finding_id=a.finding_id, status=ResultStatus.DONE,
                        reason="moved", started_ms=NOW, finished_ms=NOW + 5000)
    [again] = decide([a, b], first, _live(), held.recheck_at_ms, results=[done],
                     cluster_sizes={"c1": 10})
    assert again.finding_id == b.finding_id and again.outcome is Outcome.ACT
    assert again.attempt == 1 and again.decision_key != held.decision_key


def test_an_act_decision_without_a_result_is_in_flight_until_its_deadline():
    first = decide([slow_broker(1)], [], _live(), NOW, cluster_sizes={"c1": 10})
    deadline = first[0].action.deadline_ms
    [held] = decide([slow_broker(1), slow_broker(2)], first, _live(), deadline,
                    cluster_sizes={"c1": 10})
    assert held.outcome is Outcome.RECHECK_LATER and "nothing_in_flight" in held.reason
    [free] = decide([slow_broker(1), slow_broker(2)], first, _live(), deadline + 1,
                    cluster_sizes={"c1": 10})
    assert free.outcome is Outcome.ACT


def _done(target: str, minutes_ago: float, kind: str = "move_leadership",
          status: ResultStatus = ResultStatus.DONE, dry_run: bool = False) -> ActionResult:
    t = int(NOW - minutes_ago * MIN)
    return ActionResult(action_id=f"r-{target}-{minutes_ago}", cluster="c1", kind=kind,
                        target=target, finding_id="old", status=status, reason="",
                        started_ms=t, finished_ms=t + 5000, dry_run=dry_run)


def test_the_same_broker_again_within_the_cooldown_waits_for_it_to_end():
    [d] = decide([slow_broker(3)], [], _live(), NOW, results=[_done("broker:3", 10)],
                 cluster_sizes={"c1": 10})
    assert d.outcome is Outcome.RECHECK_LATER and "cooled_down" in d.reason
    assert d.recheck_at_ms == NOW - 10 * MIN + _live().cooldown_ms


def test_a_failed_action_counts_for_the_cooldown_a_skipped_one_does_not():
    failed = decide([slow_broker(3)], [], _live(), NOW,
                    results=[_done("broker:3", 10, status=ResultStatus.FAILED)])
    assert failed[0].outcome is Outcome.RECHECK_LATER
    skipped = decide([slow_broker(3)], [], _live(), NOW,
                     results=[_done("broker:3", 10, status=ResultStatus.SKIPPED)])
    assert skipped[0].outcome is Outcome.ACT


def test_a_malformed_queue_message_in_the_results_blocks_nothing():
    bad = dataclasses.replace(_done("unknown", 1, kind="unknown", status=ResultStatus.FAILED),
                              action_id="malformed:abc")
    [d] = decide([slow_broker(3)], [], _live(), NOW, results=[bad], cluster_sizes={"c1": 10})
    assert d.outcome is Outcome.ACT


def test_the_hourly_cap_defers_until_an_action_leaves_the_hour():
    results = [_done("broker:1", 50), _done("broker:2", 40), _done("group:x", 30,
                                                                   "restore_group_offsets")]
    [d] = decide([slow_broker(3)], [], _live(), NOW, results=results, cluster_sizes={"c1": 10})
    assert d.outcome is Outcome.RECHECK_LATER and "under_hourly_cap" in d.reason
    assert d.recheck_at_ms == NOW - 50 * MIN + 3600_000


def test_a_resolved_finding_gets_one_last_decision_only_if_it_had_one():
    f = slow_broker(3)
    first = decide([f], [], _live(), NOW, cluster_sizes={"c1": 10})
    gone = dataclasses.replace(f, status=Status.RESOLVED, resolved_ms=NOW + MIN)
    [d] = decide([gone], first, _live(), NOW + MIN)
    assert d.outcome is Outcome.IGNORE and "resolved" in d.reason
    assert decide([gone], first + [d], _live(), NOW + 2 * MIN) == []
    assert decide([dataclasses.replace(slow_broker(4), status=Status.RESOLVED)], [], _live(),
                  NOW) == []


def test_rewound_partitions_of_one_group_become_one_action():
    fs = [rewind("app", p, old=1000 + p) for p in (2, 0, 1)] + [rewind("other", 0)]
    out = decide(fs, [], _live(), NOW)
    acts = actions_of(out)
    app = next(a for a in acts if a.target == "group:app")
    assert [x["partition"] for x in app.operation["partitions"]] == [0, 1, 2]
    assert [x["offset"] for x in app.operation["partitions"]] == [1000, 1001, 1002]
    assert sorted(app.finding_ids) == sorted(f.finding_id for f in fs[:3])
    assert {d.action_id for d in out if d.entity.startswith("group:app/")} == {app.action_id}
    # one action in flight per cluster: the second group waits
    other = next(d for d in out if d.entity.startswith("group:other/"))
    assert other.outcome is Outcome.RECHECK_LATER


def test_two_findings_restoring_one_partition_differently_keep_the_worse_one():
    rew = rewind("app", 0, old=5000, severity=Severity.HIGH)
    reset = dataclasses.replace(RESET_SKIPPED, finding_id="reset-app-0", severity=Severity.WARNING,
                                entity=group_partition_entity("app", "orders", 0),
                                evidence={**RESET_SKIPPED.evidence, "partition": 0})
    out = {d.finding_id: d for d in decide([reset, rew], [], _live(), NOW)}
    assert out[rew.finding_id].outcome is Outcome.ACT
    assert out["reset-app-0"].outcome is Outcome.IGNORE
    assert "conflicts with finding" in out["reset-app-0"].reason


def test_actions_round_trip_through_their_queue_message():
    [d] = decide([rewind()], [], _live(), NOW)
    text = d.action.to_json()
    assert Action.from_json(text) == d.action
    assert Action.from_json(text.encode()).action_id == d.action.action_id


@pytest.mark.parametrize("mutate,error", [
    (lambda m: m.pop("operation"), "missing field operation"),
    (lambda m: m.update(kind="reboot_everything"), "wrong type|not a valid"),
    (lambda m: m.update(version=99), "unsupported queue message version"),
    (lambda m: m["operation"].update(group="someone-else"), "does not match its content"),
    (lambda m: m.update(dry_run="no"), "wrong type"),
], ids=["missing_operation", "unknown_kind", "future_version", "tampered_operation",
        "dry_run_not_a_bool"])
def test_a_malformed_queue_message_is_refused_with_the_reason(mutate, error):
    import json
    import re

    [d] = decide([rewind()], [], _live(), NOW)
    msg = json.loads(d.action.to_json())
    mutate(msg)
    with pytest.raises(ValueError) as e:
        Action.from_json(json.dumps(msg))
    assert re.search(error, str(e.value)), str(e.value)
    with pytest.raises(ValueError, match="not JSON"):
        Action.from_json(b"\xff{")


def test_decisions_round_trip_through_their_table_row():
    out = decide([rewind(), slow_broker(3)], [], _live(), NOW, cluster_sizes={"c1": 3})
    from remediation.actions import Decision

    assert [Decision.from_row(d.to_row()) for d in out] == out
