"""Vanished offsets: a group's committed position removed while the group was behind.

A group resumes from its committed offsets. When they are removed (an operator deletes
the group or its offsets: DeleteGroups, OffsetDelete; or the coordinator expires them
after the group stayed empty for offsets.retention.minutes) its next start resets by
auto.offset.reset: earliest re-reads every message up to where it was, latest skips
every message it had not read yet. The position moves without a commit that moves it,
and a consumer that reads fast is past its old position by its first commit, so rules
over commits never see it. The effect is the removal itself: a tombstone of the group's
offset in __consumer_offsets while its partition held messages the group had not read.
It is found when the offsets go, before the group comes back.

Signal (typed below and in partition_signals.py):
- `OffsetRemoval`: a tombstone of a group's offset on a partition, with the position the
  group last committed there (its last commit before the tombstone).
- `PartitionOffsets`: the partition's end and start offsets over time.
- `OffsetCommit`: the group's commits on the partition after the removal (it came back).
- With each removal, how many DeleteGroups and OffsetDelete requests the cluster's
  brokers served around it (None when there is no request telemetry for that time).

Rules, per removal (group, partition):
1. The topic still exists: the partition has an offsets sample at or after the removal,
   or the group committed on it since (it came back and read it). Offsets removed with
   their topic leave nothing to re-read or skip. The offsets are sampled less often than
   commits arrive: the group's return may be the first sign.
2. Behind: the end offset at the removal (the sample at or before it, else the first
   after) is past the position held. A caught-up group loses nothing it has not read yet.
3. Cause: the two leave the same tombstones, so the requests around them tell: a
   DeleteGroups or OffsetDelete request within DELETE_REQUEST_WINDOW_MS is offsets_deleted;
   request telemetry for that time with no such request is offsets_expired (only the
   coordinator removes offsets unasked, and only by expiry); no telemetry, unknown.

Finding: offset_rewind on group:<group>/<topic>-<p>, warning, page_human (putting the
offsets back is right only if the removal was a mistake, which only its owner knows; the
evidence carries the position to restore). It stays active until the group commits at or
past its old position; the evidence says what it read again if it came back below it. A
drop across the removal is this finding, not a second rewind (`explained_drop`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Sequence

from core.findings import (
    ActionKind,
    AnomalyType,
    Detection,
    EntityKind,
    Severity,
    group_partition_entity,
)
from detectors.partition_signals import (
    OffsetCommit,
    PartitionOffsets,
    at_or_before,
    by_partition,
    log_order,
)
from detectors.rewind_cause import RewindCause

# The coordinator writes the tombstones while it serves the request; the request is
# counted in the window it completed in (a 10-s window, a minute at most, on the same
# broker clock), so a request this close either side is the one that removed them.
DELETE_REQUEST_WINDOW_MS = 60_000
DELETE_APIS = ("DeleteGroups", "OffsetDelete")


class RemovedBy(StrEnum):
    DELETED = "deleted"     # DeleteGroups or OffsetDelete
    EXPIRED = "expired"     # offsets.retention.minutes of an empty group


def removed_by(delete_requests_near: int | None) -> RemovedBy | None:
    """Rule 3: deleted by a request, expired when requests were watched and none came,
    else not known."""
    if delete_requests_near is None:
        return None
    return RemovedBy.DELETED if delete_requests_near > 0 else RemovedBy.EXPIRED


@dataclass(frozen=True)
class OffsetRemoval:
    cluster: str
    group: str
    topic: str
    partition: int
    removed_ms: int             # the tombstone's record time
    position: int | None        # the group's last committed offset before it
    position_ms: int | None = None
    # DeleteGroups and OffsetDelete requests the cluster served within
    # DELETE_REQUEST_WINDOW_MS of it; None: no request telemetry then
    delete_requests_near: int | None = None


@dataclass(frozen=True)
class VanishedPosition:
    removal: OffsetRemoval
    end_offset: int
    log_start_offset: int | None
    removed_by: RemovedBy | None
    came_back: OffsetCommit | None     # the first commit after the removal
    caught_up: OffsetCommit | None     # the first commit after it at or past the position

    @property
    def behind(self) -> int:
        return self.end_offset - (self.removal.position or 0)

    @property
    def read_again_if_earliest(self) -> int:
        return max(0, (self.removal.position or 0) - (self.log_start_offset or 0))


def _offsets_at_removal(series: Sequence[PartitionOffsets], t_ms: int
                        ) -> PartitionOffsets | None:
    at = at_or_before(series, t_ms, lambda o: o.observed_ms)
    return at if at is not None else next((o for o in series if o.observed_ms > t_ms), None)


def vanished_positions(removals: Iterable[OffsetRemoval], offsets: Iterable[PartitionOffsets],
                       commits: Iterable[OffsetCommit] = ()) -> list[VanishedPosition]:
    """Rules 1-3 over every removal; one result per group and partition (its latest
    removal)."""
    offsets_by_tp = by_partition(offsets, lambda o: o.observed_ms)
    commits_by_gtp: dict[tuple, list[OffsetCommit]] = defaultdict(list)
    for c in commits:
        commits_by_gtp[(c.cluster, c.group, c.topic, c.partition)].append(c)
    latest: dict[tuple, OffsetRemoval] = {}
    for r in removals:
        key = (r.cluster, r.group, r.topic, r.partition)
        if r.position is not None and (key not in latest
                                       or r.removed_ms > latest[key].removed_ms):
            latest[key] = r
    out = []
    for key, r in sorted(latest.items()):
        series = offsets_by_tp.get((r.cluster, r.topic, r.partition), [])
        after = sorted((c for c in commits_by_gtp.get(key, []) if c.commit_ms > r.removed_ms),
                       key=log_order)
        if not after and (not series or series[-1].observed_ms < r.removed_ms):
            continue                                    # 1: no sign the topic is still there
        at = _offsets_at_removal(series, r.removed_ms)
        if at is None or at.end_offset <= r.position:
            continue                                    # 2: nothing unread
        out.append(VanishedPosition(
            removal=r, end_offset=at.end_offset, log_start_offset=at.log_start_offset,
            removed_by=removed_by(r.delete_requests_near),
            came_back=after[0] if after else None,
            caught_up=next((c for c in after if c.offset >= r.position), None)))
    return out


def explained_drop(v: VanishedPosition, previous: OffsetCommit, rewind: OffsetCommit) -> bool:
    """A commit drop that straddles the removal: the group's restart from a reset, which
    this finding reports."""
    r = v.removal
    return ((previous.cluster, previous.group, previous.topic, previous.partition)
            == (r.cluster, r.group, r.topic, r.partition)
            and previous.commit_ms <= r.removed_ms < rewind.commit_ms)


_CAUSE = {RemovedBy.DELETED: RewindCause.OFFSETS_DELETED,
          RemovedBy.EXPIRED: RewindCause.OFFSETS_EXPIRED, None: RewindCause.UNKNOWN}
_HOW = {RemovedBy.DELETED: "were deleted", RemovedBy.EXPIRED: "expired",
        None: "were removed (deleted or expired)"}


def vanished_detection(v: VanishedPosition, now_ms: int) -> Detection:
    r = v.removal
    back = v.came_back
    if back is None:
        then = (f"when it starts again it resumes by auto.offset.reset: earliest re-reads "
                f"{v.read_again_if_earliest} messages, latest skips the {v.behind} not read")
    elif back.offset < r.position:
        then = (f"it came back at offset {back.offset}, "
                f"{r.position - max(back.offset, v.log_start_offset or 0)} messages before "
                f"where it was")
    else:
        then = (f"it came back at offset {back.offset}, at or past where it was: it reset "
                f"to earliest and re-read up to {v.read_again_if_earliest} messages, or to "
                f"latest and skipped up to {back.offset - r.position}")
    evidence = {"group": r.group, "topic": r.topic, "partition": r.partition,
                "removed_ms": r.removed_ms, "delete_requests_near": r.delete_requests_near,
                "removed_by": v.removed_by.value if v.removed_by
                else None, "old_position": r.position, "old_position_ms": r.position_ms,
                "end_offset_at_removal": v.end_offset, "behind": v.behind,
                "log_start_at_removal": v.log_start_offset,
                "read_again_if_earliest": v.read_again_if_earliest,
                "restore_to": r.position,
                "came_back_ms": back.commit_ms if back else None,
                "came_back_offset": back.offset if back else None,
                "active": v.caught_up is None}
    return Detection(
        cluster=r.cluster, type=AnomalyType.OFFSET_REWIND, severity=Severity.WARNING,
        entity_kind=EntityKind.GROUP,
        entity=group_partition_entity(r.group, r.topic, r.partition),
        first_seen_ms=r.removed_ms,
        last_seen_ms=(max(r.removed_ms, now_ms) if v.caught_up is None
                      else v.caught_up.commit_ms),
        cause=_CAUSE[v.removed_by],
        explanation=(f"Group {r.group}'s committed offset on {r.topic}-{r.partition} "
                     f"({r.position}) {_HOW[v.removed_by]} while it was {v.behind} messages "
                     f"behind; {then}."),
        suggested_action=ActionKind.PAGE_HUMAN, evidence=evidence)
