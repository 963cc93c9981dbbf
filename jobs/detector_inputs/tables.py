"""The lake reads the detector inputs share: a time range, a table that may not exist yet,
the range filters of silver and gold, and the two tables several inputs come from
(silver.log_events and silver.broker_metrics).

Nothing later than the range end is ever read, so a replay over history sees what a live
evaluation at that time would have seen.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra.lake import Lake

# The kinds of the shared log-event read; cleaner_run is read on its own, over the
# growing-partition rule's window (compaction.read_cleaner_runs).
LOG_EVENT_KINDS = ("unclean_election", "truncation", "isr_shrink", "isr_update", "isr_expand",
                   "leader_change", "coordinator_load", "broker_fenced", "broker_shutdown",
                   "broker_registered", "broker_unfenced")


@dataclass(frozen=True)
class TimeRange:
    """[start_ms, end_ms): the range one evaluation judges."""
    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if self.end_ms <= self.start_ms:
            raise ValueError(f"empty time range [{self.start_ms}, {self.end_ms})")

    def back(self, seconds: float) -> "TimeRange":
        """The same end, starting `seconds` earlier (context read before the range)."""
        return TimeRange(self.start_ms - int(seconds * 1000), self.end_ms)


def table(spark: SparkSession, lake: Lake, layer: str, name: str) -> DataFrame | None:
    """The Delta table, or None while it does not exist (its input is then empty)."""
    from delta.tables import DeltaTable

    path = lake.table(layer, name)
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return spark.read.format("delta").load(path)


def sorted_rows(rows: Iterable[Any], keys: Sequence[str]) -> list:
    """Collected rows in Spark's ascending order of `keys` (nulls first). The reads sort
    their few rows here: an orderBy before collect costs a sampling job and a shuffle."""
    return sorted(rows, key=lambda x: tuple((x[k] is not None, x[k]) for k in keys))


def int_or_none(x: Any) -> int | None:
    return None if x is None else int(x)


def _date(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).date()


def silver_range(df: DataFrame, r: TimeRange) -> DataFrame:
    """Rows with ts_ms in the range; the date filter lets Delta skip other partitions."""
    return df.where((F.col("date") >= F.lit(_date(r.start_ms)))
                    & (F.col("date") <= F.lit(_date(r.end_ms)))
                    & (F.col("ts_ms") >= r.start_ms) & (F.col("ts_ms") < r.end_ms))


def gold_windows(df: DataFrame, r: TimeRange) -> DataFrame:
    """Windows that start at or after the range start and end at or before its end."""
    return df.where((F.col("date") >= F.lit(_date(r.start_ms)))
                    & (F.col("date") <= F.lit(_date(r.end_ms)))
                    & (F.unix_millis("window_start") >= r.start_ms)
                    & (F.unix_millis("window_end") <= r.end_ms))


def in_range(df: DataFrame, r: TimeRange) -> DataFrame:
    """Rows of an already read frame with ts_ms in the range (no date filter to add)."""
    return df.where((F.col("ts_ms") >= r.start_ms) & (F.col("ts_ms") < r.end_ms))


def read_log_events(spark: SparkSession, lake: Lake, r: TimeRange) -> list[dict]:
    """The log events the detectors use (few: not the `other` lines), as dicts."""
    df = table(spark, lake, "silver", "log_events")
    if df is None:
        return []
    cols = ("cluster", "broker", "ts_ms", "kind", "topic", "partition", "topic_id", "offset",
            "high_watermark", "old_leader", "new_leader", "leader_epoch", "isr_before",
            "isr_after", "seconds", "reduction_pct", "subject_broker")
    return [x.asDict() for x in silver_range(df, r).where(F.col("kind").isin(*LOG_EVENT_KINDS))
            .select(*cols).collect()]


def broker_metrics(spark: SparkSession, lake: Lake, r: TimeRange,
                   metrics: Iterable[str]) -> DataFrame | None:
    """silver.broker_metrics rows of the given series in the range."""
    df = table(spark, lake, "silver", "broker_metrics")
    if df is None:
        return None
    return silver_range(df, r).where(F.col("metric").isin(*metrics))
