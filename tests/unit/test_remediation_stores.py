"""The JSON-lines decision and result stores: upsert by key, durable lines, torn lines."""

from __future__ import annotations

from core.findings import ActionKind, AnomalyType, EntityKind, Finding, Severity, Status
from remediation.actions import ActionResult, Outcome, ResultStatus
from remediation.config import RemediationSection
from remediation.decide import decide
from remediation.stores import JsonLinesDecisionStore, JsonLinesResultStore

NOW = 1_700_000_000_000


def _finding(fid: str, broker: int) -> Finding:
    return Finding(finding_id=fid, cluster="c1", type=AnomalyType.SLOW_BROKER,
                   severity=Severity.HIGH, entity_kind=EntityKind.BROKER,
                   entity=f"broker:{broker}", first_seen_ms=NOW - 1000, last_seen_ms=NOW,
                   status=Status.OPEN, evidence={}, cause="local_disk_or_page_cache",
                   explanation="slow", suggested_action=ActionKind.MOVE_LEADERSHIP)


def _result(action_id: str, status: ResultStatus, started: int, cluster: str = "c1",
            finished: int | None = None) -> ActionResult:
    return ActionResult(action_id=action_id, cluster=cluster, kind="move_leadership",
                        target="broker:1", finding_id="f", status=status, reason=status.value,
                        started_ms=started, finished_ms=finished, details={"n": 1})


def test_a_result_is_upserted_by_action_id(tmp_path):
    store = JsonLinesResultStore(tmp_path / "results.jsonl")
    assert store.get("a1") is None
    store.put(_result("a1", ResultStatus.RUNNING, NOW))
    store.put(_result("a1", ResultStatus.DONE, NOW, finished=NOW + 10))
    store.put(_result("a2", ResultStatus.SKIPPED, NOW - 7200_000, finished=NOW - 7200_000))
    store.put(_result("a3", ResultStatus.DONE, NOW, cluster="c2", finished=NOW))
    again = JsonLinesResultStore(tmp_path / "results.jsonl")   # a restarted executor
    assert again.get("a1").status is ResultStatus.DONE
    assert again.get("a1").details == {"n": 1}
    assert {r.action_id for r in again.recent(NOW - 3600_000)} == {"a1", "a3"}
    assert {r.action_id for r in again.recent(NOW - 3600_000, "c1")} == {"a1"}


def test_a_torn_last_line_is_skipped_not_fatal(tmp_path):
    path = tmp_path / "results.jsonl"
    store = JsonLinesResultStore(path)
    store.put(_result("a1", ResultStatus.DONE, NOW, finished=NOW))
    with open(path, "a") as f:
        f.write('{"action_id": "a2", "sta')
    assert JsonLinesResultStore(path).get("a1").status is ResultStatus.DONE
    assert JsonLinesResultStore(path).get("a2") is None


def test_recording_the_same_decisions_twice_keeps_one_row_per_key(tmp_path):
    store = JsonLinesDecisionStore(tmp_path / "decisions.jsonl")
    config = RemediationSection(enabled_actions=["move_leadership"], dry_run=False)
    ds = decide([_finding("f1", 1), _finding("f2", 2)], [], config, NOW,
                cluster_sizes={"c1": 10})
    store.record(ds)
    store.record(ds)
    loaded = store.load(finding_ids=["f1"], since_ms=NOW + 1)
    assert [d.finding_id for d in loaded] == ["f1"]
    assert loaded[0] == ds[0] and loaded[0].outcome is Outcome.ACT
    assert len(store.load(finding_ids=[], since_ms=NOW)) == 2
