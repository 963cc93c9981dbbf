"""gold.remediation_decisions and gold.remediation_results on real Delta: MERGE by key, so a
re-run decision step or a redelivered action rewrites its row instead of adding one."""

from __future__ import annotations

from core.findings import (
    ActionKind,
    AnomalyType,
    EntityKind,
    Finding,
    Severity,
    Status,
    group_partition_entity,
)
from infra.lake import Lake, register_tables
from remediation.actions import ActionResult, Outcome, ResultStatus
from remediation.config import RemediationSection
from remediation.decide import decide
from remediation.delta_tables import DeltaDecisionStore, DeltaResultStore
from remediation.queue import DecisionStep

NOW = 1_700_000_000_000
CONFIG = RemediationSection(enabled_actions=["restore_group_offsets"], dry_run=False)


def _rewind(group: str, partition: int) -> Finding:
    return Finding(
        finding_id=f"rw-{group}-{partition}", cluster="c1", type=AnomalyType.OFFSET_REWIND,
        severity=Severity.HIGH, entity_kind=EntityKind.GROUP,
        entity=group_partition_entity(group, "orders", partition), first_seen_ms=NOW - 60_000,
        last_seen_ms=NOW, status=Status.OPEN, cause="stale_process",
        explanation="rewound", suggested_action=ActionKind.RESTORE_GROUP_OFFSETS,
        evidence={"group": group, "topic": "orders", "partition": partition,
                  "old_position": 900, "new_position": 10, "restore_to": 900})


class _Published:
    def __init__(self):
        self.actions = []

    def publish(self, actions):
        self.actions.extend(actions)


def test_decisions_merge_on_their_key(spark, tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    store = DeltaDecisionStore(spark, lake)
    assert store.load(finding_ids=["x"], since_ms=0) == []
    findings = [_rewind("app", 0), _rewind("app", 1), _rewind("billing", 0)]
    decisions = decide(findings, [], CONFIG, NOW)
    store.record(decisions)
    store.record(decisions)               # a re-run step writes the same keys
    path = lake.table("gold", "remediation_decisions")
    assert spark.read.format("delta").load(path).count() == 3
    loaded = store.load(finding_ids=["rw-app-0"], since_ms=NOW + 1)
    assert loaded == [d for d in decisions if d.finding_id == "rw-app-0"]
    assert sorted(d.outcome for d in store.load(finding_ids=[], since_ms=NOW)) == sorted(
        d.outcome for d in decisions)
    assert "gold.remediation_decisions" in register_tables(spark, lake)
    acts = spark.sql("SELECT count(*) AS n FROM gold.remediation_decisions "
                     "WHERE outcome = 'act'").first()["n"]
    assert acts == sum(d.outcome is Outcome.ACT for d in decisions)


def test_the_decision_step_reads_back_what_it_recorded(spark, tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    published = _Published()
    step = DecisionStep(CONFIG, published, DeltaDecisionStore(spark, lake),
                        DeltaResultStore(spark, lake))
    first = step.run([_rewind("app", 0)], NOW)
    assert [d.outcome for d in first] == [Outcome.ACT] and len(published.actions) == 1
    assert step.run([_rewind("app", 0)], NOW + 60_000) == []   # unchanged: not decided again
    assert len(published.actions) == 1


def test_results_merge_on_action_id(spark, tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    store = DeltaResultStore(spark, lake)
    assert store.get("a1") is None and store.recent(0) == []

    def result(aid, status, started, cluster="c1", finished=None):
        return ActionResult(action_id=aid, cluster=cluster, kind="move_leadership",
                            target="broker:2", finding_id="f", status=status,
                            reason=status.value, started_ms=started, finished_ms=finished,
                            details={"plan": {"broker": 2}})

    store.put(result("a1", ResultStatus.RUNNING, NOW))
    store.put(result("a1", ResultStatus.DONE, NOW, finished=NOW + 5000))
    store.put(result("a2", ResultStatus.SKIPPED, NOW - 7_200_000, finished=NOW - 7_200_000))
    store.put(result("a3", ResultStatus.DONE, NOW, cluster="c2", finished=NOW))
    path = lake.table("gold", "remediation_results")
    assert spark.read.format("delta").load(path).count() == 3
    a1 = store.get("a1")
    assert a1.status is ResultStatus.DONE and a1.details == {"plan": {"broker": 2}}
    assert {r.action_id for r in store.recent(NOW - 3_600_000)} == {"a1", "a3"}
    assert [r.action_id for r in store.recent(NOW - 3_600_000, "c1")] == ["a1"]
