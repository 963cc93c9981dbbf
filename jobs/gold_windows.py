"""Gold request stage tables from the edge's window histograms (ingest/request_windows.py).

silver.request_stages holds only the requests shipped whole (OffsetCommits, and every
request of request_log.full_brokers); the stage percentiles come from
silver.request_windows, by merging histograms in Spark SQL (jobs/histogram_sql.py: exact
merges, percentiles within the bucket scheme's 2 %). State and work follow brokers x
request keys x windows, not requests.

- ``gold.request_stages_1m``: per cluster, broker, API and minute, the requests and every
  stage's p50 / p99 / p999. Every request key of the API (Fetch:consumer and
  Fetch:follower, Produce's acks) and every emission of a window is merged;
  controller-listener traffic is left out (it is not client traffic). One more column,
  ``total_excl_remote_p99_ms`` (the p99 of total - remote per request, from its own
  histogram): the slow-broker baselines of the purgatory APIs read it
  (evaluation/inputs/request_windows.py), so an hour of baselines is 60 rows per
  broker and API instead of 360 windows' histograms.
- ``gold.request_keys_1m``: per cluster, broker, request key and minute, the counts,
  bytes, and every stage's p50 / p99 / p999 and max: the split the API rows merge away
  (consumer against follower fetches, Produce by acks).
- ``gold.fleet_stages_1m``: per cluster, request key and minute, the fleet rollup: the
  brokers that served the key, the counts, every stage's percentiles and max over all
  of them, and the merged histograms themselves, so a longer rollup (an hour, a day)
  merges these rows exactly instead of the per-broker ones.

The minute tables come from one streaming aggregation per (minute, cluster, broker, key)
whose rows keep their merged histograms. In append mode a window is emitted once, when
the query's watermark (one for every group) passes its end, so every broker's rows of a
minute arrive in the same micro-batch: the batch is complete for that minute, and the
API rows and the fleet rollup merged from it are exact. The three appends of a batch go
through BatchAppends, so a batch replayed after a restart is written once. The watermark
is request_windows' lateness bound: a late delta the agent sends within it is in the
minute; a minute's rows are final about that long after it ends. The detectors read the
10-s windows from silver.request_windows themselves (evaluation/inputs/request_windows.py).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from core import signals
from infra.lake import Lake, skipping_properties
from jobs.batch_appends import BatchAppends
from jobs.gold import silver_stream
from jobs.histogram_sql import QUANTILES, quantile_label, stage_percentiles

# The seven stage timings of the stage tables; the histograms also hold total_minus_remote,
# which only gold.request_stages_1m's total_excl_remote_p99_ms shows.
STAGES = ("total", *signals.STAGES)
OWN_TIME = "total_minus_remote"
OWN_TIME_P99 = "total_excl_remote_p99_ms"
COUNTS = ("requests", "errors", "request_bytes", "response_bytes")
_WINDOW = "w"


def _client_windows(windows: DataFrame, window: str, watermark: str) -> DataFrame:
    """Window rows of client traffic with `w`, the gold window of their start (ts)."""
    df = windows.where(~F.coalesce(F.col("is_controller_traffic"), F.lit(False)))
    if df.isStreaming:
        df = df.withWatermark("ts", watermark)
    return df.withColumn(_WINDOW, F.window("ts", window))


def _percentile_columns(stages=STAGES) -> list[str]:
    return [f"{s}_{quantile_label(q)}_ms" for s in stages for q in QUANTILES]


def _framed(df: DataFrame, group_cols: list[str]) -> DataFrame:
    """window_start / window_end from the window struct, then the group's other columns."""
    rest = [c for c in df.columns if c != _WINDOW]
    return df.select(F.col(f"{_WINDOW}.start").alias("window_start"),
                     F.col(f"{_WINDOW}.end").alias("window_end"), *rest)


def key_minutes(windows: DataFrame, watermark: str = "330 seconds") -> DataFrame:
    """Per minute, cluster, broker, API and key: counts, percentiles, max and the merged
    histograms (the rollups start from them). Batch or stream."""
    df = _client_windows(windows, "1 minute", watermark)
    group = [_WINDOW, "cluster", "broker", "api", "key"]
    out = stage_percentiles(df, group, (*STAGES, OWN_TIME), QUANTILES, totals=COUNTS)
    return _framed(out, group).withColumn("date", F.to_date("window_start"))


def _max_columns(stages=STAGES) -> list[str]:
    return [f"{s}_max_ms" for s in stages]


def request_keys(minutes: DataFrame) -> DataFrame:
    """gold.request_keys_1m rows from `key_minutes` rows: the histograms dropped."""
    return minutes.select("window_start", "window_end", "cluster", "broker", "api", "key",
                          *COUNTS, *_percentile_columns(), *_max_columns(), "date")


def api_minutes(minutes: DataFrame) -> DataFrame:
    """gold.request_stages_1m rows from `key_minutes` rows: the keys of each API merged."""
    group = ["window_start", "window_end", "cluster", "broker", "api"]
    out = stage_percentiles(minutes, group, (*STAGES, OWN_TIME), QUANTILES,
                            totals=("requests",), sum_and_max=False, keep_histograms=False)
    return out.select(*group, "requests", *_percentile_columns(),
                      F.col(f"{OWN_TIME}_p99_ms").alias(OWN_TIME_P99)).withColumn(
        "date", F.to_date("window_start"))


def fleet_minutes(minutes: DataFrame) -> DataFrame:
    """gold.fleet_stages_1m rows from `key_minutes` rows: per cluster, key and minute, every
    broker merged; the merged histograms kept."""
    group = ["window_start", "window_end", "cluster", "api", "key"]
    out = stage_percentiles(minutes, group, STAGES, QUANTILES, totals=COUNTS,
                            extra={"brokers": F.count_distinct("broker")})
    hist = [c for s in STAGES for c in (f"{s}_buckets", f"{s}_counts")]
    return out.select(*group, "brokers", *COUNTS, *_percentile_columns(), *_max_columns(),
                      *hist).withColumn("date", F.to_date("window_start"))


# The minute tables, each made from the batch's `key_minutes` rows by its function.
MINUTE_TABLES = {"request_stages_1m": api_minutes, "request_keys_1m": request_keys,
                 "fleet_stages_1m": fleet_minutes}


def write_minute_batch(lake: Lake, appends: BatchAppends, minutes: DataFrame,
                       batch_id: int) -> None:
    """One micro-batch of finished minutes (`key_minutes` rows) into the three tables."""
    minutes = minutes.persist()
    try:
        if minutes.isEmpty():
            return
        for table, make in MINUTE_TABLES.items():
            # merge_schema: a gold.request_stages_1m written by an older kmon lacks
            # OWN_TIME_P99.
            appends.append(make(minutes), lake.table("gold", table), f"gold_windows_{table}",
                           batch_id, partition_by=("date",), merge_schema=True)
    finally:
        minutes.unpersist()


def ensure_minute_tables(spark: SparkSession, lake: Lake) -> None:
    """Create the minute tables, empty, where they are not there: their query writes a
    table at its first finished minute, minutes after the start, and a query of the
    report or the cookbook before that must find the table, not fail on a missing one."""
    from delta.tables import DeltaTable

    empty = key_minutes(spark.read.format("delta").load(
        lake.table("silver", "request_windows")).limit(0))
    for table, make in MINUTE_TABLES.items():
        path = lake.table("gold", table)
        if not DeltaTable.isDeltaTable(spark, path):
            table_df = make(empty).limit(0)
            (table_df.write.format("delta").options(**skipping_properties(table_df.columns))
             .partitionBy("date").save(path))


def start_minute_tables(spark: SparkSession, lake: Lake, watermark: str,
                        trigger: dict | None = None):
    """The minute tables' streaming query over silver.request_windows."""
    ensure_minute_tables(spark, lake)
    windows = silver_stream(spark, lake, "request_windows")
    appends = BatchAppends(spark)
    writer = (key_minutes(windows, watermark).writeStream.queryName("gold_request_windows_1m")
              .option("checkpointLocation", lake.checkpoint("gold_request_windows_1m"))
              .outputMode("append")
              .foreachBatch(lambda df, batch_id: write_minute_batch(lake, appends, df,
                                                                    batch_id)))
    return writer.trigger(**(trigger or {"processingTime": "60 seconds"})).start()


_STAGE_PERCENTILES = ("Percentiles of each stage: total, request_queue, local, remote, "
                      "throttle, response_queue, send (ms; from merged histograms, within "
                      "2 % of the exact value)")
_COUNT_DOCS = {
    "requests": "Requests completed in the minute",
    "errors": "Of those, responses with an error code",
    "request_bytes": "Bytes of the requests",
    "response_bytes": "Bytes of the responses",
}
GOLD_COLUMNS = {
    "request_stages_1m": {
        "window_start": "Start of the minute (UTC)",
        "window_end": "End of the minute (exclusive)",
        "cluster": "Watched cluster",
        "broker": "Broker node id",
        "api": "Request type (Produce, Fetch, ...)",
        "requests": "Requests completed in the minute",
        "<stage>_p50_ms / _p99_ms / _p999_ms": _STAGE_PERCENTILES,
        "date": "Partition column: the minute's UTC date",
        OWN_TIME_P99: "p99 of (total - remote) per request, the own time the slow-broker "
                      "rule judges for purgatory APIs (Fetch, JoinGroup, SyncGroup): its "
                      "baselines read it; floored at 0 (ms, within 2 %)",
    },
    "request_keys_1m": {
        "window_start": "Start of the minute (UTC)",
        "window_end": "End of the minute (exclusive)",
        "cluster": "Watched cluster",
        "broker": "Broker node id",
        "api": "Request type (Produce, Fetch, ...)",
        "key": "Request key: the API, Fetch split into Fetch:consumer and Fetch:follower, "
               "Produce by acks (Produce:acks=-1, ...)",
        **_COUNT_DOCS,
        "<stage>_p50_ms / _p99_ms / _p999_ms": _STAGE_PERCENTILES,
        "<stage>_max_ms": "The slowest request of each stage (ms, exact)",
        "date": "Partition column: the minute's UTC date",
    },
    "fleet_stages_1m": {
        "window_start": "Start of the minute (UTC)",
        "window_end": "End of the minute (exclusive)",
        "cluster": "Watched cluster",
        "api": "Request type",
        "key": "Request key (as in request_keys_1m)",
        "brokers": "Brokers that served the key in the minute",
        **_COUNT_DOCS,
        "<stage>_p50_ms / _p99_ms / _p999_ms": _STAGE_PERCENTILES + " over every broker",
        "<stage>_max_ms": "The slowest request of each stage in the fleet (ms)",
        "<stage>_buckets / _counts": "The merged histogram (bucket ids ascending, counts): "
                                     "a longer rollup merges these (jobs/histogram_sql.py)",
        "date": "Partition column: the minute's UTC date",
    },
}
