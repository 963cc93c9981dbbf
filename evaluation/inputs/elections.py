"""The unclean-election detector's inputs: the controllers' election lines and their
unclean-election meter.

- `UncleanElection` <- silver.log_events kind unclean_election from meter_match_window_s
  before start_ms (so a meter tick just inside the range finds its line); a line that
  names only a topic id gets its topic from another line of the range that names both;
  lines of one election are merged (`dedupe_elections`).
- `LeaderEpochSeen` <- silver.log_events kind leader_change (a broker's "starts at leader
  epoch E") and unclean_election (the epoch elected) of the elected partitions, over
  replay_lookback_s before the range: what tells a line a restarted controller re-logs
  from a new election (`read_leader_epochs`).
- `UncleanElectionMeterTick` <- silver.broker_metrics
  kafka_controller_controllerstats_uncleanleaderelectionspersec_count differenced per
  controller (negative deltas dropped: a restarted controller starts from zero). In KRaft
  every controller's meter counts the same election as it replays the metadata log, so
  ticks of different controllers close in time are one set of elections
  (`merge_controller_ticks`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from detectors.lost_range import EPOCH_KINDS, LeaderEpochSeen, UncleanElection
from detectors.unclean_election import ELECTION_MERGE_MS, UncleanElectionMeterTick
from infra.lake_sql import LakeSql, marks, range_sql
from evaluation.inputs.tables import TimeRange, broker_metrics, sorted_rows

log = logging.getLogger(__name__)

UNCLEAN_METER = "kafka_controller_controllerstats_uncleanleaderelectionspersec_count"
COUNTER_SEED_S = 600   # meter scrapes read before the range: the first delta's base

Line = Mapping[str, Any]   # one silver.log_events row


# --- election lines ----------------------------------------------------------------------------

def topic_ids(rows: Iterable[Line]) -> dict[tuple[str, str], str]:
    """(cluster, topic_id) -> topic, from the log lines that name both."""
    out: dict[tuple[str, str], str] = {}
    for r in rows:
        if r.get("topic_id") and r.get("topic"):
            out[(r["cluster"], r["topic_id"])] = r["topic"]
    return out


def dedupe_elections(rows: Iterable[Line], topics: Mapping[tuple[str, str], str],
                     merge_window_ms: int = ELECTION_MERGE_MS) -> list[UncleanElection]:
    """One UncleanElection per election from its several log lines (log_events rows).

    Every controller logs "UNCLEAN partition change ... leaderEpoch: a -> b" as it replays
    the change, and the active one also logs "Setting new leader for topicId ... using an
    unclean election" (topic id only, no epoch) and, from 3.9, "Triggering unclean leader
    election" (no leaders, no epoch). The first two name the last known ELR (4.x). Lines
    are one election when they name the same partition and either the same leader epoch,
    or no epoch and fall within merge_window_ms of a line of that election. A line whose
    topic cannot be resolved from its topic id is dropped (logged). The earliest line's time
    is the election's; leaders
    and epoch come from whichever line gives them.
    """
    out: list[UncleanElection] = []
    for (cluster, topic, partition), lines in sorted(_lines_by_partition(rows, topics).items()):
        for g in _one_election_each(sorted(lines, key=lambda r: int(r["ts_ms"])),
                                    merge_window_ms):
            g.sort(key=lambda r: int(r["ts_ms"]))
            out.append(UncleanElection(
                cluster=cluster, topic=topic, partition=partition,
                event_ms=int(g[0]["ts_ms"]),
                old_leader=_first(g, "old_leader"), new_leader=_first(g, "new_leader"),
                leader_epoch=_first(g, "leader_epoch"),
                last_known_elr=next((tuple(r["last_known_elr"]) for r in g
                                     if r.get("last_known_elr") is not None), None)))
    return sorted(out, key=lambda e: (e.event_ms, e.cluster, e.topic, e.partition))


def _lines_by_partition(rows: Iterable[Line], topics: Mapping[tuple[str, str], str]
                        ) -> dict[tuple[str, str, int], list[Line]]:
    """(cluster, topic, partition) -> its lines; a line whose topic is unknown is logged
    and left out."""
    by_tp: dict[tuple[str, str, int], list[Line]] = defaultdict(list)
    for r in rows:
        topic = r.get("topic") or topics.get((r["cluster"], r.get("topic_id") or ""))
        if topic is None or r.get("partition") is None:
            log.warning("unclean election line without a resolvable topic (topic id %s) at %s "
                        "on broker %s: left out", r.get("topic_id"), r.get("ts_ms"),
                        r.get("broker"))
            continue
        by_tp[(r["cluster"], topic, int(r["partition"]))].append(r)
    return by_tp


def _one_election_each(lines: Sequence[Line], merge_window_ms: int) -> list[list[Line]]:
    """One partition's lines (in time order) grouped one election per group: lines with an
    epoch by epoch, then each line without one joins the group with the nearest line if
    that is within merge_window_ms, else starts its own."""
    groups: list[list[Line]] = []
    by_epoch: dict[int, list[Line]] = {}
    for r in (x for x in lines if x.get("leader_epoch") is not None):
        g = by_epoch.get(int(r["leader_epoch"]))
        if g is None:
            g = by_epoch[int(r["leader_epoch"])] = []
            groups.append(g)
        g.append(r)
    for r in (x for x in lines if x.get("leader_epoch") is None):
        t = int(r["ts_ms"])
        near = [g for g in groups
                if min(abs(int(x["ts_ms"]) - t) for x in g) <= merge_window_ms]
        if near:
            min(near, key=lambda g: min(abs(int(x["ts_ms"]) - t) for x in g)).append(r)
        else:
            groups.append([r])
    return groups


def _first(rows: Sequence[Line], key: str) -> int | None:
    return next((int(r[key]) for r in rows if r.get(key) is not None), None)


# --- leader epochs seen ------------------------------------------------------------------------

def leader_epochs_from(rows: Iterable[Line], topics: Mapping[tuple[str, str], str]
                       ) -> list[LeaderEpochSeen]:
    """The leader epochs the log lines show (rows without an epoch or a resolvable topic
    are left out)."""
    out = []
    for r in rows:
        if r.get("kind") not in EPOCH_KINDS or r.get("leader_epoch") is None:
            continue
        topic = r.get("topic") or topics.get((r["cluster"], r.get("topic_id") or ""))
        if topic is None or r.get("partition") is None:
            continue
        broker_line = r["kind"] == "leader_change"
        out.append(LeaderEpochSeen(
            r["cluster"], topic, int(r["partition"]), int(r["leader_epoch"]), int(r["ts_ms"]),
            r["kind"], broker=r.get("broker") if broker_line else None,
            leader=r.get("new_leader") if broker_line else None,
            log_end=r.get("offset") if broker_line else None,
            high_watermark=r.get("high_watermark") if broker_line else None))
    return out


def read_leader_epochs(sql: LakeSql, r: TimeRange,
                       tps: set[tuple[str, str, int]],
                       topics: Mapping[tuple[str, str], str]) -> list[LeaderEpochSeen]:
    """The leader epochs seen of these (cluster, topic, partition)s in the range: read
    only when an election line is in the evaluation (rare), over the long lookback."""
    ds = sql.dataset("silver", "log_events", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None or not tps:
        return []
    topic_names = sorted({t for _, t, _ in tps})
    ids = sorted({i for (c, i), t in topics.items() if t in topic_names}) or [""]
    where, params = range_sql(r.start_ms, r.end_ms)
    rows = sql.rows(
        'SELECT cluster, broker, kind, ts_ms, topic, topic_id, "partition", leader_epoch, '
        f'new_leader, "offset", high_watermark FROM t WHERE {where} '
        f"AND kind IN ({marks(EPOCH_KINDS)}) AND leader_epoch IS NOT NULL "
        f"AND (topic IN ({marks(topic_names)}) OR topic_id IN ({marks(ids)}))",
        [*params, *EPOCH_KINDS, *topic_names, *ids], t=ds)
    rows = sorted_rows(rows, ("ts_ms", "cluster", "broker", "kind", "topic", "partition"))
    return [s for s in leader_epochs_from(rows, topics)
            if (s.cluster, s.topic, s.partition) in tps]


# --- the controllers' meter ------------------------------------------------------------------

def merge_controller_ticks(ticks: Iterable[UncleanElectionMeterTick],
                           window_ms: int) -> list[UncleanElectionMeterTick]:
    """Per cluster, one tick per burst of ticks from several controllers.

    A KRaft controller updates its UncleanLeaderElectionsPerSec meter as it replays the
    metadata log, so every controller counts the same election: ticks within window_ms of
    the burst's first tick are one set of elections, counted as the largest total any one
    controller reported in it (at the time of the earliest tick).
    """
    by_cluster: dict[str, list[UncleanElectionMeterTick]] = defaultdict(list)
    for t in ticks:
        by_cluster[t.cluster].append(t)
    out = []
    for cluster, ts in sorted(by_cluster.items()):
        ts.sort(key=lambda t: t.observed_ms)
        burst: list[UncleanElectionMeterTick] = []
        for t in ts + [None]:
            if t is not None and (not burst or t.observed_ms - burst[0].observed_ms <= window_ms):
                burst.append(t)
                continue
            out.append(_burst_tick(cluster, burst))
            burst = [t] if t is not None else []
    return out


def _burst_tick(cluster: str, burst: Sequence[UncleanElectionMeterTick]
                ) -> UncleanElectionMeterTick:
    """A burst's ticks as one: the controller with the largest total (the lowest id on a
    tie), at the earliest tick."""
    totals: dict[int | None, float] = defaultdict(float)
    for b in burst:
        totals[b.controller] += b.count_delta
    controller, count = max(totals.items(), key=lambda kv: (kv[1], -(kv[0] or 0)))
    known = [b.previous_ms for b in burst if b.previous_ms is not None]
    return UncleanElectionMeterTick(cluster=cluster, observed_ms=burst[0].observed_ms,
                                    count_delta=count, controller=controller,
                                    previous_ms=min(known) if known else None)


def read_meter_ticks(sql: LakeSql, r: TimeRange,
                     merge_window_ms: int) -> list[UncleanElectionMeterTick]:
    source = broker_metrics(sql, r.back(COUNTER_SEED_S), [UNCLEAN_METER])
    if source is None:
        return []
    query, params, ds = source
    rows = sql.rows(
        "SELECT cluster, broker, ts_ms, previous_ms, delta FROM (SELECT cluster, broker, ts_ms, "
        "lag(ts_ms) OVER w AS previous_ms, value - lag(value) OVER w AS delta "
        f"FROM ({query}) WINDOW w AS (PARTITION BY cluster, broker ORDER BY ts_ms)) "
        "WHERE ts_ms >= ? AND delta > 0", [*params, r.start_ms],
        t=ds)
    rows = sorted_rows(rows, ("cluster", "broker", "ts_ms"))
    ticks = [UncleanElectionMeterTick(cluster=x["cluster"], observed_ms=int(x["ts_ms"]),
                                      count_delta=float(x["delta"]), controller=int(x["broker"]),
                                      previous_ms=int(x["previous_ms"]))
             for x in rows]
    return merge_controller_ticks(ticks, merge_window_ms)
