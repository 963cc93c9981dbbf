"""Offset reset: a group's position reset by its client, or moved forward by an operator.

Signal. The clients' own reset lines (`ClientOffsetReset`, joined by `pair_reset_events`),
the group's committed offsets on the partition in commit order (`OffsetCommit`), samples of
its member count (`GroupMembership`) and the partition's end and start offsets over time
(`PartitionOffsets`), all typed in detectors/partition_signals.py.
`detect_offset_anomalies` (detectors/offset_rewind.py) sorts them per group and partition
and calls `reset_detection` per reset line and `operator_forward_resets` per group and
partition; this module does not import it (imports point offset_rewind -> offset_reset),
so `is_admin_commit`, which the rewind rules use too, is defined here. Both read the
[offset_rewind] config section (offset_rewind_config.py).

Resets. Client reset lines (after `pair_reset_events`) become offset_reset findings
unless benign (reason no_committed_offset: a new group; an application's seek; or an
unexplained reset of a partition the group had never committed). A reset forward skips
messages the group never read: skipped = to - from (possible loss); a reset backward
re-reads. An empty group's
forward commit (an operator's reset to latest or to a later offset) is an offset_reset
too: cause operator_reset_forward.

Scoring and actions:

- reset: truncation or out-of-range high; unexplained warning; skipped > 0 adds "possible
  loss" and suggests restore_group_offsets to the pre-reset position when it is still in
  the log; operator_reset_forward warning/none.
- Unfixable: a reset caused by truncation (the old position is gone) pages a human;
  offsets are never restored past the log end.

Output: `Detection`s of type offset_reset, entity "group:<group>/<topic>-<p>" (or
"<topic>-<p>" for a reset whose group is unknown); the evidence always carries topic,
partition and group (correlation links on them).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Sequence

from core.findings import (
    ActionKind,
    AnomalyType,
    Detection,
    EntityKind,
    Severity,
    group_partition_entity,
    partition_entity,
)
from detectors.offset_rewind_config import OffsetRewindSection
from detectors.partition_signals import (
    ClientOffsetReset,
    GroupMembership,
    OffsetCommit,
    PartitionOffsets,
    ResetReason,
    ResetTarget,
    at_or_before,
    group_uses_membership,
    members_at,
    messages_reread,
    offsets_at,
    offsets_out_of_range,
    offsets_past_log_end,
    reset_target_of,
    still_in_log,
)

__all__ = ["ResetCause", "is_admin_commit", "is_benign_reset",
           "operator_forward_resets", "reset_detection", "resolved_target_offset"]


class ResetCause(StrEnum):
    """The `cause` of offset_reset findings."""
    AUTO_RESET_AFTER_OUT_OF_RANGE = "auto_reset_after_out_of_range"
    AUTO_RESET_AFTER_TRUNCATION = "auto_reset_after_truncation"
    RESET_UNKNOWN_REASON = "reset_unknown_reason"
    OPERATOR_RESET_FORWARD = "operator_reset_forward"


def is_admin_commit(member_count: int | None, uses_membership: bool) -> bool:
    """Committed while the group had no members: only an admin tool does that."""
    return uses_membership and member_count == 0


def is_benign_reset(e: ClientOffsetReset, had_commit_before: bool) -> bool:
    """A new group (or partition) picking its first position (auto.offset.reset's job), or
    an application's deliberate seek (its commit shows up as a rewind if it goes back)."""
    if e.reason in (ResetReason.NO_COMMITTED_OFFSET, ResetReason.APPLICATION_SEEK):
        return True
    return e.reason is ResetReason.UNKNOWN and not had_commit_before


def resolved_target_offset(e: ClientOffsetReset, at: PartitionOffsets | None) -> int | None:
    """The new position: as logged, else the symbolic target read from the broker offsets."""
    if e.to_offset is not None:
        return e.to_offset
    if at is None:
        return None
    if e.target is ResetTarget.LATEST:
        return at.end_offset
    if e.target is ResetTarget.EARLIEST:
        return at.log_start_offset
    return None


def _last_commit_before(commits: Sequence[OffsetCommit], t_ms: int) -> OffsetCommit | None:
    return at_or_before(commits, t_ms, lambda c: c.commit_ms)


def reset_detection(e: ClientOffsetReset, commits: Sequence[OffsetCommit],
                    offsets: Sequence[PartitionOffsets]) -> Detection | None:
    """An offset_reset finding for one client reset line, or None when it is benign."""
    before = _last_commit_before(commits, e.event_ms) if e.group else None
    if is_benign_reset(e, before is not None):
        return None
    from_offset = e.from_offset if e.from_offset is not None else (
        before.offset if before else None)
    at = (offsets_out_of_range(offsets, e.event_ms, from_offset, e.to_offset is not None)
          if e.reason is ResetReason.OUT_OF_RANGE else offsets_at(offsets, e.event_ms))
    to_offset = resolved_target_offset(e, at)
    skipped = (to_offset - from_offset
               if None not in (from_offset, to_offset) and to_offset > from_offset else 0)
    reread = (messages_reread(from_offset, to_offset, at)
              if None not in (from_offset, to_offset) and to_offset < from_offset else 0)
    if e.reason is ResetReason.TRUNCATION:
        cause, severity = ResetCause.AUTO_RESET_AFTER_TRUNCATION, Severity.HIGH
    elif e.reason is ResetReason.OUT_OF_RANGE:
        cause, severity = ResetCause.AUTO_RESET_AFTER_OUT_OF_RANGE, Severity.HIGH
    else:
        cause, severity = ResetCause.RESET_UNKNOWN_REASON, Severity.WARNING
    if skipped > 0:
        severity = Severity.HIGH
    truncated = e.reason is ResetReason.TRUNCATION or offsets_past_log_end(
        from_offset or 0, at) > 0
    if skipped > 0 and not truncated and still_in_log(from_offset, at):
        action = ActionKind.RESTORE_GROUP_OFFSETS
    else:
        action = ActionKind.PAGE_HUMAN
    target = e.target if e.target is not ResetTarget.UNKNOWN else (
        reset_target_of(to_offset, at) if to_offset is not None else ResetTarget.UNKNOWN)
    if e.group:
        kind, entity = EntityKind.GROUP, group_partition_entity(e.group, e.topic, e.partition)
    else:
        kind, entity = EntityKind.PARTITION, partition_entity(e.topic, e.partition)
    who = f"Group {e.group}" if e.group else f"Client {e.client_id or '(unknown)'}"
    if skipped:
        size = f"skipping {skipped} unread messages (possible loss)"
    elif reread:
        size = f"re-reading {reread} messages"
    else:
        size = "size unknown" if None in (from_offset, to_offset) else "no messages skipped"
    explanation = (f"{who} reset its position on {e.topic}-{e.partition} from "
                   f"{from_offset if from_offset is not None else '?'} to "
                   f"{to_offset if to_offset is not None else target.value} "
                   f"({e.reason.value}), {size}.")
    return Detection(
        cluster=e.cluster, type=AnomalyType.OFFSET_RESET, severity=severity, entity_kind=kind,
        entity=entity, first_seen_ms=e.event_ms, last_seen_ms=e.event_ms, cause=cause,
        explanation=explanation, suggested_action=action,
        evidence={"group": e.group, "topic": e.topic, "partition": e.partition,
                  "client_id": e.client_id, "reason": e.reason.value, "target": target.value,
                  "from_offset": from_offset, "to_offset": to_offset, "skipped": skipped,
                  "duplicates": reread, "possible_loss": skipped > 0,
                  "end_offset_at_reset": at.end_offset if at else None,
                  "log_start_at_reset": at.log_start_offset if at else None,
                  "restore_to": from_offset if action is ActionKind.RESTORE_GROUP_OFFSETS
                  else None})


def operator_forward_resets(commits: Sequence[OffsetCommit], members: Sequence[GroupMembership],
                            offsets: Sequence[PartitionOffsets],
                            config: OffsetRewindSection) -> list[Detection]:
    """Forward commits made while the group was empty: an operator skipped messages."""
    out = []
    uses_membership = group_uses_membership(members)
    max_age_ms = int(config.membership_max_age_s * 1000)
    for prev, c in zip(commits, commits[1:]):
        if c.offset - prev.offset < config.min_rewind_messages:
            continue
        if not is_admin_commit(members_at(members, c.commit_ms, max_age_ms), uses_membership):
            continue
        at = offsets_at(offsets, c.commit_ms)
        skipped = c.offset - prev.offset
        out.append(Detection(
            cluster=c.cluster, type=AnomalyType.OFFSET_RESET, severity=Severity.WARNING,
            entity_kind=EntityKind.GROUP,
            entity=group_partition_entity(c.group, c.topic, c.partition),
            first_seen_ms=c.commit_ms, last_seen_ms=c.commit_ms,
            cause=ResetCause.OPERATOR_RESET_FORWARD,
            explanation=(f"Group {c.group} was moved forward on {c.topic}-{c.partition} from "
                         f"{prev.offset} to {c.offset} while it had no members (an operator's "
                         f"reset), skipping {skipped} unread messages."),
            suggested_action=ActionKind.NONE,
            evidence={"group": c.group, "topic": c.topic, "partition": c.partition,
                      "from_offset": prev.offset, "to_offset": c.offset, "skipped": skipped,
                      "possible_loss": True, "member_count": 0,
                      "target": reset_target_of(c.offset, at).value,
                      "commit_ms": c.commit_ms}))
    return out
