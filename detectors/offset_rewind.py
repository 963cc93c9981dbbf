"""Offset rewind: a consumer group's committed position moving back where it should not.

Signal. The committed offsets of every group on every partition, in commit order, from
__consumer_offsets (`OffsetCommit`); the partitions' end and start offsets over time
(`PartitionOffsets`); the clients' own reset lines (`ClientOffsetReset`); samples of each
group's member count (`GroupMembership`); log truncations (`LogTruncation`); the
coordinator's request-log lines of the groups' OffsetCommit requests (`CommitRequest`:
who committed what); group coordinator loads (`CoordinatorLoad`). All typed in
detectors/partition_signals.py. The adapter passes the last `lookback` of each (the
detector is stateless: it re-derives everything from what it is given, as Burrow's
evaluator does from its stored window of offsets).

Algorithm, per group and partition:

1. `find_rewinds`: a commit lower than the previous commit starts a rewind. It stays
   active until the group commits at or past the highest offset it had committed before
   (its old position); further drops while active deepen the same rewind. Unlike Burrow's
   first rule, zero lag earlier in the window does not clear the partition (Burrow #714:
   a rebalance or a broker bug sends healthy, caught-up consumers back to the beginning),
   and a rewind that recovered between two evaluations is still reported, because its
   duplicates were delivered.
2. Against the broker's offsets, not only at commit time (Burrow's lag only moves when
   the group commits, so a consumer that stops after a rewind looks frozen): the end and
   start offsets at the rewind bound the messages re-read; an old position past the end
   offset means the log was truncated under the group; the latest end offset gives the
   lag now, even if the group never committed again. Only a sample taken after the old
   position was committed counts as "at the rewind": an older one predates the old
   position and would make it look truncated.
3. Classify (detectors/rewind_cause.py), first match wins. A cause is claimed only with
   its evidence, which the finding carries; where the evidence tells nothing apart the
   cause says only what is known, and "unknown" is better than a wrong cause.
   - operator_reset: an admin commit. The group had no members when the rewind was
     committed (only an admin tool commits for an empty group: kafka-consumer-groups
     --reset-offsets refuses an active one), by the membership samples, or by the
     commit's own request-log line when there is one (member id "", generation -1: the
     coordinator takes that only from outside an empty group). Checked first because it
     explains the commit itself; consumers that join later and reset again produce their
     own commits. Groups that never show a member (no sample with one, no member's
     commit line: standalone consumers using assign(), e.g. Flink) always commit while
     "empty", so for them this rule is skipped.
   - application_seek (logged): the application logged its own seek on the partition
     within `evidence_window_s` (a replay it asked for).
   - auto_reset_after_out_of_range: a client reset line on the partition within
     `evidence_window_s` of the rewind, or a truncation of the partition as near to it
     (either side: `truncation_near`) that removed committed data (below the high
     watermark: followers also truncate to their high watermark on topic creation and
     after every leader change, which removes nothing a consumer read), or an old
     position past the end offset (the position no longer existed).
   - commit_reordered (next paragraph but one), then
   - stale_offset_after_coordinator_move: only with a seen coordinator change that lost
     commits: a coordinator load of the group's __consumer_offsets partition (epoch above
     0) within `evidence_window_s` before the rewind, and that partition truncated below
     its high watermark or elected uncleanly within `evidence_window_s` of the load. A
     coordinator that served stale state after moving makes its members resume from, and
     commit, an old offset; a clean move serves every answered commit (the new leader
     was in sync), so a move alone is no cause. Checked before the committer's identity
     because such members look like either of the next two.
   - commit_reordered: the rewind's commit retries one of the member's that failed (same
     offset, answered with an error), and the group is back at the old position within
     REORDER_WINDOW_MS (at once, or after more of the member's queued commits landed in a
     burst): the retry landed after a newer commit (rewind_cause.py, `retried`); or,
     with no line needed, the rewind's offset
     lies between the last two positions committed before it and the next commit is the
     old position unchanged: a commit sent before the newer one landed after it
     (`in_flight`); or it lies there, the group's coordinator moved between the older of
     those commits and the rewind, and the next commit, within REORDER_WINDOW_MS, is at
     or past the old position (`queued_across_move`: a commit sent to the old
     coordinator, sent again to the new one after a newer position). Info: nothing moved
     back.
   - application_seek: the member that committed the rewind had itself committed a
     higher offset on the partition before (same member id: the same live consumer
     moved its own position back), to a position inside the log (not its start or end,
     where the client's own automatic reset would have put it).
   - stale_process: the committing member used an older generation (or member epoch)
     than the newest the group had used, or had never committed the partition while
     another member had (its first commit there is the rewind): a process that was not
     the partition's consumer wrote a position it remembered.
   - member_commit: the group had members (a sample or the rewind's own line says so)
     and nothing reset it, but no line tells which member committed it or why (no
     request log, or its line not found): a member committed an older offset.
   - unknown: no membership and no event to go by.
4. Size: duplicates = messages re-read = min(old, end) - max(new, log start). The old
   position is evidence, not a guess: it is the group's highest commit before the drop.

Resets (client reset lines, an empty group's forward commits): detectors/offset_reset.py.
`detect_offset_anomalies` below runs both.

Scoring and actions:

- rewind: operator_reset and application_seek info/none: deliberate replays, asked for by
  an operator or by the application itself; restoring would undo them. commit_reordered
  info/none: the position is already back. auto_reset high,
  restore_group_offsets when the old position is still in the log (the reset was
  spurious, e.g. KAFKA-9543-style bugs, and restoring stops the re-read), else
  page_human. stale_process and stale_offset_after_coordinator_move high/
  restore_group_offsets (restore to the old position): nobody wanted the re-read, the
  evidence shows the commit was not the consumer's own move, and putting the group back
  stops it. member_commit warning/page_human, as unknown: the question that decides both
  severity and action (a deliberate seek, or a stale process) is the one left open;
  restoring would undo a deliberate replay, and a page for one would be false, so it
  opens a ticket whose evidence names what to check (the group's members and their
  commits). unknown warning/page_human. A rewind that already recovered no longer
  suggests restoring (action none): there is nothing left to restore.
- Unfixable: a rewind caused by truncation (the old position is gone) pages a human;
  offsets are never restored past the log end.

Config keys ([offset_rewind] section, `OffsetRewindSection` in offset_rewind_config.py,
read by offset_reset.py too):

- evidence_window_s = 120: a client reset line or a truncation this close to the rewind
  (either side), or a coordinator load this long before it (with a loss of its
  __consumer_offsets partition this close to the load), explains it.
- membership_max_age_s = 300: a membership sample older than this at the commit counts
  as unknown.
- min_rewind_messages = 1: drops smaller than this are ignored.
- reset_pair_window_s = 5: how far apart a Java client's cause and position lines may be.
- reorder_wait_s = 30: a rewind that may still turn out a reordered commit waits for the
  partition's next REORDER_WINDOW_MS of commits, and one whose request-log line has not
  arrived for the group's lines to reach it, at most this long (`reorder_pending`).

Output: `Detection`s of type offset_rewind and offset_reset, entity
"group:<group>/<topic>-<p>" (or "<topic>-<p>" for a reset whose group is unknown); the
evidence always carries topic, partition and group (correlation links on them).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from core.findings import (
    ActionKind,
    AnomalyType,
    Detection,
    EntityKind,
    Severity,
    group_partition_entity,
)
from detectors.offset_reset import (
    is_admin_commit,
    operator_forward_resets,
    reset_detection,
)
from detectors.lost_range import UncleanElection
from detectors.offset_rewind_config import OffsetRewindSection
from detectors.partition_signals import (
    ClientOffsetReset,
    CommitRequest,
    CoordinatorLoad,
    GroupMembership,
    LogTruncation,
    OffsetCommit,
    PartitionOffsets,
    ResetReason,
    ResetTarget,
    by_partition,
    group_uses_membership,
    log_order,
    members_at,
    messages_reread,
    offsets_past_log_end,
    pair_reset_events,
    reset_target_of,
    still_in_log,
)
from detectors.vanished_offsets import (
    OffsetRemoval,
    explained_drop,
    vanished_detection,
    vanished_positions,
)
from detectors.rewind_cause import (
    REORDER_WINDOW_MS,
    OFFSETS_TOPIC,
    Committer,
    OffsetsLoss,
    RewindCause,
    classify_rewind,
    committer_of,
    coordinator_move_before,
    group_has_members,
    loss_at_move,
    requests_by_group,
)

__all__ = ["PartitionInputs", "Rewind", "RewindAssessment", "RewindCause", "assess_rewind",
           "classify_rewind", "detect_offset_anomalies", "find_rewinds", "rewind_detection"]


@dataclass(frozen=True)
class Rewind:
    """One backwards move of a group's committed offset on a partition, and its outcome."""
    previous_commit: OffsetCommit   # the last commit before the drop
    rewind_commit: OffsetCommit     # the first commit below it
    old_position: int               # the highest offset committed before the drop
    new_position: int               # the lowest offset committed while the rewind lasted
    drops: int                      # commits that went down while it lasted
    recovered_commit: OffsetCommit | None  # the first commit back at the old position
    # The last commit of another offset before previous_commit (an idle consumer commits
    # the same offset again and again: the position it held before those).
    before_previous: OffsetCommit | None = None

    @property
    def active(self) -> bool:
        return self.recovered_commit is None


@dataclass(frozen=True)
class RewindAssessment:
    """Every rule's result for one rewind, kept so tests and evidence can show each."""
    rewind: Rewind
    member_count: int | None         # at the rewind commit; None when unknown
    group_has_members_ever: bool     # any sample in the input shows a member
    admin_commit: bool               # rule: committed while the group was empty
    seek: ClientOffsetReset | None   # the application's own seek nearby
    reset_event: ClientOffsetReset | None
    truncation: LogTruncation | None
    offsets_at_rewind: PartitionOffsets | None
    past_log_end: int                # old position beyond the end offset at the rewind
    duplicates: int
    cause: str
    lag_now: int | None
    committer: Committer = Committer()          # who committed it (request log)
    coordinator_move: CoordinatorLoad | None = None
    offsets_loss: OffsetsLoss | None = None     # what the move lost (its evidence)
    queued_across: CoordinatorLoad | None = None  # the move a reordered commit was sent across


# --- rules -----------------------------------------------------------------------------

def find_rewinds(commits: Sequence[OffsetCommit], min_messages: int = 1) -> list[Rewind]:
    """Rewinds in one group/partition's commits, in the order they were written
    (partition_signals.log_order).

    A commit lower than the previous one starts a rewind; it stays active until a commit
    reaches the old position (the highest commit before the drop). Lower commits while it
    is active deepen it rather than starting another one.
    """
    rewinds: list[Rewind] = []
    high: int | None = None
    prev: OffsetCommit | None = None
    before_prev: OffsetCommit | None = None
    current: dict | None = None
    for c in commits:
        if current is not None:
            if c.offset >= current["old_position"]:
                rewinds.append(Rewind(recovered_commit=c, **current))
                current = None
            elif c.offset < prev.offset:
                current["new_position"] = min(current["new_position"], c.offset)
                current["drops"] += 1
        elif prev is not None and c.offset < prev.offset and high - c.offset >= min_messages:
            current = {"previous_commit": prev, "rewind_commit": c, "old_position": high,
                       "new_position": c.offset, "drops": 1, "before_previous": before_prev}
        high = c.offset if high is None else max(high, c.offset)
        if prev is not None and c.offset != prev.offset:
            before_prev = prev     # the position before the one the member holds now
        prev = c
    if current is not None:
        rewinds.append(Rewind(recovered_commit=None, **current))
    return rewinds


def _closest_event(resets: Sequence[ClientOffsetReset], group: str, t_ms: int, window_ms: int,
                   reasons: set[ResetReason]) -> ClientOffsetReset | None:
    near = [e for e in resets
            if abs(e.event_ms - t_ms) <= window_ms and e.group in (None, group)
            and e.reason in reasons]
    return min(near, key=lambda e: abs(e.event_ms - t_ms), default=None)


def reset_event_near(resets: Sequence[ClientOffsetReset], group: str, t_ms: int,
                     window_ms: int) -> ClientOffsetReset | None:
    """The client's own automatic reset closest to t_ms on this partition, from this group
    (or from a client whose group the line does not name), within the window."""
    return _closest_event(resets, group, t_ms, window_ms,
                          {ResetReason.OUT_OF_RANGE, ResetReason.TRUNCATION, ResetReason.UNKNOWN})


def seek_near(resets: Sequence[ClientOffsetReset], group: str, t_ms: int,
              window_ms: int) -> ClientOffsetReset | None:
    """The application's own seek on this partition near t_ms: a deliberate replay."""
    return _closest_event(resets, group, t_ms, window_ms, {ResetReason.APPLICATION_SEEK})


def truncation_near(truncations: Sequence[LogTruncation], t_ms: int,
                    window_ms: int) -> LogTruncation | None:
    """The truncation of the partition that removed committed data closest to t_ms, within
    the window on either side. Either order happens: a replica that truncates while it
    follows makes the clients' reset follow its line, but the old leader of an unclean
    election logs its truncation only when it comes back, while its readers already met
    the new leader's shorter log (seen in the demo: the readers' rewind 5.2 s before the
    old leader's line). A truncation to the high watermark removes nothing a consumer
    read."""
    near = [t for t in truncations if t.below_high_watermark
            and abs(t.event_ms - t_ms) <= window_ms]
    return min(near, key=lambda t: (abs(t.event_ms - t_ms), -t.event_ms), default=None)


def offsets_during_rewind(series: Sequence[PartitionOffsets], r: Rewind,
                          slack_ms: int) -> PartitionOffsets | None:
    """The broker's offsets at the rewind, from a sample taken after the old position was
    committed and at most slack_ms after the rewind: an older sample predates the old
    position and would make it look truncated; None when no sample qualifies."""
    since, t = r.previous_commit.commit_ms, r.rewind_commit.commit_ms
    usable = [o for o in series if since <= o.observed_ms <= t + slack_ms]
    before = [o for o in usable if o.observed_ms <= t]
    return before[-1] if before else (usable[0] if usable else None)


# --- assessment ------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionInputs:
    """What the broker and the clients say about one partition, each sorted by time."""
    offsets: Sequence[PartitionOffsets]
    resets: Sequence[ClientOffsetReset]
    truncations: Sequence[LogTruncation]


def undone_at_once(r: Rewind) -> bool:
    """One drop, and the next commit back at the old position within REORDER_WINDOW_MS."""
    return r.drops == 1 and undone_soon(r)


def undone_soon(r: Rewind) -> bool:
    """Back at the old position within REORDER_WINDOW_MS of the rewind, whatever the
    commits between."""
    return (r.recovered_commit is not None
            and r.recovered_commit.commit_ms - r.rewind_commit.commit_ms <= REORDER_WINDOW_MS)


def passed_and_undone(r: Rewind) -> bool:
    """The rewind's offset lies strictly between the last two positions committed before
    it (a position the consumer passed between them: a commit sent then), and the group
    was back at the old position at once (undone_at_once)."""
    b = r.before_previous
    return (undone_at_once(r) and b is not None
            and b.offset < r.rewind_commit.offset < r.previous_commit.offset)


def sent_between_and_recommitted(r: Rewind) -> bool:
    """passed_and_undone (the commit sent then was in flight while the newer one landed),
    and the next commit is the old position again, unchanged (the consumer's position had
    not moved: it re-read nothing). rewind_cause.py, `in_flight`."""
    return passed_and_undone(r) and r.recovered_commit.offset == r.old_position


def queued_across_move(r: Rewind, loads: Sequence[CoordinatorLoad]) -> CoordinatorLoad | None:
    """The move of the group's coordinator that the rewind's commit was queued across, or
    None: passed_and_undone, and the group's __consumer_offsets partition got a new
    coordinator (a load with epoch above 0) after the older of the two commits before the
    rewind and before the rewind itself. The commit sent to the old
    coordinator got no answer; the client sent it again to the new one after a newer
    position. Unlike `sent_between_and_recommitted`, the next commit may be past the old
    position: a busy partition's consumer has read on by then (the commit sent to the
    stopped coordinator left no line)."""
    b, c = r.before_previous, r.rewind_commit
    if c.source_partition is None or not passed_and_undone(r):
        return None
    moves = [x for x in loads
             if x.cluster == c.cluster and x.offsets_partition == c.source_partition
             and x.is_move and b.commit_ms < x.event_ms <= c.commit_ms]
    return max(moves, key=lambda x: x.event_ms, default=None)


# Causes the rules before the reordered-commit test decide (or that test itself): what
# the commits after the rewind show cannot change them.
_SETTLED_BEFORE_REORDER = frozenset({RewindCause.OPERATOR_RESET, RewindCause.APPLICATION_SEEK,
                                     RewindCause.AUTO_RESET_AFTER_OUT_OF_RANGE,
                                     RewindCause.COMMIT_REORDERED})


def reorder_pending(a: RewindAssessment, newest_commit_ms: int, now_ms: int,
                    config: OffsetRewindSection, lines_until_ms: int | None = None) -> bool:
    """The rewind may yet prove a reordered commit, and what would prove it is not in:
    not undone yet; its offset lies between the member's last two positions (a commit
    sent then may have landed late: `passed_and_undone`'s first half) or it retries a
    failed commit of the member (`Committer.retried`); the partition's commits reach less
    than REORDER_WINDOW_MS past it; and it is younger than reorder_wait_s. Judged before
    the commit that undoes it is in, such a rewind would be handed over as a
    member_commit warning and, one evaluation later, as the commit_reordered it was.
    Likewise, undone or not, while the group's request-log lines (`lines_until_ms`: the
    newest) have not reached the rewind's commit: its own line decides who committed it,
    and the lines arrive later than the commits."""
    r = a.rewind
    if a.cause in _SETTLED_BEFORE_REORDER or config.reorder_wait_s <= 0:
        return False
    t = r.rewind_commit.commit_ms
    if now_ms >= t + config.reorder_wait_s * 1000:
        return False
    if a.committer.line is None and lines_until_ms is not None and lines_until_ms < t:
        return True
    if not r.active or newest_commit_ms >= t + REORDER_WINDOW_MS:
        return False
    b = r.before_previous
    passed = b is not None and b.offset < r.rewind_commit.offset < r.previous_commit.offset
    retried = a.committer.line is not None and a.committer.retried is not None
    return passed or retried


def assess_rewind(r: Rewind, inputs: PartitionInputs, members: Sequence[GroupMembership],
                  config: OffsetRewindSection,
                  last_commit: OffsetCommit | None = None,
                  group_lines: Sequence[CommitRequest] = (),
                  coordinator_loads: Sequence[CoordinatorLoad] = (),
                  offsets_losses: Sequence[OffsetsLoss] = ()) -> RewindAssessment:
    """Every rule applied to one rewind; `last_commit` is the group's latest commit on the
    partition (for the lag now), by default the last one the rewind saw; `group_lines` the
    group's OffsetCommit request-log lines (every partition), in time order;
    `offsets_losses` the __consumer_offsets partitions' losses (a coordinator move
    explains a rewind only with one)."""
    t = r.rewind_commit.commit_ms
    window_ms = int(config.evidence_window_s * 1000)
    member_count = members_at(members, t, int(config.membership_max_age_s * 1000))
    uses_membership = group_has_members(group_uses_membership(members), group_lines)
    committer = committer_of(r.rewind_commit, r.previous_commit, group_lines)
    if committer.line is None:
        admin = is_admin_commit(member_count, uses_membership)
    else:  # the line says who: a member, or nobody (only an empty group takes that)
        admin = uses_membership and committer.line.memberless
    move = coordinator_move_before(coordinator_loads, r.rewind_commit, window_ms,
                                  offsets_losses)
    # A move that lost commits explains a rewind as stale state; only a clean one can be
    # what a commit was queued across.
    requeued = None if move is not None else queued_across_move(r, coordinator_loads)
    seek = seek_near(inputs.resets, r.rewind_commit.group, t, window_ms)
    event = reset_event_near(inputs.resets, r.rewind_commit.group, t, window_ms)
    truncation = truncation_near(inputs.truncations, t, window_ms)
    at = offsets_during_rewind(inputs.offsets, r, window_ms)
    past_end = offsets_past_log_end(r.old_position, at)
    latest = inputs.offsets[-1] if inputs.offsets else None
    last_offset = (last_commit or r.recovered_commit or r.rewind_commit).offset
    return RewindAssessment(
        rewind=r, member_count=member_count, group_has_members_ever=uses_membership,
        admin_commit=admin, seek=seek, reset_event=event, truncation=truncation,
        offsets_at_rewind=at,
        past_log_end=past_end, duplicates=messages_reread(r.old_position, r.new_position, at),
        cause=classify_rewind(admin, seek, event, truncation, past_end, member_count,
                              committer, move,
                              reset_target_of(r.new_position, at) is ResetTarget.OFFSET,
                              undone_at_once(r),
                              sent_between_and_recommitted(r) or requeued is not None,
                              undone_soon(r)),
        lag_now=None if latest is None else max(0, latest.end_offset - last_offset),
        committer=committer, coordinator_move=move,
        offsets_loss=None if move is None else loss_at_move(offsets_losses, move, window_ms),
        queued_across=requeued)


def _rewind_severity_and_action(a: RewindAssessment) -> tuple[Severity, ActionKind]:
    if a.cause in (RewindCause.OPERATOR_RESET, RewindCause.APPLICATION_SEEK,
                   RewindCause.COMMIT_REORDERED):
        return Severity.INFO, ActionKind.NONE
    if a.cause == RewindCause.AUTO_RESET_AFTER_OUT_OF_RANGE:
        restorable = a.past_log_end == 0 and a.truncation is None and still_in_log(
            a.rewind.old_position, a.offsets_at_rewind)
        action = ActionKind.RESTORE_GROUP_OFFSETS if restorable else ActionKind.PAGE_HUMAN
        severity = Severity.HIGH
    elif a.cause in (RewindCause.STALE_OFFSET_AFTER_COORDINATOR_MOVE,
                     RewindCause.STALE_PROCESS):
        severity, action = Severity.HIGH, ActionKind.RESTORE_GROUP_OFFSETS
    else:
        severity, action = Severity.WARNING, ActionKind.PAGE_HUMAN
    if not a.rewind.active and action is ActionKind.RESTORE_GROUP_OFFSETS:
        action = ActionKind.NONE
    return severity, action


_REWIND_WHY = {
    RewindCause.OPERATOR_RESET: "a deliberate reset (committed while the group had no members)",
    RewindCause.APPLICATION_SEEK: "the application's own seek (the member that committed it had "
                                  "committed the higher offsets itself, or logged its seek)",
    RewindCause.AUTO_RESET_AFTER_OUT_OF_RANGE: "an automatic reset after the position fell "
                                               "out of range",
    RewindCause.STALE_OFFSET_AFTER_COORDINATOR_MOVE: "an old offset committed after the group's "
                                                     "coordinator moved and lost commits",
    RewindCause.STALE_PROCESS: "a stale process committed an old position (a member of an older "
                               "generation, or one that had not been committing the partition)",
    RewindCause.COMMIT_REORDERED: "a commit request of the member sent before a newer one (a "
                                  "retry of a failed commit, or one queued across a coordinator "
                                  "move) landed after it; its next commit put the position back "
                                  "at once (nothing was re-read on its account)",
    RewindCause.MEMBER_COMMIT: "a member committed an older offset (no reset; whether it sought "
                               "back or was stale is not known)",
    RewindCause.UNKNOWN: "cause unknown (no membership or client evidence)",
}


def rewind_detection(a: RewindAssessment, now_ms: int) -> Detection:
    r = a.rewind
    c = r.rewind_commit
    severity, action = _rewind_severity_and_action(a)
    evidence = {
        "group": c.group, "topic": c.topic, "partition": c.partition,
        "old_position": r.old_position, "new_position": r.new_position,
        "previous_commit_offset": r.previous_commit.offset,
        "previous_commit_ms": r.previous_commit.commit_ms, "rewind_commit_ms": c.commit_ms,
        "before_previous_offset": (r.before_previous.offset if r.before_previous is not None
                                   else None),
        "drops": r.drops, "duplicates": a.duplicates, "active": r.active,
        "recovered_ms": None if r.active else r.recovered_commit.commit_ms,
        "member_count": a.member_count, "group_has_members_ever": a.group_has_members_ever,
        "reset_target": reset_target_of(r.new_position, a.offsets_at_rewind).value,
        "old_position_past_log_end": a.past_log_end, "lag_now": a.lag_now,
        "end_offset_at_rewind": a.offsets_at_rewind.end_offset if a.offsets_at_rewind else None,
        "log_start_at_rewind": a.offsets_at_rewind.log_start_offset if a.offsets_at_rewind
        else None,
        "restore_to": r.old_position if action is ActionKind.RESTORE_GROUP_OFFSETS else None,
    }
    committer = a.committer.evidence()
    if committer is not None:
        evidence["committer"] = committer
    if a.coordinator_move is not None:
        m = a.coordinator_move
        evidence["coordinator_load"] = {"event_ms": m.event_ms, "broker": m.broker,
                                        "offsets_partition": m.offsets_partition,
                                        "leader_epoch": m.leader_epoch}
    if a.queued_across is not None and a.cause is RewindCause.COMMIT_REORDERED:
        m = a.queued_across
        evidence["queued_across_coordinator_load"] = {
            "event_ms": m.event_ms, "broker": m.broker, "offsets_partition": m.offsets_partition,
            "leader_epoch": m.leader_epoch}
    if a.offsets_loss is not None:
        evidence["offsets_loss"] = {"event_ms": a.offsets_loss.event_ms,
                                    "kind": a.offsets_loss.kind,
                                    "offsets_partition": a.offsets_loss.offsets_partition}
    event = a.seek if a.cause is RewindCause.APPLICATION_SEEK and a.seek else a.reset_event
    if event is not None:
        evidence["reset_event"] = {"event_ms": event.event_ms, "client_id": event.client_id,
                                   "reason": event.reason.value,
                                   "from_offset": event.from_offset,
                                   "to_offset": event.to_offset}
    if a.truncation is not None:
        evidence["truncation"] = {"event_ms": a.truncation.event_ms,
                                  "broker": a.truncation.broker,
                                  "truncated_to": a.truncation.truncated_to,
                                  "high_watermark": a.truncation.high_watermark}
    state = "still active" if r.active else "since recovered"
    gone = (f"; the old position lay {a.past_log_end} offsets past the log end, truncated"
            if a.past_log_end else "")
    explanation = (f"Group {c.group} moved back on {c.topic}-{c.partition} from offset "
                   f"{r.old_position} to {r.new_position} ({a.duplicates} messages re-read, "
                   f"{state}{gone}): {_REWIND_WHY[a.cause]}.")
    return Detection(
        cluster=c.cluster, type=AnomalyType.OFFSET_REWIND, severity=severity,
        entity_kind=EntityKind.GROUP, entity=group_partition_entity(c.group, c.topic, c.partition),
        first_seen_ms=c.commit_ms,
        last_seen_ms=max(c.commit_ms, now_ms) if r.active else r.recovered_commit.commit_ms,
        cause=a.cause, explanation=explanation, suggested_action=action, evidence=evidence)


def offsets_losses(truncations: Iterable[LogTruncation],
                   elections: Iterable[UncleanElection]) -> list[OffsetsLoss]:
    """Where __consumer_offsets lost committed offsets: truncations below the high
    watermark and unclean elections of its partitions."""
    out = [OffsetsLoss(t.cluster, t.partition, t.event_ms, "truncation") for t in truncations
           if t.topic == OFFSETS_TOPIC and t.below_high_watermark]
    out += [OffsetsLoss(e.cluster, e.partition, e.event_ms, "unclean_election")
            for e in elections if e.topic == OFFSETS_TOPIC]
    return sorted(out, key=lambda x: x.event_ms)


def detect_offset_anomalies(commits: Iterable[OffsetCommit], *,
                            offsets: Iterable[PartitionOffsets] = (),
                            resets: Iterable[ClientOffsetReset] = (),
                            memberships: Iterable[GroupMembership] = (),
                            truncations: Iterable[LogTruncation] = (),
                            commit_requests: Iterable[CommitRequest] = (),
                            coordinator_loads: Iterable[CoordinatorLoad] = (),
                            elections: Iterable[UncleanElection] = (),
                            removals: Iterable[OffsetRemoval] = (),
                            now_ms: int,
                            config: OffsetRewindSection | None = None) -> list[Detection]:
    """offset_rewind and offset_reset detections for everything in the input.

    One offset_rewind detection per group/partition (its latest rewind, or its offsets
    removed while behind: vanished_offsets.py; evidence counts the others), one
    offset_reset per non-benign client reset line and per operator forward commit. Resets
    before rewinds: nothing depends on it but the output order.
    """
    config = config or OffsetRewindSection()
    offsets = list(offsets)
    offsets_by_tp = by_partition(offsets, lambda o: o.observed_ms)
    truncations_by_tp = by_partition(truncations, lambda t: t.event_ms)
    paired = pair_reset_events(resets, int(config.reset_pair_window_s * 1000))
    resets_by_tp = by_partition(paired, lambda e: e.event_ms)
    members_by_group: dict[tuple[str, str], list[GroupMembership]] = defaultdict(list)
    for m in memberships:
        members_by_group[(m.cluster, m.group)].append(m)
    for ms in members_by_group.values():
        ms.sort(key=lambda m: m.observed_ms)
    commits_by_gtp: dict[tuple, list[OffsetCommit]] = defaultdict(list)
    for c in commits:
        commits_by_gtp[(c.cluster, c.group, c.topic, c.partition)].append(c)
    for cs in commits_by_gtp.values():
        cs.sort(key=log_order)
    lines_by_group = requests_by_group(commit_requests)
    loads = sorted(coordinator_loads, key=lambda x: x.event_ms)
    losses = offsets_losses(truncations, elections)

    commits = [c for cs in commits_by_gtp.values() for c in cs]
    vanished = {(v.removal.cluster, v.removal.group, v.removal.topic, v.removal.partition): v
                for v in vanished_positions(removals, offsets, commits)}
    detections: list[Detection] = []
    for tp, events in resets_by_tp.items():
        for e in events:
            group_commits = commits_by_gtp.get((e.cluster, e.group, e.topic, e.partition), [])
            d = reset_detection(e, group_commits, offsets_by_tp.get(tp, []))
            if d is not None:
                detections.append(d)

    for (cluster, group, topic, partition), cs in sorted(commits_by_gtp.items()):
        tp = (cluster, topic, partition)
        members = members_by_group.get((cluster, group), [])
        inputs = PartitionInputs(offsets=offsets_by_tp.get(tp, []),
                                  resets=resets_by_tp.get(tp, []),
                                  truncations=truncations_by_tp.get(tp, []))
        detections.extend(operator_forward_resets(cs, members, inputs.offsets, config))
        rewinds = find_rewinds(cs, config.min_rewind_messages)
        v = vanished.get((cluster, group, topic, partition))
        if v is not None:
            rewinds = [r for r in rewinds
                       if not explained_drop(v, r.previous_commit, r.rewind_commit)]
            if not (rewinds and rewinds[-1].rewind_commit.commit_ms > v.removal.removed_ms):
                continue                         # the removal is the latest: its finding
            del vanished[(cluster, group, topic, partition)]       # a newer rewind since
        if not rewinds:
            continue
        group_lines = lines_by_group.get((cluster, group), [])
        latest = assess_rewind(rewinds[-1], inputs, members, config, last_commit=cs[-1],
                               group_lines=group_lines, coordinator_loads=loads,
                               offsets_losses=losses)
        if reorder_pending(latest, cs[-1].commit_ms, now_ms, config,
                           group_lines[-1].request_ms if group_lines else None):
            continue
        d = rewind_detection(latest, now_ms)
        detections.append(dataclasses.replace(
            d, evidence={**d.evidence, "rewinds_seen": len(rewinds)}))
    return detections + [vanished_detection(v, now_ms) for _, v in sorted(vanished.items())]
