"""Typed partition-level inputs shared by the offset-rewind and unclean-election detectors.

The Spark adapter builds these from silver/gold rows (one dataclass per row, field names
equal to the column names where a column exists) and passes plain lists; nothing here
reads a table. Every record carries `cluster`: one deployment watches many clusters and
every lookup below keys on it.

- `OffsetCommit`: one commit of a group on a partition, from __consumer_offsets (offset
  commit keys v0/v1; tombstones and group-metadata records are not commits).
- `PartitionOffsets`: a partition's end offset (the high watermark a consumer can reach;
  the leader's LogEndOffset gauge is close enough) and log start offset at one time, from
  JMX (kafka.log:type=Log,name=LogEndOffset|LogStartOffset) or client statistics
  (librdkafka hi_offset / lo_offset).
- `LogTruncation`: a broker truncated a partition's log (server.log: "Truncating to offset
  N", "Truncating <tp> to offset N below high watermark M"); `high_watermark` only when the
  line gives it.
- `ClientOffsetReset`: a consumer moved its position by itself (Java "Resetting offset for
  partition", "Fetch position ... is out of range", "Truncation detected"; librdkafka
  "offset reset (at offset A ...) to offset END"). The Java client writes the cause and
  the new position on two lines: pass both, `pair_reset_events` joins them.
- `GroupMembership`: a sample of a group's member count (AdminClient describeGroups or
  client statistics), used to tell an operator's reset (empty group) from a live group.
- `CommitRequest`: one partition of an OffsetCommit request as the coordinator's request
  log shows it: who committed (member id, generation or member epoch, client id) which
  offset. It tells an application's own seek from a stale process.
- `CoordinatorLoad`: a broker became the group coordinator of a __consumer_offsets
  partition (server.log "Scheduling loading of metadata from __consumer_offsets-N with
  epoch E"): the only evidence of a coordinator move.

Where the adapter takes them from (silver tables in schemas/):
- OffsetCommit <- silver.offset_commits without tombstones: group = group_id,
  commit_ms = commit_ts_ms (ts_ms when null), offset, leader_epoch, source_partition,
  source_offset. A group's commits all live in one partition of __consumer_offsets, so
  their place there is their exact order (`log_order`), which the detectors sort by.
- LogTruncation <- silver.log_events kind = truncation: broker, event_ms = ts_ms, topic,
  partition, truncated_to = offset, high_watermark.
- ClientOffsetReset <- silver.client_offset_events: event_ms = ts_ms, group = group_id,
  client_id, topic, partition, from_offset, to_offset, and (reason, target) =
  `client_event_meaning(kind, reset_target, reason)`.
- CommitRequest <- silver.request_stages api_key 8 (OffsetCommit), one per element of
  `committed`: group = group_id, member_id, generation, client_id, broker, request_ms =
  ts_ms.
- CoordinatorLoad <- silver.log_events kind = coordinator_load: broker, event_ms = ts_ms,
  offsets_partition = partition, leader_epoch.
- PartitionOffsets and GroupMembership have no silver table yet: JMX LogEndOffset /
  LogStartOffset gauges or client statistics (hi_offset, lo_offset; cgrp
  assignment_size summed over a group's members), or AdminClient listOffsets and
  describeConsumerGroups polled by an agent.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Sequence, TypeVar


class ResetReason(StrEnum):
    OUT_OF_RANGE = "out_of_range"            # the fetch position was outside the log
    TRUNCATION = "truncation"                # the client detected log truncation (KIP-320)
    NO_COMMITTED_OFFSET = "no_committed_offset"  # a new group or partition: benign
    APPLICATION_SEEK = "application_seek"    # the application asked for it (a replay)
    UNKNOWN = "unknown"                      # a reset line without its cause


class ResetTarget(StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class OffsetCommit:
    cluster: str
    group: str
    topic: str
    partition: int
    offset: int
    commit_ms: int
    leader_epoch: int | None = None
    source_partition: int | None = None  # the group's partition of __consumer_offsets
    source_offset: int | None = None     # the commit's offset in that partition


def log_order(c: OffsetCommit) -> tuple:
    """One group's commits in the order its coordinator wrote them: their place in the
    group's partition of __consumer_offsets. Their commit time is the coordinator's clock,
    which steps back with it (a stepped-back coordinator made every partition of its
    groups look rewound). Commits read without their place sort by time first."""
    return (-1 if c.source_partition is None else c.source_partition,
            -1 if c.source_offset is None else c.source_offset, c.commit_ms)


@dataclass(frozen=True)
class PartitionOffsets:
    cluster: str
    topic: str
    partition: int
    observed_ms: int
    end_offset: int
    log_start_offset: int | None = None


@dataclass(frozen=True)
class LogTruncation:
    cluster: str
    broker: int
    topic: str
    partition: int
    event_ms: int
    truncated_to: int
    high_watermark: int | None = None

    @property
    def below_high_watermark(self) -> bool:
        """Committed data removed: only an unclean election (or a bug) does that."""
        return self.high_watermark is not None and self.truncated_to < self.high_watermark


@dataclass(frozen=True)
class ClientOffsetReset:
    cluster: str
    topic: str
    partition: int
    event_ms: int
    group: str | None = None
    client_id: str | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    target: ResetTarget = ResetTarget.UNKNOWN
    reason: ResetReason = ResetReason.UNKNOWN


@dataclass(frozen=True)
class GroupMembership:
    cluster: str
    group: str
    observed_ms: int
    member_count: int


@dataclass(frozen=True)
class CommitRequest:
    cluster: str
    group: str
    topic: str
    partition: int
    offset: int
    request_ms: int
    member_id: str | None = None
    generation: int | None = None   # generationIdOrMemberEpoch
    client_id: str | None = None
    broker: int | None = None       # the coordinator that logged it
    failed: bool = False            # the coordinator answered with an error (the response's
                                    # error codes: a timed-out append, not the coordinator)
    total_ms: float = 0.0           # the request's total time: it came in total_ms before

    @property
    def received_ms(self) -> int:
        """When the coordinator got it (and appended the commit): the line is written when
        the response goes, which for a commit waiting on replication is seconds later."""
        return self.request_ms - int(self.total_ms or 0)

    @property
    def from_member(self) -> bool:
        """Committed by a member of the group (the coordinator checked its id and epoch)."""
        return bool(self.member_id) and self.generation is not None and self.generation >= 0

    @property
    def memberless(self) -> bool:
        """An admin tool's or a standalone (assign()) consumer's commit: no member, no
        generation. The coordinator takes one only while the group has no members."""
        return self.member_id == "" and self.generation is not None and self.generation < 0


@dataclass(frozen=True)
class CoordinatorLoad:
    cluster: str
    broker: int
    offsets_partition: int
    event_ms: int
    leader_epoch: int | None = None

    @property
    def is_move(self) -> bool:
        """Epoch 0 is the partition's first leader (a new cluster or topic): nothing moved."""
        return self.leader_epoch is None or self.leader_epoch > 0


# Log lines come from different processes whose clocks and flush times differ a little: an
# effect stamped a few seconds before its cause still follows it.
CLOCK_SKEW_MS = 5_000

_TARGETS = {"earliest": ResetTarget.EARLIEST, "latest": ResetTarget.LATEST,
            "stored": ResetTarget.OFFSET, "explicit": ResetTarget.OFFSET}


def client_event_meaning(kind: str, reset_target: str | None,
                         reason: str | None) -> tuple[ResetReason, ResetTarget]:
    """What a silver.client_offset_events row means here, from its kind, reset_target and
    reason columns (see ingest/client_log.py): the adapter's one non-trivial mapping."""
    target = _TARGETS.get(reset_target or "", ResetTarget.UNKNOWN)
    if kind == "offset_out_of_range":
        return ResetReason.OUT_OF_RANGE, target
    if kind == "truncation_detected":
        return ResetReason.TRUNCATION, target
    if reason == "seek":
        return ResetReason.APPLICATION_SEEK, target
    if reason and "out of range" in reason.lower():
        return ResetReason.OUT_OF_RANGE, target
    return ResetReason.UNKNOWN, target


T = TypeVar("T")
TopicPartition = tuple[str, str, int]  # cluster, topic, partition


def by_partition(items: Iterable[T], time_of) -> dict[TopicPartition, list[T]]:
    """Items grouped by (cluster, topic, partition), each list sorted by `time_of`."""
    out: dict[TopicPartition, list[T]] = defaultdict(list)
    for x in items:
        out[(x.cluster, x.topic, x.partition)].append(x)
    for xs in out.values():
        xs.sort(key=time_of)
    return dict(out)


def at_or_before(series: Sequence[T], t_ms: int, time_of) -> T | None:
    """The last item of a time-sorted series observed at or before t_ms."""
    times = [time_of(x) for x in series]
    i = bisect.bisect_right(times, t_ms)
    return series[i - 1] if i else None


def offsets_at(series: Sequence[PartitionOffsets], t_ms: int) -> PartitionOffsets | None:
    """The partition's offsets as known at t_ms: the last sample before it, else the first
    after it (an evaluation may start just after the event)."""
    found = at_or_before(series, t_ms, lambda o: o.observed_ms)
    if found is None and series:
        return series[0]
    return found


def offsets_out_of_range(series: Sequence[PartitionOffsets], t_ms: int, position: int | None,
                         target_logged: bool) -> PartitionOffsets | None:
    """The partition's offsets at a reset the broker answered OFFSET_OUT_OF_RANGE at
    `position`: as `offsets_at`, unless that sample still has `position` in the log. It
    may then have been taken before what moved the log (retention or delete_records
    raising the log start, a truncation): the first later sample that has `position` out
    of range describes the reset. When later samples still have it in the log, the broker
    answered out of range for a position in the log (KAFKA-9543) and the sample stands.
    With no later sample yet, it stands only when the client logged the offset it reset
    to; otherwise None (unknown until the next sample): a symbolic target (librdkafka's
    BEGINNING) read against a stale log start made a forward reset past deleted records a
    rewind to offset 0."""
    at = offsets_at(series, t_ms)
    if position is None or at is None or not still_in_log(position, at):
        return at
    later = [o for o in series if o.observed_ms > t_ms]
    moved = next((o for o in later if not still_in_log(position, o)), None)
    if moved is not None:
        return moved
    return at if later or target_logged else None


def pair_reset_events(events: Iterable[ClientOffsetReset],
                      pair_window_ms: int) -> list[ClientOffsetReset]:
    """Join the Java client's cause line and position line into one reset.

    "Fetch position {offset=A} is out of range ..., resetting offset" is followed by
    "Resetting offset for partition ... to position {offset=B}" from the same client. A
    line with a cause but no new position is merged with the next line of the same client
    and partition that has a new position and no cause, if it comes within pair_window_ms.
    """
    def who(e: ClientOffsetReset) -> tuple:
        return e.cluster, e.client_id or e.group, e.topic, e.partition

    ordered = sorted(events, key=lambda e: e.event_ms)
    out: list[ClientOffsetReset] = []
    pending: dict[tuple, ClientOffsetReset] = {}
    for e in ordered:
        k = who(e)
        cause = pending.get(k)
        if (cause is not None and e.reason is ResetReason.UNKNOWN and e.to_offset is not None
                and e.event_ms - cause.event_ms <= pair_window_ms):
            out.remove(cause)
            del pending[k]
            out.append(ClientOffsetReset(
                cluster=e.cluster, topic=e.topic, partition=e.partition,
                event_ms=cause.event_ms, group=cause.group or e.group,
                client_id=cause.client_id or e.client_id,
                from_offset=cause.from_offset if cause.from_offset is not None else e.from_offset,
                to_offset=e.to_offset,
                target=e.target if e.target is not ResetTarget.UNKNOWN else cause.target,
                reason=cause.reason))
            continue
        out.append(e)
        if e.reason is not ResetReason.UNKNOWN and e.to_offset is None:
            pending[k] = e
    return out


def messages_reread(old_position: int, new_position: int, at: PartitionOffsets | None) -> int:
    """Messages a consumer reads twice after moving from old_position back to new_position.

    Only offsets still in the log are re-read: not those below the log start (deleted by
    retention) nor those at or past the end (truncated away; new messages will take those
    offsets, and reading them is not a duplicate).
    """
    upper = old_position if at is None else min(old_position, at.end_offset)
    lower = new_position
    if at is not None and at.log_start_offset is not None:
        lower = max(lower, at.log_start_offset)
    return max(0, upper - lower)


def offsets_past_log_end(position: int, at: PartitionOffsets | None) -> int:
    """How far a position lies beyond the partition's end: offsets that no longer exist."""
    if at is None:
        return 0
    return max(0, position - at.end_offset)


def reset_target_of(position: int, at: PartitionOffsets | None) -> ResetTarget:
    """Where a new position points: the log start, the log end, or somewhere between."""
    if at is None:
        return ResetTarget.UNKNOWN
    if at.log_start_offset is not None and position <= at.log_start_offset:
        return ResetTarget.EARLIEST
    if position >= at.end_offset:
        return ResetTarget.LATEST
    return ResetTarget.OFFSET


def members_at(samples: Sequence[GroupMembership], t_ms: int, max_age_ms: int) -> int | None:
    """The group's member count at t_ms, from the last sample no older than max_age."""
    s = at_or_before(samples, t_ms, lambda m: m.observed_ms)
    if s is None or t_ms - s.observed_ms > max_age_ms:
        return None
    return s.member_count


def group_uses_membership(samples: Sequence[GroupMembership]) -> bool:
    """A group that never shows a member commits through assign(): "empty" means nothing."""
    return any(s.member_count > 0 for s in samples)


def still_in_log(position: int, at: PartitionOffsets | None) -> bool:
    """Whether a consumer could still be put back at this position."""
    if at is None:
        return False
    start = at.log_start_offset if at.log_start_offset is not None else 0
    return start <= position <= at.end_offset
