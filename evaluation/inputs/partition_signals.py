"""The offset-rewind and unclean-election detectors' partition signals: group commits,
partition offsets, client resets, log truncations and group membership.

- `OffsetCommit` <- silver.offset_commits without tombstones, commit_ms = commit_ts_ms
  (ts_ms when null), in the order the coordinator wrote them (source_partition,
  source_offset: its clock can step back, its log cannot), then commit_ms; per group and
  partition the last commit of the COMMIT_SEED_S before start_ms is kept as the starting
  position. Only the group/partitions that matter are collected: those whose committed
  offset went down in the range (found with a window function), those a client
  reset line names, and every group on a partition with an unclean election. The live
  detector keeps those starting positions between evaluations (`CommitSeedCache`) and
  reads silver from a minute boundary before the range only.
- `PartitionOffsets` <- silver.partition_offsets (observed_ms = ts_ms, end_offset =
  latest_offset, log_start_offset = earliest_offset) for the partitions collected above
  and those with a truncation, from evidence_window_s before start_ms.
- `ClientOffsetReset` <- silver.client_offset_events with `client_event_meaning`, from
  evidence_window_s before start_ms (a reset shortly before a rewind explains it).
- `LogTruncation` <- silver.log_events kind truncation (truncated_to = offset), from
  evidence_window_s before start_ms.
- `GroupMembership` <- silver.group_members (the coordinator's GroupMetadata records: one
  per rebalance, one with no members when the group empties) for the groups of the
  collected commits. A record is the group's state until the next one, so the last record
  before the range is carried forward to the range start (observed_ms = start_ms): the
  rule's membership_max_age_s is about polled samples, and a change log is never stale.
  Groups of the KIP-848 protocol write other records and get no membership.
- `CommitRequest` <- silver.request_stages api_key 8 (OffsetCommit), one per element of
  `committed` (group = group_id, member_id, generation, client_id, broker, request_ms =
  ts_ms), for the groups of the collected commits, from evidence_window_s before
  start_ms: who committed each offset. Every partition of those groups is kept (the
  newest generation a group used comes from all of them).
- `OffsetRemoval` <- silver.offset_commits tombstones in the range (removed_ms = ts_ms,
  the last per group and partition), each with the group's last commit there before it
  (position): read over COMMIT_SEED_S first, then, for those not found, over
  POSITION_LOOKBACK_S (the coordinator expires an empty group's offsets only after
  offsets.retention.minutes, 7 days by default), only for partitions still sampled
  after the removal (a topic's deletion removes its offsets too); kept by `commit_seed`
  between evaluations (a removed position does not change).
- `CoordinatorLoad` <- silver.log_events kind coordinator_load (offsets_partition =
  partition, leader_epoch), from evidence_window_s before start_ms; the commits carry
  their group's __consumer_offsets partition (OffsetCommit.source_partition).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from detectors.vanished_offsets import DELETE_APIS, DELETE_REQUEST_WINDOW_MS, OffsetRemoval
from detectors.partition_signals import (
    ClientOffsetReset,
    CommitRequest,
    CoordinatorLoad,
    GroupMembership,
    LogTruncation,
    OffsetCommit,
    PartitionOffsets,
    client_event_meaning,
)
from core.signals_sql import in_names_sql
from infra.lake_sql import LakeSql, range_sql
from evaluation.inputs.tables import TimeRange, int_or_none, sorted_rows

COMMIT_SEED_S = 3600   # commits read before the range: each group/partition's start
# How far back a removed offset's last commit is looked for: offsets.retention.minutes'
# default (7 days, after which an empty group's offsets expire) and a day.
POSITION_LOOKBACK_S = 8 * 86400

COMMIT_KEY = ("cluster", "group_id", "topic", "partition")
# The coordinator's log order (detectors/partition_signals.py `log_order`), not its clock.
COMMIT_ORDER = ("source_partition", "source_offset", "commit_ms")


# --- client resets ---------------------------------------------------------------------------

def client_reset_from_row(row: Mapping[str, Any]) -> ClientOffsetReset:
    """One silver.client_offset_events row as the rules' ClientOffsetReset."""
    reason, target = client_event_meaning(row["kind"], row.get("reset_target"), row.get("reason"))
    return ClientOffsetReset(
        cluster=row["cluster"], topic=row["topic"], partition=int(row["partition"]),
        event_ms=int(row["ts_ms"]), group=row.get("group_id"), client_id=row.get("client_id"),
        from_offset=int_or_none(row.get("from_offset")),
        to_offset=int_or_none(row.get("to_offset")), target=target, reason=reason)


def read_resets(sql: LakeSql, r: TimeRange) -> list[ClientOffsetReset]:
    ds = sql.dataset("silver", "client_offset_events", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return []
    where, params = range_sql(r.start_ms, r.end_ms)
    rows = sql.rows("SELECT cluster, ts_ms, client_id, group_id, topic, partition, kind, "
                    "from_offset, to_offset, reset_target, reason FROM t "
                    f"WHERE {where}", params, t=ds)
    return [client_reset_from_row(x) for x in sorted_rows(rows, ("ts_ms",))]


# --- log truncations (from silver.log_events) ------------------------------------------------

def truncations_from(rows: Iterable[Mapping[str, Any]], since_ms: int) -> list[LogTruncation]:
    return sorted((LogTruncation(cluster=x["cluster"], broker=int(x["broker"]), topic=x["topic"],
                                 partition=int(x["partition"]), event_ms=int(x["ts_ms"]),
                                 truncated_to=int(x["offset"]),
                                 high_watermark=int_or_none(x.get("high_watermark")))
                   for x in rows
                   if x["kind"] == "truncation" and int(x["ts_ms"]) >= since_ms
                   and x.get("topic") and x.get("partition") is not None
                   and x.get("offset") is not None),
                  key=lambda t: (t.event_ms, t.cluster, t.topic, t.partition, t.broker,
                                 t.truncated_to, t.high_watermark is not None,
                                 t.high_watermark or 0))


# --- group coordinator loads (from silver.log_events) ----------------------------------------

def coordinator_loads_from(rows: Iterable[Mapping[str, Any]],
                           since_ms: int) -> list[CoordinatorLoad]:
    return sorted((CoordinatorLoad(cluster=x["cluster"], broker=int(x["broker"]),
                                   offsets_partition=int(x["partition"]),
                                   event_ms=int(x["ts_ms"]),
                                   leader_epoch=int_or_none(x.get("leader_epoch")))
                   for x in rows
                   if x["kind"] == "coordinator_load" and int(x["ts_ms"]) >= since_ms
                   and x.get("partition") is not None),
                  key=lambda t: (t.event_ms, t.cluster, t.offsets_partition, t.broker))


# --- who committed (OffsetCommit lines of silver.request_stages) -----------------------------

def commit_request_from_row(x: Mapping[str, Any]) -> CommitRequest:
    """One exploded row (a request's columns and one `committed` element's topic,
    partition and offset) as the rules' CommitRequest."""
    return CommitRequest(cluster=x["cluster"], group=x["group_id"], topic=x["topic"],
                         partition=int(x["partition"]), offset=int(x["offset"]),
                         request_ms=int(x["ts_ms"]), member_id=x.get("member_id"),
                         generation=int_or_none(x.get("generation")),
                         client_id=x.get("client_id"), broker=int_or_none(x.get("broker")),
                         failed=bool(x.get("error_codes")),
                         total_ms=float(x.get("total_ms") or 0.0))


def read_commit_requests(sql: LakeSql, r: TimeRange,
                         groups: Iterable[tuple[str, str]]) -> list[CommitRequest]:
    """The OffsetCommit request-log lines of the given (cluster, group)s in the range, one
    per committed partition (a line naming its topic by id only is left out)."""
    wanted = sorted(set(groups))
    ds = (sql.dataset("silver", "request_stages", start_ms=r.start_ms, end_ms=r.end_ms)
          if wanted else None)
    if ds is None or "committed" not in ds.schema.names:
        return []
    where, params = range_sql(r.start_ms, r.end_ms)
    rows = sql.rows(
        "SELECT cluster, broker, ts_ms, group_id, member_id, generation, client_id, "
        'error_codes, total_ms, c.topic AS topic, c.partition AS partition, c."offset" AS "offset" '
        "FROM (SELECT s.*, unnest(s.committed) AS c FROM t AS s "
        "SEMI JOIN k ON s.cluster = k.cluster AND s.group_id = k.group_id "
        f"WHERE {where} AND s.api_key = 8 AND s.group_id IS NOT NULL) "
        "WHERE c.topic IS NOT NULL", params, t=ds, k=_keys(wanted, ("cluster", "group_id")))
    return [commit_request_from_row(x)
            for x in sorted_rows(rows, ("cluster", "group_id", "ts_ms", "broker", "topic",
                                        "partition", "offset", "member_id", "generation",
                                        "client_id", "total_ms"))]


def _keys(rows: Sequence[tuple], names: Sequence[str]) -> pa.Table:
    """Keys to join a read to, as an Arrow table of `names` (strings, partition int)."""
    types = {"partition": pa.int32()}
    return pa.table({n: pa.array([k[i] for k in rows], types.get(n, pa.string()))
                     for i, n in enumerate(names)})


# --- commits ---------------------------------------------------------------------------------

def read_commits(sql: LakeSql, r: TimeRange,
                 partitions: Iterable[tuple[str, str, int]] = (),
                 group_partitions: Iterable[tuple[str, str, str, int]] = (),
                 seed: "CommitSeedCache | None" = None) -> list[OffsetCommit]:
    """Commits of the group/partitions that went down in the range, plus those of the given
    partitions (every group) and group/partitions; each with its last commit before the
    range as its starting position. `seed`: the live detector's starting positions (None
    reads COMMIT_SEED_S of silver before the range)."""
    if not sql.exists("silver", "offset_commits"):
        return []
    rows = (_commit_rows(sql, r.back(COMMIT_SEED_S)) if seed is None
            else seed.commits(sql, r))
    tps = sorted(set(partitions))
    gtps = sorted(set(group_partitions))
    key = ", ".join(COMMIT_KEY)
    # Nulls ordered as Spark orders them: first ascending, last descending.
    asc = ", ".join(f"{c} ASC NULLS FIRST" for c in COMMIT_ORDER)
    desc = ", ".join(f"{c} DESC NULLS LAST" for c in COMMIT_ORDER)
    found = sql.rows(
        # the range's commits and, per group and partition, the last one before it
        f"WITH kept AS (SELECT * FROM (SELECT *, ts_ms < ? AS _pre, row_number() OVER "
        f"(PARTITION BY {key}, ts_ms < ? ORDER BY {desc}) AS _rn FROM c) "
        "WHERE NOT _pre OR _rn = 1), "
        # went down at some commit
        f"lagged AS (SELECT *, coalesce(\"offset\" < lag(\"offset\") OVER (PARTITION BY {key} "
        f"ORDER BY {asc}), false) AS _drop FROM kept), "
        f"marked AS (SELECT *, bool_or(_drop) OVER (PARTITION BY {key}) AS _down FROM lagged) "
        f"SELECT {key}, \"offset\", commit_ms, leader_epoch, source_partition, source_offset "
        "FROM marked WHERE _down "
        "OR EXISTS (SELECT 1 FROM tp WHERE tp.cluster = marked.cluster "
        "AND tp.topic = marked.topic AND tp.partition = marked.partition) "
        "OR EXISTS (SELECT 1 FROM gtp WHERE gtp.cluster = marked.cluster "
        "AND gtp.group_id = marked.group_id AND gtp.topic = marked.topic "
        "AND gtp.partition = marked.partition)",
        [r.start_ms, r.start_ms], c=rows, tp=_keys(tps, ("cluster", "topic", "partition")),
        gtp=_keys(gtps, COMMIT_KEY))
    return [OffsetCommit(cluster=x["cluster"], group=x["group_id"], topic=x["topic"],
                         partition=int(x["partition"]), offset=int(x["offset"]),
                         commit_ms=int(x["commit_ms"]),
                         leader_epoch=int_or_none(x["leader_epoch"]),
                         source_partition=int_or_none(x["source_partition"]),
                         source_offset=int_or_none(x["source_offset"]))
            for x in sorted_rows(found, (*COMMIT_KEY, *COMMIT_ORDER))]


_COMMIT_COLUMNS = (f"{', '.join(COMMIT_KEY)}, \"offset\", ts_ms, leader_epoch, source_partition, "
                   "source_offset, coalesce(commit_ts_ms, ts_ms) AS commit_ms")


def _commit_rows(sql: LakeSql, r: TimeRange) -> pa.Table:
    """silver.offset_commits rows of the range that set an offset (tombstones and null
    offsets left out), with commit_ms, in the columns the commit read uses (the table
    exists: the caller checked)."""
    where, params = range_sql(r.start_ms, r.end_ms)
    return sql.table(f"SELECT {_COMMIT_COLUMNS} FROM t WHERE {where} "
                     "AND NOT is_tombstone AND \"offset\" IS NOT NULL", params,
                     t=sql.dataset("silver", "offset_commits", start_ms=r.start_ms,
                                   end_ms=r.end_ms))


class CommitSeedCache:
    """The live detector's commit read, incremental. Every evaluation needs each group and
    partition's last commit before its range (its starting position), over COMMIT_SEED_S:
    read whole, that is an hour of silver.offset_commits, hundreds of small files on a
    live lake. Through Spark on a loaded host that read took more than half of each
    evaluation, and the rewinds' findings waited for it.

    This keeps, per group and partition, the last commit before a boundary (the range
    start rounded down to `step_s`) in memory (an Arrow table): an evaluation reads
    silver from the boundary on (its range and at most `step_s` more), and a seed row more
    than COMMIT_SEED_S before the range start is left out, as the whole read leaves it.
    When the boundary moves on, the new seed is the last per group and partition of the old
    one and the rows between the two boundaries. What it gives up: a commit that reaches
    silver after the boundary passed its record time (at least the lookback late) is not in
    the seed. A range that starts before the boundary (a restart of the query, a clock
    stepped back) builds the seed again from a whole read. One detector query's evaluations
    use it one at a time."""

    def __init__(self, step_s: float = 60.0):
        if step_s <= 0:
            raise ValueError(f"step_s must be > 0, not {step_s!r}")
        self.step_ms = int(step_s * 1000)
        self._lock = threading.Lock()
        self._seed: pa.Table | None = None
        self._until_ms = 0            # the seed holds the last commits before this time
        self.positions: dict = {}     # removed offsets' last positions (with_positions)
        self.silver_from_ms: int | None = None   # where the last evaluation's silver read began

    def commits(self, sql: LakeSql, r: TimeRange) -> pa.Table:
        """`_commit_rows` for the range and the COMMIT_SEED_S before it, as far as the range
        and its starting positions go: the seed's rows and silver's from the boundary."""
        boundary = r.start_ms // self.step_ms * self.step_ms
        with self._lock:
            if self._seed is None or boundary < self._until_ms:
                self._seed = _last_per_key(sql, _commit_rows(
                    sql, TimeRange(r.start_ms - COMMIT_SEED_S * 1000, boundary)))
            elif boundary > self._until_ms:
                self._seed = _last_per_key(sql, pa.concat_tables([self._seed, _commit_rows(
                    sql, TimeRange(self._until_ms, boundary))]))
            self._until_ms = boundary
            seed, until = self._seed, self._until_ms
            self.silver_from_ms = until
        return sql.table("SELECT * FROM s WHERE ts_ms >= ? UNION ALL SELECT * FROM n",
                         [r.start_ms - COMMIT_SEED_S * 1000], s=seed,
                         n=_commit_rows(sql, TimeRange(until, r.end_ms)))


def _last_per_key(sql: LakeSql, commits: pa.Table) -> pa.Table:
    """Per group and partition, its last commit."""
    desc = ", ".join(f"{c} DESC NULLS LAST" for c in COMMIT_ORDER)
    return sql.table(f"SELECT * EXCLUDE (_rn) FROM (SELECT *, row_number() OVER (PARTITION BY "
                     f"{', '.join(COMMIT_KEY)} ORDER BY {desc}) AS _rn FROM c) WHERE _rn = 1",
                     c=commits)


# --- removed offsets (tombstones) ------------------------------------------------------------

def read_removals(sql: LakeSql, r: TimeRange) -> list[OffsetRemoval]:
    """The tombstones of the range, the last per group and partition, without positions."""
    ds = sql.dataset("silver", "offset_commits", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return []
    where, params = range_sql(r.start_ms, r.end_ms)
    rows = sql.rows(f"SELECT {', '.join(COMMIT_KEY)}, max(ts_ms) AS removed_ms FROM t "
                    f"WHERE {where} AND is_tombstone AND topic IS NOT NULL "
                    f"GROUP BY ALL", params, t=ds)
    return [OffsetRemoval(cluster=x["cluster"], group=x["group_id"], topic=x["topic"],
                          partition=int(x["partition"]), removed_ms=int(x["removed_ms"]),
                          position=None)
            for x in sorted_rows(rows, COMMIT_KEY)]


def with_positions(sql: LakeSql, removals: Sequence[OffsetRemoval],
                   cache: dict | None = None) -> list[OffsetRemoval]:
    """Each removal with its group's last commit on the partition before it: over
    COMMIT_SEED_S, then POSITION_LOOKBACK_S for the rest; `cache` keeps the answers
    (keyed by removal) across evaluations."""
    cache = {} if cache is None else cache
    todo = [x for x in removals if x not in cache]
    for back_s in (COMMIT_SEED_S, POSITION_LOOKBACK_S):
        if not todo:
            break
        start = min(x.removed_ms for x in todo) - back_s * 1000
        end = max(x.removed_ms for x in todo) + 1
        found = _last_before(sql, TimeRange(start, end), todo)
        for x in todo:
            if found.get(x) is not None or back_s == POSITION_LOOKBACK_S:
                cache[x] = found.get(x)
        todo = [x for x in todo if x not in cache]
    floor = min((x.removed_ms for x in removals), default=None)
    for gone in [x for x in cache if floor is not None and x.removed_ms < floor]:
        del cache[gone]                    # out of every later range
    return [dataclasses.replace(x, position=cache[x][0], position_ms=cache[x][1])
            if cache.get(x) else x for x in removals]


def with_delete_requests(sql: LakeSql, removals: Sequence[OffsetRemoval]
                         ) -> list[OffsetRemoval]:
    """Each removal with the DeleteGroups and OffsetDelete requests its cluster's brokers
    served within DELETE_REQUEST_WINDOW_MS (silver.request_windows), or None where no
    broker of the cluster has request windows then."""
    if not removals:
        return []
    w = DELETE_REQUEST_WINDOW_MS
    r = TimeRange(min(x.removed_ms for x in removals) - w,
                  max(x.removed_ms for x in removals) + w)
    ds = sql.dataset("silver", "request_windows", start_ms=r.start_ms - w, end_ms=r.end_ms)
    if ds is None:
        return list(removals)
    where, params = range_sql(r.start_ms - w, r.end_ms)
    rows = sql.rows("SELECT cluster, ts_ms, ts_ms + window_ms AS end_ms, "
                    f"sum(CASE WHEN {in_names_sql(DELETE_APIS)} "
                    "THEN requests ELSE 0 END) AS deletes FROM t "
                    f"WHERE {where} GROUP BY ALL", params, t=ds)
    out = []
    for x in removals:
        near = [y for y in rows if y["cluster"] == x.cluster
                and y["end_ms"] >= x.removed_ms - w and y["ts_ms"] <= x.removed_ms + w]
        out.append(dataclasses.replace(x, delete_requests_near=(
            sum(int(y["deletes"]) for y in near) if near else None)))
    return out


def _last_before(sql: LakeSql, r: TimeRange, removals: Sequence[OffsetRemoval]
                 ) -> dict[OffsetRemoval, tuple[int, int]]:
    keys = pa.table({"cluster": [x.cluster for x in removals],
                     "group_id": [x.group for x in removals],
                     "topic": [x.topic for x in removals],
                     "partition": pa.array([x.partition for x in removals], pa.int32()),
                     "removed_ms": pa.array([x.removed_ms for x in removals], pa.int64())})
    ds = sql.dataset("silver", "offset_commits", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return {}
    desc = ", ".join(f"c.{c} DESC NULLS LAST" for c in COMMIT_ORDER)
    where, params = range_sql(r.start_ms, r.end_ms)
    rows = sql.rows(
        # the keys' commits only, in the table's own scan (days of every group's commits
        # are never materialized)
        "WITH c AS (SELECT s.*, coalesce(s.commit_ts_ms, s.ts_ms) AS commit_ms FROM t AS s "
        "SEMI JOIN k ON s.cluster = k.cluster AND s.group_id = k.group_id "
        "AND s.topic = k.topic AND s.partition = k.partition "
        f"WHERE {where} AND NOT s.is_tombstone AND s.\"offset\" IS NOT NULL) "
        "SELECT * FROM (SELECT k.cluster, k.group_id, k.topic, k.partition, k.removed_ms, "
        "c.\"offset\" AS position, c.commit_ms, row_number() OVER (PARTITION BY k.cluster, "
        f"k.group_id, k.topic, k.partition, k.removed_ms ORDER BY {desc}) AS _rn "
        "FROM c JOIN k ON c.cluster = k.cluster AND c.group_id = k.group_id "
        "AND c.topic = k.topic AND c.partition = k.partition AND c.ts_ms <= k.removed_ms) "
        "WHERE _rn = 1", params, k=keys, t=ds)
    by_key = {(x.cluster, x.group, x.topic, x.partition, x.removed_ms): x for x in removals}
    return {by_key[(x["cluster"], x["group_id"], x["topic"], int(x["partition"]),
                    int(x["removed_ms"]))]: (int(x["position"]), int(x["commit_ms"]))
            for x in rows}


# --- group membership and partition offsets --------------------------------------------------

def read_memberships(sql: LakeSql, r: TimeRange,
                     groups: Iterable[tuple[str, str]]) -> list[GroupMembership]:
    """Membership changes of the given (cluster, group)s in the range, each group's state
    before the range carried forward to the range start."""
    wanted = sorted(set(groups))
    back = r.back(COMMIT_SEED_S)
    ds = (sql.dataset("silver", "group_members", start_ms=back.start_ms, end_ms=back.end_ms)
          if wanted else None)
    if ds is None:
        return []
    where, params = range_sql(back.start_ms, back.end_ms)
    rows = sql.rows("SELECT s.cluster, s.group_id, ts_ms, source_partition, source_offset, "
                    "member_count FROM t AS s SEMI JOIN k ON s.cluster = k.cluster "
                    f"AND s.group_id = k.group_id WHERE {where}", params, t=ds,
                    k=_keys(wanted, ("cluster", "group_id")))
    out: list[GroupMembership] = []
    before: dict[tuple[str, str], GroupMembership] = {}
    for x in sorted_rows(rows, ("cluster", "group_id", "ts_ms", "source_partition",
                                "source_offset")):
        m = GroupMembership(cluster=x["cluster"], group=x["group_id"],
                            observed_ms=max(int(x["ts_ms"]), r.start_ms),
                            member_count=int(x["member_count"]))
        if x["ts_ms"] < r.start_ms:
            before[(m.cluster, m.group)] = m
        else:
            out.append(m)
    return sorted(list(before.values()) + out, key=lambda m: (m.cluster, m.group, m.observed_ms))


def read_partition_offsets(sql: LakeSql, r: TimeRange,
                           partitions: Iterable[tuple[str, str, int]]) -> list[PartitionOffsets]:
    tps = sorted(set(partitions))
    ds = (sql.dataset("silver", "partition_offsets", start_ms=r.start_ms, end_ms=r.end_ms)
          if tps else None)
    if ds is None:
        return []
    where, params = range_sql(r.start_ms, r.end_ms)
    rows = sql.rows("SELECT s.cluster, s.topic, s.partition, ts_ms, earliest_offset, "
                    "latest_offset FROM t AS s SEMI JOIN k ON s.cluster = k.cluster "
                    "AND s.topic = k.topic AND s.partition = k.partition "
                    f"WHERE {where}", params, t=ds,
                    k=_keys(tps, ("cluster", "topic", "partition")))
    return [PartitionOffsets(cluster=x["cluster"], topic=x["topic"], partition=int(x["partition"]),
                             observed_ms=int(x["ts_ms"]), end_offset=int(x["latest_offset"]),
                             log_start_offset=int_or_none(x["earliest_offset"]))
            for x in sorted_rows(rows, ("cluster", "topic", "partition", "ts_ms"))]
