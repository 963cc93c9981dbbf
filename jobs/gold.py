"""Gold: windowed aggregates over silver, the tables dashboards, detectors and SQL start from.

The request stage tables come from the edge's window histograms (jobs/gold_windows.py);
this module holds the offset tables and the streaming helpers they share:

- ``gold.offset_commits_1m``: per cluster / group / topic / partition / minute: commits,
  the last committed offset, the lowest and highest, tombstones.
- ``gold.offset_lag_1m``: per cluster / group / topic / partition / minute: the partition's
  latest offset (from partition_offsets) against the group's last commit at or before the
  minute's end, and the lag between them. Written by MERGE on its key, so a replayed
  batch rewrites the same rows.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra.lake import Lake, skipping_properties

# Commits can arrive late when the offsets reader catches up after being down; the minute
# table keeps them for this long (later ones are counted in the query progress).
COMMITS_WATERMARK = "10 minutes"


def offset_commits_per_minute(commits: DataFrame, watermark: str = "10 minutes") -> DataFrame:
    if commits.isStreaming:
        commits = commits.withWatermark("ts", watermark)
    live = ~F.col("is_tombstone")
    agg = (commits.groupBy(F.window("ts", "1 minute").alias("w"), "cluster", "group_id",
                           "topic", "partition")
           .agg(F.sum(live.cast("long")).alias("commits"),
                F.sum(F.col("is_tombstone").cast("long")).alias("tombstones"),
                F.max_by(F.when(live, F.col("offset")), F.when(live, F.col("ts_ms"))).alias("last_offset"),
                F.min(F.when(live, F.col("offset"))).alias("min_offset"),
                F.max(F.when(live, F.col("offset"))).alias("max_offset"),
                F.max("ts_ms").alias("last_commit_ms")))
    return (agg.select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                       "cluster", "group_id", "topic", "partition", "commits", "tombstones",
                       "last_offset", "min_offset", "max_offset", "last_commit_ms")
            .withColumn("date", F.to_date("window_start")))


def offset_lag(ends: DataFrame, commits: DataFrame) -> DataFrame:
    """Per minute: latest end offset of each partition against each group's last commit.

    `ends` are partition_offsets rows (any range); `commits` are offset_commits rows for the
    same topic-partitions up to the last minute's end. The commit used is the newest one at
    or before the minute's end (an as-of join), so lag is what it was at that minute.
    """
    per_min = (ends.groupBy(F.window("ts", "1 minute").alias("w"), "cluster", "topic",
                            "partition")
               .agg(F.max_by("latest_offset", "ts_ms").alias("end_offset"),
                    F.max_by("earliest_offset", "ts_ms").alias("start_offset"))
               .select(F.col("w.start").alias("window_start"),
                       F.col("w.end").alias("window_end"), "cluster", "topic", "partition",
                       "end_offset", "start_offset"))
    c = commits.where(~F.col("is_tombstone")).select(
        "cluster", "group_id", "topic", "partition", "offset", "ts_ms", "ts")
    joined = per_min.alias("e").join(
        c.alias("c"),
        (F.col("e.cluster") == F.col("c.cluster")) & (F.col("e.topic") == F.col("c.topic"))
        & (F.col("e.partition") == F.col("c.partition")) & (F.col("c.ts") < F.col("e.window_end")))
    out = (joined.groupBy("e.window_start", "e.window_end", "e.cluster", "e.topic",
                          "e.partition", "c.group_id", "e.end_offset", "e.start_offset")
           .agg(F.max_by("c.offset", "c.ts_ms").alias("committed_offset"),
                F.max("c.ts_ms").alias("last_commit_ms")))
    return (out.withColumn("lag", F.greatest(F.col("end_offset") - F.col("committed_offset"),
                                             F.lit(0)))
            .withColumn("committed_below_start",
                        F.col("committed_offset") < F.col("start_offset"))
            .withColumn("date", F.to_date("window_start"))
            .select("window_start", "window_end", "cluster", "group_id", "topic", "partition",
                    "committed_offset", "last_commit_ms", "end_offset", "start_offset", "lag",
                    "committed_below_start", "date"))


def start_append(out: DataFrame, lake: Lake, table: str, trigger: dict | None):
    writer = (out.writeStream.format("delta").queryName(f"gold_{table}")
              .option("checkpointLocation", lake.checkpoint(f"gold_{table}"))
              .partitionBy("date")
              .outputMode("append"))
    return writer.trigger(**(trigger or {"processingTime": "10 seconds"})).start(
        lake.table("gold", table))


def silver_stream(spark: SparkSession, lake: Lake, name: str) -> DataFrame:
    return spark.readStream.format("delta").load(lake.table("silver", name))


def start_offset_commits_1m(spark: SparkSession, lake: Lake, watermark: str,
                            trigger: dict | None = None):
    out = offset_commits_per_minute(silver_stream(spark, lake, "offset_commits"), watermark)
    return start_append(out, lake, "offset_commits_1m", trigger)


LAG_KEY = ("window_start", "cluster", "group_id", "topic", "partition")


def merge_offset_lag(spark: SparkSession, lake: Lake, ends: DataFrame,
                     lookback_days: int = 7) -> None:
    """Recompute lag for the minutes and partitions in `ends` and MERGE it into gold."""
    from delta.tables import DeltaTable

    if ends.isEmpty():
        return
    bounds = ends.agg(F.min("ts").alias("lo"), F.max("ts").alias("hi")).first()
    parts = ends.select("cluster", "topic", "partition").distinct()
    # All end-offset rows of the touched minutes, not just this batch's, so a minute split
    # across batches is recomputed whole.
    all_ends = (spark.read.format("delta").load(lake.table("silver", "partition_offsets"))
                .where(F.col("ts") >= F.date_trunc("minute", F.lit(bounds["lo"])))
                .join(parts, ["cluster", "topic", "partition"], "left_semi"))
    commits = (spark.read.format("delta").load(lake.table("silver", "offset_commits"))
               .where((F.col("ts") <= F.lit(bounds["hi"]) + F.expr("INTERVAL 1 MINUTE"))
                      & (F.col("ts") >= F.lit(bounds["lo"]) - F.expr(f"INTERVAL {lookback_days} DAYS")))
               .join(parts, ["cluster", "topic", "partition"], "left_semi"))
    lag = offset_lag(all_ends, commits)
    path = ensure_offset_lag_table(spark, lake)
    cond = " AND ".join(f"t.{k} = s.{k}" for k in LAG_KEY)
    (DeltaTable.forPath(spark, path).alias("t").merge(lag.alias("s"), cond)
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())


def ensure_offset_lag_table(spark: SparkSession, lake: Lake) -> str:
    """Create gold.offset_lag_1m, empty, if it is not there; return its path. Created at
    start, not by the first batch with rows: a short run (or one whose partition_offsets
    had not arrived yet) otherwise left no table, and the README's lag query failed with
    TABLE_OR_VIEW_NOT_FOUND."""
    from delta.tables import DeltaTable

    path = lake.table("gold", "offset_lag_1m")
    if not DeltaTable.isDeltaTable(spark, path):
        def empty(name: str) -> DataFrame:
            return spark.read.format("delta").load(lake.table("silver", name)).limit(0)
        lag = offset_lag(empty("partition_offsets"), empty("offset_commits")).limit(0)
        (lag.write.format("delta").options(**skipping_properties(lag.columns))
         .partitionBy("date").save(path))
    return path


def start_offset_lag_1m(spark: SparkSession, lake: Lake, trigger: dict | None = None,
                        lookback_days: int = 7):
    """Each batch of new end offsets recomputes the lag of its minutes (idempotent MERGE)."""
    ensure_offset_lag_table(spark, lake)
    ends = silver_stream(spark, lake, "partition_offsets")
    writer = (ends.writeStream.queryName("gold_offset_lag_1m")
              .option("checkpointLocation", lake.checkpoint("gold_offset_lag_1m"))
              .foreachBatch(lambda df, _id: merge_offset_lag(spark, lake, df, lookback_days)))
    return writer.trigger(**(trigger or {"processingTime": "10 seconds"})).start()


GOLD_COLUMNS = {
    "offset_commits_1m": {
        "window_start": "Start of the minute", "window_end": "End of the minute",
        "cluster": "Watched cluster", "group_id": "Consumer group", "topic": "Topic",
        "partition": "Partition", "commits": "Offset commits in the minute",
        "tombstones": "Offset deletions in the minute",
        "last_offset": "Offset of the minute's last commit",
        "min_offset": "Lowest offset committed in the minute",
        "max_offset": "Highest offset committed in the minute",
        "last_commit_ms": "Time of the minute's last commit or deletion, epoch ms",
        "date": "Partition column",
    },
    "offset_lag_1m": {
        "window_start": "Start of the minute", "window_end": "End of the minute",
        "cluster": "Watched cluster", "group_id": "Consumer group", "topic": "Topic",
        "partition": "Partition",
        "committed_offset": "The group's last commit at or before the minute's end",
        "last_commit_ms": "When that commit was made, epoch ms",
        "end_offset": "The partition's latest offset, last reading in the minute",
        "start_offset": "The partition's earliest offset, last reading in the minute",
        "lag": "end_offset - committed_offset (messages not yet consumed), floor 0",
        "committed_below_start": "The commit points below the log start: the group will hit "
                                 "OffsetOutOfRange and reset",
        "date": "Partition column",
    },
}
