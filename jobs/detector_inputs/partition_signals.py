"""The offset-rewind and unclean-election detectors' partition signals: group commits,
partition offsets, client resets, log truncations and group membership.

- `OffsetCommit` <- silver.offset_commits without tombstones, commit_ms = commit_ts_ms
  (ts_ms when null), in (commit_ms, source_partition, source_offset) order; per group and
  partition the last commit of the COMMIT_SEED_S before start_ms is kept as the starting
  position. Only the group/partitions that matter are collected: those whose committed
  offset went down in the range (Spark finds them with a window function), those a client
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
- `CoordinatorLoad` <- silver.log_events kind coordinator_load (offsets_partition =
  partition, leader_epoch), from evidence_window_s before start_ms; the commits carry
  their group's __consumer_offsets partition (OffsetCommit.source_partition).
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Mapping

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

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
from infra.lake import Lake
from jobs.detector_inputs.tables import TimeRange, int_or_none, silver_range, sorted_rows, table

COMMIT_SEED_S = 3600   # commits read before the range: each group/partition's start

COMMIT_KEY = ("cluster", "group_id", "topic", "partition")
COMMIT_ORDER = ("commit_ms", "source_partition", "source_offset")
_COMMIT_KEY_TYPES = {"cluster": "string", "group_id": "string", "topic": "string",
                     "partition": "int"}


# --- client resets ---------------------------------------------------------------------------

def client_reset_from_row(row: Mapping[str, Any]) -> ClientOffsetReset:
    """One silver.client_offset_events row as the rules' ClientOffsetReset."""
    reason, target = client_event_meaning(row["kind"], row.get("reset_target"), row.get("reason"))
    return ClientOffsetReset(
        cluster=row["cluster"], topic=row["topic"], partition=int(row["partition"]),
        event_ms=int(row["ts_ms"]), group=row.get("group_id"), client_id=row.get("client_id"),
        from_offset=int_or_none(row.get("from_offset")),
        to_offset=int_or_none(row.get("to_offset")), target=target, reason=reason)


def read_resets(spark: SparkSession, lake: Lake, r: TimeRange) -> list[ClientOffsetReset]:
    df = table(spark, lake, "silver", "client_offset_events")
    if df is None:
        return []
    rows = (silver_range(df, r)
            .select("cluster", "ts_ms", "client_id", "group_id", "topic", "partition", "kind",
                    "from_offset", "to_offset", "reset_target", "reason")
            .collect())
    return [client_reset_from_row(x.asDict()) for x in sorted_rows(rows, ("ts_ms",))]


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
                  key=lambda t: (t.event_ms, t.cluster, t.topic, t.partition, t.broker))


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


def read_commit_requests(spark: SparkSession, lake: Lake, r: TimeRange,
                         groups: Iterable[tuple[str, str]]) -> list[CommitRequest]:
    """The OffsetCommit request-log lines of the given (cluster, group)s in the range, one
    per committed partition (a line naming its topic by id only is left out)."""
    wanted = sorted(set(groups))
    df = table(spark, lake, "silver", "request_stages") if wanted else None
    if df is None or "committed" not in df.columns:
        return []
    keys = spark.createDataFrame(wanted, "cluster string, group_id string")
    rows = (silver_range(df, r).where((F.col("api_key") == 8) & F.col("group_id").isNotNull())
            .join(F.broadcast(keys), ["cluster", "group_id"], "left_semi")
            .select("cluster", "broker", "ts_ms", "group_id", "member_id", "generation",
                    "client_id", "error_codes", "total_ms", F.explode("committed").alias("c"))
            .where(F.col("c.topic").isNotNull())
            .select("cluster", "broker", "ts_ms", "group_id", "member_id", "generation",
                    "client_id", "error_codes", "total_ms", "c.topic", "c.partition",
                    "c.offset")
            .collect())
    return [commit_request_from_row(x.asDict())
            for x in sorted_rows(rows, ("cluster", "group_id", "ts_ms", "broker", "topic",
                                        "partition"))]


# --- commits ---------------------------------------------------------------------------------

def read_commits(spark: SparkSession, lake: Lake, r: TimeRange,
                 partitions: Iterable[tuple[str, str, int]] = (),
                 group_partitions: Iterable[tuple[str, str, str, int]] = (),
                 seed: "CommitSeedCache | None" = None) -> list[OffsetCommit]:
    """Commits of the group/partitions that went down in the range, plus those of the given
    partitions (every group) and group/partitions; each with its last commit before the
    range as its starting position. `seed`: the live detector's starting positions (None
    reads COMMIT_SEED_S of silver before the range)."""
    df = table(spark, lake, "silver", "offset_commits")
    if df is None:
        return []
    rows = (_commit_rows(df, r.back(COMMIT_SEED_S)) if seed is None
            else seed.commits(df, r))
    commits = _went_down(_commits_from_last_before(rows, r))
    commits = _also_wanted(spark, commits, sorted(set(partitions)),
                           ["cluster", "topic", "partition"], "_tp")
    commits = _also_wanted(spark, commits, sorted(set(group_partitions)), list(COMMIT_KEY),
                           "_gtp")
    rows = (commits.where("_wanted")
            .select(*COMMIT_KEY, "offset", "commit_ms", "leader_epoch", "source_partition",
                    "source_offset")
            .collect())
    return [OffsetCommit(cluster=x["cluster"], group=x["group_id"], topic=x["topic"],
                         partition=int(x["partition"]), offset=int(x["offset"]),
                         commit_ms=int(x["commit_ms"]),
                         leader_epoch=int_or_none(x["leader_epoch"]),
                         source_partition=int_or_none(x["source_partition"]))
            for x in sorted_rows(rows, (*COMMIT_KEY, *COMMIT_ORDER))]


def _commit_rows(df: DataFrame, r: TimeRange) -> DataFrame:
    """silver.offset_commits rows of the range that set an offset (tombstones and null
    offsets left out), with commit_ms, in the columns the commit read uses."""
    return (silver_range(df, r)
            .where(~F.col("is_tombstone") & F.col("offset").isNotNull())
            .select(*COMMIT_KEY, "offset", "ts_ms", "leader_epoch", "source_partition",
                    "source_offset", F.coalesce("commit_ts_ms", "ts_ms").alias("commit_ms")))


def _latest_first(*extra: str) -> Window:
    return Window.partitionBy(*COMMIT_KEY, *extra).orderBy(
        *[F.col(c).desc() for c in COMMIT_ORDER])


def _commits_from_last_before(commits: DataFrame, r: TimeRange) -> DataFrame:
    """The range's commits and, per group and partition, the last commit before it.
    `commits`: `_commit_rows` from COMMIT_SEED_S before the range (or a seed's)."""
    return (commits.withColumn("_pre", F.col("ts_ms") < r.start_ms)
            .withColumn("_rn", F.row_number().over(_latest_first("_pre")))
            .where(~F.col("_pre") | (F.col("_rn") == 1)))


class CommitSeedCache:
    """The live detector's commit read, incremental. Every evaluation needs each group and
    partition's last commit before its range (its starting position), over COMMIT_SEED_S:
    read whole, that is an hour of silver.offset_commits, hundreds of small files on a
    live lake. In the live matrix that read took 16-36 s of evaluations that took 28-54 s,
    and the rewinds' findings waited for it.

    This keeps, per group and partition, the last commit before a boundary (the range
    start rounded down to `step_s`) in Spark's memory (localCheckpoint): an evaluation reads
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
        self._seed: DataFrame | None = None
        self._until_ms = 0            # the seed holds the last commits before this time
        self.silver_from_ms: int | None = None   # where the last evaluation's silver read began

    def commits(self, df: DataFrame, r: TimeRange) -> DataFrame:
        """`_commit_rows` for the range and the COMMIT_SEED_S before it, as far as the range
        and its starting positions go: the seed's rows and silver's from the boundary."""
        boundary = r.start_ms // self.step_ms * self.step_ms
        with self._lock:
            if self._seed is None or boundary < self._until_ms:
                self._replace(_last_per_key(_commit_rows(
                    df, TimeRange(r.start_ms - COMMIT_SEED_S * 1000, boundary))), boundary)
            elif boundary > self._until_ms:
                self._replace(_last_per_key(self._seed.unionByName(_commit_rows(
                    df, TimeRange(self._until_ms, boundary)))), boundary)
            seed, until = self._seed, self._until_ms
            self.silver_from_ms = until
        return (seed.where(F.col("ts_ms") >= r.start_ms - COMMIT_SEED_S * 1000)
                .unionByName(_commit_rows(df, TimeRange(until, r.end_ms))))

    def _replace(self, seed: DataFrame, until_ms: int) -> None:
        from jobs.silver import release

        old, self._seed = self._seed, seed.localCheckpoint(eager=True)
        self._until_ms = until_ms
        if old is not None:
            release(old)


def _last_per_key(commits: DataFrame) -> DataFrame:
    """Per group and partition, its last commit."""
    return (commits.withColumn("_rn", F.row_number().over(_latest_first()))
            .where(F.col("_rn") == 1).drop("_rn"))


def _went_down(commits: DataFrame) -> DataFrame:
    """_wanted: the group/partition's committed offset went down at some commit."""
    in_order = Window.partitionBy(*COMMIT_KEY).orderBy(*COMMIT_ORDER)
    whole = Window.partitionBy(*COMMIT_KEY)
    dropped = (F.col("offset") < F.lag("offset").over(in_order)).cast("int")
    return (commits.withColumn("_drop", F.coalesce(dropped, F.lit(0)))
            .withColumn("_wanted", F.max("_drop").over(whole) > 0))


def _also_wanted(spark: SparkSession, commits: DataFrame, keys: list[tuple],
                 key_columns: list[str], mark: str) -> DataFrame:
    """_wanted also for the commits whose key_columns are one of `keys` (none: unchanged)."""
    if not keys:
        return commits
    schema = ", ".join([*(f"{c} {_COMMIT_KEY_TYPES[c]}" for c in key_columns), f"{mark} boolean"])
    marks = spark.createDataFrame([(*k, True) for k in keys], schema)
    commits = commits.join(F.broadcast(marks), key_columns, "left")
    return commits.withColumn("_wanted", F.col("_wanted") | F.coalesce(mark, F.lit(False)))


# --- group membership and partition offsets --------------------------------------------------

def read_memberships(spark: SparkSession, lake: Lake, r: TimeRange,
                     groups: Iterable[tuple[str, str]]) -> list[GroupMembership]:
    """Membership changes of the given (cluster, group)s in the range, each group's state
    before the range carried forward to the range start."""
    wanted = sorted(set(groups))
    df = table(spark, lake, "silver", "group_members")
    if df is None or not wanted:
        return []
    keys = spark.createDataFrame(wanted, "cluster string, group_id string")
    rows = (silver_range(df, r.back(COMMIT_SEED_S)).join(F.broadcast(keys),
                                                         ["cluster", "group_id"])
            .select("cluster", "group_id", "ts_ms", "source_partition", "source_offset",
                    "member_count")
            .collect())
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


def read_partition_offsets(spark: SparkSession, lake: Lake, r: TimeRange,
                           partitions: Iterable[tuple[str, str, int]]) -> list[PartitionOffsets]:
    tps = sorted(set(partitions))
    df = table(spark, lake, "silver", "partition_offsets") if tps else None
    if df is None:
        return []
    keys = spark.createDataFrame(tps, "cluster string, topic string, partition int")
    rows = (silver_range(df, r).join(F.broadcast(keys), ["cluster", "topic", "partition"],
                                     "left_semi")
            .select("cluster", "topic", "partition", "ts_ms", "earliest_offset", "latest_offset")
            .collect())
    return [PartitionOffsets(cluster=x["cluster"], topic=x["topic"], partition=int(x["partition"]),
                             observed_ms=int(x["ts_ms"]), end_offset=int(x["latest_offset"]),
                             log_start_offset=int_or_none(x["earliest_offset"]))
            for x in sorted_rows(rows, ("cluster", "topic", "partition", "ts_ms"))]
