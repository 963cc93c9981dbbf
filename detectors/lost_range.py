"""An unclean election's lost range, and the consumer groups that had read into it.

Input: `UncleanElection` (one logged election; detectors/unclean_election.py says where it
comes from), `LeaderEpochSeen` (the partition seen at a leader epoch: a broker's "starts at
leader epoch E" line, or an earlier election line), and `LogTruncation`,
`PartitionOffsets`, `OffsetCommit` from detectors/partition_signals.py. Both types are
defined here because the rules below take them; `detect_unclean_elections`
(detectors/unclean_election.py) calls `truncations_after`, `lost_range`, `committed_at` and
`place_groups` per election, and this module does not import it. Steps 1 and 2 of its
algorithm:

1. Lost range [lost_from, lost_until): the offsets the old leader had acknowledged that
   the new leader never had.
   - lost_from, the new leader's log end at the election, first match wins: the old
     leader's own truncation after the election (it truncates to exactly that point when
     it comes back: the most direct evidence); else the new leader's own "Leader <tp> ...
     starts at leader epoch <elected> from offset O" (its log end as it took over); else
     the lowest truncation below a logged high watermark; else the lowest truncation of the
     partition after the election; else the first end offset observed after the election (an
     upper bound: new writes may
     already be in it).
   - lost_until, the high watermark before the election: the highest "below high
     watermark M" of the truncation lines; else, when the old leader came back as a
     follower ("Follower <tp> starts at leader epoch E from offset O", E at least the
     elected one) with no more than the new leader had (O at most lost_from), that O:
     its log held nothing the new leader lacked, acknowledged or not, so nothing was lost
     (its high watermark in the same line is a checkpoint up to 5 s old, so it is not used
     as a bound); else the last end offset observed before the election (the high
     watermark consumers could reach). The start lines come first because the sampled
     end offsets lag: records written since the last sample before the election are in
     the old leader's start line, not in that sample.
   - The elected replica was the partition's last in-sync one (`elected_in_sync_source`:
     the controller's line names it in the last known ELR, or it is the last leader the
     brokers' start lines name): a sole replica back after its broker went down, which a
     4.x controller elects from the last known ELR and logs as unclean. Every record the
     partition acknowledged went through it, so with its log end exact (its own start
     line) lost_until is that end, or the last end offset observed before the election
     when that is higher (records its broker lost in the crash itself, unflushed: the
     only loss left, and one kmon can see only where a sample saw them).
   Each bound's source is in the evidence; a bound we cannot find stays null and the
   finding says so rather than guessing.
2. Groups: each group's last commit on the partition at or before the election.
   inside = lost_from < committed <= lost_until: the group read messages that no longer
   exist; its position now lies past the new leader's end (OffsetOutOfRange, then a reset
   per auto.offset.reset) or, once new writes fill those offsets, it silently skips them.
   beyond = committed > lost_until (lost_until was an underestimate); behind = committed
   <= lost_from: no error, but the lost messages are lost to it as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from detectors.partition_signals import (
    CLOCK_SKEW_MS,
    LogTruncation,
    OffsetCommit,
    PartitionOffsets,
    at_or_before,
)


@dataclass(frozen=True)
class UncleanElection:
    cluster: str
    topic: str
    partition: int
    event_ms: int
    old_leader: int | None = None
    new_leader: int | None = None
    leader_epoch: int | None = None
    # The partition's last known ELR before the election, as the controller's line names
    # it (4.x; None when the line does not say): the replicas still in sync when its ISR
    # emptied.
    last_known_elr: tuple[int, ...] | None = None


# The log-event kinds whose lines show a partition's leader epoch (`LeaderEpochSeen`): read
# over the replay lookback (evaluation/inputs/elections.py) and kept from before a
# matrix recording (matrix/corpus.py).
EPOCH_KINDS = ("leader_change", "unclean_election")


@dataclass(frozen=True)
class LeaderEpochSeen:
    """The partition was seen at this leader epoch at event_ms: a broker's "starts at
    leader epoch E" line, or an election line naming the epoch it elected. For a broker's
    line: `broker` logged it, `leader` is the leader it names (the broker itself when it
    leads), `log_end` its log end offset then ("from offset O") and `high_watermark` its
    own high watermark then."""
    cluster: str
    topic: str
    partition: int
    leader_epoch: int
    event_ms: int
    source: str = "leader_change"
    broker: int | None = None
    leader: int | None = None
    log_end: int | None = None
    high_watermark: int | None = None


@dataclass(frozen=True)
class LostRange:
    lost_from: int | None
    lost_from_source: str
    lost_until: int | None
    lost_until_source: str

    @property
    def messages_lost(self) -> int | None:
        if self.lost_from is None or self.lost_until is None:
            return None
        return max(0, self.lost_until - self.lost_from)


@dataclass(frozen=True)
class GroupsOnRange:
    inside: list[tuple[str, int]]
    beyond: list[tuple[str, int]]
    behind: list[tuple[str, int]]
    unknown: list[tuple[str, int]]  # the range start is unknown: cannot place them


# --- rules -----------------------------------------------------------------------------

def truncations_after(e: UncleanElection, truncations: Sequence[LogTruncation],
                      window_ms: int) -> list[LogTruncation]:
    """Truncations of the partition that follow the election within the window."""
    return [t for t in truncations
            if e.event_ms - CLOCK_SKEW_MS <= t.event_ms <= e.event_ms + window_ms]


def new_leader_start(e: UncleanElection, seen: Sequence[LeaderEpochSeen]
                     ) -> LeaderEpochSeen | None:
    """The elected broker's own "Leader <tp> starts at leader epoch <elected>" line."""
    if e.new_leader is None or e.leader_epoch is None:
        return None
    return next((s for s in seen if s.broker == e.new_leader and s.leader == e.new_leader
                 and s.leader_epoch == e.leader_epoch and s.log_end is not None), None)


def last_leader(e: UncleanElection, seen: Sequence[LeaderEpochSeen]) -> int | None:
    """The partition's leader before the election. A KRaft controller elects uncleanly
    once the partition is offline, so its line says "leader: -1 -> N"; the last leader
    any broker's start line names below the elected epoch is the one that had the data."""
    if e.old_leader is not None and e.old_leader >= 0:
        return e.old_leader
    if e.leader_epoch is None:
        return None
    before = [s for s in seen if s.leader is not None and s.leader >= 0
              and s.leader_epoch < e.leader_epoch and s.event_ms <= e.event_ms]
    return max(before, key=lambda s: (s.leader_epoch, s.event_ms)).leader if before else None


def old_leader_back(e: UncleanElection, seen: Sequence[LeaderEpochSeen]
                    ) -> LeaderEpochSeen | None:
    """The old leader's first "Follower <tp> starts" line at the elected epoch or later."""
    old = last_leader(e, seen)
    if old is None or e.leader_epoch is None:
        return None
    back = [s for s in seen if s.broker == old and s.leader != old
            and s.leader_epoch >= e.leader_epoch and s.log_end is not None
            and s.event_ms >= e.event_ms - CLOCK_SKEW_MS]
    return min(back, key=lambda s: s.event_ms, default=None)


def elected_in_sync_source(e: UncleanElection, seen: Sequence[LeaderEpochSeen]
                           ) -> str | None:
    """How we know the elected replica was the partition's last in-sync one, or None:
    "last_known_elr" (the controller's line names it there) or "last_leader" (the last
    leader before the elected epoch, from the brokers' start lines)."""
    if e.new_leader is None or e.new_leader < 0:
        return None
    if e.last_known_elr and e.new_leader in e.last_known_elr:
        return "last_known_elr"
    if last_leader(e, seen) == e.new_leader:
        return "last_leader"
    return None


def lost_range_start(e: UncleanElection, truncations: Sequence[LogTruncation],
                     offsets: Sequence[PartitionOffsets],
                     seen: Sequence[LeaderEpochSeen] = ()) -> tuple[int | None, str]:
    """The new leader's log end at the election; first match wins (see the docstring)."""
    by_old_leader = [t for t in truncations
                     if e.old_leader is not None and t.broker == e.old_leader]
    if by_old_leader:
        return min(t.truncated_to for t in by_old_leader), "old_leader_truncation"
    if (start := new_leader_start(e, seen)) is not None:
        return start.log_end, "new_leader_start"
    below_hw = [t for t in truncations if t.below_high_watermark]
    if below_hw:
        return min(t.truncated_to for t in below_hw), "truncation_below_high_watermark"
    if truncations:
        return min(t.truncated_to for t in truncations), "truncation"
    after = [o for o in offsets if o.observed_ms >= e.event_ms]
    if after:
        return after[0].end_offset, "first_end_offset_after_election"
    return None, "unknown"


def lost_range_end(e: UncleanElection, truncations: Sequence[LogTruncation],
                   offsets: Sequence[PartitionOffsets], seen: Sequence[LeaderEpochSeen] = (),
                   lost_from: int | None = None, lost_from_source: str = "unknown"
                   ) -> tuple[int | None, str]:
    """The high watermark before the election, as far as the evidence reaches.
    `lost_from` counts for the old leader's log end only when exact (its truncation, or
    the new leader's start line), not an upper bound."""
    marks = [t.high_watermark for t in truncations if t.high_watermark is not None]
    if marks:
        return max(marks), "truncation_high_watermark"
    exact = lost_from_source in ("old_leader_truncation", "new_leader_start")
    before = at_or_before(offsets, e.event_ms - 1, lambda o: o.observed_ms)
    if (exact and lost_from is not None
            and (how := elected_in_sync_source(e, seen)) is not None):
        return max(lost_from, before.end_offset if before is not None else lost_from), \
            f"elected_{how}"
    back = old_leader_back(e, seen)
    if back is not None and exact and lost_from is not None and back.log_end <= lost_from:
        return back.log_end, "old_leader_log_end"
    if before is not None:
        return before.end_offset, "last_end_offset_before_election"
    return None, "unknown"


def lost_range(e: UncleanElection, truncations: Sequence[LogTruncation],
               offsets: Sequence[PartitionOffsets],
               seen: Sequence[LeaderEpochSeen] = ()) -> LostRange:
    start, start_src = lost_range_start(e, truncations, offsets, seen)
    end, end_src = lost_range_end(e, truncations, offsets, seen, start, start_src)
    if start_src == "first_end_offset_after_election" and end is not None and start > end:
        # Only an upper bound, and new writes to the new leader already carried it past
        # the old high watermark (seen in the demo: [25515, 25040), "0 messages lost"):
        # the start is not known until a truncation line tells it.
        start, start_src = None, "unknown"
    if end_src == "last_end_offset_before_election" and start is not None and end < start:
        # A sample is a lower bound of the old high watermark: one below the new leader's
        # end (written since the sample) bounds nothing, and is not "0 lost".
        end, end_src = None, "unknown"
    return LostRange(start, start_src, end, end_src)


def committed_at(commits: Sequence[OffsetCommit], t_ms: int) -> dict[str, int]:
    """Each group's last committed offset at or before t_ms."""
    out: dict[str, tuple[int, int]] = {}
    for c in commits:
        if c.commit_ms <= t_ms and (c.group not in out or c.commit_ms >= out[c.group][0]):
            out[c.group] = (c.commit_ms, c.offset)
    return {g: off for g, (_, off) in out.items()}


def place_groups(committed: dict[str, int], r: LostRange) -> GroupsOnRange:
    """Which groups read into the lost range (inside), past it (beyond), or not (behind)."""
    inside, beyond, behind, unknown = [], [], [], []
    for group, offset in sorted(committed.items()):
        if r.lost_from is None:
            unknown.append((group, offset))
        elif offset <= r.lost_from:
            behind.append((group, offset))
        elif r.lost_until is None or offset <= r.lost_until:
            inside.append((group, offset))
        else:
            beyond.append((group, offset))
    return GroupsOnRange(inside, beyond, behind, unknown)
