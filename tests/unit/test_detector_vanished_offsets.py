"""Vanished offsets (detectors/vanished_offsets.py) on named scenarios: a group's offsets
removed while it was behind is a finding before the group comes back; removed with their
topic, or while caught up, it is not. Group "billing" reads orders-2."""

from __future__ import annotations

import pytest

from core.findings import ActionKind, AnomalyType, Severity
from detectors.offset_rewind import detect_offset_anomalies
from detectors.partition_signals import OffsetCommit, PartitionOffsets
from detectors.vanished_offsets import OffsetRemoval, vanished_positions

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
ENTITY = "group:billing/orders-2"


def at(s: float) -> int:
    return T0 + int(s * 1000)


def commits(*pairs):
    return [OffsetCommit("c1", "billing", "orders", 2, off, at(t), source_partition=7,
                         source_offset=i) for i, (t, off) in enumerate(pairs)]


def samples(*triples):
    """(seconds, log start, end) -> offsets samples of orders-2."""
    return [PartitionOffsets("c1", "orders", 2, at(t), end, start) for t, start, end in triples]


REMOVED = OffsetRemoval("c1", "billing", "orders", 2, at(60), position=1000,
                        position_ms=at(30))


def detect(removals=(REMOVED,), offsets=(), commit_rows=(), now=90):
    return detect_offset_anomalies(commit_rows, offsets=offsets, removals=removals,
                                   now_ms=at(now))


def test_offsets_deleted_while_behind_are_a_finding_before_the_group_comes_back():
    [d] = detect(offsets=samples((50, 0, 1400), (70, 0, 1500)),
                 commit_rows=commits((20, 900), (30, 1000)))
    assert (d.type, d.entity, d.severity, d.cause) == (
        AnomalyType.OFFSET_REWIND, ENTITY, Severity.WARNING, "unknown")
    assert d.suggested_action is ActionKind.PAGE_HUMAN
    assert d.evidence["behind"] == 400 and d.evidence["read_again_if_earliest"] == 1000
    assert d.evidence["restore_to"] == 1000 and d.evidence["active"] is True
    assert d.first_seen_ms == at(60) and d.last_seen_ms == at(90)
    assert "re-reads 1000 messages" in d.explanation and "skips the 400" in d.explanation


def test_the_requests_around_the_removal_tell_deleted_from_expired():
    """The tombstones are the same; a DeleteGroups or OffsetDelete request near them means
    deleted, watched requests with none means the coordinator expired them itself."""
    def with_requests(n):
        return [OffsetRemoval("c1", "billing", "orders", 2, at(60), position=1000,
                              delete_requests_near=n)]
    lake = samples((50, 0, 1400), (70, 0, 1500))
    assert [d.cause for d in detect(with_requests(1), lake)] == ["offsets_deleted"]
    assert [d.cause for d in detect(with_requests(0), lake)] == ["offsets_expired"]
    assert [d.cause for d in detect(with_requests(None), lake)] == ["unknown"]
    assert "expired while" in detect(with_requests(0), lake)[0].explanation


def test_a_caught_up_group_or_one_removed_with_its_topic_is_no_finding():
    assert detect(offsets=samples((50, 0, 1000), (70, 0, 1000))) == []
    # the topic went: no sample of the partition at or after the removal
    assert detect(offsets=samples((40, 0, 1400), (50, 0, 1400))) == []
    assert detect(offsets=()) == []
    # no position known before the tombstone: nothing to compare
    unknown = OffsetRemoval("c1", "billing", "orders", 2, at(60), position=None)
    assert detect(removals=[unknown], offsets=samples((50, 0, 1400), (70, 0, 1500))) == []


def test_the_restart_below_the_old_position_is_this_finding_not_a_second_rewind():
    back = commits((20, 900), (30, 1000), (75, 100), (80, 1200))
    [d] = detect(offsets=samples((50, 0, 1400), (70, 0, 1500)), commit_rows=back)
    assert d.cause == "unknown" and d.evidence["came_back_offset"] == 100
    assert d.evidence["active"] is False and d.last_seen_ms == at(80)
    assert "came back at offset 100, 900 messages before" in d.explanation


def test_a_fast_reader_past_its_old_position_at_its_first_commit_is_still_found():
    back = commits((20, 900), (30, 1000), (75, 1450))
    [d] = detect(offsets=samples((50, 0, 1400), (70, 0, 1500)), commit_rows=back)
    assert d.evidence["came_back_offset"] == 1450 and d.evidence["active"] is False
    assert "re-read up to 1000" in d.explanation


def test_a_rewind_after_the_group_came_back_is_reported_as_that_rewind():
    back = commits((20, 900), (30, 1000), (75, 1450), (85, 1460), (88, 1300))
    [d] = detect(offsets=samples((50, 0, 1400), (70, 0, 1500)), commit_rows=back, now=200)
    assert d.evidence["old_position"] == 1460 and d.evidence["new_position"] == 1300


def test_the_latest_removal_of_a_partition_counts():
    first = OffsetRemoval("c1", "billing", "orders", 2, at(10), position=500)
    [v] = vanished_positions([first, REMOVED], samples((5, 0, 600), (50, 0, 1400),
                                                       (70, 0, 1500)))
    assert v.removal is REMOVED and v.behind == 400


def test_the_group_back_before_the_next_offsets_sample_is_this_finding_not_a_stale_process():
    # offsets-deleted-3b live: the group came back (its first commit below the deleted
    # position) before the partition's first offsets sample after the deletion arrived;
    # the drop was judged a stale process (high, restore) until that sample came. Its
    # commit on the partition shows the topic is still there.
    back = commits((20, 900), (30, 1000), (75, 100))
    deleted = OffsetRemoval("c1", "billing", "orders", 2, at(60), position=1000,
                            position_ms=at(30), delete_requests_near=1)
    [d] = detect(removals=[deleted], offsets=samples((50, 0, 1400)), commit_rows=back)
    assert (d.cause, d.severity) == ("offsets_deleted", Severity.WARNING)
    assert d.evidence["came_back_offset"] == 100
    # Without the group's return, the same lake is no sign the topic outlived its offsets.
    assert detect(removals=[deleted], offsets=samples((50, 0, 1400))) == []
