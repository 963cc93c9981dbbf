"""Unclean leader election: an out-of-sync replica became leader, and data was lost.

Signal.
- `UncleanElection`: the controller's log line for one partition (KRaft: "UNCLEAN partition
  change for <tp> ... leader: 1 -> 3, leaderEpoch: 4 -> 5" (3.3+), "Setting new leader
  ... using an unclean election" (3.7+), "Triggering unclean leader election for offline
  partition <tp>" (3.9+)). The adapter de-duplicates the several lines one election
  writes, keeping the earliest time. Typed (with `LeaderEpochSeen`) in
  detectors/lost_range.py, whose rules take it.
- `UncleanElectionMeterTick`: the increase of the controller's
  UncleanLeaderElectionsPerSec meter (Count) between two samples. A ZooKeeper-mode
  controller (Kafka up to 3.9) logs nothing for an unclean election: only this meter
  moves. The adapter drops negative deltas (a new active controller starts from zero).
- `LogTruncation`, `PartitionOffsets`, `OffsetCommit` from detectors/partition_signals.py.

Adapter: UncleanElection <- silver.log_events kind = unclean_election (event_ms = ts_ms,
topic, partition, old_leader, new_leader, leader_epoch); one election writes up to three
lines (3.9+), and the 3.7+ line names only a topic id, so keep the earliest line per
(topic, partition, leader_epoch) and resolve or drop rows whose topic is null. Meter
ticks come from JMX (kafka_controller_controllerstats_uncleanleaderelectionspersec_count,
differenced per controller).

Algorithm, per logged election:

0. A re-logged election is not a new one. A KRaft controller logs "UNCLEAN partition
   change" whenever it applies the record, also when a restarted controller replays the
   metadata log written since its last snapshot (a rolling restart re-logs an election
   made minutes earlier). Leader epochs only
   grow, so a line electing leader epoch b is a replay when the partition was seen before
   it (by more than the clock skew) at an epoch above b, or at b itself more than a
   minute before (`ELECTION_MERGE_MS`, the span of one election's lines: that election
   was logged then). The sightings
   (`LeaderEpochSeen`) are the brokers' "starts at leader epoch E" lines and earlier
   election lines. A replayed line still accounts for a meter tick (the replaying
   controller's meter counts it again) but makes no finding.
1-2. The lost range [lost_from, lost_until) (the offsets the old leader had acknowledged
   that the new leader never had) and the groups that had read into it:
   detectors/lost_range.py.
3. log_truncation findings: every truncation below its high watermark (committed data
   removed). Truncations without a high watermark are routine (a follower dropping an
   uncommitted tail after a leader change) and are only used as evidence above.
4. Meter only: ticks of the meter that the logged elections do not account for (each
   logged election between the tick's two samples, widened by `meter_match_window_s`,
   accounts for one count) give a
   cluster-level finding with partitions "unknown"; truncations below the high watermark
   near the tick are listed as candidate partitions.

Scoring: unclean_election is critical, unless the lost range is known and empty (the
elected replica had every record up to the old high watermark: the controller logged an
unclean election, but nothing committed was lost), then warning; log_truncation high.
When the elected replica was the partition's last in-sync one (a sole replica back after
its broker went down, which a 4.x controller elects from the last known ELR and logs as
unclean: detectors/lost_range.py), the cause is last_in_sync_replica_elected and the
range is judged against its own log end.
An end offset sampled after the election equal to the last one before it (no writes in
between) counts as an empty range; one past it leaves the start unknown (new writes).
Unfixable: lost data cannot be brought back by kmon; every finding here suggests page_human.

Config keys ([unclean_election] section, `UncleanElectionSection`):

- truncation_window_s = 3600: how long after an election a truncation still belongs to
  it (the old leader truncates when it comes back, which may take an hour).
- meter_match_window_s = 120: how far outside a meter tick's sample interval a logged
  election may be and still account for it (clock and log-shipping skew).
- max_groups_listed = 50: groups named per list in the evidence (the counts are exact).
- unlogged_after_s = 90: a meter rise no log line accounts for becomes a meter-only finding
  only once it is this old (evaluations pass now_ms): in KRaft the controller does log the
  election, but its line reaches the lake through the log agent and the pipeline, often
  after the JMX sample that counted it, and reporting at once gave two CRITICAL findings
  (one "partitions unknown") for one election in the demo.
- in_sync_wait_s = 30: an election of the partition's last in-sync replica (named in the
  controller's last known ELR) whose range is not settled yet waits up to this long for the
  elected broker's start line (`waits_for_in_sync_evidence`): the controller's log and the
  broker's reach the lake separately, and judging between them would page a critical
  "not known yet" that the next evaluation takes back.

Output: `Detection`s of types unclean_election (entity "<topic>-<p>", or
"cluster:<name>" for meter-only) and log_truncation (entity "<topic>-<p>"); evidence
carries topic and partition (correlation links on them).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Sequence

from core.config_keys import _key
from core.findings import (
    ActionKind,
    AnomalyType,
    Detection,
    EntityKind,
    Severity,
    cluster_entity,
    partition_entity,
)
from detectors.lost_range import (
    GroupsOnRange,
    LeaderEpochSeen,
    LostRange,
    UncleanElection,
    committed_at,
    elected_in_sync_source,
    lost_range,
    place_groups,
    truncations_after,
)
from detectors.partition_signals import (
    CLOCK_SKEW_MS,
    LogTruncation,
    OffsetCommit,
    PartitionOffsets,
    by_partition,
)


class ElectionCause(StrEnum):
    """The `cause` of this detector's findings."""
    UNCLEAN_LEADER_ELECTION = "unclean_leader_election"
    UNCLEAN_LEADER_ELECTION_UNLOGGED = "unclean_leader_election_unlogged"
    # The controller logged an unclean election of the partition's last in-sync replica
    # (a sole replica back after its broker went down): no out-of-sync replica took over.
    LAST_IN_SYNC_REPLICA_ELECTED = "last_in_sync_replica_elected"
    TRUNCATED_BELOW_HIGH_WATERMARK = "truncated_below_high_watermark"


@dataclass(frozen=True)
class UncleanElectionSection:
    truncation_window_s: float = _key("How long after an unclean election a truncation of the "
                                      "partition still belongs to it", 3600.0, min=1,
                                      max=7 * 86400)
    meter_match_window_s: float = _key("How far outside the interval between two samples of "
                                       "the controller's meter (whose count rose) a logged "
                                       "unclean election may be and still account for it",
                                       120.0,
                                       min=1, max=86400)
    max_groups_listed: int = _key("Consumer groups named per list in a finding's evidence", 50,
                                  min=1, max=10000)
    replay_lookback_s: float = _key("How far back a partition's leader epochs are read to tell "
                                    "an election line a restarted controller re-logs (it "
                                    "replays the metadata log since its last snapshot: "
                                    "metadata.log.max.snapshot.interval.ms, 1 h by default) "
                                    "from a new election", 7200.0, min=60, max=7 * 86400)
    unlogged_after_s: float = _key("A rise of the controller's unclean-election meter that no "
                                   "log line accounts for is reported as an unlogged election "
                                   "only once it is this old: the log line comes through the "
                                   "log agent and the pipeline, often after the JMX sample "
                                   "(reporting at once paged twice for one election). 0: at "
                                   "once, for clusters whose controllers never log elections "
                                   "(ZooKeeper mode)", 90.0, min=0, max=3600)
    in_sync_wait_s: float = _key("An election whose elected replica the controller names in "
                                 "the partition's last known ELR (its last in-sync replica, "
                                 "back after going down) waits up to this long for that "
                                 "broker's own \"Leader ... starts ... from offset\" line, "
                                 "which settles what was lost: the controller's and the "
                                 "broker's logs reach the lake separately, and reporting "
                                 "before the broker's line paged a critical 'lost range not "
                                 "known yet' that the next evaluation took back. After it, "
                                 "the finding says what is known. 0: at once", 30.0,
                                 min=0, max=600)


@dataclass(frozen=True)
class UncleanElectionMeterTick:
    """The meter's count rose by count_delta between two samples of one controller: the
    elections it counts happened in (previous_ms, observed_ms]. previous_ms is None when
    the earlier sample's time is not known."""
    cluster: str
    observed_ms: int
    count_delta: float
    controller: int | None = None
    previous_ms: int | None = None

    def could_count(self, event_ms: int, window_ms: int) -> bool:
        """An election logged at event_ms can be one this tick counted: it lies between
        the two samples, give or take window_ms of clock and log-shipping skew. (A scrape
        that fails while brokers restart leaves a long gap: the election may be minutes
        before the sample that saw the count move.)"""
        start = self.observed_ms if self.previous_ms is None else self.previous_ms
        return start - window_ms <= event_ms <= self.observed_ms + window_ms


# Lines of one unclean election (every controller logs the change; the active one also
# logs "Setting new leader ... using an unclean election") fall within this of each other.
ELECTION_MERGE_MS = 60_000


# --- rules -----------------------------------------------------------------------------

def replay_evidence(e: UncleanElection, seen: Iterable[LeaderEpochSeen],
                    merge_ms: int = ELECTION_MERGE_MS) -> LeaderEpochSeen | None:
    """The sighting that shows e's line re-logs an election already made (step 0), or None:
    the partition at a higher epoch before the line, or at e's epoch well before it."""
    if e.leader_epoch is None:
        return None
    for s in sorted(seen, key=lambda s: s.event_ms):
        if (s.cluster, s.topic, s.partition) != (e.cluster, e.topic, e.partition):
            continue
        if s.leader_epoch > e.leader_epoch and s.event_ms < e.event_ms - CLOCK_SKEW_MS:
            return s
        if s.leader_epoch == e.leader_epoch and s.event_ms < e.event_ms - merge_ms:
            return s
    return None


def unexplained_meter_ticks(ticks: Sequence[UncleanElectionMeterTick],
                            elections: Sequence[UncleanElection],
                            window_ms: int) -> list[tuple[UncleanElectionMeterTick, int]]:
    """Meter ticks the logged elections do not account for, with the unexplained count.

    Each logged election accounts for one count of a tick whose sample interval (widened
    by the window) holds it;
    what remains happened without a log line (a ZooKeeper-mode controller).
    """
    unmatched = sorted(elections, key=lambda e: e.event_ms)
    out = []
    for tick in sorted(ticks, key=lambda t: t.observed_ms):
        need = int(round(tick.count_delta))
        if need <= 0:
            continue
        near = [e for e in unmatched if tick.could_count(e.event_ms, window_ms)]
        for e in near[:need]:
            unmatched.remove(e)
        left = need - min(need, len(near))
        if left > 0:
            out.append((tick, left))
    return out


def waits_for_in_sync_evidence(e: UncleanElection, r: LostRange,
                               seen: Sequence[LeaderEpochSeen],
                               config: UncleanElectionSection, now_ms: int | None) -> bool:
    """Hold back, for now, the finding of an election of the partition's last in-sync
    replica whose range is not settled yet: the elected broker's start line (its exact log
    end) has not reached the lake, and the election is younger than in_sync_wait_s. Only
    that line settles the range of such an election (lost_range.lost_range_end): judged
    without it, a critical "the lost range is not known yet" would page, and the next
    evaluation, with the line in, take it back to a warning. An out-of-sync replica's
    election is never held (its loss is likely, and a page should not wait)."""
    if now_ms is None or config.in_sync_wait_s <= 0:
        return False
    if r.lost_until_source.startswith("elected_"):
        return False
    if elected_in_sync_source(e, seen) is None:
        return False
    return now_ms - e.event_ms < config.in_sync_wait_s * 1000


# --- detections ------------------------------------------------------------------------

def _listed(pairs: list[tuple[str, int]], limit: int) -> list[dict]:
    return [{"group": g, "committed_offset": o} for g, o in pairs[:limit]]


def election_detection(e: UncleanElection, r: LostRange, groups: GroupsOnRange,
                       config: UncleanElectionSection) -> Detection:
    n = config.max_groups_listed
    lost = r.messages_lost
    if lost == 0:
        what = (f"it had every record up to the old high watermark {r.lost_until}, so no "
                f"committed data was lost")
    elif lost is not None:
        what = f"offsets [{r.lost_from}, {r.lost_until}) ({lost} messages) were lost"
    elif r.lost_from is not None:
        what = f"data from offset {r.lost_from} on was lost (the old high watermark is unknown)"
    else:
        what = "the lost range is not known yet"
    affected = [g for g, _ in groups.inside + groups.beyond]
    who = (f"; groups past the new end: {', '.join(affected[:5])}"
           f"{' and more' if len(affected) > 5 else ''}" if affected else "")
    leaders = f"{e.old_leader if e.old_leader is not None else '?'} -> " \
              f"{e.new_leader if e.new_leader is not None else '?'}"
    in_sync = r.lost_until_source.startswith("elected_")
    if in_sync:
        how = ("the controller names it in the last known ELR"
               if r.lost_until_source == "elected_last_known_elr" else
               "it was the partition's last leader")
        opening = (f"The controller logged an unclean election of {e.topic}-{e.partition}, "
                   f"but broker {e.new_leader} was its last in-sync replica ({how}), "
                   f"back after going down (leader {leaders})")
    else:
        opening = (f"An out-of-sync replica became leader of {e.topic}-{e.partition} "
                   f"(leader {leaders})")
    return Detection(
        cluster=e.cluster, type=AnomalyType.UNCLEAN_ELECTION,
        # Severity follows what was lost: critical while a loss is proven or cannot be
        # ruled out yet; an election the controller calls unclean that removed no
        # committed record is worth a ticket (the ISR was bypassed), not a data-loss page.
        severity=Severity.WARNING if lost == 0 else Severity.CRITICAL,
        entity_kind=EntityKind.PARTITION, entity=partition_entity(e.topic, e.partition),
        first_seen_ms=e.event_ms, last_seen_ms=e.event_ms,
        cause=(ElectionCause.LAST_IN_SYNC_REPLICA_ELECTED if in_sync
               else ElectionCause.UNCLEAN_LEADER_ELECTION),
        explanation=f"{opening}: {what}{who}.",
        suggested_action=ActionKind.PAGE_HUMAN,
        evidence={"topic": e.topic, "partition": e.partition, "old_leader": e.old_leader,
                  "new_leader": e.new_leader, "leader_epoch": e.leader_epoch,
                  "last_known_elr": list(e.last_known_elr) if e.last_known_elr is not None
                  else None,
                  "election_ms": e.event_ms, "lost_from": r.lost_from,
                  "lost_from_source": r.lost_from_source, "lost_until": r.lost_until,
                  "lost_until_source": r.lost_until_source, "messages_lost": lost,
                  "groups_inside": _listed(groups.inside, n),
                  "groups_beyond": _listed(groups.beyond, n),
                  "groups_behind": _listed(groups.behind, n),
                  "groups_unplaced": _listed(groups.unknown, n),
                  "groups_inside_count": len(groups.inside),
                  "groups_beyond_count": len(groups.beyond),
                  "groups_behind_count": len(groups.behind)})


def truncation_detection(t: LogTruncation) -> Detection:
    discarded = t.high_watermark - t.truncated_to
    return Detection(
        cluster=t.cluster, type=AnomalyType.LOG_TRUNCATION, severity=Severity.HIGH,
        entity_kind=EntityKind.PARTITION, entity=partition_entity(t.topic, t.partition),
        first_seen_ms=t.event_ms, last_seen_ms=t.event_ms,
        cause=ElectionCause.TRUNCATED_BELOW_HIGH_WATERMARK,
        explanation=(f"Broker {t.broker} truncated {t.topic}-{t.partition} to offset "
                     f"{t.truncated_to}, below its high watermark {t.high_watermark}: "
                     f"{discarded} committed messages were removed."),
        suggested_action=ActionKind.PAGE_HUMAN,
        evidence={"topic": t.topic, "partition": t.partition, "broker": t.broker,
                  "truncated_to": t.truncated_to, "high_watermark": t.high_watermark,
                  "messages_discarded": discarded, "truncation_ms": t.event_ms})


def meter_only_detection(tick: UncleanElectionMeterTick, count: int,
                         truncations: Sequence[LogTruncation], before_ms: int,
                         after_ms: int) -> Detection:
    # The election happened between the previous sample and this one; its truncations
    # follow it, as late as the old leader's return.
    candidates = sorted({partition_entity(t.topic, t.partition) for t in truncations
                         if t.cluster == tick.cluster and t.below_high_watermark
                         and tick.observed_ms - before_ms <= t.event_ms
                         <= tick.observed_ms + after_ms})
    hint = (f"; partitions truncated below their high watermark nearby: "
            f"{', '.join(candidates[:5])}" if candidates else "")
    return Detection(
        cluster=tick.cluster, type=AnomalyType.UNCLEAN_ELECTION, severity=Severity.CRITICAL,
        entity_kind=EntityKind.CLUSTER, entity=cluster_entity(tick.cluster),
        first_seen_ms=tick.observed_ms, last_seen_ms=tick.observed_ms,
        cause=ElectionCause.UNCLEAN_LEADER_ELECTION_UNLOGGED,
        explanation=(f"The controller counted {count} unclean leader election(s) that no log "
                     f"line names (a ZooKeeper-mode controller logs none): partitions "
                     f"unknown{hint}."),
        suggested_action=ActionKind.PAGE_HUMAN,
        evidence={"partitions": "unknown", "count": count, "controller": tick.controller,
                  "meter_observed_ms": tick.observed_ms, "candidate_partitions": candidates})


def detect_unclean_elections(elections: Iterable[UncleanElection], *,
                             meter_ticks: Iterable[UncleanElectionMeterTick] = (),
                             truncations: Iterable[LogTruncation] = (),
                             offsets: Iterable[PartitionOffsets] = (),
                             commits: Iterable[OffsetCommit] = (),
                             leader_epochs: Iterable[LeaderEpochSeen] = (),
                             config: UncleanElectionSection | None = None,
                             now_ms: int | None = None) -> list[Detection]:
    """unclean_election and log_truncation detections for everything in the input.
    `leader_epochs`: the partitions' leader epochs seen (step 0: re-logged elections make
    no finding). `now_ms`: the evaluation time; meter ticks younger than unlogged_after_s
    then wait for their log line (None: every tick is judged now, as in a replay of a
    closed range)."""
    config = config or UncleanElectionSection()
    elections = list(elections)
    epochs_by_tp: dict[tuple[str, str, int], list[LeaderEpochSeen]] = defaultdict(list)
    for s in leader_epochs:
        epochs_by_tp[(s.cluster, s.topic, s.partition)].append(s)
    truncations = list(truncations)
    truncations_by_tp = by_partition(truncations, lambda t: t.event_ms)
    offsets_by_tp = by_partition(offsets, lambda o: o.observed_ms)
    commits_by_tp = by_partition(commits, lambda c: c.commit_ms)
    window_ms = int(config.truncation_window_s * 1000)

    detections = [truncation_detection(t) for t in truncations if t.below_high_watermark]
    for e in sorted(elections, key=lambda e: e.event_ms):
        tp = (e.cluster, e.topic, e.partition)
        if replay_evidence(e, epochs_by_tp.get(tp, [])) is not None:
            continue
        related = truncations_after(e, truncations_by_tp.get(tp, []), window_ms)
        r = lost_range(e, related, offsets_by_tp.get(tp, []), epochs_by_tp.get(tp, []))
        if waits_for_in_sync_evidence(e, r, epochs_by_tp.get(tp, []), config, now_ms):
            continue
        groups = place_groups(committed_at(commits_by_tp.get(tp, []), e.event_ms), r)
        detections.append(election_detection(e, r, groups, config))

    elections_by_cluster: dict[str, list[UncleanElection]] = defaultdict(list)
    for e in elections:
        elections_by_cluster[e.cluster].append(e)
    ticks_by_cluster: dict[str, list[UncleanElectionMeterTick]] = defaultdict(list)
    settled_ms = None if now_ms is None else now_ms - int(config.unlogged_after_s * 1000)
    for t in meter_ticks:
        if settled_ms is None or t.observed_ms <= settled_ms:
            ticks_by_cluster[t.cluster].append(t)
    match_ms = int(config.meter_match_window_s * 1000)
    for cluster, ticks in sorted(ticks_by_cluster.items()):
        for tick, count in unexplained_meter_ticks(ticks, elections_by_cluster[cluster], match_ms):
            detections.append(meter_only_detection(tick, count, truncations, match_ms,
                                                      window_ms))
    return detections
