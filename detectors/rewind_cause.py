"""Why a group's committed offset went back: the causes of offset_rewind and their evidence.

A cause is claimed only with its evidence, and the evidence goes into the finding; where
it tells nothing apart, the cause says only what is known ("member_commit", "unknown"),
because a wrong cause sends on-call after the wrong thing and makes remediation restore
offsets an application moved on purpose. detectors/offset_rewind.py finds and sizes the
rewinds; this module holds the causes, the evidence of who committed the rewind, and the
order in which the rules are tried (`classify_rewind`; the module docstring of
offset_rewind says why that order and what each cause is rated).

Who committed. The group coordinator's request log has a line per OffsetCommit request
(silver.request_stages api_key 8) with the member id, the generation (classic protocol)
or member epoch (KIP-848) and the client id; `CommitRequest` is one partition of one. The
rewind's own commit is matched to its line (same group, partition and offset, the line
within COMMIT_LINE_TOLERANCE_MS of the coordinator's commit time, the closest one), and
the lines of the group before it say:

- `self_rewind`: the same member's own last commit on the partition before it was higher:
  the member moved its own position back and committed. Member ids are per process and
  membership (a restarted process, even a static member, gets a new one), so the same id
  means the same live consumer. It is an application seek only when the new position lay
  inside the log (between its start and end at the rewind, by the broker's offsets): the
  client's own automatic reset also moves the member's position, to the log start or end
  (auto.offset.reset) or to where the log was truncated, and when the evidence of that
  reset (its client line, the truncation) is missing, the same member going back to the
  log's edge is no proof of a deliberate seek (seen on the demo's unclean election: the
  readers' one member went back to the new leader's end). Such a rewind stays
  member_commit.
- `stale_generation`: the member committed with an older generation (or member epoch)
  than the newest any member of the group used before it: a process that missed
  rebalances wrote what it remembered.
- `first_commit`: the member had not committed this partition before, while another
  member had (the line of the commit before the rewind is known and is another
  member's): it did not resume from the group's position but from one it held itself.
- `memberless` (member id "" and generation -1): only an empty group takes such a commit,
  so for a group that has members at other times it is an admin tool's commit.
- `retried`: the member's own earlier line with the rewind's very offset, answered with an
  error: the client sent that commit again. With `undone_at_once` (the rewind dropped once
  and the next commit, within REORDER_WINDOW_MS, is back at the old position) the retry
  landed after a newer commit: the coordinator's append of a commit waited on a dead
  __consumer_offsets follower until offsets.commit.timeout.ms and failed, the member
  meanwhile committed a newer offset and then retried the old one, which was appended
  after it; the committed offset dips for milliseconds to seconds and comes back with
  nothing re-read. Cause commit_reordered (info): the group's position never moved back.
  (A commit of an offset the member had committed successfully before is no retry: an
  application that seeks back 100 messages, at 100 messages a second, lands on one.)
  Unless that earlier commit was slow: the coordinator held it SLOW_COMMIT_MS or more
  (its append waiting on a slow or lost __consumer_offsets follower) and it was received
  within REORDER_WINDOW_MS before the rewind. A client that waits that long for an answer
  sends the position again, on its other connection to the coordinator too (librdkafka
  keeps one for the group), and the two race: the old position lands after a newer one,
  and the member, behind, reads nothing again. A seek commits at the coordinator's usual
  pace (milliseconds). Or the rewind's commit came in the moment the coordinator answered
  one of the member's slow (SLOW_COMMIT_MS) or failed requests, within QUEUED_MS: a
  broker reads a connection's next request only once it has answered the one before, so
  the commit waited behind that one, sent while it was pending; a client that waits on a
  stalled coordinator queues its next positions so, and they land in a burst after a
  newer position sent on its other connection. The wait may be through requests queued
  between (`queued_behind`): a queue drains one request at a time, each read as the one
  before is answered, so only its head was slow.
- `in_flight` (no line needed): the rewind's offset lies strictly between the last two
  positions committed before it (an idle consumer commits one position many times: the
  one before those), and the next commit, within REORDER_WINDOW_MS, is the old position
  itself, unchanged. The consumer passed that offset between the two positions, so a
  commit of it was sent then and landed after the newer one; and a consumer that had
  gone back to it would commit the old position again only by re-reading exactly to it
  with nothing new since. A client sends its queued commits out of order when the
  group's coordinator moves or comes back (the commit to the old one leaves no line).
  A seek lands on a commit it passed or further back, and reads on from there. Cause
  commit_reordered. On a busy partition the next commit is past the old position (the
  consumer read on), so there the coordinator move between the older of the two commits
  and the rewind is the evidence instead (offset_rewind.queued_across_move).

Coordinator moves. A broker that becomes a __consumer_offsets partition's coordinator
logs "Scheduling loading of metadata from __consumer_offsets-N with epoch E"
(silver.log_events kind coordinator_load). The group's partition of __consumer_offsets
is known from its commits (OffsetCommit.source_partition). A load of that partition with
an epoch above 0 (epoch 0 is the first leader: nothing moved) within evidence_window_s
before the rewind is the only evidence of a coordinator move.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Sequence

from detectors.partition_signals import CommitRequest, CoordinatorLoad, OffsetCommit

# The request-log line of a commit is stamped when the response is sent; the commit's
# timestamp when the coordinator appended it. Both are the coordinator's clock.
COMMIT_LINE_TOLERANCE_MS = 10_000
# A rewind undone by the next commit this soon, back at the old position, that retries a
# failed commit of the member, is a reordered commit (see `retried`).
REORDER_WINDOW_MS = 10_000
# A commit the coordinator held this long is one the client may send again (`retried`):
# a healthy coordinator answers a commit in milliseconds.
SLOW_COMMIT_MS = 1_000.0
# A request read this soon after the answer to the one before it on the member's
# connection was waiting behind it (`retried`): a broker reads the next at once.
QUEUED_MS = 50


class RewindCause(StrEnum):
    """The `cause` of offset_rewind findings."""
    OPERATOR_RESET = "operator_reset"
    APPLICATION_SEEK = "application_seek"
    AUTO_RESET_AFTER_OUT_OF_RANGE = "auto_reset_after_out_of_range"
    STALE_OFFSET_AFTER_COORDINATOR_MOVE = "stale_offset_after_coordinator_move"
    STALE_PROCESS = "stale_process"
    COMMIT_REORDERED = "commit_reordered"
    MEMBER_COMMIT = "member_commit"
    OFFSETS_DELETED = "offsets_deleted"     # detectors/vanished_offsets.py
    OFFSETS_EXPIRED = "offsets_expired"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Committer:
    """What the request log says about who committed a rewind."""
    line: CommitRequest | None = None            # the rewind commit's own line
    previous_line: CommitRequest | None = None   # the line of the commit before it
    own_last: CommitRequest | None = None        # the same member's last line before it
    newest_generation: int | None = None         # the group's newest generation before it
    retried: CommitRequest | None = None         # the member's earlier failed (or slow) line,
                                                 # same offset, or the one it queued behind

    @property
    def self_rewind(self) -> bool:
        return (self.line is not None and self.own_last is not None
                and self.own_last.offset > self.line.offset)

    @property
    def stale_generation(self) -> bool:
        return (self.line is not None and self.line.from_member
                and self.newest_generation is not None
                and self.line.generation < self.newest_generation)

    @property
    def first_commit(self) -> bool:
        return (self.line is not None and self.line.from_member and self.own_last is None
                and self.previous_line is not None
                and self.previous_line.member_id != self.line.member_id)

    @property
    def by_member(self) -> bool:
        return self.line is not None and self.line.from_member

    def evidence(self) -> dict | None:
        if self.line is None:
            return None
        x = self.line
        return {"client_id": x.client_id, "member_id": x.member_id, "generation": x.generation,
                "request_ms": x.request_ms, "broker": x.broker,
                "own_last_offset": self.own_last.offset if self.own_last else None,
                "group_newest_generation": self.newest_generation,
                "previous_member_id": (self.previous_line.member_id if self.previous_line
                                       else None),
                "previous_client_id": (self.previous_line.client_id if self.previous_line
                                       else None),
                "earlier_commit_ms": self.retried.request_ms if self.retried else None}


def requests_by_group(requests: Iterable[CommitRequest]) -> dict[tuple[str, str],
                                                                  list[CommitRequest]]:
    """Lines per (cluster, group), in request time order."""
    out: dict[tuple[str, str], list[CommitRequest]] = defaultdict(list)
    for x in requests:
        out[(x.cluster, x.group)].append(x)
    for xs in out.values():
        xs.sort(key=lambda x: x.request_ms)
    return dict(out)


def line_of(c: OffsetCommit, lines: Sequence[CommitRequest],
            tolerance_ms: int = COMMIT_LINE_TOLERANCE_MS) -> CommitRequest | None:
    """The request-log line of one commit: same partition and offset, received (when the
    coordinator appends it) the closest to the commit's time. (By the line's own time a
    retried commit would find the failed first try, answered just before the retry came.)"""
    near = [x for x in lines
            if x.topic == c.topic and x.partition == c.partition and x.offset == c.offset
            and abs(x.received_ms - c.commit_ms) <= tolerance_ms]
    return min(near, key=lambda x: abs(x.received_ms - c.commit_ms), default=None)


def committer_of(rewind_commit: OffsetCommit, previous_commit: OffsetCommit,
                 group_lines: Sequence[CommitRequest]) -> Committer:
    """Who committed the rewind, and what the group's lines before it say about them."""
    line = line_of(rewind_commit, group_lines)
    if line is None:
        return Committer()
    before = sorted((x for x in group_lines if x.received_ms < line.received_ms),
                    key=lambda x: x.received_ms)
    own = [x for x in before if x.topic == line.topic and x.partition == line.partition
           and x.member_id == line.member_id] if line.from_member else []
    generations = [x.generation for x in before if x.from_member]
    retried = [x for x in own if x.offset == line.offset
               and (x.failed or (x.total_ms >= SLOW_COMMIT_MS
                                 and line.received_ms - x.received_ms <= REORDER_WINDOW_MS))]
    if not retried and line.from_member:
        retried = queued_behind(line, [x for x in before if x.member_id == line.member_id])
    return Committer(line=line, previous_line=line_of(previous_commit, before),
                     own_last=own[-1] if own else None,
                     newest_generation=max(generations, default=None),
                     retried=retried[-1] if retried else None)


def queued_behind(line: CommitRequest, mine: Sequence[CommitRequest]) -> list[CommitRequest]:
    """The member's failed or slow commit `line` waited behind, directly or through the
    requests queued between (`mine`: its earlier lines): a request read within QUEUED_MS
    of the answer to one before it was waiting on it, and that one may have waited in turn.
    Empty when the queue leads to no failed or slow commit."""
    t, seen = line.received_ms, set()
    while True:
        ahead = [x for x in mine if 0 <= t - x.request_ms <= QUEUED_MS and id(x) not in seen]
        if not ahead:
            return []
        x = max(ahead, key=lambda x: x.request_ms)
        if x.failed or x.total_ms >= SLOW_COMMIT_MS:
            return [x]
        seen.add(id(x))
        t = x.received_ms


def group_has_members(uses_membership: bool, group_lines: Sequence[CommitRequest]) -> bool:
    """The group has members at some time: a sample shows one, or a member committed."""
    return uses_membership or any(x.from_member for x in group_lines)


OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class OffsetsLoss:
    """Committed offsets lost from a __consumer_offsets partition: its truncation below
    the high watermark, or its unclean election (both seen in silver.log_events)."""
    cluster: str
    offsets_partition: int
    event_ms: int
    kind: str   # "truncation" or "unclean_election"


def coordinator_move_before(loads: Sequence[CoordinatorLoad], c: OffsetCommit,
                            window_ms: int,
                            losses: Sequence[OffsetsLoss] = ()) -> CoordinatorLoad | None:
    """The latest move of the group's coordinator within window_ms before the commit that
    lost committed offsets: its __consumer_offsets partition was truncated below the high
    watermark, or elected uncleanly, within window_ms of the move (either side: the old
    leader logs its truncation only when it comes back). A clean move loses nothing: an
    offset commit is answered only once the partition's in-sync replicas have it, and
    the new coordinator loads the state from that log, so it serves every commit the old
    one answered. A move alone explains no rewind (seen in CI: a preferred-leader
    rebalance moved the coordinator of a group 100 s before a stale process committed
    over it)."""
    if c.source_partition is None:
        return None
    near = [x for x in loads
            if x.cluster == c.cluster and x.offsets_partition == c.source_partition
            and x.is_move and c.commit_ms - window_ms <= x.event_ms <= c.commit_ms
            and loss_at_move(losses, x, window_ms) is not None]
    return max(near, key=lambda x: x.event_ms, default=None)


def loss_at_move(losses: Sequence[OffsetsLoss], move: CoordinatorLoad,
                 window_ms: int) -> OffsetsLoss | None:
    """The loss of the moved coordinator's __consumer_offsets partition closest to the
    move, within window_ms on either side."""
    near = [x for x in losses
            if x.cluster == move.cluster and x.offsets_partition == move.offsets_partition
            and abs(x.event_ms - move.event_ms) <= window_ms]
    return min(near, key=lambda x: abs(x.event_ms - move.event_ms), default=None)


def classify_rewind(admin_commit: bool, seek: object | None, reset_event: object | None,
                    truncation: object | None, past_log_end: int, member_count: int | None,
                    committer: Committer = Committer(),
                    coordinator_move: CoordinatorLoad | None = None,
                    inside_log: bool = False, undone_at_once: bool = False,
                    in_flight: bool = False, undone_soon: bool = False) -> RewindCause:
    """First match wins; offset_rewind's module docstring says why this order.
    `inside_log`: the new position lay strictly between the log start and end at the
    rewind (known from the broker's offsets): not where an automatic reset puts a
    consumer. `undone_at_once`: one drop, and the next commit back at the old position
    within REORDER_WINDOW_MS. `undone_soon`: back at (or past) the old position within
    REORDER_WINDOW_MS, whatever came between. `in_flight`: undone at once by a commit of
    the old position itself, and the rewind's offset lies between the two commits before
    it (see the module docstring)."""
    if admin_commit:
        return RewindCause.OPERATOR_RESET
    if seek is not None:
        return RewindCause.APPLICATION_SEEK
    if reset_event is not None or truncation is not None or past_log_end > 0:
        return RewindCause.AUTO_RESET_AFTER_OUT_OF_RANGE
    if (undone_at_once and in_flight) or ((undone_at_once or undone_soon)
                                          and committer.line is not None
                                          and committer.retried is not None):
        # Before the coordinator move: a member that resumed from a stale offset reads on
        # from it; one whose next commit is back at once re-read nothing. A retried commit
        # may land in a burst of the member's queued ones after a coordinator move: each
        # was sent before the newer one, none re-read anything.
        return RewindCause.COMMIT_REORDERED
    if coordinator_move is not None:
        return RewindCause.STALE_OFFSET_AFTER_COORDINATOR_MOVE
    if committer.self_rewind and inside_log:
        return RewindCause.APPLICATION_SEEK
    if committer.stale_generation or committer.first_commit:
        return RewindCause.STALE_PROCESS
    if committer.by_member or (member_count is not None and member_count > 0):
        return RewindCause.MEMBER_COMMIT
    return RewindCause.UNKNOWN
